"""kiln.emulate - run generated kernels on the CPU emulator with numpy arrays (no GPU needed).

The emulator compiles the very LLVM module that becomes PTX for the host and runs the grid,
each CUDA thread a fiber, with barriers and warp collectives checked. So a bf16 kernel for a
Turing GPU (sm_75) runs here exactly as generated for it.

    k = kiln.emulate.load("layernorm x=bf16 w=f32 y=bf16 hidden=1024", sm=75)
    k.run(problem=(rows,), y=y, mean=mean, rstd=rstd, x=x, weight=w, bias=b, rows=rows, hidden=1024, eps=1e-5)

Any family works through load()/run(): parameters are bound by name from the kernel's metadata
and checked for dtype, contiguity, alignment and (where kiln knows the extent) size. The helpers
layer_norm() and attention() allocate outputs and return numpy arrays. An emulator (and the
kernels loaded into it) belongs to one thread; each thread gets its own.
"""

import ctypes
import threading

import numpy as np

from . import _gen, _lib
from ._np import aligned_empty, as_kiln_array, dtype_name, np_dtype
from .errors import KilnArgumentError, KilnSpecError
from .runtime import bind, check_heads, nullable_by_spec
from ._arrays import DevView

_tls = threading.local()


class _Emu:
    def __init__(self):
        self._lib = _lib.gen()
        self.ptr = ctypes.c_void_p()
        err = _lib.Error()
        _lib.check(self._lib.kiln_emu_create(ctypes.byref(self.ptr), ctypes.byref(err)), err)
        self.kernels = {}

    def __del__(self):
        if getattr(self, "ptr", None):
            self._lib.kiln_emu_destroy(self.ptr)
            self.ptr = None


def _emu():
    e = getattr(_tls, "emu", None)
    if e is None:
        e = _tls.emu = _Emu()
    return e


def _np_view(a, what):
    if not isinstance(a, np.ndarray):
        raise KilnArgumentError("%s: the emulator takes numpy arrays, got %s" % (what, type(a).__name__))
    try:
        dt = dtype_name(a.dtype)
    except KilnArgumentError:
        raise KilnArgumentError("%s: numpy dtype %s is not one kiln kernels take; valid: float32, float16, "
                                "ml_dtypes.bfloat16" % (what, a.dtype)) from None
    if not a.flags.c_contiguous:
        raise KilnArgumentError("%s must be C-contiguous" % what)
    if not a.flags.writeable:
        raise KilnArgumentError("%s must be writable (kernels write their outputs in place)" % what)
    strides = tuple(s // a.itemsize for s in a.strides)
    return DevView(a.ctypes.data, a.shape, strides, dt, None, a)


class EmuKernel:
    """A kernel compiled for the emulator: ``spec``, ``sm``, ``meta`` (dict), ``params``."""

    def __init__(self, emu, ptr):
        self._emu = emu
        self._ptr = ptr
        self.meta = _lib.meta_dict(emu._lib.kiln_emu_kernel_meta(ptr).contents)
        self.spec = self.meta["spec"]
        self.sm = self.meta["sm"]
        self.params = self.meta["params"]

    def __repr__(self):
        return "<kiln.emulate.EmuKernel %s %s>" % (self.spec, _gen.sm_name(self.sm))

    def grid(self, problem):
        prob = list(problem) + [1] * (3 - len(problem))
        tile = [t or 1 for t in self.meta["grid_tile"]]
        return tuple(max(1, -(-int(p) // t)) for p, t in zip(prob, tile))

    def run(self, grid=None, problem=None, twice=False, **params):
        """Runs the grid once (``twice=True``: every block twice with threads in opposite orders; a
        difference is a race). Arrays are written in place. ``problem``: elements along each grid axis,
        the grid following the metadata's grid_tile; or ``grid`` directly."""
        if (grid is None) == (problem is None):
            raise KilnArgumentError("give grid=(x, y, z) or problem=(n, ...), exactly one")
        g = self.grid(problem) if problem is not None else tuple(list(grid) + [1] * (3 - len(grid)))
        bound, _ = bind(self.meta, params, self.spec, nullable_by_spec, _np_view)
        n = len(bound)
        store = []
        argv = (ctypes.c_void_p * max(n, 1))()
        extents = (ctypes.c_size_t * max(n, 1))()  # every global access must stay inside the arrays
        strict = True
        nullable = 0
        for i, (p, v) in enumerate(bound):
            if p["kind"] == "ptr":
                c = ctypes.c_void_p(v.ptr if v is not None else None)
                if v is None:
                    nullable |= 1 << i
                else:
                    extents[i] = v.keep.nbytes
                    strict = strict and extents[i] > 0
            elif p["kind"] == "i32":
                c = ctypes.c_int32(v)
            elif p["kind"] == "i64":
                c = ctypes.c_int64(v)
            else:
                c = ctypes.c_float(v)
            store.append(c)
            argv[i] = ctypes.addressof(c)
        m = self.meta
        launch = _lib.EmuLaunch((ctypes.c_uint * 3)(*g), (ctypes.c_uint * 3)(*m["block"]), m["dynamic_smem"],
                                1 if twice else 0, nullable, extents if strict else None)
        err = _lib.Error()
        _lib.check(self._emu._lib.kiln_emu_run(self._ptr, ctypes.byref(launch), argv, ctypes.byref(err)), err)


def load(spec, sm=80, **params):
    """Generates spec for sm and compiles it for the emulator (cached per thread)."""
    text = _gen._spec_text(spec, params)
    smv = _gen._parse_sm(sm)
    e = _emu()
    key = (_gen.canonical_spec(text), smv)
    k = e.kernels.get(key)
    if k is None:
        g = _gen._generator()
        kp = ctypes.c_void_p()
        err = _lib.Error()
        _lib.check(e._lib.kiln_emu_load(e.ptr, g.ptr, key[0].encode(), smv, ctypes.byref(kp), ctypes.byref(err)), err)
        k = e.kernels[key] = EmuKernel(e, kp)
    return k


def _copy(a, name, what):
    """A private, aligned, C-contiguous copy in kiln dtype `name` (the kernel sees only its own buffers)."""
    a = np.asarray(a)
    out = aligned_empty(a.shape, name)
    out[...] = as_kiln_array(a, name, what)
    return out


def _poison(a):
    a.view(np.uint8)[...] = 0xFF  # NaN in every float type: an element the kernel missed shows


def layer_norm(x, weight=None, bias=None, eps=1e-5, sm=80, out_dtype=None, weight_dtype=None, hidden=None,
               return_stats=False, twice=False, offset=0):
    """torch.nn.functional.layer_norm(x, x.shape[-1:], weight, bias, eps) on the emulated kernel for sm.
    x: numpy [..., hidden] in float32, float16 or ml_dtypes.bfloat16; weight/bias: [hidden] (their dtype is
    the kernel's w dtype, default x's); out_dtype: y's dtype (default x's). hidden="fixed" generates the
    variant for this row length, "launch" the loop form; None picks as the runtime does (the fixed variant
    when the template offers one for this length, else the loop form). offset=1: zero-centered weights,
    y = xhat * (1 + weight) + bias with 1 + weight formed in f32. Returns y, or (y, mean, rstd) with
    return_stats (f32, one per row)."""
    x = np.asarray(x)
    if x.ndim < 1 or x.shape[-1] < 1:
        raise KilnArgumentError("layer_norm: x must be [..., hidden] with hidden >= 1, got shape %s" % (x.shape,))
    xd = dtype_name(x.dtype)
    h = x.shape[-1]
    rows = x.size // h
    wd = dtype_name(weight_dtype) if weight_dtype is not None else None
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None:
            t = np.asarray(t)
            if t.shape != (h,):
                raise KilnArgumentError("layer_norm: %s has shape %s; expected (%d,)" % (name, t.shape, h))
            if wd is None:
                wd = dtype_name(t.dtype)
    wd = wd or xd
    yd = dtype_name(out_dtype) if out_dtype is not None else xd
    if hidden not in (None, "fixed", "launch"):
        raise KilnArgumentError("layer_norm: hidden=%r; valid: 'fixed', 'launch', None" % (hidden,))
    if isinstance(offset, bool) or offset not in (0, 1) or (offset and weight is None):
        raise KilnArgumentError("layer_norm: offset=%r; valid: 0, or 1 with a weight (the norm multiplies by "
                                "1 + weight)" % (offset,))
    spec = "layernorm x=%s w=%s y=%s hidden=%%s weight=%s bias=%s%s" % (
        xd, wd, yd, "true" if weight is not None else "false", "true" if bias is not None else "false",
        " offset=1" if offset else "")
    try:
        k = load(spec % (h if hidden != "launch" else "launch"), sm)
    except KilnSpecError:
        if hidden is not None:
            raise
        k = load(spec % "launch", sm)  # no fixed variant for this length: the loop form, as the runtime does
    xa = _copy(x.reshape(rows, h), xd, "layer_norm: x")
    y = aligned_empty((rows, h), yd)
    mean = aligned_empty((rows,), "f32")
    rstd = aligned_empty((rows,), "f32")
    for a in (y, mean, rstd):
        _poison(a)
    w = _copy(weight, wd, "layer_norm: weight") if weight is not None else None
    b = _copy(bias, wd, "layer_norm: bias") if bias is not None else None
    k.run(problem=(rows,), twice=twice, y=y, mean=mean, rstd=rstd, x=xa, weight=w, bias=b, rows=rows, hidden=h,
          eps=float(eps))
    y = y.reshape(x.shape)
    return (y, mean, rstd) if return_stats else y


def attention(q, k, v, causal=False, sm=80, scale=None, out_dtype=None, layout="bshd", path="auto",
              return_lse=False, twice=False):
    """softmax(scale * q k^T [causal]) v on the emulated kernel for sm. layout "bshd": q [batch, seq_q,
    heads_q, head_dim], k/v [batch, seq_k, heads_kv, head_dim]; "bhsd": torch's SDPA layout [batch, heads,
    seq, head_dim]. heads_q must be a multiple of heads_kv; causal is bottom-right aligned (query i sees
    key j iff j <= i + seq_k - seq_q). Returns o in q's layout (and lse [batch, heads_q, seq_q] f32)."""
    if layout not in ("bshd", "bhsd"):
        raise KilnArgumentError("attention: layout %r; valid: 'bshd', 'bhsd'" % (layout,))
    arrs = [np.asarray(t) for t in (q, k, v)]
    for n, t in zip("qkv", arrs):
        if t.ndim != 4:
            raise KilnArgumentError("attention: %s must be 4-d (%s), got shape %s" % (n, layout, t.shape))
    if layout == "bhsd":
        arrs = [t.transpose(0, 2, 1, 3) for t in arrs]
    qa, ka, va = arrs
    dt = dtype_name(qa.dtype)
    if dtype_name(ka.dtype) != dt or dtype_name(va.dtype) != dt:
        raise KilnArgumentError("attention: q, k, v must share a dtype, got %s, %s, %s" % (qa.dtype, ka.dtype,
                                                                                          va.dtype))
    b, sq, hq, d = qa.shape
    if ka.shape != va.shape or ka.shape[0] != b or ka.shape[3] != d:
        raise KilnArgumentError("attention: k %s and v %s must match, with q's batch and head_dim (q %s)"
                                % (ka.shape, va.shape, qa.shape))
    sk, hkv = ka.shape[1], ka.shape[2]
    check_heads("attention", hq, hkv)
    od = dtype_name(out_dtype) if out_dtype is not None else dt
    kern = load("attention dtype=%s out=%s head_dim=%d causal=%s path=%s" % (
        dt, od, d, "true" if causal else "false", path), sm)
    qa, ka, va = (_copy(t, dt, "attention: " + n) for t, n in zip((qa, ka, va), "qkv"))
    o = aligned_empty((b, sq, hq, d), od)
    lse = aligned_empty((b, hq, sq), "f32")
    _poison(o)
    _poison(lse)
    sc = (1.0 / np.sqrt(d)) if scale is None else float(scale)

    def st(t, s):
        return {"stride_%sb" % t: s[0], "stride_%ss" % t: s[1], "stride_%sh" % t: s[2]}

    strides = {}
    for t, arr in (("q", qa), ("k", ka), ("v", va), ("o", o)):
        strides.update(st(t, [x // arr.itemsize for x in arr.strides[:3]]))
    kern.run(problem=(sq, hq, b), twice=twice, o=o, lse=lse, q=qa, k=ka, v=va, batch=b, heads_q=hq, heads_kv=hkv,
             seq_q=sq, seq_k=sk, scale=sc, **strides)
    if layout == "bhsd":
        o = o.transpose(0, 2, 1, 3)
    return (o, lse) if return_lse else o


_BWD_SEQUENCE = {False: ("prep", "dkdv", "convert"), True: ("prep", "dkdv", "dq")}


def attention_backward(q, k, v, dout, o=None, lse=None, causal=False, sm=80, scale=None, layout="bshd",
                       path="auto", deterministic=False, grad_dtype=None, twice=False):
    """dq, dk, dv of attention(q, k, v) for dL/do = dout, on the emulated attention_bwd kernels for sm:
    prep, dkdv, then convert (dQ summed by f32 atomics) or, deterministic=True, dq (a fixed order) --
    the sequence kiln.Runtime.attention_backward launches on a GPU. q, k, v, dout as in attention()
    (layout "bshd" or "bhsd"; dout like q, in o's dtype). o and lse: the forward's output and f32
    log-sum-exp ([batch, heads_q, seq_q]); None (both): the emulated forward computes them. grad_dtype: that
    of dq/dk/dv (default q's). path: "auto", "mma" or "simt" for dkdv and dq. GQA/MQA: dk/dv summed over
    each group's query heads. Returns (dq, dk, dv) in q's / k's layout."""
    if layout not in ("bshd", "bhsd"):
        raise KilnArgumentError("attention_backward: layout %r; valid: 'bshd', 'bhsd'" % (layout,))
    if (o is None) != (lse is None):
        raise KilnArgumentError("attention_backward: give both o and lse (the forward's outputs) or neither")
    if o is None:
        o, lse = attention(q, k, v, causal=causal, sm=sm, scale=scale, layout=layout, path=path, return_lse=True)
    arrs = [np.asarray(t) for t in (q, k, v, o, dout)]
    for n, t in zip(("q", "k", "v", "o", "dout"), arrs):
        if t.ndim != 4:
            raise KilnArgumentError("attention_backward: %s must be 4-d (%s), got shape %s" % (n, layout, t.shape))
    if layout == "bhsd":
        arrs = [t.transpose(0, 2, 1, 3) for t in arrs]
    qa, ka, va, oa, da = arrs
    dt = dtype_name(qa.dtype)
    if dtype_name(ka.dtype) != dt or dtype_name(va.dtype) != dt:
        raise KilnArgumentError("attention_backward: q, k, v must share a dtype, got %s, %s, %s"
                                % (qa.dtype, ka.dtype, va.dtype))
    od = dtype_name(oa.dtype)
    if dtype_name(da.dtype) != od:
        raise KilnArgumentError("attention_backward: dout must have o's dtype (%s), got %s" % (oa.dtype, da.dtype))
    b, sq, hq, d = qa.shape
    if ka.shape != va.shape or ka.shape[0] != b or ka.shape[3] != d:
        raise KilnArgumentError("attention_backward: k %s and v %s must match, with q's batch and head_dim (q %s)"
                                % (ka.shape, va.shape, qa.shape))
    for n, t in (("o", oa), ("dout", da)):
        if t.shape != qa.shape:
            raise KilnArgumentError("attention_backward: %s has shape %s; expected q's %s" % (n, t.shape, qa.shape))
    sk, hkv = ka.shape[1], ka.shape[2]
    check_heads("attention_backward", hq, hkv)
    la = np.asarray(lse)
    if la.size != b * hq * sq:
        raise KilnArgumentError("attention_backward: lse must hold [batch, heads_q, seq_q] = %d values, got shape %s"
                                % (b * hq * sq, la.shape))
    gd = dtype_name(grad_dtype) if grad_dtype is not None else dt
    kernels = []
    for name in _BWD_SEQUENCE[bool(deterministic)]:
        spec = "attention_bwd kernel=%s dtype=%s out=%s grad=%s head_dim=%d causal=%s deterministic=%s" % (
            name, dt, od, gd, d, "true" if causal else "false", "true" if deterministic and name == "dkdv" else "false")
        if name in ("dkdv", "dq"):
            spec += " path=%s" % path
        kernels.append(load(spec, sm))
    qa, ka, va = (_copy(t, dt, "attention_backward: " + n) for t, n in zip((qa, ka, va), "qkv"))
    oa, da = (_copy(t, od, "attention_backward: " + n) for t, n in ((oa, "o"), (da, "dout")))
    lsea = _copy(la.reshape(b, hq, sq), "f32", "attention_backward: lse")
    dq = aligned_empty((b, sq, hq, d), gd)
    dk = aligned_empty((b, sk, hkv, d), gd)
    dv = aligned_empty((b, sk, hkv, d), gd)
    delta = aligned_empty((b, hq, sq), "f32")
    dq_acc = aligned_empty((b, hq, sq, d), "f32")  # zeroed by prep; read only by the atomic sequence
    for a in (dq, dk, dv, delta, dq_acc):
        _poison(a)
    args = {"q": qa, "k": ka, "v": va, "o": oa, "dout": da, "lse": lsea, "delta": delta, "dq_acc": dq_acc,
            "dq": dq, "dk": dk, "dv": dv, "heads_q": hq, "heads_kv": hkv, "seq_q": sq, "seq_k": sk,
            "scale": (1.0 / np.sqrt(d)) if scale is None else float(scale)}
    for t, arr in (("q", qa), ("k", ka), ("v", va), ("o", oa), ("dout", da), ("dq", dq), ("dk", dk), ("dv", dv)):
        for axis, st in zip("bsh", arr.strides[:3]):
            args["stride_%s%s" % (t, axis)] = st // arr.itemsize
    for kern in kernels:
        names = {p["name"] for p in kern.params}
        problem = (sk, hkv, b) if "kernel=dkdv" in kern.spec else (sq, hq, b)
        if problem[0] == 0:
            continue  # an empty side launches nothing (as the runtime helper does)
        kern.run(problem=problem, twice=twice, **{n: a for n, a in args.items() if n in names})
    if layout == "bhsd":
        dq, dk, dv = (t.transpose(0, 2, 1, 3) for t in (dq, dk, dv))
    return dq, dk, dv


def dtypes():
    """numpy dtypes of kiln's element types: {"f32": float32, "f16": float16, "bf16": ml_dtypes.bfloat16}."""
    return {n: np_dtype(n) for n in ("f32", "f16", "bf16")}
