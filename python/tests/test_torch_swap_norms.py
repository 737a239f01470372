"""kiln.torch.swap_norms: a model's nn.LayerNorm, nn.RMSNorm and model-code RMSNorms (written here with the structure of
transformers' LlamaRMSNorm and GemmaRMSNorm; nothing downloaded) replaced in place by kiln's modules, state_dict and
parameter objects kept, lookalikes left alone; the swapped model run on the emulator against the original. Skipped
where torch is not installed."""

import copy

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (make setup installs the pinned one)")
if not hasattr(torch.library, "custom_op"):
    pytest.skip("kiln.torch needs torch >= 2.4 (torch.library.custom_op)", allow_module_level=True)

import kiln.torch as kt  # noqa: E402

nn = torch.nn


class LlamaLikeRMSNorm(nn.Module):
    """The structure of LlamaRMSNorm (Mistral's, Qwen2's): f32 statistics, weight * normalized in the input dtype."""

    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


class GemmaLikeRMSNorm(nn.Module):
    """The structure of GemmaRMSNorm: zero-centered weights, the output multiplied by (1 + weight) in f32."""

    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        out = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps)
        return (out * (1.0 + self.weight.float())).type_as(x)


class MeanCenteredNorm(nn.Module):
    """A weight and an eps, but LayerNorm's math without a bias: not an RMSNorm."""

    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        x = x - x.mean(-1, keepdim=True)
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class GatedRMSNorm(LlamaLikeRMSNorm):
    """RMSNorm of the hidden states times a gate: its forward needs a second input, so kiln's module cannot stand in."""

    def forward(self, hidden_states, gate):
        return super().forward(hidden_states) * torch.sigmoid(gate)


class Scale(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = 1e-6

    def forward(self, x):
        return x * self.weight


class Fp32LayerNorm(nn.LayerNorm):
    """open_clip's LayerNorm subclass: f32 math under f16/bf16 activations, the result in the input's dtype."""

    def forward(self, x):
        w, b = (t.float() if t is not None else None for t in (self.weight, self.bias))
        return nn.functional.layer_norm(x.float(), self.normalized_shape, w, b, self.eps).to(x.dtype)


class DoubledLayerNorm(nn.LayerNorm):
    def forward(self, x):
        return super().forward(x) * 2


class OffsetRMSNorm(nn.RMSNorm):
    """A subclass that stores zero-centered weights: y = rms_norm(x) * (1 + weight)."""

    def forward(self, x):
        return nn.functional.rms_norm(x, self.normalized_shape, 1 + self.weight, self.eps)


def _model(d=32, dtype=torch.float32):
    torch.manual_seed(0)
    m = nn.ModuleDict({
        "embed": nn.Linear(d, d),
        "ln": nn.LayerNorm(d),
        "ln_nobias": nn.LayerNorm(d, bias=False, eps=1e-6),
        "rms": nn.RMSNorm(d, eps=1e-6),
        "layers": nn.ModuleList([nn.ModuleDict({"input_layernorm": LlamaLikeRMSNorm(d),
                                                "post_layernorm": GemmaLikeRMSNorm(d)}) for _ in range(2)]),
        "lookalikes": nn.ModuleList([MeanCenteredNorm(d), GatedRMSNorm(d), Scale(d)]),
    }).to(dtype)
    with torch.no_grad():
        for p in m.parameters():
            p.add_(torch.randn(p.shape).to(dtype) * 0.1)
    return m


def _run(m, x):
    h = m["embed"](x)
    h = m["rms"](m["ln_nobias"](m["ln"](h)))
    for layer in m["layers"]:
        h = layer["post_layernorm"](layer["input_layernorm"](h)) + h
    return m["lookalikes"][0](h) + m["lookalikes"][2](h)


def test_swaps_by_class_and_structure_keeping_parameters_and_state_dict():
    m = _model()
    before = m.state_dict()
    params = {n: p for n, p in m.named_parameters()}
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    assert kt.swap_norms(m) is m
    assert type(m["ln"]) is kt.LayerNorm and isinstance(m["ln"], nn.LayerNorm)
    assert type(m["rms"]) is kt.RMSNorm and isinstance(m["rms"], nn.RMSNorm)
    assert repr(m["ln_nobias"]) == "LayerNorm((32,), eps=1e-06, elementwise_affine=True, bias=False)"
    assert repr(m["rms"]) == "RMSNorm((32,), eps=1e-06, elementwise_affine=True)"
    for layer in m["layers"]:
        llama, gemma = layer["input_layernorm"], layer["post_layernorm"]
        assert type(llama) is kt.RMSNorm and llama.offset == 0 and llama.eps == 1e-6
        assert type(gemma) is kt.RMSNorm and gemma.offset == 1
        assert repr(gemma) == "RMSNorm((32,), eps=1e-06, elementwise_affine=True, offset=1)"
    assert [type(x) for x in m["lookalikes"]] == [MeanCenteredNorm, GatedRMSNorm, Scale]
    after = m.state_dict()
    assert list(after) == list(before)
    assert all(after[k].data_ptr() == before[k].data_ptr() for k in before)
    assert all(p is params[n] for n, p in m.named_parameters())  # the optimizer's references hold
    assert opt.param_groups[0]["params"][2] is m["ln"].weight  # embed.weight, embed.bias, ln.weight
    assert kt.swap_norms(m) is m and type(m["ln"]) is kt.LayerNorm  # a second call changes nothing


def test_recognition_does_not_depend_on_the_weights_and_leaves_them_alone():
    """Weights far from 1 make w and 1 + w nearly equal; the math is told apart on a copy with its own weights, and
    the model's weights are not touched."""
    big = nn.ModuleList([GemmaLikeRMSNorm(16), LlamaLikeRMSNorm(16)]).to(torch.bfloat16)
    with torch.no_grad():
        for p in big.parameters():
            p.fill_(64.0)
    kt.swap_norms(big)
    assert [(type(n), n.offset) for n in big] == [(kt.RMSNorm, 1), (kt.RMSNorm, 0)]
    assert all((p == 64.0).all() for p in big.parameters())


def test_subclasses_of_torchs_norms_by_their_math():
    m = nn.ModuleList([Fp32LayerNorm(16), Fp32LayerNorm(16, elementwise_affine=False), DoubledLayerNorm(16),
                       OffsetRMSNorm(16, eps=1e-6), OffsetRMSNorm((2, 8))]).to(torch.bfloat16)
    ref = copy.deepcopy(m)
    kt.swap_norms(m)
    assert [(type(n).__name__, getattr(n, "offset", None)) for n in m] == [
        ("LayerNorm", 0), ("LayerNorm", 0), ("DoubledLayerNorm", None), ("RMSNorm", 1), ("RMSNorm", 1)]
    assert type(m[0]) is kt.LayerNorm and m[4].normalized_shape == (2, 8)
    x = torch.randn(3, 16).to(torch.bfloat16)
    with kt.emulated():
        for i in (0, 1, 3):
            torch.testing.assert_close(m[i](x).float(), ref[i](x).float(), rtol=2e-2, atol=2e-2)
        torch.testing.assert_close(m[4](x.view(3, 2, 8)).float(), ref[4](x.view(3, 2, 8)).float(), rtol=2e-2,
                                   atol=2e-2)


def test_root_norms_meta_models_and_dtypes_kiln_does_not_take():
    assert type(kt.swap_norms(nn.LayerNorm(8))) is kt.LayerNorm
    assert type(kt.swap_norms(nn.RMSNorm(8, elementwise_affine=False))) is kt.RMSNorm
    meta = nn.ModuleList([nn.LayerNorm(8, device="meta"), LlamaLikeRMSNorm(8).to("meta")])
    kt.swap_norms(meta)
    assert type(meta[0]) is kt.LayerNorm and meta[0].weight.is_meta  # by class: no need to run it
    assert type(meta[1]) is LlamaLikeRMSNorm  # by its math: a meta module cannot be run
    f64 = nn.Sequential(nn.LayerNorm(8).double(), LlamaLikeRMSNorm(8).double())
    kt.swap_norms(f64)
    assert [type(x) for x in f64] == [nn.LayerNorm, LlamaLikeRMSNorm]
    frozen = nn.LayerNorm(8).eval()
    assert not kt.swap_norms(frozen).training


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_swapped_model_matches_the_original_on_the_emulator(dtype):
    """The swapped model, forward and one training step's gradients, against the original run by torch on the same
    parameters (kiln rounds once in f32 where the model code rounds on the way: bf16's tolerance)."""
    ref = _model(dtype=dtype)
    m = copy.deepcopy(ref)
    kt.swap_norms(m)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(3, 32, generator=g).to(dtype)
    with kt.emulated():
        y = _run(m, x)
        y.float().pow(2).sum().backward()
    y_ref = _run(ref, x)
    y_ref.float().pow(2).sum().backward()
    tol = 2e-5 if dtype == torch.float32 else 4e-2
    scale = y_ref.abs().max().item()
    torch.testing.assert_close(y.float(), y_ref.float(), rtol=tol, atol=tol * scale)
    for (n, p), (_, r) in zip(m.named_parameters(), ref.named_parameters()):
        if r.grad is None:  # the gated lookalike is not in _run's path
            assert p.grad is None, n
            continue
        s = max(r.grad.abs().max().item(), 1e-3)
        torch.testing.assert_close(p.grad.float(), r.grad.float(), rtol=tol * 4, atol=tol * 4 * s, msg=n)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (torch.cuda.is_available() is False)")
def test_gpu_swapped_model_matches_the_original():
    """On a GPU (the kit): the model-code norms are recognized by running them on the device, and the swapped bf16
    model's forward and gradients match the original's."""
    ref = _model(d=256, dtype=torch.bfloat16).cuda()
    m = copy.deepcopy(ref)
    kt.swap_norms(m)
    assert type(m["layers"][0]["post_layernorm"]) is kt.RMSNorm and m["layers"][0]["post_layernorm"].offset == 1
    x = torch.randn(64, 256, device="cuda").to(torch.bfloat16)
    y, y_ref = _run(m, x), _run(ref, x)
    y.float().pow(2).sum().backward()
    y_ref.float().pow(2).sum().backward()
    scale = y_ref.abs().max().item()
    torch.testing.assert_close(y.float(), y_ref.float(), rtol=4e-2, atol=4e-2 * scale)
    for (n, p), (_, r) in zip(m.named_parameters(), ref.named_parameters()):
        if r.grad is not None:
            s = max(r.grad.abs().max().item(), 1e-3)
            torch.testing.assert_close(p.grad.float(), r.grad.float(), rtol=0.16, atol=0.16 * s, msg=n)
