-- templates/lib/attn_wgmma_tiles.lua - path=wgmma's tile config (the attention forward on sm_90a): per head_dim the
-- consumer warpgroups, the key tile (block_n), the setmaxnreg counts, the K/V ring's stages sized to the target's
-- shared memory, the consumers' loop (FA3's ping-pong schedule or side by side) and the specs the register budget
-- refuses.
--
-- The key tile is a rule here, not a spec key: FA3 fixes kBlockN per head dim from the register budget
-- (hopper/tile_size.h, as read: 128-176 at d128), it changes no result, and a key would double the matrix for a
-- choice the budget makes. d128 takes 128 keys a tile: S = Q K^T is one chain of m64n128k16 (64 f32 a thread, O 64
-- more, P 32 i32), half as many tiles as with 64, so the per-tile overhead (row max/sum shuffles, the two named
-- barriers, the waits, the stage's mbarriers) is paid half as often. d64 keeps 64 (its softmax, not the tile
-- overhead, is the bound), d256 keeps 64 (O alone is 128 f32 a thread).
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
  return { nc = sh.nc, bn = bn, dec = sh.dec, inc = sh.inc }
end

-- Why the register budget refuses spec (nil: it builds): d256 with window or softcap (O's 128 f32 registers a thread
-- and their per-row values: ptxas spilled 4-60 bytes). (d256 with dropout: lib/attn_wgmma_keys.lua's not_built.)
function M.not_built(spec)
  if spec.head_dim == 256 and (spec.window or spec.softcap) then
    return "head_dim=256 with " .. (spec.window and "window" or "softcap") .. "=true (it spills: O alone holds 128 of the 240 registers)"
  end
  return nil
end

-- Whether the consumers run FA3's schedule (lib/attn_wgmma_pp.lua): two consumer warpgroups, and not at d256 causal
-- with ALiBi or varlen (ptxas spilled 12 and 92-96 bytes there; the side-by-side loop does not spill).
function M.pingpong(spec, nc)
  if nc ~= 2 then return false end
  return not (spec.head_dim == 256 and spec.causal and (spec.alibi or spec.varlen))
end

-- The K/V ring and shared memory of sh on target: Q (nc x d/64 panels), then `stages` stages of K and V (d/64
-- panels of bn x 64 each), as many stages as the target's shared memory a block holds (at least 2, at most
-- MAX_STAGES). Returns stages, the dynamic shared bytes.
function M.ring(spec, sh, target)
  local eb = util.dtype_bytes[spec.dtype]
  local panels = spec.head_dim // 64
  local q_bytes = sh.nc * panels * M.PANEL * eb
  local stage_bytes = 2 * panels * sh.bn * 64 * eb
  local fit = (target.smem_optin_max - BAR_BYTES - q_bytes) // stage_bytes
  local stages = math.max(2, math.min(MAX_STAGES, fit))
  return stages, q_bytes + stages * stage_bytes
end

return M
