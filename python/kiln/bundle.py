"""kiln.bundle - open a kernel bundle (file or bytes), list its entries and read their payloads.

Needs only libkiln_rt. To run a bundle's kernels, give it to a Runtime (``rt.add_bundle(path)``);
the runtime then picks, per device, a cubin for its exact SM, else the PTX of the highest SM not
above it.
"""

import ctypes
import os

from . import _gen, _lib


class BundleEntry:
    """One entry: ``spec`` (canonical), ``sm``, ``ptx_version`` ("7.0"), ``kind`` ("ptx"/"cubin"),
    ``size`` (bytes), ``meta`` (dict), ``payload`` (bytes)."""

    def __init__(self, e, payload):
        self.spec = _lib.text(e.spec)
        self.sm = e.sm
        self.ptx_version = "%d.%d" % (e.ptx_version // 10, e.ptx_version % 10)
        self.kind = "cubin" if e.kind == 1 else "ptx"
        self.size = e.size
        self._meta = _lib.KernelMeta.from_buffer_copy(e.meta.contents)
        self.meta = _lib.meta_dict(self._meta)
        self.payload = payload

    def __repr__(self):
        return "<kiln.BundleEntry %s %s %d bytes: %s>" % (_gen.sm_name(self.sm), self.kind, self.size, self.spec)


class Bundle:
    """A checked bundle (header, table and every checksum are verified on open).
    ``Bundle(path)`` or ``Bundle(data=bytes)``; iterable and indexable over BundleEntry."""

    def __init__(self, path=None, data=None):
        self._lib = _lib.rt()
        self._ptr = ctypes.c_void_p()
        self._data = None
        err = _lib.Error()
        if (path is None) == (data is None):
            raise TypeError("Bundle takes a path or data=bytes")
        if path is not None:
            self.path = os.fspath(path)
            st = self._lib.kiln_bundle_open_file(self.path.encode(), ctypes.byref(self._ptr), ctypes.byref(err))
        else:
            self.path = None
            self._data = ctypes.create_string_buffer(bytes(data), len(data))  # must outlive the bundle
            st = self._lib.kiln_bundle_open_memory(self._data, len(data), ctypes.byref(self._ptr), ctypes.byref(err))
        _lib.check(st, err)
        self.producer = _lib.text(self._lib.kiln_bundle_producer(self._ptr))
        self._entries = []
        for i in range(self._lib.kiln_bundle_count(self._ptr)):
            e = _lib.BundleEntry()
            _lib.check(self._lib.kiln_bundle_entry_at(self._ptr, i, ctypes.byref(e), ctypes.byref(err)), err)
            self._entries.append(BundleEntry(e, ctypes.string_at(e.payload, e.size)))

    def close(self):
        if getattr(self, "_ptr", None):
            self._lib.kiln_bundle_close(self._ptr)
            self._ptr = ctypes.c_void_p()

    def __del__(self):
        self.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __len__(self):
        return len(self._entries)

    def __iter__(self):
        return iter(self._entries)

    def __getitem__(self, i):
        return self._entries[i]

    def specs(self):
        """The distinct canonical specs, in table order."""
        out = []
        for e in self._entries:
            if e.spec not in out:
                out.append(e.spec)
        return out

    def __repr__(self):
        return "<kiln.Bundle %s: %d entries, made by %s>" % (self.path or "<memory>", len(self), self.producer)


def open_bundle(path):
    return Bundle(path)
