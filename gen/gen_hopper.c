/* gen/gen_hopper.c - Hopper builder primitives: mbarriers with transaction counts, the async-proxy
 * fence, setmaxnreg, wgmma fence/commit/wait and warpgroup indexing (docs/hopper.md). */
#include <string.h>

#include <lauxlib.h>

#include "gen.h"

/* What each primitive needs, from the PTX ISA's "PTX ISA notes" / "Target ISA notes" (the same facts
 * as gen/gen_lint_table.c's rows): the oldest SM, PTX ISA (times 10), and whether it exists only on
 * the arch-specific sm_90a. */
typedef struct hop_fact {
    const char *method;
    int sm, ptx;
    bool arch;
} hop_fact;

enum { F_MBAR_INIT, F_MBAR_TX, F_MBAR_WAIT, F_FENCE_ASYNC, F_SETMAXNREG, F_WGMMA_SYNC };
static const hop_fact facts[] = {
    [F_MBAR_INIT] = {"b:mbarrier_init / b:mbarrier_arrive", 80, 70, false},
    [F_MBAR_TX] = {"b:mbarrier_arrive{tx=} / b:mbarrier_expect_tx / b:mbarrier_complete_tx", 90, 80, false},
    [F_MBAR_WAIT] = {"b:mbarrier_wait (mbarrier.try_wait.parity)", 90, 78, false},
    [F_FENCE_ASYNC] = {"b:fence_proxy_async", 90, 80, false},
    [F_SETMAXNREG] = {"b:setmaxnreg", 90, 80, true},
    [F_WGMMA_SYNC] = {"b:wgmma_fence / b:wgmma_commit / b:wgmma_wait", 90, 80, true},
};

/* Raises a Lua error unless the builder's target has the primitive; records the PTX ISA it needs. */
static void need(lua_State *L, gen_builder *gb, int f) {
    const hop_fact *h = &facts[f];
    int sm = gb->t->sm;
    bool ok = h->arch ? kiln_sm_is_arch(sm) && kiln_sm_base(sm) == h->sm : kiln_sm_base(sm) >= h->sm;
    if (!ok) {
        char name[16];
        luaL_error(L, "%s needs %s (this kernel is for %s)", h->method,
                   h->arch ? "the arch-specific target sm_90a (--sm 90a)" : h->sm == 90 ? "sm_90 or newer" : "sm_80 or newer",
                   kiln_sm_name(sm, name));
    }
    if (h->ptx > gb->ptx_needed) gb->ptx_needed = h->ptx;
}

static gen_value check_bar(lua_State *L, int idx, const char *method) {
    gen_value v = gen_arg(L, idx, -1);
    if (v.kind != GEN_PTR || v.as != GEN_AS_SHARED)
        luaL_error(L, "%s: the mbarrier must be a shared pointer (8-byte aligned, e.g. b:shared('f32', 2, 8)), got %s",
                   method, gen_kind_name(v.kind));
    return v;
}

static LLVMValueRef check_u32(lua_State *L, int idx, const char *method, const char *what) {
    gen_value v = gen_arg(L, idx, GEN_I32);
    if (v.kind != GEN_I32) luaL_error(L, "%s: %s must be an i32, got %s", method, what, gen_kind_name(v.kind));
    return v.v;
}

/* b:mbarrier_init(bar, count): a new mbarrier expecting count arrivals per phase, phase 0, tx-count 0. */
static int b_mbarrier_init(lua_State *L) {
    gen_builder *gb = gen_check_builder(L, 1);
    gen_value bar = check_bar(L, 2, "b:mbarrier_init");
    LLVMValueRef n = check_u32(L, 3, "b:mbarrier_init", "count");
    need(L, gb, F_MBAR_INIT);
    LLVMValueRef args[2] = {bar.v, n};
    gen_intrinsic(gb, "llvm.nvvm.mbarrier.init.shared", NULL, 0, args, 2);
    return 0;
}

/* b:mbarrier_arrive(bar [, {tx = bytes}]): one arrival; with tx, first raises the tx-count by bytes
 * (mbarrier.arrive.expect_tx: the producer's arrival that announces its TMA bytes). */
static int b_mbarrier_arrive(lua_State *L) {
    gen_builder *gb = gen_check_builder(L, 1);
    gen_value bar = check_bar(L, 2, "b:mbarrier_arrive");
    LLVMValueRef tx = NULL;
    if (!lua_isnoneornil(L, 3)) {
        luaL_checktype(L, 3, LUA_TTABLE);
        if (lua_getfield(L, 3, "tx") == LUA_TNIL) return luaL_error(L, "b:mbarrier_arrive: the options table takes tx = bytes");
        tx = check_u32(L, lua_gettop(L), "b:mbarrier_arrive", "tx");
    }
    need(L, gb, tx ? F_MBAR_TX : F_MBAR_INIT);
    if (tx) {
        LLVMValueRef args[2] = {bar.v, tx};
        gen_intrinsic(gb, "llvm.nvvm.mbarrier.arrive.expect.tx.scope.cta.space.cta", NULL, 0, args, 2);
    } else {
        gen_intrinsic(gb, "llvm.nvvm.mbarrier.arrive.shared", NULL, 0, &bar.v, 1);
    }
    return 0;
}

static int tx_op(lua_State *L, const char *method, const char *intrinsic) {
    gen_builder *gb = gen_check_builder(L, 1);
    gen_value bar = check_bar(L, 2, method);
    LLVMValueRef args[2] = {bar.v, check_u32(L, 3, method, "bytes")};
    need(L, gb, F_MBAR_TX);
    gen_intrinsic(gb, intrinsic, NULL, 0, args, 2);
    return 0;
}
/* b:mbarrier_expect_tx(bar, bytes): raises the current phase's tx-count by bytes. */
static int b_mbarrier_expect_tx(lua_State *L) {
    return tx_op(L, "b:mbarrier_expect_tx", "llvm.nvvm.mbarrier.expect.tx.scope.cta.space.cta");
}
/* b:mbarrier_complete_tx(bar, bytes): lowers it by bytes, as a finished async copy does. */
static int b_mbarrier_complete_tx(lua_State *L) {
    return tx_op(L, "b:mbarrier_complete_tx", "llvm.nvvm.mbarrier.complete.tx.scope.cta.space.cta");
}

/* b:mbarrier_wait(bar, parity): loops on mbarrier.try_wait.parity until the phase of that parity
 * (0 or 1, an i32: the consumer's phase bit) has completed. */
static int b_mbarrier_wait(lua_State *L) {
    gen_builder *gb = gen_check_builder(L, 1);
    gen_value bar = check_bar(L, 2, "b:mbarrier_wait");
    LLVMValueRef parity = check_u32(L, 3, "b:mbarrier_wait", "parity");
    need(L, gb, F_MBAR_WAIT);
    LLVMBasicBlockRef loop = LLVMAppendBasicBlockInContext(gb->ctx, gb->fn, "mbar.wait");
    LLVMBasicBlockRef done = LLVMAppendBasicBlockInContext(gb->ctx, gb->fn, "mbar.done");
    LLVMBuildBr(gb->b, loop);
    LLVMPositionBuilderAtEnd(gb->b, loop);
    LLVMValueRef args[2] = {bar.v, parity};
    LLVMValueRef ok = gen_intrinsic(gb, "llvm.nvvm.mbarrier.try.wait.parity.scope.cta.space.cta", NULL, 0, args, 2);
    LLVMBuildCondBr(gb->b, ok, done, loop);
    LLVMPositionBuilderAtEnd(gb->b, done);
    return 0;
}

/* b:fence_proxy_async(): orders this thread's generic-proxy shared/global writes before later
 * async-proxy reads (TMA stores, wgmma operands from shared memory). */
static int b_fence_proxy_async(lua_State *L) {
    gen_builder *gb = gen_check_builder(L, 1);
    need(L, gb, F_FENCE_ASYNC);
    gen_intrinsic(gb, "llvm.nvvm.fence.proxy.async", NULL, 0, NULL, 0);
    return 0;
}

/* b:setmaxnreg("inc" | "dec", n): the warpgroup's per-thread register budget becomes n (24..256, a
 * multiple of 8); every thread of the warpgroup must execute it. */
static int b_setmaxnreg(lua_State *L) {
    gen_builder *gb = gen_check_builder(L, 1);
    const char *op = luaL_checkstring(L, 2);
    lua_Integer n = luaL_checkinteger(L, 3);
    if (strcmp(op, "inc") && strcmp(op, "dec")) return luaL_error(L, "b:setmaxnreg: bad direction '%s'; valid: inc, dec", op);
    if (n < 24 || n > 256 || n % 8) return luaL_error(L, "b:setmaxnreg(%s, %d): valid 24..256 in steps of 8", op, (int)n);
    need(L, gb, F_SETMAXNREG);
    LLVMValueRef a = LLVMConstInt(gb->i32, (unsigned long long)n, 0);
    gen_intrinsic(gb, !strcmp(op, "inc") ? "llvm.nvvm.setmaxnreg.inc.sync.aligned.u32" : "llvm.nvvm.setmaxnreg.dec.sync.aligned.u32",
                  NULL, 0, &a, 1);
    return 0;
}

static int wgmma_sync(lua_State *L, const char *intrinsic) {
    gen_builder *gb = gen_check_builder(L, 1);
    need(L, gb, F_WGMMA_SYNC);
    gen_intrinsic(gb, intrinsic, NULL, 0, NULL, 0);
    return 0;
}
/* b:wgmma_fence(): orders register/shared accesses before the warpgroup's next wgmma.mma_async. */
static int b_wgmma_fence(lua_State *L) { return wgmma_sync(L, "llvm.nvvm.wgmma.fence.sync.aligned"); }
/* b:wgmma_commit(): closes the group of wgmma.mma_async issued since the last commit. */
static int b_wgmma_commit(lua_State *L) { return wgmma_sync(L, "llvm.nvvm.wgmma.commit_group.sync.aligned"); }
/* b:wgmma_wait(n): waits until at most n committed wgmma groups are pending. */
static int b_wgmma_wait(lua_State *L) {
    gen_builder *gb = gen_check_builder(L, 1);
    lua_Integer n = luaL_checkinteger(L, 2);
    if (n < 0 || n > 7) return luaL_error(L, "b:wgmma_wait(%d): valid 0..7", (int)n);
    need(L, gb, F_WGMMA_SYNC);
    LLVMValueRef a = LLVMConstInt(gb->i64, (unsigned long long)n, 0);
    gen_intrinsic(gb, "llvm.nvvm.wgmma.wait_group.sync.aligned", NULL, 0, &a, 1);
    return 0;
}

/* b:warpgroup() -> %tid.x / 128 and b:warpgroup_thread() -> %tid.x % 128 (1-D blocks: a warpgroup is
 * four consecutive warps, the unit of wgmma and setmaxnreg). */
static int warpgroup(lua_State *L, bool index) {
    gen_builder *gb = gen_check_builder(L, 1);
    LLVMValueRef tid = gen_intrinsic(gb, "llvm.nvvm.read.ptx.sreg.tid.x", NULL, 0, NULL, 0);
    LLVMValueRef r = index ? LLVMBuildLShr(gb->b, tid, LLVMConstInt(gb->i32, 7, 0), "wg")
                           : LLVMBuildAnd(gb->b, tid, LLVMConstInt(gb->i32, 127, 0), "wg.thread");
    gen_push_value(L, r, GEN_I32, 0, 0);
    return 1;
}
static int b_warpgroup(lua_State *L) { return warpgroup(L, true); }
static int b_warpgroup_thread(lua_State *L) { return warpgroup(L, false); }

void gen_register_hopper(lua_State *L) {
    static const luaL_Reg methods[] = {
        {"mbarrier_init", b_mbarrier_init},       {"mbarrier_arrive", b_mbarrier_arrive},
        {"mbarrier_expect_tx", b_mbarrier_expect_tx}, {"mbarrier_complete_tx", b_mbarrier_complete_tx},
        {"mbarrier_wait", b_mbarrier_wait},       {"fence_proxy_async", b_fence_proxy_async},
        {"setmaxnreg", b_setmaxnreg},             {"wgmma_fence", b_wgmma_fence},
        {"wgmma_commit", b_wgmma_commit},         {"wgmma_wait", b_wgmma_wait},
        {"warpgroup", b_warpgroup},               {"warpgroup_thread", b_warpgroup_thread},
        {NULL, NULL}};
    luaL_setfuncs(L, methods, 0);
}
