# SPDX-License-Identifier: Apache-2.0
"""The closed flag, the calls inside the C library and the process a connector
belongs to, kept so that a KeyboardInterrupt wherever it lands, or a fork while
another thread is inside a call, leaves them true: close() waits for the calls
inside, every later call raises ECC_ERR_CLOSED, and no freed connector pointer
reaches C.

CPython 3.11 and later run signal handlers (the KeyboardInterrupt of Ctrl-C)
only at function starts, backward jumps and the return of a call, never inside
a C function such as set.add or RLock.release (a blocking acquire or sleep
raises it before it has taken anything). So each piece of state is changed
by one C call, the first of its try block, and given back by one C call, the
first of its finally clause: the exception lands either before the change or
where the finally clause undoes it. No lock waits for a notify that an
interrupted thread would never send. Older interpreters also check where a try
block ends, so there an interrupt can skip a finally clause and leave a mark
of the interrupted thread (the main one): close() from that thread ignores it."""

import os
import time
from threading import get_ident

from ._abi import Status
from .errors import EccError, closed

DRAIN_FIRST_S, DRAIN_MAX_S = 0.0001, 0.005


def held(lock, fn, *args):
    """fn(*args) with `lock` (an RLock) held, given back however fn ends.

    An acquire interrupted while it waits leaves the lock to its holder; then
    release() raises RuntimeError (the lock is not this thread's), which is
    the one case where there is nothing to give back."""
    try:
        lock.acquire()
        return fn(*args)
    finally:
        try:
            lock.release()
        except RuntimeError:
            pass


class Guard:
    """Brackets each C call on one connector against its close and against use
    in a child made by fork()."""

    __slots__ = ("inside", "closing", "owner", "forked")

    def __init__(self):
        self.inside = set()  # (thread id, object()) per call inside the C library
        self.closing = False
        self.owner = os.getpid()
        self.forked = False

    @property
    def closed(self):
        return self.closing

    def refusal(self, what):
        if self.forked:
            return EccError(Status.ECC_ERR_CLOSED,
                            f"{what}: this connector was opened by process {self.owner} and "
                            f"cannot be used in process {os.getpid()}, a child made by fork(); "
                            f"open a new ecc.Connector in this process")
        return closed(what)

    def check(self, what):
        """Raise ECC_ERR_CLOSED if closing has begun or the connector is another
        process's (before arguments are judged, as the C library judges the
        handle first)."""
        if self.closing:
            raise self.refusal(what)

    def call(self, what, fn, *args):
        """fn(*args), counted as a call inside the C library while it runs."""
        mark = (get_ident(), object())
        inside = self.inside
        try:
            inside.add(mark)
            # After the mark: close() either sees this call or this call sees it closing.
            if self.closing:
                raise self.refusal(what)
            return fn(*args)
        finally:
            inside.discard(mark)

    def drain(self):
        """Wait until no other thread is inside a call (closing is set). The
        closing thread's own marks are not waited for: it is not inside a call
        (the log callback must not close), so they can only be ones that an
        interrupt left on an interpreter older than 3.11."""
        me, delay = get_ident(), DRAIN_FIRST_S
        while [m for m in list(self.inside) if m[0] != me]:
            time.sleep(delay)
            delay = min(2 * delay, DRAIN_MAX_S)

    def after_fork_in_child(self):
        """The calls inside were the parent's threads', which the child lacks."""
        self.forked = True
        self.closing = True
        self.inside = set()
