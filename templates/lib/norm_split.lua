-- templates/lib/norm_split.lua - the norm backwards' two-block row: a row-statistics kernel, then the row's columns split between blocks (form=split2/split4).
--
-- Where no reload form fits (the whole row's dweight/dbias accumulators and one pass's loads exceed
-- the registers and the SM's shared memory: wide f32 and residual rows, docs/norms.md), the row's
-- columns are split into `parts` ranges of hidden/parts, one block per range, so that each block
-- holds only its range's accumulators. The dx formula needs two sums over the whole row, so a first
-- kernel (kernel=stats) computes them:
--
--   kernel=stats  one block per row: a = sum(g xhat) / n and c = sum(g) / n (RMSNorm: a only) into
--                 the f32 workspace `rs` (2 floats per row; RMSNorm 1), summed as the reload forms'
--                 pass 1 sums them (same T and elements per thread: the same bits, lib/norm_bwd.lua)
--   kernel=dx     grid (row blocks, parts): block (bx, p) walks rows bx, bx + gridDim.x, ... over
--                 columns p*cols .. (p+1)*cols - 1 in one pass (x, dy, weight, dres loaded once):
--                 dx = rstd (g - fma(xhat, a, c)) (+ dres) as the reload forms' pass 2, and the
--                 accumulators of its columns, written to partial row bx of `ws` (the columns of
--                 part p), which norm_reduce sums as for every other form.
--
-- The launch description (lib/norm.lua backward_launch) runs stats `before` and norm_reduce `after`.
-- DRAM traffic per row: the stats kernel reads x and dy once more than a reload form, and every
-- kernel reads 4-8 bytes of `rs` per row; the looping form it replaces reads and writes its f32
-- partial rows per row instead (bwd_effective below weighs both).
local util = require("lib.util")
local norm = require("lib.norm")

local S = {}

-- Elements per thread the stats kernel and the split form aim for (more where 1024 threads cannot
-- cover the row or the part).
S.STATS_ELEMS = 16
S.SPLIT_PARTS = { split2 = 2, split4 = 4 }
S.SPLIT_ELEMS = { 8, 16 }

-- T threads and chunks per thread for `chunks` chunks of base.vec elements at `elems` per thread.
local function cover(target, vec, chunks, elems)
  local iters = math.max(math.max(1, elems // vec), util.ceil_div(chunks, target.max_threads))
  local t = util.ceil_div(util.ceil_div(chunks, iters), 32) * 32
  return t, util.ceil_div(chunks, t) -- no chunk slot that every thread masks
end

-- kernel=stats: one row per block, the row in chunks as the reload form at STATS_ELEMS; no
-- accumulators, so ptxas's own register choice.
function S.stats_config(spec, target, base)
  local t, iters = cover(target, base.vec, base.chunks, S.STATS_ELEMS)
  return { vec = base.vec, chunks = base.chunks, align = base.align, stats = true, iters = iters,
           threads_per_row = t, block = t, rows_per_block = 1, grid_tile = 1 }
end

-- form=splitN at `elems` elements per thread: parts column ranges of hidden/parts, T threads each.
-- Fits where the range's accumulators, one pass's loads and the spare registers stay under the
-- register cap (the reload forms' rule). Returns the cfg, or nil and why not.
function S.split_config(spec, target, rms, base, parts, elems)
  if spec.hidden % (parts * base.vec) ~= 0 then
    return nil, string.format("hidden %d does not split into %d ranges of whole %d-element vectors", spec.hidden, parts, base.vec)
  end
  local cols = spec.hidden // parts
  local chunks = cols // base.vec
  local t, iters = cover(target, base.vec, chunks, elems)
  local cfg = { vec = base.vec, chunks = chunks, align = base.align, split = parts, cols = cols, iters = iters,
                threads_per_row = t, block = t, rows_per_block = 1, grid_tile = 1, elems = elems }
  local nel = iters * base.vec
  local nacc = norm.slabs(spec, rms) * nel
  local loads = util.ceil_div(norm.pass_bytes(spec) * nel, 4)
  local spare = norm.spare_regs(spec, target)
  cfg.max_registers = norm.register_cap(cfg, target, nacc + loads)
  cfg.blocks_per_sm = math.min(cfg.blocks_per_sm, norm.MAX_BLOCKS_PER_SM)
  if nacc + loads + spare > cfg.max_registers then
    return nil, string.format("%d accumulators and one pass's loads (%d registers) of a %d-column range need more than the %d registers left",
                              nacc, loads, cols, cfg.max_registers - spare)
  end
  return cfg
end

-- DRAM bytes per row a form moves: the row's own (x, dy, dres read, dx written), plus for the
-- looping form its f32 partial rows read and written per row (ws_rows_per_block x hidden floats
-- per slab and block: at 8192..16384 a few MB per SM, far past L2), plus for the split forms the
-- stats kernel's second read of x and dy and the row statistics (written once, read per part).
function S.moved_bytes(spec, cfg, rms)
  local own = norm.row_bytes(spec) + util.dtype_bytes[spec.dx] * spec.hidden
  if cfg.loop then return own + 8 * norm.slabs(spec, rms) * spec.hidden, own end
  if cfg.split then
    local nstat = rms and 1 or 2
    return own + (util.dtype_bytes[spec.x] + util.dtype_bytes[spec.dy]) * spec.hidden + 4 * nstat * (1 + cfg.split), own
  end
  return own, own
end

-- The figure form=auto maximizes where no reload form fits: bytes in flight per SM (norm.bwd_in_flight)
-- x the row's own bytes / the bytes the form moves.
function S.bwd_effective(spec, cfg, rms)
  local moved, own = S.moved_bytes(spec, cfg, rms)
  return norm.bwd_in_flight(spec, cfg) * own / moved
end

-- form=auto's split candidate where no reload form fits: the (parts, elems) with the most effective
-- bytes in flight; nil when none fits.
function S.best_split(spec, target, rms, base, forms)
  local best, best_b
  for _, f in ipairs(forms or { "split2", "split4" }) do
    for _, e in ipairs(S.SPLIT_ELEMS) do
      local c = S.split_config(spec, target, rms, base, S.SPLIT_PARTS[f], e)
      if c then
        local v = S.bwd_effective(spec, c, rms)
        if not best or v > best_b then best, best_b = c, v; c.form = f end
      end
    end
  end
  return best, best_b
end

-- ---- kernels ----

-- The family spec of the stats step that goes with spec (canonical: the keys in the template's order,
-- hidden defaults left out; the residual does not change the sums, so residual rows share it); the
-- family is the resolved spec's own (the generator sets spec.family).
function S.stats_spec(spec, rms)
  local s = string.format("%s x=%s w=%s dy=%s dx=%s hidden=%d weight=%s", spec.family,
                          spec.x, spec.w, spec.dy, spec.dx, spec.hidden, tostring(spec.weight))
  if not rms then s = s .. " bias=" .. tostring(spec.bias) end
  if spec.offset == 1 then s = s .. " offset=1" end
  return s .. " kernel=stats"
end

-- Kernel parameters: the dx kernel's (with `rs` after `ws` for a split form), or the stats kernel's.
function S.params(spec, cfg, params)
  if cfg.stats then
    local keep = {}
    for _, p in ipairs(params) do
      if p[1] ~= "dx" and p[1] ~= "ws" and p[1] ~= "dres" then keep[#keep + 1] = p end
    end
    table.insert(keep, 1, { "rs", "ptr", "f32" })
    return keep
  end
  if cfg.split then table.insert(params, 3, { "rs", "ptr", "f32", readonly = true }) end
  return params
end

-- xhat, g and dy of the thread's elements as the reload forms form them (masked elements 0).
local function terms(b, spec, r, rms, xs, dys, wv, mean, rstd)
  local xh, g = {}, {}
  for k = 1, #xs do
    xh[k] = norm.masked(b, r, k, (rms and xs[k] or xs[k] - mean) * rstd)
    g[k] = wv and dys[k] * (spec.offset == 1 and wv[k] + 1.0 or wv[k]) or dys[k]
  end
  return xh, g
end

function S.build_stats(b, spec, cfg, p, rms)
  local T = cfg.threads_per_row
  local t = b:tid()
  local r = norm.fixed_row(b, cfg, t)
  local red = { groups = T // 32, nwarps = T // 32 }
  local n = spec.hidden
  local row = b:ctaid()
  local off = b:i64(row) * n
  local rstd = b:load(p.rstd + row)
  local mean = (not rms) and b:load(p.mean + row) or nil
  local xs = norm.load_row(b, r, p.x + off, spec.x)
  local dys = norm.load_row(b, r, p.dy + off, spec.dy)
  local wv = spec.weight and norm.load_row(b, r, p.weight, spec.w) or nil
  local xh, g = terms(b, spec, r, rms, xs, dys, wv, mean, rstd)
  local gx = {}
  for i = 1, #xh do gx[i] = g[i] * xh[i] end
  local sg, sgx = norm.tree_sum(b, g), norm.tree_sum(b, gx)
  local s = rms and norm.reduce(b, { sgx }, { "sum" }, red) or norm.reduce(b, { sgx, sg }, { "sum", "sum" }, red)
  local nstat = rms and 1 or 2
  b:if_(b:eq(t, 0), function()
    b:store(p.rs + b:i64(row) * nstat, s[1] / n)
    if not rms then b:store(p.rs + (b:i64(row) * nstat + 1), s[2] / n) end
  end)
end

function S.build_split(b, spec, cfg, p, rms)
  b:max_registers(cfg.max_registers)
  local t = b:tid()
  local r = norm.fixed_row(b, cfg, t)
  local nel = cfg.iters * cfg.vec
  local col0 = b:i64(b:ctaid("y")) * cfg.cols
  local n = spec.hidden
  local nstat = rms and 1 or 2
  local acc_w, acc_b = {}, {}
  for k = 1, nel do
    if spec.weight then acc_w[k] = b:var("f32", 0.0) end
    if not rms and spec.bias then acc_b[k] = b:var("f32", 0.0) end
  end
  b:for_(b:ctaid(), p.rows, b:nctaid(), function(row)
    local off = b:i64(row) * n + col0
    local rstd = b:load(p.rstd + row)
    local mean = (not rms) and b:load(p.mean + row) or nil
    local a = b:load(p.rs + b:i64(row) * nstat)
    local c = (not rms) and b:load(p.rs + (b:i64(row) * nstat + 1)) or nil
    local xs = norm.load_row(b, r, p.x + off, spec.x)
    local dys = norm.load_row(b, r, p.dy + off, spec.dy)
    local wv = spec.weight and norm.load_row(b, r, p.weight + col0, spec.w) or nil
    local dres = spec.residual and norm.load_row(b, r, p.dres + off, spec.r) or nil
    local xh, g = terms(b, spec, r, rms, xs, dys, wv, mean, rstd)
    local dx = norm.dx_row(b, nel, xh, g, a, c, rstd, dres, norm.accumulate_in(b, acc_w, acc_b, dys, xh))
    norm.store_row(b, r, p.dx + off, spec.dx, dx)
  end)
  local s = 0
  for _, acc in ipairs({ acc_w, acc_b }) do
    if acc[1] then
      local vals = {}
      for k = 1, nel do vals[k] = acc[k]:get() end
      norm.store_row(b, r, p.ws + ((b:i64(b:nctaid()) * s + b:i64(b:ctaid())) * n + col0), "f32", vals)
      s = s + 1
    end
  end
end

-- ---- launch (docs/registry.md) ----

-- The stats kernel: one block per row; `rs` is the sequence's workspace, declared by the dx kernel too.
function S.launch_stats(spec, cfg, rms)
  local al = cfg.align
  local t = {
    { "rs", "workspace", { string.format("rows*%d", rms and 1 or 2) }, align = 16 },
    { "dy", "in", { "rows", "hidden" }, align = al }, { "x", "in", { "rows", "hidden" }, align = al },
    { "rstd", "in", { "rows" } }, { "weight", "in", { "hidden" }, optional = not spec.weight, align = al },
  }
  if not rms then t[#t + 1] = { "mean", "in", { "rows" } } end
  return { tensors = t, scalars = { { "rows" }, { "hidden", spec.hidden, fixed = true } }, problem = { "rows" } }
end

-- The split dx kernel's additions to norm.backward_launch's description: `rs`, the stats kernel
-- before it, and the column ranges on the grid's y axis.
function S.launch_split(spec, cfg, rms, d)
  table.insert(d.tensors, { "rs", "workspace", { string.format("rows*%d", rms and 1 or 2) }, align = 16 })
  d.before = { { S.stats_spec(spec, rms) } }
  d.problem = { d.problem[1], tostring(cfg.split) }
  return d
end

-- ---- the variant matrix (docs/registry.md) ----

-- The backward families' rows for the split forms: both explicitly (quick), and the wide sizes
-- where form=auto takes them on some SM (full: every dtype set, 12288, and the residual of x's
-- own dtype, which the shared rows leave out), and the stats kernel at each wide size.
function S.matrix_rows(rows)
  local dts = { "x=f32", "x=f16", "x=bf16", "x=bf16 w=f32", "x=f16 w=f32" }
  rows[#rows + 1] = { "x=bf16", { "hidden=4096 form=split2", "hidden=16384 form=split2", "hidden=16384 form=split4" }, quick = true }
  rows[#rows + 1] = { { "x=f32", "x=bf16 w=f32" }, "hidden=16384 kernel=stats", quick = true }
  rows[#rows + 1] = { "x=f32", "hidden=16384 residual=true", quick = true }
  rows[#rows + 1] = { "x=bf16", { "hidden=4096 form=split2", "hidden=16384 form=split2", "hidden=16384 form=split4" }, full = true }
  rows[#rows + 1] = { dts, util.axis("hidden", { 8192, 12288, 16384 }), "kernel=stats", full = true }
  rows[#rows + 1] = { dts, "hidden=12288", full = true }
  rows[#rows + 1] = { dts, "hidden=12288", { "residual=true", "residual=true r=f32" }, full = true }
  rows[#rows + 1] = { dts, util.axis("hidden", { 8192, 16384 }), "residual=true", full = true }
  rows[#rows + 1] = { "x=f16 w=f32", "hidden=16384", full = true }
  rows[#rows + 1] = { "x=f16 w=f32", "hidden=16384", "residual=true r=f32", full = true }
  return rows
end

return S
