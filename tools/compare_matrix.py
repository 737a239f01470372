#!/usr/bin/env python3
"""tools/compare_matrix.py - sets two ptxas-matrix dumps (KILN_MATRIX_DUMP=FILE, tests/matrix.h) side by
side: per family, the variants both hold, their register and SASS-instruction totals and deltas, and
every variant whose registers let fewer blocks reside on an SM in the second dump (the LLVM 19 -> 22
figures of docs/llvm22.md came from it).

    tools/compare_matrix.py OLD.tsv NEW.tsv [--list N]
"""
import argparse
import collections
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


def blocks(regs, threads):
    """Blocks of `threads` an SM's 64K registers hold (per-warp allocation in units of 256)."""
    per_warp = (regs * 32 + 255) // 256 * 256
    warps = (threads + 31) // 32
    return 65536 // per_warp // warps if per_warp and warps else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--list", type=int, default=10, help="variants to list per family where SASS grew most")
    a = ap.parse_args()
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
        lost = [k for k in keys if blocks(new[k][0], new[k][3]) < blocks(old[k][0], old[k][3])]
        gained = [k for k in keys if blocks(new[k][0], new[k][3]) > blocks(old[k][0], old[k][3])]
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
            k[1], k[0], old[k][0], new[k][0], blocks(old[k][0], old[k][3]), blocks(new[k][0], new[k][3])))
    print("only in %s: %d variants; only in %s: %d" % (a.old, len(old.keys() - new.keys()), a.new,
                                                         len(new.keys() - old.keys())))
    return 1 if lost_all else 0


if __name__ == "__main__":
    sys.exit(main())
