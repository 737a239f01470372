-- templates/lib/attn_dims.lua - attention head dims between the tile tables' widths: the padding rule and its checks.
--
-- The tile tables (forward and backward) have columns for the widths in M.WIDTHS; any other
-- multiple of 8 up to 256 runs the tiles of the next width. Templates see the padded width as
-- spec.head_dim and the real one as spec.dim; the columns past spec.dim are zero in shared memory
-- (loads read a column that exists and select 0) and are never stored or read in global memory.
local M = {}

M.WIDTHS = { 32, 64, 96, 128, 256 }

-- The table width a head_dim of d runs on (nil past the widest).
function M.padded(d)
  for _, w in ipairs(M.WIDTHS) do if d <= w then return w end end
end

-- Why head_dim d is refused (nil when it is taken); `what` names the key in the message.
function M.check(d, what)
  what = what or "head_dim"
  if d % 8 ~= 0 or d < 8 or d > 256 then
    return string.format("%s=%d: must be a multiple of 8 from 8 to 256", what, d)
  end
end

-- The spec the builders read: a copy with spec.dim = the real head_dim and spec.head_dim padded
-- (the same spec when the head_dim is a table width and spec.dim is already set).
function M.spec(spec)
  if spec.dim and M.padded(spec.dim) == spec.head_dim then return spec end
  local s = {}
  for k, v in pairs(spec) do s[k] = v end
  s.dim = spec.head_dim
  s.head_dim = M.padded(spec.head_dim) or spec.head_dim
  return s
end

-- Whether 32-column group c (columns 32c .. 32c + 31 of a lane-strided loop) holds real columns:
-- "all", "some" (then the lane's column must be compared with spec.dim) or nil (none).
function M.group(spec, c)
  if 32 * (c + 1) <= spec.dim then return "all" end
  if 32 * c < spec.dim then return "some" end
end

return M
