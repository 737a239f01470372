/* emu/emu_jit.c - the emulator object: ORC LLJIT, loading kernels (and the cache of loaded kernels), checking and
 * running launches.
 *
 * The kernel cache: a kernel a kiln_emu_load made is not destroyed when its user frees it but parked, idle, in
 * its emulator; a later kiln_emu_load of the same key takes it back instead of generating the module and
 * JIT-compiling it again (0.1 s of CPU for the small shared kernels, 0.2-1.4 s for the f16-scaled backward's).
 * The key is the whole text of "<generator serial> sm_<N> profile=<0|1> <canonical spec>": the generator's serial
 * (gen_serial, never reused) stands for all it fixed at creation (template dir, pipeline, KILN_PIPELINE, opt level); the canonical spec
 * (kiln_canonical_spec: defaults filled in) for the spec, so two spellings of one kernel share it; profile for the
 * instrumentation. Nothing else changes the host module: race checking, `twice` and KILN_EMU_RACE are read per
 * launch. Keys are compared whole (strcmp), never by a hash. A load takes an idle kernel first; else an uninstrumented
 * kernel of the key still in use is shared (its users counted; the last kiln_emu_kernel_free parks it): one
 * emulator runs one launch at a time (kiln/emu.h), and a launch's only state in the kernel, its shared-memory arena,
 * is poisoned before each block (emu_sched.c), so users cannot see each other. A profiled kernel holds counters its
 * user reads, so it is never shared (two live profiled loads are two compilations), and its counters are zeroed when
 * it is taken back from idle. A module that defines a writable global of its own (memory a launch could leave
 * changed) is never cached. kiln_emu_load_ir's kernels are not cached. At most
 * EMU_CACHE_DEFAULT kernels stay idle per emulator (KILN_EMU_CACHE=N sets it, 0 turns the cache off); parking one
 * more destroys the least recently freed. KILN_EMU_CACHE_STATS=1 prints the hits and misses when the emulator is
 * destroyed. Measured (wave 25, docs/emulator.md "The kernel cache"): attention_bwd_f16scaled_test loads 820 kernels,
 * 262 of them now taken from the cache, 305 -> 289 s CPU; attention_f16scaled_test 164 loads, 38 hits, 113.7 -> 106.4 s;
 * attention_mask_emu_test 352 loads, 60 hits, 94.5 -> 93.6 s
 * (the kernels it loads again are mostly the cheap shared ones; docs/emulator.md). */
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
    kiln_emu_kernel *kernels; /* in use: doubly linked, for kiln_emu_destroy */
    int profile;              /* instrument kernels loaded from now on (emu_profile.c) */
    kiln_emu_kernel *idle;    /* the cache: kernels their users freed, the most recently freed first */
    unsigned nidle, idle_cap; /* idle_cap 0: no cache */
    unsigned long hits, misses, unparkable;
};

struct kiln_emu_kernel {
    kiln_emu *emu;
    kiln_emu_kernel *prev, *next;
    kiln_kernel_meta meta;
    const gen_target *target;
    LLVMOrcResourceTrackerRef rt;
    emu_rewrite_info info;
    emu_kernel_rt run;
    char *key;  /* the cache key (malloc'd; file comment), NULL for a kernel that is never parked */
    int parked; /* in emu->idle rather than emu->kernels */
    int users;  /* kiln_emu_load calls it answers that were not freed yet (more than one: shared, file comment) */
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

/* How many freed kernels an emulator keeps for reuse: KILN_EMU_CACHE=N (0: none), else EMU_CACHE_DEFAULT.
 * An idle kernel holds its code, its rewrite tables and its shared-memory arena (the target's opt-in maximum):
 * attention_mask_emu_test's peak RSS was 153 MB with 64 idle, 220 MB with 292 (~0.23 MB each), so 256 costs
 * ~60 MB at most; attention_bwd_f16scaled_test fills it (256 idle at its end, 344 MB peak against 270 MB
 * without the cache); with 64 it missed 30 more loads. */
#define EMU_CACHE_DEFAULT 256
static unsigned cache_cap_env(void) {
    const char *env = getenv("KILN_EMU_CACHE");
    if (!env || !*env) return EMU_CACHE_DEFAULT;
    char *end;
    unsigned long n = strtoul(env, &end, 10);
    return *end || n > 100000 ? EMU_CACHE_DEFAULT : (unsigned)n;
}

static void kernel_destroy(kiln_emu_kernel *k);

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
    emu->idle_cap = cache_cap_env();
    if (st != KILN_OK) {
        kiln_emu_destroy(emu);
        return st;
    }
    *out = emu;
    return KILN_OK;
}

void kiln_emu_destroy(kiln_emu *emu) {
    if (!emu) return;
    const char *stats = getenv("KILN_EMU_CACHE_STATS");
    if (stats && *stats && strcmp(stats, "0"))
        fprintf(stderr, "kiln emulator cache: %lu hits, %lu misses, %lu never parked (writable globals), %u idle of "
                "at most %u\n", emu->hits, emu->misses, emu->unparkable, emu->nidle, emu->idle_cap);
    while (emu->kernels) kernel_destroy(emu->kernels);
    while (emu->idle) kernel_destroy(emu->idle);
    if (emu->jit) {
        LLVMErrorRef e = LLVMOrcDisposeLLJIT(emu->jit);
        if (e) LLVMConsumeError(e);
    }
    emu_block_destroy(emu->blk);
    LLVMDisposeMessage(emu->triple);
    LLVMDisposeMessage(emu->dl);
    free(emu);
}

/* Takes k out of the list it is in (its emulator's kernels in use, or the idle ones). */
static void kernel_unlink(kiln_emu_kernel *k) {
    kiln_emu_kernel **head = k->emu ? (k->parked ? &k->emu->idle : &k->emu->kernels) : NULL;
    if (k->prev) k->prev->next = k->next;
    else if (head && *head == k) *head = k->next;
    if (k->next) k->next->prev = k->prev;
    if (k->parked && k->emu) k->emu->nidle--;
    k->prev = k->next = NULL;
    k->parked = 0;
}

static void kernel_push(kiln_emu_kernel **head, kiln_emu_kernel *k) {
    k->prev = NULL;
    k->next = *head;
    if (*head) (*head)->prev = k;
    *head = k;
}

static void kernel_destroy(kiln_emu_kernel *k) {
    if (k->rt) {
        LLVMErrorRef e = LLVMOrcResourceTrackerRemove(k->rt);
        if (e) LLVMConsumeError(e);
        LLVMOrcReleaseResourceTracker(k->rt);
    }
    kernel_unlink(k);
    emu_rewrite_info_free(&k->info);
    emu_prof_free(k->run.prof);
    free(k->run.arena);
    free(k->key);
    free(k);
}

/* Destroys the least recently parked kernels until at most cap are idle. */
static void cache_trim(kiln_emu *emu, unsigned cap) {
    while (emu->nidle > cap) {
        kiln_emu_kernel *last = emu->idle;
        while (last->next) last = last->next;
        kernel_destroy(last);
    }
}

void kiln_emu_kernel_free(kiln_emu_kernel *k) {
    if (!k || k->parked || --k->users > 0) return;
    if (!k->key || !k->emu || !k->emu->idle_cap) {
        kernel_destroy(k);
        return;
    }
    kernel_unlink(k);
    kernel_push(&k->emu->idle, k);
    k->parked = 1;
    k->emu->nidle++;
    cache_trim(k->emu, k->emu->idle_cap);
}

/* The kernel of this key: an idle one taken back into use with its profile counters zeroed, else an
 * uninstrumented one in use, shared (one more user); NULL when none. */
static kiln_emu_kernel *cache_take(kiln_emu *emu, const char *key) {
    for (kiln_emu_kernel *k = emu->idle; k; k = k->next) {
        if (strcmp(k->key, key)) continue;
        kernel_unlink(k);
        kernel_push(&emu->kernels, k);
        if (k->run.prof) emu_prof_reset(k->run.prof);
        k->users = 1;
        emu->hits++;
        return k;
    }
    for (kiln_emu_kernel *k = emu->kernels; k; k = k->next) {
        if (!k->key || k->run.prof || strcmp(k->key, key)) continue;
        k->users++;
        emu->hits++;
        return k;
    }
    return NULL;
}

void emu_cache_set_cap(kiln_emu *emu, unsigned cap) {
    emu->idle_cap = cap;
    cache_trim(emu, cap);
}

void emu_cache_stats(const kiln_emu *emu, emu_cache_counts *out) {
    out->hits = emu->hits, out->misses = emu->misses, out->unparkable = emu->unparkable;
    out->idle = emu->nidle, out->cap = emu->idle_cap;
}

const kiln_kernel_meta *kiln_emu_kernel_meta(const kiln_emu_kernel *k) { return &k->meta; }

/* Whether the host module defines a writable global variable (after emu_rewrite_apply: shared variables are
 * addresses in the arena by then): memory of the kernel's own that a launch could leave changed, so the kernel
 * must not be handed to another user. */
static int writable_globals(LLVMModuleRef mod) {
    for (LLVMValueRef g = LLVMGetFirstGlobal(mod); g; g = LLVMGetNextGlobal(g))
        if (!LLVMIsDeclaration(g) && !LLVMIsGlobalConstant(g)) return 1;
    return 0;
}

/* Rewrites mod (owned by tsc's context; consumed) and compiles it; *parkable tells whether it may be cached. */
static kiln_status load_module(kiln_emu *emu, LLVMOrcThreadSafeContextRef tsc, LLVMModuleRef mod,
                               const kiln_kernel_meta *meta, kiln_emu_kernel **out, int *parkable, kiln_error *err) {
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
        kernel_destroy(k);
        return st;
    }
    *parkable = !writable_globals(mod);
    k->rt = LLVMOrcJITDylibCreateResourceTracker(LLVMOrcLLJITGetMainJITDylib(emu->jit));
    LLVMErrorRef e = LLVMOrcLLJITAddLLVMIRModuleWithRT(emu->jit, k->rt, LLVMOrcCreateNewThreadSafeModule(mod, tsc));
    LLVMOrcExecutorAddress addr = 0;
    if (!e) e = LLVMOrcLLJITLookup(emu->jit, &addr, k->info.entry_symbol);
    if (e) {
        st = llvm_fail(err, e, "compiling the kernel for the host");
        kernel_destroy(k);
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
    kernel_push(&emu->kernels, k);
    k->users = 1;
    *out = k;
    return KILN_OK;
}

kiln_status kiln_emu_load(kiln_emu *emu, kiln_gen *gen, const char *spec, int sm, kiln_emu_kernel **out,
                          kiln_error *err) {
    *out = NULL;
    /* The cache's key (file comment). A spec kiln_canonical_spec refuses goes the uncached way, which reports
     * the error as it always did; one it accepts is generated from its canonical text, which reuses the table
     * kiln_canonical_spec resolved (gen_api.c): the same module, resolved once. */
    char canon[KILN_SPEC_MAX], key[KILN_SPEC_MAX + 64];
    const char *text = spec;
    int keyed = 0;
    if (emu->idle_cap && gen && spec) {
        kiln_error ignored = {0};
        if (kiln_canonical_spec(gen, spec, canon, sizeof canon, &ignored) == KILN_OK &&
            (size_t)snprintf(key, sizeof key, "%llu sm_%d profile=%d %s", gen_serial(gen), sm, emu->profile, canon) <
                sizeof key) {
            keyed = 1, text = canon;
            if ((*out = cache_take(emu, key))) return KILN_OK;
        }
    }
    /* The module is built in a context of its own, which the thread-safe context then owns
     * (LLVM 21+ no longer hands out the context inside an ORC ThreadSafeContext). */
    LLVMContextRef ctx = LLVMContextCreate();
    LLVMModuleRef mod = NULL;
    kiln_kernel_meta meta;
    int parkable = 0;
    kiln_status st = gen_build_module(gen, text, sm, ctx, &mod, &meta, err);
    LLVMOrcThreadSafeContextRef tsc = LLVMOrcCreateNewThreadSafeContextFromLLVMContext(ctx);
    if (st == KILN_OK) st = load_module(emu, tsc, mod, &meta, out, &parkable, err);
    LLVMOrcDisposeThreadSafeContext(tsc);
    if (st == KILN_OK && keyed) {
        emu->misses++;
        if (parkable) (*out)->key = strdup(key); /* out of memory: a kernel that is not cached */
        else emu->unparkable++;
    }
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
    int parkable = 0;
    if (st == KILN_OK) {
        st = load_module(emu, tsc, mod, &meta, out, &parkable, err);
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
