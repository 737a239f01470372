-- templates/lib/attn_vdim.lua - v_head_dim: V's and O's head dim independent of Q's and K's (MLA prefill, qk 192 / v 128).
--
-- Spec key v_head_dim (default = head_dim, left out of the canonical spec when equal). The kernel
-- runs the tiles of the next table width above both dims (lib/attn_dims.lua's rule): Q and K
-- columns past head_dim, and V columns past v_head_dim, are zero in the shared tiles (so S sees
-- only the qk dims and O's columns past v_head_dim are 0), and O (or the split-KV workspace and
-- attention_combine) is v_head_dim wide. Templates read the real widths as spec.dim (qk) and
-- spec.vdim (v); loads of V take spec.vspec (the spec with dim = vdim).
local dims = require("lib.attn_dims")

local M = {}

M.KEY = { name = "v_head_dim", type = "int", default = "=head_dim", min = 8, max = 512, hide_default = true,
          doc = "V and O head dimension (default: head_dim): a multiple of 8 up to 256, independent of head_dim (MLA: 192 / 128)" }

-- Whether the spec's v_head_dim differs from its head_dim (the real one, spec.dim, once padded).
function M.differs(spec) return spec.v_head_dim and spec.v_head_dim ~= (spec.dim or spec.head_dim) end

-- Why the spec's v_head_dim is refused (nil when taken). `family` names what is not built with it.
function M.check(spec)
  if not M.differs(spec) then return nil end
  local bad = dims.check(spec.v_head_dim, "v_head_dim")
  if bad then return bad end
  for _, k in ipairs({ "varlen", "paged", "append" }) do
    if spec[k] then
      return string.format("v_head_dim=%d (head_dim=%d) with %s=true is not built: v_head_dim serves the dense and split-KV kernels (drop %s=true, or v_head_dim)",
                           spec.v_head_dim, spec.head_dim, k, k)
    end
  end
end

-- Sets s.vdim, s.vspec and pads s.head_dim to the width that holds both dims (s.dim: the qk head_dim,
-- already set by the caller).
function M.apply(s)
  s.vdim = s.v_head_dim or s.dim
  s.head_dim = dims.padded(math.max(s.dim, s.vdim)) or s.head_dim
  if s.vdim == s.dim then
    s.vspec = s
  else
    local v = {}
    for k, x in pairs(s) do v[k] = x end
    v.dim = s.vdim
    s.vspec = v
  end
  return s
end

-- The launch description's V and O (and the split-KV workspace) at v_head_dim: l.tensors entries
-- named v and o get their last extent dv; ws's extent uses dv + 1.
function M.launch(spec, l)
  if not M.differs(spec) then return l end
  local dv = spec.v_head_dim
  for _, t in ipairs(l.tensors) do
    if t[1] == "v" or t[1] == "o" then t[3][4] = dv end
    if t[1] == "ws" then t[3] = { string.format("splits*batch*heads_q*seq_q*%d", dv + 1) } end
  end
  return l
end

-- The v head dim words of a spec naming a kernel of the sequence (attention_combine: its head_dim is dv).
function M.words(spec)
  return M.differs(spec) and string.format(" v_head_dim=%d", spec.v_head_dim) or ""
end

return M
