/* gen/gen_memory.c - kernel signature, loads/stores (vector, predicated), shared memory, vars. */
#include <stdio.h>
#include <string.h>

#include <lauxlib.h>

#include "gen.h"
#include "kiln/tensor_map.h"

#define VAR_MT "kiln.var"

LLVMTypeRef gen_elem_type(gen_builder *gb, int dtype) {
    return dtype == KILN_F32 ? gb->f32 : dtype == KILN_I32 ? gb->i32 : gb->i16;
}

int gen_dtype_kind(int dtype) {
    return dtype == KILN_F32 ? GEN_F32 : dtype == KILN_F16 ? GEN_F16 : dtype == KILN_I32 ? GEN_I32 : GEN_BF16;
}

static int check_dtype(lua_State *L, int idx) {
    kiln_dtype t;
    const char *s = luaL_checkstring(L, idx);
    if (kiln_dtype_parse(s, &t) != 0) luaL_error(L, "bad dtype '%s'; valid: f32, f16, bf16", s);
    return (int)t;
}

/* ---- kernel signature ---- */

static const char *param_kinds[] = {"ptr", "i32", "i64", "f32", "tensormap"};

/* A kernel property NVPTX prints as a directive: since LLVM 21 a function attribute ("nvvm.maxntid" ->
 * .maxntid, "nvvm.maxnreg" -> .maxnreg); NVPTX no longer reads nvvm.annotations built through the API. */
void gen_kernel_attr(gen_builder *gb, const char *key, unsigned value) {
    char text[16];
    int n = snprintf(text, sizeof text, "%u", value);
    LLVMAddAttributeAtIndex(gb->fn, LLVMAttributeFunctionIndex,
                            LLVMCreateStringAttribute(gb->ctx, key, (unsigned)strlen(key), text, (unsigned)n));
}

static void add_attr(gen_builder *gb, unsigned idx, const char *name) {
    unsigned kind = LLVMGetEnumAttributeKindForName(name, strlen(name));
    LLVMAddAttributeAtIndex(gb->fn, idx, LLVMCreateEnumAttribute(gb->ctx, kind, 0));
}

/* Reads one {name, kind, dtype, readonly=} declaration at the top of the stack. */
static void read_param(lua_State *L, kiln_param *p, int *readonly) {
    lua_geti(L, -1, 1);
    lua_geti(L, -2, 2);
    lua_geti(L, -3, 3);
    const char *name = luaL_checkstring(L, -3), *kind = luaL_checkstring(L, -2);
    const char *dt = lua_isstring(L, -1) ? lua_tostring(L, -1) : "f32";
    if (strlen(name) >= sizeof p->name) luaL_error(L, "parameter name too long: %s", name);
    snprintf(p->name, sizeof p->name, "%s", name);
    int k = 0;
    while (k < 5 && strcmp(kind, param_kinds[k])) k++;
    if (k == 5) luaL_error(L, "parameter '%s': bad kind '%s'; valid: ptr, i32, i64, f32, tensormap", name, kind);
    p->kind = (kiln_param_kind)k;
    if (kiln_elem_parse(dt, &p->dtype) != 0)
        luaL_error(L, "parameter '%s': bad dtype '%s'; valid: f32, f16, bf16, i32 (index tensors)", name, dt);
    lua_pop(L, 3);
    lua_getfield(L, -1, "readonly");
    *readonly = lua_toboolean(L, -1);
    lua_pop(L, 1);
}

/* b:kernel{ params = { {"x", "ptr", "bf16", readonly=true}, {"rows", "i32"}, ... } }
 * A pointer's element type is a float dtype or "i32" (index tensors: loads give i32 values).
 * Creates the entry function and returns a table of its parameters by name. */
static int b_kernel(lua_State *L) {
    gen_builder *gb = gen_check_builder(L, 1);
    luaL_checktype(L, 2, LUA_TTABLE);
    if (gb->fn) return luaL_error(L, "b:kernel{} called twice (one kernel per module)");
    if (lua_getfield(L, 2, "params") != LUA_TTABLE) return luaL_error(L, "b:kernel{} needs a params list");
    kiln_kernel_meta *m = gb->meta;
    int n = (int)luaL_len(L, -1), readonly[KILN_MAX_PARAMS];
    if (n > KILN_MAX_PARAMS) return luaL_error(L, "too many kernel parameters (max %d)", KILN_MAX_PARAMS);
    LLVMTypeRef types[KILN_MAX_PARAMS];
    for (int i = 0; i < n; i++) {
        lua_geti(L, -1, i + 1);
        luaL_checktype(L, -1, LUA_TTABLE);
        read_param(L, &m->params[i], &readonly[i]);
        lua_pop(L, 1);
        LLVMTypeRef ts[] = {gb->ptr_global, gb->i32, gb->i64, gb->f32, LLVMPointerTypeInContext(gb->ctx, 0)};
        types[i] = ts[m->params[i].kind];
    }
    m->nparams = n;
    LLVMTypeRef fty = LLVMFunctionType(gb->void_t, types, (unsigned)n, 0);
    gb->fn = LLVMAddFunction(gb->mod, m->entry, fty);
    LLVMSetFunctionCallConv(gb->fn, LLVMPTXKernelCallConv); /* .entry */
    gen_kernel_attr(gb, "nvvm.maxntid", m->block[0] * m->block[1] * m->block[2]);
    add_attr(gb, LLVMAttributeFunctionIndex, "nounwind");
    gb->entry = LLVMAppendBasicBlockInContext(gb->ctx, gb->fn, "entry");
    gb->body = LLVMAppendBasicBlockInContext(gb->ctx, gb->fn, "body");
    gb->exit_bb = LLVMAppendBasicBlockInContext(gb->ctx, gb->fn, "exit");
    LLVMPositionBuilderAtEnd(gb->b, gb->body);
    lua_createtable(L, 0, n);
    for (int i = 0; i < n; i++) {
        LLVMValueRef p = LLVMGetParam(gb->fn, (unsigned)i);
        LLVMSetValueName2(p, m->params[i].name, strlen(m->params[i].name));
        if (m->params[i].kind == KILN_PARAM_PTR) {
            add_attr(gb, (unsigned)i + 1, "noalias");
            if (readonly[i]) add_attr(gb, (unsigned)i + 1, "readonly");
            gen_push_value(L, p, GEN_PTR, m->params[i].dtype, GEN_AS_GLOBAL);
        } else if (m->params[i].kind == KILN_PARAM_TMAP) {
            /* ptr byval([128 x i8]) align 64 "nvvm.grid_constant": NVPTX passes it in param space and
             * takes its generic address (cvta.param) for cp.async.bulk.tensor; only b:tma_load uses it */
            unsigned byval = LLVMGetEnumAttributeKindForName("byval", 5), align = LLVMGetEnumAttributeKindForName("align", 5);
            LLVMAddAttributeAtIndex(gb->fn, (unsigned)i + 1,
                                    LLVMCreateTypeAttribute(gb->ctx, byval, LLVMArrayType2(gb->i8, KILN_TMAP_BYTES)));
            LLVMAddAttributeAtIndex(gb->fn, (unsigned)i + 1, LLVMCreateEnumAttribute(gb->ctx, align, KILN_TMAP_ALIGN));
            LLVMAddAttributeAtIndex(gb->fn, (unsigned)i + 1, LLVMCreateStringAttribute(gb->ctx, "nvvm.grid_constant", 18, "", 0));
            gen_push_value(L, p, GEN_PTR, KILN_F32, GEN_AS_GENERIC); /* b:tma_load checks it is this parameter */
        } else {
            static const int vk[] = {GEN_PTR, GEN_I32, GEN_I64, GEN_F32};
            gen_push_value(L, p, vk[m->params[i].kind], 0, 0);
        }
        lua_setfield(L, -2, m->params[i].name);
    }
    return 1;
}

/* A thread may use at most 255 registers (the SM's register file is in the SM table). */
#define THREAD_REGISTERS_MAX 255

void gen_close_kernel(gen_builder *gb) {
    /* Without .maxnreg, ptxas spills at ~56-64 registers on some kernels even when the block
     * size leaves room for more; say how many the block size allows (or what the template chose). */
    unsigned threads = gb->meta->block[0] * gb->meta->block[1] * gb->meta->block[2];
    unsigned cap = (gb->t->regs_per_sm / threads) & ~7u;
    if (cap > THREAD_REGISTERS_MAX) cap = THREAD_REGISTERS_MAX;
    gen_kernel_attr(gb, "nvvm.maxnreg", gb->max_registers ? gb->max_registers : cap);
    LLVMBuildBr(gb->b, gb->exit_bb);
    LLVMPositionBuilderAtEnd(gb->b, gb->entry);
    LLVMBuildBr(gb->b, gb->body);
    LLVMPositionBuilderAtEnd(gb->b, gb->exit_bb);
    LLVMBuildRetVoid(gb->b);
    gb->finished = 1;
}

/* ---- loads and stores ---- */

typedef struct mem_opts {
    unsigned align;
    gen_value pred;
    int has_pred;
} mem_opts;

static mem_opts read_opts(lua_State *L, int idx, const gen_value *ptr) {
    mem_opts o = {(unsigned)kiln_dtype_size((kiln_dtype)ptr->elem), {0}, 0};
    if (lua_istable(L, idx)) {
        if (lua_getfield(L, idx, "align") != LUA_TNIL) {
            lua_Integer a = luaL_checkinteger(L, -1);
            if (a <= 0 || (a & (a - 1)) || a > 256) luaL_error(L, "align must be a power of two <= 256");
            o.align = (unsigned)a;
        }
        lua_pop(L, 1);
        if (lua_getfield(L, idx, "pred") != LUA_TNIL) {
            o.pred = gen_arg(L, lua_gettop(L), -1);
            if (o.pred.kind != GEN_PRED) luaL_error(L, "pred must be a predicate");
            o.has_pred = 1;
        }
        lua_pop(L, 1);
    }
    return o;
}

static gen_value check_ptr(lua_State *L, int idx) {
    gen_value p = gen_arg(L, idx, -1);
    if (p.kind != GEN_PTR) luaL_error(L, "bad argument #%d: expected a pointer, got %s", idx, gen_kind_name(p.kind));
    return p;
}

/* Loads (vals out) or stores (vals in) n elements at ptr, as vector pieces of at most 16 bytes
 * and at most the promised alignment. */
static void emit_access(gen_builder *gb, gen_value ptr, int n, unsigned align, LLVMValueRef *vals, int store) {
    LLVMTypeRef et = gen_elem_type(gb, ptr.elem);
    unsigned es = (unsigned)kiln_dtype_size((kiln_dtype)ptr.elem);
    unsigned piece = align < 16 ? align : 16;
    if (piece < es) piece = es;
    int per = (int)(piece / es);
    for (int i = 0; i < n; i += per) {
        int k = per < n - i ? per : n - i;
        LLVMValueRef off = LLVMConstInt(gb->i64, (unsigned long long)i, 0);
        LLVMValueRef addr = i ? LLVMBuildGEP2(gb->b, et, ptr.v, &off, 1, "") : ptr.v;
        unsigned a = i ? piece : (align > es ? align : es);
        LLVMTypeRef ty = k == 1 ? et : LLVMVectorType(et, (unsigned)k);
        LLVMValueRef inst;
        if (store) {
            LLVMValueRef v = vals[i];
            if (k > 1) {
                v = LLVMGetUndef(ty);
                for (int j = 0; j < k; j++) v = LLVMBuildInsertElement(gb->b, v, vals[i + j], LLVMConstInt(gb->i32, (unsigned)j, 0), "");
            }
            inst = LLVMBuildStore(gb->b, v, addr);
        } else {
            inst = LLVMBuildLoad2(gb->b, ty, addr, "");
            if (k == 1) vals[i] = inst;
            for (int j = 0; k > 1 && j < k; j++) vals[i + j] = LLVMBuildExtractElement(gb->b, inst, LLVMConstInt(gb->i32, (unsigned)j, 0), "");
        }
        LLVMSetAlignment(inst, a);
    }
}

#define MAX_VEC 64

/* b:load_vec(ptr, n [, {align=, pred=}]) -> table of n values (zeros where pred is false). */
static int load_common(lua_State *L, int n, int as_table) {
    gen_builder *gb = gen_check_builder(L, 1);
    gen_value ptr = check_ptr(L, 2);
    mem_opts o = read_opts(L, as_table ? 4 : 3, &ptr);
    if (n < 1 || n > MAX_VEC) return luaL_error(L, "vector length %d out of range 1..%d", n, MAX_VEC);
    if (o.align % kiln_dtype_size((kiln_dtype)ptr.elem)) return luaL_error(L, "align smaller than the element size");
    LLVMValueRef vals[MAX_VEC];
    LLVMTypeRef et = gen_elem_type(gb, ptr.elem);
    if (o.has_pred) {
        LLVMBasicBlockRef from = LLVMGetInsertBlock(gb->b);
        LLVMBasicBlockRef then = LLVMAppendBasicBlockInContext(gb->ctx, gb->fn, "ld.then");
        LLVMBasicBlockRef join = LLVMAppendBasicBlockInContext(gb->ctx, gb->fn, "ld.join");
        LLVMBuildCondBr(gb->b, o.pred.v, then, join);
        LLVMPositionBuilderAtEnd(gb->b, then);
        emit_access(gb, ptr, n, o.align, vals, 0);
        LLVMBasicBlockRef then_end = LLVMGetInsertBlock(gb->b);
        LLVMBuildBr(gb->b, join);
        LLVMPositionBuilderAtEnd(gb->b, join);
        for (int i = 0; i < n; i++) {
            LLVMValueRef phi = LLVMBuildPhi(gb->b, et, "");
            LLVMValueRef in[2] = {vals[i], LLVMConstNull(et)};
            LLVMBasicBlockRef bbs[2] = {then_end, from};
            LLVMAddIncoming(phi, in, bbs, 2);
            vals[i] = phi;
        }
    } else {
        emit_access(gb, ptr, n, o.align, vals, 0);
    }
    int kind = gen_dtype_kind(ptr.elem);
    if (!as_table) {
        gen_push_value(L, vals[0], kind, 0, 0);
        return 1;
    }
    lua_createtable(L, n, 0);
    for (int i = 0; i < n; i++) {
        gen_push_value(L, vals[i], kind, 0, 0);
        lua_rawseti(L, -2, i + 1);
    }
    return 1;
}

static int b_load(lua_State *L) { return load_common(L, 1, 0); }
static int b_load_vec(lua_State *L) { return load_common(L, (int)luaL_checkinteger(L, 3), 1); }

/* b:store_vec(ptr, values [, {align=, pred=}]) and b:store(ptr, value [, opts]). */
static int store_common(lua_State *L, int as_table) {
    gen_builder *gb = gen_check_builder(L, 1);
    gen_value ptr = check_ptr(L, 2);
    mem_opts o = read_opts(L, 4, &ptr);
    int kind = gen_dtype_kind(ptr.elem), n = 1;
    LLVMValueRef vals[MAX_VEC];
    if (as_table) {
        luaL_checktype(L, 3, LUA_TTABLE);
        n = (int)luaL_len(L, 3);
        if (n < 1 || n > MAX_VEC) return luaL_error(L, "vector length %d out of range 1..%d", n, MAX_VEC);
    }
    for (int i = 0; i < n; i++) {
        if (as_table) lua_geti(L, 3, i + 1);
        else lua_pushvalue(L, 3);
        gen_value v = gen_arg(L, lua_gettop(L), kind);
        if (v.kind != kind)
            return luaL_error(L, "storing a %s value through a %s pointer (convert with b:from_f32)",
                              gen_kind_name(v.kind), kiln_dtype_name((kiln_dtype)ptr.elem));
        vals[i] = v.v;
        lua_pop(L, 1);
    }
    if (o.has_pred) {
        LLVMBasicBlockRef then = LLVMAppendBasicBlockInContext(gb->ctx, gb->fn, "st.then");
        LLVMBasicBlockRef join = LLVMAppendBasicBlockInContext(gb->ctx, gb->fn, "st.join");
        LLVMBuildCondBr(gb->b, o.pred.v, then, join);
        LLVMPositionBuilderAtEnd(gb->b, then);
        emit_access(gb, ptr, n, o.align, vals, 1);
        LLVMBuildBr(gb->b, join);
        LLVMPositionBuilderAtEnd(gb->b, join);
    } else {
        emit_access(gb, ptr, n, o.align, vals, 1);
    }
    return 0;
}

static int b_store(lua_State *L) { return store_common(L, 0); }
static int b_store_vec(lua_State *L) { return store_common(L, 1); }

/* b:is_null(ptr) -> predicate: the pointer argument is NULL (optional outputs). */
static int b_is_null(lua_State *L) {
    gen_builder *gb = gen_check_builder(L, 1);
    gen_value p = check_ptr(L, 2);
    gen_push_value(L, LLVMBuildIsNull(gb->b, p.v, ""), GEN_PRED, 0, 0);
    return 1;
}

/* b:atomic_add(ptr, value): *ptr += value as one atomic read-modify-write on an f32 element of
 * global or shared memory (atomicrmw fadd: red/atom.add.f32, which every target has). The order
 * in which threads' additions land is not fixed, so f32 sums through it are not reproducible. */
static int b_atomic_add(lua_State *L) {
    gen_builder *gb = gen_check_builder(L, 1);
    gen_value ptr = check_ptr(L, 2);
    if (ptr.elem != KILN_F32 || ptr.as == GEN_AS_GENERIC)
        return luaL_error(L, "b:atomic_add needs a pointer to f32 in global or shared memory");
    gen_value v = gen_arg(L, 3, GEN_F32);
    if (v.kind != GEN_F32) return luaL_error(L, "b:atomic_add adds an f32 value, got %s", gen_kind_name(v.kind));
    LLVMBuildAtomicRMW(gb->b, LLVMAtomicRMWBinOpFAdd, ptr.v, v.v, LLVMAtomicOrderingMonotonic, 0);
    return 0;
}

/* ---- shared memory ---- */

/* b:shared(dtype, count [, align]) -> pointer to a block-wide array in shared memory (align 16 unless
 * given: a power of two up to 1024). */
static int b_shared(lua_State *L) {
    gen_builder *gb = gen_check_builder(L, 1);
    int dt = check_dtype(L, 2);
    lua_Integer n = luaL_checkinteger(L, 3), align = luaL_optinteger(L, 4, 16);
    if (n <= 0 || n > (1 << 20)) return luaL_error(L, "shared array length %d out of range", (int)n);
    /* up to 1024: a 128B-swizzled wgmma or TMA tile starts on its swizzle pattern (docs/hopper.md) */
    if (align <= 0 || (align & (align - 1)) || align > 1024) return luaL_error(L, "align must be a power of two <= 1024");
    unsigned bytes = (unsigned)(n * (lua_Integer)kiln_dtype_size((kiln_dtype)dt));
    unsigned start = (gb->smem_bytes + (unsigned)align - 1) & ~((unsigned)align - 1);
    if (start + bytes > gb->t->smem_static_max)
        return luaL_error(L, "static shared memory would reach %d bytes; %s allows %d", (int)(start + bytes),
                          kiln_sm_name(gb->t->sm, (char[16]){0}), (int)gb->t->smem_static_max);
    char name[32];
    snprintf(name, sizeof name, "kiln_smem%d", gb->nshared++);
    LLVMTypeRef at = LLVMArrayType2(gen_elem_type(gb, dt), (unsigned long long)n);
    LLVMValueRef g = LLVMAddGlobalInAddressSpace(gb->mod, at, name, GEN_AS_SHARED);
    LLVMSetLinkage(g, LLVMInternalLinkage);
    LLVMSetInitializer(g, LLVMGetUndef(at));
    LLVMSetAlignment(g, (unsigned)align);
    gb->smem_bytes = start + bytes;
    gen_push_value(L, g, GEN_PTR, dt, GEN_AS_SHARED);
    return 1;
}

/* ---- variables (allocas that mem2reg turns into registers) ---- */

typedef struct gen_var {
    LLVMValueRef slot;
    int kind;
} gen_var;

static LLVMTypeRef kind_type(gen_builder *gb, int kind) {
    switch (kind) {
    case GEN_PRED: return gb->i1;
    case GEN_I32: return gb->i32;
    case GEN_I64: return gb->i64;
    case GEN_F32: return gb->f32;
    default: return gb->i16;
    }
}

static int kind_from_name(lua_State *L, const char *s) {
    static const char *names[] = {"pred", "i32", "i64", "f32", "f16", "bf16"};
    for (int i = 0; i < 6; i++)
        if (!strcmp(s, names[i])) return i;
    return luaL_error(L, "bad variable type '%s'; valid: pred, i32, i64, f32, f16, bf16", s);
}

/* b:var("f32", init) -> variable with :get() and :set(v). */
static int b_var(lua_State *L) {
    gen_builder *gb = gen_check_builder(L, 1);
    if (!gb->fn) return luaL_error(L, "b:var needs a kernel (call b:kernel{} first)");
    int kind = kind_from_name(L, luaL_checkstring(L, 2));
    LLVMBuilderRef ab = LLVMCreateBuilderInContext(gb->ctx);
    LLVMPositionBuilderAtEnd(ab, gb->entry);
    LLVMValueRef slot = LLVMBuildAlloca(ab, kind_type(gb, kind), "var");
    LLVMDisposeBuilder(ab);
    gen_var *v = lua_newuserdatauv(L, sizeof *v, 0);
    v->slot = slot;
    v->kind = kind;
    luaL_setmetatable(L, VAR_MT);
    if (!lua_isnoneornil(L, 3)) {
        gen_value init = gen_arg(L, 3, kind);
        if (init.kind != kind) return luaL_error(L, "initial value is %s, variable is %s", gen_kind_name(init.kind), gen_kind_name(kind));
        LLVMBuildStore(gb->b, init.v, slot);
    }
    return 1;
}

static int var_get(lua_State *L) {
    gen_var *v = luaL_checkudata(L, 1, VAR_MT);
    gen_builder *gb = gen_current(L);
    gen_push_value(L, LLVMBuildLoad2(gb->b, kind_type(gb, v->kind), v->slot, ""), v->kind, 0, 0);
    return 1;
}

static int var_set(lua_State *L) {
    gen_var *v = luaL_checkudata(L, 1, VAR_MT);
    gen_builder *gb = gen_current(L);
    gen_value x = gen_arg(L, 2, v->kind);
    if (x.kind != v->kind) return luaL_error(L, "assigning a %s value to a %s variable", gen_kind_name(x.kind), gen_kind_name(v->kind));
    LLVMBuildStore(gb->b, x.v, v->slot);
    return 0;
}

void gen_register_vars(lua_State *L) {
    static const luaL_Reg methods[] = {{"get", var_get}, {"set", var_set}, {NULL, NULL}};
    if (luaL_newmetatable(L, VAR_MT)) {
        luaL_newlib(L, methods);
        lua_setfield(L, -2, "__index");
    }
    lua_pop(L, 1);
}

void gen_register_memory(lua_State *L) {
    static const luaL_Reg methods[] = {
        {"kernel", b_kernel}, {"load", b_load}, {"load_vec", b_load_vec}, {"store", b_store},
        {"store_vec", b_store_vec}, {"shared", b_shared}, {"var", b_var}, {"is_null", b_is_null},
        {"atomic_add", b_atomic_add}, {NULL, NULL}};
    luaL_setfuncs(L, methods, 0);
}
