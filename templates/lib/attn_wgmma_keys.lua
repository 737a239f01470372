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
local varlen = require("lib.attn_varlen")

local M = {}

-- The keys this module builds on path=wgmma (attn_wgmma.lua's not_covered lets them through).
M.KEYS = { varlen = true }

-- The kernel's parameter list: the dense one with its strides, made varlen's (no seq_q / seq_k, no batch
-- strides; cu_seqlens_q, cu_seqlens_k, seqused_k, total_q). Called before the tensor maps are added.
function M.params(spec, params)
  return varlen.params(spec, params, true, true)
end

-- The parameters as the body reads them: with varlen, sequence ctaid.z's lengths and first rows (the block
-- leaves at once when its first query row is past the sequence's end: before any barrier).
function M.bind(b, spec, p, rows_per_block)
  return varlen.bind(b, spec, p, rows_per_block)
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
