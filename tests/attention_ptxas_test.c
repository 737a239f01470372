/* tests/attention_ptxas_test.c - every attention variant assembles with ptxas for its SM with
 * 0 bytes of spills, lints clean, and holds no bf16 instruction below sm_80.
 * KILN_ATTN_TABLE=1 prints registers and shared memory per variant as a Markdown table. */
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
static const int dims[] = {32, 64, 96, 128, 256};

typedef struct variant {
    char spec[256];
    int sm;
} variant;

static int add(variant *v, int n, int sm, const char *fmt, const char *a, int d, const char *causal) {
    snprintf(v[n].spec, sizeof v[n].spec, fmt, a, d, causal);
    v[n].sm = sm;
    return n + 1;
}

/* SM x dtype x head_dim x causal on the default path; the SIMT path forced for f16/bf16;
 * an f32 output from half-precision inputs. */
static int attention_variants(variant *v) {
    int n = 0;
    for (int s = 0; s < 5; s++)
        for (int t = 0; t < 3; t++)
            for (int d = 0; d < 5; d++)
                for (int c = 0; c < 2; c++) {
                    const char *causal = c ? "true" : "false";
                    n = add(v, n, sms[s], "attention dtype=%s head_dim=%d causal=%s", dtypes[t], dims[d], causal);
                    if (t > 0 && s <= 1)
                        n = add(v, n, sms[s], "attention dtype=%s head_dim=%d causal=%s path=simt", dtypes[t], dims[d],
                                causal);
                }
    for (int s = 0; s < 5; s++)
        for (int t = 1; t < 3; t++) n = add(v, n, sms[s], "attention dtype=%s head_dim=%d causal=%s out=f32", dtypes[t], 128, "true");
    return n;
}

/* Lints ptx; returns the number of findings and describes the first in buf. */
static size_t lint_findings(const char *ptx, size_t len, char *buf, size_t size) {
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

int main(void) {
    static variant vs[512];
    int n = attention_variants(vs);
    const char *ptxas = ptxas_path();
    int table = getenv("KILN_ATTN_TABLE") != NULL;
    kiln_error err = {0};
    kiln_gen *gen;
    if (kiln_gen_create(&gen, NULL, &err) != KILN_OK) {
        printf("cannot create generator: %s\nattention ptxas: 0 passed, 1 failed\n", err.msg);
        return 1;
    }
    char dir[] = "/tmp/kiln-attn-XXXXXX";
    if (!mkdtemp(dir)) return 1;
    ptxas_job *jobs = calloc((size_t)n, sizeof *jobs);
    int *idx = calloc((size_t)n, sizeof *idx), nrun = 0;
    unsigned *dyn = calloc((size_t)n, sizeof *dyn); /* dynamic shared memory from the metadata */
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < n; i++) {
        char name[512], why[1200];
        snprintf(name, sizeof name, "%.255s (sm_%d) generates, lints clean", vs[i].spec, vs[i].sm);
        TEST_BEGIN(name);
        kiln_module *m = NULL;
        kiln_status st = kiln_generate(gen, vs[i].spec, vs[i].sm, KILN_EMIT_PTX, &m, &err);
        CHECK(st == KILN_OK, "generation failed: %s", err.msg);
        if (st == KILN_OK) {
            const char *ptx = kiln_module_text(m);
            size_t findings = lint_findings(ptx, kiln_module_size(m), why, sizeof why);
            CHECK(findings == 0, "%zu lint findings; first: %s", findings, why);
            if (vs[i].sm < 80) {
                int line = ptx_bf16_line(ptx);
                CHECK(line == 0, "bf16 instruction on line %d of sm_%d PTX", line, vs[i].sm);
            }
            snprintf(jobs[nrun].ptx, sizeof jobs[nrun].ptx, "%s/v%d.ptx", dir, i);
            snprintf(jobs[nrun].log, sizeof jobs[nrun].log, "%s/v%d.log", dir, i);
            jobs[nrun].sm = vs[i].sm;
            dyn[nrun] = kiln_module_meta(m)->dynamic_smem;
            if (write_file(jobs[nrun].ptx, ptx, kiln_module_size(m)) == 0) idx[nrun++] = i;
            kiln_module_free(m);
        }
        TEST_END();
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double gen_s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    printf("generated %d attention variants in %.2f s (%.1f ms each)\n", n, gen_s, gen_s * 1e3 / n);
    int skipped = 0;
    if (!ptxas) {
        printf("SKIP ptxas: not found (set PTXAS or install the CUDA toolkit); %d variants not assembled\n", nrun);
        skipped = nrun;
    } else {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        ptxas_run_all(ptxas, jobs, nrun, cores > 0 ? (int)cores : 2);
        if (table) printf("| spec | sm | registers | static + dynamic shared memory (bytes) |\n|---|---|---|---|\n");
        for (int k = 0; k < nrun; k++) {
            int i = idx[k];
            char name[512];
            snprintf(name, sizeof name, "%.255s (sm_%d) assembles, 0 spills", vs[i].spec, vs[i].sm);
            TEST_BEGIN(name);
            char *log = slurp(jobs[k].log, NULL);
            long spills;
            int regs, smem;
            ptxas_resources(log ? log : "", &spills, &regs, &smem);
            CHECK(jobs[k].status == 0, "ptxas failed (exit %d): %.400s", jobs[k].status, log ? log : "");
            CHECK(spills == 0, "%ld bytes of spills", spills);
            if (table) printf("| `%s` | %d | %d | %d + %u |\n", vs[i].spec + strlen("attention "), vs[i].sm, regs, smem, dyn[k]);
            free(log);
            TEST_END();
            unlink(jobs[k].ptx);
            unlink(jobs[k].log);
        }
    }
    rmdir(dir);
    free(jobs);
    free(idx);
    free(dyn);
    kiln_gen_destroy(gen);
    printf("attention ptxas: %d passed, %d failed, %d skipped\n", check_passed, check_failed, skipped);
    return check_failed ? 1 : 0;
}
