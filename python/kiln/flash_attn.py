"""kiln.flash_attn - FlashAttention-2's Python interface (flash_attn.flash_attn_interface) on kiln's attention kernels.

Changing the import is all a user does:

    from kiln.flash_attn import flash_attn_func          # was: from flash_attn import flash_attn_func
    out = flash_attn_func(q, k, v, causal=True)          # q [batch, seqlen, nheads, headdim], k/v [.., nheads_k, ..]

flash_attn_func, flash_attn_qkvpacked_func, flash_attn_kvpacked_func, flash_attn_varlen_func (and its qkvpacked /
kvpacked forms) and flash_attn_with_kvcache take FlashAttention-2's arguments, in its order, with its defaults, and
return what it returns. Dense attention is the custom op ``kiln::flash_attention`` (FlashAttention's layout, causal
bottom-right aligned, window_size, softcap, alibi_slopes) with its backward op ``kiln::flash_attention_backward``
(kiln's attention_bwd kernels; the deterministic sequence with deterministic=True or under
torch.use_deterministic_algorithms(True)). The varlen and KV-cache functions are composite paths over the dense
kernel (one launch per sequence, through ``_varlen_forward`` and ``_kvcache_forward``) until kiln's varlen and paged
kernels take their place there. What kiln cannot do (dropout_p > 0 for now, head dims that are not a multiple of 8
up to 256, ...) raises one KilnArgumentError naming the argument. CUDA tensors, or CPU tensors inside
``kiln.torch.emulated()``.
"""

import math
from typing import Optional, Tuple

import torch

from . import torch as kt
from .errors import KilnArgumentError

__all__ = ["flash_attn_func", "flash_attn_qkvpacked_func", "flash_attn_kvpacked_func", "flash_attn_varlen_func",
           "flash_attn_varlen_qkvpacked_func", "flash_attn_varlen_kvpacked_func", "flash_attn_with_kvcache"]

_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


# ---- the dense op: FlashAttention's layout [batch, seqlen, nheads, headdim] and attention keys ----


def _mask_keys(window_left, window_right, softcap, alibi_slopes):
    """The kiln.Runtime keyword arguments for FlashAttention's window_size, softcap and alibi_slopes."""
    return dict(window=None if (window_left, window_right) == (-1, -1) else (window_left, window_right),
                softcap=softcap if softcap > 0 else None, alibi_slopes=alibi_slopes)


def _contig_last(t):
    return t if t.stride(-1) == 1 else t.contiguous()


@torch.library.custom_op("kiln::flash_attention", mutates_args=())
def _flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, alibi_slopes: Optional[torch.Tensor],
                     causal: bool, window_left: int, window_right: int, softcap: float, scale: float,
                     deterministic: bool) -> Tuple[torch.Tensor, torch.Tensor]:
    # q [batch, seq_q, heads_q, d], k/v [batch, seq_k, heads_kv, d], any strides but the last; causal bottom-right.
    # deterministic is the backward's choice (carried here so autograd sees it).
    rt = kt._backend("kiln::flash_attention", q)
    b, sq, hq, d = q.shape
    o = torch.empty((b, sq, hq, d), dtype=q.dtype, device=q.device)
    lse = torch.empty((b, hq, sq), dtype=torch.float32, device=q.device)
    if b and sq:
        if k.shape[1] == 0:  # no keys: every row sees none (O = 0, lse = +inf, as the kernel writes such rows)
            o.zero_()
            lse.fill_(math.inf)
            return o, lse
        qs, ks, vs = _contig_last(q), _contig_last(k), _contig_last(v)
        mask = _mask_keys(window_left, window_right, softcap, alibi_slopes)
        _splits, need = rt.attention_workspace(o, qs, ks, vs, lse=lse, causal=causal, **mask)
        ws = torch.empty(((need + 3) // 4,), dtype=torch.float32, device=q.device) if need else None
        rt.attention(o, qs, ks, vs, lse=lse, causal=causal, scale=scale, stream=kt._stream(q), workspace=ws, **mask)
    return o, lse


@_flash_attention.register_fake
def _flash_attention_fake(q, k, v, alibi_slopes, causal, window_left, window_right, softcap, scale, deterministic):
    b, sq, hq, d = q.shape
    return q.new_empty((b, sq, hq, d)), q.new_empty((b, hq, sq), dtype=torch.float32)


@torch.library.custom_op("kiln::flash_attention_backward", mutates_args=())
def _flash_attention_backward(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
                              lse: torch.Tensor, alibi_slopes: Optional[torch.Tensor], causal: bool, window_left: int,
                              window_right: int, softcap: float, scale: float,
                              deterministic: bool) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    rt = kt._backend("kiln::flash_attention_backward", q)
    b, sq, hq, d = q.shape
    sk = k.shape[1]
    dq = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    dk = torch.empty(k.shape, dtype=k.dtype, device=k.device)
    dv = torch.empty(v.shape, dtype=v.dtype, device=v.device)
    if not (b and sq and sk):  # nothing attends: every gradient is a sum over nothing
        return dq.zero_(), dk.zero_(), dv.zero_()
    args = dict(dq=dq, dk=dk, dv=dv, dout=_contig_last(do), q=_contig_last(q), k=_contig_last(k), v=_contig_last(v),
                o=_contig_last(o), lse=lse)
    mask = _mask_keys(window_left, window_right, softcap, alibi_slopes)
    nbytes = rt.attention_backward_workspace(causal=causal, deterministic=deterministic, **mask, **args)
    ws = torch.empty(((nbytes + 3) // 4,), dtype=torch.float32, device=q.device) if nbytes else None
    rt.attention_backward(causal=causal, scale=scale, deterministic=deterministic, workspace=ws, stream=kt._stream(q),
                          **mask, **args)
    return dq, dk, dv


@_flash_attention_backward.register_fake
def _flash_attention_backward_fake(do, q, k, v, o, lse, alibi_slopes, causal, window_left, window_right, softcap,
                                   scale, deterministic):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _fa_setup(ctx, inputs, output):
    q, k, v, alibi_slopes, causal, wl, wr, softcap, scale, deterministic = inputs
    o, lse = output
    ctx.save_for_backward(q, k, v, o, lse, alibi_slopes)
    ctx.keys = (causal, wl, wr, softcap, scale, deterministic)


def _fa_backward(ctx, do, _dlse):
    # lse is auxiliary (returned detached by the public functions): its gradient is not propagated, as in
    # FlashAttention. deterministic=True or torch.use_deterministic_algorithms(True): kiln's deterministic sequence.
    q, k, v, o, lse, alibi_slopes = ctx.saved_tensors
    causal, wl, wr, softcap, scale, deterministic = ctx.keys
    dq, dk, dv = _flash_attention_backward(do, q, k, v, o, lse, alibi_slopes, causal, wl, wr, softcap, scale,
                                           deterministic or kt._deterministic())
    return dq, dk, dv, None, None, None, None, None, None, None


_flash_attention.register_autograd(_fa_backward, setup_context=_fa_setup)


# ---- argument checks: one KilnArgumentError naming the argument ----


def _fail(fn, msg):
    raise KilnArgumentError("kiln.flash_attn.%s: %s" % (fn, msg))


def _check_tensors(fn, names, ts, dims, layout):
    for n, t in zip(names, ts):
        if not isinstance(t, torch.Tensor):
            _fail(fn, "%s must be a torch.Tensor %s, got %s" % (n, layout, type(t).__name__))
        if dims is not None and t.dim() != dims:
            _fail(fn, "%s must be %s, got shape %s" % (n, layout, list(t.shape)))
        if not kt._runnable(t):
            _fail(fn, "%s is on %s; kiln runs on CUDA tensors (on the CPU, `with kiln.torch.emulated():` runs kiln's "
                      "kernels on its emulator)" % (n, t.device))
    if ts[0].dtype not in _DTYPES:
        _fail(fn, "%s has dtype %s; valid: torch.float16, torch.bfloat16 (and torch.float32)" % (names[0], ts[0].dtype))
    for n, t in zip(names[1:], ts[1:]):
        if t.dtype != ts[0].dtype:
            _fail(fn, "%s is %s and %s is %s; they must share one dtype" % (names[0], ts[0].dtype, n, t.dtype))


def _check_heads(fn, q, k, v, qn="q", kn="k", vn="v"):
    """head_dim and head counts of q [.., heads_q, d], k and v [.., heads_kv, d]."""
    d = q.shape[-1]
    if d not in kt.HEAD_DIMS:
        _fail(fn, "headdim %d is not one kiln generates; valid: a multiple of 8 from 8 to 256" % d)
    if k.shape[-1] != d or v.shape[-1] != d:
        _fail(fn, "%s has headdim %d, %s %d and %s %d; they must be equal" % (qn, d, kn, k.shape[-1], vn, v.shape[-1]))
    if tuple(k.shape) != tuple(v.shape):
        _fail(fn, "%s %s and %s %s must have the same shape" % (kn, list(k.shape), vn, list(v.shape)))
    hq, hkv = q.shape[-2], k.shape[-2]
    if hkv == 0 or hq % hkv:
        _fail(fn, "the number of heads in %s (%d) must be a multiple of that in %s (%d)" % (qn, hq, kn, hkv))


def _check_grad(fn, d, ts):
    if d not in kt.BACKWARD_HEAD_DIMS and torch.is_grad_enabled() and any(t.requires_grad for t in ts):
        _fail(fn, "headdim %d has kiln's forward but not its backward yet; the backward takes %s (or run under "
                  "torch.no_grad())" % (d, ", ".join(map(str, kt.BACKWARD_HEAD_DIMS))))


def _is_int(x):
    return isinstance(x, int) and not isinstance(x, bool)


def _options(fn, q, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, batch):
    """(scale, causal, window_left, window_right, softcap, alibi_slopes) from FlashAttention's arguments, checked."""
    try:
        p = float(dropout_p)
    except (TypeError, ValueError):
        p = float("nan")
    if p != 0.0:
        _fail(fn, "dropout_p=%r: kiln's attention has no dropout yet (its dropout kernel is not built); pass "
                  "dropout_p=0.0" % (dropout_p,))
    if softmax_scale is None:
        scale = q.shape[-1] ** -0.5
    else:
        try:
            scale = float(softmax_scale)
        except (TypeError, ValueError):
            scale = float("nan")
        if not math.isfinite(scale):
            _fail(fn, "softmax_scale=%r; valid: None (1 / sqrt(headdim)) or a finite number" % (softmax_scale,))
    if not isinstance(causal, bool):
        _fail(fn, "causal=%r; valid: True (bottom-right aligned), False" % (causal,))
    if (not isinstance(window_size, (tuple, list)) or len(window_size) != 2
            or not all(_is_int(w) and w >= -1 for w in window_size)):
        _fail(fn, "window_size=%r; valid: (left, right), each an int >= -1 (-1: unbounded; (-1, -1): no window)"
                  % (window_size,))
    try:
        cap = 0.0 if softcap is None else float(softcap)
    except (TypeError, ValueError):
        cap = float("nan")
    if not (cap >= 0) or cap == math.inf:
        _fail(fn, "softcap=%r; valid: 0.0 or None (off) or a finite number > 0" % (softcap,))
    hq = q.shape[-2]
    if alibi_slopes is not None:
        if not isinstance(alibi_slopes, torch.Tensor) or alibi_slopes.dtype != torch.float32:
            _fail(fn, "alibi_slopes must be a torch.float32 tensor (nheads,) or (batch_size, nheads), got %s"
                      % getattr(alibi_slopes, "dtype", type(alibi_slopes).__name__))
        if tuple(alibi_slopes.shape) not in ((hq,), (batch, hq)):
            _fail(fn, "alibi_slopes has shape %s; valid: (nheads,) = (%d,) or (batch_size, nheads) = (%d, %d)"
                      % (list(alibi_slopes.shape), hq, batch, hq))
        if alibi_slopes.device != q.device:
            _fail(fn, "alibi_slopes is on %s and q on %s" % (alibi_slopes.device, q.device))
        alibi_slopes = alibi_slopes.contiguous()
    return scale, causal, int(window_size[0]), int(window_size[1]), cap, alibi_slopes


def _dense(fn, q, k, v, opts, deterministic):
    """out, lse of the dense op for checked [batch, seqlen, nheads, headdim] tensors."""
    if not isinstance(deterministic, bool):
        _fail(fn, "deterministic=%r; valid: True, False" % (deterministic,))
    _check_grad(fn, q.shape[-1], (q, k, v))
    scale, causal, wl, wr, cap, slopes = opts
    return _flash_attention(q, k, v, slopes, causal, wl, wr, cap, scale, deterministic)


def _returns(fn, out, lse, return_attn_probs):
    if not isinstance(return_attn_probs, bool):
        _fail(fn, "return_attn_probs=%r; valid: True, False" % (return_attn_probs,))
    # S_dmask: FlashAttention's debugging output (the softmax with the dropout pattern, "for testing only"); kiln's
    # kernels never form the attention matrix, so it is None.
    return (out, lse.detach(), None) if return_attn_probs else out


# ---- the batch functions ----


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                    alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """FlashAttention-2's flash_attn_func on kiln: q (batch_size, seqlen_q, nheads, headdim), k and v (batch_size,
    seqlen_k, nheads_k, headdim) with nheads a multiple of nheads_k (MQA/GQA); causal bottom-right aligned; query i
    sees keys in [i + seqlen_k - seqlen_q - window_size[0], i + seqlen_k - seqlen_q + window_size[1]]; softcap > 0:
    scores become softcap * tanh(score / softcap); alibi_slopes fp32 (nheads,) or (batch_size, nheads). Returns out
    (batch_size, seqlen_q, nheads, headdim), or with return_attn_probs=True (out, softmax_lse (batch_size, nheads,
    seqlen_q), None): kiln never forms the attention matrix, so S_dmask is None. Rows that see no key give 0."""
    fn = "flash_attn_func"
    _check_tensors(fn, "qkv", (q, k, v), 4, "(batch_size, seqlen, nheads, headdim)")
    _check_heads(fn, q, k, v)
    if k.shape[0] != q.shape[0]:
        _fail(fn, "q has batch_size %d and k %d" % (q.shape[0], k.shape[0]))
    opts = _options(fn, q, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, q.shape[0])
    out, lse = _dense(fn, q, k, v, opts, deterministic)
    return _returns(fn, out, lse, return_attn_probs)


def flash_attn_qkvpacked_func(qkv, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                              softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """flash_attn_func with qkv (batch_size, seqlen, 3, nheads, headdim) (q, k, v read in place: kiln takes strided
    tensors); returns as flash_attn_func."""
    fn = "flash_attn_qkvpacked_func"
    _check_tensors(fn, ("qkv",), (qkv,), 5, "(batch_size, seqlen, 3, nheads, headdim)")
    if qkv.shape[2] != 3:
        _fail(fn, "qkv must be (batch_size, seqlen, 3, nheads, headdim), got shape %s" % list(qkv.shape))
    q, k, v = qkv.unbind(2)
    _check_heads(fn, q, k, v)
    opts = _options(fn, q, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, q.shape[0])
    out, lse = _dense(fn, q, k, v, opts, deterministic)
    return _returns(fn, out, lse, return_attn_probs)


def flash_attn_kvpacked_func(q, kv, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                             softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """flash_attn_func with kv (batch_size, seqlen_k, 2, nheads_k, headdim); returns as flash_attn_func."""
    fn = "flash_attn_kvpacked_func"
    _check_tensors(fn, ("q",), (q,), 4, "(batch_size, seqlen_q, nheads, headdim)")
    _check_tensors(fn, ("q", "kv"), (q, kv), None, "")
    if kv.dim() != 5 or kv.shape[2] != 2:
        _fail(fn, "kv must be (batch_size, seqlen_k, 2, nheads_k, headdim), got shape %s" % list(kv.shape))
    k, v = kv.unbind(2)
    _check_heads(fn, q, k, v, kn="kv", vn="kv")
    if k.shape[0] != q.shape[0]:
        _fail(fn, "q has batch_size %d and kv %d" % (q.shape[0], k.shape[0]))
    opts = _options(fn, q, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, q.shape[0])
    out, lse = _dense(fn, q, k, v, opts, deterministic)
    return _returns(fn, out, lse, return_attn_probs)


# ---- varlen: the composite path (one dense launch per sequence) ----


def _cu_lengths(fn, name, cu, total, max_seqlen, max_name):
    """The sequence bounds of cumulative lengths `cu` (int32 (batch_size + 1,)), checked against the packed tensor's
    `total` rows and `max_seqlen` (read to the host: the composite path launches per sequence)."""
    if not isinstance(cu, torch.Tensor) or cu.dim() != 1 or cu.shape[0] < 1 or cu.dtype not in (torch.int32,
                                                                                                  torch.int64):
        _fail(fn, "%s must be an int32 tensor (batch_size + 1,), got %s" % (
            name, "%s %s" % (cu.dtype, list(cu.shape)) if isinstance(cu, torch.Tensor) else type(cu).__name__))
    bounds = [int(x) for x in cu.tolist()]
    if bounds[0] != 0 or any(b > a for a, b in zip(bounds[1:], bounds)) or bounds[-1] > total:
        _fail(fn, "%s=%s must start at 0, never decrease and end at most at the packed length %d"
                  % (name, bounds, total))
    if not _is_int(max_seqlen) or max_seqlen < 0:
        _fail(fn, "%s=%r; valid: an int >= 0" % (max_name, max_seqlen))
    longest = max((b - a for a, b in zip(bounds, bounds[1:])), default=0)
    if longest > max_seqlen:
        _fail(fn, "%s=%d is less than the longest sequence in %s (%d)" % (max_name, max_seqlen, name, longest))
    return bounds


def _paged(fn, block_table, k_cache, batch):
    """Checks a paged cache (num_blocks, page_block_size, nheads_k, headdim) and its int32 block_table (batch_size,
    max_num_blocks_per_seq); returns the table on the host."""
    if not isinstance(block_table, torch.Tensor) or block_table.dim() != 2 or block_table.dtype not in (
            torch.int32, torch.int64) or block_table.shape[0] != batch:
        _fail(fn, "block_table must be an int32 tensor (batch_size=%d, max_num_blocks_per_seq), got %s" % (
            batch, "%s %s" % (block_table.dtype, list(block_table.shape)) if isinstance(block_table, torch.Tensor)
            else type(block_table).__name__))
    table = block_table.tolist()
    nb = k_cache.shape[0]
    if any(p < 0 or p >= nb for row in table for p in row):
        _fail(fn, "block_table holds a block outside 0..%d (the cache has %d blocks)" % (nb - 1, nb))
    return table


def _gather_pages(cache, pages, length):
    """The first `length` positions of a sequence stored in `pages` of a paged cache, as (length, nheads_k, d)."""
    ps = cache.shape[1]
    need = -(-length // ps)
    idx = torch.tensor(pages[:need], dtype=torch.long, device=cache.device)
    return cache.index_select(0, idx).reshape((need * ps,) + tuple(cache.shape[2:]))[:length]


def _varlen_forward(fn, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, opts, deterministic,
                    block_table=None):
    """out (total_q, nheads, headdim) and softmax_lse (nheads, total_q) of variable-length attention: the composite
    path, one dense kiln::flash_attention launch per sequence (causal and windows aligned per sequence, as
    FlashAttention's varlen kernel aligns them); with block_table, each sequence's keys are gathered from its pages.
    The one place kiln's varlen kernel (and its paged form) takes over. Rows past cu_seqlens_q[-1] are 0."""
    bq = _cu_lengths(fn, "cu_seqlens_q", cu_seqlens_q, q.shape[0], max_seqlen_q, "max_seqlen_q")
    batch = len(bq) - 1
    if block_table is None:
        bk = _cu_lengths(fn, "cu_seqlens_k", cu_seqlens_k, k.shape[0], max_seqlen_k, "max_seqlen_k")
        table = None
    else:
        table = _paged(fn, block_table, k, batch)
        cap = block_table.shape[1] * k.shape[1]
        bk = _cu_lengths(fn, "cu_seqlens_k", cu_seqlens_k, batch * cap, max_seqlen_k, "max_seqlen_k")
        if any(b - a > cap for a, b in zip(bk, bk[1:])):
            _fail(fn, "cu_seqlens_k holds a sequence longer than block_table's %d blocks of %d" % (
                block_table.shape[1], k.shape[1]))
    if len(bk) - 1 != batch:
        _fail(fn, "cu_seqlens_q has %d sequences and cu_seqlens_k %d" % (batch, len(bk) - 1))
    scale, causal, wl, wr, cap, slopes = opts
    if slopes is not None and slopes.dim() == 2 and slopes.shape[0] != batch:
        _fail(fn, "alibi_slopes has %d rows for %d sequences" % (slopes.shape[0], batch))
    _check_grad(fn, q.shape[-1], (q, k, v))
    outs, lses = [], []
    for i in range(batch):
        lq = bq[i + 1] - bq[i]
        if lq == 0:
            continue
        qi = q[bq[i]:bq[i + 1]].unsqueeze(0)
        if table is None:
            ki, vi = k[bk[i]:bk[i + 1]].unsqueeze(0), v[bk[i]:bk[i + 1]].unsqueeze(0)
        else:
            lk = bk[i + 1] - bk[i]
            ki, vi = (_gather_pages(c, table[i], lk).unsqueeze(0) for c in (k, v))
        si = slopes if slopes is None or slopes.dim() == 1 else slopes[i]
        o, lse = _flash_attention(qi, ki, vi, si, causal, wl, wr, cap, scale, deterministic)
        outs.append(o[0])
        lses.append(lse[0])
    pad = q.shape[0] - bq[-1]
    if pad:
        outs.append(q.new_zeros((pad,) + tuple(q.shape[1:])))
        lses.append(torch.full((q.shape[1], pad), math.inf, dtype=torch.float32, device=q.device))
    if not outs:
        return q.new_zeros(q.shape), torch.empty((q.shape[1], 0), dtype=torch.float32, device=q.device)
    return torch.cat(outs, 0), torch.cat(lses, 1)


def _varlen(fn, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale, causal,
            window_size, softcap, alibi_slopes, deterministic, return_attn_probs, block_table=None, kn="k", vn="v"):
    paged = block_table is not None
    _check_tensors(fn, ("q",), (q,), 3, "(total_q, nheads, headdim)")
    layout = "(num_blocks, page_block_size, nheads_k, headdim) with block_table" if paged else \
        "(total_k, nheads_k, headdim)"
    _check_tensors(fn, (kn, vn), (k, v), 4 if paged else 3, layout)
    _check_tensors(fn, ("q", kn, vn), (q, k, v), None, "")
    _check_heads(fn, q, k, v, kn=kn, vn=vn)
    if not isinstance(deterministic, bool):
        _fail(fn, "deterministic=%r; valid: True, False" % (deterministic,))
    batch = cu_seqlens_q.shape[0] - 1 if isinstance(cu_seqlens_q, torch.Tensor) and cu_seqlens_q.dim() == 1 else 0
    opts = _options(fn, q, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, batch)
    out, lse = _varlen_forward(fn, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, opts,
                               deterministic, block_table)
    return _returns(fn, out, lse, return_attn_probs)


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                           softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                           deterministic=False, return_attn_probs=False, block_table=None):
    """FlashAttention-2's flash_attn_varlen_func on kiln: q (total_q, nheads, headdim), k and v (total_k, nheads_k,
    headdim), or with block_table (batch_size, max_num_blocks_per_seq) int32 paged caches (num_blocks,
    page_block_size, nheads_k, headdim); cu_seqlens_q/k int32 (batch_size + 1,); causal and window aligned per
    sequence (bottom-right). Returns out (total_q, nheads, headdim), or (out, softmax_lse (nheads, total_q), None)
    with return_attn_probs. Runs the composite path (one dense launch per sequence, lengths read to the host)."""
    return _varlen("flash_attn_varlen_func", q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                   dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
                   return_attn_probs, block_table)


def flash_attn_varlen_qkvpacked_func(qkv, cu_seqlens, max_seqlen, dropout_p=0.0, softmax_scale=None, causal=False,
                                     window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
                                     return_attn_probs=False):
    """flash_attn_varlen_func with qkv (total, 3, nheads, headdim) and one cu_seqlens / max_seqlen."""
    fn = "flash_attn_varlen_qkvpacked_func"
    _check_tensors(fn, ("qkv",), (qkv,), 4, "(total, 3, nheads, headdim)")
    if qkv.shape[1] != 3:
        _fail(fn, "qkv must be (total, 3, nheads, headdim), got shape %s" % list(qkv.shape))
    q, k, v = qkv.unbind(1)
    return _varlen(fn, q, k, v, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen, dropout_p, softmax_scale, causal,
                   window_size, softcap, alibi_slopes, deterministic, return_attn_probs, kn="qkv", vn="qkv")


def flash_attn_varlen_kvpacked_func(q, kv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                                    softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                                    alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """flash_attn_varlen_func with kv (total_k, 2, nheads_k, headdim)."""
    fn = "flash_attn_varlen_kvpacked_func"
    _check_tensors(fn, ("kv",), (kv,), 4, "(total_k, 2, nheads_k, headdim)")
    if kv.shape[1] != 2:
        _fail(fn, "kv must be (total_k, 2, nheads_k, headdim), got shape %s" % list(kv.shape))
    k, v = kv.unbind(1)
    return _varlen(fn, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale,
                   causal, window_size, softcap, alibi_slopes, deterministic, return_attn_probs, kn="kv", vn="kv")


# ---- KV cache: the composite path (append and rotary by tensor writes and kiln's rotary op, then attention) ----


def _kvcache_forward(fn, q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, seqlens, batch_idx, table, opts,
                     rotary_interleaved, leftpads=None):
    """out (batch_size, seqlen_q, nheads, headdim) and softmax_lse (batch_size, nheads, seqlen_q) of decoding
    against a KV cache: the composite path. New keys k (rotated by kiln's rotary op at positions cache_seqlens + s
    when rotary_cos is given; q too, at the same positions when causal or windowed, else all at cache_seqlens)
    are written into k_cache / v_cache in place (through `table`'s pages when paged), then each sequence attends
    to its cache_seqlens + seqlen_new keys with one dense launch (one launch for the batch when every sequence has
    the same length and the cache is dense and in batch order). The one place kiln's paged/append kernels take
    over. seqlens, batch_idx, table, leftpads: host lists. With cache_leftpad, sequence i's keys are cache positions
    leftpads[i] .. seqlens[i] + seqlen_new - 1 and its positions count from leftpads[i] (the rotary's too)."""
    scale, causal, wl, wr, cap, slopes = opts
    b, sq = q.shape[0], q.shape[1]
    sn = k.shape[1] if k is not None else 0
    leftpads = leftpads or [0] * b
    if k is not None and rotary_cos is not None:
        offs = torch.tensor([s - lp for s, lp in zip(seqlens, leftpads)], dtype=torch.int32, device=q.device)
        k = kt.apply_rotary_emb(k, rotary_cos, rotary_sin, interleaved=rotary_interleaved, seqlen_offsets=offs)
        if causal or (wl, wr) != (-1, -1):
            q = kt.apply_rotary_emb(q, rotary_cos, rotary_sin, interleaved=rotary_interleaved, seqlen_offsets=offs)
        else:  # every query at position cache_seqlens: one position per batch, the queries as extra heads
            q = kt.apply_rotary_emb(q.reshape(b, 1, sq * q.shape[2], q.shape[3]), rotary_cos, rotary_sin,
                                    interleaved=rotary_interleaved, seqlen_offsets=offs).reshape(q.shape)
    lengths = [s + sn for s in seqlens]
    if k is not None:
        for i in range(b):
            if table is None:
                k_cache[batch_idx[i], seqlens[i]:lengths[i]] = k[i]
                v_cache[batch_idx[i], seqlens[i]:lengths[i]] = v[i]
            else:
                ps = k_cache.shape[1]
                pos = torch.arange(seqlens[i], lengths[i], device=q.device)
                pages = torch.tensor(table[i], dtype=torch.long, device=q.device)[pos // ps]
                k_cache[pages, pos % ps] = k[i]
                v_cache[pages, pos % ps] = v[i]
    if table is None and len(set(lengths)) == 1 and batch_idx == list(range(b)) and not any(leftpads):
        return _flash_attention(q, k_cache[:b, :lengths[0]], v_cache[:b, :lengths[0]], slopes, causal, wl, wr, cap,
                                scale, False)
    outs, lses = [], []
    for i in range(b):
        if table is None:
            ki, vi = k_cache[batch_idx[i], :lengths[i]], v_cache[batch_idx[i], :lengths[i]]
        else:
            ki, vi = (_gather_pages(c, table[i], lengths[i]) for c in (k_cache, v_cache))
        ki, vi = ki[leftpads[i]:], vi[leftpads[i]:]
        si = slopes if slopes is None or slopes.dim() == 1 else slopes[i]
        o, lse = _flash_attention(q[i:i + 1], ki.unsqueeze(0), vi.unsqueeze(0), si, causal, wl, wr, cap, scale,
                                  False)
        outs.append(o)
        lses.append(lse)
    return torch.cat(outs, 0), torch.cat(lses, 0)


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, rotary_cos=None, rotary_sin=None,
                            cache_seqlens=None, cache_batch_idx=None, cache_leftpad=None, block_table=None,
                            softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                            rotary_interleaved=True, alibi_slopes=None, num_splits=0, return_softmax_lse=False):
    """FlashAttention-2's flash_attn_with_kvcache on kiln: q (batch_size, seqlen, nheads, headdim); k_cache and
    v_cache (batch_size_cache, seqlen_cache, nheads_k, headdim), or with block_table (batch_size,
    max_num_blocks_per_seq) int32 paged (num_blocks, page_block_size, nheads_k, headdim); k, v (batch_size,
    seqlen_new, nheads_k, headdim) are appended in place at cache_seqlens (an int or int32 (batch_size,); None,
    only without k and v: the whole cache), rotated first by rotary_cos / rotary_sin (seqlen_ro, rotary_dim / 2)
    when given (FlashAttention applies the rotary only with k and v; interleaved by default, as there);
    cache_batch_idx picks cache rows; cache_leftpad (int32 (batch_size,)): each cache starts there (keys before it
    are not attended; positions, the rotary's included, count from it). num_splits is a hint FlashAttention's
    heuristics take; kiln's runtime picks its own split-KV count. No autograd, as in FlashAttention. Returns out,
    or (out, softmax_lse (batch_size, nheads, seqlen)) with return_softmax_lse. Runs the composite path (lengths
    read to the host)."""
    fn = "flash_attn_with_kvcache"
    paged = block_table is not None
    _check_tensors(fn, ("q",), (q,), 4, "(batch_size, seqlen, nheads, headdim)")
    _check_tensors(fn, ("q", "k_cache", "v_cache"), (q, k_cache, v_cache), 4,
                   "(num_blocks, page_block_size, nheads_k, headdim)" if paged else
                   "(batch_size_cache, seqlen_cache, nheads_k, headdim)")
    _check_heads(fn, q, k_cache, v_cache, kn="k_cache", vn="v_cache")
    if (k is None) != (v is None):
        _fail(fn, "k and v go together (the new keys and values to append), got only %s" % ("k" if v is None else "v"))
    b = q.shape[0]
    if k is not None:
        _check_tensors(fn, ("q", "k", "v"), (q, k, v), 4, "(batch_size, seqlen_new, nheads_k, headdim)")
        if tuple(k.shape) != tuple(v.shape) or k.shape[0] != b or tuple(k.shape[2:]) != tuple(k_cache.shape[2:]):
            _fail(fn, "k %s and v %s must be (batch_size=%d, seqlen_new, nheads_k=%d, headdim=%d)" % (
                list(k.shape), list(v.shape), b, k_cache.shape[2], k_cache.shape[3]))
    if (rotary_cos is None) != (rotary_sin is None):
        _fail(fn, "rotary_cos and rotary_sin go together")
    if rotary_cos is not None:
        for n, t in (("rotary_cos", rotary_cos), ("rotary_sin", rotary_sin)):
            if not isinstance(t, torch.Tensor) or t.dim() != 2 or 2 * t.shape[1] > q.shape[-1] or t.shape[1] == 0:
                _fail(fn, "%s must be (seqlen_ro, rotary_dim / 2) with rotary_dim <= headdim (%d), got %s" % (
                    n, q.shape[-1], list(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__))
    if not isinstance(rotary_interleaved, bool):
        _fail(fn, "rotary_interleaved=%r; valid: True, False" % (rotary_interleaved,))
    if not _is_int(num_splits) or num_splits < 0:
        _fail(fn, "num_splits=%r; valid: an int >= 0 (0: automatic)" % (num_splits,))
    if not isinstance(return_softmax_lse, bool):
        _fail(fn, "return_softmax_lse=%r; valid: True, False" % (return_softmax_lse,))
    opts = _options(fn, q, 0.0, softmax_scale, causal, window_size, softcap, alibi_slopes, b)
    if paged:
        if cache_batch_idx is not None:
            _fail(fn, "cache_batch_idx does not go with block_table (the table already names each sequence's blocks)")
        table = _paged(fn, block_table, k_cache, b)
        capacity = block_table.shape[1] * k_cache.shape[1]
        batch_idx = list(range(b))
    else:
        table, capacity = None, k_cache.shape[1]
        if cache_batch_idx is None:
            if k_cache.shape[0] < b:
                _fail(fn, "k_cache has %d sequences for batch_size %d (pass cache_batch_idx to pick them)"
                          % (k_cache.shape[0], b))
            batch_idx = list(range(b))
        else:
            if not isinstance(cache_batch_idx, torch.Tensor) or tuple(cache_batch_idx.shape) != (b,):
                _fail(fn, "cache_batch_idx must be an int32 tensor (batch_size=%d,)" % b)
            batch_idx = [int(x) for x in cache_batch_idx.tolist()]
            if any(x < 0 or x >= k_cache.shape[0] for x in batch_idx):
                _fail(fn, "cache_batch_idx=%s holds an index outside 0..%d" % (batch_idx, k_cache.shape[0] - 1))
    if cache_seqlens is None:
        if k is not None:
            _fail(fn, "cache_seqlens is needed with k and v (it says where each sequence's new keys go)")
        seqlens = [capacity] * b
    elif _is_int(cache_seqlens):
        seqlens = [cache_seqlens] * b
    elif isinstance(cache_seqlens, torch.Tensor) and tuple(cache_seqlens.shape) == (b,):
        seqlens = [int(x) for x in cache_seqlens.tolist()]
    else:
        _fail(fn, "cache_seqlens=%r; valid: None, an int, or an int32 tensor (batch_size=%d,)" % (cache_seqlens, b))
    sn = k.shape[1] if k is not None else 0
    if any(s < 0 or s + sn > capacity for s in seqlens):
        _fail(fn, "cache_seqlens=%s plus seqlen_new=%d must stay within the cache's %d positions" % (
            seqlens, sn, capacity))
    leftpads = None
    if cache_leftpad is not None:
        if not isinstance(cache_leftpad, torch.Tensor) or tuple(cache_leftpad.shape) != (b,):
            _fail(fn, "cache_leftpad must be an int32 tensor (batch_size=%d,)" % b)
        leftpads = [int(x) for x in cache_leftpad.tolist()]
        if any(lp < 0 or lp > s for lp, s in zip(leftpads, seqlens)):
            _fail(fn, "cache_leftpad=%s must be 0 .. cache_seqlens=%s for each sequence" % (leftpads, seqlens))
    with torch.no_grad():
        out, lse = _kvcache_forward(fn, q, k_cache, v_cache, k, v, rotary_cos, rotary_sin, seqlens, batch_idx, table,
                                    opts, rotary_interleaved, leftpads)
    return (out, lse) if return_softmax_lse else out
