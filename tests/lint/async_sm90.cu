// async_sm90.cu - Hopper asynchrony through inline PTX (as CUTLASS writes it): mbarrier with an arrival
// count, expect_tx, try_wait.parity, cp.async.bulk, red.async, cluster barriers with .relaxed/.release.
#include <stdint.h>

__device__ static uint32_t smem_addr(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

__global__ void __cluster_dims__(2, 1, 1) async_copy(const float *src, float *dst, int *counter) {
    __shared__ __align__(16) float buf[256];
    __shared__ __align__(8) uint64_t bar;
    __shared__ int total;
    uint32_t b = smem_addr(&bar), s = smem_addr(buf), t = smem_addr(&total);
    if (threadIdx.x == 0) {
        asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(b), "r"(2));
        asm volatile("fence.mbarrier_init.release.cluster;");
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(b), "r"(1024));
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                     ::"r"(s), "l"(src), "r"(1024), "r"(b) : "memory");
        uint64_t state; /* the arrival token, unused here */
        asm volatile("mbarrier.arrive.shared::cta.b64 %0, [%1], %2;" : "=l"(state) : "r"(b), "r"(1));
    }
    uint32_t done = 0;
    while (!done)
        asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
                     : "=r"(done) : "r"(b), "r"(0));
    asm volatile("red.async.relaxed.cluster.shared::cluster.mbarrier::complete_tx::bytes.add.u32 [%0], %1, [%2];"
                 ::"r"(t), "r"(1), "r"(b) : "memory");
    asm volatile("barrier.cluster.arrive.relaxed.aligned;");
    asm volatile("barrier.cluster.wait.aligned;");
    asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;");
    dst[threadIdx.x] = buf[threadIdx.x & 255];
    if (threadIdx.x == 0) atomicAdd(counter, total);
}
