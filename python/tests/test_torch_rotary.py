"""kiln.torch.apply_rotary_emb (FlashAttention's signature) with real torch on CPU tensors inside
kiln.torch.emulated(): forward against torch's float64 rotation (GPT-NeoX halves and GPT-J pairs, rotary_dim <
head_dim, per-sequence offsets, varlen), the backward (the same kernel rotating by -theta) against autograd of the
float64 expression, in place, and the argument checks; outside emulated(), CPU tensors get kiln's error from the
function and the raw ops. Skipped where torch is not installed."""

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (make setup installs the pinned one)")
if not hasattr(torch.library, "custom_op"):
    pytest.skip("kiln.torch needs torch >= 2.4 (torch.library.custom_op)", allow_module_level=True)

import kiln  # noqa: E402
import kiln.torch as kt  # noqa: E402
from kiln.errors import KilnArgumentError  # noqa: E402

TOL = {torch.float32: 2e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}


def reference(x, cos, sin, interleaved, positions):
    """float64 rotation: x [..., seq, heads, d] rows at `positions` ([batch, seq] table indices; outside: unrotated)."""
    x = x.double()
    r = 2 * cos.shape[1]
    c = cos.double()[positions.clamp(0, cos.shape[0] - 1)].unsqueeze(-2)  # [batch, seq, 1, r/2]
    s = sin.double()[positions.clamp(0, cos.shape[0] - 1)].unsqueeze(-2)
    inside = ((positions >= 0) & (positions < cos.shape[0])).unsqueeze(-1).unsqueeze(-1)
    rot = x[..., :r]
    if interleaved:
        a, b = rot[..., 0::2], rot[..., 1::2]
        out = torch.stack((a * c - b * s, a * s + b * c), dim=-1).flatten(-2)
    else:
        a, b = rot[..., : r // 2], rot[..., r // 2:]
        out = torch.cat((a * c - b * s, a * s + b * c), dim=-1)
    out = torch.where(inside, out, rot)
    return torch.cat((out, x[..., r:]), dim=-1)


@pytest.mark.parametrize("dtype,interleaved,rdim", [(torch.float32, False, 64), (torch.float16, True, 32),
                                                    (torch.bfloat16, False, 16)])
def test_forward_matches_float64(emu, dtype, interleaved, rdim):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 5, 3, 64, generator=g).to(dtype)
    cos, sin = (torch.randn(12, rdim // 2, generator=g).to(dtype) for _ in range(2))
    offs = torch.tensor([0, 9], dtype=torch.int32)  # the second sequence runs past the table: unrotated there
    y = kt.apply_rotary_emb(x, cos, sin, interleaved=interleaved, seqlen_offsets=offs)
    pos = torch.arange(5).unsqueeze(0) + offs.long().unsqueeze(1)
    ref = reference(x, cos, sin, interleaved, pos)
    torch.testing.assert_close(y.double(), ref, rtol=TOL[dtype], atol=TOL[dtype] * ref.abs().max().item())
    assert torch.equal(y[..., rdim:], x[..., rdim:])


def test_backward_rotates_by_minus_theta(emu):
    g = torch.Generator().manual_seed(2)
    x = torch.randn(1, 4, 2, 32, generator=g, requires_grad=True)
    cos, sin = (torch.randn(8, 16, generator=g) for _ in range(2))
    dy = torch.randn(1, 4, 2, 32, generator=g)
    kt.apply_rotary_emb(x, cos, sin, seqlen_offsets=2).backward(dy)
    xd = x.detach().double().requires_grad_()
    reference(xd, cos, sin, False, torch.arange(4).unsqueeze(0) + 2).backward(dy.double())
    torch.testing.assert_close(x.grad.double(), xd.grad, rtol=1e-5, atol=1e-5)


def test_in_place_and_varlen(emu):
    g = torch.Generator().manual_seed(3)
    lens = [3, 0, 5]
    cu = torch.tensor([0, 3, 3, 8], dtype=torch.int32)
    x = torch.randn(8, 2, 32, generator=g, dtype=torch.float16)
    cos, sin = (torch.randn(10, 16, generator=g, dtype=torch.float16) for _ in range(2))
    before = x.clone()
    got = kt.apply_rotary_emb(x, cos, sin, interleaved=True, inplace=True, cu_seqlens=cu, max_seqlen=max(lens))
    assert got is x
    for b, n in enumerate(lens):
        if n:
            rows = slice(int(cu[b]), int(cu[b + 1]))
            ref = reference(before[rows].unsqueeze(0), cos, sin, True, torch.arange(n).unsqueeze(0))[0]
            torch.testing.assert_close(x[rows].double(), ref, rtol=2e-3, atol=2e-3 * ref.abs().max().item())


def test_cpu_tensors_outside_emulated_get_kilns_error():
    x, cos = torch.randn(1, 2, 2, 8), torch.randn(4, 4)
    with pytest.raises(kiln.KilnArgumentError, match="kiln runs on CUDA tensors.*emulated"):
        kt.apply_rotary_emb(x, cos, cos)
    with pytest.raises(kiln.KilnArgumentError, match="kiln runs on CUDA tensors.*emulated"):
        torch.ops.kiln.rotary(x, cos, cos, None, None, False, 0, 0, False)


def test_bad_arguments(emu):
    x = torch.randn(1, 4, 2, 8, dtype=torch.float16)
    cos = torch.randn(4, 4, dtype=torch.float16)
    with pytest.raises(KilnArgumentError, match="rotary_dim"):
        kt.apply_rotary_emb(x, *(torch.randn(4, 8, dtype=torch.float16) for _ in range(2)))
    with pytest.raises(KilnArgumentError, match="max_seqlen"):
        kt.apply_rotary_emb(torch.randn(4, 2, 8, dtype=torch.float16), cos, cos,
                            cu_seqlens=torch.tensor([0, 4], dtype=torch.int32))
    with pytest.raises(KilnArgumentError, match="one shape and dtype"):
        kt.apply_rotary_emb(x, cos, cos.float())
