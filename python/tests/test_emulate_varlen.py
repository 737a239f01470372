"""kiln.emulate.attention_varlen / attention_varlen_backward (varlen=true): each packed sequence gives the dense
kernel's bits for that sequence; cu_seqlens checks; kiln.emulate.check(varlen=...)."""

import numpy as np
import pytest

import kiln

ml_dtypes = pytest.importorskip("ml_dtypes")
pytestmark = pytest.mark.skipif(not kiln.have_generator(), reason="needs the generator (libkiln)")

LENS_Q = [0, 1, 37, 70, 5]
LENS_K = [3, 0, 37, 65, 9]


def _cu(lens):
    return np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)


def _inputs(dt, hq, hkv, d, seed=0):
    rng = np.random.default_rng(seed)
    tq, tk = sum(LENS_Q), sum(LENS_K)
    q = rng.uniform(-1, 1, (tq, hq, d)).astype(dt)
    k = rng.uniform(-1, 1, (tk, hkv, d)).astype(dt)
    v = rng.uniform(-1, 1, (tk, hkv, d)).astype(dt)
    return q, k, v


# bf16 on sm_75: the f16-scaled mma path (auto's choice there) and SIMT, each bit for bit its dense kernel
@pytest.mark.parametrize("dt,sm,causal,path", [(np.float16, 80, True, "auto"), (np.float32, 80, "top_left", "auto"),
                                               (ml_dtypes.bfloat16, 75, True, "simt"), (ml_dtypes.bfloat16, 75, True, "mma")])
def test_forward_is_the_dense_kernel_per_sequence(dt, sm, causal, path):
    q, k, v = _inputs(dt, 4, 2, 32)
    cq, ck = _cu(LENS_Q), _cu(LENS_K)
    o, lse = kiln.emulate.attention_varlen(q, k, v, cq, ck, causal=causal, sm=sm, return_lse=True, window=(20, 3),
                                           path=path)
    assert o.shape == q.shape and lse.shape == (4, q.shape[0])
    for b, (lq, lk) in enumerate(zip(LENS_Q, LENS_K)):
        if lq == 0:
            continue
        rows = slice(cq[b], cq[b + 1])
        if lk == 0:  # no key: O = 0, lse = +inf (FA2)
            assert np.all(o[rows].astype(np.float64) == 0) and np.all(np.isposinf(lse[:, rows]))
            continue
        do, dl = kiln.emulate.attention(q[None, rows], k[None, ck[b]:ck[b + 1]], v[None, ck[b]:ck[b + 1]],
                                        causal=causal, sm=sm, return_lse=True, window=(20, 3), path=path)
        np.testing.assert_array_equal(o[rows].view(np.uint16 if o.itemsize == 2 else np.uint32),
                                      do[0].view(np.uint16 if o.itemsize == 2 else np.uint32))
        np.testing.assert_array_equal(lse[:, rows], dl[0])


def test_seqused_k_is_a_shorter_key_range():
    q, k, v = _inputs(np.float16, 2, 1, 32, seed=1)
    cq, ck = _cu(LENS_Q), _cu(LENS_K)
    used = np.array([2, 0, 30, 65, 0], np.int32)
    o = kiln.emulate.attention_varlen(q, k, v, cq, ck, seqused_k=used, sm=80)
    b = 2
    rows = slice(cq[b], cq[b + 1])
    do = kiln.emulate.attention(q[None, rows], k[None, ck[b]:ck[b] + 30], v[None, ck[b]:ck[b] + 30], sm=80)
    np.testing.assert_array_equal(o[rows].view(np.uint16), do[0].view(np.uint16))
    assert np.all(o[cq[4]:cq[5]].astype(np.float64) == 0)  # seqused_k 0: no key


def test_backward_is_the_dense_backward_per_sequence():
    q, k, v = _inputs(np.float32, 2, 1, 32, seed=2)
    rng = np.random.default_rng(3)
    dout = rng.uniform(-1, 1, q.shape).astype(np.float32)
    cq, ck = _cu(LENS_Q), _cu(LENS_K)
    dq, dk, dv = kiln.emulate.attention_varlen_backward(q, k, v, dout, cq, ck, causal=True, sm=80, deterministic=True)
    for b, (lq, lk) in enumerate(zip(LENS_Q, LENS_K)):
        rq, rk = slice(cq[b], cq[b + 1]), slice(ck[b], ck[b + 1])
        if lq == 0 or lk == 0:  # no queries: dK = dV = 0; no keys: dQ = 0
            assert np.all(dq[rq] == 0) and np.all(dk[rk] == 0) and np.all(dv[rk] == 0)
            continue
        g = kiln.emulate.attention_backward(q[None, rq], k[None, rk], v[None, rk], dout[None, rq], causal=True, sm=80,
                                            deterministic=True)
        for got, want in zip((dq[rq], dk[rk], dv[rk]), g):
            np.testing.assert_array_equal(got, want[0])


def test_bad_cu_seqlens_are_named():
    q, k, v = _inputs(np.float16, 2, 2, 32)
    cq, ck = _cu(LENS_Q), _cu(LENS_K)
    bad = cq.copy()
    bad[2], bad[3] = bad[3], bad[2]
    with pytest.raises(kiln.KilnArgumentError, match="cu_seqlens_q is not monotone: \\[2\\] = 38 > \\[3\\] = 1"):
        kiln.emulate.attention_varlen(q, k, v, bad, ck)
    with pytest.raises(kiln.KilnArgumentError, match="cu_seqlens_k\\[0\\] = 1; it starts at 0"):
        kiln.emulate.attention_varlen(q, k, v, cq, ck + 1)
    with pytest.raises(kiln.KilnArgumentError, match="cu_seqlens_q ends at 113 but q has 114 rows"):
        kiln.emulate.attention_varlen(np.concatenate([q, q[:1]]), k, v, cq, ck)
    with pytest.raises(kiln.KilnArgumentError, match="cu_seqlens_q has 6 entries and cu_seqlens_k 5"):
        kiln.emulate.attention_varlen(q, k, v, cq, _cu(LENS_K[:3] + [sum(LENS_K[3:])]))
    with pytest.raises(kiln.KilnArgumentError, match="max_seqlen_q=50 is less than the longest sequence \\(70\\)"):
        kiln.emulate.attention_varlen(q, k, v, cq, ck, max_seqlen_q=50)
    with pytest.raises(kiln.KilnArgumentError, match="seqused_k\\[1\\] = 1; valid: 0..0"):
        kiln.emulate.attention_varlen(q, k, v, cq, ck, seqused_k=np.array([0, 1, 0, 0, 0], np.int32))
    with pytest.raises(kiln.KilnArgumentError, match="must be packed \\[total, heads, head_dim\\]"):
        kiln.emulate.attention_varlen(q[None], k, v, cq, ck)


def test_check_runs_varlen_cases():
    r = kiln.emulate.check("attention dtype=bf16 head_dim=32 causal=true varlen=true", sm=80, varlen=[0, 1, 37, 20],
                           varlen_k=[4, 0, 37, 19], heads=(2, 1))
    assert r.passed and "varlen 4 sequences" in r.problem, r.outputs
    r = kiln.emulate.check("attention_bwd dtype=f16 head_dim=32 causal=true varlen=true", sm=75, varlen=[3, 0, 17])
    assert r.passed and [o["name"] for o in r.outputs] == ["dq", "dk", "dv"], r.outputs
    with pytest.raises(kiln.KilnArgumentError, match="varlen_k has 1 entries for 2 sequences"):
        kiln.emulate.check("attention varlen=true", sm=80, varlen=[1, 2], varlen_k=[3])
    with pytest.raises(kiln.KilnArgumentError, match="varlen=\\[1, -2\\]; valid"):
        kiln.emulate.check("attention varlen=true", sm=80, varlen=[1, -2])
    with pytest.raises(kiln.KilnError, match="varlen=true needs the sequence lengths"):
        kiln.emulate.check("attention varlen=true", sm=80, rows=4)


def test_varlen_dropout_mask_and_backward():
    """dropout on packed sequences: the keep mask holds a bit for each visible pair (keep rate near 1 - p), sequences
    of equal length draw different masks (the key holds the sequence's index, as FA2's); p = 0 equals no dropout bit
    for bit forward and backward, p = 0.4 changes the gradients (the backward applies the mask); return_mask needs
    dropout. (The dense kernel's mask bit for bit: tests/attention_varlen_dropout_test.c.)"""
    lens = [20, 20, 20]
    rng = np.random.default_rng(5)
    q, k, v = (rng.uniform(-1, 1, (60, 2, 32)).astype(np.float16) for _ in range(3))
    cu = _cu(lens)
    o, mask = kiln.emulate.attention_varlen(q, k, v, cu, cu, causal=True, sm=80, dropout=(0.4, 9, 0), return_mask=True)
    assert mask.shape == (3, 2, 20, 20)
    vis = np.tril(np.ones((20, 20), bool))
    assert ((mask >= 0) | ~vis[None, None]).all() and set(np.unique(mask[:, :, vis])) <= {0, 1}
    n = vis.sum() * 6
    assert 0.4 * n * 0.8 < (mask[:, :, vis] == 0).sum() < 0.4 * n * 1.2
    assert not np.array_equal(mask[0], mask[1]) and not np.array_equal(mask[1], mask[2])
    plain = kiln.emulate.attention_varlen(q, k, v, cu, cu, causal=True, sm=80)
    zero = kiln.emulate.attention_varlen(q, k, v, cu, cu, causal=True, sm=80, dropout=(0.0, 9, 0))
    assert np.array_equal(plain.view(np.uint16), zero.view(np.uint16))
    dout = rng.uniform(-1, 1, (60, 2, 32)).astype(np.float16)
    g0 = kiln.emulate.attention_varlen_backward(q, k, v, dout, cu, cu, causal=True, sm=80, dropout=(0.0, 9, 0))
    gp = kiln.emulate.attention_varlen_backward(q, k, v, dout, cu, cu, causal=True, sm=80)
    assert all(np.array_equal(a.view(np.uint16), b.view(np.uint16)) for a, b in zip(g0, gp))
    g4 = kiln.emulate.attention_varlen_backward(q, k, v, dout, cu, cu, causal=True, sm=80, dropout=(0.4, 9, 0))
    assert not np.array_equal(g4[2], gp[2])
    with pytest.raises(kiln.KilnArgumentError, match="return_mask=True returns the dropout keep mask"):
        kiln.emulate.attention_varlen(q, k, v, cu, cu, return_mask=True)
