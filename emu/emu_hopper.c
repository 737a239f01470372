/* emu/emu_hopper.c - Hopper intrinsics on the emulator: mbarriers (arrival and transaction counts,
 * phases, try_wait by parity) by the PTX ISA's mbarrier section, TMA tile loads (cp.async.bulk.tensor)
 * and reduce-adds (cp.reduce.async.bulk.tensor, with their bulk groups) through kiln's tensor map record, the checks of fence.proxy.async and setmaxnreg, and wgmma
 * fence/commit/wait (whose state emu_wgmma.c keeps). */
#include <stdio.h>
#include <string.h>

#include "emu.h"
#include "kiln/tensor_map.h"

/* ---- mbarrier: the 8-byte object in shared memory holds the whole state ----
 * bits 0..19 pending arrivals of the current phase, 20..39 the expected arrival count (set by init,
 * 1..2^20-1), 40..61 the tx-count as a 22-bit two's-complement number (the ISA's range is
 * -(2^20-1)..2^20-1), bit 62 the current phase's parity, bit 63 always 0 (so the emulator's poison,
 * all ones, reads as "never initialized"). A phase completes when pending arrivals and tx-count are
 * both 0; the next phase then starts with pending = expected and tx-count 0. */

enum { MB_COUNT_BITS = 20, MB_TX_BITS = 22 };
#define MB_COUNT_MAX ((1u << MB_COUNT_BITS) - 1)
#define MB_TX_MAX ((int32_t)MB_COUNT_MAX)

typedef emu_mbar mbar; /* emu.h */

static uint64_t mb_pack(const mbar *m) {
    return (uint64_t)m->pending | (uint64_t)m->expected << 20 |
           (uint64_t)((uint32_t)m->tx & ((1u << MB_TX_BITS) - 1)) << 40 | (uint64_t)(m->phase & 1) << 62;
}

static void mb_unpack(uint64_t w, mbar *m) {
    m->pending = (uint32_t)(w & MB_COUNT_MAX);
    m->expected = (uint32_t)(w >> 20 & MB_COUNT_MAX);
    uint32_t tx = (uint32_t)(w >> 40 & ((1u << MB_TX_BITS) - 1));
    m->tx = tx & (1u << (MB_TX_BITS - 1)) ? (int32_t)(tx | ~((1u << MB_TX_BITS) - 1)) : (int32_t)tx;
    m->phase = (unsigned)(w >> 62 & 1);
}

/* The mbarrier operand: an 8-byte aligned shared address. */
static unsigned char *mb_addr(emu_call *c) {
    unsigned char *p;
    memcpy(&p, c->args, sizeof p);
    if ((uintptr_t)p % 8) emu_fault(c->blk, "%s: mbarrier address %p is not 8-byte aligned", c->site->where, (void *)p);
    emu_check_shared(c->blk, p, 8, c->site->where);
    return p;
}

bool emu_mbar_read(const unsigned char *p, emu_mbar *m) {
    uint64_t w;
    memcpy(&w, p, sizeof w);
    mb_unpack(w, m);
    return !(w >> 63 || m->expected == 0 || m->pending > m->expected);
}

/* Reads an initialized mbarrier or faults. */
static void mb_load(emu_call *c, const unsigned char *p, mbar *m) {
    if (!emu_mbar_read(p, m))
        emu_fault(c->blk, "%s: the mbarrier at %p was never initialized (mbarrier.init first)", c->site->where,
                  (const void *)p);
}

bool emu_mbar_write(emu_block *b, unsigned char *p, emu_mbar *m, const char *where, char *msg, size_t size) {
    size_t off = (size_t)(p - emu_shared_base(b));
    if (m->tx > MB_TX_MAX || m->tx < -MB_TX_MAX) {
        snprintf(msg, size, "%s: kernel %s: mbarrier at shared offset %zu: tx-count %d is outside the ISA's range "
                 "+-%d", where, emu_block_kernel(b), off, (int)m->tx, (int)MB_TX_MAX);
        return false;
    }
    if (m->pending == 0 && m->tx < 0) {
        snprintf(msg, size, "%s: kernel %s: mbarrier at shared offset %zu: every arrival of the phase (parity %u) is "
                 "in with a tx-count of %d: %d bytes more were completed than expect-tx announced, so the phase can "
                 "never complete", where, emu_block_kernel(b), off, m->phase, (int)m->tx, (int)-m->tx);
        return false;
    }
    bool completes = m->pending == 0 && m->tx == 0;
    emu_hb *hb = emu_block_hb(b);
    if (completes && hb) emu_hb_mbar_complete(hb, off, m->phase); /* the race mode: what its arrivals released */
    if (completes) m->phase ^= 1, m->pending = m->expected;
    uint64_t w = mb_pack(m);
    memcpy(p, &w, sizeof w);
    if (completes) {
        emu_tma_phase_done(p); /* emu_tma.c: the copies that landed on the phase are visible */
        emu_wake_sleepers(b);
    }
    return true;
}

/* Stores m, first completing the phase when nothing is pending; wakes the threads waiting on phases. */
static void mb_store(emu_call *c, unsigned char *p, mbar *m) {
    char msg[600];
    if (!emu_mbar_write(c->blk, p, m, c->site->where, msg, sizeof msg)) emu_fault(c->blk, "%s", msg);
}

static void h_mb_init(emu_call *c) {
    unsigned char *p = mb_addr(c);
    uint32_t n = emu_arg_u32(c, 1);
    if (n < 1 || n > MB_COUNT_MAX)
        emu_fault(c->blk, "%s: mbarrier.init count %u outside 1..%u", c->site->where, n, MB_COUNT_MAX);
    mbar m = {.pending = n, .expected = n};
    emu_hb *hb = emu_block_hb(c->blk);
    if (hb && !emu_hb_mbar_init(hb, (size_t)(p - emu_shared_base(c->blk))))
        emu_fault(c->blk, "%s: race mode: out of memory", c->site->where);
    uint64_t w = mb_pack(&m);
    memcpy(p, &w, sizeof w);
}

enum { MB_ARRIVE = 1, MB_EXPECT = 2, MB_COMPLETE = 4, MB_RET64 = 8 };

/* arrive (MB_ARRIVE), expect-tx (MB_EXPECT, the tx operand raises the tx-count first), complete-tx
 * (MB_COMPLETE, lowers it); an arrival returns the state token (the phase parity it arrived in). */
static void h_mb_update(emu_call *c) {
    int op = c->site->op->arg;
    unsigned char *p = mb_addr(c);
    mbar m;
    mb_load(c, p, &m);
    unsigned arrived_phase = m.phase;
    if (op & (MB_EXPECT | MB_COMPLETE)) {
        int32_t tx = (int32_t)emu_arg_u32(c, 1);
        if (tx < 0 || tx > MB_TX_MAX)
            emu_fault(c->blk, "%s: tx-count operand %d outside 0..%d", c->site->where, (int)tx, (int)MB_TX_MAX);
        m.tx += op & MB_EXPECT ? tx : -tx;
    }
    if (op & MB_ARRIVE) {
        if (m.pending == 0)
            emu_fault(c->blk, "%s: arrival on an mbarrier whose phase has no pending arrival left (more arrivals "
                      "than its init count of %u)", c->site->where, m.expected);
        m.pending--;
    }
    emu_hb *hb = emu_block_hb(c->blk);
    if (hb && (op & (MB_ARRIVE | MB_COMPLETE)) && /* the race mode: an arrival releases what the thread did */
        !emu_hb_mbar_arrive(hb, (size_t)(p - emu_shared_base(c->blk)), c->t->id))
        emu_fault(c->blk, "%s: race mode: out of memory", c->site->where);
    mb_store(c, p, &m);
    if (op & MB_RET64) {
        uint64_t token = arrived_phase;
        memcpy(c->ret, &token, sizeof token);
    }
}

/* try_wait.parity: true once the phase of the given parity has completed (the current phase's parity
 * differs from it). The hardware may return false after a time limit and the caller loops; here the
 * thread sleeps until a phase completes somewhere and looks again, so a phase nobody can complete is a
 * deadlock the scheduler reports with this site. */
static void h_mb_try_wait_parity(emu_call *c) {
    unsigned char *p = mb_addr(c);
    uint32_t parity = emu_arg_u32(c, 1);
    if (parity > 1) emu_fault(c->blk, "%s: phase parity %u is not 0 or 1", c->site->where, parity);
    for (;;) {
        mbar m;
        mb_load(c, p, &m);
        if (m.phase != parity) break;
        if (emu_tma_land_for(c, p)) continue; /* emu_tma.c: a copy it waits for lands now */
        emu_sleep_on(c, p); /* (the scheduler lands the copies of awaited mbarriers first) */
    }
    emu_hb *hb = emu_block_hb(c->blk);
    if (hb) emu_hb_mbar_acquire(hb, (size_t)(p - emu_shared_base(c->blk)), parity, c->t->id);
    emu_ret_u32(c, 1);
}

/* ---- TMA: cp.async.bulk.tensor.<d>d.shared::cluster.global.tile.mbarrier::complete_tx::bytes ----
 * The map is kiln's record (kiln/tensor_map.h). The box lands densely, innermost dimension first (a
 * row is box[0] elements), each element read from base + g0 * elem + sum g_i * strides[i-1] where
 * g = coordinates + index, zero where any g_i is outside 0..dims[i]-1; with a swizzle the shared
 * address's bits [4, 4+b) XOR its bits [7, 7+b). The box is read now but lands, and its bytes complete on
 * the mbarrier, only when emu_tma.c lands it (a waiter on that mbarrier or the scheduler needs it). */

_Static_assert(sizeof(kiln_tensor_map) == KILN_TMAP_BYTES, "kiln_tensor_map is the 128 bytes of a CUtensorMap");

/* Reads the map at mp and checks it and the shared tile at p against a rank-D copy's rules (kiln's
 * record, element size, swizzle, box row and size, the tile's (role's) alignment); returns the tile's bytes, *count
 * its elements, *bits the swizzle. */
static size_t tma_map(emu_call *c, unsigned rank, const unsigned char *mp, const unsigned char *p, const char *role,
                      kiln_tensor_map *m, unsigned long long *count, unsigned *bits) {
    memcpy(m, mp, sizeof *m);
    const char *w = c->site->where;
    if (m->magic != KILN_TMAP_MAGIC)
        emu_fault(c->blk, "%s: the tensor map is not one kiln recorded (kiln/tensor_map.h; magic 0x%08x)", w, m->magic);
    if (m->rank != rank) emu_fault(c->blk, "%s: a %u-D copy through a map of rank %u", w, rank, m->rank);
    if (m->elem_bytes != 1 && m->elem_bytes != 2 && m->elem_bytes != 4 && m->elem_bytes != 8)
        emu_fault(c->blk, "%s: tensor map element size %u; valid 1, 2, 4, 8", w, m->elem_bytes);
    if (m->swizzle > KILN_TMAP_SWIZZLE_128B) emu_fault(c->blk, "%s: tensor map swizzle %u; valid 0..3", w, m->swizzle);
    *bits = m->swizzle;
    unsigned span = *bits ? 16u << *bits : 0;
    unsigned row = m->box[0] * m->elem_bytes, align = *bits ? 128u << *bits : 128u;
    if (row % 16 || (span && row > span))
        emu_fault(c->blk, "%s: the box's inner dimension is %u bytes; it must be a multiple of 16%s%u", w, row,
                  span ? " and at most the swizzle span " : "", span);
    *count = 1;
    for (unsigned i = 0; i < rank; i++) {
        if (m->box[i] < 1 || m->box[i] > 256) emu_fault(c->blk, "%s: box dimension %u is %u; valid 1..256", w, i, m->box[i]);
        *count *= m->box[i];
    }
    size_t off = (size_t)(p - emu_shared_base(c->blk)), bytes = (size_t)*count * m->elem_bytes;
    emu_check_shared(c->blk, p, bytes, w);
    if (off % align)
        emu_fault(c->blk, "%s: the %s (shared offset %zu) is not %u-byte aligned (TMA tiles: 128%s)", w,
                  role, off, align,
                  *bits ? ", times 8 rows of the swizzle span" : "");
    return bytes;
}

/* Element e of the box at coord (box order, innermost first): its global address, or 0 when any of its
 * coordinates falls outside the tensor. */
uintptr_t emu_tma_elem(const kiln_tensor_map *m, const int32_t *coord, unsigned long long e) {
    unsigned long long rest = e, a = m->base;
    for (unsigned i = 0; i < m->rank; i++) {
        long long g = (long long)coord[i] + (long long)(rest % m->box[i]);
        rest /= m->box[i];
        if (g < 0 || (unsigned long long)g >= m->dims[i]) return 0;
        a += (unsigned long long)g * (i ? m->strides[i - 1] : m->elem_bytes);
    }
    return (uintptr_t)a;
}

static void h_tma_load(emu_call *c) {
    unsigned rank = (unsigned)c->site->op->arg;
    unsigned char *dst, *bar, *mp;
    memcpy(&dst, c->args, sizeof dst);
    memcpy(&bar, c->args + EMU_SLOT, sizeof bar);
    memcpy(&mp, c->args + 2 * EMU_SLOT, sizeof mp);
    kiln_tensor_map m;
    unsigned long long count;
    unsigned bits;
    size_t bytes = tma_map(c, rank, mp, dst, "destination", &m, &count, &bits), off = (size_t)(dst - emu_shared_base(c->blk));
    const char *w = c->site->where;
    /* the mbarrier it completes on */
    if ((uintptr_t)bar % 8) emu_fault(c->blk, "%s: mbarrier address %p is not 8-byte aligned", w, (void *)bar);
    emu_check_shared(c->blk, bar, 8, w);
    mbar mb;
    mb_load(c, bar, &mb);
    unsigned char *data = emu_tma_reserve(c, bytes); /* emu_tma.c keeps it, even through a fault */
    int32_t coord[KILN_TMAP_RANK_MAX];
    for (unsigned i = 0; i < rank; i++) coord[i] = (int32_t)emu_slot_u32(c->args, 3 + i);
    for (unsigned long long e = 0; e < count; e++) {
        uintptr_t src = emu_tma_elem(&m, coord, e);
        unsigned char *to = data + (size_t)e * m.elem_bytes;
        if (src) {
            char what[160];
            snprintf(what, sizeof what, "%s: the tensor map's element %llu", w, e);
            emu_check_global(c->blk, (const void *)src, m.elem_bytes, what);
            memcpy(to, (const void *)src, m.elem_bytes);
        } else {
            memset(to, 0, m.elem_bytes);
        }
    }
    emu_hb *hb = emu_block_hb(c->blk);
    if (hb) /* the race mode: what the copy overwrites must be ordered before its issue (it lands as the TMA unit's) */
        emu_hb_access(c->blk, hb, c->t->id, off, bytes, EMU_HB_PROBE, w);
    emu_tma_issue(c, dst, bar, m.elem_bytes, bytes, bits); /* emu_tma.c: in flight from now */
}

/* ---- TMA reduce: cp.reduce.async.bulk.tensor.<d>d.global.shared::cta.add.tile.bulk_group ----
 * The shared tile is laid out as a load lands it (same map rules); each in-bounds element is added into
 * the tensor (f32 maps only: the f32 add, rounded to nearest; out-of-bounds elements are skipped). The
 * operation joins the thread's open bulk group; emu_tma.c reads the tile and does the adds when a
 * cp.async.bulk.wait_group covers the group, faulting if the tile changed since the issue. */
static void h_tma_reduce(emu_call *c) {
    unsigned rank = (unsigned)c->site->op->arg;
    unsigned char *src, *mp;
    memcpy(&src, c->args, sizeof src);
    memcpy(&mp, c->args + EMU_SLOT, sizeof mp);
    kiln_tensor_map m;
    unsigned long long count;
    unsigned bits;
    size_t bytes = tma_map(c, rank, mp, src, "source", &m, &count, &bits);
    if (m.data_type != KILN_TMAP_TYPE_FLOAT32 || m.elem_bytes != 4)
        emu_fault(c->blk, "%s: a reduce-add through a map of element type %u: the emulator adds f32 maps only "
                  "(CU_TENSOR_MAP_DATA_TYPE_FLOAT32, %d)", c->site->where, m.data_type, KILN_TMAP_TYPE_FLOAT32);
    int32_t coord[KILN_TMAP_RANK_MAX] = {0};
    for (unsigned i = 0; i < rank; i++) coord[i] = (int32_t)emu_slot_u32(c->args, 2 + i);
    emu_hb *hb = emu_block_hb(c->blk);
    if (hb) /* the race mode: the tile's writes (by any thread) must be ordered before the issue */
        emu_hb_access(c->blk, hb, c->t->id, (size_t)(src - emu_shared_base(c->blk)), bytes, EMU_HB_READ_PROBE,
                      c->site->where);
    emu_tma_reduce_issue(c, &m, coord, src, bytes, bits);
}

static void h_bulk_commit(emu_call *c) { emu_bulk_commit(c); }
static void h_bulk_wait(emu_call *c) { emu_bulk_wait(c, emu_arg_u32(c, 0)); }

/* ---- fences and warpgroup synchronization: memory is coherent here, so these check and count ---- */

static void h_nop(emu_call *c) { (void)c; }

static void h_setmaxnreg(emu_call *c) {
    uint32_t n = emu_arg_u32(c, 0);
    if (n < 24 || n > 256 || n % 8)
        emu_fault(c->blk, "%s: setmaxnreg %u is not in 24..256 in steps of 8", c->site->where, n);
    if (emu_block_threads(c->blk) % 128)
        emu_fault(c->blk, "%s: setmaxnreg needs whole warpgroups, but the block has %u threads", c->site->where,
                  emu_block_threads(c->blk));
}

/* wgmma fence/commit/wait keep each thread's wgmma state (emu_wgmma.c). */
static void h_wgmma_fence(emu_call *c) { emu_wgmma_fence(c); }
static void h_wgmma_commit(emu_call *c) { emu_wgmma_commit(c); }
static void h_wgmma_wait(emu_call *c) { emu_wgmma_wait(c, emu_arg_u32(c, 0)); }

#define P3 "ptr addrspace(3)"
static const emu_op hopper_ops[] = {
    {"llvm.nvvm.mbarrier.init.shared", "void (" P3 ", i32)", h_mb_init, 0},
    {"llvm.nvvm.mbarrier.arrive.shared", "i64 (" P3 ")", h_mb_update, MB_ARRIVE | MB_RET64},
    {"llvm.nvvm.mbarrier.arrive.expect.tx.scope.cta.space.cta", "i64 (" P3 ", i32)", h_mb_update,
     MB_ARRIVE | MB_EXPECT | MB_RET64},
    {"llvm.nvvm.mbarrier.expect.tx.scope.cta.space.cta", "void (" P3 ", i32)", h_mb_update, MB_EXPECT},
    {"llvm.nvvm.mbarrier.complete.tx.scope.cta.space.cta", "void (" P3 ", i32)", h_mb_update, MB_COMPLETE},
    {"llvm.nvvm.mbarrier.try.wait.parity.scope.cta.space.cta", "i1 (" P3 ", i32)", h_mb_try_wait_parity, 0},
    {"llvm.nvvm.fence.proxy.async", "void ()", h_nop, 0},
    {"llvm.nvvm.setmaxnreg.inc.sync.aligned.u32", "void (i32)", h_setmaxnreg, 0},
    {"llvm.nvvm.setmaxnreg.dec.sync.aligned.u32", "void (i32)", h_setmaxnreg, 0},
    {"llvm.nvvm.wgmma.fence.sync.aligned", "void ()", h_wgmma_fence, 0},
    {"llvm.nvvm.wgmma.commit_group.sync.aligned", "void ()", h_wgmma_commit, 0},
    {"llvm.nvvm.wgmma.wait_group.sync.aligned", "void (i64)", h_wgmma_wait, 0},
#define TMA_PRE "void (ptr addrspace(7), " P3 ", ptr, i32"
#define TMA_POST "i16, i64, i1, i1, i32)"
    {"llvm.nvvm.cp.async.bulk.tensor.g2s.tile.1d", TMA_PRE ", " TMA_POST, h_tma_load, 1},
    {"llvm.nvvm.cp.async.bulk.tensor.g2s.tile.2d", TMA_PRE ", i32, " TMA_POST, h_tma_load, 2},
    {"llvm.nvvm.cp.async.bulk.tensor.g2s.tile.3d", TMA_PRE ", i32, i32, " TMA_POST, h_tma_load, 3},
    {"llvm.nvvm.cp.async.bulk.tensor.g2s.tile.4d", TMA_PRE ", i32, i32, i32, " TMA_POST, h_tma_load, 4},
    {"llvm.nvvm.cp.async.bulk.tensor.g2s.tile.5d", TMA_PRE ", i32, i32, i32, i32, " TMA_POST, h_tma_load, 5},
#define RED_PRE "void (" P3 ", ptr, i32"
#define RED_POST "i64, i1)"
    {"llvm.nvvm.cp.async.bulk.tensor.reduce.add.tile.1d", RED_PRE ", " RED_POST, h_tma_reduce, 1},
    {"llvm.nvvm.cp.async.bulk.tensor.reduce.add.tile.2d", RED_PRE ", i32, " RED_POST, h_tma_reduce, 2},
    {"llvm.nvvm.cp.async.bulk.tensor.reduce.add.tile.3d", RED_PRE ", i32, i32, " RED_POST, h_tma_reduce, 3},
    {"llvm.nvvm.cp.async.bulk.tensor.reduce.add.tile.4d", RED_PRE ", i32, i32, i32, " RED_POST, h_tma_reduce, 4},
    {"llvm.nvvm.cp.async.bulk.tensor.reduce.add.tile.5d", RED_PRE ", i32, i32, i32, i32, " RED_POST, h_tma_reduce, 5},
    {"llvm.nvvm.cp.async.bulk.commit.group", "void ()", h_bulk_commit, 0},
    {"llvm.nvvm.cp.async.bulk.wait.group", "void (i32)", h_bulk_wait, 0},
    {"llvm.nvvm.cp.async.bulk.wait.group.read", "void (i32)", h_bulk_wait, 1},
};

const emu_op *emu_hopper_op_find(const char *name) {
    for (size_t i = 0; i < sizeof hopper_ops / sizeof hopper_ops[0]; i++)
        if (!strcmp(hopper_ops[i].name, name)) return &hopper_ops[i];
    return emu_wgmma_op_find(name); /* emu_wgmma.c: kiln.wgmma.* */
}
