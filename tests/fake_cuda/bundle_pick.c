/* tests/fake_cuda/bundle_pick.c - program linking libkiln_rt only: which entry of a bundle file a device gets for a spec. */
#include <stdio.h>

#include "kiln/runtime.h"

/* usage: bundle_pick FILE SPEC: prints "sm=N kind=ptx|cubin entry=NAME" for the kernel the runtime takes from the bundle
 * FILE on the (fake) device, or "error: ..." (exit 1). */
int main(int argc, char **argv) {
    kiln_rt *rt = NULL;
    kiln_kernel *k;
    kiln_error err;
    kiln_rt_options opt = {.no_disk_cache = 1};
    if (argc != 3) return fprintf(stderr, "usage: bundle_pick FILE SPEC\n"), 2;
    if (kiln_rt_create(&rt, &opt, &err) != KILN_OK || kiln_rt_add_bundle_file(rt, argv[1], &err) != KILN_OK ||
        kiln_rt_get_kernel(rt, argv[2], &k, &err) != KILN_OK) {
        printf("error: %s\n", err.msg);
        kiln_rt_destroy(rt);
        return 1;
    }
    const kiln_kernel_meta *m = kiln_kernel_get_meta(k);
    printf("sm=%d kind=%s entry=%s\n", m->sm, kiln_kernel_payload_kind(k) == KILN_PAYLOAD_CUBIN ? "cubin" : "ptx", m->entry);
    kiln_rt_destroy(rt);
    return 0;
}
