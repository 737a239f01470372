-- templates/layernorm_bwd.lua - LayerNorm backward (torch semantics): dx, and dweight/dbias partial sums for norm_reduce.
--
-- Inputs dy, x (h when the forward had residual=true), mean and rstd as the forward saved them,
-- weight. xhat = (x - mean) rstd, g = dy w (dy (1 + w) with offset=1), dx = rstd (g - mean(g) - xhat mean(g xhat)) (+ dres,
-- the gradient reaching h through the residual stream, when residual=true). dweight = sum of
-- dy xhat and dbias = sum of dy over rows are accumulated per thread while the blocks walk the
-- rows grid-stride, then written as f32 partial rows to the workspace `ws` (slab 0 dweight,
-- slab 1 dbias; grid * rows_per_block rows of hidden floats per slab); the kernel named by
-- `then_spec` (norm_reduce) adds them in a fixed order: no atomics, identical bits run to run.
local norm = require("lib.norm")
local norm_bwd = require("lib.norm_bwd")

local K = {
  doc = "LayerNorm backward: dx (+ dres with residual=true); dweight/dbias partials in an f32 workspace, reduced by norm_reduce",
  params = {
    { name = "x", type = "dtype", default = "f32", doc = "dtype of the normalized input (h with residual)" },
    { name = "w", type = "dtype", default = "=x", doc = "weight, dweight and dbias dtype" },
    { name = "dy", type = "dtype", default = "=x", doc = "incoming gradient dtype" },
    { name = "dx", type = "dtype", default = "=x", doc = "input gradient dtype" },
    { name = "hidden", type = "size", default = "launch", max = 16384,
      doc = "row length fixed at generation time, or 'launch'" },
    { name = "weight", type = "bool", default = true, doc = "the forward multiplied by weight (dweight wanted)" },
    { name = "bias", type = "bool", default = true, doc = "the forward added bias (dbias wanted)" },
    { name = "offset", type = "int", default = 0, values = { 0, 1 }, hide_default = true,
      doc = "1: zero-centered weights, the norm multiplies by 1 + w (formed in f32; Gemma, Qwen3-Next)" },
    { name = "residual", type = "bool", default = false, hide_default = true,
      doc = "fused residual form: dx also adds dres, the gradient of h from the residual stream" },
    { name = "r", type = "dtype", default = "=x", hide_default = true, doc = "dtype of dres" },
    { name = "form", type = "enum", default = "auto", values = norm.BWD_FORMS, hide_default = true,
      doc = "kernel form (docs/norms.md): auto; fixed (row in registers); reg8/reg16/reg32 (row re-read, accumulators in registers, 8/16/32 elements per thread); smem8/smem16/smem32 (accumulators in shared memory); split2/split4 (the row's columns split between 2/4 blocks after a row-statistics kernel)" },
    { name = "kernel", type = "enum", default = "dx", values = norm.BWD_KERNELS, hide_default = true,
      doc = "dx (the backward, its launch runs the whole sequence) or stats (the split forms' row statistics, run before it)" },
  },
  check = norm.check,
}

function K.config(spec, target) return norm.backward_config(spec, target, false) end

function K.build(b, spec, cfg)
  local params = {
    { "dx", "ptr", spec.dx }, { "ws", "ptr", "f32" },
    { "dy", "ptr", spec.dy, readonly = true }, { "x", "ptr", spec.x, readonly = true },
    { "mean", "ptr", "f32", readonly = true }, { "rstd", "ptr", "f32", readonly = true },
    { "weight", "ptr", spec.w, readonly = true },
    { "rows", "i32" }, { "hidden", "i32" },
  }
  if spec.residual then params[#params + 1] = { "dres", "ptr", spec.r, readonly = true } end
  norm_bwd.backward(b, spec, cfg, b:kernel{ params = norm_bwd.params(spec, cfg, params) }, false)
end

function K.launch(spec, cfg) return norm.backward_launch(spec, cfg, false) end

-- the ptxas matrix (docs/registry.md): every dtype x hidden sizes, then the rows every norm family has
K.variants = norm.matrix_rows({
  { norm.MATRIX_DTYPES, norm.MATRIX_HIDDEN, quick = true },
  { norm.MATRIX_DTYPES, norm.MATRIX_HIDDEN_FULL, full = true },
})
-- every backward form (norm.BWD_FORMS) where it generates: bf16
K.variants[#K.variants + 1] = { "x=bf16", { "hidden=4096 form=fixed", "hidden=4096 form=reg8", "hidden=4096 form=reg16",
                                            "hidden=4096 form=smem8", "hidden=12288 form=reg32", "hidden=12288 form=reg16" } }
-- the two-block row's forms and kernels (lib/norm_split.lua)
require("lib.norm_split").matrix_rows(K.variants)
K.bundle = { dtypes = { "x", "w", "dy", "dx" }, shape = "hidden", shapes = { "launch" } }

return K
