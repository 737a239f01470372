-- templates/lib/rotary_math.lua - the rotary embedding's arithmetic, shared by the rotary family (templates/rotary.lua) and attention's append (lib/attn_rotary.lua).
--
-- One rotation (x0, x1) -> (x0 c - x1 s, x1 c + x0 s) in f32: each output one multiply and one
-- fma, rounded once by the caller. The table: cos/sin rows of `half` entries (rotary_dim / 2) per
-- position; a position outside 0 .. seqlen_ro - 1 is not rotated (cos 1, sin 0).
local M = {}

-- The n table entries from column `first` of position pos's row, as f32 lists c and s (identity
-- where pos is outside the table or `pred` is false). opts: align (of the loads), sign (an f32 the
-- sines are multiplied by: the rotary family's conjugate), pred (an extra i1 guard on the loads).
function M.table(b, cos, sin, pos, seqlen_ro, half, first, n, opts)
  local in_table = b:and_(b:ge(pos, 0), b:lt(pos, seqlen_ro))
  if opts.pred then in_table = b:and_(opts.pred, in_table) end
  local at = b:i64(b:select(in_table, pos, 0)) * half + b:i64(first)
  local lo = { align = opts.align, pred = in_table }
  local cv, sv = b:load_vec(cos + at, n, lo), b:load_vec(sin + at, n, lo)
  local c, s = {}, {}
  for i = 1, n do
    c[i] = b:select(in_table, b:to_f32(cv[i]), 1.0)
    s[i] = b:to_f32(sv[i]) -- 0 outside the table (masked load)
    if opts.sign then s[i] = s[i] * opts.sign end
  end
  return c, s
end

-- (x0, x1) -> (x0 c - x1 s, x1 c + x0 s), f32.
function M.rot(b, x0, x1, c, s)
  return b:fma(x0, c, -(x1 * s)), b:fma(x1, c, x0 * s)
end

-- One output of rot where x's half is chosen at run time: first (an i1) -> x is x0 and partner x1
-- (x c - partner s), else x is x1 and partner x0 (x c + partner s); the same bits as rot's.
function M.rot_half(b, x, partner, c, s, first)
  local t = partner * s
  return b:fma(x, c, b:select(first, -t, t))
end

return M
