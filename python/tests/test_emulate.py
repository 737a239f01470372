"""kiln.emulate: LayerNorm and attention on the CPU emulator against float64 numpy references; generic binding."""

import numpy as np
import pytest

import kiln
from conftest import attention_reference, ln_reference

ml_dtypes = pytest.importorskip("ml_dtypes")
NP = {"f32": np.float32, "f16": np.float16, "bf16": ml_dtypes.bfloat16}
# |y - ref| <= TOL * max(|ref|, 1): fp32 math, one rounding to the output dtype (half an ulp) plus fp32 error
TOL = {"f32": 2e-5, "f16": 1e-3, "bf16": 8e-3}


def _check(got, ref, tol):
    got = np.asarray(got, dtype=np.float64)
    err = np.abs(got - ref)
    bound = tol * np.maximum(np.abs(ref), 1)
    assert np.all(err <= bound), "max err %g (tolerance %g)" % (err.max(), tol)


@pytest.mark.parametrize("xd,wd,yd,sm,hidden", [
    ("f32", "f32", "f32", 80, "fixed"), ("bf16", "f32", "bf16", 75, "fixed"), ("f16", "f16", "f32", 86, "launch"),
    ("bf16", "bf16", "bf16", 90, "launch"), ("f16", "f32", "f16", 75, "fixed")])
def test_layer_norm_matches_float64(xd, wd, yd, sm, hidden):
    rng = np.random.default_rng(7)
    h = 320 if hidden == "launch" else 512
    x = rng.normal(0.5, 2, (5, 3, h)).astype(NP[xd])
    w = rng.normal(1, 0.5, h).astype(NP[wd])
    b = rng.normal(0, 0.5, h).astype(NP[wd])
    y, mean, rstd = kiln.emulate.layer_norm(x, w, b, eps=1e-5, sm=sm, out_dtype=yd, hidden=hidden,
                                            return_stats=True)
    assert y.shape == x.shape and y.dtype == NP[yd] and mean.shape == (15,)
    ref, m, r = ln_reference(x.astype(np.float64), w.astype(np.float64), b.astype(np.float64), 1e-5)
    _check(y, ref, TOL[yd])
    _check(mean, m.reshape(-1), 1e-6)
    _check(rstd, r.reshape(-1), 1e-5)


@pytest.mark.parametrize("wd,hidden", [("bf16", "fixed"), ("f16", "launch"), ("f32", "fixed")])
def test_layer_norm_offset_zero_centered_weights(wd, hidden):
    """offset=1: y = xhat * (1 + w) + b, 1 + w formed in f32, so a 16-bit weight near 0 keeps its bits (in w's
    dtype 1 + w would round them away: y in f32 shows it)."""
    rng = np.random.default_rng(3)
    h = 320 if hidden == "launch" else 512
    x = rng.normal(0.5, 2, (4, h)).astype(np.float32)
    w = rng.normal(0, 0.01, h).astype(NP[wd])
    b = rng.normal(0, 0.5, h).astype(NP[wd])
    y = kiln.emulate.layer_norm(x, w, b, sm=75, out_dtype="f32", hidden=hidden, offset=1)
    ref, _m, _r = ln_reference(x.astype(np.float64), 1 + w.astype(np.float64), b.astype(np.float64), 1e-5)
    _check(y, ref, TOL["f32"])
    with pytest.raises(kiln.KilnArgumentError, match="offset"):
        kiln.emulate.layer_norm(x, None, b, offset=1)


def test_layer_norm_without_affine_and_large_mean():
    rng = np.random.default_rng(3)
    x = (1000 + rng.normal(0, 0.1, (4, 256))).astype(np.float32)
    y = kiln.emulate.layer_norm(x, None, None, eps=1e-5, sm=80)
    ref, _, _ = ln_reference(x, None, None, 1e-5)
    # two-pass statistics: sum/sum-of-squares in f32 loses the variance (1e6 vs 0.01) entirely here
    _check(y, ref, 5e-3)


def test_layer_norm_detects_a_planted_error():
    rng = np.random.default_rng(1)
    x = rng.normal(0, 1, (2, 128)).astype(np.float32)
    y = kiln.emulate.layer_norm(x, np.ones(128, np.float32), np.zeros(128, np.float32), sm=80)
    ref, _, _ = ln_reference(x, None, None, 1e-5)
    with pytest.raises(AssertionError):
        _check(y, ref * 1.001, TOL["f32"])


@pytest.mark.parametrize("dt,sm,causal,sq,sk,hq,hkv,d", [
    ("f16", 80, False, 17, 40, 2, 2, 64), ("bf16", 75, True, 33, 50, 4, 1, 64), ("f32", 90, True, 9, 9, 2, 1, 32),
    ("bf16", 90, True, 20, 70, 2, 2, 128),
    # sm_90a: the TMA + wgmma kernel (path=wgmma), its tensor maps built by kiln.emulate (_tmap.records)
    ("bf16", "90a", True, 70, 130, 4, 2, 128), ("f16", "90a", False, 33, 65, 2, 1, 64)])
def test_attention_matches_float64(dt, sm, causal, sq, sk, hq, hkv, d):
    rng = np.random.default_rng(11)
    q = rng.uniform(-1, 1, (1, sq, hq, d)).astype(NP[dt])
    k = rng.uniform(-1, 1, (1, sk, hkv, d)).astype(NP[dt])
    v = rng.uniform(-1, 1, (1, sk, hkv, d)).astype(NP[dt])
    o, lse = kiln.emulate.attention(q, k, v, causal=causal, sm=sm, return_lse=True,
                                    path="wgmma" if sm == "90a" else "auto")
    ref, ref_lse = attention_reference(q, k, v, causal)
    assert o.dtype == NP[dt] and o.shape == q.shape and lse.shape == (1, hq, sq)
    _check(o, ref, {"f32": 1e-4, "f16": 2e-3, "bf16": 1.6e-2}[dt])
    _check(lse, ref_lse, 1e-4)


def test_attention_bhsd_layout():
    rng = np.random.default_rng(5)
    q = rng.uniform(-1, 1, (2, 2, 16, 64)).astype(np.float16)  # [batch, heads, seq, head_dim]
    o = kiln.emulate.attention(q, q, q, layout="bhsd", sm=80)
    ref, _ = attention_reference(q.transpose(0, 2, 1, 3), q.transpose(0, 2, 1, 3), q.transpose(0, 2, 1, 3), False)
    assert o.shape == q.shape
    _check(o.transpose(0, 2, 1, 3), ref, 2e-3)


@pytest.mark.parametrize("hq,hkv,words", [(4, 0, "q has 4 heads and k/v 0; each needs at least 1 head"),
                                           (0, 0, "q has 0 heads and k/v 0; each needs at least 1 head"),
                                           (4, 3, "4 query heads are not a multiple of 3 key/value heads")])
def test_attention_head_counts_in_words(hq, hkv, words):
    q = np.zeros((1, 8, hq, 64), np.float16)
    kv = np.zeros((1, 8, hkv, 64), np.float16)
    for fn in (kiln.emulate.attention, kiln.emulate.attention_backward):
        args = (q, kv, kv) if fn is kiln.emulate.attention else (q, kv, kv, q, q, np.zeros((1, hq, 8), np.float32))
        with pytest.raises(kiln.KilnArgumentError, match=words):
            fn(*args, sm=80)


def _ln_args(k, rows=4, h=256, dt=np.float32):
    return dict(y=np.zeros((rows, h), dt), mean=np.zeros(rows, np.float32), rstd=np.zeros(rows, np.float32),
                x=np.ones((rows, h), dt), weight=np.ones(h, dt), bias=np.zeros(h, dt), rows=rows, hidden=h, eps=1e-5)


def test_generic_binding_by_name():
    k = kiln.emulate.load("layernorm x=f32 hidden=256", sm=80)
    assert k is kiln.emulate.load("layernorm hidden=256", 80)  # cached per thread by canonical spec
    a = _ln_args(k)
    a["x"] = np.random.default_rng(0).normal(size=(4, 256)).astype(np.float32)
    k.run(problem=(4,), **a)
    ref, _, _ = ln_reference(a["x"], None, None, 1e-5)
    _check(a["y"], ref, TOL["f32"])


@pytest.mark.parametrize("change,words", [
    (lambda a: a.update(x=a["x"].astype(np.float16)), ["'x'", "f32", "f16"]),
    (lambda a: a.pop("eps"), ["missing", "'eps'"]),
    (lambda a: a.update(gamma=1), ["no parameter", "'gamma'"]),
    (lambda a: a.update(x=np.ones((2, 256), np.float32)), ["'x'", "512", "1024"]),
    (lambda a: a.update(weight=None), ["'weight'", "weight=false"]),
    (lambda a: a.update(x=np.ones((256, 4), np.float32).T), ["contiguous"]),
    (lambda a: a.update(rows=2 ** 31), ["rows", "i32"]),
    (lambda a: a.update(eps="small"), ["eps", "float"]),
    (lambda a: a.update(x=np.ones(4 * 256 + 1, np.float32)[1:]), ["aligned"]),
])
def test_generic_binding_checks(change, words):
    k = kiln.emulate.load("layernorm x=f32 hidden=256", sm=80)
    a = _ln_args(k)
    change(a)
    with pytest.raises(kiln.KilnArgumentError) as e:
        k.run(problem=(4,), **a)
    for w in words:
        assert w in str(e.value)


def test_none_allowed_for_inputs_the_spec_turns_off():
    k = kiln.emulate.load("layernorm x=f32 hidden=128 weight=false bias=false", sm=80)
    a = _ln_args(k, h=128)
    a.update(weight=None, bias=None, x=np.random.default_rng(2).normal(size=(4, 128)).astype(np.float32))
    k.run(problem=(4,), **a)
    ref, _, _ = ln_reference(a["x"], None, None, 1e-5)
    _check(a["y"], ref, TOL["f32"])


def test_emulator_faults_are_errors():
    k = kiln.emulate.load("layernorm x=f32 hidden=256", sm=80)
    with pytest.raises(kiln.KilnSpecError):  # a block larger than the target allows: a bad launch
        kiln.emulate.EmuKernel.run(k, grid=(0,), **_ln_args(k))
    with pytest.raises(kiln.KilnArgumentError):
        k.run(**_ln_args(k))  # neither grid nor problem


def test_bad_helper_arguments():
    x = np.ones((2, 64), np.float32)
    with pytest.raises(kiln.KilnArgumentError):
        kiln.emulate.layer_norm(x.astype(np.int32))
    with pytest.raises(kiln.KilnArgumentError):
        kiln.emulate.layer_norm(x, np.ones(63, np.float32))
    with pytest.raises(kiln.KilnArgumentError):
        kiln.emulate.attention(np.ones((1, 4, 3, 64), np.float16), np.ones((1, 4, 2, 64), np.float16),
                               np.ones((1, 4, 2, 64), np.float16))
    with pytest.raises(kiln.KilnSpecError) as e:
        kiln.emulate.attention(*(np.ones((1, 4, 1, 44), np.float16),) * 3)  # 44: not a multiple of 8
    assert "head_dim" in str(e.value) or "44" in str(e.value)


def test_layer_norm_without_a_fixed_variant_uses_the_loop_form():
    x = np.random.default_rng(4).normal(size=(2, 20000)).astype(np.float32)
    ref, _, _ = ln_reference(x, None, None, 1e-5)
    _check(kiln.emulate.layer_norm(x, sm=80), ref, TOL["f32"])
    with pytest.raises(kiln.KilnSpecError, match="20000"):
        kiln.emulate.layer_norm(x, sm=80, hidden="fixed")


@pytest.mark.parametrize("family", kiln.emulate.families() if kiln.have_generator() else [])
def test_check_runs_every_registered_family(family):
    """kiln.emulate.check: every family with a reference passes on a small problem; a planted bad size is refused."""
    r = kiln.emulate.check(family, sm=80, rows=5, hidden=40, seq_k=7, heads=(2, 1), seed=3)
    assert r.passed and r.outputs and r.launches and r.spec.startswith(family), r.outputs
    assert all(o["worst"] <= 1 and o["bad"] == 0 for o in r.outputs), r.outputs
    again = kiln.emulate.check(family, sm=80, rows=5, hidden=40, seq_k=7, heads=(2, 1), seed=3)
    assert [o["max_abs"] for o in again.outputs] == [o["max_abs"] for o in r.outputs]


@pytest.mark.skipif(not kiln.have_generator(), reason="needs libkiln")
def test_check_paged_kv_cache():
    """kiln.emulate.check over a paged KV cache: shuffled pages of 16, leftpad, batch_idx, as `kiln run --paged`."""
    r = kiln.emulate.check("attention dtype=bf16 head_dim=64 causal=true paged=true splitkv=true", sm=80, rows=2,
                           seq_k=70, batch=3, heads=(4, 1), splits=3, page_size=16, leftpad=True, batch_idx=True)
    assert r.passed and "pages of 16" in r.problem and "leftpad" in r.problem, (r.problem, r.outputs)
    assert [x["entry"].startswith("kiln_attention_combine") for x in r.launches] == [False, True]
    r = kiln.emulate.check("attention dtype=f16 head_dim=64 paged=true append=true", sm=80, rows=3, seq_k=40, batch=2,
                           heads=(2, 1), page_size=16, seqlen_new=3)
    assert r.passed and [o["name"] for o in r.outputs] == ["o", "lse", "cache"] and "append 3" in r.problem, r.outputs
    with pytest.raises(kiln.KilnError, match="page size 24 does not fit"):
        kiln.emulate.check("attention dtype=f16 head_dim=64 paged=true", sm=80, rows=1, seq_k=40, page_size=24)
    with pytest.raises(kiln.KilnError, match="--paged applies to a paged KV cache"):
        kiln.emulate.check("attention dtype=f16 head_dim=64", sm=80, rows=1, page_size=16)


@pytest.mark.skipif(not kiln.have_generator(), reason="needs libkiln")
def test_check_paged_append_rotary():
    """kiln.emulate.check with rotary inside the append (spec keys rotary=, rotary_dim=, rotary_cs=): GPT-NeoX
    and GPT-J, rotary_dim < head_dim, the rotated cache bit for bit."""
    for mode, extra in (("neox", {}), ("interleaved", {"rotary_dim": 32, "rotary_cs": "f32"})):
        r = kiln.emulate.check("attention dtype=f16 head_dim=64 causal=true paged=true append=true", sm=80, rows=3,
                               seq_k=40, batch=2, heads=(4, 2), page_size=16, seqlen_new=3, leftpad=True, rotary=mode,
                               **extra)
        assert r.passed and ("rotary " + mode) in r.problem, (r.problem, r.outputs)
        assert [o["name"] for o in r.outputs] == ["o", "lse", "cache"] and r.outputs[2]["max_abs"] == 0, r.outputs
    with pytest.raises(kiln.KilnError, match="rotary=neox needs append=true"):
        kiln.emulate.check("attention dtype=f16 head_dim=64 paged=true", sm=80, rows=1, seq_k=40, page_size=16,
                           rotary="neox")


def test_check_names_bad_problems():
    with pytest.raises(kiln.KilnError, match="--hidden"):
        kiln.emulate.check("layernorm x=bf16", sm=80, rows=3)
    with pytest.raises(kiln.KilnArgumentError, match="valid: random, large-mean"):
        kiln.emulate.check("layernorm x=bf16 hidden=8", sm=80, rows=3, input="noise")
    assert "norm_reduce" in kiln.emulate.families() and "attention_combine" in kiln.emulate.families()
