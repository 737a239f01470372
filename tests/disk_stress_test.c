/* tests/disk_stress_test.c - the disk cache under concurrency and faults: never a corrupt entry
 * loaded, never a crash or a hang, one clear warning per failure.
 *
 *  1. 4 processes x 4 threads read and write 24 overlapping keys in one directory (entries of
 *     1 KiB to 256 KiB whose bytes are a function of the key); every hit must carry exactly
 *     the key's bytes.
 *  2. Writers of 1-4 MiB entries are killed with SIGKILL mid-write, 12 times; afterwards every
 *     key reads back as a miss or as its exact bytes, and the temporary files the killed
 *     writers left are removed when a cache next opens the directory.
 *  3. Something other than an entry at an entry's path (a FIFO, a directory, a symlink, a
 *     file over the size limit) is a bad entry, removed, without blocking.
 *  4. A full disk (a 64 KiB tmpfs, mounted here and unmounted after): the runtime (on the fake
 *     driver) generates and loads every kernel, warns once with "No space left on device",
 *     leaves no temporary file; the entries that fitted load from disk later, none bad.
 *  5. A read-only directory (the tmpfs remounted read-only): one warning, memory cache only.
 * 4 and 5 need root (mount); elsewhere they are skipped with the reason. The counts are printed. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <dirent.h>

#include "check.h"
#include "fake_cuda/fake_cuda.h"
#include "kiln/runtime.h"
#include "rt.h"

extern char **environ;

#define NKEYS 24
#define TMP "~.kiln-tmp." /* the temporary files rt_write_pieces (runtime/rt_file.c) writes */
#define NPROCS 4
#define NTHREADS 4

static char root[256];
static int skipped;

/* The bytes of key k's entry: its size and every byte follow from k. */
static size_t key_size(int k, size_t big) { return big ? big + (size_t)k * 4099 : 1024 + (size_t)k * 10923; }
static char *key_text(int k, size_t size) {
    char *t = malloc(size);
    if (!t) return NULL;
    uint32_t x = 2654435761u * (uint32_t)(k + 1);
    for (size_t i = 0; i < size; i++) {
        x ^= x << 13, x ^= x >> 17, x ^= x << 5;
        t[i] = (char)('a' + x % 26);
    }
    return t;
}
static void key_of(int k, uint8_t key[16], char *spec, size_t size) {
    snprintf(spec, size, "layernorm x=f16 hidden=%d", 100 + k);
    rt_hash128(spec, strlen(spec), key);
}

typedef struct counts {
    atomic_long ops, hits, misses, bad, writes, write_errors, corrupt;
} counts;

/* Reads key k; a hit must hold exactly the key's bytes; a miss or bad entry is rewritten. */
static void one_op(const rt_disk *d, int k, size_t big, counts *c) {
    uint8_t key[16];
    char spec[64];
    key_of(k, key, spec, sizeof spec);
    size_t want = key_size(k, big), len = 0;
    char *text = NULL;
    rt_disk_result r = rt_disk_read(d, RT_ENTRY_PTX, key, spec, &text, &len);
    atomic_fetch_add(&c->ops, 1);
    if (r == RT_DISK_HIT) {
        atomic_fetch_add(&c->hits, 1);
        char *exp = key_text(k, want);
        if (exp && (len != want || memcmp(exp, text, len))) atomic_fetch_add(&c->corrupt, 1);
        free(exp);
        free(text);
        return;
    }
    atomic_fetch_add(r == RT_DISK_BAD ? &c->bad : &c->misses, 1);
    char *t = key_text(k, want);
    if (!t) return;
    if (rt_disk_write(d, RT_ENTRY_PTX, key, spec, t, want) == 0) atomic_fetch_add(&c->writes, 1);
    else atomic_fetch_add(&c->write_errors, 1);
    free(t);
}

typedef struct worker_arg {
    const rt_disk *d;
    counts *c;
    unsigned seed;
    double until;
} worker_arg;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void *worker(void *p) {
    worker_arg *a = p;
    while (now() < a->until) {
        a->seed = a->seed * 1103515245u + 12345u;
        one_op(a->d, (int)((a->seed >> 16) % NKEYS), 0, a->c);
    }
    return NULL;
}

/* Child of part 1: NTHREADS threads for `seconds`; prints its counts on stdout. */
static int child_mixed(const char *dir, double seconds) {
    rt_disk d;
    char warn[256];
    rt_disk_init(&d, dir, false, warn, sizeof warn);
    if (!d.enabled) {
        printf("cache disabled: %s\n", warn);
        return 1;
    }
    counts c = {0};
    pthread_t th[NTHREADS];
    worker_arg a[NTHREADS];
    for (int i = 0; i < NTHREADS; i++) {
        a[i] = (worker_arg){&d, &c, (unsigned)getpid() * 31u + (unsigned)i, now() + seconds};
        pthread_create(&th[i], NULL, worker, &a[i]);
    }
    for (int i = 0; i < NTHREADS; i++) pthread_join(th[i], NULL);
    printf("%ld %ld %ld %ld %ld %ld %ld\n", (long)c.ops, (long)c.hits, (long)c.misses, (long)c.bad, (long)c.writes,
           (long)c.write_errors, (long)c.corrupt);
    return 0;
}

/* Child of part 2: writes large entries for keys forever (until killed). */
static int child_writer(const char *dir) {
    rt_disk d;
    char warn[256];
    rt_disk_init(&d, dir, false, warn, sizeof warn);
    unsigned s = (unsigned)getpid();
    for (;;) {
        s = s * 1103515245u + 12345u;
        int k = (int)((s >> 16) % NKEYS);
        uint8_t key[16];
        char spec[64];
        key_of(k, key, spec, sizeof spec);
        size_t n = key_size(k, (size_t)1 << 20);
        char *t = key_text(k, n);
        if (t) rt_disk_write(&d, RT_ENTRY_PTX, key, spec, t, n);
        free(t);
    }
    return 0;
}

static pid_t spawn(const char *self, const char *mode, const char *dir, const char *arg, int out_fd) {
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    if (out_fd >= 0) posix_spawn_file_actions_adddup2(&fa, out_fd, 1);
    char *argv[] = {(char *)self, (char *)mode, (char *)dir, (char *)arg, NULL};
    pid_t pid = -1;
    if (posix_spawn(&pid, self, &fa, NULL, argv, environ) != 0) pid = -1;
    posix_spawn_file_actions_destroy(&fa);
    return pid;
}

/* Files in dir whose name starts with prefix (or, for "*X", ends with X; for "~X", contains X). */
static int count_files(const char *dir, const char *prefix) {
    DIR *d = opendir(dir);
    int n = 0;
    if (!d) return -1;
    size_t pl = strlen(prefix);
    for (struct dirent *e; (e = readdir(d));) {
        size_t nl = strlen(e->d_name);
        if (prefix[0] == '~'   ? strstr(e->d_name, prefix + 1) != NULL
            : prefix[0] == '*' ? nl >= pl - 1 && !strcmp(e->d_name + nl - (pl - 1), prefix + 1)
                               : !strncmp(e->d_name, prefix, pl))
            n++;
    }
    closedir(d);
    return n;
}

static void test_processes_threads(const char *self) {
    TEST_BEGIN("4 processes x 4 threads on one cache directory: every hit holds its key's exact bytes");
    char dir[300];
    snprintf(dir, sizeof dir, "%s/mixed", root);
    int fds[2];
    if (pipe(fds) != 0) {
        CHECK(0, "pipe: %s", strerror(errno));
        TEST_END();
        return;
    }
    pid_t pid[NPROCS];
    for (int i = 0; i < NPROCS; i++) pid[i] = spawn(self, "--mixed", dir, "2.0", fds[1]);
    close(fds[1]);
    int ok = 1;
    for (int i = 0; i < NPROCS; i++) {
        int status = 1;
        ok &= pid[i] > 0 && waitpid(pid[i], &status, 0) == pid[i] && WIFEXITED(status) && !WEXITSTATUS(status);
    }
    FILE *f = fdopen(fds[0], "r");
    long tot[7] = {0}, v[7];
    int lines = 0;
    while (f && fscanf(f, "%ld %ld %ld %ld %ld %ld %ld", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6]) == 7) {
        for (int i = 0; i < 7; i++) tot[i] += v[i];
        lines++;
    }
    if (f) fclose(f);
    printf("disk_stress: %d processes x %d threads: %ld operations, %ld hits, %ld misses, %ld bad entries, "
           "%ld writes, %ld write errors, %ld corrupt entries loaded\n", NPROCS, NTHREADS, tot[0], tot[1], tot[2],
           tot[3], tot[4], tot[5], tot[6]);
    CHECK(ok && lines == NPROCS, "children: %d reported", lines);
    CHECK(tot[6] == 0 && tot[3] == 0 && tot[5] == 0 && tot[1] > 0, "corrupt %ld, bad %ld, write errors %ld, hits %ld",
          tot[6], tot[3], tot[5], tot[1]);
    CHECK(count_files(dir, TMP) == 0, "temporary files left: %d", count_files(dir, TMP));
    TEST_END();
}

static void test_sigkill(const char *self) {
    TEST_BEGIN("writers killed with SIGKILL mid-write: no corrupt entry, their temporary files removed later");
    char dir[300];
    snprintf(dir, sizeof dir, "%s/killed", root);
    mkdir(dir, 0755);
    int kills = 0;
    unsigned s = 12345;
    for (int round = 0; round < 4; round++) {
        pid_t w[3];
        for (int i = 0; i < 3; i++) w[i] = spawn(self, "--writer", dir, "-", -1);
        s = s * 1103515245u + 12345u;
        usleep(300000 + (s >> 16) % 500000); /* the writers are mid-write (mostly in write/fsync) */
        for (int i = 0; i < 3; i++)
            if (w[i] > 0 && kill(w[i], SIGKILL) == 0) kills++;
        for (int i = 0; i < 3; i++)
            if (w[i] > 0) waitpid(w[i], NULL, 0);
    }
    int left = count_files(dir, TMP);
    /* Another process's cache opening the directory a while later: age the leftovers past the
     * grace period a live writer in another PID namespace gets. */
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d));) {
        if (!strstr(e->d_name, ".kiln-tmp.")) continue;
        char p[600];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        struct timeval tv[2];
        gettimeofday(&tv[0], NULL);
        tv[0].tv_sec -= 10;
        tv[1] = tv[0];
        utimes(p, tv);
    }
    if (d) closedir(d);
    rt_disk c;
    char warn[256];
    rt_disk_init(&c, dir, false, warn, sizeof warn);
    int after = count_files(dir, TMP);
    counts n = {0};
    for (int k = 0; k < NKEYS; k++) {
        uint8_t key[16];
        char spec[64], *text = NULL;
        size_t len = 0;
        key_of(k, key, spec, sizeof spec);
        rt_disk_result r = rt_disk_read(&c, RT_ENTRY_PTX, key, spec, &text, &len);
        atomic_fetch_add(&n.ops, 1);
        if (r == RT_DISK_HIT) {
            size_t want = key_size(k, (size_t)1 << 20);
            char *exp = key_text(k, want);
            atomic_fetch_add(&n.hits, 1);
            if (exp && (len != want || memcmp(exp, text, len))) atomic_fetch_add(&n.corrupt, 1);
            free(exp);
        } else if (r == RT_DISK_BAD) {
            atomic_fetch_add(&n.bad, 1);
        }
        free(text);
    }
    printf("disk_stress: %d writers killed mid-write: %d temporary files left, %d after the next open; %ld of %d keys "
           "complete, %ld bad, %ld corrupt loaded\n", kills, left, after, (long)n.hits, NKEYS, (long)n.bad,
           (long)n.corrupt);
    CHECK(kills == 12 && after == 0 && n.corrupt == 0 && n.bad == 0, "kills %d, tmp after %d, corrupt %ld, bad %ld",
          kills, after, (long)n.corrupt, (long)n.bad);
    TEST_END();
}

static void test_not_entries(void) {
    TEST_BEGIN("a FIFO, a directory, a symlink or a huge file at an entry's path: bad entry, removed, no hang");
    char dir[300];
    snprintf(dir, sizeof dir, "%s/odd", root);
    rt_disk c;
    char warn[256];
    rt_disk_init(&c, dir, false, warn, sizeof warn);
    const char *kinds[4] = {"fifo", "directory", "symlink", "70 MiB file"};
    for (int i = 0; i < 4; i++) {
        uint8_t key[16];
        char spec[64], path[1200], *text = NULL;
        size_t len;
        key_of(i, key, spec, sizeof spec);
        rt_disk_path(&c, RT_ENTRY_PTX, key, path, sizeof path);
        int made = i == 0 ? mkfifo(path, 0644) : i == 1 ? mkdir(path, 0755) : i == 2 ? symlink("/etc/hostname", path) : 0;
        if (i == 3) {
            int fd = open(path, O_WRONLY | O_CREAT, 0644);
            made = fd >= 0 && ftruncate(fd, (off_t)70 << 20) == 0 ? 0 : -1;
            if (fd >= 0) close(fd);
        }
        double t0 = now();
        rt_disk_result r = made == 0 ? rt_disk_read(&c, RT_ENTRY_PTX, key, spec, &text, &len) : RT_DISK_HIT;
        struct stat st;
        bool gone = i == 1 || lstat(path, &st) != 0; /* unlink cannot remove a directory: it is a miss forever */
        CHECK(made == 0 && r == RT_DISK_BAD && gone && now() - t0 < 2, "%s: made %d, result %d, removed %d",
              kinds[i], made, (int)r, gone);
        free(text);
        if (i == 1) rmdir(path);
    }
    TEST_END();
}

/* ---- the runtime on a full or read-only disk (fake driver, real generator) ---- */

typedef struct warnings {
    int count;
    char first[512];
} warnings;

static void on_warning(void *user, const char *msg) {
    warnings *w = user;
    if (w->count++ == 0) snprintf(w->first, sizeof w->first, "%s", msg);
}

static int mount_tmpfs(const char *dir, const char *opts) {
    mkdir(dir, 0755);
    /* mode=0700: a tmpfs root is 1777 by default, which the cache refuses as writable by others */
    char all[128];
    snprintf(all, sizeof all, "%s,mode=0700", opts);
    if (mount("kiln-test", dir, "tmpfs", 0, all) != 0) {
        printf("skip: cannot mount a tmpfs at %s (%s): full-disk and read-only cases need root\n", dir, strerror(errno));
        return -1;
    }
    return 0;
}

static void test_full_and_readonly(void) {
    fake_cuda_api fake;
    if (fake_cuda_open(&fake) != 0) {
        TEST_BEGIN("full disk and read-only directory");
        CHECK(0, "no fake driver");
        TEST_END();
        return;
    }
    kiln_rt_use_generator();
    setenv("FAKE_CUDA_SM", "80", 1);
    static const char *specs[3] = {"layernorm x=f16 hidden=768", "layernorm x=bf16 hidden=768",
                                   "layernorm x=f32 hidden=768"};
    char dir[300];
    snprintf(dir, sizeof dir, "%s/tmpfs", root);
    if (mount_tmpfs(dir, "size=64k") != 0) {
        skipped += 2;
        return;
    }
    /* fill all but a few KiB: the cache directory opens, the first entry does not fit */
    char fill[400];
    snprintf(fill, sizeof fill, "%s/filler", dir);
    int fd = open(fill, O_WRONLY | O_CREAT, 0644);
    static char block[4096];
    while (fd >= 0 && write(fd, block, sizeof block) == (ssize_t)sizeof block) {}
    if (fd >= 0) close(fd);
    unlink(fill); /* free the tail again, then refill leaving one block */
    fd = open(fill, O_WRONLY | O_CREAT, 0644);
    for (int i = 0; fd >= 0 && i < 12; i++)
        if (write(fd, block, sizeof block) != (ssize_t)sizeof block) break;
    if (fd >= 0) close(fd);

    TEST_BEGIN("full disk: every kernel generated and loaded, one warning naming ENOSPC, no partial file, "
               "and what was written loads later");
    /* PTX entries only: the 64 KiB would not hold the driver's cubins beside them too (those share
     * the write path, disk_write in rt_kernel.c, and are tested in runtime_cache_test) */
    setenv("KILN_DRIVER_LINK", "0", 1);
    warnings w = {0};
    kiln_rt_options o = {.cache_dir = dir, .on_warning = on_warning, .warning_user = &w};
    kiln_rt *rt = NULL;
    kiln_error e = {0};
    CHECK(kiln_rt_create(&rt, &o, &e) == KILN_OK, "%s", e.msg);
    int loaded = 0;
    for (int i = 0; rt && i < 3; i++) {
        kiln_kernel *k;
        loaded += kiln_rt_get_kernel(rt, specs[i], &k, &e) == KILN_OK;
    }
    printf("disk_stress: full disk: %d of 3 kernels loaded, %d warning(s): %s\n", loaded, w.count, w.first);
    CHECK(loaded == 3 && w.count == 1 && strstr(w.first, "No space left on device") && strstr(w.first, dir),
          "%d loaded, %d warnings: %s", loaded, w.count, w.first);
    kiln_rt_stats st;
    kiln_rt_get_stats(rt, &st);
    int entries = count_files(dir, "*.kcache");
    CHECK(count_files(dir, TMP) == 0 && entries == (int)st.disk_writes, "%d temporary files left; %d entries for "
          "%llu writes", count_files(dir, TMP), entries, (unsigned long long)st.disk_writes);
    kiln_rt_destroy(rt);
    /* with room again, what was written before the disk filled loads from it, and nothing is bad */
    unlink(fill);
    warnings w2 = {0};
    o.warning_user = &w2;
    rt = NULL;
    CHECK(kiln_rt_create(&rt, &o, &e) == KILN_OK, "%s", e.msg);
    for (int i = 0; rt && i < 3; i++) {
        kiln_kernel *k;
        CHECK(kiln_rt_get_kernel(rt, specs[i], &k, &e) == KILN_OK, "%s", e.msg);
    }
    kiln_rt_get_stats(rt, &st);
    printf("disk_stress: full disk: %d entr%s written before it filled; reopened: %llu disk hits, %llu bad entries\n",
           entries, entries == 1 ? "y" : "ies", (unsigned long long)st.disk_hits, (unsigned long long)st.bad_entries);
    CHECK((int)st.disk_hits == entries && st.bad_entries == 0 && w2.count == 0, "hits %llu, bad %llu, warnings %d",
          (unsigned long long)st.disk_hits, (unsigned long long)st.bad_entries, w2.count);
    kiln_rt_destroy(rt);
    unsetenv("KILN_DRIVER_LINK");
    TEST_END();

    TEST_BEGIN("read-only directory: one warning, memory cache only, kernels still load");
    if (mount(NULL, dir, NULL, MS_REMOUNT | MS_RDONLY, NULL) != 0) {
        CHECK(0, "remount read-only: %s", strerror(errno));
    } else {
        warnings r = {0};
        kiln_rt_options ro = {.cache_dir = dir, .on_warning = on_warning, .warning_user = &r};
        rt = NULL;
        CHECK(kiln_rt_create(&rt, &ro, &e) == KILN_OK, "%s", e.msg);
        loaded = 0;
        for (int i = 0; rt && i < 3; i++) {
            kiln_kernel *k;
            loaded += kiln_rt_get_kernel(rt, specs[i], &k, &e) == KILN_OK;
        }
        printf("disk_stress: read-only: %d of 3 kernels loaded, %d warning(s): %s\n", loaded, r.count, r.first);
        CHECK(loaded == 3 && r.count == 1 && strstr(r.first, "Read-only file system") && rt && !kiln_rt_cache_dir(rt),
              "%d loaded, %d warnings: %s", loaded, r.count, r.first);
        kiln_rt_destroy(rt);
    }
    TEST_END();
    if (umount(dir) != 0) printf("  could not unmount %s: %s\n", dir, strerror(errno));
    rmdir(dir);
}

int main(int argc, char **argv) {
    if (argc == 4 && !strcmp(argv[1], "--mixed")) return child_mixed(argv[2], atof(argv[3]));
    if (argc == 4 && !strcmp(argv[1], "--writer")) return child_writer(argv[2]);
    char tmpl[] = "/tmp/kiln_disk_stress_XXXXXX";
    if (!mkdtemp(tmpl)) return 1;
    snprintf(root, sizeof root, "%s", tmpl);
    setvbuf(stdout, NULL, _IOLBF, 0);
    test_processes_threads(argv[0]);
    test_sigkill(argv[0]);
    test_not_entries();
    test_full_and_readonly();
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    if (system(cmd) != 0) printf("  could not remove %s\n", root);
    printf("disk_stress: %d passed, %d failed, %d skipped\n", check_passed, check_failed, skipped);
    return check_failed ? 1 : 0;
}
