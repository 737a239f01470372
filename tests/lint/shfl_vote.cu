// shfl_vote.cu - butterfly shuffles, ballots and votes with .sync (valid on every SM kiln targets).
__global__ void row_stats(const float *x, float *mean, unsigned *mask, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = i < n ? x[i] : 0.0f;
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    float up = __shfl_down_sync(0xffffffffu, v, 1);
    unsigned b = __ballot_sync(0xffffffffu, v > 0.0f);
    int all = __all_sync(0xffffffffu, up >= 0.0f);
    if ((threadIdx.x & 31) == 0) { mean[i / 32] = v / 32.0f; mask[i / 32] = b + all; }
}
