"""kiln.torch.scaled_dot_product_attention with a key-padding attn_mask (mapped onto per-sequence key lengths), inside
kiln.torch.emulated(), against torch's own SDPA in float64 with the same mask: forward and gradients, the mask forms
taken (boolean [batch, 1, 1, seq_k], [batch, 1, seq_q, seq_k] constant along seq_q, 0/-inf float, 1-d, 3-d
inputs), and what unsupported_reason says about the rest (the argument errors live in test_torch_real.py)."""

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (make setup installs the pinned one)")
if not hasattr(torch.library, "custom_op"):
    pytest.skip("kiln.torch needs torch >= 2.4 (torch.library.custom_op)", allow_module_level=True)

import kiln.torch as kt  # noqa: E402

F = torch.nn.functional
TOL = {torch.float16: 2e-3, torch.bfloat16: 1.6e-2}


def _close(got, ref, dtype, what, scale=1.0):
    tol = TOL[dtype] * scale
    torch.testing.assert_close(got.double(), ref.detach().double(), rtol=tol, atol=tol * max(ref.abs().max().item(), 1),
                               msg=lambda m: "%s: %s" % (what, m))


def _qkv(b, hq, hkv, sq, sk, d=32, dtype=torch.float16, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(b, hq, sq, d, generator=g).to(dtype).requires_grad_(),
            torch.randn(b, hkv, sk, d, generator=g).to(dtype).requires_grad_(),
            torch.randn(b, hkv, sk, d, generator=g).to(dtype).requires_grad_())


def _padding(lengths, sk):
    return torch.arange(sk).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)  # [batch, seq_k], True: keep


@pytest.mark.parametrize("form", ["b11k", "b1qk", "float"])
def test_right_padding_mask_matches_torch_forward_and_backward(emu, form):
    """Three sequences with 6, 3 and 0 of 6 keys (the last one all padding: torch gives 0, so does kiln), GQA."""
    b, hq, hkv, sq, sk = 3, 4, 2, 5, 6
    q, k, v = _qkv(b, hq, hkv, sq, sk)
    keep = _padding([6, 3, 0], sk)[:, None, None, :]
    mask = {"b11k": keep, "b1qk": keep.expand(b, 1, sq, sk),
            "float": torch.zeros(keep.shape).masked_fill(~keep, float("-inf"))}[form]
    assert kt.unsupported_reason(q, k, v, attn_mask=mask, enable_gqa=True) is None
    out = kt.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    qr, kr, vr = (t.detach().double().requires_grad_() for t in (q, k, v))
    ref = F.scaled_dot_product_attention(qr, kr, vr, attn_mask=keep, enable_gqa=True)
    _close(out, ref, torch.float16, "out")
    assert (out[2] == 0).all()
    dout = torch.randn(out.shape, generator=torch.Generator().manual_seed(1)).half()
    out.backward(dout)
    ref.backward(dout.double())
    for n, t, r in (("dq", q, qr), ("dk", k, kr), ("dv", v, vr)):
        _close(t.grad, r.grad, torch.float16, n, 4)
    assert (k.grad[1, :, 3:] == 0).all()  # padded keys get no gradient


def test_all_true_mask_is_one_launch_equal_to_no_mask_and_3d_inputs(emu):
    q, k, v = _qkv(2, 2, 2, 4, 4, dtype=torch.bfloat16, seed=2)
    plain = kt.scaled_dot_product_attention(q, k, v)
    assert torch.equal(kt.scaled_dot_product_attention(q, k, v, attn_mask=torch.ones(4, dtype=torch.bool)), plain)
    keep = _padding([2], 4)[0]  # 1-d [seq_k] mask, 3-d [heads, seq, head_dim] inputs
    got = kt.scaled_dot_product_attention(q[0], k[0], v[0], attn_mask=keep)
    ref = F.scaled_dot_product_attention(q[0].double(), k[0].double(), v[0].double(), attn_mask=keep)
    _close(got, ref, torch.bfloat16, "3-d out")


def test_unsupported_masks_are_refused_with_the_reason(emu):
    q, k, v = _qkv(2, 2, 2, 4, 4)
    left = _padding([4, 2], 4).flip(1)[:, None, None, :]  # left padding: kept keys last
    assert "not right padding" in kt.unsupported_reason(q, k, v, attn_mask=left)
    per_row = torch.ones(4, 4, dtype=torch.bool).tril()
    assert "differs between heads or query rows" in kt.unsupported_reason(q, k, v, attn_mask=per_row)
    with pytest.raises(kt.KilnArgumentError, match="kiln attention: attn_mask is not right padding"):
        kt.scaled_dot_product_attention(q, k, v, attn_mask=left)
