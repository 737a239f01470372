-- templates/lib/attn_bwd_f16scaled_d32.lua - the bf16 backward at head_dim 32 and 64 on sm_75: key blocks whose K and V each take one power of two.
--
-- lib/attn_bwd_f16scaled.lua runs the bf16 backward on sm_75's f16 tensor cores with every staged row
-- scaled by its own power of two. In the dkdv kernel (lib/attn_bwd_mma.lua: S^T = K Q^T with a warp's keys
-- as C rows, the query tile's rows as C columns) that puts two factors on every entry of S^T and dP^T (the
-- key row's and the query column's) and leaves the five products' scaling as work per entry; at head_dim 32
-- an entry meets half the tensor work it meets at 64, so that work, not the tensor cores, set the time
-- (docs/attention.md "bf16 on Turing"). Here, for a key block whose K rows (and V rows) all fit one power
-- of two exactly, the block's tiles take that one factor and its query tiles run a body with less work per
-- entry; every other block runs the per-row body unchanged (a branch per CTA, before its loop):
--   Block factors (stage_kv): K's and V's 64 rows are staged once per CTA. With the block's largest finite
--     |x| scaled into [2^15, 2^16), a bf16 value is exact in f16 when its scaled exponent is at least -17; the
--     block takes one factor when its smallest nonzero |x| is inside that (a span of 2^32: the per-row rule's,
--     now over the block), it holds no Inf or NaN, and it is whole (no key past seq_k). Otherwise each row
--     keeps its own factor, as before. Either way sh.kf, sh.vf hold each row's 2^-h, so the per-row body,
--     lib/attn_bwd_kvscaled.lua's rows for dq and the stores read them as before.
--   Folds on columns (the query tile's staging, a thread a row): with kT, vT the block's factors and qf, of
--     the query row's (prep's workspace), S^T's entry s becomes P' = P of = 2^(s F - L) with F = scale log2e kT
--     qf and L = lse log2e - log2 of, and dS' = dS qf = P' (dp G - D) with G = vT qf, D = delta qf / of: one
--     fma each, as the f16 kernel's (one rounding more on L: below 2^-17 of P, against f16's 2^-11). A row
--     past seq_q takes L = +inf and D = 0: P' and dS' are 0 there without a mask (its Q and dO rows are zeros
--     and K, V finite), and stay out of the key rows' maxima.
--   No masks inside a full tile: a causal tile that meets the diagonal takes the masked copy of the body.
--   The mask keys (query_loop, tile): a tile every entry of which is visible (the causal diagonal either way,
--     the window's edges: lib/attn_mask.lua key_offsets) and, with ALiBi, whose distances q + shift - k have
--     one sign runs without a mask: the bias -slope |q + shift - k| = -sl (q + shift - k0) + sl (k - k0), sl
--     = slope log2e times that sign, goes onto the column's L (one fma a column) and the key row (one add an
--     entry); softcap puts scale / softcap into the column's F (the tanh's argument, kT qf exact), P' =
--     2^(t softcap log2e - L) and dS' gains (1 - t^2). Other tiles take the masked copy, which keeps the
--     key rows' [first_q, end_q) and |q + shift - k| per entry (exact integers in f32).
--   dV += P'^T dO, dK += dS'^T Q: each key row's running power of two (lib/attn_bwd_f16scaled.lua scale_a's
--     rows, here with H bits of headroom) is applied first and checked after (scale_check): a value at or
--     above 2^15 means the row's largest grew past its range; a warp-wide maximum takes the rare branch
--     (regrow) that finds the rows' maxima, raises the exponents, rescales the accumulators and scales again,
--     so the common tile pays a multiply and a maximum an entry (and |x| for dS) instead of scale_a's four.
--   dQ (atomic): dS' goes to shared memory in f32 and each warp computes dQ^T = K^T dS^T for 8 queries of the
--     tile (A: K from the staged tile, ldmatrix .trans; B: dS' rows), scaling each query's 64 values by the
--     power of two of their largest |x| (its lanes' maxima and a quad butterfly) before the f16 rounding, and
--     the product back before the f32 atomics: per query over the block's 64 keys, as ds_rows, without the
--     per-warp column butterflies, the exchange of maxima and its barrier.
--   The dq kernel (deterministic): its 64-key tiles are the dkdv's blocks, so a tile whose rows came with one
--     factor folds it into the query rows' (dq_tile, below).
-- Error: as lib/attn_bwd_f16scaled.lua's, but for the running exponents' headroom: an A entry is lost below
-- 2^-(39 - H) of its row's largest seen (2^-39 there) and, exactly as the per-row staging, none of K and V
-- (a block takes one factor only where every value stays exact). ALiBi's split adds two f32 roundings to the
-- exponent, each below 2^-24 of slope (|q + shift - k| + 63) log2e, i.e. of log2e times the largest bias of the
-- row inside the tile (every entry of an unmasked tile is visible): below attention_bwd.ref.c's 2^-21 B.
local f16s = require("lib.attn_f16scaled")
local util = require("lib.util")
local mask = require("lib.attn_mask")
local bwd = require("lib.attn_bwd_f16scaled") -- (row_items: the staged rows' items, as its load)

local M = {}

local LOG2E = 1.4426950408889634
local ATOP = 14 -- (lib/attn_bwd_f16scaled.lua's: a row's largest |a| scaled into [2^ATOP, 2^(ATOP + 1)))
-- H: the running exponents here keep a row's largest |a| in [2^(ATOP - H), 2^(ATOP + 1 - H)), so that a
-- tile raises them (the branch) only when a row's values grow by 2^H or more (about 2^-H as often on data
-- whose rows' maxima wander within a few binades), at H bits of the f16 subnormal range.
M.H = 2
local LDF = 4 -- dS' rows in shared memory: bn + LDF floats (conflict-free stores and 8-byte loads)

-- Whether the kernel of `spec` builds this path (beside the per-row one): the dkdv kernel (atomic or
-- deterministic) and the dq kernel of bf16 on sm_75 at the tile widths 32 and 64 (head_dim up to 64, v_head_dim
-- too; at 64 the per-row body's folds and A scaling with the mask keys' per-entry work cost 1.3-1.7x f16's time by
-- the T4 estimate, this body 1.00-1.07x, in at most 250 registers: docs/attention.md "Head dim 64 on the same body"),
-- with or without the mask keys (window, softcap, ALiBi, top-left causal), not dropout or varlen (those run the
-- per-row body of lib/attn_bwd_f16scaled.lua: no mask or packed rows here). (dq
-- takes it where it reads K and V as the deterministic dkdv wrote them, cfg.kvs.)
function M.applies(spec, target, bwd)
  return bwd.applies(spec, target) and (spec.kernel == "dkdv" or spec.kernel == "dq") and (spec.head_dim == 32 or spec.head_dim == 64)
    and not spec.dropout and not spec.varlen
end

-- The shared f32 arrays this path adds (name, count): the query tile's column values (F, -L, G, -D, and
-- for the atomic dQ R = kT / qf), the block reduction's slots, and the atomic dQ's dS' rows; dq: a flag a warp.
function M.floats(spec, cfg)
  local bm, bn = cfg.block_m, cfg.block_n
  if spec.kernel == "dq" then return { { "dqflag", 2 } } end
  local t = { { "cF", bm }, { "cL", bm }, { "cG", bm }, { "cD", bm }, { "kvred", 6 * 4 } }
  if spec.alibi then t[#t + 1] = { "cQ", bm } end -- (ALiBi: the column's q + shift - k0)
  if not spec.deterministic then
    t[#t + 1] = { "cR", bm }
    t[#t + 1] = { "dsf", bm * (bn + LDF) }
  end
  return t
end
function M.float_bytes(spec, cfg)
  local n = 0
  for _, f in ipairs(M.floats(spec, cfg)) do n = n + f[2] end
  return 4 * n
end

local function exponent(b, x) return (b:bits(x) >> 23) - 127 end -- (x >= 0 finite or +inf: its binade)

-- ---- staging K and V, with the block's decision ----

-- One tensor's part of the block stage: this thread's items (row r, chunk c of 8 values) of rows
-- [row0, row0 + rows) of a bf16 [seq, d] slice, the rows' maxima (a butterfly over the row's slots) and
-- this thread's block extrema (largest finite |x|, smallest nonzero |x|, the largest |x| bit pattern:
-- at or above +inf's when an Inf or NaN is there).
local function load_items(b, spec, threads, src, stride, row0, rows, seq)
  local items = {}
  local mx, mn, nf = b:f32(0.0), b:f32(math.huge), b:i32(0)
  bwd.row_items(b, spec, threads, src, stride, row0, rows, seq, function(r, c, live, v, rmax)
    mx = b:max(mx, rmax)
    for i = 1, 8 do
      local a = b:abs(b:to_f32(v[i]))
      mn = b:min(mn, b:select(b:gt(a, 0.0), a, math.huge)) -- (NaN: not above 0; Inf: never below the minimum)
      nf = b:max(nf, b:bits(a))
    end
    items[#items + 1] = { r = r, c = c, live = live, v = v, rmax = rmax }
  end)
  return items, mx, mn, nf
end

-- Butterfly of op over the whole warp (i32 or f32 values).
local function warp_all(b, x, op)
  for _, off in ipairs({ 16, 8, 4, 2, 1 }) do x = op(x, b:shfl("bfly", x, off)) end
  return x
end

-- Stages K and V of the key block [k0, k0 + bn) into sh.ks, sh.vs (f16, row stride cfg.ld) with each row's
-- 2^-h in sh.kf, sh.vf, as lib/attn_bwd_f16scaled.lua's load, except that a block whose K (and V) fit one
-- power of two exactly takes it for every row. Returns the block's predicate and kT, vT (its factors: the
-- value of sh.kf, sh.vf in every row when it holds).
-- With cfg.kvlo a fourth result: an i32, nonzero when one of this thread's staged rows spans more than 2^32 (its
-- own factor, lib/attn_bwd_f16scaled.lua row_spans; such a block never takes one factor: it spans more too).
function M.stage_kv(b, spec, cfg, sh, kb, vb, stride_k, stride_v, k0, seq_k)
  local threads = 4 * 32
  local bn = cfg.block_n
  local tid = b:tid()
  local lane, warp = tid & 31, tid >> 5
  local t = {}
  for i, x in ipairs({ { spec, kb, stride_k, sh.ks, sh.kf }, { spec.vspec or spec, vb, stride_v, sh.vs, sh.vf } }) do
    local items, mx, mn, nf = load_items(b, x[1], threads, x[2], x[3], k0, bn, seq_k)
    mx = warp_all(b, mx, function(u, w) return b:max(u, w) end)
    mn = warp_all(b, mn, function(u, w) return b:min(u, w) end)
    nf = warp_all(b, nf, function(u, w) return b:max(u, w) end)
    t[i] = { spec = x[1], items = items, dst = x[4], fdst = x[5] }
    b:if_(b:eq(lane, 0), function()
      b:store(sh.kvred + (warp * 6 + 3 * (i - 1)), mx)
      b:store(sh.kvred + (warp * 6 + 3 * (i - 1) + 1), mn)
      b:store(sh.kvred + (warp * 6 + 3 * (i - 1) + 2), b:from_bits(nf))
    end)
  end
  b:barrier()
  local whole = b:le(k0 + bn, seq_k)
  local fast, factors = whole, {}
  for i = 1, 2 do
    local mx, mn, nf = b:f32(0.0), b:f32(math.huge), b:i32(0)
    for w = 0, 3 do
      mx = b:max(mx, b:load(sh.kvred + (w * 6 + 3 * (i - 1))))
      mn = b:min(mn, b:load(sh.kvred + (w * 6 + 3 * (i - 1) + 1)))
      nf = b:max(nf, b:bits(b:load(sh.kvred + (w * 6 + 3 * (i - 1) + 2))))
    end
    local h = f16s.scale_of(b, mx) -- 2^h puts the block's largest in [2^15, 2^16)
    -- exact: the smallest nonzero |x| (bf16: 8 significant bits) at or above 2^-17 once scaled; no Inf, NaN
    local ok = b:and_(b:ge(exponent(b, mn) + h, -17), b:lt(nf, 0x7f800000))
    fast = b:and_(fast, ok)
    factors[i] = h
  end
  local spans = cfg.kvlo and b:i32(0)
  for i = 1, 2 do
    local x = t[i]
    for _, it in ipairs(x.items) do
      local sp = (spans or cfg.kvrows) and bwd.row_spans(b, x.spec, it.v, f16s.scale_of(b, it.rmax))
      if spans then spans = spans | sp end
      local h = b:select(fast, factors[i], f16s.scale_of(b, it.rmax))
      local put = function()
        local out = f16s.convert(b, it.v, f16s.pow2(b, h))
        b:store_vec(x.dst + it.r * cfg.ld + it.c * 8, out, { align = 16 })
        b:if_(b:eq(it.c, 0), function()
          b:store(x.fdst + it.r, f16s.pow2(b, -h))
          -- (cfg.kvrows: the row's mark for dq, lib/attn_bwd_kvscaled.lua write)
          if cfg.kvrows then b:store(sh.kvrm + ((i - 1) * bn + it.r), b:select(b:ne(sp, 0), b:f32(1.0), b:f32(0.0))) end
        end)
      end
      if it.live then b:if_(it.live, put) else put() end
    end
  end
  return fast, f16s.pow2(b, -factors[1]), f16s.pow2(b, -factors[2]), spans
end

-- ---- the running exponents: scale, pack, check ----

-- The f32 C fragments x[j][1..4] (rows hh = 0, 1 of this thread: entries 2 hh + 1, 2 hh + 2), each times
-- inv[hh], into vars a[j][1..4] (packed to f16 after the rare branch, lib/attn_bwd_mma.lua c_to_a's order);
-- returns the largest scaled |x| so far (chk; signed = false: x >= 0 or NaN, no abs needed), Inf counted,
-- NaN dropped as in a row's maximum: at or above 2^15 when a row's running exponent must grow.
local function scale_check(b, x, n, inv, a, signed, chk)
  for j = 0, n - 1 do
    for idx = 1, 4 do
      local v = x[j][idx] * inv[(idx - 1) // 2]
      a[j][idx]:set(v)
      if chk then chk = b:max(chk, signed and b:abs(v) or v) end
    end
  end
  return chk
end

-- The rare branch for one A operand (its entries x times extra, a power of two; nil: 1): each row's largest
-- |x| (Inf counted, NaN dropped, as scale_a) over the quad, the running exponent raised to cover it, the
-- accumulator rows rescaled by 2^(old - new) (accs nil: the first tile, whose accumulators are zeros), the
-- scaled entries redone. Returns the larger of the two rows' maxima.
local function regrow(b, x, n, st, pk, accs, extra)
  local FLOOR = f16s.FLOOR
  local top = b:f32(0.0)
  for hh = 0, 1 do
    local m = b:f32(0.0)
    for j = 0, n - 1 do
      for e = 1, 2 do m = b:max(m, b:abs(x[j][2 * hh + e])) end
    end
    m = b:warp_max(m, 4)
    if extra then m = m * extra[hh] end
    top = b:max(top, m)
    local new = b:max(st[hh]:get(), b:max(exponent(b, m), FLOOR) - (ATOP - M.H))
    if accs then
      local diff = st[hh]:get() - new -- (>= CMIN - (128 - ATOP + H): each half a normal factor)
      local d1 = diff // 2
      local f = f16s.pow2(b, d1) * f16s.pow2(b, diff - d1)
      for _, am in ipairs(accs) do
        for j = 0, am[2] - 1 do
          for e = 2 * hh + 1, 2 * hh + 2 do am[1][j][e]:set(am[1][j][e]:get() * f) end
        end
      end
    end
    st[hh]:set(new)
  end
  local inv = { [0] = f16s.pow2(b, -st[0]:get()), [1] = f16s.pow2(b, -st[1]:get()) }
  if extra then inv[0], inv[1] = inv[0] * extra[0], inv[1] * extra[1] end
  scale_check(b, x, n, inv, pk, false, nil)
  return top
end

local function a_vars(b, n)
  local a = {}
  for j = 0, n - 1 do a[j] = { b:var("f32", 0.0), b:var("f32", 0.0), b:var("f32", 0.0), b:var("f32", 0.0) } end
  return a
end

-- The A operand (16 x 16) of k-step ks from the scaled vars a (c_to_a's order), rounded to f16.
local function a_frag(b, a, ks)
  local x, y = a[2 * ks], a[2 * ks + 1]
  return { b:pack(x[1]:get(), x[2]:get(), "f16"), b:pack(x[3]:get(), x[4]:get(), "f16"),
           b:pack(y[1]:get(), y[2]:get(), "f16"), b:pack(y[3]:get(), y[4]:get(), "f16") }
end

-- ---- the query tiles of a block that took one factor ----

-- The A fragment (16 x 16, rows m0.., columns k0..) of the transpose of a row-major tile stored [k][m]
-- (ldmatrix .trans; matrices: (m0, k0), (m0 + 8, k0), (m0, k0 + 8), (m0 + 8, k0 + 8)).
local function frag_at(b, tile, ld, lane, k0, m0)
  local row = k0 + (lane & 7) + ((lane >> 4) & 1) * 8
  return b:ldmatrix(tile + row * ld + m0 + ((lane >> 3) & 1) * 8, 4, true)
end

-- Copies rows [row0, row0 + rows) of a workspace slice src (f16, w wide: prep's Q or dO rows) into the tile
-- dst (row stride cfg.ld), 16 bytes a copy; rows past seq are zeros, written in a branch (only a tile's last rows
-- take it) instead of a select an element.
local function copy_rows(b, cfg, dst, src, w, row0, rows, seq)
  local cpr, threads = w // 8, 4 * 32
  local tid = b:tid()
  for it = 0, util.ceil_div(rows * cpr, threads) - 1 do
    local item = tid + it * threads
    local r, c = item // cpr, item % cpr
    local to = dst + r * cfg.ld + c * 8
    local copy = function()
      b:if_(b:lt(row0 + r, seq), function()
        b:store_vec(to, b:load_vec(src + b:i64(row0 + r) * w + c * 8, 8, { align = 16 }), { align = 16 })
      end, function()
        local z = b:from_f32(0.0, "f16")
        b:store_vec(to, { z, z, z, z, z, z, z, z }, { align = 16 })
      end)
    end
    if (it + 1) * threads > rows * cpr then b:if_(b:lt(item, rows * cpr), copy) else copy() end
  end
end

-- The two products of a tile over the head dim: x = A1 B1^T and y = A2 B2^T for this warp's 16 rows of A1, A2
-- (shared tiles, rows of ld halves) against n 8-wide columns of B1, B2 (dkdv: S^T and dP^T from K, V against Q,
-- dO; dq: S and dP from Q, dO against K, V), f32 accumulators.
local function products(b, c, n, a1, a2, b1, b2)
  local fr, ld, lane, warp = c.frag, c.ld, c.lane, c.warp
  local x, y = c.zeros(n), c.zeros(n)
  for kk = 0, c.kd - 1 do
    local f1 = fr.a(b, a1, ld, lane, warp * 16, kk * 16)
    local f2 = fr.a(b, a2, ld, lane, warp * 16, kk * 16)
    for jp = 0, n // 2 - 1 do
      local u1, u2 = fr.bn(b, b1, ld, lane, jp * 16, kk * 16)
      x[2 * jp] = b:mma("f16", f1, u1, x[2 * jp])
      x[2 * jp + 1] = b:mma("f16", f1, u2, x[2 * jp + 1])
      local w1, w2 = fr.bn(b, b2, ld, lane, jp * 16, kk * 16)
      y[2 * jp] = b:mma("f16", f2, w1, y[2 * jp])
      y[2 * jp + 1] = b:mma("f16", f2, w2, y[2 * jp + 1])
    end
  end
  return x, y
end

-- The dkdv kernel's loop over the query tiles [q_start, q_end) of query head (ri: its row index) for the
-- block: the body below when `fast` (stage_kv's predicate), else slow_tile(q0) (lib/attn_bwd_mma.lua's
-- per-row body). c: the kernel's context (lib/attn_bwd_mma.lua build_dkdv; c.slope2: the head's ALiBi slope).
function M.query_loop(b, c, ri, q_start, q_end, slow_tile)
  local spec = c.spec
  -- (a head holding a Q or dO row that spans more than 2^32, c.lo_marked: every tile on the per-row body, which
  -- adds the low parts' products: lib/attn_bwd_f16scaled.lua lo_scan)
  if c.lo_marked then c = setmetatable({ fast = b:and_(c.fast, b:not_(c.lo_marked)) }, { __index = c }) end
  if not c.mk then
    b:if_(c.fast, function()
      b:for_(q_start, q_end, c.bm, function(q0)
        if spec.causal then -- (a tile below the diagonal sees every key of the block: no mask)
          b:if_(b:lt(q0 + c.shift, c.k0 + c.bn - 1), function() M.tile(b, c, ri, q0, true) end,
                function() M.tile(b, c, ri, q0, false) end)
        else
          M.tile(b, c, ri, q0, false)
        end
      end)
    end, function() b:for_(q_start, q_end, c.bm, slow_tile) end)
    return
  end
  -- The mask keys: a tile whose every (query, key) entry is visible (lo <= q - k < hi: lib/attn_mask.lua
  -- key_offsets, the causal diagonal either way and the window's edges) and, with ALiBi, whose distances
  -- q + shift - k all have one sign (the bias then splits into a column and a row term) takes the body without
  -- a per-entry mask; any other the masked copy (the tiles no query row of the block sees are not visited). With a
  -- window and no ALiBi each warp decides for its own 16 keys instead (tile's wclean).
  b:if_(c.fast, function()
    local lo, hi = mask.key_offsets(c.mk)
    local last_k, last_q = c.k0 + (c.bn - 1), c.bm - 1
    b:for_(q_start, q_end, c.bm, function(q0)
      local clean, sl
      local function both(x) clean = clean and b:and_(clean, x) or x end
      if lo then both(b:ge(q0 - last_k, lo)) end
      if hi then both(b:lt(q0 + last_q - c.k0, hi)) end
      if spec.alibi then
        local pos = b:ge(q0 + c.shift - last_k, 0) -- (every distance >= 0; or every one <= 0)
        both(b:or_(pos, b:le(q0 + last_q + c.shift - c.k0, 0)))
        sl = b:select(pos, c.slope2, -c.slope2)
      end
      if spec.window and not spec.alibi then
        -- (no ALiBi: the staged column values do not depend on the mask, so each warp decides for its own 16 keys,
        -- which lie inside the window at more offsets than the block's 64)
        local kw = c.k0 + c.warp * 16
        local wclean = b:and_(b:ge(q0 - (kw + 15), lo), b:lt(q0 + last_q - kw, hi))
        M.tile(b, c, ri, q0, true, nil, wclean)
      elseif clean then
        b:if_(clean, function() M.tile(b, c, ri, q0, false, sl) end, function() M.tile(b, c, ri, q0, true) end)
      else
        M.tile(b, c, ri, q0, false) -- (softcap alone: no mask, no bias)
      end
    end)
  end, function() b:for_(q_start, q_end, c.bm, slow_tile) end)
end

-- One query tile q0 of the fast body; masked: the per-entry mask on (queries outside a key's [first_q, end_q)
-- see it not) and ALiBi's |q + shift - k| per entry; else (ALiBi) sl = slope log2e times the tile's sign of
-- q + shift - k: the bias -sl (q + shift - k0) goes onto the column's L, +sl (k - k0) onto the key row.
-- Softcap: the column's F holds scale / softcap instead of scale log2e (the tanh's argument), and
-- P' = 2^(t softcap log2e - L), dS' = P' (dp G - D) (1 - t^2) with t = tanh(s F).
-- wclean (masked, no ALiBi: the staged column values are the same either way): whether this warp's keys see every
-- query of the tile; its P', dS' then skip the mask (a branch per warp around the entries alone).
function M.tile(b, c, ri, q0, masked, sl, wclean)
  local spec, cfg, sh, p, fr = c.spec, c.cfg, c.sh, c.p, c.frag
  local d, bm, bn, ld, nq, kd, dtiles = c.d, c.bm, c.bn, c.ld, c.nq, c.kd, c.dtiles
  local tid, lane, warp, g, t = c.tid, c.lane, c.warp, c.g, c.t
  local atomic = not spec.deterministic
  b:barrier() -- the previous tile is done with Q, dO, dS' and the column values
  copy_rows(b, cfg, sh.qs, p.qh + ri * d, d, q0, bm, p.seq_q)
  copy_rows(b, cfg, sh.dos, p.doh + ri * d, d, q0, bm, p.seq_q)
  b:if_(b:lt(tid, bm), function()
    local row = q0 + tid
    local live = b:lt(row, p.seq_q)
    local r = b:i64(b:select(live, row, 0))
    local lse2 = b:load(p.lse + ri + r) * LOG2E
    local qf, of = b:load(p.qsf + ri + r), b:load(p.dosf + ri + r)
    if not cfg.lo then qf = b:abs(qf) end -- (a marked row's Q factor is negative: lib/attn_bwd_f16scaled.lua lo_applies)
    local eo = exponent(b, of) -- (of = 2^eo, a normal power of two)
    b:store(sh.cF + tid, qf * c.fscale)
    local nL = b:select(live, b:f32(eo) - lse2, -math.huge)
    if spec.alibi then
      local cq = b:f32(row + c.shift - c.k0) -- (exact: |q + shift - k0| < 2^24)
      if masked then b:store(sh.cQ + tid, cq) else nL = b:fma(cq, -sl, nL) end
    end
    b:store(sh.cL + tid, nL)
    b:store(sh.cG + tid, qf * c.vT)
    b:store(sh.cD + tid, b:select(live, b:load(p.delta + ri + r) * (qf * f16s.pow2(b, -eo)) * -1.0, 0.0))
    if atomic then b:store(sh.cR + tid, c.kT * f16s.pow2(b, -exponent(b, qf))) end -- (kT / qf, exactly)
  end)
  b:barrier()

  -- S^T and dP^T: 16 keys x bm queries per warp (as the per-row body).
  local s, dp = products(b, c, nq, sh.ks, sh.vs, sh.qs, sh.dos)
  -- P' = 2^(s F - L), dS' = P' (dp G - D) in place of S^T and dP^T (the mask keys: above).
  local span = {} -- (masked, window: the rows a key sees, end_q - first_q, 0 when none)
  if masked and spec.window then
    for hh = 0, 1 do span[hh] = b:max(c.end_q[hh] - c.first_q[hh], 0) end
  end
  local kr, kb = {}, {} -- (ALiBi: this thread's keys k - k0; the unmasked body's row term sl (k - k0))
  if spec.alibi then
    for hh = 0, 1 do
      kr[hh] = b:f32(warp * 16 + g + 8 * hh)
      if not masked then kb[hh] = sl * kr[hh] end
    end
  end
  -- P', dS' of this thread's entries, with the per-entry mask (msk) or without
  local function entries(msk)
    local ps, dss = {}, {}
    for j = 0, nq - 1 do ps[j], dss[j] = {}, {} end
    for j = 0, nq - 1 do
      for e = 0, 1 do
        local col = j * 8 + t * 2 + e
        local F, nL, G, nD = b:load(sh.cF + col), b:load(sh.cL + col), b:load(sh.cG + col), b:load(sh.cD + col)
        local cq = spec.alibi and msk and b:load(sh.cQ + col)
        for hh = 0, 1 do
          local idx = 2 * hh + e + 1
          local x, th
          if spec.softcap then
            th = mask.tanh(b, s[j][idx] * F)
            x = b:fma(th, c.mk.cap_out, nL)
          else
            x = b:fma(s[j][idx], F, nL)
          end
          if spec.alibi then
            if msk then x = b:fma(b:abs(cq - kr[hh]), -c.slope2, x) else x = x + kb[hh] end
          end
          local pv = b:ex2_approx(x)
          local ds = pv * b:fma(dp[j][idx], G, nD)
          if th then ds = ds * (1.0 - th * th) end
          if msk then
            local vis
            if c.mk then -- (the key's rows [first_q, end_q); only the bounds the keys have)
              if spec.window then vis = b:ltu(q0 + col - c.first_q[hh], span[hh]) -- (one compare for both)
              elseif spec.causal then vis = b:ge(q0 + col, c.first_q[hh]) end
            else
              vis = b:ge(q0 + col, c.first_q[hh])
            end
            if vis then pv, ds = b:select(vis, pv, 0.0), b:select(vis, ds, 0.0) end
          end
          ps[j][idx], dss[j][idx] = pv, ds
        end
      end
    end
    return ps, dss
  end
  local ps, dss
  if wclean then -- (the warp's own 16 keys decide: a warp whose entries are all visible skips the mask)
    local pvar, dvar = a_vars(b, nq), a_vars(b, nq)
    local function keep(msk)
      local x, y = entries(msk)
      for j = 0, nq - 1 do
        for idx = 1, 4 do pvar[j][idx]:set(x[j][idx]); dvar[j][idx]:set(y[j][idx]) end
      end
    end
    b:if_(wclean, function() keep(false) end, function() keep(true) end)
    ps, dss = {}, {}
    for j = 0, nq - 1 do
      ps[j], dss[j] = {}, {}
      for idx = 1, 4 do ps[j][idx], dss[j][idx] = pvar[j][idx]:get(), dvar[j][idx]:get() end
    end
  else
    ps, dss = entries(masked)
  end
  for j = 0, nq - 1 do
    for idx = 1, 4 do s[j][idx], dp[j][idx] = ps[j][idx], dss[j][idx] end
  end
  -- The A operands of dV and dK at the rows' running exponents, checked; the rare branch when one grew. The
  -- CTA's first tile (c.fresh) sets the exponents from its own maxima at once (the check would send it to the
  -- rare branch always: the exponents start at their floor, the accumulators at zero); a warp whose entries
  -- were all 0 (masked: a window's edge) stays fresh, its accumulators still 0 (or NaN where a B row holds
  -- Inf / NaN, which a rescale keeps NaN).
  local stv, stk = c.stv, c.stk
  local pv, pk = a_vars(b, nq), a_vars(b, nq)
  if atomic then -- dS' to shared memory for the dQ step (rows: the tile's queries)
    for j = 0, nq - 1 do
      for hh = 0, 1 do
        for e = 0, 1 do
          b:store(sh.dsf + (j * 8 + t * 2 + e) * (bn + LDF) + warp * 16 + g + 8 * hh, dp[j][2 * hh + e + 1])
        end
      end
    end
  end
  b:if_(b:ne(c.fresh:get(), 0), function()
    local seen = b:max(regrow(b, s, nq, stv, pv, nil), regrow(b, dp, nq, stk, pk, nil))
    seen = warp_all(b, seen, function(u, w) return b:max(u, w) end)
    c.fresh:set(b:select(b:gt(seen, 0.0), 0, 1))
  end, function()
    local inv_v = { [0] = f16s.pow2(b, -stv[0]:get()), [1] = f16s.pow2(b, -stv[1]:get()) }
    local inv_k = { [0] = f16s.pow2(b, -stk[0]:get()), [1] = f16s.pow2(b, -stk[1]:get()) }
    local chk = scale_check(b, s, nq, inv_v, pv, false, b:f32(0.0))
    chk = scale_check(b, dp, nq, inv_k, pk, true, chk)
    local grew = warp_all(b, chk, function(u, w) return b:max(u, w) end)
    b:if_(b:ge(grew, 0x1p15), function()
      regrow(b, s, nq, stv, pv, { { c.dv, dtiles } })
      regrow(b, dp, nq, stk, pk, { { c.dk, dtiles } })
    end)
  end)
  -- dV += P'^T dO, dK += dS'^T Q.
  for ks = 0, nq // 2 - 1 do
    local ap, ads = a_frag(b, pv, ks), a_frag(b, pk, ks)
    for jd = 0, dtiles // 2 - 1 do
      local o1, o2 = fr.bk(b, sh.dos, ld, lane, ks * 16, jd * 16)
      local q1, q2 = fr.bk(b, sh.qs, ld, lane, ks * 16, jd * 16)
      for x = 0, 1 do
        local j = 2 * jd + x
        local ov = { c.dv[j][1]:get(), c.dv[j][2]:get(), c.dv[j][3]:get(), c.dv[j][4]:get() }
        local kv = { c.dk[j][1]:get(), c.dk[j][2]:get(), c.dk[j][3]:get(), c.dk[j][4]:get() }
        ov = b:mma("f16", ap, x == 0 and o1 or o2, ov)
        kv = b:mma("f16", ads, x == 0 and q1 or q2, kv)
        for e = 1, 4 do
          c.dv[j][e]:set(ov[e])
          c.dk[j][e]:set(kv[e])
        end
      end
    end
  end
  if atomic then M.dq_step(b, c, ri, q0) end
end

-- The atomic dQ of the tile: warp w takes queries 8w .. 8w + 7 (dQ^T = K^T dS'^T: A the staged K tile
-- transposed, B the queries' dS' over the block's keys, each query's 64 values times the power of two of
-- their largest |x|), and adds dQ = R 2^c dQ^T (R = kT / qf) to dq_acc.
function M.dq_step(b, c, ri, q0)
  local spec, sh, p = c.spec, c.sh, c.p
  local bn, ld, lane, warp, g, t = c.bn, c.ld, c.lane, c.warp, c.g, c.t
  local dim = spec.dim or c.d
  local md = util.ceil_div(dim, 16) -- (16-row steps of the head dim; a padded head_dim stops at dim's)
  b:barrier() -- every warp's dS' is in place
  local row = sh.dsf + (warp * 8 + g) * (bn + LDF) + t * 2
  local xs, m = {}, b:f32(0.0)
  for ks = 0, bn // 16 - 1 do
    for hi = 0, 1 do
      local v = b:load_vec(row + ks * 16 + hi * 8, 2, { align = 8 })
      xs[#xs + 1] = v
      m = b:max(m, b:max(b:abs(v[1]), b:abs(v[2]))) -- (Inf counted, NaN dropped)
    end
  end
  m = b:warp_max(m, 4)
  local ex = b:max(exponent(b, m), f16s.FLOOR) - ATOP
  local inv = f16s.pow2(b, -ex)
  local acc = {}
  for mt = 0, md - 1 do acc[mt] = { 0.0, 0.0, 0.0, 0.0 } end
  for ks = 0, bn // 16 - 1 do
    local lo, hi = xs[2 * ks + 1], xs[2 * ks + 2]
    local bq = { b:pack(lo[1] * inv, lo[2] * inv, "f16"), b:pack(hi[1] * inv, hi[2] * inv, "f16") }
    for mt = 0, md - 1 do acc[mt] = b:mma("f16", frag_at(b, sh.ks, ld, lane, ks * 16, mt * 16), bq, acc[mt]) end
  end
  -- this lane's query g: R 2^c; the C fragment's columns are queries 2t, 2t + 1
  local r = b:load(sh.cR + (warp * 8 + g)) * f16s.pow2(b, ex)
  for e = 0, 1 do
    local re = b:shfl("idx", r, 8 * t + 4 * e)
    local qrow = q0 + warp * 8 + t * 2 + e
    b:if_(b:lt(qrow, p.seq_q), function()
      local at = p.dq_acc + (ri + b:i64(qrow)) * dim
      for mt = 0, md - 1 do
        for half = 0, 1 do
          local col = mt * 16 + half * 8 + g
          local add = function() b:atomic_add(at + col, acc[mt][2 * half + e + 1] * re) end
          if (mt + 1) * 16 > dim then b:if_(b:lt(col, dim), add) else add() end
        end
      end
    end)
  end
end

-- ---- the dq kernel: key tiles whose rows share one factor ----
-- The deterministic dkdv writes each key block's K and V rows with their factors for dq (lib/attn_bwd_kvscaled.lua);
-- a block that took one power of two gives every row the same one, and dq's 64-key tiles are its blocks (both
-- start at key 0 without a window; with one, dq's start at the first row's first key, and a tile across two
-- blocks takes the body where both gave their rows the same factors, dq_flags). In dq the keys are S's columns, so such a tile folds its factors into each
-- query row's: S = Q K^T is P = 2^(s F - lse) with F = scale log2e qf kT, dS = P (dp G - delta) with G = of vT,
-- and dQ's A operand dS kT 2^-c with c the row's running exponent (checked as in dkdv, the rare branch raising
-- it). Tiles past seq_k or on the causal diagonal take the masked copy; any other tile the per-row body. The
-- mask keys: dq_tile, below.

-- While the tile's rows are copied (before the barrier): whether every row of K and V inside seq_k carries
-- the factor of the tile's first row, a warp's answer in sh.dqflag (warps 0 and 1 hold the 64 rows).
function M.dq_flags(b, c, k0)
  local p, sh, tid = c.p, c.sh, c.tid
  b:if_(b:lt(tid, c.bn), function()
    local at = (b:i64(b:ctaid("z")) * b:i64(p.heads_kv) + b:i64(b:ctaid("y") // (p.heads_q // p.heads_kv)))
      * b:i64(p.seq_k)
    local row = b:min(k0 + tid, p.seq_k - 1) -- (rows past seq_k: the last row's, which counts already)
    local r, r0 = at + b:i64(row), at + b:i64(k0)
    local differ = b:or_(b:ne(b:load(p.ksf + r), b:load(p.ksf + r0)), b:ne(b:load(p.vsf + r), b:load(p.vsf + r0)))
    local any = warp_all(b, b:select(differ, 1, 0), function(u, w) return u | w end)
    b:if_(b:eq(c.lane, 0), function() b:store(sh.dqflag + c.warp, b:f32(any)) end)
  end)
end

-- Key tile k0 of dq: the body below when the tile's rows share one factor, else slow(k0) (the per-row body).
-- The mask keys: a tile takes the body without a per-entry mask where the CTA's first row sees up to its last
-- key (c.hi_first: lib/attn_mask.lua row_range), its last row from its first key (c.lo_last, a window) and,
-- with ALiBi, every distance q + shift - k has one sign (sl: slope log2e times it; the bias -sl (q + shift - k0)
-- goes onto the row, +sl (k - k0) onto the column); any other the masked copy with |q + shift - k| per entry.
function M.dq_tile(b, c, k0, slow)
  local sh, p, spec = c.sh, c.p, c.spec
  local one = b:eq(b:load(sh.dqflag) + b:load(sh.dqflag + 1), 0.0)
  if c.lo_marked then one = b:and_(one, b:not_(c.lo_marked)) end -- (Q/dO rows spanning more than 2^32: the per-row body)
  if c.kv_marked then one = b:and_(one, b:not_(c.kv_marked(k0))) end -- (and the tile's K or V rows: the per-row body)
  b:if_(one, function()
    -- a tile every row sees whole: inside seq_k, and (causal) below the first row's bound
    local whole = b:le(k0 + c.bn, p.seq_k)
    local sl
    if c.mk then
      whole = b:and_(whole, b:le(k0 + c.bn, c.hi_first))
      if c.lo_last then whole = b:and_(whole, b:le(c.lo_last, k0)) end
      if spec.alibi then
        local pos = b:ge(c.q0 + c.shift - (k0 + (c.bn - 1)), 0)
        whole = b:and_(whole, b:or_(pos, b:le(c.q0 + (c.bm - 1) + c.shift - k0, 0)))
        sl = b:select(pos, c.slope2, -c.slope2)
      end
    elseif c.spec.causal then whole = b:and_(whole, b:le(k0 + c.bn, c.q0 + c.shift + 1)) end
    b:if_(whole, function() M.dq_body(b, c, k0, false, sl) end, function() M.dq_body(b, c, k0, true) end)
  end, function()
    slow(k0)
    c.fresh:set(0) -- (the per-row body raised the exponents and added to the accumulators)
  end)
end

function M.dq_body(b, c, k0, masked, sl)
  local sh, fr, ld, lane, warp, g, t = c.sh, c.frag, c.ld, c.lane, c.warp, c.g, c.t
  local nk, kd, dtiles = c.nk, c.kd, c.dtiles
  local spec = c.spec
  local kT, vT = b:load(sh.kf), b:load(sh.vf) -- (the tile's one factor: its first row is inside seq_k)
  local F, G, extra, nl, dq0 = {}, {}, {}, {}, {}
  for hh = 0, 1 do
    local r = warp * 16 + g + 8 * hh
    F[hh] = b:load(sh.qf + r) * ((spec.softcap and c.mk.cap_in or c.scale2) * kT) -- (softcap: the tanh's argument)
    G[hh] = b:load(sh.of + r) * vT
    extra[hh] = kT
    nl[hh] = -c.lse2[hh]
    if spec.alibi then -- (masked: the row's q + shift - k0 - 2t; else the row term -sl (q + shift - k0); exact in f32)
      if masked then dq0[hh] = b:f32(c.row[hh] + c.shift - k0 - t * 2)
      else nl[hh] = b:fma(b:f32(c.row[hh] + c.shift - k0), -sl, nl[hh]) end
    end
  end
  local s, dp = products(b, c, nk, sh.qs, sh.dos, sh.ks, sh.vs)
  local kb = {} -- (ALiBi, unmasked: the column's sl (k - k0), k - k0 = j 8 + e + 2t)
  for j = 0, nk - 1 do
    for hh = 0, 1 do
      local lim = masked and c.bound[hh] - k0 - t * 2
      local lim_lo = masked and c.lo[hh] and c.lo[hh] - k0 - t * 2
      local span = lim_lo and b:max(lim - lim_lo, 0) -- (a window: one unsigned compare for both bounds)
      for e = 0, 1 do
        local idx = 2 * hh + e + 1
        local x, th
        if spec.softcap then
          th = mask.tanh(b, s[j][idx] * F[hh])
          x = b:fma(th, c.mk.cap_out, nl[hh])
        else
          x = b:fma(s[j][idx], F[hh], nl[hh])
        end
        if spec.alibi then
          if masked then x = b:fma(b:abs(dq0[hh] - (j * 8 + e)), -c.slope2, x)
          else
            kb[j * 2 + e] = kb[j * 2 + e] or sl * b:f32(t * 2 + (j * 8 + e))
            x = x + kb[j * 2 + e]
          end
        end
        local pv = b:ex2_approx(x)
        local ds = pv * b:fma(dp[j][idx], G[hh], -c.dl[hh])
        if th then ds = ds * (1.0 - th * th) end
        if masked then
          local vis = lim_lo and b:ltu(j * 8 + e - lim_lo, span) or b:lt(j * 8 + e, lim)
          ds = b:select(vis, ds, 0.0)
        end
        dp[j][idx] = ds
      end
    end
  end
  local st = c.stq
  local a = a_vars(b, nk)
  b:if_(b:ne(c.fresh:get(), 0), function() -- (the first tile: as dkdv's)
    regrow(b, dp, nk, st, a, nil, extra)
    c.fresh:set(0)
  end, function()
    local inv = { [0] = f16s.pow2(b, -st[0]:get()) * kT, [1] = f16s.pow2(b, -st[1]:get()) * kT }
    local chk = scale_check(b, dp, nk, inv, a, true, b:f32(0.0))
    local grew = warp_all(b, chk, function(u, w) return b:max(u, w) end)
    b:if_(b:ge(grew, 0x1p15), function() regrow(b, dp, nk, st, a, { { c.dq, dtiles } }, extra) end)
  end)
  for ks = 0, nk // 2 - 1 do
    local af = a_frag(b, a, ks)
    for jd = 0, dtiles // 2 - 1 do
      local k1, k2 = fr.bk(b, sh.ks, ld, lane, ks * 16, jd * 16)
      for x = 0, 1 do
        local j = 2 * jd + x
        local acc = b:mma("f16", af, x == 0 and k1 or k2, { c.dq[j][1]:get(), c.dq[j][2]:get(), c.dq[j][3]:get(), c.dq[j][4]:get() })
        for e = 1, 4 do c.dq[j][e]:set(acc[e]) end
      end
    end
  end
end

return M
