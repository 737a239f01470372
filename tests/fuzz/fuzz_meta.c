/* tests/fuzz/fuzz_meta.c - libFuzzer target: the "// kiln.meta" block parser (runtime/rt_meta.c).
 * Whatever parses must format back to a block that parses and formats to the same text. */
#include <stdlib.h>
#include <string.h>

#include "kiln/kernel.h"

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
    kiln_kernel_meta m, again;
    kiln_error err = {0};
    if (kiln_meta_parse((const char *)data, size, &m, &err) != KILN_OK) return 0;
    int n = kiln_meta_format(&m, NULL, 0);
    if (n <= 0) abort();
    char *text = malloc((size_t)n + 1);
    if (!text) return 0;
    if (kiln_meta_format(&m, text, (size_t)n + 1) != n) abort();
    if (kiln_meta_parse(text, (size_t)n, &again, &err) != KILN_OK) abort(); /* formatted, yet unreadable */
    char *text2 = malloc((size_t)n + 1);
    if (text2 && (kiln_meta_format(&again, text2, (size_t)n + 1) != n || strcmp(text, text2))) abort(); /* changed */
    free(text2);
    free(text);
    return 0;
}
