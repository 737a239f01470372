"""kiln._torch_emu - kiln.torch's emulated path: the launches kiln.torch's ops make, run for CPU tensors on kiln's
CPU emulator (inside ``kiln.torch.emulated()``).

EmulatedRuntime answers the calls kiln.torch's ops make of a kiln.Runtime (layer_norm, rms_norm, their backwards
and workspace sizes, attention and attention_backward) with the same kernels, picked as the runtime picks them
(the fixed-hidden variant, else the loop form; the norm backward's blocks capped by the device's size, then the
norm_reduce kernel its metadata names), generated for the emulated SM and run on the emulator. Inputs are read
from the tensors (copied only when not contiguous or not aligned); each output is computed into a private
buffer poisoned with NaN first (an element a kernel misses shows) and then copied into its tensor. The norm
backward's workspace is the caller's tensor itself, as on a GPU. Attention runs unsplit (the GPU runtime's
split-KV decoding path is not emulated).
"""

import numpy as np
import torch

from . import emulate
from ._np import BF16, aligned_empty, as_kiln_array
from .errors import KilnArgumentError, KilnSpecError

# Multiprocessors of the emulated device: the norm backward runs at most SMS * (1024 / threads) blocks, as the
# runtime sizes it for a GPU, so that with more rows than that each block loops over several row groups.
SMS = 2

_DT = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16"}


def _name(t, what):
    if t.device.type != "cpu":
        raise KilnArgumentError("%s: the emulated path takes CPU tensors; this one is on %s" % (what, t.device))
    if t.dtype not in _DT:
        raise KilnArgumentError("%s: dtype %s is not one kiln kernels take; valid: torch.float32, torch.float16, "
                                "torch.bfloat16" % (what, t.dtype))
    return _DT[t.dtype]


def _np(t, what):
    """A numpy array sharing t's memory (bf16 as ml_dtypes.bfloat16)."""
    _name(t, what)
    t = t.detach()
    if t.dtype == torch.bfloat16:
        if BF16 is None:
            raise KilnArgumentError("%s: bf16 tensors need the ml_dtypes package on the emulated path" % what)
        return t.view(torch.int16).numpy().view(BF16)
    return t.numpy()


def _input(t, what):
    """t as a C-contiguous, 64-byte aligned array the kernel reads (t's own memory when it already is)."""
    return None if t is None else as_kiln_array(_np(t, what), _name(t, what), what)


def _output(t, what):
    """A private aligned array for output t, poisoned: every byte 0xFF is NaN in each float type."""
    if t is None:
        return None
    a = aligned_empty(tuple(t.shape), _name(t, what))
    a.view(np.uint8)[...] = 0xFF
    return a


def _store(t, a):
    """Copies the kernel's output a into tensor t."""
    if t is None:
        return
    src = torch.from_numpy(np.ascontiguousarray(a).view(np.int16 if t.dtype == torch.bfloat16 else a.dtype))
    with torch.no_grad():
        t.copy_(src.view(t.dtype).reshape(t.shape))


def _slopes(t):
    """ALiBi slopes (a CPU f32 tensor, or None) as the numpy array kiln.emulate takes."""
    return None if t is None else _np(t.contiguous(), "attention: alibi_slopes")


def _idx(t):
    """An int32 index tensor (cu_seqlens, block_table, ...; or None) as the numpy array kiln.emulate takes."""
    return None if t is None else t.detach().to(torch.int32).contiguous().numpy()


def _hidden_rows(x, what):
    if x.dim() == 0 or x.shape[-1] == 0:
        raise KilnArgumentError("%s: x must be [..., hidden] with hidden >= 1, got shape %s" % (what, list(x.shape)))
    return x.shape[-1], x.numel() // x.shape[-1]


def _split(meta):
    """(the stats kernel's spec, column ranges) of a split backward form from its launch description, else None."""
    lines = meta["launch"].splitlines()
    before = [l[len("before "):] for l in lines if l.startswith("before ")]
    problem = [l.split()[2] for l in lines if l.startswith("problem ")]
    return (before[0], int(problem[0])) if before and problem else None


def _launch(kern, args, problem=None, grid=None, nullable=()):
    """Runs kern with the arguments of `args` it takes (by name), as the runtime's typed helpers fill them."""
    names = {p["name"] for p in kern.params}
    kern.run(problem=problem, grid=grid, nullable=nullable, **{n: v for n, v in args.items() if n in names})


class EmulatedRuntime:
    """The kiln.Runtime calls kiln.torch makes, for CPU tensors on the emulator of one SM."""

    def __init__(self, sm):
        self.sm = sm

    def __repr__(self):
        return "<kiln.torch emulated runtime sm_%d>" % self.sm

    def _pick(self, spec, hidden):
        """The fixed-hidden variant of spec (a '%s' where hidden goes) when the template offers it, else the loop
        form, as the runtime picks."""
        try:
            return emulate.load(spec % hidden, self.sm)
        except KilnSpecError:
            return emulate.load(spec % "launch", self.sm)

    # ---- norms, forward ----

    def _norm_forward(self, rms, y, x, weight, bias, eps, mean, rstd, residual, h, offset):
        what = "rms_norm" if rms else "layer_norm"
        hidden, rows = _hidden_rows(x, what)
        if (residual is None) != (h is None):
            raise KilnArgumentError("%s: residual and h go together" % what)
        xd, yd = _name(x, what + ": x"), _name(y, what + ": y")
        wt = weight if weight is not None else bias
        wd = _name(wt, what + ": weight") if wt is not None else xd
        r = None if residual is None else _name(residual, what + ": residual")
        spec = emulate.norm_spec(rms, xd, wd, yd, weight is not None, bias is not None, offset, r)
        if not rows:
            return
        kern = self._pick(spec, hidden)
        outs = {"y": y, "mean": mean, "rstd": rstd, "h": h}
        arrs = {n: _output(t, "%s: %s" % (what, n)) for n, t in outs.items()}
        args = dict(arrs, x=_input(x, what + ": x"), weight=_input(weight, what + ": weight"),
                    bias=_input(bias, what + ": bias"), residual=_input(residual, what + ": residual"),
                    rows=rows, hidden=hidden, eps=float(eps))
        _launch(kern, args, problem=(rows,))
        for n, t in outs.items():
            _store(t, arrs[n])

    def layer_norm(self, y, x, weight=None, bias=None, eps=1e-5, mean=None, rstd=None, stream=None, residual=None,
                   h=None, offset=0):
        self._norm_forward(False, y, x, weight, bias, eps, mean, rstd, residual, h, offset)

    def rms_norm(self, y, x, weight=None, eps=1e-6, rstd=None, residual=None, h=None, stream=None, offset=0):
        self._norm_forward(True, y, x, weight, None, eps, None, rstd, residual, h, offset)

    # ---- norms, backward (two kernels: the rows, then norm_reduce over the workspace) ----

    def _bwd_plan(self, rms, dx, dy, x, weight, dbias, dres, offset):
        """(kernel, blocks, workspace bytes) as kiln_norm_backward_workspace sizes them on a GPU of SMS
        multiprocessors."""
        what = "rms_norm_backward" if rms else "layer_norm_backward"
        hidden, rows = _hidden_rows(x, what)
        xd, dyd, dxd = _name(x, what + ": x"), _name(dy, what + ": dy"), _name(dx, what + ": dx")
        wd = _name(weight, what + ": weight") if weight is not None else (
            _name(dbias, what + ": dbias") if dbias is not None else xd)
        res = "" if dres is None else " residual=true r=%s" % _name(dres, what + ": dres")
        if rms:
            spec = "rmsnorm_bwd x=%s w=%s dy=%s dx=%s hidden=%%s weight=%s offset=%d%s" % (
                xd, wd, dyd, dxd, "true" if weight is not None else "false", offset, res)
        else:
            spec = "layernorm_bwd x=%s w=%s dy=%s dx=%s hidden=%%s weight=%s bias=%s offset=%d%s" % (
                xd, wd, dyd, dxd, "true" if weight is not None else "false", "true" if dbias is not None else "false",
                offset, res)
        kern = self._pick(spec, hidden)
        m = kern.meta
        tile = m["grid_tile"][0] or 1
        threads = m["block"][0] * m["block"][1] * m["block"][2]
        blocks = min(-(-rows // tile), SMS * max(1024 // threads, 1)) if rows else 0
        nbytes = m["ws_slabs"] * blocks * (m["ws_rows_per_block"] or 1) * hidden * 4
        if _split(m):  # a split form's row statistics follow the partial rows (16-byte aligned, as the runtime carves)
            nbytes = -(-nbytes // 16) * 16 + rows * (1 if rms else 2) * 4
        return kern, blocks, nbytes

    def _norm_backward(self, rms, dx, dy, x, mean, rstd, weight, dweight, dbias, dres, workspace, offset):
        what = "rms_norm_backward" if rms else "layer_norm_backward"
        kern, blocks, nbytes = self._bwd_plan(rms, dx, dy, x, weight, dbias, dres, offset)
        if not blocks:
            return
        hidden, rows = _hidden_rows(x, what)
        m = kern.meta
        ws = None
        if nbytes:
            have = workspace.numel() * workspace.element_size() if workspace is not None else 0
            if workspace is None or have < nbytes or workspace.dtype != torch.float32 or not workspace.is_contiguous():
                raise KilnArgumentError("%s: '%s' needs a contiguous f32 workspace of %d bytes, got %s" % (
                    what, m["spec"], nbytes, "none" if workspace is None else "%d bytes of %s" % (have, workspace.dtype)))
            ws = _np(workspace, what + ": workspace")  # the caller's memory, as on a GPU
        parts = blocks * (m["ws_rows_per_block"] or 1)
        outs = {"dx": dx, "dweight": dweight, "dbias": dbias}
        arrs = {n: _output(t, "%s: %s" % (what, n)) for n, t in outs.items()}
        args = dict(arrs, ws=ws, dy=_input(dy, what + ": dy"), x=_input(x, what + ": x"),
                    mean=_input(mean, what + ": mean"), rstd=_input(rstd, what + ": rstd"),
                    weight=_input(weight, what + ": weight"), dres=_input(dres, what + ": dres"),
                    rows=rows, hidden=hidden, cols=hidden, parts=parts)
        split = _split(m)
        if split:  # form=split2/split4 (docs/norms.md): the row statistics kernel, then the column ranges on grid y
            wsf = ws.reshape(-1).view(np.float32)
            off = -(-m["ws_slabs"] * parts * hidden // 4) * 4
            args["rs"] = wsf[off:off + rows * (1 if rms else 2)]
            args["ws"] = wsf[:m["ws_slabs"] * parts * hidden] if m["ws_slabs"] else None
            _launch(emulate.load(split[0], self.sm), args, grid=(rows,))
        _launch(kern, args, grid=(blocks, split[1] if split else 1), nullable=() if nbytes and m["ws_slabs"] else ("ws",))
        if m["ws_slabs"]:
            # norm_reduce sums the partial rows in a fixed order; slab 0 is dweight when there is one, else dbias
            # (the kernel picks by which of them is NULL)
            _launch(emulate.load(m["then_spec"], self.sm), args, problem=(hidden, m["ws_slabs"]),
                    nullable=("dweight", "dbias"))
        for n, t in outs.items():
            _store(t, arrs[n])

    def layer_norm_backward(self, dx, dy, x, mean, rstd, weight=None, dweight=None, dbias=None, dres=None,
                            workspace=None, stream=None, offset=0):
        self._norm_backward(False, dx, dy, x, mean, rstd, weight, dweight, dbias, dres, workspace, offset)

    def rms_norm_backward(self, dx, dy, x, rstd, weight=None, dweight=None, dres=None, workspace=None, stream=None,
                          offset=0):
        self._norm_backward(True, dx, dy, x, None, rstd, weight, dweight, None, dres, workspace, offset)

    def layer_norm_backward_workspace(self, dx, dy, x, mean, rstd, weight=None, dweight=None, dbias=None, dres=None,
                                      offset=0):
        return self._bwd_plan(False, dx, dy, x, weight, dbias, dres, offset)[2]

    def rms_norm_backward_workspace(self, dx, dy, x, rstd, weight=None, dweight=None, dres=None, offset=0):
        return self._bwd_plan(True, dx, dy, x, weight, None, dres, offset)[2]

    # ---- attention ----

    def attention_workspace(self, o, q, k, v, lse=None, causal=False, splits=0, **mask):
        return 1, 0  # one split: the emulated path runs the unsplit kernel

    def attention(self, o, q, k, v, lse=None, causal=False, scale=None, stream=None, splits=0, workspace=None,
                  window=None, softcap=None, alibi_slopes=None, dropout=None, path="auto"):
        """q, k, v, o: [batch, seq, heads, head_dim] (any strides); lse: f32 [batch, heads_q, seq_q]; window,
        softcap, alibi_slopes (a CPU f32 tensor), dropout (p, seed, offset), path as kiln.emulate.attention's."""
        out, lse_out = emulate.attention(*(_np(t, "attention: " + n) for t, n in ((q, "q"), (k, "k"), (v, "v"))),
                                         causal=causal, sm=self.sm, scale=scale, out_dtype=_name(o, "attention: o"),
                                         return_lse=True, window=window, softcap=softcap,
                                         alibi_slopes=_slopes(alibi_slopes), dropout=dropout, path=path)
        _store(o, out)
        _store(lse, lse_out)

    def attention_backward_workspace(self, q, k, v, o, dout, lse, dq, dk, dv, causal=False, deterministic=False,
                                     **mask):
        return 0  # emulate.attention_backward keeps its delta and dQ accumulator in private buffers

    def attention_backward(self, dq, dk, dv, dout, q, k, v, o, lse, causal=False, scale=None, deterministic=False,
                           workspace=None, stream=None, window=None, softcap=None, alibi_slopes=None,
                           dropout=None, path="auto"):
        arrs = [_np(t, "attention_backward: " + n) for t, n in ((q, "q"), (k, "k"), (v, "v"), (dout, "dout"),
                                                                (o, "o"), (lse, "lse"))]
        grads = emulate.attention_backward(*arrs[:4], o=arrs[4], lse=arrs[5], causal=causal, sm=self.sm, scale=scale,
                                           deterministic=deterministic, grad_dtype=_name(dq, "attention_backward: dq"),
                                           window=window, softcap=softcap, alibi_slopes=_slopes(alibi_slopes),
                                           dropout=dropout, path=path)
        for t, a in zip((dq, dk, dv), grads):
            _store(t, a)

    # ---- varlen and paged KV cache (kiln.Runtime's _rt_varlen.py calls) ----

    def attention_varlen(self, o, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, lse=None,
                         causal=False, scale=None, stream=None, seqused_k=None, window=None, softcap=None,
                         alibi_slopes=None, dropout=None, dropout_mask=None):
        """Packed q, k, v, o [total, heads, head_dim]; lse f32 [heads_q, total_q]; as kiln.emulate.attention_varlen
        (dropout_mask: int32 [batch, heads_q, max_seqlen_q, max_seqlen_k] receives the keep mask)."""
        w = "attention_varlen"
        got = emulate.attention_varlen(
            *(_np(t, "%s: %s" % (w, n)) for t, n in ((q, "q"), (k, "k"), (v, "v"))), _idx(cu_seqlens_q),
            _idx(cu_seqlens_k), max_seqlen_q, max_seqlen_k, causal=causal, sm=self.sm, scale=scale,
            out_dtype=_name(o, w + ": o"), return_lse=True, window=window, softcap=softcap,
            alibi_slopes=_slopes(alibi_slopes), seqused_k=_idx(seqused_k), dropout=dropout,
            return_mask=dropout_mask is not None)
        out, lse_out = got[:2]
        if dropout_mask is not None:
            _store(dropout_mask, got[2])
        _store(o, out)
        _store(lse, lse_out)

    def attention_varlen_backward_workspace(self, *args, **kwargs):
        return 0  # emulate.attention_varlen_backward keeps its delta and dQ accumulator in private buffers

    def attention_varlen_backward(self, dq, dk, dv, dout, q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                  max_seqlen_k, causal=False, scale=None, deterministic=False, workspace=None,
                                  stream=None, window=None, softcap=None, alibi_slopes=None, dropout=None):
        w = "attention_varlen_backward"
        arrs = [_np(t, "%s: %s" % (w, n)) for t, n in ((q, "q"), (k, "k"), (v, "v"), (dout, "dout"), (o, "o"),
                                                       (lse, "lse"))]
        grads = emulate.attention_varlen_backward(
            *arrs[:4], _idx(cu_seqlens_q), _idx(cu_seqlens_k), o=arrs[4], lse=arrs[5], max_seqlen_q=max_seqlen_q,
            max_seqlen_k=max_seqlen_k, causal=causal, sm=self.sm, scale=scale, deterministic=deterministic,
            grad_dtype=_name(dq, w + ": dq"), window=window, softcap=softcap, alibi_slopes=_slopes(alibi_slopes),
            dropout=dropout)
        for t, a in zip((dq, dk, dv), grads):
            _store(t, a)

    def attention_kvcache_workspace(self, *args, **kwargs):
        return 1, 0  # one split: the emulated path runs the unsplit kernel

    def attention_kvcache(self, o, q, k_cache, v_cache, block_table, cache_seqlens, cache_batch_idx=None,
                          cache_leftpad=None, k_new=None, v_new=None, seq_k=0, lse=None, causal=False, scale=None,
                          stream=None, splits=0, workspace=None, window=None, softcap=None, alibi_slopes=None,
                          rotary=None, rotary_cos=None, rotary_sin=None):
        """As kiln.emulate.attention_kvcache; the appended keys and values land in k_cache and v_cache."""
        w = "attention_kvcache"
        caches = [_input(t, "%s: %s" % (w, n)) for t, n in ((k_cache, "k_cache"), (v_cache, "v_cache"))]
        new = [None if t is None else _np(t, "%s: %s" % (w, n)) for t, n in ((k_new, "k_new"), (v_new, "v_new"))]
        out, lse_out = emulate.attention_kvcache(
            _np(q, w + ": q"), *caches, _idx(block_table), _idx(cache_seqlens), _idx(cache_batch_idx),
            _idx(cache_leftpad), *new, causal=causal, sm=self.sm, scale=scale, out_dtype=_name(o, w + ": o"),
            return_lse=True, window=window, softcap=softcap, alibi_slopes=_slopes(alibi_slopes), rotary=rotary,
            rotary_cos=None if rotary_cos is None else _np(rotary_cos, w + ": rotary_cos"),
            rotary_sin=None if rotary_sin is None else _np(rotary_sin, w + ": rotary_sin"))
        if k_new is not None:
            for t, a in zip((k_cache, v_cache), caches):
                if a.ctypes.data != t.data_ptr():  # the kernel appended into a copy
                    _store(t, a)
        _store(o, out)
        _store(lse, lse_out)

    def rotary(self, out, x, cos, sin, offsets, cu_seqlens, interleaved, offset, max_seqlen, conjugate):
        """The rotary family on x (out None: in place), as kiln.emulate.apply_rotary_emb runs it."""
        what = "kiln apply_rotary_emb (emulated)"
        offs = offset if offsets is None else offsets.detach().to(torch.int32).numpy()
        cu = None if cu_seqlens is None else cu_seqlens.detach().to(torch.int32).numpy()
        xa = _input(x.contiguous(), what)
        got = emulate.apply_rotary_emb(xa, _input(cos.contiguous(), what), _input(sin.contiguous(), what),
                                       interleaved=interleaved, inplace=out is None, seqlen_offsets=offs,
                                       cu_seqlens=cu, max_seqlen=max_seqlen if cu is not None else None,
                                       conjugate=conjugate, sm=self.sm)
        _store(x if out is None else out, got)


_by_sm = {}


def for_sm(sm):
    """The EmulatedRuntime of an SM (one per process; the emulator and its kernels are per thread)."""
    rt = _by_sm.get(sm)
    if rt is None:
        rt = _by_sm[sm] = EmulatedRuntime(sm)
    return rt
