"""kiln.torch with the real PyTorch: op schemas, fake (meta) kernels, torch.compile graph capture, the LayerNorm
backward formula; on a CUDA GPU also numerics against torch. Skipped where torch is not installed."""

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (test_torch_fake.py covers kiln.torch's logic)")
if getattr(torch, "_kiln_fake", False):
    pytest.skip("torch is not installed (only the test fake, which test_torch_fake.py uses)", allow_module_level=True)
if not hasattr(torch.library, "custom_op"):
    pytest.skip("kiln.torch needs torch >= 2.4 (torch.library.custom_op)", allow_module_level=True)

import kiln  # noqa: E402
import kiln.torch as kt  # noqa: E402

F = torch.nn.functional
GPU = torch.cuda.is_available()
needs_gpu = pytest.mark.skipif(not GPU, reason="needs a CUDA GPU (torch.cuda.is_available() is False)")


def test_schemas():
    assert str(torch.ops.kiln.layer_norm.default._schema) == (
        "kiln::layer_norm(Tensor x, Tensor? weight, Tensor? bias, float eps, str out_dtype) -> (Tensor, Tensor, Tensor)")
    assert str(torch.ops.kiln.attention.default._schema).startswith("kiln::attention(Tensor q, Tensor k, Tensor v")


def test_meta_shapes():
    x = torch.empty(6, 256, dtype=torch.bfloat16, device="meta")
    w = torch.empty(256, device="meta")
    y, mean, rstd = torch.ops.kiln.layer_norm(x, w, w, 1e-5, "f32")
    assert y.shape == x.shape and y.dtype == torch.float32 and mean.shape == (6,) and rstd.dtype == torch.float32
    q = torch.empty(2, 4, 16, 64, dtype=torch.float16, device="meta")
    o = kt.scaled_dot_product_attention(q, q, q)
    assert o.shape == q.shape and o.dtype == q.dtype


def test_compile_captures_the_ops():
    graphs = []

    def backend(gm, inputs):
        graphs.append(str(gm.graph))
        return gm.forward

    ln = kt.LayerNorm(256).to("meta")

    def f(x, q):
        return ln(x) * 2, kt.scaled_dot_product_attention(q, q, q, is_causal=True)

    torch._dynamo.reset()
    cf = torch.compile(f, backend=backend, fullgraph=True)
    y, o = cf(torch.empty(4, 256, dtype=torch.bfloat16, device="meta"),
              torch.empty(1, 2, 8, 64, dtype=torch.float16, device="meta"))
    assert y.dtype == torch.bfloat16 and o.shape == (1, 2, 8, 64)
    assert "torch.ops.kiln.layer_norm" in graphs[0] and "torch.ops.kiln.attention" in graphs[0]


class _Ctx:
    pass


def test_layer_norm_backward_formula_matches_torch():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(5, 96, generator=g, dtype=torch.float64, requires_grad=True)
    w = torch.randn(96, generator=g, dtype=torch.float64, requires_grad=True)
    b = torch.randn(96, generator=g, dtype=torch.float64, requires_grad=True)
    dy = torch.randn(5, 96, generator=g, dtype=torch.float64)
    F.layer_norm(x, (96,), w, b, 1e-5).backward(dy)
    mean = x.detach().mean(-1)
    rstd = (x.detach().var(-1, unbiased=False) + 1e-5).rsqrt()
    ctx = _Ctx()
    ctx.saved_tensors = (x.detach(), w.detach(), mean.float(), rstd.float())
    ctx.has_bias, ctx.bias_dtype = True, torch.float64
    dx, dw, db, _, _ = kt._ln_backward(ctx, dy, None, None)
    for got, ref in ((dx, x.grad), (dw, w.grad), (db, b.grad)):
        assert torch.allclose(got.double(), ref, rtol=1e-4, atol=1e-4)


def test_cpu_tensors_get_a_clear_error():
    with pytest.raises(kiln.KilnArgumentError, match="CUDA"):
        kt.layer_norm(torch.randn(2, 64), (64,))
    with pytest.raises(kiln.KilnArgumentError, match="attn_mask"):
        q = torch.randn(1, 2, 4, 64)
        kt.scaled_dot_product_attention(q, q, q, attn_mask=torch.ones(4, 4, dtype=torch.bool))


@needs_gpu
def test_gpu_layer_norm_bf16_with_f32_weights_matches_torch():
    x = torch.randn(64, 4096, device="cuda", dtype=torch.bfloat16)
    ln = kt.LayerNorm(4096).cuda()
    torch.nn.init.normal_(ln.weight)
    torch.nn.init.normal_(ln.bias)
    y = ln(x)
    ref = F.layer_norm(x.float(), (4096,), ln.weight, ln.bias, 1e-5)
    assert y.dtype == torch.bfloat16
    torch.testing.assert_close(y.float(), ref, rtol=1.6e-2, atol=1.6e-2)
    x.requires_grad_(True)
    ln(x).float().sum().backward()
    assert x.grad is not None and ln.weight.grad is not None


@needs_gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_gpu_sdpa_matches_torch(dtype):
    q, k, v = (torch.randn(2, 8, 128, 64, device="cuda", dtype=dtype) for _ in range(3))
    with torch.no_grad():
        o = kt.scaled_dot_product_attention(q, k, v, is_causal=True)
        ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True)
    torch.testing.assert_close(o.float(), ref, rtol=2e-2, atol=2e-2)
