// half_misc.cu - f16 abs and atomics, 16-bit compare-and-swap, nanosleep: features with their own PTX ISA minimum.
#include <cuda_fp16.h>

__global__ void half_abs(const __half *x, const __half2 *x2, __half *y, __half2 *y2) {
    int i = threadIdx.x;
    y[i] = __habs(x[i]);
    y2[i] = __habs2(x2[i]);
}

__global__ void cas16(unsigned short *flags, __half *acc, const __half *v) {
    unsigned short old = atomicCAS(&flags[threadIdx.x & 7], (unsigned short)0, (unsigned short)1);
    if (old) __nanosleep(100);
    atomicAdd(&acc[0], v[threadIdx.x]);
}
