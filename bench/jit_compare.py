"""bench/jit_compare.py - JIT as a user's process meets it, side by side in one run: `kiln emit` of
a bf16 LayerNorm and attention forward (sm_80) against an NVRTC process compiling the same
LayerNorm from CUDA C with cuda_bf16.h (bench/nvrtc_once.c) and against Triton compiling a
LayerNorm and a flash-attention forward from an empty cache (bench/triton_compile.py).

Medians of wall time and of CPU time (user + system of the process, from wait4). On a shared,
loaded machine the wall times move with the load of others; the CPU times move much less.

usage: python3 bench/jit_compare.py [--kiln bin/kiln] [--nvrtc build/bench/nvrtc_once] [--reps N]
       [--triton-reps N] [--no-triton]"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time


def run_once(cmd, env=None):
    """(wall s, cpu s) of one process; exits on failure."""
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.monotonic() - t0
    err = p.stderr.read().decode(errors="replace")
    p.stderr.close()
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit("jit_compare: %s failed:\n%s" % (" ".join(cmd), err[-2000:]))
    return wall, ru.ru_utime + ru.ru_stime


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", default="bin/kiln")
    ap.add_argument("--nvrtc", default="build/bench/nvrtc_once")
    ap.add_argument("--reps", type=int, default=11)
    ap.add_argument("--triton-reps", type=int, default=3)
    ap.add_argument("--no-triton", action="store_true", help="leave Triton out (it takes seconds a run)")
    a = ap.parse_args()
    out = tempfile.mkdtemp(prefix="kiln-jit-compare-")
    ln = ["layernorm", "x=bf16", "w=f32", "y=bf16", "hidden=4096", "--sm", "80"]
    attn = ["attention", "dtype=bf16", "head_dim=128", "causal=true", "--sm", "80"]
    cases = [
        ("kiln emit LayerNorm", [a.kiln, "emit"] + ln + ["-o", out + "/ln.ptx"], a.reps, False),
        ("kiln emit attention", [a.kiln, "emit"] + attn + ["-o", out + "/attn.ptx"], a.reps, False),
    ]
    have_nvrtc = os.access(a.nvrtc, os.X_OK) and subprocess.run([a.nvrtc], capture_output=True).returncode == 0
    if have_nvrtc:
        cases.append(("NVRTC LayerNorm (cuda_bf16.h)", [a.nvrtc], a.reps, False))
    try:
        import triton  # noqa: F401
        have_triton = not a.no_triton
    except ImportError:
        have_triton = False
    here = os.path.dirname(os.path.abspath(__file__))
    if have_triton:
        py = [sys.executable, os.path.join(here, "triton_compile.py")]
        cases += [
            ("Triton LayerNorm to PTX", py + ["layernorm", "--ptx-only"], a.triton_reps, True),
            ("Triton attention to PTX", py + ["attention", "--ptx-only"], a.triton_reps, True),
            ("Triton LayerNorm to cubin", py + ["layernorm"], a.triton_reps, True),
            ("Triton attention to cubin", py + ["attention"], a.triton_reps, True),
        ]
    res = {name: ([], []) for name, _, _, _ in cases}
    rounds = max(c[2] for c in cases)
    for r in range(rounds):  # interleaved, so every case meets the same load
        for name, cmd, reps, fresh_cache in cases:
            if r >= reps:
                continue
            env = None
            cache = None
            if fresh_cache:
                cache = tempfile.mkdtemp(prefix="kiln-triton-cache-")
                env = dict(os.environ, TRITON_CACHE_DIR=cache)
            w, c = run_once(cmd, env)
            if cache:
                shutil.rmtree(cache, ignore_errors=True)
            res[name][0].append(w)
            res[name][1].append(c)
    shutil.rmtree(out, ignore_errors=True)
    load = os.getloadavg()
    print("JIT as a process, sm_80, median wall / CPU (user+sys) in ms; load average %.1f %.1f %.1f on %d cores"
          % (load[0], load[1], load[2], os.cpu_count()))
    med = {}
    for name, _, reps, _ in cases:
        w, c = res[name]
        med[name] = (statistics.median(w) * 1e3, statistics.median(c) * 1e3)
        print("  %-32s %9.1f %9.1f   (%d runs)" % (name, med[name][0], med[name][1], len(w)))

    def ratio(other, mine, goal):
        if other not in med:
            return
        rw, rc = med[other][0] / med[mine][0], med[other][1] / med[mine][1]
        print("  %-32s vs %-20s %6.1fx wall %6.1fx CPU   (goal >= %dx)" % (other, mine, rw, rc, goal))

    print("kiln emit is faster by:")
    ratio("NVRTC LayerNorm (cuda_bf16.h)", "kiln emit LayerNorm", 4)
    ratio("Triton LayerNorm to PTX", "kiln emit LayerNorm", 20)
    ratio("Triton LayerNorm to cubin", "kiln emit LayerNorm", 20)
    ratio("Triton attention to PTX", "kiln emit attention", 20)
    ratio("Triton attention to cubin", "kiln emit attention", 20)
    if not have_nvrtc:
        print("NVRTC: %s not built or libnvrtc missing; no comparison" % a.nvrtc)
    if not have_triton and not a.no_triton:
        print("Triton: not installed (pip install triton); no comparison")


if __name__ == "__main__":
    main()
