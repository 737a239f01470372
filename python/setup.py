"""python/setup.py - builds kiln's C libraries with the top-level Makefile and puts them inside the package.

`pip install ./python` (from a kiln clone) runs `make lib/libkiln_rt.so lib/libkiln.so` in the
repository root, then copies into kiln/_lib/ of the build:
  libkiln_rt.so.0   the runtime (libc, libdl only)
  libkiln.so.0      generator + lint + emulator, LLVM's components linked in statically,
                    RUNPATH $ORIGIN, so its DT_NEEDED liblua5.4.so.0 resolves to the copy beside it
  liblua5.4.so.0    vendored from the build machine (Debian's liblua5.4.a is not PIC, so Lua
                    cannot be static inside a shared library)
stripped of debug sections. $KILN_SKIP_MAKE=1 uses lib/ as it is (already built).
"""

import os
import shutil
import subprocess

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

try:
    from wheel.bdist_wheel import bdist_wheel
except ImportError:  # setuptools >= 70.1 carries its own
    from setuptools.command.bdist_wheel import bdist_wheel

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
LIBDIR = os.path.join(ROOT, "lib")


def _find_lua(libkiln):
    """The liblua5.4.so.0 libkiln.so resolves to on this machine (ldd), else the usual Debian path."""
    try:
        out = subprocess.run(["ldd", libkiln], stdout=subprocess.PIPE, text=True, check=True).stdout
        for line in out.splitlines():
            parts = line.split()
            if parts and parts[0].startswith("liblua") and "=>" in parts and os.path.exists(parts[2]):
                return parts[2]
    except (OSError, subprocess.CalledProcessError, IndexError):
        pass
    for d in ("/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib", "/usr/local/lib"):
        p = os.path.join(d, "liblua5.4.so.0")
        if os.path.exists(p):
            return p
    raise SystemExit("kiln: liblua5.4.so.0 not found; install liblua5.4-dev (make setup)")


class build_py_with_libs(build_py):
    def run(self):
        super().run()
        if not os.path.exists(os.path.join(ROOT, "Makefile")):
            raise SystemExit("kiln: building the package needs the kiln source tree (%s/Makefile not found); "
                             "run pip install ./python from a kiln clone" % ROOT)
        if os.environ.get("KILN_SKIP_MAKE") != "1":
            jobs = str(os.cpu_count() or 1)
            subprocess.check_call(["make", "-C", ROOT, "-j", jobs, "lib/libkiln_rt.so", "lib/libkiln.so"])
        dest = os.path.join(self.build_lib, "kiln", "_lib")
        os.makedirs(dest, exist_ok=True)
        rt = os.path.join(LIBDIR, "libkiln_rt.so.0")
        gen = os.path.join(LIBDIR, "libkiln.so.0")
        files = {"libkiln_rt.so.0": rt, "libkiln.so.0": gen, "liblua5.4.so.0": _find_lua(gen)}
        strip = shutil.which("strip")
        for name, src in files.items():
            out = os.path.join(dest, name)
            shutil.copyfile(os.path.realpath(src), out)  # the real file under its SONAME
            if strip and name.startswith("libkiln"):
                subprocess.check_call([strip, "--strip-unneeded", out])
            os.chmod(out, 0o755)
        lic = os.path.join(ROOT, "LICENSE")
        if os.path.exists(lic):
            shutil.copyfile(lic, os.path.join(dest, "LICENSE.kiln"))


class platform_wheel(bdist_wheel):
    """The package carries shared libraries: a platform wheel, for any Python 3 (no CPython extension)."""

    def finalize_options(self):
        super().finalize_options()
        self.root_is_pure = False

    def get_tag(self):
        _py, _abi, plat = super().get_tag()
        return "py3", "none", plat


class binary_distribution(Distribution):
    """Installs into platlib at the wheel's root (not .data/purelib): an unzipped wheel is then a plain
    kiln/ directory, usable with PYTHONPATH alone (the GPU kit's way)."""

    def has_ext_modules(self):
        return True


setup(distclass=binary_distribution, cmdclass={"build_py": build_py_with_libs, "bdist_wheel": platform_wheel})
