// multi_func.cu - reader stress: several kernels and noinline device functions, printf (strings, .extern),
// initialized globals, #pragma unroll (.pragma), line info (.file/.loc) and bf16 deep inside a callee.
#include <cstdio>
#include <cuda_bf16.h>

__device__ float table[4] = {1.0f, 2.0f, 3.0f, 4.0f};
__constant__ int offsets[3] = {0, 1, 2};

__device__ __noinline__ float scale(float v, int k) { return v * table[k & 3] + offsets[k % 3]; }

__device__ __noinline__ __nv_bfloat16 to_bf16(float v) { return __float2bfloat16_rn(v); }

__global__ void first(const float *x, float *y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = scale(x[i], i);
    if (i == 0) printf("first: n=%d \"quoted\" {brace} ; semicolon // not a comment\n", n);
}

__global__ void second(const float *x, __nv_bfloat16 *y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float acc = 0.0f;
#pragma unroll 1
    for (int k = 0; k < n; k++) acc += scale(x[(i + k) % n], k);
    y[i] = to_bf16(acc);
}
