/* tests/attention_wgmma_test.c - the attention family's sm_90a forward (path=wgmma, templates/lib/attn_wgmma.lua:
 * TMA producer, K/V ring on mbarriers, wgmma consumer) on the emulator against the float64 reference through the
 * family's case runner (tensor maps bound from the launch description), path selection and refusals, planted
 * template bugs caught, the profile's wgmma/TMA/ex2 counts, ptxas sm_90a (0 spills, no C7508) and lint. */
#include <math.h>
#include <stdint.h>
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
static char dir[] = "/tmp/kiln-attn-wgmma-XXXXXX";

typedef struct row {
    const char *spec;
    int seq_q, seq_k, heads_q, heads_kv, batch;
    int left, right; /* window=true */
    int twice;
} row;

/* Runs one case on g (the built-in templates or a planted copy); returns the status, *bad the values out of
 * tolerance; err names a failed run. */
static kiln_status run_case(kiln_gen *g, kiln_emu *e, const row *r, long *bad, kiln_case **keep, kiln_error *err) {
    kiln_case_opts o = {.sm = SM90A, .seed = 7, .twice = r->twice};
    kiln_case_opts_set(&o, "rows", r->seq_q);
    kiln_case_opts_set(&o, "seq_k", r->seq_k);
    kiln_case_opts_set(&o, "heads_q", r->heads_q);
    kiln_case_opts_set(&o, "heads_kv", r->heads_kv);
    kiln_case_opts_set(&o, "batch", r->batch);
    sm90a_mask_opts(&o, r->spec, r->left, r->right, 5);
    return sm90a_run_case(g, e, r->spec, &o, bad, keep, err);
}

/* Small problems: odd tails on both sequence lengths (TMA's zero fill past seq_k, masked stores past seq_q),
 * one query, one key, GQA, batches, every mask key, both causal alignments, f32 output. */
static const row ROWS[] = {
    {"attention dtype=bf16 head_dim=64 path=wgmma", 64, 64, 1, 1, 1, 0, 0, 1},
    {"attention dtype=f16 head_dim=64 path=wgmma", 1, 200, 2, 2, 1, 0, 0, 0},
    {"attention dtype=bf16 head_dim=128 path=wgmma", 77, 130, 2, 1, 2, 0, 0, 0},
    {"attention dtype=f16 head_dim=128 out=f32 path=wgmma", 130, 1, 1, 1, 1, 0, 0, 0},
    {"attention dtype=bf16 head_dim=64 causal=true path=wgmma", 100, 37, 4, 2, 1, 0, 0, 0},
    {"attention dtype=f16 head_dim=64 causal=top_left path=wgmma", 65, 150, 2, 2, 1, 0, 0, 0},
    {"attention dtype=f16 head_dim=128 causal=true path=wgmma", 150, 200, 1, 1, 1, 0, 0, 1},
    {"attention dtype=bf16 head_dim=64 causal=true window=true path=wgmma", 130, 130, 2, 2, 1, 20, 5, 0},
    {"attention dtype=bf16 head_dim=64 softcap=true path=wgmma", 70, 90, 2, 2, 1, 0, 0, 0},
    {"attention dtype=f16 head_dim=64 causal=true alibi=true path=wgmma", 70, 190, 4, 1, 1, 0, 0, 0},
    {"attention dtype=bf16 head_dim=128 causal=top_left window=true softcap=true alibi=true path=wgmma", 90, 140, 2, 1, 1, 30, 0, 0},
    {"attention dtype=f16 head_dim=256 path=wgmma", 70, 100, 2, 1, 1, 0, 0, 0},
    {"attention dtype=bf16 head_dim=256 causal=top_left alibi=true path=wgmma", 129, 75, 2, 1, 1, 0, 0, 0},
    /* d128's 128-key tiles: the window's left edge skipping whole 128-key tiles, the diagonal inside one */
    {"attention dtype=f16 head_dim=128 causal=true window=true path=wgmma", 300, 300, 1, 1, 1, 40, 0, 0},
    /* d256 with window / softcap: 32-key tiles (boxes of 32 rows), ping-pong */
    {"attention dtype=bf16 head_dim=256 causal=true window=true softcap=true path=wgmma", 80, 100, 1, 1, 1, 20, 0, 0},
    {"attention dtype=f16 head_dim=256 causal=top_left window=true softcap=true alibi=true path=wgmma", 70, 90, 2, 1, 1, 30, 3, 0},
};

static void test_emulator(void) {
    for (size_t i = 0; i < sizeof ROWS / sizeof ROWS[0]; i++) {
        if (!check_san_keeps(i, 4)) continue; /* (the sanitizer build: one in four, check_san_keeps) */
        const row *r = &ROWS[i];
        char name[300];
        snprintf(name, sizeof name, "%s sm_90a: seq %d x %d, heads %d:%d, batch %d%s vs float64", r->spec + 10, r->seq_q, r->seq_k,
                 r->heads_q, r->heads_kv, r->batch, r->twice ? ", run twice" : "");
        TEST_BEGIN(name);
        kiln_error err = {0};
        long bad = 0;
        kiln_status st = run_case(gen, emu, r, &bad, NULL, &err);
        CHECK(st == KILN_OK, "%s", err.msg);
        CHECK(st != KILN_OK || bad == 0, "%ld bad: %s", bad, err.msg);
        TEST_END();
    }
}

static void test_selection(void) {
    TEST_BEGIN("path=wgmma builds the wgmma kernel on sm_90a for the specs it covers; path=auto keeps the FA2 kernel (opt-in until a GPU ran it); path=wgmma refused off sm_90a and for uncovered specs");
    static const sm90a_pick cases[] = {
        {"attention dtype=bf16 head_dim=64 path=wgmma", SM90A, 1},
        {"attention dtype=f16 head_dim=128 causal=true window=true path=wgmma", SM90A, 1},
        {"attention dtype=bf16 head_dim=256 causal=true path=wgmma", SM90A, 1},
        {"attention dtype=bf16 head_dim=64", SM90A, 0},           /* auto: FA2 until a GPU ran wgmma */
        {"attention dtype=bf16 head_dim=256 causal=true", SM90A, 0},
        {"attention dtype=bf16 head_dim=96", SM90A, 0},
        {"attention dtype=bf16 head_dim=128 splitkv=true", SM90A, 0},
        {"attention dtype=bf16 head_dim=128 dropout=true", SM90A, 0},
        {"attention dtype=f32 head_dim=64", SM90A, 0},
        {"attention dtype=bf16 head_dim=64", 90, 0},               /* plain sm_90: no wgmma */
        {"attention dtype=bf16 head_dim=64 path=mma", SM90A, 0},   /* the FA2 kernel on request */
    };
    sm90a_check_picks(gen, cases, sizeof cases / sizeof cases[0], NULL);
    static const sm90a_refusal refused[] = {
        {"attention dtype=bf16 head_dim=64 path=wgmma", 90, "valid targets: sm_90a"},
        {"attention dtype=bf16 head_dim=64 path=wgmma", 80, "valid targets: sm_90a"},
        {"attention dtype=f16 head_dim=64 paged=true append=true path=wgmma", SM90A, "append=true"},
        {"attention dtype=f32 head_dim=64 path=wgmma", SM90A, "dtype f32"},
    };
    sm90a_check_refusals(gen, refused, sizeof refused / sizeof refused[0]);
    TEST_END();
}

/* run_case as sm90a_planted runs it. */
static kiln_status run_row(kiln_gen *g, kiln_emu *e, const void *r, long *bad, kiln_error *err) {
    return run_case(g, e, (const row *)r, bad, NULL, err);
}

/* Planted bugs: a copy of the templates with one edit to lib/attn_wgmma.lua; each must fail a case. */
static void test_planted(void) {
    static const struct {
        const char *what, *from, *to;
        row r;
        int clean;        /* not a bug: the edited template must pass */
        const char *file; /* the template edited (templates/lib/...; NULL: attn_wgmma.lua) */
    } bugs[] = {
        {"V read K-major", "acc = O, trans_b = true", "acc = O, trans_b = false", {"attention dtype=bf16 head_dim=64 path=wgmma", 64, 64, 1, 1, 1, 0, 0, 0}, 0, NULL},
        {"keys past seq_k not masked", "v = b:select(ok, v, NEG_INF)", "v = v",
         {"attention dtype=bf16 head_dim=64 path=wgmma", 40, 40, 1, 1, 1, 0, 0, 0}, 0, NULL},
        {"a partly visible tile run as a whole one (the loop split rounding up)",
         "local f1 = b:min(b:max(b:max(hi_first, 0) // BN - t0, f0), ntiles)",
         "local f1 = b:min(b:max((b:max(hi_first, 0) + (BN - 1)) // BN - t0, f0), ntiles)",
         {"attention dtype=f16 head_dim=64 causal=true path=wgmma", 100, 100, 1, 1, 1, 0, 0, 0}, 0, NULL},
        {"the window's left edge tiles run unmasked", "local f0 = lo_last and", "local f0 = false and",
         {"attention dtype=bf16 head_dim=64 causal=true window=true path=wgmma", 130, 200, 1, 1, 1, 40, 0, 0}, 0, NULL},
        {"O not rescaled", "c.ov[i]:set(O[i] * alpha[((i - 1) >> 1) & 1])", "c.ov[i]:set(O[i])",
         {"attention dtype=f16 head_dim=64 path=wgmma", 64, 192, 1, 1, 1, 0, 0, 0}, 0, "attn_wgmma_pp.lua"},
        {"O not rescaled (d256 causal+ALiBi: the loop without ping-pong)", "ov[i + 1]:get() * alpha[(i >> 1) & 1]", "ov[i + 1]:get()",
         {"attention dtype=f16 head_dim=256 causal=true alibi=true path=wgmma", 64, 192, 1, 1, 1, 0, 0, 0}, 0, NULL},
        {"causal tiles past the last row's bound skipped one too early", "return b:i32(0), (b:max(hi, 0) + (BN - 1)) // BN",
         "return b:i32(0), b:max(hi, 0) // BN", {"attention dtype=bf16 head_dim=64 causal=true path=wgmma", 50, 100, 1, 1, 1, 0, 0, 0}, 0, NULL},
        {"consumer on the wrong parity of full", "(k // c.ns) % 2)", "(k // c.ns + 1) % 2)",
         {"attention dtype=bf16 head_dim=64 path=wgmma", 64, 128, 1, 1, 1, 0, 0, 0}, 0, "attn_wgmma_pp.lua"},
        {"ping-pong: warpgroup 1's first arrive missing (deadlock)", "function() b:bar_arrive(FIRST, n) end", "function() end",
         {"attention dtype=bf16 head_dim=64 path=wgmma", 64, 128, 1, 1, 1, 0, 0, 0}, 0, "attn_wgmma_pp.lua"},
        {"ping-pong: the arrive names one warpgroup (count mismatch)", "b:bar_arrive(other, n)", "b:bar_arrive(other, 128)",
         {"attention dtype=bf16 head_dim=64 path=wgmma", 64, 128, 1, 1, 1, 0, 0, 0}, 0, "attn_wgmma_pp.lua"},
        {"overlap: O read after wait_group 1 (its group still pending)", "O = b:wgmma_wait(0, O)\n      b:mbarrier_arrive(c.empty + 2 * sp)",
         "O = b:wgmma_wait(1, O)\n      b:mbarrier_arrive(c.empty + 2 * sp)",
         {"attention dtype=bf16 head_dim=64 path=wgmma", 64, 192, 1, 1, 1, 0, 0, 0}, 0, "attn_wgmma_pp.lua"},
        {"overlap: P of tile j-1 times V of tile j", "O = c.pv(O, a, sp)", "O = c.pv(O, a, s)",
         {"attention dtype=f16 head_dim=128 path=wgmma", 64, 192, 1, 1, 1, 0, 0, 0}, 0, "attn_wgmma_pp.lua"},
        {"producer not waiting for a free stage", "b:if_(b:ge(k, ns), function()", "b:if_(b:ge(k, 1000000), function()",
         {"attention dtype=bf16 head_dim=64 path=wgmma", 64, 320, 1, 1, 1, 0, 0, 0}, 0, NULL},
        {"the second consumer warpgroup reads the first's Q rows", "local my_q = sq + wg * (panels * PANEL)", "local my_q = sq",
         {"attention dtype=bf16 head_dim=64 path=wgmma", 100, 64, 1, 1, 1, 0, 0, 0}, 0, NULL},
        {"(clean) the tensor maps after the window's i32 parameters: the emulator's host call of a byval parameter",
         "  for _, t in ipairs({ \"q\", \"k\", \"v\" }) do params[#params + 1] = { \"tm_\" .. t, \"tensormap\", spec.dtype } end\n"
         "  mask.params(spec, params)\n",
         "  mask.params(spec, params)\n"
         "  for _, t in ipairs({ \"q\", \"k\", \"v\" }) do params[#params + 1] = { \"tm_\" .. t, \"tensormap\", spec.dtype } end\n",
         {"attention dtype=bf16 head_dim=64 causal=true window=true path=wgmma", 64, 64, 3, 3, 2, 7, 5, 0}, 1, NULL},
        {"32-key tiles (d256 window): the maps' K/V boxes left at 64 rows", "box = tiles.kv_box(keys.box(spec, \"k\"), cfg.block_n)",
         "box = keys.box(spec, \"k\")", {"attention dtype=bf16 head_dim=256 window=true path=wgmma", 40, 70, 1, 1, 1, 10, 10, 0}, 0, NULL},
        {"32-key tiles (d256 softcap): the second k-step of P V reading the first 16 keys' V", "b = desc(vs + 1024 * j, 2 * KPANEL)",
         "b = desc(vs + 1024 * (j % 1), 2 * KPANEL)", {"attention dtype=f16 head_dim=256 softcap=true path=wgmma", 64, 40, 1, 1, 1, 0, 0, 0}, 0, NULL},
        {"second d128 panel of K skipped", "b = desc(ks + (j // 4) * KPANEL + off, 16)", "b = desc(ks + off, 16)",
         {"attention dtype=f16 head_dim=128 path=wgmma", 64, 64, 1, 1, 1, 0, 0, 0}, 0, NULL},
        {"128-key tiles (d128): the second 64-row box of K and V loaded from the tile's first row", "row + br * r, bz), fb)", "row, bz), fb)",
         {"attention dtype=bf16 head_dim=128 path=wgmma", 64, 200, 1, 1, 1, 0, 0, 0}, 0, NULL},
        {"128-key tiles (d128): V's d/64 panels a 64-key panel apart (LBO)", "b = desc(vs + 1024 * j, 2 * KPANEL)", "b = desc(vs + 1024 * j, 8192)",
         {"attention dtype=f16 head_dim=128 path=wgmma", 64, 130, 1, 1, 1, 0, 0, 0}, 0, NULL},
    };
    char root[512];
    sm90a_root(__FILE__, root, sizeof root);
    for (size_t i = 0; i < sizeof bugs / sizeof bugs[0]; i++) {
        char file[200];
        snprintf(file, sizeof file, "lib/%s", bugs[i].file ? bugs[i].file : "attn_wgmma.lua");
        sm90a_planted(dir, root, bugs[i].what, file, bugs[i].from, bugs[i].to, bugs[i].clean, run_row, &bugs[i].r, NULL);
    }
    sm90a_planted_done(dir);
}

/* The profile of bf16 d128 causal, seq_q 130 x seq_k 200, 2 heads: blocks of 128 query rows (two consumer
 * warpgroups of 64), 2 per head; the last row of each (127, 129) sees keys < 198 / 200 (bottom-right, shift
 * 70): 2 key tiles of 128 a block (lib/attn_wgmma_tiles.lua), loaded once and consumed by both warpgroups.
 * Per consumer warp and tile: S by 8 chained m64n128k16 and O by 8 (128 keys / 16), each group fence +
 * mma_async + commit + wait (22), and 66 ex2 (64 P + 2 alpha); TMA per block: Q's 2 panels per warpgroup, then
 * K's and V's 2 panels of 2 boxes of 64 rows per tile. */
static void test_profile(void) {
    TEST_BEGIN("profile of bf16 d128 causal 130 x 200: wgmma, TMA and ex2 warp instructions");
    kiln_emu *pe = NULL;
    kiln_error err = {0};
    kiln_case *c = NULL;
    kiln_status st = kiln_emu_create(&pe, &err);
    if (st == KILN_OK) kiln_emu_set_profile(pe, 1);
    row r = {"attention dtype=bf16 head_dim=128 causal=true path=wgmma", 130, 200, 2, 2, 1, 0, 0, 0};
    long bad = 0;
    if (st == KILN_OK) st = run_case(gen, pe, &r, &bad, &c, &err);
    CHECK(st == KILN_OK && bad == 0, "%s", err.msg);
    if (c) {
        kiln_emu_profile p;
        st = kiln_emu_profile_get(kiln_case_kernel(c), &p, &err);
        CHECK(st == KILN_OK, "%s", err.msg);
        if (st == KILN_OK) {
            const int blocks = 4, n = 2, block_tiles = n * blocks, runs = 2 * blocks; /* runs: consumer warpgroups */
            /* lib/attn_wgmma_pp.lua per consumer warp over n tiles: the prologue's S (fence, 8, commit, wait), per
             * further tile S and P V (fence, 8, commit, fence, 8, commit, wait, wait), the last P V (fence, 8, commit,
             * wait): 22 n; the prologue's alpha is 0 without an ex2 (66 n - 2); barriers: bar.sync 0 in all 12 warps of
             * a block, per consumer warp sync + arrive per section (n + 1), warpgroup 1's first arrive */
            const int wg_insts = runs * 4 * 22 * n, ex2 = runs * 4 * (66 * n - 2);
            const int bars = blocks * (12 + 4 * 2 * (n + 1) * 2 + 4);
            CHECK(p.inst[KILN_PROF_WGMMA] == (unsigned long long)wg_insts, "wgmma %llu, want %d", (unsigned long long)p.inst[KILN_PROF_WGMMA], wg_insts);
            CHECK(p.inst[KILN_PROF_BARRIER] == (unsigned long long)bars, "barrier %llu, want %d", (unsigned long long)p.inst[KILN_PROF_BARRIER], bars);
            CHECK(p.inst[KILN_PROF_TMA] == (unsigned long long)(blocks * 4 + block_tiles * 8), "TMA %llu, want %d", (unsigned long long)p.inst[KILN_PROF_TMA], blocks * 4 + block_tiles * 8);
            CHECK(p.inst[KILN_PROF_EX2] == (unsigned long long)ex2, "ex2 %llu, want %d", (unsigned long long)p.inst[KILN_PROF_EX2], ex2);
            if (getenv("KILN_TEST_VERBOSE"))
                printf("     wgmma %llu, tma %llu, mbarrier %llu, ex2 %llu, shfl %llu, other %llu warp instructions\n",
                       (unsigned long long)p.inst[KILN_PROF_WGMMA], (unsigned long long)p.inst[KILN_PROF_TMA],
                       (unsigned long long)p.inst[KILN_PROF_MBARRIER], (unsigned long long)p.inst[KILN_PROF_EX2],
                       (unsigned long long)p.inst[KILN_PROF_SHFL], (unsigned long long)p.inst[KILN_PROF_OTHER]);
        }
        kiln_case_free(c);
    }
    if (pe) kiln_emu_destroy(pe);
    TEST_END();
}

/* FA3's schedule (every variant but d256 causal+ALiBi): ptxas must not serialize its wgmma ("Potential
 * Performance Loss: wgmma.mma_async instructions are serialized", C7510..C7520), or the overlap is lost. */
static void not_serialized(const char *spec, const char *log) {
    bool small = strstr(spec, "window=true") || strstr(spec, "softcap=true") || strstr(spec, "dropout=true"); /* 32-key tiles */
    bool pp = small || !(strstr(spec, "head_dim=256") && strstr(spec, "alibi=true") && !strstr(spec, "causal=false"));
    CHECK(!pp || !strstr(log, "instructions are serialized"), "%s: ptxas serializes the wgmma: %s", spec, log);
}

/* ptxas sm_90a over the path's variants (a sample here, every one under KILN_TEST_FULL=1): 0 spills, no C7508
 * (a setmaxnreg ptxas ignored), lint clean. */
static void test_ptxas(void) {
    static const char *const quick[] = {
        "attention dtype=bf16 head_dim=64 path=wgmma", "attention dtype=f16 head_dim=128 causal=true path=wgmma",
        "attention dtype=bf16 head_dim=128 causal=top_left window=true softcap=true alibi=true path=wgmma",
        "attention dtype=f16 head_dim=64 out=f32 causal=true path=wgmma", "attention dtype=bf16 head_dim=256 causal=true alibi=true path=wgmma",
        "attention dtype=f16 head_dim=256 causal=top_left path=wgmma",
        "attention dtype=bf16 head_dim=256 causal=top_left window=true softcap=true alibi=true path=wgmma",
    };
    static char full[64][160];
    const char *const *specs = quick;
    int n = (int)(sizeof quick / sizeof quick[0]);
    if (getenv("KILN_TEST_FULL")) {
        static const char *dts[] = {"f16", "bf16"}, *causal[] = {"false", "true", "top_left"};
        static const char *keys[] = {"", " window=true softcap=true alibi=true", " alibi=true"};
        static const char *ptrs[64];
        n = 0;
        for (int a = 0; a < 2; a++)
            for (int d = 64; d <= 256; d *= 2)
                for (int c = 0; c < 3; c++)
                    for (int k = 0; k < 3; k++) {
                        if (d != 256 && k == 2) continue; /* alibi alone: d256's row (the side-by-side loop) */
                        snprintf(full[n], sizeof full[n], "attention dtype=%s head_dim=%d causal=%s%s path=wgmma", dts[a], d, causal[c], keys[k]);
                        ptrs[n] = full[n];
                        n++;
                    }
        specs = ptrs;
    }
    const char *ptxas = ptxas_path();
    TEST_BEGIN("ptxas sm_90a: the wgmma attention variants assemble, 0 spills, no C7508; lint clean");
    if (!ptxas) printf("  (no ptxas: lint only)\n");
    sm90a_ptxas_check(gen, dir, specs, n, ptxas, not_serialized);
    TEST_END();
}

int main(void) {
    if (!sm90a_setup(dir, &gen, &emu, "attention_wgmma")) return 1;
    test_emulator();
    test_selection();
    test_planted();
    test_profile();
    test_ptxas();
    return sm90a_finish(dir, gen, emu, "attention_wgmma");
}
