"""kiln's tensor-map record (include/kiln/tensor_map.h) for the emulator's `tensormap` parameters, built from a
kernel's `tmap` launch lines (docs/registry.md) as kiln_launch_bind builds it in C: the tensor's declared dims,
its strides (the stride parameters given, else contiguous), the box and the swizzle."""

import ctypes

from . import _extents, _lib
from ._gen import spec_values
from .errors import KilnArgumentError

_RANK_MAX = 5
MAGIC = 0x504D544B  # "KTMP"
_TYPES = {"f16": (6, 2), "f32": (7, 4), "bf16": (9, 2)}  # CUtensorMapDataType, element bytes
_SWIZZLE = {None: 0, "32": 1, "64": 2, "128": 3}


class Record(ctypes.Structure):
    _fields_ = [("magic", ctypes.c_uint32), ("elem_bytes", ctypes.c_uint32), ("rank", ctypes.c_uint32),
                ("swizzle", ctypes.c_uint32), ("base", ctypes.c_uint64), ("dims", ctypes.c_uint64 * _RANK_MAX),
                ("strides", ctypes.c_uint64 * (_RANK_MAX - 1)), ("box", ctypes.c_uint32 * _RANK_MAX),
                ("oob_nan", ctypes.c_uint32), ("data_type", ctypes.c_uint32)]


def _buffer():
    """A zeroed 128-byte buffer at a 64-byte aligned address (a CUtensorMap's size and alignment)."""
    raw = ctypes.create_string_buffer(128 + 64)
    at = (ctypes.addressof(raw) + 63) & ~63
    return raw, at


def _ptrs(meta, bound):
    """ptr_of for records(): the address of a bound tensor, or a clear error when it is missing."""
    views = {p["name"]: v for p, v in bound if p["kind"] == "ptr" and v is not None}

    def ptr_of(name):
        if name not in views:
            raise KilnArgumentError("%s: its tensor map over '%s' needs that array (got None)" % (meta["spec"], name))
        return views[name].ptr
    return ptr_of


def _shape_names(meta, bound, env):
    """env with the dims a tensor's declaration names that are no kernel parameter (varlen's total_k) read from the
    shape of the array bound to it, where the ranks agree."""
    views = {p["name"]: v for p, v in bound if p["kind"] == "ptr" and v is not None}
    for w in (l.split() for l in meta.get("launch", "").splitlines()):
        if len(w) >= 4 and w[0] == "tensor" and w[1] in views:
            dims = [d for d in w[3:] if "=" not in d]
            shape = tuple(views[w[1]].shape)
            if len(dims) == len(shape):
                for d, n in zip(dims, shape):
                    if d.isidentifier() and d not in env:
                        env[d] = int(n)
    return env


def emulated(meta, params, bound):
    """The records of the kernel's tensormap parameters as the emulator reads them: {name: (keep, address)}."""
    env = _shape_names(meta, bound, _extents.variables(spec_values(meta["spec"]), params))
    return records(meta, params, env, _ptrs(meta, bound))


def encoded(rt, meta, params, bound):
    """The kernel's tensormap parameters encoded by the driver (kiln_tensor_map_encode, cuTensorMapEncodeTiled):
    {name: (keep, address of the 128 bytes)} for kiln_kernel_launch's kiln_arg.tmap."""
    out = {}
    for name, (raw, at) in emulated(meta, params, bound).items():
        buf, addr = _buffer()
        err = _lib.Error()
        _lib.check(rt._lib.kiln_tensor_map_encode(rt._live(), ctypes.c_void_p(at), ctypes.c_void_p(addr),
                                                  ctypes.byref(err)), err)
        out[name] = ((raw, buf), addr)
    return out


def records(meta, params, env, ptr_of):
    """{param name: (keep-alive, address)} for every tensormap parameter of the kernel. params: the caller's
    arguments by name; env: the launch's integer names (_extents.variables); ptr_of(name): the address of
    tensor `name`'s array."""
    lines = [l.split() for l in meta.get("launch", "").splitlines()]
    out = {}
    for p in meta["params"]:
        if p["kind"] != "tensormap":
            continue
        line = next((w for w in lines if len(w) >= 3 and w[0] == "tmap" and w[1] == p["name"]), None)
        decl = line and next((w for w in lines if len(w) >= 4 and w[0] == "tensor" and w[1] == line[2]), None)
        if decl is None:
            raise KilnArgumentError("%s: tensor map parameter '%s' has no tmap line of a declared tensor"
                                    % (meta["spec"], p["name"]))
        tensor = line[2]
        dims = [_extents._eval(d, env) for d in decl[3:] if "=" not in d]
        boxes = [w for w in line[3:] if "=" not in w]
        swz = next((w.split("=", 1)[1] for w in line[3:] if w.startswith("swizzle=")), None)
        if len(boxes) != len(dims) or not 1 <= len(dims) <= _RANK_MAX:
            raise KilnArgumentError("%s: tensor map '%s' needs a box for each of %s's %d dims"
                                    % (meta["spec"], p["name"], tensor, len(dims)))
        given = {int(w[3]): params.get(w[1], 0) for w in lines if len(w) == 4 and w[0] == "stride" and w[2] == tensor}
        strides, c = [0] * len(dims), 1
        for axis in reversed(range(len(dims))):
            strides[axis] = given.get(axis) or c
            c *= max(dims[axis], 1)
        dtype, eb = _TYPES[p["dtype"]]
        raw, at = _buffer()
        r = Record.from_address(at)
        r.magic, r.elem_bytes, r.rank, r.swizzle = MAGIC, eb, len(dims), _SWIZZLE[swz]
        r.base, r.oob_nan, r.data_type = ptr_of(tensor), 0, dtype
        n = len(dims)
        for k in range(n):
            r.dims[n - 1 - k] = dims[k]
            r.box[n - 1 - k] = _extents._eval(boxes[k], env)
            if k < n - 1:
                r.strides[n - 2 - k] = strides[k] * eb
        out[p["name"]] = (raw, at)
    return out
