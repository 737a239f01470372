"""kiln.torch's norms for training: LayerNorm's autograd and RMSNorm (module, functional, autograd) run kiln's
forward and two-kernel backward (layernorm_bwd / rmsnorm_bwd, then norm_reduce) on the fake torch and the fake CUDA
driver, with the workspace from torch's allocator. Runs where torch is not installed; test_torch_real.py covers
the real package on a GPU."""

import struct

import pytest

from fake_torch_env import Ctx  # noqa: E402  (skips this file where the real torch is; else the fake is importable)
import torch  # noqa: E402  (the fake)
import kiln  # noqa: E402


def _f32(bits):
    return struct.unpack("<f", struct.pack("<I", bits & 0xFFFFFFFF))[0]


def _params(kt, spec, values):
    k = kt.runtime().kernel(spec)
    return {p["name"]: v for p, v in zip(k.meta["params"], values)}


def test_norm_ops_registered_with_fakes_and_autograd(kt):
    ops = torch.library.REGISTERED
    for name in ("kiln::layer_norm_backward", "kiln::rms_norm", "kiln::rms_norm_backward", "kiln::add_layer_norm",
                 "kiln::add_rms_norm"):
        assert ops[name].fake is not None and ops[name].mutates_args == (), name
    assert ops["kiln::rms_norm"].backward is not None and ops["kiln::layer_norm"].backward is not None
    x = torch.empty((3, 4, 256), dtype=torch.bfloat16, device="cuda")
    w = torch.empty(256, dtype=torch.float32, device="cuda")
    y, rstd = ops["kiln::rms_norm"].fake(x, w, 1e-6, "f32", 0)
    assert tuple(y.shape) == (3, 4, 256) and y.dtype is torch.float32 and tuple(rstd.shape) == (12,)
    dx, dw = ops["kiln::rms_norm_backward"].fake(x, x, rstd, w, None, 0)
    assert dx.dtype is torch.bfloat16 and tuple(dw.shape) == (256,) and dw.dtype is torch.float32
    dx, dw, db = ops["kiln::layer_norm_backward"].fake(x, x, rstd, rstd, None, "f32", None, 0)
    assert tuple(dw.shape) == (0,) and tuple(db.shape) == (256,) and db.dtype is torch.float32


@pytest.mark.parametrize("bias", [True, False])
def test_layer_norm_autograd_runs_kilns_backward_kernels(kt, fake_cuda, bias):
    hidden = 2048
    x = torch.empty((4, 6, hidden), dtype=torch.bfloat16, device="cuda")
    w = torch.empty(hidden, dtype=torch.float32, device="cuda")
    b = torch.empty(hidden, dtype=torch.float32, device="cuda") if bias else None
    op = torch.library.REGISTERED["kiln::layer_norm"]
    out = op(x, w, b, 1e-5, "bf16", 0)
    ctx = Ctx()
    op.setup_context(ctx, (x, w, b, 1e-5, "bf16", 0), out)
    fake_cuda.reset()
    dy = torch.empty((4, 6, hidden), dtype=torch.bfloat16, device="cuda")
    dx, dw, db, deps, dout, doff = op.backward(ctx, dy, None, None)
    assert dx.dtype is torch.bfloat16 and tuple(dx.shape) == (4, 6, hidden)
    assert dw.dtype is torch.float32 and tuple(dw.shape) == (hidden,) and deps is None and dout is None and doff is None
    assert (db is not None) == bias and (not bias or db.dtype is torch.float32)
    (e1, v1), (e2, v2) = fake_cuda.launches()
    spec = "layernorm_bwd x=bf16 w=f32 dy=bf16 dx=bf16 hidden=2048 weight=true bias=%s" % ("true" if bias else "false")
    k1 = kt.runtime().kernel(spec)
    assert e1 == k1.meta["entry"] and e2 == kt.runtime().kernel(k1.meta["then_spec"]).meta["entry"]
    p = _params(kt, spec, v1)
    _, mean, rstd = out
    assert (p["dx"], p["dy"], p["x"], p["mean"], p["rstd"], p["weight"]) == (
        dx.data_ptr(), dy.data_ptr(), x.data_ptr(), mean.data_ptr(), rstd.data_ptr(), w.data_ptr())
    assert p["rows"] == 24 and p["ws"] != 0  # the workspace: a torch allocation
    r = _params(kt, k1.meta["then_spec"], v2)
    assert r["ws"] == p["ws"] and r["dweight"] == dw.data_ptr() and r["dbias"] == (db.data_ptr() if bias else 0)


def test_rms_norm_module_forward_and_backward(kt, fake_cuda):
    norm = kt.RMSNorm(1024)
    assert norm.weight.dtype is torch.float32 and norm.eps is None
    norm.weight = torch.empty(1024, dtype=torch.float32, device="cuda")
    x = torch.empty((2, 8, 1024), dtype=torch.bfloat16, device="cuda")
    y = norm(x)
    assert y.dtype is torch.bfloat16 and tuple(y.shape) == (2, 8, 1024)
    (entry, vals), = fake_cuda.launches()
    spec = "rmsnorm x=bf16 w=f32 y=bf16 hidden=1024 weight=true"
    assert entry == kt.runtime().kernel(spec).meta["entry"]
    p = _params(kt, spec, vals)
    assert p["x"] == x.data_ptr() and p["y"] == y.data_ptr() and p["rows"] == 16
    assert _f32(p["eps"]) == 2.0 ** -7  # torch's default: finfo(bfloat16).eps
    y32 = kt.rms_norm(x, 1024, norm.weight, eps=1e-6, out_dtype=torch.float32)
    assert y32.dtype is torch.float32
    op = torch.library.REGISTERED["kiln::rms_norm"]
    out = op(x, norm.weight, 1e-6, "bf16", 0)
    ctx = Ctx()
    op.setup_context(ctx, (x, norm.weight, 1e-6, "bf16", 0), out)
    fake_cuda.reset()
    dx, dw, deps, dout, _doff = op.backward(ctx, torch.empty((2, 8, 1024), dtype=torch.bfloat16, device="cuda"), None)
    assert dx.dtype is torch.bfloat16 and dw.dtype is torch.float32 and deps is None and dout is None
    (e1, _v1), (e2, v2) = fake_cuda.launches()
    k1 = kt.runtime().kernel("rmsnorm_bwd x=bf16 w=f32 dy=bf16 dx=bf16 hidden=1024 weight=true")
    assert e1 == k1.meta["entry"] and _params(kt, k1.meta["then_spec"], v2)["dweight"] == dw.data_ptr()


def test_rms_norm_without_weight_and_empty_batch(kt, fake_cuda):
    x = torch.empty((3, 512), dtype=torch.float16, device="cuda")
    op = torch.library.REGISTERED["kiln::rms_norm"]
    out = op(x, None, 1e-5, "f16", 0)
    ctx = Ctx()
    op.setup_context(ctx, (x, None, 1e-5, "f16", 0), out)
    fake_cuda.reset()
    dx, dw, _, _, _ = op.backward(ctx, torch.empty((3, 512), dtype=torch.float16, device="cuda"), None)
    assert dw is None and dx.dtype is torch.float16
    (entry, _), = fake_cuda.launches()  # no weight: no dweight, no workspace, one kernel
    assert entry == kt.runtime().kernel("rmsnorm_bwd x=f16 hidden=512 weight=false").meta["entry"]
    empty = torch.empty((0, 512), dtype=torch.float16, device="cuda")
    fake_cuda.reset()
    y = kt.rms_norm(empty, (512,))
    out = op(empty, None, 1e-5, "f16", 0)
    op.setup_context(ctx, (empty, None, 1e-5, "f16", 0), out)
    dx, _, _, _, _ = op.backward(ctx, empty, None)
    assert tuple(y.shape) == (0, 512) and tuple(dx.shape) == (0, 512) and fake_cuda.launches() == []


def test_rms_norm_errors(kt):
    x = torch.empty((4, 64), dtype=torch.float16, device="cuda")
    with pytest.raises(kiln.KilnArgumentError, match="rms_norm: normalized_shape"):
        kt.rms_norm(x, (32,))
    with pytest.raises(kiln.KilnArgumentError, match="CUDA"):
        kt.rms_norm(torch.empty((4, 64), dtype=torch.float16), (64,))
    with pytest.raises(kiln.KilnArgumentError, match="rms_norm: weight has shape"):
        kt.rms_norm(x, (64,), torch.empty(32, dtype=torch.float32, device="cuda"))
    with pytest.raises(kiln.KilnArgumentError, match="int32"):
        kt.rms_norm(torch.empty((4, 64), dtype=torch.int32, device="cuda"), (64,))
    with pytest.raises(kiln.KilnArgumentError, match="out_dtype"):
        kt.RMSNorm(64, out_dtype=torch.int32)


def test_modules_without_bias_or_affine(kt):
    ln = kt.LayerNorm(64, bias=False)  # registered as None, as torch.nn.LayerNorm does
    assert ln.weight is not None and ln.bias is None
    ln = kt.LayerNorm(64, elementwise_affine=False)
    assert ln.weight is None and ln.bias is None
    assert kt.RMSNorm(64, elementwise_affine=False).weight is None


@pytest.mark.parametrize("rms", [False, True])
def test_fused_residual_add_forward_and_backward(kt, fake_cuda, rms):
    hidden = 1024
    x = torch.empty((2, 4, hidden), dtype=torch.bfloat16, device="cuda")
    res = torch.empty((2, 4, hidden), dtype=torch.float32, device="cuda")  # an f32 residual stream
    w = torch.empty(hidden, dtype=torch.float32, device="cuda")
    fam = "rmsnorm" if rms else "layernorm"
    y, h = kt.add_rms_norm(x, res, hidden, w) if rms else kt.add_layer_norm(x, res, hidden, w, w)
    assert y.dtype is torch.bfloat16 and h.dtype is torch.float32 and tuple(h.shape) == (2, 4, hidden)
    (entry, vals), = fake_cuda.launches()
    spec = "%s x=bf16 w=f32 y=bf16 hidden=1024 residual=true r=f32" % fam
    assert entry == kt.runtime().kernel(spec).meta["entry"]
    p = _params(kt, spec, vals)
    assert (p["x"], p["residual"], p["h"], p["y"]) == (x.data_ptr(), res.data_ptr(), h.data_ptr(), y.data_ptr())
    assert not rms or _f32(p["eps"]) == 2.0 ** -23  # eps None: finfo of the residual stream's dtype (f32)
    op = torch.library.REGISTERED["kiln::add_rms_norm" if rms else "kiln::add_layer_norm"]
    args = (x.reshape(8, hidden), res.reshape(8, hidden), w) + (() if rms else (None,)) + (1e-5, "bf16", 0)
    out = op(*args)
    ctx = Ctx()
    op.setup_context(ctx, args, out)
    fake_cuda.reset()
    dy = torch.empty((8, hidden), dtype=torch.bfloat16, device="cuda")
    dh = torch.empty((8, hidden), dtype=torch.float32, device="cuda")
    grads = op.backward(ctx, dy, dh, *([None] * (1 if rms else 2)))
    dx, dres, dw = grads[:3]
    assert dx.dtype is torch.bfloat16 and dres.dtype is torch.float32 and dw.dtype is torch.float32
    (e1, v1), (e2, _v2) = fake_cuda.launches()
    bspec = "%s_bwd x=f32 w=f32 dy=bf16 dx=f32 hidden=1024 weight=true%s residual=true r=f32" % (
        fam, "" if rms else " bias=false")
    k1 = kt.runtime().kernel(bspec)
    assert e1 == k1.meta["entry"] and e2 == kt.runtime().kernel(k1.meta["then_spec"]).meta["entry"]
    bp = _params(kt, bspec, v1)
    assert (bp["x"], bp["dy"], bp["dres"], bp["dx"]) == (out[1].data_ptr(), dy.data_ptr(), dh.data_ptr(),
                                                         dres.data_ptr())


def test_fused_residual_errors(kt):
    x = torch.empty((4, 64), dtype=torch.float16, device="cuda")
    with pytest.raises(kiln.KilnArgumentError, match="residual has shape"):
        kt.add_rms_norm(x, torch.empty((4, 32), dtype=torch.float16, device="cuda"), 64)
    with pytest.raises(kiln.KilnArgumentError, match="CUDA"):
        kt.add_layer_norm(x, torch.empty((4, 64), dtype=torch.float16), 64)
    with pytest.raises(kiln.KilnArgumentError, match="residual: dtype"):
        kt.add_layer_norm(x, torch.empty((4, 64), dtype=torch.int32, device="cuda"), 64)


def test_no_rows_gives_zero_weight_gradients(kt, fake_cuda):
    import numpy as np
    x = torch.empty((0, 64), dtype=torch.float16, device="cuda")
    w = torch.empty(64, dtype=torch.float32, device="cuda")
    op = torch.library.REGISTERED["kiln::layer_norm"]
    out = op(x, w, w, 1e-5, "f16", 0)
    ctx = Ctx()
    op.setup_context(ctx, (x, w, w, 1e-5, "f16", 0), out)
    fake_cuda.reset()
    _dx, dw, db, _, _, _ = op.backward(ctx, x, None, None)
    assert fake_cuda.launches() == []  # nothing to launch: sums over no rows
    for g in (dw, db):
        host = np.full(64, np.nan, np.float32)
        kt.runtime()._download(host, g.data_ptr(), host.nbytes)
        assert not host.any(), host[:4]


@pytest.mark.parametrize("rms", [False, True])
def test_offset_zero_centered_weights_forward_and_backward(kt, fake_cuda, rms):
    """offset=1 (Gemma's zero-centered weights): the module starts its weight at zeros and every kernel, forward
    and backward, is the offset=1 variant."""
    hidden = 1024
    norm = kt.RMSNorm(hidden, offset=1, device="cuda") if rms else kt.LayerNorm(hidden, offset=1, device="cuda")
    assert norm.offset == 1 and "offset=1" in norm.extra_repr()
    x = torch.empty((2, 4, hidden), dtype=torch.bfloat16, device="cuda")
    fam = "rmsnorm" if rms else "layernorm"
    y = norm(x)
    assert y.dtype is torch.bfloat16
    (entry, _vals), = fake_cuda.launches()
    spec = "%s x=bf16 w=f32 y=bf16 hidden=1024 weight=true%s offset=1" % (fam, "" if rms else " bias=true")
    assert entry == kt.runtime().kernel(spec).meta["entry"]
    op = torch.library.REGISTERED["kiln::rms_norm" if rms else "kiln::layer_norm"]
    args = (x.reshape(8, hidden), norm.weight) + (() if rms else (norm.bias,)) + (1e-5, "bf16", 1)
    out = op(*args)
    ctx = Ctx()
    op.setup_context(ctx, args, out)
    fake_cuda.reset()
    op.backward(ctx, torch.empty((8, hidden), dtype=torch.bfloat16, device="cuda"), *([None] * (1 if rms else 2)))
    (e1, _v1), _ = fake_cuda.launches()
    bspec = "%s_bwd x=bf16 w=f32 dy=bf16 dx=bf16 hidden=1024 weight=true%s offset=1" % (fam, "" if rms else " bias=true")
    assert e1 == kt.runtime().kernel(bspec).meta["entry"]
    fake_cuda.reset()
    yr, _h = (kt.add_rms_norm(x, x, hidden, norm.weight, offset=1) if rms
              else kt.add_layer_norm(x, x, hidden, norm.weight, norm.bias, offset=1))
    (entry, _), = fake_cuda.launches()
    assert entry == kt.runtime().kernel(spec + " residual=true").meta["entry"]


def test_offset_errors(kt):
    x = torch.empty((4, 64), dtype=torch.float16, device="cuda")
    with pytest.raises(kiln.KilnArgumentError, match="offset must be 0 or 1"):
        kt.rms_norm(x, (64,), torch.empty(64, dtype=torch.float16, device="cuda"), offset=2)
    with pytest.raises(kiln.KilnArgumentError, match="needs a weight"):
        kt.layer_norm(x, (64,), offset=1)
    with pytest.raises(kiln.KilnArgumentError, match="needs a weight"):
        kt.RMSNorm(64, elementwise_affine=False, offset=1)
