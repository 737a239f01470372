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
    { name = "path", type = "enum", default = "auto", values = { "auto", "simt" },
      doc = "auto: the fastest path the target has; simt: fp32 FMA" },
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

function K.config(spec, target)
  local t = SIMT_TILES[spec.head_dim]
  local tr = SIMT_THREADS // SIMT_TC
  return {
    block = SIMT_THREADS, grid_tile = { t.m, 1, 1 }, path = "simt",
    block_m = t.m, block_n = t.n, tc = SIMT_TC, tr = tr, rm = t.m // tr, cn = t.n // SIMT_TC,
    vec = 16 // util.dtype_bytes[spec.dtype], align = 16,
    rows_per_block = t.m, max_registers = 255,
  }
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
-- f32 shared tile dst (row stride ld); rows at or past `seq` become zeros.
local function load_tile_f32(b, spec, cfg, dst, ld, src, stride, row0, rows, seq)
  local d, vec = spec.head_dim, cfg.vec
  local per_row = d // vec
  local items = rows * per_row
  local tid = b:tid()
  for it = 0, util.ceil_div(items, SIMT_THREADS) - 1 do
    local item = tid + it * SIMT_THREADS
    local r, c = item // per_row, (item % per_row) * vec
    local in_tile = (it + 1) * SIMT_THREADS <= items or nil
    local ok = b:lt(row0 + r, seq)
    if not in_tile then ok = b:and_(ok, b:lt(item, items)) end
    local vals = b:load_vec(src + b:i64(row0 + r) * stride + c, vec, { align = 16, pred = ok })
    local f = {}
    for i = 1, vec do f[i] = b:to_f32(vals[i]) end
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
      local row = q0 + rg + tr * i
      local sv, mx = {}, b:f32(NEG_INF)
      for j = 0, cn - 1 do
        local key = kv0 + cg + tc * j
        local ok = b:lt(key, p.seq_k)
        if spec.causal then ok = b:and_(ok, b:le(key, row + shift)) end
        sv[j] = b:select(ok, s[i][j]:get() * scale2, NEG_INF)
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
    load_tile_f32(b, spec, cfg, kvs, ldq, base.v, p.stride_vs, kv0, bn, p.seq_k)
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
    for jj = 0, dchunks - 1 do
      local out = {}
      for c = 0, 3 do out[c + 1] = acc[i][jj * 4 + c]:get() * inv end
      b:store_vec(orow + (cg + tc * jj) * 4, b:from_f32_vec(out, spec.out),
                  { align = 4 * util.dtype_bytes[spec.out], pred = live })
    end
    local m_use = b:select(b:eq(m[i]:get(), NEG_INF), 0.0, m[i]:get())
    local lse = b:select(empty, POS_INF, (m_use + b:lg2_approx(lsum)) * (1.0 / LOG2E))
    local lead = b:and_(live, b:eq(cg, 0))
    local has_lse = b:not_(b:is_null(p.lse))
    local idx = (b:i64(b:ctaid("z")) * b:i64(p.heads_q) + b:i64(b:ctaid("y"))) * b:i64(p.seq_q) + b:i64(row)
    b:if_(b:and_(lead, has_lse), function() b:store(p.lse + idx, lse) end)
  end
end

function K.build(b, spec, cfg)
  local p = declare(b, spec)
  b:max_registers(cfg.max_registers)
  build_simt(b, spec, cfg, p)
end

return K
