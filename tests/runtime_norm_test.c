/* tests/runtime_norm_test.c - the norm launch helpers (forward, backward with its two kernels) on the fake driver. */
#include <string.h>

#include "check.h"
#include "fake_cuda/fake_cuda.h"
#include "kiln/gen.h"
#include "kiln/runtime.h"
#include "rt_fixture.h"

static fake_cuda_api fake;

static int launches(void) {
    fake_cuda_counts c;
    fake.counters(&c);
    return c.launches;
}

static void test_forward(void) {
    TEST_BEGIN("norm forward helper: RMSNorm and LayerNorm with residual, variant, arguments");
    kiln_rt *rt = open_rt(80);
    kiln_error e = {0};
    kiln_kernel *k = NULL;
    fake_cuda_launch l;
    kiln_norm_fwd_args a = {.kind = KILN_NORM_RMSNORM, .y = 0x100000, .rstd = 0x200000, .x = 0x300000, .weight = 0x400000,
                            .rows = 100, .hidden = 4096, .x_dtype = KILN_BF16, .w_dtype = KILN_F32, .y_dtype = KILN_BF16,
                            .eps = 1e-6f};
    CHECK(kiln_norm_forward(rt, &a, &e) == KILN_OK, "%s", e.msg);
    CHECK(kiln_norm_forward_pick(rt, &a, &k, &e) == KILN_OK &&
              !strcmp(kiln_kernel_get_meta(k)->spec, "rmsnorm x=bf16 w=f32 y=bf16 hidden=4096 weight=true"),
          "%s", k ? kiln_kernel_get_meta(k)->spec : e.msg);
    float eps;
    CHECK(fake.last_launch(&l) && l.nparams == 7 && l.param[0] == a.y && l.param[1] == a.rstd && l.param[2] == a.x &&
              l.param[3] == a.weight && l.param[4] == 100 && l.param[5] == 4096,
          "arguments in the kernel's order");
    memcpy(&eps, &l.param[6], 4);
    CHECK(eps == 1e-6f, "eps %g", (double)eps);
    /* residual: both pointers, r dtype in the spec */
    a.kind = KILN_NORM_LAYERNORM, a.mean = 0x500000, a.bias = 0x600000, a.residual = 0x700000, a.h = 0x800000;
    a.r_dtype = KILN_F32;
    CHECK(kiln_norm_forward(rt, &a, &e) == KILN_OK, "%s", e.msg);
    CHECK(kiln_norm_forward_pick(rt, &a, &k, &e) == KILN_OK &&
              !strcmp(kiln_kernel_get_meta(k)->spec,
                      "layernorm x=bf16 w=f32 y=bf16 hidden=4096 weight=true bias=true residual=true r=f32"),
          "%s", k ? kiln_kernel_get_meta(k)->spec : e.msg);
    CHECK(fake.last_launch(&l) && l.nparams == 11 && l.param[9] == a.h && l.param[10] == a.residual, "h and residual last");
    /* offset = 1 (zero-centered weights): the spec says it, in the canonical place; other values refused */
    a.offset = 1;
    CHECK(kiln_norm_forward(rt, &a, &e) == KILN_OK, "%s", e.msg);
    CHECK(kiln_norm_forward_pick(rt, &a, &k, &e) == KILN_OK &&
              !strcmp(kiln_kernel_get_meta(k)->spec,
                      "layernorm x=bf16 w=f32 y=bf16 hidden=4096 weight=true bias=true offset=1 residual=true r=f32"),
          "%s", k ? kiln_kernel_get_meta(k)->spec : e.msg);
    a.offset = 2;
    CHECK(kiln_norm_forward(rt, &a, &e) == KILN_EINVAL && strstr(e.msg, "offset must be 0 or 1"), "%s", e.msg);
    a.offset = 1, a.weight = 0;
    CHECK(kiln_norm_forward(rt, &a, &e) == KILN_EINVAL && strstr(e.msg, "needs a weight"), "%s", e.msg);
    a.offset = 0, a.weight = 0x400000;
    /* misaligned h: the launch-time form */
    a.h += 4;
    CHECK(kiln_norm_forward_pick(rt, &a, &k, &e) == KILN_OK && strstr(kiln_kernel_get_meta(k)->spec, "hidden=launch"),
          "%s", e.msg);
    a.h -= 4;
    /* a per-row statistic needs only its element alignment: the fixed variant stays */
    a.mean += 4;
    CHECK(kiln_norm_forward_pick(rt, &a, &k, &e) == KILN_OK && strstr(kiln_kernel_get_meta(k)->spec, "hidden=4096"),
          "mean + 4: %s", e.msg);
    /* an f32 weight off its element alignment: no variant can take it, the error says which */
    a.mean -= 4, a.weight += 2;
    CHECK(kiln_norm_forward(rt, &a, &e) == KILN_EINVAL && strstr(e.msg, "weight (0x") && strstr(e.msg, "aligned"),
          "%s", e.msg);
    a.weight -= 2;
    a.h = 0;
    CHECK(kiln_norm_forward(rt, &a, &e) == KILN_EINVAL && strstr(e.msg, "residual and h"), "%s", e.msg);
    a.residual = 0;
    a.x_dtype = (kiln_dtype)9;
    CHECK(kiln_norm_forward(rt, &a, &e) == KILN_EINVAL && strstr(e.msg, "f32, f16 or bf16"), "%s", e.msg);
    kiln_rt_destroy(rt);
    TEST_END();
}

static void test_backward(void) {
    TEST_BEGIN("norm backward helper: two kernels, workspace size, grid, arguments");
    kiln_rt *rt = open_rt(90);
    kiln_error e = {0};
    kiln_kernel *k = NULL;
    fake_cuda_launch l;
    kiln_norm_bwd_args a = {.kind = KILN_NORM_LAYERNORM, .dx = 0x100000, .dweight = 0x200000, .dbias = 0x300000,
                            .dy = 0x400000, .x = 0x500000, .mean = 0x600000, .rstd = 0x700000, .weight = 0x800000,
                            .rows = 100000, .hidden = 4096, .x_dtype = KILN_BF16, .w_dtype = KILN_F32,
                            .dy_dtype = KILN_BF16, .dx_dtype = KILN_BF16};
    size_t need = 0;
    unsigned blocks = 0;
    CHECK(kiln_norm_backward_workspace(rt, &a, &need, &blocks, &e) == KILN_OK, "%s", e.msg);
    CHECK(kiln_norm_backward_pick(rt, &a, &k, &e) == KILN_OK, "%s", e.msg);
    const kiln_kernel_meta *m = k ? kiln_kernel_get_meta(k) : NULL;
    CHECK(m && !strcmp(m->spec, "layernorm_bwd x=bf16 w=f32 dy=bf16 dx=bf16 hidden=4096 weight=true bias=true") &&
              m->ws_slabs == 2 && !strcmp(m->then_spec, "norm_reduce w=f32"),
          "%s", m ? m->spec : e.msg);
    /* 108 multiprocessors (the fake) x 1024 / block threads */
    unsigned want_blocks = m ? 108 * (1024 / m->block[0]) : 0;
    CHECK(m && blocks == want_blocks && need == (size_t)2 * blocks * m->ws_rows_per_block * 4096 * 4,
          "blocks %u (want %u), %zu bytes", blocks, want_blocks, need);
    CHECK(kiln_norm_backward(rt, &a, &e) == KILN_EINVAL && strstr(e.msg, "workspace"), "no workspace: %s", e.msg);
    a.workspace = 0x10000000, a.workspace_bytes = need;
    int before = launches();
    CHECK(kiln_norm_backward(rt, &a, &e) == KILN_OK, "%s", e.msg);
    CHECK(launches() == before + 2, "two launches, got %d", launches() - before);
    CHECK(fake.last_launch(&l) && strstr(l.entry, "norm_reduce") && l.grid[0] == 4096 / 32 && l.grid[1] == 2 &&
              l.nparams == 5 && l.param[0] == a.dweight && l.param[1] == a.dbias && l.param[2] == a.workspace &&
              m && l.param[3] == (unsigned long long)blocks * m->ws_rows_per_block && l.param[4] == 4096,
          "reduce launch: %s grid %u x %u", l.entry, l.grid[0], l.grid[1]);
    /* few rows: one block per row group, a small workspace */
    a.rows = 3;
    CHECK(kiln_norm_backward_workspace(rt, &a, &need, &blocks, &e) == KILN_OK && m &&
              blocks == (3 + m->grid_tile[0] - 1) / m->grid_tile[0], "blocks %u", blocks);
    /* RMSNorm without weight: one kernel, no workspace */
    a.kind = KILN_NORM_RMSNORM, a.weight = a.dweight = a.dbias = 0, a.mean = 0;
    CHECK(kiln_norm_backward_workspace(rt, &a, &need, &blocks, &e) == KILN_OK && need == 0, "%zu", need);
    before = launches();
    CHECK(kiln_norm_backward(rt, &a, &e) == KILN_OK && launches() == before + 1, "%s", e.msg);
    CHECK(fake.last_launch(&l) && strstr(l.entry, "rmsnorm_bwd"), "%s", l.entry);
    /* residual form, dres */
    a.dres = 0x900000, a.r_dtype = KILN_F32;
    CHECK(kiln_norm_backward_pick(rt, &a, &k, &e) == KILN_OK && strstr(kiln_kernel_get_meta(k)->spec, "residual=true r=f32"),
          "%s", e.msg);
    a.offset = 1;
    CHECK(kiln_norm_backward(rt, &a, &e) == KILN_EINVAL && strstr(e.msg, "needs a weight"), "%s", e.msg);
    a.weight = 0x800000, a.dweight = 0x200000;
    CHECK(kiln_norm_backward_pick(rt, &a, &k, &e) == KILN_OK &&
              !strcmp(kiln_kernel_get_meta(k)->spec,
                      "rmsnorm_bwd x=bf16 w=f32 dy=bf16 dx=bf16 hidden=4096 weight=true offset=1 residual=true r=f32"),
          "%s", k ? kiln_kernel_get_meta(k)->spec : e.msg);
    a.offset = 0, a.dweight = 0;
    CHECK(kiln_norm_backward(rt, &a, &e) == KILN_EINVAL && strstr(e.msg, "dweight"), "%s", e.msg);
    a.kind = KILN_NORM_LAYERNORM;
    CHECK(kiln_norm_backward(rt, &a, &e) == KILN_EINVAL && strstr(e.msg, "mean"), "%s", e.msg);
    kiln_rt_destroy(rt);
    TEST_END();
}

int main(void) {
    if (fake_cuda_open(&fake) != 0) {
        printf("runtime_norm: 0 passed, 1 failed\n");
        return 1;
    }
    kiln_rt_use_generator();
    test_forward();
    test_backward();
    return check_summary("runtime_norm");
}
