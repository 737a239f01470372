// cp_async.cu - global -> shared copies with cp.async, commit_group and wait_group (double buffering).
#include <cuda_pipeline.h>

__global__ void staged_sum(const float4 *x, float *out, int tiles) {
    __shared__ float4 buf[2][128];
    float acc = 0.0f;
    int t = threadIdx.x;
    __pipeline_memcpy_async(&buf[0][t], &x[t], sizeof(float4));
    __pipeline_commit();
    for (int k = 0; k < tiles; k++) {
        if (k + 1 < tiles) __pipeline_memcpy_async(&buf[(k + 1) & 1][t], &x[(k + 1) * 128 + t], sizeof(float4));
        __pipeline_commit();
        __pipeline_wait_prior(1);
        __syncthreads();
        float4 v = buf[k & 1][(t + 1) & 127];
        acc += v.x + v.y + v.z + v.w;
        __syncthreads();
    }
    out[blockIdx.x * blockDim.x + t] = acc;
}
