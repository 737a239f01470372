"""kiln.emulate - run generated kernels on the CPU emulator with numpy arrays (no GPU needed).

The emulator compiles the very LLVM module that becomes PTX for the host and runs the grid,
each CUDA thread a fiber, with barriers and warp collectives checked. So a bf16 kernel for a
Turing GPU (sm_75) runs here exactly as generated for it.

    k = kiln.emulate.load(spec, sm=75)   # spec: "FAMILY key=value ...", `kiln list` shows each family's
    k.run(problem=(rows,), y=y, x=x, rows=rows, ...)   # the tensors and scalars its meta["launch"] declares

Any family works through load()/run(): parameters are bound by name from the kernel's metadata
and checked for dtype, contiguity, alignment and (where kiln knows the extent) size. The helpers
layer_norm() and attention() allocate outputs and return numpy arrays. An emulator (and the
kernels loaded into it) belongs to one thread; each thread gets its own.
"""

import ctypes
import threading

import numpy as np

from . import _extents, _gen, _lib, _tmap
from ._np import aligned_empty, as_kiln_array, dtype_name, elem_name, np_dtype
from ._attn_keys import Keys, causal_value, check_v_head_dim, forward_spec
from .errors import KilnArgumentError, KilnSpecError
from .runtime import bind, check_heads, nullable_for
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
        dt = elem_name(a.dtype)
    except KilnArgumentError:
        raise KilnArgumentError("%s: numpy dtype %s is not one kiln kernels take; valid: float32, float16, "
                                "ml_dtypes.bfloat16, int32 (index arrays)" % (what, a.dtype)) from None
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

    def run(self, grid=None, problem=None, twice=False, nullable=(), **params):
        """Runs the grid once (``twice=True``: every block twice with threads in opposite orders; a
        difference is a race). Arrays are written in place. ``problem``: elements along each grid axis,
        the grid following the metadata's grid_tile; or ``grid`` directly. A pointer may be None where the
        spec turns that input off (weight=false), and where ``nullable`` names it: a kernel that picks its
        work by which pointers are NULL (the norm backward's reduction of dweight/dbias; a workspace the
        spec leaves unused)."""
        if (grid is None) == (problem is None):
            raise KilnArgumentError("give grid=(x, y, z) or problem=(n, ...), exactly one")
        g = self.grid(problem) if problem is not None else tuple(list(grid) + [1] * (3 - len(grid)))
        by_meta = nullable_for(self.meta)
        bound, _ = bind(self.meta, params, self.spec, lambda n, sv: n in nullable or by_meta(n, sv), _np_view)
        maps = _tmap.emulated(self.meta, params, bound)  # tensormap parameters (TMA kernels, sm_90a)
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
            elif p["kind"] == "tensormap":
                store.append(maps[p["name"]][0])
                argv[i] = maps[p["name"]][1]
                continue
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


def norm_spec(rms, xd, wd, yd, weight, bias, offset=0, r=None):
    """The norm forward's spec with "hidden=%s" left to fill (a length or "launch"): RMSNorm when rms, else
    LayerNorm; weight, bias: whether the kernel takes them; r: the residual's dtype (residual=true), or None.
    kiln.emulate.layer_norm and kiln.torch's emulated path build theirs here."""
    res = "" if r is None else " residual=true r=%s" % r
    if rms:
        return "rmsnorm x=%s w=%s y=%s hidden=%%s weight=%s offset=%d%s" % (
            xd, wd, yd, "true" if weight else "false", offset, res)
    return "layernorm x=%s w=%s y=%s hidden=%%s weight=%s bias=%s offset=%d%s" % (
        xd, wd, yd, "true" if weight else "false", "true" if bias else "false", offset, res)


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
    spec = norm_spec(False, xd, wd, yd, weight is not None, bias is not None, offset)
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
              return_lse=False, twice=False, window=None, softcap=None, alibi_slopes=None, dropout=None):
    """softmax(scale * q k^T [causal]) v on the emulated kernel for sm. layout "bshd": q [batch, seq_q,
    heads_q, head_dim], k/v [batch, seq_k, heads_kv, head_dim]; "bhsd": torch's SDPA layout [batch, heads,
    seq, head_dim]. heads_q must be a multiple of heads_kv; causal True is bottom-right aligned (query i sees
    key j iff j <= i + seq_k - seq_q), "top_left" as torch's is_causal (iff j <= i). window=(left, right):
    also iff i + seq_k - seq_q - left <= j <= i + seq_k - seq_q + right (-1: unbounded); softcap=c: scaled
    scores x become c tanh(x / c); alibi_slopes (f32 [heads_q] or [batch, heads_q]): x gains
    -slope |i + seq_k - seq_q - j| (docs/attention.md); dropout=(p, seed, offset): each probability kept with
    probability 1 - p (Philox 4x32-10 of seed, offset, batch, head, query, key) and scaled by 1 / (1 - p) in
    P V, lse unchanged. v may have a head_dim of its own (v_head_dim, e.g. q/k 192 and v 128; o is v's width, the
    scale stays 1/sqrt(q's head_dim)). Returns o in q's layout (and lse [batch, heads_q, seq_q] f32)."""
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
    dv = check_v_head_dim("attention", qa.shape, ka.shape, va.shape)
    sk, hkv = ka.shape[1], ka.shape[2]
    check_heads("attention", hq, hkv)
    od = dtype_name(out_dtype) if out_dtype is not None else dt
    cv = causal_value(causal, "attention")
    slopes = None if alibi_slopes is None else np.asarray(alibi_slopes)
    keys = Keys("attention", window, softcap, None if slopes is None else slopes.shape, b, hq, dropout)
    kern = load(forward_spec(dt, od, d, cv, path, keys.words(), _vdim_words(d, dv)), sm)
    qa, ka, va = (_copy(t, dt, "attention: " + n) for t, n in zip((qa, ka, va), "qkv"))
    o = aligned_empty((b, sq, hq, dv), od)
    lse = aligned_empty((b, hq, sq), "f32")
    _poison(o)
    _poison(lse)
    sc = (1.0 / np.sqrt(d)) if scale is None else float(scale)

    def st(t, s):
        return {"stride_%sb" % t: s[0], "stride_%ss" % t: s[1], "stride_%sh" % t: s[2]}

    strides = {}
    for t, arr in (("q", qa), ("k", ka), ("v", va), ("o", o)):
        strides.update(st(t, [x // arr.itemsize for x in arr.strides[:3]]))
    strides.update(keys.scalars())
    if slopes is not None:
        strides["alibi_slopes"] = _copy(slopes, "f32", "attention: alibi_slopes")
    kern.run(problem=(sq, hq, b), twice=twice, o=o, lse=lse, q=qa, k=ka, v=va, batch=b, heads_q=hq, heads_kv=hkv,
             seq_q=sq, seq_k=sk, scale=sc, **strides)
    if layout == "bhsd":
        o = o.transpose(0, 2, 1, 3)
    return (o, lse) if return_lse else o


def sequence(spec, sm=80):
    """The kernels spec's launch description runs, in order: those it names ``before``, its own, those it names
    ``after`` (docs/registry.md; the attention backward's dkdv: prep, dkdv, then convert or dq), each loaded."""
    kern = load(spec, sm)
    lines = kern.meta["launch"].splitlines()
    named = {w: [load(l[len(w) + 1:].split(";")[0].strip(), sm) for l in lines if l.startswith(w + " ")]
             for w in ("before", "after")}
    return named["before"] + [kern] + named["after"]


def _bwd_kernels(dt, od, gd, d, causal, deterministic, path, words, sm):
    """The attention backward's kernels for sm: the dkdv spec (path, and the mask/varlen words, on it) and the
    sequence its description names (prep before it; convert, or deterministic dq at dkdv's path, after it)."""
    return sequence("attention_bwd kernel=dkdv dtype=%s out=%s grad=%s head_dim=%d causal=%s deterministic=%s path=%s%s"
                    % (dt, od, gd, d, causal, "true" if deterministic else "false", path, words), sm)


def _vdim_words(d, dv):
    """' v_head_dim=dv' when v's head dim dv differs from head_dim d (templates/lib/attn_vdim.lua), else ''."""
    return " v_head_dim=%d" % dv if dv != d else ""


def _workspace(kernels, args):
    """Adds to args the workspace tensors the dkdv kernel's launch description declares beyond those given
    (bf16 on sm_75: Q and dO as prep scales them once, templates/lib/attn_bwd_f16scaled.lua), poisoned, at
    their extents; the other kernels' optional ones it does not declare are None (prep then skips them)."""
    env = {n: x for n, x in args.items() if isinstance(x, int)}
    for kern in sorted(kernels, key=lambda k: "kernel=dkdv" not in k.spec):
        launch = kern.meta.get("launch") or ""
        dts = {p["name"]: p.get("dtype") for p in kern.params}
        for w in (line.split() for line in launch.splitlines()):
            if len(w) < 3 or w[0] != "tensor" or w[1] in args:
                continue
            if w[2] == "workspace" and "kernel=dkdv" in kern.spec:
                args[w[1]] = aligned_empty((_extents.extent(w[1], env, launch),), dts[w[1]])
                _poison(args[w[1]])
            elif w[2] == "workspace?":
                args[w[1]] = None


def attention_backward(q, k, v, dout, o=None, lse=None, causal=False, sm=80, scale=None, layout="bshd",
                       path="auto", deterministic=False, grad_dtype=None, twice=False, window=None, softcap=None,
                       alibi_slopes=None, dropout=None):
    """dq, dk, dv of attention(q, k, v) for dL/do = dout, on the emulated attention_bwd kernels for sm:
    prep, dkdv, then convert (dQ summed by f32 atomics) or, deterministic=True, dq (a fixed order) --
    the sequence kiln.Runtime.attention_backward launches on a GPU. q, k, v, dout as in attention()
    (layout "bshd" or "bhsd"; dout like q, in o's dtype). o and lse: the forward's output and f32
    log-sum-exp ([batch, heads_q, seq_q]); None (both): the emulated forward computes them. grad_dtype: that
    of dq/dk/dv (default q's). path: "auto", "mma" or "simt" for dkdv and dq; "wgmma" (sm="90a"): the forward's
    and dkdv's TMA + wgmma kernels. GQA/MQA: dk/dv summed over each group's query heads. causal, window,
    softcap, alibi_slopes, dropout: as attention()'s (the forward's values: the backward regenerates the
    forward's dropout mask from them).
    Returns (dq, dk, dv) in q's / k's layout."""
    if layout not in ("bshd", "bhsd"):
        raise KilnArgumentError("attention_backward: layout %r; valid: 'bshd', 'bhsd'" % (layout,))
    if (o is None) != (lse is None):
        raise KilnArgumentError("attention_backward: give both o and lse (the forward's outputs) or neither")
    if o is None:
        o, lse = attention(q, k, v, causal=causal, sm=sm, scale=scale, layout=layout, path=path, return_lse=True,
                           window=window, softcap=softcap, alibi_slopes=alibi_slopes, dropout=dropout)
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
    vd = check_v_head_dim("attention_backward", qa.shape, ka.shape, va.shape)
    for n, t in (("o", oa), ("dout", da)):
        if t.shape != (b, sq, hq, vd):
            raise KilnArgumentError("attention_backward: %s has shape %s; expected %s (q's, at v's head_dim %d)"
                                    % (n, t.shape, (b, sq, hq, vd), vd))
    sk, hkv = ka.shape[1], ka.shape[2]
    check_heads("attention_backward", hq, hkv)
    la = np.asarray(lse)
    if la.size != b * hq * sq:
        raise KilnArgumentError("attention_backward: lse must hold [batch, heads_q, seq_q] = %d values, got shape %s"
                                % (b * hq * sq, la.shape))
    gd = dtype_name(grad_dtype) if grad_dtype is not None else dt
    cv = causal_value(causal, "attention_backward")
    slopes = None if alibi_slopes is None else np.asarray(alibi_slopes)
    keys = Keys("attention_backward", window, softcap, None if slopes is None else slopes.shape, b, hq, dropout)
    kernels = _bwd_kernels(dt, od, gd, d, cv, deterministic, path, _vdim_words(d, vd) + keys.words(), sm)
    qa, ka, va = (_copy(t, dt, "attention_backward: " + n) for t, n in zip((qa, ka, va), "qkv"))
    oa, da = (_copy(t, od, "attention_backward: " + n) for t, n in ((oa, "o"), (da, "dout")))
    lsea = _copy(la.reshape(b, hq, sq), "f32", "attention_backward: lse")
    dq = aligned_empty((b, sq, hq, d), gd)
    dk = aligned_empty((b, sk, hkv, d), gd)
    dv = aligned_empty((b, sk, hkv, vd), gd)
    delta = aligned_empty((b, hq, sq), "f32")
    dq_acc = aligned_empty((b, hq, sq, d), "f32")  # zeroed by prep; read only by the atomic sequence
    for a in (dq, dk, dv, delta, dq_acc):
        _poison(a)
    args = {"q": qa, "k": ka, "v": va, "o": oa, "dout": da, "lse": lsea, "delta": delta, "dq_acc": dq_acc,
            "dq": dq, "dk": dk, "dv": dv, "batch": b, "heads_q": hq, "heads_kv": hkv, "seq_q": sq, "seq_k": sk,
            "scale": (1.0 / np.sqrt(d)) if scale is None else float(scale), **keys.scalars()}
    if slopes is not None:
        args["alibi_slopes"] = _copy(slopes, "f32", "attention_backward: alibi_slopes")
    for t, arr in (("q", qa), ("k", ka), ("v", va), ("o", oa), ("dout", da), ("dq", dq), ("dk", dk), ("dv", dv)):
        for axis, st in zip("bsh", arr.strides[:3]):
            args["stride_%s%s" % (t, axis)] = st // arr.itemsize
    _workspace(kernels, args)
    for kern in kernels:
        names = {p["name"] for p in kern.params}
        problem = (sk, hkv, b) if "kernel=dkdv" in kern.spec else (sq, hq, b)
        if problem[0] == 0:
            continue  # an empty side launches nothing (as the runtime helper does)
        kern.run(problem=problem, twice=twice, **{n: a for n, a in args.items() if n in names})
    if layout == "bhsd":
        dq, dk, dv = (t.transpose(0, 2, 1, 3) for t in (dq, dk, dv))
    return dq, dk, dv


def apply_rotary_emb(x, cos, sin, interleaved=False, inplace=False, seqlen_offsets=0, cu_seqlens=None,
                     max_seqlen=None, conjugate=False, sm=80, twice=False):
    """FlashAttention's apply_rotary_emb on the emulator (the rotary family, templates/rotary.lua).

    x: [batch, seqlen, nheads, headdim], or [total, nheads, headdim] with cu_seqlens (int32, batch + 1)
    and max_seqlen; cos, sin: [seqlen_ro, rotary_dim / 2] in any float dtype. The first rotary_dim dims
    of each head rotate at position s + seqlen_offsets (an int, or an int32 array [batch]): GPT-NeoX
    halves, or GPT-J pairs with interleaved=True; a position outside the table is not rotated.
    conjugate=True rotates by -theta (the backward: dx = apply_rotary_emb(dy, ..., conjugate=True)).
    Returns out, or x itself rotated in place (inplace=True)."""
    what = "apply_rotary_emb"
    x = np.asarray(x) if not isinstance(x, np.ndarray) else x
    cos, sin = np.asarray(cos), np.asarray(sin)
    dt, cs = dtype_name(x.dtype), dtype_name(cos.dtype)
    if dtype_name(sin.dtype) != cs:
        raise KilnArgumentError("%s: cos and sin must share a dtype, got %s and %s" % (what, cos.dtype, sin.dtype))
    if cos.ndim != 2 or cos.shape != sin.shape:
        raise KilnArgumentError("%s: cos and sin must be [seqlen_ro, rotary_dim / 2] of one shape, got %s and %s"
                                % (what, cos.shape, sin.shape))
    varlen = cu_seqlens is not None
    if x.ndim != (3 if varlen else 4):
        raise KilnArgumentError("%s: x must be %s, got shape %s" % (
            what, "[total, nheads, headdim] with cu_seqlens" if varlen else "[batch, seqlen, nheads, headdim]", x.shape))
    heads, d = x.shape[-2], x.shape[-1]
    rdim = 2 * cos.shape[1]
    if rdim > d or rdim == 0:
        raise KilnArgumentError("%s: rotary_dim = 2 * cos.shape[1] = %d must be 2..headdim (%d)" % (what, rdim, d))
    if varlen:
        cu = _copy(cu_seqlens, "i32", what + ": cu_seqlens")
        if cu.ndim != 1 or cu.shape[0] < 2:
            raise KilnArgumentError("%s: cu_seqlens must be int32 [batch + 1], got shape %s" % (what, cu.shape))
        if max_seqlen is None:
            raise KilnArgumentError("%s: max_seqlen is needed with cu_seqlens" % what)
        batch, seq, total = cu.shape[0] - 1, int(max_seqlen), x.shape[0]
    else:
        batch, seq = x.shape[0], x.shape[1]
    if isinstance(seqlen_offsets, (int, np.integer)):
        offset, offsets = int(seqlen_offsets), None
    else:
        offset, offsets = 0, _copy(seqlen_offsets, "i32", what + ": seqlen_offsets")
        if offsets.shape != (batch,):
            raise KilnArgumentError("%s: seqlen_offsets must be an int or int32 [batch], got shape %s" % (what, offsets.shape))
    spec = "rotary dtype=%s cs=%s head_dim=%d rotary_dim=%d interleaved=%s varlen=%s inplace=%s" % (
        dt, cs, d, rdim, *("true" if f else "false" for f in (interleaved, varlen, inplace)))
    k = load(spec, sm)
    xa = _copy(x, dt, what + ": x")
    args = {"x": xa, "cos": _copy(cos, cs, what + ": cos"), "sin": _copy(sin, cs, what + ": sin"), "offsets": offsets,
            "batch": batch, "seq": seq, "heads": heads, "seqlen_ro": cos.shape[0], "offset": offset,
            "conjugate": 1 if conjugate else 0}
    outs = [("x", xa)]
    if not inplace:
        out = aligned_empty(x.shape, dt)
        _poison(out)
        args["out"] = out
        outs.append(("o", out))
    if varlen:
        args["cu_seqlens"] = cu
    for t, arr in outs:
        for axis, st in zip("sh" if varlen else "bsh", arr.strides[:-1]):
            args["stride_%s%s" % (t, axis)] = st // arr.itemsize
    k.run(problem=(seq, batch, heads), twice=twice, **args)
    if inplace:
        x[...] = xa
        return x
    return out


def dtypes():
    """numpy dtypes of kiln's element types: {"f32": float32, "f16": float16, "bf16": ml_dtypes.bfloat16}."""
    return {n: np_dtype(n) for n in ("f32", "f16", "bf16")}


# ---- the family registry's cases: a float64 reference beside every template (docs/registry.md) ----

class CaseReport:
    """What check() found: ``spec`` (canonical), ``sm``, ``problem`` (words), ``launches`` (one dict per kernel:
    entry, blocks, threads, ms), ``outputs`` (one dict per output: name, max_abs, max_rel (None when not
    measured), worst (error / tolerance of the worst value; above 1 fails), bad, first), ``bad`` (total) and
    ``passed``."""

    def __init__(self, spec, sm, problem, launches, outputs, noun):
        self.spec, self.sm, self.problem, self.launches, self.outputs = spec, sm, problem, launches, outputs
        self.bad = sum(o["bad"] for o in outputs)
        self.passed = self.bad == 0
        self.noun = noun

    def __repr__(self):
        return "<kiln.emulate.CaseReport %s sm_%d: %s>" % (self.spec, self.sm, "PASS" if self.passed else "FAIL")


def families():
    """The families with a float64 reference (every family `kiln list` shows)."""
    return [f.strip() for f in _lib.gen().kiln_ref_names().decode().split(",") if f.strip()]


def _varlen_lists(varlen, varlen_k, seqused_k):
    """The checked varlen lists (query lengths, key lengths or None, used keys or None), or None without varlen."""
    if varlen is None:
        if varlen_k is not None or seqused_k is not None:
            raise KilnArgumentError("check(): varlen_k and seqused_k need varlen=[query lengths]")
        return None
    out = []
    for what, values in (("varlen", varlen), ("varlen_k", varlen_k), ("seqused_k", seqused_k)):
        if values is None:
            out.append(None)
            continue
        values = list(values)
        if (not values or len(values) > 1024
                or not all(isinstance(x, int) and not isinstance(x, bool) and 0 <= x <= 1 << 20 for x in values)):
            raise KilnArgumentError("check(): %s=%r; valid: a list of 1..1024 lengths, each an int 0..1048576"
                                    % (what, values))
        if out and len(values) != len(out[0]):
            raise KilnArgumentError("check(): %s has %d entries for %d sequences (varlen); give one per sequence"
                                    % (what, len(values), len(out[0])))
        out.append(values)
    keys = out[1] or out[0]
    for i, n in enumerate(out[2] or []):
        if n > keys[i]:
            raise KilnArgumentError("check(): seqused_k[%d] = %d is more than the sequence's %d keys" % (i, n, keys[i]))
    return out


def check(spec, sm=80, rows=None, hidden=None, seq_k=None, batch=None, heads=None, splits=None, seed=1,
          input="random", eps=None, twice=False, varlen=None, varlen_k=None, seqused_k=None, page_size=None,
          leftpad=False, batch_idx=False, seqlen_new=None, **params):
    """Runs a family's kernel on the emulator against its float64 reference, as `kiln run` does (the same
    inputs for the same seed, the same error model, the same numbers): the C library's one case runner and
    checker. rows: rows (attention: seq_q); hidden: the row length for hidden=launch; seq_k, batch,
    heads (H or (H, K)), splits: attention's problem; input: random, large-mean, constant, special, mixed.
    varlen (varlen=true): the packed sequences' query lengths (rows then defaults to the longest), varlen_k
    their key lengths (default the same), seqused_k the keys each uses (attention only). page_size,
    leftpad, batch_idx, seqlen_new: a paged KV cache's (paged=true, append=true: `kiln run`'s --paged,
    --leftpad, --batch-idx, --append).
    Returns a CaseReport; a bad problem raises KilnArgumentError naming it, an emulator fault KilnError."""
    lib = _lib.gen()
    text = _gen._spec_text(spec, params)
    smv = _gen._parse_sm(sm)
    lists = _varlen_lists(varlen, varlen_k, seqused_k)
    if rows is None and lists:
        rows = max([1] + list(lists[0]))
    if rows is None:
        raise KilnArgumentError("check() needs rows= (for attention, seq_q)")
    kind = ctypes.c_int()
    if lib.kiln_ln_input_parse(str(input).encode(), ctypes.byref(kind)) != 0:
        raise KilnArgumentError("bad input kind %r; valid: random, large-mean, constant, special, mixed" % (input,))
    opts = _lib.CaseOpts(sm=smv, seed=int(seed), input=kind.value, eps=float(eps or 0), twice=1 if twice else 0)
    if isinstance(heads, (tuple, list)):
        hq, hkv = heads
    else:
        hq = hkv = heads
    keep = []  # the varlen arrays live until the case has read them
    if lists:
        opts.nvarlen = len(lists[0])
        for field, values in zip(("varlen_q", "varlen_k", "seqused_k"), lists):
            if values is not None:
                arr = (ctypes.c_int * len(values))(*values)
                keep.append(arr)
                setattr(opts, field, arr)
    for name, v in (("rows", rows), ("hidden", hidden), ("seq_k", seq_k), ("batch", batch), ("heads_q", hq),
                    ("heads_kv", hkv), ("splits", splits), ("page_size", page_size),
                    ("leftpad", 1 if leftpad else None), ("batch_idx", 1 if batch_idx else None),
                    ("append", seqlen_new)):
        if v is not None:
            lib.kiln_case_opts_set(ctypes.byref(opts), name.encode(), int(v))
    e = _emu()
    g = _gen._generator()
    c = ctypes.c_void_p()
    err = _lib.Error()
    try:
        _lib.check(lib.kiln_case_create(ctypes.byref(c), g.ptr, e.ptr, text.encode(), ctypes.byref(opts),
                                        ctypes.byref(err)), err)
        _lib.check(lib.kiln_case_run(c, ctypes.byref(err)), err)
        lib.kiln_case_check(c)
        buf = ctypes.create_string_buffer(256)
        lib.kiln_case_describe(c, buf, len(buf))
        launches = []
        for i in range(lib.kiln_case_nsteps(c)):
            st = lib.kiln_case_step_at(c, i).contents
            m = _lib.meta_dict(lib.kiln_emu_kernel_meta(st.kernel).contents)
            blocks = st.grid[0] * st.grid[1] * st.grid[2]
            launches.append({"entry": m["entry"], "blocks": blocks, "threads": m["block"][0] * m["block"][1] *
                             m["block"][2], "ms": st.ms})
        outputs = []
        for i in range(lib.kiln_case_noutputs(c)):
            o = lib.kiln_case_output_at(c, i).contents
            outputs.append({"name": o.name.decode(), "max_abs": o.max_abs, "max_rel": o.max_rel if o.show_rel else None,
                            "worst": o.worst, "bad": o.bad, "first": o.first.decode()})
        meta = _lib.meta_dict(lib.kiln_emu_kernel_meta(lib.kiln_case_kernel(c)).contents)
        return CaseReport(meta["spec"], smv, buf.value.decode(), launches, outputs, lib.kiln_case_noun(c).decode())
    finally:
        if c:
            lib.kiln_case_free(c)


from ._attn_varlen import attention_varlen, attention_varlen_backward  # noqa: E402  (varlen=true, packed sequences)
from ._attn_paged import attention_kvcache  # noqa: E402  (paged=true, append=true: a paged KV cache)
