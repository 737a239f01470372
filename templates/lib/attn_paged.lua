-- templates/lib/attn_paged.lua - attention over a paged KV cache (paged=true): which cache row a key is, per sequence.
--
-- FlashAttention-2's flash_attn_with_kvcache layout: k_cache / v_cache are [num_blocks, page_size,
-- heads_kv, head_dim] pages (k/v with the strides stride_k{b,s,h}: page, row in the page, head);
-- block_table [batch, max_blocks] (int32, row stride max_blocks) lists each sequence's pages in order;
-- cache_seqlens [batch] (int32) its length. Optional (NULL: off): cache_batch_idx [batch] (int32)
-- picks the block-table row of each batch entry (FA2's cache_batch_idx), cache_leftpad [batch]
-- (int32) the cache position of its first key (FA2's cache_leftpad: keys leftpad .. seqlen - 1).
-- Key j of batch entry b is cache position pos = leftpad[b] + j, in page
-- block_table[bidx[b]][pos / page_size], row pos % page_size; the sequence has
-- seqlen_k = cache_seqlens[b] - leftpad[b] keys, and the causal diagonal, the window and ALiBi are
-- aligned to it as FA2 does. page_size is a launch value; a page of any size >= 16 that is a
-- multiple of the kernel's key tile (`key_tile`, a fixed scalar of the launch description) or
-- divides it is valid (FA2 wants multiples of 256); the kernel itself reads each key's page from
-- the table, so the rule is the launch's (docs/attention.md), not the kernel's correctness.
--
-- Hooks (templates/attention.lua): params() adds the parameters, setup() replaces p.seq_k by the
-- batch entry's key count before anything reads it, bases() turns the k/v bases into functions
-- of the key row (tile loads take a row function), launch() declares the tensors and scalars.
local M = {}

M.KEY = { name = "paged", type = "bool", default = false, hide_default = true,
          doc = "paged KV cache: k/v [num_blocks, page_size, heads_kv, d] pages through block_table, cache_seqlens (+ optional cache_batch_idx, cache_leftpad) at launch" }

-- The kernel parameters: seq_k goes (each sequence's length is cache_seqlens - leftpad); the cache's
-- tables and page geometry come in.
function M.params(spec, params)
  if not spec.paged then return params end
  for i, q in ipairs(params) do
    if q[1] == "seq_k" then table.remove(params, i) break end
  end
  params[#params + 1] = { "block_table", "ptr", "i32", readonly = true }
  params[#params + 1] = { "cache_seqlens", "ptr", "i32", readonly = true }
  params[#params + 1] = { "cache_batch_idx", "ptr", "i32", readonly = true }
  params[#params + 1] = { "cache_leftpad", "ptr", "i32", readonly = true }
  params[#params + 1] = { "page_size", "i32" }
  params[#params + 1] = { "max_blocks", "i32" }
  return params
end

-- Emitted first in the kernel: this batch entry's block-table row, leftpad and key count; p.seq_k
-- becomes the key count (every bound the kernel computes reads it).
function M.setup(b, spec, p)
  if not spec.paged then return end
  local bi = b:ctaid("z")
  local bidx = b:load(p.cache_batch_idx + b:i64(bi), { pred = b:not_(b:is_null(p.cache_batch_idx)) })
  bidx = b:select(b:is_null(p.cache_batch_idx), bi, bidx)
  local lp = b:load(p.cache_leftpad + b:i64(bi), { pred = b:not_(b:is_null(p.cache_leftpad)) })
  local len = b:load(p.cache_seqlens + b:i64(bi))
  p.seq_k = b:max(len - lp, 0)
  p.paged_row = p.block_table + b:i64(bidx) * b:i64(p.max_blocks)
  p.paged_lp = lp
end

-- k and v bases as functions of the key row j (its page through the block table) for kv head hkv.
function M.bases(b, spec, p, base, hkv)
  if not spec.paged then return end
  local h64 = b:i64(hkv)
  local function at(ptr, sb, ss, sh)
    local head = ptr + h64 * sh
    return function(j)
      local pos = j + p.paged_lp
      local page = b:load(p.paged_row + b:i64(pos // p.page_size))
      return head + b:i64(page) * sb + b:i64(pos % p.page_size) * ss
    end
  end
  base.k = at(p.k, p.stride_kb, p.stride_ks, p.stride_kh)
  base.v = at(p.v, p.stride_vb, p.stride_vs, p.stride_vh)
end

-- The launch description: k/v as pages, the tables, page_size and max_blocks at launch, key_tile
-- (the kernel's keys per tile, fixed) for the page-size rule.
function M.launch(spec, l, key_tile)
  if not spec.paged then return l end
  local d = spec.head_dim
  for _, t in ipairs(l.tensors) do
    if t[1] == "k" or t[1] == "v" then t[3] = { "num_blocks", "page_size", "heads_kv", d } end
  end
  for i, s in ipairs(l.scalars) do
    if s[1] == "seq_k" then table.remove(l.scalars, i) break end
  end
  local t = l.tensors
  t[#t + 1] = { "block_table", "in", { "batch", "max_blocks" } }
  t[#t + 1] = { "cache_seqlens", "in", { "batch" } }
  t[#t + 1] = { "cache_batch_idx", "in", { "batch" }, optional = true }
  t[#t + 1] = { "cache_leftpad", "in", { "batch" }, optional = true }
  local s = l.scalars
  s[#s + 1] = { "num_blocks" }
  s[#s + 1] = { "page_size" }
  s[#s + 1] = { "max_blocks" }
  s[#s + 1] = { "key_tile", key_tile, fixed = true }
  return l
end

return M
