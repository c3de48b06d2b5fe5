# SPDX-License-Identifier: Apache-2.0
"""The scheduler side of serving (no GPU): for each multimodal item of a step,
hit, save, defer or encode locally; the pins and reservations that decision
takes, until the workers report them done or they are released."""

import logging
import time
from dataclasses import dataclass, field
from typing import Set

from .._abi import EntryState, Status
from ..errors import Busy, EccError, invalid
from .plan import Answer, Decision, Item, LoadOrder, SaveOrder, StepMeta

log = logging.getLogger("ecc.serving")


@dataclass
class ServingStats:
    """Counters of the scheduler side since it was made."""

    hits: int = 0              # items answered HIT
    saves: int = 0             # items answered SAVE (reserved here)
    deferrals: int = 0         # DEFER answers (an item deferred over 3 steps counts 3)
    local_deadline: int = 0    # LOCAL after defer_timeout behind another writer
    local_full: int = 0        # LOCAL: no room in the region
    local_busy: int = 0        # LOCAL: the directory's lock was held past its timeout
    local_error: int = 0       # LOCAL: any other refusal (logged once each)
    saved: int = 0             # saves the workers reported published
    save_failures: int = 0     # saves reported failed (their reservation given up)
    save_timeouts: int = 0     # reservations given up after save_timeout without a report
    loads_done: int = 0        # loads every rank reported
    load_failures: int = 0     # (load, rank) failures reported
    unused_pins: int = 0       # pins taken for an item the step did not schedule
    unused_reservations: int = 0
    ttl_releases: int = 0      # ranks of pins released after pin_ttl without a report


@dataclass
class _Held:
    """A tentative pin or reservation, taken by query, not yet in a step."""

    item: object
    token: int
    shape: tuple


@dataclass
class _SentLoad:
    order: LoadOrder
    sent: float
    ranks_left: Set[int] = field(default_factory=set)


@dataclass
class _SentSave:
    order: SaveOrder
    sent: float


class SchedulerSide:
    """One per scheduler (engine instance). `ranks`: how many worker ranks
    load each hit (TP x PCP); each releases its own rank of the pin.
    defer_timeout: seconds an item may wait behind another process's write
    before it is encoded here; pin_ttl and save_timeout: seconds after which
    a load or save no rank reported is given up (a lost worker)."""

    def __init__(self, connector, namespace, ranks=1, defer_timeout=5.0, pin_ttl=120.0,
                 save_timeout=120.0, cost_us=None, clock=time.monotonic):
        if isinstance(ranks, bool) or not isinstance(ranks, int) or ranks < 1:
            raise invalid(f"SchedulerSide: ranks must be an int >= 1, not {ranks!r}")
        for name, value in (("defer_timeout", defer_timeout), ("pin_ttl", pin_ttl),
                            ("save_timeout", save_timeout)):
            if not isinstance(value, (int, float)) or value < 0:
                raise invalid(f"SchedulerSide: {name} must be seconds >= 0, not {value!r}")
        self._c, self.namespace, self.ranks = connector, namespace, ranks
        self.defer_timeout, self.pin_ttl, self.save_timeout = defer_timeout, pin_ttl, save_timeout
        self._cost_us, self._clock = cost_us, clock
        self.stats = ServingStats()
        self.step = 0
        self._next_transfer = 1
        self._answers = {}         # (request, index) -> Answer, this step
        self._pins = {}            # (request, index) -> _Held, tentative
        self._reserved = {}        # (request, index) -> _Held, tentative
        self._loads, self._saves = [], []  # confirmed this step
        self._deferred = {}        # (request, index) -> when it was first deferred
        self._sent_loads = {}      # transfer id -> _SentLoad
        self._sent_saves = {}      # key -> _SentSave

    # ---- one step ----

    def query(self, item):
        """The Answer for an item this step; asked again, the same answer (and
        nothing more taken). Never blocks beyond the directory's own lock."""
        at = (item.request_id, item.index)
        answer = self._answers.get(at)
        if answer is None:
            answer = self._decide(item, at)
            self._answers[at] = answer
        return answer

    def look(self, content_hash):
        """For engines that ask by content alone, before they name the request
        (vLLM's has_cache_item): HIT (pinned for the ranks until allocated
        names the request, or the step ends), DEFER while another process
        writes it, else LOCAL with reason "absent" (nothing is reserved: a
        sized allocated() does that)."""
        at = ("", content_hash)
        answer = self._answers.get(at)
        if answer is None:
            answer = self._decide(Item("", 0, content_hash, None), at)
            self._answers[at] = answer
        return answer

    def allocated(self, request_id, index, content_hash=None, rows=None):
        """The step schedules this item. A HIT (from query, or from look of
        content_hash) becomes a load of every rank and answers Decision.HIT; a
        SAVE a save of rank 0 (Decision.SAVE). An item neither query nor look
        answered HIT or SAVE is reserved now when its rows are given (SAVE, or
        None when it cannot be: another writer, no room; the engine encodes
        it anyway). None when there is nothing to confirm."""
        at = (request_id, index)
        held = self._pins.pop(at, None)
        if held is None and content_hash is not None:
            held = self._pins.pop(("", content_hash), None)
            if held is not None:
                self._answers.pop(("", content_hash), None)
                held.item = Item(request_id, index, content_hash, held.shape[0])
        if held is not None:
            self._loads.append(self._load_order(held))
            return Decision.HIT
        held = self._reserved.pop(at, None)
        if held is None and rows is not None and at not in self._answers:
            if self.query(Item(request_id, index, content_hash, rows)).decision is Decision.SAVE:
                held = self._reserved.pop(at)
        if held is None:
            return None
        key = self.namespace.key(held.item.content_hash)
        self._saves.append(SaveOrder(held.token, key, request_id, index, self.namespace.dtype,
                                     held.shape))
        return Decision.SAVE

    def build_step(self):
        """The step's StepMeta. What query took that the step did not schedule
        is given back; loads and saves no worker reported in time are given up."""
        now = self._clock()
        for held in self._pins.values():
            self._unpin(held.token, self.ranks)
            self.stats.unused_pins += 1
        for held in self._reserved.values():
            self._abort(held.token)
            self.stats.unused_reservations += 1
        meta = StepMeta(self.step, tuple(self._saves), tuple(self._loads))
        for order in meta.loads:
            self._sent_loads[order.transfer_id] = _SentLoad(order, now, set(range(self.ranks)))
        for order in meta.saves:
            self._sent_saves[order.key] = _SentSave(order, now)
        self._expire(now)
        self._answers, self._pins, self._reserved = {}, {}, {}
        self._loads, self._saves = [], []
        self.step += 1
        return meta

    def update(self, reports):
        """Take the workers' WorkerReports (each rank's, in any order)."""
        for report in reports:
            if not 0 <= report.rank < self.ranks:
                raise invalid(f"SchedulerSide.update: rank {report.rank} is not one of the "
                              f"{self.ranks} ranks this scheduler pins for")
            for key in report.saved:
                if self._sent_saves.pop(key, None) is not None:
                    self.stats.saved += 1
            for tid in report.loaded:
                self._rank_done(tid, report.rank)
            for failure in report.failures:
                self._failed(report.rank, failure)

    def finished(self, request_id):
        """A request finished, was aborted or preempted: what was taken for it
        and not yet sent to the workers is given back. Sent orders are the
        workers' to complete (each rank releases its own pin)."""
        for at in [a for a in self._pins if a[0] == request_id]:
            self._unpin(self._pins.pop(at).token, self.ranks)
            self.stats.unused_pins += 1
        for at in [a for a in self._reserved if a[0] == request_id]:
            self._abort(self._reserved.pop(at).token)
            self.stats.unused_reservations += 1
        for order in [o for o in self._loads if o.request_id == request_id]:
            self._unpin(order.token, self.ranks)
            self.stats.unused_pins += 1
        for order in [o for o in self._saves if o.request_id == request_id]:
            self._abort(order.token)
            self.stats.unused_reservations += 1
        self._loads = [o for o in self._loads if o.request_id != request_id]
        self._saves = [o for o in self._saves if o.request_id != request_id]
        for table in (self._deferred, self._answers):
            for at in [a for a in table if a[0] == request_id]:
                del table[at]

    def pending(self):
        """(loads, saves) sent and not yet reported by every rank."""
        return len(self._sent_loads), len(self._sent_saves)

    def close(self):
        """Give back everything this side still holds: tentative pins and
        reservations, and the reservations of saves never reported."""
        for request_id in {a[0] for a in list(self._pins) + list(self._reserved)}:
            self.finished(request_id)
        for sent in self._sent_saves.values():
            self._abort(sent.order.token)
        self._sent_saves.clear()

    # ---- deciding ----

    def _decide(self, item, at):
        ns = self.namespace
        key = ns.key(item.content_hash)
        sized = item.rows is not None
        if sized and (isinstance(item.rows, bool) or not isinstance(item.rows, int) or
                      item.rows <= 0):
            raise invalid(f"SchedulerSide.query: item {at} has {item.rows!r} rows, not an int "
                          f"> 0")
        shape = (item.rows, ns.hidden) if sized else None
        try:
            answer = self._look(item, at, key, shape)
            if answer is None:
                answer = self._reserve(item, at, key, shape) if sized else \
                    self._absent_or_writing(at, key)
        except Busy as e:
            return self._local(key, "busy" if "its lock" in e.message else "full")
        except EccError as e:
            log.warning("ecc.serving: %s: %s; encoding it here", key, e)
            return self._local(key, "error")
        if answer.decision is not Decision.DEFER:
            self._deferred.pop(at, None)
        return answer

    def _look(self, item, at, key, shape):
        entry = self._c.lookup([key], ranks=self.ranks)[0]
        if entry.state == EntryState.READY:
            ns = self.namespace
            fits = entry.dtype == ns.dtype and len(entry.shape) == 2 and \
                entry.shape[1] == ns.hidden and (shape is None or tuple(entry.shape) == shape)
            if not fits:
                self._unpin(entry.token, self.ranks)
                log.warning("ecc.serving: %s is %s%s, not the %s%s this item needs; encoding "
                            "it here", key, entry.dtype, list(entry.shape),
                            self.namespace.dtype, list(shape))
                return self._local(key, "error")
            self._pins[at] = _Held(item, entry.token, tuple(entry.shape))
            self.stats.hits += 1
            return Answer(Decision.HIT, key)
        return None

    def _absent_or_writing(self, at, key):
        """Look only: lookup answers ABSENT for a key being written too; peek
        tells them apart without taking anything."""
        if self._c.peek([key])[0].state == EntryState.WRITING:
            return self._defer(at, key)
        return Answer(Decision.LOCAL, key, "absent")

    def _reserve(self, item, at, key, shape):
        cost = self._cost_us(item) if self._cost_us is not None else 0
        entry = self._c.reserve(key, dtype=self.namespace.dtype, shape=shape, cost_us=cost)
        if entry.state == EntryState.RESERVED:
            self._reserved[at] = _Held(item, entry.token, shape)
            self.stats.saves += 1
            return Answer(Decision.SAVE, key)
        if entry.state == EntryState.READY:
            # Published between the look and the reserve: look once more.
            answer = self._look(item, at, key, shape)
            if answer is not None:
                return answer
        return self._defer(at, key)

    def _defer(self, at, key):
        now = self._clock()
        first = self._deferred.setdefault(at, now)
        if now - first >= self.defer_timeout:
            del self._deferred[at]
            return self._local(key, "deadline")
        self.stats.deferrals += 1
        return Answer(Decision.DEFER, key, "writing")

    def _local(self, key, reason):
        counter = "local_" + reason
        setattr(self.stats, counter, getattr(self.stats, counter) + 1)
        return Answer(Decision.LOCAL, key, reason)

    def _load_order(self, held):
        tid = self._next_transfer
        self._next_transfer += 1
        item = held.item
        return LoadOrder(tid, held.token, self.namespace.key(item.content_hash), item.request_id,
                         item.index, self.namespace.dtype, held.shape)

    # ---- what the workers reported ----

    def _rank_done(self, tid, rank):
        sent = self._sent_loads.get(tid)
        if sent is None or rank not in sent.ranks_left:
            return
        sent.ranks_left.discard(rank)
        if not sent.ranks_left:
            del self._sent_loads[tid]
            self.stats.loads_done += 1

    def _failed(self, rank, failure):
        if failure.what == "save":
            sent = self._sent_saves.pop(failure.key, None)
            if sent is not None:
                self.stats.save_failures += 1
                self._abort(sent.order.token)
            return
        sent = self._sent_loads.get(failure.transfer_id)
        if sent is None or rank not in sent.ranks_left:
            return
        self.stats.load_failures += 1
        if not failure.released:
            self._unpin(sent.order.token, 1)
        self._rank_done(failure.transfer_id, rank)

    def _expire(self, now):
        for tid, sent in list(self._sent_loads.items()):
            if now - sent.sent >= self.pin_ttl:
                self._unpin(sent.order.token, len(sent.ranks_left))
                self.stats.ttl_releases += len(sent.ranks_left)
                del self._sent_loads[tid]
        for key, sent in list(self._sent_saves.items()):
            if now - sent.sent >= self.save_timeout and self._abort(sent.order.token):
                self.stats.save_timeouts += 1
                del self._sent_saves[key]

    # ---- giving back ----

    def _unpin(self, token, ranks):
        for _ in range(ranks):
            try:
                self._c.unpin(token)
            except EccError as e:
                if e.code == Status.ECC_ERR_CLOSED:
                    return  # gone already (its writer's region replaced, or reclaimed)
                log.warning("ecc.serving: unpin %d: %s", token, e)
                return

    def _abort(self, token):
        """True once the reservation is gone (aborted here, or settled already)."""
        try:
            self._c.abort_reserved(token)
        except Busy:
            return False  # a worker's copy of it is in flight: its completion settles it
        except EccError as e:
            if e.code not in (Status.ECC_ERR_CLOSED, Status.ECC_ERR_INVALID):
                log.warning("ecc.serving: abort_reserved %d: %s", token, e)
        return True
