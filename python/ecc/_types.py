# SPDX-License-Identifier: Apache-2.0
"""Typed entries of ABI 1.2: dtype names as DTYPE_TABLE has them, recognised from
a name, a numpy or torch dtype, or a tensor or array's own dtype and shape; the
descriptors (ecc_tensor_t) reserve_ex and load_typed take, read back; and the
tensor or array a load of an entry needs. numpy and torch are imported only to
allocate, or when the caller's object is already one of theirs."""

import struct
import sys

from . import _abi, _lib
from ._buffers import module_of
from .errors import invalid

NONE = 0
DTYPE_VALUE = {text: value for _, value, text, _ in _abi.DTYPE_TABLE if value != NONE}
DTYPE_NAME = {value: text for _, value, text, _ in _abi.DTYPE_TABLE}
DTYPE_BYTES = {value: size for _, value, _, size in _abi.DTYPE_TABLE}
NAMES = ", ".join(DTYPE_VALUE)

# Array-interface type strings ("<f2") and buffer-protocol formats ("e") that
# name one of the dtypes; anything else has no dtype the ABI knows.
_TYPESTR = {"f2": "float16", "f4": "float32", "f8": "float64", "i1": "int8", "u1": "uint8",
            "i2": "int16", "i4": "int32", "i8": "int64"}
_FORMAT = {"e": "float16", "f": "float32", "d": "float64", "b": "int8", "B": "uint8",
           "c": "uint8", "h": "int16", "i": "int32", "q": "int64",
           "l": f"int{8 * struct.calcsize('l')}"}


def dtype_name(value):
    """The name of a dtype value: the table's, else the library's (a newer one
    may know more), else "dtype N"."""
    name = DTYPE_NAME.get(value)
    if name is None and _lib.has("ecc_dtype_name"):
        raw = _lib.load().ecc_dtype_name(value)
        name = raw.decode() if raw else None
    return name or f"dtype {value}"


def _numpy_name(spec):
    """dtype.name of a numpy dtype, scalar type or ml_dtypes type; None for
    anything numpy (already imported by the caller) does not take as a dtype."""
    np = sys.modules.get("numpy")
    if np is None:
        return None
    is_type = isinstance(spec, type) and spec.__module__.split(".", 1)[0] in ("numpy",
                                                                             "ml_dtypes")
    if not (isinstance(spec, np.dtype) or is_type):
        return None
    dt = np.dtype(spec)
    if not dt.isnative:
        return f"{dt.name} of non-native byte order"
    return dt.name


def _name_of(spec):
    """The name a dtype spec stands for, whether or not the ABI knows it."""
    if isinstance(spec, str):
        return spec
    if module_of(spec) == "torch" and type(spec).__name__ == "dtype":
        return str(spec).split(".", 1)[-1]  # "torch.float16"
    found = _numpy_name(spec)
    return found if found is not None else repr(spec)


def dtype_value(spec, what):
    """The ECC_DTYPE_* value of a name ("float16"), a numpy dtype or a torch dtype."""
    name = _name_of(spec)
    value = DTYPE_VALUE.get(name)
    if value is None:
        raise invalid(f"{what}: dtype {name} is none of the entry types ({NAMES})")
    return value


def checked_shape(shape, what):
    """A shape as a descriptor holds it: 1 to 4 extents of at least 1 (a 0-d
    tensor or array is one element)."""
    if isinstance(shape, int) or hasattr(shape, "__index__"):
        shape = (shape,)
    try:
        dims = tuple(shape)
    except TypeError:
        raise TypeError(f"{what}: shape must be a sequence of ints, not "
                        f"{type(shape).__name__}") from None
    for d in dims:
        if isinstance(d, bool) or not hasattr(d, "__index__"):
            raise TypeError(f"{what}: shape {dims} holds a {type(d).__name__}, not an int")
    dims = tuple(d.__index__() for d in dims) or (1,)
    if len(dims) > _abi.TENSOR_MAX_DIMS:
        raise invalid(f"{what}: shape {dims} has {len(dims)} dimensions; an entry's type has at "
                      f"most {_abi.TENSOR_MAX_DIMS}: reshape it")
    if min(dims) < 1:
        raise invalid(f"{what}: shape {dims} has an extent below 1")
    return dims


def nbytes_of(value, dims):
    n = DTYPE_BYTES[value]
    for d in dims:
        n *= d
    return n


def descriptor(value, dims):
    """The ecc_tensor_t of a dtype value and a checked shape (untyped: NONE, ())."""
    t = _abi.Tensor(dtype=value, n_dims=len(dims))
    for i, d in enumerate(dims):
        t.dims[i] = d
    return t


def read_descriptor(t):
    """(dtype name or None when untyped, shape) of an ecc_tensor_t."""
    if t.dtype == NONE:
        return None, ()
    return dtype_name(t.dtype), tuple(t.dims[:min(t.n_dims, _abi.TENSOR_MAX_DIMS)])


def _interface_name(iface):
    typestr = iface.get("typestr", "")
    if typestr[:1] not in "<|":  # big-endian data is not what the entry's bytes are
        return None
    return _TYPESTR.get(typestr[1:])


def _spec_and_shape(obj):
    """(dtype spec, shape) an object declares, or None."""
    if hasattr(obj, "dtype") and hasattr(obj, "shape") and not isinstance(obj, type):
        return obj.dtype, tuple(obj.shape)
    for attr in ("__cuda_array_interface__", "__array_interface__"):
        iface = getattr(obj, attr, None)
        if isinstance(iface, dict):
            name = _interface_name(iface)
            return (name, tuple(iface["shape"])) if name else None
    try:
        view = memoryview(obj)
    except TypeError:
        return None
    name = _FORMAT.get(view.format.lstrip("@=<"))
    return (name, view.shape) if name else None


def type_of(obj, what):
    """(dtype value, shape) of a tensor or array; invalid when it has none the
    ABI knows."""
    found = _spec_and_shape(obj)
    if found is None:
        raise invalid(f"{what}: a {type(obj).__module__}.{type(obj).__qualname__} declares no "
                      f"dtype and shape of the entry types ({NAMES})")
    spec, shape = found
    return dtype_value(spec, what), checked_shape(shape, what)


def reserve_type(nbytes, dtype, shape, like, what):
    """(nbytes, dtype value, dims) of reserve's arguments; untyped is (nbytes, NONE, ())."""
    if like is not None:
        if dtype is not None or shape is not None:
            raise TypeError(f"{what}: give like= or dtype and shape, not both")
        value, dims = type_of(like, f"{what}: like")
        size = nbytes_of(value, dims)
        if nbytes is not None and nbytes != size:
            raise invalid(f"{what}: nbytes is {nbytes}, but like= holds {size} bytes")
        return size, value, dims
    if dtype is None:
        if shape is not None:
            raise TypeError(f"{what}: a shape needs a dtype")
        if nbytes is None:
            raise TypeError(f"{what}: give nbytes, dtype and shape, or like=")
        return nbytes, NONE, ()
    value = dtype_value(dtype, what)
    if shape is None:
        if nbytes is None or nbytes % DTYPE_BYTES[value]:
            raise invalid(f"{what}: dtype {DTYPE_NAME[value]} without a shape needs nbytes, a "
                          f"multiple of {DTYPE_BYTES[value]}, not {nbytes}")
        shape = nbytes // DTYPE_BYTES[value]
    dims = checked_shape(shape, what)
    return (nbytes_of(value, dims) if nbytes is None else nbytes), value, dims


def _torch_empty(name, dims, device, pin_memory):
    try:
        import torch
    except ImportError as e:
        raise invalid(f"empty_like_entry: device={device!r} needs torch, which cannot be "
                      f"imported ({e}); leave device out for a numpy array") from None
    return torch.empty(dims, dtype=getattr(torch, name), device=device, pin_memory=pin_memory)


def _numpy_dtype(np, name):
    try:
        return np.dtype(name)
    except TypeError:
        pass
    try:  # bfloat16 and the float8 types live in ml_dtypes, not in numpy
        import ml_dtypes
        return np.dtype(getattr(ml_dtypes, name))
    except (ImportError, AttributeError):
        raise invalid(f"empty_like_entry: numpy has no {name}: install ml_dtypes, or pass "
                      "device= for a torch tensor") from None


def empty_like_entry(entry, device=None, pin_memory=False):
    """An uninitialised tensor or array an entry (Entry, Peeked or Listed) loads
    into: its dtype and shape, or uint8 of its bytes when untyped. A torch tensor
    on `device` ("cuda:0", "cpu", a torch.device) when one is given, pinned with
    pin_memory=True; else a numpy array."""
    if not entry.nbytes:
        raise invalid(f"empty_like_entry: the entry is {entry.state.name}, with no bytes to load")
    name, dims = entry.dtype, tuple(entry.shape)
    if name is None:
        name, dims = "uint8", (entry.nbytes,)
    if device is not None:
        return _torch_empty(name, dims, device, pin_memory)
    if pin_memory:
        raise invalid("empty_like_entry: pin_memory needs a torch device (device=\"cpu\")")
    import numpy as np
    return np.empty(dims, dtype=_numpy_dtype(np, name))
