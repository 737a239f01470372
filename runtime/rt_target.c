/* runtime/rt_target.c - the SM table (include/kiln/target.h); libc only, shared by all of kiln. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/target.h"

static const kiln_target targets[] = {
    /* sm  ptx  bf16cvt f16x2cvt f16ar bf16ar k4    k8     k16    wgmma  ldmat  cpasync smem      optin      thr   regs      thr/SM */
    {70, 60, false, false, true, false, true, false, false, false, false, false, 48 << 10, 96 << 10, 1024, 65536, 2048},
    {75, 63, false, false, true, false, true, true, false, false, true, false, 48 << 10, 64 << 10, 1024, 65536, 1024},
    {80, 70, true, true, true, false, true, true, true, false, true, true, 48 << 10, 163 << 10, 1024, 65536, 2048},
    {86, 71, true, true, true, false, true, true, true, false, true, true, 48 << 10, 99 << 10, 1024, 65536, 1536},
    {89, 78, true, true, true, false, true, true, true, false, true, true, 48 << 10, 99 << 10, 1024, 65536, 1536},
    /* sm_90 PTX runs on every device from 9.0 on and has no wgmma/setmaxnreg; sm_90a (PTX ISA 8.0) adds them
     * and runs on 9.0 devices only (its row is last: KILN_SM_ARCH + 90). */
    {90, 78, true, true, true, true, true, true, true, false, true, true, 48 << 10, 227 << 10, 1024, 65536, 2048},
    /* Blackwell: mma.sync as on sm_90, no wgmma (tcgen05 is on the 'a'/'f' targets only). Data center
     * B200/GB200 (10.0), B300 (10.3), Jetson Thor (11.0); RTX 50 / RTX PRO (12.0), DGX Spark GB10 (12.1). */
    {100, 86, true, true, true, true, true, true, true, false, true, true, 48 << 10, 227 << 10, 1024, 65536, 2048},
    {103, 88, true, true, true, true, true, true, true, false, true, true, 48 << 10, 227 << 10, 1024, 65536, 2048},
    {110, 90, true, true, true, true, true, true, true, false, true, true, 48 << 10, 227 << 10, 1024, 65536, 1536},
    {120, 87, true, true, true, true, true, true, true, false, true, true, 48 << 10, 99 << 10, 1024, 65536, 1536},
    {121, 88, true, true, true, true, true, true, true, false, true, true, 48 << 10, 99 << 10, 1024, 65536, 1536},
    {KILN_SM_ARCH + 90, 80, true, true, true, true, true, true, true, true, true, true, 48 << 10, 227 << 10, 1024, 65536,
     2048},
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

const char *kiln_sm_name(int sm, char *buf) {
    snprintf(buf, 16, "sm_%d%s", kiln_sm_base(sm), kiln_sm_is_arch(sm) ? "a" : "");
    return buf;
}

int kiln_sm_parse(const char *text) {
    if (!text) return 0;
    if (!strncmp(text, "sm_", 3)) text += 3;
    if (*text < '0' || *text > '9') return 0;
    char *end;
    long v = strtol(text, &end, 10);
    if (v <= 0 || v >= KILN_SM_ARCH) return 0;
    if (*end == 'a' && !end[1]) v += KILN_SM_ARCH;
    else if (*end) return 0;
    return kiln_target_find((int)v) ? (int)v : 0;
}

bool kiln_target_runs_on(int sm, int device_sm) {
    return kiln_sm_is_arch(sm) ? kiln_sm_base(sm) == device_sm : sm <= device_sm;
}
