"""python/tests/test_abi.py - every ctypes mirror in kiln/_lib.py has the size of its C struct, and the key codes their C numbers.

A mirror that falls behind its header is silent memory corruption (the C side reads or writes past
the Python buffer): compile a few lines of C against include/kiln and compare sizeof with
ctypes.sizeof, struct by struct. Needs a C compiler, as building kiln does."""
import ctypes
import os
import shutil
import subprocess

import pytest

from kiln import _lib
from kiln._rt_varlen import VarlenArgs

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MIRRORS = {
    "kiln_error": _lib.Error, "kiln_param": _lib.Param, "kiln_kernel_meta": _lib.KernelMeta,
    "kiln_lint_finding": _lib.LintFinding, "kiln_lint_module": _lib.LintModule,
    "kiln_lint_image": _lib.LintImage, "kiln_lint_binary": _lib.LintBinary,
    "kiln_gen_options": _lib.GenOptions, "kiln_emu_launch": _lib.EmuLaunch, "kiln_rt_options": _lib.RtOptions,
    "kiln_sm_facts": _lib.SmFacts, "kiln_device_info": _lib.DeviceInfo, "kiln_rt_stats": _lib.RtStats,
    "kiln_attention_args": _lib.AttentionArgs, "kiln_attention_kvcache": _lib.AttentionKvCache,
    "kiln_attention_mask": _lib.AttentionMask, "kiln_attention_varlen": VarlenArgs,
    "kiln_attention_bwd_args": _lib.AttentionBwdArgs, "kiln_bundle_entry": _lib.BundleEntry,
    "kiln_norm_fwd_args": _lib.NormFwdArgs, "kiln_norm_bwd_args": _lib.NormBwdArgs,
    "kiln_case_opts": _lib.CaseOpts, "kiln_case_output": _lib.CaseOutput, "kiln_case_step": _lib.CaseStep,
    "kiln_launch_step": _lib.LaunchStep, "kiln_bundle_matrix": _lib.BundleMatrix,
}


def c_sizes(tmp_path):
    cc = os.environ.get("CC", "cc")
    if not shutil.which(cc) or not os.path.isdir(os.path.join(ROOT, "include", "kiln")):
        pytest.skip("needs a C compiler and kiln's headers (a source tree)")
    src = tmp_path / "sizes.c"
    body = "".join('    printf("%s %%zu\\n", sizeof(%s));\n' % (n, n) for n in MIRRORS)
    src.write_text('#include <stdio.h>\n#include "kiln/kiln.h"\n#include "kiln/emu.h"\n#include "kiln/emu_case.h"\n#include "kiln/lint.h"\n'
                   '#include "kiln/runtime.h"\nint main(void) {\n' + body + "    return 0;\n}\n")
    exe = tmp_path / "sizes"
    subprocess.run([cc, "-std=c11", "-I", os.path.join(ROOT, "include"), str(src), "-o", str(exe)], check=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    return {name: int(size) for name, size in (line.split() for line in out.splitlines())}


def test_every_mirror_has_its_c_size(tmp_path):
    sizes = c_sizes(tmp_path)
    wrong = {n: (sizes[n], ctypes.sizeof(m)) for n, m in MIRRORS.items() if sizes[n] != ctypes.sizeof(m)}
    assert not wrong, "ctypes mirrors differ from C (name: C size, ctypes size): %r" % wrong


def test_key_codes_mirror_the_header(tmp_path):
    """_attn_keys' CAUSAL_CODE and ROTARY_CODE are kiln/runtime.h's KILN_CAUSAL_* and KILN_ROTARY_* numbers (the
    runtime spells value i of the template's list for C value i)."""
    from kiln._attn_keys import CAUSAL_CODE, ROTARY_CODE
    cc = os.environ.get("CC", "cc")
    if not shutil.which(cc) or not os.path.isdir(os.path.join(ROOT, "include", "kiln")):
        pytest.skip("needs a C compiler and kiln's headers (a source tree)")
    names = {"KILN_CAUSAL_NONE": CAUSAL_CODE["false"], "KILN_CAUSAL_BOTTOM_RIGHT": CAUSAL_CODE["true"],
             "KILN_CAUSAL_TOP_LEFT": CAUSAL_CODE["top_left"], "KILN_ROTARY_NONE": ROTARY_CODE["none"],
             "KILN_ROTARY_NEOX": ROTARY_CODE["neox"], "KILN_ROTARY_INTERLEAVED": ROTARY_CODE["interleaved"]}
    src = tmp_path / "codes.c"
    src.write_text('#include <stdio.h>\n#include "kiln/runtime.h"\nint main(void) {\n'
                   + "".join('    printf("%s %%d\\n", %s);\n' % (n, n) for n in names) + "    return 0;\n}\n")
    exe = tmp_path / "codes"
    subprocess.run([cc, "-std=c11", "-I", os.path.join(ROOT, "include"), str(src), "-o", str(exe)], check=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    got = {n: int(v) for n, v in (line.split() for line in out.splitlines())}
    assert got == names, "Python's key codes differ from kiln/runtime.h (C: %r, Python: %r)" % (got, names)
