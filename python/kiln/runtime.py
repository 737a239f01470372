"""kiln.runtime - the kiln runtime (libkiln_rt) on CUDA memory: kernels by spec, bundles, launches.

A Runtime owns one device's primary context, kiln's memory and disk caches and the bundles
added to it. Launch helpers take torch tensors, objects with ``__cuda_array_interface__``
(CuPy, Numba, ...) or DLPack, check dtype, shape, strides, alignment and device, and launch on
the caller's stream: ``stream=`` (a CUstream handle as int, or an object with ``cuda_stream``
or ``ptr``), else torch's current stream when the arrays are torch tensors, else the default
stream. Nothing here synchronizes.
"""

import contextlib
import ctypes
import os
import sys
import threading
import warnings

from . import _arrays, _extents, _lib, _tmap
from ._gen import sm_name, spec_values
from ._attn_keys import CAUSAL_CODE, Keys, causal_value, check_v_head_dim
from ._rt_varlen import VarlenRuntime
from .errors import KilnArgumentError, KilnError

_DTYPE_CODE = {"f32": 0, "f16": 1, "bf16": 2}
_I32 = (-(1 << 31), (1 << 31) - 1)
_I64 = (-(1 << 63), (1 << 63) - 1)


def check_heads(what, hq, hkv):
    """Query and key/value head counts of an attention call: each at least 1, hkv dividing hq (GQA/MQA)."""
    if hq < 1 or hkv < 1:
        raise KilnArgumentError("%s: q has %d heads and k/v %d; each needs at least 1 head" % (what, hq, hkv))
    if hq % hkv:
        raise KilnArgumentError("%s: %d query heads are not a multiple of %d key/value heads (each key/value head "
                                "serves an equal group of query heads)" % (what, hq, hkv))


def _stream_handle(stream, views):
    if stream is None:
        if any(v.is_torch for v in views) and "torch" in sys.modules:
            import torch
            dev = next(v.device for v in views if v.is_torch)
            return int(torch.cuda.current_stream(dev).cuda_stream)
        return 0
    if isinstance(stream, bool):
        raise KilnArgumentError("stream must be a CUstream handle (int) or a stream object, got a bool")
    if isinstance(stream, int):
        return stream
    for attr in ("cuda_stream", "ptr", "handle"):
        h = getattr(stream, attr, None)
        if isinstance(h, int):
            return h
    raise KilnArgumentError("stream: %s is not a CUDA stream; pass an int handle or an object with "
                            "cuda_stream (torch) or ptr (CuPy)" % type(stream).__name__)


def _check_scalar(name, kind, value):
    if kind == "f32":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise KilnArgumentError("parameter '%s' is a float; got %r" % (name, value))
        return float(value)
    if isinstance(value, bool) or not isinstance(value, int):
        if hasattr(value, "__index__"):
            value = value.__index__()
        else:
            raise KilnArgumentError("parameter '%s' is an integer (%s); got %r" % (name, kind, value))
    lo, hi = _I32 if kind == "i32" else _I64
    if not lo <= value <= hi:
        raise KilnArgumentError("parameter '%s' = %d does not fit %s" % (name, value, kind))
    return value


def bind(meta, args, what, nullable_ok, view_of):
    """Matches keyword args to a kernel's parameters by name (metadata-driven, any family).
    Returns (list of (param, value), pointer views). Pointers: view_of(obj, label) gives an object
    with ptr/dtype/numel/contiguous(); a None pointer is allowed only when the spec turns that input
    off (weight=false). Checks dtype, contiguity, alignment and size where the extent is known."""
    names = [p["name"] for p in meta["params"] if p["kind"] != "tensormap"]  # (maps: built from the tensors)
    extra = sorted(set(args) - set(names))
    if extra:
        raise KilnArgumentError("%s takes no parameter %s; its parameters: %s" % (
            what, ", ".join("'%s'" % e for e in extra), ", ".join(names)))
    missing = [n for n in names if n not in args]
    if missing:
        raise KilnArgumentError("%s: missing parameter%s %s; its parameters: %s" % (
            what, "s" if len(missing) > 1 else "", ", ".join("'%s'" % m for m in missing), ", ".join(names)))
    sv = spec_values(meta["spec"])
    scalars = {}
    for p in meta["params"]:
        if p["kind"] not in ("ptr", "tensormap"):
            scalars[p["name"]] = _check_scalar(p["name"], p["kind"], args[p["name"]])
    env = _extents.variables(sv, scalars)
    out, views = [], []
    align = meta["align_bytes"] or 1
    for p in meta["params"]:
        if p["kind"] == "tensormap":
            out.append((p, None))  # the caller builds the map (kiln.emulate: _tmap.records)
            continue
        name, v = p["name"], args[p["name"]]
        if p["kind"] != "ptr":
            out.append((p, scalars[name]))
            continue
        if v is None:
            if not nullable_ok(name, sv):
                raise KilnArgumentError("%s: parameter '%s' needs an array (only inputs the spec turns off, "
                                        "such as weight=false, may be None)" % (what, name))
            out.append((p, None))
            continue
        dv = view_of(v, "%s: parameter '%s'" % (what, name))
        if dv.dtype != p["dtype"]:
            raise KilnArgumentError("%s: parameter '%s' must be %s, got %s" % (what, name, p["dtype"], dv.dtype))
        if not dv.contiguous():
            raise KilnArgumentError("%s: parameter '%s' must be contiguous (strides %s for shape %s)"
                                    % (what, name, dv.strides, dv.shape))
        if dv.ptr % align:
            raise KilnArgumentError("%s: parameter '%s' at address 0x%x is not %d-byte aligned as this kernel "
                                    "needs (its vector loads)" % (what, name, dv.ptr, align))
        need = _extents.extent(name, env, meta.get("launch", ""))
        if need is not None and dv.numel < need:
            raise KilnArgumentError("%s: parameter '%s' has %d elements; the kernel reaches %d with these "
                                    "arguments" % (what, name, dv.numel, need))
        out.append((p, dv))
        views.append(dv)
    return out, views


def nullable_by_spec(name, sv):
    return sv.get(name) == "false"


def optional_tensors(meta):
    """The tensors the kernel's launch description declares optional ("tensor NAME ROLE? ..."): may be None."""
    return {w[1] for w in (line.split() for line in meta.get("launch", "").splitlines())
            if len(w) > 2 and w[0] == "tensor" and w[2].endswith("?")}


def nullable_for(meta):
    """bind()'s rule for a kernel: a None pointer where the spec turns the input off or the launch
    description declares the tensor optional."""
    optional = optional_tensors(meta)
    return lambda name, sv: nullable_by_spec(name, sv) or name in optional


class Kernel:
    """A kernel loaded on the device: ``spec``, ``meta`` (dict), ``origin`` ("bundle", "disk cache",
    "generated", "module"). Call ``launch(grid=... or problem=..., stream=..., **params)``."""

    def __init__(self, rt, ptr):
        self._rt = rt
        self._ptr = ptr
        lib = rt._lib
        self.meta = _lib.meta_dict(lib.kiln_kernel_get_meta(ptr).contents)
        self.spec = self.meta["spec"]
        self.origin = _lib.text(lib.kiln_kernel_origin(ptr))
        self.payload = "cubin" if lib.kiln_kernel_payload_kind(ptr) == 1 else "ptx"

    def __repr__(self):
        return "<kiln.Kernel %s %s (%s, %s)>" % (self.spec, sm_name(self.meta["sm"]), self.payload, self.origin)

    def grid(self, problem):
        """grid[i] = ceil(problem[i] / grid_tile[i]), checked against the device's limits."""
        prob = list(problem) + [1] * (3 - len(problem))
        if len(prob) != 3 or any(isinstance(x, bool) or not isinstance(x, int) or x < 0 for x in prob):
            raise KilnArgumentError("problem must be up to 3 non-negative integers, got %r" % (problem,))
        p = (ctypes.c_uint64 * 3)(*prob)
        g = (ctypes.c_uint * 3)()
        err = _lib.Error()
        _lib.check(self._rt._lib.kiln_kernel_grid(self._ptr, p, g, ctypes.byref(err)), err)
        return tuple(g)

    def launch(self, grid=None, problem=None, stream=None, **params):
        """Launches with every parameter given by name (arrays for pointers, numbers for scalars).
        ``problem``: elements along each grid axis (the grid follows the metadata's grid_tile);
        or ``grid``: blocks, given directly. Block size and shared memory come from the metadata."""
        if (grid is None) == (problem is None):
            raise KilnArgumentError("give grid=(x, y, z) or problem=(n, ...), exactly one")
        g = self.grid(problem) if problem is not None else tuple(list(grid) + [1] * (3 - len(grid)))
        if len(g) != 3 or any(not isinstance(x, int) or x < 1 for x in g):
            raise KilnArgumentError("grid must be up to 3 positive integers, got %r" % (grid,))
        dev = self._rt.device_ordinal
        bound, views = bind(self.meta, params, self.spec, nullable_for(self.meta),
                            lambda o, w: self._rt._view(o, w, dev, index_ok=True))
        args = (_lib.Arg * max(1, len(bound)))()
        maps = _tmap.encoded(self._rt, self.meta, params, bound)  # tensormap parameters (TMA kernels, sm_90a)
        for i, (p, v) in enumerate(bound):
            if p["kind"] == "tensormap":
                args[i].tmap = maps[p["name"]][1]
            elif p["kind"] == "ptr":
                args[i].ptr = v.ptr if v is not None else 0
            elif p["kind"] == "i32":
                args[i].i32 = v
            elif p["kind"] == "i64":
                args[i].i64 = v
            else:
                args[i].f32 = v
        h = _stream_handle(stream, views)
        err = _lib.Error()
        _lib.check(self._rt._lib.kiln_kernel_launch(self._ptr, (ctypes.c_uint * 3)(*g), args, len(bound),
                                                    ctypes.c_void_p(h), ctypes.byref(err)), err)

    def launch_bound(self, grid=None, problem=None, stream=None, **params):
        """Launches this kernel alone with ``params`` naming the tensors and scalars of its launch description
        (docs/registry.md; arrays are tensors, numbers scalars), bound by the C runtime (kiln_launch_bind):
        pointers, strides and grid from the description, and each tensor map (TMA kernels) built from its
        tensor, checked by the driver's rules and encoded by the driver (kiln_tensor_map_encode,
        cuTensorMapEncodeTiled; nothing of it in Python). The grid is the description's unless grid= or
        problem= is given; a kernel that needs a workspace is launched with Runtime.launch."""
        if grid is not None and problem is not None:
            raise KilnArgumentError("give grid=(x, y, z) or problem=(n, ...), at most one")
        tensors = {n: v for n, v in params.items() if not isinstance(v, (int, float)) or isinstance(v, bool)}
        scalars = {n: v for n, v in params.items() if n not in tensors}
        lib, views, err = self._rt._lib, [], _lib.Error()
        a = self._rt._launch_args(tensors, scalars, views)
        step, ws = _lib.LaunchStep(), ctypes.c_size_t()
        metas = (ctypes.c_void_p * 1)(ctypes.cast(lib.kiln_kernel_get_meta(self._ptr), ctypes.c_void_p))
        sms = self._rt.device["multiprocessors"]
        _lib.check(lib.kiln_launch_bind(metas, 1, 0, ctypes.byref(a), sms, ctypes.byref(step), ctypes.byref(ws),
                                        ctypes.byref(err)), err)
        if ws.value:
            raise KilnArgumentError("%s needs %d bytes of workspace: launch it with Runtime.launch" % (self.spec, ws.value))
        maps = (ctypes.c_ubyte * (128 * _lib.KILN_LAUNCH_TMAPS + 64))()  # 64-byte aligned 128-byte CUtensorMaps
        base = -ctypes.addressof(maps) % 64
        for j in range(step.ntmaps):
            at = ctypes.addressof(maps) + base + 128 * j
            _lib.check(lib.kiln_tensor_map_encode(self._rt._ptr, ctypes.byref(step.tmaps[j]), ctypes.c_void_p(at),
                                                  ctypes.byref(err)), err)
            step.args[step.tmap_param[j]].tmap = at
        g = self.grid(problem) if problem is not None else tuple(step.grid) if grid is None else \
            tuple(list(grid) + [1] * (3 - len(grid)))
        if len(g) != 3 or any(not isinstance(x, int) or x < 1 for x in g):
            raise KilnArgumentError("grid must be up to 3 positive integers, got %r" % (grid,))
        h = _stream_handle(stream, views)
        _lib.check(lib.kiln_kernel_launch(self._ptr, (ctypes.c_uint * 3)(*g), step.args, len(self.meta["params"]),
                                          ctypes.c_void_p(h), ctypes.byref(err)), err)


class DeviceArray:
    """Device memory from kiln's runtime (cuMemAlloc), with ``__cuda_array_interface__``: for programs
    that have no torch or CuPy. ``rt.empty(shape, "bf16")``, ``rt.from_numpy(a)``, ``a.numpy()``."""

    def __init__(self, rt, shape, dtype):
        if dtype not in _DTYPE_CODE:
            raise KilnArgumentError("dtype %r; valid: f32, f16, bf16" % (dtype,))
        self._rt = rt
        self.shape = tuple(int(s) for s in shape)
        self.dtype = dtype
        n = 1
        for s in self.shape:
            n *= s
        self.nbytes = n * _lib.DTYPE_SIZE[dtype]
        self.ptr = rt._alloc(max(self.nbytes, 1))

    @property
    def __cuda_array_interface__(self):
        ts = {"f32": "<f4", "f16": "<f2", "bf16": "<V2"}[self.dtype]
        return {"shape": self.shape, "typestr": ts, "data": (self.ptr, False), "strides": None, "version": 3,
                "stream": None}

    def _kiln_view(self):
        strides, acc = [], 1
        for s in reversed(self.shape):
            strides.append(acc)
            acc *= s
        return _arrays.DevView(self.ptr, self.shape, tuple(reversed(strides)), self.dtype, self._rt.device_ordinal,
                               self)

    def numpy(self):
        """Copies to a new numpy array (bf16 as ml_dtypes.bfloat16). Synchronous."""
        from ._np import np_dtype
        import numpy as np
        out = np.empty(self.shape, dtype=np_dtype(self.dtype))
        self._rt._download(out, self.ptr, self.nbytes)
        return out

    def upload(self, a):
        """Copies a host array of the same size and dtype in. Synchronous."""
        from ._np import as_kiln_array
        a = as_kiln_array(a, self.dtype, "upload")
        if a.nbytes != self.nbytes:
            raise KilnArgumentError("upload: %d bytes into an array of %d bytes" % (a.nbytes, self.nbytes))
        self._rt._upload(self.ptr, a, self.nbytes)

    def free(self):
        if self.ptr and self._rt._ptr:
            self._rt._free(self.ptr)
        self.ptr = 0

    def __del__(self):
        try:
            self.free()
        except Exception:
            pass

    def __repr__(self):
        return "<kiln.DeviceArray %s %s at 0x%x>" % (self.dtype, self.shape, self.ptr)


class Prepare:
    """A model's kernels being made ready in the background: ``Runtime.prepare(specs, wait=False)``."""

    def __init__(self, rt, ptr, n):
        self._rt, self._ptr, self._n = rt, ptr, n

    def finish(self):
        """Waits for every spec (helping), then returns the Kernels in order or raises as prepare() does."""
        if not self._ptr:
            raise KilnError("this prepare is finished already (or its Runtime is closed)")
        ptr, self._ptr = self._ptr, None
        self._rt._prepares.discard(self)
        ks = (ctypes.c_void_p * max(self._n, 1))()
        err = _lib.Error()
        _lib.check(self._rt._lib.kiln_prepare_finish(ptr, ks, ctypes.byref(err)), err)
        return [Kernel(self._rt, ctypes.c_void_p(ks[i])) for i in range(self._n)]

    def __repr__(self):
        return "<kiln.Prepare of %d specs%s>" % (self._n, "" if self._ptr else ", finished")


class Runtime(VarlenRuntime):  # varlen and paged-KV-cache launches: _rt_varlen.py
    """``kiln.Runtime(device=0, cache_dir=None, disk_cache=True)``: the CUDA driver, one device's primary
    context, kiln's caches and bundles. Without libkiln (a runtime-only install) kernels come from
    bundles and the disk cache only."""

    def __init__(self, device=0, cache_dir=None, disk_cache=True):
        self._lib = _lib.rt()
        self._ptr = ctypes.c_void_p()
        self.warnings = []
        # guards the Runtime-kept workspaces: held from taking one to the launch that uses it, so another
        # thread cannot free or regrow it in between (re-entrant: _workspace_ptr takes it again)
        self._lock = threading.RLock()
        self._bundle_data = []
        self._prepares = set()  # background prepares not finished: kiln_rt_destroy finishes them

        def on_warning(_user, msg):
            text = _lib.text(msg)
            self.warnings.append(text)

        self._warn_cb = _lib.WARNING_FN(on_warning)
        opt = _lib.RtOptions(int(device), os.fspath(cache_dir).encode() if cache_dir else None,
                             0 if disk_cache else 1, self._warn_cb, None)
        err = _lib.Error()
        _lib.check(self._lib.kiln_rt_create(ctypes.byref(self._ptr), ctypes.byref(opt), ctypes.byref(err)), err)
        for w in self.warnings:
            warnings.warn("kiln: " + w, RuntimeWarning, stacklevel=2)
        d = self._lib.kiln_rt_device(self._ptr).contents
        self.device_ordinal = d.ordinal
        self.device = {
            "ordinal": d.ordinal, "name": _lib.text(d.name), "sm": d.sm, "cc": (d.cc_major, d.cc_minor),
            "multiprocessors": d.multiprocessors, "max_threads_per_block": d.max_threads_per_block,
            "smem_per_block": d.smem_per_block, "smem_per_block_optin": d.smem_per_block_optin,
            "total_mem": d.total_mem, "driver_version": d.driver_version,
            "native_bf16": bool(d.facts.native_bf16), "half_dtype": _lib.DTYPES[d.facts.half],
        }
        self.sm = d.sm
        self.half_dtype = self.device["half_dtype"]

    def close(self):
        if self._ptr:
            for attr in ("_bwd_ws", "_fwd_ws"):
                ws = getattr(self, attr, None)
                if ws is not None:
                    try:
                        ws.free()
                    except KilnError:
                        pass
                    setattr(self, attr, None)
            for p in list(self._prepares):
                p._ptr = None  # kiln_rt_destroy finishes and frees it
            self._prepares.clear()
            self._lib.kiln_rt_destroy(self._ptr)
            self._ptr = ctypes.c_void_p()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return "<kiln.Runtime device %d %s sm_%d>" % (self.device_ordinal, self.device["name"], self.sm)

    def _live(self):
        if not self._ptr:
            raise KilnError("this Runtime is closed")
        return self._ptr

    @property
    def cache_dir(self):
        return _lib.text(self._lib.kiln_rt_cache_dir(self._live()))

    def stats(self):
        s = _lib.RtStats()
        self._lib.kiln_rt_get_stats(self._live(), ctypes.byref(s))
        return {n: getattr(s, n) for n, _ in _lib.RtStats._fields_}

    # ---- kernels ----

    def kernel(self, spec, **params):
        """The kernel for spec on this device: memory, then bundles, then the disk cache, then the generator."""
        from ._gen import _spec_text
        k = ctypes.c_void_p()
        err = _lib.Error()
        _lib.check(self._lib.kiln_rt_get_kernel(self._live(), _spec_text(spec, params).encode(), ctypes.byref(k),
                                                ctypes.byref(err)), err)
        return Kernel(self, k)

    def _launch_args(self, tensors, scalars, views):
        """kiln_launch_args for named tensors and scalars (the name buffers ride along in ``keep``)."""
        tensors, scalars = tensors or {}, scalars or {}
        keep = []
        ts = (_lib.LaunchTensor * max(1, len(tensors)))()
        for i, (name, obj) in enumerate(tensors.items()):
            keep.append(name.encode())
            ts[i].name = keep[-1]
            if obj is None:
                continue
            v = self._view(obj, "launch: " + name, self.device_ordinal, index_ok=True)
            views.append(v)
            ts[i].ptr = v.ptr
            if not v.contiguous():
                if len(v.strides) > _lib.KILN_LAUNCH_DIMS:
                    raise KilnArgumentError("launch: %s has %d dims; a strided tensor takes at most %d"
                                            % (name, len(v.strides), _lib.KILN_LAUNCH_DIMS))
                for d, st in enumerate(v.strides):
                    ts[i].strides[d] = st
        ss = (_lib.LaunchScalar * max(1, len(scalars)))()
        for i, (name, value) in enumerate(scalars.items()):
            keep.append(name.encode())
            ss[i].name, ss[i].value = keep[-1], float(value)
        a = _lib.LaunchArgs(ts, len(tensors), ss, len(scalars), 0, 0, None)
        a._keep = (keep, ts, ss)
        return a

    def launch(self, spec, tensors=None, scalars=None, workspace=None, stream=None):
        """Launches the kernel spec names, and the kernels its metadata runs before and after it, binding
        tensors and scalars by the names its template declares (docs/registry.md; ``k.meta["launch"]``).
        tensors: {name: device array or None}; a non-contiguous array passes its strides (one per declared
        dim). scalars: {name: number}; those with a default may be left out. The sequence's workspace is
        the caller's (``workspace``; ``launch_workspace`` gives its size) or one this Runtime keeps."""
        k = self.kernel(spec)
        views = []
        a = self._launch_args(tensors, scalars, views)
        need = ctypes.c_size_t()
        err = _lib.Error()
        _lib.check(self._lib.kiln_launch_workspace(k._ptr, ctypes.byref(a), ctypes.byref(need), ctypes.byref(err)), err)
        with self._kept_workspace(workspace):
            a.workspace = self._workspace_ptr("launch", need.value, workspace, views, "_launch_workspace")
            a.workspace_bytes = need.value
            a.stream = _stream_handle(stream, views)
            _lib.check(self._lib.kiln_launch(k._ptr, ctypes.byref(a), ctypes.byref(err)), err)

    def launch_workspace(self, spec, tensors=None, scalars=None):
        """Bytes of workspace ``launch`` needs for these tensors and scalars (0: none)."""
        k = self.kernel(spec)
        a = self._launch_args(tensors, scalars, [])
        need = ctypes.c_size_t()
        err = _lib.Error()
        _lib.check(self._lib.kiln_launch_workspace(k._ptr, ctypes.byref(a), ctypes.byref(need), ctypes.byref(err)), err)
        return need.value

    def prepare(self, specs, threads=0, wait=True):
        """Gets every kernel of specs ready at model load (as kernel() does each), generating and compiling
        on up to ``threads`` threads at once (0: one per CPU), outside the GIL. Returns the Kernels in
        order; a bad spec raises naming the first one that failed (the others are ready all the same).
        ``wait=False`` returns at once with a Prepare whose ``finish()`` returns (or raises) that later;
        meanwhile kernel() and the launch helpers wait only for their own kernel."""
        from ._gen import _spec_text
        if isinstance(specs, (str, bytes)):
            raise KilnArgumentError("prepare takes a list of specs, got one string")
        texts = [_spec_text(s, {}).encode() for s in specs]
        if not isinstance(threads, int) or isinstance(threads, bool) or threads < 0:
            raise KilnArgumentError("prepare: threads must be an int >= 0 (0: one per CPU), got %r" % (threads,))
        n = len(texts)
        arr = (ctypes.c_char_p * max(n, 1))(*texts)
        ks = (ctypes.c_void_p * max(n, 1))()
        err = _lib.Error()
        if not wait:
            p = ctypes.c_void_p()
            _lib.check(self._lib.kiln_rt_prepare_start(self._live(), arr, n, threads, ctypes.byref(p),
                                                       ctypes.byref(err)), err)
            handle = Prepare(self, p, n)
            self._prepares.add(handle)
            return handle
        _lib.check(self._lib.kiln_rt_prepare(self._live(), arr, n, threads, ks, ctypes.byref(err)), err)
        return [Kernel(self, ctypes.c_void_p(ks[i])) for i in range(n)]

    def load_module(self, ptx):
        """Loads PTX text that carries a '// kiln.meta' block (e.g. kiln.generate(...).text)."""
        data = ptx.encode() if isinstance(ptx, str) else bytes(ptx)
        if not data.endswith(b"\0"):
            data += b"\0"
        buf = ctypes.create_string_buffer(data, len(data))
        k = ctypes.c_void_p()
        err = _lib.Error()
        _lib.check(self._lib.kiln_rt_load_module(self._live(), buf, len(data), 0, None, ctypes.byref(k),
                                                 ctypes.byref(err)), err)
        return Kernel(self, k)

    def load_entry(self, entry):
        """Loads one kiln.BundleEntry (PTX or cubin) as it is, whatever this device's SM: for inspection and
        tests; add_bundle() is what picks the right entry per device."""
        data = bytes(entry.payload)
        buf = ctypes.create_string_buffer(data, len(data))
        k = ctypes.c_void_p()
        err = _lib.Error()
        kind = 1 if entry.kind == "cubin" else 0
        _lib.check(self._lib.kiln_rt_load_module(self._live(), buf, len(data), kind, ctypes.byref(entry._meta),
                                                 ctypes.byref(k), ctypes.byref(err)), err)
        return Kernel(self, k)

    def add_bundle(self, bundle):
        """Adds a bundle (a path, or bytes) whose kernels kernel()/launch helpers then use first."""
        err = _lib.Error()
        if isinstance(bundle, (bytes, bytearray, memoryview)):
            buf = ctypes.create_string_buffer(bytes(bundle), len(bundle))
            self._bundle_data.append(buf)  # the runtime reads it in place: keep it alive
            st = self._lib.kiln_rt_add_bundle_memory(self._live(), buf, len(bundle), ctypes.byref(err))
        else:
            st = self._lib.kiln_rt_add_bundle_file(self._live(), os.fsencode(os.fspath(bundle)), ctypes.byref(err))
        _lib.check(st, err)

    # ---- arrays ----

    def _view(self, obj, what, dev=None, index_ok=False):
        if isinstance(obj, DeviceArray):
            v = obj._kiln_view()
        else:
            v = _arrays.view(obj, what, index_ok=index_ok)
        if v.device is not None and dev is not None and v.device != dev:
            raise KilnArgumentError("%s is on CUDA device %d; this Runtime drives device %d" % (what, v.device, dev))
        return v

    def _alloc(self, n):
        p = ctypes.c_uint64()
        err = _lib.Error()
        _lib.check(self._lib.kiln_rt_alloc(self._live(), n, ctypes.byref(p), ctypes.byref(err)), err)
        return p.value

    def _free(self, p):
        err = _lib.Error()
        _lib.check(self._lib.kiln_rt_free(self._live(), p, ctypes.byref(err)), err)

    def _upload(self, dst, a, n):
        err = _lib.Error()
        _lib.check(self._lib.kiln_rt_upload(self._live(), dst, a.ctypes.data, n, ctypes.byref(err)), err)

    def _download(self, a, src, n):
        err = _lib.Error()
        _lib.check(self._lib.kiln_rt_download(self._live(), a.ctypes.data, src, n, ctypes.byref(err)), err)

    def empty(self, shape, dtype):
        """Uninitialized device memory (a DeviceArray)."""
        return DeviceArray(self, shape, dtype)

    def from_numpy(self, a, dtype=None):
        """A DeviceArray holding a copy of a host array (f32/f16/bf16)."""
        from ._np import as_kiln_array, kiln_dtype_of
        dt = dtype or kiln_dtype_of(a)
        a = as_kiln_array(a, dt, "from_numpy")
        d = DeviceArray(self, a.shape, dt)
        d.upload(a)
        return d

    def synchronize(self):
        err = _lib.Error()
        _lib.check(self._lib.kiln_rt_synchronize(self._live(), ctypes.byref(err)), err)

    # ---- typed launch helpers ----

    def layer_norm(self, y, x, weight=None, bias=None, eps=1e-5, mean=None, rstd=None, stream=None, residual=None,
                   h=None, offset=0):
        """y = layer_norm(x) over the last dimension (torch.nn.functional.layer_norm semantics), fp32 math.
        x, y: [..., hidden] contiguous; weight/bias: [hidden] (any kiln dtype, both the same); mean/rstd:
        optional f32 [rows] outputs. Picks the fixed-hidden variant when one exists. residual and h (both or
        neither, one dtype): the pre-norm block's fused add, h = x + residual is written to h and normalized.
        offset=1: zero-centered weights, y = xhat * (1 + weight) + bias with 1 + weight formed in f32."""
        a = self._norm_fwd_args("layer_norm", False, y, x, weight, bias, eps, mean, rstd, residual, h, stream, offset)
        self._norm_forward(a)

    def rms_norm(self, y, x, weight=None, eps=1e-6, rstd=None, residual=None, h=None, stream=None, offset=0):
        """y = x * rstd * weight over the last dimension, rstd = 1 / sqrt(mean(x^2) + eps) (torch's rms_norm),
        fp32 math; rstd: optional f32 [rows] output. Arrays, the fused residual add and offset (1: y = x * rstd *
        (1 + weight), zero-centered weights as Gemma stores them) as in layer_norm."""
        a = self._norm_fwd_args("rms_norm", True, y, x, weight, None, eps, None, rstd, residual, h, stream, offset)
        self._norm_forward(a)

    def rms_norm_kernel(self, y, x, weight=None, eps=1e-6, rstd=None, residual=None, h=None, offset=0):
        """The Kernel rms_norm would launch for these arrays, without launching."""
        a = self._norm_fwd_args("rms_norm", True, y, x, weight, None, eps, None, rstd, residual, h, 0, offset)
        k = ctypes.c_void_p()
        err = _lib.Error()
        _lib.check(self._lib.kiln_norm_forward_pick(self._live(), ctypes.byref(a), ctypes.byref(k), ctypes.byref(err)),
                   err)
        return Kernel(self, k)

    def layer_norm_backward(self, dx, dy, x, mean, rstd, weight=None, dweight=None, dbias=None, dres=None,
                            workspace=None, stream=None, offset=0):
        """dx (and dweight/dbias) of layer_norm from dy, the x it normalized (h with a residual) and its saved
        mean/rstd: kiln's two-kernel backward, dweight/dbias summed in a fixed order (the same bits every
        run). weight given: the forward had one, dweight is required; dbias: wanted when given. dres: the
        fused-residual form, dx = the norm's gradient + dres. workspace: device memory of
        layer_norm_backward_workspace(...) bytes; None uses one this Runtime keeps. offset=1: the forward had
        zero-centered weights (g = dy * (1 + weight)); dweight keeps its form."""
        a, views = self._norm_bwd_args("layer_norm_backward", False, dx, dy, x, mean, rstd, weight, dweight, dbias,
                                       dres, stream, offset)
        self._norm_backward(a, views, workspace, "layer_norm_backward")

    def rms_norm_backward(self, dx, dy, x, rstd, weight=None, dweight=None, dres=None, workspace=None, stream=None,
                          offset=0):
        """dx (and dweight) of rms_norm; arguments as layer_norm_backward (no mean, no dbias)."""
        a, views = self._norm_bwd_args("rms_norm_backward", True, dx, dy, x, None, rstd, weight, dweight, None, dres,
                                       stream, offset)
        self._norm_backward(a, views, workspace, "rms_norm_backward")

    def layer_norm_backward_workspace(self, dx, dy, x, mean, rstd, weight=None, dweight=None, dbias=None, dres=None,
                                      offset=0):
        """Bytes of device workspace layer_norm_backward needs for these arrays (0 without dweight/dbias)."""
        a, _ = self._norm_bwd_args("layer_norm_backward", False, dx, dy, x, mean, rstd, weight, dweight, dbias, dres, 0,
                                   offset)
        return self._norm_workspace_bytes(a)

    def rms_norm_backward_workspace(self, dx, dy, x, rstd, weight=None, dweight=None, dres=None, offset=0):
        """Bytes of device workspace rms_norm_backward needs for these arrays (0 without dweight)."""
        a, _ = self._norm_bwd_args("rms_norm_backward", True, dx, dy, x, None, rstd, weight, dweight, None, dres, 0,
                                   offset)
        return self._norm_workspace_bytes(a)

    def _rows_like(self, what, name, obj, shape, dev):
        v = self._view(obj, "%s: %s" % (what, name), dev)
        if tuple(v.shape) != tuple(shape):
            raise KilnArgumentError("%s: %s has shape %s; expected x's %s" % (what, name, v.shape, tuple(shape)))
        if not v.contiguous():
            raise KilnArgumentError("%s: %s must be contiguous (strides %s for shape %s)" % (what, name, v.strides,
                                                                                            v.shape))
        return v

    def _vector(self, what, name, obj, n, dev, dtype=None, per="hidden"):
        v = self._view(obj, "%s: %s" % (what, name), dev)
        if v.numel != n or not v.contiguous() or (dtype and v.dtype != dtype):
            raise KilnArgumentError("%s: %s must be %d contiguous %svalues (one per %s), got %s %s"
                                    % (what, name, n, dtype + " " if dtype else "", per, v.dtype, v.shape))
        return v

    def _norm_x(self, what, x, dev):
        xv = self._view(x, what + ": x", dev)
        if not xv.shape or xv.shape[-1] == 0:
            raise KilnArgumentError("%s: x must be [..., hidden] with hidden >= 1, got shape %s" % (what, xv.shape))
        if not xv.contiguous():
            raise KilnArgumentError("%s: x must be contiguous (strides %s for shape %s)" % (what, xv.strides, xv.shape))
        hidden = xv.shape[-1]
        return xv, hidden, xv.numel // hidden

    def _norm_offset(self, what, offset, weight):
        """The offset key: 0, or 1 (zero-centered weights: the norm multiplies by 1 + weight; needs a weight)."""
        if offset not in (0, 1) or isinstance(offset, bool):
            raise KilnArgumentError("%s: offset must be 0 or 1 (1: the norm multiplies by 1 + weight, zero-centered "
                                    "weights), got %r" % (what, offset))
        if offset and weight is None:
            raise KilnArgumentError("%s: offset=1 multiplies by 1 + weight and needs a weight" % what)
        return int(offset)

    def _norm_fwd_args(self, what, rms, y, x, weight, bias, eps, mean, rstd, residual, h, stream, offset=0):
        dev = self.device_ordinal
        off = self._norm_offset(what, offset, weight)
        xv, hidden, rows = self._norm_x(what, x, dev)
        yv = self._rows_like(what, "y", y, xv.shape, dev)
        a = _lib.NormFwdArgs()
        a.kind = 1 if rms else 0
        a.x, a.y, a.rows, a.hidden, a.eps = xv.ptr, yv.ptr, rows, hidden, float(eps)
        a.x_dtype, a.y_dtype = _DTYPE_CODE[xv.dtype], _DTYPE_CODE[yv.dtype]
        a.offset = off
        views = [xv, yv]
        if (residual is None) != (h is None):
            raise KilnArgumentError("%s: residual and h go together: give both (h = x + residual is written to h and "
                                    "normalized) or neither" % what)
        if residual is not None:
            rv = self._rows_like(what, "residual", residual, xv.shape, dev)
            hv = self._rows_like(what, "h", h, xv.shape, dev)
            if rv.dtype != hv.dtype:
                raise KilnArgumentError("%s: residual is %s and h is %s; they are one residual stream and share a "
                                        "dtype" % (what, rv.dtype, hv.dtype))
            a.residual, a.h, a.r_dtype = rv.ptr, hv.ptr, _DTYPE_CODE[rv.dtype]
            views += [rv, hv]
        wdt = None
        for name, obj in (("weight", weight), ("bias", bias)):
            if obj is None:
                continue
            v = self._vector(what, name, obj, hidden, dev)
            if wdt is not None and v.dtype != wdt:
                raise KilnArgumentError("%s: weight is %s and bias is %s; they must match" % (what, wdt, v.dtype))
            wdt = v.dtype
            setattr(a, name, v.ptr)
            views.append(v)
        a.w_dtype = _DTYPE_CODE[wdt or xv.dtype]
        for name, obj in (("mean", mean), ("rstd", rstd)):
            if obj is not None:
                v = self._vector(what, name, obj, rows, dev, "f32", "row")
                setattr(a, name, v.ptr)
                views.append(v)
        a.stream = _stream_handle(stream, views)
        return a

    def _norm_forward(self, a):
        err = _lib.Error()
        _lib.check(self._lib.kiln_norm_forward(self._live(), ctypes.byref(a), ctypes.byref(err)), err)

    def _norm_bwd_args(self, what, rms, dx, dy, x, mean, rstd, weight, dweight, dbias, dres, stream, offset=0):
        dev = self.device_ordinal
        off = self._norm_offset(what, offset, weight)
        xv, hidden, rows = self._norm_x(what, x, dev)
        a = _lib.NormBwdArgs()
        a.kind = 1 if rms else 0
        a.offset = off
        a.x, a.rows, a.hidden, a.x_dtype = xv.ptr, rows, hidden, _DTYPE_CODE[xv.dtype]
        views = [xv]
        for name, obj in (("dx", dx), ("dy", dy), ("dres", dres)):
            if obj is None:
                if name != "dres":
                    raise KilnArgumentError("%s: %s is required" % (what, name))
                continue
            v = self._rows_like(what, name, obj, xv.shape, dev)
            setattr(a, name, v.ptr)
            setattr(a, {"dres": "r_dtype"}.get(name, name + "_dtype"), _DTYPE_CODE[v.dtype])
            views.append(v)
        for name, obj in (("mean", mean), ("rstd", rstd)):
            if obj is None:
                if name == "rstd" or not rms:
                    raise KilnArgumentError("%s: %s (f32, one per row, as the forward saved it) is required"
                                            % (what, name))
                continue
            v = self._vector(what, name, obj, rows, dev, "f32", "row")
            setattr(a, name, v.ptr)
            views.append(v)
        if weight is not None and dweight is None:
            raise KilnArgumentError("%s: weight is given (the forward had one), so dweight is required" % what)
        if dweight is not None and weight is None:
            raise KilnArgumentError("%s: dweight needs weight (the forward's, for g = dy * weight)" % what)
        wdt = None
        for name, obj in (("weight", weight), ("dweight", dweight), ("dbias", dbias)):
            if obj is None:
                continue
            v = self._vector(what, name, obj, hidden, dev)
            if wdt is not None and v.dtype != wdt:
                raise KilnArgumentError("%s: weight, dweight and dbias share one dtype; %s is %s, not %s"
                                        % (what, name, v.dtype, wdt))
            wdt = v.dtype
            setattr(a, name, v.ptr)
            views.append(v)
        a.w_dtype = _DTYPE_CODE[wdt or xv.dtype]
        a.stream = _stream_handle(stream, views)
        return a, views

    def _norm_workspace_bytes(self, a):
        need, err = ctypes.c_size_t(), _lib.Error()
        _lib.check(self._lib.kiln_norm_backward_workspace(self._live(), ctypes.byref(a), ctypes.byref(need), None,
                                                          ctypes.byref(err)), err)
        return int(need.value)

    def _norm_backward(self, a, views, workspace, what):
        with self._kept_workspace(workspace):
            if a.rows:
                need = self._norm_workspace_bytes(a)
                a.workspace = self._workspace_ptr(what, need, workspace, views, "_bwd_ws")
                a.workspace_bytes = need
            err = _lib.Error()
            _lib.check(self._lib.kiln_norm_backward(self._live(), ctypes.byref(a), ctypes.byref(err)), err)

    def layer_norm_kernel(self, y, x, weight=None, bias=None, eps=1e-5, mean=None, rstd=None):
        """The Kernel layer_norm would launch for these arrays, without launching."""
        a = self._norm_fwd_args("layer_norm", False, y, x, weight, bias, eps, mean, rstd, None, None, 0)
        k = ctypes.c_void_p()
        err = _lib.Error()
        _lib.check(self._lib.kiln_norm_forward_pick(self._live(), ctypes.byref(a), ctypes.byref(k), ctypes.byref(err)),
                   err)
        return Kernel(self, k)

    def _attn_mask(self, a, what, b, hq, vl, window=None, softcap=None, alibi_slopes=None, dropout=None):
        """Sets a.causal's companions, a.mask (window, softcap, ALiBi slopes: f32 device [heads_q] or
        [batch, heads_q], contiguous) from the keyword arguments (docs/attention.md)."""
        sv = None
        if alibi_slopes is not None:
            sv = self._view(alibi_slopes, what + ": alibi_slopes", self.device_ordinal)
            if sv.dtype != "f32" or not sv.contiguous():
                raise KilnArgumentError("%s: alibi_slopes must be contiguous f32 [heads_q] or [batch, heads_q], got "
                                        "%s %s" % (what, sv.dtype, sv.shape))
            vl.append(sv)
        keys = Keys(what, window, softcap, None if sv is None else sv.shape, b, hq, dropout)
        keys.fill(a.mask, 0 if sv is None else sv.ptr)

    def _attn_args(self, o, q, k, v, lse, causal, scale, stream, path="auto", **mask):
        dev = self.device_ordinal
        views = {}
        for n, obj in (("q", q), ("k", k), ("v", v), ("o", o)):
            t = self._view(obj, "attention: " + n, dev)
            if len(t.shape) != 4:
                raise KilnArgumentError("attention: %s must be 4-d [batch, seq, heads, head_dim], got shape %s"
                                        % (n, t.shape))
            if t.strides[3] != 1 and t.shape[3] != 1:
                raise KilnArgumentError("attention: %s's head_dim must be contiguous (stride %d)" % (n, t.strides[3]))
            views[n] = t
        qv, kv, vv, ov = views["q"], views["k"], views["v"], views["o"]
        b, sq, hq, d = qv.shape
        _, sk, hkv, _ = kv.shape
        dv = check_v_head_dim("attention", qv.shape, kv.shape, vv.shape)
        if ov.shape != (b, sq, hq, dv):
            raise KilnArgumentError("attention: o has shape %s; expected %s (q's, at v's head_dim %d)"
                                    % (ov.shape, (b, sq, hq, dv), dv))
        check_heads("attention", hq, hkv)
        if len({qv.dtype, kv.dtype, vv.dtype}) != 1:
            raise KilnArgumentError("attention: q, k, v must share a dtype, got %s, %s, %s"
                                    % (qv.dtype, kv.dtype, vv.dtype))
        a = _lib.AttentionArgs()
        a.o, a.q, a.k, a.v = ov.ptr, qv.ptr, kv.ptr, vv.ptr
        a.dtype, a.out_dtype = _DTYPE_CODE[qv.dtype], _DTYPE_CODE[ov.dtype]
        a.head_dim, a.causal = d, CAUSAL_CODE[causal_value(causal, "attention")]
        a.v_head_dim = dv if dv != d else 0
        a.path = _lib.attention_path(path, "attention")
        a.batch, a.heads_q, a.heads_kv, a.seq_q, a.seq_k = b, hq, hkv, sq, sk
        a.scale = 0.0 if scale is None else float(scale)
        for n, t in views.items():
            getattr(a, "stride_" + n)[:] = [t.strides[0], t.strides[1], t.strides[2]]
        vl = list(views.values())
        if lse is not None:
            lv = self._view(lse, "attention: lse", dev)
            if lv.dtype != "f32" or lv.numel != b * hq * sq or not lv.contiguous():
                raise KilnArgumentError("attention: lse must be contiguous f32 [batch, heads_q, seq_q] = %d values, "
                                        "got %s %s" % (b * hq * sq, lv.dtype, lv.shape))
            a.lse = lv.ptr
            vl.append(lv)
        self._attn_mask(a, "attention", b, hq, vl, **mask)
        a.stream = _stream_handle(stream, vl)
        return a

    def attention(self, o, q, k, v, lse=None, causal=False, scale=None, stream=None, splits=0, workspace=None,
                  window=None, softcap=None, alibi_slopes=None, dropout=None, path="auto"):
        """o = softmax(scale * q k^T [causal]) v. Tensors are [batch, seq, heads, head_dim] with any strides
        (head_dim contiguous), so a torch [batch, heads, seq, head_dim] tensor passes as t.transpose(1, 2).
        heads_q must be a multiple of heads_kv (GQA/MQA); v (and o) may have a head_dim of their own (v_head_dim:
        a multiple of 8 up to 256, e.g. q/k 192 and v 128; the scale stays q's). causal True is bottom-right
        aligned, "top_left" as torch's is_causal. window=(left, right) (-1 unbounded), softcap=c, alibi_slopes
        (f32 device [heads_q] or [batch, heads_q]), dropout=(p, seed, offset) (training; never split-KV): issue
        24's keys, as kiln.emulate.attention documents them.
        lse: optional f32 [batch, heads_q, seq_q] output. scale None: 1/sqrt(head_dim).
        splits: split-KV decoding (docs/attention.md): 0 lets the runtime choose (decoding shapes, seq_q <= 16,
        whose plain grid would not fill the GPU are split over the keys), 1 never splits, n forces n splits.
        workspace: device memory of attention_workspace(...) bytes for the split partials; None uses one the
        Runtime keeps (shared by its launches: pass your own for concurrent streams).
        path: the kernel path ("auto", "mma", "simt", "wgmma": sm_90a's TMA + wgmma kernel, opt-in until "auto"
        takes it; refused off sm_90a and for specs it does not build, the error naming why)."""
        a = self._attn_args(o, q, k, v, lse, causal, scale, stream, window=window, softcap=softcap,
                            alibi_slopes=alibi_slopes, dropout=dropout, path=path)
        n, need = self._attn_splits(a, splits)
        views = []
        with self._kept_workspace(workspace):
            ptr = self._workspace_ptr("attention", need, workspace, views, "_fwd_ws") if n > 1 else 0
            err = _lib.Error()
            _lib.check(self._lib.kiln_attention_forward_splitkv(self._live(), ctypes.byref(a), n, ptr, need,
                                                                ctypes.byref(err)), err)

    def _attn_splits(self, a, splits):
        if isinstance(splits, bool) or not isinstance(splits, int):
            raise KilnArgumentError("attention: splits must be an int (0: automatic, 1: no split, n: n splits), "
                                    "got %r" % (splits,))
        n, need, err = ctypes.c_int(1), ctypes.c_size_t(0), _lib.Error()
        _lib.check(self._lib.kiln_attention_forward_workspace(self._live(), ctypes.byref(a), int(splits),
                                                              ctypes.byref(n), ctypes.byref(need), ctypes.byref(err)), err)
        return n.value, need.value

    def attention_workspace(self, o, q, k, v, lse=None, causal=False, splits=0, window=None, softcap=None,
                            alibi_slopes=None, dropout=None, path="auto"):
        """(splits, bytes): the split count attention(..., splits=splits) uses for these arrays and the device
        workspace it needs (0 bytes when it runs the non-split kernel)."""
        return self._attn_splits(self._attn_args(o, q, k, v, lse, causal, None, 0, window=window, softcap=softcap,
                                                 alibi_slopes=alibi_slopes, dropout=dropout, path=path), splits)

    def _kept_workspace(self, workspace):
        """The lock to hold around a launch that may use a Runtime-kept workspace (none with the caller's)."""
        return contextlib.nullcontext() if workspace is not None else self._lock

    def _workspace_ptr(self, what, need, workspace, views, attr):
        """The device pointer of an f32 workspace of need bytes: the caller's (checked; `what`_workspace(...)
        gives the size), else one this Runtime keeps in attribute `attr` and grows (shared by its launches:
        concurrent streams pass their own)."""
        if workspace is not None:
            wv = self._view(workspace, what + ": workspace", self.device_ordinal)
            have = wv.numel * _lib.DTYPE_SIZE[wv.dtype]
            if not wv.contiguous() or have < need:
                raise KilnArgumentError("%s: workspace must be %d contiguous bytes of device memory (%s_workspace), "
                                        "got %d bytes%s" % (what, need, what, have,
                                                            "" if wv.contiguous() else ", not contiguous"))
            views.append(wv)
            return wv.ptr
        if not need:
            return 0
        with self._lock:
            ws = getattr(self, attr, None)
            if ws is None or ws.nbytes < need:
                if ws is not None:
                    self.synchronize()  # the old one may still be in use by an earlier launch
                    ws.free()
                ws = DeviceArray(self, ((need + 3) // 4,), "f32")
                setattr(self, attr, ws)
            return ws.ptr

    def attention_kernel(self, o, q, k, v, lse=None, causal=False, scale=None, window=None, softcap=None,
                         alibi_slopes=None, dropout=None, path="auto"):
        a = self._attn_args(o, q, k, v, lse, causal, scale, 0, window=window, softcap=softcap,
                            alibi_slopes=alibi_slopes, dropout=dropout, path=path)
        kp = ctypes.c_void_p()
        err = _lib.Error()
        _lib.check(self._lib.kiln_attention_pick(self._live(), ctypes.byref(a), ctypes.byref(kp), ctypes.byref(err)),
                   err)
        return Kernel(self, kp)

    def _attn_bwd_args(self, dq, dk, dv, dout, q, k, v, o, lse, causal, scale, deterministic, stream, path="auto",
                       **mask):
        dev = self.device_ordinal
        views = {}
        for n, obj in (("q", q), ("k", k), ("v", v), ("o", o), ("dout", dout), ("dq", dq), ("dk", dk), ("dv", dv)):
            if obj is None:
                raise KilnArgumentError("attention_backward: %s is required" % n)
            t = self._view(obj, "attention_backward: " + n, dev)
            if len(t.shape) != 4:
                raise KilnArgumentError("attention_backward: %s must be 4-d [batch, seq, heads, head_dim], got shape "
                                        "%s" % (n, t.shape))
            if t.strides[3] != 1 and t.shape[3] != 1:
                raise KilnArgumentError("attention_backward: %s's head_dim must be contiguous (stride %d)"
                                        % (n, t.strides[3]))
            views[n] = t
        qv, kv = views["q"], views["k"]
        b, sq, hq, d = qv.shape
        _, sk, hkv, _ = kv.shape
        vd = check_v_head_dim("attention_backward", qv.shape, kv.shape, views["v"].shape)
        want = {"o": (b, sq, hq, vd), "dout": (b, sq, hq, vd), "dq": qv.shape, "dk": kv.shape, "dv": views["v"].shape}
        for n in ("o", "dout", "dq", "dk", "dv"):
            if views[n].shape != want[n]:
                raise KilnArgumentError("attention_backward: %s has shape %s; expected %s%s"
                                        % (n, views[n].shape, want[n], " (v's head_dim)" if n in ("o", "dout") else ""))
        check_heads("attention_backward", hq, hkv)
        for group in (("q", "k", "v"), ("o", "dout"), ("dq", "dk", "dv")):
            if len({views[n].dtype for n in group}) != 1:
                raise KilnArgumentError("attention_backward: %s must share a dtype, got %s" % (
                    ", ".join(group), ", ".join(views[n].dtype for n in group)))
        if lse is None:
            raise KilnArgumentError("attention_backward: lse (the forward's f32 [batch, heads_q, seq_q] log-sum-exp, "
                                    "attention(..., lse=...)) is required")
        lv = self._view(lse, "attention_backward: lse", dev)
        if lv.dtype != "f32" or lv.numel != b * hq * sq or not lv.contiguous():
            raise KilnArgumentError("attention_backward: lse must be contiguous f32 [batch, heads_q, seq_q] = %d "
                                    "values, got %s %s" % (b * hq * sq, lv.dtype, lv.shape))
        a = _lib.AttentionBwdArgs()
        for n, t in views.items():
            setattr(a, n, t.ptr)
            getattr(a, "stride_" + n)[:] = [t.strides[0], t.strides[1], t.strides[2]]
        a.lse = lv.ptr
        a.dtype, a.out_dtype = _DTYPE_CODE[qv.dtype], _DTYPE_CODE[views["o"].dtype]
        a.grad_dtype = _DTYPE_CODE[views["dq"].dtype]
        a.head_dim, a.deterministic = d, 1 if deterministic else 0
        a.v_head_dim = vd if vd != d else 0
        a.path = _lib.attention_path(path, "attention_backward")
        a.causal = CAUSAL_CODE[causal_value(causal, "attention_backward")]
        a.batch, a.heads_q, a.heads_kv, a.seq_q, a.seq_k = b, hq, hkv, sq, sk
        a.scale = 0.0 if scale is None else float(scale)
        vl = list(views.values()) + [lv]
        self._attn_mask(a, "attention_backward", b, hq, vl, **mask)
        a.stream = _stream_handle(stream, vl)
        return a, vl

    def attention_backward_workspace(self, q, k, v, o, dout, lse, dq, dk, dv, causal=False, deterministic=False,
                                     window=None, softcap=None, alibi_slopes=None, dropout=None, path="auto"):
        """Bytes of device workspace attention_backward needs for these arrays on this Runtime's device (f32
        delta, the f32 dQ accumulator unless deterministic, and for bf16 on sm_75 Q and dO scaled to f16)."""
        a, _ = self._attn_bwd_args(dq, dk, dv, dout, q, k, v, o, lse, causal, None, deterministic, 0, window=window,
                                   softcap=softcap, alibi_slopes=alibi_slopes, dropout=dropout, path=path)
        return self._attn_bwd_workspace_bytes(a)

    def _attn_bwd_workspace_bytes(self, a):
        need, err = ctypes.c_size_t(), _lib.Error()
        _lib.check(self._lib.kiln_attention_backward_workspace_on(self._live(), ctypes.byref(a), ctypes.byref(need),
                                                                  ctypes.byref(err)), err)
        return int(need.value)

    def _attn_bwd_workspace(self, a, workspace, views):
        need = self._attn_bwd_workspace_bytes(a)
        return self._workspace_ptr("attention_backward", need, workspace, views, "_bwd_ws")

    def attention_backward(self, dq, dk, dv, dout, q, k, v, o, lse, causal=False, scale=None, deterministic=False,
                           workspace=None, stream=None, window=None, softcap=None, alibi_slopes=None, dropout=None,
                           path="auto"):
        """dq, dk, dv of attention (FlashAttention-2's backward: prep, dkdv, then convert or dq), from the
        forward's q, k, v, its output o and lse (attention(..., lse=lse)) and dout = dL/do. Arrays as in
        attention(): [batch, seq, heads, head_dim], any strides with head_dim contiguous; dq like q, dk/dv like k
        (GQA/MQA: summed over each group's query heads); v, o, dout, dv at v's head_dim (v_head_dim, as attention());
        lse f32 [batch, heads_q, seq_q]. dtypes: q/k/v one,
        o/dout one, dq/dk/dv one. deterministic=True: no atomics, the same bits every run (about 1.4x the
        work). workspace: device memory of attention_backward_workspace(...) bytes, 16-byte aligned; None
        uses one the Runtime keeps (shared by its launches: pass your own for concurrent streams). causal, window,
        softcap, alibi_slopes, dropout: the forward's (attention(); the same dropout triple regenerates its mask).
        path: dkdv's kernel path (and deterministic dq's but for "wgmma"), as attention()'s."""
        a, views = self._attn_bwd_args(dq, dk, dv, dout, q, k, v, o, lse, causal, scale, deterministic, stream,
                                       window=window, softcap=softcap, alibi_slopes=alibi_slopes, dropout=dropout,
                                       path=path)
        with self._kept_workspace(workspace):
            a.workspace = self._attn_bwd_workspace(a, workspace, views)
            err = _lib.Error()
            _lib.check(self._lib.kiln_attention_backward(self._live(), ctypes.byref(a), ctypes.byref(err)), err)

    def attention_backward_kernels(self, dq, dk, dv, dout, q, k, v, o, lse, causal=False, scale=None,
                                   deterministic=False, window=None, softcap=None, alibi_slopes=None, dropout=None,
                                   path="auto"):
        """The three Kernels attention_backward launches, in order, without launching."""
        a, views = self._attn_bwd_args(dq, dk, dv, dout, q, k, v, o, lse, causal, scale, deterministic, 0,
                                       window=window, softcap=softcap, alibi_slopes=alibi_slopes, dropout=dropout,
                                       path=path)
        a.workspace = self._attn_bwd_workspace(a, None, views)
        ks = (ctypes.c_void_p * 3)()
        err = _lib.Error()
        _lib.check(self._lib.kiln_attention_backward_pick(self._live(), ctypes.byref(a), ctypes.byref(ks),
                                                          ctypes.byref(err)), err)
        return [Kernel(self, ctypes.c_void_p(p)) for p in ks]
