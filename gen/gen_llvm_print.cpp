/* gen/gen_llvm_print.cpp - prints IR instructions as LLVMPrintValueToString does, with one numbering
 * of a function's values for all of them: the C API's printer numbers the whole function (and its
 * metadata) again on every call, which made the emulator's load of a large kernel quadratic in its
 * memory accesses (emu_rewrite.c names each access for its fault and race reports). C linkage. */
#include <cstdlib>
#include <cstring>
#include <string>

#include <llvm/IR/Function.h>
#include <llvm/IR/Instruction.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/ModuleSlotTracker.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm-c/Core.h>

#include "gen.h"

using namespace llvm;

struct gen_llvm_printer {
    ModuleSlotTracker slots;
    const Function *fn = nullptr;
    explicit gen_llvm_printer(const Module *m) : slots(m, /*ShouldInitializeAllMetadata=*/false) {}
};

extern "C" gen_llvm_printer *gen_llvm_printer_create(LLVMModuleRef mod) {
    return new (std::nothrow) gen_llvm_printer(unwrap(mod));
}

extern "C" void gen_llvm_printer_destroy(gen_llvm_printer *p) { delete p; }

extern "C" char *gen_llvm_printer_print(gen_llvm_printer *p, LLVMValueRef inst) {
    const Instruction *in = unwrap<Instruction>(inst);
    const Function *fn = in->getFunction();
    if (fn != p->fn) { /* numbered once, at the first instruction printed from fn */
        p->slots.incorporateFunction(*fn);
        p->fn = fn;
    }
    std::string text;
    raw_string_ostream os(text);
    in->print(os, p->slots);
    os.flush();
    return strdup(text.c_str());
}
