-- templates/lib/attn_mask.lua - which keys an attention query row sees and what its scores become:
-- causal (bottom-right or top-left), sliding window, softcap and ALiBi, for the forward and backward.
--
-- Spec keys (bool keys switch code in; their values come at launch, so one kernel serves every
-- window, cap and slope set; FlashAttention-2's semantics, shift = seq_k - seq_q):
--   causal=true      query i sees key j iff j <= i + shift (bottom-right, FA2);
--   causal=top_left  iff j <= i (torch's scaled_dot_product_attention(is_causal=True));
--   window=true      window_left, window_right (i32; -1 = unbounded): iff
--                    i + shift - window_left <= j <= i + shift + window_right, with the causal bound;
--   softcap=true     softcap (f32, > 0): the scaled score x becomes softcap * tanh(x / softcap);
--   alibi=true       alibi_slopes (f32 [heads_q], or [batch, heads_q] rows alibi_stride apart;
--                    alibi_stride = 0 shares one row among the batch): x gains
--                    -slope * |i + shift - j| (after the softcap).
-- The launch values are kernel parameters appended after the family's own (params()).
-- A row's visible keys are the range [lo, hi) (row_range); a block of rows visits the key tiles
-- any of its rows sees and no others (tile_range), and only the tiles some row sees in part pay for
-- the per-key compare. Scores run in base 2: the kernels carry x * log2(e).
local M = {}

local LOG2E = 1.4426950408889634

M.KEYS = {
  { name = "window", type = "bool", default = false, hide_default = true,
    doc = "sliding window: window_left / window_right at launch (-1 unbounded; FlashAttention-2's window_size)" },
  { name = "softcap", type = "bool", default = false, hide_default = true,
    doc = "logit softcap: scores become softcap * tanh(score / softcap), softcap (> 0) at launch" },
  { name = "alibi", type = "bool", default = false, hide_default = true,
    doc = "ALiBi: scores gain -slope * |i + seq_k - seq_q - j|; f32 alibi_slopes [heads_q] or [batch, heads_q] (alibi_stride) at launch" },
}
-- The values' order is the C API's numbering (KILN_CAUSAL_NONE, _BOTTOM_RIGHT, _TOP_LEFT in kiln/runtime.h): the
-- build writes them into the runtime's helpers (tools/key_values.c), which spell value i for C value i.
M.CAUSAL = { name = "causal", type = "enum", default = "false", values = { "false", "true", "top_left" },
             doc = "causal mask: true aligns the diagonal bottom-right (FlashAttention-2), top_left as torch SDPA" }

-- A copy of the spec with causal as a boolean and top_left set (templates test `spec.causal`).
function M.spec(spec)
  if type(spec.causal) ~= "string" then return spec end
  local s = {}
  for k, v in pairs(spec) do s[k] = v end
  s.top_left = spec.causal == "top_left"
  s.causal = spec.causal ~= "false"
  return s
end

-- Whether the spec changes which keys rows see beyond the plain causal bound / what scores are.
function M.any(spec) return spec.window or spec.softcap or spec.alibi or spec.top_left end

-- Appends the launch values of the spec's keys to a kernel's parameter list.
function M.params(spec, params)
  if spec.window then
    params[#params + 1] = { "window_left", "i32" }
    params[#params + 1] = { "window_right", "i32" }
  end
  if spec.softcap then params[#params + 1] = { "softcap", "f32" } end
  if spec.alibi then
    params[#params + 1] = { "alibi_slopes", "ptr", "f32", readonly = true }
    params[#params + 1] = { "alibi_stride", "i32" }
  end
  return params
end

-- Appends the keys' launch lines to a launch description (docs/registry.md): the window sides
-- (default -1, unbounded), the softcap (no default: the caller gives it), the slopes tensor and its
-- row stride (default 0: one row of heads_q slopes shared by the batch).
function M.launch(spec, l)
  if spec.window then
    l.scalars[#l.scalars + 1] = { "window_left", -1 }
    l.scalars[#l.scalars + 1] = { "window_right", -1 }
  end
  if spec.softcap then l.scalars[#l.scalars + 1] = { "softcap" } end
  if spec.alibi then
    l.tensors[#l.tensors + 1] = { "alibi_slopes", "in", { "(batch-1)*alibi_stride+heads_q" } }
    l.scalars[#l.scalars + 1] = { "alibi_stride", 0 }
  end
  return l
end

-- The spec words of the keys that are on (" window=true softcap=true"), for the specs of a sequence.
function M.words(spec)
  local w = ""
  for _, k in ipairs({ "window", "softcap", "alibi" }) do
    if spec[k] then w = w .. " " .. k .. "=true" end
  end
  return w
end

-- The per-launch values every row uses (emit once, before the loops): the causal shift and the
-- window sides clamped to [0, seq_q + seq_k] (-1 and anything larger mean unbounded: no key is
-- farther than seq_q + seq_k from a row's diagonal), the softcap factors.
function M.setup(b, spec, p)
  local m = { b = b, spec = spec, p = p, shift = p.seq_k - p.seq_q }
  m.cshift = spec.top_left and 0 or m.shift
  if spec.window then
    local far = p.seq_k + p.seq_q
    local function side(w) return b:select(b:lt(w, 0), far, b:min(w, far)) end
    m.left, m.right = side(p.window_left), side(p.window_right)
  end
  if spec.softcap then
    m.cap_in = p.scale / p.softcap -- tanh argument per raw score
    m.cap_out = p.softcap * LOG2E
  end
  return m
end

-- Keys [lo, hi) visible to the row at query position sq (lo is nil without a window: 0).
function M.row_range(m, sq)
  local b, spec, p = m.b, m.spec, m.p
  local hi = p.seq_k
  if spec.causal then hi = b:min(hi, sq + m.cshift + 1) end
  local lo = nil
  if spec.window then
    hi = b:min(hi, sq + m.shift + m.right + 1)
    lo = b:max(sq + m.shift - m.left, 0)
  end
  return lo, hi
end

-- Key tiles of bn keys visited by rows at query positions first..last (first <= last; rows are
-- visited in order, bounds grow with the row): tiles [t0, t_end); the tiles every row sees whole
-- are [f0, f1) with t0 <= f0 <= f1 <= t_end.
function M.tile_range(m, first, last, bn)
  local b = m.b
  local lo_a, hi_a = M.row_range(m, first)
  local lo_z, hi_z = M.row_range(m, last)
  local t_end = (b:max(hi_z, 0) + (bn - 1)) // bn
  assert(lo_a, "tile_range is for window=true (the plain bounds are in the templates)")
  local t0 = b:min(lo_a // bn, t_end)
  local f0 = b:min(b:max((lo_z + (bn - 1)) // bn, t0), t_end)
  local f1 = b:min(b:max(b:max(hi_a, 0) // bn, f0), t_end)
  return t0, t_end, f0, f1
end

-- Query rows [q_lo, q_hi) that see at least one key of k_first..k_last (the backward's key blocks
-- visit only those rows): hi(i) > k_first and, with a window, lo(i) <= k_last.
function M.query_range(m, k_first, k_last)
  local b, spec, p = m.b, m.spec, m.p
  local q_lo, q_hi = 0, p.seq_q
  if spec.causal then q_lo = b:max(k_first - m.cshift, 0) end
  if spec.window then
    q_lo = b:max(q_lo, k_first - m.shift - m.right)
    q_hi = b:min(q_hi, k_last - m.shift + m.left + 1)
  end
  return q_lo, q_hi
end

-- The query rows a key k sees, as the row's offset from k (query_range's bounds before its clamps to [0, seq_q)):
-- row - k >= lo (causal: -cshift; window: -(shift + right); both: the larger) and row - k < hi (window:
-- left + 1 - shift); nil where there is no bound. A kernel whose rows past seq_q have P = 0 needs no more.
function M.key_offsets(m)
  local b, spec = m.b, m.spec
  local lo, hi
  if spec.causal then lo = -m.cshift end
  if spec.window then
    local wl = -(m.shift + m.right)
    lo = lo and b:max(wl, lo) or wl
    hi = m.left + 1 - m.shift
  end
  return lo, hi
end

-- tanh(x) from ex2.approx: (1 - e) / (1 + e) with e = 2^(-2 |x| log2 e), the sign put back.
-- Absolute error a few 2^-23 (ex2.approx is 2^-22.5 relative); tanh.approx.f32 would be 2^-11.
local function tanh(b, x)
  local e = b:ex2_approx(b:abs(x) * (-2.0 * LOG2E))
  local t = (1.0 - e) / (1.0 + e)
  return b:from_bits(b:bits(t) | (b:bits(x) & -2147483648))
end
M.tanh = tanh

-- The ALiBi slope of query head h (batch ctaid.z), times log2(e), from the launch tensor.
function M.slope(m, head)
  local b, p = m.b, m.p
  local at = b:i64(b:ctaid("z")) * b:i64(p.alibi_stride) + b:i64(head)
  return b:load(p.alibi_slopes + at) * LOG2E
end

-- Base-2 score of raw dot product s: s * scale * log2(e) (scale2), softcapped, then with ALiBi
-- minus slope2 * |dist| (slope2: M.slope; dist: i + shift - j as f32). With the softcap it also
-- returns t = tanh(scale * s / softcap), for the backward's derivative 1 - t^2.
function M.score(m, s, scale2, slope2, dist)
  return M.score_scaled(m, m.spec.softcap and s * m.cap_in or s * scale2, slope2, dist)
end

-- M.score of u, the raw dot product already times its scale (m.cap_in with the softcap, scale2 without: a
-- kernel that folds it into a factor it multiplies by anyway).
function M.score_scaled(m, u, slope2, dist)
  local b = m.b
  local x, t
  if m.spec.softcap then
    t = tanh(b, u)
    x = t * m.cap_out
  else
    x = u
  end
  if m.spec.alibi then x = b:fma(b:abs(dist), -slope2, x) end
  return x, t
end

return M
