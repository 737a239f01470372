/* runtime/rt_cubin.c - PTX compiled by the driver's own linker into a cubin, and the key that cubin is cached under.
 *
 * The driver's PTX -> SASS compile is most of a kernel's load time, so the runtime keeps what the
 * driver compiles: PTX goes through cuLinkCreate / cuLinkAddData / cuLinkComplete (part of every
 * driver, compiling as cuModuleLoadDataEx would, but on many threads at once where
 * cuModuleLoadDataEx compiles one module at a time), the cubin is loaded and written to the disk
 * cache, and the next load of the same PTX on the same device and driver reads it back. The
 * separate nvJitLink library is not used: it ships with the toolkit, not the driver, and a
 * runtime-only install has no toolkit. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rt.h"

bool rt_link_usable(const kiln_rt *rt) {
    const rt_driver *d = &rt->drv;
    const char *env = getenv("KILN_DRIVER_LINK");
    return d->cuLinkCreate && d->cuLinkAddData && d->cuLinkComplete && d->cuLinkDestroy && !(env && !strcmp(env, "0"));
}

void rt_cubin_key(const kiln_rt *rt, const char *spec, const void *ptx, size_t size, uint8_t out[16]) {
    char text[KILN_SPEC_MAX + 256], hex[33];
    uint8_t h[16];
    rt_hash128(ptx, size, h);
    rt_hex(h, 16, hex);
    /* a driver update changes the compiler, so the driver version is part of the key */
    int n = snprintf(text, sizeof text, "kiln-cubin 1\nruntime %s\nspec %s\ncc %d.%d\ndriver %d\nptx %s\n",
                     KILN_VERSION_STRING, spec, rt->info.cc_major, rt->info.cc_minor, rt->info.driver_version, hex);
    rt_hash128(text, (size_t)n < sizeof text ? (size_t)n : sizeof text, out);
}

kiln_status rt_cubin_link(kiln_rt *rt, const void *ptx, size_t size, const char *what, CUlinkState *state,
                          void **cubin, size_t *len, kiln_error *err) {
    const rt_driver *d = &rt->drv;
    char elog[4096] = "";
    int opts[] = {RT_JIT_ERROR_LOG_BUFFER, RT_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
    void *vals[] = {elog, (void *)(uintptr_t)sizeof elog};
    *state = NULL;
    kiln_status st = rt_driver_check(d, d->cuLinkCreate(2, opts, vals, state), "cuLinkCreate", what, err);
    if (st != KILN_OK) return st;
    /* the PTX is passed with its terminating NUL, as cuModuleLoadDataEx reads it */
    CUresult r = d->cuLinkAddData(*state, RT_JIT_INPUT_PTX, (void *)ptx, size, "kiln.ptx", 0, NULL, NULL);
    const char *call = "cuLinkAddData";
    if (r == RT_CUDA_SUCCESS) r = d->cuLinkComplete(*state, cubin, len), call = "cuLinkComplete";
    if (r == RT_CUDA_SUCCESS && (!*cubin || !*len)) {
        st = kiln_fail(err, KILN_EDRIVER, "cuLinkComplete returned no cubin: %s", what);
    } else if (r != RT_CUDA_SUCCESS) {
        char detail[KILN_SPEC_MAX + sizeof elog + 200];
        elog[sizeof elog - 1] = 0;
        snprintf(detail, sizeof detail, "%s%s%s", what, elog[0] ? "; JIT log: " : "", elog);
        st = rt_driver_check(d, r, call, detail, err);
    }
    if (st != KILN_OK) {
        d->cuLinkDestroy(*state);
        *state = NULL;
    }
    return st;
}
