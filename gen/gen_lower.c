/* gen/gen_lower.c - verify, optimize (kiln's pipeline or LLVM's default<On>) and lower a module
 * to PTX via NVPTX, reusing one target machine per (SM, PTX version) for a generator. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <llvm-c/Analysis.h>
#include <llvm-c/Support.h>
#include <llvm-c/Target.h>

#include "gen.h"

#define NVPTX_TRIPLE "nvptx64-nvidia-cuda"
#define NVPTX_LAYOUT "e-i64:64-i128:128-v16:16-v32:32-n16:32:64"

/* kiln's pipeline. The templates unroll and vectorize by construction and name every value
 * once, so the IR needs: promotion of the builder's variables to registers (sroa), folding
 * and common subexpressions (early-cse, instcombine), branch cleanup (simplifycfg), invariant
 * code out of the loops the templates keep (licm: the attention KV loop, launch-time hidden),
 * vector-combine, which scalarizes extracts of loaded vectors (without it ptxas needs up to
 * twice the registers on f32 attention d256), and jump-threading with correlated-propagation,
 * which fold the guards of the small-row LayerNorm tails. nvvm-intr-range puts the ranges of
 * tid/ctaid on the reads, which lets instcombine narrow index arithmetic. Each of these
 * changes the PTX of some variant; the rest of default<O3> (inlining, GVN, loop unrolling,
 * SLP, ...) made no variant of layernorm or attention better. A second instcombine after
 * vector-combine changed no byte of PTX (4760 spec x SM pairs: every spec of the layernorm, norm
 * and attention ptxas matrices on all ten SMs; NVPTX's codegen folds what it found) and cost 7 %
 * of a kernel's generation instructions, so it is not run. Loop rotation is a template's choice
 * (config().rotate_loops): it saves registers on LayerNorm's strided row loops and costs some
 * on attention's KV loop. The ptxas matrix tests check every variant against default<O3>'s
 * registers and SASS size (tests/quality/, docs/jit.md). instcombine runs one iteration either way;
 * LLVM 22 then checks that a second would change nothing and aborts the process when it would
 * (bf16 attention on sm_75 with its wide-tile low part did): no-verify-fixpoint skips the check
 * (no PTX changes: 41 sampled variants of every family on sm_75/80 byte-identical). */
#define KILN_PIPELINE_HEAD "function(nvvm-intr-range,sroa,early-cse,instcombine<no-verify-fixpoint>,simplifycfg,"
#define KILN_PIPELINE_TAIL "vector-combine,jump-threading,correlated-propagation)"
static const char kiln_pipeline_text[] = KILN_PIPELINE_HEAD "loop-mssa(licm)," KILN_PIPELINE_TAIL;
static const char kiln_pipeline_rotate[] = KILN_PIPELINE_HEAD "loop-mssa(licm,loop-rotate,licm)," KILN_PIPELINE_TAIL;

/* The codegen passes a template may name in config().skip_codegen (docs/jit.md): each left out only
 * where the template has shown its matrix variants' PTX byte-identical without it. */
const gen_codegen_skip gen_codegen_skips[] = {
    {"early-cse-1", "Early CSE", 1},
    {"consthoist", "Constant Hoisting", 0},
    {"peephole-opt", "Peephole Optimizations", 0},
    {"machine-scheduler", "Machine Instruction Scheduler", 0},
    {"early-tailduplication", "Early Tail Duplication", 0},
    {"early-machinelicm", "Early Machine Loop Invariant Code Motion", 0},
    {"early-cse-3", "Early CSE", 3}, /* NVPTX's last EarlyCSE, after loop strength reduction */
    {"dead-mi-elimination", "Remove dead machine instructions", 0},
    {"stack-coloring", "Merge disjoint stack slots", 0},
    {"stack-slot-coloring", "Stack Slot Coloring", 0},
    {"opt-phis", "Optimize machine instruction PHIs", 0},
    {NULL, NULL, 0},
};

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

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

enum { MACHINES = 8 };
struct gen_lower {
    struct {
        int sm, ptx;
        LLVMTargetMachineRef tm;
    } machine[MACHINES]; /* most recently used first */
    int nmachines;
};

kiln_status gen_lower_create(gen_lower **out, kiln_error *err) {
    *out = calloc(1, sizeof **out);
    return *out ? KILN_OK : kiln_fail(err, KILN_ENOMEM, "out of memory");
}

void gen_lower_destroy(gen_lower *lw) {
    if (!lw) return;
    for (int i = 0; i < lw->nmachines; i++) LLVMDisposeTargetMachine(lw->machine[i].tm);
    free(lw);
}

void gen_lower_prepare(LLVMModuleRef mod) {
    pthread_once(&init_once, init_nvptx);
    LLVMSetTarget(mod, NVPTX_TRIPLE);
    LLVMSetDataLayout(mod, NVPTX_LAYOUT);
}

/* The target machine for sm at a PTX version (codegen at O2: the same PTX as O3 here, without
 * a second GVN), created once per generator and kept. */
static kiln_status machine_for(gen_lower *lw, const gen_target *t, int ptx_version, LLVMTargetMachineRef *out,
                               kiln_error *err) {
    for (int i = 0; i < lw->nmachines; i++)
        if (lw->machine[i].sm == t->sm && lw->machine[i].ptx == ptx_version) {
            *out = lw->machine[i].tm;
            return KILN_OK;
        }
    pthread_once(&init_once, init_nvptx);
    LLVMTargetRef target;
    char *msg = NULL;
    if (LLVMGetTargetFromTriple(NVPTX_TRIPLE, &target, &msg)) {
        kiln_fail(err, KILN_EGEN, "LLVM has no NVPTX target: %s", msg ? msg : "?");
        LLVMDisposeMessage(msg);
        return KILN_EGEN;
    }
    char cpu[16], features[16];
    kiln_sm_name(t->sm, cpu);
    snprintf(features, sizeof features, "+ptx%d", ptx_version);
    LLVMTargetMachineRef tm = LLVMCreateTargetMachine(target, NVPTX_TRIPLE, cpu, features, LLVMCodeGenLevelDefault,
                                                      LLVMRelocDefault, LLVMCodeModelDefault);
    if (!tm) return kiln_fail(err, KILN_EGEN, "LLVM could not create a target machine for %s", cpu);
    if (lw->nmachines == MACHINES) LLVMDisposeTargetMachine(lw->machine[--lw->nmachines].tm);
    memmove(&lw->machine[1], &lw->machine[0], sizeof lw->machine[0] * (size_t)lw->nmachines);
    lw->machine[0].sm = t->sm;
    lw->machine[0].ptx = ptx_version;
    lw->machine[0].tm = tm;
    lw->nmachines++;
    *out = tm;
    return KILN_OK;
}

kiln_status gen_lower_optimize(gen_lower *lw, LLVMModuleRef mod, const gen_target *t, int ptx_version,
                               int opt_level, const char *pipeline, int rotate_loops, kiln_gen_timing *tm,
                               kiln_error *err) {
    double t0 = now_ms();
    char *msg = NULL;
    if (LLVMVerifyModule(mod, LLVMReturnStatusAction, &msg)) {
        kiln_fail(err, KILN_EGEN, "generated module does not verify: %s", msg ? msg : "?");
        LLVMDisposeMessage(msg);
        return KILN_EGEN;
    }
    LLVMDisposeMessage(msg);
    double t1 = now_ms();
    if (tm) tm->verify = t1 - t0;
    if (opt_level == 0) return KILN_OK;
    LLVMTargetMachineRef machine;
    kiln_status st = machine_for(lw, t, ptx_version, &machine, err);
    if (st != KILN_OK) return st;
    char pipe[32];
    const char *text = pipeline ? pipeline : rotate_loops ? kiln_pipeline_rotate : kiln_pipeline_text;
    if (opt_level < 3) {
        snprintf(pipe, sizeof pipe, "default<O%d>", opt_level);
        text = pipe;
    }
    char why[512];
    if (gen_llvm_run_passes(machine, mod, text, tm, why, sizeof why))
        return kiln_fail(err, KILN_EGEN, "LLVM optimization failed: %s", why);
    if (tm) tm->optimize = now_ms() - t1;
    return KILN_OK;
}

/* No module needs forgetting: LLVM 19's NVPTX backend cached the nvvm.annotations it read (maxntid,
 * kernel) per Module address until the AsmPrinter erased them, and a module that was optimized but
 * never printed left a stale entry for the next module malloc put at the same address (the old
 * emu_layernorm flake; gen_lower_forget printed every such module once). Since LLVM 21 the launch
 * bounds are function attributes ("nvvm.maxntid", "nvvm.maxnreg", gen_memory.c) and kernels a calling
 * convention; the cache that remains serves only nvvm.annotations keys kiln never writes (texture,
 * surface, sampler). tests/gen_threads_test.c keeps the regression test. */

kiln_status gen_lower_emit(gen_lower *lw, LLVMModuleRef mod, const gen_target *t, int ptx_version, kiln_emit emit,
                           unsigned drop, char **text, size_t *len, kiln_gen_timing *tm, kiln_error *err) {
    if (emit == KILN_EMIT_LL) {
        char *s = LLVMPrintModuleToString(mod);
        *len = strlen(s);
        *text = malloc(*len + 1);
        if (*text) memcpy(*text, s, *len + 1);
        LLVMDisposeMessage(s);
        return *text ? KILN_OK : kiln_fail(err, KILN_ENOMEM, "out of memory");
    }
    LLVMTargetMachineRef machine;
    kiln_status st = machine_for(lw, t, ptx_version, &machine, err);
    if (st != KILN_OK) return st;
    if (gen_wgmma_lower(mod)) /* kiln.wgmma.* pseudo-intrinsics -> inline PTX (gen_wgmma_lower.c) */
        return kiln_fail(err, KILN_ENOMEM, "out of memory lowering the wgmma pseudo-intrinsics to inline PTX");
    char why[512];
    if (gen_llvm_codegen(machine, mod, drop, tm, text, len, why, sizeof why))
        return kiln_fail(err, KILN_EGEN, "NVPTX code generation failed: %s", why);
    *len = strnlen(*text, *len);
    return KILN_OK;
}
