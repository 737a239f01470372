#!/usr/bin/env python3
"""tools/compare_matrix.py - sets two ptxas-matrix dumps (KILN_MATRIX_DUMP=FILE, tests/matrix.h) side by
side: per family, the variants both hold, their register and SASS-instruction totals and deltas, and
every variant whose registers let fewer blocks reside on an SM in the second dump (the LLVM 19 -> 22
figures of docs/llvm22.md came from it).

    tools/compare_matrix.py OLD.tsv NEW.tsv [--list N] [--kiln PATH]

The SMs' register files and resident-thread limits come from the SM table (`kiln list --targets`,
include/kiln/target.h) of the kiln given by --kiln (default: $KILN, else bin/kiln of this tree).
"""
import argparse
import collections
import os
import subprocess
import sys


def load(path):
    """(sm, spec) -> (registers, sass, ptx, threads); a later line for the same variant wins."""
    rows = {}
    with open(path) as f:
        for line in f:
            if not line.strip() or line.startswith("#"):
                continue
            parts = line.rstrip("\n").split("\t")
            if len(parts) != 6:
                sys.exit("%s: malformed line (want sm, registers, sass, ptx, threads, spec): %r" % (path, line))
            sm, regs, sass, ptx, threads = (int(p) for p in parts[:5])
            rows[(sm, parts[5])] = (regs, sass, ptx, threads)
    return rows


def sm_facts(kiln):
    """sm number -> (registers per SM, resident threads per SM), from `kiln list --targets`."""
    try:
        out = subprocess.run([kiln, "list", "--targets"], check=True, capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        sys.exit("compare_matrix: cannot read the SM table from '%s list --targets' (%s); give --kiln PATH" % (kiln, e))
    lines = out.splitlines()
    head = lines[0].split("\t") if lines else []
    if head[:3] != ["sm", "regs_per_sm", "threads_per_sm"]:
        sys.exit("compare_matrix: '%s list --targets' printed no SM table (header %r)" % (kiln, head))
    facts = {}
    for line in lines[1:]:
        sm, regs, threads = line.split("\t")[:3]
        arch = sm.endswith("a")  # an arch-specific target: numbered 1000 + its SM, as the dump writes it
        num = sm[3:-1] if arch else sm[3:]
        if not sm.startswith("sm_") or not num.isdigit():
            sys.exit("compare_matrix: '%s list --targets' printed a line that names no SM: %r" % (kiln, line))
        facts[int(num) + (1000 if arch else 0)] = (int(regs), int(threads))
    return facts


def blocks(regs, threads, sm, facts):
    """Blocks of `threads` an SM holds by its register file (per-warp allocation in units of 256) and
    its resident-thread limit (shared memory is not in the dump)."""
    if sm not in facts:
        sys.exit("compare_matrix: sm_%d is not in kiln's SM table (kiln list --targets)" % sm)
    regs_per_sm, threads_per_sm = facts[sm]
    per_warp = (regs * 32 + 255) // 256 * 256
    warps = (threads + 31) // 32
    if not per_warp or not warps:
        return 0
    return min(regs_per_sm // per_warp // warps, threads_per_sm // (warps * 32))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--list", type=int, default=10, help="variants to list per family where SASS grew most")
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument("--kiln", default=os.environ.get("KILN") or os.path.join(here, "bin", "kiln"),
                    help="the kiln whose SM table (kiln list --targets) gives registers and threads per SM")
    a = ap.parse_args()
    facts = sm_facts(a.kiln)
    old, new = load(a.old), load(a.new)
    fam = collections.defaultdict(list)
    for key in sorted(old.keys() & new.keys()):
        family = key[1].split()[0]
        kernel = [w[7:] for w in key[1].split() if w.startswith("kernel=")]  # a kernel of a sequence: its own row
        if kernel:
            family += " " + kernel[0]
        fam[family].append(key)
    print("| family | variants | registers old -> new | SASS old -> new | fewer blocks/SM | more blocks/SM |")
    print("|---|---|---|---|---|---|")
    lost_all = []
    for family, keys in sorted(fam.items()):
        r0 = sum(old[k][0] for k in keys)
        r1 = sum(new[k][0] for k in keys)
        s0 = sum(old[k][1] for k in keys)
        s1 = sum(new[k][1] for k in keys)
        lost = [k for k in keys if blocks(new[k][0], new[k][3], k[0], facts) < blocks(old[k][0], old[k][3], k[0], facts)]
        gained = [k for k in keys if blocks(new[k][0], new[k][3], k[0], facts) > blocks(old[k][0], old[k][3], k[0], facts)]
        lost_all += lost
        print("| %s | %d | %d -> %d (%+.1f%%) | %d -> %d (%+.1f%%) | %d | %d |" % (
            family, len(keys), r0, r1, 100.0 * (r1 - r0) / max(r0, 1), s0, s1, 100.0 * (s1 - s0) / max(s0, 1),
            len(lost), len(gained)))
    print()
    for family, keys in sorted(fam.items()):
        grew = sorted((k for k in keys if new[k][1] > old[k][1]), key=lambda k: old[k][1] - new[k][1])[:a.list]
        for k in grew:
            print("SASS grew: %s sm_%d: %d -> %d instructions, %d -> %d registers" % (
                k[1], k[0], old[k][1], new[k][1], old[k][0], new[k][0]))
    for k in lost_all:
        print("FEWER BLOCKS: %s sm_%d: %d -> %d registers, %d -> %d blocks/SM" % (
            k[1], k[0], old[k][0], new[k][0], blocks(old[k][0], old[k][3], k[0], facts), blocks(new[k][0], new[k][3], k[0], facts)))
    print("only in %s: %d variants; only in %s: %d" % (a.old, len(old.keys() - new.keys()), a.new,
                                                         len(new.keys() - old.keys())))
    return 1 if lost_all else 0


if __name__ == "__main__":
    sys.exit(main())
