/* tests/attention_bwd_wgmma_test.c - the attention backward's sm_90a dkdv kernel (path=wgmma,
 * templates/lib/attn_bwd_wgmma.lua: TMA producer, Q/dO ring on mbarriers, wgmma consumers) on the emulator: the
 * whole sequence (prep, dkdv with dQ's atomics, convert; or, deterministic, prep, dkdv, dq) against the float64
 * gradients through the family's case runner, path selection and refusals, planted template bugs caught, the
 * profile's wgmma/TMA/ex2/shared counts, ptxas sm_90a (0 spills, no C7508) and lint. */
#include <math.h>
#include <stdint.h>
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
static char dir[] = "/tmp/kiln-attn-bwd-wgmma-XXXXXX";

typedef struct row {
    const char *spec;
    int seq_q, seq_k, heads_q, heads_kv, batch;
    int left, right; /* window=true */
    int twice;
    double dropout; /* dropout=true: the rate (offset 12345) */
    int nseq;       /* varlen=true: the packed sequences (seq_q, seq_k, batch: 1, unused) */
    int lq[4], lk[4];
} row;

/* Runs the backward sequence of one case on g (the built-in templates or a planted copy); returns the status,
 * *bad the values out of tolerance; err names a failed run or the first bad value. */
static kiln_status run_case(kiln_gen *g, kiln_emu *e, const row *r, long *bad, kiln_case **keep, kiln_error *err) {
    kiln_dtype pd = strstr(r->spec, "dtype=bf16") ? KILN_BF16 : KILN_F16;
    kiln_case_opts o = attn_case_opts(SM90A, 11, r->twice, r->batch, r->heads_q, r->heads_kv, r->seq_q, r->seq_k, 1, 0, pd);
    sm90a_mask_opts(&o, r->spec, r->left, r->right, 1); /* (softcap 1: tanh well past linear, its derivative matters) */
    if (r->dropout > 0) kiln_case_opts_set(&o, "dropout", r->dropout), kiln_case_opts_set(&o, "dropout_offset", 12345);
    if (r->nseq) o.nvarlen = r->nseq, o.varlen_q = r->lq, o.varlen_k = r->lk, kiln_case_opts_set(&o, "rows", 1);
    return sm90a_run_case(g, e, r->spec, &o, bad, keep, err);
}

/* Small problems: odd tails on both lengths (TMA's zero fill past seq_q and seq_k, stores and dQ atomics past them
 * not made), one query and one key, GQA/MQA (a block sums its group's heads), batches, both causal alignments
 * (query tiles before a key block's first visible row skipped), every mask key, grad=f32, d64 (two consumer
 * warpgroups, 128 keys a block) and d128 / softcap (one), dQ by atomics (default) and by kernel=dq
 * (deterministic=true), three run twice in both thread orders (the atomics' order differs: within tolerance). */
static const row ROWS[] = {
    {"attention_bwd kernel=dkdv dtype=bf16 head_dim=64 path=wgmma", 64, 64, 1, 1, 1, 0, 0, 1, 0, 0, {0}, {0}},
    {"attention_bwd kernel=dkdv dtype=f16 head_dim=64 path=wgmma", 1, 1, 2, 2, 1, 0, 0, 0, 0, 0, {0}, {0}},
    {"attention_bwd kernel=dkdv dtype=f16 head_dim=128 path=wgmma", 77, 130, 2, 1, 2, 0, 0, 0, 0, 0, {0}, {0}},
    {"attention_bwd kernel=dkdv dtype=bf16 head_dim=64 causal=true path=wgmma", 100, 37, 4, 2, 1, 0, 0, 0, 0, 0, {0}, {0}},
    {"attention_bwd kernel=dkdv dtype=f16 head_dim=64 causal=top_left path=wgmma", 65, 150, 2, 2, 1, 0, 0, 1, 0, 0, {0}, {0}},
    {"attention_bwd kernel=dkdv dtype=bf16 head_dim=128 causal=true path=wgmma", 150, 100, 3, 1, 1, 0, 0, 0, 0, 0, {0}, {0}},
    {"attention_bwd kernel=dkdv dtype=bf16 head_dim=64 causal=true window=true path=wgmma", 130, 130, 1, 1, 1, 20, 5, 0, 0, 0, {0}, {0}},
    {"attention_bwd kernel=dkdv dtype=bf16 head_dim=64 softcap=true path=wgmma", 70, 90, 2, 2, 1, 0, 0, 0, 0, 0, {0}, {0}},
    {"attention_bwd kernel=dkdv dtype=f16 head_dim=64 grad=f32 causal=true window=true softcap=true alibi=true path=wgmma", 90, 140, 2, 1, 1, 30, 4, 0, 0, 0, {0}, {0}},
    {"attention_bwd kernel=dkdv dtype=bf16 head_dim=128 grad=f32 causal=top_left window=true alibi=true path=wgmma", 90, 140, 2, 1, 1, 80, 0, 0, 0, 0, {0}, {0}},
    /* (wave 24) the softcap with ALiBi at d128 (window; two consumer warpgroups): dQ's writer with the dS offsets
     * remade in the tile loop (atomics before: the writer spilled 16 bytes) */
    {"attention_bwd kernel=dkdv dtype=bf16 head_dim=128 causal=true window=true softcap=true alibi=true path=wgmma", 90, 140, 2, 1, 1, 30, 4, 0, 0, 0, {0}, {0}},
    /* the softcap at d128 (one consumer warpgroup; dS's factor P (1 - tanh^2) made beside P) */
    {"attention_bwd kernel=dkdv dtype=bf16 head_dim=128 causal=true softcap=true path=wgmma", 70, 90, 2, 1, 1, 0, 0, 1, 0, 0, {0}, {0}},
    {"attention_bwd kernel=dkdv dtype=f16 head_dim=128 grad=f32 causal=top_left window=true softcap=true alibi=true deterministic=true path=wgmma", 80, 100, 1, 1, 2, 40, 3, 0, 0, 0, {0}, {0}},
    {"attention_bwd kernel=dkdv dtype=bf16 head_dim=64 causal=true deterministic=true path=wgmma", 130, 200, 2, 1, 1, 0, 0, 1, 0, 0, {0}, {0}},
    {"attention_bwd kernel=dkdv dtype=f16 head_dim=128 deterministic=true path=wgmma", 70, 65, 1, 1, 2, 0, 0, 0, 0, 0, {0}, {0}},
    /* dropout (lib/attn_bwd_wgmma_keys.lua): the kernel's mask against the reference's Philox bits; bottom-right
     * causal 70 x 155 starts key block 1's query tiles at row 43, taken down to 32 (the Philox pairs); the softcap's
     * fused dS with every mask key; the deterministic sequence (dq's own mask) */
    {"attention_bwd kernel=dkdv dtype=bf16 head_dim=64 causal=true dropout=true dropout_mask=true path=wgmma", 70, 155, 2, 1, 1, 0, 0, 1, 0.2, 0, {0}, {0}},
    {"attention_bwd kernel=dkdv dtype=f16 head_dim=64 grad=f32 causal=top_left window=true softcap=true alibi=true dropout=true path=wgmma", 90, 140, 2, 1, 1, 30, 4, 0, 0.3, 0, {0}, {0}},
    {"attention_bwd kernel=dkdv dtype=f16 head_dim=64 causal=true window=true dropout=true deterministic=true path=wgmma", 100, 90, 1, 1, 2, 25, 3, 0, 0.4, 0, {0}, {0}},
    {"attention_bwd kernel=dkdv dtype=bf16 head_dim=128 causal=true dropout=true dropout_mask=true path=wgmma", 70, 65, 2, 1, 1, 0, 0, 0, 0.3, 0, {0}, {0}},
    {"attention_bwd kernel=dkdv dtype=f16 head_dim=128 causal=top_left window=true alibi=true dropout=true dropout_mask=true path=wgmma", 90, 70, 2, 1, 1, 30, 5, 0, 0.25, 0, {0}, {0}},
    /* varlen (the packed tensors' maps, boxes from the sequence's first row): lengths 0 and 1, key lengths apart
     * from query lengths, boxes reaching into the next sequence's rows (its keys masked, its query rows' lse +inf);
     * GQA, every mask key, dropout within the sequence, d128, deterministic */
    {"attention_bwd kernel=dkdv dtype=bf16 head_dim=64 causal=true varlen=true path=wgmma", 1, 1, 4, 2, 1, 0, 0, 1, 0, 4, {0, 1, 37, 130}, {5, 0, 64, 129}},
    {"attention_bwd kernel=dkdv dtype=f16 head_dim=128 varlen=true path=wgmma", 1, 1, 2, 1, 1, 0, 0, 0, 0, 3, {70, 3, 65}, {20, 100, 9}},
    {"attention_bwd kernel=dkdv dtype=f16 head_dim=64 grad=f32 causal=top_left window=true softcap=true alibi=true varlen=true dropout=true path=wgmma",
     1, 1, 2, 1, 1, 20, 4, 0, 0.25, 3, {17, 1, 80}, {20, 0, 70}},
    {"attention_bwd kernel=dkdv dtype=bf16 head_dim=64 causal=true varlen=true dropout=true dropout_mask=true deterministic=true path=wgmma",
     1, 1, 2, 2, 1, 0, 0, 0, 0.3, 3, {50, 66, 9}, {70, 65, 1}},
    /* padded head dims (40-56 on the d64 kernel, 104-120 on d128's): TMA's zeros past the real columns, S^T and
     * dP^T stopping at the k-step holding them, nothing stored past them (dK, dV, dq_acc rows dim wide) */
    {"attention_bwd kernel=dkdv dtype=bf16 head_dim=40 causal=true path=wgmma", 70, 90, 2, 2, 1, 0, 0, 0, 0, 0, {0}, {0}},
    {"attention_bwd kernel=dkdv dtype=f16 head_dim=56 window=true softcap=true alibi=true dropout=true path=wgmma", 50, 75, 2, 1, 1, 20, 6, 0, 0.2, 0, {0}, {0}},
    {"attention_bwd kernel=dkdv dtype=f16 head_dim=120 causal=true varlen=true path=wgmma", 1, 1, 2, 2, 1, 0, 0, 0, 0, 2, {40, 65}, {70, 30}},
};

static void test_emulator(void) {
    for (size_t i = 0; i < sizeof ROWS / sizeof ROWS[0]; i++) {
        if (attn_case_sampled_out(0, i)) continue; /* (the sanitizer build: one problem in four) */
        const row *r = &ROWS[i];
        char name[400];
        char shape[120];
        if (r->nseq) {
            int at = snprintf(shape, sizeof shape, "sequences");
            for (int k = 0; k < r->nseq && at < (int)sizeof shape; k++) at += snprintf(shape + at, sizeof shape - (size_t)at, " %dx%d", r->lq[k], r->lk[k]);
        } else {
            snprintf(shape, sizeof shape, "seq %d x %d, batch %d", r->seq_q, r->seq_k, r->batch);
        }
        snprintf(name, sizeof name, "%s sm_90a: %s, heads %d:%d%s%s: dQ, dK, dV vs float64", r->spec + 26, shape, r->heads_q, r->heads_kv,
                 r->dropout > 0 ? ", dropout" : "", r->twice ? ", run twice" : "");
        TEST_BEGIN(name);
        kiln_error err = {0};
        long bad = 0;
        kiln_status st = run_case(gen, emu, r, &bad, NULL, &err);
        CHECK(st == KILN_OK, "%s", err.msg);
        CHECK(st != KILN_OK || bad == 0, "%ld bad: %s", bad, err.msg);
        TEST_END();
    }
}

/* dQ (deterministic=false) by FA3's writer, TMA reduce-adds of staging tiles (no atomics; 256-column tiles: half-panel
 * tiles, wave 23), since wave 24 the softcap with ALiBi at d128 and with causal=top_left on 256-column tiles too (they
 * took the atomics: the writer spilled there), whose dS offsets are made in the tile loop from a shuffle of the thread
 * index (shfl.sync.bfly by 0: present there only); two consumer warpgroups (384 threads) but with dropout, or the
 * softcap with varlen, at d128 (256: one). */
/* Whether the PTX holds a shfl.sync.bfly by lane offset 0 (each thread's own value: the dS offsets remade in the tile
 * loop, lib/attn_bwd_wgmma.lua's remade_ds). */
static int own_lane_shuffle(const char *ptx) {
    for (const char *at = strstr(ptx, "shfl.sync.bfly.b32"); at; at = strstr(at + 1, "shfl.sync.bfly.b32")) {
        const char *c = at + strlen("shfl.sync.bfly.b32");
        c += strspn(c, " \t");
        for (int k = 0; k < 2; k++) { /* (the two registers, "%rN, ") */
            if (strncmp(c, "%r", 2)) break;
            c += 2 + strspn(c + 2, "0123456789");
            if (strncmp(c, ", ", 2)) break;
            c += 2;
        }
        if (!strncmp(c, "0, 31, -1;", 10)) return 1;
    }
    return 0;
}

static void picked(const char *spec, const char *ptx) {
    int atomics = strstr(ptx, "atom.global.add.f32") || strstr(ptx, "red.global.add.f32");
    int reduce = strstr(ptx, "cp.reduce.async.bulk.tensor.4d.global.shared::cta.add.tile.bulk_group") ||
                 strstr(ptx, "cp.reduce.async.bulk.tensor.3d.global.shared::cta.add.tile.bulk_group"); /* (varlen: 3-D) */
    const char *hd = strstr(spec, "head_dim=");
    int d128 = hd && atoi(hd + 9) > 64 && atoi(hd + 9) <= 128, sc = strstr(spec, "softcap=true") != NULL, dr = strstr(spec, "dropout=true") != NULL; /* (104-120 run d128's) */
    const char *vd = strstr(spec, "v_head_dim=");
    int wide = (hd && atoi(hd + 9) > 128) || (vd && atoi(vd + 11) > 128); /* (256-column tiles) */
    int dq = !strstr(spec, "deterministic=true");
    int remade = (d128 && sc && strstr(spec, "alibi=true")) || (wide && sc && strstr(spec, "causal=top_left"));
    CHECK(!atomics, "%s: dQ's atomics present", spec);
    CHECK(reduce == dq, "%s: dQ's TMA reduce-add %s", spec, reduce ? "present" : "absent");
    int own = own_lane_shuffle(ptx);
    CHECK(own == (dq && remade), "%s: the dS offsets' shuffle of the thread index %s", spec, own ? "present" : "absent");
    CHECK(!reduce || strstr(ptx, "kiln.meta tmap tm_dq dq_acc") != NULL, "%s: no tm_dq map over dq_acc", spec);
    int one = d128 && (dr || (sc && strstr(spec, "varlen=true"))); /* (wave 15: the softcap alone runs two) */
    CHECK(strstr(ptx, one ? "kiln.meta block 256 1 1" : "kiln.meta block 384 1 1") != NULL, "%s: not %d consumer warpgroups", spec, one ? 1 : 2);
}

static void test_selection(void) {
    TEST_BEGIN("path=wgmma builds the wgmma dkdv on sm_90a for the specs it covers (two consumer warpgroups but where one fits); path=auto keeps mma.sync there; refusals name the rule");
    static const sm90a_pick cases[] = {
        {"attention_bwd kernel=dkdv dtype=bf16 head_dim=64 path=wgmma", SM90A, 1},
        {"attention_bwd kernel=dkdv dtype=f16 head_dim=128 causal=true window=true alibi=true path=wgmma", SM90A, 1},
        {"attention_bwd kernel=dkdv dtype=bf16 head_dim=64 deterministic=true path=wgmma", SM90A, 1},
        {"attention_bwd kernel=dkdv dtype=f16 head_dim=64 causal=true dropout=true path=wgmma", SM90A, 1},
        {"attention_bwd kernel=dkdv dtype=bf16 head_dim=128 causal=true varlen=true path=wgmma", SM90A, 1},
        {"attention_bwd kernel=dkdv dtype=f16 head_dim=128 deterministic=true path=wgmma", SM90A, 1},
        {"attention_bwd kernel=dkdv dtype=bf16 head_dim=128 causal=true dropout=true path=wgmma", SM90A, 1},
        {"attention_bwd kernel=dkdv dtype=bf16 head_dim=64 softcap=true path=wgmma", SM90A, 1},
        {"attention_bwd kernel=dkdv dtype=bf16 head_dim=64 window=true dropout=true path=wgmma", SM90A, 1},
        {"attention_bwd kernel=dkdv dtype=f16 head_dim=64 softcap=true dropout=true path=wgmma", SM90A, 1},
        {"attention_bwd kernel=dkdv dtype=bf16 head_dim=128 causal=true window=true softcap=true alibi=true path=wgmma", SM90A, 1},
        {"attention_bwd kernel=dkdv dtype=f16 head_dim=128 alibi=true dropout=true path=wgmma", SM90A, 1},
        {"attention_bwd kernel=dkdv dtype=bf16 head_dim=112 causal=true alibi=true dropout=true path=wgmma", SM90A, 1},
        {"attention_bwd kernel=dkdv dtype=bf16 head_dim=128 causal=true softcap=true dropout=true path=wgmma", SM90A, 1},
        {"attention_bwd kernel=dkdv dtype=f16 head_dim=112 softcap=true dropout=true path=wgmma", SM90A, 1},
        {"attention_bwd kernel=dkdv dtype=bf16 head_dim=256 causal=true dropout=true path=wgmma", SM90A, 1}, /* (two on one key block) */
        {"attention_bwd kernel=dkdv dtype=f16 head_dim=192 causal=top_left softcap=true path=wgmma", SM90A, 1}, /* (dS offsets remade) */
        {"attention_bwd kernel=dkdv dtype=bf16 head_dim=192 causal=true softcap=true path=wgmma", SM90A, 1},
        {"attention_bwd kernel=dkdv dtype=bf16 head_dim=64", SM90A, 0}, /* auto: mma.sync until a GPU ran wgmma */
        {"attention_bwd kernel=dq dtype=bf16 head_dim=64", SM90A, 0},
    };
    sm90a_check_picks(gen, cases, sizeof cases / sizeof cases[0], picked);
    static const sm90a_refusal refused[] = {
        {"attention_bwd kernel=dkdv dtype=bf16 head_dim=64 path=wgmma", 90, "valid targets: sm_90a"},
        {"attention_bwd kernel=dkdv dtype=bf16 head_dim=64 path=wgmma", 80, "valid targets: sm_90a"},
        {"attention_bwd kernel=dq dtype=bf16 head_dim=64 path=wgmma", SM90A, "path=wgmma applies to kernel=dkdv only"},
        {"attention_bwd kernel=prep dtype=bf16 head_dim=64 path=wgmma", SM90A, "path=wgmma applies to kernel=dkdv only"},
        {"attention_bwd kernel=dkdv dtype=bf16 head_dim=256 softcap=true dropout=true path=wgmma", SM90A, "head_dim=256 v_head_dim=256 with softcap=true and dropout=true"},
        {"attention_bwd kernel=dkdv dtype=f32 head_dim=64 path=wgmma", SM90A, "dtype f32"},
        {"attention_bwd kernel=dkdv dtype=bf16 out=f32 head_dim=64 path=wgmma", SM90A, "out=f32 (out = dtype only)"},
    };
    sm90a_check_refusals(gen, refused, sizeof refused / sizeof refused[0]);
    TEST_END();
}

/* A case's dropout_mask tensor (NULL when it has none), *n its entries. */
static const int32_t *case_mask(kiln_case *c, size_t *n) {
    void *ptr = NULL;
    *n = 0;
    if (!c || kiln_case_family(c)->tensor(c, "dropout_mask", &ptr, n) != 0) return NULL;
    *n /= sizeof(int32_t);
    return ptr;
}

/* dropout: the wgmma dkdv's keep mask equals the FA2 backward's (path=auto, mma.sync dkdv) and the wgmma forward's
 * for the same seed and offset, bit for bit on every (query, key) both wrote. */
static void test_dropout_mask(void) {
    TEST_BEGIN("dropout: the wgmma dkdv's mask = the FA2 backward's = the wgmma forward's (same seed, offset)");
    static const char *const specs[] = {
        "attention_bwd kernel=dkdv dtype=f16 head_dim=64 causal=true dropout=true dropout_mask=true path=wgmma",
        "attention_bwd kernel=dkdv dtype=f16 head_dim=64 causal=true dropout=true dropout_mask=true",
        "attention dtype=f16 head_dim=64 causal=true dropout=true dropout_mask=true path=wgmma",
    };
    kiln_case *c[3] = {0};
    for (int i = 0; i < 3; i++) {
        row r = {specs[i], 75, 150, 2, 1, 2, 0, 0, 0, 0.35, 0, {0}, {0}};
        long bad = 0;
        kiln_error err = {0};
        kiln_status st = run_case(gen, emu, &r, &bad, &c[i], &err);
        CHECK(st == KILN_OK && bad == 0, "%s: %s", specs[i], err.msg);
    }
    size_t n[3];
    const int32_t *m[3];
    for (int i = 0; i < 3; i++) m[i] = case_mask(c[i], &n[i]);
    for (int i = 1; i < 3; i++) {
        long both = 0, differ = 0;
        for (size_t j = 0; m[0] && m[i] && n[0] == n[i] && j < n[0]; j++)
            if (m[0][j] != -1 && m[i][j] != -1) both++, differ += m[0][j] != m[i][j];
        CHECK(m[0] && m[i] && n[0] == n[i] && both > 1000 && differ == 0, "%s: %ld of %ld mask entries differ", specs[i], differ, both);
    }
    for (int i = 0; i < 3; i++) kiln_case_free(c[i]);
    TEST_END();
}

/* run_case as sm90a_planted runs it. */
static kiln_status run_row(kiln_gen *g, kiln_emu *e, const void *r, long *bad, kiln_error *err) {
    return run_case(g, e, (const row *)r, bad, NULL, err);
}

/* Planted bugs: a copy of the templates with one edit to lib/attn_bwd_wgmma.lua; each must fail a case. */
static void test_planted(void) {
    static const struct {
        const char *what, *from, *to;
        row r;
    } bugs[] = {
        {"dO read K-major for dV", "acc = DV, trans_b = true", "acc = DV, trans_b = false",
         {"attention_bwd kernel=dkdv dtype=bf16 head_dim=64 path=wgmma", 64, 64, 1, 1, 1, 0, 0, 0, 0, 0, {0}, {0}}},
        {"delta not subtracted from dP", "dS[i] = Ps[i] * (dP[i + 1] - dl[c])", "dS[i] = Ps[i] * dP[i + 1]",
         {"attention_bwd kernel=dkdv dtype=f16 head_dim=64 path=wgmma", 40, 40, 1, 1, 1, 0, 0, 0, 0, 0, {0}, {0}}},
        {"dK not scaled", "dkv[i + 1]:get() * p.scale, dkv[i + 2]:get() * p.scale", "dkv[i + 1]:get(), dkv[i + 2]:get()",
         {"attention_bwd kernel=dkdv dtype=f16 head_dim=64 path=wgmma", 40, 40, 1, 1, 1, 0, 0, 0, 0, 0, {0}, {0}}},
        {"causal visibility not applied", "pv = b:select(vis, pv, 0.0)", "pv = pv",
         {"attention_bwd kernel=dkdv dtype=bf16 head_dim=64 causal=true path=wgmma", 70, 70, 1, 1, 1, 0, 0, 0, 0, 0, {0}, {0}}},
        {"the last, partial query tile dropped", "local nqt = b:max(q_end - q_start + (BM - 1), 0) // BM",
         "local nqt = b:max(q_end - q_start, 0) // BM", {"attention_bwd kernel=dkdv dtype=f16 head_dim=64 path=wgmma", 100, 64, 1, 1, 1, 0, 0, 0, 0, 0, {0}, {0}}},
        {"GQA: only the group's first query head", "local group = p.heads_q // p.heads_kv", "local group = b:min(p.heads_q // p.heads_kv, 1)",
         {"attention_bwd kernel=dkdv dtype=bf16 head_dim=64 path=wgmma", 40, 40, 2, 1, 1, 0, 0, 0, 0, 0, {0}, {0}}},
        {"the second consumer warpgroup reads the first's K", "local my_k, my_v = at(ok, uw * UQ), at(ov, uw * UV)",
         "local my_k, my_v = at(ok, 0), at(ov, uw * UV)", {"attention_bwd kernel=dkdv dtype=bf16 head_dim=64 path=wgmma", 40, 128, 1, 1, 1, 0, 0, 0, 0, 0, {0}, {0}}},
        {"second d128 panel of K skipped in S^T", "a = desc(my_k + off, 16)", "a = desc(my_k + 16 * (j % 4), 16)",
         {"attention_bwd kernel=dkdv dtype=f16 head_dim=128 path=wgmma", 64, 64, 1, 1, 1, 0, 0, 0, 0, 0, {0}, {0}}},
        {"softcap's derivative left out", "* (1.0 - th * th)", "",
         {"attention_bwd kernel=dkdv dtype=bf16 head_dim=64 softcap=true path=wgmma", 40, 40, 1, 1, 1, 0, 0, 0, 0, 0, {0}, {0}}},
        {"dP^T read before its wgmma is waited (wait_group 2)", "dP = b:wgmma_wait(1, dP)", "dP = b:wgmma_wait(2, dP)",
         {"attention_bwd kernel=dkdv dtype=bf16 head_dim=64 path=wgmma", 40, 40, 1, 1, 1, 0, 0, 0, 0, 0, {0}, {0}}},
        {"consumer on the wrong parity of full", "(it // ns) % 2)", "(it // ns + 1) % 2)",
         {"attention_bwd kernel=dkdv dtype=bf16 head_dim=64 path=wgmma", 130, 64, 1, 1, 1, 0, 0, 0, 0, 0, {0}, {0}}},
        {"producer not waiting for a free stage", "b:if_(b:ge(it, ns), function()", "b:if_(b:ge(it, 1000000), function()",
         {"attention_bwd kernel=dkdv dtype=bf16 head_dim=64 path=wgmma", 200, 64, 1, 1, 1, 0, 0, 0, 0, 0, {0}, {0}}},
        {"lse and delta read from the wrong columns of the stage", "(c & 1) + 2 * q))", "(c & 1)))",
         {"attention_bwd kernel=dkdv dtype=bf16 head_dim=64 path=wgmma", 40, 40, 1, 1, 1, 0, 0, 0, 0, 0, {0}, {0}}},
        {"full barriers not counting the producer threads' lse/delta rows", "b:mbarrier_init(full + 2 * s, 1 + 128)",
         "b:mbarrier_init(full + 2 * s, 1)", {"attention_bwd kernel=dkdv dtype=bf16 head_dim=64 path=wgmma", 130, 64, 1, 1, 1, 0, 0, 0, 0, 0, {0}, {0}}},
        {"dS stored for dQ without the 128B swizzle's XOR", "((2 * w + rr) ~ (2 * q + e)) * 8", "(2 * w + rr) * 8",
         {"attention_bwd kernel=dkdv dtype=bf16 head_dim=64 path=wgmma", 64, 64, 1, 1, 1, 0, 0, 0, 0, 0, {0}, {0}}},
        {"the remade dS offsets (the softcap with ALiBi at d128): q from the neighbouring thread's index", "w, g, q = own // 32, (own % 32) // 4, own % 4",
         "w, g, q = own // 32, (own % 32) // 4, (own + 1) % 4",
         {"attention_bwd kernel=dkdv dtype=f16 head_dim=128 window=true softcap=true alibi=true path=wgmma", 40, 64, 1, 1, 1, 30, 4, 0, 0, 0, {0}, {0}}},
        {"dQ's second 64 columns read K's first panel", "my_k + hp * PANEL + 1024 * j", "my_k + 1024 * j",
         {"attention_bwd kernel=dkdv dtype=f16 head_dim=128 path=wgmma", 40, 64, 1, 1, 1, 0, 0, 0, 0, 0, {0}, {0}}},
        /* dQ's writer (TMA reduce-adds of the staging tiles) */
        {"dQ's staging tile: fragment rows g + 8 stored over rows g", "((j - part * nb) * 8 * BM + (w * 16 + g + 8 * r) * 8 + 2 * q)", "((j - part * nb) * 8 * BM + (w * 16 + g) * 8 + 2 * q)",
         {"attention_bwd kernel=dkdv dtype=f16 head_dim=64 path=wgmma", 40, 64, 1, 1, 1, 0, 0, 0, 0, 0, {0}, {0}}},
        {"dQ's reduce-add a tile of rows off (q0 + 64)", "{ c, q0, h, bi }", "{ c, q0 + 64, h, bi }",
         {"attention_bwd kernel=dkdv dtype=f16 head_dim=64 path=wgmma", 130, 64, 1, 1, 1, 0, 0, 0, 0, 0, {0}, {0}}},
        {"dQ's 8-column boxes added at their neighbours' columns", "local c = col + 8 * j", "local c = col + 8 * (j ~ 1)",
         {"attention_bwd kernel=dkdv dtype=f16 head_dim=64 path=wgmma", 130, 64, 1, 1, 1, 0, 0, 0, 0, 0, {0}, {0}}},
        {"dQ's staging tile rewritten with no wait_group.read for the last reduce", "b:bulk_wait(0, { read = true })", "local _ = 0",
         {"attention_bwd kernel=dkdv dtype=f16 head_dim=128 path=wgmma", 40, 64, 1, 1, 1, 0, 0, 0, 0, 0, {0}, {0}}},
        {"dQ's reduces not waited for before the exit", "if cfg.dq_tma then b:if_(b:eq(tc, 0), function() b:bulk_wait(0) end) end",
         "", {"attention_bwd kernel=dkdv dtype=f16 head_dim=64 path=wgmma", 40, 64, 1, 1, 1, 0, 0, 0, 0, 0, {0}, {0}}},
        {"the dS barrier waited on the wrong parity", "b:mbarrier_wait(dsbar + 2 * uw, it % 2)", "b:mbarrier_wait(dsbar + 2 * uw, (it + 1) % 2)",
         {"attention_bwd kernel=dkdv dtype=f16 head_dim=64 path=wgmma", 130, 64, 1, 1, 1, 0, 0, 0, 0, 0, {0}, {0}}},
        /* two consumer warpgroups at d128, the uniform offsets (lib/attn_bwd_wgmma_regs.lua) */
        {"Q and dO always from stage 0", "local qs, dos = at(oq, s * UQ), at(odo, s * UV)", "local qs, dos = at(oq, 0), at(odo, 0)",
         {"attention_bwd kernel=dkdv dtype=bf16 head_dim=64 path=wgmma", 130, 64, 1, 1, 1, 0, 0, 0, 0, 0, {0}, {0}}},
        {"d128: the second consumer warpgroup's dQ reads the first's dS", "local my_ds = at(ods, uw * (PANEL * eb // 16))", "local my_ds = at(ods, 0)",
         {"attention_bwd kernel=dkdv dtype=f16 head_dim=128 path=wgmma", 40, 128, 1, 1, 1, 0, 0, 0, 0, 0, {0}, {0}}},
    };
    /* dropout (lib/attn_bwd_wgmma_keys.lua and its hooks) */
    static const struct {
        const char *what, *file, *from, *to;
        row r;
    } dbugs[] = {
        {"dropout: the pair's second query (Q + 8) given Q's word", "lib/attn_bwd_wgmma_keys.lua", "b:select(odd, k[4], k[3]), 1 << (i + 4)",
         "b:select(odd, k[2], k[1]), 1 << (i + 4)",
         {"attention_bwd kernel=dkdv dtype=f16 head_dim=64 dropout=true path=wgmma", 40, 40, 1, 1, 1, 0, 0, 0, 0.3, 0, {0}, {0}}},
        {"dropout: the neighbouring key's half shuffled from the wrong lane", "lib/attn_bwd_wgmma_keys.lua", "theirs << 16, theirs), 4)",
         "theirs << 16, theirs), 8)", {"attention_bwd kernel=dkdv dtype=f16 head_dim=64 dropout=true path=wgmma", 40, 40, 1, 1, 1, 0, 0, 0, 0.3, 0, {0}, {0}}},
        {"dropout: query tiles not started at a multiple of 16", "lib/attn_bwd_wgmma_keys.lua", "local first = (q_start // 16) * 16", "local first = q_start",
         {"attention_bwd kernel=dkdv dtype=bf16 head_dim=64 causal=true dropout=true path=wgmma", 70, 155, 1, 1, 1, 0, 0, 0, 0.3, 0, {0}, {0}}},
        {"dropout: dV not scaled by 1 / (1 - p)", "lib/attn_bwd_wgmma_keys.lua", "return x * d.rp", "return x",
         {"attention_bwd kernel=dkdv dtype=f16 head_dim=64 dropout=true path=wgmma", 40, 40, 1, 1, 1, 0, 0, 0, 0.3, 0, {0}, {0}}},
        {"dropout: dV takes the dropped entries", "lib/attn_bwd_wgmma_keys.lua", "a[i] = b:max(P[i], 0.0)", "a[i] = b:abs(P[i])",
         {"attention_bwd kernel=dkdv dtype=f16 head_dim=64 dropout=true path=wgmma", 40, 40, 1, 1, 1, 0, 0, 0, 0.3, 0, {0}, {0}}},
        {"dropout: a dropped entry's dS taken as 0 (not -P D)", "lib/attn_bwd_wgmma_keys.lua", "held * delta)", "0.0)",
         {"attention_bwd kernel=dkdv dtype=bf16 head_dim=64 dropout=true path=wgmma", 40, 40, 1, 1, 1, 0, 0, 0, 0.3, 0, {0}, {0}}},
        {"dropout: dP not scaled in dS", "lib/attn_bwd_wgmma_keys.lua", "held * (dp * d.rp - delta)", "held * (dp - delta)",
         {"attention_bwd kernel=dkdv dtype=bf16 head_dim=64 dropout=true path=wgmma", 40, 40, 1, 1, 1, 0, 0, 0, 0.3, 0, {0}, {0}}},
        {"dropout with the softcap: dV's A registers take the dropped entries (-P)", "lib/attn_bwd_wgmma.lua",
         "local a = keys.dv_operand(b, drop, { [0] = P[i - 1], [1] = P[i] })", "local a = { [0] = P[i - 1], [1] = P[i] }",
         {"attention_bwd kernel=dkdv dtype=f16 head_dim=64 softcap=true dropout=true path=wgmma", 40, 40, 1, 1, 1, 0, 0, 0, 0.3, 0, {0}, {0}}},
        {"softcap: dV's A registers take P (1 - tanh^2), dS's factor", "lib/attn_bwd_wgmma.lua", "{ [0] = P[i - 1], [1] = P[i] }",
         "{ [0] = Pd[i - 1], [1] = Pd[i] }", {"attention_bwd kernel=dkdv dtype=bf16 head_dim=128 softcap=true path=wgmma", 40, 40, 1, 1, 1, 0, 0, 0, 0, 0, {0}, {0}}},
        {"varlen: K/V boxes from the packed tensor's row 0, not the sequence's", "lib/attn_bwd_wgmma_keys.lua",
         "(which == \"q\" and p.q_at or p.k_at) + row", "(which == \"q\" and p.q_at or 0) + row",
         {"attention_bwd kernel=dkdv dtype=f16 head_dim=64 varlen=true path=wgmma", 1, 1, 1, 1, 1, 0, 0, 0, 0, 2, {20, 30}, {40, 50}}},
        {"varlen: Q/dO boxes from the packed tensor's row 0", "lib/attn_bwd_wgmma_keys.lua",
         "(which == \"q\" and p.q_at or p.k_at) + row", "(which == \"q\" and 0 or p.k_at) + row",
         {"attention_bwd kernel=dkdv dtype=f16 head_dim=64 varlen=true path=wgmma", 1, 1, 1, 1, 1, 0, 0, 0, 0, 2, {20, 30}, {40, 50}}},
        {"varlen: the next sequence's keys in a box not masked", "lib/attn_bwd_wgmma_keys.lua", "return b:lt(key, p.seq_k)", "return nil",
         {"attention_bwd kernel=dkdv dtype=bf16 head_dim=64 varlen=true path=wgmma", 1, 1, 1, 1, 1, 0, 0, 0, 0, 2, {30, 40}, {20, 50}}},
        {"padded head_dim: S^T stops a k-step short of the real columns", "lib/attn_bwd_wgmma.lua", "local kq, kv = spec.kq, (vdim + 15) // 16",
         "local kq, kv = spec.dim // 16, (vdim + 15) // 16", {"attention_bwd kernel=dkdv dtype=f16 head_dim=40 path=wgmma", 30, 40, 1, 1, 1, 0, 0, 0, 0, 0, {0}, {0}}},
        {"padded head_dim: dq_acc's map rows taken as the padded width", "lib/attn_bwd_wgmma.lua", "{ \"batch\", \"heads_q\", \"seq_q\", spec.head_dim }",
         "{ \"batch\", \"heads_q\", \"seq_q\", 64 }",
         {"attention_bwd kernel=dkdv dtype=f16 head_dim=40 path=wgmma", 30, 40, 2, 1, 1, 0, 0, 0, 0, 0, {0}, {0}}},
        {"padded head_dim taken as the real one (dK, dV stored past the real columns)", "lib/attn_bwd_wgmma.lua", "local dim, vdim, qp, vp = spec.dim, spec.vdim, spec.qp, spec.vp",
         "local dim, vdim, qp, vp = spec.head_dim, spec.head_dim, spec.qp, spec.vp", {"attention_bwd kernel=dkdv dtype=bf16 head_dim=48 path=wgmma", 30, 40, 2, 2, 1, 0, 0, 0, 0, 0, {0}, {0}}},
        {"a descriptor's offset taken as elements, not 16-byte units", "lib/attn_bwd_wgmma_regs.lua", "u = a.u + n * a.eb // 16",
         "u = a.u + n", {"attention_bwd kernel=dkdv dtype=bf16 head_dim=64 path=wgmma", 40, 64, 1, 1, 1, 0, 0, 0, 0, 0, {0}, {0}}},
        {"dropout: the Philox key's second word made warp-uniform from the first", "lib/attn_bwd_wgmma_keys.lua", "k1 = regs.uniform(b, d.k1)",
         "k1 = regs.uniform(b, d.k0)", {"attention_bwd kernel=dkdv dtype=bf16 head_dim=128 dropout=true path=wgmma", 40, 40, 1, 1, 1, 0, 0, 0, 0.3, 0, {0}, {0}}},
        {"dropout: the deterministic dq from a window's odd first key (lib/attn_bwd_mma.lua)", "lib/attn_bwd_mma.lua",
         "if io.drop and spec.window then kv_lo = (kv_lo // 2) * 2 end", "",
         {"attention_bwd kernel=dkdv dtype=f16 head_dim=64 causal=true window=true dropout=true deterministic=true path=wgmma", 100, 90, 1, 1, 1, 25, 3, 0, 0.4, 0, {0}, {0}}},
    };
    char root[512];
    sm90a_root(__FILE__, root, sizeof root);
    for (size_t i = 0; i < sizeof bugs / sizeof bugs[0]; i++)
        sm90a_planted(dir, root, bugs[i].what, "lib/attn_bwd_wgmma.lua", bugs[i].from, bugs[i].to, 0, run_row, &bugs[i].r, NULL);
    for (size_t i = 0; i < sizeof dbugs / sizeof dbugs[0]; i++)
        sm90a_planted(dir, root, dbugs[i].what, dbugs[i].file, dbugs[i].from, dbugs[i].to, 0, run_row, &dbugs[i].r, NULL);
    /* dQ's writer under the race mode (KILN_EMU_RACE=1: the reduce's issue reads the staging tile): with no named
     * barrier between the warpgroup's stores and thread 0's issue, other threads' stores race with that read */
    const char *race = getenv("KILN_EMU_RACE");
    char *saved = race ? strdup(race) : NULL;
    setenv("KILN_EMU_RACE", "1", 1);
    static const row rr = {"attention_bwd kernel=dkdv dtype=bf16 head_dim=64 path=wgmma", 64, 64, 1, 1, 1, 0, 0, 0, 0, 0, {0}, {0}};
    sm90a_planted(dir, root, "dQ's reduce issued with no barrier after the staging tile's stores (race mode)", "lib/attn_bwd_wgmma.lua",
                  "b:fence_proxy_async()\n                b:bar_sync(1 + uw, 128)\n", "b:fence_proxy_async()\n", 0, run_row, &rr, NULL);
    /* (wave 23) d256's half-panel tiles: with no named barrier after thread 0's wait_group.read, the second half's
     * stores race with the first half's reduce reading the tile */
    static const row rr256 = {"attention_bwd kernel=dkdv dtype=bf16 head_dim=256 causal=true path=wgmma", 70, 64, 1, 1, 1, 0, 0, 0, 0, 0, {0}, {0}};
    sm90a_planted(dir, root, "d256: dQ's second half-panel stored with no barrier after the wait_group.read (race mode)", "lib/attn_bwd_wgmma.lua",
                  "{ read = true }) end)\n                  b:bar_sync(1 + uw, 128)\n", "{ read = true }) end)\n", 0, run_row, &rr256, NULL);
    if (saved) setenv("KILN_EMU_RACE", saved, 1), free(saved);
    else unsetenv("KILN_EMU_RACE");
    sm90a_planted_done(dir);
}

/* The profile of the (atomic) dkdv kernel, bf16 causal (bottom-right, shift 70), seq_q 130 x seq_k 200, 2 heads: blocks
 * of 128 keys (two consumer warpgroups of 64), 2 per head; block 0 (keys 0..127) visits the query tiles from row 0
 * (3 tiles: 64, 64, 2 rows), block 1 (keys 128..199) from row 58 (2 tiles): 10 block-tiles, 8 consumer warps each.
 * Per consumer warp and tile at d64: fence, 4 S^T, commit, 4 dP^T, commit, wait; fence, 4 dV, commit, wait; fence,
 * 4 dK, commit, 2 waits; fence, 4 dQ, commit, wait (34 wgmma warp instructions), 32 ex2 (P^T), 32 ld.shared (the
 * stage's lse and delta), 32 st.shared (dS for dQ), 1 shfl (the warpgroup and stage made warp-uniform); at d128 8
 * S^T and 8 dP^T, dQ twice (49 wgmma); per block-tile one st.shared per producer warp (lse/delta), per block one
 * shfl and one bar.sync per warp (its role; the barriers' set-up); TMA per block: K's and V's d/64 panels of each
 * consumer warpgroup, then Q's and dO's per tile. dQ's writer, per 64-column panel of dQ (d64: 1, d128: 2): each
 * consumer warp 2 bar.sync (the staging tile free, then written) and 16 st.shared (its fragment, 2 f32 each), each
 * consumer warpgroup's thread 0 one wait_group.read and one commit_group (TMA) and 8 reduce-adds (tma.reduce: the
 * staging tile's 8 boxes of 64 rows x 8 columns), and per block one wait_group a warpgroup before the exit; no
 * atomics. Shared-memory stores (dS's, dQ's staging tile's, the producer's lse/delta) without a bank conflict (the
 * staging tile as one 64 x 64 box of 256-byte rows: 4 wavefronts a phase, 7680 conflicts at d64). */
static void test_profile(void) {
    static const struct {
        const char *spec;
        int wgmma, st_shared, bar, tma_block, tma_tile, reduce; /* per warp-tile x 3; per block; per block-tile x 2 */
    } P[] = {
        {"attention_bwd kernel=dkdv dtype=bf16 head_dim=64 causal=true path=wgmma", 34, 32 + 16, 2, 4 + 2, 2 + 4, 2 * 8},
        {"attention_bwd kernel=dkdv dtype=bf16 head_dim=128 causal=true path=wgmma", 49, 32 + 32, 4, 8 + 2, 4 + 8, 4 * 8},
    };
    for (size_t k = 0; k < sizeof P / sizeof P[0]; k++) {
        char name[200];
        snprintf(name, sizeof name, "profile of the %s 130 x 200: wgmma, TMA, ex2, shared, shfl and barrier warp instructions", P[k].spec + 26);
        TEST_BEGIN(name);
        kiln_emu *pe = NULL;
        kiln_error err = {0};
        kiln_case *c = NULL;
        kiln_status st = kiln_emu_create(&pe, &err);
        if (st == KILN_OK) kiln_emu_set_profile(pe, 1);
        row r = {P[k].spec, 130, 200, 2, 2, 1, 0, 0, 0, 0, 0, {0}, {0}};
        long bad = 0;
        if (st == KILN_OK) st = run_case(gen, pe, &r, &bad, &c, &err);
        CHECK(st == KILN_OK && bad == 0, "%s", err.msg);
        if (c) {
            kiln_emu_profile p;
            st = kiln_emu_profile_get(kiln_case_kernel(c), &p, &err); /* (the kernel the spec names: dkdv) */
            CHECK(st == KILN_OK, "%s", err.msg);
            if (st == KILN_OK) {
                const unsigned long long blocks = 4, block_tiles = 10, warp_tiles = 8 * block_tiles;
                const unsigned long long want[][2] = {
                    {KILN_PROF_WGMMA, warp_tiles * (unsigned long long)P[k].wgmma},
                    {KILN_PROF_ST_SHARED, warp_tiles * (unsigned long long)P[k].st_shared + block_tiles * 4},
                    {KILN_PROF_LD_SHARED, warp_tiles * 32},
                    {KILN_PROF_TMA, blocks * (unsigned long long)P[k].tma_block + block_tiles * (unsigned long long)P[k].tma_tile},
                    {KILN_PROF_EX2, warp_tiles * 32},
                    {KILN_PROF_SHFL, warp_tiles + blocks * 12},
                    {KILN_PROF_BARRIER, warp_tiles * (unsigned long long)P[k].bar + blocks * 12},
                    {KILN_PROF_TMA_REDUCE, block_tiles * (unsigned long long)P[k].reduce},
                };
                static const char *const what[KILN_PROF_CLASSES] = {[KILN_PROF_WGMMA] = "wgmma", [KILN_PROF_ST_SHARED] = "st.shared",
                    [KILN_PROF_LD_SHARED] = "ld.shared", [KILN_PROF_TMA] = "TMA", [KILN_PROF_EX2] = "ex2", [KILN_PROF_SHFL] = "shfl",
                    [KILN_PROF_BARRIER] = "bar.sync", [KILN_PROF_TMA_REDUCE] = "tma.reduce"};
                for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
                    CHECK(p.inst[want[i][0]] == want[i][1], "%s %llu, want %llu", what[want[i][0]], (unsigned long long)p.inst[want[i][0]], want[i][1]);
                CHECK(p.smem[KILN_SMEM_ST].conflicts == 0, "st.shared: %llu bank conflicts (%llu wavefronts for %llu), want none",
                      (unsigned long long)p.smem[KILN_SMEM_ST].conflicts, (unsigned long long)p.smem[KILN_SMEM_ST].wavefronts,
                      (unsigned long long)p.smem[KILN_SMEM_ST].ideal);
                if (getenv("KILN_TEST_VERBOSE"))
                    printf("     wgmma %llu, tma %llu, mbarrier %llu, ex2 %llu, ld.global %llu, other %llu (hot loop %llu) warp instructions\n",
                           (unsigned long long)p.inst[KILN_PROF_WGMMA], (unsigned long long)p.inst[KILN_PROF_TMA],
                           (unsigned long long)p.inst[KILN_PROF_MBARRIER], (unsigned long long)p.inst[KILN_PROF_EX2],
                           (unsigned long long)p.inst[KILN_PROF_LD_GLOBAL], (unsigned long long)p.inst[KILN_PROF_OTHER],
                           (unsigned long long)p.hot_inst[KILN_PROF_OTHER]);
            }
            kiln_case_free(c);
        }
        if (pe) kiln_emu_destroy(pe);
        TEST_END();
    }
}

/* dropout's profile on the same problem (p = 0.2): the wgmma and ex2 counts unchanged (the query tiles start at
 * 0 and 48, still 3 and 2 tiles), three more shuffles per consumer warp and tile (the key pair's halves of the keep
 * bits, the Philox key's two words made warp-uniform). */
static void test_profile_dropout(void) {
    TEST_BEGIN("profile of the bf16 d64 causal dropout dkdv 130 x 200: wgmma and ex2 as without dropout, three more shfl a warp-tile");
    kiln_emu *pe = NULL;
    kiln_error err = {0};
    kiln_case *c = NULL;
    kiln_status st = kiln_emu_create(&pe, &err);
    if (st == KILN_OK) kiln_emu_set_profile(pe, 1);
    row r = {"attention_bwd kernel=dkdv dtype=bf16 head_dim=64 causal=true dropout=true path=wgmma", 130, 200, 2, 2, 1, 0, 0, 0, 0.2, 0, {0}, {0}};
    long bad = 0;
    if (st == KILN_OK) st = run_case(gen, pe, &r, &bad, &c, &err);
    CHECK(st == KILN_OK && bad == 0, "%s", err.msg);
    if (c) {
        kiln_emu_profile p;
        st = kiln_emu_profile_get(kiln_case_kernel(c), &p, &err);
        CHECK(st == KILN_OK, "%s", err.msg);
        if (st == KILN_OK) {
            const unsigned long long warp_tiles = 8 * 10;
            CHECK(p.inst[KILN_PROF_WGMMA] == warp_tiles * 34, "wgmma %llu, want %llu", (unsigned long long)p.inst[KILN_PROF_WGMMA], warp_tiles * 34);
            CHECK(p.inst[KILN_PROF_EX2] == warp_tiles * 32, "ex2 %llu, want %llu", (unsigned long long)p.inst[KILN_PROF_EX2], warp_tiles * 32);
            const unsigned long long shfl = warp_tiles * 4 + 4 * 12; /* (the key pair's, the Philox key's two words and the tile's; a block's 12 warps' role) */
            CHECK(p.inst[KILN_PROF_SHFL] == shfl, "shfl %llu, want %llu", (unsigned long long)p.inst[KILN_PROF_SHFL], shfl);
            if (getenv("KILN_TEST_VERBOSE"))
                printf("     hot loop: other %llu warp instructions over %llu warp-tiles\n", (unsigned long long)p.hot_inst[KILN_PROF_OTHER], warp_tiles);
        }
        kiln_case_free(c);
    }
    if (pe) kiln_emu_destroy(pe);
    TEST_END();
}

/* ptxas sm_90a over the path's variants (a sample here, every one under KILN_TEST_FULL=1): 0 spills, no C7508
 * (a setmaxnreg ptxas ignored), no wgmma serialized, lint clean. */
static void test_ptxas(void) {
    static const char *const quick[] = {
        "attention_bwd kernel=dkdv dtype=bf16 head_dim=64 path=wgmma",
        "attention_bwd kernel=dkdv dtype=f16 head_dim=128 causal=true path=wgmma",
        "attention_bwd kernel=dkdv dtype=f16 head_dim=64 grad=f32 causal=top_left window=true softcap=true alibi=true path=wgmma",
        "attention_bwd kernel=dkdv dtype=bf16 head_dim=128 grad=f32 causal=true window=true alibi=true path=wgmma",
        "attention_bwd kernel=dkdv dtype=bf16 head_dim=128 causal=true deterministic=true path=wgmma",
        "attention_bwd kernel=dkdv dtype=bf16 head_dim=64 causal=true dropout=true path=wgmma",
        "attention_bwd kernel=dkdv dtype=f16 head_dim=64 grad=f32 causal=true window=true softcap=true alibi=true dropout=true path=wgmma",
        "attention_bwd kernel=dkdv dtype=bf16 head_dim=128 causal=true varlen=true path=wgmma",
        "attention_bwd kernel=dkdv dtype=f16 head_dim=64 causal=true varlen=true dropout=true path=wgmma",
        "attention_bwd kernel=dkdv dtype=bf16 head_dim=40 causal=true path=wgmma",
        "attention_bwd kernel=dkdv dtype=f16 head_dim=128 causal=true window=true dropout=true path=wgmma",
        "attention_bwd kernel=dkdv dtype=f16 head_dim=120 causal=true window=true alibi=true varlen=true path=wgmma",
        "attention_bwd kernel=dkdv dtype=bf16 head_dim=128 causal=true window=true softcap=true alibi=true path=wgmma",
    };
    static char full[288][230];
    const char *const *specs = quick;
    int n = (int)(sizeof quick / sizeof quick[0]);
    if (getenv("KILN_TEST_FULL")) {
        static const char *dts[] = {"f16", "bf16"}, *causal[] = {"false", "true", "top_left"};
        static const char *keys[] = {"", " window=true alibi=true", " softcap=true", " window=true softcap=true alibi=true grad=f32",
                                     " deterministic=true", " window=true softcap=true alibi=true deterministic=true"};
        static const char *ptrs[288];
        n = 0;
        for (int a = 0; a < 2; a++)
            for (int d = 64; d <= 128; d *= 2)
                for (int c = 0; c < 3; c++)
                    for (int k = 0; k < 6; k++)
                        for (int dr = 0; dr < 2; dr++)
                            for (int vl = 0; vl < 2; vl++) {
                                snprintf(full[n], sizeof full[n], "attention_bwd kernel=dkdv dtype=%s head_dim=%d causal=%s%s%s%s path=wgmma", dts[a],
                                         d, causal[c], keys[k], dr ? " dropout=true" : "", vl ? " varlen=true" : "");
                                ptrs[n] = full[n];
                                n++;
                            }
        specs = ptrs;
    }
    const char *ptxas = ptxas_path();
    TEST_BEGIN("ptxas sm_90a: the wgmma dkdv variants assemble, 0 spills, no C7508, no wgmma serialized; lint clean");
    if (!ptxas) printf("  (no ptxas: lint only)\n");
    sm90a_ptxas_check(gen, dir, specs, n, ptxas, sm90a_no_serialized_wgmma);
    TEST_END();
}

int main(void) {
    if (!sm90a_setup(dir, &gen, &emu, "attention_bwd_wgmma")) return 1;
    test_emulator();
    test_selection();
    test_dropout_mask();
    test_planted();
    test_profile();
    test_profile_dropout();
    test_ptxas();
    return sm90a_finish(dir, gen, emu, "attention_bwd_wgmma");
}
