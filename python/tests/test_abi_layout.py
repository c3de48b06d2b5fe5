# SPDX-License-Identifier: Apache-2.0
"""The ctypes mirror against the C compiler: every struct's size, its fields'
offsets and sizes, and every closed set (values, names, texts), as abi_layout.c
prints them, so that a header change cannot silently break the client."""

import ctypes
import os
import shutil
import subprocess
from collections import defaultdict

import pytest
from conftest import REPO

import ecc
from ecc import _abi

HELPER_ENV = "ECC_ABI_LAYOUT"


def _compile(tmp_path_factory):
    cc = shutil.which(os.environ.get("CC", "cc"))
    if cc is None:
        pytest.skip(f"no {HELPER_ENV} helper and no C compiler to build one")
    out = tmp_path_factory.mktemp("layout") / "abi_layout"
    subprocess.run([cc, "-std=c11", "-I", str(REPO / "abi"), "-I",
                    str(REPO / "host-shim" / "include"),
                    str(REPO / "python" / "tests" / "abi_layout.c"), "-o", str(out)], check=True)
    return out


@pytest.fixture(scope="module")
def layout(tmp_path_factory):
    """The helper's report: sizes, fields and rows of the closed sets."""
    helper = os.environ.get(HELPER_ENV) or _compile(tmp_path_factory)
    text = subprocess.run([str(helper)], check=True, capture_output=True, text=True).stdout
    sizes, fields, rows = {}, defaultdict(dict), defaultdict(list)
    for line in text.splitlines():
        kind, rest = line.split(" ", 1)
        if kind == "struct":
            name, size = rest.split()
            sizes[name] = int(size)
        elif kind == "field":
            struct, field, offset, size = rest.split()
            fields[struct][field] = (int(offset), int(size))
        else:
            rows[kind].append(rest)
    return sizes, fields, rows


def test_every_struct_has_the_c_size(layout):
    sizes, _, _ = layout
    assert set(sizes) == set(_abi.C_STRUCTS), "the helper and the mirror list other structs"
    wrong = {name: (ctypes.sizeof(cls), sizes[name]) for name, cls in _abi.C_STRUCTS.items()
             if ctypes.sizeof(cls) != sizes[name]}
    assert not wrong, f"(python, C) sizes differ: {wrong}"


def test_every_field_has_the_c_offset_and_size(layout):
    _, fields, _ = layout
    for name, cls in _abi.C_STRUCTS.items():
        mine = {f[0]: (getattr(cls, f[0]).offset, getattr(cls, f[0]).size)
                for f in cls._fields_}
        assert mine == fields[name], f"{name}: python {mine} != C {fields[name]}"


def _table(rows, kind):
    out = []
    for row in rows[kind]:
        name, value, text = row.split(" ", 2)
        out.append((name, int(value), text))
    return tuple(out)


@pytest.mark.parametrize("kind, table", [
    ("status", _abi.STATUS_TABLE), ("level", _abi.LOG_LEVEL_TABLE), ("dir", _abi.DIR_TABLE),
    ("state", _abi.ENTRY_STATE_TABLE), ("cap", _abi.CAP_TABLE), ("event", _abi.EVENT_TABLE)])
def test_closed_sets_match_the_x_macro_tables(layout, kind, table):
    assert table == _table(layout[2], kind)


def test_constants_match(layout):
    rows = layout[2]
    consts = dict(r.split() for r in rows["const"])
    assert int(consts["ECC_KEY_MAX"]) == ecc.KEY_MAX
    assert int(consts["ECC_ENTRY_MAX_EXTENTS"]) == ecc.ENTRY_MAX_EXTENTS
    assert int(consts["ECC_HIST_BUCKETS"]) == ecc.HIST_BUCKETS
    assert int(consts["ECC_ABI_MAJOR"]) == _abi.ABI_MAJOR
    assert int(consts["ECC_ABI_MINOR"]) == _abi.ABI_MINOR
    assert tuple(int(b) for b in rows["hist"]) == ecc.HIST_BOUNDS
    assert int(consts["ECC_TENSOR_MAX_DIMS"]) == _abi.TENSOR_MAX_DIMS


def test_dtype_table_matches(layout):
    rows = tuple(tuple(int(x) if x.isdigit() else x for x in r.split()) for r in layout[2]["dtype"])
    assert rows == _abi.DTYPE_TABLE


def test_status_enum_is_the_table():
    assert [(s.name, s.value) for s in ecc.Status] == [(n, v) for n, v, _ in _abi.STATUS_TABLE]
    assert ecc.ECC_ERR_BUSY is ecc.Status.ECC_ERR_BUSY and ecc.ECC_ERR_BUSY == -4


def test_strerror_of_the_library_names_each_code():
    lib = ecc._lib.load()
    for name, value, text in _abi.STATUS_TABLE:
        assert ecc._lib.strerror(lib, value) == f"{name}: {text}"
