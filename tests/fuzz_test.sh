#!/usr/bin/env bash
# tests/fuzz_test.sh - a bounded libFuzzer run of every reader target (tests/fuzz/): the spec
# parsers, the PTX reader and lint, lint's binary reader (fatbins, cubins, ELF objects), the bundle
# reader, the kiln.meta parser and the disk-cache entry reader, each under ASan + UBSan, seeded
# from tests/fuzz/corpus/ (kiln's own outputs and nvcc's, tests/fuzz/make_seeds.sh) and replaying
# tests/fuzz/regress/ (inputs that once crashed).
# KILN_FUZZ_SECONDS per target (default 7; `make fuzz`: FUZZ_SECONDS, default 120, with the corpus
# kept in build/fuzz/corpus/ through KILN_FUZZ_KEEP); under `make SAN=1 test` (O=build/san) the corpora
# are only replayed, since the fuzzers are already sanitized and ran in `make test`.
# Without clang-22 the fuzzers are not built and every target is skipped, with the reason.
set -u
secs=${KILN_FUZZ_SECONDS:-7}
# The suite's run is reproducible: a fixed seed (KILN_FUZZ_SEED, default 1) walks the same mutations each
# time, so a CI run fails on a change, not on the luck of the draw. `make fuzz` explores: seed 0 lets
# libFuzzer draw a new one each run.
seed=${KILN_FUZZ_SEED:-1}
replay_only=0
case "${O:-build}" in *san*) replay_only=1 ;; esac
passed=0 failed=0 skipped=0
total_execs=0
for t in spec ptx bundle meta disk bin; do
    bin=build/fuzz/fuzz_$t
    if [ ! -x "$bin" ]; then
        if ! command -v clang-22 >/dev/null 2>&1; then
            echo "skip fuzz_$t: clang-22 is not installed (tools/setup.sh installs it), so the fuzzers are not built"
        else
            echo "skip fuzz_$t: $bin is not built (run make)"
        fi
        skipped=$((skipped + 1)); continue
    fi
    dirs=(tests/fuzz/corpus/$t)
    [ -d tests/fuzz/regress/$t ] && dirs+=(tests/fuzz/regress/$t) # git keeps no empty directory
    maxlen=()
    [ $t = ptx ] && maxlen=(-max_len=8192) # whole kernels run ~15 per second under the sanitizers
    work=$(mktemp -d)
    mkdir -p "$work/crash"
    if [ -n "${KILN_FUZZ_KEEP:-}" ]; then # make fuzz: the corpus grows across runs
        mkdir -p "$KILN_FUZZ_KEEP/$t" && ln -s "$PWD/$KILN_FUZZ_KEEP/$t" "$work/corpus"
    else
        mkdir -p "$work/corpus"
    fi
    if [ $replay_only = 1 ]; then
        "$bin" -runs=0 -timeout=10 -rss_limit_mb=2048 "$work/corpus" "${dirs[@]}" >"$work/log" 2>&1
        rc=$?
        what="replayed $(find "${dirs[@]}" -type f | wc -l) inputs"
    else
        "$bin" -seed="$seed" -max_total_time="$secs" "${maxlen[@]}" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
            -artifact_prefix="$work/crash/" "$work/corpus" "${dirs[@]}" >"$work/log" 2>&1
        rc=$?
        execs=$(grep -oE 'stat::number_of_executed_units: *[0-9]+' "$work/log" | grep -oE '[0-9]+$' || echo 0)
        total_execs=$((total_execs + execs))
        what="$execs executions in $secs s, $(ls "$work/corpus/" | wc -l) inputs in the working corpus"
    fi
    if [ $rc -eq 0 ]; then
        echo "ok   fuzz_$t: $what, no crash"
        passed=$((passed + 1))
    else
        echo "FAIL fuzz_$t (exit $rc, seed $seed): $what"
        grep -E '==[0-9]+==ERROR|runtime error|SUMMARY|Test unit written|deadly signal' "$work/log" | head -8
        for c in "$work"/crash/*; do
            [ -f "$c" ] || continue
            mkdir -p build/fuzz/crashes && cp "$c" build/fuzz/crashes/ &&
                echo "  crashing input kept in build/fuzz/crashes/$(basename "$c"); add it to tests/fuzz/regress/$t/ with the fix"
        done
        failed=$((failed + 1))
    fi
    rm -rf "$work"
done
[ $replay_only = 0 ] && [ $passed -gt 0 ] && echo "fuzz: $total_execs executions in all"
echo "fuzz: $passed passed, $failed failed, $skipped skipped"
[ $failed -eq 0 ]
