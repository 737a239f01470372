-- templates/lib/attn_bwd_mma.lua - attention backward dK/dV (+ dQ atomics) on tensor cores (b:mma, ldmatrix, cp.async).
--
-- One CTA of 4 warps owns bn = 64 keys of one kv head; warp w owns keys 16w..16w+15. Per tile of
-- bm = 32 query rows (16 at head_dim 128 without cp.async; Q, dO and the rows' lse and delta staged
-- in shared memory):
--   S^T = K Q^T and dP^T = V dO^T       (A: K / V rows of the warp, B: Q / dO rows; ldmatrix)
--   P^T = exp2(S^T scale log2e - lse log2e), dS^T = P^T (dP^T - delta), masked entries exactly 0
--   dV += P^T dO, dK += dS^T Q          (A: P^T / dS^T straight from the C registers, rounded to
--                                        the dtype; B: dO / Q with ldmatrix .trans)
--   dQ(tile) += dS K                    (dS through shared memory in the dtype; each warp takes 16
--                                        query rows and a slice of the head dim; f32 atomics)
-- Tiles are row-major in the dtype with rows padded by 16 bytes (ldmatrix rows on different banks).
-- bf16 on sm_75 (cfg.f16s): f16 tiles and operands scaled by powers of two, lib/attn_bwd_f16scaled.lua;
-- its atomic dkdv at head_dim 128 walks the query tiles twice (cfg.passes: dV, then dK and the dQ step),
-- lib/attn_bwd_f16scaled_d128.lua; at head_dim 32 and 64 a key block whose K and V take one power of two each runs
-- lib/attn_bwd_f16scaled_d32.lua's tile bodies (cfg.d32; dq: the key tiles the deterministic dkdv wrote so); where
-- cfg.kvwalk, a key block holding a K or V row that spans more than 2^32 walks the query tiles on its own, in two
-- passes with every low part's product (build_dkdv's kvmarked walk).
local util = require("lib.util")
local mask = require("lib.attn_mask")
local dropout = require("lib.attn_dropout")
local f16s = require("lib.attn_bwd_f16scaled") -- bf16 on sm_75's f16 tensor cores (cfg.f16s)
local passes = require("lib.attn_bwd_f16scaled_d128") -- dV and dK in two passes (cfg.passes)
local kvs = require("lib.attn_bwd_kvscaled") -- (cfg.kvs: K and V scaled once by the deterministic dkdv for dq)
local d32 = require("lib.attn_bwd_f16scaled_d32") -- (cfg.d32: head_dim 32's and 64's key blocks of one power of two)

local M = {}

M.WARPS, M.BLOCK_N, M.BLOCK_M = 4, 64, 32
local LOG2E = 1.4426950408889634

-- Whether the tensor-core dkdv serves this spec on this target: f16/bf16 inputs with O/dO in the
-- same dtype, the target's mma for the dtype, and head_dim <= 128 (dK and dV of 16 keys x 256
-- would need 256 accumulators a thread).
-- Second result: why not, when the target has the mma but the spec does not fit it.
function M.available(spec, target)
  if spec.dtype == "f32" or spec.out ~= spec.dtype or not target.ldmatrix then return false end
  if spec.head_dim > 128 then -- (the tile width 256: f16 on sm_75's m16n8k8 alone, the column split, M.csplit)
    return M.csplit(spec, target), M.csplit_refusal(spec, target)
  end
  -- dkdv at d128 without cp.async (16-row query tiles, dK and dV 128 registers a thread) spills
  -- 8 bytes with window, softcap and alibi all on (ptxas, sm_75): that combination runs on SIMT
  -- (bf16 on sm_75's two passes fits: lib/attn_bwd_f16scaled_d128.lua)
  if spec.kernel == "dkdv" and spec.head_dim == 128 and not target.cp_async and spec.window and spec.softcap and spec.alibi
      and not passes.passes(spec, target) then
    return false, "head_dim 128 with window, softcap and alibi together needs more than 255 registers a thread without cp.async"
  end
  -- dropout regenerates the mask with a Philox call per entry here (S^T's layout is not the forward's):
  -- d128 with a score key, and d96 without cp.async, spill 8-36 bytes (ptxas sm_75/80): those run on SIMT
  -- (bf16 on sm_75's atomic d128 in two passes fits: 224-252 registers, with varlen and every mask key too)
  if spec.kernel == "dkdv" and spec.dropout and not passes.passes(spec, target)
      and ((spec.head_dim == 128 and (spec.window or spec.softcap or spec.alibi)) or (spec.head_dim >= 96 and not target.cp_async)) then
    return false, "dropout's per-entry mask with head_dim " .. spec.head_dim .. (target.cp_async and " and a score key" or " without cp.async")
      .. " needs more than 255 registers a thread"
  end
  -- dropout with two or more score keys at the padded width 96 (head_dim 72-96): the test's dropout_mask output
  -- spilled 4-68 bytes (ptxas sm_80 ... 120); without it head_dim 88 with softcap and another key spilled 4 bytes
  -- in the atomic dkdv (sm_90): those run on SIMT
  -- (spec.head_dim is the padded width, spec.dim the real one: lib/attn_dims.lua)
  local score_keys = (spec.window and 1 or 0) + (spec.softcap and 1 or 0) + (spec.alibi and 1 or 0)
  local real_dim = spec.dim or spec.head_dim
  if spec.kernel == "dkdv" and spec.dropout and score_keys >= 2 and spec.head_dim == 96
      and (spec.dropout_mask or (real_dim == 88 and spec.softcap and not spec.deterministic)) then
    return false, "dropout" .. (spec.dropout_mask and " with its dropout_mask output" or "") .. " and "
      .. score_keys .. " score keys at head_dim " .. real_dim .. " needs more than 255 registers a thread"
  end
  -- varlen (its sequence's offsets stay live) leaves the atomic dkdv at d96/d128 without cp.async at 254
  -- registers; a mask key more spilled 12-32 bytes (ptxas, sm_75 f16): those run on SIMT (bf16's two passes at
  -- d128 fit: 206 registers with every mask key)
  if spec.kernel == "dkdv" and spec.varlen and not spec.deterministic and spec.head_dim >= 96 and not target.cp_async
      and not passes.passes(spec, target)
      and (spec.window or spec.softcap or spec.alibi) then
    return false, "varlen at head_dim 96/128 with window, softcap or alibi needs more than 255 registers a thread in the atomic dkdv without cp.async (deterministic=true or path=simt)"
  end
  if target.mma_m16n8k16 then return true end
  if f16s.applies(spec, target) then return f16s.serves(spec, target, M.available) end -- (path=auto: where it holds)
  return spec.dtype == "f16" and target.mma_m16n8k8_f16
end

-- The column split (wave 24, issue 28: the tile width 256, head_dim 136-256, f16 on sm_75's m16n8k8): dK and dV of
-- a 16-key group, or dQ of a 16-row group, are 256 columns, 128 f32 accumulators a thread each, beside the other
-- (dkdv) or S, dP and the staging (dq). So two warps share a 16-key (dkdv) or 16-row (dq) group: both compute the
-- group's S^T and dP^T (dq: S and dP) over all 256 columns (the same values: no exchange), and each accumulates
-- and stores one half of the columns, (warp & 1) * 128 on (dkdv: dK and dV, 64 + 64 accumulators a thread; dq:
-- dQ, 64). A block is 2 groups: dkdv 32 keys with 16-row query tiles (K, V 2 x 32 x 264 and Q, dO 2 x 16 x 264
-- halves + dS 16 x 40: 52,096 bytes of sm_75's 65,536), dq 32 rows with 16-key tiles (Q, dO 2 x 32 x 264 + K, V
-- 2 x 16 x 264: 50,688 bytes). The price: S^T and dP^T twice per key group, 6 products of a 16 x 16 x 256 tile
-- where one warp holding both halves would issue 4 (it cannot: 256 accumulators). Measured first, the tiles as they were admitted at 256: dkdv (64 keys, 16-row query tiles) needed
-- 86,912 bytes of shared memory, dq (64 rows, 16-key tiles) 84,480, both refused before ptxas. With the split (ptxas
-- sm_75): atomic dkdv 248-252 registers, deterministic 236, dq 164, 0 spills (the atomic dkdv with a window and the
-- softcap: attention_bwd.lua K.config's pipeline rule); docs/attention_bwd.md "d256 on sm_75".
-- v_head_dim != head_dim: the wider of the two splits (MLA's 192 / 128: 146-222 registers). varlen: dq and the
-- deterministic dkdv (140-255 registers, every mask key); the atomic dkdv spilled 40 bytes at head_dim 200 and 256
-- with window, softcap and ALiBi, 44 at 248 (default<O3>; kiln's pipeline 4-44), so it runs on SIMT.
-- Not built: bf16 (the f16-scaled path's scaling and low parts beside the split), dropout (the atomic dkdv spilled
-- 24 bytes at 256 causal; each warp of a pair would also draw the same mask): SIMT, path=mma refused naming why.
-- bf16 (wave 25, issue 28): the dq kernel on the f16-scaled path (lib/attn_bwd_f16scaled.lua) with the same split. Both
-- warps of a pair compute the group's S, dP and dS from the same staged tiles, so the rows' factors (read by the group's
-- rows, not the warp's) and dS's rows' running exponents (scale_a, from the same values) are the same in both; each
-- rescales its own half of the accumulators. Q's and dO's low parts come from the bf16 rows a k-step at a time
-- (cfg.lofrag; two tiles of 32 x 264 halves would not fit beside the split's), K's and V's from the key tiles dq
-- stages and marks itself (dq_kv_self: the deterministic dkdv runs SIMT here, lib/attn_bwd_kvscaled.lua applies), dQ
-- += dS K_lo on the warp's half of K's low part. 51,136 bytes of shared memory; ptxas sm_75 (default<O3>) over the
-- full matrix's 76 bf16 dq variants at the tile width 256: 231-255 registers, 0 spills, but head_dim 200 without causal
-- (16 bytes spilled at 255 registers, kiln's pipeline the same): that one runs on SIMT. The dkdv kernels stay on SIMT
-- for bf16 here: Q's and dO's rows scaled once by prep are 128 wide at most (and the runtime's workspace with them),
-- and K's and V's low parts need a tile of 32 x 264 halves the split's 52 KB leave no room for.
local function bf16_dq_split(spec, target)
  return spec.kernel == "dq" and f16s.applies(spec, target) and not ((spec.dim or spec.head_dim) == 200 and not spec.causal)
end
-- bf16's deterministic dkdv (wave 25, issue 28) on the same split, under path=mma only: it keeps the f16-scaled path's
-- documented bound for rows spanning more than 2^32 (lib/attn_bwd_f16scaled.lua lo_applies: the low parts spilled
-- 20-24 bytes at 255 registers, K's and V's needed 69,432 bytes of shared memory), so holds says no and path=auto runs
-- it on SIMT. Both warps of a pair read the group's K and V row factors (kw, not the warp). Q's and dO's rows come
-- from prep 256 wide (lib/attn_bwd_f16scaled.lua prep_applies, the runtime's rt_attn_bwd_scaled_width). ptxas sm_75
-- (default<O3>, kiln's pipeline the same PTX) over the full matrix's 75 deterministic bf16 dkdv variants at 136-256
-- without dropout run with path=mma (the mask keys, GQA, varlen, v_head_dim): 193-246 registers, 0 spills, no .bf16,
-- lint clean (head_dim 256 causal 236). 52,496 bytes of shared memory. The atomic one stays on SIMT: its dQ
-- step's row maxima and factors beside the split are not built.
local function bf16_dkdv_split(spec, target)
  return spec.kernel == "dkdv" and spec.deterministic and f16s.applies(spec, target) and f16s.serves(spec, target, M.available)
end
function M.csplit(spec, target)
  local half = spec.dtype == "f16" or bf16_dq_split(spec, target) or bf16_dkdv_split(spec, target)
  return spec.head_dim == 256 and half and target.mma_m16n8k8_f16 and not target.mma_m16n8k16
    and not spec.dropout and not (spec.varlen and spec.kernel == "dkdv" and not spec.deterministic) or false
end
function M.csplit_refusal(spec, target)
  if M.csplit(spec, target) then return nil end
  return "head_dim 136-256 runs on tensor cores only for f16 on sm_75's m16n8k8 and bf16's dq there (two warps a 16-key"
    .. " or 16-row group, each half of the columns; bf16's deterministic dkdv too, holding the bf16 path's bound;"
    .. " bf16's atomic dkdv and its dq at head_dim 200 without causal not yet), without"
    .. " dropout, nor varlen in the atomic dkdv (more than 255 registers a thread); the rest runs on path=simt"
end

-- kernel=dq: 4 warps x 16 query rows; keys per tile so that Q, dO, K, V fit the opt-in limit.
local function config_dq(spec, target, cfg)
  local d = spec.head_dim
  local bm, bn, ld = M.WARPS * 16, d == 128 and 32 or 64, d + 8
  if M.csplit(spec, target) then bm, bn, cfg.csplit = 32, 16, 2 end -- (two warps a 16-row group, M.csplit)
  -- without cp.async, d96 with the mask keys (per-row bounds, slopes, tanh) spills at 64 keys (ptxas
  -- on sm_75: 16-32 bytes with every key on); 32-key tiles fit
  -- (and with dropout, its Philox words: 12 bytes at 64 keys on sm_75)
  if d == 96 and not target.cp_async and (spec.window or spec.softcap or spec.alibi or spec.dropout) then bn = 32 end
  -- (bf16 on f16 tensor cores: d96's 64-key tiles spilled 36-64 bytes beside the scaling, lib/attn_bwd_f16scaled.lua)
  if d == 96 and f16s.applies(spec, target) then bn = 32 end
  -- (and varlen with dropout at a padded width, head_dim 80/88: 255 registers, 4-8 bytes spilled at 64 keys,
  -- ptxas sm_90 ... 121)
  if d == 96 and spec.varlen and spec.dropout and spec.dim and spec.dim ~= d then bn = 32 end
  local bytes = (2 * bm + 2 * bn) * ld * util.dtype_bytes[spec.dtype]
  cfg.block, cfg.path = M.WARPS * 32, "mma"
  cfg.block_m, cfg.block_n, cfg.ld = bm, bn, ld
  cfg.cp_async = target.cp_async
  if f16s.applies(spec, target) then cfg.f16s, bytes = true, bytes + f16s.float_bytes(spec, cfg) end
  -- (f16-scaled: the low parts of the block's Q and dO rows spanning more than 2^32, two tiles of bm rows filled
  -- once a block, and the warps' marks: lib/attn_bwd_f16scaled.lua dq_lo_applies)
  -- (at the tile widths 96 and 128 the two tiles do not fit in sm_75's 64 KB: cfg.lofrag, a marked block's branch takes
  -- each warp's A fragments of the low parts from the bf16 rows, lib/attn_bwd_f16scaled.lua lo_frag)
  if cfg.f16s and f16s.dq_lo_applies(spec) then
    cfg.lo, cfg.lofrag = true, d > 64
    bytes = bytes + (cfg.lofrag and 0 or 2 * bm * ld * 2) + (M.WARPS + 4) * 4
  end
  if d32.applies(spec, target, f16s) then cfg.d32, bytes = true, bytes + d32.float_bytes(spec, cfg) end
  -- (K's and V's low parts: the key tiles' rows as the deterministic dkdv marked them, lib/attn_bwd_kvscaled.lua)
  if cfg.f16s and f16s.dq_kv_lo_applies(spec) and kvs.applies(spec, target, M.available) then
    cfg.kvrows, bytes = true, bytes + 16
  -- (or dq stages K and V itself, the deterministic dkdv not on this path, and marks a key tile while converting it:
  -- lib/attn_bwd_f16scaled.lua dq_kv_self)
  elseif cfg.f16s and f16s.dq_kv_self(spec) and not kvs.applies(spec, target, M.available) then
    cfg.kvrows, cfg.kvself, bytes = true, true, bytes + 16
  -- (or dq reads the rows the deterministic dkdv wrote without their marks and marks the tiles from the bf16 rows:
  -- lib/attn_bwd_f16scaled.lua dq_kv_rows_marked)
  elseif cfg.f16s and f16s.dq_kv_rows_marked(spec) and f16s.dq_lo_applies(spec) and kvs.applies(spec, target, M.available) then
    cfg.kvrows, cfg.kvmark_rows, bytes = true, true, bytes + 16
  end
  if bytes > target.smem_static_max then cfg.dynamic_smem = bytes end
  return cfg
end

function M.config(spec, target, cfg)
  if spec.kernel == "dq" then return config_dq(spec, target, cfg) end
  local d, bm, bn = spec.head_dim, M.BLOCK_M, M.BLOCK_N
  -- Without cp.async the tiles pass through registers; at head_dim 128 that leaves too few beside
  -- dK and dV (64 + 64 a thread) unless the query tile shrinks to 16 rows; so for d96 beside the f16-scaled
  -- path's scaling (32 rows spilled 8-12 bytes, sm_75; 16 rows: 230-252 registers, 0 spills).
  if (d == 128 or (d == 96 and f16s.applies(spec, target))) and not target.cp_async then bm = 16 end
  if M.csplit(spec, target) then bm, bn, cfg.csplit = 16, 32, 2 end -- (two warps a 16-key group, M.csplit)
  local ld, ldd = d + 8, bn + 8
  local es = util.dtype_bytes[spec.dtype]
  local bytes = (2 * bn + 2 * bm) * ld * es + bm * ldd * es + 2 * bm * 4
  cfg.block, cfg.path = M.WARPS * 32, "mma"
  cfg.block_m, cfg.block_n, cfg.ld, cfg.ldd = bm, bn, ld, ldd
  cfg.cp_async = target.cp_async
  if f16s.applies(spec, target) then cfg.f16s, bytes = true, bytes + f16s.float_bytes(spec, cfg) end
  -- (f16-scaled: the low parts of a query tile's or the key block's rows spanning more than 2^32,
  -- lib/attn_bwd_f16scaled.lua: one tile of max(bm, bn) rows, the heads' mark slots and the warps' K/V marks)
  -- (cfg.kvlo: K's and V's rows too, lib/attn_bwd_f16scaled.lua kv_lo_applies; else a tile of bm rows and the heads' slots)
  if cfg.f16s and f16s.lo_applies(spec) then
    cfg.lo, cfg.kvlo = true, f16s.kv_lo_applies(spec)
    -- (cfg.kvfrag, the column split: K's and V's low parts as A fragments from their rows, no tile; lib/attn_bwd_f16scaled.lua kv_frag)
    cfg.kvfrag = f16s.kv_frag(spec)
    cfg.kvwalk, cfg.kvwalk_rows, cfg.kvwalk_vfrag = f16s.kv_walk(spec)
    cfg.lowalk, cfg.lowalk_first, cfg.lowalk_rows = f16s.lo_walk(spec) -- (a marked block's own walk for Q's and dO's rows: build_dkdv)
    bytes = bytes + (cfg.kvlo and (cfg.kvfrag and bm or math.max(bm, bn)) * ld * 2 + (6 + M.WARPS) * 4 or bm * ld * 2 + 2 * 4)
    -- (the query rows' origin in shared memory, lib/attn_bwd_f16scaled.lua qrow_shared)
    if f16s.qrow_shared(spec) then cfg.qrow_shared, bytes = true, bytes + 16 end
    -- (cfg.kvwalk, a key block marked for K's or V's rows: `lo` holds K's low part for the block's walk, and one
    -- more tile of bm rows Q's or dO's: build_dkdv's kvmarked walk)
    if cfg.kvwalk then bytes = bytes + bm * ld * 2 end
  end
  if d32.applies(spec, target, f16s) then cfg.d32, bytes = true, bytes + d32.float_bytes(spec, cfg) end
  -- (the deterministic dkdv writing its rows for a dq that takes K's and V's low parts: the rows' marks)
  if cfg.f16s and f16s.dq_kv_lo_applies(spec) and kvs.applies(spec, target, M.available) then
    cfg.kvrows, bytes = true, bytes + 2 * bn * 4
  end
  if bytes > target.smem_static_max then cfg.dynamic_smem = bytes end
  cfg.passes = passes.passes(spec, target)
  return cfg
end

-- Shared tiles: ks, vs (bn x ld), qs, dos (bm x ld), dss (bm x ldd) in the dtype (f16 on the f16-scaled
-- path); lse2, dl (bm, f32), and the f16-scaled path's f32 arrays (lib/attn_bwd_f16scaled.lua floats).
local function alloc(b, spec, cfg)
  local dt, bm, bn, ld, ldd = cfg.f16s and "f16" or spec.dtype, cfg.block_m, cfg.block_n, cfg.ld, cfg.ldd
  local es = util.dtype_bytes[dt]
  local halves = { { "ks", bn * ld }, { "vs", bn * ld }, { "qs", bm * ld }, { "dos", bm * ld } }
  if ldd then halves[#halves + 1] = { "dss", bm * ldd } end
  if cfg.lo and spec.kernel == "dq" then
    if not cfg.lofrag then
      halves[#halves + 1] = { "qlo", bm * ld }
      halves[#halves + 1] = { "olo", bm * ld }
    end
  elseif cfg.lo then
    halves[#halves + 1] = { "lo", cfg.kvlo and not cfg.kvfrag and math.max(bm, cfg.block_n) * ld or bm * ld }
    if cfg.kvwalk then halves[#halves + 1] = { "qlo", bm * ld } end -- (build_dkdv's kvmarked walk)
  end
  local floats = ldd and { { "lse2", bm }, { "dl", bm } } or {}
  if cfg.lo and spec.kernel == "dq" then floats[#floats + 1] = { "kvmark", M.WARPS + 4 } -- (the warps' Q/dO marks)
  elseif cfg.lo then
    floats[#floats + 1] = { "lomark", 2 }
    -- (the warps' K/V marks; the block's first key, batch, kv head; one unused: the arrays after it keep the 16-byte
    -- alignment they had, d32's 8-byte loads among them)
    if cfg.kvlo then floats[#floats + 1] = { "kvmark", M.WARPS + 4 } end
  end
  if cfg.f16s then
    for _, f in ipairs(f16s.floats(spec, cfg)) do floats[#floats + 1] = f end
  end
  if cfg.d32 then
    for _, f in ipairs(d32.floats(spec, cfg)) do floats[#floats + 1] = f end
  end
  -- (cfg.kvrows, K's and V's low parts in dq: the deterministic dkdv's rows' marks, K's then V's; dq's marked tile slot)
  if cfg.kvrows then floats[#floats + 1] = spec.kernel == "dq" and { "kvtile", 4 } or { "kvrm", 2 * cfg.block_n } end
  if cfg.qrow_shared then floats[#floats + 1] = { "qrow", 4 } end -- (the query rows' origin; 3 unused)
  local sh = {}
  if cfg.dynamic_smem then
    local base, off = b:dynamic_shared(dt), 0
    for _, s in ipairs(halves) do
      sh[s[1]] = base + off
      off = off + s[2]
    end
    if #floats > 0 then
      local fbase = b:dynamic_shared("f32")
      local foff = util.ceil_div(off * es, 16) * 16 // 4
      for _, f in ipairs(floats) do
        sh[f[1]] = fbase + foff
        foff = foff + f[2]
      end
    end
  else
    for _, s in ipairs(halves) do sh[s[1]] = b:shared(dt, s[2], 128) end
    for _, f in ipairs(floats) do sh[f[1]] = b:shared("f32", f[2], 16) end
  end
  return sh
end

-- Copies rows [row0, row0 + rows) of a [seq, d] slice into the tile dst (row stride ld), 16 bytes
-- a copy: cp.async where the target has it (rows past seq zero-filled), else through registers
-- (rows past seq read row 0; every product they meet is masked). The caller waits and syncs.
-- A padded head_dim (lib/attn_dims.lua: spec.dim < spec.head_dim): chunks past spec.dim read chunk 0
-- and are zero in the tile, so they add nothing to S, dP, dK, dV or dQ.
local function load_tile(b, spec, cfg, dst, src, stride, row0, rows, seq)
  local cpr, real_cpr = spec.head_dim // 8, (spec.dim or spec.head_dim) // 8
  local tid = b:tid()
  local threads = M.WARPS * 32
  for it = 0, util.ceil_div(rows * cpr, threads) - 1 do
    local item = tid + it * threads
    local r, c = item // cpr, item % cpr
    local issue = function()
      local ok = b:lt(row0 + r, seq)
      local real = real_cpr < cpr and b:lt(c, real_cpr) or nil
      local from = src + b:i64(b:select(ok, row0 + r, 0)) * stride + (real and b:select(real, c, 0) or c) * 8
      local to = dst + r * cfg.ld + c * 8
      if cfg.cp_async then
        b:cp_async(to, from, { pred = real and b:and_(ok, real) or ok })
      else
        local v = b:load_vec(from, 8, { align = 16 })
        if real then
          local zero = b:from_f32(0.0, spec.dtype)
          for i = 1, 8 do v[i] = b:select(real, v[i], zero) end
        end
        b:store_vec(to, v, { align = 16 })
      end
    end
    if (it + 1) * threads > rows * cpr then b:if_(b:lt(item, rows * cpr), issue) else issue() end
  end
end

-- load_tile, or on the f16-scaled path (cfg.f16s) its scaled staging with the rows' factors into fdst.
local function stage(b, spec, cfg, dst, src, stride, row0, rows, seq, fdst)
  if cfg.f16s then return f16s.load(b, spec, cfg, M.WARPS * 32, dst, src, stride, row0, rows, seq, fdst) end
  load_tile(b, spec, cfg, dst, src, stride, row0, rows, seq)
end

-- ldmatrix fragments (lane = tid & 31) from a row-major tile with row stride ld:
-- A operand (16 x 16) at rows r0.., columns c0..;
local function frag_a(b, tile, ld, lane, r0, c0)
  local row = r0 + (lane & 7) + ((lane >> 3) & 1) * 8
  return b:ldmatrix(tile + row * ld + c0 + (lane >> 4) * 8, 4)
end
-- B operands of two n-tiles (n0.., n0+8..) x 16 k from a tile stored [n][k] (B[k][n] = tile[n][k]);
local function frag_bn(b, tile, ld, lane, n0, k0)
  local row = n0 + (lane & 7) + ((lane >> 4) << 3)
  local f = b:ldmatrix(tile + row * ld + k0 + ((lane >> 3) & 1) * 8, 4)
  return { f[1], f[2] }, { f[3], f[4] }
end
-- B operands of two n-tiles x 16 k from a tile stored [k][n] (ldmatrix .trans).
local function frag_bk(b, tile, ld, lane, k0, n0)
  local row = k0 + (lane & 7) + ((lane >> 3) & 1) * 8
  local f = b:ldmatrix(tile + row * ld + n0 + (lane >> 4) * 8, 4, true)
  return { f[1], f[2] }, { f[3], f[4] }
end

-- The B operand of one n-tile x 16 k from a tile stored [k][n] (ldmatrix .x2 .trans: lanes 0-15 address).
local function frag_bk1(b, tile, ld, lane, k0, n0)
  local row = k0 + (lane & 7) + ((lane >> 3) & 1) * 8
  local f = b:ldmatrix(tile + row * ld + n0, 2, true)
  return { f[1], f[2] }
end

-- The f32 accumulators held in vars (vars[j][e], n 8-column tiles) scaled up for a low-part product and back: acc =
-- vars * up, body(acc) adds the products, vars = acc * down (exact powers of two 2^LO and 2^-LO: rows spanning more
-- than 2^32, lib/attn_bwd_f16scaled.lua).
local function lo_scaled(vars, n, up, down, body)
  local acc = {}
  for j = 0, n - 1 do
    acc[j] = {}
    for e = 1, 4 do acc[j][e] = vars[j][e]:get() * up end
  end
  body(acc)
  for j = 0, n - 1 do
    for e = 1, 4 do vars[j][e]:set(acc[j][e] * down) end
  end
end

-- A low-part product on the f32 accumulators held in vars (lo_scaled): acc += A (a_tile's 16 rows of this warp) B^T
-- (b_tile, n/2 pairs of 8-row tiles) over kd k-steps of 16. a_frags: A's kd fragments held in registers instead of
-- a_tile; or { frag = f, steps = s }: f(kk) gives the fragment of k-step kk, taken in a loop of s k-steps (a runtime
-- kk: one k-step's loads live at a time; build_dkdv's cfg.kvwalk_vfrag).
local function lo_mma(b, mdt, a_tile, b_tile, vars, n, kd, ld, lane, warp, up, down, a_frags)
  if a_frags and a_frags.frag then
    for j = 0, n - 1 do
      for e = 1, 4 do vars[j][e]:set(vars[j][e]:get() * up) end
    end
    b:for_(0, a_frags.steps, 1, function(kk)
      local a = a_frags.frag(kk)
      for jp = 0, n // 2 - 1 do
        local b1, b2 = frag_bn(b, b_tile, ld, lane, jp * 16, kk * 16)
        for y, bf in ipairs({ b1, b2 }) do
          local j = 2 * jp + y - 1
          local c = b:mma(mdt, a, bf, { vars[j][1]:get(), vars[j][2]:get(), vars[j][3]:get(), vars[j][4]:get() })
          for e = 1, 4 do vars[j][e]:set(c[e]) end
        end
      end
    end)
    for j = 0, n - 1 do
      for e = 1, 4 do vars[j][e]:set(vars[j][e]:get() * down) end
    end
    return
  end
  lo_scaled(vars, n, up, down, function(acc)
    for kk = 0, kd - 1 do
      local a = a_frags and a_frags[kk] or frag_a(b, a_tile, ld, lane, warp * 16, kk * 16)
      for jp = 0, n // 2 - 1 do
        local b1, b2 = frag_bn(b, b_tile, ld, lane, jp * 16, kk * 16)
        acc[2 * jp] = b:mma(mdt, a, b1, acc[2 * jp])
        acc[2 * jp + 1] = b:mma(mdt, a, b2, acc[2 * jp + 1])
      end
    end
  end)
end

local function zeros(n)
  local t = {}
  for j = 0, n - 1 do t[j] = { 0.0, 0.0, 0.0, 0.0 } end
  return t
end

-- The A operand (16 x 16) made of C fragments c[2s], c[2s+1] (f32), rounded to dt.
local function c_to_a(b, c, s, dt)
  local x, y = c[2 * s], c[2 * s + 1]
  return { b:pack(x[1], x[2], dt), b:pack(x[3], x[4], dt), b:pack(y[1], y[2], dt), b:pack(y[3], y[4], dt) }
end

-- Builds the dkdv kernel body. io: p (params), base(t, bi, h), row_index(bi, h), key_bound, and
-- store(acc, mul, dst, stride) hooks are given by the template; io.hooks (window, softcap, alibi,
-- top_left: attention_bwd.lua's mask_hooks) when the spec has them.
function M.build_dkdv(b, spec, cfg, p, io)
  local d, bm, bn, ld, ldd, dt = spec.head_dim, cfg.block_m, cfg.block_n, cfg.ld, cfg.ldd, spec.dtype
  local dim = spec.dim or d
  local sh = alloc(b, spec, cfg)
  local fs = cfg.f16s and f16s -- (bf16 on f16 tensor cores: lib/attn_bwd_f16scaled.lua)
  local mdt = fs and "f16" or dt
  local tid = b:tid()
  local lane, warp = tid & 31, tid >> 5
  local g, t = lane >> 2, lane & 3
  -- (cfg.csplit, M.csplit: kw the warp's 16-key group, ccol the first of its half of dK's and dV's columns)
  local kw = cfg.csplit and warp >> 1 or warp
  local bi, hkv = b:ctaid("z"), b:ctaid("y")
  local group = p.heads_q // p.heads_kv
  local k0 = b:ctaid("x") * bn
  local shift = p.seq_k - p.seq_q
  local fast, kT, vT -- (cfg.d32: whether the block took one power of two for K and one for V, and those factors)
  local kvspan -- (cfg.kvlo: whether one of this thread's K or V rows spans more than 2^32, an i32)
  if cfg.d32 then
    fast, kT, vT, kvspan = d32.stage_kv(b, spec, cfg, sh, io.base("k", bi, hkv), io.base("v", bi, hkv), p.stride_ks,
                                        p.stride_vs, k0, p.seq_k)
  elseif cfg.kvlo then -- (cfg.kvrows: the rows' marks for dq, lib/attn_bwd_kvscaled.lua write)
    kvspan = f16s.load(b, spec, cfg, M.WARPS * 32, sh.ks, io.base("k", bi, hkv), p.stride_ks, k0, bn, p.seq_k, sh.kf, true,
                       cfg.kvrows and sh.kvrm)
    kvspan = kvspan | f16s.load(b, spec.vspec or spec, cfg, M.WARPS * 32, sh.vs, io.base("v", bi, hkv), p.stride_vs, k0, bn,
                                p.seq_k, sh.vf, true, cfg.kvrows and sh.kvrm + bn)
  else
    stage(b, spec, cfg, sh.ks, io.base("k", bi, hkv), p.stride_ks, k0, bn, p.seq_k, sh.kf)
    stage(b, spec.vspec or spec, cfg, sh.vs, io.base("v", bi, hkv), p.stride_vs, k0, bn, p.seq_k, sh.vf)
  end
  if cfg.kvlo then -- (the warps' answers, read after the first head's scan barrier; k0 for the low parts' fills)
    f16s.kv_mark(b, sh, kvspan)
    b:if_(b:eq(tid, 0), function()
      for i, x in ipairs({ k0, bi, hkv }) do b:store(sh.kvmark + (M.WARPS + i - 1), b:from_bits(x)) end
    end)
  end
  if cfg.kvrows and not cfg.d32 and not cfg.kvlo then -- (the rows' marks for dq, lib/attn_bwd_kvscaled.lua write)
    b:barrier() -- (the rows' factors are staged)
    f16s.row_marks(b, spec, M.WARPS * 32, io.base("k", bi, hkv), p.stride_ks, k0, bn, p.seq_k, sh.kf, sh.kvrm)
    f16s.row_marks(b, spec.vspec or spec, M.WARPS * 32, io.base("v", bi, hkv), p.stride_vs, k0, bn, p.seq_k, sh.vf,
                   sh.kvrm + bn)
  end
  if cfg.qrow_shared then -- (the query rows' origin, varlen's first query row or the batch, read again at each query
    -- tile: the first tile's barrier orders it)
    b:if_(b:eq(tid, 0), function() b:store(sh.qrow, b:from_bits(spec.varlen and p.q_at or bi)) end)
  end
  if cfg.cp_async then b:cp_async_commit() end
  if cfg.kvs then kvs.write(b, cfg, M.WARPS * 32, sh, p, bi, hkv, k0, d) end
  if cfg.lo then -- (the heads' mark slots: lib/attn_bwd_f16scaled.lua lo_scan)
    b:if_(b:eq(tid, 0), function() b:store(sh.lomark, 0.0) b:store(sh.lomark + 1, 0.0) end)
  end

  -- (padded head_dim: the products stop at the 16-column step holding spec.dim; the rest are zeros)
  local vd = spec.vdim or dim -- (v_head_dim: dP and dV run to it, S and dK to head_dim)
  local kd = util.ceil_div(math.max(dim, vd), 16)
  local nq, dtiles = bm // 8, 2 * kd
  local ccol = 0
  if cfg.csplit then -- (each warp of a pair: ceil(kd / 2) 16-column steps of dK and dV, from ccol)
    dtiles = 2 * util.ceil_div(kd, 2)
    ccol = (warp & 1) * (dtiles * 8)
  end
  -- This thread's two keys (C rows g and g + 8 of the warp's 16): in range, and the first query
  -- that sees them (causal).
  -- (hooks: the rows [first_q, end_q) that see the key, and the rows the block's keys meet)
  local hooks = io.hooks
  local key, key_ok, first_q, end_q = {}, {}, {}, {}
  for h = 0, 1 do
    key[h] = k0 + kw * 16 + g + 8 * h
    key_ok[h] = b:lt(key[h], p.seq_k)
    if hooks then first_q[h], end_q[h] = mask.query_range(hooks.mask, key[h], key[h])
    else first_q[h] = key[h] - shift end
  end
  local q_start, q_end = 0, p.seq_q
  if hooks then q_start, q_end = mask.query_range(hooks.mask, k0, k0 + bn - 1)
  elseif spec.causal then q_start = b:max(k0 - shift, 0) end
  -- dQ: warp w takes query rows 16 (w % qg) and head-dim slice w // qg of 4 / qg.
  local qg = bm // 16
  local qr, dw = (warp % qg) * 16, d // (M.WARPS // qg)
  local dc0 = (warp // qg) * dw
  -- dV and dK in one pass over the query tiles, or in two (cfg.passes: lib/attn_bwd_f16scaled_d128.lua): the
  -- first accumulates dV alone and stores it, the second recomputes P, adds dS and takes dK and the dQ step.
  -- kvmarked (cfg.kvwalk, lib/attn_bwd_f16scaled.lua kv_walk: a key block holding a K or V row that spans more
  -- than 2^32, the call below): the block's own walk, in two passes, whose every tile adds every low part's product
  -- (Q's, dO's, K's and V's: a row that does not span has a low part of 0; on_marked). K's low part is filled once a pass
  -- into `lo` (S^T and dQ read it there), V's once before the dK pass into this warp's A fragments (dP^T's; with
  -- cfg.kvwalk_vfrag from V's rows at each tile instead, below), so the query loop reads no K or V row; Q's and dO's
  -- go to the tile `qlo`. The other blocks' walk holds Q's and dO's low parts alone, on the marked heads' branch. (K's
  -- and V's on that branch beside both accumulators, filled from their rows inside the loop, spilled 8-28 bytes at 255
  -- registers, ptxas sm_75: d64 causal, d80/d96; a copy of the one-pass loop for marked heads 8-40, the two passes with
  -- those fills in the loop 4-36.) With cfg.lowalk too (lo_walks below) a block not marked for its K or V rows takes
  -- lo_walk's two walks.
  -- lomarked (cfg.lowalk, lib/attn_bwd_f16scaled.lua lo_walk: a key block one of whose heads holds a Q or dO row that
  -- spans more than 2^32, or that holds such a K or V row itself): the block's own walk, the walk above (the marked
  -- heads' low parts on branches) on the per-row body alone; the other blocks' walk holds no low part's code.
  -- (cfg.lowalk "passes", the deterministic dkdv at the tile width 128: the lomarked walk in two passes, dV then dK;
  -- "dk halves", the atomic one beside dropout, a window and ALiBi: in three, dV, dK's first half with dQ, its second)
  local function walk(walk_passes, kvmarked, lomarked) for pi, pass in ipairs(walk_passes) do
    local lo_walk = cfg.lo and (not cfg.lowalk or lomarked or kvmarked) -- (this walk holds the low parts' code)
    if lomarked and pi > 1 then -- (a pass after the first scans each head again: the heads' slots cleared first)
      b:barrier()
      b:if_(b:eq(tid, 0), function() b:store(sh.lomark, 0.0) b:store(sh.lomark + 1, 0.0) end)
      b:barrier()
    end
    -- (cfg.kvwalk_rows: a kvmarked walk's query tiles of that many rows, fewer than bm: S^T's, dP^T's, P^T's and dS^T's
    -- fragments halved where the walk spilled at bm, lib/attn_bwd_f16scaled.lua kv_walk; the dQ step's warps then
    -- take all the tile's rows and a quarter of the head dim each; cfg.lowalk_rows the same for a lomarked walk, lo_walk)
    local bm, nq, qr, dw, dc0 = bm, nq, qr, dw, dc0
    local walk_rows = kvmarked and cfg.kvwalk_rows or lomarked and cfg.lowalk_rows
    if walk_rows then
      bm = walk_rows
      nq, qr, dw, dc0 = bm // 8, 0, d // M.WARPS, warp * (d // M.WARPS)
    end
    local vlo -- (kvmarked, the dK pass: this warp's A fragments of V's low part)
    if kvmarked then
      b:barrier() -- (every warp done with `lo`: the previous pass's K low part)
      if pass.dk and cfg.kvwalk_vfrag then
        -- (cfg.kvwalk_vfrag, lib/attn_bwd_f16scaled.lua kv_walk's third result: V's low part's A fragments from V's bf16
        -- rows at each marked tile, a k-step at a time in a loop (lo_frag), not held across the query loop; the block's
        -- first key, batch and kv head read back from shared memory there, as fill_lo's)
        local vspec = spec.vspec or spec
        vlo = { steps = f16s.lo_steps(vspec), frag = function(kk)
          local r0, bb, hh = b:bits(b:load(sh.kvmark + M.WARPS)), b:bits(b:load(sh.kvmark + (M.WARPS + 1))),
            b:bits(b:load(sh.kvmark + (M.WARPS + 2)))
          local r = { [0] = warp * 16 + g, [1] = warp * 16 + g + 8 }
          return f16s.lo_frag(b, vspec, io.base("v", bb, hh), p.stride_vs, { [0] = r0 + r[0], [1] = r0 + r[1] }, r, p.seq_k,
                              sh.vf, t)(kk)
        end }
      elseif pass.dk then
        f16s.lo_rows(b, spec.vspec or spec, cfg, M.WARPS * 32, sh.lo, io.base("v", bi, hkv), p.stride_vs, k0, bn, p.seq_k, sh.vf)
        b:barrier()
        vlo = {}
        for kk = 0, kd - 1 do vlo[kk] = frag_a(b, sh.lo, ld, lane, warp * 16, kk * 16) end
        b:barrier()
      end
      f16s.lo_rows(b, spec, cfg, M.WARPS * 32, sh.lo, io.base("k", bi, hkv), p.stride_ks, k0, bn, p.seq_k, sh.kf)
    end -- (the first tile's barriers order the fill before its use)
    local dk, dv = {}, {}
    for j = 0, dtiles - 1 do
      dk[j], dv[j] = {}, {}
      for e = 1, 4 do
        dk[j][e] = b:var("f32", 0.0)
        dv[j][e] = b:var("f32", 0.0)
      end
    end
    -- (pass.cols: the dK columns jd0 * 16 .. jd1 * 16 this pass accumulates and stores, a lomarked walk's dK in two
    -- halves, lib/attn_bwd_f16scaled.lua lo_walk "dk halves"; dkc: those accumulators from 0, scale_a's view)
    local jd0, jd1 = pass.cols and pass.cols[1] or 0, pass.cols and pass.cols[2] or dtiles // 2
    local dkc = {}
    for j = 2 * jd0, 2 * jd1 - 1 do dkc[j - 2 * jd0] = dk[j] end
    local stk, stv = fs and fs.rows_state(b), fs and fs.rows_state(b) -- (dK's and dV's running exponents)
    local cx = cfg.d32 and { -- (the fast body's view of the kernel, lib/attn_bwd_f16scaled_d32.lua)
      spec = spec, cfg = cfg, sh = sh, p = p, fast = fast, kT = kT, vT = vT,
      fscale = (spec.softcap and hooks.mask.cap_in or p.scale * LOG2E) * kT, -- (softcap: the tanh's argument)
      mk = hooks and hooks.mask, end_q = end_q, fresh = b:var("i32", 1), -- (fresh: no tile done yet)
      d = d, bm = bm, bn = bn, ld = ld, nq = nq, kd = kd, dtiles = dtiles, k0 = k0, shift = shift, first_q = first_q,
      tid = tid, lane = lane, warp = warp, g = g, t = t, dk = dk, dv = dv, stk = stk, stv = stv,
      frag = { a = frag_a, bn = frag_bn, bk = frag_bk }, zeros = zeros,
    }

    b:for_(0, group, 1, function(gi)
      local h = hkv * group + gi
      local qb, dob = io.base("q", bi, h), io.base("dout", bi, h)
      local ri = io.row_index(bi, h)
      local slope2 = spec.alibi and mask.slope(hooks.mask, h)
      -- (a head holding a Q or dO row spanning more than 2^32, or a key block holding such a K or V row: its tiles
      -- add the low parts' products)
      local marked = lo_walk and not kvmarked and fs.lo_scan(b, sh, p, ri, q_start, q_end, gi, M.WARPS * 32)
      if lo_walk and cfg.kvlo and not cfg.kvwalk then marked = b:or_(marked, fs.kv_marked(b, sh, M.WARPS)) end
      -- (K's and V's low parts: on the marked heads' branch, or only in a kvmarked walk with cfg.kvwalk)
      local kvparts = lo_walk and cfg.kvlo and (not cfg.kvwalk or kvmarked)
      -- (a kvmarked walk's branches test the block's mark read again from shared memory at each: with the code on
      -- branches ptxas allocates it in fewer registers than straight, where d64 and d96 spilled 20-76 bytes)
      local function on_marked(f) b:if_(kvmarked and fs.kv_marked(b, sh, M.WARPS) or marked, f) end
      local function tile(q0)
        b:barrier() -- the previous tile is done with Q, dO, dS and the row stats
        -- (cfg.qrow_shared: the rows' index from their origin read again, so that neither is held across the query loop;
        -- Q's and dO's row pointers likewise on the marked tiles' branch, fill_lo)
        local function rows_base(t)
          local at = b:bits(b:load(sh.qrow))
          if t then return spec.varlen and p.head_at(t, h, at) or io.base(t, at, h) end
          return spec.varlen and p.rows_at(h, at) or io.row_index(at, h)
        end
        local ri = cfg.qrow_shared and rows_base() or ri
        if fs then -- (f16-scaled: Q and dO as prep scaled them, with their row factors)
          fs.load_ws(b, cfg, M.WARPS * 32, sh.qs, p.qh + ri * d, d, q0, bm, p.seq_q)
          fs.load_ws(b, cfg, M.WARPS * 32, sh.dos, p.doh + ri * d, d, q0, bm, p.seq_q)
        else
          stage(b, spec, cfg, sh.qs, qb, p.stride_qs, q0, bm, p.seq_q, sh.qf)
          stage(b, spec.vspec or spec, cfg, sh.dos, dob, p.stride_douts, q0, bm, p.seq_q, sh.of)
        end
        if cfg.cp_async then b:cp_async_commit() end
        b:if_(b:lt(tid, bm), function()
          local row = q0 + tid
          local r = b:i64(b:select(b:lt(row, p.seq_q), row, 0))
          b:store(sh.lse2 + tid, b:load(p.lse + ri + r) * LOG2E)
          b:store(sh.dl + tid, b:load(p.delta + ri + r))
          if fs then -- (prep stores a marked row's Q factor negative: its magnitude here)
            b:store(sh.qf + tid, b:abs(b:load(p.qsf + ri + r)))
            b:store(sh.of + tid, b:load(p.dosf + ri + r))
          end
        end)
        if cfg.cp_async then b:cp_async_wait(0) end
        b:barrier()
        -- (a marked tile: the tile `lo` (qot in a kvmarked walk) holds the low parts of Q's or dO's rows, `held` says which)
        local held
        local qot = kvmarked and sh.qlo or sh.lo
        local function fill_lo(which)
          if held == which then return end
          if held then b:barrier() end -- (every warp done with the other)
          if which == "q" then
            local src = cfg.qrow_shared and rows_base("q") or qb
            fs.lo_rows(b, spec, cfg, M.WARPS * 32, qot, src, p.stride_qs, q0, bm, p.seq_q, sh.qf)
          elseif which == "o" then
            local src = cfg.qrow_shared and rows_base("dout") or dob
            fs.lo_rows(b, spec.vspec or spec, cfg, M.WARPS * 32, qot, src, p.stride_douts, q0, bm, p.seq_q, sh.of)
          else -- (the key block's rows: K's and V's low parts, bn rows; their first key, batch and kv head read from
            -- shared memory here, so that no row address of theirs is hoisted out of the query loop and kept live there)
            local r0, bb, hh = b:bits(b:load(sh.kvmark + M.WARPS)), b:bits(b:load(sh.kvmark + (M.WARPS + 1))),
              b:bits(b:load(sh.kvmark + (M.WARPS + 2)))
            if which == "k" then fs.lo_rows(b, spec, cfg, M.WARPS * 32, sh.lo, io.base("k", bb, hh), p.stride_ks, r0, bn, p.seq_k, sh.kf, true)
            else fs.lo_rows(b, spec.vspec or spec, cfg, M.WARPS * 32, sh.lo, io.base("v", bb, hh), p.stride_vs, r0, bn, p.seq_k, sh.vf, true) end
          end
          b:barrier()
          held = which
        end
        -- (cfg.kvfrag: this warp's A fragments of K's ("k") or V's ("v") low part, the group's keys, a k-step at a time
        -- from the bf16 rows; their first key, batch and kv head read back from shared memory, as fill_lo's)
        local function kv_frag(which)
          local kspec = which == "k" and spec or spec.vspec or spec
          return { steps = f16s.lo_steps(kspec), frag = function(kk)
            local r0, bb, hh = b:bits(b:load(sh.kvmark + M.WARPS)), b:bits(b:load(sh.kvmark + (M.WARPS + 1))),
              b:bits(b:load(sh.kvmark + (M.WARPS + 2)))
            local r = { [0] = kw * 16 + g, [1] = kw * 16 + g + 8 }
            local src = which == "k" and io.base("k", bb, hh) or io.base("v", bb, hh)
            return f16s.lo_frag(b, kspec, src, which == "k" and p.stride_ks or p.stride_vs, { [0] = r0 + r[0], [1] = r0 + r[1] },
                                r, p.seq_k, which == "k" and sh.kf or sh.vf, t)(kk)
          end }
        end
        local kf, vf = {}, {} -- (f16-scaled: this thread's keys' K and V row factors)
        if fs then
          for hh = 0, 1 do
            -- (cfg.csplit: the group's keys, kw; both warps of a pair read the same factors)
            kf[hh], vf[hh] = b:load(sh.kf + (kw * 16 + g + 8 * hh)), b:load(sh.vf + (kw * 16 + g + 8 * hh))
          end
        end

        -- S^T and dP^T: 16 keys x bm queries per warp.
        local s, dp = zeros(nq), zeros(nq)
        for kk = 0, kd - 1 do
          local ak = frag_a(b, sh.ks, ld, lane, kw * 16, kk * 16)
          local av = frag_a(b, sh.vs, ld, lane, kw * 16, kk * 16)
          for jp = 0, nq // 2 - 1 do
            local q1, q2 = frag_bn(b, sh.qs, ld, lane, jp * 16, kk * 16)
            s[2 * jp] = b:mma(mdt, ak, q1, s[2 * jp])
            s[2 * jp + 1] = b:mma(mdt, ak, q2, s[2 * jp + 1])
            if pass.dk then -- (dP feeds dS alone)
              local o1, o2 = frag_bn(b, sh.dos, ld, lane, jp * 16, kk * 16)
              dp[2 * jp] = b:mma(mdt, av, o1, dp[2 * jp])
              dp[2 * jp + 1] = b:mma(mdt, av, o2, dp[2 * jp + 1])
            end
          end
        end
        if lo_walk then -- S^T += K (Q's low part)^T 2^-LO, dP^T += V (dO's low part)^T 2^-LO: a marked tile
          local sv, dpv = {}, {}
          for j = 0, nq - 1 do
            sv[j], dpv[j] = {}, {}
            for e = 1, 4 do
              sv[j][e] = b:var("f32", 0.0)
              sv[j][e]:set(s[j][e])
              if pass.dk then
                dpv[j][e] = b:var("f32", 0.0)
                dpv[j][e]:set(dp[j][e])
              end
            end
          end
          on_marked(function()
            local up, down = b:f32(2.0 ^ fs.LO), b:f32(2.0 ^ -fs.LO)
            -- (fill, A tile, B tile, accumulators): S^T += K Q_lo^T and K_lo Q^T, dP^T += V_lo dO^T and V dO_lo^T
            -- (a low part of a row that does not span is 0; both of a column's entries low: that term is lost)
            -- (kvmarked: K's low part stays in `lo`, V's in vlo, no fill)
            local prods = { { "q", sh.ks, qot, sv } }
            if kvparts then prods[#prods + 1] = { "k", sh.lo, sh.qs, sv } end
            if pass.dk then
              if kvparts then prods[#prods + 1] = { "v", sh.lo, sh.dos, dpv } end
              prods[#prods + 1] = { "o", sh.vs, qot, dpv }
            end
            for _, x in ipairs(prods) do
              local kv = x[1] == "k" or x[1] == "v"
              local af = kvmarked and x[1] == "v" and vlo
              if cfg.kvfrag and kv then -- (K's or V's low part: A fragments of the group's 16 keys from their rows)
                af = kv_frag(x[1])
              elseif not (kvmarked and kv) then fill_lo(x[1]) end
              -- (cfg.csplit: the group's keys, kw; the k-steps in a loop, not unrolled: lib/attn_bwd_f16scaled.lua kv_frag)
              if cfg.csplit and not af then
                local tile = x[2]
                af = { steps = kd, frag = function(kk) return frag_a(b, tile, ld, lane, kw * 16, kk * 16) end }
              end
              lo_mma(b, mdt, x[2], x[3], x[4], nq, kd, ld, lane, warp, up, down, af)
            end
          end)
          for j = 0, nq - 1 do
            for e = 1, 4 do
              s[j][e] = sv[j][e]:get()
              if pass.dk then dp[j][e] = dpv[j][e]:get() end
            end
          end
        end
        -- P^T and dS^T in place of S^T and dP^T.
        local scale2 = p.scale * LOG2E
        local qf, of = {}, {} -- (f16-scaled: the Q and dO row factors of column (j, e))
        local cols = {} -- column (j, e)'s query row, its lse and delta, whether it is inside seq_q
        local function column(j, e)
          local col = j * 8 + t * 2 + e
          local c = { qi = q0 + col }
          c.lse2, c.dl = b:load(sh.lse2 + col), b:load(sh.dl + col)
          c.q_ok = b:lt(c.qi, p.seq_q)
          if fs then qf[j][e], of[j][e] = b:load(sh.qf + col), b:load(sh.of + col) end
          return c
        end
        -- Entry (j, 2 hh + e + 1) of column c: P and dS from S and dP (sv, dpv); masked: entries no row sees are 0
        -- (the unmasked copy is for a tile every entry of which is visible: the same values without the selects).
        local function entry(j, e, hh, c, sv, dpv, masked)
          local qi, lse2, dl = c.qi, c.lse2, c.dl
          local vis = masked and b:and_(c.q_ok, key_ok[hh])
          local keep = function(x) return masked and b:select(vis, x, 0.0) or x end
          if fs then -- the products' row factors back on S^T and dP^T (exact)
            sv = sv * (qf[j][e] * kf[hh])
            dpv = dpv * (of[j][e] * vf[hh])
          end
          -- dropout: Z of (qi, key) (1 / (1 - p) kept, 0 dropped): P Z feeds dV, dS = P (dP Z - D)
          local z = io.drop and dropout.factor(io.drop, dropout.keep_at(io.drop, bi, h, qi, key[hh]))
          local dpz = z and dpv * z or dpv
          if hooks then
            if masked then vis = b:and_(vis, b:and_(b:ge(qi, first_q[hh]), b:lt(qi, end_q[hh]))) end
            local x, th = sv * scale2, nil
            if hooks.score then x, th = hooks.score(sv, qi, key[hh], slope2) end
            local pv = keep(b:ex2_approx(x - lse2))
            local ds = pv * (dpz - dl)
            if th then ds = ds * (1.0 - th * th) end
            return z and pv * z or pv, keep(ds)
          end
          if masked and spec.causal then vis = b:and_(vis, b:ge(qi, first_q[hh])) end
          local pv = keep(b:ex2_approx(b:fma(sv, scale2, -lse2)))
          return z and pv * z or pv, keep(pv * (dpz - dl))
        end
        -- (two passes: S^T's two row factors and the score's scale in one, qf kfs, with kfs = kf times the scale:
        -- exact, a power of two times it; dP^T's factors and delta in one fma: entry's values bit for bit, but where
        -- a product of two row factors leaves f32's normal range, rows below about 2^-50, where both lose)
        local kfs = {}
        local function entry_folded(j, e, hh, c, sv, dpv, masked)
          local qi = c.qi
          local vis = masked and b:and_(c.q_ok, key_ok[hh])
          local keep = function(x) return masked and b:select(vis, x, 0.0) or x end
          local sf, df = qf[j][e] * kfs[hh], of[j][e] * vf[hh]
          local z = io.drop and dropout.factor(io.drop, dropout.keep_at(io.drop, bi, h, qi, key[hh]))
          local dd = z and (dpv * df) * z - c.dl or b:fma(dpv, df, -c.dl) -- dP Z - D
          if hooks then
            if masked then vis = b:and_(vis, b:and_(b:ge(qi, first_q[hh]), b:lt(qi, end_q[hh]))) end
            local x, th = sv * sf, nil
            if hooks.score_scaled then x, th = hooks.score_scaled(x, qi, key[hh], slope2) end
            local pv = keep(b:ex2_approx(x - c.lse2))
            local ds = pv * dd
            if th then ds = ds * (1.0 - th * th) end
            return z and pv * z or pv, keep(ds)
          end
          if masked and spec.causal then vis = b:and_(vis, b:ge(qi, first_q[hh])) end
          local pv = keep(b:ex2_approx(b:fma(sv, sf, -c.lse2)))
          return z and pv * z or pv, keep(pv * dd)
        end
        for j = 0, nq - 1 do qf[j], of[j], cols[j] = {}, {}, {} end
        if not cfg.passes then
          for j = 0, nq - 1 do
            for e = 0, 1 do
              cols[j][e] = column(j, e)
              for hh = 0, 1 do
                local idx = 2 * hh + e + 1
                s[j][idx], dp[j][idx] = entry(j, e, hh, cols[j][e], s[j][idx], dp[j][idx], true)
              end
            end
          end
        else
          -- (two passes, lib/attn_bwd_f16scaled_d128.lua: a warp whose 16 keys every row of the tile sees, inside
          -- seq_q and seq_k, takes the copy without the mask: most tiles of a causal or windowed block)
          local ka, kz = k0 + warp * 16, k0 + warp * 16 + 15
          local full = b:and_(b:le(q0 + bm, p.seq_q), b:lt(kz, p.seq_k))
          if hooks then
            local first_z = mask.query_range(hooks.mask, kz, kz)
            local _, end_a = mask.query_range(hooks.mask, ka, ka)
            full = b:and_(full, b:and_(b:ge(q0, first_z), b:le(q0 + bm, end_a)))
          elseif spec.causal then full = b:and_(full, b:ge(q0, kz - shift)) end
          for j = 0, nq - 1 do
            for e = 0, 1 do cols[j][e] = column(j, e) end
          end
          for hh = 0, 1 do kfs[hh] = kf[hh] * (hooks and hooks.score_in or scale2) end
          local pvar, dvar = {}, {}
          for j = 0, nq - 1 do
            pvar[j], dvar[j] = {}, {}
            for idx = 1, 4 do
              pvar[j][idx] = b:var("f32", 0.0)
              if pass.dk then dvar[j][idx] = b:var("f32", 0.0) end
            end
          end
          local function body(masked)
            return function()
              for j = 0, nq - 1 do
                for e = 0, 1 do
                  for hh = 0, 1 do
                    local idx = 2 * hh + e + 1
                    local pv, ds = entry_folded(j, e, hh, cols[j][e], s[j][idx], dp[j][idx], masked)
                    pvar[j][idx]:set(pv)
                    if pass.dk then dvar[j][idx]:set(ds) end
                  end
                end
              end
            end
          end
          -- (a lomarked walk beside dropout: the masked body alone, lib/attn_bwd_f16scaled.lua lo_walk)
          if lomarked and spec.dropout then body(true)() else b:if_(full, body(false), body(true)) end
          for j = 0, nq - 1 do
            for idx = 1, 4 do
              s[j][idx] = pvar[j][idx]:get()
              if pass.dk then dp[j][idx] = dvar[j][idx]:get() end
            end
          end
        end
        -- dV += P^T dO, dK += dS^T Q.
        local aps, adss = {}, {}
        -- (with the low parts: P^T's fragments packed where each product reads them, the marked tile's branch and
        -- the main product each its own, not once before the branch: packed once and read on both sides, LLVM kept
        -- the packed i32 as integer ops, +65 instructions a warp's tile of d64 causal varlen, 1.17x -> 1.27x f16's
        -- T4 estimate; docs/attention-bwd-span.md "Varlen's low parts". dS^T's too with varlen only: repacked
        -- everywhere, the atomic dkdv at the tile width 64 spilled 12 bytes with dropout and 32 with window, softcap
        -- and ALiBi top-left, ptxas sm_75; wave 19)
        local repack_p, repack_ds = cfg.lo, cfg.lo and spec.varlen
        local function packed(x, ks, re) return re and function() return c_to_a(b, x, ks, mdt) end or c_to_a(b, x, ks, mdt) end
        if fs then -- (dO's and Q's row factors onto P^T's and dS^T's columns, each key row scaled to f16; packed at once)
          if pass.dv then
            local pa = fs.scale_a(b, s, nq, function(j, e) return of[j][e] end, stv, { { dv, dtiles } })
            for ks = 0, nq // 2 - 1 do aps[ks] = packed(pa, ks, repack_p) end
          end
          if pass.dk then
            local dsa = fs.scale_a(b, dp, nq, function(j, e) return qf[j][e] end, stk, { { dkc, 2 * (jd1 - jd0) } })
            for ks = 0, nq // 2 - 1 do adss[ks] = packed(dsa, ks, repack_ds) end
          end
        end
        local function frag(x) if type(x) == "function" then return x() end return x end
        if lo_walk then -- dV += P^T (dO's low part) 2^-LO, dK += dS^T (Q's low part) 2^-LO: a marked tile
          on_marked(function()
            local up, down = b:f32(2.0 ^ fs.LO), b:f32(2.0 ^ -fs.LO)
            local order = {}
            if pass.dv then order[#order + 1] = { "o", dv, aps, 0, dtiles // 2 } end
            if pass.dk then
              local x = { "q", dk, adss, jd0, jd1 }
              if held == "q" then table.insert(order, 1, x) else order[#order + 1] = x end
            end
            for _, x in ipairs(order) do
              fill_lo(x[1])
              local accv, af = x[2], x[3]
              for j = 2 * x[4], 2 * x[5] - 1 do
                for e = 1, 4 do accv[j][e]:set(accv[j][e]:get() * up) end
              end
              for ks = 0, nq // 2 - 1 do
                for jd = x[4], x[5] - 1 do
                  local l1, l2 = frag_bk(b, qot, ld, lane, ks * 16, ccol + jd * 16) -- (cfg.csplit: this warp's half)
                  for xx = 0, 1 do
                    local j = 2 * jd + xx
                    local r = b:mma(mdt, frag(af[ks]), xx == 0 and l1 or l2,
                                    { accv[j][1]:get(), accv[j][2]:get(), accv[j][3]:get(), accv[j][4]:get() })
                    for e = 1, 4 do accv[j][e]:set(r[e]) end
                  end
                end
              end
              for j = 2 * x[4], 2 * x[5] - 1 do
                for e = 1, 4 do accv[j][e]:set(accv[j][e]:get() * down) end
              end
            end
          end)
        end
        for ks = 0, nq // 2 - 1 do
          local ap = pass.dv and (frag(aps[ks]) or c_to_a(b, s, ks, dt))
          local ads = pass.dk and (frag(adss[ks]) or c_to_a(b, dp, ks, dt))
          for jd = jd0, jd1 - 1 do -- (pass.cols: a dK pass, no dV)
            local o1, o2, q1, q2
            if pass.dv then o1, o2 = frag_bk(b, sh.dos, ld, lane, ks * 16, ccol + jd * 16) end
            if pass.dk then q1, q2 = frag_bk(b, sh.qs, ld, lane, ks * 16, ccol + jd * 16) end
            for x = 0, 1 do
              local j = 2 * jd + x
              local ov = { dv[j][1]:get(), dv[j][2]:get(), dv[j][3]:get(), dv[j][4]:get() }
              local kv = { dk[j][1]:get(), dk[j][2]:get(), dk[j][3]:get(), dk[j][4]:get() }
              if pass.dv then ov = b:mma(mdt, ap, x == 0 and o1 or o2, ov) end
              if pass.dk then kv = b:mma(mdt, ads, x == 0 and q1 or q2, kv) end
              for e = 1, 4 do
                dv[j][e]:set(ov[e])
                dk[j][e]:set(kv[e])
              end
            end
          end
        end
        if pass.dk and not spec.deterministic and not pass.nodq then -- (pass.nodq: a dK pass after the one taking dQ)
          -- dS (queries x keys) to shared memory in the dtype, then dQ(tile) = dS K.
          -- (f16-scaled: dS times K's row factors, each query row scaled by its own power of two)
          local dsq = fs and fs.ds_rows(b, sh, dp, nq, kf, bm, warp, lane) or dp
          local function store_ds()
            for j = 0, nq - 1 do
              for hh = 0, 1 do
                local kcol = kw * 16 + g + 8 * hh
                for e = 0, 1 do
                  b:store(sh.dss + (j * 8 + t * 2 + e) * ldd + kcol, b:from_f32(dsq[j][2 * hh + e + 1], mdt))
                end
              end
            end
          end
          -- (cfg.csplit: both warps of a pair hold the group's dS; the first stores it)
          if cfg.csplit then b:if_(b:eq(warp & 1, 0), store_ds) else store_ds() end
          b:barrier()
          -- 16 head-dim columns at a time, so that few accumulators are live beside dK and dV.
          -- (a slice of 24 columns, d96 with 16-row query tiles: a last step of 8)
          -- (kt: the B tile, K's, or cfg.lo's K_lo with down = 2^-LO on what is added)
          local function dq_step(kt, down)
            for jd = 0, (dw + 15) // 16 - 1 do
              local nh = math.min(2, (dw - jd * 16) // 8)
              local acc = zeros(nh)
              for ks = 0, bn // 16 - 1 do
                local a = frag_a(b, sh.dss, ldd, lane, qr, ks * 16)
                if nh == 2 then
                  local k1, k2 = frag_bk(b, kt, ld, lane, ks * 16, dc0 + jd * 16)
                  acc[0] = b:mma(mdt, a, k1, acc[0])
                  acc[1] = b:mma(mdt, a, k2, acc[1])
                else
                  acc[0] = b:mma(mdt, a, frag_bk1(b, kt, ld, lane, ks * 16, dc0 + jd * 16), acc[0])
                end
              end
              for hh = 0, 1 do
                local row = q0 + qr + g + 8 * hh
                local rf = fs and fs.dq_factor(b, sh, qr + g + 8 * hh) -- (f16-scaled: the row's power of two)
                if down then rf = rf * down end
                b:if_(b:lt(row, p.seq_q), function()
                  -- dq_acc rows are spec.dim wide; a padded head_dim's columns past it are not added
                  local col = dc0 + jd * 16
                  local at = p.dq_acc + (ri + b:i64(row)) * dim + col + t * 2
                  for j = 0, nh - 1 do
                    local add = function()
                      b:atomic_add(at + j * 8, rf and acc[j][2 * hh + 1] * rf or acc[j][2 * hh + 1])
                      b:atomic_add(at + j * 8 + 1, rf and acc[j][2 * hh + 2] * rf or acc[j][2 * hh + 2])
                    end
                    if dim < d then b:if_(b:lt(col + j * 8, dim), add) else add() end
                  end
                end)
              end
            end
          end
          dq_step(sh.ks)
          if kvparts then -- dQ += dS K_lo 2^-LO: a marked tile (K's rows spanning more than 2^32)
            on_marked(function()
              if not kvmarked then fill_lo("k") end
              dq_step(sh.lo, b:f32(2.0 ^ -fs.LO))
            end)
          end
        end
      end
      if cx then cx.slope2, cx.lo_marked = slope2, marked end -- (this head's)
      -- (a kvmarked block's K and V rows do not fit one power of two: never d32's fast body)
      -- (nor a lomarked block's: every tile on the per-row body)
      if cfg.d32 and not kvmarked and not lomarked then d32.query_loop(b, cx, ri, q_start, q_end, tile)
      else b:for_(q_start, q_end, bm, tile) end
    end)

    -- dK = scale dS^T Q and dV, rounded once; rows are this thread's keys.
    local kb, vb = io.base("dk", bi, hkv), io.base("dv", bi, hkv)
    local gb = util.dtype_bytes[spec.grad]
    for hh = 0, 1 do
      b:if_(key_ok[hh], function()
        local r = b:i64(key[hh])
        -- (f16-scaled: the accumulators hold dK 2^-ck, dV 2^-cv)
        local mk, mv = fs and p.scale * fs.factor(b, stk, hh) or p.scale, fs and fs.factor(b, stv, hh)
        -- (cfg.csplit: this warp's half from ccol, 8-column groups past the real head_dim not stored)
        local function split_cols(j, width, f)
          if not cfg.csplit then return f(j * 8 + t * 2) end
          if width < d then b:if_(b:lt(ccol + j * 8, width), function() f(ccol + j * 8 + t * 2) end)
          else f(ccol + j * 8 + t * 2) end
        end
        local kcols = cfg.csplit and dtiles or math.min(2 * jd1, dim // 8)
        for j = 2 * jd0, pass.dk and kcols - 1 or -1 do -- (padded head_dim: the columns past it are not stored)
          split_cols(j, dim, function(col)
            b:store_vec(kb + r * p.stride_dks + col,
                        b:from_f32_vec({ dk[j][2 * hh + 1]:get() * mk, dk[j][2 * hh + 2]:get() * mk }, spec.grad),
                        { align = 2 * gb })
          end)
        end
        for j = 0, pass.dv and (cfg.csplit and dtiles or vd // 8) - 1 or -1 do -- (dV: v_head_dim wide)
          split_cols(j, vd, function(col)
            local x, y = dv[j][2 * hh + 1]:get(), dv[j][2 * hh + 2]:get()
            if mv then x, y = x * mv, y * mv end
            b:store_vec(vb + r * p.stride_dvs + col, b:from_f32_vec({ x, y }, spec.grad),
                        { align = 2 * gb })
          end)
        end
      end)
    end
  end end
  local one = { { dv = true, dk = true } }
  local function lo_walks()
    -- (once a block, before either walk: whether a head's rows or the block's K/V rows are marked; the first scan's
    -- barrier orders the warps' K/V marks. The lomarked walk scans each head again, its two slots cleared first)
    local any = b:var("i32", 0)
    b:for_(0, group, 1, function(gi)
      local m = fs.lo_scan(b, sh, p, io.row_index(bi, hkv * group + gi), q_start, q_end, gi, M.WARPS * 32)
      any:set(any:get() | b:select(m, 1, 0))
      -- (every thread's read of this head's slot before the next head's scan clears it: this loop runs no tile, whose
      -- barriers order that in the walks. kiln run --race found the race with GQA 4:2, at d256 (wave 25) and in the
      -- deterministic d128's "passes" walk, where it had been since wave 21)
      b:barrier()
    end)
    local go = b:ne(any:get(), 0)
    if cfg.kvlo and not cfg.kvwalk then go = b:or_(go, fs.kv_marked(b, sh, M.WARPS)) end
    local function marked_walk()
      b:barrier() -- (every thread done reading the slots)
      b:if_(b:eq(tid, 0), function() b:store(sh.lomark, 0.0) b:store(sh.lomark + 1, 0.0) end)
      b:barrier() -- (the clearing before the walk's first scan marks a slot)
      local halves = { { dv = true }, { dk = true, cols = { 0, kd // 2 } }, { dk = true, cols = { kd // 2, kd }, nodq = true } }
      walk(cfg.lowalk == "dk halves" and halves or cfg.passes or cfg.lowalk == "passes" and { { dv = true }, { dk = true } } or one,
        false, true)
    end
    local function plain_walk() walk(cfg.passes or one, false, false) end
    -- (the walk first in the code: lib/attn_bwd_f16scaled.lua lo_walk's second result, the order ptxas fits)
    if cfg.lowalk_first == "unmarked" then b:if_(b:not_(go), plain_walk, marked_walk) else b:if_(go, marked_walk, plain_walk) end
  end
  if cfg.kvwalk then
    b:barrier() -- (the warps' K/V marks, kv_mark above)
    -- (cfg.lowalk too: a block not marked for its K or V rows takes lo_walks' two walks)
    local marked_walk = function() walk({ { dv = true }, { dk = true } }, true) end
    local plain_walk = cfg.lowalk and lo_walks or function() walk(one, false) end
    -- (the walk first in the code: lib/attn_bwd_f16scaled.lua kv_walk, the order ptxas fits)
    if cfg.kvwalk == "marked" then b:if_(fs.kv_marked(b, sh, M.WARPS), marked_walk, plain_walk)
    else b:if_(b:not_(fs.kv_marked(b, sh, M.WARPS)), plain_walk, marked_walk) end
  elseif cfg.lowalk then
    lo_walks()
  else
    walk(cfg.passes or one, false)
  end
end

-- Builds the deterministic dQ kernel: warp w owns query rows 16w.. of the CTA's 64 and walks the
-- keys they see in order: S = Q K^T, dP = dO V^T (A: Q / dO rows, B: K / V rows; ldmatrix),
-- P = exp2(S scale log2e - lse log2e), dS = P (dP - delta), dQ += dS K (A: dS from the C
-- registers, B: K with ldmatrix .trans); dQ = scale dQ rounded once.
function M.build_dq(b, spec, cfg, p, io)
  local d, bm, bn, ld, dt = spec.head_dim, cfg.block_m, cfg.block_n, cfg.ld, spec.dtype
  local sh = alloc(b, spec, cfg)
  local fs = cfg.f16s and f16s -- (bf16 on f16 tensor cores: lib/attn_bwd_f16scaled.lua)
  local mdt = fs and "f16" or dt
  local tid = b:tid()
  local lane, warp = tid & 31, tid >> 5
  local g, t = lane >> 2, lane & 3
  -- (cfg.csplit, M.csplit: rw the warp's 16-row group, ccol the first of its half of dQ's columns)
  local rw = cfg.csplit and warp >> 1 or warp
  local bi, h = b:ctaid("z"), b:ctaid("y")
  local hkv = h // (p.heads_q // p.heads_kv)
  local q0 = b:ctaid("x") * bm
  local shift = p.seq_k - p.seq_q
  local ri = io.row_index(bi, h)
  local marked -- (cfg.lo: whether a Q or dO row of the block spans more than 2^32; then sh.qlo, sh.olo hold their low parts)
  if cfg.lo then
    local looped = f16s.dq_marks_looped(spec) -- (the marks in a loop after the staging: f16s.rows_span)
    local checked = f16s.dq_marks_checked(spec) -- (the loop only where the warp's extrema span more than 2^32)
    local spans = checked and "extrema" or not looped
    local x = f16s.load(b, spec, cfg, M.WARPS * 32, sh.qs, io.base("q", bi, h), p.stride_qs, q0, bm, p.seq_q, sh.qf, spans)
    local y = f16s.load(b, spec.vspec or spec, cfg, M.WARPS * 32, sh.dos, io.base("dout", bi, h), p.stride_douts, q0, bm,
                        p.seq_q, sh.of, spans)
    if checked then
      x = f16s.rows_span_checked(b, spec, M.WARPS * 32, io.base("q", bi, h), p.stride_qs, q0, bm, p.seq_q, x)
      y = f16s.rows_span_checked(b, spec.vspec or spec, M.WARPS * 32, io.base("dout", bi, h), p.stride_douts, q0, bm, p.seq_q, y)
    elseif looped then
      x = f16s.rows_span(b, spec, M.WARPS * 32, io.base("q", bi, h), p.stride_qs, q0, bm, p.seq_q)
      y = f16s.rows_span(b, spec.vspec or spec, M.WARPS * 32, io.base("dout", bi, h), p.stride_douts, q0, bm, p.seq_q)
    end
    x = x | y
    f16s.kv_mark(b, sh, x)
    b:barrier()
    marked = f16s.kv_marked(b, sh, M.WARPS)
    if not cfg.lofrag then b:if_(marked, function() -- (once a block; the first key tile's barriers order them before their use)
      f16s.lo_rows(b, spec, cfg, M.WARPS * 32, sh.qlo, io.base("q", bi, h), p.stride_qs, q0, bm, p.seq_q, sh.qf)
      f16s.lo_rows(b, spec.vspec or spec, cfg, M.WARPS * 32, sh.olo, io.base("dout", bi, h), p.stride_douts, q0, bm,
                   p.seq_q, sh.of)
    end) end
  else
    stage(b, spec, cfg, sh.qs, io.base("q", bi, h), p.stride_qs, q0, bm, p.seq_q, sh.qf)
    stage(b, spec.vspec or spec, cfg, sh.dos, io.base("dout", bi, h), p.stride_douts, q0, bm, p.seq_q, sh.of)
  end
  if cfg.cp_async then b:cp_async_commit() end
  -- This thread's rows g and g + 8 of the warp's 16: key bound (0 past seq_q), lse, delta.
  -- (hooks: also the first key lo, and keys from the first row's window start)
  local hooks = io.hooks
  local row, bound, lo, lse2, dl = {}, {}, {}, {}, {}
  for hh = 0, 1 do
    row[hh] = q0 + rw * 16 + g + 8 * hh
    local live = b:lt(row[hh], p.seq_q)
    if hooks then
      local l, hi = hooks.range(row[hh])
      lo[hh], bound[hh] = l, b:select(live, hi, 0)
    else
      bound[hh] = b:select(live, io.key_bound(row[hh]), 0)
    end
    local r = b:i64(b:select(live, row[hh], 0))
    lse2[hh] = b:load(p.lse + ri + r) * LOG2E
    dl[hh] = b:load(p.delta + ri + r)
  end
  local kv_lo, kv_end = 0, p.seq_k
  if hooks then
    kv_lo = hooks.range(q0) or 0
    local _, hi = hooks.range(b:min(q0 + bm, p.seq_q) - 1)
    kv_end = hi
  elseif spec.causal then kv_end = b:min(p.seq_k, b:max(b:min(q0 + bm, p.seq_q) + shift, 0)) end
  -- (dropout: Philox pairs keys 2t, 2t + 1 from an even key; a window's first key may be odd, the keys before it
  -- are masked by lo)
  if io.drop and spec.window then kv_lo = (kv_lo // 2) * 2 end
  local slope2 = spec.alibi and mask.slope(hooks.mask, h)
  -- (padded head_dim: products stop at the step holding spec.dim, or v_head_dim when wider)
  local kd = util.ceil_div(math.max(spec.dim or d, spec.vdim or d), 16)
  local dtiles, nk = 2 * kd, bn // 8
  local ccol = 0
  if cfg.csplit then -- (each warp of a pair: ceil(kd / 2) 16-column steps of dQ, from ccol)
    dtiles = 2 * util.ceil_div(kd, 2)
    ccol = (warp & 1) * (dtiles * 8)
  end
  local dq = {}
  for j = 0, dtiles - 1 do
    dq[j] = {}
    for e = 1, 4 do dq[j][e] = b:var("f32", 0.0) end
  end
  local stq = fs and fs.rows_state(b) -- (f16-scaled: dQ's running exponents)
  local kb, vb = io.base("k", bi, hkv), io.base("v", bi, hkv)
  local scale2 = p.scale * LOG2E
  -- (cfg.d32 with K and V from the deterministic dkdv: a key tile whose rows share one factor runs
  -- lib/attn_bwd_f16scaled_d32.lua's body)
  local cx = cfg.d32 and cfg.kvs and {
    spec = spec, sh = sh, p = p, d = d, bn = bn, ld = ld, kd = kd, nk = nk, dtiles = dtiles, q0 = q0, shift = shift,
    lane = lane, warp = warp, g = g, t = t, tid = tid, bound = bound, lse2 = lse2, dl = dl, dq = dq, stq = stq,
    scale2 = scale2, frag = { a = frag_a, bn = frag_bn, bk = frag_bk }, zeros = zeros,
    bm = bm, row = row, lo = lo, slope2 = slope2, mk = hooks and hooks.mask, fresh = cfg.d32 and cfg.kvs and b:var("i32", 1),
    lo_marked = marked, -- (a marked block: every key tile on the per-row body, which adds the low parts)
  }
  if cx and hooks then -- (the mask keys: the first row's last key and the last row's first)
    local _, hi = hooks.range(q0)
    cx.hi_first, cx.lo_last = hi, hooks.range(q0 + (bm - 1))
  end
  local function load_kv(k0)
    b:barrier() -- the previous tile's products are done with K and V
    if cfg.kvs then
      kvs.load(b, cfg, M.WARPS * 32, sh, p, bi, hkv, k0, d)
      if cfg.kvmark_rows then -- (the copied tile's marks from the bf16 rows: k0 into sh.kvtile, as kvs.load does)
        local x = f16s.rows_span(b, spec, M.WARPS * 32, kb, p.stride_ks, k0, bn, p.seq_k)
        local y = f16s.rows_span(b, spec.vspec or spec, M.WARPS * 32, vb, p.stride_vs, k0, bn, p.seq_k)
        b:if_(b:ne(x | y, 0), function() b:store(sh.kvtile, b:from_bits(k0)) end)
      end
    elseif cfg.kvself then -- (a tile holding a K or V row that spans more than 2^32: k0 into sh.kvtile, as kvs.load)
      local looped = f16s.dq_kv_self_looped(spec) -- (the marks in a loop after the staging: f16s.rows_span)
      local x = f16s.load(b, spec, cfg, M.WARPS * 32, sh.ks, kb, p.stride_ks, k0, bn, p.seq_k, sh.kf, not looped)
      local y = f16s.load(b, spec.vspec or spec, cfg, M.WARPS * 32, sh.vs, vb, p.stride_vs, k0, bn, p.seq_k, sh.vf, not looped)
      if looped then
        x = f16s.rows_span(b, spec, M.WARPS * 32, kb, p.stride_ks, k0, bn, p.seq_k)
        y = f16s.rows_span(b, spec.vspec or spec, M.WARPS * 32, vb, p.stride_vs, k0, bn, p.seq_k)
      end
      b:if_(b:ne(x | y, 0), function() b:store(sh.kvtile, b:from_bits(k0)) end)
    else
      stage(b, spec, cfg, sh.ks, kb, p.stride_ks, k0, bn, p.seq_k, sh.kf)
      stage(b, spec.vspec or spec, cfg, sh.vs, vb, p.stride_vs, k0, bn, p.seq_k, sh.vf)
    end
    if cx then d32.dq_flags(b, cx, k0) end
    if cfg.cp_async then
      b:cp_async_commit()
      b:cp_async_wait(0)
    end
    b:barrier()
  end
  -- (the test's dropout_mask output written after dQ's store, its bits drawn again: f16s.dq_mask_apart)
  local mask_apart = io.drop and fs and fs.dq_mask_apart(spec)
  local function tile(k0)
    local qf, of, kf, vf = {}, {}, {}, {} -- (f16-scaled: the rows' and key columns' factors)
    if fs then
      for hh = 0, 1 do
        qf[hh], of[hh] = b:load(sh.qf + (rw * 16 + g + 8 * hh)), b:load(sh.of + (rw * 16 + g + 8 * hh))
      end
      for j = 0, nk - 1 do
        kf[j], vf[j] = {}, {}
        for e = 0, 1 do kf[j][e], vf[j][e] = b:load(sh.kf + (j * 8 + t * 2 + e)), b:load(sh.vf + (j * 8 + t * 2 + e)) end
      end
    end
    local s, dp = zeros(nk), zeros(nk)
    for kk = 0, kd - 1 do
      local aq = frag_a(b, sh.qs, ld, lane, rw * 16, kk * 16)
      local ao = frag_a(b, sh.dos, ld, lane, rw * 16, kk * 16)
      for jp = 0, nk // 2 - 1 do
        local k1, k2 = frag_bn(b, sh.ks, ld, lane, jp * 16, kk * 16)
        s[2 * jp] = b:mma(mdt, aq, k1, s[2 * jp])
        s[2 * jp + 1] = b:mma(mdt, aq, k2, s[2 * jp + 1])
        local v1, v2 = frag_bn(b, sh.vs, ld, lane, jp * 16, kk * 16)
        dp[2 * jp] = b:mma(mdt, ao, v1, dp[2 * jp])
        dp[2 * jp + 1] = b:mma(mdt, ao, v2, dp[2 * jp + 1])
      end
    end
    local kvm = cfg.kvrows and kvs.kv_tile_marked(b, sh, k0) -- (a K or V row of the tile spans more than 2^32)
    if cfg.lo or cfg.kvrows then -- S += Q_lo K^T 2^-LO, dP += dO_lo V^T 2^-LO: a marked block (its Q or dO rows spanning more than 2^32)
      local sv, dpv = {}, {}
      for j = 0, nk - 1 do
        sv[j], dpv[j] = {}, {}
        for e = 1, 4 do
          sv[j][e], dpv[j][e] = b:var("f32", 0.0), b:var("f32", 0.0)
          sv[j][e]:set(s[j][e])
          dpv[j][e]:set(dp[j][e])
        end
      end
      if cfg.lo then -- (f16s.dq_mark_shared: the mark read again from shared memory, not held across the loop)
        b:if_(fs.dq_mark_shared(spec) and f16s.kv_marked(b, sh, M.WARPS) or marked, function()
          local up, down = b:f32(2.0 ^ fs.LO), b:f32(2.0 ^ -fs.LO)
          if cfg.lofrag then -- (each warp's A fragments of its rows' low parts from the bf16 rows, a k-step at a time)
            local r = { [0] = rw * 16 + g, [1] = rw * 16 + g + 8 }
            for _, x in ipairs({ { spec, "q", p.stride_qs, sh.qf, sh.ks, sv }, { spec.vspec or spec, "dout", p.stride_douts, sh.of, sh.vs, dpv } }) do
              local frag = f16s.lo_frag(b, x[1], io.base(x[2], bi, h), x[3], row, r, p.seq_q, x[4], t)
              -- (a loop of k-steps: unrolled, the window's variants spilled 48-52 bytes)
              lo_mma(b, mdt, nil, x[5], x[6], nk, nil, ld, lane, rw, up, down, { frag = frag, steps = f16s.lo_steps(x[1]) })
            end
          else
            for _, x in ipairs({ { sh.qlo, sh.ks, sv }, { sh.olo, sh.vs, dpv } }) do
              lo_mma(b, mdt, x[1], x[2], x[3], nk, kd, ld, lane, rw, up, down)
            end
          end
        end)
      end
      -- (a marked key tile: dP += dO V_lo^T 2^-LO, S += Q K_lo^T 2^-LO, the low parts filled from the bf16 rows into
      -- sh.vs, whose V rows no product needs after dP: V's, then K's, which stays there for dQ += dS K_lo below)
      if cfg.kvrows then
        b:if_(kvm, function()
          local up, down = b:f32(2.0 ^ fs.LO), b:f32(2.0 ^ -fs.LO)
          for _, x in ipairs({ { spec.vspec or spec, vb, p.stride_vs, sh.vf, sh.dos, dpv }, { spec, kb, p.stride_ks, sh.kf, sh.qs, sv } }) do
            b:barrier() -- (every warp done with sh.vs)
            f16s.lo_rows(b, x[1], cfg, M.WARPS * 32, sh.vs, x[2], x[3], k0, bn, p.seq_k, x[4], true)
            b:barrier()
            lo_mma(b, mdt, x[5], sh.vs, x[6], nk, kd, ld, lane, rw, up, down)
          end
        end)
      end
      for j = 0, nk - 1 do
        for e = 1, 4 do s[j][e], dp[j][e] = sv[j][e]:get(), dpv[j][e]:get() end
      end
    end
    for j = 0, nk - 1 do
      -- dropout: Z of the fragment's 4 entries (rows g, g + 8 x keys 2t, 2t + 1), one Philox call
      local z = io.drop and dropout.factors4(io.drop, bi, h, row[0], k0 + t * 2 + j * 8, mask_apart)
      for hh = 0, 1 do
        local lim = bound[hh] - k0 - t * 2
        local lim_lo = lo[hh] and lo[hh] - k0 - t * 2
        for e = 0, 1 do
          local idx = 2 * hh + e + 1
          if fs then -- the products' row factors back on S and dP (exact)
            s[j][idx] = s[j][idx] * (qf[hh] * kf[j][e])
            dp[j][idx] = dp[j][idx] * (of[hh] * vf[j][e])
          end
          local vis = b:lt(j * 8 + e, lim)
          if lim_lo then vis = b:and_(vis, b:ge(j * 8 + e, lim_lo)) end
          local dpz = z and dp[j][idx] * z[idx] or dp[j][idx]
          if hooks and hooks.score then
            local x, th = hooks.score(s[j][idx], row[hh], k0 + t * 2 + (j * 8 + e), slope2)
            local pv = b:select(vis, b:ex2_approx(x - lse2[hh]), 0.0)
            local ds = pv * (dpz - dl[hh])
            if th then ds = ds * (1.0 - th * th) end
            dp[j][idx] = b:select(vis, ds, 0.0)
          else
            local pv = b:select(vis, b:ex2_approx(b:fma(s[j][idx], scale2, -lse2[hh])), 0.0)
            dp[j][idx] = b:select(vis, pv * (dpz - dl[hh]), 0.0)
          end
        end
      end
    end
    -- (f16-scaled: K's row factors onto dS's columns, each query row scaled to f16)
    local dsa = fs and fs.scale_a(b, dp, nk, function(j, e) return kf[j][e] end, stq, { { dq, dtiles } }) or dp
    if cfg.kvrows then -- (a marked key tile: dQ += dS K_lo 2^-LO, K's low part in sh.vs; f16s.dq_kv_mark_again)
      b:if_(fs.dq_kv_mark_again(spec) and kvs.kv_tile_marked(b, sh, k0) or kvm, function()
        lo_scaled(dq, dtiles, b:f32(2.0 ^ fs.LO), b:f32(2.0 ^ -fs.LO), function(acc)
          for ks = 0, nk // 2 - 1 do
            local a = c_to_a(b, dsa, ks, mdt)
            for jd = 0, dtiles // 2 - 1 do
              local k1, k2 = frag_bk(b, sh.vs, ld, lane, ks * 16, ccol + jd * 16) -- (cfg.csplit: this warp's half)
              acc[2 * jd] = b:mma(mdt, a, k1, acc[2 * jd])
              acc[2 * jd + 1] = b:mma(mdt, a, k2, acc[2 * jd + 1])
            end
          end
        end)
      end)
    end
    for ks = 0, nk // 2 - 1 do
      local a = c_to_a(b, dsa, ks, mdt)
      for jd = 0, dtiles // 2 - 1 do
        local k1, k2 = frag_bk(b, sh.ks, ld, lane, ks * 16, ccol + jd * 16)
        for x = 0, 1 do
          local j = 2 * jd + x
          local c = b:mma(mdt, a, x == 0 and k1 or k2, { dq[j][1]:get(), dq[j][2]:get(), dq[j][3]:get(), dq[j][4]:get() })
          for e = 1, 4 do dq[j][e]:set(c[e]) end
        end
      end
    end
  end
  if cfg.kvrows then -- (no tile marked yet: lib/attn_bwd_kvscaled.lua load; the first tile's barrier orders it)
    b:if_(b:eq(tid, 0), function() b:store(sh.kvtile, -1.0) end)
    if cx then cx.kv_marked = function(k0) return kvs.kv_tile_marked(b, sh, k0) end end
  end
  b:for_(kv_lo, kv_end, bn, function(k0)
    load_kv(k0)
    if cx then d32.dq_tile(b, cx, k0, tile) else tile(k0) end
  end)
  if cfg.cp_async then b:cp_async_wait(0) end -- Q and dO when there was no key tile
  local qb = io.base("dq", bi, h)
  local gb = util.dtype_bytes[spec.grad]
  for hh = 0, 1 do
    b:if_(b:lt(row[hh], p.seq_q), function()
      local r = b:i64(row[hh])
      local m = fs and p.scale * fs.factor(b, stq, hh) or p.scale -- (f16-scaled: dQ 2^-cq held)
      local function put(j, col)
        b:store_vec(qb + r * p.stride_dqs + col,
                    b:from_f32_vec({ dq[j][2 * hh + 1]:get() * m, dq[j][2 * hh + 2]:get() * m }, spec.grad),
                    { align = 2 * gb })
      end
      if cfg.csplit then -- (this warp's half from ccol; 8-column groups past the real head_dim not stored)
        for j = 0, dtiles - 1 do
          if (spec.dim or d) < d then b:if_(b:lt(ccol + j * 8, spec.dim), function() put(j, ccol + j * 8 + t * 2) end)
          else put(j, ccol + j * 8 + t * 2) end
        end
      else
        for j = 0, (spec.dim or d) // 8 - 1 do put(j, j * 8 + t * 2) end -- (padded head_dim: the columns past it are not stored)
      end
    end)
  end
  if mask_apart then -- (the key tiles the loop visited again, each fragment's 4 bits as the loop drew them)
    b:for_(kv_lo, kv_end, bn, function(k0)
      for j = 0, nk - 1 do dropout.store_mask4(io.drop, bi, h, row[0], k0 + t * 2 + j * 8) end
    end)
  end
end

return M
