/* emu/emu_profile.c - the emulator's profile: instruments a module, costs shared-memory requests by bank, counts warp instructions. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu.h"
#include "kiln/emu_profile.h"

#define NC KILN_PROF_CLASSES
#define BANKS 32
#define PHASE_BYTES 128

typedef struct prof_site {
    char where[96];
    int bb;
    unsigned char kind;  /* kiln_prof_smem, or PROF_GENERIC for a generic access */
    unsigned char bytes; /* per lane */
    unsigned char nmat;  /* ldmatrix: matrices */
    unsigned char store; /* generic accesses: a store */
    kiln_smem_cost cost;
} prof_site;
enum { PROF_GENERIC = KILN_SMEM_KINDS };

typedef struct prof_rec {
    uint32_t site;
    uint32_t occ; /* filled while flushing */
    uintptr_t addr;
} prof_rec;

typedef struct prof_log {
    prof_rec *e;
    size_t n, cap;
} prof_log;

/* One lane's request inside a warp-wide group, while flushing. */
typedef struct prof_item {
    uint32_t site, occ, lane;
    uintptr_t addr;
} prof_item;

struct emu_prof {
    unsigned nbb;
    uint32_t *cls;      /* nbb x NC static instruction counts */
    uint32_t *gld, *gst; /* nbb: static bytes of ld/st.global per execution */
    int *has_mma;       /* nbb */
    uint64_t *bb_warp;  /* nbb: warp executions, accumulated */
    prof_site *sites;
    unsigned nsites;
    uint32_t *count;    /* nthreads x nbb, this block */
    unsigned nthreads;
    prof_log logs[EMU_MAX_THREADS];
    prof_item *items;   /* flush scratch */
    size_t nitems, capitems;
    uint32_t *occ;      /* nsites: flush scratch */
    uint64_t blocks, warps, gld_bytes, gst_bytes;
    const unsigned char *arena;
    size_t arena_size;
    int oom;
};

/* ---- instrumenting the module ---- */

static const char *name_of(LLVMValueRef v) {
    size_t len;
    return LLVMGetValueName2(v, &len);
}

static int starts(const char *s, const char *p) { return !strncmp(s, p, strlen(p)); }

static LLVMValueRef callee(LLVMValueRef in) {
    if (!LLVMIsACallInst(in)) return NULL;
    LLVMValueRef c = LLVMGetCalledValue(in);
    return LLVMIsAFunction(c) ? c : NULL;
}

static unsigned ptr_as(LLVMValueRef p) { return LLVMGetPointerAddressSpace(LLVMTypeOf(p)); }

/* The class of an NVVM intrinsic call; -1 for ones that cost nothing. */
static int nvvm_class(const char *n) {
    if (!strcmp(n, KILN_WGMMA_DESC)) return KILN_PROF_OTHER; /* integer arithmetic in the PTX */
    if (starts(n, "llvm.nvvm.wgmma.") || starts(n, "kiln.wgmma.")) return KILN_PROF_WGMMA;
    if (starts(n, "llvm.nvvm.cp.async.bulk.tensor.reduce.")) return KILN_PROF_TMA_REDUCE;
    if (starts(n, "llvm.nvvm.cp.async.bulk.")) return KILN_PROF_TMA;
    if (starts(n, "llvm.nvvm.mbarrier.")) return KILN_PROF_MBARRIER;
    if (starts(n, "llvm.nvvm.fence.proxy.async") || starts(n, "llvm.nvvm.setmaxnreg.")) return KILN_PROF_ASYNC_SYNC;
    if (strstr(n, ".mma.")) return KILN_PROF_MMA;
    if (strstr(n, ".ldmatrix.")) return KILN_PROF_LDMATRIX;
    if (starts(n, "llvm.nvvm.cp.async.") && !strstr(n, "commit") && !strstr(n, "wait")) return KILN_PROF_CP_ASYNC;
    if (strstr(n, ".ex2.")) return KILN_PROF_EX2;
    if (strstr(n, ".shfl.")) return KILN_PROF_SHFL;
    if (strstr(n, ".barrier") || strstr(n, ".bar.")) return KILN_PROF_BARRIER;
    return KILN_PROF_OTHER;
}

/* What one IR instruction costs as PTX: its class, or -1 when it costs nothing (phi, casts that
 * only rename, aggregate and vector element moves, unconditional branches, markers). */
static int classify(LLVMValueRef in) {
    switch (LLVMGetInstructionOpcode(in)) {
    case LLVMPHI: case LLVMBitCast: case LLVMAlloca: case LLVMUnreachable: case LLVMRet: case LLVMFreeze:
    case LLVMExtractValue: case LLVMInsertValue: case LLVMExtractElement: case LLVMInsertElement:
    case LLVMShuffleVector: case LLVMIntToPtr: case LLVMPtrToInt:
        return -1;
    case LLVMBr: return LLVMIsConditional(in) ? KILN_PROF_OTHER : -1;
    case LLVMLoad: {
        unsigned as = ptr_as(LLVMGetOperand(in, 0));
        return as == 3 ? KILN_PROF_LD_SHARED : as == 0 || as == 1 ? KILN_PROF_LD_GLOBAL : KILN_PROF_OTHER;
    }
    case LLVMStore: {
        unsigned as = ptr_as(LLVMGetOperand(in, 1));
        return as == 3 ? KILN_PROF_ST_SHARED : as == 0 || as == 1 ? KILN_PROF_ST_GLOBAL : KILN_PROF_OTHER;
    }
    case LLVMCall: {
        LLVMValueRef f = callee(in);
        if (!f) return KILN_PROF_OTHER;
        const char *n = name_of(f);
        if (starts(n, "llvm.nvvm.") || starts(n, "kiln.")) return nvvm_class(n); /* kiln.*: pseudo-intrinsics */
        if (starts(n, "llvm.lifetime.") || starts(n, "llvm.dbg.") || starts(n, "llvm.assume") ||
            starts(n, "llvm.experimental.noalias"))
            return -1;
        return KILN_PROF_OTHER;
    }
    default: return KILN_PROF_OTHER;
    }
}

typedef struct inst_ctx {
    LLVMModuleRef mod;
    LLVMContextRef ctx;
    LLVMBuilderRef b;
    LLVMTargetDataRef td;
    LLVMTypeRef i32, ptr, bb_ty, mem_ty;
    LLVMValueRef bb_fn, mem_fn;
    unsigned capsites, capbb;
    unsigned kind_seq[KILN_SMEM_KINDS + 1];
} inst_ctx;

static int add_site(emu_prof *p, inst_ctx *c, int bb, int kind, unsigned bytes, unsigned nmat, int store,
                    const char *fn) {
    if (p->nsites == c->capsites) {
        unsigned n = c->capsites ? 2 * c->capsites : 32;
        prof_site *s = realloc(p->sites, n * sizeof *s);
        if (!s) return -1;
        p->sites = s, c->capsites = n;
    }
    prof_site *s = &p->sites[p->nsites];
    memset(s, 0, sizeof *s);
    s->bb = bb, s->kind = (unsigned char)kind, s->bytes = (unsigned char)bytes, s->nmat = (unsigned char)nmat;
    s->store = (unsigned char)store;
    unsigned seq = ++c->kind_seq[kind];
    const char *kn = kind == PROF_GENERIC ? (store ? "st (generic)" : "ld (generic)") : kiln_prof_smem_name(kind);
    if (kind == KILN_SMEM_LDMATRIX)
        snprintf(s->where, sizeof s->where, "ldmatrix.x%u #%u in @%s, bb %d", nmat, seq, fn, bb);
    else
        snprintf(s->where, sizeof s->where, "%s #%u (%u B/lane) in @%s, bb %d", kn, seq, bytes, fn, bb);
    return (int)p->nsites++;
}

/* Inserts kiln_emu_prof_mem(site, generic pointer, global bytes) before in. */
static void call_mem(inst_ctx *c, LLVMValueRef in, int site, LLVMValueRef p, LLVMValueRef gbytes) {
    LLVMPositionBuilderBefore(c->b, in);
    LLVMValueRef g = ptr_as(p) ? LLVMBuildAddrSpaceCast(c->b, p, c->ptr, "") : p;
    LLVMValueRef args[3] = {LLVMConstInt(c->i32, (unsigned)site, 0), g, gbytes ? gbytes : LLVMConstInt(c->i32, 0, 0)};
    LLVMBuildCall2(c->b, c->mem_ty, c->mem_fn, args, 3, "");
}

static unsigned store_size(inst_ctx *c, LLVMTypeRef t) { return (unsigned)LLVMStoreSizeOfType(c->td, t); }

/* Records the static counts of one basic block and instruments its memory accesses. */
static int instrument_bb(emu_prof *p, inst_ctx *c, LLVMBasicBlockRef bb, int id, const char *fn) {
    uint32_t *cls = &p->cls[(size_t)id * NC];
    for (LLVMValueRef in = LLVMGetFirstInstruction(bb); in; in = LLVMGetNextInstruction(in)) {
        int k = classify(in);
        if (k >= 0) cls[k]++;
        if (k == KILN_PROF_MMA) p->has_mma[id] = 1;
        LLVMOpcode op = LLVMGetInstructionOpcode(in);
        if (op == LLVMLoad || op == LLVMStore) {
            int st = op == LLVMStore;
            LLVMValueRef ptr = LLVMGetOperand(in, st ? 1 : 0);
            unsigned bytes = store_size(c, st ? LLVMTypeOf(LLVMGetOperand(in, 0)) : LLVMTypeOf(in));
            unsigned as = ptr_as(ptr);
            if (as == 1) {
                (st ? p->gst : p->gld)[id] += bytes;
            } else if (as == 3 || as == 0) {
                int kind = as == 3 ? (st ? KILN_SMEM_ST : KILN_SMEM_LD) : PROF_GENERIC;
                int s = add_site(p, c, id, kind, bytes, 0, st, fn);
                if (s < 0) return -1;
                call_mem(c, in, s, ptr, NULL);
            }
        } else if (k == KILN_PROF_LDMATRIX || k == KILN_PROF_CP_ASYNC) {
            const char *n = name_of(callee(in));
            int s;
            LLVMValueRef gb = NULL;
            if (k == KILN_PROF_LDMATRIX) {
                const char *x = strstr(n, ".x");
                s = add_site(p, c, id, KILN_SMEM_LDMATRIX, 16, x ? (unsigned)(x[2] - '0') : 1, 0, fn);
            } else {
                /* llvm.nvvm.cp.async.{ca,cg}.shared.global.N[.s]: N bytes; .s reads only operand 2 of them */
                const char *g = strstr(n, ".global.");
                unsigned bytes = g ? (unsigned)atoi(g + 8) : 16;
                s = add_site(p, c, id, KILN_SMEM_CP_ASYNC, bytes, 0, 0, fn);
                gb = strstr(n, ".s") == n + strlen(n) - 2 ? LLVMGetOperand(in, 2) : LLVMConstInt(c->i32, bytes, 0);
            }
            if (s < 0) return -1;
            call_mem(c, in, s, LLVMGetOperand(in, 0), gb);
        }
    }
    /* the execution counter, first thing after the phis */
    LLVMValueRef first = LLVMGetFirstInstruction(bb);
    while (first && LLVMGetInstructionOpcode(first) == LLVMPHI) first = LLVMGetNextInstruction(first);
    if (first) LLVMPositionBuilderBefore(c->b, first);
    else LLVMPositionBuilderAtEnd(c->b, bb);
    LLVMValueRef arg = LLVMConstInt(c->i32, (unsigned)id, 0);
    LLVMBuildCall2(c->b, c->bb_ty, c->bb_fn, &arg, 1, "");
    return 0;
}

static int grow_bb(emu_prof *p, inst_ctx *c) {
    unsigned n = c->capbb ? 2 * c->capbb : 64;
    uint32_t *cls = realloc(p->cls, (size_t)n * NC * sizeof *cls);
    if (cls) p->cls = cls;
    uint32_t *gld = realloc(p->gld, n * sizeof *gld);
    if (gld) p->gld = gld;
    uint32_t *gst = realloc(p->gst, n * sizeof *gst);
    if (gst) p->gst = gst;
    int *mma = realloc(p->has_mma, n * sizeof *mma);
    if (mma) p->has_mma = mma;
    if (!cls || !gld || !gst || !mma) return -1;
    memset(p->cls + (size_t)c->capbb * NC, 0, (size_t)(n - c->capbb) * NC * sizeof *cls);
    memset(p->gld + c->capbb, 0, (n - c->capbb) * sizeof *gld);
    memset(p->gst + c->capbb, 0, (n - c->capbb) * sizeof *gst);
    memset(p->has_mma + c->capbb, 0, (n - c->capbb) * sizeof *mma);
    c->capbb = n;
    return 0;
}

kiln_status emu_prof_instrument(LLVMModuleRef mod, const char *host_dl, const unsigned char *arena,
                                size_t arena_size, emu_prof **out, kiln_error *err) {
    *out = NULL;
    emu_prof *p = calloc(1, sizeof *p);
    if (!p) return kiln_fail(err, KILN_ENOMEM, "emulator: out of memory for the profile");
    p->arena = arena, p->arena_size = arena_size;
    inst_ctx c = {.mod = mod, .ctx = LLVMGetModuleContext(mod)};
    c.b = LLVMCreateBuilderInContext(c.ctx);
    c.td = LLVMCreateTargetData(host_dl);
    c.i32 = LLVMInt32TypeInContext(c.ctx);
    c.ptr = LLVMPointerTypeInContext(c.ctx, 0);
    LLVMTypeRef margs[3] = {c.i32, c.ptr, c.i32};
    c.bb_ty = LLVMFunctionType(LLVMVoidTypeInContext(c.ctx), &c.i32, 1, 0);
    c.mem_ty = LLVMFunctionType(LLVMVoidTypeInContext(c.ctx), margs, 3, 0);
    c.bb_fn = LLVMAddFunction(mod, "kiln_emu_prof_bb", c.bb_ty);
    c.mem_fn = LLVMAddFunction(mod, "kiln_emu_prof_mem", c.mem_ty);
    int bad = 0;
    for (LLVMValueRef fn = LLVMGetFirstFunction(mod); fn && !bad; fn = LLVMGetNextFunction(fn)) {
        if (LLVMIsDeclaration(fn)) continue;
        for (LLVMBasicBlockRef bb = LLVMGetFirstBasicBlock(fn); bb && !bad; bb = LLVMGetNextBasicBlock(bb)) {
            if (p->nbb == c.capbb && grow_bb(p, &c)) bad = 1;
            if (!bad) bad = instrument_bb(p, &c, bb, (int)p->nbb++, name_of(fn)) != 0;
        }
    }
    LLVMDisposeBuilder(c.b);
    LLVMDisposeTargetData(c.td);
    if (!bad) {
        p->bb_warp = calloc(p->nbb ? p->nbb : 1, sizeof *p->bb_warp);
        p->occ = calloc(p->nsites ? p->nsites : 1, sizeof *p->occ);
        bad = !p->bb_warp || !p->occ;
    }
    if (bad) {
        emu_prof_free(p);
        return kiln_fail(err, KILN_ENOMEM, "emulator: out of memory for the profile");
    }
    *out = p;
    return KILN_OK;
}

void emu_prof_free(emu_prof *p) {
    if (!p) return;
    for (unsigned i = 0; i < EMU_MAX_THREADS; i++) free(p->logs[i].e);
    free(p->cls), free(p->gld), free(p->gst), free(p->has_mma), free(p->bb_warp), free(p->sites);
    free(p->count), free(p->items), free(p->occ);
    free(p);
}

/* ---- counting while a block runs ---- */

void emu_prof_bb_entry(int bb) {
    unsigned t;
    emu_prof *p = emu_prof_current(&t);
    if (p && p->count) p->count[(size_t)t * p->nbb + (unsigned)bb]++;
}

void emu_prof_mem_entry(int site, void *addr, uint32_t gbytes) {
    unsigned t;
    emu_prof *p = emu_prof_current(&t);
    if (!p) return;
    prof_site *s = &p->sites[site];
    uintptr_t a = (uintptr_t)addr;
    if (s->kind == PROF_GENERIC) {
        int shared = a >= (uintptr_t)p->arena && a < (uintptr_t)p->arena + p->arena_size;
        if (!shared) {
            if (s->store) p->gst_bytes += s->bytes;
            else p->gld_bytes += s->bytes;
            return;
        }
    }
    p->gld_bytes += gbytes;
    prof_log *l = &p->logs[t];
    if (l->n == l->cap) {
        size_t n = l->cap ? 2 * l->cap : 256;
        prof_rec *e = realloc(l->e, n * sizeof *e);
        if (!e) {
            p->oom = 1;
            return;
        }
        l->e = e, l->cap = n;
    }
    l->e[l->n++] = (prof_rec){(uint32_t)site, 0, a};
}

void emu_prof_block_begin(emu_prof *p, unsigned nthreads) {
    if (p->nthreads < nthreads || !p->count) {
        free(p->count);
        p->count = calloc((size_t)nthreads * (p->nbb ? p->nbb : 1), sizeof *p->count);
        if (!p->count) p->oom = 1;
        p->nthreads = p->count ? nthreads : 0;
    }
    if (p->count) memset(p->count, 0, (size_t)nthreads * p->nbb * sizeof *p->count);
    for (unsigned i = 0; i < nthreads; i++) p->logs[i].n = 0;
}

static int item_cmp(const void *x, const void *y) {
    const prof_item *a = x, *b = y;
    if (a->site != b->site) return a->site < b->site ? -1 : 1;
    if (a->occ != b->occ) return a->occ < b->occ ? -1 : 1;
    return a->lane < b->lane ? -1 : a->lane > b->lane;
}

/* Costs one warp-wide request (items[0..n), one site, ascending lanes). */
static void cost_request(emu_prof *p, prof_site *s, const prof_item *it, size_t n) {
    unsigned bytes = s->kind == KILN_SMEM_LDMATRIX ? 16 : s->bytes;
    unsigned per_phase = bytes <= 4 ? EMU_WARP : PHASE_BYTES / bytes; /* ldmatrix: 8, one matrix */
    unsigned phases = EMU_WARP / per_phase;
    uint64_t waves = 0, ideal = 0;
    for (unsigned ph = 0; ph < phases; ph++) {
        uintptr_t words[EMU_WARP * 4];
        unsigned nw = 0;
        for (size_t i = 0; i < n; i++) {
            if (it[i].lane / per_phase != ph) continue;
            if (s->kind == KILN_SMEM_LDMATRIX && it[i].lane >= 8u * s->nmat) continue;
            uintptr_t off = it[i].addr - (uintptr_t)p->arena;
            for (uintptr_t w = off / 4; w <= (off + bytes - 1) / 4; w++) {
                unsigned j = 0;
                while (j < nw && words[j] != w) j++;
                if (j == nw && nw < sizeof words / sizeof words[0]) words[nw++] = w;
            }
        }
        if (!nw) continue;
        unsigned per_bank[BANKS] = {0}, most = 0;
        for (unsigned j = 0; j < nw; j++)
            if (++per_bank[words[j] % BANKS] > most) most = per_bank[words[j] % BANKS];
        waves += most;
        ideal += 1;
    }
    s->cost.requests++;
    s->cost.wavefronts += waves;
    s->cost.ideal += ideal;
    s->cost.conflicts += waves - ideal;
}

/* Matches the logged accesses of warp w's lanes into warp-wide requests and costs them. */
static void flush_warp(emu_prof *p, unsigned w, unsigned nthreads) {
    size_t total = 0;
    unsigned lo = w * EMU_WARP, hi = lo + EMU_WARP < nthreads ? lo + EMU_WARP : nthreads;
    for (unsigned t = lo; t < hi; t++) total += p->logs[t].n;
    if (!total) return;
    if (total > p->capitems) {
        prof_item *it = realloc(p->items, total * sizeof *it);
        if (!it) {
            p->oom = 1;
            for (unsigned t = lo; t < hi; t++) p->logs[t].n = 0;
            return;
        }
        p->items = it, p->capitems = total;
    }
    size_t n = 0;
    for (unsigned t = lo; t < hi; t++) {
        prof_log *l = &p->logs[t];
        for (size_t i = 0; i < l->n; i++) p->occ[l->e[i].site] = 0;
        for (size_t i = 0; i < l->n; i++)
            p->items[n++] = (prof_item){l->e[i].site, p->occ[l->e[i].site]++, t - lo, l->e[i].addr};
        l->n = 0;
    }
    qsort(p->items, n, sizeof *p->items, item_cmp);
    for (size_t i = 0; i < n;) {
        size_t j = i + 1;
        while (j < n && p->items[j].site == p->items[i].site && p->items[j].occ == p->items[i].occ) j++;
        cost_request(p, &p->sites[p->items[i].site], p->items + i, j - i);
        i = j;
    }
}

void emu_prof_sync(emu_prof *p, unsigned first_warp, unsigned nwarps, unsigned nthreads) {
    for (unsigned w = first_warp; w < first_warp + nwarps; w++) flush_warp(p, w, nthreads);
}

void emu_prof_block_end(emu_prof *p, unsigned nthreads) {
    unsigned nwarps = (nthreads + EMU_WARP - 1) / EMU_WARP;
    emu_prof_sync(p, 0, nwarps, nthreads);
    if (!p->count) return;
    for (unsigned w = 0; w < nwarps; w++) {
        unsigned lo = w * EMU_WARP, hi = lo + EMU_WARP < nthreads ? lo + EMU_WARP : nthreads;
        for (unsigned bb = 0; bb < p->nbb; bb++) {
            uint32_t most = 0;
            for (unsigned t = lo; t < hi; t++) {
                uint32_t c = p->count[(size_t)t * p->nbb + bb];
                if (c > most) most = c;
                p->gld_bytes += (uint64_t)c * p->gld[bb];
                p->gst_bytes += (uint64_t)c * p->gst[bb];
            }
            p->bb_warp[bb] += most;
        }
    }
    p->blocks++;
    p->warps += nwarps;
}

/* ---- reading the profile ---- */

/* The hot loop: basic blocks a warp runs at least half as often as the hottest one. */
static uint64_t hottest(const emu_prof *p) {
    uint64_t h = 0;
    for (unsigned bb = 0; bb < p->nbb; bb++)
        if (p->bb_warp[bb] > h) h = p->bb_warp[bb];
    return h;
}
static int is_hot(const emu_prof *p, unsigned bb, uint64_t h) { return h && 2 * p->bb_warp[bb] >= h; }

static void add_cost(kiln_smem_cost *to, const kiln_smem_cost *c) {
    to->requests += c->requests, to->wavefronts += c->wavefronts, to->ideal += c->ideal, to->conflicts += c->conflicts;
}

static kiln_prof_smem site_kind(const prof_site *s) {
    if (s->kind != PROF_GENERIC) return (kiln_prof_smem)s->kind;
    return s->store ? KILN_SMEM_ST : KILN_SMEM_LD;
}

kiln_status emu_prof_get(const emu_prof *p, kiln_emu_profile *o, kiln_error *err) {
    memset(o, 0, sizeof *o);
    if (p->oom) return kiln_fail(err, KILN_ENOMEM, "emulator: the profile ran out of memory; its counts are incomplete");
    uint64_t h = hottest(p);
    o->blocks = p->blocks, o->warps = p->warps;
    o->global_ld_bytes = p->gld_bytes, o->global_st_bytes = p->gst_bytes;
    o->basic_blocks = p->nbb, o->hot_trips = h;
    for (unsigned bb = 0; bb < p->nbb; bb++) {
        int hot = is_hot(p, bb, h);
        o->hot_blocks += (unsigned)hot;
        for (int c = 0; c < NC; c++) {
            uint64_t v = p->bb_warp[bb] * p->cls[(size_t)bb * NC + (size_t)c];
            o->inst[c] += v;
            if (hot) o->hot_inst[c] += v;
        }
    }
    for (unsigned i = 0; i < p->nsites; i++) {
        const prof_site *s = &p->sites[i];
        add_cost(&o->smem[site_kind(s)], &s->cost);
        if (is_hot(p, (unsigned)s->bb, h)) add_cost(&o->hot_smem[site_kind(s)], &s->cost);
    }
    return KILN_OK;
}

unsigned emu_prof_nsites(const emu_prof *p) { return p->nsites; }

int emu_prof_block(const emu_prof *p, unsigned i, kiln_prof_block *out) {
    if (i >= p->nbb) return -1;
    memset(out, 0, sizeof *out);
    out->warp_runs = p->bb_warp[i];
    for (int c = 0; c < NC; c++) out->inst[c] = p->cls[(size_t)i * NC + (size_t)c];
    out->hot = is_hot(p, i, hottest(p));
    return 0;
}

int emu_prof_site(const emu_prof *p, unsigned i, kiln_smem_site *out) {
    if (i >= p->nsites) return -1;
    const prof_site *s = &p->sites[i];
    memset(out, 0, sizeof *out);
    snprintf(out->where, sizeof out->where, "%s", s->where);
    out->kind = site_kind(s);
    out->hot = is_hot(p, (unsigned)s->bb, hottest(p));
    out->cost = s->cost;
    return 0;
}

void emu_prof_reset(emu_prof *p) {
    memset(p->bb_warp, 0, p->nbb * sizeof *p->bb_warp);
    for (unsigned i = 0; i < p->nsites; i++) memset(&p->sites[i].cost, 0, sizeof p->sites[i].cost);
    p->blocks = p->warps = p->gld_bytes = p->gst_bytes = 0;
    p->oom = 0;
}

const char *kiln_prof_class_name(kiln_prof_class c) {
    static const char *n[NC] = {"mma", "ldmatrix", "cp.async", "ld.shared", "st.shared", "ld.global",
                                "st.global", "ex2", "shfl", "barrier", "wgmma", "tma", "mbarrier",
                                "fence.proxy/setmaxnreg", "tma.reduce", "other"};
    return (unsigned)c < NC ? n[c] : "?";
}

const char *kiln_prof_smem_name(kiln_prof_smem s) {
    static const char *n[KILN_SMEM_KINDS] = {"ld.shared", "st.shared", "ldmatrix", "cp.async"};
    return (unsigned)s < KILN_SMEM_KINDS ? n[s] : "?";
}
