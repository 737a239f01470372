/* runtime/rt_runtime.c - the kiln_rt object: driver, device, context, bundles, warnings, memory. */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rt.h"

static _Atomic(const kiln_rt_generator *) registered_generator;

void kiln_rt_register_generator(const kiln_rt_generator *g) {
    atomic_store(&registered_generator, g);
}

const kiln_rt_generator *rt_generator(void) {
    return atomic_load(&registered_generator);
}

void rt_warn(kiln_rt *rt, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&rt->lock);
    if (rt->nwarnings++ == 0) snprintf(rt->first_warning, sizeof rt->first_warning, "%s", msg);
    pthread_mutex_unlock(&rt->lock);
    if (rt->on_warning) rt->on_warning(rt->warning_user, msg);
}

int kiln_rt_warnings(kiln_rt *rt, char *buf, size_t size) {
    pthread_mutex_lock(&rt->lock);
    int n = rt->nwarnings;
    if (buf && size) snprintf(buf, size, "%s", rt->first_warning);
    pthread_mutex_unlock(&rt->lock);
    return n;
}

/* Device, context and caches, once the driver is open. */
static kiln_status open_device(kiln_rt *rt, const kiln_rt_options *opt, kiln_error *err) {
    const rt_driver *d = &rt->drv;
    int count = 0;
    kiln_status st = rt_driver_check(d, d->cuInit(0), "cuInit", NULL, err);
    if (st == KILN_OK) st = rt_driver_check(d, d->cuDeviceGetCount(&count), "cuDeviceGetCount", NULL, err);
    if (st != KILN_OK) return st;
    if (count == 0) return kiln_fail(err, KILN_ENODEVICE, "no CUDA device: the driver reports none");
    if (opt->device < 0 || opt->device >= count)
        return kiln_fail(err, KILN_EINVAL, "CUDA device %d does not exist; valid: 0..%d", opt->device, count - 1);
    st = rt_driver_check(d, d->cuDeviceGet(&rt->dev, opt->device), "cuDeviceGet", NULL, err);
    if (st == KILN_OK) st = rt_device_query(d, rt->dev, opt->device, &rt->info, err);
    if (st == KILN_OK)
        st = rt_driver_check(d, d->cuDevicePrimaryCtxRetain(&rt->ctx, rt->dev), "cuDevicePrimaryCtxRetain", NULL, err);
    return st;
}

kiln_status kiln_rt_create(kiln_rt **out, const kiln_rt_options *opt, kiln_error *err) {
    static const kiln_rt_options defaults;
    if (!out) return kiln_fail(err, KILN_EINVAL, "kiln_rt_create: out is NULL");
    *out = NULL;
    if (!opt) opt = &defaults;
    kiln_rt *rt = calloc(1, sizeof *rt);
    if (!rt) return kiln_fail(err, KILN_ENOMEM, "out of memory creating the runtime");
    pthread_mutex_init(&rt->lock, NULL);
    pthread_cond_init(&rt->done, NULL);
    rt->on_warning = opt->on_warning;
    rt->warning_user = opt->warning_user;
    kiln_status st = rt_driver_open(&rt->drv, err);
    if (st == KILN_OK) st = open_device(rt, opt, err);
    if (st != KILN_OK) {
        kiln_rt_destroy(rt);
        return st;
    }
    char warning[1400];
    rt_disk_init(&rt->disk, opt->cache_dir, opt->no_disk_cache != 0, warning, sizeof warning);
    if (warning[0]) rt_warn(rt, "%s", warning);
    *out = rt;
    return KILN_OK;
}

void kiln_rt_destroy(kiln_rt *rt) {
    if (!rt) return;
    rt_prepares_finish(rt); /* its workers use the runtime */
    if (rt->ctx) {
        rt_kernels_free(rt);
        rt->drv.cuDevicePrimaryCtxRelease(rt->dev);
    }
    for (int i = 0; i < rt->nbundles; i++) kiln_bundle_close(rt->bundles[i]);
    free(rt->bundles);
    if (rt->drv.dl) rt_driver_close(&rt->drv);
    pthread_cond_destroy(&rt->done);
    pthread_mutex_destroy(&rt->lock);
    free(rt);
}

const kiln_device_info *kiln_rt_device(const kiln_rt *rt) {
    return &rt->info;
}

kiln_dtype kiln_rt_half_dtype(const kiln_rt *rt) {
    return rt->info.facts.half;
}

const char *kiln_rt_cache_dir(const kiln_rt *rt) {
    return rt->disk.enabled ? rt->disk.dir : NULL;
}

void kiln_rt_get_stats(kiln_rt *rt, kiln_rt_stats *out) {
    pthread_mutex_lock(&rt->lock);
    *out = rt->stats;
    pthread_mutex_unlock(&rt->lock);
}

kiln_status rt_bind(kiln_rt *rt, kiln_error *err) {
    CUcontext cur = NULL;
    kiln_status st = rt_driver_check(&rt->drv, rt->drv.cuCtxGetCurrent(&cur), "cuCtxGetCurrent", NULL, err);
    if (st == KILN_OK && cur != rt->ctx)
        st = rt_driver_check(&rt->drv, rt->drv.cuCtxSetCurrent(rt->ctx), "cuCtxSetCurrent", NULL, err);
    return st;
}

static kiln_status add_bundle(kiln_rt *rt, kiln_bundle *b, kiln_status st) {
    if (st != KILN_OK) return st;
    pthread_mutex_lock(&rt->lock);
    kiln_bundle **n = realloc(rt->bundles, (size_t)(rt->nbundles + 1) * sizeof *n);
    if (n) {
        rt->bundles = n;
        rt->bundles[rt->nbundles++] = b;
    }
    pthread_mutex_unlock(&rt->lock);
    if (!n) kiln_bundle_close(b);
    return n ? KILN_OK : KILN_ENOMEM;
}

kiln_status kiln_rt_add_bundle_file(kiln_rt *rt, const char *path, kiln_error *err) {
    kiln_bundle *b = NULL;
    kiln_status st = add_bundle(rt, b, kiln_bundle_open_file(path, &b, err));
    return st == KILN_ENOMEM ? kiln_fail(err, st, "out of memory adding bundle '%s'", path) : st;
}

kiln_status kiln_rt_add_bundle_memory(kiln_rt *rt, const void *data, size_t size, kiln_error *err) {
    kiln_bundle *b = NULL;
    kiln_status st = kiln_bundle_open_memory(data, size, &b, err);
    st = add_bundle(rt, b, st);
    return st == KILN_ENOMEM ? kiln_fail(err, st, "out of memory adding a bundle") : st;
}

/* ---- device memory helpers ---- */

kiln_status kiln_rt_alloc(kiln_rt *rt, size_t bytes, kiln_devptr *out, kiln_error *err) {
    CUdeviceptr p = 0;
    kiln_status st = rt_bind(rt, err);
    if (st == KILN_OK) st = rt_driver_check(&rt->drv, rt->drv.cuMemAlloc(&p, bytes), "cuMemAlloc", NULL, err);
    *out = st == KILN_OK ? (kiln_devptr)p : 0;
    return st;
}

kiln_status kiln_rt_free(kiln_rt *rt, kiln_devptr p, kiln_error *err) {
    kiln_status st = rt_bind(rt, err);
    return st == KILN_OK ? rt_driver_check(&rt->drv, rt->drv.cuMemFree((CUdeviceptr)p), "cuMemFree", NULL, err) : st;
}

kiln_status kiln_rt_upload(kiln_rt *rt, kiln_devptr dst, const void *src, size_t bytes, kiln_error *err) {
    kiln_status st = rt_bind(rt, err);
    return st == KILN_OK ? rt_driver_check(&rt->drv, rt->drv.cuMemcpyHtoD((CUdeviceptr)dst, src, bytes),
                                           "cuMemcpyHtoD", NULL, err)
                         : st;
}

kiln_status kiln_rt_download(kiln_rt *rt, void *dst, kiln_devptr src, size_t bytes, kiln_error *err) {
    kiln_status st = rt_bind(rt, err);
    return st == KILN_OK ? rt_driver_check(&rt->drv, rt->drv.cuMemcpyDtoH(dst, (CUdeviceptr)src, bytes),
                                           "cuMemcpyDtoH", NULL, err)
                         : st;
}

kiln_status kiln_rt_synchronize(kiln_rt *rt, kiln_error *err) {
    kiln_status st = rt_bind(rt, err);
    return st == KILN_OK ? rt_driver_check(&rt->drv, rt->drv.cuCtxSynchronize(), "cuCtxSynchronize", NULL, err) : st;
}
