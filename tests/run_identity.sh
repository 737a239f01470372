#!/usr/bin/env bash
# tests/run_identity.sh - proves a refactor of `kiln run`: two kiln binaries print the same reports for a sample of variants.
# usage: tests/run_identity.sh BEFORE AFTER [OUTDIR]
# Runs every case below with both binaries and compares stdout, stderr and the exit status: the
# header, every output's max |err|, max rel and worst-of-tolerance, the verdict, the profile and the
# errors must be the same. Two intended differences of the generic runner are normalized away: the
# launch lines ("KERNEL: N blocks of T threads, emulated in X ms", one per kernel of a sequence,
# which replaced each family's own wording) and the output-name column's width (runs of spaces
# are squeezed). Every family, dtype mix, input kind, the residual/offset forms, hidden=launch,
# split-KV, both attention backward sequences, --twice and --profile, and errors users meet.
# Prints "run identity: N passed, N failed".
set -u
before=${1:?usage: tests/run_identity.sh BEFORE AFTER [OUTDIR]}
after=${2:?usage: tests/run_identity.sh BEFORE AFTER [OUTDIR]}
out=${3:-$(mktemp -d)}
mkdir -p "$out"
pass=0 fail=0

cases=(
    "layernorm x=bf16 w=f32 y=bf16 hidden=4096 --sm 75 --rows 8 --seed 1"
    "layernorm x=f16 w=f32 y=bf16 hidden=33 --sm 80 --rows 3"
    "layernorm x=f32 y=bf16 --sm 86 --rows 10 --hidden 1000 --input special --twice"
    "layernorm x=f32 hidden=4096 --sm 80 --rows 4 --input large-mean"
    "layernorm x=bf16 hidden=256 --sm 80 --rows 12 --input mixed --seed 3"
    "layernorm x=f16 hidden=100 weight=false bias=false --sm 75 --rows 3 --input constant"
    "layernorm x=bf16 hidden=1024 --sm 80 --rows 4 --profile"
    "layernorm x=bf16 hidden=launch residual=true r=f32 --hidden 300 --sm 80 --rows 3"
    "layernorm x=bf16 y=f32 offset=1 hidden=launch --hidden 300 --sm 80 --rows 3"
    "rmsnorm x=bf16 w=f32 y=bf16 hidden=768 --sm 75 --rows 5"
    "rmsnorm x=f16 hidden=512 residual=true --sm 90 --rows 7 --input mixed --eps 1e-6"
    "layernorm_bwd x=bf16 w=f32 hidden=1000 --sm 75 --rows 9"
    "layernorm_bwd x=bf16 w=f32 hidden=4096 --sm 80 --rows 16 --seed 1"
    "layernorm_bwd x=f32 hidden=launch --hidden 130 --sm 86 --rows 6 --input large-mean"
    "rmsnorm_bwd x=bf16 dx=f32 offset=1 hidden=768 --sm 75 --rows 9"
    "rmsnorm_bwd x=f16 hidden=launch residual=true --hidden 77 --sm 90 --rows 11 --twice"
    "rmsnorm_bwd x=bf16 w=f32 hidden=1024 --sm 70 --rows 8"
    "attention dtype=bf16 head_dim=64 causal=true --sm 80 --rows 33 --seq-k 70 --heads 4:2 --twice"
    "attention dtype=f16 head_dim=32 --sm 75 --rows 17 --batch 2"
    "attention dtype=f16 out=f32 head_dim=64 causal=true --sm 86 --rows 40 --seq-k 9"
    "attention dtype=f32 head_dim=48 --sm 90 --rows 9 --seq-k 21 --seed 4"
    "attention dtype=bf16 head_dim=64 causal=true --sm 70 --rows 40 --seq-k 50 --heads 2:1"
    "attention dtype=bf16 head_dim=64 splitkv=true --sm 80 --rows 1 --seq-k 300 --heads 4:1 --splits 6"
    "attention dtype=f16 head_dim=32 causal=true splitkv=true --sm 75 --rows 3 --seq-k 40 --heads 2:2 --splits 5 --twice"
    "attention dtype=f16 head_dim=96 causal=true --sm 80 --rows 70 --seq-k 90 --heads 1 --profile"
    "attention_bwd dtype=f16 head_dim=64 causal=true --sm 80 --rows 33 --seq-k 50 --heads 4:2 --twice"
    "attention_bwd dtype=bf16 grad=f32 head_dim=32 deterministic=true causal=true --sm 75 --rows 40 --seq-k 20 --heads 3:1"
    "attention_bwd dtype=f32 head_dim=96 --sm 90 --rows 17 --batch 2"
    "attention_bwd dtype=f16 head_dim=64 --sm 70 --rows 20 --heads 2:1"
    "layernorm x=f32 --sm 80 --rows 3"
    "layernorm x=f32 hidden=7 --sm 80 --rows 3 --hidden 8"
    "layernorm x=f8 --sm 80 --rows 3"
    "attention --sm 80 --rows 1 --splits 2"
    "attention --sm 80 --rows 4 --heads 3:2"
)

for i in "${!cases[@]}"; do
    read -r -a args <<<"${cases[$i]}"
    for side in before after; do
        bin=$before
        [ "$side" = after ] && bin=$after
        "$bin" run "${args[@]}" >"$out/$i.$side.out" 2>"$out/$i.$side.err"
        echo "exit $?" >>"$out/$i.$side.out"
        grep -v 'emulated in [0-9.]* ms\|^  [0-9]* splits, then ' "$out/$i.$side.out" | tr -s ' ' >"$out/$i.$side.norm"
    done
    if cmp -s "$out/$i.before.norm" "$out/$i.after.norm" && cmp -s "$out/$i.before.err" "$out/$i.after.err"; then
        pass=$((pass + 1))
    else
        fail=$((fail + 1))
        echo "DIFF kiln run ${cases[$i]}"
        diff "$out/$i.before.norm" "$out/$i.after.norm" | head -20
        diff "$out/$i.before.err" "$out/$i.after.err" | head -5
    fi
done
echo "run identity: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
