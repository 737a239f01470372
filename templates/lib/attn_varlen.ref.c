/* templates/lib/attn_varlen.ref.c - varlen=true cases of attention and attention_bwd: packed sequences, each checked as its own dense problem. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu.h"
#include "attention.ref.h"
#include "kiln/emu_case.h"

/* The layout is templates/lib/attn_varlen.lua's (FlashAttention-2's varlen): q, o, dout, dq
 * [total_q, heads_q, d], k, v, dk, dv [total_k, heads_kv, d], sequence b in rows cu_q[b] .. cu_q[b + 1]
 * (cu_k for keys), lse [heads_q, total_q]; seqused_k[b] (forward only) the keys sequence b uses.
 * Sequence b is the dense problem of batch 1 with its own lengths (seq_k = the keys it uses), its
 * tensors starting at its first rows: the dense float64 reference, tolerances and checker apply to
 * it unchanged (causal, window, softcap and ALiBi per sequence). A sequence without queries has
 * nothing to check (forward) and dK = dV = 0 (backward); one without keys has O = 0, lse = +inf and
 * dQ = 0. Dropout keys its mask by the sequence's index, its rows and keys counted within the sequence
 * (templates/lib/attn_dropout.lua): the dense problem of sequence b draws it with dropout_batch = b. The
 * keep mask (dropout_mask=true) is [batch, heads_q, max_seqlen_q, max_seqlen_k]: sequence b's visible
 * pairs hold their bits, nothing past its lengths is written. */

typedef struct vcase {
    kiln_attn_problem p; /* batch = sequences, seq_q / seq_k the longest, packed strides */
    int bwd, total_q, total_k;
    int *cu_q, *cu_k, *used; /* used: seqused_k, NULL when not given */
    kiln_dtype grad;
    void *in[3], *o, *dout, *g[3];
    float *lse;
    int32_t *mask; /* dropout_mask=true: the kernel's keep mask, [batch, heads_q, max_seqlen_q, max_seqlen_k] */
    double *ro, *rl, *ref[3], *tol[3];
} vcase;

static double unit_roundoff(kiln_dtype t) { return t == KILN_F16 ? 0x1p-11 : t == KILN_BF16 ? 0x1p-8 : 0x1p-24; }

int emu_attn_varlen(const kiln_case *c) {
    const char *v = kiln_case_spec_value(c, "varlen");
    return v && !strcmp(v, "true");
}

static int len_q(const vcase *v, int b) { return v->cu_q[b + 1] - v->cu_q[b]; }
static int len_k(const vcase *v, int b) { return v->used ? v->used[b] : v->cu_k[b + 1] - v->cu_k[b]; }
static size_t elems(const vcase *v, char t) {
    return t == 'q' || t == 'o' ? (size_t)v->total_q * (size_t)v->p.heads_q * (size_t)v->p.head_dim
                                : (size_t)v->total_k * (size_t)v->p.heads_kv * (size_t)v->p.head_dim;
}

/* Sequence b as a dense problem; *qo, *ko: element offsets of its first query and key rows. */
static void sequence(const vcase *v, int b, kiln_attn_problem *s, size_t *qo, size_t *ko) {
    *s = v->p;
    s->batch = 1, s->seq_q = len_q(v, b), s->seq_k = len_k(v, b), s->dropout_batch = b;
    if (s->alibi_slopes) s->alibi_slopes += (size_t)b * (size_t)s->alibi_stride;
    *qo = (size_t)v->cu_q[b] * (size_t)v->p.heads_q * (size_t)v->p.head_dim;
    *ko = (size_t)v->cu_k[b] * (size_t)v->p.heads_kv * (size_t)v->p.head_dim;
}

static size_t mask_elems(const vcase *v) {
    return (size_t)v->p.batch * (size_t)v->p.heads_q * (size_t)v->p.seq_q * (size_t)v->p.seq_k;
}

static const void *at(const void *x, kiln_dtype t, size_t off) { return (const char *)x + off * kiln_dtype_size(t); }

/* The lengths from the options: nvarlen sequences, query lengths varlen_q, key lengths varlen_k
 * (NULL: the same), seqused_k (NULL: every key). */
static kiln_status lengths(vcase *v, const kiln_case_opts *o, kiln_error *err) {
    int n = o->nvarlen;
    if (n < 1 || !o->varlen_q)
        return kiln_fail(err, KILN_EINVAL, "varlen=true needs the sequence lengths: kiln run ... --varlen L0,L1,... "
                         "(kiln.emulate.check(..., varlen=[...]))");
    if (o->seqused_k && v->bwd)
        return kiln_fail(err, KILN_EINVAL, "seqused_k is a forward launch value (attention varlen=true); attention_bwd "
                         "takes each sequence's keys from cu_seqlens_k");
    v->cu_q = calloc((size_t)n + 1, sizeof(int)), v->cu_k = calloc((size_t)n + 1, sizeof(int));
    if (o->seqused_k) v->used = malloc((size_t)n * sizeof(int));
    if (!v->cu_q || !v->cu_k || (o->seqused_k && !v->used)) return kiln_fail(err, KILN_ENOMEM, "out of memory");
    for (int b = 0; b < n; b++) {
        int lq = o->varlen_q[b], lk = o->varlen_k ? o->varlen_k[b] : lq;
        if (lq < 0 || lk < 0 || lq > 1 << 20 || lk > 1 << 20)
            return kiln_fail(err, KILN_EINVAL, "varlen: sequence %d has length %d (queries) / %d (keys); valid: 0..1048576",
                             b, lq, lk);
        if (v->used && (v->used[b] = o->seqused_k[b], v->used[b] < 0 || v->used[b] > lk))
            return kiln_fail(err, KILN_EINVAL, "varlen: seqused_k[%d] = %d; valid: 0..%d (the sequence's keys)", b, v->used[b], lk);
        v->cu_q[b + 1] = v->cu_q[b] + lq, v->cu_k[b + 1] = v->cu_k[b] + lk;
        if (lq > v->p.seq_q) v->p.seq_q = lq;
        if (lk > v->p.seq_k) v->p.seq_k = lk;
    }
    v->p.batch = n, v->total_q = v->cu_q[n], v->total_k = v->cu_k[n];
    return KILN_OK;
}

static kiln_status forward_reference(vcase *v, kiln_error *err) {
    const kiln_attn_problem *p = &v->p;
    double *rl = malloc(sizeof *rl * (size_t)p->heads_q * (size_t)(p->seq_q + 1));
    if (!rl) return kiln_fail(err, KILN_ENOMEM, "out of memory");
    kiln_status st = KILN_OK;
    for (int b = 0; b < p->batch && st == KILN_OK; b++) {
        kiln_attn_problem s;
        size_t qo, ko;
        sequence(v, b, &s, &qo, &ko);
        if (!s.seq_q) continue;
        if (s.seq_k) {
            st = kiln_attn_reference(&s, at(v->in[0], p->dtype, qo), at(v->in[1], p->dtype, ko), at(v->in[2], p->dtype, ko),
                                     v->ro + qo, rl, err);
        } else { /* no key: O = 0, lse = +inf */
            for (size_t i = 0; i < (size_t)s.seq_q * (size_t)p->heads_q * (size_t)p->head_dim; i++) v->ro[qo + i] = 0;
            for (size_t i = 0; i < (size_t)s.seq_q * (size_t)p->heads_q; i++) rl[i] = INFINITY;
        }
        for (int h = 0; h < p->heads_q; h++)
            for (int i = 0; i < s.seq_q; i++)
                v->rl[(size_t)h * (size_t)v->total_q + (size_t)(v->cu_q[b] + i)] = rl[(size_t)h * (size_t)s.seq_q + (size_t)i];
    }
    free(rl);
    return st;
}

static kiln_status backward_reference(vcase *v, kiln_error *err);

kiln_status emu_attn_varlen_create(kiln_case *c, int bwd, kiln_error *err) {
    vcase *v = calloc(1, sizeof *v);
    if (!v) return kiln_fail(err, KILN_ENOMEM, "out of memory");
    kiln_case_set_state(c, v);
    v->bwd = bwd;
    kiln_attn_problem *p = &v->p;
    /* heads, the mask keys' values and the spec from the dense problem's reading; lengths replace the sizes */
    kiln_status st = emu_attn_case_problem(c, p, 1e18, "", err);
    if (st != KILN_OK) return st;
    p->seq_q = p->seq_k = 0;
    if ((st = lengths(v, kiln_case_options(c), err)) != KILN_OK) return st;
    double work = 0;
    for (int b = 0; b < p->batch; b++) work += (double)len_q(v, b) * len_k(v, b);
    if (work * p->heads_q * p->head_dim > (bwd ? 1e9 : 1e10))
        return kiln_fail(err, KILN_EINVAL, "sum over sequences of seq_q x seq_k, times heads x head_dim, is too large "
                         "for the emulator (at most %s)", bwd ? "1e9" : "1e10");
    int d = p->head_dim;
    long long sq[3] = {0, (long long)p->heads_q * d, d}, sk[3] = {0, (long long)p->heads_kv * d, d};
    memcpy(p->stride_q, sq, sizeof sq), memcpy(p->stride_o, sq, sizeof sq);
    memcpy(p->stride_k, sk, sizeof sk), memcpy(p->stride_v, sk, sizeof sk);
    v->grad = emu_spec_dtype(emu_case_spec(c), "grad", p->dtype);
    uint64_t seed = kiln_case_options(c)->seed;
    size_t nq = elems(v, 'q'), nk = elems(v, 'k'), nl = (size_t)p->heads_q * (size_t)v->total_q;
    if (bwd) v->dout = kiln_attn_random(p->out, nq + 1, 1, &seed);
    v->in[0] = kiln_attn_random(p->dtype, nq + 1, 1, &seed);
    v->in[1] = kiln_attn_random(p->dtype, nk + 1, 1, &seed);
    v->in[2] = kiln_attn_random(p->dtype, nk + 1, 1, &seed);
    /* wide_vdo = E (the backward): V and dO drawn instead as +-2^e, e uniform in [-E, E] (a ragged batch whose tiles
     * span 2^2E: the f16-scaled path's adversarial case, templates/lib/attn_bwd_f16scaled.lua) */
    double wide = bwd ? kiln_case_opts_real(kiln_case_options(c), "wide_vdo", 0) : 0;
    for (size_t i = 0; wide > 0 && v->in[2] && v->dout && i < nq + nk; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        double e = -wide + 2 * wide * (double)(seed >> 11) * 0x1p-53, x = ((seed >> 10) & 1 ? -1 : 1) * exp2(e);
        if (i < nk) kiln_emu_value_set(p->dtype, v->in[2], i, x);
        else kiln_emu_value_set(p->out, v->dout, i - nk, x);
    }
    v->o = malloc((nq + 1) * kiln_dtype_size(p->out));
    v->lse = malloc((nl + 1) * sizeof *v->lse);
    v->ro = calloc(nq + 1, sizeof *v->ro), v->rl = calloc(nl + 1, sizeof *v->rl);
    int ok = v->in[0] && v->in[1] && v->in[2] && v->o && v->lse && v->ro && v->rl && (!bwd || v->dout);
    const char *dm = kiln_case_spec_value(c, "dropout_mask");
    if (dm && !strcmp(dm, "true")) ok = ok && (v->mask = malloc(mask_elems(v) * sizeof *v->mask)) != NULL;
    for (int t = 0; bwd && t < 3; t++) {
        size_t n = t ? nk : nq;
        v->g[t] = malloc((n + 1) * kiln_dtype_size(v->grad));
        v->ref[t] = calloc(n + 1, sizeof(double)), v->tol[t] = calloc(n + 1, sizeof(double));
        ok = ok && v->g[t] && v->ref[t] && v->tol[t];
    }
    if (!ok) return kiln_fail(err, KILN_ENOMEM, "out of memory");
    if ((st = forward_reference(v, err)) != KILN_OK || !bwd) return st;
    return backward_reference(v, err);
}

/* The backward's O and lse (the float64 forward, rounded as a forward kernel stores them) and its float64
 * gradients and tolerances, from the inputs as they are (forward_reference first). */
static kiln_status backward_reference(vcase *v, kiln_error *err) {
    const kiln_attn_problem *p = &v->p;
    size_t nq = elems(v, 'q'), nl = (size_t)p->heads_q * (size_t)v->total_q;
    kiln_status st = KILN_OK;
    for (size_t i = 0; i < nq; i++) kiln_emu_value_set(p->out, v->o, i, v->ro[i]);
    for (size_t i = 0; i < nl; i++) v->lse[i] = (float)v->rl[i];
    for (int b = 0; b < p->batch && st == KILN_OK; b++) {
        kiln_attn_problem s;
        size_t qo, ko;
        sequence(v, b, &s, &qo, &ko);
        if (!s.seq_q || !s.seq_k) continue; /* gradients 0 (calloc) */
        st = kiln_attn_bwd_reference(&s, p->dtype, at(v->in[0], p->dtype, qo), at(v->in[1], p->dtype, ko),
                                     at(v->in[2], p->dtype, ko), at(v->dout, p->out, qo), v->ref[0] + qo, v->ref[1] + ko,
                                     v->ref[2] + ko, v->tol[0] + qo, v->tol[1] + ko, v->tol[2] + ko, err);
    }
    return st;
}

void emu_attn_varlen_destroy(kiln_case *c) {
    vcase *v = kiln_case_state(c);
    if (!v) return;
    free((void *)v->p.alibi_slopes);
    free(v->cu_q), free(v->cu_k), free(v->used);
    for (int t = 0; t < 3; t++) free(v->in[t]), free(v->g[t]), free(v->ref[t]), free(v->tol[t]);
    free(v->o), free(v->dout), free(v->lse), free(v->ro), free(v->rl), free(v->mask);
    free(v);
}

int emu_attn_varlen_tensor(kiln_case *c, const char *name, void **ptr, size_t *bytes) {
    vcase *v = kiln_case_state(c);
    const kiln_attn_problem *p = &v->p;
    size_t nq = elems(v, 'q'), nk = elems(v, 'k'), es = kiln_dtype_size(p->dtype), eo = kiln_dtype_size(p->out);
    static const char *const ins[3] = {"q", "k", "v"}, *const grads[3] = {"dq", "dk", "dv"};
    for (int t = 0; t < 3; t++) {
        if (!strcmp(name, ins[t])) return *ptr = v->in[t], *bytes = (t ? nk : nq) * es, 0;
        if (v->bwd && !strcmp(name, grads[t]))
            return *ptr = v->g[t], *bytes = (t ? nk : nq) * kiln_dtype_size(v->grad), 0;
    }
    if (!strcmp(name, "o")) *ptr = v->o, *bytes = nq * eo;
    else if (!strcmp(name, "dout") && v->bwd) *ptr = v->dout, *bytes = nq * eo;
    else if (!strcmp(name, "lse")) *ptr = v->lse, *bytes = (size_t)p->heads_q * (size_t)v->total_q * sizeof(float);
    else if (!strcmp(name, "cu_seqlens_q")) *ptr = v->cu_q, *bytes = (size_t)(p->batch + 1) * sizeof(int);
    else if (!strcmp(name, "cu_seqlens_k")) *ptr = v->cu_k, *bytes = (size_t)(p->batch + 1) * sizeof(int);
    else if (!strcmp(name, "seqused_k")) *ptr = v->used, *bytes = v->used ? (size_t)p->batch * sizeof(int) : 0;
    else if (!strcmp(name, "dropout_mask") && v->mask) *ptr = v->mask, *bytes = mask_elems(v) * sizeof(int32_t);
    else return emu_attn_case_slopes(p, name, ptr, bytes);
    return 0;
}

int emu_attn_varlen_scalar(kiln_case *c, const char *name, double *value) {
    vcase *v = kiln_case_state(c);
    if (!strcmp(name, "total_q")) return *value = v->total_q, 0;
    if (!strcmp(name, "total_k")) return *value = v->total_k, 0;
    if (!strcmp(name, "max_seqlen_q")) return *value = v->p.seq_q, 0;
    if (!strcmp(name, "max_seqlen_k")) return *value = v->p.seq_k, 0;
    return emu_attn_case_scalar(&v->p, name, value);
}

void emu_attn_varlen_prepare(kiln_case *c) {
    vcase *v = kiln_case_state(c);
    if (v->mask) memset(v->mask, 0xff, mask_elems(v) * sizeof *v->mask);
    if (v->bwd) {
        for (int t = 0; t < 3; t++) memset(v->g[t], 0xff, elems(v, t ? 'k' : 'q') * kiln_dtype_size(v->grad));
        return;
    }
    memset(v->o, 0xff, elems(v, 'o') * kiln_dtype_size(v->p.out));
    memset(v->lse, 0xff, (size_t)v->p.heads_q * (size_t)v->total_q * sizeof *v->lse);
}

/* Merges one sequence's figures into the output's; its first bad value named with the sequence. */
static void merge(kiln_case_output *o, double max_abs, double worst, long bad, const char *first, int b) {
    if (max_abs > o->max_abs) o->max_abs = max_abs;
    if (worst > o->worst) o->worst = worst;
    if (bad && !o->bad) snprintf(o->first, sizeof o->first, "sequence %d: %.220s", b, first);
    o->bad += bad;
}

static void check_forward(vcase *v, kiln_case_output *out) {
    const kiln_attn_problem *p = &v->p;
    float *lse = malloc(sizeof *lse * (size_t)p->heads_q * (size_t)(p->seq_q + 1));
    double *rl = malloc(sizeof *rl * (size_t)p->heads_q * (size_t)(p->seq_q + 1));
    if (!lse || !rl) {
        out[0].bad = out[1].bad = 1;
        snprintf(out[0].first, sizeof out[0].first, "out of memory");
        goto done;
    }
    for (int b = 0; b < p->batch; b++) {
        kiln_attn_problem s;
        size_t qo, ko;
        sequence(v, b, &s, &qo, &ko);
        if (!s.seq_q) continue;
        for (int h = 0; h < p->heads_q; h++)
            for (int i = 0; i < s.seq_q; i++) {
                size_t from = (size_t)h * (size_t)v->total_q + (size_t)(v->cu_q[b] + i), to = (size_t)h * (size_t)s.seq_q + (size_t)i;
                lse[to] = v->lse[from], rl[to] = v->rl[from];
            }
        kiln_attn_report r;
        kiln_attn_check(&s, p->dtype, at(v->in[0], p->dtype, qo), at(v->in[1], p->dtype, ko), at(v->in[2], p->dtype, ko),
                        at(v->o, p->out, qo), lse, v->ro + qo, rl, &r);
        for (int o = 0; o < 2; o++) merge(&out[o], r.max_abs[o], r.worst[o], r.bad[o], r.first[o], b);
    }
done:
    free(lse), free(rl);
}

/* Gradient t (dq, dk, dv) through the checker, each value named by sequence, row, head and column. */
static void check_grad(vcase *v, int t, kiln_case_output *o) {
    const kiln_attn_problem *p = &v->p;
    int heads = t ? p->heads_kv : p->heads_q, d = p->head_dim;
    const int *cu = t ? v->cu_k : v->cu_q;
    double ug = unit_roundoff(v->grad), floor_g = v->grad == KILN_F16 ? 0x1p-25 : v->grad == KILN_BF16 ? 0x1p-134 : 0x1p-150;
    for (int b = 0; b < p->batch; b++)
        for (int r = cu[b]; r < cu[b + 1]; r++)
            for (int h = 0; h < heads; h++)
                for (int c = 0; c < d; c++) {
                    size_t i = ((size_t)r * (size_t)heads + (size_t)h) * (size_t)d + (size_t)c;
                    double ref = v->ref[t][i], tol = ug * fabs(ref) + floor_g + 2 * v->tol[t][i] + 0x1p-100;
                    kiln_check_value(o, kiln_emu_value_get(v->grad, v->g[t], i), ref, tol, ref, 0,
                                     "%s[sequence %d, row %d, head %d, col %d]", o->name, b, r - cu[b], h, c);
                }
}

/* dropout_mask=true: a pair sequence b's query sees holds its keep bit (1 kept, 0 dropped); one it does
 * not see within its lengths may be unwritten (-1) or hold the bit of the visited tile it lies in; every
 * entry past the sequence's lengths stays unwritten. */
static void check_mask(vcase *v, kiln_case_output *o) {
    const kiln_attn_problem *p = &v->p;
    size_t at = 0;
    for (int b = 0; b < p->batch; b++) {
        kiln_attn_problem s;
        size_t qo, ko;
        sequence(v, b, &s, &qo, &ko);
        for (int h = 0; h < p->heads_q; h++)
            for (int i = 0; i < p->seq_q; i++)
                for (int j = 0; j < p->seq_k; j++, at++) {
                    int inside = i < s.seq_q && j < s.seq_k, got = v->mask[at];
                    int want = inside ? emu_attn_dropout_keep(&s, 0, h, i, j) : -1;
                    if (inside && !emu_attn_visible(&s, i, j) && got == -1) continue;
                    kiln_check_value(o, got, want, 0, want, got == -1 && inside,
                                     "dropout_mask[sequence %d, head %d, row %d, key %d]%s", b, h, i, j,
                                     inside ? "" : " (past the sequence: must stay unwritten)");
                }
    }
}

void emu_attn_varlen_check(kiln_case *c, kiln_case_output *out, int *nout) {
    vcase *v = kiln_case_state(c);
    static const char *const fwd[2] = {"o", "lse"}, *const bwd[3] = {"dq", "dk", "dv"};
    *nout = v->bwd ? 3 : 2;
    for (int i = 0; i < *nout; i++) {
        memset(&out[i], 0, sizeof out[i]);
        snprintf(out[i].name, sizeof out[i].name, "%s", v->bwd ? bwd[i] : fwd[i]);
    }
    if (v->bwd) {
        for (int t = 0; t < 3; t++) check_grad(v, t, &out[t]);
    } else {
        check_forward(v, out);
    }
    if (v->mask) {
        memset(&out[*nout], 0, sizeof out[*nout]);
        snprintf(out[*nout].name, sizeof out[*nout].name, "dropout_mask");
        check_mask(v, &out[(*nout)++]);
    }
}

kiln_status emu_attn_varlen_refresh(kiln_case *c, kiln_error *err) {
    vcase *v = kiln_case_state(c);
    kiln_status st = forward_reference(v, err);
    return st == KILN_OK && v->bwd ? backward_reference(v, err) : st;
}

/* "varlen 4 sequences  heads 2:2  seq_q 0,1,37,300  seq_k 0,1,37,300" (lists cut at the buffer's end). */
void emu_attn_varlen_describe(const kiln_case *c, char *buf, size_t size) {
    const vcase *v = kiln_case_state(c);
    size_t n = (size_t)snprintf(buf, size, "varlen %d sequences  heads %d:%d", v->p.batch, v->p.heads_q, v->p.heads_kv);
    for (int k = 0; k < (v->used ? 3 : 2) && n < size; k++) {
        n += (size_t)snprintf(buf + n, size - n, "  %s ", k == 0 ? "seq_q" : k == 1 ? "seq_k" : "seqused_k");
        for (int b = 0; b < v->p.batch && n < size; b++)
            n += (size_t)snprintf(buf + n, size - n, "%s%d", b ? "," : "",
                                  k == 0 ? len_q(v, b) : k == 1 ? v->cu_k[b + 1] - v->cu_k[b] : v->used[b]);
    }
}
