/* tests/matrix.h - the ptxas matrix for any list of variants: generate, lint, no bf16 below
 * sm_80, assemble with ptxas -v for the variant's SM, 0 bytes of spills, and registers and SASS
 * instructions no worse than LLVM's default<O3> made them (tests/quality/<test>.tsv; rewrite
 * the tables with `make quality-table` after changing a template or adding variants). */
#ifndef KILN_TESTS_MATRIX_H
#define KILN_TESTS_MATRIX_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "kiln/kiln.h"
#include "kiln/lint.h"
#include "kiln/target.h"
#include "ptxas_util.h"

typedef struct matrix_variant {
    char spec[256];
    int sm;
    /* filled by matrix_check */
    int registers, smem;   /* from ptxas -v (-1 when not assembled) */
    unsigned dynamic_smem; /* from the kernel's metadata */
    int ptx_insts, sass;   /* instructions in the PTX and in the cubin (-1 when unknown) */
    unsigned threads;      /* per block, from the metadata */
} matrix_variant;

/* Variants one matrix test holds (the full attention_bwd matrix has about 15500 over its SMs). */
#define MATRIX_CAP 32768

/* The SMs every ptxas matrix covers: the SM table's rows that CUDA 13's ptxas assembles (sm_75 and
 * up; sm_70 is generated for older toolkits only). Returns the count and fills sms (cap >= 16). */
static int matrix_sms(int *sms) { return check_table_sms(sms, 16, 75); }

static int matrix_full(void) {
    const char *f = getenv("KILN_TEST_FULL");
    return f && *f && strcmp(f, "0");
}

/* The variants the families' templates declare (K.variants, docs/registry.md) on each of the SMs,
 * SM by SM: every variant under KILN_TEST_FULL=1, else the quick suite's rows. Appends to vs from
 * index n (capacity cap); returns the new count, or -1 after printing why. */
static int matrix_variants(kiln_gen *gen, const char *const *families, int nfam, const int *sms, int nsms,
                           matrix_variant *vs, int n, int cap) {
    static char buf[1 << 20]; /* one family's variants on one SM (attention_bwd full on sm_75: about 300 KB) */
    for (int s = 0; s < nsms; s++)
        for (int f = 0; f < nfam; f++) {
            kiln_error err = {0};
            if (kiln_family_variants(gen, families[f], matrix_full(), sms[s], buf, sizeof buf, NULL, &err) != KILN_OK) {
                printf("FAIL %s's variant matrix: %s\n", families[f], err.msg);
                return -1;
            }
            for (char *l = buf, *e; *l; l = e + 1) {
                e = strchr(l, '\n');
                if (n == cap || e - l >= (long)sizeof vs[n].spec) {
                    printf("FAIL %s's variant matrix: more than %d variants or a spec longer than %zu\n", families[f], cap,
                           sizeof vs[n].spec - 1);
                    return -1;
                }
                snprintf(vs[n].spec, sizeof vs[n].spec, "%.*s", (int)(e - l), l);
                vs[n++].sm = sms[s];
            }
        }
    return n;
}

/* A spec's row pattern: the spec without its dtype and width keys (dtype, out, grad, head_dim, v_head_dim), e.g.
 * "attention causal=true window=true" for each dtype and head_dim of that key set. */
static void matrix_pattern(const char *spec, char *out, size_t size) {
    static const char *const dropped[] = {"dtype=", "out=", "grad=", "head_dim=", "v_head_dim="};
    size_t n = 0;
    out[0] = 0;
    for (const char *w = spec; *w;) {
        size_t len = strcspn(w, " ");
        int drop = 0;
        for (size_t k = 0; k < sizeof dropped / sizeof dropped[0]; k++)
            drop |= !strncmp(w, dropped[k], strlen(dropped[k]));
        if (!drop && n + len + 2 < size) n += (size_t)snprintf(out + n, size - n, "%s%.*s", n ? " " : "", (int)len, w);
        w += len;
        w += strspn(w, " ");
    }
}

/* Marks in keep[0..n) the rows of sm_75, sm_80 and sm_90a the quick slice keeps: sm_75's and sm_80's attention lists
 * are the long ones (~730 and ~790 rows, about half of the quick matrices' ptxas CPU, wave 23), and sm_90a's wgmma
 * kernels take the longest to assemble after sm_75's f16-scaled ones (the forward's 57 quick rows 49 s of ptxas CPU,
 * wave 24). Each keeps alternate rows of every pattern (matrix_pattern), so every key set keeps its rows at every
 * other dtype and head dim (a one-row pattern keeps its row). The norms' specs have no head_dim and keep every row.
 * KILN_TEST_FULL=1 assembles all; the quality tables hold every row. Other SMs' rows are left as they are. */
static void matrix_pattern_keeps(const matrix_variant *vs, int n, char *keep) {
    typedef char pattern[256];
    pattern *pats = calloc((size_t)n, sizeof *pats);
    for (int i = 0; i < n; i++) {
        keep[i] = 1;
        int sliced = vs[i].sm == 75 || vs[i].sm == 80 || kiln_sm_is_arch(vs[i].sm);
        if (!pats || !sliced || !strstr(vs[i].spec, "head_dim=")) continue;
        matrix_pattern(vs[i].spec, pats[i], sizeof pats[i]);
        int before = 0;
        for (int k = 0; k < i; k++) before += vs[k].sm == vs[i].sm && !strcmp(pats[k], pats[i]);
        keep[i] = before % 2 == 0;
    }
    free(pats);
}

/* The quick suite's slice (KILN_TEST_FULL=1 keeps every variant): alternate rows of each key set on sm_75 and sm_80
 * and of sm_90a (matrix_pattern_keeps: waves 23 and 24, for CI's time budget); every row of sm_86 and sm_89;
 * every fourth row of sm_90, whose PTX the runtime loads on a 9.0 device only where sm_90a's is missing
 * (its rows mostly repeat sm_80's specs on the same mma.sync code: wave 22 halved them and wave 25 halved them again
 * to keep the suite inside CI's time budget); every third of sm_100 and of sm_120, the two Blackwell rows whose facts differ (shared memory, threads
 * per SM); sm_103, sm_110 and sm_121 only in the full run; under the sanitizer build a twelfth of that. Compacts vs;
 * returns the count. */
static int matrix_slice(matrix_variant *vs, int n) {
    if (matrix_full()) return n;
    int kept = 0, seen90 = 0, seen100 = 0, seen120 = 0;
    char *alternate = malloc((size_t)n + 1);
    if (alternate) matrix_pattern_keeps(vs, n, alternate);
    for (int i = 0; i < n; i++) {
        int sm = vs[i].sm, keep = ((sm == 75 || sm == 80 || kiln_sm_is_arch(sm)) && (!alternate || alternate[i])) ||
                                  (sm > 80 && sm < 90) || (sm == 90 && seen90++ % 4 == 0) ||
                                  (sm == 100 && seen100++ % 3 == 0) || (sm == 120 && seen120++ % 3 == 0);
        if (keep) vs[kept++] = vs[i];
    }
    free(alternate);
#ifdef __SANITIZE_ADDRESS__
    /* The sanitizer build (make SAN=1 test) is there for memory and UB errors in the generator's C code;
     * the plain build's run assembles and checks every quick row. Every twelfth row here (every sixth until
     * wave 25), so each family and SM keeps its share (it keeps the suite inside CI's time budget). */
    int twelfth = 0;
    for (int i = 0; i < kept; i++)
        if (i % 12 == 0) vs[twelfth++] = vs[i];
    printf("NOTE sanitizer build: every twelfth quick row (%d of %d); the plain build checks all\n", twelfth, kept);
    kept = twelfth;
#endif
    return kept;
}

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

/* The quality table of this test program: tests/quality/<program>.tsv. */
static void matrix_table_path(char *buf, size_t size) {
    snprintf(buf, size, "tests/quality/%s.tsv", program_invocation_short_name);
}

/* Prints a quality row (sm, registers, SASS and PTX instructions, spec) for each variant ptxas measured;
 * returns how many. */
static int matrix_print_rows(FILE *f, const matrix_variant *vs, int n) {
    int rows = 0;
    for (int i = 0; i < n; i++)
        if (vs[i].registers >= 0 && vs[i].sass >= 0) {
            fprintf(f, "%d\t%d\t%d\t%d\t%s\n", vs[i].sm, vs[i].registers, vs[i].sass, vs[i].ptx_insts, vs[i].spec);
            rows++;
        }
    return rows;
}

/* Writes the table (KILN_QUALITY_WRITE=1; the generator must run default<O3>, KILN_PIPELINE=o3). */
static void matrix_write_table(const matrix_variant *vs, int n) {
    char path[512];
    matrix_table_path(path, sizeof path);
    TEST_BEGIN("quality table written");
    const char *pipe = getenv("KILN_PIPELINE");
    CHECK(pipe && !strcmp(pipe, "o3"), "the table holds default<O3> figures: run with KILN_PIPELINE=o3 (make quality-table)");
    FILE *f = pipe && !strcmp(pipe, "o3") ? fopen(path, "w") : NULL;
    if (pipe && !strcmp(pipe, "o3")) CHECK(f != NULL, "cannot write %s", path);
    if (f) {
        fprintf(f, "# %s: per variant, what LLVM's default<O3> pipeline gave: registers (ptxas -v),\n"
                   "# SASS instructions (cubin .text bytes / 16), PTX instructions. kiln's pipeline must not\n"
                   "# use more registers or SASS instructions. Regenerate: make quality-table\n"
                   "# sm\tregisters\tsass\tptx\tspec\n", path);
        int rows = matrix_print_rows(f, vs, n);
        CHECK(fclose(f) == 0, "writing %s failed", path);
        printf("wrote %s: %d variants\n", path, rows);
    }
    TEST_END();
}

/* KILN_MATRIX_DUMP=FILE appends this run's figures (whatever the pipeline), one variant a line as in
 * the quality tables plus threads: tools/compare_matrix.py sets two builds' dumps side by side (the
 * LLVM 19 -> 22 figures in docs/llvm22.md came from it). */
static void matrix_dump(const matrix_variant *vs, int n, const char *path) {
    FILE *f = fopen(path, "a");
    if (!f) return;
    for (int i = 0; i < n; i++)
        if (vs[i].registers >= 0 && vs[i].sass >= 0)
            fprintf(f, "%d\t%d\t%d\t%d\t%u\t%s\n", vs[i].sm, vs[i].registers, vs[i].sass, vs[i].ptx_insts, vs[i].threads,
                    vs[i].spec);
    fclose(f);
}

/* Blocks of `threads` that the registers of an SM hold: registers are given out per warp in
 * units of 256 (8 per thread), 64K per SM (every target kiln knows). */
static int matrix_blocks_by_registers(int regs, unsigned threads) {
    int per_warp = (regs * 32 + 255) / 256 * 256;
    int warps = (int)((threads + 31) / 32);
    return per_warp > 0 && warps > 0 ? 65536 / per_warp / warps : 0;
}

/* One row of a quality table: sm, registers, sass, ptx, spec (pointing into the slurped table). */
typedef struct { int sm, regs, sass, ptx; const char *spec; } matrix_row;

/* Parses a slurped table in place (NUL-terminating each line); returns the rows (free them) and their count. */
static matrix_row *matrix_table_rows(char *table, size_t len, int *nrows) {
    matrix_row *rows = calloc(len / 8 + 1, sizeof *rows);
    *nrows = 0;
    for (char *p = table; rows && *p;) {
        char *eol = strchr(p, '\n');
        if (eol) *eol = 0;
        matrix_row r;
        int used = 0;
        if (*p != '#' && sscanf(p, "%d\t%d\t%d\t%d\t%n", &r.sm, &r.regs, &r.sass, &r.ptx, &used) == 4 && used) {
            r.spec = p + used;
            rows[(*nrows)++] = r;
        }
        p = eol ? eol + 1 : p + strlen(p);
    }
    return rows;
}

static const matrix_row *matrix_find_row(const matrix_row *rows, int nrows, int sm, const char *spec) {
    for (int k = 0; k < nrows; k++)
        if (rows[k].sm == sm && !strcmp(rows[k].spec, spec)) return &rows[k];
    return NULL;
}

/* KILN_QUALITY_ADD=1 (with KILN_PIPELINE=o3; make quality-add): the run keeps only the variants without a
 * row in the table, and appends their rows, leaving the existing ones as they are. */
static int matrix_adding(void) {
    const char *a = getenv("KILN_QUALITY_ADD");
    return a && *a && strcmp(a, "0");
}

/* Keeps (compacting vs) the variants the quality table has no row for; returns their count. */
static int matrix_only_missing(matrix_variant *vs, int n) {
    char path[512];
    matrix_table_path(path, sizeof path);
    size_t len = 0;
    char *table = slurp(path, &len);
    int nrows = 0, kept = 0;
    matrix_row *rows = table ? matrix_table_rows(table, len, &nrows) : NULL;
    for (int i = 0; i < n; i++)
        if (!matrix_find_row(rows, nrows, vs[i].sm, vs[i].spec)) vs[kept++] = vs[i];
    printf("quality add: %d of %d variants have no row in %s\n", kept, n, path);
    free(rows);
    free(table);
    return kept;
}

/* Appends the rows of vs (the variants matrix_only_missing kept) to the table. */
static void matrix_append_table(const matrix_variant *vs, int n) {
    char path[512];
    matrix_table_path(path, sizeof path);
    TEST_BEGIN("quality rows appended");
    const char *pipe = getenv("KILN_PIPELINE");
    CHECK(pipe && !strcmp(pipe, "o3"), "the table holds default<O3> figures: run with KILN_PIPELINE=o3 (make quality-add)");
    FILE *f = pipe && !strcmp(pipe, "o3") ? fopen(path, "a") : NULL;
    if (pipe && !strcmp(pipe, "o3")) CHECK(f != NULL, "cannot append to %s", path);
    if (f) {
        int rows = matrix_print_rows(f, vs, n);
        CHECK(fclose(f) == 0, "writing %s failed", path);
        printf("appended to %s: %d variants\n", path, rows);
    }
    TEST_END();
}

/* Compares with the default<O3> table; variants missing from it are listed (the table is
 * regenerated after new variants land). A variant is worse when it has more SASS instructions,
 * or when its registers let fewer blocks reside on an SM; a register or two more inside the
 * same allocation step is reported in the totals, not failed: ptxas's allocation moves by a
 * few registers with any change of instruction order. */
static void matrix_compare_table(const matrix_variant *vs, int n) {
    char path[512];
    matrix_table_path(path, sizeof path);
    size_t len;
    char *table = slurp(path, &len);
    if (!table) {
        printf("SKIP quality: no table %s (make quality-table writes it)\n", path);
        return;
    }
    int nrows = 0;
    matrix_row *rows = matrix_table_rows(table, len, &nrows);
    int compared = 0, missing = 0, worse = 0, more_regs = 0;
    long d_regs = 0, d_sass = 0, d_ptx = 0;
    char first_missing[300] = "";
    TEST_BEGIN("registers and SASS instructions no worse than default<O3> (quality table)");
    for (int i = 0; i < n; i++) {
        const matrix_variant *v = &vs[i];
        if (v->registers < 0 || v->sass < 0) continue;
        const matrix_row *r = matrix_find_row(rows, nrows, v->sm, v->spec);
        if (!r) {
            if (!missing++) snprintf(first_missing, sizeof first_missing, "%.255s (sm_%d)", v->spec, v->sm);
            continue;
        }
        compared++;
        d_regs += v->registers - r->regs;
        d_sass += v->sass - r->sass;
        d_ptx += v->ptx_insts - r->ptx;
        more_regs += v->registers > r->regs;
        if (matrix_blocks_by_registers(v->registers, v->threads) < matrix_blocks_by_registers(r->regs, v->threads) ||
            v->sass > r->sass) {
            worse++;
            CHECK(0, "%s (sm_%d): %d registers (%d blocks/SM), %d SASS instructions; default<O3>: %d (%d), %d",
                  v->spec, v->sm, v->registers, matrix_blocks_by_registers(v->registers, v->threads), v->sass,
                  r->regs, matrix_blocks_by_registers(r->regs, v->threads), r->sass);
        }
    }
    TEST_END();
    printf("quality vs default<O3> over %d variants: %+ld registers, %+ld SASS instructions, %+ld PTX instructions "
           "in all; %d with more registers in the same occupancy; %d worse\n", compared, d_regs, d_sass, d_ptx, more_regs,
           worse);
    if (missing)
        printf("NOTE quality: %d variants not in %s, first %s: run make quality-table\n", missing, path, first_missing);
    free(rows);
    free(table);
}

/* Keeps (compacting vs) the variants whose line "sm_N SPEC" (as `kiln list --variants FAMILY` prints it without
 * --sm) is in the file at path, e.g. the rows a template change added: comm -13 of two listings. Returns the count. */
static int matrix_only_listed(matrix_variant *vs, int n, const char *path) {
    size_t len = 0;
    char *text = slurp(path, &len);
    int kept = 0;
    for (int i = 0; text && i < n; i++) {
        char name[16], line[300];
        int w = snprintf(line, sizeof line, "\n%s %s\n", kiln_sm_name(vs[i].sm, name), vs[i].spec);
        /* (the file's first line: matched at its start without the leading newline) */
        if (strstr(text, line) || (w > 1 && !strncmp(text, line + 1, (size_t)w - 1))) vs[kept++] = vs[i];
    }
    if (text) printf("KILN_MATRIX_LIST=%s: %d of %d variants\n", path, kept, n);
    else {
        printf("FAIL KILN_MATRIX_LIST=%s: cannot read it (give a file of `kiln list --variants FAMILY` lines)\n", path);
        check_failed++;
    }
    free(text);
    return kept;
}

/* Whether the generated variant at index i goes through ptxas too. The sanitizer build is there for memory and UB
 * errors in kiln's own C code (the generator, the lint, this file); ptxas is not kiln's, and the plain build
 * assembles every quick row. So under it every third of its rows (a thirty-sixth of the quick slice) is assembled and
 * compared with the quality table, keeping that code under the sanitizers; every row is still generated and linted. */
static int matrix_assembles(int i) {
#ifdef __SANITIZE_ADDRESS__
    return i % 3 == 0;
#else
    (void)i;
    return 1;
#endif
}

static double matrix_seconds(struct timespec a, struct timespec b) {
    return (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) * 1e-9;
}

/* KILN_TEST_TIMES=1: ptxas's CPU seconds per SM and per dtype within it, and the slowest variants (where a
 * matrix's time goes, for choosing the quick slice). */
static void matrix_print_ptxas_times(const matrix_variant *vs, const ptxas_job *jobs, const int *idx, int nrun) {
    static const char *const dtypes[] = {"dtype=f32", "dtype=f16", "dtype=bf16", ""};
    int sms[32], nsms = 0;
    for (int k = 0; k < nrun; k++) {
        int sm = vs[idx[k]].sm, seen = 0;
        for (int s = 0; s < nsms; s++) seen |= sms[s] == sm;
        if (!seen && nsms < 32) sms[nsms++] = sm;
    }
    double total = 0;
    for (int k = 0; k < nrun; k++) total += jobs[k].cpu_s;
    printf("ptxas CPU: %.1f s over %d variants\n", total, nrun);
    for (int s = 0; s < nsms; s++) {
        char name[16];
        printf("  %-7s", kiln_sm_name(sms[s], name));
        for (int d = 0; d < 4; d++) { /* (the last column: every variant of the SM) */
            double t = 0;
            int c = 0;
            for (int k = 0; k < nrun; k++)
                if (vs[idx[k]].sm == sms[s] && strstr(vs[idx[k]].spec, dtypes[d])) t += jobs[k].cpu_s, c++;
            printf("  %s %6.1f s / %4d", d < 3 ? dtypes[d] + 6 : "all", t, c);
        }
        printf("\n");
    }
    int top[10], ntop = 0;
    for (int k = 0; k < nrun; k++) { /* (insertion into the ten slowest) */
        int at = ntop < 10 ? ntop++ : 10;
        while (at > 0 && jobs[top[at - 1]].cpu_s < jobs[k].cpu_s) {
            if (at < 10) top[at] = top[at - 1];
            at--;
        }
        if (at < 10) top[at] = k;
    }
    for (int t = 0; t < ntop; t++)
        printf("  %5.2f s  sm_%d %s\n", jobs[top[t]].cpu_s, vs[idx[top[t]]].sm, vs[idx[top[t]]].spec);
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
        vs[i].registers = vs[i].smem = vs[i].ptx_insts = vs[i].sass = -1;
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
            vs[i].ptx_insts = ptx_instruction_count(ptx);
            const kiln_kernel_meta *meta = kiln_module_meta(m);
            vs[i].threads = meta->block[0] * meta->block[1] * meta->block[2];
            snprintf(jobs[nrun].ptx, sizeof jobs[nrun].ptx, "%s/v%d.ptx", dir, i);
            snprintf(jobs[nrun].log, sizeof jobs[nrun].log, "%s/v%d.log", dir, i);
            snprintf(jobs[nrun].cubin, sizeof jobs[nrun].cubin, "%s/v%d.cubin", dir, i);
            jobs[nrun].sm = vs[i].sm;
            if (matrix_assembles(i) && write_file(jobs[nrun].ptx, ptx, kiln_module_size(m)) == 0) idx[nrun++] = i;
            kiln_module_free(m);
        }
        TEST_END();
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    printf("generated %d variants in %.2f s (%.1f ms each)\n", n, matrix_seconds(t0, t1), matrix_seconds(t0, t1) * 1e3 / n);
#ifdef __SANITIZE_ADDRESS__
    printf("NOTE sanitizer build: ptxas assembles %d of the %d generated variants (matrix_assembles)\n", nrun, n);
#endif
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
            if (jobs[k].status == 0) v->sass = cubin_sass_instructions(jobs[k].cubin);
            unlink(jobs[k].ptx);
            unlink(jobs[k].log);
            unlink(jobs[k].cubin);
        }
        if (getenv("KILN_TEST_TIMES")) matrix_print_ptxas_times(vs, jobs, idx, nrun);
        const char *w = getenv("KILN_QUALITY_WRITE"), *dump = getenv("KILN_MATRIX_DUMP");
        if (dump && *dump) matrix_dump(vs, n, dump);
        if (matrix_adding()) matrix_append_table(vs, n);
        else if (w && *w && strcmp(w, "0")) matrix_write_table(vs, n);
        else matrix_compare_table(vs, n);
    }
    rmdir(dir);
    free(jobs);
    free(idx);
    return skipped;
}

/* A ptxas-matrix test program: the families' declared variants on the SMs (NULL: every SM from sm_75),
 * sliced for the quick suite, checked; KILN_ATTN_TABLE=1 prints registers and shared memory per
 * variant as a Markdown table. Prints "<what>: N passed, N failed, N skipped"; returns the exit status. */
static int matrix_main(const char *what, const char *const *families, int nfam, const int *sms, int nsms) {
    static matrix_variant vs[MATRIX_CAP];
    int all[16];
    if (!sms) {
        nsms = matrix_sms(all);
        sms = all;
    }
    kiln_error err = {0};
    kiln_gen *gen;
    if (kiln_gen_create(&gen, NULL, &err) != KILN_OK) {
        printf("cannot create generator: %s\n%s: 0 passed, 1 failed\n", err.msg, what);
        return 1;
    }
    int n = matrix_variants(gen, families, nfam, sms, nsms, vs, 0, MATRIX_CAP);
    if (n < 0) check_failed++;
    else n = matrix_slice(vs, n);
    const char *only = getenv("KILN_MATRIX_ONLY"); /* a slice by spec text, e.g. v_head_dim= (with quality-add) */
    if (n > 0 && only && *only) {
        int kept = 0;
        for (int i = 0; i < n; i++)
            if (strstr(vs[i].spec, only)) vs[kept++] = vs[i];
        printf("KILN_MATRIX_ONLY=%s: %d of %d variants\n", only, kept, n);
        n = kept;
    }
    const char *list = getenv("KILN_MATRIX_LIST"); /* a file of `kiln list --variants` lines ("sm_N SPEC"): those alone */
    if (n > 0 && list && *list) n = matrix_only_listed(vs, n, list);
    if (n > 0 && matrix_adding()) n = matrix_only_missing(vs, n);
    int skipped = n > 0 ? matrix_check(gen, vs, n) : 0;
    kiln_gen_destroy(gen);
    if (getenv("KILN_ATTN_TABLE")) {
        printf("| spec | sm | registers | static + dynamic shared memory (bytes) |\n|---|---|---|---|\n");
        for (int i = 0; i < n; i++)
            printf("| `%s` | %d | %d | %d + %u |\n", vs[i].spec, vs[i].sm, vs[i].registers, vs[i].smem, vs[i].dynamic_smem);
    }
    printf("%s: %d passed, %d failed, %d skipped\n", what, check_passed, check_failed, skipped);
    return check_failed ? 1 : 0;
}

#endif
