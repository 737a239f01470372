/* tests/fuzz/fuzz_bin.c - libFuzzer target: `kiln lint` on binaries (gen/gen_lint_bin.c): the fatbin, cubin and
 * host-ELF readers and the verdicts, on arbitrary bytes, for a device SM and CUDA release picked by the first byte. */
#include <stdint.h>
#include <string.h>

#include "kiln/lint.h"

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
    static const int sms[] = {0, 75, 80, 86, 90, 100, 103, 120};
    static const int cudas[] = {0, 12040, 12080, 13000};
    int sm = size ? sms[data[0] % 8] : 0, cuda = size ? cudas[data[0] / 8 % 4] : 0;
    if (size) data++, size--;
    kiln_lint_bin_report *r = NULL;
    kiln_error err = {0};
    if (kiln_lint_bin(data, size, sm, cuda, &r, &err) != KILN_OK) {
        if (!err.msg[0]) __builtin_trap(); /* every failure says why */
        return 0;
    }
    const kiln_lint_binary *b = kiln_lint_bin_info(r);
    if (b->images != kiln_lint_bin_count(r)) __builtin_trap();
    for (size_t i = 0; i < kiln_lint_bin_count(r); i++) {
        const kiln_lint_image *im = kiln_lint_bin_image(r, i);
        if (!im || im->container >= b->containers || im->offset > size || im->size > size - im->offset)
            __builtin_trap();
        const kiln_lint_report *p = kiln_lint_bin_ptx(r, i);
        if (p && kiln_lint_count(p) != im->findings) __builtin_trap();
    }
    for (size_t i = 0; i < kiln_lint_bin_findings(r); i++)
        if (!kiln_lint_bin_finding(r, i)->message[0]) __builtin_trap();
    if (kiln_lint_bin_image(r, kiln_lint_bin_count(r)) || kiln_lint_bin_finding(r, kiln_lint_bin_findings(r)))
        __builtin_trap();
    kiln_lint_bin_free(r);
    return 0;
}
