"""kiln.transformers inside kiln.torch.emulated(): the attention function with transformers' exact calling convention
(module, query, key, value, attention_mask, dropout, scaling, sliding_window, softcap, is_causal, ...) against a
float64 eager reference — GQA, window, softcap, left padding, decoding, packed sequences, the errors — which needs
torch only; and, where transformers is installed, tiny models built from configs with random weights (Llama GQA,
Mistral window, Gemma 2 softcap + window + 1 + w RMSNorm, GPT-2, BERT, ViT) run through bench/gpu/models.py's
checks: prefill logits vs eager, greedy generate() identical, one training step's gradients vs eager. Those skip,
saying why, where transformers is missing (it is no dependency of kiln or its CI)."""

import importlib.util
import math
import os
import sys
import types

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (make setup installs the pinned one)")
if not hasattr(torch.library, "custom_op"):
    pytest.skip("kiln.torch needs torch >= 2.4 (torch.library.custom_op)", allow_module_level=True)

import kiln  # noqa: E402
import kiln.torch as kt  # noqa: E402
import kiln.transformers as ktf  # noqa: E402

HAVE_TF = importlib.util.find_spec("transformers") is not None
needs_tf = pytest.mark.skipif(not HAVE_TF, reason="transformers is not installed (optional: pip install transformers; "
                                                  "the attention function's calling convention is tested without it)")
# the source tree's bench/gpu/models.py, or the GPU kit's copy beside python/
MODELS_PY = next((p for p in (os.path.join(os.path.dirname(__file__), "..", "..", "bench", "gpu", "models.py"),
                              os.path.join(os.path.dirname(__file__), "..", "..", "models.py")) if os.path.exists(p)),
                 "bench/gpu/models.py")


def eager(q, k, v, keep, scaling, softcap=None):
    """transformers' eager attention in float64: q [b, hq, sq, d], k/v [b, hkv, sk, d], keep [b, 1, sq, sk]; rows
    with no key give 0. Returns [b, sq, hq, d] as attention functions do."""
    q, k, v = q.double(), k.double(), v.double()
    rep = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
    s = q @ k.transpose(-1, -2) * scaling
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    p = torch.softmax(s.masked_fill(~keep, -math.inf), -1).nan_to_num(0.0)
    return (p @ v).transpose(1, 2)


def _qkv(b, hq, hkv, sq, sk, d=32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(b, hq, sq, d, generator=g).half(), torch.randn(b, hkv, sk, d, generator=g).half(),
            torch.randn(b, hkv, sk, d, generator=g).half())


def _causal(sq, sk, window=None):
    i, j = torch.arange(sq).view(-1, 1) + sk - sq, torch.arange(sk).view(1, -1)
    ok = j <= i
    return ok & (i - j < window) if window else ok


def _close(got, ref, what, scale=1.0):
    tol = 2e-3 * scale
    torch.testing.assert_close(got.double(), ref, rtol=tol, atol=tol * max(ref.abs().max().item(), 1),
                               msg=lambda m: "%s: %s" % (what, m))


CAUSAL = types.SimpleNamespace(is_causal=True)


def test_attention_function_gqa_window_softcap(emu):
    q, k, v = _qkv(2, 4, 2, 7, 7)
    out, weights = ktf.attention_forward(CAUSAL, q, k, v, None, dropout=0.0, scaling=0.2, sliding_window=3,
                                         softcap=4.0)
    assert weights is None and out.shape == (2, 7, 4, 32)
    _close(out, eager(q, k, v, _causal(7, 7, 3).view(1, 1, 7, 7), 0.2, 4.0), "out")


def test_attention_function_left_padding_prefill_and_decoding(emu):
    """transformers' 2-d mask (left padding of a batched generate): kept positions match eager with the same mask,
    padded query rows are 0; then one decoding step (seq_q = 1) over the cache with the mask grown by one."""
    q, k, v = _qkv(2, 2, 1, 6, 6, seed=1)
    mask = torch.ones(2, 6, dtype=torch.bool)
    mask[1, :2] = False
    out, _ = ktf.attention_forward(CAUSAL, q, k, v, mask, scaling=32 ** -0.5)
    keep = _causal(6, 6).view(1, 1, 6, 6) & mask.view(2, 1, 1, 6)
    ref = eager(q, k, v, keep, 32 ** -0.5)
    _close(out[mask], ref[mask], "kept rows")
    assert (out[1, :2] == 0).all()
    q1, k1, v1 = _qkv(2, 2, 1, 1, 7, seed=2)
    mask1 = torch.cat([mask, torch.ones(2, 1, dtype=torch.bool)], 1)
    out1, _ = ktf.attention_forward(CAUSAL, q1, k1, v1, mask1.long(), scaling=32 ** -0.5)
    _close(out1, eager(q1, k1, v1, mask1.view(2, 1, 1, 7), 32 ** -0.5), "decoding")


def test_attention_function_bidirectional_padding_and_packed_sequences(emu):
    q, k, v = _qkv(2, 2, 2, 5, 5, seed=3)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
    enc = types.SimpleNamespace(is_causal=False)
    out, _ = ktf.attention_forward(enc, q, k, v, mask, scaling=0.15)
    ref = eager(q, k, v, mask.bool().view(2, 1, 1, 5), 0.15)
    _close(out[mask.bool()], ref[mask.bool()], "encoder kept rows")
    # padding-free packing: two sequences (3 and 4 tokens) in one row, each causal on its own
    qp, kp, vp = _qkv(1, 2, 1, 7, 7, seed=4)
    cu = torch.tensor([0, 3, 7], dtype=torch.int32)
    out, _ = ktf.attention_forward(CAUSAL, qp, kp, vp, None, scaling=0.2, cu_seq_lens_q=cu, cu_seq_lens_k=cu,
                                   max_length_q=4, max_length_k=4)
    block = torch.zeros(7, 7, dtype=torch.bool)
    block[:3, :3], block[3:, 3:] = _causal(3, 3), _causal(4, 4)
    _close(out, eager(qp, kp, vp, block.view(1, 1, 7, 7), 0.2), "packed")


def test_attention_function_errors(emu):
    q, k, v = _qkv(1, 2, 1, 4, 4)
    with pytest.raises(kiln.KilnArgumentError, match="attention_mask of shape .*2-d padding mask.*register"):
        ktf.attention_forward(CAUSAL, q, k, v, torch.zeros(1, 1, 4, 4))
    with pytest.raises(kiln.KilnArgumentError, match="s_aux"):
        ktf.attention_forward(CAUSAL, q, k, v, None, s_aux=torch.zeros(2))
    with pytest.raises(kiln.KilnArgumentError, match="dropout_p=1.0"):
        ktf.attention_forward(CAUSAL, q, k, v, None, dropout=1.0)
    with pytest.raises(kiln.KilnArgumentError, match="key head_dim 16 differs from query head_dim 32"):
        ktf.attention_forward(CAUSAL, q, k[..., :16], v, None)
    with pytest.raises(kiln.KilnArgumentError, match="headdim 12 is not one kiln generates"):
        ktf.attention_forward(CAUSAL, q[..., :12], k[..., :12], v, None)


@pytest.mark.parametrize("d, dv", [(32, 16), (16, 24)])
def test_attention_function_value_head_dim_of_its_own(emu, d, dv):
    """An MLA model's value head_dim differs from query's: the dense kernel takes it (v_head_dim), the padded and
    packed paths widen the narrower side with zero columns; each matches eager, out has v's head_dim."""
    q, k, _ = _qkv(2, 2, 1, 5, 5, d=d, seed=5)
    v = _qkv(2, 2, 1, 5, 5, d=dv, seed=6)[2]
    keep = _causal(5, 5).view(1, 1, 5, 5)
    out, _ = ktf.attention_forward(CAUSAL, q, k, v, None)
    assert out.shape == (2, 5, 2, dv)
    _close(out, eager(q, k, v, keep, d ** -0.5), "dense")
    mask = torch.ones(2, 5, dtype=torch.bool)
    mask[1, :2] = False
    out, _ = ktf.attention_forward(CAUSAL, q, k, v, mask, scaling=0.3)
    ref = eager(q, k, v, keep & mask.view(2, 1, 1, 5), 0.3)
    assert out.shape == (2, 5, 2, dv) and (out[1, :2] == 0).all()
    _close(out[mask], ref[mask], "padded")
    cu = torch.tensor([0, 2, 5], dtype=torch.int32)
    out, _ = ktf.attention_forward(CAUSAL, q[:1], k[:1], v[:1], None, cu_seq_lens_q=cu, cu_seq_lens_k=cu,
                                   max_length_q=3, max_length_k=3)
    block = torch.zeros(5, 5, dtype=torch.bool)
    block[:2, :2], block[2:, 2:] = _causal(2, 2), _causal(3, 3)
    assert out.shape == (1, 5, 2, dv)
    _close(out, eager(q[:1], k[:1], v[:1], block.view(1, 1, 5, 5), d ** -0.5), "packed")


def test_register_without_transformers_says_what_is_missing(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)
    with pytest.raises(kiln.KilnUnavailableError, match="needs the transformers package"):
        ktf.register()


# ---- real transformers models (tiny configs, random weights) through bench/gpu/models.py's checks ----


def _models():
    if not os.path.exists(MODELS_PY):
        pytest.skip("bench/gpu/models.py is not here (an installed package's tests run without the source tree)")
    spec = importlib.util.spec_from_file_location("kiln_bench_models", MODELS_PY)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@needs_tf
def test_register_makes_kiln_an_attn_implementation():
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS
    assert ktf.register() == "kiln"
    assert AttentionInterface._global_mapping["kiln"] is ktf.attention_forward
    assert "kiln" in ALL_MASK_ATTENTION_FUNCTIONS._global_mapping


@needs_tf
@pytest.mark.parametrize("name", ["llama", "qwen2", "mistral", "gemma2", "gpt2", "bert", "vit"])
def test_tiny_model_matches_eager(emu, name):
    """Prefill logits (left-padded batch for causal LMs), greedy generate() and one training step's gradients: kiln
    (attention and norms) against transformers' eager implementation in f32."""
    m = _models()
    kiln_m, eager_m = m.build(name, "kiln"), m.build(name, "eager")
    assert kiln_m.config._attn_implementation == "kiln"
    norms = [x for x in kiln_m.modules() if isinstance(x, (kt.LayerNorm, kt.RMSNorm))]
    assert norms, "kiln.transformers.enable swapped no norm in %s" % name
    if name == "gemma2":
        assert all(x.offset == 1 for x in norms)  # Gemma's 1 + w RMSNorm
    x = m.inputs(name, 2, 6, "cpu", torch.float32)
    assert m.prefill_check(name, kiln_m, eager_m, x) < m.TOL["float32"]
    if m.MODELS[name][2]:
        same, first, _ = m.generate_check(kiln_m, eager_m, x, 3)
        assert same, "greedy generate differs from eager's at step %d" % first
    worst, where = m.train_step_check(name, kiln_m, eager_m, x)
    assert worst < 4 * m.TOL["float32"], (worst, where)


@needs_tf
def test_models_script_skips_without_a_gpu(capsys):
    assert _models().main(["--quick", "--models", "llama"]) == 0
    assert "skipped" in capsys.readouterr().out


@needs_tf
def test_models_run_model_and_summary_on_the_emulator(emu):
    """The GPU kit's whole per-model routine (checks, then the three implementations timed) on a tiny config."""
    m = _models()
    row = m.run_model("llama", "cpu", torch.float32, False, 2, 6, 2, 1)
    assert row["pass"] and row["generate_same"], row
    for impl in ("kiln", "sdpa", "eager"):
        assert row[impl + "_prefill_tok_s"] > 0 and row[impl + "_decode_tok_s"] > 0 and row[impl + "_step_ms"] > 0
    table = m.summary([row])
    assert table.splitlines()[2].startswith("| llama | float32 |") and "True" in table
