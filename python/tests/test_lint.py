"""kiln.lint: findings from text, bytes and files; device SMs; bad input."""

import pytest

import kiln

BAD = """.version 6.3
.target sm_75
.address_size 64
.visible .entry k(.param .u64 p)
{
    .reg .f32 %f<2>;
    .reg .b16 %rs<2>;
    cvt.rn.bf16.f32 %rs1, %f1;
    ret;
}
"""


def test_finding_fields():
    rep = kiln.lint(BAD)
    assert len(rep) == 1 and rep.target == "sm_75" and rep.ptx == "6.3" and rep.sm == 75
    f = rep[0]
    assert f.line == 8 and f.severity == "error" and f.need_sm == 80 and f.need_ptx == "7.0"
    assert f.instruction.startswith("cvt.rn.bf16.f32") and "sm_80" in f.message
    assert f.kind == "target" and f.module_sm == 75 and f.as_dict()["line"] == 8
    assert rep.errors == [f]


def test_file_bytes_and_device(tmp_path):
    p = tmp_path / "k.ptx"
    p.write_text(BAD)
    assert [f.line for f in kiln.lint(p)] == [8]
    assert [f.line for f in kiln.lint(str(p))] == [8]
    assert [f.line for f in kiln.lint(BAD.encode())] == [8]
    clean = kiln.generate("layernorm x=bf16", 80).text
    assert len(kiln.lint(clean)) == 0
    dev = kiln.lint(clean, sm="sm_75")
    assert dev.runs_on_device is False and dev.device_sm == 75 and any(f.kind == "device" for f in dev)
    assert kiln.lint(clean, sm=90).runs_on_device is True


def test_bad_input(tmp_path):
    with pytest.raises(kiln.KilnSpecError):
        kiln.lint(b"\x00\x01 not ptx")
    with pytest.raises(kiln.KilnIOError) as e:
        kiln.lint(tmp_path / "missing.ptx")
    assert "missing.ptx" in str(e.value)
    with pytest.raises(kiln.KilnSpecError) as e:
        kiln.lint(BAD, sm="sm_abc")
    assert "sm_abc" in str(e.value) and "75" in str(e.value)
    with pytest.raises(kiln.KilnArgumentError):
        kiln.lint(42)


def test_unbounded_input(tmp_path, monkeypatch):
    """A path lint must not read forever or whole: a device, a FIFO, a file over kiln's input limit."""
    import os
    with pytest.raises(kiln.KilnSpecError) as e:
        kiln.lint("/dev/zero")
    assert "'/dev/zero' is a character device, not a regular file" in str(e.value)
    fifo = tmp_path / "k.ptx"
    os.mkfifo(fifo)
    with pytest.raises(kiln.KilnSpecError) as e:
        kiln.lint(fifo)
    assert "is a FIFO (named pipe)" in str(e.value)
    big = tmp_path / "big.ptx"
    with open(big, "wb") as f:
        f.truncate(257 << 20)  # sparse: nothing written, nothing read
    with pytest.raises(kiln.KilnSpecError) as e:
        kiln.lint(big)
    assert "larger (269484032 bytes) than kiln's input limit of 256 MiB; set KILN_MAX_INPUT_MB" in str(e.value)
    small = tmp_path / "small.ptx"
    small.write_text(BAD + "\n" * (1 << 20))
    monkeypatch.setenv("KILN_MAX_INPUT_MB", "1")
    with pytest.raises(kiln.KilnSpecError) as e:
        kiln.lint(small)
    assert "input limit of 1 MiB" in str(e.value)
    monkeypatch.setenv("KILN_MAX_INPUT_MB", "2")
    assert [f.line for f in kiln.lint(small)] == [8]
