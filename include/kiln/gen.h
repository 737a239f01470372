/* kiln/gen.h - the generator: kernel spec + target SM -> LLVM IR -> PTX (libkiln). */
#ifndef KILN_GEN_H
#define KILN_GEN_H

#include "kiln/common.h"
#include "kiln/kernel.h"
#include "kiln/target.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A generator holds an LLVM context and a Lua state with the templates loaded.
 * One generator must not be used by two threads at once; create one per thread. */
typedef struct kiln_gen kiln_gen;

/* A generated module: text (PTX or LLVM IR) plus the kernel's metadata. */
typedef struct kiln_module kiln_module;

typedef enum kiln_emit { KILN_EMIT_PTX = 0, KILN_EMIT_LL = 1 } kiln_emit;

/* The IR pipeline before NVPTX code generation. */
typedef enum kiln_pipeline {
    KILN_PIPELINE_DEFAULT = 0, /* $KILN_PIPELINE when set ("kiln", "o3" or an LLVM pipeline text for
                                  experiments), else KILN_PIPELINE_KILN */
    KILN_PIPELINE_KILN = 1,    /* the few passes that change these kernels' PTX (docs/jit.md), for
                                  the families whose template opts in (config().pipeline = "kiln");
                                  default<O3> for the others */
    KILN_PIPELINE_O3 = 2       /* LLVM's default<O3> (the reference the PTX quality table holds) */
} kiln_pipeline;

typedef struct kiln_gen_options {
    const char *template_dir; /* NULL: $KILN_TEMPLATE_DIR, else the templates built into libkiln */
    int opt_level;            /* 0..3; 0 means the default (3); 1 and 2 run LLVM's default<O1>/<O2> */
    kiln_pipeline pipeline;   /* used at opt_level 3 */
    int time_builder;         /* also split build() into Lua and builder (IR) time; costs a little */
} kiln_gen_options;

/* Where the time of the last kiln_generate went, in milliseconds of the calling thread's CPU
 * time (the same as wall clock on an idle machine; steady on a loaded one). */
#define KILN_TIMING_PASSES 24
#define KILN_TIMING_OTHER "(other passes)" /* the last entry when more passes ran */
typedef struct kiln_pass_time {
    char name[40]; /* an LLVM pass ("InstCombinePass") or "analyses" */
    double ms;     /* exclusive of nested passes */
} kiln_pass_time;
typedef struct kiln_gen_timing {
    double total;      /* the whole kiln_generate call */
    double total_wall; /* the same call in wall-clock milliseconds */
    double spec;       /* parse the spec, check it against the template's params, load the template */
    double config;     /* the template's config() */
    double build;      /* the template's build(): Lua running and the builder making LLVM IR */
    double builder;    /* of build: time inside builder primitives (needs time_builder; else -1) */
    double verify;     /* LLVM's module verifier */
    double optimize;   /* the IR pipeline, all passes */
    int npasses;
    kiln_pass_time passes[KILN_TIMING_PASSES]; /* the pipeline's time per pass, largest first */
    double codegen_ir; /* NVPTX's IR-level codegen passes, before instruction selection */
    double isel;       /* SelectionDAG instruction selection */
    double codegen;    /* machine passes after selection (scheduling, peepholes, registers) */
    double print;      /* the PTX assembly printer */
    double finish;     /* copying the text and the metadata header */
} kiln_gen_timing;

kiln_status kiln_gen_create(kiln_gen **out, const kiln_gen_options *opt, kiln_error *err);
void kiln_gen_destroy(kiln_gen *gen);

/* Generates the kernel named by a spec string "FAMILY key=value ..." (`kiln list` shows each family's
 * keys and examples; kiln_family_examples gives them) for target sm (kiln/target.h's table). Keys may
 * come in any order. */
kiln_status kiln_generate(kiln_gen *gen, const char *spec, int sm, kiln_emit emit,
                          kiln_module **out, kiln_error *err);

/* The stage times of the last successful kiln_generate on gen (valid until the next call). */
const kiln_gen_timing *kiln_gen_last_timing(const kiln_gen *gen);

const char *kiln_module_text(const kiln_module *m); /* NUL-terminated */
size_t kiln_module_size(const kiln_module *m);      /* bytes, without the NUL */
const kiln_kernel_meta *kiln_module_meta(const kiln_module *m);
void kiln_module_free(kiln_module *m);

/* Canonical form of a spec: family, then every parameter (defaults filled in) in the
 * order the template declares them. Same spec, same string. */
kiln_status kiln_canonical_spec(kiln_gen *gen, const char *spec, char *buf, size_t size,
                                kiln_error *err);

/* The value of key in spec as the generator resolves it (the canonical spec's: defaults filled in), for
 * callers that need one fact of a spec ("hidden", a dtype key); KILN_EINVAL when the family has no such key. */
kiln_status kiln_spec_value(kiln_gen *gen, const char *spec, const char *key, char *buf, size_t size, kiln_error *err);

/* Whether the family's template takes a path specific to the arch-specific target sm (sm_90a: wgmma,
 * setmaxnreg) for spec: its config(spec, target) returns arch_specific = true. *out is 0 for a plain
 * target. The runtime asks before it generates for sm_90a; a spec without such a path gets sm_90 PTX,
 * which later GPUs run too. Generating for sm_90a with an sm_90a-only primitive while config() does not
 * say arch_specific fails, naming the primitive (docs/runtime.md). */
kiln_status kiln_arch_specific(kiln_gen *gen, const char *spec, int sm, int *out, kiln_error *err);


/* The targets: kiln_targets() and the SM table in kiln/target.h. */

/* Describes families and their parameters as text, one family per block (for `kiln list`). */
kiln_status kiln_describe(kiln_gen *gen, char *buf, size_t size, kiln_error *err);

/* ---- the family registry (docs/registry.md): what a template declares besides its kernel ---- */

/* The families (templates/<name>.lua), sorted; returns the count (at most cap are written). */
int kiln_families(kiln_gen *gen, char names[][KILN_NAME_MAX], int cap);

/* The variant matrix a family's template declares (K.variants): the specs the ptxas matrix and
 * its quality table check on target sm, one a line ("FAMILY key=value ...\n"). full: every
 * variant (KILN_TEST_FULL), else the quick suite's rows. sm 0: the rows of every SM. *count (when
 * not NULL) gets the number of specs; buf NULL measures. */
kiln_status kiln_family_variants(kiln_gen *gen, const char *family, int full, int sm, char *buf, size_t size,
                                 int *count, kiln_error *err);

/* What `kiln bundle`'s default set takes of a family (K.bundle). */
typedef struct kiln_bundle_matrix {
    int declared;            /* 0: the family is in no default set (its specs come by --spec) */
    char dtype_keys[64];     /* "x,w,y": a combination "a/b/c" assigns them in order, one dtype all */
    char shape_key[32];      /* "hidden"; "" for a family without one */
    char default_shapes[128]; /* "launch", "64,128" */
    char kernels[256];       /* "kernel=prep,kernel=dkdv,...": a spec per kernel of a sequence; "" one */
    char extra[4096];        /* whole specs the default set adds (without --dtypes/--hidden), a line each */
    char arch[2048];         /* "90a SPEC" a line each: specs the default set adds for an arch-specific SM only
                                (K.bundle.arch: the kernels that SM has of its own) */
} kiln_bundle_matrix;
kiln_status kiln_family_bundle(kiln_gen *gen, const char *family, kiln_bundle_matrix *out, kiln_error *err);

/* The runnable examples a family's template declares (K.examples), one a line: "FAMILY key=value...
 * --sm N [kiln run options]" (`kiln list` prints them; the CLI's usage texts take theirs from here).
 * family NULL: every family's, in kiln_families' order. *count (when not NULL) gets the number of
 * lines; buf NULL measures. */
kiln_status kiln_family_examples(kiln_gen *gen, const char *family, char *buf, size_t size, int *count,
                                 kiln_error *err);

/* The source bytes of a family's template, for cache keys (valid until the next call). */
kiln_status kiln_template_source(kiln_gen *gen, const char *family, const char **src, size_t *len,
                                 kiln_error *err);

/* Version strings folded into cache keys. */
const char *kiln_llvm_version(void);

#ifdef __cplusplus
}
#endif
#endif
