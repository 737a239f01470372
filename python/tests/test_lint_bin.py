"""kiln.lint on binaries: nvcc's fatbins, cubins and objects; device and driver verdicts; bad input."""
import os

import pytest

import kiln

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.join(ROOT, "tests", "fuzz", "corpus", "bin")


def corpus(name):
    path = os.path.join(BIN, name)
    if not os.path.exists(path):
        pytest.skip("needs kiln's source tree (tests/fuzz/corpus/bin)")
    return path


def test_fatbin_images_and_verdicts():
    rep = kiln.lint(corpus("a.fatbin"))
    assert isinstance(rep, kiln.BinaryLintReport) and rep.format == "fatbin" and rep.containers == 1 and len(rep) == 0
    assert [(i.kind, i.target, i.ptx) for i in rep.images] == [("cubin", "sm_80", None), ("ptx", "sm_90", "9.0")]
    ptx = rep.images[1]
    assert ptx.compression == "zstd" and ptx.functions == 1 and isinstance(ptx.lint, kiln.LintReport)
    assert len(ptx.lint) == 0 and ptx.lint.target == "sm_90"
    ok = kiln.lint(corpus("a.fatbin"), sm="8.6")
    assert ok.runs_on_device is True and "loads cubin sm_80" in ok.verdict
    bad = kiln.lint(corpus("a.fatbin"), sm=75)
    assert bad.runs_on_device is False and bad.images[0].runs_on_device is False
    assert len(bad.errors) == 1 and bad[0].kind == "device"
    assert "no kernel image is available for execution on the device" in bad[0].message
    assert "-gencode arch=compute_75,code=sm_75" in bad[0].message
    old = kiln.lint(corpus("a.fatbin"), sm=90, cuda="12.8")
    assert old.runs_on_device is False and old.cuda == "12.8" and old.images[1].cuda_loads is False
    assert any("update the driver to CUDA 13.0" in f.message for f in old.errors)


def test_bytes_cubin_and_object():
    with open(corpus("e.cubin"), "rb") as f:
        rep = kiln.lint(f.read(), sm=100, cuda=12080)
    assert rep.format == "cubin" and rep.images[0].target == "sm_100a" and rep.images[0].suffix == "a"
    assert rep.runs_on_device is True and rep.cuda_loads is True
    assert kiln.lint(corpus("e.cubin"), sm=103).runs_on_device is False
    obj = kiln.lint(corpus("rdc.o"))
    assert obj.format == "elf" and [i.target for i in obj.images] == ["sm_86"]


def test_bad_binaries(tmp_path):
    with open(corpus("a.fatbin"), "rb") as f:
        data = f.read()
    cut = tmp_path / "cut.fatbin"
    cut.write_bytes(data[:2000])
    with pytest.raises(kiln.KilnCorruptError) as e:
        kiln.lint(cut)
    assert "truncated" in str(e.value)
    with pytest.raises(kiln.KilnSpecError) as e:
        kiln.lint(b"\x7fELF\x02\x01\x01" + bytes(57))
    assert "section headers" in str(e.value)
    with pytest.raises(kiln.KilnSpecError) as e:
        kiln.lint(data, cuda="7.5")
    assert "12.4" in str(e.value)
