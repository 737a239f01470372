#!/usr/bin/env bash
# tests/emu_run_test.sh - `kiln run`: kernels on the emulator pass their reference, bad input exits 2.
set -u
. "$(dirname "$0")/cli_lib.sh"

expect "run help" 0 "usage: kiln run FAMILY" -- run --help
expect "run bf16 on sm_75" 0 "PASS: every output within tolerance" -- run layernorm x=bf16 hidden=768 --sm 75 --rows 64
expect "run prints y, mean, rstd" 0 "rstd  max |err|" -- run layernorm x=f16 w=f32 y=bf16 hidden=33 --sm 80 --rows 3
expect "run launch-time hidden, special inputs, twice" 0 "PASS" -- \
    run layernorm x=f32 y=bf16 --sm 86 --rows 10 --hidden 1000 --input special --twice
expect "run --race (shared memory by happens-before)" 0 "hidden=4096 weight=true bias=true  sm_80  2 rows x 4096  random inputs  seed 1  (race check)" -- run layernorm x=bf16 hidden=4096 --sm 80 --rows 2 --race
expect "run options before the spec" 0 "PASS" -- run --sm 90 --rows 5 --seed 7 layernorm x=bf16 hidden=7
expect "run on sm_90a (named so)" 0 "hidden=64 weight=true bias=true  sm_90a  4 rows" -- \
    run layernorm x=bf16 hidden=64 --sm 90a --rows 4
expect "run large-mean inputs" 0 "PASS" -- run layernorm x=f32 hidden=4096 --sm 80 --rows 4 --input large-mean
expect "run without weight and bias" 0 "PASS" -- run layernorm x=f16 hidden=100 weight=false bias=false --sm 75 --rows 3
# sm_70 (Volta, in the SM table; CUDA 13's ptxas no longer builds for it): the SIMT paths on the emulator
expect "run bf16 on sm_70" 0 "PASS" -- run layernorm x=bf16 w=f32 hidden=4096 --sm 70 --rows 8
expect "run rmsnorm_bwd on sm_70" 0 "PASS" -- run rmsnorm_bwd x=bf16 w=f32 hidden=1024 --sm 70 --rows 8
expect "run attention on sm_70" 0 "PASS" -- run attention dtype=bf16 head_dim=64 causal=true --sm 70 --rows 40 --seq-k 50 --heads 2:1
expect "run attention_bwd on sm_70" 0 "PASS" -- run attention_bwd dtype=f16 head_dim=64 --sm 70 --rows 20 --heads 2:1

expect "run missing --sm" 2 "missing --sm" -- run layernorm x=f32 hidden=7 --rows 3
expect "run missing --rows" 2 "missing --rows" -- run layernorm x=f32 hidden=7 --sm 80
expect "run missing family" 2 "missing kernel family" -- run --sm 80 --rows 3
expect "run unknown family" 2 "no reference for family 'groupnorm'; valid: attention, attention_bwd, attention_combine, layernorm" -- run groupnorm --sm 80 --rows 3
expect "run bad spec" 2 "bad value 'f8' for 'x'" -- run layernorm x=f8 --sm 80 --rows 3
expect "run bad sm" 2 "unsupported SM '61'" -- run layernorm x=f32 hidden=7 --sm 61 --rows 3
expect "run rows 0" 2 "bad --rows '0'" -- run layernorm x=f32 hidden=7 --sm 80 --rows 0
expect "run bad input kind" 2 "bad --input 'noise'; valid: random, large-mean" -- \
    run layernorm x=f32 hidden=7 --sm 80 --rows 3 --input noise
expect "run launch-time needs --hidden" 2 "give the row length with --hidden" -- run layernorm x=f32 --sm 80 --rows 3
expect "run --hidden contradicts the spec" 2 "contradicts the spec's hidden=7" -- \
    run layernorm x=f32 hidden=7 --sm 80 --rows 3 --hidden 8
expect "run bad eps" 2 "bad --eps '-1'" -- run layernorm x=f32 hidden=7 --sm 80 --rows 3 --eps -1
expect "run unknown option" 2 "see 'kiln run --help'" -- run layernorm x=f32 hidden=7 --sm 80 --rows 3 --fast

# the same seed gives the same numbers, a different seed different inputs
"$KILN" run layernorm x=bf16 hidden=100 --sm 80 --rows 8 --seed 5 >"$tmp/a" 2>&1
"$KILN" run layernorm x=bf16 hidden=100 --sm 75 --rows 8 --seed 5 >"$tmp/b" 2>&1
"$KILN" run layernorm x=bf16 hidden=100 --sm 80 --rows 8 --seed 6 >"$tmp/c" 2>&1
grep -v "emulated in\|sm_" "$tmp/a" >"$tmp/a2"; grep -v "emulated in\|sm_" "$tmp/b" >"$tmp/b2"
grep -v "emulated in\|sm_" "$tmp/c" >"$tmp/c2"
if cmp -s "$tmp/a2" "$tmp/b2" && ! cmp -s "$tmp/a2" "$tmp/c2"; then ok "run deterministic"; else
    bad "run deterministic" "$(diff "$tmp/a2" "$tmp/b2"; diff "$tmp/a2" "$tmp/c2" | head -3)"; fi

finish emu_run
