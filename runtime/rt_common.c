/* runtime/rt_common.c - dtype names, status names and error filling shared by all of kiln. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "kiln/common.h"

static const struct {
    const char *name, *alias;
    size_t size;
} dtype_table[KILN_I32 + 1] = {
    [KILN_F32] = {"f32", "float32", 4},
    [KILN_F16] = {"f16", "float16", 2},
    [KILN_BF16] = {"bf16", "bfloat16", 2},
    [KILN_I32] = {"i32", "int32", 4},
};

const char *kiln_dtype_name(kiln_dtype t) {
    return (unsigned)t <= KILN_I32 ? dtype_table[t].name : NULL;
}

/* Parses one of the first n element types. */
static int parse_first(const char *name, int n, kiln_dtype *out) {
    for (int i = 0; name && i < n; i++) {
        if (strcasecmp(name, dtype_table[i].name) == 0 || strcasecmp(name, dtype_table[i].alias) == 0) {
            *out = (kiln_dtype)i;
            return 0;
        }
    }
    return -1;
}

int kiln_dtype_parse(const char *name, kiln_dtype *out) { return parse_first(name, KILN_DTYPE_COUNT, out); }

int kiln_elem_parse(const char *name, kiln_dtype *out) { return parse_first(name, KILN_I32 + 1, out); }

size_t kiln_dtype_size(kiln_dtype t) {
    return (unsigned)t <= KILN_I32 ? dtype_table[t].size : 0;
}

const char *kiln_status_name(kiln_status s) {
    static const char *names[] = {
        "KILN_OK",       "KILN_EINVAL",    "KILN_ENOTFOUND", "KILN_EGEN",
        "KILN_EIO",      "KILN_ECORRUPT",  "KILN_ENODRIVER", "KILN_ENODEVICE",
        "KILN_EDRIVER",  "KILN_ENOMEM",    "KILN_EEMU",
    };
    return (unsigned)s < sizeof names / sizeof names[0] ? names[s] : "KILN_E?";
}

kiln_status kiln_fail(kiln_error *err, kiln_status status, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        err->status = status;
    }
    return status;
}
