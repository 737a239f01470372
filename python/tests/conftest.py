"""python/tests/conftest.py - shared fixtures: the package under test, the fake CUDA driver, numpy references."""

import ctypes
import os
import shutil
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PKG_ROOT = os.path.dirname(HERE)  # python/
REPO = os.path.dirname(PKG_ROOT)
if os.environ.get("KILN_TEST_INSTALLED") != "1":
    sys.path.insert(0, PKG_ROOT)  # test the source tree's package (libraries from lib/ or $KILN_LIB_DIR)

O = os.environ.get("O", "build")
FAKE_CUDA = os.environ.get("KILN_FAKE_CUDA") or os.path.join(REPO, O, "tests", "libfakecuda.so.1")
KILN_BIN = os.environ.get("KILN") or os.path.join(REPO, "bin", "kiln")
if not os.path.isabs(KILN_BIN):
    KILN_BIN = os.path.join(REPO, KILN_BIN)


def pytest_collection_modifyitems(config, items):
    """KILN_TEST_SAMPLE=N (the sanitizer pass of tests/python_test.sh sets 8): runs every Nth collected test, in
    collection order, and deselects the others. That pass is there for memory and UB errors in the C libraries under
    the Python calls; the plain pass runs every test."""
    n = os.environ.get("KILN_TEST_SAMPLE", "")
    if not n:
        return
    if not n.isdigit() or int(n) < 1:
        raise pytest.UsageError("KILN_TEST_SAMPLE=%r: give a whole number >= 1 (run every Nth test)" % n)
    n = int(n)
    kept, dropped = items[::n], [it for i, it in enumerate(items) if i % n]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


class FakeLaunch(ctypes.Structure):
    _fields_ = [("entry", ctypes.c_char * 128), ("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3),
                ("smem", ctypes.c_uint), ("nparams", ctypes.c_int), ("param_size", ctypes.c_uint * 48),
                ("param", ctypes.c_uint64 * 48), ("loaded_sm", ctypes.c_int), ("cubin", ctypes.c_int),
                ("ntmaps", ctypes.c_int), ("tmap", (ctypes.c_ubyte * 128) * 6)]  # tests/fake_cuda/fake_cuda.h


class FakeDriver:
    """The fake CUDA driver (tests/fake_cuda): what the runtime launched, failure injection."""

    def __init__(self, path):
        self.path = path
        self.dl = ctypes.CDLL(path)
        self.dl.fake_cuda_last_launch.argtypes = [ctypes.POINTER(FakeLaunch)]
        self.dl.fake_cuda_fail.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int]

    def last_launch(self):
        out = FakeLaunch()
        assert self.dl.fake_cuda_last_launch(ctypes.byref(out)), "no launch recorded"
        return out

    def launches(self):
        """Every launch since the last reset, in order: (entry, params as u64 values)."""
        at = self.dl.fake_cuda_launch_at
        at.argtypes = [ctypes.c_int, ctypes.POINTER(FakeLaunch)]
        out, f = [], FakeLaunch()
        while at(len(out), ctypes.byref(f)):
            out.append((f.entry.decode(), list(f.param[:f.nparams])))
        return out

    def fail(self, op, error, times=1):
        self.dl.fake_cuda_fail(op.encode(), error.encode(), times)

    def reset(self):
        self.dl.fake_cuda_reset()


@pytest.fixture(scope="session")
def fake_cuda_lib(tmp_path_factory):
    """The fake driver's path: the build tree's ($O/tests/libfakecuda.so.1, $KILN_FAKE_CUDA) when make built it,
    else compiled here once from its source (tests/fake_cuda/fake_cuda.c, a few hundred lines of C, well under a
    second), so that the tests of an installed package (pip install ./python) need no build tree: only the C
    compiler the install itself used."""
    if os.path.exists(FAKE_CUDA):
        return FAKE_CUDA
    src = os.path.join(REPO, "tests", "fake_cuda", "fake_cuda.c")
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if not os.path.exists(src) or not cc:
        pytest.skip("no fake CUDA driver: %s is not built and %s" % (
            FAKE_CUDA, "there is no C compiler (cc)" if os.path.exists(src) else "its source %s is missing" % src))
    out = str(tmp_path_factory.mktemp("fakecuda") / "libfakecuda.so.1")
    r = subprocess.run([cc, "-O1", "-std=c11", "-D_GNU_SOURCE", "-fPIC", "-shared", "-fvisibility=hidden",
                        "-I" + os.path.join(REPO, "include"), src, "-o", out, "-lpthread"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert r.returncode == 0, "building the fake CUDA driver failed:\n" + r.stdout[-3000:]
    return out


@pytest.fixture
def fake_cuda(monkeypatch, fake_cuda_lib):
    """Points the runtime at the fake driver posing as an sm_80 device (FAKE_CUDA_SM to change)."""
    monkeypatch.setenv("KILN_CUDA_DRIVER", fake_cuda_lib)
    monkeypatch.setenv("FAKE_CUDA_SM", "80")
    monkeypatch.setenv("KILN_CACHE", "0")
    d = FakeDriver(fake_cuda_lib)
    d.reset()
    yield d
    d.reset()


def ln_reference(x, w, b, eps):
    """float64 LayerNorm over the last axis (biased variance, eps inside the sqrt)."""
    import numpy as np
    xd = np.asarray(x, dtype=np.float64)
    m = xd.mean(-1, keepdims=True)
    var = ((xd - m) ** 2).mean(-1, keepdims=True)
    r = 1.0 / np.sqrt(var + np.float64(np.float32(eps)))
    y = (xd - m) * r
    if w is not None:
        y = y * np.asarray(w, dtype=np.float64)
    if b is not None:
        y = y + np.asarray(b, dtype=np.float64)
    return y, m[..., 0], r[..., 0]


def attention_reference(q, k, v, causal, scale=None):
    """float64 attention for [batch, seq, heads, head_dim]; causal bottom-right aligned; GQA by repetition."""
    import numpy as np
    q, k, v = (np.asarray(t, dtype=np.float64) for t in (q, k, v))
    sq, hq, d = q.shape[1], q.shape[2], q.shape[3]
    sk, hkv = k.shape[1], k.shape[2]
    k = np.repeat(k, hq // hkv, axis=2)
    v = np.repeat(v, hq // hkv, axis=2)
    s = np.einsum("bqhd,bkhd->bhqk", q, k) * (1 / np.sqrt(d) if scale is None else scale)
    if causal:
        keep = np.arange(sk)[None, :] <= np.arange(sq)[:, None] + sk - sq
        s = np.where(keep, s, -np.inf)
    mx = s.max(-1, keepdims=True)
    mx = np.where(np.isfinite(mx), mx, 0)
    p = np.exp(s - mx)
    den = p.sum(-1, keepdims=True)
    lse = np.where(den[..., 0] > 0, np.log(np.where(den[..., 0] > 0, den[..., 0], 1)) + mx[..., 0], np.inf)
    p = np.divide(p, den, out=np.zeros_like(p), where=den > 0)
    return np.einsum("bhqk,bkhd->bqhd", p, v), lse


@pytest.fixture
def emu():
    """kiln.torch.emulated() around a test: kiln's kernels run on CPU tensors through the emulator (the torch
    test modules skip themselves where torch is missing)."""
    import kiln.torch as kt
    with kt.emulated() as e:
        yield e

