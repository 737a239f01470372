/* runtime/rt_input.c - reads the files users name (PTX to lint, bundles, spec lists) within a size limit.
 *
 * Every reader of a user's file goes through kiln_read_input, so none reads forever or grows without
 * bound (`kiln lint /dev/zero` once filled all memory):
 *   - a regular file larger than the limit is refused from its size, before a byte is read (a sparse
 *     file made with truncate costs nothing); one that grows past it while read is refused at the limit;
 *   - a FIFO, a device or a socket named by path is refused without reading, as the disk cache refuses
 *     them (a FIFO would block the open, /dev/zero never ends): data from a pipe comes on standard input;
 *   - standard input (path NULL), a pipe or a terminal or a file, is streamed up to the limit.
 * The limit is KILN_INPUT_LIMIT_MB_DEFAULT mebibytes, or KILN_MAX_INPUT_MB from the environment. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kiln/runtime.h"

enum { MAX_LIMIT_MB = 1 << 20 }; /* 1 TiB: KILN_MAX_INPUT_MB above this is refused as a typo */

kiln_status kiln_input_limit(size_t *bytes, kiln_error *err) {
    const char *env = getenv("KILN_MAX_INPUT_MB");
    long mb = KILN_INPUT_LIMIT_MB_DEFAULT;
    if (env && *env) {
        char *end = NULL;
        errno = 0;
        mb = strtol(env, &end, 10);
        if (errno || end == env || *end || mb < 1 || mb > MAX_LIMIT_MB)
            return kiln_fail(err, KILN_EINVAL,
                             "KILN_MAX_INPUT_MB='%s' is not a size in mebibytes; valid: 1 to %d (default %d)", env,
                             MAX_LIMIT_MB, KILN_INPUT_LIMIT_MB_DEFAULT);
    }
    *bytes = (size_t)mb << 20;
    return KILN_OK;
}

static const char *file_kind(mode_t m) {
    return S_ISDIR(m)    ? "a directory"
           : S_ISFIFO(m) ? "a FIFO (named pipe)"
           : S_ISCHR(m)  ? "a character device"
           : S_ISBLK(m)  ? "a block device"
           : S_ISSOCK(m) ? "a socket"
                         : "not a regular file";
}

/* "PTX file 'x.ptx'" or "standard input", for messages. */
static const char *named(char *buf, size_t cap, const char *what, const char *path) {
    if (path)
        snprintf(buf, cap, "%s '%s'", what, path);
    else
        snprintf(buf, cap, "standard input");
    return buf;
}

static kiln_status too_big(kiln_error *err, const char *name, long long bytes, size_t limit) {
    char size[48] = "";
    if (bytes >= 0) snprintf(size, sizeof size, " (%lld bytes)", bytes);
    return kiln_fail(err, KILN_EINVAL,
                     "%s is larger%s than kiln's input limit of %zu MiB; set KILN_MAX_INPUT_MB to raise it", name, size,
                     limit >> 20);
}

/* Reads fd to its end, keeping at most limit bytes; more is an error. */
static kiln_status read_stream(int fd, size_t limit, size_t hint, const char *name, void **data, size_t *size,
                               kiln_error *err) {
    size_t cap = hint + 1 > 1 << 16 ? hint + 1 : 1 << 16, n = 0;
    if (cap > limit + 1) cap = limit + 1;
    char *buf = malloc(cap + 1);
    if (!buf) return kiln_fail(err, KILN_ENOMEM, "out of memory reading %s", name);
    for (;;) {
        if (n == cap) {
            if (cap > limit) {
                free(buf);
                return too_big(err, name, -1, limit);
            }
            size_t grown = cap * 2 > limit + 1 ? limit + 1 : cap * 2;
            char *b = realloc(buf, grown + 1);
            if (!b) {
                free(buf);
                return kiln_fail(err, KILN_ENOMEM, "out of memory reading %s (%zu bytes so far)", name, n);
            }
            buf = b, cap = grown;
        }
        ssize_t k = read(fd, buf + n, cap - n);
        if (k == 0) break;
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) {
            int e = errno;
            free(buf);
            return kiln_fail(err, KILN_EIO, "cannot read %s: %s", name, strerror(e));
        }
        n += (size_t)k;
    }
    if (n > limit) {
        free(buf);
        return too_big(err, name, -1, limit);
    }
    buf[n] = '\0'; /* a terminator past the data, for text readers */
    *data = buf;
    *size = n;
    return KILN_OK;
}

kiln_status kiln_read_input(const char *path, const char *what, void **data, size_t *size, kiln_error *err) {
    if (!data || !size) return kiln_fail(err, KILN_EINVAL, "kiln_read_input: NULL argument");
    *data = NULL, *size = 0;
    char name[1200];
    named(name, sizeof name, what ? what : "file", path);
    size_t limit;
    kiln_status s = kiln_input_limit(&limit, err);
    if (s) return s;
    int fd = path ? open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC) : 0;
    if (fd < 0)
        return kiln_fail(err, errno == ENOENT ? KILN_ENOTFOUND : KILN_EIO, "cannot open %s: %s", name, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        if (path) close(fd);
        return kiln_fail(err, KILN_EIO, "cannot read %s: %s", name, strerror(e));
    }
    if (S_ISREG(st.st_mode) && (unsigned long long)st.st_size > limit) {
        if (path) close(fd);
        return too_big(err, name, (long long)st.st_size, limit);
    }
    if (path && !S_ISREG(st.st_mode)) {
        close(fd);
        if (S_ISDIR(st.st_mode)) return kiln_fail(err, KILN_EIO, "%s is a directory", name);
        return kiln_fail(err, KILN_EINVAL,
                         "%s is %s, not a regular file: kiln reads only regular files by name", name,
                         file_kind(st.st_mode));
    }
    if (path && fcntl(fd, F_SETFL, 0) != 0) { /* blocking reads from here on (O_NONBLOCK guarded only the open) */
        int e = errno;
        close(fd);
        return kiln_fail(err, KILN_EIO, "cannot read %s: %s", name, strerror(e));
    }
    s = read_stream(fd, limit, S_ISREG(st.st_mode) ? (size_t)st.st_size : 0, name, data, size, err);
    if (path) close(fd);
    return s;
}
