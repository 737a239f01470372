#!/usr/bin/env bash
# tests/attention_roll_test.sh - where the attention forward's S = Q K^T k-steps are one loop (templates/attention.lua
# ROLL_QK, mma_scores_rolled; docs/jit.md "Wave 22"), judged by the PTX's mma.sync count: the rule's kernels carry one
# k-step of S per key-tile loop body, the others every k-step (sm_90/100/120, d256, dropout, the score keys, padded
# head dims and v_head_dim: ptxas gave more SASS instructions there, so they must stay unrolled).
set -u
. "$(dirname "$0")/cli_lib.sh"

mmas() { # NAME WANT SM SPEC...: the kernel's PTX holds WANT mma.sync instructions
    local name=$1 want=$2 sm=$3
    shift 3
    if ! "$KILN" emit "$@" --sm "$sm" -o "$tmp/k.ptx" 2>"$tmp/err"; then bad "$name" "$(cat "$tmp/err")"; return; fi
    local got
    got=$(grep -c 'mma\.sync' "$tmp/k.ptx")
    if [ "$got" = "$want" ]; then ok "$name"; else bad "$name" "$got mma.sync, want $want"; fi
}

# d128 (one m-tile, 64-key tiles; two loop bodies: unmasked and masked trips): S 8 k-steps x 8 mma, P V 4 x 16
for sm in 80 86 89; do
    mmas "bf16 d128 causal sm_$sm: S rolled" 144 "$sm" attention dtype=bf16 head_dim=128 causal=true
done
mmas "f16 d64 sm_80 (two m-tiles): S rolled" 160 80 attention dtype=f16 head_dim=64
mmas "f16 d32 causal split-KV sm_86: S rolled" 48 86 attention dtype=f16 head_dim=32 causal=true splitkv=true
for sm in 90 100 120; do
    mmas "bf16 d128 causal sm_$sm: unrolled" 256 "$sm" attention dtype=bf16 head_dim=128 causal=true
done
mmas "bf16 d128 causal dropout sm_80: unrolled" 256 80 attention dtype=bf16 head_dim=128 causal=true dropout=true
mmas "f16 d256 sm_80: unrolled" 256 80 attention dtype=f16 head_dim=256
mmas "f16 d40 (padded to 64) sm_80: unrolled" 256 80 attention dtype=f16 head_dim=40
mmas "f16 d64 v_head_dim=128 sm_86: unrolled" 256 86 attention dtype=f16 head_dim=64 v_head_dim=128
finish attention_roll
