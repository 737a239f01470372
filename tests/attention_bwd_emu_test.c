/* tests/attention_bwd_emu_test.c - the attention backward sequence (prep, dkdv, convert; or the
 * deterministic prep, dkdv, dq) runs on the CPU emulator and its dQ, dK, dV match the float64
 * gradients within the error model of templates/attention_bwd.ref.c. KILN_TEST_FULL=1 runs every
 * shape on every kernel instead of a rotating pair. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "kiln/emu_attention_bwd.h"
#include "kiln/kiln.h"

typedef struct path {
    const char *name;
    int sm;
    const char *dtype, *path; /* the dkdv and dq kernels' path= */
    kiln_dtype p_dtype;       /* what P and dS are rounded to before their products */
} path;

static const path paths[] = {
    {"mma f16 sm_80", 80, "f16", "auto", KILN_F16},   {"mma bf16 sm_90", 90, "bf16", "auto", KILN_BF16},
    {"mma f16 sm_75", 75, "f16", "auto", KILN_F16},   {"simt f32 sm_80", 80, "f32", "auto", KILN_F32},
    {"simt f16 sm_80", 80, "f16", "simt", KILN_F32},  {"simt bf16 sm_75", 75, "bf16", "auto", KILN_F32},
    {"mma bf16 sm_100", 100, "bf16", "auto", KILN_BF16}, {"mma f16 sm_120", 120, "f16", "auto", KILN_F16},
};

typedef struct shape {
    int batch, heads_q, heads_kv, seq_q, seq_k;
    double amplitude;
    float scale;
    int bhsd;
} shape;

static const shape shapes[] = {
    {2, 2, 2, 17, 17, 1, 0, 0},  /* MHA, batch > 1 */
    {1, 4, 2, 37, 45, 1, 0, 0},  /* GQA, seq_q < seq_k */
    {1, 3, 1, 41, 23, 1, 0, 1},  /* MQA, seq_q > seq_k (causal: rows that see no key), BHSD strides */
    {2, 2, 1, 1, 1, 1, 0, 0},    /* one query, one key */
    {1, 2, 2, 20, 70, 3, 1, 0},  /* large scores: sharp softmax */
    {1, 1, 1, 70, 19, 1, 0, 1},
};
#define NSHAPES (sizeof shapes / sizeof shapes[0])

static uint64_t seed = 0x5eed;

static void bhsd_strides(kiln_attn_problem *p) {
    long long d = p->head_dim;
    long long *s[4] = {p->stride_q, p->stride_k, p->stride_v, p->stride_o};
    int heads[4] = {p->heads_q, p->heads_kv, p->heads_kv, p->heads_q};
    int seq[4] = {p->seq_q, p->seq_k, p->seq_k, p->seq_q};
    for (int t = 0; t < 4; t++) {
        s[t][1] = d;
        s[t][2] = seq[t] * d;
        s[t][0] = (long long)heads[t] * seq[t] * d;
    }
}

typedef struct result {
    double worst[3], max_abs[3];
} result;

/* Runs the sequence for one problem with the kernels ks (3 of them) and checks dq, dk, dv. */
static void run_case(kiln_emu_kernel **ks, const path *pa, int head_dim, int causal, int det, const shape *sh,
                     int twice, result *res) {
    kiln_attn_problem p = {0};
    kiln_dtype_parse(pa->dtype, &p.dtype);
    p.out = p.dtype;
    p.head_dim = head_dim;
    p.causal = causal;
    p.batch = sh->batch, p.heads_q = sh->heads_q, p.heads_kv = sh->heads_kv;
    p.seq_q = sh->seq_q, p.seq_k = sh->seq_k, p.scale = sh->scale;
    if (sh->bhsd) bhsd_strides(&p);
    else kiln_attn_default_strides(&p);
    kiln_dtype grad = p.dtype;
    size_t nq = kiln_attn_elems(&p, 'q'), nk = kiln_attn_elems(&p, 'k'), nv = kiln_attn_elems(&p, 'v');
    size_t no = kiln_attn_elems(&p, 'o'), nl = (size_t)p.batch * (size_t)p.heads_q * (size_t)p.seq_q;
    void *q = kiln_attn_random(p.dtype, nq, sh->amplitude, &seed), *k = kiln_attn_random(p.dtype, nk, sh->amplitude, &seed);
    void *v = kiln_attn_random(p.dtype, nv, 1, &seed), *dout = kiln_attn_random(p.out, no, 1, &seed);
    void *o = malloc(no * kiln_dtype_size(p.out));
    double *ro = malloc(no * sizeof *ro), *rl = malloc(nl * sizeof *rl);
    float *lse = malloc(nl * sizeof *lse), *delta = malloc(nl * sizeof *delta);
    float *dq_acc = det ? NULL : malloc(nl * (size_t)head_dim * sizeof *dq_acc);
    void *g[3] = {malloc(nq * kiln_dtype_size(grad)), malloc(nk * kiln_dtype_size(grad)), malloc(nv * kiln_dtype_size(grad))};
    double *ref[3] = {malloc(nq * sizeof(double)), malloc(nk * sizeof(double)), malloc(nv * sizeof(double))};
    double *tol[3] = {malloc(nq * sizeof(double)), malloc(nk * sizeof(double)), malloc(nv * sizeof(double))};
    size_t n[3] = {nq, nk, nv};
    kiln_error err = {0};
    /* The forward's outputs as the backward receives them: O rounded to out, lse in f32. */
    kiln_status st = kiln_attn_reference(&p, q, k, v, ro, rl, &err);
    CHECK(st == KILN_OK, "forward reference: %s", err.msg);
    for (size_t i = 0; i < no; i++) kiln_emu_value_set(p.out, o, i, ro[i]);
    for (size_t i = 0; i < nl; i++) lse[i] = (float)rl[i];
    for (int t = 0; t < 3; t++) memset(g[t], 0xff, n[t] * kiln_dtype_size(grad));
    memset(delta, 0xff, nl * sizeof *delta);
    if (dq_acc) memset(dq_acc, 0xff, nl * (size_t)head_dim * sizeof *dq_acc);
    kiln_attn_bwd_buffers bf = {q, k, v, o, dout, lse, g[0], g[1], g[2], delta, dq_acc};
    for (int s = 0; s < 3 && st == KILN_OK; s++) {
        st = kiln_attn_bwd_run(ks[s], &p, &bf, twice, &err);
        CHECK(st == KILN_OK, "emulator, kernel %d of 3: %s", s + 1, err.msg);
    }
    if (st == KILN_OK) {
        st = kiln_attn_bwd_reference(&p, pa->p_dtype, q, k, v, dout, ref[0], ref[1], ref[2], tol[0], tol[1], tol[2], &err);
        CHECK(st == KILN_OK, "reference: %s", err.msg);
    }
    for (int t = 0; t < 3 && st == KILN_OK; t++) {
        char first[256] = "";
        long bad = kiln_attn_bwd_compare(grad, g[t], ref[t], tol[t], n[t], &res->worst[t], &res->max_abs[t], first, sizeof first);
        CHECK(bad == 0, "%ld bad d%c values; first: %s", bad, "qkv"[t], first);
    }
    free(q), free(k), free(v), free(dout), free(o), free(ro), free(rl), free(lse), free(delta), free(dq_acc);
    for (int t = 0; t < 3; t++) free(g[t]), free(ref[t]), free(tol[t]);
}

int main(void) {
    kiln_error err = {0};
    kiln_gen *gen;
    kiln_emu *emu;
    if (kiln_gen_create(&gen, NULL, &err) != KILN_OK || kiln_emu_create(&emu, &err) != KILN_OK) {
        printf("setup failed: %s\nattention bwd emu: 0 passed, 1 failed\n", err.msg);
        return 1;
    }
    const char *full = getenv("KILN_TEST_FULL");
    int all_shapes = full && *full && strcmp(full, "0");
    static const int dims[] = {32, 64, 96, 128, 256};
    int rot = 0;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (size_t pi = 0; pi < sizeof paths / sizeof paths[0]; pi++) {
        const path *pa = &paths[pi];
        result res = {{0}, {0}};
        for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++)
            for (int causal = 0; causal < 2; causal++) {
                int det = (int)((pi + di + (size_t)causal) & 1);
                static const char *seq[2][3] = {{"prep", "dkdv", "convert"}, {"prep", "dkdv", "dq"}};
                kiln_emu_kernel *ks[3] = {NULL, NULL, NULL};
                char spec[3][256], name[600];
                kiln_status st = KILN_OK;
                for (int s = 0; s < 3 && st == KILN_OK; s++) {
                    snprintf(spec[s], sizeof spec[s], "attention_bwd kernel=%s dtype=%s head_dim=%d causal=%s%s%s", seq[det][s],
                             pa->dtype, dims[di], causal ? "true" : "false", det && s == 1 ? " deterministic=true" : "",
                             s >= 1 && strcmp(seq[det][s], "convert") && !strcmp(pa->path, "simt") ? " path=simt" : "");
                    st = kiln_emu_load(emu, gen, spec[s], pa->sm, &ks[s], &err);
                }
                int count = all_shapes ? (int)NSHAPES : 2;
                for (int s = 0; s < count; s++) {
                    const shape *sh = all_shapes ? &shapes[s] : &shapes[(rot++) % NSHAPES];
                    snprintf(name, sizeof name, "%s (sm_%d) b=%d hq=%d hkv=%d sq=%d sk=%d%s", spec[1], pa->sm, sh->batch,
                             sh->heads_q, sh->heads_kv, sh->seq_q, sh->seq_k, sh->bhsd ? " bhsd" : "");
                    TEST_BEGIN(name);
                    CHECK(st == KILN_OK, "load: %s", err.msg);
                    if (st == KILN_OK) run_case(ks, pa, dims[di], causal, det, sh, s == 0, &res);
                    TEST_END();
                }
                for (int s = 0; s < 3; s++)
                    if (ks[s]) kiln_emu_kernel_free(ks[s]);
            }
        printf("%-12s max |error|: dq %.3g dk %.3g dv %.3g; worst error/tolerance: dq %.3f dk %.3f dv %.3f\n", pa->name,
               res.max_abs[0], res.max_abs[1], res.max_abs[2], res.worst[0], res.worst[1], res.worst[2]);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    printf("ran in %.1f s\n", (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9);
    kiln_emu_destroy(emu);
    kiln_gen_destroy(gen);
    return check_summary("attention bwd emu");
}
