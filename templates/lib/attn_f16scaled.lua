-- templates/lib/attn_f16scaled.lua - bf16 attention on f16 tensor cores (sm_75 m16n8k8) through exact power-of-two scaling.
--
-- Targets with f16 mma but no bf16 mma (sm_75) run bf16 attention (path=mma) here: every bf16 value
-- is multiplied by a power of two and rounded to f16 (cvt.rn.f16.f32 from the exact f32 widening;
-- no bf16 instruction). bf16 carries 8 significant bits, f16 11, so the conversion is exact for
-- every value whose scaled exponent is at least -17 (f16 subnormals keep 8 bits down to 2^-17).
-- The scale puts the largest finite |x| of its group in f16's top binade [2^15, 2^16) (a bf16
-- mantissa tops out at 65280 < 65504 there):
--   Q: per query row (hq), when the block loads its rows (q_load); the row's factor is folded into
--      its softmax scale.
--   K: per key tile (hk), when the tile is staged into shared memory (stage); S = (Q 2^hq)(K 2^hk)^T
--      accumulates in f32 and is multiplied by scale * log2(e) * 2^-(hq + hk) per row and tile.
--   V: per key tile (cv), with O's f32 accumulator kept at the scale of the last tile: the online
--      softmax's rescale of O takes 2^(cv_new - cv_old) with it (alpha = 2^(m_old - m_new + delta)).
--      A tile may raise the scale by at most 2^64 over the smallest scale seen (the tile with the
--      largest V), so the accumulator stays below 2^126 (O's values scaled by at most 2^16 and 2^64).
--   P: ex2(x - m + 15), i.e. P * 2^15 in [0, 2^15], rounded to f16 (11 bits down to 2^-29, 0 below
--      2^-40); the row sum l carries the same 2^15, so O = acc 2^-cv / l needs no correction and
--      lse = m + log2(l) - 15.
-- Non-finite values (Inf, NaN) take no part in choosing a scale and stay what they are (x 2^k), so
-- they propagate as on the SIMT path. A group whose largest finite |x| is below 2^-100 (zero, or
-- bf16 subnormals) takes the scale of 2^-100, keeping every factor a normal f32.
--
-- Error against exact arithmetic (the bound docs/attention.md states): each P V term is exact but
-- for P's rounding (2^-11 relative, or 2^-40 absolute below 2^-29) and the elements of a V tile more
-- than 2^-(32 + loe) below the tile's largest (a tile spanning more than 2^32 gets its low part,
-- v - hi, and a second mma: stage, pv_lo; loe = 40 unless the tile's scale is more than
-- 55 - ceil(log2 seq_k) binades above the smallest V scale seen, lo_scale); each score exact but
-- for Q and K elements more than 2^72 below their row's or tile's largest (a Q row or K tile spanning
-- more than 2^32 gets its low parts' products: q_load, stage, scores_lo), whose loss is at
-- most 2^-71 (max|q| sum|k| + max|k| sum|q|) on the score before scale * log2(e).
local M = {}

local TOP = 15 -- the exponent the largest |x| of a group is scaled to
local FLOOR = -100 -- groups whose largest |x| is below 2^FLOOR are scaled as if it were 2^FLOOR
local RAISE = 64 -- how far a V tile may raise O's scale above the smallest seen
M.P_SHIFT = 15 -- P is scaled by 2^P_SHIFT before rounding to f16
-- The slots of one block-wide extremum: one f32 a warp, rounded up to 4 (16 bytes: read as vectors).
local function slot_stride(warps) return (warps + 3) // 4 * 4 end
-- The flags of a tile (f16s.lo): S needs low parts; K's tile, this warp's Q rows, V's tile span more than f16
-- holds (LO_V highest: pv_lo's test is one compare)
local LO_S, LO_K, LO_Q, LO_V = 1, 2, 4, 8
local LO = 40 -- a wide V tile's low part is below 2^-25 at the tile's scale: 2^40 puts it under 2^15

-- Tiles (attention.lua's MMA_TILES_STAGED form). Each block converts every K/V tile it reads (widen,
-- scale, cvt, the extrema: ~9 instructions an element), so the tiles take 8 warps where the staging
-- divides among them: 256 rows a block at d32/d64 (32-row warps: half the conversions per query of
-- f16's 4 warps; the staged tile is then 8 elements a thread, which pays for the registers), 128 at
-- d128 (16-row warps, 32-key tiles: the block-wide extrema, the online-softmax rescale of O's 64
-- accumulators a thread and the row maxima come once per 32 keys, not 16; T4 estimate 1.57x -> 1.23x
-- f16's time; 255 registers, Q's fragments in registers so that the extrema's slots can live in Q's
-- tile: with them the block needs 96 bytes over sm_75's 64 KiB); d96 6 warps x 32 rows with 16-key tiles
-- (192 rows a block: a third of the conversions per query of 4 x 16 rows; one K and one V chunk a
-- thread; T4 estimate 1.87x -> 1.29x; 32-key tiles spilled 104 bytes, 12 warps x 16 rows needed 209
-- registers, over the 168 that 384 threads may hold); d64 in dynamic shared memory. d64's hot loop: 1 : 5.4 mma : other
-- vs 1 : 6.9 with 4 warps (profile, docs/attention.md). ptxas sm_75: d32's 64-key tiles spilled 16-40
-- bytes with 4 warps, d64's 32-row warps 16-24 with window; d96 re-reads Q from shared memory.
-- lean (d32, cfg.f16s_lean; wave 16): P V's low part after P V (pv_lo: P's packs fold to <2 x half>), V's rows
-- past the sequence zeroed once converted (zero_rows), the extrema started from the first values and the
-- three block maxima through quarter warps (block_max3): T4 estimate 1.55x -> 1.22x f16's, 242 registers.
-- d96 (wave 17, head_dim 72-96, plain and causal: 6 warps, so block_max keeps its slots): the first three of
-- those; T4 estimate plain 1.176x -> 1.035x, causal 1.382x -> 1.232x (1.190x with default<O3>, attention.lua);
-- 239 registers plain, 249 causal, 0 spills (ptxas sm_75).
local TILES = {
  [32] = { { warps = 8, mt = 2, n = 64, stages = 2, q_regs = true, lean = true } },
  [64] = { { warps = 8, mt = 2, n = 32, stages = 2, q_regs = false } },
  [96] = { { warps = 6, mt = 2, n = 16, stages = 2, q_regs = false, lean = true } },
  [128] = { { warps = 8, mt = 1, n = 32, stages = 2, q_regs = true, slots_in_q = true } },
  [256] = { { warps = 8, mt = 1, n = 16, stages = 2, q_regs = true, slots_in_q = true, osplit = 2 } },
}
-- d256 (head_dim 136-256; every key but rotary inside the append and padded split-KV's causal window with ALiBi, d256_keys_ok): O's 128 f32 accumulators a
-- thread (16-row warps) beside the staged tile and the scaling spilled (ptxas sm_75 CUDA 13, 16-key tiles, 255 registers: 4 warps x 16 rows
-- 388-392 bytes, and 65,584 bytes of shared memory, over sm_75's 65,536; 2 warps x 16 rows 1,732-1,744 bytes), so
-- two warps share each 16 query rows (attention.lua osplit): both compute the row group's S, m and l (the same
-- values), each accumulates 128 of O's 256 columns. 8 warps = 64 rows a block, 16-key tiles (2 chunks of K and 2 of V
-- staged a thread), Q's fragments in registers so that the extrema's slots live in Q's tile (Q 32 KiB + two K and two
-- V buffers 32 KiB fill sm_75's 64 KiB): 253 registers plain, 255 causal, 0 spills. Against 4 warps (32 rows a
-- block, Q from shared memory; 0 spills plain, 4 bytes causal with kiln's pipeline) the conversions per query halve:
-- T4 estimate (emulator profile, 256 x 256 causal, one head) 137,708 -> 106,588 clocks (f16's 40,960).
-- q_load shares the rows' factors and flags through shared memory (its rows are two warps').
-- The mask keys (window, softcap, ALiBi; Gemma's d256) fit beside it: 255 registers, 0 spills (every causal form,
-- all three keys, head_dim 200 too), and so does the paged KV cache (255, 0 spills, with them too). varlen causal
-- spilled 4 bytes holding the sequence's lengths (255 registers, kiln's pipeline and default<O3>; head_dim 160-256):
-- wave 24 reads them again from Q's tile each trip (attention.lua seq_shared), 0 spills (255 registers; 248 not
-- causal), every causal form with the mask keys too. Split-KV (wave 24: each warp of a pair stores its half of the
-- packed rows' columns in the workspace, lse from the first) takes the same tiles: 255 registers, 0 spills plain,
-- causal, paged and with the mask keys but for a window and ALiBi together with a causal form (either alignment,
-- paged or not: 4 bytes; read again from shared memory, the window's bounds left 4, the rows' slopes made 8; so did
-- the slopes loaded again from global memory each tile). Wave 25: without the last trip's skip of its staging
-- (M.unstaged_last) those six variants hold, 255 registers, 0 spills (at head_dim 256; padded still 4). Wave 24 measured the remaining keys on these
-- tiles too (ptxas sm_75, every variant of the full matrix):
-- dropout (plain, causal, the mask keys, varlen; head_dim 160-256), the in-kernel append (paged, split-KV, the mask
-- keys) and v_head_dim (192/128, 256/8; split-KV, the mask keys, dropout) hold at 198-255 registers, 0 spills; rotary
-- inside the append spilled 4-144 bytes (neox, and interleaved not causal), so rotary stays SIMT. (With
-- dropout_mask both warps of a pair write the same keep mask: the same bytes, a test output.) Which keys run on it
-- (M.serves: the others stay on the SIMT path at d > 128)
-- (wave 25: split-KV's causal window with ALiBi holds at head_dim 256 only; padded (136-248, spec.dim below the
-- tile's 256) it still spilled 4 bytes, 160 measured with and without softcap and pages, 200 and 248 without softcap)
local function d256_keys_ok(spec)
  local padded = (spec.dim or spec.head_dim) < spec.head_dim
  return not (spec.rotary and spec.rotary ~= "none" or (padded and spec.splitkv and spec.causal and spec.window and spec.alibi))
end
-- Split-KV decoding: 4 warps x 16 packed query rows (attention.lua's SPLIT_TILES_STAGED shape: a
-- decoding block has few rows), the key tiles that fit beside the scaling.
local SPLIT = {
  [32] = { { warps = 4, mt = 1, n = 64, stages = 2, q_regs = true } },
  [64] = { { warps = 4, mt = 1, n = 32, stages = 2, q_regs = false } },
  [96] = { { warps = 4, mt = 1, n = 32, stages = 2, q_regs = false } },
  [128] = { { warps = 4, mt = 1, n = 16, stages = 2, q_regs = false } },
}
-- With a mask key (per-row bounds, slopes, per-score work live across the loop) d32's 8 warps with
-- 64-key tiles spilled 4 bytes (window, top-left causal) and d96's 32-key tiles 8-32: d32 4 warps of
-- 32 rows with 32-key tiles, d96 2 warps x 16-key tiles.
local TILES_KEYS = {
  [32] = { { warps = 4, mt = 2, n = 32, stages = 2, q_regs = true } },
  [96] = { { warps = 2, mt = 1, n = 16, stages = 2, q_regs = false } },
}
-- (not split-KV, which keeps SPLIT's) d128 with a mask key, a padded head_dim or a v_head_dim: TILES'
-- 32-key tiles spilled 4-36 bytes at 255 registers (window, softcap, ALiBi; head_dim 120 causal; 64/128),
-- so 16-key tiles (one K and one V chunk a thread)
local TILES_KEYS_WHOLE = {
  [128] = { { warps = 8, mt = 1, n = 16, stages = 2, q_regs = false } },
}
-- varlen, the paged KV cache and dropout (not split-KV, which keeps SPLIT's): the sequence's bounds and base
-- pointers, the page lookups, or dropout's Philox words live across the loop. TILES' d96 (6 x 32 rows) spilled
-- 8-28 bytes and d128's 32-key tiles 20-48 (255 registers): 16-row warps at d96 (96 rows a block) and d128's
-- 16-key tiles. With dropout d32's 64-key tiles spilled 36 bytes (104 with varlen), with the append and rotary
-- 8 (not causal): TILES_KEYS' 32-key tiles (TILES_DROP).
local TILES_HEAVY = {
  [96] = { { warps = 6, mt = 1, n = 16, stages = 2, q_regs = false } },
  [128] = { { warps = 8, mt = 1, n = 16, stages = 2, q_regs = false } },
}
-- (wave 16) d128 causal with varlen or the paged KV cache, no dropout, no append: TILES' 32-key tiles (Q's fragments in
-- registers, the slots in Q's tile) with the diagonal's per-warp skip: 0 spills at 254-255 registers (ptxas sm_75;
-- default<O3>, attention.lua: kiln's pipeline spilled 4 bytes with varlen), T4 estimate 1.59x -> 1.22x (varlen),
-- 1.67x -> 1.26x (paged). With the append (and rotary) they spilled 4-52 bytes; not causal: not measured for speed
local TILES_SEQ_CAUSAL = {
  [128] = TILES[128],
}
-- d64 with a mask key over pages (not split-KV) or with dropout: the 32-row warps spilled 24 bytes with the append,
-- 16 with varlen and dropout_mask; 16-row warps
local TILES_KEYS_PAGED = {
  [64] = { { warps = 8, mt = 1, n = 32, stages = 2, q_regs = false } },
}
-- (issue 28) split-KV with rotary inside the append (so paged) at d96 (head_dim 72-96): SPLIT's 4 x 16 rows with
-- 32-key tiles ran at 245-255 registers and spilled not causal with rotary=neox (ptxas sm_75: an 8-byte stack frame,
-- 4 bytes stored with kiln's pipeline, 8 with default<O3>); 3 warps x 16 rows with 16-key tiles (the staged K/V tile
-- two chunks a thread; 4 warps would not divide it): 191-228 registers, 0 spills
local SPLIT_ROTARY = {
  [96] = { { warps = 3, mt = 1, n = 16, stages = 2, q_regs = false } },
}
local TILES_DROP = {
  [32] = { { warps = 4, mt = 2, n = 32, stages = 2, q_regs = true } },
}
function M.tiles(spec, tiles)
  local d = spec.head_dim
  local other = spec.window or spec.softcap or spec.alibi or spec.dim ~= d or spec.vdim ~= d
  local keyed = (spec.window or spec.softcap or spec.alibi) and ((spec.paged and not spec.splitkv or spec.dropout) and TILES_KEYS_PAGED[d] or TILES_KEYS[d])
    or other and not spec.splitkv and TILES_KEYS_WHOLE[d]
  local own = spec.splitkv and (spec.rotary and spec.rotary ~= "none" and SPLIT_ROTARY[d] or SPLIT[d]) or (spec.dropout or spec.append) and TILES_DROP[d]
    or spec.causal and (spec.varlen or spec.paged) and not spec.dropout and not spec.append and TILES_SEQ_CAUSAL[d]
    or (spec.varlen or spec.paged or spec.dropout) and TILES_HEAVY[d] or TILES[d]
  if keyed or own then
    local t = setmetatable({}, { __index = tiles })
    t[d] = keyed or own
    return t
  end
  return tiles
end

-- (wave 17) Whether the block's last trip skips its staging (attention.lua mma_trip): the register-staged loop
-- stages tile it + 1 after computing tile it, and the last trip staged the last tile again (widen, extrema, the
-- block reduction and its barrier, conversions, stores) for no trip to read. First causal d32 (TILES' lean tiles)
-- and d128 causal over pages, whose T4 estimates missed 1.25x f16's (a causal block's trips are few: its diagonal
-- ends them, so the wasted staging is a large share); since wave 17's second step every register-staged kernel of
-- this path (every tile table, split-KV too: its trips count from the split's first tile, the last is still
-- ntiles - 1) but head_dim 96, whose kernels (and head_dim 80's, padded to 96) are another change's. d64 not
-- causal (not split-KV) takes it since wave 18 with default<O3> (attention.lua): with kiln's pipeline it gave 16 more
-- SASS instructions than default<O3> (6,488 vs 6,472, ptxas sm_75).
-- (wave 25) Not d256 split-KV with a window and ALiBi under a causal mask (either alignment, paged or not, the append):
-- with the skip's branch around the staging they spilled 4 bytes at 255 registers (ptxas sm_75, CUDA 13; a stack
-- frame of 8; loading the rows' slopes again each tile instead of holding them changed nothing); staging the last
-- tile again holds, 255 registers, 0 spills, SASS no worse than default<O3> (attention_ptxas_test.tsv). The other
-- d256 keys keep the skip.
function M.unstaged_last(spec)
  if spec.head_dim == 256 and spec.splitkv and spec.causal and spec.window and spec.alibi then return nil end
  return spec.head_dim ~= 96 or nil
end

-- Whether the spec runs here: bf16 inputs on a target whose tensor cores take f16 only.
function M.applies(spec, target)
  return spec.dtype == "bf16" and not target.mma_m16n8k16 and target.mma_m16n8k8_f16 and target.ldmatrix
end

-- Whether the tensor-core path takes the spec here (path=mma or auto): head_dim up to 128 with every key the
-- forward has, 136-256 (TILES[256]) with every key but rotary inside the append and, below 256, split-KV's causal
-- window with ALiBi (d256_keys_ok).
function M.serves(spec, target)
  return M.applies(spec, target) and (spec.head_dim <= 128 or d256_keys_ok(spec)) and (spec.path == "mma" or spec.path == "auto")
end

-- 2^e as an f32, e an i32 value in the normal range [-126, 127].
local function pow2(b, e) return b:from_bits((e + 127) << 23) end

-- The exponent of the largest finite |x| among bf16 values vals (f32 0 when none), this thread's part.
local function local_max(b, vals, acc)
  for _, v in ipairs(vals) do
    local a = b:abs(b:to_f32(v))
    acc = b:max(acc, b:select(b:lt(a, math.huge), a, 0.0))
  end
  return acc
end

-- The smallest nonzero |x| among bf16 values vals (Inf counts, NaN does not; math.huge when none), this
-- thread's part.
local function local_min(b, vals, acc)
  for _, v in ipairs(vals) do
    local a = b:abs(b:to_f32(v))
    acc = b:min(acc, b:select(b:gt(a, 0.0), a, math.huge))
  end
  return acc
end

-- The smallest |x| among bf16 values vals, zeros counted.
local function v_min_abs(b, vals)
  local m
  for _, v in ipairs(vals) do
    local a = b:abs(b:to_f32(v))
    m = m and b:min(m, a) or a
  end
  return m
end

-- The power of two h that scales a group whose largest finite magnitude is mx (f32): 2^h mx in [2^15, 2^16).
local function scale_of(b, mx)
  local e = (b:bits(mx) >> 23) - 127
  return TOP - b:max(e, FLOOR)
end

-- bf16 values to f16 values times 2^h (factor: pow2(h)); exact where the scaled value is >= 2^-17.
local function convert(b, vals, factor)
  local out = {}
  for i, v in ipairs(vals) do out[i] = b:from_f32(b:to_f32(v) * factor, "f16") end
  return out
end

-- Shared memory for the block-wide extrema: K's and V's max and their smallest nonzero magnitude, a slot
-- per warp each (f32, slot_stride); none for a tile entry with slots_in_q (setup puts them in tiles that are free when
-- they are used).
-- (osplit's q_load exchange takes none either: setup puts it in V's second buffer)
function M.smem_bytes(t) return t.slots_in_q and 0 or (t.lean and t.warps == 8 and 16 or 12) * slot_stride(t.warps) end

-- Per-block state: the shared slots of the block-wide maxima (after the K/V buffers when the tiles
-- live in dynamic shared memory), and the scales as loop variables.
function M.setup(c, swz)
  local b, cfg = c.b, c.cfg
  local red, red_loop
  if cfg.f16s_slots_in_q then
    -- (d128's 32-key tiles fill sm_75's 64 KiB without them) the prologue's slots in K's second buffer
    -- (trip 0 stages tile 1 there, after every read of them), the loop's in Q's tile: its fragments stay
    -- in registers, so it is free once every warp loaded them (fragments_done's barrier)
    assert(cfg.dynamic_smem and cfg.q_in_regs and c.stages == 2, "f16 scaling: slots_in_q needs Q in registers")
    local base = b:dynamic_shared("f32")
    red, red_loop = base + (c.bm * cfg.ld + c.tile) // 2, base
  elseif cfg.dynamic_smem then
    red = b:dynamic_shared("f32") + (c.bm * cfg.ld + 2 * c.stages * c.tile) // 2 -- 2-byte elements
  else
    red = b:shared("f32", (cfg.f16s_lean and cfg.threads == 256 and 4 or 3) * slot_stride(cfg.threads // 32), 16)
  end
  local qx -- (osplit) q_load's exchange: bm row factors, then a flag word a warp, in V's second buffer (free until
  -- the first stage's block-wide maxima: every thread has read the exchange before their barrier)
  if cfg.osplit then
    assert(cfg.f16s_slots_in_q and c.bm + cfg.threads // 32 <= c.tile // 2, "f16 scaling: osplit's exchange needs slots_in_q")
    qx = b:dynamic_shared("f32") + (c.bm * cfg.ld + 3 * c.tile) // 2
  end
  c.f16s = {
    swz = swz, -- the shared tiles' offset of (row, 16-byte chunk)
    red = red,
    red_loop = red_loop,
    qx = qx,
    hk = b:var("i32", 0), -- K scale of the tile in the buffer the next trip computes
    cv = b:var("i32", 0), -- V scale of that tile
    cmin = b:var("i32", 1 << 20), -- smallest V scale seen
    cacc = b:var("i32", 0), -- the scale O's accumulator is at
    -- that tile's flags (one register across the loop; the LO_ bits): LO_V its V spans more than f16 holds,
    -- its low part is in the other V buffer; LO_K the same for K (K's other buffer); LO_Q a Q row of this
    -- warp's does (q_load: qbits); LO_S either of the last two (S's low parts: M.scores_lo)
    lo = b:var("i32", 0),
    loe = b:var("i32", LO), -- the power of two that low part is scaled by (lo_scale)
  }
end

-- After the Q fragments are in registers: the loop's slots move into Q's tile (slots_in_q), once every
-- warp has its fragments.
function M.fragments_done(c)
  if c.f16s.red_loop then
    c.b:barrier()
    c.f16s.red = c.f16s.red_loop
  end
end

-- Q rows [q0, q0 + bm) to f16 in shared memory, each row scaled by its own power of two. Thread
-- tid owns row tid // lpr (lpr threads a row, so warp w owns the rows its fragments read) and
-- chunks (tid % lpr) * cpl ... + cpl - 1 of it; c.f16s.qh[mi][h] is then 2^-hq of the row this
-- lane's fragments hold (rows mi * 16 + g + 8h of the warp's).
function M.q_load(c, swz)
  local b, spec, cfg, p, G = c.b, c.spec, c.cfg, c.p, c.G
  local cpr = spec.head_dim // 8
  local lpr = cfg.threads // c.bm
  local cpl = cpr // lpr
  assert(lpr * c.bm == cfg.threads and cpl * lpr == cpr, "f16 scaling: Q rows must divide among the threads")
  local tid = b:tid()
  local r, part = tid // lpr, tid % lpr
  local ok = b:lt(c.q0 + r, G.rows)
  local rr = b:select(ok, c.q0 + r, 0)
  local src = G.q_addr and G.q_addr(rr) or c.base.q + b:i64(rr) * p.stride_qs
  local vals, mx, mn = {}, b:f32(0.0), b:f32(math.huge)
  -- with two threads a row of 16 chunks (d128), the second walks its half from the middle, so the two halves'
  -- k-th stores land in different 16-byte columns of a 128-byte line (rows 0..3 of a quarter warp differ in the
  -- swizzle's low bits): no bank conflict in these stores (the profile's design rule; d96's 12-chunk rows keep
  -- the plain order, which conflicts less there: 192 against 240 extra wavefronts in a 140 x 200 problem)
  local turn = lpr == 2 and cpl == 8 and part * 4 or nil
  for k = 0, cpl - 1 do
    local ch = part * cpl + (turn and (turn + k) % cpl or k)
    local real = spec.dim < spec.head_dim and b:lt(ch, spec.dim // 8) or nil
    local from = src + (real and b:select(real, ch, 0) or ch) * 8
    local v = b:load_vec(from, 8, { align = 16 })
    if real then
      local zero = b:from_f32(0.0, "bf16")
      for i = 1, 8 do v[i] = b:select(real, v[i], zero) end
    end
    -- rotary inside the append (lib/attn_rotary.lua): the row is rotated before its scale is chosen
    if c.rot_q then v = c.rot_q.apply(v, from, ch * 8, rr, c.rot_q.on(rr, ch * 8)) end
    vals[k] = { ch = ch, v = v }
    mx = local_max(b, v, mx)
    local m8 = v_min_abs(b, v) -- (zeros counted: one instruction an element)
    mn = b:min(mn, real and b:select(real, m8, math.huge) or m8)
  end
  local function row_min(x) return lpr > 1 and -b:warp_max(-x, lpr) or x end
  if lpr > 1 then mx = b:warp_max(mx, lpr) end
  mn = row_min(mn)
  local hq = scale_of(b, mx)
  local factor = pow2(b, hq)
  -- Where exactness ends, Q: a row whose smallest nonzero |q| scales below 2^-17 spans more than f16 holds;
  -- qwide: some row of this warp's (the rows its fragments hold) does, so S is computed exactly on every
  -- tile (M.scores_lo); warp-uniform, once. A row holding a zero is tested again without its zeros
  local function warp_any(p) return b:gt(b:warp_max(b:select(p, 1.0, 0.0), 32), 0.0) end
  local qv = b:var("i32", 0)
  b:if_(warp_any(b:lt(mn * factor, 2.0 ^ -17)), function() -- rarely taken
    local n2 = b:f32(math.huge)
    for k = 0, cpl - 1 do n2 = local_min(b, vals[k].v, n2) end
    qv:set(b:select(warp_any(b:lt(row_min(n2) * factor, 2.0 ^ -17)), LO_S | LO_Q, 0))
  end)
  c.f16s.qbits = qv:get()
  c.f16s.lo:set(c.f16s.qbits)
  for k = 0, cpl - 1 do
    b:store_vec(c.qs + swz(r, vals[k].ch), convert(b, vals[k].v, factor), { align = 16 })
  end
  -- the row factor for the lanes holding row (mi * 16 + g + 8h) of this warp's rows in fragments
  local inv = pow2(b, -hq)
  c.f16s.qh = {}
  if cfg.osplit then
    -- (attention.lua osplit: warps 2r and 2r + 1 load rows 16r..16r + 7 and 16r + 8..16r + 15, and both hold all 16
    -- in fragments) the factors through shared memory, and the pair's flags or-ed: S's low parts where either half
    -- of the row group spans more than f16 holds
    local x, warp = c.f16s.qx, tid >> 5
    b:if_(b:eq(part, 0), function() b:store(x + r, inv) end)
    b:if_(b:eq(c.lane, 0), function() b:store(x + (c.bm + warp), b:from_bits(c.f16s.qbits)) end)
    b:barrier()
    local pair = x + (c.bm + (warp >> 1) * 2)
    c.f16s.qbits = b:or_(b:bits(b:load(pair)), b:bits(b:load(pair + 1)))
    c.f16s.lo:set(c.f16s.qbits)
    assert(c.mt == 1, "f16 scaling: osplit's row groups are one m-tile")
    c.f16s.qh[0] = {}
    for h = 0, 1 do c.f16s.qh[0][h] = b:load(x + (c.wrow + c.g + h * 8)) end
    return
  end
  for mi = 0, c.mt - 1 do
    c.f16s.qh[mi] = {}
    for h = 0, 1 do c.f16s.qh[mi][h] = b:shfl("idx", inv, (mi * 16 + c.g + h * 8) * lpr) end
  end
end

-- The staged K and V tile (stage_load's items: bf16 values in registers) to f16 with the tile's
-- scales: block-wide extrema (warp butterfly, then one slot a warp in shared memory and a barrier),
-- the scales into the loop variables, the items' values replaced by their f16 conversions.
-- Where exactness ends (the smallest nonzero |x| is one value for K and V together: see stage()):
-- a K tile whose smallest scales below 2^-17 at K's scale gets its low part times 2^LO at klo_dst (K's
-- other buffer, free as V's) for M.scores_lo; a V tile whose smallest nonzero |v| scales below 2^-17 (a span over 2^32,
-- or a tile held below its own top by RAISE) also gets its low part, v - hi (exact in f32), scaled
-- by 2^(cv + loe) (lo_scale: 2^40 but where O's accumulator could overflow) and rounded to f16,
-- stored at lo_dst with store(dst, items) (the other V buffer: free once every thread passed the
-- barrier here, until the next tile is staged after this one's P V), and M.pv_lo adds P times it.
-- Low parts more than 2^-(32 + loe) below the tile's largest remain lost.
-- The low part's power of two: LO, less where O's accumulator times it could overflow f32. pv_lo
-- adds the part's product to the accumulator scaled up by it; |acc| < seq_k 2^(31 + cv - cmin)
-- (P 2^15 <= 2^15 a key; every V seen is below 2^16 at the smallest scale cmin, so below
-- 2^(16 + cv - cmin) at cv), so 2^(95 - ceil(log2 seq_k) - (cv - cmin)) keeps it below 2^126.
local function lo_scale(b, seq_k, held)
  local lg = (b:bits(b:f32(seq_k)) >> 23) - 126 -- ceil(log2 seq_k) or one more
  return b:max(b:min(95 - lg - held, LO), 0)
end

-- The largest |x| among bf16 values vals with Inf counted (maxnum drops NaN): two instructions an
-- element, where local_max's finite filter takes four; stage() redoes a tile holding an Inf.
local function abs_max(b, vals, acc)
  for _, v in ipairs(vals) do acc = b:max(acc, b:abs(b:to_f32(v))) end
  return acc
end

-- abs_max's maximum and the smallest |x| with it (zeros count: one instruction an element, where the smallest
-- nonzero takes three; stage() finds the nonzero one on its rare branch). real: nil, or an i1 (a padded
-- head_dim's chunk that exists; the zeros of one that does not are left out: one select a chunk).
-- (mx and mn nil: the first values start them; TILES' lean tiles, where the constants 0 and Inf cost three
-- instructions a thread and tile. A part all NaN then gives NaN, which the block-wide maxnum drops unless the
-- whole tile is NaN: its outputs are NaN with any scale)
local function abs_extrema(b, vals, mx, mn, real)
  local m
  for _, v in ipairs(vals) do
    local a = b:abs(b:to_f32(v))
    mx, m = mx and b:max(mx, a) or a, m and b:min(m, a) or a
  end
  m = real and b:select(real, m, math.huge) or m
  return mx, mn and b:min(mn, m) or m
end

-- Block-wide maxima of per-thread values xs (each the max of its slot), through the shared slots
-- f.red + i * slot_stride(warps) (slot i's warps, read back 4 at a time); one barrier.
-- TILES' lean tiles (8 warps) take three values through quarter warps: two butterfly steps leave each quarter q
-- of the warp holding value q + 1 (the fourth quarter a copy of the third), three more reduce it inside the
-- quarter, and lanes 0, 8, 16, 24 store the warp's four slots; after the barrier lane l reads slot l (value
-- l >> 3 of warp l & 7: the 32 slots are one load a lane), three butterfly steps inside the quarters reduce
-- the 8 warps, and three shuffles give every lane the three results. Against three 5-step butterflies, 24
-- slot loads and 21 maxima a thread: 12 shuffles, 9 maxima and 8 selects (d32: hot loop other + shfl per
-- m16n8k8 4.95 -> 4.77). The 4 x 8 slots take 128 bytes (smem_bytes).
local function block_max3(c, xs)
  local b, f = c.b, c.f16s
  local lane = c.lane
  local hi, q = b:ne(lane & 16, 0), b:ne(lane & 8, 0)
  local a, v, n = xs[1], xs[2], xs[3]
  -- lanes 0-15 keep (a, v) and send (n, n); lanes 16-31 keep (n, n) and send (a, v)
  local k1, k2 = b:select(hi, n, a), b:select(hi, n, v)
  k1 = b:max(k1, b:shfl("bfly", b:select(hi, a, n), 16))
  k2 = b:max(k2, b:shfl("bfly", b:select(hi, v, n), 16))
  -- quarters 0 and 2 keep k1, 1 and 3 keep k2
  local k = b:max(b:select(q, k2, k1), b:shfl("bfly", b:select(q, k1, k2), 8))
  k = b:warp_max(k, 8)
  b:if_(b:eq(lane & 7, 0), function() b:store(f.red + ((lane & 24) + (b:tid() >> 5)), k) end)
  b:barrier()
  local m = b:warp_max(b:load(f.red + lane), 8)
  return { b:shfl("idx", m, 0), b:shfl("idx", m, 8), b:shfl("idx", m, 16) }
end

local function block_max(c, xs)
  local b, f = c.b, c.f16s
  local warps = c.cfg.threads // 32
  if #xs == 3 and c.cfg.f16s_lean and warps == 8 then return block_max3(c, xs) end
  local st = slot_stride(warps)
  local warp = b:tid() >> 5
  local ws = {}
  for i, x in ipairs(xs) do ws[i] = b:warp_max(x, 32) end
  b:if_(b:eq(c.lane, 0), function()
    for i, x in ipairs(ws) do b:store(f.red + (warp + (i - 1) * st), x) end
  end)
  b:barrier()
  local out = {}
  for i = 1, #xs do
    local m
    for w0 = 0, warps - 1, 4 do
      local v = b:load_vec(f.red + ((i - 1) * st + w0), 4, { align = 16 })
      for w = 1, math.min(4, warps - w0) do m = m and b:max(m, v[w]) or v[w] end
    end
    out[i] = m
  end
  return out
end

-- The low part of bf16 values vals at scale factor (f32 x factor less its f16 rounding hi, exact in f32;
-- 0 where hi is x itself: exact values, and Inf, whose difference would be NaN) times 2^up, in f16.
local function low_part(b, vals, hi, factor, up)
  local out = {}
  for j, v in ipairs(vals) do
    local x, h = b:to_f32(v) * factor, b:to_f32(hi[j])
    out[j] = b:from_f32(b:select(b:eq(x, h), 0.0, x - h) * up, "f16")
  end
  return out
end

-- How V's rows past the sequence are zeroed (attention.lua stage_load's zero_tail): TILES' lean tiles (d32, d96) stage
-- them as copies of the tile's first key, like K's (below; the extrema are the tile's own), and zero them once
-- converted (zero_rows): their bf16 values went through a select each and were widened one by one (zext, shl
-- and a select an element, against shl or and on the packed pairs of K); the other tiles zero them as loaded.
function M.v_zero(c) return c.cfg.f16s_lean and "later" or true end
local function zero_rows(b, e, vals)
  if not e.ok then return vals end
  local out, zero = {}, b:from_f32(0.0, "f16")
  for i, v in ipairs(vals) do out[i] = b:select(e.ok, v, zero) end
  return out
end

-- K's rows past the sequence (a ragged last tile) are staged as copies of the tile's first key (attention.lua
-- passes stage_load that row; their scores are masked), so the tile's extrema are its own keys': a huge
-- first key of the sequence does not set the scale of a later tile and push its keys below f16's
-- subnormals. V's rows past the sequence are zeros, which count as none.
function M.stage(c, sk, sv, lo_dst, store, klo_dst)
  local b, f = c.b, c.f16s
  -- mn: the smallest |x| of K and V together, zeros counted (one block-wide value and one instruction an
  -- element: V's smallest nonzero alone took three). The common tile's whole test is one compare on it
  -- (below): a tile whose mn scales below 2^-17 at the smaller of its two scales, or holds a zero, takes
  -- the rare branch, which finds the smallest nonzero magnitude and marks K and V wide or not
  local mk, mv, mn
  if not c.cfg.f16s_lean then mk, mv, mn = b:f32(0.0), b:f32(0.0), b:f32(math.huge) end
  for _, e in ipairs(sk) do mk, mn = abs_extrema(b, e.v, mk, mn, e.real) end
  for _, e in ipairs(sv) do mv, mn = abs_extrema(b, e.v, mv, mn, e.real) end
  local r = block_max(c, { mk, mv, -mn })
  mk, mv, mn = r[1], r[2], -r[3]
  -- a tile holding an Inf (rare; the condition is the same in every thread): the finite maxima again,
  -- after a barrier that lets every thread read the slots first
  local vk, vv = b:var("f32", mk), b:var("f32", mv)
  b:if_(b:or_(b:eq(mk, math.huge), b:eq(mv, math.huge)), function()
    local fk2, fv2 = b:f32(0.0), b:f32(0.0)
    for _, e in ipairs(sk) do fk2 = local_max(b, e.v, fk2) end
    for _, e in ipairs(sv) do fv2 = local_max(b, e.v, fv2) end
    b:barrier()
    local r2 = block_max(c, { fk2, fv2 })
    vk:set(r2[1])
    vv:set(r2[2])
  end)
  mk, mv = vk:get(), vv:get()
  local hk, hv = scale_of(b, mk), scale_of(b, mv)
  local cmin = b:min(f.cmin:get(), hv)
  local cv = b:min(hv, cmin + RAISE)
  f.cmin:set(cmin)
  f.hk:set(hk)
  f.cv:set(cv)
  local fk, fv = pow2(b, hk), pow2(b, cv)
  local loe = lo_scale(b, c.p.seq_k, cv - cmin)
  f.loe:set(loe)
  -- Where exactness ends: the tile's flags (f.lo: this warp's Q bits, and K's and V's when marked); the
  -- common tile's test, block-uniform (mn, fk and fv are). Before the conversions, so that the rare
  -- branch holds the raw values alone (their f16 conversions are made again inside it)
  f.lo:set(f.qbits)
  b:if_(b:lt(mn * b:min(fk, fv), 2.0 ^ -17), function() -- rarely taken
    -- the smallest nonzero |x| of K and V (the zeros counted above: rows past seq_k, or zeros in the data),
    -- after a barrier that lets every thread read the slots first
    local vn = b:var("f32", mn)
    b:if_(b:eq(mn, 0.0), function()
      local n2 = b:f32(math.huge)
      for _, e in ipairs(sk) do n2 = local_min(b, e.v, n2) end
      for _, e in ipairs(sv) do n2 = local_min(b, e.v, n2) end
      b:barrier()
      vn:set(-block_max(c, { -n2 })[1])
    end)
    local nz = vn:get()
    -- V: a tile whose smallest nonzero |v| scales below 2^-17 (a span over 2^32, or a tile held below its
    -- own top by RAISE) gets its low part at lo_dst for M.pv_lo; K: the same test at K's scale, its low part
    -- times 2^LO into K's other buffer (free as V's), for M.scores_lo. (nz is K's and V's together: a
    -- tile can be marked where only the other one's smallest entry is that far down; never missed, at
    -- most a rare branch too many)
    local vwide, kwide = b:lt(nz * fv, 2.0 ^ -17), b:lt(nz * fk, 2.0 ^ -17)
    f.lo:set(b:or_(f.qbits, b:or_(b:select(vwide, LO_V, 0), b:select(kwide, LO_S | LO_K, 0))))
    b:if_(vwide, function()
      local lo = {}
      for i, e in ipairs(sv) do lo[i] = { r = e.r, c = e.c, v = zero_rows(b, e, low_part(b, e.v, convert(b, e.v, fv), fv, pow2(b, loe))) } end
      store(lo_dst, lo)
    end)
    b:if_(kwide, function()
      local lo = {}
      for i, e in ipairs(sk) do lo[i] = { r = e.r, c = e.c, v = low_part(b, e.v, convert(b, e.v, fk), fk, b:f32(2.0 ^ LO)) } end
      -- (d128's prologue: the extrema's slots live in K's second buffer until every thread has read them)
      if c.cfg.f16s_slots_in_q then b:barrier() end
      store(klo_dst, lo)
    end)
  end)
  for _, e in ipairs(sk) do e.v = convert(b, e.v, fk) end
  for _, e in ipairs(sv) do e.v = zero_rows(b, e, convert(b, e.v, fv)) end
end

-- S exact, on a tile whose K (M.stage) or a warp whose Q rows (q_load) span more than f16 holds: the SIMT
-- computation for that tile. s (mma_scores' fragments, at scale 2^(hq + hk)) is replaced by
-- sum_c (q_c 2^hq) (k_hi + 2^-40 k_lo), fp32 FMAs over the head dim's column pairs: q from memory (bf16,
-- rotated as q_load rotates it; times 2^hq exact), k the tile's f16 high part and (a marked K tile) its low
-- part times 2^LO (M.stage: K's other buffer, klo_t), so every entry but those more than 2^72 below its
-- row's or tile's largest counts, and the sum's rounding is fp32's (2^-24 d sum |q k|, under the bf16
-- path's 2^-8). Each lane computes its own fragment entries (rows g, g + 8 of each m-tile, keys 2t, 2t + 1
-- of each 8). A branch common tiles skip (f.lo's LO_S: block-uniform for K, warp-uniform for Q); its code
-- is one loop (a second scaled mma per product made kiln's pipeline emit up to twice the kernel's SASS).
-- Returns s, updated.
function M.scores_lo(c, s, kt, klo_t)
  local b, f, spec, p, G, mt, nt = c.b, c.f16s, c.spec, c.p, c.G, c.mt, c.nt
  local bits = f.lo:get()
  local sv = {}
  for mi = 0, mt - 1 do
    sv[mi] = {}
    for j = 0, nt - 1 do
      sv[mi][j] = {}
      for e = 1, 4 do sv[mi][j][e] = b:var("f32", s[mi][j][e]) end
    end
  end
  b:if_(b:ne(b:and_(bits, LO_S), 0), function() -- rarely taken
    local kw = b:ne(b:and_(bits, LO_K), 0)
    -- The lane's own lane number, through a shuffle made here (LLVM keeps a shfl.sync where it is): the row
    -- addresses, K's offsets and Q's inverse scales derive from it, so licm cannot hoist them into the tile loop's
    -- preheader, where every warp ran them (d64 causal: 91 instructions a warp, +800 T4 clocks of 49k)
    local lane = b:shfl("idx", c.lane, c.lane)
    local t, row0 = lane & 3, (lane >> 2) + (c.q0 + c.wrow)
    local rows = {}
    for mi = 0, mt - 1 do
      rows[mi] = {}
      for h = 0, 1 do
        local row = row0 + (mi * 16 + h * 8)
        local rr = b:select(b:lt(row, G.rows), row, 0)
        -- 2^hq of the row: the inverse of its factor f.qh (2^-hq, a normal power of two)
        rows[mi][h] = { src = G.q_addr and G.q_addr(rr) or c.base.q + b:i64(rr) * p.stride_qs, rr = rr }
      end
    end
    for mi = 0, mt - 1 do
      for j = 0, nt - 1 do
        for e = 1, 4 do sv[mi][j][e]:set(b:f32(0.0)) end
      end
    end
    -- (a padded head_dim: the columns past spec.dim are zeros in Q and K)
    b:for_(0, spec.dim // 2, 1, function(cp)
      local col = cp * 2
      local q = {}
      for mi = 0, mt - 1 do
        q[mi] = {}
        for h = 0, 1 do
          local r = rows[mi][h]
          local from = r.src + col
          local vals = b:load_vec(from, 2, { align = 4 })
          if c.rot_q then vals = c.rot_q.apply(vals, from, col, r.rr, c.rot_q.on(r.rr, col)) end
          q[mi][h] = { b:to_f32(vals[1]), b:to_f32(vals[2]) }
        end
      end
      local k = {}
      for j = 0, nt - 1 do
        k[j] = {}
        for x = 0, 1 do
          local off = f.swz(j * 8 + t * 2 + x, col >> 3) + (col & 7)
          local hi, lo = b:load_vec(kt + off, 2, { align = 4 }), b:load_vec(klo_t + off, 2, { align = 4 })
          k[j][x] = {}
          for i = 1, 2 do
            -- (an unmarked tile's other buffer holds other data: its bits are not read as a value)
            k[j][x][i] = b:to_f32(hi[i]) + b:select(kw, b:to_f32(lo[i]) * 2.0 ^ -LO, 0.0)
          end
        end
      end
      for mi = 0, mt - 1 do
        for j = 0, nt - 1 do
          for e = 1, 4 do
            local qv, kv = q[mi][(e - 1) >> 1], k[j][(e - 1) & 1]
            local acc = sv[mi][j][e]
            acc:set(b:fma(qv[2], kv[2], b:fma(qv[1], kv[1], acc:get())))
          end
        end
      end
    end)
    -- times 2^hq of the row: the inverse of its factor f.qh (2^-hq, a normal power of two), or (d128's 32-key
    -- tiles, slots_in_q, and rotary) a division by it, exact: there the inverses, hoisted out of the tile
    -- loop, were values more across it at 255 registers (d128 4 bytes spilled, d96 keys + paged rotary 4);
    -- a division costs ~20 SASS instructions
    for mi = 0, mt - 1 do
      local qhs = {} -- (the lane's own values, through shuffles made here, as lane above)
      for h = 0, 1 do qhs[h] = b:shfl("idx", f.qh[mi][h], c.lane) end
      for j = 0, nt - 1 do
        for e = 1, 4 do
          local qh = qhs[(e - 1) >> 1]
          local x = sv[mi][j][e]:get()
          sv[mi][j][e]:set((c.cfg.f16s_slots_in_q or c.rot_q) and x / qh or x * b:from_bits(0x7F000000 - b:bits(qh)))
        end
      end
    end
  end)
  local out = {}
  for mi = 0, mt - 1 do
    out[mi] = {}
    for j = 0, nt - 1 do
      out[mi][j] = {}
      for e = 1, 4 do out[mi][j][e] = sv[mi][j][e]:get() end
    end
  end
  return out
end

-- O += P (V's low part) 2^-loe for a tile stage() marked (lo_t: the buffer it stored the part in),
-- before mma_pv adds P V's high part (pv: P as mma_softmax returns it), or after it (TILES' lean, d32 and d96:
-- attention.lua mma_compute). P's fragments are packed once for both; sm_75 has no cvt.rn.f16x2.f32, so a
-- pack is two cvt and zext, shl, or on i32, which LLVM turns into one <2 x half> (f16's own kernel's form)
-- only where all its mma operands are one bitcast: a branch after mma_pv reuses mma_pv's (they dominate
-- it), one before it cannot, and the pairs stay integer ops: 3 instructions a pair more in the hot loop (d32:
-- other + shfl per m16n8k8 6.15 -> 5.15). After mma_pv the accumulators hold this tile's high part too; the
-- bound on them (lo_scale) counts every key, this tile's included. The accumulators are scaled
-- up by 2^loe (exact; lo_scale keeps them finite), take the low part's mma (m16n8k8 f16, P's
-- fragments as mma_pv packs them) and are scaled back: no registers beyond the common path's.
function M.pv_lo(c, pv, lo_t)
  local b, mt = c.b, c.mt
  -- P's A fragments as mma_pv packs them (the same instructions: LLVM keeps one of each)
  local pa = {}
  for mi = 0, mt - 1 do
    pa[mi] = {}
    for ks = 0, c.nt // 2 - 1 do
      local p0, p1 = pv[mi][2 * ks], pv[mi][2 * ks + 1]
      pa[mi][ks] = { b:pack(p0[1], p0[2], "f16"), b:pack(p0[3], p0[4], "f16"), b:pack(p1[1], p1[2], "f16"), b:pack(p1[3], p1[4], "f16") }
    end
  end
  b:if_(b:ge(c.f16s.lo:get(), LO_V), function() -- rarely taken (LO_V is the highest flag)
    local loe = c.f16s.loe:get()
    local up, down = pow2(b, loe), pow2(b, -loe)
    local o = {}
    for mi = 0, mt - 1 do
      o[mi] = {}
      for j = 0, c.odtiles - 1 do -- (attention.lua osplit: this warp's O tiles; lo_t starts at its column)
        o[mi][j] = {}
        for e = 1, 4 do o[mi][j][e] = c.acc[mi][j][e]:get() * up end
      end
    end
    for ks = 0, c.nt // 2 - 1 do
      for dp = 0, c.odtiles // 2 - 1 do
        local vf = b:ldmatrix(lo_t + c.frag_off("v", c.v_row, c.v_bit, ks * 16, 2 * dp), 4, true)
        for mi = 0, mt - 1 do
          o[mi][2 * dp] = b:mma("f16", pa[mi][ks], { vf[1], vf[2] }, o[mi][2 * dp])
          o[mi][2 * dp + 1] = b:mma("f16", pa[mi][ks], { vf[3], vf[4] }, o[mi][2 * dp + 1])
        end
      end
    end
    for mi = 0, mt - 1 do
      for j = 0, c.odtiles - 1 do
        for e = 1, 4 do c.acc[mi][j][e]:set(o[mi][j][e] * down) end
      end
    end
  end)
end

-- For the tile about to be computed: each row's score factor 2^-(hq + hk) (an f32 product: it
-- overflows only where Q's row and K's tile both exceed 2^60, where f32 scores overflow anyway) and
-- the power of two O's accumulator moves by (2^(cv - cacc), as an exponent delta for the rescale).
function M.tile_factors(c)
  local b, f = c.b, c.f16s
  local fk = pow2(b, -f.hk:get())
  local rs = {}
  for mi = 0, c.mt - 1 do
    rs[mi] = {}
    for h = 0, 1 do rs[mi][h] = f.qh[mi][h] * fk end
  end
  local cv = f.cv:get()
  local delta = b:f32(cv - f.cacc:get())
  f.cacc:set(cv)
  return rs, delta
end

-- O's accumulators of m-tile mi times alpha[h] (rows g and g + 8 of this lane: the online softmax's
-- rescale with V's scale change), skipped where both are 1 (NaN rescales: ne is unordered). A tile that
-- raises none of the lane's row maxima and keeps V's scale leaves O as it is bit for bit, so the branch
-- only saves work: the warp skips when none of the m-tile's 16 rows moved, most tiles once the maxima
-- settle (random data, 512 keys: d96's 16-key tiles 1.29x -> 1.17x f16's T4 estimate; f16's kernel is
-- tensor-bound there, the rescale costs it nothing).
function M.rescale_o(c, mi, alpha)
  local b = c.b
  b:if_(b:or_(b:ne(alpha[0], 1.0), b:ne(alpha[1], 1.0)), function()
    for h = 0, 1 do
      for j = 0, c.odtiles - 1 do
        for e = 1, 2 do c.acc[mi][j][2 * h + e]:set(c.acc[mi][j][2 * h + e]:get() * alpha[h]) end
      end
    end
  end)
end

-- The epilogue's factor on O / l: 2^-cacc (the accumulator's scale).
function M.o_factor(c) return pow2(c.b, -c.f16s.cacc:get()) end

-- (the backward's scaling, lib/attn_bwd_f16scaled.lua, uses the same conversions)
M.pow2, M.local_max, M.scale_of, M.convert, M.FLOOR = pow2, local_max, scale_of, convert, FLOOR

return M
