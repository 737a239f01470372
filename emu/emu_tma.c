/* emu/emu_tma.c - TMA copies in flight on the emulator: cp.async.bulk.tensor reads its box at issue but
 * lands it, and completes its bytes on the mbarrier, only when a waiter or the scheduler needs it (as late
 * as the PTX ISA allows; the scheduler lands the copies of mbarriers a thread sleeps on first); until the phase it completed on completes, any access to its destination is a
 * race, and a copy that overruns its phase's expected bytes (a short expect-tx) is a fault.
 * Bulk reduce-adds (cp.reduce.async.bulk.tensor) wait in their thread's bulk groups: the wait_group that
 * covers one reads its shared tile and adds it into global memory then (as late as the thread's own order
 * allows), faulting if the tile changed since the issue (a write before wait_group.read) or if a thread
 * exits with one unfinished. */
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

/* One bulk reduce-add (cp.reduce.async.bulk.tensor): the issuing thread and its group (0 while the thread
 * has not committed it), the tile's bytes at issue (checked unchanged when a wait reads it: a write to the
 * source before a cp.async.bulk.wait_group.read covers it is the kernel's bug), and the box it adds into. */
typedef struct tma_red {
    unsigned tid, group, bits;
    const unsigned char *src;
    unsigned char *snap;
    size_t bytes, span; /* the box's bytes; the tile's (a swizzle keeps it in whole 128-byte lines) */
    kiln_tensor_map m;
    int32_t coord[KILN_TMAP_RANK_MAX];
    const char *where;
} tma_red;

enum { MAX_THREADS = 1024 };
static _Thread_local tma_red *reds;
static _Thread_local unsigned nreds, capreds;
static _Thread_local unsigned commits[MAX_THREADS]; /* each thread's committed bulk groups so far */

static void drop_red(unsigned i) {
    free(reds[i].snap);
    memmove(&reds[i], &reds[i + 1], (nreds - i - 1) * sizeof *reds);
    nreds--;
}

void emu_tma_block_begin(void) {
    while (ncopies) drop(ncopies - 1);
    while (nreds) drop_red(nreds - 1);
    memset(commits, 0, sizeof commits);
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
    if (!ncopies && nreds) {
        const tma_red *r = &reds[0];
        snprintf(msg, size, "kernel %s: every thread exited with %u bulk reduce%s unfinished, the first issued at %s "
                 "by thread %u from shared offset %zu (%s): a thread must wait for its bulk groups "
                 "(cp.async.bulk.wait_group) before it exits", kname(b), nreds, nreds == 1 ? "" : "s", r->where, r->tid,
                 soff(b, r->src), r->group ? "committed, never waited for" : "never committed");
        emu_tma_block_begin();
        return false;
    }
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

/* ---- bulk reduce-adds and their bulk async-groups (per thread, as the PTX ISA keeps them) ---- */

void emu_tma_reduce_issue(emu_call *c, const kiln_tensor_map *m, const int32_t *coord, const unsigned char *src,
                          size_t bytes, unsigned bits) {
    if (c->t->id >= MAX_THREADS) emu_fault(c->blk, "%s: thread %u: more than %d threads", c->site->where, c->t->id, MAX_THREADS);
    if (nreds == capreds) {
        unsigned n = capreds ? 2 * capreds : 16;
        tma_red *e = realloc(reds, n * sizeof *e);
        if (!e) emu_fault(c->blk, "%s: out of memory for bulk reduces in flight", c->site->where);
        reds = e, capreds = n;
    }
    size_t span = bits ? (bytes + 127) / 128 * 128 : bytes;
    emu_check_shared(c->blk, src, span, c->site->where);
    unsigned char *snap = malloc(span ? span : 1);
    if (!snap) emu_fault(c->blk, "%s: out of memory for a bulk reduce of %zu bytes", c->site->where, bytes);
    memcpy(snap, src, span);
    tma_red *r = &reds[nreds++];
    *r = (tma_red){.tid = c->t->id, .bits = bits, .src = src, .snap = snap, .bytes = bytes, .span = span, .m = *m,
                   .where = c->site->where};
    memcpy(r->coord, coord, sizeof r->coord);
}

void emu_bulk_commit(emu_call *c) {
    unsigned t = c->t->id;
    if (t >= MAX_THREADS) emu_fault(c->blk, "%s: thread %u: more than %d threads", c->site->where, t, MAX_THREADS);
    bool any = false;
    for (unsigned i = 0; i < nreds; i++)
        if (reds[i].tid == t && !reds[i].group) reds[i].group = commits[t] + 1, any = true;
    if (any) commits[t]++; /* (an empty group completes at once: nothing to count) */
}

/* Reads reduce i's tile (it must hold the bytes it held at issue) and adds its in-bounds elements. */
static void complete(emu_call *c, unsigned i) {
    tma_red *r = &reds[i];
    size_t lo = soff(c->blk, r->src);
    for (size_t k = 0; k < r->span; k++)
        if (r->src[k] != r->snap[k])
            emu_fault(c->blk, "kernel %s: race: shared offset %zu, in the source [%zu, %zu) of the bulk reduce issued "
                      "at %s by thread %u, was written before a cp.async.bulk.wait_group.read covered the reduce "
                      "(found at %s): the source may be overwritten only after the read completes",
                      kname(c->blk), lo + k, lo, lo + r->span, r->where, r->tid, c->site->where);
    unsigned mask = (1u << r->bits) - 1;
    for (unsigned long long e = 0; e < r->bytes / 4; e++) {
        uintptr_t g = emu_tma_elem(&r->m, r->coord, e);
        if (!g) continue; /* outside the tensor: skipped */
        size_t a = lo + (size_t)e * 4;
        if (r->bits) a ^= (a >> 7 & mask) << 4;
        float v, d;
        memcpy(&v, r->snap + (a - lo), 4);
        char what[160];
        snprintf(what, sizeof what, "%s: the bulk reduce's element %llu", r->where, e);
        emu_check_global(c->blk, (const void *)g, 4, what);
        memcpy(&d, (const void *)g, 4);
        d += v;
        emu_store_entry((void *)g, 4); /* (a global store: a block run twice undoes it as it undoes the atomics) */
        memcpy((void *)g, &d, 4);
    }
    drop_red(i);
}

void emu_bulk_wait(emu_call *c, uint32_t n) {
    unsigned t = c->t->id;
    if (t >= MAX_THREADS) emu_fault(c->blk, "%s: thread %u: more than %d threads", c->site->where, t, MAX_THREADS);
    if (n > 63) emu_fault(c->blk, "%s: cp.async.bulk.wait_group %u; valid 0..63", c->site->where, n);
    for (unsigned i = 0; i < nreds;) /* (oldest first: reds is in issue order) */
        if (reds[i].tid == t && reds[i].group && reds[i].group + n <= commits[t]) complete(c, i);
        else i++;
}
