/* templates/layernorm.ref.c - layernorm's float64 reference: inputs, reference, error model, its registry descriptor. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu.h"
#include "kiln/emu_case.h"

/* The resolved spec's facts this reference reads (the generator checked the spec). */
typedef struct kiln_layernorm_spec {
    kiln_dtype x, w, y; /* input, weight/bias, output */
    int hidden;         /* > 0: fixed at generation time; 0: passed at launch (hidden=launch) */
    int has_weight, has_bias;
} kiln_layernorm_spec;

/* A LayerNorm problem: inputs in their dtypes, outputs as the kernel writes them, and the
 * float64 reference. Buffers end at a guard page, so reads past the end fault. */
typedef struct kiln_ln_data {
    kiln_layernorm_spec spec;
    int rows, hidden;
    float eps;
    void *x, *w, *b;   /* w, b NULL when the spec has none */
    void *y;           /* rows x hidden in spec.y */
    float *mean, *rstd; /* rows */
    double *ref_y, *ref_mean, *ref_rstd;
} kiln_ln_data;

/* Allocates and fills a problem; hidden must equal spec->hidden unless that is 0. */
static kiln_status kiln_ln_data_create(kiln_ln_data **out, const kiln_layernorm_spec *spec, float eps,
                                int rows, int hidden, kiln_ln_input input, uint64_t seed,
                                kiln_error *err);
static void kiln_ln_data_free(kiln_ln_data *d);

/* Outcome of comparing the outputs with the reference; index 0 y, 1 mean, 2 rstd. */
typedef struct kiln_ln_report {
    double max_abs[3];   /* largest |kernel - reference| over finite values */
    double max_rel[3];   /* largest |kernel - reference| / |reference| (reference != 0) */
    double worst[3];     /* largest error / tolerance; above 1 fails */
    long bad[3];         /* elements out of tolerance, unwritten, or with wrong NaN/Inf */
    char first[3][256];  /* the first bad element of each output, described */
} kiln_ln_report;

/* Checks every output against tolerances derived from the dtypes and the shape (see
 * templates/layernorm.ref.c for the error model). Returns the total number of bad elements. */
static long kiln_ln_check(const kiln_ln_data *d, int threads_per_row, kiln_ln_report *r);
/* "y", "mean", "rstd" */
static const char *kiln_ln_output_name(int i);

#define U32 (1.0 / 16777216.0) /* 2^-24, the unit roundoff of f32 */

/* The problem first, then what only this file needs to free it. */
typedef struct ln_priv {
    kiln_ln_data d;
    emu_guarded bufs;
} ln_priv;

static void *guarded(ln_priv *p, size_t size) { return emu_guarded_alloc(&p->bufs, size); }

static void kiln_ln_data_free(kiln_ln_data *d) {
    if (!d) return;
    ln_priv *p = (ln_priv *)d;
    emu_guarded_free(&p->bufs);
    free(d->ref_y);
    free(d->ref_mean);
    free(d->ref_rstd);
    free(p);
}

/* ---- specs and input kinds ---- */

static const char *const input_names[KILN_LN_INPUT_COUNT] = {"random", "large-mean", "constant", "special",
                                                               "mixed"};

const char *kiln_ln_input_name(kiln_ln_input in) {
    return (unsigned)in < KILN_LN_INPUT_COUNT ? input_names[in] : NULL;
}

int kiln_ln_input_parse(const char *name, kiln_ln_input *out) {
    for (int i = 0; i < KILN_LN_INPUT_COUNT; i++)
        if (!strcmp(name, input_names[i])) {
            *out = (kiln_ln_input)i;
            return 0;
        }
    return -1;
}

/* The typed reading of a resolved layernorm spec (the generator checked it); a key it lacks reads
 * as the template's default (w and y follow x, weight and bias on). */
static kiln_status ln_spec_parse(const char *spec, kiln_layernorm_spec *s, kiln_error *err) {
    gen_spec g;
    kiln_status st = gen_spec_parse(spec, &g, err);
    if (st != KILN_OK) return st;
    if (strcmp(g.family, "layernorm")) return kiln_fail(err, KILN_EINVAL, "not a LayerNorm spec: '%s'", spec);
    s->x = emu_spec_dtype(&g, "x", KILN_F32);
    s->w = emu_spec_dtype(&g, "w", s->x), s->y = emu_spec_dtype(&g, "y", s->x);
    s->hidden = (int)emu_spec_int(&g, "hidden", 0);
    s->has_weight = emu_spec_bool(&g, "weight", 1), s->has_bias = emu_spec_bool(&g, "bias", 1);
    return KILN_OK;
}

/* ---- inputs (drawn as the norm families draw them: templates/lib/norm.ref.c) ---- */

static double xval(const void *d, size_t i) {
    const kiln_ln_data *ln = d;
    return kiln_emu_value_get(ln->spec.x, ln->x, i);
}

/* float64 reference: torch.nn.functional.layer_norm (biased variance, eps inside the root). */
static void reference(kiln_ln_data *d) {
    size_t n = (size_t)d->hidden;
    for (int r = 0; r < d->rows; r++) {
        size_t base = (size_t)r * n;
        double mean, rstd;
        emu_norm_row_stats(xval, d, base, n, 0, (double)d->eps, &mean, &rstd);
        d->ref_mean[r] = mean;
        d->ref_rstd[r] = rstd;
        for (size_t i = 0; i < n; i++) {
            double w = d->w ? kiln_emu_value_get(d->spec.w, d->w, i) : 1.0;
            double b = d->b ? kiln_emu_value_get(d->spec.w, d->b, i) : 0.0;
            d->ref_y[base + i] = (kiln_emu_value_get(d->spec.x, d->x, base + i) - mean) * rstd * w + b;
        }
    }
}

static kiln_status kiln_ln_data_create(kiln_ln_data **out, const kiln_layernorm_spec *spec, float eps, int rows,
                                int hidden, kiln_ln_input input, uint64_t seed, kiln_error *err) {
    *out = NULL;
    if (rows < 1 || hidden < 1 || (spec->hidden && spec->hidden != hidden) || (unsigned)input >= KILN_LN_INPUT_COUNT)
        return kiln_fail(err, KILN_EINVAL, "LayerNorm data: rows %d and hidden %d must be positive, hidden must "
                         "match the spec's %d", rows, hidden, spec->hidden);
    if (!(eps >= 0)) return kiln_fail(err, KILN_EINVAL, "LayerNorm data: eps must be >= 0, got %g", (double)eps);
    ln_priv *p = calloc(1, sizeof *p);
    if (!p) return kiln_fail(err, KILN_ENOMEM, "out of memory");
    kiln_ln_data *d = &p->d;
    size_t n = (size_t)rows * (size_t)hidden;
    d->spec = *spec;
    d->rows = rows, d->hidden = hidden, d->eps = eps;
    d->x = guarded(p, n * kiln_dtype_size(spec->x));
    d->y = guarded(p, n * kiln_dtype_size(spec->y));
    d->mean = guarded(p, (size_t)rows * 4);
    d->rstd = guarded(p, (size_t)rows * 4);
    d->w = spec->has_weight ? guarded(p, (size_t)hidden * kiln_dtype_size(spec->w)) : NULL;
    d->b = spec->has_bias ? guarded(p, (size_t)hidden * kiln_dtype_size(spec->w)) : NULL;
    d->ref_y = malloc(n * sizeof *d->ref_y);
    d->ref_mean = malloc((size_t)rows * sizeof(double));
    d->ref_rstd = malloc((size_t)rows * sizeof(double));
    if (!d->x || !d->y || !d->mean || !d->rstd || (spec->has_weight && !d->w) || (spec->has_bias && !d->b) ||
        !d->ref_y || !d->ref_mean || !d->ref_rstd) {
        kiln_ln_data_free(d);
        return kiln_fail(err, KILN_ENOMEM, "out of memory for %d x %d LayerNorm buffers", rows, hidden);
    }
    emu_rng g = {seed * 0x2545f4914f6cdd1dull + 1};
    emu_norm_fill_rows(spec->x, d->x, KILN_F32, NULL, rows, (size_t)hidden, input, 1.0, &g);
    for (int i = 0; i < hidden; i++) {
        if (d->w) kiln_emu_value_set(spec->w, d->w, (size_t)i, emu_rng_normal(&g, 1, 0.5));
        if (d->b) kiln_emu_value_set(spec->w, d->b, (size_t)i, emu_rng_normal(&g, 0, 0.5));
    }
    reference(d);
    *out = d;
    return KILN_OK;
}

/* ---- checks ----
 * Error model (u = 2^-24). The kernel sums in f32: each thread adds its s <= ceil(n/T) + 8
 * elements in sequence, a warp adds 32 partial sums in a 5-level butterfly, and T/32
 * warp sums are added in sequence, so every element passes through at most
 * D = s + 5 + T/32 additions. The classic bound for such a sum gives
 *   |mean_kernel - mean| <= (D + 2) u mean(|x|)                       (mean)
 * For rstd and y the kernel's own mean m and rstd r are used, which keeps the bounds tight
 * even where f32 cannot resolve the mean (10000 + N(0, 1e-3)):
 *   v = sum((x - m)^2) / n exactly; the kernel's var is v (1 +- (D + 4) u), so
 *   |r - 1/sqrt(v + eps)| <= ((D + 4) / 2 + 4) u r                      (rstd; 4u covers
 *   the sqrt, the division and an rsqrt.approx's 2^-22.9 on hardware)
 *   y_exact = (x - m) r w + b; the f32 affine step (subtract, multiply, fma) is within
 *   3u |(x - m) r w| + u |b| <= 4u |(x - m) r w| + u |y_exact|; rounding to the output dtype adds half an ulp of it
 *   (f16: 2^-11 relative, bf16: 2^-8 relative; f32's rounding is already counted). */

typedef struct checker {
    kiln_case_output out[3];
    long total;
} checker;

/* Records one comparison of output o at (row, col) with the one checker (kiln_check_value): got
 * against the model's want +- tol, and against the pure reference ref. */
static void compare(checker *c, int o, int row, long col, double got, double want, double tol, double ref,
                    bool unwritten) {
    if (col >= 0)
        c->total += kiln_check_value(&c->out[o], got, want, tol, ref, unwritten, "%s[%d][%ld]", kiln_ln_output_name(o), row, col);
    else c->total += kiln_check_value(&c->out[o], got, want, tol, ref, unwritten, "%s[%d]", kiln_ln_output_name(o), row);
}

static void check_row(const kiln_ln_data *d, int row, double D, checker *c) {
    size_t n = (size_t)d->hidden, base = (size_t)row * n;
    double mean_abs = 0;
    for (size_t i = 0; i < n; i++) mean_abs += fabs(kiln_emu_value_get(d->spec.x, d->x, base + i));
    mean_abs /= (double)n;
    double m = d->mean[row], rs = d->rstd[row];
    compare(c, 1, row, -1, m, d->ref_mean[row], (D + 2) * U32 * mean_abs + 1e-30, d->ref_mean[row],
            emu_poisoned(KILN_F32, d->mean, (size_t)row));
    if (!isfinite(m) && isfinite(d->ref_mean[row])) m = d->ref_mean[row];
    double v = 0;
    for (size_t i = 0; i < n; i++) {
        double t = kiln_emu_value_get(d->spec.x, d->x, base + i) - m;
        v += t * t;
    }
    double r_want = isfinite(d->ref_rstd[row]) ? 1.0 / sqrt(v / (double)n + (double)d->eps) : d->ref_rstd[row];
    compare(c, 2, row, -1, rs, r_want, ((D + 4) / 2 + 4) * U32 * fabs(r_want), d->ref_rstd[row],
            emu_poisoned(KILN_F32, d->rstd, (size_t)row));
    if (!isfinite(rs) && isfinite(r_want)) rs = r_want;
    for (size_t i = 0; i < n; i++) {
        double w = d->w ? kiln_emu_value_get(d->spec.w, d->w, i) : 1.0;
        double b = d->b ? kiln_emu_value_get(d->spec.w, d->b, i) : 0.0;
        double t = (kiln_emu_value_get(d->spec.x, d->x, base + i) - m) * rs * w, want = t + b;
        double tol = (4 * fabs(t) + fabs(want)) * U32 * 1.001 + 1e-40;
        if (d->spec.y != KILN_F32) tol += 0.5 * emu_ulp_of(d->spec.y, fabs(want) + tol);
        if (isnan(d->ref_y[base + i])) want = NAN;
        compare(c, 0, row, (long)i, kiln_emu_value_get(d->spec.y, d->y, base + i), want, tol, d->ref_y[base + i],
                emu_poisoned(d->spec.y, d->y, base + i));
    }
}

static long kiln_ln_check(const kiln_ln_data *d, int threads_per_row, kiln_ln_report *r) {
    memset(r, 0, sizeof *r);
    int t = threads_per_row > 0 ? threads_per_row : 32;
    double D = ceil((double)d->hidden / t) + 8 + 5 + t / 32.0;
    checker c = {0};
    for (int row = 0; row < d->rows; row++) check_row(d, row, D, &c);
    for (int o = 0; o < 3; o++) {
        r->max_abs[o] = c.out[o].max_abs, r->max_rel[o] = c.out[o].max_rel, r->worst[o] = c.out[o].worst;
        r->bad[o] = c.out[o].bad;
        memcpy(r->first[o], c.out[o].first, sizeof r->first[o]);
    }
    return c.total;
}

static const char *kiln_ln_output_name(int i) {
    static const char *const names[3] = {"y", "mean", "rstd"};
    return i >= 0 && i < 3 ? names[i] : NULL;
}

/* ---- the registry descriptor (kiln/emu_case.h) ----
 * The plain forward keeps this file's inputs and checks; the residual and zero-centered (offset=1)
 * forms are the norm families' shared reference (templates/lib/norm.ref.c). */

static int plain(const kiln_case *c) {
    const gen_spec *g = emu_case_spec(c);
    return !emu_spec_bool(g, "residual", 0) && !emu_spec_bool(g, "offset", 0);
}

/* x times s (each value rounded to x's dtype again), and the reference of it. */
static void scale_rows(kiln_ln_data *d, double s) {
    for (size_t i = 0; i < (size_t)d->rows * (size_t)d->hidden; i++)
        kiln_emu_value_set(d->spec.x, d->x, i, kiln_emu_value_get(d->spec.x, d->x, i) * s);
    reference(d);
}

static kiln_status case_create(kiln_case *c, kiln_error *err) {
    if (!plain(c)) return emu_norm_case_create(c, err);
    const kiln_case_opts *o = kiln_case_options(c);
    kiln_layernorm_spec spec;
    int rows, hidden;
    kiln_ln_data *d = NULL;
    kiln_status st = ln_spec_parse(kiln_emu_kernel_meta(kiln_case_kernel(c))->spec, &spec, err);
    if (st == KILN_OK) st = emu_norm_case_shape(c, &rows, &hidden, err);
    if (st == KILN_OK) st = kiln_ln_data_create(&d, &spec, emu_norm_case_eps(c), rows, hidden, o->input, o->seed, err);
    if (st == KILN_OK && o->scale != 1) /* the draw times scale (rows of |x| ~ 1e30), as the norm families' */
        scale_rows(d, o->scale);
    kiln_case_set_state(c, d);
    return st;
}

static void case_destroy(kiln_case *c) {
    if (!plain(c)) emu_norm_case_destroy(c);
    else kiln_ln_data_free(kiln_case_state(c));
}

static int case_tensor(kiln_case *c, const char *name, void **ptr, size_t *bytes) {
    if (!plain(c)) return emu_norm_case_tensor(c, name, ptr, bytes);
    kiln_ln_data *d = kiln_case_state(c);
    size_t n = (size_t)d->rows * (size_t)d->hidden, hb = (size_t)d->hidden * kiln_dtype_size(d->spec.w);
    if (!strcmp(name, "x")) *ptr = d->x, *bytes = n * kiln_dtype_size(d->spec.x);
    else if (!strcmp(name, "y")) *ptr = d->y, *bytes = n * kiln_dtype_size(d->spec.y);
    else if (!strcmp(name, "mean")) *ptr = d->mean, *bytes = (size_t)d->rows * 4;
    else if (!strcmp(name, "rstd")) *ptr = d->rstd, *bytes = (size_t)d->rows * 4;
    else if (!strcmp(name, "weight")) *ptr = d->w, *bytes = hb;
    else if (!strcmp(name, "bias")) *ptr = d->b, *bytes = hb;
    else return -1;
    return 0;
}

static int case_scalar(kiln_case *c, const char *name, double *value) {
    if (!plain(c)) return emu_norm_case_scalar(c, name, value);
    kiln_ln_data *d = kiln_case_state(c);
    if (!strcmp(name, "rows")) *value = d->rows;
    else if (!strcmp(name, "hidden")) *value = d->hidden;
    else if (!strcmp(name, "eps")) *value = d->eps;
    else return -1;
    return 0;
}

static void case_prepare(kiln_case *c) {
    if (!plain(c)) {
        emu_norm_case_prepare(c);
        return;
    }
    kiln_ln_data *d = kiln_case_state(c);
    size_t n = (size_t)d->rows * (size_t)d->hidden;
    memset(d->y, 0xff, n * kiln_dtype_size(d->spec.y));
    memset(d->mean, 0xff, (size_t)d->rows * 4);
    memset(d->rstd, 0xff, (size_t)d->rows * 4);
}

static void case_check(kiln_case *c, kiln_case_output *out, int *nout) {
    if (!plain(c)) {
        emu_norm_case_check(c, out, nout);
        return;
    }
    kiln_ln_report r;
    kiln_ln_check(kiln_case_state(c), (int)kiln_emu_kernel_meta(kiln_case_kernel(c))->threads_per_row, &r);
    for (*nout = 0; *nout < 3; ++*nout) {
        kiln_case_output *o = &out[*nout];
        snprintf(o->name, sizeof o->name, "%s", kiln_ln_output_name(*nout));
        o->show_rel = 1, o->max_abs = r.max_abs[*nout], o->max_rel = r.max_rel[*nout], o->worst = r.worst[*nout];
        o->bad = r.bad[*nout];
        snprintf(o->first, sizeof o->first, "%s", r.first[*nout]);
    }
}

static void case_describe(const kiln_case *c, char *buf, size_t size) {
    if (!plain(c)) {
        emu_norm_case_describe(c, buf, size);
        return;
    }
    const kiln_ln_data *d = kiln_case_state(c);
    snprintf(buf, size, "%d rows x %d  %s inputs", d->rows, d->hidden, kiln_ln_input_name(kiln_case_options(c)->input));
}

/* The outputs' float64 reference (y, mean, rstd; the residual and offset forms: the norm families'), which
 * the GPU kit's case files carry. */
static const double *case_reference(kiln_case *c, const char *name) {
    if (!plain(c)) return emu_norm_case_reference(c, name);
    const kiln_ln_data *d = kiln_case_state(c);
    return !strcmp(name, "y") ? d->ref_y : !strcmp(name, "mean") ? d->ref_mean : !strcmp(name, "rstd") ? d->ref_rstd : NULL;
}

/* The reference of the inputs as they are now (a caller wrote some: kiln_case_set). */
static kiln_status case_refresh(kiln_case *c, kiln_error *err) {
    if (!plain(c)) return emu_norm_case_refresh(c, err);
    reference(kiln_case_state(c));
    return KILN_OK;
}

const kiln_ref_family kiln_ref_layernorm = {
    .family = "layernorm",
    .create = case_create,
    .destroy = case_destroy,
    .tensor = case_tensor,
    .scalar = case_scalar,
    .prepare = case_prepare,
    .check = case_check,
    .describe = case_describe,
    .reference = case_reference,
    .refresh = case_refresh,
};
