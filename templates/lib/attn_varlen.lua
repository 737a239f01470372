-- templates/lib/attn_varlen.lua - varlen=true: one attention launch over packed sequences of different
-- lengths (FlashAttention-2's flash_attn_varlen_func), for the forward and the backward kernels.
--
-- Layout (FA2's): q, o, dout, dq [total_q, heads_q, head_dim] and k, v, dk, dv [total_k, heads_kv,
-- head_dim], sequence b in rows cu_seqlens_q[b] .. cu_seqlens_q[b + 1] - 1 (k: cu_seqlens_k), int32
-- [batch + 1]; the token and head strides at launch (no batch stride). Optional seqused_k (int32
-- [batch], 0 = unused; forward only): sequence b attends to its first seqused_k[b] keys. lse (and the
-- backward's delta) [heads_q, total_q] f32, dq_acc [heads_q, total_q, head_dim] f32.
-- The grid is sized from the longest sequence (max_seqlen_q; dkdv: max_seqlen_k) and ctaid.z is the
-- sequence: a block reads its sequence's bounds first and leaves at once when its tile starts past
-- the sequence's end (every thread of the block alike, before any barrier). Then seq_q / seq_k are
-- that sequence's lengths and the tensors' base pointers its first row, so causal (both alignments),
-- window, softcap and alibi apply per sequence without a change to the kernels' bodies (bind()).
local M = {}

M.KEY = { name = "varlen", type = "bool", default = false, hide_default = true,
          doc = "packed variable-length sequences: q/k/v [total, heads, head_dim] with cu_seqlens_q/k (int32, batch+1) and max_seqlen_q/k at launch (FlashAttention-2's varlen)" }

-- Tensors whose rows are query rows, and key rows: lists, walked in this order, so the IR (and the
-- PTX) is the same in every process (pairs() over a table follows Lua's per-process string hashes).
local Q_ROWS = { "q", "o", "dout", "dq" }
local K_ROWS = { "k", "v", "dk", "dv" }

-- The varlen form of a kernel's parameter list: without seq_q, seq_k and the batch strides, with
-- cu_seqlens_q (and, when `keys`, cu_seqlens_k), seqused_k (`used`) and total_q (the lse/delta rows).
function M.params(spec, params, keys, used)
  if not spec.varlen then return params end
  local out = {}
  for _, prm in ipairs(params) do
    local n = prm[1]
    if n ~= "seq_q" and n ~= "seq_k" and not n:match("^stride_%a+b$") then out[#out + 1] = prm end
  end
  out[#out + 1] = { "cu_seqlens_q", "ptr", "i32", readonly = true }
  if keys then out[#out + 1] = { "cu_seqlens_k", "ptr", "i32", readonly = true } end
  if used then out[#out + 1] = { "seqused_k", "ptr", "i32", readonly = true } end
  out[#out + 1] = { "total_q", "i32" }
  return out
end

-- The kernel's parameters as the bodies read them (p itself without varlen). With varlen, at the
-- kernel's start: sequence ctaid.z's bounds; the block leaves when its first row (rows = query rows,
-- or key rows with over_keys) of `tile` is past the sequence's end; seq_q, seq_k become the
-- sequence's lengths, each tensor's pointer its sequence's first row, the batch strides 0, and
-- rows(h) (the lse/delta index of head h's row 0) h * total_q + the sequence's first query row.
function M.bind(b, spec, p, tile, over_keys)
  if not spec.varlen then return p end
  local v = setmetatable({}, { __index = p })
  local bi = b:ctaid("z")
  local q_at = b:load(p.cu_seqlens_q + bi)
  v.seq_q = b:load(p.cu_seqlens_q + (bi + 1)) - q_at
  local k_at
  if p.cu_seqlens_k then
    k_at = b:load(p.cu_seqlens_k + bi)
    local len = b:load(p.cu_seqlens_k + (bi + 1)) - k_at
    if p.seqused_k then
      local n = b:var("i32", len)
      b:if_(b:not_(b:is_null(p.seqused_k)), function() n:set(b:load(p.seqused_k + bi)) end)
      len = n:get()
    end
    v.seq_k = len
  end
  b:exit_if(b:ge(b:ctaid("x") * tile, over_keys and v.seq_k or v.seq_q))
  for _, name in ipairs(Q_ROWS) do
    if p[name] then v[name] = p[name] + b:i64(q_at) * p["stride_" .. name .. "s"] end
  end
  for _, name in ipairs(K_ROWS) do
    if p[name] then v[name] = p[name] + b:i64(k_at) * p["stride_" .. name .. "s"] end
  end
  for _, name in ipairs(Q_ROWS) do v["stride_" .. name .. "b"] = 0 end
  for _, name in ipairs(K_ROWS) do v["stride_" .. name .. "b"] = 0 end
  v.rows = function(h) return b:i64(h) * b:i64(p.total_q) + b:i64(q_at) end
  v.q_at, v.k_at = q_at, k_at -- (the sequence's first rows: TMA coordinates, lib/attn_wgmma_keys.lua)
  -- (the same from a first query row `at` read again where a kernel keeps q_at out of its registers: the rows' index
  -- of head h, and tensor `name`'s pointer to head h's row 0; lib/attn_bwd_mma.lua build_dkdv, cfg.qrow_shared)
  v.rows_at = function(h, at) return b:i64(h) * b:i64(p.total_q) + b:i64(at) end
  v.head_at = function(name, h, at)
    return p[name] + b:i64(at) * p["stride_" .. name .. "s"] + b:i64(h) * p["stride_" .. name .. "h"]
  end
  return v
end

-- The varlen launch description (docs/registry.md) from the dense one: tensors [batch, seq, heads, d]
-- become [total, heads, d] with their token and head strides, [batch, heads_q, seq_q] rows become
-- [heads_q, total_q] (and dq_acc [heads_q, total_q, d]); the problem's seq_q / seq_k become
-- max_seqlen_q / max_seqlen_k; cu_seqlens_q (cu_seqlens_k with `keys`, seqused_k with `used`) and
-- the scalars total_q, total_k, max_seqlen_q, max_seqlen_k join.
function M.launch(spec, l, d, keys, used)
  if not spec.varlen then return l end
  local function dims(t)
    local x = t[3]
    if #x == 4 and x[1] == "batch" and (x[2] == "seq_q" or x[2] == "seq_k") then
      t[3] = { x[2] == "seq_q" and "total_q" or "total_k", x[3], x[4] }
    elseif #x == 3 and x[1] == "batch" then
      t[3] = { "heads_q", "total_q" }
    elseif #x == 1 and type(x[1]) == "string" and x[1]:match("^batch%*heads_q%*seq_q%*") then
      t[3] = { string.format("heads_q*total_q*%d", d) }
    end
  end
  for _, t in ipairs(l.tensors) do dims(t) end
  local strides = {}
  for _, s in ipairs(l.strides or {}) do
    if not s[1]:match("b$") then strides[#strides + 1] = { s[1], s[2], s[3] - 1 } end
  end
  l.strides = strides
  local scalars = {}
  for _, s in ipairs(l.scalars) do
    if s[1] ~= "seq_q" and s[1] ~= "seq_k" then scalars[#scalars + 1] = s end
  end
  scalars[#scalars + 1] = { "total_q" }
  scalars[#scalars + 1] = { "max_seqlen_q" }
  l.tensors[#l.tensors + 1] = { "cu_seqlens_q", "in", { "batch+1" } }
  if keys then
    scalars[#scalars + 1] = { "total_k" }
    scalars[#scalars + 1] = { "max_seqlen_k" }
    l.tensors[#l.tensors + 1] = { "cu_seqlens_k", "in", { "batch+1" } }
  end
  if used then l.tensors[#l.tensors + 1] = { "seqused_k", "in", { "batch" }, optional = true } end
  l.scalars = scalars
  local problem = {}
  for i, x in ipairs(l.problem) do
    problem[i] = x == "seq_q" and "max_seqlen_q" or x == "seq_k" and "max_seqlen_k" or x
  end
  l.problem = problem
  return l
end

-- " varlen=true" when on (the specs of a sequence).
function M.words(spec) return spec.varlen and " varlen=true" or "" end

return M
