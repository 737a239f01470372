/* emu/emu_warp_mma.c - tensor-core intrinsics on the emulator: ldmatrix, mma.sync (fragment
 * layouts of the PTX ISA), and cp.async whose destination stays poisoned until the wait. */
#include <stdlib.h>
#include <string.h>

#include "emu.h"

/* ---- ldmatrix.sync.aligned.m8n8.x{1,2,4}[.trans].b16 ---- */

enum { LDM_TRANS = 8 };

static unsigned char *slot_ptr(const unsigned char *slots, unsigned i) {
    unsigned char *p;
    memcpy(&p, slots + (size_t)i * EMU_SLOT, sizeof p);
    return p;
}

/* The lanes of the caller's warp that exist in this block. */
static uint32_t warp_mask(const emu_call *c) {
    unsigned n = emu_block_threads(c->blk) - c->t->warp * EMU_WARP;
    return n >= EMU_WARP ? 0xffffffffu : (1u << n) - 1;
}

/* Lanes 8i..8i+7 give the rows of matrix i; lane L receives, for each matrix, the elements at row
 * L/4, columns 2(L%4) and 2(L%4)+1 (with .trans: those of the transpose). */
static bool ldmatrix_compute(emu_block *blk, const emu_op *op, emu_thread **lanes, uint32_t mask) {
    int n = op->arg & 7, trans = op->arg & LDM_TRANS;
    unsigned char *rows[EMU_WARP];
    for (int l = 0; l < 8 * n; l++) {
        if (!(mask >> l & 1)) emu_fault(blk, "%s: lane %d, which gives a row address, is not present", op->name, l);
        rows[l] = slot_ptr(lanes[l]->in, 0);
        if ((uintptr_t)rows[l] % 16) emu_fault(blk, "%s: lane %d's row address %p is not 16-byte aligned", op->name, l, (void *)rows[l]);
        emu_check_shared(blk, rows[l], 16, op->name);
    }
    emu_hb *hb = emu_block_hb(blk);
    for (int l = 0; hb && l < 8 * n; l++) /* each row is read by the lane that gives its address */
        emu_hb_access(blk, hb, lanes[l]->id, (size_t)(rows[l] - emu_shared_base(blk)), 16, EMU_HB_READ, op->name);
    for (unsigned l = 0; l < EMU_WARP; l++) {
        if (!lanes[l]) continue;
        for (int i = 0; i < n; i++) {
            uint32_t v;
            if (!trans) {
                memcpy(&v, rows[8 * i + l / 4] + 4 * (l % 4), 4);
            } else {
                uint16_t lo, hi;
                memcpy(&lo, rows[8 * i + 2 * (l % 4)] + 2 * (l / 4), 2);
                memcpy(&hi, rows[8 * i + 2 * (l % 4) + 1] + 2 * (l / 4), 2);
                v = (uint32_t)lo | (uint32_t)hi << 16;
            }
            memcpy(lanes[l]->out + 4 * i, &v, 4);
        }
    }
    return true;
}

static void h_ldmatrix(emu_call *c) { emu_warp_meet(c, warp_mask(c), ldmatrix_compute); }

/* ---- mma.sync.aligned.m16n8k{8,16}.row.col.f32.{f16,bf16}.{f16,bf16}.f32 ---- */

enum { MMA_K16 = 1, MMA_BF16 = 2 };

static float half_value(uint16_t h, int bf) { return bf ? emu_bf16_to_f32(h) : emu_f16_to_f32(h); }

/* Places the two halves of a 32-bit register at (r, c) and (r2, c2) of a matrix. */
static void put2(float *m, int ld, uint32_t reg, int bf, int r, int c, int r2, int c2) {
    m[r * ld + c] = half_value((uint16_t)reg, bf);
    m[r2 * ld + c2] = half_value((uint16_t)(reg >> 16), bf);
}

/* Gathers A (16 x k, row), B (k x 8, col) and C (16 x 8) from every lane's fragments, computes
 * D = A B + C (products exact, sums in double, one rounding to f32) and scatters D. g = lane/4,
 * t = lane%4. A: a0 = A[g][2t..2t+1], a1 = A[g+8][2t..], a2 = A[g][2t+8..], a3 = A[g+8][2t+8..].
 * B: b0 = B[2t..2t+1][g], b1 = B[2t+8..2t+9][g]. C/D: c0,c1 = C[g][2t..], c2,c3 = C[g+8][2t..]. */
static bool mma_compute(emu_block *blk, const emu_op *op, emu_thread **lanes, uint32_t mask) {
    int k = op->arg & MMA_K16 ? 16 : 8, bf = op->arg & MMA_BF16;
    int na = k / 4, nb = k / 8;
    float a[16 * 16], b[16 * 8], c[16 * 8];
    if (mask != 0xffffffffu) emu_fault(blk, "%s needs all 32 lanes of the warp (mask 0x%08x)", op->name, mask);
    for (int l = 0; l < EMU_WARP; l++) {
        const unsigned char *in = lanes[l]->in;
        int g = l >> 2, t = l & 3;
        put2(a, k, emu_slot_u32(in, 0), bf, g, 2 * t, g, 2 * t + 1);
        put2(a, k, emu_slot_u32(in, 1), bf, g + 8, 2 * t, g + 8, 2 * t + 1);
        if (k == 16) {
            put2(a, k, emu_slot_u32(in, 2), bf, g, 2 * t + 8, g, 2 * t + 9);
            put2(a, k, emu_slot_u32(in, 3), bf, g + 8, 2 * t + 8, g + 8, 2 * t + 9);
        }
        put2(b, 8, emu_slot_u32(in, (unsigned)na), bf, 2 * t, g, 2 * t + 1, g);
        if (k == 16) put2(b, 8, emu_slot_u32(in, (unsigned)na + 1), bf, 2 * t + 8, g, 2 * t + 9, g);
        for (int i = 0; i < 4; i++) {
            float f;
            memcpy(&f, in + (size_t)(na + nb + i) * EMU_SLOT, sizeof f);
            c[(g + 8 * (i >> 1)) * 8 + 2 * t + (i & 1)] = f;
        }
    }
    for (int l = 0; l < EMU_WARP; l++) {
        int g = l >> 2, t = l & 3;
        float d[4];
        for (int i = 0; i < 4; i++) {
            int r = g + 8 * (i >> 1), col = 2 * t + (i & 1);
            double s = c[r * 8 + col];
            for (int j = 0; j < k; j++) s += (double)a[r * k + j] * (double)b[j * 8 + col];
            d[i] = (float)s;
        }
        memcpy(lanes[l]->out, d, sizeof d);
    }
    return true;
}

static void h_mma(emu_call *c) { emu_warp_meet(c, warp_mask(c), mma_compute); }

/* ---- cp.async: copies wait in a per-thread queue; they land at cp.async.wait_group ---- */

typedef struct cp_copy {
    unsigned char *dst;
    unsigned char data[16];
    unsigned size;
    unsigned group; /* 0 until committed */
    const char *where; /* the issuing site (race mode messages) */
} cp_copy;

typedef struct cp_queue {
    cp_copy *e;
    unsigned n, cap;
    unsigned committed; /* groups committed so far */
} cp_queue;

static _Thread_local cp_queue queues[EMU_MAX_THREADS];

/* A block (or its second run) starts: copies a kernel left without waiting are dropped (they could only have landed in
 * the shared memory of a block that is gone). */
void emu_cp_async_block_begin(void) {
    for (unsigned i = 0; i < EMU_MAX_THREADS; i++) {
        free(queues[i].e);
        memset(&queues[i], 0, sizeof queues[i]);
    }
}

static cp_queue *queue_of(emu_call *c) { return &queues[c->t->id]; }

enum { CP_SRC_SIZE = 32 }; /* arg: bytes | CP_SRC_SIZE for the variants with a source size */

/* cp.async.{ca,cg}.shared.global: reads the source now, poisons the destination (0xff) until
 * the group lands; with a source size, bytes past it are zero-filled. */
static void h_cp_async(emu_call *c) {
    cp_queue *q = queue_of(c);
    unsigned bytes = (unsigned)c->site->op->arg & 31;
    unsigned size = c->site->op->arg & CP_SRC_SIZE ? emu_arg_u32(c, 2) : bytes;
    unsigned char *dst = slot_ptr(c->args, 0), *src = slot_ptr(c->args, 1);
    if ((uintptr_t)dst % bytes || (uintptr_t)src % bytes)
        emu_fault(c->blk, "%s: addresses %p <- %p not %u-byte aligned", c->site->where, (void *)dst, (void *)src, bytes);
    if (size > bytes) emu_fault(c->blk, "%s: source size %u exceeds the copy size %u", c->site->where, size, bytes);
    emu_check_shared(c->blk, dst, bytes, c->site->where);
    if (size) emu_check_global(c->blk, src, size, c->site->where);
    if (q->n == q->cap) {
        unsigned ncap = q->cap ? 2 * q->cap : 16;
        cp_copy *e = realloc(q->e, ncap * sizeof *e);
        if (!e) emu_fault(c->blk, "%s: out of memory for pending copies", c->site->where);
        q->e = e, q->cap = ncap;
    }
    emu_hb *hb = emu_block_hb(c->blk);
    if (hb) /* the copy may land any time before its wait: in flight from now, written again when it lands */
        emu_hb_access(c->blk, hb, c->t->id, (size_t)(dst - emu_shared_base(c->blk)), bytes, EMU_HB_ASYNC_WRITE,
                      c->site->where);
    cp_copy *e = &q->e[q->n++];
    memset(e, 0, sizeof *e);
    e->dst = dst, e->size = bytes, e->where = c->site->where;
    memcpy(e->data, src, size);
    memset(dst, 0xff, bytes);
}

static void commit(cp_queue *q) {
    q->committed++;
    for (unsigned i = 0; i < q->n; i++)
        if (!q->e[i].group) q->e[i].group = q->committed;
}

/* Lands, in issue order, every committed copy of a group older than the newest `keep` (the race mode: a write of
 * the waiting thread now, so that only what the wait orders after it may touch the bytes). */
static void land(emu_call *c, cp_queue *q, unsigned keep) {
    unsigned kept = 0;
    emu_hb *hb = emu_block_hb(c->blk);
    for (unsigned i = 0; i < q->n; i++) {
        cp_copy *e = &q->e[i];
        if (e->group && e->group + keep <= q->committed) {
            memcpy(e->dst, e->data, e->size);
            if (hb)
                emu_hb_access(c->blk, hb, c->t->id, (size_t)(e->dst - emu_shared_base(c->blk)), e->size, EMU_HB_WRITE,
                              e->where);
        } else {
            q->e[kept++] = *e;
        }
    }
    q->n = kept;
    if (!kept) {
        free(q->e);
        q->e = NULL, q->cap = 0;
    }
}

static void h_cp_commit(emu_call *c) { commit(queue_of(c)); }
static void h_cp_wait(emu_call *c) { land(c, queue_of(c), emu_arg_u32(c, 0)); }
static void h_cp_wait_all(emu_call *c) {
    cp_queue *q = queue_of(c);
    commit(q);
    land(c, q, 0);
}

/* ---- the table ---- */

#define LDM(n, a) {"llvm.nvvm.ldmatrix.sync.aligned.m8n8.x" #n ".b16.p3", "" a " (ptr addrspace(3))", h_ldmatrix, n}, \
                  {"llvm.nvvm.ldmatrix.sync.aligned.m8n8.x" #n ".trans.b16.p3", "" a " (ptr addrspace(3))", h_ldmatrix, (n) | LDM_TRANS}
#define F4 "{ float, float, float, float }"
#define H2 "<2 x half>"
#define CP(kind, n)                                                                                                   \
    {"llvm.nvvm.cp.async." kind ".shared.global." #n, "void (ptr addrspace(3), ptr addrspace(1))", h_cp_async, n},     \
    {"llvm.nvvm.cp.async." kind ".shared.global." #n ".s", "void (ptr addrspace(3), ptr addrspace(1), i32)", h_cp_async, \
     (n) | CP_SRC_SIZE}

static const emu_op mma_ops[] = {
    LDM(1, "i32"), LDM(2, "{ i32, i32 }"), LDM(4, "{ i32, i32, i32, i32 }"),
    {"llvm.nvvm.mma.m16n8k16.row.col.f32.f32", F4 " (" H2 ", " H2 ", " H2 ", " H2 ", " H2 ", " H2 ", float, float, float, float)",
     h_mma, MMA_K16},
    {"llvm.nvvm.mma.m16n8k16.row.col.bf16", F4 " (i32, i32, i32, i32, i32, i32, float, float, float, float)", h_mma,
     MMA_K16 | MMA_BF16},
    {"llvm.nvvm.mma.m16n8k8.row.col.f32.f32", F4 " (" H2 ", " H2 ", " H2 ", float, float, float, float)", h_mma, 0},
    {"llvm.nvvm.mma.m16n8k8.row.col.bf16", F4 " (i32, i32, i32, float, float, float, float)", h_mma, MMA_BF16},
    CP("ca", 4), CP("ca", 8), CP("ca", 16), CP("cg", 16),
    {"llvm.nvvm.cp.async.commit.group", "void ()", h_cp_commit, 0},
    {"llvm.nvvm.cp.async.wait.group", "void (i32)", h_cp_wait, 0},
    {"llvm.nvvm.cp.async.wait.all", "void ()", h_cp_wait_all, 0},
};

const emu_op *emu_mma_op_find(const char *name) {
    for (size_t i = 0; i < sizeof mma_ops / sizeof mma_ops[0]; i++)
        if (!strcmp(mma_ops[i].name, name)) return &mma_ops[i];
    return NULL;
}
