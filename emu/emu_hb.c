/* emu/emu_hb.c - the `race` mode's happens-before checker for shared memory: a vector clock per thread
 * (and one for the TMA unit per mbarrier its copies complete on: a copy's writes are ordered only through
 * its own mbarrier's phases, as each copy completes independently), ordered by the synchronization the emulator runs (barriers with their
 * participants, warp syncs, mbarrier phases, cp.async waits), and a shadow of every shared byte holding
 * its last write and the reads (or atomics) since, each with the thread, its epoch and its site. Two
 * accesses to a byte from different threads, at least one a plain write (or a plain access against an
 * atomic), with neither ordered before the other, are a race whatever order the threads ran in. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu.h"

#define HB_INLINE_READS 4
#define HB_ATOMIC 0x80000000u /* in a clock of the read set: every read of that thread since the write was atomic */

/* One access: the thread (slot), its epoch (its own clock then; 0: none) and what it was. */
typedef struct hb_ep {
    uint32_t clk;
    uint16_t slot;
    uint16_t atomic; /* a read: atomic; the write: a cp.async copy issued and not landed yet (in flight) */
    const char *what;
} hb_ep;

/* One shared byte: valid for the block generation gen; the last plain write; the reads and atomics since
 * (at most one per thread: a later one of the same thread or one ordered after it replaces it), inline up
 * to HB_INLINE_READS, past that a vector of clocks in the pool (vc, 1-based; 0 none). */
typedef struct hb_byte {
    uint32_t gen;
    uint16_t nr;
    uint16_t pad;
    uint32_t vc;
    hb_ep w;
    hb_ep r[HB_INLINE_READS];
} hb_byte;

/* An mbarrier's releases: the arrivals of its current phase, and of the last completed phase of each parity;
 * tma: the TMA unit's slot of the copies that complete on it (-1: none yet). */
typedef struct hb_mbar {
    size_t off;
    uint32_t *cur, *done[2];
    int tma;
} hb_mbar;

/* The TMA unit's clocks: one per mbarrier that copies complete on, in the order they first land; past
 * EMU_HB_TMA_UNITS mbarriers they share clocks (i mod EMU_HB_TMA_UNITS: more ordering, never a false race). */
#define EMU_HB_TMA_UNITS 16

struct emu_hb {
    unsigned nthreads, nslots; /* slots nthreads..+EMU_HB_TMA_UNITS-1: the TMA unit (async proxy) per mbarrier; then each warpgroup's wgmma */
    uint32_t *vc;              /* nslots x nslots: vc[t * nslots + u] = what thread t knows of u's clock */
    uint32_t *bar, *bar_done;  /* EMU_HB_BARRIERS x nslots: releases into each barrier's phase, its last completed phase */
    hb_byte *shadow;
    size_t nbytes, capbytes;
    uint32_t gen;
    uint32_t *pool; /* read vectors of nslots clocks, with their sites in pool_what */
    const char **pool_what;
    size_t npool, cappool;
    uint32_t *pool_free;
    size_t nfree, capfree;
    hb_mbar *mb;
    size_t nmb, capmb;
    size_t tma_off[EMU_HB_TMA_UNITS]; /* the first mbarrier of each TMA slot */
    unsigned ntma;                    /* mbarriers given a TMA slot so far */
};

#define EMU_HB_BARRIERS 16

emu_hb *emu_hb_create(void) { return calloc(1, sizeof(emu_hb)); }

static void free_mbars(emu_hb *h) {
    for (size_t i = 0; i < h->nmb; i++) free(h->mb[i].cur), free(h->mb[i].done[0]), free(h->mb[i].done[1]);
    h->nmb = 0;
}

void emu_hb_destroy(emu_hb *h) {
    if (!h) return;
    free_mbars(h);
    free(h->mb);
    free(h->vc), free(h->bar), free(h->bar_done), free(h->shadow), free(h->pool), free(h->pool_what), free(h->pool_free);
    free(h);
}

bool emu_hb_begin(emu_hb *h, unsigned nthreads, size_t shared_bytes) {
    unsigned ns = nthreads + EMU_HB_TMA_UNITS + (nthreads + 127) / 128; /* the threads, the TMA unit's, each warpgroup's wgmma */
    if (ns != h->nslots) {
        free(h->vc), free(h->bar), free(h->bar_done), free(h->pool), free(h->pool_what);
        h->vc = malloc((size_t)ns * ns * sizeof *h->vc);
        h->bar = malloc((size_t)EMU_HB_BARRIERS * ns * sizeof *h->bar);
        h->bar_done = malloc((size_t)EMU_HB_BARRIERS * ns * sizeof *h->bar_done);
        h->pool = NULL, h->pool_what = NULL, h->cappool = 0;
        h->nslots = ns;
        h->gen = 0;
        if (!h->vc || !h->bar || !h->bar_done) return false;
        if (h->capbytes) memset(h->shadow, 0, h->capbytes * sizeof *h->shadow);
    }
    h->nthreads = nthreads;
    if (shared_bytes > h->capbytes) {
        hb_byte *s = realloc(h->shadow, shared_bytes * sizeof *s);
        if (!s) return false;
        memset(s + h->capbytes, 0, (shared_bytes - h->capbytes) * sizeof *s);
        h->shadow = s, h->capbytes = shared_bytes;
    }
    h->nbytes = shared_bytes;
    if (++h->gen == 0) { /* wrapped: every byte's generation is stale only once cleared */
        memset(h->shadow, 0, h->capbytes * sizeof *h->shadow);
        h->gen = 1;
    }
    memset(h->vc, 0, (size_t)ns * ns * sizeof *h->vc);
    for (unsigned t = 0; t < ns; t++) h->vc[(size_t)t * ns + t] = 1;
    memset(h->bar, 0, (size_t)EMU_HB_BARRIERS * ns * sizeof *h->bar);
    memset(h->bar_done, 0, (size_t)EMU_HB_BARRIERS * ns * sizeof *h->bar_done);
    h->npool = 0, h->nfree = 0, h->ntma = 0;
    free_mbars(h);
    return true;
}

static uint32_t *clocks(emu_hb *h, unsigned slot) { return h->vc + (size_t)slot * h->nslots; }

static void join(uint32_t *to, const uint32_t *from, unsigned n) {
    for (unsigned i = 0; i < n; i++)
        if (from[i] > to[i]) to[i] = from[i];
}

/* Thread slot publishes what it did so far into acc and starts a new epoch. */
static void release(emu_hb *h, unsigned slot, uint32_t *acc) {
    uint32_t *c = clocks(h, slot);
    join(acc, c, h->nslots);
    c[slot]++;
}

static void acquire(emu_hb *h, unsigned slot, const uint32_t *acc) { join(clocks(h, slot), acc, h->nslots); }

/* ---- synchronization ---- */

void emu_hb_barrier_arrive(emu_hb *h, unsigned id, unsigned slot) {
    release(h, slot, h->bar + (size_t)id * h->nslots);
}

void emu_hb_barrier_complete(emu_hb *h, unsigned id) {
    uint32_t *acc = h->bar + (size_t)id * h->nslots, *done = h->bar_done + (size_t)id * h->nslots;
    memcpy(done, acc, h->nslots * sizeof *acc);
    memset(acc, 0, h->nslots * sizeof *acc);
}

void emu_hb_barrier_acquire(emu_hb *h, unsigned id, unsigned slot) {
    acquire(h, slot, h->bar_done + (size_t)id * h->nslots);
}

void emu_hb_warp_sync(emu_hb *h, const unsigned *slots, unsigned n) {
    if (!n) return;
    uint32_t *first = clocks(h, slots[0]);
    for (unsigned i = 1; i < n; i++) join(first, clocks(h, slots[i]), h->nslots);
    for (unsigned i = 1; i < n; i++) memcpy(clocks(h, slots[i]), first, h->nslots * sizeof *first);
    for (unsigned i = 0; i < n; i++) clocks(h, slots[i])[slots[i]]++;
}

static hb_mbar *mbar_at(emu_hb *h, size_t off, bool create) {
    for (size_t i = 0; i < h->nmb; i++)
        if (h->mb[i].off == off) return &h->mb[i];
    if (!create) return NULL;
    if (h->nmb == h->capmb) {
        size_t n = h->capmb ? 2 * h->capmb : 8;
        hb_mbar *m = realloc(h->mb, n * sizeof *m);
        if (!m) return NULL;
        h->mb = m, h->capmb = n;
    }
    hb_mbar *m = &h->mb[h->nmb];
    m->off = off;
    m->tma = -1;
    m->cur = calloc(h->nslots, sizeof *m->cur);
    m->done[0] = calloc(h->nslots, sizeof *m->cur);
    m->done[1] = calloc(h->nslots, sizeof *m->cur);
    if (!m->cur || !m->done[0] || !m->done[1]) {
        free(m->cur), free(m->done[0]), free(m->done[1]);
        return NULL;
    }
    h->nmb++;
    return m;
}

bool emu_hb_mbar_init(emu_hb *h, size_t off) {
    hb_mbar *m = mbar_at(h, off, true);
    if (!m) return false;
    memset(m->cur, 0, h->nslots * sizeof *m->cur);
    memset(m->done[0], 0, h->nslots * sizeof *m->cur);
    memset(m->done[1], 0, h->nslots * sizeof *m->cur);
    return true;
}

bool emu_hb_mbar_arrive(emu_hb *h, size_t off, unsigned slot) {
    hb_mbar *m = mbar_at(h, off, true);
    if (!m) return false;
    release(h, slot, m->cur);
    return true;
}

void emu_hb_mbar_complete(emu_hb *h, size_t off, unsigned parity) {
    hb_mbar *m = mbar_at(h, off, false);
    if (!m) return;
    memcpy(m->done[parity & 1], m->cur, h->nslots * sizeof *m->cur);
    memset(m->cur, 0, h->nslots * sizeof *m->cur);
}

void emu_hb_mbar_acquire(emu_hb *h, size_t off, unsigned parity, unsigned slot) {
    hb_mbar *m = mbar_at(h, off, false);
    if (m) acquire(h, slot, m->done[parity & 1]);
}

/* ---- accesses ---- */

static bool is_write(int kind) { return kind == EMU_HB_WRITE || kind == EMU_HB_PROBE || kind == EMU_HB_ASYNC_WRITE; }
static bool is_read(int kind) { return kind == EMU_HB_READ || kind == EMU_HB_READ_PROBE; }

static const char *kind_name(int kind) {
    return is_write(kind) ? "write" : kind == EMU_HB_ATOMIC ? "atomic" : "read";
}

/* Names a slot: "thread (x,y,z)", the TMA unit of an mbarrier or a warpgroup's wgmma. */
static void slot_name(const emu_block *b, const emu_hb *h, unsigned slot, char *buf, size_t size) {
    unsigned nthreads = h->nthreads;
    if (slot >= nthreads) {
        unsigned u = slot - nthreads;
        if (u < EMU_HB_TMA_UNITS)
            snprintf(buf, size, "the TMA unit (mbarrier at shared offset %zu%s)", h->tma_off[u],
                     h->ntma > EMU_HB_TMA_UNITS ? " and others sharing its clock" : "");
        else snprintf(buf, size, "warpgroup %u's wgmma", u - EMU_HB_TMA_UNITS);
        return;
    }
    unsigned dims[3], ctaid[3], nctaid[3];
    emu_block_dims(b, dims, ctaid, nctaid);
    snprintf(buf, size, "thread (%u,%u,%u)", slot % dims[0], slot / dims[0] % dims[1], slot / (dims[0] * dims[1]));
}

static _Noreturn void race(emu_block *b, emu_hb *h, size_t off, unsigned slot, int kind, const char *what,
                           unsigned other, uint32_t other_clk, const char *other_kind, const char *other_what) {
    char me[96], them[96];
    slot_name(b, h, slot, me, sizeof me);
    slot_name(b, h, other, them, sizeof them);
    size_t dyn = emu_shared_dynamic_offset(b);
    char where[96];
    if (off < dyn) snprintf(where, sizeof where, "shared offset %zu (static shared memory)", off);
    else snprintf(where, sizeof where, "shared offset %zu (byte %zu of dynamic shared memory)", off, off - dyn);
    bool in_flight = !strncmp(other_kind, "cp.async", 8);
    bool tma = other >= h->nthreads && other - h->nthreads < EMU_HB_TMA_UNITS;
    emu_fault(b, "kernel %s: shared-memory race at %s: %s %s (epoch %u) `%s`, unordered with %s's earlier %s (epoch "
                 "%u) `%s`; %s",
              emu_block_kernel(b), where, me, kind_name(kind), clocks(h, slot)[slot], what, them, other_kind, other_clk,
              other_what ? other_what : "?",
              in_flight ? "the copy may land at any time until its issuer's cp.async wait"
              : tma     ? "only a wait on that mbarrier's phase (or what a waiter on it releases) orders a TMA copy's "
                          "write; another mbarrier's phase does not"
                        : "no barrier, warp sync, mbarrier phase or cp.async wait orders them");
}

static uint32_t pool_new(emu_hb *h) {
    uint32_t idx;
    if (h->nfree) {
        idx = h->pool_free[--h->nfree];
    } else {
        if (h->npool == h->cappool) {
            size_t n = h->cappool ? 2 * h->cappool : 16;
            uint32_t *p = realloc(h->pool, n * h->nslots * sizeof *p);
            if (!p) return 0;
            h->pool = p;
            const char **w = realloc(h->pool_what, n * h->nslots * sizeof *w);
            if (!w) return 0;
            h->pool_what = w;
            h->cappool = n;
        }
        idx = (uint32_t)++h->npool;
    }
    memset(h->pool + (size_t)(idx - 1) * h->nslots, 0, h->nslots * sizeof *h->pool);
    return idx;
}

static void pool_release(emu_hb *h, uint32_t idx) {
    if (h->nfree == h->capfree) {
        size_t n = h->capfree ? 2 * h->capfree : 16;
        uint32_t *f = realloc(h->pool_free, n * sizeof *f);
        if (!f) return; /* leaks the slot until the block ends */
        h->pool_free = f, h->capfree = n;
    }
    h->pool_free[h->nfree++] = idx;
}

/* Adds (slot, epoch) to byte s's read set (atomic: an atomic access), dropping entries ordered before it. */
static bool add_read(emu_hb *h, hb_byte *s, unsigned slot, const uint32_t *c, bool atomic, const char *what) {
    uint32_t clk = c[slot];
    if (s->vc) {
        uint32_t *v = h->pool + (size_t)(s->vc - 1) * h->nslots;
        const char **vw = h->pool_what + (size_t)(s->vc - 1) * h->nslots;
        bool was_atomic = !v[slot] || (v[slot] & HB_ATOMIC);
        v[slot] = clk | (atomic && was_atomic ? HB_ATOMIC : 0);
        vw[slot] = what;
        return true;
    }
    unsigned k = 0;
    bool all_atomic = atomic;
    for (unsigned i = 0; i < s->nr; i++) {
        hb_ep *e = &s->r[i];
        if (e->slot == slot || c[e->slot] >= e->clk) { /* ordered before this access: subsumed */
            if (e->slot == slot) all_atomic = all_atomic && e->atomic;
            continue;
        }
        s->r[k++] = *e;
    }
    s->nr = (uint16_t)k;
    if (k < HB_INLINE_READS) {
        s->r[s->nr++] = (hb_ep){clk, (uint16_t)slot, (uint16_t)all_atomic, what};
        return true;
    }
    uint32_t idx = pool_new(h);
    if (!idx) return false;
    uint32_t *v = h->pool + (size_t)(idx - 1) * h->nslots;
    const char **vw = h->pool_what + (size_t)(idx - 1) * h->nslots;
    for (unsigned i = 0; i < s->nr; i++) {
        v[s->r[i].slot] = s->r[i].clk | (s->r[i].atomic ? HB_ATOMIC : 0);
        vw[s->r[i].slot] = s->r[i].what;
    }
    v[slot] = clk | (all_atomic ? HB_ATOMIC : 0);
    vw[slot] = what;
    s->vc = idx, s->nr = 0;
    return true;
}

void emu_hb_access(emu_block *b, emu_hb *h, unsigned slot, size_t off, size_t size, int kind, const char *what) {
    if (off >= h->nbytes) return;
    if (size > h->nbytes - off) size = h->nbytes - off;
    const uint32_t *c = clocks(h, slot);
    for (size_t i = off; i < off + size; i++) {
        hb_byte *s = &h->shadow[i];
        if (s->gen != h->gen) { /* untouched in this block (the pool of an older block was emptied) */
            memset(s, 0, sizeof *s);
            s->gen = h->gen;
        }
        if (kind == EMU_HB_READ_RECORD) {
            if (!add_read(h, s, slot, c, false, what)) emu_fault(b, "race mode: out of memory for the shared-memory shadow");
            continue;
        }
        /* the last plain write must come before any access of another thread; a cp.async copy in flight may
         * land any time until its issuer's wait, so no other thread may touch its bytes before then */
        if (s->w.clk && s->w.slot != slot && (s->w.atomic || c[s->w.slot] < s->w.clk))
            race(b, h, i, slot, kind, what, s->w.slot, s->w.clk,
                 s->w.atomic ? "cp.async, in flight (its issuer has not waited for it yet)," : "write", s->w.what);
        /* the reads and atomics since: a write must come after all of them, a read after the atomics, an
         * atomic after the plain reads */
        if (s->vc) {
            const uint32_t *v = h->pool + (size_t)(s->vc - 1) * h->nslots;
            const char **vw = h->pool_what + (size_t)(s->vc - 1) * h->nslots;
            for (unsigned u = 0; u < h->nslots; u++) {
                if (!v[u] || u == slot) continue;
                uint32_t clk = v[u] & ~HB_ATOMIC;
                bool at = v[u] & HB_ATOMIC;
                bool conflict = is_write(kind) || (is_read(kind) && at) || (kind == EMU_HB_ATOMIC && !at);
                if (conflict && c[u] < clk) race(b, h, i, slot, kind, what, u, clk, at ? "atomic" : "read", vw[u]);
            }
        } else {
            for (unsigned r = 0; r < s->nr; r++) {
                const hb_ep *e = &s->r[r];
                if (e->slot == slot) continue;
                bool conflict = is_write(kind) || (is_read(kind) && e->atomic) || (kind == EMU_HB_ATOMIC && !e->atomic);
                if (conflict && c[e->slot] < e->clk)
                    race(b, h, i, slot, kind, what, e->slot, e->clk, e->atomic ? "atomic" : "read", e->what);
            }
        }
        if (kind == EMU_HB_PROBE || kind == EMU_HB_READ_PROBE) {
            continue;
        } else if (is_write(kind)) {
            s->w = (hb_ep){c[slot], (uint16_t)slot, kind == EMU_HB_ASYNC_WRITE, what};
            if (s->vc) pool_release(h, s->vc);
            s->vc = 0, s->nr = 0;
        } else if (!add_read(h, s, slot, c, kind == EMU_HB_ATOMIC, what)) {
            emu_fault(b, "race mode: out of memory for the shared-memory shadow");
        }
    }
}

/* Records a write without checking it (what the TMA unit lands, checked as its issuer's write at issue). */
static void record_write(emu_hb *h, unsigned slot, size_t off, size_t size, const char *what) {
    if (off >= h->nbytes) return;
    if (size > h->nbytes - off) size = h->nbytes - off;
    uint32_t clk = clocks(h, slot)[slot];
    for (size_t i = off; i < off + size; i++) {
        hb_byte *s = &h->shadow[i];
        if (s->gen == h->gen && s->vc) pool_release(h, s->vc);
        memset(s, 0, sizeof *s);
        s->gen = h->gen;
        s->w = (hb_ep){clk, (uint16_t)slot, 0, what};
    }
}

unsigned emu_hb_wgmma_slot(const emu_hb *h, unsigned wg) { return h->nthreads + EMU_HB_TMA_UNITS + wg; }

void emu_hb_unit_epoch(emu_hb *h, unsigned unit, uint32_t epoch) { clocks(h, unit)[unit] = epoch; }

void emu_hb_unit_acquire(emu_hb *h, unsigned slot, unsigned unit, uint32_t epoch) {
    uint32_t *c = clocks(h, slot);
    if (c[unit] < epoch) c[unit] = epoch;
}

/* A copy landed: its bytes are the write of the TMA unit's slot of its mbarrier, released into that
 * mbarrier's phase only (acquiring another mbarrier does not order it, even one whose copy landed later). */
void emu_hb_tma_landed(emu_hb *h, size_t bar_off, size_t off, size_t size, const char *what) {
    hb_mbar *m = mbar_at(h, bar_off, true);
    unsigned u = 0;
    if (m) {
        if (m->tma < 0) {
            if (h->ntma < EMU_HB_TMA_UNITS) h->tma_off[h->ntma] = bar_off;
            m->tma = (int)(h->ntma++ % EMU_HB_TMA_UNITS);
        }
        u = (unsigned)m->tma;
    }
    unsigned slot = h->nthreads + u;
    record_write(h, slot, off, size, what);
    if (m) release(h, slot, m->cur);
}
