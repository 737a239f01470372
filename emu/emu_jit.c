/* emu/emu_jit.c - the emulator object: ORC LLJIT, loading kernels, checking and running launches. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <llvm-c/Error.h>
#include <llvm-c/IRReader.h>
#include <llvm-c/LLJIT.h>
#include <llvm-c/Orc.h>
#include <llvm-c/Target.h>
#include <llvm-c/TargetMachine.h>

#include "emu.h"
#include "kiln/emu_profile.h"

struct kiln_emu {
    LLVMOrcLLJITRef jit;
    char *triple, *dl;
    unsigned next_id;
    emu_block *blk;
    kiln_emu_kernel *kernels; /* doubly linked, for kiln_emu_destroy */
    int profile;              /* instrument kernels loaded from now on (emu_profile.c) */
};

struct kiln_emu_kernel {
    kiln_emu *emu;
    kiln_emu_kernel *prev, *next;
    kiln_kernel_meta meta;
    const gen_target *target;
    LLVMOrcResourceTrackerRef rt;
    emu_rewrite_info info;
    emu_kernel_rt run;
};

static kiln_status llvm_fail(kiln_error *err, LLVMErrorRef e, const char *what) {
    char *msg = LLVMGetErrorMessage(e);
    kiln_status st = kiln_fail(err, KILN_EEMU, "emulator: %s: %.900s", what, msg);
    LLVMDisposeErrorMessage(msg);
    return st;
}

static pthread_once_t native_once = PTHREAD_ONCE_INIT;
static int native_failed;
static void init_native(void) {
    native_failed = LLVMInitializeNativeTarget() || LLVMInitializeNativeAsmPrinter();
}

/* The host target machine; its triple and data layout are what modules get rewritten to.
 * The module arrives optimized; the fast instruction selector (-O0 codegen) compiles it
 * 2-3x faster than -O1 and runs as fast, since the emulator's own work dominates. The CPU
 * is the generic one: host features change results (AVX512-BF16 flushes subnormals when
 * rounding to bf16), while libcalls (fmaf, emu_half's helpers) give the same bits anywhere. */
static kiln_status host_machine(kiln_emu *emu, LLVMTargetMachineRef *out, kiln_error *err) {
    char *msg = NULL;
    LLVMTargetRef target;
    emu->triple = LLVMGetDefaultTargetTriple();
    if (LLVMGetTargetFromTriple(emu->triple, &target, &msg)) {
        kiln_status st = kiln_fail(err, KILN_EEMU, "emulator: no LLVM target for the host (%s): %s", emu->triple, msg);
        LLVMDisposeMessage(msg);
        return st;
    }
    *out = LLVMCreateTargetMachine(target, emu->triple, "", "", LLVMCodeGenLevelNone, LLVMRelocPIC,
                                   LLVMCodeModelJITDefault);
    if (!*out) return kiln_fail(err, KILN_EEMU, "emulator: cannot create a host target machine");
    LLVMTargetDataRef td = LLVMCreateTargetDataLayout(*out);
    emu->dl = LLVMCopyStringRepOfTargetData(td);
    LLVMDisposeTargetData(td);
    return KILN_OK;
}

/* kiln_emu_dispatch, kiln_emu_store and the half-precision helpers, at their addresses. */
static kiln_status define_runtime(kiln_emu *emu, kiln_error *err) {
    unsigned nhalf;
    const emu_symbol *half = emu_half_symbols(&nhalf);
    LLVMOrcCSymbolMapPair pairs[32];
    unsigned n = 0;
    enum { NOWN = 5 };
    const emu_symbol own[NOWN] = {{"kiln_emu_dispatch", (void *)emu_dispatch_entry},
                                  {"kiln_emu_store", (void *)emu_store_entry},
                                  {"kiln_emu_prof_bb", (void *)emu_prof_bb_entry},
                                  {"kiln_emu_prof_mem", (void *)emu_prof_mem_entry},
                                  {"kiln_emu_access", (void *)emu_access_entry}};
    for (unsigned i = 0; i < NOWN + nhalf && n < 32; i++, n++) {
        const emu_symbol *s = i < NOWN ? &own[i] : &half[i - NOWN];
        pairs[n].Name = LLVMOrcLLJITMangleAndIntern(emu->jit, s->name);
        pairs[n].Sym.Address = (LLVMOrcExecutorAddress)(uintptr_t)s->addr;
        pairs[n].Sym.Flags.GenericFlags = LLVMJITSymbolGenericFlagsExported | LLVMJITSymbolGenericFlagsCallable;
        pairs[n].Sym.Flags.TargetFlags = 0;
    }
    LLVMOrcJITDylibRef jd = LLVMOrcLLJITGetMainJITDylib(emu->jit);
    LLVMOrcMaterializationUnitRef mu = LLVMOrcAbsoluteSymbols(pairs, n);
    LLVMErrorRef e = LLVMOrcJITDylibDefine(jd, mu);
    if (e) {
        LLVMOrcDisposeMaterializationUnit(mu);
        return llvm_fail(err, e, "defining the runtime symbols");
    }
    LLVMOrcDefinitionGeneratorRef gen;
    e = LLVMOrcCreateDynamicLibrarySearchGeneratorForProcess(&gen, 0, NULL, NULL);
    if (e) return llvm_fail(err, e, "opening the process's symbols");
    LLVMOrcJITDylibAddGenerator(jd, gen);
    return KILN_OK;
}

kiln_status kiln_emu_create(kiln_emu **out, kiln_error *err) {
    *out = NULL;
    pthread_once(&native_once, init_native);
    if (native_failed) return kiln_fail(err, KILN_EEMU, "emulator: LLVM has no native target in this build");
    kiln_emu *emu = calloc(1, sizeof *emu);
    if (!emu) return kiln_fail(err, KILN_ENOMEM, "emulator: out of memory");
    LLVMTargetMachineRef tm;
    kiln_status st = host_machine(emu, &tm, err);
    if (st == KILN_OK) {
        LLVMOrcLLJITBuilderRef builder = LLVMOrcCreateLLJITBuilder();
        LLVMOrcLLJITBuilderSetJITTargetMachineBuilder(builder, LLVMOrcJITTargetMachineBuilderCreateFromTargetMachine(tm));
        LLVMErrorRef e = LLVMOrcCreateLLJIT(&emu->jit, builder);
        if (e) st = llvm_fail(err, e, "creating the JIT");
    }
    if (st == KILN_OK) st = define_runtime(emu, err);
    if (st == KILN_OK) st = emu_block_create(&emu->blk, err);
    if (st != KILN_OK) {
        kiln_emu_destroy(emu);
        return st;
    }
    *out = emu;
    return KILN_OK;
}

void kiln_emu_destroy(kiln_emu *emu) {
    if (!emu) return;
    while (emu->kernels) kiln_emu_kernel_free(emu->kernels);
    if (emu->jit) {
        LLVMErrorRef e = LLVMOrcDisposeLLJIT(emu->jit);
        if (e) LLVMConsumeError(e);
    }
    emu_block_destroy(emu->blk);
    LLVMDisposeMessage(emu->triple);
    LLVMDisposeMessage(emu->dl);
    free(emu);
}

void kiln_emu_kernel_free(kiln_emu_kernel *k) {
    if (!k) return;
    if (k->rt) {
        LLVMErrorRef e = LLVMOrcResourceTrackerRemove(k->rt);
        if (e) LLVMConsumeError(e);
        LLVMOrcReleaseResourceTracker(k->rt);
    }
    if (k->prev) k->prev->next = k->next;
    else if (k->emu && k->emu->kernels == k) k->emu->kernels = k->next;
    if (k->next) k->next->prev = k->prev;
    emu_rewrite_info_free(&k->info);
    emu_prof_free(k->run.prof);
    free(k->run.arena);
    free(k);
}

const kiln_kernel_meta *kiln_emu_kernel_meta(const kiln_emu_kernel *k) { return &k->meta; }

/* Rewrites mod (owned by tsc's context; consumed) and compiles it. */
static kiln_status load_module(kiln_emu *emu, LLVMOrcThreadSafeContextRef tsc, LLVMModuleRef mod,
                               const kiln_kernel_meta *meta, kiln_emu_kernel **out, kiln_error *err) {
    kiln_emu_kernel *k = calloc(1, sizeof *k);
    if (!k) {
        LLVMDisposeModule(mod);
        return kiln_fail(err, KILN_ENOMEM, "emulator: out of memory");
    }
    k->emu = emu;
    k->meta = *meta;
    k->target = gen_target_find(meta->sm);
    kiln_status st = KILN_OK;
    if (!k->target) st = kiln_fail(err, KILN_EINVAL, "emulator: unknown target sm_%d", meta->sm);
    if (st == KILN_OK) st = emu_rewrite_scan(mod, meta->entry, emu->next_id++, emu->dl, &k->info, err);
    if (st == KILN_OK) {
        k->run.arena_size = k->info.dynamic_offset + k->target->smem_optin_max;
        k->run.arena = aligned_alloc(128, (k->run.arena_size + 127) / 128 * 128);
        if (!k->run.arena) st = kiln_fail(err, KILN_ENOMEM, "emulator: out of memory for shared memory");
    }
    if (st == KILN_OK && emu->profile)
        st = emu_prof_instrument(mod, emu->dl, k->run.arena, k->run.arena_size, &k->run.prof, err);
    if (st == KILN_OK) st = emu_rewrite_apply(mod, meta->entry, emu->triple, emu->dl, k->run.arena, &k->info, err);
    if (st != KILN_OK) {
        LLVMDisposeModule(mod);
        kiln_emu_kernel_free(k);
        return st;
    }
    k->rt = LLVMOrcJITDylibCreateResourceTracker(LLVMOrcLLJITGetMainJITDylib(emu->jit));
    LLVMErrorRef e = LLVMOrcLLJITAddLLVMIRModuleWithRT(emu->jit, k->rt, LLVMOrcCreateNewThreadSafeModule(mod, tsc));
    LLVMOrcExecutorAddress addr = 0;
    if (!e) e = LLVMOrcLLJITLookup(emu->jit, &addr, k->info.entry_symbol);
    if (e) {
        st = llvm_fail(err, e, "compiling the kernel for the host");
        kiln_emu_kernel_free(k);
        return st;
    }
    k->run.entry = (void (*)(void **))(uintptr_t)addr;
    k->run.sites = k->info.sites;
    k->run.nsites = k->info.nsites;
    k->run.static_smem = k->info.static_smem;
    k->run.dynamic_offset = k->info.dynamic_offset;
    k->run.access = k->info.access;
    k->run.naccess = k->info.naccess;
    k->run.meta = &k->meta;
    k->next = emu->kernels;
    if (emu->kernels) emu->kernels->prev = k;
    emu->kernels = k;
    *out = k;
    return KILN_OK;
}

kiln_status kiln_emu_load(kiln_emu *emu, kiln_gen *gen, const char *spec, int sm, kiln_emu_kernel **out,
                          kiln_error *err) {
    *out = NULL;
    /* The module is built in a context of its own, which the thread-safe context then owns
     * (LLVM 21+ no longer hands out the context inside an ORC ThreadSafeContext). */
    LLVMContextRef ctx = LLVMContextCreate();
    LLVMModuleRef mod = NULL;
    kiln_kernel_meta meta;
    kiln_status st = gen_build_module(gen, spec, sm, ctx, &mod, &meta, err);
    LLVMOrcThreadSafeContextRef tsc = LLVMOrcCreateNewThreadSafeContextFromLLVMContext(ctx);
    if (st == KILN_OK) st = load_module(emu, tsc, mod, &meta, out, err);
    LLVMOrcDisposeThreadSafeContext(tsc);
    return st;
}

kiln_status kiln_emu_load_ir(kiln_emu *emu, const char *ir, size_t len, const char *entry, int sm,
                             kiln_emu_kernel **out, kiln_error *err) {
    *out = NULL;
    LLVMContextRef ctx = LLVMContextCreate();
    LLVMMemoryBufferRef buf = LLVMCreateMemoryBufferWithMemoryRangeCopy(ir, len, "kiln-emu-ir");
    LLVMModuleRef mod = NULL;
    char *msg = NULL;
    kiln_status st = KILN_OK;
    if (LLVMParseIRInContext(ctx, buf, &mod, &msg)) {
        st = kiln_fail(err, KILN_EINVAL, "emulator: cannot parse the IR: %.900s", msg ? msg : "");
        LLVMDisposeMessage(msg);
    }
    kiln_kernel_meta meta;
    if (st == KILN_OK) emu_reflect(mod, sm);
    if (st == KILN_OK) st = emu_meta_from_ir(mod, entry, sm, &meta, err);
    LLVMOrcThreadSafeContextRef tsc = LLVMOrcCreateNewThreadSafeContextFromLLVMContext(ctx);
    if (st == KILN_OK) {
        st = load_module(emu, tsc, mod, &meta, out, err);
    } else if (mod) {
        LLVMDisposeModule(mod);
    }
    LLVMOrcDisposeThreadSafeContext(tsc);
    return st;
}

/* ---- launches ---- */

static kiln_status check_dims(const kiln_emu_kernel *k, const kiln_emu_launch *l, kiln_error *err) {
    static const unsigned grid_max[3] = {0x7fffffffu, 65535, 65535}, block_max[3] = {1024, 1024, 64};
    static const char axis[3] = {'x', 'y', 'z'};
    for (int a = 0; a < 3; a++) {
        if (!l->grid[a] || l->grid[a] > grid_max[a])
            return kiln_fail(err, KILN_EINVAL, "bad launch: grid %c = %u; valid: 1..%u", axis[a], l->grid[a], grid_max[a]);
        if (!l->block[a] || l->block[a] > block_max[a])
            return kiln_fail(err, KILN_EINVAL, "bad launch: block %c = %u; valid: 1..%u", axis[a], l->block[a], block_max[a]);
        if (k->info.reqntid[a] && l->block[a] != k->info.reqntid[a])
            return kiln_fail(err, KILN_EINVAL, "bad launch: block %c = %u, but the kernel requires %u (reqntid)",
                             axis[a], l->block[a], k->info.reqntid[a]);
    }
    unsigned long long threads = (unsigned long long)l->block[0] * l->block[1] * l->block[2];
    unsigned long long maxn = k->target->max_threads;
    if (k->info.maxntid[0]) maxn = (unsigned long long)k->info.maxntid[0] * (k->info.maxntid[1] ? k->info.maxntid[1] : 1) *
                                   (k->info.maxntid[2] ? k->info.maxntid[2] : 1);
    if (threads > maxn)
        return kiln_fail(err, KILN_EINVAL, "bad launch: %llu threads per block (%ux%ux%u); %s allows at most %llu",
                         threads, l->block[0], l->block[1], l->block[2],
                         maxn < k->target->max_threads ? "the kernel (maxntid)" : "the target", maxn);
    return KILN_OK;
}

static kiln_status check_smem(const kiln_emu_kernel *k, const kiln_emu_launch *l, kiln_error *err) {
    unsigned long long total = (unsigned long long)k->info.dynamic_offset + l->dynamic_smem;
    if (total > k->target->smem_optin_max)
        return kiln_fail(err, KILN_EINVAL, "bad launch: %llu bytes of shared memory per block (%zu static + %u "
                         "dynamic); sm_%d allows at most %u", total, k->info.static_smem, l->dynamic_smem,
                         k->target->sm, k->target->smem_optin_max);
    return KILN_OK;
}

static kiln_status check_args(const kiln_emu_kernel *k, void **args, uint32_t nullable, kiln_error *err) {
    const kiln_kernel_meta *m = &k->meta;
    if (!args && m->nparams)
        return kiln_fail(err, KILN_EINVAL, "bad launch: no arguments; the kernel takes %d", m->nparams);
    for (int i = 0; i < m->nparams; i++) {
        if (!args[i])
            return kiln_fail(err, KILN_EINVAL, "bad launch: argument %d ('%s') is NULL; args[i] must point at the "
                             "value", i, m->params[i].name);
        void *p = NULL;
        if (m->params[i].kind == KILN_PARAM_PTR) memcpy(&p, args[i], sizeof p);
        if (m->params[i].kind == KILN_PARAM_PTR && !p && !(i < 32 && (nullable >> i & 1)))
            return kiln_fail(err, KILN_EINVAL, "bad launch: argument %d ('%s') is a null pointer (mark it in "
                             "kiln_emu_launch.nullable if the kernel accepts NULL there)", i, m->params[i].name);
    }
    return KILN_OK;
}

/* With declared extents, every non-NULL pointer argument needs one (else its accesses would fault). */
static kiln_status check_extents(const kiln_emu_kernel *k, void **args, const size_t *bytes, kiln_error *err) {
    const kiln_kernel_meta *m = &k->meta;
    for (int i = 0; i < m->nparams; i++) {
        void *p = NULL;
        if (m->params[i].kind == KILN_PARAM_PTR) memcpy(&p, args[i], sizeof p);
        if (p && !bytes[i])
            return kiln_fail(err, KILN_EINVAL, "bad launch: arg_bytes gives no size for pointer argument %d ('%s'); "
                             "give every non-NULL pointer's buffer size, or no arg_bytes at all", i, m->params[i].name);
    }
    return KILN_OK;
}

kiln_status kiln_emu_run(kiln_emu_kernel *k, const kiln_emu_launch *l, void **args, kiln_error *err) {
    if (!k || !l) return kiln_fail(err, KILN_EINVAL, "bad launch: no kernel or no launch configuration");
    kiln_status st = check_dims(k, l, err);
    if (st == KILN_OK) st = check_smem(k, l, err);
    if (st == KILN_OK) st = check_args(k, args, l->nullable, err);
    if (st == KILN_OK && l->arg_bytes) st = check_extents(k, args, l->arg_bytes, err);
    if (st == KILN_OK) st = emu_grid_run(k->emu->blk, &k->run, l, args, err);
    return st;
}

/* ---- the profile (emu_profile.c does the work) ---- */

void kiln_emu_set_profile(kiln_emu *emu, int on) { emu->profile = on != 0; }

kiln_status kiln_emu_profile_get(const kiln_emu_kernel *k, kiln_emu_profile *out, kiln_error *err) {
    if (!k->run.prof) {
        memset(out, 0, sizeof *out);
        return kiln_fail(err, KILN_EINVAL, "profile: kernel %s was loaded without profiling (call "
                         "kiln_emu_set_profile(emu, 1) before loading it)", k->meta.entry);
    }
    return emu_prof_get(k->run.prof, out, err);
}

unsigned kiln_emu_profile_nsites(const kiln_emu_kernel *k) { return k->run.prof ? emu_prof_nsites(k->run.prof) : 0; }

int kiln_emu_profile_site(const kiln_emu_kernel *k, unsigned i, kiln_smem_site *out) {
    return k->run.prof ? emu_prof_site(k->run.prof, i, out) : -1;
}

int kiln_emu_profile_block(const kiln_emu_kernel *k, unsigned i, kiln_prof_block *out) {
    return k->run.prof ? emu_prof_block(k->run.prof, i, out) : -1;
}

void kiln_emu_profile_reset(kiln_emu_kernel *k) {
    if (k->run.prof) emu_prof_reset(k->run.prof);
}
