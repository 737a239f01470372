/* gen/gen_target.c - the generator's own per-target facts: the PTX ISA version each generator feature needs
 * (beyond the target's own), and what ptxas does with kiln's code on each SM (gen_ptxas_facts). */
#include "gen.h"

int gen_feature_ptx(enum gen_feature f) {
    static const int ptx[] = {
        [GEN_FEAT_MMA_M16N8K8] = 65,
        [GEN_FEAT_LDMATRIX] = 65,
        [GEN_FEAT_MMA_M16N8K16] = 70,
        [GEN_FEAT_CP_ASYNC] = 70,
    };
    return ptx[f];
}

/* ptxas facts, one row per row of the SM table (runtime/rt_target.c; build/tests/gen_test checks both hold the
 * same SMs). They are kept here rather than as kiln_target fields: kiln_target is public (include/kiln/target.h)
 * and kiln_target_all hands out an array of it, so a new field changes the struct's size and the array's stride
 * under libkiln_rt.so.0's callers (the Makefile's SOVERSION 0 would have to move); the runtime never reads these
 * facts, only the templates, through the generator. Templates read them as target.ptxas_* (gen_builder.c), so a
 * template never compares SM numbers (README, ../shared/DESIGN.md).
 *
 * rolled_mma_k: the attention forward's S = Q K^T k-steps may be an IR loop (templates/attention.lua roll_qk,
 *   mma_scores_rolled; docs/jit.md "Wave 22"): ptxas 13 unrolls the constant-trip loop again and, measured
 *   against the unrolled k-steps (SASS = .text / 16), keeps or lowers the SASS count on sm_80 (quick matrix, d32,
 *   d64, d128: 0 to -120), sm_86 and sm_89 (d32/64/128, causal or not); sm_90, sm_100 and sm_120 gain +8 to +32
 *   on the same specs. Not measured: sm_103 and sm_110 take sm_100's value (the same ptxas generation,
 *   Blackwell's 10.x/11.0 SASS), sm_121 sm_120's, sm_90a sm_90's (its mma.sync kernel is sm_90's code); sm_75
 *   (m16n8k8 f16 k-steps) and sm_70 were never measured rolled and keep the unrolled k-steps.
 * f16_row_regs: registers a short-row norm thread (a warp per row, templates/lib/norm.lua short_row_live) needs
 *   besides its estimate per f16 tensor: ptxas for sm_100..121 spilled 12-44 bytes at 48 registers on f16 rows
 *   of 768 (kiln's pipeline), none at 56; on sm_90 LLVM's default<O3> code of those rows (the quality tables'
 *   reference) spilled 16 bytes at 48; sm_75..89 take none (docs/llvm22.md: 2-byte rows of 768 fit 48 on sm_80,
 *   the caps measured over the short-row forward variants on every SM from sm_75). sm_90a takes sm_90's value
 *   (the same SASS generation); sm_70, which CUDA 13's ptxas no longer builds (docs/lint.md), sm_75's.
 * dropout_o3, mask_dropout_o3, neox_o3, neox_d128_o3 (wave 25): where the attention forward's code from LLVM's
 *   default<O3> assembles better than kiln's pipeline (templates/attention.lua's `o3` rules, which give the
 *   figures): dropout_o3, the causal-dropout tiles (SIMT d32, d96 and past d128; the cp.async d32 tile) keep a block
 *   more an SM on sm_75..89; mask_dropout_o3, SIMT d64 causal dropout with the mask keys, on sm_90..110; neox_o3,
 *   GPT-NeoX rotary in the append on the 96-wide cp.async tile (fewer SASS instructions), sm_80..110; neox_d128_o3,
 *   the same for bf16 d128 split-KV whatever the cos/sin table's dtype, sm_90..110 (below, only with an f32 table).
 *   sm_120/121 keep kiln's pipeline in all four; sm_90a's mma.sync kernel was measured on sm_90a's own rows, where
 *   these did not apply (none set). */
static const gen_ptxas_facts ptxas_facts[] = {
    /* sm, rolled_mma_k, f16_row_regs, dropout_o3, mask_dropout_o3, neox_o3, neox_d128_o3 */
    {70, false, 0, true, false, true, false},
    {75, false, 0, true, false, true, false},
    {80, true, 0, true, false, true, false},
    {86, true, 0, true, false, true, false},
    {89, true, 0, true, false, true, false},
    {90, false, 8, false, true, true, true},
    {100, false, 8, false, true, true, true},
    {103, false, 8, false, true, true, true},
    {110, false, 8, false, true, true, true},
    {120, false, 8, false, false, false, false},
    {121, false, 8, false, false, false, false},
    {KILN_SM_ARCH + 90, false, 8, false, false, false, false},
};
enum { NPTXAS = sizeof ptxas_facts / sizeof ptxas_facts[0] };

const gen_ptxas_facts *gen_ptxas_find(int sm) {
    for (int i = 0; i < NPTXAS; i++)
        if (ptxas_facts[i].sm == sm) return &ptxas_facts[i];
    return NULL;
}

const gen_ptxas_facts *gen_ptxas_all(int *count) {
    *count = NPTXAS;
    return ptxas_facts;
}
