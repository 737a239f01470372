"""tests/faketorch/torch - a tiny stand-in for the parts of PyTorch that kiln.torch uses, for machines without
torch (installing torch from PyPI costs ~3 GB and ~4.5 min here). CUDA tensors live in memory from the fake
CUDA driver (through a kiln.Runtime); torch.library records what kiln registers. Not a torch emulation:
only enough to drive kiln.torch's own logic (argument checks, layouts, dtypes, streams, registration)."""

import math
import sys
import types

import numpy as np


class dtype:
    def __init__(self, name, np_name, size):
        self.name, self.np_name, self.itemsize = name, np_name, size

    def __repr__(self):
        return "torch." + self.name


float32 = dtype("float32", "float32", 4)
float16 = dtype("float16", "float16", 2)
bfloat16 = dtype("bfloat16", "bfloat16", 2)
int32 = dtype("int32", "int32", 4)


class finfo:
    _EPS = {"float32": 2.0 ** -23, "float16": 2.0 ** -10, "bfloat16": 2.0 ** -7}

    def __init__(self, dt):
        self.eps = self._EPS[dt.name]


class device:
    def __init__(self, spec, index=None):
        if isinstance(spec, device):
            self.type, self.index = spec.type, spec.index
            return
        t, _, i = str(spec).partition(":")
        self.type = t
        self.index = int(i) if i else (index if index is not None else (0 if t == "cuda" else None))

    def __str__(self):
        return self.type + (":%d" % self.index if self.index is not None else "")

    def __eq__(self, o):
        return str(self) == str(device(o))


class Size(tuple):
    pass


def _contig_strides(shape):
    st, acc = [], 1
    for s in reversed(shape):
        st.append(acc)
        acc *= s
    return tuple(reversed(st))


class _Storage:
    def __init__(self, nbytes, dev):
        self.dev = dev
        self.ptr = 0
        if dev.type == "cuda":
            import kiln.torch as kt
            self.rt = kt.runtime(dev.index)
            self.ptr = self.rt._alloc(max(nbytes, 1))
        else:
            self.host = np.zeros(max(nbytes, 1), np.uint8)
            self.ptr = self.host.ctypes.data


class Tensor:
    requires_grad = False

    def __init__(self, storage, shape, strides, dt, offset=0):
        self._s, self.shape, self._strides, self.dtype, self._off = storage, Size(shape), tuple(strides), dt, offset
        self.device = storage.dev

    @property
    def is_cuda(self):
        return self.device.type == "cuda"

    def data_ptr(self):
        return self._s.ptr + self._off * self.dtype.itemsize

    def stride(self, i=None):
        return self._strides if i is None else self._strides[i]

    def dim(self):
        return len(self.shape)

    def numel(self):
        return math.prod(self.shape)

    def is_contiguous(self):
        return all(sz == 1 or st == e for sz, st, e in zip(self.shape, self._strides, _contig_strides(self.shape)))

    def contiguous(self):
        if not self.is_contiguous():
            raise NotImplementedError("fake torch: contiguous() copies are not modelled")
        return self

    def reshape(self, *shape):
        shape = tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else tuple(shape)
        if -1 in shape:
            known = math.prod(s for s in shape if s != -1)
            shape = tuple(self.numel() // known if s == -1 else s for s in shape)
        assert math.prod(shape) == self.numel() and self.is_contiguous()
        return Tensor(self._s, shape, _contig_strides(shape), self.dtype, self._off)

    view = reshape

    def transpose(self, a, b):
        sh, st = list(self.shape), list(self._strides)
        sh[a], sh[b], st[a], st[b] = sh[b], sh[a], st[b], st[a]
        return Tensor(self._s, sh, st, self.dtype, self._off)

    def unsqueeze(self, d):
        sh, st = list(self.shape), list(self._strides)
        sh.insert(d, 1)
        st.insert(d, st[d] * sh[d + 1] if d < len(st) else 1)
        return Tensor(self._s, sh, st, self.dtype, self._off)

    def squeeze(self, d):
        sh, st = list(self.shape), list(self._strides)
        if sh[d] == 1:
            del sh[d], st[d]
        return Tensor(self._s, sh, st, self.dtype, self._off)

    def to(self, dtype):
        """A tensor of dtype (the values are not converted: the fake models layouts and launches, not data)."""
        return self if dtype is self.dtype else empty(self.shape, dtype=dtype, device=self.device)

    def new_empty(self, shape, dtype=None):
        return empty(shape, dtype=dtype or self.dtype, device=self.device)

    def __repr__(self):
        return "FakeTensor(%s, %r, %s)" % (list(self.shape), self.dtype, self.device)


def empty(*shape, dtype=None, device=None):
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    dtype = dtype or float32
    dev = globals()["device"](device or "cpu")
    n = math.prod(shape)
    return Tensor(_Storage(n * dtype.itemsize, dev), shape, _contig_strides(shape), dtype)


def zeros(*shape, dtype=None, device=None):
    t = empty(*shape, dtype=dtype, device=device)
    _fill(t, 0.0)
    return t


# ---- torch.cuda ----
cuda = types.ModuleType("torch.cuda")
cuda.STREAM = 0x5eed


class _Stream:
    def __init__(self, dev):
        self.device = dev
        self.cuda_stream = cuda.STREAM


cuda.current_device = lambda: 0
cuda.current_stream = lambda dev=None: _Stream(dev)
cuda.is_available = lambda: False

# ---- torch.library ----
library = types.ModuleType("torch.library")
library.REGISTERED = {}


class _CustomOp:
    def __init__(self, name, fn, mutates_args):
        self.name, self.fn, self.mutates_args = name, fn, mutates_args
        self.fake = self.backward = self.setup_context = None

    def __call__(self, *args):
        return self.fn(*args)

    def register_fake(self, fn):
        self.fake = fn
        return fn

    def register_autograd(self, backward, setup_context=None):
        self.backward, self.setup_context = backward, setup_context


def custom_op(name, mutates_args=(), device_types=None, schema=None):
    def wrap(fn):
        op = library.REGISTERED[name] = _CustomOp(name, fn, mutates_args)
        return op
    return wrap


library.custom_op = custom_op

# ---- torch.nn ----
nn = types.ModuleType("torch.nn")
nn.init = types.ModuleType("torch.nn.init")


class Module:
    def __init__(self):
        self.training = True

    def register_parameter(self, name, value):
        if name in self.__dict__ and name not in getattr(self, "_params", ()):
            raise KeyError("attribute '%s' already exists" % name)  # as torch.nn.Module does
        self.__dict__.setdefault("_params", set()).add(name)
        object.__setattr__(self, name, value)

    def __call__(self, *a, **k):
        return self.forward(*a, **k)


def Parameter(t):
    t.requires_grad = True
    return t


def _fill(t, value):
    a = np.full(t.numel(), value, dtype=np.float32)
    if t.dtype is float16:
        a = a.astype(np.float16)
    elif t.dtype is bfloat16:
        import ml_dtypes
        a = a.astype(ml_dtypes.bfloat16)
    if t.is_cuda:
        t._s.rt._upload(t.data_ptr(), a, a.nbytes)
    else:
        t._s.host[:a.nbytes] = a.view(np.uint8)


nn.Module, nn.Parameter = Module, Parameter
nn.init.ones_ = lambda t: _fill(t, 1.0)
nn.init.zeros_ = lambda t: _fill(t, 0.0)

for _name, _mod in (("torch.cuda", cuda), ("torch.library", library), ("torch.nn", nn), ("torch.nn.init", nn.init)):
    sys.modules[_name] = _mod
__version__ = "0.0-fake"
_kiln_fake = True
