# SPDX-License-Identifier: Apache-2.0
# The package's own build backend (python/_backend): the wheel it writes
# holds every module, metadata read from pyproject.toml, and a RECORD whose
# hashes and sizes match the files.
import base64
import hashlib
import os
import sys
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "_backend"))

import ecc_backend  # noqa: E402


def test_the_wheel_holds_every_module_and_a_true_record(tmp_path):
    name = ecc_backend.build_wheel(str(tmp_path))
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
        rows = [r.split(",") for r in z.read("ecc-1.0.0.dist-info/RECORD").decode().splitlines()]
        assert {r[0] for r in rows} == names
        for path, digest, size in rows:
            if path.endswith("RECORD"):
                assert digest == "" and size == ""
                continue
            data = z.read(path)
            want = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            assert digest == "sha256=" + want and int(size) == len(data), path


def test_an_editable_wheel_points_at_the_checkout(tmp_path):
    name = ecc_backend.build_editable(str(tmp_path))
    with zipfile.ZipFile(tmp_path / name) as z:
        pth = z.read("ecc_editable.pth").decode().strip()
    assert os.path.samefile(pth, os.path.join(HERE, ".."))
