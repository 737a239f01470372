/* templates/layernorm_bwd.ref.c - layernorm_bwd's float64 reference: the registry descriptor over the norm families' shared reference. */
#include "emu.h"
#include "kiln/emu_case.h"

/* Inputs, the float64 reference and the error model: templates/lib/norm.ref.c. */
const kiln_ref_family kiln_ref_layernorm_bwd = {
    .family = "layernorm_bwd",
    .create = emu_norm_case_create,
    .destroy = emu_norm_case_destroy,
    .tensor = emu_norm_case_tensor,
    .scalar = emu_norm_case_scalar,
    .prepare = emu_norm_case_prepare,
    .check = emu_norm_case_check,
    .describe = emu_norm_case_describe,
    .reference = emu_norm_case_reference,
    .refresh = emu_norm_case_refresh,
};
