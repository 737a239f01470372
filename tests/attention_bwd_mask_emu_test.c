/* tests/attention_bwd_mask_emu_test.c - the attention backward's window, softcap, alibi and
 * top-left causal keys on every path (mma sm_80/sm_75, SIMT), atomic and deterministic sequences,
 * on the CPU emulator against the float64 gradients (dQ, dK, dV) of emu/emu_ref_attention_bwd.c,
 * with FlashAttention-2's edge cases (a window narrower than a tile, rows that see no key: zero
 * gradients, softcap with causal, alibi with GQA). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kiln/emu_attention_bwd.h"
#include "kiln/kiln.h"

typedef struct path {
    const char *name;
    int sm;
    const char *dtype, *path;
    kiln_dtype p_dtype;
} path;

static const path paths[] = {
    {"mma f16 sm_80", 80, "f16", "auto", KILN_F16}, {"mma bf16 sm_80", 80, "bf16", "auto", KILN_BF16},
    {"mma f16 sm_75", 75, "f16", "auto", KILN_F16}, {"simt f32 sm_80", 80, "f32", "auto", KILN_F32},
    {"simt bf16 sm_75", 75, "bf16", "auto", KILN_F32},
};

typedef struct mcase {
    const char *name;
    int causal, window, left, right;
    float softcap;
    int alibi; /* 0 off, 1 [heads_q], 2 [batch, heads_q] */
    int batch, heads_q, heads_kv, seq_q, seq_k;
    double amplitude;
    float scale;
} mcase;

static const mcase cases[] = {
    {"window narrower than a tile, causal", 1, 1, 3, 0, 0, 0, 1, 2, 1, 70, 80, 1, 0},
    {"window, seq_q > seq_k (rows see no key: zero gradients)", 0, 1, 6, 2, 0, 0, 1, 2, 2, 60, 25, 1, 0},
    {"window both sides, keys past several query tiles", 0, 1, 20, 9, 0, 0, 1, 1, 1, 100, 110, 1, 0},
    {"softcap with causal, large scores", 1, 0, 0, 0, 4, 0, 1, 2, 1, 41, 39, 3, 1},
    {"alibi with GQA, per-batch slopes", 0, 0, 0, 0, 0, 2, 2, 4, 2, 23, 37, 1, 0},
    {"top_left causal, seq_q > seq_k", 2, 0, 0, 0, 0, 0, 1, 2, 1, 50, 30, 1, 0},
    {"top_left causal, seq_q < seq_k", 2, 0, 0, 0, 0, 0, 1, 2, 2, 30, 50, 1, 0},
    {"everything: window + causal + softcap + alibi + GQA", 1, 1, 12, 0, 10, 1, 1, 4, 2, 45, 52, 2, 0},
};
#define NCASES (sizeof cases / sizeof cases[0])

static uint64_t seed = 0x5eedbeef;

static const char *causal_name(int c) { return c == 2 ? "top_left" : c ? "true" : "false"; }

typedef struct result {
    double worst[3];
} result;

static void run_case(kiln_emu *emu, kiln_gen *gen, const path *pa, const mcase *mc, int d, int det, result *res) {
    kiln_attn_problem p = {0};
    kiln_dtype_parse(pa->dtype, &p.dtype);
    p.out = p.dtype;
    p.head_dim = d;
    p.causal = mc->causal;
    p.batch = mc->batch, p.heads_q = mc->heads_q, p.heads_kv = mc->heads_kv;
    p.seq_q = mc->seq_q, p.seq_k = mc->seq_k, p.scale = mc->scale;
    p.window = mc->window, p.window_left = mc->left, p.window_right = mc->right;
    p.has_softcap = mc->softcap > 0, p.softcap = mc->softcap;
    float *slopes = NULL;
    if (mc->alibi) {
        slopes = malloc(sizeof *slopes * (size_t)p.batch * (size_t)p.heads_q);
        for (int b = 0; b < p.batch; b++)
            for (int h = 0; h < p.heads_q; h++) slopes[b * p.heads_q + h] = (float)(exp2(-8.0 * (h + 1) / p.heads_q) * (1 + 0.5 * b));
        p.alibi = 1, p.alibi_slopes = slopes, p.alibi_stride = mc->alibi == 2 ? p.heads_q : 0;
    }
    kiln_attn_default_strides(&p);
    char keys[96];
    snprintf(keys, sizeof keys, " causal=%s%s%s%s", causal_name(mc->causal), p.window ? " window=true" : "",
             p.has_softcap ? " softcap=true" : "", p.alibi ? " alibi=true" : "");
    static const char *seq[2][3] = {{"prep", "dkdv", "convert"}, {"prep", "dkdv", "dq"}};
    kiln_emu_kernel *ks[3] = {NULL, NULL, NULL};
    char spec[3][256];
    kiln_error err = {0};
    kiln_status st = KILN_OK;
    for (int s = 0; s < 3 && st == KILN_OK; s++) {
        snprintf(spec[s], sizeof spec[s], "attention_bwd kernel=%s dtype=%s head_dim=%d%s%s", seq[det][s], pa->dtype, d, keys,
                 det && s == 1 ? " deterministic=true" : "");
        st = kiln_emu_load(emu, gen, spec[s], pa->sm, &ks[s], &err);
        CHECK(st == KILN_OK, "load %s: %s", spec[s], err.msg);
    }
    kiln_dtype grad = p.dtype;
    size_t nq = kiln_attn_elems(&p, 'q'), nk = kiln_attn_elems(&p, 'k'), nv = kiln_attn_elems(&p, 'v');
    size_t no = kiln_attn_elems(&p, 'o'), nl = (size_t)p.batch * (size_t)p.heads_q * (size_t)p.seq_q;
    void *q = kiln_attn_random(p.dtype, nq, mc->amplitude, &seed), *k = kiln_attn_random(p.dtype, nk, mc->amplitude, &seed);
    void *v = kiln_attn_random(p.dtype, nv, 1, &seed), *dout = kiln_attn_random(p.out, no, 1, &seed);
    void *o = malloc(no * kiln_dtype_size(p.out));
    double *ro = malloc(no * sizeof *ro), *rl = malloc(nl * sizeof *rl);
    float *lse = malloc(nl * sizeof *lse), *delta = malloc(nl * sizeof *delta);
    float *dq_acc = det ? NULL : malloc(nl * (size_t)d * sizeof *dq_acc);
    size_t n[3] = {nq, nk, nv};
    void *g[3];
    double *ref[3], *tol[3];
    for (int t = 0; t < 3; t++) {
        g[t] = malloc(n[t] * kiln_dtype_size(grad));
        ref[t] = malloc(n[t] * sizeof(double));
        tol[t] = malloc(n[t] * sizeof(double));
        memset(g[t], 0xff, n[t] * kiln_dtype_size(grad));
    }
    if (st == KILN_OK) {
        st = kiln_attn_reference(&p, q, k, v, ro, rl, &err);
        CHECK(st == KILN_OK, "forward reference: %s", err.msg);
    }
    int empty_rows = 0;
    for (size_t i = 0; i < no; i++) kiln_emu_value_set(p.out, o, i, ro[i]);
    for (size_t i = 0; i < nl; i++) lse[i] = (float)rl[i], empty_rows += isinf(rl[i]) && rl[i] > 0;
    memset(delta, 0xff, nl * sizeof *delta);
    if (dq_acc) memset(dq_acc, 0xff, nl * (size_t)d * sizeof *dq_acc);
    kiln_attn_bwd_buffers bf = {q, k, v, o, dout, lse, g[0], g[1], g[2], delta, dq_acc};
    for (int s = 0; s < 3 && st == KILN_OK; s++) {
        st = kiln_attn_bwd_run(ks[s], &p, &bf, s == 1, &err);
        CHECK(st == KILN_OK, "emulator, %s: %s", spec[s], err.msg);
    }
    if (st == KILN_OK) {
        st = kiln_attn_bwd_reference(&p, pa->p_dtype, q, k, v, dout, ref[0], ref[1], ref[2], tol[0], tol[1], tol[2], &err);
        CHECK(st == KILN_OK, "reference: %s", err.msg);
    }
    for (int t = 0; t < 3 && st == KILN_OK; t++) {
        char first[256] = "";
        double max_abs = 0;
        long bad = kiln_attn_bwd_compare(grad, g[t], ref[t], tol[t], n[t], &res->worst[t], &max_abs, first, sizeof first);
        CHECK(bad == 0, "%s: %ld bad d%c values; first: %s", spec[1], bad, "qkv"[t], first);
    }
    /* rows that see no key: their dQ is exactly 0 */
    if (st == KILN_OK && empty_rows) {
        long nonzero = 0;
        for (int b = 0; b < p.batch; b++)
            for (int h = 0; h < p.heads_q; h++)
                for (int i = 0; i < p.seq_q; i++)
                    if (isinf(rl[((size_t)b * (size_t)p.heads_q + (size_t)h) * (size_t)p.seq_q + (size_t)i]))
                        for (int c = 0; c < d; c++)
                            nonzero += kiln_emu_value_get(grad, g[0], (size_t)(b * p.stride_q[0] + i * p.stride_q[1] +
                                                                              h * p.stride_q[2] + c)) != 0;
        CHECK(nonzero == 0, "%ld dQ values of rows that see no key are not 0", nonzero);
    }
    for (int s = 0; s < 3; s++)
        if (ks[s]) kiln_emu_kernel_free(ks[s]);
    free(q), free(k), free(v), free(dout), free(o), free(ro), free(rl), free(lse), free(delta), free(dq_acc), free(slopes);
    for (int t = 0; t < 3; t++) free(g[t]), free(ref[t]), free(tol[t]);
}

int main(void) {
    kiln_error err = {0};
    kiln_gen *gen;
    kiln_emu *emu;
    if (kiln_gen_create(&gen, NULL, &err) != KILN_OK || kiln_emu_create(&emu, &err) != KILN_OK) {
        printf("setup failed: %s\nattention bwd mask emu: 0 passed, 1 failed\n", err.msg);
        return 1;
    }
    static const int dims[] = {64, 32, 128, 96};
    int rot = 0;
    for (size_t pi = 0; pi < sizeof paths / sizeof paths[0]; pi++) {
        result res = {{0}};
        for (size_t ci = 0; ci < NCASES; ci++) {
            int d = dims[(rot++) % 4], det = (int)((pi + ci) & 1);
            char name[400];
            snprintf(name, sizeof name, "%s: %s d=%d%s", paths[pi].name, cases[ci].name, d, det ? " deterministic" : "");
            TEST_BEGIN(name);
            run_case(emu, gen, &paths[pi], &cases[ci], d, det, &res);
            TEST_END();
        }
        printf("%-16s worst error/tolerance: dq %.3f dk %.3f dv %.3f\n", paths[pi].name, res.worst[0], res.worst[1],
               res.worst[2]);
        fflush(stdout);
    }
    kiln_emu_destroy(emu);
    kiln_gen_destroy(gen);
    return check_summary("attention bwd mask emu");
}
