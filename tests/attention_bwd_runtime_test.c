/* tests/attention_bwd_runtime_test.c - the attention backward launch helper against the fake CUDA
 * driver: the three kernels in order, their grids and arguments, workspace, deterministic
 * sequence, empty sides, errors. */
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

static int param_index(const kiln_kernel_meta *m, const char *name) {
    for (int i = 0; i < m->nparams; i++)
        if (!strcmp(m->params[i].name, name)) return i;
    return -1;
}

static uint64_t param(const fake_cuda_launch *l, const kiln_kernel_meta *m, const char *name) {
    int i = param_index(m, name);
    return i < 0 ? ~0ull : l->param[i];
}

static kiln_attention_bwd_args gqa_args(void) {
    kiln_attention_bwd_args a = {.dq = 0x1000000, .dk = 0x2000000, .dv = 0x3000000, .q = 0x4000000, .k = 0x5000000,
                                 .v = 0x6000000, .o = 0x7000000, .dout = 0x8000000, .lse = 0x9000000,
                                 .workspace = 0xa000000, .dtype = KILN_BF16, .out_dtype = KILN_BF16,
                                 .grad_dtype = KILN_BF16, .head_dim = 128, .causal = 1, .batch = 3, .heads_q = 8,
                                 .heads_kv = 2, .seq_q = 1000, .seq_k = 1500};
    return a;
}

static int launches(void) {
    fake_cuda_counts c;
    fake.counters(&c);
    return c.launches;
}

static void test_sequence(int sm, int det) {
    char name[96];
    snprintf(name, sizeof name, "attention backward helper on sm_%d%s: kernels, grids, arguments", sm,
             det ? ", deterministic" : "");
    TEST_BEGIN(name);
    kiln_rt *rt = open_rt(sm);
    kiln_error e = {0};
    kiln_attention_bwd_args a = gqa_args();
    a.deterministic = det;
    kiln_kernel *ks[3] = {NULL, NULL, NULL};
    size_t rows = 3 * 8 * 1000;
    size_t ws = kiln_attention_backward_workspace(&a);
    /* then bf16's Q and dO as prep scales them once (qh, doh f16 [rows, 128], qsf, dosf f32 [rows]): read by the
     * f16-scaled dkdv on sm_75 (at d128 the atomic one too, in two passes), an upper bound elsewhere; each workspace
     * tensor 256-byte aligned */
    /* deterministic: then K and V as the dkdv scales them once for dq (kh, vh f16 [keys, 128], ksf, vsf f32 [keys]) */
    size_t keys = 3 * 2 * 1500, off[9] = {((rows * 4 + 255) / 256 * 256) + (det ? 0 : rows * 128 * 4)};
    const size_t each[8] = {rows * 128 * 2, rows * 128 * 2, rows * 4, rows * 4, keys * 128 * 2, keys * 128 * 2, keys * 4, keys * 4};
    int nws = det ? 8 : 4;
    for (int i = 0; i < nws; i++) off[i] = (off[i] + 255) / 256 * 256, off[i + 1] = off[i] + each[i];
    CHECK(ws == off[nws], "workspace %zu bytes, expected %zu", ws, off[nws]);
    size_t exact = 0;
    CHECK(rt && kiln_attention_backward_workspace_on(rt, &a, &exact, &e) == KILN_OK, "workspace_on: %s", e.msg);
    CHECK(sm == 75 ? exact == ws : exact < ws, "sm_%d: the kernels declare %zu bytes, the any-device bound %zu", sm, exact, ws);
    fake.reset();
    CHECK(rt && kiln_attention_backward(rt, &a, &e) == KILN_OK, "launch: %s", e.msg);
    CHECK(launches() == 3, "%d launches", launches());
    CHECK(kiln_attention_backward_pick(rt, &a, ks, &e) == KILN_OK, "pick: %s", e.msg);
    static const char *kernels[2][3] = {{"kernel=prep", "kernel=dkdv", "kernel=convert"}, {"kernel=prep", "kernel=dkdv", "kernel=dq"}};
    kiln_devptr dq_acc = det ? 0 : a.workspace + (rows * 4 + 255) / 256 * 256;
    for (int i = 0; i < 3 && ks[0]; i++) {
        const kiln_kernel_meta *m = kiln_kernel_get_meta(ks[i]);
        fake_cuda_launch l;
        CHECK(strstr(m->spec, kernels[det][i]) && strstr(m->spec, "dtype=bf16") && strstr(m->spec, "head_dim=128") &&
                  strstr(m->spec, "causal=true"), "kernel %d spec %s", i, m->spec);
        CHECK(strstr(m->spec, i == 1 && det ? "deterministic=true" : "deterministic=false"), "kernel %d spec %s", i, m->spec);
        if (!launch_at(i, &l)) {
            CHECK(0, "launch %d not recorded", i);
            continue;
        }
        CHECK(!strcmp(l.entry, m->entry), "launch %d ran %s, expected %s", i, l.entry, m->entry);
        unsigned rows_x = i == 1 ? 1500 : 1000, heads = i == 1 ? 2 : 8;
        CHECK(l.grid[0] == (rows_x + m->grid_tile[0] - 1) / m->grid_tile[0] && l.grid[1] == heads && l.grid[2] == 3,
              "launch %d grid %u %u %u", i, l.grid[0], l.grid[1], l.grid[2]);
        CHECK(l.block[0] == m->block[0] && l.smem == m->dynamic_smem, "launch %d block %u smem %u", i, l.block[0], l.smem);
        if (param_index(m, "delta") >= 0) CHECK(param(&l, m, "delta") == a.workspace, "launch %d delta", i);
        if (param_index(m, "dq_acc") >= 0) CHECK(param(&l, m, "dq_acc") == dq_acc, "launch %d dq_acc 0x%llx", i,
                                                 (unsigned long long)param(&l, m, "dq_acc"));
        static const char *ptrs[] = {"q", "k", "v", "o", "dout", "lse", "dq", "dk", "dv"};
        kiln_devptr want[] = {a.q, a.k, a.v, a.o, a.dout, a.lse, a.dq, a.dk, a.dv};
        for (int p = 0; p < 9; p++)
            if (param_index(m, ptrs[p]) >= 0) CHECK(param(&l, m, ptrs[p]) == want[p], "launch %d pointer %s", i, ptrs[p]);
        /* sm_75's f16-scaled prep and dkdv (the atomic dkdv at d128 too: its two passes) */
        static const char *scaled[] = {"qh", "doh", "qsf", "dosf"};
        for (int p = 0; p < 4; p++)
            if (param_index(m, scaled[p]) >= 0 || (sm == 75 && i < 2))
                CHECK(param(&l, m, scaled[p]) == (sm == 75 ? a.workspace + off[p] : 0), "launch %d pointer %s 0x%llx",
                      i, scaled[p], (unsigned long long)param(&l, m, scaled[p]));
        static const char *kv[] = {"kh", "vh", "ksf", "vsf"}; /* sm_75's deterministic dkdv writes them, dq reads them */
        for (int p = 0; p < 4; p++)
            if (param_index(m, kv[p]) >= 0 || (sm == 75 && det && i > 0))
                CHECK(param(&l, m, kv[p]) == (sm == 75 && det ? a.workspace + off[4 + p] : 0), "launch %d pointer %s 0x%llx",
                      i, kv[p], (unsigned long long)param(&l, m, kv[p]));
        if (param_index(m, "heads_kv") >= 0) CHECK(param(&l, m, "heads_kv") == 2, "heads_kv");
        if (param_index(m, "seq_k") >= 0) CHECK(param(&l, m, "seq_k") == 1500, "seq_k");
        CHECK(param(&l, m, "heads_q") == 8 && param(&l, m, "seq_q") == 1000, "launch %d sizes", i);
        /* default strides: [batch, seq, heads, head_dim] */
        if (param_index(m, "stride_dks") >= 0)
            CHECK(param(&l, m, "stride_dks") == 2 * 128 && param(&l, m, "stride_dkb") == 1500ull * 2 * 128 &&
                      param(&l, m, "stride_dvh") == 128, "dk/dv strides");
        if (param_index(m, "stride_douts") >= 0)
            CHECK(param(&l, m, "stride_douts") == 8 * 128 && param(&l, m, "stride_doutb") == 1000ull * 8 * 128,
                  "dout strides");
        if (param_index(m, "stride_dqs") >= 0) CHECK(param(&l, m, "stride_dqs") == 8 * 128, "dq strides");
        if (param_index(m, "scale") >= 0) {
            uint32_t bits = (uint32_t)param(&l, m, "scale");
            float scale;
            memcpy(&scale, &bits, 4);
            CHECK(fabsf(scale - 1.0f / sqrtf(128.0f)) < 1e-7f, "default scale %g", scale);
        }
    }
    kiln_rt_destroy(rt);
    TEST_END();
}

static void test_edges_and_errors(void) {
    TEST_BEGIN("attention backward helper: empty sides, given strides, errors");
    kiln_rt *rt = open_rt(80);
    kiln_error e = {0};
    kiln_attention_bwd_args a = gqa_args();
    fake_cuda_launch l;
    kiln_kernel *ks[3];
    /* no keys: dQ must still be written (zeros) - prep and convert run, dkdv does not */
    a.seq_k = 0;
    fake.reset();
    CHECK(kiln_attention_backward(rt, &a, &e) == KILN_OK && launches() == 2, "seq_k 0: %d launches (%s)", launches(), e.msg);
    /* no queries: dK and dV are zeros from dkdv alone; no workspace needed */
    a.seq_k = 1500, a.seq_q = 0, a.workspace = 0;
    fake.reset();
    CHECK(kiln_attention_backward(rt, &a, &e) == KILN_OK && launches() == 1, "seq_q 0: %d launches (%s)", launches(), e.msg);
    CHECK(launch_at(0, &l) && strstr(l.entry, "dkdv"), "seq_q 0 runs dkdv");
    a = gqa_args();
    /* given strides pass through; dq with its own layout */
    int64_t dqs[3] = {8ll * 1000 * 128, 128, 1000ll * 128};
    memcpy(a.stride_dq, dqs, sizeof dqs);
    a.scale = 0.25f;
    fake.reset();
    CHECK(kiln_attention_backward(rt, &a, &e) == KILN_OK, "bhsd dq: %s", e.msg);
    if (kiln_attention_backward_pick(rt, &a, ks, &e) == KILN_OK && launch_at(2, &l)) {
        const kiln_kernel_meta *m = kiln_kernel_get_meta(ks[2]);
        uint32_t bits = (uint32_t)param(&l, m, "scale");
        float scale;
        memcpy(&scale, &bits, 4);
        CHECK(param(&l, m, "stride_dqs") == 128 && param(&l, m, "stride_dqh") == 1000ull * 128 && scale == 0.25f,
              "given dq strides and scale passed to convert");
    } else {
        CHECK(0, "no convert launch");
    }
    a = gqa_args();
    a.workspace = 0;
    CHECK(kiln_attention_backward(rt, &a, &e) == KILN_EINVAL && strstr(e.msg, "workspace"), "no workspace: %s", e.msg);
    a.workspace = 0xa000008;
    CHECK(kiln_attention_backward(rt, &a, &e) == KILN_EINVAL && strstr(e.msg, "16-byte"), "odd workspace: %s", e.msg);
    a = gqa_args();
    a.lse = 0;
    CHECK(kiln_attention_backward(rt, &a, &e) == KILN_EINVAL && strstr(e.msg, "lse"), "no lse: %s", e.msg);
    a = gqa_args();
    a.dout = 0;
    CHECK(kiln_attention_backward(rt, &a, &e) == KILN_EINVAL && strstr(e.msg, "dout must be"), "null dout: %s", e.msg);
    a = gqa_args();
    a.q += 4; /* bf16: 2 elements off; the main kernels load 4 elements (8 bytes) at a time */
    CHECK(kiln_attention_backward(rt, &a, &e) == KILN_EINVAL && strstr(e.msg, "q (0x") && strstr(e.msg, "aligned"),
          "misaligned q: %s", e.msg);
    a = gqa_args();
    a.heads_kv = 3;
    CHECK(kiln_attention_backward(rt, &a, &e) == KILN_EINVAL && strstr(e.msg, "multiple"), "heads: %s", e.msg);
    a = gqa_args();
    a.head_dim = 44; /* any multiple of 8 up to 256 is taken (padded tiles); 44 is not one */
    CHECK(kiln_attention_backward(rt, &a, &e) != KILN_OK && strstr(e.msg, "head_dim=44: must be a multiple of 8"),
          "head_dim 44: %s", e.msg);
    a = gqa_args();
    a.head_dim = 80;
    CHECK(kiln_attention_backward(rt, &a, &e) == KILN_OK, "head_dim 80 (Phi-2) launches: %s", e.msg);
    a = gqa_args();
    a.head_dim = 192, a.v_head_dim = 128; /* MLA: every kernel of the sequence names v_head_dim */
    kiln_kernel *vk[3] = {NULL, NULL, NULL};
    CHECK(kiln_attention_backward(rt, &a, &e) == KILN_OK && kiln_attention_backward_pick(rt, &a, vk, &e) == KILN_OK &&
              strstr(kiln_kernel_get_meta(vk[0])->spec, "head_dim=192 v_head_dim=128") &&
              strstr(kiln_kernel_get_meta(vk[1])->spec, "head_dim=192 v_head_dim=128") &&
              strstr(kiln_kernel_get_meta(vk[2])->spec, "head_dim=192 v_head_dim=128"), "v_head_dim: %s", e.msg);
    a = gqa_args();
    a.seq_q = -1;
    CHECK(kiln_attention_backward(rt, &a, &e) == KILN_EINVAL && strstr(e.msg, "seq_q"), "%s", e.msg);
    a = gqa_args();
    fake.fail("launch", "launch_failed", 1);
    CHECK(kiln_attention_backward(rt, &a, &e) != KILN_OK && strstr(e.msg, "cuLaunchKernel"), "driver error: %s", e.msg);
    kiln_rt_destroy(rt);
    TEST_END();
}

/* Issue 24's keys: dkdv and dq carry them in their specs and get their values; prep and convert not. */
static void test_mask(int det) {
    char name[96];
    snprintf(name, sizeof name, "attention backward helper%s: top-left causal, window, softcap, ALiBi",
             det ? ", deterministic" : "");
    TEST_BEGIN(name);
    kiln_rt *rt = open_rt(80);
    kiln_error e = {0};
    kiln_attention_bwd_args a = gqa_args();
    a.deterministic = det;
    a.causal = KILN_CAUSAL_TOP_LEFT;
    a.mask = (kiln_attention_mask){.window = 1, .window_left = 256, .window_right = 0, .softcap = 20.0f,
                                   .alibi_slopes = 0xb000000, .alibi_stride = 8};
    kiln_kernel *ks[3] = {NULL, NULL, NULL};
    fake.reset();
    CHECK(rt && kiln_attention_backward(rt, &a, &e) == KILN_OK && launches() == 3, "launch: %s", e.msg);
    CHECK(kiln_attention_backward_pick(rt, &a, ks, &e) == KILN_OK, "pick: %s", e.msg);
    for (int i = 0; i < 3 && ks[2]; i++) {
        const kiln_kernel_meta *m = kiln_kernel_get_meta(ks[i]);
        int scores = i == 1 || (i == 2 && det);
        CHECK(strstr(m->spec, "causal=top_left") && !strstr(m->spec, "window=true") == !scores &&
                  !strstr(m->spec, "softcap=true") == !scores && !strstr(m->spec, "alibi=true") == !scores,
              "kernel %d spec %s", i, m->spec);
        fake_cuda_launch l;
        if (!launch_at(i, &l) || strcmp(l.entry, m->entry)) {
            CHECK(0, "launch %d is not %s", i, m->entry);
            continue;
        }
        if (!scores) continue;
        uint32_t cap = (uint32_t)param(&l, m, "softcap");
        float softcap;
        memcpy(&softcap, &cap, 4);
        CHECK(param(&l, m, "window_left") == 256 && param(&l, m, "window_right") == 0 && softcap == 20.0f &&
                  param(&l, m, "alibi_slopes") == 0xb000000 && param(&l, m, "alibi_stride") == 8,
              "launch %d keys", i);
    }
    a.mask = (kiln_attention_mask){.softcap = -1};
    CHECK(kiln_attention_backward(rt, &a, &e) == KILN_EINVAL && strstr(e.msg, "attention backward: softcap"), "%s", e.msg);
    kiln_rt_destroy(rt);
    TEST_END();
}

/* kiln_attention_bwd_args.path: dkdv's path word (and deterministic dq's, but for wgmma: its dq is path=auto's, as
 * the wgmma dkdv's description names it); the workspace the picked kernels declare; a bad value named. */
static void test_path(void) {
    TEST_BEGIN("attention backward helper: path into dkdv's spec (and deterministic dq's but for wgmma); wgmma on a 9.0 device; a bad value named");
    static const struct {
        int sm, path, det;
        const char *dkdv, *third;
    } rows[] = {
        {90, KILN_ATTENTION_PATH_WGMMA, 0, "path=wgmma", "kernel=convert"},
        {90, KILN_ATTENTION_PATH_WGMMA, 1, "path=wgmma", "path=auto"},
        {80, KILN_ATTENTION_PATH_SIMT, 1, "path=simt", "path=simt"},
        {80, KILN_ATTENTION_PATH_AUTO, 1, "path=auto", "path=auto"},
    };
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
        kiln_rt *rt = open_rt(rows[r].sm);
        kiln_error e = {0};
        kiln_attention_bwd_args a = gqa_args();
        a.head_dim = 64, a.path = rows[r].path, a.deterministic = rows[r].det;
        size_t need = 0;
        CHECK(kiln_attention_backward_workspace_on(rt, &a, &need, &e) == KILN_OK, "row %zu workspace: %s", r, e.msg);
        fake.reset();
        CHECK(kiln_attention_backward(rt, &a, &e) == KILN_OK && launches() == 3, "row %zu launch: %s", r, e.msg);
        kiln_kernel *ks[3] = {NULL, NULL, NULL};
        CHECK(kiln_attention_backward_pick(rt, &a, ks, &e) == KILN_OK, "row %zu pick: %s", r, e.msg);
        if (ks[2]) {
            const char *s0 = kiln_kernel_get_meta(ks[0])->spec, *s1 = kiln_kernel_get_meta(ks[1])->spec, *s2 = kiln_kernel_get_meta(ks[2])->spec;
            CHECK(strstr(s0, "path=auto") && strstr(s1, "kernel=dkdv") && strstr(s1, rows[r].dkdv) && strstr(s2, rows[r].third),
                  "row %zu: %s / %s / %s", r, s0, s1, s2);
        }
        if (r == 0) {
            a.path = -1;
            CHECK(kiln_attention_backward(rt, &a, &e) == KILN_EINVAL && strstr(e.msg, "attention backward: path (-1)"), "bad path: %s", e.msg);
        }
        kiln_rt_destroy(rt);
    }
    TEST_END();
}

/* bf16's deterministic dkdv at head_dim 136-256 on sm_75 under path=auto and path=mma (wave 25: the column split, its Q
 * and dO rows scaled by prep 256 wide, templates/lib/attn_bwd_mma.lua bf16_dkdv_split): the any-device workspace counts
 * qh, doh (f16 [rows, 256]) and qsf, dosf after delta, no K/V rows (the split's dq stages K and V itself); the kernels
 * declare exactly that, and prep and dkdv get those pointers. Under path=simt (dkdv on SIMT) delta alone. */
static void test_d256_mma(void) {
    TEST_BEGIN("attention backward helper: bf16 d256 deterministic on sm_75, path=auto/mma: Q and dO rows 256 wide in the workspace");
    static const char *const scaled[4] = {"qh", "doh", "qsf", "dosf"};
    for (int path = 0; path < 3; path++) { /* (KILN_ATTENTION_PATH_AUTO, _MMA, _SIMT) */
        kiln_rt *rt = open_rt(75);
        kiln_error e = {0};
        kiln_attention_bwd_args a = gqa_args();
        a.head_dim = 200, a.deterministic = 1, a.path = path == 2 ? KILN_ATTENTION_PATH_SIMT : path ? KILN_ATTENTION_PATH_MMA : KILN_ATTENTION_PATH_AUTO;
        size_t rows = 3 * 8 * 1000, off[5] = {(rows * 4 + 255) / 256 * 256};
        const size_t each[4] = {rows * 256 * 2, rows * 256 * 2, rows * 4, rows * 4};
        for (int i = 0; i < 4; i++) off[i] = (off[i] + 255) / 256 * 256, off[i + 1] = off[i] + each[i];
        size_t ws = kiln_attention_backward_workspace(&a), want = path < 2 ? off[4] : rows * 4, exact = 0;
        CHECK(ws == want, "path %d: workspace %zu bytes, expected %zu", path, ws, want);
        CHECK(rt && kiln_attention_backward_workspace_on(rt, &a, &exact, &e) == KILN_OK, "workspace_on: %s", e.msg);
        CHECK(exact == ws, "path %d: the kernels declare %zu bytes, the any-device bound %zu", path, exact, ws);
        fake.reset();
        CHECK(rt && kiln_attention_backward(rt, &a, &e) == KILN_OK && launches() == 3, "path %d launch: %s", path, e.msg);
        kiln_kernel *ks[3] = {NULL, NULL, NULL};
        CHECK(rt && kiln_attention_backward_pick(rt, &a, ks, &e) == KILN_OK, "pick: %s", e.msg);
        for (int k = 0; path < 2 && k < 2 && ks[k]; k++) {
            const kiln_kernel_meta *m = kiln_kernel_get_meta(ks[k]);
            fake_cuda_launch l;
            CHECK(launch_at(k, &l), "launch %d recorded", k);
            for (int p = 0; p < 4; p++)
                CHECK(param(&l, m, scaled[p]) == a.workspace + off[p], "launch %d pointer %s 0x%llx, expected 0x%llx", k,
                      scaled[p], (unsigned long long)param(&l, m, scaled[p]), (unsigned long long)(a.workspace + off[p]));
        }
        kiln_rt_destroy(rt);
    }
    TEST_END();
}

int main(void) {
    if (fake_cuda_open(&fake) != 0 || !(*(void **)&launch_at = dlsym(fake.dl, "fake_cuda_launch_at"))) {
        printf("attention bwd runtime: 0 passed, 1 failed\n");
        return 1;
    }
    kiln_rt_use_generator();
    test_sequence(75, 0);
    test_sequence(75, 1);
    test_sequence(80, 0);
    test_sequence(90, 1);
    test_edges_and_errors();
    test_mask(0);
    test_mask(1);
    test_path();
    test_d256_mma();
    return check_summary("attention bwd runtime");
}
