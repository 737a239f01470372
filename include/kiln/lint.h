/* kiln/lint.h - finds architecture problems in PTX text (any compiler's) before ptxas or the driver do. */
#ifndef KILN_LINT_H
#define KILN_LINT_H

#include <stddef.h>

#include "kiln/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What a finding is about. */
typedef enum kiln_lint_kind {
    KILN_LINT_TARGET,  /* an instruction or modifier needs a newer SM than the module's .target */
    KILN_LINT_ARCH,    /* it needs an arch-specific target (e.g. sm_90a) the module does not declare */
    KILN_LINT_ISA,     /* it needs a newer PTX ISA than the module's .version */
    KILN_LINT_VERSION, /* the .version is too old for the .target */
    KILN_LINT_DECL,    /* an illegal declaration, e.g. `.reg .bf16` (bf16 lives in .b16/.b32) */
    KILN_LINT_SYNC,    /* shfl/vote without .sync on sm_70 and newer */
    KILN_LINT_DEVICE,  /* with a device SM: the module cannot run there, or this line needs more */
    KILN_LINT_TEXT,    /* a byte ptxas refuses: the first non-ASCII character (a UTF-8 BOM, an accent in a comment) */
    KILN_LINT_CUDA     /* with a CUDA release: its driver/ptxas does not know the .version or the .target */
} kiln_lint_kind;

typedef struct kiln_lint_finding {
    kiln_lint_kind kind;
    int warning;           /* 1: ptxas accepts it, but it is unreliable (e.g. shfl without .sync, PTX < 6.4) */
    int line;              /* 1-based line of the statement in the input */
    char instruction[256]; /* the statement as written (whitespace collapsed, comments dropped, cut to fit) */
    char feature[64];      /* what needs it, e.g. "cvt.bf16.f32", ".bf16", "wgmma", ".version 6.5" */
    int need_sm;           /* SM the line needs (80 for sm_80), 0 when not an SM matter */
    int need_arch;         /* 1: exactly the arch-specific target sm_<need_sm>a */
    int need_ptx;          /* PTX ISA it needs, times 10 (70 for 7.0), 0 when not a PTX matter */
    int module_sm;         /* the module's governing .target (highest), e.g. 75 */
    int module_ptx;        /* the module's .version, times 10 */
    int device_sm;         /* the device SM asked about, 0 for none */
    char message[512];     /* one line: what is wrong and what would fix it */
} kiln_lint_finding;

/* What the reader saw in the module. */
typedef struct kiln_lint_module {
    char target[32];     /* governing .target as written, e.g. "sm_90a" */
    int sm;              /* its SM number, e.g. 90 */
    int arch_specific;   /* 1 for an "a" target (runs only on exactly that SM) */
    int family_specific; /* 1 for an "f" target (runs on newer SMs of the same family) */
    int ptx;             /* .version times 10 */
    int target_line, version_line;
    size_t instructions; /* instructions seen */
    size_t functions;    /* .entry and .func definitions (with a body) */
    int device_sm;       /* the device SM asked about, 0 for none */
    int runs_on_device;  /* with a device SM: 1 when the driver can load the module there, else 0 (also 0 when
                            a line has an error ptxas refuses: the driver's JIT refuses it too) */
    size_t dropped;      /* findings past the first 10000: counted, not kept */
    int cuda;            /* the CUDA release asked about (12040 for 12.4), 0 for none */
    int cuda_loads;      /* with a release: 1 when its driver accepts the .version and .target and no line has
                            an error ptxas refuses, else 0 */
} kiln_lint_module;

typedef struct kiln_lint_report kiln_lint_report; /* opaque */

/* Lints len bytes of PTX text. device_sm is 0, or the SM of a device to check the module against
 * (can it run there, and which lines need more than that SM). A PTX problem is a finding, not a
 * failure: KILN_OK with findings. Fails with KILN_EINVAL for input that is not PTX text (empty,
 * binary, no .version or .target) or an unknown device_sm, KILN_ENOMEM when out of memory.
 * Findings come sorted by line. Needs no LLVM. */
kiln_status kiln_lint(const char *ptx, size_t len, int device_sm, kiln_lint_report **out, kiln_error *err);
/* kiln_lint, and with cuda (a CUDA release as cuDriverGetVersion reports it, 12040 for 12.4; 0 for none)
 * also what that release refuses: a .version newer than its driver and ptxas accept, a .target it does not
 * know (KILN_LINT_CUDA errors), and a .target its ptxas no longer compiles for (a warning: its driver still
 * JIT-compiles such PTX for a newer device). An unknown release is KILN_EINVAL (see kiln_cuda_parse_version). */
kiln_status kiln_lint_cuda(const char *ptx, size_t len, int device_sm, int cuda, kiln_lint_report **out,
                           kiln_error *err);
size_t kiln_lint_count(const kiln_lint_report *r);
const kiln_lint_finding *kiln_lint_get(const kiln_lint_report *r, size_t i); /* NULL when out of range */
const kiln_lint_module *kiln_lint_module_info(const kiln_lint_report *r);
void kiln_lint_free(kiln_lint_report *r);

/* Parses a device SM written as "sm_86", "86" or "8.6" and checks that lint knows it; on failure
 * the message lists the valid SMs. */
kiln_status kiln_lint_parse_sm(const char *text, int *sm, kiln_error *err);
/* Short name of a kind: "target", "arch", "isa", "version", "decl", "sync", "device". */
const char *kiln_lint_kind_name(kiln_lint_kind k);

#ifdef __cplusplus
}
#endif
#endif
