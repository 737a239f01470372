/* gen/gen_target.c - the PTX ISA version each generator feature needs (beyond the target's own). */
#include "gen.h"

int gen_feature_ptx(enum gen_feature f) {
    static const int ptx[] = {
        [GEN_FEAT_MMA_M16N8K8] = 65,
        [GEN_FEAT_LDMATRIX] = 65,
        [GEN_FEAT_MMA_M16N8K16] = 70,
        [GEN_FEAT_CP_ASYNC] = 70,
    };
    return ptx[f];
}
