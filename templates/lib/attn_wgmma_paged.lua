-- templates/lib/attn_wgmma_paged.lua - the paged KV cache (paged=true) on path=wgmma: the producer warpgroup's
-- K/V loads from the page pool into the consumers' swizzled ring.
--
-- The layout, tables and launch are lib/attn_paged.lua's (the FA2 kernel's: k/v [num_blocks, page_size, heads_kv,
-- d] pages, block_table, cache_seqlens, optional cache_batch_idx / cache_leftpad); the launch description is that
-- kernel's plus one tensor map, over q (K and V have none). attn_wgmma_keys.lua calls params/setup/launch,
-- attn_wgmma.lua calls maps, full_count and produce.
--
-- Why cp.async and not TMA (docs/hopper.md "Paged KV on path=wgmma"): a key tile is 64 keys from cache position
-- leftpad + 64 t. A 64-row TMA box over the page pool holds a tile only when page_size % 64 == 0 and leftpad % 64
-- == 0; smaller boxes per page (the 128B swizzle's 1024-byte atom is 8 rows) still straddle a page whenever leftpad
-- is not a multiple of 8, and every box reads whole rows past cache_seqlens (in the last page: memory the cache
-- does not define, and a NaN there times P = 0 is NaN in O) where TMA fills zeros only past the pool's bounds. The
-- producer's 128 threads instead copy each key row from its own page with cp.async, zero-filled past the
-- sequence's keys, into the same 128B-swizzled layout a TMA box writes (16-byte chunk c of row r at chunk c ^ (r %
-- 8)): any page size the FA2 launch takes, any leftpad, exact zeros past the end; FlashAttention-3 does the same
-- for pages that are not one key tile. Producer thread pt copies key row pt / 2 of each tile, 16-byte chunks pt % 2
-- + 2m (m = 0..3) of every 64-column panel of K and V: 1 block-table load and 8 d/64 cp.async a tile (d128: 16), then
-- cp.async.wait_group, fence.proxy.async (the copies are generic-proxy writes; wgmma reads through the async
-- proxy) and one arrival on the stage's full barrier, which counts the 128 producer threads.
local paged = require("lib.attn_paged")

local M = {}

local BN = 64          -- keys per tile (attn_wgmma.lua's)
local PANEL = 64 * 64  -- elements of one 64 x 64 panel

-- The kernel's parameters: the FA2 paged kernel's (no seq_k; the tables, page_size, max_blocks).
function M.params(spec, params) return paged.params(spec, params) end

-- Emitted before anything reads p.seq_k: the batch entry's block-table row, leftpad and key count.
function M.setup(b, spec, p) paged.setup(b, spec, p) end

-- The launch's maps (attn_wgmma.lua's l.tmaps): only q's; K and V are copied from the pages.
function M.launch(spec, l)
  if not spec.paged then return l end
  local keep = {}
  for _, m in ipairs(l.tmaps) do
    if m[2] ~= "k" and m[2] ~= "v" then keep[#keep + 1] = m end
  end
  l.tmaps = keep
  return l
end

-- The kernel's parameter list without tm_k and tm_v when paged (K and V have no map).
function M.maps(spec, params)
  if not spec.paged then return params end
  local keep = {}
  for _, prm in ipairs(params) do
    if prm[1] ~= "tm_k" and prm[1] ~= "tm_v" then keep[#keep + 1] = prm end
  end
  return keep
end

-- The arrivals a stage's full barrier counts: the TMA thread's (1, with the stage's bytes), or the 128 producer
-- threads' once their copies landed.
function M.full_count(spec) return spec.paged and 128 or 1 end

-- The producer warpgroup's K/V ring over pages (every producer thread runs it; paged=true only). a: { wg, t0, ntiles,
-- ns, nc, panels, sk, sv, full, empty, h } as attn_wgmma.lua's build has them.
function M.produce(b, spec, p, a)
  if not spec.paged then return end
  local pt = b:tid() - 128 * a.nc
  -- thread pair u = pt / 2 copies key row r of each tile, chunks 2i + c0 (i = 0..3: a pair reads a row's 32-byte
  -- sectors whole). r puts rows of one parity in each quarter-warp (a 128-byte wavefront of 16-byte copies): the
  -- 8 lanes then write 8 distinct swizzled chunks (2i + c0) ^ (r % 8); with r = u, rows r and r ^ 1 collided (8
  -- wavefronts a copy, not 4).
  local u, c0 = pt // 2, pt % 2
  local r = (u // 8) * 8 + (u % 4) * 2 + (u // 4) % 2
  local rowbase = r * 64
  local y8 = (c0 ~ (r % 8)) * 8
  local h64 = b:i64(a.hkv)
  b:for_(0, a.ntiles, 1, function(k)
    local s = k % a.ns
    b:if_(b:ge(k, a.ns), function() b:mbarrier_wait(a.empty + 2 * s, (k // a.ns + 1) % 2) end)
    local key = (a.t0 + k) * BN + r
    local live = b:lt(key, p.seq_k)
    local pos = b:select(live, key, 0) + p.paged_lp
    local page = b:i64(b:load(p.paged_row + b:i64(pos // p.page_size), { pred = live }))
    local row = b:i64(pos % p.page_size)
    local kp = p.k + page * p.stride_kb + row * p.stride_ks + h64 * p.stride_kh + c0 * 8
    local vp = p.v + page * p.stride_vb + row * p.stride_vs + h64 * p.stride_vh + c0 * 8
    for j = 0, a.panels - 1 do
      local base = (s * a.panels + j) * PANEL + rowbase
      for i = 0, 3 do
        local at = base + (y8 ~ (16 * i))
        b:cp_async(a.sk + at, kp + (16 * i + 64 * j), { pred = live })
        b:cp_async(a.sv + at, vp + (16 * i + 64 * j), { pred = live })
      end
    end
    b:cp_async_commit()
    b:cp_async_wait(0)
    b:fence_proxy_async()
    b:mbarrier_arrive(a.full + 2 * s)
  end)
end

return M
