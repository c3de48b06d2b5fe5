# SPDX-License-Identifier: Apache-2.0
"""Finding and loading libecc-host.so (ECC_HOST_LIBRARY, then the copy the wheel
bundles in ecc/_lib/, then beside the package's install, then the build tree,
then the dynamic loader's path) and declaring the ctypes prototype of every
function the client calls (those of ABI 1.2 where the library has them). Loaded
once, on first use."""

import ctypes
import os
import re
import sysconfig
import threading
from ctypes import POINTER, c_char_p, c_int, c_size_t, c_uint32, c_uint64, c_void_p
from pathlib import Path

from . import _abi
from ._guard import held

ENV_VAR = "ECC_HOST_LIBRARY"
NAMES = ("libecc-host.so.1", "libecc-host.so")
PACKAGE_DIR = Path(__file__).resolve().parent

_lock = threading.RLock()
_loaded = None  # (CDLL, path)


def _after_fork_in_child():
    global _lock
    _lock = threading.RLock()  # a parent thread may have held it at fork


os.register_at_fork(after_in_child=_after_fork_in_child)


class LibraryNotFound(OSError):
    """No libecc-host.so where the client looks; the message lists every place."""


def _install_lib_dirs(package_dir):
    """<prefix>/lib* of a package installed as <prefix>/lib*/python3*/(site|dist)-packages/ecc,
    where `cmake --install` with the same prefix puts libecc-host.so."""
    site = package_dir.parent
    if site.name not in ("site-packages", "dist-packages"):
        return []
    py, libdir = site.parent, site.parent.parent
    if not py.name.startswith("python") or not libdir.name.startswith("lib"):
        return []
    prefix = libdir.parent
    dirs = [libdir, prefix / "lib", prefix / "lib64"]
    multiarch = sysconfig.get_config_var("MULTIARCH")
    if multiarch:
        dirs.append(prefix / "lib" / multiarch)
    return list(dict.fromkeys(dirs))


def _build_lib_dirs(package_dir):
    """The build tree of a source checkout (python/ecc/ inside the repository):
    build/lib/ first (scripts/build.sh's default), then any other CMake build."""
    root = package_dir.parent.parent
    if not (root / "CMakeLists.txt").is_file() or not (root / "abi").is_dir():
        return []
    builds = sorted(p for p in root.glob("build*") if (p / "CMakeCache.txt").is_file())
    builds.sort(key=lambda p: p.name != "build")
    return [b / "lib" for b in builds] or [root / "build" / "lib"]


def candidates(package_dir=PACKAGE_DIR):
    """(place, file) pairs in the order they are tried, the loader's search last."""
    places = [("bundled in the package (the wheel's copy)", package_dir / "_lib"),
              ("beside the package", package_dir)]
    places += [("the package's install prefix", d) for d in _install_lib_dirs(package_dir)]
    places += [("the build tree", d) for d in _build_lib_dirs(package_dir)]
    return [(where, d / name) for where, d in places for name in NAMES]


def _not_found(tried):
    lines = "\n".join(f"  {where}: {path}" for where, path in tried)
    return LibraryNotFound(
        f"libecc-host.so not found; set {ENV_VAR} to its path (e.g. build/lib/libecc-host.so). "
        f"Looked at:\n  {ENV_VAR}: not set\n{lines}\n"
        f"  the dynamic loader's search path: {NAMES[0]} (not found)")


def _open(path):
    try:
        return ctypes.CDLL(str(path))
    except OSError as e:
        raise LibraryNotFound(f"cannot load {path}: {e}") from None


def find_and_open():
    """(CDLL, path) of the library, following the lookup order."""
    env = os.environ.get(ENV_VAR)
    if env:
        if not os.path.isfile(env):
            raise LibraryNotFound(f"{ENV_VAR}={env}: no such file")
        return _open(env), os.path.abspath(env)
    tried = candidates()
    for _, path in tried:
        if path.is_file():
            return _open(path), str(path)
    try:
        lib = ctypes.CDLL(NAMES[0])
    except OSError:
        raise _not_found(tried) from None
    return lib, NAMES[0]


# name: (restype, argtypes), of ABI 1.1: a library without one is refused.
_PROTOTYPES = {
    "ecc_open": (c_int, [c_char_p, POINTER(_abi.OpenOptions), POINTER(c_void_p), c_char_p,
                         c_size_t]),
    "ecc_close": (c_int, [c_void_p]),
    "ecc_save": (c_int, [c_void_p, POINTER(_abi.SaveEntry), c_size_t]),
    "ecc_flush": (c_int, [c_void_p, c_void_p]),
    "ecc_load": (c_int, [c_void_p, POINTER(_abi.LoadEntry), c_size_t, c_void_p]),
    "ecc_poll": (c_int, [c_void_p, POINTER(_abi.CompletionRecord), c_size_t, POINTER(c_size_t)]),
    "ecc_get_stats": (c_int, [c_void_p, POINTER(_abi.StatsRecord)]),
    "ecc_describe": (c_int, [c_void_p, POINTER(_abi.InfoRecord)]),
    "ecc_last_error": (c_int, [c_void_p, c_char_p, c_size_t]),
    "ecc_reserve": (c_int, [c_void_p, c_char_p, c_uint64, POINTER(_abi.EntryRecord)]),
    "ecc_save_reserved": (c_int, [c_void_p, POINTER(_abi.SaveReserved), c_size_t]),
    "ecc_abort_reserved": (c_int, [c_void_p, c_uint64]),
    "ecc_lookup": (c_int, [c_void_p, POINTER(c_char_p), c_size_t, c_uint32,
                           POINTER(_abi.EntryRecord)]),
    "ecc_load_pinned": (c_int, [c_void_p, POINTER(_abi.LoadPinned), c_size_t, c_void_p]),
    "ecc_unpin": (c_int, [c_void_p, c_uint64]),
    "ecc_remove": (c_int, [c_void_p, c_char_p]),
    "ecc_list": (c_int, [c_void_p, POINTER(c_uint64), POINTER(_abi.ListedRecord), c_size_t,
                         POINTER(c_size_t)]),
    "ecc_strerror": (c_char_p, [c_int]),
    "ecc_version": (c_char_p, []),
}
REQUIRED_MINOR = 1

# The cache's functions (ABI 1.2): declared where the library has them, so that
# a 1.1 library still serves every older call (has() tells which are there).
_CACHE_PROTOTYPES = {
    "ecc_reserve_ex": (c_int, [c_void_p, POINTER(_abi.ReserveArgs), POINTER(_abi.EntryRecord)]),
    "ecc_peek": (c_int, [c_void_p, POINTER(c_char_p), c_size_t, POINTER(_abi.PeekRecord)]),
    "ecc_wait_ready": (c_int, [c_void_p, c_char_p, c_uint32, c_uint64, POINTER(_abi.EntryRecord),
                               POINTER(_abi.EntryMeta)]),
    "ecc_lookup_ex": (c_int, [c_void_p, POINTER(c_char_p), c_size_t, c_uint32,
                              POINTER(_abi.EntryRecord), POINTER(_abi.EntryMeta)]),
    "ecc_load_typed": (c_int, [c_void_p, POINTER(_abi.LoadTyped), c_size_t, c_void_p]),
    "ecc_list_ex": (c_int, [c_void_p, POINTER(c_uint64), POINTER(_abi.ListedRecord),
                            POINTER(_abi.EntryMeta), c_size_t, POINTER(c_size_t)]),
    "ecc_events": (c_int, [c_void_p, POINTER(c_uint64), POINTER(_abi.EventRecord), c_size_t,
                           POINTER(c_size_t), POINTER(c_uint64)]),
    "ecc_dtype_name": (c_char_p, [c_uint32]),
}
CACHE_MINOR = 2
_present = frozenset()  # the names of _CACHE_PROTOTYPES the loaded library has


def _declare(lib, path):
    for name, (restype, argtypes) in _PROTOTYPES.items():
        try:
            fn = getattr(lib, name)
        except AttributeError:
            raise LibraryNotFound(f"{path} has no {name}: not a libecc-host.so of ABI "
                                  f"{_abi.ABI_MAJOR}.{REQUIRED_MINOR} or newer") from None
        fn.restype, fn.argtypes = restype, argtypes
    present = set()
    for name, (restype, argtypes) in _CACHE_PROTOTYPES.items():
        fn = getattr(lib, name, None)
        if fn is not None:
            fn.restype, fn.argtypes = restype, argtypes
            present.add(name)
    return frozenset(present)


def _check_version(lib, path):
    version = lib.ecc_version().decode()
    major = re.match(r"(\d+)\.", version)
    if major is None or int(major.group(1)) != _abi.ABI_MAJOR:
        raise LibraryNotFound(f"{path} is version {version}; this client needs "
                              f"{_abi.ABI_MAJOR}.x")


def load():
    """The loaded library (declared), loading it on first use."""
    return held(_lock, _load_once)


def _load_once():
    global _loaded, _present
    if _loaded is None:
        lib, path = find_and_open()
        present = _declare(lib, path)
        _check_version(lib, path)
        _loaded, _present = (lib, path), present
    return _loaded[0]


def has(name):
    """Whether the loaded library has the cache function `name` (ABI 1.2)."""
    load()
    return name in _present


def lacking(name, what):
    """The text of a call refused because the library predates `name`."""
    version = load().ecc_version().decode()
    return (f"{what}: {path()} is libecc-host {version}, which has no {name} "
            f"(ABI {_abi.ABI_MAJOR}.{CACHE_MINOR}, the cache): install a newer libecc-host.so")


def path():
    """The path of the library in use (loading it if needed)."""
    load()
    return _loaded[1]


def last_error(lib, handle):
    buf = ctypes.create_string_buffer(1024)
    if lib.ecc_last_error(handle, buf, len(buf)) != 0:
        return ""
    return buf.value.decode("utf-8", "replace")


def strerror(lib, code):
    return lib.ecc_strerror(code).decode("utf-8", "replace")

