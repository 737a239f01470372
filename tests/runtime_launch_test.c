/* tests/runtime_launch_test.c - the generic launch (kiln_launch, docs/registry.md) on the fake driver: the same launches as the typed helpers, and its errors. */
#include <string.h>

#include "check.h"
#include "fake_cuda/fake_cuda.h"
#include "kiln/gen.h"
#include "kiln/runtime.h"
#include "rt_fixture.h"

static fake_cuda_api fake;
static fake_cuda_launch_at_fn launch_at;

typedef struct record {
    int n;
    fake_cuda_launch l[16];
} record;

static void take(record *r) {
    fake_cuda_counts c;
    fake.counters(&c);
    r->n = c.launches;
    for (int i = 0; i < r->n && i < 16; i++) launch_at(i, &r->l[i]);
    fake.reset();
}

/* Both records hold the same launches: entry, grid, block, shared memory and every argument. */
static void same(const record *a, const record *b, const char *what) {
    CHECK(a->n == b->n && a->n > 0, "%s: %d launches by the helper, %d by kiln_launch", what, a->n, b->n);
    for (int i = 0; i < a->n && i < b->n && i < 16; i++) {
        const fake_cuda_launch *x = &a->l[i], *y = &b->l[i];
        CHECK(!strcmp(x->entry, y->entry) && !memcmp(x->grid, y->grid, sizeof x->grid) && x->smem == y->smem &&
                  x->nparams == y->nparams && !memcmp(x->param, y->param, sizeof x->param),
              "%s, launch %d: %s grid %u %u %u vs %s grid %u %u %u", what, i, x->entry, x->grid[0], x->grid[1], x->grid[2],
              y->entry, y->grid[0], y->grid[1], y->grid[2]);
        for (int p = 0; p < x->nparams && p < y->nparams; p++)
            if (x->param[p] != y->param[p]) CHECK(0, "%s, launch %d, argument %d: %llx vs %llx", what, i, p,
                                                  (unsigned long long)x->param[p], (unsigned long long)y->param[p]);
    }
}

#define T(n, p) {.name = n, .ptr = p}
#define S(n, v) {.name = n, .value = v}
#define ARGS(t, s) {.tensors = t, .ntensors = (int)(sizeof t / sizeof t[0]), .scalars = s, .nscalars = (int)(sizeof s / sizeof s[0])}

static void test_norms(void) {
    TEST_BEGIN("kiln_launch: the norms' launches are the typed helpers'");
    kiln_rt *rt = open_rt(90);
    kiln_error e = {0};
    record a, b;
    fake.reset();
    kiln_norm_fwd_args f = {.kind = KILN_NORM_LAYERNORM, .y = 0x100000, .mean = 0x180000, .rstd = 0x200000, .x = 0x300000,
                            .weight = 0x400000, .bias = 0x480000, .residual = 0x700000, .h = 0x800000, .rows = 100,
                            .hidden = 4096, .x_dtype = KILN_BF16, .w_dtype = KILN_F32, .y_dtype = KILN_BF16,
                            .r_dtype = KILN_F32, .eps = 1e-6f};
    CHECK(kiln_norm_forward(rt, &f, &e) == KILN_OK, "%s", e.msg);
    take(&a);
    kiln_launch_tensor ft[] = {T("y", f.y), T("mean", f.mean), T("rstd", f.rstd), T("x", f.x), T("weight", f.weight),
                               T("bias", f.bias), T("residual", f.residual), T("h", f.h)};
    kiln_launch_scalar fs[] = {S("rows", 100), S("hidden", 4096), S("eps", 1e-6)};
    kiln_launch_args fa = ARGS(ft, fs);
    CHECK(kiln_launch_spec(rt, "layernorm x=bf16 w=f32 hidden=4096 residual=true r=f32", &fa, &e) == KILN_OK, "%s", e.msg);
    take(&b);
    same(&a, &b, "layernorm residual");
    /* the default eps is 1e-5, as the typed helper's callers pass it */
    f.kind = KILN_NORM_RMSNORM, f.mean = f.bias = f.residual = f.h = 0, f.eps = 1e-5f, f.hidden = 1000;
    CHECK(kiln_norm_forward(rt, &f, &e) == KILN_OK, "%s", e.msg);
    take(&a);
    kiln_launch_tensor rt_[] = {T("y", f.y), T("rstd", f.rstd), T("x", f.x), T("weight", f.weight)};
    kiln_launch_scalar rs[] = {S("rows", 100), S("hidden", 1000)};
    kiln_launch_args ra = ARGS(rt_, rs);
    CHECK(kiln_launch_spec(rt, "rmsnorm x=bf16 w=f32 hidden=1000", &ra, &e) == KILN_OK, "%s", e.msg);
    take(&b);
    same(&a, &b, "rmsnorm, default eps");

    kiln_norm_bwd_args g = {.kind = KILN_NORM_LAYERNORM, .dx = 0x100000, .dweight = 0x200000, .dbias = 0x300000,
                            .dy = 0x400000, .x = 0x500000, .mean = 0x600000, .rstd = 0x700000, .weight = 0x800000,
                            .rows = 100000, .hidden = 4096, .x_dtype = KILN_BF16, .w_dtype = KILN_F32,
                            .dy_dtype = KILN_BF16, .dx_dtype = KILN_BF16, .workspace = 0x10000000};
    size_t need = 0, need2 = 1;
    CHECK(kiln_norm_backward_workspace(rt, &g, &need, NULL, &e) == KILN_OK, "%s", e.msg);
    g.workspace_bytes = need;
    CHECK(kiln_norm_backward(rt, &g, &e) == KILN_OK, "%s", e.msg);
    take(&a);
    kiln_launch_tensor bt[] = {T("dx", g.dx), T("dweight", g.dweight), T("dbias", g.dbias), T("dy", g.dy), T("x", g.x),
                               T("mean", g.mean), T("rstd", g.rstd), T("weight", g.weight)};
    kiln_launch_scalar bs[] = {S("rows", 100000), S("hidden", 4096)};
    kiln_launch_args ba = ARGS(bt, bs);
    kiln_kernel *k = NULL;
    CHECK(kiln_rt_get_kernel(rt, "layernorm_bwd x=bf16 w=f32 hidden=4096", &k, &e) == KILN_OK, "%s", e.msg);
    CHECK(k && kiln_launch_workspace(k, &ba, &need2, &e) == KILN_OK && need2 == need, "workspace %zu vs %zu: %s", need2,
          need, e.msg);
    ba.workspace = g.workspace, ba.workspace_bytes = need;
    CHECK(k && kiln_launch(k, &ba, &e) == KILN_OK, "%s", e.msg);
    take(&b);
    same(&a, &b, "layernorm backward + norm_reduce");
    /* errors: each names what is wrong */
    ba.workspace_bytes = need - 4;
    CHECK(k && kiln_launch(k, &ba, &e) == KILN_EINVAL && strstr(e.msg, "needs a workspace of"), "%s", e.msg);
    ba.workspace_bytes = need;
    bs[1].value = 1024;
    CHECK(k && kiln_launch(k, &ba, &e) == KILN_EINVAL && strstr(e.msg, "generated for hidden = 4096, the launch gives 1024"),
          "%s", e.msg);
    bs[1].value = 4096.5;
    CHECK(k && kiln_launch(k, &ba, &e) == KILN_EINVAL && strstr(e.msg, "'hidden' = 4096.5 must be an integer"), "%s", e.msg);
    bs[1].value = 4096;
    bt[1].name = "dweights";
    CHECK(k && kiln_launch(k, &ba, &e) == KILN_EINVAL && strstr(e.msg, "takes no tensor 'dweights'"), "%s", e.msg);
    bt[1].name = "dweight", bt[3].name = "dY";
    CHECK(k && kiln_launch(k, &ba, &e) == KILN_EINVAL && strstr(e.msg, "takes no tensor 'dY'"), "%s", e.msg);
    bt[3].ptr = 0;
    CHECK(k && kiln_launch(k, &ba, &e) == KILN_EINVAL && strstr(e.msg, "needs the tensor 'dy' (in, 409600000 elements of bf16)"),
          "%s", e.msg);
    bt[3].name = "dy", bt[3].ptr = g.dy + 2;
    CHECK(k && kiln_launch(k, &ba, &e) == KILN_EINVAL && strstr(e.msg, "tensor dy (0x400002) is not 16-byte aligned"),
          "%s", e.msg);
    bt[3].ptr = g.dy;
    ba.nscalars = 1;
    CHECK(k && kiln_launch(k, &ba, &e) == KILN_OK, "hidden is fixed: its default serves: %s", e.msg);
    ba.nscalars = 0;
    CHECK(k && kiln_launch(k, &ba, &e) == KILN_EINVAL && strstr(e.msg, "needs the scalar 'rows' (no default)"), "%s", e.msg);
    fake.reset();
    kiln_rt_destroy(rt);
    TEST_END();
}

static void test_attention(void) {
    TEST_BEGIN("kiln_launch: attention forward, split-KV and backward launch as the typed helpers do");
    kiln_rt *rt = open_rt(80);
    kiln_error e = {0};
    record a, b;
    fake.reset();
    kiln_attention_args f = {.o = 0x100000, .lse = 0x200000, .q = 0x300000, .k = 0x400000, .v = 0x500000, .batch = 2,
                             .heads_q = 8, .heads_kv = 2, .seq_q = 1, .seq_k = 4096, .head_dim = 128, .dtype = KILN_BF16,
                             .out_dtype = KILN_BF16};
    CHECK(kiln_attention_forward(rt, &f, &e) == KILN_OK, "%s", e.msg);
    take(&a);
    kiln_launch_tensor t[] = {T("o", f.o), T("lse", f.lse), T("q", f.q), T("k", f.k), T("v", f.v)};
    kiln_launch_scalar s[] = {S("batch", 2), S("heads_q", 8), S("heads_kv", 2), S("seq_q", 1), S("seq_k", 4096), S("splits", 5)};
    kiln_launch_args fa = ARGS(t, s);
    fa.nscalars = 5;
    CHECK(kiln_launch_spec(rt, "attention dtype=bf16 head_dim=128", &fa, &e) == KILN_OK, "%s", e.msg);
    take(&b);
    same(&a, &b, "attention forward");
    /* strides given: q as [batch, heads, seq, head_dim] */
    f.stride_q[0] = 8 * 1 * 128, f.stride_q[1] = 128, f.stride_q[2] = 1 * 128;
    CHECK(kiln_attention_forward(rt, &f, &e) == KILN_OK, "%s", e.msg);
    take(&a);
    t[2].strides[0] = 8 * 128, t[2].strides[1] = 128, t[2].strides[2] = 128, t[2].strides[3] = 1;
    CHECK(kiln_launch_spec(rt, "attention dtype=bf16 head_dim=128", &fa, &e) == KILN_OK, "%s", e.msg);
    take(&b);
    same(&a, &b, "attention forward, strided q");
    /* split-KV: the split kernel and attention_combine */
    size_t need = 0, need2 = 0;
    CHECK(kiln_attention_forward_workspace(rt, &f, 5, NULL, &need, &e) == KILN_OK, "%s", e.msg);
    CHECK(kiln_attention_forward_splitkv(rt, &f, 5, 0x40000000, need, &e) == KILN_OK, "%s", e.msg);
    take(&a);
    kiln_kernel *k = NULL;
    fa.nscalars = 6, fa.workspace = 0x40000000, fa.workspace_bytes = need;
    CHECK(kiln_rt_get_kernel(rt, "attention dtype=bf16 head_dim=128 splitkv=true", &k, &e) == KILN_OK, "%s", e.msg);
    CHECK(k && kiln_launch_workspace(k, &fa, &need2, &e) == KILN_OK && need2 == need, "%zu vs %zu", need2, need);
    CHECK(k && kiln_launch(k, &fa, &e) == KILN_OK, "%s", e.msg);
    take(&b);
    same(&a, &b, "split-KV + attention_combine");
    fa.nscalars = 5;
    CHECK(k && kiln_launch(k, &fa, &e) == KILN_EINVAL && strstr(e.msg, "needs the scalar 'splits'"), "%s", e.msg);
    fake.reset();
    /* backward: prep, dkdv, convert; deterministic: prep, dkdv, dq */
    for (int det = 0; det < 2; det++) {
        kiln_attention_bwd_args g = {.dq = 0x1000000, .dk = 0x2000000, .dv = 0x3000000, .q = 0x4000000, .k = 0x5000000,
                                     .v = 0x6000000, .o = 0x7000000, .dout = 0x8000000, .lse = 0x9000000,
                                     .workspace = 0xa000000, .dtype = KILN_BF16, .out_dtype = KILN_BF16,
                                     .grad_dtype = KILN_BF16, .batch = 2, .heads_q = 8, .heads_kv = 2, .seq_q = 300,
                                     .seq_k = 500, .head_dim = 64, .causal = 1, .deterministic = det, .scale = 0.1f};
        CHECK(kiln_attention_backward(rt, &g, &e) == KILN_OK, "%s", e.msg);
        take(&a);
        kiln_launch_tensor bt[] = {T("dq", g.dq), T("dk", g.dk), T("dv", g.dv), T("q", g.q), T("k", g.k), T("v", g.v),
                                   T("o", g.o), T("dout", g.dout), T("lse", g.lse)};
        kiln_launch_scalar bs[] = {S("batch", 2), S("heads_q", 8), S("heads_kv", 2), S("seq_q", 300), S("seq_k", 500),
                                   S("scale", 0.1f)};
        kiln_launch_args ba = ARGS(bt, bs);
        ba.workspace = g.workspace;
        CHECK(kiln_attention_backward_workspace_on(rt, &g, &ba.workspace_bytes, &e) == KILN_OK, "%s", e.msg);
        CHECK(kiln_rt_get_kernel(rt, det ? "attention_bwd dtype=bf16 head_dim=64 causal=true deterministic=true"
                                         : "attention_bwd dtype=bf16 head_dim=64 causal=true", &k, &e) == KILN_OK, "%s", e.msg);
        CHECK(k && kiln_launch_workspace(k, &ba, &need2, &e) == KILN_OK && need2 == ba.workspace_bytes, "%zu vs %zu",
              need2, ba.workspace_bytes);
        kiln_attention_bwd_args unset = g; /* the size query before the workspace is allocated */
        size_t before = 0;
        unset.workspace = 0;
        CHECK(kiln_attention_backward_workspace_on(rt, &unset, &before, &e) == KILN_OK && before == need2, "%zu vs %zu: %s",
              before, need2, e.msg);
        /* the any-device bound holds it (bf16: plus the f16-scaled rows only sm_75's kernels declare) */
        CHECK(kiln_attention_backward_workspace(&g) > need2, "%zu vs %zu", kiln_attention_backward_workspace(&g), need2);
        CHECK(k && kiln_launch(k, &ba, &e) == KILN_OK, "%s", e.msg);
        take(&b);
        same(&a, &b, det ? "attention backward, deterministic" : "attention backward");
    }
    kiln_rt_destroy(rt);
    TEST_END();
}

static void test_old_meta(void) {
    TEST_BEGIN("kiln_launch: a module without a launch description is refused by name");
    kiln_rt *rt = open_rt(80);
    kiln_error e = {0};
    kiln_gen *g = NULL;
    kiln_module *m = NULL;
    CHECK(kiln_gen_create(&g, NULL, &e) == KILN_OK && kiln_generate(g, "rmsnorm x=f16 hidden=64", 80, KILN_EMIT_PTX, &m, &e) == KILN_OK,
          "%s", e.msg);
    kiln_kernel_meta meta = *kiln_module_meta(m);
    meta.launch[0] = 0; /* as a kiln before the registry wrote it */
    kiln_kernel *k = NULL;
    CHECK(kiln_rt_load_module(rt, kiln_module_text(m), kiln_module_size(m) + 1, KILN_PAYLOAD_PTX, &meta, &k, &e) == KILN_OK,
          "%s", e.msg);
    kiln_launch_args a = {0};
    CHECK(k && kiln_launch(k, &a, &e) == KILN_EINVAL && strstr(e.msg, "carries no launch description"), "%s", e.msg);
    kiln_module_free(m);
    kiln_gen_destroy(g);
    kiln_rt_destroy(rt);
    TEST_END();
}

int main(void) {
    if (fake_cuda_open(&fake) != 0 || !(*(void **)&launch_at = dlsym(fake.dl, "fake_cuda_launch_at"))) {
        printf("runtime_launch: 0 passed, 1 failed\n");
        return 1;
    }
    kiln_rt_use_generator();
    test_norms();
    test_attention();
    test_old_meta();
    return check_summary("runtime_launch");
}
