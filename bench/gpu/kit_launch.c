/* bench/gpu/kit_launch.c - GPU check kit: launches a case through the runtime's generic launch and checks it. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kiln/target.h"
#include "kit.h"

/* ---- the registry's launch: a case's named tensors and scalars -> kiln_launch ---- */

/* Whether a kernel of the sequence declares `word NAME` in its launch description (docs/registry.md:
 * "scalar NAME ...", "stride PARAM TENSOR AXIS"); for a stride, tensor and *axis receive the rest. */
static int declares(const kiln_kernel_meta *const *metas, int n, const char *word, const char *name, char *tensor,
                    int *axis) {
    for (int i = 0; i < n; i++)
        for (const char *l = metas[i]->launch; *l;) {
            size_t len = strcspn(l, "\n");
            char line[256], w[16], nm[KIT_NAME], t[KIT_NAME];
            int ax = -1;
            snprintf(line, sizeof line, "%.*s", (int)len, l);
            int got = sscanf(line, "%15s %47s %47s %d", w, nm, t, &ax);
            if (got >= 2 && !strcmp(w, word) && !strcmp(nm, name)) {
                if (tensor) snprintf(tensor, KIT_NAME, "%s", got == 4 ? t : "");
                if (axis) *axis = got == 4 ? ax : -1;
                return 1;
            }
            l += len + (l[len] == '\n');
        }
    return 0;
}

/* The case's kernel through kiln_launch, as a caller of the generic launch gives it: every tensor by
 * name, the scalars the sequence's launch descriptions declare (the case's others, e.g. `head_dim`,
 * are facts of the spec), a stride scalar as its tensor's stride, and the workspace the sequence
 * needs (kiln_rt_alloc'd here, as a caller would). The kernel reported is the case's own. */
kiln_status kit_launch(kiln_rt *rt, const kit_case *c, const kit_device_args *d, kiln_kernel **picked,
                       kiln_error *err) {
    kiln_kernel *k, *ks[KIT_MAX_STEPS];
    kiln_status st = kiln_rt_get_kernel(rt, c->spec, &k, err);
    if (st != KILN_OK) return st;
    char specs[KIT_MAX_STEPS][KILN_SPEC_MAX];
    const kiln_kernel_meta *metas[KIT_MAX_STEPS];
    int self, n = kiln_launch_sequence(kiln_kernel_get_meta(k), specs, KIT_MAX_STEPS, &self);
    if (n > KIT_MAX_STEPS) return kiln_fail(err, KILN_EINVAL, "'%s' runs %d kernels; the kit takes %d", c->spec, n, KIT_MAX_STEPS);
    for (int i = 0; i < n && st == KILN_OK; i++) {
        st = i == self ? (ks[i] = k, KILN_OK) : kiln_rt_get_kernel(rt, specs[i], &ks[i], err);
        if (st == KILN_OK) metas[i] = kiln_kernel_get_meta(ks[i]);
    }
    if (st != KILN_OK) return st;
    kiln_launch_tensor t[KIT_MAX_TENSORS];
    kiln_launch_scalar s[KIT_MAX_SCALARS];
    int ns = 0;
    for (int i = 0; i < c->ntensors; i++) t[i] = (kiln_launch_tensor){.name = c->tensors[i].name, .ptr = d->ptr[i]};
    for (int i = 0; i < c->nscalars; i++) {
        const kit_scalar *x = &c->scalars[i];
        char tensor[KIT_NAME];
        int axis = -1;
        if (declares(metas, n, "scalar", x->name, NULL, NULL)) s[ns++] = (kiln_launch_scalar){x->name, x->value};
        else if (declares(metas, n, "stride", x->name, tensor, &axis)) {
            const kit_tensor *on = kit_case_tensor(c, tensor);
            if (!on || axis < 0 || axis >= KILN_LAUNCH_DIMS)
                return kiln_fail(err, KILN_EINVAL, "case '%s': stride '%s' of tensor '%s' axis %d, which the case lacks",
                                 c->name, x->name, tensor, axis);
            t[on - c->tensors].strides[axis] = (int64_t)x->value;
        }
    }
    kiln_launch_args a = {.tensors = t, .ntensors = c->ntensors, .scalars = s, .nscalars = ns, .stream = d->stream};
    size_t bytes = 0;
    st = kiln_launch_workspace(k, &a, &bytes, err);
    if (st == KILN_OK && bytes) st = kiln_rt_alloc(rt, bytes, &a.workspace, err);
    a.workspace_bytes = bytes;
    if (st == KILN_OK) st = kiln_launch(k, &a, err);
    if (st == KILN_OK && a.workspace) st = kiln_rt_synchronize(rt, err); /* before the workspace goes */
    if (a.workspace) kiln_rt_free(rt, a.workspace, NULL);
    if (st == KILN_OK && picked) *picked = k;
    return st;
}

int kit_case_kernels(kiln_rt *rt, const kit_case *c) {
    kiln_kernel *k;
    kiln_error err;
    if (kiln_rt_get_kernel(rt, c->spec, &k, &err) != KILN_OK) return 1;
    return kiln_launch_sequence(kiln_kernel_get_meta(k), NULL, 0, NULL);
}

/* A kernel's tensor map parameters (TMA): the runtime binds its launch description to the case's tensors and
 * scalars (kiln_launch_bind builds and checks each map from its tensor) and the driver encodes them
 * (kiln_tensor_map_encode) into maps; args[param] then points at its map. */
static kiln_status bind_tmaps(kiln_rt *rt, const kit_case *c, const kit_device_args *d, const kiln_kernel_meta *m,
                              kiln_arg *args, kiln_tensor_map maps[KILN_LAUNCH_TMAPS], kiln_error *err) {
    kiln_launch_tensor t[KIT_MAX_TENSORS];
    kiln_launch_scalar s[KIT_MAX_SCALARS];
    int ns = 0;
    for (int i = 0; i < c->ntensors; i++) t[i] = (kiln_launch_tensor){.name = c->tensors[i].name, .ptr = d->ptr[i]};
    for (int i = 0; i < c->nscalars; i++)
        if (declares(&m, 1, "scalar", c->scalars[i].name, NULL, NULL))
            s[ns++] = (kiln_launch_scalar){c->scalars[i].name, c->scalars[i].value};
    kiln_launch_args a = {.tensors = t, .ntensors = c->ntensors, .scalars = s, .nscalars = ns};
    kiln_launch_step *step = malloc(sizeof *step); /* over 1 KB of maps: not on the stack */
    if (!step) return kiln_fail(err, KILN_ENOMEM, "out of memory binding the tensor maps of '%s'", m->spec);
    size_t ws = 0;
    kiln_status st = kiln_launch_bind(&m, 1, 0, &a, 0, step, &ws, err);
    for (int j = 0; st == KILN_OK && j < step->ntmaps; j++) {
        st = kiln_tensor_map_encode(rt, &step->tmaps[j], &maps[j], err);
        args[step->tmap_param[j]].tmap = &maps[j];
    }
    free(step);
    return st;
}

/* The by-name route: the kernel of c->spec alone, its parameters bound by name to the case's tensors
 * (pointers) and scalars (tensor maps through bind_tmaps), grid from c->problem and the metadata's grid
 * rule; a cross-check of the launch description against the kernel's own parameter list. */
kiln_status kit_launch_by_name(kiln_rt *rt, const kit_case *c, const kit_device_args *d, kiln_kernel **out,
                                  kiln_error *err) {
    kiln_kernel *k;
    kiln_status st = kiln_rt_get_kernel(rt, c->spec, &k, err);
    if (st != KILN_OK) return st;
    const kiln_kernel_meta *m = kiln_kernel_get_meta(k);
    int nk = kiln_launch_sequence(m, NULL, 0, NULL);
    if (nk > 1)
        return kiln_fail(err, KILN_EINVAL, "'%s' runs in a sequence of %d kernels: only the generic launch runs it", m->spec,
                         nk);
    kiln_arg args[KILN_MAX_PARAMS];
    _Alignas(64) kiln_tensor_map maps[KILN_LAUNCH_TMAPS];
    int tmaps = 0;
    for (int i = 0; i < m->nparams; i++) {
        const kiln_param *p = &m->params[i];
        args[i] = (kiln_arg){0};
        if (p->kind == KILN_PARAM_TMAP) {
            tmaps = 1;
            continue;
        }
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
    if (tmaps) st = bind_tmaps(rt, c, d, m, args, maps, err);
    unsigned grid[3];
    if (st == KILN_OK) st = kiln_kernel_grid(k, c->problem, grid, err);
    if (st == KILN_OK) st = kiln_kernel_launch(k, grid, args, m->nparams, d->stream, err);
    if (st == KILN_OK && out) *out = k;
    return st;
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

long kit_run_and_compare(kiln_rt *rt, const kit_case *c, const char *mode, int by_name, FILE *csv, int verbose) {
    kiln_error err = {0};
    kit_device_args a = {0};
    kiln_kernel *k = NULL;
    kiln_status st = kit_upload(rt, c, &a, &err);
    if (st == KILN_OK) st = by_name ? kit_launch_by_name(rt, c, &a, &k, &err) : kit_launch(rt, c, &a, &k, &err);
    if (st == KILN_OK) st = kiln_rt_synchronize(rt, &err);
    if (st == KILN_OK && strcmp(kiln_kernel_get_meta(k)->spec, c->spec))
        st = kiln_fail(&err, KILN_EINVAL, "the runtime gave '%s' for the case's '%s'", kiln_kernel_get_meta(k)->spec,
                       c->spec);
    char payload[64] = "-", smn[16];
    if (k)
        snprintf(payload, sizeof payload, "%s %s %s", kiln_kernel_payload_kind(k) == KILN_PAYLOAD_CUBIN ? "cubin" : "ptx",
                 kiln_sm_name(kiln_kernel_get_meta(k)->sm, smn), kiln_kernel_origin(k));
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
                    by_name ? "by-name" : "launch", kiln_kernel_get_meta(k)->spec, payload, t->name,
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
                    mode, by_name ? "by-name" : "launch", kiln_kernel_get_meta(k)->spec, payload,
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
                    by_name ? "by-name" : "launch", payload, kiln_status_name(st));
        printf("  %-40s %-14s ERROR %s\n", c->name, mode, err.msg);
        return -1;
    }
    printf("  %-40s %-14s %-4s %s\n", c->name, mode, bad ? "FAIL" : "ok", summary);
    return bad;
}
