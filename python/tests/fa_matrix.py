"""python/tests/fa_matrix.py - FlashAttention-2's own test matrix (tests/test_flash_attn.py of
Dao-AILab/flash-attention: its shapes, head dims, dtypes and causal/window/softcap/ALiBi/dropout/varlen/KV-cache
combinations) rebuilt for kiln.flash_attn, with checks against float64 torch. test_torch_fa_matrix.py runs it: the whole
matrix (or a fixed sample) on a CUDA GPU in the GPU kit's torch step, a small slice on the CPU under
kiln.torch.emulated().

The yardstick is FlashAttention's: kiln's largest error against the float64 reference must stay within FACTOR times the
error of the same attention computed by torch in the input dtype (the "pt" reference), plus 1e-5. Dropout masks are
read back from kiln itself (q = 0 and one-hot V blocks under the same torch seed: the Philox mask depends only on the
seed, offset and indices), so the reference applies the very mask the kernel used."""

import itertools
import math

import torch

# ---- the matrix (facts from FlashAttention-2's tests) ----

DTYPES = (torch.float16, torch.bfloat16)
HEAD_DIMS = (32, 40, 59, 64, 96, 111, 128, 160, 192, 224, 256)  # 59 and 111: kiln refuses them (not multiples of 8)
SEQLENS = ((113, 203), (128, 217), (113, 211), (108, 256), (256, 512), (512, 256), (1024, 1024), (1023, 1024),
           (1024, 1023), (2048, 2048))
VARLEN_SEQLENS = ((1, 147),) + SEQLENS
MHA_TYPES = {"mha": 1, "gqa": 3, "mqa": 9}  # nheads 9 over nheads_k 9, 3, 1
NHEADS, BATCH = 9, 4
DROPOUT = (0.0, 0.17)
SOFTCAP = (0.0, 50.0)
KVCACHE_SEQLENS = ((1, 128), (1, 339), (3, 1024), (64, 800), (64, 256), (3, 799), (64, 2048), (16, 20000),
                   (1, 128 * 1024), (16, 128 * 1024), (128, 128))
KVCACHE_HEAD_DIMS = (32, 59, 64, 80, 128, 256)
PAGE_SIZES = (None, 256)
ROTARY_FRACTIONS = (0.0, 0.5, 1.0)

# error factors over torch's own low-precision error (FlashAttention's: 2 forward and backward, 3 with a KV cache)
FACTOR = {"out": 2.0, "grad": 3.0, "kvcache": 3.0}


def dense_cases():
    """Every dense / varlen case: (dtype, d, (seqlen_q, seqlen_k), mha_type, causal, local, softcap, alibi,
    dropout_p, deterministic, varlen)."""
    return list(itertools.product(DTYPES, HEAD_DIMS, SEQLENS, MHA_TYPES, (False, True), (False, True), SOFTCAP,
                                  (False, True), DROPOUT, (False, True), (False, True)))


def kvcache_cases():
    """Every KV-cache case: (dtype, d, (seqlen_q, seqlen_k), mha_type, causal, local, alibi, page_size, leftpad,
    batch_idx, new_kv, rotary_fraction, rotary_interleaved, num_splits)."""
    return list(itertools.product(DTYPES, KVCACHE_HEAD_DIMS, KVCACHE_SEQLENS, MHA_TYPES, (False, True), (False, True),
                                  (False, True), PAGE_SIZES, (False, True), (False, True), (False, True),
                                  ROTARY_FRACTIONS, (False, True), (1, 0)))


def sample(cases, n, seed=0):
    """A fixed sample of n cases (the same every run), the whole list when n >= its length."""
    if n >= len(cases):
        return cases
    g = torch.Generator().manual_seed(seed)
    return [cases[i] for i in sorted(torch.randperm(len(cases), generator=g)[:n].tolist())]


# ---- references ----


def reference(q, k, v, causal=False, window=(-1, -1), softcap=0.0, alibi=None, keep=None, p=0.0, dtype=None):
    """FlashAttention's attention: q (b, sq, hq, d), k/v (b, sk, hkv, d), causal and window bottom-right aligned,
    softcap, ALiBi slopes (hq,) or (b, hq), dropout keep mask (b, hq, sq, sk) scaled by 1 / (1 - p); computed in
    `dtype` (float64 for the reference, the inputs' dtype for torch's low-precision yardstick). Rows that see no key
    give 0."""
    dtype = dtype or torch.float64
    q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
    b, sq, hq, d = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    k, v = k.repeat_interleave(hq // hkv, 2), v.repeat_interleave(hq // hkv, 2)
    s = torch.einsum("bqhd,bkhd->bhqk", q, k * (d ** -0.5))
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    rel = (torch.arange(sq, device=q.device).view(sq, 1) + sk - sq - torch.arange(sk, device=q.device).view(1, sk))
    if alibi is not None:
        sl = alibi.to(dtype).view(-1, hq, 1, 1)
        s = s - sl * rel.abs().to(dtype)
    ok = torch.ones(sq, sk, dtype=torch.bool, device=q.device)
    if causal:
        ok &= rel >= 0
    if window[0] >= 0:
        ok &= rel <= window[0]
    if window[1] >= 0:
        ok &= rel >= -window[1]
    s = s.masked_fill(~ok, -math.inf)
    pr = torch.softmax(s.float() if dtype != torch.float64 else s, -1).to(dtype).nan_to_num(0.0)
    if keep is not None:
        pr = pr.masked_fill(~keep, 0.0) / (1 - p)
    return torch.einsum("bhqk,bkhd->bqhd", pr, v)


def rotate(x, cos, sin, pos, interleaved):
    """FlashAttention's apply_rotary_emb in float64: x (..., s, h, d) at positions pos (s,) (or (b, s) for x (b, s,
    h, d)); cos/sin (seqlen_ro, rotary_dim / 2)."""
    x = x.double()
    r = cos.shape[1]
    c, s = cos.double()[pos].unsqueeze(-2), sin.double()[pos].unsqueeze(-2)
    xr, rest = x[..., :2 * r], x[..., 2 * r:]
    if interleaved:
        x1, x2 = xr[..., 0::2], xr[..., 1::2]
        y = torch.stack([x1 * c - x2 * s, x1 * s + x2 * c], -1).flatten(-2)
    else:
        x1, x2 = xr[..., :r], xr[..., r:]
        y = torch.cat([x1 * c - x2 * s, x1 * s + x2 * c], -1)
    return torch.cat([y, rest], -1)


def err(a, b):
    return (a.double() - b.double()).abs().max().item() if a.numel() else 0.0


def within(what, got, ref64, pt, factor):
    """FlashAttention's rule: |kiln - float64| <= factor |torch low precision - float64| + 1e-5 (max over elements);
    AssertionError naming the figures otherwise."""
    e, e_pt = err(got, ref64), err(pt, ref64)
    assert e <= factor * e_pt + 1e-5, "%s: kiln's error %.3g > %.1f x torch's %.3g + 1e-5" % (what, e, factor, e_pt)
    return e, e_pt


def dropout_keep(run, q, k, v, p, seed):
    """The keep mask kiln's dropout applies in run(q, k, v, dropout_p) under torch.manual_seed(seed): q = 0 makes every
    probability 1 / seqlen_k (no causal/window/ALiBi in run), V's one-hot rows read each key's kept probability back.
    q (..., sq, hq, d), k/v (..., sk, hkv, d) with any leading axes; returns (..., hq, sq, sk) bool."""
    sk, d = k.shape[-3], k.shape[-1]
    zero_q = torch.zeros_like(q)
    blocks = []
    for j0 in range(0, sk, d):
        n = min(d, sk - j0)
        onehot = torch.zeros_like(v)
        idx = torch.arange(n, device=v.device)
        onehot[..., j0 + idx, :, idx] = 1
        torch.manual_seed(seed)
        with torch.no_grad():
            out = run(zero_q, k, onehot, p)
        blocks.append(out[..., :n] != 0)  # (..., sq, hq, n)
    return torch.cat(blocks, -1).transpose(-3, -2)  # (..., hq, sq, sk)
