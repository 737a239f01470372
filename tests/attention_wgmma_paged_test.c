/* tests/attention_wgmma_paged_test.c - the paged KV cache on the sm_90a attention forward (path=wgmma,
 * templates/lib/attn_wgmma_paged.lua): the emulator against the float64 reference over shuffled pages of 16..256 rows,
 * leftpad, cache_batch_idx, ragged and empty cache lengths, GQA, plain and split-KV, on the dense kernel's tiles (128
 * keys at d128, 32 at d256 with window or softcap, else 64) and at the padded head dims (d32, d96, 40-56, 72-120,
 * 136-248); the launch description (the FA2 paged kernel's plus q's map, key_tile the tile's keys); the producer's
 * profile (0 bank conflicts, its copies per tile); the keys refused by name; planted template bugs caught; ptxas
 * sm_90a under KILN_TEST_FULL=1. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "kiln/emu_case.h"
#include "kiln/emu_profile.h"
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
 * or the first bad value; the case goes to *keep when asked (may be NULL) and it ran. */
static kiln_status run_kept(kiln_gen *g, kiln_emu *e, const row *r, long *bad, kiln_case **keep, kiln_error *err) {
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
    return sm90a_run_case(g, e, r->spec, &o, bad, keep, err);
}

static kiln_status run_case(kiln_gen *g, kiln_emu *e, const row *r, long *bad, kiln_error *err) {
    return run_kept(g, e, r, bad, NULL, err);
}

/* Pages of 16, 32, 64 and 256 rows (a tile read from up to 8 pages, or a part of one); leftpad (a third of each
 * length: tiles start mid-page); cache_batch_idx; GQA; both causal alignments; the mask keys; split-KV decoding (one
 * query, GQA up to 8:2) and prefill against the cache; run twice (thread orders). Tiles: d64 and d256 64 keys, d128
 * 128 (two passes of the producer's 64 rows), d256 with window or softcap 32 (four threads a row); padded dims: d32 and
 * d40 on d64's tile (d40's last Q K^T k-step reads 8 zero-filled columns), d96 on d128's, d160 and d248 on d256's. */
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
    /* 128-key tiles at d128: 8 pages of 16 a tile, a tile's two halves 256-row pages apart */
    {"attention dtype=bf16 head_dim=128 causal=top_left paged=true path=wgmma", 4, 2, .seq_q = 40, .seq_k = 300, .batch = 3,
     .page = 16, .leftpad = 1, .batch_idx = 1, .twice = 1},
    {"attention dtype=f16 head_dim=128 causal=true window=true paged=true splitkv=true path=wgmma", 8, 2, .seq_q = 1, .seq_k = 600,
     .batch = 3, .page = 256, .leftpad = 1, .splits = 2, .left = 200, .right = 0},
    /* 32-key tiles at d256 (window, softcap): two of them a page of 64, half of one a page of 16 */
    {"attention dtype=bf16 head_dim=256 causal=true window=true softcap=true paged=true path=wgmma", 2, 1, .seq_q = 10, .seq_k = 130,
     .batch = 3, .page = 16, .leftpad = 1, .batch_idx = 1, .left = 45, .right = 0},
    {"attention dtype=f16 head_dim=256 softcap=true paged=true splitkv=true path=wgmma", 4, 2, .seq_q = 1, .seq_k = 200, .batch = 3,
     .page = 64, .splits = 3},
    /* padded head dims */
    {"attention dtype=f16 head_dim=32 causal=true paged=true path=wgmma", 2, 1, .seq_q = 20, .seq_k = 150, .batch = 3, .page = 16,
     .leftpad = 1},
    {"attention dtype=bf16 head_dim=40 causal=true window=true softcap=true alibi=true paged=true path=wgmma", 2, 2, .seq_q = 12,
     .seq_k = 100, .batch = 3, .page = 32, .leftpad = 1, .left = 25, .right = 3},
    {"attention dtype=bf16 head_dim=96 causal=true alibi=true paged=true splitkv=true path=wgmma", 8, 2, .seq_q = 1, .seq_k = 260,
     .batch = 3, .page = 64, .leftpad = 1, .batch_idx = 1, .splits = 2, .twice = 1},
    {"attention dtype=bf16 head_dim=160 causal=true paged=true splitkv=true path=wgmma", 4, 1, .seq_q = 2, .seq_k = 300, .batch = 3,
     .page = 256, .leftpad = 1, .splits = 2},
    {"attention dtype=f16 head_dim=248 causal=true window=true paged=true path=wgmma", 2, 1, .seq_q = 7, .seq_k = 90, .batch = 3,
     .page = 32, .leftpad = 1, .left = 30, .right = 0},
};

static void test_emulator(void) {
    for (size_t i = 0; i < sizeof ROWS / sizeof ROWS[0]; i++) {
        if (!check_san_keeps(i, 4)) continue; /* (the sanitizer build: one in four, check_san_keeps) */
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

/* The launch of each tile: the FA2 paged kernel's description (k and v as pages of head_dim / v_head_dim columns, the
 * tables) plus q's map, key_tile the kernel's keys a tile (the page-size rule follows the tile). */
static void test_launch_and_refusals(void) {
    TEST_BEGIN("paged on path=wgmma: the FA2 paged kernel's launch plus q's map (none over the pages), key_tile the tile's keys, cp.async from the pages");
    static const struct {
        const char *spec, *k, *tile;
    } launches[] = {
        {"attention dtype=bf16 head_dim=128 causal=true paged=true path=wgmma", "num_blocks page_size heads_kv 128", "=128"},
        {"attention dtype=bf16 head_dim=64 causal=true paged=true splitkv=true path=wgmma", "num_blocks page_size heads_kv 64", "=64"},
        {"attention dtype=f16 head_dim=256 window=true paged=true path=wgmma", "num_blocks page_size heads_kv 256", "=32"},
        {"attention dtype=f16 head_dim=96 paged=true path=wgmma", "num_blocks page_size heads_kv 96", "=128"},
        {"attention dtype=bf16 head_dim=40 causal=true paged=true path=wgmma", "num_blocks page_size heads_kv 40", "=64"},
    };
    for (size_t i = 0; i < sizeof launches / sizeof launches[0]; i++) {
        kiln_error err = {0};
        kiln_module *m = sm90a_emit(gen, launches[i].spec, SM90A, &err);
        CHECK(m, "%s: %s", launches[i].spec, err.msg);
        if (!m) continue;
        const char *t = kiln_module_text(m);
        char want[200], tile[100];
        snprintf(want, sizeof want, "// kiln.meta tensor k in %s align=16\n", launches[i].k);
        snprintf(tile, sizeof tile, "// kiln.meta scalar key_tile %s\n", launches[i].tile);
        CHECK(strstr(t, "wgmma.mma_async") && (strstr(launches[i].spec, "splitkv") || strstr(t, "cp.async.bulk.tensor.4d")) &&
                  strstr(t, "cp.async.cg.shared.global"),
              "%s: no wgmma / q's TMA (split-KV: the producer's copies) / the pages' cp.async", launches[i].spec);
        CHECK(strstr(t, "// kiln.meta tmap tm_q q 1 64 1 64 swizzle=128") && !strstr(t, "tmap tm_k") && !strstr(t, "tmap tm_v"),
              "%s: q's map only", launches[i].spec);
        CHECK(strstr(t, want) && strstr(t, "// kiln.meta tensor block_table in batch max_blocks") &&
                  strstr(t, "// kiln.meta tensor cache_leftpad in? batch") && strstr(t, tile),
              "%s: the FA2 paged launch with '%s' and '%s'", launches[i].spec, want, tile);
        kiln_module_free(m);
    }
    /* the page-size rule is the tile's: 192 fits 64-key tiles, not d128's 128; 48 not d256's 32 with a window */
    static const row bad_pages[] = {
        {"attention dtype=bf16 head_dim=128 paged=true path=wgmma", 2, 1, .seq_q = 4, .seq_k = 400, .batch = 2, .page = 192},
        {"attention dtype=bf16 head_dim=256 window=true paged=true path=wgmma", 2, 1, .seq_q = 4, .seq_k = 100, .batch = 2, .page = 48,
         .left = 10, .right = 0},
    };
    static const char *const why[] = {"page size 192 does not fit this kernel's 128-key tiles; valid: 16..128 dividing 128, or a multiple of 128",
                                      "page size 48 does not fit this kernel's 32-key tiles"};
    for (int i = 0; i < 2; i++) {
        kiln_error err = {0};
        long bad = 0;
        kiln_status st = run_case(gen, emu, &bad_pages[i], &bad, &err);
        CHECK(st != KILN_OK && strstr(err.msg, why[i]), "%s pages of %d: %s", bad_pages[i].spec, bad_pages[i].page,
              st == KILN_OK ? "ran" : err.msg);
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

/* The producer per tile shape (one block, batch 1, the cache full, 2 tiles): its copies land with 0 bank conflicts (the
 * quarter-warp's rows have distinct (r % 8) / tpr) and a tile costs what lib/attn_wgmma_paged.lua's header says: per
 * producer warp BN / 8 cp.async per 64-column panel (K and V), one block-table load per pass of 64 rows (or 32);
 * besides them each of the 12 warps loads its cache_seqlens entry once. Run on the planted templates too. */
static const struct paged_prof {
    row r;
    int bn, panels;
} PROF[] = {
    {{"attention dtype=bf16 head_dim=128 paged=true path=wgmma", 1, 1, .seq_q = 64, .seq_k = 256, .batch = 1, .page = 16}, 128, 2},
    {{"attention dtype=f16 head_dim=256 window=true paged=true path=wgmma", 1, 1, .seq_q = 64, .seq_k = 64, .batch = 1, .page = 16,
      .left = 100, .right = 100}, 32, 4},
    {{"attention dtype=bf16 head_dim=64 paged=true path=wgmma", 1, 1, .seq_q = 64, .seq_k = 128, .batch = 1, .page = 32}, 64, 1},
    {{"attention dtype=bf16 head_dim=96 paged=true path=wgmma", 1, 1, .seq_q = 64, .seq_k = 256, .batch = 1, .page = 64}, 128, 2},
};

/* One PROF row on g: 0 when its counts hold, else the count of checks that failed (err names the first). */
static int profile_row(kiln_gen *g, const struct paged_prof *pr, kiln_error *err) {
    kiln_emu *pe = NULL;
    kiln_case *c = NULL;
    long bad = 0;
    int fails = 0;
    kiln_status st = kiln_emu_create(&pe, err);
    if (st == KILN_OK) kiln_emu_set_profile(pe, 1), st = run_kept(g, pe, &pr->r, &bad, &c, err);
    kiln_emu_profile p;
    if (st == KILN_OK && bad == 0 && c && kiln_emu_profile_get(kiln_case_kernel(c), &p, err) == KILN_OK) {
        const unsigned long long tiles = 2, warps = 4, passes = pr->bn > 64 ? (unsigned long long)pr->bn / 64 : 1;
        const unsigned long long cp = warps * tiles * (unsigned long long)(pr->bn / 8 * pr->panels), ld = 12 + warps * tiles * passes;
        if (p.smem[KILN_SMEM_CP_ASYNC].conflicts || p.inst[KILN_PROF_CP_ASYNC] != cp || p.inst[KILN_PROF_LD_GLOBAL] != ld) {
            fails++;
            snprintf(err->msg, sizeof err->msg, "%s: cp.async %llu (want %llu), %llu bank conflicts (want 0), ld.global %llu (want %llu)",
                     pr->r.spec, (unsigned long long)p.inst[KILN_PROF_CP_ASYNC], cp, (unsigned long long)p.smem[KILN_SMEM_CP_ASYNC].conflicts,
                     (unsigned long long)p.inst[KILN_PROF_LD_GLOBAL], ld);
        }
    } else {
        fails++;
        if (st == KILN_OK && bad) snprintf(err->msg, sizeof err->msg, "%s: %ld values out of tolerance", pr->r.spec, bad);
    }
    kiln_case_free(c);
    if (pe) kiln_emu_destroy(pe);
    return fails;
}

static void test_profile(void) {
    TEST_BEGIN("the producer's profile per tile (128, 32, 64 keys; d96): 0 bank conflicts, BN / 8 cp.async a panel, a table load a pass");
    for (size_t i = 0; i < sizeof PROF / sizeof PROF[0]; i++) {
        kiln_error err = {0};
        CHECK(profile_row(gen, &PROF[i], &err) == 0, "%s", err.msg);
    }
    TEST_END();
}

/* run_case as sm90a_planted runs it. */
static kiln_status run_row(kiln_gen *g, kiln_emu *e, const void *r, long *bad, kiln_error *err) {
    return run_case(g, e, (const row *)r, bad, err);
}

#define F "lib/attn_wgmma_paged.lua"
#define PAGE_AT "local page = b:i64(b:load(p.paged_row + b:i64(pos // p.page_size), { pred = live }))\n      local row = b:i64(pos % p.page_size)"

/* profile_row on every PROF row, as sm90a_planted runs a case: *bad the failed rows. */
static kiln_status run_profiles(kiln_gen *g, kiln_emu *e, const void *unused, long *bad, kiln_error *err) {
    (void)e, (void)unused;
    *bad = 0;
    for (size_t i = 0; i < sizeof PROF / sizeof PROF[0]; i++) *bad += profile_row(g, &PROF[i], err);
    return KILN_OK;
}

/* Planted bugs: a copy of the templates with one edit; each must fail its case. */
static void test_planted(void) {
    static const row pg16 = {"attention dtype=f16 head_dim=64 causal=true paged=true path=wgmma", 2, 1, .seq_q = 10, .seq_k = 100, .batch = 3,
                             .page = 16, .leftpad = 1};
    static const row split = {"attention dtype=bf16 head_dim=128 paged=true splitkv=true path=wgmma", 4, 2, .seq_q = 1, .seq_k = 200, .batch = 3,
                              .page = 32, .splits = 2};
    static const row many = {"attention dtype=bf16 head_dim=64 paged=true path=wgmma", 1, 1, .seq_q = 5, .seq_k = 320, .batch = 2, .page = 16,
                             .twice = 1};
    static const row d128 = {"attention dtype=bf16 head_dim=128 causal=true paged=true path=wgmma", 2, 1, .seq_q = 8, .seq_k = 300, .batch = 3,
                             .page = 16, .leftpad = 1};
    static const row d256w = {"attention dtype=f16 head_dim=256 causal=true window=true paged=true path=wgmma", 2, 1, .seq_q = 6, .seq_k = 100,
                              .batch = 3, .page = 16, .leftpad = 1, .left = 40, .right = 0};
    static const row d40 = {"attention dtype=bf16 head_dim=40 causal=true paged=true path=wgmma", 2, 1, .seq_q = 9, .seq_k = 90, .batch = 3,
                            .page = 32, .leftpad = 1};
    static const struct {
        const char *what, *file, *from, *to;
        const row *r;
    } bugs[] = {
        {"a wrong page index (the next block-table entry)", F, "b:i64(pos // p.page_size)", "b:i64(pos // p.page_size + 1)", &pg16},
        {"a tile read as one box crossing pages (rows on from its first key's page)", F, PAGE_AT,
         "local first = (a.t0 + k) * BN + pass * R + p.paged_lp\n      local page = b:i64(b:load(p.paged_row + b:i64(first // p.page_size), { pred = live }))\n"
         "      local row = b:i64(first % p.page_size + r)", &pg16},
        {"leftpad dropped (keys from cache position 0)", F, "local pos = b:select(live, key, 0) + p.paged_lp", "local pos = b:select(live, key, 0)", &pg16},
        {"the rows copied without the 128B swizzle's XOR", F, "local y8 = (c0 ~ (r % 8)) * 8", "local y8 = c0 * 8", &split},
        {"the query head's pages read, not its KV head's (GQA)", "lib/attn_wgmma.lua", "full = full, empty = empty, hkv = hkv })",
         "full = full, empty = empty, hkv = h })", &pg16}, /* (split-KV's grid y is the kv head: lib/attn_wgmma_gqa.lua) */
        {"the full barrier counting one producer thread, not 128", F, "return spec.paged and 128 or 1", "return 1", &split},
        {"no cp.async wait before the arrival", F, "    b:cp_async_wait(0)\n", "", &pg16},
        {"the producer not waiting for a free stage", F, "b:if_(b:ge(k, a.ns), function() b:mbarrier_wait(", "b:if_(b:lt(k, 0), function() b:mbarrier_wait(",
         &many},
        /* the tiles: 128 keys in two passes, 32 keys four threads a row */
        {"a 128-key tile's second pass reading the first pass's keys", F, "local key = (a.t0 + k) * BN + (pass * R + r)",
         "local key = (a.t0 + k) * BN + r", &d128},
        {"a 128-key tile's second pass written over the first's rows", F, "local rowbase = (pass * R + r) * 64", "local rowbase = r * 64",
         &d128},
        {"a 32-key tile's panels laid out 64 rows apart", F, "local KPANEL = BN * 64", "local KPANEL = 64 * 64", &d256w},
        {"a 32-key tile's rows read two threads a row (half of each row left out)", F, "local tpr = 128 // R", "local tpr = 128 // R\n  R = 64",
         &d256w},
        /* the padded dims */
        {"K's chunk past head_dim in Q K^T's last k-step left unwritten, not zero-filled (d40)", F,
         "b:cp_async(dst, src, { pred = left >= tpr and live or b:and_(live, b:lt(c0, left)) })",
         "if left >= tpr then b:cp_async(dst, src, { pred = live }) else b:if_(b:lt(c0, left), function() b:cp_async(dst, src, { pred = live }) end) end",
         &d40},
        /* the consumers' key count from the shared slot (their bounds derived after setmaxnreg) */
        {"the consumers' seq_k slot never written", "lib/attn_wgmma.lua", "    wpaged.store(b, spec, p, kslot)\n", "", &split},
        {"a chunk group holding the row's last real chunk zero-filled whole", F, "b:and_(live, b:lt(c0, left))", "b:and_(live, b:lt(c0, 0))", &d40},
    };
    char root[512];
    sm90a_root(__FILE__, root, sizeof root);
    for (size_t i = 0; i < sizeof bugs / sizeof bugs[0]; i++)
        sm90a_planted(dir, root, bugs[i].what, bugs[i].file, bugs[i].from, bugs[i].to, 0, run_row, bugs[i].r, emu);
    /* the profile's checks: the rows of a quarter-warp in order (r = u), as the first 64-key producer had them */
    sm90a_planted(dir, root, "the copies' rows in thread order (bank conflicts)", F, "local r = (u // 8) * 8 + (u % n) * tpr + (u // n) % tpr",
                  "local r = u", 0, run_profiles, NULL, emu);
    sm90a_planted_done(dir);
}

/* The paged variants lint clean (a sample; under KILN_TEST_FULL=1 every tile shape and head dim crossed with each mask
 * key alone and all three, causal three ways, plain and split-KV, f16 and bf16: 540, assembled by ptxas sm_90a: 0 spills,
 * no C7508). attention_ptxas_test's sm_90a rows assemble the quick ones and its full matrix 276 with quality rows. */
static void test_ptxas(void) {
    static const char *const quick[] = {
        "attention dtype=bf16 head_dim=64 causal=true paged=true path=wgmma",
        "attention dtype=f16 head_dim=128 causal=true paged=true splitkv=true path=wgmma",
        "attention dtype=bf16 head_dim=256 causal=true alibi=true paged=true path=wgmma",
        "attention dtype=bf16 head_dim=248 causal=true window=true paged=true splitkv=true path=wgmma",
        "attention dtype=f16 head_dim=40 causal=top_left softcap=true paged=true path=wgmma",
    };
    static char full[600][200];
    static const char *ptrs[600];
    const char *const *specs = quick;
    int n = (int)(sizeof quick / sizeof quick[0]);
    if (getenv("KILN_TEST_FULL")) {
        static const char *dts[] = {"f16", "bf16"}, *causal[] = {"false", "true", "top_left"};
        static const char *keys[] = {"", " window=true", " softcap=true", " alibi=true", " window=true softcap=true alibi=true"};
        static const int dims[] = {64, 128, 256, 32, 40, 96, 112, 160, 248};
        n = 0;
        for (int a = 0; a < 2; a++)
            for (int d = 0; d < 9; d++)
                for (int c = 0; c < 3; c++)
                    for (int k = 0; k < 5; k++)
                        for (int s = 0; s < 2; s++) {
                            snprintf(full[n], sizeof full[n], "attention dtype=%s head_dim=%d causal=%s%s paged=true%s path=wgmma", dts[a],
                                     dims[d], causal[c], keys[k], s ? " splitkv=true" : "");
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
    test_profile();
    test_planted();
    test_ptxas();
    return sm90a_finish(dir, gen, emu, "attention_wgmma_paged");
}
