-- templates/attention_combine.lua - second kernel of split-KV attention: merges the splits' partial O and lse.
--
-- `attention splitkv=true` writes, per split s and row r = (batch * heads_q + head) * seq_q + query,
-- the split's own softmax output O_s (f32, divided by its own sum) at ws[(s * rows + r) * head_dim]
-- and its base-2 log-sum-exp L_s (m + log2 l; -inf when the split saw no key of the row) at
-- ws[splits * rows * head_dim + s * rows + r]. This kernel computes, in split order 0, 1, ...
-- (deterministic: no atomics),
--   M = max_s L_s,  w_s = 2^(L_s - M),  O = sum_s w_s O_s / sum_s w_s,  lse = (M + log2 sum_s w_s) ln 2
-- and writes O in `out` (strides stride_o{b,s,h}) and lse (natural log, f32, [batch, heads_q, seq_q];
-- may be NULL), as the non-split forward defines them: a row no split saw gets O = 0, lse = +inf.
-- One warp per row, head_dim / 32 consecutive columns a lane (a head_dim that is not a multiple of
-- 32: ceil(head_dim / 32) a lane, the lanes past head_dim idle). Grid: {ceil(rows / 4), 1, 1}.
local util = require("lib.util")

local K = {
  doc = "split-KV attention, second kernel: O and lse from the splits' partial results (fixed order)",
  params = {
    { name = "out", type = "dtype", default = "f16", doc = "O dtype" },
    { name = "head_dim", type = "int", default = 64, min = 8, max = 256, doc = "head dimension: a multiple of 8" },
  },
}

local WARPS = 4
local LN2 = 0.6931471805599453
local NEG_INF, POS_INF = -math.huge, math.huge

function K.check(spec)
  if spec.head_dim % 8 ~= 0 then return string.format("head_dim=%d: must be a multiple of 8 from 8 to 256", spec.head_dim) end
end

function K.config(spec, target)
  -- lsr = false: without NVPTX's loop strength reduction every matrix variant has 27-47 % fewer
  -- SASS instructions and none fewer blocks per SM
  return { block = 32 * WARPS, grid_tile = { WARPS, 1, 1 }, rows_per_block = WARPS, align = 4 * util.dtype_bytes[spec.out],
           lsr = false }
end

function K.build(b, spec, cfg)
  local p = b:kernel{ params = {
    { "o", "ptr", spec.out }, { "lse", "ptr", "f32" }, { "ws", "ptr", "f32", readonly = true },
    { "batch", "i32" }, { "heads_q", "i32" }, { "seq_q", "i32" }, { "splits", "i32" },
    { "stride_ob", "i64" }, { "stride_os", "i64" }, { "stride_oh", "i64" },
  } }
  local d = spec.head_dim
  local n = (d + 31) // 32 -- columns a lane
  local ragged = d % 32 ~= 0 -- some lanes' columns run past head_dim: scalar, guarded
  local tid = b:tid()
  local lane, warp = tid & 31, tid >> 5
  local rows = b:i64(p.batch) * b:i64(p.heads_q) * b:i64(p.seq_q)
  local row = b:i64(b:ctaid("x") * WARPS + warp)
  b:exit_if(b:ge(row, rows))
  local part = p.ws + row * d + lane * n -- O_s at part + s * rows * d
  local lses = p.ws + b:i64(p.splits) * rows * d + row -- L_s at lses + s * rows
  -- every lane reads the same L_s (one broadcast load per split), in split order
  local mx = b:var("f32", NEG_INF)
  b:for_(0, p.splits, 1, function(s) mx:set(b:max(mx:get(), b:load(lses + b:i64(s) * rows))) end)
  local m = mx:get()
  local m_use = b:select(b:eq(m, NEG_INF), 0.0, m)
  local sum = b:var("f32", 0.0)
  local acc = {}
  for c = 1, n do acc[c] = b:var("f32", 0.0) end
  b:for_(0, p.splits, 1, function(s)
    local s64 = b:i64(s)
    local w = b:ex2_approx(b:load(lses + s64 * rows) - m_use)
    sum:set(sum:get() + w)
    local at = part + s64 * rows * d
    local vals
    if ragged then
      vals = {}
      for c = 1, n do vals[c] = b:load(at + b:select(b:lt(lane * n + (c - 1), d), c - 1, 0)) end
    elseif n & (n - 1) ~= 0 then -- 3, 5, 6, 7 columns: no vector of that width
      vals = {}
      for c = 1, n do vals[c] = b:load(at + (c - 1)) end
    else
      vals = b:load_vec(at, n, { align = math.min(4 * n, 16) }) -- ws is 16-byte aligned
    end
    for c = 1, n do acc[c]:set(b:fma(w, vals[c], acc[c]:get())) end
  end)
  local total = sum:get()
  local empty = b:le(total, 0.0)
  local inv = b:select(empty, 0.0, 1.0 / total)
  local out = {}
  for c = 1, n do out[c] = acc[c]:get() * inv end
  -- row -> (batch, head, query) for O's strides
  local sq = row % b:i64(p.seq_q)
  local bh = row // b:i64(p.seq_q)
  local h = bh % b:i64(p.heads_q)
  local bi = bh // b:i64(p.heads_q)
  local orow = p.o + bi * p.stride_ob + sq * p.stride_os + h * p.stride_oh + lane * n
  if ragged then
    for c = 1, n do
      b:if_(b:lt(lane * n + (c - 1), d), function() b:store(orow + (c - 1), b:from_f32(out[c], spec.out)) end)
    end
  elseif n & (n - 1) ~= 0 then
    for c = 1, n do b:store(orow + (c - 1), b:from_f32(out[c], spec.out)) end
  else
    b:store_vec(orow, b:from_f32_vec(out, spec.out), { align = n * util.dtype_bytes[spec.out] })
  end
  local lse = b:select(empty, POS_INF, (m_use + b:lg2_approx(total)) * LN2)
  b:if_(b:and_(b:eq(lane, 0), b:not_(b:is_null(p.lse))), function() b:store(p.lse + row, lse) end)
end

-- launch (docs/registry.md): after `attention splitkv=true`, whose workspace ws it reads
function K.launch(spec, cfg)
  local d = spec.head_dim
  return {
    tensors = { { "o", "out", { "batch", "seq_q", "heads_q", d }, align = cfg.align },
                { "lse", "out", { "batch", "heads_q", "seq_q" }, optional = true },
                { "ws", "in", { string.format("splits*batch*heads_q*seq_q*%d", d + 1) }, align = 16 } },
    scalars = { { "batch" }, { "heads_q" }, { "seq_q" }, { "splits" } },
    strides = { { "stride_ob", "o", 0 }, { "stride_os", "o", 1 }, { "stride_oh", "o", 2 } },
    problem = { "batch*heads_q*seq_q" },
  }
end

-- the ptxas matrix: every out dtype x head_dim (the quick suite: sm_75 and sm_80)
local DT, DIMS = util.axis("out", { "f32", "f16", "bf16" }), util.axis("head_dim", { 32, 64, 96, 128, 256 })
K.variants = { { DT, DIMS, full = true }, { DT, DIMS, quick = true, sms = { 75, 80 } },
               { DT, { "head_dim=40", "head_dim=200" }, sms = { 75, 80, 90 } } } -- padded head dims
-- the default bundle's split-KV decoding: f16/bf16 at head_dim 64 and 128 (with attention's)
K.bundle = { extra = { "out=f16 head_dim=64", "out=bf16 head_dim=64", "out=f16 head_dim=128", "out=bf16 head_dim=128" } }

return K
