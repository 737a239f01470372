/* kiln/target.h - the SM table: every per-SM fact kiln uses (generator and runtime), once. */
#ifndef KILN_TARGET_H
#define KILN_TARGET_H

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One row per SM kiln generates for. Sources: PTX ISA manual ("Target ISA notes"), CUDA
 * programming guide (shared memory, threads per block,
 * registers and resident threads per SM); ../shared/PTX_FACTS.md. */
typedef struct kiln_target {
    int sm;                   /* 75 for sm_75; KILN_SM_ARCH + 90 for the arch-specific sm_90a */
    int ptx_min;              /* minimal PTX ISA version for this .target, times 10 */
    bool native_bf16_cvt;     /* cvt.rn.bf16.f32 / cvt.rn.bf16x2.f32 exist */
    bool packed_f16_cvt;      /* cvt.rn.f16x2.f32 exists */
    bool f16_arith;           /* add/mul/fma .f16/.f16x2 */
    bool bf16_arith;          /* add/mul .bf16 (sm_90) */
    bool mma_m8n8k4_f16;      /* mma.sync.m8n8k4 f16 */
    bool mma_m16n8k8_f16;     /* mma.sync.m16n8k8 f16 -> f32 */
    bool mma_m16n8k16;        /* mma.sync.m16n8k16 f16 and bf16 -> f32 (and m16n8k8 tf32) */
    bool wgmma;               /* wgmma on the arch-specific sm_90a */
    bool ldmatrix;            /* ldmatrix.sync.aligned.m8n8 */
    bool cp_async;            /* cp.async + commit/wait groups */
    unsigned smem_static_max; /* bytes of static shared memory per block */
    unsigned smem_optin_max;  /* bytes per block with the opt-in attribute */
    unsigned max_threads;     /* threads per block */
    unsigned regs_per_sm;     /* 32-bit registers one SM holds for its resident blocks */
    unsigned threads_per_sm;  /* resident threads per SM, at most */
} kiln_target;

/* An arch-specific target ("sm_90a": its PTX runs on exactly one SM and may use that SM's 'a'
 * features such as wgmma and setmaxnreg) is numbered KILN_SM_ARCH + its SM: sm_90a is 1090. The
 * number is above every plain SM, so "the newest target not above the device" never picks one;
 * kiln_target_runs_on says where each runs. */
#define KILN_SM_ARCH 1000
/* The SM a target's code runs on: 90 for sm_90 and for sm_90a (1090). */
static inline int kiln_sm_base(int sm) { return sm % KILN_SM_ARCH; }
/* Whether sm is an arch-specific ('a') target number. */
static inline bool kiln_sm_is_arch(int sm) { return sm >= KILN_SM_ARCH; }
/* "sm_90a" for 1090, "sm_75" for 75, into buf (at least 16 bytes); returns buf. */
const char *kiln_sm_name(int sm, char *buf);
/* The target number of "90a", "sm_90a", "75" or "sm_75" when kiln generates for it, else 0. */
int kiln_sm_parse(const char *text);
/* Whether code built for target sm runs on a device of SM device_sm (kiln_sm_from_cc): a plain
 * target on its SM and newer ones, an arch-specific one on its own SM only. */
bool kiln_target_runs_on(int sm, int device_sm);

/* The row for exactly sm, or NULL when kiln does not generate for it. */
const kiln_target *kiln_target_find(int sm);
/* All rows, ascending by SM; *count receives the number. */
const kiln_target *kiln_target_all(int *count);
/* The SMs kiln generates for, ascending; returns the count and fills up to cap. */
int kiln_targets(int *sms, int cap);

#ifdef __cplusplus
}
#endif
#endif
