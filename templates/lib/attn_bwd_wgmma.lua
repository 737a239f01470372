-- templates/lib/attn_bwd_wgmma.lua - the attention backward's dkdv kernel on sm_90a in FlashAttention-3's
-- structure (path=wgmma): a producer warpgroup issuing TMA for Q and dO tiles into a ring gated by mbarriers,
-- consumer warpgroups each holding 64 keys' K and V in shared memory and dK, dV in registers, on wgmma.
--
-- attention_bwd.lua hands kernel=dkdv here when path=wgmma (opt-in, as the forward's: path=auto keeps the
-- mma.sync kernel on sm_90a), for the specs this file covers (not_covered): f16/bf16 with out = dtype, head_dim
-- and v_head_dim up to 256 (lib/attn_wgmma_dims.lua's widths: tiles W = 64 columns for both <= 64, 128 to 128, 256
-- past it; d32, 8-56 padded to 64, d96, 72-120 to 128, 136-248 to 256; v_head_dim != head_dim on the wider's tiles;
-- W = 256 splits dK's and dV's columns between two consumer warpgroups on the same keys: SPLIT), any grad dtype, causal (both
-- alignments), window, softcap, ALiBi, GQA/MQA, any batch/heads/lengths; dropout (with the softcap too) and varlen
-- (lib/attn_bwd_wgmma_keys.lua: the forward's Philox mask, maps over the packed tensors).
-- dQ: by default this kernel adds dS K into the f32 workspace dq_acc (prep zeroes it, convert scales and rounds
-- it) by FA3's dQ writer: a 64-column panel at a time through a shared f32 staging tile and TMA reduce-adds (8 boxes of
-- 8 columns: the map tm_dq; below: DQ_TILE; 256-column tiles a half-panel at a time) in every variant (wave 24
-- removed the f32 atomics it replaced: no variant took them once the last two sets ran the writer, M.config);
-- deterministic=true adds nothing and the sequence's kernel=dq (path=auto: mma.sync) computes dQ, as on every path.
--
-- Launch: the dkdv kernel's (tensors, strides, scalars, problem {seq_k, heads_kv, batch}, grid tile 64 NC keys)
-- plus four tensor maps over q, k, v, dout (and dQ's writer: tm_dq over dq_acc, f32, boxes of 64 rows x 8 columns, below)
-- ([batch, seq, heads, d], d the real head_dim or v_head_dim, boxes of
-- 1 x 64 rows x 1 x 64 columns under the 128-byte swizzle, zero-filled past d; a tile takes ceil(d / 64) boxes; varlen: the FA2 backward's varlen launch, maps over the
-- packed [total, heads, d] tensors, lib/attn_bwd_wgmma_keys.lua). Rows past seq_q / seq_k come in as TMA's
-- zeros (varlen: as the next sequence's rows): a query row past seq_q has its lse taken as +inf (P = 0), a key
-- past seq_k is not stored (varlen: its P is 0, so that dQ takes nothing from it).
--
-- Block: NC consumer warpgroups (warpgroup c owns keys k0 + 64c .. +63; threads 0 .. 128 NC - 1) and one
-- producer warpgroup (the last; its first thread issues every TMA, all 128 stage lse and delta). Shared memory
-- (dynamic, 1024-byte aligned): K and V of the block (NC x qp and NC x vp panels: qp = ceil(head_dim / 64), vp =
-- ceil(v_head_dim / 64)), then NS stages of Q and of dO (qp and vp panels), then (atomic dQ) one dS panel per consumer warpgroup
-- (and with dQ's writer one 16 KiB f32 staging tile each, 8 boxes of 64 rows x 8 f32); a panel is 64 rows of 128 bytes,
-- 128B-swizzled, which is also the layout wgmma's descriptors name; static: each stage's 64 lse and 64 delta.
-- Barriers: kbar (K, V landed), full[s] (1 + 128 arrivals: the TMA thread's with the stage's bytes, the producer
-- threads' rows), empty[s] (128 NC consumer arrivals), dsbar[c] (atomic dQ: warpgroup c's 128 dS stores).
-- The consumers address shared memory from its start by warp-uniform offsets made once a tile, their wgmma
-- descriptors a base's plus an offset (lib/attn_bwd_wgmma_regs.lua: what keeps d128's two warpgroups in 240
-- registers and every variant's wgmma chains asynchronous).
--
-- The block walks the query heads of its kv head's group and, in each, the query tiles of 64 rows that see its
-- keys (mask.query_range: causal and window skip the others). Per tile a consumer warpgroup:
--   S^T = K Q^T and dP^T = V dO^T by ceil(head_dim / 16) and ceil(v_head_dim / 16) chained m64n64k16 (K, V as A
--   and Q, dO as B from shared memory,
--   all K-major as stored, two commit groups); P^T = exp2(S^T scale log2e - lse log2e) (the mask's score and
--   visibility) while dP^T is in flight; dV += P^T dO by 4 chained m64n{64 vp}k16 issued before dP^T is waited;
--   dS^T = P^T (dP^T - delta) (softcap: P^T (1 - tanh^2), made with P^T under dP^T's wgmma); dK += dS^T Q by 4
--   m64n{64 qp}k16. P^T / dS^T are A from registers (the D fragment re-packed as the forward packs P: FA3's RS form at
--   d128, Mma_dKV_is_RS), dO / Q B N-major as stored (trans_b). lse (x log2 e) and delta of the tile's 64 rows come from the stage in shared memory, where
--   the producer warpgroup's threads put them (TMA would need lse rows padded to 16 bytes). Atomic dQ: dS^T's
--   fragment is stored transposed into the warpgroup's own 128B-swizzled [query][key] tile (wgmma's K-major A),
--   the warpgroup's stores gathered on its mbarrier dsbar[c] (128 arrivals; fence.proxy.async first), dV and dK
--   waited (the consumer then arrives on empty), and dQ += dS K by 4 m64n64k16 per 64 columns of head_dim (K N-major,
--   trans_b), each 64 columns' D fragment added to dq_acc: stored to the warpgroup's staging tile and added by its
--   thread 0's cp.reduce.async.bulk.tensor (named barrier 1 + c around the stores). Without it the consumer
--   arrives on empty once dV and dK are in.
-- The epilogue stores dK scale and dV in the grad dtype (keys < seq_k), head_dim and v_head_dim columns.
local util = require("lib.util")
local varlen = require("lib.attn_varlen")
local mask = require("lib.attn_mask")
local wgmma = require("lib.attn_wgmma") -- (refusal: the errors of path=wgmma's config)
local keys = require("lib.attn_bwd_wgmma_keys") -- (dropout, varlen)
local regs = require("lib.attn_bwd_wgmma_regs") -- (uniform offsets, descriptors as base + offset)
local wdims = require("lib.attn_wgmma_dims") -- (the tiles' width W and the real widths' panels and k-steps)

local M = {}

-- What path=wgmma builds, as its refusal of a spec (M.config) says.
local TAKES = "it takes dtype f16/bf16 with out = dtype, head_dim and v_head_dim up to 256 (on 64-, 128- or 256-column tiles: 8-64 on 64, 72-128 on 128, 136-256 on 256; v_head_dim != head_dim on the tiles of the wider; on 256 the softcap with atomic dQ, without dropout and alibi), causal, window, softcap, alibi, dropout, varlen, GQA (use path=auto)"

local LOG2E = 1.4426950408889634
local POS_INF = math.huge
local BM = 64          -- query rows per tile
local PANEL = 64 * 64  -- elements of one 64 x 64 panel (8192 bytes)
-- Geometry: consumer warpgroups (64 keys each), Q/dO ring stages, setmaxnreg counts (producer dec, consumers inc;
-- the block starts with .maxnreg 168 at 384 threads, 255 at 256, and dec + NC inc <= that x (NC + 1): 24 + 2 x 240
-- = 3 x 168). ptxas allocates a consumer up to its inc count; what a shape must fit is the consumer's own
-- registers, measured with ptxas sm_90a (docs/hopper.md "Two consumer warpgroups at d128"). Two consumer warpgroups
-- (128 keys a block, each Q/dO tile read once for both; FA3's 24 / 240): d64 (dK, dV, S^T, dP^T: 128 f32 a thread)
-- and d128 (192 f32), with the addressing of lib/attn_bwd_wgmma_regs.lua (before it d128 spilled 72 bytes at 240
-- and d64's wgmma were serialized). One (256 threads, setmaxnreg's most, 256): d128 with dropout (the Philox words
-- and keep bits: 8-40 bytes spilled with two in 13 of its 40 variants) and with the softcap (44-68 bytes with two;
-- wave 12's figures).
-- The softcap with dropout where head_dim and v_head_dim are both past 64 (dK and dV 128 columns wide) spilled 4
-- bytes at 255 registers (causal=top_left, atomic: d72, d96, d120, d128) with the tile's 16 lse values loaded
-- before P^T's loop; loaded as P^T's columns use them (lse_as_used below) every variant fits one warpgroup
-- (docs/hopper.md "The softcap with dropout at 72-128"). With the lse so loaded two consumer warpgroups (inc 240)
-- fit (wave 15, docs/hopper.md "Two consumer warpgroups with dropout or the softcap") the softcap without varlen
-- at 128-column tiles, and dropout, the softcap and both where one of head_dim, v_head_dim is <= 64; one stays
-- where both are past 64 with dropout (d128 with window and ALiBi: 8 bytes; with the softcap 4-80) or the softcap
-- with varlen (20-24 bytes).
-- Shapes are keyed by the tiles' width W (64, 128): d32 runs d64's, d96 and qk 128 / v 64 d128's.
-- 256-column tiles (head_dim or v_head_dim 136-256; SPLIT): dK and dV of 64 keys at 256 columns are 256 f32 a
-- thread, so both consumer warpgroups take the same 64 keys and warpgroup c dK's and dV's columns 128c .. 128c +
-- 127 (64 + 64 f32), each making the whole S^T and dP^T (32 + 32): 192 a thread as at d128 (docs/hopper.md "Head
-- dims 136-256"); K, V, Q and dO load 4 panels whatever the real widths (a panel past them: TMA's zeros).
local SPLIT = { nc = 2, stages = 2, dec = 24, inc = 240, split = true }
local SHAPES = {
  [64] = { nc = 2, stages = 2, dec = 24, inc = 240 },
  [128] = { nc = 2, stages = 2, dec = 24, inc = 240 },
  [256] = SPLIT,
}
local ONE = { nc = 1, stages = 2, dec = 24, inc = 256 }
-- dQ's writer (atomic dQ, FA3's): each consumer warpgroup stores a 64-column panel of its dQ fragment into its own
-- f32 staging tile of 64 rows x 64 columns (DQ_TILE bytes), and its elected thread adds the tile into dq_acc with
-- TMA reduce-adds (cp.reduce.async.bulk.tensor .add) through the map tm_dq, in place of 4096 f32 atomics a panel
-- (docs/hopper.md "TMA reduce-add and bulk groups": the L2 traffic).
-- The tile is DQ_BOXES boxes of 64 rows x 8 columns (32-byte rows, no swizzle), one reduce-add each: a fragment
-- store (st.shared.v2.f32, rows 16w + g, columns 8j + 2q) puts a phase's 16 lanes (g 0..3 or 4..7) on 128
-- consecutive bytes, conflict-free. Measured with the emulator's profile (kiln run --profile, d64 causal 130 x 200):
-- one 64 x 64 box (256-byte rows) took 640 wavefronts for 160 at each of the 16 store sites (4-way: the 4 rows
-- of a phase on the same 8 banks), these boxes 160 for 160. Computed for the others (docs/hopper.md "Step 3"):
-- 32-column boxes under the 128B swizzle (2 reduces) and 16-column ones under any swizzle (4) stay 2-way, as the
-- swizzles move a 32-byte piece of a row by row bits that the phase's rows g, g ^ 1 share.
-- Where the block's shared memory (SMEM_MAX, sm_90's 227 KiB a block, dynamic and static) cannot hold the tiles
-- beside the K/V, Q/dO and dS panels (d256's SPLIT: 212992 + 32768 + 1088 bytes) each tile holds half a panel (4
-- boxes, 8 KiB: 230464 bytes in all), the panel's two halves stored and added in turn, the second after thread 0's
-- wait_group.read for the first's reduces and a named barrier (ptxas sm_90a: 0 spills, 168 registers, as the atomics
-- it replaced; docs/hopper.md "Step 4").
local DQ_TILE = 64 * 64 * 4
local DQ_BOXES = 8
local SMEM_MAX = 232448
-- The static shared memory of a shape (the barriers and the stages' lse / delta rows, as M.build declares them,
-- rounded as the NVPTX backend lays them out: 1088 bytes at 2 stages, measured from the kiln.meta smem line).
local function static_bytes(sh) return 64 + sh.stages * 2 * BM * 4 end

-- The geometry of a spec this file builds (keyed by the tiles' width W, lib/attn_wgmma_dims.lua).
local function shape(spec)
  local dim = spec.dim or spec.head_dim
  local vdim = spec.vdim or dim
  local w = wdims.width(math.max(dim, vdim))
  if w == 128 and dim > 64 and vdim > 64 and (spec.dropout or (spec.softcap and spec.varlen)) then return ONE end
  return SHAPES[w]
end

-- Why the spec is not built on this path (nil when it is). spec: attention_bwd's builder spec (bspec).
local function not_covered(spec)
  if spec.dtype ~= "f16" and spec.dtype ~= "bf16" then return "dtype " .. spec.dtype .. " (f16 and bf16 only)" end
  if spec.out ~= spec.dtype then return "out=" .. spec.out .. " (out = dtype only)" end
  local dim = spec.dim or spec.head_dim
  local vdim = spec.vdim or dim
  local w = wdims.width(math.max(dim, vdim))
  if not SHAPES[w] then
    if vdim ~= dim then
      return string.format("head_dim=%d v_head_dim=%d (both up to 256: the tiles are 64, 128 or 256 columns wide)", dim, vdim)
    end
    return string.format("head_dim=%d (up to 256: 8-64 on 64-column tiles, 72-128 on 128-column ones, 136-256 on 256)", dim)
  end
  -- (256-column tiles: ptxas sm_90a spilled with the softcap and dropout 4-8 bytes, deterministic=true 40-48, ALiBi
  -- 16-24 (window and ALiBi 16-32): docs/attention-bwd-span.md "Not held yet")
  if w == 256 and spec.softcap and (spec.dropout or spec.deterministic or spec.alibi) then
    return string.format("head_dim=%d v_head_dim=%d with softcap=true and %s (256-column tiles: 4-48 bytes spilled; the softcap runs there with atomic dQ, without dropout and alibi)",
                         dim, vdim, spec.dropout and "dropout=true" or spec.deterministic and "deterministic=true" or "alibi=true")
  end
  for _, k in ipairs({ "dropout", "varlen" }) do
    if spec[k] and not keys.KEYS[k] then return k .. "=true" end
  end
  return nil
end

-- The refusal of path=wgmma on a kernel other than dkdv (nil when none): attention_bwd's check().
function M.check(spec)
  if spec.path == "wgmma" and spec.kernel ~= "dkdv" then
    return "path=wgmma applies to kernel=dkdv only (its sequence runs prep, dq and convert on path=auto)"
  end
end

-- The dkdv kernel's config on path=wgmma (nil: the spec stays on attention_bwd.lua's paths); the errors are
-- lib/attn_wgmma.lua's refusal (a target without wgmma, a spec not_covered names).
function M.config(spec, target)
  if spec.path ~= "wgmma" then return nil end
  local no = wgmma.refusal(spec, target, not_covered, TAKES)
  if no then error(no) end
  local sh = shape(spec)
  local ws = wdims.spec(spec) -- (qp, vp: the panels of head_dim's and v_head_dim's columns)
  local atomic = not spec.deterministic -- (dQ += dS K here, through dq_acc's f32 atomics)
  -- (SPLIT: one set of K and V for both warpgroups, 4 panels each of K, V, Q, dO; 64 keys a block)
  local sets, lq, lv = sh.nc, ws.qp, ws.vp
  if sh.split then sets, lq, lv = 1, 4, 4 end
  local bytes = ((sets + sh.stages) * (lq + lv) + (atomic and sh.nc or 0)) * PANEL * util.dtype_bytes[spec.dtype]
  -- (FA3's dQ writer: a 16 KiB f32 staging tile a consumer warpgroup where the block's shared memory holds it:
  -- d64 114 KiB and d128 178 KiB in all; d256 (SPLIT) would need 241 KiB: half-panel tiles, 225 KiB)
  -- (remade: the softcap with ALiBi on 128-column tiles (d96, d128) and the softcap with causal=top_left on
  -- 256-column ones. ptxas sm_90a spilled there with the writer as built for the others: 16 bytes in 24 of the
  -- first's 114 variants of the matrix (the window's without dropout or varlen) and 8 in 16 of the second's 34,
  -- the tile loop one to four registers past the consumers' 240, so they took the atomics until wave 24. LLVM made
  -- the dS tile's four per-thread store offsets (64-bit) before the tile loop and held them across it; made in the
  -- loop from a shuffled copy of the thread index (cfg.remade_ds, M.build) all 148 run the writer with 0 spills and
  -- no C7508 (docs/hopper.md "Step 5: the last variants off the atomics"); not done elsewhere, where their PTX stays as it was)
  local dim = spec.dim or spec.head_dim
  local w = wdims.width(math.max(dim, spec.vdim or dim))
  local remade = (w == 128 and spec.softcap and spec.alibi) or
                 (w == 256 and spec.softcap and (spec.top_left or spec.causal == "top_left"))
  -- (dq_parts: the tile holds a panel (1) or half of one (2: d256's SPLIT, 212992 + 16384 + 1088 bytes), written
  -- in turn with a wait_group.read between. Every tile shape fits one of them (64-, 128- and 256-column tiles, each
  -- dtype and key: the matrix's 1294 sm_90a variants); a shape that fits neither is an error here, not a kernel)
  local dq_parts
  for _, n in ipairs({ 1, 2 }) do
    if atomic and not dq_parts and bytes + sh.nc * DQ_TILE // n + static_bytes(sh) <= SMEM_MAX then dq_parts = n end
  end
  if atomic and not dq_parts then
    error(string.format("path=wgmma: no dQ staging tile fits beside %d bytes of panels (%d a block)", bytes, SMEM_MAX))
  end
  local dq_tma = dq_parts ~= nil
  if dq_tma then bytes = bytes + sh.nc * DQ_TILE // dq_parts end
  local keys_per_block = 64 * sets
  return {
    atomic = atomic, dq_tma = dq_tma, dq_parts = dq_parts, remade_ds = atomic and remade or nil,
    path = "wgmma", block = 128 * (sh.nc + 1), threads = 128 * (sh.nc + 1), grid_tile = { keys_per_block, 1, 1 },
    rows_per_block = keys_per_block, block_n = keys_per_block, block_m = BM, nc = sh.nc, stages = sh.stages,
    dec = sh.dec, inc = sh.inc, dynamic_smem = bytes, align = 16, arch_specific = true, split = sh.split,
  }
end

-- The tensor maps of the launch (docs/registry.md): q, k, v, dout as [batch, seq, heads, d], boxes of 64 rows x
-- 64 columns, 128-byte swizzle.
function M.launch(spec, cfg, l)
  l.tmaps = {}
  for _, t in ipairs({ "q", "k", "v", "dout" }) do
    l.tmaps[#l.tmaps + 1] = { "tm_" .. t, t, box = keys.box(spec), swizzle = 128 }
  end
  if cfg.dq_tma then
    -- (dQ's writer: dq_acc declared by its axes, [batch, heads_q, seq_q, head_dim] or varlen's [heads_q, total_q,
    -- head_dim], the same elements; boxes of 64 rows x 8 columns, f32, dense: DQ_BOXES a panel)
    for _, t in ipairs(l.tensors) do
      if t[1] == "dq_acc" then
        t[3] = spec.varlen and { "heads_q", "total_q", spec.head_dim } or { "batch", "heads_q", "seq_q", spec.head_dim }
      end
    end
    l.tmaps[#l.tmaps + 1] = { "tm_dq", "dq_acc", box = spec.varlen and { 1, 64, 8 } or { 1, 1, 64, 8 } }
  end
  return l
end

-- Builds the kernel. params: attention_bwd's dkdv parameter list (tensors, sizes, strides, mask values);
-- io.base(p, t, bi, h): row 0 of (batch bi, head h) in tensor t; io.row_index(p, bi, h): (bi, h, row 0) of lse/delta.
function M.build(b, spec, cfg, params, io)
  -- (batch: the tensor maps' outer extent, which the launch's binders read from the kernel's arguments, as for
  -- the forward's wgmma kernel; varlen's maps are over the packed tensors)
  if not spec.varlen then params[#params + 1] = { "batch", "i32" } end
  for _, t in ipairs({ "q", "k", "v", "dout" }) do params[#params + 1] = { "tm_" .. t, "tensormap", spec.dtype } end
  if cfg.dq_tma then params[#params + 1] = { "tm_dq", "tensormap", "f32" } end
  -- (varlen: the sequence's lengths, first rows and pointers; a block past its sequence's keys leaves at once)
  local p = varlen.bind(b, spec, b:kernel{ params = params }, cfg.block_n, true)
  -- (the head dims, lib/attn_wgmma_dims.lua: the tiles' width W = head_dim here, 64 or 128; the real head_dim dim
  -- (Q, K, dQ, dK) on qp panels, v_head_dim vdim (V, dO, dV) on vp; TMA fills the columns past a real width with
  -- zeros, so the products read them as 0, S^T = K Q^T stops at the k-step holding dim and dP^T = V dO^T at the one
  -- holding vdim, dK is qp panels wide and dV vp, and nothing past dim / vdim is stored)
  spec = wdims.spec(spec)
  local T, nc, ns = spec.dtype, cfg.nc, cfg.stages
  local dim, vdim, qp, vp = spec.dim, spec.vdim, spec.qp, spec.vp
  local kq, kv = spec.kq, (vdim + 15) // 16 -- (S^T's and dP^T's k-steps)
  -- (SPLIT, 256-column tiles: sets = 1 set of K and V for both warpgroups, lq = lv = 4 panels loaded of K/Q and
  -- V/dO, each warpgroup's dK and dV hq = hv = 2 panels wide from column 128 x its index; else a set of K and V
  -- a warpgroup and dK, dV as wide as the real columns' panels)
  local split = cfg.split
  local sets, lq, lv, hq, hv = nc, qp, vp, qp, vp
  if split then sets, lq, lv, hq, hv = 1, 4, 4, 2, 2 end
  local eb = util.dtype_bytes[T]
  local t, wg = b:tid(), b:warpgroup()
  local role = regs.uniform(b, wg) -- (the warpgroup, warp-uniform to ptxas: the roles' branches are not divergent)
  local smem = b:dynamic_shared(T, 1024)
  -- (the regions' offsets in elements: the consumers address them from smem, lib/attn_bwd_wgmma_regs.lua)
  local ok, ov = 0, sets * lq * PANEL
  local oq = ov + sets * lv * PANEL
  local odo = oq + ns * lq * PANEL
  local ods = odo + ns * lv * PANEL -- (atomic dQ: each consumer warpgroup's dS tile, [query][key])
  local sk, sv, sq, sdo = smem + ok, smem + ov, smem + oq, smem + odo
  -- (dQ's writer: the consumer warpgroups' f32 staging tiles after the dS panels, 1024-byte aligned)
  local dqs = cfg.dq_tma and b:dynamic_shared("f32", 1024) + (ods + nc * PANEL) * eb // 4 or nil
  local bars = b:shared("f32", 2 * (1 + 2 * ns + nc), 8)
  local kbar, full, empty = bars, bars + 2, bars + 2 + 2 * ns
  local dsbar = bars + 2 + 4 * ns -- (atomic dQ: per consumer warpgroup, its 128 threads' dS stores)
  -- each stage's 64 rows of lse (base 2) and delta, staged by the producer warpgroup's threads
  local srow = b:shared("f32", ns * 2 * BM, 16)
  local bi, hkv = b:ctaid("z"), b:ctaid("y")
  local group = p.heads_q // p.heads_kv
  local k0 = b:ctaid("x") * (64 * sets)
  local m = mask.setup(b, spec, p)
  -- the query rows [q_start, q_end) that see a key of the block; tiles of BM from q_start
  local q_start, q_end = mask.query_range(m, k0, b:min(k0 + 64 * sets, p.seq_k) - 1)
  q_start, q_end = keys.tile_start(b, spec, q_start, q_end) -- (dropout: from a multiple of 16)
  local nqt = b:max(q_end - q_start + (BM - 1), 0) // BM
  local stage_bytes = (lq + lv) * PANEL * eb -- (the panels holding real columns; SPLIT: all 4 of each)

  b:if_(b:eq(t, 0), function()
    b:mbarrier_init(kbar, 1)
    for s = 0, ns - 1 do
      b:mbarrier_init(full + 2 * s, 1 + 128) -- (the TMA thread's expect-tx and the 128 producer threads' rows)
      b:mbarrier_init(empty + 2 * s, 128 * nc)
    end
    if cfg.atomic then
      for c = 0, nc - 1 do b:mbarrier_init(dsbar + 2 * c, 128) end
    end
  end)
  b:barrier()

  -- producer: K and V of the block once, then per (query head, query tile) Q and dO into stage it % ns
  b:if_(b:eq(role, nc), function()
    b:setmaxnreg("dec", cfg.dec)
    local pt = t - 128 * nc
    b:if_(b:eq(pt, 0), function()
      b:mbarrier_arrive(kbar, { tx = b:i32(sets * (lq + lv) * PANEL * eb) })
      for c = 0, sets - 1 do
        for j = 0, math.max(lq, lv) - 1 do
          if j < lq then b:tma_load(sk + (c * lq + j) * PANEL, p.tm_k, keys.coord(spec, p, 64 * j, hkv, k0 + 64 * c, bi, "k"), kbar) end
          if j < lv then b:tma_load(sv + (c * lv + j) * PANEL, p.tm_v, keys.coord(spec, p, 64 * j, hkv, k0 + 64 * c, bi, "k"), kbar) end
        end
      end
    end)
    -- every producer thread: wait for a free stage; thread 0 issues Q's and dO's TMA, threads 0..63 stage the
    -- tile's lse (x log2 e; +inf past seq_q: P = 0), 64..127 its delta (0 past seq_q), then all arrive on full
    b:for_(0, group, 1, function(gi)
      local h = hkv * group + gi
      local ri = io.row_index(p, bi, h)
      b:for_(0, nqt, 1, function(qt)
        local it = gi * nqt + qt
        local s = it % ns
        b:if_(b:ge(it, ns), function() b:mbarrier_wait(empty + 2 * s, (it // ns + 1) % 2) end)
        local fb = full + 2 * s
        local row = q_start + qt * BM
        b:if_(b:eq(pt, 0), function()
          b:mbarrier_arrive(fb, { tx = b:i32(stage_bytes) })
          for j = 0, math.max(lq, lv) - 1 do
            if j < lq then b:tma_load(sq + (s * lq + j) * PANEL, p.tm_q, keys.coord(spec, p, 64 * j, h, row, bi, "q"), fb) end
            if j < lv then b:tma_load(sdo + (s * lv + j) * PANEL, p.tm_dout, keys.coord(spec, p, 64 * j, h, row, bi, "q"), fb) end
          end
        end)
        local r = row + (pt % BM)
        local live = b:lt(r, p.seq_q)
        local at = ri + b:i64(b:select(live, r, 0))
        b:if_(b:lt(pt, BM), function()
          b:store(srow + (s * 2 * BM + pt), b:select(live, b:load(p.lse + at) * LOG2E, POS_INF))
        end, function()
          b:store(srow + (s * 2 * BM + pt), b:select(live, b:load(p.delta + at), 0.0))
        end)
        b:mbarrier_arrive(fb)
      end)
    end)
  end)

  -- consumers
  b:if_(b:lt(role, nc), function()
    b:setmaxnreg("inc", cfg.inc)
    local drop = keys.setup(b, spec, p) -- (dropout's per-launch values; nil without)
    local tc = b:warpgroup_thread()
    local w, g, q = tc // 32, (tc % 32) // 4, tc % 4
    local function desc(a, lbo) return a:desc(lbo) end -- (a: a regs.at address)
    local function at(o, u) return regs.at(b, smem, eb, o * eb // 16 + u) end -- (region o, u 16-byte units on)
    local key, key_live = {}, {}
    for r = 0, 1 do
      key[r] = k0 + (split and 0 or wg * 64) + w * 16 + g + 8 * r
      key_live[r] = keys.key_live(b, spec, p, key[r])
    end
    -- (causal / window: a key k sees the rows k + [klo, khi), nil where unbounded; rows past seq_q have P = 0)
    local klo, khi = mask.key_offsets(m)
    local dkv, dvv = {}, {} -- (dK: 64 hq columns, 32 hq f32 a thread; dV: 64 hv)
    for i = 1, 32 * math.max(hq, hv) do
      if i <= 32 * hq then dkv[i] = b:var("f32", 0.0) end
      if i <= 32 * hv then dvv[i] = b:var("f32", 0.0) end
    end
    local scale2 = p.scale * LOG2E
    b:mbarrier_wait(kbar, 0)
    b:for_(0, group, 1, function(gi)
      local h = hkv * group + gi
      local slope2 = spec.alibi and mask.slope(m, h) or nil
      b:for_(0, nqt, 1, function(qt)
        local it = gi * nqt + qt
        local q0 = q_start + qt * BM
        -- the warpgroup and the stage, warp-uniform (lib/attn_bwd_wgmma_regs.lua); this warpgroup's K and V, the
        -- stage's Q and dO, as addresses whose descriptors are a base's plus an offset
        local us = regs.uniform(b, nc > 1 and ((wg << 8) | (it % ns)) or it % ns)
        local uw, s = 0, us -- (one consumer warpgroup: 0, a constant)
        if nc > 1 then uw, s = us >> 8, us & 255 end
        local UQ, UV = lq * PANEL * eb // 16, lv * PANEL * eb // 16 -- (16-byte units of lq and of lv panels)
        local my_k, my_v = at(ok, uw * UQ), at(ov, uw * UV)
        if split then my_k, my_v = at(ok, 0), at(ov, 0) end -- (SPLIT: one set of K and V)
        local qs, dos = at(oq, s * UQ), at(odo, s * UV)
        -- (dK's and dV's B: Q's and dO's columns of this warpgroup's half; SPLIT: from panel 2 x its index)
        local UH = 2 * PANEL * eb // 16
        local qs_h, dos_h = qs, dos
        if split then qs_h, dos_h = at(oq, s * UQ + uw * UH), at(odo, s * UV + uw * UH) end
        -- this thread's 16 query columns 8j + 2q + e; their lse (base 2) and delta are loaded where used (few
        -- registers live beside dK, dV and the in-flight S, dP: at d128 those four hold 192 of the 240)
        local col = {}
        for j = 0, 7 do
          for e = 0, 1 do col[2 * j + e] = q0 + 8 * j + 2 * q + e end
        end
        -- (dropout: the tile's keep predicates of element i, drawn before its Q and dO are waited for)
        local keep = keys.keeper(b, spec, drop, bi, h, col, key)
        -- (the stage's lse x log2 e and delta of local column c = 8j + 2q + e, staged by the producer)
        local function row_val(which, c) return b:load(srow + (s * 2 * BM + which * BM + 8 * (c >> 1) + (c & 1) + 2 * q)) end
        b:mbarrier_wait(full + 2 * s, (it // ns) % 2)
        b:wgmma_fence()
        local S, dP
        for j = 0, kq - 1 do -- (K Q^T over head_dim)
          local off = (j // 4) * PANEL + 16 * (j % 4)
          S = b:wgmma{ n = BM, type = T, a = desc(my_k + off, 16), b = desc(qs + off, 16), acc = S }
        end
        b:wgmma_commit()
        for j = 0, kv - 1 do -- (V dO^T over v_head_dim)
          local off = (j // 4) * PANEL + 16 * (j % 4)
          dP = b:wgmma{ n = BM, type = T, a = desc(my_v + off, 16), b = desc(dos + off, 16), acc = dP }
        end
        b:wgmma_commit()
        S = b:wgmma_wait(1, S)
        local dl = {}
        -- wgmma's A registers of X's k-step j (query columns 16j .. 16j + 15), from the D fragment
        local function areg(X, j)
          local a = {}
          for hh = 0, 3 do
            local i = 8 * j + 4 * (hh >> 1) + 2 * (hh & 1)
            a[hh + 1] = X.packed and X.packed[i] or b:pack(X[i], X[i + 1], T)
          end
          return a
        end
        -- P^T (element i: key row (i >> 1) & 1, query column (i >> 2, i & 1)), under dP^T's wgmma. Softcap: dS's
        -- factor P^T (1 - tanh^2) is made here (Pd), so that tanh's values are not held until dP^T is in, and dV's
        -- A registers are packed as P^T's pairs come (pk), so that P^T's f32 values are not held beside Pd
        local P, Pd, pk, dS, lse2 = {}, {}, {}, {}, {}
        -- (the softcap with dropout where dK and dV are both 128 columns wide: column c's lse loaded where its first
        -- element is made, not the 16 before the loop: those 16 registers beside S^T, dP^T, dK, dV, P^T's factors and
        -- the keep bits spilled 4 bytes at 255; the other variants keep the loads before the loop, as built)
        -- (and every variant on 128-column tiles that runs two consumer warpgroups with dropout or the softcap)
        local lse_as_used = math.max(hq, hv) == 2 and (spec.softcap or drop) and (nc == 2 or (spec.softcap and drop))
        if not lse_as_used then
          for c = 0, 15 do lse2[c] = row_val(0, c) end
        end
        -- the mask of element i by one compare against a constant: its query minus its key is d0 + t, t = o - 8r
        -- (o: its column's offset from this thread's first, 8 (c >> 1) + (c & 1); key row r is 8r past row 0's),
        -- visible for lo <= d0 + t < hi, ALiBi's distance f32(d0 + shift) + t (exact); three values a tile, not
        -- the 16 columns and 2 x 2 bounds
        local d0 = q0 + 2 * q - key[0]
        local lo, hi = klo and d0 - klo, khi and d0 - khi
        local ad = spec.alibi and b:f32(d0 + m.shift)
        for i = 0, BM // 2 - 1 do
          local r, c = (i >> 1) & 1, 2 * (i >> 2) + (i & 1)
          local t = 8 * (c >> 1) + (c & 1) - 8 * r
          local x, th
          if lse_as_used and not lse2[c] then lse2[c] = row_val(0, c) end
          if spec.softcap or spec.alibi then
            x, th = mask.score(m, S[i + 1], scale2, slope2, spec.alibi and ad + t or nil)
            x = x - lse2[c]
          else
            x = b:fma(S[i + 1], scale2, -lse2[c])
          end
          local pv = b:ex2_approx(x)
          if key_live[r] then pv = b:select(key_live[r], pv, 0.0) end -- (varlen: the next sequence's keys)
          if lo or hi then -- (d0 + t >= lo: d0 - lo >= -t; d0 + t < hi: d0 - hi < -t)
            local vis = lo and b:ge(lo, -t)
            if hi then vis = vis and b:and_(vis, b:lt(hi, -t)) or b:lt(hi, -t) end
            pv = b:select(vis, pv, 0.0)
          end
          local kp = drop and keep(i)
          if kp then pv = keys.held(b, kp, pv) end -- (dropout: P kept, -P dropped)
          P[i] = pv
          if th then
            Pd[i] = pv * (1.0 - th * th)
            if i & 1 == 1 then
              local a = keys.dv_operand(b, drop, { [0] = P[i - 1], [1] = P[i] })
              pk[i - 1] = b:pack(a[0], a[1], T)
            end
          end
        end
        -- dV += P^T dO under dP^T's wgmma, then dS^T and dK += dS^T Q
        local DV, DK = {}, {}
        for i = 1, 32 * hv do DV[i] = dvv[i]:get() end
        local dva = spec.softcap and { packed = pk } or keys.dv_operand(b, drop, P) -- ((P o M)^T with dropout)
        b:wgmma_fence()
        for j = 0, BM // 16 - 1 do
          DV = b:wgmma{ n = 64 * hv, type = T, a = areg(dva, j), b = desc(dos_h + 1024 * j, 8192), acc = DV, trans_b = true }
        end
        b:wgmma_commit()
        dP = b:wgmma_wait(1, dP)
        for c = 0, 15 do dl[c] = row_val(1, c) end
        local Ps = spec.softcap and Pd or P
        for i = 0, BM // 2 - 1 do
          local c = 2 * (i >> 2) + (i & 1)
          if drop then
            dS[i] = keys.ds(b, drop, Ps[i], dP[i + 1], dl[c])
          else
            dS[i] = Ps[i] * (dP[i + 1] - dl[c])
          end
        end
        local my_ds = at(ods, uw * (PANEL * eb // 16))
        if cfg.atomic then
          -- dQ (queries x d) += dS K needs dS as A: dS^T's fragment stored transposed into this warpgroup's
          -- [query][key] tile (128B-swizzled, wgmma's K-major A; element (qr, kr) in row qr, 16-byte chunk
          -- kr / 8 XOR qr % 8), the 128 threads' stores gathered on an mbarrier and handed to the async proxy.
          -- Element i: key kr = 16w + g + 8 rr (chunk 2w + rr, column g), query qr = 8 jj + 2q + e (qr % 8 = 2q + e)
          -- (cfg.remade_ds: w, g, q from this thread's index as a shuffle returns it (bfly 0: its own lane's), made
          -- here in the loop, where LLVM leaves a shfl.sync: the offsets are not four 64-bit values made before the
          -- tile loop and held across it; M.config)
          local base = {}
          local w, g, q = w, g, q
          if cfg.remade_ds then
            local own = b:shfl("bfly", tc, b:i32(0))
            w, g, q = own // 32, (own % 32) // 4, own % 4
          end
          for rr = 0, 1 do
            for e = 0, 1 do base[2 * rr + e] = (2 * q + e) * 64 + ((2 * w + rr) ~ (2 * q + e)) * 8 + g end
          end
          for i = 0, BM // 2 - 1 do
            local rr, e, jj = (i >> 1) & 1, i & 1, i >> 2
            b:store(my_ds + (base[2 * rr + e] + 512 * jj), b:from_f32(dS[i], T))
          end
          b:fence_proxy_async()
          b:mbarrier_arrive(dsbar + 2 * uw)
        end
        for i = 1, 32 * hq do DK[i] = dkv[i]:get() end
        b:wgmma_fence()
        for j = 0, BM // 16 - 1 do
          DK = b:wgmma{ n = 64 * hq, type = T, a = areg(dS, j), b = desc(qs_h + 1024 * j, 8192), acc = DK, trans_b = true }
        end
        b:wgmma_commit()
        -- dV, dK back into their registers; the stage (Q, dO) is free for the producer
        local function settle()
          DV = b:wgmma_wait(0, DV)
          DK = b:wgmma_wait(0, DK)
          for i = 1, 32 * math.max(hq, hv) do
            if i <= 32 * hv then dvv[i]:set(DV[i]) end
            if i <= 32 * hq then dkv[i]:set(DK[i]) end
          end
          b:mbarrier_arrive(empty + 2 * s)
        end
        if cfg.atomic then
          b:mbarrier_wait(dsbar + 2 * uw, it % 2)
          settle()
          -- 64 columns of dQ at a time (K's panels): 32 more registers beside dK and dV, not d/2
          -- (SPLIT: this warpgroup's 128 columns of dQ, K's panels from 2 x its index; a column is real below dim)
          local my_k = split and at(ok, uw * UH) or my_k
          for hp = 0, hq - 1 do
            local DQ
            -- (dQ's writer: the staging tile is free once thread 0 has seen the last reduce read it and the
            -- warpgroup has met on its named barrier 1 + uw; done before the panel's wgmma, with no DQ live)
            if cfg.dq_tma then
              b:if_(b:eq(tc, 0), function() b:bulk_wait(0, { read = true }) end)
              b:bar_sync(1 + uw, 128)
            end
            b:wgmma_fence()
            for j = 0, BM // 16 - 1 do
              DQ = b:wgmma{ n = 64, type = T, a = desc(my_ds + 16 * j, 16), b = desc(my_k + hp * PANEL + 1024 * j, 8192), acc = DQ,
                            trans_b = true }
            end
            b:wgmma_commit()
            DQ = b:wgmma_wait(0, DQ)
            if cfg.dq_tma then
              -- FA3's dQ writer: the fragment (rows 16w + g (+ 8), columns 8j + 2q (+ 1)) into this warpgroup's
              -- staging tile (free: above), the stores handed to the async proxy, the warpgroup met again, and
              -- thread 0 adds the tile into dq_acc at (column 64 hp, row q0, head h, batch bi): rows past seq_q
              -- (dense) and columns past head_dim are outside the map and skipped; varlen's rows past the sequence
              -- hold dS = 0 (P = 0) and add zeros to the next one's
              -- The tile is DQ_BOXES boxes of 64 rows x 8 columns (32-byte rows, 2 KiB each): box j holds the
              -- panel's columns 8j .. 8j + 7, element (row, c) at 8 x 64 j + 8 row + c, so that a store's 16 lanes of
              -- a phase (rows 16w + g, g 0..3 or 4..7, 4 threads q of a row) cover 128 consecutive bytes
              -- (d256: the tile holds nb = 4 boxes, the panel's columns 32 part .. + 31; the second part waits for
              -- the first's reduces to have read the tile and meets the warpgroup before its stores)
              local parts = cfg.dq_parts
              local nb = DQ_BOXES // parts
              local tile = dqs + uw * (DQ_TILE // parts // 4)
              local col = (split and uw * 128 or 0) + 64 * hp
              for part = 0, parts - 1 do
                if part > 0 then
                  b:if_(b:eq(tc, 0), function() b:bulk_wait(0, { read = true }) end)
                  b:bar_sync(1 + uw, 128)
                end
                for r = 0, 1 do
                  for j = part * nb, part * nb + nb - 1 do
                    local i = 4 * j + 2 * r
                    b:store_vec(tile + ((j - part * nb) * 8 * BM + (w * 16 + g + 8 * r) * 8 + 2 * q), { DQ[i + 1], DQ[i + 2] }, { align = 8 })
                  end
                end
                b:fence_proxy_async()
                b:bar_sync(1 + uw, 128)
                b:if_(b:eq(tc, 0), function()
                  -- (one reduce-add a box, all in one bulk group; a box wholly past head_dim is not issued: d40's
                  -- panel takes 5, d96's second 4; SPLIT's are all issued, the map skipping columns past head_dim)
                  for j = part * nb, part * nb + nb - 1 do
                    if split or 64 * hp + 8 * j < dim then
                      local c = col + 8 * j
                      b:tma_reduce_add(tile + (j - part * nb) * 8 * BM, p.tm_dq, spec.varlen and { c, p.q_at + q0, h } or { c, q0, h, bi })
                    end
                  end
                  b:bulk_commit()
                end)
              end
            end
          end
        else
          settle()
        end
      end)
    end)
    -- (dQ's writer: every reduce this warpgroup issued has read its tile and added into dq_acc before the exit)
    if cfg.dq_tma then b:if_(b:eq(tc, 0), function() b:bulk_wait(0) end) end
    -- epilogue: dK scale and dV in the grad dtype, rows of keys < seq_k
    local gb = util.dtype_bytes[spec.grad]
    local kb, vb = io.base(p, "dk", bi, hkv), io.base(p, "dv", bi, hkv)
    for r = 0, 1 do
      local live = b:lt(key[r], p.seq_k)
      local at = b:i64(b:select(live, key[r], 0))
      local kvals, vvals = {}, {}
      local kw, vw = dim // 8, vdim // 8 -- (the 8-column groups of dK's real columns and of dV's)
      local cb -- (SPLIT: this warpgroup's columns from 128 x its index, 16 groups of each, real below dim / vdim)
      if split then kw, vw, cb = 8 * hq, 8 * hv, wg * 128 end
      for j = 0, math.max(kw, vw) - 1 do
        local i = 4 * j + 2 * r
        if j < kw then kvals[j] = b:from_f32_vec({ dkv[i + 1]:get() * p.scale, dkv[i + 2]:get() * p.scale }, spec.grad) end
        if j < vw then
          vvals[j] = b:from_f32_vec({ keys.dv_out(drop, dvv[i + 1]:get()), keys.dv_out(drop, dvv[i + 2]:get()) }, spec.grad)
        end
      end
      b:if_(live, function()
        if split then
          local function put(base, vals, j, width)
            local function st() b:store_vec(base + (cb + 8 * j + 2 * q), vals[j], { align = 2 * gb }) end
            if width == 256 then st() else b:if_(b:lt(cb + 8 * j, width), st) end -- (both halves real at 256 only)
          end
          for j = 0, 15 do
            put(kb + at * p.stride_dks, kvals, j, dim)
            put(vb + at * p.stride_dvs, vvals, j, vdim)
          end
          return
        end
        for j = 0, math.max(kw, vw) - 1 do
          if kvals[j] then b:store_vec(kb + at * p.stride_dks + 8 * j + 2 * q, kvals[j], { align = 2 * gb }) end
          if vvals[j] then b:store_vec(vb + at * p.stride_dvs + 8 * j + 2 * q, vvals[j], { align = 2 * gb }) end
        end
      end)
    end
  end)
end

return M
