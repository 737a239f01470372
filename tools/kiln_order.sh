#!/usr/bin/env bash
# tools/kiln_order.sh - writes tools/kiln.order, the functions a `kiln emit` process runs, which the
# Makefile links first in bin/kiln (ld.lld --symbol-ordering-file) so that a fresh process touches
# fewer pages of its 32 MB of code (docs/jit.md "Wave 8").
#   tools/kiln_order.sh [KILN] [OUT]     (make kiln-order; needs valgrind)
# Each spec below runs once under callgrind (names not demangled); every function it entered that
# bin/kiln defines is kept, one symbol a line, sorted. A name the binary no longer has is only skipped
# at link time, so the list goes stale gracefully: regenerate it after an LLVM or template upgrade.
set -eu
KILN=${1:-bin/kiln}
OUT=${2:-tools/kiln.order}
command -v valgrind >/dev/null || { echo "kiln_order: needs valgrind" >&2; exit 2; }
[ -x "$KILN" ] || { echo "kiln_order: '$KILN' is not an executable kiln" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Debian 12's valgrind cannot read the DWARF 5 of the debug build: a copy without it
strip --strip-debug -o "$tmp/kiln" "$KILN"
SPECS=(
    "layernorm x=bf16 w=f32 y=bf16 hidden=4096 --sm 80"
    "layernorm x=f16 hidden=launch --sm 75"
    "rmsnorm x=bf16 hidden=4096 --sm 90"
    "layernorm_bwd x=bf16 hidden=4096 --sm 80"
    "attention dtype=bf16 head_dim=128 causal=true --sm 80"
    "attention dtype=f16 head_dim=64 --sm 75"
    "attention dtype=f16 head_dim=128 splitkv=true --sm 90"
    "attention_bwd kernel=dq dtype=bf16 head_dim=64 --sm 80"
)
i=0
for s in "${SPECS[@]}"; do
    i=$((i + 1))
    # shellcheck disable=SC2086
    valgrind --tool=callgrind --demangle=no --callgrind-out-file="$tmp/$i.cg" \
        "$tmp/kiln" emit $s -o /dev/null 2>"$tmp/$i.log" || { cat "$tmp/$i.log" >&2; exit 1; }
done
valgrind --tool=callgrind --demangle=no --callgrind-out-file="$tmp/v.cg" "$tmp/kiln" --version >/dev/null 2>&1
nm --defined-only "$KILN" | awk '$2 ~ /^[tTwW]$/ {print $3}' | sort -u >"$tmp/defined"
cat "$tmp"/*.cg | sed -nE 's/^c?fn=\([0-9]+\) (.*)$/\1/p' | sort -u | comm -12 - "$tmp/defined" >"$tmp/order"
{
    echo "# tools/kiln.order - bin/kiln's functions that kiln emit runs, linked first (tools/kiln_order.sh writes it)"
    cat "$tmp/order"
} >"$OUT"
echo "kiln_order: $(wc -l <"$tmp/order") functions into $OUT"
