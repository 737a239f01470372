/* runtime/rt_target.c - the SM table (include/kiln/target.h); libc only, shared by all of kiln. */
#include <stddef.h>

#include "kiln/target.h"

static const kiln_target targets[] = {
    /* sm  ptx  bf16cvt f16x2cvt f16ar bf16ar k4    k8     k16    wgmma  ldmat  cpasync smem      optin      thr   regs      thr/SM */
    {70, 60, false, false, true, false, true, false, false, false, false, false, 48 << 10, 96 << 10, 1024, 65536, 2048},
    {75, 63, false, false, true, false, true, true, false, false, true, false, 48 << 10, 64 << 10, 1024, 65536, 1024},
    {80, 70, true, true, true, false, true, true, true, false, true, true, 48 << 10, 163 << 10, 1024, 65536, 2048},
    {86, 71, true, true, true, false, true, true, true, false, true, true, 48 << 10, 99 << 10, 1024, 65536, 1536},
    {89, 78, true, true, true, false, true, true, true, false, true, true, 48 << 10, 99 << 10, 1024, 65536, 1536},
    {90, 78, true, true, true, true, true, true, true, true, true, true, 48 << 10, 227 << 10, 1024, 65536, 2048},
    /* Blackwell: mma.sync as on sm_90, no wgmma (tcgen05 is on the 'a'/'f' targets only). Data center
     * B200/GB200 (10.0), B300 (10.3), Jetson Thor (11.0); RTX 50 / RTX PRO (12.0), DGX Spark GB10 (12.1). */
    {100, 86, true, true, true, true, true, true, true, false, true, true, 48 << 10, 227 << 10, 1024, 65536, 2048},
    {103, 88, true, true, true, true, true, true, true, false, true, true, 48 << 10, 227 << 10, 1024, 65536, 2048},
    {110, 90, true, true, true, true, true, true, true, false, true, true, 48 << 10, 227 << 10, 1024, 65536, 1536},
    {120, 87, true, true, true, true, true, true, true, false, true, true, 48 << 10, 99 << 10, 1024, 65536, 1536},
    {121, 88, true, true, true, true, true, true, true, false, true, true, 48 << 10, 99 << 10, 1024, 65536, 1536},
};
enum { NTARGETS = sizeof targets / sizeof targets[0] };

const kiln_target *kiln_target_find(int sm) {
    for (int i = 0; i < NTARGETS; i++)
        if (targets[i].sm == sm) return &targets[i];
    return NULL;
}

const kiln_target *kiln_target_all(int *count) {
    *count = NTARGETS;
    return targets;
}

int kiln_targets(int *sms, int cap) {
    for (int i = 0; i < NTARGETS && i < cap; i++) sms[i] = targets[i].sm;
    return NTARGETS;
}
