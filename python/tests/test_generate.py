"""Generator, families, canonical specs and errors through the Python API (against bin/kiln where built)."""

import os
import subprocess
import sys
import threading

import pytest

import kiln
from conftest import KILN_BIN, PKG_ROOT


def test_generate_ptx_and_metadata():
    k = kiln.generate("layernorm x=bf16 w=f32 y=bf16 hidden=4096", sm=75)
    assert k.spec == "layernorm x=bf16 w=f32 y=bf16 hidden=4096 weight=true bias=true"
    assert k.sm == 75 and k.emit == "ptx" and k.family == "layernorm"
    assert ".target sm_75" in k.text and ".entry " + k.entry in k.text
    names = [p["name"] for p in k.params]
    assert names == ["y", "mean", "rstd", "x", "weight", "bias", "rows", "hidden", "eps"]
    assert k.params[0] == {"name": "y", "kind": "ptr", "dtype": "bf16"}
    assert k.params[4]["dtype"] == "f32" and k.params[8]["kind"] == "f32"
    assert k.meta["ptx_version"] == "6.3" and k.meta["align_bytes"] > 0 and k.meta["block"][0] > 0
    # sm_75 has no bf16 instructions: the generated PTX lints clean and runs on sm_75
    rep = k.lint(sm=75)
    assert len(rep) == 0 and rep.runs_on_device is True


def test_generate_keywords_and_sm_spellings():
    a = kiln.generate("layernorm", 80, x="f16", hidden=1024, bias=False)
    b = kiln.generate("layernorm x=f16 hidden=1024 bias=false", "sm_80")
    assert a.text == b.text and a.spec.endswith("weight=true bias=false")
    assert kiln.generate("layernorm x=f16", "8.6").sm == 86


def test_generate_ll():
    k = kiln.generate("attention dtype=f16 head_dim=64", 80, emit="ll")
    assert "define" in k.text and "target triple" in k.text and k.emit == "ll"
    with pytest.raises(kiln.KilnArgumentError):
        k.lint()


@pytest.mark.parametrize("spec,sm", [("layernorm x=bf16 w=f32 y=bf16 hidden=4096", 75),
                                     ("attention dtype=bf16 head_dim=128 causal=true", 90)])
def test_same_ptx_as_cli(spec, sm):
    """kiln.generate, `python -m kiln emit` and (where the build tree has it) bin/kiln emit agree byte for byte."""
    env = dict(os.environ)
    if os.environ.get("KILN_TEST_INSTALLED") != "1":
        env["PYTHONPATH"] = PKG_ROOT
    clis = [[sys.executable, "-m", "kiln"]] + ([[KILN_BIN]] if os.path.exists(KILN_BIN) else [])
    for cli in clis:
        out = subprocess.run(cli + ["emit"] + spec.split() + ["--sm", str(sm)], stdout=subprocess.PIPE, env=env,
                             check=True)
        assert kiln.generate(spec, sm).text.encode() == out.stdout, cli


def test_canonical_and_families():
    assert kiln.canonical_spec("layernorm hidden=64 x=f16") == \
        "layernorm x=f16 w=f16 y=f16 hidden=64 weight=true bias=true"
    fams = kiln.families()
    assert {"layernorm", "attention"} <= set(fams)
    ln = fams["layernorm"]
    p = {q.name: q for q in ln.params}
    assert p["x"].type == "dtype" and p["x"].allowed == ["f32", "f16", "bf16"] and p["x"].default == "f32"
    assert p["w"].default == "same as x"
    assert "head_dim" in [q.name for q in fams["attention"].params]
    assert kiln.targets()[:2] == [70, 75] and 90 in kiln.targets()


def test_sm_90a_is_a_target_of_its_own():
    # kiln numbers the arch-specific sm_90a 1090 (KILN_SM_ARCH + 90); "90a" and "sm_90a" name it
    assert 1090 in kiln.targets() and 1090 not in kiln._gen.default_targets()
    for name in ("90a", "sm_90a", 1090):
        k = kiln.generate("layernorm x=bf16 w=f32 y=bf16 hidden=1024", sm=name)
        assert k.sm == 1090 and ".target sm_90a\n" in k.text and ".version 8.0" in k.text
        assert "sm_90a" in repr(k)
    with pytest.raises(kiln.KilnSpecError) as e:
        kiln.generate("layernorm x=f32", "80a")
    assert "90a" in str(e.value)
    # in a bundle (with ptxas: its cubin for sm_90a too)
    ptxas = any(os.access(os.path.join(d, "ptxas"), os.X_OK)
                for d in os.environ.get("PATH", "").split(os.pathsep) + ["/usr/local/cuda/bin"])
    data = kiln.build_bundle("layernorm x=bf16 w=f32 y=bf16 hidden=1024", sms=["90", "90a"], cubin=ptxas)
    entries = list(kiln.Bundle(data=data))
    assert sorted({e.sm for e in entries}) == [90, 1090]
    assert any(e.sm == 1090 and "sm_90a" in repr(e) for e in entries)


@pytest.mark.parametrize("spec,sm,cls,words", [
    ("layernorm x=f99", 80, kiln.KilnSpecError, ["f99", "f32, f16, bf16"]),
    ("nosuch x=1", 80, kiln.KilnNotFoundError, ["nosuch", "layernorm"]),
    ("layernorm hidden=0", 80, kiln.KilnSpecError, ["hidden"]),
    ("layernorm x=f32", 61, kiln.KilnSpecError, ["61", "75"]),
    ("layernorm x=f32", "sm_x", kiln.KilnSpecError, ["sm_x"]),
])
def test_bad_specs_raise_value_errors(spec, sm, cls, words):
    with pytest.raises(cls) as e:
        kiln.generate(spec, sm)
    assert isinstance(e.value, ValueError) and isinstance(e.value, kiln.KilnError)
    for w in words:
        assert w in str(e.value)
    with pytest.raises(kiln.KilnSpecError):
        kiln.generate("layernorm", 80, emit="sass")


def test_threads_generate_in_parallel_identically():
    specs = ["layernorm x=%s hidden=%d" % (d, h) for d in ("f32", "bf16") for h in (256, 1024)]
    serial = {s: kiln.generate(s, 80).text for s in specs}
    got, errors = {}, []

    def work(s):
        try:
            for _ in range(2):
                got[s] = kiln.generate(s, 80).text
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    ts = [threading.Thread(target=work, args=(s,)) for s in specs]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors and got == serial
