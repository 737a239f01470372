/* templates/norm_reduce.ref.c - norm_reduce's float64 reference: column sums of f32 partial rows, their error model. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu.h"
#include "kiln/emu_case.h"

/*
 * The problem: a workspace of `slabs` slabs (1: dweight only, 2: dweight and dbias) of parts x cols
 * f32 partial rows, as a norm backward leaves it; --rows is parts, --hidden is cols. Part rows are
 * drawn like the norms' rows (random, large offsets, constant, NaN/Inf among random values, mixed).
 *
 * Error model (u = 2^-24): each sum passes its terms through at most E = parts / 32 + 16 f32
 * additions (a thread's four interleaved sums of parts / 32 terms, their pairwise sum, eight warps
 * added in order), so |sum - ref| <= (E + 4) u sum|terms|, plus half an ulp of w's dtype; a sum whose
 * whole tolerance interval lies beyond the dtype's largest value must come out as that infinity
 * (--input large-mean in f16 sums past 65504).
 */

typedef struct reduce_case {
    kiln_dtype w;
    int parts, cols, slabs;
    float *ws;
    void *out[2];
    double *ref[2], *mag[2];
    emu_guarded bufs;
} reduce_case;

static void reduce_destroy(kiln_case *c) {
    reduce_case *r = kiln_case_state(c);
    emu_guarded_free(&r->bufs);
    for (int s = 0; s < 2; s++) free(r->ref[s]), free(r->mag[s]);
    free(r);
}

/* Value of part row p (its kind chosen like the norms' rows), column i. */
static double draw(kiln_ln_input in, int p, emu_rng *g, double row_c) {
    kiln_ln_input kind = in == KILN_LN_MIXED ? (kiln_ln_input)(p % 4) : in;
    switch (kind) {
    case KILN_LN_LARGE_MEAN: return p % 2 ? emu_rng_normal(g, 1000, 0.1) : emu_rng_normal(g, 10000, 1e-3);
    case KILN_LN_CONSTANT: return row_c;
    default: return emu_rng_normal(g, 0.5, 2);
    }
}

static kiln_status reduce_create(kiln_case *c, kiln_error *err) {
    const kiln_case_opts *o = kiln_case_options(c);
    reduce_case *r = calloc(1, sizeof *r);
    if (!r) return kiln_fail(err, KILN_ENOMEM, "out of memory");
    kiln_case_set_state(c, r);
    r->w = emu_spec_dtype(emu_case_spec(c), "w", KILN_F32);
    r->parts = (int)kiln_case_opts_get(o, "rows", 0);
    r->cols = (int)kiln_case_opts_get(o, "hidden", 0);
    r->slabs = 2;
    if (r->parts < 1) return kiln_fail(err, KILN_EINVAL, "missing --rows R (the workspace's partial rows, required)");
    if (r->cols < 1) return kiln_fail(err, KILN_EINVAL, "norm_reduce needs the row length: give it with --hidden H");
    if ((long long)r->parts * r->cols > (1LL << 25))
        return kiln_fail(err, KILN_EINVAL, "%d parts x %d is too large for the emulator (at most 2^25 elements a slab)", r->parts,
                         r->cols);
    size_t slab = (size_t)r->parts * (size_t)r->cols, n = (size_t)r->cols;
    r->ws = emu_guarded_alloc(&r->bufs, (size_t)r->slabs * slab * sizeof(float));
    int ok = r->ws != NULL;
    for (int s = 0; s < r->slabs; s++) {
        ok = ok && (r->out[s] = emu_guarded_alloc(&r->bufs, n * kiln_dtype_size(r->w))) &&
             (r->ref[s] = calloc(n, sizeof(double))) && (r->mag[s] = calloc(n, sizeof(double)));
    }
    if (!ok) return kiln_fail(err, KILN_ENOMEM, "out of memory for a %d x %d workspace", r->parts, r->cols);
    emu_rng g = {o->seed * 0x2545f4914f6cdd1dull + 11};
    for (int s = 0; s < r->slabs; s++)
        for (int p = 0; p < r->parts; p++) {
            float *row = r->ws + ((size_t)s * (size_t)r->parts + (size_t)p) * n;
            double row_c = emu_rng_normal(&g, 0, 3);
            for (size_t i = 0; i < n; i++) row[i] = (float)(draw(o->input, p, &g, row_c) * o->scale);
            /* special rows (and every fourth row of mixed) carry one NaN or infinity */
            kiln_ln_input kind = o->input == KILN_LN_MIXED ? (kiln_ln_input)(p % 4) : o->input;
            if (kind == KILN_LN_SPECIAL && p % 5) {
                static const float specials[4] = {NAN, INFINITY, -INFINITY, INFINITY};
                row[emu_rng_next(&g) % n] = specials[p % 5 - 1];
            }
            for (size_t i = 0; i < n; i++) r->ref[s][i] += row[i], r->mag[s][i] += fabs((double)row[i]);
        }
    return KILN_OK;
}

static int reduce_tensor(kiln_case *c, const char *name, void **ptr, size_t *bytes) {
    reduce_case *r = kiln_case_state(c);
    size_t n = (size_t)r->cols;
    if (!strcmp(name, "ws")) *ptr = r->ws, *bytes = (size_t)r->slabs * (size_t)r->parts * n * sizeof(float);
    else if (!strcmp(name, "dweight")) *ptr = r->out[0], *bytes = n * kiln_dtype_size(r->w);
    else if (!strcmp(name, "dbias")) *ptr = r->out[1], *bytes = n * kiln_dtype_size(r->w);
    else return -1;
    return 0;
}

static int reduce_scalar(kiln_case *c, const char *name, double *value) {
    reduce_case *r = kiln_case_state(c);
    if (!strcmp(name, "parts")) *value = r->parts;
    else if (!strcmp(name, "cols")) *value = r->cols;
    else if (!strcmp(name, "slabs")) *value = r->slabs;
    else return -1;
    return 0;
}

static void reduce_prepare(kiln_case *c) {
    reduce_case *r = kiln_case_state(c);
    for (int s = 0; s < r->slabs; s++) memset(r->out[s], 0xff, (size_t)r->cols * kiln_dtype_size(r->w));
}

static void reduce_check(kiln_case *c, kiln_case_output *out, int *nout) {
    reduce_case *r = kiln_case_state(c);
    static const char *const names[2] = {"dweight", "dbias"};
    double E = r->parts / 32.0 + 16, u = 0x1p-24;
    for (*nout = 0; *nout < r->slabs; ++*nout) {
        kiln_case_output *o = &out[*nout];
        int s = *nout;
        snprintf(o->name, sizeof o->name, "%s", names[s]);
        o->show_rel = 1;
        for (size_t i = 0; i < (size_t)r->cols; i++) {
            double want = r->ref[s][i], tol = (E + 4) * u * r->mag[s][i] + 1e-40, rounded;
            unsigned char tmp[4];
            if (r->w != KILN_F32) tol += 0.5 * emu_ulp_of(r->w, fabs(want) + tol);
            kiln_emu_value_set(r->w, tmp, 0, want);
            /* a sum beyond the dtype's largest finite value rounds to infinity, kernel and reference alike */
            if (isinf(rounded = kiln_emu_value_get(r->w, tmp, 0)) && isfinite(want) && fabs(want) - tol > 0 &&
                isinf(kiln_emu_value_get(r->w, (kiln_emu_value_set(r->w, tmp, 0, fabs(want) - tol), tmp), 0)))
                want = rounded;
            kiln_check_value(o, kiln_emu_value_get(r->w, r->out[s], i), want, tol, want, emu_poisoned(r->w, r->out[s], i),
                             "%s[%zu]", names[s], i);
        }
    }
}

static void reduce_describe(const kiln_case *c, char *buf, size_t size) {
    const reduce_case *r = kiln_case_state(c);
    snprintf(buf, size, "%d slabs of %d parts x %d  %s inputs", r->slabs, r->parts, r->cols,
             kiln_ln_input_name(kiln_case_options(c)->input));
}

const kiln_ref_family kiln_ref_norm_reduce = {
    .family = "norm_reduce",
    .create = reduce_create,
    .destroy = reduce_destroy,
    .tensor = reduce_tensor,
    .scalar = reduce_scalar,
    .prepare = reduce_prepare,
    .check = reduce_check,
    .describe = reduce_describe,
};
