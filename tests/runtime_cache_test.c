/* tests/runtime_cache_test.c - the disk cache as the user's own, the driver's cubins in it, and prepare; stand-in generator, fake driver.
 *
 * Needs only libkiln_rt: the generator here hands out small PTX modules (fake_cuda_ptx), so the test
 * builds and runs fast, also under ThreadSanitizer (make TSAN=1 build/tsan/tests/runtime_cache_test).
 * Tests run as root on the build machines, which is the case that matters most: root may write
 * anywhere, so only the ownership checks keep another user's files out. */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "fake_cuda/fake_cuda.h"
#include "kiln/runtime.h"
#include "rt.h" /* rt_disk_write: a sound cubin entry the driver refuses */

#define OTHER_UID 4242 /* a user that is not us */

static fake_cuda_api fake;
static char root[256];

/* ---- a stand-in generator: PTX with a kiln.meta block, one module per spec ---- */

static atomic_int generated;

/* Specs with "gate=1" wait in the generator until the gate opens (prepare's background tests). */
static pthread_mutex_t gate_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cond = PTHREAD_COND_INITIALIZER;
static int gate_open = 1, gate_waiting;

static void gate_set(int open) {
    pthread_mutex_lock(&gate_lock);
    gate_open = open;
    pthread_cond_broadcast(&gate_cond);
    pthread_mutex_unlock(&gate_lock);
}

static int gate_waiters(void) {
    pthread_mutex_lock(&gate_lock);
    int n = gate_waiting;
    pthread_mutex_unlock(&gate_lock);
    return n;
}

static kiln_status g_canonical(const char *spec, char *buf, size_t size, kiln_error *err) {
    (void)err;
    snprintf(buf, size, "%s", spec);
    return KILN_OK;
}

static kiln_status g_template_hash(const char *family, uint8_t out[16], kiln_error *err) {
    (void)err;
    memset(out, 0, 16);
    memcpy(out, family, strlen(family) < 16 ? strlen(family) : 16);
    return KILN_OK;
}

static kiln_status g_generate(const char *spec, int sm, char **ptx, size_t *len, kiln_error *err) {
    char entry[64];
    unsigned h = 5381;
    for (const char *p = spec; *p; p++) h = h * 33 + (unsigned char)*p;
    snprintf(entry, sizeof entry, "kern_%08x", h);
    if (strstr(spec, "gate=1")) {
        pthread_mutex_lock(&gate_lock);
        gate_waiting++;
        while (!gate_open) pthread_cond_wait(&gate_cond, &gate_lock);
        gate_waiting--;
        pthread_mutex_unlock(&gate_lock);
    }
    if (strstr(spec, "bad=1")) return kiln_fail(err, KILN_EINVAL, "stand-in generator: bad=1 is not valid");
    kiln_kernel_meta m = fake_cuda_meta(spec, entry, sm);
    char *buf = malloc(8192);
    if (!buf) return kiln_fail(err, KILN_ENOMEM, "out of memory");
    *len = (size_t)fake_cuda_ptx(&m, sm, buf, 8192);
    *ptx = buf;
    atomic_fetch_add(&generated, 1);
    return KILN_OK;
}

static int g_targets(int *sms, int cap) {
    static const int t[] = {75, 80, 86, 90};
    int n = 0;
    for (; n < cap && n < 4; n++) sms[n] = t[n];
    return n;
}

static const kiln_rt_generator stand_in = {"stand-in generator 1", g_canonical, g_template_hash, g_generate, g_targets,
                                           NULL}; /* no arch-specific paths */

/* ---- helpers ---- */

typedef struct warnings {
    int count;
    char first[1024];
} warnings;

static void on_warning(void *user, const char *msg) {
    warnings *w = user;
    if (w->count++ == 0) snprintf(w->first, sizeof w->first, "%s", msg);
}

/* A runtime on the fake device with its disk cache in dir (NULL: memory only, never ~/.cache). */
static kiln_rt *open_rt(const char *dir, warnings *w) {
    kiln_rt_options o = {.cache_dir = dir, .no_disk_cache = !dir, .on_warning = on_warning, .warning_user = w};
    kiln_rt *rt = NULL;
    kiln_error e;
    if (kiln_rt_create(&rt, &o, &e) != KILN_OK) printf("  cannot create runtime: %s\n", e.msg);
    return rt;
}

static kiln_rt_stats stats(kiln_rt *rt) {
    kiln_rt_stats s;
    kiln_rt_get_stats(rt, &s);
    return s;
}

static void path_of(char *out, size_t size, const char *sub) {
    snprintf(out, size, "%s/%s", root, sub);
}

/* Number of files in dir whose name ends in ext; the last one's path into path (may be NULL). */
static int files(const char *dir, const char *ext, char *path, size_t size) {
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) {
        size_t l = strlen(e->d_name), x = strlen(ext);
        if (l <= x || strcmp(e->d_name + l - x, ext) != 0) continue;
        n++;
        if (path) snprintf(path, size, "%s/%s", dir, e->d_name);
    }
    if (d) closedir(d);
    return n;
}

static unsigned mode_of(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? (unsigned)(st.st_mode & 07777) : 0xffffu;
}

static long owner_of(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? (long)st.st_uid : -1;
}

#define SPEC_A "layernorm x=bf16 hidden=1024"
#define SPEC_B "rmsnorm x=f16 hidden=4096"

/* One get of spec in a fresh runtime on dir; returns its stats (and the runtime's warnings in w). */
static kiln_rt_stats one_get(const char *dir, const char *spec, warnings *w, kiln_status *st) {
    kiln_rt *rt = open_rt(dir, w);
    kiln_kernel *k = NULL;
    kiln_error e = {0};
    kiln_rt_stats s = {0};
    *st = rt ? kiln_rt_get_kernel(rt, spec, &k, &e) : KILN_EINVAL;
    if (*st != KILN_OK) printf("  get '%s': %s\n", spec, e.msg);
    if (rt) s = stats(rt);
    kiln_rt_destroy(rt);
    return s;
}

/* ---- item 5: the cache is the user's own ---- */

static void test_modes(void) {
    TEST_BEGIN("cache: a new directory (and its parents) is created 0700, entries 0600, whatever the umask");
    char dir[512], parent[512], entry[1024];
    path_of(parent, sizeof parent, "modes");
    path_of(dir, sizeof dir, "modes/kiln");
    mode_t old = umask(0);
    warnings w = {0};
    kiln_status st;
    kiln_rt_stats s = one_get(dir, SPEC_A, &w, &st);
    umask(old);
    CHECK(st == KILN_OK && s.disk_writes == 1 && w.count == 0, "written: %d, %llu writes, %s", st,
          (unsigned long long)s.disk_writes, w.first);
    CHECK(mode_of(parent) == 0700 && mode_of(dir) == 0700, "directory modes %04o %04o", mode_of(parent), mode_of(dir));
    CHECK(files(dir, ".kcache", entry, sizeof entry) == 1 && mode_of(entry) == 0600, "entry mode %04o", mode_of(entry));
    s = one_get(dir, SPEC_A, &w, &st);
    CHECK(st == KILN_OK && s.disk_hits == 1 && s.generated == 0, "a second runtime loads it: %llu hits",
          (unsigned long long)s.disk_hits);
    TEST_END();
}

/* A runtime on dir refuses it: one warning containing want, memory only, kernels still load, nothing written. */
static void expect_refused(const char *dir, const char *want) {
    warnings w = {0};
    kiln_rt *rt = open_rt(dir, &w);
    kiln_kernel *k = NULL;
    kiln_error e = {0};
    int before = files(dir, ".kcache", NULL, 0);
    CHECK(rt && kiln_rt_cache_dir(rt) == NULL, "%s: memory only", dir);
    CHECK(w.count == 1 && strstr(w.first, want) && strstr(w.first, "memory only"), "%s: %d warning(s): %s", dir,
          w.count, w.first);
    CHECK(rt && kiln_rt_get_kernel(rt, SPEC_A, &k, &e) == KILN_OK, "kernels still load: %s", e.msg);
    CHECK(rt && stats(rt).disk_writes == 0 && files(dir, ".kcache", NULL, 0) == before, "nothing written there");
    kiln_rt_destroy(rt);
}

static void test_foreign_directory(void) {
    TEST_BEGIN("cache: a directory owned by another uid is refused (as root too): one warning, memory only");
    char dir[512];
    path_of(dir, sizeof dir, "theirs");
    CHECK(mkdir(dir, 0700) == 0 && chown(dir, OTHER_UID, OTHER_UID) == 0, "chown: %s", strerror(errno));
    char want[64];
    snprintf(want, sizeof want, "owned by uid %d", OTHER_UID);
    expect_refused(dir, want);
    /* another user's cache reached through a symlink of ours is still theirs */
    char link[512];
    path_of(link, sizeof link, "link-to-theirs");
    CHECK(symlink(dir, link) == 0, "symlink");
    expect_refused(link, want);
    TEST_END();

    TEST_BEGIN("cache: a directory writable by group or others is refused; go-w makes it usable");
    path_of(dir, sizeof dir, "open");
    CHECK(mkdir(dir, 0700) == 0 && chmod(dir, 0777) == 0, "mkdir");
    expect_refused(dir, "writable by others");
    chmod(dir, 0770);
    expect_refused(dir, "writable by its group");
    chmod(dir, 0755);
    warnings w = {0};
    kiln_status st;
    kiln_rt_stats s = one_get(dir, SPEC_A, &w, &st);
    CHECK(st == KILN_OK && w.count == 0 && s.disk_writes == 1, "0755 (made by an older kiln) is used: %s", w.first);
    TEST_END();

    TEST_BEGIN("cache: a directory below one another user could rename it out of is refused; below a sticky one it is used");
    char parent[512];
    path_of(parent, sizeof parent, "shared");
    path_of(dir, sizeof dir, "shared/kiln");
    CHECK(mkdir(parent, 0700) == 0 && chmod(parent, 0777) == 0 && mkdir(dir, 0700) == 0, "mkdir");
    expect_refused(dir, "above it is writable by others and not sticky");
    chmod(parent, 01777); /* as /tmp */
    w.count = 0;
    s = one_get(dir, SPEC_A, &w, &st);
    CHECK(st == KILN_OK && w.count == 0 && s.disk_writes == 1, "sticky parent: %s", w.first);
    chmod(parent, 0755);
    CHECK(chown(parent, OTHER_UID, OTHER_UID) == 0, "chown");
    expect_refused(dir, "neither this user nor root");
    TEST_END();

    TEST_BEGIN("cache: a symlink to a directory of ours is followed once; the checked real path is what is used");
    char real[512];
    path_of(real, sizeof real, "real");
    path_of(link, sizeof link, "link-to-real");
    CHECK(mkdir(real, 0700) == 0 && symlink(real, link) == 0, "mkdir");
    w.count = 0;
    kiln_rt *rt = open_rt(link, &w);
    CHECK(rt && kiln_rt_cache_dir(rt) && !strcmp(kiln_rt_cache_dir(rt), real) && w.count == 0, "cache dir %s",
          rt && kiln_rt_cache_dir(rt) ? kiln_rt_cache_dir(rt) : "(none)");
    kiln_rt_destroy(rt);
    TEST_END();
}

static void test_foreign_entries(void) {
    TEST_BEGIN("cache: an entry owned by another uid, or writable by others, is never loaded; it is replaced by ours");
    char dir[512], entry[1024];
    path_of(dir, sizeof dir, "entries");
    warnings w = {0};
    kiln_status st;
    one_get(dir, SPEC_B, &w, &st);
    CHECK(st == KILN_OK && files(dir, ".kcache", entry, sizeof entry) == 1, "one entry");
    static const char *const hows[] = {"owned by another uid", "mode 0666", "mode 0620", "a FIFO"};
    for (int i = 0; i < 4; i++) {
        /* the entry is a sound one (right header, key, checksum): only who may have written it is wrong */
        int ok = i == 0 ? chown(entry, OTHER_UID, OTHER_UID) == 0
               : i == 1 ? chmod(entry, 0666) == 0
               : i == 2 ? chmod(entry, 0620) == 0
                        : unlink(entry) == 0 && mkfifo(entry, 0600) == 0;
        CHECK(ok, "%s: set up: %s", hows[i], strerror(errno));
        int gen0 = atomic_load(&generated);
        kiln_rt_stats s = one_get(dir, SPEC_B, &w, &st);
        CHECK(st == KILN_OK && s.disk_hits == 0 && s.bad_entries == 1 && s.generated == 1 &&
                  atomic_load(&generated) == gen0 + 1,
              "%s: hits %llu, bad %llu, generated %llu", hows[i], (unsigned long long)s.disk_hits,
              (unsigned long long)s.bad_entries, (unsigned long long)s.generated);
        CHECK(owner_of(entry) == (long)geteuid() && mode_of(entry) == 0600, "%s: rewritten as ours: uid %ld mode %04o",
              hows[i], owner_of(entry), mode_of(entry));
        s = one_get(dir, SPEC_B, &w, &st);
        CHECK(st == KILN_OK && s.disk_hits == 1 && s.bad_entries == 0, "%s: then a hit", hows[i]);
    }
    CHECK(w.count == 0, "no warnings: %s", w.first);
    TEST_END();
}

/* ---- item 1: the driver's cubins in the disk cache ---- */

static fake_cuda_counts counts(void) {
    fake_cuda_counts c;
    fake.counters(&c);
    return c;
}

/* A fresh runtime on dir gets spec; *kind gets the loaded payload kind; stats and driver counts of that runtime. */
typedef struct load_result {
    kiln_status st;
    kiln_payload_kind kind;
    kiln_rt_stats s;
    fake_cuda_counts c;
    fake_cuda_launch l;
    char origin[32];
} load_result;

static load_result load_once(const char *dir, const char *spec, const void *bundle, size_t bundle_size) {
    load_result r = {.st = KILN_EINVAL};
    warnings w = {0};
    fake.reset();
    kiln_rt *rt = open_rt(dir, &w);
    kiln_kernel *k = NULL;
    kiln_error e = {0};
    if (rt && bundle) kiln_rt_add_bundle_memory(rt, bundle, bundle_size, &e);
    if (rt) r.st = kiln_rt_get_kernel(rt, spec, &k, &e);
    if (r.st != KILN_OK) printf("  get '%s': %s\n", spec, e.msg);
    if (k) {
        r.kind = kiln_kernel_payload_kind(k);
        snprintf(r.origin, sizeof r.origin, "%s", kiln_kernel_origin(k));
        kiln_arg args[3] = {{.ptr = 0}, {.i32 = 7}, {.f32 = 0.5f}};
        unsigned grid[3] = {2, 1, 1};
        if (kiln_kernel_launch(k, grid, args, 3, NULL, &e) != KILN_OK) printf("  launch: %s\n", e.msg);
        fake.last_launch(&r.l);
    }
    if (rt) r.s = stats(rt);
    if (w.count) printf("  warning: %s\n", w.first);
    kiln_rt_destroy(rt);
    r.c = counts();
    return r;
}

static void test_cubin_cache(void) {
    TEST_BEGIN("cubin: cold, PTX compiled once by the driver's linker, the cubin loaded and cached; warm, no compile");
    char dir[512];
    path_of(dir, sizeof dir, "cubin");
    load_result r = load_once(dir, SPEC_A, NULL, 0);
    CHECK(r.st == KILN_OK && r.kind == KILN_PAYLOAD_PTX && r.l.cubin && !strcmp(r.origin, "generated"),
          "cold: PTX picked, module from a cubin: kind %d from %s",
          r.kind, r.origin);
    CHECK(r.c.link_creates == 1 && r.c.link_adds == 1 && r.c.link_completes == 1 && r.c.link_destroys == 1 &&
              r.c.live_links == 0,
          "one link state, destroyed: %d %d %d %d live %d", r.c.link_creates, r.c.link_adds, r.c.link_completes,
          r.c.link_destroys, r.c.live_links);
    CHECK(r.c.ptx_compiles == 1 && r.c.cubin_loads == 1 && r.s.cubin_writes == 1 && r.s.disk_writes == 1,
          "compiled once, loaded as cubin: %d compiles, %d cubin loads, %llu cubin writes", r.c.ptx_compiles,
          r.c.cubin_loads, (unsigned long long)r.s.cubin_writes);
    CHECK(r.l.cubin && r.l.loaded_sm == 86 && r.l.nparams == 3 && r.l.param[1] == 7, "launched from the sm_86 cubin");
    char entry[1024];
    CHECK(files(dir, ".kcubin", entry, sizeof entry) == 1 && mode_of(entry) == 0600, "one cubin entry, mode %04o",
          mode_of(entry));
    r = load_once(dir, SPEC_A, NULL, 0);
    CHECK(r.st == KILN_OK && r.kind == KILN_PAYLOAD_PTX && r.l.cubin && r.s.disk_hits == 1 && r.s.cubin_hits == 1 &&
              r.s.generated == 0,
          "warm: disk %llu, cubin %llu", (unsigned long long)r.s.disk_hits, (unsigned long long)r.s.cubin_hits);
    CHECK(r.c.ptx_compiles == 0 && r.c.link_creates == 0 && r.c.cubin_loads == 1, "warm: no compile (%d), no link (%d)",
          r.c.ptx_compiles, r.c.link_creates);
    CHECK(r.l.cubin && r.l.nparams == 3 && r.l.param[1] == 7, "warm launch");
    TEST_END();

    TEST_BEGIN("cubin: a new driver version or another device misses (and compiles), the old entry stays usable");
    setenv("FAKE_CUDA_DRIVER_VERSION", "13010", 1);
    r = load_once(dir, SPEC_A, NULL, 0);
    CHECK(r.st == KILN_OK && r.s.disk_hits == 1 && r.s.cubin_hits == 0 && r.s.cubin_writes == 1 && r.c.ptx_compiles == 1,
          "driver 13010: PTX from disk, cubin compiled: hits %llu, writes %llu, compiles %d",
          (unsigned long long)r.s.cubin_hits, (unsigned long long)r.s.cubin_writes, r.c.ptx_compiles);
    CHECK(files(dir, ".kcubin", NULL, 0) == 2, "two cubin entries");
    unsetenv("FAKE_CUDA_DRIVER_VERSION");
    r = load_once(dir, SPEC_A, NULL, 0);
    CHECK(r.st == KILN_OK && r.s.cubin_hits == 1 && r.c.ptx_compiles == 0, "driver 13000 again: a hit");
    setenv("FAKE_CUDA_SM", "89", 1); /* same sm_86 PTX, another compute capability */
    r = load_once(dir, SPEC_A, NULL, 0);
    CHECK(r.st == KILN_OK && r.s.disk_hits == 1 && r.s.cubin_hits == 0 && r.c.ptx_compiles == 1 && r.l.loaded_sm == 89,
          "sm_89: compiled for it: hits %llu, compiles %d, sm %d", (unsigned long long)r.s.cubin_hits,
          r.c.ptx_compiles, r.l.loaded_sm);
    setenv("FAKE_CUDA_SM", "86", 1);
    TEST_END();
}

static void rewrite(const char *path, const char *how, const char *other) {
    FILE *f = fopen(path, "r+b");
    if (!f) return;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    if (!strcmp(how, "flip")) {
        fseek(f, size - 9, SEEK_SET);
        int c = fgetc(f);
        fseek(f, size - 9, SEEK_SET);
        fputc(c ^ 0x20, f);
    } else if (!strcmp(how, "truncate") && ftruncate(fileno(f), size / 2) != 0) {
        printf("  truncate failed\n");
    } else if (!strcmp(how, "empty") && ftruncate(fileno(f), 0) != 0) {
        printf("  truncate failed\n");
    }
    fclose(f);
    if (!strcmp(how, "foreign")) {
        char cmd[2200];
        snprintf(cmd, sizeof cmd, "cp %s %s", other, path);
        if (system(cmd) != 0) printf("  cp failed\n");
    }
}

static void test_cubin_bad(void) {
    TEST_BEGIN("cubin: a corrupt, truncated, empty or foreign cubin entry falls back to the PTX, is compiled and rewritten");
    char dir[512], entry[1024], other_dir[512], other[1024];
    path_of(dir, sizeof dir, "cubin-bad");
    path_of(other_dir, sizeof other_dir, "cubin-other");
    load_once(other_dir, SPEC_B, NULL, 0);
    CHECK(files(other_dir, ".kcubin", other, sizeof other) == 1, "another spec's cubin entry");
    load_once(dir, SPEC_A, NULL, 0);
    CHECK(files(dir, ".kcubin", entry, sizeof entry) == 1, "one cubin entry");
    static const char *const hows[] = {"flip", "truncate", "empty", "foreign", "owned by another uid", "a FIFO",
                                       "sound, but for sm_75"};
    for (int i = 0; i < 7; i++) {
        if (i < 4) rewrite(entry, hows[i], other);
        if (i == 4) CHECK(chown(entry, OTHER_UID, OTHER_UID) == 0, "chown");
        if (i == 5) CHECK(unlink(entry) == 0 && mkfifo(entry, 0600) == 0, "fifo");
        if (i == 6) { /* right header, key, spec and checksum around a cubin the driver refuses on this device */
            FILE *f = fopen(entry, "rb");
            uint8_t head[56];
            char spec[128] = "";
            rt_disk d = {.enabled = true};
            snprintf(d.dir, sizeof d.dir, "%s", dir);
            int ok = f && fread(head, 1, 56, f) == 56 && head[12] < sizeof spec && fread(spec, 1, head[12], f) == head[12];
            if (f) fclose(f);
            unsigned char cubin[1024];
            size_t n = fake_cuda_cubin(75, "kern", cubin, sizeof cubin);
            CHECK(ok && strstr(spec, "layernorm") && rt_disk_write(&d, RT_ENTRY_CUBIN, head + 24, spec, cubin, n) == 0,
                  "planted");
        }
        load_result r = load_once(dir, SPEC_A, NULL, 0);
        CHECK(r.st == KILN_OK && r.l.cubin && r.s.bad_entries == 1 && r.s.cubin_hits == 0 &&
                  r.s.cubin_writes == 1 && r.c.ptx_compiles == 1 && r.l.loaded_sm == 86,
              "%s: bad %llu, hits %llu, writes %llu, compiles %d, sm %d", hows[i], (unsigned long long)r.s.bad_entries,
              (unsigned long long)r.s.cubin_hits, (unsigned long long)r.s.cubin_writes, r.c.ptx_compiles, r.l.loaded_sm);
        CHECK(owner_of(entry) == (long)geteuid() && mode_of(entry) == 0600, "%s: rewritten as ours", hows[i]);
        r = load_once(dir, SPEC_A, NULL, 0);
        CHECK(r.st == KILN_OK && r.s.cubin_hits == 1 && r.s.bad_entries == 0 && r.c.ptx_compiles == 0,
              "%s: then a hit", hows[i]);
    }
    TEST_END();
}

static void test_cubin_fallbacks(void) {
    TEST_BEGIN("cubin: no linker (or it fails) loads the PTX as it is; memory-only runtimes link but keep nothing");
    char dir[512];
    path_of(dir, sizeof dir, "cubin-nolink");
    fake.reset();
    fake.fail("link", "not_supported", -1);
    warnings w = {0};
    kiln_rt *rt = open_rt(dir, &w);
    kiln_kernel *k = NULL;
    kiln_error e = {0};
    CHECK(rt && kiln_rt_get_kernel(rt, SPEC_A, &k, &e) == KILN_OK && kiln_kernel_payload_kind(k) == KILN_PAYLOAD_PTX,
          "PTX loaded: %s", e.msg);
    fake_cuda_counts c = counts();
    kiln_rt_stats s = rt ? stats(rt) : (kiln_rt_stats){0};
    CHECK(c.ptx_compiles == 1 && c.cubin_loads == 0 && c.live_links == 0 && s.cubin_writes == 0 && w.count == 0 &&
              files(dir, ".kcubin", NULL, 0) == 0,
          "compiles %d, live links %d, cubin writes %llu, warnings %d", c.ptx_compiles, c.live_links,
          (unsigned long long)s.cubin_writes, w.count);
    kiln_rt_destroy(rt);
    fake.reset();
    kiln_rt_options o = {.no_disk_cache = 1};
    CHECK(kiln_rt_create(&rt, &o, &e) == KILN_OK && kiln_rt_get_kernel(rt, SPEC_A, &k, &e) == KILN_OK &&
              kiln_kernel_payload_kind(k) == KILN_PAYLOAD_PTX,
          "memory only: %s", e.msg);
    c = counts();
    CHECK(c.link_creates == 1 && c.cubin_loads == 1 && c.ptx_compiles == 1 && c.live_links == 0 && rt &&
              stats(rt).cubin_writes == 0,
          "memory only: compiled by the linker, nothing written: links %d, cubin loads %d", c.link_creates,
          c.cubin_loads);
    kiln_rt_destroy(rt);
    setenv("KILN_DRIVER_LINK", "0", 1);
    load_result r = load_once(dir, SPEC_A, NULL, 0);
    CHECK(r.st == KILN_OK && r.kind == KILN_PAYLOAD_PTX && !r.l.cubin && r.c.link_creates == 0 && r.s.disk_hits == 1,
          "KILN_DRIVER_LINK=0: the PTX entry, loaded as PTX");
    unsetenv("KILN_DRIVER_LINK");
    TEST_END();
}

/* A bundle of SPEC_A: sm_80 PTX, and (cubin_sm > 0) a cubin for cubin_sm. */
static void *make_bundle(int cubin_sm, size_t *size) {
    kiln_bundle_writer *bw = NULL;
    void *data = NULL;
    char ptx[8192];
    kiln_kernel_meta m = fake_cuda_meta(SPEC_A, "bundled", 80);
    int n = fake_cuda_ptx(&m, 80, ptx, sizeof ptx);
    kiln_bundle_writer_create(&bw, "runtime_cache_test", NULL);
    kiln_bundle_writer_add(bw, &m, KILN_PAYLOAD_PTX, ptx, (size_t)n + 1, NULL);
    if (cubin_sm) {
        unsigned char cubin[1024];
        kiln_kernel_meta mc = m;
        mc.sm = cubin_sm;
        size_t cn = fake_cuda_cubin(cubin_sm, "bundled", cubin, sizeof cubin);
        kiln_bundle_writer_add(bw, &mc, KILN_PAYLOAD_CUBIN, cubin, cn, NULL);
    }
    kiln_bundle_writer_finish(bw, &data, size, NULL);
    kiln_bundle_writer_destroy(bw);
    return data;
}

static void test_cubin_bundles(void) {
    TEST_BEGIN("cubin: a bundle's cubin for the exact SM is loaded as it is; a bundle's PTX is compiled once, then cached");
    char dir[512];
    path_of(dir, sizeof dir, "cubin-bundle");
    size_t size = 0;
    void *exact = make_bundle(86, &size);
    load_result r = load_once(dir, SPEC_A, exact, size);
    CHECK(r.st == KILN_OK && r.kind == KILN_PAYLOAD_CUBIN && !strcmp(r.origin, "bundle") && r.c.ptx_compiles == 0 &&
              r.c.link_creates == 0 && r.s.cubin_writes == 0 && r.l.loaded_sm == 86,
          "exact cubin: compiles %d, links %d, from %s", r.c.ptx_compiles, r.c.link_creates, r.origin);
    free(exact);
    void *ptx_only = make_bundle(0, &size);
    r = load_once(dir, SPEC_A, ptx_only, size);
    CHECK(r.st == KILN_OK && r.kind == KILN_PAYLOAD_PTX && r.l.cubin && !strcmp(r.origin, "bundle") && r.c.ptx_compiles == 1 &&
              r.s.cubin_writes == 1 && r.l.loaded_sm == 86 && r.s.generated == 0,
          "bundle PTX: compiled by the linker: compiles %d, writes %llu", r.c.ptx_compiles,
          (unsigned long long)r.s.cubin_writes);
    r = load_once(dir, SPEC_A, ptx_only, size);
    CHECK(r.st == KILN_OK && r.kind == KILN_PAYLOAD_PTX && r.l.cubin && r.s.cubin_hits == 1 && r.c.ptx_compiles == 0,
          "second run: the cached cubin of the bundle's PTX (hits %llu, compiles %d)",
          (unsigned long long)r.s.cubin_hits, r.c.ptx_compiles);
    free(ptx_only);
    void *other_sm = make_bundle(80, &size); /* a cubin for another SM is never loaded */
    r = load_once(dir, SPEC_A, other_sm, size);
    CHECK(r.st == KILN_OK && r.s.cubin_hits == 1 && r.l.loaded_sm == 86, "sm_80 cubin skipped on sm_86");
    free(other_sm);
    TEST_END();
}

/* ---- item 2: prepare on every core, and in the background ---- */

static void test_prepare_parallel(void) {
    TEST_BEGIN("prepare: the driver compiles on several threads at once (a link state each), every state destroyed");
    char dir[512];
    path_of(dir, sizeof dir, "prepare");
    static const char *const specs[] = {"layernorm x=bf16 hidden=256", "layernorm x=bf16 hidden=512",
                                        "layernorm x=bf16 hidden=768", "layernorm x=bf16 hidden=1024",
                                        "rmsnorm x=bf16 hidden=256",   "rmsnorm x=bf16 hidden=512",
                                        "rmsnorm x=bf16 hidden=768",   "rmsnorm x=bf16 hidden=1024"};
    enum { N = 8 };
    setenv("FAKE_CUDA_COMPILE_US", "30000", 1);
    warnings w = {0};
    fake.reset();
    kiln_rt *rt = open_rt(dir, &w);
    kiln_kernel *ks[N] = {0};
    kiln_error e = {0};
    CHECK(rt && kiln_rt_prepare(rt, specs, N, 4, ks, &e) == KILN_OK, "%s", e.msg);
    fake_cuda_counts c = counts();
    kiln_rt_stats s = rt ? stats(rt) : (kiln_rt_stats){0};
    printf("runtime_cache: prepare of %d specs on 4 threads: %d driver compiles, at most %d at once\n", N,
           c.ptx_compiles, c.max_concurrent_compiles);
    CHECK(c.ptx_compiles == N && c.link_creates == N && c.live_links == 0 && s.cubin_writes == N,
          "compiles %d, links %d (live %d), cubin writes %llu", c.ptx_compiles, c.link_creates, c.live_links,
          (unsigned long long)s.cubin_writes);
    CHECK(c.max_concurrent_compiles >= 2, "compiles overlapped: at most %d at once", c.max_concurrent_compiles);
    int all = 1;
    for (int i = 0; i < N; i++) all &= ks[i] != NULL;
    CHECK(all && c.cubin_loads == N, "every kernel loaded from its cubin: %d", c.cubin_loads);
    kiln_rt_destroy(rt);
    /* memory only: compiled side by side all the same */
    fake.reset();
    rt = open_rt(NULL, &w);
    CHECK(rt && kiln_rt_prepare(rt, specs, N, 4, ks, &e) == KILN_OK, "%s", e.msg);
    c = counts();
    CHECK(c.ptx_compiles == N && c.link_creates == N && c.max_concurrent_compiles >= 2,
          "memory only: %d compiles, at most %d at once", c.ptx_compiles, c.max_concurrent_compiles);
    kiln_rt_destroy(rt);
    /* warm: the cubins from disk, nothing compiled */
    fake.reset();
    rt = open_rt(dir, &w);
    CHECK(rt && kiln_rt_prepare(rt, specs, N, 4, ks, &e) == KILN_OK, "%s", e.msg);
    c = counts();
    s = rt ? stats(rt) : (kiln_rt_stats){0};
    CHECK(c.ptx_compiles == 0 && s.cubin_hits == N && s.generated == 0, "warm: compiles %d, cubin hits %llu",
          c.ptx_compiles, (unsigned long long)s.cubin_hits);
    kiln_rt_destroy(rt);
    unsetenv("FAKE_CUDA_COMPILE_US");
    TEST_END();
}

static void *open_gate_later(void *arg) {
    (void)arg;
    usleep(50000);
    gate_set(1);
    return NULL;
}

static void test_prepare_background(void) {
    TEST_BEGIN("prepare_start: returns at once; a kernel is ready (and launches) while another is still being made");
    warnings w = {0};
    fake.reset();
    kiln_rt *rt = open_rt(NULL, &w);
    gate_set(0);
    static const char *const specs[] = {"layernorm x=f16 hidden=512 gate=1", "layernorm x=f16 hidden=256",
                                        "rmsnorm x=f16 hidden=256"};
    kiln_prepare *p = NULL;
    kiln_error e = {0};
    int gen0 = atomic_load(&generated);
    CHECK(rt && kiln_rt_prepare_start(rt, specs, 3, 2, &p, &e) == KILN_OK && p, "start: %s", e.msg);
    for (int i = 0; i < 2000 && gate_waiters() == 0; i++) usleep(1000); /* a worker is held at the gate */
    CHECK(gate_waiters() == 1, "the gated spec is being generated: %d waiting", gate_waiters());
    kiln_kernel *k = NULL;
    kiln_arg args[3] = {{.ptr = 0}, {.i32 = 5}, {.f32 = 1.0f}};
    unsigned grid[3] = {1, 1, 1};
    CHECK(rt && kiln_rt_get_kernel(rt, specs[1], &k, &e) == KILN_OK && kiln_kernel_launch(k, grid, args, 3, NULL, &e) ==
              KILN_OK, "an ungated kernel while the gated one waits: %s", e.msg);
    CHECK(rt && kiln_rt_get_kernel(rt, specs[2], &k, &e) == KILN_OK, "the third too: %s", e.msg);
    CHECK(gate_waiters() == 1, "still waiting");
    gate_set(1);
    kiln_kernel *ks[3] = {0};
    CHECK(kiln_prepare_finish(p, ks, &e) == KILN_OK && ks[0] && ks[1] && ks[2], "finish: %s", e.msg);
    kiln_kernel *again = NULL;
    CHECK(rt && kiln_rt_get_kernel(rt, specs[0], &again, &e) == KILN_OK && again == ks[0], "the gated one from memory");
    CHECK(atomic_load(&generated) == gen0 + 3, "each generated once: %d", atomic_load(&generated) - gen0);
    kiln_rt_destroy(rt);
    TEST_END();

    TEST_BEGIN("prepare_start: errors at start and at finish, as kiln_rt_prepare's; destroy finishes what was not");
    int live0 = counts().live_modules;
    gen0 = atomic_load(&generated);
    rt = open_rt(NULL, &w);
    static const char *const mixed[] = {"layernorm x=f16 hidden=128", "layernorm x=f16 bad=1", "rmsnorm x=f16 bad=1"};
    const char *holes[] = {"layernorm x=f16 hidden=128", NULL};
    CHECK(kiln_rt_prepare_start(rt, holes, 2, 1, &p, &e) == KILN_EINVAL && strstr(e.msg, "spec 1 is NULL") && !p,
          "%s", e.msg);
    CHECK(kiln_rt_prepare_start(rt, mixed, 3, -1, &p, &e) == KILN_EINVAL && strstr(e.msg, "bad thread count"), "%s",
          e.msg);
    CHECK(kiln_rt_prepare_start(rt, mixed, 3, 0, NULL, &e) == KILN_EINVAL, "NULL out");
    kiln_kernel *km[3] = {0};
    CHECK(kiln_rt_prepare_start(rt, mixed, 3, 0, &p, &e) == KILN_OK, "%s", e.msg);
    kiln_status st = kiln_prepare_finish(p, km, &e);
    CHECK(st == KILN_EINVAL && strstr(e.msg, "spec 1 'layernorm x=f16 bad=1'") && strstr(e.msg, "and 1 more"), "%d: %s",
          st, e.msg);
    CHECK(km[0] && !km[1] && !km[2], "the good one is ready");
    CHECK(kiln_rt_prepare_start(rt, mixed, 0, 0, &p, &e) == KILN_OK && kiln_prepare_finish(p, NULL, &e) == KILN_OK,
          "n = 0");
    /* left unfinished, with a worker still held at the gate when destroy is called */
    gate_set(0);
    static const char *const late[] = {"rmsnorm x=bf16 hidden=128 gate=1", "rmsnorm x=bf16 hidden=640"};
    CHECK(kiln_rt_prepare_start(rt, late, 2, 2, &p, &e) == KILN_OK, "%s", e.msg);
    for (int i = 0; i < 2000 && gate_waiters() == 0; i++) usleep(1000);
    CHECK(gate_waiters() == 1, "held at the gate");
    pthread_t opener;
    int made = pthread_create(&opener, NULL, open_gate_later, NULL) == 0;
    kiln_rt_destroy(rt); /* waits for the worker, then unloads everything */
    if (made) pthread_join(opener, NULL);
    fake_cuda_counts after = counts();
    CHECK(made && atomic_load(&generated) == gen0 + 3 && after.live_modules == live0 && after.live_links == 0,
          "destroy finished the prepare (%d generated) and unloaded its modules: live %d -> %d",
          atomic_load(&generated) - gen0, live0, after.live_modules);
    TEST_END();
}

int main(void) {
    if (fake_cuda_open(&fake) != 0) {
        printf("runtime_cache: 0 passed, 1 failed\n");
        return 1;
    }
    char tmpl[] = "/tmp/kiln_cache_test_XXXXXX";
    if (!mkdtemp(tmpl)) return 1;
    snprintf(root, sizeof root, "%s", tmpl);
    setenv("FAKE_CUDA_SM", "86", 1);
    unsetenv("KILN_CACHE");
    unsetenv("KILN_CACHE_DIR");
    setenv("XDG_CACHE_HOME", root, 1); /* a runtime given no directory never touches the user's ~/.cache */
    kiln_rt_register_generator(&stand_in);
    test_modes();
    if (geteuid() == 0) {
        test_foreign_directory();
        test_foreign_entries();
    } else {
        printf("skip: the ownership cases chown files to another uid, which needs root\n");
    }
    test_cubin_cache();
    test_cubin_fallbacks();
    test_cubin_bundles();
    if (geteuid() == 0) test_cubin_bad(); /* it chowns an entry too */
    test_prepare_parallel();
    test_prepare_background();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    if (system(cmd) != 0) printf("  could not remove %s\n", root);
    return check_summary("runtime_cache");
}
