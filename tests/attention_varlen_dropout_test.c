/* tests/attention_varlen_dropout_test.c - dropout on packed sequences (varlen=true dropout=true) forward and backward on the CPU emulator: outputs and masks against the float64 references, the mask's key shared with the dense kernel. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "emu.h"
#include "attention.ref.h"
#include "kiln/emu_case.h"
#include "kiln/kiln.h"

static kiln_gen *gen;
static kiln_emu *emu;

/* One run: a spec, lengths (nseq sequences; lk NULL: the query lengths) or a dense shape (nseq 0). */
typedef struct run {
    const char *spec;
    int sm, heads_q, heads_kv;
    int nseq;
    const int *lq, *lk, *used;
    int seq_q, seq_k, batch; /* dense (nseq 0) */
    double p;                /* < 0: no --dropout */
    int left, right;         /* window=true */
} run;

static kiln_case *start(const run *r, uint64_t seed) {
    kiln_case_opts o = {.sm = r->sm, .seed = seed};
    kiln_case_opts_set(&o, "heads_q", r->heads_q);
    kiln_case_opts_set(&o, "heads_kv", r->heads_kv);
    if (r->nseq) {
        o.nvarlen = r->nseq, o.varlen_q = r->lq, o.varlen_k = r->lk, o.seqused_k = r->used;
        kiln_case_opts_set(&o, "rows", 1); /* (the dense problem's reading needs sizes; the lengths replace them) */
    } else {
        kiln_case_opts_set(&o, "rows", r->seq_q);
        kiln_case_opts_set(&o, "seq_k", r->seq_k);
        kiln_case_opts_set(&o, "batch", r->batch);
    }
    if (r->p >= 0) kiln_case_opts_set(&o, "dropout", r->p);
    if (strstr(r->spec, "window=true")) kiln_case_opts_set(&o, "window_left", r->left), kiln_case_opts_set(&o, "window_right", r->right);
    if (strstr(r->spec, "softcap=true")) kiln_case_opts_set(&o, "softcap", 20);
    if (strstr(r->spec, "alibi=true")) kiln_case_opts_set(&o, "alibi", 1);
    kiln_error err = {0};
    kiln_case *c = NULL;
    kiln_status st = kiln_case_create(&c, gen, emu, r->spec, &o, &err);
    if (st == KILN_OK) st = kiln_case_run(c, &err);
    CHECK(st == KILN_OK, "%s sm_%d: %s", r->spec, r->sm, err.msg);
    if (st != KILN_OK) {
        kiln_case_free(c);
        return NULL;
    }
    return c;
}

/* Runs and checks every output (the mask among them) against the reference; the caller frees the case. */
static kiln_case *pass(const run *r, uint64_t seed) {
    kiln_case *c = start(r, seed);
    if (!c) return NULL;
    kiln_case_check(c);
    for (int i = 0; i < kiln_case_noutputs(c); i++) {
        const kiln_case_output *o = kiln_case_output_at(c, i);
        CHECK(o->bad == 0, "%s sm_%d p=%g: output %s: %ld bad; %s", r->spec, r->sm, r->p, o->name, o->bad, o->first);
    }
    return c;
}

static const void *tensor(kiln_case *c, const char *name, size_t *bytes) {
    void *ptr = NULL;
    *bytes = 0;
    if (!c || kiln_case_family(c)->tensor(c, name, &ptr, bytes) != 0) return NULL;
    return ptr;
}

static int same(kiln_case *a, kiln_case *b, const char *name) {
    size_t na, nb;
    const void *x = tensor(a, name, &na), *y = tensor(b, name, &nb);
    return x && y && na == nb && !memcmp(x, y, na);
}

/* Lengths 0, 1, odd and long in one batch (keys of other lengths, one sequence without keys). */
static const int LQ[] = {0, 1, 37, 90}, LK[] = {3, 0, 37, 77};

/* Forward paths: mma (sm_80), m16n8k8 (sm_75 f16), SIMT (f32; bf16 on sm_75, forced), sm_75's f16-scaled bf16
 * (lib/attn_f16scaled.lua, auto's path there). */
static const struct {
    const char *spec;
    int sm;
} paths[] = {
    {"attention dtype=f16 head_dim=64", 80},
    {"attention dtype=bf16 head_dim=32", 80},
    {"attention dtype=f16 head_dim=32", 75},
    {"attention dtype=f32 head_dim=32", 80},
    {"attention dtype=bf16 head_dim=32 path=simt", 75},
    {"attention dtype=bf16 head_dim=64", 75},
};
#define NPATHS (sizeof paths / sizeof paths[0])

static const struct {
    const char *keys;
    int left, right;
} combos[] = {
    {"causal=true", 0, 0},
    {"causal=top_left window=true softcap=true alibi=true", 12, 4},
    {"causal=top_left softcap=true alibi=true", 0, 0}, /* (the backward's: dropout_mask with all three is refused) */
    {"causal=true window=true", 20, 0},
};

/* Every path x key combination, GQA 4:2: O, lse and the kernel's mask against the references (p = 0.3);
 * the mask's entries past each sequence's lengths stay unwritten (the reference's check). */
static void test_forward(void) {
    for (size_t i = 0; i < NPATHS; i++)
        for (size_t k = 0; k < 2; k++) {
            if (!check_san_keeps(i + k, 4)) continue; /* (the sanitizer build: one pair in four, rotating) */
            char spec[256], name[320];
            snprintf(spec, sizeof spec, "%s %s varlen=true dropout=true dropout_mask=true", paths[i].spec, combos[k].keys);
            snprintf(name, sizeof name, "forward %s sm_%d p=0.3 lengths 0,1,37,90: O, lse, mask", spec, paths[i].sm);
            TEST_BEGIN(name);
            run r = {spec, paths[i].sm, 4, 2, 4, LQ, LK, NULL, 0, 0, 0, 0.3, combos[k].left, combos[k].right};
            kiln_case_free(pass(&r, 7));
            TEST_END();
        }
    TEST_BEGIN("forward seqused_k with dropout: keys past each sequence's used count not written");
    static const int used[] = {2, 0, 20, 77};
    run r = {"attention dtype=f16 head_dim=32 varlen=true dropout=true dropout_mask=true", 80, 2, 1, 4, LQ, LK, used,
             0, 0, 0, 0.2, 0, 0};
    kiln_case_free(pass(&r, 8));
    TEST_END();
}

/* p = 0: the varlen kernel without dropout's O and lse bit for bit; every written mask bit 1 (mma, m16n8k8, SIMT). */
static void test_rate_zero(void) {
    for (size_t i = 0; i < NPATHS; i += 2) {
        char spec[256], plain[256], name[320];
        snprintf(spec, sizeof spec, "%s causal=true varlen=true dropout=true dropout_mask=true", paths[i].spec);
        snprintf(plain, sizeof plain, "%s causal=true varlen=true", paths[i].spec);
        snprintf(name, sizeof name, "forward %s sm_%d p=0: varlen without dropout bit for bit", spec, paths[i].sm);
        TEST_BEGIN(name);
        run r = {spec, paths[i].sm, 2, 1, 4, LQ, LK, NULL, 0, 0, 0, 0, 0, 0}, rp = r;
        rp.spec = plain, rp.p = -1;
        kiln_case *a = pass(&r, 3), *b = pass(&rp, 3);
        CHECK(same(a, b, "o") && same(a, b, "lse"), "O or lse differ from the kernel without dropout");
        size_t n;
        const int32_t *m = tensor(a, "dropout_mask", &n);
        long ones = 0;
        for (size_t j = 0; m && j < n / 4; j++) ones += m[j] == 1;
        CHECK(m && ones > 0, "no mask written");
        for (size_t j = 0; m && j < n / 4; j++) CHECK(m[j] == 1 || m[j] == -1, "mask[%zu] = %d with p = 0", j, m[j]);
        kiln_case_free(a), kiln_case_free(b);
        TEST_END();
    }
}

/* Keep rates within 5 standard deviations of the binomial (p near 1 among them), counted over the
 * written entries (no causal: every pair inside a sequence); the outputs pass. */
static void test_keep_rate(void) {
    static const double rates[] = {0.1, 0.97};
    static const int lq[] = {1, 63, 0, 100}, lk[] = {64, 130, 5, 99};
    for (int ri = 0; ri < 2; ri++) {
        char name[160];
        snprintf(name, sizeof name, "forward mma f16 sm_80 p=%g: keep rate within binomial bounds", rates[ri]);
        TEST_BEGIN(name);
        run r = {"attention dtype=f16 head_dim=32 varlen=true dropout=true dropout_mask=true", 80, 2, 1, 4, lq, lk, NULL,
                 0, 0, 0, rates[ri], 0, 0};
        kiln_case *c = pass(&r, 11);
        size_t bytes;
        const int32_t *m = tensor(c, "dropout_mask", &bytes);
        long kept = 0, n = 0;
        for (size_t j = 0; m && j < bytes / 4; j++) kept += m[j] == 1, n += m[j] != -1;
        double mean = (double)n * (1 - rates[ri]), sd = sqrt((double)n * rates[ri] * (1 - rates[ri]));
        CHECK(m && n == 2L * (1 * 64 + 63 * 130 + 100 * 99), "%ld entries written", n);
        CHECK(m && fabs((double)kept - mean) <= 5 * sd, "kept %ld of %ld, want %.0f +- %.0f", kept, n, mean, 5 * sd);
        kiln_case_free(c);
        TEST_END();
    }
}

/* One seed twice: identical bits; another seed: another mask. */
static void test_seed(void) {
    TEST_BEGIN("forward: one seed twice identical, another seed another mask");
    run r = {"attention dtype=f16 head_dim=64 causal=true varlen=true dropout=true dropout_mask=true", 80, 2, 1, 4, LQ, LK,
             NULL, 0, 0, 0, 0.5, 0, 0};
    kiln_case *a = pass(&r, 5), *b = pass(&r, 5), *c = pass(&r, 6);
    CHECK(same(a, b, "o") && same(a, b, "lse") && same(a, b, "dropout_mask"), "two runs of one seed differ");
    CHECK(!same(a, c, "dropout_mask"), "another seed gave the same mask");
    kiln_case_free(a), kiln_case_free(b), kiln_case_free(c);
    TEST_END();
}

/* The key is the dense kernel's: a varlen batch of equal lengths draws the dense batch's mask bit for
 * bit ([batch, heads_q, max_seqlen_q, max_seqlen_k] = [batch, heads_q, seq_q, seq_k] then), and so does
 * a batch of one sequence; one path each (mma, SIMT). */
static void test_dense_key(void) {
    static const int three[] = {40, 40, 40}, one[] = {70}, onek[] = {45};
    static const struct {
        const char *dense, *packed;
        int sm, nseq, seq_q, seq_k;
        const int *lq, *lk;
    } cases[] = {
        {"attention dtype=f16 head_dim=64 causal=true dropout=true dropout_mask=true",
         "attention dtype=f16 head_dim=64 causal=true varlen=true dropout=true dropout_mask=true", 80, 3, 40, 40, three, NULL},
        {"attention dtype=f32 head_dim=32 dropout=true dropout_mask=true",
         "attention dtype=f32 head_dim=32 varlen=true dropout=true dropout_mask=true", 80, 1, 70, 45, one, onek},
        {"attention dtype=f16 head_dim=32 causal=true dropout=true dropout_mask=true",
         "attention dtype=f16 head_dim=32 causal=true varlen=true dropout=true dropout_mask=true", 75, 1, 70, 45, one, onek},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char name[320];
        snprintf(name, sizeof name, "%s sm_%d, %d sequence(s) of %dx%d: the dense kernel's mask bit for bit", cases[i].packed,
                 cases[i].sm, cases[i].nseq, cases[i].seq_q, cases[i].seq_k);
        TEST_BEGIN(name);
        run d = {cases[i].dense, cases[i].sm, 2, 1, 0, NULL, NULL, NULL, cases[i].seq_q, cases[i].seq_k, cases[i].nseq, 0.4, 0, 0};
        run v = {cases[i].packed, cases[i].sm, 2, 1, cases[i].nseq, cases[i].lq, cases[i].lk, NULL, 0, 0, 0, 0.4, 0, 0};
        kiln_case *a = pass(&d, 21), *b = pass(&v, 21);
        CHECK(same(a, b, "dropout_mask"), "the varlen mask differs from the dense one");
        kiln_case_free(a), kiln_case_free(b);
        TEST_END();
    }
}

/* Backward paths: mma dkdv with dQ atomics, deterministic (mma dq), sm_75 m16n8k8, SIMT (f32; forced); bf16 on
 * sm_75's f16-scaled mma (lib/attn_bwd_f16scaled.lua: the workspace rows packed, path=auto's choice there, named). */
static const struct {
    const char *spec, *fwd;
    int sm;
} bpaths[] = {
    {"attention_bwd dtype=f16 head_dim=64", "attention dtype=f16 head_dim=64", 80},
    {"attention_bwd dtype=bf16 head_dim=32 path=mma deterministic=true", "attention dtype=bf16 head_dim=32", 75},
    {"attention_bwd dtype=bf16 head_dim=64 path=mma", "attention dtype=bf16 head_dim=64", 75},
    {"attention_bwd dtype=bf16 head_dim=32 deterministic=true", "attention dtype=bf16 head_dim=32", 80},
    {"attention_bwd dtype=f16 head_dim=32", "attention dtype=f16 head_dim=32", 75},
    {"attention_bwd dtype=f32 head_dim=32", "attention dtype=f32 head_dim=32", 80},
    {"attention_bwd dtype=f16 head_dim=32 path=simt deterministic=true", "attention dtype=f16 head_dim=32 path=simt", 80},
};

/* dQ, dK, dV against the float64 reference, and the backward's regenerated mask equal to the forward's. */
static void test_backward(void) {
    static const int lq[] = {0, 1, 37, 50}, lk[] = {3, 0, 29, 61};
    for (size_t i = 0; i < sizeof bpaths / sizeof bpaths[0]; i++)
        for (size_t k = 2; k < 4; k++) {
            char spec[256], fwd[256], name[320];
            snprintf(spec, sizeof spec, "%s %s varlen=true dropout=true dropout_mask=true", bpaths[i].spec, combos[k].keys);
            snprintf(fwd, sizeof fwd, "%s %s varlen=true dropout=true dropout_mask=true", bpaths[i].fwd, combos[k].keys);
            snprintf(name, sizeof name, "backward %s sm_%d p=0.4: dQ dK dV, mask = the forward's", spec, bpaths[i].sm);
            TEST_BEGIN(name);
            run r = {spec, bpaths[i].sm, 4, 2, 4, lq, lk, NULL, 0, 0, 0, 0.4, combos[k].left, combos[k].right}, rf = r;
            rf.spec = fwd;
            kiln_case *b = pass(&r, 13), *f = pass(&rf, 13);
            size_t nb, nf;
            const int32_t *mb = tensor(b, "dropout_mask", &nb), *mf = tensor(f, "dropout_mask", &nf);
            long both = 0, differ = 0;
            for (size_t j = 0; mb && mf && nb == nf && j < nb / 4; j++)
                if (mb[j] != -1 && mf[j] != -1) both++, differ += mb[j] != mf[j];
            CHECK(mb && mf && nb == nf && both > 0 && differ == 0, "%ld of %ld mask entries differ", differ, both);
            kiln_case_free(b), kiln_case_free(f);
            TEST_END();
        }
    TEST_BEGIN("backward p=0: the varlen backward without dropout bit for bit");
    run r = {"attention_bwd dtype=f16 head_dim=64 causal=true varlen=true deterministic=true dropout=true", 80, 2, 1, 4, lq, lk,
             NULL, 0, 0, 0, 0, 0, 0}, rp = r;
    rp.spec = "attention_bwd dtype=f16 head_dim=64 causal=true varlen=true deterministic=true", rp.p = -1;
    kiln_case *a = pass(&r, 3), *b = pass(&rp, 3);
    CHECK(same(a, b, "dq") && same(a, b, "dk") && same(a, b, "dv"), "gradients differ from the backward without dropout");
    kiln_case_free(a), kiln_case_free(b);
    TEST_END();
    TEST_BEGIN("backward p near 1 (0.95): gradients pass");
    run rn = {"attention_bwd dtype=bf16 head_dim=64 causal=true varlen=true dropout=true", 80, 2, 1, 4, lq, lk, NULL,
              0, 0, 0, 0.95, 0, 0};
    kiln_case_free(pass(&rn, 4));
    TEST_END();
}

int main(void) {
    kiln_error err = {0};
    if (kiln_gen_create(&gen, NULL, &err) != KILN_OK || kiln_emu_create(&emu, &err) != KILN_OK) {
        fprintf(stderr, "setup: %s\n", err.msg);
        return 1;
    }
    test_dense_key();
    test_seed();
    test_rate_zero();
    test_keep_rate();
    test_forward();
    test_backward();
    kiln_emu_destroy(emu);
    kiln_gen_destroy(gen);
    return check_summary("attention_varlen_dropout_test");
}
