/* kiln/tensor_map.h - the 128-byte tensor map (CUtensorMap) as kiln records it where no driver encodes
 * it, and the driver's rules for cuTensorMapEncodeTiled's arguments: the runtime's launch fills this record
 * from the launch description and checks it here before asking the driver; the fake driver writes it from
 * cuTensorMapEncodeTiled's arguments; the emulator reads it (emu/emu_hopper.c). A real driver's map is
 * opaque; kiln never reads one (docs/hopper.md). */
#ifndef KILN_TENSOR_MAP_H
#define KILN_TENSOR_MAP_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KILN_TMAP_BYTES 128
#define KILN_TMAP_ALIGN 64
#define KILN_TMAP_MAGIC 0x504d544bu /* "KTMP" */
#define KILN_TMAP_RANK_MAX 5

/* CUtensorMapSwizzle's values: the 16-byte chunk of a box row XOR the row bits [7, 7+b) of the shared
 * address, b = 1, 2, 3; a box row (box[0] elements) must then fit the swizzle span. */
enum { KILN_TMAP_SWIZZLE_NONE = 0, KILN_TMAP_SWIZZLE_32B = 1, KILN_TMAP_SWIZZLE_64B = 2, KILN_TMAP_SWIZZLE_128B = 3 };

typedef struct kiln_tensor_map {
    uint32_t magic;                            /* KILN_TMAP_MAGIC */
    uint32_t elem_bytes;                       /* 1, 2, 4 or 8 */
    uint32_t rank;                             /* 1..5 */
    uint32_t swizzle;                          /* KILN_TMAP_SWIZZLE_* */
    uint64_t base;                             /* global address, 16-byte aligned */
    uint64_t dims[KILN_TMAP_RANK_MAX];         /* elements along each dimension, innermost first */
    uint64_t strides[KILN_TMAP_RANK_MAX - 1];  /* bytes between dimension i+1's steps (multiples of 16) */
    uint32_t box[KILN_TMAP_RANK_MAX];          /* the box a copy moves, elements (1..256 each) */
    uint32_t oob_nan;                          /* 0: out-of-bounds elements read as zero */
    uint32_t data_type;                        /* CUtensorMapDataType (KILN_TMAP_TYPE_*) */
} kiln_tensor_map;

/* CUtensorMapDataType's values for the element types kiln's kernels use, and their sizes. */
enum { KILN_TMAP_TYPE_UINT8 = 0, KILN_TMAP_TYPE_UINT16 = 1, KILN_TMAP_TYPE_UINT32 = 2, KILN_TMAP_TYPE_INT32 = 3,
       KILN_TMAP_TYPE_UINT64 = 4, KILN_TMAP_TYPE_INT64 = 5, KILN_TMAP_TYPE_FLOAT16 = 6, KILN_TMAP_TYPE_FLOAT32 = 7,
       KILN_TMAP_TYPE_FLOAT64 = 8, KILN_TMAP_TYPE_BFLOAT16 = 9, KILN_TMAP_TYPE_COUNT = 10 };

/* Bytes of one element of a CUtensorMapDataType (0: not one kiln knows). */
static inline uint32_t kiln_tensor_map_type_bytes(uint32_t data_type) {
    static const uint8_t bytes[KILN_TMAP_TYPE_COUNT] = {1, 2, 4, 4, 8, 8, 2, 4, 8, 2};
    return data_type < KILN_TMAP_TYPE_COUNT ? bytes[data_type] : 0;
}

/* Whether m is a map cuTensorMapEncodeTiled accepts (tiled, no interleave, element strides 1), by the
 * rules of the driver API's documentation: rank 1..5; base 16-byte aligned; each dims[i] 1..2^32; each
 * stride a multiple of 16 below 2^40; each box[i] 1..256; the inner box row a multiple of 16 bytes
 * and, under a swizzle, at most its span (32/64/128 bytes). Returns 0, or -1 with why filled
 * (one sentence naming the field and the valid choices). */
static inline int kiln_tensor_map_invalid(const kiln_tensor_map *m, char *why, size_t size) {
    static const unsigned span[4] = {0, 32, 64, 128};
    const uint32_t eb = kiln_tensor_map_type_bytes(m->data_type);
#define KILN_TMAP_BAD(...) return (snprintf(why, size, __VA_ARGS__), -1)
    if (!eb) KILN_TMAP_BAD("element type %u is not a CUtensorMapDataType kiln knows (valid: 0..9)", m->data_type);
    if (m->elem_bytes != eb) KILN_TMAP_BAD("element size %u does not match type %u (%u bytes)", m->elem_bytes, m->data_type, eb);
    if (m->rank < 1 || m->rank > KILN_TMAP_RANK_MAX) KILN_TMAP_BAD("rank %u; valid 1..%d", m->rank, KILN_TMAP_RANK_MAX);
    if (m->swizzle > KILN_TMAP_SWIZZLE_128B) KILN_TMAP_BAD("swizzle %u; valid none, 32, 64 or 128 bytes", m->swizzle);
    if (m->base % 16) KILN_TMAP_BAD("the base address 0x%llx is not 16-byte aligned", (unsigned long long)m->base);
    for (uint32_t i = 0; i < m->rank; i++) {
        if (m->dims[i] < 1 || m->dims[i] > (1ull << 32))
            KILN_TMAP_BAD("dimension %u has %llu elements; valid 1..2^32", i, (unsigned long long)m->dims[i]);
        if (m->box[i] < 1 || m->box[i] > 256) KILN_TMAP_BAD("box dimension %u is %u elements; valid 1..256", i, m->box[i]);
    }
    for (uint32_t i = 1; i < m->rank; i++) {
        uint64_t s = m->strides[i - 1];
        if (s % 16 || s >= (1ull << 40))
            KILN_TMAP_BAD("the stride of dimension %u is %llu bytes; it must be a multiple of 16 below 2^40", i,
                          (unsigned long long)s);
    }
    const uint32_t row = m->box[0] * eb;
    if (row % 16) KILN_TMAP_BAD("the box's inner row is %u bytes; it must be a multiple of 16", row);
    if (m->swizzle && row > span[m->swizzle])
        KILN_TMAP_BAD("the box's inner row is %u bytes, more than the %u-byte swizzle span", row, span[m->swizzle]);
#undef KILN_TMAP_BAD
    return 0;
}

#ifdef __cplusplus
}
#endif

#endif
