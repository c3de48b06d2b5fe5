# SPDX-License-Identifier: Apache-2.0
# The package's own build backend (python/_backend): the wheel it writes
# holds every module, metadata read from pyproject.toml, and a RECORD whose
# hashes and sizes match the files; built with the library, it carries
# libecc-host.so and its plugins, which the installed package finds by itself.
import base64
import hashlib
import os
import subprocess
import sys
import zipfile

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "_backend"))

import ecc_backend  # noqa: E402


def assert_true_record(z, names):
    rows = [r.split(",") for r in z.read("ecc-1.0.0.dist-info/RECORD").decode().splitlines()]
    assert {r[0] for r in rows} == names
    for path, digest, size in rows:
        if path.endswith("RECORD"):
            assert digest == "" and size == ""
            continue
        data = z.read(path)
        want = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        assert digest == "sha256=" + want and int(size) == len(data), path


def test_the_wheel_holds_every_module_and_a_true_record(tmp_path):
    name = ecc_backend.build_wheel(str(tmp_path), {"bundle": "no"})
    assert name == "ecc-1.0.0-py3-none-any.whl"
    assert ecc_backend.get_requires_for_build_wheel() == []
    with zipfile.ZipFile(tmp_path / name) as z:
        names = set(z.namelist())
        pkg = os.path.join(HERE, "..")
        modules = {os.path.relpath(os.path.join(top, f), pkg).replace(os.sep, "/")
                   for top, _, files in os.walk(os.path.join(pkg, "ecc")) for f in files
                   if f.endswith(".py")}
        assert "ecc/serving/__init__.py" in modules
        assert modules <= names
        meta = z.read("ecc-1.0.0.dist-info/METADATA").decode()
        assert "Name: ecc\n" in meta and "Version: 1.0.0\n" in meta
        assert 'Requires-Dist: numpy; extra == "numpy"' in meta
        assert "Root-Is-Purelib: true" in z.read("ecc-1.0.0.dist-info/WHEEL").decode()
        assert not [n for n in names if n.startswith("ecc/_lib/")]
        assert_true_record(z, names)


def test_an_editable_wheel_points_at_the_checkout(tmp_path):
    name = ecc_backend.build_editable(str(tmp_path))
    with zipfile.ZipFile(tmp_path / name) as z:
        pth = z.read("ecc_editable.pth").decode().strip()
    assert os.path.samefile(pth, os.path.join(HERE, ".."))


def test_an_unknown_bundle_word_is_refused_naming_the_choices(tmp_path):
    with pytest.raises(ecc_backend.BundleError, match=r"bundle=maybe: use one of auto, yes, no"):
        ecc_backend.build_wheel(str(tmp_path), {"bundle": "maybe"})
    assert os.listdir(tmp_path) == []


# What the installed package runs with no variable set: the bundled library
# opens the shipped config and finds its plugin beside itself.
ROUND_TRIP = """
import ecc, numpy as np
with ecc.Connector(CONF, {"engine.type": "host", "region.name": NAME}) as c:
    out = np.arange(3 * 1536, dtype=np.uint8) % 251
    e = c.reserve("k", out.nbytes)
    c.save_reserved(e, out); c.flush(); c.wait("k")
    (hit,) = c.lookup("k")
    dst = np.zeros_like(out); c.load_pinned(1, hit, dst); c.wait(1)
    assert (dst == out).all()
print(ecc.library_path())
"""


def test_a_wheel_built_with_the_library_needs_no_variable(tmp_path):
    library = os.environ.get("ECC_HOST_LIBRARY")
    if os.environ.get("LD_PRELOAD"):
        # A sanitizer's runtime would be preloaded into CMake and the compiler
        # too (TSan's hangs them); the plain build's run of this test covers it.
        pytest.skip("LD_PRELOAD is set (a sanitizer build): not building a wheel under it")
    if not library:
        pytest.skip("ECC_HOST_LIBRARY names no build whose library to bundle")
    build_dir = os.path.dirname(os.path.dirname(os.path.realpath(library)))
    if not os.path.isfile(os.path.join(build_dir, "CMakeCache.txt")):
        pytest.skip("%s is not in a CMake build" % library)
    name = ecc_backend.build_wheel(str(tmp_path), {"bundle": "yes", "build-dir": build_dir})
    assert name.startswith("ecc-1.0.0-py3-none-linux_") and name.endswith(".whl")
    site = tmp_path / "site"
    with zipfile.ZipFile(tmp_path / name) as z:
        names = set(z.namelist())
        assert {"ecc/_lib/libecc-host.so.1", "ecc/_lib/ecc/libecc-shm.so"} <= names
        assert "Root-Is-Purelib: false" in z.read("ecc-1.0.0.dist-info/WHEEL").decode()
        assert_true_record(z, names)
        z.extractall(site)
    conf = os.path.join(HERE, "..", "..", "conf", "default.ini")
    code = "CONF, NAME = %r, %r\n" % (os.path.abspath(conf), "ecc-wheel-%d" % os.getpid())
    env = {k: v for k, v in os.environ.items()
           if k not in ("ECC_HOST_LIBRARY", "ECC_PLUGIN_DIR", "PYTHONPATH")}
    env["PYTHONPATH"] = str(site)
    out = subprocess.run([sys.executable, "-c", code + ROUND_TRIP], cwd=str(tmp_path), env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(site / "ecc" / "_lib" / "libecc-host.so.1")
