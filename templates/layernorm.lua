-- templates/layernorm.lua - LayerNorm forward (torch.nn.functional.layer_norm semantics).
--
-- y = (x - mean) * rstd * weight + bias over each row of `hidden` elements, with biased
-- variance and eps inside the square root; mean and rstd are written as f32 (either
-- pointer may be NULL). x, weight/bias and y each f32, f16 or bf16; math in f32.
--
-- Fixed hidden: the row lives in registers, loaded as 16-byte vectors (narrower when
-- hidden is not a multiple of 16 bytes' worth); statistics take two passes over the
-- registers (mean, then centered variance); the affine step is one fma, rounded once.
-- hidden=launch: the kernel loops over the row, re-reading x from global memory.
local util = require("lib.util")

local K = {
  doc = "LayerNorm forward: y = (x - mean) * rstd * w + b, mean/rstd saved as f32",
  params = {
    { name = "x", type = "dtype", default = "f32", doc = "input dtype" },
    { name = "w", type = "dtype", default = "=x", doc = "weight and bias dtype" },
    { name = "y", type = "dtype", default = "=x", doc = "output dtype" },
    { name = "hidden", type = "size", default = "launch", max = 16384,
      doc = "row length fixed at generation time, or 'launch'" },
    { name = "weight", type = "bool", default = true, doc = "multiply by weight" },
    { name = "bias", type = "bool", default = true, doc = "add bias" },
  },
}

-- Elements per thread the fixed form keeps in registers, at most.
local MAX_ELEMS_PER_THREAD = 32
-- Looping form: threads per row and rows per block.
local LOOP_THREADS_PER_ROW, LOOP_ROWS_PER_BLOCK = 128, 2
-- Threads per block the fixed form aims for when one warp handles a row.
local TARGET_BLOCK_THREADS = 128

-- Elements per vector: 16 bytes of x, halved until it divides hidden (so every row starts
-- aligned); returns it and the pointer alignment the widest dtype then needs.
local function vector_width(spec)
  local widest = math.max(util.dtype_bytes[spec.x], util.dtype_bytes[spec.y], util.dtype_bytes[spec.w])
  local vec = 16 // util.dtype_bytes[spec.x]
  while vec > 1 and spec.hidden % vec ~= 0 do vec = vec // 2 end
  return vec, math.min(16, vec * widest)
end

function K.config(spec, target)
  if spec.hidden == "launch" then
    local t = LOOP_THREADS_PER_ROW
    return { block = t * LOOP_ROWS_PER_BLOCK, grid_tile = LOOP_ROWS_PER_BLOCK,
             rows_per_block = LOOP_ROWS_PER_BLOCK, threads_per_row = t, vec = 1,
             align = util.dtype_bytes[spec.x], pipeline = "kiln",
             -- the strided row loops: rotated, ptxas needs fewer registers (docs/jit.md)
             rotate_loops = true }
  end
  local vec, align = vector_width(spec)
  local chunks = spec.hidden // vec
  local per_thread = math.max(1, MAX_ELEMS_PER_THREAD // vec)
  local t = util.clamp(util.pow2_ceil(util.ceil_div(chunks, per_thread)), 32, target.max_threads)
  local rows = t == 32 and TARGET_BLOCK_THREADS // 32 or 1
  return { block = t * rows, grid_tile = rows, rows_per_block = rows, threads_per_row = t,
           vec = vec, chunks = chunks, iters = util.ceil_div(chunks, t), align = align,
           pipeline = "kiln" } -- kiln's IR pipeline: proven no worse than default<O3> (docs/jit.md)
end

local function declare(b, spec)
  return b:kernel{ params = {
    { "y", "ptr", spec.y }, { "mean", "ptr", "f32" }, { "rstd", "ptr", "f32" },
    { "x", "ptr", spec.x, readonly = true }, { "weight", "ptr", spec.w, readonly = true },
    { "bias", "ptr", spec.w, readonly = true },
    { "rows", "i32" }, { "hidden", "i32" }, { "eps", "f32" },
  } }
end

-- y = n * w + b in f32, for one normalized value n at the weight/bias values wv/bv.
local function affine(b, spec, n, wv, bv)
  if spec.weight and spec.bias then return b:fma(n, wv, bv) end
  if spec.weight then return n * wv end
  if spec.bias then return n + bv end
  return n
end

-- Thread 0 of the row writes mean and rstd, where those outputs are wanted.
local function store_stats(b, p, row, lead, mean, rstd)
  b:if_(b:and_(lead, b:not_(b:is_null(p.mean))), function() b:store(p.mean + row, mean) end)
  b:if_(b:and_(lead, b:not_(b:is_null(p.rstd))), function() b:store(p.rstd + row, rstd) end)
end

local function build_fixed(b, spec, cfg, p)
  local t_per_row, vec = cfg.threads_per_row, cfg.vec
  local tid = b:tid()
  local t = tid % t_per_row
  local row = b:ctaid() * cfg.rows_per_block + tid // t_per_row
  b:exit_if(b:ge(row, p.rows)) -- whole warps leave together (rows_per_block > 1 only when t_per_row = 32)
  local base = b:i64(row) * spec.hidden
  local xrow, yrow = p.x + base, p.y + base
  local xb = { align = math.min(16, vec * util.dtype_bytes[spec.x]) }
  local yb = { align = math.min(16, vec * util.dtype_bytes[spec.y]) }
  local wb = { align = math.min(16, vec * util.dtype_bytes[spec.w]) }

  -- Load the row: chunk j*t_per_row + t of `vec` elements; only the last pass may run past the row.
  local xs, valid, offs = {}, {}, {}
  for j = 0, cfg.iters - 1 do
    local chunk = t + j * t_per_row
    local full = (j + 1) * t_per_row <= cfg.chunks
    valid[j] = (not full) and b:lt(chunk, cfg.chunks) or nil
    offs[j] = chunk * vec
    local v = b:load_vec(xrow + offs[j], vec, { align = xb.align, pred = valid[j] })
    for i = 1, vec do xs[#xs + 1] = b:to_f32(v[i]) end
  end

  -- Pass 1: mean.
  local sum = b:f32(0.0)
  for _, v in ipairs(xs) do sum = sum + v end
  local groups = t_per_row // 32
  local mean = b:block_sum(sum, groups) / spec.hidden

  -- Pass 2: centered variance (lanes past the row contribute nothing).
  local sq, ds = b:f32(0.0), {}
  for j = 0, cfg.iters - 1 do
    for i = 1, vec do
      local k = j * vec + i
      local d = xs[k] - mean
      if valid[j] then d = b:select(valid[j], d, 0.0) end
      ds[k] = d
      sq = b:fma(d, d, sq)
    end
  end
  local var = b:block_sum(sq, groups) / spec.hidden
  local rstd = b:rsqrt(var + p.eps)

  -- Affine in f32, rounded once into y.
  for j = 0, cfg.iters - 1 do
    local wv, bv = {}, {}
    if spec.weight then wv = b:load_vec(p.weight + offs[j], vec, { align = wb.align, pred = valid[j] }) end
    if spec.bias then bv = b:load_vec(p.bias + offs[j], vec, { align = wb.align, pred = valid[j] }) end
    local out = {}
    for i = 1, vec do
      local n = ds[j * vec + i] * rstd
      out[i] = affine(b, spec, n, wv[i] and b:to_f32(wv[i]), bv[i] and b:to_f32(bv[i]))
    end
    b:store_vec(yrow + offs[j], b:from_f32_vec(out, spec.y), { align = yb.align, pred = valid[j] })
  end
  store_stats(b, p, row, b:eq(t, 0), mean, rstd)
end

local function build_looping(b, spec, cfg, p)
  local t_per_row = cfg.threads_per_row
  local tid = b:tid()
  local t = tid % t_per_row
  local row = b:ctaid() * cfg.rows_per_block + tid // t_per_row
  -- Rows past the end still reach the block reductions' barriers, with no work.
  local live = b:lt(row, p.rows)
  local n = b:select(live, p.hidden, 0)
  local base = b:i64(b:select(live, row, 0)) * b:i64(p.hidden)
  local xrow, yrow = p.x + base, p.y + base
  local groups = t_per_row // 32
  local hidden_f = b:f32(p.hidden)

  local acc = b:var("f32", 0.0)
  b:for_(t, n, t_per_row, function(i) acc:set(acc:get() + b:to_f32(b:load(xrow + i))) end)
  local mean = b:block_sum(acc:get(), groups) / hidden_f

  local sq = b:var("f32", 0.0)
  b:for_(t, n, t_per_row, function(i)
    local d = b:to_f32(b:load(xrow + i)) - mean
    sq:set(b:fma(d, d, sq:get()))
  end)
  local rstd = b:rsqrt(b:block_sum(sq:get(), groups) / hidden_f + p.eps)

  b:for_(t, n, t_per_row, function(i)
    local nv = (b:to_f32(b:load(xrow + i)) - mean) * rstd
    local wv = spec.weight and b:to_f32(b:load(p.weight + i)) or nil
    local bv = spec.bias and b:to_f32(b:load(p.bias + i)) or nil
    b:store(yrow + i, b:from_f32(affine(b, spec, nv, wv, bv), spec.y))
  end)
  store_stats(b, p, row, b:and_(live, b:eq(t, 0)), mean, rstd)
end

function K.build(b, spec, cfg)
  local p = declare(b, spec)
  if spec.hidden == "launch" then build_looping(b, spec, cfg, p) else build_fixed(b, spec, cfg, p) end
end

return K
