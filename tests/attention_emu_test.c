/* tests/attention_emu_test.c - every attention path runs on the CPU emulator and matches the
 * float64 reference within the error model of templates/attention.ref.c (o and lse). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "kiln/emu_attention.h"
#include "kiln/kiln.h"

/* A path as the test sees it: target, the spec's dtype/path, and what P is rounded to. */
typedef struct path {
    const char *name;
    int sm;
    const char *dtype, *path;
    kiln_dtype p_dtype;
} path;

static const path paths[] = {
    {"mma f16 sm_80", 80, "f16", "mma", KILN_F16},    {"mma bf16 sm_80", 80, "bf16", "mma", KILN_BF16},
    {"auto f16 sm_75", 75, "f16", "auto", KILN_F16},    {"simt f32", 80, "f32", "auto", KILN_F32},
    {"simt f16 sm_80", 80, "f16", "simt", KILN_F32},  {"simt bf16 sm_80", 80, "bf16", "simt", KILN_F32},
    {"simt bf16 sm_75", 75, "bf16", "simt", KILN_F32}, {"auto bf16 sm_75 (f16-scaled mma)", 75, "bf16", "auto", KILN_F16},
    /* Blackwell: sm_80's mma path with the data-center and the consumer shared memory sizes */
    {"mma bf16 sm_100", 100, "bf16", "mma", KILN_BF16}, {"mma f16 sm_120", 120, "f16", "mma", KILN_F16},
};

typedef struct shape {
    int batch, heads_q, heads_kv, seq_q, seq_k;
    double amplitude; /* inputs uniform in [-amplitude, amplitude] */
    float scale;      /* 0: 1/sqrt(head_dim) */
    int bhsd;         /* Q, K, V, O laid out [batch, heads, seq, head_dim] through the strides */
} shape;

static const shape shapes[] = {
    {2, 2, 2, 17, 17, 1, 0, 0},   /* MHA, batch > 1 */
    {1, 4, 2, 127, 129, 1, 0, 0}, /* GQA, seq_q < seq_k */
    {1, 3, 1, 129, 127, 1, 0, 1}, /* MQA, seq_q > seq_k (causal: empty rows), BHSD strides */
    {2, 2, 1, 1, 1, 1, 0, 0},     /* one query, one key */
    {1, 2, 2, 33, 100, 3, 1, 0},  /* large scores: sharp softmax, online rescaling */
    {1, 1, 1, 100, 33, 1, 0, 1},
    {1, 1, 1, 260, 400, 1, 0, 0}, /* three blocks of 128 rows; unmasked tiles before the diagonal */
};
#define NSHAPES (sizeof shapes / sizeof shapes[0])

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static double uniform(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (double)(rng >> 11) * 0x1p-53 * 2 - 1;
}

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

static void *fill(kiln_dtype t, size_t n, double amp) {
    void *x = malloc(n * kiln_dtype_size(t));
    for (size_t i = 0; i < n; i++) kiln_emu_value_set(t, x, i, amp * uniform());
    return x;
}

/* Runs one problem; returns the report's worst error/tolerance ratio for o. */
static void run_case(kiln_emu_kernel *k, const path *pa, int head_dim, int causal, const shape *sh, int twice,
                     double worst[2], double max_abs[2]) {
    kiln_attn_problem p = {0};
    kiln_dtype_parse(pa->dtype, &p.dtype);
    p.out = p.dtype;
    p.head_dim = head_dim;
    p.causal = causal;
    p.batch = sh->batch;
    p.heads_q = sh->heads_q;
    p.heads_kv = sh->heads_kv;
    p.seq_q = sh->seq_q;
    p.seq_k = sh->seq_k;
    p.scale = sh->scale;
    if (sh->bhsd) bhsd_strides(&p);
    else kiln_attn_default_strides(&p);
    size_t nq = kiln_attn_elems(&p, 'q'), nk = kiln_attn_elems(&p, 'k'), nv = kiln_attn_elems(&p, 'v');
    size_t no = kiln_attn_elems(&p, 'o'), nl = (size_t)p.batch * (size_t)p.heads_q * (size_t)p.seq_q;
    void *q = fill(p.dtype, nq, sh->amplitude), *kk = fill(p.dtype, nk, sh->amplitude), *v = fill(p.dtype, nv, 1);
    void *o = malloc(no * kiln_dtype_size(p.out));
    float *lse = malloc(nl * sizeof *lse);
    double *ro = malloc(no * sizeof *ro), *rl = malloc(nl * sizeof *rl);
    kiln_error err = {0};
    kiln_status st = kiln_attn_run(k, &p, o, lse, q, kk, v, twice, &err);
    CHECK(st == KILN_OK, "emulator: %s", err.msg);
    if (st == KILN_OK) {
        st = kiln_attn_reference(&p, q, kk, v, ro, rl, &err);
        CHECK(st == KILN_OK, "reference: %s", err.msg);
        kiln_attn_report r;
        long bad = kiln_attn_check(&p, pa->p_dtype, q, kk, v, o, lse, ro, rl, &r);
        CHECK(r.bad[0] == 0, "%ld bad o values; first: %s", r.bad[0], r.first[0]);
        CHECK(r.bad[1] == 0, "%ld bad lse values; first: %s", r.bad[1], r.first[1]);
        (void)bad;
        for (int i = 0; i < 2; i++)
            if (r.worst[i] > worst[i]) worst[i] = r.worst[i];
        for (int i = 0; i < 2; i++)
            if (r.max_abs[i] > max_abs[i]) max_abs[i] = r.max_abs[i];
    }
    free(q), free(kk), free(v), free(o), free(lse), free(ro), free(rl);
}

int main(void) {
    kiln_error err = {0};
    kiln_gen *gen;
    kiln_emu *emu;
    if (kiln_gen_create(&gen, NULL, &err) != KILN_OK || kiln_emu_create(&emu, &err) != KILN_OK) {
        printf("setup failed: %s\nattention emu: 0 passed, 1 failed\n", err.msg);
        return 1;
    }
    static const int dims[] = {32, 64, 96, 128, 256};
    int rot = 0;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (size_t pi = 0; pi < sizeof paths / sizeof paths[0]; pi++) {
        const path *pa = &paths[pi];
        double worst[2] = {0, 0}, max_abs[2] = {0, 0};
        for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++)
            for (int causal = 0; causal < 2; causal++) {
                char spec[256], name[400];
                snprintf(spec, sizeof spec, "attention dtype=%s head_dim=%d causal=%s path=%s", pa->dtype, dims[di],
                         causal ? "true" : "false", pa->path);
                kiln_emu_kernel *k = NULL;
                kiln_status st = kiln_emu_load(emu, gen, spec, pa->sm, &k, &err);
                /* two shapes per kernel, rotating so that every shape meets every path */
                for (int s = 0; s < 2; s++) {
                    const shape *sh = &shapes[(rot++) % NSHAPES];
                    snprintf(name, sizeof name, "%s (sm_%d) b=%d hq=%d hkv=%d sq=%d sk=%d%s", spec, pa->sm, sh->batch,
                             sh->heads_q, sh->heads_kv, sh->seq_q, sh->seq_k, sh->bhsd ? " bhsd" : "");
                    TEST_BEGIN(name);
                    CHECK(st == KILN_OK, "load: %s", err.msg);
                    if (st == KILN_OK) run_case(k, pa, dims[di], causal, sh, s == 0, worst, max_abs);
                    TEST_END();
                }
                if (k) kiln_emu_kernel_free(k);
            }
        printf("%-16s max |error|: o %.3g, lse %.3g; worst error/tolerance: o %.3f, lse %.3f\n", pa->name,
               max_abs[0], max_abs[1], worst[0], worst[1]);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    printf("ran in %.1f s\n", (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9);
    kiln_emu_destroy(emu);
    kiln_gen_destroy(gen);
    return check_summary("attention emu");
}
