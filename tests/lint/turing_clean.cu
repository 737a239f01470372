// turing_clean.cu - what sm_75 does have: f16 arithmetic, ldmatrix, mma m16n8k8 f16, shuffles (must lint clean).
#include <cuda_fp16.h>
#include <stdint.h>

__global__ void turing_ok(const __half2 *x, const uint32_t *b, float *y) {
    __shared__ uint32_t tile[256];
    int l = threadIdx.x & 31;
    tile[threadIdx.x] = b[threadIdx.x];
    __syncthreads();
    __half2 v = __hfma2(x[threadIdx.x], x[threadIdx.x], __hmul2(x[l], x[l]));
    uint32_t a0, a1, a2, a3;
    uint32_t addr = (uint32_t)__cvta_generic_to_shared(&tile[(l % 16) * 8]);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(a0), "=r"(a1), "=r"(a2), "=r"(a3) : "r"(addr));
    float d0 = 0, d1 = 0, d2 = 0, d3 = 0;
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
                 : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3) : "r"(a0 ^ a2), "r"(a1), "r"(a3));
    float s = __low2float(v) + __high2float(v) + d0 + d1 + d2 + d3;
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    y[threadIdx.x] = s;
}
