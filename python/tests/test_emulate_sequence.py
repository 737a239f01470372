"""kiln.emulate.sequence: the kernels a spec's launch description runs (before, itself, after), as the template names
them; the attention backward's deterministic dq takes dkdv's path."""

import pytest

from kiln import emulate


def specs(spec, sm=80):
    return [k.spec for k in emulate.sequence(spec, sm)]


@pytest.mark.parametrize("path", ["auto", "simt", "mma"])
def test_attention_backward_sequence_carries_the_path_to_dq(path):
    got = specs("attention_bwd kernel=dkdv dtype=bf16 head_dim=64 deterministic=true window=true path=%s" % path)
    assert [s.split()[1] for s in got] == ["kernel=prep", "kernel=dkdv", "kernel=dq"]
    assert "path=auto" in got[0]  # prep is elementwise
    assert "path=%s" % path in got[1] and "path=%s" % path in got[2]
    assert "window=true" in got[2]  # dq scores too: the mask keys go with it


def test_attention_backward_atomic_sequence_ends_in_convert():
    got = specs("attention_bwd kernel=dkdv dtype=f16 head_dim=32 path=simt")
    assert [s.split()[1] for s in got] == ["kernel=prep", "kernel=dkdv", "kernel=convert"]
    assert "path=auto" in got[2]


def test_norm_backward_split_form_runs_stats_before_and_reduce_after():
    got = specs("layernorm_bwd x=bf16 hidden=4096 form=split2")
    assert len(got) == 3
    assert got[0].startswith("layernorm_bwd ") and got[0].endswith("kernel=stats")
    assert got[1].startswith("layernorm_bwd ") and "form=split2" in got[1]
    assert got[2].startswith("norm_reduce ")


def test_a_single_kernel_is_its_own_sequence():
    assert specs("rmsnorm x=f32 hidden=768") == [emulate.load("rmsnorm x=f32 hidden=768", 80).spec]
