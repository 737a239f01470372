// tests/lint_bin_kernel.cu - the kernels tests/lint_bin_test.c builds with nvcc and chosen -gencode sets.
__global__ void scale(float *x, float v) { x[blockIdx.x * blockDim.x + threadIdx.x] *= v; }
