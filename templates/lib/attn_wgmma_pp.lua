-- templates/lib/attn_wgmma_pp.lua - the consumer warpgroups' main loop of path=wgmma in FlashAttention-3's
-- schedule: ping-pong between the two consumer warpgroups and the intra-warpgroup overlap of the softmax
-- with the next tile's Q K^T.
--
-- Ping-pong (named barriers, b:bar_sync / b:bar_arrive): warpgroup c issues its wgmma only inside a
-- "section" that begins with bar_sync on its own barrier (id FIRST + c, 128 NC threads: its own 128 and
-- the other warpgroup's arrive) and ends, once the section's wgmma are issued, with bar_arrive on the other
-- warpgroup's barrier; warpgroup 1 arrives on warpgroup 0's barrier once before its first section, so the
-- sections alternate 0, 1, 0, 1, ... and one warpgroup's softmax runs while the other's wgmma issue and
-- execute. Both warpgroups have the same number of sections (ntiles + 1, the block's key tiles), so every
-- sync meets its arrive; warpgroup 1's last arrive is left without a partner, which the PTX ISA allows
-- (a barrier's phase may stay incomplete when the CTA ends).
--
-- Intra-warpgroup overlap (wgmma.commit_group / wait_group 1): tile 0's S = Q K^T is waited for and
-- softmaxed in the prologue; then iteration j (1..ntiles-1) issues S_j = Q K_j^T and O += P_{j-1} V_{j-1}
-- as two groups, waits for the first (wait_group 1) and runs the softmax of S_j while P V is in flight,
-- then waits for O (wait_group 0), releases stage j-1 and rescales O by tile j's alpha; the last P V is
-- issued after the loop. A stage (K and V of one tile) is released once its P V has completed.
local M = {}

local FIRST = 1 -- named barrier ids FIRST .. FIRST + NC - 1 (0 stays b:barrier()'s)

-- Runs the consumer loop. c: the warpgroup's state and helpers from attn_wgmma.lua's consumer: wg, nc, ns
-- (stages), na (P's A registers: block_n / 4), ntiles, f0, f1 (tiles every row of the warpgroup sees whole: [f0, f1)), full, empty (mbarrier
-- arrays), ov (O's variables), softmax(S, k, masked) -> P, alpha; pack(P) -> A registers; qk(s) -> S in
-- flight; pv(O, a, s) -> O in flight; rescaled(alpha) -> O * alpha.
function M.consumer_loop(b, c)
  local n = c.nc * 128
  local mine = c.wg + FIRST
  local other = b:i32(FIRST) + (c.wg + 1) % c.nc
  local function section(issue)
    b:bar_sync(mine, n)
    local r = { issue() }
    b:bar_arrive(other, n)
    return table.unpack(r)
  end
  b:if_(b:eq(c.wg, 1), function() b:bar_arrive(FIRST, n) end)
  local pa = {}
  for i = 1, c.na do pa[i] = b:var("i32", 0) end
  b:if_(b:gt(c.ntiles, 0), function()
    -- prologue: tile 0's S and softmax (masked: the loop split starts at tile 1)
    b:mbarrier_wait(c.full, 0)
    local S = section(function()
      b:wgmma_fence()
      local S = c.qk(0)
      b:wgmma_commit()
      return S
    end)
    S = b:wgmma_wait(0, S)
    local P = c.softmax(S, b:i32(0), true)
    local a = c.pack(P)
    for i = 1, c.na do pa[i]:set(a[i]) end
    local function step(k, masked)
      local s, sp = k % c.ns, (k - 1) % c.ns
      b:mbarrier_wait(c.full + 2 * s, (k // c.ns) % 2)
      local a = {}
      for i = 1, c.na do a[i] = pa[i]:get() end
      local S, O = section(function()
        b:wgmma_fence()
        local S = c.qk(s)
        b:wgmma_commit()
        local O = {}
        for i = 1, #c.ov do O[i] = c.ov[i]:get() end
        b:wgmma_fence() -- (each group after its own fence, as CUTLASS's gemm(): O's and P's registers set before it)
        O = c.pv(O, a, sp)
        b:wgmma_commit()
        return S, O
      end)
      S = b:wgmma_wait(1, S)
      local P, alpha = c.softmax(S, k, masked)
      O = b:wgmma_wait(0, O)
      b:mbarrier_arrive(c.empty + 2 * sp)
      for i = 1, #c.ov do c.ov[i]:set(O[i] * alpha[((i - 1) >> 1) & 1]) end
      -- P packed only now: packing while P_{j-1} V_{j-1} is in flight redefines its A registers (the loop's
      -- phi), and ptxas then serializes the wgmma (C7513)
      local ap = c.pack(P)
      for i = 1, c.na do pa[i]:set(ap[i]) end
    end
    local lo, mid = b:max(c.f0, 1), b:max(c.f1, 1)
    b:for_(1, lo, 1, function(k) step(k, true) end)
    b:for_(lo, b:max(mid, lo), 1, function(k) step(k, false) end)
    b:for_(b:max(mid, lo), c.ntiles, 1, function(k) step(k, true) end)
    -- the last tile's P V
    local last = c.ntiles - 1
    local s = last % c.ns
    local a = {}
    for i = 1, c.na do a[i] = pa[i]:get() end
    local O = section(function()
      b:wgmma_fence()
      local O = {}
      for i = 1, #c.ov do O[i] = c.ov[i]:get() end
      O = c.pv(O, a, s)
      b:wgmma_commit()
      return O
    end)
    O = b:wgmma_wait(0, O)
    for i = 1, #c.ov do c.ov[i]:set(O[i]) end
    b:mbarrier_arrive(c.empty + 2 * s)
  end)
end

return M
