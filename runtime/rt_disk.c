/* runtime/rt_disk.c - the disk cache: one checked file per key, written atomically. */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rt.h"

/* Entry layout (little-endian): magic[8] "KILNCCH1", u32 version, u32 spec_len, u64 text_len,
 * key[16], text_hash[16] (XXH3-128), spec, text. */
#define ENTRY_MAGIC "KILNCCH1"
#define ENTRY_VERSION 1u
#define HEADER_SIZE 56

static atomic_uint tmp_counter;

static int mkdirs(const char *path) {
    char buf[1024];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf) return errno = ENAMETOOLONG, -1;
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(buf, 0755) != 0 && errno != EEXIST) return -1;
        *p = '/';
    }
    return mkdir(buf, 0755) != 0 && errno != EEXIST ? -1 : 0;
}

/* Creates and removes a file in dir: the only reliable writability test (root ignores modes). */
static int probe_writable(const char *dir) {
    char path[1100];
    snprintf(path, sizeof path, "%s/.probe.%ld.%u", dir, (long)getpid(), atomic_fetch_add(&tmp_counter, 1));
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0644);
    if (fd < 0) return -1;
    close(fd);
    unlink(path);
    return 0;
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
    if (mkdirs(c->dir) != 0 || probe_writable(c->dir) != 0) {
        snprintf(warning, wsize, "disk cache directory '%s' is not writable (%s); kernels are cached in memory only",
                 c->dir, strerror(errno));
        return;
    }
    c->enabled = true;
}

void rt_disk_path(const rt_disk *c, const uint8_t key[16], char *out, size_t size) {
    char hex[33];
    rt_hex(key, 16, hex);
    snprintf(out, size, "%s/%s.kcache", c->dir, hex);
}

static uint64_t rd(const uint8_t *p, int bytes) {
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static void wr(uint8_t *p, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* Reads the whole file; returns NULL (errno set) on failure. */
static uint8_t *slurp(const char *path, size_t *size) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return NULL;
    struct stat st;
    uint8_t *buf = NULL;
    if (fstat(fd, &st) == 0 && (buf = malloc((size_t)st.st_size + 1))) {
        size_t n = 0;
        ssize_t k;
        while (n < (size_t)st.st_size && (k = read(fd, buf + n, (size_t)st.st_size - n)) > 0) n += (size_t)k;
        *size = n;
    }
    close(fd);
    return buf;
}

/* 1 when the file holds a sound entry for key and spec. */
static int entry_ok(const uint8_t *b, size_t size, const uint8_t key[16], const char *spec) {
    if (size < HEADER_SIZE || memcmp(b, ENTRY_MAGIC, 8) != 0 || rd(b + 8, 4) != ENTRY_VERSION) return 0;
    uint64_t spec_len = rd(b + 12, 4), text_len = rd(b + 16, 8);
    if (memcmp(b + 24, key, 16) != 0 || spec_len != strlen(spec) || text_len > size ||
        HEADER_SIZE + spec_len + text_len != size || memcmp(b + HEADER_SIZE, spec, spec_len) != 0)
        return 0;
    uint8_t h[16];
    rt_hash128(b + HEADER_SIZE + spec_len, text_len, h);
    return memcmp(h, b + 40, 16) == 0;
}

rt_disk_result rt_disk_read(const rt_disk *c, const uint8_t key[16], const char *spec, char **text, size_t *len) {
    char path[1100];
    size_t size = 0;
    if (!c->enabled) return RT_DISK_MISS;
    rt_disk_path(c, key, path, sizeof path);
    uint8_t *b = slurp(path, &size);
    if (!b) return RT_DISK_MISS;
    if (!entry_ok(b, size, key, spec)) {
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

int rt_disk_write(const rt_disk *c, const uint8_t key[16], const char *spec, const char *text, size_t len) {
    char path[1100];
    uint8_t h[HEADER_SIZE];
    if (!c->enabled) return 0;
    rt_disk_path(c, key, path, sizeof path);
    memcpy(h, ENTRY_MAGIC, 8);
    wr(h + 8, ENTRY_VERSION, 4);
    wr(h + 12, strlen(spec), 4);
    wr(h + 16, len, 8);
    memcpy(h + 24, key, 16);
    rt_hash128(text, len, h + 40);
    rt_piece pieces[] = {{h, sizeof h}, {spec, strlen(spec)}, {text, len}};
    return rt_write_pieces(path, pieces, 3, true);
}
