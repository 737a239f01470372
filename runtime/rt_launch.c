/* runtime/rt_launch.c - the generic launch: binds named tensors and scalars to any kernel sequence its meta declares (docs/registry.md). */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rt.h"

/* ---- the launch description, parsed ---- */

enum { MAX_T = 24, MAX_S = 24, MAX_STRIDES = 32, MAX_STEPS = 8, EXPR_MAX = 128 };

typedef struct decl_tensor {
    char name[KILN_NAME_MAX];
    char role[16];
    int optional, ndims;
    unsigned align;
    char dims[KILN_LAUNCH_DIMS][EXPR_MAX];
} decl_tensor;

typedef struct decl_scalar {
    char name[KILN_NAME_MAX];
    char def[EXPR_MAX]; /* "" required */
    int fixed;
} decl_scalar;

typedef struct decl_stride {
    char param[KILN_NAME_MAX], tensor[KILN_NAME_MAX];
    int axis;
} decl_stride;

typedef struct decl_step {
    char spec[KILN_SPEC_MAX];
    int nbind;
    char bind_name[8][KILN_NAME_MAX];
    char bind_expr[8][EXPR_MAX];
} decl_step;

/* "tmap PARAM TENSOR BOX... [swizzle=32|64|128]": the tensor map parameter PARAM covers TENSOR (its dims
 * and strides), copying boxes of BOX elements (one expression per dim, outermost first). */
typedef struct decl_tmap {
    char param[KILN_NAME_MAX], tensor[KILN_NAME_MAX];
    int nbox;
    unsigned swizzle; /* KILN_TMAP_SWIZZLE_* */
    char box[KILN_LAUNCH_DIMS][EXPR_MAX];
} decl_tmap;

typedef struct decl {
    int nt, ns, nstr, nbefore, nafter, has_problem, ntm;
    decl_tmap tm[KILN_LAUNCH_TMAPS];
    decl_tensor t[MAX_T];
    decl_scalar s[MAX_S];
    decl_stride str[MAX_STRIDES];
    char problem[3][EXPR_MAX];
    decl_step before[MAX_STEPS], after[MAX_STEPS];
} decl;

/* Copies the next space-separated word of *p into out; 0 at the end of the line. */
static int word(const char **p, char *out, size_t size) {
    while (**p == ' ') (*p)++;
    size_t n = 0;
    while (**p && **p != ' ' && **p != '\n') {
        if (n + 1 < size) out[n++] = **p;
        (*p)++;
    }
    out[n] = 0;
    return n > 0;
}

static kiln_status bad_decl(const kiln_kernel_meta *m, const char *line, kiln_error *err) {
    int n = (int)strcspn(line, "\n");
    return kiln_fail(err, KILN_ECORRUPT, "kernel '%s': malformed launch line '%.*s'", m->spec, n, line);
}

static kiln_status parse_step(const kiln_kernel_meta *m, const char *line, const char *rest, decl_step *s, kiln_error *err) {
    size_t n = strcspn(rest, "\n");
    const char *semi = memchr(rest, ';', n);
    size_t sl = semi ? (size_t)(semi - rest) : n;
    while (sl && rest[sl - 1] == ' ') sl--;
    if (!sl || sl >= sizeof s->spec) return bad_decl(m, line, err);
    memcpy(s->spec, rest, sl);
    s->spec[sl] = 0;
    s->nbind = 0;
    for (const char *p = semi ? semi + 1 : rest + n; semi && p < rest + n;) {
        char w[KILN_NAME_MAX + EXPR_MAX];
        if (!word(&p, w, sizeof w)) break;
        char *eq = strchr(w, '=');
        size_t nl = eq ? (size_t)(eq - w) : 0, el = eq ? strlen(eq + 1) : 0;
        if (!eq || !nl || s->nbind == 8 || nl >= KILN_NAME_MAX || el >= EXPR_MAX) return bad_decl(m, line, err);
        memcpy(s->bind_name[s->nbind], w, nl);
        s->bind_name[s->nbind][nl] = 0;
        memcpy(s->bind_expr[s->nbind], eq + 1, el + 1);
        s->nbind++;
    }
    return KILN_OK;
}

static kiln_status parse_decl(const kiln_kernel_meta *m, decl *d, kiln_error *err) {
    memset(d, 0, sizeof *d);
    if (!m->launch[0])
        return kiln_fail(err, KILN_EINVAL, "kernel '%s' carries no launch description (a module from a kiln before the "
                         "family registry): regenerate it, or launch it with its family's typed helper", m->spec);
    for (const char *line = m->launch; *line; line += strcspn(line, "\n") + (line[strcspn(line, "\n")] == '\n')) {
        const char *p = line;
        char key[16], w[EXPR_MAX];
        if (!word(&p, key, sizeof key)) continue;
        if (!strcmp(key, "tensor")) {
            if (d->nt == MAX_T) return bad_decl(m, line, err);
            decl_tensor *t = &d->t[d->nt++];
            if (!word(&p, t->name, sizeof t->name) || !word(&p, t->role, sizeof t->role)) return bad_decl(m, line, err);
            size_t rl = strlen(t->role);
            if (rl && t->role[rl - 1] == '?') t->optional = 1, t->role[rl - 1] = 0;
            if (strcmp(t->role, "in") && strcmp(t->role, "out") && strcmp(t->role, "inout") && strcmp(t->role, "workspace"))
                return bad_decl(m, line, err);
            while (word(&p, w, sizeof w)) {
                if (!strncmp(w, "align=", 6)) t->align = (unsigned)strtoul(w + 6, NULL, 10);
                else if (t->ndims == KILN_LAUNCH_DIMS) return bad_decl(m, line, err);
                else snprintf(t->dims[t->ndims++], EXPR_MAX, "%s", w);
            }
            if (!t->ndims) return bad_decl(m, line, err);
        } else if (!strcmp(key, "scalar")) {
            if (d->ns == MAX_S) return bad_decl(m, line, err);
            decl_scalar *s = &d->s[d->ns++];
            if (!word(&p, s->name, sizeof s->name)) return bad_decl(m, line, err);
            if (word(&p, w, sizeof w)) {
                s->fixed = w[0] == '=';
                snprintf(s->def, sizeof s->def, "%s", w + s->fixed);
            }
        } else if (!strcmp(key, "stride")) {
            if (d->nstr == MAX_STRIDES) return bad_decl(m, line, err);
            decl_stride *s = &d->str[d->nstr++];
            if (!word(&p, s->param, sizeof s->param) || !word(&p, s->tensor, sizeof s->tensor) || !word(&p, w, sizeof w))
                return bad_decl(m, line, err);
            s->axis = atoi(w);
        } else if (!strcmp(key, "tmap")) {
            if (d->ntm == KILN_LAUNCH_TMAPS) return bad_decl(m, line, err);
            decl_tmap *t = &d->tm[d->ntm++];
            if (!word(&p, t->param, sizeof t->param) || !word(&p, t->tensor, sizeof t->tensor)) return bad_decl(m, line, err);
            while (word(&p, w, sizeof w)) {
                if (!strncmp(w, "swizzle=", 8)) {
                    int sw = atoi(w + 8);
                    t->swizzle = sw == 32 ? KILN_TMAP_SWIZZLE_32B : sw == 64 ? KILN_TMAP_SWIZZLE_64B : sw == 128 ? KILN_TMAP_SWIZZLE_128B : 9;
                    if (t->swizzle == 9) return bad_decl(m, line, err);
                } else if (t->nbox == KILN_LAUNCH_DIMS) return bad_decl(m, line, err);
                else snprintf(t->box[t->nbox++], EXPR_MAX, "%s", w);
            }
            if (!t->nbox) return bad_decl(m, line, err);
        } else if (!strcmp(key, "problem")) {
            for (int i = 0; i < 3; i++)
                if (!word(&p, d->problem[i], sizeof d->problem[i])) return bad_decl(m, line, err);
            d->has_problem = 1;
        } else if (!strcmp(key, "before") || !strcmp(key, "after")) {
            int before = key[0] == 'b';
            int *n = before ? &d->nbefore : &d->nafter;
            if (*n == MAX_STEPS) return bad_decl(m, line, err);
            while (*p == ' ') p++;
            kiln_status st = parse_step(m, line, p, before ? &d->before[(*n)++] : &d->after[(*n)++], err);
            if (st != KILN_OK) return st;
        }
    }
    if (!d->has_problem) return kiln_fail(err, KILN_ECORRUPT, "kernel '%s': its launch description has no problem line", m->spec);
    return KILN_OK;
}

/* ---- one kernel's environment: names to values ---- */

typedef struct env {
    const kiln_kernel_meta *m;
    const decl *d;
    const kiln_launch_args *a;
    const struct env *outer; /* the kernel whose step this is: its names give the bindings' values */
    const decl_step *step;   /* the bindings of this kernel, evaluated in outer */
    int64_t grid[3];
    int have_grid, sm_count, depth;
    kiln_error *err;
} env;

static int eval(env *e, const char *text, int64_t *out);

static const kiln_launch_scalar *given_scalar(const kiln_launch_args *a, const char *name) {
    for (int i = 0; a && i < a->nscalars; i++)
        if (a->scalars[i].name && !strcmp(a->scalars[i].name, name)) return &a->scalars[i];
    return NULL;
}

static const decl_scalar *decl_scalar_of(const decl *d, const char *name) {
    for (int i = 0; i < d->ns; i++)
        if (!strcmp(d->s[i].name, name)) return &d->s[i];
    return NULL;
}

/* A given scalar as an integer; -1 (err filled) when it is not one. */
static int integral(env *e, const kiln_launch_scalar *s, int64_t *out) {
    if (!(s->value == floor(s->value)) || fabs(s->value) > 9007199254740992.0) {
        kiln_fail(e->err, KILN_EINVAL, "kernel '%s': scalar '%s' = %g must be an integer", e->m->spec, s->name, s->value);
        return -1;
    }
    *out = (int64_t)s->value;
    return 0;
}

/* The value of name in e (integers): a binding of this step, a given scalar, the kernel's default,
 * the grid, sm_count. 0 found, 1 unknown, -1 error (filled). */
static int lookup(env *e, const char *name, int64_t *out) {
    if (++e->depth > 16) {
        kiln_fail(e->err, KILN_ECORRUPT, "kernel '%s': launch expressions refer to each other in a loop at '%s'", e->m->spec, name);
        return -1;
    }
    int rc = 1;
    const decl_scalar *ds = decl_scalar_of(e->d, name);
    const kiln_launch_scalar *gs = given_scalar(e->a, name);
    for (int i = 0; e->step && i < e->step->nbind && rc == 1; i++)
        if (!strcmp(e->step->bind_name[i], name)) {
            env outer = *e->outer;
            outer.depth = e->depth;
            rc = eval(&outer, e->step->bind_expr[i], out) ? -1 : 0;
        }
    if (rc == 1 && gs) rc = integral(e, gs, out) ? -1 : 0;
    if (rc == 1 && ds && ds->def[0]) rc = eval(e, ds->def, out) ? -1 : 0;
    if (rc == 0 && ds && ds->fixed && ds->def[0] && (gs || e->step)) {
        int64_t want;
        env plain = *e;
        if (eval(&plain, ds->def, &want)) rc = -1;
        else if (want != *out)
            rc = -1, kiln_fail(e->err, KILN_EINVAL, "kernel '%s' was generated for %s = %lld, the launch gives %lld",
                               e->m->spec, name, (long long)want, (long long)*out);
    }
    if (rc == 1 && name[0] == 'g' && !strncmp(name, "grid_", 5) && name[5] >= 'x' && name[5] <= 'z' && !name[6]) {
        if (!e->have_grid) {
            kiln_fail(e->err, KILN_ECORRUPT, "kernel '%s': its problem refers to the grid it defines", e->m->spec);
            rc = -1;
        } else {
            *out = e->grid[name[5] - 'x'];
            rc = 0;
        }
    }
    if (rc == 1 && !strcmp(name, "sm_count")) *out = e->sm_count, rc = 0;
    e->depth--;
    return rc;
}

/* ---- expressions: integers, names, + - * / ( ) cdiv min max ---- */

typedef struct parser {
    env *e;
    const char *p, *text;
    int failed;
} parser;

static int64_t expr(parser *ps);

static int64_t fail_expr(parser *ps, const char *why) {
    if (!ps->failed) /* a value too large is the launch's; anything else is the description's */
        kiln_fail(ps->e->err, strstr(why, "does not fit") ? KILN_EINVAL : KILN_ECORRUPT,
                  "kernel '%s': launch expression '%s': %s", ps->e->m->spec, ps->text, why);
    ps->failed = 1;
    return 0;
}


static int64_t factor(parser *ps) {
    if (ps->failed) return 0;
    if (*ps->p == '(') {
        ps->p++;
        int64_t v = expr(ps);
        if (*ps->p != ')') return fail_expr(ps, "a ')' is missing");
        ps->p++;
        return v;
    }
    if (*ps->p == '-') {
        ps->p++;
        return -factor(ps);
    }
    if (isdigit((unsigned char)*ps->p)) {
        errno = 0;
        char *end;
        long long v = strtoll(ps->p, &end, 10);
        if (errno) return fail_expr(ps, "a number out of range");
        ps->p = end;
        return v;
    }
    if (isalpha((unsigned char)*ps->p) || *ps->p == '_') {
        char name[KILN_NAME_MAX];
        size_t n = 0;
        while (isalnum((unsigned char)*ps->p) || *ps->p == '_') {
            if (n + 1 < sizeof name) name[n++] = *ps->p;
            ps->p++;
        }
        name[n] = 0;
        if (*ps->p == '(') { /* cdiv, min, max */
            ps->p++;
            int64_t a = expr(ps);
            if (*ps->p != ',') return fail_expr(ps, "a function takes two arguments");
            ps->p++;
            int64_t b = expr(ps);
            if (*ps->p != ')') return fail_expr(ps, "a ')' is missing");
            ps->p++;
            if (!strcmp(name, "min")) return a < b ? a : b;
            if (!strcmp(name, "max")) return a > b ? a : b;
            if (!strcmp(name, "cdiv")) return b > 0 ? (a + b - 1) / b : fail_expr(ps, "cdiv by a non-positive value");
            return fail_expr(ps, "unknown function (valid: cdiv, min, max)");
        }
        int64_t v;
        int rc = lookup(ps->e, name, &v);
        if (rc < 0) {
            ps->failed = 1;
            return 0;
        }
        if (rc > 0) {
            ps->failed = 1;
            kiln_fail(ps->e->err, KILN_EINVAL, "kernel '%s' needs the scalar '%s' (no default): give it", ps->e->m->spec, name);
            return 0;
        }
        return v;
    }
    return fail_expr(ps, "a number, name or '(' expected");
}

static int64_t term(parser *ps) {
    int64_t v = factor(ps), r;
    while (!ps->failed && (*ps->p == '*' || *ps->p == '/')) {
        char op = *ps->p++;
        int64_t b = factor(ps);
        if (op == '*') v = __builtin_mul_overflow(v, b, &r) ? fail_expr(ps, "does not fit in 64 bits for these sizes") : r;
        else v = b ? v / b : fail_expr(ps, "division by zero");
    }
    return v;
}

static int64_t expr(parser *ps) {
    int64_t v = term(ps), r;
    while (!ps->failed && (*ps->p == '+' || *ps->p == '-')) {
        char op = *ps->p++;
        int64_t b = term(ps);
        int ovf = op == '+' ? __builtin_add_overflow(v, b, &r) : __builtin_sub_overflow(v, b, &r);
        v = ovf ? fail_expr(ps, "does not fit in 64 bits for these sizes") : r;
    }
    return v;
}

static int eval(env *e, const char *text, int64_t *out) {
    parser ps = {e, text, text, 0};
    *out = expr(&ps);
    if (!ps.failed && *ps.p) fail_expr(&ps, "unexpected text at its end");
    return ps.failed ? -1 : 0;
}

/* ---- binding one kernel ---- */

static const kiln_launch_tensor *given_tensor(const kiln_launch_args *a, const char *name) {
    for (int i = 0; a && i < a->ntensors; i++)
        if (a->tensors[i].name && !strcmp(a->tensors[i].name, name)) return &a->tensors[i];
    return NULL;
}

/* The sequence's carved workspace tensors. */
typedef struct carve {
    int n;
    char name[MAX_T][KILN_NAME_MAX];
    uint64_t offset[MAX_T], bytes[MAX_T];
} carve;

static const decl_tensor *decl_tensor_of(const decl *d, const char *name) {
    for (int i = 0; i < d->nt; i++)
        if (!strcmp(d->t[i].name, name)) return &d->t[i];
    return NULL;
}

static const kiln_param *param_of(const kiln_kernel_meta *m, const char *name) {
    for (int i = 0; i < m->nparams; i++)
        if (!strcmp(m->params[i].name, name)) return &m->params[i];
    return NULL;
}

/* Elements of the tensor (product of its dims); -1 on error. */
static int tensor_dims(env *e, const decl_tensor *t, int64_t dims[KILN_LAUNCH_DIMS], int64_t *elems) {
    *elems = 1;
    for (int i = 0; i < t->ndims; i++) {
        if (eval(e, t->dims[i], &dims[i])) return -1;
        if (dims[i] < 0) {
            kiln_fail(e->err, KILN_EINVAL, "kernel '%s': tensor '%s' has a negative extent (%s = %lld)", e->m->spec, t->name,
                      t->dims[i], (long long)dims[i]);
            return -1;
        }
        if (__builtin_mul_overflow(*elems, dims[i], elems) || *elems > INT64_MAX / 8) {
            kiln_fail(e->err, KILN_EINVAL, "kernel '%s': tensor '%s' (%s elements) does not fit in 64-bit byte counts",
                      e->m->spec, t->name, t->dims[i]);
            return -1;
        }
    }
    return 0;
}

/* The tensor's strides in elements: the given ones, or contiguous in its dims. */
static int tensor_strides(env *e, const decl_tensor *t, const kiln_launch_tensor *g, int64_t out[KILN_LAUNCH_DIMS]) {
    int given = 0;
    for (int i = 0; g && i < KILN_LAUNCH_DIMS; i++) given |= g->strides[i] != 0;
    if (given) {
        memcpy(out, g->strides, sizeof g->strides);
        return 0;
    }
    int64_t dims[KILN_LAUNCH_DIMS], n;
    if (tensor_dims(e, t, dims, &n)) return -1;
    int64_t s = 1;
    for (int i = t->ndims - 1; i >= 0; i--) {
        out[i] = s;
        s *= dims[i] ? dims[i] : 1;
    }
    return 0;
}

/* The CUtensorMapDataType of an element type kiln's kernels use. */
static int tmap_type(kiln_dtype t) {
    switch (t) {
    case KILN_F16: return KILN_TMAP_TYPE_FLOAT16;
    case KILN_BF16: return KILN_TMAP_TYPE_BFLOAT16;
    case KILN_I32: return KILN_TMAP_TYPE_INT32;
    default: return KILN_TMAP_TYPE_FLOAT32;
    }
}

/* Fills the record of the tensor map parameter i from its tmap line: the tensor's pointer (the caller's, or
 * a workspace tensor's carved place: FA3's dQ writer adds into dq_acc through a map), dims and strides
 * (innermost first, strides in bytes), the box, the swizzle; checked against the driver's rules. A kernel
 * with an empty grid is not launched, so its maps are left empty. */
static kiln_status bind_tmap(env *e, const carve *cv, kiln_devptr workspace, int i, kiln_launch_step *step) {
    const kiln_kernel_meta *m = e->m;
    const kiln_param *p = &m->params[i];
    const decl_tmap *tm = NULL;
    for (int k = 0; k < e->d->ntm && !tm; k++)
        if (!strcmp(e->d->tm[k].param, p->name)) tm = &e->d->tm[k];
    const decl_tensor *t = tm ? decl_tensor_of(e->d, tm->tensor) : NULL;
    if (!t || tm->nbox != t->ndims)
        return kiln_fail(e->err, KILN_ECORRUPT, "kernel '%s': tensor map parameter '%s' has no tmap line of a declared "
                         "tensor with a box for each of its dims", m->spec, p->name);
    if (step->ntmaps == KILN_LAUNCH_TMAPS)
        return kiln_fail(e->err, KILN_ECORRUPT, "kernel '%s' takes more than %d tensor maps", m->spec, KILN_LAUNCH_TMAPS);
    int j = step->ntmaps++;
    step->tmap_param[j] = i;
    kiln_tensor_map *r = &step->tmaps[j];
    memset(r, 0, sizeof *r);
    if (!step->grid[0] || !step->grid[1] || !step->grid[2]) return KILN_OK;
    const kiln_launch_tensor *g = given_tensor(e->a, t->name);
    int64_t dims[KILN_LAUNCH_DIMS], st[KILN_LAUNCH_DIMS], n, box;
    if (tensor_dims(e, t, dims, &n) || tensor_strides(e, t, g, st)) return e->err->status;
    kiln_devptr base = g ? g->ptr : 0;
    for (int c = 0; !base && c < cv->n; c++)
        if (!strcmp(cv->name[c], t->name) && cv->bytes[c]) base = workspace + cv->offset[c];
    if (!workspace && !(g && g->ptr) && !strcmp(t->role, "workspace")) return KILN_OK; /* sizing: the map stays empty */
    if (!base)
        return kiln_fail(e->err, KILN_EINVAL, "kernel '%s' needs the tensor '%s' (%s, %lld elements of %s) for its tensor map "
                         "'%s': give it", m->spec, t->name, t->role, (long long)n, kiln_dtype_name(p->dtype), p->name);
    const int nd = t->ndims;
    /* given strides leave 0 on an axis the kernel takes no stride for (attention's head_dim): contiguous */
    int declared = 0;
    for (int k = 0; k < e->d->nstr; k++) declared |= !strcmp(e->d->str[k].tensor, t->name) && e->d->str[k].axis == nd - 1;
    if (st[nd - 1] == 0 && !declared) st[nd - 1] = 1;
    if (st[nd - 1] != 1)
        return kiln_fail(e->err, KILN_EINVAL, "tensor %s's innermost stride is %lld elements; kernel '%s' reads it through a "
                         "tensor map, which needs 1 (contiguous rows)", t->name, (long long)st[nd - 1], m->spec);
    r->magic = KILN_TMAP_MAGIC;
    r->data_type = (uint32_t)tmap_type(p->dtype);
    r->elem_bytes = kiln_tensor_map_type_bytes(r->data_type);
    r->rank = (uint32_t)nd;
    r->swizzle = tm->swizzle;
    r->base = base;
    for (int k = 0; k < nd; k++) {
        if (eval(e, tm->box[k], &box)) return e->err->status;
        if (st[k] < 0)
            return kiln_fail(e->err, KILN_EINVAL, "tensor %s's stride of axis %d is negative (%lld); a tensor map needs it "
                             "positive", t->name, k, (long long)st[k]);
        r->dims[nd - 1 - k] = (uint64_t)dims[k];
        r->box[nd - 1 - k] = box < 0 || box > 0xffffffffLL ? 0 : (uint32_t)box;
        if (k < nd - 1) r->strides[nd - 2 - k] = (uint64_t)st[k] * r->elem_bytes;
    }
    char why[200];
    if (kiln_tensor_map_invalid(r, why, sizeof why))
        return kiln_fail(e->err, KILN_EINVAL, "kernel '%s': tensor map '%s' of tensor %s (dims outermost first, the map's "
                         "innermost first): %s", m->spec, p->name, t->name, why);
    return KILN_OK;
}

static kiln_status bind_kernel(env *e, const carve *cv, kiln_devptr workspace, kiln_launch_step *step) {
    const kiln_kernel_meta *m = e->m;
    const decl *d = e->d;
    kiln_error *err = e->err;
    memset(step, 0, sizeof *step);
    step->meta = m;
    /* the grid */
    e->have_grid = 0;
    for (int i = 0; i < 3; i++) {
        int64_t p;
        if (eval(e, d->problem[i], &p)) return err->status;
        if (p < 0) return kiln_fail(err, KILN_EINVAL, "kernel '%s': problem axis %d (%s) is %lld", m->spec, i, d->problem[i], (long long)p);
        uint64_t tile = m->grid_tile[i] ? m->grid_tile[i] : 1;
        e->grid[i] = (int64_t)(((uint64_t)p + tile - 1) / tile);
        if (e->grid[i] > 0x7fffffff)
            return kiln_fail(err, KILN_EINVAL, "kernel '%s': problem axis %d (%s = %lld) needs %lld blocks", m->spec, i,
                             d->problem[i], (long long)p, (long long)e->grid[i]);
        step->grid[i] = (unsigned)e->grid[i];
    }
    e->have_grid = 1;
    /* the arguments, in the order of the kernel's parameters */
    for (int i = 0; i < m->nparams; i++) {
        const kiln_param *p = &m->params[i];
        kiln_arg v = {0};
        if (p->kind == KILN_PARAM_TMAP) {
            kiln_status st = bind_tmap(e, cv, workspace, i, step);
            if (st != KILN_OK) return st;
        } else if (p->kind == KILN_PARAM_PTR) {
            const decl_tensor *t = decl_tensor_of(d, p->name);
            const kiln_launch_tensor *g = given_tensor(e->a, p->name);
            int carved = -1;
            for (int c = 0; c < cv->n && carved < 0; c++)
                if (!strcmp(cv->name[c], p->name)) carved = c;
            if (!t) return kiln_fail(err, KILN_ECORRUPT, "kernel '%s': parameter '%s' has no tensor line", m->spec, p->name);
            if (g && g->ptr) v.ptr = g->ptr;
            else if (carved >= 0) v.ptr = cv->bytes[carved] ? workspace + cv->offset[carved] : 0;
            if (!v.ptr && !t->optional && carved < 0 && strcmp(t->role, "workspace")) {
                int64_t dims[KILN_LAUNCH_DIMS], n;
                if (tensor_dims(e, t, dims, &n)) return err->status;
                if (n > 0)
                    return kiln_fail(err, KILN_EINVAL, "kernel '%s' needs the tensor '%s' (%s, %lld elements of %s): give it",
                                     m->spec, p->name, t->role, (long long)n, kiln_dtype_name(p->dtype));
            }
            unsigned need = (unsigned)kiln_dtype_size(p->dtype);
            if (t->align > need) need = t->align;
            if (v.ptr % need)
                return kiln_fail(err, KILN_EINVAL, "tensor %s (0x%llx) is not %u-byte aligned, which kernel '%s' needs",
                                 p->name, (unsigned long long)v.ptr, need, m->spec);
        } else if (p->kind == KILN_PARAM_I64 && !decl_scalar_of(d, p->name)) {
            const decl_stride *s = NULL;
            for (int k = 0; k < d->nstr && !s; k++)
                if (!strcmp(d->str[k].param, p->name)) s = &d->str[k];
            const decl_tensor *t = s ? decl_tensor_of(d, s->tensor) : NULL;
            if (!t || s->axis < 0 || s->axis >= t->ndims)
                return kiln_fail(err, KILN_ECORRUPT, "kernel '%s': parameter '%s' has no stride line of a declared tensor",
                                 m->spec, p->name);
            int64_t st[KILN_LAUNCH_DIMS];
            if (tensor_strides(e, t, given_tensor(e->a, t->name), st)) return err->status;
            const kiln_param *tp = param_of(m, t->name);
            int64_t bytes = st[s->axis] * (int64_t)kiln_dtype_size(tp ? tp->dtype : KILN_F32);
            if (t->align > 1 && bytes % t->align)
                return kiln_fail(err, KILN_EINVAL, "tensor %s's stride of axis %d (%lld elements) is not a multiple of %u "
                                 "bytes, which kernel '%s' needs", t->name, s->axis, (long long)st[s->axis], t->align, m->spec);
            v.i64 = st[s->axis];
        } else if (p->kind == KILN_PARAM_F32) {
            const kiln_launch_scalar *gs = given_scalar(e->a, p->name);
            const decl_scalar *ds = decl_scalar_of(d, p->name);
            if (gs) v.f32 = (float)gs->value;
            else if (ds && ds->def[0]) v.f32 = (float)strtod(ds->def, NULL);
            else return kiln_fail(err, KILN_EINVAL, "kernel '%s' needs the scalar '%s' (no default): give it", m->spec, p->name);
        } else {
            int64_t x;
            int rc = lookup(e, p->name, &x);
            if (rc > 0) return kiln_fail(err, KILN_EINVAL, "kernel '%s' needs the scalar '%s' (no default): give it", m->spec, p->name);
            if (rc < 0) return err->status;
            if (p->kind == KILN_PARAM_I32 && (x < INT32_MIN || x > INT32_MAX))
                return kiln_fail(err, KILN_EINVAL, "kernel '%s': scalar '%s' = %lld does not fit its 32 bits", m->spec, p->name, (long long)x);
            if (p->kind == KILN_PARAM_I32) v.i32 = (int32_t)x;
            else v.i64 = x;
        }
        step->args[i] = v;
    }
    return KILN_OK;
}

/* ---- the sequence ---- */

int kiln_launch_sequence(const kiln_kernel_meta *m, char specs[][KILN_SPEC_MAX], int cap, int *self) {
    decl *d = malloc(sizeof *d);
    int n = 0;
    if (!d || parse_decl(m, d, NULL) != KILN_OK) {
        free(d);
        if (self) *self = 0;
        if (cap > 0) snprintf(specs[0], KILN_SPEC_MAX, "%s", m->spec);
        return 1;
    }
    for (int i = 0; i < d->nbefore; i++, n++)
        if (n < cap) snprintf(specs[n], KILN_SPEC_MAX, "%s", d->before[i].spec);
    if (self) *self = n;
    if (n < cap) snprintf(specs[n], KILN_SPEC_MAX, "%s", m->spec);
    n++;
    for (int i = 0; i < d->nafter; i++, n++)
        if (n < cap) snprintf(specs[n], KILN_SPEC_MAX, "%s", d->after[i].spec);
    free(d);
    return n;
}

/* Whether any kernel of the sequence declares a tensor or scalar of that name. */
static int declared_anywhere(const decl *ds, int n, const char *name, int tensor) {
    for (int i = 0; i < n; i++) {
        if (tensor && decl_tensor_of(&ds[i], name)) return 1;
        if (!tensor && decl_scalar_of(&ds[i], name)) return 1;
    }
    return 0;
}

kiln_status kiln_launch_bind(const kiln_kernel_meta *const *metas, int nsteps, int self, const kiln_launch_args *a,
                             int sm_count, kiln_launch_step *steps, size_t *workspace_bytes, kiln_error *err) {
    if (!metas || nsteps < 1 || nsteps > 2 * MAX_STEPS + 1 || self < 0 || self >= nsteps || !a || !steps)
        return kiln_fail(err, KILN_EINVAL, "kiln_launch_bind: bad arguments");
    decl *ds = calloc((size_t)nsteps, sizeof *ds);
    if (!ds) return kiln_fail(err, KILN_ENOMEM, "out of memory binding a launch");
    kiln_status st = KILN_OK;
    for (int i = 0; i < nsteps && st == KILN_OK; i++) st = parse_decl(metas[i], &ds[i], err);
    const decl *own = &ds[self];
    if (st == KILN_OK && own->nbefore + own->nafter + 1 != nsteps)
        st = kiln_fail(err, KILN_EINVAL, "kernel '%s' runs in a sequence of %d kernels; %d given", metas[self]->spec,
                       own->nbefore + own->nafter + 1, nsteps);
    /* every name the caller gives is one a kernel of the sequence declares (a 0 pointer may be spare) */
    for (int i = 0; st == KILN_OK && i < a->ntensors; i++)
        if (a->tensors[i].name && a->tensors[i].ptr && !declared_anywhere(ds, nsteps, a->tensors[i].name, 1))
            st = kiln_fail(err, KILN_EINVAL, "kernel '%s' takes no tensor '%s'", metas[self]->spec, a->tensors[i].name);
    for (int i = 0; st == KILN_OK && i < a->nscalars; i++)
        if (a->scalars[i].name && !declared_anywhere(ds, nsteps, a->scalars[i].name, 0))
            st = kiln_fail(err, KILN_EINVAL, "kernel '%s' takes no scalar '%s'", metas[self]->spec, a->scalars[i].name);
    /* the kernel the caller named first: its grid sizes the workspace */
    env se = {.m = metas[self], .d = own, .a = a, .sm_count = sm_count, .err = err};
    carve cv = {0};
    if (st == KILN_OK) st = bind_kernel(&se, &cv, 0, &steps[self]);
    uint64_t total = 0;
    for (int i = 0; st == KILN_OK && i < own->nt; i++) {
        const decl_tensor *t = &own->t[i];
        const kiln_launch_tensor *g = given_tensor(a, t->name);
        if (strcmp(t->role, "workspace") || (g && g->ptr)) continue;
        int64_t dims[KILN_LAUNCH_DIMS], n;
        if (tensor_dims(&se, t, dims, &n)) {
            st = err->status;
            break;
        }
        const kiln_param *p = param_of(metas[self], t->name);
        uint64_t bytes = (uint64_t)n * kiln_dtype_size(p ? p->dtype : KILN_F32);
        if (cv.n == MAX_T) break;
        if (bytes) total = (total + 255) / 256 * 256; /* each workspace tensor 256-byte aligned */
        if (total + bytes < total || total + bytes > SIZE_MAX) {
            st = kiln_fail(err, KILN_EINVAL, "kernel '%s': its workspace does not fit in size_t", metas[self]->spec);
            break;
        }
        snprintf(cv.name[cv.n], KILN_NAME_MAX, "%s", t->name);
        cv.offset[cv.n] = total;
        cv.bytes[cv.n++] = bytes;
        total += bytes;
    }
    if (workspace_bytes) *workspace_bytes = (size_t)total;
    int query = !a->workspace; /* sizing only: the pointers are not used */
    if (st == KILN_OK && !query && total > a->workspace_bytes)
        st = kiln_fail(err, KILN_EINVAL, "kernel '%s' needs a workspace of %llu bytes, got %zu at 0x%llx", metas[self]->spec,
                       (unsigned long long)total, a->workspace_bytes, (unsigned long long)a->workspace);
    for (int i = 0; st == KILN_OK && i < nsteps; i++) {
        const decl_step *bind = i < self ? &own->before[i] : i > self ? &own->after[i - self - 1] : NULL;
        env e = {.m = metas[i], .d = &ds[i], .a = a, .outer = &se, .step = bind, .sm_count = sm_count, .err = err};
        if (bind && strcmp(bind->spec, metas[i]->spec))
            st = kiln_fail(err, KILN_EINVAL, "kernel '%s' runs '%s' in its sequence, given '%s'", metas[self]->spec, bind->spec,
                           metas[i]->spec);
        else st = bind_kernel(&e, &cv, a->workspace, &steps[i]);
    }
    free(ds);
    return st;
}

/* ---- on the device ---- */

/* The sequence's kernels, from the runtime (memory, bundles, disk cache, generator). */
static kiln_status sequence_kernels(kiln_kernel *k, kiln_kernel **ks, const kiln_kernel_meta **metas, int *n, int *self,
                                    kiln_error *err) {
    char specs[2 * MAX_STEPS + 1][KILN_SPEC_MAX];
    *n = kiln_launch_sequence(&k->meta, specs, 2 * MAX_STEPS + 1, self);
    if (*n > 2 * MAX_STEPS + 1) return kiln_fail(err, KILN_ECORRUPT, "kernel '%s' names too many kernels to run", k->meta.spec);
    for (int i = 0; i < *n; i++) {
        if (i == *self) ks[i] = k;
        else {
            kiln_status st = kiln_rt_get_kernel(k->rt, specs[i], &ks[i], err);
            if (st != KILN_OK) return st;
        }
        metas[i] = &ks[i]->meta;
    }
    return KILN_OK;
}

static int device_sms(const kiln_kernel *k) {
    int sms = kiln_rt_device(k->rt)->multiprocessors;
    return sms > 0 ? sms : 1;
}

kiln_status rt_launch_size(kiln_kernel *k, const kiln_launch_args *a, unsigned grid[3], size_t *bytes, kiln_error *err) {
    kiln_kernel *ks[2 * MAX_STEPS + 1];
    const kiln_kernel_meta *metas[2 * MAX_STEPS + 1];
    kiln_launch_step steps[2 * MAX_STEPS + 1];
    int n, self;
    kiln_status st = sequence_kernels(k, ks, metas, &n, &self, err);
    kiln_launch_args q = *a;
    q.workspace = 0;
    if (st == KILN_OK) st = kiln_launch_bind(metas, n, self, &q, device_sms(k), steps, bytes, err);
    if (st == KILN_OK && grid) memcpy(grid, steps[self].grid, sizeof steps[self].grid);
    return st;
}

kiln_status kiln_launch_workspace(kiln_kernel *k, const kiln_launch_args *a, size_t *bytes, kiln_error *err) {
    if (!k || !a || !bytes) return kiln_fail(err, KILN_EINVAL, "kiln_launch_workspace: NULL argument");
    return rt_launch_size(k, a, NULL, bytes, err);
}

kiln_status kiln_launch(kiln_kernel *k, const kiln_launch_args *a, kiln_error *err) {
    if (!k || !a) return kiln_fail(err, KILN_EINVAL, "kiln_launch: NULL argument");
    kiln_kernel *ks[2 * MAX_STEPS + 1];
    const kiln_kernel_meta *metas[2 * MAX_STEPS + 1];
    kiln_launch_step steps[2 * MAX_STEPS + 1];
    int n, self;
    size_t need;
    kiln_status st = sequence_kernels(k, ks, metas, &n, &self, err);
    if (st == KILN_OK) st = kiln_launch_bind(metas, n, self, a, device_sms(k), steps, &need, err);
    if (st == KILN_OK && need && !a->workspace)
        st = kiln_fail(err, KILN_EINVAL, "kernel '%s' needs a workspace of %zu bytes (kiln_launch_workspace)", k->meta.spec, need);
    for (int i = 0; st == KILN_OK && i < n; i++) {
        if (!steps[i].grid[0] || !steps[i].grid[1] || !steps[i].grid[2]) continue; /* nothing to do */
        const uint64_t problem[3] = {(uint64_t)steps[i].grid[0] * (ks[i]->meta.grid_tile[0] ? ks[i]->meta.grid_tile[0] : 1),
                                     (uint64_t)steps[i].grid[1] * (ks[i]->meta.grid_tile[1] ? ks[i]->meta.grid_tile[1] : 1),
                                     (uint64_t)steps[i].grid[2] * (ks[i]->meta.grid_tile[2] ? ks[i]->meta.grid_tile[2] : 1)};
        unsigned grid[3];
        _Alignas(KILN_TMAP_ALIGN) unsigned char maps[KILN_LAUNCH_TMAPS][KILN_TMAP_BYTES];
        st = kiln_kernel_grid(ks[i], problem, grid, err); /* the device's grid limits */
        for (int j = 0; st == KILN_OK && j < steps[i].ntmaps; j++) {
            char what[KILN_SPEC_MAX + KILN_NAME_MAX + 40];
            snprintf(what, sizeof what, "kernel '%s': tensor map '%s'", ks[i]->meta.spec, ks[i]->meta.params[steps[i].tmap_param[j]].name);
            st = rt_tmap_encode(k->rt, &steps[i].tmaps[j], maps[j], what, err);
            steps[i].args[steps[i].tmap_param[j]].tmap = maps[j];
        }
        if (st == KILN_OK) st = kiln_kernel_launch(ks[i], steps[i].grid, steps[i].args, ks[i]->meta.nparams, a->stream, err);
    }
    return st;
}

kiln_status kiln_launch_spec(kiln_rt *rt, const char *spec, const kiln_launch_args *a, kiln_error *err) {
    kiln_kernel *k;
    kiln_status st = kiln_rt_get_kernel(rt, spec, &k, err);
    return st == KILN_OK ? kiln_launch(k, a, err) : st;
}
