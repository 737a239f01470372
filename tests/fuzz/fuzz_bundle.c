/* tests/fuzz/fuzz_bundle.c - libFuzzer target: the bundle reader (runtime/rt_bundle.c): open,
 * list every entry, look variants up as the runtime does. */
#include <stdint.h>
#include <string.h>

#include "kiln/runtime.h"
#include "rt.h"

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
    kiln_bundle *b = NULL;
    kiln_error err = {0};
    if (kiln_bundle_open_memory(data, size, &b, &err) != KILN_OK) return 0;
    int n = kiln_bundle_count(b);
    (void)strlen(kiln_bundle_producer(b));
    for (int i = 0; i < n; i++) {
        kiln_bundle_entry e;
        if (kiln_bundle_entry_at(b, i, &e, &err) != KILN_OK) continue;
        char norm[KILN_SPEC_MAX];
        if (e.spec && rt_spec_normalize(e.spec, norm, sizeof norm, &err) == KILN_OK) {
            const rt_bundle_item *refused;
            (void)rt_bundle_find(b, norm, 90, 0, NULL);
            (void)rt_bundle_find(b, norm, 75, 12040, &refused);
        }
    }
    char buf[512];
    rt_bundle_describe_family(b, "layernorm", buf, sizeof buf);
    kiln_bundle_close(b);
    return 0;
}
