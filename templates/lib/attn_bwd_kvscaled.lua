-- templates/lib/attn_bwd_kvscaled.lua - the bf16 backward on sm_75: K and V scaled once, by the deterministic dkdv, for the dq kernel.
--
-- lib/attn_bwd_f16scaled.lua stages every K and V row as f16 times its power of two (the row's largest
-- finite |x| in [2^15, 2^16)) with 2^-h in a shared slot. The deterministic dkdv stages each key block's K
-- and V once, before its loop; the dq kernel used to stage every key tile again for every query block
-- (widen, row maximum and butterfly, scale, convert: ~2.5 of its ~6.5 other instructions per m16n8k8 at
-- d64). Here dkdv writes its staged K and V rows, and their factors, into the sequence's workspace, and
-- dq copies them 16 bytes at a time as dkdv copies prep's Q and dO rows (f16s.load_ws). Same rows, same
-- powers of two: the gradients are bit-identical to the staging's.
--
-- Workspace (declared by the deterministic dkdv's launch description, read by dq's): kh, vh (f16
-- [batch, heads_kv, seq_k, W]: W the tile width the builders see as spec.head_dim, the columns past the
-- real dim zero) and ksf, vsf (f32 [batch, heads_kv, seq_k]: 2^-h of each row), at index
-- (batch, kv head, key). Only where both kernels run the f16-scaled path (applies): the two read the same
-- spec but the kernel, and the dkdv's own refusals (lib/attn_bwd_mma.lua available: d128 with window,
-- softcap and alibi together runs its dkdv on SIMT) leave dq staging K and V itself there.
local f16s = require("lib.attn_bwd_f16scaled")
local util = require("lib.util")

local M = {}

M.WS = { { "kh", "f16" }, { "vh", "f16" }, { "ksf", "f32" }, { "vsf", "f32" } }

-- Whether the kernel of `spec` (dq, or the deterministic dkdv) writes / reads the rows above: bf16 on
-- sm_75's f16 tensor cores, and the deterministic dkdv of the same spec served by the tensor-core path
-- (`available`: lib/attn_bwd_mma.lua's, passed in: that module hooks this one). spec: as the builders
-- read it (attention_bwd.lua's bspec).
function M.applies(spec, target, available)
  -- (past the tile width 128, wave 25: the deterministic dkdv runs SIMT for bf16 and writes no rows; dq stages K and V
  -- itself there, lib/attn_bwd_f16scaled.lua dq_kv_self, and the runtime's workspace stops at 128 wide)
  if spec.path == "simt" or not f16s.applies(spec, target) or spec.head_dim > 128 then return false end
  if not (spec.kernel == "dq" or (spec.kernel == "dkdv" and spec.deterministic)) then return false end
  -- (wave 21: where the deterministic dkdv's marks for dq spilled, lib/attn_bwd_f16scaled.lua dq_kv_lo_applies, dq
  -- stages K and V itself and marks its key tiles while converting them, dq_kv_self: neither kernel takes the rows
  -- here; but at the tile width 96, where dq keeps the rows and marks the tiles from the bf16 rows, dq_kv_rows_marked)
  local dq = {}
  for k, x in pairs(spec) do dq[k] = x end
  dq.kernel, dq.deterministic = "dq", nil
  if not f16s.dq_kv_lo_applies(dq) and f16s.dq_lo_applies(dq) and f16s.dq_kv_self(dq)
    and not f16s.dq_kv_rows_marked(dq) then return false end
  local dkdv = {}
  for k, x in pairs(spec) do dkdv[k] = x end
  dkdv.kernel, dkdv.deterministic = "dkdv", true
  return available(dkdv, target) and true or false
end

-- The kernel parameters (appended to params; readonly: dq's; varlen: total_k, the packed keys' count).
function M.params(params, readonly, varlen)
  for _, w in ipairs(M.WS) do params[#params + 1] = { w[1], "ptr", w[2], readonly = readonly or nil } end
  if varlen then params[#params + 1] = { "total_k", "i32" } end
  return params
end

-- The launch description's workspace rows (tensors t), w the tile width (varlen: [heads_kv, total_k], the
-- packed keys of every sequence, as lse's rows are [heads_q, total_q]).
function M.launch(t, w, varlen)
  local ext = { string.format(varlen and "heads_kv*total_k*%d" or "batch*heads_kv*seq_k*%d", w) }
  local rows = varlen and { "heads_kv", "total_k" } or { "batch", "heads_kv", "seq_k" }
  for _, x in ipairs(M.WS) do
    t[#t + 1] = { x[1], "workspace", x[2] == "f16" and ext or rows, align = 16 }
  end
end

-- Index of (batch bi, kv head hkv, key 0) in [batch, heads_kv, seq_k] (i64; varlen: of the sequence's first
-- key in [heads_kv, total_k], lib/attn_varlen.lua bind's k_at).
local function row0_index(b, p, bi, hkv)
  if p.k_at then return b:i64(hkv) * b:i64(p.total_k) + b:i64(p.k_at) end
  return (b:i64(bi) * b:i64(p.heads_kv) + b:i64(hkv)) * b:i64(p.seq_k)
end

-- dkdv: after the staging of K and V (sh.ks, sh.vs: bn rows of stride cfg.ld, factors sh.kf, sh.vf) at keys
-- [k0, k0 + bn) of (bi, hkv), one barrier, then the rows inside seq_k go to the workspace (16 bytes a copy)
-- and their factors beside them. Once a block, outside its loop. cfg.kvrows (dq takes K's and V's low parts,
-- lib/attn_bwd_f16scaled.lua dq_kv_lo_applies): a row the staging marked in sh.kvrm (K's rows, then V's: 1.0 where
-- the row spans more than 2^32) has its factor stored negative.
function M.write(b, cfg, threads, sh, p, bi, hkv, k0, w)
  local bn = cfg.block_n
  local cpr = w // 8
  local tid = b:tid()
  local at = row0_index(b, p, bi, hkv) + b:i64(k0)
  b:barrier() -- the staged tiles are complete
  for i, x in ipairs({ { sh.ks, p.kh, sh.kf, p.ksf }, { sh.vs, p.vh, sh.vf, p.vsf } }) do
    local tile, dst, fsrc, fdst = x[1], x[2], x[3], x[4]
    for it = 0, util.ceil_div(bn * cpr, threads) - 1 do
      local item = tid + it * threads
      local r, c = item // cpr, item % cpr
      local ok = b:lt(k0 + r, p.seq_k)
      if (it + 1) * threads > bn * cpr then ok = b:and_(ok, b:lt(item, bn * cpr)) end
      b:if_(ok, function()
        b:store_vec(dst + (at + b:i64(r)) * w + c * 8, b:load_vec(tile + r * cfg.ld + c * 8, 8, { align = 16 }), { align = 16 })
      end)
    end
    b:if_(b:and_(b:lt(tid, bn), b:lt(k0 + tid, p.seq_k)), function()
      local to = fdst + (at + b:i64(tid))
      local f = b:load(fsrc + tid)
      if cfg.kvrows then f = b:select(b:gt(b:load(sh.kvrm + ((i - 1) * bn + tid)), 0.0), b:f32(0.0) - f, f) end
      b:store(to, f)
    end)
  end
end

-- dq: the key tile [k0, k0 + bn) of (bi, hkv) from the workspace into sh.ks, sh.vs with the rows' factors
-- in sh.kf, sh.vf (rows past seq_k: zeros, as f16s.load stages them; their factor row 0's). The caller syncs.
-- cfg.kvrows: the factors' magnitudes go to sh.kf, sh.vf, and a thread whose K or V row is marked (stored negative
-- by write) puts k0 into the slot sh.kvtile (never cleared: k0 grows, so a stale tile's value never matches);
-- kv_tile_marked reads the answer after the caller's barrier.
function M.load(b, cfg, threads, sh, p, bi, hkv, k0, w)
  local bn = cfg.block_n
  local at = row0_index(b, p, bi, hkv)
  f16s.load_ws(b, cfg, threads, sh.ks, p.kh + at * w, w, k0, bn, p.seq_k)
  f16s.load_ws(b, cfg, threads, sh.vs, p.vh + at * w, w, k0, bn, p.seq_k)
  local tid = b:tid()
  b:if_(b:lt(tid, bn), function()
    local row = k0 + tid
    local r = at + b:i64(b:select(b:lt(row, p.seq_k), row, 0))
    if cfg.kvrows then
      local kx, vx = b:load(p.ksf + r), b:load(p.vsf + r)
      b:store(sh.kf + tid, b:abs(kx))
      b:store(sh.vf + tid, b:abs(vx))
      b:if_(b:lt(b:bits(kx) | b:bits(vx), 0), function() b:store(sh.kvtile, b:from_bits(k0)) end)
    else
      b:store(sh.kf + tid, b:load(p.ksf + r))
      b:store(sh.vf + tid, b:load(p.vsf + r))
    end
  end)
end

-- dq (cfg.kvrows): whether key tile k0 holds a K or V row marked as spanning more than 2^32 (after load's barrier;
-- sh.kvtile starts at -1.0, which matches no k0).
function M.kv_tile_marked(b, sh, k0) return b:eq(b:bits(b:load(sh.kvtile)), k0) end

return M
