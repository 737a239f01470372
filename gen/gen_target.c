/* gen/gen_target.c - the SM table: every per-target fact the generator uses, in one place. */
#include "gen.h"

/* Sources: PTX ISA manual ("Target ISA notes"), CUDA programming guide (shared memory per
 * block); see ../shared/PTX_FACTS.md. */
static const gen_target targets[] = {
    /* sm  ptx  bf16cvt f16x2cvt f16ar bf16ar k8     k16    ldmat  cpasync smem   optin   thr */
    {70, 60, false, false, true, false, false, false, false, false, 48 << 10, 96 << 10, 1024},
    {75, 63, false, false, true, false, true, false, true, false, 48 << 10, 64 << 10, 1024},
    {80, 70, true, true, true, false, true, true, true, true, 48 << 10, 163 << 10, 1024},
    {86, 71, true, true, true, false, true, true, true, true, 48 << 10, 99 << 10, 1024},
    {89, 78, true, true, true, false, true, true, true, true, 48 << 10, 99 << 10, 1024},
    {90, 78, true, true, true, true, true, true, true, true, 48 << 10, 227 << 10, 1024},
};

const gen_target *gen_target_find(int sm) {
    for (size_t i = 0; i < sizeof targets / sizeof targets[0]; i++)
        if (targets[i].sm == sm) return &targets[i];
    return NULL;
}

const gen_target *gen_target_all(int *count) {
    *count = (int)(sizeof targets / sizeof targets[0]);
    return targets;
}

int gen_feature_ptx(enum gen_feature f) {
    static const int ptx[] = {
        [GEN_FEAT_MMA_M16N8K8] = 65,
        [GEN_FEAT_LDMATRIX] = 65,
        [GEN_FEAT_MMA_M16N8K16] = 70,
        [GEN_FEAT_CP_ASYNC] = 70,
    };
    return ptx[f];
}

int kiln_targets(int *sms, int cap) {
    int n = (int)(sizeof targets / sizeof targets[0]);
    for (int i = 0; i < n && i < cap; i++) sms[i] = targets[i].sm;
    return n;
}
