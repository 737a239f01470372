"""kiln.torch - kiln's kernels as PyTorch custom ops (torch.library): layer_norm/LayerNorm, rms_norm/RMSNorm, attention, apply_rotary_emb.

Importable only where torch is. The ops are registered as ``kiln::layer_norm``, ``kiln::rms_norm``,
``kiln::attention`` and their ``..._backward`` ops, with fake (meta) implementations, so
torch.compile captures them in a graph. Autograd runs kiln's backward kernels: the norms' two-kernel
backward (dweight/dbias summed in a fixed order, the same bits every run) and the attention backward
(FlashAttention-2's; the deterministic sequence under
torch.use_deterministic_algorithms(True)). Kernels run on CUDA tensors, on torch's
current stream, through one kiln.Runtime per device (JIT-generated for the device's SM on
first use, then from kiln's memory and disk caches); inside ``with kiln.torch.emulated():`` they run
CPU tensors on kiln's CPU emulator (tests without a GPU), and outside it a CPU tensor is refused with
one clear error, from the raw ``torch.ops.kiln`` ops too. The modules are subclasses of torch's
nn.LayerNorm / nn.RMSNorm; swap_norms(model) puts them in place of a model's norms.

    import kiln.torch as kt
    ln = kt.LayerNorm(4096)                       # f32 weights, like torch.nn.LayerNorm
    y = ln(x_bf16)                                # bf16 in, bf16 out, f32 math
    y = kt.RMSNorm(4096)(x_bf16)                  # torch.nn.RMSNorm's signature
    o = kt.scaled_dot_product_attention(q, k, v, is_causal=True)
    o.sum().backward()                            # dq, dk, dv by kiln's attention backward kernels
    kt.swap_norms(model)                          # nn.LayerNorm, nn.RMSNorm, Llama/Gemma RMSNorms -> kiln's
    q = kt.apply_rotary_emb(q, cos, sin)          # FlashAttention's apply_rotary_emb (kiln::rotary)
"""

import copy
import math
import threading
from typing import Optional, Tuple

import torch

from . import _gen, _sdpa_mask, _torch_emu
from .errors import KilnArgumentError
from .runtime import Runtime

_DT = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16"}
_TORCH_DT = {v: k for k, v in _DT.items()}
_lock = threading.Lock()
_runtimes = {}
# head_dim: the forward and backward templates take any multiple of 8 up to 256 (the attention
# template and its backward's: the tiles of the next width, templates/lib/attn_dims.lua)
HEAD_DIMS = tuple(range(8, 257, 8))


def runtime(device=None):
    """The kiln.Runtime kiln.torch uses for a CUDA device (created on first use)."""
    idx = torch.device(device).index if device is not None else None
    if idx is None:
        idx = torch.cuda.current_device()
    with _lock:
        rt = _runtimes.get(idx)
        if rt is None:
            rt = _runtimes[idx] = Runtime(device=idx)
        return rt


def _dtype_name(d, what):
    if d not in _DT:
        raise KilnArgumentError("%s: dtype %s is not one kiln kernels take; valid: torch.float32, torch.float16, "
                                "torch.bfloat16" % (what, d))
    return _DT[d]


# The SM whose kernels run CPU tensors on kiln's emulator inside `emulated()`; None outside: CPU tensors are refused.
# A module global (not thread-local) so that torch.compile guards on it like any global the traced code reads.
_emulated_sm = None


class emulated:
    """``with kiln.torch.emulated(sm=80):`` runs kiln.torch's ops on CPU tensors through kiln's CPU emulator: the
    kernels generated for ``sm``, picked and launched as on a GPU, so forward and backward can be checked end to
    end against torch's CPU ops without a GPU. Slow (each CUDA thread is a fiber): keep problems small. Applies to
    the whole process while the block runs (it nests; leaving restores the previous state). Outside it, CPU
    tensors get kiln's error saying that kiln runs on CUDA tensors. CUDA tensors are unaffected."""

    def __init__(self, sm=80):
        self.sm = _gen._parse_sm(sm)
        self._saved = []

    def __enter__(self):
        global _emulated_sm
        self._saved.append(_emulated_sm)
        _emulated_sm = self.sm
        return self

    def __exit__(self, *exc):
        global _emulated_sm
        _emulated_sm = self._saved.pop()
        return False

    def __repr__(self):
        return "kiln.torch.emulated(sm=%d)" % self.sm


def _stream(t):
    return torch.cuda.current_stream(t.device).cuda_stream if t.is_cuda else 0


def _runnable(t):
    # meta: shape-only tracing (torch.compile, export); cpu: on the emulator, inside emulated()
    return t.is_cuda or t.device.type == "meta" or (t.device.type == "cpu" and _emulated_sm is not None)


def _device_error(what, t):
    return KilnArgumentError("%s: kiln runs on CUDA tensors; this one is on %s (on the CPU, `with "
                             "kiln.torch.emulated():` runs kiln's kernels on its emulator)" % (what, t.device))


def _check_cuda(what, *ts):
    for t in ts:
        if t is not None and not _runnable(t):
            raise _device_error(what, t)


def _backend(what, t):
    """What runs the op's kernels for tensor t: the CUDA device's Runtime, or inside emulated() the emulator for
    CPU tensors; anything else is kiln's device error (the raw torch.ops.kiln ops give it too)."""
    if t.is_cuda:
        return runtime(t.device)
    if t.device.type == "cpu" and _emulated_sm is not None:
        return _torch_emu.for_sm(_emulated_sm)
    raise _device_error(what, t)


# ---- LayerNorm ----


@torch.library.custom_op("kiln::layer_norm", mutates_args=())
def _layer_norm(x: torch.Tensor, weight: Optional[torch.Tensor], bias: Optional[torch.Tensor], eps: float,
                out_dtype: str, offset: int) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    rt = _backend("kiln::layer_norm", x)
    hidden = x.shape[-1]
    rows = x.numel() // hidden if hidden else 0
    x2 = x.contiguous()
    y = torch.empty(x.shape, dtype=_TORCH_DT[out_dtype], device=x.device)
    mean = torch.empty((rows,), dtype=torch.float32, device=x.device)
    rstd = torch.empty((rows,), dtype=torch.float32, device=x.device)
    if rows:
        w = weight.contiguous() if weight is not None else None
        b = bias.contiguous() if bias is not None else None
        rt.layer_norm(y, x2, w, b, eps=eps, mean=mean, rstd=rstd, stream=_stream(x), offset=offset)
    return y, mean, rstd


@_layer_norm.register_fake
def _layer_norm_fake(x, weight, bias, eps, out_dtype, offset):
    hidden = x.shape[-1]
    rows = x.numel() // hidden if hidden else 0
    return (x.new_empty(x.shape, dtype=_TORCH_DT[out_dtype]), x.new_empty((rows,), dtype=torch.float32),
            x.new_empty((rows,), dtype=torch.float32))


def _ln_setup(ctx, inputs, output):
    x, weight, bias, _eps, _out, offset = inputs
    _y, mean, rstd = output
    ctx.save_for_backward(x, weight, mean, rstd)
    ctx.bias_dtype = _DT[bias.dtype] if bias is not None else ""
    ctx.offset = offset


def _ln_backward(ctx, dy, _dmean, _drstd):
    x, weight, mean, rstd = ctx.saved_tensors
    dx, dw, db = _layer_norm_backward(dy, x, mean, rstd, weight, ctx.bias_dtype, None, ctx.offset)
    return dx, dw if weight is not None else None, db if ctx.bias_dtype else None, None, None, None


_layer_norm.register_autograd(_ln_backward, setup_context=_ln_setup)


def _grad_outputs(x, weight, bias_dtype):
    """dx like x; dweight like weight (empty without one); dbias in bias_dtype (empty when ''). With no rows
    no kernel runs: dweight and dbias are sums over nothing, zeros as torch gives."""
    hidden = x.shape[-1]
    alloc = torch.empty if x.numel() else torch.zeros
    dx = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    dw = (alloc((hidden,), dtype=weight.dtype, device=x.device) if weight is not None
          else torch.empty((0,), dtype=x.dtype, device=x.device))
    db = (alloc((hidden,), dtype=_TORCH_DT[bias_dtype], device=x.device) if bias_dtype
          else torch.empty((0,), dtype=x.dtype, device=x.device))
    return dx, dw, db


def _norm_backward(rms, dy, x, mean, rstd, weight, bias_dtype, dres, offset):
    """Runs kiln's two-kernel norm backward (dweight/dbias summed in a fixed order: the same bits every run)
    with its f32 workspace from torch's allocator, on torch's current stream. dres: the fused residual form's
    incoming gradient of h (added to dx); offset 1: zero-centered weights (g = dy * (1 + weight))."""
    rt = _backend("kiln::%s_norm_backward" % ("rms" if rms else "layer"), x)
    dx, dw, db = _grad_outputs(x, weight, bias_dtype)
    if x.numel():
        x, dy = x.contiguous(), dy.contiguous()
        w = weight.contiguous() if weight is not None else None
        dr = dres.contiguous() if dres is not None else None
        dwv = dw if weight is not None else None
        if rms:
            need = rt.rms_norm_backward_workspace(dx, dy, x, rstd, w, dwv, dr, offset=offset)
        else:
            dbv = db if bias_dtype else None
            need = rt.layer_norm_backward_workspace(dx, dy, x, mean, rstd, w, dwv, dbv, dr, offset=offset)
        ws = torch.empty(((need + 3) // 4,), dtype=torch.float32, device=x.device) if need else None
        if rms:
            rt.rms_norm_backward(dx, dy, x, rstd, w, dwv, dr, workspace=ws, stream=_stream(x), offset=offset)
        else:
            rt.layer_norm_backward(dx, dy, x, mean, rstd, w, dwv, dbv, dr, workspace=ws, stream=_stream(x),
                                   offset=offset)
    return dx, dw, db


@torch.library.custom_op("kiln::layer_norm_backward", mutates_args=())
def _layer_norm_backward(dy: torch.Tensor, x: torch.Tensor, mean: torch.Tensor, rstd: torch.Tensor,
                         weight: Optional[torch.Tensor], bias_dtype: str, dres: Optional[torch.Tensor], offset: int
                         ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return _norm_backward(False, dy, x, mean, rstd, weight, bias_dtype, dres, offset)


@_layer_norm_backward.register_fake
def _layer_norm_backward_fake(dy, x, mean, rstd, weight, bias_dtype, dres, offset):
    hidden = x.shape[-1]
    return (x.new_empty(x.shape), x.new_empty((hidden,) if weight is not None else (0,),
                                              dtype=weight.dtype if weight is not None else x.dtype),
            x.new_empty((hidden,) if bias_dtype else (0,), dtype=_TORCH_DT[bias_dtype] if bias_dtype else x.dtype))


def _norm_offset(what, offset, weight):
    """offset: 0, or 1 for zero-centered weights (the norm multiplies by 1 + weight, formed in f32; Gemma's and
    Qwen3-Next's RMSNorm, Liger's offset=1.0), which needs a weight."""
    if isinstance(offset, bool) or offset not in (0, 1):
        raise KilnArgumentError("%s: offset must be 0 or 1 (1: the norm multiplies by 1 + weight), got %r"
                                % (what, offset))
    if offset and weight is None:
        raise KilnArgumentError("%s: offset=1 multiplies by 1 + weight and needs a weight" % what)
    return int(offset)


def _norm_inputs(what, input, normalized_shape, weight, bias, out_dtype):
    """Checks a norm call as torch.nn.functional does; returns x as [..., hidden], weight and bias flat, the
    output dtype's name."""
    if isinstance(normalized_shape, int):
        normalized_shape = (normalized_shape,)
    normalized_shape = tuple(normalized_shape)
    nd = len(normalized_shape)
    if nd == 0 or tuple(input.shape[-nd:]) != normalized_shape:
        raise KilnArgumentError("%s: normalized_shape %s does not match the input's trailing dimensions %s"
                                % (what, list(normalized_shape), list(input.shape)))
    _check_cuda(what, input, weight, bias)
    xd = _dtype_name(input.dtype, what + ": input")
    yd = _dtype_name(out_dtype, what + ": out_dtype") if out_dtype is not None else xd
    for n, t in (("weight", weight), ("bias", bias)):
        if t is not None:
            _dtype_name(t.dtype, "%s: %s" % (what, n))
            if tuple(t.shape) != normalized_shape:
                raise KilnArgumentError("%s: %s has shape %s; expected %s" % (what, n, list(t.shape),
                                                                              list(normalized_shape)))
    if weight is not None and bias is not None and weight.dtype != bias.dtype:
        raise KilnArgumentError("%s: weight is %s and bias is %s; kiln takes one dtype for both"
                                % (what, weight.dtype, bias.dtype))
    hidden = math.prod(normalized_shape)
    x = input.reshape(input.shape[:input.dim() - nd] + (hidden,))
    w = weight.reshape(hidden) if weight is not None else None
    b = bias.reshape(hidden) if bias is not None else None
    return x, w, b, yd


def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5, out_dtype=None, offset=0):
    """torch.nn.functional.layer_norm on kiln's kernel, plus ``out_dtype`` (default: input's dtype) and
    ``offset`` (1: zero-centered weights, y = xhat * (1 + weight) + bias with 1 + weight formed in f32).
    weight and bias may have another dtype than input (bf16 activations with f32 weights). The backward
    runs kiln's LayerNorm backward kernels."""
    x, w, b, yd = _norm_inputs("layer_norm", input, normalized_shape, weight, bias, out_dtype)
    off = _norm_offset("layer_norm", offset, w)
    y, _mean, _rstd = _layer_norm(x, w, b, float(eps), yd, off)
    return y.reshape(input.shape)


# ---- RMSNorm ----


@torch.library.custom_op("kiln::rms_norm", mutates_args=())
def _rms_norm(x: torch.Tensor, weight: Optional[torch.Tensor], eps: float,
              out_dtype: str, offset: int) -> Tuple[torch.Tensor, torch.Tensor]:
    rt = _backend("kiln::rms_norm", x)
    hidden = x.shape[-1]
    rows = x.numel() // hidden if hidden else 0
    x2 = x.contiguous()
    y = torch.empty(x.shape, dtype=_TORCH_DT[out_dtype], device=x.device)
    rstd = torch.empty((rows,), dtype=torch.float32, device=x.device)
    if rows:
        w = weight.contiguous() if weight is not None else None
        rt.rms_norm(y, x2, w, eps=eps, rstd=rstd, stream=_stream(x), offset=offset)
    return y, rstd


@_rms_norm.register_fake
def _rms_norm_fake(x, weight, eps, out_dtype, offset):
    hidden = x.shape[-1]
    rows = x.numel() // hidden if hidden else 0
    return x.new_empty(x.shape, dtype=_TORCH_DT[out_dtype]), x.new_empty((rows,), dtype=torch.float32)


@torch.library.custom_op("kiln::rms_norm_backward", mutates_args=())
def _rms_norm_backward(dy: torch.Tensor, x: torch.Tensor, rstd: torch.Tensor, weight: Optional[torch.Tensor],
                       dres: Optional[torch.Tensor], offset: int) -> Tuple[torch.Tensor, torch.Tensor]:
    dx, dw, _db = _norm_backward(True, dy, x, None, rstd, weight, "", dres, offset)
    return dx, dw


@_rms_norm_backward.register_fake
def _rms_norm_backward_fake(dy, x, rstd, weight, dres, offset):
    return x.new_empty(x.shape), x.new_empty((x.shape[-1],) if weight is not None else (0,),
                                             dtype=weight.dtype if weight is not None else x.dtype)


def _rms_setup(ctx, inputs, output):
    x, weight, _eps, _out, offset = inputs
    _y, rstd = output
    ctx.save_for_backward(x, weight, rstd)
    ctx.offset = offset


def _rms_backward(ctx, dy, _drstd):
    x, weight, rstd = ctx.saved_tensors
    dx, dw = _rms_norm_backward(dy, x, rstd, weight, None, ctx.offset)
    return dx, dw if weight is not None else None, None, None, None


_rms_norm.register_autograd(_rms_backward, setup_context=_rms_setup)


def rms_norm(input, normalized_shape, weight=None, eps=None, out_dtype=None, offset=0):
    """torch.nn.functional.rms_norm on kiln's kernel (eps None: torch.finfo(input.dtype).eps, as torch), plus
    ``out_dtype`` (default: input's dtype) and ``offset`` (1: zero-centered weights, y = x * rstd * (1 + weight)
    with 1 + weight formed in f32, as Gemma computes it); weight may have another dtype than input. The backward
    runs kiln's RMSNorm backward kernels."""
    x, w, _b, yd = _norm_inputs("rms_norm", input, normalized_shape, weight, None, out_dtype)
    off = _norm_offset("rms_norm", offset, w)
    if eps is None:
        eps = torch.finfo(input.dtype).eps
    y, _rstd = _rms_norm(x, w, float(eps), yd, off)
    return y.reshape(input.shape)


def _kiln_options(what, out_dtype, offset, elementwise_affine):
    """Checks kiln's two options beyond torch's norm constructors."""
    if out_dtype is not None:
        _dtype_name(out_dtype, what + ": out_dtype")
    return _norm_offset(what, offset, True if elementwise_affine else None)


def _kiln_repr(m, torch_repr):
    return torch_repr + (", offset=1" if m.offset else "") + (
        ", out_dtype=%s" % m.out_dtype if m.out_dtype is not None else "")


class RMSNorm(torch.nn.RMSNorm):
    """torch.nn.RMSNorm on kiln's kernel (an instance of torch.nn.RMSNorm: same constructor, parameters, state_dict
    and printout), plus ``out_dtype`` (default: the input's) and ``offset``. ``dtype`` is the weight's dtype (default
    float32), so bf16 activations meet an f32 weight without a cast. offset=1: zero-centered weights as Gemma and
    Qwen3-Next store them, y = x * rstd * (1 + weight) (1 + weight formed in f32); the weight then starts at
    zeros."""

    def __init__(self, normalized_shape, eps=None, elementwise_affine=True, device=None, dtype=None, out_dtype=None,
                 offset=0):
        self.offset = _kiln_options("RMSNorm", out_dtype, offset, elementwise_affine)  # reset_parameters reads it
        self.out_dtype = out_dtype
        super().__init__(normalized_shape, eps, elementwise_affine, device=device, dtype=dtype)

    def reset_parameters(self):
        if self.weight is not None:
            (torch.nn.init.zeros_ if self.offset else torch.nn.init.ones_)(self.weight)

    def forward(self, input):
        return rms_norm(input, self.normalized_shape, self.weight, self.eps, out_dtype=self.out_dtype,
                        offset=self.offset)

    def extra_repr(self):
        return _kiln_repr(self, super().extra_repr())


class LayerNorm(torch.nn.LayerNorm):
    """torch.nn.LayerNorm on kiln's kernel (an instance of torch.nn.LayerNorm: same constructor, parameters,
    state_dict and printout), plus ``out_dtype`` (the output dtype; default: the input's) and ``offset``. ``dtype``
    is the parameters' dtype as in torch (default float32), so bf16 or f16 activations meet f32 weights without a
    cast. offset=1: zero-centered weights (y = xhat * (1 + weight) + bias; the weight then starts at zeros)."""

    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, bias=True, device=None, dtype=None,
                 out_dtype=None, offset=0):
        self.offset = _kiln_options("LayerNorm", out_dtype, offset, elementwise_affine)  # reset_parameters reads it
        self.out_dtype = out_dtype
        super().__init__(normalized_shape, eps, elementwise_affine, bias, device=device, dtype=dtype)

    def reset_parameters(self):
        if self.weight is not None:
            (torch.nn.init.zeros_ if self.offset else torch.nn.init.ones_)(self.weight)
        if self.bias is not None:
            torch.nn.init.zeros_(self.bias)

    def forward(self, input):
        return layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps, out_dtype=self.out_dtype,
                          offset=self.offset)

    def extra_repr(self):
        return _kiln_repr(self, super().extra_repr())


# ---- the pre-norm block's fused residual add ----


def _h_like(x, residual):
    return torch.empty(x.shape, dtype=residual.dtype, device=x.device)


@torch.library.custom_op("kiln::add_layer_norm", mutates_args=())
def _add_layer_norm(x: torch.Tensor, residual: torch.Tensor, weight: Optional[torch.Tensor],
                    bias: Optional[torch.Tensor], eps: float,
                    out_dtype: str, offset: int) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    rt = _backend("kiln::add_layer_norm", x)
    hidden = x.shape[-1]
    rows = x.numel() // hidden if hidden else 0
    y = torch.empty(x.shape, dtype=_TORCH_DT[out_dtype], device=x.device)
    h = _h_like(x, residual)
    mean = torch.empty((rows,), dtype=torch.float32, device=x.device)
    rstd = torch.empty((rows,), dtype=torch.float32, device=x.device)
    if rows:
        w = weight.contiguous() if weight is not None else None
        b = bias.contiguous() if bias is not None else None
        rt.layer_norm(y, x.contiguous(), w, b, eps=eps, mean=mean, rstd=rstd, stream=_stream(x),
                                     residual=residual.contiguous(), h=h, offset=offset)
    return y, h, mean, rstd


@_add_layer_norm.register_fake
def _add_layer_norm_fake(x, residual, weight, bias, eps, out_dtype, offset):
    rows = x.numel() // x.shape[-1] if x.shape[-1] else 0
    return (x.new_empty(x.shape, dtype=_TORCH_DT[out_dtype]), x.new_empty(x.shape, dtype=residual.dtype),
            x.new_empty((rows,), dtype=torch.float32), x.new_empty((rows,), dtype=torch.float32))


def _add_ln_setup(ctx, inputs, output):
    x, residual, weight, bias, _eps, _out, offset = inputs
    _y, h, mean, rstd = output
    ctx.save_for_backward(h, weight, mean, rstd)
    ctx.bias_dtype = _DT[bias.dtype] if bias is not None else ""
    ctx.x_dtype = x.dtype
    ctx.offset = offset


def _add_ln_backward(ctx, dy, dh, _dmean, _drstd):
    h, weight, mean, rstd = ctx.saved_tensors
    # d(x) = d(residual) = the norm's gradient of h plus the gradient reaching h from the residual stream
    dhx, dw, db = _layer_norm_backward(dy, h, mean, rstd, weight, ctx.bias_dtype, dh, ctx.offset)
    return (dhx.to(ctx.x_dtype), dhx, dw if weight is not None else None, db if ctx.bias_dtype else None, None, None,
            None)


_add_layer_norm.register_autograd(_add_ln_backward, setup_context=_add_ln_setup)


@torch.library.custom_op("kiln::add_rms_norm", mutates_args=())
def _add_rms_norm(x: torch.Tensor, residual: torch.Tensor, weight: Optional[torch.Tensor], eps: float,
                  out_dtype: str, offset: int) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    rt = _backend("kiln::add_rms_norm", x)
    hidden = x.shape[-1]
    rows = x.numel() // hidden if hidden else 0
    y = torch.empty(x.shape, dtype=_TORCH_DT[out_dtype], device=x.device)
    h = _h_like(x, residual)
    rstd = torch.empty((rows,), dtype=torch.float32, device=x.device)
    if rows:
        w = weight.contiguous() if weight is not None else None
        rt.rms_norm(y, x.contiguous(), w, eps=eps, rstd=rstd, residual=residual.contiguous(), h=h,
                                   stream=_stream(x), offset=offset)
    return y, h, rstd


@_add_rms_norm.register_fake
def _add_rms_norm_fake(x, residual, weight, eps, out_dtype, offset):
    rows = x.numel() // x.shape[-1] if x.shape[-1] else 0
    return (x.new_empty(x.shape, dtype=_TORCH_DT[out_dtype]), x.new_empty(x.shape, dtype=residual.dtype),
            x.new_empty((rows,), dtype=torch.float32))


def _add_rms_setup(ctx, inputs, output):
    x, _residual, weight, _eps, _out, offset = inputs
    _y, h, rstd = output
    ctx.save_for_backward(h, weight, rstd)
    ctx.x_dtype = x.dtype
    ctx.offset = offset


def _add_rms_backward(ctx, dy, dh, _drstd):
    h, weight, rstd = ctx.saved_tensors
    dhx, dw = _rms_norm_backward(dy, h, rstd, weight, dh, ctx.offset)
    return dhx.to(ctx.x_dtype), dhx, dw if weight is not None else None, None, None, None


_add_rms_norm.register_autograd(_add_rms_backward, setup_context=_add_rms_setup)


def _residual_checks(what, x, residual):
    _check_cuda(what, residual)
    _dtype_name(residual.dtype, what + ": residual")
    if tuple(residual.shape) != tuple(x.shape):
        raise KilnArgumentError("%s: residual has shape %s; expected the input's %s" % (what, list(residual.shape),
                                                                                       list(x.shape)))


def add_layer_norm(input, residual, normalized_shape, weight=None, bias=None, eps=1e-5, out_dtype=None, offset=0):
    """The pre-norm transformer block's pattern in one kernel: h = input + residual (rounded to residual's dtype,
    the residual stream), y = layer_norm(h) (offset as layer_norm). Returns (y, h); both take part in autograd (the
    backward runs kiln's residual-form LayerNorm backward: input and residual get the same gradient)."""
    x, w, b, yd = _norm_inputs("add_layer_norm", input, normalized_shape, weight, bias, out_dtype)
    off = _norm_offset("add_layer_norm", offset, w)
    _residual_checks("add_layer_norm", input, residual)
    y, h, _mean, _rstd = _add_layer_norm(x, residual.reshape(x.shape), w, b, float(eps), yd, off)
    return y.reshape(input.shape), h.reshape(input.shape)


def add_rms_norm(input, residual, normalized_shape, weight=None, eps=None, out_dtype=None, offset=0):
    """h = input + residual (in residual's dtype), y = rms_norm(h) (offset as rms_norm), in one kernel; returns
    (y, h). eps None: torch.finfo(h's dtype).eps. The backward runs kiln's residual-form RMSNorm backward."""
    x, w, _b, yd = _norm_inputs("add_rms_norm", input, normalized_shape, weight, None, out_dtype)
    off = _norm_offset("add_rms_norm", offset, w)
    _residual_checks("add_rms_norm", input, residual)
    if eps is None:
        eps = torch.finfo(residual.dtype).eps
    y, h, _rstd = _add_rms_norm(x, residual.reshape(x.shape), w, float(eps), yd, off)
    return y.reshape(input.shape), h.reshape(input.shape)


# ---- attention ----


@torch.library.custom_op("kiln::attention", mutates_args=())
def _attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float, dropout_p: float = 0.0,
               seed: int = 0, offset: int = 0) -> Tuple[torch.Tensor, torch.Tensor]:
    # q, k, v in SDPA's [batch, heads, seq, head_dim]; kiln reads [batch, seq, heads, head_dim] via strides.
    # causal is torch's is_causal: top-left aligned (query i sees key j iff j <= i), any seq_q, seq_k.
    # dropout_p > 0: kiln's Philox mask of (seed, offset, batch, head, query, key); the backward regenerates it.
    rt = _backend("kiln::attention", q)
    cv = "top_left" if causal else False
    drop = {"dropout": (dropout_p, seed, offset)} if dropout_p > 0 else {}
    b, h, sq, d = q.shape
    o = torch.empty((b, sq, h, v.shape[-1]), dtype=q.dtype, device=q.device)  # (v_head_dim: v's width)
    lse = torch.empty((b, h, sq), dtype=torch.float32, device=q.device)
    if b and sq:
        qs, ks, vs = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v))
        qkv = (qs.transpose(1, 2), ks.transpose(1, 2), vs.transpose(1, 2))
        # decoding shapes run split-KV; its f32 partials come from torch's allocator (stream-ordered)
        _splits, need = rt.attention_workspace(o, *qkv, lse=lse, causal=cv, **drop)
        ws = torch.empty(((need + 3) // 4,), dtype=torch.float32, device=q.device) if need else None
        rt.attention(o, *qkv, lse=lse, causal=cv, scale=scale, stream=_stream(q), workspace=ws, **drop)
    return o.transpose(1, 2), lse


@_attention.register_fake
def _attention_fake(q, k, v, causal, scale, dropout_p=0.0, seed=0, offset=0):
    b, h, sq, d = q.shape
    return q.new_empty((b, sq, h, v.shape[-1])).transpose(1, 2), q.new_empty((b, h, sq), dtype=torch.float32)


@torch.library.custom_op("kiln::attention_backward", mutates_args=())
def _attention_backward(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
                        lse: torch.Tensor, causal: bool, scale: float, deterministic: bool, dropout_p: float = 0.0,
                        seed: int = 0, offset: int = 0) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    # kiln's attention backward sequence (prep, dkdv, convert; deterministic: prep, dkdv, dq) through
    # kiln_attention_backward; tensors in SDPA's [batch, heads, seq, head_dim], read through strides.
    rt = _backend("kiln::attention_backward", q)
    cv = "top_left" if causal else False  # the forward's (torch's is_causal)
    drop = {"dropout": (dropout_p, seed, offset)} if dropout_p > 0 else {}  # the forward's mask, regenerated
    b, hq, sq, d = q.shape
    hkv, sk = k.shape[1], k.shape[2]
    dq = torch.empty((b, sq, hq, d), dtype=q.dtype, device=q.device)
    dk = torch.empty((b, sk, hkv, d), dtype=k.dtype, device=q.device)
    dv = torch.empty((b, sk, hkv, v.shape[-1]), dtype=v.dtype, device=q.device)
    if b:
        qs, ks, vs, ost, dos = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v, o, do))
        args = dict(dq=dq, dk=dk, dv=dv, dout=dos.transpose(1, 2), q=qs.transpose(1, 2), k=ks.transpose(1, 2),
                    v=vs.transpose(1, 2), o=ost.transpose(1, 2), lse=lse)
        nbytes = rt.attention_backward_workspace(causal=cv, deterministic=deterministic, **drop, **args)
        # the workspace from torch's allocator: ordered on the stream like the tensors themselves
        ws = torch.empty(((nbytes + 3) // 4,), dtype=torch.float32, device=q.device) if nbytes else None
        rt.attention_backward(causal=cv, scale=scale, deterministic=deterministic, workspace=ws,
                              stream=_stream(q), **drop, **args)
    return dq.transpose(1, 2), dk.transpose(1, 2), dv.transpose(1, 2)


@_attention_backward.register_fake
def _attention_backward_fake(do, q, k, v, o, lse, causal, scale, deterministic, dropout_p=0.0, seed=0, offset=0):
    b, hq, sq, d = q.shape
    hkv, sk = k.shape[1], k.shape[2]
    return (q.new_empty((b, sq, hq, d)).transpose(1, 2), k.new_empty((b, sk, hkv, d)).transpose(1, 2),
            v.new_empty((b, sk, hkv, v.shape[-1])).transpose(1, 2))


def _deterministic():
    f = getattr(torch, "are_deterministic_algorithms_enabled", None)
    return bool(f()) if f is not None else False


def _attn_setup(ctx, inputs, output):
    q, k, v, causal, scale, dropout_p, seed, offset = inputs
    o, lse = output
    ctx.save_for_backward(q, k, v, o, lse)
    ctx.causal, ctx.scale, ctx.dropout = causal, scale, (dropout_p, seed, offset)


def _attn_backward(ctx, do, dlse):
    # lse is an auxiliary output (kiln.torch's public functions drop it): its gradient is not propagated.
    # torch.use_deterministic_algorithms(True) picks kiln's deterministic sequence (no atomics, same bits
    # every run, about 1.4x the work).
    q, k, v, o, lse = ctx.saved_tensors
    dq, dk, dv = _attention_backward(do, q, k, v, o, lse, ctx.causal, ctx.scale, _deterministic(), *ctx.dropout)
    return dq, dk, dv, None, None, None, None, None


_attention.register_autograd(_attn_backward, setup_context=_attn_setup)


def _dropout_seed(like):
    """(seed, offset) for one dropout call from torch's default generator of like's device: the seed drawn from it
    (so torch.manual_seed makes runs repeat, and each call draws a new mask), below 2^53 (kiln's launch scalars are
    exact to there); offset 0 (the seed already differs per call)."""
    seed = torch.randint(0, 2 ** 53, (), device=like.device).item()  # the device's default generator
    return int(seed), 0


def unsupported_reason(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                       enable_gqa=False):
    """Why kiln cannot run this scaled_dot_product_attention call, or None when it can."""
    if attn_mask is not None and is_causal:
        return "attn_mask with is_causal=True: torch refuses the pair too (pass one of them)"
    if not (0 <= dropout_p < 1):
        return "dropout_p=%g: kiln's dropout takes 0 <= p < 1" % dropout_p
    if attn_mask is not None and dropout_p:
        return ("attn_mask with dropout_p=%g is not supported yet (the key-padding path runs each batch "
                "element on its own, which would repeat one dropout mask across them)" % dropout_p)
    ts = (query, key, value)
    if any(t.dim() not in (3, 4) for t in ts) or len({t.dim() for t in ts}) != 1:
        return "query/key/value must all be [batch, heads, seq, head_dim] (or [heads, seq, head_dim]), got %s" % (
            [list(t.shape) for t in ts])
    if len({t.dtype for t in ts}) != 1 or query.dtype not in _DT:
        return "query, key and value must share one dtype of float32, float16, bfloat16, got %s" % (
            [str(t.dtype) for t in ts])
    if any(not _runnable(t) for t in ts):
        return ("kiln runs on CUDA tensors; got %s (on the CPU, `with kiln.torch.emulated():` runs kiln's kernels "
                "on its emulator)" % [str(t.device) for t in ts])
    d, dv = query.shape[-1], value.shape[-1]
    if d not in HEAD_DIMS or key.shape[-1] != d or dv not in HEAD_DIMS:
        return "head_dim %d (key %d, value %d) is not one kiln generates; valid: a multiple of 8 from 8 to 256, " \
               "the same for query and key (value's may differ: v_head_dim)" % (d, key.shape[-1], dv)
    if key.shape[:-1] != value.shape[:-1]:
        return "key %s and value %s must have the same shape but the last dimension" % (list(key.shape),
                                                                                       list(value.shape))
    hq, hkv = query.shape[-3], key.shape[-3]
    if query.dim() == 4 and query.shape[0] != key.shape[0]:
        return "query batch %d differs from key batch %d" % (query.shape[0], key.shape[0])
    if hq != hkv and not enable_gqa:
        return "query has %d heads and key/value %d: pass enable_gqa=True as torch requires" % (hq, hkv)
    if hkv == 0 or hq % hkv:
        return "%d query heads are not a multiple of %d key/value heads" % (hq, hkv)
    if attn_mask is not None:  # a right-padding key mask maps onto key lengths (kiln/_sdpa_mask.py)
        lengths = _sdpa_mask.key_lengths(attn_mask, query, key)
        if isinstance(lengths, str):
            return lengths
        if dv != d and any(lengths) and any(n != key.shape[-2] for n in lengths):
            return ("attn_mask padding keys with value's head_dim %d != query's %d: the key-padding path runs kiln's "
                    "varlen kernel, which is not built with v_head_dim (pass value at query's head_dim, or no "
                    "padding)" % (dv, d))
    return None


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                                 enable_gqa=False):
    """torch.nn.functional.scaled_dot_product_attention's calling convention on kiln's attention kernel, for
    the cases kiln covers: attn_mask None or a key-padding mask (boolean, or its 0/-inf float form; the same for
    every head and query row; right padding: mapped onto per-sequence key lengths, kiln/_sdpa_mask.py),
    dropout_p in [0, 1) (kiln's Philox mask, seeded from torch's default generator for the device: not torch's
    own mask bits; not with attn_mask), head_dim any multiple of 8 up to 256 (forward and backward; value's may
    differ from query's and key's, as torch allows: [.., S, Ev] gives [.., L, Ev], MLA's qk 192 / v 128),
    GQA/MQA with enable_gqa=True, is_causal top-left aligned as torch's (any seq_q, seq_k), scale; anything
    else raises KilnArgumentError saying why (unsupported_reason() tells beforehand)."""
    why = unsupported_reason(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    if why is not None:
        raise KilnArgumentError("kiln attention: " + why)
    squeeze = query.dim() == 3
    if squeeze:
        query, key, value = query.unsqueeze(0), key.unsqueeze(0), value.unsqueeze(0)
    sc = float(scale) if scale is not None else 1.0 / math.sqrt(query.shape[-1])
    if attn_mask is not None:
        lengths = _sdpa_mask.key_lengths(attn_mask.unsqueeze(0) if squeeze and attn_mask.dim() == 3 else attn_mask,
                                         query, key)
        o = _sdpa_mask.attention(_attention, query, key, value, lengths, sc)
        return o.squeeze(0) if squeeze else o
    seed, offset = _dropout_seed(query) if dropout_p > 0 else (0, 0)
    o, _lse = _attention(query, key, value, bool(is_causal), sc, float(dropout_p), seed, offset)
    return o.squeeze(0) if squeeze else o


attention = scaled_dot_product_attention


# ---- swapping a model's norms for kiln's ----

_EPS_NAMES = ("eps", "variance_epsilon", "epsilon")  # where model code keeps an RMSNorm's epsilon


def _rms_structure(m):
    """(weight, eps) when m looks like an RMSNorm of model code (LlamaRMSNorm, GemmaRMSNorm, T5LayerNorm ...): no
    submodules, exactly one parameter, a 1-d `weight` in a dtype kiln takes, and a float epsilon; else None."""
    if next(m.children(), None) is not None:
        return None
    params = dict(m.named_parameters(recurse=False))
    w = params.get("weight")
    if len(params) != 1 or w is None or w.dim() != 1 or w.dtype not in _DT:
        return None
    eps = next((getattr(m, n) for n in _EPS_NAMES if isinstance(getattr(m, n, None), float)), None)
    return (w, eps) if eps is not None else None


def _probe_offset(m, rms, shape, eps, like):
    """What m's forward computes over the trailing dimensions `shape`: 0 when it is rms_norm (rms) or layer_norm with
    m's weight (and bias), 1 when it multiplies by (1 + weight) (Gemma's zero-centered weights), None when neither.
    A copy of the module is run once, its weight set to values in [0.5, 1.5) and its bias to small values (so that w
    and 1 + w stay far apart whatever the model's weights are; the model's module is neither run nor changed), on a
    small input in the dtype and device of `like` (a parameter of m) whose rows have a nonzero mean (a LayerNorm is
    then no RMSNorm), and compared with both forms in float64. A module on the meta device cannot be run."""
    if like.device.type == "meta":
        return None
    g = torch.Generator().manual_seed(0)
    x = (torch.randn((4,) + tuple(shape), generator=g) + 1).to(device=like.device, dtype=like.dtype)
    try:
        probe = copy.deepcopy(m)
        pw, pb = getattr(probe, "weight", None), None if rms else getattr(probe, "bias", None)
        with torch.no_grad():
            if pw is not None:
                pw.copy_(torch.rand(pw.shape, generator=g) + 0.5)
            if pb is not None:
                pb.copy_(torch.randn(pb.shape, generator=g) * 0.5)
            y = probe.forward(x)
    except Exception:  # a forward that takes more than the hidden states (a gated norm) is not one kiln's replaces
        return None
    if not isinstance(y, torch.Tensor) or y.shape != x.shape:
        return None
    xd, dims = x.double(), tuple(range(-len(shape), 0))
    if eps is None:
        eps = torch.finfo(x.dtype).eps  # torch's rms_norm default
    if rms:
        xhat = xd * torch.rsqrt(xd.pow(2).mean(dims, keepdim=True) + eps)
    else:
        c = xd - xd.mean(dims, keepdim=True)
        xhat = c * torch.rsqrt(c.pow(2).mean(dims, keepdim=True) + eps)
    tol = 8 * torch.finfo(like.dtype).eps  # the module's own roundings: to its dtype, maybe twice
    for offset in ((0, 1) if pw is not None else (0,)):
        ref = xhat * (pw.detach().double() + offset) if pw is not None else xhat
        ref = ref + pb.detach().double() if pb is not None else ref
        if ((y.double() - ref).abs().max() <= tol * max(ref.abs().max().item(), 1)).item():
            return offset
    return None


def _torch_norm_offset(m, rms):
    """For an instance of torch's nn.LayerNorm / nn.RMSNorm: 0 for the class itself; for a subclass (open_clip's
    LayerNorm that computes in f32, ...) what _probe_offset finds, provided it has no submodules and no parameters
    beyond weight and bias; None when kiln does not replace it (or its parameters are in a dtype kiln does not
    take)."""
    params = dict(m.named_parameters(recurse=False))
    if any(p.dtype not in _DT for p in params.values()):
        return None
    if type(m) in (torch.nn.LayerNorm, torch.nn.RMSNorm):
        return 0
    if next(m.children(), None) is not None or not set(params) <= {"weight", "bias"}:
        return None
    return _probe_offset(m, rms, m.normalized_shape, m.eps, next(iter(params.values()), torch.empty(0)))


def _kiln_norm_for(m):
    """kiln's replacement for module m, holding m's own parameter objects (so state_dict keys and values, and an
    optimizer's references, stay); None when m is not a norm kiln replaces."""
    if isinstance(m, (LayerNorm, RMSNorm)):
        return None
    if isinstance(m, torch.nn.LayerNorm):
        offset = _torch_norm_offset(m, False)
        if offset is None or (offset and m.weight is None):
            return None
        new = LayerNorm(m.normalized_shape, m.eps, m.elementwise_affine, m.bias is not None, device="meta",
                        offset=offset)
        new.weight, new.bias = m.weight, m.bias
    elif isinstance(m, torch.nn.RMSNorm):
        offset = _torch_norm_offset(m, True)
        if offset is None or (offset and m.weight is None):
            return None
        new = RMSNorm(m.normalized_shape, m.eps, m.elementwise_affine, device="meta", offset=offset)
        new.weight = m.weight
    else:
        found = _rms_structure(m)
        offset = _probe_offset(m, True, found[0].shape, found[1], found[0]) if found is not None else None
        if offset is None:
            return None
        new = RMSNorm(tuple(found[0].shape), found[1], device="meta", offset=offset)
        new.weight = found[0]
    return new.train(m.training)


def swap_norms(model):
    """Replaces, in place, every norm of `model` that kiln's kernels compute by kiln.torch's module: nn.LayerNorm by
    kt.LayerNorm, nn.RMSNorm by kt.RMSNorm, and the RMSNorm classes of model code (Llama's, Mistral's, Qwen's,
    T5's, Gemma's 1 + w as offset=1 ...) recognized by structure (no submodules, one 1-d `weight` parameter, a float
    `eps`/`variance_epsilon`) and by their math (run once on a small input and compared with x * rsqrt(mean(x^2) +
    eps) * w and * (1 + w) in float64). The new modules hold the old parameter objects: state_dict keys and values
    stay, and so do an optimizer's references. Norms in dtypes kiln does not take, other modules, and model-code
    norms on the meta device are left as they are. Returns the model (kiln's module when `model` is itself a norm).
    kt.LayerNorm / kt.RMSNorm are instances of torch's classes and print as they do."""
    top = _kiln_norm_for(model)
    if top is not None:
        return top
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            new = _kiln_norm_for(child)
            if new is not None:
                setattr(parent, name, new)
    return model

# ---- rotary embedding (FlashAttention's apply_rotary_emb; the rotary family, templates/rotary.lua) ----


def _rotary_launch(out, x, cos, sin, offsets, cu_seqlens, interleaved, offset, max_seqlen, conjugate):
    """One launch of the rotary family through the generic launch (x and out strided but for the last
    dim; out None: in place)."""
    varlen = cu_seqlens is not None
    heads, d = x.shape[-2], x.shape[-1]
    batch = cu_seqlens.shape[0] - 1 if varlen else x.shape[0]
    seq = max_seqlen if varlen else x.shape[1]
    if x.numel() == 0 or batch == 0 or seq == 0:
        return
    spec = "rotary dtype=%s cs=%s head_dim=%d rotary_dim=%d interleaved=%s varlen=%s inplace=%s" % (
        _DT[x.dtype], _DT[cos.dtype], d, 2 * cos.shape[1], *("true" if f else "false" for f in (
            interleaved, varlen, out is None)))
    tensors = {"x": x, "cos": cos, "sin": sin, "offsets": offsets}
    if out is not None:
        tensors["out"] = out
    if varlen:
        tensors["cu_seqlens"] = cu_seqlens
    scalars = {"batch": batch, "seq": seq, "heads": heads, "seqlen_ro": cos.shape[0], "offset": offset,
               "conjugate": 1 if conjugate else 0}
    if varlen:
        scalars["total"] = x.shape[0]
    backend = _backend("kiln apply_rotary_emb", x)
    if not x.is_cuda:  # CPU tensors inside emulated()
        backend.rotary(out, x, cos, sin, offsets, cu_seqlens, interleaved, offset, max_seqlen, conjugate)
        return
    backend.launch(spec, tensors=tensors, scalars=scalars, stream=_stream(x))


@torch.library.custom_op("kiln::rotary", mutates_args=())
def _rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, offsets: Optional[torch.Tensor],
            cu_seqlens: Optional[torch.Tensor], interleaved: bool, offset: int, max_seqlen: int,
            conjugate: bool) -> torch.Tensor:
    out = torch.empty(tuple(x.shape), dtype=x.dtype, device=x.device)
    _rotary_launch(out, x, cos, sin, offsets, cu_seqlens, interleaved, offset, max_seqlen, conjugate)
    return out


@_rotary.register_fake
def _rotary_fake(x, cos, sin, offsets, cu_seqlens, interleaved, offset, max_seqlen, conjugate):
    return x.new_empty(tuple(x.shape))


def _rotary_setup(ctx, inputs, output):
    _x, cos, sin, offsets, cu_seqlens, interleaved, offset, max_seqlen, conjugate = inputs
    ctx.save_for_backward(cos, sin, offsets, cu_seqlens)
    ctx.rotary = (interleaved, offset, max_seqlen, conjugate)


def _rotary_backward(ctx, dy):
    cos, sin, offsets, cu_seqlens = ctx.saved_tensors
    interleaved, offset, max_seqlen, conjugate = ctx.rotary
    # the gradient of a rotation by theta is the rotation by -theta (sin negated)
    dy = dy if dy.stride(-1) == 1 else dy.contiguous()
    dx = _rotary(dy, cos, sin, offsets, cu_seqlens, interleaved, offset, max_seqlen, not conjugate)
    return dx, None, None, None, None, None, None, None, None


_rotary.register_autograd(_rotary_backward, setup_context=_rotary_setup)


@torch.library.custom_op("kiln::rotary_", mutates_args=("x",))
def _rotary_inplace(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, offsets: Optional[torch.Tensor],
                    cu_seqlens: Optional[torch.Tensor], interleaved: bool, offset: int, max_seqlen: int) -> None:
    _rotary_launch(None, x, cos, sin, offsets, cu_seqlens, interleaved, offset, max_seqlen, False)


@_rotary_inplace.register_fake
def _rotary_inplace_fake(x, cos, sin, offsets, cu_seqlens, interleaved, offset, max_seqlen):
    return None


def apply_rotary_emb(x, cos, sin, interleaved=False, inplace=False, seqlen_offsets=0, cu_seqlens=None, max_seqlen=None):
    """FlashAttention's flash_attn.layers.rotary.apply_rotary_emb on kiln's rotary kernel.

    x: [batch, seqlen, nheads, headdim], or [total_seqlen, nheads, headdim] with cu_seqlens (int32,
    batch + 1) and max_seqlen; cos, sin: [seqlen_ro, rotary_dim / 2], any float dtype (x's or f32);
    the first rotary_dim dims rotate (GPT-NeoX halves; GPT-J pairs with interleaved=True) at positions
    s + seqlen_offsets (an int or an int32/int64 tensor [batch]); positions past the table are not
    rotated. x may be strided (q or k inside a packed qkv) but for its last dim. Autograd: the backward is
    the same kernel rotating by -theta. inplace=True rotates x itself (through a copy when x needs a
    gradient)."""
    what = "kiln apply_rotary_emb"
    _check_cuda(what, x, cos, sin, cu_seqlens)
    _dtype_name(x.dtype, what + ": x")
    _dtype_name(cos.dtype, what + ": cos")
    if sin.dtype != cos.dtype or tuple(sin.shape) != tuple(cos.shape) or cos.dim() != 2:
        raise KilnArgumentError("%s: cos and sin must be [seqlen_ro, rotary_dim / 2] of one shape and dtype, got %s %s "
                                "and %s %s" % (what, tuple(cos.shape), cos.dtype, tuple(sin.shape), sin.dtype))
    varlen = cu_seqlens is not None
    if x.dim() != (3 if varlen else 4):
        raise KilnArgumentError("%s: x must be %s, got shape %s" % (
            what, "[total, nheads, headdim] with cu_seqlens" if varlen else "[batch, seqlen, nheads, headdim]",
            tuple(x.shape)))
    if 2 * cos.shape[1] > x.shape[-1] or cos.shape[1] == 0:
        raise KilnArgumentError("%s: rotary_dim = 2 * cos.shape[1] = %d must be 2..headdim (%d)"
                                % (what, 2 * cos.shape[1], x.shape[-1]))
    if varlen and max_seqlen is None:
        raise KilnArgumentError("%s: max_seqlen is needed with cu_seqlens" % what)
    batch = cu_seqlens.shape[0] - 1 if varlen else x.shape[0]
    if isinstance(seqlen_offsets, int):
        offset, offsets = seqlen_offsets, None
    else:
        offset, offsets = 0, seqlen_offsets if seqlen_offsets.dtype == torch.int32 else seqlen_offsets.to(torch.int32)
        if tuple(offsets.shape) != (batch,):
            raise KilnArgumentError("%s: seqlen_offsets must be an int or a tensor [batch=%d], got shape %s"
                                    % (what, batch, tuple(offsets.shape)))
    if varlen and cu_seqlens.dtype != torch.int32:
        cu_seqlens = cu_seqlens.to(torch.int32)
    cos, sin = cos.contiguous(), sin.contiguous()
    ms = int(max_seqlen) if varlen else 0
    if inplace and x.stride(-1) == 1 and not x.requires_grad:
        _rotary_inplace(x, cos, sin, offsets, cu_seqlens, bool(interleaved), int(offset), ms)
        return x
    xs = x if x.stride(-1) == 1 else x.contiguous()
    out = _rotary(xs, cos, sin, offsets, cu_seqlens, bool(interleaved), int(offset), ms, False)
    return x.copy_(out) if inplace else out
