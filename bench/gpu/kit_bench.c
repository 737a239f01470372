/* bench/gpu/kit_bench.c - GPU check kit, speed side (libkiln_rt only): ceilings, then each family's speed rows. */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/runtime.h"
#include "kit.h"
#include "kit_rows.h"

static int die(const char *what, const kiln_error *err) {
    fprintf(stderr, "kiln-gpucheck: %s: %s\n", what, err->msg);
    return 2;
}

/* ---- timing: CUDA events and the few driver calls the runtime does not wrap ---- */

typedef struct drv {
    void *dl;
    int (*cuDeviceGet)(int *, int);
    int (*cuDeviceGetAttribute)(int *, int, int);
    int (*cuEventCreate)(void **, unsigned);
    int (*cuEventRecord)(void *, void *);
    int (*cuEventSynchronize)(void *);
    int (*cuEventElapsedTime)(float *, void *, void *);
    int (*cuEventDestroy)(void *);
    int (*cuMemcpyDtoD)(kiln_devptr, kiln_devptr, size_t);
    int (*cuMemsetD8)(kiln_devptr, unsigned char, size_t);
} drv;

static int drv_open(drv *d) {
    const char *path = getenv("KILN_CUDA_DRIVER");
    d->dl = dlopen(path && *path ? path : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!d->dl) return fprintf(stderr, "kiln-gpucheck: cannot open the CUDA driver: %s\n", dlerror()), -1;
    const struct { const char *sym; void **slot; } t[] = {
        {"cuDeviceGet", (void **)&d->cuDeviceGet}, {"cuDeviceGetAttribute", (void **)&d->cuDeviceGetAttribute},
        {"cuEventCreate", (void **)&d->cuEventCreate}, {"cuEventRecord", (void **)&d->cuEventRecord},
        {"cuEventSynchronize", (void **)&d->cuEventSynchronize},
        {"cuEventElapsedTime", (void **)&d->cuEventElapsedTime}, {"cuEventDestroy_v2", (void **)&d->cuEventDestroy},
        {"cuMemcpyDtoD_v2", (void **)&d->cuMemcpyDtoD}, {"cuMemsetD8_v2", (void **)&d->cuMemsetD8},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (!(*t[i].slot = dlsym(d->dl, t[i].sym)))
            return fprintf(stderr, "kiln-gpucheck: the CUDA driver lacks %s\n", t[i].sym), -1;
    return 0;
}

#define CK(call)                                                                                   \
    do {                                                                                           \
        int r_ = (call);                                                                           \
        if (r_) {                                                                                  \
            fprintf(stderr, "kiln-gpucheck: %s failed: CUDA error %d\n", #call, r_);               \
            exit(2);                                                                               \
        }                                                                                          \
    } while (0)

typedef struct timer {
    drv *d;
    void *ev[2];
    kiln_devptr flush; /* 0: no L2 flush */
    size_t flush_bytes;
} timer;

typedef int (*launch_fn)(void *ctx);

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median of reps launches in ms, each between two events (after an L2 flush when set), after
 * warm-up launches; fewer reps when one launch is long (never fewer than 5). */
static double time_median(timer *t, launch_fn f, void *ctx, int reps, int *used) {
    float ms;
    for (int i = 0; i < 3; i++)
        if (f(ctx)) return -1;
    CK(t->d->cuEventRecord(t->ev[0], NULL));
    if (f(ctx)) return -1;
    CK(t->d->cuEventRecord(t->ev[1], NULL));
    CK(t->d->cuEventSynchronize(t->ev[1]));
    CK(t->d->cuEventElapsedTime(&ms, t->ev[0], t->ev[1]));
    if (ms > 150 && reps > 5) reps = ms > 600 ? 5 : 10;
    double v[64];
    if (reps > 64) reps = 64;
    for (int i = 0; i < reps; i++) {
        if (t->flush) CK(t->d->cuMemsetD8(t->flush, (unsigned char)i, t->flush_bytes));
        CK(t->d->cuEventRecord(t->ev[0], NULL));
        if (f(ctx)) return -1;
        CK(t->d->cuEventRecord(t->ev[1], NULL));
        CK(t->d->cuEventSynchronize(t->ev[1]));
        CK(t->d->cuEventElapsedTime(&ms, t->ev[0], t->ev[1]));
        v[i] = ms;
    }
    qsort(v, (size_t)reps, sizeof v[0], cmp_double);
    *used = reps;
    return reps % 2 ? v[reps / 2] : (v[reps / 2 - 1] + v[reps / 2]) / 2;
}

typedef struct copy_ctx {
    drv *d;
    kiln_devptr dst, src;
    size_t n;
} copy_ctx;
static int copy_launch(void *p) {
    copy_ctx *c = p;
    return c->d->cuMemcpyDtoD(c->dst, c->src, c->n);
}

/* One launch through a typed runtime helper: what the timer repeats. */
typedef enum helper { H_LAYERNORM, H_NORM_FWD, H_NORM_BWD, H_ATTENTION, H_SPLITKV, H_ATTENTION_BWD, H_VARLEN, H_SPEC } helper;
typedef struct helper_ctx {
    kiln_rt *rt;
    helper h;
    kiln_norm_fwd_args ln;
#ifdef KIT_HAVE_NORM
    kiln_norm_fwd_args f;
    kiln_norm_bwd_args b;
#endif
    kiln_attention_args a;
    kiln_devptr ws; /* H_SPLITKV: the partials (splits 0: the helper's own choice) */
    size_t ws_bytes;
    kiln_attention_bwd_args ab;
    kiln_attention_varlen vl; /* H_VARLEN: a's tensors as packed sequences */
    const char *spec;         /* H_SPEC: a kernel launched by spec through its launch description (la) */
    kiln_launch_args la;
} helper_ctx;

static int helper_launch(void *p) {
    helper_ctx *c = p;
    kiln_error err;
    kiln_status st = KILN_EINVAL;
    const char *what = "";
    switch (c->h) {
    case H_LAYERNORM: st = kiln_norm_forward(c->rt, &c->ln, &err), what = "layernorm"; break;
#ifdef KIT_HAVE_NORM
    case H_NORM_FWD: st = kiln_norm_forward(c->rt, &c->f, &err), what = "norm forward"; break;
    case H_NORM_BWD: st = kiln_norm_backward(c->rt, &c->b, &err), what = "norm backward"; break;
#else
    case H_NORM_FWD: case H_NORM_BWD: break;
#endif
    case H_ATTENTION: st = kiln_attention_forward(c->rt, &c->a, &err), what = "attention"; break;
    case H_SPLITKV: st = kiln_attention_forward_splitkv(c->rt, &c->a, 0, c->ws, c->ws_bytes, &err), what = "split-KV attention"; break;
    case H_ATTENTION_BWD: st = kiln_attention_backward(c->rt, &c->ab, &err), what = "attention backward"; break;
    case H_VARLEN: st = kiln_attention_forward_varlen(c->rt, &c->a, &c->vl, &err), what = "varlen attention"; break;
    case H_SPEC: st = kiln_launch_spec(c->rt, c->spec, &c->la, &err), what = c->spec; break;
    }
    if (st == KILN_OK) return 0;
    fprintf(stderr, "kiln-gpucheck: %s: %s\n", what, err.msg);
    return -1;
}

/* The LayerNorm probe: a bundle PTX with ".minnctapersm 2" added after its ".maxntid", loaded as a
 * module and launched with its parameters bound by name. */
typedef struct probe_ctx {
    kiln_kernel *k;
    kiln_norm_fwd_args a;
} probe_ctx;

static int probe_launch(void *p) {
    probe_ctx *c = p;
    const kiln_kernel_meta *m = kiln_kernel_get_meta(c->k);
    kiln_arg args[KILN_MAX_PARAMS];
    for (int i = 0; i < m->nparams; i++) {
        const char *n = m->params[i].name;
        args[i] = (kiln_arg){0};
        if (!strcmp(n, "y")) args[i].ptr = c->a.y;
        else if (!strcmp(n, "mean")) args[i].ptr = c->a.mean;
        else if (!strcmp(n, "rstd")) args[i].ptr = c->a.rstd;
        else if (!strcmp(n, "x")) args[i].ptr = c->a.x;
        else if (!strcmp(n, "weight")) args[i].ptr = c->a.weight;
        else if (!strcmp(n, "bias")) args[i].ptr = c->a.bias;
        else if (!strcmp(n, "rows")) args[i].i32 = c->a.rows;
        else if (!strcmp(n, "hidden")) args[i].i32 = c->a.hidden;
        else if (!strcmp(n, "eps")) args[i].f32 = c->a.eps;
    }
    const uint64_t problem[3] = {(uint64_t)c->a.rows, 1, 1};
    unsigned grid[3];
    kiln_error err;
    if (kiln_kernel_grid(c->k, problem, grid, &err) == KILN_OK &&
        kiln_kernel_launch(c->k, grid, args, m->nparams, NULL, &err) == KILN_OK)
        return 0;
    fprintf(stderr, "kiln-gpucheck: probe: %s\n", err.msg);
    return -1;
}

static int probe_load(kiln_rt *rt, const kiln_bundle *b, const kiln_kernel_meta *want, kiln_kernel **out) {
    kiln_error err;
    for (int i = 0; i < kiln_bundle_count(b); i++) {
        kiln_bundle_entry e;
        if (kiln_bundle_entry_at(b, i, &e, &err) != KILN_OK || e.kind != KILN_PAYLOAD_PTX || e.sm != want->sm ||
            strcmp(e.spec, want->spec))
            continue;
        const char *text = e.payload, *at = strstr(text, "\n.maxntid");
        const char *eol = at ? memchr(at + 1, '\n', e.size - (size_t)(at + 1 - text)) : NULL;
        if (!eol || strstr(text, ".minnctapersm")) return -1;
        static const char add[] = "\n.minnctapersm 2";
        size_t head = (size_t)(eol - text), n = (size_t)e.size + sizeof add - 1;
        char *ptx = malloc(n + 1);
        if (!ptx) return -1;
        memcpy(ptx, text, head);
        memcpy(ptx + head, add, sizeof add - 1);
        memcpy(ptx + head + sizeof add - 1, eol, (size_t)e.size - head);
        ptx[n] = 0;
        kiln_status st = kiln_rt_load_module(rt, ptx, n, KILN_PAYLOAD_PTX, e.meta, out, &err);
        free(ptx);
        if (st != KILN_OK) fprintf(stderr, "kiln-gpucheck: probe: %s\n", err.msg);
        return st == KILN_OK ? 0 : -1;
    }
    return -1;
}

#ifdef KIT_HAVE_NORM
/* A backward form row: the kernel of spec `form=...` from the bundle, launched through kiln_launch as
 * kiln_norm_backward launches the default: the template's grid rule, workspace and reduction kernel. */
typedef struct form_ctx {
    kiln_kernel *k;
    kiln_launch_tensor t[8];
    kiln_launch_scalar rows;
    kiln_launch_args a;
} form_ctx;

/* The backward's tensors by name (a 0 pointer: a tensor the family does not have) and its rows. */
static void form_bind(form_ctx *c, const kiln_norm_bwd_args *b) {
    const struct { const char *name; kiln_devptr ptr; } t[8] = {
        {"dx", b->dx}, {"dy", b->dy}, {"x", b->x}, {"mean", b->mean}, {"rstd", b->rstd}, {"weight", b->weight},
        {"dweight", b->dweight}, {"dbias", b->dbias}};
    for (int i = 0; i < 8; i++) c->t[i] = (kiln_launch_tensor){.name = t[i].name, .ptr = t[i].ptr};
    c->rows = (kiln_launch_scalar){"rows", b->rows};
    c->a = (kiln_launch_args){.tensors = c->t, .ntensors = 8, .scalars = &c->rows, .nscalars = 1};
}

/* The blocks the form's kernel runs on a device of sms multiprocessors (its description's grid rule). */
static unsigned form_blocks(kiln_rt *rt, const form_ctx *c, int sms) {
    char specs[KIT_MAX_STEPS][KILN_SPEC_MAX];
    const kiln_kernel_meta *metas[KIT_MAX_STEPS];
    static kiln_launch_step steps[KIT_MAX_STEPS];
    int self, n = kiln_launch_sequence(kiln_kernel_get_meta(c->k), specs, KIT_MAX_STEPS, &self);
    kiln_error err;
    for (int i = 0; i < n && i < KIT_MAX_STEPS; i++) {
        kiln_kernel *k = c->k;
        if (i != self && kiln_rt_get_kernel(rt, specs[i], &k, &err) != KILN_OK) return 0;
        metas[i] = kiln_kernel_get_meta(k);
    }
    kiln_launch_args q = c->a;
    q.workspace = 0;
    size_t bytes;
    if (n > KIT_MAX_STEPS || kiln_launch_bind(metas, n, self, &q, sms, steps, &bytes, &err) != KILN_OK) return 0;
    return steps[self].grid[0];
}

static int form_launch(void *p) {
    form_ctx *c = p;
    kiln_error err;
    if (kiln_launch(c->k, &c->a, &err) == KILN_OK) return 0;
    fprintf(stderr, "kiln-gpucheck: backward form %s: %s\n", kiln_kernel_get_meta(c->k)->spec, err.msg);
    return -1;
}

#endif

typedef struct peak_ctx {
    kiln_kernel *k;
    unsigned grid[3];
    kiln_arg args[2];
} peak_ctx;
static int peak_launch(void *p) {
    peak_ctx *c = p;
    kiln_error err;
    if (kiln_kernel_launch(c->k, c->grid, c->args, 2, NULL, &err) == KILN_OK) return 0;
    fprintf(stderr, "kiln-gpucheck: mma peak: %s\n", err.msg);
    return -1;
}

/* The tensor-core ceiling for mma.sync: each warp issues MMA_CHAINS independent
 * m16n8k16 bf16 -> f32 mma per iteration (no loads in the loop), as many warps as fill the device. */
enum { MMA_CHAINS = 8 };
static const char peak_ptx_head[] =
    ".version 7.0\n.target sm_80\n.address_size 64\n"
    ".visible .entry kiln_kit_mma_peak(.param .u64 out, .param .u32 iters)\n{\n"
    "  .reg .b32 a<4>, b<2>, t, i, n;\n  .reg .f32 c<32>, s;\n  .reg .pred p;\n  .reg .u64 o, off;\n"
    "  ld.param.u64 o, [out];\n  ld.param.u32 n, [iters];\n  mov.u32 t, %tid.x;\n"
    "  and.b32 t, t, 7;\n  or.b32 a0, t, 0x3c003c00;\n  or.b32 a1, t, 0x3c013c00;\n  or.b32 a2, t, 0x3c023c00;\n"
    "  or.b32 a3, t, 0x3c033c00;\n  or.b32 b0, t, 0x3c003c04;\n  or.b32 b1, t, 0x3c053c00;\n";

static int peak_ptx(char *buf, size_t size) {
    int n = snprintf(buf, size, "%s", peak_ptx_head);
    for (int i = 0; i < 4 * MMA_CHAINS; i++) n += snprintf(buf + n, size - (size_t)n, "  mov.f32 c%d, 0f00000000;\n", i);
    n += snprintf(buf + n, size - (size_t)n, "  mov.u32 i, 0;\nLOOP:\n");
    for (int j = 0; j < MMA_CHAINS; j++)
        n += snprintf(buf + n, size - (size_t)n,
                      "  mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {c%d, c%d, c%d, c%d}, {a0, a1, a2, a3}, "
                      "{b0, b1}, {c%d, c%d, c%d, c%d};\n",
                      4 * j, 4 * j + 1, 4 * j + 2, 4 * j + 3, 4 * j, 4 * j + 1, 4 * j + 2, 4 * j + 3);
    n += snprintf(buf + n, size - (size_t)n, "  add.u32 i, i, 1;\n  setp.lt.u32 p, i, n;\n  @p bra LOOP;\n  mov.f32 s, c0;\n");
    for (int i = 1; i < 4 * MMA_CHAINS; i++) n += snprintf(buf + n, size - (size_t)n, "  add.f32 s, s, c%d;\n", i);
    n += snprintf(buf + n, size - (size_t)n,
                  "  mov.u32 t, %%ctaid.x;\n  mov.u32 i, %%ntid.x;\n  mov.u32 n, %%tid.x;\n  mad.lo.u32 t, t, i, n;\n"
                  "  mul.wide.u32 off, t, 4;\n  add.u64 o, o, off;\n  st.global.f32 [o], s;\n  ret;\n}\n");
    return n;
}

static FILE *g_csv;
static void csv_row(const char *bench, const char *impl, const char *dtype, int hidden, int d, int seq, int causal,
                    long rows_or_batch, int heads, double work, const char *unit, double ms, int reps) {
    double rate = ms > 0 ? work / (ms * 1e-3) / (unit[0] == 'G' ? 1e9 : 1e12) : 0;
    if (g_csv)
        fprintf(g_csv, "%s,%s,%s,%d,%d,%d,%d,%ld,%d,%.6g,%s,%.6f,%.4f,%d\n", bench, impl, dtype, hidden, d, seq, causal,
                rows_or_batch, heads, work, unit, ms, rate, reps);
}

static void fill_random(void *buf, size_t n, kiln_dtype t, uint64_t seed) {
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        float v = (float)((double)(s >> 40) / (double)(1ull << 24) * 4 - 2); /* uniform [-2, 2) */
        if (t == KILN_F32) {
            memcpy((char *)buf + 4 * i, &v, 4);
        } else {
            uint32_t u;
            memcpy(&u, &v, 4);
            uint16_t h;
            if (t == KILN_BF16) {
                h = (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
            } else { /* f16: values in [-2, 2) are normal or tiny; truncating is fine for inputs */
                int e = (int)((u >> 23) & 255) - 127 + 15;
                h = (uint16_t)(((u >> 16) & 0x8000) | (e <= 0 ? 0 : (unsigned)(e << 10) | ((u >> 13) & 1023)));
            }
            memcpy((char *)buf + 2 * i, &h, 2);
        }
    }
}

/* What the sections of a speed run share: the runtime, the driver's timing calls, the ceilings
 * measured first (rows print their share of them). */
typedef struct bench {
    kiln_rt *rt;
    kiln_bundle *bundle;
    drv d;
    const kiln_device_info *dev;
    timer t;
    kiln_devptr flushbuf;
    int quick, reps, used; /* used: the launches the last median took */
    double copy_gbs, peak_tflops;
    kiln_error err;
} bench;

/* The row tensors the norm sections share (x, y, the hidden-long vectors, the per-row statistics). */
typedef struct row_bufs {
    size_t max_bytes;
    kiln_devptr x, y, w, bb, mean, rstd;
    void *host;
} row_bufs;

/* The attention tensors the forward, decoding and backward sections share. */
typedef struct attn_bufs {
    size_t elems;
    kiln_devptr q, k, v, o, lse;
    void *hq;
} attn_bufs;

/* The runtime over the bundle, the driver's events, the L2 flush buffer, the CSV and the header line. */
static int bench_open(bench *b, const char *bundle_path, const char *csv_path, int quick) {
    kiln_error err = {0};
    kiln_rt_options opt = {.no_disk_cache = 1};
    if (kiln_rt_create(&b->rt, &opt, &err) != KILN_OK) return die("runtime", &err);
    if (kiln_rt_add_bundle_file(b->rt, bundle_path, &err) != KILN_OK ||
        kiln_bundle_open_file(bundle_path, &b->bundle, &err) != KILN_OK)
        return die("bundle", &err);
    if (drv_open(&b->d)) return 2;
    kiln_rt *rt = b->rt;
    drv *d = &b->d;
    const kiln_device_info *dev = b->dev = kiln_rt_device(rt);
    int cudev, l2 = 0;
    CK(d->cuDeviceGet(&cudev, dev->ordinal));
    CK(d->cuDeviceGetAttribute(&l2, 38 /* CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE */, cudev));
    b->t = (timer){.d = d};
    timer *t = &b->t;
    if (kiln_rt_synchronize(rt, &err) != KILN_OK) return die("context", &err); /* binds the context here */
    CK(d->cuEventCreate(&t->ev[0], 0));
    CK(d->cuEventCreate(&t->ev[1], 0));
    t->flush_bytes = (size_t)(l2 > 0 ? l2 : 1 << 20) * 2;
    if (kiln_rt_alloc(rt, t->flush_bytes, &b->flushbuf, &err) != KILN_OK) return die("alloc", &err);
    g_csv = csv_path ? fopen(csv_path, "w") : NULL;
    if (g_csv) fputs("bench,impl,dtype,hidden,head_dim,seq,causal,rows_or_batch,heads,work,unit,median_ms,rate,reps\n", g_csv);
    printf("speed on %s (sm_%d, %d SMs, L2 %d MiB), CUDA events, median of >= 20 launches after warm-up\n", dev->name,
           dev->sm, dev->multiprocessors, l2 >> 20);
    b->quick = quick, b->reps = quick ? 5 : 25;
    return 0;
}

/* The bandwidth ceiling: a device-to-device copy (bytes read + bytes written). */
static int bench_copy(bench *b) {
    kiln_rt *rt = b->rt;
    double ms;
    /* device-to-device copy: the bandwidth ceiling (bytes read + bytes written) */
    size_t copy_bytes = b->quick ? (8u << 20) : (1ull << 30);
    copy_ctx cc = {.d = &b->d, .n = copy_bytes};
    if (kiln_rt_alloc(rt, copy_bytes, &cc.src, &b->err) != KILN_OK || kiln_rt_alloc(rt, copy_bytes, &cc.dst, &b->err) != KILN_OK)
        return die("alloc", &b->err);
    CK(b->d.cuMemsetD8(cc.src, 0x5a, copy_bytes));
    ms = time_median(&b->t, copy_launch, &cc, b->reps, &b->used);
    double copy_gbs = 2.0 * (double)copy_bytes / (ms * 1e-3) / 1e9;
    printf("  cuMemcpyDtoD %zu MiB: %.3f ms, %.0f GB/s (read + write)\n", copy_bytes >> 20, ms, copy_gbs);
    csv_row("copy", "cuMemcpyDtoD", "-", 0, 0, 0, 0, 0, 0, 2.0 * (double)copy_bytes, "GB", ms, b->used);
    kiln_rt_free(rt, cc.src, NULL), kiln_rt_free(rt, cc.dst, NULL);
    b->copy_gbs = copy_gbs;
    return 0;
}

/* The tensor-core ceiling: a kiln-written mma.sync loop on every SM. */
static int bench_mma_peak(bench *b) {
    kiln_rt *rt = b->rt;
    double ms;
    /* tensor-core ceiling of mma.sync */
    char ptx[16384];
    size_t plen = (size_t)peak_ptx(ptx, sizeof ptx);
    kiln_kernel_meta pm = {.family = "kit", .spec = "kit mma_peak", .entry = "kiln_kit_mma_peak", .sm = 80,
                           .ptx_version = 70, .nparams = 2, .block = {256, 1, 1}, .grid_tile = {256, 1, 1}};
    snprintf(pm.params[0].name, KILN_NAME_MAX, "out"), pm.params[0].kind = KILN_PARAM_PTR;
    snprintf(pm.params[1].name, KILN_NAME_MAX, "iters"), pm.params[1].kind = KILN_PARAM_I32;
    peak_ctx pc = {.grid = {(unsigned)b->dev->multiprocessors * 8, 1, 1}};
    unsigned iters = b->quick ? 16 : 1024;
    pc.args[1].i32 = (int32_t)iters;
    if (kiln_rt_load_module(rt, ptx, plen, KILN_PAYLOAD_PTX, &pm, &pc.k, &b->err) != KILN_OK ||
        kiln_rt_alloc(rt, (size_t)pc.grid[0] * 256 * 4, &pc.args[0].ptr, &b->err) != KILN_OK)
        return die("mma peak kernel", &b->err);
    ms = time_median(&b->t, peak_launch, &pc, b->reps, &b->used);
    double peak_flops = (double)pc.grid[0] * 8 /* warps */ * iters * MMA_CHAINS * 2.0 * 16 * 8 * 16;
    double peak_tflops = peak_flops / (ms * 1e-3) / 1e12;
    printf("  mma.sync m16n8k16 bf16 peak: %.3f ms, %.1f TFLOP/s\n", ms, peak_tflops);
    csv_row("mma_peak", "mma.sync.m16n8k16.bf16", "bf16", 0, 0, 0, 0, pc.grid[0], 0, peak_flops, "TFLOP", ms, b->used);
    b->peak_tflops = peak_tflops;
    return 0;
}

/* LayerNorm forward over the sweep's dtypes and hidden sizes, and the two-blocks-per-SM probe. */
static int bench_layernorm_fwd(bench *b, row_bufs *rb) {
    kiln_rt *rt = b->rt;
    double ms;
    /* LayerNorm forward over hidden sizes */
    size_t max_bytes = (size_t)(b->quick ? (4u << 20) : KIT_LN_SWEEP_BYTES) + (64u << 20);
    kiln_devptr x, y, w, bb, mean, rstd;
    size_t max_rows = max_bytes / 2 / 768 + 1;
    void *host = malloc(max_bytes / 2);
    if (!host) return fprintf(stderr, "kiln-gpucheck: out of memory\n"), 2;
    if (kiln_rt_alloc(rt, max_bytes / 2, &x, &b->err) || kiln_rt_alloc(rt, max_bytes / 2, &y, &b->err) ||
        kiln_rt_alloc(rt, KIT_LN_SWEEP_MAX_HIDDEN * 4, &w, &b->err) ||
        kiln_rt_alloc(rt, KIT_LN_SWEEP_MAX_HIDDEN * 4, &bb, &b->err) ||
        kiln_rt_alloc(rt, max_rows * 4, &mean, &b->err) || kiln_rt_alloc(rt, max_rows * 4, &rstd, &b->err))
        return die("alloc", &b->err);
    printf("  %-28s %7s %8s %9s %9s %7s\n", "layernorm forward", "hidden", "rows", "ms", "GB/s", "of copy");
    for (size_t ti = 0; ti < sizeof kit_ln_sweep_dtypes / sizeof *kit_ln_sweep_dtypes; ti++) {
        kiln_dtype dt;
        kiln_dtype_parse(kit_ln_sweep_dtypes[ti], &dt);
        size_t es = kiln_dtype_size(dt);
        fill_random(host, max_bytes / 2 / es, dt, 1 + ti);
        if (kiln_rt_upload(rt, x, host, max_bytes / 2 / es * es, &b->err) != KILN_OK) return die("upload", &b->err);
        fill_random(host, KIT_LN_SWEEP_MAX_HIDDEN * 2, dt, 7);
        if (kiln_rt_upload(rt, w, host, KIT_LN_SWEEP_MAX_HIDDEN * es, &b->err) ||
            kiln_rt_upload(rt, bb, (char *)host + KIT_LN_SWEEP_MAX_HIDDEN * es, KIT_LN_SWEEP_MAX_HIDDEN * es, &b->err))
            return die("upload", &b->err);
        for (size_t hi = 0; hi < sizeof kit_ln_sweep_hidden / sizeof *kit_ln_sweep_hidden; hi++) {
            int hidden = kit_ln_sweep_hidden[hi];
            double want = b->quick ? 4.0 * (1 << 20) : KIT_LN_SWEEP_BYTES;
            long rows = (long)ceil(want / ((double)hidden * 2 * (double)es));
            helper_ctx lc = {.rt = rt, .h = H_LAYERNORM, .ln = {.y = y, .mean = mean, .rstd = rstd, .x = x, .weight = w, .bias = bb, .rows = (int)rows,
                                         .hidden = hidden, .x_dtype = dt, .w_dtype = dt, .y_dtype = dt, .eps = 1e-5f}};
            double bytes = (double)rows * hidden * 2 * (double)es + 2.0 * hidden * (double)es + 8.0 * (double)rows;
            b->t.flush = bytes < b->t.flush_bytes ? b->flushbuf : 0;
            ms = time_median(&b->t, helper_launch, &lc, b->reps, &b->used);
            if (ms < 0) continue;
            double gbs = bytes / (ms * 1e-3) / 1e9;
            printf("  %-28s %7d %8ld %9.4f %9.0f %6.1f%%\n", kit_ln_sweep_dtypes[ti], hidden, rows, ms, gbs, 100 * gbs / b->copy_gbs);
            csv_row("layernorm_fwd", "kiln", kit_ln_sweep_dtypes[ti], hidden, 0, 0, 0, rows, 0, bytes, "GB", ms, b->used);
            /* probe: the same PTX asking ptxas for two blocks per SM (fewer registers, more loads in flight) */
            probe_ctx pr = {.a = lc.ln};
            kiln_kernel *picked;
            if (kiln_norm_forward_pick(rt, &lc.ln, &picked, &b->err) == KILN_OK &&
                probe_load(rt, b->bundle, kiln_kernel_get_meta(picked), &pr.k) == 0) {
                ms = time_median(&b->t, probe_launch, &pr, b->reps, &b->used);
                if (ms > 0) {
                    gbs = bytes / (ms * 1e-3) / 1e9;
                    printf("  %-28s %7d %8ld %9.4f %9.0f %6.1f%%\n", "  probe .minnctapersm 2", hidden, rows, ms, gbs,
                           100 * gbs / b->copy_gbs);
                    csv_row("layernorm_fwd", "kiln-minctasm2", kit_ln_sweep_dtypes[ti], hidden, 0, 0, 0, rows, 0, bytes, "GB",
                            ms, b->used);
                }
            }
        }
    }
    *rb = (row_bufs){max_bytes, x, y, w, bb, mean, rstd, host};
    return 0;
}

#ifdef KIT_HAVE_NORM
/* RMSNorm forward and the norm backwards (bf16; dweight/dbias through the workspace and the reduction kernel), with
 * their offset=1 rows and the backward's kernel forms, on the LayerNorm section's tensors. */
static int bench_norms(bench *b, const row_bufs *rb) {
    kiln_rt *rt = b->rt;
    double ms;
    /* RMSNorm forward and LayerNorm backward (bf16, weight and bias; dweight/dbias through the
     * workspace and the reduce kernel): bytes = the row tensors read and written once */
    kiln_devptr dy, dw, db, ws = 0;
    size_t ws_bytes = 0;
    if (kiln_rt_alloc(rt, rb->max_bytes / 2, &dy, &b->err) || kiln_rt_alloc(rt, KIT_LN_SWEEP_MAX_HIDDEN * 4, &dw, &b->err) ||
        kiln_rt_alloc(rt, KIT_LN_SWEEP_MAX_HIDDEN * 4, &db, &b->err))
        return die("alloc", &b->err);
    fill_random(rb->host, rb->max_bytes / 2 / 2, KILN_BF16, 5);
    if (kiln_rt_upload(rt, dy, rb->host, rb->max_bytes / 2 / 2 * 2, &b->err) != KILN_OK) return die("upload", &b->err);
    /* fam 0: RMSNorm forward; 1: LayerNorm backward (weight and bias); 2: RMSNorm backward (weight).
     * The backwards also time their kernel forms (kit_norm_bwd_forms) on the same data. */
    for (int fam = 0; fam < 3; fam++) {
        const kit_norm_sweep *sw = &kit_norm_sweeps[fam];
        printf("  %-28s %7s %8s %9s %9s %7s\n", sw->title, "hidden", "rows", "ms", "GB/s", "of copy");
        for (size_t hi = 0; hi < sizeof kit_ln_sweep_hidden / sizeof *kit_ln_sweep_hidden; hi++) {
            int hidden = kit_ln_sweep_hidden[hi], tensors = fam ? 3 : 2;
            double want = b->quick ? 4.0 * (1 << 20) : KIT_LN_SWEEP_BYTES;
            long rows = (long)ceil(want / ((double)hidden * tensors * 2));
            helper_ctx nc = {.rt = rt, .h = fam ? H_NORM_BWD : H_NORM_FWD};
            nc.f = (kiln_norm_fwd_args){.kind = KILN_NORM_RMSNORM, .y = rb->y, .rstd = rb->rstd, .x = rb->x, .weight = rb->w, .rows = (int)rows,
                                        .hidden = hidden, .x_dtype = KILN_BF16, .w_dtype = KILN_BF16, .y_dtype = KILN_BF16,
                                        .r_dtype = KILN_BF16, .eps = 1e-5f};
            nc.b = (kiln_norm_bwd_args){.kind = fam == 2 ? KILN_NORM_RMSNORM : KILN_NORM_LAYERNORM, .dx = rb->y, .dweight = dw,
                                        .dbias = fam == 2 ? 0 : db, .dy = dy, .x = rb->x, .mean = fam == 2 ? 0 : rb->mean,
                                        .rstd = rb->rstd, .weight = rb->w, .rows = (int)rows, .hidden = hidden,
                                        .x_dtype = KILN_BF16, .w_dtype = KILN_BF16, .dy_dtype = KILN_BF16,
                                        .dx_dtype = KILN_BF16, .r_dtype = KILN_BF16};
            if (fam) {
                size_t need = 0;
                if (kiln_norm_backward_workspace(rt, &nc.b, &need, NULL, &b->err) != KILN_OK) {
                    fprintf(stderr, "kiln-gpucheck: layernorm backward: %s\n", b->err.msg);
                    continue;
                }
                if (need > ws_bytes) {
                    if (ws) kiln_rt_free(rt, ws, NULL);
                    if (kiln_rt_alloc(rt, need, &ws, &b->err) != KILN_OK) return die("alloc", &b->err);
                    ws_bytes = need;
                }
                nc.b.workspace = ws, nc.b.workspace_bytes = ws_bytes;
            }
            /* the traffic model of the first runs: row tensors once each, the per-row statistics
             * (mean and rstd, RMSNorm rstd), two hidden-long bf16 vectors */
            double stats = fam == 1 ? 8.0 : 4.0;
            double bytes = (double)rows * hidden * tensors * 2 + stats * (double)rows + 2.0 * hidden * 2;
            b->t.flush = bytes < b->t.flush_bytes ? b->flushbuf : 0;
            ms = time_median(&b->t, helper_launch, &nc, b->reps, &b->used);
            if (ms < 0) continue;
            double gbs = bytes / (ms * 1e-3) / 1e9;
            printf("  %-28s %7d %8ld %9.4f %9.0f %6.1f%%\n", "bf16", hidden, rows, ms, gbs, 100 * gbs / b->copy_gbs);
            csv_row(sw->csv, "kiln", "bf16", hidden, 0, 0, 0, rows, 0, bytes, "GB", ms, b->used);
            /* offset=1 (zero-centered weights) on the same data and traffic: one f32 add per element more */
            for (size_t oi = 0; oi < sizeof kit_offset_sweep_hidden / sizeof *kit_offset_sweep_hidden; oi++) {
                if (kit_offset_sweep_hidden[oi] != hidden) continue;
                helper_ctx oc = nc;
                oc.f.offset = oc.b.offset = 1;
                ms = time_median(&b->t, helper_launch, &oc, b->reps, &b->used);
                if (ms < 0) continue;
                gbs = bytes / (ms * 1e-3) / 1e9;
                printf("  %-28s %7d %8ld %9.4f %9.0f %6.1f%%\n", "bf16 offset=1", hidden, rows, ms, gbs, 100 * gbs / b->copy_gbs);
                csv_row(sw->csv, "kiln-offset1", "bf16", hidden, 0, 0, 0, rows, 0, bytes, "GB", ms, b->used);
            }
            if (!fam) continue;
            for (size_t fi = 0; fi < sizeof kit_norm_bwd_form_rows / sizeof *kit_norm_bwd_form_rows; fi++) {
                const kit_form_row *fr = &kit_norm_bwd_form_rows[fi];
                if (strcmp(fr->family, sw->family) || fr->hidden != hidden || !sw->form_spec) continue;
                char spec[KILN_SPEC_MAX], impl[64];
                snprintf(spec, sizeof spec, sw->form_spec, hidden, fr->form);
                form_ctx fc;
                if (kiln_rt_get_kernel(rt, spec, &fc.k, &b->err) != KILN_OK) continue; /* not generated for every SM */
                const kiln_kernel_meta *fm = kiln_kernel_get_meta(fc.k);
                form_bind(&fc, &nc.b);
                size_t wneed = 0;
                if (kiln_launch_workspace(fc.k, &fc.a, &wneed, &b->err) != KILN_OK) return die("backward form", &b->err);
                if (wneed > ws_bytes) {
                    if (ws) kiln_rt_free(rt, ws, NULL);
                    if (kiln_rt_alloc(rt, wneed, &ws, &b->err) != KILN_OK) return die("alloc", &b->err);
                    ws_bytes = wneed;
                }
                fc.a.workspace = ws, fc.a.workspace_bytes = ws_bytes;
                unsigned threads = fm->block[0] * fm->block[1] * fm->block[2];
                unsigned blocks = form_blocks(rt, &fc, b->dev->multiprocessors > 0 ? b->dev->multiprocessors : 1);
                ms = time_median(&b->t, form_launch, &fc, b->reps, &b->used);
                if (ms < 0) continue;
                gbs = bytes / (ms * 1e-3) / 1e9;
                snprintf(impl, sizeof impl, "kiln-form-%s", fr->form);
                printf("  %-28s %7d %8ld %9.4f %9.0f %6.1f%%   (%u threads x %u blocks)\n", impl + 5, hidden, rows, ms, gbs,
                       100 * gbs / b->copy_gbs, threads, blocks);
                csv_row(sw->csv, impl, "bf16", hidden, 0, 0, 0, rows, 0, bytes, "GB", ms, b->used);
            }
        }
    }
    if (ws) kiln_rt_free(rt, ws, NULL);
    kiln_rt_free(rt, dy, NULL), kiln_rt_free(rt, dw, NULL), kiln_rt_free(rt, db, NULL);
    return 0;
}
#endif

/* Times one attention sweep row (c through its typed helper, the L2 flushed when bytes fit), prints
 * it against the mma.sync peak and writes its CSV row. */
static void attn_sweep_row(bench *b, helper_ctx *c, double flops, double bytes, const char *label, const char *csv,
                           const char *impl, const char *dtype, int hd, int seq, int causal, int batch, int heads) {
    b->t.flush = bytes < b->t.flush_bytes ? b->flushbuf : 0;
    double ms = time_median(&b->t, helper_launch, c, b->reps, &b->used);
    if (ms < 0) return;
    double tf = flops / (ms * 1e-3) / 1e12;
    printf("  %-28s %7d %8d %9.3f %9.1f %6.1f%%\n", label, seq, batch, ms, tf, 100 * tf / b->peak_tflops);
    csv_row(csv, impl, dtype, 0, hd, seq, causal, batch, heads, flops, "TFLOP", ms, b->used);
}

/* The attention sweeps' shape at head_dim hd and sequence length seq: as many sequences as fill the
 * sweep's tokens, as many heads as fill its width. 1: the quick run skips it. */
static int attn_shape(const bench *b, int hd, int seq, int *batch, int *heads) {
    if (b->quick && seq > 1024) return 1;
    int tokens = b->quick ? 1024 : KIT_ATTN_SWEEP_TOKENS;
    *batch = tokens / seq > 0 ? tokens / seq : 1, *heads = KIT_ATTN_SWEEP_WIDTH / hd;
    return 0;
}

/* Attention forward over the sweep's dtypes, head dims, causal or not, and sequence lengths. */
static int bench_attention_fwd(bench *b, attn_bufs *ab) {
    kiln_rt *rt = b->rt;
    /* attention forward over sequence lengths */
    size_t elems = (size_t)(b->quick ? 1024 : KIT_ATTN_SWEEP_TOKENS) * KIT_ATTN_SWEEP_WIDTH;
    kiln_devptr q, k, v, o, lse;
    void *hq = malloc(elems * 2);
    if (!hq) return fprintf(stderr, "kiln-gpucheck: out of memory\n"), 2;
    if (kiln_rt_alloc(rt, elems * 2, &q, &b->err) || kiln_rt_alloc(rt, elems * 2, &k, &b->err) ||
        kiln_rt_alloc(rt, elems * 2, &v, &b->err) || kiln_rt_alloc(rt, elems * 2, &o, &b->err) ||
        kiln_rt_alloc(rt, elems / 32 * 4 + 4096, &lse, &b->err))
        return die("alloc", &b->err);
    printf("  %-28s %7s %8s %9s %9s %7s\n", "attention forward", "seq", "batch", "ms", "TFLOP/s", "of mma");
    for (size_t ti = 0; ti < sizeof kit_attn_sweep_dtypes / sizeof *kit_attn_sweep_dtypes; ti++) {
        kiln_dtype dt;
        kiln_dtype_parse(kit_attn_sweep_dtypes[ti], &dt);
        kiln_devptr bufs[3] = {q, k, v};
        for (int i = 0; i < 3; i++) {
            fill_random(hq, elems, dt, 11 + (uint64_t)i);
            if (kiln_rt_upload(rt, bufs[i], hq, elems * 2, &b->err) != KILN_OK) return die("upload", &b->err);
        }
        for (size_t di = 0; di < sizeof kit_attn_sweep_d / sizeof *kit_attn_sweep_d; di++)
            for (int causal = 0; causal < 2; causal++)
                for (size_t si = 0; si < sizeof kit_attn_sweep_seq / sizeof *kit_attn_sweep_seq; si++) {
                    int hd = kit_attn_sweep_d[di], seq = kit_attn_sweep_seq[si];
                    int batch, heads;
                    if (attn_shape(b, hd, seq, &batch, &heads)) continue;
                    helper_ctx ac = {.rt = rt, .h = H_ATTENTION, .a = {.o = o, .lse = lse, .q = q, .k = k, .v = v, .dtype = dt, .out_dtype = dt,
                                                   .head_dim = hd, .causal = causal, .batch = batch, .heads_q = heads,
                                                   .heads_kv = heads, .seq_q = seq, .seq_k = seq}};
                    double flops = 4.0 * batch * heads * (double)seq * seq * hd * (causal ? 0.5 : 1);
                    double bytes = 4.0 * (double)batch * seq * heads * hd * 2;
                    char label[64];
                    snprintf(label, sizeof label, "%s d%d%s", kit_attn_sweep_dtypes[ti], hd, causal ? " causal" : "");
                    attn_sweep_row(b, &ac, flops, bytes, label, "attention_fwd", "kiln", kit_attn_sweep_dtypes[ti], hd, seq, causal,
                                   batch, heads);
                }
    }
    *ab = (attn_bufs){elems, q, k, v, o, lse, hq};
    return 0;
}

/* The attention backward sweeps' tensors: dO, the gradients (the forward sweep's size each) and the workspace, grown
 * to what a row's sequence needs (bwd_workspace). */
typedef struct bwd_bufs {
    kiln_devptr dout, dq, dk, dv, ws;
    size_t ws_bytes;
} bwd_bufs;

static int bwd_bufs_alloc(bench *b, const attn_bufs *ab, bwd_bufs *g) {
    *g = (bwd_bufs){0};
    kiln_rt *rt = b->rt;
    if (kiln_rt_alloc(rt, ab->elems * 2, &g->dout, &b->err) || kiln_rt_alloc(rt, ab->elems * 2, &g->dq, &b->err) ||
        kiln_rt_alloc(rt, ab->elems * 2, &g->dk, &b->err) || kiln_rt_alloc(rt, ab->elems * 2, &g->dv, &b->err))
        return die("alloc", &b->err);
    return 0;
}

static void bwd_bufs_free(bench *b, bwd_bufs *g) {
    const kiln_devptr p[5] = {g->dout, g->dq, g->dk, g->dv, g->ws};
    for (int i = 0; i < 5; i++)
        if (p[i]) kiln_rt_free(b->rt, p[i], NULL);
}

/* a's workspace from g, grown to what the device's sequence for a needs: 0; -1 when the helper refuses a (b->err says
 * why); 2 when the allocation fails (said). */
static int bwd_workspace(bench *b, bwd_bufs *g, kiln_attention_bwd_args *a) {
    size_t need = 0; /* (the query needs no workspace pointer yet) */
    if (kiln_attention_backward_workspace_on(b->rt, a, &need, &b->err) != KILN_OK) return -1;
    if (need > g->ws_bytes) {
        if (g->ws) kiln_rt_free(b->rt, g->ws, NULL);
        g->ws = 0, g->ws_bytes = 0;
        if (kiln_rt_alloc(b->rt, need, &g->ws, &b->err) != KILN_OK) return die("alloc", &b->err);
        g->ws_bytes = need;
    }
    a->workspace = g->ws;
    return 0;
}

/* Fills n of the attention sweeps' tensors (ab->elems 16-bit values each) with uniform values of dtype t, seeds
 * seed, seed + 1, ...; 0, or nonzero (said) when an upload fails. */
static int upload_random(bench *b, const attn_bufs *ab, const kiln_devptr *bufs, int n, kiln_dtype t, uint64_t seed) {
    for (int i = 0; i < n; i++) {
        fill_random(ab->hq, ab->elems, t, seed + (uint64_t)i);
        if (kiln_rt_upload(b->rt, bufs[i], ab->hq, ab->elems * 2, &b->err) != KILN_OK) return die("upload", &b->err);
    }
    return 0;
}

/* The sm_90a wgmma forward (path=wgmma, from the arch bundle) beside kiln's FA2 kernel (path=auto: mma.sync
 * on sm_90) on the same tensors, both through kiln_launch_spec, at kit_wgmma_sweep_dtypes x kit_wgmma_sweep_d,
 * causal off/on, the forward sweep's lengths and shape rule (issue 27): rows `kiln-wgmma` and `kiln-fa2` of
 * attention_fwd_wgmma; peers.py times SDPA flash and cuDNN on the same shapes. A 9.0 device only. */
static int bench_attention_wgmma(bench *b, const attn_bufs *ab) {
    kiln_rt *rt = b->rt;
    printf("  %-28s %7s %8s %9s %9s %7s\n", "attention forward sm_90a", "seq", "batch", "ms", "TFLOP/s", "of mma");
    for (size_t ti = 0; ti < sizeof kit_wgmma_sweep_dtypes / sizeof *kit_wgmma_sweep_dtypes; ti++) {
        const char *dt = kit_wgmma_sweep_dtypes[ti];
        kiln_dtype t;
        kiln_dtype_parse(dt, &t);
        const kiln_devptr bufs[3] = {ab->q, ab->k, ab->v};
        if (upload_random(b, ab, bufs, 3, t, 41)) return 2;
        for (size_t di = 0; di < sizeof kit_wgmma_sweep_d / sizeof *kit_wgmma_sweep_d; di++)
            for (int causal = 0; causal < 2; causal++)
                for (size_t si = 0; si < sizeof kit_attn_sweep_seq / sizeof *kit_attn_sweep_seq; si++) {
                    int hd = kit_wgmma_sweep_d[di], seq = kit_attn_sweep_seq[si], batch, heads;
                    if (attn_shape(b, hd, seq, &batch, &heads)) continue;
                    kiln_launch_tensor tt[] = {{.name = "q", .ptr = ab->q}, {.name = "k", .ptr = ab->k},
                                               {.name = "v", .ptr = ab->v}, {.name = "o", .ptr = ab->o},
                                               {.name = "lse", .ptr = ab->lse}};
                    kiln_launch_scalar sc[] = {{"batch", batch}, {"heads_q", heads}, {"heads_kv", heads}, {"seq_q", seq},
                                               {"seq_k", seq}};
                    double flops = 4.0 * batch * heads * (double)seq * seq * hd * (causal ? 0.5 : 1);
                    double bytes = 4.0 * (double)batch * seq * heads * hd * 2;
                    for (int w = 1; w >= 0; w--) {
                        char spec[KILN_SPEC_MAX], label[64];
                        snprintf(spec, sizeof spec, w ? KIT_ATTN_WGMMA_SPEC : KIT_ATTN_SPEC, dt, dt, hd, causal ? "true" : "false");
                        helper_ctx c = {.rt = rt, .h = H_SPEC, .spec = spec,
                                        .la = {.tensors = tt, .ntensors = 5, .scalars = sc, .nscalars = 5}};
                        b->t.flush = bytes < b->t.flush_bytes ? b->flushbuf : 0;
                        double ms = time_median(&b->t, helper_launch, &c, b->reps, &b->used);
                        if (ms < 0) continue;
                        double tf = flops / (ms * 1e-3) / 1e12;
                        snprintf(label, sizeof label, "%s %s d%d%s", w ? "wgmma" : "fa2", dt, hd, causal ? " causal" : "");
                        printf("  %-28s %7d %8d %9.3f %9.1f %6.1f%%\n", label, seq, batch, ms, tf, 100 * tf / b->peak_tflops);
                        csv_row(KIT_WGMMA_CSV, w ? "kiln-wgmma" : "kiln-fa2", dt, 0, hd, seq, causal, batch, heads, flops, "TFLOP",
                                ms, b->used);
                    }
                }
    }
    return 0;
}

/* The sm_90a wgmma backward (kiln_attention_backward with path=wgmma: prep, the wgmma dK/dV kernel, convert; and the
 * deterministic sequence, prep, dkdv, dq) beside kiln's FA2 backward (path=auto: mma.sync on sm_90), atomic and
 * deterministic, on the forward's own O and lse of the same tensors, at kit_wgmma_sweep_dtypes x kit_wgmma_bwd_sweep_d,
 * causal off/on, the forward sweep's lengths and shape rule (issue 27): rows kiln-wgmma, kiln-wgmma-det, kiln-fa2 and
 * kiln-fa2-det of attention_bwd_wgmma; FLOPs as the FA2 backward's rows count them (2.5x the forward's); peers.py
 * times SDPA's flash and cuDNN backward on the same shapes. A 9.0 device only. */
static int bench_attention_bwd_wgmma(bench *b, const attn_bufs *ab) {
    kiln_rt *rt = b->rt;
    bwd_bufs g;
    if (bwd_bufs_alloc(b, ab, &g)) return 2;
    printf("  %-28s %7s %8s %9s %9s %7s   (FLOPs = 2.5x forward, FA2 convention)\n", "attention backward sm_90a", "seq",
           "batch", "ms", "TFLOP/s", "of mma");
    static const struct { int path, det; const char *impl, *label; } impls[] = {
        {KILN_ATTENTION_PATH_WGMMA, 0, "kiln-wgmma", "wgmma"}, {KILN_ATTENTION_PATH_WGMMA, 1, "kiln-wgmma-det", "wgmma det."},
        {KILN_ATTENTION_PATH_AUTO, 0, "kiln-fa2", "fa2"}, {KILN_ATTENTION_PATH_AUTO, 1, "kiln-fa2-det", "fa2 det."}};
    for (size_t ti = 0; ti < sizeof kit_wgmma_sweep_dtypes / sizeof *kit_wgmma_sweep_dtypes; ti++) {
        const char *dt = kit_wgmma_sweep_dtypes[ti];
        kiln_dtype t;
        kiln_dtype_parse(dt, &t);
        const kiln_devptr bufs[4] = {ab->q, ab->k, ab->v, g.dout};
        if (upload_random(b, ab, bufs, 4, t, 51)) return 2;
        for (size_t di = 0; di < sizeof kit_wgmma_bwd_sweep_d / sizeof *kit_wgmma_bwd_sweep_d; di++)
            for (int causal = 0; causal < 2; causal++)
                for (size_t si = 0; si < sizeof kit_attn_sweep_seq / sizeof *kit_attn_sweep_seq; si++) {
                    int hd = kit_wgmma_bwd_sweep_d[di], seq = kit_attn_sweep_seq[si], batch, heads;
                    if (attn_shape(b, hd, seq, &batch, &heads)) continue;
                    helper_ctx fc = {.rt = rt, .h = H_ATTENTION, .a = {.o = ab->o, .lse = ab->lse, .q = ab->q, .k = ab->k,
                                                                       .v = ab->v, .dtype = t, .out_dtype = t, .head_dim = hd,
                                                                       .causal = causal, .batch = batch, .heads_q = heads,
                                                                       .heads_kv = heads, .seq_q = seq, .seq_k = seq}};
                    if (helper_launch(&fc)) continue; /* the backward's O and lse */
                    double flops = 2.5 * 4.0 * batch * heads * (double)seq * seq * hd * (causal ? 0.5 : 1);
                    double bytes = 9.0 * (double)batch * seq * heads * hd * 2;
                    for (size_t ii = 0; ii < sizeof impls / sizeof *impls; ii++) {
                        helper_ctx bc = {.rt = rt, .h = H_ATTENTION_BWD,
                                         .ab = {.dq = g.dq, .dk = g.dk, .dv = g.dv, .q = ab->q, .k = ab->k, .v = ab->v,
                                                .o = ab->o, .dout = g.dout, .lse = ab->lse, .dtype = t, .out_dtype = t,
                                                .grad_dtype = t, .head_dim = hd, .causal = causal,
                                                .deterministic = impls[ii].det, .batch = batch, .heads_q = heads,
                                                .heads_kv = heads, .seq_q = seq, .seq_k = seq, .path = impls[ii].path}};
                        int w = bwd_workspace(b, &g, &bc.ab);
                        if (w > 0) return w;
                        if (w < 0) {
                            fprintf(stderr, "kiln-gpucheck: attention backward %s: %s\n", impls[ii].impl, b->err.msg);
                            continue;
                        }
                        char label[64];
                        snprintf(label, sizeof label, "%s %s d%d%s", impls[ii].label, dt, hd, causal ? " causal" : "");
                        attn_sweep_row(b, &bc, flops, bytes, label, KIT_WGMMA_BWD_CSV, impls[ii].impl, dt, hd, seq, causal,
                                       batch, heads);
                    }
                }
    }
    /* the forward sweep's head dims the wgmma backward is not built for: said, not timed (kiln-kit checks the refusal) */
    for (size_t d = 0; d < sizeof kit_wgmma_sweep_d / sizeof *kit_wgmma_sweep_d; d++) {
        int built = 0;
        for (size_t i = 0; i < sizeof kit_wgmma_bwd_sweep_d / sizeof *kit_wgmma_bwd_sweep_d; i++)
            built |= kit_wgmma_bwd_sweep_d[i] == kit_wgmma_sweep_d[d];
        if (!built) printf("  attention backward sm_90a d%d: not built on wgmma (its template refuses path=wgmma there)\n",
                           kit_wgmma_sweep_d[d]);
    }
    bwd_bufs_free(b, &g);
    return 0;
}

/* Decoding over a paged KV cache: the contiguous case's K and V (dc, its workspace) read as pages
 * [batch * seq_k / P, P, heads_kv, d] through a block table that maps each sequence's pages to a
 * random permutation of them (scattered reads, as a serving cache's), every cache_seqlens seq_k;
 * kiln split-KV with automatic splits, for each page size P of kit_decode_page_sizes. host: scratch
 * of at least scratch_elems * 2 bytes. */
static int bench_decode_paged(bench *b, const helper_ctx *dc, double bytes, void *host, size_t scratch_elems) {
    kiln_rt *rt = b->rt;
    int batch = dc->a.batch, seq_k = dc->a.seq_k;
    for (size_t pi = 0; pi < sizeof kit_decode_page_sizes / sizeof *kit_decode_page_sizes; pi++) {
        int ps = kit_decode_page_sizes[pi], per = (seq_k + ps - 1) / ps, nblocks = batch * per;
        size_t tb = (size_t)nblocks * sizeof(int32_t);
        if (tb + (size_t)batch * sizeof(int32_t) > scratch_elems * 2) return die("paged decode: scratch too small", &b->err);
        int32_t *table = host, *lens = (int32_t *)host + nblocks;
        for (int i = 0; i < nblocks; i++) table[i] = i;
        uint64_t z = 0x9e3779b97f4a7c15ull * (uint64_t)(ps + 1);
        for (int i = nblocks - 1; i > 0; i--) { /* Fisher-Yates, xorshift */
            z ^= z << 13, z ^= z >> 7, z ^= z << 17;
            int j = (int)(z % (uint64_t)(i + 1)), t = table[i];
            table[i] = table[j], table[j] = t;
        }
        for (int i = 0; i < batch; i++) lens[i] = seq_k;
        kiln_devptr dt, dl;
        if (kiln_rt_alloc(rt, tb, &dt, &b->err) || kiln_rt_alloc(rt, (size_t)batch * sizeof(int32_t), &dl, &b->err))
            return die("alloc", &b->err);
        if (kiln_rt_upload(rt, dt, table, tb, &b->err) || kiln_rt_upload(rt, dl, lens, (size_t)batch * sizeof(int32_t), &b->err))
            return die("upload", &b->err);
        helper_ctx pc = *dc;
        pc.a.cache = (kiln_attention_kvcache){.block_table = dt, .cache_seqlens = dl, .page_size = ps, .max_blocks = per,
                                              .num_blocks = nblocks};
        int splits = 1;
        size_t need = 0;
        if (kiln_attention_forward_workspace(rt, &pc.a, 0, &splits, &need, &b->err) != KILN_OK) return die("workspace", &b->err);
        if (need > dc->ws_bytes) return die("paged decode: workspace larger than the contiguous case's", &b->err);
        double ms = time_median(&b->t, helper_launch, &pc, b->reps, &b->used);
        if (ms >= 0) {
            double gbs = bytes / (ms * 1e-3) / 1e9;
            char label[32];
            snprintf(label, sizeof label, "kiln split-KV, pages of %d", ps);
            printf("  %-28s %7d %8d %9.4f %9.0f %6.1f%% %7d\n", label, seq_k, batch, ms, gbs, 100 * gbs / b->copy_gbs, splits);
            snprintf(label, sizeof label, "kiln-splitkv-page%d", ps);
            csv_row("attention_decode_paged", label, "bf16", 0, dc->a.head_dim, seq_k, 0, batch, dc->a.heads_q, bytes, "GB", ms,
                    b->used);
        }
        kiln_rt_free(rt, dt, NULL), kiln_rt_free(rt, dl, NULL);
    }
    return 0;
}

/* Decoding: one query per sequence against a long KV cache, kiln split-KV against the non-split kernel. */
static int bench_decode(bench *b, const attn_bufs *ab) {
    kiln_rt *rt = b->rt;
    double ms;
    /* decoding: one query per sequence against a long KV cache; the work is reading K and V once
     * (GB/s of K + V over the copy bandwidth): kiln split-KV (automatic splits) vs the non-split kernel */
    {
        int hd = KIT_DECODE_D, hqn = KIT_DECODE_HEADS_Q, hkv = KIT_DECODE_HEADS_KV;
        size_t nb = sizeof kit_decode_sweep_batch / sizeof(int), ns = sizeof kit_decode_sweep_seq_k / sizeof(int);
        size_t max_tokens = 0, max_batch = 0;
        for (size_t bi = 0; bi < nb; bi++)
            for (size_t si = 0; si < ns; si++) {
                size_t tok = (size_t)kit_decode_sweep_batch[bi] * (size_t)(b->quick ? 4096 : kit_decode_sweep_seq_k[si]);
                if (tok > max_tokens) max_tokens = tok;
                if ((size_t)kit_decode_sweep_batch[bi] > max_batch) max_batch = (size_t)kit_decode_sweep_batch[bi];
            }
        size_t kv_elems = max_tokens * (size_t)hkv * (size_t)hd, q_elems = max_batch * (size_t)hqn * (size_t)hd;
        kiln_devptr dk, dvv, dqq, doo, dl, dws = 0;
        if (kiln_rt_alloc(rt, kv_elems * 2, &dk, &b->err) || kiln_rt_alloc(rt, kv_elems * 2, &dvv, &b->err) ||
            kiln_rt_alloc(rt, q_elems * 2, &dqq, &b->err) || kiln_rt_alloc(rt, q_elems * 2, &doo, &b->err) ||
            kiln_rt_alloc(rt, max_batch * (size_t)hqn * 4, &dl, &b->err))
            return die("alloc", &b->err);
        fill_random(ab->hq, ab->elems, KILN_BF16, 21);
        for (size_t off = 0; off < kv_elems; off += ab->elems) {
            size_t n = kv_elems - off < ab->elems ? kv_elems - off : ab->elems;
            if (kiln_rt_upload(rt, dk + off * 2, ab->hq, n * 2, &b->err) || kiln_rt_upload(rt, dvv + off * 2, ab->hq, n * 2, &b->err))
                return die("upload", &b->err);
        }
        if (kiln_rt_upload(rt, dqq, ab->hq, q_elems * 2, &b->err)) return die("upload", &b->err);
        size_t ws_cap = 0;
        printf("  %-28s %7s %8s %9s %9s %7s %7s\n", "decoding bf16 d128 32:8 heads", "seq_k", "batch", "ms", "GB/s",
               "of copy", "splits");
        for (size_t bi = 0; bi < nb; bi++)
            for (size_t si = 0; si < ns; si++) {
                int batch = kit_decode_sweep_batch[bi], seq_k = kit_decode_sweep_seq_k[si];
                if (b->quick && seq_k > 4096) continue;
                helper_ctx dc = {.rt = rt, .h = H_SPLITKV, .a = {.o = doo, .lse = dl, .q = dqq, .k = dk, .v = dvv, .dtype = KILN_BF16,
                                                 .out_dtype = KILN_BF16, .head_dim = hd, .batch = batch, .heads_q = hqn,
                                                 .heads_kv = hkv, .seq_q = 1, .seq_k = seq_k}};
                int splits = 1;
                size_t need = 0;
                if (kiln_attention_forward_workspace(rt, &dc.a, 0, &splits, &need, &b->err) != KILN_OK) return die("workspace", &b->err);
                if (need > ws_cap) {
                    if (dws) kiln_rt_free(rt, dws, NULL);
                    if (kiln_rt_alloc(rt, need, &dws, &b->err)) return die("alloc", &b->err);
                    ws_cap = need;
                }
                dc.ws = dws, dc.ws_bytes = ws_cap;
                double bytes = 2.0 * batch * (double)seq_k * hkv * hd * 2;
                b->t.flush = bytes < b->t.flush_bytes ? b->flushbuf : 0;
                for (int plain = 0; plain < 2; plain++) {
                    helper_ctx pc = {.rt = rt, .h = H_ATTENTION, .a = dc.a};
                    ms = time_median(&b->t, helper_launch, plain ? &pc : &dc, b->reps, &b->used);
                    if (ms < 0) continue;
                    double gbs = bytes / (ms * 1e-3) / 1e9;
                    printf("  %-28s %7d %8d %9.4f %9.0f %6.1f%% %7d\n", plain ? "kiln non-split" : "kiln split-KV", seq_k, batch,
                           ms, gbs, 100 * gbs / b->copy_gbs, plain ? 1 : splits);
                    csv_row("attention_decode", plain ? "kiln" : "kiln-splitkv", "bf16", 0, hd, seq_k, 0, batch, hqn, bytes, "GB",
                            ms, b->used);
                }
                if (batch >= KIT_DECODE_PAGED_MIN_BATCH && bench_decode_paged(b, &dc, bytes, ab->hq, ab->elems) != 0) return 1;
            }
        if (dws) kiln_rt_free(rt, dws, NULL);
        kiln_rt_free(rt, dk, NULL), kiln_rt_free(rt, dvv, NULL), kiln_rt_free(rt, dqq, NULL), kiln_rt_free(rt, doo, NULL);
        kiln_rt_free(rt, dl, NULL);
    }
    return 0;
}

/* Varlen against the dense kernel on the same tokens (issue 25: within 5 %): the forward sweep's q, k, v read as
 * `batch` packed sequences of seq tokens (cu_seqlens i * seq: the dense [batch, seq, heads, d] is the packed
 * [total, heads, d]), kiln_attention_forward_varlen timed beside kiln_attention_forward, both on the data the
 * forward sweep uploaded last (bf16), at kit_varlen_sweep_d x causal x kit_varlen_sweep_seq. */
static int bench_varlen(bench *b, const attn_bufs *ab) {
    kiln_rt *rt = b->rt;
    int maxb = (b->quick ? 1024 : KIT_ATTN_SWEEP_TOKENS) / kit_varlen_sweep_seq[0] + 1;
    int32_t *cu = malloc((size_t)(maxb + 1) * sizeof *cu);
    kiln_devptr dcu;
    if (!cu) return fprintf(stderr, "kiln-gpucheck: out of memory\n"), 2;
    if (kiln_rt_alloc(rt, (size_t)(maxb + 1) * sizeof *cu, &dcu, &b->err) != KILN_OK) return free(cu), die("alloc", &b->err);
    printf("  %-28s %7s %8s %9s %9s %9s %7s\n", "varlen vs dense (same tokens)", "seq", "batch", "ms varlen", "ms dense",
           "TFLOP/s", "ratio");
    for (size_t di = 0; di < sizeof kit_varlen_sweep_d / sizeof *kit_varlen_sweep_d; di++)
        for (int causal = 0; causal < 2; causal++)
            for (size_t si = 0; si < sizeof kit_varlen_sweep_seq / sizeof *kit_varlen_sweep_seq; si++) {
                int hd = kit_varlen_sweep_d[di], seq = kit_varlen_sweep_seq[si], batch, heads;
                if (attn_shape(b, hd, seq, &batch, &heads) || batch > maxb) continue;
                for (int i = 0; i <= batch; i++) cu[i] = i * seq;
                if (kiln_rt_upload(rt, dcu, cu, (size_t)(batch + 1) * sizeof *cu, &b->err) != KILN_OK)
                    return free(cu), die("upload", &b->err);
                helper_ctx dc = {.rt = rt, .h = H_ATTENTION, .a = {.o = ab->o, .lse = ab->lse, .q = ab->q, .k = ab->k, .v = ab->v,
                                                  .dtype = KILN_BF16, .out_dtype = KILN_BF16, .head_dim = hd, .causal = causal,
                                                  .batch = batch, .heads_q = heads, .heads_kv = heads, .seq_q = seq, .seq_k = seq}};
                helper_ctx vc = dc;
                vc.h = H_VARLEN;
                vc.vl = (kiln_attention_varlen){.cu_seqlens_q = dcu, .cu_seqlens_k = dcu, .total_q = batch * seq,
                                                .total_k = batch * seq};
                double flops = 4.0 * batch * heads * (double)seq * seq * hd * (causal ? 0.5 : 1);
                double bytes = 4.0 * (double)batch * seq * heads * hd * 2;
                b->t.flush = bytes < b->t.flush_bytes ? b->flushbuf : 0;
                double ms_d = time_median(&b->t, helper_launch, &dc, b->reps, &b->used);
                int used_d = b->used;
                double ms_v = time_median(&b->t, helper_launch, &vc, b->reps, &b->used);
                if (ms_d < 0 || ms_v < 0) continue;
                char label[64];
                snprintf(label, sizeof label, "bf16 d%d%s", hd, causal ? " causal" : "");
                printf("  %-28s %7d %8d %9.3f %9.3f %9.1f %6.3fx\n", label, seq, batch, ms_v, ms_d,
                       flops / (ms_v * 1e-3) / 1e12, ms_d > 0 ? ms_v / ms_d : 0);
                csv_row("attention_varlen", "kiln-varlen", "bf16", 0, hd, seq, causal, batch, heads, flops, "TFLOP", ms_v, b->used);
                csv_row("attention_varlen", "kiln-dense", "bf16", 0, hd, seq, causal, batch, heads, flops, "TFLOP", ms_d, used_d);
            }
    free(cu);
    kiln_rt_free(rt, dcu, NULL);
    return 0;
}

/* The rotary family against copy bandwidth (issue 25: >= 90 %): bf16 x [batch, KIT_ROTARY_SEQ, heads, KIT_ROTARY_D]
 * (the forward sweep's q, its tokens and width) rotated out of place into its o by cos/sin bf16 [seq, d / 2],
 * GPT-NeoX and GPT-J (kit_rotary_sweep_modes), through kiln_launch_spec; bytes = x read + out written + the
 * tables read once. */
static int bench_rotary(bench *b, const attn_bufs *ab) {
    kiln_rt *rt = b->rt;
    int d = KIT_ROTARY_D, seq = b->quick ? 256 : KIT_ROTARY_SEQ, heads = KIT_ATTN_SWEEP_WIDTH / d;
    int batch = (b->quick ? 1024 : KIT_ATTN_SWEEP_TOKENS) / seq;
    size_t table = (size_t)seq * (size_t)(d / 2);
    kiln_devptr cs, sn;
    if (kiln_rt_alloc(rt, table * 2, &cs, &b->err) || kiln_rt_alloc(rt, table * 2, &sn, &b->err)) return die("alloc", &b->err);
    fill_random(ab->hq, 2 * table, KILN_BF16, 31);
    if (kiln_rt_upload(rt, cs, ab->hq, table * 2, &b->err) || kiln_rt_upload(rt, sn, (char *)ab->hq + table * 2, table * 2, &b->err))
        return die("upload", &b->err);
    printf("  %-28s %7s %8s %9s %9s %7s\n", "rotary bf16 d128 out of place", "seq", "batch", "ms", "GB/s", "of copy");
    for (size_t mi = 0; mi < sizeof kit_rotary_sweep_modes / sizeof *kit_rotary_sweep_modes; mi++) {
        char spec[KILN_SPEC_MAX];
        snprintf(spec, sizeof spec, KIT_ROTARY_SPEC, d, d, kit_rotary_sweep_modes[mi]);
        kiln_launch_tensor t[] = {{.name = "out", .ptr = ab->o}, {.name = "x", .ptr = ab->q}, {.name = "cos", .ptr = cs},
                                  {.name = "sin", .ptr = sn}};
        kiln_launch_scalar s[] = {{"batch", batch}, {"seq", seq}, {"heads", heads}, {"seqlen_ro", seq}};
        helper_ctx rc = {.rt = rt, .h = H_SPEC, .spec = spec,
                         .la = {.tensors = t, .ntensors = 4, .scalars = s, .nscalars = 4}};
        double bytes = 2.0 * batch * (double)seq * heads * d * 2 + 2.0 * (double)table * 2;
        b->t.flush = bytes < b->t.flush_bytes ? b->flushbuf : 0;
        double ms = time_median(&b->t, helper_launch, &rc, b->reps, &b->used);
        if (ms < 0) continue;
        double gbs = bytes / (ms * 1e-3) / 1e9;
        char label[32];
        snprintf(label, sizeof label, "%s", strcmp(kit_rotary_sweep_modes[mi], "true") ? "neox" : "interleaved (GPT-J)");
        printf("  %-28s %7d %8d %9.4f %9.0f %6.1f%%\n", label, seq, batch, ms, gbs, 100 * gbs / b->copy_gbs);
        csv_row("rotary", strcmp(kit_rotary_sweep_modes[mi], "true") ? "kiln-neox" : "kiln-interleaved", "bf16", 0, d, seq, 0,
                batch, heads, bytes, "GB", ms, b->used);
    }
    kiln_rt_free(rt, cs, NULL), kiln_rt_free(rt, sn, NULL);
    return 0;
}

/* Attention backward: the whole sequence on the forward's own O and lse. */
static int bench_attention_bwd(bench *b, const attn_bufs *ab) {
    kiln_rt *rt = b->rt;
    /* attention backward (the whole sequence: prep, dkdv, convert; deterministic: prep, dkdv, dq) on
     * the forward's own O and lse. FLOPs by FlashAttention-2's convention: 2.5x the forward's
     * (5 tile products of the 2 the forward does), counted the same for the deterministic sequence,
     * which does 7: its figure is the useful rate. */
    bwd_bufs g;
    if (bwd_bufs_alloc(b, ab, &g) || upload_random(b, ab, &g.dout, 1, KILN_BF16, 17)) return 2;
    printf("  %-28s %7s %8s %9s %9s %7s   (FLOPs = 2.5x forward, FA2 convention)\n", "attention backward", "seq",
           "batch", "ms", "TFLOP/s", "of mma");
    for (size_t di = 0; di < sizeof kit_attn_sweep_d / sizeof *kit_attn_sweep_d; di++)
        for (int causal = 0; causal < 2; causal++)
            for (int det = 0; det < 2; det++)
                for (size_t si = 0; si < sizeof kit_attn_bwd_sweep_seq / sizeof *kit_attn_bwd_sweep_seq; si++) {
                    int hd = kit_attn_sweep_d[di], seq = kit_attn_bwd_sweep_seq[si];
                    int batch, heads;
                    if (attn_shape(b, hd, seq, &batch, &heads)) continue;
                    helper_ctx fc = {.rt = rt, .h = H_ATTENTION, .a = {.o = ab->o, .lse = ab->lse, .q = ab->q, .k = ab->k, .v = ab->v, .dtype = KILN_BF16,
                                                   .out_dtype = KILN_BF16, .head_dim = hd, .causal = causal, .batch = batch,
                                                   .heads_q = heads, .heads_kv = heads, .seq_q = seq, .seq_k = seq}};
                    if (helper_launch(&fc)) continue;
                    helper_ctx bc = {.rt = rt, .h = H_ATTENTION_BWD, .ab = {.dq = g.dq, .dk = g.dk, .dv = g.dv, .q = ab->q, .k = ab->k, .v = ab->v, .o = ab->o,
                                                       .dout = g.dout, .lse = ab->lse, .dtype = KILN_BF16,
                                                       .out_dtype = KILN_BF16, .grad_dtype = KILN_BF16, .head_dim = hd,
                                                       .causal = causal, .deterministic = det, .batch = batch,
                                                       .heads_q = heads, .heads_kv = heads, .seq_q = seq, .seq_k = seq}};
                    int w = bwd_workspace(b, &g, &bc.ab);
                    if (w) return w > 0 ? w : die("workspace", &b->err);
                    double flops = 2.5 * 4.0 * batch * heads * (double)seq * seq * hd * (causal ? 0.5 : 1);
                    double bytes = 9.0 * (double)batch * seq * heads * hd * 2;
                    char label[64];
                    snprintf(label, sizeof label, "bf16 d%d%s%s", hd, causal ? " causal" : "", det ? " determ." : "");
                    attn_sweep_row(b, &bc, flops, bytes, label, det ? KIT_ATTN_BWD_DET_CSV : KIT_ATTN_BWD_CSV, "kiln", "bf16", hd, seq,
                                   causal, batch, heads);
                }
    bwd_bufs_free(b, &g);
    return 0;
}

int kit_bench(const char *bundle_path, const char *csv_path, int quick, const char *arch) {
    bench b = {0};
    row_bufs rb;
    attn_bufs ab;
    int rc = bench_open(&b, bundle_path, csv_path, quick);
    if (!rc) rc = bench_copy(&b);
    if (!rc) rc = bench_mma_peak(&b);
    if (!rc) rc = bench_layernorm_fwd(&b, &rb);
#ifdef KIT_HAVE_NORM
    if (!rc) rc = bench_norms(&b, &rb);
#endif
    if (rc) return rc;
    free(rb.host);
    kiln_rt_free(b.rt, rb.x, NULL), kiln_rt_free(b.rt, rb.y, NULL);
    if (!rc) rc = bench_attention_fwd(&b, &ab);
    if (!rc) rc = bench_decode(&b, &ab);
    if (!rc) rc = bench_varlen(&b, &ab);
    if (!rc) rc = bench_rotary(&b, &ab);
    if (!rc) rc = bench_attention_bwd(&b, &ab);
    if (!rc && arch && b.dev->sm != 90)
        printf("  sm_90a wgmma attention rows skipped: they run on a 9.0 device only (this one is sm_%d)\n", b.dev->sm);
    else if (!rc && arch) {
        if (kiln_rt_add_bundle_file(b.rt, arch, &b.err) != KILN_OK) return die("arch bundle", &b.err);
        rc = bench_attention_wgmma(&b, &ab);
        if (!rc) rc = bench_attention_bwd_wgmma(&b, &ab);
    }
    if (rc) return rc;
    free(ab.hq);
    if (g_csv) fclose(g_csv);
    kiln_bundle_close(b.bundle);
    kiln_rt_destroy(b.rt);
    return 0;
}
