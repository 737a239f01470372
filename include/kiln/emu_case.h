/* kiln/emu_case.h - the family registry's float64 side: reference descriptors, and one case runner and checker. */
#ifndef KILN_EMU_CASE_H
#define KILN_EMU_CASE_H

#include "kiln/emu.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * A case is one kernel family on one problem: the kernels its launch runs (the spec's kernel and
 * the sequence its metadata names), host tensors standing in for device memory (each ending at a
 * guard page, each declared to the emulator so a read past it fails), inputs drawn from a seeded
 * generator, the float64 reference, and the error model that turns both into a verdict per output.
 *
 * What is family-specific lives in the family's reference, templates/<family>.ref.c, which exports
 * one kiln_ref_family descriptor; the build collects every templates/<family>.ref.c into the registry.
 * Everything else - finding the reference, binding the kernel's parameters by name, the grid, the
 * launch sequence, poisoning outputs, comparing values and reporting - is this file's runner, used
 * by `kiln run`, the emulator tests, the GPU kit and kiln.emulate alike (docs/registry.md).
 */

/* What a caller asks for. Sizes are named (the CLI's options: "rows", "hidden", "seq_k", "batch",
 * "heads_q", "heads_kv", "splits"; attention's mask keys "window_left", "window_right", "softcap",
 * "alibi"; and for the emulator tests: attention's "softmax_scale" (0: 1/sqrt(head_dim)), "bhsd"
 * (1: q, k, v, o laid out [batch, heads, seq, head_dim], passed as the tensors' strides),
 * "alibi_batch" (1: a row of slopes per batch entry), "p_f32" (1: the error model of a kernel that keeps P
 * (the backward: and dS) in f32, the SIMT path) and the forward's "p_f16" (1: P rounded to f16, sm_75's
 * f16-scaled bf16 path), the varlen backward's "wide_vdo" (E: V and dO drawn as +-2^e, e uniform in [-E, E]); the norms' "eps" (as given, 0 included; opts.eps 0 means the default)); a family reads the ones its problem has and
 * says which it needs. A value is a double (whole sizes exact up to 2^53; softcap is a real).
 * Zero-initialize, then set what you need. */
#define KILN_CASE_MAX_SIZES 16
typedef struct kiln_case_opts {
    int sm;
    uint64_t seed;
    kiln_ln_input input; /* kiln_ln_input_parse: random, large-mean, constant, special, mixed */
    float eps;      /* 0: the family's default */
    double scale;   /* multiplies the drawn activations (norms: 1e30 exercises overflow-safe statistics;
                     * attention and its backward: q and k, for large scores); 0: 1 */
    int twice;      /* run every block twice, threads in opposite orders (races) */
    int sm_count;   /* the device's multiprocessors, for grid rules that use them (a norm backward's grid
                     * walks the rows with a few blocks per SM); 0: as many as the problem fills */
    int nsizes;
    struct {
        char name[24];
        double value;
    } sizes[KILN_CASE_MAX_SIZES];
    /* varlen attention (kiln run --varlen, --varlen-k, --seqused-k): nvarlen sequences' query lengths,
     * key lengths (NULL: the same) and the keys each uses (seqused_k; NULL: all); read by create only */
    int nvarlen;
    const int *varlen_q, *varlen_k, *seqused_k;
    int race;       /* check shared memory for races by happens-before (kiln_emu_launch.race) */
} kiln_case_opts;
/* Sets (or replaces) size `name`. */
void kiln_case_opts_set(kiln_case_opts *o, const char *name, double value);
/* Size `name` (truncated to a whole number), or def when it was not given. */
long long kiln_case_opts_get(const kiln_case_opts *o, const char *name, long long def);
/* Value `name` as given, or def when it was not given. */
double kiln_case_opts_real(const kiln_case_opts *o, const char *name, double def);
/* Whether `name` was given. */
int kiln_case_opts_has(const kiln_case_opts *o, const char *name);

/* One checked output: the largest errors against the float64 reference and how close the worst
 * value came to its tolerance. */
typedef struct kiln_case_output {
    char name[KILN_NAME_MAX];
    int show_rel;     /* max_rel is measured for this output */
    double max_abs;   /* largest |kernel - reference| over finite values */
    double max_rel;   /* largest |kernel - reference| / |reference| (reference != 0) */
    double worst;     /* largest error / tolerance over finite values; above 1 fails */
    long bad;         /* values out of tolerance, never written, or with the wrong NaN/Inf */
    char first[256];  /* the first bad value, described */
} kiln_case_output;

/* The checker: records one value of output o. ok when want is NaN and got is NaN, want is +-Inf and
 * got equals it, or both are finite and |got - want| <= tol; unwritten (still the poison) is bad.
 * ref is the pure float64 reference (want may be a model's tighter target around the kernel's own
 * intermediate values); max_abs/max_rel measure against ref. fmt/... name the value (e.g.
 * "y[%d][%ld]"), formatted only for the first bad one. Returns 1 when bad. */
int kiln_check_value(kiln_case_output *o, double got, double want, double tol, double ref, int unwritten,
                     const char *fmt, ...);

typedef struct kiln_case kiln_case;

/* One kernel launch of a case's sequence (the kernel's "// kiln.meta" launch description: before,
 * the kernel, after), with the grid its problem rule gave, timed by the runner. */
#define KILN_CASE_MAX_STEPS 8
typedef struct kiln_case_step {
    kiln_emu_kernel *kernel;
    unsigned grid[3];
    double ms; /* wall-clock time of the emulated launch */
} kiln_case_step;

/*
 * A family's reference. Only `family` and the functions are required; the case's own state
 * (kiln_case_state) holds whatever the family allocates.
 */
typedef struct kiln_ref_family {
    const char *family;  /* the template it checks */
    const char *noun;    /* what the verdict counts: "output" (NULL) or "gradient" */
    /* Reads the problem from the options and the kernel's resolved spec, allocates the tensors,
     * draws the inputs and computes the float64 reference. Bad sizes: KILN_EINVAL naming them. */
    kiln_status (*create)(kiln_case *c, kiln_error *err);
    void (*destroy)(kiln_case *c);
    /* The buffer behind tensor `name` of the kernels' launch description and its size in bytes (NULL,
     * 0: an absent optional tensor); -1 when the family has no tensor of that name. Workspace tensors
     * are the runner's (carved from one buffer as the runtime carves them, poisoned). */
    int (*tensor)(kiln_case *c, const char *name, void **ptr, size_t *bytes);
    /* The value of a declared scalar; -1 leaves it to the description's default. */
    int (*scalar)(kiln_case *c, const char *name, double *value);
    /* Before the run: poisons the outputs (0xff bytes, NaN in every float type). */
    void (*prepare)(kiln_case *c);
    /* After the run: compares every output (kiln_check_value); fills out[0..*nout). */
    void (*check)(kiln_case *c, kiln_case_output *out, int *nout);
    /* The problem in words for a report header ("8 rows x 4096  random inputs"). */
    void (*describe)(const kiln_case *c, char *buf, size_t size);
    /* Optional: the float64 reference of output `name`, one value per element of its tensor (the GPU
     * kit's case files carry it); NULL when the family has none for that name. */
    const double *(*reference)(kiln_case *c, const char *name);
    /* Optional: recomputes the float64 reference, and whatever input the family derives from others
     * (a norm backward's saved statistics), from the inputs as they are now: a caller wrote special
     * values after the draw (kiln_case_set). Returns the reference's error (err says why). */
    kiln_status (*refresh)(kiln_case *c, kiln_error *err);
    /* Optional: why this problem's check is weak, in words (buf "" when it is not): e.g. every
     * attention row fully masked, where the kernel's zeros match the reference's zeros whatever the
     * mask code does. kiln run prints it as a NOTE line. (Last, so the members before it keep their
     * offsets.) */
    void (*note)(const kiln_case *c, char *buf, size_t size);
} kiln_ref_family;

/* The registry: every family with a reference, in name order. */
int kiln_ref_count(void);
const kiln_ref_family *kiln_ref_at(int i);
const kiln_ref_family *kiln_ref_find(const char *family);
/* The registered families, comma-separated, for messages. */
const char *kiln_ref_names(void);

/* Generates spec for opts->sm, finds its family's reference and builds the case (inputs and
 * reference). gen and emu stay the caller's and must outlive the case. */
kiln_status kiln_case_create(kiln_case **out, kiln_gen *gen, kiln_emu *emu, const char *spec,
                             const kiln_case_opts *opts, kiln_error *err);
void kiln_case_free(kiln_case *c);
/* The same kernels on another problem: the family's state is dropped and built again from opts
 * (inputs and reference), the loaded sequence kept (generating and loading a kernel costs more than a
 * small emulated run). opts->sm must be the case's. */
kiln_status kiln_case_reset(kiln_case *c, const kiln_case_opts *opts, kiln_error *err);
/* Binds the sequence the kernel's launch description declares (kiln_launch_bind: grids, tensors and
 * scalars by name, the workspace) and runs it on the emulator. */
kiln_status kiln_case_run(kiln_case *c, kiln_error *err);
/* Checks every output; returns the number of bad values. */
long kiln_case_check(kiln_case *c);

int kiln_case_noutputs(const kiln_case *c);
const kiln_case_output *kiln_case_output_at(const kiln_case *c, int i);
int kiln_case_nsteps(const kiln_case *c);
const kiln_case_step *kiln_case_step_at(const kiln_case *c, int i);
const kiln_ref_family *kiln_case_family(const kiln_case *c);
/* What the verdict counts: "output", or the family's own noun ("gradient"). */
const char *kiln_case_noun(const kiln_case *c);
const kiln_case_opts *kiln_case_options(const kiln_case *c);
/* The kernel the spec named (its meta; --profile reads its counters). */
kiln_emu_kernel *kiln_case_kernel(const kiln_case *c);
void kiln_case_describe(const kiln_case *c, char *buf, size_t size);
/* Why the case's check is weak (the family's note hook), or "" when it is not or the family says nothing. */
void kiln_case_note(const kiln_case *c, char *buf, size_t size);
/* The case's buffer behind tensor `name` (an input as drawn, an output as the run left it) and its
 * bytes; -1 when the family has no tensor of that name. */
int kiln_case_tensor(kiln_case *c, const char *name, void **ptr, size_t *bytes);
/* The float64 reference of output `name` (the family's reference hook), or NULL. */
const double *kiln_case_reference(kiln_case *c, const char *name);

/* ---- special inputs, launches and bits (any family) ---- */
/* Element i of tensor `name` (an input as drawn or written, an output as the run left it), read in
 * and written in the dtype the sequence's kernels declare for it; a name no kernel takes, an absent
 * optional tensor or i past its end: KILN_EINVAL naming it (get: NaN). Writing inputs after the draw
 * (constant rows, large offsets, values near the dtype's maximum, NaN/Inf) then kiln_case_refresh
 * gives the reference of those inputs. */
kiln_status kiln_case_set(kiln_case *c, const char *name, size_t i, double value, kiln_error *err);
double kiln_case_get(kiln_case *c, const char *name, size_t i);
/* The tensor's elements (0 when the case has no such tensor). */
size_t kiln_case_count(kiln_case *c, const char *name);
/* The family's refresh hook: the reference of the inputs as they are now; KILN_EINVAL when the
 * family has none, the reference's error when it fails. */
kiln_status kiln_case_refresh(kiln_case *c, kiln_error *err);
/* How the next runs launch, the problem left as it is: sm_count (the device's multiprocessors, for
 * grid rules that use them: a norm backward's blocks) and twice. */
void kiln_case_set_launch(kiln_case *c, int sm_count, int twice);
/* The bytes of every output tensor the sequence declares (role out or inout, present), taken after
 * a run; kiln_case_bits_same compares c's outputs now with them: 1 when every byte is equal, else 0
 * with the first output that differs named in `which` (same spec on several SMs, or a rerun). */
typedef struct kiln_case_bits kiln_case_bits;
kiln_case_bits *kiln_case_bits_take(kiln_case *c);
int kiln_case_bits_same(kiln_case *c, const kiln_case_bits *b, char *which, size_t size);
void kiln_case_bits_free(kiln_case_bits *b);

/* ---- for the references (templates/<family>.ref.c) ---- */
/* The family's own state (set by create, freed by destroy). */
void *kiln_case_state(const kiln_case *c);
void kiln_case_set_state(kiln_case *c, void *state);
/* The value of key in the kernel's resolved (canonical) spec: the generator's reading of it. */
const char *kiln_case_spec_value(const kiln_case *c, const char *key);

#ifdef __cplusplus
}
#endif
#endif
