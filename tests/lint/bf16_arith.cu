// bf16_arith.cu - bf16 arithmetic: add, mul, fma, neg, abs, min/max (native from sm_80/sm_90).
#include <cuda_bf16.h>

__global__ void bf16_math(const __nv_bfloat16 *a, const __nv_bfloat16 *b, __nv_bfloat16 *y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    __nv_bfloat16 s = __hadd(a[i], b[i]);
    __nv_bfloat16 m = __hmul(a[i], s);
    __nv_bfloat16 f = __hfma(a[i], b[i], m);
    __nv_bfloat16 g = __hmax(__habs(f), __hneg(s));
    y[i] = __hmin(g, b[i]);
}

__global__ void bf16x2_math(const __nv_bfloat162 *a, const __nv_bfloat162 *b, __nv_bfloat162 *y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    __nv_bfloat162 s = __hadd2(a[i], b[i]);
    y[i] = __hfma2(s, b[i], __hmax2(a[i], s));
}
