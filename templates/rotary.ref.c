/* templates/rotary.ref.c - rotary's float64 reference: the problem it draws, the rotation in float64, its error model. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu.h"
#include "kiln/emu_case.h"

/*
 * The problem (templates/rotary.lua has the semantics): --rows is seq (varlen: the longest
 * sequence), --batch (default 2) and --heads (default 3) size it; the named sizes "offsets" (1, the
 * default: a per-sequence int32 tensor; 0: NULL, the scalar offset alone) and "conjugate" (0, the
 * default: the forward; 1: the backward's rotation by -theta) choose the launch.
 *
 * - x and out are contiguous (the case runner binds tensors without strides; the strides reach the
 *   kernel through the generic launch: tests/rotary_emu_test.c runs a padded head stride that way).
 * - varlen: sequence b has length rows for b = 0, then 0, 1, then drawn from 0..rows (odd and even).
 * - positions: s + offset + offsets[b] with offset = 1 and offsets[0] = -2 (token 0 of sequence 0
 *   sits at -1: not rotated), the other offsets drawn from 0..rows; the table stops two positions
 *   short of the largest, so the last tokens are past it (not rotated).
 * - cos/sin: theta = p * 10000^(-2i/rotary_dim), rounded to cs; the reference uses the rounded values.
 * - inputs: random N(0, 1); large-mean 1000 + N(0, 1); constant 1.5; special: random with NaN, +Inf,
 *   -Inf, +-0, the smallest subnormal and max/4 of the dtype scattered; mixed: token t takes kind t % 4.
 *   --scale multiplies them.
 *
 * Error model (u = 2^-24, u_o the output dtype's unit roundoff): out0 = fma(x0, c, -(x1 s)) rounds the
 * product and the fma in f32, then once to the output dtype:
 *   tol = u_o |ref| + 2^-23 (|x0 c| + |x1 s|) + the output dtype's smallest subnormal.
 * Dims past rotary_dim must keep their bits: tolerance 0.
 */

typedef struct rotary_case {
    kiln_dtype dt, cs;
    int head_dim, rdim, interleaved, varlen, inplace;
    int batch, seq, heads, seqlen_ro, offset, conjugate, use_offsets;
    int total;                 /* token rows of x: batch * seq, or the packed total */
    int *cu, *offsets;         /* device-side int32 tensors (offsets NULL when not used) */
    void *x, *out, *cos, *sin; /* out == x in place */
    void *x0;                  /* the input as drawn (in place, x is reset to it before each run) */
    double *want, *tol, *ref;  /* per element of the output tensor (x's layout in place) */
    size_t x_elems, out_elems;
    emu_guarded bufs;
} rotary_case;

/* The rotation of one (token, head) row in float64: y[i] for i < rdim from x (element stride 1),
 * c/s the table row (rdim / 2 entries; sin already negated for the conjugate). interleaved: pairs
 * (2i, 2i + 1); otherwise halves (i, i + rdim / 2). mag[i] = |x0 c| + |x1 s| of element i's terms. */
static void rotary_ref_row(const double *x, const double *c, const double *s, int rdim, int interleaved, double *y,
                           double *mag) {
    const int half = rdim / 2;
    for (int i = 0; i < half; i++) {
        int a = interleaved ? 2 * i : i, b = interleaved ? 2 * i + 1 : i + half;
        double x0 = x[a], x1 = x[b];
        y[a] = x0 * c[i] - x1 * s[i];
        y[b] = x1 * c[i] + x0 * s[i];
        mag[a] = fabs(x0 * c[i]) + fabs(x1 * s[i]);
        mag[b] = fabs(x1 * c[i]) + fabs(x0 * s[i]);
    }
}

static void rotary_destroy(kiln_case *c) {
    rotary_case *r = kiln_case_state(c);
    emu_guarded_free(&r->bufs);
    free(r->x0), free(r->want), free(r->tol), free(r->ref);
    free(r);
}

static double unit_roundoff(kiln_dtype t) { return t == KILN_F16 ? 0x1p-11 : t == KILN_BF16 ? 0x1p-8 : 0x1p-24; }
static double denorm_min(kiln_dtype t) { return t == KILN_F16 ? 0x1p-24 : t == KILN_BF16 ? 0x1p-133 : 0x1p-149; }
static double max_finite(kiln_dtype t) { return t == KILN_F16 ? 65504.0 : t == KILN_BF16 ? 0x1.fep127 : 0x1.fffffep127; }

/* Token t's sequence and position in it (varlen: from cu_seqlens). */
static void token_seq(const rotary_case *r, int t, int *b, int *s) {
    if (!r->varlen) {
        *b = t / r->seq, *s = t % r->seq;
        return;
    }
    int k = 0;
    while (k + 1 < r->batch && r->cu[k + 1] <= t) k++;
    *b = k, *s = t - r->cu[k];
}

/* An input value of the given kind. */
static double draw(emu_rng *g, kiln_ln_input kind, kiln_dtype t, double scale) {
    double v = emu_rng_normal(g, 0, 1);
    if (kind == KILN_LN_LARGE_MEAN) v += 1000;
    if (kind == KILN_LN_CONSTANT) v = 1.5;
    v *= scale;
    if (kind == KILN_LN_SPECIAL && emu_rng_uniform(g) < 0.125) {
        static const double zero = 0.0;
        switch (emu_rng_next(g) % 7) {
        case 0: return NAN;
        case 1: return INFINITY;
        case 2: return -INFINITY;
        case 3: return zero;
        case 4: return -zero;
        case 5: return denorm_min(t);
        default: return max_finite(t) / 4;
        }
    }
    return v;
}

/* Sizes, tensors, inputs and the float64 reference. */
static kiln_status rotary_create(kiln_case *c, kiln_error *err) {
    const kiln_case_opts *o = kiln_case_options(c);
    const gen_spec *sp = emu_case_spec(c);
    rotary_case *r = calloc(1, sizeof *r);
    if (!r) return kiln_fail(err, KILN_ENOMEM, "out of memory");
    kiln_case_set_state(c, r);
    r->dt = emu_spec_dtype(sp, "dtype", KILN_F16), r->cs = emu_spec_dtype(sp, "cs", r->dt);
    r->head_dim = (int)emu_spec_int(sp, "head_dim", 128), r->rdim = (int)emu_spec_int(sp, "rotary_dim", r->head_dim);
    r->interleaved = emu_spec_bool(sp, "interleaved", 0), r->varlen = emu_spec_bool(sp, "varlen", 0);
    r->inplace = emu_spec_bool(sp, "inplace", 0);
    long long seq = kiln_case_opts_get(o, "rows", 16), batch = kiln_case_opts_get(o, "batch", 2);
    long long heads = kiln_case_opts_get(o, "heads_q", 3);
    r->use_offsets = kiln_case_opts_get(o, "offsets", 1) != 0, r->conjugate = kiln_case_opts_get(o, "conjugate", 0) != 0;
    if (seq < 1 || batch < 1 || batch > 65535 || heads < 1 || heads > 65535)
        return kiln_fail(err, KILN_EINVAL, "rotary: rows %lld, batch %lld, heads %lld; valid: rows >= 1, batch and heads 1..65535",
                         seq, batch, heads);
    r->seq = (int)seq, r->batch = (int)batch, r->heads = (int)heads;
    const size_t es = kiln_dtype_size(r->dt), cs_es = kiln_dtype_size(r->cs);
    emu_rng g = {o->seed * 0x9e3779b97f4a7c15ull + 25};

    /* sequences and positions */
    r->cu = emu_guarded_alloc(&r->bufs, (size_t)(r->batch + 1) * sizeof(int));
    if (!r->cu) return kiln_fail(err, KILN_ENOMEM, "out of memory");
    r->cu[0] = 0;
    for (int b = 0; b < r->batch; b++) {
        int len = r->seq;
        if (r->varlen && b > 0) len = b == 1 ? 0 : b == 2 ? 1 : (int)(emu_rng_next(&g) % (uint64_t)(r->seq + 1));
        r->cu[b + 1] = r->cu[b] + len;
    }
    r->total = r->varlen ? r->cu[r->batch] : r->batch * r->seq;
    r->offset = 1;
    int *offs = calloc((size_t)r->batch, sizeof(int));
    if (!offs) return kiln_fail(err, KILN_ENOMEM, "out of memory");
    long maxpos = 0;
    for (int b = 0; b < r->batch; b++) {
        offs[b] = r->use_offsets ? (b == 0 ? -2 : (int)(emu_rng_next(&g) % (uint64_t)(r->seq + 1))) : 0;
        int len = r->varlen ? r->cu[b + 1] - r->cu[b] : r->seq;
        if (len > 0 && len - 1 + r->offset + offs[b] > maxpos) maxpos = len - 1 + r->offset + offs[b];
    }
    r->seqlen_ro = (int)(maxpos - 1 > 1 ? maxpos - 1 : 1);
    if (r->use_offsets) {
        r->offsets = emu_guarded_alloc(&r->bufs, (size_t)r->batch * sizeof(int));
        if (!r->offsets) return free(offs), kiln_fail(err, KILN_ENOMEM, "out of memory");
        memcpy(r->offsets, offs, (size_t)r->batch * sizeof(int));
    }
    free(offs);

    /* tensors */
    r->x_elems = r->out_elems = (size_t)r->total * (size_t)r->heads * (size_t)r->head_dim;
    if ((double)r->x_elems > (double)(1 << 26))
        return kiln_fail(err, KILN_EINVAL, "tokens x heads x head_dim is too large for the emulator (at most 2^26)");
    const int half = r->rdim / 2;
    size_t cs_elems = (size_t)r->seqlen_ro * (size_t)half;
    r->x = emu_guarded_alloc(&r->bufs, r->x_elems * es);
    r->x0 = malloc(r->x_elems * es);
    r->out = r->inplace ? r->x : emu_guarded_alloc(&r->bufs, r->out_elems * es);
    r->cos = emu_guarded_alloc(&r->bufs, cs_elems * cs_es), r->sin = emu_guarded_alloc(&r->bufs, cs_elems * cs_es);
    r->want = malloc(r->out_elems * sizeof(double)), r->tol = malloc(r->out_elems * sizeof(double));
    r->ref = malloc(r->out_elems * sizeof(double));
    if (!r->x || !r->x0 || !r->out || !r->cos || !r->sin || !r->want || !r->tol || !r->ref)
        return kiln_fail(err, KILN_ENOMEM, "out of memory");
    for (int p = 0; p < r->seqlen_ro; p++)
        for (int i = 0; i < half; i++) {
            double th = p * pow(10000.0, -2.0 * i / r->rdim);
            kiln_emu_value_set(r->cs, r->cos, (size_t)p * (size_t)half + (size_t)i, cos(th));
            kiln_emu_value_set(r->cs, r->sin, (size_t)p * (size_t)half + (size_t)i, sin(th));
        }
    double scale = o->scale ? o->scale : 1;
    for (int t = 0; t < r->total; t++) {
        kiln_ln_input kind = o->input == KILN_LN_MIXED ? (kiln_ln_input)(t % 4) : o->input;
        for (size_t i = 0; i < (size_t)r->heads * (size_t)r->head_dim; i++)
            kiln_emu_value_set(r->dt, r->x0, (size_t)t * (size_t)r->heads * (size_t)r->head_dim + i, draw(&g, kind, r->dt, scale));
    }

    /* the reference, row by row */
    double *xr = malloc((size_t)r->head_dim * sizeof(double)), *cr = malloc((size_t)half * sizeof(double));
    double *sr = malloc((size_t)half * sizeof(double)), *yr = malloc((size_t)r->rdim * sizeof(double));
    double *mag = malloc((size_t)r->rdim * sizeof(double));
    if (!xr || !cr || !sr || !yr || !mag) return free(xr), free(cr), free(sr), free(yr), free(mag), kiln_fail(err, KILN_ENOMEM, "out of memory");
    const double uo = unit_roundoff(r->dt), tiny = denorm_min(r->dt);
    for (int t = 0; t < r->total; t++) {
        int b, s;
        token_seq(r, t, &b, &s);
        long pos = (long)s + r->offset + (r->offsets ? r->offsets[b] : 0);
        int in_table = pos >= 0 && pos < r->seqlen_ro;
        for (int i = 0; i < half; i++) {
            size_t at = (size_t)(in_table ? pos : 0) * (size_t)half + (size_t)i;
            cr[i] = in_table ? kiln_emu_value_get(r->cs, r->cos, at) : 1.0;
            sr[i] = in_table ? kiln_emu_value_get(r->cs, r->sin, at) : 0.0;
            if (r->conjugate) sr[i] = -sr[i];
        }
        for (int h = 0; h < r->heads; h++) {
            size_t row = ((size_t)t * (size_t)r->heads + (size_t)h) * (size_t)r->head_dim;
            for (int i = 0; i < r->head_dim; i++) xr[i] = kiln_emu_value_get(r->dt, r->x0, row + (size_t)i);
            rotary_ref_row(xr, cr, sr, r->rdim, r->interleaved, yr, mag);
            for (int i = 0; i < r->head_dim; i++) {
                size_t e = row + (size_t)i;
                if (i < r->rdim) {
                    r->ref[e] = yr[i];
                    /* what the output dtype holds: a finite value past its range is +-Inf */
                    unsigned char cell[4];
                    kiln_emu_value_set(r->dt, cell, 0, yr[i]);
                    double held = kiln_emu_value_get(r->dt, cell, 0);
                    r->want[e] = isinf(held) ? held : yr[i];
                    r->tol[e] = isinf(held) ? 0 : uo * fabs(yr[i]) + 0x1p-23 * mag[i] + tiny;
                } else {
                    r->ref[e] = r->want[e] = xr[i], r->tol[e] = 0;
                }
            }
        }
    }
    free(xr), free(cr), free(sr), free(yr), free(mag);
    return KILN_OK;
}

static int rotary_tensor(kiln_case *c, const char *name, void **ptr, size_t *bytes) {
    rotary_case *r = kiln_case_state(c);
    const size_t es = kiln_dtype_size(r->dt), cs = (size_t)r->seqlen_ro * (size_t)(r->rdim / 2) * kiln_dtype_size(r->cs);
    if (!strcmp(name, "x")) *ptr = r->x, *bytes = r->x_elems * es;
    else if (!strcmp(name, "out") && !r->inplace) *ptr = r->out, *bytes = r->out_elems * es;
    else if (!strcmp(name, "cos")) *ptr = r->cos, *bytes = cs;
    else if (!strcmp(name, "sin")) *ptr = r->sin, *bytes = cs;
    else if (!strcmp(name, "cu_seqlens") && r->varlen) *ptr = r->cu, *bytes = (size_t)(r->batch + 1) * sizeof(int);
    else if (!strcmp(name, "offsets")) *ptr = r->offsets, *bytes = r->offsets ? (size_t)r->batch * sizeof(int) : 0;
    else return -1;
    return 0;
}

static int rotary_scalar(kiln_case *c, const char *name, double *value) {
    rotary_case *r = kiln_case_state(c);
    const struct {
        const char *name;
        double v;
    } vals[] = {
        {"batch", r->batch}, {"seq", r->seq}, {"heads", r->heads}, {"seqlen_ro", r->seqlen_ro},
        {"offset", r->offset}, {"conjugate", r->conjugate}, {"total", r->total},
    };
    for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++)
        if (!strcmp(name, vals[i].name)) return *value = vals[i].v, 0;
    return -1;
}

/* Before the run: x starts as the drawn input, out as poison. */
static void rotary_prepare(kiln_case *c) {
    rotary_case *r = kiln_case_state(c);
    const size_t es = kiln_dtype_size(r->dt);
    memcpy(r->x, r->x0, r->x_elems * es);
    if (!r->inplace) memset(r->out, 0xff, r->out_elems * es);
}

static void rotary_check(kiln_case *c, kiln_case_output *out, int *nout) {
    rotary_case *r = kiln_case_state(c);
    const char *name = r->inplace ? "x" : "out";
    const long w = r->head_dim;
    snprintf(out[0].name, sizeof out[0].name, "%s", name);
    for (size_t e = 0; e < r->out_elems; e++) {
        size_t row = e / (size_t)w;
        kiln_check_value(&out[0], kiln_emu_value_get(r->dt, r->out, e), r->want[e], r->tol[e], r->ref[e],
                         !r->inplace && emu_poisoned(r->dt, r->out, e), "%s[token %zu][head %zu][%zu]", name,
                         row / (size_t)r->heads, row % (size_t)r->heads, e % (size_t)w);
    }
    *nout = 1;
}

static void rotary_describe(const kiln_case *c, char *buf, size_t size) {
    const rotary_case *r = kiln_case_state(c);
    int n = snprintf(buf, size, "batch %d  %s %d  heads %d  seqlen_ro %d  offset %d%s  %s  %s inputs", r->batch,
                     r->varlen ? "max seq" : "seq", r->seq, r->heads, r->seqlen_ro, r->offset,
                     r->offsets ? " + offsets[batch]" : "", r->conjugate ? "conjugate (backward)" : "forward",
                     kiln_ln_input_name(kiln_case_options(c)->input));
    if (r->varlen && n > 0 && (size_t)n < size) {
        n += snprintf(buf + n, size - (size_t)n, "  lengths");
        for (int b = 0; b < r->batch && b < 8 && (size_t)n < size; b++)
            n += snprintf(buf + n, size - (size_t)n, "%s%d", b ? "," : " ", r->cu[b + 1] - r->cu[b]);
        if (r->batch > 8 && (size_t)n < size) snprintf(buf + n, size - (size_t)n, ",...");
    }
}

const kiln_ref_family kiln_ref_rotary = {
    .family = "rotary",
    .create = rotary_create,
    .destroy = rotary_destroy,
    .tensor = rotary_tensor,
    .scalar = rotary_scalar,
    .prepare = rotary_prepare,
    .check = rotary_check,
    .describe = rotary_describe,
};
