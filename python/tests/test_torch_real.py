"""kiln.torch with the real PyTorch: op schemas, fake (meta) kernels, autograd through the norms' backward ops on
meta tensors, torch.compile graph capture, argument errors, the modules as torch's classes; on a CUDA GPU also
numerics against torch, torch's stream and allocator. test_torch_emulated.py runs the kernels on CPU tensors. Skipped
where torch is not installed."""

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (make setup installs the pinned one)")
if not hasattr(torch.library, "custom_op"):
    pytest.skip("kiln.torch needs torch >= 2.4 (torch.library.custom_op)", allow_module_level=True)

import kiln  # noqa: E402
import kiln.torch as kt  # noqa: E402

F = torch.nn.functional
GPU = torch.cuda.is_available()
needs_gpu = pytest.mark.skipif(not GPU, reason="needs a CUDA GPU (torch.cuda.is_available() is False)")


def test_schemas():
    assert str(torch.ops.kiln.layer_norm.default._schema) == (
        "kiln::layer_norm(Tensor x, Tensor? weight, Tensor? bias, float eps, str out_dtype, SymInt offset) -> "
        "(Tensor, Tensor, Tensor)")
    assert str(torch.ops.kiln.attention.default._schema).startswith("kiln::attention(Tensor q, Tensor k, Tensor v")


def test_meta_shapes():
    x = torch.empty(6, 256, dtype=torch.bfloat16, device="meta")
    w = torch.empty(256, device="meta")
    y, mean, rstd = torch.ops.kiln.layer_norm(x, w, w, 1e-5, "f32", 0)
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
    rn = kt.RMSNorm(256).to("meta")

    def f(x, q):
        return rn(ln(x)) * 2, kt.scaled_dot_product_attention(q, q, q, is_causal=True)

    torch._dynamo.reset()
    cf = torch.compile(f, backend=backend, fullgraph=True)
    y, o = cf(torch.empty(4, 256, dtype=torch.bfloat16, device="meta"),
              torch.empty(1, 2, 8, 64, dtype=torch.float16, device="meta"))
    assert y.dtype == torch.bfloat16 and o.shape == (1, 2, 8, 64)
    assert "torch.ops.kiln.layer_norm" in graphs[0] and "torch.ops.kiln.attention" in graphs[0]
    assert "torch.ops.kiln.rms_norm" in graphs[0]


def test_norm_schemas_and_meta_autograd():
    """Autograd through kiln's norm ops on meta tensors: real torch runs the backward ops' fake kernels, so the
    wiring (setup_context, saved tensors, which gradients exist and their dtypes) is checked without a GPU."""
    assert str(torch.ops.kiln.rms_norm.default._schema) == (
        "kiln::rms_norm(Tensor x, Tensor? weight, float eps, str out_dtype, SymInt offset) -> (Tensor, Tensor)")
    assert str(torch.ops.kiln.layer_norm_backward.default._schema) == (
        "kiln::layer_norm_backward(Tensor dy, Tensor x, Tensor mean, Tensor rstd, Tensor? weight, str bias_dtype, "
        "Tensor? dres, SymInt offset) -> (Tensor, Tensor, Tensor)")
    for bias in (True, False):
        x = torch.empty(4, 6, 256, dtype=torch.bfloat16, device="meta", requires_grad=True)
        ln = kt.LayerNorm(256, bias=bias, device="meta")
        ln(x).sum().backward()
        assert x.grad.dtype == torch.bfloat16 and x.grad.shape == x.shape
        assert ln.weight.grad.dtype == torch.float32 and ln.weight.grad.shape == (256,)
        assert (ln.bias is None) != bias and (not bias or ln.bias.grad.shape == (256,))
    x = torch.empty(3, 512, dtype=torch.float16, device="meta", requires_grad=True)
    rn = kt.RMSNorm(512, device="meta")
    y = rn(x)
    y.float().sum().backward()
    assert y.dtype == torch.float16 and x.grad.dtype == torch.float16 and rn.weight.grad.dtype == torch.float32
    x.grad = None
    kt.rms_norm(x, (512,), None, out_dtype=torch.float32).sum().backward()
    assert x.grad.shape == x.shape
    # the fused residual add: x and the residual stream both get gradients, each in its own dtype
    for add in (kt.add_layer_norm, kt.add_rms_norm):
        x = torch.empty(2, 3, 256, dtype=torch.bfloat16, device="meta", requires_grad=True)
        res = torch.empty(2, 3, 256, dtype=torch.float32, device="meta", requires_grad=True)
        w = torch.empty(256, device="meta", requires_grad=True)
        y, h = add(x, res, 256, w)
        assert y.dtype == torch.bfloat16 and h.dtype == torch.float32
        (y.float().sum() + h.sum()).backward()
        assert x.grad.dtype == torch.bfloat16 and res.grad.dtype == torch.float32 and w.grad.shape == (256,)


def test_cpu_tensors_get_a_clear_error():
    with pytest.raises(kiln.KilnArgumentError, match="CUDA"):
        kt.layer_norm(torch.randn(2, 64), (64,))
    with pytest.raises(kiln.KilnArgumentError, match="CUDA"):
        q = torch.randn(1, 2, 4, 64)
        kt.scaled_dot_product_attention(q, q, q, attn_mask=torch.ones(4, 4, dtype=torch.bool))


def _meta(*shape, dtype=torch.float16):
    return torch.empty(shape, dtype=dtype, device="meta")


def test_norm_argument_errors_name_the_problem():
    x, w = _meta(4, 64), _meta(64, dtype=torch.float32)
    cases = [
        (lambda: kt.layer_norm(x, (32,)), "layer_norm: normalized_shape"),
        (lambda: kt.layer_norm(x, (64,), w, _meta(64)), "one dtype for both"),
        (lambda: kt.layer_norm(_meta(4, 64, dtype=torch.int32), (64,)), "int32"),
        (lambda: kt.LayerNorm(64, out_dtype=torch.int32), "out_dtype"),
        (lambda: kt.rms_norm(x, (32,)), "rms_norm: normalized_shape"),
        (lambda: kt.rms_norm(x, (64,), _meta(32)), "rms_norm: weight has shape"),
        (lambda: kt.rms_norm(_meta(4, 64, dtype=torch.int32), (64,)), "int32"),
        (lambda: kt.add_rms_norm(x, _meta(4, 32), 64), "residual has shape"),
        (lambda: kt.add_layer_norm(x, torch.empty(4, 64, dtype=torch.float16), 64), "CUDA"),
        (lambda: kt.add_layer_norm(x, _meta(4, 64, dtype=torch.int32), 64), "residual: dtype"),
        (lambda: kt.rms_norm(x, (64,), _meta(64), offset=2), "offset must be 0 or 1"),
        (lambda: kt.layer_norm(x, (64,), offset=1), "needs a weight"),
        (lambda: kt.RMSNorm(64, elementwise_affine=False, offset=1), "needs a weight"),
    ]
    for call, words in cases:
        with pytest.raises(kiln.KilnArgumentError, match=words):
            call()


def test_modules_are_torchs_classes_and_print_as_torch_does():
    """kt.LayerNorm / kt.RMSNorm are instances of torch's classes (weight-decay groups, FSDP wrap policies find them),
    with torch's constructor defaults, parameters registered as torch registers them, and torch's printout."""
    for kw in ({}, {"bias": False}, {"elementwise_affine": False}, {"eps": 1e-6}):
        k, t = kt.LayerNorm(64, **kw), torch.nn.LayerNorm(64, **kw)
        assert isinstance(k, torch.nn.LayerNorm) and repr(k) == repr(t)
        assert list(k.state_dict()) == list(t.state_dict())
    for kw in ({}, {"eps": 1e-6}, {"elementwise_affine": False}):
        k, t = kt.RMSNorm(64, **kw), torch.nn.RMSNorm(64, **kw)
        assert isinstance(k, torch.nn.RMSNorm) and repr(k) == repr(t)
        assert list(k.state_dict()) == list(t.state_dict())
    assert repr(kt.LayerNorm(8, bias=False)) == "LayerNorm((8,), eps=1e-05, elementwise_affine=True, bias=False)"
    g = kt.RMSNorm(8, eps=1e-6, offset=1)
    assert repr(g) == "RMSNorm((8,), eps=1e-06, elementwise_affine=True, offset=1)" and not g.weight.any()
    assert repr(kt.LayerNorm(8, out_dtype=torch.bfloat16)).endswith("bias=True, out_dtype=torch.bfloat16)")
    assert kt.LayerNorm(8, dtype=torch.bfloat16).weight.dtype == torch.bfloat16


@pytest.mark.parametrize("kwargs,words", [
    (dict(attn_mask=torch.arange(8) >= 2), "not right padding"),
    (dict(attn_mask=torch.ones(8, 8).tril().bool()), "differs between heads or query rows"),
    (dict(attn_mask=torch.zeros(8, 8).fill_(-1.5)), "additive bias"),
    (dict(attn_mask=torch.ones(8, dtype=torch.int32)), "dtype torch.int32"),
    (dict(attn_mask=torch.ones(3, 8, dtype=torch.bool)), "does not broadcast"),
    (dict(attn_mask=torch.ones(8, dtype=torch.bool), is_causal=True), "torch refuses the pair"),
    (dict(attn_mask=torch.ones(8, dtype=torch.bool, device="meta")), "values cannot be read"),
    (dict(dropout_p=1.0), "takes 0 <= p < 1"),
    (dict(attn_mask=torch.ones(8, dtype=torch.bool), dropout_p=0.1), "not supported yet"),
    (dict(kshape=(1, 1, 8, 64)), "enable_gqa"),
    (dict(qshape=(1, 3, 8, 64), kshape=(1, 2, 8, 64), enable_gqa=True), "multiple"),
    (dict(qshape=(1, 2, 8, 44), kshape=(1, 2, 8, 44)), "head_dim 44"),
    (dict(qshape=(1, 2, 8, 264), kshape=(1, 2, 8, 264)), "a multiple of 8 from 8 to 256"),
    (dict(kdtype=torch.bfloat16), "share one dtype"),
    (dict(cpu=True), "CUDA"),
])
def test_sdpa_unsupported_cases_say_why(kwargs, words):
    qshape = kwargs.pop("qshape", (1, 2, 8, 64))
    kshape = kwargs.pop("kshape", qshape)
    kdtype = kwargs.pop("kdtype", torch.float16)
    dev = "cpu" if kwargs.pop("cpu", False) else "meta"
    grad = kwargs.pop("grad", False)
    q = torch.empty(qshape, dtype=torch.float16, device=dev, requires_grad=grad)
    k = torch.empty(kshape, dtype=kdtype, device=dev)
    v = torch.empty(kshape, dtype=kdtype, device=dev)
    assert words in (kt.unsupported_reason(q, k, v, **kwargs) or "")
    with pytest.raises(kiln.KilnArgumentError, match="kiln attention"):
        kt.scaled_dot_product_attention(q, k, v, **kwargs)


@needs_gpu
def test_gpu_launches_use_torchs_stream_and_allocator(monkeypatch):
    """On a GPU, kiln.torch launches on torch's current stream, and the workspaces (norm backward, split-KV
    decoding) come from torch's allocator, not the Runtime's own."""
    seen = {}
    for name in ("rms_norm", "rms_norm_backward", "attention"):
        orig = getattr(kiln.Runtime, name)

        def spy(self, *a, _orig=orig, _name=name, **kw):
            seen[_name] = kw
            return _orig(self, *a, **kw)

        monkeypatch.setattr(kiln.Runtime, name, spy)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        x = torch.randn(64, 1024, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        kt.RMSNorm(1024, device="cuda")(x).sum().backward()
        q = torch.randn(1, 32, 1, 128, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(1, 8, 4096, 128, device="cuda", dtype=torch.bfloat16)
        kt.scaled_dot_product_attention(q, k, k, enable_gqa=True)
    torch.cuda.synchronize()
    for name in ("rms_norm", "rms_norm_backward", "attention"):
        assert seen[name]["stream"] == s.cuda_stream, name
    assert isinstance(seen["rms_norm_backward"]["workspace"], torch.Tensor)
    assert isinstance(seen["attention"]["workspace"], torch.Tensor)  # decoding: split-KV partials


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
@pytest.mark.parametrize("rms", [False, True])
def test_gpu_norm_gradients_match_torch_and_repeat_bit_for_bit(rms):
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(512, 4096, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_(True)
    dy = torch.randn(512, 4096, device="cuda", dtype=torch.bfloat16, generator=g)
    m = (kt.RMSNorm(4096, eps=1e-5) if rms else kt.LayerNorm(4096)).cuda()
    with torch.no_grad():
        m.weight.normal_(1.0, 0.5, generator=g)
        if not rms:
            m.bias.normal_(0.0, 0.5, generator=g)
    m(x).backward(dy)
    xd = x.detach().double().requires_grad_(True)
    params = [p.detach().double().requires_grad_(True) for p in m.parameters()]
    ref = (F.rms_norm(xd, (4096,), params[0], 1e-5) if rms else F.layer_norm(xd, (4096,), params[0], params[1], 1e-5))
    ref.backward(dy.double())
    torch.testing.assert_close(x.grad.double(), xd.grad, rtol=2e-2, atol=2e-2)
    for p, r in zip(m.parameters(), params):
        torch.testing.assert_close(p.grad.double(), r.grad, rtol=1e-3, atol=1e-2)
    first = [p.grad.clone() for p in m.parameters()]
    m.zero_grad()
    m(x).backward(dy)
    assert all(torch.equal(a, p.grad) for a, p in zip(first, m.parameters()))  # fixed-order sums


@needs_gpu
@pytest.mark.parametrize("rms", [False, True])
def test_gpu_offset_zero_centered_weights_match_float64(rms):
    """offset=1 (Gemma's norm): y = xhat * (1 + w) (+ b) with bf16 weights near 0; forward and gradients against
    float64 torch on the same values, 1 + w formed in float64 there."""
    g = torch.Generator(device="cuda").manual_seed(2)
    x = torch.randn(256, 4096, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_(True)
    dy = torch.randn(256, 4096, device="cuda", dtype=torch.bfloat16, generator=g)
    m = (kt.RMSNorm(4096, eps=1e-5, dtype=torch.bfloat16, offset=1) if rms
         else kt.LayerNorm(4096, dtype=torch.bfloat16, offset=1)).cuda()
    with torch.no_grad():
        m.weight.normal_(0.0, 0.02, generator=g)
    y = m(x)
    y.backward(dy)
    xd = x.detach().double().requires_grad_(True)
    params = [p.detach().double().requires_grad_(True) for p in m.parameters()]
    ref = (F.rms_norm(xd, (4096,), 1 + params[0], 1e-5) if rms
           else F.layer_norm(xd, (4096,), 1 + params[0], params[1], 1e-5))
    torch.testing.assert_close(y.double(), ref, rtol=1.6e-2, atol=1.6e-2)
    ref.backward(dy.double())
    torch.testing.assert_close(x.grad.double(), xd.grad, rtol=2e-2, atol=2e-2)
    for p, r in zip(m.parameters(), params):
        torch.testing.assert_close(p.grad.double(), r.grad, rtol=1e-2, atol=5e-2)


@needs_gpu
@pytest.mark.parametrize("rms", [False, True])
def test_gpu_fused_residual_add_matches_torch(rms):
    g = torch.Generator(device="cuda").manual_seed(1)
    x = torch.randn(256, 2048, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_(True)
    res = torch.randn(256, 2048, device="cuda", dtype=torch.float32, generator=g).requires_grad_(True)
    w = torch.randn(2048, device="cuda", generator=g).requires_grad_(True)
    y, h = kt.add_rms_norm(x, res, 2048, w, eps=1e-5) if rms else kt.add_layer_norm(x, res, 2048, w, None)
    dy = torch.randn(y.shape, device="cuda", dtype=y.dtype, generator=g)
    dh = torch.randn(h.shape, device="cuda", dtype=h.dtype, generator=g)
    torch.autograd.backward((y, h), (dy, dh))
    xd, rd, wd = (t.detach().double().requires_grad_(True) for t in (x, res, w))
    hd = xd + rd
    yd = F.rms_norm(hd, (2048,), wd, 1e-5) if rms else F.layer_norm(hd, (2048,), wd, None, 1e-5)
    torch.autograd.backward((yd, hd), (dy.double(), dh.double()))
    torch.testing.assert_close(h.double(), hd.detach(), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(y.double(), yd.detach(), rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(res.grad.double(), rd.grad, rtol=1e-3, atol=1e-3)
    torch.testing.assert_close(x.grad.double(), xd.grad, rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(w.grad.double(), wd.grad, rtol=1e-3, atol=1e-2)


@needs_gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_gpu_sdpa_matches_torch(dtype):
    q, k, v = (torch.randn(2, 8, 128, 64, device="cuda", dtype=dtype) for _ in range(3))
    with torch.no_grad():
        o = kt.scaled_dot_product_attention(q, k, v, is_causal=True)
        ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True)
    torch.testing.assert_close(o.float(), ref, rtol=2e-2, atol=2e-2)
