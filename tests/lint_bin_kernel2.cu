// tests/lint_bin_kernel2.cu - a second translation unit (its own fatbin container) for tests/lint_bin_test.c.
__global__ void shift(float *x, float v) { x[blockIdx.x * blockDim.x + threadIdx.x] += v; }
