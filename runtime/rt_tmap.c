/* runtime/rt_tmap.c - tensor maps for TMA: kiln's record of a map, checked, encoded by the driver's cuTensorMapEncodeTiled. */
#include <stdint.h>
#include <stdio.h>

#include "rt.h"

kiln_status rt_tmap_encode(kiln_rt *rt, const kiln_tensor_map *m, void *out, const char *what, kiln_error *err) {
    const char *w = what && *what ? what : "tensor map";
    char why[200];
    if (!rt || !m || !out) return kiln_fail(err, KILN_EINVAL, "%s: NULL argument to kiln_tensor_map_encode", w);
    if ((uintptr_t)out % KILN_TMAP_ALIGN)
        return kiln_fail(err, KILN_EINVAL, "%s: the map's destination %p is not %d-byte aligned", w, out, KILN_TMAP_ALIGN);
    if (m->magic != KILN_TMAP_MAGIC)
        return kiln_fail(err, KILN_EINVAL, "%s: not a kiln_tensor_map record (magic 0x%08x, want 0x%08x)", w, m->magic,
                         KILN_TMAP_MAGIC);
    if (kiln_tensor_map_invalid(m, why, sizeof why)) return kiln_fail(err, KILN_EINVAL, "%s: %s", w, why);
    if (!rt->drv.cuTensorMapEncodeTiled)
        return kiln_fail(err, KILN_ENODRIVER, "%s: the CUDA driver has no cuTensorMapEncodeTiled (TMA needs a CUDA 12.0 or "
                         "newer driver)", w);
    unsigned long long dims[KILN_TMAP_RANK_MAX], strides[KILN_TMAP_RANK_MAX - 1]; /* cuuint64_t */
    for (unsigned i = 0; i < KILN_TMAP_RANK_MAX; i++) dims[i] = m->dims[i];
    for (unsigned i = 0; i + 1 < KILN_TMAP_RANK_MAX; i++) strides[i] = m->strides[i];
    const unsigned elem_strides[KILN_TMAP_RANK_MAX] = {1, 1, 1, 1, 1};
    kiln_status st = rt_bind(rt, err);
    if (st != KILN_OK) return st;
    /* interleave none (0), L2 promotion 128B (2), out-of-bounds fill: zeros (0) or NaN (1) */
    CUresult r = rt->drv.cuTensorMapEncodeTiled(out, (int)m->data_type, m->rank, (void *)(uintptr_t)m->base, dims, strides,
                                                m->box, elem_strides, 0, (int)m->swizzle, 2, m->oob_nan ? 1 : 0);
    return rt_driver_check(&rt->drv, r, "cuTensorMapEncodeTiled", w, err);
}

kiln_status kiln_tensor_map_encode(kiln_rt *rt, const kiln_tensor_map *m, void *out, kiln_error *err) {
    return rt_tmap_encode(rt, m, out, NULL, err);
}
