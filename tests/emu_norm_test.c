/* tests/emu_norm_test.c - the norm families (layernorm with residual, rmsnorm, layernorm_bwd, rmsnorm_bwd + norm_reduce) on the emulator against float64.
 *
 * Each variant runs on sm_75 and sm_80 (KILN_TEST_FULL=1: every SM and more shapes) with
 * "mixed" inputs (random, large mean / tiny variance, constant, NaN/Inf rows; backwards leave
 * the NaN/Inf rows out, since one NaN row makes every dweight column NaN), every 16th weight 0,
 * and must match the float64 reference within tolerances derived in templates/lib/norm.ref.c:
 *   forward  mean (D+2)u mean|h|; rstd ((D+4)/2+4)u rstd; y 4u|(h-m) r w| + u|y| + half an ulp
 *            of y's dtype (u = 2^-24, D ~ hidden / threads_per_row + 13); h exact;
 *   backward dx 2r[4u(|g|+|xh a|+|c|) + |xh|(D+3)u S|g xh|/n + (D+1)u S|g|/n] + 2u|dx| + half an
 *            ulp of dx's dtype; dweight/dbias (rows + parts/32 + 20)u S|dy xh| (S|dy|) + half an ulp.
 * sm_75 (integer bf16 rounding) and sm_80 (native cvt) must give identical bytes. Backwards run
 * on a grid smaller than the row count (blocks walk rows grid-stride) and twice with the same
 * grid: dweight/dbias must be bit-identical (no atomics). Exact cases (issue 16): rows of
 * |x| ~ 1e30 give finite statistics; a constant row of 0.1f with eps = 0 gives mean exactly
 * 0.1f, rstd = +inf and y = NaN; a constant 65536-long f32 row (hidden=launch) gives mean
 * exactly the constant and y exactly the bias. Issue 22, on every SM: RMSNorm hidden=launch with one
 * 1e30 row alone, first, second or last in its block (a divergent barrier before the fix), and
 * LayerNorm/RMSNorm rows whose f32 sum or deviations overflow (1e36 at hidden 768, 6e37 at 7, 3e38
 * beside -2e38) against float64; offset=1 (zero-centered weights, weights near 0, outputs in f32)
 * in every family and row form. KILN_TEST_FULL=1 adds the sweep: every family x
 * five dtype sets x hidden {1, 7, 33, 100, 768, 1000, 4096, 16384, launch} x residual on/off,
 * on every SM (~360 variants). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kiln/emu_norm.h"
#include "kiln/kiln.h"

static kiln_gen *gen;
static kiln_emu *emu;

static kiln_emu_kernel *load(const char *spec, int sm) {
    kiln_emu_kernel *k = NULL;
    kiln_error err = {0};
    if (kiln_emu_load(emu, gen, spec, sm, &k, &err) != KILN_OK) {
        CHECK(0, "loading '%s' for sm_%d: %s", spec, sm, err.msg);
        return NULL;
    }
    return k;
}

static size_t out_bytes(const kiln_norm_data *d, int o) {
    const kiln_norm_spec *s = &d->spec;
    size_t n = (size_t)d->rows * (size_t)d->hidden;
    if (kiln_norm_is_backward(s))
        return o == 0 ? n * kiln_dtype_size(s->dx) : (size_t)d->hidden * kiln_dtype_size(s->w);
    return o == 0 ? n * kiln_dtype_size(s->y) : o == 3 ? n * kiln_dtype_size(s->r) : (size_t)d->rows * 4;
}

static const void *out_ptr(const kiln_norm_data *d, int o) {
    if (kiln_norm_is_backward(&d->spec)) return o == 0 ? d->dx : o == 1 ? d->dw : o == 2 ? d->db : NULL;
    return o == 0 ? d->y : o == 1 ? (void *)d->mean : o == 2 ? (void *)d->rstd : d->h;
}

/* Runs spec on sm with data d (blocks: backward grid, 0 = all); checks it; returns 0 on a pass.
 * geom (may be NULL) receives the kernel's block threads, threads per row and iterations' worth
 * of geometry packed in one number: outputs of two SMs are bit-identical only at one geometry. */
static int run_check(const char *spec, int sm, kiln_norm_data *d, unsigned blocks, int twice, unsigned long long *geom) {
    kiln_error err = {0};
    kiln_emu_kernel *k = load(spec, sm), *red = NULL;
    if (!k) return -1;
    const kiln_kernel_meta *m = kiln_emu_kernel_meta(k);
    if (m->then_spec[0] && !(red = load(m->then_spec, sm))) return -1;
    char before[KILN_SPEC_MAX] = "";
    kiln_emu_kernel *pre = kiln_norm_before_spec(m, before, sizeof before) ? load(before, sm) : NULL;
    if (before[0] && !pre) return -1;
    /* a split form (a kernel before it) sums in another order than a reload form of the same block */
    if (geom)
        *geom = ((unsigned long long)m->block[0] << 32) | ((unsigned long long)m->threads_per_row << 16) | m->grid_tile[0] |
                (unsigned long long)(pre != NULL) << 62;
    kiln_status st = kiln_norm_run_seq(pre, k, red, d, blocks, twice, &err);
    if (pre) kiln_emu_kernel_free(pre);
    CHECK(st == KILN_OK, "%s sm_%d: %s", spec, sm, err.msg);
    if (st != KILN_OK) return -1;
    unsigned need = ((unsigned)d->rows + m->grid_tile[0] - 1) / m->grid_tile[0];
    unsigned parts = (blocks && blocks < need ? blocks : need) * (m->ws_rows_per_block ? m->ws_rows_per_block : 1);
    kiln_norm_report r;
    long bad = kiln_norm_check(d, (int)m->threads_per_row, parts, &r);
    for (int o = 0; o < KILN_NORM_OUTPUTS; o++)
        CHECK(!r.bad[o], "%s sm_%d rows %d hidden %d: %ld bad %s; first: %s", spec, sm, d->rows, d->hidden, r.bad[o],
              kiln_norm_output_name(&d->spec, o), r.first[o]);
    kiln_emu_kernel_free(k);
    if (red) kiln_emu_kernel_free(red);
    return bad ? -1 : 0;
}

/* Two backward forms of one spec on the same rows and blocks (sm_80): every output's bits equal. */
static void same_bits(const char *a, const char *b, int hidden) {
    char name[300];
    snprintf(name, sizeof name, "same bits: %s vs %s", a, b);
    TEST_BEGIN(name);
    kiln_error err = {0};
    char canon[KILN_SPEC_MAX];
    kiln_norm_spec s;
    kiln_norm_data *d = NULL;
    if (kiln_canonical_spec(gen, a, canon, sizeof canon, &err) != KILN_OK || kiln_norm_spec_parse(canon, &s, &err) != KILN_OK ||
        kiln_norm_data_create(&d, &s, 1e-5f, 11, hidden, KILN_LN_RANDOM, 1.0, 7, &err) != KILN_OK) {
        CHECK(0, "%s", err.msg);
        TEST_END();
        return;
    }
    unsigned char *first[KILN_NORM_OUTPUTS] = {0};
    if (run_check(a, 80, d, 3, 0, NULL) == 0)
        for (int o = 0; o < KILN_NORM_OUTPUTS; o++)
            if (kiln_norm_output_name(&s, o) && out_ptr(d, o) && (first[o] = malloc(out_bytes(d, o))))
                memcpy(first[o], out_ptr(d, o), out_bytes(d, o));
    if (run_check(b, 80, d, 3, 0, NULL) == 0)
        for (int o = 0; o < KILN_NORM_OUTPUTS; o++)
            if (first[o])
                CHECK(!memcmp(first[o], out_ptr(d, o), out_bytes(d, o)), "%s: %s differs in its bits from %s's", a,
                      kiln_norm_output_name(&s, o), b);
    for (int o = 0; o < KILN_NORM_OUTPUTS; o++) free(first[o]);
    kiln_norm_data_free(d);
    TEST_END();
}

/* The variant on every SM in sms: each run checked, and the outputs' bytes equal across SMs. */
static void variant(const char *spec, const int *sms, int nsms, int full) {
    char name[300];
    snprintf(name, sizeof name, "%s", spec);
    TEST_BEGIN(name);
    kiln_error err = {0};
    char canon[KILN_SPEC_MAX];
    kiln_norm_spec s;
    if (kiln_canonical_spec(gen, spec, canon, sizeof canon, &err) != KILN_OK || kiln_norm_spec_parse(canon, &s, &err) != KILN_OK) {
        CHECK(0, "%s", err.msg);
        TEST_END();
        return;
    }
    int bwd = kiln_norm_is_backward(&s);
    int hiddens[3], nh = 0;
    if (s.hidden) hiddens[nh++] = s.hidden;
    else {
        hiddens[nh++] = 1000;
        hiddens[nh++] = 7;
        if (full) hiddens[nh++] = 4096;
    }
    for (int hi = 0; hi < nh; hi++) {
        /* small backward rows: over 100 partial rows, so every interleaved sum of norm_reduce works */
        int rows = hiddens[hi] >= 4096 ? 6 : bwd && hiddens[hi] <= 64 ? 150 : 19;
        kiln_norm_data *d = NULL;
        uint64_t seed = 11;
        for (const char *c = spec; *c; c++) seed = seed * 31 + (unsigned char)*c;
        if (kiln_norm_data_create(&d, &s, 1e-5f, rows, hiddens[hi], bwd ? KILN_LN_RANDOM : KILN_LN_MIXED, 1.0, seed, &err) != KILN_OK) {
            CHECK(0, "data: %s", err.msg);
            continue;
        }
        if (bwd) { /* large-mean and constant rows too (no NaN rows: they make all of dweight NaN) */
            kiln_norm_data_set_row(d, 1, 0.1);
        }
        unsigned char *first[KILN_NORM_OUTPUTS] = {0};
        unsigned long long geom0 = 0, geom = 0;
        for (int si = 0; si < nsms; si++) {
            if (run_check(spec, sms[si], d, bwd ? 3 : 0, !bwd && si == 0, &geom) != 0) break;
            if (si == 0) geom0 = geom;
            /* a backward may take another form on an SM with less shared memory (docs/norms.md):
             * another summation order, checked against float64 only */
            else if (geom != geom0) continue;
            for (int o = 0; o < KILN_NORM_OUTPUTS; o++) {
                if (!kiln_norm_output_name(&s, o) || !out_ptr(d, o)) continue;
                size_t nb = out_bytes(d, o);
                if (si == 0) {
                    first[o] = malloc(nb);
                    if (first[o]) memcpy(first[o], out_ptr(d, o), nb);
                } else if (first[o]) {
                    CHECK(!memcmp(first[o], out_ptr(d, o), nb), "%s: %s on sm_%d differs in its bits from sm_%d's", spec,
                          kiln_norm_output_name(&s, o), sms[si], sms[0]);
                }
            }
            if (bwd && si == 0) { /* the same grid again: identical bits (deterministic reduction) */
                if (run_check(spec, sms[0], d, 3, 0, NULL) == 0)
                    for (int o = 1; o < 3; o++)
                        if (first[o] && out_ptr(d, o))
                            CHECK(!memcmp(first[o], out_ptr(d, o), out_bytes(d, o)), "%s: %s differs between two runs", spec,
                                  kiln_norm_output_name(&s, o));
                run_check(spec, sms[0], d, 0, 0, NULL); /* and on one block per row group */
            }
        }
        for (int o = 0; o < KILN_NORM_OUTPUTS; o++) free(first[o]);
        kiln_norm_data_free(d);
    }
    TEST_END();
}

/* ---- exact cases (issue 16, LayerNorm numerics at the edges) ---- */

static kiln_norm_data *exact_data(const char *spec, float eps, int rows, int hidden, double scale) {
    kiln_error err = {0};
    char canon[KILN_SPEC_MAX];
    kiln_norm_spec s;
    kiln_norm_data *d = NULL;
    if (kiln_canonical_spec(gen, spec, canon, sizeof canon, &err) != KILN_OK || kiln_norm_spec_parse(canon, &s, &err) != KILN_OK ||
        kiln_norm_data_create(&d, &s, eps, rows, hidden, KILN_LN_RANDOM, scale, 5, &err) != KILN_OK)
        CHECK(0, "%s: %s", spec, err.msg);
    return d;
}

static void huge_rows(const char *spec, int hidden) {
    char name[300];
    snprintf(name, sizeof name, "%s: rows of |x| ~ 1e30 give finite rstd and the float64 answer", spec);
    TEST_BEGIN(name);
    kiln_norm_data *d = exact_data(spec, 1e-5f, 4, hidden, 1e30);
    if (d && run_check(spec, 80, d, 0, 0, NULL) == 0)
        for (int r = 0; r < d->rows; r++)
            CHECK(d->rstd[r] > 0 && isfinite(d->rstd[r]), "rstd[%d] = %g (overflowed variance)", r, (double)d->rstd[r]);
    kiln_norm_data_free(d);
    TEST_END();
}

static void constant_rows(const char *spec, int hidden, float eps) {
    char name[300];
    snprintf(name, sizeof name, "%s hidden %d eps %g: constant rows have variance exactly 0", spec, hidden, (double)eps);
    TEST_BEGIN(name);
    kiln_norm_data *d = exact_data(spec, eps, 3, hidden, 1.0);
    if (d) {
        kiln_norm_data_set_row(d, 0, 0.1);
        kiln_norm_data_set_row(d, 2, -3.3);
        kiln_error err = {0};
        kiln_emu_kernel *k = load(spec, 80);
        if (k && kiln_norm_run(k, NULL, d, 0, 0, &err) == KILN_OK) {
            for (int r = 0; r < 3; r += 2) {
                float c = r ? -3.3f : 0.1f;
                CHECK(d->mean[r] == c, "mean[%d] = %.9g, want exactly %.9g", r, (double)d->mean[r], (double)c);
                if (eps == 0) {
                    CHECK(isinf(d->rstd[r]) && d->rstd[r] > 0, "rstd[%d] = %g, want +inf", r, (double)d->rstd[r]);
                    for (int i = 0; i < hidden; i++)
                        if (!isnan(kiln_emu_value_get(d->spec.y, d->y, (size_t)r * hidden + i))) {
                            CHECK(0, "y[%d][%d] = %g, want NaN (0 * inf)", r, i, kiln_emu_value_get(d->spec.y, d->y, (size_t)r * hidden + i));
                            break;
                        }
                } else {
                    for (int i = 0; i < hidden; i++) {
                        double y = kiln_emu_value_get(d->spec.y, d->y, (size_t)r * hidden + i);
                        double b = kiln_emu_value_get(d->spec.w, d->b, (size_t)i);
                        if (y != b) {
                            CHECK(0, "y[%d][%d] = %.9g, want exactly the bias %.9g", r, i, y, b);
                            break;
                        }
                    }
                }
            }
        } else {
            CHECK(0, "run: %s", err.msg);
        }
        if (k) kiln_emu_kernel_free(k);
    }
    kiln_norm_data_free(d);
    TEST_END();
}

/* ---- rows at f32's edge (issue 22, items 1 and 2) ---- */

/* Row r of the normalized stream (x; with a residual, the residual stream with x = 0) set to a
 * row near f32's maximum. EDGE_BIG: s (1 + sin(1.7 i + r) / 2), one sign, so the f32 sum (and
 * the sum of squares) overflows; EDGE_APART: 3e38 at element 0 and about -2e38 elsewhere, so
 * x - mean overflows f32 (float64 gives finite statistics and y for both; the fixed-hidden
 * LayerNorm forms promise finite statistics there but not y: docs/norms.md). */
enum { EDGE_RANDOM, EDGE_BIG, EDGE_APART };

static void edge_row(kiln_norm_data *d, int r, int kind, double s) {
    kiln_dtype dt = d->res ? d->spec.r : d->spec.x;
    void *dst = d->res ? d->res : d->x;
    for (int i = 0; i < d->hidden; i++) {
        size_t at = (size_t)r * (size_t)d->hidden + (size_t)i;
        double v = kind == EDGE_BIG ? s * (1 + sin(1.7 * i + r) / 2) : i == 0 ? 3e38 : -2e38 * (1 + sin(1.3 * i) / 100);
        if (d->res) kiln_emu_value_set(d->spec.x, d->x, at, 0.0);
        kiln_emu_value_set(dt, dst, at, v);
    }
}

/* spec on sm with rows of the given kinds (the rest random): no emulator fault (a divergent
 * barrier when one row of a block takes an overflow branch), every output within the float64
 * error model, mean and rstd finite wherever float64's are. */
static void edge_rows(const char *spec, int sm, int hidden, int rows, const int *kinds, double s) {
    char name[300], what[40] = "";
    for (int r = 0; r < rows; r++)
        snprintf(what + strlen(what), sizeof what - strlen(what), "%s%s", r ? "," : "",
                 kinds[r] == EDGE_BIG ? "big" : kinds[r] == EDGE_APART ? "apart" : "random");
    snprintf(name, sizeof name, "%s sm_%d hidden %d rows {%s} (scale %g): finite statistics, the float64 answer", spec, sm,
             hidden, what, s);
    TEST_BEGIN(name);
    kiln_norm_data *d = exact_data(spec, 1e-5f, rows, hidden, 1.0);
    if (d) {
        for (int r = 0; r < rows; r++)
            if (kinds[r] != EDGE_RANDOM) edge_row(d, r, kinds[r], s);
        kiln_norm_data_reference(d);
        if (run_check(spec, sm, d, 0, 0, NULL) == 0)
            for (int r = 0; r < rows; r++) {
                CHECK(isfinite(d->ref_rstd[r]) && d->rstd[r] > 0 && isfinite(d->rstd[r]), "rstd[%d] = %g (float64 %g)", r,
                      (double)d->rstd[r], d->ref_rstd[r]);
                if (d->mean)
                    CHECK(isfinite(d->mean[r]), "mean[%d] = %g (float64 %g)", r, (double)d->mean[r], d->ref_mean[r]);
            }
    }
    kiln_norm_data_free(d);
    TEST_END();
}

/* EDGE_APART rows in a fixed-hidden LayerNorm: mean and rstd within the float64 error model. */
static void apart_stats(const char *spec, int sm, int hidden) {
    char name[300];
    snprintf(name, sizeof name, "%s sm_%d: rows with x - mean beyond f32's maximum have finite, accurate statistics", spec, sm);
    TEST_BEGIN(name);
    kiln_norm_data *d = exact_data(spec, 1e-5f, 2, hidden, 1.0);
    kiln_emu_kernel *k = d ? load(spec, sm) : NULL;
    kiln_error err = {0};
    if (k) {
        edge_row(d, 0, EDGE_APART, 0);
        kiln_norm_data_reference(d);
        if (kiln_norm_run(k, NULL, d, 0, 0, &err) != KILN_OK) CHECK(0, "run: %s", err.msg);
        else {
            kiln_norm_report r;
            kiln_norm_check(d, (int)kiln_emu_kernel_meta(k)->threads_per_row, 0, &r);
            CHECK(!r.bad[1] && !r.bad[2], "mean: %s; rstd: %s", r.first[1], r.first[2]);
            CHECK(isfinite(d->mean[0]) && isfinite(d->rstd[0]) && d->rstd[0] > 0, "mean %g rstd %g", (double)d->mean[0],
                  (double)d->rstd[0]);
        }
        kiln_emu_kernel_free(k);
    }
    kiln_norm_data_free(d);
    TEST_END();
}

/* The edge matrix on every SM: item 1 (RMSNorm, hidden=launch and its fixed sibling: one row of
 * a block overflows, or the block's only row) and item 2 (LayerNorm and RMSNorm rows whose sum or
 * deviations overflow f32), x f32/bf16 and f16 through an f32 residual stream. */
static void edge_matrix(void) {
    int sms[16], nsms = check_table_sms(sms, 16, 75);
    static const char *const rms[] = {
        "rmsnorm x=f32 hidden=launch", "rmsnorm x=bf16 w=f32 y=bf16 hidden=launch",
        "rmsnorm x=f32 hidden=launch residual=true", "rmsnorm x=bf16 hidden=launch residual=true",
        "rmsnorm x=f16 w=bf16 y=f16 hidden=launch residual=true r=f32", "rmsnorm x=bf16 hidden=1000",
    };
    static const int one[] = {EDGE_BIG}, first[] = {EDGE_BIG, EDGE_RANDOM}, second[] = {EDGE_RANDOM, EDGE_BIG},
                     last[] = {EDGE_RANDOM, EDGE_RANDOM, EDGE_BIG}, mixed[] = {EDGE_BIG, EDGE_APART, EDGE_RANDOM},
                     big[] = {EDGE_BIG, EDGE_RANDOM, EDGE_BIG};
    static const struct { const int *kinds; int rows; } layouts[] = {{one, 1}, {first, 2}, {second, 2}, {last, 3}};
    for (int si = 0; si < nsms; si++)
        for (size_t i = 0; i < sizeof rms / sizeof *rms; i++)
            for (size_t l = 0; l < sizeof layouts / sizeof *layouts; l++)
                edge_rows(rms[i], sms[si], 1000, layouts[l].rows, layouts[l].kinds, 1e30);
    static const struct { const char *spec; int hidden; double s; } stat[] = {
        {"layernorm x=f32 hidden=768", 768, 1e36},
        {"layernorm x=bf16 w=f32 y=bf16 hidden=768", 768, 1e36},
        {"layernorm x=f32 hidden=7", 7, 6e37},
        {"layernorm x=bf16 hidden=7 bias=false", 7, 6e37},
        {"layernorm x=f32 hidden=launch", 768, 1e36},
        {"layernorm x=bf16 w=f16 y=f32 hidden=launch", 7, 6e37},
        {"layernorm x=f16 hidden=768 residual=true r=f32", 768, 1e36},
        {"layernorm x=bf16 hidden=launch residual=true", 768, 1e36},
        {"layernorm x=f16 w=f32 y=bf16 hidden=launch residual=true r=f32", 7, 6e37},
        {"rmsnorm x=f32 hidden=768", 768, 1e36},
        {"rmsnorm x=bf16 hidden=7", 7, 6e37},
        {"rmsnorm x=f16 hidden=768 residual=true r=f32", 768, 1e36},
        {"rmsnorm x=f32 hidden=launch", 768, 1e36},
    };
    for (int si = 0; si < nsms; si++)
        for (size_t i = 0; i < sizeof stat / sizeof *stat; i++) {
            int fixed_ln = !strncmp(stat[i].spec, "layernorm ", 10) && !strstr(stat[i].spec, "hidden=launch");
            edge_rows(stat[i].spec, sms[si], stat[i].hidden, 3, fixed_ln ? big : mixed, stat[i].s);
        }
    /* the fixed LayerNorm forms with EDGE_APART rows: finite statistics (y may overflow there) */
    static const char *const apart[] = {"layernorm x=f32 hidden=768", "layernorm x=bf16 w=f32 y=bf16 hidden=7"};
    for (int si = 0; si < nsms; si++)
        for (size_t i = 0; i < sizeof apart / sizeof *apart; i++) apart_stats(apart[i], sms[si], i ? 7 : 768);
}

/* Inputs the main sweep leaves out: NaN/Inf rows in a backward (they reach every dweight column
 * as NaN, which the check expects from float64) and a tiny eps. */
static void adversarial(const char *spec, kiln_ln_input in, float eps) {
    char name[300];
    snprintf(name, sizeof name, "%s: %s inputs, eps %g", spec, kiln_ln_input_name(in), (double)eps);
    TEST_BEGIN(name);
    kiln_error err = {0};
    char canon[KILN_SPEC_MAX];
    kiln_norm_spec s;
    kiln_norm_data *d = NULL;
    if (kiln_canonical_spec(gen, spec, canon, sizeof canon, &err) != KILN_OK || kiln_norm_spec_parse(canon, &s, &err) != KILN_OK ||
        kiln_norm_data_create(&d, &s, eps, 12, s.hidden ? s.hidden : 300, in, 1.0, 3, &err) != KILN_OK)
        CHECK(0, "%s", err.msg);
    else
        run_check(spec, 80, d, 2, 0, NULL);
    kiln_norm_data_free(d);
    TEST_END();
}

int main(void) {
    kiln_error err = {0};
    if (kiln_gen_create(&gen, NULL, &err) != KILN_OK || kiln_emu_create(&emu, &err) != KILN_OK) {
        printf("setup: %s\n", err.msg);
        return 1;
    }
    const char *fe = getenv("KILN_TEST_FULL");
    int full = fe && *fe == '1';
    static const int quick_sms[] = {75, 80};
    int all_sms[16], nall = check_table_sms(all_sms, 16, 75);
    const int *sms = full ? all_sms : quick_sms;
    int nsms = full ? nall : 2;
    static const char *const fwd[] = {
        "layernorm x=bf16 w=f32 y=bf16 hidden=768",
        "layernorm x=f16 hidden=33 residual=true r=f32",
        "layernorm x=bf16 w=f32 y=bf16 hidden=launch residual=true r=f32",
        "layernorm x=f32 hidden=4096 residual=true r=bf16 bias=false",
        "rmsnorm x=bf16 w=f32 y=bf16 hidden=768",
        "rmsnorm x=f16 hidden=1",
        "rmsnorm x=f32 hidden=launch weight=false",
        "rmsnorm x=bf16 hidden=4096 residual=true r=f32",
        "rmsnorm x=f16 w=bf16 y=f32 hidden=launch residual=true",
    };
    static const char *const bwd[] = {
        "layernorm_bwd x=bf16 w=f32 hidden=768",
        "layernorm_bwd x=f16 dx=f32 hidden=33 bias=false",
        "layernorm_bwd x=f32 hidden=launch",
        "layernorm_bwd x=bf16 hidden=4096 residual=true r=f32",
        "layernorm_bwd x=f32 w=bf16 dy=bf16 hidden=launch residual=true weight=false",
        "rmsnorm_bwd x=bf16 w=f32 hidden=768",
        "rmsnorm_bwd x=f16 hidden=7",
        "rmsnorm_bwd x=bf16 hidden=launch residual=true",
        "rmsnorm_bwd x=f32 hidden=2048 weight=false",
        "layernorm_bwd x=bf16 hidden=12288",             /* smem16 (sm_80); sm_75: 2/3 in shared memory, the rest in registers */
        "rmsnorm_bwd x=bf16 hidden=16384 residual=true", /* reload form, 1024 threads (sm_75: split) */
        "layernorm_bwd x=bf16 hidden=16384",             /* smem16 (sm_80: 128 KiB; sm_75: 60 KiB of it, the rest in registers) */
        "layernorm_bwd x=bf16 w=f32 hidden=4096 form=smem16", /* every form, same geometry on both SMs */
        "rmsnorm_bwd x=bf16 hidden=2048 form=reg8",
        "layernorm_bwd x=bf16 hidden=1000 form=reg16",
        "layernorm_bwd x=bf16 hidden=4096 form=fixed",
        "layernorm_bwd x=bf16 hidden=768 form=smem8",
        /* the two-block row (lib/norm_split.lua): row statistics, then 2 or 4 column ranges */
        "layernorm_bwd x=bf16 hidden=4096 form=split2",
        "rmsnorm_bwd x=f32 hidden=2048 residual=true form=split4",
        "layernorm_bwd x=f16 w=f32 hidden=768 bias=false form=split4",
        "layernorm_bwd x=bf16 hidden=4096 weight=false bias=false form=split2",
        "layernorm_bwd x=f32 hidden=16384 residual=true r=f32", /* form=auto takes split on every SM */
    };
    static const char *const full_extra[] = {
        "layernorm x=f32 hidden=16384", "rmsnorm x=bf16 hidden=16384", "layernorm_bwd x=bf16 hidden=16384",
        "rmsnorm_bwd x=f16 hidden=16384", "layernorm_bwd x=f16 w=f32 dy=f16 dx=bf16 hidden=1000",
        "layernorm_bwd x=f32 hidden=16384", "layernorm_bwd x=bf16 hidden=16384 form=reg32",
        "rmsnorm x=bf16 hidden=100 residual=true r=f16",
    };
    for (size_t i = 0; i < sizeof fwd / sizeof *fwd; i++) variant(fwd[i], sms, nsms, full);
    for (size_t i = 0; i < sizeof bwd / sizeof *bwd; i++) variant(bwd[i], sms, nsms, full);
    for (size_t i = 0; full && i < sizeof full_extra / sizeof *full_extra; i++) variant(full_extra[i], sms, nsms, full);
    /* offset=1 (zero-centered weights, issue 22 item 3): every family, w f32/f16/bf16 (weights near 0,
     * outputs in f32 where a 16-bit y/dx would hide a 1 + w rounded to w's dtype), fixed and launch
     * hidden, every backward form family, on every SM */
    static const char *const offset_specs[] = {
        "rmsnorm x=bf16 y=f32 hidden=768 offset=1",
        "rmsnorm x=f16 y=f32 hidden=launch offset=1",
        "rmsnorm x=f32 w=bf16 hidden=4096 residual=true r=bf16 offset=1",
        "layernorm x=bf16 y=f32 hidden=1000 offset=1",
        "layernorm x=f32 w=f16 hidden=launch offset=1",
        "layernorm x=bf16 w=f32 y=bf16 hidden=33 residual=true r=f32 offset=1",
        "rmsnorm_bwd x=bf16 dx=f32 hidden=768 offset=1",
        "rmsnorm_bwd x=f16 w=f16 dx=f32 hidden=launch residual=true offset=1",
        "layernorm_bwd x=bf16 dx=f32 hidden=33 offset=1",
        "layernorm_bwd x=f32 w=bf16 hidden=launch offset=1",
        "layernorm_bwd x=bf16 dx=f32 hidden=4096 offset=1",
        "layernorm_bwd x=f16 w=f32 dx=f32 hidden=4096 form=fixed offset=1",
        "rmsnorm_bwd x=bf16 dx=f32 hidden=16384 residual=true offset=1",
        "layernorm_bwd x=bf16 dx=f32 hidden=4096 form=split2 offset=1",
    };
    for (size_t i = 0; i < sizeof offset_specs / sizeof *offset_specs; i++) variant(offset_specs[i], all_sms, 5, full);
    if (full) { /* the sweep: every family x dtype sets x hidden sizes x residual */
        static const char *const fam[] = {"layernorm", "rmsnorm", "layernorm_bwd", "rmsnorm_bwd"};
        static const char *const fwd_dt[] = {"x=f32", "x=f16", "x=bf16", "x=bf16 w=f32", "x=f16 w=f32 y=bf16"};
        static const char *const bwd_dt[] = {"x=f32", "x=f16", "x=bf16", "x=bf16 w=f32", "x=f16 w=f32 dy=bf16 dx=f32"};
        static const char *const hs[] = {"1", "7", "33", "100", "768", "1000", "4096", "16384", "launch"};
        for (int f = 0; f < 4; f++)
            for (int d = 0; d < 5; d++)
                for (int h = 0; h < 9; h++)
                    for (int r = 0; r < 2; r++) {
                        char spec[200];
                        snprintf(spec, sizeof spec, "%s %s hidden=%s%s", fam[f], f < 2 ? fwd_dt[d] : bwd_dt[d], hs[h],
                                 r ? " residual=true r=f32" : "");
                        variant(spec, sms, nsms, 0);
                    }
    }

    /* where the arithmetic order is unchanged (the stats kernel's T and elements per thread are the
     * reload form's, and the same blocks walk the same rows), the split form gives the same bits */
    same_bits("layernorm_bwd x=bf16 hidden=4096 form=split2", "layernorm_bwd x=bf16 hidden=4096 form=smem16", 4096);
    same_bits("rmsnorm_bwd x=f32 w=bf16 hidden=2048 form=split4", "rmsnorm_bwd x=f32 w=bf16 hidden=2048 form=reg16", 2048);
    adversarial("layernorm_bwd x=bf16 w=f32 hidden=768", KILN_LN_MIXED, 1e-5f);
    adversarial("rmsnorm_bwd x=f16 hidden=launch residual=true", KILN_LN_MIXED, 1e-5f);
    adversarial("layernorm x=f32 hidden=1000", KILN_LN_MIXED, 1e-12f);
    adversarial("rmsnorm x=bf16 hidden=launch", KILN_LN_MIXED, 1e-12f);
    adversarial("layernorm_bwd x=f32 hidden=1000", KILN_LN_LARGE_MEAN, 1e-12f);
    adversarial("rmsnorm_bwd x=f32 hidden=33", KILN_LN_CONSTANT, 1e-12f);
    huge_rows("layernorm x=f32 hidden=1000", 1000);
    huge_rows("layernorm x=bf16 hidden=launch", 777);
    huge_rows("rmsnorm x=f32 hidden=1000", 1000);
    huge_rows("rmsnorm x=bf16 hidden=launch", 777);
    constant_rows("layernorm x=f32 hidden=1000", 1000, 0.0f);
    constant_rows("layernorm x=f32 hidden=launch", 300, 0.0f);
    constant_rows("layernorm x=f32 hidden=4096", 4096, 1e-5f);
    constant_rows("layernorm x=f32 hidden=launch", 65536, 1e-5f);
    edge_matrix();

    kiln_emu_destroy(emu);
    kiln_gen_destroy(gen);
    return check_summary("emu_norm");
}
