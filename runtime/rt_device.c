/* runtime/rt_device.c - SM facts (bf16, f16, tensor-core shapes) and the device query. */
#include <stdio.h>
#include <string.h>

#include "kiln/target.h"
#include "rt.h"

static const struct {
    unsigned bit;
    const char *name;
} mma_names[] = {
    {KILN_MMA_M8N8K4_F16, "m8n8k4.f16"},     {KILN_MMA_M16N8K8_F16, "m16n8k8.f16"},
    {KILN_MMA_M16N8K16_F16, "m16n8k16.f16"}, {KILN_MMA_M16N8K16_BF16, "m16n8k16.bf16"},
    {KILN_MMA_M16N8K8_TF32, "m16n8k8.tf32"}, {KILN_WGMMA, "wgmma(sm_90a)"},
};

int kiln_sm_from_cc(int major, int minor) {
    return major * 10 + minor;
}

/* Tensor-core shapes of a row of the SM table (kiln/target.h) as kiln_mma_shape bits. */
static unsigned mma_bits(const kiln_target *t) {
    return (t->mma_m8n8k4_f16 ? KILN_MMA_M8N8K4_F16 : 0u) | (t->mma_m16n8k8_f16 ? KILN_MMA_M16N8K8_F16 : 0u) |
           (t->mma_m16n8k16 ? KILN_MMA_M16N8K16_F16 | KILN_MMA_M16N8K16_BF16 | KILN_MMA_M16N8K8_TF32 : 0u) |
           (t->wgmma ? KILN_WGMMA : 0u);
}

/* A device uses the newest row of the SM table whose SM is not above its own, plus the shapes of the
 * arch-specific row of exactly its SM (a 9.0 device runs sm_90a's wgmma). */
kiln_status kiln_sm_facts_get(int sm, kiln_sm_facts *out, kiln_error *err) {
    int n;
    const kiln_target *rows = kiln_target_all(&n), *row = NULL, *arch = NULL;
    for (int i = 0; i < n; i++) {
        if (rows[i].sm <= sm) row = &rows[i];
        if (kiln_sm_is_arch(rows[i].sm) && kiln_target_runs_on(rows[i].sm, sm)) arch = &rows[i];
    }
    if (!row)
        return kiln_fail(err, KILN_EINVAL, "sm_%d is older than every SM kiln knows (sm_%d and newer)", sm, rows[0].sm);
    *out = (kiln_sm_facts){.sm = sm,
                           .native_bf16 = row->native_bf16_cvt,
                           .native_f16_arith = row->f16_arith,
                           .bf16_arith = row->bf16_arith,
                           .cp_async = row->cp_async,
                           .mma = mma_bits(row) | (arch ? mma_bits(arch) : 0u),
                           .half = row->native_bf16_cvt ? KILN_BF16 : KILN_F16};
    return KILN_OK;
}

kiln_dtype kiln_half_dtype_for_sm(int sm) {
    kiln_sm_facts f;
    return kiln_sm_facts_get(sm, &f, NULL) == KILN_OK ? f.half : KILN_F16;
}

int kiln_mma_shapes_string(unsigned mma, char *buf, size_t size) {
    size_t n = 0;
    if (size) buf[0] = 0;
    for (size_t i = 0; i < sizeof mma_names / sizeof mma_names[0]; i++) {
        if (!(mma & mma_names[i].bit)) continue;
        int k = snprintf(buf + (n < size ? n : size), n < size ? size - n : 0, "%s%s", n ? " " : "",
                         mma_names[i].name);
        if (k > 0) n += (size_t)k;
    }
    return (int)n;
}

/* Integer device attributes copied into kiln_device_info. */
static const struct {
    int attr;
    size_t offset;
} attr_table[] = {
    {RT_ATTR_CC_MAJOR, offsetof(kiln_device_info, cc_major)},
    {RT_ATTR_CC_MINOR, offsetof(kiln_device_info, cc_minor)},
    {RT_ATTR_MULTIPROCESSOR_COUNT, offsetof(kiln_device_info, multiprocessors)},
    {RT_ATTR_MAX_THREADS_PER_BLOCK, offsetof(kiln_device_info, max_threads_per_block)},
    {RT_ATTR_MAX_BLOCK_DIM_X, offsetof(kiln_device_info, max_block[0])},
    {RT_ATTR_MAX_BLOCK_DIM_X + 1, offsetof(kiln_device_info, max_block[1])},
    {RT_ATTR_MAX_BLOCK_DIM_X + 2, offsetof(kiln_device_info, max_block[2])},
    {RT_ATTR_MAX_GRID_DIM_X, offsetof(kiln_device_info, max_grid[0])},
    {RT_ATTR_MAX_GRID_DIM_X + 1, offsetof(kiln_device_info, max_grid[1])},
    {RT_ATTR_MAX_GRID_DIM_X + 2, offsetof(kiln_device_info, max_grid[2])},
    {RT_ATTR_MAX_SHARED_MEMORY_PER_BLOCK, offsetof(kiln_device_info, smem_per_block)},
    {RT_ATTR_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, offsetof(kiln_device_info, smem_per_block_optin)},
};

kiln_status rt_device_query(const rt_driver *d, CUdevice dev, int ordinal, kiln_device_info *out,
                            kiln_error *err) {
    memset(out, 0, sizeof *out);
    out->ordinal = ordinal;
    kiln_status st = rt_driver_check(d, d->cuDeviceGetName(out->name, (int)sizeof out->name - 1, dev),
                                     "cuDeviceGetName", NULL, err);
    for (size_t i = 0; st == KILN_OK && i < sizeof attr_table / sizeof attr_table[0]; i++) {
        int v = 0;
        st = rt_driver_check(d, d->cuDeviceGetAttribute(&v, attr_table[i].attr, dev), "cuDeviceGetAttribute",
                             NULL, err);
        memcpy((char *)out + attr_table[i].offset, &v, sizeof v); /* int and unsigned fields alike */
    }
    size_t mem = 0;
    if (st == KILN_OK) st = rt_driver_check(d, d->cuDeviceTotalMem(&mem, dev), "cuDeviceTotalMem", NULL, err);
    if (st == KILN_OK) st = rt_driver_check(d, d->cuDriverGetVersion(&out->driver_version), "cuDriverGetVersion", NULL, err);
    if (st != KILN_OK) return st;
    out->total_mem = mem;
    out->sm = kiln_sm_from_cc(out->cc_major, out->cc_minor);
    if (kiln_sm_facts_get(out->sm, &out->facts, NULL) != KILN_OK)
        return kiln_fail(err, KILN_ENODEVICE, "no usable CUDA device: '%s' is sm_%d; kiln needs sm_70 or newer",
                         out->name, out->sm);
    return KILN_OK;
}
