/* emu/emu_tma.c - TMA copies in flight on the emulator: cp.async.bulk.tensor reads its box at issue but
 * lands it, and completes its bytes on the mbarrier, only when a waiter or the scheduler needs it (as late
 * as the PTX ISA allows; the scheduler lands the copies of mbarriers a thread sleeps on first); until the phase it completed on completes, any access to its destination is a
 * race, and a copy that overruns its phase's expected bytes (a short expect-tx) is a fault. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu.h"
#include "kiln/tensor_map.h"

/* One copy: its box as read at issue (box order, zero where out of bounds), where it lands, the
 * mbarrier it completes on, and whether it has landed (then only its phase's completion is awaited). */
typedef struct tma_copy {
    unsigned char *dst, *bar, *data;
    size_t bytes, lo, hi; /* shared offsets [lo, hi) it may write (the swizzle stays in 128-byte lines) */
    unsigned elem, bits;  /* element bytes, swizzle bits (0..3) */
    const char *where;    /* the issuing site */
    bool landed;
} tma_copy;

static _Thread_local tma_copy *copies;
static _Thread_local unsigned ncopies, capcopies;
_Thread_local unsigned emu_tma_live;

static void drop(unsigned i) {
    free(copies[i].data);
    memmove(&copies[i], &copies[i + 1], (ncopies - i - 1) * sizeof *copies);
    emu_tma_live = --ncopies;
}

void emu_tma_block_begin(void) {
    while (ncopies) drop(ncopies - 1);
}

static const char *kname(const emu_block *b) {
    const char *n = emu_block_kernel(b);
    return n && n[0] ? n : "?";
}

static size_t soff(const emu_block *b, const void *p) {
    return (size_t)((const unsigned char *)p - emu_shared_base(b));
}

unsigned char *emu_tma_reserve(emu_call *c, size_t bytes) {
    if (ncopies == capcopies) {
        unsigned n = capcopies ? 2 * capcopies : 16;
        tma_copy *e = realloc(copies, n * sizeof *e);
        if (!e) emu_fault(c->blk, "%s: out of memory for TMA copies in flight", c->site->where);
        copies = e, capcopies = n;
    }
    unsigned char *data = malloc(bytes ? bytes : 1);
    if (!data) emu_fault(c->blk, "%s: out of memory for a TMA copy of %zu bytes", c->site->where, bytes);
    copies[ncopies] = (tma_copy){.data = data, .where = c->site->where}; /* no dst: not in flight yet */
    emu_tma_live = ++ncopies;
    return data;
}

void emu_tma_issue(emu_call *c, unsigned char *dst, unsigned char *bar, unsigned elem, size_t bytes, unsigned bits) {
    tma_copy *e = &copies[ncopies - 1];
    size_t lo = soff(c->blk, dst), hi = lo + bytes;
    if (bits) hi = (hi + 127) / 128 * 128;
    e->dst = dst, e->bar = bar, e->bytes = bytes, e->lo = lo, e->hi = hi, e->elem = elem, e->bits = bits;
    memset(dst, 0xff, bytes); /* poisoned until it lands (the swizzled image stays in these lines) */
}

void emu_tma_guard(emu_block *b, const void *p, size_t size, const char *what) {
    size_t a = soff(b, p);
    for (unsigned i = 0; i < ncopies; i++) {
        const tma_copy *e = &copies[i];
        if (a < e->hi && a + size > e->lo) {
            emu_mbar m;
            bool init = emu_mbar_read(e->bar, &m);
            emu_fault(b, "kernel %s: race: %s touches shared offset %zu, in the destination [%zu, %zu) of the TMA copy "
                      "issued at %s, which %s (mbarrier at shared offset %zu, phase parity %u: %u arrivals pending, "
                      "tx-count %d); wait on that mbarrier's phase before using the tile",
                      kname(b), what, a, e->lo, e->hi, e->where,
                      e->landed ? "landed but whose phase has not completed" : "has not landed yet", soff(b, e->bar),
                      init ? m.phase : 0, init ? m.pending : 0, init ? (int)m.tx : 0);
        }
    }
}

void emu_tma_phase_done(const unsigned char *bar) {
    for (unsigned i = ncopies; i-- > 0;)
        if (copies[i].dst && copies[i].bar == bar && copies[i].landed) drop(i);
}

/* Lands copy i and completes its bytes on its mbarrier; false and msg when that breaks a rule. */
static bool land(emu_block *b, unsigned i, char *msg, size_t size) {
    tma_copy *e = &copies[i];
    unsigned char *smem = emu_shared_base(b);
    unsigned mask = (1u << e->bits) - 1;
    for (size_t off = 0; off < e->bytes; off += e->elem) {
        size_t a = e->lo + off;
        if (e->bits) a ^= (a >> 7 & mask) << 4;
        memcpy(smem + a, e->data + off, e->elem);
    }
    e->landed = true;
    emu_mbar m;
    unsigned char *bar = e->bar;
    if (!emu_mbar_read(bar, &m)) {
        snprintf(msg, size, "kernel %s: the TMA copy issued at %s lands on the mbarrier at shared offset %zu, which "
                 "is no longer initialized", kname(b), e->where, soff(b, bar));
        return false;
    }
    if (m.pending == 0 && (long long)e->bytes > m.tx) {
        snprintf(msg, size, "kernel %s: the TMA copy issued at %s brings %zu bytes to the mbarrier at shared offset "
                 "%zu, whose phase (parity %u) has every arrival in and expects only %d more: the phase would "
                 "complete before the copy landed (expect-tx short by %lld bytes)", kname(b), e->where, e->bytes,
                 soff(b, bar), m.phase, (int)m.tx, (long long)e->bytes - m.tx);
        return false;
    }
    m.tx -= (int32_t)e->bytes;
    emu_hb *hb = emu_block_hb(b);
    if (hb) emu_hb_tma_landed(hb, soff(b, bar), e->lo, e->hi - e->lo, e->where); /* the race mode: the TMA unit wrote */
    return emu_mbar_write(b, bar, &m, e->where, msg, size);
}

bool emu_tma_land_for(emu_call *c, const unsigned char *bar) {
    for (unsigned i = 0; i < ncopies; i++)
        if (copies[i].dst && copies[i].bar == bar && !copies[i].landed) {
            char msg[700];
            if (!land(c->blk, i, msg, sizeof msg)) emu_fault(c->blk, "%s", msg);
            return true;
        }
    return false;
}

int emu_tma_land_oldest(emu_block *b, char *msg, size_t size) {
    for (unsigned i = 0; i < ncopies; i++) /* first what a sleeping thread waits for */
        if (copies[i].dst && !copies[i].landed && emu_block_awaits(b, copies[i].bar)) return land(b, i, msg, size) ? 1 : -1;
    for (unsigned i = 0; i < ncopies; i++)
        if (copies[i].dst && !copies[i].landed) return land(b, i, msg, size) ? 1 : -1;
    return 0;
}

bool emu_tma_block_end(emu_block *b, char *msg, size_t size) {
    if (!ncopies) return true;
    const tma_copy *e = &copies[0];
    emu_mbar m;
    bool init = emu_mbar_read(e->bar, &m);
    snprintf(msg, size, "kernel %s: every thread exited with %u TMA cop%s unfinished, the first issued at %s to "
             "shared offset %zu (%s; its mbarrier at shared offset %zu: phase parity %u, %u arrivals pending, "
             "tx-count %d): a block must wait for its copies", kname(b), ncopies, ncopies == 1 ? "y" : "ies",
             e->where, e->lo, e->landed ? "landed, its phase never completed" : "never landed", soff(b, e->bar),
             init ? m.phase : 0, init ? m.pending : 0, init ? (int)m.tx : 0);
    emu_tma_block_begin();
    return false;
}
