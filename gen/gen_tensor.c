/* gen/gen_tensor.c - warp-level matrix primitives (mma, ldmatrix, cp.async) and the approximate
 * special functions attention uses (ex2.approx, lg2.approx). */
#include <stdio.h>
#include <string.h>

#include <lauxlib.h>

#include "gen.h"

static gen_value arg_f32(lua_State *L, int idx) {
    gen_value v = gen_arg(L, idx, GEN_F32);
    if (v.kind != GEN_F32) luaL_error(L, "bad argument #%d: expected f32, got %s", idx, gen_kind_name(v.kind));
    return v;
}

/* b:ex2_approx(x): 2^x with ex2.approx.f32 (max relative error 2^-22.5 per the PTX ISA,
 * subnormal results kept); every target has it. */
static int b_ex2_approx(lua_State *L) {
    gen_builder *gb = gen_check_builder(L, 1);
    gen_value a = arg_f32(L, 2);
    LLVMTypeRef f32 = gb->f32;
    gen_push_value(L, gen_intrinsic(gb, "llvm.nvvm.ex2.approx", &f32, 1, &a.v, 1), GEN_F32, 0, 0);
    return 1;
}

/* b:lg2_approx(x): log2(x) with lg2.approx.f32 (max absolute error 2^-22 per the PTX ISA). */
static int b_lg2_approx(lua_State *L) {
    gen_builder *gb = gen_check_builder(L, 1);
    gen_value a = arg_f32(L, 2);
    gen_push_value(L, gen_intrinsic(gb, "llvm.nvvm.lg2.approx.f", NULL, 0, &a.v, 1), GEN_F32, 0, 0);
    return 1;
}

/* b:max_registers(n): the kernel may use up to n registers per thread (.maxnreg), instead
 * of the default the builder derives from the block size (see gen_close_kernel). */
static int b_max_registers(lua_State *L) {
    gen_builder *gb = gen_check_builder(L, 1);
    lua_Integer n = luaL_checkinteger(L, 2);
    if (n < 16 || n > 255) return luaL_error(L, "max_registers %d out of range 16..255", (int)n);
    if (!gb->fn) return luaL_error(L, "b:max_registers needs a kernel (call b:kernel{} first)");
    gb->max_registers = (unsigned)n;
    return 0;
}

/* b:dynamic_shared(dtype[, align]) -> pointer to the block's dynamic shared memory (extern __shared__,
 * 128-byte aligned, or `align` bytes: a power of two up to 1024, e.g. the 1024 of a 128B-swizzled
 * TMA/wgmma tile), sized at launch by meta.dynamic_smem, which config() sets; every call returns
 * the same base, typed as dtype (its alignment the largest asked for). */
static int b_dynamic_shared(lua_State *L) {
    gen_builder *gb = gen_check_builder(L, 1);
    kiln_dtype dt;
    const char *s = luaL_checkstring(L, 2);
    lua_Integer align = luaL_optinteger(L, 3, 128);
    if (kiln_dtype_parse(s, &dt) != 0) return luaL_error(L, "bad dtype '%s'; valid: f32, f16, bf16", s);
    if (align < 16 || align > 1024 || (align & (align - 1)))
        return luaL_error(L, "b:dynamic_shared: align %d; valid: a power of two from 16 to 1024", (int)align);
    if (!gb->meta->dynamic_smem) return luaL_error(L, "b:dynamic_shared: config() set no dynamic_smem");
    LLVMValueRef g = LLVMGetNamedGlobal(gb->mod, "kiln_dsmem");
    if (!g) {
        LLVMTypeRef at = LLVMArrayType2(gb->i8, 0);
        g = LLVMAddGlobalInAddressSpace(gb->mod, at, "kiln_dsmem", GEN_AS_SHARED);
        LLVMSetLinkage(g, LLVMExternalLinkage);
        LLVMSetAlignment(g, 128);
    }
    if ((unsigned)align > LLVMGetAlignment(g)) LLVMSetAlignment(g, (unsigned)align);
    gen_push_value(L, g, GEN_PTR, (int)dt, GEN_AS_SHARED);
    return 1;
}

/* ---- tensor-core primitives: the target table decides the instructions ---- */

static void need_ptx(gen_builder *gb, enum gen_feature f) {
    int v = gen_feature_ptx(f);
    if (v > gb->ptx_needed) gb->ptx_needed = v;
}

static kiln_dtype half_dtype(lua_State *L, int idx) {
    const char *s = luaL_checkstring(L, idx);
    if (!strcmp(s, "f16")) return KILN_F16;
    if (!strcmp(s, "bf16")) return KILN_BF16;
    luaL_error(L, "bad mma dtype '%s'; valid: f16, bf16", s);
    return KILN_F16;
}

/* Reads the n values of kind in the Lua list at idx into out (gen.h); a template error names `what`. */
void gen_read_list(lua_State *L, int idx, int n, int kind, const char *what, LLVMValueRef *out) {
    if (!lua_istable(L, idx)) luaL_error(L, "%s must be a list of %d %s values", what, n, gen_kind_name(kind));
    if ((int)luaL_len(L, idx) != n) luaL_error(L, "%s: expected %d values, got %d", what, n, (int)luaL_len(L, idx));
    for (int i = 0; i < n; i++) {
        lua_geti(L, idx, i + 1);
        gen_value v = gen_arg(L, -1, kind);
        if (v.kind != kind) luaL_error(L, "%s[%d] is %s, expected %s", what, i + 1, gen_kind_name(v.kind), gen_kind_name(kind));
        out[i] = v.v;
        lua_pop(L, 1);
    }
}

static void push_list(lua_State *L, LLVMValueRef *v, int n, int kind) {
    lua_createtable(L, n, 0);
    for (int i = 0; i < n; i++) {
        gen_push_value(L, v[i], kind, 0, 0);
        lua_rawseti(L, -2, i + 1);
    }
}

/* b:ldmatrix(ptr, count [, trans]) -> count i32 values: ldmatrix.sync.aligned.m8n8.x{1,2,4}[.trans].b16.
 * ptr is a 16-bit shared-memory pointer; lane 8i+r gives row r of matrix i (16 bytes, aligned). */
static int b_ldmatrix(lua_State *L) {
    gen_builder *gb = gen_check_builder(L, 1);
    gen_value p = gen_arg(L, 2, -1);
    lua_Integer n = luaL_checkinteger(L, 3);
    int trans = lua_toboolean(L, 4);
    if (p.kind != GEN_PTR || p.as != GEN_AS_SHARED || p.elem == KILN_F32)
        return luaL_error(L, "b:ldmatrix needs a pointer to f16/bf16 shared memory");
    if (n != 1 && n != 2 && n != 4) return luaL_error(L, "b:ldmatrix count %d; valid: 1, 2, 4", (int)n);
    if (!gb->t->ldmatrix) return luaL_error(L, "b:ldmatrix: sm_%d has no ldmatrix (sm_75 and newer)", gb->t->sm);
    need_ptx(gb, GEN_FEAT_LDMATRIX);
    char name[64];
    snprintf(name, sizeof name, "llvm.nvvm.ldmatrix.sync.aligned.m8n8.x%d%s.b16", (int)n, trans ? ".trans" : "");
    LLVMTypeRef over = gb->ptr_shared;
    LLVMValueRef r = gen_intrinsic(gb, name, &over, 1, &p.v, 1), out[4];
    for (int i = 0; i < n; i++) out[i] = n == 1 ? r : LLVMBuildExtractValue(gb->b, r, (unsigned)i, "");
    push_list(L, out, (int)n, GEN_I32);
    return 1;
}

/* One mma.sync with f32 accumulators; a, b packed 32-bit registers. */
static void mma_call(gen_builder *gb, const char *name, kiln_dtype dt, LLVMValueRef *a, int na, LLVMValueRef *b, int nb,
                     LLVMValueRef c[4]) {
    LLVMValueRef args[10];
    LLVMTypeRef h2 = LLVMVectorType(gb->f16, 2);
    int n = 0;
    for (int i = 0; i < na; i++) args[n++] = dt == KILN_F16 ? LLVMBuildBitCast(gb->b, a[i], h2, "") : a[i];
    for (int i = 0; i < nb; i++) args[n++] = dt == KILN_F16 ? LLVMBuildBitCast(gb->b, b[i], h2, "") : b[i];
    for (int i = 0; i < 4; i++) args[n++] = c[i];
    LLVMValueRef r = gen_intrinsic(gb, name, NULL, 0, args, n);
    for (int i = 0; i < 4; i++) c[i] = LLVMBuildExtractValue(gb->b, r, (unsigned)i, "");
}

/* b:mma(dtype, a, b, c) -> d: D = A B + C for a 16x16 (row) by 16x8 (col) tile of f16/bf16 with
 * f32 accumulators, in the fragment layout of mma.m16n8k16 (a: 4 i32, b: 2 i32, c: 4 f32).
 * Targets with m16n8k16 get one instruction; f16 on targets with only m16n8k8 gets two (k 0..7
 * from a[1..2], b[1]; k 8..15 from a[3..4], b[2]). bf16 needs m16n8k16. */
static int b_mma(lua_State *L) {
    gen_builder *gb = gen_check_builder(L, 1);
    kiln_dtype dt = half_dtype(L, 2);
    LLVMValueRef a[4], b[2], c[4];
    gen_read_list(L, 3, 4, GEN_I32, "mma a", a);
    gen_read_list(L, 4, 2, GEN_I32, "mma b", b);
    gen_read_list(L, 5, 4, GEN_F32, "mma c", c);
    if (gb->t->mma_m16n8k16) {
        need_ptx(gb, GEN_FEAT_MMA_M16N8K16);
        mma_call(gb, dt == KILN_F16 ? "llvm.nvvm.mma.m16n8k16.row.col.f32.f32" : "llvm.nvvm.mma.m16n8k16.row.col.bf16",
                 dt, a, 4, b, 2, c);
    } else if (dt == KILN_F16 && gb->t->mma_m16n8k8_f16) {
        need_ptx(gb, GEN_FEAT_MMA_M16N8K8);
        mma_call(gb, "llvm.nvvm.mma.m16n8k8.row.col.f32.f32", dt, a, 2, b, 1, c);
        mma_call(gb, "llvm.nvvm.mma.m16n8k8.row.col.f32.f32", dt, a + 2, 2, b + 1, 1, c);
    } else {
        return luaL_error(L, "b:mma: sm_%d has no %s tensor-core mma (check b:target() first)", gb->t->sm,
                          kiln_dtype_name(dt));
    }
    push_list(L, c, 4, GEN_F32);
    return 1;
}

/* b:pack(lo, hi, dtype) -> i32: two f32 values rounded to f16/bf16 (nearest even), lo in the
 * low half; one packed cvt where the target has it. */
static int b_pack(lua_State *L) {
    gen_builder *gb = gen_check_builder(L, 1);
    gen_value lo = arg_f32(L, 2), hi = arg_f32(L, 3);
    kiln_dtype dt = half_dtype(L, 4);
    int packed = dt == KILN_F16 ? gb->t->packed_f16_cvt : gb->t->native_bf16_cvt;
    LLVMValueRef r;
    if (packed) {
        LLVMValueRef args[2] = {hi.v, lo.v};
        r = gen_intrinsic(gb, dt == KILN_F16 ? "llvm.nvvm.ff2f16x2.rn" : "llvm.nvvm.ff2bf16x2.rn", NULL, 0, args, 2);
        r = LLVMBuildBitCast(gb->b, r, gb->i32, "");
    } else {
        LLVMValueRef l = LLVMBuildZExt(gb->b, gen_from_f32(gb, lo.v, dt), gb->i32, "");
        LLVMValueRef h = LLVMBuildZExt(gb->b, gen_from_f32(gb, hi.v, dt), gb->i32, "");
        r = LLVMBuildOr(gb->b, l, LLVMBuildShl(gb->b, h, LLVMConstInt(gb->i32, 16, 0), ""), "");
    }
    gen_push_value(L, r, GEN_I32, 0, 0);
    return 1;
}

static void need_cp_async(lua_State *L, gen_builder *gb) {
    if (!gb->t->cp_async) luaL_error(L, "cp.async: sm_%d has none (sm_80 and newer; check b:target().cp_async)", gb->t->sm);
    need_ptx(gb, GEN_FEAT_CP_ASYNC);
}

/* b:cp_async(dst, src [, {pred=}]): 16 bytes from global src to shared dst (both 16-byte
 * aligned), cp.async.cg; where pred is false the destination is zero-filled and nothing read. */
static int b_cp_async(lua_State *L) {
    gen_builder *gb = gen_check_builder(L, 1);
    gen_value d = gen_arg(L, 2, -1), s = gen_arg(L, 3, -1);
    if (d.kind != GEN_PTR || d.as != GEN_AS_SHARED) return luaL_error(L, "b:cp_async: destination must be a shared pointer");
    if (s.kind != GEN_PTR || s.as != GEN_AS_GLOBAL) return luaL_error(L, "b:cp_async: source must be a global pointer");
    need_cp_async(L, gb);
    LLVMValueRef size = LLVMConstInt(gb->i32, 16, 0);
    if (lua_istable(L, 4) && lua_getfield(L, 4, "pred") != LUA_TNIL) {
        gen_value p = gen_arg(L, -1, -1);
        if (p.kind != GEN_PRED) return luaL_error(L, "b:cp_async: pred must be a predicate");
        size = LLVMBuildSelect(gb->b, p.v, size, LLVMConstInt(gb->i32, 0, 0), "");
    }
    LLVMValueRef args[3] = {d.v, s.v, size};
    gen_intrinsic(gb, "llvm.nvvm.cp.async.cg.shared.global.16.s", NULL, 0, args, 3);
    return 0;
}

/* b:cp_async_commit(): closes the group of cp.async issued since the last commit. */
static int b_cp_async_commit(lua_State *L) {
    gen_builder *gb = gen_check_builder(L, 1);
    need_cp_async(L, gb);
    gen_intrinsic(gb, "llvm.nvvm.cp.async.commit.group", NULL, 0, NULL, 0);
    return 0;
}

/* b:cp_async_wait(n): waits until at most n committed groups are still in flight. */
static int b_cp_async_wait(lua_State *L) {
    gen_builder *gb = gen_check_builder(L, 1);
    lua_Integer n = luaL_checkinteger(L, 2);
    if (n < 0 || n > 7) return luaL_error(L, "b:cp_async_wait(%d): valid 0..7", (int)n);
    need_cp_async(L, gb);
    LLVMValueRef a = LLVMConstInt(gb->i32, (unsigned long long)n, 0);
    gen_intrinsic(gb, "llvm.nvvm.cp.async.wait.group", NULL, 0, &a, 1);
    return 0;
}

void gen_register_tensor(lua_State *L) {
    static const luaL_Reg methods[] = {
        {"ex2_approx", b_ex2_approx}, {"lg2_approx", b_lg2_approx}, {"max_registers", b_max_registers},
        {"dynamic_shared", b_dynamic_shared},
        {"ldmatrix", b_ldmatrix}, {"mma", b_mma}, {"pack", b_pack}, {"cp_async", b_cp_async},
        {"cp_async_commit", b_cp_async_commit}, {"cp_async_wait", b_cp_async_wait}, {NULL, NULL}};
    luaL_setfuncs(L, methods, 0);
}
