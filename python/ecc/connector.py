# SPDX-License-Identifier: Apache-2.0
"""ecc.Connector: one connector opened from an INI file, every call of ecc_host.h
(the six operations, stats, describe, the directory of ABI 1.1 and, through
_cache.py, the cache of 1.2) with its arguments checked, its errors raised, and
its buffers kept alive until polled."""

import atexit
import collections
import ctypes
import os
import re
import threading
import time
import weakref
from ctypes import byref, c_char_p, c_size_t, c_uint64, c_void_p, sizeof

from . import _abi, _args, _batch, _lib
from ._abi import EntryState, Status
from ._args import U32_MAX, U64_MAX
from ._args import key as _key
from ._args import token as _token
from ._args import uint as _uint
from ._blocks import blocks_of
from ._buffers import check_reachable, memory_of
from ._cache import CacheCalls
from ._guard import Guard, held
from ._pending import Pending
from ._streams import stream_value
from ._types import DTYPE_VALUE, descriptor, reserve_type, type_of
from .errors import EccError, error, invalid
from .records import Completion, Entry, Info, Listed, Stats

POLL_DEFAULT = 256
LIST_PAGE = 256


def _nothing():
    pass


def _entries(entries, what, shape):
    """The tuples of a *_many call, each checked to have the documented shape."""
    if isinstance(entries, (str, bytes)) or not hasattr(entries, "__iter__"):
        raise TypeError(f"{what}: entries must be a sequence of {shape} tuples")
    items = list(entries)
    width = shape.count(",") + 1
    for i, e in enumerate(items):
        if not isinstance(e, (tuple, list)) or len(e) != width:
            raise TypeError(f"{what}: entry {i} is not a {shape} tuple")
    return items


def _overrides(overrides):
    if overrides is None:
        return []
    if not hasattr(overrides, "items"):
        raise TypeError("overrides must be a dict of 'section.key': 'value'")
    pairs = []
    for k, v in overrides.items():
        if isinstance(v, bool):
            v = "true" if v else "false"
        elif isinstance(v, int):
            v = str(v)
        if not isinstance(k, str) or not isinstance(v, str):
            raise TypeError(f"override {k!r}: keys and values must be str, not "
                            f"{type(k).__name__}: {type(v).__name__}")
        if "\0" in k or "\0" in v:
            raise invalid(f"override {k!r} contains a NUL character")
        pairs.append((k.encode(), v.encode()))
    return pairs


# How wait() and poll(timeout=) sleep between looks: from 50 us, doubling to 1 ms,
# so a completion is seen within about a millisecond at a fraction of a core.
_FIRST_SLEEP_S, _MAX_SLEEP_S = 50e-6, 1e-3


def _deadline(timeout, what):
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout < 0:
        raise invalid(f"{what}: timeout must be seconds >= 0 or None, not {timeout!r}")
    return time.monotonic() + timeout


def _wanted(ids_or_keys):
    """{("load", id) or ("save", key bytes)} of what wait() was given."""
    if isinstance(ids_or_keys, (int, str, bytes)):
        ids_or_keys = [ids_or_keys]
    wanted = set()
    for x in ids_or_keys:
        if isinstance(x, bool) or not isinstance(x, (int, str, bytes)):
            raise TypeError(f"wait: a transfer id (int) or a key (str, bytes), not "
                            f"{type(x).__name__}")
        wanted.add(("load", x) if isinstance(x, int) else ("save", _args.key(x, "wait")))
    return wanted


def _take(wanted, c):
    """Whether completion c is one wait() waits for (and then no more)."""
    if c.direction == "load":
        tag = ("load", c.transfer_id)
    else:
        key = c.key if isinstance(c.key, bytes) else c.key.encode("utf-8", "surrogateescape")
        tag = ("save", key)
    if tag in wanted:
        wanted.discard(tag)
        return True
    return False


def _log_function(log):
    """The C log callback for a Python callable (level, message); None logs to stderr."""
    if log is None:
        return None
    if not callable(log):
        raise TypeError(f"log must be a callable (level, message), not {type(log).__name__}")

    def forward(_user, level, msg):
        log(_abi.LogLevel(level) if 0 <= level <= 3 else level,
            msg.decode("utf-8", "replace") if msg else "")

    return _abi.LogFunction(forward)


def _open(lib, config_path, pairs, log_fn, handle):
    """ecc_open into `handle`, the c_void_p of a core whose finalizer already
    waits: a KeyboardInterrupt just after the C call leaves no connector open
    that nothing would close."""
    kv = (_abi.KeyValue * max(1, len(pairs)))(*[_abi.KeyValue(k, v) for k, v in pairs])
    opts = _abi.OpenOptions(struct_size=sizeof(_abi.OpenOptions),
                            overrides=ctypes.cast(kv, ctypes.POINTER(_abi.KeyValue)),
                            n_overrides=len(pairs), log=log_fn or _abi.LogFunction(),
                            log_level=-1)
    err = ctypes.create_string_buffer(4096)
    rc = lib.ecc_open(os.fsencode(config_path), byref(opts), byref(handle), err, len(err))
    if rc != 0:
        raise error(rc, err.value.decode("utf-8", "replace"))


# Every core of this process, so that a child made by fork() can mark them its
# parent's before any of its code runs; and those not yet closed, held until
# they are, so that one whose finalizer an interrupt stopped is closed at exit.
_cores = weakref.WeakSet()
_unclosed = set()


class _Core:
    """What close needs, apart from the Connector so that the finalizer that closes
    a forgotten connector does not keep it alive."""

    def __init__(self, lib, log_fn):
        self.lib, self.log_fn = lib, log_fn
        self.handle = c_void_p()  # NULL until opened, and again once closed
        self.guard = Guard()
        self.pending = Pending()
        # Ties the order of the references to the order of the C calls: save,
        # flush and load are serialised by the library anyway.
        self.submit = threading.RLock()
        self.closer = threading.RLock()  # one ecc_close, whoever else calls close
        self.reserved = {}  # token -> key, for reservations made through this connector
        self.cache = None  # False once the plugin proved to lack the calls of ABI 1.2
        self.kept = collections.deque()  # completions wait() saw for others, for poll
        self.kept_lock = threading.Lock()
        self.engine, self.device, self.save_rank = None, None, True
        _cores.add(self)
        _unclosed.add(self)

    def close(self):
        self.guard.closing = True
        return held(self.closer, self._close)

    def _close(self):
        # In a forked child the parent's threads are not inside, and ecc_close
        # frees the child's copy of the connector, touching nothing of the parent's.
        if not self.guard.forked:
            self.guard.drain()
        # NULL before the call (ecc_close(NULL) is ECC_OK), so that a close that
        # an interrupt stops after the C call cannot pass a freed pointer again.
        handle = self.handle.value
        self.handle.value = None
        rc = self.lib.ecc_close(handle)
        # ecc_close has waited for every transfer: nothing reads or writes the
        # buffers any more, and no plugin thread calls the log function.
        self.pending.clear()
        self.reserved.clear()
        self.log_fn = None
        _unclosed.discard(self)
        return rc

    def after_fork_in_child(self):
        """Locks a parent thread held at fork stay held in the child: new ones."""
        self.guard.after_fork_in_child()
        self.pending.after_fork_in_child()
        self.submit = threading.RLock()
        self.closer = threading.RLock()


def _after_fork_in_child():
    for core in list(_cores):
        core.after_fork_in_child()


def _close_unclosed():
    for core in list(_unclosed):
        core.close()


os.register_at_fork(after_in_child=_after_fork_in_child)
atexit.register(_close_unclosed)


class Connector(CacheCalls):
    """A connector opened from an INI file (see docs/configuration.md).

    overrides: a dict of "section.key": "value" replacing or adding to the file's.
    log: a callable (level, message), called from any thread, that must not close
    the connector; None logs to stderr. Use as a context manager, or call close().
    """

    def __init__(self, config_path, overrides=None, log=None):
        path = os.fspath(config_path)
        pairs = _overrides(overrides)
        log_fn = _log_function(log)
        lib = _lib.load()
        self._core = _Core(lib, log_fn)
        self._finalizer = weakref.finalize(self, self._core.close)
        _open(lib, path, pairs, log_fn, self._core.handle)
        self._learn_engine()

    def _learn_engine(self):
        try:
            info = self.describe()
        except EccError as e:  # a plugin without describe: no checks of the memory kind
            if e.code != Status.ECC_ERR_UNSUPPORTED:
                raise
            return
        core = self._core
        core.engine, core.save_rank = info.engine, info.save_rank
        found = re.match(r"device (\d+)\b", info.engine_detail)
        core.device = int(found.group(1)) if info.engine == "cuda" and found else None

    # ---- life ----

    def close(self):
        """Wait for calls in progress and every transfer in flight, then shut down;
        idempotent. Completions not yet polled are dropped. In a child made by
        fork() it frees the child's copy at once and leaves the parent's alone."""
        rc = self._core.close()
        # Nothing left for the garbage collector to run, where an interrupt
        # would be printed and dropped instead of raised.
        self._finalizer.detach()
        if rc:
            raise error(rc, "close: the plugin's shutdown failed")

    @property
    def closed(self):
        return self._core.guard.closed

    @property
    def pending(self):
        """How many save sources and load destinations are held until polled."""
        return len(self._core.pending)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        state = "closed" if self.closed else f"engine={self._core.engine}"
        return f"<ecc.Connector {state}>"

    # ---- plumbing ----

    def _fail(self, what, rc):
        text = _lib.last_error(self._core.lib, self._core.handle)
        return error(rc, text or f"{what}: {_lib.strerror(self._core.lib, rc)}")

    def _call(self, what, name, *args):
        self._core.guard.call(what, self._c_call, what, name, args)

    def _c_call(self, what, name, args):
        core = self._core
        rc = getattr(core.lib, name)(core.handle, *args)
        if rc != 0:
            raise self._fail(what, rc)

    def _submit(self, what, name, args, add, undo):
        """A C call that starts copies: the references are taken before it, so a
        completion polled at once on another thread finds them, and given back if
        the call is refused (a refused call changes nothing). An interrupt
        between the two keeps them until close: held too long, never too short."""
        core = self._core
        core.guard.call(what, held, core.submit, self._c_submit, what, name, args, add, undo)

    def _c_submit(self, what, name, args, add, undo):
        core = self._core
        add()
        rc = getattr(core.lib, name)(core.handle, *args)
        if rc != 0:
            undo()
            raise self._fail(what, rc)

    def _memory(self, obj, what, writable):
        mem = memory_of(obj, what, writable)
        check_reachable(mem, self._core.engine, self._core.device, what)
        return mem

    def _stream(self, stream, what):
        return stream_value(stream, self._core.engine, what)

    def _keep_saves(self, keyed):
        """add/undo for save-like calls; a rank that does not save reads nothing."""
        pending = self._core.pending
        if not self._core.save_rank:
            return _nothing, _nothing
        return (lambda: pending.add_saves(keyed)), (lambda: pending.drop_last_saves(len(keyed)))

    def _keep_loads(self, tids, owners):
        pending = self._core.pending
        return (lambda: pending.add_loads(tids, owners)), (lambda: pending.drop_last_loads(tids))

    def _keep_item_loads(self, items):
        """_keep_loads for the per-entry paths' (transfer_id, blocks or token, memory)."""
        return self._keep_loads([tid for tid, _, _ in items], [mem.owners for _, _, mem in items])

    # ---- the six operations ----

    def save(self, key, src, block_ids):
        """Queue `src` (all its bytes) for `block_ids` until the next flush."""
        self.save_many([(key, src, block_ids)])

    def save_many(self, entries):
        """Queue [(key, src, block_ids), ...] in one C call."""
        self._core.guard.check("save")
        items = [self._save_item(e) for e in _entries(entries, "save_many",
                                                      "(key, src, block_ids)")]
        if not items:
            return
        arr = (_abi.SaveEntry * len(items))()
        for rec, (key, mem, blocks) in zip(arr, items):
            rec.key, rec.src, rec.nbytes = key, mem.address, mem.nbytes
            rec.block_ids, rec.n_blocks = blocks.address, blocks.count
        add, undo = self._keep_saves([(key, mem.owners) for key, mem, _ in items])
        self._submit("save", "ecc_save", (arr, len(items)), add, undo)

    def _save_item(self, entry):
        key, src, block_ids = entry
        kb = _key(key, "save")
        what = f"save {kb.decode('utf-8', 'replace')!r}"
        return kb, self._memory(src, f"{what}: src", False), blocks_of(block_ids, what)

    def flush(self, stream=None):
        """Submit the queued saves as one transfer, after the work queued on
        `stream` (default: torch's current stream with the CUDA engine)."""
        self._core.guard.check("flush")
        handle = self._stream(stream, "flush")
        self._submit("flush", "ecc_flush", (handle,), _nothing, _nothing)

    def load(self, transfer_id, block_ids, dst, stream=None):
        """Copy `block_ids` into `dst` (up to its size); poll reports transfer_id."""
        self.load_many([(transfer_id, block_ids, dst)], stream)

    def load_many(self, entries, stream=None):
        """Copy [(transfer_id, block_ids, dst), ...] in one batched transfer."""
        self._core.guard.check("load")
        core = self._core
        packed = _batch.load_records(entries, core.engine, core.device)
        if packed is None:
            self._load_each(entries, stream)
            return
        words, blocks, tids, dsts = packed
        handle = self._stream(stream, "load")
        arr = (_abi.LoadEntry * len(tids)).from_buffer(words)
        add, undo = self._keep_loads(tids, dsts)
        self._submit("load", "ecc_load", (arr, len(tids), handle), add, undo)
        del blocks  # what the records pointed into: read by the call, free after it

    def _load_each(self, entries, stream):
        """load_many entry by entry: every kind of id, block list and destination,
        and the words of each refusal."""
        items = [self._load_item(e) for e in _entries(entries, "load_many",
                                                      "(transfer_id, block_ids, dst)")]
        handle = self._stream(stream, "load")
        if not items:
            return
        arr = (_abi.LoadEntry * len(items))()
        for rec, (tid, blocks, mem) in zip(arr, items):
            rec.transfer_id, rec.block_ids, rec.n_blocks = tid, blocks.address, blocks.count
            rec.dst, rec.dst_capacity = mem.address, mem.nbytes
        add, undo = self._keep_item_loads(items)
        self._submit("load", "ecc_load", (arr, len(items), handle), add, undo)

    def _load_item(self, entry):
        transfer_id, block_ids, dst = entry
        tid = _uint(transfer_id, U64_MAX, "load: transfer_id")
        what = f"load {tid}"
        return tid, blocks_of(block_ids, what), self._memory(dst, f"{what}: dst", True)

    def poll(self, max_items=POLL_DEFAULT, timeout=0):
        """Finished saves then loads, each once, in FIFO order per direction (with
        first those wait() kept for later). Their sources and destinations are
        released. timeout: seconds to wait for at least one (0, the default:
        never blocks; None: no bound), sleeping between looks, never spinning."""
        self._core.guard.check("poll")
        cap = _uint(max_items, 1 << 20, "poll: max_items", low=1)
        deadline = _deadline(timeout, "poll")
        done = self._kept(cap)
        sleep = _FIRST_SLEEP_S
        while True:
            done += self._poll_once(cap - len(done)) if len(done) < cap else []
            if done or (deadline is not None and time.monotonic() >= deadline):
                return done
            time.sleep(sleep if deadline is None else
                       max(0.0, min(sleep, deadline - time.monotonic())))
            sleep = min(sleep * 2, _MAX_SLEEP_S)

    def wait(self, ids_or_keys, timeout=None):
        """Sleep until the completion of every transfer id (int) and key (str or
        bytes) given has been polled; returns them in arrival order. What it
        polls for others is kept and returned by the next poll. Raises
        TimeoutError naming what did not complete within `timeout` seconds
        (None: no bound); the completions it got stay kept."""
        self._core.guard.check("wait")
        wanted = _wanted(ids_or_keys)
        deadline = _deadline(timeout, "wait")
        got, others = [], []
        sleep = _FIRST_SLEEP_S
        try:
            for c in self._kept(1 << 20):
                (got if _take(wanted, c) else others).append(c)
            while wanted:
                for c in self._poll_once(POLL_DEFAULT):
                    (got if _take(wanted, c) else others).append(c)
                if not wanted:
                    break
                now = time.monotonic()
                if deadline is not None and now >= deadline:
                    others = got + others
                    got = []
                    raise TimeoutError(f"wait: {len(wanted)} not completed within {timeout} s: "
                                       f"{sorted(map(repr, wanted))[:8]}")
                time.sleep(sleep if deadline is None else min(sleep, deadline - now))
                sleep = min(sleep * 2, _MAX_SLEEP_S)
        finally:
            with self._core.kept_lock:
                self._core.kept.extendleft(reversed(others))
        return got

    def _kept(self, cap):
        with self._core.kept_lock:
            kept = self._core.kept
            return [kept.popleft() for _ in range(min(cap, len(kept)))]

    def _poll_once(self, cap):
        self._core.guard.check("poll")
        out = (_abi.CompletionRecord * cap)()
        got = c_size_t()
        self._call("poll", "ecc_poll", out, cap, byref(got))
        records = out[:got.value]
        released = self._core.pending.release(records, _abi.DIR_SAVE)
        done = [Completion.from_record(r) for r in records]
        del released  # the buffers go now, after the copies that used them
        return done

    def stats(self):
        """The connector's counters (and its region's directory's)."""
        out = _abi.StatsRecord(struct_size=sizeof(_abi.StatsRecord))
        self._call("stats", "ecc_get_stats", byref(out))
        return Stats.from_record(out)

    def describe(self):
        """The region and engine in use."""
        out = _abi.InfoRecord(struct_size=sizeof(_abi.InfoRecord))
        self._call("describe", "ecc_describe", byref(out))
        return Info.from_record(out)

    # ---- the directory (ABI 1.1, and the typed forms of 1.2 where there are) ----

    def reserve(self, key, nbytes=None, *, cost_us=0, dtype=None, shape=None, like=None):
        """Blocks for a new entry (RESERVED, with a token) or the entry already
        there (READY or WRITING: nothing to write; it keeps the cost and type it
        was reserved with). cost_us: encoder microseconds a hit on it saves (0:
        unknown). dtype ("float16", a numpy or torch dtype) and shape, or like=
        a tensor or array, record its type; nbytes then follows from them. A
        cost or a type needs ABI 1.2."""
        self._core.guard.check("reserve")
        kb = _key(key, "reserve")
        size = None if nbytes is None else _uint(nbytes, U64_MAX, "reserve: nbytes")
        cost = _uint(cost_us, U64_MAX, "reserve: cost_us")
        size, value, dims = reserve_type(size, dtype, shape, like, "reserve")
        out, meta = _abi.EntryRecord(), None
        if cost or value:
            meta = _abi.EntryMeta(cost_us=cost, type=descriptor(value, dims))
            args = _abi.ReserveArgs(struct_size=sizeof(_abi.ReserveArgs), key=kb, nbytes=size,
                                    cost_us=cost, type=meta.type)
            self._cache_call("reserve", "ecc_reserve_ex", byref(args), byref(out))
        else:
            self._call("reserve", "ecc_reserve", kb, size, byref(out))
        if out.state != EntryState.RESERVED:
            meta = None  # found: its own cost and type, which reserve does not report
        entry = Entry.from_record(out, meta)
        if entry.state == EntryState.RESERVED:
            self._core.reserved[entry.token] = kb
        return entry

    def save_reserved(self, token, src):
        """Queue `src` (exactly the reserved size) for a reservation until flush."""
        self.save_reserved_many([(token, src)])

    def save_reserved_many(self, entries):
        """Queue [(token, src), ...] in one C call; a token may be an Entry."""
        self._core.guard.check("save_reserved")
        items = [self._reserved_item(e) for e in _entries(entries, "save_reserved_many",
                                                          "(token, src)")]
        if not items:
            return
        arr = (_abi.SaveReserved * len(items))()
        for rec, (token, mem) in zip(arr, items):
            rec.token, rec.src, rec.nbytes = token, mem.address, mem.nbytes
        reserved = self._core.reserved
        add, undo = self._keep_saves([(reserved.get(t), mem.owners) for t, mem in items])
        self._submit("save_reserved", "ecc_save_reserved", (arr, len(items)), add, undo)
        for token, _ in items:
            reserved.pop(token, None)

    def _reserved_item(self, entry):
        token = _token(entry[0], "save_reserved")
        return token, self._memory(entry[1], f"save_reserved {token}: src", False)

    def abort_reserved(self, token):
        """Give a reservation up before it is saved."""
        self._core.guard.check("abort_reserved")
        token = _token(token, "abort_reserved")
        self._call("abort_reserved", "ecc_abort_reserved", token)
        self._core.reserved.pop(token, None)

    def lookup(self, keys, ranks=1):
        """One Entry per key (a str is one key): READY ones are pinned for `ranks`
        releases (load_pinned completions polled, or unpin) and carry their type
        and cost (ABI 1.2)."""
        self._core.guard.check("lookup")
        kbs = _args.keys(keys, "lookup")
        ranks = _uint(ranks, U32_MAX, "lookup: ranks")
        if not kbs:
            return []
        n = len(kbs)
        ckeys, out, meta = (c_char_p * n)(*kbs), (_abi.EntryRecord * n)(), (_abi.EntryMeta * n)()
        self._ex_or_old("lookup", "ecc_lookup_ex", (ckeys, n, ranks, out, meta), "ecc_lookup",
                        (ckeys, n, ranks, out))
        return [Entry.from_record(r, m) for r, m in zip(out, meta)]

    def load_pinned(self, transfer_id, token, dst, stream=None):
        """Copy a pinned entry into `dst` (at least its size; of exactly its dtype
        and shape when `token` is a typed Entry); poll reports transfer_id."""
        self.load_pinned_many([(transfer_id, token, dst)], stream)

    def load_pinned_many(self, entries, stream=None):
        """Copy [(transfer_id, token, dst), ...] in one batched transfer. A token
        given as a typed Entry (from lookup or wait_ready) is loaded only into a
        dst of exactly its dtype and shape (ECC_ERR_RANGE otherwise; pass
        entry.token to load its raw bytes); in such a batch an untyped entry
        given by its token needs a dst of exactly its size."""
        self._core.guard.check("load_pinned")
        core = self._core
        packed = _batch.pinned_records(entries, core.engine, core.device)
        if packed is not None:
            words, tids, dsts = packed
            handle = self._stream(stream, "load_pinned")
            arr = (_abi.LoadPinned * len(tids)).from_buffer(words)
            add, undo = self._keep_loads(tids, dsts)
            self._submit("load_pinned", "ecc_load_pinned", (arr, len(tids), handle), add, undo)
            return
        given = _entries(entries, "load_pinned_many", "(transfer_id, token, dst)")
        items = [self._pinned_item(e) for e in given]
        handle = self._stream(stream, "load_pinned")
        if not items:
            return
        typed = any(isinstance(e[1], Entry) and e[1].typed for e in given)
        arr = self._typed_records(given, items) if typed else self._pinned_records(items)
        add, undo = self._keep_item_loads(items)
        if not typed:
            self._submit("load_pinned", "ecc_load_pinned", (arr, len(items), handle), add, undo)
            return
        self._cache_guarded("load_pinned", "ecc_load_typed", self._submit, "load_pinned",
                            "ecc_load_typed", (arr, len(items), handle), add, undo)

    @staticmethod
    def _pinned_records(items):
        arr = (_abi.LoadPinned * len(items))()
        for rec, (tid, token, mem) in zip(arr, items):
            rec.transfer_id, rec.token, rec.dst, rec.dst_capacity = tid, token, mem.address, \
                mem.nbytes
        return arr

    @staticmethod
    def _typed_records(given, items):
        """ecc_load_typed_t records: a typed entry declares its dst's type, an
        untyped one its bytes (uint8 of the entry's size, or of dst's)."""
        arr = (_abi.LoadTyped * len(items))()
        for rec, entry, (tid, token, mem) in zip(arr, given, items):
            rec.transfer_id, rec.token, rec.dst, rec.dst_capacity = tid, token, mem.address, \
                mem.nbytes
            if isinstance(entry[1], Entry) and entry[1].typed:
                rec.type = descriptor(*type_of(entry[2], f"load_pinned {tid}: dst"))
            else:
                size = entry[1].nbytes if isinstance(entry[1], Entry) else mem.nbytes
                rec.type = descriptor(DTYPE_VALUE["uint8"], (size,))
        return arr

    def _pinned_item(self, entry):
        tid = _uint(entry[0], U64_MAX, "load_pinned: transfer_id")
        token = _token(entry[1], "load_pinned")
        return tid, token, self._memory(entry[2], f"load_pinned {tid}: dst", True)

    def unpin(self, token):
        """Release one rank of a pin without loading."""
        self._core.guard.check("unpin")
        self._call("unpin", "ecc_unpin", _token(token, "unpin"))

    def remove(self, key):
        """Drop a ready, unpinned entry by key."""
        self._core.guard.check("remove")
        self._call("remove", "ecc_remove", _key(key, "remove"))

    def list(self):
        """Every live entry (Listed, with its type, cost and hits from ABI 1.2),
        read a page at a time; entries may come and go between pages."""
        self._core.guard.check("list")
        cursor, got = c_uint64(0), c_size_t()
        out, meta = (_abi.ListedRecord * LIST_PAGE)(), (_abi.EntryMeta * LIST_PAGE)()
        found = []
        while True:
            self._ex_or_old("list", "ecc_list_ex", (byref(cursor), out, meta, LIST_PAGE,
                                                    byref(got)),
                            "ecc_list", (byref(cursor), out, LIST_PAGE, byref(got)))
            if got.value == 0:
                return found
            found.extend(Listed.from_record(r, m) for r, m in zip(out[:got.value], meta))
