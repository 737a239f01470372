/* tests/attention_splitkv_test.c - split-KV decoding attention (attention splitkv=true + attention_combine)
 * on the CPU emulator: matches the float64 reference within the forward's error model, matches the
 * non-split kernel, and gives the same bits on a second run. KILN_TEST_FULL=1: every shape on every
 * (path, head_dim, causal); otherwise one shape each, rotating (every shape meets every path), the
 * comparison with the non-split kernel on the causal half, and five of the six paths. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "attn_case.h"
#include "check.h"
#include "attention.ref.h"
#include "kiln/kiln.h"

typedef struct path {
    const char *name;
    int sm;
    const char *dtype, *out, *path;
    kiln_dtype p_dtype; /* what P is rounded to before P V */
} path;

static const path paths[] = {
    {"mma bf16 sm_80", 80, "bf16", "bf16", "mma", KILN_BF16}, {"mma f16 sm_80 out=f32", 80, "f16", "f32", "mma", KILN_F16},
    {"auto f16 sm_75", 75, "f16", "f16", "auto", KILN_F16},    {"simt f32", 80, "f32", "f32", "auto", KILN_F32},
    {"simt bf16 sm_75 out=f16", 75, "bf16", "f16", "simt", KILN_F32},
    {"mma bf16 sm_120", 120, "bf16", "bf16", "mma", KILN_BF16},
    {"simt f16 sm_80", 80, "f16", "f16", "simt", KILN_F32}, /* KILN_TEST_FULL only */
};

typedef struct shape {
    int batch, heads_q, heads_kv, seq_q, seq_k, splits;
    const char *why;
} shape;

static const shape shapes[] = {
    {1, 4, 1, 1, 1000, 8, "MQA group 4, one query, 8 splits of 2 tiles"},
    {2, 8, 1, 3, 77, 5, "group 8, 3 queries, odd seq_k, more splits than key tiles"},
    {1, 2, 2, 16, 5, 3, "MHA, 16 queries, seq_k < one tile (causal: rows that see no key), empty splits"},
    {1, 8, 2, 1, 300, 1, "group 4, one split"},
    {1, 16, 2, 16, 129, 4, "group 8 x 16 queries = 128 packed rows (two row blocks)"},
    {1, 4, 1, 2, 1100, 19, "MQA group 4, long seq_k, 19 splits (one more than key tiles of 64)"},
};
#define NSHAPES (sizeof shapes / sizeof shapes[0])

/* inputs: kiln_attn_random, one seeded stream through the whole run */
static uint64_t seed = 0x2545f4914f6cdd1dull;

typedef struct stats {
    double worst[2], max_abs[2], vs_plain[2]; /* vs reference: o, lse; split vs non-split / tolerance */
} stats;

/* tolerance of the forward's error model for one value of o, by re-running the check on a copy
 * where the "reference" is the non-split result: kiln_attn_check does exactly that comparison. */
/* plain: the non-split kernel to compare with, or NULL. */
static void run_case(kiln_emu_kernel *split, kiln_emu_kernel *combine, kiln_emu_kernel *plain, const path *pa,
                     int head_dim, int causal, const shape *sh, int twice, stats *s) {
    kiln_attn_problem p = {0};
    kiln_dtype_parse(pa->dtype, &p.dtype);
    kiln_dtype_parse(pa->out, &p.out);
    p.head_dim = head_dim;
    p.causal = causal;
    p.batch = sh->batch;
    p.heads_q = sh->heads_q;
    p.heads_kv = sh->heads_kv;
    p.seq_q = sh->seq_q;
    p.seq_k = sh->seq_k;
    kiln_attn_default_strides(&p);
    size_t nq = kiln_attn_elems(&p, 'q'), nk = kiln_attn_elems(&p, 'k'), nv = kiln_attn_elems(&p, 'v');
    size_t no = kiln_attn_elems(&p, 'o'), nl = (size_t)p.batch * (size_t)p.heads_q * (size_t)p.seq_q;
    size_t ob = no * kiln_dtype_size(p.out);
    void *q = kiln_attn_random(p.dtype, nq, 1, &seed), *kk = kiln_attn_random(p.dtype, nk, 1, &seed);
    void *v = kiln_attn_random(p.dtype, nv, 1, &seed);
    void *o = malloc(ob), *o2 = malloc(ob), *o3 = malloc(ob);
    float *lse = malloc(nl * sizeof *lse), *lse2 = malloc(nl * sizeof *lse), *lse3 = malloc(nl * sizeof *lse);
    float *ws = malloc(kiln_attn_splitkv_workspace_floats(&p, sh->splits) * sizeof *ws);
    double *ro = malloc(no * sizeof *ro), *rl = malloc(nl * sizeof *rl), *po = malloc(no * sizeof *po),
           *pl = malloc(nl * sizeof *pl);
    kiln_error err = {0};
    kiln_status st = kiln_attn_run_splitkv(split, combine, &p, sh->splits, ws, o, lse, q, kk, v, twice, &err);
    CHECK(st == KILN_OK, "emulator: %s", err.msg);
    if (st == KILN_OK) {
        st = kiln_attn_reference(&p, q, kk, v, ro, rl, &err);
        CHECK(st == KILN_OK, "reference: %s", err.msg);
        kiln_attn_report r;
        kiln_attn_check(&p, pa->p_dtype, q, kk, v, o, lse, ro, rl, &r);
        CHECK(r.bad[0] == 0, "%ld bad o values; first: %s", r.bad[0], r.first[0]);
        CHECK(r.bad[1] == 0, "%ld bad lse values; first: %s", r.bad[1], r.first[1]);
        for (int i = 0; i < 2; i++) {
            if (r.worst[i] > s->worst[i]) s->worst[i] = r.worst[i];
            if (r.max_abs[i] > s->max_abs[i]) s->max_abs[i] = r.max_abs[i];
        }
        /* deterministic: a second run gives the same bits (the first shape of each kernel) */
        if (twice) st = kiln_attn_run_splitkv(split, combine, &p, sh->splits, ws, o2, lse2, q, kk, v, 0, &err);
        if (twice)
            CHECK(st == KILN_OK && !memcmp(o, o2, ob) && !memcmp(lse, lse2, nl * sizeof *lse),
                  "second run differs (or failed: %s)", st == KILN_OK ? "" : err.msg);
        /* the non-split kernel as the reference, same error model: both are within tol of float64, and
         * both round O once, so |split - plain| <= 2 tol (measured figures printed); non-finite
         * values (lse = +inf of rows that see no key) must be identical */
        st = plain ? kiln_attn_run(plain, &p, o3, lse3, q, kk, v, 0, &err) : KILN_OK;
        CHECK(st == KILN_OK, "non-split kernel: %s", err.msg);
        if (plain && st == KILN_OK) {
            for (size_t i = 0; i < no; i++) po[i] = kiln_emu_value_get(p.out, o3, i);
            for (size_t i = 0; i < nl; i++) pl[i] = lse3[i];
            long nonfinite = 0;
            for (size_t i = 0; i < nl; i++)
                if ((!isfinite(pl[i]) || !isfinite(lse[i])) && !((double)lse[i] == pl[i])) nonfinite++;
            for (size_t i = 0; i < no; i++)
                if ((!isfinite(po[i]) || !isfinite(kiln_emu_value_get(p.out, o, i))) && !(kiln_emu_value_get(p.out, o, i) == po[i]))
                    nonfinite++;
            kiln_attn_check(&p, pa->p_dtype, q, kk, v, o, lse, po, pl, &r);
            CHECK(nonfinite == 0, "split vs non-split: %ld non-finite values differ", nonfinite);
            CHECK(r.worst[0] <= 2.0, "split vs non-split: o apart by %.3f x tolerance (bound 2); first over 1: %s",
                  r.worst[0], r.first[0]);
            CHECK(r.worst[1] <= 2.0, "split vs non-split: lse apart by %.3f x tolerance (bound 2); first over 1: %s",
                  r.worst[1], r.first[1]);
            for (int i = 0; i < 2; i++)
                if (r.worst[i] > s->vs_plain[i]) s->vs_plain[i] = r.worst[i];
        }
    }
    free(q), free(kk), free(v), free(o), free(o2), free(o3), free(lse), free(lse2), free(lse3), free(ws);
    free(ro), free(rl), free(po), free(pl);
}

int main(void) {
    kiln_error err = {0};
    kiln_gen *gen;
    kiln_emu *emu;
    if (kiln_gen_create(&gen, NULL, &err) != KILN_OK || kiln_emu_create(&emu, &err) != KILN_OK) {
        printf("setup failed: %s\nattention splitkv: 0 passed, 1 failed\n", err.msg);
        return 1;
    }
    const char *full_env = getenv("KILN_TEST_FULL");
    int full = full_env && *full_env && strcmp(full_env, "0");
    static const int dims[] = {32, 64, 96, 128, 256};
    int rot = 0;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    size_t npaths = sizeof paths / sizeof paths[0] - (full ? 0 : 1);
    for (size_t pi = 0; pi < npaths; pi++) {
        const path *pa = &paths[pi];
        stats s = {{0, 0}, {0, 0}, {0, 0}};
        for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++)
            for (int causal = 0; causal < 2; causal++) {
                char spec[256], cspec[128], pspec[256], name[512];
                if (attn_case_sampled_out(pi, 2 * di + (size_t)causal)) { /* (the sanitizer build: one kernel in four) */
                    if (!full) rot++;
                    continue;
                }
                snprintf(spec, sizeof spec, "attention dtype=%s out=%s head_dim=%d causal=%s path=%s splitkv=true",
                         pa->dtype, pa->out, dims[di], causal ? "true" : "false", pa->path);
                snprintf(pspec, sizeof pspec, "attention dtype=%s out=%s head_dim=%d causal=%s path=%s", pa->dtype,
                         pa->out, dims[di], causal ? "true" : "false", pa->path);
                snprintf(cspec, sizeof cspec, "attention_combine out=%s head_dim=%d", pa->out, dims[di]);
                kiln_emu_kernel *k = NULL, *c = NULL, *pl = NULL;
                kiln_status st = kiln_emu_load(emu, gen, spec, pa->sm, &k, &err);
                if (st == KILN_OK) st = kiln_emu_load(emu, gen, cspec, pa->sm, &c, &err);
                /* the non-split comparison: every kernel with KILN_TEST_FULL, else the causal ones */
                if (st == KILN_OK && (full || causal)) st = kiln_emu_load(emu, gen, pspec, pa->sm, &pl, &err);
                int n = full ? (int)NSHAPES : 1;
                for (int si = 0; si < n; si++) {
                    const shape *sh = full ? &shapes[si] : &shapes[(rot++) % NSHAPES];
                    snprintf(name, sizeof name, "%s (sm_%d) b=%d hq=%d hkv=%d sq=%d sk=%d splits=%d: %s", spec, pa->sm,
                             sh->batch, sh->heads_q, sh->heads_kv, sh->seq_q, sh->seq_k, sh->splits, sh->why);
                    TEST_BEGIN(name);
                    CHECK(st == KILN_OK, "load: %s", err.msg);
                    if (st == KILN_OK) run_case(k, c, pl, pa, dims[di], causal, sh, si == 0, &s);
                    TEST_END();
                }
                if (k) kiln_emu_kernel_free(k);
                if (c) kiln_emu_kernel_free(c);
                if (pl) kiln_emu_kernel_free(pl);
            }
        printf("%-24s max |error|: o %.3g, lse %.3g; worst error/tolerance: o %.3f, lse %.3f; "
               "split vs non-split / tolerance: o %.3f, lse %.3f\n",
               pa->name, s.max_abs[0], s.max_abs[1], s.worst[0], s.worst[1], s.vs_plain[0], s.vs_plain[1]);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    printf("ran in %.1f s%s\n", (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9,
           full ? " (KILN_TEST_FULL)" : "");
    kiln_emu_destroy(emu);
    kiln_gen_destroy(gen);
    return check_summary("attention splitkv");
}
