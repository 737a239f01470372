"""kiln._extents: the span of a kernel's pointer from the launch description its template declares
(docs/registry.md), the size check the generic binders make with it, and its expression parser, which
evaluates nothing but the grammar (the text may come from a bundle)."""

import numpy as np
import pytest

import kiln
from kiln import _extents


def test_spans_from_the_description():
    k = kiln.generate("attention dtype=f16 head_dim=64", sm=80)
    env = {"batch": 2, "seq_q": 5, "heads_q": 4, "seq_k": 7, "heads_kv": 2,
           "stride_qb": 5 * 4 * 64, "stride_qs": 4 * 64, "stride_qh": 64}
    assert _extents.extent("q", env, k.meta["launch"]) == 2 * 5 * 4 * 64
    env["stride_qb"] *= 3  # a batch stride with a gap: the last batch's rows end the span
    assert _extents.extent("q", env, k.meta["launch"]) == 1 * 3 * 5 * 4 * 64 + 5 * 4 * 64
    assert _extents.extent("lse", env, k.meta["launch"]) == 2 * 4 * 5
    assert _extents.extent("k", env, k.meta["launch"]) is None  # its strides are not in env
    ln = kiln.generate("layernorm x=f32 hidden=256", sm=80).meta["launch"]
    assert _extents.extent("x", {"rows": 3, "hidden": 256}, ln) == 3 * 256
    assert _extents.extent("weight", {"rows": 3, "hidden": 256}, ln) == 256
    assert _extents.extent("nosuch", {"rows": 3}, ln) is None
    assert _extents.extent("x", {"rows": 3}, "") is None  # a module from a kiln before the registry


@pytest.mark.parametrize("text,want", [
    ("cdiv(heads_q/heads_kv*seq_q,64)", 1), ("min(rows,sm_count*4)", 3), ("(rows+1)*2-1", 7), ("7/2", 3)])
def test_expressions(text, want):
    assert _extents._eval(text, {"heads_q": 8, "heads_kv": 2, "seq_q": 3, "rows": 3, "sm_count": 10}) == want


@pytest.mark.parametrize("text", ["__import__('os')", "rows.real", "[rows]", "rows rows", "nosuch(1,2)"])
def test_nothing_but_the_grammar(text):
    with pytest.raises((ValueError, KeyError)):
        _extents._eval(text, {"rows": 3})
    assert _extents.extent("x", {"rows": 3}, "tensor x in %s" % text.replace(" ", "")) is None


def test_binder_checks_the_span():
    k = kiln.emulate.load("layernorm x=f32 hidden=256", sm=80)
    a = dict(y=np.zeros((4, 256), np.float32), mean=np.zeros(4, np.float32), rstd=np.zeros(4, np.float32),
             x=np.ones((3, 256), np.float32), weight=np.ones(256, np.float32), bias=np.zeros(256, np.float32),
             rows=4, hidden=256, eps=1e-5)
    with pytest.raises(kiln.KilnArgumentError, match="parameter 'x' has 768 elements; the kernel reaches 1024"):
        k.run(problem=(4,), **a)
