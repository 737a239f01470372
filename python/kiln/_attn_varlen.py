"""Varlen attention (varlen=true) for kiln.emulate: FlashAttention-2's flash_attn_varlen_func on packed sequences.

Varlen checks the host-side description once (cu_seqlens monotone from 0 to the packed totals, the longest
sequences, seqused_k); attention_varlen() and attention_varlen_backward() run the emulated kernels
(docs/attention.md, "Varlen")."""

import numpy as np

from ._attn_keys import Keys, causal_value, forward_spec, refuse_v_head_dim
from ._np import aligned_empty, dtype_name
from .errors import KilnArgumentError
from .runtime import check_heads


class Varlen:
    """The checked sequences: ``batch``, ``cu_q``, ``cu_k`` (int32 [batch + 1]), ``used`` (int32 [batch] or None),
    ``max_q``, ``max_k``, ``total_q``, ``total_k``."""

    def __init__(self, what, cu_seqlens_q, cu_seqlens_k, total_q, total_k, max_seqlen_q=None, max_seqlen_k=None,
                 seqused_k=None):
        self.cu_q = self._cu(what, "cu_seqlens_q", cu_seqlens_q, total_q, "q")
        self.cu_k = self._cu(what, "cu_seqlens_k", cu_seqlens_k, total_k, "k")
        if self.cu_q.size != self.cu_k.size:
            raise KilnArgumentError("%s: cu_seqlens_q has %d entries and cu_seqlens_k %d; both are [batch + 1]"
                                    % (what, self.cu_q.size, self.cu_k.size))
        self.batch = self.cu_q.size - 1
        self.total_q, self.total_k = int(total_q), int(total_k)
        lens_q, lens_k = np.diff(self.cu_q), np.diff(self.cu_k)
        self.used = None
        if seqused_k is not None:
            used = np.asarray(seqused_k)
            if used.shape != (self.batch,) or not np.issubdtype(used.dtype, np.integer):
                raise KilnArgumentError("%s: seqused_k must be int32 [batch] = (%d,), got %s %s"
                                        % (what, self.batch, used.dtype, used.shape))
            bad = np.nonzero((used < 0) | (used > lens_k))[0]
            if bad.size:
                i = int(bad[0])
                raise KilnArgumentError("%s: seqused_k[%d] = %d; valid: 0..%d (the sequence's keys)"
                                        % (what, i, int(used[i]), int(lens_k[i])))
            self.used = aligned_empty((self.batch,), "i32") if self.batch else np.zeros(1, np.int32)
            self.used[:self.batch] = used
        self.max_q = self._max(what, "max_seqlen_q", max_seqlen_q, lens_q)
        self.max_k = self._max(what, "max_seqlen_k", max_seqlen_k, lens_k)

    @staticmethod
    def _cu(what, name, cu, total, t):
        a = np.asarray(cu)
        if a.ndim != 1 or a.size < 1 or not np.issubdtype(a.dtype, np.integer):
            raise KilnArgumentError("%s: %s must be a 1-d integer array [batch + 1], got %s %s"
                                    % (what, name, a.dtype, a.shape))
        if a[0] != 0:
            raise KilnArgumentError("%s: %s[0] = %d; it starts at 0" % (what, name, int(a[0])))
        steps = np.nonzero(np.diff(a.astype(np.int64)) < 0)[0]
        if steps.size:
            i = int(steps[0])
            raise KilnArgumentError("%s: %s is not monotone: [%d] = %d > [%d] = %d; sequence %d would have a negative "
                                    "length" % (what, name, i, int(a[i]), i + 1, int(a[i + 1]), i))
        if int(a[-1]) != int(total):
            raise KilnArgumentError("%s: %s ends at %d but %s has %d rows (total_%s)"
                                    % (what, name, int(a[-1]), t, int(total), t))
        out = aligned_empty((a.size,), "i32")
        out[:] = a
        return out

    @staticmethod
    def _max(what, name, given, lens):
        longest = int(lens.max()) if lens.size else 0
        if given is None:
            return longest
        if not isinstance(given, (int, np.integer)) or given < longest:
            raise KilnArgumentError("%s: %s=%r is less than the longest sequence (%d)" % (what, name, given, longest))
        return int(given)

    def args(self):
        """The launch values every varlen kernel takes by name."""
        return {"cu_seqlens_q": self.cu_q, "cu_seqlens_k": self.cu_k, "total_q": self.total_q, "batch": self.batch}


def _packed(what, arrs, names):
    for n, t in zip(names, arrs):
        if t.ndim != 3:
            raise KilnArgumentError("%s: %s must be packed [total, heads, head_dim], got shape %s" % (what, n, t.shape))


def _strides(arr, t):
    return {"stride_%ss" % t: arr.strides[0] // arr.itemsize, "stride_%sh" % t: arr.strides[1] // arr.itemsize}


def attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q=None, max_seqlen_k=None, causal=False, sm=80,
                     scale=None, out_dtype=None, path="auto", return_lse=False, twice=False, window=None, softcap=None,
                     alibi_slopes=None, seqused_k=None, dropout=None, return_mask=False):
    """FlashAttention-2's flash_attn_varlen_func on the emulated kernel for sm: q [total_q, heads_q, head_dim],
    k/v [total_k, heads_kv, head_dim] packed, sequence b in rows cu_seqlens_q[b] .. cu_seqlens_q[b + 1] - 1
    (cu_seqlens_k for keys), int32 [batch + 1] from 0, monotone; max_seqlen_q/k default to the longest.
    seqused_k (int32 [batch]): sequence b attends to its first seqused_k[b] keys. causal, window, softcap,
    alibi_slopes ([heads_q] or [batch, heads_q]) as attention(), per sequence. dropout=(p, seed, offset) as
    attention()'s, the Philox mask keyed by the sequence's index and its rows and keys (FA2's convention: a batch of
    one sequence draws attention()'s batch-1 mask). Returns o like q (and lse [heads_q, total_q] f32, FA2's varlen
    layout; with return_mask and dropout, the int32 keep mask [batch, heads_q, max_seqlen_q, max_seqlen_k]: 1 kept,
    0 dropped, -1 where the kernel visited no tile: past a sequence's lengths or outside its causal/window band)."""
    from .emulate import _copy, _poison, load
    what = "attention_varlen"
    qa, ka, va = (np.asarray(t) for t in (q, k, v))
    _packed(what, (qa, ka, va), "qkv")
    dt = dtype_name(qa.dtype)
    if dtype_name(ka.dtype) != dt or dtype_name(va.dtype) != dt:
        raise KilnArgumentError("%s: q, k, v must share a dtype, got %s, %s, %s" % (what, qa.dtype, ka.dtype, va.dtype))
    tq, hq, d = qa.shape
    refuse_v_head_dim(what, d, va.shape[2], "varlen")
    if ka.shape != va.shape or ka.shape[2] != d:
        raise KilnArgumentError("%s: k %s and v %s must match, with q's head_dim (q %s)" % (what, ka.shape, va.shape,
                                                                                          qa.shape))
    tk, hkv = ka.shape[0], ka.shape[1]
    check_heads(what, hq, hkv)
    vl = Varlen(what, cu_seqlens_q, cu_seqlens_k, tq, tk, max_seqlen_q, max_seqlen_k, seqused_k)
    od = dtype_name(out_dtype) if out_dtype is not None else dt
    cv = causal_value(causal, what)
    slopes = None if alibi_slopes is None else np.asarray(alibi_slopes)
    keys = Keys(what, window, softcap, None if slopes is None else slopes.shape, vl.batch, hq, dropout)
    if return_mask and keys.dropout is None:
        raise KilnArgumentError("%s: return_mask=True returns the dropout keep mask; give dropout=(p, seed, offset)"
                                % what)
    kern = load(forward_spec(dt, od, d, cv, path, keys.words(),
                             tail="%s varlen=true" % (" dropout_mask=true" if return_mask else "")), sm)
    qa, ka, va = (_copy(t, dt, what + ": " + n) for t, n in zip((qa, ka, va), "qkv"))
    o = aligned_empty((tq, hq, d), od)
    lse = aligned_empty((hq, tq), "f32")
    _poison(o)
    _poison(lse)
    args = dict(vl.args(), o=o, lse=lse, q=qa, k=ka, v=va, heads_q=hq, heads_kv=hkv,
                scale=(1.0 / np.sqrt(d)) if scale is None else float(scale), seqused_k=vl.used, **keys.scalars())
    for t, arr in (("q", qa), ("k", ka), ("v", va), ("o", o)):
        args.update(_strides(arr, t))
    if slopes is not None:
        args["alibi_slopes"] = _copy(slopes, "f32", what + ": alibi_slopes")
    mask = None
    if return_mask:
        mask = aligned_empty((vl.batch, hq, vl.max_q, vl.max_k), "i32")
        mask.fill(-1)
        args.update(dropout_mask=mask, max_seqlen_q=vl.max_q, max_seqlen_k=vl.max_k)
    if vl.batch and vl.max_q:
        kern.run(problem=(vl.max_q, hq, vl.batch), twice=twice, nullable=("seqused_k",), **args)
    out = (o, lse) if return_lse else (o,)
    out += (mask,) if return_mask else ()
    return out if len(out) > 1 else o


def attention_varlen_backward(q, k, v, dout, cu_seqlens_q, cu_seqlens_k, o=None, lse=None, max_seqlen_q=None,
                              max_seqlen_k=None, causal=False, sm=80, scale=None, path="auto", deterministic=False,
                              grad_dtype=None, twice=False, window=None, softcap=None, alibi_slopes=None, dropout=None):
    """dq, dk, dv of attention_varlen(q, k, v, ...) for dL/do = dout on the emulated backward kernels (the sequence
    the dkdv kernel's description names: prep, dkdv, convert; deterministic=True: prep, dkdv, dq), packed like q and k. o and lse ([heads_q, total_q]):
    the forward's; None (both): the emulated forward computes them. dropout: the forward's (p, seed, offset), which
    regenerates its mask."""
    from .emulate import _bwd_kernels, _copy, _poison
    what = "attention_varlen_backward"
    if (o is None) != (lse is None):
        raise KilnArgumentError("%s: give both o and lse (the forward's outputs) or neither" % what)
    if o is None:
        o, lse = attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal=causal, sm=sm,
                                  scale=scale, path=path, return_lse=True, window=window, softcap=softcap,
                                  alibi_slopes=alibi_slopes, dropout=dropout)
    qa, ka, va, oa, da = (np.asarray(t) for t in (q, k, v, o, dout))
    _packed(what, (qa, ka, va, oa, da), ("q", "k", "v", "o", "dout"))
    dt, od = dtype_name(qa.dtype), dtype_name(oa.dtype)
    if dtype_name(ka.dtype) != dt or dtype_name(va.dtype) != dt or dtype_name(da.dtype) != od:
        raise KilnArgumentError("%s: q, k, v share a dtype and dout has o's" % what)
    tq, hq, d = qa.shape
    tk, hkv = ka.shape[0], ka.shape[1]
    refuse_v_head_dim(what, d, va.shape[2], "varlen")
    if ka.shape != va.shape or ka.shape[2] != d or oa.shape != qa.shape or da.shape != qa.shape:
        raise KilnArgumentError("%s: k %s and v %s must match with q's head_dim; o and dout have q's shape %s"
                                % (what, ka.shape, va.shape, qa.shape))
    check_heads(what, hq, hkv)
    vl = Varlen(what, cu_seqlens_q, cu_seqlens_k, tq, tk, max_seqlen_q, max_seqlen_k)
    la = np.asarray(lse)
    if la.size != hq * tq:
        raise KilnArgumentError("%s: lse must hold [heads_q, total_q] = %d values, got shape %s"
                                % (what, hq * tq, la.shape))
    gd = dtype_name(grad_dtype) if grad_dtype is not None else dt
    cv = causal_value(causal, what)
    slopes = None if alibi_slopes is None else np.asarray(alibi_slopes)
    keys = Keys(what, window, softcap, None if slopes is None else slopes.shape, vl.batch, hq, dropout)
    kernels = _bwd_kernels(dt, od, gd, d, cv, deterministic, path, keys.words() + " varlen=true", sm)
    qa, ka, va = (_copy(t, dt, what + ": " + n) for t, n in zip((qa, ka, va), "qkv"))
    oa, da = (_copy(t, od, what + ": " + n) for t, n in ((oa, "o"), (da, "dout")))
    grads = [aligned_empty(t.shape, gd) for t in (qa, ka, va)]
    delta = aligned_empty((hq, tq), "f32")
    dq_acc = aligned_empty((hq, tq, d), "f32")
    for a in grads + [delta, dq_acc]:
        _poison(a)
    args = dict(vl.args(), q=qa, k=ka, v=va, o=oa, dout=da, lse=_copy(la.reshape(hq, tq), "f32", what + ": lse"),
                delta=delta, dq_acc=dq_acc, dq=grads[0], dk=grads[1], dv=grads[2], heads_q=hq, heads_kv=hkv,
                scale=(1.0 / np.sqrt(d)) if scale is None else float(scale), **keys.scalars())
    if slopes is not None:
        args["alibi_slopes"] = _copy(slopes, "f32", what + ": alibi_slopes")
    for t, arr in (("q", qa), ("k", ka), ("v", va), ("o", oa), ("dout", da), ("dq", grads[0]), ("dk", grads[1]),
                   ("dv", grads[2])):
        args.update(_strides(arr, t))
    for kern in kernels:
        names = {p["name"] for p in kern.params}
        problem = (vl.max_k, hkv, vl.batch) if "kernel=dkdv" in kern.spec else (vl.max_q, hq, vl.batch)
        if problem[0] == 0 or vl.batch == 0:
            continue
        kern.run(problem=problem, twice=twice, **{n: a for n, a in args.items() if n in names})
    return tuple(grads)
