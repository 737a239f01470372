/* runtime/rt_layernorm.c - typed launch helper for LayerNorm forward (variant choice, grid, args). */
#include <stdio.h>
#include <string.h>

#include "rt.h"

/* The spec of one variant: hidden > 0 fixed at generation time, else the launch-time form. */
static void variant_spec(const kiln_layernorm_args *a, int hidden, char *buf, size_t size) {
    char h[24];
    if (hidden > 0) snprintf(h, sizeof h, "%d", hidden);
    else snprintf(h, sizeof h, "launch");
    snprintf(buf, size, "layernorm x=%s w=%s y=%s hidden=%s weight=%s bias=%s", kiln_dtype_name(a->x_dtype),
             kiln_dtype_name(a->w_dtype), kiln_dtype_name(a->y_dtype), h, a->weight ? "true" : "false",
             a->bias ? "true" : "false");
}

/* Pointers the kernel reads or writes with vector accesses, by name. */
static const char *const vector_params[] = {"y", "x", "weight", "bias"};

static kiln_devptr pointer_of(const kiln_layernorm_args *a, const char *name) {
    static const struct {
        const char *name;
        size_t offset;
    } table[] = {
        {"y", offsetof(kiln_layernorm_args, y)},       {"mean", offsetof(kiln_layernorm_args, mean)},
        {"rstd", offsetof(kiln_layernorm_args, rstd)}, {"x", offsetof(kiln_layernorm_args, x)},
        {"weight", offsetof(kiln_layernorm_args, weight)}, {"bias", offsetof(kiln_layernorm_args, bias)},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (!strcmp(table[i].name, name)) return *(const kiln_devptr *)((const char *)a + table[i].offset);
    return 0;
}

/* Names the first vector pointer not aligned as meta needs; NULL when all are. */
static const char *misaligned(const kiln_layernorm_args *a, const kiln_kernel_meta *m) {
    for (size_t i = 0; m->align_bytes > 1 && i < sizeof vector_params / sizeof vector_params[0]; i++)
        if (pointer_of(a, vector_params[i]) % m->align_bytes) return vector_params[i];
    return NULL;
}

static kiln_status check_args(const kiln_layernorm_args *a, kiln_error *err) {
    if (!kiln_dtype_name(a->x_dtype) || !kiln_dtype_name(a->w_dtype) || !kiln_dtype_name(a->y_dtype))
        return kiln_fail(err, KILN_EINVAL, "layernorm: dtypes must be f32, f16 or bf16");
    if (a->rows < 0 || a->hidden <= 0)
        return kiln_fail(err, KILN_EINVAL, "layernorm: rows (%d) must be >= 0 and hidden (%d) > 0", a->rows, a->hidden);
    if (!a->x || !a->y) return kiln_fail(err, KILN_EINVAL, "layernorm: x and y must be device pointers, not 0");
    return KILN_OK;
}

kiln_status kiln_layernorm_pick(kiln_rt *rt, const kiln_layernorm_args *a, kiln_kernel **out, kiln_error *err) {
    kiln_error e;
    char spec[KILN_SPEC_MAX], why[sizeof e.msg] = "";
    if (!rt || !a || !out) return kiln_fail(err, KILN_EINVAL, "kiln_layernorm_pick: NULL argument");
    kiln_status st = check_args(a, err);
    if (st != KILN_OK) return st;
    variant_spec(a, a->hidden, spec, sizeof spec);
    st = kiln_rt_get_kernel(rt, spec, out, &e);
    if (st == KILN_OK) {
        const char *bad = misaligned(a, &(*out)->meta);
        if (!bad) return KILN_OK;
        snprintf(why, sizeof why, "'%s' needs %u-byte aligned pointers and %s is not", spec,
                 (*out)->meta.align_bytes, bad);
    } else if (st == KILN_ENOTFOUND || st == KILN_EINVAL) {
        snprintf(why, sizeof why, "%s", e.msg);
    } else {
        return kiln_fail(err, st, "%s", e.msg);
    }
    variant_spec(a, 0, spec, sizeof spec);
    st = kiln_rt_get_kernel(rt, spec, out, &e);
    if (st != KILN_OK)
        return kiln_fail(err, st, "no LayerNorm kernel for hidden=%d: %s; launch-time form: %s", a->hidden, why, e.msg);
    const char *bad = misaligned(a, &(*out)->meta);
    if (bad)
        return kiln_fail(err, KILN_EINVAL, "layernorm: %s (0x%llx) is not %u-byte aligned, which even the launch-time "
                         "form '%s' needs (%s)", bad, (unsigned long long)pointer_of(a, bad), (*out)->meta.align_bytes, spec, why);
    return KILN_OK;
}

/* Fills args in the order and kinds of meta.params. */
static kiln_status build_args(const kiln_layernorm_args *a, const kiln_kernel_meta *m, kiln_arg *args, kiln_error *err) {
    for (int i = 0; i < m->nparams; i++) {
        const kiln_param *p = &m->params[i];
        kiln_arg v = {0};
        if (p->kind == KILN_PARAM_PTR) v.ptr = pointer_of(a, p->name);
        else if (!strcmp(p->name, "rows") && p->kind == KILN_PARAM_I32) v.i32 = a->rows;
        else if (!strcmp(p->name, "hidden") && p->kind == KILN_PARAM_I32) v.i32 = a->hidden;
        else if (!strcmp(p->name, "eps") && p->kind == KILN_PARAM_F32) v.f32 = a->eps;
        else
            return kiln_fail(err, KILN_EINVAL, "kernel '%s' has parameter '%s' the LayerNorm helper does not know",
                             m->entry, p->name);
        if (p->kind == KILN_PARAM_PTR && !v.ptr && !strcmp(p->name, "x"))
            return kiln_fail(err, KILN_EINVAL, "kernel '%s': pointer '%s' is 0", m->entry, p->name);
        args[i] = v;
    }
    return KILN_OK;
}

kiln_status kiln_layernorm_forward(kiln_rt *rt, const kiln_layernorm_args *a, kiln_error *err) {
    kiln_kernel *k;
    kiln_arg args[KILN_MAX_PARAMS];
    unsigned grid[3];
    if (!rt || !a) return kiln_fail(err, KILN_EINVAL, "kiln_layernorm_forward: NULL argument");
    kiln_status st = check_args(a, err);
    if (st != KILN_OK || a->rows == 0) return st;
    st = kiln_layernorm_pick(rt, a, &k, err);
    const uint64_t problem[3] = {(uint64_t)a->rows, 1, 1};
    if (st == KILN_OK) st = kiln_kernel_grid(k, problem, grid, err);
    if (st == KILN_OK) st = build_args(a, &k->meta, args, err);
    if (st == KILN_OK) st = kiln_kernel_launch(k, grid, args, k->meta.nparams, a->stream, err);
    return st;
}
