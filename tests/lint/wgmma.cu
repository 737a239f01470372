// wgmma.cu - sm_90a-only instructions (wgmma.fence/commit/wait, setmaxnreg): they need the "a" target.
__global__ void __launch_bounds__(128) warpgroup_sync(float *out) {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 240;\n" ::: "memory");
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    out[threadIdx.x] = 1.0f;
}
