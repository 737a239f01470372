/* tests/attention_varlen_runtime_test.c - the varlen attention helpers (kiln_attention_forward_varlen,
 * kiln_attention_backward_varlen) against the fake CUDA driver: spec, grid from max_seqlen, the varlen
 * arguments by name, packed strides, the backward's sequence and workspace, dropout and its mask output,
 * errors naming the field. */
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

static uint64_t param(const fake_cuda_launch *l, const kiln_kernel_meta *m, const char *name) {
    for (int i = 0; i < m->nparams; i++)
        if (!strcmp(m->params[i].name, name)) return l->param[i];
    return ~0ull;
}

/* 3 sequences of at most 1000 queries and 1500 keys, 8:2 heads, bf16 d128, causal. */
static kiln_attention_args fwd_args(void) {
    return (kiln_attention_args){.o = 0x100000, .lse = 0x200000, .q = 0x300000, .k = 0x400000, .v = 0x500000,
                                 .dtype = KILN_BF16, .out_dtype = KILN_BF16, .head_dim = 128, .causal = 1,
                                 .batch = 3, .heads_q = 8, .heads_kv = 2, .seq_q = 1000, .seq_k = 1500};
}
static const kiln_attention_varlen VL = {.cu_seqlens_q = 0x700000, .cu_seqlens_k = 0x710000, .total_q = 1800,
                                         .total_k = 2500};

static void test_forward(int sm) {
    char name[64];
    snprintf(name, sizeof name, "varlen forward on sm_%d: spec, grid, arguments", sm);
    TEST_BEGIN(name);
    kiln_rt *rt = open_rt(sm);
    kiln_error e;
    kiln_attention_args a = fwd_args();
    kiln_attention_varlen vl = VL;
    vl.seqused_k = 0x720000;
    fake.reset();
    CHECK(rt && kiln_attention_forward_varlen(rt, &a, &vl, &e) == KILN_OK, "launch: %s", e.msg);
    kiln_kernel *k = NULL;
    CHECK(rt && kiln_rt_get_kernel(rt, "attention dtype=bf16 out=bf16 head_dim=128 causal=true varlen=true", &k, &e) == KILN_OK,
          "%s", e.msg);
    const kiln_kernel_meta *m = k ? kiln_kernel_get_meta(k) : NULL;
    fake_cuda_launch l;
    if (m && fake.last_launch(&l)) {
        CHECK(!strcmp(l.entry, m->entry), "launched %s, want %s", l.entry, m->entry);
        CHECK(l.grid[0] == (1000 + m->grid_tile[0] - 1) / m->grid_tile[0] && l.grid[1] == 8 && l.grid[2] == 3,
              "grid %u %u %u", l.grid[0], l.grid[1], l.grid[2]);
        CHECK(param(&l, m, "cu_seqlens_q") == 0x700000 && param(&l, m, "cu_seqlens_k") == 0x710000 &&
                  param(&l, m, "seqused_k") == 0x720000 && param(&l, m, "total_q") == 1800,
              "varlen arguments");
        CHECK(param(&l, m, "stride_qs") == 8 * 128 && param(&l, m, "stride_qh") == 128 &&
                  param(&l, m, "stride_ks") == 2 * 128 && param(&l, m, "stride_os") == 8 * 128,
              "packed strides: qs %llu ks %llu", (unsigned long long)param(&l, m, "stride_qs"),
              (unsigned long long)param(&l, m, "stride_ks"));
        float scale;
        uint32_t bits = (uint32_t)param(&l, m, "scale");
        memcpy(&scale, &bits, 4);
        CHECK(fabsf(scale - 1 / sqrtf(128)) < 1e-7f, "default scale %g", scale);
    } else {
        CHECK(0, "no launch recorded");
    }
    /* given strides: [total, heads, d] with padded rows */
    a.stride_q[1] = 2048, a.stride_q[2] = 256;
    vl.seqused_k = 0;
    fake.reset();
    CHECK(kiln_attention_forward_varlen(rt, &a, &vl, &e) == KILN_OK, "strided: %s", e.msg);
    if (m && fake.last_launch(&l))
        CHECK(param(&l, m, "stride_qs") == 2048 && param(&l, m, "stride_qh") == 256 && param(&l, m, "seqused_k") == 0,
              "given strides, seqused_k 0");
    kiln_rt_destroy(rt);
    TEST_END();
}

static void test_backward(void) {
    TEST_BEGIN("varlen backward: the sequence, its workspace, arguments");
    kiln_rt *rt = open_rt(80);
    kiln_error e;
    kiln_attention_bwd_args a = {.dq = 0x1000000, .dk = 0x1100000, .dv = 0x1200000, .q = 0x300000, .k = 0x400000,
                                 .v = 0x500000, .o = 0x100000, .dout = 0x1300000, .lse = 0x200000,
                                 .workspace = 0x2000000, .dtype = KILN_F16, .out_dtype = KILN_F16,
                                 .grad_dtype = KILN_F16, .head_dim = 64, .causal = 1, .batch = 3, .heads_q = 4,
                                 .heads_kv = 2, .seq_q = 700, .seq_k = 900};
    kiln_attention_varlen vl = VL;
    size_t ws = kiln_attention_backward_varlen_workspace(&a, &vl);
    size_t rows = 4 * 1800;
    CHECK(ws == (rows * 4 + 255) / 256 * 256 + rows * 64 * 4, "workspace %zu", ws);
    fake.reset();
    CHECK(rt && kiln_attention_backward_varlen(rt, &a, &vl, &e) == KILN_OK, "launch: %s", e.msg);
    static const char *const kinds[3] = {"prep", "dkdv", "convert"};
    for (int i = 0; i < 3; i++) {
        fake_cuda_launch l;
        char spec[256];
        snprintf(spec, sizeof spec,
                 "attention_bwd kernel=%s dtype=f16 out=f16 grad=f16 head_dim=64 causal=true deterministic=false varlen=true",
                 kinds[i]);
        kiln_kernel *k = NULL;
        CHECK(kiln_rt_get_kernel(rt, spec, &k, &e) == KILN_OK, "%s: %s", spec, e.msg);
        const kiln_kernel_meta *m = k ? kiln_kernel_get_meta(k) : NULL;
        if (!m || !launch_at(i, &l)) {
            CHECK(0, "launch %d missing", i);
            continue;
        }
        CHECK(!strcmp(l.entry, m->entry), "launch %d: %s, want %s", i, l.entry, m->entry);
        unsigned rows_or_keys = i == 1 ? 900 : 700, heads = i == 1 ? 2 : 4;
        CHECK(l.grid[0] == (rows_or_keys + m->grid_tile[0] - 1) / m->grid_tile[0] && l.grid[1] == heads && l.grid[2] == 3,
              "%s grid %u %u %u", kinds[i], l.grid[0], l.grid[1], l.grid[2]);
        CHECK(param(&l, m, "cu_seqlens_q") == 0x700000 && param(&l, m, "total_q") == 1800, "%s varlen arguments", kinds[i]);
        if (i != 1) continue;
        CHECK(param(&l, m, "cu_seqlens_k") == 0x710000 && param(&l, m, "delta") == 0x2000000 &&
                  param(&l, m, "dq_acc") == 0x2000000 + (rows * 4 + 255) / 256 * 256,
              "dkdv: cu_seqlens_k, delta and dq_acc carved from the workspace");
    }
    /* errors name the field */
    a.workspace = 0;
    CHECK(kiln_attention_backward_varlen(rt, &a, &vl, &e) == KILN_EINVAL && strstr(e.msg, "kiln_attention_backward_varlen_workspace"),
          "no workspace: %s", e.msg);
    a.workspace = 0x2000000;
    vl.seqused_k = 0x720000;
    CHECK(kiln_attention_backward_varlen(rt, &a, &vl, &e) == KILN_EINVAL && strstr(e.msg, "seqused_k is a forward value"),
          "seqused_k in the backward: %s", e.msg);
    kiln_rt_destroy(rt);
    TEST_END();
}

/* bf16 on sm_75 (the f16-scaled backward, templates/lib/attn_bwd_f16scaled.lua): the workspace counts Q's and dO's
 * scaled rows [heads_q, total_q] and, deterministic, K's and V's [heads_kv, total_k], carved in dkdv's order; dkdv and
 * dq get those pointers and total_k. The default path (auto), as kiln_attention_backward's users get it: this dq,
 * varlen at the tile width 64, holds its K and V rows spanning more than 2^32 since wave 20 (dq_kv_lo_applies), so auto
 * takes the f16-scaled kernels; were it not held, auto would run SIMT and this test would fail on the workspace. */
static void test_backward_scaled(void) {
    TEST_BEGIN("varlen backward, bf16 sm_75 deterministic: the f16-scaled rows in the workspace, total_k");
    kiln_rt *rt = open_rt(75);
    kiln_error e;
    kiln_attention_bwd_args a = {.dq = 0x1000000, .dk = 0x1100000, .dv = 0x1200000, .q = 0x300000, .k = 0x400000,
                                 .v = 0x500000, .o = 0x100000, .dout = 0x1300000, .lse = 0x200000,
                                 .workspace = 0x2000000, .dtype = KILN_BF16, .out_dtype = KILN_BF16,
                                 .grad_dtype = KILN_BF16, .head_dim = 40, .causal = 1, .batch = 3, .heads_q = 4,
                                 .heads_kv = 2, .seq_q = 700, .seq_k = 900, .deterministic = 1};
    kiln_attention_varlen vl = VL;
    size_t rows = 4 * 1800, keys = 2 * 2500, w = 64; /* (head_dim 40: the tile width 64) */
    size_t off[9], at = (rows * 4 + 255) / 256 * 256; /* delta; deterministic: no dq_acc */
    const size_t each[8] = {rows * w * 2, rows * w * 2, rows * 4, rows * 4, keys * w * 2, keys * w * 2, keys * 4, keys * 4};
    for (int i = 0; i < 8; i++) off[i] = at = (at + 255) / 256 * 256, at += each[i];
    off[8] = at;
    size_t ws = kiln_attention_backward_varlen_workspace(&a, &vl);
    CHECK(ws == off[8], "workspace %zu, expected %zu", ws, off[8]);
    fake.reset();
    CHECK(rt && kiln_attention_backward_varlen(rt, &a, &vl, &e) == KILN_OK, "launch: %s", e.msg);
    static const char *const names[8] = {"qh", "doh", "qsf", "dosf", "kh", "vh", "ksf", "vsf"};
    static const char *const kinds[3] = {"prep", "dkdv", "dq"};
    for (int i = 0; i < 3; i++) {
        fake_cuda_launch l;
        char spec[256];
        snprintf(spec, sizeof spec, "attention_bwd kernel=%s dtype=bf16 out=bf16 grad=bf16 head_dim=40 causal=true path=auto "
                 "deterministic=%s varlen=true", kinds[i], i == 1 ? "true" : "false");
        kiln_kernel *k = NULL;
        CHECK(kiln_rt_get_kernel(rt, spec, &k, &e) == KILN_OK, "%s: %s", spec, e.msg);
        const kiln_kernel_meta *m = k ? kiln_kernel_get_meta(k) : NULL;
        if (!m || !launch_at(i, &l)) {
            CHECK(0, "launch %d missing", i);
            continue;
        }
        CHECK(!strcmp(l.entry, m->entry), "launch %d: %s, want %s", i, l.entry, m->entry);
        for (int t = i == 2 ? 4 : 0; t < (i == 0 ? 4 : 8); t++)
            CHECK(param(&l, m, names[t]) == a.workspace + off[t], "%s: %s at 0x%llx, want 0x%llx", kinds[i], names[t],
                  (unsigned long long)param(&l, m, names[t]), (unsigned long long)(a.workspace + off[t]));
        if (i) CHECK(param(&l, m, "total_k") == 2500, "%s: total_k %llu", kinds[i], (unsigned long long)param(&l, m, "total_k"));
    }
    kiln_rt_destroy(rt);
    TEST_END();
}

static void test_errors(void) {
    TEST_BEGIN("varlen forward: bad values name the field");
    kiln_rt *rt = open_rt(80);
    kiln_error e;
    kiln_attention_args a = fwd_args();
    kiln_attention_varlen vl = VL;
    CHECK(kiln_attention_forward_varlen(rt, &a, NULL, &e) == KILN_EINVAL && strstr(e.msg, "kiln_attention_varlen"),
          "NULL varlen: %s", e.msg);
    vl.cu_seqlens_k = 0;
    CHECK(kiln_attention_forward_varlen(rt, &a, &vl, &e) == KILN_EINVAL && strstr(e.msg, "cu_seqlens_q and cu_seqlens_k"),
          "no cu_seqlens_k: %s", e.msg);
    vl = VL;
    vl.cu_seqlens_q = 0x700002;
    CHECK(kiln_attention_forward_varlen(rt, &a, &vl, &e) == KILN_EINVAL && strstr(e.msg, "cu_seqlens_q (0x700002) must be 4-byte"),
          "misaligned: %s", e.msg);
    vl = VL;
    vl.total_q = 999;
    CHECK(kiln_attention_forward_varlen(rt, &a, &vl, &e) == KILN_EINVAL && strstr(e.msg, "cannot exceed total_q (999)"),
          "max_seqlen_q > total_q: %s", e.msg);
    vl = VL;
    vl.total_k = -1;
    CHECK(kiln_attention_forward_varlen(rt, &a, &vl, &e) == KILN_EINVAL && strstr(e.msg, "total_k (-1)"), "total_k -1: %s",
          e.msg);
    vl = VL;
    a.heads_kv = 3;
    CHECK(kiln_attention_forward_varlen(rt, &a, &vl, &e) == KILN_EINVAL && strstr(e.msg, "heads_q (8)"), "heads: %s", e.msg);
    a = fwd_args();
    a.batch = 0;
    fake.reset();
    CHECK(kiln_attention_forward_varlen(rt, &a, &vl, &e) == KILN_OK, "no sequences: %s", e.msg);
    fake_cuda_launch l;
    CHECK(!launch_at(0, &l), "no sequences: nothing launched (%s)", l.entry);
    kiln_rt_destroy(rt);
    TEST_END();
}

/* Dropout on packed sequences: rate, seed, offset and the mask output reach the forward and the dQ kernel
 * of the deterministic backward by name, with every mask key (15 scalars); the mask needs a rate. */
static void test_dropout(void) {
    TEST_BEGIN("varlen dropout: p, seed, offset, dropout_mask through forward and backward; every key with it");
    kiln_rt *rt = open_rt(80);
    kiln_error e;
    kiln_attention_args a = fwd_args();
    a.mask = (kiln_attention_mask){.window = 1, .window_left = 64, .window_right = 0, .softcap = 30,
                                   .alibi_slopes = 0x800000, .alibi_stride = 8, .dropout_p = 0.25f, .dropout_seed = 1234567,
                                   .dropout_offset = 1ull << 40};
    kiln_attention_varlen vl = VL;
    vl.dropout_mask = 0x900000;
    fake.reset();
    CHECK(rt && kiln_attention_forward_varlen(rt, &a, &vl, &e) == KILN_OK, "launch: %s", e.msg);
    kiln_kernel *k = NULL;
    CHECK(rt && kiln_rt_get_kernel(rt, "attention dtype=bf16 out=bf16 head_dim=128 causal=true window=true softcap=true "
                                       "alibi=true dropout=true dropout_mask=true varlen=true", &k, &e) == KILN_OK, "%s", e.msg);
    const kiln_kernel_meta *m = k ? kiln_kernel_get_meta(k) : NULL;
    fake_cuda_launch l;
    if (m && fake.last_launch(&l)) {
        CHECK(!strcmp(l.entry, m->entry), "launched %s, want %s", l.entry, m->entry);
        float p;
        uint32_t bits = (uint32_t)param(&l, m, "dropout_p");
        memcpy(&p, &bits, 4);
        CHECK(p == 0.25f && param(&l, m, "dropout_seed") == 1234567 && param(&l, m, "dropout_offset") == 1ull << 40,
              "dropout scalars: p %g seed %llu", p, (unsigned long long)param(&l, m, "dropout_seed"));
        CHECK(param(&l, m, "dropout_mask") == 0x900000 && param(&l, m, "max_seqlen_q") == 1000 &&
                  param(&l, m, "max_seqlen_k") == 1500 && param(&l, m, "cu_seqlens_q") == 0x700000,
              "mask [batch, heads_q, max_seqlen_q, max_seqlen_k] and the varlen arguments");
    } else {
        CHECK(0, "no launch recorded");
    }
    kiln_attention_bwd_args b = {.dq = 0x1000000, .dk = 0x1100000, .dv = 0x1200000, .q = 0x300000, .k = 0x400000,
                                 .v = 0x500000, .o = 0x100000, .dout = 0x1300000, .lse = 0x200000,
                                 .workspace = 0x2000000, .dtype = KILN_F16, .out_dtype = KILN_F16,
                                 .grad_dtype = KILN_F16, .head_dim = 64, .causal = 1, .batch = 3, .heads_q = 4,
                                 .heads_kv = 2, .seq_q = 700, .seq_k = 900, .deterministic = 1};
    b.mask = (kiln_attention_mask){.dropout_p = 0.5f, .dropout_seed = 9, .dropout_offset = 3};
    fake.reset();
    CHECK(kiln_attention_backward_varlen(rt, &b, &vl, &e) == KILN_OK, "backward: %s", e.msg);
    CHECK(kiln_rt_get_kernel(rt, "attention_bwd kernel=dq dtype=f16 out=f16 grad=f16 head_dim=64 causal=true "
                                 "dropout=true dropout_mask=true varlen=true", &k, &e) == KILN_OK, "%s", e.msg);
    m = kiln_kernel_get_meta(k);
    if (launch_at(2, &l)) {
        CHECK(!strcmp(l.entry, m->entry), "third launch %s, want the dq kernel %s", l.entry, m->entry);
        CHECK(param(&l, m, "dropout_seed") == 9 && param(&l, m, "dropout_offset") == 3 &&
                  param(&l, m, "dropout_mask") == 0x900000 && param(&l, m, "max_seqlen_k") == 900,
              "dq: dropout values and mask");
    } else {
        CHECK(0, "dq launch missing");
    }
    a.mask.dropout_p = 0;
    CHECK(kiln_attention_forward_varlen(rt, &a, &vl, &e) == KILN_EINVAL && strstr(e.msg, "dropout_mask is the keep mask"),
          "mask without a rate: %s", e.msg);
    vl.dropout_mask = 0x900002;
    b.mask.dropout_p = 0.5f;
    CHECK(kiln_attention_backward_varlen(rt, &b, &vl, &e) == KILN_EINVAL && strstr(e.msg, "dropout_mask (0x900002) must be 4-byte"),
          "misaligned mask: %s", e.msg);
    kiln_rt_destroy(rt);
    TEST_END();
}

/* path on the varlen helpers: the forward's kernel and the backward's dkdv at path=wgmma on a 9.0 device (the
 * launched entries are the wgmma kernels'); a bad value named. */
static void test_path(void) {
    TEST_BEGIN("varlen helpers with path=wgmma on sm_90a: the wgmma forward and dkdv launched; a bad path named");
    kiln_rt *rt = open_rt(90);
    kiln_error e = {0};
    kiln_attention_args a = fwd_args();
    a.path = KILN_ATTENTION_PATH_WGMMA;
    kiln_attention_varlen vl = VL;
    fake.reset();
    CHECK(rt && kiln_attention_forward_varlen(rt, &a, &vl, &e) == KILN_OK, "forward: %s", e.msg);
    kiln_kernel *k = NULL;
    fake_cuda_launch l;
    CHECK(kiln_rt_get_kernel(rt, "attention dtype=bf16 out=bf16 head_dim=128 causal=true varlen=true path=wgmma", &k, &e) == KILN_OK &&
              fake.last_launch(&l) && !strcmp(l.entry, kiln_kernel_get_meta(k)->entry),
          "the wgmma varlen forward launched: %s", e.msg);
    kiln_attention_bwd_args b = {.dq = 0x1000000, .dk = 0x1100000, .dv = 0x1200000, .q = 0x300000, .k = 0x400000,
                                 .v = 0x500000, .o = 0x100000, .dout = 0x1300000, .lse = 0x200000,
                                 .workspace = 0x2000000, .dtype = KILN_F16, .out_dtype = KILN_F16,
                                 .grad_dtype = KILN_F16, .head_dim = 64, .causal = 1, .batch = 3, .heads_q = 4,
                                 .heads_kv = 2, .seq_q = 700, .seq_k = 900, .path = KILN_ATTENTION_PATH_WGMMA};
    fake.reset();
    CHECK(kiln_attention_backward_varlen(rt, &b, &vl, &e) == KILN_OK, "backward: %s", e.msg);
    CHECK(kiln_rt_get_kernel(rt, "attention_bwd kernel=dkdv dtype=f16 out=f16 grad=f16 head_dim=64 causal=true path=wgmma deterministic=false varlen=true",
                             &k, &e) == KILN_OK && launch_at(1, &l) && !strcmp(l.entry, kiln_kernel_get_meta(k)->entry),
          "the wgmma varlen dkdv launched second: %s", e.msg);
    b.path = 9;
    CHECK(kiln_attention_backward_varlen(rt, &b, &vl, &e) == KILN_EINVAL && strstr(e.msg, "path (9)"), "bad path: %s", e.msg);
    kiln_rt_destroy(rt);
    TEST_END();
}

int main(void) {
    if (fake_cuda_open(&fake) != 0 || !(*(void **)&launch_at = dlsym(fake.dl, "fake_cuda_launch_at"))) {
        printf("attention varlen runtime: 0 passed, 1 failed\n");
        return 1;
    }
    kiln_rt_use_generator();
    test_forward(75);
    test_forward(80);
    test_forward(90);
    test_backward();
    test_backward_scaled();
    test_errors();
    test_dropout();
    test_path();
    return check_summary("attention varlen runtime");
}
