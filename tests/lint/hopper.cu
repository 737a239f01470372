// hopper.cu - sm_90 features: mbarrier try_wait/expect_tx, fence.proxy.async, elect.sync, stmatrix, griddepcontrol.
#include <stdint.h>

__global__ void hopper_bits(uint32_t *out) {
    __shared__ __align__(8) uint64_t bar;
    __shared__ uint32_t tile[8 * 8 * 4];
    uint32_t b = (uint32_t)__cvta_generic_to_shared(&bar);
    uint32_t t = (uint32_t)__cvta_generic_to_shared(&tile[(threadIdx.x & 7) * 8]);
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
    if (threadIdx.x == 0) asm volatile("mbarrier.init.shared.b64 [%0], %1;\n" ::"r"(b), "r"(32));
    __syncthreads();
    uint32_t leader;
    asm volatile("{\n .reg .pred p;\n elect.sync _|p, 0xffffffff;\n selp.u32 %0, 1, 0, p;\n}\n" : "=r"(leader));
    if (leader) asm volatile("mbarrier.expect_tx.shared.b64 [%0], 0;\n" ::"r"(b));
    uint64_t state;
    asm volatile("mbarrier.arrive.shared.b64 %0, [%1];\n" : "=l"(state) : "r"(b));
    uint32_t done = 0;
    while (!done)
        asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.shared.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done) : "r"(b), "l"(state));
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    asm volatile("stmatrix.sync.aligned.m8n8.x1.shared.b16 [%0], {%1};\n" ::"r"(t), "r"(threadIdx.x));
    __syncthreads();
    out[threadIdx.x] = tile[threadIdx.x] + leader;
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
}
