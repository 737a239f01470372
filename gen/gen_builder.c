/* gen/gen_builder.c - the builder primitives templates call: typed values over the LLVM C API. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <lauxlib.h>
#include <llvm/Config/llvm-config.h>

#include "gen.h"


#define BUILDER_MT "kiln.builder"
#define VALUE_MT "kiln.value"
#define VAR_MT "kiln.var"

/* ---- values ---- */

static const char *kind_names[] = {"pred", "i32", "i64", "f32", "f16", "bf16", "ptr"};

const char *gen_kind_name(int kind) { return kind_names[kind]; }

/* What every primitive looks up, kept where a Lua state finds it without a lookup by name: the
 * builder of the kernel being built and the value metatable (its address, and a registry reference
 * to push it). A pointer to it lies in the state's extra space (a coroutine copies its creator's),
 * set by register_types on every gen_builder_push. luaL_testudata,
 * luaL_setmetatable and the registry's string keys cost ~2 % of a kernel's generation instructions. */
typedef struct gen_state {
    gen_builder *current; /* between gen_builder_push and gen_builder_finish */
    const void *value_mt, *builder_mt;
    int value_ref;
} gen_state;

static gen_state *state_of(lua_State *L) { return *(gen_state **)lua_getextraspace(L); }

/* The gen_value at idx, or NULL when it is something else (luaL_testudata's test by address). */
static gen_value *value_at(lua_State *L, int idx) {
    void *p = lua_touserdata(L, idx);
    if (!p || !lua_getmetatable(L, idx)) return NULL;
    const void *mt = lua_topointer(L, -1);
    lua_pop(L, 1);
    return mt == state_of(L)->value_mt ? p : NULL;
}

gen_value *gen_push_value(lua_State *L, LLVMValueRef v, int kind, int elem, int as) {
    gen_value *gv = lua_newuserdatauv(L, sizeof *gv, 0);
    gv->v = v;
    gv->kind = kind;
    gv->elem = elem;
    gv->as = as;
    lua_rawgeti(L, LUA_REGISTRYINDEX, state_of(L)->value_ref);
    lua_setmetatable(L, -2);
    return gv;
}

gen_builder *gen_current(lua_State *L) {
    gen_builder *gb = state_of(L)->current;
    if (!gb || !gb->fn) luaL_error(L, "no kernel is being built (call b:kernel{...} first)");
    return gb;
}

gen_builder *gen_check_builder(lua_State *L, int idx) {
    void *p = lua_touserdata(L, idx);
    if (p && lua_getmetatable(L, idx)) {
        const void *mt = lua_topointer(L, -1);
        lua_pop(L, 1);
        if (mt == state_of(L)->builder_mt) return p;
    }
    return luaL_checkudata(L, idx, BUILDER_MT); /* raises the error naming the argument */
}

/* A value argument; Lua numbers become constants of kind `like` (or f32/i32 by form). */
gen_value gen_arg(lua_State *L, int idx, int like) {
    gen_value *p = value_at(L, idx);
    if (p) return *p;
    gen_builder *gb = gen_current(L);
    gen_value c = {0};
    if (lua_type(L, idx) == LUA_TNUMBER) {
        int kind = like >= 0 ? like : (lua_isinteger(L, idx) ? GEN_I32 : GEN_F32);
        c.kind = kind;
        if (kind == GEN_F32) c.v = LLVMConstReal(gb->f32, lua_tonumber(L, idx));
        else if (kind == GEN_I32) c.v = LLVMConstInt(gb->i32, (unsigned long long)luaL_checkinteger(L, idx), 1);
        else if (kind == GEN_I64) c.v = LLVMConstInt(gb->i64, (unsigned long long)luaL_checkinteger(L, idx), 1);
        else luaL_error(L, "a number cannot stand for a %s value", kind_names[kind]);
        return c;
    }
    if (lua_isboolean(L, idx)) {
        c.kind = GEN_PRED;
        c.v = LLVMConstInt(gb->i1, (unsigned long long)lua_toboolean(L, idx), 0);
        return c;
    }
    luaL_error(L, "bad argument #%d: expected a kiln value or number, got %s", idx, luaL_typename(L, idx));
    return c;
}

static gen_value arg_kind(lua_State *L, int idx, int kind) {
    gen_value v = gen_arg(L, idx, kind);
    if (v.kind != kind) luaL_error(L, "bad argument #%d: expected %s, got %s", idx, kind_names[kind], kind_names[v.kind]);
    return v;
}

/* Two operands of one kind (numbers follow the other operand). */
static int pair(lua_State *L, int i, int j, gen_value *a, gen_value *b) {
    gen_value *pa = value_at(L, i), *pb = value_at(L, j);
    int like = pa ? pa->kind : pb ? pb->kind : -1;
    *a = gen_arg(L, i, like);
    *b = gen_arg(L, j, like);
    if (a->kind != b->kind)
        luaL_error(L, "operands differ in type: %s and %s (convert one explicitly)", kind_names[a->kind], kind_names[b->kind]);
    return a->kind;
}

/* ---- arithmetic (metamethods and methods) ---- */

enum { OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_REM, OP_AND, OP_OR, OP_XOR, OP_SHL, OP_SHR };

static int binop(lua_State *L, int op, int i, int j) {
    gen_value *pa = value_at(L, i);
    if (pa && pa->kind == GEN_PTR && (op == OP_ADD || op == OP_SUB)) {
        gen_builder *gb = gen_current(L);
        gen_value idx = gen_arg(L, j, GEN_I64);
        if (idx.kind != GEN_I32 && idx.kind != GEN_I64) luaL_error(L, "pointer offset must be i32 or i64");
        LLVMValueRef off = idx.kind == GEN_I32 ? LLVMBuildSExt(gb->b, idx.v, gb->i64, "") : idx.v;
        if (op == OP_SUB) off = LLVMBuildNeg(gb->b, off, "");
        LLVMValueRef p = LLVMBuildGEP2(gb->b, gen_elem_type(gb, pa->elem), pa->v, &off, 1, "");
        gen_push_value(L, p, GEN_PTR, pa->elem, pa->as);
        return 1;
    }
    gen_builder *gb = gen_current(L);
    gen_value a, b;
    int kind = pair(L, i, j, &a, &b);
    LLVMValueRef r = NULL;
    if (kind == GEN_F32) {
        switch (op) {
        case OP_ADD: r = LLVMBuildFAdd(gb->b, a.v, b.v, ""); break;
        case OP_SUB: r = LLVMBuildFSub(gb->b, a.v, b.v, ""); break;
        case OP_MUL: r = LLVMBuildFMul(gb->b, a.v, b.v, ""); break;
        case OP_DIV: r = LLVMBuildFDiv(gb->b, a.v, b.v, ""); break;
        default: luaL_error(L, "operator not defined on f32 values");
        }
    } else if (kind == GEN_I32 || kind == GEN_I64 || (kind == GEN_PRED && op >= OP_AND && op <= OP_XOR)) {
        switch (op) {
        case OP_ADD: r = LLVMBuildAdd(gb->b, a.v, b.v, ""); break;
        case OP_SUB: r = LLVMBuildSub(gb->b, a.v, b.v, ""); break;
        case OP_MUL: r = LLVMBuildMul(gb->b, a.v, b.v, ""); break;
        case OP_DIV: r = LLVMBuildSDiv(gb->b, a.v, b.v, ""); break;
        case OP_REM: r = LLVMBuildSRem(gb->b, a.v, b.v, ""); break;
        case OP_AND: r = LLVMBuildAnd(gb->b, a.v, b.v, ""); break;
        case OP_OR: r = LLVMBuildOr(gb->b, a.v, b.v, ""); break;
        case OP_XOR: r = LLVMBuildXor(gb->b, a.v, b.v, ""); break;
        case OP_SHL: r = LLVMBuildShl(gb->b, a.v, b.v, ""); break;
        case OP_SHR: r = LLVMBuildLShr(gb->b, a.v, b.v, ""); break;
        }
    } else {
        luaL_error(L, "arithmetic on %s values is not defined (convert with b:to_f32)", kind_names[kind]);
    }
    gen_push_value(L, r, kind, 0, 0);
    return 1;
}

static int m_add(lua_State *L) { return binop(L, OP_ADD, 1, 2); }
static int m_sub(lua_State *L) { return binop(L, OP_SUB, 1, 2); }
static int m_mul(lua_State *L) { return binop(L, OP_MUL, 1, 2); }
static int m_div(lua_State *L) { return binop(L, OP_DIV, 1, 2); }
static int m_idiv(lua_State *L) { return binop(L, OP_DIV, 1, 2); }
static int m_mod(lua_State *L) { return binop(L, OP_REM, 1, 2); }
static int m_band(lua_State *L) { return binop(L, OP_AND, 1, 2); }
static int m_bor(lua_State *L) { return binop(L, OP_OR, 1, 2); }
static int m_bxor(lua_State *L) { return binop(L, OP_XOR, 1, 2); }
static int m_shl(lua_State *L) { return binop(L, OP_SHL, 1, 2); }
static int m_shr(lua_State *L) { return binop(L, OP_SHR, 1, 2); }

static int m_unm(lua_State *L) {
    gen_builder *gb = gen_current(L);
    gen_value a = gen_arg(L, 1, -1);
    if (a.kind == GEN_F32) gen_push_value(L, LLVMBuildFNeg(gb->b, a.v, ""), a.kind, 0, 0);
    else if (a.kind == GEN_I32 || a.kind == GEN_I64) gen_push_value(L, LLVMBuildNeg(gb->b, a.v, ""), a.kind, 0, 0);
    else luaL_error(L, "cannot negate a %s value", kind_names[a.kind]);
    return 1;
}

static int m_tostring(lua_State *L) {
    gen_value *v = luaL_checkudata(L, 1, VALUE_MT);
    if (v->kind == GEN_PTR) lua_pushfstring(L, "kiln.value(ptr %s as%d)", kiln_dtype_name(v->elem), v->as);
    else lua_pushfstring(L, "kiln.value(%s)", kind_names[v->kind]);
    return 1;
}

static int m_kind(lua_State *L) {
    gen_value *v = luaL_checkudata(L, 1, VALUE_MT);
    lua_pushstring(L, kind_names[v->kind]);
    return 1;
}

/* ---- comparisons, select, logic ---- */

static int compare(lua_State *L, LLVMIntPredicate ip, LLVMRealPredicate fp) {
    gen_builder *gb = gen_check_builder(L, 1);
    gen_value a, b;
    int kind = pair(L, 2, 3, &a, &b);
    LLVMValueRef r;
    if (kind == GEN_F32) r = LLVMBuildFCmp(gb->b, fp, a.v, b.v, "");
    else if (kind == GEN_I32 || kind == GEN_I64) r = LLVMBuildICmp(gb->b, ip, a.v, b.v, "");
    else return luaL_error(L, "cannot compare %s values", kind_names[kind]);
    gen_push_value(L, r, GEN_PRED, 0, 0);
    return 1;
}
static int b_lt(lua_State *L) { return compare(L, LLVMIntSLT, LLVMRealOLT); }
static int b_le(lua_State *L) { return compare(L, LLVMIntSLE, LLVMRealOLE); }
static int b_gt(lua_State *L) { return compare(L, LLVMIntSGT, LLVMRealOGT); }
static int b_ge(lua_State *L) { return compare(L, LLVMIntSGE, LLVMRealOGE); }
static int b_eq(lua_State *L) { return compare(L, LLVMIntEQ, LLVMRealOEQ); }
static int b_ne(lua_State *L) { return compare(L, LLVMIntNE, LLVMRealUNE); }
/* b:ltu(a, b): a < b as unsigned integers (i32/i64; a range check lo <= x < hi is ltu(x - lo, hi - lo)). */
static int b_ltu(lua_State *L) {
    gen_builder *gb = gen_check_builder(L, 1);
    gen_value a, b;
    int kind = pair(L, 2, 3, &a, &b);
    if (kind != GEN_I32 && kind != GEN_I64) return luaL_error(L, "ltu compares integers, not %s values", kind_names[kind]);
    gen_push_value(L, LLVMBuildICmp(gb->b, LLVMIntULT, a.v, b.v, ""), GEN_PRED, 0, 0);
    return 1;
}

static int b_select(lua_State *L) {
    gen_builder *gb = gen_check_builder(L, 1);
    gen_value p = arg_kind(L, 2, GEN_PRED), a, b;
    int kind = pair(L, 3, 4, &a, &b);
    gen_push_value(L, LLVMBuildSelect(gb->b, p.v, a.v, b.v, ""), kind, a.elem, a.as);
    return 1;
}

static int b_and(lua_State *L) { return binop(L, OP_AND, 2, 3); }
static int b_or(lua_State *L) { return binop(L, OP_OR, 2, 3); }
static int b_not(lua_State *L) {
    gen_builder *gb = gen_check_builder(L, 1);
    gen_value p = arg_kind(L, 2, GEN_PRED);
    gen_push_value(L, LLVMBuildNot(gb->b, p.v, ""), GEN_PRED, 0, 0);
    return 1;
}

/* ---- constants, casts, math ---- */

static int b_i32(lua_State *L) {
    gen_builder *gb = gen_check_builder(L, 1);
    gen_value v = gen_arg(L, 2, GEN_I32);
    if (v.kind == GEN_I64) v.v = LLVMBuildTrunc(gb->b, v.v, gb->i32, "");
    else if (v.kind == GEN_F32) v.v = LLVMBuildFPToSI(gb->b, v.v, gb->i32, "");
    else if (v.kind != GEN_I32) return luaL_error(L, "cannot make i32 from %s", kind_names[v.kind]);
    gen_push_value(L, v.v, GEN_I32, 0, 0);
    return 1;
}

static int b_i64(lua_State *L) {
    gen_builder *gb = gen_check_builder(L, 1);
    gen_value v = gen_arg(L, 2, GEN_I64);
    if (v.kind == GEN_I32) v.v = LLVMBuildSExt(gb->b, v.v, gb->i64, "");
    else if (v.kind != GEN_I64) return luaL_error(L, "cannot make i64 from %s", kind_names[v.kind]);
    gen_push_value(L, v.v, GEN_I64, 0, 0);
    return 1;
}

static int b_f32(lua_State *L) {
    gen_builder *gb = gen_check_builder(L, 1);
    if (lua_type(L, 2) == LUA_TNUMBER) {
        gen_push_value(L, LLVMConstReal(gb->f32, lua_tonumber(L, 2)), GEN_F32, 0, 0);
        return 1;
    }
    gen_value v = gen_arg(L, 2, -1);
    if (v.kind == GEN_I32 || v.kind == GEN_I64) v.v = LLVMBuildSIToFP(gb->b, v.v, gb->f32, "");
    else if (v.kind == GEN_F16 || v.kind == GEN_BF16) v.v = gen_to_f32(gb, v.v, v.kind == GEN_F16 ? KILN_F16 : KILN_BF16);
    else if (v.kind != GEN_F32) return luaL_error(L, "cannot make f32 from %s", kind_names[v.kind]);
    gen_push_value(L, v.v, GEN_F32, 0, 0);
    return 1;
}

/* Whether this module declared the intrinsic before (then *fn, *ty are its declaration and type); 0 also
 * for one not kept: a name or overload list longer than the cache holds, or the cache full. */
static int cached_intrinsic(gen_builder *gb, const char *name, LLVMTypeRef *over, int nover, LLVMValueRef *fn,
                            LLVMTypeRef *ty) {
    for (int i = 0; i < gb->nintrinsics; i++) {
        if (gb->intrinsics[i].nover != nover || strcmp(gb->intrinsics[i].name, name)) continue;
        int k = 0;
        while (k < nover && gb->intrinsics[i].over[k] == over[k]) k++;
        if (k < nover) continue;
        *fn = gb->intrinsics[i].fn;
        *ty = gb->intrinsics[i].ty;
        return 1;
    }
    return 0;
}

static void keep_intrinsic(gen_builder *gb, const char *name, LLVMTypeRef *over, int nover, LLVMValueRef fn,
                           LLVMTypeRef ty) {
    size_t n = strlen(name);
    if (gb->nintrinsics == GEN_INTRINSICS || n >= GEN_INTRINSIC_NAME || nover > GEN_INTRINSIC_OVER) return;
    int i = gb->nintrinsics++;
    memcpy(gb->intrinsics[i].name, name, n + 1);
    gb->intrinsics[i].nover = nover;
    for (int k = 0; k < nover; k++) gb->intrinsics[i].over[k] = over[k];
    gb->intrinsics[i].fn = fn;
    gb->intrinsics[i].ty = ty;
}

static LLVMValueRef call_intrinsic(gen_builder *gb, const char *name, LLVMTypeRef *over, int nover,
                                   LLVMValueRef *args, int nargs) {
    LLVMValueRef fn;
    LLVMTypeRef ty;
    if (cached_intrinsic(gb, name, over, nover, &fn, &ty)) return LLVMBuildCall2(gb->b, ty, fn, args, (unsigned)nargs, "");
    unsigned id = LLVMLookupIntrinsicID(name, strlen(name));
    /* LLVM asserts (or, in a release build, crashes) on an unknown intrinsic: a name this
     * LLVM does not have is a primitive written for another LLVM release, and one error. */
    if (id == 0) luaL_error(gb->L, "intrinsic '%s' is not known to LLVM %s (a primitive written for another LLVM release)",
                            name, LLVM_VERSION_STRING);
    fn = LLVMGetIntrinsicDeclaration(gb->mod, id, over, (size_t)nover);
    ty = LLVMIntrinsicGetType(gb->ctx, id, over, (size_t)nover);
    keep_intrinsic(gb, name, over, nover, fn, ty);
    return LLVMBuildCall2(gb->b, ty, fn, args, (unsigned)nargs, "");
}

LLVMValueRef gen_intrinsic(gen_builder *gb, const char *name, LLVMTypeRef *over, int nover,
                           LLVMValueRef *args, int nargs) {
    return call_intrinsic(gb, name, over, nover, args, nargs);
}

static int math1(lua_State *L, const char *intrinsic) {
    gen_builder *gb = gen_check_builder(L, 1);
    gen_value a = arg_kind(L, 2, GEN_F32);
    LLVMTypeRef t = gb->f32;
    gen_push_value(L, call_intrinsic(gb, intrinsic, &t, 1, &a.v, 1), GEN_F32, 0, 0);
    return 1;
}
static int b_sqrt(lua_State *L) { return math1(L, "llvm.sqrt"); }
static int b_abs(lua_State *L) { return math1(L, "llvm.fabs"); }

/* 1/sqrt(x) with IEEE sqrt and division: exact rounding, no approximation. */
static int b_rsqrt(lua_State *L) {
    gen_builder *gb = gen_check_builder(L, 1);
    gen_value a = arg_kind(L, 2, GEN_F32);
    LLVMTypeRef t = gb->f32;
    LLVMValueRef s = call_intrinsic(gb, "llvm.sqrt", &t, 1, &a.v, 1);
    gen_push_value(L, LLVMBuildFDiv(gb->b, LLVMConstReal(gb->f32, 1.0), s, ""), GEN_F32, 0, 0);
    return 1;
}

/* b:bits(f32) -> i32 with the same bits; b:from_bits(i32) -> f32 (exponent arithmetic). */
static int b_bits(lua_State *L) {
    gen_builder *gb = gen_check_builder(L, 1);
    gen_value a = arg_kind(L, 2, GEN_F32);
    gen_push_value(L, LLVMBuildBitCast(gb->b, a.v, gb->i32, ""), GEN_I32, 0, 0);
    return 1;
}
static int b_from_bits(lua_State *L) {
    gen_builder *gb = gen_check_builder(L, 1);
    gen_value a = arg_kind(L, 2, GEN_I32);
    gen_push_value(L, LLVMBuildBitCast(gb->b, a.v, gb->f32, ""), GEN_F32, 0, 0);
    return 1;
}

static int b_fma(lua_State *L) {
    gen_builder *gb = gen_check_builder(L, 1);
    LLVMValueRef args[3];
    for (int i = 0; i < 3; i++) args[i] = arg_kind(L, 2 + i, GEN_F32).v;
    LLVMTypeRef t = gb->f32;
    gen_push_value(L, call_intrinsic(gb, "llvm.fma", &t, 1, args, 3), GEN_F32, 0, 0);
    return 1;
}

static int minmax(lua_State *L, int is_max) {
    gen_builder *gb = gen_check_builder(L, 1);
    gen_value a, b;
    int kind = pair(L, 2, 3, &a, &b);
    LLVMValueRef r;
    if (kind == GEN_F32) {
        LLVMTypeRef t = gb->f32;
        LLVMValueRef args[2] = {a.v, b.v};
        r = call_intrinsic(gb, is_max ? "llvm.maxnum" : "llvm.minnum", &t, 1, args, 2);
    } else if (kind == GEN_I32 || kind == GEN_I64) {
        LLVMValueRef c = LLVMBuildICmp(gb->b, is_max ? LLVMIntSGT : LLVMIntSLT, a.v, b.v, "");
        r = LLVMBuildSelect(gb->b, c, a.v, b.v, "");
    } else {
        return luaL_error(L, "min/max not defined on %s", kind_names[kind]);
    }
    gen_push_value(L, r, kind, 0, 0);
    return 1;
}
static int b_max(lua_State *L) { return minmax(L, 1); }
static int b_min(lua_State *L) { return minmax(L, 0); }

/* ---- special registers ---- */

static int sreg(lua_State *L, const char *reg) {
    gen_builder *gb = gen_check_builder(L, 1);
    const char *axis = luaL_optstring(L, 2, "x");
    if (strcmp(axis, "x") && strcmp(axis, "y") && strcmp(axis, "z"))
        return luaL_error(L, "bad axis '%s'; valid: x, y, z", axis);
    char name[64];
    snprintf(name, sizeof name, "llvm.nvvm.read.ptx.sreg.%s.%s", reg, axis);
    gen_push_value(L, call_intrinsic(gb, name, NULL, 0, NULL, 0), GEN_I32, 0, 0);
    return 1;
}
static int b_tid(lua_State *L) { return sreg(L, "tid"); }
static int b_ntid(lua_State *L) { return sreg(L, "ntid"); }
static int b_ctaid(lua_State *L) { return sreg(L, "ctaid"); }
static int b_nctaid(lua_State *L) { return sreg(L, "nctaid"); }

static int b_target(lua_State *L) {
    gen_builder *gb = gen_check_builder(L, 1);
    gen_builder_push_target(L, gb->t);
    return 1;
}

void gen_builder_push_target(lua_State *L, const gen_target *t) {
    lua_createtable(L, 0, 20);
#define FIELD_B(name) (lua_pushboolean(L, t->name), lua_setfield(L, -2, #name))
#define FIELD_I(name) (lua_pushinteger(L, t->name), lua_setfield(L, -2, #name))
    FIELD_I(sm); /* 1090 for sm_90a (KILN_SM_ARCH + 90): messages use name */
    char name[16];
    lua_pushstring(L, kiln_sm_name(t->sm, name)), lua_setfield(L, -2, "name");
    lua_pushboolean(L, kiln_sm_is_arch(t->sm)), lua_setfield(L, -2, "arch");
    FIELD_B(wgmma);
    FIELD_B(native_bf16_cvt);
    FIELD_B(packed_f16_cvt);
    FIELD_B(f16_arith);
    FIELD_B(bf16_arith);
    FIELD_B(mma_m16n8k8_f16);
    FIELD_B(mma_m16n8k16);
    FIELD_B(ldmatrix);
    FIELD_B(cp_async);
    FIELD_I(smem_static_max);
    FIELD_I(smem_optin_max);
    FIELD_I(max_threads);
    FIELD_I(regs_per_sm);
    FIELD_I(threads_per_sm);
#undef FIELD_B
#undef FIELD_I
    /* ptxas facts (gen_target.c's table, beside the SM table): target.ptxas_rolled_mma_k, target.ptxas_f16_row_regs.
     * Every SM table row has one (gen_test); without one a template reads nil (no roll; f16 arithmetic errors). */
    const gen_ptxas_facts *p = gen_ptxas_find(t->sm);
    if (p) {
        lua_pushboolean(L, p->rolled_mma_k), lua_setfield(L, -2, "ptxas_rolled_mma_k");
        lua_pushinteger(L, p->f16_row_regs), lua_setfield(L, -2, "ptxas_f16_row_regs");
        lua_pushboolean(L, p->dropout_o3), lua_setfield(L, -2, "ptxas_dropout_o3");
        lua_pushboolean(L, p->mask_dropout_o3), lua_setfield(L, -2, "ptxas_mask_dropout_o3");
        lua_pushboolean(L, p->neox_o3), lua_setfield(L, -2, "ptxas_neox_o3");
        lua_pushboolean(L, p->neox_d128_o3), lua_setfield(L, -2, "ptxas_neox_d128_o3");
    }
}

/* ---- registration ---- */

static const luaL_Reg value_meta[] = {
    {"__add", m_add}, {"__sub", m_sub}, {"__mul", m_mul}, {"__div", m_div}, {"__idiv", m_idiv},
    {"__mod", m_mod}, {"__unm", m_unm}, {"__band", m_band}, {"__bor", m_bor}, {"__bxor", m_bxor},
    {"__shl", m_shl}, {"__shr", m_shr}, {"__tostring", m_tostring}, {NULL, NULL}};

static const luaL_Reg value_methods[] = {{"kind", m_kind}, {NULL, NULL}};

static const luaL_Reg builder_methods[] = {
    {"lt", b_lt}, {"le", b_le}, {"gt", b_gt}, {"ge", b_ge}, {"eq", b_eq}, {"ne", b_ne}, {"ltu", b_ltu},
    {"select", b_select}, {"and_", b_and}, {"or_", b_or}, {"not_", b_not},
    {"i32", b_i32}, {"i64", b_i64}, {"f32", b_f32},
    {"sqrt", b_sqrt}, {"rsqrt", b_rsqrt}, {"abs", b_abs}, {"fma", b_fma},
    {"max", b_max}, {"min", b_min}, {"bits", b_bits}, {"from_bits", b_from_bits},
    {"tid", b_tid}, {"ntid", b_ntid}, {"ctaid", b_ctaid}, {"nctaid", b_nctaid},
    {"target", b_target},
    {NULL, NULL}};

static void register_types(lua_State *L) {
    /* once per Lua state, kept by the registry; the extra space (which Lua leaves uninitialized) is
     * set from it here, before any primitive can run */
    gen_state *gs = NULL;
    if (lua_getfield(L, LUA_REGISTRYINDEX, "kiln.state") == LUA_TUSERDATA) gs = lua_touserdata(L, -1);
    lua_pop(L, 1);
    if (!gs) {
        gs = lua_newuserdatauv(L, sizeof *gs, 0);
        memset(gs, 0, sizeof *gs);
        lua_setfield(L, LUA_REGISTRYINDEX, "kiln.state");
    }
    *(gen_state **)lua_getextraspace(L) = gs;
    if (luaL_newmetatable(L, VALUE_MT)) {
        luaL_setfuncs(L, value_meta, 0);
        luaL_newlib(L, value_methods);
        lua_setfield(L, -2, "__index");
    }
    if (!gs->value_mt) {
        gs->value_mt = lua_topointer(L, -1);
        lua_pushvalue(L, -1);
        gs->value_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    }
    lua_pop(L, 1);
    if (luaL_newmetatable(L, BUILDER_MT)) {
        lua_newtable(L);
        luaL_setfuncs(L, builder_methods, 0);
        gen_register_memory(L);  /* gen_memory.c: kernel, load/store, shared, vars */
        gen_register_control(L); /* gen_control.c: if/for/exit, barriers, warp/block ops */
        gen_register_convert(L); /* gen_convert.c: dtype conversions */
        gen_register_tensor(L);  /* gen_tensor.c: mma, ldmatrix, cp.async, ex2/lg2 */
        gen_register_hopper(L);  /* gen_hopper.c: mbarrier, fence.proxy.async, setmaxnreg, wgmma sync */
        lua_setfield(L, -2, "__index");
    }
    gs->builder_mt = lua_topointer(L, -1);
    lua_pop(L, 1);
    gen_register_vars(L);
}

gen_builder *gen_builder_push(lua_State *L, LLVMContextRef ctx, LLVMModuleRef mod,
                              const gen_target *target, kiln_kernel_meta *meta) {
    register_types(L);
    gen_builder *gb = lua_newuserdatauv(L, sizeof *gb, 0);
    memset(gb, 0, sizeof *gb);
    gb->L = L;
    gb->ctx = ctx;
    gb->mod = mod;
    gb->t = target;
    gb->meta = meta;
    gb->ptx_needed = target->ptx_min;
    gb->i1 = LLVMInt1TypeInContext(ctx);
    gb->i8 = LLVMInt8TypeInContext(ctx);
    gb->i16 = LLVMInt16TypeInContext(ctx);
    gb->i32 = LLVMInt32TypeInContext(ctx);
    gb->i64 = LLVMInt64TypeInContext(ctx);
    gb->f32 = LLVMFloatTypeInContext(ctx);
    gb->f16 = LLVMHalfTypeInContext(ctx);
    gb->bf16 = LLVMBFloatTypeInContext(ctx);
    gb->void_t = LLVMVoidTypeInContext(ctx);
    gb->ptr_global = LLVMPointerTypeInContext(ctx, GEN_AS_GLOBAL);
    gb->ptr_shared = LLVMPointerTypeInContext(ctx, GEN_AS_SHARED);
    gb->b = LLVMCreateBuilderInContext(ctx);
    luaL_setmetatable(L, BUILDER_MT);
    state_of(L)->current = gb;
    return gb;
}

kiln_status gen_builder_finish(gen_builder *gb, unsigned *static_smem, int *ptx_needed, kiln_error *err) {
    kiln_status st = KILN_OK;
    if (!gb->fn) st = kiln_fail(err, KILN_EGEN, "template built no kernel (b:kernel{...} was never called)");
    else if (gb->depth != 0) st = kiln_fail(err, KILN_EGEN, "template left an if/for block open");
    else if (!gb->finished) gen_close_kernel(gb);
    *static_smem = gb->smem_bytes;
    *ptx_needed = gb->ptx_needed;
    if (gb->b) LLVMDisposeBuilder(gb->b);
    gb->b = NULL;
    if (state_of(gb->L)->current == gb) state_of(gb->L)->current = NULL;
    return st;
}

/* ---- optional timing of the primitives (kiln_gen_options.time_builder) ---- */

typedef struct prim_clock {
    double ms;  /* time inside primitives that called no other primitive */
    int nested; /* the running primitive called another one (through a Lua callback) */
} prim_clock;

static double prim_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

/* Calls the primitive in upvalue 1 and adds its time to the clock in upvalue 2, unless it ran
 * Lua code that called primitives itself (b:if_/b:for_ bodies): that time is the template's. */
static int timed_primitive(lua_State *L) {
    prim_clock *c = lua_touserdata(L, lua_upvalueindex(2));
    int outer_nested = c->nested;
    c->nested = 0;
    int n = lua_gettop(L);
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1);
    double t0 = prim_now();
    lua_call(L, n, LUA_MULTRET);
    if (!c->nested) c->ms += prim_now() - t0;
    c->nested = outer_nested | 1;
    return lua_gettop(L);
}

/* Wraps every C function of the table on top of the stack (and of its __index table). */
static void wrap_table(lua_State *L, prim_clock *c) {
    lua_pushnil(L);
    while (lua_next(L, -2)) {
        if (lua_iscfunction(L, -1) && lua_tocfunction(L, -1) != timed_primitive) {
            lua_pushvalue(L, -2); /* key */
            lua_insert(L, -2);    /* key key fn */
            lua_pushlightuserdata(L, c);
            lua_pushcclosure(L, timed_primitive, 2);
            lua_rawset(L, -4);
        } else {
            if (lua_istable(L, -1) && lua_type(L, -2) == LUA_TSTRING && !strcmp(lua_tostring(L, -2), "__index"))
                wrap_table(L, c);
            lua_pop(L, 1);
        }
    }
}

void gen_builder_time_primitives(lua_State *L) {
    if (lua_getfield(L, LUA_REGISTRYINDEX, "kiln.prim_clock") != LUA_TNIL) {
        lua_pop(L, 1);
        return;
    }
    lua_pop(L, 1);
    prim_clock *c = lua_newuserdatauv(L, sizeof *c, 0);
    memset(c, 0, sizeof *c);
    lua_setfield(L, LUA_REGISTRYINDEX, "kiln.prim_clock"); /* keeps it alive */
    register_types(L);
    static const char *const mts[] = {BUILDER_MT, VALUE_MT, VAR_MT};
    for (size_t i = 0; i < sizeof mts / sizeof mts[0]; i++) {
        luaL_getmetatable(L, mts[i]);
        if (lua_istable(L, -1)) wrap_table(L, c);
        lua_pop(L, 1);
    }
}

double gen_builder_time_reset(lua_State *L) {
    double ms = -1;
    if (lua_getfield(L, LUA_REGISTRYINDEX, "kiln.prim_clock") == LUA_TUSERDATA) {
        prim_clock *c = lua_touserdata(L, -1);
        ms = c->ms;
        c->ms = 0;
        c->nested = 0;
    }
    lua_pop(L, 1);
    return ms;
}
