#!/usr/bin/env bash
# run - the GPU check kit's one command (built by `make gpu-kit` as build/gpu-kit/run; docs/gpu-kit.md).
# Proves every kernel in the kit on this machine's GPU (AOT bundle: cubin + PTX; JIT: generated here),
# then times LayerNorm and attention against copy bandwidth, the mma.sync peak, torch, Triton and SDPA.
# On a 9.0 device also the sm_90a wgmma attention (the arch bundle kit_90a.kbundle.gz: forward, split-KV, paged, backward),
# and compute-sanitizer's memcheck, racecheck and synccheck over those kernels (`sanitize`); others skip them.
# Output: a log, CSVs, PNG plots and summary.md in $KIT_OUT (else $OUT, else ./gpu-kit-out).
# Environment: KIT_QUICK=1 small shapes (the fake-driver test); KIT_NO_SPEED=1 correctness only; KIT_NO_SANITIZER=1 no
# compute-sanitizer, KIT_SANITIZER_ONLY=1 that step alone (KIT_SANITIZER, KIT_SANITIZER_TIMEOUT, KIT_SANITIZER_TOOLS,
# KIT_CUDA_DIRS: see `sanitize`);
# KILN_CUDA_DRIVER another libcuda.so.1. Exit status: 0 every check passed (and every sanitizer tool clean or skipped),
# 1 a check failed or a sanitizer tool found errors, 2 the kit broke.
set -u
KIT=$(cd "$(dirname "$0")" && pwd)
OUTDIR=${KIT_OUT:-${OUT:-$PWD/gpu-kit-out}}
mkdir -p "$OUTDIR"
rm -f "$OUTDIR"/{kit.log,check_aot.csv,check_jit.csv,jit_timing.csv,bench.csv,summary.md,layernorm.png,attention.png}
QUICK=""
[ "${KIT_QUICK:-0}" = 1 ] && QUICK=--quick
WORK=$(mktemp -d /tmp/kiln-kit-XXXXXX)
trap 'rm -rf "$WORK"' EXIT
exec > >(tee "$OUTDIR/kit.log") 2>&1
T0=$SECONDS
step() { echo; echo "== $* ($((SECONDS - T0)) s)"; }

# compute-sanitizer over every Hopper kernel the kit runs: the sm_90a cases, small (the quick run's own cases when they are
# there), in the arch bundle's cubin mode; sets rc_san and writes SANREPORT (its markdown section, a `verdict:` line last)
rc_san=0
SANREPORT=$WORK/sanitizer.md
sanitizer_step() {
    step "compute-sanitizer: memcheck, racecheck, synccheck over the sm_90a kernels (small cases, mode 'cubin sm_90a')"
    if [ "${KIT_NO_SANITIZER:-0}" = 1 ]; then
        echo "  skipped: KIT_NO_SANITIZER=1"
        printf '## compute-sanitizer (the sm_90a kernels)\n\nverdict: skipped: KIT_NO_SANITIZER=1\n' >"$SANREPORT"
    elif [ "$DEVSM" != 90 ]; then
        echo "  skipped: no sm_90a kernel runs on this device (sm_$DEVSM)"
        printf '## compute-sanitizer (the sm_90a kernels)\n\nverdict: skipped: no sm_90a kernel runs on this device (sm_%s)\n' \
            "$DEVSM" >"$SANREPORT"
    else
        local cases=$WORK/cases
        if [ -z "$QUICK" ] || [ ! -d "$cases" ]; then
            cases=$WORK/sancases
            "$WORK/kiln-kit" prepare "$cases" --sm 90 --arch-only ${QUICK:---small} -j "$(nproc)" >"$WORK/prepare_san.log" 2>&1 ||
                { cat "$WORK/prepare_san.log"; echo "run: preparing the sanitizer's cases failed"; exit 2; }
            tail -n 1 "$WORK/prepare_san.log"
        fi
        "$KIT/sanitize" "$KIT/kiln-gpucheck" "$BUNDLE" "$ARCHBUNDLE" "$cases" "$SANREPORT"
        rc_san=$?
    fi
}


step "machine"
date -u '+date: %Y-%m-%d %H:%M:%S UTC'
if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total,clocks.sm,clocks.max.sm --format=csv 2>&1 | sed 's/^/  /'
fi
echo "  cores: $(nproc)"
# libkiln (generator + emulator, LLVM inside) and what it needs, unpacked beside kiln-kit ($ORIGIN/lib)
mkdir -p "$WORK/lib"
cp "$KIT"/lib/*.so.* "$WORK/lib/" 2>/dev/null
rm -f "$WORK"/lib/*.gz
if ! gzip -dc "$KIT/lib/libkiln.so.0.gz" > "$WORK/lib/libkiln.so.0" 2>/dev/null; then
    python3 -c 'import gzip,shutil,sys; shutil.copyfileobj(gzip.open(sys.argv[1]), open(sys.argv[2], "wb"))' \
        "$KIT/lib/libkiln.so.0.gz" "$WORK/lib/libkiln.so.0" || { echo "run: cannot unpack lib/libkiln.so.0.gz"; exit 2; }
fi
cp "$KIT/kiln-kit" "$WORK/kiln-kit" && chmod +x "$WORK/kiln-kit"
BUNDLE=$WORK/kit.kbundle
gzip -dc "$KIT/kit.kbundle.gz" > "$BUNDLE" 2>/dev/null ||
    python3 -c 'import gzip,shutil,sys; shutil.copyfileobj(gzip.open(sys.argv[1]), open(sys.argv[2], "wb"))' \
        "$KIT/kit.kbundle.gz" "$BUNDLE" || { echo "run: cannot unpack kit.kbundle.gz"; exit 2; }
# the arch bundle (sm_90a: the wgmma attention rows), checked and timed on a 9.0 device only
ARCHBUNDLE=$WORK/kit_90a.kbundle
gzip -dc "$KIT/kit_90a.kbundle.gz" > "$ARCHBUNDLE" 2>/dev/null ||
    python3 -c 'import gzip,shutil,sys; shutil.copyfileobj(gzip.open(sys.argv[1]), open(sys.argv[2], "wb"))' \
        "$KIT/kit_90a.kbundle.gz" "$ARCHBUNDLE" || { echo "run: cannot unpack kit_90a.kbundle.gz"; exit 2; }
TFBUNDLE=$WORK/transformer.kbundle
gzip -dc "$KIT/transformer.kbundle.gz" > "$TFBUNDLE" 2>/dev/null ||
    python3 -c 'import gzip,shutil,sys; shutil.copyfileobj(gzip.open(sys.argv[1]), open(sys.argv[2], "wb"))' \
        "$KIT/transformer.kbundle.gz" "$TFBUNDLE" || { echo "run: cannot unpack transformer.kbundle.gz"; exit 2; }
DEV=$("$KIT/kiln-gpucheck" device) || { echo "run: no usable CUDA device"; exit 2; }
SM=${DEV%% *}
SMS=$(sed -n 's/.*, \([0-9]*\) SMs,.*/\1/p' <<<"$DEV")
DEVSM=$(sed -n 's/.*(sm_\([0-9]*\), [0-9]* SMs,.*/\1/p' <<<"$DEV") # the device's own SM (SM: the kernels' for it)
echo "  device: ${DEV#* } -> kernels for sm_$SM"

# Driver JIT for real: no PTX compile cache, so every PTX load below is compiled now.
export CUDA_CACHE_DISABLE=1

# KIT_SANITIZER_ONLY=1: the compute-sanitizer step alone (the second half of a run split to fit a time limit)
if [ "${KIT_SANITIZER_ONLY:-0}" = 1 ]; then
    sanitizer_step
    cp "$SANREPORT" "$OUTDIR/summary.md"
    echo
    echo "GPU KIT: compute-sanitizer only (KIT_SANITIZER_ONLY=1): $(sed -n 's/^verdict: //p' "$SANREPORT" | tail -n 1) in $((SECONDS - T0)) s"
    exit $rc_san
fi

step "check cases: inputs, emulator runs (sm_$SM and sm_75 modules), float64 references"
"$WORK/kiln-kit" prepare "$WORK/cases" --sm "$SM" --sms "${SMS:-0}" -j "$(nproc)" $QUICK > "$WORK/prepare.log" 2>&1
rc_prep=$?
tail -n 1 "$WORK/prepare.log"
[ $rc_prep -eq 0 ] || { cat "$WORK/prepare.log"; echo "run: preparing the cases failed"; exit 2; }

step "AOT path: bundle payloads through the generic launch (libkiln_rt only)"
"$KIT/kiln-gpucheck" check "$BUNDLE" "$WORK/cases" --csv "$OUTDIR/check_aot.csv" --arch-bundle "$ARCHBUNDLE"
rc_aot=$?

step "JIT path: spec -> PTX -> cuModuleLoadData -> launch in one process"
"$WORK/kiln-kit" jit "$WORK/cases" --csv "$OUTDIR/check_jit.csv" --timing-csv "$OUTDIR/jit_timing.csv"
rc_jit=$?

step "model load: the transformer set's PTX through kiln_rt_prepare (no disk cache; cold and warm cache of the driver's cubins)"
"$KIT/kiln-gpucheck" load "$TFBUNDLE"
rc_load=$?

rc_speed=0
if [ "${KIT_NO_SPEED:-0}" != 1 ]; then
    step "speed: kiln (C side)"
    unset CUDA_CACHE_DISABLE
    "$KIT/kiln-gpucheck" bench "$BUNDLE" --csv "$OUTDIR/bench.csv" $QUICK --arch-bundle "$ARCHBUNDLE"
    rc_speed=$?
    step "speed: peers (torch layer_norm, Triton LayerNorm, SDPA flash) on the same shapes"
    if python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' >/dev/null 2>&1; then
        PYTHONPATH="$KIT/python${PYTHONPATH:+:$PYTHONPATH}" KILN_LIB_DIR="$WORK/lib" MPLBACKEND=Agg \
            python3 -u "$KIT/peers.py" --kit "$KIT" --bundle "$BUNDLE" --csv "$OUTDIR/bench.csv" --out "$OUTDIR" $QUICK || rc_speed=$?
    else
        echo "  peers skipped: no python3 with torch and a CUDA device here; C-side figures only"
        python3 -u "$KIT/peers.py" --kit "$KIT" --bundle "$BUNDLE" --csv "$OUTDIR/bench.csv" --out "$OUTDIR" --no-peers $QUICK 2>&1 ||
            echo "  (no python3 for the table either: see bench.csv)"
    fi
fi

rc_torch=0
step "PyTorch: kiln.torch's ops (norms, residual add, attention; forward and backward) against torch"
if python3 -c 'import torch, pytest, sys; sys.exit(0 if torch.cuda.is_available() else 1)' >/dev/null 2>&1; then
    # JIT (libkiln unpacked above) into a fresh disk cache; gradients vs float64 torch, repeat bit for bit
    KILN_CACHE_DIR="$WORK/torch-cache" PYTHONPATH="$KIT/python${PYTHONPATH:+:$PYTHONPATH}" KILN_LIB_DIR="$WORK/lib" \
        python3 -m pytest -q -p no:cacheprovider "$KIT/python/tests" 2>&1 | tail -n 25
    rc_torch=${PIPESTATUS[0]}
    # transformers models (random weights from configs): kiln vs eager/sdpa, and tokens/s (models.md)
    if python3 -c 'import transformers' >/dev/null 2>&1; then
        KILN_CACHE_DIR="$WORK/torch-cache" PYTHONPATH="$KIT/python${PYTHONPATH:+:$PYTHONPATH}" KILN_LIB_DIR="$WORK/lib" \
            python3 -u "$KIT/models.py" --out "$OUTDIR" $QUICK || rc_torch=1
    else
        echo "  models.py skipped: python3 has no transformers (pip install transformers to run the model rows)"
    fi
else
    echo "  skipped: no python3 with torch, pytest and a CUDA device here"
fi

sanitizer_step

step "summary"
summarize() { # CSV of checks -> one line per family x mode
    awk -F, 'NR > 1 { k = $2 " | " $3; n[k]++; if ($18 != "pass") f[k]++; cases[k, $1] = 1 }
             END { for (k in n) printf "  %-34s %5d outputs checked, %4d failed\n", k, n[k], f[k] + 0 }' "$1" | sort
}
echo "correctness (family | payload): every output vs float64 (ulps of its dtype) and vs the emulator"
[ -f "$OUTDIR/check_aot.csv" ] && summarize "$OUTDIR/check_aot.csv"
[ -f "$OUTDIR/check_jit.csv" ] && summarize "$OUTDIR/check_jit.csv"
fails=$(cat "$OUTDIR"/check_*.csv 2>/dev/null | awk -F, '$1 != "case" && $18 != "pass"' | wc -l)
if [ "$fails" -gt 0 ]; then
    echo "failing outputs (first 20):"
    cat "$OUTDIR"/check_*.csv | awk -F, '$1 != "case" && $18 != "pass" { printf "  %s [%s] %s: %s ulps (tol %s), %s bad, %s differ from emulator; %s\n", $1, $3, $7, $10, $12, $13, $14, $18 }' | head -20
fi
[ -f "$OUTDIR/summary.md" ] && sed -n '/^## headline/,/^## speed/p' "$OUTDIR/summary.md" | grep -v '^## speed' &&
    echo "(full tables: summary.md; plots: layernorm.png, attention.png; every figure: bench.csv)"
# the sanitizer's verdicts: the last section of summary.md, and here
if [ -f "$SANREPORT" ]; then
    { [ -s "$OUTDIR/summary.md" ] && echo; cat "$SANREPORT"; } >>"$OUTDIR/summary.md"
    sed 's/^/  /' "$SANREPORT"
fi
san=$(sed -n 's/^verdict: //p' "$SANREPORT" 2>/dev/null | tail -n 1)
[ $rc_san -eq 2 ] && san="broken (exit 2)"
verdict=PASS
[ $rc_aot -ne 0 ] || [ $rc_jit -ne 0 ] || [ $rc_load -ne 0 ] && verdict=FAIL
echo
[ $rc_torch -ne 0 ] && verdict=FAIL
[ $rc_san -ne 0 ] && verdict=FAIL
echo "GPU KIT: correctness $verdict (AOT exit $rc_aot, JIT exit $rc_jit, load exit $rc_load, torch exit $rc_torch, compute-sanitizer $san; speed exit $rc_speed) in $((SECONDS - T0)) s"
[ "$verdict" = PASS ] || exit 1
[ $rc_speed -eq 0 ] || exit 2
exit 0
