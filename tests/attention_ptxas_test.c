/* tests/attention_ptxas_test.c - every attention variant assembles with ptxas for its SM with
 * 0 bytes of spills, lints clean, and holds no bf16 instruction below sm_80.
 * KILN_ATTN_TABLE=1 prints registers and shared memory per variant as a Markdown table. */
#include "matrix.h"

static int sms[16], nsms; /* matrix_sms() */
static const char *dtypes[] = {"f32", "f16", "bf16"};
static const int dims[] = {32, 64, 96, 128, 256};

static int add(matrix_variant *v, int n, int sm, const char *fmt, const char *a, int d, const char *causal) {
    snprintf(v[n].spec, sizeof v[n].spec, fmt, a, d, causal);
    v[n].sm = sm;
    return n + 1;
}

/* SM x dtype x head_dim x causal on the default path; the SIMT path forced for f16/bf16;
 * an f32 output from half-precision inputs. Split-KV decoding (splitkv=true): SM x dtype x
 * head_dim x causal and its combine kernel attention_combine for SM x out dtype x head_dim; without
 * KILN_TEST_FULL=1 a slice: sm_75/80/90 with causal on alternate variants, combine on sm_75/80
 * (sm_86/89 differ from sm_80 only in the pipeline depth shared memory allows). The window, softcap,
 * alibi and top-left causal keys (lib/attn_mask.lua): SM x dtype x head_dim with every key on (causal
 * bottom-right and top-left alternating), the SIMT path forced on sm_75/80, and split-KV with the keys
 * on sm_75/80/90 (every SM with KILN_TEST_FULL=1). head_dim between the table's widths (8, 40, 80,
 * 160, 200, 248: the next width's tiles, padded) on sm_75/80/90 in every dtype, split-KV and the
 * combine kernel at 40 and 200. */
static int attention_variants(matrix_variant *v) {
    int n = 0;
    for (int s = 0; s < nsms; s++)
        for (int t = 0; t < 3; t++)
            for (int d = 0; d < 5; d++)
                for (int c = 0; c < 2; c++) {
                    const char *causal = c ? "true" : "false";
                    n = add(v, n, sms[s], "attention dtype=%s head_dim=%d causal=%s", dtypes[t], dims[d], causal);
                    if (t > 0 && s <= 1)
                        n = add(v, n, sms[s], "attention dtype=%s head_dim=%d causal=%s path=simt", dtypes[t], dims[d],
                                causal);
                }
    for (int s = 0; s < nsms; s++)
        for (int t = 1; t < 3; t++) n = add(v, n, sms[s], "attention dtype=%s head_dim=%d causal=%s out=f32", dtypes[t], 128, "true");
    const char *full = getenv("KILN_TEST_FULL");
    int all = full && *full && strcmp(full, "0");
    for (int s = 0; s < nsms; s++)
        for (int t = 0; t < 3; t++)
            for (int d = 0; d < 5; d++)
                for (int c = 0; c < 2; c++) {
                    int some = sms[s] != 86 && sms[s] != 89;
                    if (all || (some && (s + t + d + c) % 2 == 0))
                        n = add(v, n, sms[s], "attention dtype=%s head_dim=%d causal=%s splitkv=true", dtypes[t], dims[d],
                                c ? "true" : "false");
                    if (c == 0 && (all || sms[s] <= 80)) {
                        snprintf(v[n].spec, sizeof v[n].spec, "attention_combine out=%s head_dim=%d", dtypes[t], dims[d]);
                        v[n++].sm = sms[s];
                    }
                }
    for (int s = 0; s < nsms; s++)
        for (int t = 0; t < 3; t++)
            for (int d = 0; d < 5; d++) {
                const char *causal = (s + t + d) % 2 ? "true" : "top_left";
                char keys[96];
                snprintf(keys, sizeof keys, "%s window=true softcap=true alibi=true", causal);
                n = add(v, n, sms[s], "attention dtype=%s head_dim=%d causal=%s", dtypes[t], dims[d], keys);
                if (t > 0 && s <= 1)
                    n = add(v, n, sms[s], "attention dtype=%s head_dim=%d causal=%s path=simt", dtypes[t], dims[d], keys);
                if (all || sms[s] == 75 || sms[s] == 80 || sms[s] == 90)
                    n = add(v, n, sms[s], "attention dtype=%s head_dim=%d causal=%s splitkv=true", dtypes[t], dims[d], keys);
            }
    static const int odd[] = {8, 40, 80, 160, 200, 248};
    for (int s = 0; s < nsms; s++)
        for (int t = 0; t < 3; t++)
            for (int d = 0; d < 6; d++) {
                if (!all && sms[s] != 75 && sms[s] != 80 && sms[s] != 90) continue;
                const char *causal = (s + t + d) % 2 ? "true" : "false";
                n = add(v, n, sms[s], "attention dtype=%s head_dim=%d causal=%s", dtypes[t], odd[d], causal);
                if (odd[d] == 40 || odd[d] == 200) {
                    n = add(v, n, sms[s], "attention dtype=%s head_dim=%d causal=%s splitkv=true", dtypes[t], odd[d], causal);
                    snprintf(v[n].spec, sizeof v[n].spec, "attention_combine out=%s head_dim=%d", dtypes[t], odd[d]);
                    v[n++].sm = sms[s];
                }
            }
    return n;
}

int main(void) {
    static matrix_variant vs[4096];
    nsms = matrix_sms(sms);
    int n = matrix_slice(vs, attention_variants(vs));
    kiln_error err = {0};
    kiln_gen *gen;
    if (kiln_gen_create(&gen, NULL, &err) != KILN_OK) {
        printf("cannot create generator: %s\nattention ptxas: 0 passed, 1 failed\n", err.msg);
        return 1;
    }
    int skipped = matrix_check(gen, vs, n);
    kiln_gen_destroy(gen);
    if (getenv("KILN_ATTN_TABLE")) {
        printf("| spec | sm | registers | static + dynamic shared memory (bytes) |\n|---|---|---|---|\n");
        for (int i = 0; i < n; i++)
            printf("| `%s` | %d | %d | %d + %u |\n", vs[i].spec + strlen("attention "), vs[i].sm, vs[i].registers,
                   vs[i].smem, vs[i].dynamic_smem);
    }
    printf("attention ptxas: %d passed, %d failed, %d skipped\n", check_passed, check_failed, skipped);
    return check_failed ? 1 : 0;
}
