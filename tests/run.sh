#!/usr/bin/env bash
# tests/run.sh - runs every test program and script, KILN_TEST_PROCS at a time (default: one per core), each
# test's output printed whole when it ends with its wall and CPU seconds, then the CPU total and the overall
# summary line.
# Each test prints "SUITE: N passed, N failed[, N skipped]" as its last such line.
set -u
: "${O:=build}" "${KILN:=bin/kiln}"
export KILN O
jobs=${KILN_TEST_PROCS:-$(nproc 2>/dev/null || echo 1)}
case $jobs in '' | *[!0-9]* | 0) echo "KILN_TEST_PROCS must be a positive integer, not '$jobs'"; exit 2 ;; esac
# The longest tests start first so that the pool's last minutes are not one long test alone; the rest keep
# their order. Seconds on the 2-core build machine, fresh-clone .ci/run of wave 18: the plain pass
# attention_ptxas 396, attention_bwd_ptxas 267, attention_bwd_f16scaled 245, python 156, emu_layernorm 111,
# attention_f16scaled 93, attention_mask_emu 72; the sanitizer pass (O=build/san: the ptxas matrices
# assemble a ninth, the emulator runs ~3x slower) attention_bwd_f16scaled 267, attention_f16scaled 126,
# attention_ptxas 99, python 96, attention_bwd_ptxas 85, attention_mask_emu 75, attention_dropout 56.
if [ "$O" = build ]; then
    longest_first=(attention_ptxas_test attention_bwd_ptxas_test attention_bwd_f16scaled_test python_test.sh
                   emu_layernorm_test attention_f16scaled_test attention_mask_emu_test ptxas_matrix_test fuzz_test.sh)
else
    longest_first=(attention_bwd_f16scaled_test attention_f16scaled_test attention_ptxas_test python_test.sh
                   attention_bwd_ptxas_test attention_mask_emu_test attention_dropout_test attention_bwd_emu_test)
fi

names=() cmds=()
add() { names+=("$1"); cmds+=("$2"); }
for t in "$O"/tests/*_test; do [ -x "$t" ] && add "$(basename "$t")" "$t"; done
for s in tests/*_test.sh; do [ -f "$s" ] && add "$(basename "$s")" "bash $s"; done
order=()
for first in "${longest_first[@]}"; do
    for i in "${!names[@]}"; do [ "${names[$i]}" = "$first" ] && order+=("$i"); done
done
for i in "${!names[@]}"; do
    case " ${longest_first[*]} " in *" ${names[$i]} "*) ;; *) order+=("$i") ;; esac
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
passed=0 failed=0 skipped=0 broken=() cpu_total=0 start=$SECONDS
report() { # the finished test $1: its output, then its counts added to the totals
    local i=$1 name=${names[$1]}
    local log=$work/$i.log rc; rc=$(cat "$work/$i.rc")
    cat "$log"
    local line; line=$(grep -E '^[A-Za-z0-9_. -]+: [0-9]+ passed, [0-9]+ failed' "$log" | tail -n 1)
    if [ -z "$line" ]; then
        echo "FAIL $name: printed no summary line (exit $rc)"; failed=$((failed + 1)); broken+=("$name"); return
    fi
    local p f s
    p=$(sed -E 's/.*: ([0-9]+) passed.*/\1/' <<<"$line")
    f=$(sed -E 's/.* ([0-9]+) failed.*/\1/' <<<"$line")
    s=$(grep -oE '[0-9]+ skipped' <<<"$line" | grep -oE '[0-9]+' || echo 0)
    passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + s))
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then failed=$((failed + 1)); broken+=("$name (exit $rc)"); fi
    [ "$f" -gt 0 ] && broken+=("$name")
    local secs; secs=$(cat "$work/$i.secs")
    echo "   ($name: $secs s)"
    cpu_total=$((cpu_total + ${secs##* }))
}
running=()
reap() { # report every running test that has ended; keep the others
    local still=() i
    for i in "${running[@]}"; do
        if [ -e "$work/$i.rc" ]; then report "$i"; else still+=("$i"); fi
    done
    running=("${still[@]}")
}
for i in "${order[@]}"; do
    while [ ${#running[@]} -ge "$jobs" ]; do wait -n 2>/dev/null; reap; done
    (
        t0=$SECONDS
        ${cmds[$i]} >"$work/$i.log" 2>&1
        rc=$?
        # CPU seconds of the test's processes (user + system, the subshell's waited-for children):
        # with every core busy the suite's wall time follows the sum of these, not of the wall times
        # (times itself, not in a pipe or $(...): a subshell of its own has no children)
        times >"$work/$i.times"
        cpu=$(tail -n 1 "$work/$i.times" | awk '{ split($1, u, /[ms]/); split($2, s, /[ms]/); printf "%.0f", u[1] * 60 + u[2] + s[1] * 60 + s[2] }')
        echo "$((SECONDS - t0)) s, CPU $cpu" >"$work/$i.secs"
        echo $rc >"$work/$i.rc.tmp" && mv "$work/$i.rc.tmp" "$work/$i.rc"
    ) &
    running+=("$i")
done
while [ ${#running[@]} -gt 0 ]; do wait -n 2>/dev/null; reap; done
echo "tests' CPU time: $cpu_total s in $((SECONDS - start)) s, $jobs at a time"
[ ${#broken[@]} -gt 0 ] && echo "failing: ${broken[*]}"
echo "kiln tests: $passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
