-- templates/lib/attn_wgmma_keys.lua - the keys of path=wgmma's attention forward beyond the dense problem:
-- where the producer's TMA boxes start, which keys a block sees and where the epilogue writes (varlen today).
--
-- attn_wgmma.lua calls these hooks (declare, the start of build, each TMA coordinate, the lse index, the
-- launch's maps); with none of the keys on they give the dense kernel's values unchanged.
--
-- varlen=true (lib/attn_varlen.lua's layout and launch: q, o [total_q, heads_q, d], k, v [total_k, heads_kv, d],
-- cu_seqlens_q/k, seqused_k, lse [heads_q, total_q]; grid z the sequence): ONE tensor map per tensor over the
-- packed [total, heads, d] tensor (box 64 rows x 1 head x 64 columns), the box's row the sequence's first row plus
-- the tile's. A box reaching past the sequence's end brings the next sequence's rows (TMA fills zeros only past
-- the tensor's own bounds): those keys are masked by the sequence's seq_k (the tail tile keeps the per-key
-- compare, attn_wgmma.lua's loop split), those query rows are computed but never stored. Why not one map per
-- sequence (FA3's other choice): cu_seqlens lives on the device, so the host could only encode per-sequence
-- maps after reading it back (a sync per launch) or the kernel would have to write maps itself
-- (tensormap.replace, a fence per map); the masking costs nothing the tail tile did not already pay.
--
-- splitkv=true (the FA2 kernel's split-KV launch: no o, the f32 workspace ws, the scalar splits, then
-- attention_combine): the block's key tiles [t0, t_end) (causal/window bounds as without splits) are cut in
-- `splits` equal runs; split s takes run s, its rows' O / l (f32) and base-2 log-sum-exp m + log2 l (-inf when
-- the run saw no key of the row) go to ws[s][row][d] and ws[splits * rows * d + s * rows + row] with row =
-- (batch * heads_q + head) * seq_q + query, the layout attention_combine merges. Geometry: the FA2 split kernel's,
-- GQA packed (lib/attn_wgmma_gqa.lua): a block's 128 rows are the (query head of the group, query) pairs of one kv
-- head, staged by the producer's threads; grid x the split, grid y = kv head x packed-row blocks.
-- dropout=true (lib/attn_dropout.lua, the FA2 kernel's Philox 4x32-10 mask): the S fragment of a consumer thread
-- holds, per 8 keys, rows g and g + 8 x keys 2q and 2q + 1 — the mma.sync C fragment attn_dropout's counter is laid
-- out for — so one Philox call per 8 keys gives the same bits as the FA2 kernel for the same seed and offset
-- (counted within the sequence under varlen); P is dropped after the row sums (m, l, lse are the undropped P's) and
-- O scaled by 1 / (1 - p) at the end.
local varlen = require("lib.attn_varlen")
local dropout = require("lib.attn_dropout")
local wpaged = require("lib.attn_wgmma_paged")
local gqa = require("lib.attn_wgmma_gqa")

local M = {}

local NEG_INF = -math.huge

-- The keys this module builds on path=wgmma (attn_wgmma.lua's not_covered lets them through; paged=true:
-- lib/attn_wgmma_paged.lua; append=true comes through to be refused by not_built with its reason).
M.KEYS = { varlen = true, splitkv = true, dropout = true, paged = true, append = true }

-- Why a spec with these keys is not built (nil when it is). (dropout at head_dim 256 is built on 32-key tiles:
-- lib/attn_wgmma_tiles.lua; on 64 ptxas spilled 88-136 bytes.)
function M.not_built(spec)
  if spec.append then
    return "append=true (the FA2 kernel writes the new keys into the pages and reads them back in one launch; path=wgmma's producer reads the cache only)"
  end
  return nil
end

-- The config's split-KV fields: the grid is the launch's problem (grid tile 1), attention_combine runs after.
function M.config(spec, cfg)
  if not spec.splitkv then return cfg end
  cfg.grid_tile = { 1, 1, 1 }
  cfg.then_spec = string.format("attention_combine out=%s head_dim=%d", spec.out, spec.vdim or spec.head_dim) -- (O's real width)
  return cfg
end

-- The kernel's parameter list: the dense one with its strides, made varlen's (no seq_q / seq_k, no batch
-- strides; cu_seqlens_q, cu_seqlens_k, seqused_k, total_q) or split-KV's (no o nor its strides, lse's place
-- taken by the workspace ws, splits). Called before the tensor maps are added.
function M.params(spec, params)
  if spec.splitkv then
    local out = {}
    for _, prm in ipairs(params) do
      if prm[1] == "lse" then out[#out + 1] = { "ws", "ptr", "f32" }
      elseif prm[1] ~= "o" and not prm[1]:match("^stride_o") then out[#out + 1] = prm end
    end
    out[#out + 1] = { "splits", "i32" }
    return wpaged.params(spec, out)
  end
  return wpaged.params(spec, dropout.params(spec, varlen.params(spec, params, true, true)))
end

-- The parameters as the body reads them: with varlen, sequence ctaid.z's lengths and first rows (the block
-- leaves at once when its first query row is past the sequence's end: before any barrier); with split-KV the
-- block's kv head, packed-row block (qblock; nil otherwise: ctaid.x) and split (lib/attn_wgmma_gqa.lua).
function M.bind(b, spec, p, rows_per_block)
  wpaged.setup(b, spec, p) -- (paged=true: p.seq_k the batch entry's key count)
  if spec.splitkv then return gqa.bind(b, spec, p, rows_per_block) end -- (the packed rows: lib/attn_wgmma_gqa.lua)
  return varlen.bind(b, spec, p, rows_per_block)
end

-- The key tiles the block visits: [t0, t_end), split-KV's run of them.
function M.key_range(b, spec, p, t0, t_end)
  if not spec.splitkv then return t0, t_end end
  local n = b:max(t_end - t0, 0)
  local per = (n + (p.splits - 1)) // p.splits
  local lo = t0 + b:min(p.split * per, n)
  return lo, b:min(lo + per, t0 + n)
end

-- split-KV's epilogue of one row (live: inside seq_q; lead: the thread that writes lse): o(j) the f32 pair of
-- columns 8j + 2q, +1 this thread holds (already divided by l), lsum the row's l, mrow its running max (base 2).
function M.split_store(b, spec, p, bz, h, row, q, live, lead, o, lsum, mrow)
  local d = spec.vdim or spec.head_dim -- (ws rows are v_head_dim wide, not the tiles' padded width)
  local total = b:i64(p.batch) * b:i64(p.heads_q) * b:i64(p.seq_q)
  local idx = (b:i64(bz) * b:i64(p.heads_q) + b:i64(h)) * b:i64(p.seq_q) + b:i64(b:select(live, row, 0))
  local slot = b:i64(p.split) * total + idx
  local at = p.ws + slot * d + q * 2
  b:if_(live, function()
    for j = 0, d // 8 - 1 do b:store_vec(at + j * 8, o(j), { align = 8 }) end
  end)
  local m_use = b:select(b:eq(mrow, NEG_INF), 0.0, mrow)
  local lse2 = b:select(b:le(lsum, 0.0), NEG_INF, m_use + b:lg2_approx(lsum))
  b:if_(b:and_(live, lead), function() b:store(p.ws + (b:i64(p.splits) * total * d + slot), lse2) end)
end

-- dropout=true: the per-launch values (nil without dropout), emitted once in the consumer's prologue.
function M.dropout_setup(b, spec, p) return dropout.setup(b, spec, p) end

-- dropout=true: P (P[0 .. BN/2 - 1], the S fragment's layout) of query row `row` (rows row and row + 8, within the
-- sequence) and keys key + 8j, +1 (j = 0 .. nt - 1) of head h, the dropped entries zeroed (the mask stored with
-- dropout_mask=true).
function M.drop(b, spec, d, h, row, key, P, nt)
  if not d then return end
  local frag = {}
  for j = 0, nt - 1 do frag[j] = { P[4 * j], P[4 * j + 1], P[4 * j + 2], P[4 * j + 3] } end
  dropout.fragments(d, b:ctaid("z"), h, row, key, frag, nt)
  for j = 0, nt - 1 do
    for e = 1, 4 do P[4 * j + e - 1] = frag[j][e] end
  end
end

-- The launch: paged's maps (split-KV's is attention.lua's FA2 split launch as it stands: ws, splits, the grid
-- {splits, heads_kv x cdiv(G seq_q, 128), batch}, attention_combine after).
function M.launch(spec, cfg, l)
  return wpaged.launch(spec, l)
end

-- TMA coordinates (innermost first) of a box: column col, head h, row `row` of the sequence (query rows for q,
-- key rows for k and v), batch entry bz.
function M.q_coord(b, spec, p, col, h, row, bz)
  if spec.varlen then return { col, h, p.q_at + row } end
  return { col, h, row, bz }
end

function M.kv_coord(b, spec, p, col, h, row, bz)
  if spec.varlen then return { col, h, p.k_at + row } end
  return { col, h, row, bz }
end

-- The lse index (i64) of query row `row` of head h, batch entry bz: [batch, heads_q, seq_q], varlen
-- [heads_q, total_q].
function M.lse_index(b, spec, p, bz, h, row)
  if spec.varlen then return p.rows(h) + b:i64(row) end
  return (b:i64(bz) * b:i64(p.heads_q) + b:i64(h)) * b:i64(p.seq_q) + b:i64(row)
end

-- The box of a map over tensor t (one per dim, outermost first, as the launch description names them).
function M.box(spec, t)
  if spec.varlen then return { 64, 1, 64 } end
  return { 1, 64, 1, 64 }
end

return M
