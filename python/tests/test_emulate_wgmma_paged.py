"""kiln.emulate.attention_kvcache reaches path=wgmma's paged KV cache on sm_90a (templates/lib/attn_wgmma_paged.lua)
with the FA2 paged kernel's arguments unchanged (the launch description adds only q's tensor map, which the launch
binds itself): shuffled pages of 16 rows, leftpad, GQA, causal, against float64 and against the FA2 kernel's result;
and check() over split-KV decoding on pages (the wgmma split kernel, then attention_combine)."""

import numpy as np
import pytest

import kiln
from kiln import emulate

pytestmark = pytest.mark.skipif(not kiln.have_generator(), reason="needs the generator (libkiln)")


def _reference(q, keys, vals):
    """float64 causal (bottom-right) attention of q (sq, hq, d) over keys/vals (n, hkv, d)."""
    sq, hq, d = q.shape
    n, hkv = keys.shape[0], keys.shape[1]
    out = np.zeros((sq, hq, d))
    for h in range(hq):
        s = q[:, h].astype(np.float64) @ keys[:, h // (hq // hkv)].astype(np.float64).T / np.sqrt(d)
        s = np.where(np.arange(n)[None, :] > np.arange(sq)[:, None] + n - sq, -np.inf, s)
        p = np.exp(s - s.max(1, keepdims=True))
        out[:, h] = (p / p.sum(1, keepdims=True)) @ vals[:, h // (hq // hkv)].astype(np.float64)
    return out


def test_kvcache_on_wgmma_matches_float64_and_the_fa2_kernel():
    rng = np.random.default_rng(7)
    b, sq, hq, hkv, d, page, nb = 2, 5, 4, 2, 64, 16, 12
    q = rng.uniform(-1, 1, (b, sq, hq, d)).astype(np.float16)
    kc = rng.uniform(-1, 1, (nb, page, hkv, d)).astype(np.float16)
    vc = rng.uniform(-1, 1, (nb, page, hkv, d)).astype(np.float16)
    table = np.array([[9, 2, 11, 4, 0, 7], [3, 10, 1, 8, 6, 5]], np.int32)
    lens = np.array([90, 37], np.int32)   # a tile of 64 keys spans 4 pages; the second entry ends mid-page
    pads = np.array([5, 19], np.int32)    # tiles start mid-page
    outs = {}
    for path, sm in (("wgmma", "90a"), ("auto", 80)):
        outs[path] = emulate.attention_kvcache(q, kc, vc, table, lens, cache_leftpad=pads, causal=True, sm=sm,
                                               path=path, return_lse=True)
    o, lse = outs["wgmma"]
    for i in range(b):
        keys = kc[table[i]].reshape(-1, hkv, d)[pads[i]:lens[i]]
        vals = vc[table[i]].reshape(-1, hkv, d)[pads[i]:lens[i]]
        ref = _reference(q[i], keys, vals)
        assert np.abs(o[i].astype(np.float64) - ref).max() < 2e-3
    assert np.abs(o.astype(np.float64) - outs["auto"][0].astype(np.float64)).max() < 2e-3
    assert np.abs(lse - outs["auto"][1]).max() < 1e-4


def test_splitkv_decoding_on_pages_runs_the_combine_after():
    r = emulate.check("attention dtype=bf16 head_dim=64 causal=true paged=true splitkv=true path=wgmma", sm="90a",
                      rows=1, seq_k=300, batch=3, heads=(4, 1), splits=3, page_size=32, leftpad=True)
    assert r.passed, r.outputs
    assert [x["entry"].startswith("kiln_attention_combine") for x in r.launches] == [False, True]
    assert "wgmma" in r.launches[0]["entry"]


def test_kvcache_on_wgmma_at_a_padded_dim_on_128_key_tiles():
    """d96 runs d128's tiles (128 keys, two panels, the second half zero-filled past head_dim) over pages of 16: a
    tile spans 8 pages; GQA 2:1, bottom-right causal, against float64 and the FA2 kernel."""
    rng = np.random.default_rng(11)
    b, sq, hq, hkv, d, page, nb = 2, 3, 4, 2, 96, 16, 24
    q = rng.uniform(-1, 1, (b, sq, hq, d)).astype(np.float16)
    kc = rng.uniform(-1, 1, (nb, page, hkv, d)).astype(np.float16)
    vc = rng.uniform(-1, 1, (nb, page, hkv, d)).astype(np.float16)
    table = rng.permutation(nb)[:2 * 11].reshape(2, 11).astype(np.int32)
    lens = np.array([170, 150], np.int32)  # two 128-key tiles each, the second a partial one
    pads = np.array([3, 21], np.int32)
    o, lse = emulate.attention_kvcache(q, kc, vc, table, lens, cache_leftpad=pads, causal=True, sm="90a",
                                       path="wgmma", return_lse=True)
    o2, lse2 = emulate.attention_kvcache(q, kc, vc, table, lens, cache_leftpad=pads, causal=True, sm=80,
                                         return_lse=True)
    for i in range(b):
        keys = kc[table[i]].reshape(-1, hkv, d)[pads[i]:lens[i]]
        vals = vc[table[i]].reshape(-1, hkv, d)[pads[i]:lens[i]]
        assert np.abs(o[i].astype(np.float64) - _reference(q[i], keys, vals)).max() < 2e-3
    assert np.abs(o.astype(np.float64) - o2.astype(np.float64)).max() < 2e-3
    assert np.abs(lse - lse2).max() < 1e-4
