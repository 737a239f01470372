/* bench/jit_bench.c - JIT at model load: spec -> PTX time per variant in a warm process with the
 * split per stage (kiln_gen_last_timing), and a transformer's kernel set generated cold on all
 * cores (bench/transformer_kernels.txt).
 *
 *   jit_bench warm [REPS]            median per variant, wall and thread CPU, and its stages
 *   jit_bench model [FILE [THREADS]] the kernel set in this fresh process, one generator a thread
 *   jit_bench count SM SPEC          one spec generated three times; under callgrind
 *                                    (--instr-atstart=no) only the third, warm one is counted
 *
 * Medians of wall-clock time on a shared machine: the CPU time of the calling thread is printed
 * next to it because it moves less with the load of other processes. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#if defined(__has_include)
#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
#endif
#endif
#ifndef CALLGRIND_START_INSTRUMENTATION
#define CALLGRIND_START_INSTRUMENTATION
#define CALLGRIND_STOP_INSTRUMENTATION
#endif

#include "bench_time.h"
#include "kiln/kiln.h"

/* ---- warm: per variant, stage split ---- */

enum { ST_TEMPLATE, ST_IR, ST_VERIFY, ST_OPT, ST_CG_IR, ST_ISEL, ST_MACHINE, ST_PRINT, ST_OTHER, NSTAGES };
static const char *stage_names[NSTAGES] = {"Lua", "IR", "verify", "opt", "cg-IR", "isel", "mach", "print", "other"};

static void split(const kiln_gen_timing *t, double *out) {
    double builder = t->builder >= 0 ? t->builder : 0;
    out[ST_TEMPLATE] = t->spec + t->config + t->build - builder;
    out[ST_IR] = builder;
    out[ST_VERIFY] = t->verify;
    out[ST_OPT] = t->optimize;
    out[ST_CG_IR] = t->codegen_ir;
    out[ST_ISEL] = t->isel;
    out[ST_MACHINE] = t->codegen;
    out[ST_PRINT] = t->print;
    double sum = 0;
    for (int s = 0; s < ST_OTHER; s++) sum += out[s];
    out[ST_OTHER] = t->total - sum;
}

static const struct {
    const char *spec;
    int sm;
    double budget; /* ms, DESIGN.md */
} warm_cases[] = {
    {"layernorm x=bf16 w=f32 y=bf16 hidden=4096", 80, 3},
    {"layernorm x=bf16 w=f32 y=bf16 hidden=4096", 75, 3},
    {"layernorm x=f16 hidden=768", 86, 3},
    {"layernorm x=f32 hidden=16384", 90, 3},
    {"layernorm x=bf16 hidden=launch", 80, 3},
    {"attention dtype=f16 head_dim=64 causal=false", 80, 12},
    {"attention dtype=bf16 head_dim=128 causal=true", 80, 12},
    {"attention dtype=f16 head_dim=128 causal=true", 90, 12},
    {"attention dtype=f16 head_dim=64 causal=true", 75, 12},
    {"attention dtype=bf16 head_dim=128 causal=false", 75, 12},
    {"attention dtype=f32 head_dim=64 causal=false", 80, 12},
    {"attention dtype=f16 head_dim=256 causal=false", 86, 12},
};

static int warm(int reps) {
    kiln_error err = {0};
    kiln_gen *plain, *timed;
    kiln_gen_options topt = {.time_builder = 1};
    if (kiln_gen_create(&plain, NULL, &err) != KILN_OK || kiln_gen_create(&timed, &topt, &err) != KILN_OK) {
        fprintf(stderr, "jit_bench: %s\n", err.msg);
        return 1;
    }
    double *wall = malloc(sizeof(double) * (size_t)reps), *cpu = malloc(sizeof(double) * (size_t)reps);
    double *st = malloc(sizeof(double) * (size_t)reps * NSTAGES);
    printf("spec -> PTX in a warm process, median of %d (wall; CPU of the thread); stages in ms "
           "(CPU, median each, from a generator that also times builder calls):\n",
           reps);
    printf("%-47s %-5s %7s %7s %6s |", "variant", "sm", "wall", "cpu", "budget");
    for (int s = 0; s < NSTAGES; s++) printf(" %6s", stage_names[s]);
    printf("\n");
    int over = 0;
    for (size_t c = 0; c < sizeof warm_cases / sizeof warm_cases[0]; c++) {
        for (int pass = 0; pass < 2; pass++) {
            kiln_gen *g = pass ? timed : plain;
            for (int r = -2; r < reps; r++) { /* two warm-up runs */
                kiln_module *m;
                double w0 = bench_clock_ms(CLOCK_MONOTONIC), c0 = bench_clock_ms(CLOCK_THREAD_CPUTIME_ID);
                if (kiln_generate(g, warm_cases[c].spec, warm_cases[c].sm, KILN_EMIT_PTX, &m, &err) != KILN_OK) {
                    fprintf(stderr, "jit_bench: %s\n", err.msg);
                    return 1;
                }
                double w1 = bench_clock_ms(CLOCK_MONOTONIC), c1 = bench_clock_ms(CLOCK_THREAD_CPUTIME_ID);
                kiln_module_free(m);
                if (r < 0) continue;
                if (pass == 0) {
                    wall[r] = w1 - w0;
                    cpu[r] = c1 - c0;
                } else {
                    double s[NSTAGES];
                    split(kiln_gen_last_timing(g), s);
                    for (int k = 0; k < NSTAGES; k++) st[k * reps + r] = s[k];
                }
            }
        }
        double mw = bench_median(wall, reps), mc = bench_median(cpu, reps);
        over += mw > warm_cases[c].budget;
        printf("%-47s sm_%d %7.2f %7.2f %3.0f %s |", warm_cases[c].spec, warm_cases[c].sm, mw, mc,
               warm_cases[c].budget, mw <= warm_cases[c].budget ? "ok" : "--");
        for (int k = 0; k < NSTAGES; k++) printf(" %6.2f", bench_median(st + k * reps, reps));
        printf("\n");
    }
    printf("%d of %zu variants over budget (wall, on this machine under its current load)\n", over,
           sizeof warm_cases / sizeof warm_cases[0]);
    free(wall);
    free(cpu);
    free(st);
    kiln_gen_destroy(plain);
    kiln_gen_destroy(timed);
    return 0;
}

/* ---- model: the kernel set, cold, every core ---- */

typedef struct job {
    int sm;
    char spec[256];
    int status; /* 0 ok, 1 failed, 2 skipped (family unknown to this build) */
    char msg[256];
    double ms;
    size_t bytes;
} job;

static job *jobs;
static int njobs;
static atomic_int next_job;

static void *worker(void *arg) {
    (void)arg;
    kiln_gen *g;
    kiln_error err = {0};
    if (kiln_gen_create(&g, NULL, &err) != KILN_OK) return NULL;
    for (int i; (i = atomic_fetch_add(&next_job, 1)) < njobs;) {
        job *j = &jobs[i];
        double t0 = bench_clock_ms(CLOCK_MONOTONIC);
        kiln_module *m;
        kiln_status st = kiln_generate(g, j->spec, j->sm, KILN_EMIT_PTX, &m, &err);
        j->ms = bench_clock_ms(CLOCK_MONOTONIC) - t0;
        if (st == KILN_OK) {
            j->bytes = kiln_module_size(m);
            kiln_module_free(m);
        } else {
            j->status = strstr(err.msg, "unknown kernel family") ? 2 : 1;
            snprintf(j->msg, sizeof j->msg, "%.200s", err.msg);
        }
    }
    kiln_gen_destroy(g);
    return NULL;
}

static int read_set(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "jit_bench: cannot open %s\n", path);
        return -1;
    }
    char line[512];
    int cap = 0;
    while (fgets(line, sizeof line, f)) {
        char *p = line;
        while (*p == ' ' || *p == '\t') p++;
        if (*p == '#' || *p == '\n' || !*p) continue;
        int sm, used = 0;
        if (sscanf(p, "%d %n", &sm, &used) != 1 || !used) {
            fprintf(stderr, "jit_bench: %s: bad line '%s' (want: SM SPEC)\n", path, p);
            fclose(f);
            return -1;
        }
        if (njobs == cap) {
            cap = cap ? cap * 2 : 32;
            jobs = realloc(jobs, sizeof *jobs * (size_t)cap);
        }
        job *j = &jobs[njobs++];
        memset(j, 0, sizeof *j);
        j->sm = sm;
        snprintf(j->spec, sizeof j->spec, "%s", p + used);
        j->spec[strcspn(j->spec, "\r\n")] = 0;
    }
    fclose(f);
    return njobs;
}

static int model(const char *path, int threads, double t_main) {
    if (read_set(path) <= 0) return 1;
    if (threads < 1) threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (threads < 1) threads = 1;
    pthread_t *th = malloc(sizeof *th * (size_t)threads);
    double t0 = bench_clock_ms(CLOCK_MONOTONIC), c0 = bench_clock_ms(CLOCK_PROCESS_CPUTIME_ID);
    for (int i = 0; i < threads; i++) pthread_create(&th[i], NULL, worker, NULL);
    for (int i = 0; i < threads; i++) pthread_join(th[i], NULL);
    double t1 = bench_clock_ms(CLOCK_MONOTONIC), c1 = bench_clock_ms(CLOCK_PROCESS_CPUTIME_ID);
    free(th);
    int ok = 0, failed = 0, skipped = 0;
    for (int i = 0; i < njobs; i++) {
        job *j = &jobs[i];
        if (j->status == 0) ok++;
        else if (j->status == 2) skipped++;
        else failed++;
        printf("  sm_%d %-50s %8.2f ms  %s\n", j->sm, j->spec, j->ms,
               j->status == 0 ? "" : j->status == 2 ? "skipped: family not in this build" : j->msg);
    }
    printf("kernel set (%s): %d generated, %d skipped, %d failed on %d threads, cold (no cache, fresh "
           "generators): %.1f ms wall (%.1f ms from main), %.1f ms CPU (budget <= 150 ms wall)\n",
           path, ok, skipped, failed, threads, t1 - t0, t1 - t_main, c1 - c0);
    free(jobs);
    return failed ? 1 : 0;
}

/* ---- count: exact instructions of one warm generation (valgrind --tool=callgrind --instr-atstart=no) ---- */

static int count(int sm, const char *spec) {
    kiln_error err = {0};
    kiln_gen *g;
    if (kiln_gen_create(&g, NULL, &err) != KILN_OK) {
        fprintf(stderr, "jit_bench: %s\n", err.msg);
        return 1;
    }
    size_t bytes = 0;
    for (int r = 0; r < 3; r++) {
        kiln_module *m = NULL;
        if (r == 2) CALLGRIND_START_INSTRUMENTATION;
        kiln_status st = kiln_generate(g, spec, sm, KILN_EMIT_PTX, &m, &err);
        if (r == 2) CALLGRIND_STOP_INSTRUMENTATION;
        if (st != KILN_OK) {
            fprintf(stderr, "jit_bench: %s\n", err.msg);
            kiln_gen_destroy(g);
            return 1;
        }
        bytes = kiln_module_size(m);
        kiln_module_free(m);
    }
    printf("%s sm_%d: %zu bytes of PTX, generated 3 times (callgrind counts the third)\n", spec, sm, bytes);
    kiln_gen_destroy(g);
    return 0;
}

int main(int argc, char **argv) {
    double t_main = bench_clock_ms(CLOCK_MONOTONIC);
    const char *mode = argc > 1 ? argv[1] : "warm";
    if (!strcmp(mode, "warm")) {
        int reps = argc > 2 ? atoi(argv[2]) : 11;
        return warm(reps >= 1 && reps <= 1000 ? reps : 11);
    }
    if (!strcmp(mode, "model"))
        return model(argc > 2 ? argv[2] : "bench/transformer_kernels.txt", argc > 3 ? atoi(argv[3]) : 0, t_main);
    if (!strcmp(mode, "count") && argc == 4 && atoi(argv[2]) > 0) return count(atoi(argv[2]), argv[3]);
    fprintf(stderr, "usage: jit_bench warm [REPS] | model [FILE [THREADS]] | count SM SPEC\n");
    return 2;
}
