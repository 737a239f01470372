/* tests/fuzz/fuzz_ptx.c - libFuzzer target: the PTX reader and `kiln lint` (gen/gen_ptx_reader.c,
 * gen/gen_lint.c) on arbitrary text, for a device SM picked by the first byte. */
#include <stdint.h>
#include <string.h>

#include "kiln/lint.h"

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
    static const int sms[] = {0, 75, 80, 86, 89, 90};
    int sm = size ? sms[data[0] % 6] : 0;
    kiln_lint_report *r = NULL;
    kiln_error err = {0};
    if (kiln_lint((const char *)data, size, sm, &r, &err) != KILN_OK) return 0;
    size_t n = kiln_lint_count(r);
    for (size_t i = 0; i < n; i++) {
        const kiln_lint_finding *f = kiln_lint_get(r, i);
        if (!f) __builtin_trap(); /* a finding the count promised is missing */
    }
    if (kiln_lint_get(r, n)) __builtin_trap();
    (void)kiln_lint_module_info(r);
    kiln_lint_free(r);
    return 0;
}
