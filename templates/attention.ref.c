/* templates/attention.ref.c - attention's float64 reference: problems, reference, error model, its registry descriptor. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu.h"
#include "attention.ref.h"
#include "kiln/emu_case.h"

static const char *tensor_names[4] = {"q", "k", "v", "o"};

static const long long *strides_of(const kiln_attn_problem *p, int t) {
    const long long *s[4] = {p->stride_q, p->stride_k, p->stride_v, p->stride_o};
    return s[t];
}

/* The typed reading of a resolved attention spec (the generator checked it); a key it lacks reads as
 * the template's default (f16, out follows dtype, head_dim 64, not causal). */
kiln_status kiln_attn_spec_parse(const char *spec, kiln_attn_problem *p, kiln_error *err) {
    gen_spec g;
    kiln_status st = gen_spec_parse(spec, &g, err);
    if (st != KILN_OK) return st;
    p->dtype = emu_spec_dtype(&g, "dtype", KILN_F16);
    p->out = emu_spec_dtype(&g, "out", p->dtype);
    p->head_dim = (int)emu_spec_int(&g, "head_dim", 64);
    p->v_head_dim = (int)emu_spec_int(&g, "v_head_dim", 0);
    if (p->v_head_dim == p->head_dim) p->v_head_dim = 0;
    const char *causal = emu_spec_get(&g, "causal");
    p->causal = causal && !strcmp(causal, "top_left") ? 2 : emu_spec_bool(&g, "causal", 0);
    p->window = emu_spec_bool(&g, "window", 0);
    if (p->window) p->window_left = p->window_right = -1; /* unbounded until the caller sets the sides */
    p->has_softcap = emu_spec_bool(&g, "softcap", 0);
    p->alibi = emu_spec_bool(&g, "alibi", 0);
    p->dropout = emu_spec_bool(&g, "dropout", 0);
    if (p->head_dim <= 0) return kiln_fail(err, KILN_EINVAL, "attention spec: bad value '%s' for 'head_dim'", emu_spec_get(&g, "head_dim"));
    return KILN_OK;
}

void *kiln_attn_random(kiln_dtype t, size_t n, double amplitude, uint64_t *seed) {
    void *x = malloc(n * kiln_dtype_size(t));
    for (size_t i = 0; x && i < n; i++) {
        uint64_t z = (*seed += 0x9e3779b97f4a7c15ull); /* splitmix64 */
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        z ^= z >> 31;
        kiln_emu_value_set(t, x, i, amplitude * ((double)(z >> 11) * 0x1p-52 - 1));
    }
    return x;
}

void kiln_attn_default_strides(kiln_attn_problem *p) {
    for (int t = 0; t < 4; t++) {
        long long heads = t == 1 || t == 2 ? p->heads_kv : p->heads_q;
        long long seq = t == 1 || t == 2 ? p->seq_k : p->seq_q;
        long long *s = (long long *)strides_of(p, t), d = t >= 2 ? kiln_attn_vdim(p) : p->head_dim; /* v, o: v_head_dim */
        s[2] = d;
        s[1] = heads * d;
        s[0] = seq * heads * d;
    }
}

double kiln_attn_scale(const kiln_attn_problem *p) {
    return p->scale > 0 ? (double)p->scale : 1.0 / sqrt((double)p->head_dim);
}

size_t kiln_attn_elems(const kiln_attn_problem *p, char which) {
    const char *at = strchr("qkvo", which);
    if (!at || !which) return 0;
    int t = (int)(at - "qkvo");
    long long heads = t == 1 || t == 2 ? p->heads_kv : p->heads_q;
    long long seq = t == 1 || t == 2 ? p->seq_k : p->seq_q;
    const long long *s = strides_of(p, t);
    return (size_t)((p->batch - 1) * s[0] + (seq - 1) * s[1] + (heads - 1) * s[2] + (t >= 2 ? kiln_attn_vdim(p) : p->head_dim));
}

size_t emu_attn_param_bytes(const kiln_attn_problem *p, const kiln_param *param) {
    static const char *const names[][2] = {{"q", "dq"}, {"k", "dk"}, {"v", "dv"}, {"o", "dout"}};
    const char *n = param->name;
    size_t rows = (size_t)p->batch * (size_t)p->heads_q * (size_t)p->seq_q, elems = 0;
    if (param->kind != KILN_PARAM_PTR) return 0;
    for (int t = 0; t < 4; t++)
        if (!strcmp(n, names[t][0]) || !strcmp(n, names[t][1])) elems = kiln_attn_elems(p, "qkvo"[t]);
    if (!strcmp(n, "lse") || !strcmp(n, "delta")) elems = rows;
    if (!strcmp(n, "dq_acc")) elems = rows * (size_t)p->head_dim;
    if (!strcmp(n, "alibi_slopes")) elems = (size_t)(p->batch - 1) * (size_t)p->alibi_stride + (size_t)p->heads_q;
    if (!strcmp(n, "dropout_mask")) elems = rows * (size_t)p->seq_k;
    return elems * kiln_dtype_size(param->dtype);
}

/* Offset of element (b, row, head, 0) of tensor t. */
static size_t offset(const kiln_attn_problem *p, int t, int b, int row, int head) {
    const long long *s = strides_of(p, t);
    return (size_t)(b * s[0] + row * s[1] + head * s[2]);
}

int emu_attn_visible(const kiln_attn_problem *p, int i, int j) {
    long long shift = (long long)p->seq_k - p->seq_q, d = i + shift;
    if (j >= p->seq_k || (p->causal == 1 && j > d) || (p->causal == 2 && j > i)) return 0;
    if (p->window && p->window_left >= 0 && j < d - p->window_left) return 0;
    return !(p->window && p->window_right >= 0 && j > d + p->window_right);
}

#define visible emu_attn_visible

/* The ALiBi bias of (batch b, head h, query i, key j): -slope |i + shift - j| (0 without alibi). */
static double alibi_bias(const kiln_attn_problem *p, int b, int h, int i, int j) {
    if (!p->alibi) return 0;
    double slope = p->alibi_slopes[(size_t)b * (size_t)p->alibi_stride + (size_t)h];
    return -slope * fabs((double)i + (double)p->seq_k - (double)p->seq_q - (double)j);
}

double emu_attn_bias(const kiln_attn_problem *p, int b, int h, int i, int j) { return fabs(alibi_bias(p, b, h, i, j)); }

/* Scaled score x of dot product qk: softcapped, plus the ALiBi bias; *dx = dx / dqk. */
double emu_attn_score(const kiln_attn_problem *p, double qk, int b, int h, int i, int j, double *dx) {
    double scale = kiln_attn_scale(p), x = qk * scale;
    if (dx) *dx = scale;
    if (p->has_softcap) {
        double t = tanh(x / p->softcap);
        x = p->softcap * t;
        if (dx) *dx = scale * (1 - t * t);
    }
    return x + alibi_bias(p, b, h, i, j);
}

kiln_status kiln_attn_check_problem(const kiln_attn_problem *p, kiln_error *err) {
    if (p->batch < 1 || p->heads_q < 1 || p->heads_kv < 1 || p->seq_q < 1 || p->seq_k < 1 || p->head_dim < 1)
        return kiln_fail(err, KILN_EINVAL, "attention: batch, heads, sequence lengths and head_dim must be >= 1");
    if (p->heads_q % p->heads_kv)
        return kiln_fail(err, KILN_EINVAL, "attention: heads_q (%d) must be a multiple of heads_kv (%d)", p->heads_q,
                         p->heads_kv);
    if (p->has_softcap && !(p->softcap > 0))
        return kiln_fail(err, KILN_EINVAL, "attention: softcap=true needs a softcap > 0 (got %g)", (double)p->softcap);
    if (p->alibi && (!p->alibi_slopes || p->alibi_stride < 0))
        return kiln_fail(err, KILN_EINVAL, "attention: alibi=true needs alibi_slopes and an alibi_stride >= 0");
    if (p->dropout && !(p->dropout_p >= 0 && p->dropout_p < 1))
        return kiln_fail(err, KILN_EINVAL, "attention: dropout=true needs a rate 0 <= p < 1 (got %g)", (double)p->dropout_p);
    return KILN_OK;
}

kiln_status kiln_attn_reference(const kiln_attn_problem *p, const void *q, const void *k, const void *v,
                                double *o, double *lse, kiln_error *err) {
    kiln_status st = kiln_attn_check_problem(p, err);
    if (st != KILN_OK) return st;
    int d = p->head_dim, dv = kiln_attn_vdim(p), group = p->heads_q / p->heads_kv;
    double *s = malloc(sizeof *s * (size_t)p->seq_k);
    if (!s) return kiln_fail(err, KILN_ENOMEM, "attention reference: out of memory");
    for (int b = 0; b < p->batch; b++)
        for (int h = 0; h < p->heads_q; h++)
            for (int i = 0; i < p->seq_q; i++) {
                size_t qo = offset(p, 0, b, i, h), oo = offset(p, 3, b, i, h);
                double m = -INFINITY, sum = 0;
                for (int j = 0; j < p->seq_k; j++) {
                    if (!visible(p, i, j)) continue;
                    size_t ko = offset(p, 1, b, j, h / group);
                    double acc = 0;
                    for (int c = 0; c < d; c++)
                        acc += kiln_emu_value_get(p->dtype, q, qo + (size_t)c) * kiln_emu_value_get(p->dtype, k, ko + (size_t)c);
                    s[j] = emu_attn_score(p, acc, b, h, i, j, NULL);
                    if (s[j] > m) m = s[j];
                }
                for (int c = 0; c < dv; c++) o[oo + (size_t)c] = 0;
                for (int j = 0; j < p->seq_k; j++) {
                    if (!visible(p, i, j)) continue;
                    double w = exp(s[j] - m);
                    sum += w;
                    w *= emu_attn_dropout_factor(p, b, h, i, j); /* dropout: the sum keeps every weight */
                    size_t vo = offset(p, 2, b, j, h / group);
                    for (int c = 0; c < dv; c++) o[oo + (size_t)c] += w * kiln_emu_value_get(p->dtype, v, vo + (size_t)c);
                }
                for (int c = 0; c < dv && sum > 0; c++) o[oo + (size_t)c] /= sum;
                lse[((size_t)b * (size_t)p->heads_q + (size_t)h) * (size_t)p->seq_q + (size_t)i] =
                    sum > 0 ? m + log(sum) : INFINITY;
            }
    free(s);
    return KILN_OK;
}

/* ---- running a generated kernel on the emulator ---- */

typedef struct attn_args {
    void *ptr[5];
    int ints[5];
    float scale;
    long long strides[12];
    int keys[3]; /* window_left, window_right, alibi_stride */
    float softcap;
    void *slopes;
} attn_args;

/* The launch values of the window/softcap/alibi keys. */
static void bind_keys(attn_args *a, const kiln_attn_problem *p) {
    a->keys[0] = p->window_left, a->keys[1] = p->window_right, a->keys[2] = p->alibi_stride;
    a->softcap = p->softcap;
    a->slopes = (void *)p->alibi_slopes;
}

/* Points slot at the value for parameter `name`, or returns -1. */
static int bind(attn_args *a, const char *name, void **slot) {
    static const char *ptrs[] = {"o", "lse", "q", "k", "v"};
    static const char *ints[] = {"batch", "heads_q", "heads_kv", "seq_q", "seq_k"};
    for (int i = 0; i < 5; i++) {
        if (!strcmp(name, ptrs[i])) return *slot = &a->ptr[i], 0;
        if (!strcmp(name, ints[i])) return *slot = &a->ints[i], 0;
    }
    if (!strcmp(name, "scale")) return *slot = &a->scale, 0;
    static const char *keys[] = {"window_left", "window_right", "alibi_stride"};
    for (int i = 0; i < 3; i++)
        if (!strcmp(name, keys[i])) return *slot = &a->keys[i], 0;
    if (!strcmp(name, "softcap")) return *slot = &a->softcap, 0;
    if (!strcmp(name, "alibi_slopes")) return *slot = &a->slopes, 0;
    for (int t = 0; t < 4; t++)
        for (int s = 0; s < 3; s++) {
            char n[32];
            snprintf(n, sizeof n, "stride_%s%c", tensor_names[t], "bsh"[s]);
            if (!strcmp(name, n)) return *slot = &a->strides[t * 3 + s], 0;
        }
    return -1;
}

kiln_status kiln_attn_run(kiln_emu_kernel *kern, const kiln_attn_problem *p, void *o, float *lse, const void *q,
                          const void *k, const void *v, int twice, kiln_error *err) {
    kiln_status st = kiln_attn_check_problem(p, err);
    if (st != KILN_OK) return st;
    const kiln_kernel_meta *m = kiln_emu_kernel_meta(kern);
    attn_args a = {{o, lse, (void *)q, (void *)k, (void *)v}, {p->batch, p->heads_q, p->heads_kv, p->seq_q, p->seq_k},
                   (float)kiln_attn_scale(p), {0}, {0}, 0, NULL};
    for (int t = 0; t < 4; t++)
        for (int s = 0; s < 3; s++) a.strides[t * 3 + s] = strides_of(p, t)[s];
    bind_keys(&a, p);
    void *args[KILN_MAX_PARAMS];
    size_t bytes[KILN_MAX_PARAMS] = {0}; /* every global access must stay inside what the strides span */
    kiln_emu_launch l = {.dynamic_smem = m->dynamic_smem, .twice = twice, .arg_bytes = bytes};
    for (int i = 0; i < m->nparams; i++) {
        if (bind(&a, m->params[i].name, &args[i]) != 0)
            return kiln_fail(err, KILN_EINVAL, "attention: kernel parameter '%s' is not an attention parameter",
                             m->params[i].name);
        if (!strcmp(m->params[i].name, "lse")) l.nullable |= 1u << i;
        bytes[i] = emu_attn_param_bytes(p, &m->params[i]);
    }
    memset(o, 0xff, kiln_attn_elems(p, 'o') * kiln_dtype_size(p->out));
    if (lse) memset(lse, 0xff, sizeof *lse * (size_t)p->batch * (size_t)p->heads_q * (size_t)p->seq_q);
    unsigned problem[3] = {(unsigned)p->seq_q, (unsigned)p->heads_q, (unsigned)p->batch};
    for (int i = 0; i < 3; i++) {
        l.grid[i] = (problem[i] + m->grid_tile[i] - 1) / m->grid_tile[i];
        l.block[i] = m->block[i];
    }
    return kiln_emu_run(kern, &l, args, err);
}

/* ---- split-KV: attention splitkv=true, then attention_combine ---- */

size_t kiln_attn_splitkv_workspace_floats(const kiln_attn_problem *p, int splits) {
    return (size_t)splits * (size_t)p->batch * (size_t)p->heads_q * (size_t)p->seq_q * (size_t)(kiln_attn_vdim(p) + 1);
}

kiln_status kiln_attn_run_splitkv(kiln_emu_kernel *split, kiln_emu_kernel *combine, const kiln_attn_problem *p,
                                  int splits, float *ws, void *o, float *lse, const void *q, const void *k, const void *v,
                                  int twice, kiln_error *err) {
    kiln_status st = kiln_attn_check_problem(p, err);
    if (st != KILN_OK) return st;
    if (splits < 1) return kiln_fail(err, KILN_EINVAL, "attention split-KV: splits (%d) must be >= 1", splits);
    const kiln_kernel_meta *m = kiln_emu_kernel_meta(split), *mc = kiln_emu_kernel_meta(combine);
    attn_args a = {{o, lse, (void *)q, (void *)k, (void *)v}, {p->batch, p->heads_q, p->heads_kv, p->seq_q, p->seq_k},
                   (float)kiln_attn_scale(p), {0}, {0}, 0, NULL};
    for (int t = 0; t < 4; t++)
        for (int s = 0; s < 3; s++) a.strides[t * 3 + s] = strides_of(p, t)[s];
    bind_keys(&a, p);
    int32_t nsplits = splits;
    void *wsp = ws;
    void *args[KILN_MAX_PARAMS];
    const kiln_kernel_meta *ms[2] = {m, mc};
    memset(ws, 0xff, kiln_attn_splitkv_workspace_floats(p, splits) * sizeof *ws);
    memset(o, 0xff, kiln_attn_elems(p, 'o') * kiln_dtype_size(p->out));
    if (lse) memset(lse, 0xff, sizeof *lse * (size_t)p->batch * (size_t)p->heads_q * (size_t)p->seq_q);
    for (int pass = 0; pass < 2; pass++) {
        size_t bytes[KILN_MAX_PARAMS] = {0}; /* every global access must stay inside the tensors and ws */
        kiln_emu_launch l = {.dynamic_smem = ms[pass]->dynamic_smem, .twice = twice, .arg_bytes = bytes};
        for (int i = 0; i < ms[pass]->nparams; i++) {
            const char *name = ms[pass]->params[i].name;
            if (!strcmp(name, "ws")) args[i] = &wsp;
            else if (!strcmp(name, "splits")) args[i] = &nsplits;
            else if (bind(&a, name, &args[i]) != 0)
                return kiln_fail(err, KILN_EINVAL, "attention: kernel parameter '%s' is not an attention parameter", name);
            if (!strcmp(name, "lse")) l.nullable |= 1u << i;
            bytes[i] = !strcmp(name, "ws") ? kiln_attn_splitkv_workspace_floats(p, splits) * sizeof *ws
                                           : emu_attn_param_bytes(p, &ms[pass]->params[i]);
        }
        unsigned group = (unsigned)(p->heads_q / p->heads_kv), bm = ms[0]->rows_per_block ? ms[0]->rows_per_block : 1;
        unsigned rows = (unsigned)p->batch * (unsigned)p->heads_q * (unsigned)p->seq_q;
        unsigned problem[2][3] = {{(unsigned)splits, (unsigned)p->heads_kv * ((group * (unsigned)p->seq_q + bm - 1) / bm),
                                   (unsigned)p->batch},
                                  {rows, 1, 1}};
        for (int i = 0; i < 3; i++) {
            l.grid[i] = (problem[pass][i] + ms[pass]->grid_tile[i] - 1) / ms[pass]->grid_tile[i];
            l.block[i] = ms[pass]->block[i];
        }
        if ((st = kiln_emu_run(pass ? combine : split, &l, args, err)) != KILN_OK) return st;
    }
    return KILN_OK;
}

/* ---- error model ----
 * With u(t) the unit roundoff of dtype t (2^-24 f32, 2^-11 f16, 2^-8 bf16), for each query row:
 *   A    = scale * max_j sum_c |q_c k_jc|: how large the score sums get;
 *   ds   = (d + 8) u(f32) A: bound on the error of an f32 dot product of d terms (fma chain) and
 *          of its scaling (the mma path adds its own order: counted twice there);
 *   e    = 2^-21 (ex2.approx: 2 ulp) + 2 ds + 2^-22 A (rounding of the base-2 exponent argument):
 *          relative error of each softmax weight;
 *   vmax = max |v| over the keys the row sees.
 * Each weight off by e relative moves O by at most 2 e vmax (numerator and denominator); rounding
 * P to the dtype of the P.V product (mma path) adds u(p_dtype) vmax; rounding O adds u(out)|O|:
 *   tol(O)   = u(out) |O_ref| + (2 e + u(p)) vmax (1 + u(out)) + 2^-126
 *   tol(lse) = 2 ds + e + 2^-21 (lg2.approx, 2^-22 absolute in base 2) + 2^-22 |lse_ref|.
 * softcap: tanh' <= 1 keeps ds; the tanh (from ex2.approx and a division) adds softcap 2^-20 to e.
 * alibi: with B = max |bias| over the row's keys, the base-2 bias (slope log2 e rounded, one fma)
 * and the larger exponent arguments add 2^-21 B to e.
 * dropout: a kept weight is scaled by 1 / (1 - p) (f32, rounded: 2^-24 relative), so the vmax terms grow
 * by that factor; the mask itself is exact (templates/lib/attn_dropout.ref.c regenerates it). */
static double unit_roundoff(kiln_dtype t) { return t == KILN_F16 ? 0x1p-11 : t == KILN_BF16 ? 0x1p-8 : 0x1p-24; }

typedef struct row_bounds {
    double a, vmax, bias;
} row_bounds;

static row_bounds bounds(const kiln_attn_problem *p, const void *q, const void *k, const void *v, int b, int h, int i) {
    row_bounds r = {0, 0, 0};
    int group = p->heads_q / p->heads_kv;
    size_t qo = offset(p, 0, b, i, h);
    for (int j = 0; j < p->seq_k; j++) {
        if (!visible(p, i, j)) continue;
        size_t ko = offset(p, 1, b, j, h / group), vo = offset(p, 2, b, j, h / group);
        double s = 0;
        for (int c = 0; c < p->head_dim; c++)
            s += fabs(kiln_emu_value_get(p->dtype, q, qo + (size_t)c) * kiln_emu_value_get(p->dtype, k, ko + (size_t)c));
        for (int c = 0; c < kiln_attn_vdim(p); c++) {
            double x = fabs(kiln_emu_value_get(p->dtype, v, vo + (size_t)c));
            if (x > r.vmax) r.vmax = x;
        }
        if (s > r.a) r.a = s;
        if (fabs(alibi_bias(p, b, h, i, j)) > r.bias) r.bias = fabs(alibi_bias(p, b, h, i, j));
    }
    r.a *= kiln_attn_scale(p);
    return r;
}

long kiln_attn_check(const kiln_attn_problem *p, kiln_dtype p_dtype, const void *q, const void *k, const void *v,
                     const void *o, const float *lse, const double *ref_o, const double *ref_lse, kiln_attn_report *r) {
    memset(r, 0, sizeof *r);
    kiln_case_output out[2] = {{.max_abs = 0}};
    double uo = unit_roundoff(p->out), up = unit_roundoff(p_dtype), u32 = 0x1p-24;
    double dots = p_dtype == KILN_F32 ? 1 : 2;
    for (int b = 0; b < p->batch; b++)
        for (int h = 0; h < p->heads_q; h++)
            for (int i = 0; i < p->seq_q; i++) {
                row_bounds rb = bounds(p, q, k, v, b, h, i);
                double ds = dots * (p->head_dim + 8) * u32 * rb.a;
                double e = 0x1p-21 + 2 * ds + 0x1p-22 * rb.a + 0x1p-21 * rb.bias;
                if (p->has_softcap) e += 0x1p-20 * p->softcap;
                size_t oo = offset(p, 3, b, i, h);
                for (int c = 0; c < kiln_attn_vdim(p); c++) {
                    double want = ref_o[oo + (size_t)c], got = kiln_emu_value_get(p->out, o, oo + (size_t)c);
                    double rp = p->dropout ? 1.0 / (1.0 - (double)p->dropout_p) : 1;
                    double tol = uo * fabs(want) + (2 * e + up + (p->dropout ? 0x1p-23 : 0)) * rp * rb.vmax * (1 + uo) + 0x1p-126;
                    kiln_check_value(&out[0], got, want, tol, want, 0, "o[b=%d h=%d i=%d c=%d]", b, h, i, c);
                }
                size_t li = ((size_t)b * (size_t)p->heads_q + (size_t)h) * (size_t)p->seq_q + (size_t)i;
                double want = ref_lse[li];
                kiln_check_value(&out[1], (double)lse[li], want, 2 * ds + e + 0x1p-21 + 0x1p-22 * fabs(want), want, 0,
                                 "lse[b=%d h=%d i=%d]", b, h, i);
            }
    for (int o = 0; o < 2; o++) {
        r->max_abs[o] = out[o].max_abs, r->worst[o] = out[o].worst, r->bad[o] = out[o].bad;
        memcpy(r->first[o], out[o].first, sizeof r->first[o]);
    }
    return r->bad[0] + r->bad[1];
}

/* ---- the case hooks (kiln/emu_case.h): attention, and attention_combine's reference reuses them ---- */

/* The ALiBi paper's slopes for H heads, 2^(-8 (h + 1) / H) for h = 0..H-1, in `rows` rows (row b
 * scaled by 1 + b/2, so that per-batch rows differ). */
static float *alibi_paper_slopes(int heads, int rows) {
    float *s = malloc(sizeof *s * (size_t)heads * (size_t)rows);
    for (int b = 0; s && b < rows; b++)
        for (int h = 0; h < heads; h++) s[b * heads + h] = (float)(exp2(-8.0 * (h + 1) / heads) * (1 + 0.5 * b));
    return s;
}

/* The mask keys' launch values from the options, each only with its spec key (the option names the
 * key it needs): window_left/window_right (-1 unbounded, the default), softcap (needed with
 * softcap=true), alibi (slopes drawn as the paper's, one row for every batch: alibi_stride 0; with
 * alibi_batch, one row per batch entry). */
static kiln_status case_mask_keys(const kiln_case_opts *o, kiln_attn_problem *p, kiln_error *err) {
    static const struct {
        const char *opt, *flag, *key;
    } need[] = {{"window_left", "--window", "window"}, {"window_right", "--window", "window"},
                {"softcap", "--softcap", "softcap"}, {"alibi", "--alibi", "alibi"}};
    const int has[] = {p->window, p->window, p->has_softcap, p->alibi};
    for (int i = 0; i < 4; i++)
        if (kiln_case_opts_has(o, need[i].opt) && !has[i])
            return kiln_fail(err, KILN_EINVAL, "%s needs %s=true in the attention spec (the kernel has no %s key)",
                             need[i].flag, need[i].key, need[i].key);
    if (p->window) {
        p->window_left = (int)kiln_case_opts_get(o, "window_left", -1);
        p->window_right = (int)kiln_case_opts_get(o, "window_right", -1);
        if (p->window_left < -1 || p->window_right < -1)
            return kiln_fail(err, KILN_EINVAL, "attention window sides must be >= -1 (-1: unbounded); got %d,%d",
                             p->window_left, p->window_right);
    }
    if (p->has_softcap) {
        if (!kiln_case_opts_has(o, "softcap"))
            return kiln_fail(err, KILN_EINVAL, "softcap=true needs the cap: give --softcap C (C > 0, e.g. 50)");
        p->softcap = (float)kiln_case_opts_real(o, "softcap", 0);
    }
    if (kiln_case_opts_has(o, "alibi_batch") && !p->alibi)
        return kiln_fail(err, KILN_EINVAL, "per-batch ALiBi slopes need alibi=true in the attention spec (the kernel has no alibi key)");
    if (p->alibi) {
        /* alibi_batch: a row of slopes per batch entry (alibi_stride heads_q) */
        int rows = kiln_case_opts_get(o, "alibi_batch", 0) ? p->batch : 1;
        p->alibi_stride = rows > 1 ? p->heads_q : 0;
        if (!(p->alibi_slopes = alibi_paper_slopes(p->heads_q, rows))) return kiln_fail(err, KILN_ENOMEM, "out of memory");
    }
    return emu_attn_case_dropout(o, p, err);
}

kiln_status emu_attn_case_dropout(const kiln_case_opts *o, kiln_attn_problem *p, kiln_error *err) {
    if ((kiln_case_opts_has(o, "dropout") || kiln_case_opts_has(o, "dropout_offset")) && !p->dropout)
        return kiln_fail(err, KILN_EINVAL, "--dropout needs dropout=true in the attention spec (the kernel has no dropout key)");
    if (!p->dropout) return KILN_OK;
    if (!kiln_case_opts_has(o, "dropout"))
        return kiln_fail(err, KILN_EINVAL, "dropout=true needs the rate: give --dropout P (0 <= P < 1, e.g. 0.1)");
    p->dropout_p = (float)kiln_case_opts_real(o, "dropout", 0);
    if (!(p->dropout_p >= 0 && p->dropout_p < 1))
        return kiln_fail(err, KILN_EINVAL, "--dropout %g: the rate must be 0 <= P < 1", (double)p->dropout_p);
    p->dropout_seed = o->seed; /* the case's seed keys the mask too */
    p->dropout_offset = (unsigned long long)kiln_case_opts_get(o, "dropout_offset", 0);
    return KILN_OK;
}

/* The problem of an attention case from the options: --rows is seq_q, --seq-k (default seq_q),
 * --batch (1), --heads H:K (2:2); softmax_scale (0: 1/sqrt(head_dim)); bhsd (nonzero: q, k, v, o laid
 * out [batch, heads, seq, head_dim], else [batch, seq, heads, head_dim]). limit bounds batch x heads x
 * seq_q x seq_k x head_dim. */
kiln_status emu_attn_case_problem(const kiln_case *c, kiln_attn_problem *p, double limit, const char *what,
                                  kiln_error *err) {
    const kiln_case_opts *o = kiln_case_options(c);
    kiln_status st = kiln_attn_spec_parse(kiln_emu_kernel_meta(kiln_case_kernel(c))->spec, p, err);
    if (st != KILN_OK) return st;
    p->batch = (int)kiln_case_opts_get(o, "batch", 1);
    p->heads_q = (int)kiln_case_opts_get(o, "heads_q", 2);
    p->heads_kv = (int)kiln_case_opts_get(o, "heads_kv", p->heads_q);
    p->seq_q = (int)kiln_case_opts_get(o, "rows", 0);
    p->seq_k = (int)kiln_case_opts_get(o, "seq_k", p->seq_q);
    p->scale = (float)kiln_case_opts_real(o, "softmax_scale", 0);
    if ((st = case_mask_keys(o, p, err)) != KILN_OK) return st;
    if ((st = kiln_attn_check_problem(p, err)) != KILN_OK) return st;
    if ((double)p->batch * p->heads_q * p->seq_q * p->seq_k * p->head_dim > limit)
        return kiln_fail(err, KILN_EINVAL, "batch x heads x seq_q x seq_k x head_dim is too large for the emulator%s", what);
    kiln_attn_default_strides(p);
    if (kiln_case_opts_get(o, "bhsd", 0)) {
        long long *s[4] = {p->stride_q, p->stride_k, p->stride_v, p->stride_o};
        const int heads[4] = {p->heads_q, p->heads_kv, p->heads_kv, p->heads_q}, seq[4] = {p->seq_q, p->seq_k, p->seq_k, p->seq_q};
        for (int t = 0; t < 4; t++) {
            s[t][1] = p->head_dim;
            s[t][2] = (long long)seq[t] * p->head_dim;
            s[t][0] = (long long)heads[t] * seq[t] * p->head_dim;
        }
    }
    return KILN_OK;
}

int emu_attn_case_slopes(const kiln_attn_problem *p, const char *name, void **ptr, size_t *bytes) {
    if (strcmp(name, "alibi_slopes") || !p->alibi_slopes) return -1;
    *ptr = (void *)p->alibi_slopes;
    *bytes = ((size_t)(p->batch - 1) * (size_t)p->alibi_stride + (size_t)p->heads_q) * sizeof(float);
    return 0;
}

int emu_attn_case_scalar(const kiln_attn_problem *p, const char *name, double *value) {
    static const char *const ints[] = {"batch", "heads_q", "heads_kv", "seq_q", "seq_k", "window_left", "window_right",
                                       "alibi_stride"};
    const int vals[] = {p->batch, p->heads_q, p->heads_kv, p->seq_q, p->seq_k, p->window_left, p->window_right,
                        p->alibi_stride};
    for (int i = 0; i < 8; i++)
        if (!strcmp(name, ints[i])) return *value = vals[i], 0;
    if (!strcmp(name, "scale")) return *value = (float)kiln_attn_scale(p), 0;
    if (!strcmp(name, "softcap")) return *value = p->softcap, 0;
    if (!strcmp(name, "dropout_p")) return *value = p->dropout_p, 0;
    if (!strcmp(name, "dropout_seed")) return *value = (double)p->dropout_seed, 0;
    if (!strcmp(name, "dropout_offset")) return *value = (double)p->dropout_offset, 0;
    if (!strncmp(name, "stride_", 7)) {
        /* stride_<tensor><b|s|h>: q, k, v, o and the backward's dout (like o), dq, dk, dv (like q, k, v) */
        static const char *const names[] = {"q", "k", "v", "o", "dout", "dq", "dk", "dv"};
        static const int like[] = {0, 1, 2, 3, 3, 0, 1, 2};
        size_t len = strlen(name);
        const char *axis = len > 8 ? strchr("bsh", name[len - 1]) : NULL;
        for (int t = 0; axis && t < 8; t++)
            if (strlen(names[t]) == len - 8 && !strncmp(name + 7, names[t], len - 8))
                return *value = (double)strides_of(p, like[t])[axis - "bsh"], 0;
    }
    return -1;
}

typedef struct attn_case {
    kiln_attn_problem p;
    void *q, *k, *v, *o;
    int32_t *mask; /* dropout_mask=true: the kernel's keep mask */
    float *lse;
    double *ro, *rl;
    int splits;
    kiln_dtype p_dtype; /* what the kernel rounds P to before P.V: the error model's (options p_f32, p_f16) */
    emu_paged *paged;   /* paged=true: the cache (templates/lib/attn_paged.ref.c) */
} attn_case;

static void attn_case_destroy(kiln_case *c) {
    if (emu_attn_varlen(c)) {
        emu_attn_varlen_destroy(c);
        return;
    }
    attn_case *a = kiln_case_state(c);
    if (!a) return;
    free((void *)a->p.alibi_slopes);
    emu_paged_free(a->paged);
    free(a->q), free(a->k), free(a->v), free(a->o), free(a->lse), free(a->ro), free(a->rl), free(a->mask);
    free(a);
}

static kiln_status attn_case_create(kiln_case *c, kiln_error *err) {
    const kiln_kernel_meta *m = kiln_emu_kernel_meta(kiln_case_kernel(c));
    const kiln_case_opts *o = kiln_case_options(c);
    long long splits = kiln_case_opts_get(o, "splits", 0);
    if (splits && !m->then_spec[0])
        return kiln_fail(err, KILN_EINVAL, "--splits applies to split-KV attention (add splitkv=true to the spec)");
    if (emu_attn_varlen(c)) return emu_attn_varlen_create(c, 0, err);
    if (o->nvarlen) return kiln_fail(err, KILN_EINVAL, "--varlen needs varlen=true in the attention spec");
    attn_case *a = calloc(1, sizeof *a);
    if (!a) return kiln_fail(err, KILN_ENOMEM, "out of memory");
    kiln_case_set_state(c, a);
    kiln_attn_problem *p = &a->p;
    kiln_status st = emu_attn_case_problem(c, p, 1e10, " (at most 1e10)", err);
    if (st != KILN_OK) return st;
    uint64_t seed = o->seed;
    size_t no = kiln_attn_elems(p, 'o'), nl = (size_t)p->batch * (size_t)p->heads_q * (size_t)p->seq_q;
    a->splits = splits ? (int)splits : 4;
    /* p_f32: the kernel keeps P in f32 (the SIMT paths), p_f16: it rounds P to f16 (sm_75's f16-scaled
     * bf16 path); else P is rounded to the input dtype (the mma paths), the looser model */
    a->p_dtype = kiln_case_opts_get(o, "p_f32", 0) ? KILN_F32 : kiln_case_opts_get(o, "p_f16", 0) ? KILN_F16 : p->dtype;
    int paged = strstr(m->spec, " paged=true") != NULL;
    /* q and k in [-scale, scale] (kiln_case_opts.scale: large scores, a sharp softmax), v in [-1, 1];
     * a paged cache draws its own keys */
    double amp = paged ? 1 : o->scale;
    a->q = kiln_attn_random(p->dtype, kiln_attn_elems(p, 'q'), amp, &seed);
    static const char *const paged_opts[][2] = {{"page_size", "--paged"}, {"leftpad", "--leftpad"}, {"batch_idx", "--batch-idx"},
                                                 {"append", "--append"}};
    for (int i = 0; !paged && i < 4; i++)
        if (kiln_case_opts_has(o, paged_opts[i][0]))
            return kiln_fail(err, KILN_EINVAL, "%s applies to a paged KV cache (add paged=true to the attention spec)",
                             paged_opts[i][1]);
    if (paged) {
        a->o = malloc(no * kiln_dtype_size(p->out)), a->lse = malloc(nl * sizeof *a->lse);
        a->ro = malloc(no * sizeof *a->ro), a->rl = malloc(nl * sizeof *a->rl);
        if (!a->q || !a->o || !a->lse || !a->ro || !a->rl) return kiln_fail(err, KILN_ENOMEM, "out of memory");
        return emu_paged_create(c, p, a->q, a->ro, a->rl, &seed, &a->paged, err);
    }
    a->k = kiln_attn_random(p->dtype, kiln_attn_elems(p, 'k'), amp, &seed);
    a->v = kiln_attn_random(p->dtype, kiln_attn_elems(p, 'v'), 1, &seed);
    a->o = malloc(no * kiln_dtype_size(p->out));
    a->lse = malloc(nl * sizeof *a->lse);
    a->ro = malloc(no * sizeof *a->ro), a->rl = malloc(nl * sizeof *a->rl);
    if (!a->q || !a->k || !a->v || !a->o || !a->lse || !a->ro || !a->rl)
        return kiln_fail(err, KILN_ENOMEM, "out of memory");
    if (strstr(m->spec, "dropout_mask=true") && !(a->mask = emu_attn_mask_alloc(p)))
        return kiln_fail(err, KILN_ENOMEM, "out of memory");
    return kiln_attn_reference(p, a->q, a->k, a->v, a->ro, a->rl, err);
}

static int attn_case_tensor(kiln_case *c, const char *name, void **ptr, size_t *bytes) {
    if (emu_attn_varlen(c)) return emu_attn_varlen_tensor(c, name, ptr, bytes);
    attn_case *a = kiln_case_state(c);
    const kiln_attn_problem *p = &a->p;
    size_t nl = (size_t)p->batch * (size_t)p->heads_q * (size_t)p->seq_q;
    if (a->paged && emu_paged_tensor(a->paged, p, name, ptr, bytes) == 0) return 0;
    if (!strcmp(name, "q")) *ptr = a->q, *bytes = kiln_attn_elems(p, 'q') * kiln_dtype_size(p->dtype);
    else if (!strcmp(name, "k")) *ptr = a->k, *bytes = kiln_attn_elems(p, 'k') * kiln_dtype_size(p->dtype);
    else if (!strcmp(name, "v")) *ptr = a->v, *bytes = kiln_attn_elems(p, 'v') * kiln_dtype_size(p->dtype);
    else if (!strcmp(name, "o")) *ptr = a->o, *bytes = kiln_attn_elems(p, 'o') * kiln_dtype_size(p->out);
    else if (!strcmp(name, "lse")) *ptr = a->lse, *bytes = nl * sizeof(float);
    else if (!strcmp(name, "dropout_mask") && a->mask) *ptr = a->mask, *bytes = nl * (size_t)p->seq_k * sizeof(int32_t);
    else return emu_attn_case_slopes(p, name, ptr, bytes);
    return 0;
}

static int attn_case_scalar(kiln_case *c, const char *name, double *value) {
    if (emu_attn_varlen(c)) return emu_attn_varlen_scalar(c, name, value);
    attn_case *a = kiln_case_state(c);
    if (!strcmp(name, "splits")) return *value = a->splits, 0;
    if (a->paged && emu_paged_scalar(a->paged, name, value) == 0) return 0;
    if (a->paged && !strncmp(name, "stride_", 7)) return -1; /* the cache's tensors: contiguous in their dims */
    return emu_attn_case_scalar(&a->p, name, value);
}

/* Poisons o and lse (split-KV's partials are the runner's workspace). */
static void attn_case_prepare(kiln_case *c) {
    if (emu_attn_varlen(c)) {
        emu_attn_varlen_prepare(c);
        return;
    }
    attn_case *a = kiln_case_state(c);
    const kiln_attn_problem *p = &a->p;
    memset(a->o, 0xff, kiln_attn_elems(p, 'o') * kiln_dtype_size(p->out));
    memset(a->lse, 0xff, sizeof *a->lse * (size_t)p->batch * (size_t)p->heads_q * (size_t)p->seq_q);
    if (a->mask) emu_attn_mask_prepare(p, a->mask);
    if (a->paged) emu_paged_prepare(a->paged, p);
}

static void attn_case_check(kiln_case *c, kiln_case_output *out, int *nout) {
    if (emu_attn_varlen(c)) {
        emu_attn_varlen_check(c, out, nout);
        return;
    }
    attn_case *a = kiln_case_state(c);
    static const char *const names[2] = {"o", "lse"};
    if (a->paged) {
        static const char *const pnames[3] = {"o", "lse", "cache"};
        memset(out, 0, 3 * sizeof *out);
        int n = emu_paged_check(a->paged, &a->p, a->q, a->o, a->lse, a->ro, a->rl, out);
        for (*nout = 0; *nout < n; ++*nout) snprintf(out[*nout].name, sizeof out[*nout].name, "%s", pnames[*nout]);
        return;
    }
    kiln_attn_report r;
    kiln_attn_check(&a->p, a->p_dtype, a->q, a->k, a->v, a->o, a->lse, a->ro, a->rl, &r);
    for (*nout = 0; *nout < 2; ++*nout) {
        kiln_case_output *o = &out[*nout];
        snprintf(o->name, sizeof o->name, "%s", names[*nout]);
        o->max_abs = r.max_abs[*nout], o->worst = r.worst[*nout], o->bad = r.bad[*nout];
        snprintf(o->first, sizeof o->first, "%s", r.first[*nout]);
    }
    if (a->mask) emu_attn_mask_check(&a->p, a->mask, &out[(*nout)++]);
}

void emu_attn_case_describe(const kiln_attn_problem *p, char *buf, size_t size) {
    snprintf(buf, size, "batch %d  heads %d:%d  seq_q %d  seq_k %d", p->batch, p->heads_q, p->heads_kv, p->seq_q, p->seq_k);
}

void emu_attn_case_note(const kiln_attn_problem *p, char *buf, size_t size) {
    int most = 0; /* the most keys any row sees */
    for (int i = 0; i < p->seq_q && most < 2; i++) {
        int n = 0;
        for (int j = 0; j < p->seq_k && n < 2; j++) n += visible(p, i, j);
        most = n > most ? n : most;
    }
    static const char *const causal[] = {"", " causal=true", " causal=top_left"};
    char win[64] = "";
    if (p->window) snprintf(win, sizeof win, " window_left=%d window_right=%d", p->window_left, p->window_right);
    if (most == 0)
        snprintf(buf, size, "every row fully masked:%s%s seq_q=%d seq_k=%d (O 0 and lse +inf on both sides: the check "
                 "proves nothing; the window is relative to the bottom-right diagonal i + seq_k - seq_q)",
                 causal[p->causal], win, p->seq_q, p->seq_k);
    else if (most == 1)
        snprintf(buf, size, "every row sees at most one key:%s%s seq_q=%d seq_k=%d (O copies a row of V exactly: "
                 "only lse checks the scores)", causal[p->causal], win, p->seq_q, p->seq_k);
}

static void attn_case_note(const kiln_case *c, char *buf, size_t size) {
    const attn_case *a = emu_attn_varlen(c) ? NULL : kiln_case_state(c);
    if (a && !a->paged) emu_attn_case_note(&a->p, buf, size); /* a paged cache's rows see cache_seqlens keys */
}

static void attn_case_describe(const kiln_case *c, char *buf, size_t size) {
    if (emu_attn_varlen(c)) {
        emu_attn_varlen_describe(c, buf, size);
        return;
    }
    const attn_case *a = kiln_case_state(c);
    emu_attn_case_describe(&a->p, buf, size);
    if (a->paged) emu_paged_describe(a->paged, buf, size);
}

/* o and lse's float64 reference: the dense problem's, or a paged cache's entry by entry in o's and lse's layout (an
 * empty entry's O 0 and lse +inf); varlen cases have none here. */
static const double *attn_case_reference(kiln_case *c, const char *name) {
    if (emu_attn_varlen(c)) return NULL;
    attn_case *a = kiln_case_state(c);
    return !strcmp(name, "o") ? a->ro : !strcmp(name, "lse") ? a->rl : NULL;
}

/* The reference again from the inputs as they are now (a test wrote adversarial values with kiln_case_set): the
 * dense, the varlen and the paged problems (the cache, its new keys and q: emu_paged_refresh). */
static kiln_status attn_case_refresh(kiln_case *c, kiln_error *err) {
    if (emu_attn_varlen(c)) return emu_attn_varlen_refresh(c, err);
    attn_case *a = kiln_case_state(c);
    if (a->paged) return emu_paged_refresh(a->paged, &a->p, a->q, a->ro, a->rl, err);
    return kiln_attn_reference(&a->p, a->q, a->k, a->v, a->ro, a->rl, err);
}

const kiln_ref_family kiln_ref_attention = {
    .family = "attention",
    .create = attn_case_create,
    .destroy = attn_case_destroy,
    .tensor = attn_case_tensor,
    .scalar = attn_case_scalar,
    .prepare = attn_case_prepare,
    .check = attn_case_check,
    .describe = attn_case_describe,
    .note = attn_case_note,
    .reference = attn_case_reference,
    .refresh = attn_case_refresh,
};
