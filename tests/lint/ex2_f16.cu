// ex2_f16.cu - half-precision exp2 (ex2.approx.f16 / .f16x2: sm_75, PTX ISA 7.0) and tanh.approx.
#include <cuda_fp16.h>

__global__ void softmax_bits(const __half *x, const __half2 *v, __half *y, __half2 *w, float *t, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    y[i] = hexp2(x[i]);
    w[i] = h2exp2(v[i]);
    float r;
    asm("tanh.approx.f32 %0, %1;" : "=f"(r) : "f"(__half2float(x[i])));
    t[i] = r;
}
