/* gen/gen_lint_table.c - what each PTX instruction, type, modifier and target needs: lint's facts, in tables. */
#include <stdio.h>

#include "gen.h"
#include "kiln/runtime.h"

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
/* Row helpers (designated initializers: fields not named are 0/NULL).
 * R: an instruction (op, modifier pattern); RO: with an operand condition ("%x*" prefix, "#N" count);
 * RA: available only on the arch- or family-specific targets listed; D: a directive word. */
#define R(op_, mods_, sm_, ptx_, feat_, ex_)                                                                          \
    {.op = op_, .mods = mods_, .sm = sm_, .ptx = ptx_, .feature = feat_, .example = ex_}
#define RO(op_, mods_, opnd_, sm_, ptx_, feat_, ex_)                                                                  \
    {.op = op_, .mods = mods_, .operand = opnd_, .sm = sm_, .ptx = ptx_, .feature = feat_, .example = ex_}
#define RA(op_, mods_, targets_, sm_, ptx_, feat_, ex_)                                                               \
    {.op = op_, .mods = mods_, .sm = sm_, .ptx = ptx_, .arch = true, .targets = targets_, .feature = feat_,         \
     .example = ex_}
#define D(word_, opnd_, sm_, ptx_, feat_, ex_)                                                                        \
    {.op = word_, .operand = opnd_, .sm = sm_, .ptx = ptx_, .feature = feat_, .example = ex_}

/* Target sets of arch- and family-specific features, as CUDA 13.0's ptxas accepts them. */
#define T_90A "sm_90a"
#define T_AF100                                                                                                       \
    "sm_100a|sm_100f|sm_101a|sm_101f|sm_103a|sm_103f|sm_110a|sm_110f|sm_120a|sm_120f|sm_121a|sm_121f"
#define T_AF90 "sm_90a|" T_AF100
#define T_10X "sm_100a|sm_100f|sm_103a|sm_103f"
#define T_10X_11X T_10X "|sm_101a|sm_101f|sm_110a|sm_110f"
#define T_A10X_11X "sm_100a|sm_101a|sm_103a|sm_110a"
#define T_A100_103 "sm_100a|sm_103a"
#define T_12X "sm_120a|sm_120f|sm_121a|sm_121f"
#define T_A100_110 "sm_100a|sm_101a|sm_110a"
#define T_LDRED "sm_103a|sm_103f|sm_101a|sm_101f|sm_110a|sm_110f"

static const gen_lint_rule rules[] = {
    /* ---- Types, state spaces and cache modifiers, in any instruction ---- */
    R("*", "*.bf16.*", 80, 70, ".bf16", "neg.bf16 %rs1, %rs2;"),
    R("*", "*.bf16x2.*", 80, 70, ".bf16x2", "neg.bf16x2 %r1, %r2;"),
    R("*", "*.tf32.*", 80, 70, ".tf32", "cvt.rna.tf32.f32 %r1, %f1;"),
    {.op = "*", .mods = "*.e4m3x2|e5m2x2.*", .sm = 89, .ptx = 81, .feature = ".e4m3x2/.e5m2x2",
     .example = "cvt.rn.satfinite.e4m3x2.f32 %rs1, %f1, %f2;", .sm2 = 90, .ptx2 = 78},
    R("*", "*.b128.*", 70, 83, ".b128", "{ .reg .b128 q; mov.b128 q, {%rd1, %rd2}; }"),
    R("*", "*.shared::cta.*", 0, 78, "::cta", "ld.shared::cta.u32 %r1, [sh];"),
    R("*", "*.shared::cluster.*", 90, 78, "::cluster", "ld.shared::cluster.u32 %r1, [sh];"),
    R("*", "*.param::entry|param::func.*", 70, 83, ".param::entry/.param::func", "ld.param::func.u32 %r1, [%rd1];"),
    R("*", "*.cluster.*", 90, 78, ".cluster scope", "fence.acq_rel.cluster;"),
    R("ld|st|cp|prefetch", "*.L2::64B|L2::128B.*", 75, 74, ".L2::128B", "ld.global.L2::128B.u32 %r1, [%rd1];"),
    R("ld|cp|prefetch", "*.L2::256B.*", 80, 74, ".L2::256B", "ld.global.L2::256B.u32 %r1, [%rd1];"),
    R("*", "*.L2::cache_hint.*", 80, 74, ".L2::cache_hint", "ld.global.L2::cache_hint.u32 %r1, [%rd1], %rd2;"),
    R("ld|st", "*.L1::evict_last|L1::evict_first|L1::evict_normal|L1::no_allocate|L1::evict_unchanged.*", 70, 74,
      ".L1::evict_*", "ld.global.L1::evict_last.u32 %r1, [%rd1];"),
    R("ld|st", "*.L2::evict_last|L2::evict_first|L2::evict_normal.*", 100, 88, "ld/st .L2::evict_*",
      "ld.global.L2::evict_last.v8.b32 {%r0,%r1,%r2,%r3,%r4,%r5,%r6,%r7}, [%rd1];"),
    /* ---- Integer arithmetic ---- */
    R("dp4a|dp2a", "*", 61, 50, "dp4a/dp2a", "dp4a.u32.u32 %r1, %r2, %r3, %r4;"),
    R("bmsk", "*", 70, 76, "bmsk", "bmsk.clamp.b32 %r1, %r2, %r3;"),
    R("szext", "*", 70, 76, "szext", "szext.wrap.s32 %r1, %r2, %r3;"),
    R("fns", "*", 30, 60, "fns", "fns.b32 %r1, %r2, %r3, %r4;"),
    R("lop3", "*", 50, 43, "lop3", "lop3.b32 %r1, %r2, %r3, %r4, 0x80;"),
    R("lop3", "and|or.*", 50, 82, "lop3 with a predicate", "lop3.or.b32 %r1|%p1, %r2, %r3, %r4, 0x80, %p2;"),
    R("add|sub|mad", "cc.*.u64|s64|b64", 20, 43, "64-bit add.cc/mad.cc", "add.cc.u64 %rd1, %rd2, %rd3;"),
    R("add|min|max", "*.s16x2|u16x2", 90, 80, ".s16x2/.u16x2", "add.s16x2 %r1, %r2, %r3;"),
    R("min|max", "*.relu.*", 90, 80, "min/max.relu", "max.relu.s32 %r1, %r2, %r3;"),
    /* ---- Floating point ---- */
    R("add|sub|mul|fma", "*.f32x2", 100, 86, ".f32x2", "add.rn.f32x2 %rd1, %rd2, %rd3;"),
    R("add|sub|fma", "*.f32.f16|bf16", 100, 86, "mixed-precision add/sub/fma", "add.rn.f32.f16 %f1, %rs1, %f2;"),
    R("add|sub|mul", "*.bf16|bf16x2", 90, 78, "add/sub/mul.bf16", "add.rn.bf16 %rs1, %rs2, %rs3;"),
    R("fma", "*.relu.*", 80, 70, "fma.relu", "fma.rn.relu.f16 %rs1, %rs2, %rs3, %rs4;"),
    R("fma", "*.oob.*", 90, 81, "fma.oob", "fma.rn.oob.f16 %rs1, %rs2, %rs3, %rs4;"),
    R("min|max", "*.f16|f16x2", 80, 70, "min/max.f16", "max.f16 %rs1, %rs2, %rs3;"),
    R("min|max", "*.NaN.*", 80, 70, "min/max.NaN", "min.NaN.f32 %f1, %f2, %f3;"),
    R("min|max", "*.xorsign.*", 86, 72, "min/max.xorsign.abs", "max.xorsign.abs.f16 %rs1, %rs2, %rs3;"),
    RO("min|max", "*.f32", "#4", 100, 88, "three-input min/max", "min.f32 %f1, %f2, %f3, %f4;"),
    R("abs", "*.f16|f16x2", 53, 65, "abs.f16", "abs.f16 %rs1, %rs2;"),
    R("neg", "*.f16|f16x2", 53, 60, "neg.f16", "neg.f16 %rs1, %rs2;"),
    R("set", "*.u32|s32.f16x2", 53, 65, "set with .f16x2 sources", "set.lt.u32.f16x2 %r1, %r2, %r3;"),
    R("setp|set", "*.bf16|bf16x2", 90, 78, "setp.bf16", "setp.lt.bf16 %p1, %rs1, %rs2;"),
    R("ex2", "*.f16|f16x2", 75, 70, "ex2.f16", "ex2.approx.f16 %rs1, %rs2;"),
    R("ex2", "*.bf16|bf16x2", 90, 78, "ex2.bf16", "ex2.approx.ftz.bf16 %rs1, %rs2;"),
    R("tanh", "*", 75, 70, "tanh", "tanh.approx.f32 %f1, %f2;"),
    R("tanh", "*.bf16|bf16x2", 90, 78, "tanh.bf16", "tanh.approx.bf16 %rs1, %rs2;"),
    /* ---- Conversions ---- */
    R("cvt", "*.bf16.f32", 80, 70, "cvt.bf16.f32", "cvt.rn.bf16.f32 %rs1, %f1;"),
    R("cvt", "*.bf16x2.f32", 80, 70, "cvt.bf16x2.f32", "cvt.rn.relu.bf16x2.f32 %r1, %f1, %f2;"),
    R("cvt", "*.f16x2.f32", 80, 70, "cvt.f16x2.f32", "cvt.rn.f16x2.f32 %r1, %f1, %f2;"),
    R("cvt", "*.relu.*", 80, 70, "cvt.relu", "cvt.rn.relu.f16.f32 %rs1, %f1;"),
    R("cvt", "*.f32.bf16", 80, 71, "cvt.f32.bf16", "cvt.f32.bf16 %f1, %rs1;"),
    R("cvt", "*.bf16.f16|f64|u8|u16|u32|u64|s8|s16|s32|s64", 90, 78, "cvt to .bf16 from f16/f64/int",
      "cvt.rn.bf16.f16 %rs1, %rs2;"),
    R("cvt", "*.f16|f64|u8|u16|u32|u64|s8|s16|s32|s64.bf16", 90, 78, "cvt from .bf16 to f16/f64/int",
      "cvt.rzi.s32.bf16 %r1, %rs1;"),
    R("cvt", "*.satfinite.*.f16|bf16|f16x2|bf16x2|tf32.f32", 53, 81, "cvt.satfinite to f16/bf16/tf32",
      "cvt.rn.satfinite.f16.f32 %rs1, %f1;"),
    R("cvt", "rn|rz.*.tf32.f32", 90, 78, "cvt.rn/.rz.tf32.f32", "cvt.rn.tf32.f32 %r1, %f1;"),
    R("cvt", "rn|rz.*.satfinite.*.tf32.f32", 100, 86, "cvt.rn.satfinite.tf32.f32",
      "cvt.rn.satfinite.tf32.f32 %r1, %f1;"),
    {.op = "cvt", .mods = "*.e4m3x2|e5m2x2.*", .sm = 89, .ptx = 81, .feature = "cvt with .e4m3x2/.e5m2x2",
     .example = "cvt.rn.f16x2.e4m3x2 %r1, %rs1;", .sm2 = 90, .ptx2 = 78},
    RA("cvt", "*.e2m1x2|e2m3x2|e3m2x2|ue8m0x2.*", T_AF100, 100, 86, "cvt with FP6/FP4/UE8M0 types",
       "cvt.rn.satfinite.e2m3x2.f32 %rs1, %f1, %f2;"),
    RA("cvt", "rs.*", T_A100_103, 100, 87, "cvt.rs (stochastic rounding)", "cvt.rs.f16x2.f32 %r1, %f1, %f2, %r2;"),
    R("cvt", "pack.*", 72, 65, "cvt.pack", "cvt.pack.sat.s8.s32.b32 %r1, %r2, %r3, %r4;"),
    R("cvta|isspacep", "*.param.*", 70, 77, "cvta/isspacep .param", "cvta.param.u64 %rd1, %rd2;"),
    /* ---- Data movement ---- */
    R("ld|st|atom|red", "*.relaxed|acquire|release|acq_rel|weak.*", 70, 60, "memory-consistency qualifiers",
      "ld.relaxed.gpu.global.u32 %r1, [%rd1];"),
    R("ld|st", "*.mmio.*", 70, 82, ".mmio", "ld.mmio.relaxed.sys.global.u32 %r1, [%rd1];"),
    R("ld|st", "*.v8.*", 100, 88, "256-bit ld/st (.v8)", "ld.global.v8.f32 {%f0,%f1,%f2,%f3,%f4,%f5,%f6,%f7}, [%rd1];"),
    R("ld|st", "*.v4.b64|u64|s64|f64", 100, 88, "256-bit ld/st (.v4 64-bit)",
      "ld.global.v4.b64 {%rd0,%rd1,%rd2,%rd3}, [%rd4];"),
    R("st", "async.*", 90, 81, "st.async",
      "st.async.shared::cluster.mbarrier::complete_tx::bytes.u32 [sh], %r1, [sh+8];"),
    R("st", "bulk.*", 100, 86, "st.bulk", "st.bulk.weak [%rd1], %rd2, 0;"),
    R("multimem", "*", 90, 81, "multimem", "multimem.ld_reduce.relaxed.sys.global.add.u32 %r1, [%rd1];"),
    R("prefetch", "*.L2::evict_last|L2::evict_normal", 80, 74, "prefetch.L2::evict_*",
      "prefetch.global.L2::evict_last [%rd1];"),
    R("prefetch", "*.tensormap", 90, 80, "prefetch.tensormap", "prefetch.tensormap [%rd1];"),
    R("createpolicy|applypriority|discard", "*", 80, 74, "cache eviction policy",
      "createpolicy.fractional.L2::evict_last.b64 %rd1, 1.0;"),
    R("mapa|getctarank", "*", 90, 78, "mapa/getctarank", "mapa.u64 %rd1, %rd2, %r1;"),
    /* ---- Asynchronous copies ---- */
    R("cp", "async.*", 80, 70, "cp.async", "cp.async.ca.shared.global [sh], [%rd1], 16;"),
    RO("cp", "async.ca|cg.*", "%p*", 80, 75, "cp.async with ignore-src",
       "cp.async.ca.shared.global [sh], [%rd1], 16, %p1;"),
    R("cp", "async.commit_group", 80, 70, "cp.async.commit_group", "cp.async.commit_group;"),
    R("cp", "async.wait_group|wait_all", 80, 70, "cp.async.wait_group", "cp.async.wait_group 1;"),
    R("cp", "async.mbarrier.*", 80, 70, "cp.async.mbarrier.arrive", "cp.async.mbarrier.arrive.noinc.shared.b64 [sh];"),
    R("cp", "async.bulk.*", 90, 80, "cp.async.bulk", "cp.async.bulk.prefetch.L2.global [%rd1], 256;"),
    R("cp", "async.bulk.shared::cta.global.*", 90, 86, "cp.async.bulk to .shared::cta",
      "cp.async.bulk.shared::cta.global.mbarrier::complete_tx::bytes [sh], [%rd1], 16, [sh+8];"),
    R("cp", "async.bulk.tensor.*.shared::cta.global.*", 90, 86, "cp.async.bulk.tensor to .shared::cta",
      "cp.async.bulk.tensor.1d.shared::cta.global.mbarrier::complete_tx::bytes [sh], [%rd1, {%r1}], [sh+8];"),
    R("cp", "*.cp_mask.*", 100, 86, "cp.async.bulk .cp_mask",
      "cp.async.bulk.global.shared::cta.bulk_group.cp_mask [%rd1], [sh], 16, %rs1;"),
    {.op = "cp", .mods = "*.tile::gather4|tile::scatter4|im2col::w|im2col::w::128.*", .unless = "*.shared::cta.global.*",
     .sm = 100, .ptx = 86, .arch = true, .targets = T_10X_11X, .feature = "cp.async.bulk.tensor gather4/scatter4/im2col::w",
     .example = "cp.async.bulk.tensor.2d.shared::cluster.global.tile::gather4.mbarrier::complete_tx::bytes [sh], "
                "[%rd1, {%r0,%r1,%r2,%r3,%r4}], [sh+8];"},
    /* into .shared::cta, gather4 and im2col::w need no arch- or family-specific target (CUDA 13.0's ptxas takes
     * them on sm_100 and sm_120 alike) */
    R("cp", "async.bulk.tensor.*.shared::cta.global.*.tile::gather4|im2col::w|im2col::w::128.*", 100, 86,
      "cp.async.bulk.tensor gather4/im2col::w to .shared::cta",
      "cp.async.bulk.tensor.2d.shared::cta.global.tile::gather4.mbarrier::complete_tx::bytes [sh], "
      "[%rd1, {%r0,%r1,%r2,%r3,%r4}], [sh+8];"),
    RA("cp", "*.cta_group::1|cta_group::2.*", T_10X_11X, 100, 86, "cp.async.bulk.tensor .cta_group",
       "cp.async.bulk.tensor.1d.shared::cluster.global.mbarrier::complete_tx::bytes.cta_group::1 [sh], "
       "[%rd1, {%r1}], [sh+8];"),
    R("cp", "reduce.async.bulk.*", 90, 80, "cp.reduce.async.bulk",
      "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.u32 [%rd1], [sh], 16;"),
    RA("tensormap", "replace.*", T_AF90, 90, 83, "tensormap.replace",
       "tensormap.replace.tile.global_address.global.b1024.b64 [%rd1], %rd2;"),
    R("tensormap", "cp_fenceproxy.*", 90, 83, "tensormap.cp_fenceproxy",
      "tensormap.cp_fenceproxy.global.shared::cta.tensormap::generic.release.gpu.sync.aligned [%rd1], [sh], 128;"),
    /* ---- Synchronization ---- */
    R("mbarrier", "*", 80, 70, "mbarrier", "mbarrier.init.shared.b64 [sh], %r1;"),
    R("mbarrier", "test_wait.parity.*", 80, 71, "mbarrier.test_wait.parity",
      "mbarrier.test_wait.parity.shared.b64 %p1, [sh], %r1;"),
    R("mbarrier", "try_wait.*", 90, 78, "mbarrier.try_wait", "mbarrier.try_wait.shared.b64 %p1, [sh], %rd1;"),
    {.op = "mbarrier", .mods = "arrive|arrive_drop.*", .operand = "#3", .unless = "*.noComplete.*", .sm = 90,
     .ptx = 78, .feature = "mbarrier.arrive with a count", .example = "mbarrier.arrive.shared.b64 %rd1, [sh], %r1;"},
    R("mbarrier", "*.expect_tx|complete_tx.*", 90, 80, "mbarrier.expect_tx", "mbarrier.expect_tx.shared.b64 [sh], %r1;"),
    R("mbarrier", "*.release|acquire.*", 80, 80, "mbarrier .release/.acquire",
      "mbarrier.arrive.release.cta.shared.b64 %rd1, [sh];"),
    R("mbarrier", "arrive|arrive_drop|test_wait|try_wait.*.relaxed.*", 90, 86, "mbarrier .relaxed",
      "mbarrier.arrive.relaxed.cta.shared.b64 %rd1, [sh];"),
    R("redux", "*", 80, 70, "redux", "redux.sync.add.u32 %r1, %r2, 0xffffffff;"),
    RA("redux", "*.f32", T_10X, 100, 86, "redux.sync .f32", "redux.sync.min.f32 %f1, %f2, 0xffffffff;"),
    R("elect", "*", 90, 80, "elect", "elect.sync %r1|%p1, 0xffffffff;"),
    R("griddepcontrol", "*", 90, 78, "griddepcontrol", "griddepcontrol.wait;"),
    R("clusterlaunchcontrol", "*", 100, 86, "clusterlaunchcontrol",
      "clusterlaunchcontrol.try_cancel.async.shared::cta.mbarrier::complete_tx::bytes.b128 [sh], [sh+16];"),
    RA("clusterlaunchcontrol", "*.multicast::cluster::all.*", T_AF100, 100, 86, "clusterlaunchcontrol .multicast",
       "clusterlaunchcontrol.try_cancel.async.shared::cta.mbarrier::complete_tx::bytes.multicast::cluster::all.b128 "
       "[sh], [sh+16];"),
    R("fence", "sc|acq_rel|acquire|release.*", 70, 60, "fence.sc/.acq_rel", "fence.sc.gpu;"),
    R("fence", "proxy.*", 70, 75, "fence.proxy", "fence.proxy.alias;"),
    R("membar", "proxy.*", 70, 75, "membar.proxy", "membar.proxy.alias;"),
    R("fence", "proxy.async.*", 90, 80, "fence.proxy.async", "fence.proxy.async;"),
    R("fence", "proxy.tensormap::generic.*", 90, 83, "fence.proxy.tensormap::generic",
      "fence.proxy.tensormap::generic.release.gpu;"),
    R("fence", "*.sync_restrict::shared::cluster|sync_restrict::shared::cta.*", 90, 86, "fence .sync_restrict",
      "fence.sync_restrict::shared::cluster.acquire.cluster;"),
    R("fence", "mbarrier_init.*", 90, 80, "fence.mbarrier_init", "fence.mbarrier_init.release.cluster;"),
    R("atom|red", "*.noftz.f16x2", 60, 62, "atom.add.noftz.f16x2", "atom.global.add.noftz.f16x2 %r1, [%rd1], %r2;"),
    R("atom|red", "*.noftz.f16", 70, 63, "atom.add.noftz.f16", "atom.global.add.noftz.f16 %rs1, [%rd1], %rs2;"),
    R("atom|red", "*.noftz.bf16|bf16x2", 90, 78, "atom.add.noftz.bf16", "atom.add.noftz.bf16x2 %r1, [%rd1], %r2;"),
    R("atom|red", "*.add.f64", 60, 50, "atom.add.f64", "atom.global.add.f64 %fd1, [%rd1], %fd2;"),
    R("atom", "*.cas.b16", 70, 63, "atom.cas.b16", "atom.global.cas.b16 %rs1, [%rd1], %rs2, %rs3;"),
    R("atom", "*.b128", 90, 83, "atom .b128", "{ .reg .b128 q; atom.global.exch.b128 q, [%rd1], q; }"),
    R("atom|red", "*.v2|v4|v8.*", 90, 81, "vector atom/red",
      "atom.global.v4.f32.add {%f0,%f1,%f2,%f3}, [%rd1], {%f4,%f5,%f6,%f7};"),
    R("red", "async.*", 90, 81, "red.async",
      "red.async.relaxed.cluster.shared::cluster.mbarrier::complete_tx::bytes.add.u32 [sh], %r1, [sh+8];"),
    R("nanosleep", "*", 70, 62, "nanosleep", "nanosleep.u32 %r1;"),
    R("match", "*", 70, 60, "match.sync", "match.any.sync.b32 %r1, %r2, 0xffffffff;"),
    R("activemask", "*", 30, 62, "activemask", "activemask.b32 %r1;"),
    R("shfl|vote", "sync.*", 30, 60, "shfl.sync/vote.sync", "shfl.sync.bfly.b32 %r1, %r2, 1, 31, 0xffffffff;"),
    R("bar", "warp.*", 30, 60, "bar.warp.sync", "bar.warp.sync 0xffffffff;"),
    R("barrier", "*", 30, 60, "barrier", "barrier.sync 0;"),
    R("barrier", "cluster.*", 90, 78, "barrier.cluster", "barrier.cluster.arrive;"),
    R("barrier", "cluster.*.relaxed|release|acquire.*", 90, 80, "barrier.cluster .relaxed/.release/.acquire",
      "barrier.cluster.arrive.relaxed;"),
    R("brx", "idx.*", 30, 60, "brx.idx", NULL), /* needs a .branchtargets list: no one-line example */
    R("stacksave|stackrestore|alloca", "*", 52, 73, "stacksave/stackrestore/alloca", "stacksave.u64 %rd1;"),
    /* ---- Tensor cores ---- */
    R("wmma", "*", 70, 60, "wmma",
      "wmma.load.a.sync.aligned.row.m16n16k16.f16 {%r0,%r1,%r2,%r3,%r4,%r5,%r6,%r7}, [%rd1];"),
    R("wmma", "*.aligned.*", 70, 63, "wmma .aligned",
      "wmma.store.d.sync.aligned.row.m16n16k16.f32 [%rd1], {%f0,%f1,%f2,%f3,%f4,%f5,%f6,%f7};"),
    R("wmma", "*.m32n8k16|m8n32k16.*", 70, 61, "wmma .m32n8k16/.m8n32k16",
      "wmma.load.a.sync.aligned.row.m32n8k16.f16 {%r0,%r1,%r2,%r3,%r4,%r5,%r6,%r7}, [%rd1];"),
    R("wmma", "*.s8|u8.*", 72, 63, "wmma .s8/.u8", "wmma.load.a.sync.aligned.row.m16n16k16.s8 {%r0,%r1}, [%rd1];"),
    R("wmma", "*.s4|u4|b1.*", 75, 63, "wmma .s4/.u4/.b1", "wmma.load.a.sync.aligned.row.m8n8k32.s4 {%r0}, [%rd1];"),
    R("wmma", "*.m16n16k8.*", 80, 70, "wmma .m16n16k8 (.tf32)",
      "wmma.load.a.sync.aligned.row.m16n16k8.tf32 {%r0,%r1,%r2,%r3}, [%rd1];"),
    R("wmma", "*.m8n8k4.*", 80, 70, "wmma .m8n8k4 (.f64)",
      "wmma.mma.sync.aligned.row.col.m8n8k4.f64.f64.f64.f64 {%fd0,%fd1}, {%fd2}, {%fd3}, {%fd4,%fd5};"),
    R("wmma", "*.and.*", 80, 71, "wmma .and.popc",
      "wmma.mma.and.popc.sync.aligned.row.col.m8n8k128.s32.b1.b1.s32 {%r0,%r1}, {%r2}, {%r3}, {%r4,%r5};"),
    R("mma", "*", 70, 64, "mma", "mma.sync.aligned.m8n8k4.row.col.f32.f16.f16.f32 "
                                 "{%f0,%f1,%f2,%f3,%f4,%f5,%f6,%f7}, {%r0,%r1}, {%r2,%r3}, "
                                 "{%f0,%f1,%f2,%f3,%f4,%f5,%f6,%f7};"),
    R("mma", "*.m16n8k8.*", 75, 65, ".m16n8k8", "mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 "
                                               "{%f0,%f1,%f2,%f3}, {%r0,%r1}, {%r2}, {%f0,%f1,%f2,%f3};"),
    R("mma", "*.m8n8k16|m8n8k32|m8n8k128.*", 75, 65, "integer mma",
      "mma.sync.aligned.m8n8k16.row.col.s32.s8.s8.s32 {%r0,%r1}, {%r2}, {%r3}, {%r4,%r5};"),
    R("mma", "*.xor.*", 75, 70, "mma .xor.popc",
      "mma.sync.aligned.m8n8k128.row.col.s32.b1.b1.s32.xor.popc {%r0,%r1}, {%r2}, {%r3}, {%r4,%r5};"),
    R("mma", "*.and.*", 80, 71, "mma .and.popc",
      "mma.sync.aligned.m8n8k128.row.col.s32.b1.b1.s32.and.popc {%r0,%r1}, {%r2}, {%r3}, {%r4,%r5};"),
    R("mma", "*.m16n8k8.*.bf16|tf32.*", 80, 70, ".m16n8k8 with .bf16/.tf32",
      "mma.sync.aligned.m16n8k8.row.col.f32.bf16.bf16.f32 {%f0,%f1,%f2,%f3}, {%r0,%r1}, {%r2}, {%f0,%f1,%f2,%f3};"),
    R("mma", "*.m16n8k16|m16n8k32|m16n8k64|m16n8k128|m16n8k256|m16n8k4.*", 80, 70, ".m16n8k16",
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%f0,%f1,%f2,%f3}, {%r0,%r1,%r2,%r3}, {%r4,%r5}, "
      "{%f0,%f1,%f2,%f3};"),
    R("mma", "*.m8n8k4.*.f64", 80, 70, "mma .f64",
      "mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%fd0,%fd1}, {%fd2}, {%fd3}, {%fd4,%fd5};"),
    R("mma", "*.m16n8k4|m16n8k8|m16n8k16.*.f64", 90, 78, "mma .m16n8kN .f64",
      "mma.sync.aligned.m16n8k4.row.col.f64.f64.f64.f64 {%fd0,%fd1,%fd2,%fd3}, {%fd4,%fd5}, {%fd6}, "
      "{%fd0,%fd1,%fd2,%fd3};"),
    R("mma", "*.e4m3|e5m2.*", 89, 84, "mma .e4m3/.e5m2",
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%f0,%f1,%f2,%f3}, {%r0,%r1,%r2,%r3}, {%r4,%r5}, "
      "{%f0,%f1,%f2,%f3};"),
    R("mma", "*.m16n8k16.*.e4m3|e5m2.*", 89, 87, "mma .m16n8k16 .e4m3/.e5m2",
      "mma.sync.aligned.m16n8k16.row.col.f32.e4m3.e4m3.f32 {%f0,%f1,%f2,%f3}, {%r0,%r1}, {%r4}, {%f0,%f1,%f2,%f3};"),
    R("mma", "*.f16.e4m3|e5m2.*", 89, 87, "mma .e4m3/.e5m2 with .f16 accumulators",
      "mma.sync.aligned.m16n8k32.row.col.f16.e5m2.e4m3.f16 {%r0,%r1}, {%r0,%r1,%r2,%r3}, {%r4,%r5}, {%r0,%r1};"),
    R("mma", "sp.*", 80, 71, "mma.sp", "mma.sp.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%f0,%f1,%f2,%f3}, "
                                      "{%r0,%r1}, {%r2,%r3}, {%f0,%f1,%f2,%f3}, %r4, 0x0;"),
    R("mma", "sp::ordered_metadata.*", 80, 85, "mma.sp::ordered_metadata",
      "mma.sp::ordered_metadata.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%f0,%f1,%f2,%f3}, {%r0,%r1}, "
      "{%r2,%r3}, {%f0,%f1,%f2,%f3}, %r4, 0x0;"),
    RA("mma", "*.kind::f8f6f4|kind::f8f6f4|kind::mxf4|kind::mxf4nvf4|kind::mxf8f6f4.*", T_12X, 120, 87,
       "mma .kind::*", "mma.sync.aligned.m16n8k32.row.col.kind::f8f6f4.f32.e2m1.e2m1.f32 {%f0,%f1,%f2,%f3}, "
                       "{%r0,%r1,%r2,%r3}, {%r4,%r5}, {%f0,%f1,%f2,%f3};"),
    R("ldmatrix", "*", 75, 65, "ldmatrix", "ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%r0,%r1,%r2,%r3}, [sh];"),
    RA("ldmatrix", "*.m16n16|m8n16.*", T_AF100, 100, 86, "ldmatrix .m16n16/.m8n16",
       "ldmatrix.sync.aligned.m16n16.x1.trans.shared.b8 {%r0,%r1}, [sh];"),
    R("stmatrix", "*", 90, 78, "stmatrix", "stmatrix.sync.aligned.m8n8.x1.shared.b16 [sh], {%r1};"),
    RA("stmatrix", "*.m16n8.*", T_AF100, 100, 86, "stmatrix .m16n8",
       "stmatrix.sync.aligned.m16n8.x1.trans.shared.b8 [sh], {%r1};"),
    R("movmatrix", "*", 75, 78, "movmatrix", "movmatrix.sync.aligned.m8n8.trans.b16 %r1, %r2;"),
    RA("wgmma", "*", T_90A, 90, 80, "wgmma", "wgmma.fence.sync.aligned;"),
    RA("wgmma", "mma_async.sp.*", T_90A, 90, 82, "wgmma.mma_async.sp",
       "wgmma.mma_async.sp.sync.aligned.m64n8k32.f32.f16.f16 {%f0,%f1,%f2,%f3}, %rd1, %rd2, %r1, 0, 1, 1, 1, 0, 0;"),
    RA("setmaxnreg", "*", T_AF90, 90, 80, "setmaxnreg", "setmaxnreg.inc.sync.aligned.u32 240;"),
    RA("tcgen05", "*", T_10X_11X, 100, 86, "tcgen05", "tcgen05.fence::before_thread_sync;"),
    RA("tcgen05", "shift.*", T_A10X_11X, 100, 86, "tcgen05.shift", "tcgen05.shift.cta_group::1.down [%r1];"),
    RA("tcgen05", "ld.red.*", T_LDRED, 103, 88, "tcgen05.ld.red",
       "tcgen05.ld.red.sync.aligned.32x32b.x2.min.f32 {%f1,%f2}, %f3, [%r2];"),
    RA("tcgen05", "mma.*.kind::i8.*", T_A100_110, 100, 86, "tcgen05.mma .kind::i8",
       "tcgen05.mma.cta_group::1.kind::i8 [%r1], %rd1, %rd2, %r2, %p1;"),
    /* block scaling: with an explicit .scale_vec::NX arch-specific only, PTX ISA 8.6 (.kind::mxf4nvf4: 8.7);
     * without it (the scale vector from .block16/.block32 or the kind's default) family-specific, 8.8 */
    {.op = "tcgen05", .mods = "mma.*.block_scale.*", .unless = "*.scale_vec::1X|scale_vec::2X|scale_vec::4X.*",
     .sm = 100, .ptx = 88, .arch = true, .targets = T_10X_11X, .feature = "tcgen05.mma .block_scale without .scale_vec",
     .example = "tcgen05.mma.cta_group::1.kind::mxf8f6f4.block_scale.block32 [%r1], %rd1, %rd2, %r2, [%r3], [%r4], "
                "%p1;"},
    RA("tcgen05", "mma.*.scale_vec::1X|scale_vec::2X|scale_vec::4X.*", T_A10X_11X, 100, 86, "tcgen05.mma .scale_vec",
       "tcgen05.mma.cta_group::1.kind::mxf4.block_scale.scale_vec::2X [%r1], %rd1, %rd2, %r2, [%r3], [%r4], %p1;"),
    RA("tcgen05", "mma.*.kind::mxf4nvf4.*.scale_vec::2X|scale_vec::4X.*", T_A10X_11X, 100, 87,
       "tcgen05.mma .kind::mxf4nvf4 .scale_vec",
       "tcgen05.mma.cta_group::1.kind::mxf4nvf4.block_scale.scale_vec::4X [%r1], %rd1, %rd2, %r2, [%r3], [%r4], %p1;"),
    RA("tcgen05", "mma.sp.*.kind::mxf4|kind::mxf4nvf4.*", T_A10X_11X, 100, 86, "tcgen05.mma.sp .kind::mxf4/mxf4nvf4",
       "tcgen05.mma.sp.cta_group::1.kind::mxf4.block_scale.scale_vec::2X [%r1], %rd1, %rd2, [%r5], %r2, [%r3], [%r4], "
       "%p1;"),
    /* the scale_input_d immediate after enable_input_d (.kind::f16/.tf32): sm_100 and sm_103 only */
    {.op = "tcgen05", .mods = "mma.*.kind::f16|kind::tf32.*", .operand = "=%p,#", .sm = 100, .ptx = 86, .arch = true,
     .targets = T_10X, .feature = "tcgen05.mma scale_input_d",
     .example = "tcgen05.mma.cta_group::1.kind::f16 [%r1], %rd1, %rd2, %r2, %p1, 1;"},
    /* ---- Special registers ---- */
    RO("*", "*", "%cluster*", 90, 78, "cluster special registers", "mov.u32 %r1, %cluster_ctarank;"),
    RO("*", "*", "%is_explicit_cluster", 90, 78, "%is_explicit_cluster", "mov.pred %p1, %is_explicit_cluster;"),
    RO("*", "*", "%nclusterid*", 90, 78, "%nclusterid", "mov.u32 %r1, %nclusterid.x;"),
    RO("*", "*", "%aggr_smem_size", 90, 81, "%aggr_smem_size", "mov.u32 %r1, %aggr_smem_size;"),
    RO("*", "*", "%reserved_smem_offset*", 80, 76, "%reserved_smem_offset_*",
       "mov.u32 %r1, %reserved_smem_offset_begin;"),
    RO("*", "*", "%current_graph_exec", 50, 80, "%current_graph_exec", "mov.u64 %rd1, %current_graph_exec;"),
    RO("*", "*", "%dynamic_smem_size", 20, 41, "%dynamic_smem_size", "mov.u32 %r1, %dynamic_smem_size;"),
    RO("*", "*", "%total_smem_size", 20, 41, "%total_smem_size", "mov.u32 %r1, %total_smem_size;"),
    RO("*", "*", "%clock_hi", 20, 50, "%clock_hi", "mov.u32 %r1, %clock_hi;"),
    /* ---- Directives (matched anywhere in a directive statement) ---- */
    D(".pragma", "\"used_bytes_mask*", 0, 83, "used_bytes_mask", ".pragma \"used_bytes_mask 0xf\";"),
    D(".pragma", "\"enable_smem_spilling*", 0, 87, "enable_smem_spilling", ".pragma \"enable_smem_spilling\";"),
    D(".pragma", "\"frequency*", 0, 90, "the frequency pragma", ".pragma \"frequency 4\";"),
    D(".b128", NULL, 70, 83, ".b128 declarations", "!.global .align 16 .b128 gq;"),
    D(".alias", NULL, 30, 63, ".alias", "!.visible .func f1() { ret; } .visible .func f2(); .alias f2, f1;"),
    D(".noreturn", NULL, 30, 64, ".noreturn", "!.visible .func f() .noreturn { trap; }"),
    D(".abi_preserve|.abi_preserve_control", NULL, 80, 90, ".abi_preserve",
      "!.visible .func f() .abi_preserve 8 { ret; }"),
    D(".common", NULL, 0, 50, ".common", "!.common .global .align 4 .b32 cg;"),
    D(".loc", "inlined_at", 0, 70, "line information of inlined functions", NULL),
    D(".reqnctapercluster", NULL, 90, 78, ".reqnctapercluster", "!.visible .entry f() .reqnctapercluster 2, 1, 1 { ret; }"),
    D(".explicitcluster", NULL, 90, 78, ".explicitcluster", "!.visible .entry f() .explicitcluster { ret; }"),
    D(".maxclusterrank", NULL, 90, 78, ".maxclusterrank", "!.visible .entry f() .maxclusterrank 8 { ret; }"),
    D(".blocksareclusters", NULL, 90, 90, ".blocksareclusters",
      "!.visible .entry f() .reqntid 32 .reqnctapercluster 2 .blocksareclusters { ret; }"),
    /* A label inside a .section block (matched by lint itself, not by opcode). */
    {.op = ":section-label", .ptx = 70, .feature = "labels in .section", .example = NULL},
};

/* Types that exist only as instruction types: data of these types lives in .b16/.b32 registers. */
static const char *const decl_types[] = {".bf16", ".bf16x2", ".tf32", ".e4m3", ".e5m2", ".e4m3x2", ".e5m2x2",
                                         ".e2m1x2", ".e2m3x2", ".e3m2x2", ".ue8m0x2", NULL};

const gen_lint_rule *gen_lint_rules(size_t *count) {
    *count = sizeof rules / sizeof rules[0];
    return rules;
}

const gen_lint_target *gen_lint_targets(size_t *count) { return kiln_ptx_targets(count); }

const char *const *gen_lint_decl_types(void) { return decl_types; }

const char *gen_lint_sm_name(int sm, bool arch, char *buf) {
    snprintf(buf, 16, "sm_%d%s", sm, arch ? "a" : "");
    return buf;
}
