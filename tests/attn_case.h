/* tests/attn_case.h - the attention emulator tests' problem as the case runner's named options. */
#ifndef KILN_TESTS_ATTN_CASE_H
#define KILN_TESTS_ATTN_CASE_H

#include <stddef.h>
#include <stdint.h>

#include "kiln/emu_case.h"

/* The options of one attention (or backward) case on sm: batch, heads, the query and key lengths, q and k's
 * amplitude, the softmax scale (0: 1/sqrt(head_dim)) and what the kernel rounds P to (the error model:
 * KILN_F32 sets p_f32, KILN_F16 p_f16, else the input dtype's). The caller adds its mask keys. */
static inline kiln_case_opts attn_case_opts(int sm, uint64_t seed, int twice, int batch, int heads_q, int heads_kv,
                                            int seq_q, int seq_k, double amplitude, float scale, kiln_dtype p_dtype) {
    kiln_case_opts o = {.sm = sm, .seed = seed, .twice = twice, .scale = amplitude};
    kiln_case_opts_set(&o, "batch", batch);
    kiln_case_opts_set(&o, "heads_q", heads_q);
    kiln_case_opts_set(&o, "heads_kv", heads_kv);
    kiln_case_opts_set(&o, "rows", seq_q);
    kiln_case_opts_set(&o, "seq_k", seq_k);
    if (scale) kiln_case_opts_set(&o, "softmax_scale", scale);
    if (p_dtype == KILN_F32) kiln_case_opts_set(&o, "p_f32", 1);
    else if (p_dtype == KILN_F16) kiln_case_opts_set(&o, "p_f16", 1);
    return o;
}

/* How many of the sanitizer build's cases and estimate rows one runs: one in ATTN_SAN_EVERY (8 unless the test
 * defines it before including this header). That build is for memory and UB errors in the C code, which a sample of
 * the cases reaches as well as all of them; the plain build runs every case. Wave 22 went from one in two to one in
 * four, and wave 24 to one in eight for the two f16-scaled tests (the sanitizer pass's largest CPU: 196 and 113 s of
 * wave 23's 1272); wave 25 halved both again (eight, and sixteen for those two: they were 163 and 139 s of CPU of
 * wave 24's 1354, the tests using this header 497), to keep the suite inside CI's time budget. */
#ifndef ATTN_SAN_EVERY
#define ATTN_SAN_EVERY 8
#endif

/* Whether the sanitizer build leaves this case out: it runs one in ATTN_SAN_EVERY, rotating with the path so that
 * the cases left out on one path run on another. The caller still advances its seeds and rotations for a case left
 * out, so the cases that run are the plain build's, bit for bit. */
static inline int attn_case_sampled_out(size_t path_index, size_t case_index) {
#ifdef __SANITIZE_ADDRESS__
    return (path_index + case_index) % ATTN_SAN_EVERY != 0;
#else
    (void)path_index;
    (void)case_index;
    return 0;
#endif
}

/* Whether the sanitizer build leaves out row `row` of a profile estimate (the T4 estimates of the f16-scaled
 * tests): it runs one row in ATTN_SAN_EVERY. An estimate row is a ratio of two deterministic instruction counts,
 * the same in both builds, and its kernels run the same emulator code as the cases; the plain build runs and checks
 * every row. */
static inline int attn_estimate_sampled_out(size_t row) {
#ifdef __SANITIZE_ADDRESS__
    return row % ATTN_SAN_EVERY != 0;
#else
    (void)row;
    return 0;
#endif
}

#endif
