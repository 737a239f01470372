-- templates/lib/util.lua - small helpers shared by kernel templates (integers; variant-matrix axes).
local M = {}

function M.pow2_ceil(n)
  local p = 1
  while p < n do p = p * 2 end
  return p
end

function M.ceil_div(a, b) return (a + b - 1) // b end

function M.clamp(v, lo, hi) return math.max(lo, math.min(hi, v)) end

M.dtype_bytes = { f32 = 4, f16 = 2, bf16 = 2 }

-- One axis of a variant-matrix row (docs/registry.md): {"key=v1", "key=v2", ...}.
function M.axis(key, values)
  local t = {}
  for i, v in ipairs(values) do t[i] = key .. "=" .. tostring(v) end
  return t
end

return M
