/* tests/hopper_test.c - the Hopper builder primitives (gen/gen_hopper.c) on the emulator (emu/emu_hopper.c)
 * against an integer reference, their misuse faults, their target checks, and ptxas on their sm_90a PTX. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "kiln/emu.h"
#include "kiln/emu_profile.h"
#include "kiln/gen.h"
#include "kiln/tensor_map.h"
#include "ptxas_util.h"

#define SM90A (KILN_SM_ARCH + 90)

/* A producer warpgroup fills a two-stage ring in shared memory and a consumer warpgroup reads it,
 * gated by full/empty mbarriers as FlashAttention-3's K/V pipeline is: the producer's thread 0
 * announces the stage's bytes with expect-tx, every producer thread completes 4 of them (what TMA
 * does) and arrives; consumers wait on the phase parity of each use, then release the stage.
 * y[t] = sum over it of x[it*128 + t] * (it + 1). Planted-bug knobs: extra_tx (bytes announced that
 * never complete), short_tx (bytes completed that were never announced), parity_skew (consumers wait on the wrong phase), no_empty (the producer does not
 * wait for the consumers), arrivals (the full barriers' init count). sync=1 adds setmaxnreg,
 * fence.proxy.async and wgmma fence/commit/wait (sm_90a only). */
static const char *pipe_lua =
    "local K = { params = {\n"
    "  { name = 'iters', type = 'int', default = 6, min = 1, max = 64 },\n"
    "  { name = 'extra_tx', type = 'int', default = 0, min = 0, max = 64 },\n"
    "  { name = 'short_tx', type = 'int', default = 0, min = 0, max = 64 },\n"
    "  { name = 'parity_skew', type = 'int', default = 0, min = 0, max = 1 },\n"
    "  { name = 'no_empty', type = 'int', default = 0, min = 0, max = 1 },\n"
    "  { name = 'arrivals', type = 'int', default = 128, min = 1, max = 256 },\n"
    "  { name = 'sync', type = 'int', default = 0, min = 0, max = 1 } } }\n"
    "function K.config(spec, t) return { block = 256, grid_tile = 1, arch_specific = t.arch } end\n"
    "function K.build(b, spec, cfg)\n"
    "  local p = b:kernel{ params = { { 'y', 'ptr', 'f32' }, { 'x', 'ptr', 'f32', readonly = true } } }\n"
    "  local wg, t = b:warpgroup(), b:warpgroup_thread()\n"
    "  local data = b:shared('f32', 2 * 128)\n"
    "  local full, empty = b:shared('f32', 4, 8), b:shared('f32', 4, 8)\n"
    "  b:if_(b:eq(b:tid(), 0), function()\n"
    "    for s = 0, 1 do b:mbarrier_init(full + 2 * s, spec.arrivals); b:mbarrier_init(empty + 2 * s, 128) end\n"
    "  end)\n"
    "  b:barrier()\n"
    "  b:if_(b:eq(wg, 1), function()\n"
    "    if spec.sync == 1 then b:setmaxnreg('dec', 40) end\n"
    "    b:for_(0, spec.iters, 1, function(it)\n"
    "      local s, k = it % 2, it // 2\n"
    "      if spec.no_empty == 0 then\n"
    "        b:if_(b:ge(it, 2), function() b:mbarrier_wait(empty + 2 * s, (k + 1) % 2) end)\n"
    "      end\n"
    "      b:if_(b:eq(t, 0), function() b:mbarrier_expect_tx(full + 2 * s, 512 + spec.extra_tx - spec.short_tx) end)\n"
    "      b:store(data + (s * 128 + t), b:load(p.x + (it * 128 + t)))\n"
    "      if spec.sync == 1 then b:fence_proxy_async() end\n"
    "      b:mbarrier_complete_tx(full + 2 * s, 4)\n"
    "      b:mbarrier_arrive(full + 2 * s)\n"
    "    end)\n"
    "  end)\n"
    "  b:if_(b:eq(wg, 0), function()\n"
    "    if spec.sync == 1 then b:setmaxnreg('inc', 232) end\n"
    "    local acc = b:var('f32', 0.0)\n"
    "    b:for_(0, spec.iters, 1, function(it)\n"
    "      local s, k = it % 2, it // 2\n"
    "      b:mbarrier_wait(full + 2 * s, (k + spec.parity_skew) % 2)\n"
    "      if spec.sync == 1 then b:wgmma_fence(); b:wgmma_commit(); b:wgmma_wait(0) end\n"
    "      acc:set(acc:get() + b:load(data + (s * 128 + t)) * b:f32(it + 1))\n"
    "      b:mbarrier_arrive(empty + 2 * s)\n"
    "    end)\n"
    "    b:store(p.y + t, acc:get())\n"
    "  end)\n"
    "end\nreturn K\n";

/* One warpgroup multiplies a 64 x 16ks A by a 16ks x n B with a chain of ks wgmma.mma_async
 * (m64nNk16), A from shared memory (swa: its swizzle in bytes, 0 none) or from registers (rs=1), B from
 * shared memory (swb), and stores D (64 x n, row-major) from the D fragment. Inputs: a row-major 64 x 16ks,
 * bt row-major n x 16ks (B transposed: K-major). Each thread copies elements into the ISA's layouts
 * itself (no swizzle: core matrices of 8 rows x 16 bytes, LBO 128, SBO 256 ks; W-byte swizzle: rows of
 * W bytes, k-steps side by side in a row, SBO 8W, the 16-byte chunk XOR the row bits 7..). Planted
 * bugs: 1 B's descriptor says half the swizzle it was written with, 2 D read without the wait, 3 a wait
 * that does not cover the group, 4 an accumulator changed in flight, 5 no wgmma.fence, 6 no commit,
 * 7 B's swizzled descriptor 128 bytes off its pattern, 8 B's stride reaching past shared memory. */
static const char *wgmma_lua =
    "local K = { params = {\n"
    "  { name = 'n', type = 'int', default = 64, min = 8, max = 256 },\n"
    "  { name = 'bf', type = 'int', default = 1, min = 0, max = 1 },\n"
    "  { name = 'rs', type = 'int', default = 0, min = 0, max = 1 },\n"
    "  { name = 'swa', type = 'int', default = 0, min = 0, max = 128 },\n"
    "  { name = 'swb', type = 'int', default = 0, min = 0, max = 128 },\n"
    "  { name = 'ks', type = 'int', default = 1, min = 1, max = 4 },\n"
    "  { name = 'tb', type = 'int', default = 0, min = 0, max = 1 },\n"
    "  { name = 'bug', type = 'int', default = 0, min = 0, max = 10 } } }\n"
    "function K.config(spec, t) return { block = 128, grid_tile = 1, arch_specific = t.arch } end\n"
    "local MASK = { [32] = 1, [64] = 3, [128] = 7 }\n"
    "-- N-major B (tb = 1): B stored [k][n]. No swizzle: core matrices of 8 k x 8 n, 8-k groups LBO = 128\n"
    "-- apart, 8-n groups SBO = 256 ks apart; W-byte swizzle: k-rows of W bytes (W/2 n), 8-k groups SBO = 8W\n"
    "-- apart, W/2-n groups LBO = 16 ks W apart (the whole K).\n"
    "local function offset_n(r, kg, W, ks)\n"
    "  if W == 0 then return (r // 8) * (256 * ks) + (kg // 8) * 128 + (kg % 8) * 16 + (r % 8) * 2 end\n"
    "  local lin = (r // (W // 2)) * (16 * ks * W) + (kg // 8) * (8 * W) + (kg % 8) * W + (r % (W // 2)) * 2\n"
    "  return lin ~ (((lin >> 7) & MASK[W]) << 4)\n"
    "end\n"
    "local function desc_n(b, base, s, W, ks, bug)\n"
    "  if W == 0 then\n"
    "    if bug == 10 then return b:wgmma_desc(base + (s * 256) // 2, { lbo = 256 * ks, sbo = 128 }) end\n"
    "    return b:wgmma_desc(base + (s * 256) // 2, { lbo = 128, sbo = 256 * ks })\n"
    "  end\n"
    "  if bug == 10 then return b:wgmma_desc(base + (s * 16 * W) // 2, { swizzle = W, lbo = 8 * W, sbo = 16 * ks * W }) end\n"
    "  return b:wgmma_desc(base + (s * 16 * W) // 2, { swizzle = W, lbo = 16 * ks * W, sbo = 8 * W })\n"
    "end\n"
    "-- byte offset of element (r, kg) (kg: 0..16ks-1) of a rows x 16ks K-major matrix in layout W\n"
    "local function offset(r, kg, W, rows, ks)\n"
    "  if W == 0 then return (r // 8) * (256 * ks) + (kg // 8) * 128 + (r % 8) * 16 + (kg % 8) * 2 end\n"
    "  local per = W // 32\n"
    "  local s, k = kg // 16, kg % 16\n"
    "  local lin = (s // per) * (rows * W) + (r // 8) * (8 * W) + (r % 8) * W + (k + (s % per) * 16) * 2\n"
    "  return lin ~ (((lin >> 7) & MASK[W]) << 4)\n"
    "end\n"
    "local function size(W, rows, ks)\n"
    "  if W == 0 then return rows * 32 * ks end\n"
    "  local per = W // 32\n"
    "  return ((ks + per - 1) // per) * rows * W\n"
    "end\n"
    "local function desc(b, base, s, W, rows, ks, claim)\n"
    "  if W == 0 then return b:wgmma_desc(base + (s * 256) // 2, { lbo = 128, sbo = 256 * ks }) end\n"
    "  local per = W // 32\n"
    "  local C = claim or W\n"
    "  return b:wgmma_desc(base + ((s // per) * rows * W + (s % per) * 32) // 2, { swizzle = C, lbo = 16, sbo = 8 * C })\n"
    "end\n"
    "function K.build(b, spec, cfg)\n"
    "  local T = spec.bf == 1 and 'bf16' or 'f16'\n"
    "  local N, KS = spec.n, spec.ks\n"
    "  local p = b:kernel{ params = { { 'y', 'ptr', 'f32' }, { 'a', 'ptr', T, readonly = true },\n"
    "                                 { 'bt', 'ptr', T, readonly = true } } }\n"
    "  local t = b:tid()\n"
    "  local sa = b:shared(T, size(spec.swa, 64, KS) // 2, 1024)\n"
    "  local sb = b:shared(T, (spec.tb == 1 and N * 32 * KS or size(spec.swb, N, KS)) // 2, 1024)\n"
    "  local function fill(dst, src, rows, W, nmajor)\n"
    "    for j = 0, rows * 16 * KS // 128 - 1 do\n"
    "      local e = t + 128 * j\n"
    "      local r, kg = e // (16 * KS), e % (16 * KS)\n"
    "      local off = nmajor and offset_n(r, kg, W, KS) or offset(r, kg, W, rows, KS)\n"
    "      b:store(dst + off // 2, b:load(src + e))\n"
    "    end\n"
    "  end\n"
    "  if spec.rs == 0 then fill(sa, p.a, 64, spec.swa) end\n"
    "  fill(sb, p.bt, N, spec.swb, spec.tb == 1)\n"
    "  b:barrier()\n"
    "  b:fence_proxy_async()\n"
    "  local w, g, q = t // 32, (t % 32) // 4, t % 4\n"
    "  if spec.bug ~= 5 then b:wgmma_fence() end\n"
    "  local acc\n"
    "  for s = 0, KS - 1 do\n"
    "    local a\n"
    "    if spec.rs == 1 then\n"
    "      a = {}\n"
    "      for j = 0, 3 do\n"
    "        local row, col = w * 16 + g + 8 * (j % 2), q * 2 + 8 * (j // 2) + 16 * s\n"
    "        local lo, hi = b:load(p.a + (row * (16 * KS) + col)), b:load(p.a + (row * (16 * KS) + col + 1))\n"
    "        a[j + 1] = b:pack(b:to_f32(lo), b:to_f32(hi), T)\n"
    "      end\n"
    "    else\n"
    "      a = desc(b, sa, s, spec.swa, 64, KS)\n"
    "    end\n"
    "    local claim = spec.bug == 1 and spec.swb // 2 or nil\n"
    "    local bd = desc(b, sb, s, spec.swb, N, KS, claim)\n"
    "    if spec.bug == 7 then bd = b:wgmma_desc(sb + 64, { swizzle = spec.swb, lbo = 16, sbo = 8 * spec.swb }) end\n"
    "    if spec.bug == 8 then bd = b:wgmma_desc(sb, { swizzle = spec.swb, lbo = 16, sbo = 16384 }) end\n"
    "    if spec.tb == 1 then bd = desc_n(b, sb, s, spec.swb, KS, spec.bug) end\n"
    "    acc = b:wgmma{ n = N, type = T, a = a, b = bd, acc = acc, trans_b = spec.tb == 1 and spec.bug ~= 9 }\n"
    "  end\n"
    "  if spec.bug ~= 6 then b:wgmma_commit() end\n"
    "  if spec.bug == 4 then acc[2] = acc[2] + b:f32(1) end\n"
    "  if spec.bug ~= 2 then acc = b:wgmma_wait(spec.bug == 3 and 1 or 0, acc) end\n"
    "  for i = 0, N // 2 - 1 do\n"
    "    local row, col = w * 16 + g + 8 * ((i >> 1) & 1), 8 * (i >> 2) + q * 2 + (i & 1)\n"
    "    b:store(p.y + (row * N + col), acc[i + 1])\n"
    "  end\n"
    "end\nreturn K\n";

/* A producer thread (thread 128) streams iters boxes of a 2-D or 3-D f32 tensor through a two-stage
 * ring with TMA (b:tma_load, the map a 'tensormap' parameter), announcing each box's bytes with
 * arrive.expect_tx on the stage's full barrier; the consumer warpgroup waits on it, copies the box
 * (un-swizzling it) to y[it], and releases the stage. Box it is at x = (it % 3) b0, y = (it / 3) 8
 * (3-D: z = it % 2 too), so the right and lower edges fall outside the tensor (zero fill). Planted
 * bugs: 1 the expect-tx announces 16 bytes too few (a wrong box), 2 no expect-tx (a plain arrival),
 * 3 a destination 16 bytes off its alignment, 4 one more box issued after the last that nobody waits for. */
static const char *tma_lua =
    "local K = { params = {\n"
    "  { name = 'iters', type = 'int', default = 6, min = 1, max = 12 },\n"
    "  { name = 'rank', type = 'int', default = 2, min = 2, max = 3 },\n"
    "  { name = 'b0', type = 'int', default = 32, min = 4, max = 64 },\n"
    "  { name = 'swz', type = 'int', default = 0, min = 0, max = 128 },\n"
    "  { name = 'bug', type = 'int', default = 0, min = 0, max = 4 } } }\n"
    "function K.config(spec, t) return { block = 256, grid_tile = 1, arch_specific = t.arch } end\n"
    "local MASK = { [32] = 1, [64] = 3, [128] = 7 }\n"
    "function K.build(b, spec, cfg)\n"
    "  local p = b:kernel{ params = { { 'y', 'ptr', 'f32' }, { 'tm', 'tensormap' } } }\n"
    "  local B0, NB = spec.b0, spec.b0 * 8\n"
    "  local BYTES = NB * 4\n"
    "  local STAGE = ((BYTES + 1023) // 1024) * 1024\n"
    "  local data = b:shared('f32', 2 * STAGE // 4 + 16, 1024)\n"
    "  local full, empty = b:shared('f32', 4, 8), b:shared('f32', 4, 8)\n"
    "  local t = b:tid()\n"
    "  b:if_(b:eq(t, 0), function()\n"
    "    for s = 0, 1 do b:mbarrier_init(full + 2 * s, 1); b:mbarrier_init(empty + 2 * s, 128) end\n"
    "  end)\n"
    "  b:barrier()\n"
    "  b:if_(b:eq(t, 128), function()\n"
    "    b:for_(0, spec.iters, 1, function(it)\n"
    "      local s, k = it % 2, it // 2\n"
    "      b:if_(b:ge(it, 2), function() b:mbarrier_wait(empty + 2 * s, (k + 1) % 2) end)\n"
    "      if spec.bug == 2 then b:mbarrier_arrive(full + 2 * s)\n"
    "      else b:mbarrier_arrive(full + 2 * s, { tx = b:i32(BYTES - (spec.bug == 1 and 16 or 0)) }) end\n"
    "      local c = { (it % 3) * B0, (it // 3) * 8 }\n"
    "      if spec.rank == 3 then c = { (it % 3) * B0, (it // 3) * 4, it % 2 } end\n"
    "      b:tma_load(data + s * (STAGE // 4) + (spec.bug == 3 and 4 or 0), p.tm, c, full + 2 * s)\n"
    "    end)\n"
    "    if spec.bug == 4 then\n"
    "      local s, k = spec.iters % 2, spec.iters // 2\n"
    "      b:mbarrier_wait(empty + 2 * s, (k + 1) % 2)\n"
    "      b:mbarrier_arrive(full + 2 * s, { tx = b:i32(BYTES) })\n"
    "      b:tma_load(data + s * (STAGE // 4), p.tm, { 0, 0 }, full + 2 * s)\n"
    "    end\n"
    "  end)\n"
    "  b:if_(b:lt(t, 128), function()\n"
    "    b:for_(0, spec.iters, 1, function(it)\n"
    "      local s, k = it % 2, it // 2\n"
    "      b:mbarrier_wait(full + 2 * s, k % 2)\n"
    "      for j = 0, (NB + 127) // 128 - 1 do\n"
    "        local e = t + 128 * j\n"
    "        b:if_(b:lt(e, NB), function()\n"
    "          local off = e * 4\n"
    "          if spec.swz > 0 then off = off ~ (((off >> 7) & MASK[spec.swz]) << 4) end\n"
    "          b:store(p.y + (it * NB + e), b:load(data + s * (STAGE // 4) + off // 4))\n"
    "        end)\n"
    "      end\n"
    "      b:mbarrier_arrive(empty + 2 * s)\n"
    "    end)\n"
    "  end)\n"
    "end\nreturn K\n";

/* FA3's dQ writer in miniature: 128 threads stage boxes of x (f32) in shared memory, two buffers, and thread 0
 * adds each into the tensor of map tm with b:tma_reduce_add (one bulk group per box), waiting
 * (b:bulk_wait(1, {read = true})) before a buffer is written again. Box it sits at column (it % 3) b0 - 8 and
 * row (it // 3 % 3) 8 of a W x H tensor: the first column of boxes starts left of the tensor, the last column
 * and row straddle its right and lower edges, and from it = 9 on boxes add onto elements earlier boxes added
 * to. Planted bugs: 1 no wait before a buffer is reused, 2 no final wait, 3 the groups never committed, 4 the
 * tile written again right after its issue, 5 no barrier between the tile's writes and the issue. */
static const char *red_lua =
    "local K = { params = {\n"
    "  { name = 'iters', type = 'int', default = 12, min = 1, max = 12 },\n"
    "  { name = 'b0', type = 'int', default = 32, min = 4, max = 64 },\n"
    "  { name = 'swz', type = 'int', default = 0, min = 0, max = 128 },\n"
    "  { name = 'bug', type = 'int', default = 0, min = 0, max = 5 } } }\n"
    "function K.config(spec, t) return { block = 128, grid_tile = 1, arch_specific = t.arch } end\n"
    "local MASK = { [32] = 1, [64] = 3, [128] = 7 }\n"
    "function K.build(b, spec, cfg)\n"
    "  local p = b:kernel{ params = { { 'x', 'ptr', 'f32' }, { 'tm', 'tensormap' } } }\n"
    "  local B0, NB = spec.b0, spec.b0 * 8\n"
    "  local STAGE = ((NB * 4 + 1023) // 1024) * 1024\n"
    "  local data = b:shared('f32', 2 * STAGE // 4, 1024)\n"
    "  local t = b:tid()\n"
    "  local lead = b:eq(t, 0)\n"
    "  for it = 0, spec.iters - 1 do\n"
    "    local buf = data + (it % 2) * (STAGE // 4)\n"
    "    if it >= 2 and spec.bug ~= 1 then b:if_(lead, function() b:bulk_wait(1, { read = true }) end) end\n"
    "    b:barrier()\n"
    "    for j = 0, (NB + 127) // 128 - 1 do\n"
    "      local e = t + 128 * j\n"
    "      b:if_(b:lt(e, NB), function()\n"
    "        local off = e * 4\n"
    "        if spec.swz > 0 then off = off ~ (((off >> 7) & MASK[spec.swz]) << 4) end\n"
    "        b:store(buf + off // 4, b:load(p.x + (it * NB + e)))\n"
    "      end)\n"
    "    end\n"
    "    b:fence_proxy_async()\n"
    "    if spec.bug ~= 5 then b:barrier() end\n"
    "    b:if_(lead, function()\n"
    "      b:tma_reduce_add(buf, p.tm, { (it % 3) * B0 - 8, (it // 3 % 3) * 8 })\n"
    "      if spec.bug ~= 3 then b:bulk_commit() end\n"
    "    end)\n"
    "    if spec.bug == 4 then b:if_(b:eq(t, 1), function() b:store(buf, b:f32(7)) end) end\n"
    "  end\n"
    "  if spec.bug ~= 2 then b:if_(lead, function() b:bulk_wait(0) end) end\n"
    "end\nreturn K\n";

/* Misuse the builder must refuse (each a one-line template body). */
static const char *misuse_lua =
    "local K = { params = { { name = 'case', type = 'int', default = 0, min = 0, max = 16 } } }\n"
    "function K.config(spec, t) return { block = 128, grid_tile = 1, arch_specific = t.arch } end\n"
    "function K.build(b, spec, cfg)\n"
    "  local p = b:kernel{ params = { { 'y', 'ptr', 'f32' }, { 'tm', 'tensormap' } } }\n"
    "  local bar = b:shared('f32', 2, 8)\n"
    "  if spec.case == 0 then b:setmaxnreg('inc', 232)\n"
    "  elseif spec.case == 1 then b:setmaxnreg('up', 232)\n"
    "  elseif spec.case == 2 then b:setmaxnreg('dec', 20)\n"
    "  elseif spec.case == 3 then b:mbarrier_init(p.y, 1)\n"
    "  elseif spec.case == 4 then b:wgmma_wait(9)\n"
    "  elseif spec.case == 6 then b:wgmma_desc(bar, { swizzle = 128, sbo = 1024 })\n"
    "  elseif spec.case == 7 then b:wgmma{ n = 60, type = 'bf16', a = b:i64(0), b = b:i64(0) }\n"
    "  elseif spec.case == 8 then b:wgmma_desc(bar, { swizzle = 16 })\n"
    "  elseif spec.case == 9 then b:wgmma_desc(bar, { lbo = 24 })\n"
    "  elseif spec.case == 10 then b:wgmma{ n = 64, type = 'f32', a = b:i64(0), b = b:i64(0) }\n"
    "  elseif spec.case == 12 then b:tma_load(bar, p.y, { 0, 0 }, bar)\n"
    "  elseif spec.case == 13 then b:tma_load(bar, p.tm, { 0, 0 }, bar)\n"
    "  elseif spec.case == 14 then b:tma_reduce_add(bar, p.y, { 0, 0 })\n"
    "  elseif spec.case == 15 then b:tma_reduce_add(bar, p.tm, { 0, 0 })\n"
    "  elseif spec.case == 16 then b:bulk_wait(64, { read = true })\n"
    "  elseif spec.case == 11 then b:wgmma{ n = 64, type = 'f16', a = b:i32(0), b = b:i64(0) }\n"
    "  else b:mbarrier_init(bar, 1); b:mbarrier_arrive(bar, { tx = 16 }) end\n"
    "  b:store(p.y, b:f32(0))\n"
    "end\nreturn K\n";

static char dir[] = "/tmp/kiln-hopper-test-XXXXXX";
static kiln_gen *gen;
static kiln_emu *emu;

static void write_template(const char *name, const char *text) {
    char path[256];
    snprintf(path, sizeof path, "%s/%s.lua", dir, name);
    FILE *f = fopen(path, "w");
    if (f) fputs(text, f), fclose(f);
}

enum { NMAX = 64 * 128 };

/* Runs hoppipe with the given spec keys on sm; returns the status and fills y, err. */
static kiln_status run_pipe(const char *keys, int sm, int twice, float *y, kiln_error *err) {
    char spec[256];
    snprintf(spec, sizeof spec, "hoppipe %s", keys);
    kiln_emu_kernel *k = NULL;
    kiln_status st = kiln_emu_load(emu, gen, spec, sm, &k, err);
    if (st != KILN_OK) return st;
    static float x[NMAX];
    for (int i = 0; i < NMAX; i++) x[i] = (float)((i * 7919) % 97 - 48);
    for (int i = 0; i < 128; i++) y[i] = -1.0f;
    void *py = y, *px = x, *args[] = {&py, &px};
    kiln_emu_launch l = {.grid = {1, 1, 1}, .block = {256, 1, 1}, .twice = twice};
    return kiln_emu_run(k, &l, args, err);
}

static long pipe_errors(const float *y, int iters) {
    long bad = 0;
    for (int t = 0; t < 128; t++) {
        long want = 0;
        for (int it = 0; it < iters; it++) want += (long)((((it * 128 + t) * 7919) % 97) - 48) * (it + 1);
        if (y[t] != (float)want) bad++;
    }
    return bad;
}

static void test_pipeline(void) {
    static const struct {
        const char *keys;
        int iters, sm;
    } rows[] = {{"iters=1", 1, 90}, {"iters=2", 2, 90}, {"iters=7", 7, 90}, {"iters=64", 64, 90},
                {"iters=6 sync=1", 6, SM90A}, {"iters=9", 9, SM90A}};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        char name[160], sm[16];
        snprintf(name, sizeof name, "mbarrier ring, %s on %s: the integer reference, run twice", rows[i].keys,
                 kiln_sm_name(rows[i].sm, sm));
        TEST_BEGIN(name);
        float y[128];
        kiln_error err = {0};
        kiln_status st = run_pipe(rows[i].keys, rows[i].sm, 1, y, &err);
        CHECK(st == KILN_OK, "%s", err.msg);
        if (st == KILN_OK) CHECK(pipe_errors(y, rows[i].iters) == 0, "%ld wrong outputs", pipe_errors(y, rows[i].iters));
        TEST_END();
    }
}

/* Each broken pipeline must fail: a deadlock naming the wait, a fault, or a race/wrong answer. */
static void test_pipeline_bugs(void) {
    static const struct {
        const char *keys, *want;
    } rows[] = {
        {"iters=4 extra_tx=8", "deadlock"},        /* bytes that never arrive keep the phase open */
        {"iters=4 short_tx=8", "8 bytes more were completed than expect-tx announced"}, /* can never complete */
        {"iters=4 parity_skew=1", ""},             /* waits on the wrong phase: stale or unwritten data */
        {"iters=6 no_empty=1", ""},                /* overwrites a stage still being read */
        {"iters=4 arrivals=127", "more arrivals"}, /* more arrivals than the init count */
        {"iters=4 arrivals=129", "deadlock"},      /* fewer: the phase never completes */
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        char name[160];
        snprintf(name, sizeof name, "planted bug '%s' is caught%s%s", rows[i].keys, rows[i].want[0] ? ": " : "",
                 rows[i].want);
        TEST_BEGIN(name);
        float y[128];
        kiln_error err = {0};
        kiln_status st = run_pipe(rows[i].keys, 90, 1, y, &err);
        int iters = atoi(strstr(rows[i].keys, "iters=") + 6);
        CHECK(st != KILN_OK || pipe_errors(y, iters) > 0, "ran clean with right answers");
        if (rows[i].want[0]) CHECK(st != KILN_OK && strstr(err.msg, rows[i].want), "message: %s", err.msg);
        if (!strcmp(rows[i].want, "deadlock"))
            CHECK(strstr(err.msg, "mbarrier.try_wait") || strstr(err.msg, "mbar"), "names the wait: %s", err.msg);
        TEST_END();
    }
}

/* f16/bf16 bits of f, which must be exactly representable (few significant bits, normal range). */
static uint16_t half_bits(float f, int bf) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if (bf || f == 0.0f) return (uint16_t)(bf ? u >> 16 : (u >> 16 & 0x8000));
    uint32_t e = (u >> 23 & 0xff) - 127 + 15;
    return (uint16_t)((u >> 31) << 15 | e << 10 | (u & 0x7fffff) >> 13);
}

enum { WG_KMAX = 64, WG_NMAX = 256 };

/* Runs hopwgmma with keys; y gets D (64 x n); *bad counts elements that differ from the exact
 * reference (inputs are multiples of 1/4 in -1..1: every product and sum is exact in f32). */
static kiln_status run_wgmma(const char *keys, int n, int ks, int bf, int twice, float *y, long *bad, kiln_error *err) {
    char spec[256];
    snprintf(spec, sizeof spec, "hopwgmma %s", keys);
    kiln_emu_kernel *k = NULL;
    kiln_status st = kiln_emu_load(emu, gen, spec, SM90A, &k, err);
    if (st != KILN_OK) return st;
    int K = 16 * ks;
    static uint16_t a[64 * WG_KMAX], bt[WG_NMAX * WG_KMAX];
    static float af[64 * WG_KMAX], bf_[WG_NMAX * WG_KMAX];
    for (int i = 0; i < 64 * K; i++) af[i] = (float)((i * 37 + i / K * 5) % 9 - 4) * 0.25f, a[i] = half_bits(af[i], bf);
    for (int i = 0; i < n * K; i++) bf_[i] = (float)((i * 11 + i / K * 3) % 7 - 3) * 0.25f, bt[i] = half_bits(bf_[i], bf);
    for (int i = 0; i < 64 * n; i++) y[i] = -12345.0f;
    void *py = y, *pa = a, *pb = bt, *args[] = {&py, &pa, &pb};
    kiln_emu_launch l = {.grid = {1, 1, 1}, .block = {128, 1, 1}, .twice = twice};
    st = kiln_emu_run(k, &l, args, err);
    *bad = 0;
    for (int r = 0; r < 64; r++)
        for (int c = 0; c < n; c++) {
            float want = 0;
            for (int kk = 0; kk < K; kk++) want += af[r * K + kk] * bf_[c * K + kk];
            if (!(y[r * n + c] == want)) ++*bad;
        }
    return st;
}

static void test_wgmma(void) {
    static const struct {
        int n, bf, rs, swa, swb, ks, tb;
    } rows[] = {
        {64, 1, 0, 0, 0, 2, 0},    {64, 1, 0, 32, 32, 2, 0},  {64, 1, 0, 64, 64, 2, 0},  {64, 1, 0, 128, 128, 4, 0},
        {128, 0, 0, 128, 128, 4, 0}, {128, 0, 0, 0, 64, 3, 0}, {64, 1, 1, 0, 128, 2, 0},  {256, 0, 1, 0, 64, 1, 0},
        {256, 1, 0, 128, 128, 1, 0}, {8, 1, 0, 32, 32, 1, 0},   {24, 0, 0, 64, 0, 2, 0},   {128, 1, 1, 0, 32, 3, 0},
        /* N-major B (trans_b): every swizzle, A from shared memory and registers, N spanning several groups */
        {64, 1, 0, 128, 128, 2, 1}, {128, 0, 0, 128, 128, 4, 1}, {64, 1, 1, 0, 64, 2, 1}, {128, 1, 0, 64, 32, 3, 1},
        {24, 0, 0, 0, 0, 2, 1},     {256, 1, 1, 0, 128, 1, 1},  {16, 1, 0, 32, 32, 1, 1},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        char keys[160], name[320];
        snprintf(keys, sizeof keys, "n=%d bf=%d rs=%d swa=%d swb=%d ks=%d tb=%d", rows[i].n, rows[i].bf, rows[i].rs,
                 rows[i].swa, rows[i].swb, rows[i].ks, rows[i].tb);
        snprintf(name, sizeof name, "wgmma m64n%dk16 %s, A from %s, %s B, %s: the exact reference, run twice", rows[i].n,
                 rows[i].bf ? "bf16" : "f16", rows[i].rs ? "registers" : "shared memory", rows[i].tb ? "N-major" : "K-major", keys);
        TEST_BEGIN(name);
        static float y[64 * WG_NMAX];
        long bad = 0;
        kiln_error err = {0};
        kiln_status st = run_wgmma(keys, rows[i].n, rows[i].ks, rows[i].bf, 1, y, &bad, &err);
        CHECK(st == KILN_OK, "%s", err.msg);
        CHECK(st != KILN_OK || bad == 0, "%ld of %d outputs wrong", bad, 64 * rows[i].n);
        TEST_END();
    }
}

/* Each planted template bug must fail: a fault naming it, or wrong outputs. */
static void test_wgmma_bugs(void) {
    static const struct {
        const char *keys, *want;
    } rows[] = {
        {"n=64 swb=128 ks=2 bug=1", ""},                 /* B read with the wrong swizzle */
        {"n=64 ks=1 bug=2", ""},                         /* D read without the wait: NaN tokens */
        {"n=64 ks=1 bug=3", "does not cover"},           /* wait_group 1 with one group pending */
        {"n=64 ks=2 bug=4", "changed while"},            /* an accumulator changed in flight */
        {"n=64 ks=1 bug=5", "without a wgmma.fence"},    /* no fence before the first wgmma */
        {"n=64 ks=1 bug=6", "never committed"},          /* waited without a commit */
        {"n=64 swa=64 swb=64 ks=3 bug=1", ""},           /* 64B written, read as 32B */
        {"n=64 swb=128 ks=1 bug=7", "misaligned"},       /* a 128B-swizzled B off its 1024-byte pattern */
        {"n=64 swb=64 ks=1 bug=8", "out-of-bounds shared"}, /* SBO 16 KiB: rows past the block's shared memory */
        {"n=64 swb=128 ks=2 tb=1 bug=9", ""},            /* an N-major B read as K-major (no trans_b) */
        {"n=64 swb=0 ks=2 tb=1 bug=9", ""},              /* the same without a swizzle */
        {"n=64 swb=0 ks=2 tb=1 bug=10", ""},             /* N-major, no swizzle: LBO and SBO swapped */
        {"n=64 swb=32 ks=2 tb=1 bug=10", ""},            /* N-major, 32B swizzle: LBO and SBO swapped */
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        char name[200];
        snprintf(name, sizeof name, "wgmma planted bug '%s' is caught%s%s", rows[i].keys, rows[i].want[0] ? ": " : "",
                 rows[i].want);
        TEST_BEGIN(name);
        static float y[64 * WG_NMAX];
        long bad = 0;
        kiln_error err = {0};
        int ks = atoi(strstr(rows[i].keys, "ks=") + 3);
        kiln_status st = run_wgmma(rows[i].keys, 64, ks, 1, 0, y, &bad, &err);
        CHECK(st != KILN_OK || bad > 0, "ran clean with right answers");
        if (rows[i].want[0]) CHECK(st != KILN_OK && strstr(err.msg, rows[i].want), "message: %s", err.msg);
        TEST_END();
    }
}

enum { TMA_W = 80, TMA_H = 20, TMA_D = 2, TMA_ITERS = 12 };

/* Runs hoptma with keys over a W x H (x D) f32 tensor whose map has box {b0, 8} ({b0, 4, 2} in 3-D);
 * *bad counts output elements that differ from the box read on the host (zero outside the tensor). */
static kiln_status run_tma(const char *keys, int rank, int b0, int swz, int iters, long *bad, kiln_error *err) {
    char spec[256];
    snprintf(spec, sizeof spec, "hoptma %s", keys);
    kiln_emu_kernel *k = NULL;
    kiln_status st = kiln_emu_load(emu, gen, spec, SM90A, &k, err);
    if (st != KILN_OK) return st;
    static float x[TMA_W * TMA_H * TMA_D], y[TMA_ITERS * 64 * 8];
    for (int i = 0; i < TMA_W * TMA_H * TMA_D; i++) x[i] = (float)(i % 1000) + 0.5f;
    for (int i = 0; i < TMA_ITERS * 64 * 8; i++) y[i] = -1.0f;
    static _Alignas(64) kiln_tensor_map m;
    memset(&m, 0, sizeof m);
    m.magic = KILN_TMAP_MAGIC, m.elem_bytes = 4, m.rank = (uint32_t)rank;
    m.swizzle = swz == 128 ? KILN_TMAP_SWIZZLE_128B : swz == 64 ? KILN_TMAP_SWIZZLE_64B : swz == 32 ? KILN_TMAP_SWIZZLE_32B : 0;
    m.base = (uint64_t)(uintptr_t)x;
    m.dims[0] = TMA_W, m.dims[1] = TMA_H, m.dims[2] = TMA_D;
    m.strides[0] = TMA_W * 4, m.strides[1] = TMA_W * TMA_H * 4;
    m.box[0] = (uint32_t)b0, m.box[1] = rank == 3 ? 4 : 8, m.box[2] = 2;
    void *py = y, *args[] = {&py, &m};
    kiln_emu_launch l = {.grid = {1, 1, 1}, .block = {256, 1, 1}};
    st = kiln_emu_run(k, &l, args, err);
    *bad = 0;
    for (int it = 0; it < iters; it++)
        for (int e = 0; e < b0 * 8; e++) {
            int i0 = e % b0, r = e / b0, gx = it % 3 * b0 + i0, gy, gz;
            if (rank == 2) gy = it / 3 * 8 + r, gz = 0;
            else gy = it / 3 * 4 + r % 4, gz = it % 2 + r / 4;
            float want = gx < TMA_W && gy < TMA_H && gz < TMA_D ? x[gx + TMA_W * (gy + TMA_H * gz)] : 0.0f;
            if (y[it * b0 * 8 + e] != want) ++*bad;
        }
    return st;
}

static void test_tma(void) {
    static const struct {
        int rank, b0, swz, iters;
    } rows[] = {{2, 32, 0, 6}, {2, 32, 128, 12}, {2, 16, 64, 7}, {2, 8, 32, 5}, {3, 32, 128, 8}, {3, 12, 0, 6}};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        char keys[128], name[200];
        snprintf(keys, sizeof keys, "rank=%d b0=%d swz=%d iters=%d", rows[i].rank, rows[i].b0, rows[i].swz, rows[i].iters);
        snprintf(name, sizeof name, "TMA ring %s: every box, edges zero-filled", keys);
        TEST_BEGIN(name);
        long bad = 0;
        kiln_error err = {0};
        kiln_status st = run_tma(keys, rows[i].rank, rows[i].b0, rows[i].swz, rows[i].iters, &bad, &err);
        CHECK(st == KILN_OK, "%s", err.msg);
        CHECK(st != KILN_OK || bad == 0, "%ld wrong outputs", bad);
        TEST_END();
    }
}

static void test_tma_bugs(void) {
    static const struct {
        const char *keys, *want;
        int b0, swz;
    } rows[] = {
        {"iters=4 bug=1", "expect-tx short by 16 bytes", 32, 0}, /* the phase would complete mid-copy */
        {"iters=4 bug=2", "race: ", 32, 0},             /* no expect-tx: consumers read before the box lands */
        {"iters=4 bug=3", "not 128-byte aligned", 32, 0}, /* destination off its alignment */
        {"iters=4 bug=4", "every thread exited with 1 TMA copy unfinished", 32, 0}, /* a box nobody waits for */
        {"iters=4 b0=64 swz=128", "at most the swizzle span", 64, 128}, /* a 256-byte row under a 128B swizzle */
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        char name[200];
        snprintf(name, sizeof name, "TMA planted bug '%s' is caught%s%s", rows[i].keys, rows[i].want[0] ? ": " : "",
                 rows[i].want);
        TEST_BEGIN(name);
        long bad = 0;
        kiln_error err = {0};
        kiln_status st = run_tma(rows[i].keys, 2, rows[i].b0, rows[i].swz, 4, &bad, &err);
        CHECK(st != KILN_OK || bad > 0, "ran clean with right answers");
        if (rows[i].want[0]) CHECK(st != KILN_OK && strstr(err.msg, rows[i].want), "message: %s", err.msg);
        TEST_END();
    }
}

/* Runs hopred with keys over a TMA_W x TMA_H f32 tensor (its map of element type dtype, box {b0, 8}); *bad counts
 * tensor elements that differ from the host's sums (every box's in-bounds elements added, in order; all exact). */
static kiln_status run_red(const char *keys, int b0, int swz, int iters, unsigned dtype, int race, long *bad,
                           kiln_error *err) {
    char spec[256];
    snprintf(spec, sizeof spec, "hopred %s", keys);
    kiln_emu_kernel *k = NULL;
    kiln_status st = kiln_emu_load(emu, gen, spec, SM90A, &k, err);
    if (st != KILN_OK) return st;
    static float x[TMA_ITERS * 64 * 8], acc[TMA_W * TMA_H];
    static double want[TMA_W * TMA_H];
    for (int i = 0; i < TMA_ITERS * 64 * 8; i++) x[i] = (float)((i * 37) % 11 - 5) + 0.25f * (float)(i % 4);
    for (int i = 0; i < TMA_W * TMA_H; i++) acc[i] = (float)(i % 7), want[i] = acc[i];
    for (int it = 0; it < iters; it++)
        for (int e = 0; e < b0 * 8; e++) {
            int gx = it % 3 * b0 - 8 + e % b0, gy = it / 3 % 3 * 8 + e / b0;
            if (gx >= 0 && gx < TMA_W && gy < TMA_H) want[gx + TMA_W * gy] += x[it * b0 * 8 + e];
        }
    static _Alignas(64) kiln_tensor_map m;
    memset(&m, 0, sizeof m);
    m.magic = KILN_TMAP_MAGIC, m.elem_bytes = 4, m.rank = 2, m.data_type = dtype;
    m.swizzle = swz == 128 ? KILN_TMAP_SWIZZLE_128B : swz == 64 ? KILN_TMAP_SWIZZLE_64B : swz == 32 ? KILN_TMAP_SWIZZLE_32B : 0;
    m.base = (uint64_t)(uintptr_t)acc;
    m.dims[0] = TMA_W, m.dims[1] = TMA_H, m.strides[0] = TMA_W * 4;
    m.box[0] = (uint32_t)b0, m.box[1] = 8;
    void *px = x, *args[] = {&px, &m};
    kiln_emu_launch l = {.grid = {1, 1, 1}, .block = {128, 1, 1}, .race = race};
    st = kiln_emu_run(k, &l, args, err);
    *bad = 0;
    for (int i = 0; i < TMA_W * TMA_H; i++)
        if ((double)acc[i] != want[i]) ++*bad;
    return st;
}

static void test_tma_reduce(void) {
    static const struct {
        int b0, swz, iters, race;
    } rows[] = {{32, 0, 12, 0}, {32, 128, 12, 1}, {16, 64, 10, 0}, {8, 32, 7, 1}, {64, 0, 5, 0}, {4, 0, 1, 0}};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        char keys[128], name[240];
        snprintf(keys, sizeof keys, "b0=%d swz=%d iters=%d", rows[i].b0, rows[i].swz, rows[i].iters);
        snprintf(name, sizeof name, "TMA reduce-add %s%s: every box added, edges skipped, repeated elements summed",
                 keys, rows[i].race ? " (race mode)" : "");
        TEST_BEGIN(name);
        long bad = 0;
        kiln_error err = {0};
        kiln_status st = run_red(keys, rows[i].b0, rows[i].swz, rows[i].iters, KILN_TMAP_TYPE_FLOAT32, rows[i].race,
                                 &bad, &err);
        CHECK(st == KILN_OK, "%s", err.msg);
        CHECK(st != KILN_OK || bad == 0, "%ld wrong sums", bad);
        TEST_END();
    }
}

static void test_tma_reduce_bugs(void) {
    static const struct {
        const char *keys, *want;
        unsigned dtype;
        int race;
    } rows[] = {
        {"iters=4 bug=1", "was written before a cp.async.bulk.wait_group.read covered", KILN_TMAP_TYPE_FLOAT32, 0},
        {"iters=4 bug=2", "exited with 2 bulk reduces unfinished", KILN_TMAP_TYPE_FLOAT32, 0},
        {"iters=4 bug=3", "4 bulk reduces unfinished", KILN_TMAP_TYPE_FLOAT32, 0}, /* never committed: no wait covers one */
        {"iters=4 bug=4", "was written before a cp.async.bulk.wait_group.read", KILN_TMAP_TYPE_FLOAT32, 0}, /* after issue */
        {"iters=4 bug=5", "shared-memory race", KILN_TMAP_TYPE_FLOAT32, 1}, /* the tile's writes not ordered before it */
        {"iters=4", "the emulator adds f32 maps only", KILN_TMAP_TYPE_INT32, 0}, /* an s32 map */
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        char name[240];
        snprintf(name, sizeof name, "TMA reduce planted bug '%s'%s is caught%s%s", rows[i].keys,
                 rows[i].race ? " (race mode)" : "", rows[i].want[0] ? ": " : "", rows[i].want);
        TEST_BEGIN(name);
        long bad = 0;
        kiln_error err = {0};
        kiln_status st = run_red(rows[i].keys, 32, 0, 4, rows[i].dtype, rows[i].race, &bad, &err);
        CHECK(st != KILN_OK || bad > 0, "ran clean with right answers");
        if (rows[i].want[0]) CHECK(st != KILN_OK && strstr(err.msg, rows[i].want), "message: %s", err.msg);
        TEST_END();
    }
}

/* The profile counts the primitives per warp: iters=6 sync=1 has 4 mbarrier.init (warp 0), per
 * iteration expect_tx in warp 4 and complete_tx + arrive in the 4 producer warps, an empty-barrier
 * wait in them from iteration 2 on, a full-barrier wait and an arrive in the 4 consumer warps; wgmma
 * fence/commit/wait in the consumers each iteration; setmaxnreg once per warp, fence.proxy.async in
 * the producers each iteration. */
static void test_profile(void) {
    TEST_BEGIN("the profile counts mbarrier, wgmma and fence/setmaxnreg per warp");
    kiln_emu *pe = NULL;
    kiln_error err = {0};
    kiln_emu_kernel *k = NULL;
    kiln_status st = kiln_emu_create(&pe, &err);
    if (st == KILN_OK) {
        kiln_emu_set_profile(pe, 1);
        st = kiln_emu_load(pe, gen, "hoppipe iters=6 sync=1", SM90A, &k, &err);
    }
    static float x[6 * 128], y[128];
    for (int i = 0; i < 6 * 128; i++) x[i] = 1.0f;
    void *py = y, *px = x, *args[] = {&py, &px};
    kiln_emu_launch l = {.grid = {1, 1, 1}, .block = {256, 1, 1}};
    if (st == KILN_OK) st = kiln_emu_run(k, &l, args, &err);
    kiln_emu_profile p;
    if (st == KILN_OK) st = kiln_emu_profile_get(k, &p, &err);
    CHECK(st == KILN_OK, "%s", err.msg);
    if (st == KILN_OK) {
        const int it = 6, warps = 4;
        uint64_t mbar = 4 + it * (1 + 2 * warps) + (it - 2) * warps + it * 2 * warps;
        CHECK(p.inst[KILN_PROF_MBARRIER] == mbar, "mbarrier %llu, want %llu",
              (unsigned long long)p.inst[KILN_PROF_MBARRIER], (unsigned long long)mbar);
        CHECK(p.inst[KILN_PROF_WGMMA] == (uint64_t)(it * warps * 3), "wgmma %llu, want %d",
              (unsigned long long)p.inst[KILN_PROF_WGMMA], it * warps * 3);
        CHECK(p.inst[KILN_PROF_ASYNC_SYNC] == (uint64_t)(2 * warps + it * warps), "fence/setmaxnreg %llu, want %d",
              (unsigned long long)p.inst[KILN_PROF_ASYNC_SYNC], 2 * warps + it * warps);
        CHECK(p.inst[KILN_PROF_TMA] == 0 && !strcmp(kiln_prof_class_name(KILN_PROF_WGMMA), "wgmma"), "tma, names");
    }
    kiln_emu_destroy(pe);
    TEST_END();
}

/* The TMA reduce in the profile: hopred iters=5 has, in warp 0 only (thread 0 issues), 5 reduce-adds
 * (tma.reduce), and 5 commits + 3 wait_group.read + 1 wait_group (tma); fence.proxy.async in the 4 warps
 * each iteration; no other class takes the reduces (no st.global). */
static void test_reduce_profile(void) {
    TEST_BEGIN("the profile counts TMA reduce-adds (tma.reduce) apart from the bulk commit/wait (tma)");
    kiln_emu *pe = NULL;
    kiln_error err = {0};
    kiln_emu_kernel *k = NULL;
    kiln_status st = kiln_emu_create(&pe, &err);
    if (st == KILN_OK) {
        kiln_emu_set_profile(pe, 1);
        st = kiln_emu_load(pe, gen, "hopred iters=5", SM90A, &k, &err);
    }
    static float x[5 * 256], acc[TMA_W * TMA_H];
    static _Alignas(64) kiln_tensor_map m;
    memset(&m, 0, sizeof m);
    m.magic = KILN_TMAP_MAGIC, m.elem_bytes = 4, m.rank = 2, m.data_type = KILN_TMAP_TYPE_FLOAT32;
    m.base = (uint64_t)(uintptr_t)acc, m.dims[0] = TMA_W, m.dims[1] = TMA_H, m.strides[0] = TMA_W * 4;
    m.box[0] = 32, m.box[1] = 8;
    void *px = x, *args[] = {&px, &m};
    kiln_emu_launch l = {.grid = {1, 1, 1}, .block = {128, 1, 1}};
    if (st == KILN_OK) st = kiln_emu_run(k, &l, args, &err);
    kiln_emu_profile p;
    if (st == KILN_OK) st = kiln_emu_profile_get(k, &p, &err);
    CHECK(st == KILN_OK, "%s", err.msg);
    if (st == KILN_OK) {
        CHECK(p.inst[KILN_PROF_TMA_REDUCE] == 5, "tma.reduce %llu, want 5", (unsigned long long)p.inst[KILN_PROF_TMA_REDUCE]);
        CHECK(p.inst[KILN_PROF_TMA] == 5 + 3 + 1, "tma %llu, want 9", (unsigned long long)p.inst[KILN_PROF_TMA]);
        CHECK(p.inst[KILN_PROF_ASYNC_SYNC] == 5 * 4, "fence %llu, want 20", (unsigned long long)p.inst[KILN_PROF_ASYNC_SYNC]);
        CHECK(p.inst[KILN_PROF_ST_GLOBAL] == 0, "st.global %llu", (unsigned long long)p.inst[KILN_PROF_ST_GLOBAL]);
        CHECK(!strcmp(kiln_prof_class_name(KILN_PROF_TMA_REDUCE), "tma.reduce"), "name %s",
              kiln_prof_class_name(KILN_PROF_TMA_REDUCE));
    }
    kiln_emu_destroy(pe);
    TEST_END();
}

/* wgmma in the profile: per warp, hopwgmma ks=2 has one fence, two mma_async, one commit and one
 * wait (the descriptors count as integer arithmetic, not wgmma). */
static void test_wgmma_profile(void) {
    TEST_BEGIN("the profile counts wgmma fence, mma_async, commit and wait per warp");
    kiln_emu *pe = NULL;
    kiln_error err = {0};
    kiln_emu_kernel *k = NULL;
    kiln_status st = kiln_emu_create(&pe, &err);
    if (st == KILN_OK) {
        kiln_emu_set_profile(pe, 1);
        st = kiln_emu_load(pe, gen, "hopwgmma n=64 swa=128 swb=128 ks=2", SM90A, &k, &err);
    }
    static uint16_t a[64 * 32], bt[64 * 32];
    static float y[64 * 64];
    void *py = y, *pa = a, *pb = bt, *args[] = {&py, &pa, &pb};
    kiln_emu_launch l = {.grid = {1, 1, 1}, .block = {128, 1, 1}};
    if (st == KILN_OK) st = kiln_emu_run(k, &l, args, &err);
    kiln_emu_profile p;
    if (st == KILN_OK) st = kiln_emu_profile_get(k, &p, &err);
    CHECK(st == KILN_OK, "%s", err.msg);
    if (st == KILN_OK)
        CHECK(p.inst[KILN_PROF_WGMMA] == 4 * 5, "wgmma %llu, want %d", (unsigned long long)p.inst[KILN_PROF_WGMMA], 4 * 5);
    kiln_emu_destroy(pe);
    TEST_END();
}

static void test_misuse(void) {
    static const struct {
        int c, sm;
        const char *want;
    } rows[] = {
        {0, 90, "needs the arch-specific target sm_90a"},
        {1, SM90A, "valid: inc, dec"},
        {2, SM90A, "valid 24..256 in steps of 8"},
        {3, SM90A, "must be a shared pointer"},
        {4, SM90A, "valid 0..7"},
        {5, 80, "needs sm_90 or newer"},
        {6, 90, "b:wgmma / b:wgmma_desc (wgmma.mma_async) needs the arch-specific target sm_90a"},
        {7, SM90A, "n = 60; valid: 8..256 in steps of 8"},
        {8, SM90A, "swizzle = 16; valid: 0, 32, 64, 128"},
        {9, SM90A, "lbo = 24; valid: a multiple of 16"},
        {10, SM90A, "type 'f32'; valid: f16, bf16"},
        {11, SM90A, "a must be a descriptor (b:wgmma_desc) or 4 i32 registers"},
        {12, 90, "the map must be a kernel parameter of kind 'tensormap'"},
        {13, 80, "b:tma_load (cp.async.bulk.tensor) needs sm_90 or newer"},
        {14, 90, "b:tma_reduce_add: the map must be a kernel parameter of kind 'tensormap'"},
        {15, 80, "b:tma_reduce_add (cp.reduce.async.bulk.tensor) needs sm_90 or newer"},
        {16, SM90A, "b:bulk_wait(64): valid 0..63 pending groups"},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        char spec[64], name[160], sm[16];
        snprintf(spec, sizeof spec, "hopmisuse case=%d", rows[i].c);
        snprintf(name, sizeof name, "%s on %s refused: %s", spec, kiln_sm_name(rows[i].sm, sm), rows[i].want);
        TEST_BEGIN(name);
        kiln_module *m = NULL;
        kiln_error err = {0};
        CHECK(kiln_generate(gen, spec, rows[i].sm, KILN_EMIT_PTX, &m, &err) == KILN_EGEN && strstr(err.msg, rows[i].want) &&
                  strstr(err.msg, "hopmisuse.lua:"),
              "%s", err.msg);
        kiln_module_free(m);
        TEST_END();
    }
}

/* ptxas assembles the primitives for sm_90a (and the mbarrier ones for sm_90): 0 spills, and no C7508
 * (setmaxnreg ignored). */
static void test_ptxas(void) {
    const char *ptxas = ptxas_path();
    static const struct {
        const char *spec;
        int sm;
        const char *must[4]; /* text the PTX must hold */
    } rows[] = {
        {"hoppipe iters=6 sync=1", SM90A,
         {"setmaxnreg.dec.sync.aligned.u32 \t40;", "wgmma.wait_group.sync.aligned \t0;", "fence.proxy.async",
          "mbarrier.try_wait.parity"}},
        {"hoppipe iters=6", 90, {"mbarrier.try_wait.parity", "mbarrier.expect_tx", "mbarrier.complete_tx", NULL}},
        {"hopwgmma n=64 bf=1 swa=128 swb=128 ks=2", SM90A,
         {"wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16", "wgmma.fence.sync.aligned",
          "wgmma.commit_group.sync.aligned", "wgmma.wait_group.sync.aligned 0;"}},
        {"hopwgmma n=256 bf=0 rs=1 swb=64 ks=2", SM90A, {"wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16", NULL}},
        {"hopwgmma n=128 bf=1 rs=1 swb=32 ks=4", SM90A, {"wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16", NULL}},
        {"hopwgmma n=24 bf=0 swa=64 ks=1", SM90A, {"wgmma.mma_async.sync.aligned.m64n24k16.f32.f16.f16", NULL}},
        {"hopwgmma n=128 bf=1 swa=128 swb=128 ks=2 tb=1", SM90A, {"wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16", ", 1, 1, 0, 1;", NULL}},
        {"hopwgmma n=64 bf=0 rs=1 swb=64 ks=2 tb=1", SM90A, {"wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16", ", 1, 1, 1;", NULL}},
        {"hoptma rank=2 swz=128", 90,
         {"cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes", "cvta.param",
          ".param .align 64 .b8", NULL}},
        {"hoptma rank=3 b0=12", SM90A, {"cp.async.bulk.tensor.3d.shared::cluster.global.tile", NULL}},
        {"hopred swz=128", SM90A,
         {"cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile.bulk_group", "cp.async.bulk.commit_group;",
          "cp.async.bulk.wait_group.read \t1;", "cp.async.bulk.wait_group \t0;"}},
        {"hopred b0=16", 90, {"cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile.bulk_group", NULL}},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        char name[160], sm[16];
        snprintf(name, sizeof name, "ptxas %s: '%s' assembles, 0 spills, setmaxnreg kept", kiln_sm_name(rows[i].sm, sm),
                 rows[i].spec);
        if (!ptxas) {
            printf("  skipped (no ptxas): %s\n", name);
            continue;
        }
        TEST_BEGIN(name);
        kiln_module *m = NULL;
        kiln_error err = {0};
        CHECK(kiln_generate(gen, rows[i].spec, rows[i].sm, KILN_EMIT_PTX, &m, &err) == KILN_OK, "%s", err.msg);
        if (m) {
            ptxas_job j = {.sm = rows[i].sm};
            snprintf(j.ptx, sizeof j.ptx, "%s/k%zu.ptx", dir, i);
            snprintf(j.log, sizeof j.log, "%s/k%zu.log", dir, i);
            FILE *f = fopen(j.ptx, "w");
            if (f) fwrite(kiln_module_text(m), 1, kiln_module_size(m), f), fclose(f);
            ptxas_run_all(ptxas, &j, 1, 1);
            size_t len = 0;
            char *log = slurp(j.log, &len);
            long spills = -1;
            int regs = 0, smem = 0;
            if (log) ptxas_resources(log, &spills, &regs, &smem);
            CHECK(j.status == 0, "ptxas failed: %s", log ? log : "");
            CHECK(log && spills == 0 && !strstr(log, "C7508"), "spills %ld; log: %s", spills, log ? log : "");
            for (int k = 0; k < 4 && rows[i].must[k]; k++)
                CHECK(strstr(kiln_module_text(m), rows[i].must[k]), "PTX lacks '%s'", rows[i].must[k]);
            free(log);
            unlink(j.ptx), unlink(j.log);
            kiln_module_free(m);
        }
        TEST_END();
    }
}

int main(void) {
    if (!mkdtemp(dir)) return 1;
    write_template("hoppipe", pipe_lua);
    write_template("hopmisuse", misuse_lua);
    write_template("hopwgmma", wgmma_lua);
    write_template("hoptma", tma_lua);
    write_template("hopred", red_lua);
    kiln_gen_options o = {.template_dir = dir};
    kiln_error err = {0};
    if (kiln_gen_create(&gen, &o, &err) != KILN_OK || kiln_emu_create(&emu, &err) != KILN_OK) {
        printf("hopper: setup: %s\nhopper: 0 passed, 1 failed\n", err.msg);
        return 1;
    }
    test_pipeline();
    test_pipeline_bugs();
    test_wgmma();
    test_wgmma_bugs();
    test_tma();
    test_tma_bugs();
    test_tma_reduce();
    test_tma_reduce_bugs();
    test_profile();
    test_reduce_profile();
    test_wgmma_profile();
    test_misuse();
    test_ptxas();
    kiln_emu_destroy(emu);
    kiln_gen_destroy(gen);
    char path[256];
    snprintf(path, sizeof path, "%s/hoppipe.lua", dir), unlink(path);
    snprintf(path, sizeof path, "%s/hopmisuse.lua", dir), unlink(path);
    snprintf(path, sizeof path, "%s/hopwgmma.lua", dir), unlink(path);
    snprintf(path, sizeof path, "%s/hoptma.lua", dir), unlink(path);
    snprintf(path, sizeof path, "%s/hopred.lua", dir), unlink(path);
    rmdir(dir);
    return check_summary("hopper");
}
