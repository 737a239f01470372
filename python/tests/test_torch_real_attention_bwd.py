"""kiln.torch's attention backward with the real PyTorch: the backward op's schema and meta shapes; on a CUDA GPU
the gradients against torch's SDPA in float32 and the deterministic sequence's identical bits. Skipped where torch
is not installed (test_torch_emulated.py runs the backward on CPU tensors)."""

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (make setup installs the pinned one)")
if not hasattr(torch.library, "custom_op"):
    pytest.skip("kiln.torch needs torch >= 2.4 (torch.library.custom_op)", allow_module_level=True)

import kiln.torch as kt  # noqa: E402

F = torch.nn.functional
GPU = torch.cuda.is_available()
needs_gpu = pytest.mark.skipif(not GPU, reason="needs a CUDA GPU (torch.cuda.is_available() is False)")


def test_backward_schema_and_meta_shapes():
    assert str(torch.ops.kiln.attention_backward.default._schema).startswith("kiln::attention_backward(Tensor do")
    q = torch.empty(2, 4, 16, 64, device="meta", dtype=torch.bfloat16)
    k = torch.empty(2, 2, 9, 64, device="meta", dtype=torch.bfloat16)
    lse = torch.empty(2, 4, 16, device="meta")
    dq, dk, dv = torch.ops.kiln.attention_backward(q, q, k, k, q, lse, True, 0.125, False)
    assert dq.shape == q.shape and dk.shape == k.shape and dv.shape == k.shape


@needs_gpu
@pytest.mark.parametrize("dtype,causal,gqa", [(torch.float16, True, False), (torch.bfloat16, False, True),
                                              (torch.bfloat16, True, False)])
def test_gpu_gradients_match_torch(dtype, causal, gqa):
    g = torch.Generator(device="cuda").manual_seed(0)
    hkv = 2 if gqa else 8
    q = torch.randn(2, 8, 128, 64, device="cuda", dtype=dtype, generator=g).requires_grad_()
    k, v = (torch.randn(2, hkv, 128, 64, device="cuda", dtype=dtype, generator=g).requires_grad_() for _ in range(2))
    do = torch.randn(2, 8, 128, 64, device="cuda", dtype=dtype, generator=g)
    o = kt.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)
    got = torch.autograd.grad(o, (q, k, v), do)
    q32, k32, v32 = (t.detach().float().requires_grad_() for t in (q, k, v))
    ref_o = F.scaled_dot_product_attention(q32, k32, v32, is_causal=causal, enable_gqa=gqa)
    ref = torch.autograd.grad(ref_o, (q32, k32, v32), do.float())
    for name, a, r in zip(("dq", "dk", "dv"), got, ref):
        assert a.shape == r.shape and a.dtype == dtype, name
        torch.testing.assert_close(a.float(), r, rtol=3e-2, atol=3e-2 * r.abs().max().item(), msg=name)


@needs_gpu
def test_gpu_deterministic_gives_identical_bits():
    q, k, v = (torch.randn(1, 4, 300, 128, device="cuda", dtype=torch.bfloat16).requires_grad_() for _ in range(3))
    do = torch.randn_like(q)
    torch.use_deterministic_algorithms(True)
    try:
        runs = [torch.autograd.grad(kt.scaled_dot_product_attention(q, k, v, is_causal=True), (q, k, v), do)
                for _ in range(2)]
    finally:
        torch.use_deterministic_algorithms(False)
    for a, b in zip(*runs):
        assert torch.equal(a, b)
