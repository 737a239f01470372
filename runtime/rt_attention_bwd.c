/* runtime/rt_attention_bwd.c - typed launch helper for attention backward over the generic launch (the sequence dkdv's meta declares: prep, dkdv, convert or dq). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "rt.h"

enum { NTENSORS = 8 };
static const char *tensor_names[NTENSORS] = {"q", "k", "v", "o", "dout", "dq", "dk", "dv"};

static kiln_devptr pointer_of(const kiln_attention_bwd_args *a, int t) {
    const kiln_devptr p[NTENSORS] = {a->q, a->k, a->v, a->o, a->dout, a->dq, a->dk, a->dv};
    return p[t];
}

static const int64_t *strides_of(const kiln_attention_bwd_args *a, int t) {
    const int64_t *s[NTENSORS] = {a->stride_q, a->stride_k, a->stride_v, a->stride_o,
                                  a->stride_dout, a->stride_dq, a->stride_dk, a->stride_dv};
    return s[t];
}

static size_t round_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

/* The tile width the f16-scaled sequence's Q and dO rows take (lib/attn_dims.lua's widths holding head_dim
 * and v_head_dim), or 0 where it does not run: bf16 with O in bf16, head_dim <= 128, with or without dropout
 * (templates/lib/attn_bwd_f16scaled.lua, sm_75; on other devices dkdv declares no such rows, so the
 * workspace below is an upper bound there); and 256 for the deterministic dkdv at 136-256 under path=mma or auto
 * without dropout (wave 25, templates/lib/attn_bwd_mma.lua bf16_dkdv_split; path=simt: none). */
size_t rt_attn_bwd_scaled_width(const kiln_attention_bwd_args *a) {
    int d = a->v_head_dim > a->head_dim ? a->v_head_dim : a->head_dim;
    if (a->dtype != KILN_BF16 || a->out_dtype != KILN_BF16) return 0;
    if (d > 128)
        return a->deterministic && (a->path == KILN_ATTENTION_PATH_MMA || a->path == KILN_ATTENTION_PATH_AUTO) && !(a->mask.dropout_p > 0.0f) ? 256 : 0;
    return d <= 32 ? 32 : d <= 64 ? 64 : d <= 96 ? 96 : 128;
}

size_t kiln_attention_backward_workspace(const kiln_attention_bwd_args *a) {
    if (!a || a->batch <= 0 || a->heads_q <= 0 || a->seq_q <= 0 || a->head_dim <= 0) return 0;
    size_t rows = (size_t)a->batch * (size_t)a->heads_q * (size_t)a->seq_q;
    size_t bytes = round_up(rows * sizeof(float), 256);
    if (!a->deterministic) bytes += rows * (size_t)a->head_dim * sizeof(float);
    size_t w = rt_attn_bwd_scaled_width(a); /* then qh, doh (f16 [rows, w]), qsf, dosf (f32 [rows]), each 256-aligned */
    const size_t each[4] = {rows * w * 2, rows * w * 2, rows * sizeof(float), rows * sizeof(float)};
    for (int i = 0; w && i < 4; i++) bytes = round_up(bytes, 256) + each[i];
    /* deterministic: then kh, vh (f16 [keys, w]), ksf, vsf (f32 [keys]): K and V as dkdv scales them once for dq */
    size_t keys = a->heads_kv > 0 && a->seq_k > 0 ? (size_t)a->batch * (size_t)a->heads_kv * (size_t)a->seq_k : 0;
    const size_t kv[4] = {keys * w * 2, keys * w * 2, keys * sizeof(float), keys * sizeof(float)};
    /* (not at 256: the split's dq stages K and V itself, templates/lib/attn_bwd_kvscaled.lua applies) */
    for (int i = 0; w && w <= 128 && a->deterministic && i < 4; i++) bytes = round_up(bytes, 256) + kv[i];
    return bytes;
}

static kiln_status check_args(const kiln_attention_bwd_args *a, kiln_error *err) {
    if (!kiln_dtype_name(a->dtype) || !kiln_dtype_name(a->out_dtype) || !kiln_dtype_name(a->grad_dtype))
        return kiln_fail(err, KILN_EINVAL, "attention backward: dtypes must be f32, f16 or bf16");
    if (a->batch < 0 || a->seq_q < 0 || a->seq_k < 0)
        return kiln_fail(err, KILN_EINVAL, "attention backward: batch (%d), seq_q (%d) and seq_k (%d) must be >= 0",
                         a->batch, a->seq_q, a->seq_k);
    if (a->heads_q < 1 || a->heads_kv < 1 || a->heads_q % a->heads_kv)
        return kiln_fail(err, KILN_EINVAL, "attention backward: heads_q (%d) must be a positive multiple of heads_kv (%d)",
                         a->heads_q, a->heads_kv);
    if (!(a->scale >= 0) || isinf(a->scale))
        return kiln_fail(err, KILN_EINVAL, "attention backward: scale must be finite and >= 0 (0: 1/sqrt(head_dim))");
    for (int t = 0; t < NTENSORS; t++)
        if (!pointer_of(a, t))
            return kiln_fail(err, KILN_EINVAL, "attention backward: %s must be a device pointer, not 0", tensor_names[t]);
    if (!a->lse) return kiln_fail(err, KILN_EINVAL, "attention backward: lse (the forward's log-sum-exp) must be given");
    if (!a->workspace && kiln_attention_backward_workspace(a))
        return kiln_fail(err, KILN_EINVAL, "attention backward: workspace must point at %zu bytes of device memory "
                         "(kiln_attention_backward_workspace)", kiln_attention_backward_workspace(a));
    if (a->workspace % 16)
        return kiln_fail(err, KILN_EINVAL, "attention backward: workspace (0x%llx) must be 16-byte aligned",
                         (unsigned long long)a->workspace);
    if (rt_attn_check_path("attention backward", a->path, err)) return err->status;
    return rt_attn_check_mask("attention backward", a->causal, &a->mask, err);
}

/* The spec of one kernel of the sequence, with every key the canonical form has (path=auto too; the
 * mask's keys on dkdv and dq, the kernels that score): a runtime without a generator matches bundle
 * entries on the words alone. */
void rt_attn_bwd_spec(const kiln_attention_bwd_args *a, const char *kernel, char *buf, size_t size) {
    int det = a->deterministic && !strcmp(kernel, "dkdv");
    char vd[32] = ""; /* v_head_dim, in the canonical place after head_dim, when it differs */
    if (a->v_head_dim > 0 && a->v_head_dim != a->head_dim) snprintf(vd, sizeof vd, " v_head_dim=%d", a->v_head_dim);
    /* path: dkdv's, and deterministic dq's but for wgmma (its dq is path=auto's, as dkdv's description names it) */
    const char *path = rt_attn_path(a->path);
    int on = !strcmp(kernel, "dkdv") || (!strcmp(kernel, "dq") && a->path != KILN_ATTENTION_PATH_WGMMA);
    snprintf(buf, size,
             "attention_bwd kernel=%s dtype=%s out=%s grad=%s head_dim=%d%s causal=%s path=%s deterministic=%s", kernel,
             kiln_dtype_name(a->dtype), kiln_dtype_name(a->out_dtype), kiln_dtype_name(a->grad_dtype), a->head_dim, vd,
             rt_attn_causal(a->causal), on ? (path ? path : "?") : "auto", det ? "true" : "false");
    if (!strcmp(kernel, "dkdv") || !strcmp(kernel, "dq")) rt_attn_mask_words(&a->mask, buf, size);
}

static const char *const sequence[2][3] = {{"prep", "dkdv", "convert"}, {"prep", "dkdv", "dq"}};

kiln_status kiln_attention_backward_pick(kiln_rt *rt, const kiln_attention_bwd_args *a, kiln_kernel *out[3],
                                         kiln_error *err) {
    if (!rt || !a || !out) return kiln_fail(err, KILN_EINVAL, "kiln_attention_backward_pick: NULL argument");
    kiln_status st = check_args(a, err);
    for (int i = 0; i < 3 && st == KILN_OK; i++) {
        char spec[KILN_SPEC_MAX];
        rt_attn_bwd_spec(a, sequence[a->deterministic ? 1 : 0][i], spec, sizeof spec);
        st = kiln_rt_get_kernel(rt, spec, &out[i], err); /* alignment: kiln_launch checks it */
    }
    return st;
}

/* The generic launch of the sequence dkdv names (its tensors, scalars and mask values; t and s its storage). */
static kiln_launch_args launch_args(const kiln_attention_bwd_args *a, kiln_launch_tensor t[NTENSORS + 2],
                                    kiln_launch_scalar s[16]) {
    for (int i = 0; i < NTENSORS; i++) {
        const int64_t *st = strides_of(a, i);
        t[i] = (kiln_launch_tensor){.name = tensor_names[i], .ptr = pointer_of(a, i)};
        if (st[0] || st[1] || st[2]) memcpy(t[i].strides, (int64_t[4]){st[0], st[1], st[2], 1}, sizeof t[i].strides);
    }
    t[NTENSORS] = (kiln_launch_tensor){.name = "lse", .ptr = a->lse};
    const kiln_launch_scalar base[6] = {{"batch", a->batch}, {"heads_q", a->heads_q}, {"heads_kv", a->heads_kv},
                                        {"seq_q", a->seq_q}, {"seq_k", a->seq_k}, {"scale", a->scale}};
    memcpy(s, base, sizeof base);
    int nt = NTENSORS + 1, ns = a->scale > 0 ? 6 : 5;
    rt_attn_mask_launch(&a->mask, t, &nt, s, &ns);
    return (kiln_launch_args){.tensors = t, .ntensors = nt, .scalars = s, .nscalars = ns, .workspace = a->workspace,
                              .stream = a->stream};
}

kiln_status kiln_attention_backward_workspace_on(kiln_rt *rt, const kiln_attention_bwd_args *a, size_t *bytes,
                                                 kiln_error *err) {
    if (!rt || !a || !bytes) return kiln_fail(err, KILN_EINVAL, "kiln_attention_backward_workspace_on: NULL argument");
    *bytes = 0;
    kiln_attention_bwd_args probe = *a; /* (the pointers' values do not size anything: any non-zero passes the checks) */
    if (!probe.workspace) probe.workspace = 16;
    kiln_status st = check_args(&probe, err);
    if (st != KILN_OK || a->batch == 0 || (a->seq_q == 0 && a->seq_k == 0)) return st;
    kiln_kernel *ks[3];
    if ((st = kiln_attention_backward_pick(rt, &probe, ks, err)) != KILN_OK) return st;
    kiln_launch_tensor t[NTENSORS + 2];
    kiln_launch_scalar s[16];
    kiln_launch_args la = launch_args(&probe, t, s);
    return kiln_launch_workspace(ks[1], &la, bytes, err);
}

kiln_status kiln_attention_backward(kiln_rt *rt, const kiln_attention_bwd_args *a, kiln_error *err) {
    if (!rt || !a) return kiln_fail(err, KILN_EINVAL, "kiln_attention_backward: NULL argument");
    kiln_status st = check_args(a, err);
    if (st != KILN_OK || a->batch == 0 || (a->seq_q == 0 && a->seq_k == 0)) return st;
    kiln_kernel *ks[3];
    if ((st = kiln_attention_backward_pick(rt, a, ks, err)) != KILN_OK) return st;
    /* dkdv names the sequence and its workspace (what this device's kernels declare: at most
     * kiln_attention_backward_workspace); the kernels with an empty grid (no query rows, or no keys) are
     * skipped, the other side still writes its zeros */
    kiln_launch_tensor t[NTENSORS + 2];
    kiln_launch_scalar s[16];
    kiln_launch_args la = launch_args(a, t, s);
    if ((st = kiln_launch_workspace(ks[1], &la, &la.workspace_bytes, err)) != KILN_OK) return st;
    return kiln_launch(ks[1], &la, err);
}
