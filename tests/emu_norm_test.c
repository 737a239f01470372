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
 * sm_75 (integer bf16 rounding) and sm_80 (native cvt) must give identical bytes. Every case goes
 * through the one case runner (kiln/emu_case.h): the family's registry reference draws the inputs,
 * special rows are written after the draw (kiln_case_set, then kiln_case_refresh), the launch
 * description's sequence runs, and bits are compared with kiln_case_bits. Backwards run on a
 * one-SM device's grid (the template's rule: 16 blocks, a split form 4, fewer than the rows, so
 * blocks walk rows grid-stride), then twice with the same grid: every output (dx, dweight, dbias)
 * must be bit-identical (no atomics), then on one block per row group. Exact cases (issue 16): rows of
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
#include "kiln/emu_case.h"
#include "kiln/kiln.h"

static kiln_gen *gen;
static kiln_emu *emu;

/* The resolved spec's hidden (0: hidden=launch) and whether it is a backward; -1 when it does not resolve. */
static int spec_shape(const char *spec, int *hidden, int *bwd) {
    kiln_error err = {0};
    char canon[KILN_SPEC_MAX];
    if (kiln_canonical_spec(gen, spec, canon, sizeof canon, &err) != KILN_OK) {
        CHECK(0, "%s: %s", spec, err.msg);
        return -1;
    }
    const char *h = strstr(canon, " hidden=");
    *hidden = h ? atoi(h + 8) : 0;
    *bwd = strstr(canon, "_bwd ") != NULL;
    return 0;
}

/* The case runner's options for one norm problem on sm (eps as given, 0 included). */
static kiln_case_opts norm_opts(int sm, uint64_t seed, kiln_ln_input in, float eps, int rows, int hidden, double scale) {
    kiln_case_opts o = {.sm = sm, .seed = seed, .input = in, .scale = scale};
    kiln_case_opts_set(&o, "rows", rows);
    kiln_case_opts_set(&o, "hidden", hidden);
    kiln_case_opts_set(&o, "eps", eps);
    return o;
}

/* The case of spec (NULL, the failure recorded, when it cannot be built). */
static kiln_case *make(const char *spec, const kiln_case_opts *o) {
    kiln_case *c = NULL;
    kiln_error err = {0};
    if (kiln_case_create(&c, gen, emu, spec, o, &err) != KILN_OK) CHECK(0, "%s sm_%d: %s", spec, o->sm, err.msg);
    return c;
}

static int rows_of(kiln_case *c) { return (int)kiln_case_opts_get(kiln_case_options(c), "rows", 0); }
static int hidden_of(kiln_case *c) { return (int)kiln_case_opts_get(kiln_case_options(c), "hidden", 0); }
static int has(kiln_case *c, const char *tensor) { return kiln_case_count(c, tensor) > 0; }

/* Runs c's sequence (a split form's statistics kernel, the kernel, norm_reduce) and checks every
 * output against float64; 0 on a pass. */
static int run_check(kiln_case *c) {
    kiln_error err = {0};
    const char *spec = kiln_emu_kernel_meta(kiln_case_kernel(c))->spec;
    int sm = kiln_case_options(c)->sm;
    if (kiln_case_run(c, &err) != KILN_OK) {
        CHECK(0, "%s sm_%d: %s", spec, sm, err.msg);
        return -1;
    }
    long bad = kiln_case_check(c);
    for (int i = 0; i < kiln_case_noutputs(c); i++) {
        const kiln_case_output *o = kiln_case_output_at(c, i);
        CHECK(!o->bad, "%s sm_%d rows %d hidden %d: %ld bad %s; first: %s", spec, sm, rows_of(c), hidden_of(c), o->bad,
              o->name, o->first);
    }
    return bad ? -1 : 0;
}

/* The checked output `name` of c's last check, or NULL. */
static const kiln_case_output *output(kiln_case *c, const char *name) {
    for (int i = 0; i < kiln_case_noutputs(c); i++)
        if (!strcmp(kiln_case_output_at(c, i)->name, name)) return kiln_case_output_at(c, i);
    return NULL;
}

/* Every element of row r of x set to v (a residual row to 0): constant rows written after the draw. */
static void set_row(kiln_case *c, int r, double v) {
    kiln_error err = {0};
    size_t n = (size_t)hidden_of(c);
    for (size_t i = 0; i < n; i++) {
        if (kiln_case_set(c, "x", (size_t)r * n + i, v, &err) != KILN_OK ||
            (has(c, "residual") && kiln_case_set(c, "residual", (size_t)r * n + i, 0.0, &err) != KILN_OK)) {
            CHECK(0, "%s", err.msg);
            return;
        }
    }
}

static void refresh(kiln_case *c) {
    kiln_error err = {0};
    CHECK(kiln_case_refresh(c, &err) == KILN_OK, "%s", err.msg);
}

/* The geometry a run took, packed in one number (block threads, threads per row, rows per block, a
 * kernel before it): outputs of two SMs are bit-identical only at one geometry. */
static unsigned long long geometry(kiln_case *c) {
    const kiln_kernel_meta *m = kiln_emu_kernel_meta(kiln_case_kernel(c));
    int pre = kiln_case_nsteps(c) > 0 && kiln_case_step_at(c, 0)->kernel != kiln_case_kernel(c);
    return ((unsigned long long)m->block[0] << 32) | ((unsigned long long)m->threads_per_row << 16) | m->grid_tile[0] |
           (unsigned long long)pre << 62;
}

/* Two backward forms of one spec on the same rows and blocks (sm_80): every output's bits equal. */
static void same_bits(const char *a, const char *b, int hidden) {
    char name[300], which[KILN_NAME_MAX];
    snprintf(name, sizeof name, "same bits: %s vs %s", a, b);
    TEST_BEGIN(name);
    /* one block per row group (sm_count 0): the split form's grid rule gives 4 blocks per SM, the
     * others 16, so on no device do both walk the same rows grid-stride */
    kiln_case_opts o = norm_opts(80, 7, KILN_LN_RANDOM, 1e-5f, 11, hidden, 1.0);
    kiln_case *ca = make(a, &o), *cb = ca ? make(b, &o) : NULL;
    if (cb && run_check(ca) == 0 && run_check(cb) == 0) {
        kiln_case_bits *bits = kiln_case_bits_take(ca);
        CHECK(kiln_case_bits_same(cb, bits, which, sizeof which), "%s: %s differs in its bits from %s's", a, which, b);
        kiln_case_bits_free(bits);
    }
    kiln_case_free(ca);
    kiln_case_free(cb);
    TEST_END();
}

/* The variant on every SM in sms: each run checked, and the outputs' bytes equal across SMs. */
static void variant(const char *spec, const int *sms, int nsms, int full) {
    char name[300], which[KILN_NAME_MAX];
    snprintf(name, sizeof name, "%s", spec);
    TEST_BEGIN(name);
    int fixed, bwd;
    if (spec_shape(spec, &fixed, &bwd) != 0) {
        TEST_END();
        return;
    }
    int hiddens[3], nh = 0;
    if (fixed) hiddens[nh++] = fixed;
    else {
        hiddens[nh++] = 1000;
        hiddens[nh++] = 7;
        if (full) hiddens[nh++] = 4096;
    }
    for (int hi = 0; hi < nh; hi++) {
        /* small backward rows: over 100 partial rows, so every interleaved sum of norm_reduce works */
        int rows = hiddens[hi] >= 4096 ? 6 : bwd && hiddens[hi] <= 64 ? 150 : 19;
        uint64_t seed = 11;
        for (const char *ch = spec; *ch; ch++) seed = seed * 31 + (unsigned char)*ch;
        kiln_case_opts o = norm_opts(sms[0], seed, bwd ? KILN_LN_RANDOM : KILN_LN_MIXED, 1e-5f, rows, hiddens[hi], 1.0);
        kiln_case_bits *first = NULL;
        unsigned long long geom0 = 0;
        for (int si = 0; si < nsms; si++) {
            o.sm = sms[si];
            kiln_case *c = make(spec, &o);
            if (!c) break;
            if (bwd) { /* a constant row too (no NaN rows: they make all of dweight NaN) */
                set_row(c, 1, 0.1);
                refresh(c);
            }
            /* a backward on a one-SM device: fewer blocks than rows, each walking rows grid-stride;
             * a forward's first SM runs every block twice, threads in opposite orders */
            kiln_case_set_launch(c, bwd ? 1 : 0, !bwd && si == 0);
            if (run_check(c) != 0) {
                kiln_case_free(c);
                break;
            }
            if (si == 0) {
                geom0 = geometry(c);
                first = kiln_case_bits_take(c);
            } else if (geometry(c) == geom0) {
                /* a backward may take another form on an SM with less shared memory (docs/norms.md):
                 * another summation order, checked against float64 only */
                CHECK(kiln_case_bits_same(c, first, which, sizeof which), "%s: %s on sm_%d differs in its bits from sm_%d's",
                      spec, which, sms[si], sms[0]);
            }
            if (bwd && si == 0) { /* the same grid again: identical bits (deterministic reduction) */
                if (run_check(c) == 0)
                    CHECK(kiln_case_bits_same(c, first, which, sizeof which), "%s: %s differs between two runs", spec, which);
                kiln_case_set_launch(c, 0, 0); /* and on one block per row group */
                run_check(c);
            }
            kiln_case_free(c);
        }
        kiln_case_bits_free(first);
    }
    TEST_END();
}

/* ---- exact cases (issue 16, LayerNorm numerics at the edges) ---- */

/* Random rows of spec on sm 80 (seed 5), not yet run. */
static kiln_case *exact_case(const char *spec, float eps, int rows, int hidden, double scale) {
    kiln_case_opts o = norm_opts(80, 5, KILN_LN_RANDOM, eps, rows, hidden, scale);
    return make(spec, &o);
}

static void huge_rows(const char *spec, int hidden) {
    char name[300];
    snprintf(name, sizeof name, "%s: rows of |x| ~ 1e30 give finite rstd and the float64 answer", spec);
    TEST_BEGIN(name);
    kiln_case *c = exact_case(spec, 1e-5f, 4, hidden, 1e30);
    if (c && run_check(c) == 0)
        for (int r = 0; r < 4; r++) {
            double rs = kiln_case_get(c, "rstd", (size_t)r);
            CHECK(rs > 0 && isfinite(rs), "rstd[%d] = %g (overflowed variance)", r, rs);
        }
    kiln_case_free(c);
    TEST_END();
}

static void constant_rows(const char *spec, int hidden, float eps) {
    char name[300];
    snprintf(name, sizeof name, "%s hidden %d eps %g: constant rows have variance exactly 0", spec, hidden, (double)eps);
    TEST_BEGIN(name);
    kiln_case *c = exact_case(spec, eps, 3, hidden, 1.0);
    if (c) {
        set_row(c, 0, 0.1);
        set_row(c, 2, -3.3);
        refresh(c);
        if (run_check(c) == 0) {
            for (int r = 0; r < 3; r += 2) {
                float k = r ? -3.3f : 0.1f;
                double mean = kiln_case_get(c, "mean", (size_t)r), rstd = kiln_case_get(c, "rstd", (size_t)r);
                CHECK(mean == k, "mean[%d] = %.9g, want exactly %.9g", r, mean, (double)k);
                if (eps == 0) {
                    CHECK(isinf(rstd) && rstd > 0, "rstd[%d] = %g, want +inf", r, rstd);
                    for (int i = 0; i < hidden; i++) {
                        double y = kiln_case_get(c, "y", (size_t)r * hidden + i);
                        if (!isnan(y)) {
                            CHECK(0, "y[%d][%d] = %g, want NaN (0 * inf)", r, i, y);
                            break;
                        }
                    }
                } else {
                    for (int i = 0; i < hidden; i++) {
                        double y = kiln_case_get(c, "y", (size_t)r * hidden + i), b = kiln_case_get(c, "bias", (size_t)i);
                        if (y != b) {
                            CHECK(0, "y[%d][%d] = %.9g, want exactly the bias %.9g", r, i, y, b);
                            break;
                        }
                    }
                }
            }
        }
    }
    kiln_case_free(c);
    TEST_END();
}

/* ---- rows at f32's edge (issue 22, items 1 and 2) ---- */

/* Row r of the normalized stream (x; with a residual, the residual stream with x = 0) set to a
 * row near f32's maximum. EDGE_BIG: s (1 + sin(1.7 i + r) / 2), one sign, so the f32 sum (and
 * the sum of squares) overflows; EDGE_APART: 3e38 at element 0 and about -2e38 elsewhere, so
 * x - mean overflows f32 (float64 gives finite statistics and y for both; the fixed-hidden
 * LayerNorm forms promise finite statistics there but not y: docs/norms.md). */
enum { EDGE_RANDOM, EDGE_BIG, EDGE_APART };

static void edge_row(kiln_case *c, int r, int kind, double s) {
    kiln_error err = {0};
    int res = has(c, "residual"), n = hidden_of(c);
    for (int i = 0; i < n; i++) {
        size_t at = (size_t)r * (size_t)n + (size_t)i;
        double v = kind == EDGE_BIG ? s * (1 + sin(1.7 * i + r) / 2) : i == 0 ? 3e38 : -2e38 * (1 + sin(1.3 * i) / 100);
        if ((res && kiln_case_set(c, "x", at, 0.0, &err) != KILN_OK) ||
            kiln_case_set(c, res ? "residual" : "x", at, v, &err) != KILN_OK) {
            CHECK(0, "%s", err.msg);
            return;
        }
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
    kiln_case_opts o = norm_opts(sm, 5, KILN_LN_RANDOM, 1e-5f, rows, hidden, 1.0);
    kiln_case *c = make(spec, &o);
    if (c) {
        for (int r = 0; r < rows; r++)
            if (kinds[r] != EDGE_RANDOM) edge_row(c, r, kinds[r], s);
        refresh(c);
        const double *ref_rstd = kiln_case_reference(c, "rstd"), *ref_mean = kiln_case_reference(c, "mean");
        if (run_check(c) == 0)
            for (int r = 0; r < rows; r++) {
                double rs = kiln_case_get(c, "rstd", (size_t)r);
                CHECK(isfinite(ref_rstd[r]) && rs > 0 && isfinite(rs), "rstd[%d] = %g (float64 %g)", r, rs, ref_rstd[r]);
                if (has(c, "mean"))
                    CHECK(isfinite(kiln_case_get(c, "mean", (size_t)r)), "mean[%d] = %g (float64 %g)", r,
                          kiln_case_get(c, "mean", (size_t)r), ref_mean[r]);
            }
    }
    kiln_case_free(c);
    TEST_END();
}

/* EDGE_APART rows in a fixed-hidden LayerNorm: mean and rstd within the float64 error model. */
static void apart_stats(const char *spec, int sm, int hidden) {
    char name[300];
    snprintf(name, sizeof name, "%s sm_%d: rows with x - mean beyond f32's maximum have finite, accurate statistics", spec, sm);
    TEST_BEGIN(name);
    kiln_case_opts o = norm_opts(sm, 5, KILN_LN_RANDOM, 1e-5f, 2, hidden, 1.0);
    kiln_case *c = make(spec, &o);
    kiln_error err = {0};
    if (c) {
        edge_row(c, 0, EDGE_APART, 0);
        refresh(c);
        if (kiln_case_run(c, &err) != KILN_OK) CHECK(0, "run: %s", err.msg);
        else {
            kiln_case_check(c); /* y may overflow there */
            const kiln_case_output *m = output(c, "mean"), *r = output(c, "rstd");
            CHECK(m && r && !m->bad && !r->bad, "mean: %s; rstd: %s", m ? m->first : "(none)", r ? r->first : "(none)");
            double mean = kiln_case_get(c, "mean", 0), rstd = kiln_case_get(c, "rstd", 0);
            CHECK(isfinite(mean) && isfinite(rstd) && rstd > 0, "mean %g rstd %g", mean, rstd);
        }
    }
    kiln_case_free(c);
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
 * as NaN, which the check expects from float64) and a tiny eps; 20 rows, a backward's on a one-SM
 * device's blocks (16, or a split form's 4: some walk two rows). */
static void adversarial(const char *spec, kiln_ln_input in, float eps) {
    char name[300];
    snprintf(name, sizeof name, "%s: %s inputs, eps %g", spec, kiln_ln_input_name(in), (double)eps);
    TEST_BEGIN(name);
    int fixed, bwd;
    if (spec_shape(spec, &fixed, &bwd) == 0) {
        kiln_case_opts o = norm_opts(80, 3, in, eps, 20, fixed ? fixed : 300, 1.0);
        o.sm_count = 1;
        kiln_case *c = make(spec, &o);
        if (c) run_check(c);
        kiln_case_free(c);
    }
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
    /* (the sanitizer build: one spec in four of each list, check_san_keeps) */
    for (size_t i = 0; i < sizeof fwd / sizeof *fwd; i++)
        if (check_san_keeps(i, 4)) variant(fwd[i], sms, nsms, full);
    for (size_t i = 0; i < sizeof bwd / sizeof *bwd; i++)
        if (check_san_keeps(i, 4)) variant(bwd[i], sms, nsms, full);
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
    for (size_t i = 0; i < sizeof offset_specs / sizeof *offset_specs; i++)
        if (check_san_keeps(i, 4)) variant(offset_specs[i], all_sms, 5, full);
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
