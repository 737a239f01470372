/* runtime/rt.h - private header of the runtime (runtime/), grouped by the file defining each part. */
#ifndef KILN_RUNTIME_RT_H
#define KILN_RUNTIME_RT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kiln/runtime.h"
#include "kiln/target.h"

/* ---- rt_driver.c: the CUDA driver, opened with dlopen; its types declared here ---- */
typedef int CUresult;
typedef int CUdevice;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
typedef unsigned long long CUdeviceptr;
typedef struct CUlinkState_st *CUlinkState;

enum { RT_CUDA_SUCCESS = 0, RT_CUDA_ERROR_NO_DEVICE = 100 };
/* Attribute and option numbers from the CUDA Driver API (cuda.h). */
enum {
    RT_ATTR_MAX_THREADS_PER_BLOCK = 1,
    RT_ATTR_MAX_BLOCK_DIM_X = 2,
    RT_ATTR_MAX_GRID_DIM_X = 5,
    RT_ATTR_MAX_SHARED_MEMORY_PER_BLOCK = 8,
    RT_ATTR_MULTIPROCESSOR_COUNT = 16,
    RT_ATTR_CC_MAJOR = 75,
    RT_ATTR_CC_MINOR = 76,
    RT_ATTR_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97,
    RT_FUNC_ATTR_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8,
    RT_JIT_INFO_LOG_BUFFER = 3,
    RT_JIT_INFO_LOG_BUFFER_SIZE_BYTES = 4,
    RT_JIT_ERROR_LOG_BUFFER = 5,
    RT_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6,
    RT_JIT_INPUT_PTX = 1,
};

typedef struct rt_driver {
    void *dl;
    CUresult (*cuInit)(unsigned);
    CUresult (*cuDriverGetVersion)(int *);
    CUresult (*cuDeviceGetCount)(int *);
    CUresult (*cuDeviceGet)(CUdevice *, int);
    CUresult (*cuDeviceGetAttribute)(int *, int, CUdevice);
    CUresult (*cuDeviceGetName)(char *, int, CUdevice);
    CUresult (*cuDeviceTotalMem)(size_t *, CUdevice);
    CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
    CUresult (*cuDevicePrimaryCtxRelease)(CUdevice);
    CUresult (*cuCtxGetCurrent)(CUcontext *);
    CUresult (*cuCtxSetCurrent)(CUcontext);
    CUresult (*cuCtxSynchronize)(void);
    CUresult (*cuModuleLoadDataEx)(CUmodule *, const void *, unsigned, int *, void **);
    CUresult (*cuModuleUnload)(CUmodule);
    CUresult (*cuModuleGetFunction)(CUfunction *, CUmodule, const char *);
    CUresult (*cuFuncSetAttribute)(CUfunction, int, int);
    CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                               unsigned, CUstream, void **, void **);
    CUresult (*cuMemAlloc)(CUdeviceptr *, size_t);
    CUresult (*cuMemFree)(CUdeviceptr);
    CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void *, size_t);
    CUresult (*cuMemcpyDtoH)(void *, CUdeviceptr, size_t);
    CUresult (*cuGetErrorName)(CUresult, const char **);
    CUresult (*cuGetErrorString)(CUresult, const char **);
    /* the linker (optional: NULL when the driver lacks it; then PTX is loaded as it is, and no cubin cached) */
    CUresult (*cuLinkCreate)(unsigned, int *, void **, CUlinkState *);
    CUresult (*cuLinkAddData)(CUlinkState, int, void *, size_t, const char *, unsigned, int *, void **);
    CUresult (*cuLinkComplete)(CUlinkState, void **, size_t *);
    CUresult (*cuLinkDestroy)(CUlinkState);
    /* tensor maps for TMA (optional: CUDA 12.0+ drivers; NULL otherwise, and a launch that needs one says so) */
    CUresult (*cuTensorMapEncodeTiled)(void *, int, unsigned, void *, const unsigned long long *, const unsigned long long *,
                                       const unsigned *, const unsigned *, int, int, int, int);
} rt_driver;

/* Opens $KILN_CUDA_DRIVER or libcuda.so.1 and resolves every entry point (the optional ones when present). */
kiln_status rt_driver_open(rt_driver *d, kiln_error *err);
void rt_driver_close(rt_driver *d);
/* KILN_OK for CUDA_SUCCESS; else KILN_EDRIVER with "CALL failed: NAME (text)[: detail]". */
kiln_status rt_driver_check(const rt_driver *d, CUresult r, const char *call, const char *detail,
                            kiln_error *err);

/* ---- rt_device.c: SM facts table and device queries ---- */
kiln_status rt_device_query(const rt_driver *d, CUdevice dev, int ordinal, kiln_device_info *out,
                            kiln_error *err);

/* ---- rt_hash.c: XXH3-128 (header-only xxhash), canonical big-endian bytes ---- */
void rt_hash128(const void *data, size_t len, uint8_t out[16]);
void rt_hex(const uint8_t *bytes, size_t n, char *out); /* out holds 2n+1 chars */

/* ---- rt_tmap.c: tensor maps through the driver ---- */
/* kiln_tensor_map_encode with `what` (the kernel and parameter) leading its messages. */
kiln_status rt_tmap_encode(kiln_rt *rt, const kiln_tensor_map *m, void *out, const char *what, kiln_error *err);

/* ---- rt_launch.c: the generic launch ---- */
/* The grid of k itself and the workspace bytes of its sequence for these arguments (grid may be NULL). */
kiln_status rt_launch_size(kiln_kernel *k, const kiln_launch_args *a, unsigned grid[3], size_t *bytes, kiln_error *err);

/* runtime/rt_attention.c: the attention helpers' shared pieces. causal's spec value ("false", "true",
 * "top_left"; NULL for a value that is none of KILN_CAUSAL_*). */
const char *rt_attn_causal(int causal);
/* path's spec value ("auto", "mma", "simt", "wgmma"; NULL for a value that is none of KILN_ATTENTION_PATH_*), and
 * the check that names the valid ones (what: the helper). */
const char *rt_attn_path(int path);
kiln_status rt_attn_check_path(const char *what, int path, kiln_error *err);
/* Checks causal and the mask's values; what names the helper ("attention", "attention backward"). */
kiln_status rt_attn_check_mask(const char *what, int causal, const kiln_attention_mask *m, kiln_error *err);
/* Appends the mask's spec words (" window=true softcap=true alibi=true", those that are on). */
void rt_attn_mask_words(const kiln_attention_mask *m, char *buf, size_t size);
/* Appends the mask's launch values: scalars window_left/window_right, softcap, alibi_stride (room for
 * 4 in s) and the tensor alibi_slopes (room for 1 in t); returns how many of each it added. */
void rt_attn_mask_launch(const kiln_attention_mask *m, kiln_launch_tensor *t, int *nt, kiln_launch_scalar *s, int *ns);
/* runtime/rt_attention.c: the forward's spec (with " splitkv=true" when splitkv), every key its canonical form
 * has: the mask's, v_head_dim when it differs, the KV cache's (paged, append, rotary) when a->cache has them. */
void rt_attn_spec(const kiln_attention_args *a, int splitkv, char *buf, size_t size);
/* runtime/rt_attention_bwd.c: the spec of one kernel of the attention backward's sequence (kernel "prep", "dkdv",
 * "convert" or "dq"), with every key the canonical form has; the dense and the varlen helper build it here. */
void rt_attn_bwd_spec(const kiln_attention_bwd_args *a, const char *kernel, char *buf, size_t size);
/* The tile width of the bf16 backward's f16-scaled workspace rows (Q, dO scaled by prep; K, V by the deterministic
 * dkdv: templates/lib/attn_bwd_f16scaled.lua), or 0 where that path does not run (rt_attention_bwd.c). */
size_t rt_attn_bwd_scaled_width(const kiln_attention_bwd_args *a);

/* ---- rt_spec.c: spec text normalization (no templates needed) ---- */
/* "FAMILY  y=bf16 x=bf16" -> "FAMILY x=bf16 y=bf16": family, then key=value pairs sorted
 * by key, single spaces. Fails (KILN_EINVAL) on an empty spec, a token without '=', or a
 * repeated key. */
kiln_status rt_spec_normalize(const char *spec, char *out, size_t size, kiln_error *err);
/* Copies the family (first word) of spec into out. */
void rt_spec_family(const char *spec, char *out, size_t size);

/* ---- rt_bundle.c: bundle file format, reading and lookup ---- */
#define RT_BUNDLE_MAGIC "KILNBDL1"
#define RT_BUNDLE_VERSION 1u

typedef struct rt_bundle_item {
    kiln_bundle_entry pub;
    char *spec;      /* canonical spec as stored */
    char *norm;      /* normalized, for matching */
    kiln_kernel_meta meta;
} rt_bundle_item;

struct kiln_bundle {
    const uint8_t *data;
    size_t size;
    void *owned;     /* file contents we allocated, else NULL */
    char *producer;
    char *name;      /* file path or "memory" */
    int count;
    rt_bundle_item *items;
};

/* The entry to load on an sm_<device_sm> device whose driver is CUDA driver_version (0: unknown): a cubin for
 * exactly that SM, else the PTX of the highest SM not above it that the driver can load. *refused (when not
 * NULL) gets the best PTX entry skipped only because the driver is too old for its .version. */
const rt_bundle_item *rt_bundle_find(const kiln_bundle *b, const char *norm, int device_sm, int driver_version,
                                     const rt_bundle_item **refused);
/* rt_ptxver.c: whether a CUDA driver of driver_version (0: unknown) loads PTX ISA ptx (times 10). */
int rt_driver_loads_ptx(int driver_version, int ptx);
/* Appends "spec (sm_80 ptx, sm_86 cubin); ..." for each entry of family to buf. */
void rt_bundle_describe_family(const kiln_bundle *b, const char *family, char *buf, size_t size);

/* ---- rt_file.c: output files (devices and FIFOs in place, symlinks followed, files replaced atomically) ---- */
typedef struct rt_piece {
    const void *data;
    size_t len;
} rt_piece;
typedef enum rt_output_kind { RT_OUT_ERROR = -1, RT_OUT_REPLACE, RT_OUT_IN_PLACE } rt_output_kind;
/* How path would be written: RT_OUT_REPLACE (final = the regular file or new name after following
 * symlinks), RT_OUT_IN_PLACE (a device, FIFO or socket), RT_OUT_ERROR with errno (EISDIR, ELOOP, ...). */
rt_output_kind rt_output_resolve(const char *path, char *final, size_t size);
/* Writes the pieces to path as above (fsync before the rename when sync); 0, or -1 with errno. */
int rt_write_pieces(const char *path, const rt_piece *pieces, int n, bool sync);
/* Writes the pieces to a new file of mode 0600 beside path, fsyncs it and renames it over path (a
 * symlink, FIFO or device there is replaced, never followed or opened); 0, or -1 with errno. */
int rt_write_private(const char *path, const rt_piece *pieces, int n);

/* ---- rt_disk.c: the disk cache ---- */
/* What an entry holds: kiln's PTX (<key>.kcache) or the cubin the driver compiled from it (<key>.kcubin). */
typedef enum rt_entry_kind { RT_ENTRY_PTX, RT_ENTRY_CUBIN } rt_entry_kind;

typedef struct rt_disk {
    char dir[1024];
    bool enabled;
} rt_disk;

typedef enum { RT_DISK_HIT, RT_DISK_MISS, RT_DISK_BAD } rt_disk_result;

/* Resolves the directory from options and environment and checks it is writable; on failure
 * the cache is disabled and *warning says why. */
void rt_disk_init(rt_disk *c, const char *dir_option, bool disabled, char *warning, size_t wsize);
/* Reads the entry of kind for key; checks owner, mode, magic, version, key, spec and checksum. A bad
 * entry is removed and RT_DISK_BAD returned. On a hit *text is malloc'd (NUL-terminated). */
rt_disk_result rt_disk_read(const rt_disk *c, rt_entry_kind kind, const uint8_t key[16], const char *spec,
                            char **text, size_t *len);
/* Writes atomically (0600 temp file, fsync, rename). Returns 0, or -1 with errno set. */
int rt_disk_write(const rt_disk *c, rt_entry_kind kind, const uint8_t key[16], const char *spec, const void *text,
                  size_t len);
/* The path of the entry of kind for key (for tests and messages). */
void rt_disk_path(const rt_disk *c, rt_entry_kind kind, const uint8_t key[16], char *out, size_t size);
/* 1 when the size bytes at b are a sound PTX entry for key and spec (magic, version, key, spec,
 * lengths, checksum); the reader the disk cache and its fuzz target use. */
int rt_disk_entry_ok(const uint8_t *b, size_t size, const uint8_t key[16], const char *spec);

/* ---- rt_runtime.c: the kiln_rt object ---- */
typedef struct rt_entry rt_entry; /* memory-cache slot, defined in rt_kernel.c */

struct kiln_kernel {
    kiln_rt *rt;
    CUmodule module;
    CUfunction func;
    kiln_kernel_meta meta;
    kiln_payload_kind kind;
    const char *origin;
    kiln_kernel *next; /* all kernels of the runtime, for unloading */
};

#define RT_BUCKETS 256

struct kiln_rt {
    rt_driver drv;
    CUdevice dev;
    CUcontext ctx;
    kiln_device_info info;
    rt_disk disk;
    atomic_int disk_off; /* set when a write failed: memory-only from then on */
    kiln_warning_fn on_warning;
    void *warning_user;

    pthread_mutex_t lock; /* guards everything below */
    pthread_cond_t done;  /* broadcast when an entry leaves the pending state */
    rt_entry *buckets[RT_BUCKETS];
    kiln_kernel *kernels;
    kiln_bundle **bundles;
    int nbundles;
    kiln_prepare *prepares; /* background prepares not finished yet (rt_prepare.c) */
    kiln_rt_stats stats;
    int nwarnings;
    char first_warning[512];
};

/* Reports a warning through the callback and records it (thread-safe). */
void rt_warn(kiln_rt *rt, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Makes the runtime's context current on the calling thread. */
kiln_status rt_bind(kiln_rt *rt, kiln_error *err);
/* The registered generator, or NULL. */
const kiln_rt_generator *rt_generator(void);

/* ---- rt_cubin.c: PTX compiled by the driver's linker into a cubin, and that cubin's cache key ---- */
/* Whether PTX is compiled through the driver's linker (and its cubin cached when the disk cache is on):
 * the driver has the linker and $KILN_DRIVER_LINK is not 0. */
bool rt_link_usable(const kiln_rt *rt);
/* The disk-cache key of the cubin compiled from ptx for this device: XXH3-128 over the runtime's
 * version, the spec, the device's compute capability, the driver version and the PTX bytes. */
void rt_cubin_key(const kiln_rt *rt, const char *spec, const void *ptx, size_t size, uint8_t out[16]);
/* Compiles ptx with a link state of its own (so threads compile side by side). On KILN_OK *cubin and
 * *len point into *state, which the caller ends with drv.cuLinkDestroy. what names the module in errors. */
kiln_status rt_cubin_link(kiln_rt *rt, const void *ptx, size_t size, const char *what, CUlinkState *state,
                          void **cubin, size_t *len, kiln_error *err);

/* ---- rt_prepare.c: background prepares ---- */
/* Waits for and frees every background prepare of rt not finished yet (kiln_rt_destroy). */
void rt_prepares_finish(kiln_rt *rt);

/* ---- rt_kernel.c: memory cache, lookup order, module loading, launches ---- */
void rt_kernels_free(kiln_rt *rt); /* unloads every module and frees the cache */

#endif
