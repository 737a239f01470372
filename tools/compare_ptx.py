#!/usr/bin/env python3
"""tools/compare_ptx.py - proves a refactor: two kiln builds give the same PTX over the whole variant matrix.

    python3 tools/compare_ptx.py BEFORE AFTER [--full] [--sm 75,80] [--list-from AFTER|BEFORE]

BEFORE and AFTER are two `kiln` executables. The variants are those the templates declare (`kiln list
--variants all --sm N [--full]` of the AFTER build, or of --list-from), SM by SM; each build writes them
into one bundle per SM (`kiln bundle --spec-list`, every core), and every entry's PTX is compared: byte
for byte, and again without its `// kiln.meta` lines (the metadata block may gain lines on purpose).
The meta lines that differ are counted by key. Reads the bundles with the kiln package of this tree
(python/, lib/). Exit status 0 when every body is identical, 1 otherwise, 2 on bad input.
"""

import argparse
import collections
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))
os.environ.setdefault("KILN_LIB_DIR", os.path.join(ROOT, "lib"))

META = "// kiln.meta "


def split_meta(text):
    """(meta lines, the rest) of a PTX text."""
    meta, body = [], []
    for line in text.splitlines(True):
        (meta if line.startswith(META) else body).append(line)
    return meta, "".join(body)


def variants(kiln, sm, full):
    cmd = [kiln, "list", "--variants", "all", "--sm", str(sm)] + (["--full"] if full else [])
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.splitlines()


def bundle(kiln, specs_file, sm, out):
    subprocess.run([kiln, "bundle", "--spec-list", specs_file, "--sm", str(sm), "-o", out], check=True,
                   stdout=subprocess.DEVNULL)
    from kiln.bundle import Bundle
    b = Bundle(out)
    try:
        return {e.spec: e.payload.decode() for e in b if e.kind == "ptx"}
    finally:
        b.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("--full", action="store_true", help="every variant (KILN_TEST_FULL's matrix)")
    ap.add_argument("--sm", help="comma-separated SMs (default: every SM from 75 up in AFTER's table)")
    ap.add_argument("--list-from", help="the kiln whose templates list the variants (default AFTER)")
    a = ap.parse_args()
    for k in (a.before, a.after):
        if not os.access(k, os.X_OK):
            print("compare_ptx: '%s' is not an executable kiln" % k, file=sys.stderr)
            return 2
    lister = a.list_from or a.after
    if a.sm:
        sms = a.sm.split(",")
    else:
        out = subprocess.run([a.after, "list"], check=True, capture_output=True, text=True).stdout
        # every SM from 75 up, arch-specific targets (sm_90a) included
        sms = [w[3:] for w in out.split("targets:")[1].split() if int(w[3:].rstrip("a")) >= 75]
    same = body_same = differ = 0
    meta_keys = collections.Counter()
    with tempfile.TemporaryDirectory(prefix="kiln-compare-") as tmp:
        for sm in sms:
            specs = variants(lister, sm, a.full)
            lst = os.path.join(tmp, "specs-%s" % sm)
            with open(lst, "w") as f:
                f.write("\n".join(specs) + "\n")
            old = bundle(a.before, lst, sm, os.path.join(tmp, "before.kb"))
            new = bundle(a.after, lst, sm, os.path.join(tmp, "after.kb"))
            if set(old) != set(new):
                print("sm_%s: the builds canonicalize differently: %s" % (sm, sorted(set(old) ^ set(new))[:5]))
                differ += 1
            for spec in sorted(set(old) & set(new)):
                if old[spec] == new[spec]:
                    same += 1
                    continue
                mo, bo = split_meta(old[spec])
                mn, bn = split_meta(new[spec])
                if bo != bn:
                    differ += 1
                    print("DIFFERENT PTX: %s (sm_%s)" % (spec, sm))
                    continue
                body_same += 1
                keys = {("+" if line in mn else "-") + line[len(META):].split(" ", 1)[0] for line in set(mo) ^ set(mn)}
                meta_keys.update(keys)
            print("sm_%s: %d variants compared" % (sm, len(set(old) & set(new))), flush=True)
    print("%d identical, %d identical but for their kiln.meta lines, %d different" % (same, body_same, differ))
    for k, n in sorted(meta_keys.items()):
        print("  meta lines %s %s: in %d variants" % (k[0], k[1:], n))
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
