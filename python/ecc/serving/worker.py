# SPDX-License-Identifier: Apache-2.0
"""The worker side of serving (one per GPU rank): rank 0 saves what the
scheduler side reserved, every rank loads what it pinned, and each reports
what completed and what failed, with its status."""

from .._abi import EntryState, Status
from .._types import DTYPE_BYTES, DTYPE_VALUE, dtype_name, empty_like_entry, type_of
from ..errors import EccError, invalid
from ..records import Entry
from .plan import Failure, WorkerReport


def _entry_of(order):
    """The typed pin a LoadOrder names, so that a destination of another
    dtype or shape is refused (ECC_ERR_RANGE) instead of loaded."""
    n = DTYPE_BYTES[DTYPE_VALUE[order.dtype]]
    for d in order.shape:
        n *= d
    return Entry(EntryState.READY, order.token, n, (), order.dtype, tuple(order.shape))


class WorkerSide:
    """rank: this worker's rank in the group the scheduler pins for (0 ..
    ranks - 1). saves: whether this rank writes the group's saves (by default
    rank 0 only: rank 0 of TP and of PCP, as the engine names it)."""

    def __init__(self, connector, rank=0, saves=None):
        if isinstance(rank, bool) or not isinstance(rank, int) or rank < 0:
            raise invalid(f"WorkerSide: rank must be an int >= 0, not {rank!r}")
        self._c, self.rank = connector, rank
        self.saves = rank == 0 if saves is None else bool(saves)
        self._saved, self._loaded, self._failures = [], [], []
        self._loading = {}  # transfer id -> key, until its completion is polled

    def start_loads(self, meta, destinations=None, device=None, stream=None):
        """Load every LoadOrder of `meta` in one batched transfer, ordered on
        `stream` (the current one by default). destinations: {(request_id,
        index): tensor or array} to load into; what it lacks is allocated of
        the entry's dtype and shape (on `device`, a numpy array when None).
        Returns {(request_id, index): the destination}; the bytes are there
        once the engine's stream has passed the load (and report() lists it)."""
        destinations = dict(destinations or {})
        batch = []
        for order in meta.loads:
            at = (order.request_id, order.index)
            entry = _entry_of(order)
            if at not in destinations:
                destinations[at] = empty_like_entry(entry, device=device)
            batch.append((order.transfer_id, entry, destinations[at]))
        if not batch:
            return {}
        try:
            self._c.load_pinned_many(batch, stream=stream)
        except EccError as e:
            # Refused whole: nothing started, and no rank's pin was released.
            for order in meta.loads:
                self._failures.append(Failure("load", order.key, order.transfer_id, int(e.code),
                                              e.message, released=False))
            return {}
        for order in meta.loads:
            self._loading[order.transfer_id] = order.key
        return {(o.request_id, o.index): destinations[(o.request_id, o.index)]
                for o in meta.loads}

    def save(self, meta, outputs, stream=None):
        """Save, on the saving rank, the encoder outputs of `meta`'s SaveOrders
        ({(request_id, index) or key: tensor}, each of the order's dtype and
        shape) in one batch, then flush after the work queued on `stream`.
        An order without an output, or of another type, is reported failed
        (the scheduler side then gives its reservation up). Other ranks save
        nothing."""
        if not self.saves or not meta.saves:
            return
        batch = []
        for order in meta.saves:
            out = outputs.get((order.request_id, order.index), outputs.get(order.key))
            problem = self._save_problem(order, out)
            if problem:
                self._failures.append(Failure("save", order.key, 0, int(Status.ECC_ERR_RANGE),
                                              problem))
                continue
            batch.append((order.token, out))
        if not batch:
            return
        try:
            self._c.save_reserved_many(batch)
            self._c.flush(stream)
        except EccError as e:
            for order in meta.saves:
                self._failures.append(Failure("save", order.key, 0, int(e.code), e.message))

    @staticmethod
    def _save_problem(order, out):
        if out is None:
            return f"save of {order.key}: the step's outputs have no tensor for request " \
                   f"{order.request_id!r} item {order.index}"
        try:
            dtype, shape = type_of(out, f"save of {order.key}")
        except (EccError, TypeError) as e:
            return str(e)
        name = dtype_name(dtype)
        if name != order.dtype or tuple(shape) != tuple(order.shape):
            return f"save of {order.key}: the output is {name}{list(shape)}, but " \
                   f"{order.dtype}{list(order.shape)} was reserved"
        return ""

    def report(self):
        """What completed since the last report (polled now, never blocking):
        saved keys, loaded transfer ids, failures with their status."""
        while True:
            done = self._c.poll()
            if not done:
                break
            for c in done:
                self._note(c)
        report = WorkerReport(self.rank, tuple(self._saved), tuple(self._loaded),
                              tuple(self._failures))
        self._saved, self._loaded, self._failures = [], [], []
        return report

    def _note(self, c):
        if c.direction == "save":
            if c.ok:
                self._saved.append(c.key)
            else:
                self._failures.append(Failure("save", c.key, 0, int(c.status),
                                              f"the copy of {c.key} failed"))
            return
        key = self._loading.pop(c.transfer_id, "")
        if c.ok:
            self._loaded.append(c.transfer_id)
        else:
            self._failures.append(Failure("load", key, c.transfer_id, int(c.status),
                                          f"the copy of {key} (transfer {c.transfer_id}) failed"))

    def pending(self):
        """Loads submitted whose completion is not polled yet."""
        return len(self._loading)
