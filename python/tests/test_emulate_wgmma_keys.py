"""kiln.emulate reaches path=wgmma's keys on sm_90a (templates/lib/attn_wgmma_keys.lua) through the launch
description alone: attention_varlen on the TMA + wgmma kernel (maps over the packed tensors) against float64 per
sequence, and check() over split-KV (the wgmma split kernel, then attention_combine)."""

import numpy as np
import pytest

import kiln
from conftest import attention_reference

pytestmark = pytest.mark.skipif(not kiln.have_generator(), reason="needs the generator (libkiln)")

LENS_Q = [0, 1, 37, 70]
LENS_K = [3, 0, 64, 65]


def _cu(lens):
    return np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)


def test_varlen_on_wgmma_matches_float64_per_sequence():
    rng = np.random.default_rng(3)
    d, hq, hkv = 64, 4, 2
    q = rng.uniform(-1, 1, (sum(LENS_Q), hq, d)).astype(np.float16)
    k = rng.uniform(-1, 1, (sum(LENS_K), hkv, d)).astype(np.float16)
    v = rng.uniform(-1, 1, (sum(LENS_K), hkv, d)).astype(np.float16)
    cq, ck = _cu(LENS_Q), _cu(LENS_K)
    o, lse = kiln.emulate.attention_varlen(q, k, v, cq, ck, causal=True, sm="90a", path="wgmma", return_lse=True)
    assert o.shape == q.shape and lse.shape == (hq, q.shape[0])
    for b, (lq, lk) in enumerate(zip(LENS_Q, LENS_K)):
        rows = slice(cq[b], cq[b + 1])
        if lq == 0:
            continue
        if lk == 0:  # no key: O = 0, lse = +inf (FA2)
            assert np.all(o[rows].astype(np.float64) == 0) and np.all(np.isposinf(lse[:, rows]))
            continue
        ref, ref_lse = attention_reference(q[None, rows], k[None, ck[b]:ck[b + 1]], v[None, ck[b]:ck[b + 1]], True)
        assert np.max(np.abs(o[rows].astype(np.float64) - ref[0])) < 2e-3
        got, want = lse[:, rows], ref_lse[0]  # (+inf for a row the bottom-right diagonal leaves without keys)
        assert np.array_equal(np.isposinf(got), np.isposinf(want))
        fin = np.isfinite(want)
        assert np.max(np.abs(got[fin] - want[fin])) < 1e-4


def test_splitkv_on_wgmma_runs_the_combine_after():
    r = kiln.emulate.check("attention dtype=bf16 head_dim=64 causal=true splitkv=true path=wgmma", sm="90a", rows=40,
                           seq_k=200, heads=(2, 1), splits=3)
    assert r.passed, r.outputs
    assert [x["entry"].startswith("kiln_attention_combine") for x in r.launches] == [False, True]
    assert "wgmma" in r.launches[0]["entry"]


def test_dropout_mask_is_the_fa2_kernels():
    """The same seed and offset give the wgmma kernel the FA2 kernel's keep bits (Philox on the S fragment)."""
    rng = np.random.default_rng(5)
    d, hq, hkv = 64, 2, 1
    q = rng.uniform(-1, 1, (sum(LENS_Q), hq, d)).astype(np.float16)
    k = rng.uniform(-1, 1, (sum(LENS_K), hkv, d)).astype(np.float16)
    v = rng.uniform(-1, 1, (sum(LENS_K), hkv, d)).astype(np.float16)
    cq, ck = _cu(LENS_Q), _cu(LENS_K)
    masks = {}
    for path in ("wgmma", "auto"):
        _, masks[path] = kiln.emulate.attention_varlen(q, k, v, cq, ck, causal=True, sm="90a", path=path,
                                                       dropout=(0.25, 0x1234567890, 77), return_mask=True)
    both = (masks["wgmma"] >= 0) & (masks["auto"] >= 0)  # -1: a pair the kernel's tiles did not visit
    assert both.sum() > 1000
    np.testing.assert_array_equal(masks["wgmma"][both], masks["auto"][both])
    assert 0.15 < 1 - masks["wgmma"][both].mean() < 0.35


@pytest.mark.parametrize("det,causal", [(False, False), (True, True)])
def test_varlen_backward_on_wgmma_is_the_dense_wgmma_backward_per_sequence(det, causal):
    """attention_varlen_backward(path="wgmma", sm="90a"): the dkdv kernel's maps over the packed tensors (boxes from
    each sequence's first row, the next sequence's rows masked), dQ by atomics or the deterministic dq kernel; each
    sequence's gradients are the dense wgmma backward's of that sequence alone (not causal: sequence 2's second
    block of 64 keys is sequence 3's rows, seen by its queries unless masked)."""
    rng = np.random.default_rng(7)
    d, hq, hkv = 64, 2, 1
    q = rng.uniform(-1, 1, (sum(LENS_Q), hq, d)).astype(np.float16)
    k = rng.uniform(-1, 1, (sum(LENS_K), hkv, d)).astype(np.float16)
    v = rng.uniform(-1, 1, (sum(LENS_K), hkv, d)).astype(np.float16)
    dout = rng.uniform(-1, 1, q.shape).astype(np.float16)
    cq, ck = _cu(LENS_Q), _cu(LENS_K)
    dq, dk, dv = kiln.emulate.attention_varlen_backward(q, k, v, dout, cq, ck, causal=causal, sm="90a", path="wgmma",
                                                        deterministic=det)
    for b, (lq, lk) in enumerate(zip(LENS_Q, LENS_K)):
        rq, rk = slice(cq[b], cq[b + 1]), slice(ck[b], ck[b + 1])
        if lq == 0 or lk == 0:  # no queries: dK = dV = 0; no keys: dQ = 0
            assert np.all(dq[rq].astype(np.float64) == 0) and np.all(dk[rk].astype(np.float64) == 0)
            assert np.all(dv[rk].astype(np.float64) == 0)
            continue
        g = kiln.emulate.attention_backward(q[None, rq], k[None, rk], v[None, rk], dout[None, rq], causal=causal, sm="90a",
                                            path="wgmma", deterministic=det)
        for got, want in zip((dq[rq], dk[rk], dv[rk]), g):
            np.testing.assert_array_equal(got.view(np.uint16), want[0].view(np.uint16))
