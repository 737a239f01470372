/* tools/cmd_bundle.c - `kiln bundle` (generate variants in parallel into one bundle) and `kiln bundle-info`. */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <pthread.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"
#include "kiln/kiln.h"
#include "kiln/runtime.h"

extern char **environ;

/* A family's default matrix as its template declares it (K.bundle, docs/registry.md): its dtype keys
 * (a combination "a/b/c" assigns them in order; one dtype assigns all), its shape key with the default
 * shapes, for families whose work is a sequence of kernels the keys of each kernel (one spec per entry),
 * and whole specs the default set adds. */
typedef struct family_matrix {
    char family[KILN_NAME_MAX];
    kiln_bundle_matrix m;
} family_matrix;

enum { MAX_FAMILIES = 64 };
static family_matrix matrices[MAX_FAMILIES];
static int nmatrices;

/* Reads every family's declaration once; 0 or CLI_USAGE. */
static int load_matrices(void) {
    if (nmatrices) return CLI_OK;
    kiln_gen *gen;
    kiln_error err = {0};
    if (kiln_gen_create(&gen, NULL, &err) != KILN_OK) return cli_error("%s", err.msg);
    char names[MAX_FAMILIES][KILN_NAME_MAX];
    int n = kiln_families(gen, names, MAX_FAMILIES), rc = CLI_OK;
    for (int i = 0; i < n && rc == CLI_OK; i++) {
        snprintf(matrices[nmatrices].family, KILN_NAME_MAX, "%s", names[i]);
        if (kiln_family_bundle(gen, names[i], &matrices[nmatrices].m, &err) != KILN_OK) rc = cli_error("%s", err.msg);
        else if (matrices[nmatrices].m.declared) nmatrices++;
    }
    kiln_gen_destroy(gen);
    return rc;
}

/* Families with a default matrix, "a, b, c" (for messages). */
static char *matrix_names(char *buf, size_t size) {
    buf[0] = 0;
    for (int i = 0, k = 0; i < nmatrices; i++)
        if (matrices[i].m.dtype_keys[0])
            snprintf(buf + strlen(buf), size - strlen(buf), "%s%s", k++ ? ", " : "", matrices[i].family);
    return buf;
}

enum { MAX_SPECS = 4096, MAX_SMS = 16 };

typedef struct job {
    const char *spec;
    int sm;
    kiln_module *module;
    unsigned char *cubin;
    size_t cubin_size;
    kiln_error err;
} job;

typedef struct plan {
    char *specs[MAX_SPECS];
    int only_sm[MAX_SPECS]; /* 0: the spec on every SM of the list; else on this arch-specific SM alone (K.bundle.arch) */
    int nspecs;
    int sms[MAX_SMS], nsms;
    int cubin, threads;
    int cubin_sms[MAX_SMS], ncubin_sms; /* --cubin-sm: cubins for these SMs alone; none listed: every SM */
    const char *ptxas;
    job *jobs;
    int njobs;
    atomic_int next, done;
    pthread_mutex_t progress_lock;
    int show_progress;
} plan;

static void bundle_usage(FILE *to) {
    char names[512], shapes[1024] = "", spec[KILN_SPEC_MAX];
    if (load_matrices() != CLI_OK) return;
    matrix_names(names, sizeof names);
    const family_matrix *first = NULL;
    for (int i = 0; i < nmatrices; i++) /* each family's shape key and its default shapes, from its K.bundle */
        if (matrices[i].m.dtype_keys[0] && matrices[i].m.shape_key[0]) {
            if (!first) first = &matrices[i];
            snprintf(shapes + strlen(shapes), sizeof shapes - strlen(shapes), "\n                   %s: %s (default %s)",
                     matrices[i].family, matrices[i].m.shape_key, matrices[i].m.default_shapes);
        }
    fprintf(to,
            "usage: kiln bundle [FAMILY...] [--dtypes LIST] [--sm LIST] [--hidden LIST]\n"
            "                   [--spec SPEC]... [--spec-list FILE] [--cubin] [--cubin-sm LIST] [-j N]\n"
            "                   (-o FILE | --emit-c NAME)\n\n"
            "Generates kernel variants in parallel (one generator per thread) and writes one bundle\n"
            "that the runtime opens from a file or from memory; it picks, per device, a cubin for\n"
            "its exact SM, else the PTX of the highest SM not above it.\n\n"
            "  FAMILY...        families whose template declares a default matrix (K.bundle,\n"
            "                   docs/registry.md): %s\n"
            "                   (default: all of them, unless --spec or --spec-list is given; with\n"
            "                   neither --dtypes nor --hidden the default set adds the specs the\n"
            "                   templates list besides (K.bundle.extra): split-KV decoding and the\n"
            "                   kernel it names next, ...; and on sm_90a alone the kernels a template\n"
            "                   declares for it (K.bundle.arch))\n"
            "  --dtypes LIST    dtype combinations, comma-separated: one dtype for every tensor\n"
            "                   ('bf16') or one per dtype key joined by '/' ('bf16/f32/bf16': the\n"
            "                   dtype keys each template declares, in its order: kiln list shows\n"
            "                   them); default f32,f16,bf16\n"
            "  --sm LIST        target SMs, comma-separated (default: every SM from 75 up, see kiln list;\n"
            "                   the arch-specific 90a for every spec only when named, else for the\n"
            "                   default set's sm_90a kernels only, which a --sm list without 90a drops)\n"
            "  --hidden LIST    shapes, of the shape key each template declares (numbers, or 'launch'\n"
            "                   where the key takes it):%s\n",
            names, shapes);
    fprintf(to, "  --spec SPEC      one more spec (repeatable)\n"
            "  --spec-list F    specs from file F, one per line, '#' starts a comment\n"
            "  --cubin          also store cubins assembled with ptxas ($CUDA_HOME/bin,\n"
            "                   /usr/local/cuda/bin or PATH)\n"
            "  --cubin-sm LIST  cubins for these SMs of --sm alone (the GPUs the bundle is carried\n"
            "                   to), PTX for all; implies --cubin\n"
            "  -j N             generator threads (default: every core)\n"
            "  -o FILE          write the bundle to FILE\n"
            "  --emit-c NAME    write NAME.c and NAME.h embedding the bundle as NAME_data/NAME_size\n\n");
    cli_print_examples(NULL, NULL, 0, spec, sizeof spec);
    if (first) fprintf(to, "example: kiln bundle %s --dtypes bf16,f16 --sm 75,80,90 -o %s.kbundle\n", first->family, first->family);
    if (spec[0]) fprintf(to, "         kiln bundle --spec '%s' --sm 80 -o one.kbundle\n", spec);
}

static const family_matrix *find_matrix(const char *family) {
    for (int i = 0; i < nmatrices; i++)
        if (!strcmp(matrices[i].family, family) && matrices[i].m.dtype_keys[0]) return &matrices[i];
    return NULL;
}

static int add_spec_on(plan *p, const char *spec, int only_sm) {
    if (p->nspecs == MAX_SPECS) return cli_error("too many specs (at most %d)", MAX_SPECS);
    if (!(p->specs[p->nspecs] = strdup(spec))) return cli_error("out of memory");
    p->only_sm[p->nspecs++] = only_sm;
    return CLI_OK;
}

static int add_spec(plan *p, const char *spec) { return add_spec_on(p, spec, 0); }

/* The default set's specs for arch-specific SMs (K.bundle.arch lines "90a SPEC"), each on its SM alone, when sms_given
 * is 0 (the default list) or the --sm list names that SM. */
static int add_arch_specs(plan *p, const char *lines, const char *sm_list, int sms_given) {
    char text[sizeof ((kiln_bundle_matrix *)0)->arch], list[256];
    snprintf(text, sizeof text, "%s", lines);
    int rc = CLI_OK;
    for (char *save = NULL, *l = strtok_r(text, "\n", &save); l && rc == CLI_OK; l = strtok_r(NULL, "\n", &save)) {
        char *spec = strchr(l, ' ');
        if (!spec) continue;
        *spec++ = 0;
        int sm = kiln_sm_parse(l), named = !sms_given;
        snprintf(list, sizeof list, "%s", sm_list);
        for (char *s2 = NULL, *w = strtok_r(list, ",", &s2); w && !named; w = strtok_r(NULL, ",", &s2)) named = kiln_sm_parse(w) == sm;
        if (sm > 0 && named) rc = add_spec_on(p, spec, sm);
    }
    return rc;
}

/* Splits text at commas into words (modifies text); returns the count. */
static int split_list(char *text, char **words, int cap) {
    int n = 0;
    for (char *save = NULL, *w = strtok_r(text, ",", &save); w && n < cap; w = strtok_r(NULL, ",", &save)) words[n++] = w;
    return n;
}

/* "bf16" or "bf16/f32/bf16" -> "x=bf16 w=f32 y=bf16" for the family's dtype keys. */
static int dtype_assignments(const family_matrix *fm, char *combo, char *out, size_t size) {
    char *parts[8], *keys[8], kbuf[sizeof fm->m.dtype_keys];
    int n = 0, nkeys = 0;
    snprintf(kbuf, sizeof kbuf, "%s", fm->m.dtype_keys);
    for (char *save = NULL, *w = strtok_r(kbuf, ",", &save); w && nkeys < 8; w = strtok_r(NULL, ",", &save)) keys[nkeys++] = w;
    for (char *save = NULL, *w = strtok_r(combo, "/", &save); w && n < 8; w = strtok_r(NULL, "/", &save)) parts[n++] = w;
    if (n != 1 && n != nkeys) {
        char shown[sizeof kbuf];
        snprintf(shown, sizeof shown, "%s", fm->m.dtype_keys);
        for (char *c = shown; *c; c++) *c = *c == ',' ? '/' : *c;
        return cli_error("dtype combination has %d parts; valid for %s: 1 dtype or %d (%s)", n, fm->family, nkeys, shown);
    }
    size_t k = 0;
    out[0] = 0;
    for (int i = 0; i < nkeys; i++) {
        kiln_dtype t;
        const char *d = parts[n == 1 ? 0 : i];
        if (kiln_dtype_parse(d, &t) != 0) return cli_error("unknown dtype '%s'; valid: f32, f16, bf16", d);
        k += (size_t)snprintf(out + k, size - k, " %s=%s", keys[i], kiln_dtype_name(t));
    }
    return CLI_OK;
}

/* Adds family x dtype combinations x shapes (x the kernels of a sequence). */
static int add_matrix(plan *p, const char *family, const char *dtypes, const char *shapes) {
    const family_matrix *fm = find_matrix(family);
    if (!fm) {
        char valid[512];
        return cli_error("no default matrix for family '%s'; valid: %s (use --spec for others)", family,
                         matrix_names(valid, sizeof valid));
    }
    const kiln_bundle_matrix *m = &fm->m;
    char dbuf[512], sbuf[512], kbuf[sizeof m->kernels], *combos[64], *sizes[64], *kernels[16];
    snprintf(dbuf, sizeof dbuf, "%s", dtypes ? dtypes : "f32,f16,bf16");
    snprintf(sbuf, sizeof sbuf, "%s", shapes && m->shape_key[0] ? shapes : m->shape_key[0] ? m->default_shapes : "-");
    snprintf(kbuf, sizeof kbuf, "%s", m->kernels);
    int nc = split_list(dbuf, combos, 64), ns = split_list(sbuf, sizes, 64), nk = split_list(kbuf, kernels, 16);
    for (int c = 0; c < nc; c++) {
        char assign[256], combo[64], spec[KILN_SPEC_MAX];
        snprintf(combo, sizeof combo, "%s", combos[c]);
        if (dtype_assignments(fm, combo, assign, sizeof assign)) return CLI_USAGE;
        for (int s = 0; s < ns; s++)
            for (int k = 0; k == 0 || k < nk; k++) {
                int n = m->shape_key[0] ? snprintf(spec, sizeof spec, "%s%s %s=%s", family, assign, m->shape_key, sizes[s])
                                        : snprintf(spec, sizeof spec, "%s%s", family, assign);
                if (nk) snprintf(spec + n, sizeof spec - (size_t)n, " %s", kernels[k]);
                if (add_spec(p, spec)) return CLI_USAGE;
            }
    }
    return CLI_OK;
}

/* One spec a line, '#' starts a comment; the file is read within kiln's input limit (not a FIFO or a device). */
static int add_spec_file(plan *p, const char *path) {
    void *data = NULL;
    size_t size = 0;
    kiln_error err = {0};
    if (kiln_read_input(path, "spec list", &data, &size, &err) != KILN_OK) return cli_error("%s", err.msg);
    char *text = data;
    int rc = CLI_OK, lineno = 0;
    if (memchr(text, '\0', size)) rc = cli_error("spec list '%s' is binary data, not text (a NUL byte)", path);
    for (char *line = text; rc == CLI_OK && line < text + size;) {
        char *end = memchr(line, '\n', (size_t)(text + size - line));
        if (end) *end = '\0';
        lineno++;
        line[strcspn(line, "#\r")] = 0;
        char *s = line;
        while (isspace((unsigned char)*s)) s++;
        if (strlen(s) >= KILN_SPEC_MAX)
            rc = cli_error("spec list '%s', line %d: a spec longer than %d characters", path, lineno, KILN_SPEC_MAX - 1);
        else if (*s)
            rc = add_spec(p, s);
        line = end ? end + 1 : text + size;
    }
    free(data);
    return rc;
}

static int parse_sms(plan *p, char *list) {
    char *words[MAX_SMS];
    p->nsms = split_list(list, words, MAX_SMS);
    for (int i = 0; i < p->nsms; i++)
        if (cli_parse_sm(words[i], &p->sms[i])) return CLI_USAGE;
    return p->nsms ? CLI_OK : cli_error("--sm needs at least one SM");
}

/* --cubin-sm's list: each SM must be one of --sm's (a cubin for an SM the bundle has no PTX for is a mistake). */
static int parse_cubin_sms(plan *p, char *list) {
    char *words[MAX_SMS], valid[256] = "";
    int n = split_list(list, words, MAX_SMS);
    for (int i = 0; i < p->nsms; i++) {
        char name[16];
        snprintf(valid + strlen(valid), sizeof valid - strlen(valid), "%s%s", i ? ", " : "", kiln_sm_name(p->sms[i], name) + 3);
    }
    for (int i = 0; i < n; i++) {
        if (cli_parse_sm(words[i], &p->cubin_sms[i])) return CLI_USAGE;
        int listed = 0;
        for (int k = 0; k < p->nsms; k++) listed |= p->sms[k] == p->cubin_sms[i];
        if (!listed) return cli_error("--cubin-sm %s is not one of --sm's SMs (%s)", words[i], valid);
    }
    p->ncubin_sms = n;
    return n ? CLI_OK : cli_error("--cubin-sm needs at least one SM of --sm (%s)", valid);
}

/* Whether the bundle stores a cubin for sm (--cubin, narrowed by --cubin-sm). */
static int wants_cubin(const plan *p, int sm) {
    if (!p->cubin) return 0;
    if (!p->ncubin_sms) return 1;
    for (int i = 0; i < p->ncubin_sms; i++)
        if (p->cubin_sms[i] == sm) return 1;
    return 0;
}

/* Replaces every spec by its canonical form (errors here, before any work) and drops repeats. */
static int canonicalize(plan *p) {
    kiln_gen *gen;
    kiln_error err;
    if (kiln_gen_create(&gen, NULL, &err) != KILN_OK) return cli_error("%s", err.msg);
    int n = 0, rc = CLI_OK;
    for (int i = 0; i < p->nspecs && rc == CLI_OK; i++) {
        char canon[KILN_SPEC_MAX];
        if (kiln_canonical_spec(gen, p->specs[i], canon, sizeof canon, &err) != KILN_OK) {
            rc = cli_error("%s", err.msg);
            break;
        }
        int dup = 0, only = p->only_sm[i];
        for (int j = 0; j < n && !dup; j++) dup = !strcmp(p->specs[j], canon) && p->only_sm[j] == only;
        free(p->specs[i]);
        p->specs[i] = NULL;
        if (!dup) p->only_sm[n] = only, p->specs[n++] = strdup(canon);
    }
    for (int i = n; i < p->nspecs; i++) free(p->specs[i]), p->specs[i] = NULL;
    p->nspecs = n;
    kiln_gen_destroy(gen);
    return rc;
}

/* ---- ptxas ---- */

static const char *find_ptxas(void) {
    static char path[4096];
    const char *home = getenv("CUDA_HOME"), *env_path = getenv("PATH");
    if (home && snprintf(path, sizeof path, "%s/bin/ptxas", home) < (int)sizeof path && access(path, X_OK) == 0) return path;
    if (access("/usr/local/cuda/bin/ptxas", X_OK) == 0) return "/usr/local/cuda/bin/ptxas";
    char dirs[4096];
    snprintf(dirs, sizeof dirs, "%s", env_path ? env_path : "");
    for (char *save = NULL, *d = strtok_r(dirs, ":", &save); d; d = strtok_r(NULL, ":", &save))
        if (snprintf(path, sizeof path, "%s/ptxas", d) < (int)sizeof path && access(path, X_OK) == 0) return path;
    return NULL;
}

static unsigned char *read_all(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = n > 0 ? malloc((size_t)n) : NULL;
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    *size = buf ? (size_t)n : 0;
    return buf;
}

/* Assembles j's PTX for its SM; fills j->cubin or j->err (with ptxas's own first error line). */
static void assemble(const plan *p, job *j) {
    char dir[] = "/tmp/kiln_bundle_XXXXXX", ptx[64], cubin[64], log[64], gpu[16];
    if (!mkdtemp(dir)) {
        kiln_fail(&j->err, KILN_EIO, "cannot create a temporary directory: %s", strerror(errno));
        return;
    }
    snprintf(ptx, sizeof ptx, "%s/k.ptx", dir);
    snprintf(cubin, sizeof cubin, "%s/k.cubin", dir);
    snprintf(log, sizeof log, "%s/log", dir);
    kiln_sm_name(j->sm, gpu);
    FILE *f = fopen(ptx, "wb");
    int ok = f && fwrite(kiln_module_text(j->module), 1, kiln_module_size(j->module), f) == kiln_module_size(j->module);
    if (f) ok = fclose(f) == 0 && ok;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 2, log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    char *argv[] = {(char *)p->ptxas, "--gpu-name", gpu, "-O3", "-o", cubin, ptx, NULL};
    pid_t pid;
    int status = -1;
    if (ok && posix_spawn(&pid, p->ptxas, &fa, NULL, argv, environ) == 0) waitpid(pid, &status, 0);
    posix_spawn_file_actions_destroy(&fa);
    if (status == 0) j->cubin = read_all(cubin, &j->cubin_size);
    if (!j->cubin) {
        size_t n = 0;
        char *text = (char *)read_all(log, &n);
        if (text) text[n - 1] = 0;
        kiln_fail(&j->err, KILN_EGEN, "ptxas failed for '%s' (%s): %s", j->spec, gpu, text ? text : "no output");
        free(text);
    }
    unlink(ptx), unlink(cubin), unlink(log), rmdir(dir);
}

/* ---- parallel generation ---- */

static void progress(plan *p) {
    int done = atomic_fetch_add(&p->done, 1) + 1;
    if (!p->show_progress) return;
    pthread_mutex_lock(&p->progress_lock);
    fprintf(stderr, "\rkiln bundle: %d/%d variants", done, p->njobs);
    pthread_mutex_unlock(&p->progress_lock);
}

static void *worker(void *arg) {
    plan *p = arg;
    kiln_gen *gen = NULL;
    kiln_error err;
    kiln_status gst = kiln_gen_create(&gen, NULL, &err);
    for (int i; (i = atomic_fetch_add(&p->next, 1)) < p->njobs;) {
        job *j = &p->jobs[i];
        if (gst != KILN_OK) j->err = err;
        else if (kiln_generate(gen, j->spec, j->sm, KILN_EMIT_PTX, &j->module, &j->err) == KILN_OK && wants_cubin(p, j->sm))
            assemble(p, j);
        progress(p);
    }
    kiln_gen_destroy(gen);
    return NULL;
}

/* Whether spec s runs on SM sm of the list: a plain spec on each, an arch spec (only_sm) on its own SM unless the same
 * spec is in the plain set and the list holds that SM (its plain job is the same kernel). */
static int job_wanted(const plan *p, int s, int sm) {
    if (!p->only_sm[s]) return 1;
    if (sm != p->only_sm[s]) return 0;
    for (int j = 0; j < p->nspecs; j++)
        if (!p->only_sm[j] && !strcmp(p->specs[j], p->specs[s]))
            for (int m = 0; m < p->nsms; m++)
                if (p->sms[m] == sm) return 0;
    return 1;
}

static int run_jobs(plan *p) {
    int arch_sms[MAX_SPECS], narch = 0;
    for (int s = 0; s < p->nspecs; s++) /* an arch spec's SM may be outside the list (the default list leaves 90a out) */
        if (p->only_sm[s] && job_wanted(p, s, p->only_sm[s])) arch_sms[narch++] = s;
    p->njobs = 0;
    p->jobs = calloc((size_t)(p->nspecs * p->nsms + narch) + 1, sizeof *p->jobs);
    if (!p->jobs) return cli_error("out of memory");
    for (int s = 0; s < p->nspecs; s++)
        for (int m = 0; m < p->nsms; m++)
            if (!p->only_sm[s]) p->jobs[p->njobs++] = (job){.spec = p->specs[s], .sm = p->sms[m]};
    for (int a = 0; a < narch; a++) p->jobs[p->njobs++] = (job){.spec = p->specs[arch_sms[a]], .sm = p->only_sm[arch_sms[a]]};
    int nt = p->threads < p->njobs ? p->threads : p->njobs;
    pthread_t t[256];
    pthread_mutex_init(&p->progress_lock, NULL);
    for (int i = 0; i < nt; i++) pthread_create(&t[i], NULL, worker, p);
    for (int i = 0; i < nt; i++) pthread_join(t[i], NULL);
    pthread_mutex_destroy(&p->progress_lock);
    if (p->show_progress) fputc('\n', stderr);
    for (int i = 0; i < p->njobs; i++)
        if (p->jobs[i].err.msg[0] && (!p->jobs[i].module || (wants_cubin(p, p->jobs[i].sm) && !p->jobs[i].cubin)))
            return cli_error("%s", p->jobs[i].err.msg);
    return CLI_OK;
}

/* ---- output ---- */

static int build_bundle(const plan *p, void **data, size_t *size) {
    kiln_bundle_writer *w;
    kiln_error err;
    char producer[128];
    snprintf(producer, sizeof producer, "kiln %s; LLVM %s", KILN_VERSION_STRING, kiln_llvm_version());
    if (kiln_bundle_writer_create(&w, producer, &err) != KILN_OK) return cli_error("%s", err.msg);
    kiln_status st = KILN_OK;
    for (int i = 0; i < p->njobs && st == KILN_OK; i++) {
        const job *j = &p->jobs[i];
        st = kiln_bundle_writer_add(w, kiln_module_meta(j->module), KILN_PAYLOAD_PTX, kiln_module_text(j->module),
                                    kiln_module_size(j->module) + 1, &err);
        if (st == KILN_OK && j->cubin)
            st = kiln_bundle_writer_add(w, kiln_module_meta(j->module), KILN_PAYLOAD_CUBIN, j->cubin, j->cubin_size, &err);
    }
    if (st == KILN_OK) st = kiln_bundle_writer_finish(w, data, size, &err);
    kiln_bundle_writer_destroy(w);
    return st == KILN_OK ? CLI_OK : cli_error("%s", err.msg);
}

/* NAME's basename as a C identifier. */
static void c_identifier(const char *name, char *out, size_t size) {
    const char *base = strrchr(name, '/') ? strrchr(name, '/') + 1 : name;
    size_t n = 0;
    if (isdigit((unsigned char)*base)) out[n++] = '_';
    for (; *base && n + 1 < size; base++) out[n++] = isalnum((unsigned char)*base) ? *base : '_';
    out[n] = 0;
}

static int emit_c(const char *name, const unsigned char *data, size_t size, int nentries) {
    char id[256], path[4096], hdr[1024];
    c_identifier(name, id, sizeof id);
    if (!id[0]) return cli_error("--emit-c needs a name, e.g. --emit-c build/my_kernels");
    const char *base = strrchr(name, '/') ? strrchr(name, '/') + 1 : name;
    int hl = snprintf(hdr, sizeof hdr,
                      "/* %s.h - kiln kernel bundle (%d entries), generated by kiln bundle --emit-c. */\n"
                      "#ifndef KILN_BUNDLE_%s_H\n#define KILN_BUNDLE_%s_H\n#include <stddef.h>\n"
                      "/* Open with kiln_rt_add_bundle_memory(rt, %s_data, %s_size, &err). */\n"
                      "extern const unsigned char %s_data[];\nextern const size_t %s_size;\n#endif\n",
                      base, nentries, id, id, id, id, id, id);
    size_t cap = size * 6 + 1024, n = 0; /* "0xNN," per byte, a newline per 20 */
    char *c = malloc(cap);
    if (!c) return cli_error("out of memory");
    n += (size_t)snprintf(c, cap, "/* %s.c - kiln kernel bundle, generated by kiln bundle --emit-c. */\n"
                                  "#include \"%s.h\"\n_Alignas(64) const unsigned char %s_data[%zu] = {",
                          base, base, id, size);
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < size; i++) {
        if (i % 20 == 0) c[n++] = '\n';
        c[n++] = '0', c[n++] = 'x', c[n++] = hex[data[i] >> 4], c[n++] = hex[data[i] & 15], c[n++] = ',';
    }
    n += (size_t)snprintf(c + n, cap - n, "\n};\nconst size_t %s_size = %zu;\n", id, size);
    snprintf(path, sizeof path, "%s.h", name);
    int rc = cli_write_output(path, hdr, (size_t)hl);
    snprintf(path, sizeof path, "%s.c", name);
    if (rc == CLI_OK) rc = cli_write_output(path, c, n);
    free(c);
    return rc;
}

static void plan_free(plan *p) {
    for (int i = 0; i < p->nspecs; i++) free(p->specs[i]);
    for (int i = 0; p->jobs && i < p->njobs; i++) {
        kiln_module_free(p->jobs[i].module);
        free(p->jobs[i].cubin);
    }
    free(p->jobs);
}

static int parse_options(plan *p, int argc, char **argv, const char **out, const char **cname) {
    static const struct option longopts[] = {
        {"dtypes", required_argument, NULL, 'd'}, {"sm", required_argument, NULL, 's'},
        {"hidden", required_argument, NULL, 'H'}, {"spec", required_argument, NULL, 'S'},
        {"spec-list", required_argument, NULL, 'L'}, {"cubin", no_argument, NULL, 'c'},
        {"cubin-sm", required_argument, NULL, 'B'},
        {"emit-c", required_argument, NULL, 'C'}, {"output", required_argument, NULL, 'o'},
        {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
    const char *dtypes = NULL, *shapes = NULL;
    int c, rc = CLI_OK, explicit_specs = 0, sms_given = 0;
    char sms[256], cubin_sms[256] = "";
    cli_sm_list(sms, sizeof sms, 75, false, ",");
    opterr = 0;
    optind = 1;
    while (rc == CLI_OK && (c = getopt_long(argc, argv, ":o:j:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'd': dtypes = optarg; break;
        case 's': snprintf(sms, sizeof sms, "%s", optarg), sms_given = 1; break;
        case 'H': shapes = optarg; break;
        case 'S': rc = add_spec(p, optarg), explicit_specs = 1; break;
        case 'L': rc = add_spec_file(p, optarg), explicit_specs = 1; break;
        case 'c': p->cubin = 1; break;
        case 'B':
            snprintf(cubin_sms, sizeof cubin_sms, "%s", optarg), p->cubin = 1;
            if (!cubin_sms[strspn(cubin_sms, ", ")]) rc = cli_error("--cubin-sm needs at least one SM of --sm");
            break;
        case 'C': *cname = optarg; break;
        case 'o': *out = optarg; break;
        case 'j':
            p->threads = atoi(optarg);
            if (p->threads < 1 || p->threads > 256) rc = cli_error("bad -j '%s'; valid: 1..256", optarg);
            break;
        case 'h': bundle_usage(stdout); return -1;
        default: return cli_bad_option("bundle", longopts, c, argv, optind);
        }
    }
    if (rc != CLI_OK) return rc;
    if (rc == CLI_OK) rc = load_matrices();
    for (int i = optind; i < argc && rc == CLI_OK; i++) rc = add_matrix(p, argv[i], dtypes, shapes);
    int defaults = optind == argc && !explicit_specs;
    for (int i = 0; rc == CLI_OK && defaults && i < nmatrices; i++)
        if (matrices[i].m.dtype_keys[0]) rc = add_matrix(p, matrices[i].family, dtypes, shapes);
    /* the specs the templates add to the default set (split-KV decoding: the split kernel and the kernel
     * its meta names next, for f16/bf16 at head_dim 64 and 128); the default bundle is over its
     * generation budget already, so no more (others by --spec) */
    for (int i = 0; rc == CLI_OK && defaults && !dtypes && !shapes && i < nmatrices; i++) {
        char extra[sizeof matrices[i].m.extra];
        snprintf(extra, sizeof extra, "%s", matrices[i].m.extra);
        for (char *save = NULL, *l = strtok_r(extra, "\n", &save); l && rc == CLI_OK; l = strtok_r(NULL, "\n", &save))
            rc = add_spec(p, l);
    }
    /* the kernels an arch-specific SM has of its own (K.bundle.arch: attention's path=wgmma on sm_90a), on that SM */
    for (int i = 0; rc == CLI_OK && defaults && !dtypes && !shapes && i < nmatrices; i++)
        rc = add_arch_specs(p, matrices[i].m.arch, sms, sms_given);
    if (rc == CLI_OK) rc = parse_sms(p, sms);
    if (rc == CLI_OK && cubin_sms[0]) rc = parse_cubin_sms(p, cubin_sms);
    if (rc == CLI_OK && !*out && !*cname) rc = cli_error("missing output: give -o FILE and/or --emit-c NAME");
    if (rc == CLI_OK && p->cubin && !(p->ptxas = find_ptxas()))
        rc = cli_error("--cubin needs ptxas: none in $CUDA_HOME/bin, /usr/local/cuda/bin or PATH");
    return rc;
}

int cmd_bundle(int argc, char **argv) {
    plan *p = calloc(1, sizeof *p);
    const char *out = NULL, *cname = NULL;
    if (!p) return cli_error("out of memory");
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    p->threads = cores > 0 ? (int)cores : 1;
    p->show_progress = isatty(2);
    int rc = parse_options(p, argc, argv, &out, &cname);
    if (rc == CLI_OK) rc = canonicalize(p);
    if (rc == CLI_OK && p->nspecs == 0) rc = cli_error("no specs to generate");
    if (rc == CLI_OK) rc = run_jobs(p);
    void *data = NULL;
    size_t size = 0;
    if (rc == CLI_OK) rc = build_bundle(p, &data, &size);
    if (rc == CLI_OK && out) rc = cli_write_output(out, data, size);
    int nentries = p->njobs;
    for (int i = 0; i < p->njobs; i++) nentries += p->jobs[i].cubin != NULL;
    if (rc == CLI_OK && cname) rc = emit_c(cname, data, size, nentries);
    free(data);
    plan_free(p);
    free(p);
    return rc < 0 ? CLI_OK : rc;
}

/* ---- bundle-info ---- */

int cmd_bundle_info(int argc, char **argv) {
    if (argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        printf("usage: kiln bundle-info FILE\n\nChecks a bundle (header, table, every checksum) and lists its "
               "entries: SM, kind, PTX ISA version, size, launch geometry, spec.\n");
        return CLI_OK;
    }
    if (argc != 2) return cli_error("usage: kiln bundle-info FILE");
    kiln_bundle *b;
    kiln_error err;
    if (kiln_bundle_open_file(argv[1], &b, &err) != KILN_OK) return cli_error("%s", err.msg);
    printf("%s: kiln bundle, %d entries, made by %s\n", argv[1], kiln_bundle_count(b), kiln_bundle_producer(b));
    printf("%4s %5s %-5s %4s %8s %-12s %5s  %s\n", "#", "sm", "kind", "ptx", "bytes", "block", "align", "spec");
    for (int i = 0; i < kiln_bundle_count(b); i++) {
        kiln_bundle_entry e;
        kiln_bundle_entry_at(b, i, &e, NULL);
        char block[40];
        snprintf(block, sizeof block, "%ux%ux%u", e.meta->block[0], e.meta->block[1], e.meta->block[2]);
        char sm[16];
        printf("%4d %5s %-5s %2d.%d %8llu %-12s %5u  %s\n", i, kiln_sm_name(e.sm, sm) + 3, e.kind == KILN_PAYLOAD_CUBIN ? "cubin" : "ptx",
               e.ptx_version / 10, e.ptx_version % 10, (unsigned long long)e.size, block, e.meta->align_bytes, e.spec);
    }
    kiln_bundle_close(b);
    return CLI_OK;
}
