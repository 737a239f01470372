#!/usr/bin/env bash
# tests/attention_bwd_cli_test.sh - `kiln emit attention_bwd` and `kiln run attention_bwd`: the kernels
# per target, the deterministic sequence, bad input exits 2 with one line.
set -u
. "$(dirname "$0")/cli_lib.sh"

expect "dkdv adds dQ with f32 atomics" 0 "atom.global.add.f32" -- \
    emit attention_bwd kernel=dkdv dtype=bf16 head_dim=64 causal=true --sm 80
expect "sm_80 f16 dkdv uses mma.m16n8k16" 0 "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" -- \
    emit attention_bwd kernel=dkdv dtype=f16 head_dim=128 causal=true --sm 80
grep -q "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16" "$tmp/out" && grep -q "cp.async.cg.shared.global" "$tmp/out" \
    && ok "sm_80 dkdv: ldmatrix .trans and cp.async" || bad "sm_80 dkdv: ldmatrix .trans and cp.async" "missing in the PTX"
expect "sm_75 f16 dkdv uses mma.m16n8k8" 0 "mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32" -- \
    emit attention_bwd kernel=dkdv dtype=f16 head_dim=64 --sm 75
grep -q "cp.async" "$tmp/out" && bad "sm_75 dkdv: no cp.async" "cp.async in sm_75 PTX" || ok "sm_75 dkdv: no cp.async"
expect "deterministic dkdv has no atomics" 0 ".entry kiln_attention_bwd_dkdv" -- \
    emit attention_bwd kernel=dkdv dtype=bf16 head_dim=64 deterministic=true --sm 80
grep -qE "^\s*(atom|red)\." "$tmp/out" && bad "deterministic: no atomics" "found in PTX" || ok "deterministic: no atomics"
expect "sm_75 bf16 atomic dkdv at d128 with path=simt" 0 "fma.rn.f32" -- \
    emit attention_bwd kernel=dkdv dtype=bf16 head_dim=128 causal=true path=simt --sm 75
grep -qE "\.bf16|mma" "$tmp/out" && bad "sm_75 bf16 SIMT: no bf16 instruction, no mma" "found in PTX" \
    || ok "sm_75 bf16 SIMT: no bf16 instruction, no mma"
for s in "kernel=dkdv head_dim=64 causal=true" "kernel=dkdv head_dim=128 deterministic=true" "kernel=dq head_dim=96" \
    "kernel=dkdv head_dim=128 causal=true" \
    "kernel=dkdv head_dim=96 causal=true" "kernel=dkdv head_dim=80 deterministic=true" \
    "kernel=dkdv head_dim=64 causal=true varlen=true" "kernel=dkdv head_dim=64 causal=true dropout=true" \
    "kernel=dkdv head_dim=32 causal=true varlen=true" "kernel=dkdv head_dim=96 causal=true window=true" \
    "kernel=dkdv head_dim=96 causal=true varlen=true deterministic=true" "kernel=dq head_dim=64 causal=true window=true" \
    "kernel=dq head_dim=128 causal=true varlen=true" "kernel=dkdv head_dim=128 causal=true varlen=true" \
    "kernel=dq head_dim=32 causal=true varlen=true" "kernel=dq head_dim=64 causal=true softcap=true varlen=true" \
    "kernel=dq head_dim=96 causal=true window=true" "kernel=dkdv head_dim=96 causal=true varlen=true" \
    "kernel=dkdv head_dim=96 causal=true window=true alibi=true" "kernel=dkdv head_dim=96 causal=true window=true softcap=true" \
    "kernel=dkdv head_dim=64 causal=true window=true softcap=true alibi=true varlen=true" \
    "kernel=dkdv head_dim=96 causal=top_left window=true softcap=true alibi=true varlen=true deterministic=true" \
    "kernel=dkdv head_dim=64 causal=true window=true softcap=true alibi=true dropout=true" \
    "kernel=dkdv head_dim=128 causal=true window=true softcap=true alibi=true dropout=true" \
    "kernel=dq head_dim=32 causal=true window=true softcap=true alibi=true dropout=true" \
    "kernel=dkdv head_dim=32 causal=true varlen=true dropout=true deterministic=true" \
    "kernel=dq head_dim=32 causal=true varlen=true dropout=true" "kernel=dkdv head_dim=64 causal=true varlen=true dropout=true" \
    "kernel=dq head_dim=96 causal=true dropout=true" "kernel=dq head_dim=128 causal=true dropout=true" \
    "kernel=dq head_dim=64 causal=true window=true softcap=true alibi=true dropout=true" \
    "kernel=dq head_dim=96 causal=true varlen=true" "kernel=dq head_dim=128 causal=true varlen=true dropout=true" \
    "kernel=dq head_dim=64 causal=true window=true softcap=true alibi=true varlen=true dropout=true" \
    "kernel=dq head_dim=64 causal=true window=true softcap=true varlen=true dropout=true dropout_mask=true"; do
    expect "sm_75 bf16 $s: path=auto takes the f16-scaled m16n8k8" 0 "mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32" -- \
        emit attention_bwd dtype=bf16 $s --sm 75
    grep -qE "\.bf16" "$tmp/out" && bad "sm_75 bf16 $s: no bf16 instruction" "found in PTX" \
        || ok "sm_75 bf16 $s: no bf16 instruction"
done
# issue 28: a result never worse than the bf16 path's bound. Where the f16-scaled kernel does not add the low parts of
# a row spanning more than 2^32 (lib/attn_bwd_f16scaled.lua holds; docs/attention-bwd-span.md "Not held yet"),
# path=auto takes SIMT (no mma, no bf16 instruction) and path=mma keeps the f16 mma; the held neighbours above stay mma
# (wave 21: d96 causal window + softcap, d64 varlen window + softcap + ALiBi causal and the deterministic d96 varlen with
# the three keys moved to the list above, lib/attn_bwd_f16scaled.lua kv_walk_frag; head_dim 88 causal with a window and
# the deterministic d96 varlen causal with ALiBi alone stay off, kv_walk_frag_spills; wave 22: the dq kernel with the
# test's dropout_mask output beside varlen, d64 causal with a window and softcap, moved to the list above,
# lib/attn_bwd_f16scaled.lua dq_mask_apart; with a window and ALiBi it stays off, 4-8 bytes)
for s in "kernel=dkdv head_dim=88 causal=true window=true" \
    "kernel=dkdv head_dim=96 causal=true alibi=true varlen=true deterministic=true" \
    "kernel=dq head_dim=64 causal=true window=true alibi=true varlen=true dropout=true dropout_mask=true"; do
    expect "sm_75 bf16 $s: not held, path=auto takes SIMT" 0 "fma.rn.f32" -- emit attention_bwd dtype=bf16 $s --sm 75
    grep -qE "\.bf16|mma" "$tmp/out" && bad "sm_75 bf16 $s auto: no mma, no bf16 instruction" "found in PTX" \
        || ok "sm_75 bf16 $s auto: no mma, no bf16 instruction"
    expect "sm_75 bf16 $s: path=mma keeps the f16-scaled m16n8k8" 0 "mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32" -- \
        emit attention_bwd dtype=bf16 $s path=mma --sm 75
done
expect "kiln list: path=auto's rule for bf16 on sm_75" 0 "else SIMT (lib/attn_bwd_f16scaled.lua holds)" -- list
expect "head_dim 256 takes dynamic shared memory" 0 "kiln.meta" -- emit attention_bwd kernel=dq dtype=f16 head_dim=256 --sm 75
grep -q "extern .shared" "$tmp/out" && ok "d256: extern .shared" || bad "d256: extern .shared" "not in PTX"

expect "run f16 sm_80 GQA causal, twice" 0 "PASS: every gradient within tolerance" -- \
    run attention_bwd dtype=f16 head_dim=64 causal=true --sm 80 --rows 33 --seq-k 50 --heads 4:2 --twice
expect "run bf16 sm_75 deterministic, MQA, f32 grads" 0 "PASS" -- \
    run attention_bwd dtype=bf16 grad=f32 head_dim=32 deterministic=true causal=true --sm 75 --rows 40 --seq-k 20 --heads 3:1
expect "run f32 sm_90" 0 "PASS" -- run attention_bwd dtype=f32 head_dim=96 --sm 90 --rows 17 --batch 2
expect "run mma f16 sm_75 (m16n8k8)" 0 "PASS" -- run attention_bwd dtype=f16 head_dim=128 causal=true --sm 75 --rows 40 --seq-k 70
# issue 24's mask keys: the whole sequence gets them (the deterministic dq kernel's spec carries them)
expect "run every mask key, top_left, seq_q != seq_k" 0 "PASS: every gradient within tolerance" -- \
    run attention_bwd dtype=f16 head_dim=64 causal=top_left window=true softcap=true alibi=true --sm 80 --rows 20 --seq-k 30 \
    --window 14,3 --softcap 10 --alibi
expect "run deterministic with window and softcap, GQA" 0 "PASS" -- \
    run attention_bwd dtype=bf16 head_dim=32 causal=true window=true softcap=true deterministic=true --sm 80 --rows 20 \
    --seq-k 30 --window 5,3 --softcap 10 --heads 2:1
# head dims between the tile widths (lib/attn_dims.lua: the next width's tiles, columns past head_dim zero)
expect "run head_dim 80 (Phi-2) bf16 sm_80 causal GQA, twice" 0 "PASS: every gradient within tolerance" -- \
    run attention_bwd dtype=bf16 head_dim=80 causal=true --sm 80 --rows 70 --seq-k 70 --heads 4:2 --twice
expect "run head_dim 40 f16 sm_75 (m16n8k8) deterministic" 0 "PASS" -- \
    run attention_bwd dtype=f16 head_dim=40 causal=true deterministic=true --sm 75 --rows 33 --seq-k 40
expect "run head_dim 200 bf16 sm_90 (SIMT) every mask key" 0 "PASS" -- \
    run attention_bwd dtype=bf16 head_dim=200 causal=true window=true softcap=true alibi=true --sm 90 --rows 20 \
    --seq-k 30 --window 9,0 --softcap 10 --alibi
expect "run head_dim 8 f32 sm_80" 0 "PASS" -- run attention_bwd dtype=f32 head_dim=8 --sm 80 --rows 19 --seq-k 23 --batch 2
expect "run head_dim 40 bf16 sm_80 dropout" 0 "PASS" -- \
    run attention_bwd dtype=bf16 head_dim=40 causal=true dropout=true --sm 80 --rows 30 --seq-k 35 --dropout 0.25 --heads 2:1
expect "run head_dim 200 f16 sm_80 dropout deterministic" 0 "PASS" -- \
    run attention_bwd dtype=f16 head_dim=200 causal=true dropout=true deterministic=true --sm 80 --rows 20 --dropout 0.3
expect "run head_dim 80 bf16 sm_80 varlen" 0 "PASS" -- \
    run attention_bwd dtype=bf16 head_dim=80 causal=true varlen=true --sm 80 --varlen 0,17,40 --varlen-k 5,0,44 --heads 2:1
expect "run head_dim 24 f16 sm_75 varlen deterministic" 0 "PASS" -- \
    run attention_bwd dtype=f16 head_dim=24 varlen=true deterministic=true --sm 75 --varlen 9,30 --heads 2:2
# v_head_dim (lib/attn_vdim.lua): dV and dO at V's head dim, dQ and dK at head_dim (MLA: 192 / 128)
expect "run v_head_dim 128, head_dim 192 bf16 sm_80 (SIMT: 256 wide) causal GQA" 0 "PASS: every gradient within tolerance" -- \
    run attention_bwd dtype=bf16 head_dim=192 v_head_dim=128 causal=true --sm 80 --rows 40 --seq-k 50 --heads 2:1
expect "run v_head_dim 128 > head_dim 64 f16 sm_80 (mma), twice" 0 "PASS" -- \
    run attention_bwd dtype=f16 head_dim=64 v_head_dim=128 causal=true --sm 80 --rows 40 --seq-k 50 --heads 2:1 --twice
expect "run v_head_dim 64 < head_dim 128 f16 sm_75 (m16n8k8) deterministic" 0 "PASS" -- \
    run attention_bwd dtype=f16 head_dim=128 v_head_dim=64 causal=true deterministic=true --sm 75 --rows 40 --seq-k 50
expect "run v_head_dim 128 > head_dim 64 f32 (SIMT)" 0 "PASS" -- \
    run attention_bwd dtype=f32 head_dim=64 v_head_dim=128 causal=true --sm 80 --rows 40 --seq-k 50 --heads 2:1
expect "run v_head_dim 24, head_dim 40 bf16 sm_90 deterministic, every mask key" 0 "PASS" -- \
    run attention_bwd dtype=bf16 head_dim=40 v_head_dim=24 causal=true window=true softcap=true alibi=true \
    deterministic=true --sm 90 --rows 30 --seq-k 40 --window 9,0 --softcap 10 --alibi
expect "run v_head_dim 128, head_dim 192 dropout" 0 "PASS" -- \
    run attention_bwd dtype=bf16 head_dim=192 v_head_dim=128 causal=true dropout=true --sm 80 --rows 20 --dropout 0.3
expect "emit: the sequence carries v_head_dim" 0 "before attention_bwd kernel=prep dtype=f16 out=f16 grad=f16 head_dim=192 v_head_dim=128" -- \
    emit attention_bwd head_dim=192 v_head_dim=128 --sm 80
expect "emit: the dq step of a deterministic sequence has the keys" 0 \
    "kiln.meta after attention_bwd kernel=dq dtype=f16 out=f16 grad=f16 head_dim=64 causal=top_left path=auto deterministic=false window=true softcap=true" -- \
    emit attention_bwd causal=top_left window=true softcap=true deterministic=true --sm 80
expect "emit: the deterministic dq takes dkdv's path, prep stays auto" 0 \
    "kiln.meta after attention_bwd kernel=dq dtype=bf16 out=bf16 grad=bf16 head_dim=64 causal=false path=simt deterministic=false" -- \
    emit attention_bwd dtype=bf16 path=simt deterministic=true --sm 80
expect "emit: prep before a path=simt dkdv is path=auto" 0 \
    "kiln.meta before attention_bwd kernel=prep dtype=bf16 out=bf16 grad=bf16 head_dim=64 causal=false path=auto deterministic=false" -- \
    emit attention_bwd dtype=bf16 path=simt deterministic=true --sm 80
expect "run --window without window=true" 2 "--window needs window=true in the attention spec" -- \
    run attention_bwd --sm 80 --rows 4 --window 2,2
expect "run softcap=true without --softcap" 2 "softcap=true needs the cap" -- run attention_bwd softcap=true --sm 80 --rows 4
expect "path=mma with f32" 2 "path=mma needs dtype f16 or bf16" -- emit attention_bwd dtype=f32 path=mma --sm 80
# bf16 on sm_75 with path=mma: the f16 tensor cores with power-of-two scaling (lib/attn_bwd_f16scaled.lua)
expect "path=mma for bf16 on sm_75: f16 mma" 0 "mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32" -- \
    emit attention_bwd dtype=bf16 path=mma --sm 75 --emit ptx
expect "path=mma for bf16 on sm_75: the atomic dkdv at head_dim 128 on f16 mma (dV and dK in two passes)" 0 \
    "mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32" -- \
    emit attention_bwd dtype=bf16 head_dim=128 causal=top_left window=true softcap=true alibi=true path=mma --sm 75 --emit ptx
expect "path=mma for f16 on sm_75: head_dim 128 with every mask key refused naming why" 2 \
    "head_dim 128 with window, softcap and alibi together needs more than 255 registers a thread without cp.async" -- \
    emit attention_bwd dtype=f16 head_dim=128 causal=top_left window=true softcap=true alibi=true path=mma --sm 75
# varlen and dropout on the f16-scaled path (issue 28); the dkdv shapes that do not fit 255 registers stay on SIMT
# under auto and are refused under path=mma naming why
expect "path=mma for bf16 on sm_75 with dropout: the f16-scaled m16n8k8" 0 "mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32" -- \
    emit attention_bwd dtype=bf16 dropout=true path=mma --sm 75
expect "path=mma for bf16 on sm_75: dkdv with dropout at head_dim 96 refused naming why" 2 \
    "dropout's per-entry mask with head_dim 96 without cp.async needs more than 255 registers a thread" -- \
    emit attention_bwd dtype=bf16 head_dim=96 causal=true dropout=true path=mma --sm 75
expect "sm_75 bf16 deterministic dkdv with dropout at head_dim 128: path=auto keeps SIMT" 0 "fma.rn.f32" -- \
    emit attention_bwd kernel=dkdv dtype=bf16 head_dim=128 causal=true dropout=true deterministic=true --sm 75
grep -qE "\.bf16|mma" "$tmp/out" && bad "sm_75 bf16 d128 dropout SIMT: no bf16 instruction, no mma" "found in PTX" \
    || ok "sm_75 bf16 d128 dropout SIMT: no bf16 instruction, no mma"
expect "sm_75 bf16 atomic dkdv at head_dim 128 with dropout, varlen and every mask key: the two passes on f16 mma" 0 \
    "mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32" -- \
    emit attention_bwd kernel=dkdv dtype=bf16 head_dim=128 causal=top_left window=true softcap=true alibi=true varlen=true dropout=true path=mma --sm 75
expect "path=mma for bf16 on sm_75: varlen atomic dkdv at head_dim 96 with a mask key refused naming why" 2 \
    "varlen at head_dim 96/128 with window, softcap or alibi needs more than 255 registers" -- \
    emit attention_bwd dtype=bf16 head_dim=96 causal=true window=true varlen=true path=mma --sm 75
expect "run bf16 sm_75 varlen dropout (f16-scaled), f32 grads" 0 "PASS" -- \
    run attention_bwd dtype=bf16 grad=f32 head_dim=64 causal=true varlen=true dropout=true --sm 75 --varlen 1,17,64 --heads 2:1 --dropout 0.1
expect "run bf16 sm_75 varlen deterministic (f16-scaled: K, V rows packed for dq)" 0 "PASS" -- \
    run attention_bwd dtype=bf16 head_dim=32 causal=true varlen=true deterministic=true --sm 75 --varlen 17,1,40 --heads 2:2

expect "deterministic on prep" 2 "deterministic=true applies to kernel=dkdv only" -- \
    emit attention_bwd kernel=prep deterministic=true --sm 80
expect "bad kernel" 2 "valid: dkdv, prep, convert, dq" -- emit attention_bwd kernel=fwd --sm 80
expect "bad head_dim" 2 "head_dim=44: must be a multiple of 8 from 8 to 256" -- run attention_bwd head_dim=44 --sm 80 --rows 4
expect "head_dim 512 refused naming why" 2 "head_dim=512 is refused on every target: the forward refuses it" -- \
    emit attention_bwd head_dim=512 --sm 90
expect "path=mma past head_dim 128 (136 pads to 256) on sm_80 refused naming why" 2 \
    "head_dim 136-256 runs on tensor cores only for f16 on sm_75's m16n8k8" -- \
    emit attention_bwd dtype=f16 head_dim=136 path=mma --sm 80
expect "path=mma with bf16 past head_dim 128 refused naming why" 2 "or f16 at head_dim 136-256 (sm_75's m16n8k8" -- \
    emit attention_bwd dtype=bf16 head_dim=256 path=mma --sm 75
# wave 25: bf16's dq at head_dim 136-256 on sm_75, the f16-scaled path on the same split (its dkdv: SIMT, refused above);
# head_dim 200 without causal spilled there: SIMT under auto, path=mma refused naming it
expect "sm_75 bf16 dq d256: path=auto on the f16-scaled m16n8k8" 0 "mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32" -- \
    emit attention_bwd kernel=dq dtype=bf16 head_dim=256 causal=true --sm 75
expect "path=mma for bf16 dq d200 without causal on sm_75 refused naming why" 2 "its dq at head_dim 200 without causal not yet" -- \
    emit attention_bwd kernel=dq dtype=bf16 head_dim=200 path=mma --sm 75
# wave 25: bf16's deterministic dkdv at head_dim 136-256 on sm_75 on the same split, holding the bf16 path's bound (the
# low parts, lib/attn_bwd_f16scaled.lua kv_frag), so path=auto takes it as path=mma does; the atomic one under path=mma
# refused naming it
expect "sm_75 bf16 deterministic dkdv d200: path=mma on the f16-scaled m16n8k8" 0 "mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32" -- \
    emit attention_bwd kernel=dkdv deterministic=true dtype=bf16 head_dim=200 causal=true path=mma --sm 75
grep -q "\.bf16" "$tmp/out" && bad "sm_75 bf16 d200 dkdv: no bf16 instruction" "found in PTX" || ok "sm_75 bf16 d200 dkdv: no bf16 instruction"
expect "sm_75 bf16 deterministic dkdv d200: path=auto on the f16-scaled m16n8k8" 0 "mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32" -- \
    emit attention_bwd kernel=dkdv deterministic=true dtype=bf16 head_dim=200 causal=true --sm 75
grep -q "\.bf16" "$tmp/out" && bad "sm_75 bf16 d200 dkdv under auto: no bf16 instruction" "found in PTX" || ok "sm_75 bf16 d200 dkdv under auto: no bf16 instruction"
expect "sm_75 bf16 deterministic dkdv d256: path=simt still on SIMT" 0 "fma.rn.f32" -- \
    emit attention_bwd kernel=dkdv deterministic=true dtype=bf16 head_dim=256 causal=true path=simt --sm 75
grep -q "mma" "$tmp/out" && bad "sm_75 bf16 d256 dkdv under simt: no mma" "found in PTX" || ok "sm_75 bf16 d256 dkdv under simt: no mma"
expect "path=mma for bf16's atomic dkdv d256 on sm_75 refused naming why" 2 "its atomic dkdv not yet" -- \
    emit attention_bwd kernel=dkdv dtype=bf16 head_dim=256 causal=true path=mma --sm 75
expect "kiln run: bf16 d200 deterministic path=mma on sm_75, the sequence checked, every block twice" 0 "PASS" -- \
    run attention_bwd kernel=dkdv deterministic=true dtype=bf16 head_dim=200 causal=top_left path=mma --sm 75 --rows 40 \
    --seq-k 50 --heads 4:2 --race
expect "kiln run: bf16 d256 deterministic path=auto on sm_75 (the split), the sequence checked, every block twice" 0 "PASS" -- \
    run attention_bwd kernel=dkdv deterministic=true dtype=bf16 head_dim=256 causal=true --sm 75 --rows 70 \
    --seq-k 50 --heads 4:2 --race
# the f16-scaled dkdv's walks over the heads of a GQA group scan each head's rows into one of two shared slots; the
# scan before the walks ran no tile between heads, so the next head's clearing of a slot raced with the reads of it
# (since wave 21, found by --race in wave 25): the d128 deterministic "passes" walk and the atomic d64 window walk
expect "kiln run: bf16 d128 deterministic top-left GQA 4:2 on sm_75 (the passes walk's head scan), race check" 0 "PASS" -- \
    run attention_bwd kernel=dkdv deterministic=true dtype=bf16 head_dim=128 causal=top_left --sm 75 --rows 70 \
    --seq-k 50 --heads 4:2 --race
expect "kiln run: bf16 d64 causal window GQA 4:2 on sm_75 (the atomic dkdv's marked walk), race check" 0 "PASS" -- \
    run attention_bwd kernel=dkdv dtype=bf16 head_dim=64 causal=true window=true --sm 75 --rows 70 --seq-k 50 \
    --heads 4:2 --window 20,3 --race
# wave 24: f16 at head_dim 136-256 on sm_75's m16n8k8, two warps a 16-key / 16-row group (lib/attn_bwd_mma.lua M.csplit);
# dropout stays on SIMT under auto and is refused under path=mma naming why
for s in "kernel=dkdv head_dim=256 causal=true" "kernel=dq head_dim=200 causal=top_left window=true softcap=true alibi=true" \
    "kernel=dkdv head_dim=160 deterministic=true"; do
    expect "sm_75 f16 $s: path=auto on the m16n8k8" 0 "mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32" -- \
        emit attention_bwd dtype=f16 $s --sm 75
done
expect "sm_75 f16 d256 dropout: path=auto keeps SIMT" 0 "fma.rn.f32" -- \
    emit attention_bwd kernel=dkdv dtype=f16 head_dim=256 causal=true dropout=true --sm 75
grep -q "mma" "$tmp/out" && bad "sm_75 f16 d256 dropout SIMT: no mma" "found in PTX" || ok "sm_75 f16 d256 dropout SIMT: no mma"
expect "path=mma for f16 d256 dropout on sm_75 refused naming why" 2 "without dropout, nor varlen in the atomic dkdv" -- \
    emit attention_bwd kernel=dkdv dtype=f16 head_dim=256 causal=true dropout=true path=mma --sm 75
expect "path=mma for the f16 d200 varlen atomic dkdv on sm_75 refused naming why" 2 "nor varlen in the atomic dkdv" -- \
    emit attention_bwd kernel=dkdv dtype=f16 head_dim=200 causal=true varlen=true path=mma --sm 75
expect "run f16 sm_75 head_dim 192 v_head_dim 128 (column split) causal GQA, race check" 0 "PASS" -- \
    run attention_bwd dtype=f16 head_dim=192 v_head_dim=128 causal=true --sm 75 --rows 40 --seq-k 50 --heads 4:2 --race
expect "run f16 sm_75 head_dim 128 v_head_dim 256 deterministic (column split), race check" 0 "PASS" -- \
    run attention_bwd dtype=f16 head_dim=128 v_head_dim=256 causal=true deterministic=true --sm 75 --rows 40 --heads 2:1 --race
expect "run f16 sm_75 head_dim 256 varlen deterministic every mask key (column split), race check" 0 "PASS" -- \
    run attention_bwd dtype=f16 head_dim=256 causal=true varlen=true deterministic=true window=true softcap=true alibi=true \
    --sm 75 --varlen 0,1,37,70 --varlen-k 3,0,37,65 --heads 2:1 --window 20,3 --softcap 30 --alibi --race
expect "run f16 sm_75 head_dim 256 causal GQA (column split), race check" 0 "PASS: every gradient within tolerance" -- \
    run attention_bwd dtype=f16 head_dim=256 causal=true --sm 75 --rows 40 --seq-k 50 --heads 4:2 --race
expect "run heads not dividing" 2 "key/value heads must divide" -- run attention_bwd --sm 80 --rows 4 --heads 3:2
# kiln run checks the sequence a kernel's launch description declares: dkdv's (prep, dkdv, convert/dq)
expect "run a single backward step is refused" 2 "kiln run checks dq, dk and dv of the whole sequence" -- \
    run attention_bwd kernel=prep --sm 80 --rows 4

finish "attention bwd cli"
