/* kiln/emu_norm.h - the norm families (layernorm, rmsnorm, their backwards, residual forms) on the emulator. */
#ifndef KILN_EMU_NORM_H
#define KILN_EMU_NORM_H

#include "kiln/emu.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum kiln_norm_family { KILN_NORM_LN = 0, KILN_NORM_RMS, KILN_NORM_LN_BWD, KILN_NORM_RMS_BWD } kiln_norm_family;

/* A norm spec as the templates read it (keys left out take the templates' defaults). */
typedef struct kiln_norm_spec {
    kiln_norm_family family;
    kiln_dtype x, w, y, dy, dx, r; /* y: forward output; dy/dx: backward; r: residual stream */
    int hidden;                    /* 0: hidden=launch */
    int weight, bias, residual;
    int offset;                    /* 1: zero-centered weights, the norm multiplies by 1 + w */
} kiln_norm_spec;

/* Reads a norm family's resolved spec (kiln_canonical_spec, a kernel's meta): the family from its keys
 * (a backward has dy, LayerNorm has bias), dtypes, hidden, weight, bias, residual, offset. */
kiln_status kiln_norm_spec_parse(const char *spec, kiln_norm_spec *s, kiln_error *err);
int kiln_norm_is_backward(const kiln_norm_spec *s);

/*
 * One problem. Forward: x (and residual) in, y, mean (LayerNorm), rstd (and h) out. Backward:
 * x (h for the residual form), dy, weight, dres in; mean and rstd are the float64 forward
 * statistics rounded to f32 (as a forward would save them); dx, dweight, dbias out. The
 * references are float64 from the same rounded inputs. Every buffer ends at a guard page.
 */
typedef struct kiln_norm_data {
    kiln_norm_spec spec;
    int rows, hidden;
    float eps;
    void *x, *res, *w, *b, *dy, *dres;   /* inputs (NULL when the spec has none) */
    void *y, *h, *dx, *dw, *db;          /* outputs */
    float *mean, *rstd;                  /* forward: outputs; backward: inputs */
    float *ws;                           /* backward workspace (sized at run) */
    size_t ws_floats;
    double *ref_y, *ref_h, *ref_mean, *ref_rstd, *ref_dx, *ref_dw, *ref_db;
} kiln_norm_data;

/* Inputs: kiln_ln_input kinds (random, large-mean, constant, special, mixed); scale multiplies
 * x (1e30 exercises overflow-safe statistics); eps may be 0. */
kiln_status kiln_norm_data_create(kiln_norm_data **out, const kiln_norm_spec *spec, float eps, int rows, int hidden,
                                  kiln_ln_input input, double scale, uint64_t seed, kiln_error *err);
void kiln_norm_data_free(kiln_norm_data *d);
/* Sets every element of row r of x to v (and residual to 0): exact-case tests. Recomputes the reference. */
void kiln_norm_data_set_row(kiln_norm_data *d, int r, double v);
/* Recomputes the float64 references after a caller changed inputs in place (edge-case tests
 * that write x or residual elements themselves, e.g. rows near f32's maximum). */
void kiln_norm_data_reference(kiln_norm_data *d);

/* Poisons the outputs, binds parameters by name and runs: a forward on its grid; a backward on
 * `blocks` blocks (0: one per row group), then `reduce` (the norm_reduce kernel its metadata
 * names; may be NULL when the spec has no weight/bias) on the workspace. */
kiln_status kiln_norm_run(kiln_emu_kernel *k, kiln_emu_kernel *reduce, kiln_norm_data *d, unsigned blocks, int twice,
                          kiln_error *err);
/* The same with `pre`, the kernel a split backward form runs before it (its metadata's `before`
 * spec, which kiln_norm_before_spec copies into buf; returns 0 when the kernel has none). */
kiln_status kiln_norm_run_seq(kiln_emu_kernel *pre, kiln_emu_kernel *k, kiln_emu_kernel *reduce, kiln_norm_data *d,
                              unsigned blocks, int twice, kiln_error *err);
int kiln_norm_before_spec(const kiln_kernel_meta *m, char *buf, size_t n);

/* Outputs checked: 0 y/dx, 1 mean/dweight, 2 rstd/dbias, 3 h. */
#define KILN_NORM_OUTPUTS 4
typedef struct kiln_norm_report {
    double max_abs[KILN_NORM_OUTPUTS], max_rel[KILN_NORM_OUTPUTS], worst[KILN_NORM_OUTPUTS];
    long bad[KILN_NORM_OUTPUTS];
    char first[KILN_NORM_OUTPUTS][256];
} kiln_norm_report;
/* Compares every output with tolerances derived from dtypes and shape (templates/lib/norm.ref.c);
 * threads_per_row and parts (backward: grid * workspace rows per block) describe the run. Returns the number of bad values. */
long kiln_norm_check(const kiln_norm_data *d, int threads_per_row, unsigned parts, kiln_norm_report *r);
/* Name of output o for this spec ("y", "mean", "rstd", "h" / "dx", "dweight", "dbias"), NULL if unused. */
const char *kiln_norm_output_name(const kiln_norm_spec *s, int o);

#ifdef __cplusplus
}
#endif
#endif
