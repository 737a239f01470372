"""kiln.Runtime over libkiln_rt, against the fake CUDA driver: launches, argument checks, bundles, no driver."""

import os
import struct
import subprocess
import sys

import numpy as np
import pytest

import kiln
from conftest import PKG_ROOT, REPO
from devarrays import CAIArray, DLPackArray

ml_dtypes = pytest.importorskip("ml_dtypes")


def _f32(bits):
    return struct.unpack("<f", struct.pack("<I", bits & 0xFFFFFFFF))[0]


def test_device_facts(fake_cuda, monkeypatch):
    monkeypatch.setenv("FAKE_CUDA_SM", "75")
    rt = kiln.Runtime(disk_cache=False)
    assert rt.sm == 75 and rt.device["native_bf16"] is False and rt.half_dtype == "f16"
    assert rt.cache_dir is None and "sm_75" in rt.device["name"]


def test_layer_norm_launch_bf16_with_f32_weights(fake_cuda):
    rt = kiln.Runtime(disk_cache=False)
    x = rt.from_numpy(np.ones((6, 1024), ml_dtypes.bfloat16))
    w, b = rt.empty((1024,), "f32"), rt.empty((1024,), "f32")
    y, mean, rstd = rt.empty((6, 1024), "bf16"), rt.empty((6,), "f32"), rt.empty((6,), "f32")
    rt.layer_norm(y, x, w, b, eps=1e-3, mean=mean, rstd=rstd)
    k = rt.layer_norm_kernel(y, x, w, b)
    assert k.spec == "layernorm x=bf16 w=f32 y=bf16 hidden=1024 weight=true bias=true" and k.origin == "generated"
    launch = fake_cuda.last_launch()
    assert launch.entry.decode() == k.meta["entry"]
    got = {p["name"]: launch.param[i] for i, p in enumerate(k.meta["params"])}
    assert got["x"] == x.ptr and got["y"] == y.ptr and got["weight"] == w.ptr and got["mean"] == mean.ptr
    assert got["rows"] == 6 and got["hidden"] == 1024 and abs(_f32(got["eps"]) - 1e-3) < 1e-9
    assert tuple(launch.block) == k.meta["block"] and launch.grid[0] == -(-6 // k.meta["grid_tile"][0])
    assert rt.stats()["generated"] == 1


def test_stand_in_arrays_and_checks(fake_cuda):
    rt = kiln.Runtime(disk_cache=False)
    xa = rt.empty((4, 256), "f16")
    ya = rt.empty((4, 256), "f16")
    x = CAIArray(xa.ptr, (4, 256), "<f2")
    y = CAIArray(ya.ptr, (4, 256), "<f2")
    rt.layer_norm(y, x)  # no weight, no bias
    assert fake_cuda.last_launch().param[3] == xa.ptr
    cases = [
        (CAIArray(xa.ptr, (4, 256), "<f8"), "<f8"),
        (CAIArray(xa.ptr, (4, 128), "<f2", strides=(1024, 2)), "contiguous"),
        (CAIArray(xa.ptr, (4, 256), "<f2", mask=object()), "mask"),
        (np.ones((4, 256), np.float16), "not CUDA memory"),
        (object(), "not a CUDA array"),
        (DLPackArray(xa.ptr, (4, 256), "f16", device_type=1), "not CUDA memory"),
        (DLPackArray(xa.ptr, (4, 256), "i32"), "DLPack dtype"),
    ]
    for bad, words in cases:
        with pytest.raises(kiln.KilnArgumentError) as e:
            rt.layer_norm(y, bad)
        assert words in str(e.value), str(e.value)
    with pytest.raises(kiln.KilnArgumentError) as e:
        rt.layer_norm(CAIArray(ya.ptr, (4, 128), "<f2"), x)
    assert "y has shape (4, 128); expected x's (4, 256)" in str(e.value)
    with pytest.raises(kiln.KilnArgumentError) as e:
        rt.layer_norm(y, x, DLPackArray(xa.ptr, (256,), "f16", device_id=3))
    assert "device 3" in str(e.value)
    rt.layer_norm(y, DLPackArray(xa.ptr, (4, 256), "f16"), DLPackArray(xa.ptr, (256,), "f16"))
    # a pointer that breaks the kernel's vector alignment falls back to the launch-time form or says why
    ok = CAIArray(xa.ptr + 2, (4, 255), "<f2")
    rt.layer_norm(CAIArray(ya.ptr + 2, (4, 255), "<f2"), ok)


def test_attention_strides_from_sdpa_layout(fake_cuda):
    rt = kiln.Runtime(disk_cache=False)
    b, h, s, d = 2, 4, 24, 64
    mem = [rt.empty((b, h, s, d), "bf16") for _ in range(4)]
    # [batch, heads, seq, head_dim] memory seen as [batch, seq, heads, head_dim] through strides
    st = (h * s * d * 2, d * 2, s * d * 2, 2)
    q, k, v, o = (CAIArray(m.ptr, (b, s, h, d), "<V2", strides=st, dtype="bfloat16") for m in mem)
    lse = rt.empty((b, h, s), "f32")
    rt.attention(o, q, k, v, lse=lse, causal=True)
    kern = rt.attention_kernel(o, q, k, v, causal=True)
    assert kern.spec.startswith("attention dtype=bf16 out=bf16 head_dim=64 causal=true")
    launch = fake_cuda.last_launch()
    got = {p["name"]: launch.param[i] for i, p in enumerate(kern.meta["params"])}
    assert got["q"] == mem[0].ptr and got["lse"] == lse.ptr and got["seq_q"] == s and got["heads_kv"] == h
    assert (got["stride_qb"], got["stride_qs"], got["stride_qh"]) == (h * s * d, d, s * d)
    assert abs(_f32(got["scale"]) - 0.125) < 1e-7
    assert tuple(launch.grid) == (-(-s // kern.meta["grid_tile"][0]), h, b)
    with pytest.raises(kiln.KilnArgumentError) as e:
        rt.attention(o, q, CAIArray(mem[1].ptr, (b, s, 3, d), "<V2", dtype="bfloat16"), v)
    assert "must match" in str(e.value) or "multiple" in str(e.value)


def test_attention_decoding_splits_kv(fake_cuda):
    rt = kiln.Runtime(disk_cache=False)
    b, hq, hkv, sk, d = 1, 8, 2, 1024, 128
    q, o = rt.empty((b, 1, hq, d), "bf16"), rt.empty((b, 1, hq, d), "bf16")
    k, v = rt.empty((b, sk, hkv, d), "bf16"), rt.empty((b, sk, hkv, d), "bf16")
    lse = rt.empty((b, hq, 1), "f32")
    n, need = rt.attention_workspace(o, q, k, v, lse=lse)
    # one query, 8 plain blocks on the fake's 108 SMs: split, at most one split per 128 keys
    assert n == sk // 128 and need == n * b * hq * 1 * (d + 1) * 4
    rt.attention(o, q, k, v, lse=lse)  # automatic: split kernel, then attention_combine
    launch = fake_cuda.last_launch()
    assert launch.entry.decode().startswith("kiln_attention_combine_bf16_128"), launch.entry
    assert rt.attention_workspace(o, q, k, v, splits=1) == (1, 0)
    rt.attention(o, q, k, v, splits=1)
    assert fake_cuda.last_launch().entry == rt.attention_kernel(o, q, k, v).meta["entry"].encode()
    rt.attention(o, q, k, v, splits=3, workspace=rt.empty((3 * hq * (d + 1),), "f32"))
    with pytest.raises(kiln.KilnArgumentError) as e:
        rt.attention(o, q, k, v, splits=3, workspace=rt.empty((10,), "f32"))
    assert "workspace must be" in str(e.value)
    with pytest.raises(kiln.KilnError) as e:
        rt.attention(o, q, k, v, splits=-2)
    assert "0 (automatic) or 1..1024" in str(e.value)
    with pytest.raises(kiln.KilnArgumentError):
        rt.attention(o, q, k, v, splits="4")


def test_attention_path(fake_cuda, monkeypatch):
    """path= reaches sm_90a's wgmma kernels (d96 too: lib/attn_wgmma_dims.lua) before path=auto takes them; the
    backward puts it on dkdv; a bad name and wgmma off sm_90a are refused by name."""
    monkeypatch.setenv("FAKE_CUDA_SM", "90")
    rt = kiln.Runtime(disk_cache=False)
    b, s, h, d = 1, 40, 2, 96
    q, k, v, o = (rt.empty((b, s, h, d), "bf16") for _ in range(4))
    lse = rt.empty((b, h, s), "f32")
    assert "path=auto" in rt.attention_kernel(o, q, k, v, causal=True).spec
    kern = rt.attention_kernel(o, q, k, v, causal=True, path="wgmma")
    assert "path=wgmma" in kern.spec and kern.meta["block"][0] == 384
    rt.attention(o, q, k, v, lse=lse, causal=True, path="wgmma")
    assert fake_cuda.last_launch().entry == kern.meta["entry"].encode()
    d = 64
    q, k, v, o, do, dq, dk, dv = (rt.empty((b, s, h, d), "bf16") for _ in range(8))
    ks = rt.attention_backward_kernels(dq, dk, dv, do, q, k, v, o, lse, causal=True, path="wgmma")
    assert "kernel=dkdv" in ks[1].spec and "path=wgmma" in ks[1].spec and "path=auto" in ks[0].spec
    rt.attention_backward(dq, dk, dv, do, q, k, v, o, lse, causal=True, path="wgmma")
    with pytest.raises(kiln.KilnArgumentError) as e:
        rt.attention(o, q, k, v, path="tensor")
    assert "path must be one of auto, mma, simt, wgmma" in str(e.value)
    monkeypatch.setenv("FAKE_CUDA_SM", "80")
    with pytest.raises(kiln.KilnError) as e:
        kiln.Runtime(disk_cache=False).attention(o, q, k, v, path="wgmma")
    assert "valid targets: sm_90a" in str(e.value)


def test_generic_kernel_launch(fake_cuda):
    rt = kiln.Runtime(disk_cache=False)
    k = rt.kernel("layernorm", x="f32", hidden=256, bias=False)
    x, y, m = rt.empty((3, 256), "f32"), rt.empty((3, 256), "f32"), rt.empty((3,), "f32")
    w = rt.empty((256,), "f32")
    k.launch(problem=(3,), y=y, mean=m, rstd=m, x=x, weight=w, bias=None, rows=3, hidden=256, eps=1e-5)
    launch = fake_cuda.last_launch()
    assert launch.param[5] == 0 and launch.param[6] == 3 and launch.grid[0] == -(-3 // k.meta["grid_tile"][0])
    with pytest.raises(kiln.KilnArgumentError) as e:
        k.launch(problem=(3,), y=y, mean=m, rstd=m, x=rt.empty((2, 256), "f32"), weight=w, bias=None, rows=3,
                 hidden=256, eps=1e-5)
    assert "768" in str(e.value)
    with pytest.raises(kiln.KilnArgumentError):
        k.launch(problem=(3,), stream=True, y=y, mean=m, rstd=m, x=x, weight=w, bias=None, rows=3, hidden=256, eps=0.)


def test_driver_failures_are_kiln_errors(fake_cuda):
    rt = kiln.Runtime(disk_cache=False)
    x, y = rt.empty((2, 64), "f32"), rt.empty((2, 64), "f32")
    fake_cuda.fail("launch", "launch_failed", 1)
    with pytest.raises(kiln.KilnDriverError) as e:
        rt.layer_norm(y, x)
    assert e.value.status == "KILN_EDRIVER" and "cuLaunchKernel" in str(e.value)


def test_bundles_open_list_load(fake_cuda, tmp_path):
    path = tmp_path / "ln.kbundle"
    n = kiln.write_bundle(str(path), ["layernorm x=bf16 w=f32 y=bf16 hidden=1024", "attention dtype=f16"],
                          sms=[75, 80])
    assert n == 4
    with kiln.Bundle(path) as b:
        assert len(b) == 4 and "python" in b.producer
        assert [(e.sm, e.kind) for e in b] == [(75, "ptx"), (80, "ptx"), (75, "ptx"), (80, "ptx")]
        assert b.specs()[0] == "layernorm x=bf16 w=f32 y=bf16 hidden=1024 weight=true bias=true"
        assert b[1].payload.startswith(b"// kiln.meta") and b[1].meta["sm"] == 80
    data = path.read_bytes()
    assert len(kiln.Bundle(data=data)) == 4
    # corrupt bytes inside a payload: the file's last bytes may be alignment padding, which no
    # checksum covers (their length follows the PTX's)
    at = data.index(b"// kiln.meta")
    with pytest.raises(kiln.KilnCorruptError):
        kiln.Bundle(data=data[:at] + b"corrupted" + data[at + 9:])
    rt = kiln.Runtime(disk_cache=False)
    rt.add_bundle(str(path))
    x, w, y = rt.empty((2, 1024), "bf16"), rt.empty((1024,), "f32"), rt.empty((2, 1024), "bf16")
    rt.layer_norm(y, x, w, w)
    assert rt.layer_norm_kernel(y, x, w, w).origin == "bundle" and rt.stats()["bundle_hits"] >= 1
    with kiln.Bundle(path) as b:
        k = rt.load_entry(b[0])
        assert k.origin == "module" and k.meta["sm"] == 75 and k.spec == b[0].spec
    rt2 = kiln.Runtime(disk_cache=False)
    rt2.add_bundle(data)
    assert rt2.kernel("attention dtype=f16 out=f16 head_dim=64 causal=false path=auto").origin == "bundle"


def _run(code, env):
    full = dict(os.environ)
    full.update(env)
    full["PYTHONPATH"] = PKG_ROOT
    return subprocess.run([sys.executable, "-c", code], env=full, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, cwd="/")


def test_runtime_only_install(fake_cuda, tmp_path):
    """Only libkiln_rt: bundles load and launch; generation says what is missing."""
    libdir = tmp_path / "rtonly"
    libdir.mkdir()
    os.symlink(os.path.realpath(os.path.join(REPO, "lib", "libkiln_rt.so.0")), libdir / "libkiln_rt.so.0")
    bundle = tmp_path / "b.kbundle"
    kiln.write_bundle(str(bundle), ["layernorm x=f16 hidden=512 weight=false bias=false"], sms=[80])
    code = """
import kiln, sys
rt = kiln.Runtime(disk_cache=False)
rt.add_bundle(sys.argv[-1] if False else %r)
x = rt.empty((2, 512), "f16"); y = rt.empty((2, 512), "f16")
rt.layer_norm(y, x)
print("origin", rt.layer_norm_kernel(y, x).origin, "have_generator", kiln.have_generator())
try:
    kiln.generate("layernorm x=f16", 80)
except kiln.KilnUnavailableError as e:
    print("ERR", e)
try:
    rt.kernel("layernorm x=f32 hidden=64")
except kiln.KilnError as e:
    print("RTERR", type(e).__name__, e)
""" % str(bundle)
    r = _run(code, {"KILN_LIB_DIR": str(libdir), "KILN_CUDA_DRIVER": fake_cuda.path, "KILN_CACHE": "0"})
    assert r.returncode == 0, r.stderr
    assert "origin bundle have_generator False" in r.stdout
    assert "ERR kiln's generator library is not available" in r.stdout and "libkiln.so.0" in r.stdout
    assert "RTERR" in r.stdout and "layernorm" in r.stdout


def test_no_driver_and_bad_lib_dir(tmp_path):
    r = _run("import kiln\ntry:\n    kiln.Runtime()\nexcept kiln.KilnDriverError as e:\n    print(e.status, e)",
             {"KILN_CUDA_DRIVER": str(tmp_path / "nope.so")})
    assert r.returncode == 0 and r.stdout.startswith("KILN_ENODRIVER"), r.stdout + r.stderr
    r = _run("import kiln\ntry:\n    kiln.generate('layernorm', 80)\nexcept kiln.KilnUnavailableError as e:\n"
             "    print('UNAVAILABLE', e)", {"KILN_LIB_DIR": str(tmp_path)})
    assert "UNAVAILABLE" in r.stdout and "KILN_LIB_DIR" in r.stdout and str(tmp_path) in r.stdout


def test_cubin_bundle(fake_cuda, tmp_path):
    from kiln._gen import _find_ptxas
    if not _find_ptxas():
        pytest.skip("no ptxas ($CUDA_HOME/bin, /usr/local/cuda/bin or PATH)")
    path = str(tmp_path / "c.kbundle")
    assert kiln.write_bundle(path, ["layernorm x=f16 hidden=256"], sms=[75, 80], cubin=True) == 4
    b = kiln.Bundle(path)
    assert [(e.sm, e.kind) for e in b] == [(75, "ptx"), (75, "cubin"), (80, "ptx"), (80, "cubin")]
    assert b[3].payload[:4] == b"\x7fELF"
    rt = kiln.Runtime(disk_cache=False)  # an sm_80 device: the exact-SM cubin wins over PTX
    rt.add_bundle(path)
    k = rt.kernel(b[0].spec)
    assert k.origin == "bundle" and k.payload == "cubin" and k.meta["sm"] == 80
    assert rt.load_entry(b[3]).payload == "cubin"
    with pytest.raises(kiln.KilnDriverError) as e:
        rt.load_entry(b[1])  # an sm_75 cubin cannot run on sm_80: the driver's own words
    assert "CUDA_ERROR_NO_BINARY_FOR_GPU" in str(e.value)


def test_prepare_generates_a_model_set_on_threads(fake_cuda):
    rt = kiln.Runtime(disk_cache=False)
    specs = ["layernorm x=bf16 w=f32 hidden=2048", "rmsnorm x=bf16 w=f32 hidden=2048",
             "layernorm_bwd x=bf16 w=f32 hidden=2048", "layernorm x=bf16 w=f32 hidden=2048"]
    ks = rt.prepare(specs, threads=2)
    assert [k.spec.split()[0] for k in ks] == ["layernorm", "rmsnorm", "layernorm_bwd", "layernorm"]
    assert all(k.origin == "generated" for k in ks) and ks[0].meta["entry"] == ks[3].meta["entry"]
    assert rt.stats()["generated"] == 3
    assert rt.kernel(specs[1]).meta["entry"] == ks[1].meta["entry"] and rt.stats()["generated"] == 3
    assert rt.prepare([]) == []
    with pytest.raises(kiln.KilnError, match=r"spec 1 'layernorm x=f64': .*f64"):
        rt.prepare(["rmsnorm x=f16 hidden=64", "layernorm x=f64"])
    with pytest.raises(kiln.KilnArgumentError, match="list of specs"):
        rt.prepare("layernorm x=f16")
    with pytest.raises(kiln.KilnArgumentError, match="threads must be an int >= 0"):
        rt.prepare(specs, threads=-1)


def test_prepare_in_the_background(fake_cuda, tmp_path, monkeypatch):
    monkeypatch.delenv("KILN_CACHE")  # the fixture's memory-only default
    rt = kiln.Runtime(cache_dir=tmp_path / "cache")
    specs = ["layernorm x=f16 w=f32 hidden=512", "rmsnorm x=f16 w=f32 hidden=512"]
    p = rt.prepare(specs, threads=2, wait=False)
    assert isinstance(p, kiln.Prepare)
    k = rt.kernel(specs[1])  # waits for its own kernel only
    ks = p.finish()
    assert [x.spec.split()[0] for x in ks] == ["layernorm", "rmsnorm"] and ks[1].meta["entry"] == k.meta["entry"]
    s = rt.stats()
    assert s["generated"] == 2 and s["cubin_writes"] == 2  # the driver's cubins kept in the disk cache
    with pytest.raises(kiln.KilnError, match="finished already"):
        p.finish()
    bad = rt.prepare(["rmsnorm x=f16 hidden=64", "layernorm x=f64"], wait=False)
    with pytest.raises(kiln.KilnError, match=r"spec 1 'layernorm x=f64'"):
        bad.finish()
    left = rt.prepare(["layernorm x=bf16 hidden=256"], wait=False)
    rt.close()  # finishes it
    with pytest.raises(kiln.KilnError, match="Runtime is closed"):
        left.finish()
    rt2 = kiln.Runtime(cache_dir=tmp_path / "cache")
    rt2.prepare(specs)
    assert rt2.stats()["cubin_hits"] == 2 and rt2.stats()["generated"] == 0
