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

/* ---- binaries: cubins, fatbins, and ELF objects / shared libraries / executables that embed them
 * (gen/gen_lint_bin.c) ---- */

typedef enum kiln_lint_image_kind {
    KILN_IMAGE_CUBIN, /* SASS for one SM (an ELF of machine EM_CUDA) */
    KILN_IMAGE_PTX,   /* PTX the driver JIT-compiles for SMs at or above its .target */
    KILN_IMAGE_LTOIR, /* NVVM IR for link-time optimization: nvlink/nvJitLink input, never loaded as is */
    KILN_IMAGE_OTHER  /* a fatbin entry kind kiln does not know */
} kiln_lint_image_kind;

/* One code image of a binary. */
typedef struct kiln_lint_image {
    kiln_lint_image_kind kind;
    char target[16];     /* "sm_90a" (a cubin's SM, a PTX's .target) */
    int sm;              /* its SM number, 90 for sm_90a */
    char suffix;         /* 0, 'a' (runs only on exactly that SM) or 'f' (on that SM's family) */
    int ptx;             /* PTX: .version times 10; 0 for other kinds */
    size_t container;    /* 0-based fatbin container it came from (one per nvcc translation unit) */
    size_t offset, size; /* its bytes in the input (compressed when compressed) */
    char compression[8]; /* "", "zstd" (CUDA 12.8+ nvcc) or "lz4" (older nvcc; kiln does not inflate it) */
    int runs_on_device;  /* with a device SM: 1 when the driver can load it there, else 0 */
    int cuda_loads;      /* with a CUDA release: 1 when that driver accepts it, else 0 */
    size_t findings;     /* PTX: findings of the PTX lint over its text (kiln_lint_bin_ptx) */
    long functions;      /* code in it: a cubin's .text sections, a PTX's .entry/.func bodies; -1 unknown
                            (a container whose images all have none, like nvlink's device-link stub, is
                            never loaded for a kernel and is not judged) */
    char note[256];      /* why it cannot run or load there, or what lint could not check; "" when none */
} kiln_lint_image;

/* What lint saw in the binary as a whole. */
typedef struct kiln_lint_binary {
    char format[16];    /* "cubin", "fatbin" or "elf" (a host object, shared library or executable) */
    size_t containers;  /* fatbin containers (a cubin counts as one) */
    size_t images;
    int device_sm;      /* the device SM asked about, 0 for none */
    int cuda;           /* the CUDA release asked about (12040), 0 for none */
    int runs_on_device; /* with a device SM: 1 when every container has an image that device (and that
                           driver, with a release) can run: no "no kernel image is available" */
    int cuda_loads;     /* with a release: 1 when every container has an image its driver accepts */
    char verdict[768];  /* with a device or release: one line saying which image would run, or why none */
} kiln_lint_binary;

typedef struct kiln_lint_bin_report kiln_lint_bin_report; /* opaque */

/* 1 when data starts like a binary kiln_lint_bin reads (a whole ELF or fatbin header), else 0. */
int kiln_lint_is_binary(const void *data, size_t len);
/* Lists the code images of a cubin, a fatbin, or an ELF object / shared library / executable that embeds
 * fatbins (.nv_fatbin, __nv_relfatbin), and lints each PTX image (kiln_lint). With device_sm (0: none)
 * and/or cuda (a release as 12040, 0: none) it says whether that device and driver can run it: a cubin runs
 * on its own major with an equal or higher minor ('a': that SM only), PTX on an SM at or above its .target
 * when the driver accepts its .version. A container with no image for them is a KILN_LINT_DEVICE error
 * ("no kernel image is available for execution on the device", with the reason and the -gencode or driver
 * update that fixes it); an image the driver refuses is a KILN_LINT_CUDA finding. Fails with KILN_EINVAL
 * for input that is not such a binary or an unknown device_sm / cuda, KILN_ECORRUPT for a malformed or
 * truncated one (the message names the offset), KILN_ENOMEM when out of memory. Needs no LLVM. */
kiln_status kiln_lint_bin(const void *data, size_t len, int device_sm, int cuda, kiln_lint_bin_report **out,
                          kiln_error *err);
const kiln_lint_binary *kiln_lint_bin_info(const kiln_lint_bin_report *r);
size_t kiln_lint_bin_count(const kiln_lint_bin_report *r);                       /* images */
const kiln_lint_image *kiln_lint_bin_image(const kiln_lint_bin_report *r, size_t i); /* NULL out of range */
/* The PTX lint of image i (a PTX image whose text lint could read), else NULL; owned by r. */
const kiln_lint_report *kiln_lint_bin_ptx(const kiln_lint_bin_report *r, size_t i);
/* The binary's own findings (device and driver; line is 0, instruction names the image or container). */
size_t kiln_lint_bin_findings(const kiln_lint_bin_report *r);
const kiln_lint_finding *kiln_lint_bin_finding(const kiln_lint_bin_report *r, size_t i);
void kiln_lint_bin_free(kiln_lint_bin_report *r);

#ifdef __cplusplus
}
#endif
#endif
