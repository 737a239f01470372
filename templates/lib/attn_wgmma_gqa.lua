-- templates/lib/attn_wgmma_gqa.lua - GQA packing of path=wgmma's split-KV forward: a block's rows are the (query
-- head of the group, query) pairs of one kv head, staged into Q's panels by the producer warpgroup's threads.
--
-- splitkv=true on path=wgmma (decoding): the group G = heads_q / heads_kv is a launch value (heads are runtime
-- arguments), so the packing is too: no spec key, any G. The geometry is the FA2 split kernel's
-- (attention.lua's geometry and launch): grid x the split, grid y = kv head x mblocks + query block with mblocks =
-- cdiv(G seq_q, rows a block), packed row pr = hl seq_q + sq (hl the head within the group, sq the query), its
-- head hkv G + hl. One K/V stream then serves the G heads: at seq_q 1 a block's 128 rows hold G real rows, not 1.
--
-- Why the producer's threads and not a TMA box over the heads: a box's extents are fixed when the runtime encodes the
-- map, so a box of 64 / G queries x G heads would need G in the spec (one kernel per group size, and the caller's
-- heads checked against it), and G must divide 64; the rows copied by thread are right for any G and seq_q. Q is
-- read once a block (d x 2 bytes a row), so the copies cost nothing next to the key tiles. Producer thread pt
-- copies packed row pt (warpgroup pt / 64's panel row pt % 64) with cp.async, 16 bytes a chunk, chunk c of panel
-- row r at c ^ (r % 8) (the 128B swizzle a TMA box writes: 8 consecutive rows of one chunk land on 8 distinct
-- chunks, no bank conflict), zero-filled past the block's G seq_q rows and past head_dim (a padded dim: only the
-- panels holding real columns, lib/attn_wgmma_dims.lua); then cp.async.wait_group 0,
-- fence.proxy.async (wgmma reads the panels through the async proxy) and one arrival each on qbar (count 128).
-- The tensor map over q stays in the launch (unused here), so every caller binds the kernel as before.
--
-- Each consumer row carries its own head (ALiBi's slope; the split epilogue's O / lse slot follows from the packed
-- row: first_head) and query position (the causal / window bounds, the ALiBi distance); a block's key range covers
-- the query positions its rows hold.
-- Dropout never meets this (split-KV refuses it: lib/attn_dropout.lua).
local M = {}

local PANEL = 64 * 64 -- elements of one 64 x 64 panel

-- Whether the block's rows are packed (split-KV on path=wgmma).
function M.on(spec) return spec.splitkv == true end

-- The arrivals Q's barrier counts: the producer warpgroup's 128 threads when they stage Q, else the TMA's thread.
function M.q_count(spec) return M.on(spec) and 128 or 1 end

-- keys.bind's split-KV geometry: p.split (grid x), p.hkv and p.qblock (grid y), p.group, p.mrows (the G seq_q packed
-- rows of a kv head); rows: a block's rows.
function M.bind(b, spec, p, rows)
  p.group = p.heads_q // p.heads_kv
  p.mrows = p.group * p.seq_q
  local mblocks = (p.mrows + (rows - 1)) // rows
  local y = b:ctaid("y")
  p.hkv = y // mblocks
  p.qblock = y - p.hkv * mblocks
  p.split = b:ctaid("x")
  return p
end

-- Query position and head of block row `row` (packed: row pr of the kv head's G seq_q, clamped to 0 past them so
-- a slope's load stays inside the tensor; else the row itself and the block's head h).
function M.row(b, spec, p, row, h)
  if not M.on(spec) then return row, h end
  local pr = b:select(b:lt(row, p.mrows), row, 0)
  local hl = pr // p.seq_q
  return pr - hl * p.seq_q, p.hkv * p.group + hl
end

-- The head whose query row 0 is the block's row 0 (packed: the group's first head, its G seq_q rows the kv head's
-- packed rows in order: slot (batch heads_q + first head) seq_q + pr is row pr's head and query in the split
-- workspace, so the epilogue holds no per-row head), else h.
function M.first_head(spec, p, h)
  if not M.on(spec) then return h end
  return p.hkv * p.group
end

-- The query positions [first, last] rows lo .. lo + n - 1 of the block hold (packed: their own span when they lie in
-- one head's run of seq_q rows, else every position; whole: every position, the consumer warpgroups' loop split,
-- where the exact span spilled 4 bytes at d128 paged with every mask key).
function M.positions(b, spec, p, lo, n, whole)
  if not M.on(spec) then return lo, b:min(lo + (n - 1), p.seq_q - 1) end
  if whole then return b:i32(0), p.seq_q - 1 end
  local hi = b:min(lo + (n - 1), p.mrows - 1)
  local h0, h1 = lo // p.seq_q, b:max(hi, 0) // p.seq_q
  local one = b:eq(h0, h1)
  return b:select(one, lo - h0 * p.seq_q, 0), b:select(one, hi - h1 * p.seq_q, p.seq_q - 1)
end

-- Producer (every thread of the producer warpgroup; nothing without packing): stages the block's Q rows into the
-- panels at sq and arrives on qbar. a: nc, panels, q0 (the block's first packed row), sq, qbar.
function M.stage_q(b, spec, p, a)
  if not M.on(spec) then return end
  local pt = b:tid() - 128 * a.nc
  local row = a.q0 + pt
  local live = b:lt(row, p.mrows)
  local sqp, head = M.row(b, spec, p, row, nil)
  local src = p.q + b:i64(b:ctaid("z")) * p.stride_qb + b:i64(head) * p.stride_qh + b:i64(sqp) * p.stride_qs
  local r = pt % 64
  local dst = a.sq + (pt // 64) * (a.panels * PANEL) + r * 64
  local y = r % 8
  local dim = spec.dim or spec.head_dim
  local past = b:ne(b:i32(0), 0) -- (false: a chunk past head_dim is zero-filled, as TMA fills a box past the map)
  for j = 0, (spec.qp or a.panels) - 1 do -- (the panels holding real columns: lib/attn_wgmma_dims.lua)
    for c = 0, 7 do
      local real = 64 * j + 8 * c < dim -- (head_dim is a multiple of 8: a chunk is all real or all past it)
      b:cp_async(dst + (j * PANEL + (y ~ c) * 8), src + (64 * j + 8 * c), { pred = real and live or past })
    end
  end
  b:cp_async_commit()
  b:cp_async_wait(0)
  b:fence_proxy_async()
  b:mbarrier_arrive(a.qbar)
end

return M
