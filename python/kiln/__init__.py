"""kiln - GPU kernels (LayerNorm family, attention) generated as PTX without Triton or nvcc.

    import kiln
    k = kiln.generate("FAMILY key=value ...", sm=75)   # k.text, k.spec, k.meta
    kiln.families()                     # what `kiln list` shows
    kiln.examples()                     # the templates' runnable examples: (spec, sm, `kiln run` options)
    kiln.lint("kernel.ptx", sm=75)      # architecture problems in any PTX
    kiln.emulate.layer_norm(x, w, b, sm=75)            # run the sm_75 kernel on the CPU (numpy)
    rt = kiln.Runtime(device=0); rt.layer_norm(y, x, w, b)   # launch on CUDA memory
    import kiln.torch                    # torch ops: kiln.torch.layer_norm, kiln.torch.LayerNorm, attention
    import kiln.flash_attn               # FlashAttention-2's interface (flash_attn_func, ..._with_kvcache)
    import kiln.transformers             # attn_implementation="kiln" in transformers (register())

A thin layer over the C libraries (libkiln_rt, libkiln) through ctypes; see kiln/_lib.py for where
they are loaded from ($KILN_LIB_DIR overrides). numpy is needed by kiln.emulate only.
"""

__version__ = "0.1.0"

from .errors import (KilnArgumentError, KilnCorruptError, KilnDriverError, KilnEmulatorError,  # noqa: F401
                     KilnError, KilnGenerationError, KilnIOError, KilnMemoryError, KilnNotFoundError,
                     KilnSpecError, KilnUnavailableError)
from ._gen import (Family, FamilyParam, GeneratedKernel, LintFinding, LintReport, build_bundle,  # noqa: F401
                   canonical_spec, describe, examples, families, generate, lint, llvm_version, targets,
                   write_bundle)
from ._gen import BinaryLintReport, LintImage  # noqa: F401
from .bundle import Bundle, BundleEntry, open_bundle  # noqa: F401
from .runtime import DeviceArray, Kernel, Prepare, Runtime  # noqa: F401
from . import _lib


def library_paths():
    """Where libkiln_rt, libkiln and liblua were loaded from (None for one that is not loaded)."""
    return _lib.paths()


def have_generator():
    """True when libkiln (generator, lint, emulator) loaded; False in a runtime-only install."""
    return _lib.have_generator()


def __getattr__(name):
    # kiln.emulate needs numpy: imported on first use so that runtime-only programs need no numpy.
    if name == "emulate":
        import importlib
        return importlib.import_module(".emulate", __name__)
    raise AttributeError("module 'kiln' has no attribute %r" % name)
