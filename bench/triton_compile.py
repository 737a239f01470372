"""bench/triton_compile.py - one Triton compile as a user's process meets it at model load: import
Triton, compile a LayerNorm forward or a flash-attention forward for sm_80 from an empty cache
(no GPU needed: an explicit GPUTarget), print the PTX size. Kernels written for this benchmark.

usage: TRITON_CACHE_DIR=$(mktemp -d) python3 bench/triton_compile.py layernorm|attention [--ptx-only]
--ptx-only stops after PTX (no ptxas), the same output kiln emit produces."""
import sys
import warnings

import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource


@triton.jit
def layernorm_fwd(x_ptr, y_ptr, w_ptr, b_ptr, mean_ptr, rstd_ptr, row_stride, n_cols, eps,
                  BLOCK: tl.constexpr):
    # one program per row; the whole row in registers; fp32 statistics, two passes
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    inside = cols < n_cols
    x = tl.load(x_ptr + row * row_stride + cols, mask=inside, other=0.0).to(tl.float32)
    mu = tl.sum(x, axis=0) / n_cols
    centered = tl.where(inside, x - mu, 0.0)
    var = tl.sum(centered * centered, axis=0) / n_cols
    rs = 1.0 / tl.sqrt(var + eps)
    w = tl.load(w_ptr + cols, mask=inside, other=0.0)
    b = tl.load(b_ptr + cols, mask=inside, other=0.0)
    out = centered * rs * w + b
    tl.store(y_ptr + row * row_stride + cols, out.to(y_ptr.dtype.element_ty), mask=inside)
    tl.store(mean_ptr + row, mu)
    tl.store(rstd_ptr + row, rs)


@triton.jit
def attention_fwd(q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, seq_q, seq_k, sm_scale_log2,
                  HEAD: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, CAUSAL: tl.constexpr):
    # one program per (query tile, batch*head); K/V streamed in tiles; online softmax in base 2
    tile = tl.program_id(0)
    bh = tl.program_id(1)
    rows = tile * BM + tl.arange(0, BM)
    dims = tl.arange(0, HEAD)
    q_base = q_ptr + bh * seq_q * HEAD
    kv_off = bh * seq_k * HEAD
    q = tl.load(q_base + rows[:, None] * HEAD + dims[None, :], mask=rows[:, None] < seq_q, other=0.0)
    best = tl.full([BM], float("-inf"), tl.float32)
    total = tl.zeros([BM], tl.float32)
    acc = tl.zeros([BM, HEAD], tl.float32)
    stop = seq_k
    if CAUSAL:
        stop = tl.minimum(seq_k, (tile + 1) * BM)
    for start in range(0, stop, BN):
        keys = start + tl.arange(0, BN)
        kt = tl.load(k_ptr + kv_off + keys[None, :] * HEAD + dims[:, None], mask=keys[None, :] < seq_k, other=0.0)
        s = tl.dot(q, kt) * sm_scale_log2
        keep = keys[None, :] < seq_k
        if CAUSAL:
            keep = keep & (keys[None, :] <= rows[:, None])
        s = tl.where(keep, s, float("-inf"))
        new_best = tl.maximum(best, tl.max(s, axis=1))
        p = tl.math.exp2(s - new_best[:, None])
        shrink = tl.math.exp2(best - new_best)
        total = total * shrink + tl.sum(p, axis=1)
        acc = acc * shrink[:, None]
        vt = tl.load(v_ptr + kv_off + keys[:, None] * HEAD + dims[None, :], mask=keys[:, None] < seq_k, other=0.0)
        acc = tl.dot(p.to(vt.dtype), vt, acc)
        best = new_best
    acc = acc / total[:, None]
    tl.store(o_ptr + bh * seq_q * HEAD + rows[:, None] * HEAD + dims[None, :], acc.to(o_ptr.dtype.element_ty),
             mask=rows[:, None] < seq_q)
    tl.store(lse_ptr + bh * seq_q + rows, best + tl.math.log2(total), mask=rows < seq_q)


def main():
    warnings.filterwarnings("ignore")
    which = sys.argv[1] if len(sys.argv) > 1 else "layernorm"
    target = GPUTarget("cuda", 80, 32)
    if which == "layernorm":
        sig = {"x_ptr": "*bf16", "y_ptr": "*bf16", "w_ptr": "*fp32", "b_ptr": "*fp32", "mean_ptr": "*fp32",
               "rstd_ptr": "*fp32", "row_stride": "i32", "n_cols": "i32", "eps": "fp32", "BLOCK": "constexpr"}
        src = ASTSource(fn=layernorm_fwd, signature=sig, constexprs={"BLOCK": 4096})
        opts = {"num_warps": 4}
    elif which == "attention":
        sig = {"q_ptr": "*bf16", "k_ptr": "*bf16", "v_ptr": "*bf16", "o_ptr": "*bf16", "lse_ptr": "*fp32",
               "seq_q": "i32", "seq_k": "i32", "sm_scale_log2": "fp32", "HEAD": "constexpr", "BM": "constexpr",
               "BN": "constexpr", "CAUSAL": "constexpr"}
        src = ASTSource(fn=attention_fwd, signature=sig,
                        constexprs={"HEAD": 128, "BM": 64, "BN": 64, "CAUSAL": True})
        opts = {"num_warps": 4, "num_stages": 2}
    else:
        sys.exit("triton_compile.py: unknown kernel '%s'; valid: layernorm, attention" % which)
    if "--ptx-only" in sys.argv:
        from triton.backends.nvidia.compiler import CUDABackend
        add = CUDABackend.add_stages

        def ptx_stages(self, stages, options, language=None):
            add(self, stages, options, language) if language is not None else add(self, stages, options)
            stages.pop("cubin", None)
        CUDABackend.add_stages = ptx_stages
        triton.compiler.compiler.CompiledKernel.__del__ = lambda self: None
    try:
        ptx = triton.compile(src, target=target, options=opts).asm["ptx"]
    except KeyError:  # --ptx-only: no cubin to load; the PTX is in the cache
        import glob
        import os
        found = glob.glob(os.path.join(os.environ.get("TRITON_CACHE_DIR", "."), "**", "*.ptx"), recursive=True)
        if not found:
            raise
        ptx = open(found[0]).read()
    print("%s: %d bytes of PTX" % (which, len(ptx)))


if __name__ == "__main__":
    main()
