/* emu/emu_sched.c - runs a grid block by block: fibers, barriers, warp meetings, faults, races. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu.h"

#define EMU_BARRIERS 16
#define EMU_POISON 0xff

typedef struct emu_bar {
    unsigned expected, arrived; /* warps: the phase's count / 32 (the block's warps without one), arrived so far */
    bool all;                   /* the phase takes every thread of the block (no count) */
    int site, red;              /* the site that began the phase; its reduction */
    uint32_t acc;
    uint32_t lanes[EMU_MAX_THREADS / EMU_WARP]; /* lanes at it per warp; all ones once the warp arrived */
} emu_bar;

/* A warp collective some lanes of a warp wait in. */
typedef struct emu_meet {
    const emu_op *op;
    emu_warp_fn fn;
    int site;
    uint32_t mask, arrived;
} emu_meet;

struct emu_block {
    const emu_kernel_rt *k;
    emu_stacks stacks;
    emu_thread *threads; /* EMU_MAX_THREADS */
    unsigned nthreads, nwarps, block[3], grid[3], ctaid[3];
    void **args;
    emu_fiber host;
    emu_thread *cur;
    unsigned exited;
    uint32_t exited_mask[EMU_MAX_THREADS / EMU_WARP];
    emu_bar bar[EMU_BARRIERS];
    emu_meet meet[EMU_MAX_THREADS / EMU_WARP][EMU_WARP];
    unsigned nmeet[EMU_MAX_THREADS / EMU_WARP];
    bool failed;
    char fault[1024];
    emu_log log;
    bool logging;
    size_t arena_used;   /* the shared memory window: static, then the launch's dynamic bytes */
    unsigned dynamic_smem;
    const size_t *arg_bytes; /* kiln_emu_launch.arg_bytes: the buffers global accesses must stay in */
    emu_hb *hb;              /* the race mode's happens-before checker (created on first use) */
    bool race;               /* this launch runs it (kiln_emu_launch.race or KILN_EMU_RACE=1) */
};

/* The block running on this host thread; intrinsic calls find it here. */
static _Thread_local emu_block *emu_current;

/* ---- helpers for handlers ---- */

uint32_t emu_slot_u32(const unsigned char *slots, unsigned i) {
    uint32_t v;
    memcpy(&v, slots + (size_t)i * EMU_SLOT, sizeof v);
    return v;
}
uint32_t emu_arg_u32(const emu_call *c, unsigned i) { return emu_slot_u32(c->args, i); }
float emu_arg_f32(const emu_call *c, unsigned i) {
    float f;
    memcpy(&f, c->args + (size_t)i * EMU_SLOT, sizeof f);
    return f;
}
void emu_ret_u32(emu_call *c, uint32_t v) { memcpy(c->ret, &v, sizeof v); }
void emu_ret_f32(emu_call *c, float v) { memcpy(c->ret, &v, sizeof v); }

void emu_block_dims(const emu_block *blk, unsigned ntid[3], unsigned ctaid[3], unsigned nctaid[3]) {
    memcpy(ntid, blk->block, sizeof blk->block);
    memcpy(ctaid, blk->ctaid, sizeof blk->ctaid);
    memcpy(nctaid, blk->grid, sizeof blk->grid);
}
unsigned emu_block_threads(const emu_block *blk) { return blk->nthreads; }
emu_hb *emu_block_hb(const emu_block *blk) { return blk->race ? blk->hb : NULL; }
size_t emu_shared_dynamic_offset(const emu_block *blk) { return blk->k->dynamic_offset; }
const char *emu_block_kernel(const emu_block *blk) { return blk->k->meta ? blk->k->meta->entry : ""; }

static int thread_desc(const emu_block *b, const emu_thread *t, char *buf, size_t size) {
    return snprintf(buf, size, "block (%u,%u,%u) thread (%u,%u,%u)", b->ctaid[0], b->ctaid[1], b->ctaid[2],
                    t->tid[0], t->tid[1], t->tid[2]);
}

static const char *site_where(const emu_block *b, int site) {
    return site >= 0 && (unsigned)site < b->k->nsites ? b->k->sites[site].where : "?";
}

/* Switches back to the scheduler for good: the block has failed. */
static _Noreturn void abandon(emu_block *b) {
    b->failed = true;
    b->cur->fiber.dirty = true;
    emu_fiber_switch(&b->cur->fiber, &b->host, true);
    abort(); /* unreachable: a failed block never resumes its threads */
}

void emu_fault(emu_block *b, const char *fmt, ...) {
    char who[128];
    thread_desc(b, b->cur, who, sizeof who);
    va_list ap;
    va_start(ap, fmt);
    char what[880];
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    snprintf(b->fault, sizeof b->fault, "%s: %s", who, what);
    abandon(b);
}

/* The calling thread waits until someone makes it ready again. */
static void wait_here(emu_block *b, emu_thread *t, int site) {
    t->state = EMU_WAITING;
    t->wait_site = site;
    emu_fiber_switch(&t->fiber, &b->host, false);
    t->wait_site = -1;
}

/* ---- block barriers (the PTX ISA's barrier{.cta}: 16 per CTA, ids 0..15) ----
 * A thread count b (a multiple of 32) or, without one, every thread of the block takes part. Arrival is
 * per warp: a warp arrives once all of its non-exited lanes have executed the instruction, and counts as
 * 32 threads of b (a partial last warp of the block too); sync and red wait until b threads' warps have
 * arrived, arrive does not (its lanes only wait for the rest of their warp). Then the barrier starts its
 * next phase at once. Every thread of a phase must name the same count (and the same reduction); a thread
 * arriving twice in one phase (its warp's other lanes elsewhere), an id or count out of range, a phase
 * left incomplete when the block ends and a phase nobody can complete (a deadlock) are faults naming the
 * kernel, the site and the barrier. */

static uint32_t red_init(int red) { return red == 2 ? 1u : 0u; }
static uint32_t red_step(int red, uint32_t acc, uint32_t pred) {
    switch (red) {
    case 1: return acc + (pred != 0);
    case 2: return acc & (pred != 0);
    case 3: return acc | (pred != 0);
    default: return 0;
    }
}

/* wait_bar of a thread that executed barrier.arrive on barrier id and waits for the rest of its warp */
#define ARRIVE_WAIT(id) (EMU_BARRIERS + (int)(id))

/* The lanes of warp w that exist and have not exited. */
static uint32_t live_lanes(const emu_block *b, unsigned w) {
    unsigned n = b->nthreads - w * EMU_WARP;
    uint32_t all = n >= EMU_WARP ? 0xffffffffu : (1u << n) - 1u;
    return all & ~b->exited_mask[w];
}

/* Barrier id's phase completed: its waiters run again with the reduction's result. */
static void barrier_release(emu_block *b, unsigned id, uint32_t result) {
    emu_bar *bar = &b->bar[id];
    if (b->k->prof && bar->all) emu_prof_sync(b->k->prof, 0, b->nwarps, b->nthreads);
    bar->arrived = 0;
    memset(bar->lanes, 0, sizeof bar->lanes);
    if (b->race) emu_hb_barrier_complete(b->hb, id);
    for (unsigned i = 0; i < b->nthreads; i++) {
        emu_thread *t = &b->threads[i];
        if (t->state == EMU_WAITING && t->wait_bar == (int)id) {
            if (b->race) emu_hb_barrier_acquire(b->hb, id, t->id);
            t->state = EMU_READY;
            t->wait_bar = -1;
            memcpy(t->out, &result, sizeof result);
        }
    }
}

/* If every live lane of warp w is at barrier id, the warp arrives (and may complete the phase); its lanes
 * waiting in barrier.arrive go on. True when the warp arrived. */
static bool warp_arrival(emu_block *b, unsigned id, unsigned w) {
    emu_bar *bar = &b->bar[id];
    if (!bar->lanes[w] || bar->lanes[w] != live_lanes(b, w)) return false;
    bar->lanes[w] = 0xffffffffu; /* counted: a lane of it arriving again in this phase is a fault */
    for (unsigned i = w * EMU_WARP; i < b->nthreads && i < (w + 1) * EMU_WARP; i++) {
        emu_thread *t = &b->threads[i];
        if (t->state == EMU_WAITING && t->wait_bar == ARRIVE_WAIT(id)) t->state = EMU_READY, t->wait_bar = -1;
    }
    if (++bar->arrived == bar->expected) barrier_release(b, id, bar->acc);
    return true;
}

static void first_exited(const emu_block *b, char *buf, size_t size) {
    for (unsigned i = 0; i < b->nthreads; i++)
        if (b->threads[i].state == EMU_EXITED) {
            snprintf(buf, size, "thread (%u,%u,%u)", b->threads[i].tid[0], b->threads[i].tid[1], b->threads[i].tid[2]);
            return;
        }
    snprintf(buf, size, "?");
}

uint32_t emu_barrier_op(emu_call *c, unsigned id, unsigned count, int red, uint32_t pred, bool arrive) {
    emu_block *b = c->blk;
    emu_thread *t = c->t;
    const char *where = c->site->where;
    if (id >= EMU_BARRIERS)
        emu_fault(b, "%s: barrier id %u out of range (valid: 0..%d)", where, id, EMU_BARRIERS - 1);
    if (arrive && !count)
        emu_fault(b, "%s: barrier.arrive on barrier %u needs a non-zero thread count", where, id);
    if (count && (count % EMU_WARP || count > b->nwarps * EMU_WARP))
        emu_fault(b, "%s: barrier %u thread count %u must be a multiple of %d and at most the block's %u threads",
                  where, id, count, EMU_WARP, b->nwarps * EMU_WARP);
    if (!count && b->exited) {
        char gone[64];
        first_exited(b, gone, sizeof gone);
        emu_fault(b, "divergent barrier: reached %s (barrier %u), but %s has exited; a barrier needs every "
                     "thread of the block", where, id, gone);
    }
    unsigned expected = count ? count / EMU_WARP : b->nwarps;
    emu_bar *bar = &b->bar[id];
    bool fresh = true;
    for (unsigned w = 0; w < b->nwarps && fresh; w++) fresh = !bar->lanes[w];
    if (fresh) {
        bar->expected = expected;
        bar->all = !count;
        bar->site = c->site_index;
        bar->red = red;
        bar->acc = red_init(red);
    } else if (!count && bar->all && bar->red == red && bar->site != c->site_index) {
        emu_fault(b, "divergent barrier: reached %s (barrier %u, %u threads) while %u warps wait at %s "
                     "(barrier %u, %u threads)", where, id, b->nthreads, bar->arrived, site_where(b, bar->site), id,
                  b->nthreads);
    } else if (bar->expected != expected || bar->all != !count || bar->red != red) {
        emu_fault(b, "barrier %u count mismatch: %s names %u threads%s while the phase begun at %s names %u%s "
                     "(%u warps arrived); every thread of a phase must name the same count",
                  id, where, count ? count : b->nthreads, red ? " with a reduction" : "", site_where(b, bar->site),
                  bar->all ? b->nthreads : bar->expected * EMU_WARP, bar->red ? " with a reduction" : "",
                  bar->arrived);
    }
    if (bar->lanes[t->warp] >> t->lane & 1)
        emu_fault(b, "%s: barrier %u: thread (%u,%u,%u) arrived twice in one phase (lanes 0x%08x of its warp "
                     "never arrived: an aligned barrier needs the whole warp)", where, id, t->tid[0], t->tid[1],
                  t->tid[2], live_lanes(b, t->warp) & ~bar->lanes[t->warp]);
    bar->acc = red_step(red, bar->acc, pred);
    if (b->race) emu_hb_barrier_arrive(b->hb, id, t->id); /* releases what it did before the barrier */
    bar->lanes[t->warp] |= 1u << t->lane;
    bool warp_done = warp_arrival(b, id, t->warp);
    if (warp_done && bar->arrived == 0) { /* this warp completed the phase */
        if (b->race && !arrive) emu_hb_barrier_acquire(b->hb, id, t->id);
        return bar->acc;
    }
    if (arrive) {
        if (!warp_done) {
            t->wait_bar = ARRIVE_WAIT(id);
            wait_here(b, t, c->site_index);
        }
        return 0;
    }
    t->wait_bar = (int)id;
    wait_here(b, t, c->site_index);
    uint32_t result;
    memcpy(&result, t->out, sizeof result);
    return result;
}

uint32_t emu_barrier(emu_call *c, unsigned id, unsigned count, int red, uint32_t pred) {
    return emu_barrier_op(c, id, count, red, pred, false);
}

/* Thread t exited: warps of it waiting at a counted barrier may now be whole. */
static void barrier_exit(emu_block *b, emu_thread *t) {
    for (unsigned id = 0; id < EMU_BARRIERS; id++) {
        emu_bar *bar = &b->bar[id];
        if (bar->lanes[t->warp] && bar->lanes[t->warp] != 0xffffffffu) warp_arrival(b, id, t->warp);
    }
}

/* ---- sleeping on asynchronous state (mbarrier phases) ---- */

enum { WAIT_ASYNC = -2 }; /* wait_bar of a thread asleep in emu_sleep */

void emu_sleep_on(emu_call *c, const void *obj) {
    c->t->wait_bar = WAIT_ASYNC;
    c->t->wait_obj = obj;
    wait_here(c->blk, c->t, c->site_index);
    c->t->wait_obj = NULL;
}

void emu_sleep(emu_call *c) { emu_sleep_on(c, NULL); }

bool emu_block_awaits(const emu_block *b, const void *obj) {
    for (unsigned i = 0; i < b->nthreads; i++) {
        const emu_thread *t = &b->threads[i];
        if (t->state == EMU_WAITING && t->wait_bar == WAIT_ASYNC && t->wait_obj == obj) return true;
    }
    return false;
}

void emu_wake_sleepers(emu_block *b) {
    for (unsigned i = 0; i < b->nthreads; i++) {
        emu_thread *t = &b->threads[i];
        if (t->state == EMU_WAITING && t->wait_bar == WAIT_ASYNC) t->state = EMU_READY, t->wait_bar = -1;
    }
}

/* ---- warp meetings ---- */

static uint32_t warp_lanes(const emu_block *b, unsigned warp) {
    unsigned n = b->nthreads - warp * EMU_WARP;
    return n >= EMU_WARP ? 0xffffffffu : (1u << n) - 1;
}

static unsigned lowest_lane(uint32_t m) { return (unsigned)__builtin_ctz(m); }

/* Whether a warp collective orders the shared accesses of its lanes (the race mode): bar.warp.sync does by
 * the PTX ISA; shfl.sync and vote.sync are taken as ordering too (a value passed between lanes carries what
 * its lane did before); ldmatrix and mma.sync only wait for their lanes (execution, not memory). */
static bool meet_orders_memory(const emu_op *op) {
    return !strstr(op->name, ".ldmatrix.") && !strstr(op->name, ".mma.");
}

bool emu_warp_meet(emu_call *c, uint32_t mask, emu_warp_fn fn) {
    emu_block *b = c->blk;
    emu_thread *t = c->t;
    const char *where = c->site->where;
    unsigned w = t->warp;
    if (!(mask >> t->lane & 1))
        emu_fault(b, "%s: mask 0x%08x does not include the calling lane %u", where, mask, t->lane);
    if (mask & ~warp_lanes(b, w))
        emu_fault(b, "%s: mask 0x%08x names lane %u, which does not exist in warp %u of a %u-thread block",
                  where, mask, lowest_lane(mask & ~warp_lanes(b, w)), w, b->nthreads);
    if (mask & b->exited_mask[w])
        emu_fault(b, "%s: mask 0x%08x names lane %u, which has exited", where, mask,
                  lowest_lane(mask & b->exited_mask[w]));
    t->in = c->args;
    emu_meet *m = NULL;
    for (unsigned i = 0; i < b->nmeet[w]; i++)
        if (b->meet[w][i].mask & mask) m = &b->meet[w][i];
    if (m && (m->mask != mask || m->op != c->site->op)) {
        emu_fault(b, "%s with mask 0x%08x while lanes 0x%08x of the warp wait in %s with mask 0x%08x", where, mask,
                  m->arrived, site_where(b, m->site), m->mask);
    }
    if (!m) {
        m = &b->meet[w][b->nmeet[w]++];
        *m = (emu_meet){.op = c->site->op, .fn = fn, .site = c->site_index, .mask = mask, .arrived = 0};
    }
    m->arrived |= 1u << t->lane;
    if (m->arrived == mask) {
        emu_thread *lanes[EMU_WARP] = {0};
        for (unsigned l = 0; l < EMU_WARP; l++)
            if (mask >> l & 1) lanes[l] = &b->threads[w * EMU_WARP + l];
        emu_meet done = *m;
        *m = b->meet[w][--b->nmeet[w]];
        if (b->race && meet_orders_memory(done.op)) {
            unsigned slots[EMU_WARP], n = 0;
            for (unsigned l = 0; l < EMU_WARP; l++)
                if (lanes[l]) slots[n++] = lanes[l]->id;
            emu_hb_warp_sync(b->hb, slots, n);
        }
        if (b->k->prof && mask == (warp_lanes(b, w) & ~b->exited_mask[w])) emu_prof_sync(b->k->prof, w, 1, b->nthreads);
        if (!done.fn(b, done.op, lanes, mask)) return false;
        for (unsigned l = 0; l < EMU_WARP; l++)
            if (lanes[l] && lanes[l] != t) lanes[l]->state = EMU_READY;
    } else {
        wait_here(b, t, c->site_index);
    }
    memcpy(c->ret, t->out, c->site->ret_size);
    return true;
}

/* ---- the intrinsic and store entry points called by host code ---- */

void emu_dispatch_entry(int site, const void *args, void *ret) {
    emu_block *b = emu_current;
    unsigned char *depth = __builtin_frame_address(0);
    if (!b->cur->fiber.low || depth < b->cur->fiber.low) b->cur->fiber.low = depth;
    emu_call c = {b, b->cur, &b->k->sites[site], site, args, ret};
    c.site->op->fn(&c);
}

emu_prof *emu_prof_current(unsigned *thread) {
    emu_block *b = emu_current;
    if (!b || !b->k->prof || !b->cur) return NULL;
    *thread = b->cur->id;
    return b->k->prof;
}

void emu_store_entry(void *p, uint64_t size) {
    emu_block *b = emu_current;
    if (!b || !b->logging) return;
    if (emu_stacks_contain(&b->stacks, p)) return;
    unsigned char *c = p;
    if (c >= b->k->arena && c < b->k->arena + b->k->arena_size) return;
    emu_log_store(&b->log, p, (size_t)size);
}

/* ---- memory access checks (kiln_emu_access and the handlers' own accesses) ---- */

#define EMU_NULL_PAGE 65536u /* no device allocation starts this low */

static void describe_addr(const emu_block *b, uintptr_t a, char *buf, size_t size);

/* Where a shared address lies, for messages. */
static void describe_shared(const emu_block *b, uintptr_t a, char *buf, size_t size) {
    uintptr_t base = (uintptr_t)b->k->arena;
    if (a >= base && a - base < b->k->dynamic_offset)
        snprintf(buf, size, "shared offset %zu, in static shared memory", (size_t)(a - base));
    else if (a >= base && a - base < b->k->arena_size)
        snprintf(buf, size, "shared offset %zu, byte %zu of dynamic shared memory", (size_t)(a - base),
                 (size_t)(a - base - b->k->dynamic_offset));
    else
        snprintf(buf, size, "%p, not a shared memory address", (void *)a);
}

static _Noreturn void shared_oob(emu_block *b, uintptr_t a, size_t size, const char *what) {
    char where[128];
    describe_shared(b, a, where, sizeof where);
    emu_fault(b, "out-of-bounds shared memory access at %s (%zu bytes): %s; the block has %zu bytes of shared "
                 "memory (%zu static, %u dynamic as launched%s)", where, size, what, b->arena_used,
              b->k->dynamic_offset, b->dynamic_smem,
              b->k->meta && b->k->meta->dynamic_smem > b->dynamic_smem ? ", less than the kernel's metadata asks for"
                                                                       : "");
}

unsigned char *emu_shared_base(const emu_block *b) { return b->k->arena; }

void emu_check_shared(emu_block *b, const void *p, size_t size, const char *what) {
    uintptr_t a = (uintptr_t)p, base = (uintptr_t)b->k->arena;
    if (a < base || a - base > b->arena_used || size > b->arena_used - (a - base)) shared_oob(b, a, size, what);
    if (emu_tma_live) emu_tma_guard(b, p, size, what); /* emu_tma.c: a TMA copy's phase still open */
}

/* A global access outside every buffer the launch declared: names the nearest one. */
static _Noreturn void global_oob(emu_block *b, uintptr_t a, size_t size, const char *what) {
    const kiln_kernel_meta *m = b->k->meta;
    int best = -1;
    uintptr_t gap = UINTPTR_MAX;
    bool before = false;
    for (int i = 0; i < m->nparams; i++) {
        uintptr_t p;
        if (m->params[i].kind != KILN_PARAM_PTR) continue;
        memcpy(&p, b->args[i], sizeof p);
        if (!p) continue;
        uintptr_t end = p + b->arg_bytes[i];
        uintptr_t d = a < p ? p - a : a >= end ? a - end : 0;
        if (d < gap) gap = d, best = i, before = a < p;
    }
    if (best < 0)
        emu_fault(b, "global access at %p (%zu bytes) with no pointer argument to reach it: %s", (void *)a, size, what);
    uintptr_t base;
    memcpy(&base, b->args[best], sizeof base);
    if (before)
        emu_fault(b, "out-of-bounds global access at %p (%zu bytes), %zu bytes before argument '%s' (%zu bytes): %s",
                  (void *)a, size, (size_t)gap, m->params[best].name, b->arg_bytes[best], what);
    emu_fault(b, "out-of-bounds global access at %p (%zu bytes), byte %zu of argument '%s', which has %zu bytes: %s",
              (void *)a, size, (size_t)(a - base), m->params[best].name, b->arg_bytes[best], what);
}

void emu_check_global(emu_block *b, const void *p, size_t size, const char *what) {
    uintptr_t a = (uintptr_t)p;
    if (a < EMU_NULL_PAGE) emu_fault(b, "invalid global address %p (%zu bytes, in the null page): %s", p, size, what);
    if (!b->arg_bytes || emu_stacks_contain(&b->stacks, p)) return;
    const kiln_kernel_meta *m = b->k->meta;
    for (int i = 0; i < m->nparams; i++) {
        uintptr_t base;
        if (m->params[i].kind != KILN_PARAM_PTR) continue;
        memcpy(&base, b->args[i], sizeof base);
        if (base && a >= base && a - base <= b->arg_bytes[i] && size <= b->arg_bytes[i] - (a - base)) return;
    }
    global_oob(b, a, size, what);
}

void emu_access_entry(void *p, uint64_t size, uint32_t access) {
    emu_block *b = emu_current;
    const emu_access *acc = &b->k->access[access];
    uintptr_t a = (uintptr_t)p, base = (uintptr_t)b->k->arena;
    if (a & (acc->align - 1)) {
        char where[160];
        bool shared = acc->space == EMU_SPACE_SHARED || (a >= base && a - base < b->k->arena_size);
        if (shared) describe_shared(b, a, where, sizeof where);
        else describe_addr(b, a, where, sizeof where);
        emu_fault(b, "misaligned address %p (%s): %s needs %u-byte alignment%s", p, where, acc->what, acc->align,
                  acc->size && acc->size < acc->align ? " (its IR align lets the NVPTX backend merge it into a wider "
                                                        "vector access, as it does with neighbouring elements)" : "");
    }
    if (acc->space == EMU_SPACE_SHARED || (acc->space == EMU_SPACE_GENERIC && a >= base && a - base < b->k->arena_size)) {
        emu_check_shared(b, p, (size_t)size, acc->what);
        if (b->race) emu_hb_access(b, b->hb, b->cur->id, (size_t)(a - base), (size_t)size, acc->kind, acc->what);
    } else if (size && acc->module) {
        if (a < EMU_NULL_PAGE) emu_check_global(b, p, (size_t)size, acc->what); /* the null page's fault */
    } else if (size) {
        emu_check_global(b, p, (size_t)size, acc->what);
    }
}

/* ---- threads ---- */

static void thread_exit_checks(emu_block *b, emu_thread *t) {
    unsigned w = t->warp;
    for (unsigned i = 0; i < b->nmeet[w]; i++) {
        emu_meet *m = &b->meet[w][i];
        if (m->mask >> t->lane & 1)
            emu_fault(b, "exited while lanes 0x%08x of its warp wait for it in %s (mask 0x%08x)", m->arrived,
                      site_where(b, m->site), m->mask);
    }
    for (unsigned id = 0; id < EMU_BARRIERS; id++) {
        const emu_bar *bar = &b->bar[id];
        unsigned at = 0;
        for (unsigned w = 0; w < b->nwarps; w++) at += (unsigned)__builtin_popcount(bar->lanes[w] & live_lanes(b, w));
        if (bar->all && at)
            emu_fault(b, "divergent barrier: exited while %u threads wait at %s (barrier %u needs every thread "
                         "of the block)", at, site_where(b, bar->site), id);
    }
}

static void fiber_main(void) {
    emu_block *b = emu_current;
    emu_thread *t = b->cur;
    emu_fiber_started(&t->fiber, &b->host);
    b->k->entry(b->args);
    thread_exit_checks(b, t);
    t->state = EMU_EXITED;
    b->exited++;
    b->exited_mask[t->warp] |= 1u << t->lane;
    barrier_exit(b, t);
    emu_fiber_switch(&t->fiber, &b->host, true);
    abort(); /* unreachable: an exited fiber is only ever reset */
}

/* ---- blocks ---- */

kiln_status emu_block_create(emu_block **out, kiln_error *err) {
    emu_block *b = calloc(1, sizeof *b);
    if (b) b->threads = calloc(EMU_MAX_THREADS, sizeof *b->threads);
    if (!b || !b->threads) {
        if (b) free(b);
        return kiln_fail(err, KILN_ENOMEM, "emulator: out of memory");
    }
    *out = b;
    return KILN_OK;
}

void emu_block_destroy(emu_block *b) {
    if (!b) return;
    for (unsigned i = 0; i < b->stacks.count; i++) emu_fiber_fini(&b->threads[i].fiber);
    emu_fiber_fini(&b->host);
    emu_stacks_release(&b->stacks);
    emu_log_free(&b->log);
    emu_hb_destroy(b->hb);
    free(b->threads);
    free(b);
}

static kiln_status prepare_threads(emu_block *b, kiln_error *err) {
    unsigned old = b->stacks.count;
    if (old < b->nthreads) {
        for (unsigned i = 0; i < old; i++) emu_fiber_fini(&b->threads[i].fiber);
        kiln_status st = emu_stacks_reserve(&b->stacks, b->nthreads, err);
        if (st != KILN_OK) return st;
        for (unsigned i = 0; i < b->stacks.count; i++) emu_fiber_init(&b->threads[i].fiber, &b->stacks, i);
    }
    for (unsigned i = 0; i < b->nthreads; i++) {
        emu_thread *t = &b->threads[i];
        t->id = i;
        t->lane = i % EMU_WARP;
        t->warp = i / EMU_WARP;
        t->tid[0] = i % b->block[0];
        t->tid[1] = i / b->block[0] % b->block[1];
        t->tid[2] = i / (b->block[0] * b->block[1]);
    }
    return KILN_OK;
}

static void reset_block(emu_block *b) {
    for (unsigned i = 0; i < b->nthreads; i++) {
        emu_thread *t = &b->threads[i];
        t->state = EMU_READY;
        t->wait_site = -1;
        t->wait_bar = -1;
        t->wait_obj = NULL;
        t->clock = 0;
        emu_fiber_reset(&t->fiber, fiber_main);
    }
    b->exited = 0;
    memset(b->exited_mask, 0, sizeof b->exited_mask);
    memset(b->bar, 0, sizeof b->bar);
    memset(b->nmeet, 0, sizeof b->nmeet);
    memset(b->k->arena, EMU_POISON, b->arena_used);
    b->failed = false;
}

/* Appends "; barrier N: W of E warps arrived (begun at SITE)" for each barrier whose phase has arrivals. */
static size_t barrier_states(const emu_block *b, char *buf, size_t size) {
    size_t len = 0;
    for (unsigned id = 0; id < EMU_BARRIERS && len + 160 < size; id++) {
        const emu_bar *bar = &b->bar[id];
        unsigned lanes = 0;
        for (unsigned w = 0; w < b->nwarps; w++) lanes += bar->lanes[w] != 0;
        if (!lanes) continue;
        len += (size_t)snprintf(buf + len, size - len, "; barrier %u: %u of %u warps arrived (%u threads named at %s)",
                                id, bar->arrived, bar->expected, bar->all ? b->nthreads : bar->expected * EMU_WARP,
                                site_where(b, bar->site));
    }
    return len;
}

/* Describes who waits where when no thread can run: the barriers with arrivals first, then the threads. */
static kiln_status deadlock(emu_block *b, kiln_error *err) {
    char msg[900] = "";
    size_t len = barrier_states(b, msg, 480);
    for (unsigned i = 0; i < b->nthreads && len < sizeof msg - 120;) {
        emu_thread *t = &b->threads[i];
        unsigned j = i + 1;
        while (j < b->nthreads && b->threads[j].state == t->state && b->threads[j].wait_site == t->wait_site) j++;
        const char *what = t->state == EMU_EXITED ? "exited" : site_where(b, t->wait_site);
        len += (size_t)snprintf(msg + len, sizeof msg - len, "; threads %u-%u %s%s", i, j - 1,
                                t->state == EMU_EXITED ? "" : "wait at ", what);
        i = j;
    }
    return kiln_fail(err, KILN_EEMU, "block (%u,%u,%u): deadlock, no thread can continue%s", b->ctaid[0],
                     b->ctaid[1], b->ctaid[2], msg);
}

/* Runs every thread of the current block to completion, in ascending or descending order. */
static kiln_status run_block(emu_block *b, bool descending, kiln_error *err) {
    reset_block(b);
    if (b->race && !emu_hb_begin(b->hb, b->nthreads, b->arena_used))
        return kiln_fail(err, KILN_ENOMEM, "emulator: out of memory for the race mode's clocks");
    emu_wgmma_block_begin(); /* emu_wgmma.c: no wgmma in flight */
    emu_tma_block_begin();   /* emu_tma.c: no TMA copy in flight */
    emu_cp_async_block_begin(); /* emu_warp_mma.c: no cp.async copy pending */
    if (b->k->prof) emu_prof_block_begin(b->k->prof, b->nthreads);
    char msg[900];
    for (bool progress = true; progress;) {
        progress = false;
        for (unsigned k = 0; k < b->nthreads; k++) {
            emu_thread *t = &b->threads[descending ? b->nthreads - 1 - k : k];
            if (t->state != EMU_READY) continue;
            b->cur = t;
            emu_fiber_switch(&b->host, &t->fiber, false);
            progress = true;
            if (b->failed) {
                for (unsigned i = 0; i < b->nthreads; i++)
                    if (b->threads[i].state == EMU_WAITING) b->threads[i].fiber.dirty = true;
                return kiln_fail(err, KILN_EEMU, "%s", b->fault);
            }
        }
        if (!progress && b->exited != b->nthreads) { /* nothing runs: a TMA copy in flight lands */
            int landed = emu_tma_land_oldest(b, msg, sizeof msg);
            if (landed < 0) {
                for (unsigned i = 0; i < b->nthreads; i++)
                    if (b->threads[i].state == EMU_WAITING) b->threads[i].fiber.dirty = true;
                return kiln_fail(err, KILN_EEMU, "block (%u,%u,%u): %s", b->ctaid[0], b->ctaid[1], b->ctaid[2], msg);
            }
            progress = landed > 0;
        }
    }
    if (b->exited != b->nthreads) return deadlock(b, err);
    if (!emu_tma_block_end(b, msg, sizeof msg))
        return kiln_fail(err, KILN_EEMU, "block (%u,%u,%u): %s", b->ctaid[0], b->ctaid[1], b->ctaid[2], msg);
    if (b->k->prof) emu_prof_block_end(b->k->prof, b->nthreads);
    return KILN_OK;
}

/* Names the argument an address belongs to: the pointer argument closest below it. */
static void describe_addr(const emu_block *b, uintptr_t a, char *buf, size_t size) {
    const kiln_kernel_meta *m = b->k->meta;
    int best = -1;
    uintptr_t base = 0;
    for (int i = 0; i < m->nparams; i++) {
        if (m->params[i].kind != KILN_PARAM_PTR) continue;
        uintptr_t p;
        memcpy(&p, b->args[i], sizeof p);
        if (p <= a && (best < 0 || p > base)) best = i, base = p;
    }
    if (best < 0) snprintf(buf, size, "address %p", (void *)a);
    else snprintf(buf, size, "byte %zu of argument '%s'", (size_t)(a - base), m->params[best].name);
}

/* Runs the block twice in opposite thread orders; any difference in what they leave in
 * memory is a race (or a missing barrier). Memory ends as the runs left it. */
static kiln_status run_block_twice(emu_block *b, kiln_error *err) {
    emu_snapshot first = {0}, second = {0};
    b->logging = true;
    emu_log_reset(&b->log);
    kiln_status st = run_block(b, false, err);
    if (st == KILN_OK) st = emu_log_snapshot(&b->log, &first, err);
    emu_log_undo(&b->log);
    emu_log_reset(&b->log);
    if (st == KILN_OK) st = run_block(b, true, err);
    if (st == KILN_OK) st = emu_log_snapshot(&b->log, &second, err);
    emu_log_undo(&b->log);
    b->logging = false;
    emu_diff d;
    if (st == KILN_OK && emu_snapshot_diff(&first, &second, &d)) {
        char where[160];
        describe_addr(b, d.addr, where, sizeof where);
        st = kiln_fail(err, KILN_EEMU, "block (%u,%u,%u): race: with its threads run in descending order it "
                       "left different data than in ascending order, first at %s (byte 0x%02x vs 0x%02x); a "
                       "missing barrier or a data race", b->ctaid[0], b->ctaid[1], b->ctaid[2], where, d.first,
                       d.second);
    }
    emu_snapshot_write(&second);
    emu_snapshot_free(&first);
    emu_snapshot_free(&second);
    return st;
}

kiln_status emu_grid_run(emu_block *b, const emu_kernel_rt *k, const kiln_emu_launch *l, void **args,
                         kiln_error *err) {
    b->k = k;
    b->args = args;
    memcpy(b->block, l->block, sizeof b->block);
    memcpy(b->grid, l->grid, sizeof b->grid);
    b->nthreads = l->block[0] * l->block[1] * l->block[2];
    b->nwarps = (b->nthreads + EMU_WARP - 1) / EMU_WARP;
    b->arena_used = k->dynamic_offset + l->dynamic_smem;
    b->dynamic_smem = l->dynamic_smem;
    b->arg_bytes = l->arg_bytes;
    const char *env = getenv("KILN_EMU_RACE");
    b->race = l->race || (env && env[0] == '1');
    if (b->race && !b->hb && !(b->hb = emu_hb_create()))
        return kiln_fail(err, KILN_ENOMEM, "emulator: out of memory for the race mode");
    kiln_status st = prepare_threads(b, err);
    emu_block *saved = emu_current;
    emu_current = b;
    for (unsigned z = 0; st == KILN_OK && z < l->grid[2]; z++)
        for (unsigned y = 0; st == KILN_OK && y < l->grid[1]; y++)
            for (unsigned x = 0; st == KILN_OK && x < l->grid[0]; x++) {
                b->ctaid[0] = x, b->ctaid[1] = y, b->ctaid[2] = z;
                st = l->twice ? run_block_twice(b, err) : run_block(b, false, err);
            }
    emu_current = saved;
    return st;
}
