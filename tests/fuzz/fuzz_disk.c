/* tests/fuzz/fuzz_disk.c - libFuzzer target: the disk-cache entry reader (runtime/rt_disk.c)
 * and, for an entry it accepts, the metadata parse the runtime does next. The key and spec
 * are taken from the input itself (where the header says they are), so that mutations of
 * a real entry reach the checksum and the payload. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/kernel.h"
#include "rt.h"

#define HEADER 56

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
    uint8_t key[16] = {0};
    char spec[512] = "layernorm";
    if (size >= 40) memcpy(key, data + 24, 16);
    if (size >= HEADER) {
        size_t len = (size_t)data[12] | (size_t)data[13] << 8;
        if (len < sizeof spec && HEADER + len <= size) {
            memcpy(spec, data + HEADER, len);
            spec[len] = 0;
        }
    }
    if (!rt_disk_entry_ok(data, size, key, spec)) return 0;
    size_t off = HEADER + strlen(spec);
    if (off > size) abort(); /* accepted an entry shorter than its own header and spec */
    char *text = malloc(size - off + 1);
    if (!text) return 0;
    memcpy(text, data + off, size - off);
    text[size - off] = 0;
    kiln_kernel_meta m;
    kiln_error err = {0};
    (void)kiln_meta_parse(text, size - off, &m, &err);
    free(text);
    return 0;
}
