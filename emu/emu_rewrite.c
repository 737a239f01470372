/* emu/emu_rewrite.c - turns an NVVM module into a host module the emulator can run. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <llvm-c/Analysis.h>
#include <llvm-c/Target.h>

#include "emu.h"

#define PTX_KERNEL_CC 71 /* LLVM's ptx_kernel calling convention */
#define AS_SHARED 3

static const char *fn_name(LLVMValueRef fn) {
    size_t len;
    return LLVMGetValueName2(fn, &len);
}

static bool starts_with(const char *s, const char *prefix) { return !strncmp(s, prefix, strlen(prefix)); }

/* The called function of a call instruction, or NULL (indirect call, inline asm). */
static LLVMValueRef callee_of(LLVMValueRef inst) {
    if (!LLVMIsACallInst(inst)) return NULL;
    LLVMValueRef c = LLVMGetCalledValue(inst);
    return LLVMIsAFunction(c) ? c : NULL;
}

/* ---- nvvm.annotations ---- */

typedef void (*annotation_fn)(void *user, LLVMValueRef fn, const char *key, unsigned long long value);

static void each_annotation(LLVMModuleRef mod, annotation_fn f, void *user) {
    unsigned n = LLVMGetNamedMetadataNumOperands(mod, "nvvm.annotations");
    if (!n) return;
    LLVMValueRef *nodes = calloc(n, sizeof *nodes);
    if (!nodes) return;
    LLVMGetNamedMetadataOperands(mod, "nvvm.annotations", nodes);
    for (unsigned i = 0; i < n; i++) {
        unsigned k = LLVMGetMDNodeNumOperands(nodes[i]);
        if (k < 3 || k > 64) continue;
        LLVMValueRef ops[64];
        LLVMGetMDNodeOperands(nodes[i], ops);
        for (unsigned j = 1; j + 1 < k; j += 2) {
            unsigned len;
            const char *key = ops[j] ? LLVMGetMDString(ops[j], &len) : NULL;
            if (ops[0] && LLVMIsAFunction(ops[0]) && key && ops[j + 1] && LLVMIsAConstantInt(ops[j + 1]))
                f(user, ops[0], key, LLVMConstIntGetZExtValue(ops[j + 1]));
        }
    }
    free(nodes);
}

typedef struct kernel_search {
    LLVMValueRef found[8];
    int n;
} kernel_search;

static void add_kernel(kernel_search *s, LLVMValueRef fn) {
    for (int i = 0; i < s->n; i++)
        if (s->found[i] == fn) return;
    if (s->n < 8) s->found[s->n++] = fn;
}

static void note_kernel(void *user, LLVMValueRef fn, const char *key, unsigned long long v) {
    if (!strcmp(key, "kernel") && v == 1) add_kernel(user, fn);
}

LLVMValueRef emu_find_kernel(LLVMModuleRef mod, const char *entry, kiln_error *err) {
    kernel_search s = {.n = 0};
    for (LLVMValueRef fn = LLVMGetFirstFunction(mod); fn; fn = LLVMGetNextFunction(fn))
        if (!LLVMIsDeclaration(fn) && LLVMGetFunctionCallConv(fn) == PTX_KERNEL_CC) add_kernel(&s, fn);
    each_annotation(mod, note_kernel, &s);
    char names[256] = "";
    for (int i = 0; i < s.n; i++) {
        if (entry && !strcmp(fn_name(s.found[i]), entry)) return s.found[i];
        snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? ", " : "", fn_name(s.found[i]));
    }
    if (entry) {
        LLVMValueRef fn = LLVMGetNamedFunction(mod, entry);
        if (fn && !LLVMIsDeclaration(fn)) return fn;
        kiln_fail(err, KILN_ENOTFOUND, "emulator: no kernel '%s' in the module; kernels: %s", entry,
                  s.n ? names : "none");
        return NULL;
    }
    if (s.n == 1) return s.found[0];
    if (s.n) kiln_fail(err, KILN_ENOTFOUND, "emulator: the module has several kernels (%s); name the entry", names);
    else kiln_fail(err, KILN_ENOTFOUND, "emulator: no kernel in the module (no ptx_kernel function, no "
                                        "\"kernel\" annotation)");
    return NULL;
}

typedef struct ntid_search {
    LLVMValueRef fn;
    unsigned maxntid[3], reqntid[3];
} ntid_search;

static void note_ntid(void *user, LLVMValueRef fn, const char *key, unsigned long long v) {
    ntid_search *s = user;
    if (fn != s->fn || strlen(key) != 8 || key[7] < 'x' || key[7] > 'z') return;
    unsigned axis = (unsigned)(key[7] - 'x');
    if (!strncmp(key, "maxntid", 7)) s->maxntid[axis] = (unsigned)v;
    if (!strncmp(key, "reqntid", 7)) s->reqntid[axis] = (unsigned)v;
}

/* LLVM 20+ (Triton 3.x, newer clang) puts the block size in function attributes,
 * "nvvm.reqntid"="128" or "128,1,1", instead of nvvm.annotations. */
static void ntid_attribute(LLVMValueRef fn, const char *name, unsigned out[3]) {
    LLVMAttributeRef a = LLVMGetStringAttributeAtIndex(fn, LLVMAttributeFunctionIndex, name, (unsigned)strlen(name));
    if (!a) return;
    unsigned len;
    const char *v = LLVMGetStringAttributeValue(a, &len);
    char buf[64];
    snprintf(buf, sizeof buf, "%.*s", (int)(len < 63 ? len : 63), v);
    char *p = buf;
    for (int axis = 0; axis < 3 && *p; axis++) {
        char *end;
        unsigned long n = strtoul(p, &end, 10);
        if (end == p) break;
        out[axis] = (unsigned)n;
        p = *end == ',' ? end + 1 : end;
    }
}

static void find_ntid(LLVMModuleRef mod, ntid_search *s) {
    each_annotation(mod, note_ntid, s);
    ntid_attribute(s->fn, "nvvm.maxntid", s->maxntid);
    ntid_attribute(s->fn, "nvvm.reqntid", s->reqntid);
}

/* ---- __nvvm_reflect ---- */

/* The C string a constant pointer operand points at (through casts and GEPs), or NULL. */
static const char *constant_string(LLVMValueRef v, char *buf, size_t size) {
    for (int depth = 0; v && depth < 8 && !LLVMIsAGlobalVariable(v); depth++)
        v = LLVMIsAConstantExpr(v) && LLVMGetNumOperands(v) ? LLVMGetOperand(v, 0) : NULL;
    LLVMValueRef init = v ? LLVMGetInitializer(v) : NULL;
    if (!init || !LLVMIsConstantString(init)) return NULL;
    size_t len;
    const char *str = LLVMGetAsString(init, &len);
    snprintf(buf, size, "%.*s", (int)strnlen(str, len), str);
    return buf;
}

void emu_reflect(LLVMModuleRef mod, int sm) {
    static const char *const names[2] = {"__nvvm_reflect", "llvm.nvvm.reflect"};
    for (int i = 0; i < 2; i++) {
        LLVMValueRef fn = LLVMGetNamedFunction(mod, names[i]);
        if (!fn) continue;
        LLVMUseRef u = LLVMGetFirstUse(fn);
        while (u) {
            LLVMValueRef call = LLVMGetUser(u);
            u = LLVMGetNextUse(u);
            if (!LLVMIsACallInst(call) || LLVMGetCalledValue(call) != fn) continue;
            char what[64];
            const char *q = LLVMGetNumArgOperands(call) ? constant_string(LLVMGetOperand(call, 0), what, sizeof what)
                                                        : NULL;
            int value = q && !strcmp(q, "__CUDA_ARCH") ? kiln_sm_base(sm) * 10 : 0; /* __CUDA_FTZ and the rest: 0 */
            LLVMReplaceAllUsesWith(call, LLVMConstInt(LLVMTypeOf(call), (unsigned long long)value, 0));
            LLVMInstructionEraseFromParent(call);
        }
    }
}

/* Inline assembly the emulator accepts: none that computes anything. An empty string or
 * memory fences only (membar.*, fence.*), in a call that returns nothing, is dropped (the
 * emulator runs one thread at a time: every access is already ordered). */
static bool harmless_asm(LLVMValueRef call) {
    if (LLVMGetTypeKind(LLVMTypeOf(call)) != LLVMVoidTypeKind) return false;
    size_t len;
    const char *a = LLVMGetInlineAsmAsmString(LLVMGetCalledValue(call), &len);
    for (size_t i = 0; i < len;) {
        while (i < len && (a[i] == ' ' || a[i] == '\t' || a[i] == '\n' || a[i] == ';')) i++;
        if (i == len) break;
        if (strncmp(a + i, "membar.", 7) && strncmp(a + i, "fence.", 6)) return false;
        while (i < len && a[i] != ';' && a[i] != '\n') i++;
    }
    return true;
}

/* ---- metadata for hand-written IR ---- */

kiln_status emu_meta_from_ir(LLVMModuleRef mod, const char *entry, int sm, kiln_kernel_meta *meta,
                             kiln_error *err) {
    LLVMValueRef fn = emu_find_kernel(mod, entry, err);
    if (!fn) return err ? err->status : KILN_ENOTFOUND;
    memset(meta, 0, sizeof *meta);
    snprintf(meta->family, sizeof meta->family, "ir");
    snprintf(meta->entry, sizeof meta->entry, "%s", fn_name(fn));
    snprintf(meta->spec, sizeof meta->spec, "ir entry=%s", meta->entry);
    meta->sm = sm;
    unsigned n = LLVMCountParams(fn);
    if (n > KILN_MAX_PARAMS) return kiln_fail(err, KILN_EINVAL, "emulator: kernel '%s' has %u parameters (max %d)", meta->entry, n, KILN_MAX_PARAMS);
    meta->nparams = (int)n;
    for (unsigned i = 0; i < n; i++) {
        LLVMValueRef p = LLVMGetParam(fn, i);
        LLVMTypeRef t = LLVMTypeOf(p);
        kiln_param *kp = &meta->params[i];
        size_t len;
        const char *name = LLVMGetValueName2(p, &len);
        if (len && len < sizeof kp->name) snprintf(kp->name, sizeof kp->name, "%s", name);
        else snprintf(kp->name, sizeof kp->name, "arg%u", i);
        LLVMTypeKind k = LLVMGetTypeKind(t);
        if (k == LLVMPointerTypeKind) kp->kind = KILN_PARAM_PTR;
        else if (k == LLVMFloatTypeKind) kp->kind = KILN_PARAM_F32;
        else if (k == LLVMIntegerTypeKind && LLVMGetIntTypeWidth(t) == 32) kp->kind = KILN_PARAM_I32;
        else if (k == LLVMIntegerTypeKind && LLVMGetIntTypeWidth(t) == 64) kp->kind = KILN_PARAM_I64;
        else return kiln_fail(err, KILN_EINVAL, "emulator: parameter %u of '%s' has a type the emulator cannot pass (ptr, i32, i64, float)", i, meta->entry);
    }
    ntid_search s = {.fn = fn};
    find_ntid(mod, &s);
    for (int a = 0; a < 3; a++) meta->block[a] = s.reqntid[a] ? s.reqntid[a] : s.maxntid[a];
    meta->grid_tile[0] = meta->grid_tile[1] = meta->grid_tile[2] = 1;
    return KILN_OK;
}

/* ---- scanning ---- */

static kiln_status add_site(emu_rewrite_info *info, LLVMTargetDataRef td, LLVMValueRef call, LLVMValueRef callee,
                            LLVMValueRef fn, unsigned *cap, kiln_error *err) {
    const char *name = fn_name(callee);
    const emu_op *op = emu_op_find(name);
    char *type = LLVMPrintTypeToString(LLVMGlobalGetValueType(callee));
    kiln_status st = KILN_OK;
    if (!op && starts_with(name, "kiln.wgmma.") && emu_wgmma_ops_failed()) {
        st = kiln_fail(err, KILN_ENOMEM, "emulator: out of memory building the table of wgmma pseudo-intrinsics (%s)", name);
    } else if (!op) {
        st = kiln_fail(err, KILN_EINVAL, "emulator: intrinsic %s (%s) is not implemented (emu/emu_ops.c lists "
                                         "the supported ones)", name, type);
    } else if (strcmp(op->type, type)) {
        st = kiln_fail(err, KILN_EINVAL, "emulator: intrinsic %s has type %s here; the emulator implements %s",
                       name, type, op->type);
    }
    LLVMDisposeMessage(type);
    if (st != KILN_OK) return st;
    unsigned nargs = LLVMGetNumArgOperands(call);
    LLVMTypeRef rt = LLVMGetReturnType(LLVMGlobalGetValueType(callee));
    unsigned long long rsize = LLVMGetTypeKind(rt) == LLVMVoidTypeKind ? 0 : LLVMStoreSizeOfType(td, rt);
    bool wide = starts_with(name, "kiln."); /* kiln pseudo-intrinsics: per-thread handlers, wide calls */
    if (nargs > (wide ? EMU_MAX_ARGS_WIDE : EMU_MAX_ARGS) || rsize > (wide ? EMU_MAX_RET_WIDE : EMU_MAX_RET))
        return kiln_fail(err, KILN_EINVAL, "emulator: intrinsic %s has too many arguments or too wide a result", name);
    for (unsigned i = 0; i < nargs; i++)
        if (LLVMStoreSizeOfType(td, LLVMTypeOf(LLVMGetOperand(call, i))) > EMU_SLOT)
            return kiln_fail(err, KILN_EINVAL, "emulator: argument %u of %s is wider than %d bytes", i, name, EMU_SLOT);
    if (info->nsites == *cap) {
        unsigned ncap = *cap ? *cap * 2 : 16;
        emu_site *s = realloc(info->sites, ncap * sizeof *s);
        LLVMValueRef *c = realloc(info->calls, ncap * sizeof *c);
        if (s) info->sites = s;
        if (c) info->calls = c;
        if (!s || !c) return kiln_fail(err, KILN_ENOMEM, "emulator: out of memory");
        *cap = ncap;
    }
    unsigned nth = 1;
    for (unsigned i = 0; i < info->nsites; i++)
        if (info->sites[i].op == op && LLVMGetBasicBlockParent(LLVMGetInstructionParent(info->calls[i])) == fn) nth++;
    emu_site *s = &info->sites[info->nsites];
    s->op = op;
    s->nargs = nargs;
    s->ret_size = (unsigned)rsize;
    snprintf(s->where, sizeof s->where, "%s #%u in @%s", name, nth, fn_name(fn));
    info->calls[info->nsites++] = call;
    return KILN_OK;
}

static kiln_status scan_calls(LLVMModuleRef mod, LLVMTargetDataRef td, emu_rewrite_info *info, kiln_error *err) {
    unsigned cap = 0;
    for (LLVMValueRef fn = LLVMGetFirstFunction(mod); fn; fn = LLVMGetNextFunction(fn))
        for (LLVMBasicBlockRef bb = LLVMGetFirstBasicBlock(fn); bb; bb = LLVMGetNextBasicBlock(bb))
            for (LLVMValueRef in = LLVMGetFirstInstruction(bb); in; in = LLVMGetNextInstruction(in)) {
                if (LLVMIsACallInst(in) && LLVMIsAInlineAsm(LLVMGetCalledValue(in))) {
                    if (harmless_asm(in)) continue; /* dropped by emu_rewrite_apply */
                    size_t len;
                    const char *a = LLVMGetInlineAsmAsmString(LLVMGetCalledValue(in), &len);
                    return kiln_fail(err, KILN_EINVAL, "emulator: @%s uses inline PTX assembly \"%.*s%s\", which the "
                                     "emulator cannot run (it runs only empty asm and membar/fence; see "
                                     "docs/emulator.md)", fn_name(fn), (int)(len > 80 ? 80 : len), a,
                                     len > 80 ? "..." : "");
                }
                LLVMValueRef callee = callee_of(in);
                if (!callee) continue;
                const char *name = fn_name(callee);
                if (!starts_with(name, "llvm.nvvm.") && !starts_with(name, "kiln.") && strcmp(name, "llvm.trap")) continue;
                kiln_status st = add_site(info, td, in, callee, fn, &cap, err);
                if (st != KILN_OK) return st;
            }
    return KILN_OK;
}

static size_t align_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

static kiln_status scan_shared(LLVMModuleRef mod, LLVMTargetDataRef td, emu_rewrite_info *info, kiln_error *err) {
    size_t off = 0, dyn_align = 16;
    for (LLVMValueRef g = LLVMGetFirstGlobal(mod); g; g = LLVMGetNextGlobal(g)) {
        if (LLVMGetPointerAddressSpace(LLVMTypeOf(g)) != AS_SHARED) continue;
        size_t align = LLVMGetAlignment(g) ? LLVMGetAlignment(g) : 16;
        if (LLVMIsDeclaration(g)) { /* extern __shared__: dynamic shared memory */
            if (align > dyn_align) dyn_align = align;
            continue;
        }
        emu_shared_var *v = realloc(info->smem, (info->nsmem + 1) * sizeof *v);
        if (!v) return kiln_fail(err, KILN_ENOMEM, "emulator: out of memory");
        info->smem = v;
        off = align_up(off, align);
        size_t size = (size_t)LLVMABISizeOfType(td, LLVMGlobalGetValueType(g));
        info->smem[info->nsmem++] = (emu_shared_var){g, off, size};
        off += size;
    }
    info->static_smem = off;
    info->dynamic_offset = align_up(off, dyn_align);
    return KILN_OK;
}

kiln_status emu_rewrite_scan(LLVMModuleRef mod, const char *entry, unsigned id, const char *host_dl,
                             emu_rewrite_info *info, kiln_error *err) {
    memset(info, 0, sizeof *info);
    LLVMValueRef kernel = emu_find_kernel(mod, entry, err);
    if (!kernel) return err ? err->status : KILN_ENOTFOUND;
    ntid_search s = {.fn = kernel};
    find_ntid(mod, &s);
    memcpy(info->maxntid, s.maxntid, sizeof s.maxntid);
    memcpy(info->reqntid, s.reqntid, sizeof s.reqntid);
    snprintf(info->entry_symbol, sizeof info->entry_symbol, "kiln_emu.k%u.entry", id);
    LLVMTargetDataRef td = LLVMCreateTargetData(host_dl);
    kiln_status st = scan_calls(mod, td, info, err);
    if (st == KILN_OK) st = scan_shared(mod, td, info, err);
    LLVMDisposeTargetData(td);
    return st;
}

void emu_rewrite_info_free(emu_rewrite_info *info) {
    free(info->sites);
    free(info->calls);
    free(info->smem);
    free(info->access);
    memset(info, 0, sizeof *info);
}

/* ---- rewriting ---- */

typedef struct rewriter {
    LLVMModuleRef mod;
    LLVMContextRef ctx;
    LLVMBuilderRef b;
    LLVMTargetDataRef td;
    LLVMTypeRef i8, i32, i64, ptr, dispatch_ty, store_ty, access_ty;
    LLVMValueRef dispatch, store, access;
    unsigned access_cap;
    gen_llvm_printer *printer; /* the accesses' texts: a function's values numbered once (instrument_accesses) */
} rewriter;

static LLVMValueRef declare(rewriter *r, const char *name, LLVMTypeRef ty) {
    LLVMValueRef f = LLVMGetNamedFunction(r->mod, name);
    return f ? f : LLVMAddFunction(r->mod, name, ty);
}

static void position_at_entry(rewriter *r, LLVMValueRef fn) {
    LLVMBasicBlockRef entry = LLVMGetEntryBasicBlock(fn);
    LLVMValueRef first = LLVMGetFirstInstruction(entry);
    if (first) LLVMPositionBuilderBefore(r->b, first);
    else LLVMPositionBuilderAtEnd(r->b, entry);
}

/* call(args) -> kiln_emu_dispatch(site, slots, &ret); ret loaded back in place of call. */
static void marshal(rewriter *r, LLVMValueRef call, unsigned site) {
    LLVMValueRef fn = LLVMGetBasicBlockParent(LLVMGetInstructionParent(call));
    unsigned n = LLVMGetNumArgOperands(call);
    LLVMTypeRef rt = LLVMTypeOf(call);
    bool has_ret = LLVMGetTypeKind(rt) != LLVMVoidTypeKind;
    position_at_entry(r, fn);
    LLVMValueRef slots = LLVMBuildAlloca(r->b, LLVMArrayType2(r->i8, (n ? n : 1) * EMU_SLOT), "emu.args");
    LLVMSetAlignment(slots, EMU_SLOT);
    LLVMValueRef ret = has_ret ? LLVMBuildAlloca(r->b, rt, "emu.ret") : LLVMConstNull(r->ptr);
    LLVMPositionBuilderBefore(r->b, call);
    for (unsigned i = 0; i < n; i++) {
        LLVMValueRef off = LLVMConstInt(r->i64, (unsigned long long)i * EMU_SLOT, 0);
        LLVMValueRef p = LLVMBuildGEP2(r->b, r->i8, slots, &off, 1, "");
        LLVMBuildStore(r->b, LLVMGetOperand(call, i), p);
    }
    LLVMValueRef args[3] = {LLVMConstInt(r->i32, site, 0), slots, ret};
    LLVMBuildCall2(r->b, r->dispatch_ty, r->dispatch, args, 3, "");
    if (has_ret) LLVMReplaceAllUsesWith(call, LLVMBuildLoad2(r->b, rt, ret, "emu.val"));
    LLVMInstructionEraseFromParent(call);
}

/* Global memory a store may write: anything but shared (3), constant (4) and local (5). */
static bool may_be_global(LLVMValueRef p) {
    unsigned as = LLVMGetPointerAddressSpace(LLVMTypeOf(p));
    return as == 0 || as == 1;
}

static void log_store(rewriter *r, LLVMValueRef in, LLVMValueRef p, LLVMValueRef size) {
    if (!may_be_global(p)) return;
    LLVMPositionBuilderBefore(r->b, in);
    LLVMValueRef generic = LLVMGetPointerAddressSpace(LLVMTypeOf(p)) ? LLVMBuildAddrSpaceCast(r->b, p, r->ptr, "") : p;
    LLVMValueRef args[2] = {generic, size};
    LLVMBuildCall2(r->b, r->store_ty, r->store, args, 2, "");
}

static LLVMValueRef size_of(rewriter *r, LLVMValueRef v) {
    return LLVMConstInt(r->i64, LLVMStoreSizeOfType(r->td, LLVMTypeOf(v)), 0);
}

/* Every store that may reach global memory first tells the emulator (for `twice`). */
static void instrument_stores(rewriter *r) {
    for (LLVMValueRef fn = LLVMGetFirstFunction(r->mod); fn; fn = LLVMGetNextFunction(fn))
        for (LLVMBasicBlockRef bb = LLVMGetFirstBasicBlock(fn); bb; bb = LLVMGetNextBasicBlock(bb))
            for (LLVMValueRef in = LLVMGetFirstInstruction(bb); in; in = LLVMGetNextInstruction(in)) {
                LLVMOpcode op = LLVMGetInstructionOpcode(in);
                LLVMValueRef callee = callee_of(in);
                if (op == LLVMStore) {
                    log_store(r, in, LLVMGetOperand(in, 1), size_of(r, LLVMGetOperand(in, 0)));
                } else if (op == LLVMAtomicRMW) {
                    log_store(r, in, LLVMGetOperand(in, 0), size_of(r, LLVMGetOperand(in, 1)));
                } else if (op == LLVMAtomicCmpXchg) {
                    log_store(r, in, LLVMGetOperand(in, 0), size_of(r, LLVMGetOperand(in, 2)));
                } else if (callee && (starts_with(fn_name(callee), "llvm.memset") ||
                                      starts_with(fn_name(callee), "llvm.memcpy") ||
                                      starts_with(fn_name(callee), "llvm.memmove"))) {
                    LLVMPositionBuilderBefore(r->b, in);
                    LLVMValueRef len = LLVMBuildZExtOrBitCast(r->b, LLVMGetOperand(in, 2), r->i64, "");
                    log_store(r, in, LLVMGetOperand(in, 0), len);
                }
            }
}

/* ---- access checks: alignment, shared-memory bounds, null page ---- */

static const char *space_name(unsigned as) {
    return as == EMU_SPACE_GLOBAL ? "global" : as == EMU_SPACE_SHARED ? "shared" : "generic";
}

/* The alignment the PTX instruction for an access may require: the IR's align is what the
 * NVPTX backend may assume when it picks (or, vectorizing, widens) the instruction; no PTX
 * access is wider than 16 bytes. An access without an align has its natural one. */
static unsigned required_align(unsigned ir_align, unsigned long long size) {
    unsigned a = ir_align;
    if (!a) for (a = 1; a < 16 && a * 2 <= size; a *= 2) {}
    return a > 16 ? 16 : a;
}

/* Whether pointer v is into one of the module's own (non-shared) global variables, through GEPs and
 * casts: such memory is the emulator's, not a launch buffer (kiln_emu_launch.arg_bytes). */
static bool into_module_global(LLVMValueRef v) {
    for (int depth = 0; v && depth < 16; depth++) {
        if (LLVMIsAGlobalVariable(v)) return LLVMGetPointerAddressSpace(LLVMTypeOf(v)) != AS_SHARED;
        if (LLVMIsAGetElementPtrInst(v) || LLVMIsAAddrSpaceCastInst(v) || LLVMIsABitCastInst(v) ||
            (LLVMIsAConstantExpr(v) && LLVMGetNumOperands(v)))
            v = LLVMGetOperand(v, 0);
        else
            return false;
    }
    return false;
}

static kiln_status add_access(rewriter *r, emu_rewrite_info *info, LLVMValueRef in, LLVMValueRef fn,
                              const char *kind, LLVMValueRef p, LLVMValueRef size, unsigned long long fixed,
                              unsigned align, kiln_error *err) {
    unsigned as = LLVMGetPointerAddressSpace(LLVMTypeOf(p));
    if ((as != EMU_SPACE_GENERIC && as != EMU_SPACE_GLOBAL && as != EMU_SPACE_SHARED) || LLVMIsAAllocaInst(p))
        return KILN_OK; /* local, constant or param memory: the emulator's own */
    if (info->naccess == r->access_cap) {
        unsigned ncap = r->access_cap ? r->access_cap * 2 : 64;
        emu_access *a = realloc(info->access, ncap * sizeof *a);
        if (!a) return kiln_fail(err, KILN_ENOMEM, "emulator: out of memory");
        info->access = a;
        r->access_cap = ncap;
    }
    emu_access *a = &info->access[info->naccess];
    a->size = (unsigned)fixed;
    a->align = align;
    a->space = as;
    a->module = into_module_global(p);
    a->kind = !strcmp(kind, "atomic") ? EMU_HB_ATOMIC : !strcmp(kind, "store") || !strcmp(kind, "write") ? EMU_HB_WRITE
                                                                                                        : EMU_HB_READ;
    char *text = gen_llvm_printer_print(r->printer, in);
    if (!text) return kiln_fail(err, KILN_ENOMEM, "emulator: out of memory");
    const char *t = text;
    while (*t == ' ') t++;
    char sizes[32] = "";
    if (fixed) snprintf(sizes, sizeof sizes, "%llu-byte ", fixed);
    snprintf(a->what, sizeof a->what, "%s%s %s `%.140s` in @%s", sizes, space_name(as), kind, t, fn_name(fn));
    free(text);
    LLVMPositionBuilderBefore(r->b, in);
    LLVMValueRef generic = as ? LLVMBuildAddrSpaceCast(r->b, p, r->ptr, "") : p;
    LLVMValueRef args[3] = {generic, size ? size : LLVMConstInt(r->i64, fixed, 0),
                            LLVMConstInt(r->i32, info->naccess, 0)};
    LLVMBuildCall2(r->b, r->access_ty, r->access, args, 3, "");
    info->naccess++;
    return KILN_OK;
}

/* Every load, store, atomic and memory intrinsic that may reach global or shared memory
 * first calls kiln_emu_access(pointer, bytes, access). */
static kiln_status instrument_accesses(rewriter *r, emu_rewrite_info *info, kiln_error *err) {
    /* (an access's text numbers its function's values as they were before this pass inserted its calls: the
     * printer numbers a function at its first access, which comes before the first insertion) */
    r->printer = gen_llvm_printer_create(r->mod);
    if (!r->printer) return kiln_fail(err, KILN_ENOMEM, "emulator: out of memory");
    kiln_status st = KILN_OK;
    for (LLVMValueRef fn = LLVMGetFirstFunction(r->mod); fn && st == KILN_OK; fn = LLVMGetNextFunction(fn))
        for (LLVMBasicBlockRef bb = LLVMGetFirstBasicBlock(fn); bb && st == KILN_OK; bb = LLVMGetNextBasicBlock(bb))
            for (LLVMValueRef in = LLVMGetFirstInstruction(bb); in && st == KILN_OK; in = LLVMGetNextInstruction(in)) {
                LLVMOpcode op = LLVMGetInstructionOpcode(in);
                LLVMValueRef callee = callee_of(in);
                if (op == LLVMLoad || op == LLVMStore) {
                    LLVMValueRef p = LLVMGetOperand(in, op == LLVMLoad ? 0 : 1);
                    LLVMTypeRef ty = op == LLVMLoad ? LLVMTypeOf(in) : LLVMTypeOf(LLVMGetOperand(in, 0));
                    unsigned long long size = LLVMStoreSizeOfType(r->td, ty);
                    st = add_access(r, info, in, fn, op == LLVMLoad ? "load" : "store", p, NULL, size,
                                    required_align(LLVMGetAlignment(in), size), err);
                } else if (op == LLVMAtomicRMW || op == LLVMAtomicCmpXchg) {
                    LLVMValueRef v = LLVMGetOperand(in, op == LLVMAtomicRMW ? 1 : 2);
                    unsigned long long size = LLVMStoreSizeOfType(r->td, LLVMTypeOf(v));
                    st = add_access(r, info, in, fn, "atomic", LLVMGetOperand(in, 0), NULL, size,
                                    required_align(0, size), err);
                } else if (callee && (starts_with(fn_name(callee), "llvm.memset") ||
                                      starts_with(fn_name(callee), "llvm.memcpy") ||
                                      starts_with(fn_name(callee), "llvm.memmove"))) {
                    LLVMPositionBuilderBefore(r->b, in);
                    LLVMValueRef len = LLVMBuildZExtOrBitCast(r->b, LLVMGetOperand(in, 2), r->i64, "");
                    st = add_access(r, info, in, fn, "write", LLVMGetOperand(in, 0), len, 0, 1, err);
                    if (st == KILN_OK && !starts_with(fn_name(callee), "llvm.memset"))
                        st = add_access(r, info, in, fn, "read", LLVMGetOperand(in, 1), len, 0, 1, err);
                }
            }
    gen_llvm_printer_destroy(r->printer);
    r->printer = NULL;
    return st;
}

/* Shared variables become fixed addresses in the kernel's arena. */
static void place_shared(rewriter *r, unsigned char *arena, const emu_rewrite_info *info) {
    for (unsigned i = 0; i < info->nsmem; i++) {
        LLVMValueRef g = info->smem[i].global;
        LLVMValueRef addr = LLVMConstInt(r->i64, (unsigned long long)(uintptr_t)(arena + info->smem[i].offset), 0);
        LLVMReplaceAllUsesWith(g, LLVMConstIntToPtr(addr, LLVMTypeOf(g)));
        LLVMDeleteGlobal(g);
    }
    LLVMValueRef dyn = LLVMConstInt(r->i64, (unsigned long long)(uintptr_t)(arena + info->dynamic_offset), 0);
    for (LLVMValueRef g = LLVMGetFirstGlobal(r->mod), next; g; g = next) {
        next = LLVMGetNextGlobal(g);
        if (LLVMGetPointerAddressSpace(LLVMTypeOf(g)) != AS_SHARED || !LLVMIsDeclaration(g)) continue;
        LLVMReplaceAllUsesWith(g, LLVMConstIntToPtr(dyn, LLVMTypeOf(g)));
        LLVMDeleteGlobal(g);
    }
}

/* void ENTRY(void **args): loads each parameter from *args[i] and calls the kernel. */
static void add_trampoline(rewriter *r, LLVMValueRef kernel, const char *name) {
    LLVMTypeRef kty = LLVMGlobalGetValueType(kernel);
    unsigned n = LLVMCountParamTypes(kty);
    LLVMTypeRef params[KILN_MAX_PARAMS + 1];
    LLVMGetParamTypes(kty, params);
    LLVMTypeRef ety = LLVMFunctionType(LLVMVoidTypeInContext(r->ctx), &r->ptr, 1, 0);
    LLVMValueRef e = LLVMAddFunction(r->mod, name, ety);
    LLVMPositionBuilderAtEnd(r->b, LLVMAppendBasicBlockInContext(r->ctx, e, "entry"));
    LLVMValueRef args[KILN_MAX_PARAMS + 1];
    for (unsigned i = 0; i < n; i++) {
        LLVMValueRef idx = LLVMConstInt(r->i64, i, 0);
        LLVMValueRef slot = LLVMBuildGEP2(r->b, r->ptr, LLVMGetParam(e, 0), &idx, 1, "");
        LLVMValueRef at = LLVMBuildLoad2(r->b, r->ptr, slot, "");
        /* a byval parameter (a tensor map) is passed as the address of its bytes, as cuLaunchKernel's are */
        unsigned byval_kind = LLVMGetEnumAttributeKindForName("byval", 5);
        bool byval = LLVMGetEnumAttributeAtIndex(kernel, i + 1, byval_kind) != NULL;
        /* the host kernel takes that address as a plain pointer: a byval parameter would have the call pass
         * the bytes themselves on the stack, which this call (no byval at its site) does not */
        if (byval) LLVMRemoveEnumAttributeAtIndex(kernel, i + 1, byval_kind);
        args[i] = byval ? at : LLVMBuildLoad2(r->b, params[i], at, "");
    }
    LLVMBuildCall2(r->b, kty, kernel, args, n, "");
    LLVMBuildRetVoid(r->b);
}

/* Host code: C calling convention, no NVPTX cpu/features, nothing exported but the entry. */
static void hostify(rewriter *r) {
    for (LLVMValueRef fn = LLVMGetFirstFunction(r->mod); fn; fn = LLVMGetNextFunction(fn)) {
        LLVMRemoveStringAttributeAtIndex(fn, LLVMAttributeFunctionIndex, "target-cpu", 10);
        LLVMRemoveStringAttributeAtIndex(fn, LLVMAttributeFunctionIndex, "target-features", 15);
        if (LLVMGetFunctionCallConv(fn) == PTX_KERNEL_CC) LLVMSetFunctionCallConv(fn, LLVMCCallConv);
        if (!LLVMIsDeclaration(fn)) LLVMSetLinkage(fn, LLVMInternalLinkage);
        for (LLVMBasicBlockRef bb = LLVMGetFirstBasicBlock(fn); bb; bb = LLVMGetNextBasicBlock(bb))
            for (LLVMValueRef in = LLVMGetFirstInstruction(bb); in; in = LLVMGetNextInstruction(in))
                if (LLVMIsACallInst(in) && LLVMGetInstructionCallConv(in) == PTX_KERNEL_CC)
                    LLVMSetInstructionCallConv(in, LLVMCCallConv);
    }
    for (LLVMValueRef g = LLVMGetFirstGlobal(r->mod); g; g = LLVMGetNextGlobal(g))
        if (!LLVMIsDeclaration(g)) LLVMSetLinkage(g, LLVMInternalLinkage);
}

static void drop_harmless_asm(LLVMModuleRef mod) {
    for (LLVMValueRef fn = LLVMGetFirstFunction(mod); fn; fn = LLVMGetNextFunction(fn))
        for (LLVMBasicBlockRef bb = LLVMGetFirstBasicBlock(fn); bb; bb = LLVMGetNextBasicBlock(bb))
            for (LLVMValueRef in = LLVMGetFirstInstruction(bb), next; in; in = next) {
                next = LLVMGetNextInstruction(in);
                if (LLVMIsACallInst(in) && LLVMIsAInlineAsm(LLVMGetCalledValue(in)) && harmless_asm(in))
                    LLVMInstructionEraseFromParent(in);
            }
}

static void drop_unused_intrinsics(LLVMModuleRef mod) {
    for (LLVMValueRef fn = LLVMGetFirstFunction(mod), next; fn; fn = next) {
        next = LLVMGetNextFunction(fn);
        if (LLVMIsDeclaration(fn) && starts_with(fn_name(fn), "llvm.nvvm.") && !LLVMGetFirstUse(fn))
            LLVMDeleteFunction(fn);
    }
}

kiln_status emu_rewrite_apply(LLVMModuleRef mod, const char *entry, const char *host_triple, const char *host_dl,
                              unsigned char *arena, emu_rewrite_info *info, kiln_error *err) {
    LLVMValueRef kernel = emu_find_kernel(mod, entry, err);
    if (!kernel) return err ? err->status : KILN_ENOTFOUND;
    rewriter r = {.mod = mod, .ctx = LLVMGetModuleContext(mod)};
    LLVMSetTarget(mod, host_triple);
    LLVMSetDataLayout(mod, host_dl);
    r.td = LLVMCreateTargetData(host_dl);
    r.b = LLVMCreateBuilderInContext(r.ctx);
    r.i8 = LLVMInt8TypeInContext(r.ctx);
    r.i32 = LLVMInt32TypeInContext(r.ctx);
    r.i64 = LLVMInt64TypeInContext(r.ctx);
    r.ptr = LLVMPointerTypeInContext(r.ctx, 0);
    LLVMTypeRef dargs[3] = {r.i32, r.ptr, r.ptr}, sargs[2] = {r.ptr, r.i64};
    r.dispatch_ty = LLVMFunctionType(LLVMVoidTypeInContext(r.ctx), dargs, 3, 0);
    r.store_ty = LLVMFunctionType(LLVMVoidTypeInContext(r.ctx), sargs, 2, 0);
    LLVMTypeRef aargs[3] = {r.ptr, r.i64, r.i32};
    r.access_ty = LLVMFunctionType(LLVMVoidTypeInContext(r.ctx), aargs, 3, 0);
    r.dispatch = declare(&r, "kiln_emu_dispatch", r.dispatch_ty);
    r.store = declare(&r, "kiln_emu_store", r.store_ty);
    r.access = declare(&r, "kiln_emu_access", r.access_ty);

    drop_harmless_asm(mod);
    /* first: the marshalling stores below are private; the checks go before the store log,
     * which reads the bytes a store overwrites */
    kiln_status ast = instrument_accesses(&r, info, err);
    if (ast == KILN_OK) instrument_stores(&r);
    if (ast != KILN_OK) {
        LLVMDisposeBuilder(r.b);
        LLVMDisposeTargetData(r.td);
        return ast;
    }
    for (unsigned i = 0; i < info->nsites; i++) marshal(&r, info->calls[i], i);
    drop_unused_intrinsics(mod);
    place_shared(&r, arena, info);
    hostify(&r);
    add_trampoline(&r, kernel, info->entry_symbol);
    LLVMDisposeBuilder(r.b);
    LLVMDisposeTargetData(r.td);

    char *msg = NULL;
    if (LLVMVerifyModule(mod, LLVMReturnStatusAction, &msg)) {
        kiln_status st = kiln_fail(err, KILN_EEMU, "emulator: the host module does not verify: %.800s", msg ? msg : "");
        LLVMDisposeMessage(msg);
        return st;
    }
    LLVMDisposeMessage(msg);
    return KILN_OK;
}
