-- templates/lib/norm_bwd.lua - the LayerNorm/RMSNorm backward kernels: the fixed, reload and looping forms (lib/norm.lua picks one).
--
-- The shared geometry, the forms' cost model (backward_config), row access and reductions are
-- lib/norm.lua's (this module reads them through its own table: M.reduce is norm.reduce).
local util = require("lib.util")

local M = setmetatable({}, { __index = require("lib.norm") })

-- ---- backward (LayerNorm and RMSNorm) ----
-- xhat = (x - mean) rstd (RMSNorm: x rstd), g = dy w; dx = rstd (g - mean(g) - xhat mean(g xhat))
-- (RMSNorm: no mean(g) term), plus dres with a residual. dweight = sum over rows of dy xhat and
-- dbias = sum of dy go to an f32 workspace: slab s (weight first, then bias), one partial row per
-- (block, row slot); the blocks walk the rows grid-stride, so the workspace size follows the grid
-- the launcher picks, not the row count. norm_reduce sums the partial rows in a fixed order.

local function backward_fixed(b, spec, cfg, p, rms)
  if cfg.max_registers then b:max_registers(cfg.max_registers) end -- hidden=1 only (backward_config)
  local T, rpb = cfg.threads_per_row, cfg.rows_per_block
  local tid = b:tid()
  local t, slot = tid % T, tid // T
  local r = M.fixed_row(b, cfg, t)
  local red = { groups = T // 32, nwarps = cfg.block // 32 }
  local nel = cfg.iters * cfg.vec
  local wv = spec.weight and M.load_row(b, r, p.weight, spec.w) or nil
  if wv and spec.offset == 1 then
    for k = 1, #wv do wv[k] = wv[k] + 1.0 end -- 1 + w in f32 (zero-centered weights)
  end
  local slabs = M.slabs(spec, rms)
  local acc_w, acc_b = {}, {}
  for k = 1, nel do
    if spec.weight then acc_w[k] = b:var("f32", 0.0) end
    if slabs > 0 and not rms and spec.bias then acc_b[k] = b:var("f32", 0.0) end
  end
  local n = spec.hidden
  b:for_(b:ctaid() * rpb, p.rows, b:nctaid() * rpb, function(rbase)
    local row = rbase + slot
    local live = b:lt(row, p.rows)
    local off = b:i64(row) * n
    local xs = M.load_row(b, r, p.x + off, spec.x, live)
    local dys = M.load_row(b, r, p.dy + off, spec.dy, live)
    local rstd = b:load(p.rstd + row, { pred = live })
    local mean = (not rms) and b:load(p.mean + row, { pred = live }) or nil
    local xh, g = {}, {}
    local gx = {}
    for k = 1, nel do
      xh[k] = M.masked(b, r, k, (rms and xs[k] or xs[k] - mean) * rstd)
      g[k] = wv and dys[k] * wv[k] or dys[k]
      gx[k] = g[k] * xh[k]
    end
    local sg, sgx = M.tree_sum(b, g), M.tree_sum(b, gx)
    local s = rms and M.reduce(b, { sgx }, { "sum" }, red) or M.reduce(b, { sgx, sg }, { "sum", "sum" }, red)
    local a = s[1] / n
    local c = (not rms) and s[2] / n or nil
    local dres = spec.residual and M.load_row(b, r, p.dres + off, spec.r, live) or nil
    local dx = M.dx_row(b, nel, xh, g, a, c, rstd, dres, M.accumulate_in(b, acc_w, acc_b, dys, xh))
    M.store_row(b, r, p.dx + off, spec.dx, dx, live)
  end)
  if slabs == 0 then return end
  if rpb == 1 then -- one partial row per block and slab
    local s = 0
    for _, acc in ipairs({ acc_w, acc_b }) do
      if acc[1] then
        local vals = {}
        for k = 1, nel do vals[k] = acc[k]:get() end
        M.store_row(b, r, p.ws + (b:i64(b:nctaid()) * s + b:i64(b:ctaid())) * n, "f32", vals)
        s = s + 1
      end
    end
    return
  end
  -- Several row slots share the block's columns: their accumulators meet in shared memory
  -- (thread t's k-th value of slot q at q*T*nel + (k-1)*T + t) and slot 0 adds them in slot order,
  -- so the block still writes one partial row per slab.
  local stride = T * nel
  local sm = b:shared("f32", rpb * stride)
  local s = 0
  for _, acc in ipairs({ acc_w, acc_b }) do
    if acc[1] then
      for k = 1, nel do b:store(sm + (slot * stride + ((k - 1) * T) + t), acc[k]:get()) end
      b:barrier()
      local slab = s
      b:if_(b:eq(slot, 0), function()
        local vals = {}
        for k = 1, nel do
          local v = b:load(sm + ((k - 1) * T + t))
          for q = 1, rpb - 1 do v = v + b:load(sm + (q * stride + (k - 1) * T + t)) end
          vals[k] = v
        end
        M.store_row(b, r, p.ws + (b:i64(b:nctaid()) * slab + b:i64(b:ctaid())) * n, "f32", vals)
      end)
      b:barrier() -- the next slab reuses the array
      s = s + 1
    end
  end
end

-- Chunks j0..j1 (0-based, inclusive) of the thread's share of the row at ptr, as f32 (zeros where
-- masked); the chunk-range forms of load_row/store_row.
local function load_chunks(b, r, ptr, dtype, j0, j1)
  local out, vec = {}, r.cfg.vec
  local align = math.min(16, vec * util.dtype_bytes[dtype])
  for j = j0, j1 do
    local v = b:load_vec(ptr + r.offs[j], vec, { align = align, pred = r.valid[j] })
    for i = 1, vec do out[#out + 1] = b:to_f32(v[i]) end
  end
  return out
end

local function store_chunks(b, r, ptr, dtype, vals, j0, j1)
  local vec = r.cfg.vec
  local align = math.min(16, vec * util.dtype_bytes[dtype])
  for j = j0, j1 do
    local part = {}
    for i = 1, vec do part[i] = vals[(j - j0) * vec + i] end
    b:store_vec(ptr + r.offs[j], b:from_f32_vec(part, dtype), { align = align, pred = r.valid[j] })
  end
end

-- The reload form (every fixed hidden whose rows take a block of their own; `form` reg8, reg16,
-- smem8, smem16): one row per block of T threads (whole warps), cfg.iters chunks of vec elements
-- per thread. Only the dweight/dbias accumulators live across rows: x, dy and the weight are read
-- in pass 1 (the two sums) and read again in pass 2 (dx and the accumulators) instead of being
-- held; the re-reads hit L1/L2, DRAM traffic stays one read of x and dy and one write of dx. The
-- loads of pass 2 take their offset from a zero in shared memory, so the optimizer cannot forward
-- pass 1's values to them (which would need the registers this form saves).
--
-- Accumulator a (slab-major: dweight elements 1..nel, then dbias) lives in a register, or for the
-- last cfg.acc_smem of them (the smem forms: all) in shared memory at (a - first) * T + t (each
-- thread owns its cells: no barrier, no bank conflict); static shared memory, or dynamic where
-- cfg.dynamic_smem is set. (Splitting them between registers and shared memory made ptxas spill
-- more, not less: LLVM hoists the shared loads of pass 2 beside the register accumulators.)
local function backward_reload(b, spec, cfg, p, rms)
  if cfg.max_registers then b:max_registers(cfg.max_registers) end
  local T, vec = cfg.threads_per_row, cfg.vec
  local t = b:tid()
  local r = M.fixed_row(b, cfg, t)
  local red = { groups = T // 32, nwarps = cfg.block // 32 }
  local nel = cfg.iters * vec
  local nslab = M.slabs(spec, rms)
  local nacc = nslab * nel
  local nsm = cfg.acc_smem or 0
  local first = nacc - nsm + 1 -- accumulators first..nacc are in shared memory
  local acc = {}
  for a = 1, first - 1 do acc[a] = b:var("f32", 0.0) end
  local sm
  if nsm > 0 then
    sm = cfg.dynamic_smem and b:dynamic_shared("f32") or b:shared("f32", nsm * T)
    for a = first, nacc do b:store(sm + ((a - first) * T + t), b:f32(0.0)) end
  end
  local function acc_add(a, f)
    if a < first then acc[a]:set(f(acc[a]:get()))
    else
      local at = sm + ((a - first) * T + t)
      b:store(at, f(b:load(at)))
    end
  end
  local function acc_get(a)
    if a < first then return acc[a]:get() end
    return b:load(sm + ((a - first) * T + t))
  end
  local wslab = spec.weight and 0 or nil
  local bslab = (not rms and spec.bias) and (spec.weight and 1 or 0) or nil
  local zero = b:shared("f32", 1) -- +0.0, whose bits are the integer 0
  b:if_(b:eq(t, 0), function() b:store(zero, b:f32(0.0)) end)
  b:barrier()
  local n = spec.hidden
  local j1 = cfg.iters - 1
  b:for_(b:ctaid(), p.rows, b:nctaid(), function(row)
    local off = b:i64(row) * n
    local rstd = b:load(p.rstd + row)
    local mean = (not rms) and b:load(p.mean + row) or nil
    -- xhat, g and dy of chunks j0..j1 (masked elements 0), reading at offset z (a zero)
    local function terms(z, j0, j1)
      local xs = load_chunks(b, r, p.x + (off + z), spec.x, j0, j1)
      local dys = load_chunks(b, r, p.dy + (off + z), spec.dy, j0, j1)
      local wv = spec.weight and load_chunks(b, r, p.weight + z, spec.w, j0, j1) or nil
      local xh, g = {}, {}
      for i = 1, #xs do
        local k = j0 * vec + i
        xh[i] = M.masked(b, r, k, (rms and xs[i] or xs[i] - mean) * rstd)
        g[i] = wv and dys[i] * (spec.offset == 1 and wv[i] + 1.0 or wv[i]) or dys[i]
      end
      return xh, g, dys
    end
    -- pass 1: sum(g xhat) and sum(g), pairwise over the thread's elements
    local xh1, g1 = terms(b:i64(b:bits(b:load(zero))), 0, j1)
    local gx = {}
    for i = 1, nel do gx[i] = g1[i] * xh1[i] end
    local sg, sgx = M.tree_sum(b, g1), M.tree_sum(b, gx)
    local s = rms and M.reduce(b, { sgx }, { "sum" }, red) or M.reduce(b, { sgx, sg }, { "sum", "sum" }, red)
    local a = s[1] / n
    local c = (not rms) and s[2] / n or nil
    -- pass 2: dx, and the accumulators
    local xh, g, dys = terms(b:i64(b:bits(b:load(zero))), 0, j1)
    local dres = spec.residual and load_chunks(b, r, p.dres + off, spec.r, 0, j1) or nil
    local dx = M.dx_row(b, nel, xh, g, a, c, rstd, dres, function(k)
      if wslab then acc_add(wslab * nel + k, function(v) return b:fma(dys[k], xh[k], v) end) end
      if bslab then acc_add(bslab * nel + k, function(v) return v + dys[k] end) end
    end)
    store_chunks(b, r, p.dx + off, spec.dx, dx, 0, j1)
  end)
  for s = 0, nslab - 1 do
    local vals = {}
    for k = 1, nel do vals[k] = acc_get(s * nel + k) end
    M.store_row(b, r, p.ws + (b:i64(b:nctaid()) * s + b:i64(b:ctaid())) * n, "f32", vals)
  end
end

local function backward_looping(b, spec, cfg, p, rms)
  local T, rpb = cfg.threads_per_row, cfg.rows_per_block
  local tid = b:tid()
  local t, slot = tid % T, tid // T
  local red = { groups = T // 32, nwarps = cfg.block // 32 }
  local slabs = M.slabs(spec, rms)
  local hidden64 = b:i64(p.hidden)
  local parts = b:nctaid() * rpb
  local part = b:ctaid() * rpb + slot
  local wsw, wsb
  local s = 0
  if spec.weight then wsw = p.ws + b:i64(part) * hidden64; s = 1 end
  if not rms and spec.bias then wsb = p.ws + (b:i64(parts) * s + b:i64(part)) * hidden64 end
  if slabs > 0 then
    b:for_(t, p.hidden, T, function(i)
      if wsw then b:store(wsw + i, b:f32(0.0)) end
      if wsb then b:store(wsb + i, b:f32(0.0)) end
    end)
  end
  local hidden_f = b:f32(p.hidden)
  b:for_(b:ctaid() * rpb, p.rows, b:nctaid() * rpb, function(rbase)
    local row = rbase + slot
    local live = b:lt(row, p.rows)
    local n = b:select(live, p.hidden, 0)
    local off = b:i64(b:select(live, row, 0)) * hidden64
    local rstd = b:load(p.rstd + row, { pred = live })
    local mean = (not rms) and b:load(p.mean + row, { pred = live }) or nil
    local function terms(i)
      local x = b:to_f32(b:load(p.x + off + i))
      local dy = b:to_f32(b:load(p.dy + off + i))
      local xh = (rms and x or x - mean) * rstd
      local g = spec.weight and dy * M.weight_f32(b, spec, b:load(p.weight + i)) or dy
      return xh, g, dy
    end
    local sg, sgx = b:var("f32", 0.0), b:var("f32", 0.0)
    b:for_(t, n, T, function(i)
      local xh, g = terms(i)
      sg:set(sg:get() + g)
      sgx:set(b:fma(g, xh, sgx:get()))
    end)
    local sr = rms and M.reduce(b, { sgx:get() }, { "sum" }, red) or M.reduce(b, { sgx:get(), sg:get() }, { "sum", "sum" }, red)
    local a = sr[1] / hidden_f
    local c = (not rms) and sr[2] / hidden_f or nil
    b:for_(t, n, T, function(i)
      local xh, g, dy = terms(i)
      local tk = c and b:fma(xh, a, c) or xh * a
      local dx = (g - tk) * rstd
      if spec.residual then dx = dx + b:to_f32(b:load(p.dres + off + i)) end
      b:store(p.dx + off + i, b:from_f32(dx, spec.dx))
      if wsw then b:store(wsw + i, b:fma(dy, xh, b:load(wsw + i))) end
      if wsb then b:store(wsb + i, b:load(wsb + i) + dy) end
    end)
  end)
end

-- The kernel's parameters: the dx kernel's list, or what the split forms' kernels take (lib/norm_split.lua).
function M.params(spec, cfg, params) return require("lib.norm_split").params(spec, cfg, params) end

function M.backward(b, spec, cfg, p, rms)
  local split = require("lib.norm_split")
  if cfg.stats then split.build_stats(b, spec, cfg, p, rms)
  elseif cfg.split then split.build_split(b, spec, cfg, p, rms)
  elseif spec.hidden == "launch" or cfg.loop then backward_looping(b, spec, cfg, p, rms)
  elseif cfg.reload then backward_reload(b, spec, cfg, p, rms)
  else backward_fixed(b, spec, cfg, p, rms) end
end

return M
