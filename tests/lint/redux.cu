// redux.cu - warp reductions with redux.sync (sm_80) next to a shuffle-tree reduction (any SM).
__global__ void warp_sums(const unsigned *x, unsigned *sum, unsigned *mx, int *mn) {
    unsigned v = x[blockIdx.x * blockDim.x + threadIdx.x];
    unsigned s = __reduce_add_sync(0xffffffffu, v);
    unsigned m = __reduce_max_sync(0xffffffffu, v);
    int lo = __reduce_min_sync(0xffffffffu, (int)v);
    unsigned a = __reduce_and_sync(0xffffffffu, v);
    if ((threadIdx.x & 31) == 0) { sum[blockIdx.x] = s ^ a; mx[blockIdx.x] = m; mn[blockIdx.x] = lo; }
}
