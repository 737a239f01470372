#!/usr/bin/env bash
# tests/run.sh - runs every test program and script, then prints the overall summary line.
# Each test prints "SUITE: N passed, N failed[, N skipped]" as its last such line.
set -u
: "${O:=build}" "${KILN:=bin/kiln}"
export KILN O
passed=0 failed=0 skipped=0 broken=()
run_one() {
    local name=$1; shift
    local log; log=$(mktemp)
    local t0=$SECONDS
    "$@" >"$log" 2>&1
    local rc=$?
    cat "$log"
    local line; line=$(grep -E '^[A-Za-z0-9_. -]+: [0-9]+ passed, [0-9]+ failed' "$log" | tail -n 1)
    rm -f "$log"
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
    echo "   ($name: $((SECONDS - t0)) s)"
}
for t in "$O"/tests/*_test; do
    [ -x "$t" ] || continue
    run_one "$(basename "$t")" "$t"
done
for s in tests/*_test.sh; do
    [ -f "$s" ] || continue
    run_one "$(basename "$s")" bash "$s"
done
[ ${#broken[@]} -gt 0 ] && echo "failing: ${broken[*]}"
echo "kiln tests: $passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
