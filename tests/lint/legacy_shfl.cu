// legacy_shfl.cu - shfl and vote without .sync (pre-Volta style, inline asm): rejected for sm_70+ from PTX 6.4.
__global__ void legacy_reduce(const int *x, int *out) {
    int v = x[threadIdx.x], r, any;
    asm volatile("shfl.down.b32 %0, %1, 16, 31;\n" : "=r"(r) : "r"(v));
    asm volatile("{\n .reg .pred p, q;\n setp.ne.s32 p, %1, 0;\n vote.any.pred q, p;\n selp.s32 %0, 1, 0, q;\n}\n"
                 : "=r"(any) : "r"(r));
    out[threadIdx.x] = v + r + any;
}
