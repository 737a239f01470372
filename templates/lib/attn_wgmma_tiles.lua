-- templates/lib/attn_wgmma_tiles.lua - path=wgmma's tile config (the attention forward on sm_90a): per head_dim the
-- consumer warpgroups, the key tile (block_n), the setmaxnreg counts, the K/V ring's stages sized to the target's
-- shared memory, the consumers' loop (FA3's ping-pong schedule or side by side), each chosen so that ptxas sm_90a
-- spills nothing (attention_ptxas_test's sm_90a rows check every variant).
--
-- The key tile is a rule here, not a spec key: FA3 fixes kBlockN per head dim from the register budget
-- (hopper/tile_size.h, as read: 128-176 at d128), it changes no result, and a key would double the matrix for a
-- choice the budget makes. d128 takes 128 keys a tile: S = Q K^T is one chain of m64n128k16 (64 f32 a thread, O 64
-- more, P 32 i32), half as many tiles as with 64, so the per-tile overhead (row max/sum shuffles, the two named
-- barriers, the waits, the stage's mbarriers) is paid half as often. d64 keeps 64 (its softmax, not the tile
-- overhead, is the bound), d256 keeps 64 (O alone is 128 f32 a thread) and takes 32 with window, softcap or dropout
-- (their per-row values need the registers S and P give up).
local util = require("lib.util")

local M = {}

M.PANEL = 64 * 64 -- elements of one 64 x 64 panel (8192 bytes of 16-bit elements): Q's per warpgroup and d/64

-- Per head_dim: nc consumer warpgroups (64 query rows each), bn keys a tile, setmaxnreg dec (producer) and inc
-- (consumers): (dec + nc inc) x 128 <= 65536, the register file one block takes.
local SHAPES = {
  [64] = { nc = 2, bn = 64, dec = 24, inc = 240 },
  [128] = { nc = 2, bn = 128, dec = 24, inc = 240 },
  [256] = { nc = 2, bn = 64, dec = 24, inc = 240 },
}
M.SHAPES = SHAPES

-- At most this many K/V stages (the producer runs this many tiles ahead; more buys nothing at one block an SM).
local MAX_STAGES = 4
-- Static shared memory beside the dynamic tiles: the mbarriers (qbar, full and empty per stage, 8 bytes each), which
-- ptxas rounds up to the dynamic extern's 1024-byte alignment (ptxas -v: "1024 bytes smem").
local BAR_BYTES = 1024

-- The shape spec takes: SHAPES[d] with bn per spec (nil for a head_dim the path does not build).
function M.shape(spec)
  local sh = SHAPES[spec.head_dim]
  if not sh then return nil end
  local bn = sh.bn
  -- d128 with dropout keeps 64 keys a tile: with 128, the Philox words beside S, P and O spilled 4 bytes (ptxas sm_90a)
  if spec.dropout and bn > 64 then bn = 64 end
  -- d256 with window, softcap or dropout: 32 keys a tile (S 16 f32 a thread, P 8 i32, half of 64's), which leaves
  -- the per-row window bounds, tanh's values or the Philox words room beside O's 128 f32; with 64 ptxas spilled
  -- 4-60 bytes (window, softcap) and 88-136 (dropout)
  if spec.head_dim == 256 and (spec.window or spec.softcap or spec.dropout) then bn = 32 end
  -- paged split-KV decoding at d256 with causal ALiBi: 32 keys too (the packed rows' query positions and slopes beside
  -- O, and the pages' bounds: at 64 ptxas spilled 4 bytes, top-left causal)
  if spec.head_dim == 256 and spec.paged and spec.splitkv and spec.alibi and spec.causal then bn = 32 end
  -- paged=true takes the same tiles (lib/attn_wgmma_paged.lua's producer copies 32, 64 or 128 keys a tile), but its
  -- 128 threads walk the pages with cp.async instead of one thread issuing TMA: the producer gets 40 registers and
  -- the consumers 232 (FA3's split for a cp.async K/V producer, hopper/flash_fwd_kernel_sm90.h as read: 40 x 128 +
  -- 232 x 256 = 64512, the 168 x 384 the block starts with); at 24, the 128-key tile's page walk spilled 4 bytes
  -- (d128 with split-KV or a window). d256 on 64-key tiles keeps 24 / 240: its consumers hold O's 128 f32 a thread
  -- (at 232 they spilled 4-88 bytes), and its producer's one pass of 64 rows fits 24.
  local dec, inc = sh.dec, sh.inc
  if spec.paged and not (spec.head_dim == 256 and bn == 64) then dec, inc = 40, 232 end
  return { nc = sh.nc, bn = bn, dec = dec, inc = inc }
end

-- Whether the consumers run FA3's schedule (lib/attn_wgmma_pp.lua): two consumer warpgroups, and not at d256 causal
-- with ALiBi or varlen on 64-key tiles (ptxas spilled 12 and 92-96 bytes there; the side-by-side loop does not
-- spill); with 32-key tiles (d256 with window, softcap or dropout) always (the side-by-side loop spilled 12 bytes
-- at d256 top-left causal with window, softcap and ALiBi, the schedule none).
function M.pingpong(spec, nc)
  if nc ~= 2 then return false end
  if M.shape(spec).bn < 64 then return true end -- (32-key tiles: S and P small enough for the schedule, 0 spills)
  return not (spec.head_dim == 256 and spec.causal and (spec.alibi or spec.varlen))
end

-- Rows of a K or V box: 64 (the 128B swizzle's row span is 64 columns; any row count that is a multiple of its
-- 8-row atom would do), fewer for a tile of fewer keys.
function M.box_rows(bn) return math.min(64, bn) end

-- box (keys.box's, outermost first, the row dimension third from the end: dense {1, 64, 1, 64}, varlen {64, 1, 64})
-- with box_rows(bn) rows.
function M.kv_box(box, bn)
  box[#box - 2] = M.box_rows(bn)
  return box
end

-- The K/V ring and shared memory of sh on target: Q (nc x d/64 panels), then `stages` stages of K and V (d/64
-- panels of bn x 64 each), as many stages as the target's shared memory a block holds (2 to MAX_STAGES: every shape
-- of SHAPES fits 2 in sm_90a's 227 KiB). Returns stages, the dynamic shared bytes.
function M.ring(spec, sh, target)
  local eb = util.dtype_bytes[spec.dtype]
  local panels = spec.head_dim // 64
  local q_bytes = sh.nc * panels * M.PANEL * eb
  local stage_bytes = 2 * panels * sh.bn * 64 * eb
  local fit = (target.smem_optin_max - BAR_BYTES - q_bytes) // stage_bytes
  assert(fit >= 2, "attn_wgmma_tiles: two K/V stages must fit the target's shared memory a block")
  local stages = math.min(MAX_STAGES, fit)
  return stages, q_bytes + stages * stage_bytes
end

return M
