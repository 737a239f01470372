#!/usr/bin/env bash
# tests/compare_matrix_test.sh - `kiln list --targets` prints the SM table's occupancy facts, and tools/compare_matrix.py counts resident blocks from them.
source tests/cli_lib.sh

# ---- kiln list --targets: a header, then one line per target with the table's values
expect "list --targets header" 0 "sm	regs_per_sm	threads_per_sm	max_threads	smem_optin_max" -- list --targets
expect "list --targets sm_75" 0 "sm_75	65536	1024	1024	65536" -- list --targets
expect "list --targets sm_90" 0 "sm_90	65536	2048	1024	232448" -- list --targets
expect "list --targets sm_90a" 0 "sm_90a	65536	2048" -- list --targets
expect "list --targets with --variants" 2 "--targets and --variants are two listings" -- list --targets --variants rmsnorm
"$KILN" list --targets >"$tmp/targets"
n=$(($(wc -l <"$tmp/targets") - 1))
m=$("$KILN" list | sed -n 's/^targets://p' | wc -w)
if [ "$n" -eq "$m" ]; then ok "a line per target"; else bad "a line per target" "$n lines, kiln list names $m targets"; fi

# ---- compare_matrix.py: blocks per SM from the table. 128 threads at 128 registers: the register file
# holds 4 blocks on every SM; 256 threads at 32 registers: 8 blocks by registers, but sm_75 holds only
# 1024 threads (4 blocks) and sm_86 1536 (6), sm_90 2048 (8). The new dump's growth to 64 registers
# (4 blocks by registers) loses blocks on sm_86 and sm_90, not on sm_75.
printf '75\t32\t100\t50\t256\tfam a=1\n86\t32\t100\t50\t256\tfam a=1\n90\t32\t100\t50\t256\tfam a=1\n1090\t32\t100\t50\t256\tfam a=1\n' >"$tmp/old.tsv"
printf '75\t64\t100\t50\t256\tfam a=1\n86\t64\t100\t50\t256\tfam a=1\n90\t64\t100\t50\t256\tfam a=1\n1090\t64\t100\t50\t256\tfam a=1\n' >"$tmp/new.tsv"
python3 tools/compare_matrix.py "$tmp/old.tsv" "$tmp/new.tsv" --kiln "$KILN" >"$tmp/cmp" 2>&1
rc=$?
if [ $rc -eq 1 ]; then ok "fewer blocks: exit 1"; else bad "fewer blocks: exit 1" "exit $rc: $(cat "$tmp/cmp")"; fi
for want in "FEWER BLOCKS: fam a=1 sm_86: 32 -> 64 registers, 6 -> 4 blocks/SM" \
    "FEWER BLOCKS: fam a=1 sm_90: 32 -> 64 registers, 8 -> 4 blocks/SM" \
    "FEWER BLOCKS: fam a=1 sm_1090: 32 -> 64 registers, 8 -> 4 blocks/SM"; do
    if grep -qF "$want" "$tmp/cmp"; then ok "$want"; else bad "$want" "$(cat "$tmp/cmp")"; fi
done
if ! grep -q "sm_75:" "$tmp/cmp"; then ok "sm_75 keeps its 4 blocks"; else bad "sm_75 keeps its 4 blocks" "$(grep sm_75 "$tmp/cmp")"; fi
# without a kiln to ask: one clear line, no table made up
python3 tools/compare_matrix.py "$tmp/old.tsv" "$tmp/new.tsv" --kiln "$tmp/none" >"$tmp/cmp" 2>&1
rc=$?
if [ $rc -ne 0 ] && grep -q "cannot read the SM table" "$tmp/cmp"; then ok "no kiln: clear error"; else bad "no kiln: clear error" "exit $rc: $(cat "$tmp/cmp")"; fi
# an SM the table lacks
printf '72\t32\t100\t50\t256\tfam a=1\n' >"$tmp/odd.tsv"
python3 tools/compare_matrix.py "$tmp/odd.tsv" "$tmp/odd.tsv" --kiln "$KILN" >"$tmp/cmp" 2>&1
rc=$?
if [ $rc -ne 0 ] && grep -q "sm_72 is not in kiln's SM table" "$tmp/cmp"; then ok "unknown SM: clear error"; else bad "unknown SM: clear error" "exit $rc: $(cat "$tmp/cmp")"; fi
finish compare_matrix
