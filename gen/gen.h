/* gen/gen.h - private header of the generator (gen/), grouped by the file defining each part. */
#ifndef KILN_GEN_GEN_H
#define KILN_GEN_GEN_H

#include <stdbool.h>
#include <stddef.h>

#include <llvm-c/Core.h>
#include <llvm-c/TargetMachine.h>

#include "kiln/gen.h"

/* ---- the SM table lives in runtime/rt_target.c (kiln/target.h), shared with the runtime ---- */
#include "kiln/runtime.h"
#include "kiln/target.h"
typedef kiln_target gen_target;
static inline const gen_target *gen_target_find(int sm) { return kiln_target_find(sm); }
static inline const gen_target *gen_target_all(int *count) { return kiln_target_all(count); }

/* ---- gen_target.c ---- */
/* PTX ISA version that a feature needs (times 10): e.g. ldmatrix 65, cp.async 70. */
enum gen_feature { GEN_FEAT_MMA_M16N8K8, GEN_FEAT_LDMATRIX, GEN_FEAT_MMA_M16N8K16, GEN_FEAT_CP_ASYNC };
int gen_feature_ptx(enum gen_feature f);
/* What ptxas (CUDA 13) does with kiln's code on one SM, measured: facts about the compiler, not the hardware,
 * so they live beside the SM table in the generator, not in kiln/target.h (see gen_target.c). Templates read
 * them as fields of `target` (gen_builder_push_target). */
typedef struct gen_ptxas_facts {
    int sm;                /* the SM table's number (1090 for sm_90a) */
    bool rolled_mma_k;     /* target.ptxas_rolled_mma_k: a constant-trip mma.sync k-loop costs no SASS */
    int f16_row_regs;      /* target.ptxas_f16_row_regs: extra registers per f16 tensor of a short norm row */
    bool dropout_o3;       /* target.ptxas_dropout_o3: causal-dropout tiles keep a block more under default<O3> */
    bool mask_dropout_o3;  /* target.ptxas_mask_dropout_o3: the same for SIMT d64 with the mask keys */
    bool neox_o3;          /* target.ptxas_neox_o3: NeoX rotary in the append, d96 tile: fewer SASS under default<O3> */
    bool neox_d128_o3;     /* target.ptxas_neox_d128_o3: the same for bf16 d128 split-KV with any cos/sin table */
} gen_ptxas_facts;
/* The row for exactly sm, or NULL (every row of the SM table has one: build/tests/gen_test). */
const gen_ptxas_facts *gen_ptxas_find(int sm);
/* All rows, ascending by SM; *count receives the number. */
const gen_ptxas_facts *gen_ptxas_all(int *count);

/* ---- gen_lint*.c, gen_ptx_reader.c: kiln lint (pure C, no LLVM calls) ---- */

/* gen_ptx_reader.c: PTX text -> statements. A statement keeps its first GEN_PTX_MAX_TOKENS tokens. */
enum { GEN_PTX_MAX_TOKENS = 64 };
typedef enum gen_ptx_kind {
    GEN_PTX_INSTRUCTION, /* tok[0] is the opcode ("cvt.rn.bf16.f32"); a guard is in pred */
    GEN_PTX_DIRECTIVE,   /* tok[0] starts with '.': declarations, .version, function headers */
    GEN_PTX_LABEL,       /* "name:"; tok[0] is the name */
    GEN_PTX_OPEN,        /* '{' opening a scope: a function body or a block */
    GEN_PTX_CLOSE,       /* '}' */
    GEN_PTX_DATA         /* one line inside a .section { } block (debug data) */
} gen_ptx_kind;
typedef struct gen_ptx_token {
    const char *s;
    size_t len;
    int line; /* where it is (ptxas reports an instruction at its opcode's line) */
} gen_ptx_token;
typedef struct gen_ptx_stmt {
    gen_ptx_kind kind;
    int line, end_line;     /* first and last line it spans */
    int depth;              /* braces open before it */
    bool in_section;        /* inside a .section block */
    bool predicated, pred_negated;
    bool body_follows;      /* a .entry/.func header whose '{' comes next */
    gen_ptx_token pred;     /* "%p1" of "@!%p1" */
    const char *start, *end; /* its raw text */
    size_t ntok;            /* tokens seen; only the first GEN_PTX_MAX_TOKENS are kept */
    gen_ptx_token tok[GEN_PTX_MAX_TOKENS]; /* last member */
} gen_ptx_stmt;
typedef struct gen_ptx_reader {
    const char *p, *end;
    int line, depth, section_depth;
    bool section_pending;
} gen_ptx_reader;
void gen_ptx_reader_init(gen_ptx_reader *r, const char *text, size_t len);
bool gen_ptx_next(gen_ptx_reader *r, gen_ptx_stmt *st); /* false at the end of the text */
size_t gen_ptx_stmt_text(const gen_ptx_stmt *st, char *buf, size_t cap);
bool gen_ptx_tok_is(gen_ptx_token t, const char *s);

/* gen_lint_table.c: the facts lint checks, from the PTX ISA manual and checked against ptxas. */
typedef struct gen_lint_rule {
    const char *op;      /* opcode's first part, "a|b" alternatives, "*" any; or a directive (".loc") */
    const char *mods;    /* pattern over the opcode's '.'-separated modifiers: elements "a|b", "*" = any
                            run; NULL = any */
    const char *operand; /* an operand token that must be present ("x*" = prefix), "#N" = at least N
                            operands, "=%p,#" = ends with a predicate register and an integer literal,
                            NULL = none */
    int sm, ptx;         /* needs sm_<sm> (0: any) and PTX ISA ptx/10 (0: any) */
    bool arch;           /* needs an arch- or family-specific target: one of `targets` */
    const char *feature; /* its name in messages */
    const char *example; /* a statement using it, checked against ptxas by tests/lint_test.c; a leading
                            '!' puts it at module scope instead of in a function body */
    int sm2, ptx2;       /* when sm2 > 0: on sm_<sm2> and newer, PTX ISA ptx2 is enough (features that
                            reached an older SM in a later PTX ISA) */
    const char *targets; /* arch rows: the targets that have it, "sm_100a|sm_100f"; NULL = sm_<sm>a */
    const char *unless;  /* a modifier pattern that, when it matches too, makes the row not apply */
} gen_lint_rule;
typedef kiln_ptx_target gen_lint_target; /* the targets table lives in runtime/rt_ptxver.c */
const gen_lint_rule *gen_lint_rules(size_t *count);
const gen_lint_target *gen_lint_targets(size_t *count);
const char *const *gen_lint_decl_types(void); /* types a declaration may not use; NULL-ended */
/* SM label "sm_90" or "sm_90a" for messages (buf of at least 16 bytes). */
const char *gen_lint_sm_name(int sm, bool arch, char *buf);

/* ---- gen_api.c: spec -> module, shared with the emulator (emu/) ---- */

/* The module for one spec and target, optimized exactly as it is before NVPTX codegen,
 * created in ctx (which the caller owns; the caller disposes the module). meta is filled
 * as for kiln_generate. */
kiln_status gen_build_module(kiln_gen *gen, const char *spec, int sm, LLVMContextRef ctx,
                             LLVMModuleRef *out, kiln_kernel_meta *meta, kiln_error *err);
/* The generator's number in this process (1, 2, ...; never reused, even after kiln_gen_destroy): it
 * stands for everything a generator fixes at creation that changes its modules (template dir,
 * pipeline and KILN_PIPELINE, opt level), so the emulator's kernel cache keys on it (emu/emu_jit.c). */
unsigned long long gen_serial(const kiln_gen *gen);

#endif

/* ---- gen_lua.c: the embedded Lua state and the templates it loads ---- */
#include <lua.h>

/* Written by tools/embed.c at build time (build/gen/templates_embed.c): each template's source
 * (hashed into cache keys) and its Lua bytecode (what the generator loads: no parsing at run
 * time); the table ends with a NULL path. */
struct gen_embedded {
    const char *path; /* "templates/layernorm.lua" */
    const char *src;
    size_t len;
    const unsigned char *bc;
    size_t bc_len;
};
extern const struct gen_embedded gen_embedded_templates[];

typedef struct gen_lua gen_lua;

/* Opens a Lua state whose `require` and family lookup read templates from template_dir,
 * or from the copies built into libkiln when template_dir is NULL. */
kiln_status gen_lua_open(gen_lua **out, const char *template_dir, kiln_error *err);
void gen_lua_close(gen_lua *gl);
lua_State *gen_lua_state(gen_lua *gl);
/* Pushes the template table of family (loading it once); error lists the families. */
kiln_status gen_lua_push_family(gen_lua *gl, const char *family, kiln_error *err);
/* Names of the families (templates/<name>.lua), sorted; returns the count. */
int gen_lua_families(gen_lua *gl, char names[][KILN_NAME_MAX], int cap);
/* The source bytes of a family's template (for cache keys). */
kiln_status gen_lua_template_source(gen_lua *gl, const char *family, const char **src,
                                    size_t *len, kiln_error *err);
/* lua_pcall with a traceback handler; on error fills err with "what: file:line: msg". */
kiln_status gen_lua_call(lua_State *L, int nargs, int nresults, const char *what, kiln_error *err);

/* ---- gen_launch.c: a template's launch description and variant matrix (docs/registry.md) ---- */
/* Calls the template's launch(spec, cfg) (template, spec and config tables at those stack indices)
 * and writes its lines into m->launch; nothing when the template declares none. */
kiln_status gen_launch_describe(lua_State *L, int tmpl, int spec_idx, int cfg, kiln_kernel_meta *m, kiln_error *err);
/* Every kernel parameter has a tensor, scalar or stride line (when there is a launch description). */
kiln_status gen_launch_covers(const kiln_kernel_meta *m, kiln_error *err);
kiln_status gen_family_variants(gen_lua *gl, const char *family, int full, int sm, char *buf, size_t size,
                                int *count, kiln_error *err);
kiln_status gen_family_bundle(gen_lua *gl, const char *family, kiln_bundle_matrix *out, kiln_error *err);
kiln_status gen_family_examples(gen_lua *gl, const char *family, char *buf, size_t size, int *count, kiln_error *err);

/* ---- gen_spec.c: spec strings, checked against the parameters a template declares ---- */
#define GEN_SPEC_MAX_KEYS 32

typedef struct gen_spec {
    char family[KILN_NAME_MAX];
    int nkeys;
    char keys[GEN_SPEC_MAX_KEYS][KILN_NAME_MAX];
    char values[GEN_SPEC_MAX_KEYS][KILN_NAME_MAX];
    char canonical[KILN_SPEC_MAX];
    char bare[KILN_NAME_MAX]; /* a word without '=' after the family (the parse failed on it), or "" */
} gen_spec;

/* Splits "family k=v k=v" (syntax only). */
kiln_status gen_spec_parse(const char *text, gen_spec *out, kiln_error *err);
/* gen_spec_parse, and where it failed on a bare word that names a family (two specs run together,
 * "FAMILY a=1 OTHER b=2", OTHER a family `kiln list` shows), an error that says so. */
kiln_status gen_spec_parse_known(gen_lua *gl, const char *text, gen_spec *out, kiln_error *err);
/* Checks keys and values against the family's declared params, fills defaults, writes the
 * canonical string, and pushes the Lua spec table (param name -> typed value). */
kiln_status gen_spec_resolve(gen_lua *gl, gen_spec *spec, kiln_error *err);
/* How many times this thread resolved a spec against its template (for tests: once per generation). */
unsigned gen_spec_resolutions(void);
/* Appends a description of every family's params to buf (for kiln_describe). */
kiln_status gen_spec_describe(gen_lua *gl, char *buf, size_t size, kiln_error *err);

/* ---- gen_builder.c: builder primitives exposed to templates ---- */
typedef struct gen_builder gen_builder;

/* Creates the builder userdata for one kernel (pushed on L); the module lives in ctx. */
gen_builder *gen_builder_push(lua_State *L, LLVMContextRef ctx, LLVMModuleRef mod,
                              const gen_target *target, kiln_kernel_meta *meta);
/* After build(): checks the kernel was finished; returns static smem bytes and the
 * PTX version the instructions used need (times 10). */
kiln_status gen_builder_finish(gen_builder *gb, unsigned *static_smem, int *ptx_needed,
                               kiln_error *err);
/* Pushes a table describing the target's capabilities (for config()). */
void gen_builder_push_target(lua_State *L, const gen_target *t);
/* Makes every primitive of L's builder add its own time to a clock (once per state); */
void gen_builder_time_primitives(lua_State *L);
/* returns the clock's milliseconds since the last reset and resets it (-1: not timing). */
double gen_builder_time_reset(lua_State *L);

/* ---- gen_lower.c: verify, optimize, emit PTX ---- */
/* A generator's lowering state: the target machines it made, one per (SM, PTX version). */
typedef struct gen_lower gen_lower;
kiln_status gen_lower_create(gen_lower **out, kiln_error *err);
void gen_lower_destroy(gen_lower *lw);
/* Verifies mod and runs the pipeline: at opt_level 3 the given pipeline text (NULL: kiln's,
 * rotating loops when rotate_loops), else default<O1>/<O2>; fills tm's verify, optimize and
 * passes when tm is not NULL. */
kiln_status gen_lower_optimize(gen_lower *lw, LLVMModuleRef mod, const gen_target *t, int ptx_version,
                               int opt_level, const char *pipeline, int rotate_loops, kiln_gen_timing *tm,
                               kiln_error *err);
/* NVPTX codegen passes a template may leave out of its kernels (config().lsr / .slsr = false). */
enum { GEN_DROP_LSR = 1, GEN_DROP_SLSR = 2 };
/* More of them by name: config().skip_codegen = { KEY, ... }; entry i of the table (a NULL key ends
 * it) is the drop bit GEN_DROP_SKIP << i. pass: NVPTX's legacy pass name; nth: which occurrence of
 * that name in its codegen list (0: every one). gen_lower.c holds the table. */
enum { GEN_DROP_SKIP = 4 };
typedef struct gen_codegen_skip {
    const char *key, *pass;
    int nth;
} gen_codegen_skip;
extern const gen_codegen_skip gen_codegen_skips[];
/* PTX text (malloc'd) or LLVM IR when emit is KILN_EMIT_LL; fills tm's codegen stages. drop: the
 * GEN_DROP_* passes the template leaves out. */
kiln_status gen_lower_emit(gen_lower *lw, LLVMModuleRef mod, const gen_target *t, int ptx_version,
                           kiln_emit emit, unsigned drop, char **text, size_t *len, kiln_gen_timing *tm,
                           kiln_error *err);
/* Prepares the module's triple and data layout for target t. */
void gen_lower_prepare(LLVMModuleRef mod);

/* ---- gen_llvm.cpp: the LLVM C++ steps behind gen_lower.c (0 on success, else msg) ---- */
#ifdef __cplusplus
extern "C" {
#endif
/* Runs a textual new-pass-manager pipeline; adds exclusive time per pass to tm (if not NULL). */
int gen_llvm_run_passes(LLVMTargetMachineRef machine, LLVMModuleRef mod, const char *pipeline,
                        kiln_gen_timing *tm, char *msg, size_t msg_size);
/* NVPTX codegen to PTX text (malloc'd, NUL-terminated); fills tm's codegen_ir, isel, codegen, print;
 * drop: the GEN_DROP_* passes left out. */
int gen_llvm_codegen(LLVMTargetMachineRef machine, LLVMModuleRef mod, unsigned drop, kiln_gen_timing *tm, char **text,
                     size_t *len, char *msg, size_t msg_size);
/* Instruction text as LLVMPrintValueToString gives it, a function's values numbered once for all its
 * instructions (gen_llvm_print.cpp): print them function by function, each before anything is inserted
 * into that function. print returns malloc'd text (free()), NULL when out of memory; create: NULL then too. */
typedef struct gen_llvm_printer gen_llvm_printer;
gen_llvm_printer *gen_llvm_printer_create(LLVMModuleRef mod);
char *gen_llvm_printer_print(gen_llvm_printer *p, LLVMValueRef inst);
void gen_llvm_printer_destroy(gen_llvm_printer *p);
#ifdef __cplusplus
}
#endif

/* ---- builder internals, shared by gen_builder.c, gen_memory.c, gen_control.c, gen_convert.c ---- */
enum gen_kind { GEN_PRED, GEN_I32, GEN_I64, GEN_F32, GEN_F16, GEN_BF16, GEN_PTR };
enum gen_addrspace { GEN_AS_GENERIC = 0, GEN_AS_GLOBAL = 1, GEN_AS_SHARED = 3 };

/* A typed value as templates see it. f16/bf16 values hold their bits in an i16. */
typedef struct gen_value {
    LLVMValueRef v;
    int kind; /* enum gen_kind */
    int elem; /* pointers: kiln_dtype of the pointee */
    int as;   /* pointers: enum gen_addrspace */
} gen_value;

enum { GEN_INTRINSICS = 48, GEN_INTRINSIC_NAME = 80, GEN_INTRINSIC_OVER = 3 };
struct gen_builder {
    lua_State *L; /* the template's state: primitives raise their errors there */
    LLVMContextRef ctx;
    LLVMModuleRef mod;
    LLVMBuilderRef b;
    LLVMValueRef fn;
    LLVMBasicBlockRef entry, body, exit_bb;
    const gen_target *t;
    kiln_kernel_meta *meta;
    int ptx_needed;      /* PTX ISA version the emitted instructions need, times 10 */
    const char *arch_method; /* the first primitive used that exists on the arch-specific target only */
    unsigned smem_bytes; /* static shared memory allocated so far */
    int nshared;         /* shared arrays allocated (for unique names) */
    int depth;           /* open if/for blocks */
    int finished;
    unsigned max_registers; /* .maxnreg; 0 = derived from the block size */
    LLVMTypeRef i1, i8, i16, i32, i64, f32, f16, bf16, void_t, ptr_global, ptr_shared;
    /* The intrinsics this module declared so far (gen_builder.c's call_intrinsic): a name lookup, its
     * declaration and type cost ~9,000 instructions a call, ~2 % of a kernel's generation. */
    struct {
        char name[GEN_INTRINSIC_NAME];
        int nover;
        LLVMTypeRef over[GEN_INTRINSIC_OVER], ty;
        LLVMValueRef fn;
    } intrinsics[GEN_INTRINSICS];
    int nintrinsics;
};

/* gen_builder.c */
const char *gen_kind_name(int kind);
gen_value *gen_push_value(lua_State *L, LLVMValueRef v, int kind, int elem, int as);
gen_builder *gen_current(lua_State *L);
gen_builder *gen_check_builder(lua_State *L, int idx);
gen_value gen_arg(lua_State *L, int idx, int like); /* like: kind for Lua numbers, or -1 */
LLVMValueRef gen_intrinsic(gen_builder *gb, const char *name, LLVMTypeRef *over, int nover,
                           LLVMValueRef *args, int nargs);
/* gen_memory.c */
void gen_register_memory(lua_State *L); /* adds methods to the table on top of the stack */
void gen_register_vars(lua_State *L);
LLVMTypeRef gen_elem_type(gen_builder *gb, int dtype); /* storage type: float, i16 (f16/bf16) or i32 */
int gen_dtype_kind(int dtype);                         /* kiln_dtype -> enum gen_kind */
void gen_close_kernel(gen_builder *gb);
void gen_kernel_attr(gen_builder *gb, const char *key, unsigned value); /* "nvvm.maxntid" etc. */
/* gen_control.c */
void gen_register_control(lua_State *L);
/* gen_convert.c */
LLVMValueRef gen_to_f32(gen_builder *gb, LLVMValueRef bits, kiln_dtype from);
LLVMValueRef gen_from_f32(gen_builder *gb, LLVMValueRef f, kiln_dtype to);
void gen_register_convert(lua_State *L);
/* gen_tensor.c */
void gen_read_list(lua_State *L, int idx, int n, int kind, const char *what, LLVMValueRef *out); /* a Lua list of n values of kind */
void gen_register_tensor(lua_State *L);
/* gen_hopper.c */
void gen_register_hopper(lua_State *L);
/* wgmma pseudo-intrinsics (gen_hopper.c emits them; gen_wgmma_lower.c lowers them for NVPTX; emu/emu_wgmma.c
 * runs them): kiln.wgmma.desc, kiln.wgmma.m64n<N>k16.f32.<f16|bf16>.<ss|rs>, kiln.wgmma.wait.f32x<M>. */
#define KILN_WGMMA_MAX_ACC 128 /* f32 accumulators per thread of m64n256k16 */
#define KILN_WGMMA_DESC "kiln.wgmma.desc"
/* Replaces every kiln.wgmma.* call of mod by its PTX (inline asm, or integer arithmetic for the
 * descriptor), before NVPTX codegen. 0, or -1 when memory ran out (the module is then half lowered:
 * the caller fails the generation). */
int gen_wgmma_lower(LLVMModuleRef mod);
extern void *(*gen_wgmma_lower_realloc)(void *, size_t); /* realloc; tests plant a failing one */
