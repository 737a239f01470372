"""kiln.errors - the exceptions kiln raises: one KilnError family, a subclass per kind of failure.

Every error carries kiln's own one-line message (the same text the C library and the CLI give)
and, when it came from the C library, the status name (``e.status``, e.g. "KILN_EINVAL").
"""


class KilnError(Exception):
    """Base of every kiln error. ``status`` is the C status name, or None for Python-side checks."""

    status = None

    def __init__(self, message, status=None):
        super().__init__(message)
        self.message = message
        if status is not None:
            self.status = status


class KilnSpecError(KilnError, ValueError):
    """A bad spec, argument or value (KILN_EINVAL): the message names it and the valid choices."""

    status = "KILN_EINVAL"


class KilnArgumentError(KilnError, ValueError):
    """An array or number handed to a kernel does not fit it (dtype, shape, size, alignment, device)."""


class KilnNotFoundError(KilnError, LookupError, ValueError):
    """No such family, kernel, file or bundle entry (KILN_ENOTFOUND); an unknown family is a bad spec too."""

    status = "KILN_ENOTFOUND"


class KilnGenerationError(KilnError):
    """The generator failed: template error, LLVM verification or codegen (KILN_EGEN)."""

    status = "KILN_EGEN"


class KilnIOError(KilnError, OSError):
    """A file could not be read or written (KILN_EIO)."""

    status = "KILN_EIO"


class KilnCorruptError(KilnError):
    """A cache entry, bundle or metadata block failed its checks (KILN_ECORRUPT)."""

    status = "KILN_ECORRUPT"


class KilnDriverError(KilnError):
    """No CUDA driver (KILN_ENODRIVER), no device (KILN_ENODEVICE), or a driver call failed (KILN_EDRIVER)."""

    status = "KILN_EDRIVER"


class KilnMemoryError(KilnError, MemoryError):
    """Host allocation failed (KILN_ENOMEM)."""

    status = "KILN_ENOMEM"


class KilnEmulatorError(KilnError):
    """The CPU emulator found a fault: divergent barrier, bad launch, race (KILN_EEMU)."""

    status = "KILN_EEMU"


class KilnUnavailableError(KilnError, ImportError):
    """A kiln library this call needs could not be loaded (the message says which and from where)."""


_BY_STATUS = {
    1: KilnSpecError,
    2: KilnNotFoundError,
    3: KilnGenerationError,
    4: KilnIOError,
    5: KilnCorruptError,
    6: KilnDriverError,
    7: KilnDriverError,
    8: KilnDriverError,
    9: KilnMemoryError,
    10: KilnEmulatorError,
}
_NAMES = {1: "KILN_EINVAL", 2: "KILN_ENOTFOUND", 3: "KILN_EGEN", 4: "KILN_EIO", 5: "KILN_ECORRUPT",
          6: "KILN_ENODRIVER", 7: "KILN_ENODEVICE", 8: "KILN_EDRIVER", 9: "KILN_ENOMEM", 10: "KILN_EEMU"}


def from_status(status, message):
    """The exception for a kiln_status and its message."""
    cls = _BY_STATUS.get(status, KilnError)
    return cls(message, _NAMES.get(status, "status %d" % status))
