/* templates/attention_combine.ref.c - attention_combine's float64 reference: merging split-KV partials, its error model. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu.h"
#include "attention.ref.h"
#include "kiln/emu_case.h"

/*
 * The problem: the workspace a split-KV forward leaves (templates/attention_combine.lua): per split s
 * and row r = (batch * heads_q + head) * seq_q + query, O_s (f32) at ws[(s * rows + r) * head_dim]
 * and the base-2 log-sum-exp L_s at ws[splits * rows * head_dim + s * rows + r]. --rows is seq_q,
 * --batch, --heads (query heads) and --splits (default 4) size it. O_s is uniform in [-1, 1] (a
 * softmax average of values in [-1, 1]), L_s uniform in [-8, 8]; large-mean adds 100 to every L_s
 * (the max must be subtracted), constant makes every split's L_s equal, special (and mixed) gives
 * some rows a split that saw no key (L_s = -inf) and some rows no key at all (O = 0, lse = +inf).
 *
 * Reference: M = max L_s, w_s = 2^(L_s - M), O = sum w_s O_s / sum w_s, lse = (M + log2 sum w_s) ln 2.
 * Error model (u = 2^-24): each w_s is off by e = 2^-21 (ex2.approx) + ln 2 u |L_s - M| relative,
 * the sums add (splits + 4) u, so
 *   tol(O)   = u(out) |O| + (2 e + (splits + 4) u) max_s |O_s| (1 + u(out)) + 2^-126
 *   tol(lse) = 2^-22 ln 2 (lg2.approx) + e + (splits + 2) u + 2 u ln 2 (|M| + |log2 sum|) + u |lse|.
 */

typedef struct combine_case {
    kiln_attn_problem p;
    int splits;
    size_t rows;
    float *ws, *lse;
    void *o;
    double *ro, *rl, *tol_o, *tol_l;
    emu_guarded bufs;
} combine_case;

static void combine_destroy(kiln_case *c) {
    combine_case *a = kiln_case_state(c);
    emu_guarded_free(&a->bufs);
    free(a->ro), free(a->rl), free(a->tol_o), free(a->tol_l);
    free(a);
}

static size_t ws_floats(const combine_case *a) {
    return (size_t)a->splits * a->rows * (size_t)(a->p.head_dim + 1);
}

/* The reference and tolerances of row r. */
static void reference_row(combine_case *a, size_t r) {
    const int d = a->p.head_dim, S = a->splits;
    const float *L = a->ws + (size_t)S * a->rows * (size_t)d + r;
    const double u = 0x1p-24, uo = a->p.out == KILN_F16 ? 0x1p-11 : a->p.out == KILN_BF16 ? 0x1p-8 : u;
    double M = -INFINITY, sum = 0, spread = 0, omax = 0;
    for (int s = 0; s < S; s++) M = fmax(M, L[(size_t)s * a->rows]);
    size_t oo = (size_t)(r / (size_t)a->p.seq_q / (size_t)a->p.heads_q) * (size_t)a->p.stride_o[0] +
                (r % (size_t)a->p.seq_q) * (size_t)a->p.stride_o[1] + (r / (size_t)a->p.seq_q % (size_t)a->p.heads_q) * (size_t)a->p.stride_o[2];
    for (int c = 0; c < d; c++) a->ro[oo + (size_t)c] = 0;
    if (M == -INFINITY) {
        a->rl[r] = INFINITY, a->tol_l[r] = 0;
        for (int c = 0; c < d; c++) a->tol_o[oo + (size_t)c] = 0x1p-126;
        return;
    }
    for (int s = 0; s < S; s++) {
        double Ls = L[(size_t)s * a->rows];
        if (Ls == -INFINITY) continue;
        double w = exp2(Ls - M);
        const float *Os = a->ws + ((size_t)s * a->rows + r) * (size_t)d;
        sum += w;
        spread = fmax(spread, M - Ls);
        for (int c = 0; c < d; c++) {
            a->ro[oo + (size_t)c] += w * Os[c];
            omax = fmax(omax, fabs((double)Os[c]));
        }
    }
    for (int c = 0; c < d; c++) a->ro[oo + (size_t)c] /= sum;
    double e = 0x1p-21 + M_LN2 * u * spread;
    for (int c = 0; c < d; c++)
        a->tol_o[oo + (size_t)c] = uo * fabs(a->ro[oo + (size_t)c]) + (2 * e + (S + 4) * u) * omax * (1 + uo) + 0x1p-126;
    a->rl[r] = (M + log2(sum)) * M_LN2;
    a->tol_l[r] = 0x1p-22 * M_LN2 + e + (S + 2) * u + 2 * u * M_LN2 * (fabs(M) + fabs(log2(sum))) + u * fabs(a->rl[r]);
}

static kiln_status combine_create(kiln_case *c, kiln_error *err) {
    const kiln_case_opts *o = kiln_case_options(c);
    combine_case *a = calloc(1, sizeof *a);
    if (!a) return kiln_fail(err, KILN_ENOMEM, "out of memory");
    kiln_case_set_state(c, a);
    kiln_attn_problem *p = &a->p;
    kiln_status st = emu_attn_case_problem(c, p, 1e10, " (at most 1e10)", err);
    if (st != KILN_OK) return st;
    a->splits = (int)kiln_case_opts_get(o, "splits", 4);
    a->rows = (size_t)p->batch * (size_t)p->heads_q * (size_t)p->seq_q;
    if ((double)ws_floats(a) > (double)(1 << 26))
        return kiln_fail(err, KILN_EINVAL, "splits x rows x head_dim is too large for the emulator (at most 2^26)");
    size_t no = kiln_attn_elems(p, 'o');
    a->ws = emu_guarded_alloc(&a->bufs, ws_floats(a) * sizeof(float));
    a->lse = emu_guarded_alloc(&a->bufs, a->rows * sizeof(float));
    a->o = emu_guarded_alloc(&a->bufs, no * kiln_dtype_size(p->out));
    a->ro = malloc(no * sizeof(double)), a->tol_o = malloc(no * sizeof(double));
    a->rl = malloc(a->rows * sizeof(double)), a->tol_l = malloc(a->rows * sizeof(double));
    if (!a->ws || !a->lse || !a->o || !a->ro || !a->tol_o || !a->rl || !a->tol_l)
        return kiln_fail(err, KILN_ENOMEM, "out of memory");
    emu_rng g = {o->seed * 0x2545f4914f6cdd1dull + 13};
    size_t nO = (size_t)a->splits * a->rows * (size_t)p->head_dim;
    for (size_t i = 0; i < nO; i++) a->ws[i] = (float)(2 * emu_rng_uniform(&g) - 1);
    float *L = a->ws + nO;
    for (size_t r = 0; r < a->rows; r++) {
        kiln_ln_input kind = o->input == KILN_LN_MIXED ? (kiln_ln_input)(r % 4) : o->input;
        double base = emu_rng_uniform(&g) * 16 - 8;
        for (int s = 0; s < a->splits; s++) {
            double v = kind == KILN_LN_CONSTANT ? base : emu_rng_uniform(&g) * 16 - 8;
            if (kind == KILN_LN_LARGE_MEAN) v += 100;
            if (kind == KILN_LN_SPECIAL && (r % 5 == 1 || (r % 5 == 2 && s == 0))) v = -INFINITY;
            L[(size_t)s * a->rows + r] = (float)v;
        }
    }
    for (size_t r = 0; r < a->rows; r++) reference_row(a, r);
    return KILN_OK;
}

static int combine_tensor(kiln_case *c, const char *name, void **ptr, size_t *bytes) {
    combine_case *a = kiln_case_state(c);
    if (!strcmp(name, "ws")) *ptr = a->ws, *bytes = ws_floats(a) * sizeof(float);
    else if (!strcmp(name, "o")) *ptr = a->o, *bytes = kiln_attn_elems(&a->p, 'o') * kiln_dtype_size(a->p.out);
    else if (!strcmp(name, "lse")) *ptr = a->lse, *bytes = a->rows * sizeof(float);
    else return -1;
    return 0;
}

static int combine_scalar(kiln_case *c, const char *name, double *value) {
    combine_case *a = kiln_case_state(c);
    if (!strcmp(name, "splits")) return *value = a->splits, 0;
    return emu_attn_case_scalar(&a->p, name, value);
}

static void combine_prepare(kiln_case *c) {
    combine_case *a = kiln_case_state(c);
    memset(a->o, 0xff, kiln_attn_elems(&a->p, 'o') * kiln_dtype_size(a->p.out));
    memset(a->lse, 0xff, a->rows * sizeof(float));
}

static void combine_check(kiln_case *c, kiln_case_output *out, int *nout) {
    combine_case *a = kiln_case_state(c);
    const kiln_attn_problem *p = &a->p;
    snprintf(out[0].name, sizeof out[0].name, "o");
    snprintf(out[1].name, sizeof out[1].name, "lse");
    for (size_t i = 0; i < kiln_attn_elems(p, 'o'); i++)
        kiln_check_value(&out[0], kiln_emu_value_get(p->out, a->o, i), a->ro[i], a->tol_o[i], a->ro[i],
                         emu_poisoned(p->out, a->o, i), "o element %zu", i);
    for (size_t r = 0; r < a->rows; r++)
        kiln_check_value(&out[1], a->lse[r], a->rl[r], a->tol_l[r], a->rl[r], emu_poisoned(KILN_F32, a->lse, r), "lse[%zu]", r);
    *nout = 2;
}

static void combine_describe(const kiln_case *c, char *buf, size_t size) {
    const combine_case *a = kiln_case_state(c);
    snprintf(buf, size, "batch %d  heads %d  seq_q %d  %d splits  %s inputs", a->p.batch, a->p.heads_q, a->p.seq_q, a->splits,
             kiln_ln_input_name(kiln_case_options(c)->input));
}

const kiln_ref_family kiln_ref_attention_combine = {
    .family = "attention_combine",
    .create = combine_create,
    .destroy = combine_destroy,
    .tensor = combine_tensor,
    .scalar = combine_scalar,
    .prepare = combine_prepare,
    .check = combine_check,
    .describe = combine_describe,
};
