-- templates/lib/attn_bwd_f16scaled_d128.lua - which dkdv kernels accumulate dV and dK in two passes over the query tiles.
--
-- The bf16 atomic dkdv at head_dim 128 on sm_75 (lib/attn_bwd_f16scaled.lua: f16 tensor cores, exact
-- power-of-two scaling) holds dK and dV of 16 keys x 128 columns (128 f32 accumulators a thread) beside the
-- staged tiles' addresses, the scaling's row factors and running exponents, and the dQ step: in one pass
-- ptxas (sm_75) spilled 24-28 bytes. In two passes (lib/attn_bwd_mma.lua build_dkdv, cfg.passes) each
-- pass keeps 64 accumulators: the first walks the key block's query tiles for S, P and dV += P^T dO, and
-- stores dV; the second walks them again for S, dP, dS, dK += dS^T Q and the dQ step, and stores dK.
-- The price: S = Q K^T (16 of the 128 m16n8k16-equivalents a query tile) and P's exponentials twice, and
-- Q and dO copied into shared memory twice (from prep's scaled rows). So that the mask keys' per-entry work does
-- not make the two passes alu-bound, build_dkdv gives them a copy of the per-entry body without the mask for the
-- tiles a warp's keys see whole, and folds the score's scale into K's row factor (docs/attention.md, wave 16).
local f16s = require("lib.attn_bwd_f16scaled")

local M = {}

-- The passes of the dkdv kernel for this spec (nil: one pass, dV and dK together). Each pass: the
-- accumulators it keeps (dv, dk); the dQ step goes with dS (the dk pass).
function M.passes(spec, target)
  if spec.kernel == "dkdv" and not spec.deterministic and spec.head_dim == 128 and f16s.applies(spec, target) then
    return { { dv = true }, { dk = true } }
  end
end

return M
