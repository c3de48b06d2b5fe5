# SPDX-License-Identifier: Apache-2.0
# A build backend (PEP 517, PEP 660) for the package: a wheel is a zip of ecc/
# and its metadata, so nothing has to be fetched to build one and
# `pip install ./python` works offline, with or without build isolation.
# Built from a checkout, the wheel also carries libecc-host.so and its plugins
# (ecc/_lib/), built by CMake, so the installed package needs no variable.
import base64
import hashlib
import os
import re
import shutil
import subprocess
import sysconfig
import tempfile
import zipfile

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_PACKAGE = "ecc"


def _project():
    """name, version and the METADATA lines, read from pyproject.toml."""
    with open(os.path.join(_ROOT, "pyproject.toml"), "rb") as f:
        text = f.read().decode("utf-8")
    try:
        import tomllib

        p = tomllib.loads(text)["project"]
    except ImportError:  # Python < 3.11: the two fields the wheel's name needs
        p = {k: re.search(r'^%s\s*=\s*"([^"]*)"' % k, text, re.M).group(1)
             for k in ("name", "version", "description", "requires-python")}
    lines = ["Metadata-Version: 2.1", "Name: " + p["name"], "Version: " + p["version"],
             "Summary: " + p.get("description", ""),
             "Requires-Python: " + p.get("requires-python", ">=3")]
    lines += ["License: " + p["license"]["text"]] if isinstance(p.get("license"), dict) else []
    for extra, reqs in sorted(p.get("optional-dependencies", {}).items()):
        lines.append("Provides-Extra: " + extra)
        lines += ['Requires-Dist: %s; extra == "%s"' % (r, extra) for r in reqs]
    return p["name"], p["version"], "\n".join(lines) + "\n"


def _digest(data):
    raw = hashlib.sha256(data).digest()
    return "sha256=" + base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _package_files():
    """Every module of the package and of its subpackages (ecc/serving/, ...)."""
    pkg = os.path.join(_ROOT, _PACKAGE)
    for top, dirs, names in os.walk(pkg):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        rel = os.path.relpath(top, _ROOT).replace(os.sep, "/")
        for name in sorted(names):
            if name.endswith(".py"):
                yield rel + "/" + name, os.path.join(top, name)


def _platform_tag():
    return re.sub(r"[^A-Za-z0-9]", "_", sysconfig.get_platform())


def _write_wheel(wheel_directory, files, native=False):
    """files: (path in the wheel, bytes). A wheel with native code is tagged
    for this platform (any Python 3: the library is loaded through ctypes).
    Returns the wheel's file name."""
    name, version, metadata = _project()
    dist_info = "%s-%s.dist-info" % (name, version)
    tag = "py3-none-" + (_platform_tag() if native else "any")
    wheel = "Wheel-Version: 1.0\nGenerator: ecc_backend\nRoot-Is-Purelib: %s\nTag: %s\n" % (
        "false" if native else "true", tag)
    files = list(files) + [(dist_info + "/METADATA", metadata.encode()),
                           (dist_info + "/WHEEL", wheel.encode())]
    record = "".join("%s,%s,%d\n" % (path, _digest(data), len(data)) for path, data in files)
    record += dist_info + "/RECORD,,\n"
    filename = "%s-%s-%s.whl" % (name, version, tag)
    with zipfile.ZipFile(os.path.join(wheel_directory, filename), "w", zipfile.ZIP_DEFLATED) as z:
        for path, data in files + [(dist_info + "/RECORD", record.encode())]:
            info = zipfile.ZipInfo(path, date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = (0o755 if path.endswith(".so") or ".so." in path else 0o644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)
    return filename


# ---- the C library, bundled ------------------------------------------------

_CHECKOUT = os.path.dirname(_ROOT)
_BUNDLE_DIR = _PACKAGE + "/_lib"  # libecc-host.so.1 here, its plugins in _lib/ecc/
_BUNDLE_WORDS = ("auto", "yes", "no")


class BundleError(RuntimeError):
    """The C library could not be built or installed for the wheel."""


def _is_checkout():
    return (os.path.isfile(os.path.join(_CHECKOUT, "CMakeLists.txt"))
            and os.path.isdir(os.path.join(_CHECKOUT, "abi")))


def _setting(config_settings, key, default):
    value = (config_settings or {}).get(key, default)
    return value[-1] if isinstance(value, list) else value


def _bundle_choice(config_settings):
    """True to bundle, False not to; `bundle` is auto (bundle when built from a
    checkout with cmake on PATH), yes (fail if it cannot) or no."""
    word = str(_setting(config_settings, "bundle", "auto")).lower()
    if word not in _BUNDLE_WORDS:
        raise BundleError("config setting bundle=%s: use one of %s (e.g. pip install "
                          "--config-settings bundle=no ./python)"
                          % (word, ", ".join(_BUNDLE_WORDS)))
    checkout = _is_checkout()
    possible = checkout and shutil.which("cmake") is not None
    if word == "yes" and not possible:
        raise BundleError("bundle=yes, but %s: build the wheel from the project's checkout, "
                          "with cmake installed" % ("cmake is not on PATH" if checkout else
                                                    "this is not a checkout of the project"))
    return possible and word != "no"


def _run(cmd, what):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if p.returncode != 0:
        tail = "\n".join(p.stdout.decode(errors="replace").splitlines()[-30:])
        raise BundleError("%s failed (%s, exit %d):\n%s\nFix that, or build a wheel without the "
                          "library: --config-settings bundle=no (then set ECC_HOST_LIBRARY)"
                          % (what, " ".join(cmd), p.returncode, tail))


def _build_library(build_dir):
    """Configures (once) and builds the library and plugins in build_dir."""
    if not os.path.isfile(os.path.join(build_dir, "CMakeCache.txt")):
        _run(["cmake", "-S", _CHECKOUT, "-B", build_dir, "-DCMAKE_BUILD_TYPE=Release",
              "-DECC_TESTS=OFF", "-DCMAKE_INSTALL_LIBDIR=lib"], "configuring the C library")
    _run(["cmake", "--build", build_dir, "-j%d" % (os.cpu_count() or 1)],
         "building the C library")


def _installed_library(build_dir):
    """(path in the wheel, bytes) of libecc-host.so.1 and of every plugin, as
    `cmake --install` lays them out: plugins in ecc/ beside the library, where
    the library looks for them."""
    with tempfile.TemporaryDirectory(prefix="ecc-wheel-") as stage:
        _run(["cmake", "--install", build_dir, "--prefix", stage], "installing the C library")
        libs = [os.path.join(top, n) for top, _, names in os.walk(stage) for n in names
                if n == "libecc-host.so.1"]
        if len(libs) != 1:
            raise BundleError("cmake --install put %d copies of libecc-host.so.1 under %s"
                              % (len(libs), stage))
        libdir = os.path.dirname(libs[0])
        plugins = os.path.join(libdir, "ecc")
        names = sorted(n for n in os.listdir(plugins) if n.endswith(".so")) \
            if os.path.isdir(plugins) else []
        if not names:
            raise BundleError("cmake --install put no plugin in %s" % plugins)
        files = [(_BUNDLE_DIR + "/libecc-host.so.1", _read(libs[0]))]
        files += [(_BUNDLE_DIR + "/ecc/" + n, _read(os.path.join(plugins, n))) for n in names]
        return files


def _bundled(config_settings):
    """The library's files for the wheel, or [] when it is not bundled. The
    build goes to build-wheel/ in the checkout (kept, so the next install
    rebuilds only what changed), or to config setting build-dir."""
    if not _bundle_choice(config_settings):
        return []
    build_dir = os.path.abspath(_setting(config_settings, "build-dir",
                                         os.path.join(_CHECKOUT, "build-wheel")))
    _build_library(build_dir)
    return _installed_library(build_dir)


def _read(path):
    with open(path, "rb") as f:
        return f.read()


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    native = _bundled(config_settings)
    modules = [(arc, _read(src)) for arc, src in _package_files()]
    return _write_wheel(wheel_directory, modules + native, native=bool(native))


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    # A .pth file puts the checkout's python/ on sys.path: edits take effect at once.
    return _write_wheel(wheel_directory, [(_PACKAGE + "_editable.pth", (_ROOT + "\n").encode())])


def build_sdist(sdist_directory, config_settings=None):
    import tarfile

    name, version, metadata = _project()
    base = "%s-%s" % (name, version)
    filename = base + ".tar.gz"
    with tarfile.open(os.path.join(sdist_directory, filename), "w:gz") as t:
        for rel in ["pyproject.toml", "_backend/ecc_backend.py"] + [a for a, _ in _package_files()]:
            t.add(os.path.join(_ROOT, rel), arcname=base + "/" + rel)
    return filename
