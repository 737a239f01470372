/* gen/gen_lint_table.c - what each PTX instruction, type, modifier and target needs: lint's facts, in tables. */
#include <stdio.h>

#include "gen.h"

/* Sources: NVIDIA PTX ISA manual, each instruction's "PTX ISA notes" / "Target ISA notes", and
 * the release notes for targets; ../shared/PTX_FACTS.md. Every row with an example is assembled
 * by tests/lint_test.c with CUDA's ptxas at, and just below, the SM and PTX ISA it names.
 *
 * All rows that match a statement apply; lint reports the largest need, naming the last row that
 * has it, so specific rows come after the general ones they refine.
 *
 * A row with sm2 names a feature that came to sm_<sm2> first and to the older sm_<sm> in a later
 * PTX ISA (ptxas: cvt.e4m3x2 on sm_89 needs PTX ISA 8.1, on sm_90 7.8).
 *
 * The examples use registers %rs (b16), %r (b32), %rd (b64), %f (f32), %fd (f64), %p (pred)
 * numbered 0..7 and a shared array `sh`, which the test declares. */
static const gen_lint_rule rules[] = {
    /* op, modifiers, operand, sm, ptx, arch-specific, feature, example, sm2, ptx2 */
    /* Types and state-space modifiers, in any instruction. */
    {"*", "*.bf16.*", NULL, 80, 70, false, ".bf16", "neg.bf16 %rs1, %rs2;", 0, 0},
    {"*", "*.bf16x2.*", NULL, 80, 70, false, ".bf16x2", "neg.bf16x2 %r1, %r2;", 0, 0},
    {"*", "*.tf32.*", NULL, 80, 70, false, ".tf32", "cvt.rna.tf32.f32 %r1, %f1;", 0, 0},
    {"*", "*.e4m3x2|e5m2x2.*", NULL, 89, 81, false, ".e4m3x2/.e5m2x2", "cvt.rn.satfinite.e4m3x2.f32 %rs1, %f1, %f2;",
     90, 78},
    {"*", "*.shared::cta.*", NULL, 0, 78, false, "::cta", "ld.shared::cta.u32 %r1, [sh];", 0, 0},
    {"*", "*.shared::cluster.*", NULL, 90, 78, false, "::cluster", "ld.shared::cluster.u32 %r1, [sh];", 0, 0},
    {"*", "*.cluster.*", NULL, 90, 78, false, ".cluster scope", "fence.acq_rel.cluster;", 0, 0},
    {"ld|st|cp|prefetch", "*.L2::64B|L2::128B.*", NULL, 75, 74, false, ".L2::128B",
     "ld.global.L2::128B.u32 %r1, [%rd1];", 0, 0},
    {"ld|cp|prefetch", "*.L2::256B.*", NULL, 80, 74, false, ".L2::256B", "ld.global.L2::256B.u32 %r1, [%rd1];", 0, 0},
    {"*", "*.L2::cache_hint.*", NULL, 80, 74, false, ".L2::cache_hint",
     "ld.global.L2::cache_hint.u32 %r1, [%rd1], %rd2;", 0, 0},
    {"ld|st", "*.L1::evict_last|L1::evict_first|L1::no_allocate|L1::evict_unchanged.*", NULL, 70, 74, false,
     ".L1::evict_*", "ld.global.L1::evict_last.u32 %r1, [%rd1];", 0, 0},
    /* Conversions. */
    {"cvt", "*.bf16.f32", NULL, 80, 70, false, "cvt.bf16.f32", "cvt.rn.bf16.f32 %rs1, %f1;", 0, 0},
    {"cvt", "*.bf16x2.f32", NULL, 80, 70, false, "cvt.bf16x2.f32", "cvt.rn.relu.bf16x2.f32 %r1, %f1, %f2;", 0, 0},
    {"cvt", "*.f16x2.f32", NULL, 80, 70, false, "cvt.f16x2.f32", "cvt.rn.f16x2.f32 %r1, %f1, %f2;", 0, 0},
    {"cvt", "*.relu.*", NULL, 80, 70, false, "cvt.relu", "cvt.rn.relu.f16.f32 %rs1, %f1;", 0, 0},
    {"cvt", "*.f32.bf16", NULL, 80, 71, false, "cvt.f32.bf16", "cvt.f32.bf16 %f1, %rs1;", 0, 0},
    {"cvt", "*.bf16.f16|f64|u8|u16|u32|u64|s8|s16|s32|s64", NULL, 90, 78, false, "cvt to .bf16 from f16/f64/int",
     "cvt.rn.bf16.f16 %rs1, %rs2;", 0, 0},
    {"cvt", "*.f16|f64|u8|u16|u32|u64|s8|s16|s32|s64.bf16", NULL, 90, 78, false, "cvt from .bf16 to f16/f64/int",
     "cvt.rzi.s32.bf16 %r1, %rs1;", 0, 0},
    {"cvt", "*.e4m3x2|e5m2x2.*", NULL, 89, 81, false, "cvt with .e4m3x2/.e5m2x2", "cvt.rn.f16x2.e4m3x2 %r1, %rs1;",
     90, 78},
    /* Arithmetic. */
    {"add|sub|mul", "*.bf16|bf16x2", NULL, 90, 78, false, "add/sub/mul.bf16", "add.rn.bf16 %rs1, %rs2, %rs3;", 0, 0},
    {"fma", "*.relu.*", NULL, 80, 70, false, "fma.relu", "fma.rn.relu.f16 %rs1, %rs2, %rs3, %rs4;", 0, 0},
    {"min|max", "*.f16|f16x2", NULL, 80, 70, false, "min/max.f16", "max.f16 %rs1, %rs2, %rs3;", 0, 0},
    {"min|max", "*.NaN.*", NULL, 80, 70, false, "min/max.NaN", "min.NaN.f32 %f1, %f2, %f3;", 0, 0},
    {"min|max", "*.xorsign.*", NULL, 86, 72, false, "min/max.xorsign.abs", "max.xorsign.abs.f16 %rs1, %rs2, %rs3;",
     0, 0},
    {"setp|set", "*.bf16|bf16x2", NULL, 90, 78, false, "setp.bf16", "setp.lt.bf16 %p1, %rs1, %rs2;", 0, 0},
    {"ex2", "*.f16|f16x2", NULL, 75, 70, false, "ex2.f16", "ex2.approx.f16 %rs1, %rs2;", 0, 0},
    {"ex2", "*.bf16|bf16x2", NULL, 90, 78, false, "ex2.bf16", "ex2.approx.ftz.bf16 %rs1, %rs2;", 0, 0},
    {"tanh", "*", NULL, 75, 70, false, "tanh", "tanh.approx.f32 %f1, %f2;", 0, 0},
    {"tanh", "*.bf16|bf16x2", NULL, 90, 78, false, "tanh.bf16", "tanh.approx.bf16 %rs1, %rs2;", 0, 0},
    /* Tensor cores. */
    {"mma", "*", NULL, 70, 64, false, "mma", "mma.sync.aligned.m8n8k4.row.col.f32.f16.f16.f32 "
                                             "{%f0,%f1,%f2,%f3,%f4,%f5,%f6,%f7}, {%r0,%r1}, {%r2,%r3}, "
                                             "{%f0,%f1,%f2,%f3,%f4,%f5,%f6,%f7};", 0, 0},
    {"mma", "*.m16n8k8.*", NULL, 75, 65, false, ".m16n8k8", "mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 "
                                                           "{%f0,%f1,%f2,%f3}, {%r0,%r1}, {%r2}, {%f0,%f1,%f2,%f3};",
     0, 0},
    {"mma", "*.m8n8k16|m8n8k32|m8n8k128.*", NULL, 75, 65, false, "integer mma",
     "mma.sync.aligned.m8n8k16.row.col.s32.s8.s8.s32 {%r0,%r1}, {%r2}, {%r3}, {%r4,%r5};", 0, 0},
    {"mma", "*.m16n8k8.*.bf16|tf32.*", NULL, 80, 70, false, ".m16n8k8 with .bf16/.tf32",
     "mma.sync.aligned.m16n8k8.row.col.f32.bf16.bf16.f32 {%f0,%f1,%f2,%f3}, {%r0,%r1}, {%r2}, {%f0,%f1,%f2,%f3};",
     0, 0},
    {"mma", "*.m16n8k16|m16n8k32|m16n8k64|m16n8k128|m16n8k256|m16n8k4.*", NULL, 80, 70, false, ".m16n8k16",
     "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%f0,%f1,%f2,%f3}, {%r0,%r1,%r2,%r3}, {%r4,%r5}, "
     "{%f0,%f1,%f2,%f3};", 0, 0},
    {"mma", "*.m8n8k4.*.f64", NULL, 80, 70, false, "mma .f64", "mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 "
                                                              "{%fd0,%fd1}, {%fd2}, {%fd3}, {%fd4,%fd5};", 0, 0},
    {"mma", "*.e4m3|e5m2.*", NULL, 89, 84, false, "mma .e4m3/.e5m2",
     "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%f0,%f1,%f2,%f3}, {%r0,%r1,%r2,%r3}, {%r4,%r5}, "
     "{%f0,%f1,%f2,%f3};", 0, 0},
    {"ldmatrix", "*", NULL, 75, 65, false, "ldmatrix",
     "ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%r0,%r1,%r2,%r3}, [sh];", 0, 0},
    {"stmatrix", "*", NULL, 90, 78, false, "stmatrix", "stmatrix.sync.aligned.m8n8.x1.shared.b16 [sh], {%r1};", 0, 0},
    {"movmatrix", "*", NULL, 75, 78, false, "movmatrix", "movmatrix.sync.aligned.m8n8.trans.b16 %r1, %r2;", 0, 0},
    {"wgmma", "*", NULL, 90, 80, true, "wgmma", "wgmma.fence.sync.aligned;", 0, 0},
    {"setmaxnreg", "*", NULL, 90, 80, true, "setmaxnreg", "setmaxnreg.inc.sync.aligned.u32 240;", 0, 0},
    /* Asynchronous copies and barriers. */
    {"cp", "async.*", NULL, 80, 70, false, "cp.async", "cp.async.ca.shared.global [sh], [%rd1], 16;", 0, 0},
    {"cp", "async.commit_group", NULL, 80, 70, false, "cp.async.commit_group", "cp.async.commit_group;", 0, 0},
    {"cp", "async.wait_group|wait_all", NULL, 80, 70, false, "cp.async.wait_group", "cp.async.wait_group 1;", 0, 0},
    {"cp", "async.bulk.*", NULL, 90, 80, false, "cp.async.bulk", "cp.async.bulk.prefetch.L2.global [%rd1], 256;", 0, 0},
    {"cp", "reduce.async.bulk.*", NULL, 90, 80, false, "cp.reduce.async.bulk",
     "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.u32 [%rd1], [sh], 16;", 0, 0},
    {"mbarrier", "*", NULL, 80, 70, false, "mbarrier", "mbarrier.init.shared.b64 [sh], %r1;", 0, 0},
    {"mbarrier", "try_wait.*", NULL, 90, 78, false, "mbarrier.try_wait",
     "mbarrier.try_wait.shared.b64 %p1, [sh], %rd1;", 0, 0},
    {"mbarrier", "*.expect_tx|complete_tx.*", NULL, 90, 80, false, "mbarrier.expect_tx",
     "mbarrier.expect_tx.shared.b64 [sh], %r1;", 0, 0},
    {"redux", "*", NULL, 80, 70, false, "redux", "redux.sync.add.u32 %r1, %r2, 0xffffffff;", 0, 0},
    {"elect", "*", NULL, 90, 80, false, "elect", "elect.sync %r1|%p1, 0xffffffff;", 0, 0},
    {"griddepcontrol", "*", NULL, 90, 78, false, "griddepcontrol", "griddepcontrol.wait;", 0, 0},
    {"fence", "proxy.*", NULL, 70, 75, false, "fence.proxy", "fence.proxy.alias;", 0, 0},
    {"fence", "proxy.async.*", NULL, 90, 80, false, "fence.proxy.async", "fence.proxy.async;", 0, 0},
    {"fence", "mbarrier_init.*", NULL, 90, 80, false, "fence.mbarrier_init",
     "fence.mbarrier_init.release.cluster;", 0, 0},
    {"mapa|getctarank", "*", NULL, 90, 78, false, "mapa/getctarank", "mapa.u64 %rd1, %rd2, %r1;", 0, 0},
    {"createpolicy|applypriority|discard", "*", NULL, 80, 74, false, "cache eviction policy",
     "createpolicy.fractional.L2::evict_last.b64 %rd1, 1.0;", 0, 0},
    {"atom|red", "*.noftz.f16x2", NULL, 60, 62, false, "atom.add.noftz.f16x2",
     "atom.global.add.noftz.f16x2 %r1, [%rd1], %r2;", 0, 0},
    {"atom|red", "*.noftz.f16", NULL, 70, 63, false, "atom.add.noftz.f16",
     "atom.global.add.noftz.f16 %rs1, [%rd1], %rs2;", 0, 0},
    {"atom|red", "*.noftz.bf16|bf16x2", NULL, 90, 78, false, "atom.add.noftz.bf16",
     "atom.add.noftz.bf16x2 %r1, [%rd1], %r2;", 0, 0},
    {"nanosleep", "*", NULL, 70, 63, false, "nanosleep", "nanosleep.u32 %r1;", 0, 0},
    {"match", "*", NULL, 70, 60, false, "match.sync", "match.any.sync.b32 %r1, %r2, 0xffffffff;", 0, 0},
    {"activemask", "*", NULL, 30, 62, false, "activemask", "activemask.b32 %r1;", 0, 0},
    {"shfl|vote", "sync.*", NULL, 30, 60, false, "shfl.sync/vote.sync",
     "shfl.sync.bfly.b32 %r1, %r2, 1, 31, 0xffffffff;", 0, 0},
    {"bar", "warp.*", NULL, 30, 60, false, "bar.warp.sync", "bar.warp.sync 0xffffffff;", 0, 0},
    {"barrier", "*", NULL, 30, 60, false, "barrier", "barrier.sync 0;", 0, 0},
    {"barrier", "cluster.*", NULL, 90, 78, false, "barrier.cluster", "barrier.cluster.arrive;", 0, 0},
    /* Special registers. */
    {"*", "*", "%cluster*", 90, 78, false, "cluster special registers", "mov.u32 %r1, %cluster_ctarank;", 0, 0},
    {"*", "*", "%is_explicit_cluster", 90, 78, false, "%is_explicit_cluster", NULL, 0, 0},
    {"*", "*", "%nclusterid*", 90, 78, false, "%nclusterid", "mov.u32 %r1, %nclusterid.x;", 0, 0},
    /* Directives (matched anywhere in a directive statement). */
    {".loc", NULL, "inlined_at", 0, 70, false, "line information of inlined functions", NULL, 0, 0},
    {".reqnctapercluster", NULL, NULL, 90, 78, false, ".reqnctapercluster", NULL, 0, 0},
    {".explicitcluster", NULL, NULL, 90, 78, false, ".explicitcluster", NULL, 0, 0},
    {".maxclusterrank", NULL, NULL, 90, 78, false, ".maxclusterrank", NULL, 0, 0},
    /* A label inside a .section block (matched by lint itself, not by opcode). */
    {":section-label", NULL, NULL, 0, 70, false, "labels in .section", NULL, 0, 0},
};

/* The minimal .version of each .target (ptxas and LLVM agree except where noted). */
static const gen_lint_target targets[] = {
    {"sm_50", 50, 40, 0},     {"sm_52", 52, 41, 0},     {"sm_53", 53, 42, 0},     {"sm_60", 60, 50, 0},
    {"sm_61", 61, 50, 0},     {"sm_62", 62, 50, 0},     {"sm_70", 70, 60, 0},     {"sm_72", 72, 61, 0},
    {"sm_75", 75, 63, 0},     {"sm_80", 80, 70, 0},     {"sm_86", 86, 71, 0},     {"sm_87", 87, 74, 0},
    {"sm_88", 88, 90, 0}, /* the manual and LLVM say 9.0; CUDA 13.0's ptxas takes 7.3 */
    {"sm_89", 89, 78, 0},     {"sm_90", 90, 78, 0},     {"sm_90a", 90, 80, 'a'},  {"sm_100", 100, 86, 0},
    {"sm_100a", 100, 86, 'a'}, {"sm_100f", 100, 88, 'f'}, {"sm_101", 101, 86, 0},  {"sm_101a", 101, 86, 'a'},
    {"sm_101f", 101, 88, 'f'}, {"sm_103", 103, 88, 0},  {"sm_103a", 103, 88, 'a'}, {"sm_103f", 103, 88, 'f'},
    {"sm_110", 110, 90, 0},   {"sm_110a", 110, 90, 'a'}, {"sm_110f", 110, 90, 'f'}, {"sm_120", 120, 87, 0},
    {"sm_120a", 120, 87, 'a'}, {"sm_120f", 120, 88, 'f'}, {"sm_121", 121, 88, 0},  {"sm_121a", 121, 88, 'a'},
    {"sm_121f", 121, 88, 'f'},
};

/* Types that exist only as instruction types: data of these types lives in .b16/.b32 registers. */
static const char *const decl_types[] = {".bf16", ".bf16x2", ".tf32", ".e4m3", ".e5m2", ".e4m3x2", ".e5m2x2",
                                         ".e2m1x2", ".e2m3x2", ".e3m2x2", ".ue8m0x2", NULL};

const gen_lint_rule *gen_lint_rules(size_t *count) {
    *count = sizeof rules / sizeof rules[0];
    return rules;
}

const gen_lint_target *gen_lint_targets(size_t *count) {
    *count = sizeof targets / sizeof targets[0];
    return targets;
}

const char *const *gen_lint_decl_types(void) { return decl_types; }

const char *gen_lint_sm_name(int sm, bool arch, char *buf) {
    snprintf(buf, 16, "sm_%d%s", sm, arch ? "a" : "");
    return buf;
}
