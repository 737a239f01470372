# regen_triton.py - Triton kernels (LayerNorm, softmax, matmul, attention) compiled to PTX without a GPU (GPUTarget),
# for the kiln lint corpus: pip install triton; python3 tests/lint/regen_triton.py tests/lint
import sys, triton, triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

@triton.jit
def layernorm(X, W, B, Y, N, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    m = cols < N
    x = tl.load(X + row * N + cols, mask=m, other=0.0).to(tl.float32)
    mean = tl.sum(x, 0) / N
    d = tl.where(m, x - mean, 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(d * d, 0) / N + eps)
    w = tl.load(W + cols, mask=m, other=0.0).to(tl.float32)
    b = tl.load(B + cols, mask=m, other=0.0).to(tl.float32)
    tl.store(Y + row * N + cols, (d * rstd * w + b).to(Y.dtype.element_ty), mask=m)

@triton.jit
def softmax(X, Y, N, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(X + row * N + cols, mask=cols < N, other=-float("inf")).to(tl.float32)
    e = tl.exp(x - tl.max(x, 0))
    tl.store(Y + row * N + cols, (e / tl.sum(e, 0)).to(Y.dtype.element_ty), mask=cols < N)

@triton.jit
def matmul(A, B, C, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pm, pn = tl.program_id(0), tl.program_id(1)
    rm = pm * BM + tl.arange(0, BM)
    rn = pn * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        a = tl.load(A + rm[:, None] * K + (k + rk)[None, :], mask=(rm[:, None] < M) & ((k + rk)[None, :] < K), other=0.0)
        b = tl.load(B + (k + rk)[:, None] * N + rn[None, :], mask=((k + rk)[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    tl.store(C + rm[:, None] * N + rn[None, :], acc.to(C.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))

@triton.jit
def attention(Q, K, V, O, L, sm_scale, BM: tl.constexpr, BN: tl.constexpr, D: tl.constexpr):
    start = tl.program_id(0)
    offs_m = start * BM + tl.arange(0, BM)
    offs_n = tl.arange(0, BN)
    offs_d = tl.arange(0, D)
    q = tl.load(Q + offs_m[:, None] * D + offs_d[None, :])
    m_i = tl.zeros((BM,), dtype=tl.float32) - float("inf")
    l_i = tl.zeros((BM,), dtype=tl.float32)
    acc = tl.zeros((BM, D), dtype=tl.float32)
    for n in range(0, L, BN):
        k = tl.load(K + (n + offs_n)[None, :] * D + offs_d[:, None])
        v = tl.load(V + (n + offs_n)[:, None] * D + offs_d[None, :])
        s = tl.dot(q, k) * sm_scale
        m_new = tl.maximum(m_i, tl.max(s, 1))
        p = tl.exp2(s - m_new[:, None])
        alpha = tl.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    tl.store(O + offs_m[:, None] * D + offs_d[None, :], (acc / l_i[:, None]).to(O.dtype.element_ty))

def build(fn, sig, consts, sm, name, out):
    src = ASTSource(fn, signature=sig, constexprs=consts)
    k = triton.compile(src, target=GPUTarget("cuda", sm, 32))
    path = "%s/triton_%s.sm%d.ptx" % (out, name, sm)
    open(path, "w").write(k.asm["ptx"])
    print(path, len(k.asm["ptx"]))

out = sys.argv[1]
dt = {"f16": "fp16", "bf16": "bf16", "f32": "fp32", "e4m3": "fp8e4nv"}
jobs = [
    (layernorm, "bf16", 80), (layernorm, "f16", 75), (softmax, "f32", 75), (softmax, "bf16", 90),
    (matmul, "f16", 75), (matmul, "bf16", 80), (matmul, "f16", 90), (attention, "f16", 80), (attention, "bf16", 90),
    (matmul, "e4m3", 89), (matmul, "e4m3", 90),
]
for fn, t, sm in jobs:
    T = "*" + dt[t]
    try:
        if fn is layernorm:
            build(fn, {"X": T, "W": T, "B": T, "Y": T, "N": "i32", "eps": "fp32"}, {"BLOCK": 1024}, sm, "layernorm_" + t, out)
        elif fn is softmax:
            build(fn, {"X": T, "Y": T, "N": "i32"}, {"BLOCK": 1024}, sm, "softmax_" + t, out)
        elif fn is matmul:
            C = "*fp16" if t == "e4m3" else T  # FP8 in, f16 out
            build(fn, {"A": T, "B": T, "C": C, "M": "i32", "N": "i32", "K": "i32"},
                  {"BM": 64, "BN": 64, "BK": 64 if t == "e4m3" else 32}, sm, "matmul_" + t, out)
        else:
            build(fn, {"Q": T, "K": T, "V": T, "O": T, "L": "i32", "sm_scale": "fp32"}, {"BM": 64, "BN": 64, "D": 64}, sm, "attention_" + t, out)
    except Exception as e:
        print("FAILED", fn.__name__, t, sm, type(e).__name__, str(e)[:300])
