/* kiln/emu_norm.h - the typed reading of a norm family's resolved spec (the GPU kit's case builders name tensors' dtypes with it). */
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

#ifdef __cplusplus
}
#endif
#endif
