"""kiln._fa_varlen - kiln.flash_attn's custom ops on kiln's varlen and paged-KV-cache kernels:
kiln::flash_attention_varlen (one launch for packed sequences; autograd through
kiln::flash_attention_varlen_backward) and kiln::flash_attention_kvcache (the paged kernel with in-kernel append;
mutates the caches). Schemas, fake kernels and autograd as kiln::flash_attention's; CUDA tensors, or CPU tensors
inside kiln.torch.emulated()."""

from typing import Optional, Tuple

import torch

from . import torch as kt


def _contig_last(t):
    return t if t.stride(-1) == 1 else t.contiguous()


def _mask_keys(window_left, window_right, softcap, alibi_slopes):
    return dict(window=None if (window_left, window_right) == (-1, -1) else (window_left, window_right),
                softcap=softcap if softcap > 0 else None, alibi_slopes=alibi_slopes)


# ---- varlen: packed sequences in one launch ----


@torch.library.custom_op("kiln::flash_attention_varlen", mutates_args=())
def flash_attention_varlen(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor,
                           cu_seqlens_k: torch.Tensor, max_seqlen_q: int, max_seqlen_k: int,
                           alibi_slopes: Optional[torch.Tensor], causal: bool, window_left: int, window_right: int,
                           softcap: float, scale: float, deterministic: bool) -> Tuple[torch.Tensor, torch.Tensor]:
    # q [total_q, heads_q, d], k/v [total_k, heads_kv, d]; cu_seqlens int32 [batch + 1] from 0 to total_q / total_k
    # (kiln.flash_attn slices off rows past cu_seqlens[-1]). deterministic is the backward's choice (carried so
    # autograd sees it).
    rt = kt._backend("kiln::flash_attention_varlen", q)
    tq, hq, d = q.shape
    o = torch.empty((tq, hq, d), dtype=q.dtype, device=q.device)
    lse = torch.empty((hq, tq), dtype=torch.float32, device=q.device)
    if tq and cu_seqlens_q.shape[0] > 1:
        rt.attention_varlen(o, _contig_last(q), _contig_last(k), _contig_last(v), cu_seqlens_q.contiguous(),
                            cu_seqlens_k.contiguous(), max_seqlen_q, max_seqlen_k, lse=lse, causal=causal, scale=scale,
                            stream=kt._stream(q), **_mask_keys(window_left, window_right, softcap, alibi_slopes))
    return o, lse


@flash_attention_varlen.register_fake
def _varlen_fake(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, alibi_slopes, causal, window_left,
                 window_right, softcap, scale, deterministic):
    tq, hq, d = q.shape
    return q.new_empty((tq, hq, d)), q.new_empty((hq, tq), dtype=torch.float32)


@torch.library.custom_op("kiln::flash_attention_varlen_backward", mutates_args=())
def flash_attention_varlen_backward(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                                    o: torch.Tensor, lse: torch.Tensor, cu_seqlens_q: torch.Tensor,
                                    cu_seqlens_k: torch.Tensor, max_seqlen_q: int, max_seqlen_k: int,
                                    alibi_slopes: Optional[torch.Tensor], causal: bool, window_left: int,
                                    window_right: int, softcap: float, scale: float,
                                    deterministic: bool) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    rt = kt._backend("kiln::flash_attention_varlen_backward", q)
    # every row belongs to a sequence (cu_seqlens end at the totals): the kernels write each gradient row, keys no
    # query sees included (zeros)
    dq, dk, dv = (torch.empty(t.shape, dtype=t.dtype, device=t.device) for t in (q, k, v))
    if not (q.shape[0] and k.shape[0] and cu_seqlens_q.shape[0] > 1):  # nothing attends: sums over nothing
        return dq.zero_(), dk.zero_(), dv.zero_()
    args = dict(dq=dq, dk=dk, dv=dv, dout=_contig_last(do), q=_contig_last(q), k=_contig_last(k),
                v=_contig_last(v), o=_contig_last(o), lse=lse.contiguous(), cu_seqlens_q=cu_seqlens_q.contiguous(),
                cu_seqlens_k=cu_seqlens_k.contiguous(), max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k)
    mask = _mask_keys(window_left, window_right, softcap, alibi_slopes)
    nbytes = rt.attention_varlen_backward_workspace(causal=causal, deterministic=deterministic, **mask, **args)
    ws = torch.empty(((nbytes + 3) // 4,), dtype=torch.float32, device=q.device) if nbytes else None
    rt.attention_varlen_backward(causal=causal, scale=scale, deterministic=deterministic, workspace=ws,
                                 stream=kt._stream(q), **mask, **args)
    return dq, dk, dv


@flash_attention_varlen_backward.register_fake
def _varlen_backward_fake(do, q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, alibi_slopes,
                          causal, window_left, window_right, softcap, scale, deterministic):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _varlen_setup(ctx, inputs, output):
    q, k, v, cu_q, cu_k, max_q, max_k, alibi_slopes, causal, wl, wr, softcap, scale, deterministic = inputs
    o, lse = output
    ctx.save_for_backward(q, k, v, o, lse, cu_q, cu_k, alibi_slopes)
    ctx.keys = (max_q, max_k, causal, wl, wr, softcap, scale, deterministic)


def _varlen_grad(ctx, do, _dlse):
    # lse is auxiliary (returned detached by kiln.flash_attn), as in FlashAttention
    q, k, v, o, lse, cu_q, cu_k, alibi_slopes = ctx.saved_tensors
    max_q, max_k, causal, wl, wr, softcap, scale, deterministic = ctx.keys
    dq, dk, dv = flash_attention_varlen_backward(do, q, k, v, o, lse, cu_q, cu_k, max_q, max_k, alibi_slopes, causal,
                                                 wl, wr, softcap, scale, deterministic or kt._deterministic())
    return dq, dk, dv, None, None, None, None, None, None, None, None, None, None, None


flash_attention_varlen.register_autograd(_varlen_grad, setup_context=_varlen_setup)


# ---- paged KV cache with in-kernel append ----


@torch.library.custom_op("kiln::flash_attention_kvcache", mutates_args=("k_cache", "v_cache"))
def flash_attention_kvcache(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, k: Optional[torch.Tensor],
                            v: Optional[torch.Tensor], block_table: torch.Tensor, cache_seqlens: torch.Tensor,
                            cache_batch_idx: Optional[torch.Tensor], cache_leftpad: Optional[torch.Tensor],
                            alibi_slopes: Optional[torch.Tensor], causal: bool, window_left: int, window_right: int,
                            softcap: float, scale: float, seq_k: int, num_splits: int,
                            rotary_cos: Optional[torch.Tensor] = None, rotary_sin: Optional[torch.Tensor] = None,
                            rotary_interleaved: bool = False) -> Tuple[torch.Tensor, torch.Tensor]:
    # q [batch, seq_q, heads_q, d]; caches pages [num_blocks, page_size, heads_kv, d]; block_table int32 [batch,
    # max_blocks]; k/v (or None) [batch, seqlen_new, heads_kv, d] written into the pages at cache_seqlens (not
    # advanced). seq_k: the longest key count an entry sees (the split-KV choice); num_splits as the runtime's splits.
    # rotary_cos / rotary_sin [seqlen_ro, rotary_dim / 2] (with k): the kernel rotates q and k (rotary=interleaved
    # with rotary_interleaved, else neox).
    rt = kt._backend("kiln::flash_attention_kvcache", q)
    b, sq, hq, d = q.shape
    o = torch.empty((b, sq, hq, d), dtype=q.dtype, device=q.device)
    lse = torch.empty((b, hq, sq), dtype=torch.float32, device=q.device)
    if b and sq:
        args = dict(block_table=block_table.contiguous(), cache_seqlens=cache_seqlens.contiguous(),
                    cache_batch_idx=None if cache_batch_idx is None else cache_batch_idx.contiguous(),
                    cache_leftpad=None if cache_leftpad is None else cache_leftpad.contiguous(),
                    k_new=None if k is None else _contig_last(k), v_new=None if v is None else _contig_last(v),
                    seq_k=seq_k, lse=lse, causal=causal,
                    **_mask_keys(window_left, window_right, softcap, alibi_slopes))
        if rotary_cos is not None:  # the kernel reads the tables in 16-byte rows: contiguous, 16-byte aligned
            cos, sin = (t.contiguous() for t in (rotary_cos, rotary_sin))
            cos, sin = (t.clone() if t.data_ptr() % 16 else t for t in (cos, sin))
            args.update(rotary="interleaved" if rotary_interleaved else "neox", rotary_cos=cos, rotary_sin=sin)
        qs = _contig_last(q)
        _splits, need = rt.attention_kvcache_workspace(o, qs, k_cache, v_cache, splits=num_splits, **args)
        ws = torch.empty(((need + 3) // 4,), dtype=torch.float32, device=q.device) if need else None
        rt.attention_kvcache(o, qs, k_cache, v_cache, scale=scale, stream=kt._stream(q), splits=num_splits,
                             workspace=ws, **args)
    return o, lse


@flash_attention_kvcache.register_fake
def _kvcache_fake(q, k_cache, v_cache, k, v, block_table, cache_seqlens, cache_batch_idx, cache_leftpad, alibi_slopes,
                  causal, window_left, window_right, softcap, scale, seq_k, num_splits, rotary_cos=None,
                  rotary_sin=None, rotary_interleaved=False):
    b, sq, hq, d = q.shape
    return q.new_empty((b, sq, hq, d)), q.new_empty((b, hq, sq), dtype=torch.float32)


# ---- which calls the paged kernel takes ----

def page_fits(page_size):
    """Whether the paged kernels take pages of page_size rows whatever their key tile (a power of two from 16 to
    128, docs/attention.md): >= 16 and a power of two (a divisor or a multiple of any such tile) or a multiple of
    128. Others run kiln.flash_attn's composite path."""
    return page_size >= 16 and (page_size & (page_size - 1) == 0 or page_size % 128 == 0)


def dense_as_pages(cache):
    """A dense cache (batch_size_cache, seqlen_cache, nheads_k, headdim) as pages (num_blocks, page_size, nheads_k,
    headdim) sharing its memory and the block_table int32 (batch_size_cache, seqlen_cache / page_size) that lists
    each row's pages in order; None when the rows are not evenly strided or no page size fits."""
    bc, s = cache.shape[0], cache.shape[1]
    if s == 0 or (bc > 1 and cache.stride(0) != s * cache.stride(1)):
        return None
    page = s & -s  # the largest power of two dividing seqlen_cache
    if s % 128 == 0:
        page = s
    while page > 1024 and page % 2 == 0 and (s // page) * page == s:
        page //= 2  # pages of at most 1024 rows (the table grows, the kernel does not care)
    if not page_fits(page):
        return None
    pages = cache.as_strided((bc * s // page, page) + tuple(cache.shape[2:]),
                             (page * cache.stride(1), cache.stride(1), cache.stride(2), cache.stride(3)))
    table = torch.arange(bc * s // page, dtype=torch.int32, device=cache.device).reshape(bc, s // page)
    return pages, table
