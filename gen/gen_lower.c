/* gen/gen_lower.c - verify, optimize (new pass manager) and lower a module to PTX via NVPTX. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <llvm-c/Analysis.h>
#include <llvm-c/Support.h>
#include <llvm-c/Target.h>
#include <llvm-c/Transforms/PassBuilder.h>

#include "gen.h"

#define NVPTX_TRIPLE "nvptx64-nvidia-cuda"
#define NVPTX_LAYOUT "e-i64:64-i128:128-v16:16-v32:32-n16:32:64"

static pthread_once_t init_once = PTHREAD_ONCE_INIT;

static void init_nvptx(void) {
    /* The pipeline alias "default<O3>" switches the SLP vectorizer on whatever the pass
     * builder options say; NVPTX has no SIMD ALU, and SLP took 23 of 40 ms on a bf16 sm_75
     * LayerNorm. LLVM's own switch turns it off (process-wide: documented in README). */
    const char *args[] = {"kiln", "-vectorize-slp=false"};
    LLVMParseCommandLineOptions(2, args, NULL);
    LLVMInitializeNVPTXTargetInfo();
    LLVMInitializeNVPTXTarget();
    LLVMInitializeNVPTXTargetMC();
    LLVMInitializeNVPTXAsmPrinter();
}

void gen_lower_prepare(LLVMModuleRef mod) {
    pthread_once(&init_once, init_nvptx);
    LLVMSetTarget(mod, NVPTX_TRIPLE);
    LLVMSetDataLayout(mod, NVPTX_LAYOUT);
}

/* A target machine for sm at a PTX version; the caller disposes it. */
static kiln_status make_machine(const gen_target *t, int ptx_version, int opt_level,
                                LLVMTargetMachineRef *out, kiln_error *err) {
    pthread_once(&init_once, init_nvptx);
    LLVMTargetRef target;
    char *msg = NULL;
    if (LLVMGetTargetFromTriple(NVPTX_TRIPLE, &target, &msg)) {
        kiln_fail(err, KILN_EGEN, "LLVM has no NVPTX target: %s", msg ? msg : "?");
        LLVMDisposeMessage(msg);
        return KILN_EGEN;
    }
    char cpu[16], features[16];
    snprintf(cpu, sizeof cpu, "sm_%d", t->sm);
    snprintf(features, sizeof features, "+ptx%d", ptx_version);
    LLVMCodeGenOptLevel lvl = opt_level <= 0 ? LLVMCodeGenLevelNone : opt_level >= 3 ? LLVMCodeGenLevelAggressive : LLVMCodeGenLevelDefault;
    *out = LLVMCreateTargetMachine(target, NVPTX_TRIPLE, cpu, features, lvl, LLVMRelocDefault, LLVMCodeModelDefault);
    if (!*out) return kiln_fail(err, KILN_EGEN, "LLVM could not create a target machine for %s", cpu);
    return KILN_OK;
}

kiln_status gen_lower_optimize(LLVMModuleRef mod, const gen_target *t, int ptx_version, int opt_level,
                               kiln_error *err) {
    char *msg = NULL;
    if (LLVMVerifyModule(mod, LLVMReturnStatusAction, &msg)) {
        kiln_fail(err, KILN_EGEN, "generated module does not verify: %s", msg ? msg : "?");
        LLVMDisposeMessage(msg);
        return KILN_EGEN;
    }
    LLVMDisposeMessage(msg);
    if (opt_level == 0) return KILN_OK;
    LLVMTargetMachineRef tm;
    kiln_status st = make_machine(t, ptx_version, opt_level, &tm, err);
    if (st != KILN_OK) return st;
    char pipeline[32];
    snprintf(pipeline, sizeof pipeline, "default<O%d>", opt_level);
    LLVMPassBuilderOptionsRef opts = LLVMCreatePassBuilderOptions();
    LLVMErrorRef e = LLVMRunPasses(mod, pipeline, tm, opts);
    LLVMDisposePassBuilderOptions(opts);
    LLVMDisposeTargetMachine(tm);
    if (e) {
        char *em = LLVMGetErrorMessage(e);
        kiln_fail(err, KILN_EGEN, "LLVM optimization failed: %s", em);
        LLVMDisposeErrorMessage(em);
        return KILN_EGEN;
    }
    return KILN_OK;
}

/* LLVM 19's NVPTX backend keeps the nvvm.annotations it reads (maxntid, reqntid, kernel) in
 * one process-wide map keyed by the Module's and the Function's addresses. The optimizer
 * fills it (NVVMIntrRange reads maxntid to bound %tid), and only the NVPTX AsmPrinter's
 * doFinalization erases a module's entry (llvm::clearAnnotationCache is not exported by
 * libLLVM-19.so). A module that is optimized but never printed as PTX (the emulator's, or
 * --emit ll) leaves its entry behind, and a later module that malloc places at the same
 * addresses reads the stale one: a 256-thread LayerNorm was optimized as if maxntid were
 * another kernel's 128, %tid.x >> 7 folded to 0 and its second row group never ran (the
 * emu_layernorm flake, more frequent with two generators in one process). So every module
 * that is not printed goes through the AsmPrinter once, emptied first so that it costs
 * only the PTX header. */
void gen_lower_forget(LLVMModuleRef mod, const gen_target *t, int ptx_version) {
    for (LLVMValueRef f = LLVMGetFirstFunction(mod); f; f = LLVMGetNextFunction(f))
        LLVMReplaceAllUsesWith(f, LLVMGetPoison(LLVMTypeOf(f)));
    for (LLVMValueRef g = LLVMGetFirstGlobal(mod); g; g = LLVMGetNextGlobal(g))
        LLVMReplaceAllUsesWith(g, LLVMGetPoison(LLVMTypeOf(g)));
    for (LLVMValueRef f = LLVMGetFirstFunction(mod), next; f; f = next) {
        next = LLVMGetNextFunction(f);
        LLVMDeleteFunction(f);
    }
    for (LLVMValueRef g = LLVMGetFirstGlobal(mod), next; g; g = next) {
        next = LLVMGetNextGlobal(g);
        LLVMDeleteGlobal(g);
    }
    LLVMTargetMachineRef tm;
    if (make_machine(t, ptx_version, 0, &tm, NULL) != KILN_OK) return;
    char *msg = NULL;
    LLVMMemoryBufferRef buf = NULL;
    if (LLVMTargetMachineEmitToMemoryBuffer(tm, mod, LLVMAssemblyFile, &msg, &buf)) LLVMDisposeMessage(msg);
    else LLVMDisposeMemoryBuffer(buf);
    LLVMDisposeTargetMachine(tm);
}

kiln_status gen_lower_emit(LLVMModuleRef mod, const gen_target *t, int ptx_version, kiln_emit emit,
                           char **text, size_t *len, kiln_error *err) {
    if (emit == KILN_EMIT_LL) {
        char *s = LLVMPrintModuleToString(mod);
        *len = strlen(s);
        *text = malloc(*len + 1);
        if (*text) memcpy(*text, s, *len + 1);
        LLVMDisposeMessage(s);
        return *text ? KILN_OK : kiln_fail(err, KILN_ENOMEM, "out of memory");
    }
    LLVMTargetMachineRef tm;
    kiln_status st = make_machine(t, ptx_version, 2, &tm, err); /* O2 codegen: same PTX as O3 here, without a second GVN */
    if (st != KILN_OK) return st;
    char *msg = NULL;
    LLVMMemoryBufferRef buf = NULL;
    if (LLVMTargetMachineEmitToMemoryBuffer(tm, mod, LLVMAssemblyFile, &msg, &buf)) {
        kiln_fail(err, KILN_EGEN, "NVPTX code generation failed: %s", msg ? msg : "?");
        LLVMDisposeMessage(msg);
        LLVMDisposeTargetMachine(tm);
        return KILN_EGEN;
    }
    LLVMDisposeTargetMachine(tm);
    size_t n = LLVMGetBufferSize(buf);
    *text = malloc(n + 1);
    if (*text) {
        memcpy(*text, LLVMGetBufferStart(buf), n);
        (*text)[n] = 0;
        *len = strnlen(*text, n);
    }
    LLVMDisposeMemoryBuffer(buf);
    return *text ? KILN_OK : kiln_fail(err, KILN_ENOMEM, "out of memory");
}
