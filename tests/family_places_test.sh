#!/usr/bin/env bash
# tests/family_places_test.sh - tools/family_places.py: every family kiln list shows is named in at most 4 counted places, and the count sees a planted 5th.
source tests/cli_lib.sh
fp() { python3 tools/family_places.py --kiln "$KILN" "$@"; }

# ---- the tree as it is: no family over 4 (or over its OVER row), exit 0
fp --max 4 --quiet >"$tmp/out" 2>&1
rc=$?
if [ $rc -eq 0 ]; then ok "the tree: every family within its places"; else bad "the tree: every family within its places" "exit $rc: $(cat "$tmp/out")"; fi
fp >"$tmp/all" 2>&1
for fam in $("$KILN" list | sed -n 's/^\([a-z_0-9]*\) - .*/\1/p'); do
    if grep -q "^$fam: [0-9]* places (plain git grep -w: [0-9]* files)" "$tmp/all"; then ok "$fam reported"; else bad "$fam reported" "$(head -5 "$tmp/all")"; fi
done

# ---- a copy of the source files to plant in (tests/ and docs/ are not read, so not copied)
mkdir -p "$tmp/tree"
git ls-files -z --cached --others --exclude-standard -- ':!tests' ':!python/tests' ':!docs' | xargs -0 cp --parents -t "$tmp/tree"
count() { sed -n "s/^$1: \([0-9]*\) places.*/\1/p" "$tmp/p"; }
fp --root "$tmp/tree" >"$tmp/p" 2>&1
base_bwd=$(count rmsnorm_bwd) base_attn=$(count attention) base_rot=$(count rotary) base_red=$(count norm_reduce)
if [ -n "$base_bwd" ] && [ "$base_bwd" -le 4 ]; then ok "copy: rmsnorm_bwd counted ($base_bwd)"; else bad "copy: rmsnorm_bwd counted" "$(head -20 "$tmp/p")"; fi

# the English word, attention's rotary= key, a field, a typed helper's identifier: not the family
printf '/* runtime/rt_prose.c - attention is paid here; rotary=neox is a key; a.rotary a field. */\nint kiln_attention_forward_x(void) { return 0; } /* layernorm of the rows */\n' >"$tmp/tree/runtime/rt_prose.c"
fp --root "$tmp/tree" >"$tmp/p" 2>&1
if [ "$(count attention)" = "$base_attn" ] && [ "$(count rotary)" = "$base_rot" ]; then ok "prose, keys and identifiers do not count"
else bad "prose, keys and identifiers do not count" "attention $base_attn -> $(count attention), rotary $base_rot -> $(count rotary)"; fi

# a planted 5th place: a spec string in a new runtime file
printf '/* runtime/rt_planted.c - a planted restatement. */\nconst char *planted = "rmsnorm_bwd x=f32 hidden=64";\n' >"$tmp/tree/runtime/rt_planted.c"
fp --root "$tmp/tree" --max "$base_bwd" >"$tmp/p" 2>&1
rc=$?
if [ $rc -eq 1 ] && grep -q "^rmsnorm_bwd: $((base_bwd + 1)) places.*OVER" "$tmp/p" && grep -q "counted   runtime/rt_planted.c:2" "$tmp/p"; then
    ok "planted spec string: over, exit 1, the file named"
else bad "planted spec string: over, exit 1, the file named" "exit $rc: $(grep -A3 '^rmsnorm_bwd' "$tmp/p")"; fi
rm "$tmp/tree/runtime/rt_planted.c"
# a file named for a family, and a comment naming one with no other reading
: >"$tmp/tree/python/kiln/_norm_reduce_helper.py"
fp --root "$tmp/tree" >"$tmp/p" 2>&1
if [ "$(count norm_reduce)" = "$((base_red + 1))" ]; then ok "a file named for the family counts"; else bad "a file named for the family counts" "$base_red -> $(count norm_reduce)"; fi
rm "$tmp/tree/python/kiln/_norm_reduce_helper.py"
printf '# bench/planted.py - sums what rmsnorm_bwd leaves.\n' >"$tmp/tree/bench/planted.py"
fp --root "$tmp/tree" >"$tmp/p" 2>&1
if [ "$(count rmsnorm_bwd)" = "$((base_bwd + 1))" ]; then ok "a comment naming rmsnorm_bwd counts"; else bad "a comment naming rmsnorm_bwd counts" "$base_bwd -> $(count rmsnorm_bwd)"; fi
rm "$tmp/tree/bench/planted.py"
# a word-named family (attention) past 4: a spec head in a new file fails the check
printf '# tools/planted.sh - one more place.\nkiln run attention dtype=f16 --sm 80\n' >"$tmp/tree/tools/planted.sh"
fp --root "$tmp/tree" --max 4 >"$tmp/p" 2>&1
rc=$?
if [ $rc -eq 1 ] && grep -q "^attention: $((base_attn + 1)) places.*OVER" "$tmp/p"; then ok "attention past 4: exit 1"
else bad "attention past 4: exit 1" "exit $rc: $(grep '^attention:' "$tmp/p")"; fi
# an exception (a spec list) does not count
printf '80 rmsnorm_bwd x=f16 hidden=128\n' >>"$tmp/tree/bench/transformer_kernels.txt"
fp --root "$tmp/tree" >"$tmp/p" 2>&1
if [ "$(count rmsnorm_bwd)" = "$base_bwd" ]; then ok "a spec list does not count"; else bad "a spec list does not count" "$base_bwd -> $(count rmsnorm_bwd)"; fi

# ---- bad input: one line, exit 2
for args in "--max x" "--families nosuch" "--root $tmp/none" "--frob"; do
    python3 tools/family_places.py --kiln "$KILN" $args >"$tmp/out" 2>"$tmp/err"
    rc=$?
    if [ $rc -eq 2 ] && [ "$(wc -l <"$tmp/err")" -le 2 ] && grep -q "^family_places: " "$tmp/err"; then ok "bad input: $args"
    else bad "bad input: $args" "exit $rc: $(cat "$tmp/err")"; fi
done
grep -q "no family 'nosuch'; valid: attention" <(python3 tools/family_places.py --kiln "$KILN" --families nosuch 2>&1) \
    && ok "bad family names the valid ones" || bad "bad family names the valid ones" "no list"
finish family_places
