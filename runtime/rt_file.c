/* runtime/rt_file.c - writes output files without ever replacing what is not a regular file.
 *
 * Every file kiln writes (kiln emit/bundle -o, --emit-c, the disk cache, KILN_DUMP_DIR dumps) goes
 * through rt_write_pieces. kiln often runs as root, where rename(2) over /dev/null would replace the
 * device node with a regular file, so the target decides how it is written:
 *   - a character or block device, a FIFO or a socket: opened and written in place;
 *   - a symbolic link: followed (chains too) and its final target written as below, the link kept;
 *   - a regular file or nothing: a temporary file beside the target, then rename(2) over it, so a
 *     reader never sees half a file; an existing file keeps its permission bits;
 *   - a directory: an error naming it.
 * rt_write_private (the disk cache's entries) never follows or writes into what is at the path: it
 * always writes a new 0600 file and renames it over whatever was there. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rt.h"

#define MAX_SYMLINK_HOPS 40

static atomic_uint tmp_counter;

static int write_all(int fd, const void *data, size_t len) {
    const char *p = data;
    while (len > 0) {
        ssize_t k = write(fd, p, len);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        p += k;
        len -= (size_t)k;
    }
    return 0;
}

static int write_pieces(int fd, const rt_piece *pieces, int n) {
    for (int i = 0; i < n; i++)
        if (write_all(fd, pieces[i].data, pieces[i].len) != 0) return -1;
    return 0;
}

rt_output_kind rt_output_resolve(const char *path, char *final, size_t size) {
    char cur[PATH_MAX];
    if (snprintf(cur, sizeof cur, "%s", path) >= (int)sizeof cur) return errno = ENAMETOOLONG, RT_OUT_ERROR;
    for (int hop = 0; hop <= MAX_SYMLINK_HOPS; hop++) {
        struct stat st;
        if (lstat(cur, &st) != 0) {
            if (errno != ENOENT) return RT_OUT_ERROR;
            if (snprintf(final, size, "%s", cur) >= (int)size) return errno = ENAMETOOLONG, RT_OUT_ERROR;
            return RT_OUT_REPLACE;
        }
        if (S_ISLNK(st.st_mode)) {
            char link[PATH_MAX];
            ssize_t k = readlink(cur, link, sizeof link - 1);
            if (k < 0) return RT_OUT_ERROR;
            link[k] = 0;
            char next[PATH_MAX];
            const char *slash = strrchr(cur, '/');
            if (link[0] == '/' || !slash) {
                if (snprintf(next, sizeof next, "%s", link) >= (int)sizeof next) return errno = ENAMETOOLONG, RT_OUT_ERROR;
            } else if (snprintf(next, sizeof next, "%.*s/%s", (int)(slash - cur), cur, link) >= (int)sizeof next) {
                return errno = ENAMETOOLONG, RT_OUT_ERROR;
            }
            memcpy(cur, next, strlen(next) + 1);
            continue;
        }
        if (snprintf(final, size, "%s", cur) >= (int)size) return errno = ENAMETOOLONG, RT_OUT_ERROR;
        if (S_ISDIR(st.st_mode)) return errno = EISDIR, RT_OUT_ERROR;
        return S_ISREG(st.st_mode) ? RT_OUT_REPLACE : RT_OUT_IN_PLACE;
    }
    return errno = ELOOP, RT_OUT_ERROR;
}

/* Writes into a temporary file beside final, then renames it over final. private_file: created 0600
 * (whatever was at final before); else 0666 less the umask, or the permission bits of the file replaced. */
static int replace_atomically(const char *final, const rt_piece *pieces, int n, bool sync, bool private_file) {
    char tmp[PATH_MAX + 64];
    const char *slash = strrchr(final, '/');
    int dirlen = slash ? (int)(slash - final) + 1 : 0;
    if (snprintf(tmp, sizeof tmp, "%.*s.%s.kiln-tmp.%ld.%u", dirlen, final, final + dirlen, (long)getpid(),
                 atomic_fetch_add(&tmp_counter, 1)) >= (int)sizeof tmp)
        return errno = ENAMETOOLONG, -1;
    struct stat old;
    bool existed = !private_file && stat(final, &old) == 0;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, private_file ? 0600 : 0666);
    if (fd < 0) return -1;
    int ok = write_pieces(fd, pieces, n) == 0;
    if (ok && existed) ok = fchmod(fd, old.st_mode & 07777) == 0;
    if (ok && sync) ok = fsync(fd) == 0;
    int e = errno;
    ok = close(fd) == 0 && ok;
    if (ok && rename(tmp, final) == 0) return 0;
    e = ok ? errno : e;
    unlink(tmp);
    return errno = e, -1;
}

static int write_in_place(const char *path, const rt_piece *pieces, int n) {
    int fd = open(path, O_WRONLY | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) return -1;
    int ok = write_pieces(fd, pieces, n) == 0;
    int e = errno;
    ok = close(fd) == 0 && ok;
    return ok ? 0 : (errno = e, -1);
}

int rt_write_pieces(const char *path, const rt_piece *pieces, int n, bool sync) {
    char final[PATH_MAX];
    switch (rt_output_resolve(path, final, sizeof final)) {
    case RT_OUT_IN_PLACE: return write_in_place(path, pieces, n);
    case RT_OUT_REPLACE: return replace_atomically(final, pieces, n, sync, false);
    default: return -1;
    }
}

int rt_write_private(const char *path, const rt_piece *pieces, int n) {
    return replace_atomically(path, pieces, n, true, true);
}

kiln_status kiln_write_file(const char *path, const void *data, size_t len, kiln_error *err) {
    if (!path || !*path) return kiln_fail(err, KILN_EINVAL, "kiln_write_file: empty output path");
    rt_piece piece = {data, len};
    if (rt_write_pieces(path, &piece, 1, false) != 0)
        return kiln_fail(err, KILN_EIO, "cannot write output file '%s': %s", path, strerror(errno));
    return KILN_OK;
}
