// ldmatrix.cu - ldmatrix x4 and x2.trans from shared memory, as tensor-core kernels use it (inline asm).
#include <stdint.h>

__global__ void load_fragments(const uint32_t *src, uint32_t *dst) {
    __shared__ uint32_t tile[16 * 16];
    int lane = threadIdx.x & 31;
    for (int i = threadIdx.x; i < 256; i += blockDim.x) tile[i] = src[i];
    __syncthreads();
    uint32_t a0, a1, a2, a3, b0, b1;
    uint32_t addr = (uint32_t)__cvta_generic_to_shared(&tile[(lane % 16) * 8]);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(a0), "=r"(a1), "=r"(a2), "=r"(a3) : "r"(addr));
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
                 : "=r"(b0), "=r"(b1) : "r"(addr));
    dst[threadIdx.x] = a0 ^ a1 ^ a2 ^ a3 ^ b0 ^ b1;
}
