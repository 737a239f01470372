/* tests/attention_dropout_test.c - attention dropout (dropout=true) forward and backward on the CPU emulator: Philox against its published vectors, the kernels' masks and outputs against the float64 references. */
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

/* Random123's known-answer vectors for philox4x32_10 (kat_vectors): counter, key, output. */
static void test_philox_kat(void) {
    TEST_BEGIN("Philox 4x32-10: Random123's known-answer vectors");
    static const uint32_t kat[3][10] = {
        {0, 0, 0, 0, 0, 0, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
        {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0x408f276d, 0x41c83b0e, 0xa20bc7c6,
         0x6d5451fd},
        {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0, 0xd16cfe09, 0x94fdcceb, 0x5001e420,
         0x24126ea1},
    };
    for (int v = 0; v < 3; v++) {
        uint32_t out[4];
        emu_philox4x32_10(kat[v], kat[v] + 4, out);
        for (int i = 0; i < 4; i++)
            CHECK(out[i] == kat[v][6 + i], "vector %d word %d: %08x, want %08x", v, i, out[i], kat[v][6 + i]);
    }
    TEST_END();
}

/* One run's problem: a spec and the case options. */
typedef struct run {
    const char *spec;
    int sm, seq_q, seq_k, heads_q, heads_kv, batch;
    double p;       /* < 0: no --dropout */
    double offset;  /* dropout_offset */
    int left, right; /* window (with window=true in the spec) */
} run;

static kiln_case *start(const run *r, uint64_t seed) {
    kiln_case_opts o = {.sm = r->sm, .seed = seed};
    kiln_case_opts_set(&o, "rows", r->seq_q);
    kiln_case_opts_set(&o, "seq_k", r->seq_k);
    kiln_case_opts_set(&o, "heads_q", r->heads_q);
    kiln_case_opts_set(&o, "heads_kv", r->heads_kv);
    kiln_case_opts_set(&o, "batch", r->batch);
    if (r->p >= 0) kiln_case_opts_set(&o, "dropout", r->p);
    if (r->offset > 0) kiln_case_opts_set(&o, "dropout_offset", r->offset);
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

/* Runs and checks every output against the reference; returns the case (the caller frees it). */
static kiln_case *pass(const run *r, uint64_t seed) {
    kiln_case *c = start(r, seed);
    if (!c) return NULL;
    long bad = kiln_case_check(c);
    for (int i = 0; i < kiln_case_noutputs(c); i++) {
        const kiln_case_output *o = kiln_case_output_at(c, i);
        CHECK(o->bad == 0, "%s sm_%d p=%g: output %s: %ld bad; %s", r->spec, r->sm, r->p, o->name, o->bad, o->first);
    }
    (void)bad;
    return c;
}

static const void *tensor(kiln_case *c, const char *name, size_t *bytes) {
    void *ptr = NULL;
    *bytes = 0;
    if (!c || kiln_case_family(c)->tensor(c, name, &ptr, bytes) != 0) return NULL;
    return ptr;
}

/* Whether two cases' tensor `name` holds the same bytes. */
static int same(kiln_case *a, kiln_case *b, const char *name) {
    size_t na, nb;
    const void *x = tensor(a, name, &na), *y = tensor(b, name, &nb);
    return x && y && na == nb && !memcmp(x, y, na);
}

/* The forward paths: mma (sm_80 f16/bf16; bf16 d96 on its dropout tiles), sm_75's m16n8k8, SIMT (f32; bf16 on sm_75, forced), sm_75's f16-scaled bf16. */
static const struct {
    const char *spec;
    int sm;
    int own_tiles; /* its dropout kernel runs other tiles than its plain one: p = 0 is not the plain kernel's bits */
} paths[] = {
    {"attention dtype=f16 head_dim=64", 80, 0}, {"attention dtype=bf16 head_dim=128", 80, 0}, {"attention dtype=f16 head_dim=32", 75, 0},
    {"attention dtype=f32 head_dim=64", 80, 0}, {"attention dtype=bf16 head_dim=96 path=simt", 75, 0}, {"attention dtype=f16 head_dim=64 path=simt", 80, 0},
    {"attention dtype=bf16 head_dim=96", 80, 0}, /* d96 with dropout: 16-row warps (attention.lua MMA_TILES_DROP) */
    /* bf16 on sm_75's f16 tensor cores (lib/attn_f16scaled.lua; P scaled by 2^15, dropped entries in the row sum):
     * auto takes it; d128 on its 16-key dropout tiles */
    {"attention dtype=bf16 head_dim=64", 75, 0}, {"attention dtype=bf16 head_dim=128 path=mma", 75, 1},
    /* padded widths on sm_75 with dropout and a window: Q in shared memory (d88), 16-key tiles (d104) */
    {"attention dtype=f16 head_dim=88", 75, 0}, {"attention dtype=f16 head_dim=104", 75, 0},
};
#define NPATHS (sizeof paths / sizeof paths[0])

/* Key combinations (FlashAttention-2 allows every one with dropout), each a shape. */
static const struct {
    const char *keys;
    int seq_q, seq_k, heads_q, heads_kv, batch, left, right;
} combos[] = {
    {"causal=true", 40, 70, 4, 2, 1, 0, 0},
    {"causal=false", 33, 20, 2, 1, 2, 0, 0},
    {"causal=top_left window=true softcap=true alibi=true", 50, 60, 2, 2, 1, 12, 4},
    {"causal=true window=true", 70, 70, 2, 1, 1, 20, 0},
};
#define NCOMBOS (sizeof combos / sizeof combos[0])

static void spec_of(char *buf, size_t n, const char *family_spec, const char *keys, const char *more) {
    snprintf(buf, n, "%s %s%s", family_spec, keys, more);
}

/* Every path x key combination: O, lse and the kernel's mask against the references (p = 0.3). */
static void test_forward_paths(void) {
    for (size_t i = 0; i < NPATHS; i++)
        for (size_t k = 0; k < NCOMBOS; k++) {
            if (!check_san_keeps(i + k, 4)) continue; /* (the sanitizer build: one pair in four, rotating) */
            char spec[256], name[320];
            spec_of(spec, sizeof spec, paths[i].spec, combos[k].keys, " dropout=true dropout_mask=true");
            snprintf(name, sizeof name, "forward %s sm_%d p=0.3: O, lse, mask", spec, paths[i].sm);
            TEST_BEGIN(name);
            run r = {spec, paths[i].sm, combos[k].seq_q, combos[k].seq_k, combos[k].heads_q, combos[k].heads_kv,
                     combos[k].batch, 0.3, 0, combos[k].left, combos[k].right};
            kiln_case_free(pass(&r, 7));
            TEST_END();
        }
}

/* p = 0: the plain kernel's bits (O and lse); every mask bit 1. */
static void test_rate_zero(void) {
    for (size_t i = 0; i < NPATHS; i++) {
        if (paths[i].own_tiles) continue; /* (d128 f16-scaled: 16-key dropout tiles against the plain kernel's 32) */
        char spec[256], plain[256], name[320];
        spec_of(spec, sizeof spec, paths[i].spec, "causal=true", " dropout=true dropout_mask=true");
        spec_of(plain, sizeof plain, paths[i].spec, "causal=true", "");
        snprintf(name, sizeof name, "forward %s sm_%d p=0: the plain kernel's O and lse bit for bit", spec, paths[i].sm);
        TEST_BEGIN(name);
        run r = {spec, paths[i].sm, 40, 70, 2, 1, 1, 0, 0, 0, 0}, rp = r;
        rp.spec = plain, rp.p = -1;
        kiln_case *a = pass(&r, 3), *b = pass(&rp, 3);
        CHECK(same(a, b, "o") && same(a, b, "lse"), "O or lse differ from the plain kernel's");
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

/* Keep rates near 1 - p within 5 standard deviations of the binomial, p near 1 among them; the outputs pass. */
static void test_keep_rate(void) {
    static const double rates[] = {0.1, 0.5, 0.97};
    for (int ri = 0; ri < 3; ri++)
        for (int pi = 0; pi < 2; pi++) {
            char spec[256], name[320];
            spec_of(spec, sizeof spec, paths[pi * 3].spec, "causal=false", " dropout=true dropout_mask=true");
            snprintf(name, sizeof name, "forward %s sm_%d p=%g: keep rate within binomial bounds", spec, paths[pi * 3].sm,
                     rates[ri]);
            TEST_BEGIN(name);
            run r = {spec, paths[pi * 3].sm, 64, 128, 2, 1, 2, rates[ri], 0, 0, 0};
            kiln_case *c = pass(&r, 11);
            size_t bytes;
            const int32_t *m = tensor(c, "dropout_mask", &bytes);
            size_t n = bytes / 4;
            long kept = 0;
            for (size_t j = 0; m && j < n; j++) kept += m[j] == 1;
            double mean = (double)n * (1 - rates[ri]), sd = sqrt((double)n * rates[ri] * (1 - rates[ri]));
            CHECK(m && fabs((double)kept - mean) <= 5 * sd, "kept %ld of %zu, want %.0f +- %.0f", kept, n, mean, 5 * sd);
            kiln_case_free(c);
            TEST_END();
        }
}

/* One seed twice: identical bits; another offset or seed: another mask (and still correct). */
static void test_seed_offset(void) {
    TEST_BEGIN("forward: one seed twice identical; another offset or seed gives another mask");
    run r = {"attention dtype=f16 head_dim=64 causal=true dropout=true dropout_mask=true", 80, 40, 70, 2, 1, 1, 0.5, 0, 0, 0};
    kiln_case *a = pass(&r, 5), *b = pass(&r, 5);
    CHECK(same(a, b, "o") && same(a, b, "dropout_mask"), "two runs of one seed differ");
    run ro = r;
    ro.offset = 12345;
    kiln_case *c = pass(&ro, 5), *d = pass(&r, 6);
    CHECK(!same(a, c, "dropout_mask") && !same(a, c, "o"), "another offset gave the same mask");
    CHECK(!same(a, d, "dropout_mask"), "another seed gave the same mask");
    ro.offset = 0x1p40; /* the offset's high word */
    kiln_case *e = pass(&ro, 5);
    CHECK(!same(a, e, "dropout_mask"), "an offset of 2^40 gave offset 0's mask");
    kiln_case_free(a), kiln_case_free(b), kiln_case_free(c), kiln_case_free(d), kiln_case_free(e);
    TEST_END();
}

/* The backward paths: mma dkdv (+ atomics), deterministic (mma dq), sm_75, SIMT; bf16 on sm_75's f16-scaled mma
 * (lib/attn_bwd_f16scaled.lua, path=auto's choice there, named). */
static const struct {
    const char *spec;
    int sm;
} bpaths[] = {
    {"attention_bwd dtype=f16 head_dim=64", 80},
    {"attention_bwd dtype=bf16 head_dim=64 path=mma", 75},
    {"attention_bwd dtype=bf16 head_dim=32 deterministic=true", 80},
    {"attention_bwd dtype=f16 head_dim=64", 75},
    {"attention_bwd dtype=f32 head_dim=32", 80},
    {"attention_bwd dtype=f16 head_dim=32 path=simt deterministic=true", 80},
};
#define NBPATHS (sizeof bpaths / sizeof bpaths[0])

/* Gradients against the float64 reference, and the backward's mask equal to the forward's bit for bit. */
static void test_backward(void) {
    /* (the second: dropout_mask with window, softcap and alibi all on, the kernels with the most parameters) */
    static const struct {
        const char *keys;
        int seq_q, seq_k, heads_q, heads_kv, batch, left, right;
    } bcombos[] = {
        {"causal=true", 40, 70, 4, 2, 1, 0, 0},
        {"causal=top_left window=true softcap=true alibi=true", 50, 60, 2, 2, 1, 30, 10},
        {"causal=true window=true", 70, 70, 2, 1, 1, 20, 0},
    };
    for (size_t i = 0; i < NBPATHS; i++)
        for (size_t k = 0; k < 3; k++) {
            if (!check_san_keeps(i + k, 4)) continue; /* (the sanitizer build: one pair in four, rotating) */
            char spec[256], fwd[256], name[320];
            spec_of(spec, sizeof spec, bpaths[i].spec, bcombos[k].keys, " dropout=true dropout_mask=true");
            snprintf(fwd, sizeof fwd, "attention dtype=%s head_dim=%s %s dropout=true dropout_mask=true",
                     strstr(bpaths[i].spec, "f32") ? "f32" : strstr(bpaths[i].spec, "bf16") ? "bf16" : "f16",
                     strstr(bpaths[i].spec, "head_dim=64") ? "64" : "32", bcombos[k].keys);
            snprintf(name, sizeof name, "backward %s sm_%d p=0.4: dQ dK dV, mask = the forward's", spec, bpaths[i].sm);
            TEST_BEGIN(name);
            run r = {spec, bpaths[i].sm, bcombos[k].seq_q, bcombos[k].seq_k, bcombos[k].heads_q, bcombos[k].heads_kv,
                     bcombos[k].batch, 0.4, 99, bcombos[k].left, bcombos[k].right};
            run rf = r;
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
    TEST_BEGIN("backward p=0: the plain backward's gradients bit for bit");
    run r = {"attention_bwd dtype=f16 head_dim=64 causal=true dropout=true", 80, 40, 70, 2, 1, 1, 0, 0, 0, 0}, rp = r;
    rp.spec = "attention_bwd dtype=f16 head_dim=64 causal=true deterministic=true", rp.p = -1;
    r.spec = "attention_bwd dtype=f16 head_dim=64 causal=true deterministic=true dropout=true";
    kiln_case *a = pass(&r, 3), *b = pass(&rp, 3);
    CHECK(same(a, b, "dq") && same(a, b, "dk") && same(a, b, "dv"), "gradients differ from the plain backward's");
    kiln_case_free(a), kiln_case_free(b);
    TEST_END();
    TEST_BEGIN("backward p near 1 (0.95): gradients pass");
    run rn = {"attention_bwd dtype=bf16 head_dim=64 causal=true dropout=true", 80, 40, 70, 2, 1, 1, 0.95, 0, 0, 0};
    kiln_case_free(pass(&rn, 4));
    TEST_END();
}

/* Bad input: one clear error. */
static void test_refusals(void) {
    TEST_BEGIN("refusals: split-KV with dropout, dropout_mask alone, a rate >= 1, --dropout without the key, 41 parameters");
    kiln_error err = {0};
    kiln_case *c = NULL;
    kiln_case_opts o = {.sm = 80, .seed = 1};
    kiln_case_opts_set(&o, "rows", 8);
    CHECK(kiln_case_create(&c, gen, emu, "attention dtype=f16 splitkv=true dropout=true", &o, &err) != KILN_OK &&
              strstr(err.msg, "splitkv"), "%s", err.msg);
    kiln_case_free(c), c = NULL;
    CHECK(kiln_case_create(&c, gen, emu, "attention dtype=f16 dropout_mask=true", &o, &err) != KILN_OK &&
              strstr(err.msg, "dropout=true"), "%s", err.msg);
    kiln_case_free(c), c = NULL;
    CHECK(kiln_case_create(&c, gen, emu, "attention dtype=f16 dropout=true", &o, &err) == KILN_EINVAL &&
              strstr(err.msg, "--dropout"), "no rate: %s", err.msg);
    kiln_case_free(c), c = NULL;
    kiln_case_opts_set(&o, "dropout", 1);
    CHECK(kiln_case_create(&c, gen, emu, "attention dtype=f16 dropout=true", &o, &err) == KILN_EINVAL &&
              strstr(err.msg, "0 <= P < 1"), "rate 1: %s", err.msg);
    kiln_case_free(c), c = NULL;
    kiln_case_opts_set(&o, "dropout", 0.1);
    CHECK(kiln_case_create(&c, gen, emu, "attention dtype=f16", &o, &err) == KILN_EINVAL && strstr(err.msg, "dropout=true"),
          "--dropout without the key: %s", err.msg);
    kiln_case_free(c), c = NULL;
    TEST_END();
}

int main(void) {
    kiln_error err = {0};
    if (kiln_gen_create(&gen, NULL, &err) != KILN_OK || kiln_emu_create(&emu, &err) != KILN_OK) {
        fprintf(stderr, "setup: %s\n", err.msg);
        return 1;
    }
    test_philox_kat();
    test_seed_offset();
    test_rate_zero();
    test_keep_rate();
    test_forward_paths();
    test_backward();
    test_refusals();
    kiln_emu_destroy(emu);
    kiln_gen_destroy(gen);
    return check_summary("attention_dropout_test");
}
