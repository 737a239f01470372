/* templates/lib/norm.ref.c - the norm families' float64 side: inputs, references, error model, and their case hooks. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu.h"
#include "kiln/emu_case.h"

#define U32 (1.0 / 16777216.0) /* 2^-24, the unit roundoff of f32 */

/*
 * One problem. Forward: x (and residual) in, y, mean (LayerNorm), rstd (and h) out. Backward:
 * x (h for the residual form), dy, weight, dres in; mean and rstd are the float64 forward
 * statistics rounded to f32 (as a forward would save them); dx, dweight, dbias out. The
 * references are float64 from the same rounded inputs. Every buffer ends at a guard page.
 */
typedef struct norm_data {
    kiln_norm_spec spec;
    int rows, hidden;
    float eps;
    void *x, *res, *w, *b, *dy, *dres;   /* inputs (NULL when the spec has none) */
    void *y, *h, *dx, *dw, *db;          /* outputs */
    float *mean, *rstd;                  /* forward: outputs; backward: inputs */
    double *ref_y, *ref_h, *ref_mean, *ref_rstd, *ref_dx, *ref_dw, *ref_db;
} norm_data;

/* Inputs: kiln_ln_input kinds (random, large-mean, constant, special, mixed); scale multiplies
 * x (1e30 exercises overflow-safe statistics); eps may be 0. */
static kiln_status norm_data_create(norm_data **out, const kiln_norm_spec *spec, float eps, int rows, int hidden,
                             kiln_ln_input input, double scale, uint64_t seed, kiln_error *err);
static void norm_data_free(norm_data *d);

typedef struct norm_priv {
    norm_data d;
    emu_guarded bufs;
    double x_scale;
} norm_priv;

/* Outputs checked: 0 y/dx, 1 mean/dweight, 2 rstd/dbias, 3 h. */
#define NORM_OUTPUTS 4
typedef struct norm_report {
    double max_abs[NORM_OUTPUTS], max_rel[NORM_OUTPUTS], worst[NORM_OUTPUTS];
    long bad[NORM_OUTPUTS];
    char first[NORM_OUTPUTS][256];
} norm_report;

static void *guarded(norm_priv *p, size_t size) { return emu_guarded_alloc(&p->bufs, size); }

static void norm_data_free(norm_data *d) {
    if (!d) return;
    norm_priv *p = (norm_priv *)d;
    emu_guarded_free(&p->bufs);
    free(d->ref_y), free(d->ref_h), free(d->ref_mean), free(d->ref_rstd);
    free(d->ref_dx), free(d->ref_dw), free(d->ref_db);
    free(p);
}

/* ---- specs ---- */

int kiln_norm_is_backward(const kiln_norm_spec *s) { return s->family == KILN_NORM_LN_BWD || s->family == KILN_NORM_RMS_BWD; }
static int is_rms(const kiln_norm_spec *s) { return s->family == KILN_NORM_RMS || s->family == KILN_NORM_RMS_BWD; }

/* The typed reading of a norm family's resolved (canonical) spec, as the generator wrote it: the
 * family from its keys (a backward has dy, a LayerNorm has bias, an RMSNorm none), then its values. */
kiln_status kiln_norm_spec_parse(const char *spec, kiln_norm_spec *s, kiln_error *err) {
    memset(s, 0, sizeof *s);
    gen_spec g;
    kiln_status st = gen_spec_parse(spec, &g, err);
    if (st != KILN_OK) return st;
    if (!emu_spec_get(&g, "x") || !emu_spec_get(&g, "hidden"))
        return kiln_fail(err, KILN_EINVAL, "not a norm spec: '%s' (a norm family's resolved spec has x and hidden)", spec);
    int bwd = emu_spec_get(&g, "dy") != NULL, rms = emu_spec_get(&g, "bias") == NULL;
    s->family = bwd ? (rms ? KILN_NORM_RMS_BWD : KILN_NORM_LN_BWD) : rms ? KILN_NORM_RMS : KILN_NORM_LN;
    s->x = emu_spec_dtype(&g, "x", KILN_F32);
    s->w = emu_spec_dtype(&g, "w", s->x), s->y = emu_spec_dtype(&g, "y", s->x), s->dy = emu_spec_dtype(&g, "dy", s->x);
    s->dx = emu_spec_dtype(&g, "dx", s->x), s->r = emu_spec_dtype(&g, "r", s->x);
    s->hidden = (int)emu_spec_int(&g, "hidden", 0);
    s->weight = emu_spec_bool(&g, "weight", 1);
    s->bias = !is_rms(s) && emu_spec_bool(&g, "bias", 1);
    s->residual = emu_spec_bool(&g, "residual", 0);
    s->offset = emu_spec_bool(&g, "offset", 0);
    return KILN_OK;
}

static const char *output_name(const kiln_norm_spec *s, int o) {
    static const char *const fwd[4] = {"y", "mean", "rstd", "h"}, *const bwd[4] = {"dx", "dweight", "dbias", NULL};
    if (o < 0 || o >= 4) return NULL;
    if (!kiln_norm_is_backward(s)) return (o == 1 && is_rms(s)) || (o == 3 && !s->residual) ? NULL : fwd[o];
    if ((o == 1 && !s->weight) || (o == 2 && !s->bias)) return NULL;
    return bwd[o];
}

/* ---- inputs ---- */


static double get(kiln_dtype t, const void *p, size_t i) { return p ? kiln_emu_value_get(t, p, i) : 0.0; }
/* The weight the norm multiplies by at column i: w, 1 + w (offset=1; exact here, the kernel forms
 * it in f32), or 1 without a weight. */
static double wval(const norm_data *d, size_t i) {
    return d->spec.weight ? get(d->spec.w, d->w, i) + d->spec.offset : 1.0;
}
static double round_to(kiln_dtype t, double v) {
    unsigned char tmp[4];
    kiln_emu_value_set(t, tmp, 0, v);
    return kiln_emu_value_get(t, tmp, 0);
}

/* The normalized input of row element i: x, or h = round_r(round_f32(x + residual)) (the forward's h). */
static double hval(const norm_data *d, size_t i) {
    const kiln_norm_spec *s = &d->spec;
    double x = get(s->x, d->x, i);
    if (kiln_norm_is_backward(s) || !s->residual) return x;
    return round_to(s->r, round_to(KILN_F32, x + get(s->r, d->res, i)));
}

/* Row r of kind in; k counts the rows of that kind so far (it picks the special values). */
static void fill_row(kiln_dtype xt, void *x, kiln_dtype rt, void *res, size_t n, kiln_ln_input in, int r, int k,
                     double scale, emu_rng *g) {
    size_t base = (size_t)r * n;
    double c = emu_rng_normal(g, 0, 3);
    for (size_t i = 0; i < n; i++) {
        double v;
        switch (in) {
        case KILN_LN_LARGE_MEAN: v = k % 2 ? emu_rng_normal(g, 1000, 0.1) : emu_rng_normal(g, 10000, 1e-3); break;
        case KILN_LN_CONSTANT: v = c; break;
        default: v = emu_rng_normal(g, 0.5, 2); break;
        }
        kiln_emu_value_set(xt, x, base + i, v * scale);
        if (res) kiln_emu_value_set(rt, res, base + i, in == KILN_LN_CONSTANT ? 0.0 : emu_rng_normal(g, 0, 1) * scale);
    }
    if (in != KILN_LN_SPECIAL || k % 5 == 0) return;
    size_t p1 = emu_rng_next(g) % n, p2 = emu_rng_next(g) % n;
    if (p2 == p1) p2 = (p1 + 1) % n;
    static const double kinds[4][2] = {{NAN, 0}, {INFINITY, 0}, {-INFINITY, 0}, {INFINITY, -INFINITY}};
    kiln_emu_value_set(xt, x, base + p1, kinds[k % 5 - 1][0]);
    if (k % 5 == 4) kiln_emu_value_set(xt, x, base + p2, n > 1 ? kinds[3][1] : NAN);
}

void emu_norm_fill_rows(kiln_dtype xt, void *x, kiln_dtype rt, void *res, int rows, size_t n, kiln_ln_input input,
                        double scale, emu_rng *g) {
    for (int r = 0; r < rows; r++) {
        kiln_ln_input in = input == KILN_LN_MIXED ? (kiln_ln_input)(r % 4) : input;
        /* in mixed rows a special row takes the next special value, never the plain one */
        int k = input == KILN_LN_MIXED ? (in == KILN_LN_SPECIAL ? r / 4 % 4 + 1 : r / 4) : r;
        fill_row(xt, x, rt, res, n, in, r, k, scale, g);
    }
}

void emu_norm_row_stats(double (*val)(const void *ctx, size_t i), const void *ctx, size_t base, size_t n, int rms,
                        double eps, double *mean, double *rstd) {
    double sum = 0, sq = 0, m = 0;
    for (size_t i = 0; i < n; i++) sum += val(ctx, base + i);
    if (!rms) m = sum / (double)n;
    for (size_t i = 0; i < n; i++) {
        double c = val(ctx, base + i) - m;
        sq += c * c;
    }
    *mean = m, *rstd = 1.0 / sqrt(sq / (double)n + eps);
}

static double hval_of(const void *d, size_t i) { return hval(d, i); }

/* float64 references. Forward: torch layer_norm / RMSNorm on h. Backward: the forward statistics
 * (rounded to f32, as a forward saves them) and the analytic gradients from the same inputs. */
static void reference(norm_data *d) {
    const kiln_norm_spec *s = &d->spec;
    size_t n = (size_t)d->hidden;
    int rms = is_rms(s), bwd = kiln_norm_is_backward(s);
    if (bwd)
        for (size_t i = 0; i < n; i++) d->ref_dw[i] = d->ref_db[i] = 0;
    for (int r = 0; r < d->rows; r++) {
        size_t base = (size_t)r * n;
        double mean, rstd;
        emu_norm_row_stats(hval_of, d, base, n, rms, (double)d->eps, &mean, &rstd);
        if (!bwd) {
            d->ref_mean[r] = mean, d->ref_rstd[r] = rstd;
            for (size_t i = 0; i < n; i++) {
                double w = wval(d, i), b = s->bias ? get(s->w, d->b, i) : 0.0;
                double h = hval(d, base + i);
                if (s->residual) d->ref_h[base + i] = h;
                d->ref_y[base + i] = (h - mean) * rstd * w + b;
            }
            continue;
        }
        /* the saved statistics, as f32 */
        d->mean[r] = (float)mean, d->rstd[r] = (float)rstd;
        double m = rms ? 0.0 : (double)d->mean[r], rs = d->rstd[r], sg = 0, sgx = 0;
        for (size_t i = 0; i < n; i++) {
            double xh = (get(s->x, d->x, base + i) - m) * rs, g = get(s->dy, d->dy, base + i) * wval(d, i);
            sg += g, sgx += g * xh;
        }
        double a = sgx / (double)n, c = rms ? 0.0 : sg / (double)n;
        for (size_t i = 0; i < n; i++) {
            double dy = get(s->dy, d->dy, base + i), xh = (get(s->x, d->x, base + i) - m) * rs;
            double g = dy * wval(d, i);
            d->ref_dx[base + i] = rs * (g - c - xh * a) + (s->residual ? get(s->r, d->dres, base + i) : 0.0);
            d->ref_dw[i] += dy * xh;
            d->ref_db[i] += dy;
        }
    }
}

static kiln_status norm_data_create(norm_data **out, const kiln_norm_spec *spec, float eps, int rows, int hidden,
                                  kiln_ln_input input, double scale, uint64_t seed, kiln_error *err) {
    *out = NULL;
    if (rows < 1 || hidden < 1 || (spec->hidden && spec->hidden != hidden) || (unsigned)input >= KILN_LN_INPUT_COUNT)
        return kiln_fail(err, KILN_EINVAL, "norm data: rows %d and hidden %d must be positive, hidden must match the "
                         "spec's %d", rows, hidden, spec->hidden);
    if (!(eps >= 0)) return kiln_fail(err, KILN_EINVAL, "norm data: eps must be >= 0, got %g", (double)eps);
    norm_priv *p = calloc(1, sizeof *p);
    if (!p) return kiln_fail(err, KILN_ENOMEM, "out of memory");
    norm_data *d = &p->d;
    const kiln_norm_spec *s = spec;
    int bwd = kiln_norm_is_backward(s);
    size_t n = (size_t)rows * (size_t)hidden, hb = (size_t)hidden;
    d->spec = *s, d->rows = rows, d->hidden = hidden, d->eps = eps;
    int ok = 1;
#define ALLOC(field, bytes) (ok = ok && ((field) = guarded(p, (bytes))) != NULL)
    ALLOC(d->x, n * kiln_dtype_size(s->x));
    ALLOC(d->rstd, (size_t)rows * 4);
    if (!is_rms(s)) ALLOC(d->mean, (size_t)rows * 4);
    if (s->weight) ALLOC(d->w, hb * kiln_dtype_size(s->w));
    if (s->bias && !bwd) ALLOC(d->b, hb * kiln_dtype_size(s->w));
    if (!bwd) {
        ALLOC(d->y, n * kiln_dtype_size(s->y));
        if (s->residual) ALLOC(d->res, n * kiln_dtype_size(s->r)), ALLOC(d->h, n * kiln_dtype_size(s->r));
        ok = ok && (d->ref_y = malloc(n * sizeof(double))) && (d->ref_mean = malloc((size_t)rows * sizeof(double))) &&
             (d->ref_rstd = malloc((size_t)rows * sizeof(double))) && (!s->residual || (d->ref_h = malloc(n * sizeof(double))));
    } else {
        ALLOC(d->dy, n * kiln_dtype_size(s->dy));
        ALLOC(d->dx, n * kiln_dtype_size(s->dx));
        if (s->residual) ALLOC(d->dres, n * kiln_dtype_size(s->r));
        if (s->weight) ALLOC(d->dw, hb * kiln_dtype_size(s->w));
        if (s->bias) ALLOC(d->db, hb * kiln_dtype_size(s->w));
        if (!d->mean) ALLOC(d->mean, (size_t)rows * 4); /* RMSNorm: unused by the kernel, used by the reference */
        ok = ok && (d->ref_dx = malloc(n * sizeof(double))) && (d->ref_dw = malloc(hb * sizeof(double))) &&
             (d->ref_db = malloc(hb * sizeof(double)));
    }
#undef ALLOC
    if (!ok) {
        norm_data_free(d);
        return kiln_fail(err, KILN_ENOMEM, "out of memory for %d x %d norm buffers", rows, hidden);
    }
    p->x_scale = scale;
    emu_rng g = {seed * 0x2545f4914f6cdd1dull + 7};
    emu_norm_fill_rows(s->x, d->x, s->r, d->res, rows, (size_t)hidden, input, scale, &g);
    for (size_t i = 0; i < hb; i++) {
        /* every 16th weight multiplies by 0 (a gradient that must come out exactly 0 through dy w);
         * offset=1: zero-centered weights (1 + w), most near 0, where rounding 1 + w to a 16-bit
         * dtype would lose them */
        if (d->w)
            kiln_emu_value_set(s->w, d->w, i, i % 16 == 5 ? -(double)s->offset : s->offset ? emu_rng_normal(&g, 0, 0.02) : emu_rng_normal(&g, 1, 0.5));
        if (d->b) kiln_emu_value_set(s->w, d->b, i, emu_rng_normal(&g, 0, 0.5));
    }
    for (size_t i = 0; bwd && i < n; i++) {
        kiln_emu_value_set(s->dy, d->dy, i, emu_rng_normal(&g, 0, 1));
        if (d->dres) kiln_emu_value_set(s->r, d->dres, i, emu_rng_normal(&g, 0, 1));
    }
    reference(d);
    *out = d;
    return KILN_OK;
}

/* ---- tensors (the case runner binds them by name and carves the workspaces) ---- */

/* The tensor a kernel parameter names and its size in bytes; (void *)-1 for a name that is no norm
 * tensor (the workspaces ws and rs are the runner's). */
static void *pointer_for(norm_data *d, const char *name, size_t *bytes) {
    static const char *const names[] = {"y", "mean", "rstd", "x", "weight", "bias", "h", "residual",
                                        "dx", "dy", "dres", "dweight", "dbias"};
    const kiln_norm_spec *s = &d->spec;
    size_t n = (size_t)d->rows * (size_t)d->hidden, hb = (size_t)d->hidden, rb = (size_t)d->rows * 4;
    void *ptrs[] = {d->y, d->mean, d->rstd, d->x, d->w, d->b, d->h, d->res, d->dx, d->dy, d->dres, d->dw, d->db};
    size_t sizes[] = {n * kiln_dtype_size(s->y), rb, rb, n * kiln_dtype_size(s->x), hb * kiln_dtype_size(s->w),
                      hb * kiln_dtype_size(s->w), n * kiln_dtype_size(s->r), n * kiln_dtype_size(s->r),
                      n * kiln_dtype_size(s->dx), n * kiln_dtype_size(s->dy), n * kiln_dtype_size(s->r),
                      hb * kiln_dtype_size(s->w), hb * kiln_dtype_size(s->w)};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (!strcmp(names[i], name)) {
            *bytes = sizes[i];
            return ptrs[i];
        }
    return (void *)-1;
}

static void poison(void *p, size_t bytes) {
    if (p) memset(p, 0xff, bytes);
}

/* ---- checks ----
 * Error model (u = 2^-24), as for the LayerNorm forward (emu_layernorm.c): a row sum passes
 * through at most D = ceil(n / T) + 8 + 5 + T / 32 additions.
 * Forward: mean |m - mean| <= (D + 2) u mean(|h|); rstd against 1/sqrt(v + eps) with v the
 * centered (RMSNorm: plain) mean square around the kernel's own m: ((D + 4)/2 + 4) u rstd;
 * y against (h - m) r w + b: 4u|(h - m) r w| + u|y| + half an ulp of y's dtype; h exact
 * (h = x + residual rounded to f32, then to r).
 * Backward, with xh = (x - m) r, g = dy w, a = sum(g xh)/n, c = sum(g)/n from the saved m, r:
 * the kernel's a and c are within (D + 3) u sum|g xh| / n and (D + 1) u sum|g| / n; the
 * elementwise steps add 4u of each term, so
 *   |dx - ref| <= 2 r [4u (|g| + |xh a| + |c|) + |xh| (D + 3) u S|g xh| / n + (D + 1) u S|g| / n]
 *                 + 2u |dx| + half an ulp of dx's dtype;
 * dweight and dbias sum each column over the rows: every term passes through at most
 * E = rows + parts / 32 + 16 additions (a block's rows in sequence, the reduce kernel's four
 * interleaved sums of parts / 32 and its eight warp sums), so |err| <= (E + 4) u S|dy xh|
 * (S|dy|) + half an ulp of w's dtype. */

typedef struct checker {
    const kiln_norm_spec *s;
    kiln_case_output out[NORM_OUTPUTS];
    long total;
} checker;

/* One comparison of output o at (row, col) (row < 0: a column output) with the one checker. */
static void compare(checker *c, int o, int row, long col, double got, double want, double tol, double ref, int unwritten) {
    const char *name = output_name(c->s, o);
    if (row >= 0 && col >= 0)
        c->total += kiln_check_value(&c->out[o], got, want, tol, ref, unwritten, "%s[%d][%ld]", name, row, col);
    else if (row >= 0) c->total += kiln_check_value(&c->out[o], got, want, tol, ref, unwritten, "%s[%d]", name, row);
    else c->total += kiln_check_value(&c->out[o], got, want, tol, ref, unwritten, "%s[%ld]", name, col);
}

static void check_forward_row(const norm_data *d, int row, double D, checker *c) {
    const kiln_norm_spec *s = &d->spec;
    size_t n = (size_t)d->hidden, base = (size_t)row * n;
    int rms = is_rms(s);
    double mean_abs = 0, m = 0;
    for (size_t i = 0; i < n; i++) mean_abs += fabs(hval(d, base + i));
    mean_abs /= (double)n;
    if (!rms) {
        m = d->mean[row];
        compare(c, 1, row, -1, m, d->ref_mean[row], (D + 2) * U32 * mean_abs + 1e-30, d->ref_mean[row],
                emu_poisoned(KILN_F32, d->mean, (size_t)row));
        if (!isfinite(m) && isfinite(d->ref_mean[row])) m = d->ref_mean[row];
    }
    double v = 0;
    for (size_t i = 0; i < n; i++) {
        double t = hval(d, base + i) - m;
        v += t * t;
    }
    double rs = d->rstd[row];
    double r_want = isfinite(d->ref_rstd[row]) || isinf(d->ref_rstd[row]) ? 1.0 / sqrt(v / (double)n + (double)d->eps)
                                                                           : d->ref_rstd[row];
    compare(c, 2, row, -1, rs, r_want, ((D + 4) / 2 + 4) * U32 * fabs(r_want), d->ref_rstd[row],
            emu_poisoned(KILN_F32, d->rstd, (size_t)row));
    if (!isfinite(rs) && isfinite(r_want)) rs = r_want;
    for (size_t i = 0; i < n; i++) {
        double w = wval(d, i), b = s->bias && !rms ? get(s->w, d->b, i) : 0.0;
        double h = hval(d, base + i);
        double t = (h - m) * rs * w, want = t + b;
        double tol = ((4 + s->offset) * fabs(t) + fabs(want)) * U32 * 1.001 + 1e-40; /* offset: 1 + w rounded to f32 */
        if (s->y != KILN_F32) tol += 0.5 * emu_ulp_of(s->y, fabs(want) + tol);
        if (isnan(d->ref_y[base + i])) want = NAN;
        compare(c, 0, row, (long)i, get(s->y, d->y, base + i), want, tol, d->ref_y[base + i],
                emu_poisoned(s->y, d->y, base + i));
        if (s->residual)
            compare(c, 3, row, (long)i, get(s->r, d->h, base + i), d->ref_h[base + i], 0, d->ref_h[base + i],
                    emu_poisoned(s->r, d->h, base + i));
    }
}

static void check_backward(const norm_data *d, double D, unsigned parts, checker *c) {
    const kiln_norm_spec *s = &d->spec;
    size_t n = (size_t)d->hidden;
    int rms = is_rms(s);
    double *sw = calloc(n, sizeof(double)), *sb = calloc(n, sizeof(double));
    if (!sw || !sb) {
        free(sw), free(sb);
        return;
    }
    for (int row = 0; row < d->rows; row++) {
        size_t base = (size_t)row * n;
        double m = rms ? 0.0 : (double)d->mean[row], rs = d->rstd[row], sg = 0, sgx = 0, a = 0, cc = 0;
        for (size_t i = 0; i < n; i++) {
            double xh = (get(s->x, d->x, base + i) - m) * rs;
            double g = get(s->dy, d->dy, base + i) * wval(d, i);
            sg += fabs(g), sgx += fabs(g * xh), a += g * xh, cc += g;
        }
        a /= (double)n, cc = rms ? 0.0 : cc / (double)n;
        for (size_t i = 0; i < n; i++) {
            double dy = get(s->dy, d->dy, base + i), xh = (get(s->x, d->x, base + i) - m) * rs;
            double g = dy * wval(d, i), want = d->ref_dx[base + i];
            double o = s->offset; /* 1 + w rounded to f32: u more on g and on both sums */
            double tol = 2 * rs * ((4 + o) * U32 * (fabs(g) + fabs(xh * a) + fabs(cc)) + fabs(xh) * (D + 3 + o) * U32 * sgx / (double)n +
                                   (D + 1 + o) * U32 * sg / (double)n) + 2 * U32 * fabs(want) + 1e-40;
            if (s->dx != KILN_F32) tol += 0.5 * emu_ulp_of(s->dx, fabs(want) + tol);
            compare(c, 0, row, (long)i, get(s->dx, d->dx, base + i), want, tol, want, emu_poisoned(s->dx, d->dx, base + i));
            sw[i] += fabs(dy * xh), sb[i] += fabs(dy);
        }
    }
    double E = d->rows + parts / 32.0 + 16;
    for (size_t i = 0; i < n; i++) {
        if (s->weight) {
            double tol = (E + 4) * U32 * sw[i] + 1e-40;
            if (s->w != KILN_F32) tol += 0.5 * emu_ulp_of(s->w, fabs(d->ref_dw[i]) + tol);
            compare(c, 1, -1, (long)i, get(s->w, d->dw, i), d->ref_dw[i], tol, d->ref_dw[i], emu_poisoned(s->w, d->dw, i));
        }
        if (s->bias && !rms) {
            double tol = (E + 4) * U32 * sb[i] + 1e-40;
            if (s->w != KILN_F32) tol += 0.5 * emu_ulp_of(s->w, fabs(d->ref_db[i]) + tol);
            compare(c, 2, -1, (long)i, get(s->w, d->db, i), d->ref_db[i], tol, d->ref_db[i], emu_poisoned(s->w, d->db, i));
        }
    }
    free(sw), free(sb);
}

static long norm_check(const norm_data *d, int threads_per_row, unsigned parts, norm_report *r) {
    memset(r, 0, sizeof *r);
    int t = threads_per_row > 0 ? threads_per_row : 32;
    double D = ceil((double)d->hidden / t) + 8 + 5 + t / 32.0;
    checker c = {.s = &d->spec};
    if (kiln_norm_is_backward(&d->spec)) check_backward(d, D, parts, &c);
    else
        for (int row = 0; row < d->rows; row++) check_forward_row(d, row, D, &c);
    for (int o = 0; o < NORM_OUTPUTS; o++) {
        r->max_abs[o] = c.out[o].max_abs, r->max_rel[o] = c.out[o].max_rel, r->worst[o] = c.out[o].worst;
        r->bad[o] = c.out[o].bad;
        memcpy(r->first[o], c.out[o].first, sizeof r->first[o]);
    }
    return c.total;
}

/* ---- the case hooks (kiln/emu_case.h), shared by the four norm descriptors ---- */

typedef struct norm_case {
    norm_data *d;
} norm_case;

kiln_status emu_norm_case_shape(const kiln_case *c, int *rows, int *hidden, kiln_error *err) {
    const kiln_case_opts *o = kiln_case_options(c);
    long spec_hidden = emu_spec_int(emu_case_spec(c), "hidden", 0);
    *rows = (int)kiln_case_opts_get(o, "rows", 0);
    *hidden = (int)kiln_case_opts_get(o, "hidden", spec_hidden);
    if (*rows < 1) return kiln_fail(err, KILN_EINVAL, "missing --rows R (how many rows to run, required)");
    if (!*hidden) return kiln_fail(err, KILN_EINVAL, "the spec has hidden=launch: give the row length with --hidden H");
    if (spec_hidden && *hidden != spec_hidden)
        return kiln_fail(err, KILN_EINVAL, "--hidden %d contradicts the spec's hidden=%ld", *hidden, spec_hidden);
    if ((long long)*rows * *hidden > (1LL << 26))
        return kiln_fail(err, KILN_EINVAL, "%d rows x %d is too large for the emulator (at most 2^26 elements)", *rows, *hidden);
    return KILN_OK;
}

float emu_norm_case_eps(const kiln_case *c) {
    const kiln_case_opts *o = kiln_case_options(c);
    return kiln_case_opts_has(o, "eps") ? (float)kiln_case_opts_real(o, "eps", 0) : o->eps ? o->eps : 1e-5f;
}

kiln_status emu_norm_case_create(kiln_case *c, kiln_error *err) {
    const kiln_case_opts *o = kiln_case_options(c);
    kiln_norm_spec spec;
    int rows, hidden;
    kiln_status st = kiln_norm_spec_parse(kiln_emu_kernel_meta(kiln_case_kernel(c))->spec, &spec, err);
    if (st != KILN_OK || (st = emu_norm_case_shape(c, &rows, &hidden, err)) != KILN_OK) return st;
    norm_case *nc = calloc(1, sizeof *nc);
    if (!nc) return kiln_fail(err, KILN_ENOMEM, "out of memory");
    kiln_case_set_state(c, nc);
    return norm_data_create(&nc->d, &spec, emu_norm_case_eps(c), rows, hidden, o->input, o->scale, o->seed, err);
}

void emu_norm_case_destroy(kiln_case *c) {
    norm_case *nc = kiln_case_state(c);
    norm_data_free(nc->d);
    free(nc);
}

int emu_norm_case_tensor(kiln_case *c, const char *name, void **ptr, size_t *bytes) {
    norm_case *nc = kiln_case_state(c);
    *ptr = pointer_for(nc->d, name, bytes);
    return *ptr == (void *)-1 ? -1 : 0;
}

const double *emu_norm_case_reference(kiln_case *c, const char *name) {
    const norm_data *d = ((norm_case *)kiln_case_state(c))->d;
    static const char *const names[] = {"y", "h", "mean", "rstd", "dx", "dweight", "dbias"};
    const double *refs[] = {d->ref_y, d->ref_h, d->ref_mean, d->ref_rstd, d->ref_dx, d->ref_dw, d->ref_db};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (!strcmp(names[i], name)) return refs[i];
    return NULL;
}

kiln_status emu_norm_case_refresh(kiln_case *c, kiln_error *err) {
    (void)err; /* (the float64 reference cannot fail) */
    reference(((norm_case *)kiln_case_state(c))->d);
    return KILN_OK;
}

int emu_norm_case_scalar(kiln_case *c, const char *name, double *value) {
    norm_case *nc = kiln_case_state(c);
    if (!strcmp(name, "eps")) *value = nc->d->eps;
    else if (!strcmp(name, "rows")) *value = nc->d->rows;
    else if (!strcmp(name, "hidden")) *value = nc->d->hidden;
    else return -1; /* parts and the reduce kernel's cols: the launch description binds them */
    return 0;
}

/* Poisons the outputs (the workspace is the runner's). */
void emu_norm_case_prepare(kiln_case *c) {
    norm_case *nc = kiln_case_state(c);
    norm_data *d = nc->d;
    const kiln_norm_spec *s = &d->spec;
    size_t n = (size_t)d->rows * (size_t)d->hidden, hb = (size_t)d->hidden;
    if (!kiln_norm_is_backward(s)) {
        poison(d->y, n * kiln_dtype_size(s->y));
        poison(d->h, n * kiln_dtype_size(s->r));
        poison(d->mean, (size_t)d->rows * 4);
        poison(d->rstd, (size_t)d->rows * 4);
        return;
    }
    poison(d->dx, n * kiln_dtype_size(s->dx));
    poison(d->dw, hb * kiln_dtype_size(s->w));
    poison(d->db, hb * kiln_dtype_size(s->w));
}

void emu_norm_case_check(kiln_case *c, kiln_case_output *out, int *nout) {
    norm_case *nc = kiln_case_state(c);
    const kiln_kernel_meta *m = kiln_emu_kernel_meta(kiln_case_kernel(c));
    unsigned blocks = 0; /* the row kernel's grid: a backward's partial rows are blocks x ws_rows_per_block */
    for (int i = 0; i < kiln_case_nsteps(c); i++)
        if (kiln_case_step_at(c, i)->kernel == kiln_case_kernel(c)) blocks = kiln_case_step_at(c, i)->grid[0];
    norm_report r;
    norm_check(nc->d, (int)m->threads_per_row, blocks * (m->ws_rows_per_block ? m->ws_rows_per_block : 1), &r);
    *nout = 0;
    for (int i = 0; i < NORM_OUTPUTS; i++) {
        const char *name = output_name(&nc->d->spec, i);
        if (!name) continue;
        kiln_case_output *o = &out[(*nout)++];
        snprintf(o->name, sizeof o->name, "%s", name);
        o->show_rel = 1, o->max_abs = r.max_abs[i], o->max_rel = r.max_rel[i], o->worst = r.worst[i], o->bad = r.bad[i];
        snprintf(o->first, sizeof o->first, "%s", r.first[i]);
    }
}

void emu_norm_case_describe(const kiln_case *c, char *buf, size_t size) {
    norm_case *nc = kiln_case_state(c);
    snprintf(buf, size, "%d rows x %d  %s inputs", nc->d->rows, nc->d->hidden, kiln_ln_input_name(kiln_case_options(c)->input));
}
