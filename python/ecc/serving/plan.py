# SPDX-License-Identifier: Apache-2.0
"""What passes between the scheduler side and the workers, once per step: plain
frozen dataclasses of ints, strs and tuples, so that they pickle across
processes as an engine sends its metadata."""

import enum
from dataclasses import dataclass, field
from typing import Optional, Tuple


class Decision(enum.Enum):
    """What the scheduler side answers for one multimodal item."""

    HIT = "hit"      # in the region and pinned for the ranks: load it, skip the encoder
    SAVE = "save"    # reserved by this instance: encode it, and rank 0 saves it
    DEFER = "defer"  # another process is writing it: ask again next step
    LOCAL = "local"  # encode it here without saving (see Answer.reason)


@dataclass(frozen=True)
class Item:
    """One multimodal item of a request: its place in the request, the content
    hash the engine computed, and the rows (encoder tokens) it yields."""

    request_id: str
    index: int
    content_hash: str
    rows: Optional[int]  # None: not known yet (look only, never reserve)


@dataclass(frozen=True)
class Answer:
    decision: Decision
    key: str
    # LOCAL: "deadline" (deferred past defer_timeout), "full" (no room),
    # "busy" (the directory's lock was held), "error" (a refusal, logged),
    # "absent" (look only: not in the region);
    # DEFER: "writing"; else "".
    reason: str = ""


@dataclass(frozen=True)
class SaveOrder:
    """Rank 0 writes the encoder's output for (request_id, index) into the
    reservation `token` (reserved by the scheduler side)."""

    token: int
    key: str
    request_id: str
    index: int
    dtype: str
    shape: Tuple[int, ...]


@dataclass(frozen=True)
class LoadOrder:
    """Every rank loads the entry pinned as `token` and reports transfer_id."""

    transfer_id: int
    token: int
    key: str
    request_id: str
    index: int
    dtype: str
    shape: Tuple[int, ...]


@dataclass(frozen=True)
class StepMeta:
    """One step's orders for the workers."""

    step: int
    saves: Tuple[SaveOrder, ...] = ()
    loads: Tuple[LoadOrder, ...] = ()


@dataclass(frozen=True)
class Failure:
    """A save (by key) or load (by transfer id) that did not complete. released:
    the rank's pin was given back by the failed copy itself (a polled
    completion), as opposed to a call refused before it started."""

    what: str  # "save" or "load"
    key: str
    transfer_id: int
    status: int
    message: str
    released: bool = True


@dataclass(frozen=True)
class WorkerReport:
    """What one rank did since its last report."""

    rank: int
    saved: Tuple[str, ...] = ()     # keys published
    loaded: Tuple[int, ...] = ()    # transfer ids whose bytes are in place
    failures: Tuple[Failure, ...] = field(default_factory=tuple)
