/* tests/emu_mech_test.c - emulator mechanics on hand-written NVVM IR: special registers, barriers,
 * shuffles and votes by the PTX rules, poison, races found by running twice, faults, bad launches. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "emu.h"
#include "kiln/emu.h"

#define HEAD                                                                                        \
    "target datalayout = \"e-i64:64-i128:128-v16:16-v32:32-n16:32:64\"\n"                          \
    "target triple = \"nvptx64-nvidia-cuda\"\n"                                                     \
    "declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()\n"                                                \
    "declare i32 @llvm.nvvm.read.ptx.sreg.tid.y()\n"                                                \
    "declare i32 @llvm.nvvm.read.ptx.sreg.tid.z()\n"                                                \
    "declare i32 @llvm.nvvm.read.ptx.sreg.ntid.x()\n"                                               \
    "declare i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()\n"                                              \
    "declare i32 @llvm.nvvm.read.ptx.sreg.ctaid.y()\n"                                              \
    "declare i32 @llvm.nvvm.read.ptx.sreg.nctaid.x()\n"                                             \
    "declare i32 @llvm.nvvm.read.ptx.sreg.laneid()\n"                                               \
    "declare void @llvm.nvvm.barrier0()\n"                                                          \
    "declare i32 @llvm.nvvm.barrier0.popc(i32)\n"                                                   \
    "declare i32 @llvm.nvvm.shfl.sync.bfly.i32(i32, i32, i32, i32)\n"                               \
    "declare i32 @llvm.nvvm.shfl.sync.idx.i32(i32, i32, i32, i32)\n"                                \
    "declare i32 @llvm.nvvm.shfl.sync.up.i32(i32, i32, i32, i32)\n"                                 \
    "declare i32 @llvm.nvvm.shfl.sync.down.i32(i32, i32, i32, i32)\n"                               \
    "declare {i32, i1} @llvm.nvvm.shfl.sync.down.i32p(i32, i32, i32, i32)\n"                        \
    "declare i32 @llvm.nvvm.vote.ballot.sync(i32, i1)\n"                                            \
    "declare void @llvm.trap()\n"

static kiln_emu *emu;

static kiln_emu_kernel *load(const char *body, int sm, kiln_error *err) {
    static char ir[16384];
    snprintf(ir, sizeof ir, "%s%s", HEAD, body);
    kiln_emu_kernel *k = NULL;
    if (kiln_emu_load_ir(emu, ir, strlen(ir), NULL, sm, &k, err) != KILN_OK) return NULL;
    return k;
}

static kiln_status launch1(kiln_emu_kernel *k, unsigned grid, unsigned block, void **args, int twice,
                           kiln_error *err) {
    kiln_emu_launch l = {.grid = {grid, 1, 1}, .block = {block, 1, 1}, .twice = twice};
    return kiln_emu_run(k, &l, args, err);
}

/* out[linear thread id in grid] = f(thread) for a 3-D block in a 2-D grid */
static const char *k_sregs =
    "define ptx_kernel void @sregs(ptr addrspace(1) %out) {\n"
    "  %tx = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()\n"
    "  %ty = call i32 @llvm.nvvm.read.ptx.sreg.tid.y()\n"
    "  %tz = call i32 @llvm.nvvm.read.ptx.sreg.tid.z()\n"
    "  %bx = call i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()\n"
    "  %by = call i32 @llvm.nvvm.read.ptx.sreg.ctaid.y()\n"
    "  %nbx = call i32 @llvm.nvvm.read.ptx.sreg.nctaid.x()\n"
    "  %lane = call i32 @llvm.nvvm.read.ptx.sreg.laneid()\n"
    "  %lin = add i32 %tx, 0\n"
    "  %a = mul i32 %ty, 4\n  %b = mul i32 %tz, 8\n  %t = add i32 %a, %b\n  %tid = add i32 %t, %tx\n"
    "  %blk0 = mul i32 %by, %nbx\n  %blk = add i32 %blk0, %bx\n  %g0 = mul i32 %blk, 16\n"
    "  %g = add i32 %g0, %tid\n"
    "  %v0 = mul i32 %blk, 1000\n  %v1 = mul i32 %lane, 100000\n  %v2 = add i32 %v0, %tid\n"
    "  %v = add i32 %v2, %v1\n"
    "  %p = getelementptr i32, ptr addrspace(1) %out, i32 %g\n"
    "  store i32 %v, ptr addrspace(1) %p\n  ret void\n}\n";

static void test_sregs(void) {
    TEST_BEGIN("special registers in a 4x2x2 block of a 3x2 grid");
    kiln_error err = {0};
    kiln_emu_kernel *k = load(k_sregs, 80, &err);
    CHECK(k, "%s", err.msg);
    if (!k) {
        TEST_END();
        return;
    }
    int32_t out[6 * 16];
    memset(out, 0xff, sizeof out);
    void *p = out, *args[] = {&p};
    kiln_emu_launch l = {.grid = {3, 2, 1}, .block = {4, 2, 2}};
    CHECK(kiln_emu_run(k, &l, args, &err) == KILN_OK, "%s", err.msg);
    for (int b = 0; b < 6; b++)
        for (int t = 0; t < 16; t++)
            CHECK(out[b * 16 + t] == b * 1000 + t + t * 100000, "block %d thread %d: %d", b, t, out[b * 16 + t]);
    kiln_emu_kernel_free(k);
    TEST_END();
}

/* smem[tid] = tid * 3; barrier; out[block] = popc(odd) * 1e6 + sum(smem) by thread 0 */
static const char *k_reduce =
    "@s = internal addrspace(3) global [256 x i32] undef, align 4\n"
    "define ptx_kernel void @reduce(ptr addrspace(1) %out) {\n"
    "entry:\n"
    "  %tid = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()\n"
    "  %n = call i32 @llvm.nvvm.read.ptx.sreg.ntid.x()\n"
    "  %bx = call i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()\n"
    "  %v = mul i32 %tid, 3\n"
    "  %p = getelementptr [256 x i32], ptr addrspace(3) @s, i32 0, i32 %tid\n"
    "  store i32 %v, ptr addrspace(3) %p\n"
    "  %odd = and i32 %tid, 1\n"
    "  %pc = call i32 @llvm.nvvm.barrier0.popc(i32 %odd)\n"
    "  %z = icmp eq i32 %tid, 0\n"
    "  br i1 %z, label %sum, label %done\n"
    "sum:\n"
    "  br label %loop\n"
    "loop:\n"
    "  %i = phi i32 [0, %sum], [%i1, %loop]\n"
    "  %acc = phi i32 [0, %sum], [%acc1, %loop]\n"
    "  %q = getelementptr [256 x i32], ptr addrspace(3) @s, i32 0, i32 %i\n"
    "  %x = load i32, ptr addrspace(3) %q\n"
    "  %acc1 = add i32 %acc, %x\n"
    "  %i1 = add i32 %i, 1\n"
    "  %c = icmp ult i32 %i1, %n\n"
    "  br i1 %c, label %loop, label %write\n"
    "write:\n"
    "  %m = mul i32 %pc, 1000000\n  %r = add i32 %m, %acc1\n"
    "  %o = getelementptr i32, ptr addrspace(1) %out, i32 %bx\n"
    "  store i32 %r, ptr addrspace(1) %o\n"
    "  br label %done\n"
    "done:\n"
    "  ret void\n}\n";

static void test_barrier_reduce(void) {
    TEST_BEGIN("barrier + shared memory reduction, popc, run twice without a race");
    kiln_error err = {0};
    kiln_emu_kernel *k = load(k_reduce, 75, &err);
    CHECK(k, "%s", err.msg);
    if (!k) {
        TEST_END();
        return;
    }
    int32_t out[4];
    void *p = out, *args[] = {&p};
    for (int twice = 0; twice < 2; twice++) {
        memset(out, 0, sizeof out);
        CHECK(launch1(k, 4, 256, args, twice, &err) == KILN_OK, "twice=%d: %s", twice, err.msg);
        for (int b = 0; b < 4; b++)
            CHECK(out[b] == 128 * 1000000 + 3 * 255 * 256 / 2, "twice=%d block %d: %d", twice, b, out[b]);
    }
    kiln_emu_kernel_free(k);
    TEST_END();
}

/* out[tid] = smem[(tid + 1) % n] after smem[tid] = tid, with (or without) a barrier between */
static const char *k_race_fmt =
    "@s = internal addrspace(3) global [64 x i32] undef, align 4\n"
    "define ptx_kernel void @race(ptr addrspace(1) %%out) {\n"
    "  %%tid = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()\n"
    "  %%p = getelementptr [64 x i32], ptr addrspace(3) @s, i32 0, i32 %%tid\n"
    "  store i32 %%tid, ptr addrspace(3) %%p\n"
    "  %s"
    "  %%n1 = add i32 %%tid, 1\n  %%j = and i32 %%n1, 63\n"
    "  %%q = getelementptr [64 x i32], ptr addrspace(3) @s, i32 0, i32 %%j\n"
    "  %%v = load i32, ptr addrspace(3) %%q\n"
    "  %%o = getelementptr i32, ptr addrspace(1) %%out, i32 %%tid\n"
    "  store i32 %%v, ptr addrspace(1) %%o\n  ret void\n}\n";

static void test_race(void) {
    TEST_BEGIN("a missing barrier is a race that running twice reports; with the barrier it passes");
    kiln_error err = {0};
    char body[2048];
    snprintf(body, sizeof body, k_race_fmt, "");
    kiln_emu_kernel *racy = load(body, 80, &err);
    CHECK(racy, "%s", err.msg);
    snprintf(body, sizeof body, k_race_fmt, "call void @llvm.nvvm.barrier0()\n");
    kiln_emu_kernel *fixed = load(body, 80, &err);
    CHECK(fixed, "%s", err.msg);
    if (!racy || !fixed) {
        TEST_END();
        return;
    }
    int32_t out[64];
    void *p = out, *args[] = {&p};
    /* once, ascending: thread t reads slot t+1 before thread t+1 wrote it: the poison */
    CHECK(launch1(racy, 1, 64, args, 0, &err) == KILN_OK, "%s", err.msg);
    CHECK(out[0] == -1 && out[63] == 0, "poison expected where the read came first: %d %d", out[0], out[63]);
    kiln_status st = launch1(racy, 1, 64, args, 1, &err);
    CHECK(st == KILN_EEMU && strstr(err.msg, "race") && strstr(err.msg, "argument 'out'"), "%s", err.msg);
    CHECK(launch1(fixed, 1, 64, args, 1, &err) == KILN_OK, "%s", err.msg);
    for (int t = 0; t < 64; t++) CHECK(out[t] == (t + 1) % 64, "thread %d read %d", t, out[t]);
    kiln_emu_kernel_free(racy);
    kiln_emu_kernel_free(fixed);
    TEST_END();
}

/* block 0 fills smem; block 1 reads it before writing: it must see poison, not block 0's data */
static const char *k_poison =
    "@s = internal addrspace(3) global [32 x float] undef, align 4\n"
    "define ptx_kernel void @poison(ptr addrspace(1) %out) {\n"
    "entry:\n"
    "  %tid = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()\n"
    "  %bx = call i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()\n"
    "  %p = getelementptr [32 x float], ptr addrspace(3) @s, i32 0, i32 %tid\n"
    "  %v = load float, ptr addrspace(3) %p\n"
    "  %i0 = mul i32 %bx, 32\n  %i = add i32 %i0, %tid\n"
    "  %o = getelementptr float, ptr addrspace(1) %out, i32 %i\n"
    "  store float %v, ptr addrspace(1) %o\n"
    "  store float 1.0, ptr addrspace(3) %p\n"
    "  ret void\n}\n";

static void test_poison(void) {
    TEST_BEGIN("shared memory is poisoned (NaN) before every block");
    kiln_error err = {0};
    kiln_emu_kernel *k = load(k_poison, 80, &err);
    CHECK(k, "%s", err.msg);
    if (!k) {
        TEST_END();
        return;
    }
    float out[64];
    void *p = out, *args[] = {&p};
    CHECK(launch1(k, 2, 32, args, 0, &err) == KILN_OK, "%s", err.msg);
    uint32_t bits;
    memcpy(&bits, &out[40], 4);
    CHECK(isnan(out[0]) && isnan(out[40]) && bits == 0xffffffffu, "block 1 saw 0x%08x", bits);
    kiln_emu_kernel_free(k);
    TEST_END();
}

/* out[tid] = shfl.MODE(mask, tid * 10, b, c) for lanes in mask (others write -2) */
static kiln_emu_kernel *shfl_kernel(const char *mode, unsigned mask, int b, unsigned c, int pred) {
    char call[512], body[2048];
    if (pred)
        snprintf(call, sizeof call,
                 "%%rp = call {i32, i1} @llvm.nvvm.shfl.sync.down.i32p(i32 -1, i32 %%a, i32 1, i32 31)\n"
                 "  %%rv = extractvalue {i32, i1} %%rp, 0\n  %%pb = extractvalue {i32, i1} %%rp, 1\n"
                 "  %%pz = zext i1 %%pb to i32\n  %%pm = mul i32 %%pz, 1000\n  %%r = add i32 %%rv, %%pm");
    else
        snprintf(call, sizeof call, "%%r = call i32 @llvm.nvvm.shfl.sync.%s.i32(i32 %u, i32 %%a, i32 %d, i32 %u)",
                 mode, mask, b, c);
    snprintf(body, sizeof body,
             "define ptx_kernel void @shfl(ptr addrspace(1) %%out) {\n"
             "entry:\n"
             "  %%tid = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()\n"
             "  %%o = getelementptr i32, ptr addrspace(1) %%out, i32 %%tid\n"
             "  %%bit = shl i32 1, %%tid\n  %%m = and i32 %%bit, %u\n  %%in = icmp ne i32 %%m, 0\n"
             "  br i1 %%in, label %%go, label %%skip\n"
             "go:\n"
             "  %%a = mul i32 %%tid, 10\n"
             "  %s\n"
             "  store i32 %%r, ptr addrspace(1) %%o\n  ret void\n"
             "skip:\n  store i32 -2, ptr addrspace(1) %%o\n  ret void\n}\n",
             mask, call);
    kiln_error err = {0};
    kiln_emu_kernel *k = load(body, 80, &err);
    CHECK(k, "%s", err.msg);
    return k;
}

static int shfl_run(kiln_emu_kernel *k, int32_t *out, kiln_error *err) {
    void *p = out, *args[] = {&p};
    memset(out, 0x5a, 32 * sizeof *out);
    return launch1(k, 1, 32, args, 0, err);
}

/* PTX: shfl.sync computes j per mode and clamps against the segment; out of range: own value */
static int32_t shfl_expect(const char *mode, unsigned mask, int l, int b, unsigned c) {
    unsigned seg = (c >> 8) & 31, clamp = c & 31, maxl = ((unsigned)l & seg) | (clamp & ~seg), minl = (unsigned)l & seg;
    int j;
    int ok;
    if (!strcmp(mode, "up")) j = l - b, ok = j >= (int)maxl;
    else if (!strcmp(mode, "down")) j = l + b, ok = j <= (int)maxl;
    else if (!strcmp(mode, "bfly")) j = l ^ b, ok = j <= (int)maxl;
    else j = (int)(minl | ((unsigned)b & ~seg)), ok = j <= (int)maxl;
    if (!ok) j = l;
    return (mask >> j & 1) ? j * 10 : -1; /* a lane outside the mask gives poison */
}

static void test_shuffles(void) {
    static const struct {
        const char *mode;
        unsigned mask;
        int b;
        unsigned c;
    } cases[] = {
        {"bfly", 0xffffffffu, 1, 0x1f},  {"bfly", 0xffffffffu, 16, 0x1f}, {"idx", 0xffffffffu, 5, 0x1f},
        {"idx", 0xffffffffu, 3, 0x181f}, /* width 8 */
        {"down", 0xffffffffu, 1, 0x1f},  {"down", 0xffffffffu, 3, 0x181f}, {"up", 0xffffffffu, 2, 0},
        {"up", 0xffffffffu, 1, 0x1800},  {"down", 0x0000ffffu, 1, 0x1f},   /* lane 15 reads lane 16: outside */
        {"bfly", 0x55555555u, 2, 0x1f},  {"idx", 0x0000ff00u, 9, 0x1f},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char name[128];
        snprintf(name, sizeof name, "shfl.sync.%s mask 0x%08x b %d c 0x%x follows the PTX rules", cases[i].mode,
                 cases[i].mask, cases[i].b, cases[i].c);
        TEST_BEGIN(name);
        kiln_emu_kernel *k = shfl_kernel(cases[i].mode, cases[i].mask, cases[i].b, cases[i].c, 0);
        kiln_error err = {0};
        int32_t out[32];
        if (k) CHECK(shfl_run(k, out, &err) == KILN_OK, "%s", err.msg);
        for (int l = 0; k && l < 32; l++) {
            int32_t want = (cases[i].mask >> l & 1) ? shfl_expect(cases[i].mode, cases[i].mask, l, cases[i].b, cases[i].c) : -2;
            CHECK(out[l] == want, "lane %d got %d want %d", l, out[l], want);
        }
        kiln_emu_kernel_free(k);
        TEST_END();
    }
    TEST_BEGIN("shfl.sync.down.i32p returns the in-range predicate");
    kiln_emu_kernel *k = shfl_kernel("down", 0xffffffffu, 1, 0x1f, 1);
    kiln_error err = {0};
    int32_t out[32];
    if (k) CHECK(shfl_run(k, out, &err) == KILN_OK, "%s", err.msg);
    for (int l = 0; k && l < 32; l++) {
        int32_t want = l < 31 ? (l + 1) * 10 + 1000 : l * 10;
        CHECK(out[l] == want, "lane %d got %d want %d", l, out[l], want);
    }
    kiln_emu_kernel_free(k);
    TEST_END();
}

/* A kernel whose body (after reading tid) is given; for faults. */
static void expect_fault(const char *name, const char *body, unsigned block, const char *needle) {
    TEST_BEGIN(name);
    char ir[4096];
    snprintf(ir, sizeof ir,
             "@s = internal addrspace(3) global [4 x i32] undef\n"
             "define ptx_kernel void @f(ptr addrspace(1) %%out) {\n"
             "entry:\n  %%tid = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()\n"
             "  %%lane = and i32 %%tid, 31\n%s}\n", body);
    kiln_error err = {0};
    kiln_emu_kernel *k = load(ir, 80, &err);
    CHECK(k, "%s", err.msg);
    if (k) {
        int32_t out[64];
        void *p = out, *args[] = {&p};
        kiln_status st = launch1(k, 2, block, args, 0, &err);
        CHECK(st == KILN_EEMU && strstr(err.msg, needle), "status %s: %s", kiln_status_name(st), err.msg);
        /* the emulator stays usable after a fault */
        kiln_emu_kernel *ok = load(k_sregs, 80, &err);
        int32_t o2[96];
        void *p2 = o2, *a2[] = {&p2};
        kiln_emu_launch l = {.grid = {3, 2, 1}, .block = {4, 2, 2}};
        CHECK(ok && kiln_emu_run(ok, &l, a2, &err) == KILN_OK && o2[95] == 5 * 1000 + 15 + 15 * 100000,
              "after the fault: %s", err.msg);
        kiln_emu_kernel_free(ok);
    }
    kiln_emu_kernel_free(k);
    TEST_END();
}

static void test_faults(void) {
    expect_fault("barrier inside a branch only half the block takes: divergent barrier",
                 "  %c = icmp ult i32 %tid, 16\n  br i1 %c, label %a, label %b\n"
                 "a:\n  call void @llvm.nvvm.barrier0()\n  br label %b\n"
                 "b:\n  ret void\n", 64, "divergent barrier");
    expect_fault("threads at two different barriers: divergent barrier",
                 "  %c = icmp ult i32 %tid, 16\n  br i1 %c, label %a, label %b\n"
                 "a:\n  call void @llvm.nvvm.barrier0()\n  ret void\n"
                 "b:\n  call void @llvm.nvvm.barrier0()\n  ret void\n", 64, "divergent barrier");
    expect_fault("a lane exiting while its warp waits for it is an error",
                 "  %c = icmp ult i32 %lane, 16\n  br i1 %c, label %a, label %b\n"
                 "a:\n  %r = call i32 @llvm.nvvm.shfl.sync.bfly.i32(i32 -1, i32 1, i32 1, i32 31)\n  ret void\n"
                 "b:\n  ret void\n", 32, "exited while lanes");
    expect_fault("a shuffle naming an exited lane is an error",
                 "  %c = icmp ult i32 %lane, 16\n  br i1 %c, label %b, label %a\n"
                 "a:\n  %r = call i32 @llvm.nvvm.shfl.sync.bfly.i32(i32 -1, i32 1, i32 1, i32 31)\n  ret void\n"
                 "b:\n  ret void\n", 32, "has exited");
    expect_fault("a shuffle mask without the calling lane is an error",
                 "  %r = call i32 @llvm.nvvm.shfl.sync.bfly.i32(i32 1, i32 1, i32 1, i32 31)\n  ret void\n", 32,
                 "does not include the calling lane");
    expect_fault("two shuffle modes meeting in one warp is an error",
                 "  %c = icmp ult i32 %lane, 16\n  br i1 %c, label %a, label %b\n"
                 "a:\n  %r = call i32 @llvm.nvvm.shfl.sync.bfly.i32(i32 -1, i32 1, i32 1, i32 31)\n  ret void\n"
                 "b:\n  %q = call i32 @llvm.nvvm.shfl.sync.idx.i32(i32 -1, i32 1, i32 1, i32 31)\n  ret void\n",
                 32, "wait in llvm.nvvm.shfl.sync");
    expect_fault("a full-warp mask in a 48-thread block names lanes that do not exist",
                 "  %r = call i32 @llvm.nvvm.shfl.sync.bfly.i32(i32 -1, i32 1, i32 1, i32 31)\n  ret void\n", 48,
                 "does not exist");
    expect_fault("lane 0 at a barrier while its warp waits at a shuffle: deadlock, reported",
                 "  %c = icmp eq i32 %tid, 0\n  br i1 %c, label %a, label %b\n"
                 "a:\n  call void @llvm.nvvm.barrier0()\n  ret void\n"
                 "b:\n  %r = call i32 @llvm.nvvm.shfl.sync.bfly.i32(i32 -1, i32 1, i32 1, i32 31)\n"
                 "  call void @llvm.nvvm.barrier0()\n  ret void\n", 32, "deadlock");
    expect_fault("llvm.trap stops the launch with an error", "  call void @llvm.trap()\n  ret void\n", 32,
                 "trapped");
}

static void test_vote(void) {
    TEST_BEGIN("vote.ballot.sync gathers the predicate of every lane");
    kiln_error err = {0};
    kiln_emu_kernel *k = load("define ptx_kernel void @v(ptr addrspace(1) %out) {\n"
                              "  %tid = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()\n"
                              "  %m = urem i32 %tid, 3\n  %p = icmp eq i32 %m, 0\n"
                              "  %b = call i32 @llvm.nvvm.vote.ballot.sync(i32 -1, i1 %p)\n"
                              "  %o = getelementptr i32, ptr addrspace(1) %out, i32 %tid\n"
                              "  store i32 %b, ptr addrspace(1) %o\n  ret void\n}\n",
                              80, &err);
    CHECK(k, "%s", err.msg);
    uint32_t out[64], want[2] = {0, 0};
    for (int t = 0; t < 64; t++)
        if (t % 3 == 0) want[t / 32] |= 1u << (t % 32);
    void *p = out, *args[] = {&p};
    if (k) CHECK(launch1(k, 1, 64, args, 0, &err) == KILN_OK, "%s", err.msg);
    for (int t = 0; k && t < 64; t++) CHECK(out[t] == want[t / 32], "thread %d: 0x%08x", t, out[t]);
    kiln_emu_kernel_free(k);
    TEST_END();
}

/* Host conversions: fptrunc/fpext on half and bfloat (libgcc helpers or F16C in host code) and
 * the NVVM cvt intrinsics, against emu_half's rounding. */
static const char *k_convert =
    "declare bfloat @llvm.nvvm.f2bf16.rn(float)\n"
    "declare <2 x half> @llvm.nvvm.ff2f16x2.rn(float, float)\n"
    "define ptx_kernel void @cvt(ptr addrspace(1) %in, ptr addrspace(1) %out) {\n"
    "  %tid = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()\n"
    "  %ip = getelementptr float, ptr addrspace(1) %in, i32 %tid\n"
    "  %x = load float, ptr addrspace(1) %ip\n"
    "  %h = fptrunc float %x to half\n  %hb = bitcast half %h to i16\n"
    "  %b = fptrunc float %x to bfloat\n  %bb = bitcast bfloat %b to i16\n"
    "  %d = fpext float %x to double\n  %hd = fptrunc double %d to half\n  %hdb = bitcast half %hd to i16\n"
    "  %n = call bfloat @llvm.nvvm.f2bf16.rn(float %x)\n  %nb = bitcast bfloat %n to i16\n"
    "  %p = call <2 x half> @llvm.nvvm.ff2f16x2.rn(float %x, float 1.0)\n"
    "  %pb = bitcast <2 x half> %p to <2 x i16>\n  %ph = extractelement <2 x i16> %pb, i32 1\n"
    "  %back = fpext half %h to float\n  %backb = bitcast float %back to i32\n"
    "  %base = mul i32 %tid, 6\n"
    "  %o0 = getelementptr i32, ptr addrspace(1) %out, i32 %base\n"
    "  %z0 = zext i16 %hb to i32\n  store i32 %z0, ptr addrspace(1) %o0\n"
    "  %o1 = getelementptr i32, ptr addrspace(1) %o0, i32 1\n"
    "  %z1 = zext i16 %bb to i32\n  store i32 %z1, ptr addrspace(1) %o1\n"
    "  %o2 = getelementptr i32, ptr addrspace(1) %o0, i32 2\n"
    "  %z2 = zext i16 %hdb to i32\n  store i32 %z2, ptr addrspace(1) %o2\n"
    "  %o3 = getelementptr i32, ptr addrspace(1) %o0, i32 3\n"
    "  %z3 = zext i16 %nb to i32\n  store i32 %z3, ptr addrspace(1) %o3\n"
    "  %o4 = getelementptr i32, ptr addrspace(1) %o0, i32 4\n"
    "  %z4 = zext i16 %ph to i32\n  store i32 %z4, ptr addrspace(1) %o4\n"
    "  %o5 = getelementptr i32, ptr addrspace(1) %o0, i32 5\n"
    "  store i32 %backb, ptr addrspace(1) %o5\n  ret void\n}\n";

static void test_conversions(void) {
    TEST_BEGIN("half/bfloat conversions in host code and NVVM cvt round to nearest even");
    kiln_error err = {0};
    kiln_emu_kernel *k = load(k_convert, 80, &err);
    CHECK(k, "%s", err.msg);
    if (!k) {
        TEST_END();
        return;
    }
    enum { N = 256 };
    float in[N];
    uint32_t out[N * 6];
    uint32_t specials[] = {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0x3f808000u,
                           0x3f818000u, 0x3f80c000u, 0x477fe000u, 0x477ff000u, 0x33800000u, 0x33000001u,
                           0x387fc000u, 0x7f7fffffu, 0x00000001u, 0x3f800fffu, 0x3f801000u, 0x3f803000u};
    size_t ns = sizeof specials / sizeof specials[0];
    for (int i = 0; i < N; i++) {
        uint32_t u = i < (int)ns ? specials[i] : (uint32_t)(i * 2654435761u);
        memcpy(&in[i], &u, 4);
    }
    void *pi = in, *po = out, *args[] = {&pi, &po};
    CHECK(launch1(k, 1, N, args, 0, &err) == KILN_OK, "%s", err.msg);
    int bad = 0;
    for (int i = 0; i < N && bad < 5; i++) {
        float x = in[i];
        uint32_t h = emu_f32_to_f16(x), b = emu_f32_to_bf16(x), hd = emu_f64_to_f16((double)x);
        uint32_t got[6] = {out[i * 6], out[i * 6 + 1], out[i * 6 + 2], out[i * 6 + 3], out[i * 6 + 4], out[i * 6 + 5]};
        bool nan = isnan(x);
        float back = emu_f16_to_f32((uint16_t)h);
        uint32_t backb;
        memcpy(&backb, &back, 4);
        bool ok = nan ? ((got[0] & 0x7c00) == 0x7c00 && (got[0] & 0x3ff) && (got[1] & 0x7f80) == 0x7f80 &&
                         (got[1] & 0x7f) && (got[3] & 0x7f))
                      : (got[0] == h && got[1] == b && got[2] == hd && got[3] == b && got[4] == h && got[5] == backb);
        if (!ok) bad++;
        CHECK(ok, "x=%a (0x%08x): half 0x%04x/0x%04x bf16 0x%04x/0x%04x d->half 0x%04x/0x%04x cvt.bf16 0x%04x "
                  "cvt.f16x2 0x%04x back 0x%08x/0x%08x",
              (double)x, (unsigned)(i < (int)ns ? specials[i] : 0), got[0], h, got[1], b, got[2], hd, got[3], got[4],
              got[5], backb);
    }
    kiln_emu_kernel_free(k);
    TEST_END();
}

/* The bit-level f32 <-> f16 conversions (emu_half.c) against the definitions through double: every f16
 * pattern against s * f * 2^(e - 25) (subnormals f * 2^-24), and f32 patterns (a stride through all 2^32,
 * and every pattern of f16's rounding boundaries' neighbourhoods: the largest finite and the overflow at
 * 65520, the normal/subnormal edge 2^-14, the smallest subnormal 2^-24 and half of it) against
 * emu_f64_to_f16, which rounds the exact double once. (All 2^32 were checked equal when it was written.) */
static void test_conversion_sweep(void) {
    TEST_BEGIN("f32 <-> f16 on the bits: equal to the double path over a sweep of f32 and every f16");
    long bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        uint32_t e = (h >> 10) & 0x1f, f = h & 0x3ff;
        double s = h & 0x8000 ? -1 : 1, want = e == 0x1f ? (f ? NAN : s * INFINITY)
                                                 : e ? s * ldexp(f | 0x400, (int)e - 25) : s * ldexp(f, -24);
        float got = emu_f16_to_f32((uint16_t)h);
        bool ok = isnan(want) ? isnan(got) : (double)got == want && !signbit(got) == !signbit(want);
        if (!ok && bad++ < 3) CHECK(0, "f16 0x%04x: %a, want %a", (unsigned)h, (double)got, want);
    }
    static const uint32_t edges[] = {0x477fe000u, 0x477ff000u, 0x38800000u, 0x33800000u, 0x33000000u, 0x3f800000u};
    for (int sign = 0; sign < 2; sign++)
        for (size_t i = 0; i < sizeof edges / sizeof edges[0] + 1; i++) {
            uint32_t lo = i < sizeof edges / sizeof edges[0] ? edges[i] - 0x10000u : 0, step = i < sizeof edges / sizeof edges[0] ? 1 : 997;
            uint64_t n = i < sizeof edges / sizeof edges[0] ? 0x20000u : 0x7f800000u / 997;
            for (uint64_t j = 0; j < n; j++) {
                uint32_t u = (lo + (uint32_t)j * step) | (sign ? 0x80000000u : 0);
                float x;
                memcpy(&x, &u, 4);
                uint16_t got = emu_f32_to_f16(x), want = emu_f64_to_f16((double)x);
                if (got != want && bad++ < 6) CHECK(0, "f32 0x%08x (%a): f16 0x%04x, want 0x%04x", u, (double)x, got, want);
            }
        }
    CHECK(bad == 0, "%ld conversions differ", bad);
    TEST_END();
}

/* Dynamic shared memory after a static array; each thread writes and reads back its slot. */
static const char *k_dynamic =
    "@st = internal addrspace(3) global [3 x i32] undef, align 4\n"
    "@dyn = external addrspace(3) global [0 x i32], align 16\n"
    "define ptx_kernel void @dynk(ptr addrspace(1) %out) {\n"
    "  %tid = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()\n"
    "  %p = getelementptr [0 x i32], ptr addrspace(3) @dyn, i32 0, i32 %tid\n"
    "  store i32 %tid, ptr addrspace(3) %p\n"
    "  store i32 7, ptr addrspace(3) @st\n"
    "  call void @llvm.nvvm.barrier0()\n"
    "  %n = sub i32 255, %tid\n"
    "  %q = getelementptr [0 x i32], ptr addrspace(3) @dyn, i32 0, i32 %n\n"
    "  %v = load i32, ptr addrspace(3) %q\n  %s = load i32, ptr addrspace(3) @st\n  %r = add i32 %v, %s\n"
    "  %o = getelementptr i32, ptr addrspace(1) %out, i32 %tid\n"
    "  store i32 %r, ptr addrspace(1) %o\n  ret void\n}\n";

static void test_dynamic_smem(void) {
    TEST_BEGIN("dynamic shared memory follows the static variables");
    kiln_error err = {0};
    kiln_emu_kernel *k = load(k_dynamic, 80, &err);
    CHECK(k, "%s", err.msg);
    if (!k) {
        TEST_END();
        return;
    }
    int32_t out[256];
    void *p = out, *args[] = {&p};
    kiln_emu_launch l = {.grid = {1, 1, 1}, .block = {256, 1, 1}, .dynamic_smem = 1024, .twice = 1};
    CHECK(kiln_emu_run(k, &l, args, &err) == KILN_OK, "%s", err.msg);
    for (int t = 0; t < 256; t++) CHECK(out[t] == 255 - t + 7, "thread %d: %d", t, out[t]);
    kiln_emu_kernel_free(k);
    TEST_END();
}

static void expect_bad_launch(const char *name, kiln_emu_kernel *k, kiln_emu_launch l, void **args,
                              const char *needle) {
    TEST_BEGIN(name);
    kiln_error err = {0};
    kiln_status st = kiln_emu_run(k, &l, args, &err);
    CHECK(st == KILN_EINVAL && strstr(err.msg, needle), "status %s: %s", kiln_status_name(st), err.msg);
    TEST_END();
}

static void test_bad_launches(void) {
    kiln_error err = {0};
    kiln_emu_kernel *k = load(k_sregs, 75, &err);
    kiln_emu_kernel *dyn = load(k_dynamic, 75, &err);
    kiln_emu_kernel *capped = load("define ptx_kernel void @c(ptr addrspace(1) %out) {\n  ret void\n}\n"
                                   "!nvvm.annotations = !{!0}\n!0 = !{ptr @c, !\"maxntidx\", i32 64}\n",
                                   80, &err);
    TEST_BEGIN("kernels for bad launches load");
    CHECK(k && dyn && capped, "%s", err.msg);
    TEST_END();
    if (!k || !dyn || !capped) return;
    int32_t out[4096];
    void *p = out, *args[] = {&p}, *null_ptr = NULL, *null_args[] = {&null_ptr}, *missing[] = {NULL};
    kiln_emu_launch ok = {.grid = {1, 1, 1}, .block = {32, 1, 1}};
    kiln_emu_launch l = ok;
    l.grid[0] = 0;
    expect_bad_launch("a grid of 0 blocks is a bad launch", k, l, args, "grid x = 0");
    l = ok, l.grid[1] = 70000;
    expect_bad_launch("grid y above 65535 is a bad launch", k, l, args, "grid y = 70000");
    l = ok, l.block[0] = 1025;
    expect_bad_launch("1025 threads in x is a bad launch", k, l, args, "block x = 1025");
    l = ok, l.block[0] = 64, l.block[1] = 32;
    expect_bad_launch("2048 threads per block is a bad launch", k, l, args, "at most 1024");
    l = ok, l.block[0] = 128;
    expect_bad_launch("more threads than the kernel's maxntid is a bad launch", capped, l, args, "maxntid");
    l = ok, l.dynamic_smem = 100 << 10;
    expect_bad_launch("more shared memory than sm_75 has is a bad launch", dyn, l, args, "sm_75 allows at most");
    expect_bad_launch("no argument array is a bad launch", k, ok, NULL, "no arguments");
    expect_bad_launch("a NULL argument is a bad launch", k, ok, missing, "is NULL");
    expect_bad_launch("a null pointer argument is a bad launch", k, ok, null_args, "null pointer");
    TEST_BEGIN("a null pointer marked nullable is accepted (the kernel then must not touch it)");
    l = ok, l.nullable = 1;
    kiln_emu_kernel *noop = capped;
    CHECK(kiln_emu_run(noop, &l, null_args, &err) == KILN_OK, "%s", err.msg);
    TEST_END();
    kiln_emu_kernel_free(k);
    kiln_emu_kernel_free(dyn);
    kiln_emu_kernel_free(capped);
}

/* flag != 0: cp.async s[0] <- in[0], commit, exit without waiting; flag == 0: s[0] = 7, wait for every copy, out[0] = s[0] */
static const char *k_cp_leftover =
    "declare void @llvm.nvvm.cp.async.ca.shared.global.4(ptr addrspace(3), ptr addrspace(1))\n"
    "declare void @llvm.nvvm.cp.async.commit.group()\n"
    "declare void @llvm.nvvm.cp.async.wait.all()\n"
    "@s = internal addrspace(3) global [4 x i32] undef, align 16\n"
    "define ptx_kernel void @leftover(ptr addrspace(1) %in, ptr addrspace(1) %out, i32 %flag) {\n"
    "entry:\n"
    "  %f = icmp ne i32 %flag, 0\n"
    "  br i1 %f, label %issue, label %read\n"
    "issue:\n"
    "  call void @llvm.nvvm.cp.async.ca.shared.global.4(ptr addrspace(3) @s, ptr addrspace(1) %in)\n"
    "  call void @llvm.nvvm.cp.async.commit.group()\n"
    "  ret void\n"
    "read:\n"
    "  store i32 7, ptr addrspace(3) @s\n"
    "  call void @llvm.nvvm.cp.async.wait.all()\n"
    "  %v = load i32, ptr addrspace(3) @s\n"
    "  store i32 %v, ptr addrspace(1) %out\n"
    "  ret void\n}\n";

static void test_cp_async_leftover(void) {
    TEST_BEGIN("cp.async copies a kernel exits without waiting for never land in a later launch or kernel");
    kiln_error err = {0};
    int32_t in = 99, out = 0;
    void *pin = &in, *pout = &out;
    int32_t issue = 1, read = 0;
    void *args_issue[] = {&pin, &pout, &issue}, *args_read[] = {&pin, &pout, &read};
    /* the same kernel: the same block, the same ctaid */
    kiln_emu_kernel *k = load(k_cp_leftover, 80, &err);
    CHECK(k, "%s", err.msg);
    if (k) {
        CHECK(launch1(k, 1, 1, args_issue, 0, &err) == KILN_OK, "%s", err.msg);
        CHECK(launch1(k, 1, 1, args_read, 0, &err) == KILN_OK && out == 7, "same kernel: out %d, %s", out, err.msg);
        out = 0;
        CHECK(launch1(k, 1, 1, args_issue, 1, &err) == KILN_OK, "%s", err.msg);
        CHECK(launch1(k, 1, 1, args_read, 1, &err) == KILN_OK && out == 7, "run twice: out %d, %s", out, err.msg);
        out = 0;
        CHECK(launch1(k, 1, 1, args_issue, 0, &err) == KILN_OK, "%s", err.msg);
        kiln_emu_kernel_free(k); /* its shared memory is gone: a stale copy would write freed memory */
    }
    k = load(k_cp_leftover, 80, &err);
    CHECK(k, "%s", err.msg);
    if (k) {
        CHECK(launch1(k, 1, 1, args_read, 0, &err) == KILN_OK && out == 7, "a new kernel: out %d, %s", out, err.msg);
        kiln_emu_kernel_free(k);
    }
    TEST_END();
}

static void test_bad_modules(void) {
    TEST_BEGIN("an intrinsic the emulator lacks is named when loading");
    kiln_error err = {0};
    kiln_emu_kernel *k = load("declare i32 @llvm.nvvm.match.any.sync.i32(i32, i32)\n"
                              "define ptx_kernel void @m(ptr addrspace(1) %out) {\n"
                              "  %r = call i32 @llvm.nvvm.match.any.sync.i32(i32 -1, i32 1)\n  ret void\n}\n",
                              80, &err);
    CHECK(!k && strstr(err.msg, "llvm.nvvm.match.any.sync.i32") && strstr(err.msg, "not implemented"), "%s", err.msg);
    TEST_END();
    TEST_BEGIN("IR that does not parse, and a missing entry, are clear errors");
    k = load("define ptx_kernel void @m( {\n", 80, &err);
    CHECK(!k && err.status == KILN_EINVAL && strstr(err.msg, "cannot parse"), "%s", err.msg);
    const char *two = HEAD "define ptx_kernel void @a() {\n ret void\n}\ndefine ptx_kernel void @b() {\n ret void\n}\n";
    CHECK(kiln_emu_load_ir(emu, two, strlen(two), NULL, 80, &k, &err) == KILN_ENOTFOUND && strstr(err.msg, "a, b"),
          "%s", err.msg);
    CHECK(kiln_emu_load_ir(emu, two, strlen(two), "c", 80, &k, &err) == KILN_ENOTFOUND && strstr(err.msg, "'c'"),
          "%s", err.msg);
    CHECK(kiln_emu_load_ir(emu, two, strlen(two), "b", 80, &k, &err) == KILN_OK, "%s", err.msg);
    kiln_emu_kernel_free(k);
    TEST_END();
}

int main(void) {
    kiln_error err = {0};
    if (kiln_emu_create(&emu, &err) != KILN_OK) {
        printf("cannot create the emulator: %s\n", err.msg);
        printf("emu_mech: 0 passed, 1 failed\n");
        return 1;
    }
    test_sregs();
    test_barrier_reduce();
    test_race();
    test_poison();
    test_shuffles();
    test_vote();
    test_faults();
    test_conversions();
    test_conversion_sweep();
    test_dynamic_smem();
    test_bad_launches();
    test_cp_async_leftover();
    test_bad_modules();
    kiln_emu_destroy(emu);
    return check_summary("emu_mech");
}
