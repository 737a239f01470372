#!/usr/bin/env bash
# tests/reproducible_test.sh - the same spec gives the same PTX in every process: every 10th of the
# quick variants on sm_80 (all families) bundled by three separate kiln processes, the bundles
# byte-identical. Lua seeds its string hashes per process, so a
# template that walks a table with pairs() while building IR gives another kernel in another process
# (seen: attn_varlen.lua's row lists; KILN_TEST_FULL=1 takes every quick variant).
set -u
. "$(dirname "$0")/cli_lib.sh"

"$KILN" list --variants all --sm 80 >"$tmp/all" 2>"$tmp/err" || { bad "variant list" "$(cat "$tmp/err")"; finish reproducible; }
if [ -n "${KILN_TEST_FULL:-}" ]; then
    cp "$tmp/all" "$tmp/specs"
else
    awk 'NR % 10 == 1' "$tmp/all" >"$tmp/specs"
fi
n=$(wc -l <"$tmp/specs")
[ "$n" -gt 50 ] && ok "sample of $n specs" || bad "sample" "only $n specs"

for i in 1 2 3; do
    if "$KILN" bundle --spec-list "$tmp/specs" --sm 80 -o "$tmp/b$i.kb" >"$tmp/log$i" 2>&1; then
        ok "bundle $i"
    else
        bad "bundle $i" "$(tail -3 "$tmp/log$i")"
    fi
done
for i in 2 3; do
    if cmp -s "$tmp/b1.kb" "$tmp/b$i.kb"; then
        ok "process $i's bundle equals process 1's"
    else
        # (which entries differ, by bundle-info's listing; identical listings: the PTX differs at equal sizes)
        "$KILN" bundle-info "$tmp/b1.kb" 2>&1 | tail -n +2 >"$tmp/info1"
        "$KILN" bundle-info "$tmp/b$i.kb" 2>&1 | tail -n +2 >"$tmp/info$i"
        bad "process $i's bundle differs from process 1's" "a template builds IR in a per-process order; $(
            diff "$tmp/info1" "$tmp/info$i" | grep '^[<>]' | head -4 | tr '\n' ' ')"
    fi
done
finish reproducible
