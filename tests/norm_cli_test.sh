#!/usr/bin/env bash
# tests/norm_cli_test.sh - kiln run / list / emit for the norm families: pass, residual forms, backward with its second kernel, bad input.
. "$(dirname "$0")/cli_lib.sh"

expect "run rmsnorm bf16" 0 "PASS" -- run rmsnorm x=bf16 w=f32 y=bf16 hidden=768 --sm 75 --rows 5
expect "run layernorm residual (launch form)" 0 "h " -- run layernorm x=bf16 hidden=launch residual=true r=f32 --hidden 300 --sm 80 --rows 3
expect "run layernorm_bwd runs norm_reduce" 0 "  kiln_norm_reduce_f32: 64 blocks of 256 threads" -- run layernorm_bwd x=bf16 w=f32 hidden=1000 --sm 75 --rows 9
# norm_reduce on its own: column sums of a drawn workspace (templates/norm_reduce.ref.c)
expect "run norm_reduce alone" 0 "PASS: every output within tolerance" -- run norm_reduce --sm 80 --rows 70 --hidden 300
expect "run norm_reduce bf16, NaN/Inf partials" 0 "PASS" -- run norm_reduce w=bf16 --sm 75 --rows 9 --hidden 33 --input special
expect "run norm_reduce f16 sums past 65504 give inf" 0 "PASS" -- run norm_reduce w=f16 --sm 90 --rows 300 --hidden 64 --input large-mean
expect "run norm_reduce needs --hidden" 2 "give it with --hidden H" -- run norm_reduce --sm 80 --rows 3
expect "run rmsnorm_bwd residual, twice" 0 "PASS" -- run rmsnorm_bwd x=f16 hidden=launch residual=true --hidden 77 --sm 90 --rows 11 --twice
expect "list shows rmsnorm_bwd" 0 "rmsnorm_bwd - RMSNorm backward" -- list
expect "list shows norm_reduce" 0 "norm_reduce - column sums" -- list
expect "emit: backward metadata names the workspace" 0 "kiln.meta workspace 2 1" -- emit layernorm_bwd x=bf16 hidden=4096 --sm 80
expect "emit: backward metadata names its second kernel" 0 "kiln.meta then norm_reduce w=bf16" -- emit layernorm_bwd x=bf16 hidden=4096 --sm 80
expect "r without residual is refused" 2 "needs residual=true" -- emit rmsnorm x=f16 r=f32 --sm 80
expect "rmsnorm has no bias key" 2 "unknown parameter 'bias'" -- emit rmsnorm x=f16 bias=true --sm 80
expect "hidden above 16384 is refused" 2 "bad value '20000' for 'hidden'" -- emit layernorm_bwd hidden=20000 --sm 80
expect "run layernorm offset=1 (zero-centered weights)" 0 "PASS" -- run layernorm x=bf16 y=f32 offset=1 hidden=launch --hidden 300 --sm 80 --rows 3
expect "run rmsnorm_bwd offset=1" 0 "PASS" -- run rmsnorm_bwd x=bf16 dx=f32 offset=1 hidden=768 --sm 75 --rows 9
expect "list shows offset" 0 "offset        int   default 0            1: zero-centered weights" -- list
expect "offset=1 needs a weight" 2 "offset=1 needs weight=true" -- emit rmsnorm x=f16 weight=false offset=1 --sm 80
expect "offset is 0 or 1" 2 "bad value '2' for 'offset'; valid: 0, 1" -- emit layernorm_bwd offset=2 --sm 80
# the two-block row (docs/norms.md): the row statistics kernel before it, three kernels in all
expect "run layernorm_bwd form=split2 runs stats, dx, norm_reduce" 0 "_stats: 9 blocks of 256 threads" -- run layernorm_bwd x=bf16 hidden=4096 form=split2 --sm 75 --rows 9
expect "emit: split form names the kernel before it" 0 "kiln.meta before rmsnorm_bwd x=f32 w=f32 dy=f32 dx=f32 hidden=16384 weight=true kernel=stats" -- emit rmsnorm_bwd x=f32 hidden=16384 residual=true --sm 80
expect "kernel=stats takes no residual" 2 "kernel=stats (the split forms' row statistics) takes a fixed hidden" -- emit layernorm_bwd x=f32 hidden=4096 kernel=stats residual=true --sm 80
expect "split form needs whole vectors per range" 2 "hidden 100 does not split into 4 ranges" -- emit layernorm_bwd x=f32 hidden=100 form=split4 --sm 80
finish norm_cli
