"""kiln.cli - `python -m kiln`: the kiln command line (emit, list, bundle, bundle-info, lint, run) in Python.

Same subcommands, options, output and exit statuses as bin/kiln: 0 success, 1 findings or a failed
check (lint, run), 2 usage or input errors. Useful where only the Python package is installed.
"""

import argparse
import json
import math
import os
import re
import sys

from . import _gen, _lib
from .errors import KilnEmulatorError, KilnError

OK, FINDINGS, USAGE = 0, 1, 2



def _matrices():
    """{family: its template's K.bundle} for the families that declare one, in `kiln list`'s order (the
    default set's order, as tools/cmd_bundle.c reads them)."""
    out = {}
    for fam in _gen.families():
        m = _gen.bundle_matrix(fam)
        if m is not None:
            out[fam] = m
    return out


def _matrix_names(matrices):
    """The families with a default dtype matrix, "a, b, c" (for messages)."""
    return ", ".join(f for f, m in matrices.items() if m["dtype_keys"])


def _first_example(run=False):
    """The registry's first example as `kiln emit` (spec --sm N) or `kiln run` (with its options) arguments."""
    ex = _gen.examples()
    if not ex:
        return ""
    spec, sm, opts = ex[0]
    return "%s --sm %s%s" % (spec, sm, " " + opts if run and opts else "")


class _Usage(Exception):
    pass


class _Formatter(argparse.HelpFormatter):
    """argparse's help layout, keeping the line breaks written into descriptions and epilogs."""

    def _fill_text(self, text, width, indent):
        return "\n".join(super(_Formatter, self)._fill_text(line, width, indent) for line in text.splitlines())


class _Parser(argparse.ArgumentParser):
    def __init__(self, **kw):
        super().__init__(formatter_class=_Formatter, **kw)

    def error(self, message):
        raise _Usage(message)


class _ReaderGone:
    """Standard output (text or its .buffer) for the CLI: once the reader has gone (kiln list | head),
    the rest of the output is dropped (stdout points at /dev/null from then on) and the command ends
    with its own status, as bin/kiln does; no BrokenPipeError traceback."""

    def __init__(self, f):
        self._f = f
        if hasattr(f, "buffer"):
            self.buffer = _ReaderGone(f.buffer)

    @staticmethod
    def _drop():
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)  # the descriptor under sys.__stdout__; its pending bytes then drain there
        os.close(null)

    def write(self, data):
        try:
            return self._f.write(data)
        except BrokenPipeError:
            self._drop()
            return len(data)

    def flush(self):
        try:
            self._f.flush()
        except BrokenPipeError:
            self._drop()

    def __getattr__(self, name):
        return getattr(self._f, name)


def _err(msg):
    sys.stderr.write("kiln: error: %s\n" % msg)
    return USAGE


def _write(path, data):
    if path in (None, "-"):
        if isinstance(data, bytes):
            sys.stdout.buffer.write(data)
        else:
            sys.stdout.write(data)
        sys.stdout.flush()
        return
    from . import _lib
    _lib.write_file(path, data if isinstance(data, bytes) else data.encode())


def cmd_emit(argv):
    p = _Parser(prog="kiln emit", usage="kiln emit FAMILY key=value... --sm N [--emit ptx|ll] [-o FILE]",
                description="Generates one kernel for target sm_N and writes its PTX (default) or its optimized "
                "LLVM IR. The text starts with '// kiln.meta' lines: entry, parameters, launch geometry.",
                epilog="example: kiln emit %s\n'kiln list' shows every family's parameters and examples."
                % _first_example())
    p.add_argument("spec", nargs="*", metavar="FAMILY key=value", help="the kernel spec")
    req = p.add_argument_group("required")
    req.add_argument("--sm", metavar="N", help="target SM ('kiln list' shows the targets)")
    p.add_argument("--emit", default="ptx", metavar="ptx|ll", help="output kind (default ptx)")
    p.add_argument("-o", "--output", metavar="FILE", help="write to FILE (atomically) instead of standard output")
    p.add_argument("--template-dir", metavar="D", help="read templates from D instead of the built-in copies")
    a = p.parse_args(argv)
    if not a.spec:
        return _err("missing kernel family; usage: kiln emit FAMILY key=value... --sm N")
    if not a.sm:
        return _err("missing --sm N (the target SM); valid: %s" % ", ".join(map(str, _gen.targets())))
    k = _gen.generate(" ".join(a.spec), a.sm, emit=a.emit, template_dir=a.template_dir)
    _write(a.output, k.text)
    return OK


def cmd_list(argv):
    if argv and argv[0] in ("-h", "--help"):
        print("usage: kiln list\n\nLists kernel families with their parameters (type, default, allowed values) "
              "and the targets.")
        return OK
    if argv:
        return _err("'kiln list' takes no arguments, got '%s'" % argv[0])
    sys.stdout.write(_gen.describe())
    print("\ntargets: " + " ".join(_gen.sm_name(s) for s in _gen.targets()))
    return OK


def _matrix_specs(matrices, family, dtypes, shapes):
    """family x dtype combinations x shapes (x the kernels of a sequence), as tools/cmd_bundle.c adds them."""
    m = matrices.get(family)
    if m is None or not m["dtype_keys"]:
        raise _Usage("no default matrix for family '%s'; valid: %s (use --spec for others)"
                     % (family, _matrix_names(matrices)))
    keys, shape_key = m["dtype_keys"], m["shape_key"]
    sizes = [w for w in ((shapes if shapes else m["default_shapes"]) if shape_key else "-").split(",") if w]
    out = []
    for combo in [c for c in (dtypes or "f32,f16,bf16").split(",") if c]:
        parts = [w for w in combo.split("/") if w]
        if len(parts) not in (1, len(keys)):
            raise _Usage("dtype combination has %d parts; valid for %s: 1 dtype or %d (%s)"
                         % (len(parts), family, len(keys), "/".join(keys)))
        for d in parts:
            if d not in ("f32", "f16", "bf16"):
                raise _Usage("unknown dtype '%s'; valid: f32, f16, bf16" % d)
        assign = "".join(" %s=%s" % (k, parts[0 if len(parts) == 1 else i]) for i, k in enumerate(keys))
        for size in sizes:
            base = "%s%s %s=%s" % (family, assign, shape_key, size) if shape_key else family + assign
            out += ["%s %s" % (base, k) for k in m["kernels"]] or [base]
    return out


def _c_identifier(name):
    base = os.path.basename(name)
    ident = "".join(c if c.isalnum() else "_" for c in base)
    return ("_" + ident) if ident[:1].isdigit() else ident


def _emit_c(name, data, nentries):
    ident = _c_identifier(name)
    if not ident:
        raise _Usage("--emit-c needs a name, e.g. --emit-c build/my_kernels")
    base = os.path.basename(name)
    hdr = ("/* %s.h - kiln kernel bundle (%d entries), generated by kiln bundle --emit-c. */\n"
           "#ifndef KILN_BUNDLE_%s_H\n#define KILN_BUNDLE_%s_H\n#include <stddef.h>\n"
           "/* Open with kiln_rt_add_bundle_memory(rt, %s_data, %s_size, &err). */\n"
           "extern const unsigned char %s_data[];\nextern const size_t %s_size;\n#endif\n"
           % (base, nentries, ident, ident, ident, ident, ident, ident))
    rows = []
    for i in range(0, len(data), 20):
        rows.append("".join("0x%02x," % b for b in data[i:i + 20]))
    src = ("/* %s.c - kiln kernel bundle, generated by kiln bundle --emit-c. */\n#include \"%s.h\"\n"
           "_Alignas(64) const unsigned char %s_data[%d] = {\n%s\n};\nconst size_t %s_size = %d;\n"
           % (base, base, ident, len(data), "\n".join(rows), ident, len(data)))
    _write(name + ".h", hdr)
    _write(name + ".c", src)


def cmd_bundle(argv):
    matrices = _matrices()
    first = next((f for f, m in matrices.items() if m["dtype_keys"] and m["shape_key"]), "FAMILY")
    p = _Parser(prog="kiln bundle", usage="kiln bundle [FAMILY...] [--dtypes LIST] [--sm LIST] [--hidden LIST] "
                "[--spec SPEC]... [--spec-list FILE] [--cubin] [-j N] (-o FILE | --emit-c NAME)",
                description="Generates kernel variants in parallel into one bundle that the runtime opens from a "
                "file or from memory.",
                epilog="example: kiln bundle %s --dtypes bf16,f16 --sm 75,80,90 -o %s.kbundle" % (first, first))
    p.add_argument("families", nargs="*", metavar="FAMILY", help="families whose template declares a default "
                   "matrix (K.bundle): %s (default: all of them, unless --spec or --spec-list is given; with neither "
                   "--dtypes nor --hidden the default set adds the specs the templates list besides, K.bundle.extra)"
                   % _matrix_names(matrices))
    p.add_argument("--dtypes", metavar="LIST", help="dtype combinations, comma-separated: one dtype for every "
                   "tensor ('bf16') or one per tensor joined by '/' ('bf16/f32/bf16'); default f32,f16,bf16")
    p.add_argument("--sm", default=None, metavar="LIST", help="target SMs, comma-separated "
                   "(default: every SM from 75 up, as kiln list shows)")
    p.add_argument("--hidden", metavar="LIST", help="shapes, of the shape key each template declares: %s" % "; ".join(
        "%s: %s (default %s)" % (f, m["shape_key"], m["default_shapes"]) for f, m in matrices.items()
        if m["dtype_keys"] and m["shape_key"]))
    p.add_argument("--spec", action="append", default=[], metavar="SPEC", help="one more spec (repeatable)")
    p.add_argument("--spec-list", metavar="FILE", help="specs from FILE, one per line, '#' starts a comment")
    p.add_argument("--cubin", action="store_true", help="also store cubins assembled with ptxas")
    p.add_argument("-j", type=int, default=None, metavar="N", help="generator threads (default: every core)")
    out = p.add_argument_group("required, one or both")
    out.add_argument("-o", "--output", metavar="FILE", help="write the bundle to FILE")
    out.add_argument("--emit-c", metavar="NAME", help="write NAME.c and NAME.h embedding the bundle")
    a = p.parse_args(argv)
    specs = list(a.spec)
    if a.spec_list:
        try:
            data = _lib.read_input(a.spec_list, "spec list")  # bounded, as the C tool reads it
        except KilnError as e:
            return _err(str(e))
        if b"\0" in data:
            return _err("spec list '%s' is binary data, not text (a NUL byte)" % a.spec_list)
        for line in data.decode("utf-8", "replace").splitlines():
            line = line.split("#", 1)[0].strip()
            if line:
                specs.append(line)
    defaults = not a.families and not a.spec and not a.spec_list
    for fam in a.families or ([f for f, m in matrices.items() if m["dtype_keys"]] if defaults else []):
        specs += _matrix_specs(matrices, fam, a.dtypes, a.hidden)
    arch = []
    if defaults and not a.dtypes and not a.hidden:  # the specs the templates add (K.bundle.extra): split-KV, ...
        named = [_gen._parse_sm(s) for s in a.sm.split(",") if s] if a.sm else None
        for m in matrices.values():
            specs += m["extra"]
            # an arch-specific SM's own kernels (K.bundle.arch), on that SM: with the default SM list, or when
            # --sm names it
            arch += [(spec, sm) for sm, spec in m["arch"] if named is None or _gen._parse_sm(sm) in named]
    if a.j is not None and not 1 <= a.j <= 256:
        return _err("bad -j '%d'; valid: 1..256" % a.j)
    if not a.output and not a.emit_c:
        return _err("missing output: give -o FILE and/or --emit-c NAME")
    sms = [s for s in a.sm.split(",") if s] if a.sm else _gen.default_targets()
    if not sms:
        return _err("--sm needs at least one SM")
    data = _gen.build_bundle(specs, sms=sms, cubin=a.cubin, jobs=a.j, arch_specs=arch)
    if a.output:
        _write(a.output, data)
    if a.emit_c:
        from .bundle import Bundle
        _emit_c(a.emit_c, data, len(Bundle(data=data)))
    return OK


def cmd_bundle_info(argv):
    if len(argv) == 1 and argv[0] in ("-h", "--help"):
        print("usage: kiln bundle-info FILE\n\nChecks a bundle (header, table, every checksum) and lists its entries.")
        return OK
    if len(argv) != 1:
        return _err("usage: kiln bundle-info FILE")
    from .bundle import Bundle
    b = Bundle(argv[0])
    print("%s: kiln bundle, %d entries, made by %s" % (argv[0], len(b), b.producer))
    print("%4s %5s %-5s %4s %8s %-12s %5s  %s" % ("#", "sm", "kind", "ptx", "bytes", "block", "align", "spec"))
    for i, e in enumerate(b):
        block = "%dx%dx%d" % e.meta["block"]
        print("%4d %5d %-5s %4s %8d %-12s %5d  %s" % (i, e.sm, e.kind, e.ptx_version, e.size, block,
                                                    e.meta["align_bytes"], e.spec))
    return OK


def cmd_lint(argv):
    p = _Parser(prog="kiln lint", usage="kiln lint FILE... [--sm N] [--cuda X.Y] [--json]",
                description="Finds architecture problems in PTX from any compiler (kiln, nvcc, Triton, ...): "
                "instructions or types that need a newer SM than the module's .target or a newer PTX ISA than its "
                ".version, illegal declarations, shfl/vote without .sync. Given a cubin, a fatbin, or an ELF object "
                "or shared library that embeds them, lists each kernel image and says whether a device and driver "
                "can run it.",
                epilog="exit status: 0 clean, 1 findings, 2 usage error or unreadable input")
    p.add_argument("files", nargs="*", metavar="FILE", help="PTX or binary files ('-' reads standard input); at "
                   "least one")
    p.add_argument("--sm", "--device", dest="sm", metavar="N", help="also check that the file can run on an sm_N device")
    p.add_argument("--cuda", metavar="X.Y", help="also check that a driver of CUDA X.Y can load it")
    p.add_argument("--json", action="store_true", help="machine-readable findings on standard output")
    a = p.parse_args(argv)
    if not a.files:
        return _err("lint needs at least one PTX file")
    if a.sm is not None:
        try:
            _gen._parse_device_sm(a.sm)
        except KilnError as e:
            return _err("--sm: %s" % e)
    worst = OK
    results = []
    for path in a.files:
        data = None
        try:
            data = _lib.read_input(None if path == "-" else path, "lint input")  # its errors name the file
            rep = _gen.lint(data, sm=a.sm, cuda=a.cuda)
        except KilnError as e:
            msg = str(e) if data is None else "%s: %s" % (path, e)
            _err(msg)
            results.append({"file": path, "error": msg})
            worst = USAGE
            continue
        if isinstance(rep, _gen.BinaryLintReport):  # a cubin, fatbin or ELF file
            results.append(_lint_binary_result(path, rep, a.json))
        elif a.json:
            d = {"file": path, "target": rep.target, "sm": rep.sm, "ptx": rep.ptx, "instructions": rep.instructions,
                 "functions": rep.functions}
            if rep.device_sm:
                d["device_sm"], d["runs_on_device"] = rep.device_sm, rep.runs_on_device
            if rep.dropped:
                d["dropped"] = rep.dropped
            d["findings"] = [{"line": f.line, "kind": f.kind, "severity": f.severity, "instruction": f.instruction,
                              "feature": f.feature, "need_sm": f.need_sm or 0, "need_arch": f.need_arch,
                              "need_ptx": f.need_ptx or "0.0", "module_sm": f.module_sm,
                              "module_ptx": f.module_ptx, "message": f.message} for f in rep]
            results.append(d)
        else:
            for f in rep:
                print("%s:%d: %s: %s\n    %s" % (path, f.line, f.severity, f.message, f.instruction))
            if rep.dropped:
                print("%s: %d more findings not shown (lint keeps the first %d)" % (path, rep.dropped, len(rep)))
            if len(rep):
                ne = len(rep.errors)
                nw = len(rep) - ne
                print("%s: %d error%s, %d warning%s (.target %s, .version %s)" % (
                    path, ne, "" if ne == 1 else "s", nw, "" if nw == 1 else "s", rep.target, rep.ptx))
            if rep.device_sm:
                refused = [f for f in rep.errors if f.kind not in ("device", "cuda")]
                because = ": ptxas and the driver's JIT refuse the %d error%s above" % (
                    len(refused), "" if len(refused) == 1 else "s") if refused and not rep.runs_on_device else ""
                print("%s: %s sm_%d%s (.target %s, .version %s)" % (
                    path, "runs on" if rep.runs_on_device else "cannot run on", rep.device_sm, because, rep.target,
                    rep.ptx))
        if len(rep) and worst == OK:
            worst = FINDINGS
    if a.json:
        print(json.dumps({"files": results}, indent=4))
    return worst


def _lint_binary_result(path, rep, as_json):
    """Prints (unless as_json) what lint saw in a binary; returns its JSON object."""
    def label(i):
        return "PTX compute_%s (.version %s)" % (i.target[3:], i.ptx) if i.kind == "ptx" else "%s %s" % (i.kind, i.target)
    if not as_json:
        print("%s: %s, %d fatbin container%s, %d image%s" % (path, rep.format, rep.containers,
              "" if rep.containers == 1 else "s", len(rep.images), "" if len(rep.images) == 1 else "s"))
        for c in range(rep.containers):
            print("%s: container %d: %s" % (path, c + 1, ", ".join(label(i) for i in rep.images if i.container == c)))
        for i in rep.images:
            for f in i.lint or []:
                print("%s[%s @0x%x]:%d: %s: %s\n    %s" % (path, label(i), i.offset, f.line, f.severity, f.message,
                                                         f.instruction))
        for f in rep[:len(rep) - sum(len(i.lint or []) for i in rep.images)]:  # the binary's own come first
            print("%s: %s: %s\n    %s" % (path, f.severity, f.message, f.instruction))
        if rep.verdict:
            print("%s: %s" % (path, rep.verdict))
    d = {"file": path, "format": rep.format, "containers": rep.containers, "verdict": rep.verdict,
         "images": [{k: getattr(i, k) for k in i.__slots__ if k != "lint"} for i in rep.images],
         "findings": [f.as_dict() for f in rep]}
    for k in ("device_sm", "runs_on_device", "cuda", "cuda_loads"):
        if getattr(rep, k) is not None:
            d[k] = getattr(rep, k)
    return d


def cmd_run(argv):
    p = _Parser(prog="kiln run", usage="kiln run FAMILY key=value... --sm N --rows R [--hidden H] [--seed S] "
                "[--input KIND] [--eps E] [--twice] [--seq-k N] [--batch B] [--heads H[:K]] [--splits N]",
                description="Runs one kernel on the CPU emulator and checks every output against its family's "
                "float64 reference (the C library's one case runner and checker: the numbers of the C `kiln run`).",
                epilog="exit status: 0 every output within tolerance, 1 a mismatch or an emulator fault, 2 bad input."
                "\nexample: kiln run %s" % _first_example(run=True))
    p.add_argument("spec", nargs="*", metavar="FAMILY key=value", help="the kernel spec")
    req = p.add_argument_group("required")
    req.add_argument("--sm", metavar="N", help="target SM ('kiln list' shows the targets)")
    req.add_argument("--rows", type=int, metavar="R", help="rows (1..1048576); for attention, seq_q")
    p.add_argument("--hidden", type=int, metavar="H", help="row length, needed when the spec says hidden=launch")
    p.add_argument("--seed", type=int, default=1, metavar="S", help="input seed (default 1)")
    p.add_argument("--input", default="random", metavar="KIND",
                   help="random (default), large-mean, constant, special (NaN/Inf), mixed")
    p.add_argument("--eps", type=float, metavar="E", help="LayerNorm epsilon (default 1e-5)")
    p.add_argument("--twice", action="store_true", help="run every block twice, threads in opposite orders")
    att = p.add_argument_group("attention")
    att.add_argument("--seq-k", type=int, metavar="N", help="keys (default: seq_q)")
    att.add_argument("--batch", type=int, metavar="B", help="batch (default 1)")
    att.add_argument("--heads", metavar="H[:K]", help="query heads, key/value heads, each 1..65535 "
                     "(default 2:2; K must divide H)")
    att.add_argument("--splits", type=int, metavar="N", help="splitkv=true: key splits (default 4)")
    a = p.parse_args(argv)
    if not a.spec:
        return _err("missing kernel family; usage: kiln run FAMILY key=value... --sm N --rows R")
    if a.sm is None:
        return _err("missing --sm N (the target SM, required); valid: %s" % ", ".join(map(str, _gen.targets())))
    if a.rows is None:
        return _err("missing --rows R (how many rows to run, required; for attention, seq_q)")
    if not 1 <= a.rows <= 1048576:
        return _err("bad --rows %d; valid: 1..1048576" % a.rows)
    if a.eps is not None and not a.eps > 0:
        return _err("bad --eps '%s'; valid: a positive number" % a.eps)
    from . import emulate
    heads = parse_heads(a.heads) if a.heads else None
    r = emulate.check(" ".join(a.spec), sm=a.sm, rows=a.rows, hidden=a.hidden, seq_k=a.seq_k, batch=a.batch,
                      heads=heads, splits=a.splits, seed=a.seed, input=a.input, eps=a.eps, twice=a.twice)
    print("%s  %s  %s  seed %d%s" % (r.spec, _gen.sm_name(r.sm), r.problem, a.seed, "  (every block twice)" if a.twice else ""))
    for s in r.launches:
        print("  %s: %d blocks of %d threads, emulated in %.1f ms" % (s["entry"], s["blocks"], s["threads"], s["ms"]))
    width = max([4] + [len(o["name"]) for o in r.outputs])
    for o in r.outputs:
        rel = "  max rel %.3e" % o["max_rel"] if o["max_rel"] is not None else ""
        print("  %-*s  max |err| %.3e%s  worst %.3f of tolerance  %s" % (width, o["name"], o["max_abs"], rel,
                                                                        math.floor(o["worst"] * 1000) / 1000,
                                                                        "FAIL" if o["bad"] else "ok"))
    for o in r.outputs:
        if o["bad"]:
            print("  %s: %d values out of tolerance; first: %s" % (o["name"], o["bad"], o["first"]))
    print("FAIL: %ss differ from the float64 reference" % r.noun if r.bad else
          "PASS: every %s within tolerance" % r.noun)
    return FINDINGS if r.bad else OK


def parse_heads(text):
    """--heads H or H:K: (query heads, key/value heads), each 1..65535, K dividing H; else _Usage in words."""
    form = "give H or H:K, e.g. --heads 32 or --heads 32:8"
    hs, colon, ks = text.partition(":")

    def count(t, what):
        if re.fullmatch(r"-?[0-9]+", t):
            return int(t, 10)
        raise _Usage("bad --heads '%s': the %s count%s is not a whole number; %s"
                     % (text, what, " after ':'" if what.startswith("key") else "", form))

    h = count(hs, "query head")
    if not 1 <= h <= 65535:
        raise _Usage("bad --heads '%s': query heads must be %s; %s" % (text, "at least 1" if h < 1 else "at most 65535",
                                                                       form))
    if not colon:
        return h, h
    k = count(ks, "key/value head")
    if not 1 <= k <= 65535:
        raise _Usage("bad --heads '%s': key/value heads must be %s; %s"
                     % (text, "at least 1" if k < 1 else "at most 65535", form))
    if h % k:
        raise _Usage("bad --heads '%s': %d key/value heads cannot be shared evenly by %d query heads (key/value heads "
                     "must divide query heads: each serves H/K of them)" % (text, k, h))
    return h, k


COMMANDS = [
    ("emit", "generate one kernel and print its PTX or LLVM IR", cmd_emit),
    ("list", "list kernel families, their parameters and the targets", cmd_list),
    ("bundle", "generate many variants in parallel into one bundle file (or C source)", cmd_bundle),
    ("bundle-info", "check a bundle and list what it holds", cmd_bundle_info),
    ("lint", "find architecture problems in PTX files (any compiler's)", cmd_lint),
    ("run", "run one kernel on the CPU emulator and check it against a float64 reference", cmd_run),
]


def main(argv=None):
    out = sys.stdout
    # None: started with standard output closed (kiln list >&-); the output goes nowhere, as bin/kiln's
    sys.stdout = _ReaderGone(out if out is not None else open(os.devnull, "w"))
    try:
        rc = _main(argv)
        sys.stdout.flush()
        return rc
    finally:
        if out is None:
            sys.stdout.close()
        sys.stdout = out


def _main(argv):
    argv = sys.argv[1:] if argv is None else list(argv)
    names = ", ".join(c[0] for c in COMMANDS)
    if not argv:
        return _err("missing command; valid: %s (see 'kiln --help')" % names)
    if argv[0] in ("-h", "--help", "help"):
        print("usage: python -m kiln COMMAND [ARGS...]\n\nkiln generates GPU kernels (PTX) from kernel templates, "
              "without Triton or nvcc.\n\ncommands:")
        for n, s, _ in COMMANDS:
            print("  %-12s %s" % (n, s))
        print("\n'python -m kiln COMMAND --help' describes one command.")
        return OK
    if argv[0] == "--version":
        from . import __version__
        print("kiln %s (LLVM %s, python)" % (__version__, _gen.llvm_version()))
        return OK
    for n, _, fn in COMMANDS:
        if argv[0] == n:
            try:
                return fn(argv[1:])
            except _Usage as e:
                return _err(str(e))
            except KilnEmulatorError as e:
                sys.stderr.write("kiln: emulator fault: %s\n" % e)
                return FINDINGS
            except KilnError as e:
                return _err(str(e))
            except SystemExit as e:  # argparse --help
                return e.code or OK
    return _err("unknown command '%s'; valid: %s (see 'kiln --help')" % (argv[0], names))
