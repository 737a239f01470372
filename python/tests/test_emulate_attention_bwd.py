"""kiln.emulate.attention_backward: dq, dk, dv of the emulated attention_bwd kernels against float64 gradients
computed here with numpy from the same (rounded) inputs."""

import numpy as np
import pytest

import kiln

ml_dtypes = pytest.importorskip("ml_dtypes")
NP = {"f32": np.float32, "f16": np.float16, "bf16": ml_dtypes.bfloat16}
# |got - ref| <= TOL * max|ref| of that gradient: f32 products throughout; P and dS rounded to the input
# dtype before the tensor-core products (f16: 2^-11, bf16: 2^-8 relative), the result once to grad's dtype
TOL = {"f32": 2e-5, "f16": 4e-3, "bf16": 3e-2}


def attention_grads(q, k, v, dout, causal, scale=None):
    """float64 dq, dk, dv of L = sum(dout * O), O = softmax(scale q k^T [causal, bottom-right]) v, for
    [batch, seq, heads, head_dim] arrays (v and dout may have another head_dim: v_head_dim); GQA: k/v heads
    shared by heads_q / heads_kv query heads."""
    q, k, v, do = (np.asarray(t, dtype=np.float64) for t in (q, k, v, dout))
    sq, hq, d = q.shape[1], q.shape[2], q.shape[3]
    sk, hkv = k.shape[1], k.shape[2]
    g = hq // hkv
    sc = 1 / np.sqrt(d) if scale is None else scale
    kr, vr = np.repeat(k, g, axis=2), np.repeat(v, g, axis=2)
    s = np.einsum("bqhd,bkhd->bhqk", q, kr) * sc
    if causal:
        keep = np.arange(sk)[None, :] <= np.arange(sq)[:, None] + sk - sq
        s = np.where(keep, s, -np.inf)
    mx = s.max(-1, keepdims=True)
    mx = np.where(np.isfinite(mx), mx, 0)
    p = np.exp(s - mx)
    den = p.sum(-1, keepdims=True)
    p = np.divide(p, den, out=np.zeros_like(p), where=den > 0)  # rows that see no key: P = 0
    dv = np.einsum("bhqk,bqhd->bkhd", p, do)
    dp = np.einsum("bqhd,bkhd->bhqk", do, vr)
    ds = p * (dp - (p * dp).sum(-1, keepdims=True))
    dq = np.einsum("bhqk,bkhd->bqhd", ds, kr) * sc
    dk = np.einsum("bhqk,bqhd->bkhd", ds, q) * sc
    b = q.shape[0]
    dk = dk.reshape(b, sk, hkv, g, d).sum(3)
    dv = dv.reshape(b, sk, hkv, g, v.shape[3]).sum(3)
    return dq, dk, dv


def _check(got, ref, tol, what):
    got = np.asarray(got, dtype=np.float64)
    assert np.all(np.isfinite(got)), "%s: non-finite values" % what
    err = np.abs(got - ref).max()
    bound = tol * max(np.abs(ref).max(), 1e-30)
    assert err <= bound, "%s: max error %g > %g" % (what, err, bound)


def _inputs(dt, b, sq, sk, hq, hkv, d, seed):
    rng = np.random.default_rng(seed)
    q = rng.uniform(-1, 1, (b, sq, hq, d)).astype(NP[dt])
    k = rng.uniform(-1, 1, (b, sk, hkv, d)).astype(NP[dt])
    v = rng.uniform(-1, 1, (b, sk, hkv, d)).astype(NP[dt])
    do = rng.uniform(-1, 1, (b, sq, hq, d)).astype(NP[dt])
    return q, k, v, do


@pytest.mark.parametrize("dt,sm,causal,det,b,sq,sk,hq,hkv,d,path", [
    ("f32", 80, False, False, 2, 11, 13, 2, 2, 32, "auto"),    # SIMT
    ("f16", 75, True, False, 1, 20, 20, 2, 1, 64, "auto"),     # m16n8k8 on Turing, GQA
    ("bf16", 90, True, True, 1, 33, 18, 2, 2, 64, "auto"),     # m16n8k16, deterministic, rows that see no key
    ("bf16", 75, False, True, 1, 9, 30, 3, 1, 32, "auto"),     # bf16 on Turing: f16 mma, power-of-two scaled, MQA
    ("bf16", 75, True, False, 1, 20, 26, 2, 1, 64, "auto"),    # the same with the atomic dQ, GQA
    ("bf16", 75, False, True, 1, 9, 30, 3, 1, 32, "simt"),     # bf16 on Turing forced to SIMT
    ("f16", 80, False, False, 1, 17, 17, 1, 1, 128, "auto"),
])
def test_attention_backward_matches_float64(dt, sm, causal, det, b, sq, sk, hq, hkv, d, path):
    q, k, v, do = _inputs(dt, b, sq, sk, hq, hkv, d, seed=sq * 31 + d)
    dq, dk, dv = kiln.emulate.attention_backward(q, k, v, do, causal=causal, sm=sm, deterministic=det, path=path)
    assert dq.shape == q.shape and dk.shape == k.shape and dv.shape == v.shape
    assert dq.dtype == NP[dt] and dk.dtype == NP[dt] and dv.dtype == NP[dt]
    refs = attention_grads(q, k, v, do, causal)
    for name, got, ref in zip(("dq", "dk", "dv"), (dq, dk, dv), refs):
        _check(got, ref, TOL[dt], name)
    if causal and sq > sk:
        assert np.all(np.asarray(dq, np.float64)[:, :sq - sk] == 0)  # no key seen: gradient exactly 0


def test_given_forward_outputs_bhsd_layout_and_scale():
    q, k, v, do = _inputs("f32", 1, 12, 12, 2, 2, 64, seed=3)
    tb = [t.transpose(0, 2, 1, 3).copy() for t in (q, k, v, do)]  # torch's [batch, heads, seq, head_dim]
    o, lse = kiln.emulate.attention(*tb[:3], causal=True, scale=0.2, layout="bhsd", return_lse=True)
    grads = kiln.emulate.attention_backward(*tb, o=o, lse=lse, causal=True, scale=0.2, layout="bhsd", twice=True)
    refs = attention_grads(q, k, v, do, True, scale=0.2)
    for name, got, ref in zip(("dq", "dk", "dv"), grads, refs):
        assert got.shape == tb[0 if name == "dq" else 1].shape
        _check(got.transpose(0, 2, 1, 3), ref, TOL["f32"], name)


@pytest.mark.parametrize("dt,det,d", [("bf16", False, 64), ("f16", True, 128)])
def test_attention_backward_wgmma_sm90a(dt, det, d):
    """path="wgmma" on sm_90a: the forward's and the backward's TMA + wgmma kernels (dQ by atomics in dkdv, or by
    kernel=dq when deterministic), their tensor maps built from the launch lines, against float64."""
    q, k, v, do = _inputs(dt, 1, 70, 40, 2, 1, d, seed=5 + d)
    grads = kiln.emulate.attention_backward(q, k, v, do, causal=True, sm="90a", path="wgmma", deterministic=det)
    for name, got, ref in zip(("dq", "dk", "dv"), grads, attention_grads(q, k, v, do, True)):
        _check(got, ref, TOL[dt], name)


def test_deterministic_agrees_with_atomic():
    q, k, v, do = _inputs("f32", 1, 40, 40, 2, 2, 32, seed=9)
    a = kiln.emulate.attention_backward(q, k, v, do, sm=80)
    d = kiln.emulate.attention_backward(q, k, v, do, sm=80, deterministic=True)
    for x, y in zip(a, d):
        np.testing.assert_allclose(x, y, rtol=0, atol=1e-5 * np.abs(x).max())


def test_planted_error_is_caught():
    q, k, v, do = _inputs("f32", 1, 8, 8, 1, 1, 32, seed=1)
    dq, _, _ = kiln.emulate.attention_backward(q, k, v, do, sm=80)
    ref = attention_grads(q, k, v, do, False)[0]
    with pytest.raises(AssertionError):
        _check(dq, ref * 1.001, TOL["f32"], "dq")


def test_bad_arguments_say_why():
    q, k, v, do = _inputs("f16", 1, 4, 4, 2, 2, 64, seed=2)
    with pytest.raises(kiln.KilnArgumentError, match="both o and lse"):
        kiln.emulate.attention_backward(q, k, v, do, o=q)
    with pytest.raises(kiln.KilnArgumentError, match="dout"):
        kiln.emulate.attention_backward(q, k, v, do.astype(np.float32), o=q, lse=np.zeros((1, 2, 4), np.float32))
    with pytest.raises(kiln.KilnArgumentError, match="layout"):
        kiln.emulate.attention_backward(q, k, v, do, layout="sbhd")
    with pytest.raises(kiln.KilnArgumentError, match="multiple"):
        kiln.emulate.attention_backward(q, k[:, :, :1].repeat(3, 2), v[:, :, :1].repeat(3, 2), do)
