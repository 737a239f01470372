/* gen/gen_llvm.cpp - the two LLVM steps the C API cannot time: the IR pipeline with per-pass
 * times, and NVPTX code generation split into its IR passes, instruction selection, machine
 * passes and the PTX printer. C linkage; called from gen_lower.c only. */
#include <time.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include <llvm/ADT/SmallString.h>
#include <llvm/ADT/StringMap.h>
#include <llvm/Analysis/CGSCCPassManager.h>
#include <llvm/Analysis/LoopAnalysisManager.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/PassInstrumentation.h>
#include <llvm/IR/PassManager.h>
#include <llvm/Pass.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>

#include "gen.h"

using namespace llvm;

static double now_ms() {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

/* Adds ms to the entry named name (creating it), keeping at most GEN_TIMING_PASSES entries. */
static void add_pass_time(kiln_gen_timing *tm, StringRef name, double ms) {
    for (int i = 0; i < tm->npasses; i++)
        if (name == tm->passes[i].name) {
            tm->passes[i].ms += ms;
            return;
        }
    int i = tm->npasses < KILN_TIMING_PASSES ? tm->npasses++ : KILN_TIMING_PASSES - 1;
    if (i == KILN_TIMING_PASSES - 1) { /* the last entry sums the rest */
        if (strcmp(tm->passes[i].name, KILN_TIMING_OTHER)) {
            snprintf(tm->passes[i].name, sizeof tm->passes[i].name, "%s", KILN_TIMING_OTHER);
            tm->passes[i].ms = 0;
        }
        tm->passes[i].ms += ms;
        return;
    }
    size_t n = std::min(name.size(), sizeof tm->passes[i].name - 1);
    memcpy(tm->passes[i].name, name.data(), n);
    tm->passes[i].name[n] = 0;
    tm->passes[i].ms = ms;
}

/* Pass names without the LLVM namespace and template noise ("InstCombinePass"). */
static StringRef short_name(StringRef n) {
    if (n.starts_with("llvm::")) n = n.drop_front(6);
    return n;
}

extern "C" int gen_llvm_run_passes(LLVMTargetMachineRef tmr, LLVMModuleRef modr, const char *pipeline,
                                   kiln_gen_timing *tm, char *msg, size_t msg_size) {
    TargetMachine *machine = reinterpret_cast<TargetMachine *>(tmr);
    Module *mod = unwrap(modr);
    PassInstrumentationCallbacks pic;
    /* Exclusive time per pass: a stack of (start, time of nested passes). Analyses count as
     * one group. */
    struct frame {
        double start, nested;
    };
    std::vector<frame> stack;
    if (tm) {
        auto before = [&stack]() { stack.push_back({now_ms(), 0.0}); };
        auto after = [&stack, tm](StringRef name) {
            if (stack.empty()) return;
            frame f = stack.back();
            stack.pop_back();
            double total = now_ms() - f.start;
            if (!stack.empty()) stack.back().nested += total;
            add_pass_time(tm, name, total - f.nested);
        };
        pic.registerBeforeNonSkippedPassCallback([before](StringRef, Any) { before(); });
        pic.registerAfterPassCallback(
            [after](StringRef name, Any, const PreservedAnalyses &) { after(short_name(name)); });
        pic.registerAfterPassInvalidatedCallback(
            [after](StringRef name, const PreservedAnalyses &) { after(short_name(name)); });
        pic.registerBeforeAnalysisCallback([before](StringRef, Any) { before(); });
        pic.registerAfterAnalysisCallback([after](StringRef, Any) { after("analyses"); });
    }
    PassBuilder pb(machine, PipelineTuningOptions(), std::nullopt, &pic);
    LoopAnalysisManager lam;
    FunctionAnalysisManager fam;
    CGSCCAnalysisManager cgam;
    ModuleAnalysisManager mam;
    pb.registerModuleAnalyses(mam);
    pb.registerCGSCCAnalyses(cgam);
    pb.registerFunctionAnalyses(fam);
    pb.registerLoopAnalyses(lam);
    pb.crossRegisterProxies(lam, fam, cgam, mam);
    ModulePassManager mpm;
    if (Error e = pb.parsePassPipeline(mpm, pipeline)) {
        snprintf(msg, msg_size, "%s", toString(std::move(e)).c_str());
        return 1;
    }
    mpm.run(*mod, mam);
    if (tm) { /* largest first */
        std::sort(tm->passes, tm->passes + tm->npasses,
                  [](const kiln_pass_time &a, const kiln_pass_time &b) {
                      return a.ms > b.ms;
                  });
    }
    return 0;
}

namespace {
/* The codegen stages' first passes, by name. */
static bool is_isel(StringRef n) { return n.contains("Instruction Selection") || n.contains("ISel"); }
static bool is_printer(StringRef n) { return n.contains("Assembly Printer") || n.contains("AsmPrinter"); }

/* Where the codegen stages start: a stamp before instruction selection, the pass after it and the printer. */
struct stamps {
    std::vector<std::pair<StringRef, double>> at; /* pass about to run, when */
};

class stamp_fn : public FunctionPass {
  public:
    static char ID;
    stamp_fn(stamps *s, StringRef next) : FunctionPass(ID), s(s), next(next) {}
    bool runOnFunction(Function &) override {
        s->at.push_back({next, now_ms()});
        return false;
    }
    void getAnalysisUsage(AnalysisUsage &au) const override { au.setPreservesAll(); }
    StringRef getPassName() const override { return "kiln stage stamp"; }

  private:
    stamps *s;
    StringRef next;
};
char stamp_fn::ID = 0;

/* NVPTX's codegen IR passes that kiln leaves out, as it chose its own IR pipeline: each measured
 * on every ptxas matrix (docs/llvm22.md, docs/jit.md) to cost generation time and buy no SASS
 * instruction or register. Straight-line strength reduction stays although LLVM 21 made it cost
 * 0.3 -> 7.6 ms of an attention kernel: without it 45 attention variants lose a resident block
 * (docs/llvm22.md). N-ary reassociation and the EarlyCSE that
 * follows it (NVPTX's second of three) change no byte of the PTX of any of the 2441 matrix variants
 * (the LayerNorm, norm and both attention matrices; kiln's IR pipeline has already folded what they would
 * find) and cost 5.5 % of an attention kernel's instructions (callgrind: 361.5 -> 341.6 M, bf16 d128
 * causal sm_80), 4 % of a LayerNorm's. The first EarlyCSE stays: without both, 207 attention
 * variants change. KILN_CODEGEN_PASSES=llvm keeps LLVM's full list (for comparisons). */
struct dropped_pass {
    const char *name; /* the legacy pass's getPassName() */
    int nth;          /* which occurrence in NVPTX's list (1 = first), 0: every one */
};
static const dropped_pass dropped_codegen_passes[] = {
    {"Nary reassociation", 0},
    {"Early CSE", 2}, /* the one after N-ary reassociation */
};

/* KILN_CODEGEN_PASSES=llvm keeps every pass; KILN_CODEGEN_PASSES=drop:NAME[#N],... leaves out these
 * passes as well as the table's (for measuring a candidate against the ptxas matrices). */
static bool env_drops(const char *env, StringRef name, int nth) {
    if (!env || strncmp(env, "drop:", 5)) return false;
    for (StringRef rest = env + 5; !rest.empty();) {
        auto [item, tail] = rest.split(',');
        rest = tail;
        auto [n, occ] = item.split('#');
        int k = 0;
        if (n == name && (occ.empty() || (!occ.getAsInteger(10, k) && k == nth))) return true;
    }
    return false;
}

static bool keep_all_codegen_passes() {
    static const char *env = getenv("KILN_CODEGEN_PASSES");
    return env && !strcmp(env, "llvm");
}

/* Whether the nth pass of this name (counted per pass manager) stays in codegen; drop: the GEN_DROP_*
 * passes the template left out (config().lsr / .slsr = false, gen_api.c); the drop bits of the passes
 * it leaves out are added to *found. */
static bool keep_codegen_pass(Pass *p, int nth, unsigned drop, unsigned *found) {
    static const char *env = getenv("KILN_CODEGEN_PASSES");
    if (keep_all_codegen_passes()) return true;
    StringRef name = p->getPassName();
    if ((drop & GEN_DROP_LSR) && name == "Loop Strength Reduction") return *found |= GEN_DROP_LSR, false;
    if ((drop & GEN_DROP_SLSR) && name == "Straight line strength reduction") return *found |= GEN_DROP_SLSR, false;
    for (int i = 0; gen_codegen_skips[i].key; i++)
        if ((drop & (GEN_DROP_SKIP << i)) && name == gen_codegen_skips[i].pass &&
            (gen_codegen_skips[i].nth == 0 || gen_codegen_skips[i].nth == nth)) {
            *found |= (unsigned)GEN_DROP_SKIP << i;
            return false;
        }
    for (const dropped_pass &d : dropped_codegen_passes)
        if (name == d.name && (d.nth == 0 || d.nth == nth)) return false;
    return !env_drops(env, name, nth);
}

/* A pass manager that puts a stamp in front of each function pass it is given and leaves out the
 * passes above. Module passes in NVPTX codegen run before the first function pass (their time
 * counts as "codegen IR") or are immutable. */
class stamping_pm : public legacy::PassManager {
  public:
    stamping_pm(stamps *s, unsigned drop) : s(s), drop(drop) {}
    void add(Pass *p) override {
        int nth = ++seen[p->getPassName()];
        if (!keep_codegen_pass(p, nth, drop, &found)) {
            delete p;
            return;
        }
        if (p->getPassKind() == PT_Function && stage_boundary(p->getPassName()))
            legacy::PassManager::add(new stamp_fn(s, p->getPassName()));
        legacy::PassManager::add(p);
    }

  private:
    /* Whether a stage starts at this function pass: instruction selection, the pass after it, the
     * printer (gen_llvm_codegen's boundaries). Stamps elsewhere only cost the pass manager's
     * scheduling of twice the passes (1.3 % of a LayerNorm's generation instructions). */
    bool stage_boundary(StringRef n) {
        bool isel = is_isel(n), after = after_isel;
        after_isel = isel;
        return isel || after || is_printer(n);
    }
  public:
    unsigned found = 0; /* the drop bits whose pass was offered and left out */

  private:
    bool after_isel = false;
    stamps *s;
    unsigned drop;
    StringMap<int> seen; /* how many passes of each name were offered so far (a list searched by name
                          * for every pass cost ~0.8 % of a LayerNorm's generation) */
};
} // namespace

extern "C" int gen_llvm_codegen(LLVMTargetMachineRef tmr, LLVMModuleRef modr, unsigned drop, kiln_gen_timing *tm, char **text,
                                size_t *len, char *msg, size_t msg_size) {
    TargetMachine *machine = reinterpret_cast<TargetMachine *>(tmr);
    Module *mod = unwrap(modr);
    mod->setDataLayout(machine->createDataLayout());
    SmallString<0> out;
    raw_svector_ostream os(out);
    stamps s;
    double t0 = now_ms();
    {
        stamping_pm pm(&s, drop);
        if (machine->addPassesToEmitFile(pm, os, nullptr, CodeGenFileType::AssemblyFile)) {
            snprintf(msg, msg_size, "the NVPTX target cannot emit assembly");
            return 1;
        }
        /* A pass the template leaves out that NVPTX's list no longer has (an LLVM upgrade renamed or
         * moved it) would be kept unseen: an error naming it instead. */
        unsigned missing = keep_all_codegen_passes() ? 0 : drop & ~pm.found;
        if (missing) {
            const char *what = missing & GEN_DROP_LSR ? "Loop Strength Reduction"
                               : missing & GEN_DROP_SLSR ? "Straight line strength reduction"
                                                         : "?";
            for (int i = 0; gen_codegen_skips[i].key && !strcmp(what, "?"); i++)
                if (missing & (GEN_DROP_SKIP << i)) what = gen_codegen_skips[i].pass;
            snprintf(msg, msg_size, "the template leaves out the codegen pass '%s', which NVPTX's pass list does not have",
                     what);
            return 1;
        }
        pm.run(*mod);
    }
    double t_end = now_ms();
    if (tm) {
        /* Stage boundaries: the stamps in front of instruction selection and the printer. */
        double isel = -1, after_isel = -1, printer = -1;
        for (size_t i = 0; i < s.at.size(); i++) {
            StringRef n = s.at[i].first;
            if (isel < 0 && is_isel(n)) {
                isel = s.at[i].second;
                if (i + 1 < s.at.size()) after_isel = s.at[i + 1].second;
            }
            if (printer < 0 && is_printer(n)) printer = s.at[i].second;
        }
        if (isel < 0 || after_isel < 0 || printer < 0) { /* unknown pass names: one lump */
            tm->codegen = t_end - t0;
        } else {
            tm->codegen_ir = isel - t0;
            tm->isel = after_isel - isel;
            tm->codegen = printer - after_isel;
            tm->print = t_end - printer;
        }
    }
    *len = out.size();
    *text = (char *)malloc(out.size() + 1);
    if (!*text) {
        snprintf(msg, msg_size, "out of memory");
        return 1;
    }
    memcpy(*text, out.data(), out.size());
    (*text)[out.size()] = 0;
    return 0;
}
