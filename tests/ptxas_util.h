/* tests/ptxas_util.h - test helpers: find ptxas, run it on many PTX files in parallel. */
#ifndef KILN_TESTS_PTXAS_UTIL_H
#define KILN_TESTS_PTXAS_UTIL_H

#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kiln/target.h"

extern char **environ;

/* Path of ptxas ($PTXAS, $CUDA_HOME/bin, /usr/local/cuda/bin, PATH) or NULL. */
static inline const char *ptxas_path(void) {
    static char path[4096];
    const char *env = getenv("PTXAS");
    if (env && access(env, X_OK) == 0) return env;
    const char *home = getenv("CUDA_HOME");
    snprintf(path, sizeof path, "%s/bin/ptxas", home ? home : "/usr/local/cuda");
    if (access(path, X_OK) == 0) return path;
    const char *p = getenv("PATH");
    while (p && *p) {
        const char *e = strchr(p, ':');
        int n = e ? (int)(e - p) : (int)strlen(p);
        snprintf(path, sizeof path, "%.*s/ptxas", n, p);
        if (access(path, X_OK) == 0) return path;
        p = e ? e + 1 : NULL;
    }
    return NULL;
}

typedef struct ptxas_job {
    char ptx[512]; /* input file */
    char log[512]; /* where ptxas -v writes its output */
    char cubin[512]; /* where the cubin goes ("" = /dev/null) */
    int sm;
    pid_t pid;
    int status; /* exit status once finished */
    double cpu_s; /* its CPU seconds (user + system) once finished */
} ptxas_job;

static inline void ptxas_start(const char *ptxas, ptxas_job *j) {
    char gpu[32];
    kiln_sm_name(j->sm, gpu);
    char *argv[] = {(char *)ptxas, "--gpu-name", gpu, "-v", j->ptx, "-o", j->cubin[0] ? j->cubin : "/dev/null", NULL};
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, j->log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    if (posix_spawn(&j->pid, ptxas, &fa, NULL, argv, environ) != 0) j->pid = -1;
    posix_spawn_file_actions_destroy(&fa);
}

/* Runs every job, at most `parallel` at once; fills status (127 if it could not start). */
static inline void ptxas_run_all(const char *ptxas, ptxas_job *jobs, int n, int parallel) {
    int next = 0, running = 0;
    while (next < n || running > 0) {
        while (running < parallel && next < n) {
            ptxas_start(ptxas, &jobs[next]);
            if (jobs[next].pid < 0) jobs[next].status = 127;
            else running++;
            next++;
        }
        int st;
        struct rusage ru;
        pid_t pid = wait4(-1, &st, 0, &ru);
        if (pid < 0) break;
        for (int i = 0; i < next; i++)
            if (jobs[i].pid == pid) {
                jobs[i].status = WIFEXITED(st) ? WEXITSTATUS(st) : 128;
                jobs[i].cpu_s = (double)ru.ru_utime.tv_sec + (double)ru.ru_stime.tv_sec +
                                ((double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_usec) * 1e-6;
                jobs[i].pid = 0;
                running--;
            }
    }
}

/* Reads a whole file (NUL-terminated, malloc'd) or NULL. */
static inline char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) {
        buf[n] = 0;
        if (len) *len = (size_t)n;
    }
    return buf;
}

static inline int write_file(const char *path, const char *data, size_t len) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    int ok = fwrite(data, 1, len, f) == len;
    return (fclose(f) == 0 && ok) ? 0 : -1;
}

/* Sums "N bytes spill stores" and "N bytes spill loads" over a ptxas -v log; registers of
 * the last "Used N registers" line. */
static inline void ptxas_resources(const char *log, long *spill_bytes, int *registers, int *smem) {
    *spill_bytes = 0;
    *registers = -1;
    *smem = 0;
    for (const char *p = log; (p = strstr(p, "bytes spill")); p++) {
        const char *q = p - 1;
        while (q > log && q[-1] >= '0' && q[-1] <= '9') q--;
        *spill_bytes += atol(q);
    }
    for (const char *p = log; (p = strstr(p, "Used ")); p++) {
        *registers = atoi(p + 5);
        const char *s = strstr(p, " bytes smem");
        const char *eol = strchr(p, '\n');
        if (s && (!eol || s < eol)) {
            const char *q = s;
            while (q > p && q[-1] >= '0' && q[-1] <= '9') q--;
            *smem = atoi(q);
        }
    }
}

/* Instructions in PTX text: statements that are neither directives, labels, braces nor
 * comments (one per line, as LLVM prints them). */
static inline int ptx_instruction_count(const char *ptx) {
    int n = 0;
    for (const char *p = ptx; *p;) {
        const char *eol = strchr(p, '\n');
        size_t len = eol ? (size_t)(eol - p) : strlen(p);
        const char *c = p;
        while (c < p + len && (*c == ' ' || *c == '\t')) c++;
        const char *e = p + len;
        while (e > c && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r')) e--;
        if (c < e && ((*c >= 'a' && *c <= 'z') || *c == '@') && e[-1] == ';') n++;
        p = eol ? eol + 1 : p + len;
    }
    return n;
}

/* SASS instructions in a cubin: the bytes of its .text.* sections over 16 (every instruction
 * is 16 bytes on sm_70 and newer); -1 when the file is not a 64-bit ELF. */
static inline int cubin_sass_instructions(const char *path) {
    size_t len = 0;
    unsigned char *b = (unsigned char *)slurp(path, &len);
    int n = -1;
    if (b && len >= 64 && !memcmp(b, "\177ELF", 4) && b[4] == 2) {
        unsigned long long shoff;
        unsigned short shentsize, shnum, shstrndx;
        memcpy(&shoff, b + 0x28, 8);
        memcpy(&shentsize, b + 0x3a, 2);
        memcpy(&shnum, b + 0x3c, 2);
        memcpy(&shstrndx, b + 0x3e, 2);
        if (shentsize >= 64 && shstrndx < shnum && shoff + (unsigned long long)shnum * shentsize <= len) {
            const unsigned char *strh = b + shoff + (size_t)shstrndx * shentsize;
            unsigned long long stroff, strsize;
            memcpy(&stroff, strh + 0x18, 8);
            memcpy(&strsize, strh + 0x20, 8);
            n = 0;
            for (unsigned i = 0; i < shnum && stroff + strsize <= len; i++) {
                const unsigned char *sh = b + shoff + (size_t)i * shentsize;
                unsigned name;
                unsigned long long size;
                memcpy(&name, sh, 4);
                memcpy(&size, sh + 0x20, 8);
                if (name < strsize && !strncmp((const char *)b + stroff + name, ".text.", 6)) n += (int)(size / 16);
            }
        }
    }
    free(b);
    return n;
}

/* A bf16 instruction in PTX: any non-comment line with a ".bf16" type or modifier. */
static inline int ptx_bf16_line(const char *ptx) {
    int line = 1;
    for (const char *p = ptx; *p; line++) {
        const char *eol = strchr(p, '\n');
        size_t n = eol ? (size_t)(eol - p) : strlen(p);
        const char *c = p;
        while (c < p + n && (*c == ' ' || *c == '\t')) c++;
        if (!(c + 1 < p + n && c[0] == '/' && c[1] == '/')) {
            for (const char *s = c; s + 5 <= p + n; s++)
                if (!memcmp(s, ".bf16", 5)) return line;
        }
        p = eol ? eol + 1 : p + n;
    }
    return 0;
}

#endif
