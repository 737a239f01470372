-- templates/attention.lua - attention forward, O = softmax(scale * Q K^T + mask) V (FlashAttention-2 structure).
--
-- Q, K, V, O are [batch, seq, heads, head_dim] by default; the batch, sequence and head
-- strides (in elements) are given at launch, head_dim is contiguous. Query heads are a
-- multiple of key/value heads (MHA, GQA, MQA): query head h reads kv head h / (heads_q / heads_kv).
-- Causal masking is aligned to the bottom-right corner as FlashAttention does: query i sees
-- key j iff j <= i + seq_k - seq_q. The softmax runs online in f32, in base 2 with
-- scale * log2(e) folded into the scores; exponentials use ex2.approx.f32. O is written in
-- `out`; the row log-sum-exp (natural log, of the scaled scores) in f32 as lse[batch, head, seq_q]
-- (lse may be NULL). A row that sees no key (causal, seq_q > seq_k) gets O = 0 and
-- lse = +inf, as FlashAttention-2 writes it.
--
-- Grid: problem = {seq_q, heads_q, batch}, grid_tile = {block_m, 1, 1}.
--
-- Paths (chosen from the target's capabilities, see K.config):
--   mma:  f16/bf16 where the target has tensor-core mma for the dtype (b:mma issues m16n8k16,
--         or two m16n8k8 for f16 where only those exist). 4 warps x 16 query rows; tiles in
--         shared memory in the input dtype, XOR-swizzled by 16-byte chunk (padded rows for
--         head_dim 96); Q, K and V^T fragments read with ldmatrix (.trans for V); S and O in f32
--         registers; P rounded to the input dtype and reused in registers as the A operand of
--         P V. K/V tiles double-buffered with cp.async where the target has it, otherwise loaded
--         through registers.
--   simt: f32 FMA with register tiling; any dtype on any target. Q, K and V tiles are
--         converted to f32 in shared memory; K and V take turns in one buffer.
local util = require("lib.util")

local K = {
  doc = "attention forward: O = softmax(scale * Q K^T [causal]) V, lse saved as f32",
  params = {
    { name = "dtype", type = "dtype", default = "f16", doc = "Q, K, V dtype" },
    { name = "out", type = "dtype", default = "=dtype", doc = "O dtype" },
    { name = "head_dim", type = "int", default = 64, values = { 32, 64, 96, 128, 256 },
      doc = "head dimension" },
    { name = "causal", type = "bool", default = false, doc = "causal mask (bottom-right aligned)" },
    { name = "path", type = "enum", default = "auto", values = { "auto", "mma", "simt" },
      doc = "auto: tensor cores where the target has them for the dtype; mma; simt: fp32 FMA" },
  },
}

local LOG2E = 1.4426950408889634
local NEG_INF, POS_INF = -math.huge, math.huge

-- SIMT geometry per head_dim: query rows and keys per tile (shared memory stays under 48 KiB
-- with every tile in f32). 128 threads as 16 row groups x 8 column groups.
local SIMT_TILES = {
  [32] = { m = 64, n = 64 }, [64] = { m = 64, n = 32 }, [96] = { m = 32, n = 32 },
  [128] = { m = 32, n = 32 }, [256] = { m = 16, n = 16 },
}
local SIMT_THREADS, SIMT_TC = 128, 8

-- Tensor-core geometry per head_dim: keys per tile and pipeline stages, in order of preference;
-- config takes the first whose shared memory (Q 64 x d plus stages x (K + V) of block_n x d)
-- fits the target's opt-in limit, in dynamic shared memory when it exceeds the static limit.
local MMA_TILES = {
  [32] = { { n = 64, stages = 2 } },
  [64] = { { n = 64, stages = 2 } },
  [96] = { { n = 64, stages = 2 }, { n = 32, stages = 2 } },
  [128] = { { n = 64, stages = 2 }, { n = 32, stages = 2 } },
  [256] = { { n = 16, stages = 2 }, { n = 16, stages = 1 } },
}
local MMA_WARPS = 4

function K.check(spec)
  if spec.path == "mma" and spec.dtype == "f32" then
    return "path=mma needs dtype f16 or bf16 (f32 runs on path=simt)"
  end
end

-- Whether the target has tensor-core mma for this dtype and head_dim. Where only m16n8k8 exists
-- (each 16-deep step takes two instructions), head_dim 256 needs more than 255 registers
-- (128 f32 accumulators a thread) and runs on the SIMT path instead.
local function has_mma(spec, target)
  if spec.dtype == "f32" or not target.ldmatrix then return false end
  if target.mma_m16n8k16 then return true end
  return spec.dtype == "f16" and target.mma_m16n8k8_f16 and spec.head_dim <= 128
end

local function config_mma(spec, target)
  local bm, ld = MMA_WARPS * 16, spec.head_dim == 96 and 104 or spec.head_dim
  local n, stages, bytes
  for _, t in ipairs(MMA_TILES[spec.head_dim]) do
    n, stages = t.n, target.cp_async and t.stages or 1
    bytes = (bm + 2 * stages * n) * ld * util.dtype_bytes[spec.dtype]
    if bytes <= target.smem_optin_max then break end
  end
  local dynamic = bytes > target.smem_static_max
  return {
    block = MMA_WARPS * 32, grid_tile = { bm, 1, 1 }, path = "mma",
    block_m = bm, block_n = n, stages = stages, cp_async = target.cp_async,
    ld = ld, swizzle = spec.head_dim ~= 96, dynamic_smem = dynamic and bytes or nil,
    q_in_regs = spec.head_dim <= 128, align = 16, rows_per_block = bm, max_registers = 255,
  }
end

local function config_simt(spec)
  local t = SIMT_TILES[spec.head_dim]
  local tr = SIMT_THREADS // SIMT_TC
  return {
    block = SIMT_THREADS, grid_tile = { t.m, 1, 1 }, path = "simt",
    block_m = t.m, block_n = t.n, tc = SIMT_TC, tr = tr, rm = t.m // tr, cn = t.n // SIMT_TC,
    vec = 16 // util.dtype_bytes[spec.dtype], align = 16,
    rows_per_block = t.m, max_registers = 255,
  }
end

function K.config(spec, target)
  local mma = has_mma(spec, target)
  if spec.path == "mma" and not mma then
    error(string.format("path=mma: sm_%d has no tensor-core mma for %s (use path=auto or simt)", target.sm, spec.dtype))
  end
  local cfg = (spec.path == "simt" or not mma) and config_simt(spec) or config_mma(spec, target)
  cfg.pipeline = "kiln" -- kiln's IR pipeline: proven no worse than default<O3> (docs/jit.md)
  return cfg
end

local function declare(b, spec)
  local params = {
    { "o", "ptr", spec.out }, { "lse", "ptr", "f32" },
    { "q", "ptr", spec.dtype, readonly = true }, { "k", "ptr", spec.dtype, readonly = true },
    { "v", "ptr", spec.dtype, readonly = true },
    { "batch", "i32" }, { "heads_q", "i32" }, { "heads_kv", "i32" }, { "seq_q", "i32" },
    { "seq_k", "i32" }, { "scale", "f32" },
  }
  for _, t in ipairs({ "q", "k", "v", "o" }) do
    for _, d in ipairs({ "b", "s", "h" }) do params[#params + 1] = { "stride_" .. t .. d, "i64" } end
  end
  return b:kernel{ params = params }
end

-- Keys visible to query `row` are those below this bound (seq_k; causal: also row + shift + 1),
-- so masking a key is one compare of its offset in the tile against bound - kv0.
local function key_bound(b, spec, p, row, shift)
  if not spec.causal then return p.seq_k end
  return b:min(p.seq_k, row + shift + 1)
end

-- Pointers to row 0 of this CTA's (batch, head) in q, k, v and o.
local function head_bases(b, p)
  local bi, h = b:i64(b:ctaid("z")), b:ctaid("y")
  local hkv = b:i64(h // (p.heads_q // p.heads_kv))
  local h64 = b:i64(h)
  return {
    q = p.q + bi * p.stride_qb + h64 * p.stride_qh,
    k = p.k + bi * p.stride_kb + hkv * p.stride_kh,
    v = p.v + bi * p.stride_vb + hkv * p.stride_vh,
    o = p.o + bi * p.stride_ob + h64 * p.stride_oh,
  }
end

-- Copies rows [row0, row0 + rows) of a [seq, head_dim] slice (row stride `stride`) into the
-- f32 shared tile dst (row stride ld). Rows at or past `seq` read row 0 instead (branch-free);
-- with zero_tail they become zeros (V: masked keys must add exactly nothing), otherwise their
-- values are never used unmasked (Q rows are not stored, K scores are masked).
local function load_tile_f32(b, spec, cfg, dst, ld, src, stride, row0, rows, seq, zero_tail)
  local d, vec = spec.head_dim, cfg.vec
  local per_row = d // vec
  local items = rows * per_row
  local tid = b:tid()
  for it = 0, util.ceil_div(items, SIMT_THREADS) - 1 do
    local item = tid + it * SIMT_THREADS
    local r, c = item // per_row, (item % per_row) * vec
    local in_tile = (it + 1) * SIMT_THREADS <= items or nil
    local ok = b:lt(row0 + r, seq)
    local vals = b:load_vec(src + b:i64(b:select(ok, row0 + r, 0)) * stride + c, vec, { align = 16 })
    local f = {}
    for i = 1, vec do
      f[i] = b:to_f32(vals[i])
      if zero_tail then f[i] = b:select(ok, f[i], 0.0) end
    end
    local st = function() b:store_vec(dst + r * ld + c, f, { align = 16 }) end
    if in_tile then st() else b:if_(b:lt(item, items), st) end
  end
end

local function build_simt(b, spec, cfg, p)
  local d, bm, bn, tc, tr, rm, cn = spec.head_dim, cfg.block_m, cfg.block_n, cfg.tc, cfg.tr, cfg.rm, cfg.cn
  local ldq, ldp = d + 4, bn + 4
  local qs = b:shared("f32", bm * ldq, 16)
  local kvs = b:shared("f32", bn * ldq, 16)
  local ps = b:shared("f32", bm * ldp, 16)
  local tid = b:tid()
  local rg, cg = tid // tc, tid % tc
  local q0 = b:ctaid("x") * bm
  local base = head_bases(b, p)
  local scale2 = p.scale * LOG2E
  local shift = p.seq_k - p.seq_q -- causal: query i sees keys j <= i + shift

  load_tile_f32(b, spec, cfg, qs, ldq, base.q, p.stride_qs, q0, bm, p.seq_q)

  -- Keys this CTA visits: all of them, or up to the diagonal of its last row.
  local kv_end = p.seq_k
  if spec.causal then
    kv_end = b:min(p.seq_k, b:max(b:min(q0 + bm, p.seq_q) + shift, 0))
  end

  -- Per thread: rows rg + tr*i, keys cg + tc*j of the tile, output columns 4*(cg + tc*jj)...+3.
  local dchunks = d // (4 * tc)
  local bound = {}
  for i = 0, rm - 1 do bound[i] = key_bound(b, spec, p, q0 + rg + tr * i, shift) end
  local m, l, acc = {}, {}, {}
  for i = 0, rm - 1 do
    m[i] = b:var("f32", NEG_INF)
    l[i] = b:var("f32", 0.0)
    acc[i] = {}
    for c = 0, dchunks * 4 - 1 do acc[i][c] = b:var("f32", 0.0) end
  end

  b:for_(0, kv_end, bn, function(kv0)
    b:barrier() -- the previous tile's P V is done with kvs and ps
    load_tile_f32(b, spec, cfg, kvs, ldq, base.k, p.stride_ks, kv0, bn, p.seq_k)
    b:barrier()
    -- S = Q K^T for rm x cn scores, 4 head-dim elements at a time.
    local s = {}
    for i = 0, rm - 1 do
      s[i] = {}
      for j = 0, cn - 1 do s[i][j] = b:var("f32", 0.0) end
    end
    b:for_(0, d, 4, function(kk)
      local qv, kv = {}, {}
      for i = 0, rm - 1 do qv[i] = b:load_vec(qs + (rg + tr * i) * ldq + kk, 4, { align = 16 }) end
      for j = 0, cn - 1 do kv[j] = b:load_vec(kvs + (cg + tc * j) * ldq + kk, 4, { align = 16 }) end
      for i = 0, rm - 1 do
        for j = 0, cn - 1 do
          local a = s[i][j]:get()
          for e = 1, 4 do a = b:fma(qv[i][e], kv[j][e], a) end
          s[i][j]:set(a)
        end
      end
    end)
    -- Online softmax in base 2; masked scores are -inf.
    for i = 0, rm - 1 do
      local lim = bound[i] - kv0 - cg
      local sv, mx = {}, b:f32(NEG_INF)
      for j = 0, cn - 1 do
        sv[j] = b:select(b:lt(tc * j, lim), s[i][j]:get() * scale2, NEG_INF)
        mx = b:max(mx, sv[j])
      end
      local m_old = m[i]:get()
      local m_new = b:max(m_old, b:warp_max(mx, tc))
      local m_use = b:select(b:eq(m_new, NEG_INF), 0.0, m_new)
      local alpha = b:ex2_approx(m_old - m_use)
      local sum = b:f32(0.0)
      for j = 0, cn - 1 do
        local pv = b:ex2_approx(sv[j] - m_use)
        sum = sum + pv
        b:store(ps + (rg + tr * i) * ldp + (cg + tc * j), pv)
      end
      m[i]:set(m_new)
      l[i]:set(b:fma(l[i]:get(), alpha, sum))
      for c = 0, dchunks * 4 - 1 do acc[i][c]:set(acc[i][c]:get() * alpha) end
    end
    b:barrier() -- everyone is done with K; P is complete
    load_tile_f32(b, spec, cfg, kvs, ldq, base.v, p.stride_vs, kv0, bn, p.seq_k, true)
    b:barrier()
    -- O += P V, 4 keys at a time.
    b:for_(0, bn, 4, function(kk)
      local pv = {}
      for i = 0, rm - 1 do pv[i] = b:load_vec(ps + (rg + tr * i) * ldp + kk, 4, { align = 16 }) end
      for e = 0, 3 do
        local vrow = kvs + (kk + e) * ldq
        for jj = 0, dchunks - 1 do
          local vv = b:load_vec(vrow + (cg + tc * jj) * 4, 4, { align = 16 })
          for i = 0, rm - 1 do
            for c = 0, 3 do
              local a = acc[i][jj * 4 + c]
              a:set(b:fma(pv[i][e + 1], vv[c + 1], a:get()))
            end
          end
        end
      end
    end)
  end)

  -- O = acc / l; lse = (m + log2 l) ln 2. Rows that saw no key: O = 0, lse = +inf.
  for i = 0, rm - 1 do
    local row = q0 + rg + tr * i
    local live = b:lt(row, p.seq_q)
    local lsum = b:warp_sum(l[i]:get(), tc)
    local empty = b:le(lsum, 0.0)
    local inv = b:select(empty, 0.0, 1.0 / lsum)
    local orow = base.o + b:i64(b:select(live, row, 0)) * p.stride_os
    local vals = {}
    for jj = 0, dchunks - 1 do
      local out = {}
      for c = 0, 3 do out[c + 1] = acc[i][jj * 4 + c]:get() * inv end
      vals[jj] = b:from_f32_vec(out, spec.out)
    end
    b:if_(live, function()
      for jj = 0, dchunks - 1 do
        b:store_vec(orow + (cg + tc * jj) * 4, vals[jj], { align = 4 * util.dtype_bytes[spec.out] })
      end
    end)
    local m_use = b:select(b:eq(m[i]:get(), NEG_INF), 0.0, m[i]:get())
    local lse = b:select(empty, POS_INF, (m_use + b:lg2_approx(lsum)) * (1.0 / LOG2E))
    local lead = b:and_(live, b:eq(cg, 0))
    local has_lse = b:not_(b:is_null(p.lse))
    local idx = (b:i64(b:ctaid("z")) * b:i64(p.heads_q) + b:i64(b:ctaid("y"))) * b:i64(p.seq_q) + b:i64(row)
    b:if_(b:and_(lead, has_lse), function() b:store(p.lse + idx, lse) end)
  end
end

-- ---- tensor-core path ----

-- Element offset of 16-byte chunk `chunk` of row `row` in a tile with row stride cfg.ld.
-- Swizzled tiles XOR the chunk with the row's low bits (d >= 64: row & 7; d = 32, four chunks a
-- row: (row >> 1) & 3), so the 8 rows an ldmatrix reads at one chunk hit different banks.
local function swz(spec, cfg, row, chunk)
  if not cfg.swizzle then return row * cfg.ld + chunk * 8 end
  local bits = spec.head_dim >= 64 and (row & 7) or ((row >> 1) & 3)
  return row * cfg.ld + (chunk ~ bits) * 8
end

-- Issues the copy of rows [row0, row0 + rows) of a [seq, d] slice into the tile at dst: cp.async
-- where the target has it (rows past seq zero-filled), else loads and stores through registers
-- (rows past seq read row 0, zeroed when zero_tail).
local function mma_load_tile(b, spec, cfg, dst, src, stride, row0, rows, seq, zero_tail)
  local cpr = spec.head_dim // 8
  local tid = b:tid()
  local threads = MMA_WARPS * 32
  for it = 0, util.ceil_div(rows * cpr, threads) - 1 do
    local item = tid + it * threads
    local r, c = item // cpr, item % cpr
    local partial = (it + 1) * threads > rows * cpr
    local ok = b:lt(row0 + r, seq)
    local from = src + b:i64(b:select(ok, row0 + r, 0)) * stride + c * 8
    local to = dst + swz(spec, cfg, r, c)
    local issue = function()
      if cfg.cp_async then
        b:cp_async(to, from, { pred = ok })
      else
        local v = b:load_vec(from, 8, { align = 16 })
        if zero_tail then
          local zero = b:from_f32(0.0, spec.dtype)
          for i = 1, 8 do v[i] = b:select(ok, v[i], zero) end
        end
        b:store_vec(to, v, { align = 16 })
      end
    end
    if partial then b:if_(b:lt(item, rows * cpr), issue) else issue() end
  end
end

-- The A fragments of Q for head-dim step kk (16 columns) of this warp's 16 rows.
local function q_frag(b, spec, cfg, qs, lane, warp, kk)
  local row = warp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8
  return b:ldmatrix(qs + swz(spec, cfg, row, (lane >> 4) + 2 * kk), 4)
end

local function build_mma(b, spec, cfg, p)
  local d, bm, bn, stages = spec.head_dim, cfg.block_m, cfg.block_n, cfg.stages
  local dt = spec.dtype
  local qs, ks, vs
  if cfg.dynamic_smem then
    qs = b:dynamic_shared(dt)
    ks = qs + bm * cfg.ld
    vs = ks + stages * bn * cfg.ld
  else
    qs = b:shared(dt, bm * cfg.ld, 128)
    ks = b:shared(dt, stages * bn * cfg.ld, 128)
    vs = b:shared(dt, stages * bn * cfg.ld, 128)
  end
  local tile = bn * cfg.ld
  local tid = b:tid()
  local lane, warp = tid & 31, tid >> 5
  local g, t = lane >> 2, lane & 3
  local q0 = b:ctaid("x") * bm
  local base = head_bases(b, p)
  local scale2 = p.scale * LOG2E
  local shift = p.seq_k - p.seq_q
  local kv_end = p.seq_k
  if spec.causal then kv_end = b:min(p.seq_k, b:max(b:min(q0 + bm, p.seq_q) + shift, 0)) end
  local ntiles = (kv_end + (bn - 1)) // bn
  local nt, dtiles = bn // 8, d // 8

  local function load_k(it, buf) mma_load_tile(b, spec, cfg, ks + buf * tile, base.k, p.stride_ks, it * bn, bn, p.seq_k) end
  local function load_v(it, buf) mma_load_tile(b, spec, cfg, vs + buf * tile, base.v, p.stride_vs, it * bn, bn, p.seq_k, true) end
  local function load_kv(it, buf) load_k(it, buf); load_v(it, buf) end

  -- Q (and the first K/V tile) in flight.
  mma_load_tile(b, spec, cfg, qs, base.q, p.stride_qs, q0, bm, p.seq_q)
  if cfg.cp_async then b:cp_async_commit() end
  if stages == 2 then
    b:if_(b:gt(ntiles, 0), function() load_kv(0, 0) end)
    b:cp_async_commit()
    b:cp_async_wait(1)
  elseif cfg.cp_async then
    b:cp_async_wait(0)
  end
  b:barrier()
  local qf = {}
  if cfg.q_in_regs then
    for kk = 0, d // 16 - 1 do qf[kk] = q_frag(b, spec, cfg, qs, lane, warp, kk) end
  end

  local m, l, acc, bound = {}, {}, {}, {}
  for h = 0, 1 do
    bound[h] = key_bound(b, spec, p, q0 + warp * 16 + g + h * 8, shift)
    m[h] = b:var("f32", NEG_INF)
    l[h] = b:var("f32", 0.0)
  end
  for j = 0, dtiles - 1 do
    acc[j] = {}
    for e = 1, 4 do acc[j][e] = b:var("f32", 0.0) end
  end

  -- Per-lane ldmatrix row and chunk offsets: K (matrices: key tiles x head-dim halves) and
  -- V^T (.trans; matrices: key halves x head-dim tiles).
  local k_row = (lane & 7) + ((lane >> 4) << 3)
  local k_chunk = (lane >> 3) & 1
  local v_row = (lane & 7) + (((lane >> 3) & 1) << 3)
  local v_chunk = lane >> 4

  b:for_(0, ntiles, 1, function(it)
    local buf = 0
    if stages == 2 then
      buf = it & 1
      b:if_(b:lt(it + 1, ntiles), function() load_kv(it + 1, (it + 1) & 1) end)
      b:cp_async_commit()
      b:cp_async_wait(1)
      b:barrier()
    else
      -- One buffer: K lands first; V is in flight during S (cp.async) or is loaded through
      -- registers after the softmax, when fewer registers are live.
      b:barrier()
      load_k(it, 0)
      if cfg.cp_async then
        b:cp_async_commit()
        load_v(it, 0)
        b:cp_async_commit()
        b:cp_async_wait(1)
      end
      b:barrier()
    end
    local kt, vt = ks + buf * tile, vs + buf * tile
    local kv0 = it * bn

    -- S = Q K^T: nt tiles of 16 x 8, f32.
    local s = {}
    for j = 0, nt - 1 do s[j] = { b:f32(0.0), b:f32(0.0), b:f32(0.0), b:f32(0.0) } end
    for kk = 0, d // 16 - 1 do
      local a = qf[kk] or q_frag(b, spec, cfg, qs, lane, warp, kk)
      for jp = 0, nt // 2 - 1 do
        local kf = b:ldmatrix(kt + swz(spec, cfg, k_row + jp * 16, k_chunk + 2 * kk), 4)
        s[2 * jp] = b:mma(dt, a, { kf[1], kf[2] }, s[2 * jp])
        s[2 * jp + 1] = b:mma(dt, a, { kf[3], kf[4] }, s[2 * jp + 1])
      end
    end

    -- Online softmax for rows g (h = 0) and g + 8 (h = 1) of the warp's 16.
    local pv = {}
    for j = 0, nt - 1 do pv[j] = {} end
    for h = 0, 1 do
      local lim = bound[h] - kv0 - t * 2
      local sv, mx = {}, b:f32(NEG_INF)
      for j = 0, nt - 1 do
        for e = 0, 1 do
          local v = b:select(b:lt(j * 8 + e, lim), s[j][2 * h + e + 1] * scale2, NEG_INF)
          sv[#sv + 1] = v
          mx = b:max(mx, v)
        end
      end
      local m_old = m[h]:get()
      local m_new = b:max(m_old, b:warp_max(mx, 4))
      local m_use = b:select(b:eq(m_new, NEG_INF), 0.0, m_new)
      local alpha = b:ex2_approx(m_old - m_use)
      local sum = b:f32(0.0)
      for j = 0, nt - 1 do
        for e = 0, 1 do
          local x = b:ex2_approx(sv[j * 2 + e + 1] - m_use)
          sum = sum + x
          pv[j][2 * h + e + 1] = x
        end
      end
      m[h]:set(m_new)
      l[h]:set(b:fma(l[h]:get(), alpha, sum))
      for j = 0, dtiles - 1 do
        for e = 1, 2 do acc[j][2 * h + e]:set(acc[j][2 * h + e]:get() * alpha) end
      end
    end

    if stages == 1 then
      if cfg.cp_async then b:cp_async_wait(0) else load_v(it, 0) end
      b:barrier()
    end
    -- O += P V with P as the A operand straight from the S registers.
    local o = {}
    for j = 0, dtiles - 1 do o[j] = { acc[j][1]:get(), acc[j][2]:get(), acc[j][3]:get(), acc[j][4]:get() } end
    for kstep = 0, nt // 2 - 1 do
      local p0, p1 = pv[2 * kstep], pv[2 * kstep + 1]
      local a = { b:pack(p0[1], p0[2], dt), b:pack(p0[3], p0[4], dt), b:pack(p1[1], p1[2], dt), b:pack(p1[3], p1[4], dt) }
      for dp = 0, dtiles // 2 - 1 do
        local vf = b:ldmatrix(vt + swz(spec, cfg, v_row + kstep * 16, v_chunk + 2 * dp), 4, true)
        o[2 * dp] = b:mma(dt, a, { vf[1], vf[2] }, o[2 * dp])
        o[2 * dp + 1] = b:mma(dt, a, { vf[3], vf[4] }, o[2 * dp + 1])
      end
    end
    for j = 0, dtiles - 1 do
      for e = 1, 4 do acc[j][e]:set(o[j][e]) end
    end
    if stages == 2 then b:barrier() end -- the next iteration refills this buffer
  end)

  -- O = acc / l, rounded once; lse from lanes t == 0.
  local ob = util.dtype_bytes[spec.out]
  for h = 0, 1 do
    local row = q0 + warp * 16 + g + h * 8
    local live = b:lt(row, p.seq_q)
    local lsum = b:warp_sum(l[h]:get(), 4)
    local empty = b:le(lsum, 0.0)
    local inv = b:select(empty, 0.0, 1.0 / lsum)
    local orow = base.o + b:i64(b:select(live, row, 0)) * p.stride_os + t * 2
    local vals = {}
    for j = 0, dtiles - 1 do
      vals[j] = b:from_f32_vec({ acc[j][2 * h + 1]:get() * inv, acc[j][2 * h + 2]:get() * inv }, spec.out)
    end
    b:if_(live, function()
      for j = 0, dtiles - 1 do b:store_vec(orow + j * 8, vals[j], { align = 2 * ob }) end
    end)
    local m_use = b:select(b:eq(m[h]:get(), NEG_INF), 0.0, m[h]:get())
    local lse = b:select(empty, POS_INF, (m_use + b:lg2_approx(lsum)) * (1.0 / LOG2E))
    local idx = (b:i64(b:ctaid("z")) * b:i64(p.heads_q) + b:i64(b:ctaid("y"))) * b:i64(p.seq_q) + b:i64(row)
    b:if_(b:and_(b:and_(live, b:eq(t, 0)), b:not_(b:is_null(p.lse))), function() b:store(p.lse + idx, lse) end)
  end
end

function K.build(b, spec, cfg)
  local p = declare(b, spec)
  b:max_registers(cfg.max_registers)
  if cfg.path == "mma" then build_mma(b, spec, cfg, p) else build_simt(b, spec, cfg, p) end
end

return K
