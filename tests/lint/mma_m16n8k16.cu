// mma_m16n8k16.cu - mma.sync m16n8k16 with f16 and with bf16 inputs, f32 accumulate (sm_80).
#include <stdint.h>

__global__ void mma_k16(const uint32_t *a, const uint32_t *b, float *c) {
    int l = threadIdx.x & 31;
    float d[4] = {0, 0, 0, 0};
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[l]), "r"(a[l + 32]), "r"(a[l + 64]), "r"(a[l + 96]), "r"(b[l]), "r"(b[l + 32]));
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[l + 128]), "r"(a[l + 160]), "r"(a[l + 192]), "r"(a[l + 224]), "r"(b[l + 64]), "r"(b[l + 96]));
    for (int i = 0; i < 4; i++) c[4 * l + i] = d[i];
}
