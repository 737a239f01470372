/* bench/layernorm_cuda.h - the bf16 LayerNorm (hidden 4096, f32 weight/bias) in CUDA C as a
 * user would write it for NVRTC; gen_bench and nvrtc_once compile it. */
#ifndef KILN_BENCH_LAYERNORM_CUDA_H
#define KILN_BENCH_LAYERNORM_CUDA_H

/* The same LayerNorm (bf16 x and y, f32 weight/bias, hidden 4096, one row per 128 threads,
 * 16-byte loads) in CUDA C, as a user would write it for NVRTC. */
static const char *const cuda_src =
    "#include <cuda_bf16.h>\n"
    "#define HIDDEN 4096\n#define THREADS 128\n#define PER (HIDDEN / THREADS)\n"
    "__device__ float block_sum(float v, float *s) {\n"
    "  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);\n"
    "  if ((threadIdx.x & 31) == 0) s[threadIdx.x >> 5] = v;\n  __syncthreads();\n"
    "  float t = 0.f;\n  for (int i = 0; i < THREADS / 32; i++) t += s[i];\n  __syncthreads();\n  return t;\n}\n"
    "extern \"C\" __global__ void __launch_bounds__(THREADS) layernorm(__nv_bfloat16 *__restrict__ y,\n"
    "    float *mean, float *rstd, const __nv_bfloat16 *__restrict__ x, const float *__restrict__ w,\n"
    "    const float *__restrict__ b, int rows, float eps) {\n"
    "  __shared__ float s[THREADS / 32];\n  int row = blockIdx.x; if (row >= rows) return;\n"
    "  const uint4 *xr = reinterpret_cast<const uint4 *>(x + (size_t)row * HIDDEN);\n"
    "  float v[PER];\n"
    "  for (int j = 0; j < PER / 8; j++) {\n"
    "    uint4 q = xr[j * THREADS + threadIdx.x];\n"
    "    const __nv_bfloat16 *h = reinterpret_cast<const __nv_bfloat16 *>(&q);\n"
    "    for (int k = 0; k < 8; k++) v[j * 8 + k] = __bfloat162float(h[k]);\n  }\n"
    "  float sum = 0.f; for (int i = 0; i < PER; i++) sum += v[i];\n"
    "  float mu = block_sum(sum, s) / HIDDEN;\n"
    "  float sq = 0.f; for (int i = 0; i < PER; i++) { v[i] -= mu; sq += v[i] * v[i]; }\n"
    "  float rs = rsqrtf(block_sum(sq, s) / HIDDEN + eps);\n"
    "  for (int j = 0; j < PER / 8; j++) {\n"
    "    int c = (j * THREADS + threadIdx.x) * 8;\n    uint4 q; __nv_bfloat162 *o = reinterpret_cast<__nv_bfloat162 *>(&q);\n"
    "    for (int k = 0; k < 4; k++) o[k] = __floats2bfloat162_rn(v[j*8+2*k] * rs * w[c+2*k] + b[c+2*k],\n"
    "                                                            v[j*8+2*k+1] * rs * w[c+2*k+1] + b[c+2*k+1]);\n"
    "    reinterpret_cast<uint4 *>(y + (size_t)row * HIDDEN)[j * THREADS + threadIdx.x] = q;\n  }\n"
    "  if (threadIdx.x == 0) { if (mean) mean[row] = mu; if (rstd) rstd[row] = rs; }\n}\n";

#endif
