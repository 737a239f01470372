/* runtime/rt_disk.c - the disk cache: one checked file per key, written atomically, in a directory only the user can write.
 *
 * Entries are code the process loads onto its GPU, so the cache must be the user's own: the directory
 * is created 0700 and entries 0600; a directory not owned by the user, writable by group or others,
 * or below a directory another user could rename it out of, is refused (memory-only, one warning);
 * an entry not owned by the user or writable by others is never loaded. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "rt.h"

/* Entry layout (little-endian): magic[8] ("KILNCCH1" PTX, "KILNCUB1" cubin), u32 version, u32 spec_len,
 * u64 text_len, key[16], text_hash[16] (XXH3-128), spec, text. */
#define ENTRY_VERSION 1u
#define HEADER_SIZE 56
#define ENTRY_MAX ((size_t)64 << 20) /* no kernel's PTX comes near; larger files are not entries */
#define STALE_TMP_SECONDS 600        /* a temporary file this old was left by a killed writer */

static atomic_uint tmp_counter;

/* Each kind of entry: its magic and its file name extension. */
static const struct {
    const char magic[9], *ext;
} kinds[] = {
    [RT_ENTRY_PTX] = {"KILNCCH1", "kcache"},
    [RT_ENTRY_CUBIN] = {"KILNCUB1", "kcubin"},
};

static int mkdirs(const char *path) {
    char buf[1024];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf) return errno = ENAMETOOLONG, -1;
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(buf, 0700) != 0 && errno != EEXIST) return -1;
        *p = '/';
    }
    return mkdir(buf, 0700) != 0 && errno != EEXIST ? -1 : 0;
}

/* Whether the user may trust what is in dir: dir (symlinks resolved into real) is owned by the user
 * and writable by nobody else, and every directory above it is owned by the user or root and is not
 * writable by others unless sticky (as /tmp is: nobody else can rename our directory out of it).
 * 0, or -1 with why filled. */
static int dir_trusted(const char *dir, char *real, size_t rsize, char *why, size_t wsize) {
    char buf[PATH_MAX];
    uid_t me = geteuid();
    struct stat st;
    if (!realpath(dir, buf)) return snprintf(why, wsize, "cannot resolve it (%s)", strerror(errno)), -1;
    if (snprintf(real, rsize, "%s", buf) >= (int)rsize) return snprintf(why, wsize, "path too long"), -1;
    if (stat(buf, &st) != 0 || !S_ISDIR(st.st_mode))
        return snprintf(why, wsize, "'%s' is not a directory", buf), -1;
    if (st.st_uid != me)
        return snprintf(why, wsize, "'%s' is owned by uid %ld, not by this user (uid %ld)", buf, (long)st.st_uid,
                        (long)me), -1;
    if (st.st_mode & (S_IWGRP | S_IWOTH))
        return snprintf(why, wsize, "'%s' is writable by %s (mode %04o; chmod go-w it)", buf,
                        st.st_mode & S_IWOTH ? "others" : "its group", (unsigned)(st.st_mode & 07777)), -1;
    for (char *slash = strrchr(buf, '/'); slash; slash = strrchr(buf, '/')) {
        slash[slash == buf] = 0; /* the parent; "/" stays "/" */
        if (stat(buf, &st) != 0) return snprintf(why, wsize, "cannot stat '%s' (%s)", buf, strerror(errno)), -1;
        if (st.st_uid != me && st.st_uid != 0)
            return snprintf(why, wsize, "'%s' above it is owned by uid %ld, neither this user nor root", buf,
                            (long)st.st_uid), -1;
        if ((st.st_mode & (S_IWGRP | S_IWOTH)) && !(st.st_mode & S_ISVTX))
            return snprintf(why, wsize, "'%s' above it is writable by %s and not sticky (mode %04o)", buf,
                            st.st_mode & S_IWOTH ? "others" : "its group", (unsigned)(st.st_mode & 07777)), -1;
        if (!strcmp(buf, "/")) break;
    }
    return 0;
}

/* Creates and removes a file in dir: the only reliable writability test (root ignores modes). */
static int probe_writable(const char *dir) {
    char path[1100];
    snprintf(path, sizeof path, "%s/.probe.%ld.%u", dir, (long)getpid(), atomic_fetch_add(&tmp_counter, 1));
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) return -1;
    close(fd);
    unlink(path);
    return 0;
}

/* Removes temporary files that writers killed mid-write left behind: those of processes
 * that no longer exist, and any older than STALE_TMP_SECONDS. */
static void remove_stale_tmp(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    time_t now = time(NULL);
    for (struct dirent *e; (e = readdir(d));) {
        /* rt_write_pieces names them ".<entry>.kiln-tmp.<pid>.<n>"; the probe ".probe.<pid>.<n>" */
        const char *tag = strstr(e->d_name, ".kiln-tmp.");
        const char *num = e->d_name[0] != '.' ? NULL
                        : tag ? tag + 10 : !strncmp(e->d_name, ".probe.", 7) ? e->d_name + 7 : NULL;
        long pid;
        if (!num || sscanf(num, "%ld.", &pid) != 1) continue;
        char path[1400];
        struct stat st;
        if (snprintf(path, sizeof path, "%s/%s", dir, e->d_name) >= (int)sizeof path) continue;
        if (lstat(path, &st) != 0 || !S_ISREG(st.st_mode)) continue;
        /* a process of that id is gone (a few seconds' grace: another PID namespace may share
         * the directory), or the file is too old to belong to a live write */
        bool dead = pid > 0 && kill((pid_t)pid, 0) != 0 && errno == ESRCH && now - st.st_mtime > 2;
        if (dead || now - st.st_mtime > STALE_TMP_SECONDS) unlink(path);
    }
    closedir(d);
}

void rt_disk_init(rt_disk *c, const char *dir_option, bool disabled, char *warning, size_t wsize) {
    const char *env = getenv("KILN_CACHE");
    memset(c, 0, sizeof *c);
    warning[0] = 0;
    if (disabled || (env && !strcmp(env, "0"))) return;
    const char *dir = dir_option, *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (!dir || !*dir) dir = getenv("KILN_CACHE_DIR");
    int n;
    if (dir && *dir) n = snprintf(c->dir, sizeof c->dir, "%s", dir);
    else if (xdg && *xdg) n = snprintf(c->dir, sizeof c->dir, "%s/kiln", xdg);
    else if (home && *home) n = snprintf(c->dir, sizeof c->dir, "%s/.cache/kiln", home);
    else {
        snprintf(warning, wsize, "disk cache disabled: neither KILN_CACHE_DIR, XDG_CACHE_HOME nor HOME is set; "
                                 "kernels are cached in memory only");
        return;
    }
    if (n >= (int)sizeof c->dir) {
        snprintf(warning, wsize, "disk cache disabled: directory path too long; kernels are cached in memory only");
        return;
    }
    if (mkdirs(c->dir) != 0) {
        snprintf(warning, wsize, "disk cache directory '%s' is not writable (%s); kernels are cached in memory only",
                 c->dir, strerror(errno));
        return;
    }
    /* trusted before anything is written there; from here on the checked real path is used, so a
     * symlink swapped later cannot redirect the cache */
    char real[sizeof c->dir], why[PATH_MAX + 200];
    if (dir_trusted(c->dir, real, sizeof real, why, sizeof why) != 0) {
        snprintf(warning, wsize, "disk cache directory '%s' is not safe to load kernels from: %s; kernels are cached in "
                 "memory only (use a directory of your own, e.g. unset KILN_CACHE_DIR for ~/.cache/kiln)", c->dir, why);
        return;
    }
    memcpy(c->dir, real, sizeof c->dir);
    if (probe_writable(c->dir) != 0) {
        snprintf(warning, wsize, "disk cache directory '%s' is not writable (%s); kernels are cached in memory only",
                 c->dir, strerror(errno));
        return;
    }
    c->enabled = true;
    remove_stale_tmp(c->dir);
}

void rt_disk_path(const rt_disk *c, rt_entry_kind kind, const uint8_t key[16], char *out, size_t size) {
    char hex[33];
    rt_hex(key, 16, hex);
    snprintf(out, size, "%s/%s.%s", c->dir, hex, kinds[kind].ext);
}

static uint64_t rd(const uint8_t *p, int bytes) {
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static void wr(uint8_t *p, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* Reads the whole file; returns NULL (errno set) on failure. Only regular files of at most
 * ENTRY_MAX bytes, owned by the user and writable by nobody else, are read (a FIFO planted at the
 * path would block open and read forever; another user's file may be anything); *bad is set when
 * something other than such a file is there. */
static uint8_t *slurp(const char *path, size_t *size, bool *bad) {
    *bad = false;
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        *bad = errno == ELOOP;
        return NULL;
    }
    struct stat st;
    uint8_t *buf = NULL;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || (size_t)st.st_size > ENTRY_MAX || st.st_uid != geteuid() ||
        (st.st_mode & (S_IWGRP | S_IWOTH))) {
        *bad = true;
        close(fd);
        return NULL;
    }
    if ((buf = malloc((size_t)st.st_size + 1))) {
        size_t n = 0;
        ssize_t k;
        while (n < (size_t)st.st_size && (k = read(fd, buf + n, (size_t)st.st_size - n)) > 0) n += (size_t)k;
        *size = n;
    }
    close(fd);
    return buf;
}

static int entry_ok(rt_entry_kind kind, const uint8_t *b, size_t size, const uint8_t key[16], const char *spec) {
    if (size < HEADER_SIZE || memcmp(b, kinds[kind].magic, 8) != 0 || rd(b + 8, 4) != ENTRY_VERSION) return 0;
    uint64_t spec_len = rd(b + 12, 4), text_len = rd(b + 16, 8);
    if (memcmp(b + 24, key, 16) != 0 || spec_len != strlen(spec) || text_len > size ||
        HEADER_SIZE + spec_len + text_len != size || memcmp(b + HEADER_SIZE, spec, spec_len) != 0)
        return 0;
    uint8_t h[16];
    rt_hash128(b + HEADER_SIZE + spec_len, text_len, h);
    return memcmp(h, b + 40, 16) == 0;
}

int rt_disk_entry_ok(const uint8_t *b, size_t size, const uint8_t key[16], const char *spec) {
    return entry_ok(RT_ENTRY_PTX, b, size, key, spec);
}

rt_disk_result rt_disk_read(const rt_disk *c, rt_entry_kind kind, const uint8_t key[16], const char *spec, char **text,
                            size_t *len) {
    char path[1100];
    size_t size = 0;
    if (!c->enabled) return RT_DISK_MISS;
    rt_disk_path(c, kind, key, path, sizeof path);
    bool bad;
    uint8_t *b = slurp(path, &size, &bad);
    if (!b) {
        if (bad) unlink(path); /* not a regular file of a sane size: never an entry */
        return bad ? RT_DISK_BAD : RT_DISK_MISS;
    }
    if (!entry_ok(kind, b, size, key, spec)) {
        free(b);
        unlink(path);
        return RT_DISK_BAD;
    }
    size_t off = HEADER_SIZE + strlen(spec);
    *len = size - off;
    memmove(b, b + off, *len);
    b[*len] = 0;
    *text = (char *)b;
    return RT_DISK_HIT;
}

int rt_disk_write(const rt_disk *c, rt_entry_kind kind, const uint8_t key[16], const char *spec, const void *text,
                  size_t len) {
    char path[1100];
    uint8_t h[HEADER_SIZE];
    if (!c->enabled) return 0;
    rt_disk_path(c, kind, key, path, sizeof path);
    /* An entry is a new 0600 regular file renamed over the path: whatever was there (another
     * user's file, a FIFO, a device, a symlink out of the cache directory) is replaced, never
     * opened or followed. */
    memcpy(h, kinds[kind].magic, 8);
    wr(h + 8, ENTRY_VERSION, 4);
    wr(h + 12, strlen(spec), 4);
    wr(h + 16, len, 8);
    memcpy(h + 24, key, 16);
    rt_hash128(text, len, h + 40);
    rt_piece pieces[] = {{h, sizeof h}, {spec, strlen(spec)}, {text, len}};
    return rt_write_private(path, pieces, 3);
}
