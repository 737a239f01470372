-- templates/lib/attn_wgmma_paged.lua - the paged KV cache (paged=true) on path=wgmma: the producer warpgroup's
-- K/V loads from the page pool into the consumers' swizzled ring.
--
-- The layout, tables and launch are lib/attn_paged.lua's (the FA2 kernel's: k/v [num_blocks, page_size, heads_kv,
-- d] pages, block_table, cache_seqlens, optional cache_batch_idx / cache_leftpad); the launch description is that
-- kernel's plus one tensor map, over q (K and V have none). attn_wgmma_keys.lua calls params/setup/launch,
-- attn_wgmma.lua calls maps, share/store/reload (the consumers' key count), full_count and produce.
--
-- Why cp.async and not TMA (docs/hopper.md "Paged KV on path=wgmma"): a key tile is BN keys from cache position
-- leftpad + BN t. A TMA box over the page pool holds a tile only when page_size % BN == 0 and leftpad % BN == 0;
-- smaller boxes per page (the 128B swizzle's 1024-byte atom is 8 rows) still straddle a page whenever leftpad is not
-- a multiple of 8, and every box reads whole rows past cache_seqlens (in the last page: memory the cache does not
-- define, and a NaN there times P = 0 is NaN in O) where TMA fills zeros only past the pool's bounds. The producer's
-- 128 threads instead copy each key row from its own page with cp.async, zero-filled past the sequence's keys, into
-- the same 128B-swizzled layout a TMA box writes (16-byte chunk c of row r at chunk c ^ (r % 8)): any page size the
-- FA2 launch takes, any leftpad, exact zeros past the end; FlashAttention-3 does the same for pages that are not one
-- key tile. The tile is the dense kernel's (lib/attn_wgmma_tiles.lua: 128 keys at d128, 32 on some of d256's, else
-- 64; the producer's setmaxnreg 40, not the TMA producer's 24, but on d256's 64-key tiles): 64 rows a pass of the 128 threads, two threads a row (a 128-key tile takes two passes), or at
-- 32 keys 32 rows and four threads a row; each copies its row's chunks t, t + tpr, ... of every 64-column panel of K
-- and V. A padded head dim (lib/attn_wgmma_dims.lua: d32, d96, 40-56, 72-120, 136-248) copies the panels holding
-- real columns, and its chunks past head_dim (K) or v_head_dim (V) are zero-filled (cp.async with no source bytes),
-- as the dense kernel's TMA fills a box past the map's columns. A tile costs 1 block-table load a pass and BN / 8
-- cp.async a thread per 64 columns of K and V (d128 at 128 keys: 2 loads, 32 copies), then cp.async.wait_group,
-- fence.proxy.async (the copies are generic-proxy writes; wgmma reads through the async proxy) and one arrival on
-- the stage's full barrier, which counts the 128 producer threads.
local paged = require("lib.attn_paged")

local M = {}

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

-- The entry's key count p.seq_k is loaded from global memory (cache_seqlens - leftpad), so every bound derived from it
-- is a register value (the dense kernel's come from parameters, which ptxas re-reads from the constant bank).
-- Computed before the producer / consumer branch, they live across the producer's region and its few registers, and
-- ptxas spilled one (the block's tile count) at the consumers' setmaxnreg: 4-12 bytes at d128 and d200-248 with
-- split-KV. So thread 0 stores seq_k in a shared slot before the block's first barrier, and the consumers load it
-- after their setmaxnreg and derive their bounds there (attn_wgmma.lua's key_range again).
-- share: the slot (nil without paged); store: thread 0's store (before the barrier); reload: the consumers' load into
-- p.seq_k, true when the bounds must be derived again.
function M.share(b, spec, p) return spec.paged and b:shared("f32", 1, 4) or nil end

function M.store(b, spec, p, slot)
  if slot then b:store(slot, b:from_bits(p.seq_k)) end
end

function M.reload(b, spec, p, slot)
  if not slot then return false end
  p.seq_k = b:bits(b:load(slot))
  return true
end

-- The arrivals a stage's full barrier counts: the TMA thread's (1, with the stage's bytes), or the 128 producer
-- threads' once their copies landed.
function M.full_count(spec) return spec.paged and 128 or 1 end

-- The producer warpgroup's K/V ring over pages (every producer thread runs it; paged=true only). a: { wg, t0, ntiles,
-- ns, nc, bn, panels, sk, sv, full, empty, hkv } as attn_wgmma.lua's build has them (bn: keys a tile, 32, 64 or 128).
function M.produce(b, spec, p, a)
  if not spec.paged then return end
  local BN = a.bn
  local R = math.min(BN, 64)   -- key rows a pass of the 128 threads copies (a 128-key tile takes two passes)
  local tpr = 128 // R         -- threads a row: 2 (64 and 128 keys), 4 (32)
  local n = 8 // tpr           -- rows a quarter-warp (8 lanes: one 128-byte wavefront of 16-byte copies)
  local KPANEL = BN * 64       -- elements of one d/64 panel of a stage (BN rows of 128 bytes)
  local pt = b:tid() - 128 * a.nc
  -- thread u * tpr + c0 copies key row r of each pass, chunks tpr i + c0 of each 64-column panel (the tpr threads of
  -- a row read its 32-byte sectors whole). r gives the n rows of a quarter-warp distinct (r % 8) // tpr, so their
  -- chunks (tpr i + c0) ^ (r % 8) are 8 distinct ones: 0 bank conflicts (with r = u at 64 keys, rows r and r ^ 1
  -- collided: 8 wavefronts a copy, not 4).
  local u, c0 = pt // tpr, pt % tpr
  local r = (u // 8) * 8 + (u % n) * tpr + (u // n) % tpr
  local y8 = (c0 ~ (r % 8)) * 8 -- (chunk tpr i + c0 lands at chunk (tpr i) ^ c0 ^ (r % 8))
  local h64 = b:i64(a.hkv)
  local never = b:ne(b:i32(0), 0)
  -- chunk group i of panel j of a dim-wide row (head_dim is a multiple of 8: a chunk is all real or all past it), into
  -- dst from the row at rp: copied where the key is live, zero-filled past the row's real columns, as the dense
  -- kernel's TMA box fills them (K: Q K^T's last k-step reads 8 of them when head_dim % 16 == 8; V: its zeros give O
  -- columns that are not stored, where stale bits could hold NaN)
  local function copy(dst, rp, live, j, i, dim)
    local left = dim // 8 - 8 * j - tpr * i -- (the row's real chunks from the group's first)
    local src = rp + (8 * tpr * i + 64 * j)
    if left <= 0 then return b:cp_async(dst, src, { pred = never }) end
    b:cp_async(dst, src, { pred = left >= tpr and live or b:and_(live, b:lt(c0, left)) })
  end
  b:for_(0, a.ntiles, 1, function(k)
    local s = k % a.ns
    b:if_(b:ge(k, a.ns), function() b:mbarrier_wait(a.empty + 2 * s, (k // a.ns + 1) % 2) end)
    for pass = 0, BN // R - 1 do
      local key = (a.t0 + k) * BN + (pass * R + r)
      local live = b:lt(key, p.seq_k)
      local pos = b:select(live, key, 0) + p.paged_lp
      local page = b:i64(b:load(p.paged_row + b:i64(pos // p.page_size), { pred = live }))
      local row = b:i64(pos % p.page_size)
      local kp = p.k + page * p.stride_kb + row * p.stride_ks + h64 * p.stride_kh + c0 * 8
      local vp = p.v + page * p.stride_vb + row * p.stride_vs + h64 * p.stride_vh + c0 * 8
      local rowbase = (pass * R + r) * 64
      -- K's panels holding head_dim's columns, V's holding v_head_dim's (lib/attn_wgmma_dims.lua)
      for j = 0, math.max(spec.qp, spec.vp) - 1 do
        local base = (s * a.panels + j) * KPANEL + rowbase
        for i = 0, 8 // tpr - 1 do
          local at = base + (y8 ~ (8 * tpr * i))
          if j < spec.qp then copy(a.sk + at, kp, live, j, i, spec.dim) end
          if j < spec.vp then copy(a.sv + at, vp, live, j, i, spec.vdim) end
        end
      end
    end
    b:cp_async_commit()
    b:cp_async_wait(0)
    b:fence_proxy_async()
    b:mbarrier_arrive(a.full + 2 * s)
  end)
end

return M
