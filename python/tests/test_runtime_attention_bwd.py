"""kiln.Runtime.attention_backward over kiln_attention_backward, against the fake CUDA driver: the three launches
(prep, dkdv, convert; deterministic: prep, dkdv, dq), their arguments by name, grids, workspace, errors."""

import ctypes

import pytest

import kiln
from conftest import FakeLaunch
from devarrays import CAIArray


def _launches(fake_cuda, n):
    at = fake_cuda.dl.fake_cuda_launch_at
    at.argtypes = [ctypes.c_int, ctypes.POINTER(FakeLaunch)]
    out = []
    for i in range(n):
        f = FakeLaunch()
        assert at(i, ctypes.byref(f)), "launch %d was not recorded" % i
        out.append(f)
    assert not at(n, ctypes.byref(FakeLaunch())), "more than %d launches" % n
    return out


def _by_name(kern, launch):
    """The recorded parameter values by name (the fake driver records up to 48)."""
    return {p["name"]: launch.param[i] for i, p in enumerate(kern.meta["params"]) if i < 48}


def _arrays(rt, b, sq, sk, hq, hkv, d, dt="bf16"):
    q, o, dout, dq = (rt.empty((b, sq, hq, d), dt) for _ in range(4))
    k, v, dk, dv = (rt.empty((b, sk, hkv, d), dt) for _ in range(4))
    lse = rt.empty((b, hq, sq), "f32")
    return dict(dq=dq, dk=dk, dv=dv, dout=dout, q=q, k=k, v=v, o=o, lse=lse)


@pytest.mark.parametrize("det", [False, True])
def test_sequence_arguments_and_grids(fake_cuda, det):
    rt = kiln.Runtime(disk_cache=False)
    b, sq, sk, hq, hkv, d = 2, 40, 70, 4, 2, 64
    a = _arrays(rt, b, sq, sk, hq, hkv, d)
    kerns = rt.attention_backward_kernels(**a, causal=True, deterministic=det)
    names = ["prep", "dkdv", "dq" if det else "convert"]
    for kern, name in zip(kerns, names):
        assert "kernel=%s" % name in kern.spec and "dtype=bf16" in kern.spec and "causal=true" in kern.spec
    assert ("deterministic=true" in kerns[1].spec) == det
    fake_cuda.reset()
    rt.attention_backward(**a, causal=True, deterministic=det)
    launches = _launches(fake_cuda, 3)
    got = [_by_name(k, l) for k, l in zip(kerns, launches)]
    for kern, launch in zip(kerns, launches):
        assert launch.entry.decode() == kern.meta["entry"]
    tile = [k.meta["grid_tile"][0] for k in kerns]
    assert tuple(launches[0].grid) == (-(-sq // tile[0]), hq, b)
    assert tuple(launches[1].grid) == (-(-sk // tile[1]), hkv, b)
    assert tuple(launches[2].grid) == (-(-sq // tile[2]), hq, b)
    # prep reads o and dout, writes delta into the workspace that dkdv and the dQ kernel read
    assert got[0]["o"] == a["o"].ptr and got[0]["dout"] == a["dout"].ptr
    delta = got[0]["delta"]
    assert delta and all(g.get("delta", delta) == delta for g in got)
    assert got[1]["q"] == a["q"].ptr and got[1]["k"] == a["k"].ptr and got[1]["lse"] == a["lse"].ptr
    assert got[1]["dk"] == a["dk"].ptr and got[1]["dv"] == a["dv"].ptr
    assert got[1]["heads_q"] == hq and got[1]["heads_kv"] == hkv and got[1]["seq_q"] == sq and got[1]["seq_k"] == sk
    assert got[2]["dq"] == a["dq"].ptr
    if not det:  # the f32 dQ accumulator follows delta, 256-byte aligned
        acc = got[1]["dq_acc"]
        assert acc >= delta + 4 * b * hq * sq and acc % 256 == 0 and got[2]["dq_acc"] == acc


def test_workspace_size_given_workspace_and_sdpa_strides(fake_cuda):
    rt = kiln.Runtime(disk_cache=False)
    b, h, s, d = 1, 2, 24, 64
    a = _arrays(rt, b, s, s, h, h, d, "f16")
    rows = b * h * s
    atomic = rt.attention_backward_workspace(**a)
    assert atomic >= 4 * rows + 4 * rows * d
    assert 4 * rows <= rt.attention_backward_workspace(**a, deterministic=True) < 4 * rows + 256  # delta alone
    ws = rt.empty(((atomic + 3) // 4,), "f32")
    fake_cuda.reset()
    rt.attention_backward(**a, workspace=ws)
    kerns = rt.attention_backward_kernels(**a)
    assert _by_name(kerns[0], _launches(fake_cuda, 3)[0])["delta"] == ws.ptr
    with pytest.raises(kiln.KilnArgumentError, match="workspace"):
        rt.attention_backward(**a, workspace=rt.empty((4,), "f32"))
    # torch's [batch, heads, seq, head_dim] memory seen as [batch, seq, heads, head_dim] through strides
    st = (h * s * d * 2, d * 2, s * d * 2, 2)
    mem = {n: rt.empty((b, h, s, d), "f16") for n in ("q", "k", "v", "o", "dout", "dq", "dk", "dv")}
    views = {n: CAIArray(m.ptr, (b, s, h, d), "<f2", strides=st) for n, m in mem.items()}
    fake_cuda.reset()
    rt.attention_backward(**views, lse=a["lse"], scale=0.25)
    kern = rt.attention_backward_kernels(**views, lse=a["lse"])[1]
    p = _by_name(kern, _launches(fake_cuda, 3)[1])
    for t in ("q", "k", "v", "dout", "dk", "dv"):
        assert (p["stride_%sb" % t], p["stride_%ss" % t], p["stride_%sh" % t]) == (h * s * d, d, s * d)
    assert p["q"] == mem["q"].ptr and abs(ctypes.c_float.from_buffer_copy(
        ctypes.c_uint32(p["scale"] & 0xFFFFFFFF)).value - 0.25) < 1e-7


@pytest.mark.parametrize("change,words", [
    (lambda a: a.update(lse=None), "lse"),
    (lambda a: a.update(dk=a["dq"]), "dk has shape"),
    (lambda a: a.update(dv=object()), "dv"),
    (lambda a: a.update(lse=a["dq"]), "lse must be contiguous f32"),
])
def test_errors_say_why(fake_cuda, change, words):
    rt = kiln.Runtime(disk_cache=False)
    a = _arrays(rt, 1, 8, 16, 2, 1, 64)
    change(a)
    with pytest.raises(kiln.KilnArgumentError, match=words):
        rt.attention_backward(**a)


def test_gqa_heads_must_divide(fake_cuda):
    rt = kiln.Runtime(disk_cache=False)
    a = _arrays(rt, 1, 8, 8, 3, 2, 64)
    with pytest.raises(kiln.KilnArgumentError, match="multiple"):
        rt.attention_backward(**a)
