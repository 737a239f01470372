/* gen/gen_control.c - control flow (if, for, exit), barriers, warp shuffles and reductions. */
#include <string.h>

#include <lauxlib.h>

#include "gen.h"

/* Calls the Lua function at idx with nargs values already pushed after it. */
static void call_body(lua_State *L, gen_builder *gb, int idx, int nargs) {
    lua_pushvalue(L, idx);
    if (nargs) lua_insert(L, -1 - nargs);
    gb->depth++;
    lua_call(L, nargs, 0);
    gb->depth--;
}

/* b:if_(pred, then_fn [, else_fn]) */
static int b_if(lua_State *L) {
    gen_builder *gb = gen_check_builder(L, 1);
    gen_value p = gen_arg(L, 2, -1);
    if (p.kind != GEN_PRED) return luaL_error(L, "b:if_ needs a predicate, got %s", gen_kind_name(p.kind));
    luaL_checktype(L, 3, LUA_TFUNCTION);
    int has_else = lua_isfunction(L, 4);
    LLVMBasicBlockRef then = LLVMAppendBasicBlockInContext(gb->ctx, gb->fn, "if.then");
    LLVMBasicBlockRef els = has_else ? LLVMAppendBasicBlockInContext(gb->ctx, gb->fn, "if.else") : NULL;
    LLVMBasicBlockRef join = LLVMAppendBasicBlockInContext(gb->ctx, gb->fn, "if.join");
    LLVMBuildCondBr(gb->b, p.v, then, has_else ? els : join);
    LLVMPositionBuilderAtEnd(gb->b, then);
    call_body(L, gb, 3, 0);
    LLVMBuildBr(gb->b, join);
    if (has_else) {
        LLVMPositionBuilderAtEnd(gb->b, els);
        call_body(L, gb, 4, 0);
        LLVMBuildBr(gb->b, join);
    }
    LLVMPositionBuilderAtEnd(gb->b, join);
    return 0;
}

/* b:for_(lo, hi, step, fn(i)): for (i = lo; i < hi; i += step), i32, step > 0 at run time. */
static int b_for(lua_State *L) {
    gen_builder *gb = gen_check_builder(L, 1);
    gen_value lo = gen_arg(L, 2, GEN_I32), hi = gen_arg(L, 3, GEN_I32), step = gen_arg(L, 4, GEN_I32);
    if (lo.kind != GEN_I32 || hi.kind != GEN_I32 || step.kind != GEN_I32)
        return luaL_error(L, "b:for_ bounds and step must be i32");
    luaL_checktype(L, 5, LUA_TFUNCTION);
    LLVMBasicBlockRef pre = LLVMGetInsertBlock(gb->b);
    LLVMBasicBlockRef head = LLVMAppendBasicBlockInContext(gb->ctx, gb->fn, "for.head");
    LLVMBasicBlockRef body = LLVMAppendBasicBlockInContext(gb->ctx, gb->fn, "for.body");
    LLVMBasicBlockRef done = LLVMAppendBasicBlockInContext(gb->ctx, gb->fn, "for.done");
    LLVMBuildBr(gb->b, head);
    LLVMPositionBuilderAtEnd(gb->b, head);
    LLVMValueRef i = LLVMBuildPhi(gb->b, gb->i32, "i");
    LLVMBuildCondBr(gb->b, LLVMBuildICmp(gb->b, LLVMIntSLT, i, hi.v, ""), body, done);
    LLVMPositionBuilderAtEnd(gb->b, body);
    gen_push_value(L, i, GEN_I32, 0, 0);
    call_body(L, gb, 5, 1);
    LLVMValueRef next = LLVMBuildNSWAdd(gb->b, i, step.v, "");
    LLVMBasicBlockRef latch = LLVMGetInsertBlock(gb->b);
    LLVMBuildBr(gb->b, head);
    LLVMValueRef in[2] = {lo.v, next};
    LLVMBasicBlockRef from[2] = {pre, latch};
    LLVMAddIncoming(i, in, from, 2);
    LLVMPositionBuilderAtEnd(gb->b, done);
    return 0;
}

/* b:exit_if(pred): threads for which pred holds leave the kernel. */
static int b_exit_if(lua_State *L) {
    gen_builder *gb = gen_check_builder(L, 1);
    gen_value p = gen_arg(L, 2, -1);
    if (p.kind != GEN_PRED) return luaL_error(L, "b:exit_if needs a predicate");
    LLVMBasicBlockRef cont = LLVMAppendBasicBlockInContext(gb->ctx, gb->fn, "cont");
    LLVMBuildCondBr(gb->b, p.v, gb->exit_bb, cont);
    LLVMPositionBuilderAtEnd(gb->b, cont);
    return 0;
}

/* bar.sync 0 (barrier.sync.aligned 0): every thread of the block, converged. */
static void barrier(gen_builder *gb) {
    LLVMValueRef id = LLVMConstInt(gb->i32, 0, 0);
    gen_intrinsic(gb, "llvm.nvvm.barrier.cta.sync.aligned.all", NULL, 0, &id, 1);
}

static int b_barrier(lua_State *L) {
    barrier(gen_check_builder(L, 1));
    return 0;
}

/* b:bar_sync(id, count) / b:bar_arrive(id, count): named barrier id (0..15, a number or an i32 value) taken by
 * count threads (a multiple of 32 up to 1024; arrive needs one, sync without one takes the whole block). The
 * warp is the unit: every lane of a warp executes it together (barrier.cta.{sync,arrive}.aligned). sync waits
 * until count threads' warps arrived; arrive signals and goes on (FA3's ping-pong: one warpgroup syncs on the
 * barrier the other arrives at). */
static int named_barrier(lua_State *L, bool arrive) {
    gen_builder *gb = gen_check_builder(L, 1);
    const char *what = arrive ? "b:bar_arrive" : "b:bar_sync";
    if (lua_isinteger(L, 2) && (lua_tointeger(L, 2) < 0 || lua_tointeger(L, 2) > 15))
        return luaL_error(L, "%s: barrier id %d out of range; valid ids 0..15", what, (int)lua_tointeger(L, 2));
    gen_value id = gen_arg(L, 2, GEN_I32);
    if (id.kind != GEN_I32) return luaL_error(L, "%s: the barrier id must be an i32 value or a number 0..15", what);
    if (lua_isnoneornil(L, 3)) {
        if (arrive) return luaL_error(L, "b:bar_arrive needs a thread count (a multiple of 32, 32..1024)");
        gen_intrinsic(gb, "llvm.nvvm.barrier.cta.sync.aligned.all", NULL, 0, &id.v, 1);
        return 0;
    }
    if (!lua_isinteger(L, 3)) return luaL_error(L, "%s: the thread count must be a number (a multiple of 32, 32..1024)", what);
    lua_Integer n = lua_tointeger(L, 3);
    if (n < 32 || n > 1024 || n % 32)
        return luaL_error(L, "%s: thread count %d; valid: a multiple of 32 (the warp), 32..1024", what, (int)n);
    LLVMValueRef args[2] = {id.v, LLVMConstInt(gb->i32, (unsigned long long)n, 0)};
    gen_intrinsic(gb, arrive ? "llvm.nvvm.barrier.cta.arrive.aligned.count" : "llvm.nvvm.barrier.cta.sync.aligned.count",
                  NULL, 0, args, 2);
    return 0;
}
static int b_bar_sync(lua_State *L) { return named_barrier(L, false); }
static int b_bar_arrive(lua_State *L) { return named_barrier(L, true); }

/* One shuffle of a 32-bit value over the full warp; mode "bfly", "idx", "down" or "up". */
static LLVMValueRef shuffle(gen_builder *gb, const char *mode, gen_value v, LLVMValueRef lane, int width) {
    char name[48];
    int is_f = v.kind == GEN_F32;
    snprintf(name, sizeof name, "llvm.nvvm.shfl.sync.%s.%s", mode, is_f ? "f32" : "i32");
    /* c packs the clamp (bits 0-4) and the segment mask (bits 8-12) of shfl.sync. */
    int clamp = !strcmp(mode, "up") ? 0 : 0x1f;
    int c = ((32 - width) << 8) | clamp;
    LLVMValueRef args[4] = {LLVMConstInt(gb->i32, 0xffffffffu, 0), v.v, lane, LLVMConstInt(gb->i32, (unsigned)c, 0)};
    return gen_intrinsic(gb, name, NULL, 0, args, 4);
}

static int check_width(lua_State *L, int idx) {
    lua_Integer w = luaL_optinteger(L, idx, 32);
    if (w < 1 || w > 32 || (w & (w - 1))) luaL_error(L, "width must be a power of two 1..32");
    return (int)w;
}

/* b:shfl(mode, v, lane [, width]) for f32/i32 values. */
static int b_shfl(lua_State *L) {
    gen_builder *gb = gen_check_builder(L, 1);
    const char *mode = luaL_checkstring(L, 2);
    if (strcmp(mode, "bfly") && strcmp(mode, "idx") && strcmp(mode, "down") && strcmp(mode, "up"))
        return luaL_error(L, "bad shuffle mode '%s'; valid: bfly, idx, down, up", mode);
    gen_value v = gen_arg(L, 3, -1), lane = gen_arg(L, 4, GEN_I32);
    if (v.kind != GEN_F32 && v.kind != GEN_I32) return luaL_error(L, "shuffles move f32 or i32 values");
    if (lane.kind != GEN_I32) return luaL_error(L, "lane must be i32");
    gen_push_value(L, shuffle(gb, mode, v, lane.v, check_width(L, 5)), v.kind, 0, 0);
    return 1;
}

/* Butterfly all-reduce inside groups of `width` lanes; every lane gets the result. */
static LLVMValueRef warp_reduce(gen_builder *gb, gen_value v, int width, int is_max) {
    for (int off = width / 2; off >= 1; off /= 2) {
        LLVMValueRef o = shuffle(gb, "bfly", v, LLVMConstInt(gb->i32, (unsigned)off, 0), 32);
        if (is_max) {
            LLVMValueRef args[2] = {v.v, o};
            LLVMTypeRef t = gb->f32;
            v.v = gen_intrinsic(gb, "llvm.maxnum", &t, 1, args, 2);
        } else {
            v.v = LLVMBuildFAdd(gb->b, v.v, o, "");
        }
    }
    return v.v;
}

static int warp_op(lua_State *L, int is_max) {
    gen_builder *gb = gen_check_builder(L, 1);
    gen_value v = gen_arg(L, 2, GEN_F32);
    if (v.kind != GEN_F32) return luaL_error(L, "warp reductions take f32 values");
    gen_push_value(L, warp_reduce(gb, v, check_width(L, 3), is_max), GEN_F32, 0, 0);
    return 1;
}
static int b_warp_sum(lua_State *L) { return warp_op(L, 0); }
static int b_warp_max(lua_State *L) { return warp_op(L, 1); }

/* b:block_sum(v, warps): sum over each group of `warps` consecutive warps of the block
 * (the whole block must reach it). Warp sums go through shared memory and are added in
 * warp order, so every thread of a group gets the same bits. */
static int b_block_sum(lua_State *L) {
    gen_builder *gb = gen_check_builder(L, 1);
    gen_value v = gen_arg(L, 2, GEN_F32);
    lua_Integer group = luaL_checkinteger(L, 3);
    unsigned threads = gb->meta->block[0] * gb->meta->block[1] * gb->meta->block[2];
    unsigned nwarps = (threads + 31) / 32;
    if (v.kind != GEN_F32) return luaL_error(L, "block_sum takes an f32 value");
    if (group < 1 || (unsigned)group > nwarps || nwarps % (unsigned)group)
        return luaL_error(L, "block_sum group of %d warps does not divide the block's %u warps", (int)group, nwarps);
    if (gb->meta->block[1] != 1 || gb->meta->block[2] != 1) return luaL_error(L, "block_sum needs a 1-D block");
    LLVMValueRef w = warp_reduce(gb, v, 32, 0);
    if (group == 1) {
        gen_push_value(L, w, GEN_F32, 0, 0);
        return 1;
    }
    /* scratch = b:shared("f32", nwarps) */
    lua_getfield(L, 1, "shared");
    lua_pushvalue(L, 1);
    lua_pushstring(L, "f32");
    lua_pushinteger(L, nwarps);
    lua_call(L, 3, 1);
    gen_value scratch = *(gen_value *)lua_touserdata(L, -1);
    lua_pop(L, 1);
    LLVMValueRef tid = gen_intrinsic(gb, "llvm.nvvm.read.ptx.sreg.tid.x", NULL, 0, NULL, 0);
    LLVMValueRef warp = LLVMBuildLShr(gb->b, tid, LLVMConstInt(gb->i32, 5, 0), "");
    LLVMValueRef lane = LLVMBuildAnd(gb->b, tid, LLVMConstInt(gb->i32, 31, 0), "");
    LLVMBasicBlockRef wr = LLVMAppendBasicBlockInContext(gb->ctx, gb->fn, "bsum.write");
    LLVMBasicBlockRef join = LLVMAppendBasicBlockInContext(gb->ctx, gb->fn, "bsum.join");
    LLVMBuildCondBr(gb->b, LLVMBuildICmp(gb->b, LLVMIntEQ, lane, LLVMConstInt(gb->i32, 0, 0), ""), wr, join);
    LLVMPositionBuilderAtEnd(gb->b, wr);
    LLVMValueRef idx = LLVMBuildZExt(gb->b, warp, gb->i64, "");
    LLVMBuildStore(gb->b, w, LLVMBuildGEP2(gb->b, gb->f32, scratch.v, &idx, 1, ""));
    LLVMBuildBr(gb->b, join);
    LLVMPositionBuilderAtEnd(gb->b, join);
    barrier(gb);
    LLVMValueRef base = LLVMBuildMul(gb->b, LLVMBuildUDiv(gb->b, warp, LLVMConstInt(gb->i32, (unsigned)group, 0), ""),
                                     LLVMConstInt(gb->i32, (unsigned)group, 0), "");
    LLVMValueRef sum = NULL;
    for (lua_Integer i = 0; i < group; i++) {
        LLVMValueRef k = LLVMBuildZExt(gb->b, LLVMBuildAdd(gb->b, base, LLVMConstInt(gb->i32, (unsigned)i, 0), ""), gb->i64, "");
        LLVMValueRef x = LLVMBuildLoad2(gb->b, gb->f32, LLVMBuildGEP2(gb->b, gb->f32, scratch.v, &k, 1, ""), "");
        sum = sum ? LLVMBuildFAdd(gb->b, sum, x, "") : x;
    }
    barrier(gb); /* the scratch may be reused by a later call in a loop */
    gen_push_value(L, sum, GEN_F32, 0, 0);
    return 1;
}

void gen_register_control(lua_State *L) {
    static const luaL_Reg methods[] = {
        {"if_", b_if}, {"for_", b_for}, {"exit_if", b_exit_if}, {"barrier", b_barrier}, {"bar_sync", b_bar_sync}, {"bar_arrive", b_bar_arrive},
        {"shfl", b_shfl}, {"warp_sum", b_warp_sum}, {"warp_max", b_warp_max},
        {"block_sum", b_block_sum}, {NULL, NULL}};
    luaL_setfuncs(L, methods, 0);
}
