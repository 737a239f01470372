#!/usr/bin/env bash
# tests/attention_varlen_test.sh - varlen=true (packed sequences) of attention and attention_bwd through
# kiln emit / kiln run: every path against the float64 reference with lengths 0, 1, odd and long in one
# batch, causal both ways, window, softcap, ALiBi, GQA, seqused_k; the launch metadata; bad input.
set -u
. "$(dirname "$0")/cli_lib.sh"

# ---- forward: O and lse ([heads_q, total_q]) per sequence ----
expect "fwd mma f16 sm_80, lengths 0,1,37,300, causal, GQA 4:2" 0 "PASS: every output within tolerance" -- \
    run attention dtype=f16 head_dim=32 causal=true varlen=true --sm 80 --varlen 0,1,37,300 --heads 4:2
grep -q "varlen 4 sequences  heads 4:2  seq_q 0,1,37,300  seq_k 0,1,37,300" "$tmp/out" \
    && ok "header names the sequences' lengths" || bad "header" "$(head -1 "$tmp/out")"
grep -q "kiln_attention_f16_f16_32_true_auto_true: 48 blocks of 128 threads" "$tmp/out" \
    && ok "grid from max_seqlen_q: ceil(300 / 128) x 4 heads x 4 sequences" || bad "grid" "$(sed -n 2p "$tmp/out")"
expect "fwd mma bf16 sm_80, key lengths differ (--varlen-k), bottom-right causal, twice" 0 "PASS" -- \
    run attention dtype=bf16 head_dim=64 causal=true varlen=true --sm 80 --varlen 0,1,37,130 --varlen-k 5,0,64,129 \
    --heads 4:2 --twice
expect "fwd sm_75 f16 m16n8k8, softcap + alibi, a sequence without keys" 0 "PASS" -- \
    run attention dtype=f16 head_dim=64 causal=true softcap=true alibi=true varlen=true --sm 75 \
    --varlen 17,1,0,33 --varlen-k 20,0,5,33 --softcap 30 --heads 2:1
# (wave 24) f16 d256 on sm_75's m16n8k8 with the mask keys over packed sequences (attention.lua m16n8k8_wide_spills): a
# window narrower than a tile, a sequence without keys, one whose rows see none (seq_q > seq_k, window), GQA; a padded
# head_dim top-left; all three under top-left causal (two warps a row group: they spilled on the 4-warp tiles)
expect "fwd sm_75 f16 m16n8k8 d256 window + softcap + alibi, causal, twice" 0 "PASS" -- \
    run attention dtype=f16 head_dim=256 causal=true window=true softcap=true alibi=true varlen=true path=mma --sm 75 \
    --varlen 17,1,0,90 --varlen-k 20,0,5,40 --window 9,3 --softcap 20 --heads 4:2 --twice
expect "fwd sm_75 f16 m16n8k8 d200 top_left + window + alibi" 0 "PASS" -- \
    run attention dtype=f16 head_dim=200 causal=top_left window=true alibi=true varlen=true path=mma --sm 75 \
    --varlen 70,5,33 --varlen-k 90,37,20 --window 30,0 --heads 2:1
expect "fwd sm_75 f16 m16n8k8 d256 top_left + window + softcap + alibi (two warps a row group), twice" 0 "PASS" -- \
    run attention dtype=f16 head_dim=256 causal=top_left window=true softcap=true alibi=true varlen=true path=mma --sm 75 \
    --varlen 17,1,0,90 --varlen-k 20,0,5,100 --window 9,3 --softcap 20 --heads 4:2 --twice
expect "fwd SIMT f32, top_left + window" 0 "PASS" -- \
    run attention dtype=f32 head_dim=32 causal=top_left window=true varlen=true --sm 80 --varlen 3,1,0,45 \
    --varlen-k 40,2,3,45 --window 8,2
expect "fwd bf16 sm_75 f16-scaled mma (path=auto), lengths 0,1,37,300, causal, GQA 4:2" 0 "PASS" -- \
    run attention dtype=bf16 head_dim=64 causal=true varlen=true --sm 75 --varlen 0,1,37,300 --varlen-k 5,0,64,290 --heads 4:2 --twice
grep -q "kiln_attention_bf16_bf16_64_true_auto_true: 32 blocks of 256 threads" "$tmp/out" \
    && ok "bf16 sm_75 varlen under auto: the scaled path's 256-thread blocks" || bad "bf16 sm_75 varlen grid" "$(sed -n 2p "$tmp/out")"
expect "fwd bf16 sm_75 f16-scaled mma d128 top_left, seqused_k" 0 "PASS" -- \
    run attention dtype=bf16 head_dim=128 causal=top_left varlen=true path=mma --sm 75 --varlen 9,20,70 --varlen-k 30,21,90 --seqused-k 17,0,85
expect "fwd SIMT bf16 sm_75, seqused_k" 0 "PASS" -- \
    run attention dtype=bf16 head_dim=32 varlen=true path=simt --sm 75 --varlen 9,20 --varlen-k 30,21 --seqused-k 17,0
grep -q "seqused_k 17,0" "$tmp/out" && ok "header names seqused_k" || bad "seqused_k header" "$(head -1 "$tmp/out")"
expect "fwd mma bf16 sm_90, head_dim 80 (padded), window one-sided" 0 "PASS" -- \
    run attention dtype=bf16 head_dim=80 causal=true window=true varlen=true --sm 90 --varlen 1,70,33 --window 16,0
expect "fwd every sequence empty: nothing launched" 0 "PASS" -- \
    run attention dtype=f16 head_dim=32 varlen=true --sm 80 --varlen 0,0

# ---- backward: dQ, dK, dV packed like q and k ----
expect "bwd mma f16 sm_80, causal, GQA 2:1, lengths 0,1,37,70" 0 "PASS: every gradient within tolerance" -- \
    run attention_bwd dtype=f16 head_dim=32 causal=true varlen=true --sm 80 --varlen 0,1,37,70 --varlen-k 3,0,37,65 --heads 2:1
grep -q "kiln_attention_bwd_prep_f16_f16_f16_32_true_auto_false_true" "$tmp/out" \
    && grep -q "kiln_attention_bwd_convert_f16_f16_f16_32_true_auto_false_true" "$tmp/out" \
    && ok "bwd runs varlen prep, dkdv, convert" || bad "bwd sequence" "$(head -5 "$tmp/out")"
expect "bwd SIMT f32, causal + window" 0 "PASS" -- \
    run attention_bwd dtype=f32 head_dim=32 causal=true window=true varlen=true --sm 80 --varlen 5,1,0,33 \
    --varlen-k 9,1,4,30 --window 6,1
expect "bwd deterministic mma bf16 (dq kernel), GQA 4:2" 0 "PASS" -- \
    run attention_bwd dtype=bf16 head_dim=64 causal=true varlen=true deterministic=true --sm 80 --varlen 20,0,1,33 --heads 4:2
expect "bwd sm_75 f16 m16n8k8, top_left + softcap + alibi" 0 "PASS" -- \
    run attention_bwd dtype=f16 head_dim=32 causal=top_left softcap=true alibi=true varlen=true --sm 75 \
    --varlen 1,19,0,40 --varlen-k 2,25,3,31 --softcap 20
expect "bwd sm_75 f16 d96, every mask key (runs on SIMT: the atomic mma dkdv would spill)" 0 "PASS" -- \
    run attention_bwd dtype=f16 head_dim=96 causal=top_left window=true softcap=true alibi=true varlen=true --sm 75 \
    --varlen 20,3 --varlen-k 17,9 --heads 1 --window 6,2 --softcap 15
expect "bwd bf16 sm_75 (f16-scaled tensor cores: the atomic d32 varlen dkdv holds its spans), long sequence" 0 "PASS" -- \
    run attention_bwd dtype=bf16 head_dim=32 causal=true varlen=true --sm 75 --varlen 1,150 --heads 1

# ---- dropout on packed sequences (issue 24 item 6 with varlen; tests/attention_varlen_dropout_test.c has the rest) ----
expect "fwd dropout mma f16 sm_80, lengths 0,1,37,300" 0 "PASS: every output within tolerance" -- \
    run attention dtype=f16 head_dim=32 causal=true varlen=true dropout=true --sm 80 --varlen 0,1,37,300 --dropout 0.1
expect "fwd dropout + mask, sm_75 m16n8k8, every mask key" 0 "dropout_mask  max |err| 0.000e+00" -- \
    run attention dtype=f16 head_dim=64 causal=true window=true softcap=true alibi=true varlen=true dropout=true \
    dropout_mask=true --sm 75 --varlen 17,1,0,33 --varlen-k 20,0,5,33 --window 9,3 --softcap 30 --heads 2:1 --dropout 0.2
expect "bwd dropout mma f16 sm_80 (atomic dQ), mask regenerated" 0 "PASS: every gradient within tolerance" -- \
    run attention_bwd dtype=f16 head_dim=32 causal=true varlen=true dropout=true dropout_mask=true --sm 80 \
    --varlen 0,1,37,70 --varlen-k 3,0,37,65 --heads 2:1 --dropout 0.2
grep -q "dropout_mask  max |err| 0.000e+00" "$tmp/out" && ok "bwd mask checked" || bad "bwd mask" "$(tail -3 "$tmp/out")"
expect "bwd dropout deterministic d80 sm_90 (dq: 32-key tiles, 0 spills)" 0 "PASS: every gradient within tolerance" -- \
    run attention_bwd dtype=f16 head_dim=80 causal=true varlen=true deterministic=true dropout=true --sm 90 \
    --varlen 0,1,37,70 --varlen-k 3,0,37,65 --heads 2:1 --dropout 0.2
expect "emit varlen dropout_mask: [batch, heads_q, max_seqlen_q, max_seqlen_k]" 0 \
    "kiln.meta tensor dropout_mask out batch heads_q max_seqlen_q max_seqlen_k" -- \
    emit attention dtype=f16 head_dim=64 varlen=true dropout=true dropout_mask=true --sm 80
expect "emit bwd dq varlen dropout_mask: the forward's layout" 0 \
    "kiln.meta tensor dropout_mask out batch heads_q max_seqlen_q max_seqlen_k" -- \
    emit attention_bwd kernel=dq dtype=bf16 head_dim=64 varlen=true dropout=true dropout_mask=true --sm 80

# ---- the launch description ----
expect "emit: packed tensors, cu_seqlens, grid from max_seqlen_q" 0 "kiln.meta tensor q in total_q heads_q 64 align=16" -- \
    emit attention dtype=f16 head_dim=64 causal=true varlen=true --sm 80
for line in "tensor lse out? heads_q total_q" "tensor cu_seqlens_q in batch+1" "tensor cu_seqlens_k in batch+1" \
            "tensor seqused_k in? batch" "stride stride_qs q 0" "problem max_seqlen_q heads_q batch"; do
    grep -q "^// kiln.meta $line$" "$tmp/out" && ok "meta: $line" || bad "meta: $line" "$(grep 'kiln.meta' "$tmp/out" | head -30)"
done
grep -q "stride_qb" "$tmp/out" && bad "varlen: no batch strides" "stride_qb in the PTX" || ok "varlen: no batch strides"
expect "emit bwd dkdv: grid over max_seqlen_k, varlen prep before" 0 "kiln.meta problem max_seqlen_k heads_kv batch" -- \
    emit attention_bwd dtype=bf16 head_dim=64 causal=true varlen=true --sm 80
grep -q "^// kiln.meta before attention_bwd kernel=prep .*varlen=true" "$tmp/out" \
    && grep -q "^// kiln.meta tensor dq_acc workspace heads_q\*total_q\*64 align=16" "$tmp/out" \
    && ok "bwd meta: varlen prep, dq_acc [heads_q, total_q, d]" || bad "bwd meta" "$(grep 'kiln.meta' "$tmp/out" | head -30)"
expect "emit sm_75 bf16 varlen: f16 m16n8k8 (power-of-two scaling), no bf16 instruction" 0 \
    "mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32" -- emit attention dtype=bf16 head_dim=64 varlen=true --sm 75
grep -qE "\.bf16" "$tmp/out" && bad "sm_75 bf16 varlen: no bf16" "found in PTX" || ok "sm_75 bf16 varlen: no bf16"
expect "emit sm_75 bf16 varlen path=simt: SIMT, no mma, no bf16 instruction" 0 "fma.rn.f32" -- \
    emit attention dtype=bf16 head_dim=64 varlen=true path=simt --sm 75
grep -qE "mma|\.bf16" "$tmp/out" && bad "sm_75 bf16 varlen simt: no mma, no bf16" "found in PTX" || ok "sm_75 bf16 varlen simt: no mma, no bf16"

# ---- bad input: exit 2, one line naming the problem and the valid choices ----
expect "varlen with splitkv refused" 2 "varlen=true with splitkv=true is not built" -- \
    emit attention varlen=true splitkv=true --sm 80
expect "--varlen without varlen=true" 2 "--varlen needs varlen=true in the attention spec" -- \
    run attention --sm 80 --varlen 3,4
expect "varlen=true without --varlen" 2 "varlen=true needs the sequence lengths: kiln run ... --varlen" -- \
    run attention varlen=true --sm 80 --rows 4
expect "negative length" 2 "bad --varlen '3,-1,4': item 2 is -1; valid: 0..1048576" -- \
    run attention varlen=true --sm 80 --varlen 3,-1,4
expect "not a number" 2 "bad --varlen '3,x': item 2 is not a whole number" -- run attention varlen=true --sm 80 --varlen 3,x
expect "empty item" 2 "bad --varlen '3,,4': item 2 is not a whole number" -- run attention varlen=true --sm 80 --varlen 3,,4
expect "wrong count of key lengths" 2 "--varlen-k gives 2 key lengths for 3 sequences (--varlen); give one per sequence" -- \
    run attention varlen=true --sm 80 --varlen 3,1,4 --varlen-k 3,1
expect "--varlen-k alone" 2 "--varlen-k needs --varlen L,L,..." -- run attention varlen=true --sm 80 --rows 3 --varlen-k 3
expect "seqused_k past the keys" 2 "bad --seqused-k: sequence 1 uses 5 keys but has 4; valid: 0..4" -- \
    run attention varlen=true --sm 80 --varlen 3,4 --seqused-k 1,5
expect "seqused_k count" 2 "--seqused-k gives 1 counts for 2 sequences" -- run attention varlen=true --sm 80 --varlen 3,4 --seqused-k 1
expect "seqused_k in the backward" 2 "seqused_k is a forward launch value" -- \
    run attention_bwd varlen=true --sm 80 --varlen 3,4 --seqused-k 1,2
expect "bwd --varlen without varlen=true" 2 "--varlen needs varlen=true in the attention_bwd spec" -- \
    run attention_bwd --sm 80 --varlen 3,4

finish "attention varlen"
