// atomics.cu - half2 atomic add (sm_60), bf16x2 atomic add (native on sm_90) and a float atomic.
#include <cuda_fp16.h>
#include <cuda_bf16.h>

__global__ void scatter_add(const int *idx, const __half2 *h, const __nv_bfloat162 *b, __half2 *hs, __nv_bfloat162 *bs,
                            float *fs, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    atomicAdd(&hs[idx[i]], h[i]);
    atomicAdd(&bs[idx[i]], b[i]);
    atomicAdd(&fs[idx[i]], 1.0f);
}
