"""Attention dropout through Python: kiln.emulate's dropout=(p, seed, offset) forward and backward against float64
with the kernel's own mask (read back through a one-hot V), and kiln.torch's SDPA dropout_p under emulated()."""

import numpy as np
import pytest

from kiln import emulate
from kiln.errors import KilnArgumentError

B, SQ, SK, H, D = 1, 24, 32, 2, 32


def _inputs(seed=0):
    r = np.random.default_rng(seed)
    return [r.uniform(-1, 1, s).astype(np.float32) for s in ((B, SQ, H, D), (B, SK, H, D), (B, SK, H, D))]


def _probs(q, k, causal=False):
    s = np.einsum("bihd,bjhd->bhij", q.astype(np.float64), k.astype(np.float64)) / np.sqrt(D)
    if causal:
        s = np.where(np.arange(SK)[None, :] <= np.arange(SQ)[:, None] + SK - SQ, s, -np.inf)
    s = s - s.max(-1, keepdims=True)
    p = np.exp(s)
    return p / p.sum(-1, keepdims=True)


def _mask(q, k, drop, causal=False):
    """The kernel's keep mask [b, h, i, j]: with V = the identity, O[i, j] = P_ij Z_ij."""
    eye = np.zeros((B, SK, H, D), np.float32)
    for j in range(SK):
        eye[0, j, :, j] = 1
    o = emulate.attention(q, k, eye, causal=causal, dropout=drop).astype(np.float64)
    pz = o.transpose(0, 2, 1, 3)[..., :SK]
    return pz > 0, pz


def test_rate_zero_is_the_plain_kernel_bit_for_bit():
    q, k, v = _inputs()
    a = emulate.attention(q, k, v, causal=True, dropout=(0.0, 5, 0))
    b = emulate.attention(q, k, v, causal=True)
    assert a.tobytes() == b.tobytes()


def test_forward_and_backward_against_float64_with_the_kernels_mask():
    p, drop = 0.3, (0.3, 1234, 7)
    q, k, v = _inputs(1)
    m, pz = _mask(q, k, drop, causal=True)
    prob = _probs(q, k, causal=True)
    # kept entries carry P / (1 - p), dropped ones 0; the keep rate within 5 sigma of the binomial
    np.testing.assert_allclose(pz[m], (prob / (1 - p))[m], rtol=1e-5, atol=1e-7)
    vis = prob > 0
    n, kept = vis.sum(), (m & vis).sum()
    assert abs(kept - n * (1 - p)) <= 5 * np.sqrt(n * p * (1 - p)), (kept, n)
    z = m / (1 - p)
    vd, o_ref = v.astype(np.float64), np.einsum("bhij,bjhd->bihd", prob * z, v.astype(np.float64))
    o, lse = emulate.attention(q, k, v, causal=True, dropout=drop, return_lse=True)
    np.testing.assert_allclose(o, o_ref, rtol=1e-5, atol=1e-5)
    # the backward regenerates the mask from the same triple (FlashAttention-2's dV = (P Z)^T dO, dS = P (dP Z - D))
    do = np.random.default_rng(2).uniform(-1, 1, o.shape).astype(np.float32)
    dod = do.astype(np.float64)
    dv_ref = np.einsum("bhij,bihd->bjhd", prob * z, dod)
    dp = np.einsum("bihd,bjhd->bhij", dod, vd)
    dd = np.einsum("bihd,bihd->bhi", dod, o.astype(np.float64))[..., None]
    ds = prob * (dp * z - dd)
    dq_ref = np.einsum("bhij,bjhd->bihd", ds, k.astype(np.float64)) / np.sqrt(D)
    dk_ref = np.einsum("bhij,bihd->bjhd", ds, q.astype(np.float64)) / np.sqrt(D)
    for det in (False, True):
        dq, dk, dv = emulate.attention_backward(q, k, v, do, o=o, lse=lse, causal=True, dropout=drop,
                                                deterministic=det)
        for got, ref in ((dq, dq_ref), (dk, dk_ref), (dv, dv_ref)):
            np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)


def test_seed_and_offset_select_the_mask():
    q, k, _ = _inputs(3)
    a, _ = _mask(q, k, (0.5, 9, 0))
    b, _ = _mask(q, k, (0.5, 9, 0))
    c, _ = _mask(q, k, (0.5, 9, 1))
    d, _ = _mask(q, k, (0.5, 10, 0))
    assert (a == b).all() and not (a == c).all() and not (a == d).all()


@pytest.mark.parametrize("bad", [(1.0, 0, 0), (-0.1, 0, 0), (0.1, -1, 0), (0.1, 0, 2 ** 54), 0.1, (0.1, 0)])
def test_bad_dropout_is_refused_naming_the_valid_form(bad):
    q, k, v = _inputs()
    with pytest.raises(KilnArgumentError, match=r"dropout=.*valid: \(p, seed, offset\)"):
        emulate.attention(q, k, v, dropout=bad)


def test_torch_sdpa_dropout_p_under_emulated():
    torch = pytest.importorskip("torch", reason="torch is not installed (make setup installs the pinned one)")
    if not hasattr(torch.library, "custom_op"):
        pytest.skip("kiln.torch needs torch >= 2.4")
    import kiln.torch as kt
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.rand(B, H, n, D, generator=g) * 2 - 1 for n in (SQ, SK, SK))
    eye = torch.zeros(B, H, SK, D)
    eye[..., torch.arange(SK), torch.arange(SK)] = 1
    p = 0.25
    with kt.emulated():
        torch.manual_seed(42)
        pz = kt.scaled_dot_product_attention(q, k, eye, dropout_p=p)[..., :SK].double()
        torch.manual_seed(42)
        qg, kg, vg = (t.clone().requires_grad_() for t in (q, k, v))
        o = kt.scaled_dot_product_attention(qg, kg, vg, dropout_p=p)
        o.backward(torch.ones_like(o))
        other = kt.scaled_dot_product_attention(q, k, v, dropout_p=p)  # the generator moved on: another mask
    assert not torch.equal(other, o.detach())
    # the eager float64 expression with the kernel's mask (one seed: the same mask in both calls)
    z = (pz > 0).double() / (1 - p)
    qd, kd, vd = (t.double().requires_grad_() for t in (q, k, v))
    ref = (torch.softmax(qd @ kd.transpose(-1, -2) / D ** 0.5, -1) * z) @ vd
    ref.backward(torch.ones_like(ref))
    torch.testing.assert_close(o.detach().double(), ref.detach(), rtol=1e-5, atol=1e-5)
    for got, want in ((qg.grad, qd.grad), (kg.grad, kd.grad), (vg.grad, vd.grad)):
        torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-5)
