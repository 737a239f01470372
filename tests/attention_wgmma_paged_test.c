/* tests/attention_wgmma_paged_test.c - the paged KV cache on the sm_90a attention forward (path=wgmma,
 * templates/lib/attn_wgmma_paged.lua): the emulator against the float64 reference over shuffled pages of 16..256 rows,
 * leftpad, cache_batch_idx, ragged and empty cache lengths, GQA, plain and split-KV; the launch description (the FA2
 * paged kernel's plus q's map); the keys refused by name; planted template bugs caught; ptxas sm_90a under
 * KILN_TEST_FULL=1. */
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
static char dir[] = "/tmp/kiln-attn-wgmma-paged-XXXXXX";

typedef struct row {
    const char *spec;
    int heads_q, heads_kv;
    int seq_q, seq_k, batch; /* seq_k: the cache's capacity (entry 0 full, entry 1 empty, the others drawn) */
    int page, leftpad, batch_idx, splits, twice;
    int left, right;         /* window=true */
} row;

/* Runs one case on g (the built-in templates or a planted copy); *bad: values out of tolerance; err names a failed run
 * or the first bad value. */
static kiln_status run_case(kiln_gen *g, kiln_emu *e, const row *r, long *bad, kiln_error *err) {
    kiln_case_opts o = {.sm = SM90A, .seed = 5, .twice = r->twice};
    kiln_case_opts_set(&o, "rows", r->seq_q);
    kiln_case_opts_set(&o, "seq_k", r->seq_k);
    kiln_case_opts_set(&o, "batch", r->batch);
    kiln_case_opts_set(&o, "heads_q", r->heads_q);
    kiln_case_opts_set(&o, "heads_kv", r->heads_kv);
    kiln_case_opts_set(&o, "page_size", r->page);
    if (r->leftpad) kiln_case_opts_set(&o, "leftpad", 1);
    if (r->batch_idx) kiln_case_opts_set(&o, "batch_idx", 1);
    if (r->splits) kiln_case_opts_set(&o, "splits", r->splits);
    sm90a_mask_opts(&o, r->spec, r->left, r->right, 5);
    return sm90a_run_case(g, e, r->spec, &o, bad, NULL, err);
}

/* Pages of 16, 32, 64 and 256 rows (key tiles of 64 read from 4, 2, 1 pages or a quarter of one); leftpad (a third of
 * each length: tiles start mid-page); cache_batch_idx; GQA; both causal alignments; the mask keys; d64/d128/d256;
 * split-KV decoding (one query, GQA 4:1) and prefill against the cache; run twice (thread orders). */
static const row ROWS[] = {
    {"attention dtype=bf16 head_dim=64 causal=true paged=true path=wgmma", 4, 2, .seq_q = 20, .seq_k = 150, .batch = 4, .page = 16,
     .leftpad = 1, .batch_idx = 1, .twice = 1},
    {"attention dtype=f16 head_dim=64 causal=top_left paged=true path=wgmma", 2, 2, .seq_q = 70, .seq_k = 130, .batch = 3, .page = 64},
    {"attention dtype=f16 head_dim=128 causal=true paged=true splitkv=true path=wgmma", 8, 2, .seq_q = 1, .seq_k = 300, .batch = 3,
     .page = 32, .leftpad = 1, .splits = 3},
    {"attention dtype=bf16 head_dim=64 paged=true splitkv=true path=wgmma", 4, 1, .seq_q = 1, .seq_k = 500, .batch = 3, .page = 256,
     .leftpad = 1, .batch_idx = 1, .splits = 2, .twice = 1},
    {"attention dtype=bf16 head_dim=128 causal=true window=true softcap=true alibi=true paged=true path=wgmma", 4, 1, .seq_q = 12,
     .seq_k = 120, .batch = 3, .page = 16, .leftpad = 1, .left = 30, .right = 0},
    {"attention dtype=f16 head_dim=256 causal=true alibi=true paged=true path=wgmma", 2, 1, .seq_q = 9, .seq_k = 100, .batch = 3,
     .page = 32, .leftpad = 1},
};

static void test_emulator(void) {
    for (size_t i = 0; i < sizeof ROWS / sizeof ROWS[0]; i++) {
        const row *r = &ROWS[i];
        char name[400];
        snprintf(name, sizeof name, "%s sm_90a: seq %d x cache %d, batch %d, heads %d:%d, pages of %d%s%s%s%s vs float64", r->spec + 10,
                 r->seq_q, r->seq_k, r->batch, r->heads_q, r->heads_kv, r->page, r->leftpad ? ", leftpad" : "",
                 r->batch_idx ? ", batch_idx" : "", r->splits ? ", split-KV" : "", r->twice ? ", run twice" : "");
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
    TEST_BEGIN("paged on path=wgmma: the FA2 paged kernel's launch plus q's map (none over the pages), cp.async from the pages");
    kiln_error err = {0};
    kiln_module *m = sm90a_emit(gen, "attention dtype=bf16 head_dim=128 causal=true paged=true path=wgmma", SM90A, &err);
    CHECK(m, "%s", err.msg);
    if (m) {
        const char *t = kiln_module_text(m);
        CHECK(strstr(t, "wgmma.mma_async") && strstr(t, "cp.async.bulk.tensor.4d") && strstr(t, "cp.async.cg.shared.global"),
              "no wgmma / q's TMA / the pages' cp.async");
        CHECK(strstr(t, "// kiln.meta tmap tm_q q 1 64 1 64 swizzle=128") && !strstr(t, "tmap tm_k") && !strstr(t, "tmap tm_v"),
              "q's map only");
        CHECK(strstr(t, "// kiln.meta tensor k in num_blocks page_size heads_kv 128") && strstr(t, "// kiln.meta tensor block_table in batch max_blocks") &&
                  strstr(t, "// kiln.meta tensor cache_leftpad in? batch") && strstr(t, "// kiln.meta scalar key_tile =64"),
              "the FA2 paged launch");
        kiln_module_free(m);
    }
    static const sm90a_refusal refused[] = {
        {"attention dtype=bf16 head_dim=128 paged=true append=true path=wgmma", SM90A, "path=wgmma is not built for append=true (the FA2 kernel writes"},
        {"attention dtype=bf16 head_dim=128 paged=true append=true rotary=neox path=wgmma", SM90A, "is not built for rotary=neox"},
        {"attention dtype=bf16 head_dim=64 paged=true varlen=true path=wgmma", SM90A, "paged=true with varlen=true is not built"},
        {"attention dtype=bf16 head_dim=64 paged=true path=wgmma", 90, "path=wgmma runs on sm_90a only"},
    };
    sm90a_check_refusals(gen, refused, sizeof refused / sizeof refused[0]);
    TEST_END();
}

/* run_case as sm90a_planted runs it. */
static kiln_status run_row(kiln_gen *g, kiln_emu *e, const void *r, long *bad, kiln_error *err) {
    return run_case(g, e, (const row *)r, bad, err);
}

#define F "lib/attn_wgmma_paged.lua"
#define PAGE_AT "local page = b:i64(b:load(p.paged_row + b:i64(pos // p.page_size), { pred = live }))\n    local row = b:i64(pos % p.page_size)"

/* Planted bugs: a copy of the templates with one edit; each must fail its case. */
static void test_planted(void) {
    static const row pg16 = {"attention dtype=f16 head_dim=64 causal=true paged=true path=wgmma", 2, 1, .seq_q = 10, .seq_k = 100, .batch = 3,
                             .page = 16, .leftpad = 1};
    static const row split = {"attention dtype=bf16 head_dim=128 paged=true splitkv=true path=wgmma", 4, 2, .seq_q = 1, .seq_k = 200, .batch = 3,
                              .page = 32, .splits = 2};
    static const row many = {"attention dtype=bf16 head_dim=64 paged=true path=wgmma", 1, 1, .seq_q = 5, .seq_k = 320, .batch = 2, .page = 16,
                             .twice = 1};
    static const struct {
        const char *what, *file, *from, *to;
        const row *r;
    } bugs[] = {
        {"a wrong page index (the next block-table entry)", F, "b:i64(pos // p.page_size)", "b:i64(pos // p.page_size + 1)", &pg16},
        {"a tile read as one box crossing pages (rows on from its first key's page)", F, PAGE_AT,
         "local first = (a.t0 + k) * BN + p.paged_lp\n    local page = b:i64(b:load(p.paged_row + b:i64(first // p.page_size), { pred = live }))\n"
         "    local row = b:i64(first % p.page_size + r)", &pg16},
        {"leftpad dropped (keys from cache position 0)", F, "local pos = b:select(live, key, 0) + p.paged_lp", "local pos = b:select(live, key, 0)", &pg16},
        {"the rows copied without the 128B swizzle's XOR", F, "local y8 = (c0 ~ (r % 8)) * 8", "local y8 = c0 * 8", &split},
        {"the query head's pages read, not its KV head's (GQA)", "lib/attn_wgmma.lua", "full = full, empty = empty, hkv = hkv })",
         "full = full, empty = empty, hkv = h })", &pg16}, /* (split-KV's grid y is the kv head: lib/attn_wgmma_gqa.lua) */
        {"the full barrier counting one producer thread, not 128", F, "return spec.paged and 128 or 1", "return 1", &split},
        {"no cp.async wait before the arrival", F, "    b:cp_async_wait(0)\n", "", &pg16},
        {"the producer not waiting for a free stage", F, "b:if_(b:ge(k, a.ns), function() b:mbarrier_wait(", "b:if_(b:lt(k, 0), function() b:mbarrier_wait(",
         &many},
    };
    char root[512];
    sm90a_root(__FILE__, root, sizeof root);
    for (size_t i = 0; i < sizeof bugs / sizeof bugs[0]; i++)
        sm90a_planted(dir, root, bugs[i].what, bugs[i].file, bugs[i].from, bugs[i].to, 0, run_row, bugs[i].r, emu);
    sm90a_planted_done(dir);
}

/* The paged variants lint clean (a sample; under KILN_TEST_FULL=1 every one the generator builds, assembled by ptxas
 * sm_90a: 0 spills, no C7508). attention_ptxas_test's sm_90a rows assemble the quick ones. */
static void test_ptxas(void) {
    static const char *const quick[] = {
        "attention dtype=bf16 head_dim=64 causal=true paged=true path=wgmma",
        "attention dtype=f16 head_dim=128 causal=true paged=true splitkv=true path=wgmma",
        "attention dtype=bf16 head_dim=256 causal=true alibi=true paged=true path=wgmma",
    };
    static char full[200][200];
    static const char *ptrs[200];
    const char *const *specs = quick;
    int n = (int)(sizeof quick / sizeof quick[0]);
    if (getenv("KILN_TEST_FULL")) {
        static const char *dts[] = {"f16", "bf16"}, *causal[] = {"false", "true", "top_left"};
        static const char *keys[] = {"", " window=true", " softcap=true", " alibi=true", " window=true softcap=true alibi=true"};
        n = 0;
        for (int a = 0; a < 2; a++)
            for (int d = 64; d <= 256; d *= 2)
                for (int c = 0; c < 3; c++)
                    for (int k = 0; k < 5; k++)
                        for (int s = 0; s < 2; s++) {
                            if (d == 256 && k != 0 && k != 3) continue; /* d256: not with window/softcap */
                            snprintf(full[n], sizeof full[n], "attention dtype=%s head_dim=%d causal=%s%s paged=true%s path=wgmma", dts[a], d,
                                     causal[c], keys[k], s ? " splitkv=true" : "");
                            ptrs[n] = full[n];
                            n++;
                        }
        specs = ptrs;
    }
    const char *ptxas = getenv("KILN_TEST_FULL") ? ptxas_path() : NULL;
    TEST_BEGIN("ptxas sm_90a (KILN_TEST_FULL=1): the paged variants assemble, 0 spills, no C7508; lint clean");
    sm90a_ptxas_check(gen, dir, specs, n, ptxas, NULL);
    TEST_END();
}

int main(void) {
    if (!sm90a_setup(dir, &gen, &emu, "attention_wgmma_paged")) return 1;
    test_emulator();
    test_launch_and_refusals();
    test_planted();
    test_ptxas();
    return sm90a_finish(dir, gen, emu, "attention_wgmma_paged");
}
