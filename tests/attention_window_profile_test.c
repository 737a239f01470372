/* tests/attention_window_profile_test.c - a sliding window's key tiles are computed, not masked:
 * the emulator's profile counts the mma a window=true kernel issues against full causal and full
 * (non-causal) attention over the same keys. seq N = 2048, window N/8 = 256 to the left with causal
 * (the proportions of a 4096 window over 32768 keys, 256x smaller so the emulator runs it in
 * seconds): each block visits ~W + block_m + block_n keys instead of ~q0 + block_m (causal) or N.
 * The mma counts equal the visited tiles' ratios, so the same tile count at the real proportions
 * gives issue 24's figure: ~1/8 of full attention's mma, ~1/4 of full causal's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "attention.ref.h"
#include "kiln/emu_profile.h"
#include "kiln/kiln.h"

enum { N = 2048, W = 256, BM = 128, BN = 64 }; /* sm_80 f16 d64: 128-row blocks, 64-key tiles */

/* Key tiles the blocks of one head of n queries over n keys visit: window w to the left with causal
 * [q0 - w, q0 + BM) in BN tiles; causal [0, q0 + BM); full [0, n). */
static void key_tiles(int n, int w, unsigned long long *tw, unsigned long long *tc, unsigned long long *tf) {
    *tw = *tc = *tf = 0;
    for (int q0 = 0; q0 < n; q0 += BM) {
        int lo = q0 - w < 0 ? 0 : q0 - w;
        *tw += (unsigned long long)((q0 + BM + BN - 1) / BN - lo / BN);
        *tc += (unsigned long long)((q0 + BM + BN - 1) / BN);
        *tf += (unsigned long long)(n / BN);
    }
}

/* Runs spec on sm_80 over one head of N x N with the given window; returns the kernel's mma count. */
static unsigned long long mma_count(kiln_emu *emu, kiln_gen *gen, const char *spec, int left, const void *q,
                                    const void *k, const void *v) {
    kiln_error err = {0};
    kiln_emu_kernel *kern = NULL;
    kiln_attn_problem p = {0};
    CHECK(kiln_attn_spec_parse(spec, &p, &err) == KILN_OK, "%s", err.msg);
    p.batch = p.heads_q = p.heads_kv = 1, p.seq_q = p.seq_k = N;
    p.window_left = left, p.window_right = 0;
    kiln_attn_default_strides(&p);
    unsigned long long n = 0;
    kiln_status st = kiln_emu_load(emu, gen, spec, 80, &kern, &err);
    CHECK(st == KILN_OK, "load %s: %s", spec, err.msg);
    void *o = malloc(kiln_attn_elems(&p, 'o') * kiln_dtype_size(p.out));
    float *lse = malloc(N * sizeof *lse);
    if (st == KILN_OK) st = kiln_attn_run(kern, &p, o, lse, q, k, v, 0, &err);
    CHECK(st == KILN_OK, "run %s: %s", spec, err.msg);
    kiln_emu_profile prof;
    if (st == KILN_OK && kiln_emu_profile_get(kern, &prof, &err) == KILN_OK) n = prof.inst[KILN_PROF_MMA];
    if (kern) kiln_emu_kernel_free(kern);
    free(o), free(lse);
    return n;
}

int main(void) {
    kiln_error err = {0};
    kiln_gen *gen;
    kiln_emu *emu;
    if (kiln_gen_create(&gen, NULL, &err) != KILN_OK || kiln_emu_create(&emu, &err) != KILN_OK) {
        printf("setup failed: %s\nattention window profile: 0 passed, 1 failed\n", err.msg);
        return 1;
    }
    kiln_emu_set_profile(emu, 1);
    uint64_t seed = 7;
    size_t n = (size_t)N * 64;
    void *q = kiln_attn_random(KILN_F16, n, 1, &seed), *k = kiln_attn_random(KILN_F16, n, 1, &seed);
    void *v = kiln_attn_random(KILN_F16, n, 1, &seed);
    TEST_BEGIN("window N/8 over N keys: mma against full causal and full attention (emulator profile)");
    unsigned long long win = mma_count(emu, gen, "attention dtype=f16 head_dim=64 causal=true window=true", W, q, k, v);
    unsigned long long causal = mma_count(emu, gen, "attention dtype=f16 head_dim=64 causal=true", -1, q, k, v);
    unsigned long long full = mma_count(emu, gen, "attention dtype=f16 head_dim=64 causal=false", -1, q, k, v);
    unsigned long long tw, tc, tf;
    key_tiles(N, W, &tw, &tc, &tf);
    printf("mma: window %llu, causal %llu, full %llu; window / causal %.3f (tiles %.3f), window / full %.3f (tiles %.3f)\n",
           win, causal, full, (double)win / (double)causal, (double)tw / (double)tc, (double)win / (double)full,
           (double)tw / (double)tf);
    CHECK(win > 0 && causal > 0 && full > 0, "no mma counted");
    /* each visited tile costs the same mma: the counts are proportional to the tiles */
    CHECK(win * tc == causal * tw, "window / causal mma %llu / %llu, expected the tile ratio %llu / %llu", win, causal, tw, tc);
    CHECK(win * tf == full * tw, "window / full mma %llu / %llu, expected the tile ratio %llu / %llu", win, full, tw, tf);
    TEST_END();
    /* The mma are the visited tiles' (above), so the tiles at issue 24's real proportions give its figure:
     * a window of 4096 over 32768 keys issues ~1/8 of full attention's mma (W/N) and ~1/4 of full
     * causal's (whose rows see N/2 keys on average: 2W/N). */
    TEST_BEGIN("window 4096 over 32768 keys: ~1/8 of full attention's mma, ~1/4 of full causal's (tiles)");
    key_tiles(32768, 4096, &tw, &tc, &tf);
    double rf = (double)tw / (double)tf, rc = (double)tw / (double)tc;
    printf("32768 keys, window 4096: window / full %.4f, window / causal %.4f\n", rf, rc);
    /* (within 5 %: the first rows' windows are cut at key 0, the blocks' edges add tiles) */
    CHECK(rf >= 0.125 * 0.95 && rf <= 0.125 * 1.05, "window / full %.4f, expected 1/8 within 5%%", rf);
    CHECK(rc >= 0.25 * 0.95 && rc <= 0.25 * 1.05, "window / causal %.4f, expected 1/4 within 5%%", rc);
    TEST_END();
    free(q), free(k), free(v);
    kiln_emu_destroy(emu);
    kiln_gen_destroy(gen);
    return check_summary("attention window profile");
}
