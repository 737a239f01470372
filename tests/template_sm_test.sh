#!/usr/bin/env bash
# tests/template_sm_test.sh - templates never compare SM numbers (README, ../shared/DESIGN.md: policy in templates,
# facts in the SM table): no template line compares target.sm (or any .sm), indexes a table by it, does arithmetic on
# it, or keeps a table of SMs; SM facts are target fields (runtime/rt_target.c, gen/gen_target.c's ptxas rows).
# Printing target.sm in a message is allowed. TEMPLATES=DIR checks another tree (the templates before the
# ptxas rows: 3 lines flagged).
set -u
. "$(dirname "$0")/cli_lib.sh"

# sm_uses DIR: the offending lines of DIR/**.lua, comments stripped, as FILE:LINE: TEXT
sm_uses() {
    find "$1" -name '*.lua' | sort | while read -r f; do
        sed 's/--.*$//' "$f" | grep -nE \
            -e '\.sm[[:space:]]*(==|~=|<=|>=|<|>|%|//)' \
            -e '(==|~=|<=|>=|<|>)[[:space:]]*[A-Za-z_][A-Za-z_0-9.]*\.sm([^A-Za-z_0-9]|$)' \
            -e '\[[[:space:]]*[A-Za-z_][A-Za-z_0-9.]*\.sm[[:space:]]*\]' \
            -e '(^|[^A-Za-z_0-9])sm[[:space:]]*=[[:space:]]*\{[[:space:]]*\[' |
            sed "s|^|$f:|"
    done
}

dir=${TEMPLATES:-templates}
sm_uses "$dir" >"$tmp/uses"
if [ ! -s "$tmp/uses" ]; then ok "$dir: no SM-number comparison"
else bad "$dir: no SM-number comparison" "$(cat "$tmp/uses")"; fi
n=$(find "$dir" -name '*.lua' | wc -l)
if [ "$n" -gt 10 ]; then ok "$dir: $n templates read"; else bad "$dir: templates read" "only $n .lua files"; fi

# the check itself: each planted form is found, a message printing target.sm and a comment are not
mkdir -p "$tmp/t"
plant() { # NAME FOUND LINE: a template holding LINE is flagged (FOUND=1) or not (0)
    printf 'local M = {}\n%s\nreturn M\n' "$3" >"$tmp/t/p.lua"
    local got=0
    [ -n "$(sm_uses "$tmp/t")" ] && got=1
    if [ "$got" = "$2" ]; then ok "$1"; else bad "$1" "flagged=$got for: $3"; fi
}
plant "target.sm >= 90" 1 '  local sm90 = target.sm >= 90 -- sm_90a is 1090'
plant "90 <= target.sm" 1 '  if 90 <= target.sm then x = 1 end'
plant "t.sm == 80" 1 'if t.sm == 80 then end'
plant "indexed by target.sm" 1 '  local r = ROLL.sm[target.sm] and x'
plant "a table of SMs" 1 'local ROLL = { dims = { [32] = true }, sm = { [80] = true, [86] = true } }'
plant "target.sm % 1000" 1 'local base = target.sm % 1000'
plant "message printing target.sm" 0 '  error(string.format("sm_%d: no mma for %s", target.sm, spec.dtype))'
plant "a comment" 0 '  x = 1 -- on sm_90 (target.sm >= 90) ptxas needs more'
plant "smem fields" 0 '  if bytes > target.smem_static_max then cfg.dynamic_smem = bytes end'
plant "a target field" 0 '  local r = ROLL.dims[d] and target.ptxas_rolled_mma_k'
finish template_sm
