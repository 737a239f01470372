/* bench/gpu/kit_launch.c - GPU check kit: launches a case through the runtime's launch helpers and checks it. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kit.h"

/* ---- family adapters: a case's named tensors and scalars -> the family's typed helper ---- */

static kiln_devptr ptr_of(const kit_case *c, const kit_device_args *a, const char *name) {
    for (int i = 0; i < c->ntensors; i++)
        if (!strcmp(c->tensors[i].name, name)) return a->ptr[i];
    return 0;
}

static double scalar_of(const kit_case *c, const char *name, double def) {
    const kit_scalar *s = kit_case_scalar(c, name);
    return s ? s->value : def;
}

static kiln_dtype dtype_of(const kit_case *c, const char *tensor, kiln_dtype def) {
    const kit_tensor *t = kit_case_tensor(c, tensor);
    return t ? t->dtype : def;
}

static kiln_status layernorm_args(const kit_case *c, const kit_device_args *d, kiln_norm_fwd_args *a) {
    *a = (kiln_norm_fwd_args){
        .y = ptr_of(c, d, "y"), .mean = ptr_of(c, d, "mean"), .rstd = ptr_of(c, d, "rstd"), .x = ptr_of(c, d, "x"),
        .weight = ptr_of(c, d, "weight"), .bias = ptr_of(c, d, "bias"),
        .rows = (int)scalar_of(c, "rows", 0), .hidden = (int)scalar_of(c, "hidden", 0),
        .x_dtype = dtype_of(c, "x", KILN_F32), .y_dtype = dtype_of(c, "y", KILN_F32),
        .w_dtype = dtype_of(c, "weight", dtype_of(c, "bias", dtype_of(c, "x", KILN_F32))),
        .eps = (float)scalar_of(c, "eps", 1e-5), .stream = d->stream};
    return KILN_OK;
}

static kiln_status layernorm_launch(kiln_rt *rt, const kit_case *c, const kit_device_args *d, kiln_kernel **k,
                                    kiln_error *err) {
    kiln_norm_fwd_args a;
    layernorm_args(c, d, &a);
    kiln_status st = kiln_norm_forward(rt, &a, err);
    return st == KILN_OK && k ? kiln_norm_forward_pick(rt, &a, k, err) : st;
}

static void attention_args(const kit_case *c, const kit_device_args *d, kiln_attention_args *a) {
    *a = (kiln_attention_args){
        .o = ptr_of(c, d, "o"), .lse = ptr_of(c, d, "lse"), .q = ptr_of(c, d, "q"), .k = ptr_of(c, d, "k"),
        .v = ptr_of(c, d, "v"), .dtype = dtype_of(c, "q", KILN_F16), .out_dtype = dtype_of(c, "o", KILN_F16),
        .head_dim = (int)scalar_of(c, "head_dim", 64), .causal = (int)scalar_of(c, "causal", 0),
        .batch = (int)scalar_of(c, "batch", 1), .heads_q = (int)scalar_of(c, "heads_q", 1),
        .heads_kv = (int)scalar_of(c, "heads_kv", 1), .seq_q = (int)scalar_of(c, "seq_q", 1),
        .seq_k = (int)scalar_of(c, "seq_k", 1), .scale = (float)scalar_of(c, "scale", 0), .stream = d->stream};
}

static kiln_status attention_launch(kiln_rt *rt, const kit_case *c, const kit_device_args *d, kiln_kernel **k,
                                    kiln_error *err) {
    kiln_attention_args a;
    attention_args(c, d, &a);
    kiln_status st = kiln_attention_forward(rt, &a, err);
    return st == KILN_OK && k ? kiln_attention_pick(rt, &a, k, err) : st;
}

/* Split-KV decoding: kiln_attention_forward_splitkv with the case's split count, its workspace allocated
 * here as a caller would (kiln_attention_forward_workspace); the kernel reported is the split kernel. */
static kiln_status attention_splitkv_launch(kiln_rt *rt, const kit_case *c, const kit_device_args *d, kiln_kernel **k,
                                            kiln_error *err) {
    kiln_attention_args a;
    attention_args(c, d, &a);
    int splits = (int)scalar_of(c, "splits", 0);
    size_t bytes = 0;
    kiln_devptr ws = 0;
    kiln_status st = kiln_attention_forward_workspace(rt, &a, splits, NULL, &bytes, err);
    if (st == KILN_OK && bytes) st = kiln_rt_alloc(rt, bytes, &ws, err);
    if (st == KILN_OK) st = kiln_attention_forward_splitkv(rt, &a, splits, ws, bytes, err);
    if (st == KILN_OK) st = kiln_rt_synchronize(rt, err);
    if (st == KILN_OK && k) {
        char spec[KILN_SPEC_MAX];
        snprintf(spec, sizeof spec, "%s", c->spec);
        st = kiln_rt_get_kernel(rt, spec, k, err);
    }
    if (ws) kiln_rt_free(rt, ws, NULL);
    return st;
}

/* Attention backward: the whole sequence (prep, dkdv, convert or dq) through kiln_attention_backward,
 * its f32 workspace allocated here as a caller would; the kernel reported is the dkdv one. */
static kiln_status attention_bwd_launch(kiln_rt *rt, const kit_case *c, const kit_device_args *d, kiln_kernel **k,
                                        kiln_error *err) {
    kiln_dtype dt = dtype_of(c, "q", KILN_F16);
    kiln_attention_bwd_args a = {
        .dq = ptr_of(c, d, "dq"), .dk = ptr_of(c, d, "dk"), .dv = ptr_of(c, d, "dv"), .q = ptr_of(c, d, "q"),
        .k = ptr_of(c, d, "k"), .v = ptr_of(c, d, "v"), .o = ptr_of(c, d, "o"), .dout = ptr_of(c, d, "dout"),
        .lse = ptr_of(c, d, "lse"), .dtype = dt, .out_dtype = dtype_of(c, "o", dt), .grad_dtype = dtype_of(c, "dq", dt),
        .head_dim = (int)scalar_of(c, "head_dim", 64), .causal = (int)scalar_of(c, "causal", 0),
        .deterministic = (int)scalar_of(c, "deterministic", 0), .batch = (int)scalar_of(c, "batch", 1),
        .heads_q = (int)scalar_of(c, "heads_q", 1), .heads_kv = (int)scalar_of(c, "heads_kv", 1),
        .seq_q = (int)scalar_of(c, "seq_q", 1), .seq_k = (int)scalar_of(c, "seq_k", 1),
        .scale = (float)scalar_of(c, "scale", 0), .stream = d->stream};
    size_t bytes = kiln_attention_backward_workspace(&a);
    kiln_status st = bytes ? kiln_rt_alloc(rt, bytes, &a.workspace, err) : KILN_OK;
    if (st == KILN_OK) st = kiln_attention_backward(rt, &a, err);
    if (st == KILN_OK) st = kiln_rt_synchronize(rt, err);
    kiln_kernel *ks[3];
    if (st == KILN_OK && k && (st = kiln_attention_backward_pick(rt, &a, ks, err)) == KILN_OK) *k = ks[1];
    if (a.workspace) kiln_rt_free(rt, a.workspace, NULL);
    return st;
}

#ifdef KIT_HAVE_NORM
/* The norm families' helpers (runtime/rt_norm.c): forward with the residual form, and the backward's
 * two kernels with their f32 workspace (allocated here, as a caller would). */
static kiln_norm_kind norm_kind(const kit_case *c) {
    return !strncmp(c->family, "rmsnorm", 7) ? KILN_NORM_RMSNORM : KILN_NORM_LAYERNORM;
}

/* offset=1 (zero-centered weights) as the case's canonical spec says */
static int norm_offset(const kit_case *c) { return strstr(c->spec, " offset=1") != NULL; }

static kiln_status norm_fwd_launch(kiln_rt *rt, const kit_case *c, const kit_device_args *d, kiln_kernel **k,
                                   kiln_error *err) {
    kiln_dtype x = dtype_of(c, "x", KILN_F32);
    kiln_norm_fwd_args a = {
        .kind = norm_kind(c), .y = ptr_of(c, d, "y"), .mean = ptr_of(c, d, "mean"), .rstd = ptr_of(c, d, "rstd"),
        .x = ptr_of(c, d, "x"), .weight = ptr_of(c, d, "weight"), .bias = ptr_of(c, d, "bias"),
        .residual = ptr_of(c, d, "residual"), .h = ptr_of(c, d, "h"), .rows = (int)scalar_of(c, "rows", 0),
        .hidden = (int)scalar_of(c, "hidden", 0), .x_dtype = x, .w_dtype = dtype_of(c, "weight", x),
        .y_dtype = dtype_of(c, "y", x), .r_dtype = dtype_of(c, "h", x), .eps = (float)scalar_of(c, "eps", 1e-5),
        .stream = d->stream, .offset = norm_offset(c)};
    kiln_status st = kiln_norm_forward(rt, &a, err);
    return st == KILN_OK && k ? kiln_norm_forward_pick(rt, &a, k, err) : st;
}

static kiln_status norm_bwd_launch(kiln_rt *rt, const kit_case *c, const kit_device_args *d, kiln_kernel **k,
                                   kiln_error *err) {
    kiln_dtype x = dtype_of(c, "x", KILN_F32);
    kiln_norm_bwd_args a = {
        .kind = norm_kind(c), .dx = ptr_of(c, d, "dx"), .dweight = ptr_of(c, d, "dweight"),
        .dbias = ptr_of(c, d, "dbias"), .dy = ptr_of(c, d, "dy"), .x = ptr_of(c, d, "x"), .mean = ptr_of(c, d, "mean"),
        .rstd = ptr_of(c, d, "rstd"), .weight = ptr_of(c, d, "weight"), .dres = ptr_of(c, d, "dres"),
        .rows = (int)scalar_of(c, "rows", 0), .hidden = (int)scalar_of(c, "hidden", 0), .x_dtype = x,
        .w_dtype = dtype_of(c, "weight", dtype_of(c, "dweight", x)), .dy_dtype = dtype_of(c, "dy", x),
        .dx_dtype = dtype_of(c, "dx", x), .r_dtype = dtype_of(c, "dres", x), .stream = d->stream,
        .offset = norm_offset(c)};
    size_t bytes = 0;
    kiln_status st = kiln_norm_backward_workspace(rt, &a, &bytes, NULL, err);
    if (st == KILN_OK && bytes) st = kiln_rt_alloc(rt, bytes, &a.workspace, err);
    a.workspace_bytes = bytes;
    if (st == KILN_OK) st = kiln_norm_backward(rt, &a, err);
    if (st == KILN_OK) st = kiln_rt_synchronize(rt, err);
    if (a.workspace) kiln_rt_free(rt, a.workspace, NULL);
    return st == KILN_OK && k ? kiln_norm_backward_pick(rt, &a, k, err) : st;
}

static kiln_status layernorm_any_launch(kiln_rt *rt, const kit_case *c, const kit_device_args *d, kiln_kernel **k,
                                        kiln_error *err) {
    return kit_case_tensor(c, "residual") || norm_offset(c) ? norm_fwd_launch(rt, c, d, k, err)
                                                            : layernorm_launch(rt, c, d, k, err);
}
#endif

/* Families with a typed launch helper. A new family with one joins here (a few lines); a family
 * without one still runs through the generic route below. */
static const struct {
    const char *family;
    kiln_status (*launch)(kiln_rt *, const kit_case *, const kit_device_args *, kiln_kernel **, kiln_error *);
} adapters[] = {
#ifdef KIT_HAVE_NORM
    {"layernorm", layernorm_any_launch},
    {"rmsnorm", norm_fwd_launch},
    {"layernorm_bwd", norm_bwd_launch},
    {"rmsnorm_bwd", norm_bwd_launch},
#else
    {"layernorm", layernorm_launch},
#endif
    {"attention", attention_launch},
    {"attention_bwd", attention_bwd_launch},
    {"attention_splitkv", attention_splitkv_launch},
};

const char *kit_launch_route(const char *family) {
    for (size_t i = 0; i < sizeof adapters / sizeof adapters[0]; i++)
        if (!strcmp(adapters[i].family, family)) return "helper";
    return "by-name";
}

/* The generic route: the kernel of c->spec, its parameters bound by name to the case's tensors
 * (pointers) and scalars, grid from c->problem and the metadata's grid rule. */
kiln_status kit_launch_by_name(kiln_rt *rt, const kit_case *c, const kit_device_args *d, kiln_kernel **out,
                                  kiln_error *err) {
    kiln_kernel *k;
    kiln_status st = kiln_rt_get_kernel(rt, c->spec, &k, err);
    if (st != KILN_OK) return st;
    const kiln_kernel_meta *m = kiln_kernel_get_meta(k);
#ifdef KIT_HAVE_NORM
    if (m->then_spec[0])
        return kiln_fail(err, KILN_EINVAL, "'%s' is launched with a second kernel ('%s'): only its family's helper "
                         "launches it", m->spec, m->then_spec);
#endif
    kiln_arg args[KILN_MAX_PARAMS];
    for (int i = 0; i < m->nparams; i++) {
        const kiln_param *p = &m->params[i];
        args[i] = (kiln_arg){0};
        if (p->kind == KILN_PARAM_PTR) {
            const kit_tensor *t = kit_case_tensor(c, p->name);
            if (!t && !kit_case_scalar(c, p->name)) /* a pointer the case leaves out is passed as 0 */
                continue;
            if (t) args[i].ptr = d->ptr[t - c->tensors];
            continue;
        }
        const kit_scalar *s = kit_case_scalar(c, p->name);
        if (!s)
            return kiln_fail(err, KILN_EINVAL, "kernel '%s' has parameter '%s' that case '%s' does not give",
                             m->entry, p->name, c->name);
        if (p->kind == KILN_PARAM_I32) args[i].i32 = (int32_t)s->value;
        else if (p->kind == KILN_PARAM_I64) args[i].i64 = (int64_t)s->value;
        else args[i].f32 = (float)s->value;
    }
    unsigned grid[3];
    st = kiln_kernel_grid(k, c->problem, grid, err);
    if (st == KILN_OK) st = kiln_kernel_launch(k, grid, args, m->nparams, d->stream, err);
    if (st == KILN_OK && out) *out = k;
    return st;
}

kiln_status kit_launch(kiln_rt *rt, const kit_case *c, const kit_device_args *a, kiln_kernel **picked,
                       kiln_error *err) {
    for (size_t i = 0; i < sizeof adapters / sizeof adapters[0]; i++)
        if (!strcmp(adapters[i].family, c->family)) return adapters[i].launch(rt, c, a, picked, err);
    return kit_launch_by_name(rt, c, a, picked, err);
}

/* ---- device memory ---- */

kiln_status kit_upload(kiln_rt *rt, const kit_case *c, kit_device_args *a, kiln_error *err) {
    memset(a->ptr, 0, sizeof a->ptr);
    for (int i = 0; i < c->ntensors; i++) {
        const kit_tensor *t = &c->tensors[i];
        kiln_status st = kiln_rt_alloc(rt, kit_tensor_bytes(t), &a->ptr[i], err);
        if (st == KILN_OK && t->role == KIT_IN) st = kiln_rt_upload(rt, a->ptr[i], t->data, kit_tensor_bytes(t), err);
        if (st != KILN_OK) {
            kit_free_device(rt, c, a);
            return st;
        }
    }
    return kit_poison_outputs(rt, c, a, err);
}

kiln_status kit_poison_outputs(kiln_rt *rt, const kit_case *c, const kit_device_args *a, kiln_error *err) {
    for (int i = 0; i < c->ntensors; i++) {
        const kit_tensor *t = &c->tensors[i];
        if (t->role != KIT_OUT) continue;
        size_t n = kit_tensor_bytes(t);
        void *poison = malloc(n);
        if (!poison) return kiln_fail(err, KILN_ENOMEM, "out of memory");
        memset(poison, 0xff, n);
        kiln_status st = kiln_rt_upload(rt, a->ptr[i], poison, n, err);
        free(poison);
        if (st != KILN_OK) return st;
    }
    return KILN_OK;
}

void kit_free_device(kiln_rt *rt, const kit_case *c, kit_device_args *a) {
    for (int i = 0; i < c->ntensors; i++)
        if (a->ptr[i]) kiln_rt_free(rt, a->ptr[i], NULL);
    memset(a->ptr, 0, sizeof a->ptr);
}

/* ---- one check ---- */

const char kit_check_csv_header[] =
    "case,family,mode,route,picked_spec,payload,output,dtype,elements,max_ulps,emu_ulps,tol_ulps,bad,diff_vs_emu,"
    "worst_index,worst_got,worst_ref,verdict\n";

static void normalize(const char *spec, char *out, size_t size) {
    /* family, then key=value words sorted: the runtime's own notion of "same spec" */
    char words[64][128];
    int n = 0;
    char buf[KILN_SPEC_MAX];
    snprintf(buf, sizeof buf, "%s", spec);
    for (char *save = NULL, *w = strtok_r(buf, " ", &save); w && n < 64; w = strtok_r(NULL, " ", &save))
        snprintf(words[n++], sizeof words[0], "%s", w);
    for (int i = 2; i < n; i++)
        for (int j = i; j > 1 && strcmp(words[j - 1], words[j]) > 0; j--) {
            char t[128];
            memcpy(t, words[j], sizeof t), memcpy(words[j], words[j - 1], sizeof t), memcpy(words[j - 1], t, sizeof t);
        }
    size_t len = 0;
    out[0] = 0;
    for (int i = 0; i < n && len < size; i++) len += (size_t)snprintf(out + len, size - len, "%s%s", i ? " " : "", words[i]);
}

long kit_run_and_compare(kiln_rt *rt, const kit_case *c, const char *mode, int by_name, FILE *csv, int verbose) {
    kiln_error err = {0};
    kit_device_args a = {0};
    kiln_kernel *k = NULL;
    kiln_status st = kit_upload(rt, c, &a, &err);
    if (st == KILN_OK) st = by_name ? kit_launch_by_name(rt, c, &a, &k, &err) : kit_launch(rt, c, &a, &k, &err);
    if (st == KILN_OK) st = kiln_rt_synchronize(rt, &err);
    char want[KILN_SPEC_MAX], got[KILN_SPEC_MAX];
    if (st == KILN_OK) {
        normalize(c->spec, want, sizeof want);
        normalize(kiln_kernel_get_meta(k)->spec, got, sizeof got);
        if (strcmp(want, got))
            st = kiln_fail(&err, KILN_EINVAL, "the launch helper picked '%s', the case expects '%s'",
                           kiln_kernel_get_meta(k)->spec, c->spec);
    }
    char payload[64] = "-";
    if (k)
        snprintf(payload, sizeof payload, "%s sm_%d %s", kiln_kernel_payload_kind(k) == KILN_PAYLOAD_CUBIN ? "cubin" : "ptx",
                 kiln_kernel_get_meta(k)->sm, kiln_kernel_origin(k));
    long bad = 0;
    char summary[768] = "";
    size_t sl = 0;
    /* a deterministic case runs twice: every output must come back with the same bits */
    const kit_scalar *det = kit_case_scalar(c, "deterministic");
    int rerun = det && det->value != 0;
    void *first[KIT_MAX_TENSORS] = {0};
    for (int i = 0; st == KILN_OK && i < c->ntensors; i++) {
        const kit_tensor *t = &c->tensors[i];
        if (t->role != KIT_OUT) continue;
        void *host = malloc(kit_tensor_bytes(t));
        if (!host) {
            st = kiln_fail(&err, KILN_ENOMEM, "out of memory");
            break;
        }
        st = kiln_rt_download(rt, host, a.ptr[i], kit_tensor_bytes(t), &err);
        if (st != KILN_OK) {
            free(host);
            break;
        }
        kit_compare r;
        kit_compare_output(t, host, &r);
        if (rerun) first[i] = host;
        else free(host);
        bad += r.bad;
        if (csv)
            fprintf(csv, "%s,%s,%s,%s,%s,%s,%s,%s,%zu,%.4g,%.4g,%.4g,%ld,%ld,%zu,%.9g,%.9g,%s\n", c->name, c->family, mode,
                    by_name ? "by-name" : kit_launch_route(c->family), kiln_kernel_get_meta(k)->spec, payload, t->name,
                    kiln_dtype_name(t->dtype), t->count, r.max_ulps, r.emu_ulps, t->tol_ulps, r.bad, r.diff_emu, r.worst,
                    r.worst_got, r.worst_ref, r.bad ? "FAIL" : "pass");
        sl += (size_t)snprintf(summary + sl, sl < sizeof summary ? sizeof summary - sl : 0, " %s %.3g/%.3g ulp%s%ld!=emu",
                               t->name, r.max_ulps, t->tol_ulps, r.bad ? " FAIL " : " ", r.diff_emu);
        if (r.bad && verbose)
            sl += (size_t)snprintf(summary + sl, sl < sizeof summary ? sizeof summary - sl : 0,
                                   " (%ld bad; [%zu] got %.6g want %.6g)", r.bad, r.worst, r.worst_got, r.worst_ref);
    }
    if (rerun && st == KILN_OK) st = kit_poison_outputs(rt, c, &a, &err);
    if (rerun && st == KILN_OK) st = by_name ? kit_launch_by_name(rt, c, &a, NULL, &err) : kit_launch(rt, c, &a, NULL, &err);
    if (rerun && st == KILN_OK) st = kiln_rt_synchronize(rt, &err);
    for (int i = 0; rerun && st == KILN_OK && i < c->ntensors; i++) {
        const kit_tensor *t = &c->tensors[i];
        if (t->role != KIT_OUT || !first[i]) continue;
        size_t bytes = kit_tensor_bytes(t), es = bytes / (t->count ? t->count : 1);
        unsigned char *host = malloc(bytes);
        if (!host) {
            st = kiln_fail(&err, KILN_ENOMEM, "out of memory");
            break;
        }
        st = kiln_rt_download(rt, host, a.ptr[i], bytes, &err);
        long differ = 0;
        for (size_t e = 0; st == KILN_OK && e < t->count; e++)
            differ += memcmp(host + e * es, (unsigned char *)first[i] + e * es, es) != 0;
        kit_compare r;
        if (st == KILN_OK) kit_compare_output(t, host, &r);
        free(host);
        if (st != KILN_OK) break;
        bad += differ;
        if (csv)
            fprintf(csv, "%s,%s,%s,%s,%s,%s,%s@rerun,%s,%zu,%.4g,%.4g,%.4g,%ld,%ld,%zu,%.9g,%.9g,%s\n", c->name, c->family,
                    mode, by_name ? "by-name" : kit_launch_route(c->family), kiln_kernel_get_meta(k)->spec, payload,
                    t->name, kiln_dtype_name(t->dtype), t->count, r.max_ulps, r.emu_ulps, t->tol_ulps, differ, r.diff_emu,
                    r.worst, r.worst_got, r.worst_ref, differ || r.bad ? "FAIL" : "pass");
        sl += (size_t)snprintf(summary + sl, sl < sizeof summary ? sizeof summary - sl : 0, " %s rerun %s", t->name,
                               differ ? "DIFFERS" : "same bits");
        if (differ && verbose)
            sl += (size_t)snprintf(summary + sl, sl < sizeof summary ? sizeof summary - sl : 0, " (%ld elements)", differ);
    }
    for (int i = 0; i < c->ntensors; i++) free(first[i]);
    kit_free_device(rt, c, &a);
    if (st != KILN_OK) {
        if (csv)
            fprintf(csv, "%s,%s,%s,%s,-,%s,-,-,0,inf,inf,0,-1,-1,0,0,0,ERROR %s\n", c->name, c->family, mode,
                    by_name ? "by-name" : kit_launch_route(c->family), payload, kiln_status_name(st));
        printf("  %-40s %-14s ERROR %s\n", c->name, mode, err.msg);
        return -1;
    }
    printf("  %-40s %-14s %-4s %s\n", c->name, mode, bad ? "FAIL" : "ok", summary);
    return bad;
}
