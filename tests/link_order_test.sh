#!/usr/bin/env bash
# tests/link_order_test.sh - bin/kiln links the functions of tools/kiln.order first, side by side (a fresh
# `kiln emit` then faults in fewer pages of code), wherever the Makefile's ORDER_LDFLAGS test finds lld-22;
# and the order file still names the functions this build has (a stale list orders nothing).
set -u
. "$(dirname "$0")/cli_lib.sh"
ORDER=tools/kiln.order

if [ ! -s "$ORDER" ]; then
    bad "tools/kiln.order" "missing or empty"
    finish link_order
fi
# the symbols of bin/kiln's code: address, size (decimal), name
nm -t d -S --defined-only "$KILN" 2>/dev/null | awk 'NF == 4 && $3 ~ /^[tTwW]$/ {print $1, $2, $4}' >"$tmp/syms"
if [ ! -s "$tmp/syms" ]; then
    ok "bin/kiln has no symbol table (stripped): nothing to check"
    finish link_order
fi
grep -v '^#' "$ORDER" | sort -u >"$tmp/names"
# how many listed names the binary defines, the span of their code and its size (bytes)
read -r listed found span size < <(awk 'NR == FNR {want[$1] = 1; n++; next}
    ($3 in want) && !seen[$3]++ {
        a = $1 + 0; s = $2 + 0; k++; tot += s
        if (lo == "" || a < lo) lo = a
        if (a + s > hi) hi = a + s
    }
    END {printf "%d %d %d %d\n", n, k, hi - lo, tot}' "$tmp/names" "$tmp/syms")

# 90 %: the list comes from one build; a template or LLVM change moves a few functions in or out
if [ "$found" -ge $((listed * 9 / 10)) ]; then ok "bin/kiln defines $found of the $listed listed functions"
else bad "tools/kiln.order is stale" "bin/kiln defines only $found of its $listed functions; run make kiln-order"; fi

# lld writes its name into .comment; LLVM_SHARED=1 builds link the default way on purpose
lld_linked=0
readelf -p .comment "$KILN" 2>/dev/null | grep -q 'Linker: .*LLD' && lld_linked=1
LLD_DIR=$(llvm-config-22 --bindir 2>/dev/null)
flags=(-B"$LLD_DIR" -fuse-ld=lld -Wl,--symbol-ordering-file="$ORDER" -Wl,--no-warn-symbol-ordering)
if [ -x "$LLD_DIR/ld.lld" ] && ! ldd "$KILN" 2>/dev/null | grep -q libLLVM &&
   ! printf 'int main(void){return 0;}' | ${CC:-cc} -x c - "${flags[@]}" -o /dev/null 2>&1 | grep -q .; then
    if [ $lld_linked = 1 ]; then ok "bin/kiln is linked by lld-22, which this toolchain takes"
    else bad "bin/kiln is linked by lld-22, which this toolchain takes" "the Makefile's ORDER_LDFLAGS test left it out"; fi
fi
if [ $lld_linked = 0 ]; then
    ok "bin/kiln is linked in the default order (no lld-22 here, or LLVM_SHARED=1)"
elif [ "$span" -le $((size + size / 10)) ]; then
    ok "the listed functions lie side by side ($((size >> 10)) KiB of code in $((span >> 10)) KiB)"
else
    bad "the listed functions lie side by side" "$((size >> 10)) KiB of code spread over $((span >> 10)) KiB"
fi
finish link_order
