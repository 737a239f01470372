/* bench/attention_bwd_bench.c - spec -> PTX latency of the attention backward kernels in a warm process
 * (median and min per kernel, and the whole prep + dkdv + convert sequence). */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "bench_time.h"
#include "kiln/kiln.h"

int main(int argc, char **argv) {
    static const struct {
        const char *keys;
        int sm;
    } cases[] = {
        {"dtype=f16 head_dim=128 causal=true", 80}, {"dtype=bf16 head_dim=64 causal=true", 90},
        {"dtype=f16 head_dim=64 causal=false", 75}, {"dtype=bf16 head_dim=128 causal=true", 75},
        {"dtype=f32 head_dim=64 causal=false", 80},
    };
    static const char *kernels[] = {"prep", "dkdv", "convert", "dq"};
    int reps = argc > 1 ? atoi(argv[1]) : 5;
    if (reps < 1 || reps > 1000) reps = 5;
    kiln_error err = {0};
    kiln_gen *gen;
    if (kiln_gen_create(&gen, NULL, &err) != KILN_OK) {
        fprintf(stderr, "attention_bwd_bench: %s\n", err.msg);
        return 1;
    }
    double *t = malloc(sizeof *t * (size_t)reps);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        double seq = 0;
        printf("%s sm_%d:", cases[c].keys, cases[c].sm);
        for (int k = 0; k < 4; k++) {
            char spec[256];
            snprintf(spec, sizeof spec, "attention_bwd kernel=%s %s", kernels[k], cases[c].keys);
            for (int r = -1; r < reps; r++) { /* one warm-up run */
                kiln_module *m = NULL;
                double t0 = bench_now_ms();
                if (kiln_generate(gen, spec, cases[c].sm, KILN_EMIT_PTX, &m, &err) != KILN_OK) {
                    fprintf(stderr, "attention_bwd_bench: %s\n", err.msg);
                    return 1;
                }
                if (r >= 0) t[r] = bench_now_ms() - t0;
                kiln_module_free(m);
            }
            qsort(t, (size_t)reps, sizeof *t, bench_cmp_double);
            if (k < 3) seq += t[reps / 2];
            printf("  %s %.1f ms", kernels[k], t[reps / 2]);
        }
        printf("  | sequence prep+dkdv+convert %.1f ms (medians)\n", seq);
    }
    free(t);
    kiln_gen_destroy(gen);
    return 0;
}
