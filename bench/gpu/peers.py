#!/usr/bin/env python3
"""bench/gpu/peers.py - GPU check kit: times torch layer_norm, a Triton LayerNorm and SDPA (flash) on the
shapes kiln was timed on (bench.csv from kiln-gpucheck), appends their rows, and writes the tables
(summary.md), and PNG plots. kiln itself is timed through the `kiln` Python package on the same torch
tensors when that package and its libraries are importable (PYTHONPATH, KILN_LIB_DIR); otherwise the
C side's figures for the same shapes stand for kiln.

usage: peers.py --kit DIR --csv bench.csv --out DIR [--quick] [--no-peers]
"""
import argparse
import csv
import math
import os
import statistics
import sys

FIELDS = ["bench", "impl", "dtype", "hidden", "head_dim", "seq", "causal", "rows_or_batch", "heads", "work", "unit",
          "median_ms", "rate", "reps"]


def read_rows(path):
    with open(path) as f:
        return [r for r in csv.DictReader(f)]


def write_rows(path, rows):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        w.writeheader()
        for r in rows:
            w.writerow({k: r.get(k, "") for k in FIELDS})


def num(r, k):
    return float(r[k]) if r.get(k) not in (None, "", "-") else 0.0


# ---------------------------------------------------------------- timing (torch side)

class Timer:
    """Median over `reps` launches, each between two CUDA events, after warm-up; an L2 flush
    (writing a buffer twice the L2 size) before each launch when the working set fits in L2."""

    def __init__(self, torch, reps):
        self.torch = torch
        self.reps = reps
        l2 = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 50 << 20)
        self.l2 = l2
        self.flush_buf = torch.empty(2 * l2, dtype=torch.uint8, device="cuda")

    def median_ms(self, fn, working_set_bytes):
        torch = self.torch
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        flush = working_set_bytes < 2 * self.l2
        times, reps, i = [], self.reps, 0
        while i < reps:
            if flush:
                self.flush_buf.fill_(i & 255)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
            if i == 0 and times[0] > 150 and reps > 5:  # long launches: fewer, as the C side does
                reps = 5 if times[0] > 600 else 10
            i += 1
        return statistics.median(times), len(times)


def triton_layernorm():
    """A LayerNorm forward in Triton, written for this kit: one program per row, the whole row in
    registers, fp32 statistics (two passes over registers: mean, then centered variance), y, mean
    and rstd written like kiln's kernel."""
    import triton
    import triton.language as tl

    @triton.jit
    def ln_fwd(x_ptr, y_ptr, w_ptr, b_ptr, mean_ptr, rstd_ptr, n_cols, eps, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        offs = tl.arange(0, BLOCK)
        inside = offs < n_cols
        base = row.to(tl.int64) * n_cols
        x = tl.load(x_ptr + base + offs, mask=inside, other=0.0).to(tl.float32)
        mu = tl.sum(x, axis=0) / n_cols
        centered = tl.where(inside, x - mu, 0.0)
        var = tl.sum(centered * centered, axis=0) / n_cols
        r = 1.0 / tl.sqrt(var + eps)
        w = tl.load(w_ptr + offs, mask=inside, other=0.0).to(tl.float32)
        b = tl.load(b_ptr + offs, mask=inside, other=0.0).to(tl.float32)
        out = centered * r * w + b
        tl.store(y_ptr + base + offs, out.to(y_ptr.dtype.element_ty), mask=inside)
        tl.store(mean_ptr + row, mu)
        tl.store(rstd_ptr + row, r)

    def run(x, w, b, y, mean, rstd, eps):
        rows, hidden = x.shape
        block = triton.next_power_of_2(hidden)
        warps = max(1, min(16, block // 512))
        ln_fwd[(rows,)](x, y, w, b, mean, rstd, hidden, eps, BLOCK=block, num_warps=warps)

    return run


def kiln_python(bundle):
    """kiln's Runtime over the kit's bundle through the Python package, or None (with the reason)."""
    try:
        import kiln
        rt = kiln.Runtime(device=0, disk_cache=False)
        rt.add_bundle(bundle)
        return rt, None
    except Exception as e:  # the package is optional: the C side's figures stand in
        return None, "%s: %s" % (type(e).__name__, e)


def measure_peers(rows, args):
    import torch
    import torch.nn.functional as F
    timer = Timer(torch, 5 if args.quick else 25)
    dtypes = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}
    krt, why = kiln_python(args.bundle or os.path.join(args.kit, "kit.kbundle"))
    print("  kiln Python package: %s" % ("timing kiln on the same torch tensors" if krt else
                                        "not usable here (%s); kiln rows are the C side's" % why))
    try:
        tln = triton_layernorm()
    except Exception as e:
        tln = None
        print("  Triton LayerNorm unavailable: %s" % e)
    out = []
    gen = torch.Generator(device="cuda")
    gen.manual_seed(1)
    for r in [r for r in rows if r["bench"] == "layernorm_fwd" and r["impl"] == "kiln"]:
        dt, hidden, nrows = dtypes[r["dtype"]], int(r["hidden"]), int(r["rows_or_batch"])
        x = torch.randn(nrows, hidden, device="cuda", dtype=dt, generator=gen)
        w = torch.randn(hidden, device="cuda", dtype=dt, generator=gen)
        b = torch.randn(hidden, device="cuda", dtype=dt, generator=gen)
        y = torch.empty_like(x)
        mean = torch.empty(nrows, device="cuda", dtype=torch.float32)
        rstd = torch.empty_like(mean)
        work = num(r, "work")
        ref = F.layer_norm(x.float(), (hidden,), w.float(), b.float(), 1e-5)
        impls = [("torch", lambda: F.layer_norm(x, (hidden,), w, b, 1e-5))]
        if tln:
            impls.append(("triton", lambda: tln(x, w, b, y, mean, rstd, 1e-5)))
        if krt:
            impls.append(("kiln-py", lambda: krt.layer_norm(y, x, w, b, eps=1e-5, mean=mean, rstd=rstd)))
        for name, fn in impls:
            try:
                res = fn()
                torch.cuda.synchronize()
                got = (res if res is not None else y).float()
                err = (got - ref).abs().max().item() / max(ref.abs().max().item(), 1e-30)
                ms, n = timer.median_ms(fn, work)
            except Exception as e:
                print("  %s layernorm %s h%d: %s" % (name, r["dtype"], hidden, e))
                continue
            if name != "torch" and err > (1e-2 if dt != torch.float32 else 1e-4):
                print("  WARNING %s layernorm %s h%d: max error %.3g of max|y| vs torch in f32" % (name, r["dtype"], hidden, err))
            out.append(dict(r, impl=name, median_ms="%.6f" % ms, rate="%.4f" % (work / (ms * 1e-3) / 1e9), reps=n))
        del x, y, w, b, ref
    for r in [r for r in rows if r["bench"] in ("rmsnorm_fwd", "layernorm_bwd") and r["impl"] == "kiln"]:
        hidden, nrows, work = int(r["hidden"]), int(r["rows_or_batch"]), num(r, "work")
        x = torch.randn(nrows, hidden, device="cuda", dtype=torch.bfloat16, generator=gen)
        w = torch.randn(hidden, device="cuda", dtype=torch.bfloat16, generator=gen)
        if r["bench"] == "rmsnorm_fwd":
            fn = lambda: F.rms_norm(x, (hidden,), w, 1e-5)  # noqa: E731
        else:
            b = torch.randn(hidden, device="cuda", dtype=torch.bfloat16, generator=gen)
            dy = torch.randn_like(x)
            _, mean, rstd = torch.ops.aten.native_layer_norm(x, [hidden], w, b, 1e-5)
            fn = lambda: torch.ops.aten.native_layer_norm_backward(dy, x, [hidden], mean, rstd, w, b,  # noqa: E731
                                                                   [True, True, True])
        try:
            ms, n = timer.median_ms(fn, work)
            out.append(dict(r, impl="torch", median_ms="%.6f" % ms, rate="%.4f" % (work / (ms * 1e-3) / 1e9), reps=n))
        except Exception as e:
            print("  torch %s h%d: %s" % (r["bench"], hidden, e))
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        flash = lambda: sdpa_kernel(SDPBackend.FLASH_ATTENTION)  # noqa: E731
    except Exception:
        flash = None
    for r in [r for r in rows if r["bench"] == "attention_fwd" and r["impl"] == "kiln"]:
        dt = dtypes[r["dtype"]]
        d, seq, causal = int(r["head_dim"]), int(r["seq"]), r["causal"] == "1"
        batch, heads = int(r["rows_or_batch"]), int(r["heads"])
        work = num(r, "work")
        q, k, v = (torch.randn(batch, heads, seq, d, device="cuda", dtype=dt, generator=gen) for _ in range(3))
        ws = 4 * q.numel() * q.element_size()
        impls = []
        if flash:
            def sdpa():
                with flash():
                    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            impls.append(("sdpa-flash", sdpa))
        if krt:
            qs, ks, vs = (t.transpose(1, 2) for t in (q, k, v))  # [batch, seq, heads, d] views
            o = torch.empty_like(qs)
            impls.append(("kiln-py", lambda: krt.attention(o, qs, ks, vs, causal=causal)))
        for name, fn in impls:
            try:
                ms, n = timer.median_ms(fn, ws)
            except Exception as e:
                print("  %s attention d%d seq %d causal %d: %s" % (name, d, seq, causal, e))
                continue
            out.append(dict(r, impl=name, median_ms="%.6f" % ms, rate="%.4f" % (work / (ms * 1e-3) / 1e12), reps=n))
        del q, k, v
    # the sm_90a wgmma rows (a 9.0 device): SDPA restricted to its flash and to its cuDNN backend on the same shapes
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        cudnn = None
        if hasattr(SDPBackend, "CUDNN_ATTENTION"):
            cudnn = lambda: sdpa_kernel(SDPBackend.CUDNN_ATTENTION)  # noqa: E731
    except Exception:
        cudnn = None
    if not cudnn and any(r["bench"] in (WGMMA_BENCH, WGMMA_BWD_BENCH) for r in rows):
        print("  SDPA cuDNN backend unavailable in this torch: the wgmma table has no cuDNN column")
    for r in [r for r in rows if r["bench"] == WGMMA_BENCH and r["impl"] == "kiln-wgmma"]:
        dt = dtypes[r["dtype"]]
        d, seq, causal = int(r["head_dim"]), int(r["seq"]), r["causal"] == "1"
        batch, heads, work = int(r["rows_or_batch"]), int(r["heads"]), num(r, "work")
        q, k, v = (torch.randn(batch, heads, seq, d, device="cuda", dtype=dt, generator=gen) for _ in range(3))
        for name, ctx in (("sdpa-flash", flash), ("sdpa-cudnn", cudnn)):
            if not ctx:
                continue
            def sdpa(ctx=ctx):
                with ctx():
                    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            try:
                ms, n = timer.median_ms(sdpa, 4 * q.numel() * q.element_size())
            except Exception as e:
                why = (str(e).splitlines() or [type(e).__name__])[0]
                print("  %s %s d%d seq %d causal %d: %s" % (name, r["dtype"], d, seq, causal, why))
                continue
            out.append(dict(r, impl=name, median_ms="%.6f" % ms, rate="%.4f" % (work / (ms * 1e-3) / 1e12), reps=n))
        del q, k, v
    # decoding (one query against a long KV cache, GQA): torch SDPA on the kiln rows' shapes; GB/s of K + V
    # read, as kiln counts it. enable_gqa (torch >= 2.5) reads each kv head once; older torch gets
    # K/V repeated to heads_q first (outside the timed call), which reads heads_q / heads_kv times more.
    for r in [r for r in rows if r["bench"] == "attention_decode" and r["impl"] == "kiln-splitkv"]:
        dt = dtypes[r["dtype"]]
        d, seq_k, batch, hq = int(r["head_dim"]), int(r["seq"]), int(r["rows_or_batch"]), int(r["heads"])
        work = num(r, "work")
        hkv = max(1, int(round(work / (2.0 * batch * seq_k * d * 2))))
        try:
            q = torch.randn(batch, hq, 1, d, device="cuda", dtype=dt, generator=gen)
            k, v = (torch.randn(batch, hkv, seq_k, d, device="cuda", dtype=dt, generator=gen) for _ in range(2))
            try:
                F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
                fn = lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True)  # noqa: E731
                name = "sdpa"
            except TypeError:
                kr, vr = (t.repeat_interleave(hq // hkv, dim=1) for t in (k, v))
                fn = lambda: F.scaled_dot_product_attention(q, kr, vr)  # noqa: E731
                name = "sdpa-repeat-kv"
            ms, n = timer.median_ms(fn, work)
            out.append(dict(r, impl=name, median_ms="%.6f" % ms, rate="%.4f" % (work / (ms * 1e-3) / 1e9), reps=n))
            del q, k, v
        except Exception as e:
            print("  sdpa decode seq_k %d batch %d: %s" % (seq_k, batch, e))
    # attention backward: SDPA's flash backward (FlashAttention-2) on the same shapes, the forward's
    # graph kept and only the backward timed; the deterministic rows share the atomic rows' shapes
    for r in [r for r in rows if r["bench"] == "attention_bwd" and r["impl"] == "kiln"]:
        if not flash:
            break
        out += sdpa_backward(torch, F, timer, gen, dtypes, r, (("sdpa-flash", flash),))
    # the sm_90a wgmma backward rows (a 9.0 device): SDPA's flash and cuDNN backward on the same shapes
    for r in [r for r in rows if r["bench"] == WGMMA_BWD_BENCH and r["impl"] == "kiln-wgmma"]:
        out += sdpa_backward(torch, F, timer, gen, dtypes, r, (("sdpa-flash", flash), ("sdpa-cudnn", cudnn)))
    return out


def sdpa_backward(torch, F, timer, gen, dtypes, r, backends):
    """SDPA's backward on row r's shape through each (name, context) of backends that is there: the forward run once
    under the backend, its graph kept, `torch.autograd.grad` alone timed; peer rows like r (its work: FLOPs)."""
    dt = dtypes[r["dtype"]]
    d, seq, causal = int(r["head_dim"]), int(r["seq"]), r["causal"] == "1"
    batch, heads, work = int(r["rows_or_batch"]), int(r["heads"]), num(r, "work")
    q, k, v = (torch.randn(batch, heads, seq, d, device="cuda", dtype=dt, generator=gen).requires_grad_() for _ in range(3))
    dout = torch.randn(batch, heads, seq, d, device="cuda", dtype=dt, generator=gen)
    out = []
    for name, ctx in backends:
        if not ctx:
            continue
        try:
            with ctx():
                o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            fn = lambda: torch.autograd.grad(o, (q, k, v), dout, retain_graph=True)  # noqa: E731
            ms, n = timer.median_ms(fn, 9 * q.numel() * q.element_size())
            out.append(dict(r, impl=name, median_ms="%.6f" % ms, rate="%.4f" % (work / (ms * 1e-3) / 1e12), reps=n))
        except Exception as e:
            why = (str(e).splitlines() or [type(e).__name__])[0]
            print("  %s attention backward %s d%d seq %d causal %d: %s" % (name, r["dtype"], d, seq, causal, why))
        o = None
    del q, k, v, dout
    return out


# ---------------------------------------------------------------- tables and plots

def rate_of(rows, bench, impl, **keys):
    for r in rows:
        if r["bench"] == bench and r["impl"] == impl and all(str(r[k]) == str(v) for k, v in keys.items()):
            return num(r, "rate")
    return None


def fmt(v, spec="%.0f"):
    return spec % v if v else "-"


def ratio(a, b):
    return "%.2f" % (a / b) if a and b else "-"


def headline(rows):
    """A few figures that summarize the run (the full tables follow in summary.md)."""
    copy = rate_of(rows, "copy", "cuMemcpyDtoD")
    peak = rate_of(rows, "mma_peak", "mma.sync.m16n8k16.bf16")
    lines = ["## headline", "", "| what | kiln | peer | kiln/peer | ceiling | kiln/ceiling |", "|---|---:|---:|---:|---:|---:|"]

    def add(label, k, peer, pname, ceil, cname):
        if not k:
            return
        lines.append("| %s | %s | %s | %s | %s | %s |" % (
            label, fmt(k, "%.1f"), "%s %s" % (fmt(peer, "%.1f"), pname) if peer else "-", ratio(k, peer),
            "%s %s" % (fmt(ceil, "%.0f"), cname) if ceil else "-", "%.1f%%" % (100 * k / ceil) if k and ceil else "-"))
    for dt in ("bf16", "f32"):
        for h in (768, 4096, 16384):
            key = dict(dtype=dt, hidden=h)
            k = rate_of(rows, "layernorm_fwd", "kiln", **key)
            t, tr = rate_of(rows, "layernorm_fwd", "torch", **key), rate_of(rows, "layernorm_fwd", "triton", **key)
            best = max([v for v in (t, tr) if v] or [0])
            add("LayerNorm fwd %s h%d GB/s" % (dt, h), k, best, "best of torch/Triton", copy, "copy")
    for b, name in (("rmsnorm_fwd", "RMSNorm fwd"), ("layernorm_bwd", "LayerNorm bwd"), ("rmsnorm_bwd", "RMSNorm bwd")):
        for h in ((4096,) if b == "rmsnorm_fwd" else (4096, 16384)):
            k = rate_of(rows, b, "kiln", dtype="bf16", hidden=h)
            add("%s bf16 h%d GB/s" % (name, h), k, rate_of(rows, b, "torch", dtype="bf16", hidden=h), "torch", copy, "copy")
    for d in (64, 128):
        for causal in ("0", "1"):
            key = dict(dtype="bf16", head_dim=d, seq=4096, causal=causal)
            add("attention bf16 d%d seq 4096%s TFLOP/s" % (d, " causal" if causal == "1" else ""),
                rate_of(rows, "attention_fwd", "kiln", **key), rate_of(rows, "attention_fwd", "sdpa-flash", **key),
                "SDPA flash", peak, "mma.sync")
    for d, causal in ((128, "0"), (128, "1"), (256, "0"), (256, "1")):  # the sm_90a wgmma forward (a 9.0 device; no row
        key = dict(dtype="bf16", head_dim=d, seq=4096, causal=causal)  # elsewhere) against SDPA's cuDNN backend (the goal)
        add("attention sm_90a wgmma bf16 d%d seq 4096%s TFLOP/s" % (d, " causal" if causal == "1" else ""),
            rate_of(rows, WGMMA_BENCH, "kiln-wgmma", **key), rate_of(rows, WGMMA_BENCH, "sdpa-cudnn", **key),
            "SDPA cuDNN", peak, "mma.sync")
    for impl, what in (("kiln-wgmma", ""), ("kiln-wgmma-det", " deterministic")):  # the sm_90a backward vs cuDNN's
        key = dict(dtype="bf16", head_dim=128, seq=4096, causal="1")
        add("attention backward sm_90a wgmma%s bf16 d128 seq 4096 causal TFLOP/s" % what,
            rate_of(rows, WGMMA_BWD_BENCH, impl, **key), rate_of(rows, WGMMA_BWD_BENCH, "sdpa-cudnn", **key),
            "SDPA cuDNN bwd", peak, "mma.sync")
    for d in (64, 128):
        key = dict(dtype="bf16", head_dim=d, seq=4096, causal="1")
        add("attention backward bf16 d%d seq 4096 causal TFLOP/s (2.5x fwd FLOPs)" % d,
            rate_of(rows, "attention_bwd", "kiln", **key), rate_of(rows, "attention_bwd", "sdpa-flash", **key),
            "SDPA flash bwd", peak, "mma.sync")
    return "\n".join(lines) + "\n\n"


def tables(rows):
    copy = rate_of(rows, "copy", "cuMemcpyDtoD")
    peak = rate_of(rows, "mma_peak", "mma.sync.m16n8k16.bf16")
    lines = ["## speed", "",
             "Device-to-device copy (cuMemcpyDtoD, bytes read + written): **%s GB/s**; mma.sync m16n8k16 bf16 peak: "
             "**%s TFLOP/s** (both measured in this run)." % (fmt(copy), fmt(peak, "%.1f")), "",
             "### LayerNorm forward, GB/s (bytes read + written; >= 256 MB per launch)", "",
             "| dtype | hidden | rows | kiln | % of copy | torch | Triton | kiln/torch | kiln/Triton | probe: kiln PTX + `.minnctapersm 2` |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in [r for r in rows if r["bench"] == "layernorm_fwd" and r["impl"] == "kiln"]:
        key = dict(dtype=r["dtype"], hidden=r["hidden"])
        k = num(r, "rate")
        t, tr = rate_of(rows, "layernorm_fwd", "torch", **key), rate_of(rows, "layernorm_fwd", "triton", **key)
        pr = rate_of(rows, "layernorm_fwd", "kiln-minctasm2", **key)
        lines.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            r["dtype"], r["hidden"], r["rows_or_batch"], fmt(k), "%.1f%%" % (100 * k / copy) if copy else "-",
            fmt(t), fmt(tr), ratio(k, t), ratio(k, tr), fmt(pr)))
    extra = [r for r in rows if r["bench"] in ("rmsnorm_fwd", "layernorm_bwd", "rmsnorm_bwd") and r["impl"] == "kiln"]
    if extra:
        lines += ["", "### RMSNorm forward, LayerNorm and RMSNorm backward (bf16), GB/s (row tensors read and written "
                  "once); backward forms (docs/norms.md) and offset=1 (zero-centered weights) timed beside the default", "",
                  "| kernel | hidden | rows | kiln | % of copy | torch | kiln/torch | offset=1 (% of copy) | other forms, GB/s (% of copy) |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
        for r in extra:
            k = num(r, "rate")
            t = rate_of(rows, r["bench"], "torch", dtype=r["dtype"], hidden=r["hidden"])
            forms = ["%s %s (%.1f%%)" % (f["impl"][len("kiln-form-"):], fmt(num(f, "rate")), 100 * num(f, "rate") / copy if copy else 0)
                     for f in rows if f["bench"] == r["bench"] and f["impl"].startswith("kiln-form-")
                     and f["dtype"] == r["dtype"] and f["hidden"] == r["hidden"]]
            o = rate_of(rows, r["bench"], "kiln-offset1", dtype=r["dtype"], hidden=r["hidden"])
            off = "%s (%.1f%%)" % (fmt(o), 100 * o / copy) if o and copy else "-"
            lines.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
                r["bench"], r["hidden"], r["rows_or_batch"], fmt(k), "%.1f%%" % (100 * k / copy) if copy else "-", fmt(t),
                ratio(k, t), off, ", ".join(forms) or "-"))
    lines += ["", "### Attention forward, TFLOP/s (4·b·h·s²·d, halved when causal; batch = 16384/seq, heads = 2048/d)", "",
              "| dtype | head_dim | causal | seq | batch x heads | kiln | SDPA flash | kiln/SDPA | kiln % of mma peak | SDPA % of mma peak |",
              "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in [r for r in rows if r["bench"] == "attention_fwd" and r["impl"] == "kiln"]:
        key = dict(dtype=r["dtype"], head_dim=r["head_dim"], seq=r["seq"], causal=r["causal"])
        k, s = num(r, "rate"), rate_of(rows, "attention_fwd", "sdpa-flash", **key)
        lines.append("| %s | %s | %s | %s | %s x %s | %s | %s | %s | %s | %s |" % (
            r["dtype"], r["head_dim"], "yes" if r["causal"] == "1" else "no", r["seq"], r["rows_or_batch"], r["heads"],
            fmt(k, "%.1f"), fmt(s, "%.1f"), ratio(k, s), "%.1f%%" % (100 * k / peak) if peak else "-",
            "%.1f%%" % (100 * s / peak) if peak and s else "-"))
    lines += wgmma_lines(rows, peak)
    lines += wgmma_bwd_lines(rows, peak)
    dec = [r for r in rows if r["bench"] == "attention_decode" and r["impl"] == "kiln-splitkv"]
    if dec:
        lines += ["", "### Decoding (one query, bf16 d%s, %s query heads over GQA kv heads), GB/s of K + V read" % (
                      dec[0]["head_dim"], dec[0]["heads"]), "",
                  "| seq_k | batch | kiln split-KV | kiln non-split | SDPA | split/non-split | split/SDPA | split % of copy |",
                  "|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for r in dec:
            key = dict(seq=r["seq"], rows_or_batch=r["rows_or_batch"])
            k, p = num(r, "rate"), rate_of(rows, "attention_decode", "kiln", **key)
            sd = rate_of(rows, "attention_decode", "sdpa", **key) or rate_of(rows, "attention_decode", "sdpa-repeat-kv", **key)
            lines.append("| %s | %s | %s | %s | %s | %s | %s | %s |" % (
                r["seq"], r["rows_or_batch"], fmt(k), fmt(p), fmt(sd), ratio(k, p), ratio(k, sd),
                "%.1f%%" % (100 * k / copy) if copy else "-"))
    lines += issue25_lines(rows, copy)
    bwd = [r for r in rows if r["bench"] == "attention_bwd" and r["impl"] == "kiln"]
    if bwd:
        lines += ["", "### Attention backward, TFLOP/s (FlashAttention-2's convention: 2.5x the forward's FLOPs, "
                  "10·b·h·s²·d, halved when causal; the whole sequence prep + dkdv + convert; deterministic: "
                  "prep + dkdv + dq, the same FLOPs counted)", "",
                  "| head_dim | causal | seq | batch x heads | kiln | kiln deterministic | SDPA flash bwd | kiln/SDPA "
                  "| deterministic/atomic time | kiln % of mma peak |",
                  "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for r in bwd:
            key = dict(dtype=r["dtype"], head_dim=r["head_dim"], seq=r["seq"], causal=r["causal"])
            k, s = num(r, "rate"), rate_of(rows, "attention_bwd", "sdpa-flash", **key)
            det = rate_of(rows, "attention_bwd_det", "kiln", **key)
            lines.append("| %s | %s | %s | %s x %s | %s | %s | %s | %s | %s | %s |" % (
                r["head_dim"], "yes" if r["causal"] == "1" else "no", r["seq"], r["rows_or_batch"], r["heads"],
                fmt(k, "%.1f"), fmt(det, "%.1f"), fmt(s, "%.1f"), ratio(k, s), ratio(k, det),
                "%.1f%%" % (100 * k / peak) if peak else "-"))
    kp = [r for r in rows if r["impl"] == "kiln-py"]
    if kp:
        lines += ["", "kiln through the Python package on the same torch tensors (`kiln-py` rows in bench.csv):", ""]
        for r in kp:
            c = rate_of(rows, r["bench"], "kiln", dtype=r["dtype"], hidden=r["hidden"], head_dim=r["head_dim"],
                        seq=r["seq"], causal=r["causal"])
            lines.append("- %s %s h%s d%s seq %s causal %s: %s (C side %s)" % (
                r["bench"], r["dtype"], r["hidden"], r["head_dim"], r["seq"], r["causal"], r["rate"], fmt(c, "%.1f")))
    return "\n".join(lines) + "\n"


WGMMA_BENCH = "attention_fwd_wgmma"  # kit_rows.h's KIT_WGMMA_CSV


def wgmma_lines(rows, peak):
    """The sm_90a wgmma forward (path=wgmma) beside kiln's FA2 kernel and SDPA's flash and cuDNN backends on the same
    shapes (issue 27), with the wgmma/FA2 and wgmma/cuDNN ratios; a 9.0 device only."""
    wg = [r for r in rows if r["bench"] == WGMMA_BENCH and r["impl"] == "kiln-wgmma"]
    if not wg:
        return []
    lines = ["", "### Attention forward on sm_90a: wgmma (path=wgmma) vs kiln FA2 (mma.sync) and the peers, TFLOP/s", "",
             "| dtype | head_dim | causal | seq | batch x heads | wgmma | FA2 | SDPA flash | SDPA cuDNN | wgmma/FA2 "
             "| wgmma/cuDNN | wgmma % of mma.sync peak |", "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in wg:
        key = dict(dtype=r["dtype"], head_dim=r["head_dim"], seq=r["seq"], causal=r["causal"])
        w = num(r, "rate")
        fa2, fl, cu = (rate_of(rows, WGMMA_BENCH, i, **key) for i in ("kiln-fa2", "sdpa-flash", "sdpa-cudnn"))
        lines.append("| %s | %s | %s | %s | %s x %s | %s | %s | %s | %s | %s | %s | %s |" % (
            r["dtype"], r["head_dim"], "yes" if r["causal"] == "1" else "no", r["seq"], r["rows_or_batch"], r["heads"],
            fmt(w, "%.1f"), fmt(fa2, "%.1f"), fmt(fl, "%.1f"), fmt(cu, "%.1f"), ratio(w, fa2), ratio(w, cu),
            "%.1f%%" % (100 * w / peak) if peak else "-"))
    return lines


WGMMA_BWD_BENCH = "attention_bwd_wgmma"  # kit_rows.h's KIT_WGMMA_BWD_CSV


def wgmma_bwd_lines(rows, peak):
    """The sm_90a wgmma backward (path=wgmma), atomic and deterministic, beside kiln's FA2 backward and SDPA's flash and
    cuDNN backward on the same shapes (issue 27's goals: wgmma >= 0.9x cuDNN, deterministic >= 0.8x); the forward
    sweep's head dims with no backward row are said in the table (not built on wgmma). A 9.0 device only."""
    wg = [r for r in rows if r["bench"] == WGMMA_BWD_BENCH and r["impl"] == "kiln-wgmma"]
    if not wg:
        return []
    lines = ["", "### Attention backward on sm_90a: wgmma (path=wgmma) vs kiln FA2 (mma.sync) and SDPA's flash and cuDNN "
             "backward, TFLOP/s (2.5x the forward's FLOPs; goals: wgmma/cuDNN >= 0.9, deterministic/cuDNN >= 0.8)", "",
             "| dtype | head_dim | causal | seq | batch x heads | wgmma | wgmma det. | FA2 | FA2 det. | SDPA flash | SDPA cuDNN "
             "| wgmma/FA2 | wgmma/cuDNN | det./cuDNN | wgmma % of mma.sync peak |",
             "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in wg:
        key = dict(dtype=r["dtype"], head_dim=r["head_dim"], seq=r["seq"], causal=r["causal"])
        w = num(r, "rate")
        det, fa2, fa2d, fl, cu = (rate_of(rows, WGMMA_BWD_BENCH, i, **key)
                                  for i in ("kiln-wgmma-det", "kiln-fa2", "kiln-fa2-det", "sdpa-flash", "sdpa-cudnn"))
        lines.append("| %s | %s | %s | %s | %s x %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            r["dtype"], r["head_dim"], "yes" if r["causal"] == "1" else "no", r["seq"], r["rows_or_batch"], r["heads"],
            fmt(w, "%.1f"), fmt(det, "%.1f"), fmt(fa2, "%.1f"), fmt(fa2d, "%.1f"), fmt(fl, "%.1f"), fmt(cu, "%.1f"),
            ratio(w, fa2), ratio(w, cu), ratio(det, cu), "%.1f%%" % (100 * w / peak) if peak else "-"))
    fwd_dims = sorted({int(r["head_dim"]) for r in rows if r["bench"] == WGMMA_BENCH and r["impl"] == "kiln-wgmma"})
    bwd_dims = {int(r["head_dim"]) for r in wg}
    for d in [d for d in fwd_dims if d not in bwd_dims]:
        lines.append("| %s | %d | - | - | - | not built on wgmma: `attention_bwd path=wgmma` refuses head_dim %d by name "
                     "(kiln-kit checks it when the kit is built), so no row | - | - | - | - | - | - | - | - | - |" % (
                         ", ".join(sorted({r["dtype"] for r in wg})), d, d))
    return lines


def issue25_lines(rows, copy):
    """The KV-cache / varlen / rotary speed goals (issue 25) against their rows: paged decoding >= 80 % of copy and
    pages of 16 within 10 % of the contiguous cache (attention_decode_paged), varlen within 5 % of the dense kernel
    on the same tokens (attention_varlen), rotary >= 90 % of copy (rotary)."""
    lines = []
    paged = [r for r in rows if r["bench"] == "attention_decode_paged"]
    if paged:
        lines += ["", "### Paged decoding (issue 25: >= 80 % of copy; pages of 16 within 10 % of the contiguous cache)", "",
                  "| seq_k | batch | pages | GB/s | % of copy | paged / contiguous split-KV |", "|---:|---:|---:|---:|---:|---:|"]
        for r in paged:
            k = num(r, "rate")
            c = rate_of(rows, "attention_decode", "kiln-splitkv", seq=r["seq"], rows_or_batch=r["rows_or_batch"])
            lines.append("| %s | %s | %s | %s | %s | %s |" % (r["seq"], r["rows_or_batch"], r["impl"].rsplit("page", 1)[-1],
                                                        fmt(k), "%.1f%%" % (100 * k / copy) if copy else "-", ratio(k, c)))
    var = [r for r in rows if r["bench"] == "attention_varlen" and r["impl"] == "kiln-varlen"]
    if var:
        lines += ["", "### Varlen vs the dense kernel on the same tokens (issue 25: within 5 %, varlen/dense >= 0.95), TFLOP/s", "",
                  "| head_dim | causal | seq | batch x heads | varlen | dense | varlen/dense |", "|---:|---|---:|---:|---:|---:|---:|"]
        for r in var:
            d = rate_of(rows, "attention_varlen", "kiln-dense", head_dim=r["head_dim"], seq=r["seq"], causal=r["causal"])
            lines.append("| %s | %s | %s | %s x %s | %s | %s | %s |" % (
                r["head_dim"], "yes" if r["causal"] == "1" else "no", r["seq"], r["rows_or_batch"], r["heads"],
                fmt(num(r, "rate"), "%.1f"), fmt(d, "%.1f"), ratio(num(r, "rate"), d)))
    rot = [r for r in rows if r["bench"] == "rotary"]
    if rot:
        lines += ["", "### Rotary, out of place, bf16 (issue 25: >= 90 % of copy), GB/s of x read + out written", "",
                  "| mode | head_dim | seq | batch x heads | GB/s | % of copy |", "|---|---:|---:|---:|---:|---:|"]
        for r in rot:
            k = num(r, "rate")
            lines.append("| %s | %s | %s | %s x %s | %s | %s |" % (r["impl"][len("kiln-"):], r["head_dim"], r["seq"],
                                                              r["rows_or_batch"], r["heads"], fmt(k),
                                                              "%.1f%%" % (100 * k / copy) if copy else "-"))
    return lines


def plots(rows, out):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as e:
        print("  plots skipped: matplotlib unavailable (%s)" % e)
        return
    copy = rate_of(rows, "copy", "cuMemcpyDtoD")
    peak = rate_of(rows, "mma_peak", "mma.sync.m16n8k16.bf16")
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    styles = {"kiln": "o-", "torch": "s--", "triton": "^:", "kiln-py": "x-"}
    for dt, color in (("bf16", "C0"), ("f32", "C1"), ("f16", "C2")):
        for impl, st in styles.items():
            pts = sorted((int(r["hidden"]), num(r, "rate")) for r in rows
                         if r["bench"] == "layernorm_fwd" and r["impl"] == impl and r["dtype"] == dt)
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], st, color=color, label="%s %s" % (impl, dt))
    if copy:
        ax.axhline(copy, color="k", lw=1, ls="-.", label="cuMemcpyDtoD %.0f GB/s" % copy)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("hidden")
    ax.set_ylabel("GB/s (read + write)")
    ax.set_title("LayerNorm forward")
    ax.legend(fontsize=7, ncol=2)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "layernorm.png"), dpi=110)
    plt.close(fig)
    # top row: forward; bottom row: backward (2.5x forward FLOPs), kiln atomic and deterministic
    fig, axes = plt.subplots(2, 4, figsize=(14, 7.4), sharey=True, squeeze=False)
    for row, curves in ((0, (("attention_fwd", "kiln", "o-"), ("attention_fwd", "sdpa-flash", "s--"),
                                                      ("attention_fwd", "kiln-py", "x-"))),
                               (1, (("attention_bwd", "kiln", "o-"), ("attention_bwd_det", "kiln", "d:"),
                                                      ("attention_bwd", "sdpa-flash", "s--")))):
        for i, (d, causal) in enumerate(((64, "0"), (64, "1"), (128, "0"), (128, "1"))):
            ax = axes[row][i]
            for b, impl, st in curves:
                pts = sorted((int(r["seq"]), num(r, "rate")) for r in rows if r["bench"] == b
                             and r["impl"] == impl and r["head_dim"] == str(d) and r["causal"] == causal)
                if pts:
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], st,
                            label=impl + (" deterministic" if b.endswith("_det") else ""))
            if peak:
                ax.axhline(peak, color="k", lw=1, ls="-.", label="mma.sync peak %.0f" % peak)
            ax.set_xscale("log", base=2)
            ax.set_title("%s d%d%s" % ("fwd" if row == 0 else "bwd", d, " causal" if causal == "1" else ""))
            ax.set_xlabel("seq")
            ax.grid(alpha=0.3)
        axes[row][0].set_ylabel("TFLOP/s")
        axes[row][0].legend(fontsize=7)
    fig.suptitle("attention forward (top) and backward (bottom, FLOPs = 2.5x forward), bf16")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "attention.png"), dpi=110)
    plt.close(fig)
    print("  plots: layernorm.png, attention.png")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kit", required=True)
    ap.add_argument("--bundle", help="the kit's bundle, unpacked (default: KIT/kit.kbundle)")
    ap.add_argument("--csv", required=True, help="kiln-gpucheck bench's CSV; peer rows are appended")
    ap.add_argument("--out", required=True)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-peers", action="store_true")
    args = ap.parse_args()
    if not os.path.exists(args.csv):
        print("peers.py: %s is missing (the C-side bench failed)" % args.csv)
        return 2
    # kiln-gpucheck's rows (every kiln-* impl: the decode, paged, varlen and rotary rows too) and the ceilings; the
    # peer rows (and kiln-py, timed here) of an earlier run are measured again
    rows = [r for r in read_rows(args.csv) if r["impl"] in ("cuMemcpyDtoD", "mma.sync.m16n8k16.bf16")
            or (r["impl"].split("-")[0] == "kiln" and r["impl"] != "kiln-py")]
    if not args.no_peers:
        rows += measure_peers(rows, args)
        write_rows(args.csv, rows)
    text = headline(rows) + tables(rows)
    with open(os.path.join(args.out, "summary.md"), "w") as f:
        f.write(text)
    plots(rows, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
