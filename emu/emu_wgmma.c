/* emu/emu_wgmma.c - wgmma on the emulator: the kiln.wgmma.* pseudo-intrinsics (gen/gen_hopper.c) by the
 * PTX ISA's definitions - mma_async m64nNk16 f16/bf16 -> f32 with A from registers or shared memory and B
 * from shared memory through matrix descriptors and their swizzles, the descriptor itself, the wait that
 * hands the accumulators back - and the per-thread state that wgmma fence/commit/wait keep. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu.h"

/* An mma_async is a warpgroup operation: each of the 128 threads deposits its operands (accumulators,
 * A fragments) in the record of its warpgroup's k-th wgmma; the last one to arrive computes the 64 x N
 * result from shared memory as it is then (the issue), and every thread gets tokens back instead of
 * numbers. A token is a signalling NaN whose payload names the wgmma and the element: passed on as acc
 * of a later wgmma (a chain) or through a wait that covers its group it becomes the number; arithmetic
 * on it quiets it, which the next wgmma or wait reports as a register touched in flight, and a token
 * that is read without a wait ends up as NaN in the output. */
enum { WG_THREADS = 128, WG_MAX = EMU_MAX_THREADS / WG_THREADS, WG_RING = 64, WG_GROUPS = 64 };
enum { OP_N = 0x1ff, OP_BF16 = 0x200, OP_RS = 0x400, OP_WAIT = 0x800, OP_DESC = 0x1000, OP_TB = 0x2000 };

#define TOKEN_BASE 0x7fa00000u /* exponent all ones, quiet bit clear, bit 21 set: a signalling NaN */
static uint32_t token(uint32_t seq, unsigned e) { return TOKEN_BASE | (seq & 0x3fffu) << 7 | e; }
static bool is_token(uint32_t b) { return (b & 0xffe00000u) == TOKEN_BASE; }
static bool is_touched(uint32_t b) { return (b & 0x7fa00000u) == TOKEN_BASE && !is_token(b); }
/* The full number of the wgmma a token names: the latest one before `before` with its 14 bits. */
static uint32_t token_seq(uint32_t b, uint32_t before) {
    return before - 1 - ((before - 1 - (b >> 7)) & 0x3fffu);
}

typedef struct wg_rec {
    bool used, done;
    uint32_t seq;
    unsigned arrived, m, cap;
    int op;
    uint64_t da, db;
    uint32_t scale;
    unsigned first; /* the first thread that issued it */
    uint32_t a[WG_THREADS][4];
    uint32_t *c; /* [WG_THREADS][m]: the accumulator operands' bits */
    float *d;    /* [WG_THREADS][m]: the results */
} wg_rec;

typedef struct wg_thr {
    uint32_t seq;                  /* mma_async issued so far */
    bool fenced;                   /* a wgmma.fence since the start or the last wait_group */
    uint32_t committed, done;      /* groups committed; groups a wait has covered */
    uint32_t done_seq;             /* the wgmma before this one are covered */
    uint32_t group_end[WG_GROUPS]; /* seq after group g % WG_GROUPS */
} wg_thr;

static _Thread_local wg_thr thr[EMU_MAX_THREADS];
static _Thread_local wg_rec *recs[WG_MAX][WG_RING];

void emu_wgmma_block_begin(void) {
    memset(thr, 0, sizeof thr);
    for (int w = 0; w < WG_MAX; w++)
        for (int i = 0; i < WG_RING; i++)
            if (recs[w][i]) recs[w][i]->used = false;
}

/* ---- fence, commit, wait: per thread ---- */

void emu_wgmma_fence(emu_call *c) { thr[c->t->id].fenced = true; }

void emu_wgmma_commit(emu_call *c) {
    wg_thr *t = &thr[c->t->id];
    if (t->committed - t->done >= WG_GROUPS)
        emu_fault(c->blk, "%s: more than %d wgmma groups pending (wait_group first)", c->site->where, WG_GROUPS);
    t->group_end[t->committed++ % WG_GROUPS] = t->seq;
}

/* wait_group n: every group but the newest n is complete; the next mma_async needs a fence again. */
void emu_wgmma_wait(emu_call *c, uint32_t n) {
    wg_thr *t = &thr[c->t->id];
    if (n > 7) emu_fault(c->blk, "%s: wgmma.wait_group %u outside 0..7", c->site->where, n);
    if (t->committed - t->done > n) {
        t->done = t->committed - n;
        t->done_seq = t->group_end[(t->done - 1) % WG_GROUPS];
    }
    emu_hb *hb = emu_block_hb(c->blk); /* the race mode: the operand reads of the covered wgmma come before */
    if (hb) emu_hb_unit_acquire(hb, c->t->id, emu_hb_wgmma_slot(hb, c->t->id / WG_THREADS), t->done_seq);
    t->fenced = false;
}

/* ---- records ---- */

static wg_rec *rec_slot(emu_call *c, unsigned wg, uint32_t seq) {
    wg_rec **p = &recs[wg][seq % WG_RING];
    if (!*p && !(*p = calloc(1, sizeof **p))) emu_fault(c->blk, "%s: out of memory", c->site->where);
    return *p;
}

/* The finished or pending record of wgmma seq of warpgroup wg, or a fault naming what. */
static wg_rec *rec_find(emu_call *c, unsigned wg, uint32_t seq, const char *what) {
    wg_rec *r = recs[wg][seq % WG_RING];
    if (!r || !r->used || r->seq != seq)
        emu_fault(c->blk, "%s: %s comes from wgmma #%u of warpgroup %u, whose result is gone (more than %d "
                  "wgmma.mma_async in flight, or a value from another block run)", c->site->where, what, seq, wg, WG_RING);
    return r;
}

/* ---- shared-memory matrices through descriptors ---- */

static float half_value(uint16_t h, bool bf) { return bf ? emu_bf16_to_f32(h) : emu_f16_to_f32(h); }

/* Reads rows x 16 (row r of M or N, column k) through descriptor d into out. The PTX ISA's layouts,
 * K-major: no swizzle: core matrices of 8 rows x 16 bytes, element (r, k) at start + (r/8) SBO + (k/8) LBO +
 * (r%8) 16 + (k%8) 2; swizzle 128/64/32B: rows of that many bytes, 8-row groups SBO apart, element at
 * start + (r/8) SBO + (r%8) W + 2k. MN-major (mn, imm-trans 1: the matrix stored [k][r], r contiguous):
 * no swizzle: core matrices of 8 k x 16 bytes (8 r), element at start + (r/8) SBO + (k/8) LBO + (k%8) 16 +
 * (r%8) 2; swizzle W: k-rows of W bytes (W/2 consecutive r), element at start + (r/(W/2)) LBO + (k/8) SBO +
 * (k%8) W + 2 (r%(W/2)). Then, swizzled, bits [4, 4+b) of the shared address XOR bits [7, 7+b) (b = 3, 2, 1). */
static void load_matrix(emu_call *c, uint64_t d, unsigned rows, bool bf, bool mn, const char *which, float *out) {
    uint32_t start = (uint32_t)(d & 0x3fff) << 4, lbo = (uint32_t)(d >> 16 & 0x3fff) << 4,
             sbo = (uint32_t)(d >> 32 & 0x3fff) << 4;
    unsigned base = (unsigned)(d >> 49 & 7), mode = (unsigned)(d >> 62);
    static const unsigned width[4] = {0, 128, 64, 32}, bits[4] = {0, 3, 2, 1};
    unsigned w = width[mode], mask = (1u << bits[mode]) - 1;
    if (base)
        emu_fault(c->blk, "%s: the %s descriptor has base offset %u; only 0 (a matrix at its swizzle pattern's "
                  "alignment) is implemented", c->site->where, which, base);
    if (w && (start >> 7 & mask))
        emu_fault(c->blk, "%s: the %s descriptor's %uB-swizzled matrix starts at shared address %u, not at a multiple "
                  "of %u plus an offset inside its first %u-byte row (misaligned)", c->site->where, which, w, start,
                  128u << bits[mode], w);
    unsigned char *smem = emu_shared_base(c->blk);
    emu_hb *hb = emu_block_hb(c->blk); /* the race mode: the operand must be ordered before the last issue */
    for (unsigned r = 0; r < rows; r++)
        for (unsigned k = 0; k < 16; k++) {
            uint32_t a = mn ? (w ? start + r / (w / 2) * lbo + k / 8 * sbo + k % 8 * w + r % (w / 2) * 2
                                 : start + r / 8 * sbo + k / 8 * lbo + k % 8 * 16 + r % 8 * 2)
                            : (w ? start + r / 8 * sbo + r % 8 * w + 2 * k
                                 : start + r / 8 * sbo + k / 8 * lbo + r % 8 * 16 + k % 8 * 2);
            if (w) a ^= (a >> 7 & mask) << 4;
            char what[160];
            snprintf(what, sizeof what, "%s: %s element (%u, %u) through its descriptor", c->site->where, which, r, k);
            emu_check_shared(c->blk, smem + a, 2, what);
            if (hb) { /* the race mode: what the last issuer sees, read by the warpgroup's wgmma unit */
                emu_hb_access(c->blk, hb, c->t->id, a, 2, EMU_HB_READ_PROBE, c->site->where);
                emu_hb_access(c->blk, hb, emu_hb_wgmma_slot(hb, c->t->id / WG_THREADS), a, 2, EMU_HB_READ_RECORD,
                              c->site->where);
            }
            uint16_t h;
            memcpy(&h, smem + a, 2);
            out[r * 16 + k] = half_value(h, bf);
        }
}

static uint64_t slot_u64(const unsigned char *slots, unsigned i) {
    uint64_t v;
    memcpy(&v, slots + (size_t)i * EMU_SLOT, sizeof v);
    return v;
}

/* The accumulator operand bits of thread lt as a number: a token becomes its wgmma's result. */
static float operand(emu_call *c, unsigned wg, const wg_rec *r, unsigned lt, unsigned i) {
    uint32_t b = r->c[lt * r->m + i];
    if (is_touched(b))
        emu_fault(c->blk, "%s: accumulator %u of thread %u was changed while its wgmma was in flight (read it only "
                  "through b:wgmma_wait)", c->site->where, i, wg * WG_THREADS + lt);
    if (!is_token(b)) {
        float f;
        memcpy(&f, &b, 4);
        return f;
    }
    const wg_rec *p = rec_find(c, wg, token_seq(b, r->seq), "an accumulator operand");
    unsigned e = b & 127;
    if (!p->done || e >= p->m)
        emu_fault(c->blk, "%s: accumulator %u of thread %u is not a finished wgmma result", c->site->where, i,
                  wg * WG_THREADS + lt);
    return p->d[lt * p->m + e];
}

/* D = A B (+ C): products exact, sums in double, one rounding to f32 (as emu_warp_mma.c's mma). The D
 * fragment: thread lt = 32w + 4g + q holds element i at row 16w + g + 8((i >> 1) & 1), column
 * 8(i >> 2) + 2q + (i & 1); A from registers is mma.m16n8k16's A per warp: register j holds row
 * 16w + g + 8(j & 1), columns 2q + 8(j >> 1) and the next. */
static void compute(emu_call *c, unsigned wg, wg_rec *r) {
    static _Thread_local float A[64 * 16], B[256 * 16];
    unsigned n = (unsigned)r->op & OP_N;
    bool bf = r->op & OP_BF16;
    emu_hb *hb = emu_block_hb(c->blk); /* the race mode: this wgmma's operand reads are its unit's epoch seq + 1 */
    if (hb) emu_hb_unit_epoch(hb, emu_hb_wgmma_slot(hb, wg), r->seq + 1);
    if (r->op & OP_RS) {
        for (unsigned lt = 0; lt < WG_THREADS; lt++) {
            unsigned w = lt / 32, g = lt % 32 >> 2, q = lt & 3;
            for (unsigned j = 0; j < 4; j++) {
                unsigned row = 16 * w + g + 8 * (j & 1), col = 2 * q + 8 * (j >> 1);
                A[row * 16 + col] = half_value((uint16_t)r->a[lt][j], bf);
                A[row * 16 + col + 1] = half_value((uint16_t)(r->a[lt][j] >> 16), bf);
            }
        }
    } else {
        load_matrix(c, r->da, 64, bf, false, "A", A);
    }
    load_matrix(c, r->db, n, bf, r->op & OP_TB, "B", B);
    for (unsigned lt = 0; lt < WG_THREADS; lt++) {
        unsigned w = lt / 32, g = lt % 32 >> 2, q = lt & 3;
        for (unsigned i = 0; i < r->m; i++) {
            unsigned row = 16 * w + g + 8 * ((i >> 1) & 1), col = 8 * (i >> 2) + 2 * q + (i & 1);
            double s = r->scale ? (double)operand(c, wg, r, lt, i) : 0.0;
            for (unsigned k = 0; k < 16; k++) s += (double)A[row * 16 + k] * (double)B[col * 16 + k];
            r->d[lt * r->m + i] = (float)s;
        }
    }
    r->done = true;
}

/* kiln.wgmma.m64n<N>k16.f32.<t>.<ss|rs>(acc x m, a (i64 | 4 x i32), b i64, scale_d i32) -> tokens. */
static void h_mma(emu_call *c) {
    int op = c->site->op->arg;
    unsigned n = (unsigned)op & OP_N, m = n / 2, id = c->t->id, wg = id / WG_THREADS, lt = id % WG_THREADS;
    wg_thr *t = &thr[id];
    if (!t->fenced)
        emu_fault(c->blk, "%s: wgmma.mma_async without a wgmma.fence before it (b:wgmma_fence first, and again after "
                  "each wgmma.wait_group)", c->site->where);
    if (emu_block_threads(c->blk) < (wg + 1) * WG_THREADS)
        emu_fault(c->blk, "%s: wgmma needs whole warpgroups of 128 threads, but the block has %u", c->site->where,
                  emu_block_threads(c->blk));
    unsigned ai = m, na = op & OP_RS ? 4 : 1;
    uint64_t da = op & OP_RS ? 0 : slot_u64(c->args, ai), db = slot_u64(c->args, ai + na);
    uint32_t scale = emu_slot_u32(c->args, ai + na + 1) != 0;
    uint32_t seq = t->seq++;
    wg_rec *r = rec_slot(c, wg, seq);
    if (!r->used || r->seq != seq) {
        if (r->cap < m) {
            free(r->c), free(r->d);
            r->c = malloc(WG_THREADS * m * sizeof *r->c), r->d = malloc(WG_THREADS * m * sizeof *r->d);
            if (!r->c || !r->d) emu_fault(c->blk, "%s: out of memory", c->site->where);
            r->cap = m;
        }
        r->used = true, r->done = false, r->seq = seq, r->arrived = 0, r->m = m, r->op = op;
        r->da = da, r->db = db, r->scale = scale, r->first = id;
    } else if (r->op != op || r->da != da || r->db != db || r->scale != scale) {
        emu_fault(c->blk, "%s: thread %u's wgmma #%u differs from thread %u's (shape, descriptors or scale-d): "
                  "wgmma.mma_async is .sync.aligned, the whole warpgroup issues the same one", c->site->where, id,
                  seq, r->first);
    }
    for (unsigned i = 0; i < m; i++) {
        uint32_t b = emu_slot_u32(c->args, i);
        if (is_touched(b))
            emu_fault(c->blk, "%s: accumulator %u was changed while its wgmma was in flight (read it only through "
                      "b:wgmma_wait)", c->site->where, i);
        r->c[lt * m + i] = b;
    }
    for (unsigned j = 0; j < 4; j++) r->a[lt][j] = op & OP_RS ? emu_slot_u32(c->args, ai + j) : 0;
    for (unsigned i = 0; i < m; i++) {
        uint32_t tk = token(seq, i);
        memcpy(c->ret + 4 * i, &tk, 4);
    }
    if (++r->arrived == WG_THREADS) {
        compute(c, wg, r);
        emu_wake_sleepers(c->blk);
    }
}

/* kiln.wgmma.wait.f32x<m>(n, values x m): wait_group n, then each value that is a token of a wgmma
 * the wait covers becomes its number (a token it does not cover is read too early: a fault). */
static void h_wait(emu_call *c) {
    unsigned m = (unsigned)c->site->op->arg & OP_N, id = c->t->id, wg = id / WG_THREADS, lt = id % WG_THREADS;
    uint32_t n = emu_slot_u32(c->args, 0);
    emu_wgmma_wait(c, n);
    wg_thr *t = &thr[id];
    for (unsigned i = 0; i < m; i++) {
        uint32_t b = emu_slot_u32(c->args, 1 + i);
        float v;
        memcpy(&v, &b, 4);
        if (is_touched(b))
            emu_fault(c->blk, "%s: value %u was changed while its wgmma was in flight (before the wait)",
                      c->site->where, i + 1);
        if (is_token(b)) {
            uint32_t s = token_seq(b, t->seq);
            if (s - t->done_seq < 0x80000000u) /* s >= done_seq */
                emu_fault(c->blk, "%s: value %u comes from wgmma #%u, which wgmma.wait_group %u does not cover (%s)",
                          c->site->where, i + 1, s,
                          n, t->committed == 0 || s >= t->group_end[(t->committed - 1) % WG_GROUPS]
                                 ? "it was never committed: b:wgmma_commit first"
                                 : "its group is still pending: wait with a smaller n");
            wg_rec *r;
            while (!(r = rec_find(c, wg, s, "a waited value"))->done) emu_sleep(c);
            unsigned e = b & 127;
            if (e >= r->m) emu_fault(c->blk, "%s: value %u names no element of its wgmma", c->site->where, i + 1);
            v = r->d[lt * r->m + e];
        }
        memcpy(c->ret + 4 * i, &v, 4);
    }
}

/* kiln.wgmma.desc(ptr addrspace(3), fields i64) -> the descriptor with the pointer's shared-window address. */
static void h_desc(emu_call *c) {
    unsigned char *p;
    memcpy(&p, c->args, sizeof p);
    emu_check_shared(c->blk, p, 16, c->site->where);
    size_t off = (size_t)(p - emu_shared_base(c->blk));
    if (off % 16) emu_fault(c->blk, "%s: matrix address (shared offset %zu) is not 16-byte aligned", c->site->where, off);
    uint64_t d = (uint64_t)(off >> 4 & 0x3fff) | slot_u64(c->args, 1);
    memcpy(c->ret, &d, sizeof d);
}

/* ---- the op table: every N, type and A source, built once ---- */

enum { NOPS = 1 + 32 * 8 + KILN_WGMMA_MAX_ACC };
static emu_op ops[NOPS];
static pthread_once_t ops_once = PTHREAD_ONCE_INIT;
static bool ops_failed; /* memory ran out building the table: every kiln.wgmma.* lookup reports it */

void *(*emu_wgmma_ops_malloc)(size_t) = malloc;

static char *floats(unsigned m, const char *sep) {
    char *s = emu_wgmma_ops_malloc(m * 7 + 1);
    if (!s) return NULL;
    s[0] = 0;
    for (unsigned i = 0; i < m; i++) strcat(s, i ? sep : ""), strcat(s, "float");
    return s;
}

static void build_ops(void) {
    unsigned k = 0;
    ops[k++] = (emu_op){KILN_WGMMA_DESC, "i64 (ptr addrspace(3), i64)", h_desc, OP_DESC};
    for (unsigned n = 8; n <= 256; n += 8)
        for (int v = 0; v < 8; v++) {
            bool bf = v & 1, rs = v & 2, tb = v & 4;
            char *list = floats(n / 2, ", "), *name = emu_wgmma_ops_malloc(64);
            char *type = list ? emu_wgmma_ops_malloc(strlen(list) * 2 + 64) : NULL;
            if (!list || !name || !type) {
                free(list), free(name), free(type);
                ops_failed = true;
                return;
            }
            snprintf(name, 64, "kiln.wgmma.m64n%uk16.f32.%s.%s%s", n, bf ? "bf16" : "f16", rs ? "rs" : "ss", tb ? ".tb" : "");
            sprintf(type, "{ %s } (%s, %s, i64, i32)", list, list, rs ? "i32, i32, i32, i32" : "i64");
            ops[k++] = (emu_op){name, type, h_mma, (int)n | (bf ? OP_BF16 : 0) | (rs ? OP_RS : 0) | (tb ? OP_TB : 0)};
            free(list);
        }
    for (unsigned m = 1; m <= KILN_WGMMA_MAX_ACC; m++) {
        char *list = floats(m, ", "), *name = emu_wgmma_ops_malloc(48);
        char *type = list ? emu_wgmma_ops_malloc(strlen(list) * 2 + 32) : NULL;
        if (!list || !name || !type) {
            free(list), free(name), free(type);
            ops_failed = true;
            return;
        }
        snprintf(name, 48, "kiln.wgmma.wait.f32x%u", m);
        sprintf(type, "{ %s } (i32, %s)", list, list);
        ops[k++] = (emu_op){name, type, h_wait, (int)m | OP_WAIT};
        free(list);
    }
}

bool emu_wgmma_ops_failed(void) {
    pthread_once(&ops_once, build_ops);
    return ops_failed;
}

const emu_op *emu_wgmma_op_find(const char *name) {
    if (strncmp(name, "kiln.wgmma.", 11)) return NULL;
    pthread_once(&ops_once, build_ops);
    if (ops_failed) return NULL; /* a half-built table: none of it (emu_wgmma_ops_failed says why) */
    for (size_t i = 0; i < NOPS; i++)
        if (ops[i].name && !strcmp(ops[i].name, name)) return &ops[i];
    return NULL;
}
