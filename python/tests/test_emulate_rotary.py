"""kiln.emulate.apply_rotary_emb (the rotary family) against a float64 numpy reference of FlashAttention's semantics."""

import numpy as np
import pytest

import kiln
import kiln.emulate as ke
from kiln.errors import KilnArgumentError

ml_dtypes = pytest.importorskip("ml_dtypes")
NP = {"f32": np.float32, "f16": np.float16, "bf16": ml_dtypes.bfloat16}
# |out - ref| <= TOL * max(|ref|, 1): f32 math, one rounding to the dtype
TOL = {"f32": 1e-6, "f16": 1e-3, "bf16": 8e-3}


def tables(seqlen_ro, rdim, dtype):
    th = np.arange(seqlen_ro)[:, None] * 10000.0 ** (-np.arange(0, rdim, 2) / rdim)[None, :]
    return np.cos(th).astype(NP[dtype]), np.sin(th).astype(NP[dtype])


def reference(x, cos, sin, interleaved, offsets, cu_seqlens, conjugate):
    """float64: rotate the first rotary_dim dims of every (token, head) row at its position."""
    x = np.asarray(x, np.float64)
    c, s = np.asarray(cos, np.float64), np.asarray(sin, np.float64) * (-1 if conjugate else 1)
    r = 2 * c.shape[1]
    out = x.copy()
    rows = x.reshape(-1, x.shape[-2], x.shape[-1]) if cu_seqlens is None else x
    seqs = x.shape[1] if cu_seqlens is None else None
    res = out.reshape(rows.shape)
    for t in range(rows.shape[0]):
        if cu_seqlens is None:
            b, pos = t // seqs, t % seqs
        else:
            b = int(np.searchsorted(cu_seqlens, t, side="right")) - 1
            pos = t - cu_seqlens[b]
        pos += offsets if np.isscalar(offsets) else offsets[b]
        if not 0 <= pos < c.shape[0]:
            cc, ss = np.ones(r // 2), np.zeros(r // 2)
        else:
            cc, ss = c[pos], s[pos]
        v = rows[t, :, :r]
        x0, x1 = (v[:, 0::2], v[:, 1::2]) if interleaved else (v[:, : r // 2], v[:, r // 2:])
        y0, y1 = x0 * cc - x1 * ss, x1 * cc + x0 * ss
        if interleaved:
            res[t, :, 0:r:2], res[t, :, 1:r:2] = y0, y1
        else:
            res[t, :, : r // 2], res[t, :, r // 2: r] = y0, y1
    return out


def check(got, ref, dtype):
    err = np.abs(np.asarray(got, np.float64) - ref)
    assert np.all(err <= TOL[dtype] * np.maximum(np.abs(ref), 1)), "max err %g" % err.max()


@pytest.mark.parametrize("dt,cs,d,rdim,interleaved,sm", [
    ("bf16", "bf16", 64, 64, False, 75), ("f16", "f32", 64, 32, True, 80), ("f32", "f32", 96, 24, False, 90),
    ("bf16", "f32", 128, 128, True, 120)])
def test_dense_matches_float64(dt, cs, d, rdim, interleaved, sm):
    rng = np.random.default_rng(1)
    x = rng.normal(0, 1, (2, 7, 3, d)).astype(NP[dt])
    cos, sin = tables(12, rdim, cs)
    offsets = np.array([-1, 4], np.int32)  # token 0 of sequence 0 at position -1: not rotated
    out = ke.apply_rotary_emb(x, cos, sin, interleaved=interleaved, seqlen_offsets=offsets, sm=sm)
    assert out.dtype == x.dtype and out.shape == x.shape
    check(out, reference(x, cos, sin, interleaved, offsets, None, False), dt)
    # the dims past rotary_dim pass through bit for bit
    assert np.array_equal(out[..., rdim:].view(np.uint8), x[..., rdim:].view(np.uint8))


def test_varlen_int_offset_in_place_and_backward():
    rng = np.random.default_rng(2)
    cu = np.array([0, 5, 5, 6, 13], np.int32)  # lengths 5, 0, 1, 7
    x = rng.normal(0, 1, (13, 4, 64)).astype(np.float16)
    cos, sin = tables(12, 48, "f16")
    ref = reference(x, cos, sin, False, 3, cu, False)
    y = x.copy()
    got = ke.apply_rotary_emb(y, cos, sin, inplace=True, seqlen_offsets=3, cu_seqlens=cu, max_seqlen=7, twice=True)
    assert got is y
    check(y, ref, "f16")
    # the backward rotates by -theta: dx = R(-theta) dy
    dy = rng.normal(0, 1, x.shape).astype(np.float16)
    dx = ke.apply_rotary_emb(dy, cos, sin, seqlen_offsets=3, cu_seqlens=cu, max_seqlen=7, conjugate=True)
    check(dx, reference(dy, cos, sin, False, 3, cu, True), "f16")


def test_bad_arguments_say_what_is_wrong():
    x = np.zeros((1, 2, 1, 8), np.float32)
    cos, sin = tables(4, 8, "f32")
    with pytest.raises(KilnArgumentError, match="rotary_dim"):
        ke.apply_rotary_emb(x, *tables(4, 16, "f32"))
    with pytest.raises(KilnArgumentError, match="max_seqlen"):
        ke.apply_rotary_emb(x[0], cos, sin, cu_seqlens=np.array([0, 2], np.int32))
    with pytest.raises(KilnArgumentError, match="seqlen_offsets"):
        ke.apply_rotary_emb(x, cos, sin, seqlen_offsets=np.zeros(3, np.int32))
    with pytest.raises(KilnArgumentError, match="share a dtype"):
        ke.apply_rotary_emb(x, cos, sin.astype(np.float16))


def test_generic_run_takes_the_optional_offsets_as_none():
    k = ke.load("rotary dtype=f32 head_dim=8", sm=80)
    x = np.ones((1, 1, 1, 8), np.float32)
    out = np.empty_like(x)
    cos, sin = tables(2, 8, "f32")
    k.run(problem=(1, 1, 1), out=out, x=x, cos=cos, sin=sin, offsets=None, batch=1, seq=1, heads=1, seqlen_ro=2,
          offset=0, conjugate=0, stride_xb=8, stride_xs=8, stride_xh=8, stride_ob=8, stride_os=8, stride_oh=8)
    assert np.array_equal(out, x)  # position 0: cos 1, sin 0
    with pytest.raises(KilnArgumentError, match="'cos' needs an array"):
        k.run(problem=(1, 1, 1), out=out, x=x, cos=None, sin=sin, offsets=None, batch=1, seq=1, heads=1, seqlen_ro=2,
              offset=0, conjugate=0, stride_xb=8, stride_xs=8, stride_xh=8, stride_ob=8, stride_os=8, stride_oh=8)
