/* kiln/emu_attention.h - attention forward on the emulator: problems, float64 reference, checks. */
#ifndef KILN_EMU_ATTENTION_H
#define KILN_EMU_ATTENTION_H

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
 * rows_per_block), batch} into ws (poisoned first), then `combine` (attention_combine) into o and lse,
 * as the runtime launches them. */
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

#ifdef __cplusplus
}
#endif
#endif
