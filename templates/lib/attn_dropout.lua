-- templates/lib/attn_dropout.lua - attention dropout: the Philox 4x32-10 keep mask of (seed, offset, batch, head, query, key), forward and backward.
--
-- Spec keys (FlashAttention-2's semantics; the values come at launch, so one kernel serves every rate):
--   dropout=true       dropout_p (f32, 0 <= p < 1), dropout_seed and dropout_offset (i64; exact up to
--                      2^53 through the generic launch, default 0): each probability P[i][j] is kept
--                      with probability 1 - p and the kept ones scaled by 1 / (1 - p) in P V; the
--                      softmax statistics (m, l, lse) are those of the undropped P. The backward
--                      regenerates the same mask: dV = (P o Z)^T dO, dS = P o (dP o Z - D), Z = M / (1 - p).
--   dropout_mask=true  (tests; needs dropout=true) the kernel also writes the keep mask it used into the
--                      i32 launch tensor dropout_mask [batch, heads_q, seq_q, seq_k]: 1 kept, 0 dropped,
--                      for every (query, key) pair of the key tiles it visits (others keep their bytes);
--                      with varlen=true [batch, heads_q, max_seqlen_q, max_seqlen_k] (FA2's varlen
--                      S_dmask is [batch, heads, max_seqlen_q, max_seqlen_k] rounded up), sequence b's
--                      (query i, key j) at [b, h, i, j]; nothing past a sequence's lengths is written.
--
-- varlen=true (packed sequences, lib/attn_varlen.lua): the mask's (batch, query, key) are (the sequence's
-- index b, the row within the sequence, the key within the sequence) — FlashAttention-2's convention
-- (it keys its Philox by (batch, head, row, col) of the sequence). So a packed batch draws exactly the
-- mask of the dense batch of the same sequences when they have equal lengths, and a batch of one
-- sequence the dense kernel's batch-1 mask, bit for bit (tests/attention_varlen_dropout_test.c checks it).
--
-- The RNG (also in templates/lib/attn_dropout.ref.c, for the float64 references; they must agree bit
-- for bit): Philox 4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011)
-- with key (seed low 32 bits, seed high 32 bits) and counter
--   c0 = key >> 1,  c1 = (query >> 4) * 8 + (query & 7),  c2 = batch * heads_q + head + offset_hi,  c3 = offset_lo,
-- so one call gives the 4 words of queries {q, q + 8} (bit 3 of q clear) x keys {k, k + 1} (k even):
-- word ((query >> 3) & 1) * 2 + (key & 1) is the pair's. The tensor-core C fragment holds exactly
-- those 4 entries (rows g, g + 8; keys 2t, 2t + 1), so the forward and the deterministic dQ spend one
-- call per fragment; other layouts take one call per entry. Dropped iff (word >> 1) < floor(p * 2^31).
local M = {}

-- Philox 4x32 multipliers and Weyl key increments (Random123's PHILOX_M4x32_0/1, PHILOX_W32_0/1).
local M0, M1 = 0xD2511F53, 0xCD9E8D57
local W0, W1 = 0x9E3779B9, 0xBB67AE85
local ROUNDS = 10

-- As signed 32-bit constants (the builder's i32 constants are signed).
local function s32(x) x = x & 0xffffffff; return x >= 0x80000000 and x - 0x100000000 or x end

M.KEYS = {
  { name = "dropout", type = "bool", default = false, hide_default = true,
    doc = "attention dropout (training): dropout_p, dropout_seed, dropout_offset at launch; Philox 4x32-10 mask, the backward regenerates it" },
  { name = "dropout_mask", type = "bool", default = false, hide_default = true,
    doc = "with dropout=true (tests): also write the keep mask used into the i32 tensor dropout_mask [batch, heads_q, seq_q, seq_k]" },
}

-- A spec error, or nil.
function M.check(spec)
  if spec.dropout_mask and not spec.dropout then return "dropout_mask=true needs dropout=true" end
  if spec.dropout and spec.splitkv then
    return "dropout=true is refused with splitkv=true: split-KV is the decoding (inference) path, dropout a training feature (FlashAttention-2's kv-cache kernels have no dropout either); use splitkv=false"
  end
end

-- Appends the launch values to a kernel's parameter list.
function M.params(spec, params)
  if not spec.dropout then return params end
  params[#params + 1] = { "dropout_p", "f32" }
  params[#params + 1] = { "dropout_seed", "i64" }
  params[#params + 1] = { "dropout_offset", "i64" }
  if spec.dropout_mask then params[#params + 1] = { "dropout_mask", "ptr", "i32" } end
  if spec.dropout_mask and spec.varlen then -- (the mask's rows and columns: the longest sequence's)
    params[#params + 1] = { "max_seqlen_q", "i32" }
    params[#params + 1] = { "max_seqlen_k", "i32" }
  end
  return params
end

-- Appends the launch lines (docs/registry.md): the rate (the caller gives it), seed and offset (0).
function M.launch(spec, l)
  if not spec.dropout then return l end
  l.scalars[#l.scalars + 1] = { "dropout_p" }
  l.scalars[#l.scalars + 1] = { "dropout_seed", 0 }
  l.scalars[#l.scalars + 1] = { "dropout_offset", 0 }
  if spec.dropout_mask then
    l.tensors[#l.tensors + 1] = { "dropout_mask", "out", spec.varlen and { "batch", "heads_q", "max_seqlen_q", "max_seqlen_k" }
                                                          or { "batch", "heads_q", "seq_q", "seq_k" } }
  end
  return l
end

-- The spec words of the keys that are on, for the specs of a sequence.
function M.words(spec)
  return (spec.dropout and " dropout=true" or "") .. (spec.dropout_mask and " dropout_mask=true" or "")
end

-- Per-launch values (emit once, before the loops): the key schedule's first words, the counter's
-- offset words, the drop threshold and 1 / (1 - p). p is clamped to [0, 1 - 2^-24] (p >= 1 is the
-- caller's error; the clamp keeps the threshold inside i32).
function M.setup(b, spec, p)
  if not spec.dropout then return nil end
  local d = { b = b, spec = spec, p = p }
  d.k0 = b:i32(p.dropout_seed)
  d.k1 = b:i32(p.dropout_seed >> 32)
  d.off_lo = b:i32(p.dropout_offset)
  d.off_hi = b:i32(p.dropout_offset >> 32)
  local rate = b:min(b:max(p.dropout_p, 0.0), 1.0 - 2.0 ^ -24)
  d.thr = b:i32(rate * 2147483648.0) -- exact: p * 2^31 < 2^31, truncated (floor for p >= 0)
  d.rp = 1.0 / (1.0 - rate)
  return d
end

-- hi and lo 32 bits of the 64-bit product of constant m and x (mul.wide.u32).
local function mulhilo(b, m, x)
  local prod = (b:i64(x) & 0xffffffff) * m
  return b:i32(prod >> 32), b:i32(prod)
end

-- Philox 4x32-10 of counter c (4 i32 values) under the setup's key: 4 i32 words.
function M.philox(d, c)
  local b = d.b
  local x0, x1, x2, x3 = c[1], c[2], c[3], c[4]
  for r = 0, ROUNDS - 1 do
    local k0 = r == 0 and d.k0 or d.k0 + s32(W0 * r)
    local k1 = r == 0 and d.k1 or d.k1 + s32(W1 * r)
    local hi0, lo0 = mulhilo(b, M0, x0)
    local hi1, lo1 = mulhilo(b, M1, x2)
    x0, x1, x2, x3 = hi1 ~ x1 ~ k0, lo1, hi0 ~ x3 ~ k1, lo0
  end
  return { x0, x1, x2, x3 }
end

-- The counter of the call that holds (query q, key k) of (batch bi, query head h).
local function counter(d, bi, h, q, k)
  local bh = bi * d.p.heads_q + h
  return { k >> 1, ((q >> 4) << 3) | (q & 7), bh + d.off_hi, d.off_lo }
end

-- Whether word w survives the rate.
local function kept(d, w) return d.b:ge(w >> 1, d.thr) end

-- Keep predicate of one entry (query q, key k of batch bi, query head h): one call, its word selected.
function M.keep(d, bi, h, q, k)
  local b = d.b
  local w = M.philox(d, counter(d, bi, h, q, k))
  local hiq, odd = b:ne((q >> 3) & 1, 0), b:ne(k & 1, 0)
  local lo = b:select(odd, w[2], w[1])
  local hi = b:select(odd, w[4], w[3])
  return kept(d, b:select(hiq, hi, lo))
end

-- Keep predicates of the 4 entries of a C fragment: rows q, q + 8 (q's bit 3 clear) x keys k, k + 1
-- (k even): {(q, k), (q, k + 1), (q + 8, k), (q + 8, k + 1)}, in the fragment's element order.
function M.keep4(d, bi, h, q, k)
  local w = M.philox(d, counter(d, bi, h, q, k))
  return { kept(d, w[1]), kept(d, w[2]), kept(d, w[3]), kept(d, w[4]) }
end

-- The factor Z of an entry: 1 / (1 - p) kept, 0 dropped.
function M.factor(d, keep) return d.b:select(keep, d.rp, 0.0) end

-- The keep predicate of one entry, its mask bit stored (dropout_mask=true).
function M.keep_at(d, bi, h, q, k)
  local keep = M.keep(d, bi, h, q, k)
  M.store_mask(d, bi, h, q, k, { keep })
  return keep
end

-- Z of a C fragment's 4 entries (rows q, q + 8 x keys k, k + 1; M.keep4's order), mask bits stored (not where
-- `unstored`: the caller stores them apart, M.store_mask4).
function M.factors4(d, bi, h, q, k, unstored)
  local keeps = M.keep4(d, bi, h, q, k)
  if not unstored then M.store_mask4(d, bi, h, q, k, keeps) end
  local z = {}
  for e = 1, 4 do z[e] = M.factor(d, keeps[e]) end
  return z
end

-- dropout_mask=true: the mask bits of a C fragment's 4 entries (rows q, q + 8 x keys k, k + 1; M.factors4's), their
-- keep predicates `keeps` (M.keep4's) or drawn again here.
function M.store_mask4(d, bi, h, q, k, keeps)
  if not d.spec.dropout_mask then return end
  keeps = keeps or M.keep4(d, bi, h, q, k)
  M.store_mask(d, bi, h, q, k, { keeps[1], keeps[2] })
  M.store_mask(d, bi, h, q + 8, k, { keeps[3], keeps[4] })
end

-- dropout_mask=true: stores keep predicates of (query q, keys k .. k + n - 1) of (bi, h) when q < seq_q
-- (keys at or past seq_k are not stored). varlen: [batch, heads_q, max_seqlen_q, max_seqlen_k], q and
-- k within sequence bi (seq_q, seq_k its lengths), so nothing past a sequence's lengths is written.
function M.store_mask(d, bi, h, q, k, keeps)
  if not d.spec.dropout_mask then return end
  local b, p = d.b, d.p
  local rows, cols = p.seq_q, p.seq_k
  if d.spec.varlen then rows, cols = p.max_seqlen_q, p.max_seqlen_k end
  local row = ((b:i64(bi) * b:i64(p.heads_q) + b:i64(h)) * b:i64(rows) + b:i64(q)) * b:i64(cols)
  b:if_(b:lt(q, p.seq_q), function()
    for i, kp in ipairs(keeps) do
      local key = k + (i - 1)
      b:if_(b:lt(key, p.seq_k), function()
        b:store(p.dropout_mask + (row + b:i64(key)), b:select(kp, 1, 0))
      end)
    end
  end)
end

-- SIMT forward: probability pv of (query q, key k) of (bi, h) with the dropped entry zeroed (and its mask bit stored).
function M.simt(d, bi, h, q, k, pv)
  local keep = M.keep(d, bi, h, q, k)
  M.store_mask(d, bi, h, q, k, { keep })
  return d.b:select(keep, pv, 0.0)
end

-- Tensor-core C fragments of n-tiles 0..nt-1 (frag[j][1..4]: rows q, q + 8 x keys k + 8j, k + 8j + 1;
-- q's bit 3 clear, k even): the dropped entries zeroed in place (and the mask bits stored).
function M.fragments(d, bi, h, q, k, frag, nt)
  local b = d.b
  for j = 0, nt - 1 do
    local keeps = M.keep4(d, bi, h, q, k + 8 * j)
    for e = 1, 4 do frag[j][e] = b:select(keeps[e], frag[j][e], 0.0) end
    M.store_mask(d, bi, h, q, k + 8 * j, { keeps[1], keeps[2] })
    M.store_mask(d, bi, h, q + 8, k + 8 * j, { keeps[3], keeps[4] })
  end
end

return M
