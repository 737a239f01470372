"""python -m kiln mirrors bin/kiln: same output for emit, list, lint, bundle-info; same exit statuses."""

import json
import os
import subprocess
import sys

import pytest

from conftest import KILN_BIN, PKG_ROOT

HAVE_BIN = os.path.exists(KILN_BIN)
BAD = ".version 6.3\n.target sm_75\n.address_size 64\n.visible .entry k()\n{\n.reg .f32 %f<2>;\n.reg .b16 %rs<2>;\n" \
      "cvt.rn.bf16.f32 %rs1, %f1;\nret;\n}\n"


def py(*args, stdin=None):
    env = dict(os.environ, PYTHONPATH=PKG_ROOT)
    return subprocess.run([sys.executable, "-m", "kiln"] + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          env=env, input=stdin)


def cli(*args):
    return subprocess.run([KILN_BIN] + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE)


@pytest.mark.skipif(not HAVE_BIN, reason="bin/kiln not built")
@pytest.mark.parametrize("args", [["list"], ["emit", "layernorm", "x=bf16", "w=f32", "--sm", "75"],
                                  ["emit", "attention", "dtype=f16", "--sm", "sm_80", "--emit", "ll"]])
def test_same_output_as_bin_kiln(args):
    a, b = py(*args), cli(*args)
    assert a.returncode == b.returncode == 0, a.stderr
    assert a.stdout == b.stdout


@pytest.mark.skipif(not HAVE_BIN, reason="bin/kiln not built")
def test_lint_text_json_and_status(tmp_path):
    bad = tmp_path / "bad.ptx"
    bad.write_text(BAD)
    good = tmp_path / "good.ptx"
    good.write_bytes(cli("emit", "layernorm", "x=bf16", "--sm", "75").stdout)
    a, b = py("lint", str(bad)), cli("lint", str(bad))
    assert a.returncode == b.returncode == 1 and a.stdout == b.stdout
    assert py("lint", str(good)).returncode == 0
    j = json.loads(py("lint", str(bad), str(good), "--json").stdout)
    assert [len(f["findings"]) for f in j["files"]] == [1, 0] and j["files"][0]["findings"][0]["line"] == 8
    missing = py("lint", str(tmp_path / "nope.ptx"))
    assert missing.returncode == 2 and b"kiln: error:" in missing.stderr
    assert missing.stderr.count(b"nope.ptx") == 1, missing.stderr  # the path once, as bin/kiln says it


def test_usage_errors_exit_2():
    for args, words in ([["emit", "layernorm", "--sm", "61"], b"61"], [["emit", "layernorm"], b"--sm"],
                        [["frobnicate"], b"unknown command"], [[], b"missing command"],
                        [["emit", "layernorm", "x=f99", "--sm", "80"], b"f99"],
                        [["bundle", "layernorm", "--sm", "80"], b"-o FILE"],
                        [["run", "layernorm", "--sm", "80", "--rows", "0"], b"bad --rows 0; valid: 1..1048576"]):
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


@pytest.mark.skipif(not HAVE_BIN, reason="bin/kiln not built")
def test_unbounded_inputs_refused_like_bin_kiln(tmp_path):
    """/dev/zero, a FIFO and a sparse file over the input limit: one error, exit 2, as bin/kiln says it."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    sparse = tmp_path / "sparse"
    with open(sparse, "wb") as f:
        f.truncate(257 << 20)
    out = str(tmp_path / "out.kbundle")
    for path, what in (("/dev/zero", b"is a character device"), (str(fifo), b"is a FIFO (named pipe)"),
                       (str(sparse), b"than kiln's input limit of 256 MiB")):
        for args in (["lint", path], ["bundle-info", path], ["bundle", "--spec-list", path, "--sm", "80", "-o", out]):
            a, b = py(*args), cli(*args)
            assert a.returncode == b.returncode == 2 and what in a.stderr, (args, a.stderr)
            assert a.stderr == b.stderr, (args, a.stderr, b.stderr)
    assert not os.path.exists(out)
    env = dict(os.environ, PYTHONPATH=PKG_ROOT, KILN_MAX_INPUT_MB="1")  # standard input: streamed to the limit
    a = subprocess.run([sys.executable, "-m", "kiln", "lint", "-"], input=b"\0" * (3 << 20), env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert a.returncode == 2 and b"standard input is larger than kiln's input limit of 1 MiB" in a.stderr, a.stderr
