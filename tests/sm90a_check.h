/* tests/sm90a_check.h - what the path=wgmma (sm_90a) tests share: the ptxas check over a list of specs (emit each
 * for sm_90a, wgmma and TMA present, lint clean on a 9.0 device, ptxas: 0 spills, no C7508, plus the caller's
 * per-variant check of the log), the planted-bug runner (a copy of the templates with one edit, a case run on it) and
 * one case's run and check with its mask options. */
#ifndef KILN_TESTS_SM90A_CHECK_H
#define KILN_TESTS_SM90A_CHECK_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "kiln/emu_case.h"
#include "kiln/kiln.h"
#include "kiln/lint.h"
#include "ptxas_util.h"

#define SM90A (KILN_SM_ARCH + 90)

/* main's start: makes dir (a mkdtemp template), the generator and the emulator; on failure says so as the suite's
 * one failed case and returns 0. */
static inline int sm90a_setup(char *dir, kiln_gen **gen, kiln_emu **emu, const char *suite) {
    if (!mkdtemp(dir)) return 0;
    kiln_error err = {0};
    if (kiln_gen_create(gen, NULL, &err) != KILN_OK || kiln_emu_create(emu, &err) != KILN_OK) {
        printf("%s: setup: %s\n%s: 0 passed, 1 failed\n", suite, err.msg, suite);
        return 0;
    }
    return 1;
}

/* main's end: frees what sm90a_setup made, removes dir and returns check_summary's status. */
static inline int sm90a_finish(char *dir, kiln_gen *gen, kiln_emu *emu, const char *suite) {
    kiln_emu_destroy(emu);
    kiln_gen_destroy(gen);
    rmdir(dir);
    return check_summary(suite);
}

/* The PTX of spec for sm (NULL on failure, err filled). */
static inline kiln_module *sm90a_emit(kiln_gen *gen, const char *spec, int sm, kiln_error *err) {
    kiln_module *m = NULL;
    if (kiln_generate(gen, spec, sm, KILN_EMIT_PTX, &m, err) != KILN_OK) return NULL;
    return m;
}

/* A spec that must generate on sm, wgmma: whether its kernel is the wgmma one (wgmma.mma_async in the PTX). */
typedef struct sm90a_pick {
    const char *spec;
    int sm, wgmma;
} sm90a_pick;

/* Inside a test case: each of cases[0..n) generates, with wgmma.mma_async as it says; extra (may be NULL) checks the
 * PTX of those that have it. */
static inline void sm90a_check_picks(kiln_gen *gen, const sm90a_pick *cases, size_t n, void (*extra)(const char *spec, const char *ptx)) {
    for (size_t i = 0; i < n; i++) {
        kiln_error err = {0};
        kiln_module *m = sm90a_emit(gen, cases[i].spec, cases[i].sm, &err);
        CHECK(m, "%s: %s", cases[i].spec, err.msg);
        if (!m) continue;
        int has = strstr(kiln_module_text(m), "wgmma.mma_async") != NULL;
        CHECK(has == cases[i].wgmma, "%s (sm %d): wgmma %s", cases[i].spec, cases[i].sm, has ? "present" : "absent");
        if (has && extra) extra(cases[i].spec, kiln_module_text(m));
        kiln_module_free(m);
    }
}

/* A spec path=wgmma must refuse on sm, with want in the error. */
typedef struct sm90a_refusal {
    const char *spec;
    int sm;
    const char *want;
} sm90a_refusal;

/* Inside a test case: each of refused[0..n) generates nothing and says its want. */
static inline void sm90a_check_refusals(kiln_gen *gen, const sm90a_refusal *refused, size_t n) {
    for (size_t i = 0; i < n; i++) {
        kiln_error err = {0};
        kiln_module *m = sm90a_emit(gen, refused[i].spec, refused[i].sm, &err);
        CHECK(!m && strstr(err.msg, refused[i].want), "%s (sm %d): %s", refused[i].spec, refused[i].sm, m ? "generated" : err.msg);
        kiln_module_free(m);
    }
}

/* A test's extra check of one variant's ptxas log (log is never NULL). */
typedef void (*sm90a_log_check)(const char *spec, const char *log);

/* An sm90a_log_check: no wgmma serialized (C7511: "wgmma.mma_async instructions are serialized due to insufficient
 * register resources", C7520: "... due to program dependence on compiler-inserted WG.AR in divergent path": a wait
 * after every wgmma, the chains no longer asynchronous). */
static inline void sm90a_no_serialized_wgmma(const char *spec, const char *log) {
    CHECK(!strstr(log, "C7511") && !strstr(log, "C7520"), "%s: ptxas serializes its wgmma: %s", spec, log);
}

/* Inside a test case: emits each of specs[0..n) for sm_90a into dir (k<i>.ptx), checks wgmma and TMA (or the producer's
 * cp.async) are there and
 * lint is clean; with ptxas (NULL: lint only) assembles them 2 at a time and checks status 0, 0 bytes of spills,
 * no C7508 (a setmaxnreg ptxas ignored) and extra (may be NULL). Removes the files it wrote. */
static inline void sm90a_ptxas_check(kiln_gen *gen, const char *dir, const char *const *specs, int n, const char *ptxas,
                                     sm90a_log_check extra) {
    ptxas_job *jobs = calloc((size_t)(n > 0 ? n : 1), sizeof *jobs);
    if (!jobs) {
        CHECK(0, "out of memory");
        return;
    }
    for (int i = 0; i < n; i++) {
        kiln_error err = {0};
        kiln_module *m = sm90a_emit(gen, specs[i], SM90A, &err);
        CHECK(m, "%s: %s", specs[i], err.msg);
        if (!m) continue;
        const char *tx = kiln_module_text(m); /* (split-KV's producer copies Q, paged's K/V too: cp.async, no TMA with both) */
        CHECK(strstr(tx, "wgmma.mma_async") && (strstr(tx, "cp.async.bulk.tensor") || strstr(tx, "cp.async.cg.shared.global")),
              "%s: no wgmma, or neither TMA nor the producer's cp.async", specs[i]);
        kiln_lint_report *rep = NULL;
        if (kiln_lint(kiln_module_text(m), kiln_module_size(m), 90, &rep, &err) == KILN_OK) {
            CHECK(kiln_lint_count(rep) == 0, "%s: lint reports %zu findings (on a 9.0 device)", specs[i], kiln_lint_count(rep));
            kiln_lint_free(rep);
        } else {
            CHECK(0, "%s: lint: %s", specs[i], err.msg);
        }
        jobs[i].sm = SM90A;
        snprintf(jobs[i].ptx, sizeof jobs[i].ptx, "%s/k%d.ptx", dir, i);
        snprintf(jobs[i].log, sizeof jobs[i].log, "%s/k%d.log", dir, i);
        write_file(jobs[i].ptx, kiln_module_text(m), kiln_module_size(m));
        kiln_module_free(m);
    }
    if (ptxas) {
        ptxas_run_all(ptxas, jobs, n, 2);
        for (int i = 0; i < n; i++) {
            size_t len = 0;
            char *log = slurp(jobs[i].log, &len);
            long spills = -1;
            int regs = 0, smem = 0;
            if (log) ptxas_resources(log, &spills, &regs, &smem);
            CHECK(jobs[i].status == 0 && log && spills == 0 && !strstr(log, "C7508"), "%s: status %d, spills %ld: %s", specs[i],
                  jobs[i].status, spills, log ? log : "");
            if (extra && log) extra(specs[i], log);
            if (getenv("KILN_TEST_VERBOSE")) printf("     %s: %d registers\n", specs[i], regs);
            free(log);
            unlink(jobs[i].log);
        }
    }
    for (int i = 0; i < n; i++) unlink(jobs[i].ptx);
    free(jobs);
}

/* A test's case on generator g and emulator e: its status, *bad the elements out of tolerance, err filled. */
typedef kiln_status (*sm90a_case_run)(kiln_gen *g, kiln_emu *e, const void *row, long *bad, kiln_error *err);

/* The repository root (with its trailing '/') of a test's __FILE__, src: what comes before its last "tests/". */
static inline void sm90a_root(const char *src, char *root, size_t size) {
    const char *cut = NULL;
    for (const char *p = strstr(src, "tests/"); p; p = strstr(p + 1, "tests/")) cut = p;
    snprintf(root, size, "%.*s", cut ? (int)(cut - src) : 0, src);
}

/* One planted bug as a test case: copies root's templates to dir/t, replaces the first from in file (under
 * templates/) by to, and runs the case row on a generator over the copy and emu (NULL: a fresh emulator). The case
 * must fail (clean: must pass, the edit is not a bug). Call sm90a_planted_done(dir) after the last. */
static inline void sm90a_planted(const char *dir, const char *root, const char *what, const char *file, const char *from,
                                 const char *to, int clean, sm90a_case_run run, const void *row, kiln_emu *emu) {
    char name[300];
    snprintf(name, sizeof name, clean ? "edited template passes: %s" : "planted bug caught: %s", what);
    TEST_BEGIN(name);
    char cmd[1400], path[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s/t' && cp -r '%stemplates' '%s/t'", dir, root, dir);
    int rc = system(cmd);
    CHECK(rc == 0, "could not copy the templates: %s", cmd);
    snprintf(path, sizeof path, "%s/t/%s", dir, file);
    size_t len = 0;
    char *text = slurp(path, &len);
    char *at = text ? strstr(text, from) : NULL;
    CHECK(at, "the template no longer has '%s'", from);
    if (at) {
        FILE *f = fopen(path, "w");
        if (f) {
            fwrite(text, 1, (size_t)(at - text), f);
            fputs(to, f);
            fputs(at + strlen(from), f);
            fclose(f);
        }
        kiln_gen *pg = NULL;
        kiln_emu *pe = NULL;
        char tdir[600];
        snprintf(tdir, sizeof tdir, "%s/t", dir);
        kiln_gen_options o = {.template_dir = tdir};
        kiln_error err = {0};
        if (kiln_gen_create(&pg, &o, &err) == KILN_OK && (emu || kiln_emu_create(&pe, &err) == KILN_OK)) {
            long bad = 0;
            kiln_status st = run(pg, emu ? emu : pe, row, &bad, &err);
            if (clean) CHECK(st == KILN_OK && bad == 0, "%s", err.msg);
            else CHECK(st != KILN_OK || bad > 0, "ran clean");
            if (getenv("KILN_TEST_VERBOSE")) printf("     %s\n", err.msg);
        } else {
            CHECK(0, "setup: %s", err.msg);
        }
        if (pe) kiln_emu_destroy(pe);
        if (pg) kiln_gen_destroy(pg);
    }
    free(text);
    TEST_END();
}

/* Removes the templates' copy the planted bugs edited. */
static inline void sm90a_planted_done(const char *dir) {
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s/t'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s/t\n", dir);
}

/* The mask keys' launch options of spec: window_left / right, the softcap's value, ALiBi's slopes. */
static inline void sm90a_mask_opts(kiln_case_opts *o, const char *spec, int left, int right, double softcap) {
    if (strstr(spec, "window=true")) kiln_case_opts_set(o, "window_left", left), kiln_case_opts_set(o, "window_right", right);
    if (strstr(spec, "softcap=true")) kiln_case_opts_set(o, "softcap", softcap);
    if (strstr(spec, "alibi=true")) kiln_case_opts_set(o, "alibi", 1);
}

/* Creates, runs and checks a case of spec with options o on g; returns the status, *bad the values out of tolerance
 * (-1 when it did not run); err names a failed run or the first bad value. The case goes to *keep when asked and
 * it ran, else it is freed. */
static inline kiln_status sm90a_run_case(kiln_gen *g, kiln_emu *e, const char *spec, const kiln_case_opts *o, long *bad,
                                         kiln_case **keep, kiln_error *err) {
    kiln_case *c = NULL;
    kiln_status st = kiln_case_create(&c, g, e, spec, o, err);
    if (st == KILN_OK) st = kiln_case_run(c, err);
    *bad = st == KILN_OK ? kiln_case_check(c) : -1;
    if (st == KILN_OK && *bad) {
        for (int i = 0; i < kiln_case_noutputs(c); i++)
            if (kiln_case_output_at(c, i)->bad)
                snprintf(err->msg, sizeof err->msg, "%s: %s", kiln_case_output_at(c, i)->name, kiln_case_output_at(c, i)->first);
    }
    if (keep && st == KILN_OK) *keep = c;
    else kiln_case_free(c);
    return st;
}

#endif
