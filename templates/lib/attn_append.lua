-- templates/lib/attn_append.lua - in-kernel KV-cache append (append=true, with paged=true): new keys written into the pages and attended to in the same launch.
--
-- FlashAttention-2's flash_attn_with_kvcache(k=, v=): k_new / v_new [batch, seqlen_new, heads_kv,
-- head_dim] (strides stride_{kn,vn}{b,s,h}) go into the cache at positions cache_seqlens[b] ..
-- cache_seqlens[b] + seqlen_new - 1 (through the block table, across page boundaries), and entry b
-- attends to its cache_seqlens[b] - leftpad[b] cached keys followed by the seqlen_new new ones (the
-- causal diagonal aligned to that count, as FA2).
--
-- The race: several blocks read each kv head's keys (every query-row block of its group, every
-- split), so a block must not depend on another block's cache writes. As FA2 does, every block reads
-- the new keys from k_new / v_new themselves (key rows past the cached ones map there), and exactly
-- one block per (batch entry, kv head) writes them into the cache: the block of split 0 (ctaid.x = 0)
-- holding the group's first query rows. The cache rows it writes are never read from the cache in
-- the same launch (past the cached keys every row reads k_new; rows past the sequence read row 0),
-- so no ordering between blocks is needed and no preceding kernel either. A writer block that runs
-- twice (the emulator's --twice) writes the same bytes.
local M = {}

M.KEY = { name = "append", type = "bool", default = false, hide_default = true,
          doc = "in-kernel KV-cache append (needs paged=true): k_new/v_new [batch, seqlen_new, heads_kv, d] written at cache_seqlens and attended to" }

function M.check(spec)
  if spec.append and not spec.paged then
    return "append=true needs paged=true (the new keys are written into the paged cache)"
  end
end

-- k and v become writable; the new keys, their strides and count come in.
function M.params(spec, params)
  if not spec.append then return params end
  for _, q in ipairs(params) do
    if q[1] == "k" or q[1] == "v" then q.readonly = nil end
  end
  params[#params + 1] = { "k_new", "ptr", spec.dtype, readonly = true }
  params[#params + 1] = { "v_new", "ptr", spec.dtype, readonly = true }
  params[#params + 1] = { "seqlen_new", "i32" }
  for _, t in ipairs({ "kn", "vn" }) do
    for _, a in ipairs({ "b", "s", "h" }) do params[#params + 1] = { "stride_" .. t .. a, "i64" } end
  end
  return params
end

-- After paged.setup: the cached key count stays in p.cache_len, p.seq_k counts the new keys too.
function M.setup(b, spec, p)
  if not spec.append then return end
  p.cache_len = p.seq_k
  p.seq_k = p.seq_k + p.seqlen_new
end

-- Wraps the paged row functions: rows past the cached keys read k_new / v_new of kv head hkv.
function M.bases(b, spec, p, base, hkv)
  if not spec.append then return end
  local bi, h64 = b:i64(b:ctaid("z")), b:i64(hkv)
  local function wrap(cached, ptr, sb, ss, sh)
    local head = ptr + bi * sb + h64 * sh
    return function(j)
      local old = b:lt(j, p.cache_len)
      local c = cached(b:select(old, j, 0))
      local n = head + b:i64(b:select(old, 0, j - p.cache_len)) * ss
      return b:select(old, c, n)
    end
  end
  base.k = wrap(base.k, p.k_new, p.stride_knb, p.stride_kns, p.stride_knh)
  base.v = wrap(base.v, p.v_new, p.stride_vnb, p.stride_vns, p.stride_vnh)
end

-- The writer (first thing after setup): in the one block per (batch entry, kv head) described
-- above, copies the new rows into the cache, 16 bytes an item, thread-strided.
-- rows_per_block: the split-KV block's packed rows (which block holds the group's first rows).
-- rot: lib/attn_rotary.lua's key hook (nil without rotary): the new keys go into the cache rotated.
function M.write(b, spec, cfg, p, rot)
  if not spec.append then return end
  local group = p.heads_q // p.heads_kv
  local hkv, first
  if spec.splitkv then
    local mblocks = (group * p.seq_q + (cfg.rows_per_block - 1)) // cfg.rows_per_block
    hkv = b:ctaid("y") // mblocks
    first = b:eq(b:ctaid("y") - hkv * mblocks, 0)
  else
    hkv = b:ctaid("y") // group
    first = b:eq(b:ctaid("y") - hkv * group, 0)
  end
  local writer = b:and_(b:eq(b:ctaid("x"), 0), first)
  local vec = 16 // ({ f32 = 4, f16 = 2, bf16 = 2 })[spec.dtype]
  local cpr = (spec.dim or spec.head_dim) // vec
  local bi, h64 = b:i64(b:ctaid("z")), b:i64(hkv)
  b:if_(writer, function()
    b:for_(b:tid(), p.seqlen_new * cpr, cfg.block, function(item)
      local r, c = item // cpr, (item % cpr) * vec
      local pos = p.paged_lp + p.cache_len + r
      local page = b:i64(b:load(p.paged_row + b:i64(pos // p.page_size)))
      local row = b:i64(pos % p.page_size)
      local function copy(dst, sb, ss, sh, src, nb, ns, nh, rk)
        local from = src + bi * nb + b:i64(r) * ns + h64 * nh + c
        local vals = b:load_vec(from, vec, { align = 16 })
        if rk then vals = rk.apply(vals, from, c, p.cache_len + r) end
        b:store_vec(dst + page * sb + row * ss + h64 * sh + c, vals, { align = 16 })
      end
      copy(p.k, p.stride_kb, p.stride_ks, p.stride_kh, p.k_new, p.stride_knb, p.stride_kns, p.stride_knh, rot)
      copy(p.v, p.stride_vb, p.stride_vs, p.stride_vh, p.v_new, p.stride_vnb, p.stride_vns, p.stride_vnh)
    end)
  end)
end

-- The launch description: k and v inout, the new keys (16-byte aligned: tiles copy them with
-- cp.async), their strides and seqlen_new.
function M.launch(spec, l, align)
  if not spec.append then return l end
  local d = spec.head_dim
  for _, t in ipairs(l.tensors) do
    if t[1] == "k" or t[1] == "v" then t[2] = "inout" end
  end
  l.tensors[#l.tensors + 1] = { "k_new", "in", { "batch", "seqlen_new", "heads_kv", d }, align = align }
  l.tensors[#l.tensors + 1] = { "v_new", "in", { "batch", "seqlen_new", "heads_kv", d }, align = align }
  for _, t in ipairs({ { "kn", "k_new" }, { "vn", "v_new" } }) do
    for i, a in ipairs({ "b", "s", "h" }) do l.strides[#l.strides + 1] = { "stride_" .. t[1] .. a, t[2], i - 1 } end
  end
  l.scalars[#l.scalars + 1] = { "seqlen_new" }
  return l
end

return M
