// f16_minmax.cu - half min/max (needs sm_80 even for .f16) next to half arithmetic (fine on sm_75).
#include <cuda_fp16.h>

__global__ void f16_clamp(const __half *x, const __half2 *v, __half *y, __half2 *w, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    __half lo = __float2half(-1.0f), hi = __float2half(1.0f);
    y[i] = __hmin(__hmax(__hmul(x[i], x[i]), lo), hi);
    w[i] = __hmax2(__hadd2(v[i], v[i]), __half2half2(lo));
}
