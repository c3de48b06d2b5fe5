# SPDX-License-Identifier: Apache-2.0
"""What the connector reports, as plain dataclasses built from the C records:
completions, directory entries, peeks and listings (with the type and cost of
ABI 1.2), residency events, counters (stats) and the description of the
region and engine in use."""

from dataclasses import dataclass, fields
from typing import Optional, Tuple, Union

from . import _abi
from ._abi import EntryState, Status, status_of
from ._types import read_descriptor

EVENT_KIND = {value: text for _, value, text in _abi.EVENT_TABLE}


def _text(raw):
    return raw.decode("utf-8", "surrogateescape")


def _key(raw):
    """A key as the host gave it: str when its bytes are UTF-8, else the bytes
    themselves, so that a bytes key comes back as bytes and equals it."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw


@dataclass(frozen=True)
class Completion:
    """One finished save (key) or load (transfer_id), as poll reports it once."""

    direction: str  # "save" or "load"
    status: Status  # ECC_OK, or why the copy's bytes are not to be trusted
    key: Union[str, bytes]  # saves: the key (bytes when not UTF-8); loads: ""
    transfer_id: int  # loads: the id given to load; saves: 0
    nbytes: int  # bytes of this entry the copy moved
    elapsed_ns: int  # duration of the whole batched transfer
    batch: int  # the batched transfer's sequence number in its direction, from 1

    @property
    def ok(self):
        return self.status == Status.ECC_OK

    @classmethod
    def from_record(cls, r):
        return cls(_abi.DIRECTION_NAME.get(r.direction, str(r.direction)), status_of(r.status),
                   _key(r.key), r.transfer_id, r.nbytes, r.elapsed_ns, r.batch)


class _Typed:
    """What typed records share: dtype None (and shape ()) is an untyped entry."""

    __slots__ = ()

    @property
    def typed(self):
        return self.dtype is not None


def _meta(meta):
    """(dtype, shape, cost_us, hits) of an ecc_entry_meta_t, or of none."""
    if meta is None:
        return None, (), 0, 0
    dtype, shape = read_descriptor(meta.type)
    return dtype, shape, meta.cost_us, meta.hits


@dataclass(frozen=True)
class Entry(_Typed):
    """A directory entry as reserve, lookup and wait_ready report it. The type and
    cost are the entry's when lookup or wait_ready found it READY, and what
    reserve recorded for RESERVED; untyped and 0 otherwise, or from a library
    or plugin older than ABI 1.2."""

    state: EntryState
    token: int  # reserve RESERVED: the reservation; lookup READY: the pin; else 0
    nbytes: int
    extents: Tuple[Tuple[int, int], ...]  # (first_block, n_blocks) runs, in entry order
    dtype: Optional[str] = None  # "float16", ... (DTYPE_TABLE's names); None: untyped
    shape: Tuple[int, ...] = ()  # outermost first; () when untyped
    cost_us: int = 0  # encoder microseconds a hit saves, as reserved (0: unknown)
    hits: int = 0  # lookups and waits that found it ready since it was stored

    @property
    def n_blocks(self):
        return sum(n for _, n in self.extents)

    @property
    def block_ids(self):
        """The entry's blocks in order, as a list."""
        return [b for first, n in self.extents for b in range(first, first + n)]

    @classmethod
    def from_record(cls, r, meta=None):
        extents = tuple((e.first_block, e.n_blocks) for e in r.extents[:r.n_extents])
        return cls(EntryState(r.state), r.token, r.nbytes, extents, *_meta(meta))


@dataclass(frozen=True)
class Peeked(_Typed):
    """One key as peek reports it: nothing pinned, nothing counted."""

    state: EntryState  # ABSENT, WRITING (reserved by anyone, not yet published) or READY
    pins: int  # live pins (READY), else 0
    nbytes: int  # 0 when ABSENT
    cost_us: int
    hits: int
    dtype: Optional[str]
    shape: Tuple[int, ...]

    @classmethod
    def from_record(cls, r):
        dtype, shape, cost_us, hits = _meta(r.meta)
        return cls(EntryState(r.state), r.pins, r.nbytes, cost_us, hits, dtype, shape)


@dataclass(frozen=True)
class Event:
    """One residency event of the region's ring."""

    kind: str  # "stored", "evicted", "removed" or "reclaimed"
    key: Union[str, bytes]  # str when UTF-8, else the key's bytes
    nbytes: int
    cost_us: int
    seq: int  # per region, from 1, one more per event
    time_ns: int  # CLOCK_REALTIME, ns since the epoch
    instance: int  # the region's instance id: a new one means a new, empty cache

    @classmethod
    def from_record(cls, r):
        return cls(EVENT_KIND.get(r.kind, f"kind {r.kind}"), _key(r.key), r.nbytes, r.cost_us,
                   r.seq, r.time_ns, r.instance)


@dataclass(frozen=True)
class Listed(_Typed):
    """A live directory entry as list reports it (type, cost and hits from ABI 1.2)."""

    key: Union[str, bytes]  # str when UTF-8, else the key's bytes
    state: EntryState  # RESERVED or READY
    pins: int
    nbytes: int
    n_blocks: int
    n_extents: int
    age_ns: int
    idle_ns: int
    dtype: Optional[str] = None
    shape: Tuple[int, ...] = ()
    cost_us: int = 0
    hits: int = 0

    @classmethod
    def from_record(cls, r, meta=None):
        return cls(_key(r.key), EntryState(r.state), r.pins, r.nbytes, r.n_blocks, r.n_extents,
                   r.age_ns, r.idle_ns, *_meta(meta))


@dataclass(frozen=True)
class DirStats:
    """Counters of one direction; hist counts transfers by size (see HIST_BOUNDS)."""

    transfers: int
    entries: int
    descriptors: int
    bytes: int
    busy_ns: int
    failed: int
    hist: Tuple[int, ...]

    @classmethod
    def from_record(cls, r):
        return cls(*(getattr(r, name) for name in _abi.DIR_STATS_FIELDS), tuple(r.hist))


@dataclass(frozen=True)
class DirectoryStats:
    """The region's directory counters (all 0 without a directory): the first five
    are levels, the rest count since the region was made."""

    entries: int
    blocks_used: int
    blocks_free: int
    largest_free_run: int
    pins_live: int
    reservations: int
    dedup_hits: int
    lookups: int
    hits: int
    misses: int
    evictions: int
    removals: int
    pins: int
    reclaimed: int
    full: int

    @classmethod
    def from_record(cls, r):
        return cls(*(getattr(r, f.name) for f in fields(cls)))


@dataclass(frozen=True)
class CacheStats:
    """The region's cache counters of ABI 1.2 (all 0 without a directory, or
    from an older plugin), counted since the region was made."""

    waits: int
    waits_ready: int
    waits_absent: int
    wait_timeouts: int
    encoder_us_saved: int
    events: int
    restarts: int

    @classmethod
    def from_record(cls, r):
        return cls(*(getattr(r, f.name) for f in fields(cls)))


@dataclass(frozen=True)
class Stats:
    """A connector's counters since it was opened, and its region's directory
    and cache."""

    save: DirStats
    load: DirStats
    saves_skipped: int
    pin_ns: int
    directory: DirectoryStats
    cache: CacheStats

    @classmethod
    def from_record(cls, r):
        return cls(DirStats.from_record(r.save), DirStats.from_record(r.load), r.saves_skipped,
                   r.pin_ns, DirectoryStats.from_record(r.directory),
                   CacheStats.from_record(r.cache))


@dataclass(frozen=True)
class Info:
    """The region and engine a connector uses."""

    region_path: str
    creator: bool  # this connector created the region
    block_size: int
    num_blocks: int
    region_bytes: int
    engine: str  # "host" or "cuda"
    engine_detail: str
    role: str  # "producer", "consumer" or "both"
    save_rank: bool  # saves are performed on this rank
    pinned: bool  # the region is registered with the GPU driver
    max_inflight: int
    persist: bool = False  # the region outlives its last process (region.persist)
    restarted: bool = False  # this connector reused a kept region's entries
    policy: str = ""  # the directory's eviction policy, "lru" or "cost"; "" without one

    @classmethod
    def from_record(cls, r):
        return cls(_text(r.region_path), bool(r.creator), r.block_size, r.num_blocks,
                   r.region_bytes, _text(r.engine), _text(r.engine_detail), _text(r.role),
                   bool(r.save_rank), bool(r.pinned), r.max_inflight, bool(r.persist),
                   bool(r.restarted), _text(r.policy))
