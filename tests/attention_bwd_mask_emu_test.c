/* tests/attention_bwd_mask_emu_test.c - the attention backward's window, softcap, alibi and
 * top-left causal keys on every path (mma sm_80/sm_75, SIMT; sm_75 f16 at head_dim 192 and 256 too), atomic and
 * deterministic sequences, on the CPU emulator through the registry's case runner against the float64 gradients (dQ, dK, dV) of
 * templates/attention_bwd.ref.c,
 * with FlashAttention-2's edge cases (a window narrower than a tile, rows that see no key: zero
 * gradients, softcap with causal, alibi with GQA). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn_case.h"
#include "check.h"
#include "kiln/emu_case.h"
#include "kiln/kiln.h"

typedef struct path {
    const char *name;
    int sm;
    const char *dtype, *path;
    kiln_dtype p_dtype;
} path;

static const path paths[] = {
    {"mma f16 sm_80", 80, "f16", "auto", KILN_F16}, {"mma bf16 sm_80", 80, "bf16", "auto", KILN_BF16},
    {"mma f16 sm_75", 75, "f16", "auto", KILN_F16}, {"simt f32 sm_80", 80, "f32", "auto", KILN_F32},
    {"simt bf16 sm_75 (forced)", 75, "bf16", "simt", KILN_F32},
};

typedef struct mcase {
    const char *name;
    int causal, window, left, right;
    float softcap;
    int alibi; /* 0 off, 1 [heads_q], 2 [batch, heads_q] */
    int batch, heads_q, heads_kv, seq_q, seq_k;
    double amplitude;
    float scale;
} mcase;

static const mcase cases[] = {
    {"window narrower than a tile, causal", 1, 1, 3, 0, 0, 0, 1, 2, 1, 70, 80, 1, 0},
    {"window, seq_q > seq_k (rows see no key: zero gradients)", 0, 1, 6, 2, 0, 0, 1, 2, 2, 60, 25, 1, 0},
    {"window both sides, keys past several query tiles", 0, 1, 20, 9, 0, 0, 1, 1, 1, 100, 110, 1, 0},
    {"softcap with causal, large scores", 1, 0, 0, 0, 4, 0, 1, 2, 1, 41, 39, 3, 1},
    {"alibi with GQA, per-batch slopes", 0, 0, 0, 0, 0, 2, 2, 4, 2, 23, 37, 1, 0},
    {"top_left causal, seq_q > seq_k", 2, 0, 0, 0, 0, 0, 1, 2, 1, 50, 30, 1, 0},
    {"top_left causal, seq_q < seq_k", 2, 0, 0, 0, 0, 0, 1, 2, 2, 30, 50, 1, 0},
    {"everything: window + causal + softcap + alibi + GQA", 1, 1, 12, 0, 10, 1, 1, 4, 2, 45, 52, 2, 0},
};
#define NCASES (sizeof cases / sizeof cases[0])

static const char *causal_name(int c) { return c == 2 ? "top_left" : c ? "true" : "false"; }

typedef struct result {
    double worst[3];
} result;

/* One case through the family's reference and the case runner: the dkdv kernel's spec, whose launch
 * runs prep before it and convert (deterministic: dq) after it; dq, dk, dv against the float64
 * gradients; rows that see no key (lse = +inf) must get a dQ of exactly 0. */
static void run_case(kiln_emu *emu, kiln_gen *gen, const path *pa, const mcase *mc, int d, int det, uint64_t seed,
                     result *res) {
    char spec[256];
    snprintf(spec, sizeof spec, "attention_bwd kernel=dkdv dtype=%s head_dim=%d causal=%s%s%s%s%s%s", pa->dtype, d,
             causal_name(mc->causal), mc->window ? " window=true" : "", mc->softcap > 0 ? " softcap=true" : "",
             mc->alibi ? " alibi=true" : "", det ? " deterministic=true" : "", strcmp(pa->path, "auto") ? " path=simt" : "");
    kiln_case_opts o = attn_case_opts(pa->sm, seed, 1, mc->batch, mc->heads_q, mc->heads_kv, mc->seq_q, mc->seq_k,
                                      mc->amplitude, mc->scale, pa->p_dtype);
    if (mc->window) kiln_case_opts_set(&o, "window_left", mc->left), kiln_case_opts_set(&o, "window_right", mc->right);
    if (mc->softcap > 0) kiln_case_opts_set(&o, "softcap", mc->softcap);
    if (mc->alibi == 2) kiln_case_opts_set(&o, "alibi_batch", 1);
    kiln_error err = {0};
    kiln_case *c = NULL;
    kiln_status st = kiln_case_create(&c, gen, emu, spec, &o, &err);
    CHECK(st == KILN_OK, "case %s: %s", spec, err.msg);
    if (st == KILN_OK) {
        st = kiln_case_run(c, &err);
        CHECK(st == KILN_OK, "emulator, %s: %s", spec, err.msg);
    }
    if (st == KILN_OK) {
        kiln_case_check(c);
        CHECK(kiln_case_noutputs(c) == 3, "%d outputs, want dq, dk, dv", kiln_case_noutputs(c));
        for (int t = 0; t < kiln_case_noutputs(c) && t < 3; t++) {
            const kiln_case_output *out = kiln_case_output_at(c, t);
            CHECK(out->bad == 0, "%s: %ld bad %s values; first: %s", spec, out->bad, out->name, out->first);
            if (out->worst > res->worst[t]) res->worst[t] = out->worst;
        }
        /* rows that see no key: their dQ is exactly 0 (dq [batch, seq_q, heads_q, d], lse [batch, heads_q, seq_q]) */
        void *dq, *lse;
        size_t dq_bytes, lse_bytes;
        kiln_dtype grad;
        kiln_dtype_parse(pa->dtype, &grad);
        CHECK(kiln_case_tensor(c, "dq", &dq, &dq_bytes) == 0 && kiln_case_tensor(c, "lse", &lse, &lse_bytes) == 0,
              "the case has no dq or lse");
        long nonzero = 0, empty = 0;
        for (int b = 0; b < mc->batch; b++)
            for (int h = 0; h < mc->heads_q; h++)
                for (int i = 0; i < mc->seq_q; i++)
                    if (isinf(((const float *)lse)[((size_t)b * (size_t)mc->heads_q + (size_t)h) * (size_t)mc->seq_q + (size_t)i])) {
                        empty++;
                        for (int e = 0; e < d; e++)
                            nonzero += kiln_emu_value_get(grad, dq, (((size_t)b * (size_t)mc->seq_q + (size_t)i) * (size_t)mc->heads_q +
                                                                     (size_t)h) * (size_t)d + (size_t)e) != 0;
                    }
        CHECK(nonzero == 0, "%ld dQ values of the %ld rows that see no key are not 0", nonzero, empty);
    }
    kiln_case_free(c);
}

int main(void) {
    kiln_error err = {0};
    kiln_gen *gen;
    kiln_emu *emu;
    if (kiln_gen_create(&gen, NULL, &err) != KILN_OK || kiln_emu_create(&emu, &err) != KILN_OK) {
        printf("setup failed: %s\nattention bwd mask emu: 0 passed, 1 failed\n", err.msg);
        return 1;
    }
    static const int dims[] = {64, 32, 128, 96};
    int rot = 0;
    uint64_t seed = 0x5eedbeef;
    for (size_t pi = 0; pi < sizeof paths / sizeof paths[0]; pi++) {
        result res = {{0}};
        for (size_t ci = 0; ci < NCASES; ci++) {
            int d = dims[(rot++) % 4], det = (int)((pi + ci) & 1);
            char name[400];
            snprintf(name, sizeof name, "%s: %s d=%d%s", paths[pi].name, cases[ci].name, d, det ? " deterministic" : "");
            TEST_BEGIN(name);
            run_case(emu, gen, &paths[pi], &cases[ci], d, det, seed++, &res);
            TEST_END();
        }
        printf("%-16s worst error/tolerance: dq %.3f dk %.3f dv %.3f\n", paths[pi].name, res.worst[0], res.worst[1],
               res.worst[2]);
        fflush(stdout);
    }
    /* head_dim 256 and the padded 192 on sm_75's m16n8k8 (f16: two warps a 16-key or 16-row group, each half of the
     * columns, lib/attn_bwd_mma.lua M.csplit): every key with GQA, rows that see no key, top-left causal; atomic and
     * deterministic */
    static const struct { size_t ci; int d, det; } wide[] = {{7, 256, 0}, {7, 192, 1}, {1, 256, 1}, {6, 192, 0}};
    result res = {{0}};
    for (size_t w = 0; w < sizeof wide / sizeof wide[0]; w++) {
        char name[400];
        snprintf(name, sizeof name, "%s: %s d=%d%s", paths[2].name, cases[wide[w].ci].name, wide[w].d,
                 wide[w].det ? " deterministic" : "");
        TEST_BEGIN(name);
        run_case(emu, gen, &paths[2], &cases[wide[w].ci], wide[w].d, wide[w].det, seed++, &res);
        TEST_END();
    }
    printf("%-16s worst error/tolerance at d192/d256: dq %.3f dk %.3f dv %.3f\n", paths[2].name, res.worst[0],
           res.worst[1], res.worst[2]);
    kiln_emu_destroy(emu);
    kiln_gen_destroy(gen);
    return check_summary("attention bwd mask emu");
}
