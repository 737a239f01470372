-- templates/lib/attn_bwd_simt.lua - attention backward on f32 FMA (SIMT): tiles, P/dS recompute, dK dV dQ products.
--
-- Every tile lives in shared memory as f32 with rows padded to head_dim + 1 (so threads reading
-- one column of consecutive rows hit different banks): K and V (bn keys), Q and dO (bm query
-- rows), P and dS (bm x bn). 128 threads. Score work: thread tid takes key j = tid % bn of rows
-- tid // bn + (128 / bn) k. Head-dim work: warp w takes rows w + 4 r, lane l columns l + 32 c.
local util = require("lib.util")

local M = {}

M.THREADS = 128
local LOG2E = 1.4426950408889634

-- Query rows (m) and keys (n) per tile; the tiles total (2m + 2n)(d + 1) + 2m(n + 1) floats.
-- head_dim 256 needs more than 48 KiB and takes dynamic shared memory.
M.TILES = {
  [32] = { m = 32, n = 64 }, [64] = { m = 32, n = 32 }, [96] = { m = 16, n = 32 },
  [128] = { m = 16, n = 16 }, [256] = { m = 8, n = 16 },
}

function M.config(spec, target, cfg)
  local t = M.TILES[spec.head_dim]
  -- kernel=dq with dropout and the score keys: 16 scores a thread (d32: 32 x 64) with a Philox call each spill
  -- 8 bytes (ptxas sm_75/80); half the query rows
  if spec.kernel == "dq" and spec.dropout and t.m * t.n > 1024 then t = { m = t.m // 2, n = t.n } end
  local d = spec.head_dim
  local bytes = ((2 * t.m + 2 * t.n) * (d + 1) + 2 * t.m * (t.n + 1)) * 4
  cfg.block, cfg.path = M.THREADS, "simt"
  cfg.block_m, cfg.block_n, cfg.ld, cfg.ldp = t.m, t.n, d + 1, t.n + 1
  -- a padded head_dim (lib/attn_dims.lua): the real columns; with v_head_dim (lib/attn_vdim.lua) the
  -- products over the head dim run to the wider of the two (cfg.dim), Q/K hold spec.dim columns (cfg.qdim)
  cfg.qdim = spec.dim or d
  cfg.dim = math.max(cfg.qdim, spec.vdim or cfg.qdim)
  cfg.smem_bytes = bytes
  if bytes > target.smem_static_max then cfg.dynamic_smem = bytes end
  return cfg
end

-- The shared tiles: pointers qs, dos, ks, vs, ps, dss (f32).
function M.alloc(b, cfg, d)
  local bm, bn, ld, ldp = cfg.block_m, cfg.block_n, cfg.ld, cfg.ldp
  local sizes = { { "ks", bn * ld }, { "vs", bn * ld }, { "qs", bm * ld }, { "dos", bm * ld },
                  { "ps", bm * ldp }, { "dss", bm * ldp } }
  local sh = {}
  if cfg.dynamic_smem then
    local at = b:dynamic_shared("f32")
    local off = 0
    for _, s in ipairs(sizes) do
      sh[s[1]] = at + off
      off = off + util.ceil_div(s[2], 4) * 4
    end
  else
    for _, s in ipairs(sizes) do sh[s[1]] = b:shared("f32", s[2], 16) end
  end
  return sh
end

-- Copies rows [row0, row0 + rows) of a [seq, d] slice (element type dt, row stride `stride`)
-- into the f32 tile dst, 4 elements a load. Rows at or past seq read row 0 instead (the products
-- they meet are masked to exactly zero). Columns at or past the tensor's width `dim` (cfg.qdim when
-- nil; V and dO: v_head_dim) read column 0: past cfg.dim the products over the head dim stop and
-- the columns only feed accumulator columns that are never stored; below it (head_dim and
-- v_head_dim differ) they are stored as 0.
function M.load_tile(b, cfg, dt, d, dst, src, stride, row0, rows, seq, dim)
  dim = dim or cfg.qdim
  local vec, ld = 4, cfg.ld
  local per_row = d // vec
  local items = rows * per_row
  local tid = b:tid()
  for it = 0, util.ceil_div(items, M.THREADS) - 1 do
    local item = tid + it * M.THREADS
    local r, c = item // per_row, (item % per_row) * vec
    local copy = function()
      local ok = b:lt(row0 + r, seq)
      local real = dim < d and b:lt(c, dim) or nil
      local vals = b:load_vec(src + b:i64(b:select(ok, row0 + r, 0)) * stride + (real and b:select(real, c, 0) or c), vec,
                              { align = vec * util.dtype_bytes[dt] })
      for e = 1, vec do
        local f = b:to_f32(vals[e])
        b:store(dst + r * ld + c + (e - 1), dim < cfg.dim and b:select(real, f, 0.0) or f)
      end
    end
    if (it + 1) * M.THREADS <= items then copy() else b:if_(b:lt(item, items), copy) end
  end
end

-- Recomputes the tile's P = exp(scale S - lse) and dS = P (dP - D), S = Q K^T and dP = dO V^T,
-- from the shared Q, dO, K, V tiles, and stores them in ps and dss. rows.q0 is the query index
-- of tile row 0, rows.k0 the key index of tile column 0; rows.lse and rows.delta point at the
-- (batch, head)'s row 0; rows.bound(row) is the key bound of a query row (keys below it are
-- visible), or rows.range(row) gives lo (nil: 0) and that bound (lib/attn_mask.lua); rows.score(s,
-- row, key), when given, is the base-2 score of dot product s and, with the softcap, the tanh
-- whose derivative 1 - t^2 dS takes. Entries that are masked, or whose row is past seq_q, are
-- exactly 0 in both.
function M.scores(b, cfg, d, sh, p, rows)
  local bm, bn, ld, ldp = cfg.block_m, cfg.block_n, cfg.ld, cfg.ldp
  local tid = b:tid()
  local j, rg = tid % bn, tid // bn
  local rgs, ns = M.THREADS // bn, bm * bn // M.THREADS
  local s, dp = {}, {}
  for k = 0, ns - 1 do
    s[k] = b:var("f32", 0.0)
    dp[k] = b:var("f32", 0.0)
  end
  b:for_(0, cfg.dim, 4, function(c0) -- (padded head_dim: its zero columns add nothing)
    local kv, vv = {}, {}
    for e = 0, 3 do
      kv[e] = b:load(sh.ks + j * ld + c0 + e)
      vv[e] = b:load(sh.vs + j * ld + c0 + e)
    end
    for k = 0, ns - 1 do
      local i = rg + rgs * k
      local a, g = s[k]:get(), dp[k]:get()
      for e = 0, 3 do
        a = b:fma(b:load(sh.qs + i * ld + c0 + e), kv[e], a)
        g = b:fma(b:load(sh.dos + i * ld + c0 + e), vv[e], g)
      end
      s[k]:set(a)
      dp[k]:set(g)
    end
  end)
  local scale2 = p.scale * LOG2E
  for k = 0, ns - 1 do
    local i = rg + rgs * k
    local row = rows.q0 + i
    local live = b:lt(row, p.seq_q)
    local r = b:select(live, row, 0)
    local lse2 = b:load(rows.lse + r) * LOG2E
    local dl = b:load(rows.delta + r)
    local key = rows.k0 + j
    local vis
    if rows.range then
      local lo, hi = rows.range(row)
      vis = b:and_(live, b:lt(key, hi))
      if lo then vis = b:and_(vis, b:ge(key, lo)) end
    else
      vis = b:and_(live, b:lt(key, rows.bound(row)))
    end
    local pv, ds
    -- dropout: rows.drop(row, key) is Z (1 / (1 - p) kept, 0 dropped): P Z feeds dV, dS = P (dP Z - D)
    local z = rows.drop and rows.drop(row, key)
    local dpz = z and dp[k]:get() * z or dp[k]:get()
    if rows.score then
      local x, th = rows.score(s[k]:get(), row, key)
      pv = b:select(vis, b:ex2_approx(x - lse2), 0.0)
      local g = pv * (dpz - dl)
      if th then g = g * (1.0 - th * th) end
      ds = b:select(vis, g, 0.0)
    else
      pv = b:select(vis, b:ex2_approx(b:fma(s[k]:get(), scale2, -lse2)), 0.0)
      ds = b:select(vis, pv * (dpz - dl), 0.0)
    end
    if z then pv = pv * z end
    b:store(sh.ps + i * ldp + j, pv)
    b:store(sh.dss + i * ldp + j, ds)
  end
end

-- Accumulator variables for a rows x d block in the head-dim layout (warp rows, lane columns).
function M.acc(b, rows, d)
  local a = {}
  for r = 0, rows // 4 - 1 do
    a[r] = {}
    for c = 0, d // 32 - 1 do a[r][c] = b:var("f32", 0.0) end
  end
  return a
end

-- dV += P^T dO and dK += dS^T Q over the tile's bm rows (dv, dk from M.acc(b, bn, d)).
function M.dkdv_step(b, cfg, d, sh, dk, dv)
  local bn, ld, ldp = cfg.block_n, cfg.ld, cfg.ldp
  local tid = b:tid()
  local lane, warp = tid & 31, tid >> 5
  b:for_(0, cfg.block_m, 1, function(i)
    local pj, dsj = {}, {}
    for r = 0, bn // 4 - 1 do
      pj[r] = b:load(sh.ps + i * ldp + warp + 4 * r)
      dsj[r] = b:load(sh.dss + i * ldp + warp + 4 * r)
    end
    for c = 0, util.ceil_div(cfg.dim, 32) - 1 do
      local qv = b:load(sh.qs + i * ld + lane + 32 * c)
      local dov = b:load(sh.dos + i * ld + lane + 32 * c)
      for r = 0, bn // 4 - 1 do
        dv[r][c]:set(b:fma(pj[r], dov, dv[r][c]:get()))
        dk[r][c]:set(b:fma(dsj[r], qv, dk[r][c]:get()))
      end
    end
  end)
end

-- dQ(tile) += dS K over the tile's bn keys (dq from M.acc(b, bm, d)).
function M.dq_step(b, cfg, d, sh, dq)
  local bm, ld, ldp = cfg.block_m, cfg.ld, cfg.ldp
  local tid = b:tid()
  local lane, warp = tid & 31, tid >> 5
  b:for_(0, cfg.block_n, 1, function(j)
    local dsv = {}
    for r = 0, bm // 4 - 1 do dsv[r] = b:load(sh.dss + (warp + 4 * r) * ldp + j) end
    for c = 0, util.ceil_div(cfg.dim, 32) - 1 do
      local kv = b:load(sh.ks + j * ld + lane + 32 * c)
      for r = 0, bm // 4 - 1 do dq[r][c]:set(b:fma(dsv[r], kv, dq[r][c]:get())) end
    end
  end)
end

-- Row and column of accumulator element (r, c) in the head-dim layout.
function M.acc_pos(b, r, c)
  local tid = b:tid()
  return (tid >> 5) + 4 * r, (tid & 31) + 32 * c
end

return M
