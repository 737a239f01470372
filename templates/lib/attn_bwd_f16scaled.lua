-- templates/lib/attn_bwd_f16scaled.lua - the bf16 attention backward on sm_75's f16 tensor cores through exact power-of-two scaling.
--
-- The forward's scheme (lib/attn_f16scaled.lua) carried to the five products of the backward
-- (lib/attn_bwd_mma.lua's kernels, which call in here where cfg.f16s is set; no bf16 instruction):
--   Operands from memory: every staged row of Q, dO (per query row), K and V (per key row) is
--     multiplied by its own power of two 2^h that puts the row's largest finite |x| in f16's top
--     binade [2^15, 2^16) and rounded to f16 (exact: bf16's 8 bits fit f16's 11 for every value
--     whose scaled exponent is at least -17, i.e. within 2^32 of its row's largest); 2^-h goes to a
--     shared f32 slot per row (load).
--   S = Q K^T, dP = dO V^T (contraction over head_dim): the f32 results carry 2^(hq + hk) and
--     2^(ho + hv), undone per entry by the two rows' factors before the softmax (fold).
--   dV += P^T dO, dK += dS^T Q, dQ += dS K (contraction over queries or keys): the B operand's row
--     factor goes onto the A operand's column (exact: a power of two), then each A row (a key of dK
--     and dV, a query of the deterministic dQ) takes a running power of two 2^-c that keeps its
--     largest |a| seen so far in [2^14, 2^15) (f16's top is 65504: an f32 in [2^15, 2^16)
--     could round to Inf) before the f16 rounding; the row's f32 accumulators hold the sum times
--     2^-c and are multiplied by 2^(c_old - c_new) when a tile raises c (a rare branch), so the
--     result is acc 2^c (scale_a, factor).
--   The atomic dQ's dS tile goes through shared memory: each query row's largest |dS K-factor| over
--     the block's 64 keys (a slot per warp, one more barrier) picks its power of two, and that
--     tile's dQ product is multiplied back before the f32 atomics (ds_rows, dq_factor).
-- Non-finite values (Inf, NaN) take no part in choosing a staged row's scale (an A row's counts Inf: INF
-- below) and stay what they are, so they propagate as on the SIMT path. Rows past the sequence are
-- staged as zeros.
--
-- Error (docs/attention.md, "bf16 on Turing"): each product term is exact but for the A operand's
-- rounding to f16 (2^-11 relative), A entries more than 2^-39 below their row's largest seen
-- (f16's subnormals; 2^-40 of the row max absolute), and B entries more than 2^32 below their own
-- row's largest (lost). The sm_80 bf16 path rounds P and dS to bf16 (2^-8 relative).
local f16s = require("lib.attn_f16scaled")
local util = require("lib.util")

local M = {}

local ATOP = 14 -- an A row's largest |a| is scaled into [2^ATOP, 2^(ATOP + 1))
-- INF: an A row's maximum counts Inf (two instructions an entry instead of four): a row holding an Inf makes
-- every output of its row Inf or NaN (Inf times each column of B), so its finite entries may be lost; its
-- exponent is then 128 - ATOP, which keeps every factor below normal f32's range limits. The staged B rows
-- (load) take finite maxima: an Inf there reaches only its own column's outputs.
local CMIN = f16s.FLOOR - ATOP -- the running exponent's start (a row of zeros keeps it)
local EXACT = -17 -- a bf16 value scaled to at least 2^EXACT is exact in f16 (8 significant bits)

-- Whether this spec is bf16 on a target whose tensor cores take f16 only (sm_75).
function M.applies(spec, target)
  return spec.dtype == "bf16" and not target.mma_m16n8k16 and target.mma_m16n8k8_f16 and target.ldmatrix
end

-- Whether dkdv / dq run here (attn_bwd_mma.available's answer for bf16 on sm_75, after its refusals by register
-- count): under path=mma every head_dim <= 128, out = dtype (checked before); under path=auto only where the kernel
-- holds the bf16 path's bound for rows spanning more than 2^32 (holds, below; the others run SIMT). With or
-- without varlen and dropout. Varlen: the workspace rows below are indexed as delta's (row_index: [heads_q,
-- total_q] packed), K/V's as lib/attn_bwd_kvscaled.lua's [heads_kv, total_k]; rows and keys past a sequence
-- are staged as zeros, so they raise no row's maximum and no running exponent. Dropout: P's kept entries
-- times 1/(1 - p) (one f32 rounding, as the SIMT path's) before scale_a picks the key row's power of two, the
-- dropped ones exactly 0; dS = P (dP Z - delta) as every path's.
function M.serves(spec, target, available)
  -- (the atomic dkdv at head_dim 128 accumulates dV and dK in two passes: lib/attn_bwd_f16scaled_d128.lua)
  if spec.path == "mma" then return true end
  return M.holds(spec, target, available)
end

-- The shared f32 arrays this path adds (name, count): the row factors of the staged tiles, and for the
-- atomic dQ the per-warp row maxima and the rows' dQ factors.
function M.floats(spec, cfg)
  local bm, bn = cfg.block_m, cfg.block_n
  local t = { { "qf", bm }, { "of", bm }, { "kf", bn }, { "vf", bn } }
  if spec.kernel == "dkdv" and not spec.deterministic then
    t[#t + 1] = { "rmax", 4 * bm }
    t[#t + 1] = { "dqf", bm }
  end
  return t
end
function M.float_bytes(spec, cfg)
  local n = 0
  for _, f in ipairs(M.floats(spec, cfg)) do n = n + f[2] end
  return 4 * n + 16
end

-- Walks this thread's items of rows [row0, row0 + rows) of a bf16 [seq, d] slice (src, row stride `stride`)
-- for a block of `threads`: a row's 8-element chunks go to `slots` consecutive lanes (the power of two >= d / 8;
-- d96's 12 chunks take 16 lanes), so the row's maximum is a butterfly inside the group. Rows past seq, chunks
-- past spec.dim (a padded head_dim) and the extra slots read chunk 0 of row 0 and count as zeros. Calls
-- fn(r, c, live, v, rmax) per item: row r, chunk c, live (nil: always; else whether the item exists), the 8
-- values v and the row's largest finite |x| rmax.
function M.row_items(b, spec, threads, src, stride, row0, rows, seq, fn)
  local cpr, real_cpr = spec.head_dim // 8, (spec.dim or spec.head_dim) // 8
  local slots = 1
  while slots < cpr do slots = slots * 2 end
  local tid = b:tid()
  local n = rows * slots
  for it = 0, util.ceil_div(n, threads) - 1 do
    local item = tid + it * threads
    local r, c = item // slots, item % slots
    local live = (it + 1) * threads > n and b:lt(item, n) or nil
    if slots > cpr then live = live and b:and_(live, b:lt(c, cpr)) or b:lt(c, cpr) end
    local use = b:lt(row0 + r, seq)
    if live then use = b:and_(use, live) end
    if real_cpr < cpr then use = b:and_(use, b:lt(c, real_cpr)) end
    local from = src + b:i64(b:select(use, row0 + r, 0)) * stride + b:select(use, c, 0) * 8
    local v = b:load_vec(from, 8, { align = 16 })
    local zero = b:from_f32(0.0, "bf16")
    for i = 1, 8 do v[i] = b:select(use, v[i], zero) end -- (not 0 x a value: row 0 may hold an Inf)
    local mx = f16s.local_max(b, v, b:f32(0.0))
    if slots > 1 then mx = b:warp_max(mx, slots) end
    fn(r, c, live, v, mx)
  end
end

-- Whether a staged row spans more than 2^32 (its smallest nonzero finite |x| scaled by 2^h below 2^EXACT), from
-- this item's 8 values v of the row (zeros where the item does not exist) and the row's 2^h exponent h: the
-- item's smallest, a butterfly over the row's `slots` lanes (every lane of the warp takes part). An i32 0 or 1.
function M.row_spans(b, spec, v, h)
  local cpr = spec.head_dim // 8
  local slots = 1
  while slots < cpr do slots = slots * 2 end
  local mn = b:f32(math.huge)
  for _, x in ipairs(v) do
    local a = b:abs(b:to_f32(x))
    mn = b:min(mn, b:select(b:gt(a, 0.0), a, math.huge)) -- (NaN: not above 0; Inf: never below the minimum)
  end
  if slots > 1 then mn = b:f32(0.0) - b:warp_max(b:f32(0.0) - mn, slots) end
  return b:select(b:lt((b:bits(mn) >> 23) - 127 + h, EXACT), b:i32(1), b:i32(0))
end

-- Copies rows [row0, row0 + rows) of a bf16 [seq, d] slice into the f16 tile dst (row stride ld), each
-- row times its power of two, and 2^-h of row r into fdst + r (the items of row_items). spans (dkdv's K and V
-- with the low parts, cfg.lo): returns an i32, nonzero when one of this thread's rows spans more than 2^32; with
-- marks too (the deterministic dkdv's rows for dq, cfg.kvrows), 1.0 into marks + r where row r spans more, else 0.0.
-- spans "extrema" (dq_marks_checked): returns { largest finite |x|, smallest nonzero |x| } of this thread's items, for
-- rows_span_checked.
function M.load(b, spec, cfg, threads, dst, src, stride, row0, rows, seq, fdst, spans, marks)
  if spans == "extrema" then -- (rows_span_checked's test from the staged items: this thread's largest and smallest)
    local ext = { b:f32(0.0), b:f32(math.huge) }
    M.row_items(b, spec, threads, src, stride, row0, rows, seq, function(r, c, live, v, mx)
      ext[1] = b:max(ext[1], mx)
      for _, x in ipairs(v) do
        local a = b:abs(b:to_f32(x))
        ext[2] = b:min(ext[2], b:select(b:gt(a, 0.0), a, math.huge))
      end
      local put = function()
        local h = f16s.scale_of(b, mx)
        b:store_vec(dst + r * cfg.ld + c * 8, f16s.convert(b, v, f16s.pow2(b, h)), { align = 16 })
        b:if_(b:eq(c, 0), function() b:store(fdst + r, f16s.pow2(b, -h)) end)
      end
      if live then b:if_(live, put) else put() end
    end)
    return ext
  end
  local any = spans and b:i32(0)
  M.row_items(b, spec, threads, src, stride, row0, rows, seq, function(r, c, live, v, mx)
    local h = f16s.scale_of(b, mx)
    local sp = spans and M.row_spans(b, spec, v, h)
    if spans then any = any | sp end
    local factor = f16s.pow2(b, h)
    local put = function()
      local out = f16s.convert(b, v, factor)
      b:store_vec(dst + r * cfg.ld + c * 8, out, { align = 16 })
      b:if_(b:eq(c, 0), function()
        b:store(fdst + r, f16s.pow2(b, -h))
        if marks then b:store(marks + r, b:select(b:ne(sp, 0), b:f32(1.0), b:f32(0.0))) end
      end)
    end
    if live then b:if_(live, put) else put() end
  end)
  return any
end

-- The deterministic dkdv's rows for dq (cfg.kvrows, lib/attn_bwd_kvscaled.lua write): after load staged rows
-- [row0, row0 + rows) of the bf16 slice src with 2^-h of row r in fsrc + r, 1.0 into marks + r where the row spans more
-- than 2^32 (row_spans), else 0.0, where load computed no spans (its `spans`: the dkdv's with K's and V's low parts
-- mark there). A loop over row_items' items (one item's values live at a time: marking inside load's unrolled items
-- spilled 56 bytes in the deterministic dkdv at the tile width 128 with v_head_dim 64, ptxas sm_75; the loop in the
-- width 96's, which marks in load, 40); rows past seq and chunks past spec.dim count as zeros.
function M.row_marks(b, spec, threads, src, stride, row0, rows, seq, fsrc, marks)
  local cpr, real_cpr = spec.head_dim // 8, (spec.dim or spec.head_dim) // 8
  local slots = 1
  while slots < cpr do slots = slots * 2 end
  local zero = b:from_f32(0.0, "bf16")
  b:for_(b:tid(), rows * slots, threads, function(item) -- (rows * slots: a multiple of 32, so a row's lanes share a warp)
    local r, c = item // slots, item % slots
    local use = b:and_(b:lt(row0 + r, seq), b:lt(c, real_cpr))
    local v = b:load_vec(src + b:i64(b:select(use, row0 + r, 0)) * stride + b:select(use, c, 0) * 8, 8, { align = 16 })
    for i = 1, 8 do v[i] = b:select(use, v[i], zero) end
    local h = 127 - (b:bits(b:load(fsrc + r)) >> 23) -- (2^h from 2^-h)
    local sp = M.row_spans(b, spec, v, h)
    b:if_(b:eq(c, 0), function() b:store(marks + r, b:select(b:ne(sp, 0), b:f32(1.0), b:f32(0.0))) end)
  end)
end

-- Whether any row [row0, row0 + rows) of a bf16 [seq, d] slice spans more than 2^32 (row_spans, each row's 2^h
-- from its largest finite |x| as load takes it): an i32, nonzero where one of this thread's rows does. A loop over
-- row_items' items (four items' values live at a time), for the deterministic dq kernel's block marks where load's
-- unrolled items spilled (dq_marks_looped); rows past seq and chunks past spec.dim count as zeros.
function M.rows_span(b, spec, threads, src, stride, row0, rows, seq)
  local cpr, real_cpr = spec.head_dim // 8, (spec.dim or spec.head_dim) // 8
  local slots = 1
  while slots < cpr do slots = slots * 2 end
  local zero = b:from_f32(0.0, "bf16")
  local any = b:var("i32", 0)
  -- (four items an iteration where they divide evenly: two trips a thread at the tile width 96; one an iteration fits
  -- too, eight, unrolled, spilled 8-20 bytes)
  local per = (rows * slots) % (threads * 4) == 0 and 4 or 1
  b:for_(b:tid(), rows * slots, threads * per, function(first) -- (rows * slots: a multiple of 32, so a row's lanes share a warp)
    local x = any:get()
    for u = 0, per - 1 do
      local item = first + u * threads
      local r, c = item // slots, item % slots
      local use = b:and_(b:lt(row0 + r, seq), b:lt(c, real_cpr))
      local v = b:load_vec(src + b:i64(b:select(use, row0 + r, 0)) * stride + b:select(use, c, 0) * 8, 8, { align = 16 })
      for i = 1, 8 do v[i] = b:select(use, v[i], zero) end
      local mx = f16s.local_max(b, v, b:f32(0.0))
      if slots > 1 then mx = b:warp_max(mx, slots) end
      x = x | M.row_spans(b, spec, v, f16s.scale_of(b, mx))
    end
    any:set(x)
  end)
  return any:get()
end

-- rows_span behind a test of the warp's extrema (dq_marks_checked): ext, this thread's largest finite |x| and smallest
-- nonzero |x| over its items (load's "extrema" form, which stages them), over the warp (a butterfly each), and
-- rows_span's loop only where the warp's smallest scaled by its largest's 2^h falls below 2^EXACT (a warp-uniform
-- branch). Exact: each row's lanes share a warp, its largest is at most the warp's and its smallest at least the warp's,
-- so no row of a warp that passes spans more than 2^32 (scale_of's floor taken alike). Ordinary data takes no loop:
-- the marks cost a max and a min an item inside load's staging, not rows_span's two trips of four items (reading the
-- rows again, two butterflies an item) on every block.
function M.rows_span_checked(b, spec, threads, src, stride, row0, rows, seq, ext)
  local mx = b:warp_max(ext[1], 32)
  local mn = b:f32(0.0) - b:warp_max(b:f32(0.0) - ext[2], 32)
  local any = b:var("i32", 0)
  b:if_(b:lt((b:bits(mn) >> 23) - 127 + f16s.scale_of(b, mx), EXACT), function()
    any:set(M.rows_span(b, spec, threads, src, stride, row0, rows, seq))
  end)
  return any:get()
end

-- ---- Q and dO scaled once, by prep (the workspace) ----
-- prep writes every query row of Q and dO once as f16 times its power of two (the row's largest finite
-- |x| in [2^15, 2^16), as load does) into the sequence's workspace, with 2^-h of each row, so dkdv's query
-- tiles copy f16 rows and their factors instead of scaling them again for every key block. Rows are the
-- tile width W (spec.head_dim as the builders see it, lib/attn_dims.lua / attn_vdim.lua) wide, the columns
-- past the real dim zero, at index (batch, head, row) as delta's. Workspace (f16 / f32): qh, doh [batch,
-- heads_q, seq_q, W], qsf, dosf [batch, heads_q, seq_q]. The dq kernel stages its Q and dO tile once a block
-- and keeps load.
M.WS = { { "qh", "f16" }, { "doh", "f16" }, { "qsf", "f32" }, { "dosf", "f32" } }

-- Whether prep writes the workspace above for this spec (bf16 on sm_75 with the f16-scaled tiles; varlen:
-- rows [heads_q, total_q] as delta's): prep's pointers are optional, so a dkdv that does not declare them
-- (SIMT: its register refusals, path=simt) leaves them 0 and prep skips the rows.
-- (The tile width 256 too since wave 25: the deterministic dkdv at head_dim 136-256 under path=mma reads them 256 wide,
-- lib/attn_bwd_mma.lua bf16_dkdv_split; prep's rows are a warp's, 8 values a lane there.)
function M.prep_applies(spec, target)
  return M.applies(spec, target) and spec.out == spec.dtype and (spec.head_dim <= 128 or spec.head_dim == 256)
end

-- The kernel parameters of the workspace (appended to params).
function M.ws_params(params)
  for _, w in ipairs(M.WS) do params[#params + 1] = { w[1], "ptr", w[2] } end
  return params
end

-- The launch description's workspace rows (tensors t; optional in prep), rows: { "batch", "heads_q", "seq_q" }
-- (varlen: lib/attn_varlen.lua's launch makes them [heads_q, total_q]; the f16 rows, w wide, are given so here).
function M.ws_launch(t, w, rows, optional, varlen)
  local ext = { string.format(varlen and "heads_q*total_q*%d" or "batch*heads_q*seq_q*%d", w) }
  for _, x in ipairs(M.WS) do
    t[#t + 1] = { x[1], "workspace", x[2] == "f16" and ext or rows, optional = optional or nil, align = 16 }
  end
end

-- prep: writes query row `row` (live) of one tensor: a warp, 32 lanes a row; src the row (bf16, `dim`
-- real columns), dst the workspace row (f16, w wide), fdst its factor slot. Returns whether the row spans more
-- than 2^32 (below); other (nil: none) is the same for the query row's dO row: the query row's mark, either row's,
-- goes into Q's factor (stored negative), dO's stays positive.
function M.prep_row(b, lane, live, src, dim, w, dst, fdst, other)
  local zero = b:from_f32(0.0, "bf16")
  local vals = {}
  for c = 0, w // 32 - 1 do
    local col = lane + 32 * c
    local real = dim < w and (c + 1) * 32 > dim and b:lt(col, dim) or nil
    local x = b:load(src + (real and b:select(real, col, 0) or col))
    vals[c + 1] = real and b:select(real, x, zero) or x -- (not 0 x a value: column 0 may hold an Inf)
  end
  local mx = b:warp_max(f16s.local_max(b, vals, b:f32(0.0)), 32)
  local h = f16s.scale_of(b, mx)
  local out = f16s.convert(b, vals, f16s.pow2(b, h))
  -- (the row's smallest nonzero finite |x|: a row spanning more than 2^32 is marked, its factor stored negative)
  local mn = b:f32(math.huge)
  for _, v in ipairs(vals) do
    local a = b:abs(b:to_f32(v))
    mn = b:min(mn, b:select(b:and_(b:gt(a, 0.0), b:lt(a, math.huge)), a, math.huge))
  end
  mn = b:f32(0.0) - b:warp_max(b:f32(0.0) - mn, 32)
  local marked = b:lt((b:bits(mn) >> 23) - 127 + h, EXACT)
  b:if_(live, function()
    for c = 0, w // 32 - 1 do b:store(dst + (lane + 32 * c), out[c + 1]) end
    b:if_(b:eq(lane, 0), function()
      local f = f16s.pow2(b, -h)
      b:store(fdst, other and b:select(b:or_(marked, other), b:f32(0.0) - f, f) or f)
    end)
  end)
  return marked
end

-- ---- rows spanning more than 2^32: the low parts (docs/attention-bwd-span.md) ----
-- prep marks a query row whose Q or dO row has its smallest nonzero finite |x| scaled below 2^EXACT (more than
-- 2^32 below its largest: entries f16 cannot hold exactly) by storing Q's factor negative; the dkdv kernels
-- read its magnitude. Once a head (lo_scan, outside the tile loop) a dkdv block asks whether any row it visits
-- is marked; if so every tile of that head adds each product's low part on a branch every thread of the block
-- takes (head_dim 32's and 64's blocks of one factor run such a head on the per-row body): the row's
-- x 2^h - f16(x 2^h), times 2^LO, rounded to f16 (lo_rows: from the bf16 input, into the tile `lo`), through a
-- second m16n8k8 on accumulators scaled up by 2^LO and back (exact powers of two; |acc| 2^LO stays below
-- 2^102). Entries more than 2^(32 + LO) below their row's largest remain lost. K's and V's rows: dkdv stages its
-- key block once and marks it while staging (row_spans, kv_mark: the block's answer beside the heads' scan), and a
-- marked block's tiles add K_lo Q^T to S^T, V_lo dO^T to dP^T and (atomic) dS K_lo to dQ, the tile `lo` (bn rows)
-- filled from the bf16 K and V rows inside the branch. A column where both operands' entries are low parts (K_lo
-- Q_lo, V_lo dO_lo) stays lost. The deterministic dq kernel (dq_lo_applies) marks its block's Q and dO rows while
-- staging them and fills their low parts once a marked block into two tiles (qlo, olo): S += Q_lo K^T, dP += dO_lo
-- V^T on the block-uniform branch. Its K and V rows (dq_kv_lo_applies): the deterministic dkdv marks each row it writes
-- for dq (its factor negative, lib/attn_bwd_kvscaled.lua) and a marked key tile adds dO V_lo^T to dP, Q K_lo^T to S and
-- dS K_lo to dQ, the low parts filled into the tile of V's rows once dP is done with it.
M.LO = 40

-- Whether dropout keeps the low parts out of the kernel of `spec` (dkdv or dq). Where they spill beside dropout's
-- Philox state (ptxas sm_75, 255 registers; wave 18's scan of the 309 bf16 dkdv and dq dropout variants of the full
-- matrix without varlen, and of head_dim 32-128 x causal both ways and not x none, each mask key, all three): the
-- atomic dkdv at the tile width 64 with causal=true (bottom-right) and ALiBi without softcap (12 bytes; 4 with K's and
-- V's low parts, and 4 with wave 19's packing below). (The dq kernel at the tile width 64 with a window or ALiBi, 8
-- bytes, or causal=top_left without softcap, 32: since wave 19 it re-reads its block's mark from shared memory there,
-- dq_mark_shared, 0 bytes.) (The atomic dkdv at the tile width 64 otherwise: it fit, but d64 causal's T4 estimate went
-- 1.23x -> 1.26x f16's; held since wave 19 with P^T's fragments packed where each product reads them,
-- lib/attn_bwd_mma.lua: 1.24x.) And what that scan did not measure beside dropout, taken without it by wave 18's
-- other changes: the atomic dkdv with a window at the tile width 96 (window_fits). The others take them as without
-- dropout (lo_applies, dq_lo_applies). The atomic dkdv at the tile width 128 with a window (on the marked heads'
-- branches 8-16 bytes) takes them since wave 19 on a marked block's own walk (lo_walk), with ALiBi since wave 21 (with
-- softcap or without causal on the branches 16 bytes, on wave 19's two-pass walk 4-8; in three passes, dK in halves,
-- 0). Window, softcap and ALiBi together beside dropout since wave 21 (ptxas sm_75, the full matrix's bf16 variants
-- without varlen at the tile widths 32, 64 and 128, atomic and deterministic dkdv and dq: 0 bytes at 185-255
-- registers as without dropout's exclusion, but the atomic dkdv at 64 and 128, walked), and the atomic dkdv at the
-- tile width 64 with a window beside dropout (wave 21: on wave 19's walk 4 bytes with all three keys, 16 with window +
-- softcap and dropout_mask; on the walk's 16-row query tiles, lo_walk's third result, 0 at 213-255 registers over
-- head_dim 40-64 x the window's four key subsets x causal both ways and not). Varlen since wave 21 (ptxas sm_75 over
-- the full matrix's 180 bf16 varlen dropout dkdv and dq variants at head_dim 8-128, path=mma's rows among them: with
-- its clause dropped 0 bytes at 168-255 registers but the atomic dkdv at the tile width 64, 4-72 bytes, and the
-- deterministic one at head_dim 64 without causal or with softcap, 4-24, both fitting with the query rows' origin
-- read again, qrow_shared; the atomic dkdv at 128 with a window, 8 on its lo_walk, 0 on the branches; dq,
-- dq_vd_reread; dropout_mask, dq_kv_lo_applies).
function M.dropout_excludes(spec)
  if spec.kernel == "dq" then return false end -- (wave 19: dq_mark_shared where its branch spilled)
  return (spec.head_dim == 64 and not spec.deterministic
      and spec.causal and not spec.top_left and spec.alibi and not spec.softcap and not spec.window)
    or (spec.window and not spec.deterministic and spec.head_dim == 96)
end

-- Whether varlen's dkdv at the tile width 96 spills at 255 registers (ptxas sm_75, wave 19's scan of head_dim 72-96 x
-- causal both ways and not x none, each mask key, all three x atomic, deterministic) with Q's and dO's low parts
-- (kv false: the atomic dkdv at head_dim 96 without a mask key, causal=true 12 bytes, without causal 8, 0 since wave 20
-- with qrow_shared; top_left fits with K's and V's, 40 bytes without them) or with K's and V's too (kv true: the
-- deterministic dkdv at head_dim 96 causal, either alignment, with a window or ALiBi, 8-16 bytes; the atomic one at
-- head_dim 88 causal=true without a mask key, 8 bytes). Varlen takes neither on the key block's own walk (kv_walk:
-- 4-16 bytes without causal).
function M.varlen_w96_spills(spec, kv)
  if spec.head_dim ~= 96 then return false end
  local dim, key = spec.dim or spec.head_dim, spec.window or spec.softcap or spec.alibi
  if not kv then return not spec.deterministic and dim == 96 and not key and not spec.top_left and not M.qrow_shared(spec) end
  if spec.deterministic then return dim == 96 and spec.causal and (spec.window or spec.alibi) or false end
  return dim == 88 and spec.causal and not spec.top_left and not key or false
end

-- Whether the dkdv of `spec` (atomic; the deterministic one where named at the end) keeps its query rows' origin
-- (varlen: the sequence's first query row, q_at; else the batch) out of its registers: stored once into shared memory,
-- the rows' index computed from it again at each query tile and Q's and dO's row pointers on the marked tiles' branch
-- (lib/attn_bwd_mma.lua build_dkdv, cfg.qrow_shared), so that neither is held across the query loop. Wave 20, ptxas
-- sm_75 at 255 registers, head_dim 96 (the tile width 96, v_head_dim the same): varlen without a mask key, causal=true
-- or false (with the index and pointers held its Q and dO low parts spilled: causal=true 16 bytes with K's and V's as
-- kv_lo_applies gives them, 12 without; false 8; now 0 at 255 and 242 registers; the pointers alone: false 0, true 16),
-- and a window with ALiBi, softcap or not, causal both ways and not (16 bytes causal, 8 without; now 0 at 250-255
-- registers; the pointers alone 4-16). The others keep their code (varlen top_left fits as it is: 0 bytes). And at the
-- tile width 64, where it lets K's and V's low parts in (kv_lo_applies, kv_walk): varlen off the key block's walk
-- (causal=false, top_left, and causal=true with a window; K's and V's on the marked heads' branch spilled 8-44 bytes
-- with the index held; read again 0 at 249-255 registers, head_dim 64; head_dim 40-56 with window and ALiBi and causal
-- 0-16 held, 0 read again; head_dim 64 there 16-20 read again, 0-8 held, on the marked heads' branches: since wave 21
-- on kv_walk_frag's walk, read again 0 at 240-242 registers, held 24), and head_dim 64 with v_head_dim 32 and ALiBi
-- alone, causal=true, on kv_walk's 16-row walk (8 bytes held; read again 0 at 248 registers). And the deterministic
-- dkdv at head_dim 96 with varlen, a window and ALiBi without causal (wave 21: with Q's and dO's low parts alone, its
-- K's and V's rows not held there, kv_w96_branch, it spilled 4 bytes at 255 registers, the low parts' branch beside the
-- rows' index held; without the low parts 0 at 242, with the dq kernel's marks left out still 4; read again 0 at
-- 244-245 registers, softcap or not).
-- And varlen beside dropout at the tile width 64 (wave 21, ptxas sm_75 at 255 registers over the full matrix's bf16
-- varlen dropout dkdv there): the atomic dkdv, every key set (held, its Q's and dO's low parts alone spilled 4 bytes at
-- head_dim 40 causal and 72 at 64 causal, and K's and V's did not go in, kv_lo_applies; read again, with both, 0 at
-- 234-255 registers), and the deterministic one at head_dim 64 without causal (24 bytes held, 0 read again at 254) or
-- with softcap and no window (4; 0 at 251). Its other varlen dropout variants fit held (0 bytes, 204-255 registers).
function M.qrow_shared(spec)
  local dim = spec.dim or spec.head_dim
  if spec.kernel ~= "dkdv" then return false end
  if spec.varlen and spec.dropout and spec.head_dim == 64 then
    return not spec.deterministic or (dim == 64 and (not spec.causal or spec.softcap and not spec.window))
  end
  if spec.deterministic and not spec.dropout then
    return spec.head_dim == 96 and dim == 96 and spec.varlen and not spec.causal and spec.window and spec.alibi or false
  end
  if spec.deterministic or spec.dropout then return false end
  if spec.head_dim == 64 then
    local walked = spec.causal and not spec.top_left and not spec.window -- (kv_walk's)
    if spec.varlen then return not walked end
    return walked and spec.alibi and not spec.softcap and dim == 64 and spec.vdim == 32 or false
  end
  if spec.head_dim ~= 96 or dim ~= 96 or (spec.vdim or dim) ~= dim then return false end
  if spec.varlen then return not (spec.window or spec.softcap or spec.alibi or spec.top_left) end
  return spec.window and spec.alibi or false
end

-- Whether the dkdv kernel of `spec` (as the builders see it: head_dim the tile width) takes the low parts:
-- every f16-scaled dkdv but those where the branch's code spilled at 255 registers (ptxas sm_75, 8-72 bytes):
-- dropout where dropout_excludes says so, varlen at the tile width 96 where varlen_w96_spills says so (wave 19; all
-- of it until wave 18, 16-56 bytes), and the window where window_fits says no (the deterministic dkdv at the tile
-- width 128 since wave 19: lo_walk). Those keep the documented bound (a marked row's small entries lost; they read
-- the factors' magnitudes). (Varlen at the other widths since wave 18: its cost
-- on f16's T4 estimate was the packing of P^T's and dS^T's fragments once for both sides of the marked tiles'
-- branch, not the once-a-head scan; lib/attn_bwd_mma.lua packs them on each side there.)
-- Not the tile width 256 (wave 25, issue 28: the deterministic dkdv on the column split, lib/attn_bwd_mma.lua
-- bf16_dkdv_split): with Q's and dO's low parts on the marked heads' branches it spilled 20-24 bytes at 255 registers
-- (ptxas sm_75, head_dim 256 causal and not, either pipeline; on a marked block's walk of its own, lo_walk true or
-- "passes", 20-36), where without them 234-236 registers; and K's and V's low parts (a tile of 32 x 264 halves) made
-- it 69,432 bytes of shared memory, past sm_75's 65,536. So it keeps the documented bound there (holds: path=auto
-- runs SIMT, path=mma this path).
function M.lo_applies(spec)
  if spec.kernel == "dkdv" and spec.head_dim == 256 then return M.kv_frag(spec) end
  return spec.kernel == "dkdv" and spec.head_dim <= 128 and not (spec.dropout and M.dropout_excludes(spec)) and not (spec.varlen and M.varlen_w96_spills(spec))
    and not (spec.window and not M.window_fits(spec))
end

-- Whether the dkdv of `spec` is the deterministic one at the tile width 256 (lib/attn_bwd_mma.lua's column split,
-- bf16_dkdv_split; wave 25, issue 28), which takes every low part without a tile for K's and V's: a key block marked for
-- a Q, dO, K or V row runs lo_walk's two-pass walk ("passes": dV, then dK, 64 accumulators a thread each), whose
-- products with the low parts loop over the k-steps (not unrolled), K's and V's low parts taken as A fragments from
-- their bf16 rows a k-step at a time (lo_frag; build_dkdv's cfg.kvfrag); `lo` holds Q's or dO's (16 rows). Measured,
-- ptxas sm_75 (default<O3>), head_dim 256 causal / not: the low parts on the marked heads' branches in the one-pass walk
-- 20 / 4 bytes spilled at 255 registers (k-steps looped: 8 / 0); the two-pass walk with the products unrolled 16 / 20
-- (the marked walk alone in the kernel 12 / 28), the one-pass walk 24 / 36; the two-pass walk looped: 0 / 0. K's and V's
-- low parts as a tile of 32 rows: 69,432 bytes of shared memory (sm_75: 65,536); as fragments 60,984.
function M.kv_frag(spec)
  return spec.kernel == "dkdv" and spec.head_dim == 256 and spec.deterministic and not spec.dropout
end

-- Whether a dkdv with a window takes the low parts (wave 18's scan, ptxas sm_75 at 255 registers, every subset of the
-- mask keys holding the window, causal=true, top_left and false): the deterministic dkdv and the atomic one at the
-- tile widths 32 and 128 (its two passes) with the low parts on the marked heads' branches, as without a window; the
-- atomic dkdv at the tile width 64 with a marked block's own walk (lo_walk; on the branches it spilled 4-20 bytes);
-- at the tile width 96 where the branches fit: head_dim 72, 80 and 88, head_dim 96 without ALiBi, and a v_head_dim of
-- its own, those of them that window_w96_qo_only names with Q's and dO's low parts alone (wave 19). Not head_dim 96
-- with ALiBi (causal 16 bytes, 8 with Q's and dO's alone; without causal 8 either way); the walk there spilled 28-40
-- bytes. Those keep the documented bound. (The atomic dkdv at the width 64 with a window and ALiBi but no softcap
-- since wave 19: its T4 estimate's 1.00x -> 1.18-1.20x f16's was kiln's IR pipeline, wave 17's spill rule in
-- attention_bwd.lua, on the walk; under default<O3> 0 bytes and 1.00x.)
function M.window_fits(spec)
  if spec.deterministic then return true end
  if spec.head_dim == 64 then return true end
  if spec.head_dim ~= 96 then return true end
  local dim = spec.dim or spec.head_dim
  return (spec.vdim or dim) ~= dim or dim ~= 96 or not spec.alibi or M.qrow_shared(spec)
end

-- Whether the atomic dkdv with a window at the tile width 96 takes Q's and dO's low parts but not K's and V's (wave 19,
-- ptxas sm_75 at 255 registers, head_dim 72-96 and v_head_dims 96/80, 80/96, 96/72 x causal both ways and not x the
-- window's key subsets): K's and V's too spilled at head_dim 88 causal without ALiBi (4-8 bytes) and head_dim 96
-- causal with softcap (16), and at v_head_dim 80 beside head_dim 96, causal with ALiBi (4; the others at 254-255
-- registers); Q's and dO's alone 0 bytes there (243-255 registers).
function M.window_w96_qo_only(spec)
  local dim = spec.dim or spec.head_dim
  return spec.window and not spec.deterministic and spec.head_dim == 96 and ((spec.vdim or dim) ~= dim and M.window_w96_vdim_spills(spec)
    or spec.causal and not spec.alibi and (dim == 88 or dim == 96 and spec.softcap)) or false
end

-- Whether the atomic dkdv with a window at the tile width 96 and a v_head_dim of its own spilled with K's and V's low
-- parts on the marked heads' branches (wave 20, ptxas sm_75 at 255 registers, 8 v_head_dim pairs of the width 96 x the
-- window's four subsets x causal=true, top_left and false: 4-8 bytes, the same 4 variants each way): 96/80 with ALiBi
-- without softcap, 88/96 with ALiBi, 96/88 with softcap without ALiBi. The other 84 of 96 fit (0 bytes).
function M.window_w96_vdim_spills(spec)
  local dim = spec.dim or spec.head_dim
  local vd = spec.vdim or dim
  return spec.window and (dim == 96 and vd == 80 and spec.alibi and not spec.softcap or dim == 88 and vd == 96 and spec.alibi
    or dim == 96 and vd == 88 and spec.softcap and not spec.alibi) or false
end

-- Whether a dkdv kernel that takes the low parts (lo_applies) takes them for its K and V rows too (the key block
-- marked while staging, K_lo and V_lo filled inside the query loop): not where that code spilled at 255 registers
-- on main with wave 16's load_ws copies (ptxas sm_75, 8-28 bytes): the atomic dkdv at the tile width 64 with
-- causal=true (d64 causal: 8 B; with ALiBi 8 B, with a window 16 B; with dropout d64 causal fits, 0 bytes, not with
-- softcap: 8 B, but takes no low parts: dropout_excludes), and the tile width 96 without causal
-- (head_dim 80 and 96, atomic 20-28 B, deterministic 8-12 B), but those of them that fit with the key block's own
-- walk (kv_walk) or the marked block's walk for a window (lo_walk); and varlen's atomic dkdv at the tile width 64
-- but where kv_walk (causal=false 16 B, top_left 40 B on the branch; 4 B each with the walk; wave 18). The others
-- keep Q's and dO's low parts; K's and V's rows keep the documented bound (docs/attention-bwd-span.md, "Not held yet").
-- (Wave 21: where varlen_w96_spills (kv) or window_w96_qo_only name a variant, kv_walk's walk takes K's and V's rows
-- instead wherever it fits with V's low part from its rows, kv_walk_frag.)
function M.kv_lo_applies(spec)
  if spec.head_dim == 256 then return M.kv_frag(spec) end
  return M.lo_applies(spec) and not (spec.varlen and spec.head_dim == 64 and not spec.deterministic and not M.kv_walk(spec)
      and not M.qrow_shared(spec))
    and (M.kv_walk(spec) or not (spec.varlen and M.varlen_w96_spills(spec, true)) and not M.window_w96_qo_only(spec))
    and (M.kv_walk(spec) or M.lo_walk(spec) or (spec.dropout and spec.head_dim == 64 and not spec.softcap)
      or not (spec.head_dim == 64 and spec.causal and not spec.top_left and not spec.deterministic)
      and not (spec.head_dim == 96 and not spec.causal and not M.kv_w96_branch(spec)))
end

-- Whether the dkdv at the tile width 96 without causal takes K's and V's low parts on the marked heads' branches (wave 20;
-- ptxas sm_75 at 255 registers over head_dim 72-96 and v_head_dims 96/80, 80/96, 96/64, 64/96, 96/72, 88/96, 96/88 x
-- none, softcap, ALiBi and the window's subsets, docs/attention-bwd-span.md "K's and V's rows at the width 96 without
-- causal (wave 20)"): the deterministic dkdv (0 bytes everywhere), and the atomic one where the branch fit: a v_head_dim
-- of its own (with a window but where window_w96_vdim_spills), a window at head_dim 72 and 80, at 88 with ALiBi, at 96
-- but with softcap and no ALiBi. Not the atomic one with head_dim and v_head_dim equal and no window (head_dim 72 and 80
-- with ALiBi, 88, 96 with ALiBi: 20-28 bytes; head_dim 72, 80 and 96 without ALiBi: kv_walk), head_dim 88 with a window
-- without ALiBi (4-8), 96 with a window and softcap without ALiBi (16).
function M.kv_w96_branch(spec)
  if spec.head_dim ~= 96 or spec.causal or spec.varlen then return false end
  if spec.deterministic then return true end
  local dim = spec.dim or spec.head_dim
  if (spec.vdim or dim) ~= dim then return not M.window_w96_vdim_spills(spec) end
  return spec.window and not (dim == 88 and not spec.alibi) and not (dim == 96 and spec.softcap and not spec.alibi) or false
end

-- Whether the dkdv kernel of `spec` runs a key block marked for its K or V rows on a walk of its own
-- (lib/attn_bwd_mma.lua build_dkdv's kvmarked walk: two passes over the query tiles, K's low part filled once a
-- pass, V's held in registers for the dK pass; the other blocks' walk is main's without K's and V's low parts): where
-- K's and V's low parts on the marked heads' branch spilled and that walk does not (ptxas sm_75, 255 registers,
-- wave 17's scan of the mask-key subsets): the atomic dkdv at the tile width 64 with causal=true and no mask key
-- (d64 causal; head_dim 40-56 too, not head_dim 32 with v_head_dim 64: 4 bytes; not with dropout, where the walk
-- spilled 12 bytes and the marked heads' branch fits). With ALiBi or softcap there, or
-- head_dim 32 or below (v_head_dim above it), the walk spilled 4-24 bytes on query tiles of bm = 32 rows: those walk
-- tiles of 16 (the second result, build_dkdv's cfg.kvwalk_rows; wave 18: 0 spills over head_dim 8-64 x v_head_dim
-- x ALiBi, softcap, both), but head_dim 64 with v_head_dim 32 and ALiBi alone (8 bytes), which keeps its code.
-- And the tile width 96 without causal, atomic and deterministic, with softcap or no mask key (head_dim 72, 80 and
-- 96; not 88 or a v_head_dim of its own: 4 bytes), where it fits with the unmarked blocks' walk first in the code ("unmarked"; "marked": the marked block's first):
-- ptxas's allocation at 255 registers moves by a few bytes with that order (width 64 with the unmarked walk first: 4
-- bytes; width 96 with the marked one first: 8), and with ALiBi or a window there it spilled 4-16 bytes either way. Not
-- varlen (4-16 bytes at the width 96, varlen_w96_spills). Third result (wave 21, kv_walk_frag, below): true where the
-- walk's dK pass takes V's low part from its rows at each marked tile (build_dkdv's cfg.kvwalk_vfrag), which lets the
-- walk in at the width 96 with ALiBi or a window and beside varlen.
function M.kv_walk(spec)
  if spec.kernel ~= "dkdv" or not M.lo_applies(spec) then return nil end
  if spec.head_dim == 64 and (spec.dim or 64) > 32 and spec.causal and not spec.top_left and not spec.deterministic
    and not spec.dropout and not (spec.window or spec.softcap or spec.alibi) then return "marked" end
  if spec.head_dim == 64 and spec.causal and not spec.top_left and not spec.deterministic and not spec.window
    and not spec.dropout and not (spec.alibi and not spec.softcap and (spec.dim or 64) == 64 and spec.vdim == 32
      and not M.qrow_shared(spec)) then
    return "marked", 16
  end
  local dim = spec.dim or spec.head_dim
  if spec.head_dim == 96 and (dim == 72 or dim == 80 or dim == 96) and (spec.vdim or dim) == dim and not spec.causal and not spec.varlen
    and not (spec.window or spec.alibi) then return "unmarked" end
  local frag = M.kv_walk_frag(spec) -- (wave 21: V's low part from its rows, below)
  if frag then return frag, nil, true end
end

-- Whether the dkdv kernel of `spec` runs a key block marked for its K or V rows on kv_walk's walk with V's low part taken
-- a k-step at a time from its bf16 rows at each marked tile (lib/attn_bwd_f16scaled.lua lo_frag, in a loop; build_dkdv's
-- cfg.kvwalk_vfrag) instead of its A fragments held in registers across the dK pass (kd x 4 of them: 24 at the width
-- 96), and which walk comes first in the code (the result: "unmarked" or "marked", as kv_walk's; false: not taken).
-- Wave 21, ptxas sm_75 at 255 registers, the variants where K's and V's low parts on the marked heads' branches
-- spilled (kv_lo_applies left them out): at the tile width 96 the atomic dkdv with a window that window_w96_qo_only
-- names, without causal where kv_w96_branch does not fit, varlen where varlen_w96_spills (kv) says so, atomic and
-- deterministic; and the atomic dkdv at head_dim 64 with varlen, a window and ALiBi and causal (both ways), beside
-- lo_walk's two walks (a block not marked for its K or V rows takes them) with the rows' origin read again
-- (qrow_shared): before 16 bytes on the branches (head_dim 96 causal with a window and softcap, the deterministic
-- head_dim 96 varlen with window, softcap and ALiBi), 8-20 at head_dim 64; on this walk 0 at 240-255 registers in 50
-- of the 112 measured (head_dim 40-96, v_head_dims from 8 to 96 of the width 96, every key set, causal both ways and
-- not, atomic and deterministic, varlen; with V's fragments held 8-20 bytes on the six of the full matrix, 0-28 on the
-- others measured; the marked walk first 4-8 at head_dim 96). Not where kv_walk_frag_spills names it (4-68 bytes
-- either way).
function M.kv_walk_frag(spec)
  if spec.kernel ~= "dkdv" or spec.dropout or not M.lo_applies(spec) then return false end
  local dim = spec.dim or spec.head_dim
  if spec.head_dim == 64 then
    return not spec.deterministic and spec.varlen and spec.window and spec.alibi and spec.causal and dim == 64 and "unmarked"
  end
  if spec.head_dim ~= 96 then return false end
  local walks
  if spec.varlen then walks = M.varlen_w96_spills(spec, true)
  else walks = M.window_w96_qo_only(spec) or not spec.causal and not M.kv_w96_branch(spec) end
  if not walks then return false end
  local spills, order = M.kv_walk_frag_spills(spec)
  return not spills and (order or "unmarked")
end

-- Where kv_walk_frag's walk spilled at 255 registers (ptxas sm_75, wave 21, bytes with the unmarked blocks' walk first /
-- the marked one's / V's fragments held instead): the deterministic dkdv at head_dim 96 with varlen and ALiBi but
-- without window and softcap together, and causal=top_left with softcap and ALiBi (8 / 8 / 12-28); the atomic one
-- without causal, head_dim and v_head_dim equal, no window: head_dim 72 with ALiBi (44-68 / 40-60 / 0-8) and 96 with
-- ALiBi alone (12 / 12 / 4); head_dim 88 with a window without ALiBi (8 / 8 / 8); a v_head_dim of its own below 64 or
-- 72 (head_dim 96 with window + softcap, causal: v_head_dim 8-56 4-32 bytes but 48 (0), 72 56 / 40 / 8; head_dim 88
-- with a window, causal: v_head_dim 8 and 16 4-20 bytes, 24-56 and 72 left out with them unmeasured); 64, 80, 88 and
-- 96 fit (0). Head_dim 88 with v_head_dim 96, window, softcap and ALiBi: 4 bytes with the unmarked walk first, 0 with
-- the marked one's (the second result: its order).
function M.kv_walk_frag_spills(spec)
  local dim = spec.dim or spec.head_dim
  local vd = spec.vdim or dim
  if spec.deterministic then
    return spec.varlen and spec.alibi and not (spec.window and spec.softcap) and not (spec.softcap and not spec.top_left) or false
  end
  if dim == 88 and vd == 96 and spec.window and spec.softcap and spec.alibi then return false, "marked" end
  return not spec.causal and vd == dim and not spec.window and spec.alibi and (dim == 72 or dim == 96 and not spec.softcap)
    or dim == 88 and vd == 88 and spec.window and not spec.alibi
    or vd ~= dim and (vd < 64 or vd == 72) or false
end

-- Whether the dkdv kernel of `spec` runs a key block marked for Q's or dO's rows (lo_scan over every head of its
-- group, once a block) or for its own K or V rows on a walk of its own (lib/attn_bwd_mma.lua build_dkdv's lomarked
-- walk: the per-row body with the low parts on the marked heads' branches); the other blocks' walk holds no low part.
-- The atomic dkdv at the tile width 64 with a window (lo_applies): with the low parts on the marked heads' branches
-- beside lib/attn_bwd_f16scaled_d32.lua's body it spilled 4-20 bytes at 255 registers (ptxas sm_75), K's and V's
-- low parts too or not; a marked head's own copy of the query loop 4-20 bytes; on a walk of its own 0.
-- "passes": the deterministic dkdv at the tile width 128 (one pass, dV and dK together, 128 accumulators a thread),
-- where the low parts on the marked heads' branches spilled 40 bytes (wave 18: d128 causal, and top-left with a
-- window and ALiBi): a marked block's walk in two passes (dV, then dK, as the atomic d128's), the others main's one
-- pass holding no low part (wave 19: 0 bytes, 254-255 registers). And the atomic dkdv at the tile width 128 with
-- dropout and a window but no ALiBi (its two passes both ways; on the branches 8 bytes, 16 with softcap), where the
-- marked walk computes P and dS on the masked per-entry body alone (with the unmarked copy too 8 bytes) and, with
-- softcap, comes second in the code (the second result, "unmarked": first, 4 bytes; ptxas's allocation at 255
-- registers moves with the order). (With ALiBi and causal but no softcap the branches fit at head_dim 128, wave 19:
-- 0 bytes, 246 registers, the walk 4; at head_dim 120 8, wave 21.) "dk halves" (wave 21): that atomic dkdv with
-- dropout, a window and ALiBi, softcap or not, causal or not (with softcap
-- or without causal on the branches 16 bytes; on the two-pass walk 8 with all three keys, 4 without causal; head_dim
-- 120 causal without softcap on the branches 8): a marked block's walk in three passes, dV, then dK's first 64
-- columns with the dQ step, then its last 64 (32 accumulators a thread each, build_dkdv's pass.cols; S, dP and the low
-- parts' products recomputed by the third pass, on marked blocks alone): 0 bytes at 243-255 registers (ptxas sm_75,
-- head_dim 104-128 x window + ALiBi, softcap or not x causal both ways and not, v_head_dims 64/128 and 128/64). The third
-- result: the query tiles of a marked block's walk, fewer rows than the block's (build_dkdv's cfg.lowalk_rows):
-- 16 at the tile width 64 beside dropout, where the walk's 32 spilled 4-16 bytes (dropout_excludes, wave 21).
-- The two-pass walk not beside varlen (wave 21, ptxas sm_75: head_dim 104 and 128 with a window without ALiBi,
-- softcap or not, causal=true, top_left and false: the walk 8 bytes, the marked heads' branches 0 at 250-255 registers).
function M.lo_walk(spec)
  if spec.kernel == "dkdv" and spec.deterministic and (spec.head_dim == 128 or M.kv_frag(spec)) then return "passes" end
  if spec.kernel == "dkdv" and not spec.deterministic and spec.dropout and spec.window and spec.alibi and spec.head_dim == 128 then
    return "dk halves"
  end
  if spec.kernel == "dkdv" and spec.dropout and spec.window and not spec.alibi and spec.head_dim == 128 and not spec.varlen then
    return true, spec.softcap and "unmarked" or nil
  end
  if spec.kernel == "dkdv" and spec.window and not spec.deterministic and spec.head_dim == 64 then
    return true, nil, spec.dropout and 16 or nil
  end
  return false
end

-- Whether the deterministic dq kernel of `spec` (dq_lo_applies) tests its block's Q/dO mark read again from shared
-- memory at each key tile (kv_marked) instead of holding it in a register across the key loop: with dropout at the
-- tile width 64 beside a window or ALiBi, or causal=top_left without softcap, where the held flag spilled 8-32 bytes
-- at 255 registers (ptxas sm_75; wave 18's scan); not head_dim 64 top_left with ALiBi alone (the re-read spilled 12
-- bytes there, the held flag none; at head_dim 56 the other way round). And window, softcap and ALiBi together at the
-- tile width 64, dropout or not (wave 20: the held flag spilled 8 bytes at head_dim 40 causal; the re-read 0). And
-- varlen without dropout at the tile widths up to 64 (wave 20, with K's and V's low parts, dq_kv_lo_applies: the held
-- flag spilled 4-8 bytes at head_dim 40 with softcap or ALiBi; read again 0 over the full matrix's bf16 varlen dq
-- variants there). With dropout beside varlen at those widths where dq_vd_reread says (wave 21). And where the test's
-- dropout_mask output is written apart (dq_mask_apart, wave 22: held 8 bytes there, read again 0).
function M.dq_mark_shared(spec)
  if M.dq_mask_apart(spec) then return true end
  if spec.kernel == "dq" and spec.varlen and spec.dropout and spec.head_dim <= 64 then
    return M.dq_vd_reread(spec) or M.dq_vd_mark_only(spec)
  end
  return spec.kernel == "dq" and spec.head_dim == 64 and (spec.dropout
    and (spec.window or spec.alibi or (spec.top_left and not spec.softcap))
    and not (spec.top_left and spec.alibi and not spec.window and (spec.dim or 64) == 64)
    or (spec.window and spec.softcap and spec.alibi))
    or spec.kernel == "dq" and spec.varlen and not spec.dropout and spec.head_dim <= 64 or false
end

-- Whether the deterministic dq kernel beside varlen and dropout at the tile widths up to 64 reads its marks again from
-- shared memory (both of them: the block's Q/dO mark, dq_mark_shared, and its key tile's K/V mark before dQ += dS K_lo,
-- dq_kv_mark_again) instead of holding them across the loop (wave 21, ptxas sm_75 at 255 registers, the full matrix's
-- 41 bf16 varlen dropout dq variants there x the four ways): at the tile width 32 (head_dim 32 causal with softcap:
-- neither 8 bytes, one 4, both 0) and at 64 with causal=true and no mask key (head_dim 40: neither 4, 0 otherwise);
-- neither elsewhere (head_dim 40: without causal both 8, top_left one 4, softcap any 8 but neither, a window both 4).
-- The other variants 0 bytes every way (head_dim 8, 24, 64). Wave 22 (found by its scan, not full-matrix variants; the
-- test's dropout_mask output left out, dq_mask_apart): head_dim 64 with a window and softcap without ALiBi, every
-- causal form, neither 8 bytes, both 0 (254-255 registers).
function M.dq_vd_reread(spec)
  return spec.head_dim == 32 or spec.causal and not spec.top_left and not (spec.window or spec.softcap or spec.alibi)
    or (spec.dim or 64) == 64 and spec.head_dim == 64 and spec.window and spec.softcap and not spec.alibi
      and not spec.dropout_mask or false
end

-- Whether the deterministic dq kernel beside varlen and dropout reads the block's Q/dO mark again from shared memory
-- but holds its key tile's K/V mark (dq_mark_shared without dq_kv_mark_again): head_dim 40 and 48 causal=top_left with
-- softcap alone (wave 22, ptxas sm_75 at 255 registers: neither 4 bytes, this 0 at both, the tile's mark alone 0 at
-- both, both marks 8 at 40; wave 21's scan had found the 4 bytes). Not the test's dropout_mask output (dq_mask_apart).
-- (head_dim 40 causal=false with softcap: 8 bytes, 4 with both marks read again, 8 with one: left as it is.)
function M.dq_vd_mark_only(spec)
  local dim = spec.dim or spec.head_dim
  return spec.head_dim == 64 and (dim == 40 or dim == 48) and spec.top_left and spec.softcap
    and not (spec.window or spec.alibi or spec.dropout_mask) or false
end

-- Whether the deterministic dq kernel of `spec` takes the low parts of its own Q and dO rows (staged once a block,
-- marked while staging, two tiles of their low parts filled once a marked block): head_dim up to 64, at the tile widths
-- 96 and 128 where dq_lofrag_fits. Its K and V rows: dq_kv_lo_applies.
-- (wave 20: window, softcap and ALiBi together, dropout or not, measured and held; wave 21: dropout beside varlen,
-- with the marks read again where dq_vd_reread says, 0 bytes over the full matrix's bf16 varlen dropout dq variants up to
-- the width 64 at 204-255 registers; at 96 and 128 0 bytes, 231-251, but there the deterministic dkdv runs SIMT, kvs.applies)
function M.dq_lo_applies(spec)
  return spec.kernel == "dq" and (spec.head_dim <= 64 or M.dq_lofrag_fits(spec))
end

-- Whether the deterministic dq kernel at the tile width 96 or 128 holds its Q and dO rows' low parts (wave 19: the two
-- tiles of 64 rows do not fit beside Q, dO, K and V in sm_75's 64 KB; a marked block's branch takes each warp's A
-- fragments of them from the bf16 rows a k-step at a time, lo_frag, in a loop): where that fits at 255 registers
-- (ptxas sm_75, the full matrix's bf16 dq variants at those widths). Since wave 20 everywhere there: the width 96 with a
-- window or dropout and head_dim 64 with v_head_dim 128 and dropout mark their block in a loop after the staging
-- (dq_marks_looped; with the marks inside load they spilled 24-44 bytes, with a window and varlen 4-28, head_dim 64 with
-- v_head_dim 128 and dropout 4).
-- And at the tile width 256 (wave 25, the column split, lib/attn_bwd_mma.lua M.csplit: the fragments at the group's rows,
-- which both warps of a pair share; ptxas sm_75 over the full matrix's 76 bf16 dq variants there: 0 spills at 231-255
-- registers but head_dim 200 without causal, which stays on SIMT).
function M.dq_lofrag_fits(spec)
  return spec.head_dim == 96 or spec.head_dim == 128 or spec.head_dim == 256
end

-- Whether the deterministic dq kernel of `spec` (dq_lo_applies) marks its block's Q and dO rows in a loop after staging
-- them (rows_span) instead of inside load's unrolled items: at the tile width 96 with a window or dropout, and at 128
-- with dropout and a head_dim below it, where the marks inside load spilled 4-44 bytes at 255 registers (ptxas sm_75,
-- wave 20; with a window whatever the marked branch held: with it reduced to one multiply 24-52 bytes; kiln's IR
-- pipeline fits there, 224-254 registers, but with 20-30 % more SASS than default<O3>).
function M.dq_marks_looped(spec)
  return spec.kernel == "dq" and (spec.head_dim == 96 and (spec.window or spec.dropout)
    or spec.head_dim == 128 and spec.dropout and (spec.dim or 128) < 128) or false
end

-- Whether the deterministic dq kernel marking its Q and dO rows in a loop (dq_marks_looped) first tests the warp's
-- extrema (rows_span_checked) and runs the loop only where they span more than 2^32 (wave 22). The loop on every block
-- was the d96 dq's T4 estimate's excess over f16 (KILN_ESTIMATE_DIM=96 KILN_D32_ESTIMATE_ONLY='causal=true window=true',
-- emulator profile: 2 trips x 459 instructions a warp for Q and again for dO, 29,376 of the 75,290 other instructions
-- of window + softcap's range, which started at the loop and so took in the block's setup too). At head_dim 96 (ptxas
-- sm_75 over the full matrix's 30 bf16 dq variants it changes: 0 bytes at 255 registers), but a window beside dropout
-- (4 bytes: causal with a window alone, and with softcap and ALiBi too, causal=true and top_left); not at head_dim 80
-- (the extrema beside load's items spilled 8 bytes with a window, 16-32 with dropout; 0 only with varlen and the three
-- keys), nor head_dim 64 with v_head_dim 128 and dropout (8): those keep the loop on every block.
function M.dq_marks_checked(spec)
  return M.dq_marks_looped(spec) and spec.head_dim == 96 and (spec.dim or 96) == 96 and (spec.vdim or 96) == 96
    and not (spec.dropout and spec.window)
end

-- Whether the deterministic dq kernel of `spec` takes the low parts of its K and V rows (read as the deterministic
-- dkdv wrote them, lib/attn_bwd_kvscaled.lua: that dkdv marks each staged row spanning more than 2^32 by storing its
-- factor negative in ksf / vsf, and dq marks a key tile holding one while copying the factors). spec: either kernel of
-- the pair (dq, or the deterministic dkdv that writes the rows); the caller checks that both run here (kvs.applies).
-- Varlen at every tile width (96 and 128 since wave 19: 0 spills over the full matrix's 39 bf16 varlen dq and
-- deterministic dkdv variants there, 205-251 registers; up to 64 since wave 20, with dq_mark_shared and dq_kv_mark_again:
-- 0 spills over its 73 without dropout, 189-255 registers; beside dropout since wave 21, dq_vd_reread: 0 over its 41
-- with dropout there), but with the test's dropout_mask output beside varlen and dropout at the widths up to 64 (dq with
-- Q's, dO's, K's and V's low parts 8 bytes at head_dim 64 causal, 12 with a window and softcap; the deterministic dkdv
-- writing the marks 4 there; without K's and V's 0 at 238-254 registers; since wave 22 dq stages and marks them itself
-- there at head_dim 64, dq_mask_apart and dq_kv_self). Window, softcap and ALiBi together since
-- wave 20, but beside varlen at the tile widths up to 96 (at
-- 96 the deterministic dkdv's marks spilled 12 bytes, head_dim 72/80 causal; up to 64 the two wave-20 rules were
-- measured apart, not together). Nor varlen at the tile width 96 with causal (true or top_left): the deterministic dkdv
-- writing the rows' marks spilled 8-20 bytes at 255 registers over head_dim 72-96 and every mask-key set (ptxas sm_75,
-- found at the end of wave 20; 0 without the marks; since wave 21 dq marks those tiles itself, dq_kv_rows_marked, and
-- beside window + softcap + ALiBi with varlen at the widths up to 64 it stages and marks them, dq_kv_self).
-- Dropout since wave 19 (ptxas sm_75: 0 spills over the full matrix's bf16 dq and deterministic dkdv
-- dropout variants where both run the f16-scaled path, tile widths 32 and 64), and window and ALiBi at the tile width
-- 64 (dq_kv_mark_again).
function M.dq_kv_lo_applies(spec)
  return (spec.kernel == "dq" or (spec.kernel == "dkdv" and spec.deterministic))
    and not (spec.varlen and spec.dropout_mask and spec.head_dim <= 64)
    and not (spec.varlen and spec.head_dim == 96 and spec.causal)
    and not (spec.window and spec.softcap and spec.alibi and spec.varlen and spec.head_dim <= 96)
end

-- Whether the deterministic dq kernel of `spec` takes the low parts of its K and V rows where it stages them itself (the
-- deterministic dkdv of the same spec does not run this path, kvs.applies: lib/attn_bwd_mma.lua available refuses it,
-- dropout at the tile widths 96 and 128, window + softcap + ALiBi at 128, or holds says no, dropout beside window +
-- softcap + ALiBi, varlen at head_dim 96 causal with a window or ALiBi; or the dkdv's marks spilled and kvs.applies
-- leaves the rows out, window + softcap + ALiBi beside varlen at the widths up to 64): dq marks a key tile holding a row
-- that spans more than 2^32 while converting it (row_spans inside load, the row's extrema at hand; at the tile width 96
-- in a loop after the staging, dq_kv_self_looped) and a marked tile adds dO V_lo^T to dP, Q K_lo^T to S and dS K_lo to
-- dQ as with the dkdv's marks (cfg.kvrows; lib/attn_bwd_mma.lua build_dq, cfg.kvself). Wave 21, ptxas sm_75 at 255
-- registers: 0 spills over the full matrix's 79 bf16 dq variants it changes and 96 dropout variants at the width 96
-- (head_dim 72-96 x causal both ways and not x the 8 key subsets, 236-255 registers) and the width 96's varlen ones with a
-- window (0). Dropout beside varlen too since the merge of wave 21 (dq's own Q and dO rows held there since then,
-- dq_lo_applies: with these marks 0 bytes at 204-255 registers over the full matrix's 13 bf16 varlen dropout dq
-- variants that ran SIMT, head_dim 8-128, three keys or none; measured alone before, 0 at the widths 96 and 128), but the
-- test's dropout_mask output there but where dq_mask_apart writes it apart (wave 22; elsewhere 8-12 bytes with K's and
-- V's rows, dq_kv_lo_applies, 4-8 with the mask apart), nor varlen at head_dim 96 causal with ALiBi and
-- no window (20-28 bytes with the looped marks; under path=mma the dkdv's rows there, dq_kv_rows_marked: 0), nor window
-- + softcap + ALiBi beside varlen at head_dim 48 and 56 (8 bytes, causal both ways and not; looped 8; the dkdv's rows
-- with dq_kv_rows_marked' looped marks 0-8; head_dim 8-40 and 64 fit: 0 bytes, 254-255 registers; beside dropout
-- head_dim 40 4 bytes, causal=true and false, wave 21's merge): those keep the deterministic dkdv's rows without marks
-- (not held).
function M.dq_kv_self(spec)
  local dim = spec.dim or spec.head_dim
  return spec.kernel == "dq" and not (spec.dropout and spec.varlen and spec.dropout_mask and not M.dq_mask_apart(spec))
    and not (spec.varlen and spec.head_dim == 96 and spec.causal and spec.alibi and not spec.window)
    and not (spec.varlen and spec.window and spec.softcap and spec.alibi and (dim == 48 or dim == 56 or dim == 40 and spec.dropout))
end

-- Whether the dq kernel of `spec` writes the test's dropout_mask output after dQ's store, in a loop of its own over the
-- key tiles its main loop visited (the Philox bits drawn again there: lib/attn_dropout.lua store_mask4), instead of
-- beside each fragment's dropout factors; there it stages and marks K and V itself (dq_kv_self) and reads the block's
-- mark again (dq_mark_shared). Wave 22, ptxas sm_75 at 255 registers, head_dim 64 causal with a window and softcap
-- beside varlen (the full matrix's last variant not held; bytes with the deterministic dkdv's marks / dq's own): K's
-- and V's rows as before 24 / 8, both marks read again 12 / 8, the mask apart 16 / 8, the mask apart and the block's
-- mark again 8 / 0. At head_dim 64 over the 3 causal forms x 8 key subsets: 0 bytes at 253-255 registers but a window
-- with ALiBi, 8 bytes (4 with both marks read again): left out (not held). Other head dims not measured.
function M.dq_mask_apart(spec)
  return spec.kernel == "dq" and spec.dropout_mask and spec.varlen and spec.head_dim == 64 and (spec.dim or 64) == 64
    and not (spec.window and spec.alibi) or false
end

-- Whether the dq kernel of `spec` marking the key tiles it stages (dq_kv_self) takes the marks in a loop after the staging
-- (rows_span over the tile's bf16 K and V rows: two trips a thread, reading them again) instead of inside load's unrolled
-- items: at the tile width 96, where the marks inside load spilled 8 bytes at 255 registers with dropout (ptxas sm_75,
-- head_dim 72 and 80 without causal and without a window, head_dim 88 causal with a window; looped 0, 236-255 registers)
-- and 8-28 bytes beside varlen (looped 4-32 there: dq_kv_rows_marked). At 128 inside load fits (0 bytes, 237-255).
function M.dq_kv_self_looped(spec)
  return spec.head_dim == 96
end

-- Whether the dq kernel of `spec` reading K and V as the deterministic dkdv wrote them (kvs.applies) but without that
-- dkdv's marks (dq_kv_lo_applies: they spilled there) marks the copied key tiles itself from the bf16 K and V rows
-- (rows_span, a loop after the copy: K's and V's bf16 rows read again) and takes their low parts as with the dkdv's
-- marks (cfg.kvrows): varlen at the tile width 96 (not beside dropout: dq_lo_applies; wave 21). There, staging K and V
-- itself with the marks (dq_kv_self) spilled 4-32 bytes at 255 registers (ptxas sm_75, head_dim 72-96 causal=true and
-- top_left without a window; the marks inside load 8-28); with the copies and the looped marks 0 (207-255 registers,
-- the width 96's varlen dq variants with causal or a mask key). Elsewhere (window, softcap and ALiBi beside varlen at the
-- widths up to 64) neither kernel takes the rows and dq stages them itself (kvs.applies, dq_kv_self).
function M.dq_kv_rows_marked(spec)
  return spec.kernel == "dq" and spec.varlen and spec.head_dim == 96 or false
end

-- Whether dq's dQ += dS K_lo step tests its key tile's mark read again from shared memory (kv_tile_marked) instead
-- of the flag taken before S's and dP's low products: at the tile width 64 with a window and ALiBi, where the flag
-- held across the softmax spilled 8-16 bytes at 255 registers (ptxas sm_75, head_dim 40 and 64; read again: 0).
-- And varlen without dropout at the tile widths up to 64 (wave 20: held, 4 bytes at head_dim 40 with ALiBi; with
-- dq_mark_shared too 0 over the full matrix's bf16 varlen dq variants there); with dropout where dq_vd_reread says (wave 21).
function M.dq_kv_mark_again(spec)
  if spec.kernel == "dq" and spec.varlen and spec.dropout and spec.head_dim <= 64 then return M.dq_vd_reread(spec) end
  return spec.head_dim == 64 and spec.window and spec.alibi or spec.varlen and not spec.dropout and spec.head_dim <= 64 or false
end

-- Whether the f16-scaled kernel of `spec` (dkdv atomic or deterministic, or dq; as the builders see it) keeps the bf16
-- path's bound where a row spans more than 2^32, i.e. adds the low parts of every row it stages: the rules above,
-- no list of its own. dkdv: Q's and dO's rows (lo_applies) and K's and V's (kv_lo_applies, which implies
-- lo_applies; the walks kv_walk and lo_walk and the atomic d128's two passes are inside them, and head_dim 32's and 64's
-- blocks of one factor run a marked head or block on the per-row body). dq: Q's and dO's (dq_lo_applies) and K's
-- and V's: where dq reads them as the deterministic dkdv wrote them (kvs.applies with `available`, lib/attn_bwd_mma.lua's,
-- under the same path) that dkdv's marks (dq_kv_lo_applies) or its own from the bf16 rows (dq_kv_rows_marked); else
-- dq's own while staging them (dq_kv_self, wave 21). prep and convert stage no row for a product: true.
-- Else false and why: the rows and the spec's keys (serves: path=auto takes SIMT there, path=mma keeps this path and
-- its documented bound, docs/attention-bwd-span.md "Not held yet").
function M.holds(spec, target, available)
  local rows, rule
  if spec.kernel == "dkdv" then
    if not M.lo_applies(spec) then rows, rule = "Q's, dO's, K's and V's rows", "lo_applies"
    elseif not M.kv_lo_applies(spec) then rows, rule = "K's and V's rows", "kv_lo_applies" end
  elseif spec.kernel == "dq" then
    if not M.dq_lo_applies(spec) then rows, rule = "Q's and dO's rows", "dq_lo_applies"
    elseif require("lib.attn_bwd_kvscaled").applies(spec, target, available) then
      if not M.dq_kv_lo_applies(spec) and not M.dq_kv_rows_marked(spec) then
        rows, rule = "K's and V's rows", "dq_kv_lo_applies"
      end
    elseif not M.dq_kv_self(spec) then -- (the deterministic dkdv does not run this path: dq stages K and V itself)
      rows, rule = "K's and V's rows", "dq_kv_self: dq stages them itself"
    end
  end
  if not rows then return true end
  local keys = {}
  for _, k in ipairs({ "deterministic", "window", "softcap", "alibi", "dropout", "varlen" }) do
    if spec[k] then keys[#keys + 1] = k end
  end
  if spec.causal then keys[#keys + 1] = spec.top_left and "causal=top_left" or "causal" end
  local dim = spec.dim or spec.head_dim
  return false, string.format("the f16-scaled %s at head_dim %d%s%s drops the small entries of %s spanning more than"
    .. " 2^32 (lib/attn_bwd_f16scaled.lua %s): path=auto runs it on SIMT, path=mma keeps the f16 mma and its documented"
    .. " bound", spec.kernel, dim, (spec.vdim or dim) ~= dim and string.format(" (v_head_dim %d)", spec.vdim) or "",
    #keys > 0 and " with " .. table.concat(keys, ", ") or "", rows, rule)
end

-- Whether any query row [q_start, q_end) of the head at row index ri is marked (qsf negative): every
-- thread of the block gets the answer (a shared slot a head, two alternating with the head's parity gi so that
-- the scan's second barrier orders the next head's clearing; a head takes no other barrier when it has no tile).
-- Once a head, outside the tile loop: the tiles of a marked head add the low parts, the others pay a branch.
function M.lo_scan(b, sh, p, ri, q_start, q_end, gi, threads)
  local slot = gi & 1
  local tid = b:tid()
  b:if_(b:eq(tid, 0), function() b:store(sh.lomark + (slot ~ 1), 0.0) end)
  local any = b:var("i32", 0)
  local U = 4 -- (rows a thread reads an iteration: one iteration up to 4 x threads rows; a row past q_end reads q_start's)
  b:for_(q_start + tid, q_end, U * threads, function(row)
    local x = any:get()
    for u = 0, U - 1 do
      local at = row + u * threads
      x = x | b:bits(b:load(p.qsf + (ri + b:i64(b:select(b:lt(at, q_end), at, q_start)))))
    end
    any:set(x)
  end)
  b:if_(b:lt(any:get(), 0), function() b:store(sh.lomark + slot, 1.0) end)
  b:barrier()
  return b:gt(b:load(sh.lomark + slot), 0.0)
end

-- K's and V's rows spanning more than 2^32 (dkdv stages its key block once, so the block knows its own rows): this
-- thread's answer x (an i32, nonzero: one of its staged rows spans) ORed over the warp into the warp's shared
-- slot sh.kvmark + warp (one store a warp, no clearing); kv_marked reads the block's answer after a barrier.
function M.kv_mark(b, sh, x)
  local tid = b:tid()
  local m = b:warp_max(b:select(b:ne(x, 0), b:f32(1.0), b:f32(0.0)), 32)
  b:if_(b:eq(tid & 31, 0), function() b:store(sh.kvmark + (tid >> 5), m) end)
end
function M.kv_marked(b, sh, warps)
  local m = b:load(sh.kvmark)
  for w = 1, warps - 1 do m = b:max(m, b:load(sh.kvmark + w)) end
  return b:gt(m, 0.0)
end

-- Writes the low parts of rows [row0, row0 + rows) of a bf16 [seq, d] slice (src, row stride `stride`) into
-- the f16 tile dst (row stride cfg.ld), each row's 2^h from fsrc + r (2^-h, the magnitude); rows past seq,
-- columns past spec.dim and non-finite entries give 0. looped: the items' iterations as a loop (the key block's
-- rows, filled inside the query loop: one iteration's values live at a time), not unrolled.
function M.lo_rows(b, spec, cfg, threads, dst, src, stride, row0, rows, seq, fsrc, looped)
  local cpr, real_cpr = spec.head_dim // 8, (spec.dim or spec.head_dim) // 8
  local tid = b:tid()
  local zero = b:from_f32(0.0, "f16")
  local up = f16s.pow2(b, M.LO)
  local function put(item)
    local r, c = item // cpr, item % cpr
    local use = b:lt(row0 + r, seq)
    if real_cpr < cpr then use = b:and_(use, b:lt(c, real_cpr)) end
    local v = b:load_vec(src + b:i64(b:select(use, row0 + r, 0)) * stride + b:select(use, c, 0) * 8, 8, { align = 16 })
    local f = f16s.pow2(b, 127 - (b:bits(b:load(fsrc + r)) >> 23)) -- 2^h from 2^-h
    local out = {}
    for i = 1, 8 do
      local x = b:to_f32(v[i]) * f
      local lo = (x - b:to_f32(b:from_f32(x, "f16"))) * up
      out[i] = b:select(b:and_(use, b:lt(b:abs(x), math.huge)), b:from_f32(lo, "f16"), zero)
    end
    b:store_vec(dst + r * cfg.ld + c * 8, out, { align = 16 })
  end
  if looped then return b:for_(tid, rows * cpr, threads, put) end
  for it = 0, util.ceil_div(rows * cpr, threads) - 1 do
    local item = tid + it * threads
    if (it + 1) * threads > rows * cpr then b:if_(b:lt(item, rows * cpr), function() put(item) end) else put(item) end
  end
end

-- The deterministic dq kernel at the tile widths 96 and 128 (cfg.lofrag: the two tiles of lo_rows' low parts do not
-- fit beside Q, dO, K and V in sm_75's 64 KB): a function of the k-step kk (a runtime value: the caller's loop, so that
-- one k-step's loads are live at a time) giving the A fragment (16 x 16: rows g and g + 8 of the warp's, columns
-- 16 kk + 2t, + 1 and 16 kk + 8 + 2t, + 1; ldmatrix's order) of the low parts of this warp's rows straight from the
-- bf16 rows in memory, as lo_rows computes them: rows[hh] this thread's two rows, fsrc + r[hh] their 2^-h (r: the
-- rows within the block's), src the slice (row stride `stride`); rows past seq, columns past spec.dim and
-- non-finite entries give 0. The k-steps holding spec.dim: M.lo_steps.
function M.lo_steps(spec) return util.ceil_div(spec.dim or spec.head_dim, 16) end
function M.lo_frag(b, spec, src, stride, rows, r, seq, fsrc, t)
  local real = spec.dim or spec.head_dim
  local up = f16s.pow2(b, M.LO)
  return function(kk)
    local a = {}
    for half = 0, 1 do
      local c0 = kk * 16 + half * 8
      -- (dims are multiples of 8: only the second half of the last k-step can lie past spec.dim)
      local inside = half == 1 and real % 16 ~= 0 and b:lt(c0, real) or nil
      for hh = 0, 1 do
        local use = b:lt(rows[hh], seq)
        if inside then use = b:and_(use, inside) end
        local f = f16s.pow2(b, 127 - (b:bits(b:load(fsrc + r[hh])) >> 23)) -- 2^h from 2^-h
        local at = src + b:i64(b:select(use, rows[hh], 0)) * stride + (inside and b:select(inside, c0, 0) or c0) + t * 2
        local v = b:load_vec(at, 2, { align = 4 })
        local lo = {}
        for i = 1, 2 do
          local x = b:to_f32(v[i]) * f
          local l = (x - b:to_f32(b:from_f32(x, "f16"))) * up
          lo[i] = b:select(b:and_(use, b:lt(b:abs(x), math.huge)), l, 0.0)
        end
        a[2 * half + hh + 1] = b:pack(lo[1], lo[2], "f16")
      end
    end
    return a
  end
end

-- dkdv: copies rows [row0, row0 + rows) of a workspace slice src (f16, w wide) into the tile dst (row
-- stride cfg.ld), 16 bytes a copy; rows past seq are zeros (not row 0: P = 0 there, and 0 x Inf is NaN), stored on
-- the branch's other side (a select per element let LLVM split the copy into 8 scalar loads, selects and inserts).
function M.load_ws(b, cfg, threads, dst, src, w, row0, rows, seq)
  local cpr = w // 8
  local tid = b:tid()
  local zero = b:from_f32(0.0, "f16")
  for it = 0, util.ceil_div(rows * cpr, threads) - 1 do
    local item = tid + it * threads
    local r, c = item // cpr, item % cpr
    local copy = function()
      local to = dst + r * cfg.ld + c * 8
      b:if_(b:lt(row0 + r, seq), function()
        b:store_vec(to, b:load_vec(src + b:i64(row0 + r) * w + c * 8, 8, { align = 16 }), { align = 16 })
      end, function()
        local v = {}
        for i = 1, 8 do v[i] = zero end
        b:store_vec(to, v, { align = 16 })
      end)
    end
    if (it + 1) * threads > rows * cpr then b:if_(b:lt(item, rows * cpr), copy) else copy() end
  end
end

-- Running exponents of an A operand's two rows (this thread's C rows g and g + 8).
function M.rows_state(b) return { [0] = b:var("i32", CMIN), [1] = b:var("i32", CMIN) } end

-- 2^c of row hh: the factor the row's accumulators are multiplied by at the end.
function M.factor(b, st, hh) return f16s.pow2(b, st[hh]:get()) end

-- The A operand of the next product from the f32 C fragments c[0..n-1] (entry idx = 2 hh + e + 1 at
-- row hh, column 8 j + 2 t + e), each times colf(j, e) (the B operand's row factor; nil: 1): raises
-- the rows' running exponents st to cover this tile's largest finite |a|, rescales the accumulators
-- accs (tables acc[0..m-1][1..4] of f32 vars) of the rows that rose, and returns the entries times
-- 2^-c (below 2^15, ready for the f16 rounding of the A fragment). accs: { {acc, m}, ... }.
function M.scale_a(b, c, n, colf, st, accs)
  local a, new, grow = {}, {}, nil
  for j = 0, n - 1 do a[j] = {} end
  for hh = 0, 1 do
    local m = b:f32(0.0)
    for j = 0, n - 1 do
      for e = 0, 1 do
        local idx = 2 * hh + e + 1
        local x = colf and c[j][idx] * colf(j, e) or c[j][idx]
        a[j][idx] = x
        m = b:max(m, b:abs(x)) -- (Inf counted, NaN dropped: see INF)
      end
    end
    m = b:warp_max(m, 4) -- (the row's other columns: the quad's lanes)
    local ex = b:max((b:bits(m) >> 23) - 127, f16s.FLOOR) - ATOP
    new[hh] = b:max(st[hh]:get(), ex)
    local g = b:lt(st[hh]:get(), new[hh])
    grow = grow and b:or_(grow, g) or g
  end
  b:if_(grow, function()
    for hh = 0, 1 do
      -- 2^(old - new) in two normal factors (old - new >= CMIN - (128 - ATOP) = -228: each half >= -114)
      local diff = st[hh]:get() - new[hh]
      local d1 = diff // 2
      local f = f16s.pow2(b, d1) * f16s.pow2(b, diff - d1)
      for _, am in ipairs(accs) do
        local acc = am[1]
        for j = 0, am[2] - 1 do
          for e = 2 * hh + 1, 2 * hh + 2 do acc[j][e]:set(acc[j][e]:get() * f) end
        end
      end
    end
  end)
  for hh = 0, 1 do
    st[hh]:set(new[hh])
    local inv = f16s.pow2(b, -new[hh])
    for j = 0, n - 1 do
      for e = 0, 1 do a[j][2 * hh + e + 1] = a[j][2 * hh + e + 1] * inv end
    end
  end
  return a
end

-- The atomic dQ's A operand: dS (keys as C rows hh: this thread's keys with K factors kf[hh]; queries as
-- columns 8 j + 2 t + e of the block's bm rows) times the K factors, each query row scaled by the power
-- of two of its largest finite |a| over the block's keys (the warps' row maxima through sh.rmax, one
-- barrier); warp 0 leaves 2^c of each row in sh.dqf for dq_factor. Returns a[j][idx] below 2^15.
function M.ds_rows(b, sh, dp, nq, kf, bm, warp, lane)
  local t = lane & 3
  local a, mx = {}, {}
  for j = 0, nq - 1 do
    a[j], mx[j] = {}, {}
    for e = 0, 1 do
      local m = b:f32(0.0)
      for hh = 0, 1 do
        local idx = 2 * hh + e + 1
        local x = dp[j][idx] * kf[hh]
        a[j][idx] = x
        m = b:max(m, b:abs(x)) -- (Inf counted, NaN dropped: see INF)
      end
      for _, off in ipairs({ 4, 8, 16 }) do m = b:max(m, b:shfl("bfly", m, off)) end
      mx[j][e] = m
    end
  end
  b:if_(b:lt(lane, 4), function()
    for j = 0, nq - 1 do
      for e = 0, 1 do b:store(sh.rmax + (warp * bm + j * 8 + t * 2 + e), mx[j][e]) end
    end
  end)
  b:barrier()
  local top = {}
  for j = 0, nq - 1 do
    for e = 0, 1 do
      local col = j * 8 + t * 2 + e
      local m = b:load(sh.rmax + col)
      for w = 1, 3 do m = b:max(m, b:load(sh.rmax + (w * bm + col))) end
      local ex = b:max((b:bits(m) >> 23) - 127, f16s.FLOOR) - ATOP
      local inv = f16s.pow2(b, -ex)
      for hh = 0, 1 do a[j][2 * hh + e + 1] = a[j][2 * hh + e + 1] * inv end
      top[#top + 1] = { col, ex }
    end
  end
  b:if_(b:and_(b:eq(warp, 0), b:lt(lane, 4)), function()
    for _, x in ipairs(top) do b:store(sh.dqf + x[1], f16s.pow2(b, x[2])) end
  end)
  return a
end

-- 2^c of query row `row` (of the block's bm) for the atomic dQ's product.
function M.dq_factor(b, sh, row) return b:load(sh.dqf + row) end

return M
