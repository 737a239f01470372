"""A kernel family kiln's Python code has never heard of works through generate, emulate and the runtime:
binding is by the names and dtypes in the kernel's metadata. The family is a test template in a private
template directory ($KILN_TEMPLATE_DIR), run in a subprocess."""

import os
import shutil
import subprocess
import sys

from conftest import PKG_ROOT, REPO

SCALE = """-- scale.lua - a test family unknown to kiln's Python code: out = inp * s, elementwise.
local K = {
  doc = "test family: out = inp * s",
  params = {
    { name = "x", type = "dtype", default = "f32", doc = "input dtype" },
    { name = "y", type = "dtype", default = "=x", doc = "output dtype" },
  },
}
local THREADS = 128
function K.config(spec, target) return { block = THREADS, grid_tile = THREADS, align = 4 } end
function K.build(b, spec, cfg)
  local p = b:kernel{ params = {
    { "out", "ptr", spec.y }, { "inp", "ptr", spec.x, readonly = true }, { "n", "i32" }, { "s", "f32" } } }
  local i = b:ctaid() * THREADS + b:tid()
  b:exit_if(b:ge(i, p.n))
  b:store(p.out + i, b:from_f32(b:to_f32(b:load(p.inp + i)) * p.s, spec.y))
end
return K
"""

CHECK = r"""
import numpy as np, ml_dtypes, kiln
assert "scale" in kiln.families(), kiln.families()
k = kiln.generate("scale x=bf16 y=f32", 75)
assert [p["name"] for p in k.params] == ["out", "inp", "n", "s"] and len(kiln.lint(k.text, sm=75)) == 0
e = kiln.emulate.load("scale x=bf16 y=f32", 75)
x = (np.arange(300, dtype=np.float32) - 150).astype(ml_dtypes.bfloat16)
y = np.zeros(300, np.float32)
e.run(problem=(300,), out=y, inp=x, n=300, s=0.5)
assert np.array_equal(y, x.astype(np.float32) * 0.5), y[:8]
try:
    e.run(problem=(300,), out=y, inp=y, n=300, s=0.5)
    raise SystemExit("a f32 array for the bf16 'inp' was accepted")
except kiln.KilnArgumentError as err:
    assert "'inp' must be bf16" in str(err), err
rt = kiln.Runtime(disk_cache=False)
dx, dy = rt.from_numpy(x), rt.empty((300,), "f32")
rk = rt.kernel("scale x=bf16 y=f32")
rk.launch(problem=(300,), out=dy, inp=dx, n=300, s=2.0)
print("OK", rk.origin, rk.grid((300,)))
"""


def test_unknown_family_through_generate_emulate_runtime(tmp_path, fake_cuda):
    tpl = tmp_path / "templates"
    shutil.copytree(os.path.join(REPO, "templates"), str(tpl))
    (tpl / "scale.lua").write_text(SCALE)
    env = dict(os.environ, KILN_TEMPLATE_DIR=str(tpl), PYTHONPATH=PKG_ROOT)
    r = subprocess.run([sys.executable, "-c", CHECK], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, cwd=str(tmp_path))
    assert r.returncode == 0 and "OK generated (3, 1, 1)" in r.stdout, r.stdout[-3000:]
