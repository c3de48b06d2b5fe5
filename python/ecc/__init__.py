# SPDX-License-Identifier: Apache-2.0
"""ecc: the encoder-cache connector from Python, through ctypes over
libecc-host.so. This file is the public surface: the names it exports are the API."""

from . import _lib
from ._abi import (ENTRY_MAX_EXTENTS, HIST_BOUNDS, HIST_BUCKETS, KEY_MAX, EntryState, LogLevel,
                   Status)
from ._lib import LibraryNotFound
from ._types import DTYPE_VALUE, empty_like_entry
from .connector import Connector
from .errors import Busy, EccError
from .records import (CacheStats, Completion, DirectoryStats, DirStats, Entry, Event, Info, Listed,
                      Peeked, Stats)

# The dtype names a typed entry may have, as ECC_DTYPE_MAP names them.
DTYPES = tuple(DTYPE_VALUE)

__version__ = "1.0.0"

# ecc.ECC_OK, ecc.ECC_ERR_BUSY, ...: the codes under their C names.
globals().update({member.name: member for member in Status})


def library_path():
    """The path of the libecc-host.so in use (loading it on first use)."""
    return _lib.path()


def library_version():
    """The loaded library's version, "MAJOR.MINOR.PATCH"."""
    return _lib.load().ecc_version().decode()


__all__ = ["Connector", "EccError", "Busy", "Status", "LogLevel", "EntryState", "Completion",
           "Entry", "Peeked", "Event", "Listed", "Stats", "DirStats", "DirectoryStats",
           "CacheStats", "Info", "LibraryNotFound", "KEY_MAX", "ENTRY_MAX_EXTENTS", "HIST_BOUNDS",
           "HIST_BUCKETS", "DTYPES", "empty_like_entry", "library_path",
           "library_version"] + [member.name for member in Status]
