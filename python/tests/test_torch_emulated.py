"""kiln.torch end to end without a GPU: inside kiln.torch.emulated(), kiln's kernels run CPU tensors on the emulator,
checked against torch's own CPU ops in float64 (forward, backward, gradcheck), through opcheck, torch.compile with
inductor and torch.export; outside it, CPU tensors get kiln's error from the public functions and the raw ops.
Skipped where torch is not installed. Problems stay small: the emulator runs every CUDA thread as a fiber."""

import warnings

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (make setup installs the pinned one)")
if not hasattr(torch.library, "custom_op"):
    pytest.skip("kiln.torch needs torch >= 2.4 (torch.library.custom_op)", allow_module_level=True)

import kiln  # noqa: E402
import kiln.torch as kt  # noqa: E402

F = torch.nn.functional
# per dtype: the tolerance of one rounding of an O(1) result (f32 math, one rounding to the output dtype)
TOL = {torch.float32: 2e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}


def _close(got, ref, dtype, what, scale=1.0):
    tol = TOL[dtype] * scale
    torch.testing.assert_close(got.double(), ref.detach().double(), rtol=tol, atol=tol * max(ref.abs().max().item(), 1),
                               msg=lambda m: "%s: %s" % (what, m))


# ---- outside emulated(): kiln's error, from the public functions and the raw ops alike ----


def test_cpu_tensors_outside_emulated_get_kilns_error_from_every_op():
    x, w = torch.randn(2, 64), torch.ones(64)
    q = torch.randn(1, 2, 4, 32)
    lse = torch.zeros(1, 2, 4)
    calls = {
        "layer_norm": lambda: kt.layer_norm(x, (64,), w),
        "rms_norm": lambda: kt.rms_norm(x, (64,), w),
        "add_rms_norm": lambda: kt.add_rms_norm(x, x, 64, w),
        "LayerNorm": lambda: kt.LayerNorm(64)(x),
        "sdpa": lambda: kt.scaled_dot_product_attention(q, q, q),
        "kiln::layer_norm": lambda: torch.ops.kiln.layer_norm(x, w, None, 1e-5, "f32", 0),
        "kiln::rms_norm": lambda: torch.ops.kiln.rms_norm(x, w, 1e-5, "f32", 0),
        "kiln::add_layer_norm": lambda: torch.ops.kiln.add_layer_norm(x, x, w, None, 1e-5, "f32", 0),
        "kiln::add_rms_norm": lambda: torch.ops.kiln.add_rms_norm(x, x, w, 1e-5, "f32", 0),
        "kiln::layer_norm_backward": lambda: torch.ops.kiln.layer_norm_backward(x, x, lse[0, 0, :2], lse[0, 0, :2],
                                                                                w, "", None, 0),
        "kiln::rms_norm_backward": lambda: torch.ops.kiln.rms_norm_backward(x, x, lse[0, 0, :2], w, None, 0),
        "kiln::attention": lambda: torch.ops.kiln.attention(q, q, q, False, 0.125),
        "kiln::attention_backward": lambda: torch.ops.kiln.attention_backward(q, q, q, q, q, lse, False, 0.125,
                                                                              False),
    }
    for name, call in calls.items():
        with pytest.raises(kiln.KilnArgumentError, match="kiln runs on CUDA tensors.*emulated") as e:
            call()
        assert "NVIDIA" not in str(e.value), name


def test_emulated_nests_restores_and_checks_its_sm():
    x = torch.randn(2, 64)
    with kt.emulated(sm=75) as outer:
        assert kt._emulated_sm == 75 and repr(outer) == "kiln.torch.emulated(sm=75)"
        with kt.emulated("sm_86"):
            assert kt._emulated_sm == 86
            kt.layer_norm(x, (64,))
        assert kt._emulated_sm == 75
    assert kt._emulated_sm is None
    with pytest.raises(kiln.KilnArgumentError, match="CUDA"):
        kt.layer_norm(x, (64,))
    with pytest.raises(kiln.KilnSpecError, match="unsupported SM 72; valid: 70, 75"):
        kt.emulated(sm=72)


# ---- numerics against torch's CPU ops in float64 ----


NORM_CASES = [  # (rms, x dtype, weight dtype or None, bias, offset)
    (False, torch.float32, torch.float32, True, 0),
    (False, torch.bfloat16, torch.float32, True, 0),
    (False, torch.float16, torch.float16, False, 0),
    (False, torch.float32, None, False, 0),
    (False, torch.bfloat16, torch.bfloat16, True, 1),
    (True, torch.float32, torch.float32, False, 0),
    (True, torch.bfloat16, torch.float32, False, 0),
    (True, torch.float16, None, False, 0),
    (True, torch.bfloat16, torch.bfloat16, False, 1),
]


@pytest.mark.parametrize("rms,xdt,wdt,bias,offset", NORM_CASES)
def test_norm_forward_and_backward_match_float64(emu, rms, xdt, wdt, bias, offset):
    g = torch.Generator().manual_seed(0)
    hidden = 96  # not a multiple of the vector width: the row tail is exercised
    x = (torch.randn(3, 5, hidden, generator=g) + 0.5).to(xdt).requires_grad_()
    w = (torch.randn(hidden, generator=g) * (0.02 if offset else 0.5) + (0 if offset else 1)).to(wdt).requires_grad_() \
        if wdt is not None else None
    b = torch.randn(hidden, generator=g).to(wdt).requires_grad_() if bias else None
    y = (kt.rms_norm(x, (hidden,), w, 1e-5, offset=offset) if rms
         else kt.layer_norm(x, (hidden,), w, b, 1e-5, offset=offset))
    assert y.dtype == xdt and y.shape == x.shape
    dy = torch.randn(y.shape, generator=g).to(xdt)
    y.backward(dy)
    leaves = [t for t in (x, w, b) if t is not None]
    ref_leaves = [t.detach().double().requires_grad_() for t in leaves]
    xd, wd = ref_leaves[0], (ref_leaves[1] if w is not None else None)
    bd = ref_leaves[-1] if bias else None
    we = (1 + wd) if offset else wd
    ref = F.rms_norm(xd, (hidden,), we, 1e-5) if rms else F.layer_norm(xd, (hidden,), we, bd, 1e-5)
    ref.backward(dy.double())
    _close(y, ref, xdt, "y")
    for name, t, r in zip(("dx", "dweight", "dbias"), leaves, ref_leaves):
        assert t.grad.dtype == t.dtype and t.grad.shape == t.shape, name
        # dweight/dbias sum 15 rows: a few roundings of the output dtype
        _close(t.grad, r.grad, t.dtype, name, scale=1 if name == "dx" else 4)


@pytest.mark.parametrize("rms", [False, True])
def test_two_block_row_backward_matches_float64(emu, rms):
    """f32 rows of 16384 with an f32 residual stream: no reload form fits, the backward is the two-block row
    (a row-statistics kernel, then the columns split between blocks; docs/norms.md), three kernels."""
    from kiln import _torch_emu
    g = torch.Generator().manual_seed(2)
    n = 16384
    x = torch.randn(2, n, generator=g).requires_grad_()
    res = torch.randn(2, n, generator=g).requires_grad_()
    w = (torch.randn(n, generator=g) * 0.5 + 1).requires_grad_()
    y, h = kt.add_rms_norm(x, res, n, w, eps=1e-5) if rms else kt.add_layer_norm(x, res, n, w, None)
    dy, dh = torch.randn(y.shape, generator=g), torch.randn(h.shape, generator=g)
    kern = _torch_emu.for_sm(emu.sm)._bwd_plan(rms, y, dy, h, w, None, dh, 0)[0]
    assert _torch_emu._split(kern.meta), kern.meta["spec"]
    torch.autograd.backward((y, h), (dy, dh))
    xd, rd, wd = (t.detach().double().requires_grad_() for t in (x, res, w))
    hd = xd + rd
    yd = F.rms_norm(hd, (n,), wd, 1e-5) if rms else F.layer_norm(hd, (n,), wd, None, 1e-5)
    torch.autograd.backward((yd, hd), (dy.double(), dh.double()))
    _close(res.grad, rd.grad, torch.float32, "dresidual")
    _close(x.grad, xd.grad, torch.float32, "dx")
    _close(w.grad, wd.grad, torch.float32, "dweight", scale=10)


@pytest.mark.parametrize("rms", [False, True])
def test_fused_residual_add_matches_float64(emu, rms):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(4, 64, generator=g).to(torch.bfloat16).requires_grad_()
    res = torch.randn(4, 64, generator=g).requires_grad_()  # an f32 residual stream under bf16 activations
    w = torch.randn(64, generator=g).requires_grad_()
    y, h = kt.add_rms_norm(x, res, 64, w, eps=1e-5) if rms else kt.add_layer_norm(x, res, 64, w, None)
    assert y.dtype == torch.bfloat16 and h.dtype == torch.float32
    dy, dh = torch.randn(y.shape, generator=g).to(y.dtype), torch.randn(h.shape, generator=g)
    torch.autograd.backward((y, h), (dy, dh))
    xd, rd, wd = (t.detach().double().requires_grad_() for t in (x, res, w))
    hd = xd + rd
    yd = F.rms_norm(hd, (64,), wd, 1e-5) if rms else F.layer_norm(hd, (64,), wd, None, 1e-5)
    torch.autograd.backward((yd, hd), (dy.double(), dh.double()))
    _close(h, hd, torch.float32, "h")
    _close(y, yd, torch.bfloat16, "y")
    _close(res.grad, rd.grad, torch.float32, "dresidual")
    _close(x.grad, xd.grad, torch.bfloat16, "dx")
    _close(w.grad, wd.grad, torch.float32, "dweight", scale=10)


@pytest.mark.parametrize("dtype,causal,hkv,sq,sk", [
    (torch.float32, False, 2, 16, 16),
    (torch.float16, True, 2, 24, 24),
    (torch.bfloat16, True, 1, 16, 16),   # MQA, bf16 (tensor cores on sm_80)
    (torch.float16, False, 2, 5, 37),    # ragged lengths, decoding-like
])
def test_attention_forward_and_backward_match_float64(emu, dtype, causal, hkv, sq, sk):
    g = torch.Generator().manual_seed(2)
    q = torch.randn(1, 2, sq, 32, generator=g).to(dtype).requires_grad_()
    k, v = (torch.randn(1, hkv, sk, 32, generator=g).to(dtype).requires_grad_() for _ in range(2))
    o = kt.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=hkv != 2)
    do = torch.randn(o.shape, generator=g).to(dtype)
    got = torch.autograd.grad(o, (q, k, v), do)
    ref_in = [t.detach().double().requires_grad_() for t in (q, k, v)]
    ref = F.scaled_dot_product_attention(*ref_in, is_causal=causal, enable_gqa=hkv != 2)
    ref_g = torch.autograd.grad(ref, ref_in, do.double())
    _close(o, ref, dtype, "o", scale=2)
    for name, a, r in zip(("dq", "dk", "dv"), got, ref_g):
        assert a.dtype == dtype and a.shape == r.shape, name
        _close(a, r, dtype, name, scale=4)


@pytest.mark.parametrize("dtype,hkv,sq,sk,scale", [
    (torch.float16, 2, 9, 30, None),     # torch's is_causal is top-left: seq_q < seq_k (rows see the first keys)
    (torch.bfloat16, 1, 20, 7, 0.3),     # seq_q > seq_k: rows past seq_k see every key; MQA; scale=
    (torch.float32, 2, 13, 13, None),
])
def test_sdpa_is_causal_is_top_left_like_torch(emu, dtype, hkv, sq, sk, scale):
    g = torch.Generator().manual_seed(5)
    q = torch.randn(2, 2, sq, 64, generator=g).to(dtype).requires_grad_()
    k, v = (torch.randn(2, hkv, sk, 64, generator=g).to(dtype).requires_grad_() for _ in range(2))
    o = kt.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale, enable_gqa=hkv != 2)
    do = torch.randn(o.shape, generator=g).to(dtype)
    got = torch.autograd.grad(o, (q, k, v), do)
    ref_in = [t.detach().double().requires_grad_() for t in (q, k, v)]
    ref = F.scaled_dot_product_attention(*ref_in, is_causal=True, scale=scale, enable_gqa=hkv != 2)
    ref_g = torch.autograd.grad(ref, ref_in, do.double())
    _close(o, ref, dtype, "o", scale=2)
    for name, a, r in zip(("dq", "dk", "dv"), got, ref_g):
        _close(a, r, dtype, name, scale=4)


@pytest.mark.parametrize("d,dtype", [(8, torch.float16), (40, torch.bfloat16), (80, torch.float16), (200, torch.float16)])
def test_sdpa_forward_and_backward_at_padded_head_dims(emu, d, dtype):
    """head dims between the tile widths (the next width's tiles, columns past head_dim zero), backward included."""
    g = torch.Generator().manual_seed(6)
    q, k, v = (torch.randn(1, 2, 11, d, generator=g).to(dtype).requires_grad_() for _ in range(3))
    o = kt.scaled_dot_product_attention(q, k, v, is_causal=True)
    do = torch.randn(o.shape, generator=g).to(dtype)
    got = torch.autograd.grad(o, (q, k, v), do)
    ref_in = [t.detach().double().requires_grad_() for t in (q, k, v)]
    ref = F.scaled_dot_product_attention(*ref_in, is_causal=True)
    ref_g = torch.autograd.grad(ref, ref_in, do.double())
    _close(o, ref, dtype, "o d%d" % d, scale=2)
    for name, a, r in zip(("dq", "dk", "dv"), got, ref_g):
        assert a.shape == r.shape, name
        _close(a, r, dtype, "%s d%d" % (name, d), scale=4)


def test_attention_deterministic_backward_gives_the_same_bits(emu):
    q, k, v = (torch.randn(1, 2, 20, 32).requires_grad_() for _ in range(3))
    do = torch.randn(1, 2, 20, 32)
    torch.use_deterministic_algorithms(True)
    try:
        runs = [torch.autograd.grad(kt.scaled_dot_product_attention(q, k, v, is_causal=True), (q, k, v), do)
                for _ in range(2)]
    finally:
        torch.use_deterministic_algorithms(False)
    atomic = torch.autograd.grad(kt.scaled_dot_product_attention(q, k, v, is_causal=True), (q, k, v), do)
    for a, b, c in zip(*runs, atomic):
        assert torch.equal(a, b)
        torch.testing.assert_close(a, c, rtol=1e-5, atol=1e-5)


def test_gradcheck(emu):
    """torch.autograd.gradcheck: kiln's backward kernels against finite differences of kiln's forward kernels (f32
    kernels, so the steps and tolerances are f32's)."""
    g = torch.Generator().manual_seed(3)
    x = torch.randn(3, 16, generator=g).requires_grad_()
    w = torch.randn(16, generator=g).requires_grad_()
    b = torch.randn(16, generator=g).requires_grad_()
    q, k, v = (torch.randn(1, 1, 4, 32, generator=g).requires_grad_() for _ in range(3))
    cases = [
        (lambda x, w, b: kt.layer_norm(x, (16,), w, b), (x, w, b)),
        (lambda x, w: kt.rms_norm(x, (16,), w, 1e-5), (x, w)),
        (lambda x, w: kt.rms_norm(x, (16,), w, 1e-5, offset=1), (x, w)),
        (lambda x, r, w: kt.add_layer_norm(x, r, 16, w)[0], (x, x.detach().flip(0).requires_grad_(), w)),
        (lambda q, k, v: kt.scaled_dot_product_attention(q, k, v, is_causal=True), (q, k, v)),
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "not double precision": kiln's kernels are f32 at best
        for i, (f, args) in enumerate(cases):
            assert torch.autograd.gradcheck(f, args, eps=1e-2, atol=2e-3, rtol=2e-2, nondet_tol=0.0), i


def test_norm_backward_uses_torchs_workspace_and_several_row_groups_per_block(emu, monkeypatch):
    """The norm backward takes its f32 workspace from torch's allocator (sized by the runtime's rule) and, with more
    rows than the emulated device's blocks, each block loops over several row groups before norm_reduce sums them."""
    from kiln import _torch_emu
    seen = []
    orig = _torch_emu.EmulatedRuntime._norm_backward

    def spy(self, rms, dx, dy, x, mean, rstd, weight, dweight, dbias, dres, workspace, offset):
        seen.append((workspace, self._bwd_plan(rms, dx, dy, x, weight, dbias, dres, offset)))
        return orig(self, rms, dx, dy, x, mean, rstd, weight, dweight, dbias, dres, workspace, offset)

    monkeypatch.setattr(_torch_emu.EmulatedRuntime, "_norm_backward", spy)
    x = torch.randn(300, 32, requires_grad=True)
    m = kt.LayerNorm(32)
    m(x).sum().backward()
    (ws, (kern, blocks, nbytes)), = seen
    tile = kern.meta["grid_tile"][0]
    assert isinstance(ws, torch.Tensor) and ws.dtype == torch.float32 and ws.numel() * 4 >= nbytes > 0
    assert blocks * tile < 300  # the emulated device is smaller than the problem
    ref = [t.detach().double().requires_grad_() for t in (x, m.weight, m.bias)]
    F.layer_norm(ref[0], (32,), ref[1], ref[2]).sum().backward()
    for name, t, r in zip(("dx", "dweight", "dbias"), (x, m.weight, m.bias), ref):
        _close(t.grad, r.grad, torch.float32, name, scale=10)
    assert (m.bias.grad == 300).all()  # 300 ones summed in f32: exact


def test_empty_batch_runs_nothing_and_gives_zero_weight_gradients(emu):
    x = torch.randn(0, 64, requires_grad=True)
    m = kt.LayerNorm(64)
    y = m(x)
    y.sum().backward()
    assert y.shape == (0, 64) and x.grad.shape == (0, 64)
    assert not m.weight.grad.any() and not m.bias.grad.any()


# ---- the torch machinery: opcheck, torch.compile with inductor, torch.export ----


def test_opcheck_every_op(emu):
    x = torch.randn(3, 64, requires_grad=True)
    xb = torch.randn(3, 64).to(torch.bfloat16).requires_grad_()
    w, b = torch.randn(64, requires_grad=True), torch.randn(64, requires_grad=True)
    q = torch.randn(1, 2, 8, 32, requires_grad=True)
    kv = torch.randn(1, 1, 8, 32, requires_grad=True)
    ops = [
        (torch.ops.kiln.layer_norm.default, (x, w, b, 1e-5, "f32", 0)),
        (torch.ops.kiln.layer_norm.default, (xb, w, None, 1e-5, "bf16", 1)),
        (torch.ops.kiln.rms_norm.default, (x, w, 1e-6, "f32", 0)),
        (torch.ops.kiln.add_layer_norm.default, (xb, x, w, b, 1e-5, "bf16", 0)),
        (torch.ops.kiln.add_rms_norm.default, (x, x, w, 1e-5, "f32", 0)),
        (torch.ops.kiln.attention.default, (q, kv, kv, True, 0.2)),
    ]
    for op, args in ops:
        torch.library.opcheck(op, args)
    with torch.no_grad():  # the backward ops have no autograd formula of their own (no double backward)
        y, mean, rstd = torch.ops.kiln.layer_norm(x, w, b, 1e-5, "f32", 0)
        o, lse = torch.ops.kiln.attention(q, kv, kv, True, 0.2)
    torch.library.opcheck(torch.ops.kiln.layer_norm_backward.default,
                          (torch.randn(3, 64), x.detach(), mean, rstd, w.detach(), "f32", None, 0))
    torch.library.opcheck(torch.ops.kiln.rms_norm_backward.default,
                          (torch.randn(3, 64), x.detach(), rstd, w.detach(), x.detach(), 1))
    torch.library.opcheck(torch.ops.kiln.attention_backward.default,
                          (torch.randn(1, 2, 8, 32), q.detach(), kv.detach(), kv.detach(), o, lse, True, 0.2, True))


class _Block(torch.nn.Module):
    """A pre-norm attention block on kiln's ops, small enough for the emulator."""

    def __init__(self, d=64, heads=2):
        super().__init__()
        self.heads = heads
        self.norm1 = kt.RMSNorm(d, eps=1e-6)
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.norm2 = kt.LayerNorm(d)
        self.out = torch.nn.Linear(d, d)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = kt.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, s, d)
        return self.out(self.norm2(x + a))


def test_compile_fullgraph_inductor_matches_eager_forward_and_backward(emu):
    torch.manual_seed(4)
    m = _Block()
    x = torch.randn(2, 8, 64, requires_grad=True)
    eager = m(x)
    eager.sum().backward()
    grads = [x.grad.clone()] + [p.grad.clone() for p in m.parameters()]
    m.zero_grad()
    x.grad = None
    torch._dynamo.reset()
    graphs = []

    def inductor(gm, inputs):
        graphs.append(str(gm.graph))
        from torch._inductor.compile_fx import compile_fx
        return compile_fx(gm, inputs)

    cm = torch.compile(m, backend=inductor, fullgraph=True)
    y = cm(x)
    y.sum().backward()
    assert "torch.ops.kiln.rms_norm" in graphs[0] and "torch.ops.kiln.attention" in graphs[0]
    torch.testing.assert_close(y, eager, rtol=1e-5, atol=1e-5)
    for a, r in zip([x.grad] + [p.grad for p in m.parameters()], grads):
        torch.testing.assert_close(a, r, rtol=1e-4, atol=1e-5)


def test_export_runs_the_kiln_ops(emu):
    torch.manual_seed(5)
    m = _Block().eval()
    x = torch.randn(1, 8, 64)
    ep = torch.export.export(m, (x,))
    text = str(ep.graph)
    assert "kiln.rms_norm" in text and "kiln.layer_norm" in text and "kiln.attention" in text
    with torch.no_grad():
        torch.testing.assert_close(ep.module()(x), m(x), rtol=1e-5, atol=1e-5)


def test_fake_tensors_trace_without_running_a_kernel():
    """FakeTensorMode (what torch.compile and export trace with) runs the ops' fake kernels: shapes and dtypes,
    no emulator and no device check beyond the public functions'."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        x = torch.empty(4, 6, 256, dtype=torch.bfloat16)
        w = torch.empty(256)
        y, mean, rstd = torch.ops.kiln.layer_norm(x.view(24, 256), w, w, 1e-5, "f32", 0)
        o, lse = torch.ops.kiln.attention(torch.empty(2, 4, 16, 64), torch.empty(2, 2, 9, 64),
                                          torch.empty(2, 2, 9, 64), False, 0.125)
    assert y.shape == (24, 256) and y.dtype == torch.float32 and mean.shape == (24,)
    assert o.shape == (2, 4, 16, 64) and lse.shape == (2, 4, 16) and lse.dtype == torch.float32


def test_compiled_code_follows_emulated_in_and_out():
    """torch.compile guards on emulated()'s state: compiled inside, the function runs there; called outside, it
    retraces and the trace meets kiln's error (fullgraph: torch wraps it, the text stays)."""
    torch._dynamo.reset()
    f = torch.compile(kt.LayerNorm(16), backend="eager", fullgraph=True)
    x = torch.randn(2, 16)
    with kt.emulated():
        torch.testing.assert_close(f(x), F.layer_norm(x, (16,)), rtol=1e-5, atol=1e-5)
    with pytest.raises(Exception, match="kiln runs on CUDA tensors"):
        f(x)
