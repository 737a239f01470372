/* runtime/rt_prepare.c - kiln_rt_prepare: gets a model's kernels ready at load, on many threads at once. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rt.h"

typedef struct prepare_job {
    kiln_rt *rt;
    const char *const *specs;
    int n;
    atomic_int next;
    kiln_kernel **kernels; /* n slots, filled by the workers */
    kiln_error *errs;      /* n slots: the error of each spec that failed */
    kiln_status *status;   /* n slots */
} prepare_job;

/* Takes specs in order until none is left. kiln_rt_get_kernel is thread-safe: each thread uses
 * its own generator, and two threads asking for one spec generate it once. */
static void *prepare_worker(void *arg) {
    prepare_job *j = arg;
    for (int i; (i = atomic_fetch_add(&j->next, 1)) < j->n;) {
        j->errs[i].msg[0] = 0;
        j->status[i] = kiln_rt_get_kernel(j->rt, j->specs[i], &j->kernels[i], &j->errs[i]);
        if (j->status[i] != KILN_OK) j->kernels[i] = NULL;
    }
    return NULL;
}

static int online_cpus(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > 256 ? 256 : (int)n;
}

kiln_status kiln_rt_prepare(kiln_rt *rt, const char *const *specs, int n, int threads, kiln_kernel **kernels,
                            kiln_error *err) {
    if (!rt) return kiln_fail(err, KILN_EINVAL, "prepare: no runtime");
    if (n < 0 || (n > 0 && !specs))
        return kiln_fail(err, KILN_EINVAL, "prepare: %d specs at %p; give n >= 0 spec strings", n, (const void *)specs);
    if (threads < 0 || threads > 1024)
        return kiln_fail(err, KILN_EINVAL, "prepare: bad thread count %d; valid: 0 (one per online CPU) .. 1024",
                         threads);
    for (int i = 0; i < n; i++)
        if (!specs[i]) return kiln_fail(err, KILN_EINVAL, "prepare: spec %d is NULL", i);
    if (n == 0) return KILN_OK;
    if (threads == 0) threads = online_cpus();
    if (threads > n) threads = n;
    prepare_job j = {.rt = rt, .specs = specs, .n = n};
    atomic_init(&j.next, 0);
    j.kernels = kernels ? kernels : calloc((size_t)n, sizeof *j.kernels);
    j.errs = calloc((size_t)n, sizeof *j.errs);
    j.status = calloc((size_t)n, sizeof *j.status);
    pthread_t *th = calloc((size_t)threads, sizeof *th);
    kiln_status st = KILN_OK;
    if (!j.kernels || !j.errs || !j.status || !th) {
        if (kernels) memset(kernels, 0, (size_t)n * sizeof *kernels); /* as promised: NULL where not ready */
        st = kiln_fail(err, KILN_ENOMEM, "prepare: out of memory for %d specs", n);
        goto done;
    }
    /* the calling thread works too: threads - 1 helpers; one that cannot start leaves its share to the rest */
    int started = 0;
    for (int t = 1; t < threads; t++)
        if (pthread_create(&th[started], NULL, prepare_worker, &j) == 0) started++;
    prepare_worker(&j);
    for (int t = 0; t < started; t++) pthread_join(th[t], NULL);
    int failed = 0, first = -1;
    for (int i = 0; i < n; i++)
        if (j.status[i] != KILN_OK && failed++ == 0) first = i;
    if (failed) {
        st = j.status[first];
        char more[64] = "";
        if (failed > 1) snprintf(more, sizeof more, " (and %d more specs failed)", failed - 1);
        kiln_fail(err, st, "prepare: spec %d '%.160s': %.600s%s", first, specs[first], j.errs[first].msg, more);
    }
done:
    if (!kernels) free(j.kernels);
    free(j.errs);
    free(j.status);
    free(th);
    return st;
}
