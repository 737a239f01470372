// bf16_f16_cvt.cu - conversions between bf16 and f16/integers, native only on sm_90 (PTX ISA 7.8).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

__global__ void bf16_to_others(const __nv_bfloat16 *x, __half *h, int *k, short *s, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    unsigned short hb, xb = __bfloat16_as_ushort(x[i]);
    asm("cvt.rn.f16.bf16 %0, %1;" : "=h"(hb) : "h"(xb));
    h[i] = __ushort_as_half(hb);
    k[i] = __bfloat162int_rn(x[i]);
    s[i] = __bfloat162short_rz(x[i]);
}
