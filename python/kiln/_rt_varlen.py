"""kiln._rt_varlen - kiln.Runtime's varlen and paged-KV-cache attention launches (kiln_attention_forward_varlen,
kiln_attention_backward_varlen, kiln_attention_args.cache), mixed into kiln.Runtime.

Arrays as the rest of kiln.Runtime takes them (torch tensors, __cuda_array_interface__, DLPack); int32 index
tensors (cu_seqlens, block_table, cache_seqlens, ...) contiguous. Nothing here synchronizes or reads device
memory: the kernels read the sequence bounds on the device, as kiln/runtime.h documents (the caller vouches).
"""

import ctypes

from . import _lib
from ._attn_keys import CAUSAL_CODE, ROTARY_CODE, causal_value, refuse_v_head_dim, rotary_value
from .errors import KilnArgumentError


def _rt():
    from . import runtime  # runtime imports this module: late, to break the cycle
    return runtime


class VarlenArgs(ctypes.Structure):
    """kiln_attention_varlen (kiln/runtime.h)."""
    _fields_ = [("cu_seqlens_q", ctypes.c_uint64), ("cu_seqlens_k", ctypes.c_uint64), ("seqused_k", ctypes.c_uint64),
                ("total_q", ctypes.c_int), ("total_k", ctypes.c_int), ("dropout_mask", ctypes.c_uint64)]


_SIGS = {
    "kiln_attention_forward_varlen": (ctypes.c_int, [ctypes.c_void_p, ctypes.POINTER(_lib.AttentionArgs),
                                                     ctypes.POINTER(VarlenArgs), ctypes.POINTER(_lib.Error)]),
    "kiln_attention_backward_varlen_workspace": (ctypes.c_size_t, [ctypes.POINTER(_lib.AttentionBwdArgs),
                                                                   ctypes.POINTER(VarlenArgs)]),
    "kiln_attention_backward_varlen": (ctypes.c_int, [ctypes.c_void_p, ctypes.POINTER(_lib.AttentionBwdArgs),
                                                      ctypes.POINTER(VarlenArgs), ctypes.POINTER(_lib.Error)]),
}


def _fn(lib, name):
    f = getattr(lib, name)
    f.restype, f.argtypes = _SIGS[name]
    return f


def _index(rt, obj, what, shape, views):
    """The device pointer of a contiguous int32 tensor of `shape` (None: 0)."""
    if obj is None:
        return 0
    t = rt._view(obj, what, rt.device_ordinal, index_ok=True)
    if t.dtype != "i32" or tuple(t.shape) != tuple(shape) or not t.contiguous():
        raise KilnArgumentError("%s must be contiguous int32 %s, got %s %s" % (what, list(shape), t.dtype,
                                                                               list(t.shape)))
    views.append(t)
    return t.ptr


def _views(rt, what, named, ndim, layout):
    out = {}
    for n, obj in named:
        if obj is None:
            raise KilnArgumentError("%s: %s is required" % (what, n))
        t = rt._view(obj, "%s: %s" % (what, n), rt.device_ordinal)
        if len(t.shape) != ndim:
            raise KilnArgumentError("%s: %s must be %d-d %s, got shape %s" % (what, n, ndim, layout, t.shape))
        if t.strides[-1] != 1 and t.shape[-1] != 1:
            raise KilnArgumentError("%s: %s's head_dim must be contiguous (stride %d)" % (what, n, t.strides[-1]))
        out[n] = t
    return out


def _same(what, views, groups):
    for group in groups:
        if len({views[n].dtype for n in group}) != 1:
            raise KilnArgumentError("%s: %s must share a dtype, got %s" % (what, ", ".join(group), ", ".join(
                views[n].dtype for n in group)))


def _attention_args(rt, what, o, q, k, v, head_dim, causal, sizes, scale):
    """kiln_attention_args with the pointers, dtypes, head_dim, causal code, (batch, heads_q, heads_kv, seq_q,
    seq_k) and scale (None: the runtime's 1/sqrt(head_dim)) set; strides are the caller's."""
    a = _lib.AttentionArgs()
    a.o, a.q, a.k, a.v = o.ptr, q.ptr, k.ptr, v.ptr
    a.dtype, a.out_dtype = rt._DTYPE_CODE[q.dtype], rt._DTYPE_CODE[o.dtype]
    a.head_dim, a.causal = head_dim, CAUSAL_CODE[causal_value(causal, what)]
    a.batch, a.heads_q, a.heads_kv, a.seq_q, a.seq_k = sizes
    a.scale = 0.0 if scale is None else float(scale)
    return a


def _check_max(what, name, value):
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise KilnArgumentError("%s: %s=%r; valid: an int >= 0 (the longest sequence)" % (what, name, value))


class VarlenRuntime:
    """The varlen and KV-cache launch helpers of kiln.Runtime."""

    # ---- varlen (packed sequences) ----

    def _varlen_desc(self, what, cu_seqlens_q, cu_seqlens_k, batch, total_q, total_k, seqused_k, views,
                     dropout_mask=None, mask_shape=None):
        vl = VarlenArgs()
        vl.cu_seqlens_q = _index(self, cu_seqlens_q, what + ": cu_seqlens_q", (batch + 1,), views)
        vl.cu_seqlens_k = _index(self, cu_seqlens_k, what + ": cu_seqlens_k", (batch + 1,), views)
        vl.seqused_k = _index(self, seqused_k, what + ": seqused_k", (batch,), views)
        vl.total_q, vl.total_k = total_q, total_k
        # the keep mask (tests): int32 [batch, heads_q, max_seqlen_q, max_seqlen_k]
        vl.dropout_mask = _index(self, dropout_mask, what + ": dropout_mask", mask_shape, views)
        return vl

    @staticmethod
    def _batch_of(what, cu_seqlens_q):
        shape = getattr(cu_seqlens_q, "shape", None)
        if shape is None or len(shape) != 1 or shape[0] < 1:
            raise KilnArgumentError("%s: cu_seqlens_q must be int32 [batch + 1], got %r" % (what, shape))
        return int(shape[0]) - 1

    def attention_varlen(self, o, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, lse=None,
                         causal=False, scale=None, stream=None, seqused_k=None, window=None, softcap=None,
                         alibi_slopes=None, dropout=None, dropout_mask=None):
        """Varlen attention (FlashAttention-2's flash_attn_varlen_func) in one launch: q, o [total_q, heads_q,
        head_dim], k, v [total_k, heads_kv, head_dim] (any token/head strides, head_dim contiguous); cu_seqlens_q/k
        int32 [batch + 1] device tensors; max_seqlen_q/k the longest sequences (the grid); lse f32 [heads_q, total_q]
        or None; seqused_k int32 [batch] or None. causal, window, softcap, alibi_slopes ([heads_q] or [batch,
        heads_q]) per sequence, as attention(). dropout=(p, seed, offset) as attention()'s, the mask keyed by the
        sequence's index and its rows and keys (FlashAttention-2's); dropout_mask (tests): int32 [batch, heads_q,
        max_seqlen_q, max_seqlen_k] receives the keep mask (1 kept, 0 dropped; nothing past a sequence's lengths)."""
        rt = _rt()
        what = "attention_varlen"
        views = _views(self, what, (("q", q), ("k", k), ("v", v), ("o", o)), 3, "[total, heads, head_dim]")
        qv, kv, vv, ov = (views[n] for n in "qkvo")
        tq, hq, d = qv.shape
        tk, hkv, _ = kv.shape
        refuse_v_head_dim(what, d, vv.shape[2], "varlen")
        if kv.shape != vv.shape or kv.shape[2] != d or ov.shape != qv.shape:
            raise KilnArgumentError("%s: k %s and v %s must match with q's head_dim; o has q's shape %s" % (
                what, kv.shape, vv.shape, qv.shape))
        rt.check_heads(what, hq, hkv)
        _same(what, views, (("q", "k", "v"),))
        _check_max(what, "max_seqlen_q", max_seqlen_q)
        _check_max(what, "max_seqlen_k", max_seqlen_k)
        batch = self._batch_of(what, cu_seqlens_q)
        vl_views = list(views.values())
        a = _attention_args(rt, what, ov, qv, kv, vv, d, causal, (batch, hq, hkv, max_seqlen_q, max_seqlen_k), scale)
        for n, t in views.items():
            getattr(a, "stride_" + n)[:] = [0, t.strides[0], t.strides[1]]
        if lse is not None:
            lv = self._view(lse, what + ": lse", self.device_ordinal)
            if lv.dtype != "f32" or lv.numel != hq * tq or not lv.contiguous():
                raise KilnArgumentError("%s: lse must be contiguous f32 [heads_q, total_q] = %d values, got %s %s"
                                        % (what, hq * tq, lv.dtype, lv.shape))
            a.lse = lv.ptr
            vl_views.append(lv)
        self._attn_mask(a, what, batch, hq, vl_views, window=window, softcap=softcap, alibi_slopes=alibi_slopes,
                        dropout=dropout)
        vl = self._varlen_desc(what, cu_seqlens_q, cu_seqlens_k, batch, tq, tk, seqused_k, vl_views, dropout_mask,
                               (batch, hq, max_seqlen_q, max_seqlen_k))
        a.stream = rt._stream_handle(stream, vl_views)
        err = _lib.Error()
        _lib.check(_fn(self._lib, "kiln_attention_forward_varlen")(self._live(), ctypes.byref(a), ctypes.byref(vl),
                                                                   ctypes.byref(err)), err)

    def _varlen_bwd_args(self, what, dq, dk, dv, dout, q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                         max_seqlen_k, causal, scale, deterministic, stream, dropout_mask=None, **mask):
        rt = _rt()
        views = _views(self, what, (("q", q), ("k", k), ("v", v), ("o", o), ("dout", dout), ("dq", dq), ("dk", dk),
                                    ("dv", dv)), 3, "[total, heads, head_dim]")
        qv, kv = views["q"], views["k"]
        tq, hq, d = qv.shape
        tk, hkv, _ = kv.shape
        refuse_v_head_dim(what, d, views["v"].shape[2], "varlen")
        for n, like in (("v", "k"), ("o", "q"), ("dout", "q"), ("dq", "q"), ("dk", "k"), ("dv", "k")):
            if views[n].shape != views[like].shape:
                raise KilnArgumentError("%s: %s has shape %s; expected %s's %s" % (what, n, views[n].shape, like,
                                                                                  views[like].shape))
        if kv.shape[2] != d:
            raise KilnArgumentError("%s: k %s does not fit q %s (head_dim)" % (what, kv.shape, qv.shape))
        rt.check_heads(what, hq, hkv)
        _same(what, views, (("q", "k", "v"), ("o", "dout"), ("dq", "dk", "dv")))
        _check_max(what, "max_seqlen_q", max_seqlen_q)
        _check_max(what, "max_seqlen_k", max_seqlen_k)
        if lse is None:
            raise KilnArgumentError("%s: lse (the forward's f32 [heads_q, total_q]) is required" % what)
        lv = self._view(lse, what + ": lse", self.device_ordinal)
        if lv.dtype != "f32" or lv.numel != hq * tq or not lv.contiguous():
            raise KilnArgumentError("%s: lse must be contiguous f32 [heads_q, total_q] = %d values, got %s %s"
                                    % (what, hq * tq, lv.dtype, lv.shape))
        batch = self._batch_of(what, cu_seqlens_q)
        a = _lib.AttentionBwdArgs()
        for n, t in views.items():
            setattr(a, n, t.ptr)
            getattr(a, "stride_" + n)[:] = [0, t.strides[0], t.strides[1]]
        a.lse = lv.ptr
        a.dtype, a.out_dtype = rt._DTYPE_CODE[qv.dtype], rt._DTYPE_CODE[views["o"].dtype]
        a.grad_dtype = rt._DTYPE_CODE[views["dq"].dtype]
        a.head_dim, a.deterministic = d, 1 if deterministic else 0
        a.causal = CAUSAL_CODE[causal_value(causal, what)]
        a.batch, a.heads_q, a.heads_kv, a.seq_q, a.seq_k = batch, hq, hkv, max_seqlen_q, max_seqlen_k
        a.scale = 0.0 if scale is None else float(scale)
        vl_views = list(views.values()) + [lv]
        self._attn_mask(a, what, batch, hq, vl_views, **mask)
        vl = self._varlen_desc(what, cu_seqlens_q, cu_seqlens_k, batch, tq, tk, None, vl_views, dropout_mask,
                               (batch, hq, max_seqlen_q, max_seqlen_k))
        a.stream = rt._stream_handle(stream, vl_views)
        return a, vl, vl_views

    def attention_varlen_backward_workspace(self, dq, dk, dv, dout, q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k,
                                            max_seqlen_q, max_seqlen_k, causal=False, deterministic=False, window=None,
                                            softcap=None, alibi_slopes=None, dropout=None):
        """Bytes of device workspace attention_varlen_backward needs (f32 delta [heads_q, total_q] and, unless
        deterministic, the f32 dQ accumulator)."""
        a, vl, _ = self._varlen_bwd_args("attention_varlen_backward", dq, dk, dv, dout, q, k, v, o, lse, cu_seqlens_q,
                                         cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal, None, deterministic, 0,
                                         window=window, softcap=softcap, alibi_slopes=alibi_slopes, dropout=dropout)
        return int(_fn(self._lib, "kiln_attention_backward_varlen_workspace")(ctypes.byref(a), ctypes.byref(vl)))

    def attention_varlen_backward(self, dq, dk, dv, dout, q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                  max_seqlen_k, causal=False, scale=None, deterministic=False, workspace=None,
                                  stream=None, window=None, softcap=None, alibi_slopes=None, dropout=None,
                                  dropout_mask=None):
        """dq, dk, dv of attention_varlen (packed like q and k) from its q, k, v, o, lse ([heads_q, total_q]) and
        dout: the varlen attention backward kernels (prep, dkdv, convert; deterministic: prep, dkdv, dq). workspace:
        as attention_backward's (attention_varlen_backward_workspace bytes; None: one the Runtime keeps). dropout: the
        forward's (p, seed, offset), which regenerates its mask; dropout_mask (tests) receives that mask."""
        what = "attention_varlen_backward"
        a, vl, views = self._varlen_bwd_args(what, dq, dk, dv, dout, q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k,
                                             max_seqlen_q, max_seqlen_k, causal, scale, deterministic, stream,
                                             dropout_mask=dropout_mask, window=window, softcap=softcap,
                                             alibi_slopes=alibi_slopes, dropout=dropout)
        with self._kept_workspace(workspace):
            need = int(_fn(self._lib, "kiln_attention_backward_varlen_workspace")(ctypes.byref(a), ctypes.byref(vl)))
            a.workspace = self._workspace_ptr(what, need, workspace, views, "_bwd_ws")
            err = _lib.Error()
            _lib.check(_fn(self._lib, "kiln_attention_backward_varlen")(self._live(), ctypes.byref(a),
                                                                        ctypes.byref(vl), ctypes.byref(err)), err)

    # ---- paged KV cache (flash_attn_with_kvcache) ----

    def _kvcache_args(self, what, o, q, k_cache, v_cache, block_table, cache_seqlens, cache_batch_idx, cache_leftpad,
                      k_new, v_new, seq_k, lse, causal, scale, stream, rotary=None, rotary_cos=None, rotary_sin=None,
                      **mask):
        rt = _rt()
        named = [("q", q), ("k_cache", k_cache), ("v_cache", v_cache), ("o", o)]
        if k_new is not None or v_new is not None:
            named += [("k_new", k_new), ("v_new", v_new)]
        views = _views(self, what, named, 4, "(q, o, k_new, v_new: [batch, seq, heads, head_dim]; caches: "
                                             "[num_blocks, page_size, heads_kv, head_dim])")
        qv, kc, vc, ov = views["q"], views["k_cache"], views["v_cache"], views["o"]
        b, sq, hq, d = qv.shape
        nblocks, page, hkv, _ = kc.shape
        refuse_v_head_dim(what, d, vc.shape[3], "paged")
        if vc.shape != kc.shape or kc.shape[3] != d or ov.shape != qv.shape:
            raise KilnArgumentError("%s: k_cache %s and v_cache %s must match with q's head_dim; o has q's shape %s"
                                    % (what, kc.shape, vc.shape, qv.shape))
        rt.check_heads(what, hq, hkv)
        groups = [("q", "k_cache", "v_cache")]
        if "k_new" in views:
            groups.append(("q", "k_new", "v_new"))
            kn = views["k_new"]
            if views["v_new"].shape != kn.shape or kn.shape[0] != b or tuple(kn.shape[2:]) != (hkv, d):
                raise KilnArgumentError("%s: k_new %s and v_new %s must be [batch=%d, seqlen_new, heads_kv=%d, "
                                        "head_dim=%d]" % (what, kn.shape, views["v_new"].shape, b, hkv, d))
        _same(what, views, groups)
        shape = getattr(block_table, "shape", None)
        if shape is None or len(shape) != 2 or shape[1] < 1 or (shape[0] != b and cache_batch_idx is None):
            raise KilnArgumentError("%s: block_table must be int32 [batch=%d (or any rows with cache_batch_idx), "
                                    "max_blocks >= 1], got %r" % (what, b, shape))
        _check_max(what, "seq_k", seq_k)
        vl = list(views.values())
        a = _attention_args(rt, what, ov, qv, kc, vc, d, causal, (b, hq, hkv, sq, seq_k), scale)
        for n, t in (("q", qv), ("k", kc), ("v", vc), ("o", ov)):
            getattr(a, "stride_" + n)[:] = [t.strides[0], t.strides[1], t.strides[2]]
        c = a.cache
        c.block_table = _index(self, block_table, what + ": block_table", tuple(shape), vl)
        c.cache_seqlens = _index(self, cache_seqlens, what + ": cache_seqlens", (b,), vl)
        if not c.cache_seqlens:
            raise KilnArgumentError("%s: cache_seqlens (int32 [batch]) is required" % what)
        c.cache_batch_idx = _index(self, cache_batch_idx, what + ": cache_batch_idx", (b,), vl)
        c.cache_leftpad = _index(self, cache_leftpad, what + ": cache_leftpad", (b,), vl)
        c.page_size, c.max_blocks, c.num_blocks = page, int(shape[1]), nblocks
        if "k_new" in views:
            kn, vn = views["k_new"], views["v_new"]
            c.k_new, c.v_new, c.seqlen_new = kn.ptr, vn.ptr, kn.shape[1]
            c.stride_k_new[:] = [kn.strides[0], kn.strides[1], kn.strides[2]]
            c.stride_v_new[:] = [vn.strides[0], vn.strides[1], vn.strides[2]]
        if lse is not None:
            lv = self._view(lse, what + ": lse", self.device_ordinal)
            if lv.dtype != "f32" or lv.numel != b * hq * sq or not lv.contiguous():
                raise KilnArgumentError("%s: lse must be contiguous f32 [batch, heads_q, seq_q] = %d values, got %s %s"
                                        % (what, b * hq * sq, lv.dtype, lv.shape))
            a.lse = lv.ptr
            vl.append(lv)
        self._kvcache_rotary(what, c, rotary, rotary_cos, rotary_sin, vl)
        self._attn_mask(a, what, b, hq, vl, **mask)
        a.stream = rt._stream_handle(stream, vl)
        return a

    def _kvcache_rotary(self, what, c, rotary, rotary_cos, rotary_sin, views):
        """The cache block's rotary fields: rotary "neox" / "interleaved" (None: none) with rotary_cos / rotary_sin
        contiguous [seqlen_ro, rotary_dim / 2] of one dtype (rotary_dim, rotary_dtype and seqlen_ro follow)."""
        rv = rotary_value(rotary, what)
        if rv == "none":
            if rotary_cos is not None or rotary_sin is not None:
                raise KilnArgumentError("%s: rotary_cos / rotary_sin need rotary='neox' or 'interleaved'" % what)
            return
        if rotary_cos is None or rotary_sin is None:
            raise KilnArgumentError("%s: rotary=%r needs rotary_cos and rotary_sin [seqlen_ro, rotary_dim / 2]"
                                    % (what, rv))
        cs, sn = (self._view(t, "%s: %s" % (what, n), self.device_ordinal)
                  for t, n in ((rotary_cos, "rotary_cos"), (rotary_sin, "rotary_sin")))
        if (len(cs.shape) != 2 or tuple(cs.shape) != tuple(sn.shape) or cs.dtype != sn.dtype or cs.shape[0] < 1
                or cs.shape[1] < 1 or not cs.contiguous() or not sn.contiguous() or cs.dtype not in _rt()._DTYPE_CODE):
            raise KilnArgumentError("%s: rotary_cos %s %s and rotary_sin %s %s must be contiguous, one shape "
                                    "[seqlen_ro >= 1, rotary_dim / 2 >= 1] and one dtype (f32, f16 or bf16)"
                                    % (what, cs.dtype, cs.shape, sn.dtype, sn.shape))
        c.rotary, c.rotary_dim, c.rotary_dtype = ROTARY_CODE[rv], 2 * cs.shape[1], _rt()._DTYPE_CODE[cs.dtype]
        c.rotary_cos, c.rotary_sin, c.seqlen_ro = cs.ptr, sn.ptr, cs.shape[0]
        views += [cs, sn]

    def attention_kvcache_workspace(self, o, q, k_cache, v_cache, block_table, cache_seqlens, cache_batch_idx=None,
                                    cache_leftpad=None, k_new=None, v_new=None, seq_k=0, lse=None, causal=False,
                                    splits=0, window=None, softcap=None, alibi_slopes=None, rotary=None,
                                    rotary_cos=None, rotary_sin=None):
        """(splits, bytes) attention_kvcache(..., splits=splits) uses, as attention_workspace."""
        a = self._kvcache_args("attention_kvcache", o, q, k_cache, v_cache, block_table, cache_seqlens,
                               cache_batch_idx, cache_leftpad, k_new, v_new, seq_k, lse, causal, None, 0,
                               rotary, rotary_cos, rotary_sin, window=window, softcap=softcap,
                               alibi_slopes=alibi_slopes)
        return self._attn_splits(a, splits)

    def attention_kvcache(self, o, q, k_cache, v_cache, block_table, cache_seqlens, cache_batch_idx=None,
                          cache_leftpad=None, k_new=None, v_new=None, seq_k=0, lse=None, causal=False, scale=None,
                          stream=None, splits=0, workspace=None, window=None, softcap=None, alibi_slopes=None,
                          rotary=None, rotary_cos=None, rotary_sin=None):
        """Attention against a paged KV cache (FlashAttention-2's flash_attn_with_kvcache; kiln_attention_kvcache):
        q, o [batch, seq_q, heads_q, head_dim]; k_cache, v_cache pages [num_blocks, page_size, heads_kv, head_dim];
        block_table int32 [batch, max_blocks]; cache_seqlens int32 [batch]; cache_batch_idx, cache_leftpad int32
        [batch] or None. k_new / v_new [batch, seqlen_new, heads_kv, head_dim] (or None) are written into the pages
        at cache_seqlens and attended in the same launch (cache_seqlens is not advanced). seq_k: the longest key
        count any entry sees (only the split-KV choice reads it; an upper bound is fine). lse f32 [batch, heads_q,
        seq_q] or None; splits, workspace as attention(). rotary "neox" or "interleaved" (with k_new): rotary_cos /
        rotary_sin contiguous [seqlen_ro, rotary_dim / 2] (f32, f16 or bf16, one dtype) rotate q and the new keys in
        the kernel (FlashAttention-2's rotary_cos / rotary_sin / rotary_interleaved; docs/attention.md)."""
        a = self._kvcache_args("attention_kvcache", o, q, k_cache, v_cache, block_table, cache_seqlens,
                               cache_batch_idx, cache_leftpad, k_new, v_new, seq_k, lse, causal, scale, stream,
                               rotary, rotary_cos, rotary_sin, window=window, softcap=softcap,
                               alibi_slopes=alibi_slopes)
        n, need = self._attn_splits(a, splits)
        views = []
        with self._kept_workspace(workspace):
            ptr = self._workspace_ptr("attention_kvcache", need, workspace, views, "_fwd_ws") if n > 1 else 0
            err = _lib.Error()
            _lib.check(self._lib.kiln_attention_forward_splitkv(self._live(), ctypes.byref(a), n, ptr, need,
                                                                ctypes.byref(err)), err)
