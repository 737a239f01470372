"""kiln._np - numpy dtypes for kiln's element types (bf16 is ml_dtypes.bfloat16) and aligned host arrays."""

import numpy as np

from .errors import KilnArgumentError

try:
    import ml_dtypes

    BF16 = np.dtype(ml_dtypes.bfloat16)
except ImportError:  # bf16 arrays then need ml_dtypes; f32/f16 work without it
    ml_dtypes = None
    BF16 = None

_ALIASES = {"f32": "f32", "float32": "f32", "float": "f32", "f16": "f16", "float16": "f16", "half": "f16",
            "bf16": "bf16", "bfloat16": "bf16"}


def dtype_name(d):
    """'f32'/'f16'/'bf16' from a kiln name, a numpy dtype or a torch dtype; KilnArgumentError otherwise."""
    if isinstance(d, str) and d in _ALIASES:
        return _ALIASES[d]
    s = str(d).replace("torch.", "")
    if s in _ALIASES:
        return _ALIASES[s]
    try:
        nd = np.dtype(d)
    except TypeError:
        nd = None
    if nd is not None:
        if nd == np.float32:
            return "f32"
        if nd == np.float16:
            return "f16"
        if BF16 is not None and nd == BF16:
            return "bf16"
    raise KilnArgumentError("dtype %r is not one kiln kernels take; valid: f32, f16, bf16" % (d,))


def elem_name(d):
    """A kernel pointer's element type: a float dtype (dtype_name) or 'i32' (index tensors: cu_seqlens, offsets)."""
    if d in ("i32", "int32") or (not isinstance(d, str) and np.dtype(d) == np.int32):
        return "i32"
    return dtype_name(d)


def np_dtype(name):
    if name == "bf16":
        if BF16 is None:
            raise KilnArgumentError("bf16 arrays need the ml_dtypes package (pip install ml_dtypes)")
        return BF16
    return np.dtype({"f32": np.float32, "f16": np.float16, "i32": np.int32}[name])


def kiln_dtype_of(a):
    return dtype_name(np.asarray(a).dtype)


def aligned_empty(shape, name, align=64):
    """An uninitialized C-contiguous array whose data starts on an `align`-byte boundary."""
    dt = np_dtype(name)
    n = int(np.prod(shape, dtype=np.int64)) if len(shape) else 1
    raw = np.empty(n * dt.itemsize + align, dtype=np.uint8)
    off = (-raw.ctypes.data) % align
    return raw[off:off + n * dt.itemsize].view(dt).reshape(shape)


def as_kiln_array(a, name, what):
    """a as a C-contiguous array of kiln dtype `name`, 64-byte aligned (copying only when needed).
    Values are converted (rounded to nearest even) when a has another float dtype."""
    a = np.asarray(a)
    if a.dtype.kind not in "fiuV" and not (BF16 is not None and a.dtype == BF16):
        raise KilnArgumentError("%s: %s arrays are not numbers kiln can take" % (what, a.dtype))
    dt = np_dtype(name)
    if a.dtype == dt and a.flags.c_contiguous and a.ctypes.data % 64 == 0:
        return a
    out = aligned_empty(a.shape, name)
    out[...] = a.astype(dt) if a.dtype != dt else a
    return out
