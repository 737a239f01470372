/* tests/attention_bwd_wgmma_dims_test.c - the head dims of the sm_90a attention backward (path=wgmma,
 * templates/lib/attn_bwd_wgmma.lua) beyond 64/128: d32 (and 8-24) on the 64-column tiles, d96 (and 72-88) on the
 * 128-column ones, 136-256 on the 256-column ones (wave 20: two consumer warpgroups on one key block, each half of
 * dK's and dV's columns), v_head_dim != head_dim (S^T and dQ over head_dim's k-steps and
 * panels, dP^T over v_head_dim's, dK head_dim's panels wide, dV v_head_dim's, the epilogue storing the real columns).
 * On the emulator against the float64 gradients with the keys (causal both ways, window, softcap, ALiBi, dropout,
 * varlen, GQA; atomic and deterministic dQ; a race-checked run), the profile's wgmma counts per tile, the
 * refusals naming their rule, planted template bugs caught, ptxas sm_90a (0 spills, no C7508, no wgmma
 * serialized) and lint. KILN_TEST_ONLY=<substring> runs the cases whose name holds it (the emulator is slow). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "attn_case.h"
#include "check.h"
#include "kiln/emu_case.h"
#include "kiln/emu_profile.h"
#include "kiln/kiln.h"
#include "ptxas_util.h"
#include "sm90a_check.h"

static kiln_gen *gen;
static kiln_emu *emu;
static char dir[] = "/tmp/kiln-attn-bwd-wgmma-dims-XXXXXX";

typedef struct row {
    const char *spec;
    int seq_q, seq_k, heads_q, heads_kv, batch;
    int left, right; /* window=true */
    int twice;       /* run every block twice, threads in opposite orders (races) */
    double dropout;  /* dropout=true: the rate */
    int nseq;        /* varlen=true: the packed sequences */
    int lq[4], lk[4];
} row;

/* Whether KILN_TEST_ONLY leaves the case named name out. */
static int skipped(const char *name) {
    const char *only = getenv("KILN_TEST_ONLY");
    return only && *only && !strstr(name, only);
}

/* Runs the backward sequence of one case on g (the built-in templates or a planted copy); *bad: the values out of
 * tolerance; err names a failed run or the first bad value. */
static kiln_status run_case(kiln_gen *g, kiln_emu *e, const row *r, long *bad, kiln_case **keep, kiln_error *err) {
    kiln_dtype pd = strstr(r->spec, "dtype=bf16") ? KILN_BF16 : KILN_F16;
    kiln_case_opts o = attn_case_opts(SM90A, 17, r->twice, r->batch, r->heads_q, r->heads_kv, r->seq_q, r->seq_k, 1, 0, pd);
    sm90a_mask_opts(&o, r->spec, r->left, r->right, 1);
    if (r->dropout > 0) kiln_case_opts_set(&o, "dropout", r->dropout), kiln_case_opts_set(&o, "dropout_offset", 4321);
    if (r->nseq) o.nvarlen = r->nseq, o.varlen_q = r->lq, o.varlen_k = r->lk, kiln_case_opts_set(&o, "rows", 1);
    return sm90a_run_case(g, e, r->spec, &o, bad, keep, err);
}

/* The new dims with a representative key set: odd tails (a partial last query tile and key block), GQA, batches,
 * every causal form and mask key, grad=f32, dropout, varlen, the deterministic sequence (kernel=dq's dQ) beside the
 * atomic one, two consumer warpgroups and one (softcap / dropout on the 128-column tiles), race-checked runs. */
static const row ROWS[] = {
    /* d32 and the dims padded to 64 columns */
    {"attention_bwd kernel=dkdv dtype=bf16 head_dim=32 causal=true path=wgmma", 70, 90, 4, 2, 1, 0, 0, 1, 0, 0, {0}, {0}},
    {"attention_bwd kernel=dkdv dtype=f16 head_dim=32 path=wgmma", 77, 130, 2, 1, 2, 0, 0, 0, 0, 0, {0}, {0}},
    {"attention_bwd kernel=dkdv dtype=f16 head_dim=32 grad=f32 causal=top_left window=true softcap=true alibi=true path=wgmma", 90, 140, 2, 1, 1, 30, 4, 0, 0, 0, {0}, {0}},
    {"attention_bwd kernel=dkdv dtype=bf16 head_dim=32 causal=true window=true alibi=true deterministic=true path=wgmma", 130, 100, 2, 1, 1, 40, 3, 0, 0, 0, {0}, {0}},
    {"attention_bwd kernel=dkdv dtype=f16 head_dim=32 causal=true softcap=true dropout=true dropout_mask=true path=wgmma", 70, 155, 2, 1, 1, 0, 0, 0, 0.25, 0, {0}, {0}},
    {"attention_bwd kernel=dkdv dtype=bf16 head_dim=32 causal=true varlen=true path=wgmma", 1, 1, 4, 2, 1, 0, 0, 0, 0, 4, {0, 1, 37, 130}, {5, 0, 64, 129}},
    {"attention_bwd kernel=dkdv dtype=f16 head_dim=8 path=wgmma", 100, 64, 1, 1, 1, 0, 0, 0, 0, 0, {0}, {0}},
    {"attention_bwd kernel=dkdv dtype=bf16 head_dim=24 causal=top_left dropout=true deterministic=true path=wgmma", 60, 90, 2, 2, 1, 0, 0, 0, 0.3, 0, {0}, {0}},
    /* d96 and the dims padded to 128 columns */
    {"attention_bwd kernel=dkdv dtype=f16 head_dim=96 path=wgmma", 77, 130, 2, 1, 2, 0, 0, 1, 0, 0, {0}, {0}},
    {"attention_bwd kernel=dkdv dtype=bf16 head_dim=96 grad=f32 causal=true window=true alibi=true path=wgmma", 90, 140, 2, 2, 1, 50, 0, 0, 0, 0, {0}, {0}},
    {"attention_bwd kernel=dkdv dtype=bf16 head_dim=96 causal=true softcap=true path=wgmma", 70, 90, 2, 1, 1, 0, 0, 1, 0, 0, {0}, {0}},
    {"attention_bwd kernel=dkdv dtype=f16 head_dim=96 causal=top_left window=true alibi=true dropout=true dropout_mask=true path=wgmma", 90, 70, 2, 1, 1, 30, 5, 0, 0.25, 0, {0}, {0}},
    {"attention_bwd kernel=dkdv dtype=bf16 head_dim=96 causal=true deterministic=true path=wgmma", 130, 200, 2, 1, 1, 0, 0, 0, 0, 0, {0}, {0}},
    {"attention_bwd kernel=dkdv dtype=f16 head_dim=96 causal=top_left window=true varlen=true dropout=true path=wgmma", 1, 1, 2, 1, 1, 20, 4, 0, 0.25, 3, {17, 1, 80}, {20, 0, 70}},
    {"attention_bwd kernel=dkdv dtype=f16 head_dim=72 causal=true window=true softcap=true alibi=true path=wgmma", 80, 100, 1, 1, 2, 40, 3, 0, 0, 0, {0}, {0}},
    {"attention_bwd kernel=dkdv dtype=bf16 head_dim=88 causal=true varlen=true path=wgmma", 1, 1, 2, 2, 1, 0, 0, 0, 0, 2, {40, 65}, {70, 30}},
    /* v_head_dim != head_dim (V, dO, dV v_head_dim wide; dP^T's k-steps over it) */
    {"attention_bwd kernel=dkdv dtype=bf16 head_dim=64 v_head_dim=32 causal=true path=wgmma", 70, 100, 4, 2, 1, 0, 0, 1, 0, 0, {0}, {0}},
    {"attention_bwd kernel=dkdv dtype=f16 head_dim=32 v_head_dim=64 causal=top_left window=true softcap=true alibi=true path=wgmma", 90, 140, 2, 1, 1, 30, 4, 0, 0, 0, {0}, {0}},
    {"attention_bwd kernel=dkdv dtype=f16 head_dim=96 v_head_dim=64 path=wgmma", 77, 130, 2, 1, 2, 0, 0, 0, 0, 0, {0}, {0}},
    {"attention_bwd kernel=dkdv dtype=bf16 head_dim=96 v_head_dim=64 causal=true dropout=true deterministic=true path=wgmma", 70, 100, 2, 1, 1, 0, 0, 0, 0.2, 0, {0}, {0}},
    {"attention_bwd kernel=dkdv dtype=bf16 head_dim=128 v_head_dim=64 causal=true window=true alibi=true dropout=true path=wgmma", 70, 100, 2, 1, 1, 30, 4, 0, 0.2, 0, {0}, {0}},
    {"attention_bwd kernel=dkdv dtype=f16 head_dim=128 v_head_dim=64 grad=f32 causal=true softcap=true path=wgmma", 70, 90, 2, 2, 1, 0, 0, 1, 0, 0, {0}, {0}},
    /* the softcap with dropout where one of dK, dV is 64 columns wide, and (wave 15) where both are 128 wide: the
     * tile's lse loaded as P^T's columns use it (causal=top_left, atomic dQ: the variants that spilled before) */
    {"attention_bwd kernel=dkdv dtype=bf16 head_dim=128 v_head_dim=64 causal=top_left window=true softcap=true alibi=true dropout=true path=wgmma", 90, 70, 2, 1, 1, 30, 5, 0, 0.25, 0, {0}, {0}},
    {"attention_bwd kernel=dkdv dtype=f16 head_dim=96 causal=top_left softcap=true dropout=true dropout_mask=true path=wgmma", 70, 50, 2, 1, 1, 0, 0, 0, 0.25, 0, {0}, {0}},
    {"attention_bwd kernel=dkdv dtype=bf16 head_dim=64 v_head_dim=128 causal=true deterministic=true path=wgmma", 70, 130, 2, 1, 1, 0, 0, 0, 0, 0, {0}, {0}},
    /* (wave 20) 256-column tiles: both consumer warpgroups on one 64-key block, each dK's and dV's columns 128c ..
     * 128c + 127; one key block, one or two query tiles */
    {"attention_bwd kernel=dkdv dtype=bf16 head_dim=256 path=wgmma", 40, 50, 1, 1, 1, 0, 0, 1, 0, 0, {0}, {0}},
    {"attention_bwd kernel=dkdv dtype=f16 head_dim=256 causal=true path=wgmma", 70, 60, 2, 1, 1, 0, 0, 0, 0, 0, {0}, {0}},
    {"attention_bwd kernel=dkdv dtype=bf16 head_dim=256 causal=top_left deterministic=true path=wgmma", 50, 64, 1, 1, 1, 0, 0, 0, 0, 0, {0}, {0}},
    {"attention_bwd kernel=dkdv dtype=f16 head_dim=192 causal=true path=wgmma", 40, 50, 1, 1, 1, 0, 0, 1, 0, 0, {0}, {0}},
    {"attention_bwd kernel=dkdv dtype=bf16 head_dim=192 v_head_dim=128 path=wgmma", 40, 50, 1, 1, 1, 0, 0, 0, 0, 0, {0}, {0}},
    {"attention_bwd kernel=dkdv dtype=bf16 head_dim=256 causal=true window=true alibi=true dropout=true dropout_mask=true path=wgmma", 40, 60, 1, 1, 1, 20, 3, 0, 0.25, 0, {0}, {0}},
    {"attention_bwd kernel=dkdv dtype=f16 head_dim=256 softcap=true varlen=true path=wgmma", 1, 1, 2, 1, 1, 0, 0, 0, 0, 2, {30, 1}, {40, 20}},
    /* (wave 24) the softcap with causal=top_left on 256-column tiles: dQ's writer (half-panel tiles) with the dS
     * offsets remade in the tile loop (atomics before: the writer spilled 8 bytes) */
    {"attention_bwd kernel=dkdv dtype=f16 head_dim=192 v_head_dim=128 grad=f32 causal=top_left softcap=true path=wgmma", 50, 64, 1, 1, 1, 0, 0, 0, 0, 0, {0}, {0}},
};

static void test_emulator(void) {
    for (size_t i = 0; i < sizeof ROWS / sizeof ROWS[0]; i++) {
        const row *r = &ROWS[i];
        char name[400], shape[120];
        if (r->nseq) {
            int at = snprintf(shape, sizeof shape, "sequences");
            for (int k = 0; k < r->nseq && at < (int)sizeof shape; k++) at += snprintf(shape + at, sizeof shape - (size_t)at, " %dx%d", r->lq[k], r->lk[k]);
        } else {
            snprintf(shape, sizeof shape, "seq %d x %d, batch %d", r->seq_q, r->seq_k, r->batch);
        }
        snprintf(name, sizeof name, "%s sm_90a: %s, heads %d:%d%s%s: dQ, dK, dV vs float64", r->spec + 26, shape, r->heads_q, r->heads_kv,
                 r->dropout > 0 ? ", dropout" : "", r->twice ? ", run twice" : "");
        if (skipped(name) || attn_case_sampled_out(0, i)) continue; /* (the sanitizer build: one problem in four) */
        TEST_BEGIN(name);
        kiln_error err = {0};
        long bad = 0;
        kiln_status st = run_case(gen, emu, r, &bad, NULL, &err);
        CHECK(st == KILN_OK, "%s", err.msg);
        CHECK(st != KILN_OK || bad == 0, "%ld bad: %s", bad, err.msg);
        TEST_END();
    }
}

/* Two consumer warpgroups (384 threads) but where head_dim and v_head_dim are both past 64 with dropout, or with the
 * softcap and varlen (256: one); dQ's
 * atomics unless deterministic=true; dK's and dV's wgmma n their own panels' (m64n128k16 only where one of the
 * widths is past 64). */
static void picked(const char *spec, const char *ptx) {
    const char *hd = strstr(spec, "head_dim="), *vd = strstr(spec, "v_head_dim=");
    int d = hd ? atoi(hd + 9) : 64, v = vd ? atoi(vd + 11) : d;
    int wide = d > 64 || v > 64, sc = strstr(spec, "softcap=true") != NULL, dr = strstr(spec, "dropout=true") != NULL;
    int one = d > 64 && v > 64 && d <= 128 && v <= 128 && (dr || (sc && strstr(spec, "varlen=true"))); /* (wave 15: two elsewhere;
                                                                                                  256-column tiles: two on one key block) */
    CHECK(strstr(ptx, one ? "kiln.meta block 256 1 1" : "kiln.meta block 384 1 1") != NULL, "%s: not %d consumer warpgroups", spec, one ? 1 : 2);
    int n128 = strstr(ptx, "wgmma.mma_async.sync.aligned.m64n128k16") != NULL;
    CHECK(n128 == wide, "%s: m64n128k16 %s", spec, n128 ? "present" : "absent");
    /* dQ (deterministic=false): FA3's writer (TMA reduce-adds, the map tm_dq; 256-column tiles: half-panel staging
     * tiles, wave 23), every variant since wave 24 (the softcap with ALiBi on 128-column tiles and the softcap with
     * causal=top_left on 256-column ones took atomics before: ptxas spilled); no atomics */
    int atomics = strstr(ptx, "atom.global.add.f32") || strstr(ptx, "red.global.add.f32");
    int reduce = strstr(ptx, "cp.reduce.async.bulk.tensor") != NULL;
    int dq = !strstr(spec, "deterministic=true");
    CHECK(!atomics, "%s: dQ's atomics present", spec);
    CHECK(reduce == dq, "%s: dQ's TMA reduce-add %s", spec, reduce ? "present" : "absent");
    CHECK(!reduce || strstr(ptx, "kiln.meta tmap tm_dq dq_acc") != NULL, "%s: no tm_dq map over dq_acc", spec);
}

static void test_selection(void) {
    if (skipped("selection")) return;
    TEST_BEGIN("selection: path=wgmma builds d8-32 on 64-column tiles, d72-96 on 128, 136-256 on 256, v_head_dim != head_dim; refusals name the rule");
    static const sm90a_pick cases[] = {
        {"attention_bwd kernel=dkdv dtype=bf16 head_dim=32 path=wgmma", SM90A, 1},
        {"attention_bwd kernel=dkdv dtype=f16 head_dim=8 causal=true path=wgmma", SM90A, 1},
        {"attention_bwd kernel=dkdv dtype=bf16 head_dim=32 causal=true softcap=true dropout=true path=wgmma", SM90A, 1},
        {"attention_bwd kernel=dkdv dtype=f16 head_dim=96 deterministic=true path=wgmma", SM90A, 1},
        {"attention_bwd kernel=dkdv dtype=bf16 head_dim=88 causal=true dropout=true path=wgmma", SM90A, 1},
        {"attention_bwd kernel=dkdv dtype=bf16 head_dim=96 softcap=true path=wgmma", SM90A, 1},
        {"attention_bwd kernel=dkdv dtype=bf16 head_dim=64 v_head_dim=32 path=wgmma", SM90A, 1},
        {"attention_bwd kernel=dkdv dtype=f16 head_dim=96 v_head_dim=64 causal=true path=wgmma", SM90A, 1},
        {"attention_bwd kernel=dkdv dtype=bf16 head_dim=128 v_head_dim=64 dropout=true path=wgmma", SM90A, 1},
        {"attention_bwd kernel=dkdv dtype=f16 head_dim=64 v_head_dim=128 causal=top_left softcap=true dropout=true path=wgmma", SM90A, 1},
        {"attention_bwd kernel=dkdv dtype=f16 head_dim=96 causal=true softcap=true dropout=true path=wgmma", SM90A, 1},
        {"attention_bwd kernel=dkdv dtype=bf16 head_dim=72 causal=top_left softcap=true dropout=true path=wgmma", SM90A, 1},
        {"attention_bwd kernel=dkdv dtype=f16 head_dim=96 v_head_dim=128 softcap=true dropout=true path=wgmma", SM90A, 1},
        {"attention_bwd kernel=dkdv dtype=bf16 head_dim=256 causal=true dropout=true path=wgmma", SM90A, 1},
        {"attention_bwd kernel=dkdv dtype=f16 head_dim=192 v_head_dim=128 window=true softcap=true path=wgmma", SM90A, 1},
        {"attention_bwd kernel=dkdv dtype=bf16 head_dim=136 softcap=true varlen=true path=wgmma", SM90A, 1},
        {"attention_bwd kernel=dkdv dtype=f16 head_dim=192 causal=top_left softcap=true path=wgmma", SM90A, 1}, /* (atomics until wave 24) */
        {"attention_bwd kernel=dkdv dtype=bf16 head_dim=96 causal=true window=true softcap=true alibi=true path=wgmma", SM90A, 1}, /* (the same) */
        {"attention_bwd kernel=dkdv dtype=bf16 head_dim=96", SM90A, 0}, /* auto: mma.sync on sm_90a */
    };
    sm90a_check_picks(gen, cases, sizeof cases / sizeof cases[0], picked);
    static const sm90a_refusal refused[] = {
        {"attention_bwd kernel=dkdv dtype=bf16 head_dim=96 path=wgmma", 90, "valid targets: sm_90a"},
        {"attention_bwd kernel=dkdv dtype=bf16 head_dim=256 causal=true softcap=true dropout=true path=wgmma", SM90A,
         "head_dim=256 v_head_dim=256 with softcap=true and dropout=true (256-column tiles: 4-48 bytes"},
        {"attention_bwd kernel=dkdv dtype=f16 head_dim=192 v_head_dim=128 window=true softcap=true alibi=true path=wgmma", SM90A,
         "head_dim=192 v_head_dim=128 with softcap=true and alibi=true (256-column tiles"},
        {"attention_bwd kernel=dkdv dtype=bf16 head_dim=256 softcap=true deterministic=true varlen=true path=wgmma", SM90A,
         "on 256 the softcap with atomic dQ, without dropout and alibi"},
        {"attention_bwd kernel=dkdv dtype=f16 head_dim=64 v_head_dim=32 varlen=true path=wgmma", SM90A, "v_head_dim=32 (head_dim=64) with varlen=true is not built"},
    };
    sm90a_check_refusals(gen, refused, sizeof refused / sizeof refused[0]);
    TEST_END();
}

/* run_case as sm90a_planted runs it. */
static kiln_status run_row(kiln_gen *g, kiln_emu *e, const void *r, long *bad, kiln_error *err) {
    return run_case(g, e, (const row *)r, bad, NULL, err);
}

/* Planted bugs: a copy of the templates with one edit to lib/attn_bwd_wgmma.lua; each must fail its case. */
static void test_planted(void) {
    static const struct {
        const char *what, *from, *to;
        row r;
    } bugs[] = {
        {"S^T's k-steps one short (d96: columns 80-95 left out)", "local kq, kv = spec.kq, (vdim + 15) // 16", "local kq, kv = spec.kq - 1, (vdim + 15) // 16",
         {"attention_bwd kernel=dkdv dtype=f16 head_dim=96 path=wgmma", 30, 40, 1, 1, 1, 0, 0, 0, 0, 0, {0}, {0}}},
        {"dP^T's k-steps over head_dim, not v_head_dim (qk 32 / v 64: V's columns 32-63 left out)", "local kq, kv = spec.kq, (vdim + 15) // 16",
         "local kq, kv = spec.kq, (dim + 15) // 16", {"attention_bwd kernel=dkdv dtype=bf16 head_dim=32 v_head_dim=64 path=wgmma", 30, 40, 1, 1, 1, 0, 0, 0, 0, 0, {0}, {0}}},
        {"d32: dK's padded columns 32-63 stored", "local kw, vw = dim // 8, vdim // 8", "local kw, vw = 8 * qp, vdim // 8",
         {"attention_bwd kernel=dkdv dtype=f16 head_dim=32 path=wgmma", 30, 40, 2, 2, 1, 0, 0, 0, 0, 0, {0}, {0}}},
        {"dV's width taken from head_dim (qk 64 / v 32: 64 columns stored)", "local kw, vw = dim // 8, vdim // 8", "local kw, vw = dim // 8, dim // 8",
         {"attention_bwd kernel=dkdv dtype=bf16 head_dim=64 v_head_dim=32 path=wgmma", 30, 40, 2, 2, 1, 0, 0, 0, 0, 0, {0}, {0}}},
        {"dQ's panels counted by v_head_dim (qk 128 / v 64: dQ's columns 64-127 never added)", "for hp = 0, hq - 1 do", "for hp = 0, vp - 1 do",
         {"attention_bwd kernel=dkdv dtype=f16 head_dim=128 v_head_dim=64 path=wgmma", 30, 40, 1, 1, 1, 0, 0, 0, 0, 0, {0}, {0}}},
        {"the producer loads dO's panels by Q's count (qk 128 / v 64: a second dO panel past its stage, the expect-tx exceeded)",
         "if j < lv then b:tma_load(sdo", "if j < lq then b:tma_load(sdo",
         {"attention_bwd kernel=dkdv dtype=bf16 head_dim=128 v_head_dim=64 path=wgmma", 130, 64, 1, 1, 1, 0, 0, 0, 0, 0, {0}, {0}}},
        {"a stage's expect-tx counts the tiles' panels, not those loaded (qk 64 / v 128)", "local stage_bytes = (lq + lv) * PANEL * eb",
         "local stage_bytes = 2 * math.max(lq, lv) * PANEL * eb",
         {"attention_bwd kernel=dkdv dtype=f16 head_dim=64 v_head_dim=128 path=wgmma", 30, 40, 1, 1, 1, 0, 0, 0, 0, 0, {0}, {0}}},
        {"V's and dO's offsets in units of Q's panels (qk 128 / v 64: the second warpgroup's V, stage 1's dO misread)",
         "local UQ, UV = lq * PANEL * eb // 16, lv * PANEL * eb // 16", "local UQ, UV = lq * PANEL * eb // 16, lq * PANEL * eb // 16",
         {"attention_bwd kernel=dkdv dtype=bf16 head_dim=128 v_head_dim=64 path=wgmma", 130, 128, 1, 1, 1, 0, 0, 0, 0, 0, {0}, {0}}},
        {"the softcap with dropout at d96: the lse loaded as used from the neighbouring query column",
         "if lse_as_used and not lse2[c] then lse2[c] = row_val(0, c) end", "if lse_as_used and not lse2[c] then lse2[c] = row_val(0, c ~ 1) end",
         {"attention_bwd kernel=dkdv dtype=f16 head_dim=96 causal=top_left softcap=true dropout=true path=wgmma", 30, 40, 1, 1, 1, 0, 0, 0, 0.25, 0, {0}, {0}}},
        {"two consumer warpgroups with the softcap at d96: the lse loaded as used from the neighbouring query column",
         "if lse_as_used and not lse2[c] then lse2[c] = row_val(0, c) end", "if lse_as_used and not lse2[c] then lse2[c] = row_val(0, c ~ 1) end",
         {"attention_bwd kernel=dkdv dtype=bf16 head_dim=96 causal=true softcap=true path=wgmma", 30, 100, 1, 1, 1, 0, 0, 0, 0, 0, {0}, {0}}},
        /* (wave 20) the 256-column tiles: two consumer warpgroups splitting dK's and dV's columns */
        {"d256: both warpgroups' dV from dO's first 128 columns", "qs_h, dos_h = at(oq, s * UQ + uw * UH), at(odo, s * UV + uw * UH)",
         "qs_h, dos_h = at(oq, s * UQ + uw * UH), at(odo, s * UV)",
         {"attention_bwd kernel=dkdv dtype=bf16 head_dim=256 path=wgmma", 30, 40, 1, 1, 1, 0, 0, 0, 0, 0, {0}, {0}}},
        {"d256: dQ's second half from K's first panels", "local my_k = split and at(ok, uw * UH) or my_k", "local my_k = my_k",
         {"attention_bwd kernel=dkdv dtype=f16 head_dim=256 causal=true path=wgmma", 30, 40, 1, 1, 1, 0, 0, 0, 0, 0, {0}, {0}}},
        {"d256: the second warpgroup's dK and dV stored over the first's columns", "kw, vw, cb = 8 * hq, 8 * hv, wg * 128",
         "kw, vw, cb = 8 * hq, 8 * hv, wg * 0",
         {"attention_bwd kernel=dkdv dtype=bf16 head_dim=256 deterministic=true path=wgmma", 30, 40, 1, 1, 1, 0, 0, 0, 0, 0, {0}, {0}}},
        {"qk 192 / v 128: the columns past v_head_dim stored (the guard only where the width is a multiple of 128)",
         "if width == 256 then st() else", "if width % 128 == 0 then st() else",
         {"attention_bwd kernel=dkdv dtype=bf16 head_dim=192 v_head_dim=128 path=wgmma", 30, 40, 1, 1, 1, 0, 0, 0, 0, 0, {0}, {0}}},
        /* (wave 23) dQ's writer on 256-column tiles: half-panel staging tiles written in turn */
        {"d256: dQ's second half-panel added at the first half's columns", "local c = col + 8 * j", "local c = col + 8 * (j - part * nb)",
         {"attention_bwd kernel=dkdv dtype=f16 head_dim=192 path=wgmma", 30, 40, 1, 1, 1, 0, 0, 0, 0, 0, {0}, {0}}},
        {"d256: dQ's second half-panel stored with no wait_group.read for the first's reduces", "if part > 0 then", "if part > 1 then",
         {"attention_bwd kernel=dkdv dtype=bf16 head_dim=256 causal=true path=wgmma", 30, 40, 1, 1, 1, 0, 0, 0, 0, 0, {0}, {0}}},
    };
    char root[512];
    sm90a_root(__FILE__, root, sizeof root);
    const size_t nbugs = sizeof bugs / sizeof bugs[0], first_w20 = nbugs - 6; /* (the 256-column tiles' six) */
    for (size_t i = 0; i < nbugs; i++) {
        char name[300];
        snprintf(name, sizeof name, "planted bug caught: %s", bugs[i].what);
        if (skipped(name)) continue;
        if (i >= first_w20 && attn_case_sampled_out(0, i)) continue; /* (the sanitizer build: one in ATTN_SAN_EVERY) */
        sm90a_planted(dir, root, bugs[i].what, "lib/attn_bwd_wgmma.lua", bugs[i].from, bugs[i].to, 0, run_row, &bugs[i].r, NULL);
    }
    sm90a_planted_done(dir);
}

/* The profile of the atomic dkdv, bf16 causal (bottom-right), seq_q 130 x seq_k 200, 2 heads (the problem of
 * attention_bwd_wgmma_test's profile: 4 blocks of two consumer warpgroups, 10 block-tiles, 80 consumer warp-tiles).
 * Per consumer warp and tile: fence, kq S^T (ceil(head_dim / 16)), commit, kv dP^T (ceil(v_head_dim / 16)), commit,
 * wait; fence, 4 dV, commit, wait; fence, 4 dK, commit, 2 waits; per 64 columns of head_dim: fence, 4 dQ, commit,
 * wait. TMA per block: K's qp and V's vp panels of each consumer warpgroup; per block-tile Q's qp and dO's vp.
 * dQ's writer (qp panels of dQ, `dq` below; 256-column tiles: 2 panels of 2 halves a warpgroup): per block-tile and panel (half) each consumer
 * warpgroup's thread 0 one wait_group.read, one commit_group (TMA) and a reduce-add (tma.reduce) per 8-column box
 * holding a column below head_dim (`boxes` a warpgroup and block-tile: d32 4, d96 8 + 4); per block one wait_group
 * a warpgroup (TMA). */
static void test_profile(void) {
    static const struct {
        const char *spec;
        int wgmma, tma_block, tma_tile, dq, boxes; /* per warp-tile; per block; per block-tile; dQ's panels, boxes (writer) */
        int seq_q, seq_k, heads, blocks, block_tiles; /* the problem (0: 130 x 200, 2 heads, 4 blocks, 10 block-tiles) */
    } P[] = {
        {"attention_bwd kernel=dkdv dtype=bf16 head_dim=32 causal=true path=wgmma", 30, 4, 2, 1, 4, 0, 0, 0, 0, 0},  /* d64: 34 */
        {"attention_bwd kernel=dkdv dtype=bf16 head_dim=96 causal=true path=wgmma", 45, 8, 4, 2, 12, 0, 0, 0, 0, 0},  /* d128: 49 */
        {"attention_bwd kernel=dkdv dtype=bf16 head_dim=64 v_head_dim=32 causal=true path=wgmma", 32, 4, 2, 1, 8, 0, 0, 0, 0, 0},
        {"attention_bwd kernel=dkdv dtype=bf16 head_dim=128 v_head_dim=64 causal=true path=wgmma", 45, 6, 3, 2, 16, 0, 0, 0, 0, 0},
        /* (wave 20) 256-column tiles, 70 x 64 causal (queries 6-69 see the one 64-key block: one block-tile): S^T and
         * dP^T 16 k-steps each (fence, 16, commit, 16, commit, wait: 36), dV 7, dK 8, dQ two 64-column chains (14) =
         * 65; TMA 4 K + 4 V panels a block, 4 Q + 4 dO a tile */
        {"attention_bwd kernel=dkdv dtype=bf16 head_dim=256 causal=true path=wgmma", 65, 8, 8, 2 * 2, 16, 70, 64, 1, 1, 1},
    };
    for (size_t k = 0; k < sizeof P / sizeof P[0]; k++) {
        char name[240];
        snprintf(name, sizeof name, "profile of the %s %d x %d: wgmma per warp-tile, TMA per block and tile, ex2", P[k].spec + 26,
                 P[k].seq_q ? P[k].seq_q : 130, P[k].seq_k ? P[k].seq_k : 200);
        if (skipped(name)) continue;
        TEST_BEGIN(name);
        kiln_emu *pe = NULL;
        kiln_error err = {0};
        kiln_case *c = NULL;
        kiln_status st = kiln_emu_create(&pe, &err);
        if (st == KILN_OK) kiln_emu_set_profile(pe, 1);
        int sq = P[k].seq_q ? P[k].seq_q : 130, sk = P[k].seq_k ? P[k].seq_k : 200, hh = P[k].heads ? P[k].heads : 2;
        row r = {P[k].spec, sq, sk, hh, hh, 1, 0, 0, 0, 0, 0, {0}, {0}};
        long bad = 0;
        if (st == KILN_OK) st = run_case(gen, pe, &r, &bad, &c, &err);
        CHECK(st == KILN_OK && bad == 0, "%s", err.msg);
        if (c) {
            kiln_emu_profile p;
            st = kiln_emu_profile_get(kiln_case_kernel(c), &p, &err);
            CHECK(st == KILN_OK, "%s", err.msg);
            if (st == KILN_OK) {
                const unsigned long long blocks = P[k].blocks ? (unsigned long long)P[k].blocks : 4;
                const unsigned long long block_tiles = P[k].block_tiles ? (unsigned long long)P[k].block_tiles : 10, warp_tiles = 8 * block_tiles;
                unsigned long long wg = p.inst[KILN_PROF_WGMMA], tma = p.inst[KILN_PROF_TMA], ex2 = p.inst[KILN_PROF_EX2];
                unsigned long long dq = (unsigned long long)P[k].dq, red = p.inst[KILN_PROF_TMA_REDUCE];
                unsigned long long want_tma = blocks * ((unsigned long long)P[k].tma_block + (dq ? 2 : 0)) +
                                              block_tiles * ((unsigned long long)P[k].tma_tile + 4 * dq);
                const unsigned long long boxes = (unsigned long long)P[k].boxes;
                CHECK(red == block_tiles * 2 * boxes, "tma.reduce %llu, want %llu", red, block_tiles * 2 * boxes);
                CHECK(wg == warp_tiles * (unsigned long long)P[k].wgmma, "wgmma %llu, want %llu", wg, warp_tiles * (unsigned long long)P[k].wgmma);
                CHECK(tma == want_tma, "TMA %llu, want %llu", tma, want_tma);
                CHECK(ex2 == warp_tiles * 32, "ex2 %llu, want %llu", ex2, warp_tiles * 32);
                CHECK(!dq || p.smem[KILN_SMEM_ST].conflicts == 0, "st.shared: %llu bank conflicts, want none (dQ's staging tile)",
                      (unsigned long long)p.smem[KILN_SMEM_ST].conflicts);
                if (getenv("KILN_TEST_VERBOSE")) printf("     wgmma %llu (%llu a warp-tile), TMA %llu\n", wg, wg / warp_tiles, tma);
            }
            kiln_case_free(c);
        }
        if (pe) kiln_emu_destroy(pe);
        TEST_END();
    }
}

/* ptxas sm_90a over the new dims' variants (a sample; every dim x dtype x causal x key set under KILN_TEST_FULL=1):
 * 0 spills, no C7508, no wgmma serialized, lint clean. */
static void test_ptxas(void) {
    static const char *const quick[] = {
        "attention_bwd kernel=dkdv dtype=bf16 head_dim=32 causal=true path=wgmma",
        "attention_bwd kernel=dkdv dtype=f16 head_dim=96 causal=true window=true softcap=true alibi=true path=wgmma",
        "attention_bwd kernel=dkdv dtype=bf16 head_dim=96 causal=true window=true alibi=true dropout=true path=wgmma",
        "attention_bwd kernel=dkdv dtype=f16 head_dim=32 causal=true window=true softcap=true alibi=true dropout=true path=wgmma",
        "attention_bwd kernel=dkdv dtype=bf16 head_dim=128 v_head_dim=64 causal=true path=wgmma",
        "attention_bwd kernel=dkdv dtype=f16 head_dim=96 v_head_dim=64 causal=true deterministic=true path=wgmma",
        "attention_bwd kernel=dkdv dtype=bf16 head_dim=64 v_head_dim=128 causal=top_left window=true softcap=true alibi=true dropout=true path=wgmma",
        "attention_bwd kernel=dkdv dtype=bf16 head_dim=96 causal=top_left softcap=true dropout=true path=wgmma",
        "attention_bwd kernel=dkdv dtype=bf16 head_dim=256 causal=true window=true alibi=true dropout=true path=wgmma",
        "attention_bwd kernel=dkdv dtype=f16 head_dim=192 v_head_dim=128 causal=true softcap=true path=wgmma",
    };
    static char full[800][200];
    static const char *ptrs[800];
    const char *const *specs = quick;
    int n = (int)(sizeof quick / sizeof quick[0]);
    if (getenv("KILN_TEST_FULL")) {
        static const char *dts[] = {"f16", "bf16"}, *causal[] = {"false", "true", "top_left"};
        static const char *dims[] = {"head_dim=32", "head_dim=96", "head_dim=8", "head_dim=24", "head_dim=72", "head_dim=88",
                                     "head_dim=64 v_head_dim=32", "head_dim=32 v_head_dim=64", "head_dim=96 v_head_dim=64",
                                     "head_dim=128 v_head_dim=64", "head_dim=64 v_head_dim=128", "head_dim=128 v_head_dim=32",
                                     "head_dim=96 v_head_dim=128"};
        static const char *keys[] = {"", " window=true alibi=true", " softcap=true", " window=true softcap=true alibi=true grad=f32",
                                     " deterministic=true", " window=true softcap=true alibi=true deterministic=true", " dropout=true",
                                     " window=true alibi=true dropout=true deterministic=true", " softcap=true dropout=true", " varlen=true",
                                     " window=true softcap=true alibi=true varlen=true dropout=true"};
        n = 0;
        for (int a = 0; a < 2; a++)
            for (size_t d = 0; d < sizeof dims / sizeof dims[0]; d++)
                for (int c = 0; c < 3; c++)
                    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
                        const char *vd = strstr(dims[d], "v_head_dim=");
                        if (vd && strstr(keys[k], "varlen")) continue; /* (v_head_dim: dense only) */
                        snprintf(full[n], sizeof full[n], "attention_bwd kernel=dkdv dtype=%s %s causal=%s%s path=wgmma", dts[a], dims[d], causal[c], keys[k]);
                        ptrs[n] = full[n];
                        n++;
                    }
        specs = ptrs;
    }
    if (skipped("ptxas")) return;
    const char *ptxas = ptxas_path();
    TEST_BEGIN("ptxas sm_90a: the wgmma dkdv's head-dim variants assemble, 0 spills, no C7508, no wgmma serialized; lint clean");
    if (!ptxas) printf("  (no ptxas: lint only)\n");
    sm90a_ptxas_check(gen, dir, specs, n, ptxas, sm90a_no_serialized_wgmma);
    TEST_END();
}

int main(void) {
    if (!sm90a_setup(dir, &gen, &emu, "attention_bwd_wgmma_dims")) return 1;
    test_emulator();
    test_selection();
    test_planted();
    test_profile();
    test_ptxas();
    return sm90a_finish(dir, gen, emu, "attention_bwd_wgmma_dims");
}
