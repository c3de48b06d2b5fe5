# SPDX-License-Identifier: Apache-2.0
# A build backend (PEP 517, PEP 660) for the pure-Python package: a wheel is
# a zip of ecc/ and its metadata, so nothing has to be fetched to build one
# and `pip install ./python` works offline, with or without build isolation.
import base64
import hashlib
import os
import re
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


def _write_wheel(wheel_directory, files):
    """files: (path in the wheel, bytes). Returns the wheel's file name."""
    name, version, metadata = _project()
    dist_info = "%s-%s.dist-info" % (name, version)
    wheel = "Wheel-Version: 1.0\nGenerator: ecc_backend\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    files = list(files) + [(dist_info + "/METADATA", metadata.encode()),
                           (dist_info + "/WHEEL", wheel.encode())]
    record = "".join("%s,%s,%d\n" % (path, _digest(data), len(data)) for path, data in files)
    record += dist_info + "/RECORD,,\n"
    filename = "%s-%s-py3-none-any.whl" % (name, version)
    with zipfile.ZipFile(os.path.join(wheel_directory, filename), "w", zipfile.ZIP_DEFLATED) as z:
        for path, data in files + [(dist_info + "/RECORD", record.encode())]:
            z.writestr(path, data)
    return filename


def _read(path):
    with open(path, "rb") as f:
        return f.read()


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return _write_wheel(wheel_directory, ((arc, _read(src)) for arc, src in _package_files()))


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
