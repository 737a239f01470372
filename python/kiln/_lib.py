"""kiln._lib - finds and loads libkiln_rt / libkiln with ctypes, declares their C types and functions.

Why ctypes (not cffi): it ships with CPython, so the package needs no compiler and no extra
dependency at install or import time; kiln's C API is small, uses plain structs and no
callbacks on hot paths, and ctypes releases the GIL around every foreign call, which is what
lets generation run in parallel threads (one kiln_gen per thread).

Where the libraries come from, first match wins:
  1. $KILN_LIB_DIR
  2. the installed package's own kiln/_lib/ (what `pip install ./python` puts there)
  3. the source tree's lib/ (running from a checkout after `make`)
  4. the system loader (after `make install`)
In a directory, liblua5.4.so.0 is loaded first when it is there (the wheel vendors it), then
libkiln_rt.so.0, then libkiln.so.0; each by full path, so their DT_NEEDED names resolve to
the copies already loaded.
"""

import ctypes
import os
import threading

from . import errors

_HERE = os.path.dirname(os.path.abspath(__file__))

# ---- C types (mirroring include/kiln/*.h) ----

KILN_MAX_PARAMS = 64
KILN_NAME_MAX = 64
KILN_SPEC_MAX = 512
KILN_LAUNCH_MAX = 3072
KILN_LAUNCH_DIMS = 4

DTYPES = ("f32", "f16", "bf16", "i32")  # kiln_dtype values 0..3 (i32: index tensors, e.g. cu_seqlens)
DTYPE_SIZE = {"f32": 4, "f16": 2, "bf16": 2, "i32": 4}
PARAM_KINDS = ("ptr", "i32", "i64", "f32", "tensormap")  # kiln_param_kind values
LINT_KINDS = ("target", "arch", "isa", "version", "decl", "sync", "device", "text", "cuda")
IMAGE_KINDS = ("cubin", "ptx", "lto-ir", "other")


class Error(ctypes.Structure):
    _fields_ = [("status", ctypes.c_int), ("msg", ctypes.c_char * 1024)]


class Param(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char * KILN_NAME_MAX), ("kind", ctypes.c_int), ("dtype", ctypes.c_int)]


class KernelMeta(ctypes.Structure):
    _fields_ = [
        ("family", ctypes.c_char * KILN_NAME_MAX),
        ("spec", ctypes.c_char * KILN_SPEC_MAX),
        ("entry", ctypes.c_char * KILN_NAME_MAX),
        ("sm", ctypes.c_int),
        ("ptx_version", ctypes.c_int),
        ("nparams", ctypes.c_int),
        ("params", Param * KILN_MAX_PARAMS),
        ("block", ctypes.c_uint * 3),
        ("grid_tile", ctypes.c_uint * 3),
        ("static_smem", ctypes.c_uint),
        ("dynamic_smem", ctypes.c_uint),
        ("align_bytes", ctypes.c_uint),
        ("rows_per_block", ctypes.c_uint),
        ("threads_per_row", ctypes.c_uint),
        ("ws_slabs", ctypes.c_uint),
        ("ws_rows_per_block", ctypes.c_uint),
        ("then_spec", ctypes.c_char * KILN_SPEC_MAX),
        ("launch", ctypes.c_char * KILN_LAUNCH_MAX),
    ]


class LaunchTensor(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("ptr", ctypes.c_uint64), ("strides", ctypes.c_int64 * KILN_LAUNCH_DIMS)]


class LaunchScalar(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("value", ctypes.c_double)]


class LaunchArgs(ctypes.Structure):
    _fields_ = [
        ("tensors", ctypes.POINTER(LaunchTensor)),
        ("ntensors", ctypes.c_int),
        ("scalars", ctypes.POINTER(LaunchScalar)),
        ("nscalars", ctypes.c_int),
        ("workspace", ctypes.c_uint64),
        ("workspace_bytes", ctypes.c_size_t),
        ("stream", ctypes.c_void_p),
    ]


class BundleMatrix(ctypes.Structure):
    """kiln_bundle_matrix: what `kiln bundle`'s default set takes of a family (its template's K.bundle)."""
    _fields_ = [("declared", ctypes.c_int), ("dtype_keys", ctypes.c_char * 64), ("shape_key", ctypes.c_char * 32),
                ("default_shapes", ctypes.c_char * 128), ("kernels", ctypes.c_char * 256), ("extra", ctypes.c_char * 4096),
                ("arch", ctypes.c_char * 2048)]


class LintFinding(ctypes.Structure):
    _fields_ = [
        ("kind", ctypes.c_int),
        ("warning", ctypes.c_int),
        ("line", ctypes.c_int),
        ("instruction", ctypes.c_char * 256),
        ("feature", ctypes.c_char * 64),
        ("need_sm", ctypes.c_int),
        ("need_arch", ctypes.c_int),
        ("need_ptx", ctypes.c_int),
        ("module_sm", ctypes.c_int),
        ("module_ptx", ctypes.c_int),
        ("device_sm", ctypes.c_int),
        ("message", ctypes.c_char * 512),
    ]


class LintModule(ctypes.Structure):
    _fields_ = [
        ("target", ctypes.c_char * 32),
        ("sm", ctypes.c_int),
        ("arch_specific", ctypes.c_int),
        ("family_specific", ctypes.c_int),
        ("ptx", ctypes.c_int),
        ("target_line", ctypes.c_int),
        ("version_line", ctypes.c_int),
        ("instructions", ctypes.c_size_t),
        ("functions", ctypes.c_size_t),
        ("device_sm", ctypes.c_int),
        ("runs_on_device", ctypes.c_int),
        ("dropped", ctypes.c_size_t),
        ("cuda", ctypes.c_int),
        ("cuda_loads", ctypes.c_int),
    ]


class LintImage(ctypes.Structure):
    _fields_ = [
        ("kind", ctypes.c_int),
        ("target", ctypes.c_char * 16),
        ("sm", ctypes.c_int),
        ("suffix", ctypes.c_char),
        ("ptx", ctypes.c_int),
        ("container", ctypes.c_size_t),
        ("offset", ctypes.c_size_t),
        ("size", ctypes.c_size_t),
        ("compression", ctypes.c_char * 8),
        ("runs_on_device", ctypes.c_int),
        ("cuda_loads", ctypes.c_int),
        ("findings", ctypes.c_size_t),
        ("functions", ctypes.c_long),
        ("note", ctypes.c_char * 256),
    ]


class LintBinary(ctypes.Structure):
    _fields_ = [
        ("format", ctypes.c_char * 16),
        ("containers", ctypes.c_size_t),
        ("images", ctypes.c_size_t),
        ("device_sm", ctypes.c_int),
        ("cuda", ctypes.c_int),
        ("runs_on_device", ctypes.c_int),
        ("cuda_loads", ctypes.c_int),
        ("verdict", ctypes.c_char * 768),
    ]


class GenOptions(ctypes.Structure):
    _fields_ = [("template_dir", ctypes.c_char_p), ("opt_level", ctypes.c_int), ("pipeline", ctypes.c_int),
                ("time_builder", ctypes.c_int)]


class EmuLaunch(ctypes.Structure):
    _fields_ = [
        ("grid", ctypes.c_uint * 3),
        ("block", ctypes.c_uint * 3),
        ("dynamic_smem", ctypes.c_uint),
        ("twice", ctypes.c_int),
        ("nullable", ctypes.c_uint32),
        ("arg_bytes", ctypes.POINTER(ctypes.c_size_t)),
        ("race", ctypes.c_int),
    ]


class CaseSize(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char * 24), ("value", ctypes.c_double)]


class CaseOpts(ctypes.Structure):
    """kiln_case_opts (kiln/emu_case.h): a family reference's problem, by named sizes."""
    _fields_ = [
        ("sm", ctypes.c_int),
        ("seed", ctypes.c_uint64),
        ("input", ctypes.c_int),
        ("eps", ctypes.c_float),
        ("scale", ctypes.c_double),
        ("twice", ctypes.c_int),
        ("sm_count", ctypes.c_int),
        ("nsizes", ctypes.c_int),
        ("sizes", CaseSize * 16),
        ("nvarlen", ctypes.c_int),
        ("varlen_q", ctypes.POINTER(ctypes.c_int)),
        ("varlen_k", ctypes.POINTER(ctypes.c_int)),
        ("seqused_k", ctypes.POINTER(ctypes.c_int)),
        ("race", ctypes.c_int),
    ]


class CaseOutput(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char * KILN_NAME_MAX),
        ("show_rel", ctypes.c_int),
        ("max_abs", ctypes.c_double),
        ("max_rel", ctypes.c_double),
        ("worst", ctypes.c_double),
        ("bad", ctypes.c_long),
        ("first", ctypes.c_char * 256),
    ]


class CaseStep(ctypes.Structure):
    _fields_ = [("kernel", ctypes.c_void_p), ("grid", ctypes.c_uint * 3), ("ms", ctypes.c_double)]


WARNING_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_char_p)


class RtOptions(ctypes.Structure):
    _fields_ = [
        ("device", ctypes.c_int),
        ("cache_dir", ctypes.c_char_p),
        ("no_disk_cache", ctypes.c_int),
        ("on_warning", WARNING_FN),
        ("warning_user", ctypes.c_void_p),
    ]


class SmFacts(ctypes.Structure):
    _fields_ = [
        ("sm", ctypes.c_int),
        ("native_bf16", ctypes.c_int),
        ("native_f16_arith", ctypes.c_int),
        ("bf16_arith", ctypes.c_int),
        ("cp_async", ctypes.c_int),
        ("mma", ctypes.c_uint),
        ("half", ctypes.c_int),
    ]


class DeviceInfo(ctypes.Structure):
    _fields_ = [
        ("ordinal", ctypes.c_int),
        ("name", ctypes.c_char * 256),
        ("cc_major", ctypes.c_int),
        ("cc_minor", ctypes.c_int),
        ("sm", ctypes.c_int),
        ("multiprocessors", ctypes.c_int),
        ("max_threads_per_block", ctypes.c_uint),
        ("max_block", ctypes.c_uint * 3),
        ("max_grid", ctypes.c_uint * 3),
        ("smem_per_block", ctypes.c_uint),
        ("smem_per_block_optin", ctypes.c_uint),
        ("total_mem", ctypes.c_uint64),
        ("driver_version", ctypes.c_int),
        ("facts", SmFacts),
    ]


class RtStats(ctypes.Structure):
    _fields_ = [
        (n, ctypes.c_uint64)
        for n in ("memory_hits", "bundle_hits", "disk_hits", "generated", "disk_writes", "bad_entries", "modules_loaded",
                  "cubin_hits", "cubin_writes")
    ]


class Arg(ctypes.Union):
    _fields_ = [("ptr", ctypes.c_uint64), ("i32", ctypes.c_int32), ("i64", ctypes.c_int64), ("f32", ctypes.c_float),
                ("tmap", ctypes.c_void_p)]  # kiln_arg.tmap: an encoded CUtensorMap (tensormap parameters)


KILN_LAUNCH_TMAPS = 6


class LaunchStep(ctypes.Structure):
    """kiln_launch_step (kiln/runtime.h): one kernel of a bound launch; its tensor maps as kiln's records
    (kiln/tensor_map.h: 128 bytes, 8-byte aligned), for kiln_tensor_map_encode."""
    _fields_ = [("meta", ctypes.c_void_p), ("grid", ctypes.c_uint * 3), ("args", Arg * KILN_MAX_PARAMS),
                ("ntmaps", ctypes.c_int), ("tmap_param", ctypes.c_int * KILN_LAUNCH_TMAPS),
                ("tmaps", (ctypes.c_uint64 * 16) * KILN_LAUNCH_TMAPS)]


class AttentionMask(ctypes.Structure):
    """kiln_attention_mask (kiln/runtime.h): issue 24's window, softcap, ALiBi and dropout launch values."""
    _fields_ = [("window", ctypes.c_int), ("window_left", ctypes.c_int), ("window_right", ctypes.c_int),
                ("softcap", ctypes.c_float), ("alibi_slopes", ctypes.c_uint64), ("alibi_stride", ctypes.c_int),
                ("dropout_p", ctypes.c_float), ("dropout_seed", ctypes.c_ulonglong), ("dropout_offset", ctypes.c_ulonglong)]


class AttentionKvCache(ctypes.Structure):
    """kiln_attention_kvcache (kiln/runtime.h): a paged KV cache, the keys appended into it and their rotary."""
    _fields_ = ([(n, ctypes.c_uint64) for n in ("block_table", "cache_seqlens", "cache_batch_idx", "cache_leftpad")]
                + [(n, ctypes.c_int) for n in ("page_size", "max_blocks", "num_blocks")]
                + [("k_new", ctypes.c_uint64), ("v_new", ctypes.c_uint64), ("seqlen_new", ctypes.c_int)]
                + [(n, ctypes.c_int64 * 3) for n in ("stride_k_new", "stride_v_new")]
                + [(n, ctypes.c_int) for n in ("rotary", "rotary_dim", "rotary_dtype")]
                + [("rotary_cos", ctypes.c_uint64), ("rotary_sin", ctypes.c_uint64), ("seqlen_ro", ctypes.c_int)])


# kiln_attention_args.path's values (KILN_ATTENTION_PATH_* in kiln/runtime.h, in order): the spec key path's.
ATTENTION_PATHS = ("auto", "mma", "simt", "wgmma")


def attention_path(path, what):
    """The KILN_ATTENTION_PATH_* code of path (a name of ATTENTION_PATHS), else KilnArgumentError naming them."""
    if path not in ATTENTION_PATHS:
        raise errors.KilnArgumentError("%s: path must be one of %s, got %r" % (what, ", ".join(ATTENTION_PATHS), path))
    return ATTENTION_PATHS.index(path)


class AttentionArgs(ctypes.Structure):
    _fields_ = (
        [(n, ctypes.c_uint64) for n in ("o", "lse", "q", "k", "v")]
        + [(n, ctypes.c_int) for n in ("dtype", "out_dtype", "head_dim", "causal", "batch", "heads_q", "heads_kv",
                                       "seq_q", "seq_k")]
        + [("scale", ctypes.c_float)]
        + [(n, ctypes.c_int64 * 3) for n in ("stride_q", "stride_k", "stride_v", "stride_o")]
        + [("stream", ctypes.c_void_p), ("mask", AttentionMask), ("cache", AttentionKvCache)]
        + [("v_head_dim", ctypes.c_int)]  # 0: head_dim
        + [("path", ctypes.c_int)]  # KILN_ATTENTION_PATH_* (ATTENTION_PATHS' index); 0: auto
    )


class NormFwdArgs(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_int)] + [
        (n, ctypes.c_uint64) for n in ("y", "mean", "rstd", "x", "weight", "bias", "residual", "h")] + [
        ("rows", ctypes.c_int), ("hidden", ctypes.c_int),
        ("x_dtype", ctypes.c_int), ("w_dtype", ctypes.c_int), ("y_dtype", ctypes.c_int), ("r_dtype", ctypes.c_int),
        ("eps", ctypes.c_float),
        ("stream", ctypes.c_void_p),
        ("offset", ctypes.c_int),
    ]


class NormBwdArgs(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_int)] + [
        (n, ctypes.c_uint64) for n in ("dx", "dweight", "dbias", "dy", "x", "mean", "rstd", "weight", "dres",
                                       "workspace")] + [
        ("workspace_bytes", ctypes.c_size_t),
        ("rows", ctypes.c_int), ("hidden", ctypes.c_int),
        ("x_dtype", ctypes.c_int), ("w_dtype", ctypes.c_int), ("dy_dtype", ctypes.c_int), ("dx_dtype", ctypes.c_int),
        ("r_dtype", ctypes.c_int),
        ("stream", ctypes.c_void_p),
        ("offset", ctypes.c_int),
    ]


class AttentionBwdArgs(ctypes.Structure):
    _fields_ = (
        [(n, ctypes.c_uint64) for n in ("dq", "dk", "dv", "q", "k", "v", "o", "dout", "lse", "workspace")]
        + [(n, ctypes.c_int) for n in ("dtype", "out_dtype", "grad_dtype", "head_dim", "causal", "deterministic",
                                       "batch", "heads_q", "heads_kv", "seq_q", "seq_k")]
        + [("scale", ctypes.c_float)]
        + [(n, ctypes.c_int64 * 3) for n in ("stride_q", "stride_k", "stride_v", "stride_o", "stride_dout",
                                             "stride_dq", "stride_dk", "stride_dv")]
        + [("stream", ctypes.c_void_p), ("mask", AttentionMask)]
        + [("v_head_dim", ctypes.c_int)]  # 0: head_dim
        + [("path", ctypes.c_int)]  # KILN_ATTENTION_PATH_* of dkdv (and deterministic dq); 0: auto
    )


class BundleEntry(ctypes.Structure):
    _fields_ = [
        ("spec", ctypes.c_char_p),
        ("sm", ctypes.c_int),
        ("ptx_version", ctypes.c_int),
        ("kind", ctypes.c_int),
        ("payload", ctypes.c_void_p),
        ("offset", ctypes.c_uint64),
        ("size", ctypes.c_uint64),
        ("meta", ctypes.POINTER(KernelMeta)),
    ]


# ---- function prototypes: name -> (restype, argtypes) ----

P = ctypes.c_void_p
PP = ctypes.POINTER(ctypes.c_void_p)
S = ctypes.c_int  # kiln_status
ERR = ctypes.POINTER(Error)
sz = ctypes.c_size_t

RT_FUNCS = {
    "kiln_cuda_parse_version": (S, [ctypes.c_char_p, ctypes.POINTER(ctypes.c_int), ERR]),
    "kiln_status_name": (ctypes.c_char_p, [S]),
    "kiln_write_file": (S, [ctypes.c_char_p, ctypes.c_void_p, sz, ERR]),
    "kiln_targets": (ctypes.c_int, [ctypes.POINTER(ctypes.c_int), ctypes.c_int]),
    "kiln_meta_format": (ctypes.c_int, [ctypes.POINTER(KernelMeta), ctypes.c_char_p, sz]),
    "kiln_meta_parse": (S, [ctypes.c_char_p, sz, ctypes.POINTER(KernelMeta), ERR]),
    "kiln_sm_facts_get": (S, [ctypes.c_int, ctypes.POINTER(SmFacts), ERR]),
    "kiln_half_dtype_for_sm": (ctypes.c_int, [ctypes.c_int]),
    "kiln_mma_shapes_string": (ctypes.c_int, [ctypes.c_uint, ctypes.c_char_p, sz]),
    "kiln_rt_create": (S, [PP, ctypes.POINTER(RtOptions), ERR]),
    "kiln_rt_destroy": (None, [P]),
    "kiln_rt_device": (ctypes.POINTER(DeviceInfo), [P]),
    "kiln_rt_cache_dir": (ctypes.c_char_p, [P]),
    "kiln_rt_get_stats": (None, [P, ctypes.POINTER(RtStats)]),
    "kiln_rt_get_kernel": (S, [P, ctypes.c_char_p, PP, ERR]),
    "kiln_rt_prepare": (S, [P, ctypes.POINTER(ctypes.c_char_p), ctypes.c_int, ctypes.c_int, PP, ERR]),
    "kiln_rt_prepare_start": (S, [P, ctypes.POINTER(ctypes.c_char_p), ctypes.c_int, ctypes.c_int, PP, ERR]),
    "kiln_prepare_finish": (S, [P, PP, ERR]),
    "kiln_rt_load_module": (S, [P, ctypes.c_void_p, sz, ctypes.c_int, ctypes.POINTER(KernelMeta), PP, ERR]),
    "kiln_kernel_get_meta": (ctypes.POINTER(KernelMeta), [P]),
    "kiln_launch": (S, [P, ctypes.POINTER(LaunchArgs), ERR]),
    "kiln_launch_workspace": (S, [P, ctypes.POINTER(LaunchArgs), ctypes.POINTER(ctypes.c_size_t), ERR]),
    "kiln_launch_bind": (S, [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, ctypes.c_int, ctypes.POINTER(LaunchArgs),
                             ctypes.c_int, ctypes.POINTER(LaunchStep), ctypes.POINTER(sz), ERR]),
    "kiln_tensor_map_encode": (S, [P, P, P, ERR]),  # (a tensor map record, the 128-byte output)
    "kiln_kernel_origin": (ctypes.c_char_p, [P]),
    "kiln_kernel_payload_kind": (ctypes.c_int, [P]),
    "kiln_kernel_grid": (S, [P, ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_uint), ERR]),
    "kiln_kernel_launch": (S, [P, ctypes.POINTER(ctypes.c_uint), ctypes.POINTER(Arg), ctypes.c_int, P, ERR]),
    "kiln_tensor_map_encode": (S, [P, P, P, ERR]),
    "kiln_attention_forward": (S, [P, ctypes.POINTER(AttentionArgs), ERR]),
    "kiln_attention_pick": (S, [P, ctypes.POINTER(AttentionArgs), PP, ERR]),
    "kiln_attention_forward_workspace": (S, [P, ctypes.POINTER(AttentionArgs), ctypes.c_int,
                                             ctypes.POINTER(ctypes.c_int), ctypes.POINTER(sz), ERR]),
    "kiln_attention_forward_splitkv": (S, [P, ctypes.POINTER(AttentionArgs), ctypes.c_int, ctypes.c_uint64, sz, ERR]),
    "kiln_attention_backward_workspace": (sz, [ctypes.POINTER(AttentionBwdArgs)]),
    "kiln_attention_backward_workspace_on": (S, [P, ctypes.POINTER(AttentionBwdArgs), ctypes.POINTER(sz), ERR]),
    "kiln_attention_backward": (S, [P, ctypes.POINTER(AttentionBwdArgs), ERR]),
    "kiln_norm_forward": (S, [P, ctypes.POINTER(NormFwdArgs), ERR]),
    "kiln_norm_forward_pick": (S, [P, ctypes.POINTER(NormFwdArgs), PP, ERR]),
    "kiln_norm_backward": (S, [P, ctypes.POINTER(NormBwdArgs), ERR]),
    "kiln_norm_backward_pick": (S, [P, ctypes.POINTER(NormBwdArgs), PP, ERR]),
    "kiln_norm_backward_workspace": (S, [P, ctypes.POINTER(NormBwdArgs), ctypes.POINTER(ctypes.c_size_t),
                                         ctypes.POINTER(ctypes.c_uint), ERR]),
    "kiln_attention_backward_pick": (S, [P, ctypes.POINTER(AttentionBwdArgs), ctypes.POINTER(ctypes.c_void_p * 3), ERR]),
    "kiln_rt_alloc": (S, [P, sz, ctypes.POINTER(ctypes.c_uint64), ERR]),
    "kiln_rt_free": (S, [P, ctypes.c_uint64, ERR]),
    "kiln_rt_upload": (S, [P, ctypes.c_uint64, P, sz, ERR]),
    "kiln_rt_download": (S, [P, P, ctypes.c_uint64, sz, ERR]),
    "kiln_rt_synchronize": (S, [P, ERR]),
    "kiln_rt_add_bundle_file": (S, [P, ctypes.c_char_p, ERR]),
    "kiln_rt_add_bundle_memory": (S, [P, P, sz, ERR]),
    "kiln_bundle_open_file": (S, [ctypes.c_char_p, PP, ERR]),
    "kiln_bundle_open_memory": (S, [P, sz, PP, ERR]),
    "kiln_bundle_close": (None, [P]),
    "kiln_read_input": (S, [ctypes.c_char_p, ctypes.c_char_p, PP, ctypes.POINTER(sz), ERR]),
    "kiln_bundle_count": (ctypes.c_int, [P]),
    "kiln_bundle_producer": (ctypes.c_char_p, [P]),
    "kiln_bundle_entry_at": (S, [P, ctypes.c_int, ctypes.POINTER(BundleEntry), ERR]),
    "kiln_bundle_writer_create": (S, [PP, ctypes.c_char_p, ERR]),
    "kiln_bundle_writer_add": (S, [P, ctypes.POINTER(KernelMeta), ctypes.c_int, P, sz, ERR]),
    "kiln_bundle_writer_finish": (S, [P, PP, ctypes.POINTER(sz), ERR]),
    "kiln_bundle_writer_destroy": (None, [P]),
}

GEN_FUNCS = {
    "kiln_llvm_version": (ctypes.c_char_p, []),
    "kiln_gen_create": (S, [PP, ctypes.POINTER(GenOptions), ERR]),
    "kiln_gen_destroy": (None, [P]),
    "kiln_generate": (S, [P, ctypes.c_char_p, ctypes.c_int, ctypes.c_int, PP, ERR]),
    "kiln_module_text": (ctypes.c_void_p, [P]),
    "kiln_module_size": (sz, [P]),
    "kiln_module_meta": (ctypes.POINTER(KernelMeta), [P]),
    "kiln_module_free": (None, [P]),
    "kiln_canonical_spec": (S, [P, ctypes.c_char_p, ctypes.c_char_p, sz, ERR]),
    "kiln_describe": (S, [P, ctypes.c_char_p, sz, ERR]),
    "kiln_family_bundle": (S, [P, ctypes.c_char_p, ctypes.POINTER(BundleMatrix), ERR]),
    "kiln_family_examples": (S, [P, ctypes.c_char_p, ctypes.c_char_p, sz, ctypes.POINTER(ctypes.c_int), ERR]),
    "kiln_lint": (S, [ctypes.c_char_p, sz, ctypes.c_int, PP, ERR]),
    "kiln_lint_count": (sz, [P]),
    "kiln_lint_get": (ctypes.POINTER(LintFinding), [P, sz]),
    "kiln_lint_module_info": (ctypes.POINTER(LintModule), [P]),
    "kiln_lint_free": (None, [P]),
    "kiln_lint_parse_sm": (S, [ctypes.c_char_p, ctypes.POINTER(ctypes.c_int), ERR]),
    "kiln_lint_cuda": (S, [ctypes.c_char_p, sz, ctypes.c_int, ctypes.c_int, PP, ERR]),
    "kiln_lint_is_binary": (ctypes.c_int, [ctypes.c_char_p, sz]),
    "kiln_lint_bin": (S, [ctypes.c_char_p, sz, ctypes.c_int, ctypes.c_int, PP, ERR]),
    "kiln_lint_bin_info": (ctypes.POINTER(LintBinary), [P]),
    "kiln_lint_bin_count": (sz, [P]),
    "kiln_lint_bin_image": (ctypes.POINTER(LintImage), [P, sz]),
    "kiln_lint_bin_ptx": (P, [P, sz]),
    "kiln_lint_bin_findings": (sz, [P]),
    "kiln_lint_bin_finding": (ctypes.POINTER(LintFinding), [P, sz]),
    "kiln_lint_bin_free": (None, [P]),
    "kiln_emu_create": (S, [PP, ERR]),
    "kiln_emu_destroy": (None, [P]),
    "kiln_emu_load": (S, [P, P, ctypes.c_char_p, ctypes.c_int, PP, ERR]),
    "kiln_emu_kernel_meta": (ctypes.POINTER(KernelMeta), [P]),
    "kiln_emu_kernel_free": (None, [P]),
    "kiln_emu_run": (S, [P, ctypes.POINTER(EmuLaunch), PP, ERR]),
    "kiln_case_opts_set": (None, [ctypes.POINTER(CaseOpts), ctypes.c_char_p, ctypes.c_double]),
    "kiln_ln_input_parse": (ctypes.c_int, [ctypes.c_char_p, ctypes.POINTER(ctypes.c_int)]),
    "kiln_ref_names": (ctypes.c_char_p, []),
    "kiln_case_create": (S, [PP, P, P, ctypes.c_char_p, ctypes.POINTER(CaseOpts), ERR]),
    "kiln_case_free": (None, [P]),
    "kiln_case_run": (S, [P, ERR]),
    "kiln_case_check": (ctypes.c_long, [P]),
    "kiln_case_noutputs": (ctypes.c_int, [P]),
    "kiln_case_output_at": (ctypes.POINTER(CaseOutput), [P, ctypes.c_int]),
    "kiln_case_nsteps": (ctypes.c_int, [P]),
    "kiln_case_step_at": (ctypes.POINTER(CaseStep), [P, ctypes.c_int]),
    "kiln_case_kernel": (P, [P]),
    "kiln_case_noun": (ctypes.c_char_p, [P]),
    "kiln_case_describe": (None, [P, ctypes.c_char_p, sz]),
}

# ---- loading ----

_RT_NAMES = ("libkiln_rt.so.0", "libkiln_rt.so")
_GEN_NAMES = ("libkiln.so.0", "libkiln.so")
_LUA_NAMES = ("liblua5.4.so.0",)


def _candidate_dirs():
    """(label, directory) pairs in search order."""
    dirs = []
    env = os.environ.get("KILN_LIB_DIR")
    if env:
        dirs.append(("$KILN_LIB_DIR", env))
        return dirs  # an explicit choice: no silent fallback to another copy
    dirs.append(("package", os.path.join(_HERE, "_lib")))
    src_lib = os.path.normpath(os.path.join(_HERE, "..", "..", "lib"))
    dirs.append(("source tree", src_lib))
    return dirs


def _first_existing(d, names):
    for n in names:
        p = os.path.join(d, n)
        if os.path.exists(p):
            return p
    return None


class _Libs:
    def __init__(self):
        self.lock = threading.Lock()
        self.loaded = False
        self.rt = None
        self.gen = None
        self.rt_path = None
        self.gen_path = None
        self.lua_path = None
        self.rt_error = None
        self.gen_error = None

    def load(self):
        with self.lock:
            if self.loaded:
                return
            self._load()
            self.loaded = True

    def _load(self):
        searched = []
        mode = getattr(os, "RTLD_GLOBAL", 0) | getattr(os, "RTLD_NOW", 2)
        for label, d in _candidate_dirs():
            searched.append("%s (%s)" % (d, label))
            rt = _first_existing(d, _RT_NAMES)
            if not rt:
                continue
            try:
                self.rt = ctypes.CDLL(rt, mode=mode)
                self.rt_path = rt
            except OSError as e:
                self.rt_error = "cannot load %s: %s" % (rt, e)
                return
            lua = _first_existing(d, _LUA_NAMES)
            if lua:
                try:
                    ctypes.CDLL(lua, mode=mode)
                    self.lua_path = lua
                except OSError:
                    pass  # libkiln's own lookup below gives the error that matters
            gen = _first_existing(d, _GEN_NAMES)
            if gen:
                try:
                    self.gen = ctypes.CDLL(gen, mode=mode)
                    self.gen_path = gen
                except OSError as e:
                    self.gen_error = "cannot load %s: %s" % (gen, e)
            else:
                self.gen_error = "no libkiln.so.0 in %s (a runtime-only install)" % d
            break
        else:
            if os.environ.get("KILN_LIB_DIR"):
                self.rt_error = "no libkiln_rt.so.0 in %s" % ", ".join(searched)
                return
            # Last resort: the system loader (after `make install`).
            try:
                self.rt = ctypes.CDLL(_RT_NAMES[0], mode=mode)
                self.rt_path = _RT_NAMES[0]
            except OSError as e:
                self.rt_error = "libkiln_rt.so.0 not found; searched %s and the system loader (%s)" % (
                    ", ".join(searched), e)
                return
            try:
                self.gen = ctypes.CDLL(_GEN_NAMES[0], mode=mode)
                self.gen_path = _GEN_NAMES[0]
            except OSError as e:
                self.gen_error = "cannot load libkiln.so.0 from the system loader: %s" % e
        if self.rt is not None:
            _declare(self.rt, RT_FUNCS)
        if self.gen is not None:
            _declare(self.gen, GEN_FUNCS)


def _declare(lib, table):
    for name, (res, args) in table.items():
        f = getattr(lib, name)
        f.restype = res
        f.argtypes = args


_libs = _Libs()


def rt():
    """libkiln_rt, or raises KilnUnavailableError."""
    _libs.load()
    if _libs.rt is None:
        raise errors.KilnUnavailableError(
            "the kiln runtime library is not available: %s; set KILN_LIB_DIR to a directory holding "
            "libkiln_rt.so.0 (and libkiln.so.0, liblua5.4.so.0 for generation)" % _libs.rt_error)
    return _libs.rt


def gen():
    """libkiln (generator, lint, emulator), or raises KilnUnavailableError naming what is missing."""
    rt()
    if _libs.gen is None:
        raise errors.KilnUnavailableError(
            "kiln's generator library is not available, so generation, lint and the emulator cannot run "
            "(runtime functions and bundles still work): %s. It needs libkiln.so.0 with liblua5.4.so.0 beside "
            "it; install the full package (pip install ./python) or point KILN_LIB_DIR at a directory "
            "holding libkiln.so.0, libkiln_rt.so.0 and liblua5.4.so.0" % _libs.gen_error)
    return _libs.gen


def have_generator():
    try:
        gen()
        return True
    except errors.KilnUnavailableError:
        return False


def paths():
    """Where each library was loaded from (None when not loaded)."""
    _libs.load()
    return {"libkiln_rt": _libs.rt_path, "libkiln": _libs.gen_path, "liblua": _lua_loaded_from()}


def _lua_loaded_from():
    if _libs.lua_path:
        return _libs.lua_path
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                if "liblua" in line:
                    return line.split()[-1]
    except OSError:
        pass
    return None


def check(status, err):
    """Raises the KilnError subclass for a failed call."""
    if status != 0:
        raise errors.from_status(status, err.msg.decode("utf-8", "replace"))


_libc_free = None


def read_input(path, what):
    """The bytes of a file a user named (None: standard input), read by libkiln_rt within kiln's input limit
    (256 MiB, or KILN_MAX_INPUT_MB): a larger file, a FIFO or a device raises a KilnError naming it."""
    global _libc_free
    lib = rt()
    data, size, err = ctypes.c_void_p(), ctypes.c_size_t(), Error()
    p = None if path is None else os.fsencode(path)
    st = lib.kiln_read_input(p, what.encode(), ctypes.byref(data), ctypes.byref(size), ctypes.byref(err))
    check(4 if st == 2 else st, err)  # a missing file is a KilnIOError (an OSError), as open() would say
    if _libc_free is None:
        _libc_free = ctypes.CDLL(None).free
        _libc_free.argtypes, _libc_free.restype = [ctypes.c_void_p], None
    try:
        return ctypes.string_at(data, size.value)
    finally:
        _libc_free(data)


def text(b):
    return b.decode("utf-8", "replace") if b is not None else None


def meta_dict(m):
    """A kiln_kernel_meta as plain Python values."""
    params = []
    for i in range(m.nparams):
        p = m.params[i]
        kind = PARAM_KINDS[p.kind] if 0 <= p.kind < len(PARAM_KINDS) else str(p.kind)
        params.append({"name": text(p.name), "kind": kind, "dtype": DTYPES[p.dtype] if kind in ("ptr", "tensormap") else None})
    return {
        "family": text(m.family),
        "spec": text(m.spec),
        "entry": text(m.entry),
        "sm": m.sm,
        "ptx_version": "%d.%d" % (m.ptx_version // 10, m.ptx_version % 10),
        "params": params,
        "block": tuple(m.block),
        "grid_tile": tuple(m.grid_tile),
        "static_smem": m.static_smem,
        "dynamic_smem": m.dynamic_smem,
        "align_bytes": m.align_bytes,
        "rows_per_block": m.rows_per_block,
        "threads_per_row": m.threads_per_row,
        "ws_slabs": m.ws_slabs,  # two-kernel launches: the f32 workspace, and the kernel that reduces it
        "ws_rows_per_block": m.ws_rows_per_block,
        "then_spec": text(m.then_spec),
        "launch": text(m.launch),  # the launch description (docs/registry.md), a line each; "" from older kiln
    }


def write_file(path, data):
    """Writes bytes to path as every kiln output is written (kiln_write_file): a device or FIFO in place, a
    symlink's target, a regular file replaced atomically keeping its permissions."""
    lib = rt()
    err = Error()
    buf = ctypes.create_string_buffer(bytes(data), len(data))
    check(lib.kiln_write_file(os.fsencode(os.fspath(path)), buf, len(data), ctypes.byref(err)), err)
