/* tests/emu_strict_test.c - the emulator is as strict as a GPU about memory: misaligned global
 * and shared accesses, shared memory outside the launch's window (too little dynamic shared
 * memory) and null-page global pointers fail with KILN_EEMU naming the kernel, the access and
 * the address, never a host crash and never a silent run.
 *
 * Generated kernels: f16 LayerNorm hidden=4096 sm_80 with x or y offset by 2 or 8 bytes (16-byte
 * vector accesses), f32 LayerNorm with x offset by 4, mean offset by 2; attention head_dim=128
 * sm_80 (the dynamic shared memory its metadata asks for: 128 KiB with the FA2-class tiles) launched with 0
 * and 1,024 bytes. Hand-written IR
 * for shared memory past a static array, a generic pointer into shared memory, a null-page
 * store, and a misaligned atomic. Each failing case has a passing twin (the same launch with
 * correct pointers or sizes). With declared buffer extents (kiln_emu_launch.arg_bytes), global
 * accesses before or past a buffer fault even where the memory is mapped. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kiln/emu.h"
#include "attention.ref.h"

static kiln_emu *emu;
static kiln_gen *gen;

/* ---- LayerNorm with pointers placed at chosen offsets ---- */

typedef struct ln_bufs {
    unsigned char *base[4]; /* y, mean, x, w (bias shares w) */
    void *y, *mean, *rstd, *x, *w, *b;
} ln_bufs;

static void *offset_buffer(unsigned char **base, size_t bytes, size_t off, uint32_t fill) {
    *base = aligned_alloc(64, (bytes + off + 64 + 63) / 64 * 64);
    if (!*base) return NULL;
    for (size_t i = 0; i + 4 <= bytes + off + 64; i += 4) memcpy(*base + i, &fill, 4);
    return *base + off;
}

static void free_bufs(ln_bufs *b) {
    for (int i = 0; i < 4; i++) free(b->base[i]);
    free(b->rstd);
}

/* Declared buffer extents for run_ln (kiln_emu_launch.arg_bytes): off (-1), exact (0), or x's
 * declared this many bytes short of its size. */
static long ln_x_short = -1;

/* Runs spec on sm_80 with rows x hidden and the given byte offsets of x, y and mean. */
static kiln_status run_ln(const char *spec, int hidden, size_t xoff, size_t yoff, size_t moff, kiln_error *err) {
    kiln_emu_kernel *k = NULL;
    kiln_status st = kiln_emu_load(emu, gen, spec, 80, &k, err);
    if (st != KILN_OK) return st;
    const kiln_kernel_meta *m = kiln_emu_kernel_meta(k);
    int rows = 4;
    size_t n = (size_t)rows * (size_t)hidden;
    size_t esz = strstr(spec, "x=f16") ? 2 : 4;
    ln_bufs b = {0};
    /* 0x3c003c00: f16 ones; as f32 a small normal number */
    b.x = offset_buffer(&b.base[2], n * esz, xoff, 0x3c003c00u);
    b.y = offset_buffer(&b.base[0], n * esz, yoff, 0);
    b.mean = offset_buffer(&b.base[1], (size_t)rows * 4, moff, 0);
    b.w = offset_buffer(&b.base[3], (size_t)hidden * esz, 0, 0x3c003c00u);
    b.b = b.w;
    b.rstd = malloc((size_t)rows * 4);
    void *ptrs[KILN_MAX_PARAMS];
    int32_t ints[KILN_MAX_PARAMS];
    float eps = 1e-5f;
    void *args[KILN_MAX_PARAMS];
    size_t bytes[KILN_MAX_PARAMS] = {0};
    for (int i = 0; i < m->nparams; i++) {
        const char *nm = m->params[i].name;
        ptrs[i] = !strcmp(nm, "y") ? b.y : !strcmp(nm, "mean") ? b.mean : !strcmp(nm, "rstd") ? b.rstd
                : !strcmp(nm, "x") ? b.x : !strcmp(nm, "weight") ? b.w : b.b;
        bytes[i] = !strcmp(nm, "y") ? n * esz : !strcmp(nm, "x") ? n * esz - (size_t)(ln_x_short > 0 ? ln_x_short : 0)
                 : !strcmp(nm, "mean") || !strcmp(nm, "rstd") ? (size_t)rows * 4 : (size_t)hidden * esz;
        ints[i] = !strcmp(nm, "rows") ? rows : hidden;
        args[i] = m->params[i].kind == KILN_PARAM_PTR ? (void *)&ptrs[i]
                : m->params[i].kind == KILN_PARAM_F32 ? (void *)&eps : (void *)&ints[i];
    }
    unsigned tile = m->grid_tile[0] ? m->grid_tile[0] : 1;
    kiln_emu_launch l = {.grid = {(rows + tile - 1) / tile, 1, 1}, .block = {m->block[0], m->block[1], m->block[2]},
                         .dynamic_smem = m->dynamic_smem, .arg_bytes = ln_x_short >= 0 ? bytes : NULL};
    st = kiln_emu_run(k, &l, args, err);
    free_bufs(&b);
    kiln_emu_kernel_free(k);
    return st;
}

static void expect_misaligned(const char *name, const char *spec, int hidden, size_t xoff, size_t yoff, size_t moff,
                              const char *arg, const char *kind, unsigned align) {
    TEST_BEGIN(name);
    kiln_error err = {0};
    kiln_status st = run_ln(spec, hidden, xoff, yoff, moff, &err);
    char want_arg[64], want_align[48];
    snprintf(want_arg, sizeof want_arg, "of argument '%s'", arg);
    snprintf(want_align, sizeof want_align, "needs %u-byte alignment", align);
    CHECK(st == KILN_EEMU && strstr(err.msg, "misaligned address") && strstr(err.msg, want_arg) &&
              strstr(err.msg, kind) && strstr(err.msg, want_align) && strstr(err.msg, "@kiln_layernorm_"),
          "status %d: %s", st, err.msg);
    if (getenv("KILN_TEST_VERBOSE")) printf("  %s\n", err.msg);
    TEST_END();
}

static void test_misaligned_layernorm(void) {
    const char *f16 = "layernorm x=f16 hidden=4096", *f32 = "layernorm x=f32 hidden=4096";
    TEST_BEGIN("aligned f16 and f32 LayerNorm hidden=4096 run (the twins of the faults below)");
    kiln_error err = {0};
    CHECK(run_ln(f16, 4096, 0, 0, 0, &err) == KILN_OK, "%s", err.msg);
    CHECK(run_ln(f32, 4096, 0, 0, 0, &err) == KILN_OK, "%s", err.msg);
    TEST_END();
    expect_misaligned("f16 x offset by 2 bytes: misaligned 16-byte global load", f16, 4096, 2, 0, 0, "x",
                      "16-byte global load", 16);
    expect_misaligned("f16 x offset by 8 bytes: misaligned 16-byte global load", f16, 4096, 8, 0, 0, "x",
                      "16-byte global load", 16);
    expect_misaligned("f16 y offset by 2 bytes: misaligned 16-byte global store", f16, 4096, 0, 2, 0, "y",
                      "16-byte global store", 16);
    expect_misaligned("f16 y offset by 8 bytes: misaligned 16-byte global store", f16, 4096, 0, 8, 0, "y",
                      "16-byte global store", 16);
    /* the IR loads floats with align 16, which the backend merges into ld.global.nc.v4.f32 */
    expect_misaligned("f32 x offset by 4 bytes: misaligned (vectorized) global load", f32, 4096, 4, 0, 0, "x",
                      "global load", 16);
    expect_misaligned("f32 mean offset by 2 bytes: misaligned 4-byte global store", f32, 4096, 0, 0, 2, "mean",
                      "4-byte global store", 4);
    TEST_BEGIN("launch-form f32 LayerNorm reads x with scalar loads: an offset of 4 is fine, 2 is not");
    CHECK(run_ln("layernorm x=f32 hidden=launch", 1000, 4, 0, 0, &err) == KILN_OK, "%s", err.msg);
    kiln_status st = run_ln("layernorm x=f32 hidden=launch", 1000, 2, 0, 0, &err);
    CHECK(st == KILN_EEMU && strstr(err.msg, "misaligned") && strstr(err.msg, "4-byte global load"), "%d: %s", st,
          err.msg);
    TEST_END();
}

/* ---- attention with too little dynamic shared memory ---- */

static kiln_status run_attention(unsigned dynamic_smem, int use_meta, unsigned *meta_smem, kiln_error *err) {
    kiln_emu_kernel *k = NULL;
    kiln_status st = kiln_emu_load(emu, gen, "attention dtype=f16 head_dim=128", 80, &k, err);
    if (st != KILN_OK) return st;
    const kiln_kernel_meta *m = kiln_emu_kernel_meta(k);
    *meta_smem = m->dynamic_smem;
    kiln_attn_problem p = {.dtype = KILN_F16, .out = KILN_F16, .head_dim = 128, .batch = 1, .heads_q = 1,
                           .heads_kv = 1, .seq_q = 64, .seq_k = 64};
    kiln_attn_default_strides(&p);
    uint64_t seed = 7;
    void *q = kiln_attn_random(KILN_F16, kiln_attn_elems(&p, 'q'), 1.0, &seed);
    void *kk = kiln_attn_random(KILN_F16, kiln_attn_elems(&p, 'k'), 1.0, &seed);
    void *v = kiln_attn_random(KILN_F16, kiln_attn_elems(&p, 'v'), 1.0, &seed);
    void *o = malloc(kiln_attn_elems(&p, 'o') * 2);
    float *lse = malloc(sizeof(float) * 64);
    if (use_meta) {
        st = kiln_attn_run(k, &p, o, lse, q, kk, v, 0, err);
    } else {
        /* kiln_attn_run passes the metadata's dynamic shared memory; this launch passes less */
        void *ptr[5] = {o, lse, q, kk, v};
        int32_t ints[5] = {1, 1, 1, 64, 64};
        float scale = (float)kiln_attn_scale(&p);
        long long strides[4][3];
        const long long *src[4] = {p.stride_q, p.stride_k, p.stride_v, p.stride_o};
        for (int t = 0; t < 4; t++) memcpy(strides[t], src[t], sizeof strides[t]);
        static const char *pn[5] = {"o", "lse", "q", "k", "v"}, *in[5] = {"batch", "heads_q", "heads_kv", "seq_q", "seq_k"};
        void *args[KILN_MAX_PARAMS];
        for (int i = 0; i < m->nparams; i++) {
            const char *nm = m->params[i].name;
            args[i] = &scale;
            for (int j = 0; j < 5; j++) {
                if (!strcmp(nm, pn[j])) args[i] = &ptr[j];
                if (!strcmp(nm, in[j])) args[i] = &ints[j];
            }
            if (!strncmp(nm, "stride_", 7)) {
                int t = nm[7] == 'q' ? 0 : nm[7] == 'k' ? 1 : nm[7] == 'v' ? 2 : 3;
                int s = nm[8] == 'b' ? 0 : nm[8] == 's' ? 1 : 2;
                args[i] = &strides[t][s];
            }
        }
        kiln_emu_launch l = {.grid = {(64 + m->grid_tile[0] - 1) / m->grid_tile[0], 1, 1},
                             .block = {m->block[0], m->block[1], m->block[2]}, .dynamic_smem = dynamic_smem};
        st = kiln_emu_run(k, &l, args, err);
    }
    free(q), free(kk), free(v), free(o), free(lse);
    kiln_emu_kernel_free(k);
    return st;
}

static void test_attention_smem(void) {
    unsigned need = 0;
    kiln_error err = {0};
    TEST_BEGIN("attention head_dim=128 sm_80 with the dynamic shared memory its metadata asks for runs");
    CHECK(run_attention(0, 1, &need, &err) == KILN_OK && need > 1024, "need %u: %s", need, err.msg);
    TEST_END();
    const unsigned sizes[2] = {0, 1024};
    for (int i = 0; i < 2; i++) {
        char name[128];
        snprintf(name, sizeof name, "attention head_dim=128 launched with %u bytes of dynamic shared memory faults",
                 sizes[i]);
        TEST_BEGIN(name);
        kiln_status st = run_attention(sizes[i], 0, &need, &err);
        char dyn[48];
        snprintf(dyn, sizeof dyn, "%u dynamic as launched", sizes[i]);
        CHECK(st == KILN_EEMU && strstr(err.msg, "out-of-bounds shared memory") && strstr(err.msg, dyn) &&
                  strstr(err.msg, "less than the kernel's metadata asks for") && strstr(err.msg, "@kiln_attention_"),
              "%d: %s", st, err.msg);
        if (getenv("KILN_TEST_VERBOSE")) printf("  %s\n", err.msg);
        TEST_END();
    }
}

/* ---- hand-written IR ---- */

#define HEAD                                                                                        \
    "target datalayout = \"e-i64:64-i128:128-v16:16-v32:32-n16:32:64\"\n"                          \
    "target triple = \"nvptx64-nvidia-cuda\"\n"                                                     \
    "declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()\n"

static kiln_emu_kernel *load_ir(const char *body, kiln_error *err) {
    static char ir[8192];
    snprintf(ir, sizeof ir, "%s%s", HEAD, body);
    kiln_emu_kernel *k = NULL;
    return kiln_emu_load_ir(emu, ir, strlen(ir), NULL, 80, &k, err) == KILN_OK ? k : NULL;
}

/* out[tid] = smem[tid + off] for a 32-float static array (written first by every thread). */
static const char *k_static =
    "@s = internal addrspace(3) global [32 x float] undef, align 4\n"
    "define ptx_kernel void @past_static(ptr addrspace(1) %out, i32 %off) {\n"
    "  %t = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()\n"
    "  %w = getelementptr float, ptr addrspace(3) @s, i32 %t\n"
    "  store float 1.0, ptr addrspace(3) %w, align 4\n"
    "  %i = add i32 %t, %off\n"
    "  %r = getelementptr float, ptr addrspace(3) @s, i32 %i\n"
    "  %v = load float, ptr addrspace(3) %r, align 4\n"
    "  %o = getelementptr float, ptr addrspace(1) %out, i32 %t\n"
    "  store float %v, ptr addrspace(1) %o, align 4\n  ret void\n}\n";

/* The same through a generic pointer (addrspacecast), as clang's CUDA code does it. */
static const char *k_generic =
    "@s = internal addrspace(3) global [32 x float] undef, align 4\n"
    "define ptx_kernel void @generic_shared(ptr %out, i32 %off) {\n"
    "  %t = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()\n"
    "  %g = addrspacecast ptr addrspace(3) @s to ptr\n"
    "  %i = add i32 %t, %off\n"
    "  %r = getelementptr float, ptr %g, i32 %i\n"
    "  store float 2.0, ptr %r, align 4\n"
    "  %o = getelementptr float, ptr %out, i32 %t\n"
    "  store float 0.0, ptr %o, align 4\n  ret void\n}\n";

/* Stores through out + off bytes (an i64 parameter: a null page or a misaligned atomic). */
static const char *k_global =
    "define ptx_kernel void @global_store(ptr addrspace(1) %out, i64 %off) {\n"
    "  %p = getelementptr i8, ptr addrspace(1) %out, i64 %off\n"
    "  %old = atomicrmw add ptr addrspace(1) %p, i32 1 monotonic, align 4\n  ret void\n}\n";

static void test_handwritten(void) {
    kiln_error err = {0};
    float out[32];
    void *po = out;
    TEST_BEGIN("shared memory inside a static array is fine; one element past it faults unless the launch "
               "gives 4 bytes of dynamic shared memory");
    kiln_emu_kernel *k = load_ir(k_static, &err);
    CHECK(k, "%s", err.msg);
    if (k) {
        int32_t off = 0;
        void *args[] = {&po, &off};
        kiln_emu_launch l = {.grid = {1, 1, 1}, .block = {32, 1, 1}};
        CHECK(kiln_emu_run(k, &l, args, &err) == KILN_OK && out[5] == 1.0f, "%s", err.msg);
        off = 1;
        kiln_status st = kiln_emu_run(k, &l, args, &err);
        CHECK(st == KILN_EEMU && strstr(err.msg, "out-of-bounds shared memory access at shared offset 128") &&
                  strstr(err.msg, "4-byte shared load") && strstr(err.msg, "@past_static") &&
                  strstr(err.msg, "thread (31,0,0)") &&
                  strstr(err.msg, "`%v = load float, ptr addrspace(3) %r, align 4`"), /* (the access as its IR prints) */
              "%d: %s", st, err.msg);
        l.dynamic_smem = 4;
        CHECK(kiln_emu_run(k, &l, args, &err) == KILN_OK, "%s", err.msg);
        kiln_emu_kernel_free(k);
    }
    TEST_END();
    TEST_BEGIN("a generic pointer into shared memory is checked as shared");
    k = load_ir(k_generic, &err);
    CHECK(k, "%s", err.msg);
    if (k) {
        int32_t off = 0;
        void *args[] = {&po, &off};
        kiln_emu_launch l = {.grid = {1, 1, 1}, .block = {32, 1, 1}};
        CHECK(kiln_emu_run(k, &l, args, &err) == KILN_OK, "%s", err.msg);
        off = 2;
        kiln_status st = kiln_emu_run(k, &l, args, &err);
        CHECK(st == KILN_EEMU && strstr(err.msg, "out-of-bounds shared memory") &&
                  strstr(err.msg, "generic store") && strstr(err.msg, "@generic_shared"),
              "%d: %s", st, err.msg);
        kiln_emu_kernel_free(k);
    }
    TEST_END();
    TEST_BEGIN("a global atomic in the null page or misaligned faults; an aligned one runs");
    k = load_ir(k_global, &err);
    CHECK(k, "%s", err.msg);
    if (k) {
        int32_t word[2] = {0, 0};
        void *pw = word;
        int64_t off = 4;
        void *args[] = {&pw, &off};
        kiln_emu_launch l = {.grid = {1, 1, 1}, .block = {1, 1, 1}};
        CHECK(kiln_emu_run(k, &l, args, &err) == KILN_OK && word[1] == 1, "%s", err.msg);
        off = 2;
        kiln_status st = kiln_emu_run(k, &l, args, &err);
        CHECK(st == KILN_EEMU && strstr(err.msg, "misaligned address") && strstr(err.msg, "byte 2 of argument 'out'") &&
                  strstr(err.msg, "4-byte global atomic"),
              "%d: %s", st, err.msg);
        void *low = (void *)(uintptr_t)0x100;
        off = 0;
        void *args2[] = {&low, &off};
        st = kiln_emu_run(k, &l, args2, &err);
        CHECK(st == KILN_EEMU && strstr(err.msg, "invalid global address") && strstr(err.msg, "null page"), "%d: %s",
              st, err.msg);
        kiln_emu_kernel_free(k);
    }
    TEST_END();
}

/* ---- global accesses against the buffers a launch declares (kiln_emu_launch.arg_bytes) ---- */

/* out[tid] = table[tid] from a device global of the module: memory that is no launch buffer. */
static const char *k_table =
    "@table = internal addrspace(1) global [32 x float] zeroinitializer, align 4\n"
    "define ptx_kernel void @from_table(ptr addrspace(1) %out) {\n"
    "  %t = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()\n"
    "  %r = getelementptr [32 x float], ptr addrspace(1) @table, i32 0, i32 %t\n"
    "  %v = load float, ptr addrspace(1) %r, align 4\n"
    "  %o = getelementptr float, ptr addrspace(1) %out, i32 %t\n"
    "  store float %v, ptr addrspace(1) %o, align 4\n  ret void\n}\n";

static void test_global_extents(void) {
    kiln_error err = {0};
    TEST_BEGIN("declared extents: a generated LayerNorm runs inside its exact tensors; x declared 16 bytes "
               "short faults at x's last vector, naming x and its size");
    const char *f16 = "layernorm x=f16 hidden=4096";
    ln_x_short = 0;
    CHECK(run_ln(f16, 4096, 0, 0, 0, &err) == KILN_OK, "%s", err.msg);
    CHECK(run_ln("layernorm x=f32 hidden=launch", 1000, 0, 0, 0, &err) == KILN_OK, "%s", err.msg);
    ln_x_short = 16;
    kiln_status st = run_ln(f16, 4096, 0, 0, 0, &err);
    CHECK(st == KILN_EEMU && strstr(err.msg, "out-of-bounds global access") &&
              strstr(err.msg, "byte 32752 of argument 'x', which has 32752 bytes") && strstr(err.msg, "16-byte global load"),
          "%d: %s", st, err.msg);
    if (getenv("KILN_TEST_VERBOSE")) printf("  %s\n", err.msg);
    ln_x_short = -1;
    CHECK(run_ln(f16, 4096, 0, 0, 0, &err) == KILN_OK, "without extents only the null page is checked: %s", err.msg);
    TEST_END();

    TEST_BEGIN("declared extents: an access before a buffer or past its end faults even inside mapped memory; "
               "an extent missing for a pointer is a bad launch");
    kiln_emu_kernel *k = load_ir(k_global, &err);
    CHECK(k, "%s", err.msg);
    if (k) {
        int32_t words[8] = {0};
        void *pw = words + 2; /* 16 bytes declared, with mapped memory on both sides */
        int64_t off = 12;
        void *args[] = {&pw, &off};
        size_t bytes[2] = {16, 0};
        kiln_emu_launch l = {.grid = {1, 1, 1}, .block = {1, 1, 1}, .arg_bytes = bytes};
        CHECK(kiln_emu_run(k, &l, args, &err) == KILN_OK && words[5] == 1, "%s", err.msg);
        off = 16;
        st = kiln_emu_run(k, &l, args, &err);
        CHECK(st == KILN_EEMU && strstr(err.msg, "byte 16 of argument 'out', which has 16 bytes") &&
                  strstr(err.msg, "4-byte global atomic") && strstr(err.msg, "@global_store"),
              "%d: %s", st, err.msg);
        off = -4;
        st = kiln_emu_run(k, &l, args, &err);
        CHECK(st == KILN_EEMU && strstr(err.msg, "4 bytes before argument 'out' (16 bytes)"), "%d: %s", st, err.msg);
        if (getenv("KILN_TEST_VERBOSE")) printf("  %s\n", err.msg);
        l.arg_bytes = NULL;
        CHECK(kiln_emu_run(k, &l, args, &err) == KILN_OK && words[1] == 1, "no extents: %s", err.msg);
        bytes[0] = 0;
        l.arg_bytes = bytes;
        st = kiln_emu_run(k, &l, args, &err);
        CHECK(st == KILN_EINVAL && strstr(err.msg, "no size for pointer argument 0 ('out')"), "%d: %s", st, err.msg);
        kiln_emu_kernel_free(k);
    }
    TEST_END();

    TEST_BEGIN("declared extents: the module's own device globals are not launch buffers; the store past "
               "a 31-float out still faults");
    k = load_ir(k_table, &err);
    CHECK(k, "%s", err.msg);
    if (k) {
        float out[32];
        void *po = out;
        void *args[] = {&po};
        size_t bytes[1] = {sizeof out};
        kiln_emu_launch l = {.grid = {1, 1, 1}, .block = {32, 1, 1}, .arg_bytes = bytes};
        CHECK(kiln_emu_run(k, &l, args, &err) == KILN_OK && out[31] == 0.0f, "%s", err.msg);
        bytes[0] = 31 * sizeof(float);
        st = kiln_emu_run(k, &l, args, &err);
        CHECK(st == KILN_EEMU && strstr(err.msg, "byte 124 of argument 'out', which has 124 bytes"), "%d: %s", st,
              err.msg);
        kiln_emu_kernel_free(k);
    }
    TEST_END();
}

int main(void) {
    kiln_error err = {0};
    if (kiln_gen_create(&gen, NULL, &err) != KILN_OK || kiln_emu_create(&emu, &err) != KILN_OK) {
        printf("setup: %s\n", err.msg);
        return 1;
    }
    test_misaligned_layernorm();
    test_attention_smem();
    test_handwritten();
    test_global_extents();
    kiln_emu_destroy(emu);
    kiln_gen_destroy(gen);
    return check_summary("emu_strict");
}
