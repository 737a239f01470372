/* runtime/rt_varlen.c - typed launch helpers for varlen attention (packed sequences, forward and backward) over the generic launch. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "rt.h"

/* The varlen values every call checks: sequences, totals, the cu_seqlens pointers (4-byte aligned). */
static kiln_status check_varlen(const char *what, int batch, int max_q, int max_k, const kiln_attention_varlen *vl,
                                int bwd, kiln_error *err) {
    if (!vl) return kiln_fail(err, KILN_EINVAL, "%s: the varlen description (kiln_attention_varlen) is NULL", what);
    if (vl->total_q < 0 || vl->total_k < 0)
        return kiln_fail(err, KILN_EINVAL, "%s: total_q (%d) and total_k (%d) must be >= 0", what, vl->total_q, vl->total_k);
    if ((long long)max_q > vl->total_q || (long long)max_k > vl->total_k)
        return kiln_fail(err, KILN_EINVAL, "%s: max_seqlen_q (seq_q %d) and max_seqlen_k (seq_k %d) cannot exceed "
                         "total_q (%d) and total_k (%d)", what, max_q, max_k, vl->total_q, vl->total_k);
    if (batch > 0 && (!vl->cu_seqlens_q || !vl->cu_seqlens_k))
        return kiln_fail(err, KILN_EINVAL, "%s: cu_seqlens_q and cu_seqlens_k (int32 [batch + 1]) must be device "
                         "pointers, not 0", what);
    const kiln_devptr p[3] = {vl->cu_seqlens_q, vl->cu_seqlens_k, vl->seqused_k};
    static const char *const names[3] = {"cu_seqlens_q", "cu_seqlens_k", "seqused_k"};
    for (int i = 0; i < 3; i++)
        if (p[i] % 4)
            return kiln_fail(err, KILN_EINVAL, "%s: %s (0x%llx) must be 4-byte aligned (int32)", what, names[i],
                             (unsigned long long)p[i]);
    if (vl->dropout_mask % 4)
        return kiln_fail(err, KILN_EINVAL, "%s: dropout_mask (0x%llx) must be 4-byte aligned (int32)", what,
                         (unsigned long long)vl->dropout_mask);
    if (bwd && vl->seqused_k)
        return kiln_fail(err, KILN_EINVAL, "%s: seqused_k is a forward value (the backward takes each sequence's keys "
                         "from cu_seqlens_k); give 0", what);
    return KILN_OK;
}

/* The shape values the forward and the backward both check (grad: the backward's gradient dtype, or the
 * out dtype again for the forward). */
static kiln_status check_shape(const char *what, kiln_dtype dtype, kiln_dtype out, kiln_dtype grad, int batch, int seq_q,
                               int seq_k, int heads_q, int heads_kv, float scale, kiln_error *err) {
    if (!kiln_dtype_name(dtype) || !kiln_dtype_name(out) || !kiln_dtype_name(grad))
        return kiln_fail(err, KILN_EINVAL, "%s: dtypes must be f32, f16 or bf16", what);
    if (batch < 0 || seq_q < 0 || seq_k < 0)
        return kiln_fail(err, KILN_EINVAL, "%s: batch (%d), seq_q = max_seqlen_q (%d) and seq_k = max_seqlen_k (%d) must "
                         "be >= 0", what, batch, seq_q, seq_k);
    if (heads_q < 1 || heads_kv < 1 || heads_q % heads_kv)
        return kiln_fail(err, KILN_EINVAL, "%s: heads_q (%d) must be a positive multiple of heads_kv (%d)", what, heads_q,
                         heads_kv);
    if (!(scale >= 0) || isinf(scale))
        return kiln_fail(err, KILN_EINVAL, "%s: scale must be finite and >= 0 (0: 1/sqrt(head_dim))", what);
    return KILN_OK;
}

/* A packed tensor's launch strides: {token, head, 1} from stride[1], stride[2]; none when both are 0. */
static void packed(kiln_launch_tensor *t, const char *name, kiln_devptr ptr, const int64_t s[3]) {
    *t = (kiln_launch_tensor){.name = name, .ptr = ptr};
    if (s[1] || s[2]) memcpy(t->strides, (int64_t[3]){s[1], s[2], 1}, sizeof(int64_t[3]));
}

/* dropout_mask (the keep mask, a test output) is a dropout kernel's: refused without a rate. */
static kiln_status check_dropout_mask(const char *what, const kiln_attention_mask *m, const kiln_attention_varlen *vl,
                                      kiln_error *err) {
    if (vl->dropout_mask && !(m->dropout_p > 0))
        return kiln_fail(err, KILN_EINVAL, "%s: dropout_mask is the keep mask of a dropout launch: give mask.dropout_p > 0, "
                         "or dropout_mask 0", what);
    return KILN_OK;
}

/* The varlen kernel of spec (the dense spec's words): adds " dropout_mask=true" and the mask tensor when the
 * caller asked for the keep mask, then " varlen=true", and gets the kernel. */
static kiln_status varlen_kernel(kiln_rt *rt, const kiln_attention_varlen *vl, char *spec, size_t size,
                                 kiln_launch_tensor *t, int *nt, kiln_kernel **k, kiln_error *err) {
    if (vl->dropout_mask) {
        strncat(spec, " dropout_mask=true", size - strlen(spec) - 1);
        t[(*nt)++] = (kiln_launch_tensor){.name = "dropout_mask", .ptr = vl->dropout_mask};
    }
    strncat(spec, " varlen=true", size - strlen(spec) - 1);
    return kiln_rt_get_kernel(rt, spec, k, err);
}

/* The varlen tensors and scalars every kernel's description takes by name, then the heads, the scale
 * (when given) and the mask's launch values, as the forward and the backward pass them. */
static void varlen_launch(int batch, int max_q, int max_k, int heads_q, int heads_kv, float scale,
                          const kiln_attention_mask *m, const kiln_attention_varlen *vl, kiln_launch_tensor *t, int *nt,
                          kiln_launch_scalar *s, int *ns) {
    t[(*nt)++] = (kiln_launch_tensor){.name = "cu_seqlens_q", .ptr = vl->cu_seqlens_q};
    t[(*nt)++] = (kiln_launch_tensor){.name = "cu_seqlens_k", .ptr = vl->cu_seqlens_k};
    if (vl->seqused_k) t[(*nt)++] = (kiln_launch_tensor){.name = "seqused_k", .ptr = vl->seqused_k};
    s[(*ns)++] = (kiln_launch_scalar){"batch", batch};
    s[(*ns)++] = (kiln_launch_scalar){"total_q", vl->total_q};
    s[(*ns)++] = (kiln_launch_scalar){"total_k", vl->total_k};
    s[(*ns)++] = (kiln_launch_scalar){"max_seqlen_q", max_q};
    s[(*ns)++] = (kiln_launch_scalar){"max_seqlen_k", max_k};
    s[(*ns)++] = (kiln_launch_scalar){"heads_q", heads_q};
    s[(*ns)++] = (kiln_launch_scalar){"heads_kv", heads_kv};
    if (scale > 0) s[(*ns)++] = (kiln_launch_scalar){"scale", scale};
    rt_attn_mask_launch(m, t, nt, s, ns);
}

/* ---- forward ---- */

kiln_status kiln_attention_forward_varlen(kiln_rt *rt, const kiln_attention_args *a, const kiln_attention_varlen *vl,
                                          kiln_error *err) {
    if (!rt || !a) return kiln_fail(err, KILN_EINVAL, "kiln_attention_forward_varlen: NULL argument");
    const char *what = "attention varlen";
    kiln_status st = check_shape(what, a->dtype, a->out_dtype, a->out_dtype, a->batch, a->seq_q, a->seq_k, a->heads_q,
                                 a->heads_kv, a->scale, err);
    if (st != KILN_OK) return st;
    const kiln_devptr ptrs[4] = {a->q, a->k, a->v, a->o};
    for (int t = 0; t < 4; t++)
        if (!ptrs[t]) return kiln_fail(err, KILN_EINVAL, "%s: %c must be a device pointer, not 0", what, "qkvo"[t]);
    st = check_varlen(what, a->batch, a->seq_q, a->seq_k, vl, 0, err);
    if (st == KILN_OK) st = rt_attn_check_path(what, a->path, err);
    if (st == KILN_OK) st = rt_attn_check_mask(what, a->causal, &a->mask, err);
    if (st == KILN_OK) st = check_dropout_mask(what, &a->mask, vl, err);
    if (st != KILN_OK || a->batch == 0 || a->seq_q == 0) return st;
    char spec[KILN_SPEC_MAX];
    kiln_attention_args one = *a; /* the varlen kernel: one head dim, no KV cache (their words stay off) */
    one.v_head_dim = 0;
    memset(&one.cache, 0, sizeof one.cache);
    rt_attn_spec(&one, 0, spec, sizeof spec);
    kiln_launch_tensor t[10];
    kiln_launch_scalar s[16]; /* (5 varlen, heads, scale, window 2, softcap, alibi_stride, dropout 3) */
    int nt = 0, ns = 0;
    kiln_kernel *k;
    if ((st = varlen_kernel(rt, vl, spec, sizeof spec, t, &nt, &k, err)) != KILN_OK) return st;
    packed(&t[nt++], "q", a->q, a->stride_q);
    packed(&t[nt++], "k", a->k, a->stride_k);
    packed(&t[nt++], "v", a->v, a->stride_v);
    packed(&t[nt++], "o", a->o, a->stride_o);
    t[nt++] = (kiln_launch_tensor){.name = "lse", .ptr = a->lse};
    varlen_launch(a->batch, a->seq_q, a->seq_k, a->heads_q, a->heads_kv, a->scale, &a->mask, vl, t, &nt, s, &ns);
    kiln_launch_args la = {.tensors = t, .ntensors = nt, .scalars = s, .nscalars = ns, .stream = a->stream};
    return kiln_launch(k, &la, err);
}

/* ---- backward ---- */

size_t kiln_attention_backward_varlen_workspace(const kiln_attention_bwd_args *a, const kiln_attention_varlen *vl) {
    if (!a || !vl || a->heads_q <= 0 || vl->total_q <= 0 || a->head_dim <= 0) return 0;
    size_t rows = (size_t)a->heads_q * (size_t)vl->total_q;
    size_t bytes = (rows * sizeof(float) + 255) / 256 * 256;
    if (!a->deterministic) bytes += rows * (size_t)a->head_dim * sizeof(float);
    /* bf16 on sm_75's f16-scaled path (an upper bound elsewhere, as the dense backward's): qh, doh (f16 [heads_q,
     * total_q, w]), qsf, dosf (f32 [heads_q, total_q]); deterministic: kh, vh (f16 [heads_kv, total_k, w]), ksf,
     * vsf (f32 [heads_kv, total_k]); each 256-aligned, in the order dkdv's launch declares them */
    kiln_attention_bwd_args one = *a;
    one.v_head_dim = 0; /* (the varlen kernels take one head dim) */
    size_t w = rt_attn_bwd_scaled_width(&one);
    size_t keys = a->heads_kv > 0 && vl->total_k > 0 ? (size_t)a->heads_kv * (size_t)vl->total_k : 0;
    const size_t each[8] = {rows * w * 2, rows * w * 2, rows * sizeof(float), rows * sizeof(float),
                            keys * w * 2, keys * w * 2, keys * sizeof(float), keys * sizeof(float)};
    for (int i = 0; w && i < (a->deterministic && w <= 128 ? 8 : 4); i++) bytes = (bytes + 255) / 256 * 256 + each[i];
    return bytes;
}

kiln_status kiln_attention_backward_varlen(kiln_rt *rt, const kiln_attention_bwd_args *a, const kiln_attention_varlen *vl,
                                           kiln_error *err) {
    if (!rt || !a) return kiln_fail(err, KILN_EINVAL, "kiln_attention_backward_varlen: NULL argument");
    const char *what = "attention backward varlen";
    kiln_status st = check_shape(what, a->dtype, a->out_dtype, a->grad_dtype, a->batch, a->seq_q, a->seq_k, a->heads_q,
                                 a->heads_kv, a->scale, err);
    if (st != KILN_OK) return st;
    static const char *const names[8] = {"q", "k", "v", "o", "dout", "dq", "dk", "dv"};
    const kiln_devptr ptrs[8] = {a->q, a->k, a->v, a->o, a->dout, a->dq, a->dk, a->dv};
    const int64_t *strides[8] = {a->stride_q, a->stride_k, a->stride_v, a->stride_o, a->stride_dout, a->stride_dq,
                                 a->stride_dk, a->stride_dv};
    for (int t = 0; t < 8; t++)
        if (!ptrs[t]) return kiln_fail(err, KILN_EINVAL, "%s: %s must be a device pointer, not 0", what, names[t]);
    if (!a->lse) return kiln_fail(err, KILN_EINVAL, "%s: lse (the forward's log-sum-exp) must be given", what);
    st = check_varlen(what, a->batch, a->seq_q, a->seq_k, vl, 1, err);
    if (st != KILN_OK) return st;
    size_t need = kiln_attention_backward_varlen_workspace(a, vl);
    if (need && !a->workspace)
        return kiln_fail(err, KILN_EINVAL, "%s: workspace must point at %zu bytes of device memory "
                         "(kiln_attention_backward_varlen_workspace)", what, need);
    if (a->workspace % 16)
        return kiln_fail(err, KILN_EINVAL, "%s: workspace (0x%llx) must be 16-byte aligned", what,
                         (unsigned long long)a->workspace);
    if ((st = rt_attn_check_path(what, a->path, err)) != KILN_OK) return st;
    if ((st = rt_attn_check_mask(what, a->causal, &a->mask, err)) != KILN_OK) return st;
    if ((st = check_dropout_mask(what, &a->mask, vl, err)) != KILN_OK) return st;
    if (a->batch == 0 || (a->seq_q == 0 && a->seq_k == 0)) return KILN_OK;
    char spec[KILN_SPEC_MAX];
    kiln_attention_bwd_args one = *a; /* the varlen kernels take one head dim: v_head_dim is not read */
    one.v_head_dim = 0;
    rt_attn_bwd_spec(&one, "dkdv", spec, sizeof spec);
    /* dkdv names the sequence (varlen prep before, convert or dq after) and its workspace */
    kiln_launch_tensor t[14];
    kiln_launch_scalar s[16]; /* (5 varlen, heads, scale, window 2, softcap, alibi_stride, dropout 3) */
    int nt = 0, ns = 0;
    kiln_kernel *k;
    if ((st = varlen_kernel(rt, vl, spec, sizeof spec, t, &nt, &k, err)) != KILN_OK) return st;
    for (int i = 0; i < 8; i++) packed(&t[nt++], names[i], ptrs[i], strides[i]);
    t[nt++] = (kiln_launch_tensor){.name = "lse", .ptr = a->lse};
    varlen_launch(a->batch, a->seq_q, a->seq_k, a->heads_q, a->heads_kv, a->scale, &a->mask, vl, t, &nt, s, &ns);
    kiln_launch_args la = {.tensors = t, .ntensors = nt, .scalars = s, .nscalars = ns, .workspace = a->workspace,
                           .workspace_bytes = need, .stream = a->stream};
    return kiln_launch(k, &la, err);
}
