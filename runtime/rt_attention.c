/* runtime/rt_attention.c - typed launch helpers for attention forward over the generic launch: spec, checks, the split-KV choice. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rt.h"
#include "rt_keys.h" /* RT_CAUSAL_VALUES, RT_ROTARY_VALUES: generated from templates/lib/attn_mask.lua and attn_rotary.lua (Makefile) */

static const char tensor_names[4] = {'q', 'k', 'v', 'o'};

static const int64_t *strides_of(const kiln_attention_args *a, int t) {
    const int64_t *s[4] = {a->stride_q, a->stride_k, a->stride_v, a->stride_o};
    return s[t];
}

static kiln_devptr pointer_of(const kiln_attention_args *a, int t) {
    const kiln_devptr p[4] = {a->q, a->k, a->v, a->o};
    return p[t];
}

/* ---- the mask keys (window, softcap, ALiBi, top-left causal), shared with rt_attention_bwd.c ---- */

/* The spec's causal value for a KILN_CAUSAL_* value: the template's values in its order (none,
 * bottom-right, top-left), as the build read them from the template. */
const char *rt_attn_causal(int causal) {
    static const char *const names[] = {RT_CAUSAL_VALUES};
    _Static_assert(sizeof names / sizeof *names == KILN_CAUSAL_TOP_LEFT + 1,
                   "templates/lib/attn_mask.lua's causal values are one per KILN_CAUSAL_* value");
    return causal >= KILN_CAUSAL_NONE && causal <= KILN_CAUSAL_TOP_LEFT ? names[causal] : NULL;
}

const char *rt_attn_path(int path) {
    static const char *const names[] = {"auto", "mma", "simt", "wgmma"}; /* (KILN_ATTENTION_PATH_* in order) */
    _Static_assert(sizeof names / sizeof *names == KILN_ATTENTION_PATH_WGMMA + 1, "one name per KILN_ATTENTION_PATH_*");
    return path >= KILN_ATTENTION_PATH_AUTO && path <= KILN_ATTENTION_PATH_WGMMA ? names[path] : NULL;
}

kiln_status rt_attn_check_path(const char *what, int path, kiln_error *err) {
    if (rt_attn_path(path)) return KILN_OK;
    return kiln_fail(err, KILN_EINVAL, "%s: path (%d) must be KILN_ATTENTION_PATH_AUTO (0), _MMA (1), _SIMT (2) or "
                     "_WGMMA (3)", what, path);
}

kiln_status rt_attn_check_mask(const char *what, int causal, const kiln_attention_mask *m, kiln_error *err) {
    if (!rt_attn_causal(causal))
        return kiln_fail(err, KILN_EINVAL, "%s: causal (%d) must be 0 (none), 1 (KILN_CAUSAL_BOTTOM_RIGHT) or 2 "
                         "(KILN_CAUSAL_TOP_LEFT)", what, causal);
    if (m->window && (m->window_left < -1 || m->window_right < -1))
        return kiln_fail(err, KILN_EINVAL, "%s: window sides (%d, %d) must be -1 (unbounded) or >= 0", what,
                         m->window_left, m->window_right);
    if (!(m->softcap >= 0) || isinf(m->softcap))
        return kiln_fail(err, KILN_EINVAL, "%s: softcap must be finite and >= 0 (0: none)", what);
    if (m->alibi_slopes && m->alibi_stride < 0)
        return kiln_fail(err, KILN_EINVAL, "%s: alibi_stride (%d) must be >= 0 (0: one row of slopes for the batch)",
                         what, m->alibi_stride);
    if (m->alibi_slopes % 4)
        return kiln_fail(err, KILN_EINVAL, "%s: alibi_slopes (0x%llx) must be 4-byte aligned (f32)", what,
                         (unsigned long long)m->alibi_slopes);
    if (!(m->dropout_p >= 0 && m->dropout_p < 1))
        return kiln_fail(err, KILN_EINVAL, "%s: dropout_p (%g) must be 0 <= p < 1 (0: no dropout)", what, (double)m->dropout_p);
    if (m->dropout_seed > (1ull << 53) || m->dropout_offset > (1ull << 53))
        return kiln_fail(err, KILN_EINVAL, "%s: dropout_seed and dropout_offset must be at most 2^53 (launch scalars are exact to there)", what);
    return KILN_OK;
}

void rt_attn_mask_words(const kiln_attention_mask *m, char *buf, size_t size) {
    size_t n = strlen(buf);
    snprintf(buf + n, n < size ? size - n : 0, "%s%s%s%s", m->window ? " window=true" : "",
             m->softcap > 0 ? " softcap=true" : "", m->alibi_slopes ? " alibi=true" : "",
             m->dropout_p > 0 ? " dropout=true" : "");
}

void rt_attn_mask_launch(const kiln_attention_mask *m, kiln_launch_tensor *t, int *nt, kiln_launch_scalar *s, int *ns) {
    if (m->window) {
        s[(*ns)++] = (kiln_launch_scalar){"window_left", m->window_left};
        s[(*ns)++] = (kiln_launch_scalar){"window_right", m->window_right};
    }
    if (m->softcap > 0) s[(*ns)++] = (kiln_launch_scalar){"softcap", m->softcap};
    if (m->alibi_slopes) {
        t[(*nt)++] = (kiln_launch_tensor){.name = "alibi_slopes", .ptr = m->alibi_slopes};
        s[(*ns)++] = (kiln_launch_scalar){"alibi_stride", m->alibi_stride};
    }
    if (m->dropout_p > 0) {
        s[(*ns)++] = (kiln_launch_scalar){"dropout_p", m->dropout_p};
        s[(*ns)++] = (kiln_launch_scalar){"dropout_seed", (double)m->dropout_seed};
        s[(*ns)++] = (kiln_launch_scalar){"dropout_offset", (double)m->dropout_offset};
    }
}

/* ---- the forward ---- */

/* The spec's rotary value for a KILN_ROTARY_* value: the template's values in its order (none, neox,
 * interleaved), as the build read them from templates/lib/attn_rotary.lua. */
static const char *rotary_name(int rotary) {
    static const char *const names[] = {RT_ROTARY_VALUES};
    _Static_assert(sizeof names / sizeof *names == KILN_ROTARY_INTERLEAVED + 1,
                   "templates/lib/attn_rotary.lua's rotary values are one per KILN_ROTARY_* value");
    return rotary >= KILN_ROTARY_NONE && rotary <= KILN_ROTARY_INTERLEAVED ? names[rotary] : NULL;
}

void rt_attn_spec(const kiln_attention_args *a, int splitkv, char *buf, size_t size) {
    const char *path = rt_attn_path(a->path); /* (checked by the callers; a bad value stays in the words, refused) */
    snprintf(buf, size, "attention dtype=%s out=%s head_dim=%d causal=%s path=%s%s", kiln_dtype_name(a->dtype),
             kiln_dtype_name(a->out_dtype), a->head_dim, rt_attn_causal(a->causal), path ? path : "?",
             splitkv ? " splitkv=true" : "");
    rt_attn_mask_words(&a->mask, buf, size);
    size_t n = strlen(buf);
    if (a->v_head_dim > 0 && a->v_head_dim != a->head_dim) /* (the template refuses what it does not build) */
        snprintf(buf + n, n < size ? size - n : 0, " v_head_dim=%d", a->v_head_dim), n = strlen(buf);
    if (a->cache.block_table)
        snprintf(buf + n, n < size ? size - n : 0, " paged=true%s", a->cache.k_new ? " append=true" : "");
    const kiln_attention_kvcache *c = &a->cache;
    n = strlen(buf);
    if (c->rotary && n < size) {
        int r = c->rotary_dim ? c->rotary_dim : a->head_dim;
        snprintf(buf + n, size - n, " rotary=%s rotary_dim=%d rotary_cs=%s",
                 rotary_name(c->rotary), r, kiln_dtype_name(c->rotary_dtype));
    }
}

static kiln_status check_args(const kiln_attention_args *a, kiln_error *err) {
    if (!kiln_dtype_name(a->dtype) || !kiln_dtype_name(a->out_dtype))
        return kiln_fail(err, KILN_EINVAL, "attention: dtypes must be f32, f16 or bf16");
    if (a->batch < 0 || a->seq_q < 0 || a->seq_k < 0)
        return kiln_fail(err, KILN_EINVAL, "attention: batch (%d), seq_q (%d) and seq_k (%d) must be >= 0", a->batch,
                         a->seq_q, a->seq_k);
    if (a->heads_q < 1 || a->heads_kv < 1 || a->heads_q % a->heads_kv)
        return kiln_fail(err, KILN_EINVAL, "attention: heads_q (%d) must be a positive multiple of heads_kv (%d)",
                         a->heads_q, a->heads_kv);
    if (!(a->scale >= 0) || isinf(a->scale))
        return kiln_fail(err, KILN_EINVAL, "attention: scale must be finite and >= 0 (0: 1/sqrt(head_dim))");
    for (int t = 0; t < 4; t++)
        if (!pointer_of(a, t))
            return kiln_fail(err, KILN_EINVAL, "attention: %c must be a device pointer, not 0", tensor_names[t]);
    const kiln_attention_kvcache *c = &a->cache;
    if (c->block_table && (!c->cache_seqlens || c->page_size < 1 || c->max_blocks < 1 || c->num_blocks < 1))
        return kiln_fail(err, KILN_EINVAL, "attention paged KV cache: cache_seqlens must be a device pointer and page_size "
                         "(%d), max_blocks (%d), num_blocks (%d) >= 1", c->page_size, c->max_blocks, c->num_blocks);
    if (c->k_new && (!c->block_table || !c->v_new || c->seqlen_new < 1))
        return kiln_fail(err, KILN_EINVAL, "attention append: k_new needs a paged KV cache (block_table), v_new and "
                         "seqlen_new >= 1 (got %d)", c->seqlen_new);
    if (!rotary_name(c->rotary))
        return kiln_fail(err, KILN_EINVAL, "attention rotary: %d is not a mode; valid: KILN_ROTARY_NONE (0), "
                         "KILN_ROTARY_NEOX (1), KILN_ROTARY_INTERLEAVED (2)", c->rotary);
    if (c->rotary && (!c->k_new || !c->rotary_cos || !c->rotary_sin || c->seqlen_ro < 1 || !kiln_dtype_name(c->rotary_dtype)))
        return kiln_fail(err, KILN_EINVAL, "attention rotary: needs the append (k_new), rotary_cos and rotary_sin device "
                         "pointers, seqlen_ro >= 1 (got %d) and rotary_dtype f32, f16 or bf16", c->seqlen_ro);
    if (!c->block_table && (c->cache_seqlens || c->cache_batch_idx || c->cache_leftpad))
        return kiln_fail(err, KILN_EINVAL, "attention: cache_seqlens, cache_batch_idx and cache_leftpad need a paged KV cache "
                         "(block_table)");
    if (rt_attn_check_path("attention", a->path, err)) return err->status;
    return rt_attn_check_mask("attention", a->causal, &a->mask, err);
}

/* The page-size rule of a paged kernel: >= 16 and a multiple or a divisor of its key tile (the fixed
 * scalar key_tile of its launch description). */
static kiln_status check_page(const kiln_attention_args *a, const kiln_kernel *k, kiln_error *err) {
    if (!a->cache.block_table) return KILN_OK;
    const char *at = strstr(k->meta.launch, "scalar key_tile =");
    int tile = at ? atoi(at + strlen("scalar key_tile =")) : 0, ps = a->cache.page_size;
    if (tile > 0 && ps >= 16 && (ps % tile == 0 || tile % ps == 0)) return KILN_OK;
    return kiln_fail(err, KILN_EINVAL, "attention paged KV cache: page_size %d does not fit kernel '%s' (%d-key tiles); "
                     "valid: 16..%d dividing %d, or a multiple of %d", ps, k->meta.entry, tile, tile, tile, tile);
}

kiln_status kiln_attention_pick(kiln_rt *rt, const kiln_attention_args *a, kiln_kernel **out, kiln_error *err) {
    if (!rt || !a || !out) return kiln_fail(err, KILN_EINVAL, "kiln_attention_pick: NULL argument");
    kiln_status st = check_args(a, err);
    if (st != KILN_OK) return st;
    char spec[KILN_SPEC_MAX];
    rt_attn_spec(a, 0, spec, sizeof spec);
    return kiln_rt_get_kernel(rt, spec, out, err); /* alignment: kiln_launch checks what the kernel declares */
}

/* The generic launch's arguments: q, k, v, o, lse with the given strides (or none: contiguous), the
 * shape's scalars, splits (split-KV) and the scale (0: the kernel's default, 1/sqrt(head_dim)). */
typedef struct launch_buf {
    kiln_launch_tensor t[16];
    kiln_launch_scalar s[24];
} launch_buf;

static kiln_launch_args launch_args(const kiln_attention_args *a, launch_buf *b, int splits, kiln_devptr ws, size_t ws_bytes) {
    static const char *const names[4] = {"q", "k", "v", "o"};
    for (int t = 0; t < 4; t++) {
        const int64_t *st = strides_of(a, t);
        b->t[t] = (kiln_launch_tensor){.name = names[t], .ptr = pointer_of(a, t)};
        if (st[0] || st[1] || st[2]) memcpy(b->t[t].strides, (int64_t[4]){st[0], st[1], st[2], 1}, sizeof b->t[t].strides);
    }
    b->t[4] = (kiln_launch_tensor){.name = "lse", .ptr = a->lse};
    int n = 0;
    b->s[n++] = (kiln_launch_scalar){"batch", a->batch};
    b->s[n++] = (kiln_launch_scalar){"heads_q", a->heads_q};
    b->s[n++] = (kiln_launch_scalar){"heads_kv", a->heads_kv};
    b->s[n++] = (kiln_launch_scalar){"seq_q", a->seq_q};
    const kiln_attention_kvcache *c = &a->cache;
    int nt = 5;
    if (c->block_table) { /* paged: each entry's key count comes from cache_seqlens */
        b->t[nt++] = (kiln_launch_tensor){.name = "block_table", .ptr = c->block_table};
        b->t[nt++] = (kiln_launch_tensor){.name = "cache_seqlens", .ptr = c->cache_seqlens};
        b->t[nt++] = (kiln_launch_tensor){.name = "cache_batch_idx", .ptr = c->cache_batch_idx};
        b->t[nt++] = (kiln_launch_tensor){.name = "cache_leftpad", .ptr = c->cache_leftpad};
        b->s[n++] = (kiln_launch_scalar){"page_size", c->page_size};
        b->s[n++] = (kiln_launch_scalar){"max_blocks", c->max_blocks};
        b->s[n++] = (kiln_launch_scalar){"num_blocks", c->num_blocks};
        if (c->k_new) {
            const int64_t *sk = c->stride_k_new, *sv = c->stride_v_new;
            b->t[nt] = (kiln_launch_tensor){.name = "k_new", .ptr = c->k_new};
            if (sk[0] || sk[1] || sk[2]) memcpy(b->t[nt].strides, (int64_t[4]){sk[0], sk[1], sk[2], 1}, sizeof b->t[nt].strides);
            b->t[++nt] = (kiln_launch_tensor){.name = "v_new", .ptr = c->v_new};
            if (sv[0] || sv[1] || sv[2]) memcpy(b->t[nt].strides, (int64_t[4]){sv[0], sv[1], sv[2], 1}, sizeof b->t[nt].strides);
            nt++;
            b->s[n++] = (kiln_launch_scalar){"seqlen_new", c->seqlen_new};
            if (c->rotary) {
                b->t[nt++] = (kiln_launch_tensor){.name = "rotary_cos", .ptr = c->rotary_cos};
                b->t[nt++] = (kiln_launch_tensor){.name = "rotary_sin", .ptr = c->rotary_sin};
                b->s[n++] = (kiln_launch_scalar){"seqlen_ro", c->seqlen_ro};
            }
        }
    } else {
        b->s[n++] = (kiln_launch_scalar){"seq_k", a->seq_k};
    }
    if (a->scale > 0) b->s[n++] = (kiln_launch_scalar){"scale", a->scale};
    if (splits) b->s[n++] = (kiln_launch_scalar){"splits", splits};
    rt_attn_mask_launch(&a->mask, b->t, &nt, b->s, &n);
    return (kiln_launch_args){.tensors = b->t, .ntensors = nt, .scalars = b->s, .nscalars = n, .workspace = ws,
                              .workspace_bytes = ws_bytes, .stream = a->stream};
}

kiln_status kiln_attention_forward(kiln_rt *rt, const kiln_attention_args *a, kiln_error *err) {
    kiln_kernel *k;
    if (!rt || !a) return kiln_fail(err, KILN_EINVAL, "kiln_attention_forward: NULL argument");
    kiln_status st = check_args(a, err);
    if (st != KILN_OK || a->batch == 0 || a->seq_q == 0) return st;
    if ((st = kiln_attention_pick(rt, a, &k, err)) != KILN_OK || (st = check_page(a, k, err)) != KILN_OK) return st;
    launch_buf b;
    kiln_launch_args la = launch_args(a, &b, 0, 0, 0);
    return kiln_launch(k, &la, err);
}

/* ---- split-KV decoding ---- */

/* The split kernel and the combine kernel its metadata names (then_spec). */
static kiln_status pick_splitkv(kiln_rt *rt, const kiln_attention_args *a, kiln_kernel *out[2], kiln_error *err) {
    char spec[KILN_SPEC_MAX];
    rt_attn_spec(a, 1, spec, sizeof spec);
    kiln_status st = kiln_rt_get_kernel(rt, spec, &out[0], err);
    if (st != KILN_OK) return st;
    if (!out[0]->meta.then_spec[0])
        return kiln_fail(err, KILN_ECORRUPT, "kernel '%s' writes split-KV partials but names no kernel to combine them",
                         out[0]->meta.entry);
    return kiln_rt_get_kernel(rt, out[0]->meta.then_spec, &out[1], err);
}

static uint64_t ceil_div_u64(uint64_t a, uint64_t b) { return b ? (a + b - 1) / b : a; }

/* Blocks of the split kernel per split: kv heads x blocks of packed (query head, query) rows x batch. */
static uint64_t split_blocks(const kiln_attention_args *a, const kiln_kernel_meta *m) {
    uint64_t group = (uint64_t)(a->heads_q / a->heads_kv), bm = m->rows_per_block ? m->rows_per_block : 1;
    return (uint64_t)a->heads_kv * ceil_div_u64(group * (uint64_t)a->seq_q, bm) * (uint64_t)a->batch;
}

/* The automatic split count (docs/attention.md, "Split-KV decoding"): 1 (the plain kernel) unless this
 * is a decoding shape (seq_q <= 16, seq_k >= 256) whose plain grid has fewer blocks than the device has
 * SMs, or whose query heads share kv heads (GQA/MQA: the plain kernel reads each kv head's K and V once
 * per query head, the split kernel once per group); then enough splits for two split-kernel blocks per
 * SM, at least 2, at most one per 128 keys and 128 in all. */
static int auto_splits(kiln_rt *rt, const kiln_attention_args *a, const kiln_kernel_meta *plain,
                       const kiln_kernel_meta *split) {
    if (a->seq_q > KILN_ATTENTION_DECODE_MAX_SEQ_Q || a->seq_k < 256) return 1;
    int sms = kiln_rt_device(rt)->multiprocessors;
    uint64_t sm = (uint64_t)(sms > 0 ? sms : 1);
    uint64_t tile = plain->grid_tile[0] ? plain->grid_tile[0] : 1;
    uint64_t blocks = ceil_div_u64((uint64_t)a->seq_q, tile) * (uint64_t)a->heads_q * (uint64_t)a->batch;
    if (blocks >= sm && a->heads_q == a->heads_kv) return 1;
    uint64_t per = split_blocks(a, split), want = ceil_div_u64(2 * sm, per), by_keys = (uint64_t)a->seq_k / 128;
    if (want < 2) want = 2;
    if (want > by_keys) want = by_keys;
    if (want > 128) want = 128;
    return want > 1 ? (int)want : 1;
}

kiln_status kiln_attention_forward_workspace(kiln_rt *rt, const kiln_attention_args *a, int splits, int *chosen,
                                             size_t *bytes, kiln_error *err) {
    if (!rt || !a || !bytes) return kiln_fail(err, KILN_EINVAL, "kiln_attention_forward_workspace: NULL argument");
    *bytes = 0;
    if (chosen) *chosen = 1;
    kiln_status st = check_args(a, err);
    if (st != KILN_OK) return st;
    if (splits < 0 || splits > KILN_ATTENTION_MAX_SPLITS)
        return kiln_fail(err, KILN_EINVAL, "attention: splits (%d) must be 0 (automatic) or 1..%d", splits,
                         KILN_ATTENTION_MAX_SPLITS);
    if (a->batch == 0 || a->seq_q == 0) return KILN_OK;
    if (a->mask.dropout_p > 0 && splits > 1)
        return kiln_fail(err, KILN_EINVAL, "attention: dropout runs on the plain kernel only (split-KV is for "
                         "decoding); give splits 0 or 1");
    kiln_kernel *plain, *two[2];
    if (splits == 0 && a->mask.dropout_p > 0) splits = 1; /* training: never split-KV */
    if (splits == 0) {
        /* only decoding shapes are worth the split kernels: others never look them up (no generation,
         * no bundle entry needed); where none is found (a bundle without them, no generator) the plain
         * kernel runs */
        splits = 1;
        if (a->seq_q <= KILN_ATTENTION_DECODE_MAX_SEQ_Q && a->seq_k >= 256) {
            if ((st = kiln_attention_pick(rt, a, &plain, err)) != KILN_OK) return st;
            kiln_error quiet;
            st = pick_splitkv(rt, a, two, &quiet);
            if (st == KILN_OK) splits = auto_splits(rt, a, &plain->meta, &two[0]->meta);
            else if (st != KILN_ENOTFOUND) return kiln_fail(err, st, "%s", quiet.msg);
        }
    }
    if (chosen) *chosen = splits;
    if (splits > 1) {
        if ((st = pick_splitkv(rt, a, two, err)) != KILN_OK || (st = check_page(a, two[0], err)) != KILN_OK) return st;
        launch_buf b;
        kiln_launch_args la = launch_args(a, &b, splits, 0, 0);
        return kiln_launch_workspace(two[0], &la, bytes, err);
    }
    return KILN_OK;
}

kiln_status kiln_attention_forward_splitkv(kiln_rt *rt, const kiln_attention_args *a, int splits, kiln_devptr workspace,
                                           size_t workspace_bytes, kiln_error *err) {
    if (!rt || !a) return kiln_fail(err, KILN_EINVAL, "kiln_attention_forward_splitkv: NULL argument");
    int n;
    size_t need;
    kiln_status st = kiln_attention_forward_workspace(rt, a, splits, &n, &need, err);
    if (st != KILN_OK || a->batch == 0 || a->seq_q == 0) return st;
    if (n <= 1) return kiln_attention_forward(rt, a, err);
    if (!workspace || workspace_bytes < need)
        return kiln_fail(err, KILN_EINVAL, "attention split-KV: %d splits need a workspace of %zu bytes (splits x batch x "
                         "heads_q x seq_q x (head_dim + 1) x 4), got %zu at 0x%llx (kiln_attention_forward_workspace)",
                         n, need, workspace_bytes, (unsigned long long)workspace);
    if (workspace % 16)
        return kiln_fail(err, KILN_EINVAL, "attention split-KV: workspace (0x%llx) must be 16-byte aligned",
                         (unsigned long long)workspace);
    kiln_kernel *k[2];
    if ((st = pick_splitkv(rt, a, k, err)) != KILN_OK) return st;
    launch_buf b;
    kiln_launch_args la = launch_args(a, &b, n, workspace, workspace_bytes);
    return kiln_launch(k[0], &la, err); /* the split kernel, then its meta.then_spec */
}
