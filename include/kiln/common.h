/* kiln/common.h - status codes, error messages and dtypes shared by every kiln library. */
#ifndef KILN_COMMON_H
#define KILN_COMMON_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KILN_VERSION_STRING "0.1.0"

/* Every fallible kiln call returns one of these and, on failure, fills a kiln_error. */
typedef enum kiln_status {
    KILN_OK = 0,
    KILN_EINVAL,    /* bad argument or spec: the message names it and the valid choices */
    KILN_ENOTFOUND, /* no such family, kernel, file or bundle entry */
    KILN_EGEN,      /* the generator failed (template error, LLVM verification, codegen) */
    KILN_EIO,       /* a file could not be read or written */
    KILN_ECORRUPT,  /* a cache entry, bundle or metadata block failed its checks */
    KILN_ENODRIVER, /* no CUDA driver could be opened */
    KILN_ENODEVICE, /* the driver reports no usable device */
    KILN_EDRIVER,   /* a CUDA driver call failed: the message has its name and text */
    KILN_ENOMEM,    /* host allocation failed */
    KILN_EEMU       /* the CPU emulator found a fault (divergent barrier, bad launch, race) */
} kiln_status;

/* One human-readable line; filled by the callee on failure, never printed by kiln. */
typedef struct kiln_error {
    kiln_status status;
    char msg[1024];
} kiln_error;

/* Element types a kernel may read or write. The first KILN_DTYPE_COUNT are the float dtypes (the
 * values of a spec's dtype keys); KILN_I32 is for index tensors only (cu_seqlens, per-sequence
 * position offsets), which only a kernel's pointer parameters carry. */
typedef enum kiln_dtype {
    KILN_F32 = 0,
    KILN_F16 = 1,
    KILN_BF16 = 2,
    KILN_DTYPE_COUNT = 3,
    KILN_I32 = KILN_DTYPE_COUNT
} kiln_dtype;

/* "f32", "f16", "bf16", "i32"; NULL for an out-of-range value. */
const char *kiln_dtype_name(kiln_dtype t);
/* Parses a float dtype, "f32"/"f16"/"bf16" (also "float32", "float16", "bfloat16"); returns 0 on success. */
int kiln_dtype_parse(const char *name, kiln_dtype *out);
/* Parses any element type: a float dtype or "i32" (also "int32"); returns 0 on success. */
int kiln_elem_parse(const char *name, kiln_dtype *out);
/* Bytes per element. */
size_t kiln_dtype_size(kiln_dtype t);

/* Short name of a status, e.g. "KILN_EINVAL". */
const char *kiln_status_name(kiln_status s);

/* Fills err (when non-NULL) with a formatted message and returns status; for library code. */
kiln_status kiln_fail(kiln_error *err, kiln_status status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* Writes len bytes to path the way every kiln output is written: a device, FIFO or socket is written
 * in place (never replaced, even as root), a symlink is followed and its target written, a regular
 * file is replaced atomically (temporary file + rename, keeping its permissions). */
kiln_status kiln_write_file(const char *path, const void *data, size_t len, kiln_error *err);

#ifdef __cplusplus
}
#endif
#endif
