/* kiln/kernel.h - metadata that travels with every generated kernel (entry, params, geometry). */
#ifndef KILN_KERNEL_H
#define KILN_KERNEL_H

#include "kiln/common.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KILN_MAX_PARAMS 64 /* attention with paged KV, append, rotary, window, softcap and alibi: 45 */
#define KILN_NAME_MAX 64
#define KILN_SPEC_MAX 512
#define KILN_LAUNCH_MAX 3072 /* the launch description's text (docs/registry.md) */
#define KILN_LAUNCH_DIMS 4    /* dims of a tensor in the launch description */

typedef enum kiln_param_kind {
    KILN_PARAM_PTR = 0, /* device pointer (8 bytes) */
    KILN_PARAM_I32 = 1,
    KILN_PARAM_I64 = 2,
    KILN_PARAM_F32 = 3,
    KILN_PARAM_TMAP = 4 /* a tensor map (CUtensorMap): 128 bytes by value, 64-aligned, __grid_constant__ */
} kiln_param_kind;

typedef struct kiln_param {
    char name[KILN_NAME_MAX];
    kiln_param_kind kind;
    kiln_dtype dtype; /* element type for pointers; KILN_F32 otherwise */
} kiln_param;

/*
 * Everything the runtime needs to launch a kernel without Lua or LLVM.
 * Grid rule: grid[i] = ceil(problem[i] / grid_tile[i]), where the launch helper of the
 * family supplies problem[] (e.g. LayerNorm: {rows, 1, 1}).
 */
typedef struct kiln_kernel_meta {
    char family[KILN_NAME_MAX];
    char spec[KILN_SPEC_MAX];   /* canonical spec string */
    char entry[KILN_NAME_MAX];  /* PTX entry name */
    int sm;                     /* target SM, e.g. 80 */
    int ptx_version;            /* PTX ISA version times 10, e.g. 70 for 7.0 */
    int nparams;
    kiln_param params[KILN_MAX_PARAMS];
    unsigned block[3];          /* threads per block */
    unsigned grid_tile[3];      /* problem elements per block along each grid axis */
    unsigned static_smem;       /* bytes of static shared memory */
    unsigned dynamic_smem;      /* bytes of dynamic shared memory to pass at launch */
    unsigned align_bytes;       /* required alignment of pointer arguments (vector loads) */
    unsigned rows_per_block;    /* family-specific geometry, informational */
    unsigned threads_per_row;
    /* Two-kernel launches (norm backward): this kernel writes ws_slabs slabs of f32 partial
     * sums to a workspace, ws_rows_per_block rows of `hidden` floats per block per slab, so
     * the workspace holds ws_slabs * grid[0] * ws_rows_per_block * hidden floats; then the
     * kernel `then_spec` reduces it (see docs/norms.md). 0 and "" when there is none. */
    unsigned ws_slabs, ws_rows_per_block;
    char then_spec[KILN_SPEC_MAX];
    /* The launch problem the template declares (docs/registry.md): its "// kiln.meta" lines
     * "tensor", "scalar", "stride", "problem", "before" and "after", one a line without the prefix,
     * in the order written. Empty for modules from kiln builds before it (their launch needs a
     * typed helper that knows the family). */
    char launch[KILN_LAUNCH_MAX];
} kiln_kernel_meta;

/* Writes meta as PTX comment lines ("// kiln.meta ...") into buf; returns the length
 * needed (like snprintf). */
int kiln_meta_format(const kiln_kernel_meta *meta, char *buf, size_t size);

/* Finds and parses the "// kiln.meta" block in a PTX text of len bytes. */
kiln_status kiln_meta_parse(const char *ptx, size_t len, kiln_kernel_meta *out, kiln_error *err);

#ifdef __cplusplus
}
#endif
#endif
