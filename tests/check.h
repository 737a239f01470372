/* tests/check.h - the tiny test harness every C test uses: CHECK, test cases, summary. */
#ifndef KILN_TESTS_CHECK_H
#define KILN_TESTS_CHECK_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kiln/target.h"

static int check_passed, check_failed, check_case_failed;
static clock_t check_case_start; /* (KILN_TEST_TIMES=1: each case's CPU seconds, to see where a suite's time goes) */

/* The SM table's plain SMs from min_sm up (75: every SM CUDA 13's ptxas builds), at most cap of them:
 * tests take their SM lists from the table, so a new row is tested without editing them. The
 * arch-specific sm_90a is left out: no template generates differently for it than for sm_90 yet, and
 * tests/hopper_test.c covers it (a template that uses its features adds it to its own matrix). */
static inline int check_table_sms(int *sms, int cap, int min_sm) {
    int n = 0, count;
    const kiln_target *t = kiln_target_all(&count);
    for (int i = 0; i < count && n < cap; i++)
        if (t[i].sm >= min_sm && !kiln_sm_is_arch(t[i].sm)) sms[n++] = t[i].sm;
    return n;
}
static const char *check_case_name = "";

/* Whether the sanitizer build (make SAN=1 test) runs item i of a test's list: one in `every` there, every item
 * in the plain build. That build is for memory and UB errors in kiln's C code, which a sample of the items reaches;
 * the plain build checks every item (the split keeps the suite inside CI's time budget). */
static inline int check_san_keeps(size_t i, size_t every) {
#ifdef __SANITIZE_ADDRESS__
    return every < 2 || i % every == 0;
#else
    (void)i;
    (void)every;
    return 1;
#endif
}

/* Starts a named test case; each case counts once as passed or failed. */
#define TEST_BEGIN(name)                                                                      \
    do {                                                                                      \
        check_case_name = (name);                                                             \
        check_case_failed = 0;                                                                \
        check_case_start = clock();                                                           \
    } while (0)

#define TEST_END()                                                                            \
    do {                                                                                      \
        if (check_case_failed) {                                                              \
            check_failed++;                                                                   \
            printf("FAIL %s\n", check_case_name);                                             \
        } else {                                                                              \
            check_passed++;                                                                   \
            if (getenv("KILN_TEST_VERBOSE")) printf("ok   %s\n", check_case_name);            \
        }                                                                                     \
        if (getenv("KILN_TEST_TIMES"))                                                        \
            printf("time %7.2f s  %s\n", (double)(clock() - check_case_start) / CLOCKS_PER_SEC, \
                   check_case_name);                                                          \
        fflush(stdout);                                                                       \
    } while (0)

/* A failed CHECK prints where and why and marks the current case failed. */
#define CHECK(cond, ...)                                                                      \
    do {                                                                                      \
        if (!(cond)) {                                                                        \
            check_case_failed = 1;                                                            \
            printf("  %s:%d: [%s] check failed: %s: ", __FILE__, __LINE__, check_case_name,   \
                   #cond);                                                                    \
            printf(__VA_ARGS__);                                                              \
            printf("\n");                                                                     \
        }                                                                                     \
    } while (0)

/* Prints "SUITE: N passed, N failed" and returns the exit status for main. */
static inline int check_summary(const char *suite) {
    printf("%s: %d passed, %d failed\n", suite, check_passed, check_failed);
    return check_failed ? 1 : 0;
}

#endif
