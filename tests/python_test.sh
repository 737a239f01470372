#!/usr/bin/env bash
# tests/python_test.sh - runs the Python package's pytest suite (python/tests) and prints
# "python: N passed, N failed, N skipped" parsed from pytest's own summary.
# Needs python3 with pytest, numpy and ml_dtypes (.ci/run installs them); without them it skips, saying why.
# kiln.torch's tests need torch (make setup installs the pinned one): they skip without it, except under CI=true.
# The sanitizer pass (O=build/san) runs the same tests against the ASan/UBSan libraries with the sanitizer
# runtimes preloaded into python, leaves out the wheel install test (the plain pass covers it) and runs every
# eighth test (KILN_TEST_SAMPLE=8, conftest.py; every fourth until wave 25).
set -u
: "${O:=build}" "${KILN:=bin/kiln}"
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
skip() { echo "python tests skipped: $1"; echo "python: 0 passed, 0 failed, 1 skipped"; exit 0; }
command -v "$PY" >/dev/null 2>&1 || skip "no $PY on PATH"
missing=$("$PY" - <<'PYEOF'
import importlib.util
print(" ".join(m for m in ("pytest", "numpy", "ml_dtypes") if importlib.util.find_spec(m) is None))
PYEOF
)
[ -n "$missing" ] && skip "python3 lacks $missing (pip install pytest numpy ml_dtypes)"
# kiln.torch's tests skip where torch is missing; CI (CI=true) runs them against real torch, so there it is a failure
torch_v=$("$PY" -c "import torch; print(torch.__version__)" 2>/dev/null)
if [ -n "$torch_v" ]; then echo "python: kiln.torch tested against torch $torch_v"
elif [ "${CI:-}" = true ]; then
    echo "python: CI tests kiln.torch against real torch, and $PY cannot import torch (make setup installs it)"
    echo "python: 0 passed, 1 failed, 0 skipped"
    exit 1
fi
export KILN O PYTHONDONTWRITEBYTECODE=1
if [ "$O" != build ]; then
    # sanitizer pass: the instrumented libraries, with the sanitizer runtimes loaded first into python
    [ -e "$O/lib/libkiln.so.0" ] || skip "no $O/lib/libkiln.so.0 (run make SAN=1 first)"
    asan=$(${CC:-cc} -print-file-name=libasan.so) ubsan=$(${CC:-cc} -print-file-name=libubsan.so)
    [ -e "$asan" ] || skip "no libasan.so to preload into python"
    export KILN_LIB_DIR="$PWD/$O/lib" KILN_TEST_INSTALL=0 LD_PRELOAD="$asan $ubsan"
    export ASAN_OPTIONS="detect_leaks=0:${ASAN_OPTIONS:-}"
    # every eighth test (conftest.py's KILN_TEST_SAMPLE; the plain pass runs them all)
    export KILN_TEST_SAMPLE=${KILN_TEST_SAMPLE:-8}
    echo "python: sanitizer pass, one test in ${KILN_TEST_SAMPLE} (KILN_TEST_SAMPLE; the plain pass runs every test)"
fi
log=$(mktemp)
"$PY" -m pytest -q -rs -p no:cacheprovider python/tests 2>&1 | tee "$log"
summary=$(grep -E '^(=+ )?[0-9]+ (passed|failed|skipped|errors?)' "$log" | tail -n 1)
rm -f "$log"
count() { grep -oE "[0-9]+ $1" <<<"$summary" | grep -oE '^[0-9]+' | head -n 1; }
p=$(count passed); f=$(count failed); s=$(count skipped); e=$(count 'errors?')
p=${p:-0} f=$((${f:-0} + ${e:-0})) s=${s:-0}
[ -z "$summary" ] && f=$((f + 1)) && echo "pytest printed no summary"
echo "python: $p passed, $f failed, $s skipped"
[ "$f" -eq 0 ]
