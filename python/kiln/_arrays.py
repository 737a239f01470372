"""kiln._arrays - reads device arrays handed to kiln: torch tensors, __cuda_array_interface__ and DLPack.

Every array becomes a DevView: data pointer, shape, strides in elements, kiln dtype, device
ordinal (None when the producer does not say), and the objects that keep the memory alive.
"""

import ctypes

from .errors import KilnArgumentError

_TYPESTR = {"f4": "f32", "f2": "f16", "i4": "i32"}  # i32: index tensors (cu_seqlens, offsets)
_DL_CPU, _DL_CUDA, _DL_CUDA_MANAGED = 1, 2, 13


class DevView:
    __slots__ = ("ptr", "shape", "strides", "dtype", "device", "keep", "is_torch")

    def __init__(self, ptr, shape, strides, dtype, device, keep, is_torch=False):
        self.ptr, self.shape, self.strides, self.dtype = ptr, tuple(shape), tuple(strides), dtype
        self.device, self.keep, self.is_torch = device, keep, is_torch

    @property
    def numel(self):
        n = 1
        for s in self.shape:
            n *= s
        return n

    def contiguous(self):
        expect = 1
        for size, stride in zip(reversed(self.shape), reversed(self.strides)):
            if size != 1 and stride != expect:
                return False
            expect *= size
        return True


def _torch_dtype(t):
    name = str(t.dtype)
    return {"torch.float32": "f32", "torch.float16": "f16", "torch.bfloat16": "bf16", "torch.int32": "i32"}.get(name), name


def is_torch_tensor(obj):
    mod = type(obj).__module__ or ""
    return mod.startswith("torch") and hasattr(obj, "data_ptr")


def _from_torch(obj, what, index_ok):
    dt, name = _torch_dtype(obj)
    dt = None if dt == "i32" and not index_ok else dt
    if dt is None:
        raise KilnArgumentError("%s: dtype %s is not one kiln kernels take; valid: float32, float16, bfloat16"
                                % (what, name))
    if not obj.is_cuda:
        raise KilnArgumentError("%s: the tensor is on %s; kiln launches need CUDA tensors" % (what, obj.device))
    return DevView(obj.data_ptr(), tuple(obj.shape), tuple(obj.stride()), dt, obj.device.index, obj, True)


def _from_cai(obj, cai, what, index_ok):
    if cai.get("mask") is not None:
        raise KilnArgumentError("%s: masked arrays are not supported" % what)
    ts = cai.get("typestr", "")
    dt = _TYPESTR.get(ts[1:]) if len(ts) == 3 and ts[0] in "<|=" else None
    dt = None if dt == "i32" and not index_ok else dt
    if dt is None and ts[1:] == "V2" and "bfloat16" in str(getattr(obj, "dtype", "")):
        dt = "bf16"  # numpy has no bf16 typestr; ml_dtypes' bfloat16 reads as V2
    if dt is None:
        raise KilnArgumentError("%s: element type %r is not one kiln kernels take; valid: <f4 (float32), "
                                "<f2 (float16), bfloat16" % (what, ts))
    ptr, _ro = cai["data"]
    shape = tuple(int(s) for s in cai["shape"])
    esize = 4 if dt in ("f32", "i32") else 2
    if cai.get("strides") is None:
        strides, acc = [], 1
        for s in reversed(shape):
            strides.append(acc)
            acc *= s
        strides = tuple(reversed(strides))
    else:
        bs = tuple(int(s) for s in cai["strides"])
        if any(s % esize for s in bs):
            raise KilnArgumentError("%s: byte strides %s are not multiples of the element size %d" % (what, bs, esize))
        strides = tuple(s // esize for s in bs)
    return DevView(int(ptr or 0), shape, strides, dt, None, obj)


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


_capsule_get = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_get.restype = ctypes.c_void_p
_capsule_get.argtypes = [ctypes.py_object, ctypes.c_char_p]


def _from_dlpack(obj, what, stream, index_ok):
    try:
        cap = obj.__dlpack__(stream=stream) if stream is not None else obj.__dlpack__()
    except TypeError:
        cap = obj.__dlpack__()
    # The capsule stays named "dltensor": its destructor then calls the producer's deleter when the
    # capsule (kept in DevView.keep) is released after the launch.
    p = _capsule_get(cap, b"dltensor")
    t = _DLTensor.from_address(p)  # DLManagedTensor starts with its DLTensor
    if t.device.device_type not in (_DL_CUDA, _DL_CUDA_MANAGED):
        raise KilnArgumentError("%s: DLPack device type %d is not CUDA memory; kiln launches need CUDA arrays"
                                % (what, t.device.device_type))
    code, bits, lanes = t.dtype.code, t.dtype.bits, t.dtype.lanes
    dt = {(2, 32): "f32", (2, 16): "f16", (4, 16): "bf16", (0, 32): "i32"}.get((code, bits)) if lanes == 1 else None
    dt = None if dt == "i32" and not index_ok else dt
    if dt is None:
        raise KilnArgumentError("%s: DLPack dtype (code %d, %d bits, %d lanes) is not one kiln kernels take; "
                                "valid: float32, float16, bfloat16" % (what, code, bits, lanes))
    shape = tuple(t.shape[i] for i in range(t.ndim))
    if t.strides:
        strides = tuple(t.strides[i] for i in range(t.ndim))
    else:
        strides, acc = [], 1
        for s in reversed(shape):
            strides.append(acc)
            acc *= s
        strides = tuple(reversed(strides))
    return DevView((t.data or 0) + t.byte_offset, shape, strides, dt, t.device.device_id, (obj, cap))


def view(obj, what, stream=None, index_ok=False):
    """A DevView of a device array; KilnArgumentError naming `what` when obj is not one. index_ok: int32
    arrays are taken too (a kernel's index tensors: cu_seqlens, position offsets)."""
    if isinstance(obj, DevView):
        return obj
    if is_torch_tensor(obj):
        return _from_torch(obj, what, index_ok)
    cai = getattr(obj, "__cuda_array_interface__", None)
    if cai is not None:
        return _from_cai(obj, cai, what, index_ok)
    if hasattr(obj, "__dlpack__"):
        return _from_dlpack(obj, what, stream, index_ok)
    raise KilnArgumentError("%s: %s is not a CUDA array; pass a torch tensor or an object with "
                            "__cuda_array_interface__ or __dlpack__" % (what, type(obj).__name__))
