/* gen/gen_tensor.c - warp-level matrix primitives (mma, ldmatrix, cp.async) and the approximate
 * special functions attention uses (ex2.approx, lg2.approx). */
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
    gen_push_value(L, gen_intrinsic(gb, "llvm.nvvm.ex2.approx.f", NULL, 0, &a.v, 1), GEN_F32, 0, 0);
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

void gen_register_tensor(lua_State *L) {
    static const luaL_Reg methods[] = {
        {"ex2_approx", b_ex2_approx}, {"lg2_approx", b_lg2_approx}, {"max_registers", b_max_registers},
        {NULL, NULL}};
    luaL_setfuncs(L, methods, 0);
}
