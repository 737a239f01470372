/* tests/ptxas_matrix_test.c - every generated LayerNorm variant verifies, is lint-clean,
 * assembles with ptxas for its SM with 0 bytes of spills, and (below sm_80) holds no bf16
 * instruction. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "kiln/kiln.h"
#include "kiln/lint.h"
#include "ptxas_util.h"

static const int sms[] = {75, 80, 86, 89, 90};
static const char *dtypes[] = {"f32", "f16", "bf16"};
static const char *hiddens[] = {"1", "7", "33", "100", "768", "1000", "4096", "16384", "launch"};

typedef struct variant {
    char spec[256];
    int sm;
} variant;

/* Every LayerNorm variant the matrix covers. */
static int layernorm_variants(variant *v, int cap) {
    int n = 0;
    for (int s = 0; s < 5; s++)
        for (int x = 0; x < 3; x++)
            for (int w = 0; w < 3; w++)
                for (int y = 0; y < 3; y++)
                    for (size_t h = 0; h < sizeof hiddens / sizeof *hiddens && n < cap; h++, n++) {
                        snprintf(v[n].spec, sizeof v[n].spec, "layernorm x=%s w=%s y=%s hidden=%s", dtypes[x],
                                 dtypes[w], dtypes[y], hiddens[h]);
                        v[n].sm = sms[s];
                    }
    /* weight/bias switched off, on the common dtype pairs */
    static const char *affine[] = {"weight=false", "bias=false", "weight=false bias=false"};
    static const char *pairs[] = {"x=bf16 w=f32 y=bf16", "x=f16", "x=f32"};
    static const char *sizes[] = {"7", "768", "launch"};
    for (int s = 0; s < 5; s++)
        for (int a = 0; a < 3; a++)
            for (int p = 0; p < 3; p++)
                for (int h = 0; h < 3 && n < cap; h++, n++) {
                    snprintf(v[n].spec, sizeof v[n].spec, "layernorm %s hidden=%s %s", pairs[p], sizes[h], affine[a]);
                    v[n].sm = sms[s];
                }
    return n;
}

int main(void) {
    static variant vs[4096];
    int n = layernorm_variants(vs, 4096);
    const char *ptxas = ptxas_path();
    kiln_error err = {0};
    kiln_gen *gen;
    if (kiln_gen_create(&gen, NULL, &err) != KILN_OK) {
        printf("cannot create generator: %s\n", err.msg);
        return 1;
    }
    char dir[] = "/tmp/kiln-matrix-XXXXXX";
    if (!mkdtemp(dir)) return 1;
    ptxas_job *jobs = calloc((size_t)n, sizeof *jobs);
    int *generated = calloc((size_t)n, sizeof *generated);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < n; i++) {
        char name[300];
        snprintf(name, sizeof name, "%.250s (sm_%d)", vs[i].spec, vs[i].sm);
        TEST_BEGIN(name);
        kiln_module *m = NULL;
        kiln_status st = kiln_generate(gen, vs[i].spec, vs[i].sm, KILN_EMIT_PTX, &m, &err);
        CHECK(st == KILN_OK, "generation failed: %s", err.msg);
        if (st == KILN_OK) {
            const char *ptx = kiln_module_text(m);
            const kiln_kernel_meta *meta = kiln_module_meta(m);
            CHECK(meta->sm == vs[i].sm, "meta says sm_%d", meta->sm);
            if (vs[i].sm < 80) {
                int line = ptx_bf16_line(ptx);
                CHECK(line == 0, "bf16 instruction on line %d of sm_%d PTX", line, vs[i].sm);
            }
            kiln_lint_report *lint = NULL;
            CHECK(kiln_lint(ptx, kiln_module_size(m), 0, &lint, &err) == KILN_OK, "lint: %s", err.msg);
            if (lint) {
                const kiln_lint_finding *f = kiln_lint_get(lint, 0);
                CHECK(kiln_lint_count(lint) == 0, "%zu lint findings, first on line %d: %s", kiln_lint_count(lint),
                      f ? f->line : 0, f ? f->message : "");
                kiln_lint_free(lint);
            }
            snprintf(jobs[i].ptx, sizeof jobs[i].ptx, "%s/v%d.ptx", dir, i);
            snprintf(jobs[i].log, sizeof jobs[i].log, "%s/v%d.log", dir, i);
            jobs[i].sm = vs[i].sm;
            generated[i] = write_file(jobs[i].ptx, ptx, kiln_module_size(m)) == 0;
            kiln_module_free(m);
        }
        if (check_case_failed) TEST_END();
        else check_case_failed = -1; /* finished after ptxas */
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double gen_s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    printf("generated %d variants in %.2f s (%.2f ms each)\n", n, gen_s, gen_s * 1e3 / n);
    int skipped = 0;
    if (!ptxas) {
        printf("SKIP ptxas: not found (set PTXAS or install the CUDA toolkit); %d variants not assembled\n", n);
        skipped = n;
    } else {
        /* compact the jobs that generated and run them */
        ptxas_job *run = calloc((size_t)n, sizeof *run);
        int *idx = calloc((size_t)n, sizeof *idx), nrun = 0;
        for (int i = 0; i < n; i++)
            if (generated[i]) {
                idx[nrun] = i;
                run[nrun++] = jobs[i];
            }
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        clock_gettime(CLOCK_MONOTONIC, &t0);
        ptxas_run_all(ptxas, run, nrun, cores > 0 ? (int)cores : 2);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        printf("ptxas assembled %d variants in %.1f s\n", nrun,
               (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9);
        for (int k = 0; k < nrun; k++) {
            int i = idx[k];
            char name[300];
            snprintf(name, sizeof name, "%.250s (sm_%d)", vs[i].spec, vs[i].sm);
            TEST_BEGIN(name);
            char *log = slurp(run[k].log, NULL);
            long spills;
            int regs, smem;
            ptxas_resources(log ? log : "", &spills, &regs, &smem);
            CHECK(run[k].status == 0, "ptxas failed (exit %d): %.400s", run[k].status, log ? log : "");
            CHECK(spills == 0, "%ld bytes of spills", spills);
            free(log);
            TEST_END();
            unlink(run[k].ptx);
            unlink(run[k].log);
        }
        free(run);
        free(idx);
    }
    if (skipped) {
        /* count generation-only passes */
        for (int i = 0; i < n; i++)
            if (generated[i]) check_passed++;
    }
    rmdir(dir);
    free(jobs);
    free(generated);
    kiln_gen_destroy(gen);
    printf("ptxas matrix: %d passed, %d failed, %d skipped\n", check_passed, check_failed, skipped);
    return check_failed ? 1 : 0;
}
