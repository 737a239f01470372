-- templates/rotary.lua - rotary position embedding (RoPE) of q or k, forward and backward: FlashAttention's apply_rotary_emb.
--
-- x: [batch, seq, heads, head_dim] with strides stride_x{b,s,h} in elements (the last dim
-- contiguous), or with varlen=true packed [total, heads, head_dim], sequence b in rows
-- cu_seqlens[b] .. cu_seqlens[b + 1] - 1 (int32, batch + 1; `seq` is then the longest). cos, sin:
-- [seqlen_ro, rotary_dim / 2] in dtype cs, contiguous. Token s of sequence b sits at position
-- p = s + offset + offsets[b] (offsets: int32 [batch], or NULL); a position outside 0..seqlen_ro-1
-- is not rotated (cos 1, sin 0: FlashAttention's masked table loads).
--
-- With r = rotary_dim, c, s = cos[p][i], sin[p][i] (conjugate != 0 at launch: -sin, the rotation by
-- -theta that the backward applies to the output's gradient):
--   interleaved=false (GPT-NeoX halves): (x[i], x[i + r/2]) -> (x[i] c - x[i + r/2] s, x[i + r/2] c + x[i] s), i < r/2
--   interleaved=true  (GPT-J pairs):     (x[2i], x[2i + 1]) -> (x[2i] c - x[2i + 1] s, x[2i + 1] c + x[2i] s)
-- in f32, each output one fma and one multiply, rounded once. Dims r .. head_dim-1 pass through:
-- copied into `out` (inplace=false) or left untouched (inplace=true: the kernel reads and writes x).
--
-- Geometry: a (token, head) row is cut into units of one 16-byte vector where the sizes allow (a
-- NeoX unit: a vector of the first half and the matching one of the second; a GPT-J unit: one
-- vector of pairs; a copy unit: one vector past r). A thread owns one unit of one token for
-- HEADS_PER_BLOCK heads: it loads its cos/sin vector once and applies it to every head, all the
-- heads' loads issued before the first store. Block: TOKENS tokens x units; grid: {tokens, batch, heads}.
local util = require("lib.util")
local rmath = require("lib.rotary_math")

local K = {
  doc = "rotary embedding (RoPE) of x [batch, seq, heads, head_dim] or varlen: first rotary_dim dims rotated by cos/sin at s + offsets; conjugate=1 at launch is the backward",
  params = {
    { name = "dtype", type = "dtype", default = "f16", doc = "x and out dtype" },
    { name = "cs", type = "dtype", default = "=dtype", doc = "cos/sin table dtype" },
    { name = "head_dim", type = "int", default = 128, min = 2, max = 512, doc = "head dimension (even)" },
    { name = "rotary_dim", type = "int", default = "=head_dim", min = 2, max = 512,
      doc = "dims rotated (even, <= head_dim); the rest pass through" },
    { name = "interleaved", type = "bool", default = false, doc = "GPT-J pairs (x[2i], x[2i+1]) instead of GPT-NeoX halves" },
    { name = "varlen", type = "bool", default = false, doc = "packed sequences [total, heads, head_dim] with cu_seqlens" },
    { name = "inplace", type = "bool", default = false, doc = "rotate x in place (no out; the pass-through dims are not touched)" },
  },
}

-- Heads a thread rotates with one cos/sin vector, and the threads a block aims for.
local HEADS_PER_BLOCK, TARGET_BLOCK_THREADS = 8, 128

function K.check(spec)
  if spec.head_dim % 2 ~= 0 then return "head_dim=" .. spec.head_dim .. " must be even (dims rotate in pairs)" end
  if spec.rotary_dim % 2 ~= 0 then return "rotary_dim=" .. spec.rotary_dim .. " must be even (dims rotate in pairs)" end
  if spec.rotary_dim > spec.head_dim then
    return "rotary_dim=" .. spec.rotary_dim .. " exceeds head_dim=" .. spec.head_dim .. " (rotary_dim <= head_dim)"
  end
  return nil
end

-- Elements per vector: 16 bytes of dtype, halved until it divides every size in `sizes`.
local function width(dtype, sizes)
  local v = 16 // util.dtype_bytes[dtype]
  for _, n in ipairs(sizes) do
    while v > 1 and n % v ~= 0 do v = v // 2 end
  end
  return v
end

function K.config(spec, target)
  local r, d = spec.rotary_dim, spec.head_dim
  local half = r // 2
  -- a NeoX unit starts at i and at i + r/2 (vr divides r/2); a GPT-J unit holds whole pairs (vr divides r)
  local vr = spec.interleaved and width(spec.dtype, { r }) or width(spec.dtype, { half })
  local vc = width(spec.dtype, { r, d - r })
  local rot_units = spec.interleaved and r // vr or half // vr
  local copy_units = spec.inplace and 0 or (d - r) // vc
  local units = rot_units + copy_units
  local tokens = math.max(1, TARGET_BLOCK_THREADS // units)
  local xalign = math.max(vr, copy_units > 0 and vc or 1) * util.dtype_bytes[spec.dtype]
  -- a unit's cos/sin vector: vr entries (NeoX) or vr / 2 (GPT-J), at p * r/2 + its first index
  local csn = spec.interleaved and vr // 2 or vr
  -- LLVM's default<O3>, not kiln's pipeline (no `pipeline` key): over the 264 ptxas-matrix variants
  -- kiln's gave 488 fewer SASS instructions in all, but 28 variants (those with copy units) 8 more each
  return { block = tokens * units, grid_tile = { tokens, 1, HEADS_PER_BLOCK }, align = xalign,
           rows_per_block = tokens, threads_per_row = units,
           vr = vr, vc = vc, rot_units = rot_units, copy_units = copy_units, units = units, tokens = tokens,
           csn = csn, csalign = math.min(16, csn * util.dtype_bytes[spec.cs]),
           heads_per_block = HEADS_PER_BLOCK }
end

-- The kernel's parameters, in order.
local function params(spec)
  local ps = {}
  local function add(t) ps[#ps + 1] = t end
  if not spec.inplace then add{ "out", "ptr", spec.dtype } end
  add{ "x", "ptr", spec.dtype, readonly = not spec.inplace }
  add{ "cos", "ptr", spec.cs, readonly = true }
  add{ "sin", "ptr", spec.cs, readonly = true }
  if spec.varlen then add{ "cu_seqlens", "ptr", "i32", readonly = true } end
  add{ "offsets", "ptr", "i32", readonly = true }
  for _, n in ipairs{ "batch", "seq", "heads", "seqlen_ro", "offset", "conjugate" } do add{ n, "i32" } end
  local tensors = spec.inplace and { "x" } or { "x", "out" }
  for _, t in ipairs(tensors) do
    local short = t == "out" and "o" or "x"
    if not spec.varlen then add{ "stride_" .. short .. "b", "i64" } end
    add{ "stride_" .. short .. "s", "i64" }
    add{ "stride_" .. short .. "h", "i64" }
  end
  return ps
end

-- Element offset of (token row, head 0) in tensor t ("x" or "o") and its head stride.
local function row_base(b, spec, p, short, bi, row)
  local base = row * p["stride_" .. short .. "s"]
  if not spec.varlen then base = base + bi * p["stride_" .. short .. "b"] end
  return base, p["stride_" .. short .. "h"]
end

function K.build(b, spec, cfg)
  local p = b:kernel{ params = params(spec) }
  local dt, bytes = spec.dtype, util.dtype_bytes[spec.dtype]
  local tid = b:tid()
  local unit, tok = tid % cfg.units, tid // cfg.units
  local s = b:ctaid("x") * cfg.tokens + tok
  local bi = b:ctaid("y")
  local h0 = b:ctaid("z") * cfg.heads_per_block
  -- the token's row: batch-major, or packed after cu_seqlens[b]
  local row, len
  if spec.varlen then
    local start = b:load(p.cu_seqlens + bi)
    len = b:load(p.cu_seqlens + (bi + 1)) - start
    row = b:i64(start + s)
  else
    len = p.seq
    row = b:i64(s)
  end
  b:exit_if(b:ge(s, len))
  local bi64 = b:i64(bi)
  local xb, xh = row_base(b, spec, p, "x", bi64, row)
  local ob, oh = xb, xh
  local out = p.x
  if not spec.inplace then
    ob, oh = row_base(b, spec, p, "o", bi64, row)
    out = p.out
  end
  local heads = {}
  for k = 0, cfg.heads_per_block - 1 do
    local h = h0 + k
    -- the first head always exists (the grid covers heads), the rest are checked
    heads[k] = { h = b:i64(h), live = k > 0 and b:lt(h, p.heads) or nil }
  end
  local xa = cfg.vr * bytes
  local function head_ptrs(k, off)
    return p.x + (xb + heads[k].h * xh + off), out + (ob + heads[k].h * oh + off) -- off: i64
  end

  local function rotate()
    -- position and the unit's cos/sin vector (identity outside the table), sign for conjugate
    local pos = s + p.offset + b:load(p.offsets + bi, { pred = b:not_(b:is_null(p.offsets)) })
    local first = unit * cfg.csn -- NeoX: i0 = unit * vr; GPT-J: pair index of the unit's first pair
    local sign = b:select(b:ne(p.conjugate, 0), -1.0, 1.0)
    local c, sn = rmath.table(b, p.cos, p.sin, pos, p.seqlen_ro, spec.rotary_dim // 2, first, cfg.csn,
                              { align = cfg.csalign, sign = sign })
    local function rot(x0, x1, i) return rmath.rot(b, x0, x1, c[i], sn[i]) end
    local vr = cfg.vr
    if spec.interleaved then
      local off = b:i64(unit * vr)
      local xs = {}
      for k = 0, cfg.heads_per_block - 1 do
        local src = head_ptrs(k, off)
        xs[k] = b:load_vec(src, vr, { align = xa, pred = heads[k].live })
      end
      for k = 0, cfg.heads_per_block - 1 do
        local _, dst = head_ptrs(k, off)
        local o = {}
        for m = 1, vr // 2 do
          o[2 * m - 1], o[2 * m] = rot(b:to_f32(xs[k][2 * m - 1]), b:to_f32(xs[k][2 * m]), m)
        end
        b:store_vec(dst, b:from_f32_vec(o, dt), { align = xa, pred = heads[k].live })
      end
    else
      local off, half = b:i64(unit * vr), spec.rotary_dim // 2
      local lo, hi = {}, {}
      for k = 0, cfg.heads_per_block - 1 do
        local src = head_ptrs(k, off)
        lo[k] = b:load_vec(src, vr, { align = xa, pred = heads[k].live })
        hi[k] = b:load_vec(src + half, vr, { align = xa, pred = heads[k].live })
      end
      for k = 0, cfg.heads_per_block - 1 do
        local _, dst = head_ptrs(k, off)
        local o0, o1 = {}, {}
        for i = 1, vr do o0[i], o1[i] = rot(b:to_f32(lo[k][i]), b:to_f32(hi[k][i]), i) end
        b:store_vec(dst, b:from_f32_vec(o0, dt), { align = xa, pred = heads[k].live })
        b:store_vec(dst + half, b:from_f32_vec(o1, dt), { align = xa, pred = heads[k].live })
      end
    end
  end

  -- a copy unit: one vector of the dims past rotary_dim, bits unchanged
  local function copy()
    local off = b:i64(spec.rotary_dim + (unit - cfg.rot_units) * cfg.vc)
    local ca = cfg.vc * bytes
    local vs = {}
    for k = 0, cfg.heads_per_block - 1 do
      local src = head_ptrs(k, off)
      vs[k] = b:load_vec(src, cfg.vc, { align = ca, pred = heads[k].live })
    end
    for k = 0, cfg.heads_per_block - 1 do
      local _, dst = head_ptrs(k, off)
      b:store_vec(dst, vs[k], { align = ca, pred = heads[k].live })
    end
  end

  if cfg.copy_units == 0 then
    rotate()
  else
    b:if_(b:lt(unit, cfg.rot_units), rotate, copy)
  end
end

-- The launch problem (docs/registry.md): x (and out) [batch, seq, heads, head_dim], or varlen
-- [total, heads, head_dim] with `total` the packed token count (its extent only); strides of x
-- and out free but for the last dim; grid {seq, batch, heads} (varlen: seq is the longest sequence).
function K.launch(spec, cfg)
  local d, half = spec.head_dim, spec.rotary_dim // 2
  local rows = spec.varlen and { "total", "heads", d } or { "batch", "seq", "heads", d }
  local tensors, strides = {}, {}
  local names = spec.inplace and { "x" } or { "out", "x" }
  for _, t in ipairs(names) do
    local role = spec.inplace and "inout" or t == "out" and "out" or "in"
    tensors[#tensors + 1] = { t, role, rows, align = cfg.align }
    local short = t == "out" and "o" or "x"
    local axes = spec.varlen and { "s", "h" } or { "b", "s", "h" }
    for i, a in ipairs(axes) do strides[#strides + 1] = { "stride_" .. short .. a, t, i - 1 } end
  end
  tensors[#tensors + 1] = { "cos", "in", { "seqlen_ro", half }, align = cfg.csalign }
  tensors[#tensors + 1] = { "sin", "in", { "seqlen_ro", half }, align = cfg.csalign }
  if spec.varlen then tensors[#tensors + 1] = { "cu_seqlens", "in", { "batch+1" } } end
  tensors[#tensors + 1] = { "offsets", "in", { "batch" }, optional = true }
  local scalars = { { "batch" }, { "seq" }, { "heads" }, { "seqlen_ro" }, { "offset", 0 }, { "conjugate", 0 } }
  if spec.varlen then scalars[#scalars + 1] = { "total" } end
  return { tensors = tensors, scalars = scalars, strides = strides, problem = { "seq", "batch", "heads" } }
end

-- the ptxas matrix: every x dtype (and f32 tables for bf16) x NeoX/GPT-J x full, half and 24-of-96
-- rotation x out of place, varlen, in place
K.variants = {
  { { "dtype=f32", "dtype=f16", "dtype=bf16", "dtype=bf16 cs=f32" },
    { "head_dim=128", "head_dim=128 rotary_dim=64", "head_dim=96 rotary_dim=24" },
    { "", "interleaved=true" }, { "", "varlen=true", "inplace=true" } },
}
-- the default bundle: every dtype at head_dim 64 and 128 (GPT-NeoX halves), and GPT-J pairs for
-- f16/bf16 at 128
K.bundle = { dtypes = { "dtype", "cs" }, shape = "head_dim", shapes = { 64, 128 },
             extra = { "dtype=f16 head_dim=128 interleaved=true", "dtype=bf16 head_dim=128 interleaved=true" } }

return K
