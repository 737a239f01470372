"""kiln._gen - generation, canonical specs, family descriptions, lint and bundle writing over libkiln.

A kiln_gen must not be shared by two threads at once, so each Python thread gets its own
(created on first use, freed when the thread ends). ctypes drops the GIL during each call,
so generating from several threads runs in parallel, as `kiln bundle -j` does.
"""

import ctypes
import os
import re
import shutil
import subprocess
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor

from . import _lib
from .errors import KilnArgumentError, KilnError, KilnGenerationError, KilnSpecError

_tls = threading.local()


class _Gen:
    """One kiln_gen, freed with its owner."""

    def __init__(self, template_dir=None):
        lib = _lib.gen()
        self._lib = lib
        self.ptr = ctypes.c_void_p()
        err = _lib.Error()
        opt = _lib.GenOptions(template_dir.encode() if template_dir else None, 0)
        _lib.check(lib.kiln_gen_create(ctypes.byref(self.ptr), ctypes.byref(opt), ctypes.byref(err)), err)

    def __del__(self):
        if getattr(self, "ptr", None):
            self._lib.kiln_gen_destroy(self.ptr)
            self.ptr = None


def _generator(template_dir=None):
    if template_dir is not None:
        return _Gen(template_dir)
    g = getattr(_tls, "gen", None)
    if g is None:
        g = _tls.gen = _Gen()
    return g


def _spec_text(spec, params):
    """A spec string from text and/or keyword parameters: ("FAMILY", k="v") -> "FAMILY k=v"."""
    if not isinstance(spec, str):
        ex = examples()
        raise KilnSpecError("spec must be a string \"FAMILY key=value ...\"%s, got %r" % (
            " such as %r" % ex[0][0] if ex else "", spec))
    words = [spec.strip()]
    for k, v in params.items():
        if isinstance(v, bool):
            v = "true" if v else "false"
        words.append("%s=%s" % (k, v))
    return " ".join(w for w in words if w)


def targets():
    """The SMs kiln generates for, ascending (e.g. [70, 75, 80, 86, 89, 90, 100, 103, 110, 120, 121])."""
    buf = (ctypes.c_int * 32)()
    n = _lib.rt().kiln_targets(buf, 32)
    return [buf[i] for i in range(n)]


def default_targets():
    """The SMs a bundle holds unless told otherwise: every plain target from sm_75 up (what CUDA 13's
    ptxas builds; sm_70 is generated for older toolkits only); sm_90a (1090) only when named."""
    return [s for s in targets() if 75 <= s < 1000]


def sm_name(sm):
    """75 -> "sm_75"; 1090 (kiln's number for the arch-specific target) -> "sm_90a"."""
    return "sm_%d%s" % (sm % 1000, "a" if sm >= 1000 else "")


def _parse_sm(sm):
    """75, "75", "sm_75" or "7.5" -> 75; "90a" or "sm_90a" -> 1090; anything else: KilnSpecError listing
    the targets."""
    valid = targets()
    v = None
    if isinstance(sm, bool):
        v = None
    elif isinstance(sm, int):
        v = sm
    elif isinstance(sm, str):
        t = sm.strip()
        if t.startswith("sm_"):
            t = t[3:]
        if re.fullmatch(r"\d+", t):
            v = int(t)
        elif re.fullmatch(r"\d+a", t):
            v = 1000 + int(t[:-1])
        elif re.fullmatch(r"\d+\.\d", t):
            v = int(t.replace(".", ""))
    if v not in valid:
        raise KilnSpecError("unsupported SM %r; valid: %s" % (sm, ", ".join(sm_name(s)[3:] for s in valid)))
    return v


class GeneratedKernel:
    """A generated module: ``text`` (PTX or LLVM IR), ``spec`` (canonical), ``meta`` (dict), ``sm``, ``emit``."""

    def __init__(self, text, meta, emit):
        self.text = text
        self.meta = meta
        self.emit = emit
        self.spec = meta["spec"]
        self.family = meta["family"]
        self.entry = meta["entry"]
        self.sm = meta["sm"]
        self.params = meta["params"]

    def __repr__(self):
        return "<kiln.GeneratedKernel %s %s %s, %d bytes>" % (self.spec, sm_name(self.sm), self.emit, len(self.text))

    def __str__(self):
        return self.text

    def lint(self, sm=None):
        """Lints this kernel's PTX (optionally against a device SM)."""
        if self.emit != "ptx":
            raise KilnArgumentError("lint needs PTX; this kernel was generated with emit=%r" % self.emit)
        return lint(self.text, sm=sm)


def generate(spec, sm, emit="ptx", template_dir=None, **params):
    """Generates one kernel: ``kiln.generate("FAMILY key=value ...", sm=75)`` or ``kiln.generate("FAMILY", 75,
    key=value, ...)`` (``kiln.examples()`` and `kiln list` show each family's examples). emit: "ptx" (default)
    or "ll"."""
    kinds = {"ptx": 0, "ll": 1}
    if emit not in kinds:
        raise KilnSpecError("bad emit %r; valid: ptx, ll" % (emit,))
    text = _spec_text(spec, params)
    smv = _parse_sm(sm)
    g = _generator(template_dir)
    lib = g._lib
    mod = ctypes.c_void_p()
    err = _lib.Error()
    _lib.check(lib.kiln_generate(g.ptr, text.encode(), smv, kinds[emit], ctypes.byref(mod), ctypes.byref(err)), err)
    try:
        n = lib.kiln_module_size(mod)
        body = ctypes.string_at(lib.kiln_module_text(mod), n).decode("utf-8")
        meta = _lib.meta_dict(lib.kiln_module_meta(mod).contents)
    finally:
        lib.kiln_module_free(mod)
    return GeneratedKernel(body, meta, emit)


def canonical_spec(spec, **params):
    """The canonical form of a spec: family, then every parameter with defaults filled in."""
    g = _generator()
    buf = ctypes.create_string_buffer(_lib.KILN_SPEC_MAX * 4)
    err = _lib.Error()
    _lib.check(g._lib.kiln_canonical_spec(g.ptr, _spec_text(spec, params).encode(), buf, len(buf),
                                          ctypes.byref(err)), err)
    return buf.value.decode()


def spec_values(spec):
    """{"family": ..., key: value, ...} of a canonical spec (values as text)."""
    words = spec.split()
    out = {"family": words[0]}
    for w in words[1:]:
        k, _, v = w.partition("=")
        out[k] = v
    return out


class FamilyParam:
    """One parameter of a kernel family: name, type, default, doc, allowed (text as `kiln list` shows)."""

    def __init__(self, name, type, default, doc, allowed):
        self.name, self.type, self.default, self.doc, self.allowed = name, type, default, doc, allowed

    def __repr__(self):
        return "FamilyParam(%r, type=%r, default=%r, allowed=%r)" % (self.name, self.type, self.default, self.allowed)


class Family:
    """A kernel family: ``name``, ``doc`` and ``params`` (a list of FamilyParam)."""

    def __init__(self, name, doc, params):
        self.name, self.doc, self.params = name, doc, params

    def __repr__(self):
        return "<kiln.Family %s: %s>" % (self.name, ", ".join(p.name for p in self.params))


_PARAM_LINE = re.compile(r"^  (\S+)\s+(\S+)\s+default (same as \S+|\S+)\s+(.*?); one of: (.*)$")


def describe():
    """The text `kiln list` prints for the families (without the targets line)."""
    g = _generator()
    size = 1 << 16
    while True:
        buf = ctypes.create_string_buffer(size)
        err = _lib.Error()
        st = g._lib.kiln_describe(g.ptr, buf, size, ctypes.byref(err))
        if st == 1 and "too small" in err.msg.decode() and size < (1 << 24):
            size *= 4
            continue
        _lib.check(st, err)
        return buf.value.decode()


def examples(family=None):
    """The runnable examples the templates declare (K.examples), as `kiln list` shows them: a list of (spec, sm,
    `kiln run` options) with spec "FAMILY key=value ...", every family's (in `kiln list`'s order) or family's."""
    g = _generator()
    size = 1 << 14
    while True:
        buf = ctypes.create_string_buffer(size)
        err = _lib.Error()
        st = g._lib.kiln_family_examples(g.ptr, family.encode() if family else None, buf, size, None, ctypes.byref(err))
        if st == 1 and "needs" in err.msg.decode() and size < (1 << 24):
            size *= 4
            continue
        _lib.check(st, err)
        break
    out = []
    for line in buf.value.decode().splitlines():
        spec, _, rest = line.partition(" --sm ")
        sm, _, opts = rest.partition(" ")
        out.append((spec, sm, opts))
    return out


def bundle_matrix(family):
    """What `kiln bundle`'s default set takes of family (its template's K.bundle, as the C tool reads it): None
    when the family declares none, else {"dtype_keys": [...], "shape_key", "default_shapes", "kernels": [...],
    "extra": [whole specs], "arch": [(arch SM, whole spec)] (K.bundle.arch: the kernels an arch-specific SM has of
    its own)}."""
    g = _generator()
    m = _lib.BundleMatrix()
    err = _lib.Error()
    _lib.check(g._lib.kiln_family_bundle(g.ptr, family.encode(), ctypes.byref(m), ctypes.byref(err)), err)
    if not m.declared:
        return None
    split = lambda b, sep: [w for w in b.decode().split(sep) if w]  # noqa: E731
    return {"dtype_keys": split(m.dtype_keys, ","), "shape_key": m.shape_key.decode(),
            "default_shapes": m.default_shapes.decode(), "kernels": split(m.kernels, ","),
            "extra": split(m.extra, "\n"), "arch": [tuple(l.split(" ", 1)) for l in split(m.arch, "\n") if " " in l]}


def families():
    """The kernel families, as `kiln list` shows them: {name: Family}."""
    out = {}
    cur = None
    for line in describe().splitlines():
        if not line.strip():
            continue
        m = _PARAM_LINE.match(line)
        if m and cur is not None:
            allowed = [a.strip() for a in m.group(5).split(",")]
            cur.params.append(FamilyParam(m.group(1), m.group(2), m.group(3), m.group(4), allowed))
        elif not line.startswith(" "):
            name, _, doc = line.partition(" - ")
            cur = out[name.strip()] = Family(name.strip(), doc.strip(), [])
    return out


def llvm_version():
    return _lib.gen().kiln_llvm_version().decode()


# ---- lint ----


class LintFinding:
    """One finding: line, kind, severity ("error"/"warning"), instruction, feature, need_sm, need_arch,
    need_ptx ("7.0" or None), module_sm, module_ptx, device_sm, message."""

    __slots__ = ("line", "kind", "severity", "instruction", "feature", "need_sm", "need_arch", "need_ptx",
                 "module_sm", "module_ptx", "device_sm", "message")

    def __init__(self, f):
        self.line = f.line
        self.kind = _lib.LINT_KINDS[f.kind] if 0 <= f.kind < len(_lib.LINT_KINDS) else str(f.kind)
        self.severity = "warning" if f.warning else "error"
        self.instruction = _lib.text(f.instruction)
        self.feature = _lib.text(f.feature)
        self.need_sm = f.need_sm or None
        self.need_arch = bool(f.need_arch)
        self.need_ptx = "%d.%d" % (f.need_ptx // 10, f.need_ptx % 10) if f.need_ptx else None
        self.module_sm = f.module_sm
        self.module_ptx = "%d.%d" % (f.module_ptx // 10, f.module_ptx % 10)
        self.device_sm = f.device_sm or None
        self.message = _lib.text(f.message)

    def as_dict(self):
        return {k: getattr(self, k) for k in self.__slots__}

    def __repr__(self):
        return "<kiln.LintFinding line %d %s: %s>" % (self.line, self.severity, self.message)


class LintReport(list):
    """A list of LintFinding, plus what lint saw in the module: ``target``, ``sm``, ``ptx``,
    ``instructions``, ``functions``, ``device_sm``, ``runs_on_device`` (None without a device SM), ``dropped``."""

    def __init__(self, findings, m, source):
        super().__init__(findings)
        self.source = source
        self.target = _lib.text(m.target)
        self.sm = m.sm
        self.arch_specific = bool(m.arch_specific)
        self.ptx = "%d.%d" % (m.ptx // 10, m.ptx % 10)
        self.instructions = m.instructions
        self.functions = m.functions
        self.device_sm = m.device_sm or None
        self.runs_on_device = bool(m.runs_on_device) if m.device_sm else None
        self.dropped = m.dropped

    @property
    def errors(self):
        return [f for f in self if f.severity == "error"]

    def __repr__(self):
        return "<kiln.LintReport %s: %d findings (.target %s, .version %s)>" % (
            self.source, len(self), self.target, self.ptx)


def _parse_device_sm(sm):
    if sm is None:
        return 0
    lib = _lib.gen()
    out = ctypes.c_int()
    err = _lib.Error()
    _lib.check(lib.kiln_lint_parse_sm(str(sm).encode(), ctypes.byref(out), ctypes.byref(err)), err)
    return out.value


def lint(ptx_or_path, sm=None, cuda=None):
    """Finds architecture problems in PTX text (any compiler's). ``ptx_or_path``: PTX text (str or bytes),
    or a path (str/os.PathLike) of a PTX file. ``sm``: also check against a device SM (75, "sm_75", "7.5").
    ``cuda``: also check against a CUDA release's driver ("12.4" or 12040).
    Returns a LintReport (a list of LintFinding; empty when clean). Given a cubin, a fatbin, or an ELF
    object / shared library that embeds them (bytes or a path), returns a BinaryLintReport instead."""
    source = "<text>"
    if isinstance(ptx_or_path, bytes):
        data = ptx_or_path
    elif isinstance(ptx_or_path, os.PathLike) or (isinstance(ptx_or_path, str) and "\n" not in ptx_or_path
                                                   and ".target" not in ptx_or_path):
        source = os.fspath(ptx_or_path)
        data = _lib.read_input(source, "PTX file")  # bounded: over the limit, a FIFO or a device is an error
    elif isinstance(ptx_or_path, str):
        data = ptx_or_path.encode()
    else:
        raise KilnArgumentError("lint takes PTX text or a path, got %s" % type(ptx_or_path).__name__)
    lib = _lib.gen()
    dev = _parse_device_sm(sm)
    rel = _parse_cuda(cuda)
    if lib.kiln_lint_is_binary(data, len(data)):
        return _lint_binary(lib, data, dev, rel, source)
    rep = ctypes.c_void_p()
    err = _lib.Error()
    _lib.check(lib.kiln_lint_cuda(data, len(data), dev, rel, ctypes.byref(rep), ctypes.byref(err)), err)
    try:
        n = lib.kiln_lint_count(rep)
        findings = [LintFinding(lib.kiln_lint_get(rep, i).contents) for i in range(n)]
        return LintReport(findings, lib.kiln_lint_module_info(rep).contents, source)
    finally:
        lib.kiln_lint_free(rep)


def _parse_cuda(cuda):
    if cuda is None:
        return 0
    out = ctypes.c_int()
    err = _lib.Error()
    _lib.check(_lib.rt().kiln_cuda_parse_version(str(cuda).encode(), ctypes.byref(out), ctypes.byref(err)), err)
    return out.value


class LintImage:
    """One code image of a binary: ``kind`` ("cubin", "ptx", "lto-ir", "other"), ``target`` ("sm_90a"), ``sm``,
    ``suffix`` ("", "a", "f"), ``ptx`` (PTX's .version "9.0", else None), ``container``, ``offset``, ``size``,
    ``compression`` ("", "zstd", "lz4"), ``functions`` (None when unknown), ``runs_on_device`` / ``cuda_loads``
    (None without a device / release), ``note``, and ``lint``: the LintReport of a PTX image (else None)."""

    __slots__ = ("kind", "target", "sm", "suffix", "ptx", "container", "offset", "size", "compression", "functions",
                 "runs_on_device", "cuda_loads", "note", "lint")

    def __init__(self, im, b, lint_report):
        self.kind = _lib.IMAGE_KINDS[im.kind] if 0 <= im.kind < len(_lib.IMAGE_KINDS) else str(im.kind)
        self.target = _lib.text(im.target)
        self.sm = im.sm
        self.suffix = im.suffix.strip(b"\0").decode("ascii", "replace")
        self.ptx = "%d.%d" % (im.ptx // 10, im.ptx % 10) if self.kind == "ptx" else None
        self.container, self.offset, self.size = im.container, im.offset, im.size
        self.compression = _lib.text(im.compression)
        self.functions = im.functions if im.functions >= 0 else None
        self.runs_on_device = bool(im.runs_on_device) if b.device_sm else None
        self.cuda_loads = bool(im.cuda_loads) if b.cuda else None
        self.note = _lib.text(im.note)
        self.lint = lint_report

    def __repr__(self):
        return "<kiln.LintImage %s %s%s>" % (self.kind, self.target, " .version " + self.ptx if self.ptx else "")


class BinaryLintReport(list):
    """``kiln.lint`` of a cubin, fatbin or ELF file: a list of LintFinding (the binary's own, about devices and
    drivers, then each PTX image's), plus ``format`` ("cubin", "fatbin", "elf"), ``containers``, ``images``
    (LintImage), ``device_sm``, ``runs_on_device`` and ``cuda``, ``cuda_loads`` (None when not asked) and
    ``verdict`` (a sentence: which image would run, or why none can)."""

    def __init__(self, findings, b, images, source):
        super().__init__(findings)
        self.source = source
        self.format = _lib.text(b.format)
        self.containers = b.containers
        self.images = images
        self.device_sm = b.device_sm or None
        self.runs_on_device = bool(b.runs_on_device) if b.device_sm else None
        self.cuda = "%d.%d" % (b.cuda // 1000, b.cuda % 1000 // 10) if b.cuda else None
        self.cuda_loads = bool(b.cuda_loads) if b.cuda else None
        self.verdict = _lib.text(b.verdict)

    @property
    def errors(self):
        return [f for f in self if f.severity == "error"]

    def __repr__(self):
        return "<kiln.BinaryLintReport %s: %s, %d images, %d findings>" % (
            self.source, self.format, len(self.images), len(self))


def _lint_binary(lib, data, dev, rel, source):
    rep = ctypes.c_void_p()
    err = _lib.Error()
    _lib.check(lib.kiln_lint_bin(data, len(data), dev, rel, ctypes.byref(rep), ctypes.byref(err)), err)
    try:
        b = lib.kiln_lint_bin_info(rep).contents
        findings = [LintFinding(lib.kiln_lint_bin_finding(rep, i).contents) for i in range(lib.kiln_lint_bin_findings(rep))]
        images = []
        for i in range(lib.kiln_lint_bin_count(rep)):
            ptx = lib.kiln_lint_bin_ptx(rep, i)
            sub = None
            if ptx:
                sub = LintReport([LintFinding(lib.kiln_lint_get(ptx, k).contents) for k in range(lib.kiln_lint_count(ptx))],
                                 lib.kiln_lint_module_info(ptx).contents, "%s[image %d]" % (source, i))
                findings.extend(sub)
            images.append(LintImage(lib.kiln_lint_bin_image(rep, i).contents, b, sub))
        return BinaryLintReport(findings, b, images, source)
    finally:
        lib.kiln_lint_bin_free(rep)


# ---- bundles ----


def _find_ptxas():
    home = os.environ.get("CUDA_HOME")
    cands = [os.path.join(home, "bin", "ptxas")] if home else []
    cands.append("/usr/local/cuda/bin/ptxas")
    for c in cands:
        if os.access(c, os.X_OK):
            return c
    return shutil.which("ptxas")


def _assemble(ptxas, ptx, sm, spec):
    with tempfile.TemporaryDirectory(prefix="kiln_bundle_") as d:
        src, out = os.path.join(d, "k.ptx"), os.path.join(d, "k.cubin")
        with open(src, "w") as f:
            f.write(ptx)
        r = subprocess.run([ptxas, "--gpu-name", sm_name(sm), "-O3", "-o", out, src],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if r.returncode != 0:
            first = (r.stderr.strip().splitlines() or ["no output"])[0]
            raise KilnGenerationError("ptxas failed for '%s' (%s): %s" % (spec, sm_name(sm), first))
        with open(out, "rb") as f:
            return f.read()


def build_bundle(specs, sms=None, cubin=False, jobs=None, arch_specs=()):
    """Generates every spec for every SM in parallel and returns the bundle bytes (what `kiln bundle`
    writes). ``sms`` defaults to default_targets(); ``cubin=True`` also stores ptxas's cubins;
    ``arch_specs``: (spec, SM) pairs generated on that SM alone (an arch-specific SM's own kernels, which may be
    outside ``sms``), unless the spec is among ``specs`` and ``sms`` holds the SM."""
    if isinstance(specs, str):
        specs = [specs]
    sms = [_parse_sm(s) for s in (sms or default_targets())]
    canon = []
    for s in specs:
        c = canonical_spec(s)
        if c not in canon:
            canon.append(c)
    only = []
    for s, sm in arch_specs:
        item = (canonical_spec(s), _parse_sm(sm))
        if item not in only and not (item[0] in canon and item[1] in sms):
            only.append(item)
    if not canon and not only:
        raise KilnSpecError("no specs to generate")
    ptxas = _find_ptxas() if cubin else None
    if cubin and not ptxas:
        raise KilnError("cubin=True needs ptxas: none in $CUDA_HOME/bin, /usr/local/cuda/bin or PATH")
    work = [(s, sm) for s in canon for sm in sms] + only

    def one(item):
        spec, sm = item
        g = _generator()
        lib = g._lib
        mod = ctypes.c_void_p()
        err = _lib.Error()
        _lib.check(lib.kiln_generate(g.ptr, spec.encode(), sm, 0, ctypes.byref(mod), ctypes.byref(err)), err)
        n = lib.kiln_module_size(mod)
        text = ctypes.string_at(lib.kiln_module_text(mod), n + 1)  # with the NUL, as kiln bundle stores it
        meta = _lib.KernelMeta.from_buffer_copy(lib.kiln_module_meta(mod).contents)
        lib.kiln_module_free(mod)
        cub = _assemble(ptxas, text[:-1].decode(), sm, spec) if ptxas else None
        return meta, text, cub

    nthreads = jobs or os.cpu_count() or 1
    with ThreadPoolExecutor(max_workers=min(nthreads, len(work))) as ex:
        results = list(ex.map(one, work))
    rt = _lib.rt()
    w = ctypes.c_void_p()
    err = _lib.Error()
    producer = "kiln %s; LLVM %s (python)" % (_version(), llvm_version())
    _lib.check(rt.kiln_bundle_writer_create(ctypes.byref(w), producer.encode(), ctypes.byref(err)), err)
    try:
        for meta, text, cub in results:
            _lib.check(rt.kiln_bundle_writer_add(w, ctypes.byref(meta), 0, text, len(text), ctypes.byref(err)), err)
            if cub is not None:
                _lib.check(rt.kiln_bundle_writer_add(w, ctypes.byref(meta), 1, cub, len(cub), ctypes.byref(err)), err)
        data = ctypes.c_void_p()
        size = ctypes.c_size_t()
        _lib.check(rt.kiln_bundle_writer_finish(w, ctypes.byref(data), ctypes.byref(size), ctypes.byref(err)), err)
        try:
            return ctypes.string_at(data, size.value)
        finally:
            ctypes.CDLL(None).free(data)
    finally:
        rt.kiln_bundle_writer_destroy(w)


def write_bundle(path, specs, sms=None, cubin=False, jobs=None):
    """Generates a bundle (see build_bundle) and writes it to path as `kiln bundle -o` does; returns the
    entry count."""
    data = build_bundle(specs, sms=sms, cubin=cubin, jobs=jobs)
    _lib.write_file(path, data)
    from .bundle import Bundle
    with Bundle(path) as b:
        return len(b)


def _version():
    from . import __version__
    return __version__
