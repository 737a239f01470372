#!/usr/bin/env bash
# tests/lint/regen.sh - regenerates the lint corpus PTX (NAME.smXX.ptx) from the CUDA sources here with nvcc.
# The PTX is committed so that the tests need no nvcc; run this after changing a .cu file.
# Usage: tests/lint/regen.sh            (CUDA_HOME defaults to /usr/local/cuda)
set -euo pipefail
cd "$(dirname "$0")"
NVCC=${CUDA_HOME:-/usr/local/cuda}/bin/nvcc
[ -x "$NVCC" ] || { echo "regen.sh: no nvcc at $NVCC (set CUDA_HOME)" >&2; exit 2; }

# source       arch     extra nvcc flags
corpus=(
  "bf16_cvt     sm_80"
  "bf16_arith   sm_80"
  "bf16_arith   sm_90"
  "f16_minmax   sm_80"
  "cp_async     sm_80"
  "ldmatrix     sm_80"
  "mma_m16n8k8  sm_80"
  "mma_m16n8k16 sm_80"
  "redux        sm_80"
  "shfl_vote    sm_80"
  "ex2_f16      sm_80"
  "atomics      sm_90"
  "hopper       sm_90"
  "wgmma        sm_90a"
  "legacy_shfl  sm_75"
  "bf16_f16_cvt sm_90"
  "turing_clean sm_75"
  "multi_func   sm_80 -lineinfo"
  "cluster      sm_90"
  "wmma_f64     sm_80"
  "half_misc    sm_80"
  "async_sm90   sm_90"
  "blackwell    sm_100a"
)
# Only this script's own outputs are replaced: triton_*.ptx come from regen_triton.py, *.hand.ptx by hand.
for row in "${corpus[@]}"; do
  read -r src arch flags <<<"$row"
  rm -f "$src.${arch/_/}.ptx"
done
for row in "${corpus[@]}"; do
  read -r src arch flags <<<"$row"
  out="$src.${arch/_/}.ptx"
  # shellcheck disable=SC2086
  "$NVCC" -arch="$arch" -ptx -O3 $flags "$src.cu" -o "$out"
  echo "$out"
done
