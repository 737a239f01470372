-- templates/attention_bwd.lua - attention backward: dQ, dK, dV of O = softmax(scale * Q K^T [causal]) V
-- (FlashAttention-2 algorithm), as a sequence of kernels picked by `kernel`.
--
-- Tensors follow the forward (templates/attention.lua): Q, K, V, O, dO and the gradients are
-- [batch, seq, heads, head_dim] through batch/sequence/head strides given at launch (head_dim
-- contiguous); lse is the forward's f32 [batch, heads_q, seq_q] log-sum-exp (+inf for a row that
-- sees no key: its gradients are 0); causal masking is bottom-right aligned (query i sees key j iff
-- j <= i + seq_k - seq_q) or top-left (causal=top_left), with the forward's window, softcap and
-- alibi keys (lib/attn_mask.lua; the softcap's gradient through tanh's derivative);
-- query head h reads kv head h / (heads_q / heads_kv). Workspace in f32:
-- delta [batch, heads_q, seq_q] and dq_acc [batch, heads_q, seq_q, head_dim]. head_dim: any multiple of 8
-- up to 256; the builders see it padded to the next tile width (lib/attn_dims.lua), the real one as spec.dim.
--
-- The sequence (runtime/rt_attention_bwd.c runs it):
--   kernel=prep     delta = rowsum(dO * O) in f32; zeroes dq_acc when it is given.
--                   problem {seq_q, heads_q, batch}.
--   kernel=dkdv     one CTA per block of keys of one kv head: loops over the query heads of its
--                   group and the query tiles that see its keys (causal: fully masked tiles are
--                   skipped), recomputes P = exp(scale S - lse) and dS = P (dP - delta) with
--                   dP = dO V^T, and accumulates dV = P^T dO and dK = scale dS^T Q in registers (GQA:
--                   summed over the group without atomics). Unless deterministic=true it also adds
--                   dS K to dq_acc with f32 atomics. problem {seq_k, heads_kv, batch}.
--   kernel=convert  dQ = scale * dq_acc, rounded to `grad`. problem {seq_q, heads_q, batch}.
--   kernel=dq       deterministic=true instead of the atomics and convert: one CTA per query tile
--                   recomputes S and dP over the keys it sees and sums dQ = scale dS K in registers,
--                   in key order. Costs a second recompute of Q K^T and dO V^T (7 tile products
--                   per (query, key) tile instead of 5) but no atomics and no dq_acc; the result is
--                   bit-identical run to run. problem {seq_q, heads_q, batch}.
--
-- Paths of dkdv and dq (prep and convert are elementwise), chosen from the target's capabilities:
--   mma:  f16/bf16 with O/dO in the same dtype, head_dim <= 128, where the target has tensor-core
--         mma for the dtype (m16n8k16 sm_80+, m16n8k8 f16 sm_75): templates/lib/attn_bwd_mma.lua; bf16 on
--         sm_75 on the f16 mma through exact power-of-two scaling (lib/attn_bwd_f16scaled.lua; what it
--         serves, under auto as under mma); f16 at head_dim 136-256 on sm_75's m16n8k8, two warps a 16-key or
--         16-row group each holding half of the columns (lib/attn_bwd_mma.lua M.csplit), and bf16's dq kernel there
--         on the f16-scaled path with the same split (wave 25), and bf16's deterministic dkdv there under path=mma
--         (its documented bound; path=auto and the atomic one: SIMT).
--   simt: f32 FMA with every tile in shared memory as f32, any dtype on any target (f32, bf16 on
--         sm_75 where the f16-scaled path does not serve, head_dim 136-256 but f16 and bf16's dq on sm_75, out != dtype):
--         templates/lib/attn_bwd_simt.lua.
-- Exponentials use ex2.approx.f32 as the forward does.
-- varlen=true (lib/attn_varlen.lua): every kernel on packed sequences as the forward's; grids from
-- max_seqlen_q (dkdv: max_seqlen_k); lse, delta [heads_q, total_q], dq_acc [heads_q, total_q, head_dim].
local util = require("lib.util")
local simt = require("lib.attn_bwd_simt")
local mma = require("lib.attn_bwd_mma")
local f16s = require("lib.attn_bwd_f16scaled")
local kvs = require("lib.attn_bwd_kvscaled")
local bwd_wgmma = require("lib.attn_bwd_wgmma")
local mask = require("lib.attn_mask")
local dropout = require("lib.attn_dropout")
local varlen = require("lib.attn_varlen")
local dims = require("lib.attn_dims")
local vdim = require("lib.attn_vdim")

local K = {
  doc = "attention backward (FlashAttention-2): prep (delta), dkdv (+dQ atomics), convert (dQ), dq (deterministic dQ)",
  params = {
    { name = "kernel", type = "enum", default = "dkdv", values = { "dkdv", "prep", "convert", "dq" },
      doc = "which kernel of the sequence" },
    { name = "dtype", type = "dtype", default = "f16", doc = "Q, K, V dtype" },
    { name = "out", type = "dtype", default = "=dtype", doc = "O and dO dtype" },
    { name = "grad", type = "dtype", default = "=dtype", doc = "dQ, dK, dV dtype" },
    { name = "head_dim", type = "int", default = 64, min = 8, max = 512,
      doc = "head dimension: a multiple of 8 up to 256 (tiles of the next width of 32, 64, 96, 128, 256, the columns past head_dim zero); 512 is refused" },
    vdim.KEY,
    mask.CAUSAL,
    { name = "path", type = "enum", default = "auto", values = { "auto", "mma", "simt", "wgmma" },
      doc = "dkdv, dq: auto = tensor cores where the target has them for the dtype (head_dim <= 128, or f16 136-256 on sm_75's m16n8k8 without dropout, nor varlen in the atomic dkdv, and bf16's dq there, out = dtype; bf16 on sm_75: the f16-scaled mma where its kernel holds the bf16 path's bound for rows spanning more than 2^32, else SIMT (lib/attn_bwd_f16scaled.lua holds); mma: there too); wgmma: dkdv on sm_90a's TMA + wgmma (FlashAttention-3's structure, opt-in; lib/attn_bwd_wgmma.lua)" },
    { name = "deterministic", type = "bool", default = false,
      doc = "kernel=dkdv only: no dQ atomics, dQ comes from kernel=dq (reproducible bits)" },
    mask.KEYS[1], mask.KEYS[2], mask.KEYS[3], dropout.KEYS[1], dropout.KEYS[2], varlen.KEY,
  },
}

-- The spec as the builders read it: mask keys normalized, head_dim padded to the width that holds
-- head_dim (spec.dim: Q, K, dQ, dK) and v_head_dim (spec.vdim: V, O, dO, dV; lib/attn_vdim.lua).
local function bspec(spec)
  return vdim.apply(dims.spec(mask.spec(spec)))
end

function K.check(spec)
  local why = dropout.check(spec) or bwd_wgmma.check(spec)
  if why then return why end
  local d = spec.head_dim
  if d > 256 and d % 8 == 0 then
    return string.format("head_dim=%d is refused on every target: the forward refuses it (O alone would need %d f32 registers a thread on the tensor-core path), so no forward gives this backward its O and lse; head_dim goes up to 256", d, d // 2)
  end
  local bad = dims.check(d) or vdim.check(spec)
  if bad then return bad end
  spec = bspec(spec)
  if spec.path == "mma" and (spec.kernel == "prep" or spec.kernel == "convert") then
    return "path=mma applies to kernel=dkdv and kernel=dq (prep and convert are elementwise)"
  end
  if spec.path == "mma" and (spec.dtype == "f32" or spec.out ~= spec.dtype or (spec.head_dim > 128 and spec.dtype ~= "f16" and not (spec.dtype == "bf16" and (spec.kernel == "dq" or spec.deterministic)))) then
    return "path=mma needs dtype f16 or bf16, out = dtype and head_dim <= 128, or f16 at head_dim 136-256 (sm_75's"
      .. " m16n8k8, two warps a group: lib/attn_bwd_mma.lua M.csplit; bf16's dq kernel and deterministic dkdv there too, its"
      .. " atomic dkdv not yet);"
      .. " others run on path=simt"
  end
  if spec.deterministic and spec.kernel ~= "dkdv" then
    return "deterministic=true applies to kernel=dkdv only (kernel=dq is the deterministic dQ; prep and convert serve both)"
  end
end

local LOG2E = 1.4426950408889634
local ROW_THREADS, ROWS_PER_WARP = 128, 4 -- prep and convert: a warp per row, 4 rows a warp

local function stride_params(params, names)
  for _, t in ipairs(names) do
    for _, d in ipairs({ "b", "s", "h" }) do params[#params + 1] = { "stride_" .. t .. d, "i64" } end
  end
  return params
end

function K.config(spec, target)
  spec = bspec(spec)
  local es = math.max(util.dtype_bytes[spec.dtype], util.dtype_bytes[spec.out])
  if spec.kernel == "prep" or spec.kernel == "convert" then
    local rows = (ROW_THREADS // 32) * ROWS_PER_WARP
    return { block = ROW_THREADS, grid_tile = { rows, 1, 1 }, rows_per_block = rows, threads_per_row = 32,
             align = util.dtype_bytes[spec.kernel == "prep" and spec.out or spec.grad],
             f16s = spec.kernel == "prep" and f16s.prep_applies(spec, target) or nil } -- (prep: Q, dO scaled once)
  end
  local cfg = bwd_wgmma.config(spec, target) -- sm_90a: TMA + wgmma dkdv (lib/attn_bwd_wgmma.lua)
  if cfg then return cfg end
  local avail, why = mma.available(spec, target)
  local use_mma = (spec.kernel == "dkdv" or spec.kernel == "dq") and spec.path ~= "simt" and avail
  if spec.path == "mma" and not use_mma then
    error(string.format("path=mma: %s (use path=auto or simt)", why and string.format("sm_%d: %s", target.sm, why)
      or string.format("sm_%d has no tensor-core mma for %s", target.sm, spec.dtype)))
  end
  if use_mma then cfg = mma.config(spec, target, {}) else cfg = simt.config(spec, target, {}) end
  cfg.kvs = use_mma and cfg.f16s and kvs.applies(spec, target, mma.available) or nil -- (K, V scaled once for dq)
  local tile = spec.kernel == "dkdv" and cfg.block_n or cfg.block_m
  cfg.grid_tile = { tile, 1, 1 }
  cfg.rows_per_block = tile
  cfg.align = use_mma and 16 or 4 * es
  cfg.max_registers = 255
  -- (bf16 on sm_75, the atomic dkdv at head_dim 64 with a window and ALiBi but no softcap, either causal form: the
  -- two tile bodies side by side, lib/attn_bwd_f16scaled_d32.lua's (228 registers alone) and the per-row one (216
  -- alone), spilled 12 bytes at 255 registers under default<O3>, the family's pipeline; kiln's IR pipeline
  -- (gen/gen_lower.c) gives 241 and none. Every other variant keeps default<O3>: docs/attention.md "A spill left".
  -- Not with the low parts' walk, cfg.lowalk: default<O3> fits there, 0 bytes, and kiln's pipeline cost the tile
  -- loop 1.00x -> 1.18-1.20x f16's T4 estimate, wave 19)
  -- (f16 at the tile width 256 on sm_75, the atomic dkdv's column split with a window and the softcap, either causal
  -- form, lib/attn_bwd_mma.lua M.csplit: default<O3> spilled 8 bytes at head_dim 248 and 16 at 256, 24 at both with
  -- ALiBi too (255 registers, ptxas sm_75, wave 24); kiln's pipeline fits them in 254-255 with none. Below 248
  -- default<O3> fits (d200 with all three 242 registers; head_dim 192 with v_head_dim 128 212, where kiln's pipeline
  -- gave 16 SASS instructions more), and so do the deterministic dkdv and the other keys: 236-252)
  if cfg.csplit and spec.kernel == "dkdv" and not spec.deterministic and spec.window and spec.softcap
      and (spec.dim or spec.head_dim) > 200 then
    cfg.pipeline = "kiln"
  end
  if cfg.d32 and spec.kernel == "dkdv" and not spec.deterministic and spec.dim == 64 and spec.vdim == 64 and spec.window
      and spec.alibi and not spec.softcap and not cfg.lowalk then
    cfg.pipeline = "kiln"
  end
  return cfg
end

-- Keys below the bound are visible to query `row` (seq_k; causal: also row + shift + 1).
local function key_bound(b, spec, p, row)
  if not spec.causal then return p.seq_k end
  return b:min(p.seq_k, row + (p.seq_k - p.seq_q) + 1)
end

-- With window/softcap/alibi/top_left (mask.any), the hooks simt.scores and the mma kernels take (lib/attn_mask.lua has the
-- semantics): range(row) -> lo (nil: 0), hi of the keys row sees; score(s, row, key, head) -> the
-- base-2 score and, with the softcap, tanh for the derivative (nil when the plain scale * s applies);
-- score_scaled(u, row, key, head) the same of u = s * score_in.
local function mask_hooks(b, spec, p)
  if not mask.any(spec) then return nil end
  local mk = mask.setup(b, spec, p)
  local hooks = { mask = mk }
  function hooks.range(row) return mask.row_range(mk, row) end
  if spec.softcap or spec.alibi then
    local scale2 = p.scale * LOG2E
    function hooks.score(s, row, key, slope2)
      return mask.score(mk, s, scale2, slope2, spec.alibi and b:f32(row + mk.shift - key))
    end
    -- (the same of u = s * score_in: a kernel that folds score_in into a row factor)
    hooks.score_in = spec.softcap and mk.cap_in or scale2
    function hooks.score_scaled(u, row, key, slope2)
      return mask.score_scaled(mk, u, slope2, spec.alibi and b:f32(row + mk.shift - key))
    end
  end
  return hooks
end

-- Index of (batch, head, row 0) in [batch, heads_q, seq_q] (i64; varlen: [heads_q, total_q]).
local function row_index(b, p, bi, h)
  if p.rows then return p.rows(h) end
  return (b:i64(bi) * b:i64(p.heads_q) + b:i64(h)) * b:i64(p.seq_q)
end

-- Pointer to row 0 of (batch bi, head h) in tensor t.
local function base(b, p, t, bi, h)
  return p[t] + b:i64(bi) * p["stride_" .. t .. "b"] + b:i64(h) * p["stride_" .. t .. "h"]
end

-- Calls fn(col) for this lane's column lane + 32c of a head_dim row when it is inside spec.dim
-- (a padded head_dim, lib/attn_dims.lua: the columns past it are neither read nor stored).
local function lane_cols(b, spec, lane, c, fn)
  local grp = dims.group(spec, c)
  if grp == "all" then fn(lane + 32 * c)
  elseif grp == "some" then b:if_(b:lt(lane + 32 * c, spec.dim), function() fn(lane + 32 * c) end) end
end

-- ---- prep: delta = rowsum(dO * O); dq_acc rows zeroed ----
local function build_prep(b, spec, cfg)
  local first = {
    { "delta", "ptr", "f32" }, { "dq_acc", "ptr", "f32" },
    { "o", "ptr", spec.out, readonly = true }, { "dout", "ptr", spec.out, readonly = true },
    { "heads_q", "i32" }, { "seq_q", "i32" },
  }
  if cfg.f16s then -- (bf16 on sm_75: Q and dO scaled once into the workspace, lib/attn_bwd_f16scaled.lua)
    f16s.ws_params(first)
    first[#first + 1] = { "q", "ptr", spec.dtype, readonly = true }
  end
  local p = varlen.bind(b, spec, b:kernel{ params = varlen.params(spec, stride_params(first,
    cfg.f16s and { "o", "dout", "q" } or { "o", "dout" })) }, cfg.rows_per_block)
  local d = spec.vdim -- (O and dO: v_head_dim wide, no padding here)
  local dq_d = spec.dim -- (dq_acc rows: head_dim)
  local tid = b:tid()
  local lane, warp = tid & 31, tid >> 5
  local bi, h = b:ctaid("z"), b:ctaid("y")
  local ob, dob = base(b, p, "o", bi, h), base(b, p, "dout", bi, h)
  local ri = row_index(b, p, bi, h)
  local zero_acc = b:not_(b:is_null(p.dq_acc))
  local scaled = cfg.f16s and b:not_(b:is_null(p.qh))
  local qb = cfg.f16s and base(b, p, "q", bi, h)
  for r = 0, ROWS_PER_WARP - 1 do
    local row = b:ctaid("x") * cfg.rows_per_block + warp * ROWS_PER_WARP + r
    local live = b:lt(row, p.seq_q)
    local rr = b:i64(b:select(live, row, 0))
    local sum = b:f32(0.0)
    for c = 0, util.ceil_div(d, 32) - 1 do
      local col = lane + 32 * c
      -- (a head_dim that is not a multiple of 32: lanes past it read column 0 and add 0)
      local real = dims.group(spec.vspec, c) == "some" and b:lt(col, d) or nil
      local at = real and b:select(real, col, 0) or col
      local ov = b:to_f32(b:load(ob + rr * p.stride_os + at))
      local dv = b:to_f32(b:load(dob + rr * p.stride_douts + at))
      sum = b:fma(ov, real and b:select(real, dv, 0.0) or dv, sum)
    end
    sum = b:warp_sum(sum, 32)
    b:if_(b:and_(live, b:eq(lane, 0)), function() b:store(p.delta + ri + rr, sum) end)
    if scaled then
      b:if_(scaled, function()
        local at = ri + rr
        -- (dO's row first: a row of either spanning more than 2^32 marks Q's factor)
        local wide_o = f16s.prep_row(b, lane, live, dob + rr * p.stride_douts, spec.vdim, spec.head_dim,
                                     p.doh + at * spec.head_dim, p.dosf + at)
        f16s.prep_row(b, lane, live, qb + rr * p.stride_qs, spec.dim, spec.head_dim, p.qh + at * spec.head_dim, p.qsf + at,
                      wide_o)
      end)
    end
    b:if_(b:and_(live, zero_acc), function()
      for c = 0, util.ceil_div(dq_d, 32) - 1 do
        lane_cols(b, spec, lane, c, function(col) b:store(p.dq_acc + (ri + rr) * dq_d + col, 0.0) end)
      end
    end)
  end
end

-- ---- convert: dQ = scale * dq_acc ----
local function build_convert(b, spec, cfg)
  local p = varlen.bind(b, spec, b:kernel{ params = varlen.params(spec, stride_params({
    { "dq", "ptr", spec.grad }, { "dq_acc", "ptr", "f32", readonly = true },
    { "heads_q", "i32" }, { "seq_q", "i32" }, { "scale", "f32" },
  }, { "dq" })) }, cfg.rows_per_block)
  local d = spec.dim -- (the real head_dim: prep and convert need no padding)
  local tid = b:tid()
  local lane, warp = tid & 31, tid >> 5
  local bi, h = b:ctaid("z"), b:ctaid("y")
  local qb = base(b, p, "dq", bi, h)
  local ri = row_index(b, p, bi, h)
  for r = 0, ROWS_PER_WARP - 1 do
    local row = b:ctaid("x") * cfg.rows_per_block + warp * ROWS_PER_WARP + r
    b:if_(b:lt(row, p.seq_q), function()
      local rr = b:i64(row)
      for c = 0, util.ceil_div(d, 32) - 1 do
        lane_cols(b, spec, lane, c, function(col)
          local v = b:load(p.dq_acc + (ri + rr) * d + col) * p.scale
          b:store(qb + rr * p.stride_dqs + col, b:from_f32(v, spec.grad))
        end)
      end
    end)
  end
end

local function main_params(spec, first)
  local params = first
  local more = {
    { "q", "ptr", spec.dtype, readonly = true }, { "k", "ptr", spec.dtype, readonly = true },
    { "v", "ptr", spec.dtype, readonly = true }, { "dout", "ptr", spec.out, readonly = true },
    { "lse", "ptr", "f32", readonly = true }, { "delta", "ptr", "f32", readonly = true },
    { "heads_q", "i32" }, { "heads_kv", "i32" }, { "seq_q", "i32" }, { "seq_k", "i32" }, { "scale", "f32" },
  }
  for _, x in ipairs(more) do params[#params + 1] = x end
  return params
end

-- Stores a (rows x d) accumulator block, times `mul`, rounded to `grad`, into rows row0 + r
-- of the slice at dst (row stride `stride`); rows at or past `seq` are skipped.
local function store_acc(b, spec, acc, rows, dst, stride, row0, seq, mul) -- (spec.dim: the columns stored)
  for r = 0, rows // 4 - 1 do
    local i, _ = simt.acc_pos(b, r, 0)
    local row = row0 + i
    b:if_(b:lt(row, seq), function()
      for c = 0, spec.head_dim // 32 - 1 do
        lane_cols(b, spec, b:tid() & 31, c, function(col)
          b:store(dst + b:i64(row) * stride + col, b:from_f32(acc[r][c]:get() * mul, spec.grad))
        end)
      end
    end)
  end
end

-- ---- dkdv: dK, dV for a block of keys (and dQ atomics) ----
local function build_dkdv(b, spec, cfg)
  local first = { { "dk", "ptr", spec.grad }, { "dv", "ptr", spec.grad }, { "dq_acc", "ptr", "f32" } }
  if cfg.f16s then f16s.ws_params(first) end -- (Q and dO as prep scaled them, lib/attn_bwd_f16scaled.lua)
  if cfg.kvs then kvs.params(first, nil, spec.varlen) end -- (K and V scaled once for dq, lib/attn_bwd_kvscaled.lua)
  local params = dropout.params(spec, mask.params(spec, varlen.params(spec, stride_params(main_params(spec, first),
    { "q", "k", "v", "dout", "dk", "dv" }), true)))
  if cfg.path == "wgmma" then
    return bwd_wgmma.build(b, spec, cfg, params, {
      base = function(p, t, bi, h) return base(b, p, t, bi, h) end,
      row_index = function(p, bi, h) return row_index(b, p, bi, h) end,
    })
  end
  local p = varlen.bind(b, spec, b:kernel{ params = params }, cfg.block_n, true)
  if cfg.path == "mma" then
    return mma.build_dkdv(b, spec, cfg, p, {
      base = function(t, bi, h) return base(b, p, t, bi, h) end,
      row_index = function(bi, h) return row_index(b, p, bi, h) end,
      hooks = mask_hooks(b, spec, p),
      drop = dropout.setup(b, spec, p),
    })
  end
  local dr = dropout.setup(b, spec, p)
  local d, bm, bn = spec.head_dim, cfg.block_m, cfg.block_n
  local sh = simt.alloc(b, cfg, d)
  local bi, hkv = b:ctaid("z"), b:ctaid("y")
  local group = p.heads_q // p.heads_kv
  local k0 = b:ctaid("x") * bn
  simt.load_tile(b, cfg, spec.dtype, d, sh.ks, base(b, p, "k", bi, hkv), p.stride_ks, k0, bn, p.seq_k)
  simt.load_tile(b, cfg, spec.dtype, d, sh.vs, base(b, p, "v", bi, hkv), p.stride_vs, k0, bn, p.seq_k, spec.vdim)
  local dk, dv = simt.acc(b, bn, d), simt.acc(b, bn, d)
  -- Causal: query rows below k0 - shift see none of these keys (window: nor rows past the window).
  local q_start, q_end = 0, p.seq_q
  local hooks = mask_hooks(b, spec, p)
  if hooks then q_start, q_end = mask.query_range(hooks.mask, k0, k0 + bn - 1)
  elseif spec.causal then q_start = b:max(k0 - (p.seq_k - p.seq_q), 0) end
  b:for_(0, group, 1, function(g)
    local h = hkv * group + g
    local qb, dob = base(b, p, "q", bi, h), base(b, p, "dout", bi, h)
    local ri = row_index(b, p, bi, h)
    local slope2 = spec.alibi and mask.slope(hooks.mask, h)
    b:for_(q_start, q_end, bm, function(q0)
      b:barrier() -- the previous tile's products are done with Q, dO, P, dS
      simt.load_tile(b, cfg, spec.dtype, d, sh.qs, qb, p.stride_qs, q0, bm, p.seq_q)
      simt.load_tile(b, cfg, spec.out, d, sh.dos, dob, p.stride_douts, q0, bm, p.seq_q, spec.vdim)
      b:barrier()
      simt.scores(b, cfg, d, sh, p, {
        q0 = q0, k0 = k0, lse = p.lse + ri, delta = p.delta + ri,
        bound = function(row) return key_bound(b, spec, p, row) end,
        range = hooks and hooks.range,
        score = hooks and hooks.score and function(s, row, key) return hooks.score(s, row, key, slope2) end,
        drop = dr and function(row, key) return dropout.factor(dr, dropout.keep_at(dr, bi, h, row, key)) end,
      })
      b:barrier()
      simt.dkdv_step(b, cfg, d, sh, dk, dv)
      if not spec.deterministic then
        local dq = simt.acc(b, bm, d)
        simt.dq_step(b, cfg, d, sh, dq)
        for r = 0, bm // 4 - 1 do
          local i = simt.acc_pos(b, r, 0)
          local row = q0 + i
          b:if_(b:lt(row, p.seq_q), function()
            for c = 0, d // 32 - 1 do -- (dq_acc rows are spec.dim wide)
              lane_cols(b, spec, b:tid() & 31, c, function(col)
                b:atomic_add(p.dq_acc + (ri + b:i64(row)) * spec.dim + col, dq[r][c]:get())
              end)
            end
          end)
        end
      end
    end)
  end)
  store_acc(b, spec, dk, bn, base(b, p, "dk", bi, hkv), p.stride_dks, k0, p.seq_k, p.scale)
  store_acc(b, spec.vspec, dv, bn, base(b, p, "dv", bi, hkv), p.stride_dvs, k0, p.seq_k, 1.0) -- (dV: v_head_dim)
end

-- ---- dq (deterministic): dQ for a tile of query rows, summed over keys in order ----
local function build_dq(b, spec, cfg)
  local first = { { "dq", "ptr", spec.grad } }
  if cfg.kvs then kvs.params(first, true, spec.varlen) end -- (K and V as the deterministic dkdv scaled them, lib/attn_bwd_kvscaled.lua)
  local p = varlen.bind(b, spec, b:kernel{ params = dropout.params(spec, mask.params(spec, varlen.params(spec,
    stride_params(main_params(spec, first), { "q", "k", "v", "dout", "dq" }), true))) },
    cfg.block_m)
  if cfg.path == "mma" then
    return mma.build_dq(b, spec, cfg, p, {
      base = function(t, bi, h) return base(b, p, t, bi, h) end,
      row_index = function(bi, h) return row_index(b, p, bi, h) end,
      key_bound = function(row) return key_bound(b, spec, p, row) end,
      hooks = mask_hooks(b, spec, p),
      drop = dropout.setup(b, spec, p),
    })
  end
  local dr = dropout.setup(b, spec, p)
  local d, bm, bn = spec.head_dim, cfg.block_m, cfg.block_n
  local sh = simt.alloc(b, cfg, d)
  local bi, h = b:ctaid("z"), b:ctaid("y")
  local hkv = h // (p.heads_q // p.heads_kv)
  local q0 = b:ctaid("x") * bm
  local ri = row_index(b, p, bi, h)
  simt.load_tile(b, cfg, spec.dtype, d, sh.qs, base(b, p, "q", bi, h), p.stride_qs, q0, bm, p.seq_q)
  simt.load_tile(b, cfg, spec.out, d, sh.dos, base(b, p, "dout", bi, h), p.stride_douts, q0, bm, p.seq_q, spec.vdim)
  local kv_lo, kv_end = 0, p.seq_k
  local hooks = mask_hooks(b, spec, p)
  if hooks then -- from the first row's window start to the last row's bound
    kv_lo = hooks.range(q0) or 0
    local _, hi = hooks.range(b:min(q0 + bm, p.seq_q) - 1)
    kv_end = hi
  elseif spec.causal then
    kv_end = b:min(p.seq_k, b:max(b:min(q0 + bm, p.seq_q) + (p.seq_k - p.seq_q), 0))
  end
  local slope2 = spec.alibi and mask.slope(hooks.mask, h)
  local kb, vb = base(b, p, "k", bi, hkv), base(b, p, "v", bi, hkv)
  local dq = simt.acc(b, bm, d)
  b:for_(kv_lo, kv_end, bn, function(k0)
    b:barrier() -- the previous tile's products are done with K, V, dS
    simt.load_tile(b, cfg, spec.dtype, d, sh.ks, kb, p.stride_ks, k0, bn, p.seq_k)
    simt.load_tile(b, cfg, spec.dtype, d, sh.vs, vb, p.stride_vs, k0, bn, p.seq_k, spec.vdim)
    b:barrier()
    simt.scores(b, cfg, d, sh, p, {
      q0 = q0, k0 = k0, lse = p.lse + ri, delta = p.delta + ri,
      bound = function(row) return key_bound(b, spec, p, row) end,
      range = hooks and hooks.range,
      score = hooks and hooks.score and function(s, row, key) return hooks.score(s, row, key, slope2) end,
      drop = dr and function(row, key) return dropout.factor(dr, dropout.keep_at(dr, bi, h, row, key)) end,
    })
    b:barrier()
    simt.dq_step(b, cfg, d, sh, dq)
  end)
  store_acc(b, spec, dq, bm, base(b, p, "dq", bi, h), p.stride_dqs, q0, p.seq_q, p.scale)
end

function K.build(b, spec, cfg)
  spec = bspec(spec)
  local builders = { prep = build_prep, convert = build_convert, dkdv = build_dkdv, dq = build_dq }
  builders[spec.kernel](b, spec, cfg)
  if cfg.max_registers then b:max_registers(cfg.max_registers) end
end

-- launch (docs/registry.md): tensors as the forward's; the workspace (delta, and dq_acc unless
-- deterministic) belongs to the sequence, declared by dkdv, which runs after prep and before
-- convert (or dq): `attention_bwd ...` (kernel=dkdv) names the whole backward; dq, the other kernel that
-- scores, takes dkdv's path (path=simt names a backward on SIMT throughout), prep and convert path=auto
local function seq_spec(spec, kernel, det)
  return string.format("attention_bwd kernel=%s dtype=%s out=%s grad=%s head_dim=%d%s causal=%s path=%s deterministic=%s%s",
                       kernel, spec.dtype, spec.out, spec.grad, spec.head_dim, vdim.words(spec), tostring(spec.causal),
                       kernel == "dq" and spec.path ~= "wgmma" and spec.path or "auto", tostring(det),
                       (kernel == "dq" and mask.words(spec) .. dropout.words(spec) or "") .. varlen.words(spec))
end

function K.launch(spec, cfg)
  local d, al = spec.head_dim, cfg.align
  local q, kv = { "batch", "seq_q", "heads_q", d }, { "batch", "seq_k", "heads_kv", d }
  local rows = { "batch", "heads_q", "seq_q" }
  local acc = { string.format("batch*heads_q*seq_q*%d", d) }
  -- (v_head_dim: V, dV, O, dO are dv wide)
  local dvd = vdim.differs(spec) and spec.v_head_dim or d
  local qv, kvv = { "batch", "seq_q", "heads_q", dvd }, { "batch", "seq_k", "heads_kv", dvd }
  local shape = { q = q, k = kv, v = kvv, o = qv, dout = qv, dq = q, dk = kv, dv = kvv }
  local role = { dq = "out", dk = "out", dv = "out" }
  local t, strides = {}, {}
  local function tensor(n)
    t[#t + 1] = { n, role[n] or "in", shape[n], align = al }
    for i, a in ipairs({ "b", "s", "h" }) do strides[#strides + 1] = { "stride_" .. n .. a, n, i - 1 } end
  end
  local l = { tensors = t, strides = strides,
              scalars = { { "batch" }, { "heads_q" }, { "heads_kv" }, { "seq_q" }, { "seq_k" }, { "scale", 1 / math.sqrt(d) } } }
  if spec.kernel == "prep" or spec.kernel == "convert" then
    l.scalars = { { "batch" }, { "heads_q" }, { "seq_q" } }
    if spec.kernel == "prep" then
      tensor("o")
      tensor("dout")
      t[#t + 1] = { "delta", "workspace", rows, align = 16 }
      t[#t + 1] = { "dq_acc", "workspace", acc, optional = true, align = 16 }
      if cfg.f16s then -- (Q scaled once, lib/attn_bwd_f16scaled.lua; dkdv declares the rows it reads)
        tensor("q")
        f16s.ws_launch(t, bspec(spec).head_dim, rows, true, spec.varlen)
      end
    else
      l.scalars[#l.scalars + 1] = { "scale", 1 / math.sqrt(d) }
      tensor("dq")
      t[#t + 1] = { "dq_acc", "workspace", acc, align = 16 }
    end
    l.problem = { "seq_q", "heads_q", "batch" }
    return varlen.launch(spec, l, d)
  end
  for _, n in ipairs({ "q", "k", "v", "dout" }) do tensor(n) end
  t[#t + 1] = { "lse", "in", rows }
  if spec.kernel == "dq" then
    tensor("dq")
    t[#t + 1] = { "delta", "workspace", rows, align = 16 }
    if cfg.kvs then kvs.launch(t, bspec(spec).head_dim, spec.varlen) end
    l.problem = { "seq_q", "heads_q", "batch" }
    return varlen.launch(spec, dropout.launch(spec, mask.launch(spec, l)), d, true)
  end
  tensor("dk")
  tensor("dv")
  t[#t + 1] = { "delta", "workspace", rows, align = 16 }
  t[#t + 1] = { "dq_acc", "workspace", spec.deterministic and { 0 } or acc, align = 16 }
  if cfg.f16s then f16s.ws_launch(t, bspec(spec).head_dim, rows, nil, spec.varlen) end
  if cfg.kvs then kvs.launch(t, bspec(spec).head_dim, spec.varlen) end -- (deterministic: K and V scaled once for dq)
  l.problem = { "seq_k", "heads_kv", "batch" }
  l.before = { { seq_spec(spec, "prep", false) } }
  l.after = { { seq_spec(spec, spec.deterministic and "dq" or "convert", false) } }
  if cfg.path == "wgmma" then bwd_wgmma.launch(spec, cfg, l) end
  return varlen.launch(spec, dropout.launch(spec, mask.launch(spec, l)), d, true)
end

-- the ptxas matrix (docs/registry.md); the quick suite takes slices by SM (sm_75 80 86 89 90 ... in
-- the SM table's order) and head_dim
local DT, DIMS = util.axis("dtype", { "f32", "f16", "bf16" }), util.axis("head_dim", { 32, 64, 96, 128, 256 })
local HALF, TC_DIMS = { "dtype=f16", "dtype=bf16" }, util.axis("head_dim", { 32, 64, 96, 128 })
local NOT_86 = { 75, 80, 89, 90, 100, 103, 110, 120, 121 }
local MASK_KEYS = "window=true softcap=true alibi=true"
-- each mask key alone and each pair (the rows below with MASK_KEYS hold the three together)
local KEY_SUBSETS = { "window=true", "softcap=true", "alibi=true", "window=true softcap=true", "window=true alibi=true",
                      "softcap=true alibi=true" }
local KERNELS3 = { "kernel=dkdv", "kernel=dq", "kernel=dkdv deterministic=true" }
K.variants = {
  { "kernel=dkdv", DT, DIMS, "causal=true" },
  { "kernel=dq", DT, DIMS, "causal=true", full = true },
  { "kernel=dq", DT, DIMS, "causal=true", quick = true, sms = NOT_86 },
  { { "kernel=prep", "kernel=convert" }, DT, DIMS, full = true },
  { { "kernel=prep", "kernel=convert" }, DT, util.axis("head_dim", { 32, 256 }), quick = true, sms = { 75, 90 } },
  { "kernel=dkdv", DT, DIMS, "deterministic=true", full = true },
  { "kernel=dkdv", DT, DIMS, "deterministic=true", quick = true, sms = { 80 } },
  { "kernel=dkdv", HALF, TC_DIMS, "causal=true path=simt", full = true },
  { "kernel=dkdv", HALF, TC_DIMS, "causal=true path=simt", quick = true, sms = { 80, 90 } },
  { "kernel=dq", HALF, TC_DIMS, "causal=true path=simt", full = true },
  { "kernel=dq", HALF, TC_DIMS, "causal=true path=simt", quick = true, sms = { 80 } },
  { { "kernel=dkdv", "kernel=dq" }, DT, DIMS, full = true },
  { "kernel=dkdv", "dtype=bf16", "head_dim=128", "out=f32 grad=f32 causal=true" },
  -- every mask key on (lib/attn_mask.lua): the kernels with the most parameters and mask work
  { "kernel=dkdv", DT, DIMS, { "causal=true", "causal=top_left" }, MASK_KEYS, full = true },
  { "kernel=dkdv", DT, DIMS, "causal=top_left", MASK_KEYS, quick = true },
  { { "kernel=dq", "kernel=dkdv deterministic=true" }, DT, DIMS, { "causal=true", "causal=top_left" }, MASK_KEYS,
    full = true },
  { { "kernel=dq", "kernel=dkdv deterministic=true" }, DT, DIMS, "causal=true", MASK_KEYS, quick = true,
    sms = { 75, 80, 90 } },
  -- one or two of the mask keys (wave 17; wave 16's scan of every subset found spills that the three together did not show):
  -- every kernel, f16 and bf16, both causal forms, on every SM; the quick suite: six of them (bf16 sm_75's atomic
  -- d64 with window + ALiBi, which spilled 12 bytes, and d96 with the window, which spilled before lo_applies)
  { KERNELS3, HALF, DIMS, { "causal=true", "causal=top_left" }, KEY_SUBSETS, full = true },
  { "kernel=dkdv", "dtype=bf16", { "head_dim=64 causal=true window=true alibi=true", "head_dim=96 causal=top_left window=true" },
    quick = true, sms = { 75 } },
  { "kernel=dq", "dtype=f16", "head_dim=96", "causal=true", "window=true softcap=true", quick = true, sms = { 75 } },
  { "kernel=dkdv", "dtype=f16", "head_dim=128", "causal=top_left", "softcap=true alibi=true", quick = true, sms = { 80 } },
  { "kernel=dkdv deterministic=true", "dtype=bf16", "head_dim=64", "causal=true", "alibi=true", quick = true, sms = { 86 } },
  { "kernel=dkdv", "dtype=bf16", "head_dim=32", "causal=true", "softcap=true", quick = true, sms = { 90 } },
  -- dropout (lib/attn_dropout.lua): dkdv and dq alone and with every mask key, SIMT forced, the test mask output
  { { "kernel=dkdv", "kernel=dq", "kernel=dkdv deterministic=true" }, DT, DIMS, { "causal=false", "causal=true" },
    "dropout=true", full = true },
  { { "kernel=dkdv", "kernel=dq", "kernel=dkdv deterministic=true" }, DT, DIMS, { "causal=true", "causal=top_left" },
    MASK_KEYS, "dropout=true", full = true },
  { { "kernel=dkdv", "kernel=dq" }, DT, DIMS, "causal=true", "dropout=true", quick = true, sms = { 75, 80, 90 } },
  { { "kernel=dkdv", "kernel=dq" }, DT, DIMS, "causal=true", MASK_KEYS, "dropout=true", quick = true, sms = { 75, 80, 90, 120 } },
  { { "kernel=dkdv", "kernel=dq" }, HALF, TC_DIMS, "causal=true path=simt", MASK_KEYS, "dropout=true", sms = { 80 } },
  { { "kernel=dkdv", "kernel=dq" }, DT, "head_dim=64", "causal=true", "window=true softcap=true", "dropout=true dropout_mask=true",
    sms = { 75, 80 } },
  -- dropout with two score keys at the padded width 96 (lib/attn_bwd_mma.lua M.available: the ones that spilled on
  -- tensor cores run on SIMT), with and without the mask output
  { { "kernel=dkdv", "kernel=dkdv deterministic=true" }, HALF, util.axis("head_dim", { 88, 96 }), "causal=true",
    { "window=true softcap=true", "window=true alibi=true", "softcap=true alibi=true" },
    { "dropout=true", "dropout=true dropout_mask=true" }, full = true },
  { "kernel=dkdv", "dtype=bf16", "head_dim=88", "causal=true", { "window=true softcap=true", "softcap=true alibi=true" },
    "dropout=true", quick = true, sms = { 90 } },
  { "kernel=dkdv deterministic=true", "dtype=f16", "head_dim=96", "causal=true", "window=true alibi=true",
    "dropout=true dropout_mask=true", quick = true, sms = { 80 } },
  -- varlen=true (lib/attn_varlen.lua): every kernel of the sequence, with and without the mask keys,
  -- the SIMT path forced (the quick suite: a slice on sm_75 / 80 / 90)
  { { "kernel=dkdv", "kernel=dq", "kernel=dkdv deterministic=true", "kernel=prep", "kernel=convert" }, DT, DIMS,
    "causal=true", "varlen=true", full = true },
  { "kernel=dkdv", DT, DIMS, "causal=true", "varlen=true", quick = true, sms = { 75, 80, 90 } },
  { { "kernel=dq", "kernel=prep", "kernel=convert" }, DT, "head_dim=64", "causal=true", "varlen=true", quick = true,
    sms = { 80 } },
  { { "kernel=dkdv", "kernel=dq", "kernel=dkdv deterministic=true" }, DT, DIMS, { "causal=true", "causal=top_left" },
    MASK_KEYS, "varlen=true", full = true },
  { "kernel=dkdv", DT, DIMS, "causal=top_left", MASK_KEYS, "varlen=true", quick = true, sms = { 75, 80, 90 } },
  { { "kernel=dkdv", "kernel=dq" }, HALF, TC_DIMS, "causal=true path=simt", "varlen=true", full = true },
  { "kernel=dkdv", HALF, "head_dim=64", "causal=true path=simt", "varlen=true", quick = true, sms = { 80 } },
}
-- head dims between the tile widths (lib/attn_dims.lua: padded to the next width): every kernel, the
-- mask keys, dropout, varlen (the quick suite: 8, 40, 80, 200 on sm_75 / 80 / 90; the full matrix
-- also 24, 136, 248 on every SM)
local ODD = util.axis("head_dim", { 8, 40, 80, 200 })
local ODD_ALL = util.axis("head_dim", { 8, 24, 40, 80, 136, 200, 248 })
local F16S_KEYS = { "causal=false", "causal=true", "causal=top_left", "causal=true window=true", "causal=true softcap=true",
                    "causal=true alibi=true", "causal=true " .. MASK_KEYS, "causal=top_left " .. MASK_KEYS }
for _, row in ipairs({
  { KERNELS3, DT, ODD, "causal=true", quick = true, sms = { 75, 80, 90 } },
  { { "kernel=prep", "kernel=convert" }, DT, ODD, quick = true, sms = { 80 } },
  { KERNELS3, DT, ODD, "causal=true", MASK_KEYS, quick = true, sms = { 75, 80, 90 } },
  { { "kernel=dkdv", "kernel=dq" }, DT, ODD, "causal=true", "dropout=true", quick = true, sms = { 75, 80, 90 } },
  { "kernel=dkdv", DT, ODD, "causal=true", "varlen=true", quick = true, sms = { 75, 80, 90 } },
  { { "kernel=dkdv", "kernel=dq" }, HALF, { "head_dim=40", "head_dim=80" }, "causal=true path=simt", quick = true, sms = { 80 } },
  { { "kernel=dkdv", "kernel=dq", "kernel=dkdv deterministic=true", "kernel=prep", "kernel=convert" }, DT, ODD_ALL,
    { "causal=false", "causal=true" }, full = true },
  { KERNELS3, DT, ODD_ALL, { "causal=true", "causal=top_left" }, MASK_KEYS, full = true },
  { KERNELS3, HALF, ODD_ALL, { "causal=true", "causal=top_left" }, KEY_SUBSETS, full = true, sms = { 75, 80 } },
  { KERNELS3, DT, ODD_ALL, "causal=true", { "dropout=true", MASK_KEYS .. " dropout=true" }, full = true },
  { KERNELS3, DT, ODD_ALL, "causal=true", { "varlen=true", MASK_KEYS .. " varlen=true" }, full = true },
  -- dropout on packed sequences (lib/attn_dropout.lua with lib/attn_varlen.lua): every kernel that draws the
  -- mask, alone and with every mask key, SIMT forced, the padded dims, the mask output (the quick suite: d64 on
  -- sm_75 / 80)
  { KERNELS3, DT, DIMS, { "causal=true", "causal=top_left" },
    { "varlen=true dropout=true", MASK_KEYS .. " varlen=true dropout=true" }, full = true },
  { KERNELS3, DT, ODD_ALL, "causal=true", "varlen=true dropout=true", full = true },
  { { "kernel=dkdv", "kernel=dq" }, HALF, TC_DIMS, "causal=true path=simt", "varlen=true dropout=true", full = true },
  { { "kernel=dkdv", "kernel=dq" }, DT, "head_dim=64", "causal=true", "window=true softcap=true",
    "varlen=true dropout=true dropout_mask=true", full = true },
  { { "kernel=dkdv", "kernel=dq" }, DT, "head_dim=64", "causal=true",
    { "varlen=true dropout=true", MASK_KEYS .. " varlen=true dropout=true" }, quick = true, sms = { 75, 80 } },
  -- v_head_dim (lib/attn_vdim.lua): MLA's 192 / 128 and pairs either way, the mask keys, dropout
  { { "kernel=dkdv", "kernel=dq", "kernel=dkdv deterministic=true", "kernel=prep", "kernel=convert" }, DT,
    { "head_dim=192 v_head_dim=128", "head_dim=64 v_head_dim=128", "head_dim=128 v_head_dim=64" }, "causal=true",
    quick = true, sms = { 75, 80, 90 } },
  { { "kernel=dkdv", "kernel=dq" }, DT, { "head_dim=192 v_head_dim=128", "head_dim=64 v_head_dim=128", "head_dim=128 v_head_dim=64" },
    "causal=true", { MASK_KEYS, "dropout=true" }, quick = true, sms = { 80 } },
  { { "kernel=dkdv", "kernel=dq", "kernel=dkdv deterministic=true", "kernel=prep", "kernel=convert" }, DT,
    { "head_dim=192 v_head_dim=128", "head_dim=64 v_head_dim=128", "head_dim=128 v_head_dim=64", "head_dim=40 v_head_dim=24" },
    { "causal=false", "causal=true", "causal=true " .. MASK_KEYS, "causal=true dropout=true" }, full = true },
  -- bf16 on sm_75's f16 tensor cores (lib/attn_bwd_f16scaled.lua, path=mma): dkdv and dq to head_dim 128 (the
  -- atomic dkdv at 128 in two passes, lib/attn_bwd_f16scaled_d128.lua)
  { KERNELS3, "dtype=bf16", util.axis("head_dim", { 32, 64 }), { "causal=true", "causal=top_left " .. MASK_KEYS }, "path=mma",
    quick = true, sms = { 75 } },
  { "kernel=dq", "dtype=bf16", util.axis("head_dim", { 96, 128 }), { "causal=true", "causal=top_left " .. MASK_KEYS }, "path=mma",
    quick = true, sms = { 75 } },
  { "kernel=dkdv deterministic=true", "dtype=bf16", "head_dim=128", { "causal=true", "causal=top_left window=true alibi=true" },
    "path=mma", quick = true, sms = { 75 } },
  { "kernel=dkdv deterministic=true", "dtype=bf16", "head_dim=128", { table.unpack(F16S_KEYS, 1, 6) }, "path=mma", full = true,
    sms = { 75 } },
  { "kernel=dkdv", "dtype=bf16", "head_dim=128", { "causal=true", "causal=top_left " .. MASK_KEYS }, "path=mma", quick = true,
    sms = { 75 } },
  { "kernel=dkdv", "dtype=bf16", "head_dim=128", F16S_KEYS, "path=mma", full = true, sms = { 75 } },
  { { "kernel=dkdv", "kernel=dq" }, "dtype=bf16", { "head_dim=64 v_head_dim=32", "head_dim=32 v_head_dim=64" }, "causal=true",
    "path=mma", quick = true, sms = { 75 } },
  { KERNELS3, "dtype=bf16", util.axis("head_dim", { 8, 24, 32, 40, 64 }), F16S_KEYS, "path=mma", full = true, sms = { 75 } },
  { "kernel=dq", "dtype=bf16", util.axis("head_dim", { 80, 96, 128 }), F16S_KEYS, "path=mma", full = true, sms = { 75 } },
  { { "kernel=dkdv", "kernel=dkdv deterministic=true" }, "dtype=bf16", "head_dim=96", { "causal=true", "causal=top_left " .. MASK_KEYS },
    "path=mma", quick = true, sms = { 75 } },
  { { "kernel=dkdv", "kernel=dkdv deterministic=true" }, "dtype=bf16", util.axis("head_dim", { 80, 96 }), F16S_KEYS, "path=mma",
    full = true, sms = { 75 } },
  -- with varlen and dropout (the f16-scaled workspace rows packed [heads, total]; dropout's mask on P and dS): every
  -- kernel to head_dim 64 with every causal form and mask key, dq to 128, the atomic dkdv at 128 (two passes) with
  -- both and every key, the dkdv at 80-128 with varlen where it fits 255 registers (lib/attn_bwd_mma.lua M.available
  -- refuses the rest by name: dropout's dkdv at the padded width 96 and the deterministic one at 128, varlen's
  -- atomic dkdv at 96 with a mask key, the deterministic d128 with all three)
  { KERNELS3, "dtype=bf16", "head_dim=64", "causal=true", { "varlen=true", "dropout=true", "varlen=true dropout=true" }, "path=mma",
    quick = true, sms = { 75 } },
  { { "kernel=dkdv", "kernel=dq" }, "dtype=bf16", "head_dim=32", "causal=top_left " .. MASK_KEYS, "varlen=true dropout=true",
    "path=mma", quick = true, sms = { 75 } },
  { KERNELS3, "dtype=bf16", util.axis("head_dim", { 8, 24, 32, 40, 64 }), F16S_KEYS,
    { "varlen=true", "dropout=true", "varlen=true dropout=true" }, "path=mma", full = true, sms = { 75 } },
  { "kernel=dq", "dtype=bf16", util.axis("head_dim", { 80, 96, 128 }), F16S_KEYS,
    { "varlen=true", "dropout=true", "varlen=true dropout=true" }, "path=mma", full = true, sms = { 75 } },
  { { "kernel=dkdv", "kernel=dkdv deterministic=true" }, "dtype=bf16", util.axis("head_dim", { 80, 96, 128 }),
    { "causal=false", "causal=true", "causal=top_left" }, "varlen=true", "path=mma", full = true, sms = { 75 } },
  { "kernel=dkdv deterministic=true", "dtype=bf16", util.axis("head_dim", { 80, 96 }), { table.unpack(F16S_KEYS, 4, 8) },
    "varlen=true", "path=mma", full = true, sms = { 75 } },
  { "kernel=dkdv", "dtype=bf16", "head_dim=64", "causal=true", "varlen=true dropout=true dropout_mask=true", "path=mma",
    full = true, sms = { 75 } },
  { "kernel=dkdv", "dtype=bf16", "head_dim=128", "causal=top_left " .. MASK_KEYS, "varlen=true dropout=true", "path=mma",
    quick = true, sms = { 75 } },
  { "kernel=dkdv", "dtype=bf16", util.axis("head_dim", { 104, 128 }), F16S_KEYS, { "varlen=true", "dropout=true", "varlen=true dropout=true" },
    "path=mma", full = true, sms = { 75 } },
  { "kernel=dkdv", "dtype=bf16", "head_dim=128", "causal=true", "dropout=true dropout_mask=true", "path=mma", full = true, sms = { 75 } },
}) do K.variants[#K.variants + 1] = row end
-- sm_90a's TMA + wgmma dkdv (path=wgmma, lib/attn_bwd_wgmma.lua; the arch-specific target takes only the rows that
-- name it): f16/bf16 at head_dim 64 / 128 and padded ones, every causal form, the mask keys, dropout (with the
-- softcap at 128: the rows below), varlen, deterministic (the quick suite: 7 of them)
local CAUSAL3, WG_DIMS = { "causal=false", "causal=true", "causal=top_left" }, util.axis("head_dim", { 64, 128 })
for _, row in ipairs({
  { "kernel=dkdv", HALF, WG_DIMS, CAUSAL3, { "", "window=true alibi=true" }, { "", "deterministic=true" }, { "", "varlen=true" },
    "path=wgmma", full = true, sms = { "90a" } },
  { "kernel=dkdv", HALF, WG_DIMS, CAUSAL3, { "", "window=true", "window=true alibi=true" }, { "", "deterministic=true" }, "dropout=true",
    { "", "varlen=true" }, "path=wgmma", full = true, sms = { "90a" } },
  { "kernel=dkdv", HALF, WG_DIMS, CAUSAL3, { "softcap=true", MASK_KEYS, "grad=f32 " .. MASK_KEYS }, { "", "deterministic=true" },
    { "", "varlen=true" }, "path=wgmma", full = true, sms = { "90a" } },
  { "kernel=dkdv", HALF, "head_dim=64", CAUSAL3, { "softcap=true", MASK_KEYS, "grad=f32 " .. MASK_KEYS }, "dropout=true",
    { "", "deterministic=true" }, "path=wgmma", full = true, sms = { "90a" } },
  { "kernel=dkdv", HALF, util.axis("head_dim", { 40, 56, 104, 120 }), "causal=true", { "", "varlen=true" }, "path=wgmma", full = true,
    sms = { "90a" } },
  { "kernel=dkdv", HALF, WG_DIMS, "causal=true", "path=wgmma", quick = true, sms = { "90a" } },
  { "kernel=dkdv", "dtype=bf16", "head_dim=128", "causal=top_left " .. MASK_KEYS, "path=wgmma", quick = true, sms = { "90a" } },
  { "kernel=dkdv", "dtype=f16", { "head_dim=64 causal=true " .. MASK_KEYS, "head_dim=128 causal=true" }, "dropout=true", "path=wgmma",
    quick = true, sms = { "90a" } },
}) do K.variants[#K.variants + 1] = row end
-- path=wgmma's other head dims (lib/attn_wgmma_dims.lua's widths: d32 and 8-24 on the 64-column tiles, d96 and 72-88
-- on the 128-column ones) and v_head_dim != head_dim up to 128: every causal form, the mask keys, grad=f32,
-- deterministic, dropout (the softcap with it where one of head_dim, v_head_dim is <= 64; both past 64: below), varlen (the quick suite: 7 of them)
local WG_DIMS2 = util.axis("head_dim", { 32, 96 })
local WG_VDIMS = { "head_dim=64 v_head_dim=32", "head_dim=32 v_head_dim=64", "head_dim=96 v_head_dim=64", "head_dim=128 v_head_dim=64",
                   "head_dim=64 v_head_dim=128" }
for _, row in ipairs({
  { "kernel=dkdv", HALF, WG_DIMS2, CAUSAL3, { "", "window=true alibi=true", "softcap=true", MASK_KEYS, "grad=f32 " .. MASK_KEYS },
    { "", "deterministic=true" }, "path=wgmma", full = true, sms = { "90a" } },
  { "kernel=dkdv", HALF, WG_DIMS2, CAUSAL3, { "", "window=true alibi=true" }, "dropout=true", { "", "deterministic=true" }, "path=wgmma",
    full = true, sms = { "90a" } },
  { "kernel=dkdv", HALF, "head_dim=32", CAUSAL3, { "softcap=true", MASK_KEYS }, "dropout=true", "path=wgmma", full = true, sms = { "90a" } },
  { "kernel=dkdv", HALF, WG_DIMS2, CAUSAL3, { "", MASK_KEYS, "dropout=true" }, "varlen=true", "path=wgmma", full = true, sms = { "90a" } },
  { "kernel=dkdv", HALF, util.axis("head_dim", { 8, 24, 72, 88 }), "causal=true", { "", "varlen=true", "dropout=true" }, "path=wgmma",
    full = true, sms = { "90a" } },
  { "kernel=dkdv", HALF, WG_VDIMS, CAUSAL3, { "", MASK_KEYS, "dropout=true", MASK_KEYS .. " dropout=true", "deterministic=true" }, "path=wgmma", full = true,
    sms = { "90a" } },
  { "kernel=dkdv", HALF, WG_DIMS2, "causal=true", "path=wgmma", quick = true, sms = { "90a" } },
  { "kernel=dkdv", "dtype=bf16", { "head_dim=64 v_head_dim=32", "head_dim=128 v_head_dim=64" }, "causal=true", "path=wgmma", quick = true,
    sms = { "90a" } },
  { "kernel=dkdv", "dtype=f16", "head_dim=96", "causal=top_left", "window=true alibi=true dropout=true", "path=wgmma", quick = true,
    sms = { "90a" } },
}) do K.variants[#K.variants + 1] = row end
-- path=wgmma's softcap with dropout where head_dim and v_head_dim are both 72-128 (wave 15: the tile's lse loaded as
-- P^T's columns use it, lib/attn_bwd_wgmma.lua): every causal form, the mask keys, grad=f32, deterministic, varlen
-- (the quick suite: the bf16 d128 top_left variant, one of those that spilled 4 bytes before)
for _, row in ipairs({
  { "kernel=dkdv", HALF, util.axis("head_dim", { 96, 128 }), CAUSAL3, { "softcap=true", MASK_KEYS, "grad=f32 " .. MASK_KEYS }, "dropout=true",
    { "", "deterministic=true" }, "path=wgmma", full = true, sms = { "90a" } },
  { "kernel=dkdv", HALF, { "head_dim=72", "head_dim=120", "head_dim=96 v_head_dim=128" }, CAUSAL3, "softcap=true dropout=true", "path=wgmma",
    full = true, sms = { "90a" } },
  { "kernel=dkdv", HALF, util.axis("head_dim", { 96, 128 }), CAUSAL3, MASK_KEYS .. " dropout=true varlen=true", "path=wgmma", full = true,
    sms = { "90a" } },
  { "kernel=dkdv", "dtype=bf16", "head_dim=128", "causal=top_left", "softcap=true dropout=true", "path=wgmma", quick = true, sms = { "90a" } },
}) do K.variants[#K.variants + 1] = row end
-- path=wgmma's 256-column tiles (wave 20: head_dim / v_head_dim 136-256, two consumer warpgroups on one key block,
-- lib/attn_bwd_wgmma.lua's SPLIT): every causal form, the keys that fit (the softcap with atomic dQ, without dropout
-- and ALiBi), grad=f32, deterministic, varlen (the quick suite: bf16 d256 causal, f16 qk 192 / v 128 with window,
-- ALiBi and dropout)
local WG256 = { "head_dim=256", "head_dim=192", "head_dim=136", "head_dim=192 v_head_dim=128", "head_dim=128 v_head_dim=256" }
for _, row in ipairs({
  { "kernel=dkdv", HALF, WG256, CAUSAL3, { "", "window=true alibi=true", "dropout=true", "window=true alibi=true dropout=true" },
    { "", "deterministic=true" }, "path=wgmma", full = true, sms = { "90a" } },
  { "kernel=dkdv", HALF, WG256, CAUSAL3, { "softcap=true", "window=true softcap=true", "softcap=true grad=f32" }, "path=wgmma", full = true,
    sms = { "90a" } },
  { "kernel=dkdv", HALF, util.axis("head_dim", { 256, 192 }), CAUSAL3, { "", "softcap=true", "window=true alibi=true dropout=true" }, "varlen=true",
    "path=wgmma", full = true, sms = { "90a" } },
  { "kernel=dkdv", "dtype=bf16", "head_dim=256", "causal=true", "path=wgmma", quick = true, sms = { "90a" } },
  { "kernel=dkdv", "dtype=f16", "head_dim=192 v_head_dim=128", "causal=true", "window=true alibi=true dropout=true", "path=wgmma", quick = true,
    sms = { "90a" } },
}) do K.variants[#K.variants + 1] = row end
-- the default bundle: the kernels kiln_attention_backward launches (the deterministic dkdv and dq by --spec)
-- (extra: the dropout dkdv of the forward's bundled dropout row, bf16 d128 causal)
K.bundle = { dtypes = { "dtype", "out", "grad" }, shape = "head_dim", shapes = { 64, 128 },
             kernels = { "kernel=prep", "kernel=dkdv", "kernel=convert" },
             extra = { "kernel=dkdv dtype=bf16 head_dim=128 causal=true dropout=true" } }

return K
