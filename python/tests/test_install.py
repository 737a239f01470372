"""pip install ./python into a fresh venv; the installed package works from outside the source tree with the
system's LLVM and Lua hidden from the loader (a private mount namespace when allowed, else LD_DEBUG evidence)."""

import glob
import os
import re
import shutil
import subprocess
import sys

import pytest

from conftest import PKG_ROOT, REPO

pytestmark = pytest.mark.skipif(os.environ.get("KILN_TEST_INSTALL", "1") == "0",
                                reason="KILN_TEST_INSTALL=0 (the sanitizer pass sets it; the plain pass runs the wheel test)")

HIDE = ["/usr/lib/llvm-22"] + sorted(set(glob.glob("/usr/lib/x86_64-linux-gnu/libLLVM*22*")) |
                                     set(glob.glob("/usr/lib/x86_64-linux-gnu/liblua5.4.so*")))

CHECK = r"""
import numpy as np, kiln
paths = kiln.library_paths()
print("PATHS", paths)
k = kiln.generate("layernorm x=bf16 w=f32 y=bf16 hidden=256", sm=75)
assert len(kiln.lint(k.text, sm=75)) == 0
x = np.random.default_rng(0).normal(size=(4, 256)).astype(np.float32)
y = kiln.emulate.layer_norm(x, None, None, sm=80)
ref = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
assert np.abs(y - ref).max() < 1e-4
print("OK", kiln.__file__)
"""


@pytest.fixture(scope="module")
def wheel_file(tmp_path_factory):
    """The wheel `pip install ./python` builds (setup.py runs make, then vendors the libraries)."""
    if shutil.which("make") is None or not os.path.exists(os.path.join(REPO, "lib", "libkiln.so.0")):
        pytest.skip("lib/libkiln.so.0 not built")
    out = tmp_path_factory.mktemp("wheel")
    try:
        import setuptools  # noqa: F401
        import wheel  # noqa: F401
        iso = ["--no-build-isolation"]
    except ImportError:
        iso = []  # pip fetches setuptools and wheel from PyPI
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--progress-bar", "off", "-w", str(out)]
                       + iso + [PKG_ROOT], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for p in ("build", "kiln.egg-info"):
        shutil.rmtree(os.path.join(PKG_ROOT, p), ignore_errors=True)
    if r.returncode != 0 and not iso and ("Could not find a version" in r.stdout or "connection" in r.stdout.lower()):
        pytest.skip("pip cannot fetch setuptools/wheel for the build (no network): " + r.stdout[-300:])
    assert r.returncode == 0, r.stdout[-3000:]
    wheels = glob.glob(str(out / "kiln-*-py3-none-linux_*.whl"))
    assert len(wheels) == 1, os.listdir(str(out))
    return wheels[0]


@pytest.fixture(scope="module")
def venv(wheel_file, tmp_path_factory):
    v = str(tmp_path_factory.mktemp("venv") / "v")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", v], check=True)
    py = os.path.join(v, "bin", "python")
    r = subprocess.run([sys.executable, "-m", "pip", "--python", py, "install", "--no-deps", "--no-index",
                        "--progress-bar", "off", wheel_file], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True)
    assert r.returncode == 0, r.stdout[-3000:]
    return py


def _site_lib(py):
    out = subprocess.run([py, "-c", "import kiln, os; print(os.path.dirname(kiln.__file__))"], cwd="/",
                         stdout=subprocess.PIPE, text=True, env=_clean_env(), check=True).stdout.strip()
    return os.path.join(out, "_lib")


def _clean_env():
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "KILN_LIB_DIR", "LD_LIBRARY_PATH")}
    return env


def test_wheel_ships_the_libraries(venv):
    lib = _site_lib(venv)
    assert not lib.startswith(PKG_ROOT)
    names = sorted(os.listdir(lib))
    assert {"libkiln.so.0", "libkiln_rt.so.0", "liblua5.4.so.0"} <= set(names)
    ldd = subprocess.run(["ldd", os.path.join(lib, "libkiln.so.0")], stdout=subprocess.PIPE, text=True).stdout
    assert "libLLVM" not in ldd and "llvm-22" not in ldd, ldd


def _hidden_run(argv, tmp_path, env):
    """Runs argv with /usr/lib/llvm-22, libLLVM-22 and liblua hidden (a private mount namespace), or plainly
    where namespaces are not allowed (the LD_DEBUG checks then carry the proof)."""
    hide = " && ".join("mount --bind %s %s" % ("/dev/null" if os.path.isfile(p) else str(tmp_path), p)
                       for p in HIDE if os.path.exists(p) and not os.path.islink(p))
    cmd = ["unshare", "-m", "--propagation", "private", "sh", "-c",
           "%s && exec %s" % (hide or "true", " ".join(argv))]
    r = subprocess.run(cmd, cwd=str(tmp_path), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0 and "OK" not in r.stdout and ("unshare" in r.stdout or "mount" in r.stdout):
        print("cannot hide the system libraries here (%s); checking the loader's choices only" % r.stdout.strip())
        r = subprocess.run(argv, cwd=str(tmp_path), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True)
    return r


def _check_loaded_from(lib, r, ld_prefix):
    assert r.returncode == 0 and "OK" in r.stdout, r.stdout[-3000:]
    assert lib in r.stdout and "'liblua': '%s/liblua5.4.so.0'" % lib in r.stdout, r.stdout
    log = "".join(open(p).read() for p in glob.glob(ld_prefix + "*"))
    loaded = [ln for ln in log.splitlines() if "calling init:" in ln]
    assert any(lib + "/libkiln.so.0" in ln for ln in loaded), loaded
    assert any(lib + "/liblua5.4.so.0" in ln for ln in loaded), loaded
    assert not [ln for ln in loaded if "llvm" in ln.lower() or "/usr/lib/x86_64-linux-gnu/liblua" in ln], loaded


def test_unzipped_wheel_with_pythonpath_only(wheel_file, tmp_path):
    """The GPU kit's way: the wheel unzipped, PYTHONPATH pointing at it, nothing installed."""
    import zipfile
    with zipfile.ZipFile(wheel_file) as z:
        z.extractall(str(tmp_path / "kit"))
    script = str(tmp_path / "check.py")
    with open(script, "w") as f:
        f.write(CHECK)
    env = _clean_env()
    env.update(PYTHONPATH=str(tmp_path / "kit"), LD_DEBUG="libs", LD_DEBUG_OUTPUT=str(tmp_path / "ld"))
    r = _hidden_run([sys.executable, script], tmp_path, env)
    _check_loaded_from(str(tmp_path / "kit" / "kiln" / "_lib"), r, str(tmp_path / "ld"))


def test_works_outside_the_tree_with_llvm_and_lua_hidden(venv, tmp_path):
    lib = _site_lib(venv)
    env = _clean_env()
    env["LD_DEBUG"] = "libs"
    env["LD_DEBUG_OUTPUT"] = str(tmp_path / "ld")
    script = str(tmp_path / "check.py")
    with open(script, "w") as f:
        f.write(CHECK)
    r = _hidden_run([venv, script], tmp_path, env)
    _check_loaded_from(lib, r, str(tmp_path / "ld"))


def test_lib_dir_override_without_pip(tmp_path):
    """The GPU kit's way: KILN_LIB_DIR + PYTHONPATH, no pip, no source tree."""
    kit = tmp_path / "kit"
    shutil.copytree(os.path.join(PKG_ROOT, "kiln"), str(kit / "kiln"),
                    ignore=shutil.ignore_patterns("__pycache__", "_lib"))
    libs = tmp_path / "libs"
    libs.mkdir()
    for n in ("libkiln.so.0", "libkiln_rt.so.0"):
        shutil.copyfile(os.path.realpath(os.path.join(REPO, "lib", n)), str(libs / n))
    lua = [p for p in ("/usr/lib/x86_64-linux-gnu/liblua5.4.so.0",) if os.path.exists(p)]
    if lua:
        shutil.copyfile(os.path.realpath(lua[0]), str(libs / "liblua5.4.so.0"))
    env = _clean_env()
    env.update(KILN_LIB_DIR=str(libs), PYTHONPATH=str(kit))
    r = subprocess.run([sys.executable, "-c", CHECK], cwd=str(tmp_path), env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    assert r.returncode == 0 and "OK %s" % (kit / "kiln") in r.stdout, r.stdout[-3000:]
    assert "'libkiln': '%s/libkiln.so.0'" % libs in r.stdout


# The names by which a test file reaches outside the installed package (conftest's fake driver and bin/kiln, the
# source tree's root and corpora): the files that could skip for want of a build tree.
BUILD_TREE_NAMES = re.compile(r"\b(fake_cuda|fake_cuda_lib|FAKE_CUDA|KILN_BIN|REPO|ROOT)\b")


def installed_suite_files(here, full):
    """The test files the installed package's run takes: every one but this file under KILN_TEST_FULL=1, else
    those naming something outside the package (BUILD_TREE_NAMES; the others import only the package, numpy
    and torch, and the plain pass ran them against the same code a minute before)."""
    files = sorted(f for f in glob.glob(os.path.join(here, "test_*.py")) if os.path.basename(f) != "test_install.py")
    if full:
        return files
    return [f for f in files if BUILD_TREE_NAMES.search(open(f).read())]


def test_installed_suite_takes_the_files_that_reach_the_build_tree():
    here = os.path.dirname(os.path.abspath(__file__))
    quick = [os.path.basename(f) for f in installed_suite_files(here, False)]
    assert {"test_cli.py", "test_runtime.py", "test_generate.py", "test_lint_bin.py"} <= set(quick), quick
    assert "test_install.py" not in quick and len(quick) < len(installed_suite_files(here, True))


def test_installed_package_tests_need_no_build_tree(venv, tmp_path):
    """The package's own tests run against the installed package with no build tree: no bin/kiln, no
    $O/tests/libfakecuda.so.1 (conftest compiles the fake driver from its source). Nothing skips for want of
    them; only kiln.torch's files may skip (no torch, or no GPU for the GPU tests). The quick suite takes the
    files that reach outside the package (installed_suite_files), KILN_TEST_FULL=1 every file."""
    env = _clean_env()
    env.update(KILN_TEST_INSTALLED="1", KILN_TEST_INSTALL="0", KILN=str(tmp_path / "no-bin" / "kiln"),
               O=str(tmp_path / "no-build"), PYTHONDONTWRITEBYTECODE="1")
    env.pop("KILN_FAKE_CUDA", None)
    here = os.path.dirname(os.path.abspath(__file__))
    full = os.environ.get("KILN_TEST_FULL", "0") not in ("", "0")
    r = subprocess.run([venv, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider"] + installed_suite_files(here, full),
                       cwd=str(tmp_path), env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert r.returncode == 0, r.stdout[-4000:]
    skips = [ln for ln in r.stdout.splitlines() if ln.startswith("SKIPPED")]
    assert all("test_torch_" in ln for ln in skips), "\n".join(skips)
    assert " passed" in r.stdout.splitlines()[-1], r.stdout[-500:]
