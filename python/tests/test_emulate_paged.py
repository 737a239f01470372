"""kiln.emulate.attention_kvcache (python/kiln/_attn_paged.py): the paged KV-cache kernel (paged=true, append=true) on
numpy arrays against a float64 reference, the in-place append, and the errors naming bad input."""

import numpy as np
import pytest

import kiln
from kiln import emulate

pytestmark = pytest.mark.skipif(not kiln.have_generator(), reason="needs the generator (libkiln)")


def _reference(q, keys, vals, causal):
    """float64 attention of q (sq, hq, d) over keys/vals (n, hkv, d), causal bottom-right."""
    sq, hq, d = q.shape
    n, hkv = keys.shape[0], keys.shape[1]
    out = np.zeros((sq, hq, d))
    for h in range(hq):
        s = q[:, h].astype(np.float64) @ keys[:, h // (hq // hkv)].astype(np.float64).T / np.sqrt(d)
        if causal:
            s = np.where(np.arange(n)[None, :] > np.arange(sq)[:, None] + n - sq, -np.inf, s)
        p = np.exp(s - s.max(1, keepdims=True))
        out[:, h] = (p / p.sum(1, keepdims=True)) @ vals[:, h // (hq // hkv)].astype(np.float64)
    return out


@pytest.mark.parametrize("leftpad", [False, True])
def test_paged_append_matches_float64_and_writes_the_pages(leftpad):
    rng = np.random.default_rng(3)
    b, sq, hq, hkv, d, page, nb, sn = 2, 3, 4, 2, 32, 16, 8, 2
    q = rng.standard_normal((b, sq, hq, d)).astype(np.float32)
    kc = rng.standard_normal((nb, page, hkv, d)).astype(np.float32)
    vc = rng.standard_normal((nb, page, hkv, d)).astype(np.float32)
    table = np.array([[5, 1, 7], [0, 3, 2]], np.int32)
    lens = np.array([20, 9], np.int32)
    pads = np.array([4, 0], np.int32) if leftpad else None
    kn = rng.standard_normal((b, sn, hkv, d)).astype(np.float32)
    vn = rng.standard_normal((b, sn, hkv, d)).astype(np.float32)
    k0, v0 = kc.copy(), vc.copy()
    o, lse = emulate.attention_kvcache(q, kc, vc, table, lens, cache_leftpad=pads, k_new=kn, v_new=vn, causal=True,
                                       return_lse=True)
    assert lse.shape == (b, hq, sq)
    for i in range(b):
        dense_k, dense_v = k0[table[i]].reshape(-1, hkv, d).copy(), v0[table[i]].reshape(-1, hkv, d).copy()
        dense_k[lens[i]:lens[i] + sn], dense_v[lens[i]:lens[i] + sn] = kn[i], vn[i]
        lp = 0 if pads is None else pads[i]
        ref = _reference(q[i], dense_k[lp:lens[i] + sn], dense_v[lp:lens[i] + sn], True)
        assert np.abs(o[i] - ref).max() < 2e-5
        got_k = kc[table[i]].reshape(-1, hkv, d)
        assert np.array_equal(got_k[lens[i]:lens[i] + sn], kn[i])
        assert np.array_equal(got_k[:lens[i]], k0[table[i]].reshape(-1, hkv, d)[:lens[i]])


def test_bad_input_names_the_problem():
    q = np.zeros((1, 1, 2, 32), np.float32)
    small = np.zeros((4, 8, 1, 32), np.float32)
    with pytest.raises(kiln.KilnArgumentError, match="page_size 8 does not fit"):
        emulate.attention_kvcache(q, small, small.copy(), np.zeros((1, 2), np.int32), np.array([3], np.int32))
    cache = np.zeros((4, 16, 1, 32), np.float32)
    with pytest.raises(kiln.KilnArgumentError, match="block_table must be int32"):
        emulate.attention_kvcache(q, cache, cache.copy(), np.zeros((2, 2), np.int32), np.array([3], np.int32))
    with pytest.raises(kiln.KilnArgumentError, match="k_new and v_new go together"):
        emulate.attention_kvcache(q, cache, cache.copy(), np.zeros((1, 2), np.int32), np.array([3], np.int32),
                                  k_new=np.zeros((1, 1, 1, 32), np.float32))
