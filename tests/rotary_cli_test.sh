#!/usr/bin/env bash
# tests/rotary_cli_test.sh - kiln run / list / emit / bundle for the rotary family: runs vs float64 in every mode, its launch metadata, bad input.
. "$(dirname "$0")/cli_lib.sh"

expect "run rotary bf16 NeoX" 0 "PASS: every output within tolerance" -- run rotary dtype=bf16 head_dim=128 --sm 80 --rows 37 --batch 3 --heads 11
expect "run rotary on sm_75, GPT-J, 32 of 64 dims" 0 "PASS" -- run rotary dtype=bf16 head_dim=64 rotary_dim=32 interleaved=true --sm 75 --rows 20
expect "run rotary varlen names the lengths" 0 "lengths 30,0,1," -- run rotary dtype=f16 head_dim=96 rotary_dim=24 varlen=true --sm 90 --rows 30 --batch 5 --heads 2
expect "run rotary in place, f32 tables, special inputs, twice" 0 "PASS" -- run rotary dtype=bf16 cs=f32 head_dim=80 rotary_dim=40 inplace=true --sm 86 --rows 9 --input special --twice
expect "run rotary in place checks x" 0 "  x     max |err|" -- run rotary dtype=f32 head_dim=64 inplace=true --sm 120 --rows 5
expect "run rotary --profile: global bytes" 0 "global memory" -- run rotary dtype=f16 head_dim=64 --sm 80 --rows 16 --heads 8 --profile
expect "list shows rotary" 0 "rotary - rotary embedding (RoPE)" -- list
expect "list --variants rotary" 0 "rotary dtype=bf16 cs=f32 head_dim=96 rotary_dim=24 interleaved=true inplace=true" -- list --variants rotary --sm 80
expect "emit: int32 index tensors in the metadata" 0 "kiln.meta param ptr i32 cu_seqlens" -- emit rotary dtype=f16 varlen=true --sm 80
expect "emit: offsets are optional" 0 "kiln.meta tensor offsets in? batch" -- emit rotary dtype=f16 --sm 80
expect "emit: in place has no out" 0 "kiln.meta tensor x inout batch seq heads 128 align=16" -- emit rotary dtype=bf16 inplace=true --sm 80
expect "rotary_dim above head_dim is refused" 2 "rotary_dim=256 exceeds head_dim=128 (rotary_dim <= head_dim)" -- emit rotary rotary_dim=256 --sm 80
expect "odd rotary_dim is refused" 2 "rotary_dim=33 must be even" -- emit rotary head_dim=64 rotary_dim=33 --sm 80
expect "odd head_dim is refused" 2 "head_dim=65 must be even" -- emit rotary head_dim=65 rotary_dim=64 --sm 80
expect "head_dim above 512 is refused" 2 "bad value '1024' for 'head_dim'" -- emit rotary head_dim=1024 --sm 80
expect "cs is a float dtype" 2 "bad value 'i32' for 'cs'; valid: f32, f16, bf16" -- emit rotary cs=i32 --sm 80
expect "bundle rotary --dtypes" 0 "" -- bundle rotary --dtypes bf16/f32 -o "$tmp/rot.kbundle"
expect "bundle-info: bf16 x with f32 tables" 0 "rotary dtype=bf16 cs=f32 head_dim=128" -- bundle-info "$tmp/rot.kbundle"
finish rotary_cli
