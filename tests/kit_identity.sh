#!/usr/bin/env bash
# tests/kit_identity.sh - proves a refactor of the GPU kit's case side: two kiln-kit builds write byte-identical case files.
# usage: tests/kit_identity.sh BEFORE_KILN_KIT AFTER_KILN_KIT [OUTDIR]
# `kiln-kit prepare` for sm_90 (every row, full size) and for sm_80 as a 108-SM device (--sms: the
# backward reductions in the GPU's order; quick sizes), with each build; every .kcase file (inputs,
# the emulator's outputs, float64 references, tolerances) must be the same bytes. Prints
# "kit identity: N passed, N failed".
set -u
before=${1:?usage: tests/kit_identity.sh BEFORE_KILN_KIT AFTER_KILN_KIT [OUTDIR]}
after=${2:?usage: tests/kit_identity.sh BEFORE_KILN_KIT AFTER_KILN_KIT [OUTDIR]}
out=${3:-$(mktemp -d)}
mkdir -p "$out"
pass=0 fail=0
run() { # NAME ARGS...
    local name=$1
    shift
    rm -rf "$out/$name.before" "$out/$name.after"
    "$before" prepare "$out/$name.before" "$@" -j 1 >/dev/null 2>&1 && "$after" prepare "$out/$name.after" "$@" -j 1 >/dev/null 2>&1 ||
        { fail=$((fail + 1)); echo "FAIL $name: prepare failed"; return; }
    local n
    n=$(ls "$out/$name.before" | wc -l)
    if [ "$n" -gt 0 ] && diff -r "$out/$name.before" "$out/$name.after" >/dev/null; then
        pass=$((pass + 1)); echo "ok   $name: $n case files identical"
    else
        fail=$((fail + 1)); echo "FAIL $name: case files differ"; diff -rq "$out/$name.before" "$out/$name.after" | head -5
    fi
}
run sm90-full --sm 90
run sm80-sms108-quick --sm 80 --sms 108 --quick
echo "kit identity: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
