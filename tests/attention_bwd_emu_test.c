/* tests/attention_bwd_emu_test.c - the attention backward sequence (prep, dkdv, convert; or the
 * deterministic prep, dkdv, dq) runs on the CPU emulator through the registry's case runner and its
 * dQ, dK, dV match the float64 gradients within the error model of templates/attention_bwd.ref.c.
 * KILN_TEST_FULL=1 runs every shape on every kernel instead of a rotating pair. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "attn_case.h"
#include "check.h"
#include "kiln/emu_case.h"
#include "kiln/kiln.h"

typedef struct path {
    const char *name;
    int sm;
    const char *dtype, *path; /* the dkdv and dq kernels' path= */
    kiln_dtype p_dtype;       /* what P and dS are rounded to before their products */
} path;

static const path paths[] = {
    {"mma f16 sm_80", 80, "f16", "auto", KILN_F16},   {"mma bf16 sm_90", 90, "bf16", "auto", KILN_BF16},
    {"mma f16 sm_75", 75, "f16", "auto", KILN_F16},   {"simt f32 sm_80", 80, "f32", "auto", KILN_F32},
    {"simt f16 sm_80", 80, "f16", "simt", KILN_F32},  {"simt bf16 sm_75 (forced)", 75, "bf16", "simt", KILN_F32},
    {"mma bf16 sm_100", 100, "bf16", "auto", KILN_BF16}, {"mma f16 sm_120", 120, "f16", "auto", KILN_F16},
};

typedef struct shape {
    int batch, heads_q, heads_kv, seq_q, seq_k;
    double amplitude;
    float scale;
    int bhsd;
} shape;

static const shape shapes[] = {
    {2, 2, 2, 17, 17, 1, 0, 0},  /* MHA, batch > 1 */
    {1, 4, 2, 37, 45, 1, 0, 0},  /* GQA, seq_q < seq_k */
    {1, 3, 1, 41, 23, 1, 0, 1},  /* MQA, seq_q > seq_k (causal: rows that see no key), BHSD strides */
    {2, 2, 1, 1, 1, 1, 0, 0},    /* one query, one key */
    {1, 2, 2, 20, 70, 3, 1, 0},  /* large scores: sharp softmax */
    {1, 1, 1, 70, 19, 1, 0, 1},
};
#define NSHAPES (sizeof shapes / sizeof shapes[0])

typedef struct result {
    double worst[3], max_abs[3];
} result;

/* Runs the backward sequence of spec (its dkdv kernel's launch description: prep, dkdv, convert or
 * dq) for one problem through the family's reference and the case runner, and checks dq, dk, dv. */
static void run_case(kiln_gen *gen, kiln_emu *emu, const char *spec, const path *pa, const shape *sh, uint64_t seed,
                     int twice, result *res) {
    kiln_case_opts o = attn_case_opts(pa->sm, seed, twice, sh->batch, sh->heads_q, sh->heads_kv, sh->seq_q, sh->seq_k,
                                      sh->amplitude, sh->scale, pa->p_dtype);
    if (sh->bhsd) kiln_case_opts_set(&o, "bhsd", 1);
    kiln_error err = {0};
    kiln_case *c = NULL;
    kiln_status st = kiln_case_create(&c, gen, emu, spec, &o, &err);
    CHECK(st == KILN_OK, "case: %s", err.msg);
    if (st == KILN_OK) {
        st = kiln_case_run(c, &err);
        CHECK(st == KILN_OK, "emulator: %s", err.msg);
    }
    if (st == KILN_OK) {
        kiln_case_check(c);
        CHECK(kiln_case_noutputs(c) == 3, "%d outputs, want dq, dk, dv", kiln_case_noutputs(c));
        for (int t = 0; t < kiln_case_noutputs(c) && t < 3; t++) {
            const kiln_case_output *out = kiln_case_output_at(c, t);
            CHECK(out->bad == 0, "%ld bad %s values; first: %s", out->bad, out->name, out->first);
            if (out->worst > res->worst[t]) res->worst[t] = out->worst;
            if (out->max_abs > res->max_abs[t]) res->max_abs[t] = out->max_abs;
        }
    }
    kiln_case_free(c);
}

int main(void) {
    kiln_error err = {0};
    kiln_gen *gen;
    kiln_emu *emu;
    if (kiln_gen_create(&gen, NULL, &err) != KILN_OK || kiln_emu_create(&emu, &err) != KILN_OK) {
        printf("setup failed: %s\nattention bwd emu: 0 passed, 1 failed\n", err.msg);
        return 1;
    }
    const char *full = getenv("KILN_TEST_FULL");
    int all_shapes = full && *full && strcmp(full, "0");
    static const int dims[] = {32, 64, 96, 128, 256};
    int rot = 0;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    uint64_t seed = 0x5eed;
    for (size_t pi = 0; pi < sizeof paths / sizeof paths[0]; pi++) {
        const path *pa = &paths[pi];
        result res = {{0}, {0}};
        for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++)
            for (int causal = 0; causal < 2; causal++) {
                int det = (int)((pi + di + (size_t)causal) & 1);
                /* the dkdv kernel (path=simt where the path says so), whose launch runs prep before it and
                 * convert (or, deterministic, dq) after it, as the template's description names them */
                char spec[256], name[600];
                snprintf(spec, sizeof spec, "attention_bwd kernel=dkdv dtype=%s head_dim=%d causal=%s%s%s", pa->dtype,
                         dims[di], causal ? "true" : "false", det ? " deterministic=true" : "",
                         !strcmp(pa->path, "simt") ? " path=simt" : "");
                int count = all_shapes ? (int)NSHAPES : 2;
                if (attn_case_sampled_out(pi, 2 * di + (size_t)causal)) { /* (the sanitizer build: one kernel in four) */
                    if (!all_shapes) rot += count;
                    seed += (uint64_t)count;
                    continue;
                }
                for (int s = 0; s < count; s++) {
                    const shape *sh = all_shapes ? &shapes[s] : &shapes[(rot++) % NSHAPES];
                    snprintf(name, sizeof name, "%s (sm_%d) b=%d hq=%d hkv=%d sq=%d sk=%d%s", spec, pa->sm, sh->batch,
                             sh->heads_q, sh->heads_kv, sh->seq_q, sh->seq_k, sh->bhsd ? " bhsd" : "");
                    TEST_BEGIN(name);
                    run_case(gen, emu, spec, pa, sh, seed++, s == 0, &res);
                    TEST_END();
                }
            }
        printf("%-12s max |error|: dq %.3g dk %.3g dv %.3g; worst error/tolerance: dq %.3f dk %.3f dv %.3f\n", pa->name,
               res.max_abs[0], res.max_abs[1], res.max_abs[2], res.worst[0], res.worst[1], res.worst[2]);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    printf("ran in %.1f s\n", (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9);
    kiln_emu_destroy(emu);
    kiln_gen_destroy(gen);
    return check_summary("attention bwd emu");
}
