-- templates/layernorm.lua - LayerNorm forward (torch.nn.functional.layer_norm semantics), optionally fused with a residual add.
--
-- y = (x - mean) * rstd * weight + bias over each row of `hidden` elements, with biased
-- variance and eps inside the square root; mean and rstd are written as f32 (either
-- pointer may be NULL). x, weight/bias and y each f32, f16 or bf16; math in f32.
-- residual=true: h = x + residual is rounded to r, written to h and normalized (pre-norm block).
-- offset=1: zero-centered weights, y = (x - mean) * rstd * (1 + weight) + bias, 1 + w formed in f32.
--
-- Fixed hidden: the row lives in registers, loaded as 16-byte vectors (narrower when
-- hidden is not a multiple of 16 bytes' worth); statistics over the registers (lib/norm_fwd.lua:
-- mean, corrected mean, scaled centered variance); the affine step is one fma, rounded once.
-- hidden=launch: the kernel loops over the row, re-reading x from global memory.
local norm = require("lib.norm")
local norm_fwd = require("lib.norm_fwd")
local util = require("lib.util")

local K = {
  doc = "LayerNorm forward: y = (x - mean) * rstd * w + b, mean/rstd saved as f32; residual=true adds h = x + residual first",
  params = {
    { name = "x", type = "dtype", default = "f32", doc = "input dtype" },
    { name = "w", type = "dtype", default = "=x", doc = "weight and bias dtype" },
    { name = "y", type = "dtype", default = "=x", doc = "output dtype" },
    { name = "hidden", type = "size", default = "launch", max = 16384,
      doc = "row length fixed at generation time, or 'launch'" },
    { name = "weight", type = "bool", default = true, doc = "multiply by weight" },
    { name = "bias", type = "bool", default = true, doc = "add bias" },
    { name = "offset", type = "int", default = 0, values = { 0, 1 }, hide_default = true,
      doc = "1: zero-centered weights, the norm multiplies by 1 + w (formed in f32; Gemma, Qwen3-Next)" },
    { name = "residual", type = "bool", default = false, hide_default = true,
      doc = "fused residual add: h = x + residual is written and normalized" },
    { name = "r", type = "dtype", default = "=x", hide_default = true, doc = "dtype of residual and h" },
  },
  check = norm.check,
}

-- hidden=16384 variants that keep default<O3> (K.config)
local O3_AT_16384 = {
  { x = "bf16", w = "f16" }, { x = "f32", w = "bf16" }, { x = "bf16", w = "bf16", offset = 1, residual = true },
}

function K.config(spec, target)
  local dts = { spec.x, spec.y, spec.w }
  if spec.residual then dts[#dts + 1] = spec.r end
  local cfg = norm.config(spec, target, spec.x, dts, norm.MAX_ELEMS_FWD)
  -- kiln's IR pipeline (docs/jit.md), checked variant by variant against default<O3> by the ptxas
  -- matrix; where it gave more SASS instructions the variant keeps default<O3> (measured: a one-element
  -- row, 232 vs 224 with f32 x; at 16384: bf16 x with f16 weights, 776 vs 768; f32 x with bf16
  -- weights on sm_75, 992 vs 984; bf16 x, offset=1, f32 residual on sm_75, 1120 vs 1112)
  local o3 = spec.hidden == 1
  for _, k in ipairs(O3_AT_16384) do
    if spec.hidden == 16384 and spec.x == k.x and spec.w == k.w and (k.offset == nil or spec.offset == k.offset)
       and (k.residual == nil or spec.residual == k.residual) then o3 = true end
  end
  if not o3 then cfg.pipeline = "kiln" end
  -- the load pass as an IR loop (lib/norm_fwd.lua load_row_rolled): rows of 4096 and more without a residual,
  -- with f32 x or f32 weights but not f32 weights and y together, where ptxas gives the same SASS instruction
  -- count and no fewer blocks per SM on every SM (wave 21, docs/jit.md: the 260 such matrix variants, sm_75..121,
  -- 26 specs); bf16 x, f32 w, bf16 y h4096 sm_80 generates in 8.0 % fewer instructions (callgrind, 60.1 -> 55.3 M).
  -- Elsewhere it cost +8 SASS on some SM: x, weights and y all 2-byte on sm_75, f32 weights and y on sm_120/121,
  -- bf16 x, f16 weights, f32 y at 16384 on sm_110, residual rows (the h store in the loop) and rows of 768
  -- (register caps) on most SMs; rolling the other three passes as well cost +8 to +56 SASS on 94 % of the 1160
  -- unmasked fixed-hidden variants
  if spec.hidden ~= "launch" and spec.hidden >= 4096 and not spec.residual and (spec.x == "f32" or spec.w == "f32")
     and not (spec.w == "f32" and spec.y == "f32") and cfg.chunks % cfg.threads_per_row == 0 and cfg.iters > 1 then
    cfg.roll_load = true
  end
  -- the launch-time form's strided row loops: rotated, ptxas needs fewer registers
  if spec.hidden == "launch" then cfg.rotate_loops = true end
  -- without NVPTX's loop strength reduction no matrix variant has more SASS instructions or fewer
  -- blocks per SM (1568 variants: -2.2 % SASS, 62 gain a block) and launch-time rows generate 14 % faster
  cfg.lsr = false
  -- NVPTX's straight-line strength reduction changes no byte of the PTX of any matrix variant (every
  -- SM) and is 4 % of the generation instructions (bf16 h4096 sm_80): left out (docs/jit.md)
  cfg.slsr = false
  -- and these NVPTX codegen passes, the same: no PTX byte changes on any matrix variant of any SM
  -- without them (layernorm and rmsnorm, 330 a SM), 3.8 % of the generation instructions; the last
  -- four (dead machine instructions, the two stack-slot passes, PHI optimization) 0.7 % more (docs/jit.md)
  cfg.skip_codegen = { "early-cse-1", "consthoist", "peephole-opt", "machine-scheduler",
                       "early-tailduplication", "early-machinelicm",
                       "dead-mi-elimination", "stack-coloring", "stack-slot-coloring", "opt-phis" }
  return cfg
end

function K.build(b, spec, cfg)
  local params = {
    { "y", "ptr", spec.y }, { "mean", "ptr", "f32" }, { "rstd", "ptr", "f32" },
    { "x", "ptr", spec.x, readonly = true }, { "weight", "ptr", spec.w, readonly = true },
    { "bias", "ptr", spec.w, readonly = true },
    { "rows", "i32" }, { "hidden", "i32" }, { "eps", "f32" },
  }
  if spec.residual then
    params[#params + 1] = { "h", "ptr", spec.r }
    params[#params + 1] = { "residual", "ptr", spec.r, readonly = true }
  end
  norm_fwd.forward(b, spec, cfg, b:kernel{ params = params }, false)
end

function K.launch(spec, cfg) return norm.forward_launch(spec, cfg, false) end

-- the ptxas matrix (docs/registry.md): every x/w/y combination x hidden sizes, weight/bias off on
-- the common dtype pairs, then the rows every norm family has
local DT = { "f32", "f16", "bf16" }
K.variants = norm.matrix_rows({
  { util.axis("x", DT), util.axis("w", DT), util.axis("y", DT),
    util.axis("hidden", { 1, 7, 33, 100, 768, 1000, 4096, 16384, "launch" }) },
  { { "x=bf16 w=f32 y=bf16", "x=f16", "x=f32" }, util.axis("hidden", { 7, 768, "launch" }),
    { "weight=false", "bias=false", "weight=false bias=false" } },
})
K.bundle = { dtypes = { "x", "w", "y" }, shape = "hidden", shapes = { "launch" } }
-- Runnable examples (`kiln list`, the CLI's usage texts): the spec's keys, the SM, then `kiln run`'s options
K.examples = { "x=bf16 w=f32 y=bf16 hidden=4096 --sm 75 --rows 64" }

return K
