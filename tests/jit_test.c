/* tests/jit_test.c - generation for JIT: stage timing (kiln_gen_last_timing), builder timing
 * leaving the output unchanged, pipeline choice (KILN_PIPELINE, options), generators on
 * several threads giving the same text as one. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kiln/kiln.h"

#define LN "layernorm x=bf16 w=f32 y=bf16 hidden=4096"
#define ATTN "attention dtype=f16 head_dim=64 causal=true"

static char *generate(kiln_gen *g, const char *spec, int sm) {
    kiln_module *m;
    kiln_error err = {0};
    if (kiln_generate(g, spec, sm, KILN_EMIT_PTX, &m, &err) != KILN_OK) {
        printf("  generate %s (sm_%d): %s\n", spec, sm, err.msg);
        return NULL;
    }
    char *s = strdup(kiln_module_text(m));
    kiln_module_free(m);
    return s;
}

static void test_timing(void) {
    kiln_gen *g;
    kiln_error err = {0};
    TEST_BEGIN("stage times of the last generation add up");
    CHECK(kiln_gen_create(&g, NULL, &err) == KILN_OK, "%s", err.msg);
    char *ptx = generate(g, ATTN, 80);
    CHECK(ptx != NULL, "generation failed");
    const kiln_gen_timing *t = kiln_gen_last_timing(g);
    CHECK(t->total > 0 && t->total_wall > 0, "total %g, wall %g", t->total, t->total_wall);
    CHECK(t->spec > 0 && t->build > 0 && t->verify > 0 && t->optimize > 0, "front stages %g %g %g %g", t->spec,
          t->build, t->verify, t->optimize);
    CHECK(t->codegen_ir > 0 && t->isel > 0 && t->codegen > 0 && t->print > 0, "codegen stages %g %g %g %g",
          t->codegen_ir, t->isel, t->codegen, t->print);
    CHECK(t->builder == -1, "builder time %g without time_builder", t->builder);
    double parts = t->spec + t->config + t->build + t->verify + t->optimize + t->codegen_ir + t->isel + t->codegen +
                   t->print + t->finish;
    CHECK(parts <= t->total * 1.02 + 0.05 && parts >= t->total * 0.7, "stages %g ms, total %g ms", parts, t->total);
    double passes = 0;
    int instcombine = 0;
    for (int i = 0; i < t->npasses; i++) {
        passes += t->passes[i].ms;
        instcombine |= !strcmp(t->passes[i].name, "InstCombinePass");
        if (i) CHECK(t->passes[i].ms <= t->passes[i - 1].ms, "passes not sorted at %d", i);
    }
    CHECK(t->npasses > 3 && instcombine, "%d passes timed, InstCombinePass %s", t->npasses, instcombine ? "in" : "missing");
    CHECK(passes <= t->optimize * 1.02 + 0.05, "passes %g ms > pipeline %g ms", passes, t->optimize);
    TEST_END();
    free(ptx);
    kiln_gen_destroy(g);
}

static void test_builder_timing(void) {
    kiln_gen *plain, *timed;
    kiln_error err = {0};
    kiln_gen_options o = {.time_builder = 1};
    TEST_BEGIN("timing builder primitives leaves the PTX unchanged");
    CHECK(kiln_gen_create(&plain, NULL, &err) == KILN_OK, "%s", err.msg);
    CHECK(kiln_gen_create(&timed, &o, &err) == KILN_OK, "%s", err.msg);
    static const char *specs[] = {LN, ATTN, "layernorm x=f16 hidden=launch"};
    for (int i = 0; i < 3; i++) {
        char *a = generate(plain, specs[i], 80), *b = generate(timed, specs[i], 80);
        CHECK(a && b && !strcmp(a, b), "%s: PTX differs with time_builder", specs[i]);
        const kiln_gen_timing *t = kiln_gen_last_timing(timed);
        CHECK(t->builder > 0 && t->builder < t->build, "%s: builder %g ms of build %g ms", specs[i], t->builder, t->build);
        free(a);
        free(b);
    }
    TEST_END();
    kiln_gen_destroy(plain);
    kiln_gen_destroy(timed);
}

static void test_pipeline_choice(void) {
    kiln_gen *k, *o3;
    kiln_error err = {0};
    kiln_gen_options ko = {.pipeline = KILN_PIPELINE_KILN}, oo = {.pipeline = KILN_PIPELINE_O3};
    TEST_BEGIN("the pipeline option picks kiln's or default<O3>");
    CHECK(kiln_gen_create(&k, &ko, &err) == KILN_OK, "%s", err.msg);
    CHECK(kiln_gen_create(&o3, &oo, &err) == KILN_OK, "%s", err.msg);
    char *a = generate(k, ATTN, 80), *b = generate(o3, ATTN, 80);
    CHECK(a && b && strcmp(a, b) != 0, "kiln's pipeline and default<O3> gave the same attention PTX");
    /* default<O3> runs more kinds of passes than the timing keeps; kiln's fewer */
    const kiln_gen_timing *t = kiln_gen_last_timing(o3);
    CHECK(t->npasses == KILN_TIMING_PASSES, "default<O3>: %d kinds of passes timed", t->npasses);
    int other = 0;
    for (int i = 0; i < t->npasses; i++) other |= !strcmp(t->passes[i].name, KILN_TIMING_OTHER);
    CHECK(other, "default<O3>: no '%s' entry", KILN_TIMING_OTHER);
    t = kiln_gen_last_timing(k);
    CHECK(t->npasses < KILN_TIMING_PASSES, "kiln's pipeline: %d kinds of passes", t->npasses);
    for (int i = 0; i < t->npasses; i++) CHECK(strcmp(t->passes[i].name, "GVNPass"), "kiln's pipeline ran GVNPass");
    free(a);
    free(b);
    TEST_END();
    kiln_gen_destroy(k);
    kiln_gen_destroy(o3);

    TEST_BEGIN("a bad KILN_PIPELINE fails generation with LLVM's words");
    setenv("KILN_PIPELINE", "function(no-such-pass)", 1);
    kiln_gen *bad;
    CHECK(kiln_gen_create(&bad, NULL, &err) == KILN_OK, "%s", err.msg);
    kiln_module *m = NULL;
    kiln_status st = kiln_generate(bad, LN, 80, KILN_EMIT_PTX, &m, &err);
    CHECK(st != KILN_OK && strstr(err.msg, "no-such-pass"), "status %d, message '%s'", st, err.msg);
    kiln_module_free(m);
    kiln_gen_destroy(bad);
    unsetenv("KILN_PIPELINE");
    TEST_END();
}

typedef struct work {
    const char *spec;
    int sm;
    char *ptx;
} work;

static void *thread_main(void *arg) {
    work *w = arg;
    kiln_gen *g;
    kiln_error err = {0};
    if (kiln_gen_create(&g, NULL, &err) != KILN_OK) return NULL;
    for (int i = 0; i < 2; i++) { /* the second run reuses the generator's target machine */
        free(w->ptx);
        w->ptx = generate(g, w->spec, w->sm);
    }
    kiln_gen_destroy(g);
    return NULL;
}

static void test_threads(void) {
    TEST_BEGIN("generators on four threads give what one thread gives");
    work w[4] = {{LN, 80, NULL}, {ATTN, 75, NULL}, {LN, 80, NULL}, {ATTN, 75, NULL}};
    pthread_t th[4];
    for (int i = 0; i < 4; i++) pthread_create(&th[i], NULL, thread_main, &w[i]);
    for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
    kiln_gen *g;
    kiln_error err = {0};
    CHECK(kiln_gen_create(&g, NULL, &err) == KILN_OK, "%s", err.msg);
    char *ln = generate(g, LN, 80), *attn = generate(g, ATTN, 75);
    for (int i = 0; i < 4; i++) {
        const char *want = i % 2 ? attn : ln;
        CHECK(w[i].ptx && want && !strcmp(w[i].ptx, want), "thread %d: PTX differs", i);
        free(w[i].ptx);
    }
    free(ln);
    free(attn);
    kiln_gen_destroy(g);
    TEST_END();
}

int main(void) {
    unsetenv("KILN_PIPELINE");
    test_timing();
    test_builder_timing();
    test_pipeline_choice();
    test_threads();
    printf("jit: %d passed, %d failed\n", check_passed, check_failed);
    return check_failed ? 1 : 0;
}
