/* runtime/rt_norm.c - typed launch helpers for the norm families over the generic launch: the spec of the dtypes and the fixed-hidden/launch-hidden pick. */
#include <stdio.h>
#include <string.h>

#include "rt.h"

typedef struct named_ptr {
    const char *name;
    kiln_devptr ptr;
} named_ptr;

static kiln_devptr find_ptr(const named_ptr *t, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (!strcmp(t[i].name, name)) return t[i].ptr;
    return 0;
}

/* Names the first pointer (of the kernel's params) not aligned as meta needs: the row tensors
 * (vector accesses) to meta.align_bytes, every pointer to its element size; NULL when all are. */
static const char *misaligned(const named_ptr *t, int n, const kiln_kernel_meta *m, kiln_devptr *which) {
    for (int i = 0; i < m->nparams; i++) {
        if (m->params[i].kind != KILN_PARAM_PTR) continue;
        const char *name = m->params[i].name;
        kiln_devptr p = find_ptr(t, n, name);
        unsigned need = (unsigned)kiln_dtype_size(m->params[i].dtype);
        if (strcmp(name, "mean") && strcmp(name, "rstd") && m->align_bytes > need) need = m->align_bytes;
        if (need > 1 && p % need) {
            *which = p;
            return m->params[i].name;
        }
    }
    return NULL;
}

/* Gets the variant spec_fixed (hidden > 0), falling back to spec_launch when it is missing or
 * the pointers are not aligned as it needs. */
static kiln_status pick(kiln_rt *rt, const char *what, const char *spec_fixed, const char *spec_launch,
                        const named_ptr *t, int n, int hidden, kiln_kernel **out, kiln_error *err) {
    kiln_error e;
    char why[sizeof e.msg] = "";
    kiln_devptr p = 0;
    kiln_status st = kiln_rt_get_kernel(rt, spec_fixed, out, &e);
    if (st == KILN_OK) {
        const char *bad = misaligned(t, n, &(*out)->meta, &p);
        if (!bad) return KILN_OK;
        snprintf(why, sizeof why, "'%s' needs %u-byte aligned row pointers and %s (0x%llx) is not", spec_fixed,
                 (*out)->meta.align_bytes, bad, (unsigned long long)p);
    } else if (st == KILN_ENOTFOUND || st == KILN_EINVAL) {
        snprintf(why, sizeof why, "%s", e.msg);
    } else {
        return kiln_fail(err, st, "%s", e.msg);
    }
    st = kiln_rt_get_kernel(rt, spec_launch, out, &e);
    if (st != KILN_OK) return kiln_fail(err, st, "no %s kernel for hidden=%d: %s; launch-time form: %s", what, hidden, why, e.msg);
    const char *bad = misaligned(t, n, &(*out)->meta, &p);
    if (bad)
        return kiln_fail(err, KILN_EINVAL, "%s: %s (0x%llx) is not aligned as even the launch-time form '%s' needs "
                         "(%u bytes for row tensors, the element size for every pointer) (%s)", what, bad,
                         (unsigned long long)p, spec_launch, (*out)->meta.align_bytes, why);
    return KILN_OK;
}

/* The generic launch's arguments: the named pointers (0 ones left out; the workspace, checked for
 * alignment by pick() as "ws", goes as the launch's workspace, which the sequence carves), rows and
 * hidden, and eps (forward). */
static kiln_launch_args launch_args(const named_ptr *t, int n, kiln_launch_tensor *lt, kiln_launch_scalar *ls, int rows,
                                    int hidden, const float *eps, kiln_devptr ws, size_t ws_bytes, void *stream) {
    int k = 0;
    for (int i = 0; i < n; i++)
        if (t[i].ptr && strcmp(t[i].name, "ws")) lt[k++] = (kiln_launch_tensor){.name = t[i].name, .ptr = t[i].ptr};
    ls[0] = (kiln_launch_scalar){"rows", rows};
    ls[1] = (kiln_launch_scalar){"hidden", hidden};
    if (eps) ls[2] = (kiln_launch_scalar){"eps", *eps};
    return (kiln_launch_args){.tensors = lt, .ntensors = k, .scalars = ls, .nscalars = eps ? 3 : 2, .workspace = ws,
                              .workspace_bytes = ws_bytes, .stream = stream};
}

static int valid_dtype(kiln_dtype t) { return kiln_dtype_name(t) != NULL; }

static void hidden_text(int hidden, char *buf, size_t size) {
    if (hidden > 0) snprintf(buf, size, "%d", hidden);
    else snprintf(buf, size, "launch");
}

/* The residual keys as the canonical spec spells them (left out when off / equal to x). */
static void residual_text(int on, kiln_dtype r, kiln_dtype x, char *buf, size_t size) {
    if (!on) buf[0] = 0;
    else if (r == x) snprintf(buf, size, " residual=true");
    else snprintf(buf, size, " residual=true r=%s", kiln_dtype_name(r));
}

/* The offset key as the canonical spec spells it (left out at 0). */
static const char *offset_text(int offset) { return offset ? " offset=1" : ""; }

/* offset must be 0 or 1, and 1 needs a weight (what 1 + w multiplies). */
static kiln_status offset_check(const char *what, int offset, kiln_devptr weight, kiln_error *err) {
    if (offset != 0 && offset != 1) return kiln_fail(err, KILN_EINVAL, "%s: offset must be 0 or 1 (1: the norm multiplies by 1 + weight), got %d", what, offset);
    if (offset && !weight) return kiln_fail(err, KILN_EINVAL, "%s: offset = 1 multiplies by 1 + weight and needs a weight pointer", what);
    return KILN_OK;
}

/* ---- forward ---- */

static void fwd_spec(const kiln_norm_fwd_args *a, int hidden, char *buf, size_t size) {
    char h[24], res[48];
    hidden_text(hidden, h, sizeof h);
    residual_text(a->residual != 0, a->r_dtype, a->x_dtype, res, sizeof res);
    if (a->kind == KILN_NORM_RMSNORM)
        snprintf(buf, size, "rmsnorm x=%s w=%s y=%s hidden=%s weight=%s%s%s", kiln_dtype_name(a->x_dtype),
                 kiln_dtype_name(a->w_dtype), kiln_dtype_name(a->y_dtype), h, a->weight ? "true" : "false",
                 offset_text(a->offset), res);
    else
        snprintf(buf, size, "layernorm x=%s w=%s y=%s hidden=%s weight=%s bias=%s%s%s", kiln_dtype_name(a->x_dtype),
                 kiln_dtype_name(a->w_dtype), kiln_dtype_name(a->y_dtype), h, a->weight ? "true" : "false",
                 a->bias ? "true" : "false", offset_text(a->offset), res);
}

static kiln_status fwd_check(const kiln_norm_fwd_args *a, kiln_error *err) {
    if ((unsigned)a->kind > KILN_NORM_RMSNORM) return kiln_fail(err, KILN_EINVAL, "norm: kind must be KILN_NORM_LAYERNORM or KILN_NORM_RMSNORM");
    if (!valid_dtype(a->x_dtype) || !valid_dtype(a->w_dtype) || !valid_dtype(a->y_dtype) || (a->residual && !valid_dtype(a->r_dtype)))
        return kiln_fail(err, KILN_EINVAL, "norm forward: dtypes must be f32, f16 or bf16");
    if (a->rows < 0 || a->hidden <= 0)
        return kiln_fail(err, KILN_EINVAL, "norm forward: rows (%d) must be >= 0 and hidden (%d) > 0", a->rows, a->hidden);
    if (!a->x || !a->y) return kiln_fail(err, KILN_EINVAL, "norm forward: x and y must be device pointers, not 0");
    if (!a->residual != !a->h) return kiln_fail(err, KILN_EINVAL, "norm forward: residual and h go together (both 0, or both set)");
    return offset_check("norm forward", a->offset, a->weight, err);
}

static int fwd_table(const kiln_norm_fwd_args *a, named_ptr *t) {
    int rms = a->kind == KILN_NORM_RMSNORM;
    named_ptr v[] = {{"y", a->y}, {"mean", rms ? 0 : a->mean}, {"rstd", a->rstd}, {"x", a->x}, {"weight", a->weight},
                     {"bias", rms ? 0 : a->bias}, {"residual", a->residual}, {"h", a->h}};
    memcpy(t, v, sizeof v);
    return (int)(sizeof v / sizeof v[0]);
}

kiln_status kiln_norm_forward_pick(kiln_rt *rt, const kiln_norm_fwd_args *a, kiln_kernel **out, kiln_error *err) {
    if (!rt || !a || !out) return kiln_fail(err, KILN_EINVAL, "kiln_norm_forward_pick: NULL argument");
    kiln_status st = fwd_check(a, err);
    if (st != KILN_OK) return st;
    char fixed[KILN_SPEC_MAX], launch[KILN_SPEC_MAX];
    named_ptr t[8];
    int n = fwd_table(a, t);
    fwd_spec(a, a->hidden, fixed, sizeof fixed);
    fwd_spec(a, 0, launch, sizeof launch);
    return pick(rt, a->kind == KILN_NORM_RMSNORM ? "RMSNorm" : "LayerNorm", fixed, launch, t, n, a->hidden, out, err);
}

kiln_status kiln_norm_forward(kiln_rt *rt, const kiln_norm_fwd_args *a, kiln_error *err) {
    if (!rt || !a) return kiln_fail(err, KILN_EINVAL, "kiln_norm_forward: NULL argument");
    kiln_status st = fwd_check(a, err);
    if (st != KILN_OK || a->rows == 0) return st;
    kiln_kernel *k;
    named_ptr t[8];
    kiln_launch_tensor lt[8];
    kiln_launch_scalar ls[3];
    int n = fwd_table(a, t);
    if ((st = kiln_norm_forward_pick(rt, a, &k, err)) != KILN_OK) return st;
    kiln_launch_args la = launch_args(t, n, lt, ls, a->rows, a->hidden, &a->eps, 0, 0, a->stream);
    return kiln_launch(k, &la, err);
}

/* ---- backward ---- */

static void bwd_spec(const kiln_norm_bwd_args *a, int hidden, char *buf, size_t size) {
    char h[24], res[48];
    hidden_text(hidden, h, sizeof h);
    residual_text(a->dres != 0, a->r_dtype, a->x_dtype, res, sizeof res);
    if (a->kind == KILN_NORM_RMSNORM)
        snprintf(buf, size, "rmsnorm_bwd x=%s w=%s dy=%s dx=%s hidden=%s weight=%s%s%s", kiln_dtype_name(a->x_dtype),
                 kiln_dtype_name(a->w_dtype), kiln_dtype_name(a->dy_dtype), kiln_dtype_name(a->dx_dtype), h,
                 a->weight ? "true" : "false", offset_text(a->offset), res);
    else
        snprintf(buf, size, "layernorm_bwd x=%s w=%s dy=%s dx=%s hidden=%s weight=%s bias=%s%s%s", kiln_dtype_name(a->x_dtype),
                 kiln_dtype_name(a->w_dtype), kiln_dtype_name(a->dy_dtype), kiln_dtype_name(a->dx_dtype), h,
                 a->weight ? "true" : "false", a->dbias ? "true" : "false", offset_text(a->offset), res);
}

static kiln_status bwd_check(const kiln_norm_bwd_args *a, kiln_error *err) {
    if ((unsigned)a->kind > KILN_NORM_RMSNORM) return kiln_fail(err, KILN_EINVAL, "norm: kind must be KILN_NORM_LAYERNORM or KILN_NORM_RMSNORM");
    if (!valid_dtype(a->x_dtype) || !valid_dtype(a->w_dtype) || !valid_dtype(a->dy_dtype) || !valid_dtype(a->dx_dtype) ||
        (a->dres && !valid_dtype(a->r_dtype)))
        return kiln_fail(err, KILN_EINVAL, "norm backward: dtypes must be f32, f16 or bf16");
    if (a->rows < 0 || a->hidden <= 0)
        return kiln_fail(err, KILN_EINVAL, "norm backward: rows (%d) must be >= 0 and hidden (%d) > 0", a->rows, a->hidden);
    if (!a->dx || !a->dy || !a->x || !a->rstd || (a->kind == KILN_NORM_LAYERNORM && !a->mean))
        return kiln_fail(err, KILN_EINVAL, "norm backward: dx, dy, x, rstd%s must be device pointers, not 0",
                         a->kind == KILN_NORM_LAYERNORM ? " and mean" : "");
    if (a->weight && !a->dweight) return kiln_fail(err, KILN_EINVAL, "norm backward: weight is set, so dweight is needed");
    if (a->kind == KILN_NORM_RMSNORM && a->dbias) return kiln_fail(err, KILN_EINVAL, "norm backward: RMSNorm has no dbias");
    return offset_check("norm backward", a->offset, a->weight, err);
}

static int bwd_table(const kiln_norm_bwd_args *a, named_ptr *t) {
    named_ptr v[] = {{"dx", a->dx}, {"ws", a->workspace}, {"dy", a->dy}, {"x", a->x}, {"mean", a->mean},
                     {"rstd", a->rstd}, {"weight", a->weight}, {"dres", a->dres}, {"dweight", a->dweight},
                     {"dbias", a->dbias}};
    memcpy(t, v, sizeof v);
    return (int)(sizeof v / sizeof v[0]);
}

kiln_status kiln_norm_backward_pick(kiln_rt *rt, const kiln_norm_bwd_args *a, kiln_kernel **out, kiln_error *err) {
    if (!rt || !a || !out) return kiln_fail(err, KILN_EINVAL, "kiln_norm_backward_pick: NULL argument");
    kiln_status st = bwd_check(a, err);
    if (st != KILN_OK) return st;
    char fixed[KILN_SPEC_MAX], launch[KILN_SPEC_MAX];
    named_ptr t[10];
    int n = bwd_table(a, t);
    bwd_spec(a, a->hidden, fixed, sizeof fixed);
    bwd_spec(a, 0, launch, sizeof launch);
    return pick(rt, a->kind == KILN_NORM_RMSNORM ? "RMSNorm backward" : "LayerNorm backward", fixed, launch, t, n,
                a->hidden, out, err);
}

kiln_status kiln_norm_backward_workspace(kiln_rt *rt, const kiln_norm_bwd_args *a, size_t *bytes, unsigned *blocks,
                                         kiln_error *err) {
    kiln_kernel *k;
    if (!bytes) return kiln_fail(err, KILN_EINVAL, "kiln_norm_backward_workspace: NULL argument");
    kiln_status st = kiln_norm_backward_pick(rt, a, &k, err);
    if (st != KILN_OK) return st;
    named_ptr t[10];
    kiln_launch_tensor lt[10];
    kiln_launch_scalar ls[2];
    int n = bwd_table(a, t);
    kiln_launch_args la = launch_args(t, n, lt, ls, a->rows, a->hidden, NULL, 0, 0, NULL);
    unsigned grid[3];
    if ((st = rt_launch_size(k, &la, grid, bytes, err)) != KILN_OK) return st;
    if (blocks) *blocks = grid[0];
    return KILN_OK;
}

kiln_status kiln_norm_backward(kiln_rt *rt, const kiln_norm_bwd_args *a, kiln_error *err) {
    if (!rt || !a) return kiln_fail(err, KILN_EINVAL, "kiln_norm_backward: NULL argument");
    kiln_status st = bwd_check(a, err);
    if (st != KILN_OK || a->rows == 0) return st;
    kiln_kernel *k;
    named_ptr t[10];
    kiln_launch_tensor lt[10];
    kiln_launch_scalar ls[2];
    int n = bwd_table(a, t);
    if ((st = kiln_norm_backward_pick(rt, a, &k, err)) != KILN_OK) return st;
    kiln_launch_args la = launch_args(t, n, lt, ls, a->rows, a->hidden, NULL, a->workspace, a->workspace_bytes, a->stream);
    size_t need;
    if ((st = rt_launch_size(k, &la, NULL, &need, err)) != KILN_OK) return st;
    if (need && (!a->workspace || a->workspace_bytes < need))
        return kiln_fail(err, KILN_EINVAL, "norm backward: '%s' needs a workspace of %zu bytes "
                         "(kiln_norm_backward_workspace), got %zu at 0x%llx", k->meta.spec, need, a->workspace_bytes,
                         (unsigned long long)a->workspace);
    return kiln_launch(k, &la, err);
}
