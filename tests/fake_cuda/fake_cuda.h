/* tests/fake_cuda/fake_cuda.h - control and inspection API of the fake CUDA driver, for tests. */
#ifndef KILN_TESTS_FAKE_CUDA_H
#define KILN_TESTS_FAKE_CUDA_H

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/kernel.h"

/* Environment read at cuInit: FAKE_CUDA_SM (default 80), FAKE_CUDA_DEVICES (default 1),
 * FAKE_CUDA_PTX_MAX (PTX ISA version times 10 the "driver" accepts, default 88),
 * FAKE_CUDA_DRIVER_VERSION (what cuDriverGetVersion reports, default 13000),
 * FAKE_CUDA_COMPILE_US (how long each PTX compile takes, outside the driver's lock; default 0),
 * FAKE_CUDA_FAIL="op=error[,op=error...]" with op one of init, load, launch, alloc, link and error
 * one of oom, invalid_ptx, launch_failed, no_device, not_supported (every call of that op fails).
 *
 * The linker (cuLinkCreate_v2, cuLinkAddData_v2, cuLinkComplete, cuLinkDestroy) checks PTX as a
 * module load does and "compiles" it into a cubin for the device's SM: an ELF whose section
 * ".fake.ptx" holds the PTX, so that a module loaded from it has the PTX's entries and parameter
 * sizes. A PTX compile is counted (ptx_compiles) for each PTX module load and each cuLinkAddData;
 * loading a cubin compiles nothing.
 *
 * cuTensorMapEncodeTiled checks its arguments by the driver API's rules (kiln_tensor_map_invalid, element
 * strides 1, no interleave, a 64-byte aligned map) and writes kiln's record (kiln/tensor_map.h), the
 * layout kiln's emulator reads, so a map the runtime had encoded runs on the emulator. The library built
 * with -DFAKE_CUDA_NO_TENSOR_MAP ($O/tests/libfakecuda_old.so.1) lacks it, as drivers before CUDA 12.0 do. */

typedef struct fake_cuda_counters {
    int inits, loads, load_failures, unloads, get_functions, launches, launch_failures, set_attributes;
    int allocs, frees, live_modules, live_allocs, ctx_retains, ctx_releases;
    int ptx_compiles, cubin_loads;                                        /* successful ones */
    int link_creates, link_adds, link_completes, link_destroys, live_links; /* the linker */
    int max_concurrent_compiles; /* most PTX compiles in flight at once (FAKE_CUDA_COMPILE_US > 0) */
    int tmap_encodes, tmap_failures; /* cuTensorMapEncodeTiled calls that succeeded / were refused */
} fake_cuda_counts;

/* The most parameters a recorded kernel has (kiln's KILN_MAX_PARAMS is 40). */
#define FAKE_CUDA_MAX_PARAMS 48
/* The most 128-byte (tensor map) parameters a recorded launch keeps. */
#define FAKE_CUDA_MAX_TMAPS 6

typedef struct fake_cuda_launch {
    char entry[128];
    unsigned grid[3], block[3], smem;
    int nparams;
    unsigned param_size[FAKE_CUDA_MAX_PARAMS];
    uint64_t param[FAKE_CUDA_MAX_PARAMS]; /* each value zero-extended to 64 bits; a 128-byte one: its index in tmap */
    int loaded_sm;      /* .target of the module the function came from (or cubin SM) */
    int cubin;
    int ntmaps;         /* (python/tests/conftest.py's FakeLaunch mirrors this struct) */
    unsigned char tmap[FAKE_CUDA_MAX_TMAPS][128]; /* the 128-byte parameters' bytes (CUtensorMaps), in order */
} fake_cuda_launch;

/* Fails the next `times` calls of op ("load", "launch", "alloc", "init", "link") with error
 * ("oom", "invalid_ptx", "launch_failed", "no_device", "not_supported"); times < 0: every call. */
typedef void (*fake_cuda_fail_fn)(const char *op, const char *error, int times);
typedef void (*fake_cuda_counters_fn)(fake_cuda_counts *out);
typedef int (*fake_cuda_last_launch_fn)(fake_cuda_launch *out); /* 0 when there was none */
typedef void (*fake_cuda_reset_fn)(void);                        /* counters and injected failures */
/* fake_cuda_launch_at(i, out): launch i (0-based) of the first 16 since the last reset (dlsym it;
 * 0 when there was none). */
typedef int (*fake_cuda_launch_at_fn)(int i, fake_cuda_launch *out);

typedef struct fake_cuda_api {
    void *dl;
    fake_cuda_fail_fn fail;
    fake_cuda_counters_fn counters;
    fake_cuda_last_launch_fn last_launch;
    fake_cuda_reset_fn reset;
} fake_cuda_api;

/* Path of the fake driver: $KILN_FAKE_CUDA, else $O/tests/libfakecuda.so.1 (O defaults to build). */
static inline const char *fake_cuda_path(void) {
    static char path[1024];
    const char *p = getenv("KILN_FAKE_CUDA"), *o = getenv("O");
    if (p && *p) return p;
    snprintf(path, sizeof path, "%s/tests/libfakecuda.so.1", o && *o ? o : "build");
    return path;
}

/* Points the runtime at the fake driver (KILN_CUDA_DRIVER) and opens its control API. */
static inline int fake_cuda_open(fake_cuda_api *api) {
    const char *path = fake_cuda_path();
    setenv("KILN_CUDA_DRIVER", path, 1);
    api->dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!api->dl) {
        printf("cannot open the fake CUDA driver %s: %s\n", path, dlerror());
        return -1;
    }
    *(void **)&api->fail = dlsym(api->dl, "fake_cuda_fail");
    *(void **)&api->counters = dlsym(api->dl, "fake_cuda_counters");
    *(void **)&api->last_launch = dlsym(api->dl, "fake_cuda_last_launch");
    *(void **)&api->reset = dlsym(api->dl, "fake_cuda_reset");
    return api->fail && api->counters && api->last_launch && api->reset ? 0 : -1;
}

/* A test kernel's metadata: entry `entry`, spec "<family> ...", params (out ptr, n i32, scale f32). */
static inline kiln_kernel_meta fake_cuda_meta(const char *spec, const char *entry, int sm) {
    kiln_kernel_meta m;
    memset(&m, 0, sizeof m);
    snprintf(m.spec, sizeof m.spec, "%s", spec);
    sscanf(spec, "%63s", m.family);
    snprintf(m.entry, sizeof m.entry, "%s", entry);
    m.sm = sm;
    m.ptx_version = sm >= 90 ? 78 : sm >= 80 ? 70 : 63;
    m.block[0] = 128, m.block[1] = m.block[2] = 1;
    m.grid_tile[0] = 4, m.grid_tile[1] = m.grid_tile[2] = 1;
    m.align_bytes = 4;
    m.nparams = 3;
    m.params[0] = (kiln_param){"out", KILN_PARAM_PTR, KILN_F32};
    m.params[1] = (kiln_param){"n", KILN_PARAM_I32, KILN_F32};
    m.params[2] = (kiln_param){"scale", KILN_PARAM_F32, KILN_F32};
    return m;
}

/* PTX text with the "// kiln.meta" block of m and an empty kernel named m->entry whose
 * .target is target_sm (normally m->sm). Returns the length written (buf of 8 KiB). */
static inline int fake_cuda_ptx(const kiln_kernel_meta *m, int target_sm, char *buf, size_t size) {
    int n = kiln_meta_format(m, buf, size);
    n += snprintf(buf + n, size - (size_t)n,
                  ".version %d.%d\n.target sm_%d%s\n.address_size 64\n\n.visible .entry %s(\n"
                  "\t.param .u64 %s_param_0,\n\t.param .u32 %s_param_1,\n\t.param .f32 %s_param_2\n)\n{\n\tret;\n}\n",
                  m->ptx_version / 10, m->ptx_version % 10, target_sm % 1000, target_sm >= 1000 ? "a" : "", m->entry,
                  m->entry, m->entry, m->entry); /* 1090 is sm_90a (KILN_SM_ARCH) */
    return n;
}

/* A minimal ELF64 "cubin" for sm with one kernel section ".text.<entry>" (what the fake reads). */
static inline size_t fake_cuda_cubin(int sm, const char *entry, unsigned char *buf, size_t size) {
    char names[200];
    int nl = snprintf(names, sizeof names, "%c.shstrtab%c.text.%s%c", 0, 0, entry, 0) + 1;
    size_t shoff = (64 + (size_t)nl + 7) & ~(size_t)7, total = shoff + 3 * 64;
    if (total > size) return 0;
    memset(buf, 0, total);
    memcpy(buf, "\177ELF", 4);
    buf[4] = 2, buf[5] = 1, buf[6] = 1, buf[7] = 65;
    unsigned flags = (unsigned)sm << 8;
    memcpy(buf + 48, &flags, 4);
    memcpy(buf + 40, &shoff, 8);
    buf[58] = 64, buf[60] = 3, buf[62] = 1; /* shentsize, shnum, shstrndx */
    memcpy(buf + 64, names, (size_t)nl);
    unsigned char *sh1 = buf + shoff + 64, *sh2 = buf + shoff + 128;
    unsigned name1 = 1, name2 = 11;
    size_t off = 64, len = (size_t)nl;
    memcpy(sh1, &name1, 4), memcpy(sh1 + 24, &off, 8), memcpy(sh1 + 32, &len, 8);
    memcpy(sh2, &name2, 4);
    return total;
}

#endif
