# SPDX-License-Identifier: Apache-2.0
"""The exceptions of the client: EccError carries the ECC_* code and the library's
message; Busy, its subclass, is back-pressure (ECC_ERR_BUSY), so it can be caught
alone and retried after a poll."""

from ._abi import STATUS_TEXT, Status, status_of


class EccError(Exception):
    """A call refused, by the C library or by the client's own checks.

    .code is a Status (its .name the C name, e.g. "ECC_ERR_RANGE", its value the
    C value) and .message the reason, naming what was wrong."""

    def __init__(self, code, message):
        self.code = status_of(code)
        self.message = message
        name = self.code.name if isinstance(self.code, Status) else f"status {code}"
        super().__init__(f"{name}: {message}")

    def __reduce__(self):
        # The default would call __init__ with the formatted text only.
        return (type(self), (int(self.code), self.message))


class Busy(EccError):
    """ECC_ERR_BUSY: the in-flight bound is reached or the directory has no room;
    poll, then retry the same call."""


def error(code, message):
    """The exception for a code: Busy for ECC_ERR_BUSY, else EccError."""
    cls = Busy if code == Status.ECC_ERR_BUSY else EccError
    return cls(code, message or STATUS_TEXT.get(code, "unknown status"))


def invalid(message):
    """An argument the client refuses before the C library sees it."""
    return EccError(Status.ECC_ERR_INVALID, message)


def closed(what):
    return EccError(Status.ECC_ERR_CLOSED, f"{what}: the connector is closed")
