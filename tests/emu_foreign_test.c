/* tests/emu_foreign_test.c - IR kiln did not generate, on the emulator (kiln_emu_load_ir):
 * LLVM 20+ spellings (barrier.cta.sync.aligned.*, div.full, ex2.approx.f32, sqrt.rn.ftz.f), the
 * block size in the "nvvm.reqntid" function attribute, __nvvm_reflect, the inline assembly the
 * emulator accepts (empty, membar/fence) and the clear error for any other; and a CUDA kernel
 * compiled by clang-22 (--cuda-device-only -emit-llvm, no CUDA headers or GPU needed) run from
 * its bitcode, unoptimized and at -O2 (skipped, with the reason, without clang-22). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "kiln/emu.h"

static kiln_emu *emu;
static int skipped;

static kiln_emu_kernel *load(const char *ir, size_t len, kiln_error *err) {
    kiln_emu_kernel *k = NULL;
    return kiln_emu_load_ir(emu, ir, len, NULL, 80, &k, err) == KILN_OK ? k : NULL;
}

/* LLVM 20+ style: no nvvm.annotations; the kernel is ptx_kernel and its block size is an attribute. */
static const char *k_new =
    "target datalayout = \"e-i64:64-i128:128-v16:16-v32:32-n16:32:64\"\n"
    "target triple = \"nvptx64-nvidia-cuda\"\n"
    "declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()\n"
    "declare void @llvm.nvvm.barrier.cta.sync.aligned.all(i32)\n"
    "declare float @llvm.nvvm.div.full(float, float)\n"
    "declare float @llvm.nvvm.ex2.approx.f32(float)\n"
    "declare float @llvm.nvvm.sqrt.rn.ftz.f(float)\n"
    "declare i32 @__nvvm_reflect(ptr)\n"
    "@arch = private unnamed_addr addrspace(1) constant [12 x i8] c\"__CUDA_ARCH\\00\"\n"
    "@ftz = private unnamed_addr addrspace(1) constant [11 x i8] c\"__CUDA_FTZ\\00\"\n"
    "@s = internal addrspace(3) global [64 x float] undef, align 4\n"
    "define ptx_kernel void @newstyle(ptr addrspace(1) %out) \"nvvm.reqntid\"=\"64,1,1\" {\n"
    "  %t = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()\n"
    "  %tf = uitofp i32 %t to float\n"
    "  %p = getelementptr float, ptr addrspace(3) @s, i32 %t\n"
    "  store float %tf, ptr addrspace(3) %p, align 4\n"
    "  call void @llvm.nvvm.barrier.cta.sync.aligned.all(i32 0)\n"
    "  %r = sub i32 63, %t\n"
    "  %q = getelementptr float, ptr addrspace(3) @s, i32 %r\n"
    "  %v = load float, ptr addrspace(3) %q, align 4\n"                     /* 63 - t */
    "  %d = call float @llvm.nvvm.div.full(float %v, float 4.0)\n"          /* (63 - t) / 4 */
    "  %e = call float @llvm.nvvm.ex2.approx.f32(float %d)\n"
    "  %sq = call float @llvm.nvvm.sqrt.rn.ftz.f(float %e)\n"               /* 2^((63 - t) / 8) */
    "  %a = call i32 @__nvvm_reflect(ptr addrspacecast (ptr addrspace(1) @arch to ptr))\n"
    "  %f = call i32 @__nvvm_reflect(ptr addrspacecast (ptr addrspace(1) @ftz to ptr))\n"
    "  %af = sitofp i32 %a to float\n  %ff = sitofp i32 %f to float\n"
    "  %o = getelementptr float, ptr addrspace(1) %out, i32 %t\n"
    "  store float %sq, ptr addrspace(1) %o, align 4\n"
    "  %z = icmp eq i32 %t, 0\n  br i1 %z, label %w, label %x\n"
    "w:\n  %o1 = getelementptr float, ptr addrspace(1) %out, i32 64\n  store float %af, ptr addrspace(1) %o1, align 4\n"
    "  %o2 = getelementptr float, ptr addrspace(1) %out, i32 65\n  store float %ff, ptr addrspace(1) %o2, align 4\n"
    "  br label %x\nx:\n  ret void\n}\n";

static void test_new_spellings(void) {
    TEST_BEGIN("LLVM 20+ intrinsics, nvvm.reqntid attribute and __nvvm_reflect run");
    kiln_error err = {0};
    kiln_emu_kernel *k = load(k_new, strlen(k_new), &err);
    CHECK(k, "%s", err.msg);
    if (k) {
        const kiln_kernel_meta *m = kiln_emu_kernel_meta(k);
        CHECK(m->block[0] == 64 && m->block[1] == 1 && m->block[2] == 1, "block %u %u %u from nvvm.reqntid",
              m->block[0], m->block[1], m->block[2]);
        float out[66];
        memset(out, 0xff, sizeof out);
        void *p = out, *args[] = {&p};
        kiln_emu_launch l = {.grid = {1, 1, 1}, .block = {64, 1, 1}};
        CHECK(kiln_emu_run(k, &l, args, &err) == KILN_OK, "%s", err.msg);
        int bad = 0;
        for (int t = 0; t < 64; t++)
            if (fabs(out[t] - exp2((63 - t) / 8.0)) > 1e-6 * exp2((63 - t) / 8.0)) bad++;
        CHECK(!bad && out[64] == 800.0f && out[65] == 0.0f, "%d wrong; reflect __CUDA_ARCH %g, __CUDA_FTZ %g", bad,
              out[64], out[65]);
        l.block[0] = 32;
        kiln_status st = kiln_emu_run(k, &l, args, &err);
        CHECK(st == KILN_EINVAL && strstr(err.msg, "requires 64 (reqntid)"), "%d: %s", st, err.msg);
    }
    /* the arch-specific sm_90a (KILN_SM_ARCH + 90) reflects as sm_90: __CUDA_ARCH 900 */
    kiln_emu_kernel *ka = NULL;
    CHECK(kiln_emu_load_ir(emu, k_new, strlen(k_new), NULL, KILN_SM_ARCH + 90, &ka, &err) == KILN_OK, "%s", err.msg);
    if (ka) {
        float out[66];
        void *p = out, *args[] = {&p};
        kiln_emu_launch l = {.grid = {1, 1, 1}, .block = {64, 1, 1}};
        CHECK(kiln_emu_run(ka, &l, args, &err) == KILN_OK && out[64] == 900.0f, "sm_90a: __CUDA_ARCH %g (%s)", out[64],
              err.msg);
    }
    TEST_END();
}

#define ASM_HEAD                                                                                    \
    "target triple = \"nvptx64-nvidia-cuda\"\n"                                                     \
    "declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()\n"

static void test_inline_asm(void) {
    kiln_error err = {0};
    TEST_BEGIN("inline asm: fences and empty strings run, anything else is refused with its text");
    const char *ok =
        ASM_HEAD "define ptx_kernel void @fenced(ptr addrspace(1) %out) {\n"
        "  call void asm sideeffect \"membar.gl;\", \"~{memory}\"()\n"
        "  call void asm sideeffect \"fence.acq_rel.gpu;\\0A\\09\", \"~{memory}\"()\n"
        "  call void asm sideeffect \"\", \"~{memory}\"()\n"
        "  store i32 7, ptr addrspace(1) %out, align 4\n  ret void\n}\n";
    kiln_emu_kernel *k = load(ok, strlen(ok), &err);
    CHECK(k, "%s", err.msg);
    if (k) {
        int32_t v = 0;
        void *p = &v, *args[] = {&p};
        kiln_emu_launch l = {.grid = {1, 1, 1}, .block = {1, 1, 1}};
        CHECK(kiln_emu_run(k, &l, args, &err) == KILN_OK && v == 7, "%s", err.msg);
        kiln_emu_kernel_free(k);
    }
    const char *triton =
        ASM_HEAD "define ptx_kernel void @tritonish(ptr addrspace(1) %in) {\n"
        "  %v = call i32 asm sideeffect \"mov.u32 $0, 0x0;\\0A\\09@$2 ld.global.b32 { $0 }, [ $1 + 0 ];\", "
        "\"=r,l,b\"(ptr addrspace(1) %in, i1 true)\n  ret void\n}\n";
    k = load(triton, strlen(triton), &err);
    CHECK(!k && err.status == KILN_EINVAL && strstr(err.msg, "inline PTX assembly") &&
              strstr(err.msg, "ld.global.b32") && strstr(err.msg, "docs/emulator.md"),
          "%s", err.msg);
    TEST_END();
}

/* A CUDA kernel clang-22 compiles to bitcode: a block sum of a * x with __launch_bounds__(128),
 * __nvvm_reflect("__CUDA_ARCH") adding 1000 below sm_80. */
static const char *cuda_src =
    "#define __global__ __attribute__((global))\n"
    "#define __shared__ __attribute__((shared))\n"
    "extern \"C\" __global__ void __attribute__((launch_bounds(128)))\n"
    "scale_sum(float *out, const float *x, float a, int n) {\n"
    "    __shared__ float part[128];\n"
    "    int t = __nvvm_read_ptx_sreg_tid_x();\n"
    "    int i = __nvvm_read_ptx_sreg_ctaid_x() * 128 + t;\n"
    "    part[t] = i < n ? a * x[i] : 0.0f;\n"
    "    __nvvm_bar_sync(0);\n"
    "    for (int s = 64; s > 0; s >>= 1) {\n"
    "        if (t < s) part[t] += part[t + s];\n"
    "        __nvvm_bar_sync(0);\n"
    "    }\n"
    "    if (t == 0) out[__nvvm_read_ptx_sreg_ctaid_x()] =\n"
    "        part[0] + (__nvvm_reflect(\"__CUDA_ARCH\") >= 800 ? 0.0f : 1000.0f);\n"
    "}\n";

static char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = n > 0 ? malloc((size_t)n) : NULL;
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    *len = (size_t)n;
    return b;
}

static void test_clang_cuda(void) {
    if (system("command -v clang-22 >/dev/null 2>&1") != 0) {
        printf("skip clang CUDA bitcode: clang-22 is not installed (tools/setup.sh installs it)\n");
        skipped += 2;
        return;
    }
    char dir[] = "/tmp/kiln_foreign_XXXXXX";
    if (!mkdtemp(dir)) return;
    char src[128], cmd[1024];
    snprintf(src, sizeof src, "%s/k.cu", dir);
    FILE *f = fopen(src, "w");
    if (f) fputs(cuda_src, f), fclose(f);
    const char *modes[2] = {"-O2 -Xclang -disable-llvm-passes", "-O2"};
    const char *names[2] = {"clang-22 CUDA bitcode, unoptimized (llvm.nvvm.reflect kept), runs and sums right",
                            "clang-22 CUDA bitcode at -O2 runs and sums right"};
    for (int m = 0; m < 2; m++) {
        TEST_BEGIN(names[m]);
        snprintf(cmd, sizeof cmd, "clang-22 -x cuda --cuda-device-only --cuda-gpu-arch=sm_80 -nocudainc -nocudalib "
                 "-Wno-unknown-cuda-version %s -emit-llvm -c %s -o %s/k%d.bc 2>&1", modes[m], src, dir, m);
        int rc = system(cmd);
        char bc[160];
        snprintf(bc, sizeof bc, "%s/k%d.bc", dir, m);
        size_t len = 0;
        char *ir = rc == 0 ? slurp(bc, &len) : NULL;
        CHECK(ir, "clang-22 failed (%d): %s", rc, cmd);
        kiln_error err = {0};
        kiln_emu_kernel *k = ir ? load(ir, len, &err) : NULL;
        CHECK(!ir || k, "%s", err.msg);
        if (k) {
            const kiln_kernel_meta *meta = kiln_emu_kernel_meta(k);
            float x[300], out[3] = {0, 0, 0}, a = 0.5f;
            for (int i = 0; i < 300; i++) x[i] = (float)(i % 17) - 8.0f;
            int n = 300;
            void *px = x, *po = out, *args[] = {&po, &px, &a, &n};
            kiln_emu_launch l = {.grid = {3, 1, 1}, .block = {128, 1, 1}, .twice = 1};
            CHECK(meta->block[0] == 128, "block from __launch_bounds__: %u", meta->block[0]);
            CHECK(kiln_emu_run(k, &l, args, &err) == KILN_OK, "%s", err.msg);
            for (int b = 0; b < 3; b++) {
                double want = 0;
                for (int i = b * 128; i < b * 128 + 128 && i < n; i++) want += 0.5 * x[i];
                CHECK(out[b] == (float)want, "block %d: %g, want %g", b, out[b], want);
            }
        }
        free(ir);
        TEST_END();
    }
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) printf("  could not remove %s\n", dir);
}

int main(void) {
    kiln_error err = {0};
    if (kiln_emu_create(&emu, &err) != KILN_OK) {
        printf("setup: %s\nemu_foreign: 0 passed, 1 failed\n", err.msg);
        return 1;
    }
    test_new_spellings();
    test_inline_asm();
    test_clang_cuda();
    kiln_emu_destroy(emu);
    printf("emu_foreign: %d passed, %d failed, %d skipped\n", check_passed, check_failed, skipped);
    return check_failed ? 1 : 0;
}
