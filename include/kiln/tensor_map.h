/* kiln/tensor_map.h - the 128-byte tensor map (CUtensorMap) as kiln records it where no driver encodes
 * it: the emulator reads this layout (emu/emu_tma.c) and the fake driver is to write it from
 * cuTensorMapEncodeTiled's arguments (docs/hopper.md). A real driver's map is opaque; kiln never reads one. */
#ifndef KILN_TENSOR_MAP_H
#define KILN_TENSOR_MAP_H

#include <stdint.h>
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
    uint32_t reserved;
} kiln_tensor_map;

#ifdef __cplusplus
}
#endif

#endif
