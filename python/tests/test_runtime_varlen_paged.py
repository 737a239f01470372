"""kiln.Runtime.attention_varlen, attention_varlen_backward and attention_kvcache (python/kiln/_rt_varlen.py) against
the fake CUDA driver: the kernel each launches, its arguments by name, grids, and the errors naming bad input."""

import ctypes

import pytest

import kiln
from conftest import FakeLaunch
from devarrays import CAIArray


def _launches(fake_cuda):
    at = fake_cuda.dl.fake_cuda_launch_at
    at.argtypes = [ctypes.c_int, ctypes.POINTER(FakeLaunch)]
    out = []
    while True:
        f = FakeLaunch()
        if not at(len(out), ctypes.byref(f)):
            return out
        out.append(f)


def _by_name(kern, launch):
    return {p["name"]: launch.param[i] for i, p in enumerate(kern.meta["params"]) if i < 48}


def _i32(rt, shape):
    """A device int32 array (the fake driver's memory) for index tensors."""
    n = 1
    for s in shape:
        n *= s
    buf = rt.empty((max(n, 1),), "f32")
    return buf, CAIArray(buf.ptr, shape, "<i4")


def _kernel_by_entry(rt, launch, spec):
    kern = rt.kernel(spec)
    assert launch.entry.decode() == kern.meta["entry"], (launch.entry, kern.meta["entry"])
    return kern


def test_varlen_forward_launches_the_varlen_kernel(fake_cuda):
    rt = kiln.Runtime(disk_cache=False)
    tq, tk, hq, hkv, d, batch = 11, 15, 4, 2, 64, 2
    q, o = rt.empty((tq, hq, d), "bf16"), rt.empty((tq, hq, d), "bf16")
    k, v = rt.empty((tk, hkv, d), "bf16"), rt.empty((tk, hkv, d), "bf16")
    lse = rt.empty((hq, tq), "f32")
    keep = [_i32(rt, (batch + 1,)) for _ in range(2)]
    fake_cuda.reset()
    rt.attention_varlen(o, q, k, v, keep[0][1], keep[1][1], 6, 9, lse=lse, causal=True, window=(4, 0))
    (launch,) = _launches(fake_cuda)
    kern = _kernel_by_entry(rt, launch, "attention dtype=bf16 out=bf16 head_dim=64 causal=true path=auto window=true "
                                        "varlen=true")
    got = _by_name(kern, launch)
    assert got["cu_seqlens_q"] == keep[0][0].ptr and got["cu_seqlens_k"] == keep[1][0].ptr
    assert got["q"] == q.ptr and got["o"] == o.ptr and got["lse"] == lse.ptr
    assert (got["batch"], got["total_q"], got["heads_q"], got["heads_kv"]) == (batch, tq, hq, hkv)
    assert got["window_left"] == 4 and got["window_right"] == 0
    assert tuple(launch.grid) == (-(-6 // kern.meta["grid_tile"][0]), hq, batch)


@pytest.mark.parametrize("det", [False, True])
def test_varlen_backward_launches_three_varlen_kernels(fake_cuda, det):
    rt = kiln.Runtime(disk_cache=False)
    tq, tk, h, d, batch = 9, 12, 2, 64, 3
    a = {n: rt.empty((tq, h, d), "f16") for n in ("q", "o", "dout", "dq")}
    a.update({n: rt.empty((tk, h, d), "f16") for n in ("k", "v", "dk", "dv")})
    a["lse"] = rt.empty((h, tq), "f32")
    cq, ck = _i32(rt, (batch + 1,)), _i32(rt, (batch + 1,))
    need = rt.attention_varlen_backward_workspace(**a, cu_seqlens_q=cq[1], cu_seqlens_k=ck[1], max_seqlen_q=5,
                                                  max_seqlen_k=6, deterministic=det)
    rows = h * tq
    assert need == (4 * rows + 255) // 256 * 256 + (0 if det else 4 * rows * d)
    fake_cuda.reset()
    rt.attention_varlen_backward(**a, cu_seqlens_q=cq[1], cu_seqlens_k=ck[1], max_seqlen_q=5, max_seqlen_k=6,
                                 deterministic=det)
    launches = _launches(fake_cuda)
    assert len(launches) == 3
    assert all(ln.grid[2] == batch for ln in launches)  # one grid slice per sequence
    kern = _kernel_by_entry(rt, launches[1], "attention_bwd kernel=dkdv dtype=f16 out=f16 grad=f16 head_dim=64 "
                                             "causal=false path=auto deterministic=%s varlen=true"
                            % ("true" if det else "false"))
    got = _by_name(kern, launches[1])
    assert got["dk"] == a["dk"].ptr and got["cu_seqlens_k"] == ck[0].ptr
    assert tuple(launches[1].grid) == (-(-6 // kern.meta["grid_tile"][0]), h, batch)


def test_varlen_dropout_reaches_forward_and_backward(fake_cuda):
    """dropout=(p, seed, offset) and the keep-mask tensor reach the varlen forward and the deterministic backward's
    dq kernel by name; a mask without a rate, or of the wrong shape, is refused naming it."""
    rt = kiln.Runtime(disk_cache=False)
    tq, tk, h, d, batch = 9, 12, 2, 64, 3
    a = {n: rt.empty((tq, h, d), "f16") for n in ("q", "o", "dout", "dq")}
    a.update({n: rt.empty((tk, h, d), "f16") for n in ("k", "v", "dk", "dv")})
    a["lse"] = rt.empty((h, tq), "f32")
    cq, ck = _i32(rt, (batch + 1,)), _i32(rt, (batch + 1,))
    mask = _i32(rt, (batch, h, 5, 6))
    fake_cuda.reset()
    rt.attention_varlen(a["o"], a["q"], a["k"], a["v"], cq[1], ck[1], 5, 6, lse=a["lse"], causal=True,
                        dropout=(0.25, 77, 3), dropout_mask=mask[1])
    (launch,) = _launches(fake_cuda)
    kern = _kernel_by_entry(rt, launch, "attention dtype=f16 out=f16 head_dim=64 causal=true path=auto dropout=true "
                                        "dropout_mask=true varlen=true")
    got = _by_name(kern, launch)
    assert (got["dropout_seed"], got["dropout_offset"], got["dropout_mask"]) == (77, 3, mask[0].ptr)
    assert (got["max_seqlen_q"], got["max_seqlen_k"]) == (5, 6)
    assert ctypes.c_uint32(got["dropout_p"]).value == ctypes.cast(ctypes.pointer(ctypes.c_float(0.25)),
                                                                   ctypes.POINTER(ctypes.c_uint32)).contents.value
    fake_cuda.reset()
    rt.attention_varlen_backward(**a, cu_seqlens_q=cq[1], cu_seqlens_k=ck[1], max_seqlen_q=5, max_seqlen_k=6,
                                 causal=True, deterministic=True, dropout=(0.25, 77, 3))
    launches = _launches(fake_cuda)
    kern = _kernel_by_entry(rt, launches[2], "attention_bwd kernel=dq dtype=f16 out=f16 grad=f16 head_dim=64 "
                                             "causal=true path=auto deterministic=false dropout=true varlen=true")
    got = _by_name(kern, launches[2])
    assert (got["dropout_seed"], got["dropout_offset"]) == (77, 3)
    with pytest.raises(kiln.KilnError, match="dropout_mask is the keep mask"):
        rt.attention_varlen(a["o"], a["q"], a["k"], a["v"], cq[1], ck[1], 5, 6, dropout_mask=mask[1])
    with pytest.raises(kiln.KilnError, match="dropout_mask must be contiguous int32"):
        rt.attention_varlen(a["o"], a["q"], a["k"], a["v"], cq[1], ck[1], 5, 7, dropout=(0.1, 1, 0),
                            dropout_mask=mask[1])


@pytest.mark.parametrize("append", [False, True])
def test_kvcache_launches_the_paged_kernel(fake_cuda, append):
    rt = kiln.Runtime(disk_cache=False)
    b, sq, hq, hkv, d, nblk, page, mb = 2, 1, 4, 2, 64, 6, 16, 3
    q, o = rt.empty((b, sq, hq, d), "f16"), rt.empty((b, sq, hq, d), "f16")
    kc, vc = rt.empty((nblk, page, hkv, d), "f16"), rt.empty((nblk, page, hkv, d), "f16")
    kn, vn = (rt.empty((b, 2, hkv, d), "f16") for _ in range(2)) if append else (None, None)
    table, lens, pads = _i32(rt, (b, mb)), _i32(rt, (b,)), _i32(rt, (b,))
    fake_cuda.reset()
    rt.attention_kvcache(o, q, kc, vc, table[1], lens[1], cache_leftpad=pads[1], k_new=kn, v_new=vn, seq_k=40,
                         causal=True, splits=1)
    (launch,) = _launches(fake_cuda)
    kern = _kernel_by_entry(rt, launch, "attention dtype=f16 out=f16 head_dim=64 causal=true path=auto paged=true%s"
                            % (" append=true" if append else ""))
    got = _by_name(kern, launch)
    assert got["block_table"] == table[0].ptr and got["cache_seqlens"] == lens[0].ptr
    assert got["cache_leftpad"] == pads[0].ptr and got["cache_batch_idx"] == 0
    assert got["page_size"] == page and got["max_blocks"] == mb and got["k"] == kc.ptr
    if append:
        assert got["k_new"] == kn.ptr and got["v_new"] == vn.ptr and got["seqlen_new"] == 2


@pytest.mark.parametrize("rotary,cs", [("interleaved", "f32"), ("neox", "bf16")])
def test_kvcache_rotary_launches_the_rotary_append_kernel(fake_cuda, rotary, cs):
    """rotary= with rotary_cos / rotary_sin: the append kernel with rotary, rotary_dim from the tables' width,
    rotary_cs from their dtype, seqlen_ro from their rows; tables that do not fit are refused by name."""
    rt = kiln.Runtime(disk_cache=False)
    b, hq, hkv, d, page, mb, ro = 2, 4, 2, 64, 16, 3, 48
    q, o = rt.empty((b, 1, hq, d), "bf16"), rt.empty((b, 1, hq, d), "bf16")
    kc, vc = rt.empty((6, page, hkv, d), "bf16"), rt.empty((6, page, hkv, d), "bf16")
    kn, vn = rt.empty((b, 1, hkv, d), "bf16"), rt.empty((b, 1, hkv, d), "bf16")
    cos, sin = rt.empty((ro, 16), cs), rt.empty((ro, 16), cs)
    table, lens = _i32(rt, (b, mb)), _i32(rt, (b,))
    fake_cuda.reset()
    rt.attention_kvcache(o, q, kc, vc, table[1], lens[1], k_new=kn, v_new=vn, seq_k=40, causal=True, splits=1,
                         rotary=rotary, rotary_cos=cos, rotary_sin=sin)
    (launch,) = _launches(fake_cuda)
    kern = _kernel_by_entry(rt, launch, "attention dtype=bf16 out=bf16 head_dim=64 causal=true path=auto paged=true "
                                        "append=true rotary=%s rotary_dim=32 rotary_cs=%s" % (rotary, cs))
    got = _by_name(kern, launch)
    assert got["rotary_cos"] == cos.ptr and got["rotary_sin"] == sin.ptr and got["seqlen_ro"] == ro
    with pytest.raises(kiln.KilnArgumentError, match="rotary='gptj'; valid: None, 'neox'"):
        rt.attention_kvcache(o, q, kc, vc, table[1], lens[1], k_new=kn, v_new=vn, rotary="gptj", rotary_cos=cos,
                             rotary_sin=sin)
    with pytest.raises(kiln.KilnArgumentError, match="one shape"):
        rt.attention_kvcache(o, q, kc, vc, table[1], lens[1], k_new=kn, v_new=vn, rotary=rotary, rotary_cos=cos,
                             rotary_sin=rt.empty((ro, 8), cs))
    with pytest.raises(kiln.KilnArgumentError, match="need rotary='neox' or 'interleaved'"):
        rt.attention_kvcache(o, q, kc, vc, table[1], lens[1], k_new=kn, v_new=vn, rotary_cos=cos, rotary_sin=sin)


def test_kvcache_and_varlen_bad_input_name_the_problem(fake_cuda):
    rt = kiln.Runtime(disk_cache=False)
    q, o = rt.empty((2, 1, 2, 64), "f16"), rt.empty((2, 1, 2, 64), "f16")
    kc = rt.empty((4, 16, 1, 64), "f16")
    lens = _i32(rt, (2,))
    with pytest.raises(kiln.KilnArgumentError, match="block_table must be int32"):
        rt.attention_kvcache(o, q, kc, kc, _i32(rt, (3, 2))[1], lens[1], seq_k=16)
    with pytest.raises(kiln.KilnArgumentError, match="cache_seqlens must be contiguous int32"):
        rt.attention_kvcache(o, q, kc, kc, _i32(rt, (2, 2))[1], _i32(rt, (3,))[1], seq_k=16)
    with pytest.raises(kiln.KilnError, match="page_size 8"):
        small = rt.empty((4, 8, 1, 64), "f16")
        rt.attention_kvcache(o, q, small, small, _i32(rt, (2, 2))[1], lens[1], seq_k=16, splits=1)
    qv = rt.empty((5, 2, 64), "f16")
    with pytest.raises(kiln.KilnArgumentError, match="max_seqlen_q=-1"):
        rt.attention_varlen(qv, qv, qv, qv, _i32(rt, (2,))[1], _i32(rt, (2,))[1], -1, 5)
    with pytest.raises(kiln.KilnError, match="cannot exceed"):
        rt.attention_varlen(qv, qv, qv, qv, _i32(rt, (2,))[1], _i32(rt, (2,))[1], 6, 5)


def test_kvcache_decoding_splits_over_the_keys(fake_cuda):
    """A decoding shape (one query, 4096 keys, GQA) under splits=0: the runtime's split-KV choice, the split kernel
    over the pages and the combine kernel, with the workspace attention_kvcache_workspace sizes."""
    rt = kiln.Runtime(disk_cache=False)
    b, hq, hkv, d, page, mb = 1, 8, 2, 64, 256, 16
    q, o = rt.empty((b, 1, hq, d), "f16"), rt.empty((b, 1, hq, d), "f16")
    kc, vc = rt.empty((b * mb, page, hkv, d), "f16"), rt.empty((b * mb, page, hkv, d), "f16")
    lse = rt.empty((b, hq, 1), "f32")
    table, lens = _i32(rt, (b, mb)), _i32(rt, (b,))
    n, need = rt.attention_kvcache_workspace(o, q, kc, vc, table[1], lens[1], seq_k=4096, lse=lse, causal=True)
    assert n > 1 and need == n * b * hq * 1 * (d + 1) * 4
    fake_cuda.reset()
    rt.attention_kvcache(o, q, kc, vc, table[1], lens[1], seq_k=4096, lse=lse, causal=True)
    split, combine = _launches(fake_cuda)  # exactly two launches
    kern = rt.kernel("attention dtype=f16 out=f16 head_dim=64 causal=true path=auto splitkv=true paged=true")
    assert split.entry.decode() == kern.meta["entry"]
    assert _by_name(kern, split)["block_table"] == table[0].ptr
