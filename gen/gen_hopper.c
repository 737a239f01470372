/* gen/gen_hopper.c - Hopper builder primitives: mbarriers with transaction counts, the async-proxy
 * fence, setmaxnreg, wgmma (mma_async through kiln pseudo-intrinsics, matrix descriptors,
 * fence/commit/wait), TMA tile loads and reduce-adds with their bulk groups, and warpgroup indexing
 * (docs/hopper.md). */
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

enum { F_MBAR_INIT, F_MBAR_TX, F_MBAR_WAIT, F_FENCE_ASYNC, F_SETMAXNREG, F_WGMMA_SYNC, F_WGMMA_MMA, F_TMA, F_TMA_RED,
       F_BULK_GROUP };
static const hop_fact facts[] = {
    [F_MBAR_INIT] = {"b:mbarrier_init / b:mbarrier_arrive", 80, 70, false},
    [F_MBAR_TX] = {"b:mbarrier_arrive{tx=} / b:mbarrier_expect_tx / b:mbarrier_complete_tx", 90, 80, false},
    [F_MBAR_WAIT] = {"b:mbarrier_wait (mbarrier.try_wait.parity)", 90, 78, false},
    [F_FENCE_ASYNC] = {"b:fence_proxy_async", 90, 80, false},
    [F_SETMAXNREG] = {"b:setmaxnreg", 90, 80, true},
    [F_WGMMA_SYNC] = {"b:wgmma_fence / b:wgmma_commit / b:wgmma_wait", 90, 80, true},
    [F_WGMMA_MMA] = {"b:wgmma / b:wgmma_desc (wgmma.mma_async)", 90, 80, true},
    [F_TMA] = {"b:tma_load (cp.async.bulk.tensor)", 90, 80, false},
    [F_TMA_RED] = {"b:tma_reduce_add (cp.reduce.async.bulk.tensor)", 90, 80, false},
    [F_BULK_GROUP] = {"b:bulk_commit / b:bulk_wait (cp.async.bulk.commit_group / wait_group)", 90, 80, false},
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
    if (h->arch && !gb->arch_method) gb->arch_method = h->method;
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
/* ---- wgmma.mma_async: no LLVM release has it, so the builder calls kiln pseudo-intrinsics (declared
 * functions named kiln.wgmma.*): gen/gen_wgmma_lower.c turns each call into inline PTX before NVPTX
 * codegen, and the emulator implements them by name (emu/emu_wgmma.c). One IR for both. ---- */

/* The pseudo-intrinsic name of type ty, declared once (convergent: every thread of the warpgroup
 * executes it together; nounwind). */
static LLVMValueRef pseudo(gen_builder *gb, const char *name, LLVMTypeRef ty) {
    LLVMValueRef f = LLVMGetNamedFunction(gb->mod, name);
    if (f) return f;
    f = LLVMAddFunction(gb->mod, name, ty);
    static const char *const attrs[] = {"convergent", "nounwind"};
    for (int i = 0; i < 2; i++) {
        unsigned kind = LLVMGetEnumAttributeKindForName(attrs[i], strlen(attrs[i]));
        LLVMAddAttributeAtIndex(f, LLVMAttributeFunctionIndex, LLVMCreateEnumAttribute(gb->ctx, kind, 0));
    }
    return f;
}

/* An integer option of the table at idx, def when absent. */
static lua_Integer int_opt(lua_State *L, int idx, const char *key, lua_Integer def) {
    lua_getfield(L, idx, key);
    lua_Integer v = lua_isnil(L, -1) ? def : luaL_checkinteger(L, -1);
    lua_pop(L, 1);
    return v;
}

static void push_values(lua_State *L, gen_builder *gb, LLVMValueRef st, int n) {
    lua_createtable(L, n, 0);
    for (int i = 0; i < n; i++) {
        gen_push_value(L, LLVMBuildExtractValue(gb->b, st, (unsigned)i, ""), GEN_F32, 0, 0);
        lua_rawseti(L, -2, i + 1);
    }
}

static LLVMTypeRef f32_struct(gen_builder *gb, int n) {
    LLVMTypeRef e[KILN_WGMMA_MAX_ACC];
    for (int i = 0; i < n; i++) e[i] = gb->f32;
    return LLVMStructTypeInContext(gb->ctx, e, (unsigned)n, 0);
}

/* b:wgmma_desc(ptr, {swizzle = 128|64|32|0, lbo = bytes, sbo = bytes}) -> i64: the shared-memory matrix
 * descriptor of the PTX ISA (bits 0-13 start address >> 4, 16-29 leading-dimension byte offset >> 4,
 * 32-45 stride-dimension byte offset >> 4, 49-51 base offset 0, 62-63 swizzle: 0 none, 1 128B, 2 64B,
 * 3 32B). The start address is the shared-window address of ptr (16-byte aligned); a template may add
 * (bytes >> 4) to the result to step through K. */
static int b_wgmma_desc(lua_State *L) {
    gen_builder *gb = gen_check_builder(L, 1);
    gen_value p = gen_arg(L, 2, -1);
    if (p.kind != GEN_PTR || p.as != GEN_AS_SHARED)
        return luaL_error(L, "b:wgmma_desc: the matrix must be a shared pointer, got %s", gen_kind_name(p.kind));
    luaL_checktype(L, 3, LUA_TTABLE);
    lua_Integer sw = int_opt(L, 3, "swizzle", 0), lbo = int_opt(L, 3, "lbo", 0), sbo = int_opt(L, 3, "sbo", 0);
    int mode = sw == 0 ? 0 : sw == 128 ? 1 : sw == 64 ? 2 : sw == 32 ? 3 : -1;
    if (mode < 0) return luaL_error(L, "b:wgmma_desc: swizzle = %d; valid: 0, 32, 64, 128 (bytes)", (int)sw);
    const char *bad = lbo < 0 || lbo % 16 || lbo >> 4 > 0x3fff ? "lbo" : sbo < 0 || sbo % 16 || sbo >> 4 > 0x3fff ? "sbo" : NULL;
    if (bad)
        return luaL_error(L, "b:wgmma_desc: %s = %d; valid: a multiple of 16 bytes in 0..%d", bad, (int)(*bad == 'l' ? lbo : sbo),
                          0x3fff << 4);
    need(L, gb, F_WGMMA_MMA);
    unsigned long long fields = (unsigned long long)(lbo >> 4) << 16 | (unsigned long long)(sbo >> 4) << 32 |
                                (unsigned long long)mode << 62;
    LLVMTypeRef pt[2] = {gb->ptr_shared, gb->i64};
    LLVMTypeRef ty = LLVMFunctionType(gb->i64, pt, 2, 0);
    LLVMValueRef args[2] = {p.v, LLVMConstInt(gb->i64, fields, 0)};
    gen_push_value(L, LLVMBuildCall2(gb->b, ty, pseudo(gb, KILN_WGMMA_DESC, ty), args, 2, "wgmma.desc"), GEN_I64, 0, 0);
    return 1;
}

/* b:wgmma{n =, type = 'f16'|'bf16', a = desc | {4 i32}, b = desc [, acc = {n/2 f32}] [, scale_d =]}
 * -> n/2 f32 values in flight: wgmma.mma_async.sync.aligned.m64nNk16.f32.type.type, D = A B (+ D when
 * scale_d, default: when acc is given). A is 64 x 16 from a descriptor or from registers (mma.m16n8k16's
 * A fragment, rows 16w.. for warp w of the warpgroup), B is 16 x n (K-major, n rows of 16 elements) from
 * a descriptor. The results may only be read through b:wgmma_wait(k, values) once the group holding
 * this wgmma is covered; a chain of wgmma may pass them on as acc before that. */
static int b_wgmma(lua_State *L) {
    gen_builder *gb = gen_check_builder(L, 1);
    luaL_checktype(L, 2, LUA_TTABLE);
    lua_Integer n = int_opt(L, 2, "n", 0);
    if (n < 8 || n > 256 || n % 8) return luaL_error(L, "b:wgmma: n = %d; valid: 8..256 in steps of 8", (int)n);
    lua_getfield(L, 2, "type");
    const char *type = lua_tostring(L, -1);
    if (!type || (strcmp(type, "f16") && strcmp(type, "bf16")))
        return luaL_error(L, "b:wgmma: type '%s'; valid: f16, bf16", type ? type : "(none)");
    lua_getfield(L, 2, "trans_b"); /* an N-major B (imm-trans-b 1): B stored [k][n], n contiguous */
    bool tb = lua_toboolean(L, -1);
    need(L, gb, F_WGMMA_MMA);
    int m = (int)n / 2, na = 0;
    LLVMValueRef args[KILN_WGMMA_MAX_ACC + 8];
    LLVMTypeRef types[KILN_WGMMA_MAX_ACC + 8];
    lua_getfield(L, 2, "acc");
    bool has_acc = !lua_isnil(L, -1);
    if (has_acc) gen_read_list(L, lua_gettop(L), m, GEN_F32, "b:wgmma acc", args);
    else
        for (int i = 0; i < m; i++) args[i] = LLVMConstReal(gb->f32, 0.0);
    for (na = 0; na < m; na++) types[na] = gb->f32;
    lua_getfield(L, 2, "a");
    bool rs = lua_istable(L, -1); /* values are userdata: a table is the register list */
    if (rs) {
        gen_read_list(L, lua_gettop(L), 4, GEN_I32, "b:wgmma a (registers)", args + na);
        for (int i = 0; i < 4; i++) types[na++] = gb->i32;
    } else {
        gen_value a = gen_arg(L, lua_gettop(L), -1);
        if (a.kind != GEN_I64) return luaL_error(L, "b:wgmma: a must be a descriptor (b:wgmma_desc) or 4 i32 registers, got %s", gen_kind_name(a.kind));
        args[na] = a.v, types[na++] = gb->i64;
    }
    lua_getfield(L, 2, "b");
    gen_value bd = gen_arg(L, lua_gettop(L), -1);
    if (bd.kind != GEN_I64) return luaL_error(L, "b:wgmma: b must be a descriptor (b:wgmma_desc), got %s", gen_kind_name(bd.kind));
    args[na] = bd.v, types[na++] = gb->i64;
    lua_getfield(L, 2, "scale_d");
    LLVMValueRef scale;
    if (lua_isnil(L, -1)) {
        scale = LLVMConstInt(gb->i32, has_acc, 0);
    } else {
        gen_value s = gen_arg(L, lua_gettop(L), GEN_I32);
        if (s.kind == GEN_PRED) scale = LLVMBuildZExt(gb->b, s.v, gb->i32, "");
        else if (s.kind == GEN_I32) scale = s.v;
        else return luaL_error(L, "b:wgmma: scale_d must be an i32 or a predicate, got %s", gen_kind_name(s.kind));
    }
    args[na] = scale, types[na++] = gb->i32;
    char name[64];
    snprintf(name, sizeof name, "kiln.wgmma.m64n%dk16.f32.%s.%s%s", (int)n, type, rs ? "rs" : "ss", tb ? ".tb" : "");
    LLVMTypeRef ty = LLVMFunctionType(f32_struct(gb, m), types, (unsigned)na, 0);
    LLVMValueRef r = LLVMBuildCall2(gb->b, ty, pseudo(gb, name, ty), args, (unsigned)na, "wgmma");
    push_values(L, gb, r, m);
    return 1;
}

/* b:wgmma_wait(n [, values]): waits until at most n committed wgmma groups are pending; with values (the
 * accumulators of wgmma in flight), returns them readable: the wait defines them, so nothing reads them
 * before it (kiln.wgmma.wait.f32xM; the emulator faults when the wait does not cover their wgmma). */
static int b_wgmma_wait(lua_State *L) {
    gen_builder *gb = gen_check_builder(L, 1);
    lua_Integer n = luaL_checkinteger(L, 2);
    if (n < 0 || n > 7) return luaL_error(L, "b:wgmma_wait(%d): valid 0..7", (int)n);
    need(L, gb, F_WGMMA_SYNC);
    if (lua_isnoneornil(L, 3)) {
        LLVMValueRef a = LLVMConstInt(gb->i64, (unsigned long long)n, 0);
        gen_intrinsic(gb, "llvm.nvvm.wgmma.wait_group.sync.aligned", NULL, 0, &a, 1);
        return 0;
    }
    int m = lua_istable(L, 3) ? (int)luaL_len(L, 3) : 0;
    if (m < 1 || m > KILN_WGMMA_MAX_ACC)
        return luaL_error(L, "b:wgmma_wait: values must be a list of 1..%d f32 (wgmma results)", KILN_WGMMA_MAX_ACC);
    LLVMValueRef args[KILN_WGMMA_MAX_ACC + 1];
    LLVMTypeRef types[KILN_WGMMA_MAX_ACC + 1];
    args[0] = LLVMConstInt(gb->i32, (unsigned long long)n, 0), types[0] = gb->i32;
    gen_read_list(L, 3, m, GEN_F32, "b:wgmma_wait values", args + 1);
    for (int i = 1; i <= m; i++) types[i] = gb->f32;
    char name[64];
    snprintf(name, sizeof name, "kiln.wgmma.wait.f32x%d", m);
    LLVMTypeRef ty = LLVMFunctionType(f32_struct(gb, m), types, (unsigned)m + 1, 0);
    push_values(L, gb, LLVMBuildCall2(gb->b, ty, pseudo(gb, name, ty), args, (unsigned)m + 1, "wgmma.done"), m);
    return 1;
}

/* ---- TMA ---- */

/* b:tma_load(dst, tmap, {c0, ..}, bar): cp.async.bulk.tensor.<d>d.shared::cluster.global.tile.mbarrier::
 * complete_tx::bytes - the box of the tensor map parameter tmap (a 'tensormap' kernel parameter) at
 * coordinates c (elements, innermost first, i32; out-of-bounds parts zero-filled) lands in shared dst
 * (128-byte aligned; the swizzle's span times 8 with one), and its bytes complete on mbarrier bar (the
 * producer announces them first: b:mbarrier_arrive(bar, {tx = bytes})). */
static int b_tma_load(lua_State *L) {
    gen_builder *gb = gen_check_builder(L, 1);
    gen_value dst = gen_arg(L, 2, -1), tm = gen_arg(L, 3, -1);
    if (dst.kind != GEN_PTR || dst.as != GEN_AS_SHARED)
        return luaL_error(L, "b:tma_load: the destination must be a shared pointer, got %s", gen_kind_name(dst.kind));
    bool is_map = false;
    for (int i = 0; gb->fn && i < gb->meta->nparams; i++)
        if (gb->meta->params[i].kind == KILN_PARAM_TMAP && LLVMGetParam(gb->fn, (unsigned)i) == tm.v) is_map = true;
    if (!is_map) return luaL_error(L, "b:tma_load: the map must be a kernel parameter of kind 'tensormap'");
    luaL_checktype(L, 4, LUA_TTABLE);
    int rank = (int)luaL_len(L, 4);
    if (rank < 1 || rank > 5) return luaL_error(L, "b:tma_load: %d coordinates; valid: 1..5 (the map's rank)", rank);
    gen_value bar = check_bar(L, 5, "b:tma_load");
    need(L, gb, F_TMA);
    LLVMValueRef args[13];
    int n = 0;
    args[n++] = LLVMBuildAddrSpaceCast(gb->b, dst.v, LLVMPointerTypeInContext(gb->ctx, 7), "tma.dst");
    args[n++] = bar.v;
    args[n++] = tm.v;
    gen_read_list(L, 4, rank, GEN_I32, "b:tma_load coordinates", args + n);
    n += rank;
    args[n++] = LLVMConstInt(gb->i16, 0, 0); /* multicast mask, unused */
    args[n++] = LLVMConstInt(gb->i64, 0, 0); /* cache hint, unused */
    args[n++] = LLVMConstInt(gb->i1, 0, 0);
    args[n++] = LLVMConstInt(gb->i1, 0, 0);
    args[n++] = LLVMConstInt(gb->i32, 0, 0); /* no cta_group */
    char name[64];
    snprintf(name, sizeof name, "llvm.nvvm.cp.async.bulk.tensor.g2s.tile.%dd", rank);
    gen_intrinsic(gb, name, NULL, 0, args, n);
    return 0;
}

/* The map argument at idx: a kernel parameter of kind 'tensormap' (its value), or a Lua error. */
static LLVMValueRef check_map(lua_State *L, gen_builder *gb, int idx, const char *method) {
    gen_value tm = gen_arg(L, idx, -1);
    for (int i = 0; gb->fn && i < gb->meta->nparams; i++)
        if (gb->meta->params[i].kind == KILN_PARAM_TMAP && LLVMGetParam(gb->fn, (unsigned)i) == tm.v) return tm.v;
    luaL_error(L, "%s: the map must be a kernel parameter of kind 'tensormap'", method);
    return NULL;
}

/* b:tma_reduce_add(src, tmap, {c0, ..}): cp.reduce.async.bulk.tensor.<d>d.global.shared::cta.add.tile.
 * bulk_group - the box of tensor map tmap at coordinates c (elements, innermost first, i32) is read from
 * shared src (laid out as b:tma_load lands it: dense, rows of box[0] elements, the map's swizzle; 128-byte
 * aligned) and added element by element into global memory (f32 maps: an f32 add per element, atomic
 * per element at L2; elements outside the tensor are skipped). It joins the issuing thread's open bulk
 * group: b:bulk_commit() closes it, and b:bulk_wait(n, {read = true}) before src is written again (the
 * generic-proxy writes to src need b:fence_proxy_async() before the issue). FA3's dQ writer. */
static int b_tma_reduce_add(lua_State *L) {
    gen_builder *gb = gen_check_builder(L, 1);
    gen_value src = gen_arg(L, 2, -1);
    if (src.kind != GEN_PTR || src.as != GEN_AS_SHARED)
        return luaL_error(L, "b:tma_reduce_add: the source must be a shared pointer, got %s", gen_kind_name(src.kind));
    LLVMValueRef tm = check_map(L, gb, 3, "b:tma_reduce_add");
    luaL_checktype(L, 4, LUA_TTABLE);
    int rank = (int)luaL_len(L, 4);
    if (rank < 1 || rank > 5) return luaL_error(L, "b:tma_reduce_add: %d coordinates; valid: 1..5 (the map's rank)", rank);
    need(L, gb, F_TMA_RED);
    LLVMValueRef args[9];
    int n = 0;
    args[n++] = src.v;
    args[n++] = tm;
    gen_read_list(L, 4, rank, GEN_I32, "b:tma_reduce_add coordinates", args + n);
    n += rank;
    args[n++] = LLVMConstInt(gb->i64, 0, 0); /* cache hint, unused */
    args[n++] = LLVMConstInt(gb->i1, 0, 0);
    char name[64];
    snprintf(name, sizeof name, "llvm.nvvm.cp.async.bulk.tensor.reduce.add.tile.%dd", rank);
    gen_intrinsic(gb, name, NULL, 0, args, n);
    return 0;
}

/* b:bulk_commit(): cp.async.bulk.commit_group - the thread's bulk operations issued since its last commit
 * (b:tma_reduce_add) become one bulk async-group. */
static int b_bulk_commit(lua_State *L) {
    gen_builder *gb = gen_check_builder(L, 1);
    need(L, gb, F_BULK_GROUP);
    gen_intrinsic(gb, "llvm.nvvm.cp.async.bulk.commit.group", NULL, 0, NULL, 0);
    return 0;
}

/* b:bulk_wait(n [, {read = true}]): cp.async.bulk.wait_group[.read] n - waits until at most n of the
 * thread's newest bulk async-groups are pending; with read, only until their reads of shared memory are
 * done (the source may then be overwritten; the global writes may still be in flight). n 0..63. */
static int b_bulk_wait(lua_State *L) {
    gen_builder *gb = gen_check_builder(L, 1);
    lua_Integer n = luaL_checkinteger(L, 2);
    if (n < 0 || n > 63) return luaL_error(L, "b:bulk_wait(%d): valid 0..63 pending groups", (int)n);
    bool read = false;
    if (lua_istable(L, 3)) {
        lua_getfield(L, 3, "read");
        read = lua_toboolean(L, -1);
        lua_pop(L, 1);
    }
    need(L, gb, F_BULK_GROUP);
    LLVMValueRef a = LLVMConstInt(gb->i32, (unsigned long long)n, 0);
    gen_intrinsic(gb, read ? "llvm.nvvm.cp.async.bulk.wait.group.read" : "llvm.nvvm.cp.async.bulk.wait.group", NULL, 0,
                  &a, 1);
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
        {"wgmma", b_wgmma},                       {"wgmma_desc", b_wgmma_desc},
        {"tma_load", b_tma_load},                 {"tma_reduce_add", b_tma_reduce_add},
        {"bulk_commit", b_bulk_commit},           {"bulk_wait", b_bulk_wait},
        {NULL, NULL}};
    luaL_setfuncs(L, methods, 0);
}
