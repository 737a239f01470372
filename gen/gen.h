/* gen/gen.h - private header of the generator (gen/), grouped by the file defining each part. */
#ifndef KILN_GEN_GEN_H
#define KILN_GEN_GEN_H

#include <stdbool.h>
#include <stddef.h>

#include <llvm-c/Core.h>
#include <llvm-c/TargetMachine.h>

#include "kiln/gen.h"

/* ---- gen_target.c: the SM table; the only place that knows what each SM can do ---- */
typedef struct gen_target {
    int sm;                   /* 75 for sm_75 */
    int ptx_min;              /* minimal PTX ISA version for this .target, times 10 */
    bool native_bf16_cvt;     /* cvt.rn.bf16.f32 / cvt.rn.bf16x2.f32 exist */
    bool packed_f16_cvt;      /* cvt.rn.f16x2.f32 exists */
    bool f16_arith;           /* add/mul/fma .f16/.f16x2 */
    bool bf16_arith;          /* add/mul .bf16 (sm_90) */
    bool mma_m16n8k8_f16;     /* mma.sync.m16n8k8 f16 -> f32 */
    bool mma_m16n8k16;        /* mma.sync.m16n8k16 f16 and bf16 -> f32 */
    bool ldmatrix;            /* ldmatrix.sync.aligned.m8n8 */
    bool cp_async;            /* cp.async + commit/wait groups */
    unsigned smem_static_max; /* bytes of static shared memory per block */
    unsigned smem_optin_max;  /* bytes per block with the opt-in attribute */
    unsigned max_threads;     /* threads per block */
} gen_target;

/* The entry for sm, or NULL when the SM is not supported. */
const gen_target *gen_target_find(int sm);
/* All entries, ascending by SM; *count receives the number. */
const gen_target *gen_target_all(int *count);
/* PTX ISA version that a feature needs (times 10): e.g. ldmatrix 65, cp.async 70. */
enum gen_feature { GEN_FEAT_MMA_M16N8K8, GEN_FEAT_LDMATRIX, GEN_FEAT_MMA_M16N8K16, GEN_FEAT_CP_ASYNC };
int gen_feature_ptx(enum gen_feature f);

/* ---- gen_api.c / gen_pipeline.c: spec -> module, shared with the emulator (emu/) ---- */

/* The module for one spec and target, optimized exactly as it is before NVPTX codegen,
 * created in ctx (which the caller owns; the caller disposes the module). meta is filled
 * as for kiln_generate. */
kiln_status gen_build_module(kiln_gen *gen, const char *spec, int sm, LLVMContextRef ctx,
                             LLVMModuleRef *out, kiln_kernel_meta *meta, kiln_error *err);

#endif
