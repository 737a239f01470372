/* bench/gpu/kit.h - shared header of the GPU check kit: check cases, comparison, launch adapters. */
#ifndef KILN_BENCH_GPU_KIT_H
#define KILN_BENCH_GPU_KIT_H

#include <stddef.h>
#include <stdint.h>

#include "kiln/runtime.h"

/* The norm families beyond LayerNorm forward (RMSNorm, backwards, residual forms) are checked when
 * the tree has them (their cases come with the registry's case runner). */
#if defined(__has_include)
#if __has_include("kiln/emu_case.h")
#define KIT_HAVE_NORM 1
#endif
#endif

/*
 * A check case is one kernel on one problem: its canonical spec, the named scalars and tensors
 * its launch needs (named as the kernel's parameters in its "// kiln.meta" block), the inputs,
 * and for every output the emulator's result (the same module for the SM the emulator ran) and
 * the float64 reference. The generator side (kit_gen.c, static libkiln) writes case files; the
 * AOT check (kit_check.c, libkiln_rt only) and the JIT check read them, launch on the GPU
 * through the runtime's launch helpers (kit_launch.c) and compare (kit_case.c).
 */
enum { KIT_MAX_TENSORS = 16, KIT_MAX_SCALARS = 32, KIT_NAME = 48, KIT_MAX_STEPS = 8 };

typedef enum kit_role { KIT_IN = 0, KIT_OUT = 1 } kit_role;

typedef struct kit_tensor {
    char name[KIT_NAME];
    kiln_dtype dtype;
    kit_role role;
    size_t count;     /* elements */
    void *data;       /* KIT_IN: the input; KIT_OUT: the emulator's output */
    double *ref;      /* KIT_OUT: float64 reference */
    double tol_ulps;  /* KIT_OUT: largest error allowed, in ulps of dtype at max(|ref|, scale) */
    double scale;     /* KIT_OUT: the output's RMS; errors of smaller values count at this magnitude */
} kit_tensor;

typedef struct kit_scalar {
    char name[KIT_NAME];
    kiln_param_kind kind; /* I32, I64 or F32 */
    double value;
} kit_scalar;

typedef struct kit_case {
    char name[96];               /* e.g. "attention-bf16-d128-causal" */
    char family[KIT_NAME];
    char spec[KILN_SPEC_MAX];    /* canonical spec of the kernel the helper must pick */
    int emu_sm;                  /* SM of the module the emulator ran */
    uint64_t problem[3];         /* grid problem (generic launches) */
    int nscalars, ntensors;
    kit_scalar scalars[KIT_MAX_SCALARS];
    kit_tensor tensors[KIT_MAX_TENSORS];
} kit_case;

/* ---- kit_case.c: case files, comparison ---- */
int kit_case_write(const kit_case *c, const char *path, char *err, size_t errsize);
int kit_case_read(kit_case *c, const char *path, char *err, size_t errsize);
void kit_case_free(kit_case *c);
/* Sorted paths of the *.kcase files in dir (malloc'd array of malloc'd strings); -1 on error. */
int kit_case_list(const char *dir, char ***paths);
const kit_scalar *kit_case_scalar(const kit_case *c, const char *name);
const kit_tensor *kit_case_tensor(const kit_case *c, const char *name);
size_t kit_tensor_bytes(const kit_tensor *t);

/* Element i of an array of dtype t, exactly, as a double. */
double kit_value(kiln_dtype t, const void *base, size_t i);
/* Spacing of dtype t's values at magnitude m (the ulp). */
double kit_ulp(kiln_dtype t, double m);

/* One output compared with the reference and with the emulator. */
typedef struct kit_compare {
    double max_ulps;      /* largest |got - ref| in ulps (see kit_tensor.scale); inf for NaN/Inf mismatches */
    double emu_ulps;      /* the same for the emulator's output */
    long bad;             /* elements beyond tol_ulps, non-finite where ref is finite, or the reverse */
    long diff_emu;        /* elements whose bits differ from the emulator's */
    size_t worst;         /* index of the largest error */
    double worst_got, worst_ref;
} kit_compare;
void kit_compare_output(const kit_tensor *t, const void *got, kit_compare *r);
/* ulps of a value of dtype t against reference ref (see kit_compare.max_ulps). */
double kit_error_ulps(kiln_dtype t, double got, double ref, double scale);

/* ---- kit_launch.c: launching a case through the runtime's generic launch ---- */

/* Device pointers of the case's tensors, by index into c->tensors. */
typedef struct kit_device_args {
    kiln_devptr ptr[KIT_MAX_TENSORS];
    void *stream;
} kit_device_args;

/* Launches the case through kiln_launch: the kernel of c->spec and the sequence its launch
 * description runs (docs/registry.md), the case's tensors and scalars by name, the workspace
 * allocated here. *picked (may be NULL) receives the case's kernel. */
kiln_status kit_launch(kiln_rt *rt, const kit_case *c, const kit_device_args *a, kiln_kernel **picked,
                       kiln_error *err);
/* The by-name route: the case's kernel alone, its parameters bound from the case's names (a
 * cross-check of the description); a kernel that runs in a sequence is refused. */
kiln_status kit_launch_by_name(kiln_rt *rt, const kit_case *c, const kit_device_args *a, kiln_kernel **picked,
                               kiln_error *err);
/* The number of kernels the case's launch runs (1: the case's kernel alone). */
int kit_case_kernels(kiln_rt *rt, const kit_case *c);

/* Allocates device memory for every tensor, uploads inputs and fills outputs with 0xff bytes
 * (NaN in every float type): an output the kernel does not write stays NaN. */
kiln_status kit_upload(kiln_rt *rt, const kit_case *c, kit_device_args *a, kiln_error *err);
kiln_status kit_poison_outputs(kiln_rt *rt, const kit_case *c, const kit_device_args *a, kiln_error *err);
void kit_free_device(kiln_rt *rt, const kit_case *c, kit_device_args *a);

/* Runs the case once on the GPU (through kit_launch, or kit_launch_by_name when by_name), compares every output, appends a line per output to the CSV
 * (when csv is non-NULL) and prints one summary line. mode names the payload ("cubin sm_90",
 * "ptx sm_75", "jit"). Returns the number of bad elements (0: pass), or -1 when the launch failed. */
#include <stdio.h>
long kit_run_and_compare(kiln_rt *rt, const kit_case *c, const char *mode, int by_name, FILE *csv, int verbose);
/* The CSV header matching kit_run_and_compare's lines. */
extern const char kit_check_csv_header[];

/* ---- kit_bench.c: the speed run (`kiln-gpucheck bench`) ---- */
/* Times the ceilings (device copy, an mma.sync loop), then every family's speed rows through the
 * runtime's helpers; prints a table, writes csv_path (may be NULL). 0, or 2 when the device fails. */
/* arch: the arch bundle (sm_90a wgmma attention) or NULL: its sweep runs on a 9.0 device only. */
int kit_bench(const char *bundle_path, const char *csv_path, int quick, const char *arch);

#endif
