/* kiln/emu.h - the CPU emulator (libkiln): runs generated kernels on the host and checks them. */
#ifndef KILN_EMU_H
#define KILN_EMU_H

#include <stddef.h>
#include <stdint.h>

#include "kiln/common.h"
#include "kiln/gen.h"
#include "kiln/kernel.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * The emulator compiles the very LLVM module that becomes PTX for the host (NVVM
 * intrinsics become calls into the emulator), then runs a grid one block at a time,
 * each CUDA thread a fiber. Barriers and warp collectives meet their threads and check
 * them: a divergent barrier, a shuffle naming an exited lane or a deadlock is a
 * KILN_EEMU error, never a hang. Shared memory is poisoned (0xff bytes: NaN in every
 * float type) before each block. Runs are deterministic.
 *
 * One kiln_emu and its kernels must be used by one thread at a time.
 */
typedef struct kiln_emu kiln_emu;
typedef struct kiln_emu_kernel kiln_emu_kernel; /* owned by its kiln_emu */

kiln_status kiln_emu_create(kiln_emu **out, kiln_error *err);
/* Frees the emulator and every kernel loaded into it. */
void kiln_emu_destroy(kiln_emu *emu);

/* Generates spec for target sm with gen and compiles that module for the host. A kernel of the same generator,
 * SM, profile setting and canonical spec that was loaded and freed before in this emulator is taken back instead
 * (the emulator's cache; docs/emulator.md "The kernel cache"; KILN_EMU_CACHE=0 turns it off). */
kiln_status kiln_emu_load(kiln_emu *emu, kiln_gen *gen, const char *spec, int sm,
                          kiln_emu_kernel **out, kiln_error *err);
/* Compiles NVVM IR (LLVM text or bitcode, len bytes) for the host. entry names the kernel
 * (NULL: the module's only kernel); sm picks the limits launches are checked against.
 * The metadata is read from the IR: parameters, and the block size from reqntid/maxntid. */
kiln_status kiln_emu_load_ir(kiln_emu *emu, const char *ir, size_t len, const char *entry,
                             int sm, kiln_emu_kernel **out, kiln_error *err);
const kiln_kernel_meta *kiln_emu_kernel_meta(const kiln_emu_kernel *k);
/* Gives the kernel back (optional: kiln_emu_destroy frees all kernels): it stays in the emulator's cache, idle,
 * for a later kiln_emu_load of the same kernel, until the cache's bound or kiln_emu_destroy frees its code. The
 * caller must not use k afterwards. */
void kiln_emu_kernel_free(kiln_emu_kernel *k);

/* Zero-initialize it (`= {0}` or designated initializers): fields are added at the end (arg_bytes
 * came after nullable), and a zero field keeps the older behaviour. */
typedef struct kiln_emu_launch {
    unsigned grid[3];      /* blocks; every dimension >= 1 */
    unsigned block[3];     /* threads per block */
    unsigned dynamic_smem; /* bytes of dynamic shared memory */
    int twice;             /* nonzero: run every block twice, threads in ascending then in
                            * descending order, and fail if what they wrote differs */
    uint32_t nullable;     /* bit i set: pointer parameter i may be NULL (else a bad launch) */
    const size_t *arg_bytes; /* optional, one entry per parameter: the size in bytes of the buffer
                              * each non-NULL pointer argument points at (other entries ignored).
                              * Given, every global access must lie inside one of these buffers:
                              * a read before a buffer's start or past its end fails (KILN_EEMU)
                              * wherever it lands, not only on an unmapped page as on a GPU.
                              * NULL: global accesses are checked for the null page only. */
    int race;              /* nonzero: check shared memory for races by happens-before (docs/emulator.md
                            * "Races"): two accesses to a byte from different threads, one of them a write,
                            * that no barrier, warp sync, mbarrier phase or cp.async wait orders, fail
                            * (KILN_EEMU) whatever order the threads ran in. The environment's
                            * KILN_EMU_RACE=1 turns it on for every launch. */
} kiln_emu_launch;

/* Runs the grid as cuLaunchKernel would: args[i] points at the value of parameter i.
 * Bad launches (empty grid, too many threads, too much shared memory for the target,
 * a NULL argument, a null pointer not marked nullable) fail with KILN_EINVAL; faults found while
 * running (divergent barrier, warp collective with a missing lane, deadlock, trap,
 * a race seen by `twice`) with KILN_EEMU. */
kiln_status kiln_emu_run(kiln_emu_kernel *k, const kiln_emu_launch *launch, void **args,
                         kiln_error *err);

/* ---- element values (emu_half.c): conversions used by references and tests ---- */

/* Element i of an array of dtype t, as a double (exact). */
double kiln_emu_value_get(kiln_dtype t, const void *base, size_t i);
/* Stores v rounded to nearest even into element i (NaN stays NaN, overflow gives Inf). */
void kiln_emu_value_set(kiln_dtype t, void *base, size_t i, double v);

/* ---- the input kinds every family's reference draws (kiln_case_opts.input; templates/layernorm.ref.c) ---- */

typedef enum kiln_ln_input {
    KILN_LN_RANDOM = 0, /* x ~ N(0.5, 2), weight ~ N(1, 0.5), bias ~ N(0, 0.5) */
    KILN_LN_LARGE_MEAN, /* rows alternate 10000 + N(0, 1e-3) and 1000 + N(0, 0.1): a naive
                         * sum / sum-of-squares variance fails on them */
    KILN_LN_CONSTANT,   /* every row constant (row r holds r - 1.5) */
    KILN_LN_SPECIAL,    /* rows with NaN, +Inf, -Inf and both infinities among random values,
                         * and random rows between them */
    KILN_LN_MIXED,      /* row r takes the kind r % 4 of the four above */
    KILN_LN_INPUT_COUNT
} kiln_ln_input;

/* "random", "large-mean", "constant", "special"; parse returns 0 on success. */
const char *kiln_ln_input_name(kiln_ln_input in);
int kiln_ln_input_parse(const char *name, kiln_ln_input *out);


#ifdef __cplusplus
}
#endif
#endif
