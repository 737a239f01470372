-- templates/lib/norm_fwd.lua - the LayerNorm/RMSNorm forward kernels: statistics (mean, corrected mean, scaled variance, rstd) and the row forms.
--
-- The shared geometry, row access and reductions are lib/norm.lua's (this module reads them through
-- its own table: M.reduce is norm.reduce). See lib/norm.lua for the two row forms and the statistics.
local util = require("lib.util")

local M = setmetatable({}, { __index = require("lib.norm") })

-- ---- forward statistics ----

-- m0 + the mean deviation from it; an infinite m0 stays (inf - inf would make it NaN).
function M.corrected_mean(b, m0, corr)
  return m0 + b:select(b:lt(b:abs(m0), math.huge), corr, 0.0)
end

-- The power of two 2^-k (k >= 0) with n 2^-k < 1/2, and 2^k: a row of n values below f32's maximum,
-- each scaled by it, sums without overflow (pass 1 of the LayerNorm statistics). n: a Lua number
-- (fixed hidden: constants) or an f32 value (hidden=launch).
function M.sum_scale(b, n)
  if type(n) == "number" then
    local k = 0
    while n * 2.0 ^ -k >= 0.5 do k = k + 1 end
    return b:f32(2.0 ^ -k), b:f32(2.0 ^ k)
  end
  local s = M.pow2_scale(b, n) * 0.25 -- pow2_scale: n 2^-k < 2
  return s, b:from_bits(254 * 8388608 - b:bits(s)) -- 2^k (pow2_inverse)
end

-- 1 / s for a power of two s = 2^-k from pow2_scale (exact: the exponent mirrored about 127).
local function pow2_inverse(b, s) return b:from_bits(254 * 8388608 - b:bits(s)) end

-- The mean from pass 1's scaled sum (m0) and pass 2's scaled deviation sum: m0 + corr / s.
local function ln_mean(b, m0, csum, n, scale)
  return M.corrected_mean(b, m0, csum / n * pow2_inverse(b, scale))
end

-- LayerNorm statistics of f32 values xs (fixed form): returns mean, rstd and the deviations x - mean
-- (y = deviation * rstd). An element whose deviation itself exceeds f32's maximum (|x| >= 2^127 in
-- a row with both signs) gets an infinite deviation and y; the statistics stay finite. Taking y
-- from the scaled deviations instead (as the looping form does) cost ptxas 10 more registers at
-- bf16 4096 (a block less per SM); re-writing such rows in a branch after the common path cost 16
-- to 40 (the row's values stay live for it).
-- pass1: optional { scaled sum, max |x| } of pass 1, already taken (load_row_rolled).
function M.ln_stats_fixed(b, r, xs, n, eps, red, pass1)
  local s0, inv0 = M.sum_scale(b, n)
  if not pass1 then
    local mx, xs0 = b:f32(0.0), {}
    for k, v in ipairs(xs) do
      mx = b:max(mx, b:abs(v))
      xs0[k] = v * s0
    end
    pass1 = { M.tree_sum(b, xs0), mx }
  end
  local s1 = M.reduce(b, pass1, { "sum", "max" }, red)
  local m0 = s1[1] / n * inv0
  local scale = M.pow2_scale(b, s1[2])
  local neg = -(m0 * scale)
  local cs = {}
  for k, v in ipairs(xs) do cs[k] = M.masked(b, r, k, b:fma(v, scale, neg)) end
  local mean = ln_mean(b, m0, M.reduce(b, { M.tree_sum(b, cs) }, { "sum" }, red)[1], n, scale)
  local negm = -(mean * scale)
  local sqs, ds = {}, {}
  for k, v in ipairs(xs) do
    ds[k] = M.masked(b, r, k, v - mean)
    local d = M.masked(b, r, k, b:fma(v, scale, negm))
    sqs[k] = d * d
  end
  local vs = M.reduce(b, { M.tree_sum(b, sqs) }, { "sum" }, red)[1] / n
  return mean, scale * b:rsqrt(b:fma(eps * scale, scale, vs)), ds
end

-- The LayerNorm fixed form's load pass as an IR loop (cfg.roll_load, layernorm.lua's rule): trip j loads chunk j
-- of the thread's row and takes pass 1 over it (max |x|, the sum scaled by s0); returns the row's f32 values, the
-- scaled sum and max |x|. No value is indexed by the trip counter: the chunks ride in variables that shift one
-- chunk a trip (the loaded chunk enters the last slot), so after the last trip slot c holds chunk c, all in
-- registers (ptxas unrolls the constant-trip loop; a .local array indexed by the counter stays in local memory:
-- docs/jit.md, wave 21). The offset is a 64-bit variable stepped a chunk stride a trip: computed from the trip
-- counter (an i32 product, widened), ptxas kept an address add per unrolled trip (+8 SASS, bf16 4096 sm_80).
-- Needs every chunk in range (chunks a multiple of threads_per_row: no masks).
function M.load_row_rolled(b, cfg, t, ptr, dtype, s0)
  local T, vec, iters = cfg.threads_per_row, cfg.vec, cfg.iters
  local align = math.min(16, vec * util.dtype_bytes[dtype])
  local slots = {}
  for c = 1, iters do
    slots[c] = {}
    for i = 1, vec do slots[c][i] = b:var("f32", 0.0) end
  end
  -- -0.0: the first trip's sum folds to its own value (-0 + s = s for every s)
  local acc, mx, off = b:var("f32", -0.0), b:var("f32", 0.0), b:var("i64", b:i64(t * vec))
  b:for_(0, iters, 1, function()
    local o = off:get()
    local v = b:load_vec(ptr + o, vec, { align = align })
    local xs, sc, m = {}, {}, mx:get()
    for i = 1, vec do
      xs[i] = b:to_f32(v[i])
      m = b:max(m, b:abs(xs[i]))
      sc[i] = xs[i] * s0
    end
    local kept = {}
    for c = 2, iters do
      kept[c] = {}
      for i = 1, vec do kept[c][i] = slots[c][i]:get() end
    end
    for c = 1, iters - 1 do
      for i = 1, vec do slots[c][i]:set(kept[c + 1][i]) end
    end
    for i = 1, vec do slots[iters][i]:set(xs[i]) end
    mx:set(m)
    acc:set(acc:get() + M.tree_sum(b, sc))
    off:set(o + T * vec)
  end)
  local out = {}
  for c = 1, iters do
    for i = 1, vec do out[#out + 1] = slots[c][i]:get() end
  end
  return out, acc:get(), mx:get()
end

-- RMSNorm: rstd = 1 / sqrt(mean(x^2) + eps). One reduction (sum of squares and max |x|); a row
-- whose sum of squares overflows f32 is summed again scaled by a power of two. The branch holds a
-- block reduction, so every thread that shares its barriers must take it: over the reduction's
-- group when the group is the block (or a warp), over the whole block when several row groups
-- share it (the looping form's two rows of four warps: a block enters when the sum of squares
-- over all its rows is infinite, and only the rows that overflowed take the new rstd; the sums
-- are of squares, so a row's overflow makes the block's sum infinite).
function M.rms_rstd(b, sum_sq_fn, n, eps, red)
  local q, mx = sum_sq_fn(nil)
  local shared = red.groups > 1 and red.nwarps > red.groups
  local s1, block_sum = M.reduce(b, { q, mx }, { "sum", "max" }, red, shared and 1 or nil)
  local rstd = b:var("f32", b:rsqrt(s1[1] / n + eps))
  local own = b:and_(b:eq(s1[1], math.huge), b:lt(s1[2], math.huge))
  b:if_(shared and b:eq(block_sum, math.huge) or own, function()
    local scale = M.pow2_scale(b, s1[2])
    local qs = sum_sq_fn(scale)
    local vs = M.reduce(b, { qs }, { "sum" }, red)[1] / n
    local scaled = scale * b:rsqrt(b:fma(eps * scale, scale, vs))
    rstd:set(shared and b:select(own, scaled, rstd:get()) or scaled)
  end)
  return rstd:get()
end

-- Sum of squares of f32 values (scaled when scale is given) and max |v| (only unscaled), for rms_rstd.
local function sum_sq(b, vals, scale)
  local sq, mx = {}, b:f32(0.0)
  for k, v in ipairs(vals) do
    local u = scale and v * scale or v
    sq[k] = u * u
    if not scale then mx = b:max(mx, b:abs(v)) end
  end
  return M.tree_sum(b, sq), mx
end

-- The affine step in f32: n * w + bias (either may be absent).
function M.affine(b, n, wv, bv)
  if wv and bv then return b:fma(n, wv, bv) end
  if wv then return n * wv end
  if bv then return n + bv end
  return n
end

-- Thread 0 of the row writes a per-row f32 statistic where that output is wanted.
function M.store_stat(b, ptr, row, lead, v)
  b:if_(b:and_(lead, b:not_(b:is_null(ptr))), function() b:store(ptr + row, v) end)
end

-- ---- forward (LayerNorm and RMSNorm) ----
-- p: kernel params; rms: RMSNorm (no mean, no bias). With spec.residual, h = x + residual is
-- rounded to spec.r, written to p.h, and the rounded h is what gets normalized.

local function forward_fixed(b, spec, cfg, p, rms)
  if cfg.max_registers then b:max_registers(cfg.max_registers) end
  local T = cfg.threads_per_row
  local tid = b:tid()
  local t = tid % T
  local row = b:ctaid() * cfg.rows_per_block + tid // T
  b:exit_if(b:ge(row, p.rows)) -- whole warps leave together (rows_per_block > 1 only when T = 32)
  local base = b:i64(row) * spec.hidden
  local r = M.fixed_row(b, cfg, t)
  local red = { groups = T // 32, nwarps = cfg.block // 32 }
  local xs, pass1
  if cfg.roll_load then
    -- pass 1 is taken over x as loaded: no residual (h is what gets normalized), no RMSNorm
    if rms or spec.residual then error("roll_load takes the LayerNorm's x as it is loaded: no residual, no RMSNorm") end
    local sum, mx
    xs, sum, mx = M.load_row_rolled(b, cfg, t, p.x + base, spec.x, (M.sum_scale(b, spec.hidden)))
    pass1 = { sum, mx }
  else
    xs = M.load_row(b, r, p.x + base, spec.x)
  end
  if spec.residual then
    local rs, hs = M.load_row(b, r, p.residual + base, spec.r), {}
    for k = 1, #xs do hs[k] = xs[k] + rs[k] end
    M.store_row(b, r, p.h + base, spec.r, hs)
    xs = M.round_through(b, hs, spec.r)
  end
  local mean, rstd, ns
  if rms then
    rstd = M.rms_rstd(b, function(scale) return sum_sq(b, xs, scale) end, spec.hidden, p.eps, red)
    ns = xs
  else
    mean, rstd, ns = M.ln_stats_fixed(b, r, xs, spec.hidden, p.eps, red, pass1)
  end
  -- Affine in f32, rounded once into y; weight and bias are loaded a chunk at a time.
  local vec = cfg.vec
  local walign = math.min(16, vec * util.dtype_bytes[spec.w])
  local yalign = math.min(16, vec * util.dtype_bytes[spec.y])
  for j = 0, cfg.iters - 1 do
    local wv, bv = {}, {}
    if spec.weight then wv = b:load_vec(p.weight + r.offs[j], vec, { align = walign, pred = r.valid[j] }) end
    if spec.bias and not rms then bv = b:load_vec(p.bias + r.offs[j], vec, { align = walign, pred = r.valid[j] }) end
    local out = {}
    for i = 1, vec do
      local nv = ns[j * vec + i] * rstd
      out[i] = M.affine(b, nv, wv[i] and M.weight_f32(b, spec, wv[i]), bv[i] and b:to_f32(bv[i]))
    end
    b:store_vec(p.y + base + r.offs[j], b:from_f32_vec(out, spec.y), { align = yalign, pred = r.valid[j] })
  end
  local lead = b:eq(t, 0)
  if not rms then M.store_stat(b, p.mean, row, lead, mean) end
  M.store_stat(b, p.rstd, row, lead, rstd)
end

local function forward_looping(b, spec, cfg, p, rms)
  local T = cfg.threads_per_row
  local tid = b:tid()
  local t = tid % T
  local row = b:ctaid() * cfg.rows_per_block + tid // T
  -- Rows past the end still reach the block reductions' barriers, with no work.
  local live = b:lt(row, p.rows)
  local n = b:select(live, p.hidden, 0)
  local base = b:i64(b:select(live, row, 0)) * b:i64(p.hidden)
  local red = { groups = T // 32, nwarps = cfg.block // 32 }
  local hidden_f = b:f32(p.hidden)
  local src = p.x + base
  local function val(i) return b:to_f32(b:load(src + i)) end

  -- Pass 1: sum (scaled by s0: no overflow) or sum of squares, and max |v|; with a residual, h is
  -- formed and written here.
  local s0, inv0
  if not rms then s0, inv0 = M.sum_scale(b, hidden_f) end
  local acc, mx = b:var("f32", 0.0), b:var("f32", 0.0)
  b:for_(t, n, T, function(i)
    local v = b:to_f32(b:load(p.x + base + i))
    if spec.residual then
      local hv = b:from_f32(v + b:to_f32(b:load(p.residual + base + i)), spec.r)
      b:store(p.h + base + i, hv)
      v = b:to_f32(hv)
    end
    acc:set(rms and b:fma(v, v, acc:get()) or acc:get() + v * s0)
    mx:set(b:max(mx:get(), b:abs(v)))
  end)
  if spec.residual then src = p.h + base end
  local mean, rstd, scale, negm, r0
  if rms then
    rstd = M.rms_rstd(b, function(scale)
      if not scale then return acc:get(), mx:get() end
      local q = b:var("f32", 0.0)
      b:for_(t, n, T, function(i)
        local u = val(i) * scale
        q:set(b:fma(u, u, q:get()))
      end)
      return q:get()
    end, hidden_f, p.eps, red)
  else
    local s1 = M.reduce(b, { acc:get(), mx:get() }, { "sum", "max" }, red)
    local m0 = s1[1] / hidden_f * inv0
    scale = M.pow2_scale(b, s1[2])
    local neg = -(m0 * scale)
    local c = b:var("f32", 0.0)
    b:for_(t, n, T, function(i) c:set(c:get() + b:fma(val(i), scale, neg)) end)
    mean = ln_mean(b, m0, M.reduce(b, { c:get() }, { "sum" }, red)[1], hidden_f, scale)
    negm = -(mean * scale)
    local sq = b:var("f32", 0.0)
    b:for_(t, n, T, function(i)
      local d = b:fma(val(i), scale, negm)
      sq:set(b:fma(d, d, sq:get()))
    end)
    local vs = M.reduce(b, { sq:get() }, { "sum" }, red)[1] / hidden_f
    r0 = b:rsqrt(b:fma(p.eps * scale, scale, vs))
    rstd = scale * r0
  end
  b:for_(t, n, T, function(i)
    local v = val(i)
    local nv = rms and v * rstd or b:fma(v, scale, negm) * r0
    local wv = spec.weight and M.weight_f32(b, spec, b:load(p.weight + i)) or nil
    local bv = (spec.bias and not rms) and b:to_f32(b:load(p.bias + i)) or nil
    b:store(p.y + base + i, b:from_f32(M.affine(b, nv, wv, bv), spec.y))
  end)
  local lead = b:and_(live, b:eq(t, 0))
  if not rms then M.store_stat(b, p.mean, row, lead, mean) end
  M.store_stat(b, p.rstd, row, lead, rstd)
end

function M.forward(b, spec, cfg, p, rms)
  if spec.hidden == "launch" then forward_looping(b, spec, cfg, p, rms) else forward_fixed(b, spec, cfg, p, rms) end
end

return M
