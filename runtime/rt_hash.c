/* runtime/rt_hash.c - XXH3-128 from header-only xxhash, for cache keys and checksums. */
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "rt.h"

void rt_hash128(const void *data, size_t len, uint8_t out[16]) {
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, XXH3_128bits(data, len));
    memcpy(out, c.digest, 16);
}

void rt_hex(const uint8_t *bytes, size_t n, char *out) {
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[bytes[i] >> 4];
        out[2 * i + 1] = digits[bytes[i] & 15];
    }
    out[2 * n] = 0;
}
