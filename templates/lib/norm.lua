-- templates/lib/norm.lua - what the LayerNorm/RMSNorm templates share: geometry and the cost model (both directions), row access, reductions, launch problems, the variant matrix.
--
-- Two row forms. Fixed hidden: a row is split into chunks of `vec` elements (16 bytes of the
-- narrowest... widest-allowed vector that divides hidden), chunk j*T + t belongs to thread t of
-- the row's T threads, and the row stays in registers. hidden=launch: thread t walks elements
-- t, t+T, ... from global memory, once per pass.
--
-- Statistics (forward): pass 1 sums the row scaled by 2^-k with n 2^-k < 1/2 and takes max |x|;
-- pass 2 corrects the mean by sum(x - m0)/n (constant rows get their exact value, the mean error
-- stays a few ulps); pass 3 sums the squared deviations. Passes 2 and 3 take the deviations
-- scaled by a power of two s picked from max |x| (fma(x, s, -m s): exact wherever no result is
-- subnormal), so no sum and no deviation overflows f32 and the statistics are finite wherever
-- float64's are. rstd = s / sqrt(v_s + eps s^2); y = (scaled deviation) / sqrt(v_s + eps s^2).
local util = require("lib.util")

local M = {}

-- Elements per thread the fixed forms keep in registers, at most (forward, backward).
M.MAX_ELEMS_FWD, M.MAX_ELEMS_BWD = 32, 16
-- Widest backward row group the fixed form (form=fixed) keeps in registers: 512 threads x 16
-- elements' x, dy, weight and two accumulators.
M.MAX_BWD_THREADS_PER_ROW = 512
-- Backward rows per block when a warp handles a row (fixed form).
M.BWD_ROWS_PER_BLOCK = 8
-- Looping form: threads per row and rows per block.
M.LOOP_THREADS_PER_ROW, M.LOOP_ROWS_PER_BLOCK = 128, 2
-- Threads per block the fixed form aims for when one warp handles a row.
M.TARGET_BLOCK_THREADS = 128

-- Elements per vector: 16 bytes of the row dtype, halved until it divides hidden (so every row
-- starts aligned); returns it and the pointer alignment the widest of `dtypes` then needs.
function M.vector_width(hidden, row_dtype, dtypes)
  local widest = 0
  for _, d in ipairs(dtypes) do widest = math.max(widest, util.dtype_bytes[d]) end
  local vec = 16 // util.dtype_bytes[row_dtype]
  while vec > 1 and hidden % vec ~= 0 do vec = vec // 2 end
  return vec, math.min(16, vec * widest)
end

-- Geometry for a row of spec.hidden elements of row_dtype; dtypes: every tensor accessed by row.
function M.config(spec, target, row_dtype, dtypes, max_elems)
  if spec.hidden == "launch" then
    -- scalar accesses: each pointer needs only its own element alignment; `align` states the
    -- row dtype's (as the LayerNorm forward always has)
    local t = M.LOOP_THREADS_PER_ROW
    return { block = t * M.LOOP_ROWS_PER_BLOCK, grid_tile = M.LOOP_ROWS_PER_BLOCK,
             rows_per_block = M.LOOP_ROWS_PER_BLOCK, threads_per_row = t, vec = 1,
             align = util.dtype_bytes[row_dtype] }
  end
  local vec, align = M.vector_width(spec.hidden, row_dtype, dtypes)
  local chunks = spec.hidden // vec
  local per_thread = math.max(1, max_elems // vec)
  local t = util.clamp(util.pow2_ceil(util.ceil_div(chunks, per_thread)), 32, target.max_threads)
  local rows = t == 32 and M.TARGET_BLOCK_THREADS // 32 or 1
  local cfg = { block = t * rows, grid_tile = rows, rows_per_block = rows, threads_per_row = t,
                vec = vec, chunks = chunks, iters = util.ceil_div(chunks, t), align = align }
  -- the forward keeps one f32 value per element (x, then its deviation) in registers, two while
  -- the residual is added, and 8 more per 4-byte tensor (wider vectors in flight) and per bf16
  -- tensor converted without cvt.bf16 (bit operations). Blocks under 256 threads of one row each
  -- (f32 rows of 4096) keep ptxas's default; short rows (a warp per row) take short_row_live.
  if cfg.block < 256 and t == 32 then
    cfg.max_registers = M.register_cap(cfg, target, M.short_row_live(spec, target, cfg, dtypes), M.SHORT_ROW_OVERHEAD)
  elseif cfg.block >= 256 then
    local live = cfg.iters * vec * (spec.residual and 2 or 1)
    for _, d in ipairs(dtypes) do
      if util.dtype_bytes[d] == 4 then live = live + 8 end
      -- bf16 conversions without cvt.bf16 take temporaries of their own
      if d == "bf16" and not target.native_bf16_cvt then live = live + 8 end
    end
    cfg.max_registers = M.register_cap(cfg, target, live)
  end
  return cfg
end

-- ---- occupancy ----

-- Registers a thread needs besides the values it keeps per element (addresses, row index,
-- reduction temporaries, the vector being converted): measured with ptxas -v on the fixed forms.
M.REG_OVERHEAD = 32
-- The same for short rows (a warp per row: butterfly reductions only, no shared-memory round).
M.SHORT_ROW_OVERHEAD = 24

-- Values a short-row forward thread keeps (a warp per row, 4 rows per block): one f32 per element,
-- 8 per 4-byte tensor it reads or writes per element (x, y, the weight/bias dtype when either is on,
-- the residual stream: residual and h), 8 when the last chunk is masked, 8 per bf16 tensor without
-- cvt.bf16, and target.ptxas_f16_row_regs per f16 tensor (8 from sm_90 on: a ptxas fact, in the SM table's
-- ptxas rows, gen/gen_target.c, with the measurements below).
-- ptxas -v with forced caps (docs/llvm22.md): 2-byte rows of 768 fit 48 registers (24 values) on
-- sm_80..90, 4-byte tensors and masked rows of 1000 need up to 8 more each; ptxas's own choice was
-- 49-95, one or more occupancy steps higher.
-- sm_100..121's ptxas: f16 rows of 768 spill 12-44 bytes at 48 registers (kiln's pipeline), none at 56;
-- sm_90's 16 bytes at 48 with LLVM's default<O3> code (the quality tables' reference)
function M.short_row_live(spec, target, cfg, dtypes)
  local live = cfg.iters * cfg.vec
  local uses_w = spec.weight or spec.bias
  for i, d in ipairs(dtypes) do
    -- dtypes: x, y, w, then r (the forward templates' order); r stands for residual and h
    local used, n = i ~= 3 or uses_w, i == 4 and 2 or 1
    if used and util.dtype_bytes[d] == 4 then live = live + 8 * n end
    if used and d == "bf16" and not target.native_bf16_cvt then live = live + 8 end
    if used and d == "f16" then live = live + target.ptxas_f16_row_regs end
  end
  if cfg.chunks % cfg.threads_per_row ~= 0 then live = live + 8 end
  return live
end

-- Register cap (.maxnreg) for a block of cfg.block threads that keeps `live` f32 values per
-- thread: the most blocks per SM that the register file holds at live + REG_OVERHEAD registers
-- (and the SM's resident threads allow), then the registers each thread may have at that
-- occupancy. Without it ptxas takes what the block size alone allows (64K / block) and can
-- settle one register above an occupancy step (a 512-thread LayerNorm at 72 registers runs
-- 1 block per SM: 57 % of copy bandwidth on an H100; at 64 registers, 2 blocks: 87 %).
function M.register_cap(cfg, target, live, overhead)
  local need = util.ceil_div(live + (overhead or M.REG_OVERHEAD), 8) * 8
  local blocks = math.min(target.threads_per_sm // cfg.block, target.regs_per_sm // (cfg.block * need))
  blocks = math.max(blocks, 1)
  cfg.blocks_per_sm = blocks
  return math.min(255, (target.regs_per_sm // (blocks * cfg.block)) // 8 * 8)
end

-- ---- reductions ----

-- All-reduce of several f32 values at once over each group of `groups` consecutive warps (the
-- whole block reaches it when groups > 1): butterflies inside the warp, then one round through
-- shared memory, added in warp order so every thread of a group gets the same bits.
-- ops[i] is "sum" or "max" (max of values that are not NaN). With `all` (groups > 1, at most 16
-- warps each) a second result holds value `all` over the whole block (every warp, in warp order):
-- the same in every thread, what a branch reads to be uniform over the block when several groups
-- share the block's barriers.
function M.reduce(b, vals, ops, red, all)
  local groups, nwarps = red.groups, red.nwarps
  local out = {}
  for i, v in ipairs(vals) do
    out[i] = ops[i] == "max" and b:warp_max(v) or b:warp_sum(v)
  end
  if groups == 1 then return out end
  local scratch = b:shared("f32", #vals * nwarps)
  local tid = b:tid()
  local warp, lane = tid // 32, tid % 32
  b:if_(b:eq(lane, 0), function()
    for i, v in ipairs(out) do b:store(scratch + (warp + (i - 1) * nwarps), v) end
  end)
  b:barrier()
  local first = warp // groups * groups
  local res = {}
  if groups > 16 then
    -- a block of more than 512 threads (the backward's wide form): lane l of every warp reads
    -- warp l's value and the butterfly combines them (registers for one value, not groups)
    local has = b:lt(lane, groups)
    for i = 1, #vals do
      local x = b:load(scratch + (first + b:select(has, lane, 0) + (i - 1) * nwarps))
      if ops[i] == "max" then res[i] = b:warp_max(b:select(has, x, -math.huge))
      else res[i] = b:warp_sum(b:select(has, x, 0.0)) end
    end
    b:barrier()
    return res
  end
  local function combine(i, g0)
    local acc
    for k = 0, groups - 1 do
      local x = b:load(scratch + (g0 + k + (i - 1) * nwarps))
      if not acc then acc = x
      elseif ops[i] == "max" then acc = b:max(acc, x)
      else acc = acc + x end
    end
    return acc
  end
  for i = 1, #vals do res[i] = combine(i, first) end
  local block
  if all then
    block = b:load(scratch + (all - 1) * nwarps)
    for k = 1, nwarps - 1 do
      local x = b:load(scratch + (k + (all - 1) * nwarps))
      block = ops[all] == "max" and b:max(block, x) or block + x
    end
  end
  b:barrier() -- the scratch is reused when the caller loops
  return res, block
end

-- 2^-k with k >= 0 chosen from m = max |x| so that |x| * 2^-k < 2 (1 when max |x| < 2): scaling
-- by it is exact, and squares of scaled deviations cannot overflow.
function M.pow2_scale(b, m)
  local e = (b:bits(m) // 8388608) % 256 - 126 -- floor(log2 m) + 1 for normal m (shift via division: m >= 0)
  local k = b:min(b:max(e, 0), 126)
  return b:from_bits((127 - k) * 8388608)
end

-- ---- fixed-hidden rows (registers) ----

-- A row view for thread t of the row's T threads: chunk offsets and which passes may run past.
function M.fixed_row(b, cfg, t)
  local r = { valid = {}, offs = {}, cfg = cfg }
  for j = 0, cfg.iters - 1 do
    local chunk = t + j * cfg.threads_per_row
    local full = (j + 1) * cfg.threads_per_row <= cfg.chunks
    r.valid[j] = (not full) and b:lt(chunk, cfg.chunks) or nil
    r.offs[j] = chunk * cfg.vec
  end
  return r
end

local function and_pred(b, p, q)
  if p and q then return b:and_(p, q) end
  return p or q
end

-- Loads the thread's elements of the row at ptr (f32 list, zeros where masked); live: optional
-- predicate for the whole row.
function M.load_row(b, r, ptr, dtype, live)
  local out, vec = {}, r.cfg.vec
  local align = math.min(16, vec * util.dtype_bytes[dtype])
  for j = 0, r.cfg.iters - 1 do
    local v = b:load_vec(ptr + r.offs[j], vec, { align = align, pred = and_pred(b, r.valid[j], live) })
    for i = 1, vec do out[#out + 1] = b:to_f32(v[i]) end
  end
  return out
end

-- Stores f32 values (one per element the thread owns) rounded once to dtype.
function M.store_row(b, r, ptr, dtype, vals, live)
  local vec = r.cfg.vec
  local align = math.min(16, vec * util.dtype_bytes[dtype])
  for j = 0, r.cfg.iters - 1 do
    local part = {}
    for i = 1, vec do part[i] = vals[j * vec + i] end
    b:store_vec(ptr + r.offs[j], b:from_f32_vec(part, dtype), { align = align, pred = and_pred(b, r.valid[j], live) })
  end
end

-- The backward's dx for the thread's nel elements: rstd (g - (xhat a + c)) (+ dres), c and dres nil where
-- absent (RMSNorm: no mean(g) term); accumulate(k), if given, adds element k's dweight/dbias terms right after
-- its dx.
function M.dx_row(b, nel, xh, g, a, c, rstd, dres, accumulate)
  local dx = {}
  for k = 1, nel do
    local tk = c and b:fma(xh[k], a, c) or xh[k] * a
    dx[k] = (g[k] - tk) * rstd
    if dres then dx[k] = dx[k] + dres[k] end
    if accumulate then accumulate(k) end
  end
  return dx
end

-- The accumulate of dx_row for accumulators in registers (b:var lists, nil where absent): dweight += dy xhat,
-- dbias += dy.
function M.accumulate_in(b, acc_w, acc_b, dys, xh)
  return function(k)
    if acc_w[k] then acc_w[k]:set(b:fma(dys[k], xh[k], acc_w[k]:get())) end
    if acc_b[k] then acc_b[k]:set(acc_b[k]:get() + dys[k]) end
  end
end

-- Rounds f32 values through dtype and back (what a reader of the stored tensor sees).
function M.round_through(b, vals, dtype)
  if dtype == "f32" then return vals end
  local r = b:from_f32_vec(vals, dtype)
  local out = {}
  for i, v in ipairs(r) do out[i] = b:to_f32(v) end
  return out
end

-- Masks a per-element value to 0 where the element lies past the row.
function M.masked(b, r, k, v)
  local j = (k - 1) // r.cfg.vec
  if r.valid[j] then return b:select(r.valid[j], v, 0.0) end
  return v
end

-- ---- shared by the forward and backward kernels ----

-- Pairwise (tree) sum of a list of f32 values: a thread's share of a row adds in log2(n) levels,
-- so its rounding error grows with log n, not n.
function M.tree_sum(b, vals)
  local level = vals
  if #level == 0 then return b:f32(0.0) end
  while #level > 1 do
    local nxt = {}
    for i = 1, #level, 2 do nxt[#nxt + 1] = level[i + 1] and level[i] + level[i + 1] or level[i] end
    level = nxt
  end
  return level[1]
end

-- A weight element as the affine step uses it, in f32: w, or 1 + w with offset=1 (zero-centered
-- weights, as Gemma stores them: 1 + w is formed in f32, never in w's dtype, so a weight near 0
-- keeps its bits).
function M.weight_f32(b, spec, w)
  local v = b:to_f32(w)
  if spec.offset == 1 then return v + 1.0 end
  return v
end

-- ---- the backward workspace ----

-- Workspace slabs a backward spec writes.
function M.slabs(spec, rms)
  local n = spec.weight and 1 or 0
  if not rms and spec.bias then n = n + 1 end
  return n
end

-- ---- backward geometry: the forms and the model that picks one ----
--
-- form=fixed: the row, its gradients and the accumulators in registers (short rows: 8 rows of a
--   warp per block; otherwise one row per block of up to 512 threads, 16 elements per thread).
-- form=reg8 / reg16 / reg32: the reload form (backward_reload) at 8 / 16 / 32 elements per thread
--   (more where 1024 threads cannot cover the row), accumulators in registers.
-- form=smem8 / smem16: the reload form with every accumulator in shared memory (f32, T x nacc per
--   block), which leaves the registers to the loads: more blocks per SM.
-- form=auto (the default, hidden in the canonical spec): hidden=launch and pointers not aligned
--   for a fixed variant take the looping form; short rows (one warp per row) fixed; every other
--   fixed hidden the reload candidate with the most row bytes in flight per SM (model below).

M.BWD_FORMS = { "auto", "fixed", "reg8", "reg16", "reg32", "smem8", "smem16", "smem32", "split2", "split4" }
-- The backward families' `kernel` key: dx (the kernel a caller names; its launch runs the whole
-- sequence) or stats, the split forms' first step (lib/norm_split.lua).
M.BWD_KERNELS = { "dx", "stats" }
-- Bytes per SM the H100 needs in flight to cover its DRAM latency (3.35 TB/s x ~0.7 us / 132 SMs),
-- for the docs and the kit's summary; the model maximizes the bytes anyway.
M.BYTES_IN_FLIGHT_TARGET = 18 * 1024
-- Threads per SM the runtime's backward grid assumes (kiln_norm_backward: 1024 / block threads
-- blocks per SM, at least 1; runtime/rt_norm.c bwd_blocks).
M.RUNTIME_THREADS_PER_SM = 1024

-- Shared memory an SM gives its blocks: the per-block opt-in maximum plus the 1 KiB it reserves
-- per block (the SM table has the per-block figures).
local function smem_per_sm(target) return target.smem_optin_max + 1024 end

-- Bytes per element a pass holds in registers: x, dy, weight, and with a residual dres twice
-- (ptxas keeps the loaded dres beside the finished dx values; ptxas -v: the f32 residual rows at
-- 12288 spill with it counted once).
local function pass_bytes(spec)
  local n = util.dtype_bytes[spec.x] + util.dtype_bytes[spec.dy]
  if spec.weight then n = n + util.dtype_bytes[spec.w] end
  if spec.residual then n = n + 2 * util.dtype_bytes[spec.r] end
  return n
end

-- Bytes of a row that come from DRAM per pass (x, dy, dres; the weight stays in L1/L2).
local function row_bytes(spec)
  local n = util.dtype_bytes[spec.x] + util.dtype_bytes[spec.dy]
  if spec.residual then n = n + util.dtype_bytes[spec.r] end
  return n * spec.hidden
end

-- Registers a reload-form thread needs besides its accumulators and one pass's loads (addresses,
-- row index, sums): ptxas -v over sm_75..sm_90 at hidden 16384, where the estimate is tight.
-- Targets without cvt.bf16 need BF16_SOFT_REGS more when a tensor is bf16 (integer rounding).
M.RELOAD_SPARE_REGS, M.BF16_SOFT_REGS = 8, 8
-- Spare registers of a reload-form (or split-form) thread on target.
function M.spare_regs(spec, target)
  if not target.native_bf16_cvt then
    for _, d in ipairs({ spec.x, spec.dy, spec.dx, spec.w }) do
      if d == "bf16" then return M.RELOAD_SPARE_REGS + M.BF16_SOFT_REGS end
    end
  end
  return M.RELOAD_SPARE_REGS
end
M.pass_bytes, M.row_bytes = pass_bytes, row_bytes

-- Resident blocks per SM the model counts at most (the smallest hardware limit of sm_75..sm_90).
M.MAX_BLOCKS_PER_SM = 16

-- A reload-form geometry: `elems` elements per thread (as many more as 1024 threads need);
-- accumulators in registers (smem = false) or all in shared memory. It fits where the
-- accumulators in registers, one pass's loads (ptxas issues them together) and the spare
-- registers stay under the register cap. Returns the cfg, or nil and why not.
local function reload_config(spec, target, rms, base, elems, smem)
  local cfg = { vec = base.vec, chunks = base.chunks, align = base.align, reload = true,
                rows_per_block = 1, grid_tile = 1 }
  cfg.iters = math.max(math.max(1, elems // base.vec), util.ceil_div(base.chunks, target.max_threads))
  local t = util.ceil_div(util.ceil_div(base.chunks, cfg.iters), 32) * 32
  cfg.iters = util.ceil_div(base.chunks, t) -- no chunk slot that every thread masks
  cfg.threads_per_row, cfg.block = t, t
  local nel = cfg.iters * cfg.vec
  local nacc = M.slabs(spec, rms) * nel
  local spare = M.spare_regs(spec, target)
  local function loads() return util.ceil_div(pass_bytes(spec) * nel, 4) end
  cfg.smem_bytes = 8 * (t // 32) + 64 -- the reduction's scratch and the zero cell
  if smem then
    -- every accumulator in shared memory where the SM holds them; else as many as it holds (the
    -- last ones: dbias's slab first), the rest in registers
    local fit = math.min(nacc, (target.smem_optin_max - cfg.smem_bytes) // (4 * t))
    local inreg = nacc - fit
    if fit < 1 then
      return nil, string.format("%d bytes of accumulators per block exceed sm_%d's %d bytes of shared memory",
                                nacc * 4 * t, target.sm, target.smem_optin_max)
    end
    local bytes = fit * 4 * t
    cfg.acc_smem = fit
    if bytes + cfg.smem_bytes > target.smem_static_max then cfg.dynamic_smem = bytes end
    cfg.smem_bytes = cfg.smem_bytes + bytes
    M.register_cap(cfg, target, inreg + loads())
    local by_smem = (target.smem_optin_max + 1024) // (cfg.smem_bytes + 1024)
    cfg.blocks_per_sm = math.max(1, math.min(cfg.blocks_per_sm, by_smem, M.MAX_BLOCKS_PER_SM))
    cfg.max_registers = math.min(255, (target.regs_per_sm // (cfg.blocks_per_sm * t)) // 8 * 8)
    if inreg > 0 and (inreg + loads() + spare) * 4 > cfg.max_registers * 3 then
      -- a split leaves ptxas less room than the estimate says (LLVM hoists pass 2's shared-memory
      -- accumulator loads beside the register ones): at 3/4 of the cap and above ptxas spilled
      -- (LayerNorm backward at 16384: f16 on sm_75 in 1024 threads at 49 of 64, f32 on sm_120 at
      -- 119 of 128), at 40 of 64 and 89 of 128 it did not
      return nil, string.format("%d accumulators in registers (%d of %d fit in sm_%d's shared memory) and one pass's loads (%d registers) need more than 3/4 of the %d registers left",
                                inreg, fit, nacc, target.sm, loads(), cfg.max_registers - spare)
    end
    if loads() + spare > cfg.max_registers then
      return nil, string.format("one pass's loads need %d registers, %d are left", loads() + spare, cfg.max_registers)
    end
    return cfg
  end
  cfg.max_registers = M.register_cap(cfg, target, nacc + loads())
  cfg.blocks_per_sm = math.min(cfg.blocks_per_sm, M.MAX_BLOCKS_PER_SM)
  if nacc + loads() + spare > cfg.max_registers then
    return nil, string.format("%d accumulators and one pass's loads (%d registers) need more than the %d registers left",
                              nacc, loads(), cfg.max_registers - spare)
  end
  return cfg
end

-- The model: rows in flight per SM, averaged over the runtime's grid. The grid has
-- g = max(1, RUNTIME_THREADS_PER_SM / block) blocks per SM, each walking its rows one at a time;
-- blocks_per_sm of them are resident, so the g blocks run in ceil(g / resident) waves and the
-- rows in flight average g / waves. Bytes in flight = that x the row's DRAM bytes (x, dy, dres).
-- A split form (lib/norm_split.lua) has `split` blocks per row (grid y), each with 1/split of the
-- row's bytes. The looping form issues one element per thread at a time: its bytes in flight are
-- its resident threads x one element of each DRAM tensor.
function M.bwd_in_flight(spec, cfg)
  local grid = math.max(1, M.RUNTIME_THREADS_PER_SM // cfg.block) * (cfg.split or 1)
  if cfg.loop then
    local resident = math.min(grid, cfg.blocks_per_sm or 1)
    return resident * cfg.block * row_bytes(spec) / spec.hidden, resident * cfg.rows_per_block, 1
  end
  local resident = math.min(grid, cfg.blocks_per_sm or 1)
  local waves = util.ceil_div(grid, resident)
  local rows = grid * cfg.rows_per_block / waves / (cfg.split or 1)
  return rows * row_bytes(spec), rows, waves
end

local FORM_ELEMS = { reg8 = 8, reg16 = 16, reg32 = 32, smem8 = 8, smem16 = 16, smem32 = 32 }
-- Candidates of form=auto, in the order that breaks ties (shared-memory accumulators first: they
-- leave ptxas the most registers).
local AUTO_FORMS = { "smem16", "smem8", "smem32", "reg32", "reg16", "reg8" }

-- config() of a backward family: the geometry of the chosen form, and the workspace.
function M.backward_config(spec, target, rms)
  local dts = { spec.x, spec.dy, spec.dx, spec.w }
  if spec.residual then dts[#dts + 1] = spec.r end
  local form = spec.form or "auto"
  local base = M.config(spec, target, spec.x, dts, M.MAX_ELEMS_BWD)
  local split = require("lib.norm_split")
  local cfg
  if spec.kernel == "stats" then
    if spec.hidden == "launch" then error("kernel=stats needs a fixed hidden (the split forms' first step)") end
    cfg = split.stats_config(spec, target, base)
  elseif spec.hidden == "launch" then
    if form ~= "auto" then error("form=" .. form .. " needs a fixed hidden (hidden=launch takes the looping form)") end
    cfg = base
    cfg.loop = true
  elseif form == "fixed" or (form == "auto" and base.threads_per_row == 32) then
    if base.threads_per_row > M.MAX_BWD_THREADS_PER_ROW then
      error(string.format("form=fixed holds the row in registers with at most %d threads x %d elements: hidden %d of %s is wider (use form=auto)",
                          M.MAX_BWD_THREADS_PER_ROW, M.MAX_ELEMS_BWD, spec.hidden, spec.x))
    end
    cfg = base
    cfg.fixed = true
    cfg.max_registers = nil -- the fixed form needs its registers (x, dy, weight, accumulators)
    if spec.hidden == 1 then
      -- one-element rows: the statistics fold to constants and a thread keeps a handful of values;
      -- without a cap ptxas settles 1-6 registers over the full-occupancy step (8 -> 6 blocks of 256
      -- on sm_80/90) and it fits that step without spilling on every SM. From hidden 7 the code keeps
      -- the row's statistics and a 32-register cap spills (4 bytes on sm_90): ptxas's choice stays.
      cfg.max_registers = (target.regs_per_sm // target.threads_per_sm) // 8 * 8
    end
    if cfg.rows_per_block > 1 then
      -- short rows: more row slots per block (their partial sums are combined in the block)
      cfg.rows_per_block = M.BWD_ROWS_PER_BLOCK
      cfg.block, cfg.grid_tile = cfg.threads_per_row * M.BWD_ROWS_PER_BLOCK, M.BWD_ROWS_PER_BLOCK
    end
  elseif split.SPLIT_PARTS[form] then
    local why
    cfg, why = split.best_split(spec, target, rms, base, { form })
    if not cfg then
      why = select(2, split.split_config(spec, target, rms, base, split.SPLIT_PARTS[form], split.SPLIT_ELEMS[#split.SPLIT_ELEMS]))
      error(string.format("form=%s at hidden %d on sm_%d: %s (use form=auto)", form, spec.hidden, target.sm, why))
    end
  elseif form ~= "auto" then
    local why
    cfg, why = reload_config(spec, target, rms, base, FORM_ELEMS[form], form:sub(1, 4) == "smem")
    if not cfg then error(string.format("form=%s at hidden %d on sm_%d: %s (use form=auto)", form, spec.hidden, target.sm, why)) end
  else
    local best, best_b
    -- reg32 and smem32 (32 elements per thread) only where 1024 threads cannot cover the row at
    -- 8 elements: on short rows ptxas spills beyond the estimate (masked chunks, T = 32 .. 64)
    local wide = base.chunks > target.max_threads * math.max(1, 8 // base.vec)
    for _, f in ipairs(AUTO_FORMS) do
      local c = (FORM_ELEMS[f] < 32 or wide) and reload_config(spec, target, rms, base, FORM_ELEMS[f], f:sub(1, 4) == "smem")
      if c then
        local bytes = M.bwd_in_flight(spec, c)
        if not best or bytes > best_b then
          best, best_b = c, bytes
          c.form = f
        end
      end
    end
    -- no reload form fits (wide f32 or residual rows where the SM's shared memory cannot hold
    -- the accumulators: docs/norms.md lists them): the two-block row (lib/norm_split.lua) where it
    -- moves more effective bytes in flight than the looping form, else the looping form
    if not best then
      local loop = M.config({ hidden = "launch" }, target, spec.x, dts, M.MAX_ELEMS_BWD)
      loop.loop = true
      loop.blocks_per_sm = math.min(M.MAX_BLOCKS_PER_SM, target.threads_per_sm // loop.block)
      local s, s_b = split.best_split(spec, target, rms, base)
      best = (s and s_b > split.bwd_effective(spec, loop, rms)) and s or loop
    end
    cfg = best
  end
  if not cfg.loop and M.slabs(spec, rms) > 0 and cfg.align < 16 then
    cfg.align = math.max(cfg.align, math.min(16, cfg.vec * 4)) -- the f32 workspace rows
  end
  if cfg.loop then cfg.max_registers = nil end
  -- NVPTX's straight-line strength reduction (LLVM 21+) shares the reload forms' address arithmetic
  -- across passes and keeps it live: f32 rows at 16384 and bf16/f32 at 8192 spilled 16-24 bytes at
  -- their register caps on sm_80..110 with it, none without (docs/llvm22.md)
  cfg.slsr = false
  local slabs = M.slabs(spec, rms)
  if slabs > 0 and not cfg.stats then
    -- the fixed-hidden forms write one partial row per block (slots combined), the looping form one per slot
    cfg.workspace_slabs = slabs
    cfg.workspace_rows = cfg.loop and cfg.rows_per_block or 1
    cfg.then_spec = "norm_reduce w=" .. spec.w
  end
  return cfg
end

-- ---- launch problems (docs/registry.md) ----

-- launch() of a forward family: rows of `hidden` elements; mean (LayerNorm) and rstd may be 0.
function M.forward_launch(spec, cfg, rms)
  local row, al = { "rows", "hidden" }, cfg.align
  local t = {
    { "y", "out", row, align = al }, { "rstd", "out", { "rows" }, optional = true },
    { "x", "in", row, align = al }, { "weight", "in", { "hidden" }, optional = not spec.weight, align = al },
  }
  if not rms then
    t[#t + 1] = { "mean", "out", { "rows" }, optional = true }
    t[#t + 1] = { "bias", "in", { "hidden" }, optional = not spec.bias, align = al }
  end
  if spec.residual then
    t[#t + 1] = { "h", "out", row, align = al }
    t[#t + 1] = { "residual", "in", row, align = al }
  end
  return {
    tensors = t,
    scalars = { { "rows" }, { "hidden", spec.hidden ~= "launch" and spec.hidden or nil, fixed = true }, { "eps", 1e-5 } },
    problem = { "rows" },
  }
end

-- launch() of a backward family: the grid walks the rows grid-stride with at most
-- RUNTIME_THREADS_PER_SM threads of blocks per SM (the model bwd_in_flight assumes); the f32
-- workspace holds a partial row per (block, row slot) and slab, and norm_reduce sums it.
function M.backward_launch(spec, cfg, rms)
  local split = require("lib.norm_split")
  if cfg.stats then return split.launch_stats(spec, cfg, rms) end
  local row, al = { "rows", "hidden" }, cfg.align
  local slabs, slots = M.slabs(spec, rms), cfg.workspace_rows or 1
  local per_sm = math.max(1, M.RUNTIME_THREADS_PER_SM // cfg.block) * cfg.grid_tile
  local t = {
    { "dx", "out", row, align = al }, { "dy", "in", row, align = al }, { "x", "in", row, align = al },
    { "rstd", "in", { "rows" } }, { "weight", "in", { "hidden" }, optional = not spec.weight, align = al },
    { "ws", "workspace", { string.format("%d*grid_x*hidden", slabs * slots) }, align = 16 },
  }
  if not rms then t[#t + 1] = { "mean", "in", { "rows" } } end
  if spec.residual then t[#t + 1] = { "dres", "in", row, align = al } end
  local d = {
    tensors = t,
    scalars = { { "rows" }, { "hidden", spec.hidden ~= "launch" and spec.hidden or nil, fixed = true },
                { "parts", string.format("grid_x*%d", slots) } },
    problem = { string.format("min(rows,sm_count*%d)", per_sm) },
  }
  if slabs > 0 then d.after = { { cfg.then_spec, bind = { cols = "hidden", parts = "parts", slabs = slabs } } } end
  if cfg.split then return split.launch_split(spec, cfg, rms, d) end
  return d
end

-- ---- the variant matrix (docs/registry.md) ----

M.MATRIX_DTYPES = { "x=f32", "x=f16", "x=bf16", "x=bf16 w=f32" }
M.MATRIX_HIDDEN = util.axis("hidden", { 1, 768, 4096, 16384, "launch" })
M.MATRIX_HIDDEN_FULL = util.axis("hidden", { 1, 7, 33, 100, 768, 1000, 2048, 4096, 8192, 16384, "launch" })

-- Rows every norm family's matrix has: residual=true with f32 residuals (bf16 rows; every dtype in
-- the full matrix), and offset=1 (zero-centered weights) in each form (fixed, reload, looping).
function M.matrix_rows(rows)
  local res = "residual=true r=f32"
  local bf16 = { "x=bf16", "x=bf16 w=f32" }
  rows[#rows + 1] = { bf16, M.MATRIX_HIDDEN, res, quick = true }
  rows[#rows + 1] = { { "x=f32", "x=f16" }, M.MATRIX_HIDDEN_FULL, res, full = true }
  rows[#rows + 1] = { bf16, M.MATRIX_HIDDEN_FULL, res, full = true }
  rows[#rows + 1] = { bf16, util.axis("hidden", { 1, 768, 4096 }), "offset=1" }
  rows[#rows + 1] = { "x=bf16", "hidden=16384", "offset=1 residual=true r=f32" }
  rows[#rows + 1] = { "x=bf16 w=f32", "hidden=16384", "offset=1" }
  rows[#rows + 1] = { bf16, "hidden=launch", "offset=1" }
  return rows
end

-- check() shared by the families: r is the residual stream's dtype, meaningless without one.
function M.check(spec)
  if not spec.residual and spec.r ~= spec.x then
    return "r=" .. spec.r .. " needs residual=true (r is the dtype of the residual stream)"
  end
  if spec.offset == 1 and not spec.weight then
    return "offset=1 needs weight=true (offset=1 multiplies by 1 + weight)"
  end
  if spec.kernel == "stats" and (spec.residual or spec.form ~= "auto" or spec.hidden == "launch") then
    return "kernel=stats (the split forms' row statistics) takes a fixed hidden, form=auto and no residual (its sums read no dres)"
  end
  return nil
end

return M
