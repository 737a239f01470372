"""kiln.flash_attn's varlen and KV-cache functions on kiln's varlen and paged kernels (kiln::flash_attention_varlen,
_backward and kiln::flash_attention_kvcache), under kiln.torch.emulated() on real torch: float64 references per
sequence, one kernel launch per call (spied), the composite path only where the kernels refuse, opcheck."""

import math

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (make setup installs the pinned one)")

import kiln._torch_emu as emu_rt  # noqa: E402
import kiln.flash_attn as fa  # noqa: E402
from test_torch_flash_attn import _close, _rotate, ref_attention  # noqa: E402


@pytest.fixture
def launches(monkeypatch):
    """Counts the emulated runtime's calls by method: which kernels ran (varlen, kvcache, the dense one, rotary)."""
    seen = {}
    for name in ("attention", "attention_varlen", "attention_varlen_backward", "attention_kvcache", "rotary"):
        real = getattr(emu_rt.EmulatedRuntime, name)

        def spy(self, *a, _real=real, _name=name, **kw):
            seen[_name] = seen.get(_name, 0) + 1
            return _real(self, *a, **kw)
        monkeypatch.setattr(emu_rt.EmulatedRuntime, name, spy)
    return seen


def _cu(lens):
    return torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), dtype=torch.int32)


def _packed(lens_q, lens_k, hq, hkv, d, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(sum(lens_q), hq, d, generator=g).to(dtype)
    k = torch.randn(sum(lens_k), hkv, d, generator=g).to(dtype)
    v = torch.randn(sum(lens_k), hkv, d, generator=g).to(dtype)
    return q, k, v


def _per_sequence(q, k, v, lens_q, lens_k, **kw):
    """float64 FlashAttention per sequence, packed back: (out (total_q, hq, d), lse (hq, total_q))."""
    outs, lses, a, c = [], [], 0, 0
    for lq, lk in zip(lens_q, lens_k):
        o, lse = ref_attention(q[a:a + lq][None], k[c:c + lk][None], v[c:c + lk][None], **kw)
        outs.append(o[0])
        lses.append(lse[0])
        a, c = a + lq, c + lk
    return torch.cat(outs), torch.cat(lses, 1)


# ---- varlen ----


@pytest.mark.parametrize("causal,window,det", [(True, (-1, -1), False), (False, (5, 2), True)])
def test_varlen_kernel_forward_backward_vs_float64(emu, launches, causal, window, det):
    """Lengths 0, 1, odd and long (past one 64-key tile), GQA: one varlen launch forward, one backward, no dense
    launch; output, lse and gradients within f16 tolerance of float64 per sequence."""
    lq, lk = [0, 1, 7, 70], [3, 1, 9, 75]
    q, k, v = _packed(lq, lk, 4, 2, 32, torch.float16, seed=21)
    for t in (q, k, v):
        t.requires_grad_()
    out, lse, _ = fa.flash_attn_varlen_func(q, k, v, _cu(lq), _cu(lk), max(lq), max(lk), causal=causal,
                                            window_size=window, deterministic=det, return_attn_probs=True)
    qr, kr, vr = (t.detach().double().requires_grad_() for t in (q, k, v))
    ref, ref_lse = _per_sequence(qr, kr, vr, lq, lk, causal=causal, window=window)
    _close(out, ref, torch.float16, "out")
    _close(lse, ref_lse, torch.float32, "lse", 30)
    dout = torch.randn(out.shape, generator=torch.Generator().manual_seed(22)).half()
    out.backward(dout)
    ref.backward(dout.double())
    for n, t, r in (("dq", q, qr), ("dk", k, kr), ("dv", v, vr)):
        _close(t.grad, r.grad, torch.float16, n, 4)
    assert launches == {"attention_varlen": 1, "attention_varlen_backward": 1}, launches


def test_varlen_kernel_softcap_alibi_and_rows_past_the_last_sequence(emu, launches):
    """bf16, softcap and per-sequence ALiBi rows; q and k hold rows past cu_seqlens[-1]: out 0 and lse +inf there,
    and their gradients 0."""
    lq, lk = [5, 3], [6, 4]
    q, k, v = _packed(lq + [2], lk + [3], 2, 1, 32, torch.bfloat16, seed=23)
    slopes = torch.tensor([[0.5, 0.25], [0.1, 0.2]])
    q.requires_grad_()
    out, lse, _ = fa.flash_attn_varlen_func(q, k, v, _cu(lq), _cu(lk), 5, 6, causal=True, softcap=3.0,
                                            alibi_slopes=slopes, return_attn_probs=True)
    refs = [ref_attention(q[a:a + n][None], k[c:c + m][None], v[c:c + m][None], True, (-1, -1), 3.0, slopes[i])[0][0]
            for i, (a, n, c, m) in enumerate(((0, 5, 0, 6), (5, 3, 6, 4)))]
    _close(out[:8], torch.cat(refs), torch.bfloat16, "out")
    assert torch.equal(out[8:], torch.zeros_like(out[8:])) and torch.isinf(lse[:, 8:]).all()
    out.float().sum().backward()
    assert torch.equal(q.grad[8:], torch.zeros_like(q.grad[8:]))
    assert launches["attention_varlen"] == 1 and "attention" not in launches, launches


def _dropout_reference(q, k, v, lens_q, lens_k, keep, p, causal):
    """float64 out of FlashAttention with dropout per sequence: softmax(scale QK^T) * keep / (1 - p) V, keep the
    kernel's mask [batch, heads_q, max_seqlen_q, max_seqlen_k] (1 kept; 0 and -1, an unvisited entry, dropped)."""
    outs, a, c = [], 0, 0
    hq, hkv, d = q.shape[1], k.shape[1], q.shape[2]
    for b, (lq, lk) in enumerate(zip(lens_q, lens_k)):
        qi, ki, vi = q[a:a + lq], k[c:c + lk].repeat_interleave(hq // hkv, 1), v[c:c + lk].repeat_interleave(hq // hkv, 1)
        sc = torch.einsum("qhd,khd->hqk", qi, ki) * d ** -0.5
        if causal:
            ok = torch.arange(lk).view(1, lk) <= torch.arange(lq).view(lq, 1) + lk - lq
            sc = sc.masked_fill(~ok, -math.inf)
        pr = torch.softmax(sc, -1).nan_to_num(0.0)
        z = (keep[b, :, :lq, :lk] == 1).double() / (1 - p)
        outs.append(torch.einsum("hqk,khd->qhd", pr * z, vi))
        a, c = a + lq, c + lk
    return torch.cat(outs)


def test_varlen_dropout_runs_the_varlen_kernel(emu, launches):
    """dropout_p > 0 runs one varlen launch forward and one backward (no dense launch): out and gradients against
    float64 with the mask the kernel drew (read back through kiln.emulate under the same seed, lengths 0, 1, odd
    and long, GQA); its keep rate within binomial bounds; -1 (never written) only past each sequence's lengths."""
    import kiln.emulate as ke
    import kiln.torch as kt
    lq, lk, p = [0, 1, 7, 70], [3, 1, 9, 75], 0.3
    q, k, v = _packed(lq, lk, 4, 2, 32, torch.float16, seed=26)
    for t in (q, k, v):
        t.requires_grad_()
    torch.manual_seed(11)
    out = fa.flash_attn_varlen_func(q, k, v, _cu(lq), _cu(lk), max(lq), max(lk), dropout_p=p, causal=True)
    torch.manual_seed(11)
    seed = kt._dropout_seed(q)[0]
    _o, keep = ke.attention_varlen(q.detach().numpy(), k.detach().numpy(), v.detach().numpy(), _cu(lq).numpy(),
                                   _cu(lk).numpy(), causal=True, dropout=(p, seed, 0), return_mask=True)
    keep = torch.from_numpy(keep)
    qr, kr, vr = (t.detach().double().requires_grad_() for t in (q, k, v))
    ref = _dropout_reference(qr, kr, vr, lq, lk, keep, p, True)
    _close(out, ref, torch.float16, "out")
    dout = torch.randn(out.shape, generator=torch.Generator().manual_seed(27)).half()
    out.backward(dout)
    ref.backward(dout.double())
    for n, t, r in (("dq", q, qr), ("dk", k, kr), ("dv", v, vr)):
        _close(t.grad, r.grad, torch.float16, n, 4)
    assert launches == {"attention_varlen": 1, "attention_varlen_backward": 1}, launches
    seen = torch.zeros(keep.shape, dtype=torch.bool)
    for b, (a, c) in enumerate(zip(lq, lk)):
        seen[b, :, :a, :c] = True
        vis = torch.arange(c).view(1, c) <= torch.arange(a).view(a, 1) + c - a
        assert ((keep[b, :, :a, :c] >= 0) | ~vis).all(), "a visible pair without its bit"
    assert (keep[~seen] == -1).all(), "the kernel wrote past a sequence's lengths"
    n = int((keep >= 0).sum())
    kept = int((keep == 1).sum())
    assert abs(kept - n * (1 - p)) <= 5 * math.sqrt(n * p * (1 - p)), (kept, n)


def test_varlen_dropout_of_one_sequence_is_flash_attn_funcs(emu):
    """The mask's key is the dense kernel's: one packed sequence under a torch seed gives flash_attn_func's output of
    the same batch-1 problem bit for bit (the same Philox mask), and another seed another output."""
    lq, lk = [33], [40]
    q, k, v = _packed(lq, lk, 2, 1, 32, torch.float16, seed=28)
    torch.manual_seed(5)
    packed = fa.flash_attn_varlen_func(q, k, v, _cu(lq), _cu(lk), 33, 40, dropout_p=0.4, causal=True)
    torch.manual_seed(5)
    dense = fa.flash_attn_func(q[None], k[None], v[None], dropout_p=0.4, causal=True)[0]
    assert torch.equal(packed, dense)
    torch.manual_seed(6)
    assert not torch.equal(fa.flash_attn_varlen_func(q, k, v, _cu(lq), _cu(lk), 33, 40, dropout_p=0.4, causal=True),
                           packed)


def test_varlen_block_table_stays_composite(emu, launches):
    """Paged keys with varlen (not built in the varlen kernel) run one dense launch per sequence, as before."""
    lq = [3, 4]
    q, _k, _v = _packed(lq, lq, 2, 2, 32, torch.float16, seed=24)
    g = torch.Generator().manual_seed(29)
    kc, vc = (torch.randn(4, 16, 2, 32, generator=g).half() for _ in range(2))
    table = torch.tensor([[2, 0], [1, 3]], dtype=torch.int32)
    fa.flash_attn_varlen_func(q, kc, vc, _cu(lq), _cu(lq), 4, 4, block_table=table)
    assert launches == {"attention": 2}, launches


def test_planted_bug_a_shifted_sequence_bound_fails_the_reference(emu):
    """The check has teeth: cu_seqlens_k with one bound moved by a key (a bug the kernel path could have) gives an
    output the per-sequence float64 reference rejects."""
    lq = lk = [5, 6]
    q, k, v = _packed(lq, lk, 2, 2, 32, torch.float16, seed=25)
    ref, _ = _per_sequence(q, k, v, lq, lk, causal=True)
    bad = torch.tensor([0, 4, 11], dtype=torch.int32)
    out = fa.flash_attn_varlen_func(q, k, v, _cu(lq), bad, 6, 7, causal=True)
    with pytest.raises(AssertionError):
        _close(out, ref, torch.float16, "out")


# ---- KV cache ----


def _paged_cache(dense, table, page):
    """The paged form (num_blocks, page, hkv, d) of dense caches (b, max_blocks * page, hkv, d) under block_table."""
    b, nblk = table.shape
    pages = torch.zeros((int(table.max()) + 2, page) + tuple(dense.shape[2:]), dtype=dense.dtype)
    for i in range(b):
        for j in range(nblk):
            pages[table[i, j]] = dense[i, j * page:(j + 1) * page]
    return pages


def test_kvcache_paged_shuffled_pages_append_leftpad(emu, launches):
    """Pages of 16 in shuffled order, 2 new tokens appended in the kernel, cache_leftpad, GQA, causal: one paged
    launch; the new keys land in the pages their positions map to; out and lse match float64."""
    g = torch.Generator().manual_seed(31)
    b, hq, hkv, d, page, nblk, sn = 2, 4, 2, 32, 16, 3, 2
    dense_k = torch.randn(b, nblk * page, hkv, d, generator=g).half()
    dense_v = torch.randn(b, nblk * page, hkv, d, generator=g).half()
    table = torch.tensor([[4, 0, 6], [1, 5, 3]], dtype=torch.int32)
    pk, pv = _paged_cache(dense_k, table, page), _paged_cache(dense_v, table, page)
    q = torch.randn(b, sn, hq, d, generator=g).half()
    k = torch.randn(b, sn, hkv, d, generator=g).half()
    v = torch.randn(b, sn, hkv, d, generator=g).half()
    lens, pads = torch.tensor([20, 33], dtype=torch.int32), torch.tensor([3, 0], dtype=torch.int32)
    out, lse = fa.flash_attn_with_kvcache(q, pk, pv, k, v, cache_seqlens=lens, cache_leftpad=pads, block_table=table,
                                          causal=True, return_softmax_lse=True)
    assert launches == {"attention_kvcache": 1}, launches
    for i, (s, lp) in enumerate(zip(lens.tolist(), pads.tolist())):
        for t in range(sn):
            p = s + t
            assert torch.equal(pk[table[i, p // page], p % page], k[i, t])
            assert torch.equal(pv[table[i, p // page], p % page], v[i, t])
        keys = torch.cat([dense_k[i, lp:s], k[i]]).double()
        vals = torch.cat([dense_v[i, lp:s], v[i]]).double()
        ref, ref_lse = ref_attention(q[i:i + 1], keys[None], vals[None], True)
        _close(out[i], ref[0], torch.float16, "out %d" % i, 2)
        _close(lse[i], ref_lse[0], torch.float32, "lse %d" % i, 60)


def test_kvcache_dense_batch_idx_window_alibi_as_pages(emu, launches):
    """A dense cache (32 positions: pages of its own rows) picked by cache_batch_idx, one new token, then window and
    ALiBi without new keys: one paged launch each; the cache rows not picked are untouched."""
    g = torch.Generator().manual_seed(32)
    kc = torch.randn(3, 32, 1, 32, generator=g).to(torch.bfloat16)
    vc = torch.randn(3, 32, 1, 32, generator=g).to(torch.bfloat16)
    q = torch.randn(2, 1, 2, 32, generator=g).to(torch.bfloat16)
    k = torch.randn(2, 1, 1, 32, generator=g).to(torch.bfloat16)
    v = torch.randn(2, 1, 1, 32, generator=g).to(torch.bfloat16)
    idx, lens = torch.tensor([2, 0], dtype=torch.int32), torch.tensor([9, 30], dtype=torch.int32)
    slopes = torch.tensor([0.3, 0.05])
    kc0, vc0 = kc.clone(), vc.clone()
    out = fa.flash_attn_with_kvcache(q, kc, vc, k, v, cache_seqlens=lens, cache_batch_idx=idx, causal=True,
                                     window_size=(6, 0))
    assert launches == {"attention_kvcache": 1}, launches
    assert torch.equal(kc[1], kc0[1]) and torch.equal(vc[1], vc0[1])
    for i, (j, s) in enumerate(zip(idx.tolist(), lens.tolist())):
        assert torch.equal(kc[j, s], k[i, 0]) and torch.equal(vc[j, s], v[i, 0])
        keys, vals = kc[j, :s + 1], vc[j, :s + 1]
        ref, _ = ref_attention(q[i:i + 1], keys[None], vals[None], True, (6, 0), 0.0, None)
        _close(out[i], ref[0], torch.bfloat16, "out %d" % i)
    out = fa.flash_attn_with_kvcache(q, kc, vc, cache_seqlens=lens + 1, cache_batch_idx=idx, causal=True,
                                     window_size=(6, 0), alibi_slopes=slopes)
    assert launches == {"attention_kvcache": 2}, launches
    for i, (j, s) in enumerate(zip(idx.tolist(), lens.tolist())):
        ref, _ = ref_attention(q[i:i + 1], kc[j:j + 1, :s + 1], vc[j:j + 1, :s + 1], True, (6, 0), 0.0, slopes)
        _close(out[i], ref[0], torch.bfloat16, "out %d" % i)


def _rotary_case(seed, paged, cs_dtype, rdim, d=32, sn=3):
    """Two sequences of f16 q/k/v and a cache: dense [2, 32, 1, d], or 16-row pages shuffled through a block table;
    tables [40, rdim / 2] in cs_dtype (positions past cache_seqlens + sn stay inside)."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(2, sn, 2, d, generator=g).half()
    k = torch.randn(2, sn, 1, d, generator=g).half()
    v = torch.randn(2, sn, 1, d, generator=g).half()
    ang = torch.rand(40, rdim // 2, generator=g, dtype=torch.float64) * 3
    cos, sin = ang.cos().to(cs_dtype), ang.sin().to(cs_dtype)
    if paged:
        kc = torch.randn(6, 16, 1, d, generator=g).half()
        table = torch.tensor([[4, 1, 5], [0, 3, 2]], dtype=torch.int32)
    else:
        kc, table = torch.randn(2, 32, 1, d, generator=g).half(), None
    return q, k, v, cos, sin, kc, torch.randn(kc.shape, generator=g).half(), table


def _rows(cache, table, i, n):
    """Sequence i's first n cache rows (through its pages when paged)."""
    return cache[i, :n] if table is None else torch.cat([cache[p] for p in table[i].tolist()])[:n]


@pytest.mark.parametrize("interleaved,causal,paged,cs_dtype,rdim,leftpad", [
    (True, True, False, torch.float32, 32, None),          # GPT-J pairs, every dim, f32 tables, dense cache
    (False, False, True, torch.float16, 16, [2, 0]),       # NeoX halves of 16 of 32 dims, q at cache_seqlens, pages
])
def test_kvcache_rotary_runs_inside_the_append_kernel(emu, launches, monkeypatch, interleaved, causal, paged,
                                                      cs_dtype, rdim, leftpad):
    """rotary_cos / rotary_sin go to the append kernel: one launch, no rotary op. The cache holds the new keys
    rotated at cache_seqlens + i (leftpad does not move them, as FA2), bit for bit what the composite path (kiln's
    rotary op, then the kernel) writes; q rotated at cache_seqlens + i when causal, else at cache_seqlens; the
    output within f16 tolerance of float64. The first append crosses a page boundary (cache_seqlens 14, 3 new keys)."""
    q, k, v, cos, sin, kc, vc, table = _rotary_case(40, paged, cs_dtype, rdim)
    lens = torch.tensor([14, 28], dtype=torch.int32)
    lp = None if leftpad is None else torch.tensor(leftpad, dtype=torch.int32)
    kc0, vc0 = kc.clone(), vc.clone()
    call = dict(cache_seqlens=lens, cache_leftpad=lp, block_table=table, causal=causal, rotary_interleaved=interleaved)
    out = fa.flash_attn_with_kvcache(q, kc, vc, k, v, cos, sin, **call)
    assert launches == {"attention_kvcache": 1}, launches
    monkeypatch.setattr(fa, "_rotary_in_kernel", lambda *_: False)
    kc2, vc2 = kc0.clone(), vc0.clone()
    out2 = fa.flash_attn_with_kvcache(q, kc2, vc2, k, v, cos, sin, **call)
    assert launches == {"attention_kvcache": 2, "rotary": 2}, launches  # the composite path: k, then q
    assert torch.equal(kc, kc2) and torch.equal(vc, vc2), "the kernel's cache differs from the rotary op's"
    _close(out, out2, torch.float16, "kernel vs composite")
    sn, pads = k.shape[1], leftpad or [0, 0]
    for i, s in enumerate(lens.tolist()):
        pos = torch.arange(s, s + sn)
        krot = _rotate(k[i], cos, sin, pos, interleaved)
        _close(_rows(kc, table, i, s + sn)[s:], krot, torch.float16, "appended k %d" % i)
        assert torch.equal(_rows(kc, table, i, s), _rows(kc0, table, i, s)), "cache rows before the append moved"
        assert torch.equal(_rows(vc, table, i, s + sn)[s:], v[i])
        qpos = pos if causal else torch.full((sn,), s)
        keys = torch.cat([_rows(kc0, table, i, s)[pads[i]:].double(), krot])
        vals = torch.cat([_rows(vc0, table, i, s)[pads[i]:].double(), v[i].double()])
        ref, _ = ref_attention(_rotate(q[i], cos, sin, qpos, interleaved)[None], keys[None], vals[None], causal)
        _close(out[i], ref[0], torch.float16, "out %d" % i, 2)


def test_kvcache_rotary_tables_reach_the_kernel_aligned(emu, monkeypatch):
    """Tables at an odd address (a view 2 bytes into a buffer) reach the kernel 16-byte aligned and contiguous (it
    reads them in 16-byte rows) and give the bits of the aligned call."""
    q, k, v, cos, sin, kc, vc, _ = _rotary_case(42, False, torch.float16, 16)
    seen, real = [], emu_rt.EmulatedRuntime.attention_kvcache

    def spy(self, *a, **kw):
        seen.append([t.data_ptr() % 16 == 0 and t.is_contiguous() for t in (kw["rotary_cos"], kw["rotary_sin"])])
        return real(self, *a, **kw)
    monkeypatch.setattr(emu_rt.EmulatedRuntime, "attention_kvcache", spy)
    odd = [torch.empty(cos.numel() + 1, dtype=cos.dtype)[1:].view(cos.shape) for _ in range(2)]
    odd[0].copy_(cos), odd[1].copy_(sin)
    assert odd[0].data_ptr() % 16
    lens = torch.tensor([5, 20], dtype=torch.int32)
    kc2, vc2 = kc.clone(), vc.clone()
    out = fa.flash_attn_with_kvcache(q, kc, vc, k, v, cos, sin, lens, causal=True)
    out2 = fa.flash_attn_with_kvcache(q, kc2, vc2, k, v, odd[0], odd[1], lens, causal=True)
    assert seen == [[True, True], [True, True]], seen
    assert torch.equal(out, out2) and torch.equal(kc, kc2)


def test_kvcache_rotary_the_kernel_does_not_take_stays_composite(emu, launches):
    """rotary_dim 8 (the kernel rotates 16-byte chunks: multiples of 16, FA2's rule): kiln's rotary op rotates k and
    q, then the paged kernel appends and attends; float64 agreement."""
    q, k, v, cos, sin, kc, vc, _ = _rotary_case(41, False, torch.float32, 8)
    lens = torch.tensor([4, 11], dtype=torch.int32)
    kc0, vc0 = kc.clone(), vc.clone()
    out = fa.flash_attn_with_kvcache(q, kc, vc, k, v, cos, sin, lens, causal=True)
    assert launches == {"rotary": 2, "attention_kvcache": 1}, launches
    for i, s in enumerate(lens.tolist()):
        pos = torch.arange(s, s + k.shape[1])
        krot = _rotate(k[i], cos, sin, pos, True)
        _close(kc[i, s:s + k.shape[1]], krot, torch.float16, "appended k %d" % i)
        keys, vals = torch.cat([kc0[i, :s].double(), krot]), torch.cat([vc0[i, :s].double(), v[i].double()])
        ref, _ = ref_attention(_rotate(q[i], cos, sin, pos, True)[None], keys[None], vals[None], True)
        _close(out[i], ref[0], torch.float16, "out %d" % i, 2)


def test_kvcache_pages_the_kernel_does_not_take_stay_composite(emu, launches):
    """Pages of 4 rows (below the kernels' 16) and a dense cache of 9 positions: the composite path, one dense launch
    per sequence."""
    g = torch.Generator().manual_seed(34)
    kc = torch.randn(2, 9, 1, 32, generator=g).half()
    q = torch.randn(2, 1, 2, 32, generator=g).half()
    fa.flash_attn_with_kvcache(q, kc, kc.clone(), cache_seqlens=torch.tensor([3, 7], dtype=torch.int32))
    assert launches == {"attention": 2}, launches


def test_kvcache_window_alibi_append_runs_the_paged_kernel(emu, launches):
    """window + ALiBi + append (the paged kernel with the most parameters) runs in one paged launch and gives the
    float64 result."""
    g = torch.Generator().manual_seed(36)
    kc = torch.randn(2, 16, 1, 32, generator=g).half()
    vc = torch.randn(2, 16, 1, 32, generator=g).half()
    q = torch.randn(2, 1, 2, 32, generator=g).half()
    k = torch.randn(2, 1, 1, 32, generator=g).half()
    lens, slopes = torch.tensor([3, 9], dtype=torch.int32), torch.tensor([0.3, 0.05])
    out = fa.flash_attn_with_kvcache(q, kc, vc, k, k, cache_seqlens=lens, causal=True, window_size=(4, 0),
                                     alibi_slopes=slopes)
    assert launches == {"attention_kvcache": 1}, launches
    for i, s in enumerate(lens.tolist()):
        ref, _ = ref_attention(q[i:i + 1], kc[i:i + 1, :s + 1], vc[i:i + 1, :s + 1], True, (4, 0), 0.0, slopes)
        _close(out[i], ref[0], torch.float16, "out %d" % i)


def test_transformers_padded_batch_runs_the_varlen_kernel(emu, launches):
    """kiln.transformers' padded batch (a 2-d mask, left padding) is unpadded into one varlen launch."""
    import types
    import kiln.transformers as ktf
    g = torch.Generator().manual_seed(37)
    q, k, v = (torch.randn(2, 2, 6, 32, generator=g).half() for _ in range(3))  # [batch, heads, seq, head_dim]
    mask = torch.ones(2, 6, dtype=torch.bool)
    mask[1, :2] = False
    out, _ = ktf.attention_forward(types.SimpleNamespace(is_causal=True), q, k, v, mask, scaling=32 ** -0.5)
    assert launches == {"attention_varlen": 1}, launches
    keys = [torch.arange(6), torch.arange(2, 6)]
    for i, kept in enumerate(keys):
        qi, ki, vi = (t[i].transpose(0, 1)[kept][None] for t in (q, k, v))
        ref, _ = ref_attention(qi, ki, vi, True)
        _close(out[i][kept], ref[0], torch.float16, "sequence %d" % i)


def test_sdpa_key_padding_mask_runs_one_varlen_launch(emu, launches):
    """kiln.torch's SDPA with a right-padding key mask (lengths 6, 3, 0): one varlen launch forward and one backward,
    torch's own SDPA in float64 for the result and the gradients."""
    import torch.nn.functional as F
    import kiln.torch as kt
    g = torch.Generator().manual_seed(38)
    q, k, v = (torch.randn(3, 2, 5, 32, generator=g).requires_grad_() for _ in range(3))
    keep = (torch.arange(6).unsqueeze(0) < torch.tensor([[6], [3], [0]]))[:, None, None, :]
    k6, v6 = (torch.cat([t, torch.randn(3, 2, 1, 32, generator=g)], 2).detach().requires_grad_() for t in (k, v))
    out = kt.scaled_dot_product_attention(q, k6, v6, attn_mask=keep)
    out.sum().backward()
    assert launches == {"attention_varlen": 1, "attention_varlen_backward": 1}, launches
    qr, kr, vr = (t.detach().double().requires_grad_() for t in (q, k6, v6))
    ref = F.scaled_dot_product_attention(qr, kr, vr, attn_mask=keep).nan_to_num(0.0)
    ref.sum().backward()
    _close(out[:2], ref[:2], torch.float32, "out")
    assert torch.equal(out[2], torch.zeros_like(out[2]))
    for n, t, r in (("dq", q, qr), ("dk", k6, kr), ("dv", v6, vr)):
        _close(t.grad[:2], r.grad[:2].nan_to_num(0.0), torch.float32, n, 4)


# ---- the ops ----


def test_opcheck_the_varlen_and_kvcache_ops(emu):
    g = torch.Generator().manual_seed(35)
    lq, lk = [2, 3], [3, 4]
    q, k, v = (t.float().requires_grad_() for t in _packed(lq, lk, 2, 1, 32, torch.float32, seed=35))
    args = (q, k, v, _cu(lq), _cu(lk), 3, 4, None, True, -1, -1, 0.0, 0.2, False)
    torch.library.opcheck(torch.ops.kiln.flash_attention_varlen.default, args)
    with torch.no_grad():
        o, lse = torch.ops.kiln.flash_attention_varlen(*args)
    torch.library.opcheck(torch.ops.kiln.flash_attention_varlen_backward.default,
                          (torch.randn(o.shape, generator=g), q.detach(), k.detach(), v.detach(), o, lse, _cu(lq),
                           _cu(lk), 3, 4, None, True, -1, -1, 0.0, 0.2, False))
    kc, vc = (torch.randn(3, 16, 1, 32, generator=g) for _ in range(2))
    qd = torch.randn(2, 1, 2, 32, generator=g)
    kn, vn = (torch.randn(2, 1, 1, 32, generator=g) for _ in range(2))
    table = torch.tensor([[2, 0], [1, 2]], dtype=torch.int32)
    torch.library.opcheck(torch.ops.kiln.flash_attention_kvcache.default,
                          (qd, kc, vc, kn, vn, table, torch.tensor([5, 17], dtype=torch.int32), None, None, None, True,
                           -1, -1, 0.0, 0.2, 18, 0))


def test_kvcache_op_traces_on_meta_tensors():
    q = torch.empty(2, 1, 4, 64, device="meta", dtype=torch.float16)
    kc = torch.empty(8, 16, 2, 64, device="meta", dtype=torch.float16)
    table = torch.empty(2, 4, device="meta", dtype=torch.int32)
    seqlens = torch.empty(2, device="meta", dtype=torch.int32)
    o, lse = torch.ops.kiln.flash_attention_kvcache(q, kc, kc, None, None, table, seqlens, None, None, None, True, -1,
                                                    -1, 0.0, 0.125, 64, 0)
    assert o.shape == q.shape and lse.shape == (2, 4, 1) and lse.dtype == torch.float32
