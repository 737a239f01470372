-- templates/lib/attn_bwd_wgmma_regs.lua - how the sm_90a backward's consumers (lib/attn_bwd_wgmma.lua) address
-- shared memory without spending registers: the warpgroup's and the stage's offsets made warp-uniform once a tile,
-- and wgmma descriptors as a base descriptor plus an offset.
--
-- Why (ptxas sm_90a, CUDA 13, measured on the d128 dkdv with two consumer warpgroups, docs/hopper.md "Two consumer
-- warpgroups at d128"): ptxas allocates a setmaxnreg.inc region up to its count (240), whatever the kernel's
-- .maxnreg (168 at 384 threads) says; what spilled was the consumer's own addressing.
-- - An offset from %tid.x (the warpgroup) is not warp-uniform to ptxas: the descriptors derived from it are built
--   in vector registers and moved to uniform ones before each wgmma, and ptxas serializes every wgmma of the
--   kernel ("C7520: wgmma.mma_async instructions are serialized due to program dependence on compiler-inserted
--   WG.AR in divergent path": a wait after each one). A shfl.sync.idx from lane 0 is warp-uniform to ptxas, so the
--   descriptor arithmetic runs on the uniform datapath and the chains stay asynchronous.
-- - LLVM hoists loop-invariant address and descriptor arithmetic out of the tile loop: 28 descriptors (64-bit)
--   held across it at d128. The shuffle is made in the tile loop (LLVM keeps a shfl.sync where it is), so what
--   derives from it is computed where it is used.
-- - A descriptor for a matrix at base + k elements is the base's descriptor plus k * bytes / 16 (the start
--   address field, bits 0-13, holds the shared address / 16; a shared address stays below 2^18, so the field does
--   not carry): one add a k-step instead of the address's shift, mask and or in 64 bits. Every region is
--   addressed from the start of dynamic shared memory: a base descriptor per region held eight 64-bit values in
--   uniform registers, and ptxas moved others out to vector registers and spilled them (16-24 bytes at d128).
-- - The roles' branch tests the uniform copy of the warpgroup index too: on %tid.x / 128 ptxas took the
--   consumers' code for a divergent path and serialized its wgmma (C7520 on the deterministic d128 kernel).
local M = {}

-- The warp-uniform copy of an i32 value every lane of the warp holds alike (a warpgroup's index, the stage):
-- lane 0's, by shfl.sync.idx, made where it is called (in the tile loop: not hoisted).
function M.uniform(b, v) return b:shfl("idx", v, 0) end

-- A shared-memory address: base (a pointer to the kernel's shared memory, with no per-thread part) plus u units of
-- 16 bytes (an i32 value, warp-uniform, or a Lua integer); eb the element's bytes.
local Addr = {}
Addr.__index = Addr

-- addr + n: n elements further (a Lua integer: another address, whole 16-byte units; an i32 value: a pointer).
function Addr.__add(a, n)
  if math.type(n) == "integer" then
    assert((n * a.eb) % 16 == 0, "attn_bwd_wgmma_regs: an offset of whole 16-byte units")
    return setmetatable({ b = a.b, base = a.base, eb = a.eb, u = a.u + n * a.eb // 16 }, Addr)
  end
  return a:ptr() + n
end

-- The address as a pointer (for loads and stores).
function Addr:ptr() return self.base + self.u * (16 // self.eb) end

-- The wgmma matrix descriptor of the matrix at this address: 128-byte swizzle, SBO 1024, LBO lbo bytes.
function Addr:desc(lbo)
  local d = self.b:wgmma_desc(self.base, { swizzle = 128, lbo = lbo, sbo = 1024 })
  if self.u == 0 then return d end
  return d + self.b:i64(self.u)
end

-- The address base + u units of 16 bytes (u: an i32 value or a Lua integer), elements of eb bytes.
function M.at(b, base, eb, u) return setmetatable({ b = b, base = base, eb = eb, u = u or 0 }, Addr) end

return M
