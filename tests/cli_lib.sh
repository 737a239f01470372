# tests/cli_lib.sh - shared harness for the CLI test scripts (sourced): ok, bad, expect, finish.
# Sets KILN (default bin/kiln), a scratch dir $tmp removed on exit, and the pass/fail counters.
KILN=${KILN:-bin/kiln}
pass=0 fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

ok() { pass=$((pass + 1)); [ -n "${KILN_TEST_VERBOSE:-}" ] && echo "ok   $1"; return 0; }
bad() { fail=$((fail + 1)); echo "FAIL $1: $2"; }

# expect NAME STATUS FRAGMENT -- ARGS...: kiln ARGS exits with STATUS and prints FRAGMENT (stdout
# or stderr); status 2 must come with exactly one stderr line.
expect() {
    local name=$1 want=$2 frag=$3; shift 4
    "$KILN" "$@" >"$tmp/out" 2>"$tmp/err"
    local rc=$? lines
    lines=$(wc -l <"$tmp/err")
    if [ "$rc" -ne "$want" ]; then bad "$name" "exit $rc, want $want: $(head -c 400 "$tmp/err" "$tmp/out")"; return; fi
    if [ "$want" -eq 2 ] && [ "$lines" -ne 1 ]; then bad "$name" "stderr has $lines lines: $(cat "$tmp/err")"; return; fi
    if [ -n "$frag" ] && ! grep -qF -- "$frag" "$tmp/err" "$tmp/out"; then
        bad "$name" "no '$frag' in: $(head -c 400 "$tmp/out" "$tmp/err")"; return
    fi
    ok "$name"
}

# expect_re NAME STATUS PATTERN -- ARGS...: kiln ARGS exits with STATUS within 60 s (a reader that never
# stops fails here instead of hanging the suite) and prints PATTERN (grep -E, stdout or stderr).
expect_re() {
    local name=$1 want=$2 pattern=$3 out rc
    shift 4
    out=$(timeout 60 "$KILN" "$@" 2>&1)
    rc=$?
    if [ "$rc" -eq "$want" ] && grep -qE -- "$pattern" <<<"$out"; then
        ok "$name"
    else
        bad "$name" "exit $rc (want $want), output lacks /$pattern/:"
        sed 's/^/    /' <<<"$out" | head -20
    fi
}

# finish SUITE: prints the summary line and exits with the verdict.
finish() {
    echo "$1: $pass passed, $fail failed"
    [ "$fail" -eq 0 ]
    exit
}
