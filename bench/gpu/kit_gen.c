/* bench/gpu/kit_gen.c - GPU check kit, generator side (static libkiln): specs, check cases, the JIT-path check. */
#include <getopt.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "kiln/emu.h"
#include "attention.ref.h"
#include "kiln/emu_case.h"
#include "kiln/kiln.h"
#include "kiln/runtime.h"
#include "kit.h"
#include "kit_rows.h"

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

/* ---- specs of the rows ---- */

static void ln_spec(const char *x, const char *w, const char *y, int hidden, char *buf, size_t size) {
    char h[16];
    snprintf(h, sizeof h, hidden && hidden <= KIT_LN_MAX_FIXED ? "%d" : "launch", hidden);
    snprintf(buf, size, KIT_LN_SPEC, x, w, y, h);
}

static void attn_spec(const char *dtype, const char *out, int d, int causal, char *buf, size_t size) {
    snprintf(buf, size, KIT_ATTN_SPEC, dtype, out, d, causal ? "true" : "false");
}

static void attn_split_spec(const char *dtype, const char *out, int d, int causal, char *buf, size_t size) {
    snprintf(buf, size, KIT_ATTN_SPLIT_SPEC, dtype, out, d, causal ? "true" : "false");
}

/* The attention backward's spec: its dkdv kernel, whose launch description runs the whole sequence. */
static void attn_bwd_spec(const char *dtype, int d, int causal, int det, char *buf, size_t size) {
    snprintf(buf, size, KIT_ATTN_BWD_SPEC, dtype, d, causal ? "true" : "false", det ? "true" : "false");
}

/* The kit's spec list: canonical specs in first-seen order, each followed by the other kernels its
 * launch runs on some SM (the template's K.launch sequence: a norm backward's reduction, split-KV's
 * combine, the attention backward's prep and convert or dq), so that the bundle holds every kernel
 * kiln_launch asks for. */
enum { MAX_SPECS = 512 };
typedef struct spec_list {
    kiln_gen *gen;
    char (*spec)[KILN_SPEC_MAX];
    int n;
} spec_list;

static void list_put(spec_list *l, const char *canon) {
    for (int i = 0; i < l->n; i++)
        if (!strcmp(l->spec[i], canon)) return;
    if (l->n < MAX_SPECS) snprintf(l->spec[l->n++], KILN_SPEC_MAX, "%s", canon);
}

/* Adds raw's kernels as generated for each of the nsm SMs in sms. optional: a spec some SM cannot generate is left
 * out (returns 0); otherwise that is an error (-1, message printed). */
static int list_add_on(spec_list *l, const char *raw, int optional, const int *sms, int nsm) {
    enum { NSM = 8 };
    char canon[KILN_SPEC_MAX], seq[NSM][KIT_MAX_STEPS][KILN_SPEC_MAX];
    int nseq[NSM], self[NSM];
    kiln_error err;
    if (nsm > NSM) return fprintf(stderr, "kiln-kit: %d SMs for one spec list (at most %d)\n", nsm, NSM), -1;
    if (kiln_canonical_spec(l->gen, raw, canon, sizeof canon, &err) != KILN_OK)
        return fprintf(stderr, "kiln-kit: %s\n", err.msg), -1;
    for (int t = 0; t < nsm; t++) {
        kiln_module *mod;
        if (kiln_generate(l->gen, canon, sms[t], KILN_EMIT_LL, &mod, &err) != KILN_OK)
            return optional ? 0 : (fprintf(stderr, "kiln-kit: %s\n", err.msg), -1);
        nseq[t] = kiln_launch_sequence(kiln_module_meta(mod), seq[t], KIT_MAX_STEPS, &self[t]);
        kiln_module_free(mod);
        if (nseq[t] > KIT_MAX_STEPS) return fprintf(stderr, "kiln-kit: '%s' runs too many kernels\n", canon), -1;
    }
    /* the kernels before it, itself, the kernels after it: a sequence in launch order */
    for (int t = 0; t < nsm; t++)
        for (int i = 0; i < self[t]; i++) list_put(l, seq[t][i]);
    list_put(l, canon);
    for (int t = 0; t < nsm; t++)
        for (int i = self[t] + 1; i < nseq[t]; i++) list_put(l, seq[t][i]);
    return 1;
}

/* The main bundle's SMs: raw's kernels on every one. */
static int list_add(spec_list *l, const char *raw, int optional) {
    static const int all_sms[] = {75, 80, 86, 89, 90};
    return list_add_on(l, raw, optional, all_sms, (int)(sizeof all_sms / sizeof all_sms[0]));
}

static void attn_wgmma_spec(const kit_attn_row *r, char *buf, size_t size) {
    snprintf(buf, size, KIT_ATTN_WGMMA_SPEC, r->dtype, r->out, r->head_dim, r->causal ? "true" : "false");
}

/* A kit_attn_wgmma_kv_rows row's spec: split-KV, paged, or both. */
static void attn_wgmma_kv_spec(const kit_attn_wgmma_kv_row *r, char *buf, size_t size) {
    const char *fmt = r->splits && r->page_size ? KIT_ATTN_WGMMA_PAGED_SPLIT_SPEC
                      : r->splits               ? KIT_ATTN_WGMMA_SPLIT_SPEC
                                                : KIT_ATTN_WGMMA_PAGED_SPEC;
    snprintf(buf, size, fmt, r->dtype, r->dtype, r->head_dim, r->causal ? "true" : "false");
}

/* A kit_attn_bwd_wgmma_rows row's spec (its dkdv kernel, path=wgmma; window=true when the row has a window). */
static void attn_bwd_wgmma_spec(const kit_attn_bwd_wgmma_row *r, char *buf, size_t size) {
    int n = snprintf(buf, size, KIT_ATTN_BWD_WGMMA_SPEC, r->dtype, r->head_dim, r->causal ? "true" : "false",
                     r->deterministic ? "true" : "false");
    if (r->window && n > 0 && (size_t)n < size) snprintf(buf + n, size - (size_t)n, " window=true");
}

/* Whether canon is one of the first n specs of l. */
static int listed(const spec_list *l, int n, const char *canon) {
    for (int i = 0; i < n; i++)
        if (!strcmp(l->spec[i], canon)) return 1;
    return 0;
}

/* The arch bundle's specs (kit_90a.kbundle, sm_90a only): every sm_90a check row's kernel (the wgmma forward, its
 * split-KV and paged forms, the wgmma backward) with the other kernels its launch runs (split-KV's combine, the
 * backward's prep, convert or dq), each generated for sm_90a here so that a spec the template refuses fails the kit's
 * build; then the speed sweeps' kernels, each of which must be a row's (a kernel is checked before it is timed, and
 * compute-sanitizer, which runs the rows, covers every one); and the sweep's head dims the backward leaves out
 * must still be refused (summary.md says so). */
static int cmd_specs_arch(void) {
    static char specs[MAX_SPECS][KILN_SPEC_MAX];
    static const int arch[] = {KIT_SM_90A};
    spec_list l = {.spec = specs};
    kiln_error err;
    if (kiln_gen_create(&l.gen, NULL, &err) != KILN_OK) return fprintf(stderr, "kiln-kit: %s\n", err.msg), 1;
    char raw[KILN_SPEC_MAX], canon[KILN_SPEC_MAX];
    int rc = 0;
    for (size_t i = 0; i < sizeof kit_attn_wgmma_rows / sizeof *kit_attn_wgmma_rows && !rc; i++) {
        attn_wgmma_spec(&kit_attn_wgmma_rows[i], raw, sizeof raw);
        rc = list_add_on(&l, raw, 0, arch, 1) < 0;
    }
    for (size_t i = 0; i < sizeof kit_attn_wgmma_kv_rows / sizeof *kit_attn_wgmma_kv_rows && !rc; i++) {
        attn_wgmma_kv_spec(&kit_attn_wgmma_kv_rows[i], raw, sizeof raw);
        rc = list_add_on(&l, raw, 0, arch, 1) < 0;
    }
    for (size_t i = 0; i < sizeof kit_attn_bwd_wgmma_rows / sizeof *kit_attn_bwd_wgmma_rows && !rc; i++) {
        attn_bwd_wgmma_spec(&kit_attn_bwd_wgmma_rows[i], raw, sizeof raw);
        rc = list_add_on(&l, raw, 0, arch, 1) < 0;
    }
    const int nrows = l.n;
    /* the sweeps: forward at kit_wgmma_sweep_d, backward (atomic and deterministic) at kit_wgmma_bwd_sweep_d */
    size_t nt = sizeof kit_wgmma_sweep_dtypes / sizeof(char *), nd = sizeof kit_wgmma_sweep_d / sizeof(int),
           nb = sizeof kit_wgmma_bwd_sweep_d / sizeof(int);
    for (size_t k = 0; k < nt * (nd * 2 + nb * 4) && !rc; k++) {
        const char *dt = kit_wgmma_sweep_dtypes[k / (nd * 2 + nb * 4)];
        size_t x = k % (nd * 2 + nb * 4);
        if (x < nd * 2) {
            snprintf(raw, sizeof raw, KIT_ATTN_WGMMA_SPEC, dt, dt, kit_wgmma_sweep_d[x / 2], x % 2 ? "true" : "false");
        } else {
            x -= nd * 2;
            snprintf(raw, sizeof raw, KIT_ATTN_BWD_WGMMA_SPEC, dt, kit_wgmma_bwd_sweep_d[x / 4], x % 2 ? "true" : "false",
                     x / 2 % 2 ? "true" : "false");
        }
        if (kiln_canonical_spec(l.gen, raw, canon, sizeof canon, &err) != KILN_OK)
            rc = 1, fprintf(stderr, "kiln-kit: %s\n", err.msg);
        else if (!listed(&l, nrows, canon))
            rc = 1, fprintf(stderr, "kiln-kit: the sm_90a speed sweep times '%s', which no check row runs (add a row to "
                                    "bench/gpu/kit_rows.h)\n", canon);
    }
    for (size_t d = 0; d < nd && !rc; d++) {
        int built = 0;
        for (size_t b = 0; b < nb; b++) built |= kit_wgmma_bwd_sweep_d[b] == kit_wgmma_sweep_d[d];
        if (built) continue;
        kiln_module *mod = NULL;
        snprintf(raw, sizeof raw, KIT_ATTN_BWD_WGMMA_SPEC, kit_wgmma_sweep_dtypes[0], kit_wgmma_sweep_d[d], "false", "false");
        if (kiln_canonical_spec(l.gen, raw, canon, sizeof canon, &err) == KILN_OK &&
            kiln_generate(l.gen, canon, KIT_SM_90A, KILN_EMIT_LL, &mod, &err) == KILN_OK)
            rc = 1, fprintf(stderr, "kiln-kit: the sm_90a backward builds head_dim %d now: add it to kit_wgmma_bwd_sweep_d "
                                    "(bench/gpu/kit_rows.h; summary.md says it is refused)\n", kit_wgmma_sweep_d[d]);
        kiln_module_free(mod);
    }
    for (int i = 0; i < l.n && !rc; i++) printf("%s\n", l.spec[i]);
    kiln_gen_destroy(l.gen);
    return rc;
}

/* Every spec the kit needs in its bundle, canonical, one per line. */
static int cmd_specs(void) {
    static char specs[MAX_SPECS][KILN_SPEC_MAX];
    spec_list l = {.spec = specs};
    kiln_error err;
    if (kiln_gen_create(&l.gen, NULL, &err) != KILN_OK) return fprintf(stderr, "kiln-kit: %s\n", err.msg), 1;
    char raw[KILN_SPEC_MAX];
    int rc = 0;
#define ADD(...)                                                                                   \
    do {                                                                                           \
        snprintf(raw, sizeof raw, __VA_ARGS__);                                                    \
        if (list_add(&l, raw, 0) < 0) rc = 1;                                                      \
    } while (0)
    for (size_t i = 0; i < sizeof kit_ln_rows / sizeof kit_ln_rows[0] && !rc; i++) {
        const kit_ln_row *r = &kit_ln_rows[i];
        ln_spec(r->x, r->w, r->y, r->hidden, raw, sizeof raw);
        if (list_add(&l, raw, 0) < 0) rc = 1;
    }
    for (size_t i = 0; i < sizeof kit_attn_rows / sizeof kit_attn_rows[0] && !rc; i++) {
        const kit_attn_row *r = &kit_attn_rows[i];
        attn_spec(r->dtype, r->out, r->head_dim, r->causal, raw, sizeof raw);
        if (list_add(&l, raw, 0) < 0) rc = 1;
    }
    /* split-KV rows, and the decode sweep's split and non-split kernels */
    for (size_t i = 0; i <= sizeof kit_attn_split_rows / sizeof kit_attn_split_rows[0] && !rc; i++) {
        const kit_attn_split_row *r = i < sizeof kit_attn_split_rows / sizeof kit_attn_split_rows[0] ? &kit_attn_split_rows[i] : NULL;
        attn_split_spec(r ? r->dtype : "bf16", r ? r->out : "bf16", r ? r->head_dim : KIT_DECODE_D, r ? r->causal : 0,
                        raw, sizeof raw);
        if (list_add(&l, raw, 0) < 0) rc = 1;
    }
    if (!rc) {
        attn_spec("bf16", "bf16", KIT_DECODE_D, 0, raw, sizeof raw);
        if (list_add(&l, raw, 0) < 0) rc = 1;
    }
    /* the paged decode rows: split-KV over pages, and the plain paged kernel (one split) */
    if (!rc) ADD(KIT_ATTN_PAGED_SPLIT_SPEC, "bf16", "bf16", KIT_DECODE_D, "false");
    if (!rc) ADD(KIT_ATTN_PAGED_SPEC, "bf16", "bf16", KIT_DECODE_D, "false");
    /* the varlen and rotary speed rows */
    for (size_t i = 0; i < sizeof kit_varlen_sweep_d / sizeof *kit_varlen_sweep_d && !rc; i++)
        for (int causal = 0; causal < 2 && !rc; causal++)
            ADD(KIT_ATTN_VARLEN_SPEC, "bf16", "bf16", kit_varlen_sweep_d[i], causal ? "true" : "false");
    for (size_t i = 0; i < sizeof kit_rotary_sweep_modes / sizeof *kit_rotary_sweep_modes && !rc; i++)
        ADD(KIT_ROTARY_SPEC, KIT_ROTARY_D, KIT_ROTARY_D, kit_rotary_sweep_modes[i]);
    for (size_t i = 0; i < sizeof kit_attn_bwd_rows / sizeof kit_attn_bwd_rows[0] && !rc; i++) {
        const kit_attn_bwd_row *r = &kit_attn_bwd_rows[i];
        attn_bwd_spec(r->dtype, r->head_dim, r->causal, r->deterministic, raw, sizeof raw);
        if (list_add(&l, raw, 0) < 0) rc = 1;
    }
    for (size_t i = 0; i < sizeof kit_attn_sweep_d / sizeof *kit_attn_sweep_d && !rc; i++)
        for (int causal = 0; causal < 2; causal++)
            for (int det = 0; det < 2; det++) {
                attn_bwd_spec("bf16", kit_attn_sweep_d[i], causal, det, raw, sizeof raw);
                if (list_add(&l, raw, 0) < 0) rc = 1;
            }
    for (size_t t = 0; t < sizeof kit_ln_sweep_dtypes / sizeof *kit_ln_sweep_dtypes; t++)
        for (size_t i = 0; i < sizeof kit_ln_sweep_hidden / sizeof *kit_ln_sweep_hidden && !rc; i++) {
            const char *d = kit_ln_sweep_dtypes[t];
            ln_spec(d, d, d, kit_ln_sweep_hidden[i], raw, sizeof raw);
            if (list_add(&l, raw, 0) < 0) rc = 1;
        }
    for (size_t t = 0; t < sizeof kit_attn_sweep_dtypes / sizeof *kit_attn_sweep_dtypes; t++)
        for (size_t i = 0; i < sizeof kit_attn_sweep_d / sizeof *kit_attn_sweep_d && !rc; i++)
            for (int causal = 0; causal < 2; causal++) {
                const char *d = kit_attn_sweep_dtypes[t];
                attn_spec(d, d, kit_attn_sweep_d[i], causal, raw, sizeof raw);
                if (list_add(&l, raw, 0) < 0) rc = 1;
            }
    /* the wgmma backward sweep's FA2 (path=auto) sequences, atomic and deterministic, timed beside it on a 9.0 device */
    for (size_t t = 0; t < sizeof kit_wgmma_sweep_dtypes / sizeof *kit_wgmma_sweep_dtypes && !rc; t++)
        for (size_t i = 0; i < sizeof kit_wgmma_bwd_sweep_d / sizeof *kit_wgmma_bwd_sweep_d && !rc; i++)
            for (int k = 0; k < 4 && !rc; k++) {
                attn_bwd_spec(kit_wgmma_sweep_dtypes[t], kit_wgmma_bwd_sweep_d[i], k & 1, k >> 1, raw, sizeof raw);
                if (list_add(&l, raw, 0) < 0) rc = 1;
            }
    /* the wgmma sweep's FA2 (path=auto) kernels, timed beside it on a 9.0 device */
    for (size_t t = 0; t < sizeof kit_wgmma_sweep_dtypes / sizeof *kit_wgmma_sweep_dtypes && !rc; t++)
        for (size_t i = 0; i < sizeof kit_wgmma_sweep_d / sizeof *kit_wgmma_sweep_d && !rc; i++)
            for (int causal = 0; causal < 2; causal++) {
                const char *d = kit_wgmma_sweep_dtypes[t];
                attn_spec(d, d, kit_wgmma_sweep_d[i], causal, raw, sizeof raw);
                if (list_add(&l, raw, 0) < 0) rc = 1;
            }
#ifdef KIT_HAVE_NORM
    /* the norm rows, then the RMSNorm forward, LayerNorm backward and RMSNorm backward speed sweeps
     * (bf16, with offset=1 at the offset sweep's sizes), then the backward forms the sweep times
     * beside them (those that generate for every SM) */
    size_t noff = sizeof kit_offset_sweep_hidden / sizeof *kit_offset_sweep_hidden;
    size_t nsweep = sizeof kit_ln_sweep_hidden / sizeof(int);
    for (size_t k = 0; k < 3 * noff && !rc; k++)
        ADD("%s x=bf16 hidden=%d offset=1", kit_norm_sweeps[k / noff].family, kit_offset_sweep_hidden[k % noff]);
    for (size_t i = 0; i < sizeof kit_norm_rows / sizeof kit_norm_rows[0] && !rc; i++) ADD("%s", kit_norm_rows[i].spec);
    for (size_t k = 0; k < 3 * nsweep && !rc; k++)
        if (kit_ln_sweep_hidden[k % nsweep] > KIT_LN_MAX_FIXED) ADD("%s x=bf16 hidden=launch", kit_norm_sweeps[k / nsweep].family);
        else ADD("%s x=bf16 hidden=%d", kit_norm_sweeps[k / nsweep].family, kit_ln_sweep_hidden[k % nsweep]);
    for (size_t i = 0; i < sizeof kit_norm_bwd_form_rows / sizeof *kit_norm_bwd_form_rows && !rc; i++) {
        const kit_form_row *f = &kit_norm_bwd_form_rows[i];
        snprintf(raw, sizeof raw, "%s x=bf16 hidden=%d form=%s", f->family, f->hidden, f->form);
        if (list_add(&l, raw, 1) < 0) rc = 1;
    }
#endif
#undef ADD
    for (int i = 0; i < l.n && !rc; i++) printf("%s\n", l.spec[i]);
    kiln_gen_destroy(l.gen);
    return rc;
}

/* ---- case building ---- */

/* The case's family: its canonical spec's first word. */
static void spec_family(const char *spec, kit_case *c) {
    snprintf(c->family, sizeof c->family, "%.*s", (int)strcspn(spec, " "), spec);
}

/* Tolerance: twice the emulator's own largest error plus two ulps, and at least a floor per dtype
 * (f32 outputs carry f32 reduction and approximate-instruction error; f16/bf16 outputs are
 * dominated by their own rounding). The emulator runs the very module that became the PTX, so a
 * GPU result beyond this is a different computation, not rounding. */
static double tolerance(kiln_dtype t, double emu_ulps) {
    double floor_ulps = t == KILN_F32 ? 64 : 4;
    double tol = 2 * emu_ulps + 2;
    return tol > floor_ulps ? tol : floor_ulps;
}

static double rms(const double *v, size_t n) {
    double s = 0;
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (isfinite(v[i])) s += v[i] * v[i], k++;
    return k ? sqrt(s / (double)k) : 1;
}

/* Adds a tensor; data (and ref for outputs) are copied. */
static kit_tensor *add_tensor(kit_case *c, const char *name, kiln_dtype t, kit_role role, size_t count,
                              const void *data, const double *ref) {
    if (c->ntensors == KIT_MAX_TENSORS) abort(); /* a row table with more tensors than the kit allows */
    kit_tensor *x = &c->tensors[c->ntensors++];
    snprintf(x->name, sizeof x->name, "%s", name);
    x->dtype = t, x->role = role, x->count = count;
    x->data = malloc(kit_tensor_bytes(x));
    if (x->data) memcpy(x->data, data, kit_tensor_bytes(x));
    if (role == KIT_OUT) {
        x->ref = malloc(count * sizeof(double));
        if (x->ref) memcpy(x->ref, ref, count * sizeof(double));
        x->scale = rms(ref, count);
        double e = 0;
        for (size_t i = 0; i < count && x->data; i++) {
            double u = kit_error_ulps(t, kit_value(t, data, i), ref[i], x->scale);
            if (u > e) e = u;
        }
        x->tol_ulps = tolerance(t, e);
    }
    return x;
}

static void add_scalar(kit_case *c, const char *name, kiln_param_kind k, double v) {
    if (c->nscalars == KIT_MAX_SCALARS) abort();
    kit_scalar *s = &c->scalars[c->nscalars++];
    snprintf(s->name, sizeof s->name, "%s", name);
    s->kind = k, s->value = v;
}

static int tensors_ok(const kit_case *c) {
    for (int i = 0; i < c->ntensors; i++)
        if (!c->tensors[i].data || (c->tensors[i].role == KIT_OUT && !c->tensors[i].ref)) return 0;
    return 1;
}

static kiln_status add_case_tensor(kit_case *c, kiln_case *cs, const char *name, kiln_dtype t, kit_role role,
                                   kiln_error *err);
static kiln_status add_kernel_tensor(kit_case *c, kiln_case *cs, const char *name, kit_role role, int need,
                                     kiln_error *err);

/* A LayerNorm case through the family's reference and the case runner: x, weight, bias drawn from the
 * row's seed (large-mean rows where the row says so), y, mean and rstd as the emulator computed them,
 * with the float64 forward as their reference. */
static kiln_status build_ln(kiln_gen *gen, kiln_emu *emu, const kit_ln_row *r, int sm, int quick, kit_case *c,
                            kiln_error *err) {
    char spec[KILN_SPEC_MAX];
    ln_spec(r->x, r->w, r->y, r->hidden, spec, sizeof spec);
    int hidden = r->hidden ? r->hidden : r->run_hidden;
    int rows = (quick ? (1 << 14) : (1 << 18)) / hidden + 3;
    kiln_case_opts o = {.sm = sm, .seed = (uint64_t)hidden * 7 + (uint64_t)sm,
                        .input = r->large_mean ? KILN_LN_LARGE_MEAN : KILN_LN_RANDOM};
    kiln_case_opts_set(&o, "rows", rows);
    kiln_case_opts_set(&o, "hidden", hidden);
    kiln_case *cs = NULL;
    kiln_status st = kiln_case_create(&cs, gen, emu, spec, &o, err);
    if (st == KILN_OK) st = kiln_case_run(cs, err);
    long bad = st == KILN_OK ? kiln_case_check(cs) : 0;
    if (bad) st = kiln_fail(err, KILN_EEMU, "the emulator's own result fails the LayerNorm error model (%ld bad)", bad);
    const char *canon = st == KILN_OK ? kiln_emu_kernel_meta(kiln_case_kernel(cs))->spec : "";
    if (st == KILN_OK) {
        snprintf(c->name, sizeof c->name, "ln-%s.%s.%s-h%s%d%s", r->x, r->w, r->y, r->hidden ? "" : "launch",
                 hidden, r->large_mean ? "-largemean" : "");
        spec_family(canon, c);
        snprintf(c->spec, sizeof c->spec, "%s", canon);
        c->emu_sm = sm;
        c->problem[0] = (uint64_t)rows, c->problem[1] = c->problem[2] = 1;
        add_scalar(c, "rows", KILN_PARAM_I32, rows);
        add_scalar(c, "hidden", KILN_PARAM_I32, hidden);
        add_scalar(c, "eps", KILN_PARAM_F32, (double)1e-5f); /* the reference's default eps */
        /* in the case file's order, each in the dtype its kernel declares; `need` 0: only when the case has it */
        const struct { const char *n; kit_role role; int need; } ts[] = {
            {"x", KIT_IN, 1}, {"weight", KIT_IN, 0}, {"bias", KIT_IN, 0}, {"y", KIT_OUT, 1}, {"mean", KIT_OUT, 1},
            {"rstd", KIT_OUT, 1}};
        for (size_t i = 0; i < sizeof ts / sizeof ts[0] && st == KILN_OK; i++)
            st = add_kernel_tensor(c, cs, ts[i].n, ts[i].role, ts[i].need, err);
        if (st == KILN_OK && !tensors_ok(c)) st = kiln_fail(err, KILN_ENOMEM, "out of memory");
    }
    kiln_case_free(cs);
    return st;
}

/* An attention case through the family's registry reference and the one case runner: spec on sm
 * with the row's seed and sizes (batch, heads, seq_q, seq_k; splits > 0: split-KV's forced splits; extra,
 * when given: more of the case's sizes, a paged cache's page_size, a window's sides);
 * the emulator's own result must pass the family's error model (`what` names it in the error). */
static kiln_status attn_case_run(kiln_gen *gen, kiln_emu *emu, const char *spec, int sm, uint64_t seed,
                                 const kiln_attn_problem *p, int splits, const kiln_case_opts *extra, const char *what,
                                 kiln_case **out, kiln_error *err) {
    kiln_case_opts o = {.sm = sm, .seed = seed};
    for (int i = 0; extra && i < extra->nsizes; i++) kiln_case_opts_set(&o, extra->sizes[i].name, extra->sizes[i].value);
    kiln_case_opts_set(&o, "batch", p->batch);
    kiln_case_opts_set(&o, "heads_q", p->heads_q);
    kiln_case_opts_set(&o, "heads_kv", p->heads_kv);
    kiln_case_opts_set(&o, "rows", p->seq_q);
    kiln_case_opts_set(&o, "seq_k", p->seq_k);
    if (splits) kiln_case_opts_set(&o, "splits", splits);
    kiln_status st = kiln_case_create(out, gen, emu, spec, &o, err);
    if (st == KILN_OK) st = kiln_case_run(*out, err);
    if (st == KILN_OK && kiln_case_check(*out))
        for (int i = 0; i < kiln_case_noutputs(*out); i++) {
            const kiln_case_output *r = kiln_case_output_at(*out, i);
            if (r->bad)
                st = kiln_fail(err, KILN_EEMU, "the emulator's own %s fails the %s error model (%ld bad; %s)", r->name, what,
                               r->bad, r->first);
        }
    return st;
}

/* Adds tensor `name` of case cs to c: its bytes as the case holds them (inputs as drawn, outputs as
 * the emulator left them) and, for an output, the family's float64 reference. */
static kiln_status add_case_tensor(kit_case *c, kiln_case *cs, const char *name, kiln_dtype t, kit_role role,
                                   kiln_error *err) {
    void *ptr;
    size_t bytes;
    const double *ref = role == KIT_OUT ? kiln_case_reference(cs, name) : NULL;
    if (kiln_case_tensor(cs, name, &ptr, &bytes) != 0 || !ptr || (role == KIT_OUT && !ref))
        return kiln_fail(err, KILN_EINVAL, "the %s case has no %s '%s'", kiln_case_family(cs)->family,
                         role == KIT_OUT ? "output with a reference" : "tensor", name);
    add_tensor(c, name, t, role, bytes / kiln_dtype_size(t), ptr, ref);
    return KILN_OK;
}

/* The tensor `name` of the case in the dtype the case's kernels declare for it (their pointer parameter of
 * that name, in any kernel of the sequence); need 0: skipped when the case has no such tensor (an optional
 * one the spec leaves out) or no kernel takes it. */
static kiln_status add_kernel_tensor(kit_case *c, kiln_case *cs, const char *name, kit_role role, int need,
                                     kiln_error *err) {
    void *ptr = NULL;
    size_t bytes;
    if (!need && (kiln_case_tensor(cs, name, &ptr, &bytes) != 0 || !ptr)) return KILN_OK;
    for (int i = 0; i < kiln_case_nsteps(cs); i++) {
        const kiln_kernel_meta *m = kiln_emu_kernel_meta(kiln_case_step_at(cs, i)->kernel);
        for (int p = 0; p < m->nparams; p++)
            if (m->params[p].kind == KILN_PARAM_PTR && !strcmp(m->params[p].name, name))
                return add_case_tensor(c, cs, name, m->params[p].dtype, role, err);
    }
    return need ? kiln_fail(err, KILN_EINVAL, "no kernel of the %s case takes a tensor '%s'", kiln_case_family(cs)->family, name)
                : KILN_OK;
}

/* The tensors of a forward attention case: q, k, v as drawn; o and lse as the emulator computed
 * them, with the float64 forward as their reference. */
static kiln_status attn_case_tensors(kit_case *c, kiln_case *cs, const kiln_attn_problem *p, kiln_error *err) {
    const struct { const char *n; kiln_dtype t; kit_role role; } ts[] = {
        {"q", p->dtype, KIT_IN}, {"k", p->dtype, KIT_IN}, {"v", p->dtype, KIT_IN}, {"o", p->out, KIT_OUT},
        {"lse", KILN_F32, KIT_OUT}};
    kiln_status st = KILN_OK;
    for (size_t i = 0; i < sizeof ts / sizeof ts[0] && st == KILN_OK; i++) st = add_case_tensor(c, cs, ts[i].n, ts[i].t, ts[i].role, err);
    if (st == KILN_OK && !tensors_ok(c)) st = kiln_fail(err, KILN_ENOMEM, "out of memory");
    return st;
}

/* The scalars both forward attention cases bind: shape, head_dim, causal, scale; with splits > 0 also
 * splits and deterministic (the split case runs twice and must give the same bits). */
static void attn_case_scalars(kit_case *c, const kiln_attn_problem *p, int splits) {
    const struct { const char *n; int v; } ints[] = {{"batch", p->batch}, {"heads_q", p->heads_q},
        {"heads_kv", p->heads_kv}, {"seq_q", p->seq_q}, {"seq_k", p->seq_k}, {"head_dim", p->head_dim},
        {"causal", p->causal}};
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) add_scalar(c, ints[i].n, KILN_PARAM_I32, ints[i].v);
    if (splits) {
        add_scalar(c, "splits", KILN_PARAM_I32, splits);
        add_scalar(c, "deterministic", KILN_PARAM_I32, 1); /* run twice, same bits */
    }
    add_scalar(c, "scale", KILN_PARAM_F32, (double)(float)kiln_attn_scale(p));
}

/* The strides of q, k, v and o (batch, sequence, head) as the scalars their launch descriptions name (stride_qb ...). */
static void attn_stride_scalars(kit_case *c, const kiln_attn_problem *p) {
    const char *sn[4] = {"q", "k", "v", "o"};
    const long long *strides[4] = {p->stride_q, p->stride_k, p->stride_v, p->stride_o};
    for (int t = 0; t < 4; t++)
        for (int s = 0; s < 3; s++) {
            char name[16];
            snprintf(name, sizeof name, "stride_%s%c", sn[t], "bsh"[s]);
            add_scalar(c, name, KILN_PARAM_I64, (double)strides[t][s]);
        }
}

/* The case's canonical spec into p (dtype, out, head_dim, causal) and c. */
static kiln_status attn_case_spec(kit_case *c, kiln_case *cs, kiln_attn_problem *p, kiln_error *err) {
    const char *canon = kiln_emu_kernel_meta(kiln_case_kernel(cs))->spec;
    snprintf(c->spec, sizeof c->spec, "%s", canon);
    return kiln_attn_spec_parse(canon, p, err);
}

/* A row's problem sizes; quick: a quarter of each length (rounded up) where `lengths` says so (1: seq_k,
 * 2: seq_q and seq_k). */
static kiln_attn_problem row_problem(int batch, int heads_q, int heads_kv, int seq_q, int seq_k, int quick, int lengths) {
    kiln_attn_problem p = {0};
    p.batch = batch, p.heads_q = heads_q, p.heads_kv = heads_kv;
    p.seq_q = quick && lengths == 2 ? (seq_q + 3) / 4 : seq_q;
    p.seq_k = quick ? (seq_k + 3) / 4 : seq_k;
    return p;
}

/* A forward attention case; wgmma: a kit_attn_wgmma_rows row (path=wgmma, emulated for sm_90a). */
static kiln_status build_attn(kiln_gen *gen, kiln_emu *emu, const kit_attn_row *r, int sm, int quick, int wgmma,
                              kit_case *c, kiln_error *err) {
    char spec[KILN_SPEC_MAX];
    if (wgmma) attn_wgmma_spec(r, spec, sizeof spec);
    else attn_spec(r->dtype, r->out, r->head_dim, r->causal, spec, sizeof spec);
    kiln_attn_problem p = row_problem(r->batch, r->heads_q, r->heads_kv, r->seq_q, r->seq_k, quick, 2);
    kiln_case *cs = NULL;
    kiln_status st = attn_case_run(gen, emu, spec, sm, (uint64_t)(r->head_dim * 131 + r->seq_q * 7 + sm), &p, 0, NULL,
                                   "attention", &cs, err);
    if (st == KILN_OK) st = attn_case_spec(c, cs, &p, err);
    if (st == KILN_OK) {
        kiln_attn_default_strides(&p);
        snprintf(c->name, sizeof c->name, "attn-%s%s%s%s-d%d%s-b%dh%d:%d-q%dk%d", wgmma ? "wgmma-" : "", r->dtype, strcmp(r->dtype, r->out) ? ">" : "",
                 strcmp(r->dtype, r->out) ? r->out : "", r->head_dim, r->causal ? "-causal" : "", p.batch, p.heads_q,
                 p.heads_kv, p.seq_q, p.seq_k);
        spec_family(c->spec, c);
        c->emu_sm = sm;
        c->problem[0] = (uint64_t)p.seq_q, c->problem[1] = (uint64_t)p.heads_q, c->problem[2] = (uint64_t)p.batch;
        attn_case_scalars(c, &p, 0);
        attn_stride_scalars(c, &p);
        st = attn_case_tensors(c, cs, &p, err);
    }
    kiln_case_free(cs);
    return st;
}

/* A split-KV case: the split kernel, then the combine kernel its launch description runs after it, on
 * the emulator with `splits` forced (as the case's kiln_launch runs them); o and lse against the
 * float64 forward. */
static kiln_status build_attn_split(kiln_gen *gen, kiln_emu *emu, const kit_attn_split_row *r, int sm, int quick,
                                    kit_case *c, kiln_error *err) {
    char spec[KILN_SPEC_MAX];
    attn_split_spec(r->dtype, r->out, r->head_dim, r->causal, spec, sizeof spec);
    kiln_attn_problem p = row_problem(r->batch, r->heads_q, r->heads_kv, r->seq_q, r->seq_k, quick, 1);
    kiln_case *cs = NULL;
    kiln_status st = attn_case_run(gen, emu, spec, sm, (uint64_t)(r->head_dim * 137 + r->seq_k * 3 + sm), &p, r->splits,
                                   NULL, "split-KV attention", &cs, err);
    if (st == KILN_OK && kiln_case_nsteps(cs) != 2)
        st = kiln_fail(err, KILN_EINVAL, "'%s' runs %d kernels; the kit's split case wants it and a combine kernel after it",
                       spec, kiln_case_nsteps(cs));
    if (st == KILN_OK) st = attn_case_spec(c, cs, &p, err);
    if (st == KILN_OK) {
        kiln_attn_default_strides(&p);
        snprintf(c->name, sizeof c->name, "attn-splitkv-%s%s%s-d%d%s-b%dh%d:%d-q%dk%d-s%d", r->dtype,
                 strcmp(r->dtype, r->out) ? ">" : "", strcmp(r->dtype, r->out) ? r->out : "", r->head_dim,
                 r->causal ? "-causal" : "", p.batch, p.heads_q, p.heads_kv, p.seq_q, p.seq_k, r->splits);
        snprintf(c->family, sizeof c->family, "%s", KIT_ATTN_SPLIT_FAMILY);
        c->emu_sm = sm;
        c->problem[0] = (uint64_t)r->splits, c->problem[1] = (uint64_t)p.heads_kv, c->problem[2] = (uint64_t)p.batch;
        attn_case_scalars(c, &p, r->splits);
        st = attn_case_tensors(c, cs, &p, err);
    }
    kiln_case_free(cs);
    return st;
}

/* An attention backward case through the family's reference and the case runner: q, k, v, dO drawn
 * from the row's seed, the forward's O and lse as the backward receives them (float64 forward rounded
 * to out / f32); the emulator runs the sequence the dkdv kernel's launch description names (prep,
 * dkdv, convert or dq) and must pass the family's error model; dq/dk/dv against the float64 gradients.
 * r: a kit_attn_bwd_rows row, or a kit_attn_bwd_wgmma_rows row as w (path=wgmma, emulated for sm_90a; its
 * window's sides given to the case and bound as the launch's scalars). */
static kiln_status build_attn_bwd(kiln_gen *gen, kiln_emu *emu, const kit_attn_bwd_row *r,
                                  const kit_attn_bwd_wgmma_row *w, int sm, int quick, kit_case *c, kiln_error *err) {
    char spec[KILN_SPEC_MAX];
    kit_attn_bwd_wgmma_row row = {0};
    if (w) row = *w, attn_bwd_wgmma_spec(w, spec, sizeof spec);
    else {
        row = (kit_attn_bwd_wgmma_row){r->dtype, r->head_dim, r->causal, r->deterministic, 0, 0, 0, r->batch, r->heads_q,
                                       r->heads_kv, r->seq_q, r->seq_k, r->quick};
        attn_bwd_spec(r->dtype, r->head_dim, r->causal, r->deterministic, spec, sizeof spec);
    }
    kiln_attn_problem p = row_problem(row.batch, row.heads_q, row.heads_kv, row.seq_q, row.seq_k, quick, 2);
    if (kiln_dtype_parse(row.dtype, &p.dtype) != KILN_OK)
        return kiln_fail(err, KILN_EINVAL, "backward row: unknown dtype '%s'", row.dtype);
    p.out = p.dtype, p.head_dim = row.head_dim, p.causal = row.causal;
    kiln_case_opts extra = {0};
    if (row.window) {
        kiln_case_opts_set(&extra, "window_left", row.window_left);
        kiln_case_opts_set(&extra, "window_right", row.window_right);
    }
    kiln_case *cs = NULL;
    kiln_status st = attn_case_run(gen, emu, spec, sm,
                                   (uint64_t)(row.head_dim * 151 + row.seq_q * 11 + row.deterministic * 3 + sm), &p, 0,
                                   &extra, "attention backward", &cs, err);
    if (st == KILN_OK) {
        const char *canon = kiln_emu_kernel_meta(kiln_case_kernel(cs))->spec;
        char window[32] = "";
        if (row.window) snprintf(window, sizeof window, "-window%d,%d", row.window_left, row.window_right);
        snprintf(c->name, sizeof c->name, "%s-%s-d%d%s%s%s-b%dh%d:%d-q%dk%d", w ? "attn-wgmma-bwd" : "attnbwd", row.dtype,
                 row.head_dim, row.causal ? "-causal" : "", row.deterministic ? "-det" : "", window, p.batch, p.heads_q,
                 p.heads_kv, p.seq_q, p.seq_k);
        spec_family(canon, c);
        snprintf(c->spec, sizeof c->spec, "%s", canon); /* dkdv: its launch runs the sequence */
        c->emu_sm = sm;
        c->problem[0] = (uint64_t)p.seq_k, c->problem[1] = (uint64_t)p.heads_kv, c->problem[2] = (uint64_t)p.batch;
        const struct { const char *n; int v; } ints[] = {{"batch", p.batch}, {"heads_q", p.heads_q},
            {"heads_kv", p.heads_kv}, {"seq_q", p.seq_q}, {"seq_k", p.seq_k}, {"head_dim", p.head_dim},
            {"causal", p.causal}, {"deterministic", row.deterministic}};
        for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) add_scalar(c, ints[i].n, KILN_PARAM_I32, ints[i].v);
        add_scalar(c, "scale", KILN_PARAM_F32, (double)(float)kiln_attn_scale(&p));
        if (row.window) {
            add_scalar(c, "window_left", KILN_PARAM_I32, row.window_left);
            add_scalar(c, "window_right", KILN_PARAM_I32, row.window_right);
        }
        const struct { const char *n; kiln_dtype t; kit_role role; } ts[] = {
            {"q", p.dtype, KIT_IN}, {"k", p.dtype, KIT_IN}, {"v", p.dtype, KIT_IN}, {"o", p.out, KIT_IN},
            {"dout", p.out, KIT_IN}, {"lse", KILN_F32, KIT_IN}, {"dq", p.dtype, KIT_OUT}, {"dk", p.dtype, KIT_OUT},
            {"dv", p.dtype, KIT_OUT}};
        for (size_t i = 0; i < sizeof ts / sizeof ts[0] && st == KILN_OK; i++) st = add_case_tensor(c, cs, ts[i].n, ts[i].t, ts[i].role, err);
        if (st == KILN_OK && !tensors_ok(c)) st = kiln_fail(err, KILN_ENOMEM, "out of memory");
    }
    kiln_case_free(cs);
    return st;
}

/* A kit_attn_wgmma_kv_rows case (sm_90a): GQA-packed split-KV decoding (the split kernel and its combine, `splits`
 * forced, run twice on the GPU: the same bits), a paged KV cache (K and V as the case's pages, its block table and
 * per-entry lengths; each entry against its own float64 reference), or both; o and lse as the emulator computed them. */
static kiln_status build_attn_wgmma_kv(kiln_gen *gen, kiln_emu *emu, const kit_attn_wgmma_kv_row *r, int sm, int quick,
                                       kit_case *c, kiln_error *err) {
    char spec[KILN_SPEC_MAX];
    attn_wgmma_kv_spec(r, spec, sizeof spec);
    kiln_attn_problem p = row_problem(r->batch, r->heads_q, r->heads_kv, r->seq_q, r->seq_k, quick, r->splits ? 1 : 2);
    kiln_case_opts extra = {0};
    if (r->page_size) kiln_case_opts_set(&extra, "page_size", r->page_size);
    kiln_case *cs = NULL;
    kiln_status st = attn_case_run(gen, emu, spec, sm, (uint64_t)(r->head_dim * 157 + r->seq_k * 5 + r->page_size + sm), &p,
                                   r->splits, &extra, r->splits ? "split-KV attention" : "paged attention", &cs, err);
    if (st == KILN_OK && kiln_case_nsteps(cs) != (r->splits ? 2 : 1))
        st = kiln_fail(err, KILN_EINVAL, "'%s' runs %d kernels; the kit's row wants %s", spec, kiln_case_nsteps(cs),
                       r->splits ? "it and a combine kernel after it" : "it alone");
    if (st == KILN_OK) st = attn_case_spec(c, cs, &p, err);
    if (st == KILN_OK) {
        kiln_attn_default_strides(&p);
        char kind[24];
        snprintf(kind, sizeof kind, "%s%s", r->splits ? "splitkv-" : "", r->page_size ? "paged-" : "");
        snprintf(c->name, sizeof c->name, "attn-wgmma-%s%s-d%d%s-b%dh%d:%d-q%dk%d", kind, r->dtype, r->head_dim,
                 r->causal ? "-causal" : "", p.batch, p.heads_q, p.heads_kv, p.seq_q, p.seq_k);
        if (r->splits) snprintf(c->name + strlen(c->name), sizeof c->name - strlen(c->name), "-s%d", r->splits);
        if (r->page_size) snprintf(c->name + strlen(c->name), sizeof c->name - strlen(c->name), "-p%d", r->page_size);
        if (r->splits) snprintf(c->family, sizeof c->family, "%s", KIT_ATTN_SPLIT_FAMILY);
        else spec_family(c->spec, c);
        c->emu_sm = sm;
        c->problem[0] = (uint64_t)(r->splits ? r->splits : p.seq_q), c->problem[1] = (uint64_t)(r->splits ? p.heads_kv : p.heads_q);
        c->problem[2] = (uint64_t)p.batch;
        attn_case_scalars(c, &p, r->splits);
        /* strides: q and o as drawn ([batch, seq, heads, d]); k and v the cache's pages [num_blocks, page_size,
         * heads_kv, d], whose sizes follow from the case's block table and pages */
        size_t hd = (size_t)p.head_dim, row = (size_t)p.heads_kv * hd;
        long long pages = r->page_size ? (long long)(kiln_case_count(cs, "k") / ((size_t)r->page_size * row)) : 0;
        long long max_blocks = r->page_size ? (long long)(kiln_case_count(cs, "block_table") / (size_t)p.batch) : 0;
        if (r->page_size) {
            add_scalar(c, "page_size", KILN_PARAM_I32, r->page_size);
            add_scalar(c, "num_blocks", KILN_PARAM_I32, (double)pages);
            add_scalar(c, "max_blocks", KILN_PARAM_I32, (double)max_blocks);
            const long long kv[3] = {(long long)((size_t)r->page_size * row), (long long)row, (long long)hd};
            memcpy(p.stride_k, kv, sizeof kv), memcpy(p.stride_v, kv, sizeof kv);
        }
        attn_stride_scalars(c, &p);
        st = attn_case_tensors(c, cs, &p, err);
        /* the cache's index tensors (i32), each when the kernel takes it */
        static const char *const index[] = {"block_table", "cache_seqlens", "cache_batch_idx", "cache_leftpad"};
        for (size_t i = 0; i < sizeof index / sizeof *index && st == KILN_OK && r->page_size; i++)
            st = add_kernel_tensor(c, cs, index[i], KIT_IN, i < 2, err);
        if (st == KILN_OK && !tensors_ok(c)) st = kiln_fail(err, KILN_ENOMEM, "out of memory");
    }
    kiln_case_free(cs);
    return st;
}

#ifdef KIT_HAVE_NORM
/* The value of key in spec as the generator resolves it; def when the family has no such key. */
static const char *spec_value(kiln_gen *gen, const char *spec, const char *key, const char *def, char *buf, size_t size) {
    kiln_error e = {0};
    return kiln_spec_value(gen, spec, key, buf, size, &e) == KILN_OK ? buf : def;
}

/* A norm-family case (RMSNorm, residual forms, backwards). sms > 0: the emulator runs the backward
 * on as many blocks as kiln_launch gives it on a device with that many multiprocessors, so
 * that dweight/dbias are summed in the same order. */
static kiln_status build_norm(kiln_gen *gen, kiln_emu *emu, const kit_norm_row *r, int sm, int sms, int quick,
                              kit_case *c, kiln_error *err) {
    /* the row count from hidden, which a launch-time row names and a fixed one takes from its spec */
    char canon[KILN_SPEC_MAX], hbuf[32], xbuf[16], wbuf[16], rbuf[16], obuf[16], dybuf[16];
    kiln_status st = kiln_canonical_spec(gen, r->spec, canon, sizeof canon, err);
    if (st != KILN_OK) return st;
    const char *hv = spec_value(gen, canon, "hidden", "launch", hbuf, sizeof hbuf);
    const int fixed = strcmp(hv, "launch") != 0, hidden = fixed ? atoi(hv) : r->run_hidden;
    const int bwd = spec_value(gen, canon, "dy", NULL, dybuf, sizeof dybuf) != NULL; /* a backward takes dy */
    const int residual = !strcmp(spec_value(gen, canon, "residual", "false", rbuf, sizeof rbuf), "true");
    const int offset = atoi(spec_value(gen, canon, "offset", "0", obuf, sizeof obuf));
    int rows = (quick ? (1 << 14) : (1 << 18)) / hidden + 3;
    /* through the family's reference and the case runner: the sequence its launch description names (a
     * split form's row statistics before it, the partials' reduction after a backward), a backward's grid walking the
     * rows with the blocks `sms` SMs hold (0: one per row group) */
    kiln_case_opts o = {.sm = sm, .seed = (uint64_t)hidden * 13 + (uint64_t)sm, .input = KILN_LN_RANDOM,
                        .sm_count = bwd ? sms : 0};
    kiln_case_opts_set(&o, "rows", rows);
    kiln_case_opts_set(&o, "hidden", hidden);
    kiln_case *cs = NULL;
    st = kiln_case_create(&cs, gen, emu, r->spec, &o, err);
    if (st == KILN_OK) st = kiln_case_run(cs, err);
    long bad = st == KILN_OK ? kiln_case_check(cs) : 0;
    if (bad) st = kiln_fail(err, KILN_EEMU, "the emulator's own result fails the norm error model (%ld bad)", bad);
    if (st == KILN_OK) {
        spec_family(canon, c);
        const char *fam = c->family;
        snprintf(c->name, sizeof c->name, "%s-%.4s.%.4s-h%s%d%s%s", fam, spec_value(gen, canon, "x", "", xbuf, sizeof xbuf),
                 spec_value(gen, canon, "w", "", wbuf, sizeof wbuf), fixed ? "" : "launch", hidden, residual ? "-residual" : "",
                 offset ? "-offset1" : "");
        snprintf(c->spec, sizeof c->spec, "%s", canon);
        c->emu_sm = sm;
        c->problem[0] = (uint64_t)rows, c->problem[1] = c->problem[2] = 1;
        add_scalar(c, "rows", KILN_PARAM_I32, rows);
        add_scalar(c, "hidden", KILN_PARAM_I32, hidden);
        add_scalar(c, "eps", KILN_PARAM_F32, (double)1e-5f); /* the reference's default eps */
        /* in the case file's order, each in the dtype its kernel declares; `need` 0: only when the case has the
         * tensor and a kernel of the sequence takes it (an optional one; LayerNorm's mean) */
        const struct { const char *n; kit_role role; int need; } fwd_t[] = {
            {"x", KIT_IN, 1}, {"residual", KIT_IN, 0}, {"weight", KIT_IN, 0}, {"bias", KIT_IN, 0}, {"y", KIT_OUT, 1},
            {"h", KIT_OUT, 0}, {"mean", KIT_OUT, 0}, {"rstd", KIT_OUT, 0}},
          bwd_t[] = {
            {"x", KIT_IN, 1}, {"dy", KIT_IN, 1}, {"mean", KIT_IN, 0}, {"rstd", KIT_IN, 1}, {"weight", KIT_IN, 0},
            {"dres", KIT_IN, 0}, {"dx", KIT_OUT, 1}, {"dweight", KIT_OUT, 0}, {"dbias", KIT_OUT, 0}};
        const size_t nt = bwd ? sizeof bwd_t / sizeof bwd_t[0] : sizeof fwd_t / sizeof fwd_t[0];
        for (size_t i = 0; i < nt && st == KILN_OK; i++)
            st = add_kernel_tensor(c, cs, bwd ? bwd_t[i].n : fwd_t[i].n, bwd ? bwd_t[i].role : fwd_t[i].role,
                                   bwd ? bwd_t[i].need : fwd_t[i].need, err);
        if (st == KILN_OK && !tensors_ok(c)) st = kiln_fail(err, KILN_ENOMEM, "out of memory");
    }
    kiln_case_free(cs);
    return st;
}
#endif

/* ---- prepare: every row x SM, in parallel ---- */

typedef struct job {
    int family; /* 0 layernorm, 1 attention, 2 the other norm families, 3 attention backward, 4 split-KV, and on sm_90a:
                 * 5 the wgmma forward, 6 its split-KV and paged forms, 7 the wgmma backward */
    int row, sm, index;
} job;

typedef struct prep {
    job jobs[512];
    int njobs, small, sms; /* small: the rows' lengths a quarter (the quick run's, compute-sanitizer's) */
    const char *dir;
    atomic_int next, failed;
    pthread_mutex_t print;
} prep;

static void *prep_worker(void *arg) {
    prep *p = arg;
    kiln_gen *gen = NULL;
    kiln_emu *emu = NULL;
    kiln_error err = {0};
    if (kiln_gen_create(&gen, NULL, &err) != KILN_OK || kiln_emu_create(&emu, &err) != KILN_OK) {
        fprintf(stderr, "kiln-kit: %s\n", err.msg);
        atomic_fetch_add(&p->failed, 1);
        kiln_gen_destroy(gen);
        return NULL;
    }
    for (int i; (i = atomic_fetch_add(&p->next, 1)) < p->njobs;) {
        const job *j = &p->jobs[i];
        kit_case c;
        memset(&c, 0, sizeof c);
        double t0 = now_ms();
        kiln_status st = KILN_OK;
        if (j->family == 0) st = build_ln(gen, emu, &kit_ln_rows[j->row], j->sm, p->small, &c, &err);
        else if (j->family == 1) st = build_attn(gen, emu, &kit_attn_rows[j->row], j->sm, p->small, 0, &c, &err);
        else if (j->family == 5) st = build_attn(gen, emu, &kit_attn_wgmma_rows[j->row], j->sm, p->small, 1, &c, &err);
        else if (j->family == 6) st = build_attn_wgmma_kv(gen, emu, &kit_attn_wgmma_kv_rows[j->row], j->sm, p->small, &c, &err);
        else if (j->family == 7)
            st = build_attn_bwd(gen, emu, NULL, &kit_attn_bwd_wgmma_rows[j->row], j->sm, p->small, &c, &err);
        else if (j->family == 3) st = build_attn_bwd(gen, emu, &kit_attn_bwd_rows[j->row], NULL, j->sm, p->small, &c, &err);
        else if (j->family == 4) st = build_attn_split(gen, emu, &kit_attn_split_rows[j->row], j->sm, p->small, &c, &err);
#ifdef KIT_HAVE_NORM
        else st = build_norm(gen, emu, &kit_norm_rows[j->row], j->sm, p->sms, p->small, &c, &err);
#endif
        char path[4096], msg[sizeof err.msg + 64] = "";
        if (st == KILN_OK) {
            snprintf(path, sizeof path, "%s/%03d-%s-sm%d.kcase", p->dir, j->index, c.name, j->sm);
            if (kit_case_write(&c, path, msg, sizeof msg)) st = KILN_EIO;
        } else {
            snprintf(msg, sizeof msg, "%s", err.msg);
        }
        char smn[16];
        kiln_sm_name(j->sm, smn);
        pthread_mutex_lock(&p->print);
        if (st != KILN_OK) {
            static const char *const tables[] = {"kit_ln_rows",         "kit_attn_rows",       "kit_norm_rows",
                                                 "kit_attn_bwd_rows",   "kit_attn_split_rows", "kit_attn_wgmma_rows",
                                                 "kit_attn_wgmma_kv_rows", "kit_attn_bwd_wgmma_rows"};
            fprintf(stderr, "kiln-kit: case %d (%s[%d], %s): %s\n", j->index, tables[j->family], j->row, smn, msg);
            atomic_fetch_add(&p->failed, 1);
        } else {
            printf("  %-44s %-6s emulated + reference in %6.0f ms\n", c.name, smn, now_ms() - t0);
        }
        fflush(stdout);
        pthread_mutex_unlock(&p->print);
        kit_case_free(&c);
    }
    kiln_emu_destroy(emu);
    kiln_gen_destroy(gen);
    return NULL;
}

/* quick: the rows marked quick, small (the fake-driver run); small: every row, lengths a quarter; arch_only: only
 * the sm_90a rows (nothing but a line saying so on another device) */
static int cmd_prepare(const char *dir, int device_sm, int sms, int threads, int quick, int small, int arch_only) {
    static prep p;
    memset(&p, 0, sizeof p);
    pthread_mutex_init(&p.print, NULL);
    p.dir = dir, p.small = quick || small, p.sms = sms;
    mkdir(dir, 0755);
    int targets[2] = {device_sm, 75}, ntargets = arch_only ? 0 : device_sm == 75 ? 1 : 2;
#define JOBS(table, fam, sm)                                                                                           \
    for (int i = 0; i < (int)(sizeof table / sizeof table[0]); i++)                                                    \
        if (!quick || table[i].quick) p.jobs[p.njobs] = (job){fam, i, sm, p.njobs}, p.njobs++
    for (int s = 0; s < ntargets; s++) {
        /* the slowest to emulate first, so that the threads finish together */
        JOBS(kit_attn_bwd_rows, 3, targets[s]);
        JOBS(kit_attn_rows, 1, targets[s]);
        JOBS(kit_attn_split_rows, 4, targets[s]);
        JOBS(kit_ln_rows, 0, targets[s]);
#ifdef KIT_HAVE_NORM
        JOBS(kit_norm_rows, 2, targets[s]);
#endif
    }
    /* the sm_90a rows: only for a 9.0 device (sm_90a code runs on exactly that SM) */
    if (device_sm == 90) {
        JOBS(kit_attn_bwd_wgmma_rows, 7, KIT_SM_90A);
        JOBS(kit_attn_wgmma_rows, 5, KIT_SM_90A);
        JOBS(kit_attn_wgmma_kv_rows, 6, KIT_SM_90A);
    } else {
        printf("sm_90a wgmma attention rows skipped: they run on a 9.0 device only (this one is sm_%d)\n", device_sm);
    }
#undef JOBS
    double t0 = now_ms();
    printf("preparing %d cases (inputs, emulator run, float64 reference) on %d threads\n", p.njobs, threads);
    pthread_t tid[64];
    int n = threads < 1 ? 1 : threads > 64 ? 64 : threads;
    for (int i = 0; i < n; i++) pthread_create(&tid[i], NULL, prep_worker, &p);
    for (int i = 0; i < n; i++) pthread_join(tid[i], NULL);
    printf("prepared %d cases in %.1f s, %d failed\n", p.njobs - p.failed, (now_ms() - t0) / 1e3, (int)p.failed);
    return p.failed ? 1 : 0;
}

/* ---- the JIT path: spec -> PTX -> cuModuleLoadData -> launch, in this process ---- */

static void on_warning(void *user, const char *msg) {
    (void)user;
    fprintf(stderr, "kiln-kit: runtime warning: %s\n", msg);
}

static int cmd_jit(const char *dir, const char *csv_path, const char *timing_csv) {
    char **paths;
    int n = kit_case_list(dir, &paths);
    if (n <= 0) return fprintf(stderr, "kiln-kit: no cases in %s (run 'prepare' first)\n", dir), 2;
    char cache[] = "/tmp/kiln-kit-cache-XXXXXX";
    if (!mkdtemp(cache)) return fprintf(stderr, "kiln-kit: cannot create a cache directory\n"), 2;
    kiln_rt_use_generator();
    kiln_rt *rt = NULL, *rt2 = NULL;
    kiln_error err = {0};
    kiln_rt_options opt = {.cache_dir = cache, .on_warning = on_warning};
    if (kiln_rt_create(&rt, &opt, &err) != KILN_OK || kiln_rt_create(&rt2, &opt, &err) != KILN_OK) {
        fprintf(stderr, "kiln-kit: %s\n", err.msg);
        kiln_rt_destroy(rt);
        return 2;
    }
    const kiln_device_info *dev = kiln_rt_device(rt);
    int tsm = 75; /* the highest SM kiln generates for that the device runs */
    for (int i = 0, sms[16], n = kiln_targets(sms, 16); i < n; i++)
        if (sms[i] <= dev->sm) tsm = sms[i];
    FILE *csv = csv_path ? fopen(csv_path, "w") : NULL, *tcsv = timing_csv ? fopen(timing_csv, "w") : NULL;
    if (csv) fputs(kit_check_csv_header, csv);
    if (tcsv) fputs("spec,generate_ms,cold_get_ms,disk_hit_ms,warm_get_us\n", tcsv);
    kiln_gen *gen = NULL;
    if (kiln_gen_create(&gen, NULL, &err) != KILN_OK) return fprintf(stderr, "kiln-kit: %s\n", err.msg), 2;
    /* the first generation in a process also starts Lua and LLVM's target: timed on its own (a small norm
     * row's kernel) */
    double ts = now_ms();
    kiln_module *first = NULL;
    if (kiln_generate(gen, kit_norm_rows[0].spec, tsm, KILN_EMIT_PTX, &first, &err) != KILN_OK)
        return fprintf(stderr, "kiln-kit: %s\n", err.msg), 2;
    kiln_module_free(first);
    printf("JIT path on %s (sm_%d): generate in this process, cuModuleLoadData, kiln_launch\n"
           "  first generation in the process (Lua + LLVM start): %.1f ms; below, gen = generation alone, cold =\n"
           "  kiln_rt_get_kernel from empty caches (generate + driver JIT + disk write), disk = a second runtime's\n"
           "  get from the disk cache (read + driver JIT), warm = memory-cache hit\n",
           dev->name, tsm, now_ms() - ts);
    printf("  %-52s %9s %9s %9s %9s\n", "spec", "gen ms", "cold ms", "disk ms", "warm us");
    long failed = 0, checked = 0;
    static char timed_specs[256][KILN_SPEC_MAX];
    int ntimed = 0;
    double sum_cold = 0;
    int ncold = 0;
    for (int i = 0; i < n; i++) {
        kit_case c;
        char msg[512];
        if (kit_case_read(&c, paths[i], msg, sizeof msg)) {
            fprintf(stderr, "kiln-kit: %s\n", msg);
            failed++;
            continue;
        }
        /* the device's plain SM, or sm_90a's wgmma rows on a 9.0 device (the runtime generates sm_90a for them) */
        if (c.emu_sm != tsm && !(c.emu_sm == KIT_SM_90A && dev->sm == 90)) {
            kit_case_free(&c);
            continue;
        }
        /* a spec seen in an earlier case is already loaded: checked again, timed once */
        kiln_kernel *seen = NULL;
        kiln_error e2;
        int timed = 0;
        for (int j = 0; j < ntimed; j++) timed |= !strcmp(timed_specs[j], c.spec);
        if (timed) {
            long bad = kiln_rt_get_kernel(rt, c.spec, &seen, &e2) == KILN_OK ? kit_run_and_compare(rt, &c, "jit", 0, csv, 1) : -1;
            failed += bad != 0;
            checked++;
            kit_case_free(&c);
            continue;
        }
        if (ntimed < (int)(sizeof timed_specs / sizeof timed_specs[0]))
            snprintf(timed_specs[ntimed++], sizeof timed_specs[0], "%s", c.spec);
        kiln_module *mod = NULL;
        double t0 = now_ms();
        kiln_status st = kiln_generate(gen, c.spec, c.emu_sm, KILN_EMIT_PTX, &mod, &err);
        double tgen = now_ms() - t0;
        kiln_module_free(mod);
        kiln_kernel *k;
        double t1 = now_ms();
        if (st == KILN_OK) st = kiln_rt_get_kernel(rt, c.spec, &k, &err);
        double tcold = now_ms() - t1, t2 = now_ms();
        if (st == KILN_OK) st = kiln_rt_get_kernel(rt2, c.spec, &k, &err);
        double tdisk = now_ms() - t2, t3 = now_ms();
        for (int r = 0; st == KILN_OK && r < 1000; r++) st = kiln_rt_get_kernel(rt, c.spec, &k, &err);
        double twarm = (now_ms() - t3) / 1000 * 1e3;
        if (st != KILN_OK) {
            printf("  %-40s jit            ERROR %s\n", c.name, err.msg);
            failed++;
        } else {
            printf("  %-52.52s %9.1f %9.1f %9.2f %9.2f\n", c.spec, tgen, tcold, tdisk, twarm);
            if (tcsv) fprintf(tcsv, "%s,%.3f,%.3f,%.3f,%.3f\n", c.spec, tgen, tcold, tdisk, twarm);
            sum_cold += tcold, ncold++;
            long bad = kit_run_and_compare(rt, &c, "jit", 0, csv, 1);
            failed += bad != 0;
            checked++;
        }
        kit_case_free(&c);
    }
    printf("JIT path: %ld cases checked, %ld failed; cold get (generate + driver load) mean %.1f ms\n", checked, failed,
           ncold ? sum_cold / ncold : 0);
    for (int i = 0; i < n; i++) free(paths[i]);
    free(paths);
    if (csv) fclose(csv);
    if (tcsv) fclose(tcsv);
    kiln_gen_destroy(gen);
    kiln_rt_destroy(rt2);
    kiln_rt_destroy(rt);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", cache);
    if (system(cmd) != 0) fprintf(stderr, "kiln-kit: could not remove %s\n", cache);
    return failed || !checked ? 1 : 0;
}

static void usage(FILE *to) {
    fprintf(to,
            "usage: kiln-kit specs [--arch]              the bundle's spec list, one per line; --arch: the arch\n"
            "                                            bundle's (sm_90a: the wgmma attention rows and sweep)\n"
            "       kiln-kit prepare DIR --sm N [--sms M] [-j T] [--quick] [--small] [--arch-only]\n"
            "                                            write check cases (inputs, emulator outputs for sm_N\n"
            "                                            and sm_75, float64 references) into DIR; --sms M: the\n"
            "                                            device's multiprocessors (backward reductions then\n"
            "                                            sum in the GPU's order); --quick: the quick rows, small;\n"
            "                                            --small: every row, a quarter of its lengths; --arch-only:\n"
            "                                            the sm_90a rows alone (--sm 90; none elsewhere)\n"
            "       kiln-kit jit DIR [--csv F] [--timing-csv F]\n"
            "                                            generate, load and launch every case on the GPU\n"
            "                                            in this process; compare; time cold/disk/warm gets\n");
}

int main(int argc, char **argv) {
    if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) return usage(stdout), 0;
    if (argc < 2) return fprintf(stderr, "kiln-kit: expected a command: specs, prepare, jit; see kiln-kit --help\n"), 2;
    const char *cmd = argv[1];
    if (!strcmp(cmd, "specs")) {
        if (argc == 2) return cmd_specs();
        if (argc == 3 && !strcmp(argv[2], "--arch")) return cmd_specs_arch();
        return fprintf(stderr, "kiln-kit: specs takes no argument or --arch, not '%s'; see kiln-kit --help\n", argv[2]), 2;
    }
    if (argc < 3) return fprintf(stderr, "kiln-kit: '%s' needs a directory; see kiln-kit --help\n", cmd), 2;
    const char *dir = argv[2];
    int sm = 0, sms = 0, threads = (int)sysconf(_SC_NPROCESSORS_ONLN), quick = 0, small = 0, arch_only = 0;
    const char *csv = NULL, *tcsv = NULL;
    for (int i = 3; i < argc; i++) {
        if (!strcmp(argv[i], "--sm") && i + 1 < argc) sm = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--sms") && i + 1 < argc) sms = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-j") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--small")) small = 1;
        else if (!strcmp(argv[i], "--arch-only")) arch_only = 1;
        else if (!strcmp(argv[i], "--csv") && i + 1 < argc) csv = argv[++i];
        else if (!strcmp(argv[i], "--timing-csv") && i + 1 < argc) tcsv = argv[++i];
        else return fprintf(stderr, "kiln-kit: unknown argument '%s'; see kiln-kit --help\n", argv[i]), 2;
    }
    if (!strcmp(cmd, "prepare")) {
        if (sm < 75 || !kiln_target_find(sm))
            return fprintf(stderr, "kiln-kit: prepare needs --sm N; valid: 75, 80, 86, 89, 90\n"), 2;
        return cmd_prepare(dir, sm, sms, threads, quick, small, arch_only);
    }
    if (!strcmp(cmd, "jit")) return cmd_jit(dir, csv, tcsv);
    fprintf(stderr, "kiln-kit: unknown command '%s'; valid: specs, prepare, jit\n", cmd);
    return 2;
}
