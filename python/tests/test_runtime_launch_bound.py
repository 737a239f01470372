"""kiln.Runtime launching a TMA kernel against the fake CUDA driver: the tensor maps its launch description declares
are bound and checked by the C runtime (kiln_launch_bind), encoded by the driver (cuTensorMapEncodeTiled, the fake
one writes kiln's record) and passed as 128-byte parameters, by Runtime.launch and by Kernel.launch_bound (the
launch description's names, bound in C)."""

import json
import os
import subprocess
import sys

from conftest import PKG_ROOT

HERE = os.path.dirname(os.path.abspath(__file__))

# One box of {8 rows, 32 f32} of x [h, w] at (row0, 0) by TMA into shared memory (128-byte swizzle), then y.
TMAONE = """local K = { params = { { name = 'row0', type = 'int', default = 0, min = 0, max = 64 } } }
function K.config(spec, t) return { block = 128, grid_tile = 1 } end
function K.launch(spec, cfg)
  return { tensors = { { 'y', 'out', { 256 } }, { 'x', 'in', { 'h', 'w' } } }, scalars = { { 'h' }, { 'w' } },
           problem = { 1 }, tmaps = { { 'tm', 'x', box = { 8, 32 }, swizzle = 128 } } }
end
function K.build(b, spec, cfg)
  local p = b:kernel{ params = { { 'y', 'ptr', 'f32' }, { 'tm', 'tensormap', 'f32' } } }
  local data = b:shared('f32', 256, 1024)
  local bar = b:shared('f32', 2, 8)
  local t = b:tid()
  b:if_(b:eq(t, 0), function()
    b:mbarrier_init(bar, 1)
    b:mbarrier_arrive(bar, { tx = b:i32(1024) })
    b:tma_load(data, p.tm, { 0, spec.row0 }, bar)
  end)
  b:barrier()
  b:mbarrier_wait(bar, 0)
  for j = 0, 1 do
    local e = t + 128 * j
    local off = e * 4
    off = off ~ (((off >> 7) & 7) << 4)
    b:store(p.y + e, b:load(data + off // 4))
  end
end
return K
"""

CHILD = r"""
import ctypes, json, struct, sys
sys.path.insert(0, %(tests)r)
from conftest import FakeLaunch
import kiln
fake = ctypes.CDLL(%(fake)r)
fake.fake_cuda_last_launch.argtypes = [ctypes.POINTER(FakeLaunch)]
rt = kiln.Runtime(disk_cache=False)
out = {}
def last(label):
    f = FakeLaunch()
    assert fake.fake_cuda_last_launch(ctypes.byref(f))
    maps = []
    for j in range(f.ntmaps):
        b = bytes(f.tmap[j])
        magic, elem, rank, swz, base = struct.unpack_from("<4IQ", b, 0)
        dims = struct.unpack_from("<5Q", b, 24)[:rank]
        strides = struct.unpack_from("<4Q", b, 64)[:rank - 1]
        box = struct.unpack_from("<5I", b, 96)[:rank]
        maps.append({"magic": magic, "elem": elem, "rank": rank, "swizzle": swz, "base": base, "dims": dims,
                     "strides": strides, "box": box})
    out[label] = {"entry": f.entry.decode(), "grid": list(f.grid), "block": list(f.block), "maps": maps,
                  "y": f.param[0]}
y = rt.empty((256,), "f32"); x = rt.empty((24, 64), "f32")
out["x"], out["ydev"] = x.ptr, y.ptr
rt.launch("tmaone row0=8", tensors={"y": y, "x": x}, scalars={"h": 20, "w": 64})
last("runtime")
k = rt.kernel("tmaone row0=8")
k.launch_bound(y=y, x=x, h=20, w=64)
last("kernel")
k.launch_bound(grid=(3,), y=y, x=x, h=20, w=64)
last("kernel_grid")
for label, kw in (("bad_stride", {"h": 20, "w": 62}), ("missing", {"h": 20, "w": 64, "x": None})):
    try:
        kw = dict(kw)
        xx = kw.pop("x", x)
        k.launch_bound(y=y, x=xx, **kw)
        out[label] = "launched"
    except kiln.KilnError as e:
        out[label] = str(e)
print(json.dumps(out))
"""


def test_tensor_maps_from_python(fake_cuda, tmp_path):
    (tmp_path / "tmaone.lua").write_text(TMAONE)
    env = dict(os.environ, PYTHONPATH=PKG_ROOT, KILN_TEMPLATE_DIR=str(tmp_path), KILN_CACHE="0", FAKE_CUDA_SM="90")
    r = subprocess.run([sys.executable, "-c", CHILD % {"tests": HERE, "fake": fake_cuda.path}], env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd="/")
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    for label in ("runtime", "kernel", "kernel_grid"):
        got = out[label]
        assert got["entry"].startswith("kiln_tmaone") and got["y"] == out["ydev"], got
        assert len(got["maps"]) == 1, got
        m = got["maps"][0]
        # kiln's record as the (fake) driver encoded it: innermost first, x's pointer, rows of 64 f32
        assert m["magic"] == 0x504D544B and m["elem"] == 4 and m["rank"] == 2 and m["swizzle"] == 3, m
        assert m["base"] == out["x"] and list(m["dims"]) == [64, 20] and list(m["strides"]) == [256], m
        assert list(m["box"]) == [32, 8], m
    assert out["runtime"]["grid"] == [1, 1, 1] and out["kernel"]["grid"] == [1, 1, 1]
    assert out["kernel_grid"]["grid"] == [3, 1, 1]
    assert "tm" in out["bad_stride"] and "16" in out["bad_stride"], out["bad_stride"]
    assert out["missing"] != "launched" and "x" in out["missing"], out["missing"]
