/* examples/jit_layernorm.c - just in time: the runtime generates LayerNorm for this device at load.
 *
 *   build/examples/jit_layernorm [HIDDEN]
 *
 * Links libkiln (the generator) and libkiln_rt. The first run generates the kernel (milliseconds)
 * and stores it in the disk cache ($KILN_CACHE_DIR, else ~/.cache/kiln); later runs load it from
 * there; later calls in the same process come from memory. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "kiln/runtime.h"

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static void warn(void *user, const char *msg) {
    (void)user;
    fprintf(stderr, "kiln warning: %s\n", msg);
}

int main(int argc, char **argv) {
    int hidden = argc > 1 ? atoi(argv[1]) : 4096;
    kiln_rt_use_generator(); /* static link: registers libkiln's generator with the runtime */
    kiln_rt *rt;
    kiln_error err;
    kiln_rt_options opt = {.on_warning = warn};
    if (kiln_rt_create(&rt, &opt, &err) != KILN_OK) {
        fprintf(stderr, "jit_layernorm: %s\n", err.msg);
        return 1;
    }
    /* The model's activations in the half type this device handles natively. */
    kiln_dtype half = kiln_rt_half_dtype(rt);
    char spec[256];
    snprintf(spec, sizeof spec, "layernorm x=%s w=f32 y=%s hidden=%d", kiln_dtype_name(half), kiln_dtype_name(half), hidden);
    for (int i = 0; i < 2; i++) {
        kiln_kernel *k;
        double t0 = now_ms();
        if (kiln_rt_get_kernel(rt, spec, &k, &err) != KILN_OK) {
            fprintf(stderr, "jit_layernorm: %s\n", err.msg);
            return 1;
        }
        const kiln_kernel_meta *m = kiln_kernel_get_meta(k);
        printf("%s: %.3f ms, %s, sm_%d, entry %s\n", i ? "again " : "first ", now_ms() - t0, kiln_kernel_origin(k), m->sm,
               m->entry);
    }
    const char *dir = kiln_rt_cache_dir(rt);
    printf("disk cache: %s\n", dir ? dir : "(memory only)");
    kiln_rt_destroy(rt);
    return 0;
}
