/* tests/matrix.h - the ptxas matrix for any list of variants: generate, lint, no bf16 below
 * sm_80, assemble with ptxas -v for the variant's SM, 0 bytes of spills. */
#ifndef KILN_TESTS_MATRIX_H
#define KILN_TESTS_MATRIX_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "kiln/kiln.h"
#include "kiln/lint.h"
#include "ptxas_util.h"

typedef struct matrix_variant {
    char spec[256];
    int sm;
    /* filled by matrix_check */
    int registers, smem;   /* from ptxas -v (-1 when not assembled) */
    unsigned dynamic_smem; /* from the kernel's metadata */
} matrix_variant;

/* Lints ptx; returns the number of findings and describes the first in buf. */
static size_t matrix_lint(const char *ptx, size_t len, char *buf, size_t size) {
    kiln_lint_report *r = NULL;
    kiln_error err = {0};
    buf[0] = 0;
    if (kiln_lint(ptx, len, 0, &r, &err) != KILN_OK) {
        snprintf(buf, size, "lint failed: %s", err.msg);
        return 1;
    }
    size_t n = kiln_lint_count(r);
    if (n) snprintf(buf, size, "line %d: %s", kiln_lint_get(r, 0)->line, kiln_lint_get(r, 0)->message);
    kiln_lint_free(r);
    return n;
}

static double matrix_seconds(struct timespec a, struct timespec b) {
    return (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) * 1e-9;
}

/* Runs the whole matrix, counting test cases in check.h's counters; returns how many variants
 * were not assembled because ptxas is absent. */
static int matrix_check(kiln_gen *gen, matrix_variant *vs, int n) {
    const char *ptxas = ptxas_path();
    char dir[] = "/tmp/kiln-matrix-XXXXXX";
    if (!mkdtemp(dir)) return n;
    ptxas_job *jobs = calloc((size_t)n, sizeof *jobs);
    int *idx = calloc((size_t)n, sizeof *idx), nrun = 0;
    kiln_error err = {0};
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < n; i++) {
        char name[512], why[1200];
        snprintf(name, sizeof name, "%.255s (sm_%d) generates, lints clean", vs[i].spec, vs[i].sm);
        TEST_BEGIN(name);
        vs[i].registers = vs[i].smem = -1;
        kiln_module *m = NULL;
        kiln_status st = kiln_generate(gen, vs[i].spec, vs[i].sm, KILN_EMIT_PTX, &m, &err);
        CHECK(st == KILN_OK, "generation failed: %s", err.msg);
        if (st == KILN_OK) {
            const char *ptx = kiln_module_text(m);
            size_t findings = matrix_lint(ptx, kiln_module_size(m), why, sizeof why);
            CHECK(findings == 0, "%zu lint findings; first: %s", findings, why);
            CHECK(kiln_module_meta(m)->sm == vs[i].sm, "metadata says sm_%d", kiln_module_meta(m)->sm);
            if (vs[i].sm < 80) {
                int line = ptx_bf16_line(ptx);
                CHECK(line == 0, "bf16 instruction on line %d of sm_%d PTX", line, vs[i].sm);
            }
            vs[i].dynamic_smem = kiln_module_meta(m)->dynamic_smem;
            snprintf(jobs[nrun].ptx, sizeof jobs[nrun].ptx, "%s/v%d.ptx", dir, i);
            snprintf(jobs[nrun].log, sizeof jobs[nrun].log, "%s/v%d.log", dir, i);
            jobs[nrun].sm = vs[i].sm;
            if (write_file(jobs[nrun].ptx, ptx, kiln_module_size(m)) == 0) idx[nrun++] = i;
            kiln_module_free(m);
        }
        TEST_END();
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    printf("generated %d variants in %.2f s (%.1f ms each)\n", n, matrix_seconds(t0, t1), matrix_seconds(t0, t1) * 1e3 / n);
    int skipped = 0;
    if (!ptxas) {
        printf("SKIP ptxas: not found (set PTXAS or install the CUDA toolkit); %d variants not assembled\n", nrun);
        skipped = nrun;
    } else {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        clock_gettime(CLOCK_MONOTONIC, &t0);
        ptxas_run_all(ptxas, jobs, nrun, cores > 0 ? (int)cores : 2);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        printf("ptxas assembled %d variants in %.1f s\n", nrun, matrix_seconds(t0, t1));
        for (int k = 0; k < nrun; k++) {
            matrix_variant *v = &vs[idx[k]];
            char name[512];
            snprintf(name, sizeof name, "%.255s (sm_%d) assembles, 0 spills", v->spec, v->sm);
            TEST_BEGIN(name);
            char *log = slurp(jobs[k].log, NULL);
            long spills;
            ptxas_resources(log ? log : "", &spills, &v->registers, &v->smem);
            CHECK(jobs[k].status == 0, "ptxas failed (exit %d): %.400s", jobs[k].status, log ? log : "");
            CHECK(spills == 0, "%ld bytes of spills", spills);
            free(log);
            TEST_END();
            unlink(jobs[k].ptx);
            unlink(jobs[k].log);
        }
    }
    rmdir(dir);
    free(jobs);
    free(idx);
    return skipped;
}

#endif
