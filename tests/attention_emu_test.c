/* tests/attention_emu_test.c - every attention path runs on the CPU emulator through the registry's case
 * runner and matches the float64 reference within the error model of templates/attention.ref.c (o and lse). */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "attn_case.h"
#include "check.h"
#include "kiln/emu_case.h"
#include "kiln/kiln.h"

/* A path as the test sees it: target, the spec's dtype/path, and what P is rounded to (the error
 * model's p_f32 / p_f16 options; the input dtype otherwise). */
typedef struct path {
    const char *name;
    int sm;
    const char *dtype, *path;
    kiln_dtype p_dtype;
} path;

static const path paths[] = {
    {"mma f16 sm_80", 80, "f16", "mma", KILN_F16},    {"mma bf16 sm_80", 80, "bf16", "mma", KILN_BF16},
    {"auto f16 sm_75", 75, "f16", "auto", KILN_F16},    {"simt f32", 80, "f32", "auto", KILN_F32},
    {"simt f16 sm_80", 80, "f16", "simt", KILN_F32},  {"simt bf16 sm_80", 80, "bf16", "simt", KILN_F32},
    {"simt bf16 sm_75", 75, "bf16", "simt", KILN_F32}, {"auto bf16 sm_75 (f16-scaled mma)", 75, "bf16", "auto", KILN_F16},
    /* Blackwell: sm_80's mma path with the data-center and the consumer shared memory sizes */
    {"mma bf16 sm_100", 100, "bf16", "mma", KILN_BF16}, {"mma f16 sm_120", 120, "f16", "mma", KILN_F16},
};

typedef struct shape {
    int batch, heads_q, heads_kv, seq_q, seq_k;
    double amplitude; /* q and k uniform in [-amplitude, amplitude] (v in [-1, 1]) */
    float scale;      /* 0: 1/sqrt(head_dim) */
    int bhsd;         /* Q, K, V, O laid out [batch, heads, seq, head_dim] through the strides */
} shape;

static const shape shapes[] = {
    {2, 2, 2, 17, 17, 1, 0, 0},   /* MHA, batch > 1 */
    {1, 4, 2, 127, 129, 1, 0, 0}, /* GQA, seq_q < seq_k */
    {1, 3, 1, 129, 127, 1, 0, 1}, /* MQA, seq_q > seq_k (causal: empty rows), BHSD strides */
    {2, 2, 1, 1, 1, 1, 0, 0},     /* one query, one key */
    {1, 2, 2, 33, 100, 3, 1, 0},  /* large scores: sharp softmax, online rescaling */
    {1, 1, 1, 100, 33, 1, 0, 1},
    {1, 1, 1, 260, 400, 1, 0, 0}, /* three blocks of 128 rows; unmasked tiles before the diagonal */
};
#define NSHAPES (sizeof shapes / sizeof shapes[0])

static kiln_case_opts shape_opts(const path *pa, const shape *sh, uint64_t seed, int twice) {
    kiln_case_opts o = attn_case_opts(pa->sm, seed, twice, sh->batch, sh->heads_q, sh->heads_kv, sh->seq_q, sh->seq_k,
                                      sh->amplitude, sh->scale, pa->p_dtype);
    if (sh->bhsd) kiln_case_opts_set(&o, "bhsd", 1);
    return o;
}

/* Runs and checks the case's problem; folds its figures into the path's. */
static void run_check(kiln_case *c, double worst[2], double max_abs[2]) {
    kiln_error err = {0};
    kiln_status st = kiln_case_run(c, &err);
    CHECK(st == KILN_OK, "emulator: %s", err.msg);
    if (st != KILN_OK) return;
    kiln_case_check(c);
    CHECK(kiln_case_noutputs(c) == 2, "%d outputs, want o and lse", kiln_case_noutputs(c));
    for (int i = 0; i < kiln_case_noutputs(c) && i < 2; i++) {
        const kiln_case_output *out = kiln_case_output_at(c, i);
        CHECK(out->bad == 0, "%ld bad %s values; first: %s", out->bad, out->name, out->first);
        if (out->worst > worst[i]) worst[i] = out->worst;
        if (out->max_abs > max_abs[i]) max_abs[i] = out->max_abs;
    }
}

int main(void) {
    kiln_error err = {0};
    kiln_gen *gen;
    kiln_emu *emu;
    if (kiln_gen_create(&gen, NULL, &err) != KILN_OK || kiln_emu_create(&emu, &err) != KILN_OK) {
        printf("setup failed: %s\nattention emu: 0 passed, 1 failed\n", err.msg);
        return 1;
    }
    static const int dims[] = {32, 64, 96, 128, 256};
    int rot = 0;
    uint64_t seed = 0x9e3779b97f4a7c15ull;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (size_t pi = 0; pi < sizeof paths / sizeof paths[0]; pi++) {
        const path *pa = &paths[pi];
        double worst[2] = {0, 0}, max_abs[2] = {0, 0};
        for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++)
            for (int causal = 0; causal < 2; causal++) {
                if (attn_case_sampled_out(pi, 2 * di + causal)) { /* (the sanitizer build: one kernel in four) */
                    rot += 2;
                    seed += 2;
                    continue;
                }
                char spec[256], name[400];
                snprintf(spec, sizeof spec, "attention dtype=%s head_dim=%d causal=%s path=%s", pa->dtype, dims[di],
                         causal ? "true" : "false", pa->path);
                kiln_case *c = NULL;
                /* two shapes per kernel (one case, reset), rotating so that every shape meets every path */
                for (int s = 0; s < 2; s++) {
                    const shape *sh = &shapes[(rot++) % NSHAPES];
                    snprintf(name, sizeof name, "%s (sm_%d) b=%d hq=%d hkv=%d sq=%d sk=%d%s", spec, pa->sm, sh->batch,
                             sh->heads_q, sh->heads_kv, sh->seq_q, sh->seq_k, sh->bhsd ? " bhsd" : "");
                    TEST_BEGIN(name);
                    kiln_case_opts o = shape_opts(pa, sh, seed++, s == 0);
                    kiln_status st = s == 0 ? kiln_case_create(&c, gen, emu, spec, &o, &err)
                                     : c    ? kiln_case_reset(c, &o, &err)
                                            : KILN_EINVAL;
                    CHECK(st == KILN_OK, "case: %s", err.msg);
                    if (st == KILN_OK) run_check(c, worst, max_abs);
                    TEST_END();
                }
                kiln_case_free(c);
            }
        printf("%-16s max |error|: o %.3g, lse %.3g; worst error/tolerance: o %.3f, lse %.3f\n", pa->name,
               max_abs[0], max_abs[1], worst[0], worst[1]);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    printf("ran in %.1f s\n", (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9);
    kiln_emu_destroy(emu);
    kiln_gen_destroy(gen);
    return check_summary("attention emu");
}
