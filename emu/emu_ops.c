/* emu/emu_ops.c - the NVVM intrinsics the emulator implements, as a table of handlers. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "emu.h"

#define POISON32 0xffffffffu /* what a lane outside the mask contributes: NaN as f32 */

/* ---- special registers ---- */

enum { SR_TID, SR_NTID = 3, SR_CTAID = 6, SR_NCTAID = 9, SR_LANEID = 12, SR_WARPSIZE, SR_WARPID, SR_NWARPID,
       SR_LM_EQ, SR_LM_LE, SR_LM_LT, SR_LM_GE, SR_LM_GT, SR_SMID, SR_NSMID, SR_GRIDID };

static uint32_t lanemask(unsigned lane, int which) {
    uint32_t bit = 1u << lane, below = bit - 1;
    switch (which) {
    case SR_LM_EQ: return bit;
    case SR_LM_LE: return below | bit;
    case SR_LM_LT: return below;
    case SR_LM_GE: return ~below;
    default: return ~(below | bit);
    }
}

static void h_sreg(emu_call *c) {
    unsigned ntid[3], ctaid[3], nctaid[3];
    emu_block_dims(c->blk, ntid, ctaid, nctaid);
    int r = c->site->op->arg;
    uint32_t v = 0;
    if (r < SR_NTID) v = c->t->tid[r - SR_TID];
    else if (r < SR_CTAID) v = ntid[r - SR_NTID];
    else if (r < SR_NCTAID) v = ctaid[r - SR_CTAID];
    else if (r < SR_LANEID) v = nctaid[r - SR_NCTAID];
    else if (r == SR_LANEID) v = c->t->lane;
    else if (r == SR_WARPSIZE) v = EMU_WARP;
    else if (r == SR_WARPID) v = c->t->warp;
    else if (r == SR_NWARPID) v = (emu_block_threads(c->blk) + EMU_WARP - 1) / EMU_WARP;
    else if (r >= SR_LM_EQ && r <= SR_LM_GT) v = lanemask(c->t->lane, r);
    else if (r == SR_NSMID) v = 1;
    emu_ret_u32(c, v);
}

/* clock/clock64 count the thread's own reads, so runs stay deterministic. */
static void h_clock(emu_call *c) {
    uint64_t v = ++c->t->clock;
    if (c->site->op->arg == 64) memcpy(c->ret, &v, sizeof v);
    else emu_ret_u32(c, (uint32_t)v);
}

/* ---- barriers ---- */

/* BAR_POPC..BAR_OR: barrier0.{popc,and,or}(pred); RED_*: LLVM 21+'s barrier.cta.red.{popc,and,or}.aligned
 * .all(id, pred) and .count(id, count, pred) */
enum { BAR_ALL, BAR_ID, BAR_ID_COUNT, BAR_POPC, BAR_AND, BAR_OR, BAR_ARRIVE, RED_ALL = 8, RED_COUNT = 16 };

static void h_barrier(emu_call *c) {
    int kind = c->site->op->arg;
    switch (kind) {
    case BAR_ALL: emu_barrier(c, 0, 0, 0, 0); break;
    case BAR_ID: emu_barrier(c, emu_arg_u32(c, 0), 0, 0, 0); break;
    case BAR_ID_COUNT: emu_barrier(c, emu_arg_u32(c, 0), emu_arg_u32(c, 1), 0, 0); break;
    case BAR_ARRIVE: emu_barrier_op(c, emu_arg_u32(c, 0), emu_arg_u32(c, 1), 0, 0, true); break;
    default:
        if (kind & RED_COUNT)
            emu_ret_u32(c, emu_barrier(c, emu_arg_u32(c, 0), emu_arg_u32(c, 1), (kind & 7) - BAR_POPC + 1, emu_arg_u32(c, 2)));
        else if (kind & RED_ALL)
            emu_ret_u32(c, emu_barrier(c, emu_arg_u32(c, 0), 0, (kind & 7) - BAR_POPC + 1, emu_arg_u32(c, 1)));
        else
            emu_ret_u32(c, emu_barrier(c, 0, 0, kind - BAR_POPC + 1, emu_arg_u32(c, 0)));
        break;
    }
}

static void h_nop(emu_call *c) { (void)c; }

static void h_trap(emu_call *c) { emu_fault(c->blk, "%s: the kernel trapped", c->site->where); }

/* ---- warp collectives ---- */

enum { SH_UP, SH_DOWN, SH_BFLY, SH_IDX, SH_PRED = 4 };

/* shfl.sync as the PTX ISA defines it: c packs the clamp (bits 0-4) and the segment mask
 * (bits 8-12); a source lane past the clamp gives the lane its own value. */
static bool shfl_compute(emu_block *blk, const emu_op *op, emu_thread **lanes, uint32_t mask) {
    (void)blk;
    for (unsigned l = 0; l < EMU_WARP; l++) {
        if (!lanes[l]) continue;
        uint32_t bval = emu_slot_u32(lanes[l]->in, 2) & 31, c = emu_slot_u32(lanes[l]->in, 3);
        uint32_t seg = (c >> 8) & 31, clamp = c & 31;
        uint32_t max_lane = (l & seg) | (clamp & ~seg), min_lane = l & seg;
        int j;
        bool in_range;
        switch (op->arg & 3) {
        case SH_UP: j = (int)l - (int)bval, in_range = j >= (int)max_lane; break;
        case SH_DOWN: j = (int)(l + bval), in_range = j <= (int)max_lane; break;
        case SH_BFLY: j = (int)(l ^ bval), in_range = j <= (int)max_lane; break;
        default: j = (int)(min_lane | (bval & ~seg)), in_range = j <= (int)max_lane; break;
        }
        if (!in_range) j = (int)l;
        uint32_t v = (mask >> j & 1) ? emu_slot_u32(lanes[j]->in, 1) : POISON32;
        memcpy(lanes[l]->out, &v, sizeof v);
        lanes[l]->out[4] = in_range;
    }
    return true;
}

static void h_shfl(emu_call *c) { emu_warp_meet(c, emu_arg_u32(c, 0), shfl_compute); }

enum { VOTE_ALL, VOTE_ANY, VOTE_UNI, VOTE_BALLOT };

static bool vote_compute(emu_block *blk, const emu_op *op, emu_thread **lanes, uint32_t mask) {
    (void)blk;
    uint32_t ballot = 0;
    for (unsigned l = 0; l < EMU_WARP; l++)
        if (lanes[l] && (lanes[l]->in[EMU_SLOT] & 1)) ballot |= 1u << l;
    uint32_t v = op->arg == VOTE_ALL ? ballot == mask
               : op->arg == VOTE_ANY ? ballot != 0
               : op->arg == VOTE_UNI ? (ballot == 0 || ballot == mask)
               : ballot;
    for (unsigned l = 0; l < EMU_WARP; l++)
        if (lanes[l]) {
            if (op->arg == VOTE_BALLOT) memcpy(lanes[l]->out, &v, sizeof v);
            else lanes[l]->out[0] = (unsigned char)v;
        }
    return true;
}

static void h_vote(emu_call *c) { emu_warp_meet(c, emu_arg_u32(c, 0), vote_compute); }

static bool sync_compute(emu_block *blk, const emu_op *op, emu_thread **lanes, uint32_t mask) {
    (void)blk, (void)op, (void)lanes, (void)mask;
    return true;
}

static void h_warp_sync(emu_call *c) { emu_warp_meet(c, emu_arg_u32(c, 0), sync_compute); }

/* ---- conversions: round to nearest even, NaN stays NaN ---- */

enum { CV_BF16, CV_BF16_RELU, CV_BF16X2, CV_BF16X2_RELU, CV_F16X2, CV_F16X2_RELU, CV_F16 };

static float relu(float f) { return isnan(f) ? f : f < 0 ? 0.0f : f; }

static void h_cvt(emu_call *c) {
    int k = c->site->op->arg;
    bool r = k == CV_BF16_RELU || k == CV_BF16X2_RELU || k == CV_F16X2_RELU;
    bool bf = k <= CV_BF16X2_RELU;
    float a = emu_arg_f32(c, 0);
    if (r) a = relu(a);
    uint16_t hi = bf ? emu_f32_to_bf16(a) : emu_f32_to_f16(a);
    if (k == CV_BF16 || k == CV_BF16_RELU || k == CV_F16) {
        memcpy(c->ret, &hi, sizeof hi);
        return;
    }
    /* cvt.rn.{b,}f16x2.f32 d, a, b: a lands in the upper half, b in the lower */
    float b = emu_arg_f32(c, 1);
    if (r) b = relu(b);
    uint16_t pair[2] = {bf ? emu_f32_to_bf16(b) : emu_f32_to_f16(b), hi};
    memcpy(c->ret, pair, sizeof pair);
}

/* ---- f32 math; .approx results are computed exactly (within the ISA's error bounds) ---- */

enum { M_FTZ = 16 };
enum { M_RSQRT, M_SQRT, M_EX2, M_LG2, M_RCP, M_SIN, M_COS, M_DIV, M_FMA, M_FMAX, M_FMIN };

static float ftz(float f) { return fpclassify(f) == FP_SUBNORMAL ? copysignf(0.0f, f) : f; }

static void h_math(emu_call *c) {
    int k = c->site->op->arg & (M_FTZ - 1);
    bool z = c->site->op->arg & M_FTZ;
    float a = emu_arg_f32(c, 0), b = c->site->nargs > 1 ? emu_arg_f32(c, 1) : 0, d = 0;
    if (z) a = ftz(a), b = ftz(b);
    switch (k) {
    case M_RSQRT: d = (float)(1.0 / sqrt((double)a)); break;
    case M_SQRT: d = sqrtf(a); break;
    case M_EX2: d = (float)exp2((double)a); break;
    case M_LG2: d = (float)log2((double)a); break;
    case M_RCP: d = 1.0f / a; break;
    case M_SIN: d = (float)sin((double)a); break;
    case M_COS: d = (float)cos((double)a); break;
    case M_DIV: d = a / b; break;
    case M_FMA: d = fmaf(a, b, z ? ftz(emu_arg_f32(c, 2)) : emu_arg_f32(c, 2)); break;
    case M_FMAX: d = fmaxf(a, b); break;
    default: d = fminf(a, b); break;
    }
    emu_ret_f32(c, z ? ftz(d) : d);
}

/* ---- the table ---- */

#define SREG(n, a) {"llvm.nvvm.read.ptx.sreg." n, "i32 ()", h_sreg, a}
#define SREG3(n, a) SREG(n ".x", a), SREG(n ".y", a + 1), SREG(n ".z", a + 2)
#define SHFL(m, a)                                                                                   \
    {"llvm.nvvm.shfl.sync." m ".i32", "i32 (i32, i32, i32, i32)", h_shfl, a},                      \
    {"llvm.nvvm.shfl.sync." m ".f32", "float (i32, float, i32, i32)", h_shfl, a},                   \
    {"llvm.nvvm.shfl.sync." m ".i32p", "{ i32, i1 } (i32, i32, i32, i32)", h_shfl, a | SH_PRED},    \
    {"llvm.nvvm.shfl.sync." m ".f32p", "{ float, i1 } (i32, float, i32, i32)", h_shfl, a | SH_PRED}
#define MATH1(n, a) {"llvm.nvvm." n ".f", "float (float)", h_math, a}, \
                    {"llvm.nvvm." n ".ftz.f", "float (float)", h_math, (a) | M_FTZ}
#define MATH2(n, a) {"llvm.nvvm." n ".f", "float (float, float)", h_math, a}, \
                    {"llvm.nvvm." n ".ftz.f", "float (float, float)", h_math, (a) | M_FTZ}

static const emu_op ops[] = {
    SREG3("tid", SR_TID), SREG3("ntid", SR_NTID), SREG3("ctaid", SR_CTAID), SREG3("nctaid", SR_NCTAID),
    SREG("laneid", SR_LANEID), SREG("warpsize", SR_WARPSIZE), SREG("warpid", SR_WARPID),
    SREG("nwarpid", SR_NWARPID), SREG("lanemask.eq", SR_LM_EQ), SREG("lanemask.le", SR_LM_LE),
    SREG("lanemask.lt", SR_LM_LT), SREG("lanemask.ge", SR_LM_GE), SREG("lanemask.gt", SR_LM_GT),
    SREG("smid", SR_SMID), SREG("nsmid", SR_NSMID), SREG("gridid", SR_GRIDID),
    {"llvm.nvvm.read.ptx.sreg.clock", "i32 ()", h_clock, 32},
    {"llvm.nvvm.read.ptx.sreg.clock64", "i64 ()", h_clock, 64},

    {"llvm.nvvm.barrier0", "void ()", h_barrier, BAR_ALL},
    {"llvm.nvvm.barrier.sync", "void (i32)", h_barrier, BAR_ID},
    {"llvm.nvvm.bar.sync", "void (i32)", h_barrier, BAR_ID},
    {"llvm.nvvm.barrier.sync.cnt", "void (i32, i32)", h_barrier, BAR_ID_COUNT},
    {"llvm.nvvm.barrier0.popc", "i32 (i32)", h_barrier, BAR_POPC},
    {"llvm.nvvm.barrier0.and", "i32 (i32)", h_barrier, BAR_AND},
    {"llvm.nvvm.barrier0.or", "i32 (i32)", h_barrier, BAR_OR},
    /* LLVM 20+ names (Triton 3.x, clang 20+): barrier.cta.sync[.aligned].{all,count} */
    {"llvm.nvvm.barrier.cta.sync.aligned.all", "void (i32)", h_barrier, BAR_ID},
    {"llvm.nvvm.barrier.cta.sync.all", "void (i32)", h_barrier, BAR_ID},
    {"llvm.nvvm.barrier.cta.sync.aligned.count", "void (i32, i32)", h_barrier, BAR_ID_COUNT},
    {"llvm.nvvm.barrier.cta.sync.count", "void (i32, i32)", h_barrier, BAR_ID_COUNT},
    /* named barriers' arrive (bar.arrive a, b: signal without waiting) */
    {"llvm.nvvm.barrier.cta.arrive.aligned.count", "void (i32, i32)", h_barrier, BAR_ARRIVE},
    {"llvm.nvvm.barrier.cta.arrive.count", "void (i32, i32)", h_barrier, BAR_ARRIVE},
    /* LLVM 21+: barrier0.{popc,and,or} became barrier.cta.red.*; the IR reader upgrades the old names */
    {"llvm.nvvm.barrier.cta.red.popc.aligned.all", "i32 (i32, i1)", h_barrier, BAR_POPC | RED_ALL},
    {"llvm.nvvm.barrier.cta.red.and.aligned.all", "i1 (i32, i1)", h_barrier, BAR_AND | RED_ALL},
    {"llvm.nvvm.barrier.cta.red.or.aligned.all", "i1 (i32, i1)", h_barrier, BAR_OR | RED_ALL},
    {"llvm.nvvm.barrier.cta.red.popc.aligned.count", "i32 (i32, i32, i1)", h_barrier, BAR_POPC | RED_COUNT},
    {"llvm.nvvm.barrier.cta.red.and.aligned.count", "i1 (i32, i32, i1)", h_barrier, BAR_AND | RED_COUNT},
    {"llvm.nvvm.barrier.cta.red.or.aligned.count", "i1 (i32, i32, i1)", h_barrier, BAR_OR | RED_COUNT},
    {"llvm.nvvm.bar.warp.sync", "void (i32)", h_warp_sync, 0},
    {"llvm.nvvm.membar.cta", "void ()", h_nop, 0},
    {"llvm.nvvm.membar.gl", "void ()", h_nop, 0},
    {"llvm.nvvm.membar.sys", "void ()", h_nop, 0},
    {"llvm.trap", "void ()", h_trap, 0},

    SHFL("bfly", SH_BFLY), SHFL("down", SH_DOWN), SHFL("up", SH_UP), SHFL("idx", SH_IDX),
    {"llvm.nvvm.vote.all.sync", "i1 (i32, i1)", h_vote, VOTE_ALL},
    {"llvm.nvvm.vote.any.sync", "i1 (i32, i1)", h_vote, VOTE_ANY},
    {"llvm.nvvm.vote.uni.sync", "i1 (i32, i1)", h_vote, VOTE_UNI},
    {"llvm.nvvm.vote.ballot.sync", "i32 (i32, i1)", h_vote, VOTE_BALLOT},

    {"llvm.nvvm.f2bf16.rn", "bfloat (float)", h_cvt, CV_BF16},
    {"llvm.nvvm.f2bf16.rn.relu", "bfloat (float)", h_cvt, CV_BF16_RELU},
    {"llvm.nvvm.ff2bf16x2.rn", "<2 x bfloat> (float, float)", h_cvt, CV_BF16X2},
    {"llvm.nvvm.ff2bf16x2.rn.relu", "<2 x bfloat> (float, float)", h_cvt, CV_BF16X2_RELU},
    {"llvm.nvvm.ff2f16x2.rn", "<2 x half> (float, float)", h_cvt, CV_F16X2},
    {"llvm.nvvm.ff2f16x2.rn.relu", "<2 x half> (float, float)", h_cvt, CV_F16X2_RELU},
    {"llvm.nvvm.f2h.rn", "i16 (float)", h_cvt, CV_F16},

    MATH1("rsqrt.approx", M_RSQRT), MATH1("sqrt.approx", M_SQRT), MATH1("ex2.approx", M_EX2),
    MATH1("lg2.approx", M_LG2), MATH1("sin.approx", M_SIN), MATH1("cos.approx", M_COS),
    MATH2("div.approx", M_DIV), MATH2("fmax", M_FMAX), MATH2("fmin", M_FMIN),
    /* div.full: the full-range approximate division (2 ulp on hardware; exact here) */
    {"llvm.nvvm.div.full", "float (float, float)", h_math, M_DIV},
    {"llvm.nvvm.div.full.ftz", "float (float, float)", h_math, M_DIV | M_FTZ},
    /* LLVM 20+ spells the f32 ex2 with the type suffix */
    {"llvm.nvvm.ex2.approx.f32", "float (float)", h_math, M_EX2},
    {"llvm.nvvm.ex2.approx.ftz.f32", "float (float)", h_math, M_EX2 | M_FTZ},
    {"llvm.nvvm.sqrt.rn.ftz.f", "float (float)", h_math, M_SQRT | M_FTZ},
    {"llvm.nvvm.rcp.rn.ftz.f", "float (float)", h_math, M_RCP | M_FTZ},
    {"llvm.nvvm.div.rn.ftz.f", "float (float, float)", h_math, M_DIV | M_FTZ},
    {"llvm.nvvm.sqrt.f", "float (float)", h_math, M_SQRT},
    {"llvm.nvvm.sqrt.rn.f", "float (float)", h_math, M_SQRT},
    {"llvm.nvvm.rcp.rn.f", "float (float)", h_math, M_RCP},
    {"llvm.nvvm.div.rn.f", "float (float, float)", h_math, M_DIV},
    {"llvm.nvvm.fma.rn.f", "float (float, float, float)", h_math, M_FMA},
};

const emu_op *emu_op_find(const char *name) {
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
        if (!strcmp(ops[i].name, name)) return &ops[i];
    const emu_op *op = emu_mma_op_find(name); /* emu_warp_mma.c: ldmatrix, mma, cp.async */
    return op ? op : emu_hopper_op_find(name); /* emu_hopper.c: mbarrier, setmaxnreg, wgmma sync */
}

void emu_ops_list(char *buf, size_t size) {
    size_t len = 0;
    buf[0] = 0;
    for (size_t i = 0; i < sizeof ops / sizeof ops[0] && len < size; i++)
        len += (size_t)snprintf(buf + len, size - len, "%s%s", i ? ", " : "", ops[i].name);
}
