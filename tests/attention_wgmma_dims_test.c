/* tests/attention_wgmma_dims_test.c - the head dims of the sm_90a attention forward (path=wgmma) beyond 64/128/256
 * (templates/lib/attn_wgmma_dims.lua: d32 and d96, the padded dims near them, v_head_dim != head_dim as MLA's qk 192 /
 * v 128) on the emulator against the float64 reference with the keys (causal, GQA, window, softcap, ALiBi, varlen,
 * split-KV, dropout), the refusals naming their rule, planted template bugs caught, ptxas sm_90a (0 spills, no C7508)
 * and lint. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "kiln/emu_case.h"
#include "kiln/kiln.h"
#include "ptxas_util.h"
#include "sm90a_check.h"

#define MAXSEQ 4

static kiln_gen *gen;
static kiln_emu *emu;
static char dir[] = "/tmp/kiln-attn-wgmma-dims-XXXXXX";

typedef struct row {
    const char *spec;
    int heads_q, heads_kv;
    int seq_q, seq_k, batch, splits; /* the dense problem (not varlen); splits: splitkv=true */
    int left, right;                 /* window=true */
    double dropout;                  /* dropout=true: the rate */
    int nseq;                        /* varlen: the sequences and their query and key lengths */
    int lq[MAXSEQ], lk[MAXSEQ];
} row;

/* Runs one case on g (the built-in templates or a planted copy); *bad: values out of tolerance; err names a
 * failed run or the first bad value. */
static kiln_status run_case(kiln_gen *g, kiln_emu *e, const row *r, long *bad, kiln_error *err) {
    kiln_case_opts o = {.sm = SM90A, .seed = 13};
    kiln_case_opts_set(&o, "rows", r->nseq ? 1 : r->seq_q);
    if (!r->nseq) kiln_case_opts_set(&o, "seq_k", r->seq_k), kiln_case_opts_set(&o, "batch", r->batch);
    if (r->splits) kiln_case_opts_set(&o, "splits", r->splits);
    if (r->dropout > 0) kiln_case_opts_set(&o, "dropout", r->dropout), kiln_case_opts_set(&o, "dropout_offset", 777);
    kiln_case_opts_set(&o, "heads_q", r->heads_q);
    kiln_case_opts_set(&o, "heads_kv", r->heads_kv);
    if (r->nseq) o.nvarlen = r->nseq, o.varlen_q = r->lq, o.varlen_k = r->lk;
    sm90a_mask_opts(&o, r->spec, r->left, r->right, 5);
    return sm90a_run_case(g, e, r->spec, &o, bad, NULL, err);
}

/* d32 and d96 (64- and 128-column tiles, TMA's zero fill past the real columns), padded dims on each width, MLA's
 * qk 192 / v 128 and v wider than qk; odd tails, GQA, every mask key, varlen, split-KV (decoding), dropout. */
static const row ROWS[] = {
    {"attention dtype=bf16 head_dim=32 causal=true path=wgmma", 4, 2, .seq_q = 70, .seq_k = 90, .batch = 1},
    {"attention dtype=f16 head_dim=32 causal=top_left window=true softcap=true alibi=true path=wgmma", 2, 1, .seq_q = 65, .seq_k = 150,
     .batch = 1, .left = 30, .right = 4},
    {"attention dtype=f16 head_dim=96 path=wgmma", 2, 1, .seq_q = 77, .seq_k = 130, .batch = 2},
    {"attention dtype=bf16 head_dim=96 causal=true window=true softcap=true alibi=true path=wgmma", 2, 2, .seq_q = 90, .seq_k = 140,
     .batch = 1, .left = 50, .right = 0},
    {"attention dtype=bf16 head_dim=40 causal=true out=f32 path=wgmma", 2, 1, .seq_q = 50, .seq_k = 70, .batch = 1},
    {"attention dtype=f16 head_dim=112 causal=true path=wgmma", 1, 1, .seq_q = 40, .seq_k = 130, .batch = 1},
    {"attention dtype=bf16 head_dim=32 causal=true varlen=true path=wgmma", 4, 2, .nseq = 3, .lq = {17, 1, 80}, .lk = {30, 5, 70}},
    {"attention dtype=f16 head_dim=96 causal=top_left window=true varlen=true path=wgmma", 2, 1, .left = 20, .right = 3, .nseq = 2,
     .lq = {40, 70}, .lk = {90, 65}},
    {"attention dtype=bf16 head_dim=32 splitkv=true path=wgmma", 4, 1, .seq_q = 1, .seq_k = 200, .batch = 2, .splits = 3},
    {"attention dtype=f16 head_dim=96 causal=true splitkv=true path=wgmma", 2, 1, .seq_q = 33, .seq_k = 260, .batch = 1, .splits = 2},
    {"attention dtype=bf16 head_dim=96 causal=true dropout=true dropout_mask=true path=wgmma", 2, 1, .seq_q = 40, .seq_k = 70,
     .batch = 1, .dropout = 0.2},
    {"attention dtype=bf16 head_dim=32 dropout=true dropout_mask=true path=wgmma", 1, 1, .seq_q = 30, .seq_k = 40, .batch = 1,
     .dropout = 0.3},
    /* v_head_dim: MLA (qk 192 / v 128 on 256-column K tiles, O 128 wide), v wider than qk, split-KV */
    {"attention dtype=bf16 head_dim=192 v_head_dim=128 causal=true path=wgmma", 2, 1, .seq_q = 40, .seq_k = 70, .batch = 1},
    {"attention dtype=f16 head_dim=64 v_head_dim=128 causal=true softcap=true path=wgmma", 2, 2, .seq_q = 70, .seq_k = 100, .batch = 1},
    {"attention dtype=f16 head_dim=128 v_head_dim=64 splitkv=true path=wgmma", 2, 1, .seq_q = 3, .seq_k = 150, .batch = 1, .splits = 2},
};

static void test_emulator(void) {
    for (size_t i = 0; i < sizeof ROWS / sizeof ROWS[0]; i++) {
        const row *r = &ROWS[i];
        char name[400];
        if (r->nseq) snprintf(name, sizeof name, "%s sm_90a: %d sequences, heads %d:%d vs float64", r->spec + 10, r->nseq, r->heads_q, r->heads_kv);
        else
            snprintf(name, sizeof name, "%s sm_90a: seq %d x %d, batch %d, heads %d:%d%s vs float64", r->spec + 10, r->seq_q, r->seq_k, r->batch,
                     r->heads_q, r->heads_kv, r->splits ? ", split" : "");
        TEST_BEGIN(name);
        kiln_error err = {0};
        long bad = 0;
        kiln_status st = run_case(gen, emu, r, &bad, &err);
        CHECK(st == KILN_OK, "%s", err.msg);
        CHECK(st != KILN_OK || bad == 0, "%ld bad: %s", bad, err.msg);
        TEST_END();
    }
}

/* The kernel's shape per dim (the k-steps of Q K^T, P V's n, the maps' boxes) and the refusals. */
static void test_shape_and_refusals(void) {
    TEST_BEGIN("d32 / d96 / MLA on path=wgmma: Q K^T's k-steps stop at head_dim, P V's n is v_head_dim's panels, boxes of 64 columns");
    static const struct {
        const char *spec;
        int wgmma_s, n_s, wgmma_o, n_o; /* S's wgmma count and n, O's */
    } shapes[] = {
        /* a tile's chains: S ceil(head_dim / 16) k-steps over BN keys, O BN / 16 k-steps over v_head_dim's panels */
        {"attention dtype=bf16 head_dim=32 path=wgmma", 2, 64, 4, 64},
        {"attention dtype=bf16 head_dim=96 path=wgmma", 6, 128, 8, 128},
        {"attention dtype=bf16 head_dim=192 v_head_dim=128 path=wgmma", 12, 64, 4, 128},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        kiln_error err = {0};
        kiln_module *m = sm90a_emit(gen, shapes[i].spec, SM90A, &err);
        CHECK(m, "%s: %s", shapes[i].spec, err.msg);
        if (!m) continue;
        const char *t = kiln_module_text(m);
        char ns[64], no[64];
        snprintf(ns, sizeof ns, "wgmma.mma_async.sync.aligned.m64n%dk16.f32", shapes[i].n_s);
        snprintf(no, sizeof no, "wgmma.mma_async.sync.aligned.m64n%dk16.f32", shapes[i].n_o);
        /* S's A is a shared-memory descriptor, O's (P) registers: "}, {" after D's list. Every S chain in the code
         * has an O chain beside it (the loop's copies, the prologue's S and the epilogue's last P V), so the counts
         * stand as the chains' lengths */
        int cs = 0, co = 0, other = 0;
        for (const char *at = strstr(t, "wgmma.mma_async.sync"); at; at = strstr(at + 1, "wgmma.mma_async.sync")) {
            const char *close = strchr(at, '}');
            int is_o = close && !strncmp(close + 1, ", {", 3);
            if (!is_o && !strncmp(at, ns, strlen(ns))) cs++;
            else if (is_o && !strncmp(at, no, strlen(no))) co++;
            else other++;
        }
        CHECK(cs > 0 && co > 0 && !other && cs * shapes[i].wgmma_o == co * shapes[i].wgmma_s,
              "%s: %d S wgmma (m64n%dk16, want %d a chain), %d O (m64n%dk16, want %d a chain), %d other", shapes[i].spec, cs, shapes[i].n_s,
              shapes[i].wgmma_s, co, shapes[i].n_o, shapes[i].wgmma_o, other);
        CHECK(strstr(t, "// kiln.meta tmap tm_q q 1 64 1 64 swizzle=128"), "%s: Q's boxes of 64 columns", shapes[i].spec);
        kiln_module_free(m);
    }
    static const sm90a_refusal refused[] = {
        {"attention dtype=bf16 head_dim=96 path=wgmma", 90, "valid targets: sm_90a"},
    };
    sm90a_check_refusals(gen, refused, sizeof refused / sizeof refused[0]);
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
        {"Q K^T's k-steps rounded down (d40: columns 32-39 left out)", "lib/attn_wgmma_dims.lua", "s.kq = (s.dim + 15) // 16", "s.kq = s.dim // 16",
         {"attention dtype=bf16 head_dim=40 path=wgmma", 1, 1, .seq_q = 20, .seq_k = 30, .batch = 1}},
        {"V's panels rounded down (d96: O's columns 64-95 never computed)", "lib/attn_wgmma_dims.lua", "s.vp = (s.vdim + 63) // 64",
         "s.vp = s.vdim // 64", {"attention dtype=f16 head_dim=96 path=wgmma", 1, 1, .seq_q = 20, .seq_k = 30, .batch = 1}},
        {"MLA: the producer loads V's panels by Q/K's count (V's second panel never lands)", "lib/attn_wgmma.lua",
         "if j < spec.vp then b:tma_load(sv", "if j < spec.qp and j < spec.vp then b:tma_load(sv",
         {"attention dtype=f16 head_dim=64 v_head_dim=128 path=wgmma", 1, 1, .seq_q = 20, .seq_k = 30, .batch = 1}},
        {"MLA: a stage's expect-tx counts the tiles' panels, not those loaded (the full barrier never completes)", "lib/attn_wgmma.lua",
         "local stage_bytes = (spec.qp + spec.vp) * KPANEL", "local stage_bytes = 2 * panels * KPANEL",
         {"attention dtype=bf16 head_dim=192 v_head_dim=128 path=wgmma", 1, 1, .seq_q = 20, .seq_k = 30, .batch = 1}},
        {"split-KV at d96: workspace rows at the tiles' 128 columns", "lib/attn_wgmma_keys.lua", "local d = spec.vdim or spec.head_dim",
         "local d = spec.head_dim", {"attention dtype=f16 head_dim=96 splitkv=true path=wgmma", 1, 1, .seq_q = 3, .seq_k = 100, .batch = 1, .splits = 2}},
    };
    char root[512];
    sm90a_root(__FILE__, root, sizeof root);
    for (size_t i = 0; i < sizeof bugs / sizeof bugs[0]; i++)
        sm90a_planted(dir, root, bugs[i].what, bugs[i].file, bugs[i].from, bugs[i].to, 0, run_row, &bugs[i].r, emu);
    sm90a_planted_done(dir);
}

/* The dims' variants lint clean (4, among attention_ptxas_test's quick sm_90a rows, which assemble them there);
 * under KILN_TEST_FULL=1 every dim x dtype x causal x key set (360) assembled by ptxas sm_90a here: 0 spills, no
 * C7508. */
static void test_ptxas(void) {
    static const char *const quick[] = {
        "attention dtype=bf16 head_dim=32 causal=true path=wgmma",
        "attention dtype=bf16 head_dim=96 causal=true window=true softcap=true alibi=true varlen=true path=wgmma",
        "attention dtype=f16 head_dim=192 v_head_dim=128 causal=true path=wgmma",
        "attention dtype=bf16 head_dim=96 causal=true dropout=true path=wgmma",
    };
    static char full[400][200];
    static const char *ptrs[400];
    const char *const *specs = quick;
    int n = (int)(sizeof quick / sizeof quick[0]);
    if (getenv("KILN_TEST_FULL")) {
        static const char *dts[] = {"f16", "bf16"}, *causal[] = {"false", "true", "top_left"};
        static const char *dims[] = {"head_dim=32", "head_dim=96", "head_dim=48", "head_dim=80", "head_dim=120", "head_dim=160",
                                     "head_dim=192 v_head_dim=128", "head_dim=64 v_head_dim=128", "head_dim=128 v_head_dim=64"};
        static const char *keys[] = {"", " window=true softcap=true alibi=true", " alibi=true", " varlen=true", " splitkv=true",
                                     " dropout=true", " window=true softcap=true alibi=true splitkv=true"};
        n = 0;
        for (int a = 0; a < 2; a++)
            for (size_t d = 0; d < sizeof dims / sizeof dims[0]; d++)
                for (int c = 0; c < 3; c++)
                    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
                        if (strstr(dims[d], "v_head_dim") && strstr(keys[k], "varlen")) continue; /* v_head_dim: dense and split-KV */
                        snprintf(full[n], sizeof full[n], "attention dtype=%s %s causal=%s%s path=wgmma", dts[a], dims[d], causal[c], keys[k]);
                        ptrs[n] = full[n];
                        n++;
                    }
        specs = ptrs;
    }
    const char *ptxas = getenv("KILN_TEST_FULL") ? ptxas_path() : NULL;
    TEST_BEGIN("ptxas sm_90a (KILN_TEST_FULL=1): the wgmma attention's head-dim variants assemble, 0 spills, no C7508; lint clean");
    sm90a_ptxas_check(gen, dir, specs, n, ptxas, NULL);
    TEST_END();
}

int main(void) {
    if (!sm90a_setup(dir, &gen, &emu, "attention_wgmma_dims")) return 1;
    test_emulator();
    test_shape_and_refusals();
    test_planted();
    test_ptxas();
    return sm90a_finish(dir, gen, emu, "attention_wgmma_dims");
}
