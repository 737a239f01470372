/* runtime/rt_prepare.c - kiln_rt_prepare and its background form: a model's kernels made ready at load, on many threads at once.
 *
 * Each worker takes the next spec and calls kiln_rt_get_kernel, which generates (each thread has its
 * own generator) and has the driver compile (each thread its own link state) side by side with the
 * others. kiln_rt_get_kernel is single-flight, so a caller asking for a spec a worker is resolving
 * waits for that spec alone, and one no worker has reached yet is resolved by the caller itself: the
 * background form lets a program launch its first kernels while the rest are still compiling. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rt.h"

struct kiln_prepare {
    kiln_rt *rt;
    char **specs; /* n copies: the caller's strings may be gone before the workers are */
    int n;
    atomic_int next;
    kiln_kernel **kernels; /* n slots, filled by the workers */
    kiln_error *errs;      /* n slots: the error of each spec that failed */
    kiln_status *status;   /* n slots */
    pthread_t *threads;
    int started;
    kiln_prepare *next_active; /* the runtime's list of unfinished background prepares */
};

/* Takes specs in order until none is left. */
static void *prepare_worker(void *arg) {
    kiln_prepare *p = arg;
    for (int i; (i = atomic_fetch_add(&p->next, 1)) < p->n;) {
        p->errs[i].msg[0] = 0;
        p->status[i] = kiln_rt_get_kernel(p->rt, p->specs[i], &p->kernels[i], &p->errs[i]);
        if (p->status[i] != KILN_OK) p->kernels[i] = NULL;
    }
    return NULL;
}

static int online_cpus(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > 256 ? 256 : (int)n;
}

static kiln_status check_args(kiln_rt *rt, const char *const *specs, int n, int threads, kiln_error *err) {
    if (!rt) return kiln_fail(err, KILN_EINVAL, "prepare: no runtime");
    if (n < 0 || (n > 0 && !specs))
        return kiln_fail(err, KILN_EINVAL, "prepare: %d specs at %p; give n >= 0 spec strings", n, (const void *)specs);
    if (threads < 0 || threads > 1024)
        return kiln_fail(err, KILN_EINVAL, "prepare: bad thread count %d; valid: 0 (one per online CPU) .. 1024",
                         threads);
    for (int i = 0; i < n; i++)
        if (!specs[i]) return kiln_fail(err, KILN_EINVAL, "prepare: spec %d is NULL", i);
    return KILN_OK;
}

static void prepare_free(kiln_prepare *p) {
    for (int i = 0; p->specs && i < p->n; i++) free(p->specs[i]);
    free(p->specs);
    free(p->kernels);
    free(p->errs);
    free(p->status);
    free(p->threads);
    free(p);
}

/* A prepare of the n specs (arguments checked), its helper threads not started yet. */
static kiln_prepare *prepare_new(kiln_rt *rt, const char *const *specs, int n, int threads) {
    kiln_prepare *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->rt = rt;
    p->n = n;
    atomic_init(&p->next, 0);
    p->specs = calloc((size_t)n + 1, sizeof *p->specs);
    p->kernels = calloc((size_t)n + 1, sizeof *p->kernels);
    p->errs = calloc((size_t)n + 1, sizeof *p->errs);
    p->status = calloc((size_t)n + 1, sizeof *p->status);
    p->threads = calloc((size_t)threads + 1, sizeof *p->threads);
    bool ok = p->specs && p->kernels && p->errs && p->status && p->threads;
    for (int i = 0; ok && i < n; i++) ok = (p->specs[i] = strdup(specs[i])) != NULL;
    if (!ok) {
        prepare_free(p);
        return NULL;
    }
    return p;
}

/* Starts up to `helpers` threads; one that cannot start leaves its share to the rest (or to the caller). */
static void prepare_spawn(kiln_prepare *p, int helpers) {
    for (int t = 0; t < helpers; t++)
        if (pthread_create(&p->threads[p->started], NULL, prepare_worker, p) == 0) p->started++;
}

/* Waits for every spec; kernels (may be NULL) gets each spec's kernel; err names the first failure. */
static kiln_status prepare_join(kiln_prepare *p, kiln_kernel **kernels, kiln_error *err) {
    prepare_worker(p); /* whatever no helper took (all of it when none could start) */
    for (int t = 0; t < p->started; t++) pthread_join(p->threads[t], NULL);
    p->started = 0;
    int failed = 0, first = -1;
    for (int i = 0; i < p->n; i++)
        if (p->status[i] != KILN_OK && failed++ == 0) first = i;
    if (kernels) memcpy(kernels, p->kernels, (size_t)p->n * sizeof *kernels);
    if (!failed) return KILN_OK;
    char more[64] = "";
    if (failed > 1) snprintf(more, sizeof more, " (and %d more specs failed)", failed - 1);
    return kiln_fail(err, p->status[first], "prepare: spec %d '%.160s': %.600s%s", first, p->specs[first],
                     p->errs[first].msg, more);
}

kiln_status kiln_rt_prepare(kiln_rt *rt, const char *const *specs, int n, int threads, kiln_kernel **kernels,
                            kiln_error *err) {
    kiln_status st = check_args(rt, specs, n, threads, err);
    if (st != KILN_OK || n == 0) return st;
    if (threads == 0) threads = online_cpus();
    if (threads > n) threads = n;
    kiln_prepare *p = prepare_new(rt, specs, n, threads);
    if (!p) {
        if (kernels) memset(kernels, 0, (size_t)n * sizeof *kernels); /* as promised: NULL where not ready */
        return kiln_fail(err, KILN_ENOMEM, "prepare: out of memory for %d specs", n);
    }
    prepare_spawn(p, threads - 1); /* the calling thread is one of them */
    st = prepare_join(p, kernels, err);
    prepare_free(p);
    return st;
}

kiln_status kiln_rt_prepare_start(kiln_rt *rt, const char *const *specs, int n, int threads, kiln_prepare **out,
                                  kiln_error *err) {
    if (!out) return kiln_fail(err, KILN_EINVAL, "prepare_start: out is NULL");
    *out = NULL;
    kiln_status st = check_args(rt, specs, n, threads, err);
    if (st != KILN_OK) return st;
    if (threads == 0) threads = online_cpus();
    if (threads > n) threads = n;
    kiln_prepare *p = prepare_new(rt, specs, n, threads);
    if (!p) return kiln_fail(err, KILN_ENOMEM, "prepare_start: out of memory for %d specs", n);
    pthread_mutex_lock(&rt->lock);
    p->next_active = rt->prepares;
    rt->prepares = p;
    pthread_mutex_unlock(&rt->lock);
    prepare_spawn(p, threads);
    *out = p;
    return KILN_OK;
}

/* Takes p off its runtime's list of unfinished prepares. */
static void unlist(kiln_prepare *p) {
    kiln_rt *rt = p->rt;
    pthread_mutex_lock(&rt->lock);
    kiln_prepare **pp = &rt->prepares;
    while (*pp && *pp != p) pp = &(*pp)->next_active;
    if (*pp) *pp = p->next_active;
    pthread_mutex_unlock(&rt->lock);
}

kiln_status kiln_prepare_finish(kiln_prepare *p, kiln_kernel **kernels, kiln_error *err) {
    if (!p) return KILN_OK; /* what a failed kiln_rt_prepare_start leaves in *out: nothing to wait for */
    kiln_status st = prepare_join(p, kernels, err);
    unlist(p);
    prepare_free(p);
    return st;
}

void rt_prepares_finish(kiln_rt *rt) {
    for (;;) {
        pthread_mutex_lock(&rt->lock);
        kiln_prepare *p = rt->prepares;
        pthread_mutex_unlock(&rt->lock);
        if (!p) return;
        kiln_prepare_finish(p, NULL, NULL);
    }
}
