#!/usr/bin/env python3
"""bench/gpu/models.py - GPU check kit: transformers models built from their configs with random weights (nothing
downloaded) run with attn_implementation="kiln" and kiln's norms (kiln.transformers.enable) against transformers'
eager and sdpa implementations: prefill logits vs eager, greedy generate() identical to sdpa's, one training step's
gradients vs eager, and prefill tokens/s, decoding tokens/s and training step time of kiln, sdpa and eager in the
same run. Models: Llama and Qwen2 (GQA, RoPE), Mistral (sliding window), Gemma 2 (logit softcap, window, 1 + w
RMSNorm), GPT-2 and BERT (LayerNorm), ViT (bf16 activations with f32 LayerNorm weights under kiln).

usage: models.py [--out DIR] [--quick] [--models llama,gemma2,...] [--dtype bf16]
Needs torch with a CUDA device and transformers; without them it says so and exits 0 (a skip). The check
functions take a device, dtype and size, so tests run them on CPU tensors under kiln.torch.emulated() with tiny
configs (python/tests/test_torch_transformers.py).
"""
import argparse
import copy
import os
import statistics
import sys
import time

# name: (config class, model class, causal LM, tiny config, GPU-size overrides)
_LM = dict(vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=2,
           num_key_value_heads=1, head_dim=32, max_position_embeddings=256, initializer_range=0.3)
_LM_GPU = dict(vocab_size=32000, hidden_size=2048, intermediate_size=5632, num_hidden_layers=4,
               num_attention_heads=16, num_key_value_heads=4, head_dim=128, max_position_embeddings=4096,
               initializer_range=0.02)
# dropout off: the checks compare deterministic passes (and kiln's attention has no dropout yet)
_GPT2_P0 = dict(attn_pdrop=0.0, resid_pdrop=0.0, embd_pdrop=0.0)
_BERT_P0 = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
MODELS = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", True, dict(_LM), dict(_LM_GPU)),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", True, dict(_LM), dict(_LM_GPU)),
    "mistral": ("MistralConfig", "MistralForCausalLM", True, dict(_LM, sliding_window=4),
                dict(_LM_GPU, sliding_window=256)),
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM", True,
               dict(_LM, sliding_window=4, attn_logit_softcapping=5.0, final_logit_softcapping=None,
                    query_pre_attn_scalar=32, layer_types=["sliding_attention", "full_attention"]),
               dict(_LM_GPU, sliding_window=256, attn_logit_softcapping=50.0, final_logit_softcapping=None,
                    query_pre_attn_scalar=128, layer_types=["sliding_attention", "full_attention"] * 2)),
    "gpt2": ("GPT2Config", "GPT2LMHeadModel", True,
             dict(vocab_size=128, n_embd=64, n_layer=2, n_head=2, n_positions=256, initializer_range=0.3, **_GPT2_P0),
             dict(vocab_size=32000, n_embd=2048, n_layer=4, n_head=16, n_positions=4096, initializer_range=0.02,
                  **_GPT2_P0)),
    "bert": ("BertConfig", "BertForMaskedLM", False,
             dict(vocab_size=128, hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=96,
                  initializer_range=0.3, **_BERT_P0),
             dict(vocab_size=32000, hidden_size=2048, num_hidden_layers=4, num_attention_heads=16,
                  intermediate_size=5632, max_position_embeddings=4096, initializer_range=0.02, **_BERT_P0)),
    "vit": ("ViTConfig", "ViTForImageClassification", False,
            dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=96, image_size=32,
                 patch_size=8, num_labels=10, initializer_range=0.3),
            dict(hidden_size=1024, num_hidden_layers=4, num_attention_heads=16, intermediate_size=4096,
                 image_size=448, patch_size=14, num_labels=1000, initializer_range=0.02)),
}
# relative tolerance of logits and gradients (max |kiln - eager| / max |eager|) per dtype
TOL = {"float32": 1e-4, "bfloat16": 4e-2, "float16": 8e-3}


def _tf():
    import transformers
    return transformers


def build(name, impl, gpu=False, device="cpu", dtype=None, seed=0):
    """Model `name` with random weights (seeded: the same for every impl), attn_implementation impl ("kiln": kiln's
    attention and norms through kiln.transformers.enable; "eager", "sdpa": transformers' own), in eval mode."""
    import torch
    import kiln.transformers as ktf
    tf = _tf()
    cfg_name, cls_name, _lm, tiny, big = MODELS[name]
    config = getattr(tf, cfg_name)(**(big if gpu else tiny))
    torch.manual_seed(seed)
    model = getattr(tf, cls_name)._from_config(config, attn_implementation="eager")
    model = model.to(device=device, dtype=dtype or torch.float32).eval()
    if impl == "kiln":
        ktf.enable(model, norms=True)
        if name == "vit" and dtype not in (None, torch.float32):  # bf16 activations meet f32 LayerNorm weights
            for m in model.modules():
                if isinstance(m, torch.nn.LayerNorm):
                    m.float()
    elif impl != "eager":
        model.set_attn_implementation(impl)
    return model


def inputs(name, batch, seq, device, dtype, gpu=False, seed=1):
    """The model's inputs: token ids with a padding mask (causal LMs: the second sequence left-padded by 2, as a
    batched generate pads; BERT: right-padded by 2), or pixel values for ViT."""
    import torch
    g = torch.Generator().manual_seed(seed)
    if name == "vit":
        size = MODELS[name][4 if gpu else 3]["image_size"]
        return dict(pixel_values=torch.randn(batch, 3, size, size, generator=g).to(device=device, dtype=dtype))
    ids = torch.randint(3, 100, (batch, seq), generator=g).to(device)
    mask = torch.ones(batch, seq, dtype=torch.long, device=device)
    if batch > 1:
        if MODELS[name][2]:
            mask[1, :2] = 0
        else:
            mask[1, -2:] = 0
    return dict(input_ids=ids, attention_mask=mask)


def _kept(name, x):
    """The logits rows that padding does not touch (rows at padded queries differ by definition)."""
    mask = x.get("attention_mask")
    return None if mask is None else mask.bool()


def _rel(a, b, keep=None):
    if keep is not None:
        a, b = a[keep], b[keep]
    a, b = a.double(), b.double()
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item()


def prefill_check(name, kiln_model, eager_model, x):
    """Relative max difference of the logits, kiln vs eager, at the positions padding leaves alone."""
    import torch
    with torch.no_grad():
        a, b = kiln_model(**x).logits, eager_model(**x).logits
    return _rel(a, b, _kept(name, x) if a.dim() == 3 else None)


def generate_check(kiln_model, ref_model, x, new_tokens):
    """(identical, first differing step or -1, kiln's tokens): greedy generate() of new_tokens tokens."""
    import torch
    kw = dict(max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        a = kiln_model.generate(**x, **kw)[:, x["input_ids"].shape[1]:]
        b = ref_model.generate(**x, **kw)[:, x["input_ids"].shape[1]:]
    diff = (a != b).any(0).nonzero()
    return bool(torch.equal(a, b)), int(diff[0]) if len(diff) else -1, a


def _loss(name, model, x):
    out = model(**x).logits.float()
    keep = _kept(name, x)
    return (out[keep] if keep is not None and out.dim() == 3 else out).pow(2).mean()


def train_step_check(name, kiln_model, eager_model, x):
    """Worst relative difference over the parameters' gradients of one backward pass, kiln vs eager (train mode,
    dropout off), and the parameter it is at."""
    import torch
    for m in (kiln_model, eager_model):
        m.train()
        for mod in m.modules():
            if isinstance(mod, torch.nn.Dropout):
                mod.p = 0.0
        m.zero_grad()
        _loss(name, m, x).backward()
        m.eval()
    ek = dict(eager_model.named_parameters())
    pairs = [(n, p.grad, ek[n].grad) for n, p in kiln_model.named_parameters()
             if p.grad is not None and ek[n].grad is not None]
    # a gradient that is 0 in exact math (a key bias: softmax ignores a per-row shift) is rounding noise in both, so
    # each difference is taken relative to its own gradient's size, floored at 1% of the largest gradient
    floor = 1e-2 * max((e.double().abs().max().item() for _, _, e in pairs), default=0.0)
    worst, where = 0.0, ""
    for n, g, e in pairs:
        r = (g.double() - e.double()).abs().max().item() / max(e.double().abs().max().item(), floor, 1e-30)
        if r > worst:
            worst, where = r, n
    return worst, where


def _time(fn, reps):
    import torch
    fn()
    sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
    sync()
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        sync()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def speed(name, model, x, new_tokens, reps):
    """(prefill tokens/s, decoding tokens/s or None, training step ms) of one implementation."""
    import torch
    ntok = x["input_ids"].numel() if "input_ids" in x else x["pixel_values"].shape[0]
    with torch.no_grad():
        pre = ntok / _time(lambda: model(**x), reps)
    dec = None
    if MODELS[name][2]:
        kw = dict(max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False, pad_token_id=0)
        with torch.no_grad():
            dec = new_tokens * x["input_ids"].shape[0] / _time(lambda: model.generate(**x, **kw), max(1, reps // 4))
    model.train()

    def step():
        model.zero_grad(set_to_none=True)
        _loss(name, model, x).backward()
    ms = _time(step, reps) * 1e3
    model.eval()
    return pre, dec, ms


def run_model(name, device, dtype, gpu, batch, seq, new_tokens, reps):
    """Every check and figure of one model; a dict (the summary's row)."""
    import torch
    tol = TOL[str(dtype).replace("torch.", "")]
    kiln_m = build(name, "kiln", gpu, device, dtype)
    eager_m = build(name, "eager", gpu, device, dtype)
    try:
        sdpa_m = build(name, "sdpa", gpu, device, dtype)
    except (ValueError, ImportError):  # a model without an sdpa path (greedy compares against eager then)
        sdpa_m = None
    x = inputs(name, batch, seq, device, dtype, gpu)
    row = dict(model=name, dtype=str(dtype).replace("torch.", ""))
    row["logits_rel"] = prefill_check(name, kiln_m, eager_m, x)
    if MODELS[name][2]:
        same, first, _ = generate_check(kiln_m, sdpa_m or eager_m, x, new_tokens)
        row["generate_same"], row["generate_first_diff"] = same, first
    row["grad_rel"], row["grad_worst_param"] = train_step_check(name, copy.deepcopy(kiln_m), copy.deepcopy(eager_m),
                                                                x)
    row["pass"] = (row["logits_rel"] <= tol and row["grad_rel"] <= 4 * tol and row.get("generate_same", True))
    if reps:
        for impl, m in (("kiln", kiln_m), ("sdpa", sdpa_m), ("eager", eager_m)):
            if m is not None:
                row[impl + "_prefill_tok_s"], row[impl + "_decode_tok_s"], row[impl + "_step_ms"] = speed(
                    name, m, x, new_tokens, reps)
    del kiln_m, eager_m, sdpa_m
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return row


def _fmt(v):
    if isinstance(v, float):
        return "%.3g" % v
    return "-" if v is None else str(v)


def summary(rows):
    cols = ["model", "dtype", "logits_rel", "generate_same", "generate_first_diff", "grad_rel", "pass",
            "kiln_prefill_tok_s", "sdpa_prefill_tok_s", "eager_prefill_tok_s", "kiln_decode_tok_s",
            "sdpa_decode_tok_s", "eager_decode_tok_s", "kiln_step_ms", "sdpa_step_ms", "eager_step_ms"]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        lines.append("| " + " | ".join(_fmt(r.get(c)) for c in cols) + " |")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=".")
    ap.add_argument("--quick", action="store_true", help="fewer repetitions and a shorter prompt")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "f16", "f32"])
    a = ap.parse_args(argv)
    try:
        import torch
        _tf()
    except ImportError as e:
        print("models: skipped (%s); install transformers next to torch to run it" % e)
        return 0
    if not torch.cuda.is_available():
        print("models: skipped: no CUDA device (python/tests/test_torch_transformers.py tests the CPU-side logic)")
        return 0
    dtype = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[a.dtype]
    rows, bad = [], 0
    for name in a.models.split(","):
        if name not in MODELS:
            print("models: unknown model %r; valid: %s" % (name, ", ".join(MODELS)))
            return 2
        t = time.time()
        try:
            r = run_model(name, "cuda", dtype, True, 4, 256 if a.quick else 1024, 32, 3 if a.quick else 10)
        except Exception as e:  # one model's failure is reported, the others still run
            r = dict(model=name, dtype=a.dtype, error="%s: %s" % (type(e).__name__, e), **{"pass": False})
        bad += not r["pass"]
        rows.append(r)
        print("models: %-8s %s (%.0f s)%s" % (name, "PASS" if r["pass"] else "FAIL", time.time() - t,
                                              "  " + r["error"] if "error" in r else ""), flush=True)
    table = summary(rows)
    print(table)
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "models.md"), "w") as f:
        f.write("## transformers models: kiln vs eager / sdpa\n\n" + table + "\n")
    print("models: %d of %d models pass" % (len(rows) - bad, len(rows)))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
