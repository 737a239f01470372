-- templates/lib/attn_rotary.lua - rotary embedding inside the KV-cache append (rotary=neox|interleaved, with append=true): q and the new keys rotated on their way into shared memory and into the cache.
--
-- FlashAttention-2's flash_attn_with_kvcache(rotary_cos=, rotary_sin=, rotary_interleaved=):
-- rotary_cos / rotary_sin [seqlen_ro, rotary_dim / 2] (dtype rotary_cs, contiguous). New key i of
-- batch entry b sits at cache position cache_seqlens[b] + i (where the append writes it; leftpad
-- does not move it, as FA2); query row i at cache_seqlens[b] + i when causal or windowed, else every
-- query row at cache_seqlens[b] (FA2's rule: without a mask the queries are one step). A position
-- outside 0 .. seqlen_ro - 1 is not rotated (the rotary family's rule). Dims rotary_dim ..
-- head_dim - 1 pass through. The arithmetic is the rotary family's (lib/rotary_math.lua): f32,
-- one multiply and one fma an output, rounded once to the dtype.
--
-- Where: every 16-byte chunk of a q row or a new-key row in the rotated dims is loaded into
-- registers (cp.async targets: instead of its cp.async; register-staged and SIMT tiles: on the
-- way), rotated and stored into the tile; the append's writer rotates the new keys it copies
-- into the pages. Every block rotates the same k_new rows with the same arithmetic, so what it
-- attends to is bit for bit what the writer stores. rotary_dim is a multiple of 16, so a chunk lies
-- in one half (GPT-NeoX: its partner is the chunk rotary_dim / 2 away, one more vector load) or
-- holds whole pairs (GPT-J); FA2 has the same rule.
local util = require("lib.util")
local rmath = require("lib.rotary_math")
local M = {}

-- The values' order is the C API's numbering (KILN_ROTARY_NONE, _NEOX, _INTERLEAVED in kiln/runtime.h): the build
-- writes them into the runtime's helpers (tools/key_values.c), which spell value i for C value i.
M.ROTARY = { name = "rotary", type = "enum", default = "none", values = { "none", "neox", "interleaved" }, hide_default = true,
    doc = "rotary embedding of q and the new keys inside the append (needs append=true): neox (GPT-NeoX halves) or interleaved (GPT-J pairs), tables rotary_cos/rotary_sin [seqlen_ro, rotary_dim/2] at launch" }

M.KEYS = {
  M.ROTARY,
  { name = "rotary_dim", type = "int", default = "=head_dim", min = 1, max = 512, hide_default = true,
    doc = "dims rotated (a multiple of 16, <= head_dim); the rest pass through" },
  { name = "rotary_cs", type = "dtype", default = "=dtype", hide_default = true,
    doc = "rotary_cos/rotary_sin dtype (f32, f16 or bf16)" },
}

local function on(spec) return spec.rotary ~= nil and spec.rotary ~= "none" end
M.on = on

function M.check(spec)
  if not on(spec) then
    if spec.rotary_dim and spec.rotary_dim ~= spec.head_dim then
      return "rotary_dim applies to rotary=neox or rotary=interleaved (add one, or drop rotary_dim)"
    end
    if spec.rotary_cs and spec.rotary_cs ~= spec.dtype then
      return "rotary_cs applies to rotary=neox or rotary=interleaved (add one, or drop rotary_cs)"
    end
    return nil
  end
  if not spec.append then
    return "rotary=" .. spec.rotary .. " needs append=true (it rotates q and the new keys the append writes; for q/k alone use the rotary family)"
  end
  local r = spec.rotary_dim
  if r % 16 ~= 0 or r > spec.head_dim then
    return string.format("rotary_dim=%d: must be a multiple of 16 from 16 to head_dim=%d (a 16-byte chunk of q/k lies in one rotated half, as FlashAttention-2 requires)",
                         r, spec.head_dim)
  end
  return nil
end

function M.params(spec, params)
  if not on(spec) then return params end
  params[#params + 1] = { "rotary_cos", "ptr", spec.rotary_cs, readonly = true }
  params[#params + 1] = { "rotary_sin", "ptr", spec.rotary_cs, readonly = true }
  params[#params + 1] = { "seqlen_ro", "i32" }
  return params
end

function M.launch(spec, l)
  if not on(spec) then return l end
  local half = spec.rotary_dim // 2
  l.tensors[#l.tensors + 1] = { "rotary_cos", "in", { "seqlen_ro", half }, align = 16 }
  l.tensors[#l.tensors + 1] = { "rotary_sin", "in", { "seqlen_ro", half }, align = 16 }
  l.scalars[#l.scalars + 1] = { "seqlen_ro" }
  return l
end

-- vals: the w values (dtype) of one row at columns col .. col + w - 1 (col a multiple of w, an i32),
-- loaded from `from`; pos: the row's position; pred: nil (rotate) or an i1 (rotate where true, else
-- vals unchanged; the extra loads are predicated). Columns at or past rotary_dim come back unchanged.
local function apply(b, spec, p, vals, from, col, pos, pred)
  local w, dt = #vals, spec.dtype
  local half = spec.rotary_dim // 2
  local csb = util.dtype_bytes[spec.rotary_cs]
  local inside = b:lt(col, spec.rotary_dim)
  pred = pred and b:and_(pred, inside) or inside
  local y = {}
  if spec.rotary == "interleaved" then
    local n = w // 2
    local c, s = rmath.table(b, p.rotary_cos, p.rotary_sin, pos, p.seqlen_ro, half, col // 2, n,
                             { align = math.min(16, n * csb), pred = pred })
    for m = 1, n do
      y[2 * m - 1], y[2 * m] = rmath.rot(b, b:to_f32(vals[2 * m - 1]), b:to_f32(vals[2 * m]), c[m], s[m])
    end
  else
    local first = b:lt(col, half) -- x is x0 of its pairs (partner half columns on), else x1
    local partner = b:load_vec(from + b:select(first, half, -half), w, { align = w * util.dtype_bytes[dt], pred = pred })
    local c, s = rmath.table(b, p.rotary_cos, p.rotary_sin, pos, p.seqlen_ro, half, b:select(first, col, col - half), w,
                             { align = math.min(16, w * csb), pred = pred })
    for i = 1, w do
      y[i] = rmath.rot_half(b, b:to_f32(vals[i]), b:to_f32(partner[i]), c[i], s[i], first)
    end
  end
  local out = {}
  for i = 1, w do out[i] = b:select(pred, b:from_f32(y[i], dt), vals[i]) end
  return out
end

-- Emitted after append.setup: cache_seqlens[b], the first new key's position.
function M.setup(b, spec, p)
  if not on(spec) then return end
  p.rotary_start = p.paged_lp + p.cache_len
end

-- The rotation of a tile's rows (nil without rotary): kind "k" (key rows: the new ones, at or past
-- the cached count, rotate) or "q" (every query row; G.sq(row) its query index). Returns
-- { on = function(row, col) -> i1, apply = function(vals, from, col, row, pred) -> vals }.
function M.hook(b, spec, p, kind, G)
  if not on(spec) then return nil end
  local h = {}
  if kind == "k" then
    h.on = function(row, col) return b:and_(b:ge(row, p.cache_len), b:lt(col, spec.rotary_dim)) end
    h.pos = function(row) return p.paged_lp + row end
  else
    local per_row = spec.causal or spec.window
    h.on = function(_, col) return b:lt(col, spec.rotary_dim) end
    h.pos = function(row) return per_row and p.rotary_start + G.sq(row) or p.rotary_start end
  end
  h.apply = function(vals, from, col, row, pred) return apply(b, spec, p, vals, from, col, h.pos(row), pred) end
  return h
end

return M
