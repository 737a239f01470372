"""FlashAttention-2's test matrix (fa_matrix.py) on kiln.flash_attn against float64 torch: on a CUDA GPU (the GPU kit's
torch step) a fixed sample of the dense/varlen and KV-cache matrices (KILN_FA_FULL=1: all of it; KILN_FA_SAMPLE=n: n
cases each), on the CPU a small slice under kiln.torch.emulated() so CI exercises every check."""

import os

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (make setup installs the pinned one)")

import kiln  # noqa: E402
import kiln.flash_attn as fa  # noqa: E402
import fa_matrix as M  # noqa: E402

CUDA = torch.cuda.is_available()
SAMPLE = 10 ** 9 if os.environ.get("KILN_FA_FULL") == "1" else int(os.environ.get("KILN_FA_SAMPLE", "300"))


def _cu(lens, device):
    return torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), dtype=torch.int32, device=device)


def run_dense_case(case, device, batch=M.BATCH, nheads=M.NHEADS, seed=0):
    """One dense or varlen case of the matrix: forward (and backward where kiln has the head dim) within
    FlashAttention's error factors, dropout against the mask kiln applied; a head dim kiln does not generate must be
    refused naming it. Returns a dict of the errors."""
    dtype, d, (sq, sk), mha, causal, local, softcap, alibi, p, det, varlen = case
    g = torch.Generator().manual_seed(seed)
    hkv = max(1, nheads // M.MHA_TYPES[mha])
    grad = d % 8 == 0 and d <= 256  # kiln's backward takes every head dim its forward takes; others are refused
    q = torch.randn(batch, sq, nheads, d, generator=g).to(device, dtype).requires_grad_(grad)
    k = torch.randn(batch, sk, hkv, d, generator=g).to(device, dtype).requires_grad_(grad)
    v = torch.randn(batch, sk, hkv, d, generator=g).to(device, dtype).requires_grad_(grad)
    window = tuple(torch.randint(0, sk, (2,), generator=g).tolist()) if local else (-1, -1)
    slopes = (torch.rand(batch, nheads, generator=g) * 0.3).to(device) if alibi else None
    if varlen:  # FlashAttention's 'random' padding: each sequence max(1, s - 20) .. s long
        lq = torch.randint(max(1, sq - 20), sq + 1, (batch,), generator=g).tolist()
        lk = torch.randint(max(1, sk - 20), sk + 1, (batch,), generator=g).tolist()
    else:
        lq, lk = [sq] * batch, [sk] * batch
    kw = dict(causal=causal, window_size=window, softcap=softcap, alibi_slopes=slopes, deterministic=det)

    def run(q, k, v, p, **kw):
        if not varlen:
            return fa.flash_attn_func(q, k, v, dropout_p=p, **kw)
        pack = lambda t, lens: torch.cat([t[i, :n] for i, n in enumerate(lens)])  # noqa: E731
        return fa.flash_attn_varlen_func(pack(q, lq), pack(k, lk), pack(v, lk), _cu(lq, device), _cu(lk, device),
                                         max(lq), max(lk), dropout_p=p, **kw)

    def per_sequence(out):
        if not varlen:
            return list(out)
        bounds = _cu(lq, "cpu").tolist()
        return [out[bounds[i]:bounds[i + 1]] for i in range(batch)]

    if d % 8:
        with pytest.raises(kiln.KilnArgumentError, match="headdim %d" % d):
            run(q, k, v, p, **kw)
        return {"refused": d}
    keep = None
    if p > 0:
        probe = M.dropout_keep(lambda q_, k_, v_, p_: run(q_, k_, v_, p_), q.detach(), k.detach(), v.detach(), p,
                               seed + 1)  # (batch, hq, sq, sk), or packed (hq, total_q, sk): keys by position
        if varlen:  # each sequence's rows of the packed mask
            rq = _cu(lq, "cpu").tolist()
            keep = [probe[:, rq[i]:rq[i + 1], :lk[i]] for i in range(batch)]
        else:
            keep = list(probe)
    torch.manual_seed(seed + 1)
    got = per_sequence(run(q, k, v, p, **kw))

    def ref(dt):
        return [M.reference(q[i:i + 1, :lq[i]], k[i:i + 1, :lk[i]], v[i:i + 1, :lk[i]], causal, window, softcap,
                            None if slopes is None else slopes[i], None if keep is None else keep[i][None], p, dt)[0]
                for i in range(batch)]

    r64, rpt = ref(torch.float64), ref(dtype)
    flat = lambda ts: torch.cat([t.reshape(-1) for t in ts])  # noqa: E731
    out = {"out": M.within("out", flat(got), flat(r64), flat(rpt), M.FACTOR["out"])}
    if grad:
        dout = [torch.randn(t.shape, generator=g).to(device, dtype) for t in got]
        grads = torch.autograd.grad(got, (q, k, v), dout)
        g64 = torch.autograd.grad(r64, (q, k, v), [t.double() for t in dout])
        gpt = torch.autograd.grad(rpt, (q, k, v), dout)
        for n, a, b_, c in zip(("dq", "dk", "dv"), grads, g64, gpt):
            out[n] = M.within(n, a, b_, c, M.FACTOR["grad"])
    return out


def run_kvcache_case(case, device, batch=2, nheads=6, seed=0):
    """One KV-cache case: flash_attn_with_kvcache's output within 3x torch's low-precision error of float64, the new
    keys (rotated) and values written where cache_seqlens (and the block table) put them, other cache rows untouched;
    a head dim kiln does not generate refused naming it."""
    (dtype, d, (sq, sk), mha, causal, local, alibi, page, leftpad, batch_idx, new_kv, rot_frac, interleaved,
     num_splits) = case
    g = torch.Generator().manual_seed(seed)
    hkv = max(1, nheads // M.MHA_TYPES[mha])
    sn = sq if new_kv else 0
    bc = 5 if batch_idx else batch
    rows = sk if page is None else -(-sk // page) * page
    q = torch.randn(batch, sq, nheads, d, generator=g).to(device, dtype)
    kc = torch.randn(bc, rows, hkv, d, generator=g).to(device, dtype)
    vc = torch.randn(bc, rows, hkv, d, generator=g).to(device, dtype)
    knew = torch.randn(batch, sn, hkv, d, generator=g).to(device, dtype) if new_kv else None
    vnew = torch.randn(batch, sn, hkv, d, generator=g).to(device, dtype) if new_kv else None
    seqlens = torch.randint(0 if new_kv else 1, sk - sn + 1, (batch,), generator=g, dtype=torch.int32)
    pads = torch.stack([torch.randint(0, int(s) + 1, (), generator=g) for s in seqlens]).to(torch.int32) \
        if leftpad else None
    bidx = torch.randperm(bc, generator=g)[:batch].to(torch.int32) if batch_idx else None
    rdim = int(rot_frac * d) // 16 * 16
    cos = sin = None
    if rdim and new_kv:
        ang = torch.rand(2 * sk, rdim // 2, generator=g) * 2 * torch.pi
        cos, sin = ang.cos().to(device, dtype), ang.sin().to(device, dtype)
    window = tuple(torch.randint(0, sk, (2,), generator=g).tolist()) if local else (-1, -1)
    slopes = (torch.rand(batch, nheads, generator=g) * 0.3).to(device) if alibi else None
    kc0, vc0 = kc.clone(), vc.clone()
    table = None
    if page is not None:  # the dense rows of each picked cache entry as shuffled pages
        if batch_idx:
            return {"skipped": "cache_batch_idx does not go with block_table"}
        per = rows // page
        perm = torch.randperm(batch * per, generator=g)
        table = perm.view(batch, per).to(torch.int32)
        kp = torch.empty((batch * per, page, hkv, d), dtype=dtype, device=device)
        vp = torch.empty_like(kp)
        kp[perm.to(device)] = kc[:batch].reshape(batch * per, page, hkv, d)
        vp[perm.to(device)] = vc[:batch].reshape(batch * per, page, hkv, d)
    dev = lambda t: None if t is None else t.to(device)  # noqa: E731
    args = dict(rotary_cos=cos, rotary_sin=sin, cache_seqlens=dev(seqlens), cache_batch_idx=dev(bidx),
                cache_leftpad=dev(pads), block_table=dev(table), causal=causal, window_size=window,
                rotary_interleaved=interleaved, alibi_slopes=slopes, num_splits=num_splits)
    kcache, vcache = (kp, vp) if page is not None else (kc, vc)
    if d % 8:
        with pytest.raises(kiln.KilnArgumentError, match="headdim %d" % d):
            fa.flash_attn_with_kvcache(q, kcache, vcache, knew, vnew, **args)
        return {"refused": d}
    out = fa.flash_attn_with_kvcache(q, kcache, vcache, knew, vnew, **args)
    if page is not None:  # back to each entry's dense rows
        kc, vc = kp[table.to(device).long()].reshape(batch, rows, hkv, d), vp[table.to(device).long()].reshape(
            batch, rows, hkv, d)
    r64, rpt = [], []
    for i in range(batch):
        r = int(bidx[i]) if batch_idx else i
        s, lp = int(seqlens[i]), int(pads[i]) if leftpad else 0
        kn, vn = (knew[i], vnew[i]) if new_kv else (kc0[r, :0], vc0[r, :0])
        pos = torch.arange(s, s + sn)  # cache positions, leftpad or not (FA2's test)
        qi = q[i]
        if cos is not None:
            kn = M.rotate(kn, cos, sin, pos, interleaved)
            qi = M.rotate(q[i], cos, sin, pos if (causal or local) else torch.full((sq,), s), interleaved)
        written = kc[r, s:s + sn]
        assert M.err(written, kn) <= (0 if cos is None else 2 * M.err(kn.to(dtype), kn) + 1e-6), "appended keys"
        assert torch.equal(vc[r, s:s + sn], vnew[i] if new_kv else vc0[r, :0]), "appended values"
        assert torch.equal(kc[r, :s], kc0[r, :s]) and torch.equal(kc[r, s + sn:], kc0[r, s + sn:]), "cache rows"
        keys = torch.cat([kc0[r, lp:s].double(), kn.double()])
        vals = torch.cat([vc0[r, lp:s].double(), vn.double()])
        sl = None if slopes is None else slopes[i]
        for dt, acc in ((torch.float64, r64), (dtype, rpt)):
            acc.append(M.reference(qi[None], keys[None], vals[None], causal, window, 0.0, sl, dtype=dt)[0])
    if batch_idx:  # entries not picked stay as they were
        for r in set(range(bc)) - set(bidx.tolist()):
            assert torch.equal(kc[r], kc0[r]) and torch.equal(vc[r], vc0[r]), "cache row %d" % r
    return {"out": M.within("out", out, torch.stack(r64), torch.stack(rpt), M.FACTOR["kvcache"])}


# ---- on a CUDA GPU: the matrix ----

# without a GPU: no cases (one skip each, not hundreds)
DENSE = M.sample(M.dense_cases(), SAMPLE) if CUDA else []
KVCACHE = M.sample(M.kvcache_cases(), SAMPLE, seed=1) if CUDA else []


@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU (the GPU kit's torch step runs it); the CPU slice runs below")
@pytest.mark.parametrize("case", DENSE, ids=str)
def test_gpu_fa_dense_and_varlen_matrix(case):
    run_dense_case(case, "cuda")


@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU (the GPU kit's torch step runs it); the CPU slice runs below")
@pytest.mark.parametrize("case", KVCACHE, ids=str)
def test_gpu_fa_kvcache_matrix(case):
    run_kvcache_case(case, "cuda")


# ---- on the CPU: a slice under the emulator (small batch and head counts; the matrix's smallest shapes) ----

H, B = torch.float16, torch.bfloat16
CPU_DENSE = [  # (dtype, d, seqlens, mha, causal, local, softcap, alibi, dropout_p, deterministic, varlen)
    (H, 64, (113, 203), "gqa", True, False, 0.0, False, 0.0, False, False),
    (B, 32, (128, 217), "mha", False, True, 50.0, True, 0.0, True, False),
    (H, 32, (113, 211), "mqa", True, False, 0.0, False, 0.17, False, False),
    (B, 64, (108, 256), "gqa", True, True, 0.0, True, 0.0, False, True),
    (H, 40, (113, 203), "mha", False, False, 50.0, False, 0.0, False, True),
    (H, 32, (113, 203), "gqa", True, False, 0.0, False, 0.17, False, True),  # varlen dropout: the varlen kernel
    (H, 59, (113, 203), "mha", False, False, 0.0, False, 0.0, False, False),
]
CPU_KVCACHE = [  # (dtype, d, seqlens, mha, causal, local, alibi, page, leftpad, batch_idx, new_kv, rotary fraction,
    # interleaved, num_splits)
    (H, 64, (1, 339), "gqa", True, False, False, 256, True, False, True, 0.0, False, 0),
    (B, 32, (3, 128), "mha", True, True, False, None, False, True, True, 0.5, True, 1),
    (H, 32, (1, 128), "mqa", False, False, True, None, True, False, False, 0.0, False, 0),
    (H, 59, (1, 128), "mha", True, False, False, None, False, False, True, 0.0, False, 0),
]


@pytest.mark.parametrize("case", CPU_DENSE, ids=str)
def test_cpu_slice_dense_and_varlen(emu, case):
    r = run_dense_case(case, "cpu", batch=2, nheads=3)
    assert r.get("refused") == case[1] if case[1] % 8 else "out" in r


@pytest.mark.parametrize("case", CPU_KVCACHE, ids=str)
def test_cpu_slice_kvcache(emu, case):
    r = run_kvcache_case(case, "cpu", nheads=3)
    assert r.get("refused") == case[1] if case[1] % 8 else "out" in r


def test_the_yardstick_rejects_a_planted_error():
    """within() fails an output one bf16 ulp-scale nudge worse than factor x torch's error (the rule has teeth)."""
    ref = torch.linspace(-1, 1, 64, dtype=torch.float64)
    pt = ref + 1e-3
    M.within("ok", ref + 1.9e-3, ref, pt, 2.0)
    with pytest.raises(AssertionError, match="kiln's error"):
        M.within("bad", ref + 2.2e-3, ref, pt, 2.0)
