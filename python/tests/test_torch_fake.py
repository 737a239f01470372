"""kiln.torch's logic (checks, layouts, dtypes, streams, op registration) against a tiny fake torch and the fake
CUDA driver. Runs where torch is not installed; test_torch_real.py covers the real package."""

import struct

import numpy as np
import pytest

import fake_torch_env  # noqa: F401  (skips this file where the real torch is; else the fake is importable)
import torch  # noqa: E402  (the fake)
import kiln  # noqa: E402


def _f32(bits):
    return struct.unpack("<f", struct.pack("<I", bits & 0xFFFFFFFF))[0]


def test_ops_registered_with_fake_and_autograd(kt):
    ops = torch.library.REGISTERED
    assert set(ops) >= {"kiln::layer_norm", "kiln::attention"}
    assert ops["kiln::layer_norm"].fake is not None and ops["kiln::layer_norm"].backward is not None
    assert ops["kiln::attention"].fake is not None and ops["kiln::attention"].mutates_args == ()


def test_layer_norm_bf16_activations_f32_weights(kt, fake_cuda, monkeypatch):
    seen = {}
    orig = kiln.Runtime.layer_norm

    def spy(self, y, x, weight=None, bias=None, eps=1e-5, mean=None, rstd=None, stream=None, **kw):
        seen["stream"] = stream
        return orig(self, y, x, weight, bias, eps, mean, rstd, stream, **kw)

    monkeypatch.setattr(kiln.Runtime, "layer_norm", spy)
    ln = kt.LayerNorm(1024)
    assert ln.weight.dtype is torch.float32 and ln.bias.dtype is torch.float32
    ln.weight = torch.empty(1024, dtype=torch.float32, device="cuda")  # parameters on the (fake) GPU
    ln.bias = torch.empty(1024, dtype=torch.float32, device="cuda")
    x = torch.empty((2, 3, 1024), dtype=torch.bfloat16, device="cuda")
    y = ln(x)
    assert y.dtype is torch.bfloat16 and tuple(y.shape) == (2, 3, 1024)
    launch = fake_cuda.last_launch()
    assert launch.entry.decode() == "kiln_layernorm_bf16_f32_bf16_1024_true_true"
    assert launch.param[3] == x.data_ptr() and launch.param[0] == y.data_ptr() and launch.param[6] == 6
    assert seen["stream"] == torch.cuda.STREAM  # torch's current stream
    y32 = kt.layer_norm(x, (1024,), ln.weight, None, eps=1e-6, out_dtype=torch.float32)
    assert y32.dtype is torch.float32
    launch = fake_cuda.last_launch()
    assert launch.entry.decode() == "kiln_layernorm_bf16_f32_f32_1024_true_false"
    assert abs(_f32(launch.param[8]) - 1e-6) < 1e-12


def test_layer_norm_errors(kt):
    x = torch.empty((4, 64), dtype=torch.float16, device="cuda")
    w = torch.empty(64, dtype=torch.float32, device="cuda")
    with pytest.raises(kiln.KilnArgumentError, match="normalized_shape"):
        kt.layer_norm(x, (32,))
    with pytest.raises(kiln.KilnArgumentError, match="CUDA"):
        kt.layer_norm(torch.empty((4, 64), dtype=torch.float16), (64,))
    with pytest.raises(kiln.KilnArgumentError, match="one dtype for both"):
        kt.layer_norm(x, (64,), w, torch.empty(64, dtype=torch.float16, device="cuda"))
    with pytest.raises(kiln.KilnArgumentError, match="int32"):
        kt.layer_norm(torch.empty((4, 64), dtype=torch.int32, device="cuda"), (64,))
    with pytest.raises(kiln.KilnArgumentError, match="out_dtype"):
        kt.LayerNorm(64, out_dtype=torch.int32)


def test_sdpa_layout_and_launch(kt, fake_cuda):
    b, h, s, d = 2, 4, 32, 64
    q, k, v = (torch.empty((b, h, s, d), dtype=torch.float16, device="cuda") for _ in range(3))
    o = kt.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert tuple(o.shape) == (b, h, s, d) and o.dtype is torch.float16
    launch = fake_cuda.last_launch()
    assert launch.entry.decode().startswith("kiln_attention_f16_f16_64_true")
    p = list(launch.param)
    # params: o, lse, q, k, v, batch, heads_q, heads_kv, seq_q, seq_k, scale, strides q (b, s, h) ...
    assert p[2] == q.data_ptr() and p[5:10] == [b, h, h, s, s]
    assert abs(_f32(p[10]) - 0.125) < 1e-7
    assert p[11:14] == [h * s * d, d, s * d]  # [B, H, S, D] memory read as [B, S, H, D]
    assert tuple(launch.grid)[1:] == (h, b)
    k1, v1 = (torch.empty((b, 1, s, d), dtype=torch.float16, device="cuda") for _ in range(2))
    gqa = kt.scaled_dot_product_attention(q, k1, v1, enable_gqa=True, scale=0.5)
    assert tuple(gqa.shape) == (b, h, s, d) and fake_cuda.last_launch().param[7] == 1


@pytest.mark.parametrize("kwargs,words", [
    (dict(attn_mask=object()), "attn_mask"),
    (dict(dropout_p=0.1), "dropout"),
    (dict(kshape=(1, 2, 16, 64), is_causal=True), "top-left"),
    (dict(kshape=(1, 1, 8, 64)), "enable_gqa"),
    (dict(qshape=(1, 3, 8, 64), kshape=(1, 2, 8, 64), enable_gqa=True), "multiple"),
    (dict(qshape=(1, 2, 8, 48), kshape=(1, 2, 8, 48)), "head_dim 48"),
    (dict(kdtype=torch.bfloat16), "share one dtype"),
    (dict(cpu=True), "CUDA"),
])
def test_sdpa_unsupported_cases_say_why(kt, kwargs, words):
    qshape = kwargs.pop("qshape", (1, 2, 8, 64))
    kshape = kwargs.pop("kshape", qshape)
    kdtype = kwargs.pop("kdtype", torch.float16)
    dev = "cpu" if kwargs.pop("cpu", False) else "cuda"
    q = torch.empty(qshape, dtype=torch.float16, device=dev)
    k = torch.empty(kshape, dtype=kdtype, device=dev)
    v = torch.empty(kshape, dtype=kdtype, device=dev)
    assert words in (kt.unsupported_reason(q, k, v, **kwargs) or "")
    with pytest.raises(kiln.KilnArgumentError, match="kiln attention"):
        kt.scaled_dot_product_attention(q, k, v, **kwargs)


def test_runtime_uses_torchs_current_stream_for_torch_tensors(kt):
    from kiln import _arrays, runtime
    x = torch.empty((2, 64), dtype=torch.float16, device="cuda")
    v = _arrays.view(x, "x")
    assert v.is_torch and v.ptr == x.data_ptr() and v.dtype == "f16" and v.device == 0
    assert runtime._stream_handle(None, [v]) == torch.cuda.STREAM
    assert runtime._stream_handle(7, [v]) == 7
    rt = kt.runtime()
    rt.layer_norm(torch.empty((2, 64), dtype=torch.float16, device="cuda"), x)  # torch tensors, no stream given


def test_sdpa_decoding_runs_split_kv_with_a_torch_workspace(kt, fake_cuda):
    b, hq, hkv, sk, d = 1, 32, 8, 4096, 128
    q = torch.empty((b, hq, 1, d), dtype=torch.bfloat16, device="cuda")
    k, v = (torch.empty((b, hkv, sk, d), dtype=torch.bfloat16, device="cuda") for _ in range(2))
    fake_cuda.reset()
    o = kt.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    assert tuple(o.shape) == (b, hq, 1, d)
    (e1, v1), (e2, v2) = fake_cuda.launches()
    assert "combine" not in e1 and e2.startswith("kiln_attention_combine")
    rt = kt.runtime()
    split = rt.kernel("attention dtype=bf16 head_dim=128 splitkv=true")
    ws = {p["name"]: val for p, val in zip(split.meta["params"], v1)}["ws"]
    runtime_kept = getattr(rt, "_fwd_ws", None)
    assert ws != 0 and (runtime_kept is None or ws != runtime_kept.ptr)  # torch's allocation, not the Runtime's
