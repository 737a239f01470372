#!/usr/bin/env bash
# tests/attention_cli_test.sh - `kiln emit attention` and `kiln run attention`: paths per target, emulator
# passes, bad input exits 2 with one line.
set -u
. "$(dirname "$0")/cli_lib.sh"

# The path follows the target's capabilities: tensor cores where they exist for the dtype.
expect "sm_80 bf16 uses mma.m16n8k16 + ldmatrix + cp.async" 0 "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" -- \
    emit attention dtype=bf16 head_dim=128 causal=true --sm 80
grep -q "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16" "$tmp/out" && grep -q "cp.async.cg.shared.global" "$tmp/out" \
    && ok "sm_80: ldmatrix .trans and cp.async" || bad "sm_80: ldmatrix .trans and cp.async" "missing in the PTX"
expect "sm_75 f16 uses mma.m16n8k8" 0 "mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32" -- \
    emit attention dtype=f16 head_dim=64 --sm 75
grep -q "cp.async" "$tmp/out" && bad "sm_75: no cp.async" "cp.async in sm_75 PTX" || ok "sm_75: no cp.async"
grep -q "^\.version 6\.5" "$tmp/out" && ok "sm_75 mma raises .version to 6.5" || bad "sm_75 .version" "$(grep '^\.version' "$tmp/out")"
expect "sm_75 bf16 path=simt runs SIMT" 0 "fma.rn.f32" -- emit attention dtype=bf16 head_dim=64 path=simt --sm 75
grep -qE "mma|\.bf16" "$tmp/out" && bad "sm_75 bf16 SIMT: no mma, no bf16" "found in PTX" || ok "sm_75 bf16 SIMT: no mma, no bf16"
expect "sm_75 bf16 path=auto: f16 m16n8k8 (power-of-two scaling)" 0 "mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32" -- \
    emit attention dtype=bf16 head_dim=64 --sm 75
grep -q "\.bf16" "$tmp/out" && bad "sm_75 bf16 auto: no bf16" "found in PTX" || ok "sm_75 bf16 auto: no bf16"
expect "sm_75 bf16 path=auto with varlen=true: f16 m16n8k8 (power-of-two scaling)" 0 "mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32" -- \
    emit attention dtype=bf16 head_dim=64 varlen=true --sm 75
grep -q "\.bf16" "$tmp/out" && bad "sm_75 bf16 auto varlen: no bf16" "found in PTX" || ok "sm_75 bf16 auto varlen: no bf16"
for key in dropout=true paged=true; do
    expect "sm_75 bf16 path=auto with $key: f16 m16n8k8 (power-of-two scaling)" 0 "mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32" -- \
        emit attention dtype=bf16 head_dim=64 $key --sm 75
    grep -q "\.bf16" "$tmp/out" && bad "sm_75 bf16 auto $key: no bf16" "found in PTX" || ok "sm_75 bf16 auto $key: no bf16"
done
# head_dim 136-256 (wave 23): bf16 on the scaled f16 mma plain, causal, with the mask keys and paged; (wave 24) varlen,
# split-KV, dropout, the append and v_head_dim; (wave 25) split-KV with a window and ALiBi under a causal mask at 256 (padded
# it stays SIMT); rotary stays SIMT
for key in "head_dim=256" "head_dim=160 causal=true window=true softcap=true" "head_dim=256 causal=true varlen=true" \
    "head_dim=200 causal=top_left window=true alibi=true varlen=true" "head_dim=256 causal=true splitkv=true" \
    "head_dim=256 dropout=true" "head_dim=256 causal=true paged=true append=true" "head_dim=192 v_head_dim=128" \
    "head_dim=256 causal=true window=true alibi=true splitkv=true" \
    "head_dim=256 causal=top_left window=true softcap=true alibi=true splitkv=true paged=true"; do
    expect "sm_75 bf16 path=auto with $key: f16 m16n8k8 (power-of-two scaling)" 0 "mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32" -- \
        emit attention dtype=bf16 $key --sm 75
    grep -q "\.bf16" "$tmp/out" && bad "sm_75 bf16 auto $key: no bf16" "found in PTX" || ok "sm_75 bf16 auto $key: no bf16"
done
for key in "head_dim=256 paged=true append=true rotary=neox" "head_dim=200 causal=true window=true alibi=true splitkv=true"; do
    expect "sm_75 bf16 path=auto with $key: SIMT (the scaled path spills there)" 0 "fma.rn.f32" -- \
        emit attention dtype=bf16 $key --sm 75
    grep -q "mma" "$tmp/out" && bad "sm_75 bf16 auto with $key: no mma" "found in PTX" || ok "sm_75 bf16 auto with $key: no mma"
done
expect "f32 runs SIMT" 0 "fma.rn.f32" -- emit attention dtype=f32 head_dim=32 --sm 90
grep -q "mma" "$tmp/out" && bad "f32: no mma" "mma in PTX" || ok "f32: no mma"

expect "run mma bf16 sm_80, GQA, seq_q != seq_k, twice" 0 "PASS: every output within tolerance" -- \
    run attention dtype=bf16 head_dim=64 causal=true --sm 80 --rows 33 --seq-k 70 --heads 4:2 --twice
expect "run sm_75 f16 (m16n8k8)" 0 "PASS" -- run attention dtype=f16 head_dim=32 --sm 75 --rows 17 --batch 2
expect "run SIMT bf16 sm_75, MQA" 0 "PASS" -- run attention dtype=bf16 head_dim=96 path=simt --sm 75 --rows 20 --heads 3:1
expect "run auto bf16 sm_75 (f16-scaled mma), MQA" 0 "PASS" -- run attention dtype=bf16 head_dim=64 --sm 75 --rows 20 --heads 3:1
expect "run f32 out from f16" 0 "PASS" -- run attention dtype=f16 out=f32 head_dim=64 causal=true --sm 86 --rows 40 --seq-k 9

expect "run --profile: 0 bank conflicts (mma, d96)" 0 "bank conflicts       0 (hot loop 0)" -- \
    run attention dtype=f16 head_dim=96 causal=true --sm 80 --rows 70 --seq-k 90 --heads 1 --profile
grep -q "mma : other          1 : " "$tmp/out" && grep -q "^    ldmatrix " "$tmp/out" \
    && ok "--profile prints the mma : other ratio and the shared-memory table" \
    || bad "--profile output" "$(head -c 400 "$tmp/out")"
expect "run --profile works for layernorm" 0 "bank conflicts       0" -- \
    run layernorm x=bf16 hidden=1024 --sm 80 --rows 4 --profile

# Split-KV decoding: the split kernel, then the combine kernel its metadata names.
expect "run split-KV bf16 sm_80, GQA 4:1, one query" 0 "PASS: every output within tolerance" -- \
    run attention dtype=bf16 head_dim=64 splitkv=true --sm 80 --rows 1 --seq-k 300 --heads 4:1 --splits 6
grep -q "^  kiln_attention_bf16_bf16_64_false_auto_true: 6 blocks of 128 threads" "$tmp/out" &&
    grep -q "^  kiln_attention_combine_bf16_64: 1 blocks of 128 threads" "$tmp/out" \
    && ok "split-KV run shows a block per split, then the combine kernel" || bad "split-KV run launches" "$(head -c 300 "$tmp/out")"
expect "run split-KV causal sm_75 f16, more splits than key tiles, twice" 0 "PASS" -- \
    run attention dtype=f16 head_dim=32 causal=true splitkv=true --sm 75 --rows 3 --seq-k 40 --heads 2:2 --splits 5 --twice
expect "emit split-KV on sm_75 bf16 path=simt: SIMT, no bf16" 0 "fma.rn.f32" -- emit attention dtype=bf16 head_dim=128 splitkv=true path=simt --sm 75
grep -qE "mma|\.bf16" "$tmp/out" && bad "sm_75 split-KV bf16: no mma, no bf16" "found in PTX" || ok "sm_75 split-KV bf16: no mma, no bf16"
expect "emit split-KV on sm_75 bf16 path=auto: f16 m16n8k8" 0 "mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32" -- \
    emit attention dtype=bf16 head_dim=128 splitkv=true --sm 75
expect "run --splits 0" 2 "bad --splits '0'; valid: 1..1024" -- run attention splitkv=true --sm 80 --rows 1 --splits 0
expect "run --splits without splitkv" 2 "--splits applies to split-KV attention" -- run attention --sm 80 --rows 1 --splits 2
# attention_combine on its own: its float64 reference merges drawn partials (templates/attention_combine.ref.c)
expect "run attention_combine alone" 0 "PASS: every output within tolerance" -- run attention_combine --sm 80 --rows 3 --heads 4 --splits 5
expect "run attention_combine, splits that saw no key, bf16 d128" 0 "PASS" -- \
    run attention_combine out=bf16 head_dim=128 --sm 75 --rows 7 --batch 2 --splits 16 --input special
expect "run attention_combine mixed, twice" 0 "PASS" -- run attention_combine out=f32 head_dim=32 --sm 90 --rows 12 --input mixed --twice

expect "bad head_dim" 2 "head_dim=84: must be a multiple of 8 from 8 to 256" -- emit attention head_dim=84 --sm 80
expect "head_dim 512 refused, naming why" 2 "head_dim=512 is refused on every target: O alone would need 256 f32 registers" -- \
    emit attention head_dim=512 --sm 90
expect "run head_dim 80 (padded to 96), causal" 0 "PASS" -- run attention dtype=f16 head_dim=80 causal=true --sm 80 --rows 40 --seq-k 50
expect "causal=top_left emits" 0 "mma.sync" -- emit attention dtype=f16 head_dim=64 causal=top_left window=true --sm 80
expect "bad causal" 2 "valid: false, true, top_left" -- emit attention causal=bottom --sm 80
expect "mma with f32" 2 "path=mma needs dtype f16 or bf16" -- emit attention dtype=f32 path=mma --sm 80
expect "mma bf16 on sm_75 above head_dim 128 with rotary" 2 "at head_dim 136-256 with every key but rotary inside the append (and, below 256, split-KV with a window and ALiBi under a causal mask) (head_dim=256)" -- \
    emit attention dtype=bf16 head_dim=256 paged=true append=true rotary=neox path=mma --sm 75
expect "mma bf16 on sm_75, padded head_dim, split-KV with a window and ALiBi, causal" 2 "below 256, split-KV with a window and ALiBi under a causal mask) (head_dim=200)" -- \
    emit attention dtype=bf16 head_dim=200 causal=true window=true alibi=true splitkv=true path=mma --sm 75
expect "run mma bf16 sm_75 d256 split-KV causal with window and ALiBi, GQA, race check" 0 "PASS: every output within tolerance" -- \
    run attention dtype=bf16 head_dim=256 causal=true window=true alibi=true splitkv=true path=mma --sm 75 --rows 5 --seq-k 300 \
    --heads 8:2 --splits 3 --window 70,0 --alibi --race
expect "run mma bf16 sm_75 d256 varlen causal (f16-scaled, two warps a row group)" 0 "PASS: every output within tolerance" -- \
    run attention dtype=bf16 head_dim=256 causal=true varlen=true path=mma --sm 75 --varlen 70,5,0,20 --varlen-k 100,37,16,20 --heads 2:1
expect "run mma bf16 sm_75 d256 split-KV causal GQA" 0 "PASS: every output within tolerance" -- \
    run attention dtype=bf16 head_dim=256 causal=true splitkv=true path=mma --sm 75 --rows 3 --seq-k 300 --heads 8:2 --splits 3
expect "mma f16 on sm_75 above head_dim 128 with dropout (wave 24: two warps a row group)" 0 "mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32" -- \
    emit attention dtype=f16 head_dim=256 dropout=true path=mma --sm 75
expect "run mma f16 sm_75 d256 causal dropout, keep mask, twice" 0 "PASS: every output within tolerance" -- \
    run attention dtype=f16 head_dim=256 causal=true dropout=true dropout_mask=true path=mma --sm 75 --rows 70 --seq-k 90 \
    --heads 2:1 --dropout 0.5 --twice
expect "mma bf16 on sm_75: f16 m16n8k8 (power-of-two scaling)" 0 "mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32" -- \
    emit attention dtype=bf16 head_dim=64 path=mma --sm 75
for key in dropout=true "paged=true append=true rotary=neox"; do
    expect "mma bf16 on sm_75 with $key: f16 m16n8k8 (power-of-two scaling)" 0 "mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32" -- \
        emit attention dtype=bf16 head_dim=64 path=mma $key --sm 75
done
expect "mma bf16 on sm_75 with paged=true on sm_80: the bf16 tensor cores take it" 0 "mma.sync.aligned.m16n8k16" -- \
    emit attention dtype=bf16 head_dim=64 path=mma paged=true --sm 80
expect "dropout with varlen: built (FA2 allows it)" 0 "kiln.meta scalar dropout_p" -- \
    emit attention dtype=f16 head_dim=64 dropout=true varlen=true --sm 80
expect "paged with varlen: not built, named" 2 "paged=true with varlen=true is not built" -- \
    emit attention dtype=f16 head_dim=64 paged=true varlen=true --sm 80
expect "paged with dropout: not built, named" 2 "paged=true with dropout=true is not built" -- \
    emit attention dtype=f16 head_dim=64 paged=true dropout=true --sm 80
expect "run mma bf16 on sm_75, GQA, causal" 0 "PASS: every output within tolerance" -- \
    run attention dtype=bf16 head_dim=96 causal=true path=mma --sm 75 --rows 40 --seq-k 70 --heads 4:2
# issue 24's mask keys through kiln run: --window L,R, --softcap C, --alibi (slopes 2^(-8(h+1)/H))
expect "run top_left + window + softcap, seq_q != seq_k" 0 "PASS: every output within tolerance" -- \
    run attention dtype=f16 head_dim=64 causal=top_left window=true softcap=true --sm 80 --rows 40 --seq-k 50 --window 15,-1 --softcap 30
# ... and that check is not vacuous: rows see keys (no NOTE), o's error is not exactly 0 (a top_left window
# bound moved off the bottom-right diagonal fails it: planted, seen failing)
grep -q "^NOTE" "$tmp/out" && bad "top_left + window run: no NOTE" "$(grep '^NOTE' "$tmp/out")" || ok "top_left + window run: no NOTE"
grep -qE "^  o +max \|err\| 0\.000e\+00" "$tmp/out" && bad "top_left + window run: o's error not exactly 0" "$(grep '^  o ' "$tmp/out")" \
    || ok "top_left + window run: o's error not exactly 0"
# A vacuous run says so: top_left causal (j <= i) with a window on the bottom-right diagonal (j >= i + seq_k - seq_q
# - window_left) masks every row when seq_k - seq_q > window_left: O 0 and lse +inf on both sides, error exactly 0
expect "run top_left + window, every row masked: NOTE names why" 0 \
    "NOTE: every row fully masked: causal=top_left window_left=4 window_right=0 seq_q=8 seq_k=40" -- \
    run attention dtype=bf16 head_dim=64 causal=top_left window=true --sm 75 --rows 8 --seq-k 40 --window 4,0
expect "run top_left --rows 1: NOTE, one key per row" 0 "NOTE: every row sees at most one key: causal=top_left seq_q=1 seq_k=1" -- \
    run attention dtype=f16 head_dim=64 causal=top_left --sm 80 --rows 1
expect "run alibi, GQA, batch 2, twice" 0 "PASS" -- \
    run attention dtype=bf16 head_dim=64 alibi=true --sm 80 --rows 20 --seq-k 33 --heads 4:2 --batch 2 --alibi --twice
expect "run alibi=true draws the slopes without --alibi (SIMT sm_75)" 0 "PASS" -- \
    run attention dtype=bf16 head_dim=32 alibi=true causal=true --sm 75 --rows 9 --seq-k 21 --heads 3
expect "run window one-sided (bottom-right causal, Mistral's form)" 0 "PASS" -- \
    run attention dtype=f16 head_dim=128 causal=true window=true --sm 90 --rows 30 --window 7,0
expect "run split-KV with window and alibi" 0 "PASS" -- \
    run attention dtype=f16 head_dim=64 window=true alibi=true splitkv=true --sm 80 --rows 1 --seq-k 100 --heads 4:1 --window 30,-1 --splits 3
expect "run --window without window=true" 2 "--window needs window=true in the attention spec" -- \
    run attention head_dim=64 --sm 80 --rows 4 --window 2,2
expect "run --softcap without softcap=true" 2 "--softcap needs softcap=true" -- run attention --sm 80 --rows 4 --softcap 5
expect "run --alibi without alibi=true" 2 "--alibi needs alibi=true" -- run attention --sm 80 --rows 4 --alibi
expect "run softcap=true without --softcap" 2 "softcap=true needs the cap: give --softcap C" -- \
    run attention softcap=true --sm 80 --rows 4
expect "run bad --window" 2 "bad --window '3': give L,R" -- run attention window=true --sm 80 --rows 4 --window 3
expect "run --window below -1" 2 "bad --window '-2,0'" -- run attention window=true --sm 80 --rows 4 --window -2,0
expect "run bad --softcap" 2 "bad --softcap '0'; valid: a finite number > 0" -- run attention softcap=true --sm 80 --rows 4 --softcap 0
expect "emit declares the keys' launch values" 0 "kiln.meta tensor alibi_slopes in (batch-1)*alibi_stride+heads_q" -- \
    emit attention window=true softcap=true alibi=true --sm 80
grep -q "^// kiln.meta scalar window_left -1$" "$tmp/out" && grep -q "^// kiln.meta scalar softcap$" "$tmp/out" \
    && grep -q "^// kiln.meta scalar alibi_stride 0$" "$tmp/out" && ok "meta: window sides -1, softcap given, alibi_stride 0" \
    || bad "meta: the keys' scalars" "$(grep 'kiln.meta scalar' "$tmp/out")"

expect "run heads not dividing" 2 "key/value heads must divide" -- run attention --sm 80 --rows 4 --heads 3:2
expect "run bad --seq-k" 2 "bad --seq-k" -- run attention --sm 80 --rows 4 --seq-k 0

# v_head_dim (lib/attn_vdim.lua): V and O at their own head dim; MLA prefill's qk 192 / v 128 on every path
P="PASS: every output within tolerance"
expect "run v_head_dim 128, head_dim 192 (MLA) bf16 sm_80 causal GQA, twice" 0 "$P" -- run attention dtype=bf16 \
    head_dim=192 v_head_dim=128 causal=true --sm 80 --rows 40 --seq-k 50 --heads 4:1 --twice
expect "run v_head_dim 128, head_dim 192 f16 sm_75 (m16n8k8)" 0 "$P" -- run attention dtype=f16 head_dim=192 \
    v_head_dim=128 causal=true --sm 75 --rows 33 --seq-k 40
expect "run v_head_dim 128, head_dim 192 f32 (SIMT)" 0 "$P" -- run attention dtype=f32 head_dim=192 v_head_dim=128 \
    --sm 90 --rows 20 --seq-k 30 --batch 2
expect "run v_head_dim 128 > head_dim 64 bf16 sm_75 (f16-scaled tensor cores)" 0 "$P" -- run attention dtype=bf16 head_dim=64 \
    v_head_dim=128 causal=true --sm 75 --rows 20 --seq-k 25
expect "run v_head_dim 24, head_dim 40 every mask key" 0 "$P" -- run attention dtype=f16 head_dim=40 v_head_dim=24 \
    causal=true window=true softcap=true alibi=true --sm 80 --rows 40 --seq-k 50 --window 10,0 --softcap 20 --alibi
expect "run v_head_dim 128, head_dim 192 split-KV (combine at v width)" 0 "$P" -- run attention dtype=bf16 head_dim=192 \
    v_head_dim=128 splitkv=true --sm 80 --rows 2 --seq-k 300 --heads 4:1 --splits 3
expect "run v_head_dim 128, head_dim 192 dropout" 0 "$P" -- run attention dtype=bf16 head_dim=192 v_head_dim=128 \
    causal=true dropout=true --sm 90 --rows 30 --dropout 0.2
expect "emit: v_head_dim equal to head_dim is left out of the canonical spec" 0 \
    "kiln.meta spec attention dtype=f16 out=f16 head_dim=64 causal=false path=auto" -- emit attention head_dim=64 v_head_dim=64 --sm 80
expect "emit: the split-KV combine runs at v_head_dim" 0 "then attention_combine out=bf16 head_dim=128" -- \
    emit attention dtype=bf16 head_dim=192 v_head_dim=128 splitkv=true --sm 80
expect "v_head_dim not a multiple of 8" 2 "v_head_dim=44: must be a multiple of 8 from 8 to 256" -- \
    emit attention head_dim=192 v_head_dim=44 --sm 80
expect "v_head_dim with varlen" 2 "with varlen=true is not built" -- emit attention head_dim=192 v_head_dim=128 varlen=true --sm 80
expect "run v_head_dim 32 < head_dim 64 bf16 sm_75 path=mma (the f16-scaled path, named)" 0 "$P" -- run attention \
    dtype=bf16 head_dim=64 v_head_dim=32 path=mma --sm 75 --rows 20 --seq-k 25

finish "attention cli"
