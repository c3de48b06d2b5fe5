# SPDX-License-Identifier: Apache-2.0
"""The checks of the arguments every call shares (integers in their C range,
keys, tokens), each refusing with the call and the argument named before the
C library sees them."""

from .errors import invalid
from .records import Entry

U32_MAX, U64_MAX = (1 << 32) - 1, (1 << 64) - 1


def uint(value, limit, what, low=0):
    if type(value) is int and low <= value <= limit:
        return value  # the common case, at the cost of one type check
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise TypeError(f"{what} must be an int, not {type(value).__name__}")
    value = value.__index__()
    if not low <= value <= limit:
        raise invalid(f"{what} is {value}, not in {low}..{limit}")
    return value


def token(value, what):
    if isinstance(value, Entry):
        value = value.token
    return uint(value, U64_MAX, f"{what}: token")


def key(value, what):
    if isinstance(value, str):
        value = value.encode("utf-8", "surrogateescape")
    elif not isinstance(value, bytes):
        raise TypeError(f"{what}: a key must be str or bytes, not {type(value).__name__}")
    if b"\0" in value:
        raise invalid(f"{what}: key {value!r} contains a NUL byte")
    return value


def keys(values, what):
    """The keys of a many-key call as bytes; a str or bytes alone is one key."""
    if isinstance(values, (str, bytes)):
        values = [values]
    return [key(k, what) for k in values]
