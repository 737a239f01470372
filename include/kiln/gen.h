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

typedef struct kiln_gen_options {
    const char *template_dir; /* NULL: $KILN_TEMPLATE_DIR, else the templates built into libkiln */
    int opt_level;            /* 0..3; 0 means the default (3) */
} kiln_gen_options;

kiln_status kiln_gen_create(kiln_gen **out, const kiln_gen_options *opt, kiln_error *err);
void kiln_gen_destroy(kiln_gen *gen);

/* Generates the kernel named by a spec string such as
 *   "layernorm x=bf16 w=f32 y=bf16 hidden=4096"
 * for target sm (70, 75, 80, 86, 89, 90). Keys may come in any order. */
kiln_status kiln_generate(kiln_gen *gen, const char *spec, int sm, kiln_emit emit,
                          kiln_module **out, kiln_error *err);

const char *kiln_module_text(const kiln_module *m); /* NUL-terminated */
size_t kiln_module_size(const kiln_module *m);      /* bytes, without the NUL */
const kiln_kernel_meta *kiln_module_meta(const kiln_module *m);
void kiln_module_free(kiln_module *m);

/* Canonical form of a spec: family, then every parameter (defaults filled in) in the
 * order the template declares them. Same spec, same string. */
kiln_status kiln_canonical_spec(kiln_gen *gen, const char *spec, char *buf, size_t size,
                                kiln_error *err);

/* Typed form of a LayerNorm spec, for C callers that prefer a struct to a string. */
typedef struct kiln_layernorm_spec {
    kiln_dtype x, w, y; /* input, weight/bias, output */
    int hidden;         /* > 0: fixed at generation time; 0: passed at launch (hidden=launch) */
    int has_weight, has_bias;
} kiln_layernorm_spec;

/* Writes the spec string for s into buf (snprintf semantics). */
int kiln_layernorm_spec_string(const kiln_layernorm_spec *s, char *buf, size_t size);

/* The targets: kiln_targets() and the SM table in kiln/target.h. */

/* Describes families and their parameters as text, one family per block (for `kiln list`). */
kiln_status kiln_describe(kiln_gen *gen, char *buf, size_t size, kiln_error *err);

/* The source bytes of a family's template, for cache keys (valid until the next call). */
kiln_status kiln_template_source(kiln_gen *gen, const char *family, const char **src, size_t *len,
                                 kiln_error *err);

/* Version strings folded into cache keys. */
const char *kiln_llvm_version(void);

#ifdef __cplusplus
}
#endif
#endif
