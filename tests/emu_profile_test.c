/* tests/emu_profile_test.c - the emulator's profile on hand-written kernels with planted bank conflicts and known instruction counts. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "kiln/emu.h"
#include "attention.ref.h"
#include "kiln/emu_case.h"
#include "kiln/emu_profile.h"
#include "kiln/kiln.h"

#define HEAD                                                                                        \
    "target datalayout = \"e-i64:64-i128:128-v16:16-v32:32-n16:32:64\"\n"                          \
    "target triple = \"nvptx64-nvidia-cuda\"\n"                                                     \
    "declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()\n"                                                \
    "declare i32 @llvm.nvvm.read.ptx.sreg.laneid()\n"                                               \
    "declare void @llvm.nvvm.barrier0()\n"                                                          \
    "declare i32 @llvm.nvvm.shfl.sync.bfly.i32(i32, i32, i32, i32)\n"                               \
    "declare { i32, i32, i32, i32 } @llvm.nvvm.ldmatrix.sync.aligned.m8n8.x4.b16.p3(ptr addrspace(3))\n" \
    "declare { i32, i32 } @llvm.nvvm.ldmatrix.sync.aligned.m8n8.x2.b16.p3(ptr addrspace(3))\n"       \
    "declare void @llvm.nvvm.cp.async.cg.shared.global.16(ptr addrspace(3), ptr addrspace(1))\n"     \
    "declare void @llvm.nvvm.cp.async.commit.group()\n"                                              \
    "declare void @llvm.nvvm.cp.async.wait.group(i32)\n"                                             \
    "@s = internal addrspace(3) global [8192 x i32] undef, align 128\n"

static kiln_emu *emu;

static kiln_emu_kernel *load(const char *body) {
    static char ir[16384];
    snprintf(ir, sizeof ir, "%s%s", HEAD, body);
    kiln_error err = {0};
    kiln_emu_kernel *k = NULL;
    if (kiln_emu_load_ir(emu, ir, strlen(ir), NULL, 80, &k, &err) != KILN_OK) {
        printf("  load failed: %s\n", err.msg);
        return NULL;
    }
    return k;
}

static int run(kiln_emu_kernel *k, unsigned threads, void **args, kiln_emu_profile *p) {
    kiln_error err = {0};
    kiln_emu_launch l = {.grid = {1, 1, 1}, .block = {threads, 1, 1}};
    kiln_emu_profile_reset(k);
    if (kiln_emu_run(k, &l, args, &err) != KILN_OK || kiln_emu_profile_get(k, p, &err) != KILN_OK) {
        printf("  run failed: %s\n", err.msg);
        return -1;
    }
    return 0;
}

/* st.shared then ld.shared of 4-byte words at word tid * stride: the words of a warp fall gcd(stride, 32)
 * to a bank, so each request takes gcd(stride, 32) wavefronts (stride 0: one word, a broadcast). */
static const char *k_words =
    "define ptx_kernel void @words(ptr addrspace(1) %out, i32 %stride) {\n"
    "  %tid = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()\n"
    "  %i = mul i32 %tid, %stride\n"
    "  %p = getelementptr i32, ptr addrspace(3) @s, i32 %i\n"
    "  store i32 %tid, ptr addrspace(3) %p\n"
    "  call void @llvm.nvvm.barrier0()\n"
    "  %v = load i32, ptr addrspace(3) %p\n"
    "  %o = getelementptr i32, ptr addrspace(1) %out, i32 %tid\n"
    "  store i32 %v, ptr addrspace(1) %o\n"
    "  ret void\n}\n";

static unsigned gcd32(unsigned s) {
    unsigned a = s % 32, b = 32;
    if (!a) return s ? 32 : 1; /* stride 0: every lane the same word */
    while (a) {
        unsigned t = b % a;
        b = a, a = t;
    }
    return b;
}

static void test_words(void) {
    TEST_BEGIN("ld/st.shared 4 B: strides 0..33 give gcd(stride, 32) wavefronts a request");
    kiln_emu_kernel *k = load(k_words);
    CHECK(k, "load");
    static int32_t out[96];
    for (unsigned stride = 0; k && stride <= 33; stride++) {
        void *o = out;
        void *args[] = {&o, &stride};
        kiln_emu_profile p;
        if (run(k, 96, args, &p)) {
            CHECK(0, "stride %u", stride);
            break;
        }
        uint64_t want = 3 * (uint64_t)(gcd32(stride) - 1); /* 3 warps */
        CHECK(p.smem[KILN_SMEM_ST].requests == 3 && p.smem[KILN_SMEM_LD].requests == 3, "stride %u: requests %llu %llu",
              stride, (unsigned long long)p.smem[KILN_SMEM_ST].requests, (unsigned long long)p.smem[KILN_SMEM_LD].requests);
        CHECK(p.smem[KILN_SMEM_ST].conflicts == want && p.smem[KILN_SMEM_LD].conflicts == want,
              "stride %u: conflicts st %llu ld %llu, want %llu", stride, (unsigned long long)p.smem[KILN_SMEM_ST].conflicts,
              (unsigned long long)p.smem[KILN_SMEM_LD].conflicts, (unsigned long long)want);
        CHECK(p.smem[KILN_SMEM_LD].ideal == 3, "stride %u: ideal %llu", stride, (unsigned long long)p.smem[KILN_SMEM_LD].ideal);
        CHECK(!stride || out[5] == 5, "stride %u: the kernel still computes (out[5] = %d)", stride, out[5]);
        CHECK(p.global_st_bytes == 96 * 4 && p.global_ld_bytes == 0, "stride %u: global bytes %llu %llu", stride,
              (unsigned long long)p.global_st_bytes, (unsigned long long)p.global_ld_bytes);
    }
    kiln_emu_kernel_free(k);
    TEST_END();
}

/* A partial warp: 40 threads, stride 32: warp 0 is 32-way, warp 1 (8 lanes) 8-way. */
static void test_partial_warp(void) {
    TEST_BEGIN("ld.shared in a partial warp counts only its lanes");
    kiln_emu_kernel *k = load(k_words);
    static int32_t out[40];
    unsigned stride = 32;
    void *o = out, *args[] = {&o, &stride};
    kiln_emu_profile p;
    CHECK(k && !run(k, 40, args, &p), "run");
    if (k) {
        CHECK(p.smem[KILN_SMEM_LD].wavefronts == 32 + 8, "wavefronts %llu", (unsigned long long)p.smem[KILN_SMEM_LD].wavefronts);
        CHECK(p.smem[KILN_SMEM_LD].conflicts == 31 + 7, "conflicts %llu", (unsigned long long)p.smem[KILN_SMEM_LD].conflicts);
    }
    kiln_emu_kernel_free(k);
    TEST_END();
}

/* Vector loads of 8 and 16 bytes at byte offset tid * stride: served in phases of 16 and 8 lanes. */
static const char *k_vec =
    "define ptx_kernel void @vec(ptr addrspace(1) %out, i32 %stride) {\n"
    "  %tid = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()\n"
    "  %i = mul i32 %tid, %stride\n"
    "  %p = getelementptr i8, ptr addrspace(3) @s, i32 %i\n"
    "  store <4 x i32> zeroinitializer, ptr addrspace(3) %p, align 16\n"
    "  %v = load <2 x i32>, ptr addrspace(3) %p, align 8\n"
    "  %e = extractelement <2 x i32> %v, i32 0\n"
    "  %o = getelementptr i32, ptr addrspace(1) %out, i32 %tid\n"
    "  store i32 %e, ptr addrspace(1) %o\n"
    "  ret void\n}\n";

static void test_vectors(void) {
    TEST_BEGIN("16-byte stores (4 phases) and 8-byte loads (2 phases) with planted conflicts");
    kiln_emu_kernel *k = load(k_vec);
    static int32_t out[32];
    /* stride (bytes) -> wavefronts of the 16-byte store, of the 8-byte load */
    static const struct { unsigned stride, st_waves, ld_waves; } cases[] = {
        {16, 4, 4},    /* 16 B dense: none; 8 B every 16 B: lanes l and l + 8 share banks, 2-way */
        {32, 8, 8},    /* 2-way for the 16 B store (lanes l, l + 4), 4-way for the 8 B load */
        {64, 16, 16},  /* 4-way, 8-way */
        {128, 32, 32}, /* every lane on banks 0-3: 8-way for 8-lane phases, 16-way for 16-lane phases */
        {0, 4, 2},     /* one address: a broadcast */
    };
    for (size_t c = 0; k && c < sizeof cases / sizeof cases[0]; c++) {
        unsigned stride = cases[c].stride;
        void *o = out, *args[] = {&o, &stride};
        kiln_emu_profile p;
        if (run(k, 32, args, &p)) {
            CHECK(0, "stride %u", stride);
            break;
        }
        CHECK(p.smem[KILN_SMEM_ST].wavefronts == cases[c].st_waves && p.smem[KILN_SMEM_ST].ideal == 4,
              "stride %u: 16 B store %llu wavefronts (ideal %llu), want %u", stride,
              (unsigned long long)p.smem[KILN_SMEM_ST].wavefronts, (unsigned long long)p.smem[KILN_SMEM_ST].ideal,
              cases[c].st_waves);
        CHECK(p.smem[KILN_SMEM_LD].wavefronts == cases[c].ld_waves && p.smem[KILN_SMEM_LD].ideal == 2,
              "stride %u: 8 B load %llu wavefronts, want %u", stride, (unsigned long long)p.smem[KILN_SMEM_LD].wavefronts,
              cases[c].ld_waves);
    }
    kiln_emu_kernel_free(k);
    TEST_END();
}

/* ldmatrix.x4 and .x2 with lane L giving row L at byte offset (L * rowbytes) ^ (swizzle ? (L & 7) * 16 : 0). */
static const char *k_ldm =
    "define ptx_kernel void @ldm(ptr addrspace(1) %out, i32 %rowbytes, i32 %swz) {\n"
    "  %lane = call i32 @llvm.nvvm.read.ptx.sreg.laneid()\n"
    "  %r = mul i32 %lane, %rowbytes\n"
    "  %l7 = and i32 %lane, 7\n"
    "  %x = mul i32 %l7, 16\n"
    "  %xs = mul i32 %x, %swz\n"
    "  %off = xor i32 %r, %xs\n"
    "  %p = getelementptr i8, ptr addrspace(3) @s, i32 %off\n"
    "  %m = call { i32, i32, i32, i32 } @llvm.nvvm.ldmatrix.sync.aligned.m8n8.x4.b16.p3(ptr addrspace(3) %p)\n"
    "  %m2 = call { i32, i32 } @llvm.nvvm.ldmatrix.sync.aligned.m8n8.x2.b16.p3(ptr addrspace(3) %p)\n"
    "  %a = extractvalue { i32, i32, i32, i32 } %m, 0\n"
    "  %b = extractvalue { i32, i32 } %m2, 1\n"
    "  %c = add i32 %a, %b\n"
    "  %o = getelementptr i32, ptr addrspace(1) %out, i32 %lane\n"
    "  store i32 %c, ptr addrspace(1) %o\n"
    "  ret void\n}\n";

static void test_ldmatrix(void) {
    TEST_BEGIN("ldmatrix x4/x2: one phase per matrix; 128-byte rows conflict 8-way unless swizzled");
    kiln_emu_kernel *k = load(k_ldm);
    static int32_t out[32];
    static const struct { unsigned rowbytes, swz, waves; } cases[] = {
        {16, 0, 4 + 2},       /* contiguous rows */
        {128, 0, 32 + 16},    /* rows of a 64-wide f16 tile: 8 rows on the same 4 banks */
        {128, 1, 4 + 2},      /* XOR-swizzled by 16-byte chunk */
        {64, 0, 16 + 8},      /* 2-way */
        {144, 0, 4 + 2},      /* padded rows (+16 bytes) */
    };
    for (size_t c = 0; k && c < sizeof cases / sizeof cases[0]; c++) {
        unsigned rb = cases[c].rowbytes, swz = cases[c].swz;
        void *o = out, *args[] = {&o, &rb, &swz};
        kiln_emu_profile p;
        if (run(k, 32, args, &p)) {
            CHECK(0, "rowbytes %u", rb);
            break;
        }
        const kiln_smem_cost *m = &p.smem[KILN_SMEM_LDMATRIX];
        CHECK(m->requests == 2 && m->ideal == 6 && m->wavefronts == cases[c].waves,
              "rowbytes %u swizzle %u: %llu requests, %llu wavefronts (ideal %llu), want %u", rb, swz,
              (unsigned long long)m->requests, (unsigned long long)m->wavefronts, (unsigned long long)m->ideal,
              cases[c].waves);
        CHECK(p.inst[KILN_PROF_LDMATRIX] == 2, "ldmatrix instructions %llu", (unsigned long long)p.inst[KILN_PROF_LDMATRIX]);
    }
    kiln_emu_kernel_free(k);
    TEST_END();
}

/* cp.async 16 B to shared byte offset tid * stride, from global in[tid]. */
static const char *k_cp =
    "define ptx_kernel void @cp(ptr addrspace(1) %out, ptr addrspace(1) %in, i32 %stride) {\n"
    "  %tid = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()\n"
    "  %off = mul i32 %tid, %stride\n"
    "  %p = getelementptr i8, ptr addrspace(3) @s, i32 %off\n"
    "  %g = getelementptr <4 x i32>, ptr addrspace(1) %in, i32 %tid\n"
    "  call void @llvm.nvvm.cp.async.cg.shared.global.16(ptr addrspace(3) %p, ptr addrspace(1) %g)\n"
    "  call void @llvm.nvvm.cp.async.commit.group()\n"
    "  call void @llvm.nvvm.cp.async.wait.group(i32 0)\n"
    "  %v = load i32, ptr addrspace(3) %p\n"
    "  %o = getelementptr i32, ptr addrspace(1) %out, i32 %tid\n"
    "  store i32 %v, ptr addrspace(1) %o\n"
    "  ret void\n}\n";

static void test_cp_async(void) {
    TEST_BEGIN("cp.async 16 B: 4 phases of 8 lanes; global bytes counted");
    kiln_emu_kernel *k = load(k_cp);
    static int32_t out[64], in[64 * 4];
    for (int i = 0; i < 64 * 4; i++) in[i] = i;
    static const struct { unsigned stride, waves; } cases[] = {{16, 8}, {128, 64}, {32, 16}};
    for (size_t c = 0; k && c < sizeof cases / sizeof cases[0]; c++) {
        unsigned stride = cases[c].stride;
        void *o = out, *ip = in, *args[] = {&o, &ip, &stride};
        kiln_emu_profile p;
        if (run(k, 64, args, &p)) {
            CHECK(0, "stride %u", stride);
            break;
        }
        const kiln_smem_cost *m = &p.smem[KILN_SMEM_CP_ASYNC];
        CHECK(m->requests == 2 && m->wavefronts == cases[c].waves && m->conflicts == cases[c].waves - 8,
              "stride %u: %llu requests, %llu wavefronts, %llu conflicts", stride, (unsigned long long)m->requests,
              (unsigned long long)m->wavefronts, (unsigned long long)m->conflicts);
        CHECK(p.global_ld_bytes == 64 * 16 && p.global_st_bytes == 64 * 4, "global %llu %llu",
              (unsigned long long)p.global_ld_bytes, (unsigned long long)p.global_st_bytes);
        CHECK(out[3] == 12, "out[3] = %d", out[3]);
        CHECK(p.inst[KILN_PROF_CP_ASYNC] == 2, "cp.async instructions %llu", (unsigned long long)p.inst[KILN_PROF_CP_ASYNC]);
    }
    kiln_emu_kernel_free(k);
    TEST_END();
}

/* A uniform loop of n trips (shfl, 2 adds, compare, branch), a divergent loop of lane + 1 trips (add,
 * compare, branch), and a branch half the lanes take (a shfl among them). */
static const char *k_mix =
    "define ptx_kernel void @mix(ptr addrspace(1) %out, i32 %n) {\n"
    "entry:\n"
    "  %lane = call i32 @llvm.nvvm.read.ptx.sreg.laneid()\n"
    "  br label %loop\n"
    "loop:\n"
    "  %i = phi i32 [0, %entry], [%i1, %loop]\n"
    "  %x = phi i32 [0, %entry], [%x1, %loop]\n"
    "  %s = call i32 @llvm.nvvm.shfl.sync.bfly.i32(i32 -1, i32 %lane, i32 1, i32 31)\n"
    "  %x1 = add i32 %x, %s\n"
    "  %i1 = add i32 %i, 1\n"
    "  %c = icmp slt i32 %i1, %n\n"
    "  br i1 %c, label %loop, label %div\n"
    "div:\n"
    "  %j = phi i32 [0, %loop], [%j1, %div]\n"
    "  %j1 = add i32 %j, 1\n"
    "  %d = icmp ule i32 %j1, %lane\n"
    "  br i1 %d, label %div, label %tail\n"
    "tail:\n"
    "  %lo = icmp ult i32 %lane, 16\n"
    "  br i1 %lo, label %half, label %done\n"
    "half:\n"
    "  %h = call i32 @llvm.nvvm.shfl.sync.bfly.i32(i32 65535, i32 %x1, i32 1, i32 31)\n"
    "  br label %done\n"
    "done:\n"
    "  %r = phi i32 [%h, %half], [%x1, %tail]\n"
    "  %y = add i32 %r, %j1\n"
    "  %o = getelementptr i32, ptr addrspace(1) %out, i32 %lane\n"
    "  store i32 %y, ptr addrspace(1) %o\n"
    "  ret void\n}\n";

static void test_mix(void) {
    TEST_BEGIN("instruction mix: warp-level counts of uniform, divergent and half-taken code");
    kiln_emu_kernel *k = load(k_mix);
    static int32_t out[32];
    int n = 10;
    void *o = out, *args[] = {&o, &n};
    kiln_emu_profile p;
    CHECK(k && !run(k, 32, args, &p), "run");
    if (k) {
        CHECK(p.warps == 1 && p.blocks == 1, "warps %llu", (unsigned long long)p.warps);
        CHECK(p.inst[KILN_PROF_SHFL] == (uint64_t)n + 1, "shfl %llu, want %d", (unsigned long long)p.inst[KILN_PROF_SHFL], n + 1);
        /* entry: sreg read = 1 other; loop: 2 add + icmp + br = 4 per trip; div: add + icmp + br = 3 for 32
         * trips (the slowest lane's); tail: icmp + br; done: add + gep */
        uint64_t other = 1 + 4 * (uint64_t)n + 3 * 32 + 2 + 2;
        CHECK(p.inst[KILN_PROF_OTHER] == other, "other %llu, want %llu", (unsigned long long)p.inst[KILN_PROF_OTHER],
              (unsigned long long)other);
        CHECK(p.inst[KILN_PROF_ST_GLOBAL] == 1 && p.global_st_bytes == 32 * 4, "st.global %llu, %llu bytes",
              (unsigned long long)p.inst[KILN_PROF_ST_GLOBAL], (unsigned long long)p.global_st_bytes);
        /* the hottest block is the divergent loop (32 trips); the uniform one (10) is under half of it */
        CHECK(p.hot_trips == 32 && p.hot_blocks == 1 && p.hot_inst[KILN_PROF_OTHER] == 96,
              "hot: %llu trips, %u blocks, %llu other", (unsigned long long)p.hot_trips, p.hot_blocks,
              (unsigned long long)p.hot_inst[KILN_PROF_OTHER]);
        CHECK(out[31] == 31 * 0 + 32 + 30 * 10, "out[31] = %d", out[31]);
        /* the same counts block by block: entry, loop (10 runs), div (32), tail, half (one run: half the lanes), done */
        static const uint64_t runs[6] = {1, 10, 32, 1, 1, 1};
        uint64_t sum[KILN_PROF_CLASSES] = {0};
        kiln_prof_block bk;
        unsigned nb = 0;
        for (; kiln_emu_profile_block(k, nb, &bk) == 0; nb++) {
            CHECK(nb >= 6 || bk.warp_runs == runs[nb], "block %u: %llu runs, want %llu", nb, (unsigned long long)bk.warp_runs,
                  (unsigned long long)runs[nb < 6 ? nb : 0]);
            CHECK(bk.hot == (nb == 2), "block %u: hot %d", nb, bk.hot);
            for (int c = 0; c < KILN_PROF_CLASSES; c++) sum[c] += bk.warp_runs * bk.inst[c];
        }
        CHECK(nb == p.basic_blocks && nb == 6, "%u blocks, profile says %u", nb, p.basic_blocks);
        for (int c = 0; c < KILN_PROF_CLASSES; c++)
            CHECK(sum[c] == p.inst[c], "%s: blocks sum to %llu, profile %llu", kiln_prof_class_name((kiln_prof_class)c),
                  (unsigned long long)sum[c], (unsigned long long)p.inst[c]);
    }
    kiln_emu_kernel_free(k);
    TEST_END();
}

static void test_unprofiled(void) {
    TEST_BEGIN("a kernel loaded without profiling says so");
    kiln_emu_set_profile(emu, 0);
    kiln_emu_kernel *k = load(k_words);
    kiln_emu_profile p;
    kiln_error err = {0};
    CHECK(k && kiln_emu_profile_get(k, &p, &err) == KILN_EINVAL && strstr(err.msg, "without profiling"), "%s", err.msg);
    CHECK(k && kiln_emu_profile_nsites(k) == 0, "sites");
    kiln_emu_kernel_free(k);
    kiln_emu_set_profile(emu, 1);
    TEST_END();
}

static uint64_t total_conflicts(const kiln_emu_profile *p) {
    uint64_t n = 0;
    for (int s = 0; s < KILN_SMEM_KINDS; s++) n += p->smem[s].conflicts;
    return n;
}

/* Names the first site with conflicts (for the failure message). */
static void first_conflict(const kiln_emu_kernel *k, char *buf, size_t size) {
    snprintf(buf, size, "none");
    for (unsigned i = 0; i < kiln_emu_profile_nsites(k); i++) {
        kiln_smem_site site;
        if (!kiln_emu_profile_site(k, i, &site) && site.cost.conflicts) {
            snprintf(buf, size, "%s: %llu wavefronts for %llu", site.where, (unsigned long long)site.cost.wavefronts,
                     (unsigned long long)site.cost.ideal);
            return;
        }
    }
}

/* Every attention path (and LayerNorm) runs without a bank conflict: the design rule the profile
 * guards. A causal problem whose lengths are not tile multiples runs the unmasked and masked loops. */
static void test_kernels_conflict_free(kiln_gen *gen) {
    static const struct { const char *spec; int sm; } attn[] = {
        {"attention dtype=bf16 head_dim=32 causal=true", 80},  {"attention dtype=bf16 head_dim=64 causal=true", 80},
        {"attention dtype=f16 head_dim=96 causal=true", 90},   {"attention dtype=bf16 head_dim=128 causal=true", 86},
        {"attention dtype=f16 head_dim=256 causal=false", 80}, {"attention dtype=f16 head_dim=64 causal=true", 75},
        {"attention dtype=f16 head_dim=96 causal=true", 75},   {"attention dtype=f16 head_dim=128 causal=false", 75},
        {"attention dtype=f32 head_dim=64 causal=true", 80},   {"attention dtype=bf16 head_dim=128 causal=true", 75},
        {"attention dtype=bf16 head_dim=32 causal=true path=simt", 80},
    };
    for (size_t i = 0; i < sizeof attn / sizeof attn[0]; i++) {
        char name[200];
        snprintf(name, sizeof name, "0 bank conflicts: %s (sm_%d)", attn[i].spec, attn[i].sm);
        TEST_BEGIN(name);
        kiln_error err = {0};
        kiln_emu_kernel *k = NULL;
        kiln_attn_problem p = {0};
        kiln_status st = kiln_emu_load(emu, gen, attn[i].spec, attn[i].sm, &k, &err);
        if (st == KILN_OK) st = kiln_attn_spec_parse(attn[i].spec, &p, &err);
        p.batch = 1, p.heads_q = 1, p.heads_kv = 1, p.seq_q = 140, p.seq_k = 200;
        kiln_attn_default_strides(&p);
        uint64_t seed = 7;
        void *q = kiln_attn_random(p.dtype, kiln_attn_elems(&p, 'q'), 1, &seed);
        void *kk = kiln_attn_random(p.dtype, kiln_attn_elems(&p, 'k'), 1, &seed);
        void *v = kiln_attn_random(p.dtype, kiln_attn_elems(&p, 'v'), 1, &seed);
        void *o = malloc(kiln_attn_elems(&p, 'o') * kiln_dtype_size(p.out));
        float *lse = malloc((size_t)p.seq_q * sizeof *lse);
        if (st == KILN_OK) st = kiln_attn_run(k, &p, o, lse, q, kk, v, 0, &err);
        kiln_emu_profile pr;
        if (st == KILN_OK) st = kiln_emu_profile_get(k, &pr, &err);
        CHECK(st == KILN_OK, "%s", err.msg);
        if (st == KILN_OK) {
            char why[200];
            first_conflict(k, why, sizeof why);
            CHECK(total_conflicts(&pr) == 0, "%llu conflicts; first at %s", (unsigned long long)total_conflicts(&pr), why);
            uint64_t req = 0;
            for (int s = 0; s < KILN_SMEM_KINDS; s++) req += pr.smem[s].requests;
            CHECK(req > 0 && pr.hot_blocks > 0, "no shared-memory requests seen (%llu) or no hot loop", (unsigned long long)req);
        }
        free(q), free(kk), free(v), free(o), free(lse);
        kiln_emu_kernel_free(k);
        TEST_END();
    }
    static const char *ln[] = {"layernorm x=bf16 w=f32 y=bf16 hidden=4096", "layernorm x=f16 hidden=1024",
                               "layernorm x=f32 hidden=8192", "layernorm x=bf16 hidden=launch"};
    for (size_t i = 0; i < sizeof ln / sizeof ln[0]; i++) {
        char name[200];
        snprintf(name, sizeof name, "0 bank conflicts: %s (sm_80)", ln[i]);
        TEST_BEGIN(name);
        kiln_error err = {0};
        kiln_case *cs = NULL;
        kiln_case_opts o = {.sm = 80, .seed = 1, .input = KILN_LN_RANDOM};
        kiln_case_opts_set(&o, "rows", 8);
        if (strstr(ln[i], "hidden=launch")) kiln_case_opts_set(&o, "hidden", 3000); /* else the spec's own */
        kiln_status st = kiln_case_create(&cs, gen, emu, ln[i], &o, &err);
        if (st == KILN_OK) st = kiln_case_run(cs, &err);
        kiln_emu_kernel *k = st == KILN_OK ? kiln_case_kernel(cs) : NULL;
        kiln_emu_profile pr;
        if (st == KILN_OK) st = kiln_emu_profile_get(k, &pr, &err);
        CHECK(st == KILN_OK, "%s", err.msg);
        if (st == KILN_OK) {
            char why[200];
            first_conflict(k, why, sizeof why);
            CHECK(total_conflicts(&pr) == 0, "%llu conflicts; first at %s", (unsigned long long)total_conflicts(&pr), why);
            CHECK(pr.global_ld_bytes > 0 && pr.global_st_bytes > 0, "global bytes %llu %llu",
                  (unsigned long long)pr.global_ld_bytes, (unsigned long long)pr.global_st_bytes);
        }
        kiln_case_free(cs);
        TEST_END();
    }
}

int main(void) {
    kiln_error err = {0};
    if (kiln_emu_create(&emu, &err) != KILN_OK) {
        printf("emu_profile: cannot create the emulator: %s\n", err.msg);
        return 1;
    }
    kiln_emu_set_profile(emu, 1);
    test_words();
    test_partial_warp();
    test_vectors();
    test_ldmatrix();
    test_cp_async();
    test_mix();
    test_unprofiled();
    kiln_gen *gen = NULL;
    if (kiln_gen_create(&gen, NULL, &err) != KILN_OK) {
        printf("emu_profile: cannot create the generator: %s\n", err.msg);
        kiln_emu_destroy(emu);
        return 1;
    }
    test_kernels_conflict_free(gen);
    kiln_gen_destroy(gen);
    kiln_emu_destroy(emu);
    return check_summary("emu_profile");
}
