// bf16_cvt.cu - bf16 <-> f32 conversions, scalar and packed (cvt.rn.bf16.f32, cvt.f32.bf16, cvt.rn.bf16x2.f32).
#include <cuda_bf16.h>

__global__ void bf16_round_trip(const float *x, __nv_bfloat16 *y, float *z, __nv_bfloat162 *p, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    __nv_bfloat16 h = __float2bfloat16(x[i]);
    y[i] = h;
    z[i] = __bfloat162float(h) + 1.0f;
    p[i] = __floats2bfloat162_rn(x[i], z[i]);
}
