/* runtime/rt_meta.c - writes and reads the "// kiln.meta" comment block carried in PTX. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/kernel.h"

#define META_PREFIX "// kiln.meta "

static const char *param_kind_names[] = {"ptr", "i32", "i64", "f32", "tensormap"};

int kiln_meta_format(const kiln_kernel_meta *m, char *buf, size_t size) {
    size_t n = 0;
#define EMIT(...)                                                                             \
    do {                                                                                      \
        int k_ = snprintf(buf ? buf + (n < size ? n : size) : NULL, n < size ? size - n : 0, \
                          __VA_ARGS__);                                                      \
        if (k_ < 0) return -1;                                                                \
        n += (size_t)k_;                                                                      \
    } while (0)
    EMIT(META_PREFIX "version 1\n");
    EMIT(META_PREFIX "family %s\n", m->family);
    EMIT(META_PREFIX "spec %s\n", m->spec);
    EMIT(META_PREFIX "entry %s\n", m->entry);
    EMIT(META_PREFIX "target %d %d\n", m->sm, m->ptx_version);
    EMIT(META_PREFIX "block %u %u %u\n", m->block[0], m->block[1], m->block[2]);
    EMIT(META_PREFIX "grid_tile %u %u %u\n", m->grid_tile[0], m->grid_tile[1], m->grid_tile[2]);
    EMIT(META_PREFIX "smem %u %u\n", m->static_smem, m->dynamic_smem);
    EMIT(META_PREFIX "align %u\n", m->align_bytes);
    EMIT(META_PREFIX "rows %u %u\n", m->rows_per_block, m->threads_per_row);
    if (m->ws_slabs) EMIT(META_PREFIX "workspace %u %u\n", m->ws_slabs, m->ws_rows_per_block);
    if (m->then_spec[0]) EMIT(META_PREFIX "then %s\n", m->then_spec);
    for (const char *l = m->launch; *l;) { /* the launch description, a line each */
        size_t k = strcspn(l, "\n");
        EMIT(META_PREFIX "%.*s\n", (int)k, l);
        l += k + (l[k] == '\n');
    }
    for (int i = 0; i < m->nparams; i++)
        EMIT(META_PREFIX "param %s %s %s\n", param_kind_names[m->params[i].kind],
             kiln_dtype_name(m->params[i].dtype), m->params[i].name);
    EMIT(META_PREFIX "end\n");
#undef EMIT
    return (int)n;
}

/* The keys of the launch description (docs/registry.md). */
static int is_launch_key(const char *key) {
    static const char *const keys[] = {"tensor", "scalar", "stride", "problem", "before", "after", "tmap"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (!strcmp(key, keys[i])) return 1;
    return 0;
}

/* Copies the rest of a meta line (up to '\n' or '\r') into dst. */
static int copy_value(const char *p, const char *end, char *dst, size_t cap) {
    size_t k = 0;
    while (p < end && *p != '\n' && *p != '\r') {
        if (k + 1 >= cap) return -1;
        dst[k++] = *p++;
    }
    dst[k] = 0;
    return 0;
}

static int parse_line(kiln_kernel_meta *m, const char *key, const char *val, size_t vlen,
                      const char *end) {
    char tmp[KILN_SPEC_MAX];
    if (copy_value(val, end, tmp, sizeof tmp) != 0) return -1;
    (void)vlen;
    if (!strcmp(key, "version")) return atoi(tmp) == 1 ? 0 : -1;
    if (!strcmp(key, "family")) return snprintf(m->family, sizeof m->family, "%s", tmp) < (int)sizeof m->family ? 0 : -1;
    if (!strcmp(key, "spec")) return snprintf(m->spec, sizeof m->spec, "%s", tmp) < (int)sizeof m->spec ? 0 : -1;
    if (!strcmp(key, "entry")) return snprintf(m->entry, sizeof m->entry, "%s", tmp) < (int)sizeof m->entry ? 0 : -1;
    if (!strcmp(key, "target")) return sscanf(tmp, "%d %d", &m->sm, &m->ptx_version) == 2 ? 0 : -1;
    if (!strcmp(key, "block")) return sscanf(tmp, "%u %u %u", &m->block[0], &m->block[1], &m->block[2]) == 3 ? 0 : -1;
    if (!strcmp(key, "grid_tile"))
        return sscanf(tmp, "%u %u %u", &m->grid_tile[0], &m->grid_tile[1], &m->grid_tile[2]) == 3 ? 0 : -1;
    if (!strcmp(key, "smem")) return sscanf(tmp, "%u %u", &m->static_smem, &m->dynamic_smem) == 2 ? 0 : -1;
    if (!strcmp(key, "align")) return sscanf(tmp, "%u", &m->align_bytes) == 1 ? 0 : -1;
    if (!strcmp(key, "rows")) return sscanf(tmp, "%u %u", &m->rows_per_block, &m->threads_per_row) == 2 ? 0 : -1;
    if (!strcmp(key, "workspace")) return sscanf(tmp, "%u %u", &m->ws_slabs, &m->ws_rows_per_block) == 2 ? 0 : -1;
    if (!strcmp(key, "then"))
        return tmp[0] && snprintf(m->then_spec, sizeof m->then_spec, "%s", tmp) < (int)sizeof m->then_spec ? 0 : -1;
    if (!strcmp(key, "param")) {
        char kind[16], dt[16], name[KILN_NAME_MAX];
        if (m->nparams >= KILN_MAX_PARAMS || sscanf(tmp, "%15s %15s %63s", kind, dt, name) != 3) return -1;
        kiln_param *p = &m->params[m->nparams];
        int k;
        for (k = 0; k < 5 && strcmp(kind, param_kind_names[k]); k++) {}
        if (k == 5 || kiln_elem_parse(dt, &p->dtype) != 0) return -1;
        p->kind = (kiln_param_kind)k;
        snprintf(p->name, sizeof p->name, "%s", name);
        m->nparams++;
        return 0;
    }
    if (is_launch_key(key)) { /* kept as written, for the launch (rt_launch.c) */
        size_t have = strlen(m->launch), kl = strlen(key), vl = strlen(tmp);
        if (have + kl + 1 + vl + 1 >= sizeof m->launch) return -1;
        snprintf(m->launch + have, sizeof m->launch - have, "%s %s\n", key, tmp);
        return 0;
    }
    return 0; /* unknown keys from newer writers are ignored */
}

kiln_status kiln_meta_parse(const char *ptx, size_t len, kiln_kernel_meta *out, kiln_error *err) {
    const char *p = ptx, *end = ptx + len;
    const size_t plen = strlen(META_PREFIX);
    int seen_version = 0, seen_end = 0;
    memset(out, 0, sizeof *out);
    while (p < end && !seen_end) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        const char *next = eol ? eol + 1 : end;
        if ((size_t)(end - p) > plen && memcmp(p, META_PREFIX, plen) == 0) {
            const char *k = p + plen, *sp = k;
            while (sp < next && *sp != ' ' && *sp != '\n' && *sp != '\r') sp++;
            char key[32];
            size_t kl = (size_t)(sp - k);
            if (kl == 0 || kl >= sizeof key) return kiln_fail(err, KILN_ECORRUPT, "kiln metadata: malformed line");
            memcpy(key, k, kl);
            key[kl] = 0;
            if (!strcmp(key, "end")) {
                seen_end = 1;
            } else {
                const char *v = sp < next && *sp == ' ' ? sp + 1 : sp;
                if (parse_line(out, key, v, (size_t)(next - v), next) != 0)
                    return kiln_fail(err, KILN_ECORRUPT, "kiln metadata: bad '%s' line", key);
                if (!strcmp(key, "version")) seen_version = 1;
            }
        }
        p = next;
    }
    if (!seen_version || !seen_end)
        return kiln_fail(err, KILN_ECORRUPT, "no complete kiln metadata block ('// kiln.meta') in the module text");
    if (!out->entry[0] || !out->block[0] || !out->grid_tile[0])
        return kiln_fail(err, KILN_ECORRUPT, "kiln metadata is missing its entry, block or grid tile");
    return KILN_OK;
}
