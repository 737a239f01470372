/* examples/aot_layernorm.c - ahead of time: LayerNorm from a kernel bundle, with libkiln_rt only.
 *
 *   kiln bundle layernorm --dtypes bf16/f32/bf16 --hidden 4096,launch -o ln.kbundle
 *   build/examples/aot_layernorm ln.kbundle
 *
 * Links libkiln_rt (libc + libdl): no LLVM, no Lua, no CUDA toolkit. Needs a CUDA driver at run
 * time (or KILN_CUDA_DRIVER=build/tests/libfakecuda.so.1 to try it without a GPU). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/runtime.h"

enum { ROWS = 512, HIDDEN = 4096 };

static uint16_t to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16); /* round to nearest even */
}

static int fail(const kiln_error *e) {
    fprintf(stderr, "aot_layernorm: %s\n", e->msg);
    return 1;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: aot_layernorm BUNDLE\n");
        return 2;
    }
    kiln_rt *rt;
    kiln_error err;
    if (kiln_rt_create(&rt, NULL, &err) != KILN_OK) return fail(&err);
    const kiln_device_info *dev = kiln_rt_device(rt);
    printf("device: %s (sm_%d); half precision for models here: %s\n", dev->name, dev->sm,
           kiln_dtype_name(kiln_rt_half_dtype(rt)));
    if (kiln_rt_add_bundle_file(rt, argv[1], &err) != KILN_OK) return fail(&err);

    size_t nx = (size_t)ROWS * HIDDEN;
    uint16_t *x = malloc(nx * 2);
    float *w = malloc(HIDDEN * 4), *b = malloc(HIDDEN * 4);
    for (size_t i = 0; i < nx; i++) x[i] = to_bf16(sinf((float)i * 0.001f));
    for (int i = 0; i < HIDDEN; i++) w[i] = 1.0f + 0.01f * (float)(i % 7), b[i] = 0.001f * (float)(i % 5);

    kiln_devptr dx, dy, dw, db, dmean, drstd;
    if (kiln_rt_alloc(rt, nx * 2, &dx, &err) || kiln_rt_alloc(rt, nx * 2, &dy, &err) ||
        kiln_rt_alloc(rt, HIDDEN * 4, &dw, &err) || kiln_rt_alloc(rt, HIDDEN * 4, &db, &err) ||
        kiln_rt_alloc(rt, ROWS * 4, &dmean, &err) || kiln_rt_alloc(rt, ROWS * 4, &drstd, &err))
        return fail(&err);
    if (kiln_rt_upload(rt, dx, x, nx * 2, &err) || kiln_rt_upload(rt, dw, w, HIDDEN * 4, &err) ||
        kiln_rt_upload(rt, db, b, HIDDEN * 4, &err))
        return fail(&err);

    kiln_norm_fwd_args a = {.y = dy, .mean = dmean, .rstd = drstd, .x = dx, .weight = dw, .bias = db,
                             .rows = ROWS, .hidden = HIDDEN, .x_dtype = KILN_BF16, .w_dtype = KILN_F32,
                             .y_dtype = KILN_BF16, .eps = 1e-5f};
    kiln_kernel *k;
    if (kiln_norm_forward_pick(rt, &a, &k, &err) != KILN_OK) return fail(&err);
    const kiln_kernel_meta *m = kiln_kernel_get_meta(k);
    printf("kernel: %s\n  from the %s, sm_%d %s, %u threads per block\n", m->spec, kiln_kernel_origin(k), m->sm,
           kiln_kernel_payload_kind(k) == KILN_PAYLOAD_CUBIN ? "cubin" : "PTX", m->block[0]);
    if (kiln_norm_forward(rt, &a, &err) != KILN_OK || kiln_rt_synchronize(rt, &err) != KILN_OK) return fail(&err);
    float mean[4];
    if (kiln_rt_download(rt, mean, dmean, sizeof mean, &err) != KILN_OK) return fail(&err);
    printf("launched %d rows; mean of row 0 as the device computed it: %g\n", ROWS, mean[0]);
    kiln_devptr ptrs[] = {dx, dy, dw, db, dmean, drstd};
    for (size_t i = 0; i < sizeof ptrs / sizeof ptrs[0]; i++) kiln_rt_free(rt, ptrs[i], &err);
    kiln_rt_destroy(rt);
    free(x), free(w), free(b);
    return 0;
}
