/* tests/attention_bwd_gradcheck_test.c - finite-difference gradient checks in float64 on tiny shapes:
 * (1) the float64 backward reference against central differences of the float64 forward;
 * (2) kiln's forward + backward kernels (f32, on the emulator) against the same differences.
 * L = sum(dO * O); inputs are multiples of 2^-8 stored in f32, so x +- 2^-12 is exact.
 * Shapes include the window, softcap, alibi and top-left causal keys (their derivatives: the
 * softcap's tanh, the window's and ALiBi's constant masks and biases). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "attention.ref.h"
#include "kiln/kiln.h"

static uint64_t rng = 0x243f6a8885a308d3ull;
static float coarse(void) { /* uniform multiple of 2^-8 in [-1, 1] */
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((int)(rng % 513) - 256) * 0x1p-8f;
}

typedef struct shape {
    int hq, hkv, sq, sk, causal; /* causal 2: top_left */
    float scale;
    int window, left, right; /* window=true and its sides */
    float softcap;           /* > 0: softcap=true */
    int alibi;               /* alibi=true, slopes 0.5 and 0.25 (by head) */
} shape;

static const float slopes[2] = {0.5f, 0.25f};

/* The spec keys of a shape, as " causal=... [window=true] ...". */
static void keys_of(const shape *s, char *buf, size_t n) {
    snprintf(buf, n, " causal=%s%s%s%s", s->causal == 2 ? "top_left" : s->causal ? "true" : "false",
             s->window ? " window=true" : "", s->softcap > 0 ? " softcap=true" : "", s->alibi ? " alibi=true" : "");
}

typedef struct problem {
    kiln_attn_problem p;
    float *t[4]; /* q, k, v, dout (f32) */
    size_t n[4];
} problem;

static void make(problem *pr, const shape *s, int d) {
    memset(pr, 0, sizeof *pr);
    kiln_attn_problem *p = &pr->p;
    p->dtype = p->out = KILN_F32;
    p->head_dim = d, p->causal = s->causal, p->batch = 1, p->heads_q = s->hq, p->heads_kv = s->hkv;
    p->seq_q = s->sq, p->seq_k = s->sk, p->scale = s->scale;
    p->window = s->window, p->window_left = s->left, p->window_right = s->right;
    p->has_softcap = s->softcap > 0, p->softcap = s->softcap;
    p->alibi = s->alibi, p->alibi_slopes = slopes, p->alibi_stride = 0;
    kiln_attn_default_strides(p);
    const char which[4] = {'q', 'k', 'v', 'o'};
    for (int i = 0; i < 4; i++) {
        pr->n[i] = kiln_attn_elems(p, which[i]);
        pr->t[i] = malloc(pr->n[i] * sizeof(float));
        for (size_t j = 0; j < pr->n[i]; j++) pr->t[i][j] = coarse();
    }
}

static void destroy(problem *pr) {
    for (int i = 0; i < 4; i++) free(pr->t[i]);
}

/* L = sum(dO * O) with O from the float64 forward. */
static double loss(const problem *pr) {
    size_t no = pr->n[3], nl = (size_t)pr->p.heads_q * (size_t)pr->p.seq_q;
    double *o = malloc(no * sizeof *o), *lse = malloc(nl * sizeof *lse), l = 0;
    kiln_error err;
    if (kiln_attn_reference(&pr->p, pr->t[0], pr->t[1], pr->t[2], o, lse, &err) != KILN_OK) l = NAN;
    for (size_t i = 0; i < no; i++) l += o[i] * pr->t[3][i];
    free(o), free(lse);
    return l;
}

/* Central differences for q, k, v (fd[0..2], n[0..2] elements each). */
static void finite_differences(problem *pr, double *fd[3]) {
    const float h = 0x1p-12f;
    for (int t = 0; t < 3; t++)
        for (size_t i = 0; i < pr->n[t]; i++) {
            float x = pr->t[t][i];
            pr->t[t][i] = x + h;
            double up = loss(pr);
            pr->t[t][i] = x - h;
            double down = loss(pr);
            pr->t[t][i] = x;
            fd[t][i] = (up - down) / (2.0 * (double)h);
        }
}

/* Largest |a - fd| - (abs + rel |fd|) over the three gradients; > 0 fails. Describes the worst. */
static double excess(double *const g[3], double *const fd[3], const size_t n[3], double abs_tol, double rel_tol,
                     char *why, size_t size) {
    double worst = -INFINITY;
    for (int t = 0; t < 3; t++)
        for (size_t i = 0; i < n[t]; i++) {
            double e = fabs(g[t][i] - fd[t][i]) - (abs_tol + rel_tol * fabs(fd[t][i]));
            if (!(e <= worst)) {
                worst = isnan(e) ? INFINITY : e;
                snprintf(why, size, "d%c[%zu] = %.9g, finite differences %.9g", "qkv"[t], i, g[t][i], fd[t][i]);
            }
        }
    return worst;
}

static const shape shapes[] = {
    {2, 1, 3, 4, 0, 0.7f, 0, 0, 0, 0, 0},  /* GQA: dK, dV summed over two query heads */
    {2, 1, 3, 4, 1, 0.7f, 0, 0, 0, 0, 0},  /* causal, seq_q < seq_k */
    {2, 2, 5, 3, 1, 1.3f, 0, 0, 0, 0, 0},  /* causal, seq_q > seq_k: rows 0 and 1 see no key */
    {2, 1, 3, 4, 0, 2.5f, 0, 0, 0, 1.5f, 0}, /* softcap (scores near the cap: tanh' far from 1) */
    {2, 2, 4, 5, 1, 0.9f, 0, 0, 0, 0, 1},  /* alibi with causal */
    {2, 1, 5, 4, 0, 0.8f, 1, 1, 0, 0, 0},  /* window 1,0, seq_q > seq_k: row 0 sees no key */
    {2, 1, 4, 6, 2, 1.1f, 1, 2, 1, 2.0f, 1}, /* top_left causal + window + softcap + alibi */
};

static void check_reference(const shape *s) {
    char name[300], why[200] = "";
    char keys[96];
    keys_of(s, keys, sizeof keys);
    snprintf(name, sizeof name, "float64 reference vs finite differences: hq=%d hkv=%d sq=%d sk=%d%s d=4", s->hq, s->hkv,
             s->sq, s->sk, keys);
    TEST_BEGIN(name);
    problem pr;
    make(&pr, s, 4);
    double *g[3], *fd[3];
    for (int t = 0; t < 3; t++) g[t] = malloc(pr.n[t] * sizeof(double)), fd[t] = malloc(pr.n[t] * sizeof(double));
    kiln_error err = {0};
    CHECK(kiln_attn_bwd_reference(&pr.p, KILN_F32, pr.t[0], pr.t[1], pr.t[2], pr.t[3], g[0], g[1], g[2], NULL, NULL, NULL,
                                  &err) == KILN_OK, "reference: %s", err.msg);
    finite_differences(&pr, fd);
    double e = excess(g, fd, pr.n, 1e-7, 1e-6, why, sizeof why);
    CHECK(e <= 0, "beyond 1e-7 + 1e-6 |fd| by %.3g: %s", e, why);
    for (int t = 0; t < 3; t++) free(g[t]), free(fd[t]);
    destroy(&pr);
    TEST_END();
}

/* kiln's forward writes O and lse; the backward sequence (prep, dkdv, convert or the
 * deterministic prep, dkdv, dq) turns them into gradients; all on the emulator, f32, head_dim 32. */
static void check_kernels(kiln_gen *gen, kiln_emu *emu, const shape *s, int det) {
    char name[300], why[200] = "", spec[256], keys[96];
    keys_of(s, keys, sizeof keys);
    snprintf(name, sizeof name, "kiln forward+backward (f32 sm_80%s) vs finite differences: hq=%d hkv=%d sq=%d sk=%d%s",
             det ? ", deterministic" : "", s->hq, s->hkv, s->sq, s->sk, keys);
    TEST_BEGIN(name);
    problem pr;
    make(&pr, s, 32);
    kiln_error err = {0};
    kiln_emu_kernel *fwd = NULL, *bw[3] = {NULL, NULL, NULL};
    snprintf(spec, sizeof spec, "attention dtype=f32 head_dim=32%s", keys);
    kiln_status st = kiln_emu_load(emu, gen, spec, 80, &fwd, &err);
    static const char *seq[2][3] = {{"prep", "dkdv", "convert"}, {"prep", "dkdv", "dq"}};
    for (int i = 0; i < 3 && st == KILN_OK; i++) {
        snprintf(spec, sizeof spec, "attention_bwd kernel=%s dtype=f32 head_dim=32%s%s", seq[det][i], keys,
                 det && i == 1 ? " deterministic=true" : "");
        st = kiln_emu_load(emu, gen, spec, 80, &bw[i], &err);
    }
    CHECK(st == KILN_OK, "load: %s", err.msg);
    size_t rows = (size_t)pr.p.heads_q * (size_t)pr.p.seq_q;
    float *o = malloc(pr.n[3] * sizeof *o), *lse = malloc(rows * sizeof *lse), *delta = malloc(rows * sizeof *delta);
    float *acc = malloc(rows * 32 * sizeof *acc), *gk[3];
    double *g[3], *fd[3];
    for (int t = 0; t < 3; t++) {
        gk[t] = malloc(pr.n[t] * sizeof(float));
        g[t] = malloc(pr.n[t] * sizeof(double));
        fd[t] = malloc(pr.n[t] * sizeof(double));
    }
    if (st == KILN_OK) {
        st = kiln_attn_run(fwd, &pr.p, o, lse, pr.t[0], pr.t[1], pr.t[2], 0, &err);
        CHECK(st == KILN_OK, "forward: %s", err.msg);
    }
    kiln_attn_bwd_buffers bf = {pr.t[0], pr.t[1], pr.t[2], o, pr.t[3], lse, gk[0], gk[1], gk[2], delta, det ? NULL : acc, NULL};
    for (int i = 0; i < 3 && st == KILN_OK; i++) {
        st = kiln_attn_bwd_run(bw[i], &pr.p, &bf, 1, &err);
        CHECK(st == KILN_OK, "backward kernel %d: %s", i + 1, err.msg);
    }
    if (st == KILN_OK) {
        for (int t = 0; t < 3; t++)
            for (size_t i = 0; i < pr.n[t]; i++) g[t][i] = gk[t][i];
        finite_differences(&pr, fd);
        double e = excess(g, fd, pr.n, 2e-5, 1e-4, why, sizeof why);
        CHECK(e <= 0, "beyond 2e-5 + 1e-4 |fd| by %.3g: %s", e, why);
        /* rows that see no key (lse = +inf): exactly zero gradient */
        for (int h = 0; h < pr.p.heads_q; h++)
            for (int i = 0; i < pr.p.seq_q; i++)
                for (int c = 0; c < 32 && isinf(lse[(size_t)h * (size_t)pr.p.seq_q + (size_t)i]); c++) {
                    float x = gk[0][((size_t)i * (size_t)pr.p.heads_q + (size_t)h) * 32 + (size_t)c];
                    if (x != 0) {
                        CHECK(x == 0, "dq of empty row %d head %d is %g", i, h, x);
                        h = pr.p.heads_q, i = pr.p.seq_q, c = 32;
                    }
                }
    }
    for (int t = 0; t < 3; t++) free(gk[t]), free(g[t]), free(fd[t]);
    free(o), free(lse), free(delta), free(acc);
    if (fwd) kiln_emu_kernel_free(fwd);
    for (int i = 0; i < 3; i++)
        if (bw[i]) kiln_emu_kernel_free(bw[i]);
    destroy(&pr);
    TEST_END();
}

int main(void) {
    kiln_error err = {0};
    kiln_gen *gen;
    kiln_emu *emu;
    if (kiln_gen_create(&gen, NULL, &err) != KILN_OK || kiln_emu_create(&emu, &err) != KILN_OK) {
        printf("setup failed: %s\nattention bwd gradcheck: 0 passed, 1 failed\n", err.msg);
        return 1;
    }
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) check_reference(&shapes[i]);
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) check_kernels(gen, emu, &shapes[i], (int)(i & 1));
    kiln_emu_destroy(emu);
    kiln_gen_destroy(gen);
    return check_summary("attention bwd gradcheck");
}
