/* gen/gen_convert.c - dtype conversions; the target table decides native cvt vs integer code. */
#include <lauxlib.h>

#include "gen.h"

static LLVMValueRef c32(gen_builder *gb, unsigned v) { return LLVMConstInt(gb->i32, v, 0); }

/* bf16 -> f32 is exact: the bf16 bits are the high half of the f32 (every target). */
LLVMValueRef gen_to_f32(gen_builder *gb, LLVMValueRef bits, kiln_dtype from) {
    if (from == KILN_F32) return bits;
    if (from == KILN_F16) return LLVMBuildFPExt(gb->b, LLVMBuildBitCast(gb->b, bits, gb->f16, ""), gb->f32, "");
    LLVMValueRef w = NULL;
    if (LLVMIsAExtractElementInst(bits)) {
        LLVMValueRef vec = LLVMGetOperand(bits, 0), idx = LLVMGetOperand(bits, 1);
        LLVMTypeRef vt = LLVMTypeOf(vec);
        unsigned n = LLVMGetVectorSize(vt);
        LLVMTypeRef et = LLVMGetElementType(vt);
        int half_bits = LLVMGetTypeKind(et) == LLVMIntegerTypeKind ? LLVMGetIntTypeWidth(et) == 16
                                                                     : LLVMGetTypeKind(et) == LLVMBFloatTypeKind;
        if (LLVMIsAConstantInt(idx) && n % 2 == 0 && half_bits) {
            unsigned i = (unsigned)LLVMConstIntGetZExtValue(idx);
            LLVMValueRef words = LLVMBuildBitCast(gb->b, vec, LLVMVectorType(gb->i32, n / 2), "");
            LLVMValueRef word = LLVMBuildExtractElement(gb->b, words, c32(gb, i / 2), "");
            w = i % 2 ? LLVMBuildAnd(gb->b, word, c32(gb, 0xffff0000u), "") : LLVMBuildShl(gb->b, word, c32(gb, 16), "");
        }
    }
    if (!w) w = LLVMBuildShl(gb->b, LLVMBuildZExt(gb->b, bits, gb->i32, ""), c32(gb, 16), "");
    return LLVMBuildBitCast(gb->b, w, gb->f32, "");
}

/* f32 -> bf16 with integer round-to-nearest-even, for targets without cvt.rn.bf16.f32:
 * NaN stays NaN (quieted, sign and top payload kept), +-Inf stays +-Inf, overflow -> Inf. */
static LLVMValueRef bf16_rne_integer(gen_builder *gb, LLVMValueRef f) {
    LLVMBuilderRef b = gb->b;
    LLVMValueRef u = LLVMBuildBitCast(b, f, gb->i32, "");
    LLVMValueRef mag = LLVMBuildAnd(b, u, c32(gb, 0x7fffffffu), "");
    LLVMValueRef is_nan = LLVMBuildICmp(b, LLVMIntUGT, mag, c32(gb, 0x7f800000u), "");
    LLVMValueRef lsb = LLVMBuildAnd(b, LLVMBuildLShr(b, u, c32(gb, 16), ""), c32(gb, 1), "");
    LLVMValueRef rounded = LLVMBuildAdd(b, u, LLVMBuildAdd(b, lsb, c32(gb, 0x7fffu), ""), "");
    LLVMValueRef quiet = LLVMBuildOr(b, u, c32(gb, 0x00400000u), "");
    LLVMValueRef r = LLVMBuildSelect(b, is_nan, quiet, rounded, "");
    return LLVMBuildTrunc(b, LLVMBuildLShr(b, r, c32(gb, 16), ""), gb->i16, "");
}

LLVMValueRef gen_from_f32(gen_builder *gb, LLVMValueRef f, kiln_dtype to) {
    if (to == KILN_F32) return f;
    if (to == KILN_F16) return LLVMBuildBitCast(gb->b, LLVMBuildFPTrunc(gb->b, f, gb->f16, ""), gb->i16, "");
    if (!gb->t->native_bf16_cvt) return bf16_rne_integer(gb, f);
    return LLVMBuildBitCast(gb->b, LLVMBuildFPTrunc(gb->b, f, gb->bf16, ""), gb->i16, "");
}

/* Rounds lo and hi together with the packed cvt (cvt.rn.{f16,bf16}x2.f32 d, hi, lo). */
static void packed_from_f32(gen_builder *gb, LLVMValueRef lo, LLVMValueRef hi, kiln_dtype to, LLVMValueRef out[2]) {
    LLVMValueRef args[2] = {hi, lo};
    LLVMValueRef v = gen_intrinsic(gb, to == KILN_BF16 ? "llvm.nvvm.ff2bf16x2.rn" : "llvm.nvvm.ff2f16x2.rn", NULL, 0, args, 2);
    v = LLVMBuildBitCast(gb->b, v, LLVMVectorType(gb->i16, 2), "");
    out[0] = LLVMBuildExtractElement(gb->b, v, c32(gb, 0), "");
    out[1] = LLVMBuildExtractElement(gb->b, v, c32(gb, 1), "");
}

static int has_packed(gen_builder *gb, kiln_dtype to) {
    return to == KILN_BF16 ? gb->t->native_bf16_cvt : to == KILN_F16 ? gb->t->packed_f16_cvt : 0;
}

static kiln_dtype check_dtype(lua_State *L, int idx) {
    kiln_dtype t;
    const char *s = luaL_checkstring(L, idx);
    if (kiln_dtype_parse(s, &t) != 0) luaL_error(L, "bad dtype '%s'; valid: f32, f16, bf16", s);
    return t;
}

/* b:to_f32(v): f16/bf16/f32 values to f32. */
static int b_to_f32(lua_State *L) {
    gen_builder *gb = gen_check_builder(L, 1);
    gen_value v = gen_arg(L, 2, GEN_F32);
    if (v.kind != GEN_F32 && v.kind != GEN_F16 && v.kind != GEN_BF16)
        return luaL_error(L, "b:to_f32 takes f32, f16 or bf16 values, got %s", gen_kind_name(v.kind));
    kiln_dtype from = v.kind == GEN_F16 ? KILN_F16 : v.kind == GEN_BF16 ? KILN_BF16 : KILN_F32;
    gen_push_value(L, gen_to_f32(gb, v.v, from), GEN_F32, 0, 0);
    return 1;
}

/* b:from_f32(v, dtype): rounds to nearest even. */
static int b_from_f32(lua_State *L) {
    gen_builder *gb = gen_check_builder(L, 1);
    gen_value v = gen_arg(L, 2, GEN_F32);
    if (v.kind != GEN_F32) return luaL_error(L, "b:from_f32 takes an f32 value, got %s", gen_kind_name(v.kind));
    kiln_dtype to = check_dtype(L, 3);
    gen_push_value(L, gen_from_f32(gb, v.v, to), gen_dtype_kind(to), 0, 0);
    return 1;
}

/* b:from_f32_vec(values, dtype): like from_f32 on each, rounding pairs with one packed cvt
 * where the target has it. */
static int b_from_f32_vec(lua_State *L) {
    gen_builder *gb = gen_check_builder(L, 1);
    luaL_checktype(L, 2, LUA_TTABLE);
    kiln_dtype to = check_dtype(L, 3);
    int n = (int)luaL_len(L, 2), packed = has_packed(gb, to);
    lua_createtable(L, n, 0);
    for (int i = 1; i <= n; i++) {
        lua_geti(L, 2, i);
        gen_value a = gen_arg(L, -1, GEN_F32);
        lua_pop(L, 1);
        if (a.kind != GEN_F32) return luaL_error(L, "b:from_f32_vec: element %d is %s, not f32", i, gen_kind_name(a.kind));
        if (packed && i < n) {
            lua_geti(L, 2, i + 1);
            gen_value b = gen_arg(L, -1, GEN_F32);
            lua_pop(L, 1);
            if (b.kind != GEN_F32) return luaL_error(L, "b:from_f32_vec: element %d is not f32", i + 1);
            LLVMValueRef out[2];
            packed_from_f32(gb, a.v, b.v, to, out);
            gen_push_value(L, out[0], gen_dtype_kind(to), 0, 0);
            lua_rawseti(L, -2, i);
            gen_push_value(L, out[1], gen_dtype_kind(to), 0, 0);
            lua_rawseti(L, -2, ++i);
            continue;
        }
        gen_push_value(L, gen_from_f32(gb, a.v, to), gen_dtype_kind(to), 0, 0);
        lua_rawseti(L, -2, i);
    }
    return 1;
}

void gen_register_convert(lua_State *L) {
    static const luaL_Reg methods[] = {
        {"to_f32", b_to_f32}, {"from_f32", b_from_f32}, {"from_f32_vec", b_from_f32_vec}, {NULL, NULL}};
    luaL_setfuncs(L, methods, 0);
}
