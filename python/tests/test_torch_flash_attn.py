"""kiln.flash_attn against float64 torch on CPU, inside kiln.torch.emulated(): every function of FlashAttention-2's
interface (dense, packed, varlen with and without a paged cache, KV cache with append and rotary), forward and
backward, gradcheck, the composite varlen/KV-cache paths against per-sequence references, and the argument errors.
Skipped where torch is not installed. Shapes stay small: the emulator runs every CUDA thread as a fiber."""

import math
import re
import warnings

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (make setup installs the pinned one)")
if not hasattr(torch.library, "custom_op"):
    pytest.skip("kiln.torch needs torch >= 2.4 (torch.library.custom_op)", allow_module_level=True)

import kiln  # noqa: E402
import kiln.flash_attn as fa  # noqa: E402
import kiln.torch as kt  # noqa: E402
from kiln.flash_attn import flash_attn_func  # noqa: E402,F401  (the drop-in import form)
import fa_matrix as M  # noqa: E402

TOL = {torch.float32: 2e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}


def ref_attention(q, k, v, causal=False, window=(-1, -1), softcap=0.0, alibi=None, scale=None):
    """FlashAttention's definition in float64: q (b, sq, hq, d), k/v (b, sk, hkv, d); causal and window bottom-right
    aligned; rows that see no key give out 0 and lse +inf. Returns (out, lse (b, hq, sq))."""
    q, k, v = q.double(), k.double(), v.double()
    b, sq, hq, d = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    k = k.repeat_interleave(hq // hkv, dim=2)
    v = v.repeat_interleave(hq // hkv, dim=2)
    scale = d ** -0.5 if scale is None else scale
    s = torch.einsum("bqhd,bkhd->bhqk", q, k) * scale
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    i = torch.arange(sq).view(sq, 1)
    j = torch.arange(sk).view(1, sk)
    rel = i + sk - sq - j  # >= 0: key at or before the query's diagonal
    if alibi is not None:
        sl = alibi.double().view(-1, hq) if alibi.dim() == 2 else alibi.double().view(1, hq)
        s = s - sl.view(sl.shape[0], hq, 1, 1) * rel.abs()
    ok = torch.ones(sq, sk, dtype=torch.bool)
    if causal:
        ok &= rel >= 0
    if window[0] >= 0:
        ok &= rel <= window[0]
    if window[1] >= 0:
        ok &= rel >= -window[1]
    s = s.masked_fill(~ok, -math.inf)
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - lse.unsqueeze(-1)).nan_to_num(0.0)
    out = torch.einsum("bhqk,bkhd->bqhd", p, v)
    return out, lse.masked_fill(torch.isneginf(lse), math.inf)


def _close(got, ref, dtype, what, scale=1.0):
    tol = TOL[dtype] * scale
    torch.testing.assert_close(got.double(), ref.detach().double(), rtol=tol, atol=tol * max(ref.abs().max().item(), 1),
                               msg=lambda m: "%s: %s" % (what, m))


def _qkv(b, sq, sk, hq, hkv, d, dtype, seed=0, grad=False):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, sq, hq, d, generator=g).to(dtype)
    k = torch.randn(b, sk, hkv, d, generator=g).to(dtype)
    v = torch.randn(b, sk, hkv, d, generator=g).to(dtype)
    return tuple(t.requires_grad_(grad) for t in (q, k, v))


# (causal, window, softcap, alibi): FlashAttention's modifiers, alone and together
CASES = [
    (False, (-1, -1), 0.0, False),
    (True, (-1, -1), 0.0, False),
    (True, (3, -1), 0.0, False),
    (False, (2, 1), 5.0, True),
]


@pytest.mark.parametrize("causal,window,softcap,alibi", CASES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_flash_attn_func_forward_and_backward_match_float64(emu, dtype, causal, window, softcap, alibi):
    """out, softmax_lse and dq/dk/dv against float64 torch, GQA (4 query heads on 2), seqlen_q != seqlen_k."""
    q, k, v = _qkv(2, 5, 7, 4, 2, 32, dtype, grad=True)
    slopes = torch.tensor([0.5, 0.25, 0.125, 0.0625]) if alibi else None
    out, lse, s_dmask = fa.flash_attn_func(q, k, v, causal=causal, window_size=window, softcap=softcap,
                                           alibi_slopes=slopes, return_attn_probs=True)
    assert s_dmask is None and out.shape == q.shape and lse.shape == (2, 4, 5) and out.dtype == dtype
    qr, kr, vr = (t.detach().double().requires_grad_() for t in (q, k, v))
    ref, ref_lse = ref_attention(qr, kr, vr, causal, window, softcap, slopes)
    _close(out, ref, dtype, "out")
    _close(lse, ref_lse, torch.float32, "lse", 30)
    g = torch.Generator().manual_seed(9)
    dout = torch.randn(out.shape, generator=g).to(dtype)
    out.backward(dout)
    ref.backward(dout.double())
    for n, t, r in (("dq", q, qr), ("dk", k, kr), ("dv", v, vr)):
        _close(t.grad, r.grad, dtype, n, 4)


def test_path_wgmma_on_sm90a_forward_and_backward_match_float64():
    """path="wgmma" (kiln's argument) reaches sm_90a's TMA + wgmma kernels before path="auto" takes them: d64
    forward and backward (the dkdv kernel on wgmma), d96 forward (lib/attn_wgmma_dims.lua), against float64;
    off sm_90a and for a bad name, the error names the choices."""
    with kt.emulated(sm="90a"):
        q, k, v = _qkv(1, 70, 90, 2, 1, 64, torch.bfloat16, seed=3, grad=True)
        out = fa.flash_attn_func(q, k, v, causal=True, path="wgmma")
        qr, kr, vr = (t.detach().double().requires_grad_() for t in (q, k, v))
        ref, _ = ref_attention(qr, kr, vr, True)
        _close(out, ref, torch.bfloat16, "out")
        dout = torch.randn(out.shape, generator=torch.Generator().manual_seed(4)).to(torch.bfloat16)
        out.backward(dout)
        ref.backward(dout.double())
        for n, t, r in (("dq", q, qr), ("dk", k, kr), ("dv", v, vr)):
            _close(t.grad, r.grad, torch.bfloat16, n, 4)
        q, k, v = _qkv(1, 40, 50, 2, 2, 96, torch.float16, seed=5)
        _close(fa.flash_attn_func(q, k, v, window_size=(10, 3), path="wgmma"),
               ref_attention(q, k, v, window=(10, 3))[0], torch.float16, "d96 out")
        with pytest.raises(kiln.KilnArgumentError, match="path='tensor'; valid: 'auto', 'mma', 'simt', 'wgmma'"):
            fa.flash_attn_func(q, k, v, path="tensor")
    with kt.emulated(sm=80), pytest.raises(kiln.KilnError, match="valid targets: sm_90a"):
        fa.flash_attn_func(q, k, v, path="wgmma")


def test_rows_that_see_no_key_give_zero_and_infinite_lse(emu):
    """causal with seqlen_q > seqlen_k: the first rows see no key (FlashAttention: out 0, lse +inf); their dq is 0."""
    q, k, v = _qkv(1, 6, 3, 2, 2, 32, torch.float16, grad=True)
    out, lse, _ = fa.flash_attn_func(q, k, v, causal=True, return_attn_probs=True)
    ref, ref_lse = ref_attention(q, k, v, causal=True)
    _close(out, ref, torch.float16, "out")
    assert torch.isinf(lse[:, :, :3]).all() and (out[:, :3] == 0).all() and torch.isfinite(lse[:, :, 3:]).all()
    out.sum().backward()
    assert (q.grad[:, :3] == 0).all()


def test_softmax_scale_and_f32(emu):
    q, k, v = _qkv(1, 4, 4, 2, 1, 64, torch.float32)
    out = fa.flash_attn_func(q, k, v, softmax_scale=0.3, causal=True)
    _close(out, ref_attention(q, k, v, True, scale=0.3)[0], torch.float32, "out")


def test_packed_forms_equal_the_plain_function_and_their_gradients_reach_the_packed_tensor(emu):
    g = torch.Generator().manual_seed(4)
    qkv = torch.randn(2, 5, 3, 2, 32, generator=g).half().requires_grad_()
    out = fa.flash_attn_qkvpacked_func(qkv, causal=True)
    q, k, v = (t.detach().requires_grad_() for t in qkv.unbind(2))
    ref = fa.flash_attn_func(q, k, v, causal=True)
    assert torch.equal(out, ref)
    dout = torch.randn(out.shape, generator=g).half()
    out.backward(dout)
    ref.backward(dout)
    assert torch.equal(qkv.grad, torch.stack([q.grad, k.grad, v.grad], 2))
    kv = torch.stack([k, v], 2).detach().requires_grad_()
    q2 = q.detach().requires_grad_()
    out2 = fa.flash_attn_kvpacked_func(q2, kv, causal=True)
    assert torch.equal(out2, ref)
    out2.backward(dout)
    assert torch.equal(kv.grad, torch.stack([k.grad, v.grad], 2)) and torch.equal(q2.grad, q.grad)


def test_deterministic_backward_gives_the_same_bits(emu):
    q, k, v = _qkv(1, 6, 6, 2, 1, 32, torch.float16, seed=5, grad=True)
    grads = []
    for _ in range(2):
        for t in (q, k, v):
            t.grad = None
        fa.flash_attn_func(q, k, v, causal=True, deterministic=True).sum().backward()
        grads.append([t.grad.clone() for t in (q, k, v)])
    assert all(torch.equal(a, b) for a, b in zip(*grads))


def test_gradcheck(emu):
    """kiln's backward kernels against finite differences of kiln's forward (f32 kernels, f32 steps)."""
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, 3, 1, 32, generator=g).requires_grad_() for _ in range(3))
    slopes = torch.tensor([0.3])
    cases = [
        lambda q, k, v: fa.flash_attn_func(q, k, v, causal=True, softcap=3.0),
        lambda q, k, v: fa.flash_attn_func(q, k, v, window_size=(1, 0), alibi_slopes=slopes),
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "not double precision": kiln's kernels are f32 at best
        for i, f in enumerate(cases):
            assert torch.autograd.gradcheck(f, (q, k, v), eps=1e-2, atol=2e-3, rtol=2e-2, nondet_tol=0.0), i


# ---- varlen ----


def _varlen_case(lens_q, lens_k, hq, hkv, d, dtype, seed=1):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(sum(lens_q), hq, d, generator=g).to(dtype)
    k = torch.randn(sum(lens_k), hkv, d, generator=g).to(dtype)
    v = torch.randn(sum(lens_k), hkv, d, generator=g).to(dtype)
    cu = lambda lens: torch.tensor([0] + list(torch.tensor(lens).cumsum(0).tolist()), dtype=torch.int32)  # noqa: E731
    return q, k, v, cu(lens_q), cu(lens_k)


def _varlen_ref(q, k, v, lens_q, lens_k, **kw):
    outs, lses, a, c = [], [], 0, 0
    for lq, lk in zip(lens_q, lens_k):
        if lq:
            o, lse = ref_attention(q[a:a + lq].unsqueeze(0), k[c:c + lk].unsqueeze(0), v[c:c + lk].unsqueeze(0), **kw)
            outs.append(o[0])
            lses.append(lse[0])
        a, c = a + lq, c + lk
    return torch.cat(outs), torch.cat(lses, 1)


def test_varlen_matches_per_sequence_references_with_gradients(emu):
    """Three sequences of different lengths (one query-less), causal bottom-right per sequence, GQA."""
    lq, lk = [3, 0, 5], [4, 2, 5]
    q, k, v, cq, ck = _varlen_case(lq, lk, 4, 2, 32, torch.float16)
    for t in (q, k, v):
        t.requires_grad_()
    out, lse, none = fa.flash_attn_varlen_func(q, k, v, cq, ck, 5, 5, causal=True, return_attn_probs=True)
    assert none is None and out.shape == q.shape and lse.shape == (4, 8)
    qr, kr, vr = (t.detach().double().requires_grad_() for t in (q, k, v))
    ref, ref_lse = _varlen_ref(qr, kr, vr, lq, lk, causal=True)
    _close(out, ref, torch.float16, "out")
    _close(lse, ref_lse, torch.float32, "lse", 30)
    dout = torch.randn(out.shape, generator=torch.Generator().manual_seed(2)).half()
    out.backward(dout)
    ref.backward(dout.double())
    for n, t, r in (("dq", q, qr), ("dk", k, kr), ("dv", v, vr)):
        _close(t.grad, r.grad, torch.float16, n, 4)


def test_varlen_window_softcap_alibi_per_batch_and_packed_forms(emu):
    lq = lk = [4, 6]
    q, k, v, cq, ck = _varlen_case(lq, lk, 2, 2, 32, torch.bfloat16, seed=3)
    slopes = torch.tensor([[0.5, 0.25], [0.1, 0.2]])
    kw = dict(causal=True, window_size=(2, -1), softcap=4.0)
    out = fa.flash_attn_varlen_func(q, k, v, cq, ck, 6, 6, alibi_slopes=slopes, **kw)
    refs = []
    for i, (a, n) in enumerate(((0, 4), (4, 6))):
        refs.append(ref_attention(q[a:a + n][None], k[a:a + n][None], v[a:a + n][None], True, (2, -1), 4.0,
                                  slopes[i])[0][0])
    _close(out, torch.cat(refs), torch.bfloat16, "out")
    qkv = torch.stack([q, k, v], 1)
    assert torch.equal(fa.flash_attn_varlen_qkvpacked_func(qkv, cq, 6, alibi_slopes=slopes, **kw), out)
    assert torch.equal(fa.flash_attn_varlen_kvpacked_func(q, torch.stack([k, v], 1), cq, ck, 6, 6,
                                                          alibi_slopes=slopes, **kw), out)


def test_varlen_with_block_table_gathers_each_sequences_pages(emu):
    """A paged cache (blocks of 4 positions, scattered): the same result as the packed keys."""
    lq, lk = [2, 3], [6, 7]
    q, k, v, cq, ck = _varlen_case(lq, lk, 2, 1, 32, torch.float16, seed=6)
    table = torch.tensor([[5, 1], [0, 3]], dtype=torch.int32)
    kc = torch.zeros(6, 4, 1, 32, dtype=torch.float16)
    vc = torch.zeros_like(kc)
    for i, (a, n) in enumerate(((0, 6), (6, 7))):
        for p in range(n):
            kc[table[i, p // 4], p % 4] = k[a + p]
            vc[table[i, p // 4], p % 4] = v[a + p]
    got = fa.flash_attn_varlen_func(q, kc, vc, cq, ck, 3, 7, causal=True, block_table=table)
    assert torch.equal(got, fa.flash_attn_varlen_func(q, k, v, cq, ck, 3, 7, causal=True))
    _close(got, _varlen_ref(q, k, v, lq, lk, causal=True)[0], torch.float16, "paged out")


# ---- KV cache ----


# float64 rotary reference: x (s, h, d) rotated at positions pos (s,): FA's test matrix's (fa_matrix.rotate)
_rotate = M.rotate


@pytest.mark.parametrize("causal,interleaved", [(True, True), (False, False)])
def test_kvcache_appends_rotates_and_attends(emu, causal, interleaved):
    """Two sequences at different cache lengths, 2 new tokens each, rotary on k (and q); the cache is updated in
    place and each query attends to its own cache_seqlens + 2 keys."""
    g = torch.Generator().manual_seed(7)
    b, hq, hkv, d, cap, sn = 2, 2, 1, 32, 9, 2
    dt = torch.float16
    kc = torch.randn(b, cap, hkv, d, generator=g).to(dt)
    vc = torch.randn(b, cap, hkv, d, generator=g).to(dt)
    q = torch.randn(b, sn, hq, d, generator=g).to(dt)
    k = torch.randn(b, sn, hkv, d, generator=g).to(dt)
    v = torch.randn(b, sn, hkv, d, generator=g).to(dt)
    ang = torch.rand(16, 8, generator=g) * 3
    cos, sin = ang.cos(), ang.sin()
    seqlens = torch.tensor([3, 6], dtype=torch.int32)
    kc0, vc0 = kc.clone(), vc.clone()
    out, lse = fa.flash_attn_with_kvcache(q, kc, vc, k, v, cos, sin, seqlens, causal=causal,
                                          rotary_interleaved=interleaved, return_softmax_lse=True)
    assert lse.shape == (b, hq, sn)
    for i, s in enumerate(seqlens.tolist()):
        pos = torch.arange(s, s + sn)
        krot = _rotate(k[i], cos, sin, pos, interleaved)
        _close(kc[i, s:s + sn], krot, dt, "appended k")
        assert torch.equal(vc[i, s:s + sn], v[i]) and torch.equal(kc[i, :s], kc0[i, :s])
        assert torch.equal(kc[i, s + sn:], kc0[i, s + sn:])
        qpos = pos if causal else torch.full((sn,), s)
        qrot = _rotate(q[i], cos, sin, qpos, interleaved)
        keys = torch.cat([kc0[i, :s].double(), krot])
        vals = torch.cat([vc0[i, :s].double(), v[i].double()])
        ref, ref_lse = ref_attention(qrot[None], keys[None], vals[None], causal)
        _close(out[i], ref[0], dt, "out %d" % i, 2)
        _close(lse[i], ref_lse[0], torch.float32, "lse %d" % i, 60)


def test_kvcache_leftpad_starts_each_cache_there(emu):
    """cache_leftpad: sequence i attends to cache positions leftpad[i] .. cache_seqlens[i] + seqlen_new - 1, its new
    keys rotated at their cache positions cache_seqlens[i] + j, leftpad or not (FlashAttention's test rotates at
    cache_seqlens with cache_leftpad too)."""
    g = torch.Generator().manual_seed(14)
    kc = torch.randn(2, 8, 1, 32, generator=g).half()
    vc = torch.randn(2, 8, 1, 32, generator=g).half()
    q = torch.randn(2, 1, 2, 32, generator=g).half()
    k = torch.randn(2, 1, 1, 32, generator=g).half()
    v = torch.randn(2, 1, 1, 32, generator=g).half()
    ang = torch.rand(8, 8, generator=g) * 3
    seqlens, pads = torch.tensor([5, 6], dtype=torch.int32), torch.tensor([2, 0], dtype=torch.int32)
    kc0, vc0 = kc.clone(), vc.clone()
    out = fa.flash_attn_with_kvcache(q, kc, vc, k, v, ang.cos(), ang.sin(), seqlens, cache_leftpad=pads, causal=True)
    for i, (s, lp) in enumerate(zip(seqlens.tolist(), pads.tolist())):
        pos = torch.tensor([s])
        krot = _rotate(k[i], ang.cos(), ang.sin(), pos, True)
        _close(kc[i, s:s + 1], krot, torch.float16, "appended k %d" % i)
        keys = torch.cat([kc0[i, lp:s].double(), krot])
        vals = torch.cat([vc0[i, lp:s].double(), v[i].double()])
        ref, _ = ref_attention(_rotate(q[i], ang.cos(), ang.sin(), pos, True)[None], keys[None], vals[None], True)
        _close(out[i], ref[0], torch.float16, "out %d" % i, 2)

def test_kvcache_batch_idx_int_seqlens_and_no_new_keys(emu):
    g = torch.Generator().manual_seed(8)
    kc = torch.randn(3, 6, 1, 32, generator=g).half()
    vc = torch.randn(3, 6, 1, 32, generator=g).half()
    q = torch.randn(2, 1, 2, 32, generator=g).half()
    idx = torch.tensor([2, 0], dtype=torch.int32)
    out = fa.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=4, cache_batch_idx=idx, causal=True)
    ref = torch.cat([ref_attention(q[i:i + 1], kc[j:j + 1, :4], vc[j:j + 1, :4], True)[0] for i, j in
                     enumerate(idx.tolist())])
    _close(out, ref, torch.float16, "out")
    full = fa.flash_attn_with_kvcache(q, kc[:2], vc[:2])  # cache_seqlens None: the whole cache, one launch
    _close(full, ref_attention(q, kc[:2], vc[:2])[0], torch.float16, "whole cache")


def test_kvcache_paged_equals_dense(emu):
    g = torch.Generator().manual_seed(11)
    b, ps, nblk, hkv, d = 2, 4, 3, 1, 32
    dense_k = torch.randn(b, nblk * ps, hkv, d, generator=g).half()
    dense_v = torch.randn(b, nblk * ps, hkv, d, generator=g).half()
    table = torch.tensor([[4, 0, 2], [1, 5, 3]], dtype=torch.int32)
    pk = torch.zeros(6, ps, hkv, d, dtype=torch.half)
    pv = torch.zeros_like(pk)
    for i in range(b):
        for j in range(nblk):
            pk[table[i, j]] = dense_k[i, j * ps:(j + 1) * ps]
            pv[table[i, j]] = dense_v[i, j * ps:(j + 1) * ps]
    q = torch.randn(b, 1, 2, d, generator=g).half()
    k = torch.randn(b, 1, hkv, d, generator=g).half()
    v = torch.randn(b, 1, hkv, d, generator=g).half()
    lens = torch.tensor([5, 8], dtype=torch.int32)
    got = fa.flash_attn_with_kvcache(q, pk, pv, k, v, cache_seqlens=lens, block_table=table, causal=True)
    want = fa.flash_attn_with_kvcache(q, dense_k, dense_v, k, v, cache_seqlens=lens, causal=True)
    assert torch.equal(got, want)
    for i in range(b):  # the new key landed in the page its position maps to
        p = int(lens[i])
        assert torch.equal(pk[table[i, p // ps], p % ps], k[i, 0])


# ---- dropout: kiln's Philox mask, seeded from torch's generator, regenerated by the backward ----


def test_dropout_mask_forward_and_backward(emu):
    """The mask is read back through V = identity (out[i, j] = P[i, j] kept / (1 - p), else 0); a second call with
    the same torch seed and a random V must give (softmax(QK^T) * keep / (1 - p)) V and its gradients in float64."""
    torch.manual_seed(3)
    b, s, h, d, p = 1, 32, 2, 32, 0.3
    q, k, _ = _qkv(b, s, s, h, h, d, torch.float16)
    eye = torch.eye(s, d, dtype=torch.float16).view(1, s, 1, d).expand(b, s, h, d).contiguous()
    torch.manual_seed(11)
    probe = flash_attn_func(q, k, eye, dropout_p=p, causal=True)
    ref_p, _ = ref_attention(q, k, eye.double(), causal=True)  # P itself (V = identity)
    keep = probe.double() != 0
    visible = ref_p > 0
    assert keep[visible].float().mean().item() == pytest.approx(1 - p, abs=0.12)  # 1056 visible entries
    assert not keep[~visible].any()
    want = torch.where(keep, ref_p / (1 - p), torch.zeros_like(ref_p))
    assert (probe.double() - want).abs().max().item() < 2e-3 / (1 - p)
    # the same seed again: the same mask, now through a random V with gradients
    v = torch.randn(b, s, h, d, dtype=torch.float16)
    qg, kg, vg = (t.clone().requires_grad_() for t in (q, k, v))
    torch.manual_seed(11)
    out = flash_attn_func(qg, kg, vg, dropout_p=p, causal=True)
    dout = torch.randn_like(out)
    out.backward(dout)
    q64, k64, v64 = (t.double().requires_grad_() for t in (q, k, v))
    sc = torch.einsum("bqhd,bkhd->bhqk", q64, k64) * d ** -0.5
    sc = sc.masked_fill(~torch.ones(s, s, dtype=torch.bool).tril(), -math.inf)
    z = keep.permute(0, 2, 1, 3).double() / (1 - p)  # keep is (b, q, h, k): to (b, h, q, k)
    ref = torch.einsum("bhqk,bkhd->bqhd", torch.softmax(sc, -1) * z, v64)
    ref.backward(dout.double())
    assert (out.double() - ref).abs().max().item() < 4e-3
    for got, want_g in ((qg.grad, q64.grad), (kg.grad, k64.grad), (vg.grad, v64.grad)):
        assert (got.double() - want_g).abs().max().item() < 2e-2 * max(1.0, want_g.abs().max().item())
    # another seed: another mask
    torch.manual_seed(12)
    assert not torch.equal(flash_attn_func(q, k, eye, dropout_p=p, causal=True), probe)


# ---- errors: one KilnArgumentError naming the argument ----


def test_bad_arguments_name_the_argument(emu):
    q, k, v = _qkv(1, 4, 4, 2, 1, 32, torch.float16)
    bad = [
        (lambda: fa.flash_attn_func(q, k, v, dropout_p=1.0), "dropout_p=1.0; valid: a rate 0 <= p < 1"),
        (lambda: fa.flash_attn_func(q, k, v, window_size=(-2, 0)), "window_size"),
        (lambda: fa.flash_attn_func(q, k, v, window_size=4), "window_size"),
        (lambda: fa.flash_attn_func(q, k, v, softcap=-1.0), "softcap"),
        (lambda: fa.flash_attn_func(q, k, v, alibi_slopes=torch.ones(3)), "alibi_slopes has shape"),
        (lambda: fa.flash_attn_func(q, k, v, alibi_slopes=torch.ones(2, dtype=torch.float16)), "alibi_slopes must"),
        (lambda: fa.flash_attn_func(q, k, v, causal="yes"), "causal="),
        (lambda: fa.flash_attn_func(q, k, v, softmax_scale=float("nan")), "softmax_scale"),
        (lambda: fa.flash_attn_func(q, k.float(), v), "share one dtype"),
        (lambda: fa.flash_attn_func(q[..., :12], k[..., :12], v[..., :12]), "headdim 12"),
        (lambda: fa.flash_attn_func(q, torch.cat([k] * 3, 2), torch.cat([v] * 3, 2)), "multiple"),
        (lambda: fa.flash_attn_func(q[0], k[0], v[0]), "q must be"),
        (lambda: fa.flash_attn_func(q.double(), k.double(), v.double()), "dtype torch.float64"),
        (lambda: fa.flash_attn_qkvpacked_func(torch.stack([q, q], 2)), "qkv must be"),
        (lambda: fa.flash_attn_kvpacked_func(q, k), "kv must be"),
        (lambda: fa.flash_attn_func(q, k, v, return_attn_probs=1), "return_attn_probs"),
        (lambda: fa.flash_attn_varlen_func(q[0], k[0], v[0], torch.tensor([0, 4], dtype=torch.int32),
                                           torch.tensor([0, 4], dtype=torch.int32), 2, 4), "max_seqlen_q=2"),
        (lambda: fa.flash_attn_varlen_func(q[0], k[0], v[0], torch.tensor([0, 5], dtype=torch.int32),
                                           torch.tensor([0, 4], dtype=torch.int32), 5, 4), "cu_seqlens_q"),
        (lambda: fa.flash_attn_varlen_func(q[0], k[0], v[0], torch.tensor([0, 4], dtype=torch.int32),
                                           torch.tensor([0, 2, 4], dtype=torch.int32), 4, 4), "1 sequences"),
        (lambda: fa.flash_attn_with_kvcache(q, k, v, cache_seqlens=2, cache_leftpad=torch.full((1,), 3)),
         "cache_leftpad=\\[3\\] must be 0 .. cache_seqlens"),
        (lambda: fa.flash_attn_with_kvcache(q, k, v, k=k[:, :1]), "k and v go together"),
        (lambda: fa.flash_attn_with_kvcache(q, k, v, k=k[:, :1], v=v[:, :1], cache_seqlens=4), "cache_seqlens"),
        (lambda: fa.flash_attn_with_kvcache(q, k, v, num_splits=-1), "num_splits"),
        (lambda: fa.flash_attn_with_kvcache(q, k, v, k=k[:, :1], v=v[:, :1]), "cache_seqlens is needed"),
        (lambda: fa.flash_attn_with_kvcache(q, k, v, block_table=torch.tensor([[9]], dtype=torch.int32)),
         "block_table holds"),
    ]
    for call, pattern in bad:
        try:
            call()
        except kiln.KilnArgumentError as e:
            assert re.search(pattern, str(e)), (pattern, str(e))
        else:
            pytest.fail("no KilnArgumentError for %r" % pattern)


def test_cpu_tensors_outside_emulated_get_kilns_error():
    q, k, v = _qkv(1, 4, 4, 2, 1, 32, torch.float16)
    with pytest.raises(kiln.KilnArgumentError, match="kiln runs on CUDA tensors.*emulated"):
        fa.flash_attn_func(q, k, v)
    with pytest.raises(kiln.KilnArgumentError, match="kiln runs on CUDA tensors"):
        torch.ops.kiln.flash_attention(q, k, v, None, False, -1, -1, 0.0, 0.125, False)


def test_ops_trace_on_meta_tensors():
    """The fake kernels give shapes, so torch.compile / export see the ops (schema checked by opcheck elsewhere)."""
    q, k, v = (torch.empty(2, 5, 4, 32, device="meta", dtype=torch.float16) for _ in range(3))
    o, lse = torch.ops.kiln.flash_attention(q, k[:, :, :2], v[:, :, :2], None, True, 3, -1, 0.0, 0.1, False)
    assert o.shape == (2, 5, 4, 32) and lse.shape == (2, 4, 5) and lse.dtype == torch.float32


def test_opcheck_the_ops(emu):
    """torch.library.opcheck: schema, fake kernel, autograd registration, AOT dispatch with dynamic shapes."""
    g = torch.Generator().manual_seed(12)
    q = torch.randn(1, 6, 2, 32, generator=g, requires_grad=True)
    kv = torch.randn(1, 5, 1, 32, generator=g, requires_grad=True)
    slopes = torch.tensor([0.2, 0.1])
    torch.library.opcheck(torch.ops.kiln.flash_attention.default, (q, kv, kv, None, True, -1, -1, 0.0, 0.2, False))
    torch.library.opcheck(torch.ops.kiln.flash_attention.default, (q, kv, kv, slopes, False, 2, 1, 3.0, 0.2, True))
    with torch.no_grad():  # the backward op has no autograd formula of its own (no double backward)
        o, lse = torch.ops.kiln.flash_attention(q, kv, kv, slopes, True, 3, -1, 3.0, 0.2, False)
    torch.library.opcheck(torch.ops.kiln.flash_attention_backward.default,
                          (torch.randn(o.shape, generator=g), q.detach(), kv.detach(), kv.detach(), o, lse, slopes,
                           True, 3, -1, 3.0, 0.2, False))


def test_torch_compile_fullgraph_matches_eager(emu):
    """flash_attn_func traces into one graph (its checks read shapes only) with inductor; forward and gradients
    equal eager's bits."""
    q, k, v = _qkv(1, 6, 6, 2, 1, 32, torch.float32, seed=13, grad=True)
    f = lambda q, k, v: fa.flash_attn_func(q, k, v, causal=True, window_size=(2, 0), softcap=3.0)  # noqa: E731
    out = torch.compile(f, fullgraph=True)(q, k, v)
    out.sum().backward()
    got = [t.grad.clone() for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    ref = f(q, k, v)
    ref.sum().backward()
    assert torch.equal(out, ref) and all(torch.equal(a, t.grad) for a, t in zip(got, (q, k, v)))

# ---- on a GPU (the kit's torch step): the same checks at larger shapes on CUDA tensors ----

GPU = torch.cuda.is_available()
needs_gpu = pytest.mark.skipif(not GPU, reason="needs a CUDA GPU (torch.cuda.is_available() is False)")


@needs_gpu
@pytest.mark.parametrize("causal,window,softcap,alibi", CASES)
@pytest.mark.parametrize("dtype,d", [(torch.float16, 64), (torch.bfloat16, 128)])
def test_gpu_flash_attn_func_matches_float64(dtype, d, causal, window, softcap, alibi):
    q, k, v = (t.cuda().requires_grad_() for t in _qkv(2, 100, 160, 8, 2, d, dtype))
    window = tuple(w * 16 if w > 0 else w for w in window)
    slopes = (torch.arange(1, 9, dtype=torch.float32) / 16).cuda() if alibi else None
    out, lse, _ = fa.flash_attn_func(q, k, v, causal=causal, window_size=window, softcap=softcap * 4,
                                     alibi_slopes=slopes, return_attn_probs=True)
    qr, kr, vr = (t.detach().double().cpu().requires_grad_() for t in (q, k, v))
    ref, ref_lse = ref_attention(qr, kr, vr, causal, window, softcap * 4, slopes.cpu() if alibi else None)
    _close(out.cpu(), ref, dtype, "out", 2)
    _close(lse.cpu(), ref_lse, torch.float32, "lse", 60)
    dout = torch.randn(out.shape, generator=torch.Generator().manual_seed(9)).to(dtype)
    out.backward(dout.cuda())
    ref.backward(dout.double())
    for n, t, r in (("dq", q, qr), ("dk", k, kr), ("dv", v, vr)):
        _close(t.grad.cpu(), r.grad, dtype, n, 8)


@needs_gpu
def test_gpu_varlen_and_kvcache_match_the_dense_function():
    lq = lk = [37, 0, 120]
    q, k, v, cq, ck = _varlen_case(lq, lk, 4, 2, 64, torch.bfloat16)
    q, k, v, cq, ck = (t.cuda() for t in (q, k, v, cq, ck))
    out = fa.flash_attn_varlen_func(q, k, v, cq, ck, 120, 120, causal=True)
    _close(out.cpu(), _varlen_ref(q.cpu(), k.cpu(), v.cpu(), lq, lk, causal=True)[0], torch.bfloat16, "varlen", 2)
    kc, vc = (torch.zeros(2, 256, 2, 64, dtype=torch.bfloat16, device="cuda") for _ in range(2))
    kc[:, :100], vc[:, :100] = k[:100].unsqueeze(0), v[:100].unsqueeze(0)
    qd = q[:2].unsqueeze(1)
    dec = fa.flash_attn_with_kvcache(qd, kc, vc, k[100:102].unsqueeze(1), v[100:102].unsqueeze(1),
                                     cache_seqlens=torch.tensor([100, 100], dtype=torch.int32, device="cuda"),
                                     causal=True)
    want = fa.flash_attn_func(qd, kc[:, :101], vc[:, :101], causal=True)
    _close(dec.cpu(), want.cpu().double(), torch.bfloat16, "kvcache decoding", 2)
