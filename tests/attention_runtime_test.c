/* tests/attention_runtime_test.c - the attention launch helper against the fake CUDA driver:
 * spec per dtype and SM, grid, arguments in the kernel's order, default strides and scale, errors. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "fake_cuda/fake_cuda.h"
#include "kiln/gen.h"
#include "kiln/runtime.h"
#include "rt_fixture.h"

static fake_cuda_api fake;

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
    a.q += 8; /* bf16: 4 elements off, not 16-byte aligned */
    CHECK(kiln_attention_forward(rt, &a, &e) == KILN_EINVAL && strstr(e.msg, "q (0x") && strstr(e.msg, "aligned"),
          "misaligned q: %s", e.msg);
    a.q -= 8;
    a.stride_q[1] = 129;
    CHECK(kiln_attention_forward(rt, &a, &e) == KILN_EINVAL && strstr(e.msg, "sequence stride"), "odd stride: %s", e.msg);
    a.stride_q[1] = 128;
    a.heads_kv = 3;
    CHECK(kiln_attention_forward(rt, &a, &e) == KILN_EINVAL && strstr(e.msg, "multiple"), "heads: %s", e.msg);
    a.heads_kv = 2;
    a.head_dim = 80;
    CHECK(kiln_attention_forward(rt, &a, &e) != KILN_OK && strstr(e.msg, "head_dim"), "head_dim 80: %s", e.msg);
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

int main(void) {
    if (fake_cuda_open(&fake) != 0) {
        printf("attention runtime: 0 passed, 1 failed\n");
        return 1;
    }
    kiln_rt_use_generator();
    test_launch(75);
    test_launch(80);
    test_launch(90);
    test_strides_and_errors();
    return check_summary("attention runtime");
}
