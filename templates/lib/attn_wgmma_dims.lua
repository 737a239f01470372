-- templates/lib/attn_wgmma_dims.lua - path=wgmma's head dims (the attention forward on sm_90a): which head_dim and
-- v_head_dim it serves and the widths its tiles run at.
--
-- The kernel's shared tiles are 64-column panels under the 128-byte swizzle (lib/attn_wgmma.lua); a head dim runs on
-- the panels of its width W (64, 128 or 256: the next one holding both head_dim and v_head_dim), as
-- lib/attn_dims.lua pads the FA2 tables:
--   - head_dim 32 and 8-56 on W = 64; 96 and 72-120 on 128; 136-248 (and MLA's qk 192) on 256;
--   - the tensor maps are over the real width, so TMA fills the columns past it with zeros (a box of 64 columns over
--     a 32-column row reads 32 and fills 32): Q K^T adds 0 for them and V's give O columns that are not stored;
--   - S = Q K^T stops at the k-step holding head_dim (kq = ceil(head_dim / 16) m64nBNk16 steps, not W / 16), so a
--     d96 tile issues 6 of d128's 8 and d32 2 of d64's 4;
--   - O = P V is ceil(v_head_dim / 64) panels wide (vw columns: the wgmma's n, vw / 2 f32 a thread): MLA's qk 192 /
--     v 128 keeps O at d128's 64 registers beside d256's K tiles;
--   - the producer loads the panels that hold real columns only (Q and K: ceil(head_dim / 64), V: ceil(v_head_dim /
--     64)); the stage's expect-tx counts those bytes.
-- Why pad d32 to 64 rather than a 64-byte swizzle (32 columns = 64-byte rows): the 64-byte layout is a second
-- descriptor / box / ring geometry for every key, while the padded panel costs the K/V ring's shared memory (a d32
-- stage holds 64 columns: 4 stages still fit) and half of P V's wgmma work at d32 only; Q K^T's k-steps stop at 32.
local M = {}

-- The wgmma widths (each a whole number of 64-column panels).
local WIDTHS = { 64, 128, 256 }

-- The width a real dim d runs at (nil past 256).
function M.width(d)
  for _, w in ipairs(WIDTHS) do if d <= w then return w end end
end

-- Why path=wgmma does not build the spec's head dims (nil when it does). spec: attention's resolved spec (spec.dim
-- the real head_dim, spec.vdim v_head_dim).
function M.not_served(spec)
  local dim, vdim = spec.dim or spec.head_dim, spec.vdim or spec.dim or spec.head_dim
  if not M.width(math.max(dim, vdim)) then return string.format("head_dim=%d (up to 256)", math.max(dim, vdim)) end
end

-- The spec the kernel builds from: a copy with head_dim = W (the panels' width), dim and vdim the real widths, and
-- kq (Q K^T's k-steps), vw (O's columns), qp and vp (the panels Q/K and V load). The same table for a spec
-- already widened.
function M.spec(spec)
  if spec.wgmma_dims then return spec end
  local s = {}
  for k, v in pairs(spec) do s[k] = v end
  s.dim = spec.dim or spec.head_dim
  s.vdim = spec.vdim or s.dim
  s.head_dim = M.width(math.max(s.dim, s.vdim))
  s.kq = (s.dim + 15) // 16
  s.qp = (s.dim + 63) // 64
  s.vp = (s.vdim + 63) // 64
  s.vw = 64 * s.vp
  s.wgmma_dims = true
  return s
end

return M
