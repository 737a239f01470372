"""python -m kiln mirrors bin/kiln: same output for emit, list, lint, bundle-info; same exit statuses.

Every test runs `python -m kiln` on its own (an installed package has no bin/kiln); where the build
tree's bin/kiln exists, the same commands are also compared with it."""

import json
import os
import subprocess
import sys

import pytest

import kiln
from conftest import KILN_BIN, PKG_ROOT

HAVE_BIN = os.path.exists(KILN_BIN)
BAD = ".version 6.3\n.target sm_75\n.address_size 64\n.visible .entry k()\n{\n.reg .f32 %f<2>;\n.reg .b16 %rs<2>;\n" \
      "cvt.rn.bf16.f32 %rs1, %f1;\nret;\n}\n"
COMMANDS = ["emit", "list", "bundle", "bundle-info", "lint", "run"]


def py(*args, stdin=None, stdout=subprocess.PIPE):
    env = dict(os.environ)
    if os.environ.get("KILN_TEST_INSTALLED") != "1":
        env["PYTHONPATH"] = PKG_ROOT  # the source tree's package; else the installed one
    return subprocess.run([sys.executable, "-m", "kiln"] + list(args), stdout=stdout, stderr=subprocess.PIPE,
                          env=env, input=stdin)


def cli(*args, stdout=subprocess.PIPE):
    return subprocess.run([KILN_BIN] + list(args), stdout=stdout, stderr=subprocess.PIPE)


@pytest.mark.parametrize("args", [["list"], ["emit", "layernorm", "x=bf16", "w=f32", "--sm", "75"],
                                  ["emit", "attention", "dtype=f16", "--sm", "sm_80", "--emit", "ll"]])
def test_list_and_emit(args):
    a = py(*args)
    assert a.returncode == 0, a.stderr
    if args[0] == "list":
        text = a.stdout.decode()
        assert all("\n%s - " % f in "\n" + text for f in kiln.families()), text[:300]
        assert text.endswith("\ntargets: %s\n" % " ".join(kiln._gen.sm_name(s) for s in kiln.targets()))
    else:
        sm_at = args.index("--sm")
        spec, sm = " ".join(args[1:sm_at]), args[sm_at + 1]
        emit = args[args.index("--emit") + 1] if "--emit" in args else "ptx"
        assert a.stdout.decode() == kiln.generate(spec, sm, emit=emit).text
    if HAVE_BIN:
        b = cli(*args)
        assert b.returncode == 0 and a.stdout == b.stdout


def test_lint_text_json_and_status(tmp_path):
    bad = tmp_path / "bad.ptx"
    bad.write_text(BAD)
    good = tmp_path / "good.ptx"
    good.write_text(kiln.generate("layernorm x=bf16", 75).text)
    a = py("lint", str(bad))
    assert a.returncode == 1
    assert a.stdout.decode().splitlines() == [
        "%s:8: error: needs sm_80 and PTX ISA 7.0 for cvt.bf16.f32; the module's .target is sm_75 and its .version 6.3"
        % bad,
        "    cvt.rn.bf16.f32 %rs1, %f1;",
        "%s: 1 error, 0 warnings (.target sm_75, .version 6.3)" % bad], a.stdout
    if HAVE_BIN:
        b = cli("lint", str(bad))
        assert b.returncode == 1 and a.stdout == b.stdout
    assert py("lint", str(good)).returncode == 0
    j = json.loads(py("lint", str(bad), str(good), "--json").stdout)
    assert [len(f["findings"]) for f in j["files"]] == [1, 0] and j["files"][0]["findings"][0]["line"] == 8
    missing = py("lint", str(tmp_path / "nope.ptx"))
    assert missing.returncode == 2 and b"kiln: error:" in missing.stderr
    assert missing.stderr.count(b"nope.ptx") == 1, missing.stderr  # the path once, as bin/kiln says it


def test_help_of_every_command():
    for c in COMMANDS:
        r = py(c, "--help")
        assert r.returncode == 0 and r.stdout.startswith(b"usage: kiln " + c.encode()) and not r.stderr, (c, r)
    run = py("run", "--help").stdout.decode()
    assert "required:\n  --sm N" in run and "\n  --rows R " in run and "--heads H[:K]" in run, run
    assert "required:\n  --sm N" in py("emit", "--help").stdout.decode()
    assert "-o FILE" in py("bundle", "--help").stdout.decode()


def _closed_reader(run):
    """Runs a CLI with its standard output a pipe whose reader has already gone."""
    r, w = os.pipe()
    os.close(r)
    try:
        return run(stdout=w)
    finally:
        os.close(w)


@pytest.mark.parametrize("args,status", [(["list"], 0), (["emit", "attention", "--sm", "80"], 0),
                                         (["run", "--help"], 0), (["--help"], 0), (["lint", "BAD"], 1)])
def test_reader_gone_early(args, status, tmp_path):
    """kiln list | head: the rest of the output is dropped quietly and the command keeps its own status."""
    bad = tmp_path / "bad.ptx"
    bad.write_text(BAD * 200)  # many findings: more output than a pipe holds
    args = [str(bad) if a == "BAD" else a for a in args]
    r = _closed_reader(lambda stdout: py(*args, stdout=stdout))
    assert (r.returncode, r.stderr) == (status, b""), (args, r.returncode, r.stderr[-600:])
    if HAVE_BIN:
        b = _closed_reader(lambda stdout: cli(*args, stdout=stdout))
        assert (b.returncode, b.stderr) == (status, b""), (args, b.returncode, b.stderr[-600:])


def test_stdout_closed_from_the_start():
    """python -m kiln list >&-: no traceback (sys.stdout is None), exit 0 as bin/kiln list."""
    env = dict(os.environ)
    if os.environ.get("KILN_TEST_INSTALLED") != "1":
        env["PYTHONPATH"] = PKG_ROOT
    r = subprocess.run([sys.executable, "-m", "kiln", "list"], stderr=subprocess.PIPE, env=env,
                       preexec_fn=lambda: os.close(1))
    assert (r.returncode, r.stderr) == (0, b""), r.stderr[-600:]


@pytest.mark.parametrize("heads,words", [("0", "bad --heads '0': query heads must be at least 1"),
                                         ("32:0", "bad --heads '32:0': key/value heads must be at least 1"),
                                         ("-2", "bad --heads '-2': query heads must be at least 1"),
                                         ("x", "bad --heads 'x': the query head count is not a whole number"),
                                         ("32:", "the key/value head count after ':' is not a whole number"),
                                         ("32:5", "5 key/value heads cannot be shared evenly by 32 query heads")])
def test_heads_in_words(heads, words):
    args = ["run", "attention", "--sm", "80", "--rows", "2", "--heads=" + heads]
    for r in [py(*args)] + ([cli(*args)] if HAVE_BIN else []):
        assert r.returncode == 2 and r.stderr.decode().startswith("kiln: error: bad --heads '%s': " % heads), r.stderr
        assert words in r.stderr.decode() and r.stderr.count(b"\n") == 1, r.stderr


def test_two_specs_on_one_line():
    words = b"one kernel per spec: 'attention' is a second family name after 'layernorm'"
    for args in (["emit", "layernorm", "x=bf16", "hidden=768", "attention", "dtype=f16", "--sm", "80"],
                 ["run", "layernorm", "x=bf16", "hidden=768", "attention", "--sm", "80", "--rows", "2"]):
        r = py(*args)
        assert r.returncode == 2 and words in r.stderr, r.stderr
    with pytest.raises(kiln.KilnSpecError, match="second family name"):
        kiln.generate("layernorm x=bf16 attention", 80)


def test_usage_errors_exit_2():
    for args, words in ([["emit", "layernorm", "--sm", "61"], b"61"], [["emit", "layernorm"], b"--sm"],
                        [["frobnicate"], b"unknown command"], [[], b"missing command"],
                        [["emit", "layernorm", "x=f99", "--sm", "80"], b"f99"],
                        [["bundle", "layernorm", "--sm", "80"], b"-o FILE"],
                        [["run", "layernorm", "--sm", "80", "--rows", "0"], b"bad --rows 0; valid: 1..1048576"],
                        [["run", "layernorm", "--sm", "80"], b"missing --rows R"],
                        [["run", "layernorm", "--rows", "2"], b"missing --sm N"]):
        r = py(*args)
        assert r.returncode == 2 and r.stderr.startswith(b"kiln: error:") and words in r.stderr, (args, r.stderr)


def test_run_passes_and_bundle_round_trip(tmp_path):
    r = py("run", "layernorm", "x=bf16", "w=f32", "hidden=512", "--sm", "75", "--rows", "4")
    assert r.returncode == 0 and b"PASS" in r.stdout, r.stdout + r.stderr
    r = py("run", "attention", "dtype=f16", "causal=true", "--sm", "80", "--rows", "9", "--seq-k", "20",
           "--heads", "2:1")
    assert r.returncode == 0 and b"PASS" in r.stdout, r.stdout + r.stderr
    out = tmp_path / "b.kbundle"
    r = py("bundle", "layernorm", "--dtypes", "bf16,bf16/f32/bf16", "--sm", "75,90", "-o", str(out),
           "--emit-c", str(tmp_path / "kern"))
    assert r.returncode == 0, r.stderr
    info = py("bundle-info", str(out))
    assert info.returncode == 0 and info.stdout.count(b"layernorm") == 4
    assert (tmp_path / "kern.c").read_text().count("0x") == out.stat().st_size
    if HAVE_BIN:
        assert cli("bundle-info", str(out)).stdout == info.stdout


def test_bundle_matrices_from_the_templates(tmp_path):
    """The families and dtype keys come from each template's K.bundle, as bin/kiln reads them: the same entries."""
    fams = [f for f in kiln.families() if (kiln._gen.bundle_matrix(f) or {}).get("dtype_keys")]
    assert len(fams) >= 3
    out = tmp_path / "m.kbundle"
    args = [fams[-1], fams[0], "--dtypes", "f16", "--hidden", "64", "--sm", "80", "-j", "2", "-o", str(out)]
    r = py("bundle", *args)
    assert r.returncode == 0, r.stderr
    info = py("bundle-info", str(out)).stdout.decode().splitlines()[2:]
    assert info and all(w.split()[7] in fams for w in info), info
    if HAVE_BIN:
        c_out = tmp_path / "c.kbundle"
        assert cli("bundle", *args[:-1], str(c_out)).returncode == 0
        assert cli("bundle-info", str(c_out)).stdout.decode().splitlines()[2:] == info
    r = py("bundle", fams[0], "--dtypes", "f16/f16/f16/f16/f16/f16/f16/f16/f16", "--sm", "80", "-o", str(out))
    assert r.returncode == 2 and b"dtype combination has 9 parts; valid for " + fams[0].encode() in r.stderr
    r = py("bundle", "nosuch", "--sm", "80", "-o", str(out))
    assert r.returncode == 2 and b"no default matrix for family 'nosuch'; valid: " + ", ".join(fams).encode() in r.stderr


def test_bundle_arch_specs_on_their_own_sm(tmp_path):
    """K.bundle.arch (attention's path=wgmma kernels on sm_90a) reaches Python's bundle as the C tool's: each spec
    on its arch SM alone, also when that SM is outside the list, and once when the plain set has it there."""
    arch = kiln._gen.bundle_matrix("attention")["arch"]
    assert arch and all(sm == "90a" and "path=wgmma" in spec for sm, spec in arch), arch
    spec = arch[0][1]
    data = kiln._gen.build_bundle(["rmsnorm x=f16 hidden=256"], sms=[80], arch_specs=[(spec, "90a")])
    out = tmp_path / "a.kbundle"
    out.write_bytes(data)
    info = py("bundle-info", str(out)).stdout.decode()
    assert " 1090 " in info and info.count("attention") == 1 and info.count("rmsnorm") == 1, info
    data = kiln._gen.build_bundle([spec], sms=["90a"], arch_specs=[(spec, "90a")])
    out.write_bytes(data)
    assert py("bundle-info", str(out)).stdout.decode().count("attention") == 1


def test_examples_from_the_templates():
    """kiln.examples() are `kiln list`'s example lines; each generates; the usage texts show the first."""
    ex = kiln.examples()
    assert ex and all(spec.split()[0] in kiln.families() and sm for spec, sm, _ in ex), ex
    listed = [line[len("  example: kiln run "):] for line in py("list").stdout.decode().splitlines()
              if line.startswith("  example: kiln run ")]
    assert listed == ["%s --sm %s%s" % (s, sm, " " + o if o else "") for s, sm, o in ex]
    for spec, sm, _ in ex:
        assert kiln.generate(spec, sm).meta["entry"]
    assert ("example: kiln emit %s --sm %s" % ex[0][:2]) in py("emit", "--help").stdout.decode()
    assert ("example: kiln run %s --sm %s" % ex[0][:2]) in py("run", "--help").stdout.decode()
    if HAVE_BIN:
        run_help = cli("run", "--help").stdout.decode()
        assert all(("kiln run %s" % line) in run_help for line in listed)


def test_unbounded_inputs_refused_like_bin_kiln(tmp_path):
    """/dev/zero, a FIFO and a sparse file over the input limit: one error, exit 2 (and as bin/kiln says it,
    where it is built)."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    sparse = tmp_path / "sparse"
    with open(sparse, "wb") as f:
        f.truncate(257 << 20)
    out = str(tmp_path / "out.kbundle")
    for path, what in (("/dev/zero", b"is a character device"), (str(fifo), b"is a FIFO (named pipe)"),
                       (str(sparse), b"than kiln's input limit of 256 MiB")):
        for args in (["lint", path], ["bundle-info", path], ["bundle", "--spec-list", path, "--sm", "80", "-o", out]):
            a = py(*args)
            assert a.returncode == 2 and what in a.stderr, (args, a.stderr)
            if HAVE_BIN:
                b = cli(*args)
                assert b.returncode == 2 and a.stderr == b.stderr, (args, a.stderr, b.stderr)
    assert not os.path.exists(out)
    env = dict(os.environ, PYTHONPATH=PKG_ROOT, KILN_MAX_INPUT_MB="1")  # standard input: streamed to the limit
    a = subprocess.run([sys.executable, "-m", "kiln", "lint", "-"], input=b"\0" * (3 << 20), env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert a.returncode == 2 and b"standard input is larger than kiln's input limit of 1 MiB" in a.stderr, a.stderr


@pytest.mark.parametrize("args", [
    ["layernorm", "x=bf16", "w=f32", "y=bf16", "hidden=4096", "--sm", "75", "--rows", "8"],
    ["rmsnorm_bwd", "x=f16", "hidden=launch", "residual=true", "--hidden", "77", "--sm", "90", "--rows", "11",
     "--input", "mixed"],
    ["attention", "dtype=bf16", "head_dim=64", "splitkv=true", "--sm", "80", "--rows", "1", "--seq-k", "300",
     "--heads", "4:1", "--splits", "6"],
    ["attention_bwd", "dtype=f16", "head_dim=32", "causal=true", "--sm", "75", "--rows", "9", "--seq-k", "20"],
    ["norm_reduce", "w=bf16", "--sm", "80", "--rows", "9", "--hidden", "33", "--input", "special"]])
def test_run_prints_what_bin_kiln_prints(args):
    """python -m kiln run and bin/kiln run are one case runner and checker (kiln/emu_case.h): the same report,
    number for number (only the emulation times differ; an installed package without bin/kiln checks its own)."""
    import re
    blank = lambda t: re.sub(rb"emulated in [0-9.]+ ms", b"emulated in [...] ms", t)
    a = py("run", *args)
    assert a.returncode == 0 and a.stdout.rstrip().endswith(b"within tolerance") and b" max |err| " in a.stdout, \
        a.stdout + a.stderr
    if HAVE_BIN:
        b = cli("run", *args)
        assert b.returncode == 0 and blank(a.stdout) == blank(b.stdout), (a.stdout, b.stdout)
