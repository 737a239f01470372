#!/usr/bin/env python3
"""tools/family_places.py - where each kernel family is named as a family: the files, the count, the 4-file check.

A family is named where the text means the family, not the English word nor a key of the same name:
  - a spec string or spec head: a string literal that starts with the name and goes on with a space
    (`"attention_bwd kernel=%s ..."`), an unquoted spec head (`rmsnorm x=bf16 ...`, `kiln run rotary ...`);
  - a family table entry or test: the name as a whole string literal (`.family = "rotary"`, `family == "x"`,
    `{"layernorm_bwd", ...}`, a dict key);
  - a file named for it: the family's words in the file's name (`rt_attention_bwd.c`, `rotary.ref.c`);
    the longest family wins (`rt_attention_bwd.c` names attention_bwd, not attention);
  - for a name that is no ordinary word nor key (every name but those in WORDS): any mention of it as a
    whole word (comments and prose included), except as a key (`name=`) or a field (`.name`).
Files under templates/ are the registry itself (a template declares its family and the kernels of its
sequence: `then_spec`, `before`/`after`): they count as at most two places, "template" (templates/**.lua)
and "reference" (templates/**.ref.c and its header .ref.h). Files in EXCEPTIONS (spec lists and the kit's torch peers) are
listed but not counted. Tests, python/tests, docs/ and *.md are not source and are not read.

  python3 tools/family_places.py [--root DIR] [--kiln BIN] [--families a,b] [--max N] [--quiet]

prints per family the plain count (`git grep -l -w FAMILY` over the same files), its own count and the
files with the first line that names it; with --max N it exits 1 when a family is named in more than N
counted places (more than its OVER row for a family there), 0 otherwise, 2 on bad input."""
import os
import re
import signal
import subprocess
import sys

# Spec lists and the kit's table of torch peers: they name families by design (data, not restatement).
EXCEPTIONS = {
    "bench/gen_bench.c": "spec list: the generation benchmark's table",
    "bench/jit_bench.c": "spec list: the JIT benchmark's table",
    "bench/attention_bench.c": "spec list: the attention generation benchmark's table",
    "bench/attention_bwd_bench.c": "spec list: the backward generation benchmark's table",
    "bench/cache_bench.c": "spec list: the cache benchmark's spec",
    "bench/transformer_kernels.txt": "spec list: the transformer kernel set",
    "bench/jit_compare.py": "spec list: the Triton comparison's commands",
    "bench/triton_compile.py": "spec list: the Triton peers it compiles",
    "bench/gpu/kit_rows.h": "spec list: the GPU kit's row tables",
    "bench/gpu/peers.py": "the kit's table of torch peers (CSV bench names)",
    "tools/kiln_order.sh": "spec list: the link-order profile's specs",
    "tools/kiln.order": "generated data: the link order kiln_order.sh writes",
    "tools/showcase.sh": "the main job's one spec (make run: bf16 LayerNorm, as README says)",
    "bench/layernorm_cuda.h": "a peer: the CUDA C LayerNorm NVRTC compiles for the comparison",
    "examples/": "example programs: documentation that compiles, each for one family",
    "tools/family_places.py": "this script (its tables and examples)",
}

# Family names that are also ordinary words or keys ("attention" in prose and error messages, attention's
# `rotary=` key and the kvcache `rotary` field): only a spec string/head, a whole-string table entry or a
# file name counts for them.
WORDS = {"attention", "layernorm", "rotary"}

# Families still named in more places than the target, with the count they may not exceed and what is left:
# the check fails when one rises past its row and says so when one falls below it (lower the row then).
OVER = {}  # empty since issue 23's wave 10: every family is within 4 (attention 8 -> 4, layernorm 16 -> 4)

SKIP_DIRS = ("tests/", "python/tests/", "docs/")


def usage(msg):
    sys.stderr.write("family_places: %s\nusage: python3 tools/family_places.py [--root DIR] [--kiln BIN] "
                     "[--families a,b] [--max N] [--quiet]\n" % msg)
    sys.exit(2)


def source_files(root):
    """The non-test source files outside docs/: git's tracked and untracked-not-ignored files, or every file."""
    try:
        out = subprocess.run(["git", "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                             check=True, capture_output=True).stdout.decode()
        files = sorted(set(f for f in out.split("\0") if f))
    except (subprocess.CalledProcessError, FileNotFoundError):
        files = []
        for d, dirs, names in os.walk(root):
            dirs[:] = [x for x in dirs if not x.startswith(".")]
            files += [os.path.relpath(os.path.join(d, n), root) for n in names]
        files.sort()
    keep = []
    for f in files:
        if f.startswith(SKIP_DIRS) or f.endswith(".md") or not os.path.isfile(os.path.join(root, f)):
            continue
        keep.append(f)
    return keep


def families_of(kiln):
    try:
        out = subprocess.run([kiln, "list"], check=True, capture_output=True, text=True).stdout
    except (subprocess.CalledProcessError, OSError) as e:
        usage("cannot run '%s list' (%s); give the kiln binary with --kiln" % (kiln, e))
    fams = [m.group(1) for m in re.finditer(r"^([a-z][a-z0-9_]*) - ", out, re.M)]
    if not fams:
        usage("'%s list' printed no family" % kiln)
    return fams


def named_by_file(path, fams):
    """The family a file is named for: the longest family whose words stand together in the file's name."""
    base = os.path.basename(path)
    stem = base.split(".")[0]
    words = stem.strip("_").split("_")
    best = None
    for f in fams:
        fw = f.split("_")
        for i in range(len(words) - len(fw) + 1):
            if words[i:i + len(fw)] == fw and (best is None or len(fw) > len(best.split("_"))):
                best = f
    return best


def patterns(fam):
    """The regular expressions that say a line names fam as a family (see the module's comment)."""
    w = re.escape(fam)
    pats = [
        # a string literal that is a spec head: the name, a space, then key=, a format or "..."
        r"[\"'`]%s (?:[a-z_]+=|%%s|\.\.\.)" % w,
        # an unquoted spec head or a kiln command's family argument
        r"(?<![\w.=-])%s [a-z_]+=" % w, r"\bkiln [a-z]+ %s\b" % w,
    ]
    if fam in WORDS:
        # the whole string only as a family table entry or test: `family` on the line, `{"x",`, a dict key
        pats += [r"\bfamily\b.*[\"'`]%s[\"'`]|[\"'`]%s[\"'`].*\bfamily\b" % (w, w),
                 r"^\s*\{\s*[\"']%s[\"'],|[\"']%s[\"']\s*:" % (w, w)]
    else:
        # any whole-word mention but a key (name=) or a field (.name)
        pats.append(r"(?<![\w.\-])%s(?![\w=])" % w)
    return re.compile("|".join("(?:%s)" % p for p in pats))


def places(root, fams, allfams):
    """{family: [(path, line number or 0 for the file name)]} and {family: plain count}, for the families fams;
    a file's name is matched against allfams (the longest wins: a subset must not change what a name means)."""
    files = source_files(root)
    found = {f: [] for f in fams}
    plain = {f: 0 for f in fams}
    pats = {f: patterns(f) for f in fams}
    words = {f: re.compile(r"(?<![\w])%s(?![\w])" % re.escape(f)) for f in fams}
    for path in files:
        try:
            with open(os.path.join(root, path), "rb") as fh:
                data = fh.read()
        except OSError:
            continue
        if b"\0" in data:
            continue
        text = data.decode("utf-8", "replace")
        lines = text.split("\n")
        byname = named_by_file(path, allfams)
        for fam in fams:
            if fam in text and words[fam].search(text):
                plain[fam] += 1
            if byname == fam:
                found[fam].append((path, 0))
                continue
            if fam not in text:
                continue
            for n, line in enumerate(lines, 1):
                if fam in line and pats[fam].search(line):
                    found[fam].append((path, n))
                    break
    return found, plain


def exception(path):
    for k, why in EXCEPTIONS.items():
        if path == k or (k.endswith("/") and path.startswith(k)):
            return why
    return None


def kind(path):
    if exception(path):
        return "except"
    if path.startswith("templates/"):
        return "reference" if path.endswith((".ref.c", ".ref.h")) else "template"
    return "other"


def main(argv):
    root, kiln, only, limit, quiet = ".", None, None, None, False
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("--root", "--kiln", "--families", "--max") and i + 1 >= len(argv):
            usage("%s needs a value" % a)
        if a == "--root":
            root = argv[i + 1]
        elif a == "--kiln":
            kiln = argv[i + 1]
        elif a == "--families":
            only = [x for x in argv[i + 1].split(",") if x]
        elif a == "--max":
            try:
                limit = int(argv[i + 1])
            except ValueError:
                usage("--max takes a whole number, not '%s'" % argv[i + 1])
        elif a == "--quiet":
            quiet, i = True, i + 1
            continue
        elif a in ("-h", "--help"):
            print(__doc__)
            return 0
        else:
            usage("unknown argument '%s'; valid: --root DIR, --kiln BIN, --families a,b, --max N, --quiet" % a)
        i += 2
    if not os.path.isdir(root):
        usage("--root '%s' is not a folder" % root)
    fams = allfams = families_of(kiln or os.path.join(root, "bin", "kiln"))
    if only:
        bad = [f for f in only if f not in fams]
        if bad:
            usage("no family '%s'; valid: %s" % (bad[0], ", ".join(fams)))
        fams = only
    found, plain = places(root, fams, allfams)
    over = []
    for fam in fams:
        counted = [p for p in found[fam] if kind(p[0]) == "other"]
        own = len(counted) + len({kind(p[0]) for p in found[fam]} & {"template", "reference"})
        ceiling = max(limit, OVER[fam][0]) if limit is not None and fam in OVER else limit
        if limit is not None and own > ceiling:
            over.append(fam)
        if limit is not None and fam in OVER and own < OVER[fam][0]:
            print("NOTE %s: %d places, below its OVER row (%d): lower the row%s" % (
                fam, own, OVER[fam][0], " (delete it)" if own <= limit else ""))
        if quiet and fam not in over:
            continue
        print("%s: %d places (plain git grep -w: %d files)%s%s" % (fam, own, plain[fam],
              "  OVER %d" % limit if fam in over else "",
              "  (known over: %s)" % OVER[fam][1] if fam in OVER and limit is not None and own > limit else ""))
        for path, n in found[fam]:
            k = kind(path)
            why = exception(path) if k == "except" else k
            where = "%s:%d" % (path, n) if n else "%s (its name)" % path
            print("  %-9s %s%s" % ("not counted" if k == "except" else "counted", where,
                                   "" if k == "other" else "  [%s]" % why))
    if over:
        print("family_places: %s named in more places than allowed (%d, or the family's OVER row)" % (", ".join(over), limit))
        return 1
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `| head` ends the listing quietly
    sys.exit(main(sys.argv[1:]))
