/* bench/gpu/kit_case.c - GPU check kit: case files (text header + raw tensors) and output comparison. */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kit.h"

#define KIT_MAGIC "kiln-kit-case 1"

static const char *kind_name(kiln_param_kind k) {
    return k == KILN_PARAM_I32 ? "i32" : k == KILN_PARAM_I64 ? "i64" : k == KILN_PARAM_F32 ? "f32" : "ptr";
}

size_t kit_tensor_bytes(const kit_tensor *t) { return t->count * kiln_dtype_size(t->dtype); }

int kit_case_write(const kit_case *c, const char *path, char *err, size_t errsize) {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (!f) return snprintf(err, errsize, "cannot write %s", tmp), -1;
    fprintf(f, "%s\nname %s\nfamily %s\nspec %s\nemu_sm %d\nproblem %llu %llu %llu\n", KIT_MAGIC, c->name, c->family,
            c->spec, c->emu_sm, (unsigned long long)c->problem[0], (unsigned long long)c->problem[1],
            (unsigned long long)c->problem[2]);
    for (int i = 0; i < c->nscalars; i++)
        fprintf(f, "scalar %s %s %.17g\n", c->scalars[i].name, kind_name(c->scalars[i].kind), c->scalars[i].value);
    for (int i = 0; i < c->ntensors; i++) {
        const kit_tensor *t = &c->tensors[i];
        fprintf(f, "tensor %s %s %s %zu %.17g %.17g\n", t->name, kiln_dtype_name(t->dtype), t->role == KIT_OUT ? "out" : "in",
                t->count, t->tol_ulps, t->scale);
    }
    fputs("data\n", f);
    int ok = 1;
    for (int i = 0; i < c->ntensors && ok; i++) {
        const kit_tensor *t = &c->tensors[i];
        ok = fwrite(t->data, 1, kit_tensor_bytes(t), f) == kit_tensor_bytes(t);
        if (ok && t->role == KIT_OUT) ok = fwrite(t->ref, sizeof(double), t->count, f) == t->count;
    }
    if (fclose(f) != 0) ok = 0;
    if (!ok || rename(tmp, path) != 0) {
        remove(tmp);
        return snprintf(err, errsize, "cannot write %s", path), -1;
    }
    return 0;
}

void kit_case_free(kit_case *c) {
    for (int i = 0; i < c->ntensors; i++) {
        free(c->tensors[i].data);
        free(c->tensors[i].ref);
        c->tensors[i].data = NULL;
        c->tensors[i].ref = NULL;
    }
    c->ntensors = 0;
}

static int parse_kind(const char *s, kiln_param_kind *k) {
    if (!strcmp(s, "i32")) *k = KILN_PARAM_I32;
    else if (!strcmp(s, "i64")) *k = KILN_PARAM_I64;
    else if (!strcmp(s, "f32")) *k = KILN_PARAM_F32;
    else return -1;
    return 0;
}

int kit_case_read(kit_case *c, const char *path, char *err, size_t errsize) {
    memset(c, 0, sizeof *c);
    FILE *f = fopen(path, "rb");
    if (!f) return snprintf(err, errsize, "cannot open %s", path), -1;
    char line[KILN_SPEC_MAX + 64];
    int lineno = 0, rc = -1, have_data = 0;
    if (!fgets(line, sizeof line, f) || strncmp(line, KIT_MAGIC, strlen(KIT_MAGIC))) {
        snprintf(err, errsize, "%s: not a kit case file (no '%s' header)", path, KIT_MAGIC);
        goto out;
    }
    while (!have_data && fgets(line, sizeof line, f)) {
        lineno++;
        line[strcspn(line, "\n")] = 0;
        char a[KIT_NAME], b[16], d[8];
        unsigned long long p0, p1, p2;
        size_t count;
        double tol, scale;
        if (!strncmp(line, "name ", 5)) snprintf(c->name, sizeof c->name, "%.95s", line + 5);
        else if (!strncmp(line, "family ", 7)) snprintf(c->family, sizeof c->family, "%.47s", line + 7);
        else if (!strncmp(line, "spec ", 5)) snprintf(c->spec, sizeof c->spec, "%.511s", line + 5);
        else if (sscanf(line, "emu_sm %d", &c->emu_sm) == 1) continue;
        else if (sscanf(line, "problem %llu %llu %llu", &p0, &p1, &p2) == 3) {
            c->problem[0] = p0, c->problem[1] = p1, c->problem[2] = p2;
        } else if (!strncmp(line, "scalar ", 7) && c->nscalars < KIT_MAX_SCALARS) {
            kit_scalar *s = &c->scalars[c->nscalars];
            if (sscanf(line, "scalar %47s %15s %lf", s->name, b, &s->value) != 3 || parse_kind(b, &s->kind)) {
                snprintf(err, errsize, "%s:%d: bad scalar line '%s'", path, lineno + 1, line);
                goto out;
            }
            c->nscalars++;
        } else if (!strncmp(line, "tensor ", 7) && c->ntensors < KIT_MAX_TENSORS) {
            kit_tensor *t = &c->tensors[c->ntensors];
            if (sscanf(line, "tensor %47s %15s %7s %zu %lf %lf", a, b, d, &count, &tol, &scale) != 6 ||
                kiln_elem_parse(b, &t->dtype) || (strcmp(d, "in") && strcmp(d, "out")) || count == 0 ||
                (t->dtype == KILN_I32 && !strcmp(d, "out"))) { /* i32: index inputs (a block table, lengths) only */
                snprintf(err, errsize, "%s:%d: bad tensor line '%s'", path, lineno + 1, line);
                goto out;
            }
            snprintf(t->name, sizeof t->name, "%s", a);
            t->role = strcmp(d, "out") ? KIT_IN : KIT_OUT;
            t->count = count, t->tol_ulps = tol, t->scale = scale;
            c->ntensors++;
        } else if (!strcmp(line, "data")) {
            have_data = 1;
        } else {
            snprintf(err, errsize, "%s:%d: unknown line '%s'", path, lineno + 1, line);
            goto out;
        }
    }
    if (!have_data || !c->spec[0] || !c->family[0] || !c->ntensors) {
        snprintf(err, errsize, "%s: incomplete header (needs family, spec, tensors, data)", path);
        goto out;
    }
    for (int i = 0; i < c->ntensors; i++) {
        kit_tensor *t = &c->tensors[i];
        size_t n = kit_tensor_bytes(t);
        t->data = malloc(n);
        if (t->role == KIT_OUT) t->ref = malloc(t->count * sizeof(double));
        if (!t->data || (t->role == KIT_OUT && !t->ref) || fread(t->data, 1, n, f) != n ||
            (t->role == KIT_OUT && fread(t->ref, sizeof(double), t->count, f) != t->count)) {
            snprintf(err, errsize, "%s: truncated data for tensor '%s'", path, t->name);
            goto out;
        }
    }
    if (fgetc(f) != EOF) {
        snprintf(err, errsize, "%s: trailing bytes after the data", path);
        goto out;
    }
    rc = 0;
out:
    fclose(f);
    if (rc) kit_case_free(c);
    return rc;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int kit_case_list(const char *dir, char ***paths) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0, cap = 0;
    char **v = NULL;
    for (struct dirent *e; (e = readdir(d));) {
        size_t len = strlen(e->d_name);
        if (len < 7 || strcmp(e->d_name + len - 6, ".kcase")) continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            char **nv = realloc(v, (size_t)cap * sizeof *v);
            if (!nv) break;
            v = nv;
        }
        size_t sz = strlen(dir) + len + 2;
        if (!(v[n] = malloc(sz))) break;
        snprintf(v[n++], sz, "%s/%s", dir, e->d_name);
    }
    closedir(d);
    if (n) qsort(v, (size_t)n, sizeof *v, cmp_str);
    *paths = v;
    return n;
}

const kit_scalar *kit_case_scalar(const kit_case *c, const char *name) {
    for (int i = 0; i < c->nscalars; i++)
        if (!strcmp(c->scalars[i].name, name)) return &c->scalars[i];
    return NULL;
}

const kit_tensor *kit_case_tensor(const kit_case *c, const char *name) {
    for (int i = 0; i < c->ntensors; i++)
        if (!strcmp(c->tensors[i].name, name)) return &c->tensors[i];
    return NULL;
}

/* ---- comparison ---- */

double kit_value(kiln_dtype t, const void *base, size_t i) {
    if (t == KILN_F32) {
        float f;
        memcpy(&f, (const char *)base + 4 * i, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, (const char *)base + 2 * i, 2);
    if (t == KILN_BF16) {
        uint32_t u = (uint32_t)h << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    int e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(m + 1024, e - 25);
    return h & 0x8000 ? -v : v;
}

double kit_ulp(kiln_dtype t, double m) {
    static const int mant[] = {23, 10, 7}, emin[] = {-126, -14, -126};
    m = fabs(m);
    int e = emin[t];
    if (m > 0 && isfinite(m)) {
        int ex;
        frexp(m, &ex); /* m = f * 2^ex, f in [0.5, 1): the leading bit is 2^(ex-1) */
        if (ex - 1 > e) e = ex - 1;
    }
    return ldexp(1.0, e - mant[t]);
}

double kit_error_ulps(kiln_dtype t, double got, double ref, double scale) {
    if (isnan(ref)) return isnan(got) ? 0 : INFINITY;
    if (!isfinite(ref)) return got == ref ? 0 : INFINITY;
    if (!isfinite(got)) return INFINITY;
    double m = fabs(ref) > scale ? fabs(ref) : scale;
    return fabs(got - ref) / kit_ulp(t, m);
}

void kit_compare_output(const kit_tensor *t, const void *got, kit_compare *r) {
    memset(r, 0, sizeof *r);
    size_t es = kiln_dtype_size(t->dtype);
    for (size_t i = 0; i < t->count; i++) {
        double g = kit_value(t->dtype, got, i), e = kit_value(t->dtype, t->data, i);
        double u = kit_error_ulps(t->dtype, g, t->ref[i], t->scale);
        double ue = kit_error_ulps(t->dtype, e, t->ref[i], t->scale);
        if (!(u <= t->tol_ulps)) r->bad++;
        if (u > r->max_ulps || (isnan(u) && !isnan(r->max_ulps))) {
            r->max_ulps = u;
            r->worst = i, r->worst_got = g, r->worst_ref = t->ref[i];
        }
        if (ue > r->emu_ulps) r->emu_ulps = ue;
        if (memcmp((const char *)got + i * es, (const char *)t->data + i * es, es)) r->diff_emu++;
    }
}
