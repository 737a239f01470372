/* tests/gen_threads_test.c - generators on several threads give the same modules as one:
 * the regression test for LLVM's NVPTX annotation cache (LLVM 19's, gone with LLVM 21's attribute launch bounds: gen/gen_lower.c).
 *
 * Three threads, each with its own kiln_gen, generate LLVM IR (the path that never prints
 * PTX, like the emulator's) for LayerNorm kernels of 128, 256 and 512 threads in turn. The
 * optimizer bounds %tid.x by the kernel's maxntid; a module that inherits a freed module's
 * cached annotations carries another kernel's bound (`range(i32 0, 128)` in a 256-thread
 * kernel). Every module must carry its own block size and equal the single-threaded text.
 * Before the fix about 1 in 130 modules was wrong on a loaded 2-core machine.
 * 150 modules per thread (50 in sanitizer builds); KILN_TEST_FULL=1: 1500. */
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kiln/gen.h"

#if defined(__SANITIZE_ADDRESS__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SANITIZED 1
#endif
#endif
#ifndef SANITIZED
#define SANITIZED 0
#endif

#define NTHREADS 3
#define NSPECS 4

static const char *const specs[NSPECS] = {
    "layernorm x=f32 hidden=launch weight=false bias=false", /* 256 threads */
    "layernorm x=f32 hidden=1000",                           /* 128 */
    "layernorm x=f16 hidden=launch",                         /* 256 */
    "layernorm x=f32 hidden=16384",                          /* 512 */
};
static char *reference[NSPECS][2];
static int iterations;
static atomic_long modules, wrong_bound, wrong_text;
static char first_bad[512];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

/* The block size the module's metadata announces, and the bound the optimizer put on
 * %tid.x (0 when there is none). */
static void bounds(const char *text, unsigned *block, unsigned *range) {
    *block = *range = 0;
    const char *b = strstr(text, "kiln.meta block ");
    if (b) *block = (unsigned)strtoul(b + 16, NULL, 10);
    const char *r = strstr(text, "i32 @llvm.nvvm.read.ptx.sreg.tid.x()");
    if (!r) return;
    const char *line = r;
    while (line > text && line[-1] != '\n') line--;
    const char *range_at = strstr(line, "range(i32 0, ");
    if (range_at && range_at < r) *range = (unsigned)strtoul(range_at + 13, NULL, 10);
}

static void note_bad(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void note_bad(const char *fmt, ...) {
    pthread_mutex_lock(&lock);
    if (!first_bad[0]) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(first_bad, sizeof first_bad, fmt, ap);
        va_end(ap);
    }
    pthread_mutex_unlock(&lock);
}

static void *worker(void *arg) {
    long id = (long)arg;
    kiln_error err = {0};
    kiln_gen *g = NULL;
    if (kiln_gen_create(&g, NULL, &err) != KILN_OK) {
        note_bad("setup: %s", err.msg);
        return NULL;
    }
    for (int i = 0; i < iterations; i++) {
        int s = (int)((i + id) % NSPECS), smi = (int)((i / NSPECS + id) % 2), sm = smi ? 80 : 75;
        kiln_module *m;
        if (kiln_generate(g, specs[s], sm, KILN_EMIT_LL, &m, &err) != KILN_OK) {
            note_bad("%s sm_%d: generation failed: %s", specs[s], sm, err.msg);
            atomic_fetch_add(&wrong_text, 1);
            continue;
        }
        const char *text = kiln_module_text(m);
        unsigned block, range;
        bounds(text, &block, &range);
        atomic_fetch_add(&modules, 1);
        if (range != block) {
            atomic_fetch_add(&wrong_bound, 1);
            note_bad("%s sm_%d: %%tid.x bounded by %u, but the kernel has %u threads", specs[s], sm, range, block);
        } else if (strcmp(text, reference[s][smi])) {
            atomic_fetch_add(&wrong_text, 1);
            note_bad("%s sm_%d: the module differs from the single-threaded one", specs[s], sm);
        }
        kiln_module_free(m);
    }
    kiln_gen_destroy(g);
    return NULL;
}

int main(void) {
    const char *full = getenv("KILN_TEST_FULL");
    iterations = full && *full && strcmp(full, "0") ? 1500 : SANITIZED ? 50 : 150;
    kiln_error err = {0};
    kiln_gen *g = NULL;
    TEST_BEGIN("single-threaded references carry their own block size");
    CHECK(kiln_gen_create(&g, NULL, &err) == KILN_OK, "%s", err.msg);
    for (int s = 0; g && s < NSPECS; s++)
        for (int smi = 0; smi < 2; smi++) {
            kiln_module *m;
            if (kiln_generate(g, specs[s], smi ? 80 : 75, KILN_EMIT_LL, &m, &err) != KILN_OK) {
                CHECK(0, "%s: %s", specs[s], err.msg);
                continue;
            }
            reference[s][smi] = strdup(kiln_module_text(m));
            unsigned block, range;
            bounds(reference[s][smi], &block, &range);
            CHECK(block && range == block, "%s sm_%d: block %u, %%tid.x bound %u", specs[s], smi ? 80 : 75, block,
                  range);
            kiln_module_free(m);
        }
    kiln_gen_destroy(g);
    TEST_END();
    for (int s = 0; s < NSPECS; s++)
        if (!reference[s][0] || !reference[s][1]) return check_summary("gen_threads");

    TEST_BEGIN("three generators on three threads give every module its own bounds and text");
    pthread_t th[NTHREADS];
    for (long i = 0; i < NTHREADS; i++) pthread_create(&th[i], NULL, worker, (void *)i);
    for (int i = 0; i < NTHREADS; i++) pthread_join(th[i], NULL);
    printf("gen_threads: %ld modules on %d threads: %ld with another kernel's %%tid bound, %ld other differences\n",
           (long)modules, NTHREADS, (long)wrong_bound, (long)wrong_text);
    CHECK(modules == (long)NTHREADS * iterations && !wrong_bound && !wrong_text, "first: %s", first_bad);
    TEST_END();
    for (int s = 0; s < NSPECS; s++) free(reference[s][0]), free(reference[s][1]);
    return check_summary("gen_threads");
}
