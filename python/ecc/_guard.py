# SPDX-License-Identifier: Apache-2.0
"""The closed flag and the count of calls inside the C library, so that close()
waits for those calls and every later one raises ECC_ERR_CLOSED instead of
passing a freed connector pointer to C."""

import threading

from .errors import closed


class Guard:
    """Brackets each C call on one connector (enter/leave) against its close."""

    __slots__ = ("_cond", "_inside", "_closing")

    def __init__(self):
        self._cond = threading.Condition(threading.Lock())
        self._inside = 0
        self._closing = False

    @property
    def closed(self):
        return self._closing

    def check(self, what):
        """Raise ECC_ERR_CLOSED if closing has begun (before arguments are judged,
        as the C library judges the handle first)."""
        if self._closing:
            raise closed(what)

    def enter(self, what):
        with self._cond:
            if self._closing:
                raise closed(what)
            self._inside += 1

    def leave(self):
        with self._cond:
            self._inside -= 1
            if self._inside == 0 and self._closing:
                self._cond.notify_all()

    def begin_close(self):
        """Turn new calls away and wait for those inside; False if another close
        has already begun (close is idempotent)."""
        with self._cond:
            if self._closing:
                return False
            self._closing = True
            while self._inside:
                self._cond.wait()
            return True
