-- templates/norm_reduce.lua - second kernel of the norm backwards: sums f32 partial rows into dweight/dbias.
--
-- ws holds `slabs` slabs of parts x cols f32 (row-major); block (bx, s) sums columns
-- bx*32 .. bx*32+31 of slab s over the parts in a fixed order: warp k takes parts k, k+8, ...
-- (four independent partial sums per thread, combined in order), then warp 0 adds the eight
-- warps' sums in warp order and rounds once. Slab 0 goes to dweight (to dbias when dweight is
-- NULL), slab 1 to dbias. Grid: {ceil(cols / 32), slabs}. Deterministic: no atomics.
local K = {
  doc = "column sums of f32 partial rows (the norm backwards' dweight/dbias), fixed order",
  params = {
    { name = "w", type = "dtype", default = "f32", doc = "dweight/dbias dtype" },
  },
}

local WARPS, UNROLL = 8, 4

function K.config(spec, target)
  return { block = 32 * WARPS, grid_tile = { 32, 1, 1 }, align = 4 }
end

function K.build(b, spec, cfg)
  local p = b:kernel{ params = {
    { "dweight", "ptr", spec.w }, { "dbias", "ptr", spec.w },
    { "ws", "ptr", "f32", readonly = true }, { "parts", "i32" }, { "cols", "i32" },
  } }
  local tid = b:tid()
  local lane, warp = tid % 32, tid // 32
  local col = b:ctaid() * 32 + lane
  local slab = b:ctaid("y")
  local valid = b:lt(col, p.cols)
  local cols64 = b:i64(p.cols)
  local base = p.ws + (b:i64(slab) * b:i64(p.parts)) * cols64 + b:i64(b:select(valid, col, 0))
  local acc = {}
  for u = 1, UNROLL do acc[u] = b:var("f32", 0.0) end
  b:for_(warp, p.parts, WARPS * UNROLL, function(k)
    for u = 1, UNROLL do
      local part = k + (u - 1) * WARPS
      local v = b:load(base + b:i64(part) * cols64, { pred = b:and_(valid, b:lt(part, p.parts)) })
      acc[u]:set(acc[u]:get() + v)
    end
  end)
  local sum = (acc[1]:get() + acc[2]:get()) + (acc[3]:get() + acc[4]:get())
  local scratch = b:shared("f32", 32 * WARPS)
  b:store(scratch + tid, sum)
  b:barrier()
  b:if_(b:and_(b:eq(warp, 0), valid), function()
    local total = b:load(scratch + lane)
    for k = 1, WARPS - 1 do total = total + b:load(scratch + (k * 32 + lane)) end
    local to_w = b:and_(b:eq(slab, 0), b:not_(b:is_null(p.dweight)))
    local out = b:select(to_w, p.dweight, p.dbias)
    b:store(out + col, b:from_f32(total, spec.w))
  end)
end

-- launch (docs/registry.md): as the norm backwards' second kernel, their launch binds parts, cols and slabs
function K.launch(spec, cfg)
  return {
    tensors = { { "dweight", "out", { "cols" }, optional = true }, { "dbias", "out", { "cols" }, optional = true },
                { "ws", "in", { "slabs*parts*cols" } } },
    scalars = { { "parts" }, { "cols" }, { "slabs", 1 } },
    problem = { "cols", "slabs" },
  }
end

K.variants = { { { "w=f32", "w=f16", "w=bf16" } } }
K.bundle = { dtypes = { "w" } }

return K
