"""kiln.Runtime's norm helpers (rms_norm, the fused residual add, layer_norm_backward, rms_norm_backward) against
the fake CUDA driver: the kernels picked, the arguments bound, the backward's two launches and its workspace,
and every argument error."""

import pytest

import kiln

ml_dtypes = pytest.importorskip("ml_dtypes")


def params(rt, kernel_spec, values):
    """A launch's parameter values by name, for the kernel kernel_spec names."""
    k = rt.kernel(kernel_spec)
    return {p["name"]: v for p, v in zip(k.meta["params"], values)}


def test_rms_norm_bf16_with_f32_weight(fake_cuda):
    rt = kiln.Runtime(disk_cache=False)
    x, y = rt.empty((3, 5, 2048), "bf16"), rt.empty((3, 5, 2048), "bf16")
    w, rstd = rt.empty((2048,), "f32"), rt.empty((15,), "f32")
    rt.rms_norm(y, x, w, eps=1e-6, rstd=rstd)
    k = rt.rms_norm_kernel(y, x, w, rstd=rstd)
    assert k.spec == "rmsnorm x=bf16 w=f32 y=bf16 hidden=2048 weight=true"
    (entry, vals), = fake_cuda.launches()
    assert entry == k.meta["entry"]
    got = params(rt, k.spec, vals)
    assert (got["x"], got["y"], got["weight"], got["rstd"], got["rows"]) == (x.ptr, y.ptr, w.ptr, rstd.ptr, 15)


def test_fused_residual_add(fake_cuda):
    rt = kiln.Runtime(disk_cache=False)
    x, res, h = (rt.empty((8, 1024), "bf16") for _ in range(3))
    y = rt.empty((8, 1024), "bf16")
    w, b = rt.empty((1024,), "f32"), rt.empty((1024,), "f32")
    rt.layer_norm(y, x, w, b, residual=res, h=h)
    (entry, vals), = fake_cuda.launches()
    spec = "layernorm x=bf16 w=f32 y=bf16 hidden=1024 residual=true"
    got = params(rt, spec, vals)
    assert rt.kernel(spec).meta["entry"] == entry
    assert (got["residual"], got["h"], got["x"], got["weight"], got["bias"]) == (res.ptr, h.ptr, x.ptr, w.ptr, b.ptr)
    fake_cuda.reset()
    rt.rms_norm(y, x, w, residual=res, h=h)
    assert fake_cuda.launches()[0][0] == rt.kernel("rmsnorm x=bf16 w=f32 y=bf16 hidden=1024 residual=true").meta["entry"]


@pytest.mark.parametrize("rms", [False, True])
def test_backward_two_kernels_and_workspace(fake_cuda, rms):
    rt = kiln.Runtime(disk_cache=False)
    rows, hidden = 64, 4096
    x, dy, dx = (rt.empty((rows, hidden), "bf16") for _ in range(3))
    mean, rstd = rt.empty((rows,), "f32"), rt.empty((rows,), "f32")
    w, dw, db = (rt.empty((hidden,), "f32") for _ in range(3))
    if rms:
        need = rt.rms_norm_backward_workspace(dx, dy, x, rstd, w, dw)
        rt.rms_norm_backward(dx, dy, x, rstd, w, dw)
        family = "rmsnorm_bwd x=bf16 w=f32 hidden=4096"
    else:
        need = rt.layer_norm_backward_workspace(dx, dy, x, mean, rstd, w, dw, db)
        rt.layer_norm_backward(dx, dy, x, mean, rstd, w, dw, db)
        family = "layernorm_bwd x=bf16 w=f32 hidden=4096"
    assert need > 0 and need % (hidden * 4) == 0
    (e1, v1), (e2, v2) = fake_cuda.launches()
    k1 = rt.kernel(family)
    assert e1 == k1.meta["entry"] and e2 == rt.kernel(k1.meta["then_spec"]).meta["entry"]
    got = params(rt, family, v1)
    assert (got["dx"], got["dy"], got["x"], got["rstd"], got["weight"]) == (dx.ptr, dy.ptr, x.ptr, rstd.ptr, w.ptr)
    assert rms or got["mean"] == mean.ptr
    red = params(rt, k1.meta["then_spec"], v2)
    assert red["ws"] == got["ws"] != 0 and red["dweight"] == dw.ptr and red["dbias"] == (0 if rms else db.ptr)
    # the caller's workspace is used when given, and checked for size
    fake_cuda.reset()
    ws = rt.empty(((need + 3) // 4,), "f32")
    if rms:
        rt.rms_norm_backward(dx, dy, x, rstd, w, dw, workspace=ws)
    else:
        rt.layer_norm_backward(dx, dy, x, mean, rstd, w, dw, db, workspace=ws)
    assert params(rt, family, fake_cuda.launches()[0][1])["ws"] == ws.ptr
    small = rt.empty((4,), "f32")
    with pytest.raises(kiln.KilnArgumentError, match=r"workspace must be %d contiguous bytes" % need):
        if rms:
            rt.rms_norm_backward(dx, dy, x, rstd, w, dw, workspace=small)
        else:
            rt.layer_norm_backward(dx, dy, x, mean, rstd, w, dw, db, workspace=small)


def test_backward_without_weight_needs_no_workspace(fake_cuda):
    rt = kiln.Runtime(disk_cache=False)
    x, dy, dx, dres = (rt.empty((4, 768), "f16") for _ in range(4))
    mean, rstd = rt.empty((4,), "f32"), rt.empty((4,), "f32")
    assert rt.layer_norm_backward_workspace(dx, dy, x, mean, rstd) == 0
    rt.layer_norm_backward(dx, dy, x, mean, rstd, dres=dres)
    (entry, vals), = fake_cuda.launches()
    spec = "layernorm_bwd x=f16 hidden=768 weight=false bias=false residual=true"
    assert entry == rt.kernel(spec).meta["entry"] and params(rt, spec, vals)["dres"] == dres.ptr


def test_norm_argument_errors(fake_cuda):
    rt = kiln.Runtime(disk_cache=False)
    x, y = rt.empty((4, 256), "f16"), rt.empty((4, 256), "f16")
    w = rt.empty((256,), "f32")
    mean, rstd = rt.empty((4,), "f32"), rt.empty((4,), "f32")
    cases = [
        (lambda: rt.rms_norm(rt.empty((4, 128), "f16"), x), "y has shape"),
        (lambda: rt.rms_norm(y, x, rt.empty((128,), "f32")), "weight must be 256 contiguous values"),
        (lambda: rt.rms_norm(y, x, rstd=rt.empty((4,), "f16")), "rstd must be 4 contiguous f32 values"),
        (lambda: rt.rms_norm(y, x, residual=x), "residual and h go together"),
        (lambda: rt.layer_norm(y, x, residual=x, h=rt.empty((4, 256), "bf16")), "share a dtype"),
        (lambda: rt.rms_norm(rt.empty((4, 0), "f16"), rt.empty((4, 0), "f16")), "hidden >= 1"),
        (lambda: rt.layer_norm_backward(y, x, x, None, rstd), "mean .* is required"),
        (lambda: rt.layer_norm_backward(y, x, x, mean, rstd, w), "so dweight is required"),
        (lambda: rt.rms_norm_backward(y, x, x, rstd, None, w), "dweight needs weight"),
        (lambda: rt.layer_norm_backward(y, x, x, mean, rstd, w, w, rt.empty((256,), "f16")), "share one dtype"),
        (lambda: rt.rms_norm_backward(None, x, x, rstd), "dx is required"),
    ]
    for call, words in cases:
        with pytest.raises(kiln.KilnArgumentError, match=words):
            call()
    assert fake_cuda.launches() == []


def test_generic_launch_is_the_helpers_launch(fake_cuda):
    """Runtime.launch binds by the names the template declares and runs the whole sequence: the same
    launches as the typed helper (the backward and norm_reduce, the workspace)."""
    rt = kiln.Runtime(disk_cache=False)
    rows, hidden = 64, 4096
    x, dy, dx = (rt.empty((rows, hidden), "bf16") for _ in range(3))
    mean, rstd = rt.empty((rows,), "f32"), rt.empty((rows,), "f32")
    w, dw, db = (rt.empty((hidden,), "f32") for _ in range(3))
    need = rt.layer_norm_backward_workspace(dx, dy, x, mean, rstd, w, dw, db)
    ws = rt.empty(((need + 3) // 4,), "f32")
    rt.layer_norm_backward(dx, dy, x, mean, rstd, w, dw, db, workspace=ws)
    helper = fake_cuda.launches()
    fake_cuda.reset()
    spec = "layernorm_bwd x=bf16 w=f32 hidden=4096"
    t = dict(dx=dx, dy=dy, x=x, mean=mean, rstd=rstd, weight=w, dweight=dw, dbias=db)
    assert rt.launch_workspace(spec, t, {"rows": rows}) == need
    rt.launch(spec, t, {"rows": rows, "hidden": hidden}, workspace=ws)
    assert fake_cuda.launches() == helper and len(helper) == 2
    assert "tensor dx out rows hidden" in rt.kernel(spec).meta["launch"]
    with pytest.raises(kiln.KilnError, match="takes no tensor 'dz'"):
        rt.launch(spec, dict(t, dz=dx), {"rows": rows})
    with pytest.raises(kiln.KilnError, match="needs the scalar 'rows'"):
        rt.launch(spec, t, {})
