"""python/tests/devarrays.py - stand-in device arrays for tests: __cuda_array_interface__ and DLPack producers
over memory from the fake CUDA driver (host memory posing as device memory)."""

import ctypes


class CAIArray:
    """A minimal __cuda_array_interface__ (v3) producer, as CuPy or Numba would hand kiln."""

    def __init__(self, ptr, shape, typestr, strides=None, dtype=None, mask=None):
        self.ptr, self.shape, self.typestr, self.strides, self.mask = ptr, tuple(shape), typestr, strides, mask
        if dtype is not None:
            self.dtype = dtype

    @property
    def __cuda_array_interface__(self):
        d = {"shape": self.shape, "typestr": self.typestr, "data": (self.ptr, False), "version": 3,
             "strides": self.strides, "stream": None}
        if self.mask is not None:
            d["mask"] = self.mask
        return d


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLManaged(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32), ("dtype", _DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


class DLPackArray:
    """A DLPack producer (no deleter: the test keeps the memory alive)."""

    CODES = {"f32": (2, 32), "f16": (2, 16), "bf16": (4, 16), "i32": (0, 32)}

    def __init__(self, ptr, shape, dtype, device_type=2, device_id=0, strides=None):
        self.shape = (ctypes.c_int64 * len(shape))(*shape)
        self.strides = (ctypes.c_int64 * len(shape))(*strides) if strides else None
        code, bits = self.CODES[dtype]
        self.m = _DLManaged(ptr, _DLDevice(device_type, device_id), len(shape), _DLDataType(code, bits, 1),
                            self.shape, self.strides, 0, None, None)

    def __dlpack__(self, stream=None):
        return _capsule_new(ctypes.addressof(self.m), b"dltensor", None)

    def __dlpack_device__(self):
        return (self.m.device.device_type, self.m.device.device_id)
