/* tests/attention_bwd_ptxas_test.c - every attention backward kernel assembles with ptxas for its
 * SM with 0 bytes of spills, lints clean, and holds no bf16 instruction below sm_80 (tests/matrix.h).
 * Default: SM x dtype x head_dim for the causal dkdv, the causal dq on sm_75/80/89/90, the
 * deterministic dkdv on sm_80, prep and convert at the edges (sm_75/90, head_dim 32/256), path=simt
 * for f16/bf16 (dkdv on sm_80/90, dq on sm_80); the window, softcap, alibi and top-left causal keys
 * all on: dkdv on every SM, dtype and head_dim, dq and the deterministic dkdv on sm_75/80/90;
 * KILN_TEST_FULL=1 runs every kernel on every SM, dtype and head_dim, causal or not. KILN_ATTN_TABLE=1 prints registers and shared memory per variant. */
#include "matrix.h"

static int sms[16], nsms; /* matrix_sms() */
static const char *dtypes[] = {"f32", "f16", "bf16"};
static const int dims[] = {32, 64, 96, 128, 256};

static int add(matrix_variant *v, int n, int sm, const char *kernel, const char *dt, int d, const char *extra) {
    snprintf(v[n].spec, sizeof v[n].spec, "attention_bwd kernel=%s dtype=%s head_dim=%d%s", kernel, dt, d, extra);
    v[n].sm = sm;
    return n + 1;
}

static int variants(matrix_variant *v, int full) {
    int n = 0;
    for (int s = 0; s < nsms; s++)
        for (int t = 0; t < 3; t++)
            for (int d = 0; d < 5; d++) {
                int edge_d = d == 0 || d == 4, edge_sm = s == 0 || s == 4;
                n = add(v, n, sms[s], "dkdv", dtypes[t], dims[d], " causal=true");
                if (full || s != 2) n = add(v, n, sms[s], "dq", dtypes[t], dims[d], " causal=true");
                if (full || (edge_sm && edge_d)) {
                    n = add(v, n, sms[s], "prep", dtypes[t], dims[d], "");
                    n = add(v, n, sms[s], "convert", dtypes[t], dims[d], "");
                }
                if (full || s == 1) n = add(v, n, sms[s], "dkdv", dtypes[t], dims[d], " deterministic=true");
                if (t > 0 && d < 4 && (full || s == 1 || s == 4)) { /* SIMT forced where tensor cores exist */
                    n = add(v, n, sms[s], "dkdv", dtypes[t], dims[d], " causal=true path=simt");
                    if (full || s == 1) n = add(v, n, sms[s], "dq", dtypes[t], dims[d], " causal=true path=simt");
                }
                if (full) {
                    n = add(v, n, sms[s], "dkdv", dtypes[t], dims[d], "");
                    n = add(v, n, sms[s], "dq", dtypes[t], dims[d], "");
                }
            }
    /* every mask key on (lib/attn_mask.lua): the kernels with the most parameters and mask work */
    for (int s = 0; s < nsms; s++)
        for (int t = 0; t < 3; t++)
            for (int d = 0; d < 5; d++) {
                const char *keys = (s + t + d) % 2 ? " causal=true window=true softcap=true alibi=true"
                                                   : " causal=top_left window=true softcap=true alibi=true";
                n = add(v, n, sms[s], "dkdv", dtypes[t], dims[d], keys);
                if (full || sms[s] == 75 || sms[s] == 80 || sms[s] == 90) {
                    char det[128];
                    snprintf(det, sizeof det, "%s deterministic=true", keys);
                    n = add(v, n, sms[s], "dq", dtypes[t], dims[d], keys);
                    n = add(v, n, sms[s], "dkdv", dtypes[t], dims[d], det);
                }
            }
    /* mixed dtypes: f32 O/dO and gradients from bf16 inputs */
    for (int s = 0; s < nsms; s++) n = add(v, n, sms[s], "dkdv", "bf16", 128, " out=f32 grad=f32 causal=true");
    return n;
}

int main(void) {
    static matrix_variant vs[4096];
    nsms = matrix_sms(sms);
    int n = matrix_slice(vs, variants(vs, matrix_full()));
    kiln_error err = {0};
    kiln_gen *gen;
    if (kiln_gen_create(&gen, NULL, &err) != KILN_OK) {
        printf("cannot create generator: %s\nattention bwd ptxas: 0 passed, 1 failed\n", err.msg);
        return 1;
    }
    int skipped = matrix_check(gen, vs, n);
    kiln_gen_destroy(gen);
    if (getenv("KILN_ATTN_TABLE")) {
        printf("| spec | sm | registers | static + dynamic shared memory (bytes) |\n|---|---|---|---|\n");
        for (int i = 0; i < n; i++)
            printf("| `%s` | %d | %d | %d + %u |\n", vs[i].spec + strlen("attention_bwd "), vs[i].sm, vs[i].registers,
                   vs[i].smem, vs[i].dynamic_smem);
    }
    printf("attention bwd ptxas: %d passed, %d failed, %d skipped\n", check_passed, check_failed, skipped);
    return check_failed ? 1 : 0;
}
