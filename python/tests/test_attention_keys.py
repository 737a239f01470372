"""Issue 24's attention keys from Python: kiln.emulate.attention/attention_backward (window, softcap,
alibi_slopes, causal="top_left") against a float64 numpy reference, and kiln.Runtime's typed attention
methods (spec keys and launch values on the fake driver), with their argument errors."""

import ctypes
import struct

import numpy as np
import pytest

import kiln
import kiln.emulate as ke
from conftest import FakeLaunch


def _reference(q, k, v, causal, window, softcap, slopes, scale=None):
    """float64 O of [b, s, h, d] arrays with the keys (docs/attention.md), and lse [b, hq, sq]."""
    q, k, v = (np.asarray(t, np.float64) for t in (q, k, v))
    b, sq, hq, d = q.shape
    sk, hkv = k.shape[1], k.shape[2]
    sc = 1 / np.sqrt(d) if scale is None else scale
    i, j = np.arange(sq)[:, None], np.arange(sk)[None]
    shift = sk - sq
    vis = np.ones((sq, sk), bool)
    if causal == "top_left":
        vis &= j <= i
    elif causal:
        vis &= j <= i + shift
    if window is not None:
        if window[0] >= 0:
            vis &= j >= i + shift - window[0]
        if window[1] >= 0:
            vis &= j <= i + shift + window[1]
    o = np.zeros((b, sq, hq, d))
    lse = np.full((b, hq, sq), np.inf)
    for bb in range(b):
        for h in range(hq):
            s = q[bb, :, h] @ k[bb, :, h // (hq // hkv)].T * sc
            if softcap:
                s = softcap * np.tanh(s / softcap)
            if slopes is not None:
                sl = slopes[h] if slopes.ndim == 1 else slopes[bb, h]
                s = s - sl * np.abs(i + shift - j)
            s = np.where(vis, s, -np.inf)
            m = s.max(1, keepdims=True)
            seen = np.isfinite(m)[:, 0]
            p = np.exp(s - np.where(np.isfinite(m), m, 0))
            den = p.sum(1)
            o[bb, seen, h] = (p[seen] / den[seen, None]) @ v[bb, :, h // (hq // hkv)]
            lse[bb, h, seen] = m[seen, 0] + np.log(den[seen])
    return o, lse


CASES = [  # causal, window, softcap, slopes shape ("h", "bh" or None), seq_q, seq_k
    ("top_left", (6, 1), 5.0, "bh", 9, 13),
    (True, (3, 0), None, None, 20, 20),
    (False, None, 2.0, "h", 5, 17),
    ("top_left", None, None, None, 17, 9),  # torch's is_causal with seq_q > seq_k
]


@pytest.mark.parametrize("case", CASES, ids=[str(i) for i in range(len(CASES))])
def test_emulate_forward_keys(case):
    causal, window, softcap, sh, sq, sk = case
    rng = np.random.default_rng(7)
    b, hq, hkv, d = 2, 4, 2, 32
    q = rng.standard_normal((b, sq, hq, d)).astype(np.float16)
    k = rng.standard_normal((b, sk, hkv, d)).astype(np.float16)
    v = rng.standard_normal((b, sk, hkv, d)).astype(np.float16)
    slopes = None
    if sh:
        h = 2.0 ** (-8.0 * np.arange(1, hq + 1) / hq)
        slopes = (h if sh == "h" else np.stack([h, 2 * h])).astype(np.float32)
    o, lse = ke.attention(q, k, v, causal=causal, window=window, softcap=softcap, alibi_slopes=slopes, sm=80,
                          return_lse=True)
    ro, rl = _reference(q, k, v, causal, window, softcap, slopes)
    assert np.abs(o.astype(np.float64) - ro).max() < 4e-3
    fin = np.isfinite(rl)
    assert np.array_equal(np.isfinite(lse), fin) and np.abs(lse[fin] - rl[fin]).max() < 1e-4


def test_emulate_backward_keys_match_finite_differences_of_the_reference():
    rng = np.random.default_rng(3)
    b, sq, sk, hq, hkv, d = 1, 7, 11, 2, 1, 32
    q, k, v = (rng.standard_normal(s).astype(np.float32) * 0.5
               for s in ((b, sq, hq, d), (b, sk, hkv, d), (b, sk, hkv, d)))
    dout = rng.standard_normal((b, sq, hq, d)).astype(np.float32)
    slopes = np.array([0.25, 0.0625], np.float32)
    kw = dict(causal="top_left", window=(5, 2), softcap=3.0)
    for det in (False, True):
        dq, dk, dv = ke.attention_backward(q, k, v, dout, sm=80, deterministic=det, alibi_slopes=slopes, **kw)
        # directional derivative of sum(dout * O) along a random direction, central differences in float64
        for x, g, n in ((q, dq, 0), (k, dk, 1), (v, dv, 2)):
            u = rng.standard_normal(x.shape)
            args = [q.astype(np.float64), k.astype(np.float64), v.astype(np.float64)]
            f = []
            for sgn in (1, -1):
                a = list(args)
                a[n] = args[n] + sgn * 1e-5 * u
                f.append((dout * _reference(*a, kw["causal"], kw["window"], kw["softcap"], slopes)[0]).sum())
            want = (f[0] - f[1]) / 2e-5
            assert abs((g.astype(np.float64) * u).sum() - want) < 1e-3 * (1 + abs(want)), (det, n)


def test_emulate_key_errors():
    q = np.zeros((1, 4, 2, 32), np.float16)
    with pytest.raises(kiln.KilnArgumentError, match="window=.*valid: \\(left, right\\)"):
        ke.attention(q, q, q, window=(1,))
    with pytest.raises(kiln.KilnArgumentError, match="window=.*-1: unbounded"):
        ke.attention(q, q, q, window=(-2, 0))
    with pytest.raises(kiln.KilnArgumentError, match="softcap=-1.*> 0"):
        ke.attention(q, q, q, softcap=-1)
    with pytest.raises(kiln.KilnArgumentError, match="alibi_slopes has shape \\(3,\\)"):
        ke.attention(q, q, q, alibi_slopes=np.ones(3, np.float32))
    with pytest.raises(kiln.KilnArgumentError, match="causal='bottom'.*'top_left'"):
        ke.attention_backward(q, q, q, q, causal="bottom")


def _launch_at(fake_cuda, i):
    at = fake_cuda.dl.fake_cuda_launch_at
    at.argtypes = [ctypes.c_int, ctypes.POINTER(FakeLaunch)]
    f = FakeLaunch()
    assert at(i, ctypes.byref(f))
    return f


def _f32(bits):
    return struct.unpack("<f", struct.pack("<I", bits & 0xFFFFFFFF))[0]


def test_runtime_attention_keys(fake_cuda):
    rt = kiln.Runtime(disk_cache=False)
    b, sq, sk, hq, hkv, d = 2, 40, 70, 4, 2, 64
    q, o = rt.empty((b, sq, hq, d), "bf16"), rt.empty((b, sq, hq, d), "bf16")
    k, v = rt.empty((b, sk, hkv, d), "bf16"), rt.empty((b, sk, hkv, d), "bf16")
    lse = rt.empty((b, hq, sq), "f32")
    slopes = rt.empty((b, hq), "f32")
    kw = dict(causal="top_left", window=(16, -1), softcap=30.0, alibi_slopes=slopes)
    kern = rt.attention_kernel(o, q, k, v, lse=lse, **kw)
    assert kern.spec.endswith("causal=top_left path=auto window=true softcap=true alibi=true"), kern.spec
    fake_cuda.reset()
    rt.attention(o, q, k, v, lse=lse, **kw)
    launch = _launch_at(fake_cuda, 0)
    got = {p["name"]: launch.param[i] for i, p in enumerate(kern.meta["params"])}
    assert got["window_left"] == 16 and got["window_right"] == 0xFFFFFFFF and _f32(got["softcap"]) == 30.0
    assert got["alibi_slopes"] == slopes.ptr and got["alibi_stride"] == hq
    # the backward: dkdv gets the same keys
    dq, dout = rt.empty((b, sq, hq, d), "bf16"), rt.empty((b, sq, hq, d), "bf16")
    dk, dv = rt.empty((b, sk, hkv, d), "bf16"), rt.empty((b, sk, hkv, d), "bf16")
    a = dict(dq=dq, dk=dk, dv=dv, dout=dout, q=q, k=k, v=v, o=o, lse=lse)
    kerns = rt.attention_backward_kernels(**a, **kw)
    assert "window=true softcap=true alibi=true" in kerns[1].spec and "window" not in kerns[0].spec
    fake_cuda.reset()
    rt.attention_backward(**a, **kw)
    l1 = _launch_at(fake_cuda, 1)
    got = {p["name"]: l1.param[i] for i, p in enumerate(kerns[1].meta["params"])}
    assert got["window_left"] == 16 and _f32(got["softcap"]) == 30.0 and got["alibi_slopes"] == slopes.ptr
    with pytest.raises(kiln.KilnArgumentError, match="alibi_slopes must be contiguous f32"):
        rt.attention(o, q, k, v, alibi_slopes=rt.empty((hq,), "bf16"))
    with pytest.raises(kiln.KilnArgumentError, match="alibi_slopes has shape \\(3,\\)"):
        rt.attention(o, q, k, v, alibi_slopes=rt.empty((3,), "f32"))
    with pytest.raises(kiln.KilnArgumentError, match="causal=2"):
        rt.attention(o, q, k, v, causal=2)
