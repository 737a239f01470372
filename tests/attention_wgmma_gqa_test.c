/* tests/attention_wgmma_gqa_test.c - GQA packing of the sm_90a split-KV forward (path=wgmma splitkv=true,
 * templates/lib/attn_wgmma_gqa.lua): decoding shapes on the emulator against the float64 reference (attention_combine
 * after), planted template bugs caught, ptxas sm_90a (0 spills, no C7508) and lint over the split-KV variants. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "kiln/emu_case.h"
#include "kiln/kiln.h"
#include "ptxas_util.h"
#include "sm90a_check.h"

static kiln_gen *gen;
static kiln_emu *emu;
static char dir[] = "/tmp/kiln-attn-wgmma-gqa-XXXXXX";

typedef struct row {
    const char *spec;
    int heads_q, heads_kv; /* the group G = heads_q / heads_kv */
    int seq_q, seq_k, batch, splits, twice;
    int left, right; /* window=true */
    int page;        /* paged=true: page_size (leftpad on) */
} row;

/* Runs one case on g (the built-in templates or a planted copy); *bad: values out of tolerance; err names a failed run
 * or the first bad value. */
static kiln_status run_case(kiln_gen *g, kiln_emu *e, const row *r, long *bad, kiln_error *err) {
    kiln_case_opts o = {.sm = SM90A, .seed = 7, .twice = r->twice};
    kiln_case_opts_set(&o, "rows", r->seq_q);
    kiln_case_opts_set(&o, "seq_k", r->seq_k);
    kiln_case_opts_set(&o, "batch", r->batch);
    kiln_case_opts_set(&o, "heads_q", r->heads_q);
    kiln_case_opts_set(&o, "heads_kv", r->heads_kv);
    kiln_case_opts_set(&o, "splits", r->splits);
    if (r->page) kiln_case_opts_set(&o, "page_size", r->page), kiln_case_opts_set(&o, "leftpad", 1);
    sm90a_mask_opts(&o, r->spec, r->left, r->right, 5);
    return sm90a_run_case(g, e, r->spec, &o, bad, NULL, err);
}

/* Decoding (seq_q 1 and 2) at G = 1, 2, 4, 8 and an odd 3 (rows g and g + 8 of a thread then differ in head), odd
 * seq_k, 2-4 splits combined; causal (both alignments), window, softcap, ALiBi (a slope per row); 160 packed rows
 * (two blocks, heads changing inside one: the key range over every query position); d64/d128/d256; paged KV. */
static const row ROWS[] = {
    {"attention dtype=bf16 head_dim=64 splitkv=true path=wgmma", 2, 2, .seq_q = 1, .seq_k = 131, .batch = 2, .splits = 2},
    {"attention dtype=f16 head_dim=64 causal=true splitkv=true path=wgmma", 4, 2, .seq_q = 2, .seq_k = 77, .batch = 1, .splits = 3},
    {"attention dtype=bf16 head_dim=128 causal=true splitkv=true path=wgmma", 4, 1, .seq_q = 1, .seq_k = 201, .batch = 1, .splits = 2,
     .twice = 1},
    {"attention dtype=f16 head_dim=64 causal=true window=true alibi=true splitkv=true path=wgmma", 8, 1, .seq_q = 2, .seq_k = 150,
     .batch = 1, .splits = 4, .left = 40, .right = 0},
    {"attention dtype=bf16 head_dim=256 causal=true alibi=true splitkv=true path=wgmma", 16, 2, .seq_q = 1, .seq_k = 99, .batch = 1,
     .splits = 2},
    {"attention dtype=f16 head_dim=64 causal=top_left window=true softcap=true alibi=true splitkv=true path=wgmma", 4, 1, .seq_q = 40,
     .seq_k = 100, .batch = 1, .splits = 2, .left = 50, .right = 3},
    {"attention dtype=bf16 head_dim=64 causal=true alibi=true splitkv=true path=wgmma", 6, 2, .seq_q = 2, .seq_k = 65, .batch = 1,
     .splits = 2},
    {"attention dtype=f16 head_dim=128 causal=true alibi=true paged=true splitkv=true path=wgmma", 8, 1, .seq_q = 1, .seq_k = 150,
     .batch = 2, .splits = 2, .page = 16},
};

static void test_emulator(void) {
    for (size_t i = 0; i < sizeof ROWS / sizeof ROWS[0]; i++) {
        const row *r = &ROWS[i];
        char name[400];
        snprintf(name, sizeof name, "%s sm_90a: seq %d x %d, batch %d, heads %d:%d (G %d), %d splits%s%s vs float64", r->spec + 10,
                 r->seq_q, r->seq_k, r->batch, r->heads_q, r->heads_kv, r->heads_q / r->heads_kv, r->splits,
                 r->page ? ", pages of 16 with leftpad" : "", r->twice ? ", run twice" : "");
        TEST_BEGIN(name);
        kiln_error err = {0};
        long bad = 0;
        kiln_status st = run_case(gen, emu, r, &bad, &err);
        CHECK(st == KILN_OK, "%s", err.msg);
        CHECK(st != KILN_OK || bad == 0, "%ld bad: %s", bad, err.msg);
        TEST_END();
    }
}

/* The launch: the FA2 split kernel's grid (x the split, y kv heads x packed-row blocks), Q staged by cp.async. */
static void test_launch(void) {
    TEST_BEGIN("split-KV on path=wgmma: the FA2 split launch's grid over kv heads x packed rows, Q copied by the producer (cp.async)");
    kiln_error err = {0};
    kiln_module *m = sm90a_emit(gen, "attention dtype=bf16 head_dim=128 causal=true splitkv=true path=wgmma", SM90A, &err);
    CHECK(m, "%s", err.msg);
    if (m) {
        const char *t = kiln_module_text(m);
        CHECK(strstr(t, "// kiln.meta problem splits heads_kv*cdiv(heads_q/heads_kv*seq_q,128) batch"), "the grid");
        CHECK(strstr(t, "cp.async.cg.shared.global") || strstr(t, "cp.async.ca.shared.global"), "no cp.async for Q");
        CHECK(strstr(t, "wgmma.mma_async"), "no wgmma");
        kiln_module_free(m);
    }
    TEST_END();
}

/* run_case as sm90a_planted runs it. */
static kiln_status run_row(kiln_gen *g, kiln_emu *e, const void *r, long *bad, kiln_error *err) {
    return run_case(g, e, (const row *)r, bad, err);
}

/* Planted bugs: a copy of the templates with one edit to file; each must fail its case. */
static void test_planted(void) {
    static const row g8 = {"attention dtype=f16 head_dim=64 causal=true alibi=true splitkv=true path=wgmma", 8, 1, .seq_q = 2, .seq_k = 70,
                           .batch = 1, .splits = 2};
    static const row g4 = {"attention dtype=f16 head_dim=64 causal=true splitkv=true path=wgmma", 4, 1, .seq_q = 40, .seq_k = 130,
                           .batch = 1, .splits = 2};
    static const row g2 = {"attention dtype=bf16 head_dim=64 splitkv=true path=wgmma", 4, 2, .seq_q = 1, .seq_k = 70, .batch = 1,
                           .splits = 2};
    static const struct {
        const char *what, *file, *from, *to;
        const row *r;
    } bugs[] = {
        {"every packed row the group's first head", "lib/attn_wgmma_gqa.lua", "return pr - hl * p.seq_q, p.hkv * p.group + hl",
         "return pr - hl * p.seq_q, p.hkv * p.group", &g8},
        {"ALiBi: one slope for a thread's two rows (rows g and g + 8 hold different heads)", "lib/attn_wgmma.lua",
         "slope[1] = heads[1] == heads[0] and slope[0] or mask.slope(m, heads[1])", "slope[1] = slope[0]", &g8},
        {"the split epilogue's slots from the kv head's index, not its group's first query head", "lib/attn_wgmma_gqa.lua",
         "  return p.hkv * p.group\n", "  return p.hkv\n", &g2},
        {"rows past seq_q not stored (live by seq_q, not G seq_q)", "lib/attn_wgmma.lua", "local live = b:lt(row, p.mrows or p.seq_q)",
         "local live = b:lt(row, p.seq_q)", &g8},
        {"Q staged without the 128B swizzle's XOR", "lib/attn_wgmma_gqa.lua", "(y ~ c) * 8", "c * 8", &g8},
        {"Q read before its copies landed (no cp.async wait)", "lib/attn_wgmma_gqa.lua", "  b:cp_async_wait(0)\n  b:fence_proxy_async()",
         "  b:fence_proxy_async()", &g8},
        {"a block spanning heads taken as one run of query positions (the causal key range cut)", "lib/attn_wgmma_gqa.lua",
         "return b:select(one, lo - h0 * p.seq_q, 0), b:select(one, hi - h1 * p.seq_q, p.seq_q - 1)",
         "return lo - h0 * p.seq_q, hi - h1 * p.seq_q", &g4},
    };
    char root[512];
    sm90a_root(__FILE__, root, sizeof root);
    for (size_t i = 0; i < sizeof bugs / sizeof bugs[0]; i++)
        sm90a_planted(dir, root, bugs[i].what, bugs[i].file, bugs[i].from, bugs[i].to, 0, run_row, bugs[i].r, emu);
    sm90a_planted_done(dir);
}

/* ptxas sm_90a over the split-KV variants: in the default run the two d256 ones attention_ptxas_test's quick rows
 * leave out (where holding a head a row spilled 44-60 bytes), every one under KILN_TEST_FULL=1 (dtype x head_dim x
 * causal x mask keys, dense and paged). */
static void test_ptxas(void) {
    static const char *const quick[] = {
        "attention dtype=bf16 head_dim=256 causal=true alibi=true splitkv=true path=wgmma",
        "attention dtype=bf16 head_dim=256 causal=true paged=true splitkv=true path=wgmma",
    };
    static char full[160][200];
    static const char *ptrs[160];
    const char *const *specs = quick;
    int n = (int)(sizeof quick / sizeof quick[0]);
    if (getenv("KILN_TEST_FULL")) {
        static const char *dts[] = {"f16", "bf16"}, *causal[] = {"false", "true", "top_left"};
        static const char *keys[] = {"", " window=true", " softcap=true alibi=true", " window=true softcap=true alibi=true"};
        n = 0;
        for (int a = 0; a < 2; a++)
            for (int d = 64; d <= 256; d *= 2)
                for (int c = 0; c < 3; c++)
                    for (int k = 0; k < 4; k++)
                        for (int pg = 0; pg < 2; pg++) {
                            snprintf(full[n], sizeof full[n], "attention dtype=%s head_dim=%d causal=%s%s%s splitkv=true path=wgmma",
                                     dts[a], d, causal[c], keys[k], pg ? " paged=true" : "");
                            ptrs[n] = full[n];
                            n++;
                        }
        specs = ptrs;
    }
    char name[200];
    snprintf(name, sizeof name, "ptxas sm_90a: %d split-KV variants (GQA-packed) assemble, 0 spills, no C7508; lint clean", n);
    TEST_BEGIN(name);
    sm90a_ptxas_check(gen, dir, specs, n, ptxas_path(), NULL);
    TEST_END();
}

int main(void) {
    if (!sm90a_setup(dir, &gen, &emu, "attention_wgmma_gqa")) return 1;
    test_emulator();
    test_launch();
    test_planted();
    test_ptxas();
    return sm90a_finish(dir, gen, emu, "attention_wgmma_gqa");
}
