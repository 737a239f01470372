"""v_head_dim in kiln.torch and kiln.flash_attn on CPU tensors inside kiln.torch.emulated(): SDPA with value [.., S, Ev]
and Ev != E (torch allows it) gives [.., L, Ev], forward and backward through autograd against torch's own SDPA in
float64, opcheck of the ops; flash_attn_func with FlashAttention-3's headdim 192 / headdim_v 128 against float64; the
one-line refusals where kiln's kernels take one head dim (varlen, paged, SDPA's key-padding path) or the dim is not
one kiln generates. Skipped where torch is not installed; shapes stay small for the emulator."""

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (make setup installs the pinned one)")
if not hasattr(torch.library, "custom_op"):
    pytest.skip("kiln.torch needs torch >= 2.4 (torch.library.custom_op)", allow_module_level=True)

import kiln  # noqa: E402
import kiln.flash_attn as fa  # noqa: E402
import kiln.torch as kt  # noqa: E402
from test_torch_flash_attn import _close, ref_attention  # noqa: E402

F = torch.nn.functional


def _sdpa_inputs(b, hq, hkv, sq, sk, d, dv, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, hq, sq, d, generator=g).to(dtype).requires_grad_()
    k = torch.randn(b, hkv, sk, d, generator=g).to(dtype).requires_grad_()
    v = torch.randn(b, hkv, sk, dv, generator=g).to(dtype).requires_grad_()
    return q, k, v, g


@pytest.mark.parametrize("dtype,hq,hkv,sq,sk,d,dv,causal,scale", [
    (torch.float16, 2, 1, 9, 12, 192, 128, True, None),   # MLA prefill, top-left causal, GQA
    (torch.bfloat16, 2, 2, 7, 5, 64, 32, True, 0.3),      # seq_q > seq_k, scale=
    (torch.float32, 1, 1, 6, 10, 40, 24, False, None),
])
def test_sdpa_forward_and_backward_match_torch(emu, dtype, hq, hkv, sq, sk, d, dv, causal, scale):
    q, k, v, g = _sdpa_inputs(1, hq, hkv, sq, sk, d, dv, dtype, seed=d + dv)
    gqa = hq != hkv
    assert kt.unsupported_reason(q, k, v, is_causal=causal, enable_gqa=gqa) is None
    o = kt.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale, enable_gqa=gqa)
    assert o.shape == (1, hq, sq, dv) and o.dtype == dtype
    do = torch.randn(o.shape, generator=g).to(dtype)
    got = torch.autograd.grad(o, (q, k, v), do)
    ref_in = [t.detach().double().requires_grad_() for t in (q, k, v)]
    ref = F.scaled_dot_product_attention(*ref_in, is_causal=causal, scale=scale, enable_gqa=gqa)
    ref_g = torch.autograd.grad(ref, ref_in, do.double())
    _close(o, ref, dtype, "o", scale=2)
    for name, a, r in zip(("dq", "dk", "dv"), got, ref_g):
        assert a.shape == r.shape and a.dtype == dtype, name
        _close(a, r, dtype, name, scale=4)


def test_sdpa_3d_and_unpadded_mask(emu):
    q, k, v, _g = _sdpa_inputs(1, 2, 2, 5, 6, 32, 16, torch.float32, seed=3)
    o = kt.scaled_dot_product_attention(q[0], k[0], v[0])  # [heads, seq, head_dim]
    assert o.shape == (2, 5, 16)
    _close(o, F.scaled_dot_product_attention(q[0].double(), k[0].double(), v[0].double()), torch.float32, "o 3-d")
    keep = torch.ones(1, 1, 1, 6, dtype=torch.bool)  # a mask that pads nothing runs the dense kernel
    _close(kt.scaled_dot_product_attention(q, k, v, attn_mask=keep), F.scaled_dot_product_attention(
        q.double(), k.double(), v.double()), torch.float32, "o mask")


def test_sdpa_refusals_name_the_rule(emu):
    q, k, v, _g = _sdpa_inputs(2, 2, 2, 4, 6, 32, 16, torch.float32, seed=1)
    pad = torch.tensor([[True] * 6, [True] * 4 + [False] * 2]).view(2, 1, 1, 6)
    why = kt.unsupported_reason(q, k, v, attn_mask=pad)
    assert why.startswith("attn_mask padding keys with value's head_dim 16 != query's 32: the key-padding path runs "
                          "kiln's varlen kernel, which is not built with v_head_dim"), why
    with pytest.raises(kiln.KilnArgumentError, match="not built with v_head_dim"):
        kt.scaled_dot_product_attention(q, k, v, attn_mask=pad)
    bad = torch.randn(2, 2, 6, 12)
    with pytest.raises(kiln.KilnArgumentError, match=r"head_dim 32 \(key 32, value 12\) is not one kiln generates; "
                                                     r"valid: a multiple of 8 from 8 to 256, the same for query and "
                                                     r"key \(value's may differ: v_head_dim\)"):
        kt.scaled_dot_product_attention(q, k, bad)
    with pytest.raises(kiln.KilnArgumentError, match="must have the same shape but the last dimension"):
        kt.scaled_dot_product_attention(q, k, torch.randn(2, 2, 5, 16))


def test_opcheck_with_v_head_dim(emu):
    q = torch.randn(1, 2, 6, 32, requires_grad=True)
    k = torch.randn(1, 1, 6, 32, requires_grad=True)
    v = torch.randn(1, 1, 6, 16, requires_grad=True)
    torch.library.opcheck(torch.ops.kiln.attention.default, (q, k, v, True, 0.2))
    with torch.no_grad():
        o, lse = torch.ops.kiln.attention(q, k, v, True, 0.2)
    assert o.shape == (1, 2, 6, 16)
    torch.library.opcheck(torch.ops.kiln.attention_backward.default,
                          (torch.randn(1, 2, 6, 16), q.detach(), k.detach(), v.detach(), o, lse, True, 0.2, False))
    qf, kf, vf = (t.detach().transpose(1, 2).contiguous().requires_grad_() for t in (q, k, v))
    torch.library.opcheck(torch.ops.kiln.flash_attention.default, (qf, kf, vf, None, True, -1, -1, 0.0, 0.2, False))


@pytest.mark.parametrize("dtype,hq,hkv,sq,sk,d,dv,kw", [
    (torch.bfloat16, 2, 1, 8, 11, 192, 128, dict(causal=True)),   # FlashAttention-3's hdim 192 / hdim_v 128
    (torch.float16, 2, 2, 6, 9, 64, 128, dict(causal=True, window_size=(3, 0), softcap=5.0)),
    (torch.float32, 1, 1, 5, 7, 128, 64, dict(deterministic=True)),
])
def test_flash_attn_func_matches_float64(emu, dtype, hq, hkv, sq, sk, d, dv, kw):
    g = torch.Generator().manual_seed(d + dv)
    q = torch.randn(1, sq, hq, d, generator=g).to(dtype).requires_grad_()
    k = torch.randn(1, sk, hkv, d, generator=g).to(dtype).requires_grad_()
    v = torch.randn(1, sk, hkv, dv, generator=g).to(dtype).requires_grad_()
    out, lse, _none = fa.flash_attn_func(q, k, v, return_attn_probs=True, **kw)
    assert out.shape == (1, sq, hq, dv)
    do = torch.randn(out.shape, generator=g).to(dtype)
    got = torch.autograd.grad(out, (q, k, v), do)
    ref_in = [t.detach().double().requires_grad_() for t in (q, k, v)]
    ref, ref_lse = ref_attention(*ref_in, causal=kw.get("causal", False), window=kw.get("window_size", (-1, -1)),
                                 softcap=kw.get("softcap", 0.0))
    ref_g = torch.autograd.grad(ref, ref_in, do.double())
    _close(out, ref, dtype, "out", scale=2)
    _close(lse, ref_lse, torch.float32, "lse", scale=10)
    for name, a, r in zip(("dq", "dk", "dv"), got, ref_g):
        assert a.shape == r.shape, name
        _close(a, r, dtype, name, scale=4)


def test_flash_attn_refusals_name_the_rule(emu):
    q, k = torch.randn(1, 4, 2, 192), torch.randn(1, 4, 2, 192)
    v = torch.randn(1, 4, 2, 128)
    cu = torch.tensor([0, 4], dtype=torch.int32)
    with pytest.raises(kiln.KilnArgumentError, match=r"flash_attn_varlen_func: v has headdim 128 and q/k 192; "
                                                     r"flash_attn_varlen_func takes one headdim \(kiln's varlen and "
                                                     r"paged kernels are not built with a v headdim of its own"):
        fa.flash_attn_varlen_func(q[0], k[0], v[0], cu, cu, 4, 4)
    kc, vc = torch.randn(1, 8, 2, 192), torch.randn(1, 8, 2, 128)
    with pytest.raises(kiln.KilnArgumentError, match="flash_attn_with_kvcache: v_cache has headdim 128 and "
                                                     "q/k_cache 192"):
        fa.flash_attn_with_kvcache(q[:, :1], kc, vc, cache_seqlens=torch.tensor([5], dtype=torch.int32))
    with pytest.raises(kiln.KilnArgumentError, match="v has headdim 12; valid: a multiple of 8 from 8 to 256"):
        fa.flash_attn_func(q, k, torch.randn(1, 4, 2, 12))
    with pytest.raises(kiln.KilnArgumentError, match="q has headdim 192 and k 128; they must be equal"):
        fa.flash_attn_func(q, v, v)
