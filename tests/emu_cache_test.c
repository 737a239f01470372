/* tests/emu_cache_test.c - the emulator's cache of loaded kernels (emu/emu_jit.c): a freed kernel is reused only for
 * exactly its key (generator, SM, profile, canonical spec), shared while in use only when not profiled, with no state
 * carried between uses, and at most its bound of idle kernels is kept. */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "emu.h"
#include "kiln/emu_case.h"
#include "kiln/emu_profile.h"
#include "kiln/kiln.h"

static kiln_gen *gen;
static kiln_emu *emu;

/* The small norm specs the cases load (hidden given: kiln_emu_load alone needs no problem size). */
#define RMS "rmsnorm x=bf16 w=f32 hidden=40"
#define RMS_REORDERED "rmsnorm hidden=40 w=f32 x=bf16"
#define RMS_48 "rmsnorm x=bf16 w=f32 hidden=48"
#define RMS_F16 "rmsnorm x=f16 w=f32 hidden=40"

/* Loads spec for sm with g and checks that what came back is that kernel: the canonical spec and the SM asked for
 * (a key that left out a field would hand back another kernel here). */
static kiln_emu_kernel *load(kiln_gen *g, const char *spec, int sm) {
    kiln_error err = {0};
    kiln_emu_kernel *k = NULL;
    char canon[KILN_SPEC_MAX] = "";
    CHECK(kiln_canonical_spec(g, spec, canon, sizeof canon, &err) == KILN_OK, "%s: %s", spec, err.msg);
    if (kiln_emu_load(emu, g, spec, sm, &k, &err) != KILN_OK) {
        CHECK(0, "loading %s on sm_%d: %s", spec, sm, err.msg);
        return NULL;
    }
    const kiln_kernel_meta *m = kiln_emu_kernel_meta(k);
    CHECK(m->sm == sm && !strcmp(m->spec, canon), "asked for '%s' on sm_%d, got '%s' on sm_%d", canon, sm, m->spec,
          m->sm);
    return k;
}

/* The cache's counters moved by exactly hits and misses since *before (which is then updated). */
static void expect(emu_cache_counts *before, unsigned long hits, unsigned long misses, const char *what) {
    emu_cache_counts now;
    emu_cache_stats(emu, &now);
    CHECK(now.hits - before->hits == hits && now.misses - before->misses == misses,
          "%s: %lu hits and %lu misses, want %lu and %lu", what, now.hits - before->hits, now.misses - before->misses,
          hits, misses);
    *before = now;
}

/* A freed kernel comes back for its own key only: the same spec (in any spelling of it) on the same SM; another
 * SM, another value of one spec key, another generator each compile their own. */
static void test_keys(void) {
    TEST_BEGIN("keys: the same canonical spec and SM reuse; another SM, spec value or generator does not");
    emu_cache_counts c;
    emu_cache_stats(emu, &c);
    char a[KILN_SPEC_MAX] = "", b[KILN_SPEC_MAX] = "";
    kiln_error err = {0};
    CHECK(kiln_canonical_spec(gen, RMS, a, sizeof a, &err) == KILN_OK &&
              kiln_canonical_spec(gen, RMS_REORDERED, b, sizeof b, &err) == KILN_OK && !strcmp(a, b),
          "the two spellings should be one canonical spec: '%s', '%s'", a, b);
    kiln_emu_kernel *k = load(gen, RMS, 80);
    expect(&c, 0, 1, "first load");
    kiln_emu_kernel_free(k);
    kiln_emu_kernel *again = load(gen, RMS, 80);
    expect(&c, 1, 0, "the same spec again");
    CHECK(again == k, "the idle kernel was not the one handed back");
    kiln_emu_kernel_free(again);
    kiln_emu_kernel_free(load(gen, RMS_REORDERED, 80));
    expect(&c, 1, 0, "another spelling of the spec");
    kiln_emu_kernel_free(load(gen, RMS, 75));
    expect(&c, 0, 1, "another SM");
    kiln_emu_kernel_free(load(gen, RMS_48, 80));
    expect(&c, 0, 1, "another hidden");
    kiln_emu_kernel_free(load(gen, RMS_F16, 80));
    expect(&c, 0, 1, "another x dtype");
    kiln_gen *other = NULL;
    CHECK(kiln_gen_create(&other, NULL, &err) == KILN_OK, "%s", err.msg);
    if (other) {
        kiln_emu_kernel_free(load(other, RMS, 80));
        expect(&c, 0, 1, "another generator");
        kiln_gen_destroy(other);
    }
    /* every one of them is idle now: each takes back its own */
    kiln_emu_kernel_free(load(gen, RMS, 75));
    kiln_emu_kernel_free(load(gen, RMS_48, 80));
    kiln_emu_kernel_free(load(gen, RMS_F16, 80));
    expect(&c, 3, 0, "each key again");
    TEST_END();
}

/* A plain kernel in use is shared by a second load, and stays in use (not parked, not destroyed) until its last
 * user frees it: the remaining user's case still runs and checks. A profiled kernel in use is never shared (its
 * counters are its user's). */
static void test_in_use(void) {
    TEST_BEGIN("in use: a plain kernel is shared until its last user frees it; a profiled one is never shared");
    emu_cache_counts c;
    emu_cache_stats(emu, &c);
    kiln_error err = {0};
    kiln_case_opts o = {.sm = 75, .seed = 3};
    kiln_case_opts_set(&o, "rows", 4);
    kiln_case *a = NULL, *b = NULL;
    kiln_status st = kiln_case_create(&a, gen, emu, RMS_48, &o, &err); /* not idle anywhere yet */
    if (st == KILN_OK) st = kiln_case_create(&b, gen, emu, RMS_48, &o, &err);
    CHECK(st == KILN_OK, "%s", err.msg);
    expect(&c, 1, 1, "two live cases of one plain kernel");
    if (st == KILN_OK) {
        CHECK(kiln_case_kernel(a) == kiln_case_kernel(b), "the second case compiled its own kernel");
        kiln_case_free(a);
        a = NULL;
        emu_cache_counts now;
        emu_cache_stats(emu, &now);
        CHECK(now.idle == c.idle, "a kernel still in use was parked (%u idle, %u before)", now.idle, c.idle);
        st = kiln_case_run(b, &err);
        CHECK(st == KILN_OK && kiln_case_check(b) == 0 && kiln_case_noutputs(b) > 0,
              "the remaining user's case: %s", st == KILN_OK ? "fails its check" : err.msg);
        kiln_case_free(b);
        b = NULL;
        emu_cache_stats(emu, &now);
        CHECK(now.idle == c.idle + 1, "freed by its last user, the kernel was not parked (%u idle)", now.idle);
    }
    kiln_case_free(a);
    kiln_case_free(b);
    kiln_emu_set_profile(emu, 1);
    kiln_emu_kernel *k = load(gen, RMS_48, 75), *l = load(gen, RMS_48, 75);
    expect(&c, 0, 2, "two live profiled loads");
    CHECK(k && l && k != l, "two live profiled loads share one kernel");
    kiln_emu_kernel_free(k);
    kiln_emu_kernel_free(l);
    kiln_emu_set_profile(emu, 0);
    TEST_END();
}

/* A profiled load never gets an uninstrumented kernel nor the reverse; a profiled kernel taken back starts from
 * zero counters, and its second run counts what the first did, not twice that. */
static void test_profile(void) {
    TEST_BEGIN("profile: instrumented and plain kernels are separate; counters start from zero on reuse");
    emu_cache_counts c;
    emu_cache_stats(emu, &c);
    kiln_error err = {0};
    kiln_case_opts o = {.sm = 80, .seed = 5};
    kiln_case_opts_set(&o, "rows", 6);
    kiln_emu_kernel_free(load(gen, RMS, 80)); /* a plain one idle */
    expect(&c, 1, 0, "the plain kernel (loaded by test_keys)");
    kiln_emu_set_profile(emu, 1);
    kiln_case *p = NULL;
    kiln_emu_profile first = {0}, fresh = {0}, second = {0};
    kiln_status st = kiln_case_create(&p, gen, emu, RMS, &o, &err);
    if (st == KILN_OK) st = kiln_case_run(p, &err);
    if (st == KILN_OK) st = kiln_emu_profile_get(kiln_case_kernel(p), &first, &err);
    CHECK(st == KILN_OK, "the profiled case: %s", err.msg);
    expect(&c, 0, 1, "a profiled load beside an idle plain kernel");
    CHECK(first.blocks > 0 && first.warps > 0, "the profile counted %llu blocks", (unsigned long long)first.blocks);
    kiln_case_free(p);
    p = NULL;
    st = kiln_case_create(&p, gen, emu, RMS, &o, &err);
    if (st == KILN_OK) st = kiln_emu_profile_get(kiln_case_kernel(p), &fresh, &err);
    if (st == KILN_OK) st = kiln_case_run(p, &err);
    if (st == KILN_OK) st = kiln_emu_profile_get(kiln_case_kernel(p), &second, &err);
    CHECK(st == KILN_OK, "the profiled case again: %s", err.msg);
    expect(&c, 1, 0, "the profiled kernel again");
    CHECK(fresh.blocks == 0 && fresh.warps == 0 && fresh.global_ld_bytes == 0,
          "a reused kernel's profile starts at %llu blocks, %llu warps", (unsigned long long)fresh.blocks,
          (unsigned long long)fresh.warps);
    CHECK(second.blocks == first.blocks && second.warps == first.warps &&
              second.global_ld_bytes == first.global_ld_bytes && !memcmp(second.inst, first.inst, sizeof first.inst),
          "the second run counted %llu blocks, %llu warps (the first %llu, %llu)", (unsigned long long)second.blocks,
          (unsigned long long)second.warps, (unsigned long long)first.blocks, (unsigned long long)first.warps);
    kiln_case_free(p);
    kiln_emu_set_profile(emu, 0);
    kiln_emu_kernel *k = load(gen, RMS, 80);
    expect(&c, 1, 0, "the plain kernel after profiling");
    kiln_emu_profile none;
    CHECK(k && kiln_emu_profile_get(k, &none, &err) == KILN_EINVAL, "a plain load came back instrumented");
    kiln_emu_kernel_free(k);
    TEST_END();
}

/* A case on reused kernels passes its check and writes what a case on fresh kernels writes, bit for bit (the
 * backward: a sequence of kernels, the reused ones beside freshly loaded ones). */
static void test_results(void) {
    TEST_BEGIN("results: a case on reused kernels checks and writes the same bits as on fresh ones");
    static const char *const specs[] = {RMS, "rmsnorm_bwd x=bf16 w=f32 hidden=40"};
    for (size_t s = 0; s < sizeof specs / sizeof *specs; s++) {
        emu_cache_counts c;
        emu_cache_stats(emu, &c);
        kiln_error err = {0};
        kiln_case_opts o = {.sm = 80, .seed = 11};
        kiln_case_opts_set(&o, "rows", 7);
        kiln_case_bits *bits = NULL;
        for (int round = 0; round < 2; round++) {
            kiln_case *k = NULL;
            kiln_status st = kiln_case_create(&k, gen, emu, specs[s], &o, &err);
            if (st == KILN_OK) st = kiln_case_run(k, &err);
            CHECK(st == KILN_OK, "%s round %d: %s", specs[s], round, err.msg);
            if (st == KILN_OK) {
                CHECK(kiln_case_check(k) == 0 && kiln_case_noutputs(k) > 0, "%s round %d fails its check", specs[s],
                      round);
                char which[64];
                if (!round) bits = kiln_case_bits_take(k);
                else CHECK(kiln_case_bits_same(k, bits, which, sizeof which), "%s: %s differs on reused kernels",
                           specs[s], which);
            }
            kiln_case_free(k);
        }
        kiln_case_bits_free(bits);
        emu_cache_counts now;
        emu_cache_stats(emu, &now);
        CHECK(now.hits > c.hits, "%s: the second case reused nothing", specs[s]);
    }
    TEST_END();
}

/* At most the bound stays idle, the least recently freed going first; bound 0 keeps nothing. */
static void test_bound(void) {
    TEST_BEGIN("bound: at most cap idle kernels, the least recently freed destroyed first; cap 0 caches nothing");
    emu_cache_set_cap(emu, 2);
    emu_cache_counts c;
    emu_cache_stats(emu, &c);
    CHECK(c.idle == 2, "trimming to 2 left %u idle", c.idle);
    static const char *const specs[] = {"layernorm x=f16 hidden=64", "layernorm x=f16 hidden=96",
                                        "layernorm x=f16 hidden=128"};
    for (int i = 0; i < 3; i++) kiln_emu_kernel_free(load(gen, specs[i], 80));
    expect(&c, 0, 3, "three new kernels");
    CHECK(c.idle == 2, "%u idle, want 2", c.idle);
    kiln_emu_kernel_free(load(gen, specs[2], 80));
    kiln_emu_kernel_free(load(gen, specs[1], 80));
    expect(&c, 2, 0, "the two most recently freed");
    kiln_emu_kernel_free(load(gen, specs[0], 80));
    expect(&c, 0, 1, "the least recently freed (destroyed)");
    emu_cache_set_cap(emu, 0);
    emu_cache_stats(emu, &c);
    CHECK(c.idle == 0, "cap 0 left %u idle", c.idle);
    kiln_emu_kernel_free(load(gen, specs[0], 80));
    kiln_emu_kernel_free(load(gen, specs[0], 80));
    emu_cache_counts now;
    emu_cache_stats(emu, &now);
    CHECK(now.hits == c.hits && now.idle == 0, "cap 0: %lu hits, %u idle", now.hits - c.hits, now.idle);
    TEST_END();
}

int main(void) {
    kiln_error err = {0};
    if (kiln_gen_create(&gen, NULL, &err) != KILN_OK || kiln_emu_create(&emu, &err) != KILN_OK) {
        printf("setup: %s\n", err.msg);
        return 1;
    }
    emu_cache_set_cap(emu, 64); /* whatever KILN_EMU_CACHE says */
    test_keys();
    test_in_use();
    test_profile();
    test_results();
    test_bound();
    kiln_emu_destroy(emu);
    kiln_gen_destroy(gen);
    return check_summary("emu_cache");
}
