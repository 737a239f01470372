/* kiln/emu_profile.h - the emulator's profile: shared-memory bank conflicts, instruction mix, global bytes. */
#ifndef KILN_EMU_PROFILE_H
#define KILN_EMU_PROFILE_H

#include <stdint.h>

#include "kiln/emu.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * With profiling on, kernels loaded afterwards are instrumented: every basic block counts its
 * executions per thread, every shared-memory access (ld/st.shared, ldmatrix, cp.async) logs its
 * address. Lanes of a warp are matched access by access (the k-th execution of an access by each
 * lane is one warp-wide request), and each request is costed by the hardware's rules: 32 banks of
 * 4 bytes, a request served in phases (128 bytes of lanes each; ldmatrix one phase per 8x8 matrix),
 * a phase taking as many wavefronts as the most distinct 4-byte words any one bank must deliver.
 * Instructions are counted per warp (a basic block a warp runs counts once however many lanes
 * run it). docs/profile.md states every rule. Counts accumulate over runs until reset.
 */

/* Classes of the dynamic instruction mix (warp instructions). */
typedef enum kiln_prof_class {
    KILN_PROF_MMA,        /* mma.sync */
    KILN_PROF_LDMATRIX,   /* ldmatrix */
    KILN_PROF_CP_ASYNC,   /* cp.async copies (not commit/wait) */
    KILN_PROF_LD_SHARED,  /* ld.shared (a vector load is one) */
    KILN_PROF_ST_SHARED,  /* st.shared */
    KILN_PROF_LD_GLOBAL,  /* ld.global (and generic loads) */
    KILN_PROF_ST_GLOBAL,  /* st.global (and generic stores) */
    KILN_PROF_EX2,        /* ex2.approx */
    KILN_PROF_SHFL,       /* shfl.sync */
    KILN_PROF_BARRIER,    /* bar.sync / barrier */
    KILN_PROF_WGMMA,      /* wgmma.* (mma_async, fence, commit_group, wait_group) */
    KILN_PROF_TMA,        /* cp.async.bulk.* (TMA copies, bulk commit_group / wait_group) */
    KILN_PROF_MBARRIER,   /* mbarrier.* (a try_wait loop counts one per wait on the emulator) */
    KILN_PROF_ASYNC_SYNC, /* fence.proxy.async, setmaxnreg */
    KILN_PROF_TMA_REDUCE, /* cp.reduce.async.bulk.tensor (TMA reduce-adds: one per tile, FA3's dQ writer) */
    KILN_PROF_OTHER,      /* ALU, compare, select, conversion, address arithmetic, branch, the rest */
    KILN_PROF_CLASSES
} kiln_prof_class;

/* Kinds of shared-memory access. */
typedef enum kiln_prof_smem {
    KILN_SMEM_LD, KILN_SMEM_ST, KILN_SMEM_LDMATRIX, KILN_SMEM_CP_ASYNC, KILN_SMEM_KINDS
} kiln_prof_smem;

typedef struct kiln_smem_cost {
    uint64_t requests;   /* warp-wide accesses */
    uint64_t wavefronts; /* what they took */
    uint64_t ideal;      /* what they would take without conflicts (one per phase) */
    uint64_t conflicts;  /* wavefronts - ideal */
} kiln_smem_cost;

typedef struct kiln_emu_profile {
    uint64_t blocks, warps;               /* blocks and warps run */
    uint64_t inst[KILN_PROF_CLASSES];     /* warp instructions, whole kernel */
    uint64_t hot_inst[KILN_PROF_CLASSES]; /* warp instructions in the hot loop */
    kiln_smem_cost smem[KILN_SMEM_KINDS]; /* whole kernel */
    kiln_smem_cost hot_smem[KILN_SMEM_KINDS];
    uint64_t global_ld_bytes, global_st_bytes; /* summed over threads (cp.async sources included) */
    unsigned basic_blocks, hot_blocks;    /* IR basic blocks, and how many form the hot loop */
    uint64_t hot_trips;                   /* warp executions of the hottest basic block */
} kiln_emu_profile;

/* One shared-memory access site of the kernel. */
typedef struct kiln_smem_site {
    char where[96];   /* "ldmatrix.x4.trans #2 (16 B/lane) in @attention_fwd, bb 7" */
    kiln_prof_smem kind;
    int hot;          /* in the hot loop */
    kiln_smem_cost cost;
} kiln_smem_site;

/* One basic block of the kernel's optimized IR, in the module's order (a loop's blocks lie between its first
 * and last): how often the warps ran it, its static instruction count per class, and whether it is in the
 * hot loop. Loop-level figures that the hot loop leaves out (a branch taken on a minority of the trips)
 * are sums over a range of blocks. */
typedef struct kiln_prof_block {
    uint64_t warp_runs;                  /* warp executions so far */
    uint32_t inst[KILN_PROF_CLASSES];    /* instructions per execution */
    int hot;
} kiln_prof_block;

/* on: kernels loaded from now on are instrumented (slower); off: they are not. */
void kiln_emu_set_profile(kiln_emu *emu, int on);
/* The kernel's counts so far; KILN_EINVAL when it was loaded without profiling. */
kiln_status kiln_emu_profile_get(const kiln_emu_kernel *k, kiln_emu_profile *out, kiln_error *err);
/* Number of shared-memory access sites (0 without profiling), and site i. */
unsigned kiln_emu_profile_nsites(const kiln_emu_kernel *k);
int kiln_emu_profile_site(const kiln_emu_kernel *k, unsigned i, kiln_smem_site *out);
/* Basic block i (i < kiln_emu_profile's basic_blocks); 0, or -1 past the last one or without profiling. */
int kiln_emu_profile_block(const kiln_emu_kernel *k, unsigned i, kiln_prof_block *out);
void kiln_emu_profile_reset(kiln_emu_kernel *k);
/* "mma", "ldmatrix", ... / "ld.shared", "st.shared", "ldmatrix", "cp.async". */
const char *kiln_prof_class_name(kiln_prof_class c);
const char *kiln_prof_smem_name(kiln_prof_smem s);

#ifdef __cplusplus
}
#endif
#endif
