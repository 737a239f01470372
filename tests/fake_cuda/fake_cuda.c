/* tests/fake_cuda/fake_cuda.c - a test double of the CUDA driver: checks and records calls. */
#include <ctype.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fake_cuda.h"
#include "kiln/tensor_map.h"

#define EXPORT __attribute__((visibility("default")))

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;

enum {
    OK = 0, E_INVALID_VALUE = 1, E_OOM = 2, E_NOT_INITIALIZED = 3, E_NO_DEVICE = 100, E_INVALID_DEVICE = 101,
    E_INVALID_IMAGE = 200, E_INVALID_CONTEXT = 201, E_NO_BINARY = 209, E_INVALID_PTX = 218,
    E_UNSUPPORTED_PTX = 222, E_INVALID_HANDLE = 400, E_NOT_FOUND = 500, E_LAUNCH_FAILED = 719,
    E_NOT_SUPPORTED = 801
};

static const struct {
    int code;
    const char *name, *text;
} errors[] = {
    {OK, "CUDA_SUCCESS", "no error"},
    {E_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {E_OOM, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {E_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {E_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {E_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {E_INVALID_IMAGE, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
    {E_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {E_NO_BINARY, "CUDA_ERROR_NO_BINARY_FOR_GPU", "no kernel image is available for execution on the device"},
    {E_INVALID_PTX, "CUDA_ERROR_INVALID_PTX", "a PTX JIT compilation failed"},
    {E_UNSUPPORTED_PTX, "CUDA_ERROR_UNSUPPORTED_PTX_VERSION", "the provided PTX was compiled with an unsupported toolchain."},
    {E_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {E_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {E_LAUNCH_FAILED, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
    {E_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
};

/* Optin shared memory per block by SM (bytes). */
static unsigned optin_smem(int sm) {
    return sm >= 90 ? 227u << 10 : sm == 80 || sm == 87 ? 163u << 10 : sm >= 86 ? 99u << 10 : sm >= 75 ? 64u << 10 : 96u << 10;
}

typedef struct fmodule fmodule;
typedef struct fentry {
    fmodule *mod;
    char name[128];
    int nparams;
    unsigned size[FAKE_CUDA_MAX_PARAMS];
    int max_dyn_smem;
} fentry;

struct fmodule {
    fmodule *next;
    int sm, cubin, nentries;
    fentry entries[16];
};

typedef struct falloc {
    struct falloc *next;
    uint8_t *p;
    size_t size;
} falloc;

enum { OP_INIT, OP_LOAD, OP_LAUNCH, OP_ALLOC, OP_LINK, NOPS };
static const char *op_names[NOPS] = {"init", "load", "launch", "alloc", "link"};

static struct {
    pthread_mutex_t lock;
    int initialized, sm, devices, ptx_max, compile_us, compiling;
    int fail_code[NOPS], fail_times[NOPS];
    fake_cuda_counts c;
    fmodule *modules;
    falloc *allocs;
    int have_launch;
    fake_cuda_launch last;
    int nlog;                   /* launches recorded in log since the last reset */
    fake_cuda_launch log[16];
} S = {.lock = PTHREAD_MUTEX_INITIALIZER};

static int the_context;
static _Thread_local void *current_ctx;

static int error_code(const char *name) {
    static const struct { const char *n; int code; } t[] = {
        {"oom", E_OOM}, {"invalid_ptx", E_INVALID_PTX}, {"launch_failed", E_LAUNCH_FAILED}, {"no_device", E_NO_DEVICE},
        {"not_supported", E_NOT_SUPPORTED}};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (!strcmp(t[i].n, name)) return t[i].code;
    return E_INVALID_VALUE;
}

EXPORT void fake_cuda_fail(const char *op, const char *error, int times) {
    pthread_mutex_lock(&S.lock);
    for (int i = 0; i < NOPS; i++)
        if (!strcmp(op, op_names[i])) {
            S.fail_code[i] = error_code(error);
            S.fail_times[i] = times;
        }
    pthread_mutex_unlock(&S.lock);
}

EXPORT void fake_cuda_counters(fake_cuda_counts *out) {
    pthread_mutex_lock(&S.lock);
    *out = S.c;
    pthread_mutex_unlock(&S.lock);
}

EXPORT int fake_cuda_last_launch(fake_cuda_launch *out) {
    pthread_mutex_lock(&S.lock);
    int have = S.have_launch;
    if (have) *out = S.last;
    pthread_mutex_unlock(&S.lock);
    return have;
}

EXPORT void fake_cuda_reset(void) {
    pthread_mutex_lock(&S.lock);
    int live_m = S.c.live_modules, live_a = S.c.live_allocs, live_l = S.c.live_links;
    memset(&S.c, 0, sizeof S.c);
    S.c.live_modules = live_m;
    S.c.live_allocs = live_a;
    S.c.live_links = live_l;
    memset(S.fail_times, 0, sizeof S.fail_times);
    S.have_launch = 0;
    S.nlog = 0;
    pthread_mutex_unlock(&S.lock);
}

/* Launch i (0-based) of the first 16 since the last reset; 0 when there was none. */
EXPORT int fake_cuda_launch_at(int i, fake_cuda_launch *out) {
    pthread_mutex_lock(&S.lock);
    int have = i >= 0 && i < S.nlog && i < 16;
    if (have) *out = S.log[i];
    pthread_mutex_unlock(&S.lock);
    return have;
}

/* The injected error for op, if one is due (call with the lock held). */
static int injected(int op) {
    if (!S.fail_times[op]) return OK;
    if (S.fail_times[op] > 0) S.fail_times[op]--;
    return S.fail_code[op];
}

static int env_int(const char *name, int def) {
    const char *v = getenv(name);
    return v && *v ? atoi(v) : def;
}

/* FAKE_CUDA_FAIL="load=invalid_ptx,launch=launch_failed" */
static void read_fail_env(void) {
    const char *v = getenv("FAKE_CUDA_FAIL");
    char buf[256], *save = NULL;
    if (!v) return;
    snprintf(buf, sizeof buf, "%s", v);
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(t, '=');
        if (!eq) continue;
        *eq = 0;
        for (int i = 0; i < NOPS; i++)
            if (!strcmp(t, op_names[i])) {
                S.fail_code[i] = error_code(eq + 1);
                S.fail_times[i] = -1;
            }
    }
}

EXPORT CUresult cuInit(unsigned flags) {
    pthread_mutex_lock(&S.lock);
    S.sm = env_int("FAKE_CUDA_SM", 80);
    S.devices = env_int("FAKE_CUDA_DEVICES", 1);
    S.ptx_max = env_int("FAKE_CUDA_PTX_MAX", 88);
    S.compile_us = env_int("FAKE_CUDA_COMPILE_US", 0);
    read_fail_env();
    S.c.inits++;
    int r = flags ? E_INVALID_VALUE : injected(OP_INIT);
    if (r == OK && S.devices == 0) r = E_NO_DEVICE;
    S.initialized = r == OK;
    pthread_mutex_unlock(&S.lock);
    return r;
}

EXPORT CUresult cuDriverGetVersion(int *v) {
    if (!v) return E_INVALID_VALUE;
    *v = env_int("FAKE_CUDA_DRIVER_VERSION", 13000);
    return OK;
}

EXPORT CUresult cuDeviceGetCount(int *n) {
    if (!S.initialized) return E_NOT_INITIALIZED;
    if (!n) return E_INVALID_VALUE;
    *n = S.devices;
    return OK;
}

EXPORT CUresult cuDeviceGet(CUdevice *d, int ordinal) {
    if (!S.initialized) return E_NOT_INITIALIZED;
    if (!d) return E_INVALID_VALUE;
    if (ordinal < 0 || ordinal >= S.devices) return E_INVALID_DEVICE;
    *d = ordinal;
    return OK;
}

EXPORT CUresult cuDeviceGetAttribute(int *v, int attr, CUdevice d) {
    if (!S.initialized) return E_NOT_INITIALIZED;
    if (!v || d < 0 || d >= S.devices) return E_INVALID_VALUE;
    switch (attr) {
    case 1: *v = 1024; break;                       /* max threads per block */
    case 2: case 3: *v = 1024; break;               /* max block x, y */
    case 4: *v = 64; break;                         /* max block z */
    case 5: *v = 2147483647; break;                 /* max grid x */
    case 6: case 7: *v = 65535; break;              /* max grid y, z */
    case 8: *v = 48 << 10; break;                   /* shared memory per block */
    case 10: *v = 32; break;                        /* warp size */
    case 16: *v = 108; break;                       /* multiprocessors */
    case 38: *v = 40 << 20; break;                  /* L2 cache bytes */
    case 75: *v = S.sm / 10; break;                 /* compute capability */
    case 76: *v = S.sm % 10; break;
    case 97: *v = (int)optin_smem(S.sm); break;     /* optin shared memory per block */
    default: return E_INVALID_VALUE;
    }
    return OK;
}

EXPORT CUresult cuDeviceGetName(char *name, int len, CUdevice d) {
    if (!S.initialized) return E_NOT_INITIALIZED;
    if (!name || len <= 0 || d < 0 || d >= S.devices) return E_INVALID_VALUE;
    snprintf(name, (size_t)len, "Fake CUDA device sm_%d", S.sm);
    return OK;
}

EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice d) {
    if (!S.initialized) return E_NOT_INITIALIZED;
    if (!bytes || d < 0 || d >= S.devices) return E_INVALID_VALUE;
    *bytes = (size_t)16 << 30;
    return OK;
}

EXPORT CUresult cuDevicePrimaryCtxRetain(void **ctx, CUdevice d) {
    if (!S.initialized) return E_NOT_INITIALIZED;
    if (!ctx || d < 0 || d >= S.devices) return E_INVALID_VALUE;
    *ctx = &the_context;
    pthread_mutex_lock(&S.lock);
    S.c.ctx_retains++;
    pthread_mutex_unlock(&S.lock);
    return OK;
}

EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d) {
    if (d < 0 || d >= S.devices) return E_INVALID_DEVICE;
    pthread_mutex_lock(&S.lock);
    int r = S.c.ctx_releases < S.c.ctx_retains ? OK : E_INVALID_CONTEXT;
    if (r == OK) S.c.ctx_releases++;
    pthread_mutex_unlock(&S.lock);
    return r;
}

EXPORT CUresult cuCtxGetCurrent(void **ctx) {
    if (!ctx) return E_INVALID_VALUE;
    *ctx = current_ctx;
    return OK;
}

EXPORT CUresult cuCtxSetCurrent(void *ctx) {
    if (ctx && ctx != &the_context) return E_INVALID_CONTEXT;
    current_ctx = ctx;
    return OK;
}

EXPORT CUresult cuCtxSynchronize(void) {
    return current_ctx ? OK : E_INVALID_CONTEXT;
}

/* ---- modules ---- */

static void jit_log(char *log, size_t cap, const char *msg) {
    if (log && cap) snprintf(log, cap, "%s", msg);
}

/* Parameter sizes of one ".entry name( ... )" header starting at p. */
static void parse_params(const char *p, fentry *e) {
    const char *end = strchr(p, ')');
    while (end && (p = strstr(p, ".param")) && p < end && e->nparams < FAKE_CUDA_MAX_PARAMS) {
        p += 6;
        unsigned size = 0;
        const char *t = p;
        while (*t == ' ' || *t == '\t') t++;
        if (!strncmp(t, ".align", 6)) { /* .param .align N .b8 name[SIZE] */
            const char *br = strchr(t, '[');
            size = br && br < end ? (unsigned)atoi(br + 1) : 0;
        } else if (t[0] == '.') {
            size = (unsigned)atoi(t + 2) / 8; /* .u64 .b32 .f32 ... */
        }
        e->size[e->nparams++] = size;
    }
}

static int parse_ptx(const char *ptx, fmodule *m, char *log, size_t cap, int ptx_max) {
    const char *v = strstr(ptx, ".version "), *t = strstr(ptx, ".target ");
    char msg[256];
    if (!v || !t) return jit_log(log, cap, "ptxas fatal: missing .version or .target"), E_INVALID_PTX;
    int major = 0, minor = 0;
    sscanf(v + 9, "%d.%d", &major, &minor);
    if (major * 10 + minor > ptx_max) {
        snprintf(msg, sizeof msg, "ptxas fatal: Unsupported .version %d.%d; current version is '%d.%d'", major, minor,
                 ptx_max / 10, ptx_max % 10);
        return jit_log(log, cap, msg), E_UNSUPPORTED_PTX;
    }
    for (const char *p = t; (p = strstr(p, "sm_")) && p < strchr(t, '\n'); p += 3)
        if (atoi(p + 3) > m->sm) m->sm = atoi(p + 3);
    if (m->sm > S.sm) {
        snprintf(msg, sizeof msg, "ptxas fatal: SM version specified by .target (sm_%d) is higher than default SM "
                 "version assumed (sm_%d)", m->sm, S.sm);
        return jit_log(log, cap, msg), E_INVALID_PTX;
    }
    for (const char *p = ptx; (p = strstr(p, ".entry ")) && m->nentries < 16;) {
        p += 7;
        fentry *e = &m->entries[m->nentries++];
        size_t n = 0;
        while (isalnum((unsigned char)p[n]) || p[n] == '_' || p[n] == '$') n++;
        snprintf(e->name, sizeof e->name, "%.*s", (int)n, p);
        parse_params(p + n, e);
    }
    return m->nentries ? OK : (jit_log(log, cap, "ptxas: module has no .entry"), E_INVALID_PTX);
}

static uint64_t rd(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* A PTX compile's time (FAKE_CUDA_COMPILE_US), spent outside the lock, and how many run at once. */
static void compile_time(void) {
    pthread_mutex_lock(&S.lock);
    int us = S.compile_us;
    if (us > 0 && ++S.compiling > S.c.max_concurrent_compiles) S.c.max_concurrent_compiles = S.compiling;
    pthread_mutex_unlock(&S.lock);
    if (us <= 0) return;
    struct timespec t = {us / 1000000, (long)(us % 1000000) * 1000};
    nanosleep(&t, NULL);
    pthread_mutex_lock(&S.lock);
    S.compiling--;
    pthread_mutex_unlock(&S.lock);
}

/* A cubin: ELF64 with the SM in e_flags; each ".text.<name>" section is an entry (its
 * parameter sizes are not recorded), and a ".fake.ptx" section (the linker's output) holds the
 * PTX it was compiled from, whose entries and parameter sizes it has. */
static int parse_cubin(const uint8_t *img, fmodule *m, char *log, size_t cap) {
    uint32_t flags = (uint32_t)rd(img + 48, 4);
    int sm = (int)((flags >> 8) & 0xff);
    if (sm < 30) sm = (int)(flags & 0xff);
    m->cubin = 1;
    m->sm = sm;
    if (sm / 10 != S.sm / 10 || sm > S.sm) {
        char msg[128];
        snprintf(msg, sizeof msg, "cubin for sm_%d cannot run on sm_%d", sm, S.sm);
        return jit_log(log, cap, msg), E_NO_BINARY;
    }
    uint64_t shoff = rd(img + 40, 8), shnum = rd(img + 60, 2), shstrndx = rd(img + 62, 2);
    const uint8_t *strsh = img + shoff + shstrndx * 64;
    const char *strtab = (const char *)img + rd(strsh + 24, 8);
    uint64_t strsize = rd(strsh + 32, 8);
    for (uint64_t i = 0; i < shnum && m->nentries < 16; i++) {
        uint64_t off = rd(img + shoff + i * 64, 4);
        if (off < strsize && !strcmp(strtab + off, ".fake.ptx")) {
            const uint8_t *sh = img + shoff + i * 64;
            char *ptx = strndup((const char *)img + rd(sh + 24, 8), (size_t)rd(sh + 32, 8));
            int r = ptx ? parse_ptx(ptx, m, log, cap, 1000) : E_OOM;
            free(ptx);
            m->sm = sm;
            if (r != OK) return r;
            continue;
        }
        if (off >= strsize || strncmp(strtab + off, ".text.", 6) != 0) continue;
        fentry *e = &m->entries[m->nentries++];
        snprintf(e->name, sizeof e->name, "%s", strtab + off + 6);
        e->nparams = -1;
    }
    return m->nentries ? OK : (jit_log(log, cap, "cubin has no kernels"), E_INVALID_IMAGE);
}

/* The linker's output for sm: ELF64, e_flags naming sm, sections "", ".shstrtab", ".fake.ptx" (malloc'd). */
static uint8_t *build_cubin(int sm, const char *ptx, size_t len, size_t *size) {
    static const char names[] = "\0.shstrtab\0.fake.ptx"; /* offsets 1 and 11 */
    size_t nl = sizeof names, ptx_off = 64 + nl, shoff = (ptx_off + len + 7) & ~(size_t)7;
    *size = shoff + 3 * 64;
    uint8_t *b = calloc(1, *size);
    if (!b) return NULL;
    memcpy(b, "\177ELF", 4);
    b[4] = 2, b[5] = 1, b[6] = 1, b[7] = 65;
    unsigned flags = (unsigned)sm << 8;
    memcpy(b + 48, &flags, 4);
    memcpy(b + 40, &shoff, 8);
    b[58] = 64, b[60] = 3, b[62] = 1; /* shentsize, shnum, shstrndx */
    memcpy(b + 64, names, nl);
    memcpy(b + ptx_off, ptx, len);
    uint8_t *sh1 = b + shoff + 64, *sh2 = b + shoff + 128;
    unsigned name1 = 1, name2 = 11;
    size_t off1 = 64;
    memcpy(sh1, &name1, 4), memcpy(sh1 + 24, &off1, 8), memcpy(sh1 + 32, &nl, 8);
    memcpy(sh2, &name2, 4), memcpy(sh2 + 24, &ptx_off, 8), memcpy(sh2 + 32, &len, 8);
    return b;
}

EXPORT CUresult cuModuleLoadDataEx(void **mod, const void *image, unsigned nopts, int *opts, void **vals) {
    char *elog = NULL;
    size_t ecap = 0;
    if (!current_ctx) return E_INVALID_CONTEXT;
    if (!mod || !image || (nopts && (!opts || !vals))) return E_INVALID_VALUE;
    for (unsigned i = 0; i < nopts; i++) {
        if (opts[i] == 5) elog = vals[i];
        if (opts[i] == 6) ecap = (size_t)(uintptr_t)vals[i];
    }
    fmodule *m = calloc(1, sizeof *m);
    if (!m) return E_OOM;
    int is_cubin = memcmp(image, "\177ELF", 4) == 0;
    if (!is_cubin) compile_time();
    pthread_mutex_lock(&S.lock);
    int r = injected(OP_LOAD);
    if (r == E_INVALID_PTX) jit_log(elog, ecap, "ptxas application ptx input, line 1; error   : injected failure");
    const uint8_t *img = image;
    if (r == OK) r = is_cubin ? parse_cubin(img, m, elog, ecap) : parse_ptx(image, m, elog, ecap, S.ptx_max);
    for (int i = 0; r == OK && i < m->nentries; i++) m->entries[i].mod = m;
    if (r == OK) {
        m->next = S.modules;
        S.modules = m;
        S.c.loads++;
        S.c.live_modules++;
        if (is_cubin) S.c.cubin_loads++;
        else S.c.ptx_compiles++;
    } else {
        S.c.load_failures++;
        free(m);
        m = NULL;
    }
    pthread_mutex_unlock(&S.lock);
    *mod = m;
    return r;
}

/* ---- the linker: one PTX module in, the cubin for the device out ---- */

typedef struct flink {
    char *elog;
    size_t ecap;
    char *ptx;
    size_t ptx_len;
    uint8_t *cubin;
    size_t cubin_len;
} flink;

EXPORT CUresult cuLinkCreate_v2(unsigned nopts, int *opts, void **vals, void **state) {
    if (!current_ctx) return E_INVALID_CONTEXT;
    if (!state || (nopts && (!opts || !vals))) return E_INVALID_VALUE;
    flink *l = calloc(1, sizeof *l);
    if (!l) return E_OOM;
    for (unsigned i = 0; i < nopts; i++) {
        if (opts[i] == 5) l->elog = vals[i];
        if (opts[i] == 6) l->ecap = (size_t)(uintptr_t)vals[i];
    }
    pthread_mutex_lock(&S.lock);
    int r = injected(OP_LINK);
    if (r == OK) S.c.link_creates++, S.c.live_links++;
    pthread_mutex_unlock(&S.lock);
    if (r != OK) free(l), l = NULL;
    *state = l;
    return r;
}

EXPORT CUresult cuLinkAddData_v2(void *state, int type, void *data, size_t size, const char *name, unsigned nopts,
                                 int *opts, void **vals) {
    (void)name;
    flink *l = state;
    if (!l || !data || !size || (nopts && (!opts || !vals))) return E_INVALID_VALUE;
    if (type != 1 || l->ptx) return E_INVALID_VALUE; /* CU_JIT_INPUT_PTX; kiln adds one module */
    char *ptx = strndup(data, size);
    fmodule *m = calloc(1, sizeof *m);
    if (!ptx || !m) return free(ptx), free(m), E_OOM;
    compile_time();
    pthread_mutex_lock(&S.lock);
    int r = parse_ptx(ptx, m, l->elog, l->ecap, S.ptx_max);
    if (r == OK) S.c.link_adds++, S.c.ptx_compiles++;
    pthread_mutex_unlock(&S.lock);
    free(m);
    if (r != OK) return free(ptx), r;
    l->ptx = ptx;
    l->ptx_len = strlen(ptx) + 1;
    return OK;
}

EXPORT CUresult cuLinkComplete(void *state, void **cubin, size_t *size) {
    flink *l = state;
    if (!l || !cubin || !size || !l->ptx) return E_INVALID_VALUE;
    pthread_mutex_lock(&S.lock);
    int sm = S.sm;
    pthread_mutex_unlock(&S.lock);
    free(l->cubin);
    if (!(l->cubin = build_cubin(sm, l->ptx, l->ptx_len, &l->cubin_len))) return E_OOM;
    *cubin = l->cubin;
    *size = l->cubin_len;
    pthread_mutex_lock(&S.lock);
    S.c.link_completes++;
    pthread_mutex_unlock(&S.lock);
    return OK;
}

EXPORT CUresult cuLinkDestroy(void *state) {
    flink *l = state;
    if (!l) return E_INVALID_HANDLE;
    free(l->ptx);
    free(l->cubin);
    free(l);
    pthread_mutex_lock(&S.lock);
    S.c.link_destroys++;
    S.c.live_links--;
    pthread_mutex_unlock(&S.lock);
    return OK;
}

EXPORT CUresult cuModuleUnload(void *mod) {
    pthread_mutex_lock(&S.lock);
    fmodule **pp = &S.modules;
    while (*pp && *pp != mod) pp = &(*pp)->next;
    int r = *pp ? OK : E_INVALID_HANDLE;
    if (*pp) {
        *pp = ((fmodule *)mod)->next;
        free(mod);
        S.c.unloads++;
        S.c.live_modules--;
    }
    pthread_mutex_unlock(&S.lock);
    return r;
}

/* A function handle is (module, entry index) packed into an fentry pointer. */
EXPORT CUresult cuModuleGetFunction(void **f, void *mod, const char *name) {
    if (!f || !mod || !name) return E_INVALID_VALUE;
    pthread_mutex_lock(&S.lock);
    fmodule *m = mod;
    int r = E_NOT_FOUND;
    S.c.get_functions++;
    for (int i = 0; i < m->nentries; i++)
        if (!strcmp(m->entries[i].name, name)) *f = &m->entries[i], r = OK;
    pthread_mutex_unlock(&S.lock);
    return r;
}

static fentry *find_function(void *f) {
    for (fmodule *m = S.modules; m; m = m->next)
        for (int i = 0; i < m->nentries; i++)
            if (&m->entries[i] == f) return f;
    return NULL;
}

EXPORT CUresult cuFuncSetAttribute(void *f, int attr, int value) {
    pthread_mutex_lock(&S.lock);
    fentry *e = find_function(f);
    int r = !e ? E_INVALID_HANDLE : attr != 8 || value < 0 || (unsigned)value > optin_smem(S.sm) ? E_INVALID_VALUE : OK;
    if (r == OK) {
        e->max_dyn_smem = value;
        S.c.set_attributes++;
    }
    pthread_mutex_unlock(&S.lock);
    return r;
}

/* Checks the launch like the driver would and records it. */
static int check_launch(fentry *e, const unsigned g[3], const unsigned b[3], unsigned smem, void **params) {
    static const unsigned gmax[3] = {2147483647u, 65535u, 65535u}, bmax[3] = {1024, 1024, 64};
    for (int i = 0; i < 3; i++)
        if (!g[i] || g[i] > gmax[i] || !b[i] || b[i] > bmax[i]) return E_INVALID_VALUE;
    if ((uint64_t)b[0] * b[1] * b[2] > 1024) return E_INVALID_VALUE;
    unsigned limit = e->max_dyn_smem > 48 << 10 ? (unsigned)e->max_dyn_smem : 48u << 10;
    if (smem > limit) return E_INVALID_VALUE;
    if (e->nparams > 0 && !params) return E_INVALID_VALUE;
    fake_cuda_launch *l = &S.last;
    memset(l, 0, sizeof *l);
    snprintf(l->entry, sizeof l->entry, "%s", e->name);
    memcpy(l->grid, g, sizeof l->grid);
    memcpy(l->block, b, sizeof l->block);
    l->smem = smem;
    l->loaded_sm = e->mod->sm;
    l->cubin = e->mod->cubin;
    l->nparams = e->nparams;
    for (int i = 0; i < e->nparams; i++) {
        l->param_size[i] = e->size[i];
        if (e->size[i] <= 8) memcpy(&l->param[i], params[i], e->size[i]);
        else if (e->size[i] == 128 && l->ntmaps < FAKE_CUDA_MAX_TMAPS) {
            l->param[i] = (uint64_t)l->ntmaps;
            memcpy(l->tmap[l->ntmaps++], params[i], 128);
        }
    }
    S.have_launch = 1;
    if (S.nlog < 16) S.log[S.nlog] = *l;
    S.nlog++;
    return OK;
}

EXPORT CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                               unsigned smem, void *stream, void **params, void **extra) {
    (void)stream;
    if (!current_ctx) return E_INVALID_CONTEXT;
    if (extra) return E_INVALID_VALUE;
    const unsigned g[3] = {gx, gy, gz}, b[3] = {bx, by, bz};
    pthread_mutex_lock(&S.lock);
    fentry *e = find_function(f);
    int r = e ? injected(OP_LAUNCH) : E_INVALID_HANDLE;
    if (r == OK) r = check_launch(e, g, b, smem, params);
    if (r == OK) S.c.launches++;
    else S.c.launch_failures++;
    pthread_mutex_unlock(&S.lock);
    return r;
}

/* ---- tensor maps: kiln's record of the arguments, checked as the driver documents them ---- */

#ifndef FAKE_CUDA_NO_TENSOR_MAP
EXPORT CUresult cuTensorMapEncodeTiled(void *map, int type, unsigned rank, void *base, const unsigned long long *dims,
                                       const unsigned long long *strides, const unsigned *box, const unsigned *elem_strides,
                                       int interleave, int swizzle, int l2, int oob) {
    kiln_tensor_map m;
    memset(&m, 0, sizeof m);
    char why[200];
    int bad = !map || (uintptr_t)map % KILN_TMAP_ALIGN || rank < 1 || rank > KILN_TMAP_RANK_MAX || !dims || !box ||
              !elem_strides || (rank > 1 && !strides) || interleave != 0 || l2 < 0 || l2 > 3 || oob < 0 || oob > 1 ||
              swizzle < 0 || type < 0;
    for (unsigned i = 0; !bad && i < rank; i++) bad = elem_strides[i] != 1;
    if (!bad) {
        m.magic = KILN_TMAP_MAGIC;
        m.data_type = (uint32_t)type;
        m.elem_bytes = kiln_tensor_map_type_bytes(m.data_type);
        m.rank = rank;
        m.swizzle = (uint32_t)swizzle;
        m.base = (uint64_t)(uintptr_t)base;
        m.oob_nan = (uint32_t)oob;
        for (unsigned i = 0; i < rank; i++) {
            m.dims[i] = dims[i];
            m.box[i] = box[i];
            if (i) m.strides[i - 1] = strides[i - 1];
        }
        bad = kiln_tensor_map_invalid(&m, why, sizeof why) != 0;
    }
    pthread_mutex_lock(&S.lock);
    if (bad) S.c.tmap_failures++;
    else S.c.tmap_encodes++;
    pthread_mutex_unlock(&S.lock);
    if (bad) return E_INVALID_VALUE;
    memcpy(map, &m, sizeof m);
    return OK;
}
#endif

/* ---- memory: host memory stands in for device memory ---- */

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t size) {
    if (!current_ctx) return E_INVALID_CONTEXT;
    if (!p || !size) return E_INVALID_VALUE;
    pthread_mutex_lock(&S.lock);
    int r = injected(OP_ALLOC);
    falloc *a = r == OK ? calloc(1, sizeof *a) : NULL;
    if (a && !(a->p = aligned_alloc(256, (size + 255) & ~(size_t)255))) {
        free(a);
        a = NULL;
    }
    if (r == OK && !a) r = E_OOM;
    if (a) {
        a->size = size;
        a->next = S.allocs;
        S.allocs = a;
        S.c.allocs++;
        S.c.live_allocs++;
        *p = (CUdeviceptr)(uintptr_t)a->p;
    }
    pthread_mutex_unlock(&S.lock);
    return r;
}

EXPORT CUresult cuMemFree_v2(CUdeviceptr p) {
    pthread_mutex_lock(&S.lock);
    falloc **pp = &S.allocs;
    while (*pp && (uintptr_t)(*pp)->p != p) pp = &(*pp)->next;
    falloc *a = *pp;
    if (a) {
        *pp = a->next;
        free(a->p);
        free(a);
        S.c.frees++;
        S.c.live_allocs--;
    }
    pthread_mutex_unlock(&S.lock);
    return a ? OK : E_INVALID_VALUE;
}

/* 1 when [p, p+n) lies inside one allocation. */
static int in_alloc(CUdeviceptr p, size_t n) {
    for (falloc *a = S.allocs; a; a = a->next)
        if (p >= (uintptr_t)a->p && p + n <= (uintptr_t)a->p + a->size) return 1;
    return 0;
}

EXPORT CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n) {
    pthread_mutex_lock(&S.lock);
    int ok = current_ctx && src && in_alloc(dst, n);
    pthread_mutex_unlock(&S.lock);
    if (ok) memcpy((void *)(uintptr_t)dst, src, n);
    return ok ? OK : current_ctx ? E_INVALID_VALUE : E_INVALID_CONTEXT;
}

EXPORT CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n) {
    pthread_mutex_lock(&S.lock);
    int ok = current_ctx && dst && in_alloc(src, n);
    pthread_mutex_unlock(&S.lock);
    if (ok) memcpy(dst, (const void *)(uintptr_t)src, n);
    return ok ? OK : current_ctx ? E_INVALID_VALUE : E_INVALID_CONTEXT;
}

EXPORT CUresult cuGetErrorName(CUresult r, const char **s) {
    for (size_t i = 0; s && i < sizeof errors / sizeof errors[0]; i++)
        if (errors[i].code == r) return *s = errors[i].name, OK;
    return E_INVALID_VALUE;
}

EXPORT CUresult cuGetErrorString(CUresult r, const char **s) {
    for (size_t i = 0; s && i < sizeof errors / sizeof errors[0]; i++)
        if (errors[i].code == r) return *s = errors[i].text, OK;
    return E_INVALID_VALUE;
}

/* ---- what the GPU check kit times with: events (host clock), device copies and memset ---- */

#include <time.h>

typedef struct fevent {
    double ms;
    int recorded;
} fevent;

EXPORT CUresult cuEventCreate(void **ev, unsigned flags) {
    (void)flags;
    if (!current_ctx) return E_INVALID_CONTEXT;
    if (!ev || !(*ev = calloc(1, sizeof(fevent)))) return ev ? E_OOM : E_INVALID_VALUE;
    return OK;
}

EXPORT CUresult cuEventDestroy_v2(void *ev) {
    free(ev);
    return OK;
}

EXPORT CUresult cuEventRecord(void *ev, void *stream) {
    (void)stream;
    if (!ev) return E_INVALID_HANDLE;
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    ((fevent *)ev)->ms = (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
    ((fevent *)ev)->recorded = 1;
    return OK;
}

EXPORT CUresult cuEventSynchronize(void *ev) { return ev ? OK : E_INVALID_HANDLE; }

EXPORT CUresult cuEventElapsedTime(float *ms, void *start, void *end) {
    if (!ms || !start || !end) return E_INVALID_HANDLE;
    if (!((fevent *)start)->recorded || !((fevent *)end)->recorded) return E_INVALID_HANDLE;
    *ms = (float)(((fevent *)end)->ms - ((fevent *)start)->ms);
    return OK;
}

EXPORT CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n) {
    pthread_mutex_lock(&S.lock);
    int ok = current_ctx && in_alloc(dst, n) && in_alloc(src, n);
    pthread_mutex_unlock(&S.lock);
    if (ok) memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n);
    return ok ? OK : current_ctx ? E_INVALID_VALUE : E_INVALID_CONTEXT;
}

EXPORT CUresult cuMemsetD8_v2(CUdeviceptr dst, unsigned char v, size_t n) {
    pthread_mutex_lock(&S.lock);
    int ok = current_ctx && in_alloc(dst, n);
    pthread_mutex_unlock(&S.lock);
    if (ok) memset((void *)(uintptr_t)dst, v, n);
    return ok ? OK : current_ctx ? E_INVALID_VALUE : E_INVALID_CONTEXT;
}
