/* templates/attention_bwd.ref.c - attention_bwd's float64 reference: gradients, error model, its registry descriptor. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu.h"
#include "attention.ref.h"
#include "kiln/emu_case.h"

static double unit_roundoff(kiln_dtype t) { return t == KILN_F16 ? 0x1p-11 : t == KILN_BF16 ? 0x1p-8 : 0x1p-24; }

/* Offset of element (b, row, head, 0) with strides s. */
static size_t at(const long long s[3], int b, int row, int head) { return (size_t)(b * s[0] + row * s[1] + head * s[2]); }

#define visible emu_attn_visible /* causal (either corner) and window, emu_ref_attention.c */

/* ---- error model ----
 * With u32 = 2^-24, per query row i: A = scale max_j sum_c |q_c k_jc|, lse the row's log-sum-exp;
 * dots = 1 (SIMT: one fma chain) or 2 (tensor cores add their own order).
 *   e_p   = 2^-21 + 2 dots (d + 8) u32 A + 8 u32 (A + |lse|): relative error of each recomputed P
 *           (ex2.approx, the f32 dot product, lse stored in f32, the rounding of the exponent);
 *   eD    = ((d + 8) u32 + u(out)) sum_c |dO_c O_c|: error of delta (O is stored in `out`);
 *   edP   = dots (d + 8) u32 sum_c |dO_ic V_jc|;
 *   E_ij  = e_p P |dP - D| + P (edP + eD): error of dS = P (dP - D) in f32.
 * With up = u(p_dtype) and fp half its subnormal spacing (P, dS rounded before their products), n
 * the terms of a sum and n8 = (n + 8) u32:
 *   tol(dV_jc) = sum_i ((e_p + up + n8) P_ij + fp) |dO_ic|
 *   tol(dK_jc) = scale sum_i (E_ij + (up + n8) |dS_ij| + fp) |Q_ic|
 *   tol(dQ_ic) = scale sum_j (E_ij + (up + n8) |dS_ij| + fp) |K_jc|
 * compare_grad adds the rounding to the gradient dtype and a factor 2 for second-order
 * terms. The score is emu_attn_score's (softcap, ALiBi): with B the row's largest |bias|, e_p gains
 * 2^-21 B + 8 u32 B (and softcap 2^-20 with the softcap, its tanh); dK and dQ take dS through the
 * softcap's derivative c = 1 - t^2 (computed from an f32 tanh: 2^-20 absolute), so E becomes
 * c E + 2^-20 |dS| and dS becomes c dS. Dropout: with Z = keep / (1 - p) (templates/lib/attn_dropout.ref.c's
 * mask), dV takes P Z and dS = P (dP Z - D): E = e_p P |dP Z - D| + P (Z edP + eD), tol(dV) takes P Z. */

typedef struct row_work {
    double *s, *pr, *dx; /* per key: scaled score, probability, d score / d qk */
} row_work;

kiln_status kiln_attn_bwd_reference(const kiln_attn_problem *p, kiln_dtype p_dtype, const void *q, const void *k,
                                    const void *v, const void *dout, double *dq, double *dk, double *dv,
                                    double *tol_dq, double *tol_dk, double *tol_dv, kiln_error *err) {
    kiln_status st = kiln_attn_check_problem(p, err);
    if (st != KILN_OK) return st;
    const int d = p->head_dim, dvd = kiln_attn_vdim(p), group = p->heads_q / p->heads_kv; /* dvd: V, O, dO, dV */
    const double scale = kiln_attn_scale(p), u32 = 0x1p-24, up = unit_roundoff(p_dtype), uo = unit_roundoff(p->out);
    const double dots = p_dtype == KILN_F32 ? 1 : 2;
    /* rounding P and dS to p_dtype: relative up, or half the subnormal spacing below the normal range */
    const double fp = p_dtype == KILN_F16 ? 0x1p-25 : p_dtype == KILN_BF16 ? 0x1p-134 : 0;
    size_t nq = kiln_attn_elems(p, 'q'), nk = kiln_attn_elems(p, 'k'), nv = kiln_attn_elems(p, 'v');
    double *sq = calloc(nq, sizeof *sq), *sk = calloc(nk, sizeof *sk), *sv = calloc(nv, sizeof *sv);
    row_work w = {malloc(sizeof(double) * (size_t)p->seq_k), malloc(sizeof(double) * (size_t)p->seq_k),
                  malloc(sizeof(double) * (size_t)p->seq_k)};
    double *o = malloc(sizeof(double) * (size_t)dvd);
    if (!sq || !sk || !sv || !w.s || !w.pr || !w.dx || !o) {
        st = kiln_fail(err, KILN_ENOMEM, "attention backward reference: out of memory");
        goto done;
    }
    memset(dq, 0, nq * sizeof *dq);
    memset(dk, 0, nk * sizeof *dk);
    memset(dv, 0, nv * sizeof *dv);
    const double nsum_q = (double)p->seq_k + 8, nsum_k = (double)p->seq_q * group + 8;
#define Q(i, c) kiln_emu_value_get(p->dtype, q, qo + (size_t)(c))
    for (int b = 0; b < p->batch; b++)
        for (int h = 0; h < p->heads_q; h++)
            for (int i = 0; i < p->seq_q; i++) {
                int hk = h / group;
                size_t qo = at(p->stride_q, b, i, h), oo = at(p->stride_o, b, i, h);
                double m = -INFINITY, sum = 0, amax = 0, bmax = 0;
                for (int j = 0; j < p->seq_k; j++) {
                    w.s[j] = -INFINITY;
                    if (!visible(p, i, j)) continue;
                    size_t ko = at(p->stride_k, b, j, hk);
                    double acc = 0, mag = 0;
                    for (int c = 0; c < d; c++) {
                        double x = Q(i, c) * kiln_emu_value_get(p->dtype, k, ko + (size_t)c);
                        acc += x;
                        mag += fabs(x);
                    }
                    w.s[j] = emu_attn_score(p, acc, b, h, i, j, &w.dx[j]);
                    if (mag * scale > amax) amax = mag * scale;
                    if (emu_attn_bias(p, b, h, i, j) > bmax) bmax = emu_attn_bias(p, b, h, i, j);
                    if (w.s[j] > m) m = w.s[j];
                }
                for (int j = 0; j < p->seq_k; j++) sum += visible(p, i, j) ? exp(w.s[j] - m) : 0;
                if (sum == 0) continue; /* no visible key: every gradient of this row is 0 */
                double lse = m + log(sum);
                for (int c = 0; c < dvd; c++) o[c] = 0;
                for (int j = 0; j < p->seq_k; j++) {
                    w.pr[j] = visible(p, i, j) ? exp(w.s[j] - lse) : 0;
                    size_t vo = at(p->stride_v, b, j, hk);
                    double z = emu_attn_dropout_factor(p, b, h, i, j); /* dropout: 1 / (1 - p) kept, 0 dropped */
                    for (int c = 0; c < dvd && w.pr[j] > 0; c++) o[c] += w.pr[j] * z * kiln_emu_value_get(p->dtype, v, vo + (size_t)c);
                }
                double D = 0, dmag = 0;
                for (int c = 0; c < dvd; c++) {
                    double x = kiln_emu_value_get(p->out, dout, oo + (size_t)c) * o[c];
                    D += x;
                    dmag += fabs(x);
                }
                double ep = 0x1p-21 + 2 * dots * (d + 8) * u32 * amax + 8 * u32 * (amax + fabs(lse)) + (0x1p-21 + 8 * u32) * bmax;
                if (p->has_softcap) ep += 0x1p-20 * p->softcap;
                double eD = ((dvd + 8) * u32 + uo) * dmag;
                for (int j = 0; j < p->seq_k; j++) {
                    if (w.pr[j] == 0) continue;
                    size_t ko = at(p->stride_k, b, j, hk), vo = at(p->stride_v, b, j, hk);
                    double dp = 0, dpmag = 0;
                    for (int c = 0; c < dvd; c++) {
                        double x = kiln_emu_value_get(p->out, dout, oo + (size_t)c) * kiln_emu_value_get(p->dtype, v, vo + (size_t)c);
                        dp += x;
                        dpmag += fabs(x);
                    }
                    /* dropout (FlashAttention-2): dV takes P Z, dS = P (dP Z - D) with Z = keep / (1 - p) */
                    double z = emu_attn_dropout_factor(p, b, h, i, j);
                    double P = w.pr[j], dS = P * (dp * z - D);
                    double E = ep * P * fabs(dp * z - D) + P * (z * dots * (dvd + 8) * u32 * dpmag + eD);
                    if (p->has_softcap) { /* through the softcap: c = dx / (scale dqk) */
                        double c = w.dx[j] / scale;
                        E = c * E + 0x1p-20 * fabs(dS);
                        dS *= c;
                    }
                    for (int c = 0; c < dvd; c++) {
                        double dov = kiln_emu_value_get(p->out, dout, oo + (size_t)c);
                        dv[vo + (size_t)c] += P * z * dov;
                        sv[vo + (size_t)c] += ((ep + up + nsum_k * u32) * P * z + fp) * fabs(dov);
                    }
                    for (int c = 0; c < d; c++) {
                        double qv = Q(i, c), kv = kiln_emu_value_get(p->dtype, k, ko + (size_t)c);
                        dk[ko + (size_t)c] += scale * dS * qv;
                        dq[qo + (size_t)c] += scale * dS * kv;
                        sk[ko + (size_t)c] += scale * (E + (up + nsum_k * u32) * fabs(dS) + fp) * fabs(qv);
                        sq[qo + (size_t)c] += scale * (E + (up + nsum_q * u32) * fabs(dS) + fp) * fabs(kv);
                    }
                }
            }
#undef Q
    if (tol_dq) memcpy(tol_dq, sq, nq * sizeof *sq);
    if (tol_dk) memcpy(tol_dk, sk, nk * sizeof *sk);
    if (tol_dv) memcpy(tol_dv, sv, nv * sizeof *sv);
done:
    free(sq), free(sk), free(sv), free(w.s), free(w.pr), free(w.dx), free(o);
    return st;
}

/* One gradient through the one checker: its values named "<name> element <i>". */
static long compare_grad(kiln_case_output *o, kiln_dtype grad, const void *got, const double *ref, const double *tol, size_t n,
                         const char *name) {
    long bad = 0;
    /* rounding to grad: relative u(grad), and half the subnormal spacing below the normal range */
    double ug = unit_roundoff(grad), floor_g = grad == KILN_F16 ? 0x1p-25 : grad == KILN_BF16 ? 0x1p-134 : 0x1p-150;
    for (size_t i = 0; i < n; i++) {
        double t = ug * fabs(ref[i]) + floor_g + 2 * tol[i] + 0x1p-100;
        bad += kiln_check_value(o, kiln_emu_value_get(grad, got, i), ref[i], t, ref[i], 0, "%s%selement %zu", name,
                                *name ? " " : "", i);
    }
    return bad;
}

long kiln_attn_bwd_compare(kiln_dtype grad, const void *got, const double *ref, const double *tol, size_t n,
                           double *worst, double *max_abs, char *first, size_t first_size) {
    kiln_case_output o = {.worst = *worst, .max_abs = *max_abs};
    long bad = compare_grad(&o, grad, got, ref, tol, n, "");
    *worst = o.worst, *max_abs = o.max_abs;
    if (bad && first && first_size) snprintf(first, first_size, "%s", o.first);
    return bad;
}

/* ---- running a generated kernel on the emulator ---- */

typedef struct bwd_args {
    void *ptr[19];
    int ints[4];
    float scale;
    long long strides[8][3];
    int keys[3]; /* window_left, window_right, alibi_stride */
    float softcap;
    void *slopes;
    float dropout_p; /* dropout=true: the rate and the Philox mask's seed and offset (the problem's) */
    long long dropout_seed, dropout_offset;
} bwd_args;

static const char *ptr_names[19] = {"q",  "k",     "v",      "o",  "dout", "lse", "dq",  "dk",  "dv",  "delta",
                                    "dq_acc", "qh", "doh",  "qsf", "dosf", "kh",  "vh",  "ksf", "vsf"};

/* The tile width holding head_dim and v_head_dim (lib/attn_dims.lua's widths). */
static size_t scaled_width(const kiln_attn_problem *p) {
    static const int widths[] = {32, 64, 96, 128, 256};
    int d = p->head_dim > kiln_attn_vdim(p) ? p->head_dim : kiln_attn_vdim(p);
    for (int i = 0; i < 4; i++)
        if (d <= widths[i]) return (size_t)widths[i];
    return 256;
}

size_t kiln_attn_bwd_scaled_bytes(const kiln_attn_problem *p) {
    size_t rows = (size_t)p->batch * (size_t)p->heads_q * (size_t)p->seq_q;
    size_t keys = (size_t)p->batch * (size_t)p->heads_kv * (size_t)p->seq_k; /* kh, vh, ksf, vsf after them */
    size_t row_bytes = 2 * scaled_width(p) * 2 + 2 * sizeof(float); /* (K's part 16-byte aligned) */
    return (rows * row_bytes + 15) / 16 * 16 + keys * row_bytes;
}
static const char *int_names[4] = {"heads_q", "heads_kv", "seq_q", "seq_k"};
static const char *stride_names[8] = {"q", "k", "v", "o", "dout", "dq", "dk", "dv"};

static int bind(bwd_args *a, const char *name, void **slot) {
    for (int i = 0; i < 19; i++)
        if (!strcmp(name, ptr_names[i])) return *slot = &a->ptr[i], 0;
    for (int i = 0; i < 4; i++)
        if (!strcmp(name, int_names[i])) return *slot = &a->ints[i], 0;
    if (!strcmp(name, "scale")) return *slot = &a->scale, 0;
    static const char *keys[3] = {"window_left", "window_right", "alibi_stride"};
    for (int i = 0; i < 3; i++)
        if (!strcmp(name, keys[i])) return *slot = &a->keys[i], 0;
    if (!strcmp(name, "softcap")) return *slot = &a->softcap, 0;
    if (!strcmp(name, "alibi_slopes")) return *slot = &a->slopes, 0;
    if (!strcmp(name, "dropout_p")) return *slot = &a->dropout_p, 0;
    if (!strcmp(name, "dropout_seed")) return *slot = &a->dropout_seed, 0;
    if (!strcmp(name, "dropout_offset")) return *slot = &a->dropout_offset, 0;
    if (!strncmp(name, "stride_", 7)) {
        size_t len = strlen(name);
        for (int t = 0; t < 8 && len > 8; t++) {
            const char *axis = strchr("bsh", name[len - 1]);
            if (axis && strlen(stride_names[t]) == len - 8 && !strncmp(name + 7, stride_names[t], len - 8))
                return *slot = &a->strides[t][axis - "bsh"], 0;
        }
    }
    return -1;
}

kiln_status kiln_attn_bwd_run(kiln_emu_kernel *kern, const kiln_attn_problem *p, kiln_attn_bwd_buffers *bf, int twice,
                              kiln_error *err) {
    kiln_status st = kiln_attn_check_problem(p, err);
    if (st != KILN_OK) return st;
    const kiln_kernel_meta *m = kiln_emu_kernel_meta(kern);
    bwd_args a = {{(void *)bf->q, (void *)bf->k, (void *)bf->v, (void *)bf->o, (void *)bf->dout, (void *)bf->lse, bf->dq,
                   bf->dk, bf->dv, bf->delta, bf->dq_acc},
                  {p->heads_q, p->heads_kv, p->seq_q, p->seq_k},
                  (float)kiln_attn_scale(p),
                  {{0}}, {0}, 0, NULL, 0, 0, 0};
    const long long *s[8] = {p->stride_q, p->stride_k, p->stride_v, p->stride_o, p->stride_o, p->stride_q, p->stride_k, p->stride_v};
    for (int t = 0; t < 8; t++) memcpy(a.strides[t], s[t], sizeof a.strides[t]);
    size_t rows = (size_t)p->batch * (size_t)p->heads_q * (size_t)p->seq_q, w = scaled_width(p);
    size_t keys = (size_t)p->batch * (size_t)p->heads_kv * (size_t)p->seq_k;
    if (bf->scaled) { /* qh, doh, qsf, dosf, then kh, vh, ksf, vsf in one buffer */
        char *sc = bf->scaled;
        for (int t = 0; t < 2; t++) {
            size_t n = t ? keys : rows;
            a.ptr[11 + 4 * t] = sc, a.ptr[12 + 4 * t] = sc + n * w * 2, a.ptr[13 + 4 * t] = sc + n * w * 4;
            a.ptr[14 + 4 * t] = sc + n * (w * 4 + sizeof(float));
            sc += (n * (w * 4 + 2 * sizeof(float)) + 15) / 16 * 16;
        }
    }
    a.keys[0] = p->window_left, a.keys[1] = p->window_right, a.keys[2] = p->alibi_stride;
    a.softcap = p->softcap;
    a.slopes = (void *)p->alibi_slopes;
    a.dropout_p = p->dropout_p, a.dropout_seed = (long long)p->dropout_seed, a.dropout_offset = (long long)p->dropout_offset;
    void *args[KILN_MAX_PARAMS];
    size_t bytes[KILN_MAX_PARAMS] = {0}; /* every global access must stay inside the tensors */
    kiln_emu_launch l = {.dynamic_smem = m->dynamic_smem, .twice = twice, .arg_bytes = bytes};
    for (int i = 0; i < m->nparams; i++) {
        if (bind(&a, m->params[i].name, &args[i]) != 0)
            return kiln_fail(err, KILN_EINVAL, "attention backward: kernel parameter '%s' is not one the emulator binds",
                             m->params[i].name);
        if (!strcmp(m->params[i].name, "dq_acc")) l.nullable |= 1u << i;
        bytes[i] = emu_attn_param_bytes(p, &m->params[i]);
        for (int x = 11; x < 19; x++)
            if (!strcmp(m->params[i].name, ptr_names[x])) { /* the f16-scaled workspace: optional in prep */
                if (!bf->scaled && !strstr(m->spec, "kernel=prep"))
                    return kiln_fail(err, KILN_EINVAL, "attention backward: %s reads %s as %s scaled them: "
                                     "kiln_attn_bwd_buffers.scaled must point at kiln_attn_bwd_scaled_bytes (%zu) bytes",
                                     m->spec, x < 15 ? "Q and dO" : "K and V", x < 15 ? "prep" : "the deterministic dkdv",
                                     kiln_attn_bwd_scaled_bytes(p));
                l.nullable |= 1u << i;
                bytes[i] = (x < 15 ? rows : keys) * ((x - 11) % 4 < 2 ? w * 2 : sizeof(float));
            }
    }
    int dkdv = strstr(m->spec, "kernel=dkdv") != NULL;
    unsigned problem[3] = {(unsigned)(dkdv ? p->seq_k : p->seq_q), (unsigned)(dkdv ? p->heads_kv : p->heads_q),
                           (unsigned)p->batch};
    for (int i = 0; i < 3; i++) {
        l.grid[i] = (problem[i] + m->grid_tile[i] - 1) / m->grid_tile[i];
        l.block[i] = m->block[i];
    }
    return kiln_emu_run(kern, &l, args, err);
}

/* ---- the registry descriptor (kiln/emu_case.h) ----
 * q, k, v, then dO are drawn in [-1, 1] (q and k in [-scale, scale] with kiln_case_opts.scale, for
 * large scores); the forward's O and lse come from the float64 forward (rounded as a forward kernel
 * stores them); the sequence the dkdv kernel declares runs (prep, dkdv, convert; deterministic=true:
 * prep, dkdv, dq), and dq, dk, dv are checked with the error model above (P and dS taken as rounded
 * to the input dtype, the looser of the paths, unless the size p_f32 says the kernel keeps them f32). */

typedef struct bwd_case {
    kiln_attn_problem p;
    kiln_dtype grad;
    void *in[3], *dout, *out, *gk[3];
    float *lse;
    double *ro, *rl, *ref[3], *tol[3];
    size_t n[3];
    int32_t *mask; /* dropout_mask=true: the keep mask the backward regenerated */
} bwd_case;

static void bwd_case_destroy(kiln_case *c) {
    if (emu_attn_varlen(c)) {
        emu_attn_varlen_destroy(c);
        return;
    }
    bwd_case *b = kiln_case_state(c);
    if (!b) return;
    for (int t = 0; t < 3; t++) free(b->in[t]), free(b->gk[t]), free(b->ref[t]), free(b->tol[t]);
    free(b->dout), free(b->out), free(b->lse), free(b->ro), free(b->rl), free(b->mask);
    free((void *)b->p.alibi_slopes);
    free(b);
}

static kiln_status bwd_case_reference_of(kiln_case *c, bwd_case *b, kiln_error *err);

static kiln_status bwd_case_create(kiln_case *c, kiln_error *err) {
    const kiln_kernel_meta *m = kiln_emu_kernel_meta(kiln_case_kernel(c));
    if (emu_attn_varlen(c)) {
        if (!strstr(m->launch, "before ") && !strstr(m->launch, "after "))
            return kiln_fail(err, KILN_EINVAL, "'%s' is one kernel of the backward: kiln run checks dq, dk and dv of the "
                             "whole sequence, which the dkdv kernel declares (kernel=dkdv, the default)", m->spec);
        return emu_attn_varlen_create(c, 1, err);
    }
    if (kiln_case_options(c)->nvarlen) return kiln_fail(err, KILN_EINVAL, "--varlen needs varlen=true in the attention_bwd spec");
    bwd_case *b = calloc(1, sizeof *b);
    if (!b) return kiln_fail(err, KILN_ENOMEM, "out of memory");
    kiln_case_set_state(c, b);
    kiln_attn_problem *p = &b->p;
    kiln_status st = emu_attn_case_problem(c, p, 1e9, " backward (at most 1e9)", err);
    if (st != KILN_OK) return st;
    b->grad = emu_spec_dtype(emu_case_spec(c), "grad", p->dtype);
    if (!strstr(m->launch, "before ") && !strstr(m->launch, "after "))
        return kiln_fail(err, KILN_EINVAL, "'%s' is one kernel of the backward: kiln run checks dq, dk and dv of the "
                         "whole sequence, which the dkdv kernel declares (kernel=dkdv, the default)", m->spec);
    const kiln_case_opts *o = kiln_case_options(c);
    uint64_t seed = o->seed;
    b->n[0] = kiln_attn_elems(p, 'q'), b->n[1] = kiln_attn_elems(p, 'k'), b->n[2] = kiln_attn_elems(p, 'v');
    size_t no = kiln_attn_elems(p, 'o'), nl = (size_t)p->batch * (size_t)p->heads_q * (size_t)p->seq_q;
    /* q, k (amplitude: the options' scale; large scores, a sharp softmax), v, then dO */
    for (int t = 0; t < 3; t++) b->in[t] = kiln_attn_random(p->dtype, b->n[t], t < 2 && o->scale ? o->scale : 1, &seed);
    b->dout = kiln_attn_random(p->out, no, 1, &seed);
    b->out = malloc(no * kiln_dtype_size(p->out));
    b->lse = malloc(nl * sizeof *b->lse);
    b->ro = malloc(no * sizeof *b->ro), b->rl = malloc(nl * sizeof *b->rl);
    int ok = b->dout && b->out && b->lse && b->ro && b->rl;
    for (int t = 0; t < 3; t++) {
        b->gk[t] = malloc(b->n[t] * kiln_dtype_size(b->grad));
        b->ref[t] = malloc(b->n[t] * sizeof(double)), b->tol[t] = malloc(b->n[t] * sizeof(double));
        ok = ok && b->in[t] && b->gk[t] && b->ref[t] && b->tol[t];
    }
    if (strstr(m->spec, "dropout_mask=true") && !(b->mask = emu_attn_mask_alloc(p))) ok = 0;
    if (!ok) return kiln_fail(err, KILN_ENOMEM, "out of memory");
    return bwd_case_reference_of(c, b, err);
}

/* The forward's O and lse (float64, rounded as a forward kernel stores them) and the float64 gradients and their
 * tolerances, from the inputs as they are. */
static kiln_status bwd_case_reference_of(kiln_case *c, bwd_case *b, kiln_error *err) {
    const kiln_attn_problem *p = &b->p;
    size_t no = kiln_attn_elems(p, 'o'), nl = (size_t)p->batch * (size_t)p->heads_q * (size_t)p->seq_q;
    kiln_status st = kiln_attn_reference(p, b->in[0], b->in[1], b->in[2], b->ro, b->rl, err);
    if (st != KILN_OK) return st;
    for (size_t i = 0; i < no; i++) kiln_emu_value_set(p->out, b->out, i, b->ro[i]);
    for (size_t i = 0; i < nl; i++) b->lse[i] = (float)b->rl[i];
    /* p_f32: the kernel keeps P and dS in f32 (the SIMT path), the tighter model */
    kiln_dtype p_dtype = kiln_case_opts_get(kiln_case_options(c), "p_f32", 0) ? KILN_F32 : p->dtype;
    return kiln_attn_bwd_reference(p, p_dtype, b->in[0], b->in[1], b->in[2], b->dout, b->ref[0], b->ref[1], b->ref[2],
                                   b->tol[0], b->tol[1], b->tol[2], err);
}

/* Inputs written after the draw (kiln_case_set): O, lse and the reference gradients again. */
static kiln_status bwd_case_refresh(kiln_case *c, kiln_error *err) {
    if (emu_attn_varlen(c)) return emu_attn_varlen_refresh(c, err);
    return bwd_case_reference_of(c, kiln_case_state(c), err);
}

static int bwd_case_tensor(kiln_case *c, const char *name, void **ptr, size_t *bytes) {
    if (emu_attn_varlen(c)) return emu_attn_varlen_tensor(c, name, ptr, bytes);
    bwd_case *b = kiln_case_state(c);
    const kiln_attn_problem *p = &b->p;
    size_t nl = (size_t)p->batch * (size_t)p->heads_q * (size_t)p->seq_q, no = kiln_attn_elems(p, 'o');
    static const char *const ins[3] = {"q", "k", "v"}, *const grads[3] = {"dq", "dk", "dv"};
    for (int t = 0; t < 3; t++) {
        if (!strcmp(name, ins[t])) return *ptr = b->in[t], *bytes = b->n[t] * kiln_dtype_size(p->dtype), 0;
        if (!strcmp(name, grads[t])) return *ptr = b->gk[t], *bytes = b->n[t] * kiln_dtype_size(b->grad), 0;
    }
    if (!strcmp(name, "o")) *ptr = b->out, *bytes = no * kiln_dtype_size(p->out);
    else if (!strcmp(name, "dout")) *ptr = b->dout, *bytes = no * kiln_dtype_size(p->out);
    else if (!strcmp(name, "lse")) *ptr = b->lse, *bytes = nl * sizeof(float);
    else if (!strcmp(name, "dropout_mask") && b->mask) *ptr = b->mask, *bytes = nl * (size_t)p->seq_k * sizeof(int32_t);
    else return emu_attn_case_slopes(p, name, ptr, bytes); /* delta and dq_acc: the sequence's workspace */
    return 0;
}

static int bwd_case_scalar(kiln_case *c, const char *name, double *value) {
    if (emu_attn_varlen(c)) return emu_attn_varlen_scalar(c, name, value);
    bwd_case *b = kiln_case_state(c);
    return emu_attn_case_scalar(&b->p, name, value);
}

/* Poisons the gradients. */
static void bwd_case_prepare(kiln_case *c) {
    if (emu_attn_varlen(c)) {
        emu_attn_varlen_prepare(c);
        return;
    }
    bwd_case *b = kiln_case_state(c);
    for (int t = 0; t < 3; t++) memset(b->gk[t], 0xff, b->n[t] * kiln_dtype_size(b->grad));
    if (b->mask) emu_attn_mask_prepare(&b->p, b->mask);
}

static void bwd_case_check(kiln_case *c, kiln_case_output *out, int *nout) {
    if (emu_attn_varlen(c)) {
        emu_attn_varlen_check(c, out, nout);
        return;
    }
    bwd_case *b = kiln_case_state(c);
    for (*nout = 0; *nout < 3; ++*nout) {
        kiln_case_output *o = &out[*nout];
        snprintf(o->name, sizeof o->name, "d%c", "qkv"[*nout]);
        compare_grad(o, b->grad, b->gk[*nout], b->ref[*nout], b->tol[*nout], b->n[*nout], o->name);
    }
    if (b->mask) emu_attn_mask_check(&b->p, b->mask, &out[(*nout)++]);
}

static void bwd_case_describe(const kiln_case *c, char *buf, size_t size) {
    if (emu_attn_varlen(c)) {
        emu_attn_varlen_describe(c, buf, size);
        return;
    }
    const bwd_case *b = kiln_case_state(c);
    emu_attn_case_describe(&b->p, buf, size);
}

/* The forward's note on the same problem (emu_attn_case_note): no row sees a key, or at most one. */
static void bwd_case_note(const kiln_case *c, char *buf, size_t size) {
    if (!emu_attn_varlen(c)) emu_attn_case_note(&((const bwd_case *)kiln_case_state(c))->p, buf, size);
}

/* dq, dk, dv's float64 gradients (the dense problem's; varlen cases have none here). */
static const double *bwd_case_reference(kiln_case *c, const char *name) {
    if (emu_attn_varlen(c)) return NULL;
    bwd_case *b = kiln_case_state(c);
    static const char *const grads[3] = {"dq", "dk", "dv"};
    for (int t = 0; t < 3; t++)
        if (!strcmp(name, grads[t])) return b->ref[t];
    return NULL;
}

const kiln_ref_family kiln_ref_attention_bwd = {
    .family = "attention_bwd",
    .noun = "gradient",
    .create = bwd_case_create,
    .destroy = bwd_case_destroy,
    .tensor = bwd_case_tensor,
    .scalar = bwd_case_scalar,
    .prepare = bwd_case_prepare,
    .check = bwd_case_check,
    .describe = bwd_case_describe,
    .note = bwd_case_note,
    .reference = bwd_case_reference,
    .refresh = bwd_case_refresh,
};
