/* tests/emu_case_test.c - the family registry's runner and checker: every family has a reference, runs, and catches a planted error. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kiln/emu_case.h"
#include "kiln/kiln.h"

static kiln_gen *gen;
static kiln_emu *emu;

/* A small problem every family reads what it needs from. */
static kiln_case_opts small(int sm, uint64_t seed) {
    kiln_case_opts o = {.sm = sm, .seed = seed};
    kiln_case_opts_set(&o, "rows", 5);
    kiln_case_opts_set(&o, "hidden", 40);
    kiln_case_opts_set(&o, "seq_k", 7);
    kiln_case_opts_set(&o, "heads_q", 2);
    kiln_case_opts_set(&o, "heads_kv", 1);
    return o;
}

/* The dtype of pointer parameter `name` in any kernel the case ran; -1 when none has it. */
static int param_dtype(const kiln_case *c, const char *name) {
    for (int s = 0; s < kiln_case_nsteps(c); s++) {
        const kiln_kernel_meta *m = kiln_emu_kernel_meta(kiln_case_step_at(c, s)->kernel);
        for (int i = 0; i < m->nparams; i++)
            if (m->params[i].kind == KILN_PARAM_PTR && !strcmp(m->params[i].name, name)) return (int)m->params[i].dtype;
    }
    return -1;
}

/* Every family `kiln list` shows has a reference in the registry, and every reference a template. */
static void test_registry_covers_list(void) {
    TEST_BEGIN("the registry has a reference for every family kiln list shows, and no other");
    static char text[1 << 16];
    kiln_error err = {0};
    CHECK(kiln_describe(gen, text, sizeof text, &err) == KILN_OK, "%s", err.msg);
    int listed = 0;
    for (char *line = text; line && *line;) {
        char *nl = strchr(line, '\n');
        char *dash = strstr(line, " - ");
        if (line[0] != ' ' && dash && (!nl || dash < nl)) {
            char name[64];
            snprintf(name, sizeof name, "%.*s", (int)(dash - line), line);
            CHECK(kiln_ref_find(name) != NULL, "family '%s' has no float64 reference", name);
            listed++;
        }
        line = nl ? nl + 1 : NULL;
    }
    CHECK(listed == kiln_ref_count(), "kiln list shows %d families, the registry holds %d", listed, kiln_ref_count());
    for (int i = 0; i < kiln_ref_count(); i++) {
        char needle[80];
        snprintf(needle, sizeof needle, "%s - ", kiln_ref_at(i)->family);
        CHECK(strstr(text, needle) != NULL, "reference '%s' names no family kiln list shows", kiln_ref_at(i)->family);
    }
    TEST_END();
}

/* A family's spec runs on a small problem and passes; the same seed gives the same bits; a value
 * planted in its first output is caught. */
static void test_family(const char *spec, int sm) {
    char name[160];
    snprintf(name, sizeof name, "%s sm_%d: runs, passes, is repeatable, catches a planted error", spec, sm);
    TEST_BEGIN(name);
    kiln_error err = {0};
    kiln_case_opts o = small(sm, 3);
    kiln_case *c = NULL, *again = NULL;
    kiln_status st = kiln_case_create(&c, gen, emu, spec, &o, &err);
    const kiln_ref_family *f = c ? kiln_case_family(c) : NULL;
    CHECK(st == KILN_OK, "%s", err.msg);
    if (st == KILN_OK) st = kiln_case_run(c, &err);
    CHECK(st == KILN_OK, "run: %s", err.msg);
    if (st == KILN_OK) {
        CHECK(kiln_case_nsteps(c) >= 1, "no launch planned");
        long bad = kiln_case_check(c);
        CHECK(bad == 0, "%ld bad values; first output %s: %s", bad, kiln_case_output_at(c, 0)->name,
              kiln_case_output_at(c, 0)->first);
        CHECK(kiln_case_noutputs(c) >= 1, "no output checked");
        for (int i = 0; i < kiln_case_noutputs(c); i++) {
            const kiln_case_output *out = kiln_case_output_at(c, i);
            CHECK(out->name[0] && out->worst <= 1 && isfinite(out->max_abs), "output %d '%s' worst %g", i, out->name, out->worst);
        }
        char what[256];
        kiln_case_describe(c, what, sizeof what);
        CHECK(what[0] != 0, "no problem description");
        /* repeatable: a second case of the same seed gives the same errors, bit for bit */
        CHECK(kiln_case_create(&again, gen, emu, spec, &o, &err) == KILN_OK && kiln_case_run(again, &err) == KILN_OK,
              "%s", err.msg);
        if (again) {
            kiln_case_check(again);
            for (int i = 0; i < kiln_case_noutputs(c); i++)
                CHECK(!memcmp(&kiln_case_output_at(c, i)->max_abs, &kiln_case_output_at(again, i)->max_abs, sizeof(double)),
                      "output %s: max |err| %.17g then %.17g", kiln_case_output_at(c, i)->name,
                      kiln_case_output_at(c, i)->max_abs, kiln_case_output_at(again, i)->max_abs);
        }
        /* a planted error: the first output's first element moved far off */
        const char *first = kiln_case_output_at(c, 0)->name;
        void *ptr = NULL;
        size_t bytes = 0;
        int dt = param_dtype(c, first);
        CHECK(f->tensor(c, first, &ptr, &bytes) == 0 && ptr && bytes && dt >= 0, "output '%s' is no tensor", first);
        if (ptr && dt >= 0) {
            double v = kiln_emu_value_get((kiln_dtype)dt, ptr, 0);
            kiln_emu_value_set((kiln_dtype)dt, ptr, 0, isfinite(v) ? v + 100 + fabs(v) : 1);
            CHECK(kiln_case_check(c) >= 1 && kiln_case_output_at(c, 0)->bad == 1, "the planted error in %s[0] went unseen",
                  first);
            CHECK(strstr(kiln_case_output_at(c, 0)->first, first) != NULL, "first bad value: '%s'",
                  kiln_case_output_at(c, 0)->first);
        }
    }
    kiln_case_free(c);
    kiln_case_free(again);
    TEST_END();
}

static void test_bad_problems(void) {
    TEST_BEGIN("bad problems: one clear error naming the size");
    kiln_error err = {0};
    kiln_case *c = NULL;
    kiln_case_opts o = {.sm = 80, .seed = 1};
    kiln_case_opts_set(&o, "rows", 3);
    CHECK(kiln_case_create(&c, gen, emu, "layernorm x=bf16", &o, &err) == KILN_EINVAL && strstr(err.msg, "--hidden"),
          "launch-time hidden without a size: %s", err.msg);
    kiln_case_opts_set(&o, "hidden", 8);
    CHECK(kiln_case_create(&c, gen, emu, "rmsnorm hidden=7", &o, &err) == KILN_EINVAL && strstr(err.msg, "hidden=7"),
          "contradicting hidden: %s", err.msg);
    kiln_case_opts_set(&o, "heads_q", 3), kiln_case_opts_set(&o, "heads_kv", 2);
    CHECK(kiln_case_create(&c, gen, emu, "attention", &o, &err) == KILN_EINVAL && strstr(err.msg, "multiple of heads_kv"),
          "heads 3:2: %s", err.msg);
    CHECK(kiln_case_create(&c, gen, emu, "groupnorm", &o, &err) != KILN_OK, "an unknown family");
    kiln_case_opts_set(&o, "heads_kv", 3), kiln_case_opts_set(&o, "alibi_batch", 1);
    CHECK(kiln_case_create(&c, gen, emu, "attention", &o, &err) == KILN_EINVAL && strstr(err.msg, "alibi=true"),
          "per-batch slopes without the alibi key: %s", err.msg);
    CHECK(c == NULL, "no case on failure");
    TEST_END();
}

/* kiln_case_reset: the same kernels on another problem give what a fresh case of that problem gives;
 * another SM is refused, naming both. */
static void test_reset(void) {
    TEST_BEGIN("reset: another problem on the case's kernels, as a fresh case; another SM refused");
    kiln_error err = {0};
    kiln_case *c = NULL, *f = NULL;
    kiln_case_opts o = small(80, 3), p = small(80, 4), q = small(75, 4);
    kiln_case_opts_set(&p, "rows", 9);
    const char *spec = "rmsnorm x=bf16 w=f32 hidden=40";
    kiln_status st = kiln_case_create(&c, gen, emu, spec, &o, &err);
    if (st == KILN_OK) st = kiln_case_run(c, &err);
    if (st == KILN_OK) st = kiln_case_reset(c, &p, &err);
    if (st == KILN_OK) st = kiln_case_run(c, &err);
    if (st == KILN_OK) st = kiln_case_create(&f, gen, emu, spec, &p, &err);
    if (st == KILN_OK) st = kiln_case_run(f, &err);
    CHECK(st == KILN_OK, "%s", err.msg);
    if (st == KILN_OK) {
        CHECK(kiln_case_check(c) == 0 && kiln_case_noutputs(c) > 0, "the reset case fails its check");
        void *a, *b;
        size_t na, nb;
        CHECK(kiln_case_tensor(c, "y", &a, &na) == 0 && kiln_case_tensor(f, "y", &b, &nb) == 0 && na == nb &&
                  na == 9 * 40 * 2 && !memcmp(a, b, na),
              "y after the reset (%zu bytes) differs from a fresh case's (%zu)", na, nb);
        CHECK(kiln_case_reset(c, &q, &err) == KILN_EINVAL && strstr(err.msg, "sm_80") && strstr(err.msg, "sm_75"),
              "another SM: %s", err.msg);
    }
    kiln_case_free(c);
    kiln_case_free(f);
    TEST_END();
}

/* The options for special rows, block counts and bits: a value written after the draw reads back in
 * its dtype and refresh moves the reference with it; bad names and indices are one clear error; a
 * family without a refresh hook says so; sm_count changes a backward's blocks, not its problem;
 * bits taken after a run match a rerun and catch one changed byte. */
static void test_special_rows(void) {
    TEST_BEGIN("special rows, per-run block counts, bits: kiln_case_set/get/refresh, set_launch, bits_take/same");
    kiln_error err = {0};
    kiln_case *c = NULL, *a = NULL;
    kiln_case_opts o = small(80, 3);
    kiln_case_opts_set(&o, "rows", 40);
    kiln_status st = kiln_case_create(&c, gen, emu, "rmsnorm_bwd x=bf16 w=f32 hidden=40", &o, &err);
    CHECK(st == KILN_OK, "%s", err.msg);
    if (st == KILN_OK) {
        const double *ref = kiln_case_reference(c, "dx");
        double before = ref[2 * 40 + 1];
        CHECK(kiln_case_count(c, "x") == 40 * 40 && kiln_case_count(c, "weight") == 40 && kiln_case_count(c, "nope") == 0,
              "counts %zu %zu", kiln_case_count(c, "x"), kiln_case_count(c, "weight"));
        for (size_t i = 0; i < 40; i++) kiln_case_set(c, "x", 2 * 40 + i, i == 1 ? 1e30 : 3.0, &err);
        CHECK(kiln_case_get(c, "x", 2 * 40 + 1) == (double)(float)1e30 || kiln_case_get(c, "x", 2 * 40 + 1) > 9e29,
              "x[2][1] reads %g", kiln_case_get(c, "x", 2 * 40 + 1));
        CHECK(kiln_case_refresh(c, &err) == KILN_OK && ref[2 * 40 + 1] != before, "refresh left dx's reference at %g", before);
        CHECK(kiln_case_set(c, "nope", 0, 1, &err) == KILN_EINVAL && strstr(err.msg, "nope"), "unknown tensor: %s", err.msg);
        CHECK(kiln_case_set(c, "x", 40 * 40, 1, &err) == KILN_EINVAL && strstr(err.msg, "1600"), "past the end: %s", err.msg);
        CHECK(isnan(kiln_case_get(c, "nope", 0)), "an unknown tensor reads as a number");
        unsigned grid[2] = {0, 0};
        for (int r = 0; r < 2; r++) {
            kiln_case_set_launch(c, r ? 1 : 0, 0);
            st = kiln_case_run(c, &err);
            CHECK(st == KILN_OK && kiln_case_check(c) == 0, "sm_count %d: %s", r, err.msg);
            for (int s = 0; s < kiln_case_nsteps(c); s++)
                if (kiln_case_step_at(c, s)->kernel == kiln_case_kernel(c)) grid[r] = kiln_case_step_at(c, s)->grid[0];
        }
        CHECK(grid[1] > 0 && grid[1] < grid[0], "blocks %u (all rows) and %u (one SM): want fewer on one SM", grid[0], grid[1]);
        kiln_case_bits *b = kiln_case_bits_take(c);
        char which[KILN_NAME_MAX];
        CHECK(kiln_case_run(c, &err) == KILN_OK && kiln_case_bits_same(c, b, which, sizeof which), "a rerun differs in %s", which);
        void *dw;
        size_t nb;
        kiln_case_tensor(c, "dweight", &dw, &nb);
        ((unsigned char *)dw)[3] ^= 1;
        CHECK(!kiln_case_bits_same(c, b, which, sizeof which) && !strcmp(which, "dweight"), "one flipped bit: '%s'", which);
        kiln_case_bits_free(b);
    }
    kiln_case_opts q = small(80, 3);
    st = kiln_case_create(&a, gen, emu, "rotary dtype=f16 head_dim=16", &q, &err);
    CHECK(st == KILN_OK, "%s", err.msg);
    if (st == KILN_OK)
        CHECK(kiln_case_refresh(a, &err) == KILN_EINVAL && strstr(err.msg, "rotary"), "no refresh hook: %s", err.msg);
    kiln_case_free(a);
    /* attention's refresh (the f16-scaled test's adversarial inputs): o's reference follows a written v */
    st = kiln_case_create(&a, gen, emu, "attention dtype=f16 head_dim=16", &q, &err);
    CHECK(st == KILN_OK, "%s", err.msg);
    if (st == KILN_OK) {
        const double *ro = kiln_case_reference(a, "o");
        double before = ro ? ro[3] : NAN;
        for (size_t j = 0; j < kiln_case_count(a, "v"); j += 16) kiln_case_set(a, "v", j + 3, 100.0, &err);
        CHECK(kiln_case_refresh(a, &err) == KILN_OK && ro && fabs(ro[3] - 100.0) < 1e-9 && ro[3] != before,
              "attention refresh: o[3] %g (before %g), want 100", ro ? ro[3] : NAN, before);
    }
    kiln_case_free(a);
    kiln_case_free(c);
    TEST_END();
}

static void test_checker(void) {
    TEST_BEGIN("the checker: NaN and Inf must match, unwritten values fail, the first bad value is named");
    kiln_case_output o = {0};
    CHECK(kiln_check_value(&o, NAN, NAN, 0, NAN, 0, "x[%d]", 0) == 0, "NaN for NaN");
    CHECK(kiln_check_value(&o, INFINITY, INFINITY, 0, INFINITY, 0, "x[%d]", 1) == 0, "Inf for Inf");
    CHECK(kiln_check_value(&o, 1.0, 1.0 + 1e-7, 1e-6, 1.0, 0, "x[%d]", 2) == 0, "within tolerance");
    CHECK(o.bad == 0 && o.worst > 0.09 && o.worst < 0.11, "worst %g", o.worst);
    CHECK(kiln_check_value(&o, 1.0, NAN, 0, NAN, 0, "x[%d]", 3) == 1, "a number where NaN is due");
    CHECK(kiln_check_value(&o, -INFINITY, INFINITY, 0, INFINITY, 0, "x[%d]", 4) == 1, "the wrong infinity");
    CHECK(kiln_check_value(&o, NAN, 1.0, 1, 1.0, 0, "x[%d]", 5) == 1, "NaN where a number is due");
    CHECK(kiln_check_value(&o, 1.0, 1.0, 1, 1.0, 1, "x[%d]", 6) == 1, "never written");
    CHECK(o.bad == 4 && !strcmp(o.first, "x[3] = 1, want nan +- 0 (float64 reference nan)"), "bad %ld, first '%s'", o.bad,
          o.first);
    CHECK(kiln_check_value(&o, 2.0, 1.0, 0.5, 1.0, 0, "x[%d]", 7) == 1 && o.worst == 2 && o.max_abs == 1 && o.max_rel == 1,
          "worst %g max_abs %g max_rel %g", o.worst, o.max_abs, o.max_rel);
    TEST_END();
}

int main(void) {
    kiln_error err = {0};
    if (kiln_gen_create(&gen, NULL, &err) != KILN_OK || kiln_emu_create(&emu, &err) != KILN_OK) {
        printf("setup: %s\n", err.msg);
        return 1;
    }
    test_checker();
    test_registry_covers_list();
    test_bad_problems();
    test_reset();
    test_special_rows();
    for (int i = 0; i < kiln_ref_count(); i++) {
        test_family(kiln_ref_at(i)->family, 80);
        test_family(kiln_ref_at(i)->family, 75);
    }
    /* the sequences and forms beyond the defaults */
    static const char *const more[] = {"attention dtype=bf16 splitkv=true", "attention_bwd dtype=f16 deterministic=true",
                                       "layernorm x=bf16 residual=true", "rmsnorm_bwd x=bf16 w=f32 offset=1 hidden=40",
                                       "layernorm_bwd x=f16 bias=false"};
    for (size_t i = 0; i < sizeof more / sizeof *more; i++) test_family(more[i], 80);
    kiln_emu_destroy(emu);
    kiln_gen_destroy(gen);
    return check_summary("emu_case");
}
