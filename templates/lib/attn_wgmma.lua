-- templates/lib/attn_wgmma.lua - the attention forward on sm_90a in FlashAttention-3's structure (path=wgmma):
-- a producer warpgroup issuing TMA into a K/V ring gated by mbarriers, consumer warpgroups on wgmma.
--
-- attention.lua hands a spec here (config / build / launch) when path=wgmma (opt-in: path=auto keeps the
-- mma.sync kernel on sm_90a until the kit's wgmma rows have run on a GPU), for the specs this file covers
-- (not_covered): f16/bf16 inputs, head_dim and v_head_dim up to 256 (lib/attn_wgmma_dims.lua: on tiles 64, 128 or
-- 256 columns wide, d32 and d96 and the padded dims among them), any out dtype, causal (both alignments), window, softcap, ALiBi, GQA, varlen,
-- split-KV, dropout (lib/attn_wgmma_keys.lua: the producer's coordinates, the block's sequence and key range, the
-- lse index, the split epilogue, the dropout mask), paged KV (lib/attn_wgmma_paged.lua: the producer warpgroup copies
-- K and V from the pages); not append or rotary (those keep the FA2 kernel there).
--
-- The launch is the FA2 kernel's (same tensors, scalars, strides and grid: problem {seq_q, heads_q, batch},
-- grid tile {BM, 1, 1}) plus three tensor maps the runtime builds over q, k and v ([batch, seq, heads, d],
-- boxes of 1 x 64 rows x 1 x 64 columns: one 128-byte row of 64 16-bit elements, the 128B swizzle's
-- span; head_dim 128 and 256 take two and four boxes a 64-row panel; K and V boxes have 32 rows on 32-key tiles,
-- a 128-key tile takes two boxes a panel). Keys a tile (BN: 64, 128 at d128, 32 at d256 with window, softcap or
-- dropout), the ring's stages and the loop: lib/attn_wgmma_tiles.lua. Rows past seq_q / seq_k come in as zeros (TMA's out-of-bounds
-- fill); scores of keys past seq_k are masked; stores of rows past seq_q are not made.
--
-- Block: NC consumer warpgroups (threads 0 .. 128 NC - 1; warpgroup c owns query rows q0 + 64c .. +63)
-- and one producer warpgroup (the last; its first thread issues every TMA). setmaxnreg moves registers
-- from the producer (dec) to the consumers (inc). Shared memory (dynamic, 1024-byte aligned): Q of the
-- block (NC x d/64 panels of 64 x 64), then NS stages of K and of V (d/64 panels of BN rows each); a Q panel
-- is 8192 bytes, rows of 128 bytes under the 128-byte swizzle, which is also the layout wgmma's descriptors
-- name: K as stored is K-major for S = Q K^T, V as stored is N-major for O += P V (trans_b).
-- Barriers: qbar (Q landed), full[s] (1 arrival + the stage's bytes), empty[s] (128 NC consumer arrivals).
--
-- The consumers' loop runs FA3's schedule (lib/attn_wgmma_pp.lua: ping-pong on named barriers 1 and 2, the
-- softmax of tile j under the wgmma of S_{j+1} and P_j V_j) except at d256 with causal and ALiBi or varlen on
-- 64-key tiles, where it is the side-by-side loop below; the math per tile is the same (softmax, pack, qk, pv here).
-- Per key tile (consumer): wait full[s]; S = Q K^T by d/16 chained m64n{BN}k16 wgmma; commit; wait; the
-- online softmax on S's D fragment (thread 32w + 4g + q holds rows 16w + g and 16w + g + 8, element i at
-- row (i >> 1) & 1, column 8(i >> 2) + 2q + (i & 1); row max and sum over the 4 lanes q); O rescaled;
-- P packed into wgmma's A registers; O += P V by BN/16 chained m64n{d}k16 wgmma; commit; wait; arrive
-- empty[s]. The epilogue divides by l and writes O (out dtype) and lse (natural log; +inf and O = 0 for
-- a row that sees no key, as FlashAttention-2).
local util = require("lib.util")
local mask = require("lib.attn_mask")
local pp = require("lib.attn_wgmma_pp")
local keys = require("lib.attn_wgmma_keys")
local tiles = require("lib.attn_wgmma_tiles")
local wpaged = require("lib.attn_wgmma_paged")
local gqa = require("lib.attn_wgmma_gqa")
local wdims = require("lib.attn_wgmma_dims")

local M = {}

-- What path=wgmma builds, as its refusal of a spec (M.config) says.
local TAKES = "it takes dtype f16/bf16, head_dim and v_head_dim up to 256 (on 64, 128 or 256-column tiles: lib/attn_wgmma_dims.lua), causal, window, softcap, alibi, GQA, varlen, splitkv, dropout, paged (use path=auto)"

local LOG2E = 1.4426950408889634
local NEG_INF, POS_INF = -math.huge, math.huge
local PANEL = tiles.PANEL -- elements of one 64 x 64 panel (8192 bytes)
-- The tile config (consumer warpgroups, keys a tile, setmaxnreg, the ring's stages, the loop): lib/attn_wgmma_tiles.lua.

-- Why the spec is not built on this path (nil when it is). spec: attention's resolved spec (spec_of).
local function not_covered(spec)
  if spec.dtype ~= "f16" and spec.dtype ~= "bf16" then return "dtype " .. spec.dtype .. " (f16 and bf16 only)" end
  local why = wdims.not_served(spec) -- (the head dims: lib/attn_wgmma_dims.lua)
  if why then return why end
  for _, k in ipairs({ "splitkv", "dropout", "varlen", "paged", "append" }) do
    if spec[k] and not keys.KEYS[k] then return k .. "=true" end
  end
  if spec.rotary and spec.rotary ~= "none" and spec.rotary ~= false then return "rotary=" .. tostring(spec.rotary) end
  return keys.not_built(spec)
end
M.not_covered = not_covered

-- Why path=wgmma refuses spec on target, as the error message (nil: it builds it): a target without wgmma, or a spec
-- not_covered(spec) names, the message ending in takes (what the path builds). This config's and
-- lib/attn_bwd_wgmma.lua's; each raises it itself, so the position the error carries is the config's.
function M.refusal(spec, target, not_covered, takes)
  if not target.wgmma then
    return string.format("path=wgmma runs on sm_90a only (wgmma.mma_async and setmaxnreg exist there alone), not %s; valid targets: sm_90a (elsewhere use path=auto, mma or simt)",
                         target.name or ("sm_" .. target.sm))
  end
  local why = not_covered(spec)
  if why then return "path=wgmma is not built for " .. why .. "; " .. takes end
end

-- The config of path=wgmma, or nil when the spec stays on attention.lua's paths. Errors: path=wgmma on a
-- target without wgmma, or for a spec this path does not build.
function M.config(spec, target)
  -- Opt-in until a GPU has run it (the kit's wgmma rows): path=auto keeps the FA2 kernel, proven on an H100.
  if spec.path ~= "wgmma" then return nil end
  local no = M.refusal(spec, target, not_covered, TAKES)
  if no then error(no) end
  local sh = tiles.shape(wdims.spec(spec))
  local stages, bytes = tiles.ring(wdims.spec(spec), sh, target)
  return keys.config(spec, {
    path = "wgmma", block = 128 * (sh.nc + 1), threads = 128 * (sh.nc + 1), grid_tile = { 64 * sh.nc, 1, 1 },
    rows_per_block = 64 * sh.nc, block_n = sh.bn, nc = sh.nc, stages = stages, dec = sh.dec, inc = sh.inc,
    dynamic_smem = bytes, align = 16, arch_specific = true,
  })
end

-- The tensor maps of the launch (docs/registry.md): q, k, v as [batch, seq, heads, d], boxes of 64 rows x 64
-- columns, 128-byte swizzle.
function M.launch(spec, cfg, l)
  l.tmaps = {
    { "tm_q", "q", box = keys.box(spec, "q"), swizzle = 128 },
    { "tm_k", "k", box = tiles.kv_box(keys.box(spec, "k"), cfg.block_n), swizzle = 128 },
    { "tm_v", "v", box = tiles.kv_box(keys.box(spec, "v"), cfg.block_n), swizzle = 128 },
  }
  return keys.launch(spec, cfg, l)
end

-- The kernel's parameters: attention.lua's (base_params: o, lse, q, k, v, the sizes, scale), the strides, the
-- three tensor maps, the mask keys' values.
local function declare(b, spec, base_params)
  local params = base_params(spec)
  for _, t in ipairs({ "q", "k", "v", "o" }) do
    for _, d in ipairs({ "b", "s", "h" }) do params[#params + 1] = { "stride_" .. t .. d, "i64" } end
  end
  params = keys.params(spec, params)
  for _, t in ipairs({ "q", "k", "v" }) do params[#params + 1] = { "tm_" .. t, "tensormap", spec.dtype } end
  mask.params(spec, params)
  return b:kernel{ params = wpaged.maps(spec, params) }
end

-- The key tiles [t0, t_end) of BN keys the block's rows (query positions first..last) see.
local function key_tiles(b, spec, m, first, last, BN)
  local p = m.p
  if spec.window then
    local t0, t_end = mask.tile_range(m, first, last, BN)
    return t0, t_end
  end
  local hi = p.seq_k
  if spec.causal then
    local _, h = mask.row_range(m, last)
    hi = h
  end
  return b:i32(0), (b:max(hi, 0) + (BN - 1)) // BN
end

function M.build(b, spec, cfg, base_params)
  spec = wdims.spec(spec) -- (head_dim the tiles' width W; dim, vdim the real ones, kq, qp, vp, vw: lib/attn_wgmma_dims.lua)
  local p = keys.bind(b, spec, declare(b, spec, base_params), 64 * cfg.nc)
  local T, d, nc, ns, BN = spec.dtype, spec.head_dim, cfg.nc, cfg.stages, cfg.block_n
  local panels = d // 64
  local KPANEL = BN * 64 -- elements of one d/64 panel of a K or V tile (BN rows of 128 bytes)
  local t, wg = b:tid(), b:warpgroup()
  local smem = b:dynamic_shared(T, 1024)
  local sq = smem
  local sk = smem + nc * panels * PANEL
  local sv = sk + ns * panels * KPANEL
  local bars = b:shared("f32", 2 * (1 + 2 * ns), 8)
  local qbar, full, empty = bars, bars + 2, bars + 2 + 2 * ns
  local bz, h = b:ctaid("z"), b:ctaid("y")
  local hkv = p.hkv or h // (p.heads_q // p.heads_kv)
  local q0 = (p.qblock or b:ctaid("x")) * (64 * nc)
  -- the mask's values and the block's key tiles [t0, t0 + ntiles), from p.seq_k
  local function key_range()
    local m = mask.setup(b, spec, p)
    local first_q, last = gqa.positions(b, spec, p, q0, 64 * nc) -- (split-KV's packed rows: lib/attn_wgmma_gqa.lua)
    local t0, t_end = keys.key_range(b, spec, p, key_tiles(b, spec, m, first_q, last, BN))
    return m, t0, b:max(t_end - t0, 0)
  end
  local m, t0, ntiles = key_range()
  local stage_bytes = (spec.qp + spec.vp) * KPANEL * util.dtype_bytes[T] -- (the panels holding real columns)
  local vw = spec.vw -- (O's columns: P V's n)

  local kslot = wpaged.share(b, spec, p) -- (paged=true: seq_k in shared memory for the consumers, below)
  b:if_(b:eq(t, 0), function()
    wpaged.store(b, spec, p, kslot)
    b:mbarrier_init(qbar, gqa.q_count(spec))
    for s = 0, ns - 1 do
      b:mbarrier_init(full + 2 * s, wpaged.full_count(spec))
      b:mbarrier_init(empty + 2 * s, 128 * nc)
    end
  end)
  b:barrier()

  -- producer: Q once, then each key tile's K and V into stage k % ns once the consumers freed it
  b:if_(b:eq(wg, nc), function()
    b:setmaxnreg("dec", cfg.dec)
    gqa.stage_q(b, spec, p, { nc = nc, panels = panels, q0 = q0, sq = sq, qbar = qbar }) -- (split-KV: Q's packed rows)
    b:if_(b:eq(t, 128 * nc), function()
      if not gqa.on(spec) then
        b:mbarrier_arrive(qbar, { tx = b:i32(nc * spec.qp * PANEL * util.dtype_bytes[T]) })
        for c = 0, nc - 1 do
          for j = 0, spec.qp - 1 do
            b:tma_load(sq + (c * panels + j) * PANEL, p.tm_q, keys.q_coord(b, spec, p, 64 * j, h, q0 + 64 * c, bz), qbar)
          end
        end
      end
      if spec.paged then return end -- (K and V: every producer thread copies them from the pages, below)
      b:for_(0, ntiles, 1, function(k)
        local s = k % ns
        b:if_(b:ge(k, ns), function() b:mbarrier_wait(empty + 2 * s, (k // ns + 1) % 2) end)
        local fb = full + 2 * s
        b:mbarrier_arrive(fb, { tx = b:i32(stage_bytes) })
        local row = (t0 + k) * BN
        local br = tiles.box_rows(BN)
        for j = 0, panels - 1 do
          for r = 0, BN // br - 1 do -- (boxes of br rows: a BN-row panel takes BN / br)
            local at = (s * panels + j) * KPANEL + r * br * 64
            if j < spec.qp then b:tma_load(sk + at, p.tm_k, keys.kv_coord(b, spec, p, 64 * j, hkv, row + br * r, bz), fb) end
            if j < spec.vp then b:tma_load(sv + at, p.tm_v, keys.kv_coord(b, spec, p, 64 * j, hkv, row + br * r, bz), fb) end
          end
        end
      end)
    end)
    wpaged.produce(b, spec, p, { t0 = t0, ntiles = ntiles, ns = ns, nc = nc, bn = BN, panels = panels, sk = sk, sv = sv,
                                 full = full, empty = empty, hkv = hkv }) -- (paged=true: lib/attn_wgmma_paged.lua)
  end)

  -- consumers
  b:if_(b:lt(wg, nc), function()
    b:setmaxnreg("inc", cfg.inc)
    if wpaged.reload(b, spec, p, kslot) then m, t0, ntiles = key_range() end
    local tc = b:warpgroup_thread()
    local w, g, q = tc // 32, (tc % 32) // 4, tc % 4
    local my_q = sq + wg * (panels * PANEL)
    local function desc(base, lbo) return b:wgmma_desc(base, { swizzle = 128, lbo = lbo, sbo = 1024 }) end
    local rows, sqpos, heads = {}, {}, {}
    for r = 0, 1 do
      rows[r] = q0 + wg * 64 + w * 16 + g + 8 * r
      sqpos[r], heads[r] = gqa.row(b, spec, p, rows[r], h) -- (split-KV: each row its own head and query)
    end
    local mv, lv, ov = {}, {}, {}
    for r = 0, 1 do mv[r], lv[r] = b:var("f32", NEG_INF), b:var("f32", 0.0) end
    for i = 1, vw // 2 do ov[i] = b:var("f32", 0.0) end
    local lim_hi, lim_lo, slope = {}, {}, nil
    for r = 0, 1 do
      local lo, hi = mask.row_range(m, sqpos[r])
      lim_hi[r], lim_lo[r] = hi, lo
    end
    if spec.alibi then
      slope = { [0] = mask.slope(m, heads[0]) }
      slope[1] = heads[1] == heads[0] and slope[0] or mask.slope(m, heads[1])
    end
    local scale2 = p.scale * LOG2E
    local drop = keys.dropout_setup(b, spec, p) -- (dropout=true: lib/attn_wgmma_keys.lua)
    b:mbarrier_wait(qbar, 0)
    -- the tiles every row of this warpgroup sees whole, [f0, f1) of the block's 0..ntiles, skip the per-key
    -- compare (FA2's loop split): before them (window) and after them (causal diagonal, seq_k's tail) it runs
    local first, wlast = gqa.positions(b, spec, p, q0 + wg * 64, 64, true)
    local _, hi_first = mask.row_range(m, first)
    local lo_last = spec.window and mask.row_range(m, wlast) or nil
    local f0 = lo_last and b:min(b:max((lo_last + (BN - 1)) // BN - t0, 0), ntiles) or b:i32(0)
    local f1 = b:min(b:max(b:max(hi_first, 0) // BN - t0, f0), ntiles)
    -- S's scores of key tile k after the mask and the online softmax: P (f32, the D fragment's order) and
    -- the rows' rescale alpha; m and l advance
    local function softmax(S, k, masked)
      local kv0 = (t0 + k) * BN
      local x, mx = {}, {}
      for i = 0, BN // 2 - 1 do
        local r = (i >> 1) & 1
        local col = 8 * (i >> 2) + (i & 1)
        local key = kv0 + q * 2 + col
        local dist = spec.alibi and b:f32(sqpos[r] + m.shift - key) or nil
        local v = mask.score(m, S[i + 1], scale2, slope and slope[r], dist)
        if masked then
          local ok = b:lt(key, lim_hi[r])
          if lim_lo[r] then ok = b:and_(ok, b:ge(key, lim_lo[r])) end
          v = b:select(ok, v, NEG_INF)
        end
        x[i] = v
        mx[r] = mx[r] and b:max(mx[r], x[i]) or x[i]
      end
      local alpha, muse = {}, {}
      for r = 0, 1 do
        local m_old = mv[r]:get()
        local m_new = b:max(m_old, b:warp_max(mx[r], 4))
        muse[r] = b:select(b:eq(m_new, NEG_INF), 0.0, m_new)
        alpha[r] = b:select(b:eq(m_old, NEG_INF), 0.0, b:ex2_approx(m_old - muse[r]))
        mv[r]:set(m_new)
      end
      local P, sum = {}, {}
      for i = 0, BN // 2 - 1 do
        local r = (i >> 1) & 1
        P[i] = b:ex2_approx(x[i] - muse[r])
        sum[r] = sum[r] and sum[r] + P[i] or P[i]
      end
      for r = 0, 1 do lv[r]:set(b:fma(lv[r]:get(), alpha[r], sum[r])) end
      keys.drop(b, spec, drop, h, rows[0], kv0 + q * 2, P, BN // 8)
      return P, alpha
    end
    -- P packed into wgmma's A registers: register hh of k-step j holds elements 8j + 4(hh >> 1) + 2(hh & 1), +1
    local function pack(P)
      local a = {}
      for j = 0, BN // 16 - 1 do
        for hh = 0, 3 do
          local i = 8 * j + 4 * (hh >> 1) + 2 * (hh & 1)
          a[4 * j + hh + 1] = b:pack(P[i], P[i + 1], T)
        end
      end
      return a
    end
    local function qk(s)
      local ks = sk + s * (panels * KPANEL)
      local S
      for j = 0, spec.kq - 1 do -- (k-steps up to the one holding head_dim: TMA zero-filled the columns past it)
        local off = 16 * (j % 4)
        S = b:wgmma{ n = BN, type = T, a = desc(my_q + (j // 4) * PANEL + off, 16), b = desc(ks + (j // 4) * KPANEL + off, 16), acc = S }
      end
      return S
    end
    local function pv(O, a, s)
      local vs = sv + s * (panels * KPANEL)
      for j = 0, BN // 16 - 1 do
        O = b:wgmma{ n = vw, type = T, a = { a[4 * j + 1], a[4 * j + 2], a[4 * j + 3], a[4 * j + 4] },
                     b = desc(vs + 1024 * j, 2 * KPANEL), acc = O, trans_b = true }
      end
      return O
    end
    local function rescaled(alpha)
      local O = {}
      for i = 0, vw // 2 - 1 do O[i + 1] = ov[i + 1]:get() * alpha[(i >> 1) & 1] end
      return O
    end
    if not tiles.pingpong(spec, nc) then
      -- one warpgroup's key tile start to end: S, softmax, O += P V (the two warpgroups side by side)
      local function tile(k, masked)
        local s = k % ns
        b:mbarrier_wait(full + 2 * s, (k // ns) % 2)
        b:wgmma_fence()
        local S = qk(s)
        b:wgmma_commit()
        S = b:wgmma_wait(0, S)
        local P, alpha = softmax(S, k, masked)
        local O = rescaled(alpha)
        b:wgmma_fence()
        O = pv(O, pack(P), s)
        b:wgmma_commit()
        O = b:wgmma_wait(0, O)
        for i = 1, vw // 2 do ov[i]:set(O[i]) end
        b:mbarrier_arrive(empty + 2 * s)
      end
      b:for_(0, f0, 1, function(k) tile(k, true) end)
      b:for_(f0, f1, 1, function(k) tile(k, false) end)
      b:for_(f1, ntiles, 1, function(k) tile(k, true) end)
    else
      pp.consumer_loop(b, { wg = wg, nc = nc, ns = ns, na = BN // 4, ntiles = ntiles, f0 = f0, f1 = f1, full = full, empty = empty,
                            ov = ov, softmax = softmax, pack = pack, qk = qk, pv = pv, rescaled = rescaled })
    end
    -- epilogue: O / l in the out dtype, lse from the lanes q == 0
    local ob = util.dtype_bytes[spec.out]
    for r = 0, 1 do
      local row = rows[r]
      local live = b:lt(row, p.mrows or p.seq_q)
      local lsum = b:warp_sum(lv[r]:get(), 4)
      local empty_row = b:le(lsum, 0.0)
      local inv = b:select(empty_row, 0.0, 1.0 / lsum)
      if drop then inv = inv * drop.rp end
      if spec.splitkv then -- (the partial O and lse of the block's split: lib/attn_wgmma_keys.lua)
        local function o(j) return { ov[4 * j + 2 * r + 1]:get() * inv, ov[4 * j + 2 * r + 2]:get() * inv } end
        keys.split_store(b, spec, p, bz, gqa.first_head(spec, p, h), row, q, live, b:eq(q, 0), o, lsum, mv[r]:get())
        goto continue
      end
      local orow = p.o + b:i64(bz) * p.stride_ob + b:i64(h) * p.stride_oh + b:i64(b:select(live, row, 0)) * p.stride_os + q * 2
      local vals = {}
      for j = 0, spec.vdim // 8 - 1 do -- (O: v_head_dim's columns)
        local i = 4 * j + 2 * r
        vals[j] = b:from_f32_vec({ ov[i + 1]:get() * inv, ov[i + 2]:get() * inv }, spec.out)
      end
      b:if_(live, function()
        for j = 0, spec.vdim // 8 - 1 do b:store_vec(orow + j * 8, vals[j], { align = 2 * ob }) end
      end)
      local m_use = b:select(b:eq(mv[r]:get(), NEG_INF), 0.0, mv[r]:get())
      local lse = b:select(empty_row, POS_INF, (m_use + b:lg2_approx(lsum)) * (1.0 / LOG2E))
      local idx = keys.lse_index(b, spec, p, bz, h, row)
      b:if_(b:and_(b:and_(live, b:eq(q, 0)), b:not_(b:is_null(p.lse))), function() b:store(p.lse + idx, lse) end)
      ::continue::
    end
  end)
end

return M
