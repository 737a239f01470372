/* emu/emu.h - private header of the CPU emulator (emu/), grouped by the file defining each part. */
#ifndef KILN_EMU_EMU_H
#define KILN_EMU_EMU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <llvm-c/Core.h>

#include "gen.h"
#include "kiln/emu.h"

#define EMU_WARP 32
#define EMU_MAX_THREADS 1024
#define EMU_SLOT 16      /* bytes per marshalled intrinsic argument */
#define EMU_MAX_ARGS 16  /* arguments per intrinsic call */
#define EMU_MAX_RET 64   /* bytes of an intrinsic's result */

/* ---- emu_fiber.c: one execution context per CUDA thread ---- */
typedef struct emu_fiber {
    void *sp;                 /* saved stack pointer (assembly switch) */
    void *ctx;                /* ucontext_t where there is no assembly switch */
    unsigned char *stack;     /* lowest usable byte; NULL for the host thread's own stack */
    size_t size;
    void *asan_fake;          /* ASan fake stack saved across a switch */
    const void *asan_bottom;  /* the stack ASan is told about when switching to this fiber */
    size_t asan_size;
    bool dirty;               /* left suspended mid-call: its stack needs unpoisoning */
    unsigned char *low;       /* the deepest frame a dispatch from the kernel's code ran in since the last reset
                                 (ASan builds unpoison from there to the top: emu_fiber_reset) */
    void *tsan;               /* ThreadSanitizer's fiber (TSan builds only) */
} emu_fiber;

/* Reserves stacks for n fibers in one mapping with a guard page below each. */
typedef struct emu_stacks {
    unsigned char *base;
    size_t per, total;
    unsigned count;
} emu_stacks;
kiln_status emu_stacks_reserve(emu_stacks *s, unsigned count, kiln_error *err);
void emu_stacks_release(emu_stacks *s);
/* True when p lies inside one of the stacks (stores there are thread-private). */
bool emu_stacks_contain(const emu_stacks *s, const void *p);
void emu_fiber_init(emu_fiber *f, const emu_stacks *s, unsigned index);
void emu_fiber_fini(emu_fiber *f);
/* Makes f start at entry() the next time it is switched to. */
void emu_fiber_reset(emu_fiber *f, void (*entry)(void));
/* Saves the current context into from and resumes to. exiting: from never runs again. */
void emu_fiber_switch(emu_fiber *from, emu_fiber *to, bool exiting);
/* First thing a fiber does on a fresh start (tells ASan where it came from). */
void emu_fiber_started(emu_fiber *self, emu_fiber *from);

/* ---- emu_rewrite.c: the host build of a generated module ---- */
struct emu_op;

/* One rewritten intrinsic call in a kernel. */
typedef struct emu_site {
    const struct emu_op *op;
    unsigned nargs, ret_size;
    char where[96]; /* "llvm.nvvm.barrier0 #2 in @layernorm_fwd" */
} emu_site;

typedef struct emu_shared_var {
    LLVMValueRef global;
    size_t offset, size;
} emu_shared_var;

/* One checked memory access of the kernel (a load, store, atomic or memory intrinsic that
 * may reach global or shared memory): the emulator checks it before it happens. */
enum { EMU_SPACE_GENERIC = 0, EMU_SPACE_GLOBAL = 1, EMU_SPACE_SHARED = 3 };
typedef struct emu_access {
    unsigned size;  /* bytes (0: given at run time, memory intrinsics) */
    unsigned align; /* the alignment its PTX instruction may require: the IR's align, at most 16 */
    unsigned space; /* EMU_SPACE_* of the pointer */
    bool module;    /* the pointer is into one of the module's own global variables (not a launch buffer) */
    int kind;       /* EMU_HB_READ, EMU_HB_WRITE or EMU_HB_ATOMIC (emu_hb.c, the race mode) */
    char what[300]; /* "16-byte global load `%18 = load <8 x half>, ptr addrspace(1) %17, align 16` in @k" */
} emu_access;

/* What the rewrite learned about the module; the arena for shared memory is allocated by
 * the caller between emu_rewrite_scan and emu_rewrite_apply. */
typedef struct emu_rewrite_info {
    emu_site *sites;
    LLVMValueRef *calls; /* the call instruction of each site */
    unsigned nsites;
    emu_shared_var *smem;
    unsigned nsmem;
    size_t static_smem;    /* bytes of static shared memory (host layout) */
    size_t dynamic_offset; /* where dynamic shared memory starts in the arena */
    emu_access *access;    /* filled by emu_rewrite_apply */
    unsigned naccess;
    unsigned maxntid[3], reqntid[3];
    char entry_symbol[96];
} emu_rewrite_info;

/* Finds the kernel, checks every intrinsic is supported, lays out shared memory for the
 * host data layout host_dl; id makes the entry symbol unique. */
kiln_status emu_rewrite_scan(LLVMModuleRef mod, const char *entry, unsigned id, const char *host_dl,
                             emu_rewrite_info *info, kiln_error *err);
/* Rewrites the module for the host: intrinsic calls become kiln_emu_dispatch calls,
 * global stores are logged through kiln_emu_store, every load and store that may reach
 * global or shared memory is checked first through kiln_emu_access (alignment, shared
 * bounds, null page), shared variables point into arena
 * (static part first, dynamic shared memory after it), an entry trampoline
 * void ENTRY(void **args) calls the kernel. */
kiln_status emu_rewrite_apply(LLVMModuleRef mod, const char *entry, const char *host_triple,
                              const char *host_dl, unsigned char *arena, emu_rewrite_info *info,
                              kiln_error *err);
void emu_rewrite_info_free(emu_rewrite_info *info);
/* Fills meta from the kernel's signature and annotations (for hand-written IR). */
kiln_status emu_meta_from_ir(LLVMModuleRef mod, const char *entry, int sm, kiln_kernel_meta *meta,
                             kiln_error *err);
/* Replaces calls of __nvvm_reflect / llvm.nvvm.reflect by what NVVMReflect would give on sm:
 * __CUDA_ARCH is sm * 10, __CUDA_FTZ and anything else 0. */
void emu_reflect(LLVMModuleRef mod, int sm);
/* The module's only kernel (ptx_kernel calling convention or "kernel" annotation). */
LLVMValueRef emu_find_kernel(LLVMModuleRef mod, const char *entry, kiln_error *err);

/* ---- emu_race.c: what a block stored, so that it can run twice and be compared ---- */
typedef struct emu_log {
    struct emu_log_entry *e;
    size_t n, cap;
    unsigned char *old; /* bytes each store overwrote */
    size_t used, oldcap;
    bool oom;
} emu_log;
typedef struct emu_range {
    uintptr_t lo, hi;
    size_t off;
} emu_range;
/* Disjoint sorted ranges a run wrote, with the bytes it left there. */
typedef struct emu_snapshot {
    emu_range *r;
    size_t n;
    unsigned char *bytes;
} emu_snapshot;
typedef struct emu_diff {
    uintptr_t addr;
    unsigned first, second; /* the byte each run left */
} emu_diff;
void emu_log_reset(emu_log *log);
void emu_log_free(emu_log *log);
void emu_log_store(emu_log *log, void *p, size_t len);
void emu_log_undo(const emu_log *log);
kiln_status emu_log_snapshot(const emu_log *log, emu_snapshot *s, kiln_error *err);
void emu_snapshot_free(emu_snapshot *s);
void emu_snapshot_write(const emu_snapshot *s);
/* With memory back in the state both runs started from: true and *d at the first byte
 * the two runs leave different. */
bool emu_snapshot_diff(const emu_snapshot *first, const emu_snapshot *second, emu_diff *d);

/* ---- emu_hb.c: the `race` mode's happens-before checker for shared memory (vector clocks per thread, a
 * shadow per shared byte); a slot is a thread's linear id, then the TMA unit, then each warpgroup's wgmma unit ---- */
typedef struct emu_hb emu_hb;
typedef struct emu_block emu_block;
enum {
    EMU_HB_READ = 0,
    EMU_HB_ATOMIC,
    EMU_HB_WRITE,
    EMU_HB_PROBE,       /* checked as a write, not recorded */
    EMU_HB_READ_PROBE,  /* checked as a read, not recorded */
    EMU_HB_READ_RECORD, /* recorded as a read, not checked (an asynchronous unit's, checked by its issuer) */
    EMU_HB_ASYNC_WRITE, /* a cp.async issued: checked as a write; until its issuer's wait writes the bytes again
                         * (EMU_HB_WRITE), any other thread's access to them is a race */
};
emu_hb *emu_hb_create(void);
void emu_hb_destroy(emu_hb *h);
/* A block starts: every clock at its first epoch, shared memory untouched; false when out of memory. */
bool emu_hb_begin(emu_hb *h, unsigned nthreads, size_t shared_bytes);
/* Slot's access of [off, off + size) of shared memory (offsets from the shared window's base); a race
 * is an emu_fault naming both accesses. */
void emu_hb_access(emu_block *b, emu_hb *h, unsigned slot, size_t off, size_t size, int kind, const char *what);
/* Barrier id: a thread's arrival releases into the phase; the phase completes; a syncing thread acquires it. */
void emu_hb_barrier_arrive(emu_hb *h, unsigned id, unsigned slot);
void emu_hb_barrier_complete(emu_hb *h, unsigned id);
void emu_hb_barrier_acquire(emu_hb *h, unsigned id, unsigned slot);
/* The n lanes of a warp synchronize (each knows what all did). */
void emu_hb_warp_sync(emu_hb *h, const unsigned *slots, unsigned n);
/* mbarrier at shared offset off: init, an arrival (release), its phase of parity completes, a waiter on that
 * parity acquires it; the TMA unit's copy landed (its write, then its complete-tx releases into the phase). */
bool emu_hb_mbar_init(emu_hb *h, size_t off);
bool emu_hb_mbar_arrive(emu_hb *h, size_t off, unsigned slot);
void emu_hb_mbar_complete(emu_hb *h, size_t off, unsigned parity);
void emu_hb_mbar_acquire(emu_hb *h, size_t off, unsigned parity, unsigned slot);
/* Warpgroup wg's wgmma unit: its operand reads are recorded at epoch seq + 1 (emu_hb_unit_epoch), and a thread
 * whose wait_group covers the wgmma before done_seq acquires epoch done_seq (emu_hb_unit_acquire). */
unsigned emu_hb_wgmma_slot(const emu_hb *h, unsigned wg);
void emu_hb_unit_epoch(emu_hb *h, unsigned unit, uint32_t epoch);
void emu_hb_unit_acquire(emu_hb *h, unsigned slot, unsigned unit, uint32_t epoch);
void emu_hb_tma_landed(emu_hb *h, size_t bar_off, size_t off, size_t size, const char *what);

/* ---- emu_sched.c: blocks of fibers, barriers, warp meetings, the launch loop ---- */
/* What the scheduler needs of a compiled kernel. */
typedef struct emu_kernel_rt {
    void (*entry)(void **args);
    const emu_site *sites;
    unsigned nsites;
    unsigned char *arena; /* shared memory: static variables, then dynamic */
    size_t static_smem, dynamic_offset, arena_size;
    const emu_access *access;
    unsigned naccess;
    const kiln_kernel_meta *meta;
    struct emu_prof *prof; /* NULL unless loaded for profiling */
} emu_kernel_rt;
typedef struct emu_thread emu_thread;
typedef struct emu_block emu_block;

struct emu_thread {
    emu_fiber fiber;
    unsigned id, lane, warp;
    unsigned tid[3];
    int state;        /* EMU_READY, EMU_WAITING, EMU_EXITED */
    int wait_site;    /* the site it waits at, -1 if none */
    int wait_bar;     /* the barrier it waits at, -1 if none */
    const void *wait_obj; /* asleep (emu_sleep_on): what it waits for (an mbarrier), NULL if unnamed */
    uint64_t clock;
    const unsigned char *in; /* the arguments of its pending collective: its call's slots, on its own stack
                              * (the kernel's alloca; valid while it waits in the collective) */
    unsigned char out[EMU_MAX_RET];            /* the result the collective gives it */
};
enum { EMU_READY = 0, EMU_WAITING, EMU_EXITED };

/* Arguments of one intrinsic call as the handlers see them. */
typedef struct emu_call {
    emu_block *blk;
    emu_thread *t;
    const emu_site *site;
    int site_index;
    const unsigned char *args; /* site->nargs slots of EMU_SLOT bytes */
    unsigned char *ret;
} emu_call;

/* Warp collective: computes every lane's out from every lane's in. lanes[i] is NULL for
 * lanes outside mask. Returns false after emu_fault(). */
typedef bool (*emu_warp_fn)(emu_block *blk, const struct emu_op *op, emu_thread **lanes,
                            uint32_t mask);

uint32_t emu_arg_u32(const emu_call *c, unsigned i);
float emu_arg_f32(const emu_call *c, unsigned i);
void emu_ret_u32(emu_call *c, uint32_t v);
void emu_ret_f32(emu_call *c, float v);
uint32_t emu_slot_u32(const unsigned char *slots, unsigned i);
/* Reports a fault from inside a running thread; the block stops and never resumes it. */
_Noreturn void emu_fault(emu_block *blk, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Blocks the calling thread until all threads of barrier id arrive (count 0: the whole
 * block). red: 0 none, 1 popc, 2 and, 3 or of pred; returns the reduction. */
uint32_t emu_barrier(emu_call *c, unsigned id, unsigned count, int red, uint32_t pred);
/* The same with arrive: barrier.arrive (count needed) signals its warp's arrival without waiting for the others. */
uint32_t emu_barrier_op(emu_call *c, unsigned id, unsigned count, int red, uint32_t pred, bool arrive);
/* Blocks the calling lane until every lane in mask arrives with the same op; the last
 * one runs fn; then the lane's result is in c->t->out. Returns false after a fault. */
bool emu_warp_meet(emu_call *c, uint32_t mask, emu_warp_fn fn);
/* The caller sleeps until emu_wake_sleepers (then re-checks what it waits for); a block whose
 * threads all sleep or wait is reported as a deadlock naming their sites. */
void emu_sleep(emu_call *c);
/* The same, naming what it waits for (an mbarrier's address), so the scheduler can tell who awaits what. */
void emu_sleep_on(emu_call *c, const void *obj);
/* Whether a thread of the block sleeps waiting for obj (emu_sleep_on). */
bool emu_block_awaits(const emu_block *b, const void *obj);
void emu_wake_sleepers(emu_block *b);
kiln_status emu_block_create(emu_block **out, kiln_error *err);
void emu_block_destroy(emu_block *b);
/* Runs every block of the launch (already checked) one after another. */
kiln_status emu_grid_run(emu_block *b, const emu_kernel_rt *k, const kiln_emu_launch *l, void **args,
                         kiln_error *err);
/* Entry points host code calls (as kiln_emu_dispatch and kiln_emu_store). */
void emu_dispatch_entry(int site, const void *args, void *ret); /* kiln_emu_dispatch */
void emu_store_entry(void *p, uint64_t size);                  /* kiln_emu_store */
void emu_access_entry(void *p, uint64_t size, uint32_t access); /* kiln_emu_access */
/* Faults unless [p, p + size) lies in the block's shared memory window (static shared
 * memory and the launch's dynamic shared memory); what names the access. */
void emu_check_shared(emu_block *blk, const void *p, size_t size, const char *what);
/* Faults when p lies in the null page (global memory a kernel can never own). */
void emu_check_global(emu_block *blk, const void *p, size_t size, const char *what);
/* The race mode's checker of the running block, or NULL when the launch did not ask for it. */
emu_hb *emu_block_hb(const emu_block *blk);
/* Where dynamic shared memory starts in the window. */
size_t emu_shared_dynamic_offset(const emu_block *blk);
/* The block's shared memory window starts here (shared address 0). */
unsigned char *emu_shared_base(const emu_block *blk);
/* Block geometry for the sreg handlers. */
void emu_block_dims(const emu_block *blk, unsigned ntid[3], unsigned ctaid[3], unsigned nctaid[3]);
unsigned emu_block_threads(const emu_block *blk);
/* The kernel's entry name ("" for a module without metadata). */
const char *emu_block_kernel(const emu_block *blk);

/* ---- emu_ops.c: the NVVM intrinsics the emulator implements ---- */
typedef void (*emu_handler)(emu_call *c);
typedef struct emu_op {
    const char *name; /* "llvm.nvvm.shfl.sync.bfly.f32" */
    const char *type; /* its function type as LLVM prints it: "float (i32, float, i32, i32)" */
    emu_handler fn;
    int arg;          /* handler-specific: which sreg, which shuffle mode, ... */
} emu_op;
/* The op for an intrinsic name, or NULL. */
const emu_op *emu_op_find(const char *name);
/* Names every supported intrinsic, comma-separated (for messages). */
void emu_ops_list(char *buf, size_t size);

/* ---- emu_warp_mma.c: ldmatrix, mma.sync and cp.async ---- */
const emu_op *emu_mma_op_find(const char *name);
void emu_cp_async_block_begin(void); /* a block (or its second run) starts: no cp.async copy pending */
/* emu_hopper.c: mbarrier, fence.proxy.async, setmaxnreg, wgmma fence/commit/wait */
const emu_op *emu_hopper_op_find(const char *name);
/* emu_wgmma.c: the kiln.wgmma.* pseudo-intrinsics (their calls take up to EMU_MAX_ARGS_WIDE arguments and
 * return up to EMU_MAX_RET_WIDE bytes: handlers that never meet as a warp) and the wgmma state per thread */
#define EMU_MAX_ARGS_WIDE (KILN_WGMMA_MAX_ACC + 8)
#define EMU_MAX_RET_WIDE (KILN_WGMMA_MAX_ACC * 4)
const emu_op *emu_wgmma_op_find(const char *name);
/* Whether building the kiln.wgmma.* op table ran out of memory (then every lookup finds nothing: the
 * rewrite reports that instead of "not implemented"); emu_wgmma_ops_malloc is malloc, tests plant a failing one. */
bool emu_wgmma_ops_failed(void);
extern void *(*emu_wgmma_ops_malloc)(size_t);
void emu_wgmma_block_begin(void); /* a block (or its second run) starts: no wgmma in flight */
/* emu_hopper.c: an mbarrier's state (the PTX ISA's: pending arrivals, expected count, tx-count, phase) */
typedef struct emu_mbar {
    uint32_t pending, expected;
    int32_t tx;
    unsigned phase;
} emu_mbar;
/* Reads the 8 bytes at p; false if they are not an initialized mbarrier. */
bool emu_mbar_read(const unsigned char *p, emu_mbar *m);
/* Stores m at p, completing the phase when no arrival and no byte is pending (then the copies that landed
 * on it become visible and sleepers wake); false and msg (prefixed by where) when the tx-count leaves the
 * ISA's range or goes negative with every arrival in (the phase could never complete). */
bool emu_mbar_write(emu_block *b, unsigned char *p, emu_mbar *m, const char *where, char *msg, size_t size);

/* ---- emu_tma.c: TMA copies in flight (landed as late as a waiter or the scheduler allows) ---- */
extern _Thread_local unsigned emu_tma_live; /* copies in flight or landed on an open phase */
void emu_tma_block_begin(void);             /* a block (or its second run) starts: none */
/* The buffer a TMA copy's box is read into (kept by emu_tma.c), then the copy put in flight. */
unsigned char *emu_tma_reserve(emu_call *c, size_t bytes);
void emu_tma_issue(emu_call *c, unsigned char *dst, unsigned char *bar, unsigned elem, size_t bytes, unsigned bits);
/* Faults (a race) when [p, p + size) meets a copy whose phase has not completed; what names the access. */
void emu_tma_guard(emu_block *b, const void *p, size_t size, const char *what);
/* A phase of the mbarrier at bar completed: the copies that landed on it are visible. */
void emu_tma_phase_done(const unsigned char *bar);
/* Lands the oldest copy in flight to bar (a waiter needs it); false if there is none. Faults on a rule. */
bool emu_tma_land_for(emu_call *c, const unsigned char *bar);
/* The scheduler found no thread to run: lands the oldest copy in flight whose mbarrier a sleeping thread
 * waits on, else the oldest of all (copies nobody waits for land last: a consumer that reads a stage
 * without waiting on its mbarrier finds it in flight); 1 landed, 0 none, -1 msg. */
int emu_tma_land_oldest(emu_block *b, char *msg, size_t size);
/* Every thread exited: true if no copy or bulk reduce is unfinished, else false and msg. */
bool emu_tma_block_end(emu_block *b, char *msg, size_t size);
/* Element e of a box at coord: its global address, or 0 outside the tensor (emu_hopper.c). */
uintptr_t emu_tma_elem(const struct kiln_tensor_map *m, const int32_t *coord, unsigned long long e);
/* A bulk reduce-add of the f32 tile at src (bytes, swizzle bits) into map m's box at coord joins the
 * issuing thread's open bulk group (its bytes kept to check they stay unchanged until the read). */
void emu_tma_reduce_issue(emu_call *c, const struct kiln_tensor_map *m, const int32_t *coord, const unsigned char *src,
                          size_t bytes, unsigned bits);
/* cp.async.bulk.commit_group: the thread's open bulk operations become a group. */
void emu_bulk_commit(emu_call *c);
/* cp.async.bulk.wait_group[.read] n: all but the thread's newest n groups complete (their tiles read, the
 * adds done); faults if a tile changed after its issue. */
void emu_bulk_wait(emu_call *c, uint32_t n);
void emu_wgmma_fence(emu_call *c);
void emu_wgmma_commit(emu_call *c);
void emu_wgmma_wait(emu_call *c, uint32_t n);

/* ---- emu_jit.c: the cache of loaded kernels (its file comment), for tests and measurements ---- */
typedef struct emu_cache_counts {
    unsigned long hits, misses; /* kiln_emu_load calls that took an idle kernel / compiled one (keyed loads) */
    unsigned long unparkable;   /* misses whose kernel may never be parked (a writable global of its own) */
    unsigned idle, cap;         /* kernels parked now; at most cap */
} emu_cache_counts;
void emu_cache_stats(const kiln_emu *emu, emu_cache_counts *out);
/* At most cap idle kernels from now on (0: no cache); destroys the least recently parked beyond it. */
void emu_cache_set_cap(kiln_emu *emu, unsigned cap);

/* ---- emu_guard.c: host buffers that end at a guard page (the harnesses' tensors) ---- */

#define EMU_GUARDED_MAPS 16
typedef struct emu_guarded {
    struct {
        void *base;
        size_t len;
    } map[EMU_GUARDED_MAPS];
    int nmap;
} emu_guarded;
/* size bytes, 16-byte aligned, ending as close to a PROT_NONE page as alignment allows; NULL when
 * mmap fails or EMU_GUARDED_MAPS buffers are taken. */
void *emu_guarded_alloc(emu_guarded *g, size_t size);
void emu_guarded_free(emu_guarded *g);

/* ---- emu_half.c: f16/bf16 rounding, and the libgcc helpers host code may call ---- */
uint16_t emu_f32_to_f16(float f);
uint16_t emu_f32_to_bf16(float f);
float emu_f16_to_f32(uint16_t h);
float emu_bf16_to_f32(uint16_t h);
uint16_t emu_f64_to_f16(double d);
uint16_t emu_f64_to_bf16(double d);
/* One ulp of dtype t at magnitude a (the subnormal spacing below its normal range; a non-finite
 * or zero a gives that too), for the references' tolerances. */
double emu_ulp_of(kiln_dtype t, double a);
/* Whether element i of an output still holds the 0xff poison the references fill it with. */
bool emu_poisoned(kiln_dtype t, const void *base, size_t i);
/* Symbols host code generated by LLVM may need that libgcc may lack. */
typedef struct emu_symbol {
    const char *name;
    void *addr;
} emu_symbol;
const emu_symbol *emu_half_symbols(unsigned *count);

/* ---- emu_profile.c: instrumentation, bank conflicts, instruction mix (kiln/emu_profile.h) ---- */
typedef struct emu_prof emu_prof;
struct kiln_emu_profile;
struct kiln_smem_site;
struct kiln_prof_block;
/* Instruments mod (before emu_rewrite_apply) for the profile; arena is the kernel's shared memory. */
kiln_status emu_prof_instrument(LLVMModuleRef mod, const char *host_dl, const unsigned char *arena,
                                size_t arena_size, emu_prof **out, kiln_error *err);
void emu_prof_free(emu_prof *p);
/* Called by host code (as kiln_emu_prof_bb and kiln_emu_prof_mem). */
void emu_prof_bb_entry(int bb);
void emu_prof_mem_entry(int site, void *addr, uint32_t gbytes);
/* The scheduler's hooks: a block starts; warps [first, first + n) meet (all their live lanes at one
 * point), so their logged accesses can be matched; a block ends. */
void emu_prof_block_begin(emu_prof *p, unsigned nthreads);
void emu_prof_sync(emu_prof *p, unsigned first_warp, unsigned nwarps, unsigned nthreads);
void emu_prof_block_end(emu_prof *p, unsigned nthreads);
kiln_status emu_prof_get(const emu_prof *p, struct kiln_emu_profile *out, kiln_error *err);
unsigned emu_prof_nsites(const emu_prof *p);
int emu_prof_site(const emu_prof *p, unsigned i, struct kiln_smem_site *out);
int emu_prof_block(const emu_prof *p, unsigned i, struct kiln_prof_block *out);
void emu_prof_reset(emu_prof *p);
/* emu_sched.c: the running kernel's profile and the calling thread's index (NULL: none). */
emu_prof *emu_prof_current(unsigned *thread);

/* ---- the references' seeded generator (splitmix64; templates/<family>.ref.c) ---- */
#include <math.h>
typedef struct emu_rng {
    uint64_t s;
} emu_rng;
static inline uint64_t emu_rng_next(emu_rng *r) {
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
/* uniform in (0, 1] */
static inline double emu_rng_uniform(emu_rng *r) { return (double)((emu_rng_next(r) >> 11) + 1) * 0x1p-53; }
static inline double emu_rng_normal(emu_rng *r, double mean, double sd) {
    double u = emu_rng_uniform(r), v = emu_rng_uniform(r);
    return mean + sd * sqrt(-2.0 * log(u)) * cos(2.0 * M_PI * v);
}

/* ---- emu_case.c: typed values of a resolved spec, as the generator's spec parser reads it ---- */
/* The value of key (NULL when the spec has no such key). */
const char *emu_spec_get(const gen_spec *s, const char *key);
/* key's dtype, integer (0 for "launch") or boolean ("true"/"1"); def when the key is absent. */
kiln_dtype emu_spec_dtype(const gen_spec *s, const char *key, kiln_dtype def);
long emu_spec_int(const gen_spec *s, const char *key, long def);
int emu_spec_bool(const gen_spec *s, const char *key, int def);
/* The case's resolved spec. */
struct kiln_case;
const gen_spec *emu_case_spec(const struct kiln_case *c);

/* ---- templates/lib/norm.ref.c: the norm families' case hooks (kiln/emu_case.h), shared by their
 * descriptors in templates/<family>.ref.c ---- */
typedef enum kiln_norm_family { KILN_NORM_LN = 0, KILN_NORM_RMS, KILN_NORM_LN_BWD, KILN_NORM_RMS_BWD } kiln_norm_family;

/* A norm spec as the templates read it (keys left out take the templates' defaults). */
typedef struct kiln_norm_spec {
    kiln_norm_family family;
    kiln_dtype x, w, y, dy, dx, r; /* y: forward output; dy/dx: backward; r: residual stream */
    int hidden;                    /* 0: hidden=launch */
    int weight, bias, residual;
    int offset;                    /* 1: zero-centered weights, the norm multiplies by 1 + w */
} kiln_norm_spec;

/* Reads a norm family's resolved spec (a kernel's meta): the family from its keys (a backward has dy,
 * LayerNorm has bias), dtypes, hidden, weight, bias, residual, offset. */
kiln_status kiln_norm_spec_parse(const char *spec, kiln_norm_spec *s, kiln_error *err);
int kiln_norm_is_backward(const kiln_norm_spec *s);
struct kiln_case_output;
struct kiln_case_opts;
kiln_status emu_norm_case_create(struct kiln_case *c, kiln_error *err);
void emu_norm_case_destroy(struct kiln_case *c);
int emu_norm_case_tensor(struct kiln_case *c, const char *name, void **ptr, size_t *bytes);
int emu_norm_case_scalar(struct kiln_case *c, const char *name, double *value);
void emu_norm_case_prepare(struct kiln_case *c);
void emu_norm_case_check(struct kiln_case *c, struct kiln_case_output *out, int *nout);
void emu_norm_case_describe(const struct kiln_case *c, char *buf, size_t size);
/* The float64 reference of output `name` (y, h, mean, rstd; dx, dweight, dbias), or NULL. */
const double *emu_norm_case_reference(struct kiln_case *c, const char *name);
/* The reference (a backward's saved statistics too) of the inputs as they are now (the refresh hook). */
kiln_status emu_norm_case_refresh(struct kiln_case *c, kiln_error *err);
/* A norm case's eps: the named option "eps" as given (0 too), else opts.eps, else 1e-5. */
float emu_norm_case_eps(const struct kiln_case *c);
/* The rows x hidden of a norm case from its options and spec; KILN_EINVAL names what is wrong. */
kiln_status emu_norm_case_shape(const struct kiln_case *c, int *rows, int *hidden, kiln_error *err);
/* The norms' inputs, shared with LayerNorm's own reference (templates/layernorm.ref.c): rows x n
 * values of x (dtype xt, times scale) drawn from g by input kind (row r of `mixed` takes kind r % 4;
 * large-mean, constant, special rows as docs/registry.md says), each followed, when res is not NULL,
 * by its residual value (dtype rt). */
void emu_norm_fill_rows(kiln_dtype xt, void *x, kiln_dtype rt, void *res, int rows, size_t n, kiln_ln_input input,
                        double scale, emu_rng *g);
/* A row's float64 statistics over n values val(ctx, base + i): the mean (0 when rms) and
 * 1/sqrt(mean((v - mean)^2) + eps), as torch's layer_norm and RMSNorm compute them. */
void emu_norm_row_stats(double (*val)(const void *ctx, size_t i), const void *ctx, size_t base, size_t n, int rms,
                        double eps, double *mean, double *rstd);

/* templates/attention.ref.c: the attention families' shared case pieces (kiln/emu_case.h).
 * The problem from the case's options (rows = seq_q, seq_k, batch, heads_q, heads_kv; the mask keys
 * window_left, window_right, softcap, alibi: each refused without its spec key) and spec, within
 * limit elements of work; ALiBi slopes malloc'd into p (the caller frees them); what ends the message (" (at most 1e10)"). */
struct kiln_attn_problem;
kiln_status emu_attn_case_problem(const struct kiln_case *c, struct kiln_attn_problem *p, double limit, const char *what,
                                  kiln_error *err);
/* batch, heads_q, heads_kv, seq_q, seq_k, scale, window_left, window_right, alibi_stride, softcap and stride_<q|k|v|o|dout|dq|dk|dv><b|s|h>; -1 for another name. */
int emu_attn_case_scalar(const struct kiln_attn_problem *p, const char *name, double *value);
/* The case's ALiBi slopes as tensor "alibi_slopes" (drawn by emu_attn_case_problem); -1 for any other name. */
int emu_attn_case_slopes(const struct kiln_attn_problem *p, const char *name, void **ptr, size_t *bytes);
void emu_attn_case_describe(const struct kiln_attn_problem *p, char *buf, size_t size);
/* Why a dense problem's check is weak, or "": no row sees a key (the window beside the causal bound
 * masks them all: O 0 and lse +inf on both sides), or each row sees at most one key (O copies a row
 * of V exactly; only lse checks the scores). */
void emu_attn_case_note(const struct kiln_attn_problem *p, char *buf, size_t size);

/* templates/lib/attn_varlen.ref.c: the varlen=true cases of attention (bwd 0) and its backward (bwd 1),
 * the families' hooks hand over to these when emu_attn_varlen(c) (the spec has varlen=true). */
int emu_attn_varlen(const struct kiln_case *c);
kiln_status emu_attn_varlen_create(struct kiln_case *c, int bwd, kiln_error *err);
void emu_attn_varlen_destroy(struct kiln_case *c);
int emu_attn_varlen_tensor(struct kiln_case *c, const char *name, void **ptr, size_t *bytes);
int emu_attn_varlen_scalar(struct kiln_case *c, const char *name, double *value);
void emu_attn_varlen_prepare(struct kiln_case *c);
void emu_attn_varlen_check(struct kiln_case *c, struct kiln_case_output *out, int *nout);
void emu_attn_varlen_describe(const struct kiln_case *c, char *buf, size_t size);
/* The forward's float64 reference again from the inputs as they are now (kiln_case_set wrote some). */
kiln_status emu_attn_varlen_refresh(struct kiln_case *c, kiln_error *err);

/* templates/attention.ref.c: bytes an attention (forward or backward) pointer parameter spans for
 * problem p, by its name and element type: q/dq, k/dk, v/dv, o/dout with their strides, lse and
 * delta [batch, heads_q, seq_q], dq_acc [batch, heads_q, seq_q, head_dim]; 0 for any other name. */
size_t emu_attn_param_bytes(const struct kiln_attn_problem *p, const kiln_param *param);
/* Whether query i sees key j (causal, window); the score of dot product qk for (batch b, head h,
 * i, j) with the softcap and ALiBi bias, and in *dx its derivative by qk (for the backward). */
int emu_attn_visible(const struct kiln_attn_problem *p, int i, int j);
double emu_attn_score(const struct kiln_attn_problem *p, double qk, int b, int h, int i, int j, double *dx);
/* |ALiBi bias| of (b, h, i, j); 0 without alibi. */
double emu_attn_bias(const struct kiln_attn_problem *p, int b, int h, int i, int j);

/* templates/lib/attn_dropout.ref.c: Philox 4x32-10 of counter ctr under key; whether dropout keeps
 * (batch b, query head h, query i, key j) (1 without dropout=true), and its factor in P V: 1 / (1 - p)
 * kept, 0 dropped (1 without dropout). The counter layout is templates/lib/attn_dropout.lua's. */
void emu_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);
int emu_attn_dropout_keep(const struct kiln_attn_problem *p, int b, int h, int i, int j);
double emu_attn_dropout_factor(const struct kiln_attn_problem *p, int b, int h, int i, int j);
/* dropout_mask=true: the i32 [batch, heads_q, seq_q, seq_k] mask buffer (malloc), poisoned (-1), and
 * checked (output "dropout_mask": every visible pair holds its keep bit, others it or -1). */
int32_t *emu_attn_mask_alloc(const struct kiln_attn_problem *p);
void emu_attn_mask_prepare(const struct kiln_attn_problem *p, int32_t *mask);
void emu_attn_mask_check(const struct kiln_attn_problem *p, const int32_t *mask, struct kiln_case_output *o);
/* The dropout launch values from the case options: "dropout" (the rate; needed with dropout=true),
 * "dropout_offset" (0); the seed is the case's; each refused without dropout=true. */
kiln_status emu_attn_case_dropout(const struct kiln_case_opts *o, struct kiln_attn_problem *p, kiln_error *err);

/* templates/lib/attn_paged.ref.c: attention's paged KV cache (paged=true). create draws the cache
 * for problem p (options page_size, leftpad, batch_idx; seq_k is the capacity) and fills the float64
 * reference ro/rl entry by entry from q; tensor/scalar give the cache's names (-1 for another);
 * check compares o/lse entry by entry into out[0] (o) and out[1] (lse), returning the outputs filled. */
typedef struct emu_paged emu_paged;
int emu_paged_valid_page(int page_size, int key_tile);
kiln_status emu_paged_create(const struct kiln_case *c, const struct kiln_attn_problem *p, const void *q, double *ro,
                             double *rl, uint64_t *seed, emu_paged **out, kiln_error *err);
int emu_paged_tensor(const emu_paged *c, const struct kiln_attn_problem *p, const char *name, void **ptr, size_t *bytes);
int emu_paged_scalar(const emu_paged *c, const char *name, double *value);
int emu_paged_check(const emu_paged *c, const struct kiln_attn_problem *p, const void *q, const void *o, const float *lse,
                    const double *ro, const double *rl, struct kiln_case_output *out);
/* append=true (option append: new keys per entry): the cache restored as drawn before a run;
 * check adds out[2], the cache after the run bit for bit, and returns 3 (else 2). */
void emu_paged_prepare(emu_paged *c, const struct kiln_attn_problem *p);
/* The reference again from the inputs as they are now (a test wrote them with kiln_case_set): the cache, its new
 * keys (append) and q; the cache the run must leave too. */
kiln_status emu_paged_refresh(emu_paged *c, const struct kiln_attn_problem *p, const void *q, double *ro, double *rl,
                              kiln_error *err);
void emu_paged_describe(const emu_paged *c, char *buf, size_t size);
void emu_paged_free(emu_paged *c);

/* templates/lib/attn_rotary.ref.c: rotary=neox|interleaved inside the append. parse reads the spec's
 * rotary keys (0: rotary off), draw the tables [seqlen_ro, rdim / 2] in cs (random angles), row rotates
 * one row of a q or k tensor in place at position pos with the kernel's f32 arithmetic. */
typedef struct emu_rope {
    int interleaved, rdim, seqlen_ro;
    kiln_dtype cs;
    void *cos, *sin;
} emu_rope;
int emu_rope_parse(const char *spec, int head_dim, kiln_dtype dtype, emu_rope *r);
kiln_status emu_rope_draw(emu_rope *r, int seqlen_ro, uint64_t *seed, kiln_error *err);
void emu_rope_row(const emu_rope *r, kiln_dtype t, void *row, int pos);
void emu_rope_free(emu_rope *r);

#endif
