-- templates/lib/attn_bwd_wgmma_keys.lua - the keys of the sm_90a backward's dkdv kernel (path=wgmma,
-- lib/attn_bwd_wgmma.lua) beyond the dense problem: dropout and varlen.
--
-- attn_bwd_wgmma.lua calls these hooks (where the query tiles start, the per-launch values, P^T's entries, the dS
-- of an entry, dV's A operand); with none of the keys on they give the dense kernel's values unchanged.
--
-- dropout=true (lib/attn_dropout.lua: the forward's and the FA2 backward's Philox 4x32-10 mask, bit for bit for the
-- same seed and offset): a consumer thread's S^T fragment holds, per 8 query columns jj, keys g and g + 8 of its
-- warp's 16 x queries 8 jj + 2q and + 1, transposed from the mma.sync C fragment attn_dropout's counter is laid out
-- for (queries Q, Q + 8 x keys K, K + 1). The block's query tiles start at a multiple of 16 (the rows before the
-- first one that sees a key are invisible: P = 0), so the columns of jj = 2 jp and 2 jp + 1 are Q and Q + 8 with
-- bit 3 of Q clear: one Philox call gives both of a key's words and the neighbouring key's (the thread with g ^ 1):
-- 8 calls a thread per 64-query tile, halves traded by one shuffle (the FA2 backward's per-entry form would take
-- 32); they are drawn into one i32 before the tile's Q and dO are waited for.
-- P^T is held with the drop in its sign (FlashAttention's encoding): P kept, -P dropped; dV's A operand is
-- max(P^T, 0) = (P o M)^T (M the keep mask) and the epilogue scales dV by 1 / (1 - p) (dV = (P o Z)^T dO,
-- Z = M / (1 - p)); dS = P o (dP o Z - D) is P^T (dP^T / (1 - p) - D) kept, P^T D dropped (-P D). With the softcap
-- dS takes P^T (1 - tanh^2) held the same way (attn_bwd_wgmma.lua: the derivative is positive, the sign still the
-- drop). The softmax statistics are the undropped P's (lse from the forward).
--
-- varlen=true (lib/attn_varlen.lua's launch and bind, as the FA2 backward's): one map per tensor over the packed
-- [total, heads, d] tensor, the box's row the sequence's first plus the tile's (M.coord, M.box); the next
-- sequence's keys a box brings are masked (M.key_live), its query rows have lse +inf (P = 0) and are not stored.
local dropout = require("lib.attn_dropout")
local regs = require("lib.attn_bwd_wgmma_regs")

local M = {}

-- The keys this module builds (attn_bwd_wgmma.lua's not_covered lets them through).
M.KEYS = { dropout = true, varlen = true }

-- varlen: the TMA coordinates (innermost first) of a box: column col, head h, row `row` of the sequence (which
-- = "q": a query row of q / dout, "k": a key row of k / v), batch entry bi. Dense: the [batch, seq, heads, d]
-- map's; varlen: the packed [total, heads, d] map's, the row the sequence's first plus `row`.
function M.coord(spec, p, col, h, row, bi, which)
  if not spec.varlen then return { col, h, row, bi } end
  return { col, h, (which == "q" and p.q_at or p.k_at) + row }
end

-- The box of the maps over q, k, v, dout (one per dim, outermost first, as the launch names them).
function M.box(spec)
  if spec.varlen then return { 64, 1, 64 } end
  return { 1, 64, 1, 64 }
end

-- varlen: whether key `key` (within the sequence) is one of its keys (nil: every key of a box is, TMA's zeros past
-- seq_k make them harmless). A box reaching past the sequence's end brings the next sequence's K and V rows: their
-- P must be 0, or dQ would take their dS K.
function M.key_live(b, spec, p, key)
  if not spec.varlen then return nil end
  return b:lt(key, p.seq_k)
end

-- The block's query rows [q_start, q_end) as its tiles walk them: unchanged, or with dropout q_start rounded down
-- to a multiple of 16 so that a tile's query columns pair into Philox calls (rows before q_start are invisible to
-- every key of the block: causal / window, the only keys that make q_start > 0), and q_end taken to that start
-- when no row sees the block (no tile then).
function M.tile_start(b, spec, q_start, q_end)
  if not spec.dropout then return q_start, q_end end
  local first = (q_start // 16) * 16
  return first, b:select(b:gt(q_end, q_start), q_end, first)
end

-- The per-launch values (nil without dropout), emitted once in the consumers' prologue.
function M.setup(b, spec, p) return dropout.setup(b, spec, p) end

-- The keep predicates of S^T's 32 elements i (key row (i >> 1) & 1, query column 8 (i >> 2) + 2q + (i & 1)) of a
-- tile whose first query row is a multiple of 16, as a function of i (nil without dropout). They are drawn at once
-- into one i32 (bit i: element i kept), so that the Philox calls can run before the tile's data is waited for,
-- with none of S^T, dP^T live. A call gives queries Q, Q + 8 x keys K, K + 1 (K even): the keys of this thread
-- and of the one with g ^ 1 (lane ^ 4, the same queries). So the pair splits the work: the thread with g even
-- draws the calls of query columns 0 .. 31 of the tile (elements 0 .. 15), the odd one 32 .. 63 (16 .. 31), each
-- call's words for both keys, and each hands the other its half by one shuffle: 8 calls a thread a tile (the FA2
-- backward's per-entry form would take 32). The mask bits are stored (dropout_mask=true). d: M.setup's values;
-- bi, h: the mask's batch entry (the sequence under varlen) and query head; col[c]: the query row of local column
-- c = 2 (i >> 2) + (i & 1); key[r]: the key of row r (key[1] = key[0] + 8: one parity).
function M.keeper(b, spec, d, bi, h, col, key)
  if not d then return nil end
  -- (the Philox key as warp-uniform copies made this tile: its round keys are computed where they are used, on the
  -- uniform datapath, not 18 values held through the loops: lib/attn_bwd_wgmma_regs.lua)
  d = setmetatable({ k0 = regs.uniform(b, d.k0), k1 = regs.uniform(b, d.k1) }, { __index = d })
  local odd = b:ne(key[0] & 1, 0)
  local up = b:select(odd, 32, 0)
  local mine, theirs = b:i32(0), b:i32(0)
  for i = 0, 15 do
    if i & 4 == 0 then
      local r, e = (i >> 1) & 1, i & 1
      local qlo = col[2 * (i >> 2) + e] + up -- (query Q of the call: bit 3 clear)
      local w = dropout.philox(d, { key[r] >> 1, ((qlo >> 4) << 3) | (qlo & 7), bi * d.p.heads_q + h + d.off_hi, d.off_lo })
      local k = {}
      for x = 1, 4 do k[x] = b:ge(w[x] >> 1, d.thr) end -- (Q, K), (Q, K + 1), (Q + 8, K), (Q + 8, K + 1)
      local kev = key[r] - b:select(odd, 1, 0)
      dropout.store_mask(d, bi, h, qlo, kev, { k[1], k[2] })
      dropout.store_mask(d, bi, h, qlo + 8, kev, { k[3], k[4] })
      mine = mine | b:select(b:select(odd, k[2], k[1]), 1 << i, 0) | b:select(b:select(odd, k[4], k[3]), 1 << (i + 4), 0)
      theirs = theirs | b:select(b:select(odd, k[1], k[2]), 1 << i, 0) | b:select(b:select(odd, k[3], k[4]), 1 << (i + 4), 0)
    end
  end
  -- (each half at bits 0 .. 15 for the even thread's query columns, 16 .. 31 for the odd one's)
  local bits = b:select(odd, mine << 16, mine) | b:shfl("bfly", b:select(odd, theirs << 16, theirs), 4)
  return function(i) return b:ne((bits >> i) & 1, 0) end
end

-- dropout: P^T's element as held (pv the probability, keep its predicate): P kept, -P dropped.
function M.held(b, keep, pv) return b:select(keep, pv, -pv) end

-- dropout: dS of an element from its held P^T value (softcap: times tanh's derivative, the sign still the drop), dP^T
-- and delta.
function M.ds(b, d, held, dp, delta)
  return b:select(b:ge(held, 0.0), held * (dp * d.rp - delta), held * delta)
end

-- dV's A operand: the held P^T (P[0 ..]) as it is, or with dropout max(held, 0) = (P o M)^T.
function M.dv_operand(b, d, P)
  if not d then return P end
  local a = {}
  for i = 0, #P do a[i] = b:max(P[i], 0.0) end
  return a
end

-- dV's f32 value x as stored: x, or with dropout x / (1 - p) (dV = (P o M)^T dO / (1 - p)).
function M.dv_out(d, x)
  if not d then return x end
  return x * d.rp
end

return M
