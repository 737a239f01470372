/* tests/attention_runtime_test.c - the attention launch helpers against the fake CUDA driver:
 * spec per dtype and SM, grid, arguments in the kernel's order, default strides and scale, errors;
 * split-KV decoding: split choice, workspace size, the two launches, errors. */
#include <dlfcn.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "fake_cuda/fake_cuda.h"
#include "kiln/gen.h"
#include "kiln/runtime.h"
#include "rt_fixture.h"

static fake_cuda_api fake;
static fake_cuda_launch_at_fn launch_at;

/* Index of parameter name in the launched kernel's metadata, or -1. */
static int param_index(const kiln_kernel_meta *m, const char *name) {
    for (int i = 0; i < m->nparams; i++)
        if (!strcmp(m->params[i].name, name)) return i;
    return -1;
}

static uint64_t param(const fake_cuda_launch *l, const kiln_kernel_meta *m, const char *name) {
    int i = param_index(m, name);
    return i < 0 ? ~0ull : l->param[i];
}

static kiln_attention_args gqa_args(void) {
    kiln_attention_args a = {.o = 0x100000, .lse = 0x200000, .q = 0x300000, .k = 0x400000, .v = 0x500000,
                             .dtype = KILN_BF16, .out_dtype = KILN_BF16, .head_dim = 128, .causal = 1,
                             .batch = 3, .heads_q = 8, .heads_kv = 2, .seq_q = 1000, .seq_k = 1500};
    return a;
}

static void test_launch(int sm) {
    char name[64];
    snprintf(name, sizeof name, "attention helper on sm_%d: grid, arguments", sm);
    TEST_BEGIN(name);
    kiln_rt *rt = open_rt(sm);
    kiln_error e;
    kiln_attention_args a = gqa_args();
    kiln_kernel *k = NULL;
    fake_cuda_launch l;
    CHECK(rt && kiln_attention_forward(rt, &a, &e) == KILN_OK, "launch: %s", e.msg);
    CHECK(kiln_attention_pick(rt, &a, &k, &e) == KILN_OK, "pick: %s", e.msg);
    const kiln_kernel_meta *m = k ? kiln_kernel_get_meta(k) : NULL;
    CHECK(m && strstr(m->spec, "dtype=bf16") && strstr(m->spec, "head_dim=128") && strstr(m->spec, "causal=true"),
          "spec %s", m ? m->spec : "-");
    if (m && fake.last_launch(&l)) {
        CHECK(!strcmp(l.entry, m->entry), "launched %s", l.entry);
        CHECK(l.grid[0] == (1000 + m->grid_tile[0] - 1) / m->grid_tile[0] && l.grid[1] == 8 && l.grid[2] == 3,
              "grid %u %u %u", l.grid[0], l.grid[1], l.grid[2]);
        CHECK(l.block[0] == m->block[0], "block %u", l.block[0]);
        CHECK(l.smem == m->dynamic_smem, "dynamic shared memory %u, meta says %u", l.smem, m->dynamic_smem);
        if (m->dynamic_smem > 48 * 1024) {
            fake_cuda_counts c;
            fake.counters(&c);
            CHECK(c.set_attributes > 0, "opt-in attribute set for %u bytes", m->dynamic_smem);
        }
        CHECK(param(&l, m, "o") == a.o && param(&l, m, "lse") == a.lse && param(&l, m, "q") == a.q &&
                  param(&l, m, "k") == a.k && param(&l, m, "v") == a.v, "pointers");
        CHECK(param(&l, m, "heads_q") == 8 && param(&l, m, "heads_kv") == 2 && param(&l, m, "seq_q") == 1000 &&
                  param(&l, m, "seq_k") == 1500 && param(&l, m, "batch") == 3, "sizes");
        /* default strides: [batch, seq, heads, head_dim] */
        CHECK(param(&l, m, "stride_qh") == 128 && param(&l, m, "stride_qs") == 8 * 128 &&
                  param(&l, m, "stride_qb") == 1000ull * 8 * 128, "q strides");
        CHECK(param(&l, m, "stride_kh") == 128 && param(&l, m, "stride_ks") == 2 * 128 &&
                  param(&l, m, "stride_kb") == 1500ull * 2 * 128, "k strides");
        CHECK(param(&l, m, "stride_ob") == 1000ull * 8 * 128, "o strides");
        uint32_t bits = (uint32_t)param(&l, m, "scale");
        float scale;
        memcpy(&scale, &bits, 4);
        CHECK(fabsf(scale - 1.0f / sqrtf(128.0f)) < 1e-7f, "default scale %g", scale);
    } else {
        CHECK(0, "no launch recorded");
    }
    kiln_rt_destroy(rt);
    TEST_END();
}

static void test_strides_and_errors(void) {
    TEST_BEGIN("attention helper: given strides, alignment and argument errors");
    kiln_rt *rt = open_rt(80);
    kiln_error e;
    kiln_attention_args a = gqa_args();
    kiln_kernel *k = NULL;
    fake_cuda_launch l;
    /* [batch, heads, seq, head_dim] through strides, f32 output, explicit scale */
    a.out_dtype = KILN_F32;
    a.scale = 0.5f;
    int64_t qs[3] = {8ll * 1000 * 128, 128, 1000ll * 128};
    memcpy(a.stride_q, qs, sizeof qs);
    CHECK(kiln_attention_forward(rt, &a, &e) == KILN_OK, "bhsd: %s", e.msg);
    CHECK(kiln_attention_pick(rt, &a, &k, &e) == KILN_OK && strstr(kiln_kernel_get_meta(k)->spec, "out=f32"), "out=f32");
    const kiln_kernel_meta *m = k ? kiln_kernel_get_meta(k) : NULL;
    if (m && fake.last_launch(&l)) {
        uint32_t bits = (uint32_t)param(&l, m, "scale");
        float scale;
        memcpy(&scale, &bits, 4);
        CHECK(param(&l, m, "stride_qs") == 128 && param(&l, m, "stride_qh") == 1000ull * 128 && scale == 0.5f,
              "given strides and scale passed through");
    }
    /* v_head_dim (MLA: qk 192, v 128): the kernel's spec names it; O's default strides are v_head_dim wide */
    a = gqa_args();
    a.head_dim = 192, a.v_head_dim = 128;
    CHECK(kiln_attention_forward(rt, &a, &e) == KILN_OK && kiln_attention_pick(rt, &a, &k, &e) == KILN_OK &&
              strstr(kiln_kernel_get_meta(k)->spec, "head_dim=192 v_head_dim=128"), "v_head_dim: %s", e.msg);
    m = k ? kiln_kernel_get_meta(k) : NULL;
    if (m && fake.last_launch(&l))
        CHECK(param(&l, m, "stride_os") == 8ull * 128 && param(&l, m, "stride_qs") == 8ull * 192, "v_head_dim strides");
    a.v_head_dim = 192; /* equal to head_dim: the plain spec */
    CHECK(kiln_attention_pick(rt, &a, &k, &e) == KILN_OK && !strstr(kiln_kernel_get_meta(k)->spec, "v_head_dim"), "v = qk");
    a = gqa_args();
    a.out_dtype = KILN_F32;
    memcpy(a.stride_q, qs, sizeof qs);
    a.q += 8; /* bf16: 4 elements off, not 16-byte aligned */
    CHECK(kiln_attention_forward(rt, &a, &e) == KILN_EINVAL && strstr(e.msg, "q (0x") && strstr(e.msg, "aligned"),
          "misaligned q: %s", e.msg);
    a.q -= 8;
    a.stride_q[1] = 129;
    CHECK(kiln_attention_forward(rt, &a, &e) == KILN_EINVAL && strstr(e.msg, "q's stride of axis 1 (129 elements) is not a multiple of 16 bytes"), "odd stride: %s", e.msg);
    a.stride_q[1] = 128;
    a.heads_kv = 3;
    CHECK(kiln_attention_forward(rt, &a, &e) == KILN_EINVAL && strstr(e.msg, "multiple"), "heads: %s", e.msg);
    a.heads_kv = 2;
    a.head_dim = 84; /* not a multiple of 8 (80 runs 96's tiles) */
    CHECK(kiln_attention_forward(rt, &a, &e) != KILN_OK && strstr(e.msg, "head_dim"), "head_dim 84: %s", e.msg);
    a.head_dim = 128;
    a.v = 0;
    CHECK(kiln_attention_forward(rt, &a, &e) == KILN_EINVAL && strstr(e.msg, "v must be"), "null v: %s", e.msg);
    a.v = 0x500000;
    a.lse = 0;
    CHECK(kiln_attention_forward(rt, &a, &e) == KILN_OK, "lse may be 0: %s", e.msg);
    a.seq_q = 0;
    CHECK(kiln_attention_forward(rt, &a, &e) == KILN_OK, "no queries, nothing to do");
    a.seq_q = -1;
    CHECK(kiln_attention_forward(rt, &a, &e) == KILN_EINVAL && strstr(e.msg, "seq_q"), "%s", e.msg);
    kiln_rt_destroy(rt);
    TEST_END();
}

/* Decoding: bf16 d128, 32 query heads over 8 kv heads, one query, 4096 keys, batch 1. */
static kiln_attention_args decode_args(void) {
    kiln_attention_args a = gqa_args();
    a.causal = 0;
    a.batch = 1, a.heads_q = 32, a.heads_kv = 8, a.seq_q = 1, a.seq_k = 4096;
    return a;
}

static void test_splitkv_choice(void) {
    TEST_BEGIN("split-KV: automatic split count and workspace size (108 SMs)");
    kiln_rt *rt = open_rt(80);
    kiln_error e;
    kiln_attention_args a = decode_args();
    int n = -1;
    size_t bytes = 1;
    /* plain grid: 32 blocks < 108 SMs; split kernel: 8 kv heads x 1 row block = 8 blocks a split;
     * 2 blocks per SM: ceil(216 / 8) = 27 splits (<= 4096 / 128) */
    CHECK(rt && kiln_attention_forward_workspace(rt, &a, 0, &n, &bytes, &e) == KILN_OK, "%s", e.msg);
    CHECK(n == 27 && bytes == 27ull * 32 * 1 * 129 * 4, "decode: %d splits, %zu bytes", n, bytes);
    a.seq_k = 1000; /* at most one split per 128 keys */
    CHECK(kiln_attention_forward_workspace(rt, &a, 0, &n, &bytes, &e) == KILN_OK && n == 7, "seq_k 1000: %d splits", n);
    a.seq_k = 200; /* too short to split */
    CHECK(kiln_attention_forward_workspace(rt, &a, 0, &n, &bytes, &e) == KILN_OK && n == 1 && bytes == 0,
          "seq_k 200: %d splits, %zu bytes", n, bytes);
    a = decode_args();
    a.batch = 4, a.heads_kv = 32; /* MHA: 128 plain blocks fill 108 SMs */
    CHECK(kiln_attention_forward_workspace(rt, &a, 0, &n, &bytes, &e) == KILN_OK && n == 1 && bytes == 0,
          "MHA batch 4: %d splits", n);
    a.batch = 1; /* MHA, 32 plain blocks: 32 split blocks a split, ceil(216 / 32) = 7 */
    CHECK(kiln_attention_forward_workspace(rt, &a, 0, &n, &bytes, &e) == KILN_OK && n == 7, "MHA batch 1: %d splits", n);
    a = decode_args();
    a.batch = 8; /* GQA: the plain grid (256 blocks) fills the SMs, but reads K/V 4x: 64 split blocks, ceil(216 / 64) = 4 */
    CHECK(kiln_attention_forward_workspace(rt, &a, 0, &n, &bytes, &e) == KILN_OK && n == 4, "GQA batch 8: %d splits", n);
    a.batch = 64; /* 512 split blocks already: at least 2 splits */
    CHECK(kiln_attention_forward_workspace(rt, &a, 0, &n, &bytes, &e) == KILN_OK && n == 2, "GQA batch 64: %d splits", n);
    a = decode_args();
    a.seq_q = 17; /* not a decoding shape */
    CHECK(kiln_attention_forward_workspace(rt, &a, 0, &n, &bytes, &e) == KILN_OK && n == 1, "seq_q 17: %d splits", n);
    a.seq_q = 16, a.heads_q = 8; /* 16 queries x group 1 = 16 packed rows */
    CHECK(kiln_attention_forward_workspace(rt, &a, 0, &n, &bytes, &e) == KILN_OK && n == 27 &&
              bytes == 27ull * 8 * 16 * 129 * 4, "seq_q 16: %d splits, %zu bytes", n, bytes);
    a = decode_args();
    CHECK(kiln_attention_forward_workspace(rt, &a, 500, &n, &bytes, &e) == KILN_OK && n == 500 &&
              bytes == 500ull * 32 * 129 * 4, "forced 500 splits (more than key tiles): %d, %zu", n, bytes);
    CHECK(kiln_attention_forward_workspace(rt, &a, 1, &n, &bytes, &e) == KILN_OK && n == 1 && bytes == 0, "forced 1");
    CHECK(kiln_attention_forward_workspace(rt, &a, -1, &n, &bytes, &e) == KILN_EINVAL &&
              strstr(e.msg, "0 (automatic) or 1..1024"), "splits -1: %s", e.msg);
    CHECK(kiln_attention_forward_workspace(rt, &a, 1025, &n, &bytes, &e) == KILN_EINVAL && strstr(e.msg, "1..1024"),
          "splits 1025: %s", e.msg);
    kiln_rt_destroy(rt);
    TEST_END();
}

static void test_splitkv_launch(int sm) {
    char name[80];
    snprintf(name, sizeof name, "split-KV on sm_%d: split and combine launches, arguments", sm);
    TEST_BEGIN(name);
    kiln_rt *rt = open_rt(sm);
    kiln_error e;
    kiln_attention_args a = decode_args();
    a.causal = 1;
    size_t bytes = 0;
    int n = 0;
    const kiln_devptr ws = 0x900000;
    CHECK(rt && kiln_attention_forward_workspace(rt, &a, 6, &n, &bytes, &e) == KILN_OK && n == 6, "%s", e.msg);
    fake.reset();
    CHECK(kiln_attention_forward_splitkv(rt, &a, 6, ws, bytes, &e) == KILN_OK, "launch: %s", e.msg);
    fake_cuda_counts c;
    fake.counters(&c);
    CHECK(c.launches == 2, "%d launches", c.launches);
    fake_cuda_launch l0, l1;
    kiln_kernel *k = NULL, *plain = NULL;
    char spec[256];
    snprintf(spec, sizeof spec, "attention dtype=bf16 out=bf16 head_dim=128 causal=true path=auto splitkv=true");
    CHECK(kiln_rt_get_kernel(rt, spec, &k, &e) == KILN_OK, "%s", e.msg);
    if (k && launch_at(0, &l0) && launch_at(1, &l1)) {
        const kiln_kernel_meta *m = kiln_kernel_get_meta(k);
        CHECK(!strcmp(l0.entry, m->entry), "first launch %s, want %s", l0.entry, m->entry);
        CHECK(l0.grid[0] == 6 && l0.grid[1] == 8 * ((4 + m->rows_per_block - 1) / m->rows_per_block) && l0.grid[2] == 1,
              "split grid %u %u %u", l0.grid[0], l0.grid[1], l0.grid[2]);
        CHECK(l0.smem == m->dynamic_smem, "dynamic shared memory %u", l0.smem);
        CHECK(param(&l0, m, "ws") == ws && param(&l0, m, "splits") == 6 && param(&l0, m, "q") == a.q &&
                  param(&l0, m, "k") == a.k && param(&l0, m, "v") == a.v && param(&l0, m, "seq_k") == 4096 &&
                  param(&l0, m, "heads_kv") == 8 && param(&l0, m, "stride_ks") == 8 * 128,
              "split kernel arguments");
        CHECK(param_index(m, "o") < 0 && !strcmp(m->then_spec, "attention_combine out=bf16 head_dim=128"),
              "then_spec '%s'", m->then_spec);
        kiln_kernel *ck = NULL;
        CHECK(kiln_rt_get_kernel(rt, m->then_spec, &ck, &e) == KILN_OK, "%s", e.msg);
        const kiln_kernel_meta *cm = ck ? kiln_kernel_get_meta(ck) : NULL;
        if (cm) {
            CHECK(!strcmp(l1.entry, cm->entry), "second launch %s, want %s", l1.entry, cm->entry);
            CHECK(l1.grid[0] == (32 + cm->grid_tile[0] - 1) / cm->grid_tile[0] && l1.grid[1] == 1, "combine grid %u",
                  l1.grid[0]);
            CHECK(param(&l1, cm, "o") == a.o && param(&l1, cm, "lse") == a.lse && param(&l1, cm, "ws") == ws &&
                      param(&l1, cm, "splits") == 6 && param(&l1, cm, "heads_q") == 32 && param(&l1, cm, "seq_q") == 1 &&
                      param(&l1, cm, "stride_os") == 32 * 128,
                  "combine arguments");
        }
    } else {
        CHECK(0, "no launches recorded");
    }
    /* one split: the plain kernel, no workspace needed */
    fake.reset();
    CHECK(kiln_attention_forward_splitkv(rt, &a, 1, 0, 0, &e) == KILN_OK, "%s", e.msg);
    CHECK(kiln_attention_pick(rt, &a, &plain, &e) == KILN_OK && launch_at(0, &l0) &&
              !strcmp(l0.entry, kiln_kernel_get_meta(plain)->entry) && !launch_at(1, &l1),
          "splits 1 runs the plain kernel alone");
    /* automatic: this decode shape splits */
    fake.reset();
    CHECK(kiln_attention_forward_workspace(rt, &a, 0, &n, &bytes, &e) == KILN_OK && n == 27, "auto %d", n);
    CHECK(kiln_attention_forward_splitkv(rt, &a, 0, ws, bytes, &e) == KILN_OK && launch_at(1, &l1) &&
              launch_at(0, &l0) && l0.grid[0] == 27, "automatic split launch: %s", e.msg);
    kiln_rt_destroy(rt);
    TEST_END();
}

static void test_splitkv_errors(void) {
    TEST_BEGIN("split-KV: workspace and argument errors");
    kiln_rt *rt = open_rt(80);
    kiln_error e;
    kiln_attention_args a = decode_args();
    size_t bytes = 0;
    CHECK(rt && kiln_attention_forward_workspace(rt, &a, 4, NULL, &bytes, &e) == KILN_OK, "%s", e.msg);
    fake.reset();
    CHECK(kiln_attention_forward_splitkv(rt, &a, 4, 0x900000, bytes - 4, &e) == KILN_EINVAL &&
              strstr(e.msg, "need a workspace of") && strstr(e.msg, "4 splits"), "small workspace: %s", e.msg);
    CHECK(kiln_attention_forward_splitkv(rt, &a, 4, 0, bytes, &e) == KILN_EINVAL && strstr(e.msg, "workspace"),
          "no workspace: %s", e.msg);
    CHECK(kiln_attention_forward_splitkv(rt, &a, 4, 0x900008, bytes, &e) == KILN_EINVAL && strstr(e.msg, "16-byte"),
          "misaligned workspace: %s", e.msg);
    CHECK(kiln_attention_forward_splitkv(rt, &a, 0 - 3, 0x900000, bytes, &e) == KILN_EINVAL && strstr(e.msg, "splits"),
          "splits -3: %s", e.msg);
    a.heads_kv = 3;
    CHECK(kiln_attention_forward_splitkv(rt, &a, 4, 0x900000, bytes, &e) == KILN_EINVAL && strstr(e.msg, "multiple"),
          "heads: %s", e.msg);
    a = decode_args();
    a.k += 8;
    CHECK(kiln_attention_forward_splitkv(rt, &a, 4, 0x900000, bytes, &e) == KILN_EINVAL && strstr(e.msg, "k (0x"),
          "misaligned k: %s", e.msg);
    fake_cuda_counts c;
    fake.counters(&c);
    CHECK(c.launches == 0, "no launch after an error (%d)", c.launches);
    a = decode_args();
    a.seq_q = 0;
    CHECK(kiln_attention_forward_splitkv(rt, &a, 4, 0, 0, &e) == KILN_OK, "no queries: nothing to do (%s)", e.msg);
    kiln_rt_destroy(rt);
    TEST_END();
}

/* A runtime-only install (libkiln_rt + a bundle of the plain kernel, no generator): the automatic split
 * rule never asks for split kernels on a prefill shape, and falls back to the plain kernel for a
 * decoding shape whose split kernels no bundle holds; forced splits say what is missing. */
static void test_splitkv_bundle_only(void) {
    TEST_BEGIN("split-KV automatic with a bundle that has no split kernels and no generator: the plain kernel");
    kiln_gen *g = NULL;
    kiln_module *mod = NULL;
    kiln_bundle_writer *bw = NULL;
    kiln_error e = {0};
    void *data = NULL;
    size_t size = 0;
    kiln_bundle_writer_create(&bw, "test", NULL);
    kiln_gen_create(&g, NULL, &e);
    CHECK(kiln_generate(g, "attention dtype=bf16 head_dim=128 causal=true", 80, KILN_EMIT_PTX, &mod, &e) == KILN_OK,
          "%s", e.msg);
    if (mod) kiln_bundle_writer_add(bw, kiln_module_meta(mod), KILN_PAYLOAD_PTX, kiln_module_text(mod),
                                    kiln_module_size(mod), NULL);
    kiln_module_free(mod);
    kiln_gen_destroy(g);
    kiln_bundle_writer_finish(bw, &data, &size, &e);
    kiln_bundle_writer_destroy(bw);
    kiln_rt_register_generator(NULL);
    kiln_rt *rt = open_rt(80);
    CHECK(kiln_rt_add_bundle_memory(rt, data, size, &e) == KILN_OK, "%s", e.msg);
    kiln_attention_args a = gqa_args(); /* prefill: 1000 queries */
    int n = -1;
    size_t bytes = 1;
    CHECK(kiln_attention_forward_workspace(rt, &a, 0, &n, &bytes, &e) == KILN_OK && n == 1 && bytes == 0,
          "prefill: %d splits, %zu bytes: %s", n, bytes, e.msg);
    a.batch = 1, a.heads_q = 32, a.heads_kv = 8, a.seq_q = 1, a.seq_k = 4096; /* decoding, GQA */
    CHECK(kiln_attention_forward_workspace(rt, &a, 0, &n, &bytes, &e) == KILN_OK && n == 1 && bytes == 0,
          "decoding without split kernels: %d splits, %zu bytes: %s", n, bytes, e.msg);
    fake.reset();
    CHECK(kiln_attention_forward_splitkv(rt, &a, 0, 0, 0, &e) == KILN_OK, "%s", e.msg);
    fake_cuda_launch l;
    CHECK(fake.last_launch(&l) && !strstr(l.entry, "combine"), "one plain launch");
    /* the split kernel declares its workspace (templates/attention.lua): forced splits need it */
    kiln_status st = kiln_attention_forward_workspace(rt, &a, 4, &n, &bytes, &e);
    CHECK(st == KILN_ENOTFOUND && strstr(e.msg, "splitkv=true"), "forced splits name the missing kernel: %d %s", st, e.msg);
    st = kiln_attention_forward_splitkv(rt, &a, 4, 0x900000, 1 << 20, &e);
    CHECK(st == KILN_ENOTFOUND && strstr(e.msg, "splitkv=true"), "forced splits name the missing kernel: %d %s", st,
          e.msg);
    kiln_rt_destroy(rt);
    kiln_rt_use_generator();
    rt = open_rt(80);
    a.batch = 1 << 30, a.heads_q = 1 << 20, a.heads_kv = 1 << 20, a.seq_q = 16, a.head_dim = 256; /* size_t overflow */
    st = kiln_attention_forward_workspace(rt, &a, KILN_ATTENTION_MAX_SPLITS, &n, &bytes, &e);
    CHECK(st == KILN_EINVAL && strstr(e.msg, "does not fit"), "%d %s", st, e.msg);
    kiln_rt_destroy(rt);
    free(data);
    TEST_END();
}

static float f32_of(uint64_t bits) {
    uint32_t b = (uint32_t)bits;
    float f;
    memcpy(&f, &b, 4);
    return f;
}

/* Issue 24's keys: the spec gains exactly the keys set, the kernel gets their values, split-KV too. */
static void test_mask(void) {
    TEST_BEGIN("attention helper: top-left causal, window, softcap, ALiBi (plain and split-KV)");
    kiln_rt *rt = open_rt(80);
    kiln_error e = {0};
    kiln_attention_args a = gqa_args();
    kiln_kernel *k = NULL;
    fake_cuda_launch l;
    a.causal = KILN_CAUSAL_TOP_LEFT;
    a.mask = (kiln_attention_mask){.window = 1, .window_left = 4095, .window_right = -1, .softcap = 50.0f,
                                   .alibi_slopes = 0x600000, .alibi_stride = 8};
    CHECK(rt && kiln_attention_forward(rt, &a, &e) == KILN_OK, "launch: %s", e.msg);
    CHECK(kiln_attention_pick(rt, &a, &k, &e) == KILN_OK, "pick: %s", e.msg);
    const kiln_kernel_meta *m = k ? kiln_kernel_get_meta(k) : NULL;
    CHECK(m && strstr(m->spec, "causal=top_left") && strstr(m->spec, "window=true") && strstr(m->spec, "softcap=true") &&
              strstr(m->spec, "alibi=true"), "spec %s", m ? m->spec : "-");
    if (m && fake.last_launch(&l)) {
        CHECK(param(&l, m, "window_left") == 4095 && (uint32_t)param(&l, m, "window_right") == 0xffffffffu,
              "window %llu %llu", (unsigned long long)param(&l, m, "window_left"),
              (unsigned long long)param(&l, m, "window_right"));
        CHECK(f32_of(param(&l, m, "softcap")) == 50.0f, "softcap %g", f32_of(param(&l, m, "softcap")));
        CHECK(param(&l, m, "alibi_slopes") == 0x600000 && param(&l, m, "alibi_stride") == 8, "alibi");
    } else {
        CHECK(0, "no launch recorded");
    }
    /* only the keys set: the softcap alone */
    a.causal = KILN_CAUSAL_NONE;
    a.mask = (kiln_attention_mask){.softcap = 30.0f};
    CHECK(kiln_attention_pick(rt, &a, &k, &e) == KILN_OK, "pick: %s", e.msg);
    m = k ? kiln_kernel_get_meta(k) : NULL;
    CHECK(m && strstr(m->spec, "causal=false") && strstr(m->spec, "softcap=true") && !strstr(m->spec, "window") &&
              !strstr(m->spec, "alibi"), "spec %s", m ? m->spec : "-");
    /* split-KV: the split kernel gets the keys, attention_combine does not need them */
    a.seq_q = 1, a.seq_k = 4096;
    a.mask = (kiln_attention_mask){.window = 1, .window_left = 1000, .window_right = 0, .alibi_slopes = 0x600000};
    size_t bytes = 0;
    int n = 0;
    CHECK(kiln_attention_forward_workspace(rt, &a, 4, &n, &bytes, &e) == KILN_OK && n == 4 && bytes, "%s", e.msg);
    fake.reset();
    CHECK(kiln_attention_forward_splitkv(rt, &a, 4, 0x900000, bytes, &e) == KILN_OK, "split-KV: %s", e.msg);
    fake_cuda_launch l0;
    if (launch_at(0, &l0) && strstr(l0.entry, "attention_bf16")) {
        char spec[256];
        snprintf(spec, sizeof spec, "attention dtype=bf16 out=bf16 head_dim=128 causal=false path=auto splitkv=true "
                                    "window=true alibi=true");
        CHECK(kiln_rt_get_kernel(rt, spec, &k, &e) == KILN_OK, "%s", e.msg);
        m = k ? kiln_kernel_get_meta(k) : NULL;
        CHECK(m && !strcmp(l0.entry, m->entry), "split launch %s", l0.entry);
        if (m)
            CHECK(param(&l0, m, "window_left") == 1000 && param(&l0, m, "window_right") == 0 &&
                      param(&l0, m, "alibi_slopes") == 0x600000 && param(&l0, m, "alibi_stride") == 0,
                  "split kernel's keys");
    } else {
        CHECK(0, "no split launch recorded (%s)", l0.entry);
    }
    /* bad values name the field */
    a = gqa_args();
    a.causal = 3;
    CHECK(kiln_attention_forward(rt, &a, &e) == KILN_EINVAL && strstr(e.msg, "causal (3)"), "causal 3: %s", e.msg);
    a.causal = 1;
    a.mask = (kiln_attention_mask){.window = 1, .window_left = -2};
    CHECK(kiln_attention_forward(rt, &a, &e) == KILN_EINVAL && strstr(e.msg, "window sides"), "window -2: %s", e.msg);
    a.mask = (kiln_attention_mask){.softcap = NAN};
    CHECK(kiln_attention_forward(rt, &a, &e) == KILN_EINVAL && strstr(e.msg, "softcap"), "softcap NaN: %s", e.msg);
    a.mask = (kiln_attention_mask){.alibi_slopes = 0x600000, .alibi_stride = -1};
    CHECK(kiln_attention_forward(rt, &a, &e) == KILN_EINVAL && strstr(e.msg, "alibi_stride"), "stride -1: %s", e.msg);
    kiln_rt_destroy(rt);
    TEST_END();
}

/* dropout: the spec key and the three launch values; never split-KV (automatic: the plain kernel; explicit
 * splits > 1 refused); bad values name the field. */
static void test_dropout(void) {
    TEST_BEGIN("attention helper: dropout (rate, seed, offset; never split-KV)");
    kiln_rt *rt = open_rt(80);
    kiln_error e = {0};
    kiln_attention_args a = gqa_args();
    kiln_kernel *k = NULL;
    fake_cuda_launch l;
    a.mask = (kiln_attention_mask){.dropout_p = 0.25f, .dropout_seed = 123456789012ull, .dropout_offset = 77};
    CHECK(rt && kiln_attention_forward(rt, &a, &e) == KILN_OK, "launch: %s", e.msg);
    CHECK(kiln_attention_pick(rt, &a, &k, &e) == KILN_OK, "pick: %s", e.msg);
    const kiln_kernel_meta *m = k ? kiln_kernel_get_meta(k) : NULL;
    CHECK(m && strstr(m->spec, "dropout=true") && !strstr(m->spec, "splitkv"), "spec %s", m ? m->spec : "-");
    if (m && fake.last_launch(&l)) {
        CHECK(f32_of(param(&l, m, "dropout_p")) == 0.25f, "p %g", f32_of(param(&l, m, "dropout_p")));
        CHECK(param(&l, m, "dropout_seed") == 123456789012ull && param(&l, m, "dropout_offset") == 77,
              "seed %llu offset %llu", (unsigned long long)param(&l, m, "dropout_seed"),
              (unsigned long long)param(&l, m, "dropout_offset"));
    } else {
        CHECK(0, "no launch recorded");
    }
    /* a decoding shape: automatic gives 1 split (the plain kernel), 4 splits are refused */
    a.seq_q = 1, a.seq_k = 4096;
    size_t bytes = 1;
    int n = 0;
    CHECK(kiln_attention_forward_workspace(rt, &a, 0, &n, &bytes, &e) == KILN_OK && n == 1 && bytes == 0,
          "automatic: %d splits, %zu bytes: %s", n, bytes, e.msg);
    CHECK(kiln_attention_forward_workspace(rt, &a, 4, &n, &bytes, &e) == KILN_EINVAL && strstr(e.msg, "dropout"),
          "4 splits: %s", e.msg);
    /* p = 0: no key (the plain kernel) */
    a = gqa_args();
    a.mask = (kiln_attention_mask){.dropout_seed = 5};
    CHECK(kiln_attention_pick(rt, &a, &k, &e) == KILN_OK, "pick: %s", e.msg);
    m = k ? kiln_kernel_get_meta(k) : NULL;
    CHECK(m && !strstr(m->spec, "dropout"), "spec %s", m ? m->spec : "-");
    a.mask = (kiln_attention_mask){.dropout_p = 1.0f};
    CHECK(kiln_attention_forward(rt, &a, &e) == KILN_EINVAL && strstr(e.msg, "dropout_p"), "p 1: %s", e.msg);
    a.mask = (kiln_attention_mask){.dropout_p = 0.1f, .dropout_seed = (1ull << 53) + 1};
    CHECK(kiln_attention_forward(rt, &a, &e) == KILN_EINVAL && strstr(e.msg, "dropout_seed"), "seed 2^53+1: %s", e.msg);
    kiln_rt_destroy(rt);
    TEST_END();
}

/* A paged KV cache: the paged kernel, the tables and page geometry as arguments, no seq_k, the split
 * choice from seq_k (the longest sequence), the page-size rule and the table errors. */
static void test_paged(void) {
    TEST_BEGIN("attention helper: paged KV cache (plain and split-KV), page-size rule");
    kiln_rt *rt = open_rt(80);
    kiln_error e = {0};
    kiln_attention_args a = decode_args();
    a.cache = (kiln_attention_kvcache){.block_table = 0x700000, .cache_seqlens = 0x710000, .cache_leftpad = 0x720000,
                                       .page_size = 16, .max_blocks = 256, .num_blocks = 300};
    size_t bytes = 0;
    int n = 0;
    CHECK(rt && kiln_attention_forward_workspace(rt, &a, 0, &n, &bytes, &e) == KILN_OK && n == 27 && bytes,
          "automatic split over pages: %d (%s)", n, e.msg);
    fake.reset();
    CHECK(kiln_attention_forward_splitkv(rt, &a, 0, 0x900000, bytes, &e) == KILN_OK, "split-KV: %s", e.msg);
    fake_cuda_launch l0, l1;
    kiln_kernel *k = NULL;
    CHECK(kiln_rt_get_kernel(rt, "attention dtype=bf16 out=bf16 head_dim=128 causal=false path=auto splitkv=true paged=true",
                             &k, &e) == KILN_OK, "%s", e.msg);
    const kiln_kernel_meta *m = k ? kiln_kernel_get_meta(k) : NULL;
    if (m && launch_at(0, &l0) && launch_at(1, &l1)) {
        CHECK(!strcmp(l0.entry, m->entry) && l0.grid[0] == 27, "split launch %s grid %u", l0.entry, l0.grid[0]);
        CHECK(param(&l0, m, "block_table") == 0x700000 && param(&l0, m, "cache_seqlens") == 0x710000 &&
                  param(&l0, m, "cache_leftpad") == 0x720000 && param(&l0, m, "cache_batch_idx") == 0 &&
                  param(&l0, m, "page_size") == 16 && param(&l0, m, "max_blocks") == 256 && param_index(m, "seq_k") < 0 &&
                  param(&l0, m, "stride_kb") == 16 * 8 * 128 && param(&l0, m, "stride_ks") == 8 * 128,
              "paged split kernel arguments");
    } else {
        CHECK(0, "no paged launches recorded");
    }
    /* the plain kernel over pages */
    a.seq_q = 100;
    fake.reset();
    CHECK(kiln_attention_forward(rt, &a, &e) == KILN_OK && kiln_attention_pick(rt, &a, &k, &e) == KILN_OK, "%s", e.msg);
    m = k ? kiln_kernel_get_meta(k) : NULL;
    CHECK(m && strstr(m->spec, " paged=true") && !strstr(m->spec, "splitkv") && fake.last_launch(&l0) &&
              param(&l0, m, "block_table") == 0x700000, "plain paged launch %s", m ? m->spec : "-");
    /* page sizes: 48 fits neither way, 8 is too small, 128 a multiple of the tile */
    a.cache.page_size = 48;
    CHECK(kiln_attention_forward(rt, &a, &e) == KILN_EINVAL && strstr(e.msg, "page_size 48") && strstr(e.msg, "valid: 16.."),
          "page 48: %s", e.msg);
    a.cache.page_size = 8;
    CHECK(kiln_attention_forward(rt, &a, &e) == KILN_EINVAL && strstr(e.msg, "page_size 8"), "page 8: %s", e.msg);
    a.cache.page_size = 128;
    CHECK(kiln_attention_forward(rt, &a, &e) == KILN_OK, "page 128: %s", e.msg);
    /* append: the append kernel, the new keys with their strides */
    a.cache.k_new = 0x730000, a.cache.v_new = 0x740000, a.cache.seqlen_new = 100;
    a.cache.stride_k_new[0] = 100 * 8 * 256, a.cache.stride_k_new[1] = 8 * 256, a.cache.stride_k_new[2] = 256;
    fake.reset();
    CHECK(kiln_attention_forward(rt, &a, &e) == KILN_OK && kiln_attention_pick(rt, &a, &k, &e) == KILN_OK, "%s", e.msg);
    m = k ? kiln_kernel_get_meta(k) : NULL;
    CHECK(m && strstr(m->spec, " paged=true append=true") && fake.last_launch(&l0) && param(&l0, m, "k_new") == 0x730000 &&
              param(&l0, m, "v_new") == 0x740000 && param(&l0, m, "seqlen_new") == 100 &&
              param(&l0, m, "stride_kns") == 8 * 256 && param(&l0, m, "stride_vns") == 8 * 128,
          "append launch %s", m ? m->spec : "-");
    /* rotary inside the append: the rotary kernel, its tables and seqlen_ro; rotary_dim 0 is head_dim; errors */
    a.cache.rotary = KILN_ROTARY_INTERLEAVED, a.cache.rotary_dim = 64, a.cache.rotary_dtype = KILN_F32;
    a.cache.rotary_cos = 0x750000, a.cache.rotary_sin = 0x760000, a.cache.seqlen_ro = 4096;
    fake.reset();
    CHECK(kiln_attention_forward(rt, &a, &e) == KILN_OK && kiln_attention_pick(rt, &a, &k, &e) == KILN_OK, "%s", e.msg);
    m = k ? kiln_kernel_get_meta(k) : NULL;
    CHECK(m && strstr(m->spec, " append=true rotary=interleaved rotary_dim=64 rotary_cs=f32") && fake.last_launch(&l0) &&
              param(&l0, m, "rotary_cos") == 0x750000 && param(&l0, m, "rotary_sin") == 0x760000 &&
              param(&l0, m, "seqlen_ro") == 4096 && param(&l0, m, "k_new") == 0x730000,
          "rotary launch %s", m ? m->spec : "-");
    a.cache.rotary = KILN_ROTARY_NEOX, a.cache.rotary_dim = 0, a.cache.rotary_dtype = a.dtype;
    CHECK(kiln_attention_pick(rt, &a, &k, &e) == KILN_OK && (m = kiln_kernel_get_meta(k)) &&
              strstr(m->spec, " rotary=neox") && !strstr(m->spec, "rotary_dim") && !strstr(m->spec, "rotary_cs"),
          "rotary_dim 0: %s", m ? m->spec : e.msg);
    a.cache.rotary_dim = 24;
    CHECK(kiln_attention_forward(rt, &a, &e) != KILN_OK && strstr(e.msg, "rotary_dim=24: must be a multiple of 16"),
          "rotary_dim 24: %s", e.msg);
    a.cache.rotary_dim = 0, a.cache.rotary = 3;
    CHECK(kiln_attention_forward(rt, &a, &e) == KILN_EINVAL && strstr(e.msg, "3 is not a mode"), "rotary 3: %s", e.msg);
    a.cache.rotary = KILN_ROTARY_NEOX, a.cache.rotary_sin = 0;
    CHECK(kiln_attention_forward(rt, &a, &e) == KILN_EINVAL && strstr(e.msg, "rotary_sin"), "no sin: %s", e.msg);
    a.cache.rotary_sin = 0x760000, a.cache.seqlen_ro = 0;
    CHECK(kiln_attention_forward(rt, &a, &e) == KILN_EINVAL && strstr(e.msg, "seqlen_ro >= 1 (got 0)"), "seqlen_ro 0: %s",
          e.msg);
    a.cache.rotary = 0;
    a.cache.v_new = 0;
    CHECK(kiln_attention_forward(rt, &a, &e) == KILN_EINVAL && strstr(e.msg, "v_new"), "no v_new: %s", e.msg);
    a.cache.k_new = 0, a.cache.seqlen_new = 0;
    a.cache.cache_seqlens = 0;
    CHECK(kiln_attention_forward(rt, &a, &e) == KILN_EINVAL && strstr(e.msg, "cache_seqlens"), "no seqlens: %s", e.msg);
    a.cache = (kiln_attention_kvcache){.cache_seqlens = 0x710000};
    CHECK(kiln_attention_forward(rt, &a, &e) == KILN_EINVAL && strstr(e.msg, "block_table"), "no table: %s", e.msg);
    kiln_rt_destroy(rt);
    TEST_END();
}

static int launches(void) {
    fake_cuda_counts c;
    fake.counters(&c);
    return c.launches;
}

/* kiln_attention_args.path: the spec's path word (sm_90a's wgmma kernels reachable before path=auto takes them, at
 * the head dims lib/attn_wgmma_dims.lua adds too), split-KV with it, refusals naming why. */
static void test_path(void) {
    TEST_BEGIN("attention helper: path (auto, mma, simt, wgmma) into the spec; wgmma on a 9.0 device with its tensor maps, off sm_90a refused; a bad value named");
    kiln_rt *rt = open_rt(90);
    kiln_error e = {0};
    kiln_kernel *k = NULL;
    kiln_attention_args a = gqa_args();
    CHECK(kiln_attention_pick(rt, &a, &k, &e) == KILN_OK && strstr(kiln_kernel_get_meta(k)->spec, "path=auto"), "auto: %s", e.msg);
    static const int dims[] = {128, 96, 32};
    for (int i = 0; i < 3; i++) {
        a = gqa_args();
        a.path = KILN_ATTENTION_PATH_WGMMA, a.head_dim = dims[i];
        fake.reset();
        CHECK(kiln_attention_forward(rt, &a, &e) == KILN_OK && launches() == 1, "wgmma d%d: %s", dims[i], e.msg);
        CHECK(kiln_attention_pick(rt, &a, &k, &e) == KILN_OK && strstr(kiln_kernel_get_meta(k)->spec, "path=wgmma") &&
                  kiln_kernel_get_meta(k)->block[0] == 384,
              "wgmma d%d: the wgmma kernel (384 threads): %s", dims[i], k ? kiln_kernel_get_meta(k)->spec : e.msg);
    }
    /* MLA on wgmma; split-KV decoding on wgmma: both launches, the split kernel's spec with the path */
    a = gqa_args();
    a.path = KILN_ATTENTION_PATH_WGMMA, a.head_dim = 192, a.v_head_dim = 128;
    CHECK(kiln_attention_forward(rt, &a, &e) == KILN_OK, "wgmma MLA: %s", e.msg);
    a = decode_args();
    a.path = KILN_ATTENTION_PATH_WGMMA;
    int chosen = 0;
    size_t bytes = 0;
    CHECK(kiln_attention_forward_workspace(rt, &a, 4, &chosen, &bytes, &e) == KILN_OK && chosen == 4 && bytes > 0, "wgmma split workspace: %s", e.msg);
    fake.reset();
    CHECK(kiln_attention_forward_splitkv(rt, &a, 4, 0x900000, bytes, &e) == KILN_OK && launches() == 2, "wgmma split-KV: %s", e.msg);
    a = gqa_args();
    a.path = KILN_ATTENTION_PATH_SIMT;
    CHECK(kiln_attention_pick(rt, &a, &k, &e) == KILN_OK && strstr(kiln_kernel_get_meta(k)->spec, "path=simt"), "simt: %s", e.msg);
    a.path = 7;
    CHECK(kiln_attention_forward(rt, &a, &e) == KILN_EINVAL && strstr(e.msg, "path (7)") && strstr(e.msg, "_WGMMA (3)"), "bad path: %s", e.msg);
    a.path = KILN_ATTENTION_PATH_WGMMA, a.dtype = a.out_dtype = KILN_F32;
    CHECK(kiln_attention_forward(rt, &a, &e) != KILN_OK && strstr(e.msg, "dtype f32"), "wgmma f32: %s", e.msg);
    kiln_rt_destroy(rt);
    rt = open_rt(80);
    a = gqa_args();
    a.path = KILN_ATTENTION_PATH_WGMMA;
    CHECK(kiln_attention_forward(rt, &a, &e) != KILN_OK && strstr(e.msg, "valid targets: sm_90a"), "wgmma on 8.0: %s", e.msg);
    a.path = KILN_ATTENTION_PATH_MMA;
    CHECK(kiln_attention_pick(rt, &a, &k, &e) == KILN_OK && strstr(kiln_kernel_get_meta(k)->spec, "path=mma"), "mma: %s", e.msg);
    kiln_rt_destroy(rt);
    TEST_END();
}

int main(void) {
    if (fake_cuda_open(&fake) != 0 || !(*(void **)&launch_at = dlsym(fake.dl, "fake_cuda_launch_at"))) {
        printf("attention runtime: 0 passed, 1 failed\n");
        return 1;
    }
    kiln_rt_use_generator();
    test_launch(75);
    test_launch(80);
    test_launch(90);
    test_strides_and_errors();
    test_splitkv_choice();
    test_splitkv_launch(75);
    test_splitkv_launch(80);
    test_splitkv_launch(90);
    test_splitkv_errors();
    test_splitkv_bundle_only();
    test_mask();
    test_dropout();
    test_paged();
    test_path();
    return check_summary("attention runtime");
}
