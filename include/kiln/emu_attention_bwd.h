/* kiln/emu_attention_bwd.h - attention backward on the emulator: float64 gradients, error model, launches. */
#ifndef KILN_EMU_ATTENTION_BWD_H
#define KILN_EMU_ATTENTION_BWD_H

#include "kiln/emu_attention.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The gradients of L = sum(dO * O) for O = attention(Q, K, V) of problem p (float64, from the
 * inputs as stored in their dtypes). dO is laid out like O (p->stride_o); dq, dk and dv like q, k
 * and v. tol_* (each may be NULL) receive, per element, a first-order bound on the error of a
 * kernel that follows the FlashAttention-2 backward (f32 products, ex2.approx, the forward's lse in
 * f32 and O rounded to p->out), before the rounding to the gradient dtype: see
 * templates/attention_bwd.ref.c. p_dtype is what P and dS are rounded to before their products (f32 on
 * the SIMT path). */
kiln_status kiln_attn_bwd_reference(const kiln_attn_problem *p, kiln_dtype p_dtype, const void *q, const void *k,
                                    const void *v, const void *dout, double *dq, double *dk, double *dv,
                                    double *tol_dq, double *tol_dk, double *tol_dv, kiln_error *err);

/* Buffers of one backward launch sequence (host memory standing in for device memory). */
typedef struct kiln_attn_bwd_buffers {
    const void *q, *k, *v, *o, *dout; /* inputs: q, k, v in p->dtype; o, dout in p->out */
    const float *lse;                 /* [batch, heads_q, seq_q], from the forward */
    void *dq, *dk, *dv;               /* outputs in the grad dtype, laid out like q, k, v */
    float *delta;                     /* workspace [batch, heads_q, seq_q] */
    float *dq_acc;                    /* workspace [batch, heads_q, seq_q, head_dim]; NULL when deterministic */
} kiln_attn_bwd_buffers;

/* Runs one kernel of the sequence (its spec's kernel=prep|dkdv|convert|dq picks the grid:
 * {seq_k, heads_kv, batch} for dkdv, {seq_q, heads_q, batch} for the others), binding parameters
 * by name. */
kiln_status kiln_attn_bwd_run(kiln_emu_kernel *k, const kiln_attn_problem *p, kiln_attn_bwd_buffers *bufs, int twice,
                              kiln_error *err);

/* Compares one gradient (n elements of dtype grad at got) with the reference: bad when
 * |got - ref| > u(grad) |ref| + (half grad's subnormal spacing) + 2 tol + 2^-100, or when got is not finite. Returns the number of
 * bad elements; worst and max_abs take the largest error / tolerance and |error|; first describes
 * the first bad element. */
long kiln_attn_bwd_compare(kiln_dtype grad, const void *got, const double *ref, const double *tol, size_t n,
                           double *worst, double *max_abs, char *first, size_t first_size);

#ifdef __cplusplus
}
#endif
#endif
