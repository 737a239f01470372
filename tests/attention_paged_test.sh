#!/usr/bin/env bash
# tests/attention_paged_test.sh - attention over a paged KV cache (paged=true) on the emulator against the float64 reference, and its bad input.
# Each run draws shuffled pages (every block-table entry a page of one permutation), entry 0 full,
# entry 1 empty (cache_seqlens 0), the rest drawn (templates/lib/attn_paged.ref.c); pages 16 .. 256.
set -u
. "$(dirname "$0")/cli_lib.sh"
P="PASS: every output within tolerance"

# split-KV decoding over pages (the serving path): mma (cp.async), register-staged sm_75, SIMT
expect "split-KV bf16 sm_80 d64 GQA 4:1, pages of 16, twice" 0 "$P" -- run attention dtype=bf16 head_dim=64 \
    paged=true splitkv=true --sm 80 --rows 1 --seq-k 300 --heads 4:1 --batch 3 --paged 16 --splits 5 --twice
expect "split-KV f16 sm_80 d128 causal, pages of 256, leftpad" 0 "$P" -- run attention dtype=f16 head_dim=128 \
    causal=true paged=true splitkv=true --sm 80 --rows 3 --seq-k 600 --heads 8:2 --batch 3 --paged 256 --splits 3 --leftpad
expect "split-KV f16 sm_75 (m16n8k8, staged) d64, pages of 32, batch_idx" 0 "$P" -- run attention dtype=f16 head_dim=64 \
    paged=true splitkv=true --sm 75 --rows 2 --seq-k 200 --heads 4:2 --batch 4 --paged 32 --splits 4 --batch-idx
expect "split-KV SIMT f32 d32 causal, pages of 16" 0 "$P" -- run attention dtype=f32 head_dim=32 causal=true \
    paged=true splitkv=true --sm 80 --rows 2 --seq-k 90 --heads 2:1 --batch 3 --paged 16 --splits 2
expect "split-KV SIMT bf16 sm_75 d96, pages of 128, leftpad + batch_idx" 0 "$P" -- run attention dtype=bf16 head_dim=96 \
    paged=true splitkv=true path=simt --sm 75 --rows 1 --seq-k 260 --heads 6:2 --batch 3 --paged 128 --splits 3 --leftpad --batch-idx
# (wave 24) f16 d256 on sm_75's m16n8k8 over pages with ALiBi (attention.lua m16n8k8_wide_spills), plain and split-KV;
# with a window or softcap, and the append, two warps a row group (they spilled on the 4-warp tiles)
expect "plain f16 sm_75 m16n8k8 d256 causal + alibi, pages of 16, leftpad + batch_idx" 0 "$P" -- run attention dtype=f16 \
    head_dim=256 causal=true alibi=true paged=true path=mma --sm 75 --rows 20 --seq-k 150 --heads 4:2 --batch 3 --paged 16 \
    --leftpad --batch-idx
expect "split-KV f16 sm_75 m16n8k8 d200 top_left + alibi, pages of 32" 0 "$P" -- run attention dtype=f16 head_dim=200 \
    causal=top_left alibi=true paged=true splitkv=true path=mma --sm 75 --rows 3 --seq-k 200 --heads 4:1 --batch 3 --paged 32 \
    --splits 3
expect "plain f16 sm_75 m16n8k8 d256 causal + window + softcap, pages of 16, leftpad" 0 "$P" -- run attention dtype=f16 \
    head_dim=256 causal=true window=true softcap=true paged=true path=mma --sm 75 --rows 20 --seq-k 150 --heads 4:2 --batch 3 \
    --paged 16 --window 30,0 --softcap 20 --leftpad
expect "append split-KV f16 sm_75 m16n8k8 d256 causal, pages of 16" 0 "$P" -- run attention dtype=f16 head_dim=256 \
    causal=true splitkv=true paged=true append=true path=mma --sm 75 --rows 2 --seq-k 120 --heads 4:2 --batch 2 --paged 16 \
    --append 3 --splits 3
expect "append f16 sm_75 m16n8k8 d256 causal, rotary neox, pages of 16" 0 "$P" -- run attention dtype=f16 head_dim=256 \
    causal=true paged=true append=true rotary=neox path=mma --sm 75 --rows 6 --seq-k 90 --heads 2:1 --batch 3 --paged 16 --append 6
expect "split-KV bf16 sm_80 d256, pages of 16" 0 "$P" -- run attention dtype=bf16 head_dim=256 \
    paged=true splitkv=true --sm 80 --rows 1 --seq-k 70 --heads 2:1 --batch 2 --paged 16 --splits 2
# the plain forward over pages (prefill against a cache): causal aligned to each entry's length
expect "plain bf16 sm_80 d64 causal, pages of 64, leftpad + batch_idx, twice" 0 "$P" -- run attention dtype=bf16 \
    head_dim=64 causal=true paged=true --sm 80 --rows 20 --seq-k 150 --heads 4:2 --batch 4 --paged 64 --leftpad --batch-idx --twice
expect "plain f16 sm_75 (staged) d128, pages of 16" 0 "$P" -- run attention dtype=f16 head_dim=128 paged=true \
    --sm 75 --rows 9 --seq-k 100 --heads 2:2 --batch 3 --paged 16
expect "plain SIMT f32 d64 causal, pages of 32" 0 "$P" -- run attention dtype=f32 head_dim=64 causal=true paged=true \
    --sm 80 --rows 17 --seq-k 70 --heads 2:1 --batch 3 --paged 32
expect "plain f16 sm_80 d64 window + softcap + alibi, pages of 16" 0 "$P" -- run attention dtype=f16 head_dim=64 \
    causal=true window=true softcap=true alibi=true paged=true --sm 80 --rows 12 --seq-k 120 --heads 4:1 --batch 3 \
    --paged 16 --window 30,0 --softcap 20 --alibi

# append=true: the new keys written into the pages at cache_seqlens (across page boundaries) and attended
# to in the same launch; the cache is checked bit for bit after the run (output "cache")
expect "append split-KV bf16 sm_80 d64, 20 new keys over pages of 16, leftpad, twice" 0 "$P" -- run attention \
    dtype=bf16 head_dim=64 paged=true append=true splitkv=true --sm 80 --rows 1 --seq-k 120 --heads 4:1 --batch 3 \
    --paged 16 --append 20 --splits 3 --leftpad --twice
grep -q "^  cache  max |err| 0.000e+00" "$tmp/out" && ok "append: the cache after the run is exact" || bad "append cache" "$(cat "$tmp/out")"
expect "append plain f16 sm_80 d128 causal (chunked prefill: seq_q = new keys), pages of 32, batch_idx" 0 "$P" -- \
    run attention dtype=f16 head_dim=128 causal=true paged=true append=true --sm 80 --rows 37 --seq-k 150 --heads 4:2 \
    --batch 3 --paged 32 --append 37 --batch-idx
expect "append split-KV f16 sm_75 (staged) d64, pages of 16" 0 "$P" -- run attention dtype=f16 head_dim=64 paged=true \
    append=true splitkv=true --sm 75 --rows 3 --seq-k 80 --heads 2:1 --batch 3 --paged 16 --append 3 --splits 2
expect "append SIMT f32 d32 causal, pages of 16, leftpad" 0 "$P" -- run attention dtype=f32 head_dim=32 causal=true \
    paged=true append=true --sm 80 --rows 5 --seq-k 64 --heads 2:2 --batch 3 --paged 16 --append 5 --leftpad
expect "append split-KV bf16 sm_80 d256 (16-key tiles), pages of 16" 0 "$P" -- run attention dtype=bf16 head_dim=256 \
    paged=true append=true splitkv=true --sm 80 --rows 1 --seq-k 64 --heads 2:1 --batch 2 --paged 16 --append 17 --splits 2
expect "append plain f16 sm_80 d96, pages of 16" 0 "$P" -- run attention dtype=f16 head_dim=96 paged=true append=true \
    --sm 80 --rows 6 --seq-k 48 --heads 2:1 --batch 2 --paged 16 --append 6
expect "append=true needs paged=true" 2 "append=true needs paged=true" -- emit attention append=true --sm 80
expect "append=true needs --append" 2 "append=true needs the new keys per sequence: give --append N" -- \
    run attention paged=true append=true --sm 80 --rows 1 --paged 16
expect "--append needs append=true" 2 "--append applies to append=true" -- \
    run attention paged=true --sm 80 --rows 1 --paged 16 --append 3
expect "--append larger than the cache is refused" 2 "--append 40 does not fit a cache of 32 keys" -- \
    run attention paged=true append=true --sm 80 --rows 1 --paged 16 --seq-k 32 --append 40

# rotary=neox|interleaved inside the append (lib/attn_rotary.lua): q and the new keys rotated at cache_seqlens + i
# (every query at cache_seqlens without causal/window); the cache holds the rotated keys bit for bit; the tables
# stop two positions short of the capacity, so the fullest entry's last new keys are past them (not rotated)
expect "rotary neox split-KV bf16 sm_80 d64 GQA 4:1, 20 new keys over pages of 16, leftpad, twice" 0 "$P" -- run attention \
    dtype=bf16 head_dim=64 paged=true append=true splitkv=true rotary=neox --sm 80 --rows 1 --seq-k 120 --heads 4:1 \
    --batch 3 --paged 16 --append 20 --splits 3 --leftpad --twice
grep -q "^  cache  max |err| 0.000e+00" "$tmp/out" && ok "rotary: the rotated cache is exact" || bad "rotary cache" "$(cat "$tmp/out")"
expect "rotary interleaved rotary_dim 64 of 128, f16 sm_80 causal chunked prefill, pages of 32, batch_idx" 0 "$P" -- \
    run attention dtype=f16 head_dim=128 causal=true paged=true append=true rotary=interleaved rotary_dim=64 --sm 80 \
    --rows 37 --seq-k 150 --heads 4:2 --batch 3 --paged 32 --append 37 --batch-idx
expect "rotary neox rotary_dim 32 of 64, split-KV f16 sm_75 (staged), pages of 16" 0 "$P" -- run attention dtype=f16 \
    head_dim=64 paged=true append=true splitkv=true rotary=neox rotary_dim=32 --sm 75 --rows 3 --seq-k 80 --heads 2:1 \
    --batch 3 --paged 16 --append 3 --splits 2
expect "rotary neox not causal: every query at cache_seqlens, f16 sm_80 d64 GQA 4:2" 0 "$P" -- run attention dtype=f16 \
    head_dim=64 paged=true append=true rotary=neox --sm 80 --rows 5 --seq-k 64 --heads 4:2 --batch 3 --paged 16 --append 5
expect "rotary neox SIMT f32 d32 causal, bf16 tables, leftpad" 0 "$P" -- run attention dtype=f32 head_dim=32 \
    causal=true paged=true append=true rotary=neox rotary_cs=bf16 --sm 80 --rows 5 --seq-k 64 --heads 2:2 --batch 3 \
    --paged 16 --append 5 --leftpad
expect "rotary interleaved SIMT bf16 sm_75 d96 rotary_dim 48, f32 tables, leftpad" 0 "$P" -- run attention dtype=bf16 \
    head_dim=96 paged=true append=true rotary=interleaved rotary_dim=48 rotary_cs=f32 path=simt --sm 75 --rows 4 --seq-k 64 \
    --heads 4:2 --batch 3 --paged 16 --append 4 --leftpad
# bf16 on sm_75's f16 tensor cores (lib/attn_f16scaled.lua, auto's path there): pages, split-KV, the append, rotary
expect "bf16 sm_75 f16-scaled (auto) d64 causal, pages of 16, leftpad + batch_idx, twice" 0 "$P" -- run attention dtype=bf16 \
    head_dim=64 causal=true paged=true --sm 75 --rows 20 --seq-k 150 --heads 4:2 --batch 4 --paged 16 --leftpad --batch-idx --twice
grep -q "kiln_attention_bf16_bf16_64_true_auto_true: 16 blocks of 256 threads" "$tmp/out" \
    && ok "bf16 sm_75 paged under auto: the scaled path's 256-thread blocks" || bad "bf16 sm_75 paged grid" "$(sed -n 2p "$tmp/out")"
expect "bf16 sm_75 f16-scaled d32 causal (lean tiles, the last trip unstaged), pages of 16, leftpad" 0 "$P" -- run attention \
    dtype=bf16 head_dim=32 causal=true paged=true --sm 75 --rows 20 --seq-k 150 --heads 2:1 --batch 3 --paged 16 --leftpad
expect "bf16 sm_75 f16-scaled split-KV d128, pages of 32" 0 "$P" -- run attention dtype=bf16 head_dim=128 causal=true \
    paged=true splitkv=true path=mma --sm 75 --rows 2 --seq-k 200 --heads 4:2 --batch 3 --paged 32 --splits 3
expect "bf16 sm_75 f16-scaled append d96, pages of 16" 0 "$P" -- run attention dtype=bf16 head_dim=96 causal=true \
    paged=true append=true --sm 75 --rows 6 --seq-k 90 --heads 2:1 --batch 3 --paged 16 --append 6
expect "bf16 sm_75 f16-scaled rotary neox d128 in the append, split-KV, leftpad" 0 "$P" -- run attention dtype=bf16 \
    head_dim=128 causal=true paged=true append=true splitkv=true rotary=neox --sm 75 --rows 3 --seq-k 100 --heads 4:2 \
    --batch 3 --paged 16 --append 3 --splits 2 --leftpad
expect "bf16 sm_75 f16-scaled rotary neox d96 in the append, split-KV (3 x 16 rows, 16-key tiles: 2 blocks), leftpad" 0 "$P" -- \
    run attention dtype=bf16 head_dim=96 paged=true append=true splitkv=true rotary=neox --sm 75 --rows 17 --seq-k 100 \
    --heads 6:2 --batch 2 --paged 16 --append 17 --splits 3 --leftpad
grep -q "kiln_attention_bf16_bf16_96_false_auto_true_true_true_neox: 24 blocks of 96 threads" "$tmp/out" \
    && ok "bf16 sm_75 d96 split-KV rotary: 48-row blocks" || bad "bf16 sm_75 d96 split-KV rotary grid" "$(sed -n 2p "$tmp/out")"
expect "bf16 sm_75 f16-scaled rotary interleaved rotary_dim 32 d64, f32 tables" 0 "$P" -- run attention dtype=bf16 \
    head_dim=64 causal=true paged=true append=true rotary=interleaved rotary_dim=32 rotary_cs=f32 path=mma --sm 75 --rows 5 \
    --seq-k 70 --heads 2:2 --batch 3 --paged 16 --append 5
expect "bf16 sm_75 f16-scaled d64 window + softcap + ALiBi with the append (16-row warps), leftpad" 0 "$P" -- run attention \
    dtype=bf16 head_dim=64 causal=true window=true softcap=true alibi=true paged=true append=true --sm 75 --rows 20 \
    --seq-k 150 --heads 4:2 --batch 3 --paged 32 --append 4 --window 30,2 --softcap 25 --leftpad
expect "rotary=neox needs append=true" 2 "rotary=neox needs append=true" -- emit attention paged=true rotary=neox --sm 80
expect "rotary_dim not a multiple of 16 is refused" 2 "rotary_dim=24: must be a multiple of 16 from 16 to head_dim=64" -- \
    emit attention head_dim=64 paged=true append=true rotary=neox rotary_dim=24 --sm 80
expect "rotary_dim above head_dim is refused" 2 "rotary_dim=80: must be a multiple of 16 from 16 to head_dim=64" -- \
    emit attention head_dim=64 paged=true append=true rotary=interleaved rotary_dim=80 --sm 80
expect "rotary_dim without rotary is refused" 2 "rotary_dim applies to rotary=neox or rotary=interleaved" -- \
    emit attention head_dim=64 paged=true append=true rotary_dim=32 --sm 80
expect "rotary=gptj is refused" 2 "bad value 'gptj' for 'rotary'" -- emit attention paged=true append=true rotary=gptj --sm 80
expect "emit declares the rotary tables" 0 "// kiln.meta tensor rotary_cos in seqlen_ro 16 align=16" -- \
    emit attention dtype=f16 head_dim=64 paged=true append=true rotary=neox rotary_dim=32 --sm 80
grep -qF "// kiln.meta scalar seqlen_ro" "$tmp/out" && ok "meta: scalar seqlen_ro" || bad "meta: scalar seqlen_ro" "missing"

# bad input: one line, exit 2
expect "a page size neither dividing nor a multiple of the key tile is refused" 2 \
    "page size 48 does not fit this kernel's 64-key tiles; valid: 16..64 dividing 64, or a multiple of 64" -- \
    run attention dtype=f16 head_dim=64 paged=true splitkv=true --sm 80 --rows 1 --seq-k 100 --paged 48
expect "a page of 8 keys is refused" 2 "page size 8 does not fit" -- \
    run attention dtype=f16 head_dim=64 paged=true --sm 80 --rows 1 --seq-k 100 --paged 8
expect "paged=true needs --paged" 2 "paged=true needs the page size: give --paged P" -- \
    run attention dtype=f16 head_dim=64 paged=true --sm 80 --rows 1 --seq-k 100
expect "--paged needs paged=true" 2 "--paged applies to a paged KV cache (add paged=true to the attention spec)" -- \
    run attention dtype=f16 head_dim=64 --sm 80 --rows 1 --seq-k 100 --paged 16
expect "--leftpad needs paged=true" 2 "--leftpad applies to a paged KV cache" -- \
    run attention dtype=f16 head_dim=64 --sm 80 --rows 1 --leftpad
expect "--paged 0 is refused" 2 "--paged" -- run attention dtype=f16 head_dim=64 paged=true --sm 80 --rows 1 --paged 0
expect "paged=maybe is refused" 2 "bad value 'maybe' for 'paged'" -- emit attention paged=maybe --sm 80

# the launch description: pages, tables, the fixed key tile
expect "emit declares the pages, the tables and key_tile" 0 "// kiln.meta tensor k in num_blocks page_size heads_kv 64 align=16" -- \
    emit attention dtype=bf16 head_dim=64 paged=true splitkv=true --sm 80
for l in "tensor block_table in batch max_blocks" "tensor cache_seqlens in batch" "tensor cache_batch_idx in? batch" \
         "tensor cache_leftpad in? batch" "scalar key_tile =64" "scalar page_size"; do
    grep -qF "// kiln.meta $l" "$tmp/out" && ok "meta: $l" || bad "meta: $l" "missing"
done
grep -q "kiln.meta scalar seq_k" "$tmp/out" && bad "paged: no seq_k scalar" "present" || ok "paged: no seq_k scalar"
finish attention_paged_test
