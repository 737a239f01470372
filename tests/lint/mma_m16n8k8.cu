// mma_m16n8k8.cu - mma.sync m16n8k8 with f16 inputs (sm_75) and with bf16 inputs (sm_80).
#include <stdint.h>

__global__ void mma_k8(const uint32_t *a, const uint32_t *b, float *c) {
    int l = threadIdx.x & 31;
    float d0 = 0, d1 = 0, d2 = 0, d3 = 0;
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
                 : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3) : "r"(a[l]), "r"(a[l + 32]), "r"(b[l]));
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
                 : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3) : "r"(a[l + 64]), "r"(a[l + 96]), "r"(b[l + 32]));
    c[4 * l] = d0; c[4 * l + 1] = d1; c[4 * l + 2] = d2; c[4 * l + 3] = d3;
}
