"""Paged KV-cache attention (paged=true, append=true) for kiln.emulate: FlashAttention-2's flash_attn_with_kvcache on
the emulated kernel (docs/attention.md, "Paged KV cache"), with numpy arrays."""

import numpy as np

from ._attn_keys import Keys, causal_value, forward_spec, refuse_v_head_dim, rotary_value
from ._np import aligned_empty, dtype_name
from .errors import KilnArgumentError
from .runtime import check_heads


def _index(what, name, a, shape, out):
    """An aligned int32 copy of index array `a` of `shape` (None stays None), kept alive in `out`."""
    if a is None:
        return None
    arr = np.asarray(a)
    if arr.shape != tuple(shape) or not np.issubdtype(arr.dtype, np.integer):
        raise KilnArgumentError("%s: %s must be int32 %s, got %s %s" % (what, name, list(shape), arr.dtype,
                                                                       list(arr.shape)))
    c = aligned_empty(tuple(shape), "i32")
    c[...] = arr
    out.append(c)
    return c


def attention_kvcache(q, k_cache, v_cache, block_table, cache_seqlens, cache_batch_idx=None, cache_leftpad=None,
                      k_new=None, v_new=None, causal=False, sm=80, scale=None, out_dtype=None, path="auto",
                      return_lse=False, window=None, softcap=None, alibi_slopes=None, rotary=None, rotary_cos=None,
                      rotary_sin=None):
    """Attention against a paged KV cache on the emulated kernel for sm: q [batch, seq_q, heads_q, head_dim];
    k_cache, v_cache pages [num_blocks, page_size, heads_kv, head_dim]; block_table int32 [batch, max_blocks];
    cache_seqlens int32 [batch]; cache_batch_idx (the block-table row of each entry) and cache_leftpad (each entry's
    first cache position) int32 [batch] or None. k_new / v_new [batch, seqlen_new, heads_kv, head_dim]: written into
    the pages at cache_seqlens (k_cache and v_cache are updated in place) and attended in the same launch. Entry b
    sees cache_seqlens[b] - cache_leftpad[b] (+ seqlen_new) keys, causal bottom-right aligned to that count; window,
    softcap, alibi_slopes as attention(). page_size: >= 16, a multiple or a divisor of the kernel's key tile.
    rotary "neox" or "interleaved" (with k_new): rotary_cos / rotary_sin [seqlen_ro, rotary_dim / 2] (f32, f16 or
    bf16, one dtype: the spec's rotary_cs; rotary_dim from their width) rotate q and the new keys inside the kernel
    (templates/lib/attn_rotary.lua: new key i at cache_seqlens + i, q likewise when causal or windowed, else at
    cache_seqlens). Returns o (and lse [batch, heads_q, seq_q] f32)."""
    from .emulate import _copy, _poison, load
    what = "attention_kvcache"
    qa, kc, vc = (np.asarray(t) for t in (q, k_cache, v_cache))
    for n, t in (("q", qa), ("k_cache", kc), ("v_cache", vc)):
        if t.ndim != 4:
            raise KilnArgumentError("%s: %s must be 4-d, got shape %s" % (what, n, t.shape))
    for n, t in (("k_cache", kc), ("v_cache", vc)):
        if not isinstance(t, np.ndarray) or not t.flags.c_contiguous or not t.flags.writeable:
            raise KilnArgumentError("%s: %s must be a writable C-contiguous array (the kernel appends into it)"
                                    % (what, n))
    dt = dtype_name(qa.dtype)
    if dtype_name(kc.dtype) != dt or dtype_name(vc.dtype) != dt:
        raise KilnArgumentError("%s: q, k_cache, v_cache must share a dtype, got %s, %s, %s" % (what, qa.dtype,
                                                                                              kc.dtype, vc.dtype))
    b, sq, hq, d = qa.shape
    nblocks, page, hkv, _ = kc.shape
    refuse_v_head_dim(what, d, vc.shape[3], "paged")
    if vc.shape != kc.shape or kc.shape[3] != d:
        raise KilnArgumentError("%s: k_cache %s and v_cache %s must match, with q's head_dim (q %s)"
                                % (what, kc.shape, vc.shape, qa.shape))
    check_heads(what, hq, hkv)
    keep = []
    bt = np.asarray(block_table)
    if bt.ndim != 2 or bt.shape[1] < 1 or (bt.shape[0] != b and cache_batch_idx is None):
        raise KilnArgumentError("%s: block_table must be int32 [batch=%d (or any rows with cache_batch_idx), "
                                "max_blocks >= 1], got shape %s" % (what, b, bt.shape))
    bt = _index(what, "block_table", bt, bt.shape, keep)
    seqlens = _index(what, "cache_seqlens", cache_seqlens, (b,), keep)
    if seqlens is None:
        raise KilnArgumentError("%s: cache_seqlens (int32 [batch]) is required" % what)
    bidx = _index(what, "cache_batch_idx", cache_batch_idx, (b,), keep)
    lpad = _index(what, "cache_leftpad", cache_leftpad, (b,), keep)
    append = k_new is not None
    if append != (v_new is not None):
        raise KilnArgumentError("%s: k_new and v_new go together" % what)
    od = dtype_name(out_dtype) if out_dtype is not None else dt
    cv = causal_value(causal, what)
    slopes = None if alibi_slopes is None else np.asarray(alibi_slopes)
    keys = Keys(what, window, softcap, None if slopes is None else slopes.shape, b, hq)
    rv = rotary_value(rotary, what)
    rot_words, rot_args = "", {}
    if rv != "none":
        if rotary_cos is None or rotary_sin is None:
            raise KilnArgumentError("%s: rotary=%r needs rotary_cos and rotary_sin [seqlen_ro, rotary_dim / 2]"
                                    % (what, rv))
        cos, sin = np.asarray(rotary_cos), np.asarray(rotary_sin)
        if cos.ndim != 2 or cos.shape != sin.shape or cos.shape[0] < 1 or cos.shape[1] < 1:
            raise KilnArgumentError("%s: rotary_cos %s and rotary_sin %s must be one shape [seqlen_ro >= 1, "
                                    "rotary_dim / 2 >= 1]" % (what, list(cos.shape), list(sin.shape)))
        cs = dtype_name(cos.dtype)
        if dtype_name(sin.dtype) != cs:
            raise KilnArgumentError("%s: rotary_cos and rotary_sin must share a dtype, got %s and %s"
                                    % (what, cos.dtype, sin.dtype))
        rot_words = " rotary=%s rotary_dim=%d rotary_cs=%s" % (rv, 2 * cos.shape[1], cs)
        rot_args = dict(rotary_cos=_copy(cos, cs, what + ": rotary_cos"),
                        rotary_sin=_copy(sin, cs, what + ": rotary_sin"), seqlen_ro=cos.shape[0])
    kern = load(forward_spec(dt, od, d, cv, path, keys.words(),
                             tail=" paged=true%s%s" % (" append=true" if append else "", rot_words)), sm)
    tile = kern.meta["launch"].split("scalar key_tile =")[1].split()[0] if "key_tile =" in kern.meta.get(
        "launch", "") else None
    if tile is not None:
        tile = int(tile)
        if not (page >= 16 and (page % tile == 0 or tile % page == 0)):
            raise KilnArgumentError("%s: page_size %d does not fit '%s' (%d-key tiles); valid: 16..%d dividing %d, or "
                                    "a multiple of %d" % (what, page, kern.spec, tile, tile, tile, tile))
    qc = _copy(qa, dt, what + ": q")
    o = aligned_empty((b, sq, hq, d), od)
    lse = aligned_empty((b, hq, sq), "f32")
    _poison(o)
    _poison(lse)
    args = dict(o=o, lse=lse, q=qc, k=kc, v=vc, batch=b, heads_q=hq, heads_kv=hkv, seq_q=sq,
                scale=(1.0 / np.sqrt(d)) if scale is None else float(scale), block_table=bt, cache_seqlens=seqlens,
                cache_batch_idx=bidx, cache_leftpad=lpad, page_size=page, max_blocks=bt.shape[1], num_blocks=nblocks,
                **keys.scalars())
    for t, arr in (("q", qc), ("k", kc), ("v", vc), ("o", o)):
        args.update({"stride_%s%s" % (t, a): s // arr.itemsize for a, s in zip("bsh", arr.strides[:3])})
    if append:
        kn, vn = (_copy(t, dt, what + ": " + n) for t, n in ((k_new, "k_new"), (v_new, "v_new")))
        if kn.shape != vn.shape or kn.ndim != 4 or kn.shape[0] != b or kn.shape[2:] != (hkv, d):
            raise KilnArgumentError("%s: k_new %s and v_new %s must be [batch=%d, seqlen_new, heads_kv=%d, "
                                    "head_dim=%d]" % (what, kn.shape, vn.shape, b, hkv, d))
        args.update(k_new=kn, v_new=vn, seqlen_new=kn.shape[1])
        for t, arr in (("kn", kn), ("vn", vn)):
            args.update({"stride_%s%s" % (t, a): s // arr.itemsize for a, s in zip("bsh", arr.strides[:3])})
    if slopes is not None:
        args["alibi_slopes"] = _copy(slopes, "f32", what + ": alibi_slopes")
    args.update(rot_args)
    if b and sq:
        names = {p["name"] for p in kern.params}
        kern.run(problem=(sq, hq, b), nullable=("cache_batch_idx", "cache_leftpad"),
                 **{n: v for n, v in args.items() if n in names})
    return (o, lse) if return_lse else o
