-- templates/attention.lua - attention forward, O = softmax(scale * Q K^T + mask) V (FlashAttention-2 structure).
--
-- Q, K, V, O are [batch, seq, heads, head_dim] by default; the batch, sequence and head
-- strides (in elements) are given at launch, head_dim is contiguous. Query heads are a
-- multiple of key/value heads (MHA, GQA, MQA): query head h reads kv head h / (heads_q / heads_kv).
-- Causal masking is aligned to the bottom-right corner as FlashAttention does: query i sees
-- key j iff j <= i + seq_k - seq_q. The softmax runs online in f32, in base 2 with
-- scale * log2(e) folded into the scores; exponentials use ex2.approx.f32. O is written in
-- `out`; the row log-sum-exp (natural log, of the scaled scores) in f32 as lse[batch, head, seq_q]
-- (lse may be NULL). A row that sees no key (causal or a window, seq_q > seq_k) gets O = 0 and
-- lse = +inf, as FlashAttention-2 writes it. causal=top_left aligns the diagonal top-left (torch
-- SDPA); window=true, softcap=true and alibi=true take their values at launch (lib/attn_mask.lua):
-- a block visits only the key tiles its rows' windows reach. head_dim: any multiple of 8 up to 256,
-- run on the tiles of the next of 32, 64, 96, 128, 256 (spec_of).
--
-- Grid: problem = {seq_q, heads_q, batch}, grid_tile = {block_m, 1, 1}.
--
-- Paths (chosen from the target's capabilities, see K.config):
--   mma:  f16/bf16 where the target has tensor-core mma for the dtype (b:mma issues m16n8k16,
--         or two m16n8k8 for f16 where only those exist). Block shape per head_dim from
--         MMA_TILES (warps x 16 or 32 query rows each, so one K/V fragment can feed two mma);
--         tiles in shared memory in the input dtype, XOR-swizzled by 16-byte chunk so that no
--         ldmatrix, cp.async or st.shared has a bank conflict; Q, K and V^T fragments read with
--         ldmatrix (.trans for V), Q kept in registers where they allow; S and O in f32
--         registers; P rounded to the input dtype and reused in registers as the A operand of
--         P V. K/V tiles stream through a cp.async pipeline of up to 3 stages, or (no cp.async)
--         through registers into two shared buffers, software pipelined. The K/V loop is split:
--         tiles every row sees whole run without mask work, only the diagonal / sequence-end
--         tiles after them pay for it. docs/attention.md has the tile table and the profile.
--   simt: f32 FMA with register tiling; any dtype on any target. Q, K and V tiles are
--         converted to f32 in shared memory; K and V take turns in one buffer.
--
-- splitkv=true (split-KV decoding, both paths): the block's rows are packed (query head of the
-- group, query) pairs of one kv head, its keys one of `splits` ranges of key tiles (a launch
-- parameter); it writes the range's f32 O / l and base-2 log-sum-exp to the workspace `ws`, and
-- attention_combine (meta.then_spec) merges the splits. See geometry() and split_store().
--
-- varlen=true (lib/attn_varlen.lua): packed sequences [total, heads, head_dim] with cu_seqlens_q/k (and
-- seqused_k); ctaid.z is the sequence, the grid is sized from max_seqlen_q, lse is [heads_q, total_q].
local util = require("lib.util")
local mask = require("lib.attn_mask")
local dropout = require("lib.attn_dropout")
local varlen = require("lib.attn_varlen")
local paged = require("lib.attn_paged")
local append = require("lib.attn_append")
local rotary = require("lib.attn_rotary")
local f16s = require("lib.attn_f16scaled")
local vdim = require("lib.attn_vdim")
local wgmma = require("lib.attn_wgmma")

local K = {
  doc = "attention forward: O = softmax(scale * Q K^T [causal]) V, lse saved as f32",
  params = {
    { name = "dtype", type = "dtype", default = "f16", doc = "Q, K, V dtype" },
    { name = "out", type = "dtype", default = "=dtype", doc = "O dtype" },
    { name = "head_dim", type = "int", default = 64, min = 8, max = 512,
      doc = "head dimension: a multiple of 8 up to 256 (tiles of the next width of 32, 64, 96, 128, 256, the columns past head_dim zero); 512 is refused" },
    vdim.KEY,
    mask.CAUSAL,
    { name = "path", type = "enum", default = "auto", values = { "auto", "mma", "simt", "wgmma" },
      doc = "auto: tensor cores where the target has them for the dtype (sm_75: f16 m16n8k8 at every head_dim with every key; bf16 on f16 ones, power-of-two scaled, every key up to head_dim 128, above it every key but rotary (and below 256 split-KV with a window, ALiBi and a causal mask together); sm_90a: the mma.sync kernel until the wgmma one has run on a GPU); mma; simt: fp32 FMA; wgmma: sm_90a's TMA + wgmma kernel (FlashAttention-3's structure, opt-in)" },
    { name = "splitkv", type = "bool", default = false, hide_default = true,
      doc = "split-KV decoding: each block runs one of `splits` (a launch value) key ranges into an f32 workspace; attention_combine merges them" },
    mask.KEYS[1], mask.KEYS[2], mask.KEYS[3], dropout.KEYS[1], dropout.KEYS[2], varlen.KEY, paged.KEY, append.KEY,
    rotary.KEYS[1], rotary.KEYS[2], rotary.KEYS[3],
  },
}

local LOG2E = 1.4426950408889634
local NEG_INF, POS_INF = -math.huge, math.huge

-- SIMT geometry per head_dim: query rows and keys per tile (shared memory stays under 48 KiB
-- with every tile in f32). 128 threads as 16 row groups x 8 column groups.
local SIMT_TILES = {
  [32] = { m = 64, n = 64 }, [64] = { m = 64, n = 32 }, [96] = { m = 32, n = 32 },
  [128] = { m = 32, n = 32 }, [256] = { m = 16, n = 16 },
}
local SIMT_THREADS, SIMT_TC = 128, 8

-- Tensor-core tiles per head_dim, in order of preference; config takes the first whose shared
-- memory (Q block_m x d, plus stages x (K + V) of n x d) fits the target's opt-in limit (dynamic
-- shared memory when it exceeds the static limit). warps x mt m-tiles of 16 query rows per warp:
-- with mt = 2 (32 rows a warp, FlashAttention-2's shape) every K and V fragment a warp reads from
-- shared memory feeds two mma. q_regs: Q fragments stay in registers for the whole K/V loop.
-- min_blocks: take the entry only if that many blocks fit an SM's shared memory (a deeper pipeline
-- is not worth halving the warps an SM holds: sm_86/89 keep 2 stages at d <= 96).
-- stages: cp.async pipeline depth; targets without cp.async use 2 as two shared buffers filled
-- through registers (software pipelined), 1 as one buffer. Registers per thread decide the shape:
-- O takes mt * d / 2, S mt * n / 2, Q in registers mt * d / 4 of the 255, and LLVM keeps the
-- loop-invariant fragment addresses in registers too. d = 128 with 32-row warps (O alone 128) spilled
-- on sm_90 with 32-key tiles and lost to 8 warps x 16 rows in the profile with 16-key tiles (the O
-- rescale per tile grows per mma), so d = 128 runs 8 warps x 16 rows: the same 128 rows per block
-- (K/V read once per 128 queries). docs/attention.md has the ptxas and profile figures behind each row.
local MMA_TILES = {
  [32] = { { warps = 4, mt = 2, n = 64, stages = 3, min_blocks = 2, q_regs = true }, { warps = 4, mt = 2, n = 64, stages = 2, q_regs = true } },
  [64] = { { warps = 4, mt = 2, n = 64, stages = 3, min_blocks = 2, q_regs = false }, { warps = 4, mt = 2, n = 64, stages = 2, q_regs = false } },
  [96] = { { warps = 4, mt = 2, n = 32, stages = 3, min_blocks = 2, q_regs = false }, { warps = 4, mt = 2, n = 32, stages = 2, q_regs = false } },
  [128] = { { warps = 8, mt = 1, n = 64, stages = 3, q_regs = true }, { warps = 8, mt = 1, n = 64, stages = 2, q_regs = true } },
  [256] = { { warps = 4, mt = 1, n = 32, stages = 2, q_regs = false }, { warps = 4, mt = 1, n = 16, stages = 2, q_regs = false },
            { warps = 4, mt = 1, n = 16, stages = 1, q_regs = false } },
}
-- Where the S = Q K^T k-steps are an IR loop on the mma path (cfg.roll_qk, mma_scores_rolled; docs/jit.md
-- "Wave 22"): fewer IR instructions for LLVM, and ptxas unrolls the constant-trip loop again. Measured against
-- the unrolled k-steps (ptxas 13, SASS = .text / 16): on sm_80 (quick matrix) the plain specs of d32, d64 and d128
-- keep or lower their SASS count (0 to -120); so do sm_86 and sm_89 (d32/64/128, causal or not); sm_90, sm_100
-- and sm_120 gain +8 to +32 on the same specs (not rolled there). Which SMs is a ptxas fact, in the SM table's
-- ptxas rows (gen/gen_target.c, target.ptxas_rolled_mma_k); the rest is policy, here. d256 (16 k-steps, Q from
-- shared memory) +80 to +168 on sm_80; d96's upper chunks swizzle with other bits (frag_at does not hold). With
-- dropout or the score keys (softcap, ALiBi, with a window) +8 to +64 SASS at d32-d128 on sm_80; padded head dims
-- (d40 in d64) and v_head_dim != head_dim without causal +8 on sm_80/86/89: those keep the unrolled k-steps.
local ROLL_QK = { dims = { [32] = true, [64] = true, [128] = true } }
-- With the score keys (softcap, alibi: per-score work and per-row values live across the loop) the
-- 32-row warps of d96 spill on sm_90 (measured: 8-20 bytes, 255 registers with every key on): such
-- specs take these entries first where the table has them.
local MMA_TILES_KEYS = {
  [96] = { { warps = 4, mt = 1, n = 32, stages = 3, min_blocks = 2, q_regs = true }, { warps = 4, mt = 1, n = 32, stages = 2, q_regs = true } },
}
-- Split-KV with the score keys at d256: two stages of 32-key tiles spill 8-16 bytes on sm_100/103 (255
-- registers with every key on), two of 16-key tiles 4 bytes there; one stage of 32-key tiles takes 240-250
-- registers on sm_80..121 and spills nothing (decoding has many blocks per SM to hide the loads).
local SPLIT_TILES_KEYS = {
  [256] = { { warps = 4, mt = 1, n = 32, stages = 1, q_regs = false } },
}
-- append=true (lib/attn_append.lua): the k/v row functions pick the pages or k_new per chunk, which costs
-- registers: append takes the score keys' entries above, and d256 (plain and split-KV) 16-key tiles (with the
-- 32-key ones it spilled 8 bytes on sm_120, split-KV 4 on sm_90 and 44 with one stage; d96 32-row warps 16).
local APPEND_TILES = { [256] = { MMA_TILES[256][2], MMA_TILES[256][3] } }
-- rotary= inside the append (lib/attn_rotary.lua) on targets without cp.async: the staged K tile is rotated as
-- it loads (partner chunk, table entries), which costs registers: split-KV d128 with 32-key tiles spilled 4
-- bytes on sm_75 (16-key tiles do not), the plain causal d96 with Q in registers 12 (Q from shared memory
-- does not).
local ROTARY_TILES_STAGED = {
  plain = { [96] = { { warps = 4, mt = 1, n = 32, stages = 2, q_regs = false } } },
  split = { [128] = { { warps = 4, mt = 1, n = 16, stages = 2, q_regs = false } } },
}
-- The paged plain forward with the score keys (softcap, alibi) at d64: the page lookups per K/V chunk on top of
-- the keys' per-score work spilled the 64-key tiles (sm_80: 8 bytes with append, sm_86: 8 without and 56 with
-- append, 255 registers); 32-key tiles take 196-219 and spill nothing. Without cp.async (sm_75) the rotary in
-- the append on top spilled the 32-row warps 12-16 bytes: 16-row warps there.
local PAGED_TILES_KEYS = {
  [64] = { { warps = 4, mt = 2, n = 32, stages = 3, min_blocks = 2, q_regs = false }, { warps = 4, mt = 2, n = 32, stages = 2, q_regs = false } },
}
local PAGED_TILES_KEYS_STAGED_ROTARY = {
  [64] = { { warps = 4, mt = 1, n = 32, stages = 2, q_regs = false } },
}
-- Targets without cp.async (sm_75: f16 m16n8k8) hold the next K/V tile in registers
-- while computing (n * d / 64 of them a thread), so the shapes are one size smaller; d256 (head_dim 136-256,
-- since wave 23: has_mma) one buffer, nothing staged (ptxas sm_75: 244 registers, 0 spills).
local MMA_TILES_STAGED = {
  [32] = { { warps = 4, mt = 2, n = 64, stages = 2, q_regs = true } },
  [64] = { { warps = 4, mt = 2, n = 32, stages = 2, q_regs = false } },
  [96] = { { warps = 4, mt = 1, n = 32, stages = 2, q_regs = true } },
  [128] = { { warps = 4, mt = 1, n = 32, stages = 2, q_regs = false } },
  [256] = { { warps = 4, mt = 1, n = 16, stages = 1, q_regs = false } },
}

-- With dropout (a Philox call per C fragment: its 4 words and the round keys live beside S), the 32-row
-- warps of d32 and d64 spill (ptxas: 24-96 bytes on sm_75..120, d64 28 bytes even without a mask key):
-- 16-row warps there. d96 (and the dims padded to it, 80/88) with 32-row warps spilled too (ptxas CUDA 13, 255
-- registers: 28-64 bytes on sm_80..100 without a mask key, 8-48 with window, d88 32-56): it takes the score keys'
-- d96 entries (16-row warps, Q in registers), which the keyed dropout variants already ran.
local MMA_TILES_DROP = {
  [32] = { { warps = 4, mt = 1, n = 64, stages = 3, min_blocks = 2, q_regs = true }, { warps = 4, mt = 1, n = 64, stages = 2, q_regs = true } },
  [64] = { { warps = 4, mt = 1, n = 64, stages = 3, min_blocks = 2, q_regs = true }, { warps = 4, mt = 1, n = 64, stages = 2, q_regs = true } },
  [96] = MMA_TILES_KEYS[96],
}
local MMA_TILES_STAGED_DROP = {
  [32] = { { warps = 4, mt = 1, n = 64, stages = 2, q_regs = true } },
}
-- ... and with a window too at a padded head_dim (the real width below the tile's: each chunk's column test
-- lives beside the window's bounds and dropout's words), sm_75's staged tiles spilled (ptxas CUDA 13, 255
-- registers: d88 4 bytes, d104-120 8-24, d120 with all three mask keys 8): d88 (on the 96 tile) keeps Q in
-- shared memory (240-250 registers), d104-120 (on the 128 tile) take 16-key tiles (184-220); 0 spills.
local MMA_TILES_STAGED_DROP_PADDED_WINDOW = {
  [96] = { { warps = 4, mt = 1, n = 32, stages = 2, q_regs = false } },
  [128] = { { warps = 4, mt = 1, n = 16, stages = 2, q_regs = false } },
}

-- Split-KV decoding (splitkv=true): a block owns 64 packed query rows (4 warps x 16) of one kv head:
-- the heads_q / heads_kv query heads that share the kv head times the seq_q rows, so one K/V tile
-- read from global memory feeds every query of the group (FlashDecoding's "pack GQA"), and one
-- `split` of the key tiles. Decoding is bound by reading K and V once, not by the tensor cores:
-- 16-row warps keep registers low enough for a 3-stage pipeline of 64-key tiles (the bytes in
-- flight are what a memory-bound loop needs). docs/attention.md has the evidence.
local SPLIT_TILES = {
  [32] = { { warps = 4, mt = 1, n = 64, stages = 3, q_regs = true }, { warps = 4, mt = 1, n = 64, stages = 2, q_regs = true } },
  [64] = { { warps = 4, mt = 1, n = 64, stages = 3, q_regs = true }, { warps = 4, mt = 1, n = 64, stages = 2, q_regs = true } },
  [96] = { { warps = 4, mt = 1, n = 64, stages = 3, q_regs = true }, { warps = 4, mt = 1, n = 64, stages = 2, q_regs = true } },
  [128] = { { warps = 4, mt = 1, n = 64, stages = 3, q_regs = true }, { warps = 4, mt = 1, n = 64, stages = 2, q_regs = true } },
  [256] = MMA_TILES[256],
}
local SPLIT_TILES_STAGED = {
  [32] = { { warps = 4, mt = 1, n = 32, stages = 2, q_regs = true } },
  [64] = { { warps = 4, mt = 1, n = 32, stages = 2, q_regs = true } },
  [96] = MMA_TILES_STAGED[96],
  [128] = MMA_TILES_STAGED[128],
  [256] = MMA_TILES_STAGED[256],
}

-- head_dim: the tile tables have columns for these widths; any other multiple of 8 runs the tiles
-- of the next width, its columns past head_dim zero in shared memory (Q and K add 0 to the scores,
-- V gives 0 columns that are not stored). Templates see the padded width as spec.head_dim and the
-- real one as spec.dim (spec_of).
local TILE_DIMS = { 32, 64, 96, 128, 256 }
local function padded(d)
  for _, w in ipairs(TILE_DIMS) do if d <= w then return w end end
end

-- The spec as the builders read it: mask keys normalized (lib/attn_mask.lua), head_dim padded.
local function spec_of(spec)
  local s = mask.spec(spec)
  if s == spec then return spec end
  s.dim = spec.head_dim
  s.head_dim = padded(spec.head_dim) or spec.head_dim
  return vdim.apply(s) -- (v_head_dim: s.vdim, s.vspec; the width holding both dims)
end

function K.check(spec)
  local d = spec.head_dim
  if append.check(spec) then return append.check(spec) end
  if rotary.check(spec) then return rotary.check(spec) end
  if d % 8 ~= 0 or d > 512 then return string.format("head_dim=%d: must be a multiple of 8 from 8 to 256", d) end
  if d > 256 then
    return string.format("head_dim=%d is refused on every target: O alone would need %d f32 registers a thread on the tensor-core path (16 query rows a warp; ptxas allows 255), and the SIMT path's f32 tiles %d bytes of static shared memory (48 KiB); head_dim goes up to 256", d, d // 2, (16 + 16) * (d + 4) * 4 + 16 * 24 * 4)
  end
  local why = dropout.check(spec) or vdim.check(spec)
  if why then return why end
  spec = spec_of(spec)
  if spec.paged and (spec.varlen or spec.dropout) then
    return string.format("paged=true with %s is not built: the paged KV cache serves fixed-length batches at inference (drop %s)",
                         spec.varlen and "varlen=true" or "dropout=true", spec.varlen and "varlen=true" or "dropout=true")
  end
  if spec.varlen and spec.splitkv then
    return "varlen=true with splitkv=true is not built: varlen runs the one-pass kernel (drop splitkv=true; split-KV decoding takes fixed-length batches)"
  end
  if spec.path == "mma" and spec.dtype == "f32" then
    return "path=mma needs dtype f16 or bf16 (f32 runs on path=simt)"
  end
end

-- Whether the target has tensor-core mma for this dtype and head_dim. Where only m16n8k8 exists (sm_75:
-- each 16-deep step takes two instructions, no cp.async), f16 at head_dim 136-256 (the 256 tile) runs
-- MMA_TILES_STAGED[256]: 4 warps x 16 rows, 16-key tiles, one buffer (Q from shared memory; O's 128 f32
-- accumulators a thread fit beside S: ptxas sm_75 CUDA 13, 244 registers plain, 246 causal, 0 spills; 48 KiB).
-- The keys that spilled there take MMA_TILES_STAGED_OSPLIT (wave 24; before, the SIMT path) (ptxas sm_75, 255 registers): dropout (16-20 bytes plain
-- and causal, 36-52 with the mask keys), the in-kernel append (8-16 bytes, 72-96 with the mask keys), and of the
-- mask keys (window, softcap, ALiBi) with varlen or the paged KV cache (wave 24, each combination measured at d256,
-- every causal form): with varlen only window, softcap and ALiBi together under top-left causal (4 bytes; head_dim
-- 248 8), the other 20 combinations 0 (248-255 registers; 160-248 with the two or three keys that hold a window 0,
-- 190-255); over pages (split-KV too) all but ALiBi alone, which holds at 252-255 registers, 0 spills: window 8
-- bytes (split-KV 4), softcap 4-12 (split-KV 0), softcap and ALiBi 0-8, all three 40-44 (split-KV 8).
local function m16n8k8_wide_spills(spec)
  if spec.dropout or spec.append then return true end
  if spec.varlen then return spec.top_left and spec.window and spec.softcap and spec.alibi end
  return spec.paged and (spec.window or spec.softcap)
end
-- (wave 24) f16 at d256 on sm_75 with the keys that spilled on MMA_TILES_STAGED[256] (m16n8k8_wide_spills): the
-- column split bf16 runs (lib/attn_f16scaled.lua TILES[256], attention.lua osplit): 8 warps, two a 16-row group, both
-- computing the group's S (Q's rows from shared memory), each accumulating half of O's columns (64 accumulators a
-- thread), one 16-key buffer: 64 rows a block, 48 KiB. ptxas sm_75 CUDA 13, every f16 variant at 136-256 of the full
-- matrix (73): 0 spills, those on these tiles 163-226 registers (dropout 172-212, the append 163-206, rotary 169-226). Not the
-- default: it doubles S's mma (both warps of a pair), and plain f16 d256 is tensor-bound (T4 estimate 40,960 clocks
-- causal 256 x 256).
local MMA_TILES_STAGED_OSPLIT = {
  [256] = { { warps = 8, mt = 1, n = 16, stages = 1, q_regs = false, osplit = 2 } },
}
local function has_mma(spec, target)
  if spec.dtype == "f32" or not target.ldmatrix then return false end
  if target.mma_m16n8k16 then return true end
  -- bf16 on f16-only tensor cores: exact power-of-two scaling to f16 (lib/attn_f16scaled.lua)
  if spec.dtype == "bf16" then return f16s.serves(spec, target) end
  return spec.dtype == "f16" and target.mma_m16n8k8_f16
end

local function config_mma(spec, target)
  local d, eb = spec.head_dim, util.dtype_bytes[spec.dtype]
  local pick, bytes, stages
  local tiles = spec.splitkv and (target.cp_async and SPLIT_TILES or SPLIT_TILES_STAGED)
    or (target.cp_async and MMA_TILES or MMA_TILES_STAGED)
  local keyed = (spec.softcap or spec.alibi or spec.append) and target.cp_async and (spec.splitkv and SPLIT_TILES_KEYS or MMA_TILES_KEYS)
  if keyed and keyed[d] then tiles = keyed end
  local drop = spec.dropout and (target.cp_async and MMA_TILES_DROP or MMA_TILES_STAGED_DROP)
  if drop and drop[d] then tiles = drop end
  if spec.dropout and spec.window and not target.cp_async and (spec.dim or d) < d and MMA_TILES_STAGED_DROP_PADDED_WINDOW[d] then
    tiles = MMA_TILES_STAGED_DROP_PADDED_WINDOW
  end
  if spec.append and target.cp_async and APPEND_TILES[d] then tiles = APPEND_TILES end
  local rts = rotary.on(spec) and not target.cp_async and ROTARY_TILES_STAGED[spec.splitkv and "split" or "plain"]
  if rts and rts[d] then tiles = rts end
  if spec.paged and not spec.splitkv and (spec.softcap or spec.alibi) then
    local pk = target.cp_async and PAGED_TILES_KEYS or (rotary.on(spec) and PAGED_TILES_KEYS_STAGED_ROTARY)
    if pk and pk[d] then tiles = pk end
  end
  if f16s.applies(spec, target) then tiles = f16s.tiles(spec, tiles) end
  if not target.cp_async and spec.dtype == "f16" and d == 256 and m16n8k8_wide_spills(spec) then tiles = MMA_TILES_STAGED_OSPLIT end
  for _, t in ipairs(tiles[d]) do
    local threads = t.warps * 32
    stages = target.cp_async and t.stages or math.min(t.stages, 2)
    -- register staging needs each tile to divide evenly among the threads
    local ok = target.cp_async or stages < 2 or (t.n * d // 8) % threads == 0
    -- (osplit: that many warps share each 16 query rows, each holding its share of O's columns)
    bytes = (t.warps * 16 * t.mt // (t.osplit or 1) + 2 * stages * t.n) * d * eb
    if f16s.applies(spec, target) then bytes = bytes + f16s.smem_bytes(t) end
    pick = t
    -- min_blocks: the entry is worth it only if that many blocks share an SM (an SM's shared
    -- memory is the opt-in limit plus the 1 KiB the driver reserves per block)
    local per_sm = (t.min_blocks or 1) * (bytes + 1024) <= target.smem_optin_max + 1024
    if ok and bytes <= target.smem_optin_max and per_sm then break end
  end
  local bm = pick.warps * 16 * pick.mt // (pick.osplit or 1)
  local dynamic = bytes > target.smem_static_max
  -- (ROLL_QK: plain specs of its head dims, neither padded nor with a v_head_dim of their own, where ptxas keeps
  -- the rolled loop's SASS: target.ptxas_rolled_mma_k)
  local roll_qk = ROLL_QK.dims[d] and target.ptxas_rolled_mma_k and not f16s.applies(spec, target)
    and not (spec.dropout or spec.softcap or spec.alibi or spec.window) and (spec.dim or d) == d and spec.vdim == d
  return {
    block = pick.warps * 32, threads = pick.warps * 32, grid_tile = { bm, 1, 1 }, path = "mma",
    block_m = bm, block_n = pick.n, mt = pick.mt, stages = stages, cp_async = target.cp_async,
    ld = d, dynamic_smem = dynamic and bytes or nil,
    q_in_regs = pick.q_regs, roll_qk = roll_qk or nil, align = 16, rows_per_block = bm, max_registers = 255,
    f16s = f16s.applies(spec, target) and stages == 2 or nil,
    f16s_slots_in_q = f16s.applies(spec, target) and pick.slots_in_q or nil, -- (lib/attn_f16scaled.lua)
    f16s_lean = f16s.applies(spec, target) and pick.lean or nil, -- (lib/attn_f16scaled.lua TILES)
    osplit = pick.osplit, -- (lib/attn_f16scaled.lua TILES[256]: warps that share 16 query rows, each O's columns / osplit)
    seq_shared = f16s.applies(spec, target) and pick.osplit and spec.varlen or nil, -- (varlen: the lengths read again each trip, build_mma's seq_shared)
    f16s_unstaged_last = f16s.applies(spec, target) and stages == 2 and f16s.unstaged_last(spec) or nil,
  }
end

local function config_simt(spec)
  local t = SIMT_TILES[spec.head_dim]
  local tr = SIMT_THREADS // SIMT_TC
  return {
    block = SIMT_THREADS, grid_tile = { t.m, 1, 1 }, path = "simt",
    block_m = t.m, block_n = t.n, tc = SIMT_TC, tr = tr, rm = t.m // tr, cn = t.n // SIMT_TC,
    vec = 4, align = 16, -- 4 elements a thread: 16-byte st.shared of f32 (8 of f16 would be 32 B: 2-way conflicts)
    rows_per_block = t.m, max_registers = 255,
  }
end

function K.config(spec, target)
  spec = spec_of(spec)
  local wg = wgmma.config(spec, target) -- sm_90a: TMA + wgmma (lib/attn_wgmma.lua)
  if wg then return wg end
  local mma = has_mma(spec, target)
  if spec.path == "mma" and not mma and f16s.applies(spec, target) then
    error(string.format("path=mma: sm_%d runs bf16 on its f16 tensor cores up to head_dim 128 with every key, and at head_dim 136-256 with every key but rotary inside the append (and, below 256, split-KV with a window and ALiBi under a causal mask) (head_dim=%d); use path=auto or simt", target.sm, spec.dim))
  end
  if spec.path == "mma" and not mma then
    error(string.format("path=mma: sm_%d has no tensor-core mma for %s (use path=auto or simt)", target.sm, spec.dtype))
  end
  local cfg = (spec.path == "simt" or not mma) and config_simt(spec) or config_mma(spec, target)
  if spec.splitkv then
    -- grid {splits, heads_kv * ceil(heads_q / heads_kv * seq_q / block_m), batch}: the runtime
    -- computes it (rows_per_block = block_m), then launches the combine kernel over the workspace
    cfg.grid_tile = { 1, 1, 1 }
    cfg.then_spec = string.format("attention_combine out=%s head_dim=%d", spec.out, spec.vdim) -- (O is v_head_dim wide)
  end
  -- kiln's IR pipeline (docs/jit.md), checked variant by variant against default<O3> by the ptxas
  -- matrix; the tiles where it gave more SASS instructions keep default<O3> (measured: head_dim 96
  -- causal with a 2-stage cp.async pipeline, 2824 vs 2808 SASS instructions).
  local o3 = spec.head_dim == 96 and spec.causal and cfg.stages == 2 and cfg.cp_async
  -- (and split-KV SIMT head_dim 64 causal: 130 registers, 3 blocks an SM, vs 128 and 4 with default<O3>)
  o3 = o3 or (spec.splitkv and cfg.path == "simt" and spec.head_dim == 64 and spec.causal)
  -- (and with softcap or alibi: head_dim 32, and split-KV head_dim 64: 8-112 more SASS instructions
  -- than default<O3>, 0.1-1.3 %; elsewhere with the keys default<O3> spilled, d64 sm_86/89, d256 sm_80)
  o3 = o3 or ((spec.softcap or spec.alibi) and (spec.head_dim == 32 or (spec.splitkv and spec.head_dim == 64)))
  -- (and bf16 on sm_75's f16-scaled tiles with dropout and a mask key at d96: kiln's pipeline spilled 8 bytes with
  -- window, softcap and ALiBi together, 255 registers; default<O3> 254 and none; at d64 it gave 72 more SASS
  -- instructions than default<O3> with all three and dropout_mask, 1.1 %)
  o3 = o3 or (cfg.f16s and spec.dropout and (spec.head_dim == 96 or spec.head_dim == 64)
              and (spec.window or spec.softcap or spec.alibi))
  -- (and, since the forward's span form (issue 28: S's exact SIMT branch), bf16 sm_75 causal with the in-kernel
  -- append at d64 or with rotary, and d128 with v_head_dim 64: 8-96 more SASS instructions than default<O3>,
  -- 0.1-0.9 %; default<O3>'s hot loop is no slower there (kiln run --profile, KILN_PIPELINE=o3: mma : other
  -- 7.98 vs 8.04 d64 paged append, 9.33 vs 9.44 d128 append rotary, 6.44 vs 6.69 d128 v64))
  o3 = o3 or (cfg.f16s and spec.causal and ((spec.append and not spec.splitkv and (spec.head_dim == 64 or rotary.on(spec)))
                                            or spec.vdim < spec.head_dim))
  -- (and bf16 on sm_75's d128 32-key tiles, causal, with the diagonal's per-warp skip: kiln's pipeline spilled 4 bytes
  -- with varlen (255 registers; default<O3> none), and default<O3> gave fewer instructions a warp trip in the tile loop,
  -- e.g. dense 202 -> 190 in the unmasked trip's P V block; T4 estimate (attention_f16scaled_test) dense 1.31x ->
  -- 1.21x, paged 1.39x -> 1.30x)
  o3 = o3 or (cfg.f16s_slots_in_q and spec.causal)
  -- (and bf16 on sm_75's d96 lean tiles (6 x 32 rows, 16-key tiles; head_dim 72-96), causal: T4 estimate
  -- (attention_f16scaled_test) 1.232x -> 1.190x f16's, 249 registers, 0 spills; plain keeps kiln's, 1.035x -> 1.027x)
  o3 = o3 or (cfg.f16s_lean and spec.causal and spec.head_dim == 96)
  -- (and bf16 on sm_75's d64 tiles not causal, not split-KV, whose last trip stages nothing since wave 18
  -- (lib/attn_f16scaled.lua unstaged_last): kiln's pipeline gave 16 more SASS instructions than default<O3> there)
  o3 = o3 or (cfg.f16s_unstaged_last and spec.head_dim == 64 and not spec.causal and not spec.splitkv)
  -- (and the SIMT tiles with dropout under a causal mask, no window, softcap or ALiBi: kiln's pipeline gives 1-8 %
  -- fewer SASS instructions but 6-31 more registers, and where default<O3> sits just under an occupancy step that
  -- costs a block an SM (128 threads: 168 registers for 3 blocks, 128 for 4). Measured (ptxas, kiln -> default<O3>):
  -- d64 on every SM (sm_75 191 -> 162, sm_80 193 -> 162, sm_90 181 -> 161, sm_100 183 -> 160, sm_120 182 -> 163:
  -- 2 -> 3 blocks; varlen the same); below sm_90 also d32 (174 -> 166-168), d96 (174-176 -> 168): 2 -> 3 blocks,
  -- and the 16-row tiles past d128 (d256 137 -> 125, varlen d160/200/248/256 129-142 -> 116-128): 3 -> 4 blocks.
  -- Kiln's pipeline stays where it loses no block: d128, varlen d8/d32/d40/d80, v_head_dim 128 (e.g. sm_80 d192
  -- 124 vs 110 registers, 4 blocks both, 1120 vs 1216 SASS), the mask keys, and from sm_90 on d32, d96 and d256 (sm_120
  -- d256 1208 vs 1320 SASS instructions, 130 registers both). With the mask keys d64 on sm_90-110 loses the block
  -- too (sm_90 182 vs 167, sm_100 186, sm_103 188, sm_110 186 vs 167), not varlen or with dropout_mask (188 vs 189),
  -- nor on sm_120/121 (186 vs 189, 2648 vs 2688 SASS instructions) or below sm_90 (sm_80 188 vs 178, 2 blocks both).)
  -- (these four rules read the SM groups where they were measured as ptxas facts, target.ptxas_*: gen/gen_target.c)
  local mask_keys = spec.window or spec.softcap or spec.alibi
  o3 = o3 or (cfg.path == "simt" and spec.dropout and spec.causal and spec.vdim == spec.dim
              and ((not mask_keys and (spec.dim == 64 or (target.ptxas_dropout_o3 and (spec.dim == 96 or spec.head_dim == 256
                                                                                or (spec.dim == 32 and not spec.varlen)))))
                   or (mask_keys and spec.dim == 64 and target.ptxas_mask_dropout_o3
                       and not spec.varlen and not spec.dropout_mask)))
  -- (and the cp.async tensor-core tile of d32 with dropout under a causal mask, no mask keys, not varlen, below sm_90:
  -- kiln's pipeline 176 registers, 2 blocks an SM, 2296-2304 SASS instructions; default<O3> 168, 3 blocks, 2336
  -- (sm_80, 86, 89, f16 and bf16). From sm_90 on kiln's is no worse (sm_90 156 vs 157, sm_100 155 vs 160, sm_120
  -- 161 vs 168 registers, 24-32 fewer SASS instructions), and varlen keeps 2 blocks either way (sm_80 194 vs 174).)
  o3 = o3 or (cfg.path == "mma" and cfg.cp_async and target.ptxas_dropout_o3 and spec.dropout and spec.causal
              and spec.dim == 32 and not spec.varlen and not (spec.window or spec.softcap or spec.alibi))
  -- (and the cp.async tensor-core tiles that write the dropout keep mask (dropout_mask, the tests' key; d64 with
  -- window, softcap and ALiBi): kiln's pipeline gave 96-280 more SASS instructions than default<O3> on every SM
  -- from sm_80 (sm_80 7176 vs 7064, varlen 7192 vs 7096; sm_86/89 7160 vs 6992; sm_90 7264 vs 7024; sm_120 7312
  -- vs 7032), the same blocks an SM; sm_75's register-staged tiles keep kiln's (8096 vs 8392))
  o3 = o3 or (cfg.path == "mma" and cfg.cp_async and spec.dropout_mask)
  -- (and GPT-NeoX rotary inside the append on the cp.async tensor-core tiles below sm_120: kiln's pipeline takes
  -- 3-20 fewer registers (the same 2 blocks an SM) but gives more SASS instructions than default<O3> at the 96-wide
  -- tile, causal or not, split-KV or not: sm_80 bf16 d96 causal 5136 vs 5080, split-KV 8664 vs 8416, with every
  -- mask key 13472 vs 13352; sm_86 8872 vs 8624; sm_90 bf16 d96 5264 vs 5216, split-KV 8744 vs 8520; sm_100 8888 vs
  -- 8720), and at d128 with split-KV in bf16 on sm_90/100 (10488 vs 10408, 10480 vs 10392; an f32 cos/sin table
  -- sm_90 9472 vs 9344, and on sm_80/86 too: 9272 vs 9256, 7760 vs 7720). Interleaved
  -- rotary, f16 d128 and sm_80's bf16 d128 with bf16 tables keep kiln's (sm_80 10296 vs 10328), as does sm_120
  -- (f16 d96 4840 vs 4896, bf16 d96 split-KV 8656 vs 8680, bf16 d128 split-KV 8584 vs 8600).)
  o3 = o3 or (cfg.path == "mma" and cfg.cp_async and spec.rotary == "neox" and target.ptxas_neox_o3
              and (spec.head_dim == 96 or (spec.head_dim == 128 and spec.splitkv and spec.dtype == "bf16"
                                           and (target.ptxas_neox_d128_o3 or spec.rotary_cs == "f32"))))
  cfg.pipeline = (not o3) and "kiln" or nil
  -- Tensor-core tiles with cp.async (not split-KV) are no worse without NVPTX's loop strength
  -- reduction (matrix: 0.1-0.9 % fewer SASS instructions, none fewer blocks) and generate 3-4 %
  -- faster; the SIMT, register-staged (sm_75) and split-KV tiles keep it (d256 SIMT: 255 registers).
  if cfg.path == "mma" and cfg.cp_async and not spec.splitkv then cfg.lsr = false end
  -- The same tiles but the 96-wide ones (head_dim 80, 96: d96 causal sm_80 +8 SASS instructions) give
  -- byte-identical PTX without NVPTX's straight-line strength reduction, every SM, and it is 30 % of
  -- their generation instructions (bf16 d128 causal sm_80: 431 -> 304 M): left out (docs/jit.md).
  if cfg.path == "mma" and cfg.cp_async and not spec.splitkv and spec.head_dim ~= 96 then cfg.slsr = false end
  -- Codegen passes that change no byte of these tiles' PTX (the matrix's variants on every SM; docs/jit.md):
  -- constant hoisting, the peephole optimizer, the machine scheduler, dead machine instructions and the
  -- two stack-slot passes on every tile (0.7 % of bf16 d128 causal's generation instructions; PHI
  -- optimization, which the norms leave out, changes 3 bf16 sm_75 variants with window, softcap and
  -- ALiBi), early tail duplication without window, softcap and ALiBi (0.3 %; with all three it changes
  -- 39 sm_80 variants), and NVPTX's last EarlyCSE on the cp.async and SIMT tiles but split-KV, varlen
  -- and paged (3.6 %).
  local skip = { "consthoist", "peephole-opt", "machine-scheduler", "dead-mi-elimination", "stack-coloring",
                 "stack-slot-coloring" }
  if not (spec.window or spec.softcap or spec.alibi) then skip[#skip + 1] = "early-tailduplication" end
  if (cfg.cp_async or cfg.path == "simt") and not (spec.splitkv or spec.varlen or spec.paged) then
    skip[#skip + 1] = "early-cse-3"
  end
  cfg.skip_codegen = skip
  return cfg
end

-- The dense forward's parameters before its strides (every path; lib/attn_wgmma.lua's kernel too).
local function base_params(spec)
  return {
    { "o", "ptr", spec.out }, { "lse", "ptr", "f32" },
    { "q", "ptr", spec.dtype, readonly = true }, { "k", "ptr", spec.dtype, readonly = true },
    { "v", "ptr", spec.dtype, readonly = true },
    { "batch", "i32" }, { "heads_q", "i32" }, { "heads_kv", "i32" }, { "seq_q", "i32" },
    { "seq_k", "i32" }, { "scale", "f32" },
  }
end

local function declare(b, spec)
  local params = base_params(spec)
  local tensors = { "q", "k", "v", "o" }
  if spec.splitkv then
    -- no O or lse: partial results go to the f32 workspace ws (see split_store)
    table.remove(params, 1)
    params[1] = { "ws", "ptr", "f32" }
    params[#params + 1] = { "splits", "i32" }
    tensors[4] = nil
  end
  for _, t in ipairs(tensors) do
    for _, d in ipairs({ "b", "s", "h" }) do params[#params + 1] = { "stride_" .. t .. d, "i64" } end
  end
  return b:kernel{ params = rotary.params(spec, append.params(spec, paged.params(spec, dropout.params(spec, mask.params(spec,
    varlen.params(spec, params, true, true)))))) }
end

-- Index of this CTA's (batch, head) row 0 in lse: [batch, heads_q, seq_q], varlen [heads_q, total_q].
local function lse_row(b, spec, p)
  if spec.varlen then return p.rows(b:ctaid("y")) end
  return (b:i64(b:ctaid("z")) * b:i64(p.heads_q) + b:i64(b:ctaid("y"))) * b:i64(p.seq_q)
end

-- Pointers to row 0 of this CTA's (batch, head) in q, k, v and o.
local function head_bases(b, p)
  local bi, h = b:i64(b:ctaid("z")), b:ctaid("y")
  local hkv = b:i64(h // (p.heads_q // p.heads_kv))
  local h64 = b:i64(h)
  return {
    q = p.q + bi * p.stride_qb + h64 * p.stride_qh,
    k = p.k + bi * p.stride_kb + hkv * p.stride_kh,
    v = p.v + bi * p.stride_vb + hkv * p.stride_vh,
    o = p.o + bi * p.stride_ob + h64 * p.stride_oh,
  }
end

-- Where a block's query rows come from and which keys it visits. Block-local row r is row
-- q0 + r of a row space of `rows` rows; sq(row) is its query position (for the causal bound).
--   plain:   rows are the seq_q queries of head ctaid.y; keys [0, seq_k).
--   splitkv: rows are the packed (query head of the group, query) pairs of kv head
--            ctaid.y / mblocks, row = hl * seq_q + sq (mblocks = ceil(group * seq_q / bm) blocks of
--            bm rows); q_addr gives each row's address. Keys: tiles [t_lo, t_lo + tiles_per_split)
--            of the bn-key tiles, split = ctaid.x of `splits`.
-- between(): emitted after q0 and before the base pointers (keeps the plain kernels' IR order).
local function geometry(b, spec, p, bm, bn, between)
  if not spec.splitkv then
    local q0 = b:ctaid("x") * bm
    if between then between() end
    local base = head_bases(b, p)
    paged.bases(b, spec, p, base, b:ctaid("y") // (p.heads_q // p.heads_kv))
    append.bases(b, spec, p, base, b:ctaid("y") // (p.heads_q // p.heads_kv))
    return { q0 = q0, base = base, rows = p.seq_q, sq = function(row) return row end }
  end
  local bi = b:i64(b:ctaid("z"))
  local group = p.heads_q // p.heads_kv
  local mrows = group * p.seq_q
  local mblocks = (mrows + (bm - 1)) // bm
  local hkv = b:ctaid("y") // mblocks
  local qb = p.q + bi * p.stride_qb
  local G = {
    base = { k = p.k + bi * p.stride_kb + b:i64(hkv) * p.stride_kh, v = p.v + bi * p.stride_vb + b:i64(hkv) * p.stride_vh },
    q0 = (b:ctaid("y") - hkv * mblocks) * bm, rows = mrows,
    sq = function(row) return row % p.seq_q end,
    head = function(row) return hkv * group + row // p.seq_q end,
  }
  paged.bases(b, spec, p, G.base, hkv)
  append.bases(b, spec, p, G.base, hkv)
  G.q_addr = function(row)
    return qb + b:i64(G.head(row)) * p.stride_qh + b:i64(G.sq(row)) * p.stride_qs
  end
  local ntiles = (p.seq_k + (bn - 1)) // bn
  local per = (ntiles + (p.splits - 1)) // p.splits
  G.split = b:ctaid("x")
  G.t_lo = b:min(G.split * per, ntiles)
  G.t_hi = b:min(G.t_lo + per, ntiles)
  return G
end

-- splitkv with a window: the splits share the key tiles [t0, t_end) some row of the head sees
-- (instead of every tile), so each split's share shrinks with the window.
local function split_range(b, p, G, t0, t_end)
  local n = t_end - t0
  local per = (n + (p.splits - 1)) // p.splits
  G.t_lo = t0 + b:min(G.split * per, n)
  G.t_hi = b:min(G.t_lo + per, t_end)
end

-- splitkv epilogue for one row: O / l (f32; store_o(at) writes this thread's columns of the row
-- that starts at `at`) and the base-2 log-sum-exp m + log2 l (-inf when the split saw no key of the row) go to
-- the workspace: ws[split][row][d] then, after splits * rows * d floats, lse[split][row], with
-- row = (batch * heads_q + head) * seq_q + query. attention_combine merges the splits.
local function split_store(b, spec, p, G, row, live, store_o, lse2, lead)
  local d = spec.vdim
  local total = b:i64(p.batch) * b:i64(p.heads_q) * b:i64(p.seq_q)
  local r = b:select(live, row, 0)
  local idx = (b:i64(b:ctaid("z")) * b:i64(p.heads_q) + b:i64(G.head(r))) * b:i64(p.seq_q) + b:i64(G.sq(r))
  local slot = b:i64(G.split) * total + idx
  b:if_(live, function() store_o(p.ws + slot * d) end)
  b:if_(b:and_(live, lead), function() b:store(p.ws + (b:i64(p.splits) * total * d + slot), lse2) end)
end

-- Copies rows [row0, row0 + rows) of a [seq, head_dim] slice (row stride `stride`; or src is a
-- function giving row i's address, stride unused) into the
-- f32 shared tile dst (row stride ld). Rows at or past `seq` read row 0 instead (branch-free);
-- with zero_tail they become zeros (V: masked keys must add exactly nothing), otherwise their
-- values are never used unmasked (Q rows are not stored, K scores are masked). rot: the rotary
-- hook (lib/attn_rotary.lua) or nil.
local function load_tile_f32(b, spec, cfg, dst, ld, src, stride, row0, rows, seq, zero_tail, rot)
  local d, vec = spec.head_dim, cfg.vec
  local per_row = d // vec
  local items = rows * per_row
  local tid = b:tid()
  for it = 0, util.ceil_div(items, SIMT_THREADS) - 1 do
    local item = tid + it * SIMT_THREADS
    local r, c = item // per_row, (item % per_row) * vec
    local in_tile = (it + 1) * SIMT_THREADS <= items or nil
    local ok = b:lt(row0 + r, seq)
    local rr = b:select(ok, row0 + r, 0)
    local at = type(src) == "function" and src(rr) or src + b:i64(rr) * stride
    local dim = zero_tail and spec.vdim or spec.dim -- (V: v_head_dim's columns)
    local real = dim < d and b:lt(c, dim) -- padded columns read column 0 and become 0
    local from = at + (real and b:select(real, c, 0) or c)
    local vals = b:load_vec(from, vec, { align = vec * util.dtype_bytes[spec.dtype] })
    if rot then vals = rot.apply(vals, from, c, rr, rot.on(rr, c)) end
    local f = {}
    for i = 1, vec do
      f[i] = b:to_f32(vals[i])
      if zero_tail then f[i] = b:select(ok, f[i], 0.0) end
      if real then f[i] = b:select(real, f[i], 0.0) end
    end
    local st = function() b:store_vec(dst + r * ld + c, f, { align = 16 }) end
    if in_tile then st() else b:if_(b:lt(item, items), st) end
  end
end

local function build_simt(b, spec, cfg, p)
  local d, bm, bn, tc, tr, rm, cn = spec.head_dim, cfg.block_m, cfg.block_n, cfg.tc, cfg.tr, cfg.rm, cfg.cn
  -- Row strides: d + 4 puts the 8 column groups' rows on 8 different bank quads; bn + 8 (= 8 mod 32)
  -- puts the 4 row groups of a warp's P stores on 4 different 8-bank octets.
  local ldq, ldp = d + 4, bn + 8
  local qs = b:shared("f32", bm * ldq, 16)
  local kvs = b:shared("f32", bn * ldq, 16)
  local ps = b:shared("f32", bm * ldp, 16)
  local tid = b:tid()
  local rg, cg = tid // tc, tid % tc
  local G = geometry(b, spec, p, bm, bn)
  local q0, base = G.q0, G.base
  local scale2 = p.scale * LOG2E
  local mk = mask.setup(b, spec, p)
  local dr = dropout.setup(b, spec, p)
  local shift = mk.cshift -- causal: query i sees keys j <= i + shift

  local rot_q, rot_k = rotary.hook(b, spec, p, "q", G), rotary.hook(b, spec, p, "k")
  load_tile_f32(b, spec, cfg, qs, ldq, G.q_addr or base.q, p.stride_qs, q0, bm, G.rows, nil, rot_q)

  -- Keys this CTA visits: all of them, or up to the diagonal of its last row; splitkv: its split's.
  -- window: from the first row's window start to the last row's end (splitkv: its split of them).
  local kv_lo, kv_end = 0, p.seq_k
  if spec.causal and not spec.splitkv then
    kv_end = b:min(p.seq_k, b:max(b:min(q0 + bm, p.seq_q) + shift, 0))
  end
  if spec.window and not spec.splitkv then
    kv_lo = mask.row_range(mk, q0)
    local _, hi = mask.row_range(mk, b:min(q0 + bm, p.seq_q) - 1)
    kv_end = hi
  end
  if spec.window and spec.splitkv then
    local t0, t_end = mask.tile_range(mk, 0, p.seq_q - 1, bn)
    split_range(b, p, G, t0, t_end)
  end
  if spec.splitkv then kv_lo, kv_end = G.t_lo * bn, b:min(G.t_hi * bn, p.seq_k) end

  -- Per thread: rows rg + tr*i, keys cg + tc*j of the tile, output columns 4*(cg + tc*jj)...+3.
  -- Row i sees keys [lo[i], bound[i]); with ALiBi, slope[i] is its slope (base 2).
  local dchunks = d // (4 * tc)
  local bound, lo, slope = {}, {}, {}
  for i = 0, rm - 1 do
    local row = q0 + rg + tr * i
    lo[i], bound[i] = mask.row_range(mk, G.sq(row))
    if spec.alibi then slope[i] = mask.slope(mk, G.head and G.head(b:min(row, G.rows - 1)) or b:ctaid("y")) end
  end
  local m, l, acc = {}, {}, {}
  for i = 0, rm - 1 do
    m[i] = b:var("f32", NEG_INF)
    l[i] = b:var("f32", 0.0)
    acc[i] = {}
    for c = 0, dchunks * 4 - 1 do acc[i][c] = b:var("f32", 0.0) end
  end

  b:for_(kv_lo, kv_end, bn, function(kv0)
    b:barrier() -- the previous tile's P V is done with kvs and ps
    load_tile_f32(b, spec, cfg, kvs, ldq, base.k, p.stride_ks, kv0, bn, p.seq_k, nil, rot_k)
    b:barrier()
    -- S = Q K^T for rm x cn scores, 4 head-dim elements at a time.
    local s = {}
    for i = 0, rm - 1 do
      s[i] = {}
      for j = 0, cn - 1 do s[i][j] = b:var("f32", 0.0) end
    end
    b:for_(0, d, 4, function(kk)
      local qv, kv = {}, {}
      for i = 0, rm - 1 do qv[i] = b:load_vec(qs + (rg + tr * i) * ldq + kk, 4, { align = 16 }) end
      for j = 0, cn - 1 do kv[j] = b:load_vec(kvs + (cg + tc * j) * ldq + kk, 4, { align = 16 }) end
      for i = 0, rm - 1 do
        for j = 0, cn - 1 do
          local a = s[i][j]:get()
          for e = 1, 4 do a = b:fma(qv[i][e], kv[j][e], a) end
          s[i][j]:set(a)
        end
      end
    end)
    -- Online softmax in base 2; masked scores are -inf.
    for i = 0, rm - 1 do
      local lim = bound[i] - kv0 - cg
      local lim_lo = lo[i] and lo[i] - kv0 - cg
      local dist = spec.alibi and b:f32(G.sq(q0 + rg + tr * i) + mk.shift - kv0 - cg) -- to key kv0 + cg
      local sv, mx = {}, b:f32(NEG_INF)
      for j = 0, cn - 1 do
        local ok = b:lt(tc * j, lim)
        if lim_lo then ok = b:and_(ok, b:ge(tc * j, lim_lo)) end
        local x = mask.score(mk, s[i][j]:get(), scale2, slope[i], dist and dist - tc * j)
        sv[j] = b:select(ok, x, NEG_INF)
        mx = b:max(mx, sv[j])
      end
      local m_old = m[i]:get()
      local m_new = b:max(m_old, b:warp_max(mx, tc))
      local m_use = b:select(b:eq(m_new, NEG_INF), 0.0, m_new)
      local alpha = b:ex2_approx(m_old - m_use)
      local sum = b:f32(0.0)
      for j = 0, cn - 1 do
        local pv = b:ex2_approx(sv[j] - m_use)
        sum = sum + pv
        -- dropout: l sums every probability, P V only the kept ones (1 / (1 - p) at the end)
        if dr then pv = dropout.simt(dr, b:ctaid("z"), b:ctaid("y"), q0 + rg + tr * i, kv0 + cg + tc * j, pv) end
        b:store(ps + (rg + tr * i) * ldp + (cg + tc * j), pv)
      end
      m[i]:set(m_new)
      l[i]:set(b:fma(l[i]:get(), alpha, sum))
      for c = 0, dchunks * 4 - 1 do acc[i][c]:set(acc[i][c]:get() * alpha) end
    end
    b:barrier() -- everyone is done with K; P is complete
    load_tile_f32(b, spec, cfg, kvs, ldq, base.v, p.stride_vs, kv0, bn, p.seq_k, true)
    b:barrier()
    -- O += P V, 4 keys at a time.
    b:for_(0, bn, 4, function(kk)
      local pv = {}
      for i = 0, rm - 1 do pv[i] = b:load_vec(ps + (rg + tr * i) * ldp + kk, 4, { align = 16 }) end
      for e = 0, 3 do
        local vrow = kvs + (kk + e) * ldq
        for jj = 0, dchunks - 1 do
          local vv = b:load_vec(vrow + (cg + tc * jj) * 4, 4, { align = 16 })
          for i = 0, rm - 1 do
            for c = 0, 3 do
              local a = acc[i][jj * 4 + c]
              a:set(b:fma(pv[i][e + 1], vv[c + 1], a:get()))
            end
          end
        end
      end
    end)
  end)

  -- O = acc / l; lse = (m + log2 l) ln 2. Rows that saw no key: O = 0, lse = +inf.
  -- (padded head_dim: this thread's chunk jj is stored when it lies inside head_dim)
  local function cols(jj, store)
    if spec.vdim < d then b:if_(b:lt((cg + tc * jj) * 4, spec.vdim), store) else store() end
  end
  for i = 0, rm - 1 do
    local row = q0 + rg + tr * i
    local live = b:lt(row, G.rows)
    local lsum = b:warp_sum(l[i]:get(), tc)
    local empty = b:le(lsum, 0.0)
    local inv = b:select(empty, 0.0, 1.0 / lsum)
    if dr then inv = inv * dr.rp end
    if spec.splitkv then
      local m_use = b:select(b:eq(m[i]:get(), NEG_INF), 0.0, m[i]:get())
      local lse2 = b:select(empty, NEG_INF, m_use + b:lg2_approx(lsum))
      split_store(b, spec, p, G, row, live, function(at)
        for jj = 0, dchunks - 1 do
          local out = {}
          for c = 0, 3 do out[c + 1] = acc[i][jj * 4 + c]:get() * inv end
          cols(jj, function() b:store_vec(at + (cg + tc * jj) * 4, out, { align = 16 }) end)
        end
      end, lse2, b:eq(cg, 0))
      goto continue
    end
    local orow = base.o + b:i64(b:select(live, row, 0)) * p.stride_os
    local vals = {}
    for jj = 0, dchunks - 1 do
      local out = {}
      for c = 0, 3 do out[c + 1] = acc[i][jj * 4 + c]:get() * inv end
      vals[jj] = b:from_f32_vec(out, spec.out)
    end
    b:if_(live, function()
      for jj = 0, dchunks - 1 do
        cols(jj, function() b:store_vec(orow + (cg + tc * jj) * 4, vals[jj], { align = 4 * util.dtype_bytes[spec.out] }) end)
      end
    end)
    local m_use = b:select(b:eq(m[i]:get(), NEG_INF), 0.0, m[i]:get())
    local lse = b:select(empty, POS_INF, (m_use + b:lg2_approx(lsum)) * (1.0 / LOG2E))
    local lead = b:and_(live, b:eq(cg, 0))
    local has_lse = b:not_(b:is_null(p.lse))
    local idx = lse_row(b, spec, p) + b:i64(row)
    b:if_(b:and_(lead, has_lse), function() b:store(p.lse + idx, lse) end)
    ::continue::
  end
end

-- ---- tensor-core path ----

-- Element offset of 16-byte chunk `chunk` of row `row` in a tile with row stride cfg.ld (= head_dim).
-- The chunk is XOR-swizzled with the row's low bits so that the 8 rows an ldmatrix phase reads at one
-- chunk, and the 8 chunks a cp.async/st.shared phase writes, fall on 8 different groups of 4 banks:
--   d = 64, 128, 256 (rows of 128 B multiples): chunk ^ (row & 7);
--   d = 32 (4 chunks, 64 B a row; two rows share a 128 B line): chunk ^ ((row >> 1) & 3);
--   d = 96 (12 chunks, 192 B a row): chunks 0-7 ^ (row & 7), chunks 8-11 ^ ((row >> 1) & 3).
-- docs/attention.md shows the bank arithmetic; the profile (kiln run --profile) counts 0 conflicts.
local function swz(b, spec, cfg, row, chunk)
  local d = spec.head_dim
  if d == 32 then return row * cfg.ld + (chunk ~ ((row >> 1) & 3)) * 8 end
  if d ~= 96 then return row * cfg.ld + (chunk ~ (row & 7)) * 8 end
  if type(chunk) == "number" then
    if chunk < 8 then return row * cfg.ld + (chunk ~ (row & 7)) * 8 end
    return row * cfg.ld + (8 + ((chunk - 8) ~ ((row >> 1) & 3))) * 8
  end
  local lo = b:select(b:lt(chunk, 8), chunk ~ (row & 7), 8 + ((chunk - 8) ~ ((row >> 1) & 3)))
  return row * cfg.ld + lo * 8
end

-- The copy items of rows [row0, row0 + rows) of a [seq, d] slice (src: pointer with row stride
-- `stride`, or a function giving row i's address): 16-byte chunks, thread-strided;
-- fn(r, c, ok, src_address, partial, real, rr, rb, dr) per item this thread owns (ok: the row exists;
-- real: the chunk is inside head_dim, nil when head_dim is a table width; rr: the row read; r = rb +
-- dr with dr a Lua number that is a multiple of 8, see swz_rows).
-- When the threads cover whole rows, a thread's chunk is the same in every step and its row advances
-- by a constant: the row and chunk are computed once (less IR for LLVM to simplify, docs/jit.md "Wave
-- 9"). Only for cp.async tiles of 8 chunks a row or more: head_dim 32 with mask keys and sm_75's
-- register-staged tiles came out worse in SASS (or spilled) that way.
local function tile_items(b, spec, cfg, src, stride, row0, rows, seq, fn, pad)
  local cpr = spec.head_dim // 8
  local tid = b:tid()
  local step = cfg.threads // cpr
  local whole = cfg.cp_async and cpr >= 8 and cpr ~= 12 and cfg.threads % cpr == 0 and step % 8 == 0
  local rb, cb
  if whole then rb, cb = tid // cpr, tid % cpr end
  for it = 0, util.ceil_div(rows * cpr, cfg.threads) - 1 do
    local item = tid + it * cfg.threads
    local r, c, dr
    if whole then
      dr = it * step
      r, c = it == 0 and rb or rb + dr, cb
    else
      r, c = item // cpr, item % cpr
    end
    if cpr == 12 then
      -- d = 96: per pair of rows, 8 lanes write chunks 0-7 of the first row, 8 those of the second,
      -- 8 chunks 8-11 of both (row-major order would put two rows' chunks in one phase: conflicts)
      local pair, w = item // 24, item % 24
      local first, second, u = b:lt(w, 8), b:lt(w, 16), w - 16
      r = pair * 2 + b:select(first, 0, b:select(second, 1, u >> 2))
      c = b:select(first, w, b:select(second, w - 8, 8 + (u & 3)))
    end
    local partial = (it + 1) * cfg.threads > rows * cpr
    local ok = b:lt(row0 + r, seq)
    local rr = b:select(ok, row0 + r, pad or 0) -- (pad: the row rows past seq read, else row 0)
    -- padded head_dim: chunks past it read chunk 0 and are zero (real: the chunk exists)
    local real = spec.dim < spec.head_dim and b:lt(c, spec.dim // 8) or nil
    local from = (type(src) == "function" and src(rr) or src + b:i64(rr) * stride) + (real and b:select(real, c, 0) or c) * 8
    fn(r, c, ok, from, partial and b:lt(item, rows * cpr) or nil, real, rr, whole and rb or nil, dr)
  end
end

-- swz for tile_items' rows: a row rb + dr (dr a multiple of 8) keeps rb's swizzle bits (row & 7,
-- (row >> 1) & 3), so its offset is rb's plus dr rows; rb's is computed once.
local function swz_rows(b, spec, cfg)
  local rb0, c0, off0
  return function(r, c, rb, dr)
    if not rb then return swz(b, spec, cfg, r, c) end
    if rb ~= rb0 or c ~= c0 then rb0, c0, off0 = rb, c, swz(b, spec, cfg, rb, c) end
    return dr == 0 and off0 or off0 + dr * cfg.ld
  end
end

-- Copies a tile into shared memory at dst now: cp.async where the target has it (rows past seq
-- zero-filled), else loads and stores through registers (rows past seq read row 0, zeroed when
-- zero_tail; K rows past seq are masked instead). rot (lib/attn_rotary.lua, or nil): the chunks
-- it rotates go through registers.
local function copy_tile(b, spec, cfg, dst, src, stride, row0, rows, seq, zero_tail, rot)
  -- (zero_tail marks V: its real columns are v_head_dim's, lib/attn_vdim.lua)
  local sw = swz_rows(b, spec, cfg)
  tile_items(b, zero_tail and spec.vspec or spec, cfg, src, stride, row0, rows, seq, function(r, c, ok, from, guard, real, rr, rb, dr)
    local to = dst + sw(r, c, rb, dr)
    local issue = function()
      if cfg.cp_async then
        local function async() b:cp_async(to, from, { pred = real and b:and_(ok, real) or ok }) end
        if not rot then return async() end
        b:if_(rot.on(rr, c * 8), function()
          b:store_vec(to, rot.apply(b:load_vec(from, 8, { align = 16 }), from, c * 8, rr), { align = 16 })
        end, async)
      else
        local v = b:load_vec(from, 8, { align = 16 })
        if rot then v = rot.apply(v, from, c * 8, rr, rot.on(rr, c * 8)) end
        if zero_tail then
          local zero = b:from_f32(0.0, spec.dtype)
          for i = 1, 8 do v[i] = b:select(ok, v[i], zero) end
        end
        if real then
          local zero = b:from_f32(0.0, spec.dtype)
          for i = 1, 8 do v[i] = b:select(real, v[i], zero) end
        end
        b:store_vec(to, v, { align = 16 })
      end
    end
    if guard then b:if_(guard, issue) else issue() end
  end)
end

-- Register staging (targets without cp.async): the loads of a tile now, the stores into shared
-- memory later, so the loads' latency hides behind a tile of mma. Tiles divide evenly among threads.
-- zero_tail "later" (V of lib/attn_f16scaled.lua's lean tiles): the rows past seq read row pad and are not zeroed
-- here; the item keeps ok for the caller to zero them after converting them (M.stage)
local function stage_load(b, spec, cfg, src, stride, row0, rows, seq, zero_tail, rot, pad)
  local staged = {}
  tile_items(b, zero_tail and spec.vspec or spec, cfg, src, stride, row0, rows, seq, function(r, c, ok, from, guard, real, rr)
    assert(not guard, "register staging needs tiles that divide evenly among the threads")
    local v = b:load_vec(from, 8, { align = 16 })
    if rot then v = rot.apply(v, from, c * 8, rr, rot.on(rr, c * 8)) end
    if zero_tail == "later" then
      staged[#staged + 1] = { r = r, c = c, v = v, real = real, ok = ok }
      return
    end
    if zero_tail then
      local zero = b:from_f32(0.0, spec.dtype)
      for i = 1, 8 do v[i] = b:select(ok, v[i], zero) end
    end
    if real then
      local zero = b:from_f32(0.0, spec.dtype)
      for i = 1, 8 do v[i] = b:select(real, v[i], zero) end
    end
    staged[#staged + 1] = { r = r, c = c, v = v, real = real } -- (real: padded head_dim, the chunk exists)
  end, pad)
  return staged
end

local function stage_store(b, spec, cfg, dst, staged)
  for _, e in ipairs(staged) do b:store_vec(dst + swz(b, spec, cfg, e.r, e.c), e.v, { align = 16 }) end
end

-- The tensor-core kernel is written in steps that share one context c (builder, spec, cfg, params and
-- the values each step adds), in the order they emit IR: mma_setup (shared tiles, lanes, block
-- geometry, key range), mma_prologue (Q and the first K/V tiles), mma_fragments (ldmatrix offsets,
-- Q fragments), mma_state (running max, sum, O), then per K/V tile mma_trip (pipeline) around
-- mma_compute (mma_scores, mma_softmax, mma_pv), and mma_epilogue.

-- Shared tiles, lane coordinates, the block's rows (geometry) and the K/V tiles it visits:
-- ntiles tiles from tile0 (splitkv, window; else 0); trips [lead, nfull) of them run without mask
-- work (lead = 0 but with a window: the tiles before are the window's start, masked).
local function mma_setup(c)
  local b, spec, cfg, p = c.b, c.spec, c.cfg, c.p
  local d, bm, bn, stages, mt = spec.head_dim, cfg.block_m, cfg.block_n, cfg.stages, cfg.mt
  local dt = cfg.f16s and "f16" or spec.dtype -- the shared tiles' and the mma's type
  c.d, c.bm, c.bn, c.stages, c.mt, c.dt = d, bm, bn, stages, mt, dt
  c.tile = bn * cfg.ld
  if cfg.dynamic_smem then
    c.qs = b:dynamic_shared(dt)
    c.ks = c.qs + bm * cfg.ld
    c.vs = c.ks + stages * c.tile
  else
    c.qs = b:shared(dt, bm * cfg.ld, 128)
    c.ks = b:shared(dt, stages * c.tile, 128)
    c.vs = b:shared(dt, stages * c.tile, 128)
  end
  local tid = b:tid()
  local lane, warp = tid & 31, tid >> 5
  c.lane, c.g, c.t = lane, lane >> 2, lane & 3
  local wrow
  -- osplit (bf16 d256 on sm_75: lib/attn_f16scaled.lua TILES): warps 2r and 2r + 1 share rows 16r..16r + 15 and
  -- compute the same S, m and l; each accumulates half of O's columns (ocol: its first column)
  local os = cfg.osplit or 1
  assert(os == 1 or (os == 2 and mt == 1), "osplit: two warps a row group, mt = 1")
  local rw = os == 2 and warp >> 1 or warp
  local G = geometry(b, spec, p, bm, bn, function() wrow = rw * (16 * mt) end) -- this warp's first row in the block
  if not wrow then wrow = rw * (16 * mt) end
  c.osplit, c.ohalf = os, os == 2 and warp & 1 or nil
  c.ocol = os == 2 and c.ohalf * (d // 2) or 0
  c.wrow, c.G, c.q0, c.base = wrow, G, G.q0, G.base
  c.rot_q, c.rot_k = rotary.hook(b, spec, p, "q", G), rotary.hook(b, spec, p, "k")
  c.scale2 = p.scale * LOG2E
  c.mask = mask.setup(b, spec, p)
  c.drop = dropout.setup(b, spec, p)
  local shift = c.mask.cshift
  c.shift = shift
  local q0 = G.q0
  local kv_end = p.seq_k
  if spec.causal and not spec.splitkv then kv_end = b:min(p.seq_k, b:max(b:min(q0 + bm, p.seq_q) + shift, 0)) end
  local ntiles = (kv_end + (bn - 1)) // bn
  -- Tiles every row of the block sees whole (no key past seq_k, none past any row's diagonal) run
  -- without mask work; only the tiles after them (the diagonal, the sequence end) pay for it.
  -- (splitkv: rows of every query position share a block, so the first query's diagonal counts.)
  local nfull = p.seq_k // bn
  if spec.causal then nfull = b:min(nfull, b:max((spec.splitkv and 0 or q0) + shift + 1, 0) // bn) end
  nfull = b:min(nfull, ntiles)
  -- splitkv: the loops below count tiles from tile0, the split's first (tile0 + it is the key tile)
  if spec.splitkv then
    c.tile0 = G.t_lo
    ntiles = G.t_hi - G.t_lo
    nfull = b:min(b:max(nfull - c.tile0, 0), ntiles)
  end
  if spec.window then
    -- the tiles the block's rows (splitkv: every query position) see, computed, not masked
    local first, last = q0, b:min(q0 + bm, p.seq_q) - 1
    if spec.splitkv then first, last = 0, p.seq_q - 1 end
    local t0, t_end, f0, f1 = mask.tile_range(c.mask, first, last, bn)
    if spec.splitkv then split_range(b, p, G, t0, t_end) end
    c.tile0 = spec.splitkv and G.t_lo or t0
    ntiles = spec.splitkv and G.t_hi - G.t_lo or t_end - t0
    c.lead = b:min(b:max(f0 - c.tile0, 0), ntiles)
    nfull = b:min(b:max(f1 - c.tile0, c.lead), ntiles)
  end
  c.ntiles, c.nfull = ntiles, nfull
  c.nt, c.dtiles = bn // 8, d // 8
  c.odtiles = c.dtiles // os -- O's 8-column tiles this warp accumulates
  if cfg.f16s then f16s.setup(c, function(r, ch) return swz(b, spec, cfg, r, ch) end) end
  -- (bf16 scaled to f16, d128's 32-key tiles over pages: V's rows past the sequence, zeros, read the tile's first key as
  -- K's do, so that K and V share each row's page lookup, a division and a load: T4 estimate 1.30x -> 1.26x)
  c.v_pad = cfg.f16s_slots_in_q and spec.paged
  -- bf16 scaled to f16, causal (not split-KV, whose rows are of every query position): the block's masked trips
  -- (its diagonal) run each warp's work only on the key tiles some row of the warp sees, kv0 below the bound of the
  -- warp's last row (a window's lower bound too, from its first row). A skipped tile leaves the warp's m, l and O
  -- as they are, which its P = 0 would have (the scales follow: O stays at the scale it had, tile_factors takes the
  -- change at the next tile the warp computes). The 256-row blocks (8 warps x 32 rows) ran 8 masked 32-key trips
  -- on every warp of a diagonal block, 28 of the 64 warp trips wholly above the warp's rows. (d128's 32-key tiles,
  -- f16s_slots_in_q, too since wave 16: the branch spilled 8 bytes there at 255 registers before the span form's
  -- division of Q's scale; 0 now, ptxas sm_75.)
  if cfg.f16s and spec.causal and not spec.splitkv then
    -- The warp's bounds come from the lanes that hold its first row (lane 0) and its last (lane 28: g = 7, the
    -- second half of the last m-tile), the rows' own bounds as mma_softmax computes them (the same expressions).
    local function bounds(mi, h) return mask.row_range(c.mask, G.sq(c.q0 + c.wrow + mi * 16 + c.g + h * 8)) end
    function c.warp_sees(kv0)
      local lo, _ = bounds(0, 0)
      local _, hi = bounds(mt - 1, 1)
      local sees = b:lt(kv0, b:shfl("idx", hi, 28))
      if lo then sees = b:and_(sees, b:gt(kv0 + bn, b:shfl("idx", lo, 0))) end
      return sees
    end
    -- 32-row warps (two m-tiles: 32 masked scores a thread) also take the unmasked body where every row of the warp
    -- sees the tile whole (T4 estimate, d64 causal: 1.22x -> 1.19x f16's time); 16-row warps keep the masked one
    -- (d128 causal: 1.321x -> 1.330x with the branch)
    if mt > 1 then
      function c.warp_whole(kv0)
        local _, hi = bounds(0, 0)
        local lo, _ = bounds(mt - 1, 1)
        local whole = b:le(kv0 + bn, b:shfl("idx", hi, 0))
        if lo then whole = b:and_(whole, b:ge(kv0, b:shfl("idx", lo, 28))) end
        return whole
      end
    end
  end
end

local function key_tile(c, it) return c.tile0 and c.tile0 + it or it end

local function load_k(c, it, buf)
  copy_tile(c.b, c.spec, c.cfg, c.ks + buf * c.tile, c.base.k, c.p.stride_ks, key_tile(c, it) * c.bn, c.bn, c.p.seq_k, nil,
            c.rot_k)
end
local function load_v(c, it, buf)
  copy_tile(c.b, c.spec, c.cfg, c.vs + buf * c.tile, c.base.v, c.p.stride_vs, key_tile(c, it) * c.bn, c.bn, c.p.seq_k, true)
end
local function load_kv(c, it, buf) load_k(c, it, buf); load_v(c, it, buf) end

-- Prologue: Q and the first stages - 1 K/V tiles in flight (cp.async), or Q and tile 0 stored.
local function mma_prologue(c)
  local b, spec, cfg, p, stages = c.b, c.spec, c.cfg, c.p, c.stages
  if cfg.f16s then -- bf16 scaled to f16 (lib/attn_f16scaled.lua): Q per row, tile 0 with its scales
    f16s.q_load(c, function(r, ch) return swz(b, spec, cfg, r, ch) end)
    b:if_(b:gt(c.ntiles, 0), function()
      -- (K's rows past the sequence re-read the tile's first key: lib/attn_f16scaled.lua M.stage)
      local sk = stage_load(b, spec, cfg, c.base.k, p.stride_ks, key_tile(c, 0) * c.bn, c.bn, p.seq_k, nil, c.rot_k, key_tile(c, 0) * c.bn)
      local sv = stage_load(b, spec, cfg, c.base.v, p.stride_vs, key_tile(c, 0) * c.bn, c.bn, p.seq_k, f16s.v_zero(c), nil,
                            (c.v_pad or c.cfg.f16s_lean) and key_tile(c, 0) * c.bn or nil)
      f16s.stage(c, sk, sv, c.vs + c.tile, function(dst, items) stage_store(b, spec, cfg, dst, items) end, c.ks + c.tile)
      stage_store(b, spec, cfg, c.ks, sk)
      stage_store(b, spec, cfg, c.vs, sv)
    end)
    b:barrier()
    return
  end
  copy_tile(b, spec, cfg, c.qs, c.G.q_addr or c.base.q, p.stride_qs, c.q0, c.bm, c.G.rows, nil, c.rot_q)
  if cfg.cp_async then
    b:cp_async_commit()
    for st = 0, stages - 2 do
      b:if_(b:gt(c.ntiles, st), function() load_kv(c, st, st) end)
      b:cp_async_commit()
    end
    b:cp_async_wait(math.max(stages - 1, 0))
  elseif stages == 2 then
    b:if_(b:gt(c.ntiles, 0), function() load_kv(c, 0, 0) end)
  end
  b:barrier()
end

-- ldmatrix offsets, split into a per-lane part (a few registers) and a constant: fragment rows
-- advance by multiples of 16, which leave a row's swizzle bits alone, and the chunk is a lane bit
-- (0/1) plus an even constant cs, so (bit + cs) ^ bits = (bit ^ bits) ^ (cs & mask) + (cs & ~mask).
-- Without the split LLVM hoists one address per fragment out of the K/V loop: registers, spills.
-- Then the Q fragments that stay in registers (cfg.q_in_regs).
local function mma_fragments(c)
  local b, cfg, d, lane = c.b, c.cfg, c.d, c.lane
  local lane_part = {}
  function c.frag_off(kind, row, cbit, rs, cs)
    local lo, bits, mask = 0, row & 7, 7
    if d == 32 then bits, mask = (row >> 1) & 3, 3 end
    if d == 96 and cs >= 8 then lo, cs, bits, mask = 8, cs - 8, (row >> 1) & 3, 3 end
    local key = kind .. lo .. ":" .. (cs & mask)
    if not lane_part[key] then lane_part[key] = row * cfg.ld + ((cbit ~ bits) ~ (cs & mask)) * 8 end
    return lane_part[key] + (rs * cfg.ld + (lo + (cs & ~mask)) * 8)
  end
  -- The same offset for a k-step kk known only at run time (cfg.roll_qk: the S = Q K^T k-loop rolled): the
  -- chunk (bit ^ bits) ^ (cs & mask) + (cs & ~mask) is (bit ^ bits) ^ cs, since bit ^ bits <= mask (not d96,
  -- whose upper chunks swizzle with other bits); cs = 2 kk, so the chunk's element offset is (bit ^ bits) * 8 ^ 16 kk.
  local lane_x8 = {}
  function c.frag_at(kind, row, cbit, rs, kk)
    local bits = d == 32 and (row >> 1) & 3 or row & 7
    if not lane_x8[kind] then lane_x8[kind] = { row * cfg.ld, (cbit ~ bits) * 8 } end
    local x = lane_x8[kind]
    return x[1] + (x[2] ~ (kk * 16)) + rs * cfg.ld
  end
  c.q_row, c.q_bit = c.wrow + (lane & 7) + ((lane >> 3) & 1) * 8, lane >> 4
  -- Per-lane ldmatrix rows and chunk bits: K (matrices: key tiles x head-dim halves) and
  -- V^T (.trans; matrices: key halves x head-dim tiles).
  c.k_row, c.k_bit = (lane & 7) + ((lane >> 4) << 3), (lane >> 3) & 1
  c.v_row, c.v_bit = (lane & 7) + (((lane >> 3) & 1) << 3), lane >> 4
  for cs = 0, d // 8 - 2, 2 do -- every per-lane part, before the loops use them (the rolled S loop: frag_at's)
    if not cfg.roll_qk or cfg.q_in_regs then c.frag_off("q", c.q_row, c.q_bit, 0, cs) end
    if not cfg.roll_qk then c.frag_off("k", c.k_row, c.k_bit, 0, cs) end
    c.frag_off("v", c.v_row, c.v_bit, 0, cs)
  end
  if cfg.roll_qk then
    if not cfg.q_in_regs then c.frag_at("q", c.q_row, c.q_bit, 0, 0) end
    c.frag_at("k", c.k_row, c.k_bit, 0, 0)
  end

  -- The A fragments of Q for m-tile mi, head-dim step kk (16 columns).
  function c.q_frag(mi, kk)
    return b:ldmatrix(c.qs + c.frag_off("q", c.q_row, c.q_bit, mi * 16, 2 * kk), 4)
  end
  c.qf = {}
  for mi = 0, c.mt - 1 do
    c.qf[mi] = {}
    if cfg.q_in_regs then
      for kk = 0, d // 16 - 1 do c.qf[mi][kk] = c.q_frag(mi, kk) end
    end
  end
end

-- Per row (m-tile mi, half h: rows g and g + 8): running max m, sum l; O accumulators acc;
-- with ALiBi the row's slope.
local function mma_state(c)
  local b = c.b
  c.m, c.l, c.acc = {}, {}, {}
  for mi = 0, c.mt - 1 do
    c.m[mi], c.l[mi], c.acc[mi] = {}, {}, {}
    for h = 0, 1 do
      c.m[mi][h] = b:var("f32", NEG_INF)
      c.l[mi][h] = b:var("f32", 0.0)
    end
    for j = 0, c.odtiles - 1 do
      c.acc[mi][j] = {}
      for e = 1, 4 do c.acc[mi][j][e] = b:var("f32", 0.0) end
    end
  end
  if c.spec.alibi then -- each row's slope (split-KV: rows of several query heads share a block)
    local G, plain = c.G, nil
    c.slope = {}
    for mi = 0, c.mt - 1 do
      c.slope[mi] = {}
      for h = 0, 1 do
        if G.head then
          c.slope[mi][h] = mask.slope(c.mask, G.head(b:min(c.q0 + c.wrow + mi * 16 + c.g + h * 8, G.rows - 1)))
        else
          plain = plain or mask.slope(c.mask, b:ctaid("y"))
          c.slope[mi][h] = plain
        end
      end
    end
  end
end

-- S = Q K^T of the tile in buffer kt: s[mi][j] holds the C fragment of m-tile mi, keys 8j..8j+7.
local function mma_scores(c, kt)
  local b, mt, nt, d = c.b, c.mt, c.nt, c.d
  local s = {}
  for mi = 0, mt - 1 do
    s[mi] = {}
    for j = 0, nt - 1 do s[mi][j] = { b:f32(0.0), b:f32(0.0), b:f32(0.0), b:f32(0.0) } end
  end
  for kk = 0, d // 16 - 1 do
    local a = {}
    for mi = 0, mt - 1 do a[mi] = c.qf[mi][kk] or c.q_frag(mi, kk) end
    for jp = 0, nt // 2 - 1 do
      local kf = b:ldmatrix(kt + c.frag_off("k", c.k_row, c.k_bit, jp * 16, 2 * kk), 4)
      for mi = 0, mt - 1 do -- each K fragment feeds every m-tile of the warp
        s[mi][2 * jp] = b:mma(c.dt, a[mi], { kf[1], kf[2] }, s[mi][2 * jp])
        s[mi][2 * jp + 1] = b:mma(c.dt, a[mi], { kf[3], kf[4] }, s[mi][2 * jp + 1])
      end
    end
  end
  return s
end

-- mma_scores with the k-steps as an IR loop (cfg.roll_qk; docs/jit.md "Wave 22"): the C fragments ride in vars
-- (phis after SROA), each trip loads its K fragments with the run-time offset c.frag_at. Q kept in registers
-- (cfg.q_in_regs) is picked by a select chain on the trip counter: ptxas unrolls the constant-trip loop and folds
-- the chain (bf16 d128 causal sm_80: 2184 SASS as unrolled, 205 -> 197 registers); re-loading Q from shared
-- memory each trip instead cost +32 SASS there (16 more ldmatrix), and Q rotated through vars +96.
local function mma_scores_rolled(c, kt)
  local b, mt, nt, d = c.b, c.mt, c.nt, c.d
  local ksteps = d // 16
  local acc = {}
  for mi = 0, mt - 1 do
    acc[mi] = {}
    for j = 0, nt - 1 do acc[mi][j] = { b:var("f32", 0.0), b:var("f32", 0.0), b:var("f32", 0.0), b:var("f32", 0.0) } end
  end
  local function get(v) return { v[1]:get(), v[2]:get(), v[3]:get(), v[4]:get() } end
  local function set(v, r) for e = 1, 4 do v[e]:set(r[e]) end end
  b:for_(0, ksteps, 1, function(kk)
    local a = {}
    if c.cfg.q_in_regs then
      local at = {}
      for k2 = 0, ksteps - 2 do at[k2] = b:eq(kk, k2) end
      for mi = 0, mt - 1 do
        a[mi] = {}
        for e = 1, 4 do
          local v = c.qf[mi][ksteps - 1][e]
          for k2 = ksteps - 2, 0, -1 do v = b:select(at[k2], c.qf[mi][k2][e], v) end
          a[mi][e] = v
        end
      end
    else
      for mi = 0, mt - 1 do a[mi] = b:ldmatrix(c.qs + c.frag_at("q", c.q_row, c.q_bit, mi * 16, kk), 4) end
    end
    for jp = 0, nt // 2 - 1 do
      local kf = b:ldmatrix(kt + c.frag_at("k", c.k_row, c.k_bit, jp * 16, kk), 4)
      for mi = 0, mt - 1 do -- each K fragment feeds every m-tile of the warp
        set(acc[mi][2 * jp], b:mma(c.dt, a[mi], { kf[1], kf[2] }, get(acc[mi][2 * jp])))
        set(acc[mi][2 * jp + 1], b:mma(c.dt, a[mi], { kf[3], kf[4] }, get(acc[mi][2 * jp + 1])))
      end
    end
  end)
  local s = {}
  for mi = 0, mt - 1 do
    s[mi] = {}
    for j = 0, nt - 1 do s[mi][j] = get(acc[mi][j]) end
  end
  return s
end

-- Online softmax of the scores s of the tile at key kv0 (masked: scores past the row's bound are
-- -inf); rescales the O accumulators; returns P (pv[mi][j], f32, the layout of s).
local function mma_softmax(c, s, kv0, masked)
  local b, spec, p, mt, nt = c.b, c.spec, c.p, c.mt, c.nt
  local pv = {}
  -- bf16 scaled to f16: per-row score factors, O's scale change, P scaled by 2^P_SHIFT
  local rs, delta
  if c.f16s then rs, delta = f16s.tile_factors(c) end
  for mi = 0, mt - 1 do
    pv[mi] = {}
    for j = 0, nt - 1 do pv[mi][j] = {} end
    local alphas = {}
    for h = 0, 1 do
      local sq = (masked or spec.alibi) and c.G.sq(c.q0 + c.wrow + mi * 16 + c.g + h * 8)
      local lim, lim_lo
      if masked then
        local lo, hi = mask.row_range(c.mask, sq)
        lim = hi - kv0 - c.t * 2
        lim_lo = lo and lo - kv0 - c.t * 2
      end
      -- ALiBi: the distance from this lane's first key kv0 + 2t to the row's diagonal
      local dist = spec.alibi and b:f32(sq + c.mask.shift - kv0 - c.t * 2)
      local sv, mx = {}, nil
      local rf, sc = rs and rs[mi][h], c.scale2
      if rf and not spec.softcap then sc = sc * rf end
      for j = 0, nt - 1 do
        for e = 0, 1 do
          local raw = s[mi][j][2 * h + e + 1]
          if rf and spec.softcap then raw = raw * rf end
          local v = mask.score(c.mask, raw, sc, c.slope and c.slope[mi][h], dist and dist - (j * 8 + e))
          if masked then
            local ok = b:lt(j * 8 + e, lim)
            if lim_lo then ok = b:and_(ok, b:ge(j * 8 + e, lim_lo)) end
            v = b:select(ok, v, NEG_INF)
          end
          sv[#sv + 1] = v
          mx = mx and b:max(mx, v) or v
        end
      end
      local m_old = c.m[mi][h]:get()
      local m_new = b:max(m_old, b:warp_max(mx, 4))
      local m_use = b:select(b:eq(m_new, NEG_INF), 0.0, m_new)
      local alpha = b:ex2_approx(m_old - m_use)
      local alpha_o = delta and b:ex2_approx(m_old - m_use + delta) or alpha -- O: with its scale change
      local m_p = rs and m_use - f16s.P_SHIFT or m_use
      local sum = nil
      for j = 0, nt - 1 do
        for e = 0, 1 do
          local x = b:ex2_approx(sv[j * 2 + e + 1] - m_p)
          sum = sum and sum + x or x
          pv[mi][j][2 * h + e + 1] = x
        end
      end
      c.m[mi][h]:set(m_new)
      c.l[mi][h]:set(b:fma(c.l[mi][h]:get(), alpha, sum))
      if c.f16s then
        alphas[h] = alpha_o -- (O is rescaled after both rows: f16s.rescale_o)
      else
        for j = 0, c.odtiles - 1 do
          for e = 1, 2 do c.acc[mi][j][2 * h + e]:set(c.acc[mi][j][2 * h + e]:get() * alpha_o) end
        end
      end
    end
    if c.f16s then f16s.rescale_o(c, mi, alphas) end
    -- dropout: l summed every probability above; P V takes only the kept ones (1 / (1 - p) at the end)
    if c.drop then dropout.fragments(c.drop, b:ctaid("z"), b:ctaid("y"), c.q0 + c.wrow + mi * 16 + c.g, kv0 + c.t * 2, pv[mi], nt) end
  end
  return pv
end

-- O += P V with P as the A operand straight from the S registers; each V fragment feeds every m-tile.
local function mma_pv(c, pv, vt)
  local b, mt, dt = c.b, c.mt, c.dt
  local o = {}
  for mi = 0, mt - 1 do
    o[mi] = {}
    for j = 0, c.odtiles - 1 do
      o[mi][j] = { c.acc[mi][j][1]:get(), c.acc[mi][j][2]:get(), c.acc[mi][j][3]:get(), c.acc[mi][j][4]:get() }
    end
  end
  for kstep = 0, c.nt // 2 - 1 do
    local a = {}
    for mi = 0, mt - 1 do
      local p0, p1 = pv[mi][2 * kstep], pv[mi][2 * kstep + 1]
      a[mi] = { b:pack(p0[1], p0[2], dt), b:pack(p0[3], p0[4], dt), b:pack(p1[1], p1[2], dt), b:pack(p1[3], p1[4], dt) }
    end
    for dp = 0, c.odtiles // 2 - 1 do -- (osplit: this warp's columns, from ocol; d256's swizzle leaves chunk bits >= 3)
      local vf = b:ldmatrix(vt + c.ocol + c.frag_off("v", c.v_row, c.v_bit, kstep * 16, 2 * dp), 4, true)
      for mi = 0, mt - 1 do
        o[mi][2 * dp] = b:mma(dt, a[mi], { vf[1], vf[2] }, o[mi][2 * dp])
        o[mi][2 * dp + 1] = b:mma(dt, a[mi], { vf[3], vf[4] }, o[mi][2 * dp + 1])
      end
    end
  end
  for mi = 0, mt - 1 do
    for j = 0, c.odtiles - 1 do
      for e = 1, 4 do c.acc[mi][j][e]:set(o[mi][j][e]) end
    end
  end
end

-- One K/V tile (buffer buf, loop trip it): S = Q K^T, online softmax, O += P V.
local function mma_compute(c, it, buf, masked)
  local b = c.b
  local kt, vt = c.ks + buf * c.tile, c.vs + buf * c.tile
  local kv0 = key_tile(c, it) * c.bn
  local s = c.cfg.roll_qk and mma_scores_rolled(c, kt) or mma_scores(c, kt)
  if c.f16s then s = f16s.scores_lo(c, s, kt, c.ks + (1 - buf) * c.tile) end -- a wide K tile's or Q row's low parts
  local pv = mma_softmax(c, s, kv0, masked)
  if c.stages == 1 then
    if c.cfg.cp_async then b:cp_async_wait(0) else load_v(c, it, 0) end
    b:barrier()
  end
  -- a wide V tile's low part (lib/attn_f16scaled.lua pv_lo: before P V, or after it with TILES' lean)
  local lo_after = c.cfg.f16s_lean
  if c.f16s and not lo_after then f16s.pv_lo(c, pv, c.vs + (1 - buf) * c.tile + c.ocol) end
  mma_pv(c, pv, vt)
  if c.f16s and lo_after then f16s.pv_lo(c, pv, c.vs + (1 - buf) * c.tile + c.ocol) end
end

-- One trip of the K/V loop, with the pipeline around mma_compute().
local function mma_trip(c, it, masked)
  local b, spec, cfg, p, stages, bn = c.b, c.spec, c.cfg, c.p, c.stages, c.bn
  if cfg.cp_async and stages >= 2 then
    -- tile it + stages - 1 into the buffer tile it - 1 left (every warp passed the barrier after it)
    local ahead = it + (stages - 1)
    b:if_(b:lt(ahead, c.ntiles), function() load_kv(c, ahead, ahead % stages) end)
    b:cp_async_commit()
    b:cp_async_wait(stages - 1)
    b:barrier()
    mma_compute(c, it, it % stages, masked)
    b:barrier() -- the buffer is refilled stages - 1 trips later
  elseif stages == 2 then
    -- registers: tile it + 1 (the last tile again on the last trip) loads during compute and is
    -- stored into the other buffer after it; one barrier a trip.
    local nxt = b:min(it + 1, c.ntiles - 1)
    local sk = stage_load(b, spec, cfg, c.base.k, p.stride_ks, key_tile(c, nxt) * bn, bn, p.seq_k, nil, c.rot_k,
                          c.f16s and key_tile(c, nxt) * bn or nil)
    local sv = stage_load(b, spec, cfg, c.base.v, p.stride_vs, key_tile(c, nxt) * bn, bn, p.seq_k, c.f16s and f16s.v_zero(c) or true,
                          nil, (c.v_pad or cfg.f16s_lean) and key_tile(c, nxt) * bn or nil)
    if masked and c.warp_sees then
      -- (bf16 scaled to f16, causal: a warp skips the tiles none of its rows sees and computes the ones every row
      -- of it sees whole without the mask; the staging below is the block's)
      local kv0 = key_tile(c, it) * bn
      local function seen() b:if_(c.warp_sees(kv0), function() mma_compute(c, it, it & 1, masked) end) end
      if c.warp_whole then
        b:if_(c.warp_whole(kv0), function() mma_compute(c, it, it & 1, false) end, seen)
      else
        seen()
      end
    else
      mma_compute(c, it, it & 1, masked)
    end
    local nb = (it + 1) & 1
    local function stage_next()
      if c.f16s then
        f16s.stage(c, sk, sv, c.vs + (it & 1) * c.tile, function(dst, items) stage_store(b, spec, cfg, dst, items) end,
                   c.ks + (it & 1) * c.tile)
      end
      stage_store(b, spec, cfg, c.ks + nb * c.tile, sk)
      stage_store(b, spec, cfg, c.vs + nb * c.tile, sv)
    end
    -- (lib/attn_f16scaled.lua unstaged_last: the block's last trip stages no tile, block-uniform)
    if cfg.f16s_unstaged_last then b:if_(b:lt(it + 1, c.ntiles), stage_next) else stage_next() end
    b:barrier()
  else
    -- One buffer: K lands first; V is in flight during S (cp.async) or is loaded through
    -- registers after the softmax, when fewer registers are live.
    b:barrier()
    load_k(c, it, 0)
    if cfg.cp_async then
      b:cp_async_commit()
      load_v(c, it, 0)
      b:cp_async_commit()
      b:cp_async_wait(1)
    end
    b:barrier()
    mma_compute(c, it, 0, masked)
  end
end

-- O = acc / l, rounded once; lse from lanes t == 0 (splitkv: the split's O / l and base-2 lse).
local function mma_epilogue(c)
  local b, spec, p, G, t = c.b, c.spec, c.p, c.G, c.t
  local ob = util.dtype_bytes[spec.out]
  -- bf16 scaled to f16: O's accumulator scale is undone with 1 / l; l carries P's 2^P_SHIFT
  local ofac, lsh = c.f16s and f16s.o_factor(c), c.f16s and f16s.P_SHIFT or 0
  for mi = 0, c.mt - 1 do
    for h = 0, 1 do
      local row = c.q0 + c.wrow + mi * 16 + c.g + h * 8
      local live = b:lt(row, G.rows)
      local lsum = b:warp_sum(c.l[mi][h]:get(), 4)
      local empty = b:le(lsum, 0.0)
      local inv = b:select(empty, 0.0, 1.0 / lsum)
      if c.drop then inv = inv * c.drop.rp end
      if ofac then inv = inv * ofac end
      local acc = c.acc[mi]
      if spec.splitkv then
        local m_use = b:select(b:eq(c.m[mi][h]:get(), NEG_INF), 0.0, c.m[mi][h]:get())
        local lse2 = b:select(empty, NEG_INF, m_use + b:lg2_approx(lsum) - lsh)
        -- (osplit: this warp's O tiles at their columns from ocol, lse from the row's first warp, as below)
        local lead = b:eq(t, 0)
        if c.ohalf then lead = b:and_(lead, b:eq(c.ohalf, 0)) end
        split_store(b, spec, p, G, row, live, function(at)
          for j = 0, (c.osplit == 1 and spec.vdim // 8 or c.odtiles) - 1 do -- (padded head_dim: the columns past it are not stored)
            local function put()
              b:store_vec(at + (c.ocol + j * 8 + t * 2), { acc[j][2 * h + 1]:get() * inv, acc[j][2 * h + 2]:get() * inv }, { align = 8 })
            end
            if c.osplit == 1 or spec.vdim == spec.head_dim then put() else b:if_(b:lt(c.ocol + j * 8, spec.vdim), put) end
          end
        end, lse2, lead)
      else
        local orow = c.base.o + b:i64(b:select(live, row, 0)) * p.stride_os + t * 2
        local vals = {}
        -- (osplit: this warp's O tiles from column ocol, those below v_head_dim)
        local nj = c.osplit == 1 and spec.vdim // 8 or c.odtiles
        for j = 0, nj - 1 do -- (O: v_head_dim wide)
          vals[j] = b:from_f32_vec({ acc[j][2 * h + 1]:get() * inv, acc[j][2 * h + 2]:get() * inv }, spec.out)
        end
        b:if_(live, function()
          for j = 0, nj - 1 do
            if c.osplit == 1 or spec.vdim == spec.head_dim then
              b:store_vec(orow + c.ocol + j * 8, vals[j], { align = 2 * ob })
            else
              b:if_(b:lt(c.ocol + j * 8, spec.vdim), function() b:store_vec(orow + c.ocol + j * 8, vals[j], { align = 2 * ob }) end)
            end
          end
        end)
        local m_use = b:select(b:eq(c.m[mi][h]:get(), NEG_INF), 0.0, c.m[mi][h]:get())
        local lse = b:select(empty, POS_INF, (m_use + b:lg2_approx(lsum) - lsh) * (1.0 / LOG2E))
        local idx = lse_row(b, spec, p) + b:i64(row)
        local lane_writes = b:and_(live, b:eq(t, 0))
        if c.ohalf then lane_writes = b:and_(lane_writes, b:eq(c.ohalf, 0)) end -- (osplit: the row's first warp)
        b:if_(b:and_(lane_writes, b:not_(b:is_null(p.lse))), function() b:store(p.lse + idx, lse) end)
      end
    end
  end
end

-- (cfg.seq_shared: varlen on bf16 d256's osplit tiles, lib/attn_f16scaled.lua TILES[256]) The sequence's lengths
-- seq_q, seq_k (cu_seqlens loads at the start) go to Q's tile (free once the fragments are in registers; the loop's
-- extremum slots take its first 32 words), thread 0 stores them, one barrier, and each trip and the epilogue read
-- them again, so that neither is held across the key loop: causal varlen spilled 4 bytes at 255 registers holding
-- them (ptxas sm_75 CUDA 13, head_dim 160-256, kiln's pipeline and default<O3>); 0 read again (255 registers; not
-- causal 248, 254 before). (Split-KV's window and ALiBi with a causal form spilled 4 bytes there; read again, the
-- window's bounds left it at 4, the rows' slopes made it 8: that key stays SIMT, lib/attn_f16scaled.lua.)
local SEQ_SLOT = 64 -- the words' f32 offset in Q's tile
local function seq_shared(c)
  local b, p = c.b, c.p
  local at = c.f16s.red_loop + SEQ_SLOT
  b:if_(b:eq(b:tid(), 0), function()
    b:store(at, b:from_bits(p.seq_q))
    b:store(at + 1, b:from_bits(p.seq_k))
  end)
  b:barrier()
  c.seq_at = at
end
-- Runs f (one trip's IR, or the epilogue's) with seq_q and seq_k read again from Q's tile: the params, the mask's
-- bounds and the geometry's rows that f reads see them (seq_shared); or f as it is.
local function with_seqs(c, f)
  if not c.seq_at then return f() end
  local b = c.b
  local p0, m0, G0 = c.p, c.mask, c.G
  local lp = setmetatable({ seq_q = b:bits(b:load(c.seq_at)), seq_k = b:bits(b:load(c.seq_at + 1)) }, { __index = p0 })
  local m = setmetatable({ p = lp, shift = lp.seq_k - lp.seq_q }, { __index = m0 })
  m.cshift = c.spec.top_left and 0 or m.shift
  c.p, c.mask, c.G = lp, m, setmetatable({ rows = lp.seq_q }, { __index = G0 })
  f()
  c.p, c.mask, c.G = p0, m0, G0
end

local function build_mma(b, spec, cfg, p)
  local c = { b = b, spec = spec, cfg = cfg, p = p }
  mma_setup(c)
  mma_prologue(c)
  mma_fragments(c)
  if c.f16s then f16s.fragments_done(c) end
  if cfg.seq_shared then seq_shared(c) end
  mma_state(c)
  local function trip(masked) return function(it) with_seqs(c, function() mma_trip(c, it, masked) end) end end
  if c.lead then b:for_(0, c.lead, 1, trip(true)) end
  b:for_(c.lead or 0, c.nfull, 1, trip(false))
  b:for_(c.nfull, c.ntiles, 1, trip(true))
  with_seqs(c, function() mma_epilogue(c) end)
end

function K.build(b, spec, cfg)
  spec = spec_of(spec)
  if cfg.path == "wgmma" then return wgmma.build(b, spec, cfg, base_params) end
  local p = varlen.bind(b, spec, declare(b, spec), cfg.rows_per_block) -- (varlen: the block's sequence)
  paged.setup(b, spec, p)
  append.setup(b, spec, p)
  rotary.setup(b, spec, p)
  append.write(b, spec, cfg, p, rotary.hook(b, spec, p, "k"))
  b:max_registers(cfg.max_registers)
  if cfg.path == "mma" then build_mma(b, spec, cfg, p) else build_simt(b, spec, cfg, p) end
end

-- launch (docs/registry.md): tensors [batch, seq, heads, head_dim] with batch/sequence/head strides
-- (contiguous by default); split-KV runs `splits` key ranges into the workspace, then attention_combine
-- (which writes o and lse) merges them
function K.launch(spec, cfg)
  local d, al = spec.head_dim, cfg.align
  local t = {
    { "q", "in", { "batch", "seq_q", "heads_q", d }, align = al },
    { "k", "in", { "batch", "seq_k", "heads_kv", d }, align = al },
    { "v", "in", { "batch", "seq_k", "heads_kv", d }, align = al },
  }
  local strides = {}
  for _, n in ipairs({ "q", "k", "v", "o" }) do
    for i, a in ipairs({ "b", "s", "h" }) do strides[#strides + 1] = { "stride_" .. n .. a, n, i - 1 } end
  end
  local l = {
    tensors = t,
    scalars = { { "batch" }, { "heads_q" }, { "heads_kv" }, { "seq_q" }, { "seq_k" }, { "scale", 1 / math.sqrt(d) } },
    strides = strides,
    problem = { "seq_q", "heads_q", "batch" },
  }
  if spec.splitkv then
    for _ = 1, 3 do table.remove(strides) end
    t[#t + 1] = { "ws", "workspace", { string.format("splits*batch*heads_q*seq_q*%d", d + 1) }, align = 16 }
    l.scalars[#l.scalars + 1] = { "splits" }
    l.problem = { "splits", string.format("heads_kv*cdiv(heads_q/heads_kv*seq_q,%d)", cfg.rows_per_block), "batch" }
    l.after = { { cfg.then_spec } }
  else
    t[#t + 1] = { "o", "out", { "batch", "seq_q", "heads_q", d }, align = al }
    t[#t + 1] = { "lse", "out", { "batch", "heads_q", "seq_q" }, optional = true }
  end
  vdim.launch(spec, l)
  if cfg.path == "wgmma" then wgmma.launch(spec, cfg, l) end
  return rotary.launch(spec, append.launch(spec, paged.launch(spec, varlen.launch(spec, dropout.launch(spec, mask.launch(spec, l)), d, true, true),
    cfg.block_n), al))
end

-- the ptxas matrix (docs/registry.md): dtype x head_dim x causal on the default path; the SIMT path
-- forced for f16/bf16 on sm_75 and sm_80; an f32 output from half-precision inputs; split-KV (the
-- quick suite: a slice, sm_86/89 differ from sm_80 only in the pipeline depth shared memory allows)
local DT, DIMS, CAUSAL = util.axis("dtype", { "f32", "f16", "bf16" }), util.axis("head_dim", { 32, 64, 96, 128, 256 }),
                         util.axis("causal", { "false", "true" })
local NOT_86_89 = { 75, 80, 90, 100, 103, 110, 120, 121 }
local MASK_KEYS = "window=true softcap=true alibi=true"
local ODD_DIMS = util.axis("head_dim", { 8, 40, 80, 160, 200, 248 })
K.variants = {
  { DT, DIMS, CAUSAL },
  { { "dtype=f16", "dtype=bf16" }, DIMS, CAUSAL, "path=simt", sms = { 75, 80 } },
  { { "dtype=f16", "dtype=bf16" }, "head_dim=128", "causal=true", "out=f32" },
  { DT, DIMS, CAUSAL, "splitkv=true", full = true },
  { DT, { "head_dim=64", "head_dim=128" }, CAUSAL, "splitkv=true", quick = true, sms = NOT_86_89 },
  { "dtype=bf16", { "head_dim=32", "head_dim=96", "head_dim=256" }, "causal=true", "splitkv=true", quick = true,
    sms = { 75, 80, 90 } },
  -- every mask key on (lib/attn_mask.lua), both causal alignments; SIMT forced; split-KV
  { DT, DIMS, { "causal=true", "causal=top_left" }, MASK_KEYS, full = true },
  { DT, DIMS, "causal=top_left", MASK_KEYS, quick = true },
  { { "dtype=f16", "dtype=bf16" }, DIMS, "causal=true", MASK_KEYS, "path=simt", sms = { 75, 80 } },
  { DT, DIMS, { "causal=true", "causal=top_left" }, MASK_KEYS, "splitkv=true", full = true },
  { DT, DIMS, "causal=true", MASK_KEYS, "splitkv=true", quick = true, sms = { 75, 80, 90 } },
  -- head dims between the tile table's widths (padded to the next); split-KV at two of them
  { DT, ODD_DIMS, CAUSAL, full = true },
  { DT, ODD_DIMS, "causal=true", quick = true, sms = { 75, 80, 90 } },
  { DT, { "head_dim=40", "head_dim=200" }, "causal=false", "splitkv=true", sms = { 75, 80, 90 } },
  -- dropout (lib/attn_dropout.lua; not with split-KV): alone and with every mask key, SIMT forced, the test mask output
  { DT, DIMS, CAUSAL, "dropout=true", full = true },
  { DT, DIMS, { "causal=true", "causal=top_left" }, MASK_KEYS, "dropout=true", full = true },
  { DT, DIMS, "causal=true", "dropout=true", quick = true, sms = { 75, 80, 90 } },
  { "dtype=bf16", "head_dim=96", "causal=false", "dropout=true", quick = true, sms = { 80, 86 } }, -- (spilled on 32-row warps)
  -- padded head dims with dropout and a window on sm_75's staged tiles (spilled: MMA_TILES_STAGED_DROP_PADDED_WINDOW)
  { "dtype=f16", util.axis("head_dim", { 88, 104, 112, 120 }), util.axis("causal", { "false", "true", "top_left" }),
    { "window=true dropout=true", MASK_KEYS .. " dropout=true" },
    full = true, sms = { 75 } },
  { "dtype=f16", { "head_dim=88", "head_dim=104" }, "causal=true", "window=true dropout=true", quick = true, sms = { 75 } },
  { DT, DIMS, "causal=true", MASK_KEYS, "dropout=true", quick = true, sms = { 75, 80, 90, 120 } },
  { { "dtype=f16", "dtype=bf16" }, DIMS, "causal=true", MASK_KEYS, "dropout=true", "path=simt", sms = { 75, 80 } },
  { DT, "head_dim=64", "causal=true", MASK_KEYS, "dropout=true dropout_mask=true", sms = { 75, 80 } },
  -- varlen=true (lib/attn_varlen.lua): every dtype, dim and causal form, with every mask key, SIMT forced,
  -- the padded dims (the quick suite: a slice on sm_75 / 80 / 90)
  { DT, DIMS, CAUSAL, "varlen=true", full = true },
  { DT, DIMS, "causal=true", "varlen=true", quick = true, sms = { 75, 80, 90 } },
  { DT, DIMS, { "causal=true", "causal=top_left" }, MASK_KEYS, "varlen=true", full = true },
  { DT, DIMS, "causal=top_left", MASK_KEYS, "varlen=true", quick = true, sms = { 75, 80, 90 } },
  { { "dtype=f16", "dtype=bf16" }, DIMS, "causal=true", "varlen=true", "path=simt", sms = { 75, 80 }, full = true },
  { { "dtype=f16", "dtype=bf16" }, "head_dim=128", "causal=true", "varlen=true", "path=simt", sms = { 75, 80 }, quick = true },
  { DT, ODD_DIMS, "causal=true", "varlen=true", full = true },
  { DT, { "head_dim=40", "head_dim=200" }, "causal=true", "varlen=true", quick = true, sms = { 80 } },
  -- dropout on packed sequences (lib/attn_dropout.lua with lib/attn_varlen.lua): alone and with every mask key,
  -- SIMT forced, the padded dims, the mask output (the quick suite: d64/d128 on sm_75 / 80)
  { DT, DIMS, { "causal=true", "causal=top_left" }, { "varlen=true dropout=true", MASK_KEYS .. " varlen=true dropout=true" },
    full = true },
  { { "dtype=f16", "dtype=bf16" }, DIMS, "causal=true", "varlen=true dropout=true", "path=simt", sms = { 75, 80 }, full = true },
  { DT, ODD_DIMS, "causal=true", "varlen=true dropout=true", full = true },
  { DT, "head_dim=64", "causal=true", MASK_KEYS, "varlen=true dropout=true dropout_mask=true", full = true },
  { DT, { "head_dim=64", "head_dim=128" }, "causal=true",
    { "varlen=true dropout=true", MASK_KEYS .. " varlen=true dropout=true" }, quick = true, sms = { 75, 80 } },
  { "dtype=f16", "head_dim=64", "causal=true", MASK_KEYS, "varlen=true dropout=true dropout_mask=true", quick = true,
    sms = { 80 } },
  -- paged KV cache (lib/attn_paged.lua): split-KV decoding and the plain forward over pages
  { DT, DIMS, CAUSAL, { "paged=true", "splitkv=true paged=true" }, full = true },
  { DT, { "head_dim=64", "head_dim=128", "head_dim=256" }, "causal=true", "splitkv=true paged=true", quick = true,
    sms = { 75, 80, 90, 120 } },
  { DT, { "head_dim=64", "head_dim=128" }, "causal=true", "paged=true", quick = true, sms = { 75, 80, 90 } },
  -- in-kernel append into the pages (lib/attn_append.lua)
  { DT, DIMS, CAUSAL, { "paged=true append=true", "splitkv=true paged=true append=true" }, full = true },
  { DT, { "head_dim=64", "head_dim=128" }, "causal=true", { "paged=true append=true", "splitkv=true paged=true append=true" },
    quick = true, sms = { 75, 80, 90, 120 } },
  -- rotary inside the append (lib/attn_rotary.lua): both modes, rotary_dim < head_dim, other table dtypes
  { DT, DIMS, CAUSAL, { "paged=true append=true", "splitkv=true paged=true append=true" }, { "rotary=neox", "rotary=interleaved" },
    full = true },
  { DT, { "head_dim=32 rotary_dim=16", "head_dim=96 rotary_dim=48", "head_dim=128 rotary_dim=64", "head_dim=256 rotary_dim=128" },
    "causal=true", { "paged=true append=true", "splitkv=true paged=true append=true" }, { "rotary=neox", "rotary=interleaved" },
    full = true },
  { { "dtype=f16", "dtype=bf16" }, "head_dim=128", "causal=true", { "paged=true append=true", "splitkv=true paged=true append=true" },
    { "rotary=neox", "rotary=interleaved rotary_dim=64" }, quick = true, sms = { 75, 80, 90, 120 } },
  { "dtype=f32", "head_dim=64", "causal=true", "splitkv=true paged=true append=true", "rotary=neox", quick = true, sms = { 80 } },
  -- (bf16 sm_75's d96 split-KV with rotary, lib/attn_f16scaled.lua SPLIT_ROTARY: spilled 8 bytes on SPLIT's tiles)
  { "dtype=bf16", "head_dim=96", "causal=false", "splitkv=true paged=true append=true", "rotary=neox", quick = true, sms = { 75 } },
  { "dtype=bf16", "head_dim=128", "causal=true", "splitkv=true paged=true append=true", { "rotary=neox rotary_cs=f32", "rotary=interleaved rotary_cs=f16" },
    sms = { 75, 80, 90 } },
  -- the mask keys over pages, with the append and rotary inside it (every key with the others)
  { DT, DIMS, { "causal=true", "causal=top_left" }, MASK_KEYS,
    { "paged=true", "splitkv=true paged=true", "paged=true append=true", "splitkv=true paged=true append=true",
      "paged=true append=true rotary=neox", "splitkv=true paged=true append=true rotary=neox" }, full = true },
  { DT, DIMS, "causal=true", MASK_KEYS, { "paged=true append=true rotary=neox", "splitkv=true paged=true append=true rotary=neox" },
    quick = true, sms = { 75, 80, 90 } },
  -- bf16 on sm_75's f16 tensor cores (path=mma, lib/attn_f16scaled.lua): every head_dim it takes, the
  -- mask keys, split-KV, two padded head dims
  { "dtype=bf16", { "head_dim=32", "head_dim=64", "head_dim=96", "head_dim=128" }, CAUSAL, "path=mma", sms = { 75 } },
  { "dtype=bf16", { "head_dim=64", "head_dim=128" }, "causal=top_left", MASK_KEYS, "path=mma", sms = { 75 } },
  { "dtype=bf16", { "head_dim=32", "head_dim=96" }, "causal=top_left", MASK_KEYS, "path=mma", full = true, sms = { 75 } },
  { "dtype=bf16", { "head_dim=64", "head_dim=128" }, "causal=true", "splitkv=true", "path=mma", sms = { 75 } },
  { "dtype=bf16", { "head_dim=32", "head_dim=64", "head_dim=96", "head_dim=128" }, CAUSAL, "splitkv=true", "path=mma",
    full = true, sms = { 75 } },
  { "dtype=bf16", { "head_dim=40", "head_dim=80" }, "causal=true", "path=mma", sms = { 75 } },
  -- and with varlen, the paged KV cache (split-KV, the append, rotary inside it) and dropout
  { "dtype=bf16", { "head_dim=64", "head_dim=128" }, "causal=true",
    { "varlen=true", "paged=true", "splitkv=true paged=true append=true rotary=neox", "dropout=true" }, "path=mma", sms = { 75 } },
  { "dtype=bf16", { "head_dim=32", "head_dim=64", "head_dim=96", "head_dim=128" }, CAUSAL,
    { "varlen=true", "paged=true", "splitkv=true paged=true append=true rotary=neox", "paged=true append=true rotary=interleaved",
      "dropout=true", "varlen=true dropout=true" }, "path=mma", full = true, sms = { 75 } },
  { "dtype=bf16", { "head_dim=32", "head_dim=64", "head_dim=96", "head_dim=128", "head_dim=80" }, "causal=top_left", MASK_KEYS,
    { "varlen=true", "paged=true append=true rotary=neox", "splitkv=true paged=true", "varlen=true dropout=true" }, "path=mma",
    full = true, sms = { 75 } },
  -- v_head_dim (lib/attn_vdim.lua): MLA prefill's qk 192 / v 128 and a few other pairs, split-KV, the
  -- mask keys, dropout, SIMT forced (the quick suite: sm_75 / 80 / 90)
  { DT, { "head_dim=192 v_head_dim=128", "head_dim=64 v_head_dim=128", "head_dim=128 v_head_dim=64" }, CAUSAL,
    sms = { 75, 80, 90 }, quick = true },
  { DT, { "head_dim=192 v_head_dim=128", "head_dim=64 v_head_dim=128", "head_dim=128 v_head_dim=64",
          "head_dim=40 v_head_dim=24", "head_dim=256 v_head_dim=8" }, CAUSAL, full = true },
  { DT, "head_dim=192 v_head_dim=128", { "causal=false splitkv=true", "causal=true " .. MASK_KEYS,
    "causal=true dropout=true", "causal=true splitkv=true " .. MASK_KEYS }, sms = { 75, 80, 90 } },
  { { "dtype=f16", "dtype=bf16" }, "head_dim=192 v_head_dim=128", "causal=true path=simt", sms = { 80 } },
  -- sm_90a's TMA + wgmma kernel (path=wgmma, lib/attn_wgmma.lua; the arch-specific target takes only the rows
  -- that name it): f16/bf16 at head_dim 64/128/256, every causal form, the mask keys, varlen, split-KV and dropout
  -- (lib/attn_wgmma_keys.lua; d256 with window/softcap/dropout on 32-key tiles: lib/attn_wgmma_tiles.lua), an f32
  -- output (the quick suite: 37 of them)
  { { "dtype=f16", "dtype=bf16" }, { "head_dim=64", "head_dim=128", "head_dim=256" }, { "causal=false", "causal=true", "causal=top_left" },
    { "", "varlen=true", "splitkv=true" }, "path=wgmma", full = true, sms = { "90a" } },
  { { "dtype=f16", "dtype=bf16" }, { "head_dim=64", "head_dim=128", "head_dim=256" }, { "causal=true", "causal=top_left" }, MASK_KEYS,
    { "", "varlen=true", "splitkv=true", "dropout=true", "varlen=true dropout=true" }, "path=wgmma", full = true, sms = { "90a" } },
  { { "dtype=f16", "dtype=bf16" }, { "head_dim=64", "head_dim=128", "head_dim=256" }, { "causal=false", "causal=true", "causal=top_left" },
    { "dropout=true", "varlen=true dropout=true" }, "path=wgmma", full = true, sms = { "90a" } },
  { { "dtype=f16", "dtype=bf16" }, "head_dim=256", "causal=top_left", MASK_KEYS, "path=wgmma", quick = true, sms = { "90a" } },
  { "dtype=bf16", "head_dim=256", "causal=true", { "dropout=true", MASK_KEYS .. " varlen=true dropout=true" }, "path=wgmma", quick = true,
    sms = { "90a" } },
  { { "dtype=f16", "dtype=bf16" }, "head_dim=256", { "causal=true", "causal=top_left" }, "alibi=true", { "", "varlen=true", "splitkv=true" },
    "path=wgmma", full = true, sms = { "90a" } },
  { { "dtype=f16", "dtype=bf16" }, { "head_dim=64", "head_dim=128", "head_dim=256" }, CAUSAL, "path=wgmma", quick = true, sms = { "90a" } },
  { { "dtype=f16", "dtype=bf16" }, { "head_dim=64", "head_dim=128" }, "causal=top_left", MASK_KEYS, "path=wgmma", quick = true,
    sms = { "90a" } },
  { { "dtype=f16", "dtype=bf16" }, "head_dim=256", "causal=top_left", "alibi=true", "path=wgmma", quick = true, sms = { "90a" } },
  { { "dtype=f16", "dtype=bf16" }, { "head_dim=64", "head_dim=128", "head_dim=256" }, "causal=true", "varlen=true", "path=wgmma",
    quick = true, sms = { "90a" } },
  { "dtype=bf16", "head_dim=128", "causal=top_left", MASK_KEYS, "varlen=true", "path=wgmma", quick = true, sms = { "90a" } },
  { { "dtype=bf16 head_dim=64", "dtype=bf16 head_dim=128", "dtype=f16 head_dim=256" }, "causal=true", "splitkv=true", "path=wgmma",
    quick = true, sms = { "90a" } },
  { "dtype=f16", "head_dim=64", "causal=top_left", MASK_KEYS, "splitkv=true", "path=wgmma", quick = true, sms = { "90a" } },
  { { "dtype=bf16 head_dim=64", "dtype=f16 head_dim=128" }, "causal=true", "dropout=true", "path=wgmma", quick = true, sms = { "90a" } },
  { "dtype=bf16", "head_dim=128", "causal=true", MASK_KEYS, "varlen=true dropout=true", "path=wgmma", quick = true, sms = { "90a" } },
  { "dtype=f16", "head_dim=128", "causal=true", "out=f32", "path=wgmma", sms = { "90a" } },
  -- path=wgmma's other head dims (lib/attn_wgmma_dims.lua: on 64/128/256-column tiles): d32, d96, padded ones
  -- near them, 136-248 on 256 (O 192 wide), v_head_dim != head_dim (MLA's 192 / 128) (the quick suite: 10 of them)
  { { "dtype=f16", "dtype=bf16" }, { "head_dim=32", "head_dim=96", "head_dim=48", "head_dim=80", "head_dim=120" }, CAUSAL,
    { "", MASK_KEYS, MASK_KEYS .. " varlen=true", "splitkv=true", "dropout=true" }, "path=wgmma", full = true, sms = { "90a" } },
  { { "dtype=f16", "dtype=bf16" }, { "head_dim=160", "head_dim=192 v_head_dim=128", "head_dim=64 v_head_dim=128", "head_dim=128 v_head_dim=64" },
    CAUSAL, { "", MASK_KEYS, "splitkv=true", "dropout=true" }, "path=wgmma", full = true, sms = { "90a" } },
  { "dtype=bf16", { "head_dim=32", "head_dim=96" }, "causal=true", { "", MASK_KEYS .. " varlen=true", "splitkv=true", "dropout=true" },
    "path=wgmma", quick = true, sms = { "90a" } },
  { "dtype=f16", "head_dim=192 v_head_dim=128", "causal=true", { "", "splitkv=true" }, "path=wgmma", quick = true, sms = { "90a" } },
  -- paged KV on path=wgmma (lib/attn_wgmma_paged.lua: the producer's cp.async from the pages into the dense kernel's
  -- tiles, 32/64/128 keys), plain and split-KV, at the padded head dims too (the quick suite: 10 of them)
  { { "dtype=f16", "dtype=bf16" }, { "head_dim=64", "head_dim=128", "head_dim=256" }, { "causal=false", "causal=true", "causal=top_left" },
    { "paged=true", "splitkv=true paged=true" }, "path=wgmma", full = true, sms = { "90a" } },
  { { "dtype=f16", "dtype=bf16" }, { "head_dim=64", "head_dim=128", "head_dim=256" }, { "causal=true", "causal=top_left" },
    { MASK_KEYS, "window=true", "softcap=true", "alibi=true" }, { "paged=true", "splitkv=true paged=true" }, "path=wgmma", full = true,
    sms = { "90a" } },
  { { "dtype=f16", "dtype=bf16" }, { "head_dim=32", "head_dim=40", "head_dim=96", "head_dim=112", "head_dim=160", "head_dim=248" },
    { "causal=false", "causal=true", "causal=top_left" }, { "", MASK_KEYS }, { "paged=true", "splitkv=true paged=true" }, "path=wgmma",
    full = true, sms = { "90a" } },
  { "dtype=bf16", { "head_dim=64", "head_dim=128" }, "causal=true", { "paged=true", "splitkv=true paged=true" }, "path=wgmma",
    quick = true, sms = { "90a" } },
  { "dtype=f16", "head_dim=128", "causal=top_left", MASK_KEYS, "splitkv=true paged=true", "path=wgmma", quick = true, sms = { "90a" } },
  { "dtype=f16", "head_dim=256", "causal=true", "alibi=true", "paged=true", "path=wgmma", quick = true, sms = { "90a" } },
  { "dtype=bf16", "head_dim=256", "causal=true", MASK_KEYS, "paged=true", "path=wgmma", quick = true, sms = { "90a" } },
  { { "dtype=f16 head_dim=96", "dtype=bf16 head_dim=160" }, "causal=true", "splitkv=true paged=true", "path=wgmma", quick = true,
    sms = { "90a" } },
  { "dtype=bf16", "head_dim=40", "causal=true", MASK_KEYS, "paged=true", "path=wgmma", quick = true, sms = { "90a" } },
}
-- the default bundle: every dtype at head_dim 64 and 128, and split-KV decoding for f16/bf16 there
-- extra: split-KV decoding; issue 24's keys where a model needs them, bottom-right causal as
-- FlashAttention runs them (prefill and decoding over a KV cache): Mistral 7B's sliding window
-- (head_dim 128, window 4096: f16 and bf16), Gemma 2's logit softcap (head_dim 256, bf16: softcap 50
-- on its global layers, with its 4096 window on the local ones), ALiBi (BLOOM's and MPT's bf16 d128, causal),
-- training with attention dropout (bf16 d128),
-- packed-sequence prefill (varlen, f16 and bf16 head_dim 128 causal: FA2's flash_attn_varlen_func as serving
-- stacks batch prompts), and the KV cache of serving (flash_attn_with_kvcache, f16/bf16 head_dim 128 causal as
-- serving stacks call it): decoding over pages (split-KV, and the plain kernel the runtime runs when it picks one
-- split), the same with the in-kernel append, and bf16 with GPT-NeoX rotary inside the append (Llama's)
K.bundle = { dtypes = { "dtype", "out" }, shape = "head_dim", shapes = { 64, 128 },
             extra = { "dtype=f16 head_dim=64 splitkv=true", "dtype=bf16 head_dim=64 splitkv=true",
                       "dtype=f16 head_dim=128 splitkv=true", "dtype=bf16 head_dim=128 splitkv=true",
                       "dtype=f16 head_dim=128 causal=true window=true", "dtype=bf16 head_dim=128 causal=true window=true",
                       "dtype=bf16 head_dim=256 causal=true softcap=true",
                       "dtype=bf16 head_dim=256 causal=true window=true softcap=true",
                       "dtype=bf16 head_dim=128 causal=true alibi=true",
                       "dtype=bf16 head_dim=128 causal=true dropout=true",
                       "dtype=f16 head_dim=128 causal=true varlen=true", "dtype=bf16 head_dim=128 causal=true varlen=true",
                       "dtype=f16 head_dim=128 causal=true splitkv=true paged=true",
                       "dtype=bf16 head_dim=128 causal=true splitkv=true paged=true",
                       "dtype=f16 head_dim=128 causal=true paged=true", "dtype=bf16 head_dim=128 causal=true paged=true",
                       "dtype=f16 head_dim=128 causal=true splitkv=true paged=true append=true",
                       "dtype=bf16 head_dim=128 causal=true splitkv=true paged=true append=true",
                       "dtype=f16 head_dim=128 causal=true paged=true append=true",
                       "dtype=bf16 head_dim=128 causal=true paged=true append=true",
                       "dtype=bf16 head_dim=128 causal=true splitkv=true paged=true append=true rotary=neox",
                       "dtype=bf16 head_dim=128 causal=true paged=true append=true rotary=neox" },
             -- sm_90a's own kernels (path=wgmma, opt-in: lib/attn_wgmma.lua), on sm_90a alone: the default set's f16/bf16
             -- specs that path builds (not f32, paged, append or rotary: those run the sm_90 entries on a 9.0 device;
             -- split-KV's attention_combine too)
             arch = { ["90a"] = {
               "dtype=f16 head_dim=64 path=wgmma", "dtype=bf16 head_dim=64 path=wgmma",
               "dtype=f16 head_dim=128 path=wgmma", "dtype=bf16 head_dim=128 path=wgmma",
               "dtype=f16 head_dim=64 splitkv=true path=wgmma", "dtype=bf16 head_dim=64 splitkv=true path=wgmma",
               "dtype=f16 head_dim=128 splitkv=true path=wgmma", "dtype=bf16 head_dim=128 splitkv=true path=wgmma",
               "dtype=f16 head_dim=128 causal=true window=true path=wgmma", "dtype=bf16 head_dim=128 causal=true window=true path=wgmma",
               "dtype=bf16 head_dim=256 causal=true softcap=true path=wgmma",
               "dtype=bf16 head_dim=256 causal=true window=true softcap=true path=wgmma",
               "dtype=bf16 head_dim=128 causal=true alibi=true path=wgmma", "dtype=bf16 head_dim=128 causal=true dropout=true path=wgmma",
               "dtype=f16 head_dim=128 causal=true varlen=true path=wgmma", "dtype=bf16 head_dim=128 causal=true varlen=true path=wgmma" } } }

-- Runnable examples (`kiln list`, the CLI's usage texts): the spec's keys, the SM, then `kiln run`'s options
K.examples = { "dtype=bf16 head_dim=64 causal=true --sm 75 --rows 129 --seq-k 200 --heads 4:1",
               "dtype=bf16 head_dim=128 splitkv=true --sm 80 --rows 1 --seq-k 4096 --heads 32:8 --splits 16",
               "dtype=f16 head_dim=64 causal=top_left window=true softcap=true --sm 80 --rows 40 --window 8,0 --softcap 30",
               "dtype=bf16 head_dim=64 causal=true dropout=true --sm 80 --rows 40 --dropout 0.1 --seed 7",
               "dtype=f16 head_dim=32 causal=true varlen=true --sm 80 --varlen 0,1,37,300 --heads 4:2" }

return K
