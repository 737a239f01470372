/* runtime/rt_ptxver.c - which PTX .version and .target each CUDA release accepts, and the driver check. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/runtime.h"
#include "rt.h"

/* The minimal .version of each .target (from the PTX ISA manual's "Target ISA notes"; ptxas and LLVM
 * agree except where noted). Shared with kiln lint (gen/gen_lint_table.c). */
static const kiln_ptx_target targets[] = {
    {"sm_50", 50, 40, 0},      {"sm_52", 52, 41, 0},      {"sm_53", 53, 42, 0},      {"sm_60", 60, 50, 0},
    {"sm_61", 61, 50, 0},      {"sm_62", 62, 50, 0},      {"sm_70", 70, 60, 0},      {"sm_72", 72, 61, 0},
    {"sm_75", 75, 63, 0},      {"sm_80", 80, 70, 0},      {"sm_86", 86, 71, 0},      {"sm_87", 87, 74, 0},
    {"sm_88", 88, 90, 0}, /* the manual and LLVM say 9.0; CUDA 13.0's ptxas takes 7.3 */
    {"sm_89", 89, 78, 0},      {"sm_90", 90, 78, 0},      {"sm_90a", 90, 80, 'a'},   {"sm_100", 100, 86, 0},
    {"sm_100a", 100, 86, 'a'}, {"sm_100f", 100, 88, 'f'}, {"sm_101", 101, 86, 0},    {"sm_101a", 101, 86, 'a'},
    {"sm_101f", 101, 88, 'f'}, {"sm_103", 103, 88, 0},    {"sm_103a", 103, 88, 'a'}, {"sm_103f", 103, 88, 'f'},
    {"sm_110", 110, 90, 0},    {"sm_110a", 110, 90, 'a'}, {"sm_110f", 110, 90, 'f'}, {"sm_120", 120, 87, 0},
    {"sm_120a", 120, 87, 'a'}, {"sm_120f", 120, 88, 'f'}, {"sm_121", 121, 88, 0},    {"sm_121a", 121, 88, 'a'},
    {"sm_121f", 121, 88, 'f'},
};

/* The PTX ISA manual's release history (PTX ISA <-> CUDA, up to 13.1 = 9.1; 13.2..13.4 follow the 13.x
 * pattern, 13.4 shipping PTX ISA 9.4) and the CUDA release notes for dropped SMs: 9.x/10.x build sm_30
 * and newer, 11.x sm_35, 12.x sm_50, 13.x sm_75. CUDA 12.6 stayed at PTX ISA 8.5. */
static const kiln_cuda_release releases[] = {
    {9000, 60, 30},  {9010, 61, 30},  {9020, 62, 30},  {10000, 63, 30}, {10010, 64, 30}, {10020, 65, 30},
    {11000, 70, 35}, {11010, 71, 35}, {11020, 72, 35}, {11030, 73, 35}, {11040, 74, 35}, {11050, 75, 35},
    {11060, 76, 35}, {11070, 77, 35}, {11080, 78, 35}, {12000, 80, 50}, {12010, 81, 50}, {12020, 82, 50},
    {12030, 83, 50}, {12040, 84, 50}, {12050, 85, 50}, {12060, 85, 50}, {12070, 86, 50}, {12080, 87, 50},
    {12090, 88, 50}, {13000, 90, 75}, {13010, 91, 75},
    {13020, 92, 75}, {13030, 93, 75}, {13040, 94, 75},
};
enum { NRELEASES = sizeof releases / sizeof releases[0] };

const kiln_ptx_target *kiln_ptx_targets(size_t *count) {
    *count = sizeof targets / sizeof targets[0];
    return targets;
}

const kiln_ptx_target *kiln_ptx_target_find(const char *name, size_t len) {
    char buf[32];
    if (len >= 8 && !memcmp(name, "compute_", 8)) { /* compute_XX means sm_XX */
        snprintf(buf, sizeof buf, "sm_%.*s", (int)(len - 8 < 20 ? len - 8 : 20), name + 8);
        name = buf, len = strlen(buf);
    }
    for (size_t i = 0; i < sizeof targets / sizeof targets[0]; i++)
        if (strlen(targets[i].name) == len && !memcmp(targets[i].name, name, len)) return &targets[i];
    return NULL;
}

const kiln_cuda_release *kiln_cuda_releases(size_t *count) {
    *count = NRELEASES;
    return releases;
}

const kiln_cuda_release *kiln_cuda_release_of(int version) {
    const kiln_cuda_release *best = NULL;
    for (int i = 0; i < NRELEASES; i++)
        if (releases[i].version <= version / 10 * 10) best = &releases[i];
    return best;
}

kiln_status kiln_cuda_parse_version(const char *text, int *version, kiln_error *err) {
    const char *t = text ? text : "";
    if (!strncmp(t, "cuda-", 5) || !strncmp(t, "CUDA-", 5)) t += 5;
    char *end = NULL;
    long major = strtol(t, &end, 10), minor = 0, v = -1;
    if (end != t && *end == '.' && end[1] >= '0' && end[1] <= '9') {
        minor = strtol(end + 1, &end, 10);
        if (!*end && major > 0 && major < 100 && minor >= 0 && minor < 10) v = major * 1000 + minor * 10;
    } else if (end != t && !*end && major >= 1000) {
        v = major;
    }
    for (int i = 0; v >= 0 && i < NRELEASES; i++)
        if (releases[i].version == v) {
            *version = (int)v;
            return KILN_OK;
        }
    char valid[512] = "";
    for (int i = 0; i < NRELEASES; i++)
        snprintf(valid + strlen(valid), sizeof valid - strlen(valid), "%s%d.%d", i ? ", " : "",
                 releases[i].version / 1000, releases[i].version % 1000 / 10);
    return kiln_fail(err, KILN_EINVAL, "unknown CUDA release '%s'; valid: %s (as X.Y or as cuDriverGetVersion's 12040)",
                     text ? text : "(null)", valid);
}

int kiln_cuda_knows_target(int version, const kiln_ptx_target *t) {
    const kiln_cuda_release *r = kiln_cuda_release_of(version);
    if (!r || !t) return 0;
    return t->ptx <= r->ptx;
}

/* Skips blanks and comments; returns the next position. */
static const char *skip(const char *p, const char *end, int *line) {
    while (p < end) {
        if (*p == '\n') {
            (*line)++, p++;
        } else if (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\f' || *p == '\v' || (unsigned char)*p >= 0x80) {
            p++;
        } else if (*p == '/' && p + 1 < end && p[1] == '/') {
            while (p < end && *p != '\n') p++;
        } else if (*p == '/' && p + 1 < end && p[1] == '*') {
            for (p += 2; p < end && !(*p == '*' && p + 1 < end && p[1] == '/'); p++) *line += *p == '\n';
            p = p < end ? p + 2 : end;
        } else {
            break;
        }
    }
    return p;
}

static size_t word_len(const char *p, const char *end) {
    size_t n = 0;
    while (p + n < end && (p[n] == '_' || p[n] == '.' || (p[n] >= '0' && p[n] <= '9') || (p[n] >= 'a' && p[n] <= 'z') ||
                           (p[n] >= 'A' && p[n] <= 'Z')))
        n++;
    return n;
}

/* The .version (times 10) and the governing (highest) .target of a module; both come before any code. */
static int read_header(const char *ptx, size_t len, int *version, const kiln_ptx_target **target) {
    const char *p = ptx, *end = ptx + len;
    int line = 1;
    *version = 0, *target = NULL;
    for (;;) {
        p = skip(p, end, &line);
        size_t n = word_len(p, end);
        if (n == 8 && !memcmp(p, ".version", 8)) {
            p = skip(p + 8, end, &line);
            int major = 0, minor = -1;
            while (p < end && *p >= '0' && *p <= '9') major = major * 10 + (*p++ - '0');
            if (p + 1 < end && *p == '.' && p[1] >= '0' && p[1] <= '9') minor = p[1] - '0', p += 2;
            if (minor < 0) return -1;
            *version = major * 10 + minor;
        } else if (n == 7 && !memcmp(p, ".target", 7)) {
            for (p += 7; p < end && *p != '\n' && *p != '\r' && *p != ';';) {
                p = skip(p, end, &line);
                size_t w = word_len(p, end);
                const kiln_ptx_target *t = w ? kiln_ptx_target_find(p, w) : NULL;
                if (t && (!*target || t->sm > (*target)->sm || (t->sm == (*target)->sm && t->suffix))) *target = t;
                p += w ? w : 1;
                if (p < end && *p == ',') p++;
                while (p < end && (*p == ' ' || *p == '\t')) p++;
            }
        } else if (n == 13 && !memcmp(p, ".address_size", 13)) {
            p += 13;
        } else if (n > 0 && p[0] >= '0' && p[0] <= '9') {
            p += n; /* .address_size's value */
        } else {
            break; /* the first other statement: the header is over */
        }
    }
    return *version && *target ? 0 : -1;
}

int kiln_ptx_driver_check(const char *ptx, size_t len, int driver_version, char *why, size_t cap) {
    int version;
    const kiln_ptx_target *t;
    if (why && cap) why[0] = '\0';
    if (!ptx || read_header(ptx, len, &version, &t) != 0) {
        if (why && cap) snprintf(why, cap, "no .version and known .target at the start of the PTX");
        return -1;
    }
    const kiln_cuda_release *r = kiln_cuda_release_of(driver_version), *newest = &releases[NRELEASES - 1];
    if (!r || driver_version / 10 * 10 > newest->version) return 1; /* a driver newer than the table */
    int dmaj = driver_version / 1000, dmin = driver_version % 1000 / 10;
    if (version > r->ptx) {
        const kiln_cuda_release *first = NULL;
        for (int i = 0; i < NRELEASES && !first; i++)
            if (releases[i].ptx >= version) first = &releases[i];
        char need[48];
        if (first)
            snprintf(need, sizeof need, "a CUDA %d.%d driver or newer", first->version / 1000,
                     first->version % 1000 / 10);
        else
            snprintf(need, sizeof need, "a driver newer than CUDA %d.%d", newest->version / 1000,
                     newest->version % 1000 / 10);
        if (why && cap)
            snprintf(why, cap,
                     ".version %d.%d needs %s; this driver is CUDA %d.%d, which loads PTX ISA up to %d.%d "
                     "(cuModuleLoadData would fail with CUDA_ERROR_UNSUPPORTED_PTX_VERSION); rebuild the PTX "
                     "with .version %d.%d or older",
                     version / 10, version % 10, need, dmaj, dmin, r->ptx / 10, r->ptx % 10, r->ptx / 10,
                     r->ptx % 10);
        return 0;
    }
    if (!kiln_cuda_knows_target(driver_version, t)) {
        if (why && cap)
            snprintf(why, cap, ".target %s is unknown to a CUDA %d.%d driver: it came with PTX ISA %d.%d", t->name,
                     dmaj, dmin, t->ptx / 10, t->ptx % 10);
        return 0;
    }
    return 1;
}

int rt_driver_loads_ptx(int driver_version, int ptx) {
    const kiln_cuda_release *r = kiln_cuda_release_of(driver_version);
    if (!r || driver_version / 10 * 10 > releases[NRELEASES - 1].version) return 1; /* unknown: let it try */
    return ptx <= r->ptx;
}
