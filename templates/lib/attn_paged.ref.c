/* templates/lib/attn_paged.ref.c - the paged KV cache of attention's reference (paged=true, append=true): shuffled pages, per-sequence lengths, appended keys, the float64 reference and check per sequence. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu.h"
#include "attention.ref.h"
#include "kiln/emu_case.h"

/* The cache of a case (templates/lib/attn_paged.lua has the layout): pages [num_blocks, page_size,
 * heads_kv, d] in k and v, block_table [batch, max_blocks], cache_seqlens, and optionally
 * cache_batch_idx and cache_leftpad. */
struct emu_paged {
    int page_size, max_blocks, num_blocks, key_tile;
    int32_t *table, *seqlens, *bidx, *leftpad;
    void *k, *v;
    /* append=true: seqlen_new new keys per entry (kn, vn [batch, seqlen_new, heads_kv, d]); the cache as
     * drawn (k0, v0: restored before each run) and as it must be after the run (kx, vx) */
    int seqlen_new;
    void *kn, *vn, *k0, *v0, *kx, *vx;
    /* rotary=neox|interleaved (with append): the tables, and q rotated as the kernel rotates it */
    emu_rope rope;
    void *qr;
};

/* The kernel's keys per tile: the fixed scalar key_tile of its launch description (0 if absent). */
static int key_tile_of(const kiln_kernel_meta *m) {
    const char *at = strstr(m->launch, "scalar key_tile =");
    return at ? atoi(at + strlen("scalar key_tile =")) : 0;
}

/* Whether page_size is one the launch takes: >= 16 and a multiple or a divisor of the key tile. */
int emu_paged_valid_page(int page_size, int key_tile) {
    return page_size >= 16 && key_tile > 0 && (page_size % key_tile == 0 || key_tile % page_size == 0);
}

static size_t page_elems(const kiln_attn_problem *p, const emu_paged *c) {
    return (size_t)c->num_blocks * (size_t)c->page_size * (size_t)p->heads_kv * (size_t)p->head_dim;
}

void emu_paged_free(emu_paged *c) {
    if (!c) return;
    free(c->table), free(c->seqlens), free(c->bidx), free(c->leftpad), free(c->k), free(c->v);
    free(c->kn), free(c->vn), free(c->k0), free(c->v0), free(c->kx), free(c->vx);
    emu_rope_free(&c->rope), free(c->qr);
    free(c);
}

/* Draws the cache: capacity max_blocks * page_size >= seq_k (the --seq-k option); entry 0 full,
 * entry 1 empty (cache_seqlens 0), the others drawn in 1..capacity; leftpad (--leftpad) a third of
 * each length; cache_batch_idx (--batch-idx) the rotation b -> (b + 1) % batch; every block-table
 * entry a page of one random permutation (shuffled pages; the unused entries valid pages too), the
 * pages random values, so a key read from the wrong page or past a sequence shows. */
static kiln_status draw(const kiln_case_opts *o, const kiln_attn_problem *p, emu_paged *c, uint64_t *seed,
                        kiln_error *err) {
    int B = p->batch;
    c->max_blocks = (p->seq_k + c->page_size - 1) / c->page_size;
    c->num_blocks = B * c->max_blocks + 1;
    int cap = c->max_blocks * c->page_size;
    c->table = malloc(sizeof *c->table * (size_t)B * (size_t)c->max_blocks);
    c->seqlens = malloc(sizeof *c->seqlens * (size_t)B);
    if (kiln_case_opts_get(o, "leftpad", 0)) c->leftpad = malloc(sizeof *c->leftpad * (size_t)B);
    if (kiln_case_opts_get(o, "batch_idx", 0)) c->bidx = malloc(sizeof *c->bidx * (size_t)B);
    int *perm = malloc(sizeof *perm * (size_t)c->num_blocks);
    c->k = kiln_attn_random(p->dtype, page_elems(p, c), 1, seed);
    c->v = kiln_attn_random(p->dtype, page_elems(p, c), 1, seed);
    if (!c->table || !c->seqlens || !perm || !c->k || !c->v || (kiln_case_opts_get(o, "leftpad", 0) && !c->leftpad) ||
        (kiln_case_opts_get(o, "batch_idx", 0) && !c->bidx)) {
        free(perm);
        return kiln_fail(err, KILN_ENOMEM, "out of memory");
    }
    for (int i = 0; i < c->num_blocks; i++) perm[i] = i;
    for (int i = c->num_blocks - 1; i > 0; i--) { /* Fisher-Yates with splitmix64 */
        uint64_t z = (*seed += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        int j = (int)((z ^ (z >> 31)) % (uint64_t)(i + 1)), t = perm[i];
        perm[i] = perm[j], perm[j] = t;
    }
    for (int i = 0; i < B * c->max_blocks; i++) c->table[i] = perm[i];
    free(perm);
    if (c->seqlen_new > cap)
        return kiln_fail(err, KILN_EINVAL, "--append %d does not fit a cache of %d keys (--seq-k is the capacity)",
                         c->seqlen_new, cap);
    for (int b = 0; b < B; b++) {
        uint64_t z = (*seed += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 29)) * 0xbf58476d1ce4e5b9ull;
        int room = cap - c->seqlen_new; /* append=true: the new keys must fit */
        c->seqlens[b] = b == 0 ? room : b == 1 || room == 0 ? 0 : 1 + (int)((z ^ (z >> 32)) % (uint64_t)room);
        if (c->leftpad) c->leftpad[b] = c->seqlens[b] / 3;
        if (c->bidx) c->bidx[b] = (b + 1) % B;
    }
    return KILN_OK;
}

/* Entry b's keys and values gathered into contiguous [len, heads_kv, d] arrays (the reference's
 * layout), through its block-table row and leftpad. */
static void gather(const kiln_attn_problem *p, const emu_paged *c, int b, int len, void *k, void *v) {
    const void *ks = c->kx ? c->kx : c->k, *vs = c->vx ? c->vx : c->v;
    size_t es = kiln_dtype_size(p->dtype), row = (size_t)p->heads_kv * (size_t)p->head_dim * es;
    const int32_t *t = c->table + (size_t)(c->bidx ? c->bidx[b] : b) * (size_t)c->max_blocks;
    int lp = c->leftpad ? c->leftpad[b] : 0;
    for (int j = 0; j < len; j++) {
        int pos = lp + j;
        size_t at = ((size_t)t[pos / c->page_size] * (size_t)c->page_size + (size_t)(pos % c->page_size)) * row;
        memcpy((char *)k + (size_t)j * row, (const char *)ks + at, row);
        memcpy((char *)v + (size_t)j * row, (const char *)vs + at, row);
    }
}

/* Entry b as a problem of its own: batch 1, its key count, contiguous strides. */
static kiln_attn_problem entry(const kiln_attn_problem *p, const emu_paged *c, int b) {
    kiln_attn_problem e = *p;
    e.batch = 1;
    e.seq_k = c->seqlens[b] + c->seqlen_new - (c->leftpad ? c->leftpad[b] : 0);
    kiln_attn_default_strides(&e);
    return e;
}

static void expect_append(const kiln_attn_problem *p, emu_paged *c);

/* append=true: the new keys and values, the cache as drawn (restored before each run) and the cache the
 * run must leave: the new rows at positions cache_seqlens[b] .. + seqlen_new - 1 of entry b's pages
 * (with rotary, the keys rotated at those positions). */
static kiln_status draw_append(const kiln_attn_problem *p, emu_paged *c, uint64_t *seed, kiln_error *err) {
    size_t es = kiln_dtype_size(p->dtype);
    size_t nn = (size_t)p->batch * (size_t)c->seqlen_new * (size_t)p->heads_kv * (size_t)p->head_dim,
           bytes = page_elems(p, c) * es;
    c->kn = kiln_attn_random(p->dtype, nn, 1, seed), c->vn = kiln_attn_random(p->dtype, nn, 1, seed);
    c->k0 = malloc(bytes), c->v0 = malloc(bytes), c->kx = malloc(bytes), c->vx = malloc(bytes);
    if (!c->kn || !c->vn || !c->k0 || !c->v0 || !c->kx || !c->vx) return kiln_fail(err, KILN_ENOMEM, "out of memory");
    memcpy(c->k0, c->k, bytes), memcpy(c->v0, c->v, bytes);
    expect_append(p, c);
    return KILN_OK;
}

/* The cache the run must leave (kx, vx): the cache as drawn (k0, v0) with the new rows written. */
static void expect_append(const kiln_attn_problem *p, emu_paged *c) {
    size_t es = kiln_dtype_size(p->dtype), row = (size_t)p->heads_kv * (size_t)p->head_dim * es, bytes = page_elems(p, c) * es;
    memcpy(c->kx, c->k0, bytes), memcpy(c->vx, c->v0, bytes);
    for (int b = 0; b < p->batch; b++) {
        const int32_t *t = c->table + (size_t)(c->bidx ? c->bidx[b] : b) * (size_t)c->max_blocks;
        for (int i = 0; i < c->seqlen_new; i++) {
            int pos = c->seqlens[b] + i;
            size_t at = ((size_t)t[pos / c->page_size] * (size_t)c->page_size + (size_t)(pos % c->page_size)) * row;
            size_t from = ((size_t)b * (size_t)c->seqlen_new + (size_t)i) * row;
            memcpy((char *)c->kx + at, (const char *)c->kn + from, row);
            memcpy((char *)c->vx + at, (const char *)c->vn + from, row);
            for (int h = 0; c->rope.cos && h < p->heads_kv; h++)
                emu_rope_row(&c->rope, p->dtype, (char *)c->kx + at + (size_t)h * (size_t)p->head_dim * es, pos);
        }
    }
}

static void rotate_q(emu_paged *c, const kiln_attn_problem *p, const void *q);

/* rotary: the tables (seqlen_ro two short of the cache's capacity, so the fullest entry's last new
 * keys lie past the table and stay unrotated) and q rotated: query i of entry b at cache_seqlens[b]
 * + i when causal or windowed, else at cache_seqlens[b] (lib/attn_rotary.lua). */
static kiln_status rope_draw(emu_paged *c, const kiln_attn_problem *p, const void *q, uint64_t *seed, kiln_error *err) {
    int cap = c->max_blocks * c->page_size;
    kiln_status st = emu_rope_draw(&c->rope, cap > 2 ? cap - 2 : cap, seed, err);
    if (st != KILN_OK) return st;
    size_t es = kiln_dtype_size(p->dtype), d = (size_t)p->head_dim;
    size_t n = (size_t)p->batch * (size_t)p->seq_q * (size_t)p->heads_q * d;
    if (!(c->qr = malloc(n * es + 1))) return kiln_fail(err, KILN_ENOMEM, "out of memory");
    rotate_q(c, p, q);
    return KILN_OK;
}

/* qr: q rotated as the kernel rotates it. */
static void rotate_q(emu_paged *c, const kiln_attn_problem *p, const void *q) {
    size_t es = kiln_dtype_size(p->dtype), d = (size_t)p->head_dim;
    memcpy(c->qr, q, (size_t)p->batch * (size_t)p->seq_q * (size_t)p->heads_q * d * es);
    for (int b = 0; b < p->batch; b++)
        for (int i = 0; i < p->seq_q; i++)
            for (int h = 0; h < p->heads_q; h++) {
                size_t at = (((size_t)b * (size_t)p->seq_q + (size_t)i) * (size_t)p->heads_q + (size_t)h) * d * es;
                emu_rope_row(&c->rope, p->dtype, (char *)c->qr + at, c->seqlens[b] + (p->causal || p->window ? i : 0));
            }
}

void emu_paged_prepare(emu_paged *c, const kiln_attn_problem *p) {
    if (!c->k0) return;
    memcpy(c->k, c->k0, page_elems(p, c) * kiln_dtype_size(p->dtype));
    memcpy(c->v, c->v0, page_elems(p, c) * kiln_dtype_size(p->dtype));
}

static kiln_status reference(emu_paged *c, const kiln_attn_problem *p, const void *q, double *ro, double *rl, kiln_error *err);

kiln_status emu_paged_create(const kiln_case *cs, const kiln_attn_problem *p, const void *q, double *ro, double *rl,
                             uint64_t *seed, emu_paged **out, kiln_error *err) {
    const kiln_case_opts *o = kiln_case_options(cs);
    emu_paged *c = calloc(1, sizeof *c);
    if (!(*out = c)) return kiln_fail(err, KILN_ENOMEM, "out of memory");
    c->key_tile = key_tile_of(kiln_emu_kernel_meta(kiln_case_kernel(cs)));
    c->page_size = (int)kiln_case_opts_get(o, "page_size", 0);
    if (!c->page_size) return kiln_fail(err, KILN_EINVAL, "paged=true needs the page size: give --paged P (e.g. --paged 16)");
    if (!emu_paged_valid_page(c->page_size, c->key_tile))
        return kiln_fail(err, KILN_EINVAL,
                         "page size %d does not fit this kernel's %d-key tiles; valid: 16..%d dividing %d, or a multiple of %d",
                         c->page_size, c->key_tile, c->key_tile, c->key_tile, c->key_tile);
    int append = strstr(kiln_emu_kernel_meta(kiln_case_kernel(cs))->spec, " append=true") != NULL;
    c->seqlen_new = (int)kiln_case_opts_get(o, "append", 0);
    if (append != (c->seqlen_new > 0))
        return kiln_fail(err, KILN_EINVAL, append ? "append=true needs the new keys per sequence: give --append N (N >= 1)"
                                                  : "--append applies to append=true (add it to the attention spec)");
    kiln_status st = draw(o, p, c, seed, err);
    if (st != KILN_OK) return st;
    if (emu_rope_parse(kiln_emu_kernel_meta(kiln_case_kernel(cs))->spec, p->head_dim, p->dtype, &c->rope) &&
        (st = rope_draw(c, p, q, seed, err)) != KILN_OK)
        return st;
    if (append && (st = draw_append(p, c, seed, err)) != KILN_OK) return st;
    return reference(c, p, q, ro, rl, err);
}

/* ro, rl: the float64 reference entry by entry (q as given; rotated into qr first with rotary). */
static kiln_status reference(emu_paged *c, const kiln_attn_problem *p, const void *q, double *ro, double *rl, kiln_error *err) {
    kiln_status st = KILN_OK;
    if (c->qr) q = c->qr;
    size_t row = (size_t)p->heads_kv * (size_t)p->head_dim * kiln_dtype_size(p->dtype);
    size_t qe = (size_t)p->seq_q * (size_t)p->heads_q * (size_t)p->head_dim, le = (size_t)p->heads_q * (size_t)p->seq_q;
    void *k = malloc(row * (size_t)c->max_blocks * (size_t)c->page_size + 1),
         *v = malloc(row * (size_t)c->max_blocks * (size_t)c->page_size + 1);
    for (int b = 0; st == KILN_OK && k && v && b < p->batch; b++) {
        kiln_attn_problem e = entry(p, c, b);
        double *o_b = ro + (size_t)b * qe, *l_b = rl + (size_t)b * le;
        if (e.seq_k == 0) { /* no key: O = 0 and lse = +inf, as FlashAttention-2 writes an empty row */
            for (size_t i = 0; i < qe; i++) o_b[i] = 0;
            for (size_t i = 0; i < le; i++) l_b[i] = INFINITY;
            continue;
        }
        gather(p, c, b, e.seq_k, k, v);
        st = kiln_attn_reference(&e, (const char *)q + (size_t)b * qe * kiln_dtype_size(p->dtype), k, v, o_b, l_b, err);
    }
    if (st == KILN_OK && (!k || !v)) st = kiln_fail(err, KILN_ENOMEM, "out of memory");
    free(k), free(v);
    return st;
}

kiln_status emu_paged_refresh(emu_paged *c, const kiln_attn_problem *p, const void *q, double *ro, double *rl, kiln_error *err) {
    if (c->k0) {
        size_t bytes = page_elems(p, c) * kiln_dtype_size(p->dtype);
        memcpy(c->k0, c->k, bytes), memcpy(c->v0, c->v, bytes);
        expect_append(p, c);
    }
    if (c->qr) rotate_q(c, p, q);
    return reference(c, p, q, ro, rl, err);
}

int emu_paged_tensor(const emu_paged *c, const kiln_attn_problem *p, const char *name, void **ptr, size_t *bytes) {
    size_t B = (size_t)p->batch;
    if (!strcmp(name, "k")) *ptr = c->k, *bytes = page_elems(p, c) * kiln_dtype_size(p->dtype);
    else if (!strcmp(name, "v")) *ptr = c->v, *bytes = page_elems(p, c) * kiln_dtype_size(p->dtype);
    else if (!strcmp(name, "block_table")) *ptr = c->table, *bytes = B * (size_t)c->max_blocks * sizeof(int32_t);
    else if (!strcmp(name, "cache_seqlens")) *ptr = c->seqlens, *bytes = B * sizeof(int32_t);
    else if (!strcmp(name, "cache_batch_idx")) *ptr = c->bidx, *bytes = c->bidx ? B * sizeof(int32_t) : 0;
    else if (!strcmp(name, "cache_leftpad")) *ptr = c->leftpad, *bytes = c->leftpad ? B * sizeof(int32_t) : 0;
    else if (c->kn && (!strcmp(name, "k_new") || !strcmp(name, "v_new")))
        *ptr = name[0] == 'k' ? c->kn : c->vn,
        *bytes = B * (size_t)c->seqlen_new * (size_t)p->heads_kv * (size_t)p->head_dim * kiln_dtype_size(p->dtype);
    else if (c->rope.cos && (!strcmp(name, "rotary_cos") || !strcmp(name, "rotary_sin")))
        *ptr = name[7] == 'c' ? c->rope.cos : c->rope.sin,
        *bytes = (size_t)c->rope.seqlen_ro * (size_t)(c->rope.rdim / 2) * kiln_dtype_size(c->rope.cs);
    else return -1;
    return 0;
}

int emu_paged_scalar(const emu_paged *c, const char *name, double *value) {
    if (!strcmp(name, "page_size")) return *value = c->page_size, 0;
    if (!strcmp(name, "max_blocks")) return *value = c->max_blocks, 0;
    if (!strcmp(name, "num_blocks")) return *value = c->num_blocks, 0;
    if (!strcmp(name, "seqlen_new")) return *value = c->seqlen_new, 0;
    if (c->rope.cos && !strcmp(name, "seqlen_ro")) return *value = c->rope.seqlen_ro, 0;
    return -1;
}

/* Checks every entry against its own reference with attention's error model (an empty entry:
 * O exactly 0, lse +inf); out[0] is o, out[1] lse. */
int emu_paged_check(const emu_paged *c, const kiln_attn_problem *p, const void *q, const void *o, const float *lse,
                    const double *ro, const double *rl, kiln_case_output *out) {
    size_t qe = (size_t)p->seq_q * (size_t)p->heads_q * (size_t)p->head_dim, le = (size_t)p->heads_q * (size_t)p->seq_q;
    size_t row = (size_t)p->heads_kv * (size_t)p->head_dim * kiln_dtype_size(p->dtype), es = kiln_dtype_size(p->dtype);
    if (c->qr) q = c->qr; /* rotary: the reference's q is the rotated one */
    void *k = malloc(row * (size_t)c->max_blocks * (size_t)c->page_size + 1),
         *v = malloc(row * (size_t)c->max_blocks * (size_t)c->page_size + 1);
    for (int b = 0; k && v && b < p->batch; b++) {
        kiln_attn_problem e = entry(p, c, b);
        const void *o_b = (const char *)o + (size_t)b * qe * kiln_dtype_size(p->out);
        const float *l_b = lse + (size_t)b * le;
        if (e.seq_k == 0) {
            for (size_t i = 0; i < qe; i++)
                kiln_check_value(&out[0], kiln_emu_value_get(p->out, o_b, i), 0, 0, 0, 0, "o[b=%d elem %zu] (no key)", b, i);
            for (size_t i = 0; i < le; i++)
                kiln_check_value(&out[1], (double)l_b[i], INFINITY, 0, INFINITY, 0, "lse[b=%d elem %zu] (no key)", b, i);
            continue;
        }
        gather(p, c, b, e.seq_k, k, v);
        kiln_attn_report r;
        kiln_attn_check(&e, p->dtype, (const char *)q + (size_t)b * qe * es, k, v, o_b, l_b, ro + (size_t)b * qe,
                        rl + (size_t)b * le, &r);
        for (int i = 0; i < 2; i++) {
            if (r.max_abs[i] > out[i].max_abs) out[i].max_abs = r.max_abs[i];
            if (r.worst[i] > out[i].worst) out[i].worst = r.worst[i];
            if (r.bad[i] && !out[i].bad) snprintf(out[i].first, sizeof out[i].first, "batch %d: %.220s", b, r.first[i]);
            out[i].bad += r.bad[i];
        }
    }
    if (!k || !v) out[0].bad++, snprintf(out[0].first, sizeof out[0].first, "out of memory in the paged check");
    free(k), free(v);
    if (!c->kx) return 2;
    /* append=true: the cache after the run, bit for bit: the new rows where they belong, every other
     * value as drawn (a write outside the appended rows shows here) */
    size_t n = page_elems(p, c), per = (size_t)c->page_size * (size_t)p->heads_kv * (size_t)p->head_dim;
    for (int t = 0; t < 2; t++)
        for (size_t i = 0; i < n; i++) {
            double want = kiln_emu_value_get(p->dtype, t ? c->vx : c->kx, i);
            kiln_check_value(&out[2], kiln_emu_value_get(p->dtype, t ? c->v : c->k, i), want, 0, want, 0,
                             "%s cache page %zu row %zu elem %zu", t ? "v" : "k", i / per,
                             (i % per) / ((size_t)p->heads_kv * (size_t)p->head_dim),
                             i % ((size_t)p->heads_kv * (size_t)p->head_dim));
        }
    return 3;
}

void emu_paged_describe(const emu_paged *c, char *buf, size_t size) {
    size_t n = strlen(buf);
    if (n < size)
        snprintf(buf + n, size - n, "  pages of %d (%d, shuffled)%s%s", c->page_size, c->num_blocks,
                 c->leftpad ? "  leftpad" : "", c->bidx ? "  batch_idx" : "");
    n = strlen(buf);
    if (c->seqlen_new && n < size) snprintf(buf + n, size - n, "  append %d", c->seqlen_new);
    n = strlen(buf);
    if (c->rope.cos && n < size)
        snprintf(buf + n, size - n, "  rotary %s %d (%s tables of %d)", c->rope.interleaved ? "interleaved" : "neox",
                 c->rope.rdim, kiln_dtype_name(c->rope.cs), c->rope.seqlen_ro);
}
