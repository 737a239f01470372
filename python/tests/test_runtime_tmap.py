"""kiln.Runtime's tensor maps against the fake CUDA driver: the sm_90a attention kernel (TMA) launched through
Kernel.launch (kiln_tensor_map_encode per tensormap parameter) and through rt.attention (kiln_launch), the maps
the driver was handed covering the right tensors, dims, strides and boxes."""

import ctypes
import struct

import numpy as np
import pytest

import kiln

ml_dtypes = pytest.importorskip("ml_dtypes")

MAGIC = 0x504D544B  # "KTMP": the fake encoder writes kiln's record (include/kiln/tensor_map.h)


def _record(raw):
    b = bytes(raw)
    magic, eb, rank, swz, base = struct.unpack_from("<IIIIQ", b, 0)
    dims = struct.unpack_from("<5Q", b, 24)[:rank]
    strides = struct.unpack_from("<4Q", b, 64)[:rank - 1]
    box = struct.unpack_from("<5I", b, 96)[:rank]
    return dict(magic=magic, eb=eb, rank=rank, swizzle=swz, base=base, dims=dims, strides=strides, box=box)


def _check_maps(launch, meta, q, k, v, b, sq, sk, hq, hkv, d):
    names = [p["name"] for p in meta["params"]]
    assert launch.ntmaps == 3
    for j, (t, arr, seq, heads) in enumerate((("tm_q", q, sq, hq), ("tm_k", k, sk, hkv), ("tm_v", v, sk, hkv))):
        i = names.index(t)
        r = _record(launch.tmap[launch.param[i]])
        assert r["magic"] == MAGIC and r["eb"] == 2 and r["rank"] == 4 and r["swizzle"] == 3, (t, r)
        assert r["base"] == arr.ptr, t
        assert r["dims"] == (d, heads, seq, b), (t, r["dims"])  # innermost first
        assert r["strides"] == (d * 2, heads * d * 2, seq * heads * d * 2), (t, r["strides"])  # bytes, dims 1..
        assert r["box"] == (64, 1, 64, 1), (t, r["box"])


def test_sm_90a_attention_kernel_launch_encodes_its_maps(fake_cuda, monkeypatch):
    monkeypatch.setenv("FAKE_CUDA_SM", "90")
    rt = kiln.Runtime(disk_cache=False)
    b, sq, sk, hq, hkv, d = 2, 70, 130, 4, 2, 64
    q, k, v = rt.empty((b, sq, hq, d), "f16"), rt.empty((b, sk, hkv, d), "f16"), rt.empty((b, sk, hkv, d), "f16")
    o, lse = rt.empty((b, sq, hq, d), "f16"), rt.empty((b, hq, sq), "f32")
    kern = rt.kernel("attention dtype=f16 head_dim=64 path=wgmma")
    strides = {}
    for t, seq, heads in (("q", sq, hq), ("k", sk, hkv), ("v", sk, hkv), ("o", sq, hq)):
        strides.update({"stride_%sb" % t: seq * heads * d, "stride_%ss" % t: heads * d, "stride_%sh" % t: d})
    kern.launch(problem=(sq, hq, b), o=o, lse=lse, q=q, k=k, v=v, batch=b, heads_q=hq, heads_kv=hkv, seq_q=sq,
                seq_k=sk, scale=0.125, **strides)
    _check_maps(fake_cuda.last_launch(), kern.meta, q, k, v, b, sq, sk, hq, hkv, d)


def test_sm_90a_attention_through_rt_launch(fake_cuda, monkeypatch):
    # a 9.0 device: path=wgmma generates for sm_90a, and kiln_launch builds and encodes its maps from the
    # tensors (runtime/rt_launch.c); rt.attention's path=auto keeps the mma.sync kernel as portable sm_90 PTX
    # until the wgmma kernel has run on a GPU (templates/lib/attn_wgmma.lua)
    monkeypatch.setenv("FAKE_CUDA_SM", "90")
    rt = kiln.Runtime(disk_cache=False)
    b, sq, sk, hq, hkv, d = 1, 100, 33, 2, 1, 128
    q, k, v = rt.empty((b, sq, hq, d), "bf16"), rt.empty((b, sk, hkv, d), "bf16"), rt.empty((b, sk, hkv, d), "bf16")
    o, lse = rt.empty((b, sq, hq, d), "bf16"), rt.empty((b, hq, sq), "f32")
    spec = "attention dtype=bf16 head_dim=128 causal=true path=wgmma"
    rt.launch(spec, tensors=dict(o=o, lse=lse, q=q, k=k, v=v),
              scalars=dict(batch=b, heads_q=hq, heads_kv=hkv, seq_q=sq, seq_k=sk, scale=0.125))
    launch = fake_cuda.last_launch()
    kern = rt.kernel(spec)
    assert kern.meta["sm"] == 1090  # sm_90a (KILN_SM_ARCH + 90, include/kiln/target.h)
    assert launch.entry.decode() == kern.meta["entry"] and launch.grid[0] == 1  # 128 query rows a block
    _check_maps(launch, kern.meta, q, k, v, b, sq, sk, hq, hkv, d)
    rt.attention(o, q, k, v, lse=lse, causal=True)
    auto = rt.kernel("attention dtype=bf16 head_dim=128 causal=true")
    assert fake_cuda.last_launch().entry.decode() == auto.meta["entry"]
    assert auto.meta["sm"] == 90 and "tm_q" not in [p["name"] for p in auto.meta["params"]]
