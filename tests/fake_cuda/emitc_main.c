/* tests/fake_cuda/emitc_main.c - program linking a `kiln bundle --emit-c` bundle and libkiln_rt only. */
#include <stdio.h>
#include <stdlib.h>

#include "kiln/runtime.h"
#include "ln_bundle.h"

/* usage: emitc_main SPEC: prints the variant the device gets, then launches LayerNorm once. */
int main(int argc, char **argv) {
    kiln_rt *rt = NULL;
    kiln_kernel *k;
    kiln_error err;
    kiln_rt_options opt = {.no_disk_cache = 1};
    if (argc != 2) return 2;
    if (kiln_rt_create(&rt, &opt, &err) != KILN_OK || kiln_rt_add_bundle_memory(rt, ln_bundle_data, ln_bundle_size, &err) ||
        kiln_rt_get_kernel(rt, argv[1], &k, &err) != KILN_OK) {
        printf("error: %s\n", err.msg);
        kiln_rt_destroy(rt);
        return 1;
    }
    const kiln_kernel_meta *m = kiln_kernel_get_meta(k);
    printf("sm=%d kind=%s entry=%s\n", m->sm, kiln_kernel_payload_kind(k) == KILN_PAYLOAD_CUBIN ? "cubin" : "ptx", m->entry);
    kiln_devptr buf;
    kiln_norm_fwd_args a = {.rows = 64, .hidden = 4096, .x_dtype = KILN_BF16, .w_dtype = KILN_F32, .y_dtype = KILN_BF16,
                             .eps = 1e-5f};
    if (kiln_rt_alloc(rt, 4 << 20, &buf, &err) != KILN_OK) return printf("error: %s\n", err.msg), 1;
    a.x = buf, a.y = buf + (1 << 20), a.weight = buf + (2 << 20), a.bias = buf + (3 << 20);
    if (kiln_norm_forward(rt, &a, &err) != KILN_OK) return printf("error: %s\n", err.msg), 1;
    printf("launched layernorm\n");
    kiln_rt_free(rt, buf, &err);
    kiln_rt_destroy(rt);
    return 0;
}
