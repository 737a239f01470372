#!/usr/bin/env bash
# sanitize - the GPU check kit's compute-sanitizer step (built by `make gpu-kit` as build/gpu-kit/sanitize; `run` calls it;
# docs/gpu-kit.md): memcheck, racecheck and synccheck, each over `kiln-gpucheck check` of the sm_90a cases in the arch
# bundle's cubin mode (every Hopper kernel the kit runs, on small shapes), each tool's verdict a line here and a row
# of REPORT (markdown).
# usage: sanitize CHECK BUNDLE ARCH_BUNDLE CASEDIR REPORT
#   CHECK: kiln-gpucheck; CASEDIR: cases with the sm_90a rows (kiln-kit prepare --arch-only --small).
# Environment: KIT_SANITIZER the compute-sanitizer to run ('none': skip), else the one on PATH, else the last one the
# glob KIT_CUDA_DIRS lists (default /usr/local/cuda*/bin); KIT_SANITIZER_TIMEOUT seconds a tool may take (default 300);
# KIT_SANITIZER_TOOLS the tools (default "memcheck racecheck synccheck"); KIT_SANITIZER_OPTIONS more options for every
# tool (words, e.g. "--racecheck-memcpy-async=yes" where the installed version has it).
# Exit status: 0 every tool clean, or skipped (no compute-sanitizer, or one that does not support this device: said so);
# 1 a tool found errors, or did not finish; 2 bad usage.
set -u
if [ $# -ne 5 ]; then
    echo "sanitize: usage: sanitize CHECK BUNDLE ARCH_BUNDLE CASEDIR REPORT" >&2
    exit 2
fi
CHECK=$1 BUNDLE=$2 ARCH=$3 CASES=$4 REPORT=$5
MODE="cubin sm_90a"
TIMEOUT=${KIT_SANITIZER_TIMEOUT:-300}
TOOLS=${KIT_SANITIZER_TOOLS:-memcheck racecheck synccheck}
ERRCODE=86 # the tools' exit status when they find errors (--error-exitcode): unlike any kiln-gpucheck status
for t in $TOOLS; do
    case $t in memcheck | racecheck | synccheck | initcheck) ;;
    *) echo "sanitize: KIT_SANITIZER_TOOLS names '$t'; valid: memcheck, racecheck, synccheck, initcheck" >&2; exit 2 ;;
    esac
done
case $TIMEOUT in '' | *[!0-9]*) echo "sanitize: KIT_SANITIZER_TIMEOUT must be whole seconds, not '$TIMEOUT'" >&2; exit 2 ;; esac

report() { printf '%s\n' "$@" >>"$REPORT"; }
report "## compute-sanitizer (the sm_90a kernels)" "" \
    "Over \`kiln-gpucheck check\` of the sm_90a cases ($(ls "$CASES" 2>/dev/null | grep -c 'sm1090\.kcase$') small cases: the wgmma" \
    "forward, its split-KV and paged forms, the wgmma backward's sequences), mode '$MODE'." ""

# the tool: KIT_SANITIZER, PATH, then the toolkits' bin folders (the glob's last match)
SAN=${KIT_SANITIZER:-}
if [ -z "$SAN" ]; then
    SAN=$(command -v compute-sanitizer 2>/dev/null)
    if [ -z "$SAN" ]; then
        for d in ${KIT_CUDA_DIRS:-/usr/local/cuda*/bin}; do
            [ -x "$d/compute-sanitizer" ] && SAN=$d/compute-sanitizer
        done
    fi
fi
skip() { # the whole step skipped, saying why
    echo "  skipped: $1"
    report "verdict: skipped: $1"
    exit 0
}
[ "$SAN" = none ] && skip "KIT_SANITIZER=none"
if [ -z "$SAN" ] || [ ! -x "$SAN" ]; then
    skip "no compute-sanitizer (${SAN:-not on PATH, none under ${KIT_CUDA_DIRS:-/usr/local/cuda*/bin}})"
fi
if ! ls "$CASES" 2>/dev/null | grep -q 'sm1090\.kcase$'; then
    echo "sanitize: no sm_90a case in $CASES (kiln-kit prepare DIR --sm 90 --arch-only --small)" >&2
    exit 2
fi
echo "  $SAN${KIT_SANITIZER_OPTIONS:+ $KIT_SANITIZER_OPTIONS}, tools: $TOOLS; each over kiln-gpucheck check --mode '$MODE' (at most $TIMEOUT s a tool)"
report "| tool | verdict | errors | seconds | the checks under it |" "|---|---|---:|---:|---|"
failed=0 nclean=0 nskip=0
for tool in $TOOLS; do
    log=$(mktemp /tmp/kiln-sanitize-XXXXXX)
    t0=$SECONDS
    # shellcheck disable=SC2086 # KIT_SANITIZER_OPTIONS: words
    timeout "$TIMEOUT" "$SAN" --tool "$tool" --error-exitcode $ERRCODE --print-limit 20 ${KIT_SANITIZER_OPTIONS:-} \
        "$CHECK" check "$BUNDLE" "$CASES" --arch-bundle "$ARCH" --mode "$MODE" >"$log" 2>&1
    rc=$?
    secs=$((SECONDS - t0))
    # every tool ends its report with "ERROR SUMMARY: N errors"; racecheck also "RACECHECK SUMMARY: H hazards displayed
    # (E errors, W warnings)"
    errors=$(sed -n 's/.*ERROR SUMMARY: \([0-9][0-9]*\) error.*/\1/p' "$log" | tail -n 1)
    warnings=$(sed -n 's/.*RACECHECK SUMMARY: .*(\([0-9][0-9]*\) errors*, \([0-9][0-9]*\) warnings*).*/\2/p' "$log" | tail -n 1)
    checks=$(grep -m1 '^AOT path: ' "$log" | sed 's/^AOT path: //')
    under="${checks:-no summary line} (exit $rc)"
    if grep -q "Device not supported" "$log"; then
        verdict="skipped: compute-sanitizer does not support this device here"
        nskip=$((nskip + 1))
    elif [ $rc -eq 124 ]; then
        verdict="FAIL: did not finish in $TIMEOUT s (KIT_SANITIZER_TIMEOUT)"
        under="stopped"
        failed=1
    elif [ $rc -eq $ERRCODE ] || [ "${errors:-0}" -gt 0 ]; then
        verdict="FAIL: ${errors:-some} errors"
        failed=1
    elif [ -z "$errors" ]; then
        verdict="FAIL: no ERROR SUMMARY line (exit $rc)"
        failed=1
    else
        verdict=clean
        [ "${warnings:-0}" -gt 0 ] && verdict="clean ($warnings racecheck warnings)"
        nclean=$((nclean + 1))
    fi
    printf '  %-10s %s in %d s; the checks under it: %s\n' "$tool" "$verdict" "$secs" "$under"
    report "| $tool | $verdict | ${errors:--} | $secs | $under |"
    # what the tool said (its own lines, the first 40; without any, the log's last 10), when it was not clean
    case $verdict in
    clean*) ;;
    *) { grep '^=========' "$log" || tail -n 10 "$log"; } | head -n 40 | sed 's/^/    /' ;;
    esac
    rm -f "$log"
done
overall=clean
[ $nskip -gt 0 ] && overall="clean ($nskip skipped)"
[ $nclean -eq 0 ] && overall="skipped: compute-sanitizer does not support this device here"
[ $failed -ne 0 ] && overall=FAIL
echo "  compute-sanitizer: $overall"
report "" "verdict: $overall"
exit $failed
