"""kiln.torch.apply_rotary_emb (FlashAttention's signature) on the fake torch and the fake CUDA driver: the op, its
autograd (the backward rotates by -theta), in place, varlen and per-sequence offsets, and its argument checks."""

import pytest

from fake_torch_env import Ctx  # noqa: E402  (skips this file where the real torch is; else the fake is importable)
import torch  # noqa: E402  (the fake)
from kiln.errors import KilnArgumentError  # noqa: E402

# rotary's parameters in order (templates/rotary.lua), out of place, not varlen
NAMES = ["out", "x", "cos", "sin", "offsets", "batch", "seq", "heads", "seqlen_ro", "offset", "conjugate",
         "stride_xb", "stride_xs", "stride_xh", "stride_ob", "stride_os", "stride_oh"]


def test_op_registered_with_fake_and_autograd(kt):
    ops = torch.library.REGISTERED
    assert ops["kiln::rotary"].fake is not None and ops["kiln::rotary"].backward is not None
    assert ops["kiln::rotary_"].mutates_args == ("x",)


def test_forward_launch_and_backward_conjugate(kt, fake_cuda):
    x = torch.empty((2, 37, 11, 128), dtype=torch.bfloat16, device="cuda")
    cos, sin = (torch.empty((64, 64), dtype=torch.bfloat16, device="cuda") for _ in range(2))
    y = kt.apply_rotary_emb(x, cos, sin, seqlen_offsets=5)
    assert tuple(y.shape) == (2, 37, 11, 128) and y.dtype is torch.bfloat16
    launch = fake_cuda.last_launch()
    assert launch.entry.decode() == "kiln_rotary_bf16_bf16_128_128_false_false_false"
    assert tuple(launch.grid) == (3, 2, 2)  # 16 tokens x 8 heads a block
    p = dict(zip(NAMES, launch.param))
    assert p["x"] == x.data_ptr() and p["out"] == y.data_ptr() and p["offsets"] == 0
    assert (p["batch"], p["seq"], p["heads"], p["seqlen_ro"], p["offset"], p["conjugate"]) == (2, 37, 11, 64, 5, 0)
    assert (p["stride_xb"], p["stride_xs"], p["stride_xh"]) == (37 * 11 * 128, 11 * 128, 128)
    op = torch.library.REGISTERED["kiln::rotary"]
    ctx = Ctx()
    op.setup_context(ctx, (x, cos, sin, None, None, False, 5, 0, False), y)
    dx = op.backward(ctx, torch.empty((2, 37, 11, 128), dtype=torch.bfloat16, device="cuda"))[0]
    p = dict(zip(NAMES, fake_cuda.last_launch().param))
    assert p["out"] == dx.data_ptr() and p["conjugate"] == 1 and p["offset"] == 5


def test_varlen_offsets_tensor_and_in_place(kt, fake_cuda):
    x = torch.empty((40, 4, 64), dtype=torch.float16, device="cuda")
    cos, sin = (torch.empty((100, 16), dtype=torch.float32, device="cuda") for _ in range(2))
    cu = torch.empty((4,), dtype=torch.int32, device="cuda")
    offs = torch.empty((3,), dtype=torch.int32, device="cuda")
    got = kt.apply_rotary_emb(x, cos, sin, interleaved=True, inplace=True, seqlen_offsets=offs, cu_seqlens=cu,
                              max_seqlen=20)
    assert got is x
    launch = fake_cuda.last_launch()
    assert launch.entry.decode() == "kiln_rotary_f16_f32_64_32_true_true_true"
    names = ["x", "cos", "sin", "cu_seqlens", "offsets", "batch", "seq", "heads", "seqlen_ro", "offset", "conjugate",
             "stride_xs", "stride_xh"]
    p = dict(zip(names, launch.param))
    assert p["x"] == x.data_ptr() and p["cu_seqlens"] == cu.data_ptr() and p["offsets"] == offs.data_ptr()
    assert (p["batch"], p["seq"], p["heads"], p["stride_xs"], p["stride_xh"]) == (3, 20, 4, 256, 64)


def test_bad_arguments(kt):
    x = torch.empty((1, 4, 2, 8), dtype=torch.float16, device="cuda")
    cos = torch.empty((4, 4), dtype=torch.float16, device="cuda")
    with pytest.raises(KilnArgumentError, match="rotary_dim"):
        kt.apply_rotary_emb(x, *(torch.empty((4, 8), dtype=torch.float16, device="cuda") for _ in range(2)))
    with pytest.raises(KilnArgumentError, match="max_seqlen"):
        kt.apply_rotary_emb(torch.empty((4, 2, 8), dtype=torch.float16, device="cuda"), cos, cos,
                            cu_seqlens=torch.empty((2,), dtype=torch.int32, device="cuda"))
    with pytest.raises(KilnArgumentError, match="one shape and dtype"):
        kt.apply_rotary_emb(x, cos, torch.empty((4, 4), dtype=torch.float32, device="cuda"))
    with pytest.raises(KilnArgumentError, match="CUDA tensors"):
        kt.apply_rotary_emb(torch.empty((1, 4, 2, 8), dtype=torch.float16), cos, cos)


def test_strided_x_reaches_the_kernel_without_a_copy(kt, fake_cuda):
    # [batch, heads, seq, d] storage seen as [batch, seq, heads, d]: strides pass through the generic launch
    x = torch.empty((2, 4, 5, 64), dtype=torch.float16, device="cuda").transpose(1, 2)
    cos, sin = (torch.empty((8, 32), dtype=torch.float16, device="cuda") for _ in range(2))
    y = kt.apply_rotary_emb(x, cos, sin)
    p = dict(zip(NAMES, fake_cuda.last_launch().param))
    assert p["x"] == x.data_ptr() and (p["stride_xb"], p["stride_xs"], p["stride_xh"]) == (4 * 5 * 64, 64, 5 * 64)
    assert (p["stride_ob"], p["stride_os"], p["stride_oh"]) == (5 * 4 * 64, 4 * 64, 64) and p["out"] == y.data_ptr()
