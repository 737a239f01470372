/* tools/cmd_run.c - `kiln run`: one kernel on the CPU emulator, checked against the float64 reference. */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "kiln/emu.h"
#include "kiln/emu_attention.h"
#include "kiln/emu_attention_bwd.h"
#include "kiln/emu_norm.h"
#include "kiln/emu_profile.h"
#include "kiln/kiln.h"

static void run_usage(FILE *to) {
    fprintf(to,
            "usage: kiln run FAMILY key=value... --sm N --rows R [--hidden H] [--seed S]\n"
            "                [--input KIND] [--eps E] [--twice] [--profile]\n"
            "                [--seq-k N] [--batch B] [--heads H[:K]] [--splits N]   (attention)\n\n"
            "Generates the kernel for sm_N, runs the very module that becomes PTX on the CPU\n"
            "emulator with generated inputs, and compares every output with a float64 reference.\n"
            "Prints the largest error per output and how close it came to its tolerance (derived\n"
            "from the dtypes and the shape; see emu/emu_layernorm.c).\n\n"
            "required:\n"
            "  --sm N        target SM ('kiln list' shows the targets)\n"
            "  --rows R      rows (1..1048576); for attention, seq_q\n"
            "optional:\n"
            "  --hidden H    row length, needed when the spec says hidden=launch\n"
            "  --seed S      input seed (default 1)\n"
            "  --input KIND  random (default), large-mean, constant, special (NaN/Inf), mixed\n"
            "  --eps E       LayerNorm epsilon (default 1e-5)\n"
            "  --twice       run every block twice, threads in opposite orders; a difference is a race\n"
            "  --profile     also print the emulator's profile: shared-memory bank conflicts, warp\n"
            "                instruction mix (whole kernel and hot loop), global bytes (docs/profile.md)\n"
            "attention: --rows is seq_q; also\n"
            "  --seq-k N     keys (default: seq_q)\n"
            "  --batch B     batch (default 1)\n"
            "  --heads H[:K] query heads, key/value heads, each 1..65535 (default 2:2; K must divide H)\n"
            "  --splits N    splitkv=true (split-KV decoding): key splits (1..1024, default 4); the\n"
            "                split kernel fills an f32 workspace, then its attention_combine runs\n"
            "attention_bwd: the same options; runs the whole backward sequence (prep, dkdv, convert;\n"
            "  deterministic=true: prep, dkdv, dq) whatever the spec's kernel= says, from the float64\n"
            "  forward's O and lse, and checks dq, dk, dv against the float64 gradients\n\n"
            "exit status: 0 every output within tolerance, 1 a mismatch or an emulator fault,\n"
            "2 bad input.\n\n"
            "example: kiln run layernorm x=bf16 w=f32 y=bf16 hidden=4096 --sm 75 --rows 64\n"
            "         kiln run layernorm_bwd x=bf16 w=f32 hidden=4096 --sm 80 --rows 64   (then norm_reduce)\n"
            "         kiln run attention dtype=bf16 head_dim=64 causal=true --sm 75 --rows 129 --seq-k 200 --heads 4:1\n"
            "         kiln run attention dtype=bf16 head_dim=128 splitkv=true --sm 80 --rows 1 --seq-k 4096 --heads 32:8 --splits 16\n"
            "         kiln run attention_bwd dtype=f16 head_dim=128 causal=true --sm 80 --rows 100 --heads 4:2\n");
}

typedef struct run_opts {
    int sm, rows, hidden, twice, profile;
    int seq_k, batch, heads_q, heads_kv, splits; /* attention */
    unsigned long long seed;
    float eps;
    kiln_ln_input input;
} run_opts;

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

/* Status of a failed library call: faults found by the emulator are findings (1), the
 * rest is bad input (2). */
static int report_error(const kiln_error *err) {
    fprintf(stderr, "kiln: %s: %s\n", err->status == KILN_EEMU ? "emulator fault" : "error", err->msg);
    return err->status == KILN_EEMU ? CLI_FINDINGS : CLI_USAGE;
}

static int print_report(const kiln_ln_data *d, const kiln_ln_report *r) {
    long bad = 0;
    for (int o = 0; o < 3; o++) {
        /* truncated, so that a pass never shows as 1.000 */
        printf("  %-4s  max |err| %.3e  max rel %.3e  worst %.3f of tolerance  %s\n", kiln_ln_output_name(o),
               r->max_abs[o], r->max_rel[o], floor(r->worst[o] * 1000) / 1000, r->bad[o] ? "FAIL" : "ok");
        bad += r->bad[o];
    }
    for (int o = 0; o < 3; o++)
        if (r->bad[o]) printf("  %s: %ld values out of tolerance; first: %s\n", kiln_ln_output_name(o), r->bad[o], r->first[o]);
    printf("%s: %s\n", bad ? "FAIL" : "PASS",
           bad ? "outputs differ from the float64 reference" : "every output within tolerance");
    (void)d;
    return bad ? CLI_FINDINGS : CLI_OK;
}

/* The generator and emulator of this run (a backward's second kernel is loaded from them). */
static kiln_gen *run_gen;
static kiln_emu *run_emu;

/* rmsnorm, layernorm_bwd, rmsnorm_bwd, the residual and offset=1 forms (emu/emu_norm.c's reference and
 * error model); a backward also runs its norm_reduce kernel on the workspace. */
static int run_norm(kiln_emu_kernel *k, const run_opts *o) {
    const kiln_kernel_meta *m = kiln_emu_kernel_meta(k);
    kiln_error err = {0};
    kiln_norm_spec spec;
    if (kiln_norm_spec_parse(m->spec, &spec, &err) != KILN_OK) return report_error(&err);
    int hidden = o->hidden ? o->hidden : spec.hidden;
    if (!hidden) return cli_error("the spec has hidden=launch: give the row length with --hidden H");
    if (spec.hidden && o->hidden && o->hidden != spec.hidden)
        return cli_error("--hidden %d contradicts the spec's hidden=%d", o->hidden, spec.hidden);
    if ((long long)o->rows * hidden > (1LL << 26))
        return cli_error("%d rows x %d is too large for the emulator (at most 2^26 elements)", o->rows, hidden);
    kiln_emu_kernel *red = NULL;
    if (m->then_spec[0] && kiln_emu_load(run_emu, run_gen, m->then_spec, o->sm, &red, &err) != KILN_OK)
        return report_error(&err);
    kiln_norm_data *d;
    if (kiln_norm_data_create(&d, &spec, o->eps, o->rows, hidden, o->input, 1.0, o->seed, &err) != KILN_OK)
        return report_error(&err);
    unsigned tile = m->grid_tile[0] ? m->grid_tile[0] : 1, blocks = ((unsigned)o->rows + tile - 1) / tile;
    printf("%s  %s  %d rows x %d  %s inputs  seed %llu%s\n", m->spec, kiln_sm_name(o->sm, (char[16]){0}), o->rows, hidden,
           kiln_ln_input_name(o->input), o->seed, o->twice ? "  (every block twice)" : "");
    double t0 = now_ms();
    int rc;
    if (kiln_norm_run(k, red, d, 0, o->twice, &err) != KILN_OK) {
        rc = report_error(&err);
    } else {
        printf("  %s: %u blocks of %u threads%s%s, emulated in %.1f ms\n", m->entry, blocks,
               m->block[0] * m->block[1] * m->block[2], red ? ", then " : "", red ? m->then_spec : "", now_ms() - t0);
        kiln_norm_report r;
        long bad = kiln_norm_check(d, (int)m->threads_per_row, blocks * (m->ws_rows_per_block ? m->ws_rows_per_block : 1), &r);
        for (int i = 0; i < KILN_NORM_OUTPUTS; i++) {
            const char *name = kiln_norm_output_name(&spec, i);
            if (!name) continue;
            printf("  %-7s  max |err| %.3e  max rel %.3e  worst %.3f of tolerance  %s\n", name, r.max_abs[i], r.max_rel[i],
                   floor(r.worst[i] * 1000) / 1000, r.bad[i] ? "FAIL" : "ok");
        }
        for (int i = 0; i < KILN_NORM_OUTPUTS; i++)
            if (r.bad[i]) printf("  %s: %ld values out of tolerance; first: %s\n", kiln_norm_output_name(&spec, i), r.bad[i], r.first[i]);
        printf("%s: %s\n", bad ? "FAIL" : "PASS", bad ? "outputs differ from the float64 reference" : "every output within tolerance");
        rc = bad ? CLI_FINDINGS : CLI_OK;
    }
    kiln_norm_data_free(d);
    return rc;
}

static int run_layernorm(kiln_emu_kernel *k, const run_opts *o) {
    const kiln_kernel_meta *m = kiln_emu_kernel_meta(k);
    /* the residual and zero-centered (offset=1) forms: emu_norm.c's reference */
    if (strstr(m->spec, " residual=") || strstr(m->spec, " offset=")) return run_norm(k, o);
    kiln_error err = {0};
    kiln_layernorm_spec spec;
    if (kiln_ln_spec_parse(m->spec, &spec, &err) != KILN_OK) return report_error(&err);
    int hidden = o->hidden ? o->hidden : spec.hidden;
    if (!hidden) return cli_error("the spec has hidden=launch: give the row length with --hidden H");
    if (spec.hidden && o->hidden && o->hidden != spec.hidden)
        return cli_error("--hidden %d contradicts the spec's hidden=%d", o->hidden, spec.hidden);
    if ((long long)o->rows * hidden > (1LL << 26))
        return cli_error("%d rows x %d is too large for the emulator (at most 2^26 elements)", o->rows, hidden);
    kiln_ln_data *d;
    if (kiln_ln_data_create(&d, &spec, o->eps, o->rows, hidden, o->input, o->seed, &err) != KILN_OK)
        return report_error(&err);
    unsigned tile = m->grid_tile[0] ? m->grid_tile[0] : 1;
    printf("%s  %s  %d rows x %d  %s inputs  seed %llu%s\n", m->spec, kiln_sm_name(o->sm, (char[16]){0}), o->rows, hidden,
           kiln_ln_input_name(o->input), o->seed, o->twice ? "  (every block twice)" : "");
    double t0 = now_ms();
    int rc;
    if (kiln_ln_run(k, d, o->twice, &err) != KILN_OK) {
        rc = report_error(&err);
    } else {
        printf("  %s: %u blocks of %u threads, emulated in %.1f ms\n", m->entry, (o->rows + tile - 1) / tile,
               m->block[0] * m->block[1] * m->block[2], now_ms() - t0);
        kiln_ln_report r;
        kiln_ln_check(d, (int)m->threads_per_row, &r);
        rc = print_report(d, &r);
    }
    kiln_ln_data_free(d);
    return rc;
}

/* Attention: random inputs in [-1, 1], o and lse checked with the error model of
 * emu/emu_ref_attention.c (P taken as rounded to the input dtype: the looser of the two paths). */
static int run_attention(kiln_emu_kernel *k, const run_opts *o) {
    const kiln_kernel_meta *m = kiln_emu_kernel_meta(k);
    kiln_error err = {0};
    kiln_attn_problem p = {0};
    if (kiln_attn_spec_parse(m->spec, &p, &err) != KILN_OK) return report_error(&err);
    if (o->splits && !m->then_spec[0])
        return cli_error("--splits applies to split-KV attention (add splitkv=true to the spec)");
    p.batch = o->batch ? o->batch : 1;
    p.heads_q = o->heads_q ? o->heads_q : 2;
    p.heads_kv = o->heads_kv ? o->heads_kv : p.heads_q;
    p.seq_q = o->rows;
    p.seq_k = o->seq_k ? o->seq_k : o->rows;
    if (kiln_attn_check_problem(&p, &err) != KILN_OK) return cli_error("%s", err.msg);
    if ((double)p.batch * p.heads_q * p.seq_q * p.seq_k * p.head_dim > 1e10)
        return cli_error("batch x heads x seq_q x seq_k x head_dim is too large for the emulator (at most 1e10)");
    kiln_attn_default_strides(&p);
    uint64_t seed = o->seed;
    size_t no = kiln_attn_elems(&p, 'o'), nl = (size_t)p.batch * (size_t)p.heads_q * (size_t)p.seq_q;
    void *q = kiln_attn_random(p.dtype, kiln_attn_elems(&p, 'q'), 1, &seed);
    void *kk = kiln_attn_random(p.dtype, kiln_attn_elems(&p, 'k'), 1, &seed);
    void *v = kiln_attn_random(p.dtype, kiln_attn_elems(&p, 'v'), 1, &seed);
    void *out = malloc(no * kiln_dtype_size(p.out));
    float *lse = malloc(nl * sizeof *lse);
    double *ro = malloc(no * sizeof *ro), *rl = malloc(nl * sizeof *rl);
    /* splitkv=true: the split kernel into a workspace, then the combine kernel its meta names */
    int split = m->then_spec[0] != 0, splits = o->splits ? o->splits : 4;
    kiln_emu_kernel *comb = NULL;
    float *ws = split ? malloc(kiln_attn_splitkv_workspace_floats(&p, splits) * sizeof *ws) : NULL;
    int rc = CLI_OK;
    printf("%s  %s  batch %d  heads %d:%d  seq_q %d  seq_k %d  seed %llu%s\n", m->spec, kiln_sm_name(o->sm, (char[16]){0}), p.batch, p.heads_q,
           p.heads_kv, p.seq_q, p.seq_k, o->seed, o->twice ? "  (every block twice)" : "");
    if (split) printf("  %d splits, then %s\n", splits, m->then_spec);
    double t0 = now_ms();
    if (!q || !kk || !v || !out || !lse || !ro || !rl || (split && !ws)) {
        rc = cli_error("out of memory");
    } else if ((split && kiln_emu_load(run_emu, run_gen, m->then_spec, o->sm, &comb, &err) != KILN_OK) ||
               (split ? kiln_attn_run_splitkv(k, comb, &p, splits, ws, out, lse, q, kk, v, o->twice, &err)
                      : kiln_attn_run(k, &p, out, lse, q, kk, v, o->twice, &err)) != KILN_OK ||
               kiln_attn_reference(&p, q, kk, v, ro, rl, &err) != KILN_OK) {
        rc = report_error(&err);
    } else {
        printf("  %s%s%s: emulated in %.1f ms\n", m->entry, split ? " + " : "", split ? kiln_emu_kernel_meta(comb)->entry : "",
               now_ms() - t0);
        kiln_attn_report r;
        long bad = kiln_attn_check(&p, p.dtype, q, kk, v, out, lse, ro, rl, &r);
        static const char *names[2] = {"o", "lse"};
        for (int i = 0; i < 2; i++) {
            printf("  %-4s  max |err| %.3e  worst %.3f of tolerance  %s\n", names[i], r.max_abs[i],
                   floor(r.worst[i] * 1000) / 1000, r.bad[i] ? "FAIL" : "ok");
            if (r.bad[i]) printf("  %s: %ld values out of tolerance; first: %s\n", names[i], r.bad[i], r.first[i]);
        }
        printf("%s: %s\n", bad ? "FAIL" : "PASS", bad ? "outputs differ from the float64 reference" : "every output within tolerance");
        rc = bad ? CLI_FINDINGS : CLI_OK;
    }
    free(q), free(kk), free(v), free(out), free(lse), free(ro), free(rl), free(ws);
    if (comb) kiln_emu_kernel_free(comb);
    return rc;
}

/* The generator and emulator of this run, for families that run a sequence of kernels. */
static kiln_gen *run_gen;
static kiln_emu *run_emu;

/* Replaces the value of key in a canonical spec (buf receives the result). */
static void spec_with(const char *spec, const char *key, const char *value, char *buf, size_t size) {
    char pat[64];
    snprintf(pat, sizeof pat, " %s=", key);
    const char *at = strstr(spec, pat);
    if (!at) {
        snprintf(buf, size, "%s %s=%s", spec, key, value);
        return;
    }
    const char *end = strchr(at + 1, ' ');
    snprintf(buf, size, "%.*s%s%s", (int)(at - spec) + (int)strlen(pat), spec, value, end ? end : "");
}

/* Attention backward: the forward's O and lse from the float64 reference (rounded as a forward
 * kernel stores them), dO random in [-1, 1]; the whole sequence runs, and dq, dk, dv are checked
 * with the error model of emu/emu_ref_attention_bwd.c (P and dS taken as rounded to the input
 * dtype: the looser of the paths). */
static int run_attention_bwd(kiln_emu_kernel *k0, const run_opts *o) {
    const kiln_kernel_meta *m = kiln_emu_kernel_meta(k0);
    kiln_error err = {0};
    kiln_attn_problem p = {0};
    if (kiln_attn_spec_parse(m->spec, &p, &err) != KILN_OK) return report_error(&err);
    kiln_dtype grad = p.dtype;
    const char *g = strstr(m->spec, " grad=");
    if (g) {
        char word[8];
        snprintf(word, sizeof word, "%.*s", (int)strcspn(g + 6, " "), g + 6);
        kiln_dtype_parse(word, &grad);
    }
    int det = strstr(m->spec, "deterministic=true") != NULL;
    p.batch = o->batch ? o->batch : 1;
    p.heads_q = o->heads_q ? o->heads_q : 2;
    p.heads_kv = o->heads_kv ? o->heads_kv : p.heads_q;
    p.seq_q = o->rows;
    p.seq_k = o->seq_k ? o->seq_k : o->rows;
    if (kiln_attn_check_problem(&p, &err) != KILN_OK) return cli_error("%s", err.msg);
    if ((double)p.batch * p.heads_q * p.seq_q * p.seq_k * p.head_dim > 1e9)
        return cli_error("batch x heads x seq_q x seq_k x head_dim is too large for the emulator backward (at most 1e9)");
    kiln_attn_default_strides(&p);
    static const char *seq[2][3] = {{"prep", "dkdv", "convert"}, {"prep", "dkdv", "dq"}};
    kiln_emu_kernel *ks[3] = {NULL, NULL, NULL};
    for (int i = 0; i < 3; i++) {
        char a[KILN_SPEC_MAX], b[KILN_SPEC_MAX];
        spec_with(m->spec, "kernel", seq[det][i], a, sizeof a);
        spec_with(a, "deterministic", det && i == 1 ? "true" : "false", b, sizeof b);
        if (kiln_emu_load(run_emu, run_gen, b, o->sm, &ks[i], &err) != KILN_OK) return cli_error("%s", err.msg);
    }
    uint64_t seed = o->seed;
    size_t n[3] = {kiln_attn_elems(&p, 'q'), kiln_attn_elems(&p, 'k'), kiln_attn_elems(&p, 'v')};
    size_t no = kiln_attn_elems(&p, 'o'), nl = (size_t)p.batch * (size_t)p.heads_q * (size_t)p.seq_q;
    void *in[3], *dout = kiln_attn_random(p.out, no, 1, &seed), *out = malloc(no * kiln_dtype_size(p.out));
    for (int t = 0; t < 3; t++) in[t] = kiln_attn_random(p.dtype, n[t], 1, &seed);
    float *lse = malloc(nl * sizeof *lse), *delta = malloc(nl * sizeof *delta);
    float *acc = det ? NULL : malloc(nl * (size_t)p.head_dim * sizeof *acc);
    double *ro = malloc(no * sizeof *ro), *rl = malloc(nl * sizeof *rl);
    void *gk[3];
    double *ref[3], *tol[3];
    int ok = dout && out && lse && delta && (det || acc) && ro && rl;
    for (int t = 0; t < 3; t++) {
        gk[t] = malloc(n[t] * kiln_dtype_size(grad));
        ref[t] = malloc(n[t] * sizeof(double));
        tol[t] = malloc(n[t] * sizeof(double));
        ok = ok && in[t] && gk[t] && ref[t] && tol[t];
    }
    int rc = CLI_OK;
    printf("%s  %s  batch %d  heads %d:%d  seq_q %d  seq_k %d  seed %llu%s\n", m->spec, kiln_sm_name(o->sm, (char[16]){0}), p.batch, p.heads_q,
           p.heads_kv, p.seq_q, p.seq_k, o->seed, o->twice ? "  (every block twice)" : "");
    if (!ok) {
        rc = cli_error("out of memory");
    } else if (kiln_attn_reference(&p, in[0], in[1], in[2], ro, rl, &err) != KILN_OK) {
        rc = report_error(&err);
    } else {
        for (size_t i = 0; i < no; i++) kiln_emu_value_set(p.out, out, i, ro[i]);
        for (size_t i = 0; i < nl; i++) lse[i] = (float)rl[i];
        for (int t = 0; t < 3; t++) memset(gk[t], 0xff, n[t] * kiln_dtype_size(grad));
        kiln_attn_bwd_buffers bf = {in[0], in[1], in[2], out, dout, lse, gk[0], gk[1], gk[2], delta, acc};
        for (int i = 0; i < 3 && rc == CLI_OK; i++) {
            double t0 = now_ms();
            if (kiln_attn_bwd_run(ks[i], &p, &bf, o->twice, &err) != KILN_OK) rc = report_error(&err);
            else printf("  %s: emulated in %.1f ms\n", kiln_emu_kernel_meta(ks[i])->entry, now_ms() - t0);
        }
        if (rc == CLI_OK && kiln_attn_bwd_reference(&p, p.dtype, in[0], in[1], in[2], dout, ref[0], ref[1], ref[2], tol[0],
                                                    tol[1], tol[2], &err) != KILN_OK)
            rc = report_error(&err);
        long bad = 0;
        for (int t = 0; t < 3 && rc == CLI_OK; t++) {
            double worst = 0, max_abs = 0;
            char first[256] = "";
            long b = kiln_attn_bwd_compare(grad, gk[t], ref[t], tol[t], n[t], &worst, &max_abs, first, sizeof first);
            printf("  d%c    max |err| %.3e  worst %.3f of tolerance  %s\n", "qkv"[t], max_abs, floor(worst * 1000) / 1000,
                   b ? "FAIL" : "ok");
            if (b) printf("  d%c: %ld values out of tolerance; first: %s\n", "qkv"[t], b, first);
            bad += b;
        }
        if (rc == CLI_OK) {
            printf("%s: %s\n", bad ? "FAIL" : "PASS",
                   bad ? "gradients differ from the float64 reference" : "every gradient within tolerance");
            rc = bad ? CLI_FINDINGS : CLI_OK;
        }
    }
    for (int t = 0; t < 3; t++) free(in[t]), free(gk[t]), free(ref[t]), free(tol[t]);
    free(dout), free(out), free(lse), free(delta), free(acc), free(ro), free(rl);
    return rc;
}

/* The profile of the run (kiln/emu_profile.h; rules in docs/profile.md). */
static int print_profile(const kiln_emu_kernel *k) {
    kiln_emu_profile p;
    kiln_error err = {0};
    if (kiln_emu_profile_get(k, &p, &err) != KILN_OK) return report_error(&err);
    printf("profile (emulator, rules in docs/profile.md): %llu blocks, %llu warps\n", (unsigned long long)p.blocks,
           (unsigned long long)p.warps);
    printf("  warp instructions    whole kernel   per warp    hot loop (%u of %u basic blocks, %llu trips/kernel)\n",
           p.hot_blocks, p.basic_blocks, (unsigned long long)p.hot_trips);
    uint64_t other = 0, hot_other = 0;
    for (int c = 0; c < KILN_PROF_CLASSES; c++) {
        bool hopper = c >= KILN_PROF_WGMMA && c <= KILN_PROF_ASYNC_SYNC; /* rows only for kernels that use them */
        if (hopper && !p.inst[c] && !p.hot_inst[c]) continue;
        printf("    %-18s %12llu %10.1f %12llu\n", kiln_prof_class_name((kiln_prof_class)c), (unsigned long long)p.inst[c],
               p.warps ? (double)p.inst[c] / (double)p.warps : 0.0, (unsigned long long)p.hot_inst[c]);
        if (c != KILN_PROF_MMA) other += p.inst[c], hot_other += p.hot_inst[c];
    }
    if (p.inst[KILN_PROF_MMA])
        printf("  mma : other          1 : %.2f (whole kernel)   1 : %.2f (hot loop)\n", (double)other / (double)p.inst[KILN_PROF_MMA],
               p.hot_inst[KILN_PROF_MMA] ? (double)hot_other / (double)p.hot_inst[KILN_PROF_MMA] : 0.0);
    printf("  shared memory        requests   wavefronts    conflicts   hot: requests  conflicts\n");
    uint64_t conflicts = 0, hot_conflicts = 0;
    for (int s = 0; s < KILN_SMEM_KINDS; s++) {
        const kiln_smem_cost *c = &p.smem[s], *h = &p.hot_smem[s];
        printf("    %-16s %12llu %12llu %12llu %15llu %10llu\n", kiln_prof_smem_name((kiln_prof_smem)s),
               (unsigned long long)c->requests, (unsigned long long)c->wavefronts, (unsigned long long)c->conflicts,
               (unsigned long long)h->requests, (unsigned long long)h->conflicts);
        conflicts += c->conflicts, hot_conflicts += h->conflicts;
    }
    printf("  bank conflicts       %llu (hot loop %llu)\n", (unsigned long long)conflicts, (unsigned long long)hot_conflicts);
    printf("  global memory        %llu B loaded, %llu B stored; per block %.0f B, %.0f B\n",
           (unsigned long long)p.global_ld_bytes, (unsigned long long)p.global_st_bytes,
           p.blocks ? (double)p.global_ld_bytes / (double)p.blocks : 0.0,
           p.blocks ? (double)p.global_st_bytes / (double)p.blocks : 0.0);
    unsigned n = kiln_emu_profile_nsites(k), shown = 0;
    for (unsigned i = 0; i < n; i++) {
        kiln_smem_site site;
        if (kiln_emu_profile_site(k, i, &site) || !site.cost.conflicts) continue;
        if (shown++ < 12)
            printf("  conflicts at %s%s: %llu requests, %llu wavefronts for %llu\n", site.where, site.hot ? " (hot)" : "",
                   (unsigned long long)site.cost.requests, (unsigned long long)site.cost.wavefronts,
                   (unsigned long long)site.cost.ideal);
    }
    if (shown > 12) printf("  ... and %u more sites with conflicts\n", shown - 12);
    return CLI_OK;
}

/* Families `kiln run` can check, each with its reference. */
static const struct {
    const char *family;
    int (*run)(kiln_emu_kernel *k, const run_opts *o);
} families[] = {
    {"layernorm", run_layernorm},
    {"attention", run_attention},
    {"attention_bwd", run_attention_bwd},
    {"rmsnorm", run_norm},
    {"layernorm_bwd", run_norm},
    {"rmsnorm_bwd", run_norm},
};

static int parse_int(const char *opt, const char *v, long lo, long hi, long *out) {
    char *end;
    long x = strtol(v, &end, 10);
    if (!*v || *end || x < lo || x > hi) return cli_error("bad %s '%s'; valid: %ld..%ld", opt, v, lo, hi);
    *out = x;
    return 0;
}

/* --heads H or H:K: query heads, key/value heads; each 1..65535, K divides H. */
static int parse_heads(const char *text, run_opts *o) {
    static const char *form = "give H or H:K, e.g. --heads 32 or --heads 32:8";
    char *end;
    const char *colon = strchr(text, ':');
    long h = strtol(text, &end, 10);
    if (end == text || (colon ? end != colon : *end != 0))
        return cli_error("bad --heads '%s': the query head count is not a whole number; %s", text, form);
    if (h < 1 || h > 65535)
        return cli_error("bad --heads '%s': query heads must be %s; %s", text, h < 1 ? "at least 1" : "at most 65535", form);
    long k = h;
    if (colon) {
        const char *ks = colon + 1;
        k = strtol(ks, &end, 10);
        if (end == ks || *end)
            return cli_error("bad --heads '%s': the key/value head count after ':' is not a whole number; %s", text, form);
        if (k < 1 || k > 65535)
            return cli_error("bad --heads '%s': key/value heads must be %s; %s", text, k < 1 ? "at least 1" : "at most 65535",
                             form);
        if (h % k)
            return cli_error("bad --heads '%s': %ld key/value heads cannot be shared evenly by %ld query heads "
                             "(key/value heads must divide query heads: each serves H/K of them)", text, k, h);
    }
    o->heads_q = (int)h, o->heads_kv = (int)k;
    return 0;
}

static int parse_opts(int argc, char **argv, run_opts *o) {
    static const struct option longopts[] = {
        {"sm", required_argument, NULL, 's'},   {"rows", required_argument, NULL, 'r'},
        {"hidden", required_argument, NULL, 'H'}, {"seed", required_argument, NULL, 'S'},
        {"input", required_argument, NULL, 'i'}, {"eps", required_argument, NULL, 'e'},
        {"twice", no_argument, NULL, 't'},      {"help", no_argument, NULL, 'h'},
        {"seq-k", required_argument, NULL, 'K'}, {"batch", required_argument, NULL, 'B'},
        {"heads", required_argument, NULL, 'N'}, {"profile", no_argument, NULL, 'P'},
        {"splits", required_argument, NULL, 'X'},
        {NULL, 0, NULL, 0}};
    int c;
    long v;
    char *end;
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        switch (c) {
        case 's': if (cli_parse_sm(optarg, &o->sm)) return CLI_USAGE; break;
        case 'r': if (parse_int("--rows", optarg, 1, 1 << 20, &v)) return CLI_USAGE; o->rows = (int)v; break;
        case 'H': if (parse_int("--hidden", optarg, 1, 1 << 20, &v)) return CLI_USAGE; o->hidden = (int)v; break;
        case 'S':
            o->seed = strtoull(optarg, &end, 10);
            if (!*optarg || *end || *optarg == '-') return cli_error("bad --seed '%s'; valid: a non-negative integer", optarg);
            break;
        case 'i':
            if (kiln_ln_input_parse(optarg, &o->input))
                return cli_error("bad --input '%s'; valid: random, large-mean, constant, special, mixed", optarg);
            break;
        case 'e':
            o->eps = strtof(optarg, &end);
            if (!*optarg || *end || !(o->eps > 0)) return cli_error("bad --eps '%s'; valid: a positive number", optarg);
            break;
        case 't': o->twice = 1; break;
        case 'P': o->profile = 1; break;
        case 'K': if (parse_int("--seq-k", optarg, 1, 1 << 20, &v)) return CLI_USAGE; o->seq_k = (int)v; break;
        case 'B': if (parse_int("--batch", optarg, 1, 65535, &v)) return CLI_USAGE; o->batch = (int)v; break;
        case 'X': if (parse_int("--splits", optarg, 1, 1024, &v)) return CLI_USAGE; o->splits = (int)v; break;
        case 'N': if (parse_heads(optarg, o)) return CLI_USAGE; break;
        case 'h': run_usage(stdout); return -1;
        default: return cli_bad_option("run", longopts, c, argv, optind);
        }
    }
    return 0;
}

int cmd_run(int argc, char **argv) {
    run_opts o = {.seed = 1, .eps = 1e-5f, .input = KILN_LN_RANDOM};
    /* options may come anywhere: let getopt permute, the spec words are what remains */
    int rc = parse_opts(argc, argv, &o);
    if (rc) return rc < 0 ? CLI_OK : rc;
    if (optind >= argc) return cli_error("missing kernel family; usage: kiln run FAMILY key=value... --sm N --rows R");
    if (!o.sm) return cli_error("missing --sm N (the target SM, required); valid: %s", cli_valid_sms());
    if (!o.rows) return cli_error("missing --rows R (how many rows to run, required; for attention, seq_q)");
    size_t fi = 0, nf = sizeof families / sizeof families[0];
    while (fi < nf && strcmp(families[fi].family, argv[optind])) fi++;
    if (fi == nf && !strcmp(argv[optind], "attention_combine"))
        return cli_error("attention_combine is the second kernel of split-KV attention; run it with "
                         "'kiln run attention ... splitkv=true --splits N'");
    if (fi == nf)
        return cli_error("kiln run has no reference for family '%s'; valid: layernorm, attention, attention_bwd, rmsnorm, "
                         "layernorm_bwd, rmsnorm_bwd", argv[optind]);
    char spec[4096] = "";
    for (int i = optind, n = 0; i < argc; i++) {
        int k = snprintf(spec + n, sizeof spec - (size_t)n, "%s%s", i > optind ? " " : "", argv[i]);
        if (k < 0 || (size_t)k >= sizeof spec - (size_t)n) return cli_error("spec too long");
        n += k;
    }
    kiln_error err = {0};
    kiln_gen *gen = NULL;
    kiln_emu *emu = NULL;
    kiln_emu_kernel *k = NULL;
    if (kiln_gen_create(&gen, NULL, &err) != KILN_OK || kiln_emu_create(&emu, &err) != KILN_OK ||
        (kiln_emu_set_profile(emu, o.profile), kiln_emu_load(emu, gen, spec, o.sm, &k, &err)) != KILN_OK) {
        rc = cli_error("%s", err.msg);
    } else {
        run_gen = gen, run_emu = emu;
        rc = families[fi].run(k, &o);
        if (o.profile && rc != CLI_USAGE) {
            int prc = print_profile(k);
            if (prc) rc = prc;
        }
    }
    kiln_emu_destroy(emu);
    kiln_gen_destroy(gen);
    return rc;
}
