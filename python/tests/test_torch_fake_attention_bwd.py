"""kiln.torch's attention autograd: the backward runs kiln's attention_bwd kernels (prep, dkdv, convert; dq under
torch.use_deterministic_algorithms) on the fake torch and the fake CUDA driver. Runs where torch is not installed;
test_torch_real.py covers the real package on a GPU."""

import pytest

from fake_torch_env import Ctx  # noqa: E402  (skips this file where the real torch is; else the fake is importable)
import torch  # noqa: E402  (the fake)
import kiln  # noqa: E402


def _forward(kt, shape_q, shape_kv, dt, causal):
    q = torch.empty(shape_q, dtype=dt, device="cuda")
    k, v = (torch.empty(shape_kv, dtype=dt, device="cuda") for _ in range(2))
    op = torch.library.REGISTERED["kiln::attention"]
    scale = 0.125
    o, lse = op(q, k, v, causal, scale)
    ctx = Ctx()
    op.setup_context(ctx, (q, k, v, causal, scale), (o, lse))
    return op, ctx, q, k, v, o


def test_backward_op_registered_with_fake(kt):
    ops = torch.library.REGISTERED
    assert ops["kiln::attention"].backward is not None and ops["kiln::attention"].setup_context is not None
    bwd = ops["kiln::attention_backward"]
    assert bwd.fake is not None and bwd.mutates_args == ()
    q = torch.empty((2, 4, 8, 64), dtype=torch.bfloat16, device="cuda")
    k = torch.empty((2, 2, 5, 64), dtype=torch.bfloat16, device="cuda")
    dq, dk, dv = bwd.fake(q, q, k, k, q, None, True, 0.125, False)
    assert tuple(dq.shape) == (2, 4, 8, 64) and tuple(dk.shape) == (2, 2, 5, 64) and tuple(dv.shape) == (2, 2, 5, 64)


@pytest.mark.parametrize("det", [False, True])
def test_autograd_runs_kilns_backward_kernels(kt, fake_cuda, monkeypatch, det):
    b, hq, hkv, s, d = 2, 4, 2, 16, 64
    op, ctx, q, k, v, o = _forward(kt, (b, hq, s, d), (b, hkv, s, d), torch.float16, True)
    assert len(ctx.saved_tensors) == 5 and ctx.causal is True and ctx.scale == 0.125
    seen = {}
    orig = kiln.Runtime.attention_backward

    def spy(self, *a, **kw):
        seen.update(kw)
        return orig(self, *a, **kw)

    monkeypatch.setattr(kiln.Runtime, "attention_backward", spy)
    monkeypatch.setattr(torch, "are_deterministic_algorithms_enabled", lambda: det, raising=False)
    do = torch.empty((b, s, hq, d), dtype=torch.float16, device="cuda").transpose(1, 2)  # o's own layout
    fake_cuda.reset()
    grads = op.backward(ctx, do, None)
    assert len(grads) == 5 and grads[3] is None and grads[4] is None
    dq, dk, dv = grads[:3]
    assert tuple(dq.shape) == (b, hq, s, d) and tuple(dk.shape) == (b, hkv, s, d) and tuple(dv.shape) == (b, hkv, s, d)
    assert dq.dtype is torch.float16 and dk.dtype is torch.float16
    entries = [e for e, _ in fake_cuda.launches()]
    assert len(entries) == 3, entries
    assert [e.split("_")[3] for e in entries] == ["prep", "dkdv", "dq" if det else "convert"], entries
    assert seen["stream"] == torch.cuda.STREAM and seen["causal"] is True and seen["deterministic"] is det
    assert abs(seen["scale"] - 0.125) < 1e-12
    ws = seen["workspace"]
    assert ws is not None and ws.dtype is torch.float32  # from torch's allocator
    rt = kt.runtime()
    kerns = rt.attention_backward_kernels(dq=seen["dq"], dk=seen["dk"], dv=seen["dv"], dout=seen["dout"],
                                          q=seen["q"], k=seen["k"], v=seen["v"], o=seen["o"], lse=seen["lse"],
                                          causal=True, deterministic=det)
    params = {p["name"]: val for p, val in zip(kerns[1].meta["params"], fake_cuda.launches()[1][1])}
    assert params["q"] == q.data_ptr() and params["dk"] == dk.data_ptr() and params["dv"] == dv.data_ptr()
    assert params["delta"] == ws.data_ptr()
    assert (params["stride_qb"], params["stride_qs"], params["stride_qh"]) == (hq * s * d, d, s * d)


def test_backward_of_an_empty_batch_launches_nothing(kt, fake_cuda):
    op, ctx, q, k, v, o = _forward(kt, (0, 2, 8, 64), (0, 2, 8, 64), torch.bfloat16, False)
    fake_cuda.reset()
    dq, dk, dv = op.backward(ctx, torch.empty((0, 2, 8, 64), dtype=torch.bfloat16, device="cuda"), None)[:3]
    assert tuple(dq.shape) == (0, 2, 8, 64) and fake_cuda.launches() == []
