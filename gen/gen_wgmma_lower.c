/* gen/gen_wgmma_lower.c - lowers the kiln.wgmma.* pseudo-intrinsics (gen_hopper.c) to what NVPTX can
 * print: inline PTX for wgmma.mma_async and the accumulator-defining wait_group, integer arithmetic for
 * the matrix descriptor. Runs on the optimized module just before NVPTX codegen; the LLVM IR a template
 * produces (and the emulator runs) keeps the pseudo-intrinsics. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gen.h"

/* The allocator the lowering uses (tests replace it to see an out-of-memory failure reported). */
void *(*gen_wgmma_lower_realloc)(void *, size_t) = realloc;

/* Appends to a growing string (asm text or constraints); failed is set when memory runs out. */
typedef struct sbuf {
    char *s;
    size_t len, cap;
    bool failed;
} sbuf;

static void put(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(sbuf *b, const char *fmt, ...) {
    while (!b->failed) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->s ? b->s + b->len : NULL, b->s ? b->cap - b->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) return;
        if (b->s && b->len + (size_t)n < b->cap) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = (b->cap + (size_t)n + 1) * 2;
        char *s = gen_wgmma_lower_realloc(b->s, cap);
        if (!s) b->failed = true;
        else b->s = s, b->cap = cap;
    }
}

/* The descriptor: ((shared address >> 4) & 0x3fff) | the constant fields. */
static LLVMValueRef lower_desc(LLVMBuilderRef b, LLVMValueRef call) {
    LLVMTypeRef i64 = LLVMInt64TypeInContext(LLVMGetTypeContext(LLVMTypeOf(call)));
    LLVMValueRef addr = LLVMBuildPtrToInt(b, LLVMGetOperand(call, 0), i64, "");
    addr = LLVMBuildAnd(b, LLVMBuildLShr(b, addr, LLVMConstInt(i64, 4, 0), ""), LLVMConstInt(i64, 0x3fff, 0), "");
    return LLVMBuildOr(b, addr, LLVMGetOperand(call, 1), "wgmma.desc");
}

/* The accumulators {$0..$m-1}: outputs, each tied to the input of the same number. */
static void outputs(sbuf *asm_, sbuf *con, int m) {
    put(asm_, "{");
    for (int i = 0; i < m; i++) put(asm_, "%s$%d", i ? ", " : "", i), put(con, "%s=f", i ? "," : "");
    put(asm_, "}");
    for (int i = 0; i < m; i++) put(con, ",%d", i);
}

/* kiln.wgmma.m64n<N>k16.f32.<t>.<ss|rs>[.tb](acc x m, a, b, scale_d) -> the wgmma.mma_async instruction with
 * scale-d as a predicate, imm-scale-a/b 1, a K-major A (imm-trans-a 0) and B K-major, or N-major with .tb
 * (imm-trans-b 1). */
static void mma_asm(const char *name, int m, int rs, int tb, sbuf *asm_, sbuf *con) {
    const char *shape = name + strlen("kiln.wgmma."); /* m64nNk16.f32.t.ss[.tb] */
    char ptx[64];
    snprintf(ptx, sizeof ptx, "%.*s", (int)(strlen(shape) - 3 - (tb ? 3 : 0)), shape); /* m64nNk16.f32.t */
    const char *t = strrchr(ptx, '.') + 1;
    put(asm_, "{\n\t.reg .pred p;\n\tsetp.ne.b32 p, $%d, 0;\n\twgmma.mma_async.sync.aligned.%s.%s ", 2 * m + (rs ? 5 : 2),
        ptx, t);
    outputs(asm_, con, m);
    if (rs) put(asm_, ", {$%d, $%d, $%d, $%d}, $%d, p, 1, 1, %d;\n}", 2 * m, 2 * m + 1, 2 * m + 2, 2 * m + 3, 2 * m + 4, tb);
    else put(asm_, ", $%d, $%d, p, 1, 1, 0, %d;\n}", 2 * m, 2 * m + 1, tb);
    put(con, rs ? ",r,r,r,r,l,r" : ",l,l,r");
    put(con, ",~{memory}");
}

/* kiln.wgmma.wait.f32x<m>(n, acc x m) -> wgmma.wait_group n, which defines the accumulators. */
static void wait_asm(LLVMValueRef call, int m, sbuf *asm_, sbuf *con) {
    put(asm_, "wgmma.wait_group.sync.aligned %llu; // ", LLVMConstIntGetZExtValue(LLVMGetOperand(call, 0)));
    outputs(asm_, con, m);
    put(con, ",~{memory}");
}

/* The inline PTX call that replaces call; NULL when memory ran out. */
static LLVMValueRef lower_asm(LLVMBuilderRef b, LLVMValueRef fn, LLVMValueRef call, const char *name) {
    LLVMTypeRef fty = LLVMGlobalGetValueType(fn);
    int m = (int)LLVMCountStructElementTypes(LLVMGetReturnType(fty));
    sbuf a = {0}, c = {0};
    bool wait = !strncmp(name, "kiln.wgmma.wait.", 16);
    int first = wait ? 1 : 0; /* the wait's n is an immediate in the text, not an operand */
    if (wait) wait_asm(call, m, &a, &c);
    else {
        size_t nl = strlen(name);
        int tb = nl > 3 && !strcmp(name + nl - 3, ".tb");
        mma_asm(name, m, !strncmp(name + nl - 3 - (tb ? 3 : 0), ".rs", 3), tb, &a, &c);
    }
    unsigned nargs = LLVMCountParamTypes(fty);
    LLVMTypeRef *pt = gen_wgmma_lower_realloc(NULL, nargs * sizeof *pt);
    LLVMValueRef *args = gen_wgmma_lower_realloc(NULL, nargs * sizeof *args);
    if (!pt || !args || a.failed || c.failed) {
        free(pt), free(args), free(a.s), free(c.s);
        return NULL;
    }
    LLVMGetParamTypes(fty, pt);
    for (unsigned i = 0; i < nargs; i++) args[i] = LLVMGetOperand(call, i);
    LLVMTypeRef aty = LLVMFunctionType(LLVMGetReturnType(fty), pt + first, nargs - (unsigned)first, 0);
    LLVMValueRef ia = LLVMGetInlineAsm(aty, a.s, a.len, c.s, c.len, 1, 0, LLVMInlineAsmDialectATT, 0);
    LLVMValueRef r = LLVMBuildCall2(b, aty, ia, args + first, nargs - (unsigned)first, wait ? "wgmma.done" : "wgmma");
    unsigned kind = LLVMGetEnumAttributeKindForName("convergent", 10);
    LLVMAddCallSiteAttribute(r, LLVMAttributeFunctionIndex, LLVMCreateEnumAttribute(LLVMGetTypeContext(fty), kind, 0));
    free(pt), free(args), free(a.s), free(c.s);
    return r;
}

int gen_wgmma_lower(LLVMModuleRef mod) {
    LLVMBuilderRef b = LLVMCreateBuilderInContext(LLVMGetModuleContext(mod));
    int failed = 0;
    for (LLVMValueRef fn = LLVMGetFirstFunction(mod), next; fn && !failed; fn = next) {
        next = LLVMGetNextFunction(fn);
        size_t len;
        const char *name = LLVMGetValueName2(fn, &len);
        if (strncmp(name, "kiln.wgmma.", 11)) continue;
        bool desc = !strcmp(name, KILN_WGMMA_DESC);
        for (LLVMUseRef u = LLVMGetFirstUse(fn), un; u && !failed; u = un) {
            un = LLVMGetNextUse(u);
            LLVMValueRef call = LLVMGetUser(u);
            if (!LLVMIsACallInst(call) || LLVMGetCalledValue(call) != fn) continue;
            LLVMPositionBuilderBefore(b, call);
            LLVMValueRef r = desc ? lower_desc(b, call) : lower_asm(b, fn, call, name);
            if (!r) {
                failed = 1;
                break;
            }
            LLVMReplaceAllUsesWith(call, r);
            LLVMInstructionEraseFromParent(call);
        }
        if (!failed && !LLVMGetFirstUse(fn)) LLVMDeleteFunction(fn);
    }
    LLVMDisposeBuilder(b);
    return failed ? -1 : 0;
}
