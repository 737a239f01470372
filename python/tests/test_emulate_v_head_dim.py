"""v_head_dim in kiln's Python front ends without torch: kiln.emulate.attention and attention_backward with v (and o,
dout, dv) of another head dim than q and k (MLA's qk 192 / v 128 among them) against float64 numpy, kiln.Runtime's
typed helpers passing v_head_dim to the C runtime (the fake CUDA driver), and the one-line refusals where the
kernels are not built with it (varlen, paged)."""

import numpy as np
import pytest

import kiln
from conftest import attention_reference
from devarrays import CAIArray
from test_emulate_attention_bwd import TOL, _check, attention_grads

ml_dtypes = pytest.importorskip("ml_dtypes")
NP = {"f32": np.float32, "f16": np.float16, "bf16": ml_dtypes.bfloat16}


def _qkv(dt, b, sq, sk, hq, hkv, d, dv, seed):
    rng = np.random.default_rng(seed)
    q = rng.uniform(-1, 1, (b, sq, hq, d)).astype(NP[dt])
    k = rng.uniform(-1, 1, (b, sk, hkv, d)).astype(NP[dt])
    v = rng.uniform(-1, 1, (b, sk, hkv, dv)).astype(NP[dt])
    do = rng.uniform(-1, 1, (b, sq, hq, dv)).astype(NP[dt])
    return q, k, v, do


# (dt, sm, causal, sq, sk, hq, hkv, d, dv): the tensor-core paths (m16n8k16, sm_75's m16n8k8 f16, and bf16 on sm_75,
# where path=auto runs the f16-scaled tensor-core path with v_head_dim: only an explicit path="mma" is refused there)
# and SIMT (f32)
CASES = [
    ("f16", 80, True, 9, 12, 2, 1, 192, 128),   # MLA prefill: qk 192, v 128 (256's tiles), GQA
    ("bf16", 90, False, 7, 10, 1, 1, 128, 64),
    ("f16", 75, True, 8, 8, 2, 2, 64, 128),     # v wider than q/k
    ("bf16", 75, True, 6, 9, 1, 1, 64, 32),     # bf16 on sm_75: path=auto's f16-scaled tensor cores
    ("f32", 80, False, 5, 11, 2, 1, 40, 24),    # padded dims both
]


@pytest.mark.parametrize("dt,sm,causal,sq,sk,hq,hkv,d,dv", CASES)
def test_forward_matches_float64(dt, sm, causal, sq, sk, hq, hkv, d, dv):
    q, k, v, _do = _qkv(dt, 1, sq, sk, hq, hkv, d, dv, seed=d + dv)
    o, lse = kiln.emulate.attention(q, k, v, causal=causal, sm=sm, return_lse=True)
    ref, ref_lse = attention_reference(q, k, v, causal)
    assert o.shape == (1, sq, hq, dv) and o.dtype == NP[dt] and lse.shape == (1, hq, sq)
    _check(o, ref, {"f32": 1e-4, "f16": 2e-3, "bf16": 1.6e-2}[dt], "o")
    _check(lse, ref_lse, 1e-4, "lse")
    # the scale defaults to 1/sqrt(q's head_dim), not v's
    o2 = kiln.emulate.attention(q, k, v, causal=causal, sm=sm, scale=1 / np.sqrt(d))
    assert np.array_equal(np.asarray(o2, np.float64), np.asarray(o, np.float64))


@pytest.mark.parametrize("dt,sm,causal,sq,sk,hq,hkv,d,dv", CASES)
def test_backward_matches_float64(dt, sm, causal, sq, sk, hq, hkv, d, dv):
    q, k, v, do = _qkv(dt, 1, sq, sk, hq, hkv, d, dv, seed=d * 3 + dv)
    det = dt == "bf16"
    dq, dk, dvg = kiln.emulate.attention_backward(q, k, v, do, causal=causal, sm=sm, deterministic=det)
    assert dq.shape == q.shape and dk.shape == k.shape and dvg.shape == v.shape
    for name, got, ref in zip(("dq", "dk", "dv"), (dq, dk, dvg), attention_grads(q, k, v, do, causal)):
        _check(got, ref, TOL[dt], name)


def test_bhsd_layout_and_given_forward():
    q, k, v, do = _qkv("f16", 1, 6, 6, 2, 2, 64, 32, seed=4)
    t = [np.ascontiguousarray(x.transpose(0, 2, 1, 3)) for x in (q, k, v, do)]  # [batch, heads, seq, head_dim]
    o, lse = kiln.emulate.attention(*t[:3], layout="bhsd", sm=80, return_lse=True)
    assert o.shape == (1, 2, 6, 32)
    grads = kiln.emulate.attention_backward(*t, o=o, lse=lse, layout="bhsd", sm=80)
    for name, got, ref in zip(("dq", "dk", "dv"), grads, attention_grads(q, k, v, do, False)):
        _check(np.asarray(got).transpose(0, 2, 1, 3), ref, TOL["f16"], name)


def test_refusals_name_the_rule():
    q, k, v, do = _qkv("f16", 1, 4, 4, 1, 1, 64, 32, seed=1)
    with pytest.raises(kiln.KilnArgumentError, match="v's head_dim 12 differs from q's 64; valid: q's head_dim, or a "
                                                     "multiple of 8 from 8 to 256"):
        kiln.emulate.attention(q, k, np.zeros((1, 4, 1, 12), np.float16), sm=80)
    with pytest.raises(kiln.KilnArgumentError, match=r"o has shape \(1, 4, 1, 64\); expected \(1, 4, 1, 32\)"):
        kiln.emulate.attention_backward(q, k, v, np.zeros((1, 4, 1, 64), np.float16), o=np.zeros((1, 4, 1, 64),
                                        np.float16), lse=np.zeros((1, 1, 4), np.float32), sm=80)
    with pytest.raises(kiln.KilnArgumentError, match=r"k has shape \(1, 4, 1, 64\) and v \(1, 5, 1, 32\); their "
                                                     r"batch, seq_k and heads_kv must match"):
        kiln.emulate.attention(q, k, np.zeros((1, 5, 1, 32), np.float16), sm=80)
    # sm_75 bf16's f16-scaled tensor-core path takes v_head_dim named (path="mma") as under path="auto": one kernel
    qb, kb, vb, _ = _qkv("bf16", 1, 4, 4, 1, 1, 64, 32, seed=1)
    assert np.array_equal(kiln.emulate.attention(qb, kb, vb, sm=75, path="mma"),
                          kiln.emulate.attention(qb, kb, vb, sm=75, path="auto"))
    # varlen and paged kernels are not built with v_head_dim: one line naming the kernel
    cu = np.array([0, 4], np.int32)
    pq, pk, pv = q[0], k[0], v[0]
    with pytest.raises(kiln.KilnArgumentError, match="the varlen kernel is not built with v_head_dim"):
        kiln.emulate.attention_varlen(pq, pk, pv, cu, cu, 4, 4, sm=80)
    with pytest.raises(kiln.KilnArgumentError, match="the varlen kernel is not built with v_head_dim"):
        kiln.emulate.attention_varlen_backward(pq, pk, pv, np.zeros((4, 1, 32), np.float16), cu, cu, sm=80)
    kc, vc = np.zeros((2, 16, 1, 64), np.float16), np.zeros((2, 16, 1, 32), np.float16)
    with pytest.raises(kiln.KilnArgumentError, match="the paged kernel is not built with v_head_dim"):
        kiln.emulate.attention_kvcache(q, kc, vc, np.array([[0, 1]], np.int32), np.array([4], np.int32), sm=80)


def test_runtime_passes_v_head_dim(fake_cuda):
    rt = kiln.Runtime(disk_cache=False)
    b, sq, sk, hq, hkv, d, dv = 1, 24, 40, 4, 2, 192, 128
    q, o = rt.empty((b, sq, hq, d), "bf16"), rt.empty((b, sq, hq, dv), "bf16")
    k, v = rt.empty((b, sk, hkv, d), "bf16"), rt.empty((b, sk, hkv, dv), "bf16")
    lse = rt.empty((b, hq, sq), "f32")
    kern = rt.attention_kernel(o, q, k, v, lse=lse, causal=True)
    assert kern.spec.startswith("attention dtype=bf16 out=bf16 head_dim=192 v_head_dim=128 causal=true"), kern.spec
    rt.attention(o, q, k, v, lse=lse, causal=True)
    launch = fake_cuda.last_launch()
    got = {p["name"]: launch.param[i] for i, p in enumerate(kern.meta["params"])}
    assert got["o"] == o.ptr and got["v"] == v.ptr
    assert (got["stride_os"], got["stride_vs"], got["stride_qs"]) == (hq * dv, hkv * dv, hq * d)
    # split-KV decoding: the workspace rows are v_head_dim + 1 floats, the combine kernel v_head_dim wide
    q1, o1, lse1 = rt.empty((b, 1, hq, d), "bf16"), rt.empty((b, 1, hq, dv), "bf16"), rt.empty((b, hq, 1), "f32")
    n, need = rt.attention_workspace(o1, q1, k, v, lse=lse1, splits=2)
    assert (n, need) == (2, 2 * b * hq * 1 * (dv + 1) * 4)
    rt.attention(o1, q1, k, v, lse=lse1, splits=2)
    assert fake_cuda.last_launch().entry.decode().startswith("kiln_attention_combine_bf16_%d" % dv)
    # the backward: every kernel of the sequence names v_head_dim
    dq, dk, dvv, dout = rt.empty(q.shape, "bf16"), rt.empty(k.shape, "bf16"), rt.empty(v.shape, "bf16"), rt.empty(
        o.shape, "bf16")
    ks = rt.attention_backward_kernels(dq, dk, dvv, dout, q, k, v, o, lse, causal=True)
    assert all("head_dim=192 v_head_dim=128" in kk.spec for kk in ks), [kk.spec for kk in ks]
    rt.attention_backward(dq, dk, dvv, dout, q, k, v, o, lse, causal=True)
    # o at q's head_dim, dv at k's: refused naming the shape expected
    with pytest.raises(kiln.KilnArgumentError, match=r"o has shape \(1, 24, 4, 192\); expected \(1, 24, 4, 128\)"):
        rt.attention(rt.empty(q.shape, "bf16"), q, k, v)
    with pytest.raises(kiln.KilnArgumentError, match=r"dv has shape \(1, 40, 2, 192\); expected \(1, 40, 2, 128\)"):
        rt.attention_backward(dq, dk, rt.empty(k.shape, "bf16"), dout, q, k, v, o, lse)
    # equal dims: the plain spec (v_head_dim left out)
    assert "v_head_dim" not in rt.attention_kernel(rt.empty(q.shape, "bf16"), q, k, rt.empty(k.shape, "bf16")).spec


def test_runtime_varlen_and_kvcache_refuse_v_head_dim(fake_cuda):
    rt = kiln.Runtime(disk_cache=False)
    q, o = rt.empty((8, 2, 64), "f16"), rt.empty((8, 2, 32), "f16")
    k, v = rt.empty((8, 2, 64), "f16"), rt.empty((8, 2, 32), "f16")
    keep = [rt.empty((8,), "f32") for _ in range(3)]  # int32 index arrays in the fake driver's memory
    cu, table, lens = (CAIArray(m.ptr, shape, "<i4") for m, shape in zip(keep, ((3,), (2, 2), (2,))))
    with pytest.raises(kiln.KilnArgumentError, match="attention_varlen: v's head_dim 32 differs from q/k's 64; the "
                                                     "varlen kernel is not built with v_head_dim"):
        rt.attention_varlen(o, q, k, v, cu, cu, 5, 5)
    qb, ob = rt.empty((2, 1, 2, 64), "f16"), rt.empty((2, 1, 2, 32), "f16")
    kc, vc = rt.empty((4, 16, 2, 64), "f16"), rt.empty((4, 16, 2, 32), "f16")
    with pytest.raises(kiln.KilnArgumentError, match="the paged kernel is not built with v_head_dim"):
        rt.attention_kvcache(ob, qb, kc, vc, table, lens)
