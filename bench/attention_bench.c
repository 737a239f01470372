/* bench/attention_bench.c - spec -> PTX latency of attention variants in a warm process (budget <= 30 ms median). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_time.h"
#include "kiln/kiln.h"

#define BUDGET_MS 30.0

int main(int argc, char **argv) {
    static const struct {
        const char *spec;
        int sm;
    } cases[] = {
        {"attention dtype=f16 head_dim=64 causal=false", 80},  {"attention dtype=bf16 head_dim=128 causal=true", 80},
        {"attention dtype=f16 head_dim=128 causal=true", 90},  {"attention dtype=f16 head_dim=64 causal=true", 75},
        {"attention dtype=bf16 head_dim=128 causal=false", 75}, {"attention dtype=f32 head_dim=64 causal=false", 80},
        {"attention dtype=f16 head_dim=256 causal=false", 86},
    };
    int reps = argc > 1 ? atoi(argv[1]) : 9;
    if (reps < 1 || reps > 1000) reps = 9;
    kiln_error err = {0};
    kiln_gen *gen;
    if (kiln_gen_create(&gen, NULL, &err) != KILN_OK) {
        fprintf(stderr, "attention_bench: %s\n", err.msg);
        return 1;
    }
    int over = 0;
    double *t = malloc(sizeof *t * (size_t)reps);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        for (int r = -1; r < reps; r++) { /* one warm-up run */
            kiln_module *m = NULL;
            double t0 = bench_now_ms();
            if (kiln_generate(gen, cases[c].spec, cases[c].sm, KILN_EMIT_PTX, &m, &err) != KILN_OK) {
                fprintf(stderr, "attention_bench: %s\n", err.msg);
                return 1;
            }
            double dt = bench_now_ms() - t0;
            if (r >= 0) t[r] = dt;
            kiln_module_free(m);
        }
        qsort(t, (size_t)reps, sizeof *t, bench_cmp_double);
        double med = t[reps / 2];
        over += med > BUDGET_MS;
        printf("%-50s sm_%d  median %7.2f ms  min %7.2f ms  (budget <= %.0f ms: %s)\n", cases[c].spec, cases[c].sm, med,
               t[0], BUDGET_MS, med <= BUDGET_MS ? "ok" : "OVER");
    }
    free(t);
    kiln_gen_destroy(gen);
    return over ? 1 : 0;
}
