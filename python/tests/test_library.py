# SPDX-License-Identifier: Apache-2.0
"""Finding libecc-host.so: ECC_HOST_LIBRARY first, then beside the package, then the
install prefix, then the build tree, and an error that names every place looked
at. Each case runs in a fresh interpreter, since a process loads the library once."""

import os
import re
import shutil
import subprocess
import sys

import pytest
from conftest import PYTHON_DIR

import ecc

PROBE = "import ecc; print(ecc.library_path())"


def run_probe(package_parent, env_library=None, code=PROBE):
    env = {k: v for k, v in os.environ.items() if k not in ("ECC_HOST_LIBRARY", "PYTHONPATH")}
    if env_library is not None:
        env["ECC_HOST_LIBRARY"] = str(env_library)
    return subprocess.run([sys.executable, "-c", code], cwd=str(package_parent), env=env,
                          capture_output=True, text=True)


def copy_package(parent):
    parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(PYTHON_DIR / "ecc", parent / "ecc",
                    ignore=shutil.ignore_patterns("__pycache__"))
    return parent / "ecc"


def built_library():
    return os.path.realpath(ecc.library_path())


def test_the_environment_variable_wins(tmp_path):
    pkg = copy_package(tmp_path / "site")
    os.symlink(built_library(), pkg / "libecc-host.so.1")
    chosen = tmp_path / "chosen.so"
    os.symlink(built_library(), chosen)
    out = run_probe(tmp_path / "site", env_library=chosen)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(chosen)


def test_a_missing_file_in_the_environment_variable_is_named(tmp_path):
    out = run_probe(PYTHON_DIR, env_library=tmp_path / "nowhere.so")
    assert out.returncode != 0
    assert f"ECC_HOST_LIBRARY={tmp_path / 'nowhere.so'}: no such file" in out.stderr


def test_a_library_beside_the_package_is_found(tmp_path):
    pkg = copy_package(tmp_path / "site")
    os.symlink(built_library(), pkg / "libecc-host.so.1")
    out = run_probe(tmp_path / "site")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(pkg / "libecc-host.so.1")


def test_the_install_prefix_of_the_package_is_searched(tmp_path):
    prefix = tmp_path / "prefix"
    site = prefix / "lib" / f"python3.{sys.version_info.minor}" / "site-packages"
    copy_package(site)
    os.symlink(built_library(), prefix / "lib" / "libecc-host.so.1")
    out = run_probe(site)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(prefix / "lib" / "libecc-host.so.1")


def test_the_build_tree_of_a_checkout_is_searched(tmp_path):
    repo = tmp_path / "repo"
    copy_package(repo / "python")
    (repo / "abi").mkdir()
    (repo / "CMakeLists.txt").write_text("")
    (repo / "build" / "lib").mkdir(parents=True)
    (repo / "build" / "CMakeCache.txt").write_text("")
    os.symlink(built_library(), repo / "build" / "lib" / "libecc-host.so")
    out = run_probe(repo / "python")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(repo / "build" / "lib" / "libecc-host.so")


def test_the_error_names_every_place_it_looked(tmp_path):
    pkg = copy_package(tmp_path / "site")
    code = ("import ecc\ntry:\n    ecc.library_path()\nexcept ecc.LibraryNotFound as e:\n"
            "    print(e)\nelse:\n    print('FOUND')")
    out = run_probe(tmp_path / "site", code=code)
    if out.stdout.strip() == "FOUND":
        pytest.skip("the dynamic loader finds an installed libecc-host.so.1")
    assert "ECC_HOST_LIBRARY: not set" in out.stdout
    assert f"beside the package: {pkg / 'libecc-host.so.1'}" in out.stdout
    assert "the dynamic loader's search path: libecc-host.so.1" in out.stdout


def test_import_needs_neither_the_library_nor_numpy(tmp_path):
    code = ("import sys, ecc\nassert 'numpy' not in sys.modules and 'torch' not in sys.modules"
            "\nassert ecc._lib._loaded is None\nprint('ok')")
    out = run_probe(PYTHON_DIR, env_library=tmp_path / "nowhere.so", code=code)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_the_package_and_the_library_carry_one_version():
    pyproject = (PYTHON_DIR / "pyproject.toml").read_text()
    declared = re.search(r'^version = "([^"]+)"', pyproject, re.M).group(1)
    assert ecc.__version__ == declared == ecc.library_version()
