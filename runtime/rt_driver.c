/* runtime/rt_driver.c - opens the CUDA driver with dlopen and turns its errors into messages. */
#include <dlfcn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rt.h"

/* Every driver entry point the runtime uses, with the exported (versioned) symbol name. */
static const struct {
    const char *symbol;
    size_t offset;
    bool optional; /* the runtime works without it */
} driver_symbols[] = {
#define SYM(field, name) {name, offsetof(rt_driver, field), false}
#define OPT(field, name) {name, offsetof(rt_driver, field), true}
    SYM(cuInit, "cuInit"),
    SYM(cuDriverGetVersion, "cuDriverGetVersion"),
    SYM(cuDeviceGetCount, "cuDeviceGetCount"),
    SYM(cuDeviceGet, "cuDeviceGet"),
    SYM(cuDeviceGetAttribute, "cuDeviceGetAttribute"),
    SYM(cuDeviceGetName, "cuDeviceGetName"),
    SYM(cuDeviceTotalMem, "cuDeviceTotalMem_v2"),
    SYM(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain"),
    SYM(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2"),
    SYM(cuCtxGetCurrent, "cuCtxGetCurrent"),
    SYM(cuCtxSetCurrent, "cuCtxSetCurrent"),
    SYM(cuCtxSynchronize, "cuCtxSynchronize"),
    SYM(cuModuleLoadDataEx, "cuModuleLoadDataEx"),
    SYM(cuModuleUnload, "cuModuleUnload"),
    SYM(cuModuleGetFunction, "cuModuleGetFunction"),
    SYM(cuFuncSetAttribute, "cuFuncSetAttribute"),
    SYM(cuLaunchKernel, "cuLaunchKernel"),
    SYM(cuMemAlloc, "cuMemAlloc_v2"),
    SYM(cuMemFree, "cuMemFree_v2"),
    SYM(cuMemcpyHtoD, "cuMemcpyHtoD_v2"),
    SYM(cuMemcpyDtoH, "cuMemcpyDtoH_v2"),
    SYM(cuGetErrorName, "cuGetErrorName"),
    SYM(cuGetErrorString, "cuGetErrorString"),
    OPT(cuLinkCreate, "cuLinkCreate_v2"),
    OPT(cuLinkAddData, "cuLinkAddData_v2"),
    OPT(cuLinkComplete, "cuLinkComplete"),
    OPT(cuLinkDestroy, "cuLinkDestroy"),
    OPT(cuTensorMapEncodeTiled, "cuTensorMapEncodeTiled"),
#undef OPT
#undef SYM
};

kiln_status rt_driver_open(rt_driver *d, kiln_error *err) {
    const char *path = getenv("KILN_CUDA_DRIVER");
    if (!path || !*path) path = "libcuda.so.1";
    memset(d, 0, sizeof *d);
    d->dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!d->dl) {
        const char *why = dlerror();
        return kiln_fail(err, KILN_ENODRIVER,
                         "no CUDA driver found: cannot open '%s' (%s); install the NVIDIA driver or "
                         "set KILN_CUDA_DRIVER to the path of libcuda.so.1",
                         path, why ? why : "unknown reason");
    }
    for (size_t i = 0; i < sizeof driver_symbols / sizeof driver_symbols[0]; i++) {
        void *sym = dlsym(d->dl, driver_symbols[i].symbol);
        if (!sym && driver_symbols[i].optional) continue;
        if (!sym) {
            kiln_fail(err, KILN_ENODRIVER, "no usable CUDA driver: '%s' lacks %s (driver too old?)", path,
                      driver_symbols[i].symbol);
            rt_driver_close(d);
            return KILN_ENODRIVER;
        }
        memcpy((char *)d + driver_symbols[i].offset, &sym, sizeof sym);
    }
    return KILN_OK;
}

void rt_driver_close(rt_driver *d) {
    if (d->dl) dlclose(d->dl);
    memset(d, 0, sizeof *d);
}

kiln_status rt_driver_check(const rt_driver *d, CUresult r, const char *call, const char *detail,
                            kiln_error *err) {
    if (r == RT_CUDA_SUCCESS) return KILN_OK;
    const char *name = NULL, *text = NULL;
    if (d->cuGetErrorName(r, &name) != RT_CUDA_SUCCESS || !name) name = "CUDA_ERROR_?";
    if (d->cuGetErrorString(r, &text) != RT_CUDA_SUCCESS || !text) text = "no description";
    kiln_status st = r == RT_CUDA_ERROR_NO_DEVICE ? KILN_ENODEVICE : KILN_EDRIVER;
    return kiln_fail(err, st, "%s%s failed: %s (%d, %s)%s%s", st == KILN_ENODEVICE ? "no CUDA device: " : "",
                     call, name, r, text, detail && *detail ? ": " : "", detail ? detail : "");
}
