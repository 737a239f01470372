/* tests/attention_wgmma_keys_test.c - the keys of the sm_90a attention forward (path=wgmma) beyond the dense problem
 * (templates/lib/attn_wgmma_keys.lua: varlen, split-KV, dropout) on the emulator against the float64 reference, the keys still refused
 * (each naming its rule), planted template bugs caught, ptxas sm_90a (0 spills, no C7508) and lint. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "kiln/emu_case.h"
#include "kiln/kiln.h"
#include "ptxas_util.h"
#include "sm90a_check.h"

#define MAXSEQ 8

static kiln_gen *gen;
static kiln_emu *emu;
static char dir[] = "/tmp/kiln-attn-wgmma-keys-XXXXXX";

typedef struct row {
    const char *spec;
    int heads_q, heads_kv;
    int nseq;                    /* varlen: the sequences */
    int lq[MAXSEQ], lk[MAXSEQ];  /* their query and key lengths */
    int used[MAXSEQ], has_used;  /* seqused_k */
    int left, right;             /* window=true */
    int twice;
    int seq_q, seq_k, batch, splits; /* the dense problem (not varlen); splits: splitkv=true */
    double dropout;                  /* dropout=true: the rate */
} row;

/* Runs one case on g (the built-in templates or a planted copy); *bad: values out of tolerance; err names a
 * failed run or the first bad value. */
static kiln_status run_case(kiln_gen *g, kiln_emu *e, const row *r, long *bad, kiln_error *err) {
    kiln_case_opts o = {.sm = SM90A, .seed = 11, .twice = r->twice};
    kiln_case_opts_set(&o, "rows", r->nseq ? 1 : r->seq_q); /* (varlen: the lengths come from the lists) */
    if (!r->nseq) kiln_case_opts_set(&o, "seq_k", r->seq_k), kiln_case_opts_set(&o, "batch", r->batch);
    if (r->splits) kiln_case_opts_set(&o, "splits", r->splits);
    if (r->dropout > 0) kiln_case_opts_set(&o, "dropout", r->dropout), kiln_case_opts_set(&o, "dropout_offset", 12345);
    kiln_case_opts_set(&o, "heads_q", r->heads_q);
    kiln_case_opts_set(&o, "heads_kv", r->heads_kv);
    if (r->nseq) {
        o.nvarlen = r->nseq, o.varlen_q = r->lq, o.varlen_k = r->lk;
        if (r->has_used) o.seqused_k = r->used;
    }
    sm90a_mask_opts(&o, r->spec, r->left, r->right, 5);
    return sm90a_run_case(g, e, r->spec, &o, bad, NULL, err);
}

/* varlen: sequences of 0, 1, odd and >64 rows packed back to back, so a 64-row box from one sequence reaches into
 * the next (keys masked by the sequence's own seq_k, rows not stored); key lengths apart from query lengths;
 * seqused_k; GQA; every mask key; both causal alignments; d128 and d256; run twice (thread orders). */
static const row ROWS[] = {
    {"attention dtype=bf16 head_dim=64 causal=true varlen=true path=wgmma", 4, 2, 4, {0, 1, 37, 130}, {5, 0, 64, 129}, {0}, 0, 0, 0, 1, 0, 0, 0, 0, 0},
    {"attention dtype=f16 head_dim=64 varlen=true path=wgmma", 2, 2, 3, {70, 3, 65}, {20, 100, 9}, {0}, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    {"attention dtype=f16 head_dim=128 causal=top_left varlen=true path=wgmma", 2, 1, 3, {33, 80, 1}, {90, 30, 70}, {17, 30, 0}, 1, 0, 0, 0, 0, 0, 0, 0, 0},
    {"attention dtype=bf16 head_dim=128 causal=true window=true softcap=true alibi=true varlen=true path=wgmma", 2, 1, 3,
     {17, 1, 100}, {20, 0, 140}, {0}, 0, 9, 3, 0, 0, 0, 0, 0, 0},
    {"attention dtype=bf16 head_dim=256 causal=true alibi=true varlen=true path=wgmma", 2, 2, 2, {70, 9}, {75, 60}, {0}, 0, 0, 0, 0, 0, 0, 0, 0, 0},
    /* split-KV: the partial O and lse per split, attention_combine after; more splits than key tiles (empty runs),
     * decoding (one query), the mask keys (the window's run of tiles cut in splits), d256 */
    {"attention dtype=bf16 head_dim=64 causal=true splitkv=true path=wgmma", 2, 1, .twice = 1, .seq_q = 70, .seq_k = 300, .batch = 1, .splits = 3},
    {"attention dtype=f16 head_dim=64 splitkv=true path=wgmma", 4, 1, .seq_q = 1, .seq_k = 200, .batch = 2, .splits = 8},
    {"attention dtype=f16 head_dim=128 causal=top_left window=true softcap=true alibi=true splitkv=true path=wgmma", 2, 2, .left = 70,
     .right = 5, .seq_q = 33, .seq_k = 260, .batch = 1, .splits = 4},
    {"attention dtype=bf16 head_dim=256 causal=true splitkv=true path=wgmma", 2, 1, .seq_q = 3, .seq_k = 150, .batch = 1, .splits = 2},
    /* dropout: the keep mask written by the kernel equals the float64 reference's Philox bits (the FA2 kernel's, same
     * seed and offset) exactly; O and lse vs float64; with every mask key, varlen (counted within the sequence), d128 */
    {"attention dtype=bf16 head_dim=64 causal=true dropout=true dropout_mask=true path=wgmma", 2, 1, .twice = 1, .seq_q = 70, .seq_k = 150,
     .batch = 2, .dropout = 0.2},
    {"attention dtype=f16 head_dim=128 causal=top_left window=true softcap=true alibi=true dropout=true dropout_mask=true path=wgmma", 2, 2,
     .left = 40, .right = 3, .seq_q = 65, .seq_k = 100, .batch = 1, .dropout = 0.3},
    {"attention dtype=f16 head_dim=64 causal=true varlen=true dropout=true dropout_mask=true path=wgmma", 2, 1, 3, {17, 1, 80}, {20, 0, 70},
     .dropout = 0.1},
    /* d256 with dropout: 32-key tiles (lib/attn_wgmma_tiles.lua), 4 Philox calls a tile */
    {"attention dtype=bf16 head_dim=256 causal=true dropout=true dropout_mask=true path=wgmma", 1, 1, .seq_q = 40, .seq_k = 100,
     .batch = 1, .dropout = 0.25},
};

static void test_emulator(void) {
    for (size_t i = 0; i < sizeof ROWS / sizeof ROWS[0]; i++) {
        const row *r = &ROWS[i];
        char name[400], lens[160] = "";
        int n = 0;
        for (int s = 0; s < r->nseq; s++) n += snprintf(lens + n, sizeof lens - (size_t)n, "%s%dx%d", s ? "," : "", r->lq[s], r->lk[s]);
        if (!r->nseq) snprintf(lens, sizeof lens, "seq %d x %d, batch %d, %d splits", r->seq_q, r->seq_k, r->batch, r->splits);
        snprintf(name, sizeof name, "%s sm_90a: %s%s, heads %d:%d%s vs float64", r->spec + 10, lens,
                 r->has_used ? " with seqused_k" : "", r->heads_q, r->heads_kv, r->twice ? ", run twice" : "");
        TEST_BEGIN(name);
        kiln_error err = {0};
        long bad = 0;
        kiln_status st = run_case(gen, emu, r, &bad, &err);
        CHECK(st == KILN_OK, "%s", err.msg);
        CHECK(st != KILN_OK || bad == 0, "%ld bad: %s", bad, err.msg);
        TEST_END();
    }
}

static void test_launch_and_refusals(void) {
    TEST_BEGIN("varlen on path=wgmma: the FA2 kernel's varlen launch plus maps over the packed tensors; the keys not built refused by name");
    kiln_error err = {0};
    kiln_module *m = sm90a_emit(gen, "attention dtype=bf16 head_dim=128 causal=true varlen=true path=wgmma", SM90A, &err);
    CHECK(m, "%s", err.msg);
    if (m) {
        const char *t = kiln_module_text(m);
        CHECK(strstr(t, "wgmma.mma_async") && strstr(t, "cp.async.bulk.tensor.3d"), "no wgmma / 3-d TMA");
        CHECK(strstr(t, "// kiln.meta tmap tm_k k 64 1 64 swizzle=128") && strstr(t, "// kiln.meta tmap tm_q q 64 1 64 swizzle=128"),
              "the maps' boxes over [total, heads, d]");
        CHECK(strstr(t, "cu_seqlens_q") && strstr(t, "cu_seqlens_k") && strstr(t, "seqused_k"), "varlen's tensors");
        kiln_module_free(m);
    }
    static const struct {
        const char *spec, *want;
    } refused[] = {
        {"attention dtype=bf16 head_dim=128 paged=true append=true path=wgmma", "append=true"},
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        kiln_error e2 = {0};
        kiln_module *r = sm90a_emit(gen, refused[i].spec, SM90A, &e2);
        CHECK(!r && strstr(e2.msg, refused[i].want) && strstr(e2.msg, "varlen"), "%s: %s", refused[i].spec, r ? "generated" : e2.msg);
        kiln_module_free(r);
    }
    TEST_END();
}

/* run_case as sm90a_planted runs it. */
static kiln_status run_row(kiln_gen *g, kiln_emu *e, const void *r, long *bad, kiln_error *err) {
    return run_case(g, e, (const row *)r, bad, err);
}

/* Planted bugs: a copy of the templates with one edit to file; each must fail its case. */
static void test_planted(void) {
    static const struct {
        const char *what, *file, *from, *to;
        row r;
    } bugs[] = {
        {"varlen: K/V boxes from the packed tensor's row 0, not the sequence's", "lib/attn_wgmma_keys.lua",
         "return { col, h, p.k_at + row }", "return { col, h, row }",
         {"attention dtype=f16 head_dim=64 varlen=true path=wgmma", 1, 1, 2, {20, 30}, {40, 50}, {0}, 0, 0, 0, 0, 0, 0, 0, 0, 0}},
        {"varlen: Q boxes from the packed tensor's row 0", "lib/attn_wgmma_keys.lua",
         "return { col, h, p.q_at + row }", "return { col, h, row }",
         {"attention dtype=f16 head_dim=64 varlen=true path=wgmma", 1, 1, 2, {20, 30}, {40, 50}, {0}, 0, 0, 0, 0, 0, 0, 0, 0, 0}},
        {"varlen: the next sequence's keys in a box's tail unmasked (the tail tile run whole)", "lib/attn_wgmma.lua",
         "local f1 = b:min(b:max(b:max(hi_first, 0) // BN - t0, f0), ntiles)", "local f1 = ntiles",
         /* two key tiles a sequence: the ping-pong loop runs tile 0 masked in its prologue, so the tail is tile 1 */
         {"attention dtype=bf16 head_dim=64 varlen=true path=wgmma", 1, 1, 2, {10, 10}, {100, 120}, {0}, 0, 0, 0, 0, 0, 0, 0, 0, 0}},
        {"varlen: lse at the dense index", "lib/attn_wgmma_keys.lua", "if spec.varlen then return p.rows(h) + b:i64(row) end", "",
         {"attention dtype=f16 head_dim=64 varlen=true path=wgmma", 2, 2, 2, {20, 30}, {40, 50}, {0}, 0, 0, 0, 0, 0, 0, 0, 0, 0}},
        {"split-KV: every split takes the first run of key tiles", "lib/attn_wgmma_keys.lua", "local lo = t0 + b:min(p.split * per, n)",
         "local lo = t0", {"attention dtype=f16 head_dim=64 splitkv=true path=wgmma", 1, 1, .seq_q = 20, .seq_k = 200, .batch = 1, .splits = 2}},
        {"split-KV: the partial lse in natural log (the combine weighs in base 2)", "lib/attn_wgmma_keys.lua",
         "m_use + b:lg2_approx(lsum))", "(m_use + b:lg2_approx(lsum)) * 0.6931471805599453)",
         {"attention dtype=f16 head_dim=64 splitkv=true path=wgmma", 1, 1, .seq_q = 20, .seq_k = 200, .batch = 1, .splits = 2}},
        {"dropout: the mask's keys one column apart from the fragment's (2q read as q)", "lib/attn_wgmma.lua",
         "keys.drop(b, spec, drop, h, rows[0], kv0 + q * 2,", "keys.drop(b, spec, drop, h, rows[0], kv0 + q,", {"attention dtype=f16 head_dim=64 dropout=true path=wgmma", 1, 1, .seq_q = 30, .seq_k = 40, .batch = 1,
         .dropout = 0.3}},
        {"dropout: O not scaled by 1 / (1 - p)", "lib/attn_wgmma.lua", "if drop then inv = inv * drop.rp end", "",
         {"attention dtype=f16 head_dim=64 dropout=true path=wgmma", 1, 1, .seq_q = 30, .seq_k = 40, .batch = 1, .dropout = 0.3}},
        {"split-KV: grid y's blocks a kv head counted over seq_q, not the group's G seq_q packed rows", "lib/attn_wgmma_gqa.lua",
         "local mblocks = (p.mrows + (rows - 1)) // rows", "local mblocks = (p.seq_q + (rows - 1)) // rows",
         {"attention dtype=bf16 head_dim=64 splitkv=true path=wgmma", 4, 1, .seq_q = 40, .seq_k = 130, .batch = 1, .splits = 3}},
    };
    char root[512];
    sm90a_root(__FILE__, root, sizeof root);
    for (size_t i = 0; i < sizeof bugs / sizeof bugs[0]; i++)
        sm90a_planted(dir, root, bugs[i].what, bugs[i].file, bugs[i].from, bugs[i].to, 0, run_row, &bugs[i].r, emu);
    sm90a_planted_done(dir);
}

/* The keys' variants lint clean (a sample; 126 under KILN_TEST_FULL=1, assembled by ptxas sm_90a there: 0 spills, no
 * C7508). */
static void test_ptxas(void) {
    static const char *const quick[] = {
        "attention dtype=bf16 head_dim=64 causal=true varlen=true path=wgmma",
        "attention dtype=f16 head_dim=128 causal=top_left window=true softcap=true alibi=true varlen=true path=wgmma",
        "attention dtype=bf16 head_dim=256 causal=true varlen=true path=wgmma",
        "attention dtype=f16 head_dim=128 causal=true splitkv=true path=wgmma",
        "attention dtype=bf16 head_dim=64 causal=top_left window=true softcap=true alibi=true splitkv=true path=wgmma",
        "attention dtype=bf16 head_dim=128 causal=true dropout=true path=wgmma",
    };
    static char full[160][200];
    static const char *ptrs[160];
    const char *const *specs = quick;
    int n = (int)(sizeof quick / sizeof quick[0]);
    if (getenv("KILN_TEST_FULL")) {
        static const char *dts[] = {"f16", "bf16"}, *causal[] = {"false", "true", "top_left"};
        static const char *keys[] = {"", " window=true softcap=true alibi=true", " alibi=true"}, *how[] = {"varlen", "splitkv", "dropout"};
        n = 0;
        for (int a = 0; a < 2; a++)
            for (int d = 64; d <= 256; d *= 2)
                for (int c = 0; c < 3; c++)
                    for (int k = 0; k < 3; k++)
                        for (int w = 0; w < 3; w++) {
                            if (d != 256 && k == 2) continue; /* alibi alone: d256's row */
                            snprintf(full[n], sizeof full[n], "attention dtype=%s head_dim=%d causal=%s%s %s=true path=wgmma", dts[a], d,
                                     causal[c], keys[k], how[w]);
                            ptrs[n] = full[n];
                            n++;
                        }
        specs = ptrs;
    }
    /* (the quick run lints; ptxas assembles these variants in attention_ptxas_test's sm_90a rows, so here only under
     * KILN_TEST_FULL=1, over the 126) */
    const char *ptxas = getenv("KILN_TEST_FULL") ? ptxas_path() : NULL;
    TEST_BEGIN("ptxas sm_90a (KILN_TEST_FULL=1): the wgmma attention's key variants assemble, 0 spills, no C7508; lint clean");
    sm90a_ptxas_check(gen, dir, specs, n, ptxas, NULL);
    TEST_END();
}

int main(void) {
    if (!sm90a_setup(dir, &gen, &emu, "attention_wgmma_keys")) return 1;
    test_emulator();
    test_launch_and_refusals();
    test_planted();
    test_ptxas();
    return sm90a_finish(dir, gen, emu, "attention_wgmma_keys");
}
