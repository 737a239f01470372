/* tests/attention_bwd_dims_emu_test.c - the attention backward at head dims between the tile widths
 * (8, 24, 40, 80, 136, 200, 248: padded to the next of 32/64/96/128/256) on every path (mma sm_80/90,
 * m16n8k8 sm_75, SIMT), atomic and deterministic, plain and with every key (window, softcap, alibi,
 * top-left causal, GQA; dropout and varlen: tests/attention_bwd_cli_test.sh), on the CPU emulator
 * against the float64 gradients. Every tensor's rows are followed by a gap of 8 elements: random in
 * the inputs (a kernel that used them would be off), a sentinel in the gradients that must come back
 * untouched (columns past head_dim are not stored); the declared buffers fault any access past the
 * last row's head_dim (dq_acc's rows are head_dim wide). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "attention.ref.h"
#include "kiln/kiln.h"

typedef struct path {
    const char *name;
    int sm;
    const char *dtype, *path;
    kiln_dtype p_dtype; /* what P and dS are rounded to before their products (f32 on SIMT) */
    int wide; /* 1: head dims past 128 alone, deterministic (bf16's dq on sm_75's f16-scaled column split) */
} path;

static const path paths[] = {
    {"mma f16 sm_80", 80, "f16", "auto", KILN_F16, 0},   {"mma bf16 sm_90", 90, "bf16", "auto", KILN_BF16, 0},
    {"mma f16 sm_75", 75, "f16", "auto", KILN_F16, 0},   {"simt f32 sm_80", 80, "f32", "auto", KILN_F32, 0},
    {"simt bf16 sm_75 (forced)", 75, "bf16", "simt", KILN_F32, 0}, {"simt f16 sm_80 (forced)", 80, "f16", "simt", KILN_F32, 0},
    /* (wave 25: the deterministic dq at 136-256 on the f16-scaled m16n8k8, two warps a row group, each half of dQ's
     * columns, lib/attn_bwd_mma.lua M.csplit; its dkdv on SIMT there, which needs no prep rows) */
    {"f16-scaled bf16 dq sm_75", 75, "bf16", "auto", KILN_BF16, 1},
    /* (and the deterministic dkdv there under path=mma, two warps a key group, each half of dK's and dV's columns: its
     * Q and dO rows from prep 256 wide, lib/attn_bwd_mma.lua bf16_dkdv_split) */
    {"f16-scaled bf16 dkdv+dq sm_75 (path=mma)", 75, "bf16", "mma", KILN_BF16, 1},
};

typedef struct dcase {
    const char *name;
    int causal, window, left, right;
    float softcap;
    int alibi;
    int heads_q, heads_kv, seq_q, seq_k;
} dcase;

static const dcase cases[] = {
    {"causal GQA", 1, 0, 0, 0, 0, 0, 4, 2, 37, 45},
    {"window + causal + softcap + alibi + GQA", 1, 1, 12, 0, 10, 1, 4, 2, 45, 40},
    {"top_left causal, seq_q > seq_k", 2, 0, 0, 0, 0, 0, 2, 1, 41, 23},
    {"window both sides, no causal, MQA", 0, 1, 5, 9, 0, 0, 3, 1, 33, 50},
};
#define NCASES (sizeof cases / sizeof cases[0])

#define GAP 8

static uint64_t seed = 0xd1575eed;

static const char *causal_name(int c) { return c == 2 ? "top_left" : c ? "true" : "false"; }

/* [batch, seq, heads, head_dim + GAP] strides for the four tensors. */
static void gap_strides(kiln_attn_problem *p) {
    long long row = p->head_dim + GAP;
    long long *s[4] = {p->stride_q, p->stride_k, p->stride_v, p->stride_o};
    int heads[4] = {p->heads_q, p->heads_kv, p->heads_kv, p->heads_q};
    int seq[4] = {p->seq_q, p->seq_k, p->seq_k, p->seq_q};
    for (int t = 0; t < 4; t++) {
        s[t][2] = row;
        s[t][1] = heads[t] * row;
        s[t][0] = (long long)seq[t] * heads[t] * row;
    }
}

static void run_case(kiln_emu *emu, kiln_gen *gen, const path *pa, const dcase *dc, int d, int det, double *worst) {
    kiln_attn_problem p = {0};
    kiln_dtype_parse(pa->dtype, &p.dtype);
    p.out = p.dtype;
    p.head_dim = d;
    p.causal = dc->causal;
    p.batch = 2, p.heads_q = dc->heads_q, p.heads_kv = dc->heads_kv, p.seq_q = dc->seq_q, p.seq_k = dc->seq_k;
    p.window = dc->window, p.window_left = dc->left, p.window_right = dc->right;
    p.has_softcap = dc->softcap > 0, p.softcap = dc->softcap;
    float *slopes = NULL;
    if (dc->alibi) {
        slopes = malloc(sizeof *slopes * (size_t)p.heads_q);
        for (int h = 0; h < p.heads_q; h++) slopes[h] = (float)exp2(-8.0 * (h + 1) / p.heads_q);
        p.alibi = 1, p.alibi_slopes = slopes, p.alibi_stride = 0;
    }
    gap_strides(&p);
    char keys[128];
    snprintf(keys, sizeof keys, " causal=%s%s%s%s%s%s", causal_name(dc->causal), p.window ? " window=true" : "",
             p.has_softcap ? " softcap=true" : "", p.alibi ? " alibi=true" : "",
             strcmp(pa->path, "auto") ? " path=" : "", strcmp(pa->path, "auto") ? pa->path : "");
    static const char *seq[2][3] = {{"prep", "dkdv", "convert"}, {"prep", "dkdv", "dq"}};
    kiln_emu_kernel *ks[3] = {NULL, NULL, NULL};
    char spec[3][256];
    kiln_error err = {0};
    kiln_status st = KILN_OK;
    for (int s = 0; s < 3 && st == KILN_OK; s++) {
        int mid = s == 1 || (det && s == 2); /* dkdv and dq take the keys; prep and convert none */
        snprintf(spec[s], sizeof spec[s], "attention_bwd kernel=%s dtype=%s head_dim=%d%s%s", seq[det][s], pa->dtype, d,
                 mid ? keys : "", det && s == 1 ? " deterministic=true" : "");
        st = kiln_emu_load(emu, gen, spec[s], pa->sm, &ks[s], &err);
        CHECK(st == KILN_OK, "load %s: %s", spec[s], err.msg);
    }
    kiln_dtype grad = p.dtype;
    size_t es = kiln_dtype_size(grad);
    size_t nq = kiln_attn_elems(&p, 'q'), nk = kiln_attn_elems(&p, 'k'), nv = kiln_attn_elems(&p, 'v');
    size_t no = kiln_attn_elems(&p, 'o'), nl = (size_t)p.batch * (size_t)p.heads_q * (size_t)p.seq_q;
    void *q = kiln_attn_random(p.dtype, nq, 1, &seed), *k = kiln_attn_random(p.dtype, nk, 1, &seed);
    void *v = kiln_attn_random(p.dtype, nv, 1, &seed), *dout = kiln_attn_random(p.out, no, 1, &seed);
    void *o = malloc(no * kiln_dtype_size(p.out));
    double *ro = malloc(no * sizeof *ro), *rl = malloc(nl * sizeof *rl);
    float *lse = malloc(nl * sizeof *lse), *delta = malloc(nl * sizeof *delta);
    float *dq_acc = det ? NULL : malloc(nl * (size_t)d * sizeof *dq_acc);
    size_t n[3] = {nq, nk, nv};
    void *g[3];
    double *ref[3], *tol[3];
    for (int t = 0; t < 3; t++) {
        g[t] = malloc(n[t] * es);
        ref[t] = malloc(n[t] * sizeof(double));
        tol[t] = malloc(n[t] * sizeof(double));
        memset(g[t], 0xa5, n[t] * es); /* the sentinel: the gaps must keep it */
    }
    if (st == KILN_OK) {
        st = kiln_attn_reference(&p, q, k, v, ro, rl, &err);
        CHECK(st == KILN_OK, "forward reference: %s", err.msg);
    }
    for (size_t i = 0; i < no; i++) kiln_emu_value_set(p.out, o, i, ro[i]);
    for (size_t i = 0; i < nl; i++) lse[i] = (float)rl[i];
    memset(delta, 0xff, nl * sizeof *delta);
    if (dq_acc) memset(dq_acc, 0xff, nl * (size_t)d * sizeof *dq_acc);
    /* (Q and dO as prep scales them for the f16-scaled dkdv, NaN until it writes them; the other paths ignore it) */
    void *scaled = malloc(kiln_attn_bwd_scaled_bytes(&p));
    memset(scaled, 0xff, kiln_attn_bwd_scaled_bytes(&p));
    kiln_attn_bwd_buffers bf = {q, k, v, o, dout, lse, g[0], g[1], g[2], delta, dq_acc, scaled};
    for (int s = 0; s < 3 && st == KILN_OK; s++) {
        st = kiln_attn_bwd_run(ks[s], &p, &bf, s == 1, &err);
        CHECK(st == KILN_OK, "emulator, %s: %s", spec[s], err.msg);
    }
    if (st == KILN_OK) {
        st = kiln_attn_bwd_reference(&p, pa->p_dtype, q, k, v, dout, ref[0], ref[1], ref[2], tol[0], tol[1], tol[2], &err);
        CHECK(st == KILN_OK, "reference: %s", err.msg);
    }
    /* each row's head_dim values against the reference; its gap untouched */
    for (int t = 0; t < 3 && st == KILN_OK; t++) {
        long bad = 0, touched = 0;
        char first[256] = "";
        double max_abs = 0;
        long long row = d + GAP;
        for (size_t at = 0; at < n[t]; at += (size_t)row) {
            char f[256] = "";
            long b = kiln_attn_bwd_compare(grad, (char *)g[t] + at * es, ref[t] + at, tol[t] + at, (size_t)d, &worst[t],
                                           &max_abs, f, sizeof f);
            if (b && !bad) snprintf(first, sizeof first, "row %zu: %s", at / (size_t)row, f);
            bad += b;
            if (at + (size_t)d < n[t])
                for (size_t i = 0; i < GAP * es; i++) touched += ((unsigned char *)g[t])[(at + (size_t)d) * es + i] != 0xa5;
        }
        CHECK(bad == 0, "%s: %ld bad d%c values; first: %s", spec[1], bad, "qkv"[t], first);
        CHECK(touched == 0, "%s: %ld bytes of d%c past head_dim were written", spec[1], touched, "qkv"[t]);
    }
    for (int s = 0; s < 3; s++)
        if (ks[s]) kiln_emu_kernel_free(ks[s]);
    free(q), free(k), free(v), free(dout), free(o), free(ro), free(rl), free(lse), free(delta), free(dq_acc), free(slopes), free(scaled);
    for (int t = 0; t < 3; t++) free(g[t]), free(ref[t]), free(tol[t]);
}

int main(void) {
    kiln_error err = {0};
    kiln_gen *gen;
    kiln_emu *emu;
    if (kiln_gen_create(&gen, NULL, &err) != KILN_OK || kiln_emu_create(&emu, &err) != KILN_OK) {
        printf("setup failed: %s\nattention bwd dims emu: 0 passed, 1 failed\n", err.msg);
        return 1;
    }
    const char *full = getenv("KILN_TEST_FULL");
    int all = full && *full && strcmp(full, "0");
    static const int dims[] = {8, 40, 80, 200, 24, 136, 248};
    int ndims = all ? 7 : 4;
    int rot = 0;
    for (size_t pi = 0; pi < sizeof paths / sizeof paths[0]; pi++) {
        double worst[3] = {0, 0, 0};
        for (int di = 0; di < ndims; di++) {
            /* every case at every dim under KILN_TEST_FULL; else two cases a dim, rotating */
            for (size_t c = 0; c < (all ? NCASES : 2); c++) {
                size_t ci = all ? c : (size_t)(rot++) % NCASES;
                if (paths[pi].wide) ci = c; /* (causal both: the dq on the split; the rest under KILN_TEST_FULL) */
                int det = paths[pi].wide || (int)((pi + (size_t)di + ci) & 1);
                if (paths[pi].wide && dims[di] <= 128) continue;
                if (!check_san_keeps(c + (size_t)di, 4)) continue; /* (the sanitizer build: one case in four, rotating with the dim) */
                char name[400];
                snprintf(name, sizeof name, "%s: d=%d %s%s", paths[pi].name, dims[di], cases[ci].name,
                         det ? " deterministic" : "");
                TEST_BEGIN(name);
                run_case(emu, gen, &paths[pi], &cases[ci], dims[di], det, worst);
                TEST_END();
            }
        }
        printf("%-24s worst error/tolerance: dq %.3f dk %.3f dv %.3f\n", paths[pi].name, worst[0], worst[1], worst[2]);
        fflush(stdout);
    }
    kiln_emu_destroy(emu);
    kiln_gen_destroy(gen);
    return check_summary("attention bwd dims emu");
}
