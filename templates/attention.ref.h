/* templates/attention.ref.h - the attention reference's typed API (templates/attention.ref.c, attention_bwd.ref.c): problems, float64 forward and backward references, runs and checks on the emulator. */
#ifndef KILN_ATTENTION_REF_H
#define KILN_ATTENTION_REF_H

#include "kiln/emu.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One attention problem. Strides are in elements (batch, seq, head); head_dim is contiguous. */
typedef struct kiln_attn_problem {
    kiln_dtype dtype, out; /* Q/K/V and O element types */
    int head_dim, causal;  /* causal 1 (true): query i sees key j iff j <= i + seq_k - seq_q;
                              2 (top_left): iff j <= i */
    int batch, heads_q, heads_kv, seq_q, seq_k;
    float scale;           /* softmax scale; 0: 1/sqrt(head_dim) */
    long long stride_q[3], stride_k[3], stride_v[3], stride_o[3];
    /* The spec keys window=, softcap=, alibi= (set by kiln_attn_spec_parse) and their launch values:
     * window: i sees j iff i + shift - window_left <= j <= i + shift + window_right (shift =
     * seq_k - seq_q; -1 unbounded); softcap (> 0): scaled scores x become softcap tanh(x / softcap);
     * alibi: x gains -alibi_slopes[b * alibi_stride + h] |i + shift - j| (alibi_stride 0: one row). */
    int window, window_left, window_right;
    int has_softcap;
    float softcap;
    int alibi, alibi_stride;
    const float *alibi_slopes;
    /* dropout=true (set by kiln_attn_spec_parse) and its launch values: each probability is kept with
     * probability 1 - dropout_p and scaled by 1 / (1 - dropout_p) in P V, by the Philox 4x32-10 mask of
     * (dropout_seed, dropout_offset, batch, head, query, key) (templates/lib/attn_dropout.lua). */
    int dropout;
    float dropout_p;
    unsigned long long dropout_seed, dropout_offset;
    /* V's and O's head dim (spec key v_head_dim, set by kiln_attn_spec_parse); 0: head_dim (dO, dV follow
     * O and V). kiln_attn_vdim gives the width in use. */
    int v_head_dim;
    /* dropout's batch index of this problem's batch 0 (0 but for a varlen sequence checked as a dense
     * problem of batch 1: its index in the packed batch, templates/lib/attn_varlen.ref.c). */
    int dropout_batch;
} kiln_attn_problem;

/* V's and O's head dim: p->v_head_dim, or head_dim when it is 0. */
static inline int kiln_attn_vdim(const kiln_attn_problem *p) { return p->v_head_dim > 0 ? p->v_head_dim : p->head_dim; }

/* Reads dtype, out, head_dim, causal and the window/softcap/alibi keys (window=true sets both sides
 * to -1, unbounded; softcap and the slopes stay for the caller) from an attention spec (canonical or not; the rest of p
 * is left alone); KILN_EINVAL names a bad value. */
kiln_status kiln_attn_spec_parse(const char *spec, kiln_attn_problem *p, kiln_error *err);
/* Fills n elements of dtype t with values uniform in [-amplitude, amplitude] (rounded to t) from
 * a seeded generator; returns malloc'd memory or NULL. */
void *kiln_attn_random(kiln_dtype t, size_t n, double amplitude, uint64_t *seed);
/* Sets the strides of [batch, seq, heads, head_dim] tensors. */
void kiln_attn_default_strides(kiln_attn_problem *p);
double kiln_attn_scale(const kiln_attn_problem *p);
/* Elements tensor 'q', 'k', 'v' or 'o' spans with its strides. */
size_t kiln_attn_elems(const kiln_attn_problem *p, char which);
kiln_status kiln_attn_check_problem(const kiln_attn_problem *p, kiln_error *err);
/* o (laid out like O) and lse ([batch, heads_q, seq_q]) in float64. A row that sees no key
 * gets o = 0 and lse = +inf. */
kiln_status kiln_attn_reference(const kiln_attn_problem *p, const void *q, const void *k, const void *v,
                                double *o, double *lse, kiln_error *err);
/* Poisons o and lse (0xff bytes; lse may be NULL), binds the kernel's parameters by name and runs the grid
 * {ceil(seq_q / grid_tile.x), heads_q, batch}. */
kiln_status kiln_attn_run(kiln_emu_kernel *k, const kiln_attn_problem *p, void *o, float *lse, const void *q,
                          const void *kk, const void *v, int twice, kiln_error *err);
/* Split-KV decoding: floats of workspace `attention splitkv=true` needs for `splits` splits
 * (splits * batch * heads_q * seq_q * (head_dim + 1)). */
size_t kiln_attn_splitkv_workspace_floats(const kiln_attn_problem *p, int splits);
/* Runs `split` (attention splitkv=true) over grid {splits, heads_kv * ceil(heads_q / heads_kv * seq_q /
 * rows_per_block), batch} into ws (poisoned first), then `combine` (the kernel the split's then_spec
 * names) into o and lse, as the runtime launches them. */
kiln_status kiln_attn_run_splitkv(kiln_emu_kernel *split, kiln_emu_kernel *combine, const kiln_attn_problem *p,
                                  int splits, float *ws, void *o, float *lse, const void *q, const void *k, const void *v,
                                  int twice, kiln_error *err);
/* Index 0: o, 1: lse. */
typedef struct kiln_attn_report {
    double max_abs[2], worst[2]; /* largest |error| and error / tolerance over finite values */
    long bad[2];
    char first[2][256];
} kiln_attn_report;
/* Checks o and lse against the reference with the error model in templates/attention.ref.c;
 * p_dtype is the dtype P is rounded to before P.V (f32 on the SIMT path). Returns the number
 * of bad values. */
long kiln_attn_check(const kiln_attn_problem *p, kiln_dtype p_dtype, const void *q, const void *k, const void *v,
                     const void *o, const float *lse, const double *ref_o, const double *ref_lse,
                     kiln_attn_report *r);

/* ---- the backward (its reference in templates/; its registry descriptor runs and checks the whole
 * sequence: the emulator tests and the GPU kit use that; these serve tests that feed their own inputs) ---- */

/* The gradients of L = sum(dO * O) for O = attention(Q, K, V) of problem p (float64, from the
 * inputs as stored in their dtypes). dO is laid out like O (p->stride_o); dq, dk and dv like q, k
 * and v. tol_* (each may be NULL) receive, per element, a first-order bound on the error of a
 * kernel that follows the FlashAttention-2 backward (f32 products, ex2.approx, the forward's lse in
 * f32 and O rounded to p->out), before the rounding to the gradient dtype: see
 * the backward's reference. p_dtype is what P and dS are rounded to before their products (f32 on
 * the SIMT path). */
kiln_status kiln_attn_bwd_reference(const kiln_attn_problem *p, kiln_dtype p_dtype, const void *q, const void *k,
                                    const void *v, const void *dout, double *dq, double *dk, double *dv,
                                    double *tol_dq, double *tol_dk, double *tol_dv, kiln_error *err);

/* Compares n gradient values of dtype grad (got) with the reference and its tolerances as the registry's
 * checker does (the rounding to grad, a factor 2 for second-order terms; a non-finite value fails): returns
 * the number of bad elements, raises *worst (error / tolerance) and *max_abs, and describes the first bad
 * one in first (may be NULL). For tests that lay out their own buffers (the head-dim test of the backward). */
long kiln_attn_bwd_compare(kiln_dtype grad, const void *got, const double *ref, const double *tol, size_t n,
                           double *worst, double *max_abs, char *first, size_t first_size);

/* Buffers of one backward launch sequence (host memory standing in for device memory). */
typedef struct kiln_attn_bwd_buffers {
    const void *q, *k, *v, *o, *dout; /* inputs: q, k, v in p->dtype; o, dout in p->out */
    const float *lse;                 /* [batch, heads_q, seq_q], from the forward */
    void *dq, *dk, *dv;               /* outputs in the grad dtype, laid out like q, k, v */
    float *delta;                     /* workspace [batch, heads_q, seq_q] */
    float *dq_acc;                    /* workspace [batch, heads_q, seq_q, head_dim]; NULL when deterministic */
    void *scaled; /* workspace of bf16 on sm_75's f16 tensor cores: Q and dO as prep scales them once (qh, doh,
                     qsf, dosf), K and V as the deterministic dkdv scales them once for dq (kh, vh, ksf, vsf;
                     a row spanning more than 2^32 has its ksf / vsf stored negative, a mark for dq):
                     kiln_attn_bwd_scaled_bytes; NULL elsewhere (prep then skips them) */
} kiln_attn_bwd_buffers;

/* Bytes of kiln_attn_bwd_buffers.scaled for problem p: qh and doh [batch, heads_q, seq_q, W] f16, qsf and
 * dosf [batch, heads_q, seq_q] f32, then kh and vh [batch, heads_kv, seq_k, W] f16, ksf and vsf
 * [batch, heads_kv, seq_k] f32, W the tile width holding head_dim and v_head_dim (32, 64, 96, 128, 256). */
size_t kiln_attn_bwd_scaled_bytes(const kiln_attn_problem *p);

/* Runs one kernel of the sequence (its spec's kernel=prep|dkdv|convert|dq picks the grid:
 * {seq_k, heads_kv, batch} for dkdv, {seq_q, heads_q, batch} for the others), binding parameters
 * by name. */
kiln_status kiln_attn_bwd_run(kiln_emu_kernel *k, const kiln_attn_problem *p, kiln_attn_bwd_buffers *bufs, int twice,
                              kiln_error *err);

#ifdef __cplusplus
}
#endif
#endif
