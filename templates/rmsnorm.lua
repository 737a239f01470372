-- templates/rmsnorm.lua - RMSNorm forward, optionally fused with a residual add.
--
-- y = x * rstd * weight with rstd = 1 / sqrt(mean(x^2) + eps) written as f32 (NULL: not
-- written). x, weight and y each f32, f16 or bf16; math in f32. residual=true: h = x +
-- residual is rounded to r, written to h and normalized. offset=1: y = x * rstd * (1 + weight),
-- 1 + w formed in f32 (zero-centered weights). Geometry and row access as the LayerNorm forward
-- (lib/norm_fwd.lua); one reduction per row (sum of squares with max |x|; a row whose sum of
-- squares overflows f32 is summed again scaled by a power of two).
local norm = require("lib.norm")
local norm_fwd = require("lib.norm_fwd")

local K = {
  doc = "RMSNorm forward: y = x * rstd * w, rstd = 1/sqrt(mean(x^2) + eps) saved as f32; residual=true adds h = x + residual first",
  params = {
    { name = "x", type = "dtype", default = "f32", doc = "input dtype" },
    { name = "w", type = "dtype", default = "=x", doc = "weight dtype" },
    { name = "y", type = "dtype", default = "=x", doc = "output dtype" },
    { name = "hidden", type = "size", default = "launch", max = 16384,
      doc = "row length fixed at generation time, or 'launch'" },
    { name = "weight", type = "bool", default = true, doc = "multiply by weight" },
    { name = "offset", type = "int", default = 0, values = { 0, 1 }, hide_default = true,
      doc = "1: zero-centered weights, the norm multiplies by 1 + w (formed in f32; Gemma, Qwen3-Next)" },
    { name = "residual", type = "bool", default = false, hide_default = true,
      doc = "fused residual add: h = x + residual is written and normalized" },
    { name = "r", type = "dtype", default = "=x", hide_default = true, doc = "dtype of residual and h" },
  },
  check = norm.check,
}

function K.config(spec, target)
  local dts = { spec.x, spec.y, spec.w }
  if spec.residual then dts[#dts + 1] = spec.r end
  local cfg = norm.config(spec, target, spec.x, dts, norm.MAX_ELEMS_FWD)
  -- kiln's IR pipeline (docs/jit.md), as the LayerNorm forward: every ptxas-matrix variant no worse
  -- than default<O3> (72 variants: -152 SASS instructions in all); launch-time row loops rotated
  cfg.pipeline = "kiln"
  if spec.hidden == "launch" then cfg.rotate_loops = true end
  cfg.lsr = false -- as the LayerNorm forward: 110 matrix variants, -4 % SASS, none worse
  cfg.slsr = false -- as the LayerNorm forward: the same PTX without it, every matrix variant and SM
  cfg.skip_codegen = { "early-cse-1", "consthoist", "peephole-opt", "machine-scheduler", -- as the LayerNorm forward
                       "early-tailduplication", "early-machinelicm",
                       "dead-mi-elimination", "stack-coloring", "stack-slot-coloring", "opt-phis" }
  return cfg
end

function K.build(b, spec, cfg)
  local params = {
    { "y", "ptr", spec.y }, { "rstd", "ptr", "f32" },
    { "x", "ptr", spec.x, readonly = true }, { "weight", "ptr", spec.w, readonly = true },
    { "rows", "i32" }, { "hidden", "i32" }, { "eps", "f32" },
  }
  if spec.residual then
    params[#params + 1] = { "h", "ptr", spec.r }
    params[#params + 1] = { "residual", "ptr", spec.r, readonly = true }
  end
  norm_fwd.forward(b, spec, cfg, b:kernel{ params = params }, true)
end

function K.launch(spec, cfg) return norm.forward_launch(spec, cfg, true) end

-- the ptxas matrix (docs/registry.md): every dtype x hidden sizes, then the rows every norm family has
K.variants = norm.matrix_rows({
  { norm.MATRIX_DTYPES, norm.MATRIX_HIDDEN, quick = true },
  { norm.MATRIX_DTYPES, norm.MATRIX_HIDDEN_FULL, full = true },
})
K.bundle = { dtypes = { "x", "w", "y" }, shape = "hidden", shapes = { "launch" } }

return K
