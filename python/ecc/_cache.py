# SPDX-License-Identifier: Apache-2.0
"""The calls of the cache (ABI 1.2) as Connector methods: peek, wait_ready and
events, and the plumbing by which reserve, lookup, list and load_pinned use
their minor-2 forms where the library and the plugin have them and fall back
to their 1.1 forms, or name the version they need, where they do not."""

import math
from ctypes import byref, c_char_p, c_size_t, c_uint64

from . import _abi, _args, _lib
from ._abi import Status
from ._args import U32_MAX, U64_MAX
from .errors import EccError, invalid
from .records import Entry, Event, Peeked

WAIT_MAX_S = 3600  # the ABI's bound on one wait
EVENTS_DEFAULT = 256
EVENTS_MAX = 1 << 20


def _plugin_lacks(what, cname):
    return EccError(Status.ECC_ERR_UNSUPPORTED,
                    f"{what}: the plugin has no {cname}: it predates ABI {_abi.ABI_MAJOR}."
                    f"{_lib.CACHE_MINOR} (the cache); use a plugin of that ABI, such as shm")


def _seconds_ns(timeout, what):
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise TypeError(f"{what}: timeout must be seconds as an int or float, not "
                        f"{type(timeout).__name__}")
    if not (math.isfinite(timeout) and 0 <= timeout <= WAIT_MAX_S):
        raise invalid(f"{what}: timeout is {timeout} s, not in 0..{WAIT_MAX_S}")
    return int(timeout * 1e9)


class CacheCalls:
    """Mixed into Connector, whose _core and _call these use."""

    def _cache_call(self, what, name, *args):
        """The minor-2 C call `name`, refused with the version it needs where
        the library or the plugin lacks it."""
        self._cache_guarded(what, name, self._call, what, name, *args)

    def _cache_guarded(self, what, name, fn, *args):
        """fn(*args), a call that reaches the minor-2 C function `name`."""
        cname = name[len("ecc_"):]
        if not _lib.has(name):
            raise EccError(Status.ECC_ERR_UNSUPPORTED, _lib.lacking(name, what))
        if self._core.cache is False:
            raise _plugin_lacks(what, cname)
        try:
            fn(*args)
        except EccError as e:
            # A plugin without the function leaves no message of this call: the
            # text is then an older call's, and the reason is the plugin's age.
            if e.code == Status.ECC_ERR_UNSUPPORTED and not e.message.startswith(f"{cname}:"):
                raise _plugin_lacks(what, cname) from None
            raise

    def _ex_or_old(self, what, name, ex_args, old_name, old_args):
        """The minor-2 form `name` of a call where there is one, else its 1.1
        form; True when the minor-2 form answered. A refused call changes
        nothing, so the 1.1 form runs on the same state."""
        if _lib.has(name) and self._core.cache is not False:
            try:
                self._call(what, name, *ex_args)
                return True
            except EccError as e:
                if e.code != Status.ECC_ERR_UNSUPPORTED:
                    raise
        self._call(what, old_name, *old_args)
        # The 1.1 form answered where the minor-2 one did not: the plugin is older.
        self._core.cache = False
        return False

    def peek(self, keys):
        """One Peeked per key (a str is one key): what lookup would find, pinning,
        marking used and counting nothing (ABI 1.2)."""
        self._core.guard.check("peek")
        kbs = _args.keys(keys, "peek")
        if not kbs:
            return []
        out = (_abi.PeekRecord * len(kbs))()
        self._cache_call("peek", "ecc_peek", (c_char_p * len(kbs))(*kbs), len(kbs), out)
        return [Peeked.from_record(r) for r in out]

    def wait_ready(self, key, ranks=1, timeout=60.0):
        """Look `key` up, and while another process (or thread) writes it, sleep
        until the writer publishes (READY, pinned for `ranks` as lookup pins; 0:
        not pinned), aborts or dies (ABSENT: reserve it now), or `timeout`
        seconds pass (WRITING: nothing changed). At most an hour; 0 does not
        sleep. The GIL is released while it sleeps; close() waits for it, and
        a Ctrl-C is raised when it returns (ABI 1.2)."""
        self._core.guard.check("wait_ready")
        kb = _args.key(key, "wait_ready")
        what = f"wait_ready {kb.decode('utf-8', 'replace')!r}"
        ranks = _args.uint(ranks, U32_MAX, f"{what}: ranks")
        timeout_ns = _seconds_ns(timeout, what)
        out, meta = _abi.EntryRecord(), _abi.EntryMeta()
        self._cache_call(what, "ecc_wait_ready", kb, ranks, timeout_ns, byref(out), byref(meta))
        return Entry.from_record(out, meta)

    def events(self, cursor=0, max_items=EVENTS_DEFAULT):
        """(events, next_cursor, lost): up to `max_items` residency events from
        sequence number `cursor` on (0: the oldest the ring holds), oldest
        first; pass next_cursor to the next call. lost counts the events from
        `cursor` on that were overwritten before they could be read.
        max_items=0 reads nothing and gives the cursor of the next event to
        come, to read only new ones. Never blocks a writer (ABI 1.2)."""
        self._core.guard.check("events")
        at = c_uint64(_args.uint(cursor, U64_MAX, "events: cursor"))
        cap = _args.uint(max_items, EVENTS_MAX, "events: max_items")
        out = (_abi.EventRecord * max(1, cap))()
        got, lost = c_size_t(), c_uint64()
        self._cache_call("events", "ecc_events", byref(at), out, cap, byref(got), byref(lost))
        return [Event.from_record(r) for r in out[:got.value]], at.value, lost.value
