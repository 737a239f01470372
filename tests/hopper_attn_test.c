/* tests/hopper_attn_test.c - the consumer loop of an sm_90a attention forward (FlashAttention-3's math on one
 * warpgroup) on the emulator against float64: S = Q K^T by wgmma from shared memory, online softmax on S's
 * D fragment in registers, P re-packed into wgmma's A registers and O += P V with V as stored (an N-major B,
 * trans_b); planted bugs caught; ptxas sm_90a without spills. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "kiln/emu.h"
#include "kiln/emu_profile.h"
#include "kiln/gen.h"
#include "kiln/runtime.h"
#include "ptxas_util.h"

#define SM90A (KILN_SM_ARCH + 90)

/* One block, one warpgroup: 64 query rows, head dim 64, nt key tiles of 64. Each tile of K and V is copied
 * row-major into shared memory under the 128-byte swizzle (a row of 64 16-bit elements is one 128-byte
 * swizzle row: K is then K-major for S = Q K^T and V N-major for P V, the same bytes). Thread 32w + 4g + q
 * holds S's and O's rows 16w + g and 16w + g + 8 (element i: row (i >> 1) & 1, column 8(i >> 2) + 2q +
 * (i & 1)); the row max and sum reduce over the 4 lanes q. Planted bugs: 1 V read K-major (no trans_b),
 * 2 P's register halves swapped, 3 O not rescaled when the row max grows, 4 the max not reduced over q. */
static const char *attn_lua =
    "local K = { params = {\n"
    "  { name = 'bf', type = 'int', default = 1, min = 0, max = 1 },\n"
    "  { name = 'nt', type = 'int', default = 2, min = 1, max = 4 },\n"
    "  { name = 'bug', type = 'int', default = 0, min = 0, max = 4 } } }\n"
    "function K.config(spec, t) return { block = 128, grid_tile = 1, arch_specific = t.arch } end\n"
    "function K.build(b, spec, cfg)\n"
    "  local T = spec.bf == 1 and 'bf16' or 'f16'\n"
    "  local p = b:kernel{ params = { { 'o', 'ptr', 'f32' }, { 'q', 'ptr', T, readonly = true },\n"
    "    { 'k', 'ptr', T, readonly = true }, { 'v', 'ptr', T, readonly = true }, { 'scale_log2', 'f32' } } }\n"
    "  local t = b:tid()\n"
    "  local sq, sk, sv = b:shared(T, 4096, 1024), b:shared(T, 4096, 1024), b:shared(T, 4096, 1024)\n"
    "  local function fill(dst, src, row0)\n"
    "    for j = 0, 31 do\n"
    "      local e = t + 128 * j\n"
    "      local lin = (e // 64) * 128 + (e % 64) * 2\n"
    "      lin = lin ~ (((lin >> 7) & 7) << 4)\n"
    "      b:store(dst + lin // 2, b:load(src + (e + row0 * 64)))\n"
    "    end\n"
    "  end\n"
    "  local function desc(base, lbo) return b:wgmma_desc(base, { swizzle = 128, lbo = lbo, sbo = 1024 }) end\n"
    "  fill(sq, p.q, 0)\n"
    "  local m, l, O = { b:f32(-1e30), b:f32(-1e30) }, { b:f32(0), b:f32(0) }, nil\n"
    "  for kt = 0, spec.nt - 1 do\n"
    "    if kt > 0 then b:barrier() end\n"
    "    fill(sk, p.k, kt * 64)\n"
    "    fill(sv, p.v, kt * 64)\n"
    "    b:barrier()\n"
    "    b:fence_proxy_async()\n"
    "    b:wgmma_fence()\n"
    "    local S\n"
    "    for s = 0, 3 do S = b:wgmma{ n = 64, type = T, a = desc(sq + 16 * s, 16), b = desc(sk + 16 * s, 16), acc = S } end\n"
    "    b:wgmma_commit()\n"
    "    S = b:wgmma_wait(0, S)\n"
    "    local x, mx = {}, { b:f32(-1e30), b:f32(-1e30) }\n"
    "    for i = 0, 31 do\n"
    "      x[i] = S[i + 1] * p.scale_log2\n"
    "      local r = ((i >> 1) & 1) + 1\n"
    "      mx[r] = b:max(mx[r], x[i])\n"
    "    end\n"
    "    local alpha = {}\n"
    "    for r = 1, 2 do\n"
    "      local mr = spec.bug == 4 and mx[r] or b:warp_max(mx[r], 4)\n"
    "      local mn = b:max(m[r], mr)\n"
    "      alpha[r] = b:ex2_approx(m[r] - mn)\n"
    "      m[r] = mn\n"
    "      l[r] = l[r] * alpha[r]\n"
    "    end\n"
    "    local P = {}\n"
    "    for i = 0, 31 do\n"
    "      local r = ((i >> 1) & 1) + 1\n"
    "      P[i] = b:ex2_approx(x[i] - m[r])\n"
    "      l[r] = l[r] + P[i]\n"
    "    end\n"
    "    if O and spec.bug ~= 3 then\n"
    "      for i = 0, 31 do O[i + 1] = O[i + 1] * alpha[((i >> 1) & 1) + 1] end\n"
    "    end\n"
    "    b:wgmma_fence()\n"
    "    for s = 0, 3 do\n"
    "      local a = {}\n"
    "      for j = 0, 3 do\n"
    "        local half = spec.bug == 2 and 1 - (j & 1) or (j & 1)\n"
    "        local i = 8 * s + 4 * (j >> 1) + 2 * half\n"
    "        a[j + 1] = b:pack(P[i], P[i + 1], T)\n"
    "      end\n"
    "      O = b:wgmma{ n = 64, type = T, a = a, b = desc(sv + 1024 * s, 8192), acc = O, trans_b = spec.bug ~= 1 }\n"
    "    end\n"
    "    b:wgmma_commit()\n"
    "    O = b:wgmma_wait(0, O)\n"
    "  end\n"
    "  local w, g, q = t // 32, (t % 32) // 4, t % 4\n"
    "  local inv = { b:f32(1) / b:warp_sum(l[1], 4), b:f32(1) / b:warp_sum(l[2], 4) }\n"
    "  for i = 0, 31 do\n"
    "    local r = (i >> 1) & 1\n"
    "    local row, col = w * 16 + g + 8 * r, 8 * (i >> 2) + q * 2 + (i & 1)\n"
    "    b:store(p.o + (row * 64 + col), O[i + 1] * inv[r + 1])\n"
    "  end\n"
    "end\nreturn K\n";

/* The same math in FlashAttention-3's producer/consumer structure: 256 threads, warpgroup 1 the producer
 * (setmaxnreg dec 40; its thread 128 issues TMA: Q once, then each key tile's K and V into a two-stage ring
 * gated by full (1 arrival + the tiles' bytes) and empty (128 consumer arrivals) mbarriers), warpgroup 0 the
 * consumer (setmaxnreg inc 232) running wgmma on the tiles where TMA left them (128B swizzle, the layout the
 * descriptors name). The tensor maps come from the launch description (tmaps: q, k, v with 64 x 64 boxes).
 * Planted bugs: 5 the consumer waits on the wrong parity of the full barrier, 6 the producer does not wait
 * for the consumer to free a stage, 7 V's map with a 64B swizzle (its box rows are 128 bytes), 8 the
 * expect-tx announces K's tile only (the phase completes when K lands, V still in flight: the emulator lands
 * TMA copies as late as it may, so the consumer's wgmma meets V in flight), 9 the consumer never waits on the
 * full barrier. */
static const char *attn_tma_lua =
    "local K = { params = {\n"
    "  { name = 'bf', type = 'int', default = 1, min = 0, max = 1 },\n"
    "  { name = 'nt', type = 'int', default = 3, min = 1, max = 4 },\n"
    "  { name = 'bug', type = 'int', default = 0, min = 0, max = 9 } } }\n"
    "function K.config(spec, t) return { block = 256, grid_tile = 1, arch_specific = t.arch } end\n"
    "function K.launch(spec, cfg)\n"
    "  return { tensors = { { 'o', 'out', { 64, 64 } }, { 'q', 'in', { 64, 64 } }, { 'k', 'in', { spec.nt * 64, 64 } },\n"
    "                       { 'v', 'in', { spec.nt * 64, 64 } } },\n"
    "           scalars = { { 'scale_log2', 0.18033688011112042 } }, problem = { 1 },\n"
    "           tmaps = { { 'tm_q', 'q', box = { 64, 64 }, swizzle = 128 }, { 'tm_k', 'k', box = { 64, 64 }, swizzle = 128 },\n"
    "                     { 'tm_v', 'v', box = { 64, 64 }, swizzle = spec.bug == 7 and 64 or 128 } } }\n"
    "end\n"
    "function K.build(b, spec, cfg)\n"
    "  local T = spec.bf == 1 and 'bf16' or 'f16'\n"
    "  local p = b:kernel{ params = { { 'o', 'ptr', 'f32' }, { 'tm_q', 'tensormap', T }, { 'tm_k', 'tensormap', T },\n"
    "    { 'tm_v', 'tensormap', T }, { 'scale_log2', 'f32' } } }\n"
    "  local t, wg = b:tid(), b:warpgroup()\n"
    "  local sq, sk, sv = b:shared(T, 4096, 1024), b:shared(T, 2 * 4096, 1024), b:shared(T, 2 * 4096, 1024)\n"
    "  local full, empty, qbar = b:shared('f32', 4, 8), b:shared('f32', 4, 8), b:shared('f32', 2, 8)\n"
    "  b:if_(b:eq(t, 0), function()\n"
    "    for s = 0, 1 do b:mbarrier_init(full + 2 * s, 1); b:mbarrier_init(empty + 2 * s, 128) end\n"
    "    b:mbarrier_init(qbar, 1)\n"
    "  end)\n"
    "  b:barrier()\n"
    "  b:if_(b:eq(wg, 1), function()\n"
    "    b:setmaxnreg('dec', 40)\n"
    "    b:if_(b:eq(t, 128), function()\n"
    "      b:mbarrier_arrive(qbar, { tx = b:i32(8192) })\n"
    "      b:tma_load(sq, p.tm_q, { 0, 0 }, qbar)\n"
    "      for kt = 0, spec.nt - 1 do\n"
    "        local s, use = kt % 2, kt // 2\n"
    "        if kt >= 2 and spec.bug ~= 6 then b:mbarrier_wait(empty + 2 * s, (use + 1) % 2) end\n"
    "        b:mbarrier_arrive(full + 2 * s, { tx = b:i32(spec.bug == 8 and 8192 or 16384) })\n"
    "        b:tma_load(sk + 4096 * s, p.tm_k, { 0, kt * 64 }, full + 2 * s)\n"
    "        b:tma_load(sv + 4096 * s, p.tm_v, { 0, kt * 64 }, full + 2 * s)\n"
    "      end\n"
    "    end)\n"
    "  end)\n"
    "  b:if_(b:eq(wg, 0), function()\n"
    "    b:setmaxnreg('inc', 232)\n"
    "    local function desc(base, lbo) return b:wgmma_desc(base, { swizzle = 128, lbo = lbo, sbo = 1024 }) end\n"
    "    b:mbarrier_wait(qbar, 0)\n"
    "    local m, l, O = { b:f32(-1e30), b:f32(-1e30) }, { b:f32(0), b:f32(0) }, nil\n"
    "    for kt = 0, spec.nt - 1 do\n"
    "      local s, use = kt % 2, kt // 2\n"
    "      if spec.bug ~= 9 then b:mbarrier_wait(full + 2 * s, (use + (spec.bug == 5 and 1 or 0)) % 2) end\n"
    "      local ks, vs = sk + 4096 * s, sv + 4096 * s\n"
    "      b:wgmma_fence()\n"
    "      local S\n"
    "      for j = 0, 3 do S = b:wgmma{ n = 64, type = T, a = desc(sq + 16 * j, 16), b = desc(ks + 16 * j, 16), acc = S } end\n"
    "      b:wgmma_commit()\n"
    "      S = b:wgmma_wait(0, S)\n"
    "      local x, mx = {}, { b:f32(-1e30), b:f32(-1e30) }\n"
    "      for i = 0, 31 do\n"
    "        x[i] = S[i + 1] * p.scale_log2\n"
    "        local r = ((i >> 1) & 1) + 1\n"
    "        mx[r] = b:max(mx[r], x[i])\n"
    "      end\n"
    "      local alpha = {}\n"
    "      for r = 1, 2 do\n"
    "        local mn = b:max(m[r], b:warp_max(mx[r], 4))\n"
    "        alpha[r] = b:ex2_approx(m[r] - mn)\n"
    "        m[r] = mn\n"
    "        l[r] = l[r] * alpha[r]\n"
    "      end\n"
    "      local P = {}\n"
    "      for i = 0, 31 do\n"
    "        local r = ((i >> 1) & 1) + 1\n"
    "        P[i] = b:ex2_approx(x[i] - m[r])\n"
    "        l[r] = l[r] + P[i]\n"
    "      end\n"
    "      if O then for i = 0, 31 do O[i + 1] = O[i + 1] * alpha[((i >> 1) & 1) + 1] end end\n"
    "      b:wgmma_fence()\n"
    "      for j = 0, 3 do\n"
    "        local a = {}\n"
    "        for h = 0, 3 do\n"
    "          local i = 8 * j + 4 * (h >> 1) + 2 * (h & 1)\n"
    "          a[h + 1] = b:pack(P[i], P[i + 1], T)\n"
    "        end\n"
    "        O = b:wgmma{ n = 64, type = T, a = a, b = desc(vs + 1024 * j, 8192), acc = O, trans_b = true }\n"
    "      end\n"
    "      b:wgmma_commit()\n"
    "      O = b:wgmma_wait(0, O)\n"
    "      b:mbarrier_arrive(empty + 2 * s)\n"
    "    end\n"
    "    local w, g, q = t // 32, (t % 32) // 4, t % 4\n"
    "    local inv = { b:f32(1) / b:warp_sum(l[1], 4), b:f32(1) / b:warp_sum(l[2], 4) }\n"
    "    for i = 0, 31 do\n"
    "      local r = (i >> 1) & 1\n"
    "      local row, col = w * 16 + g + 8 * r, 8 * (i >> 2) + q * 2 + (i & 1)\n"
    "      b:store(p.o + (row * 64 + col), O[i + 1] * inv[r + 1])\n"
    "    end\n"
    "  end)\n"
    "end\nreturn K\n";

static char dir[] = "/tmp/kiln-hopper-attn-XXXXXX";
static kiln_gen *gen;
static kiln_emu *emu;

enum { NQ = 64, D = 64, KMAX = 256 };

static _Alignas(256) uint16_t q[NQ * D], kk[KMAX * D], v[KMAX * D];
static _Alignas(256) float o[NQ * D];

/* Inputs for nt key tiles (q, k in -2..2, v in -1..1, rounded to the dtype); o poisoned. */
static void make_inputs(int nt, int bf) {
    kiln_dtype t = bf ? KILN_BF16 : KILN_F16;
    unsigned seed = 12345u + (unsigned)nt * 7u + (unsigned)bf;
    for (int i = 0; i < NQ * D; i++) seed = seed * 1664525u + 1013904223u, kiln_emu_value_set(t, q, (size_t)i, (double)(seed >> 8) / (1 << 24) * 4 - 2);
    for (int i = 0; i < 64 * nt * D; i++) {
        seed = seed * 1664525u + 1013904223u, kiln_emu_value_set(t, kk, (size_t)i, (double)(seed >> 8) / (1 << 24) * 4 - 2);
        seed = seed * 1664525u + 1013904223u, kiln_emu_value_set(t, v, (size_t)i, (double)(seed >> 8) / (1 << 24) * 2 - 1);
    }
    for (int i = 0; i < NQ * D; i++) o[i] = NAN;
}

/* The largest |o - reference| (float64 softmax(Q K^T / 8) V of the inputs as rounded to the dtype). */
static double worst_error(int nt, int bf) {
    kiln_dtype t = bf ? KILN_BF16 : KILN_F16;
    int nk = 64 * nt;
    double worst = 0;
    for (int r = 0; r < NQ; r++) {
        double s[KMAX], mx = -INFINITY, sum = 0;
        for (int j = 0; j < nk; j++) {
            double a = 0;
            for (int c = 0; c < D; c++) a += kiln_emu_value_get(t, q, (size_t)(r * D + c)) * kiln_emu_value_get(t, kk, (size_t)(j * D + c));
            s[j] = a * 0.125;
            mx = fmax(mx, s[j]);
        }
        for (int j = 0; j < nk; j++) sum += s[j] = exp(s[j] - mx);
        for (int c = 0; c < D; c++) {
            double want = 0;
            for (int j = 0; j < nk; j++) want += s[j] / sum * kiln_emu_value_get(t, v, (size_t)(j * D + c));
            double e = fabs((double)o[r * D + c] - want);
            if (!(e <= worst)) worst = isnan(e) ? INFINITY : e;
        }
    }
    return worst;
}

/* Runs hopattn with keys; *worst as worst_error. */
static kiln_status run_attn(const char *keys, int nt, int bf, double *worst, kiln_error *err) {
    char spec[200];
    snprintf(spec, sizeof spec, "hopattn %s", keys);
    kiln_emu_kernel *k = NULL;
    kiln_status st = kiln_emu_load(emu, gen, spec, SM90A, &k, err);
    if (st != KILN_OK) return st;
    make_inputs(nt, bf);
    float scale_log2 = (float)(0.125 * 1.4426950408889634);
    void *po = o, *pq = q, *pk = kk, *pv = v, *args[] = {&po, &pq, &pk, &pv, &scale_log2};
    kiln_emu_launch l = {.grid = {1, 1, 1}, .block = {128, 1, 1}};
    st = kiln_emu_run(k, &l, args, err);
    *worst = st == KILN_OK ? worst_error(nt, bf) : INFINITY;
    return st;
}

static kiln_emu_kernel *last_tma_kernel; /* the kernel run_attn_tma ran last */

/* Runs hopattn_tma with keys: the launch bound from its description (kiln_launch_bind builds the tensor maps
 * of q, k and v), then the emulator with those maps, run twice (thread orders ascending and descending). */
static kiln_status run_attn_tma(const char *keys, int nt, int bf, double *worst, kiln_error *err) {
    char spec[200];
    snprintf(spec, sizeof spec, "hopattn_tma %s", keys);
    kiln_emu_kernel *k = NULL;
    *worst = INFINITY;
    kiln_status st = kiln_emu_load(emu, gen, spec, SM90A, &k, err);
    if (st != KILN_OK) return st;
    last_tma_kernel = k;
    make_inputs(nt, bf);
    kiln_launch_tensor ts[] = {{"o", (kiln_devptr)(uintptr_t)o, {0}}, {"q", (kiln_devptr)(uintptr_t)q, {0}},
                               {"k", (kiln_devptr)(uintptr_t)kk, {0}}, {"v", (kiln_devptr)(uintptr_t)v, {0}}};
    kiln_launch_args a = {.tensors = ts, .ntensors = 4};
    const kiln_kernel_meta *m = kiln_emu_kernel_meta(k);
    static kiln_launch_step step;
    size_t ws = 0;
    st = kiln_launch_bind(&m, 1, 0, &a, 1, &step, &ws, err);
    if (st != KILN_OK) return st;
    static _Alignas(64) kiln_tensor_map maps[KILN_LAUNCH_TMAPS];
    void *argv[KILN_MAX_PARAMS];
    for (int i = 0; i < m->nparams; i++) argv[i] = &step.args[i];
    for (int j = 0; j < step.ntmaps; j++) maps[j] = step.tmaps[j], argv[step.tmap_param[j]] = &maps[j];
    kiln_emu_launch l = {.grid = {1, 1, 1}, .block = {256, 1, 1}, .twice = 1};
    st = kiln_emu_run(k, &l, argv, err);
    if (st == KILN_OK) *worst = worst_error(nt, bf);
    return st;
}

static void test_attn(void) {
    static const struct {
        int bf, nt;
    } rows[] = {{1, 1}, {1, 2}, {0, 2}, {0, 3}, {1, 4}};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        char keys[64], name[200];
        snprintf(keys, sizeof keys, "bf=%d nt=%d", rows[i].bf, rows[i].nt);
        snprintf(name, sizeof name, "wgmma attention tile %s d64, %d keys: float64 softmax(QK^T/8)V", rows[i].bf ? "bf16" : "f16",
                 64 * rows[i].nt);
        TEST_BEGIN(name);
        double worst = 0;
        kiln_error err = {0};
        kiln_status st = run_attn(keys, rows[i].nt, rows[i].bf, &worst, &err);
        /* P is rounded to the dtype for P V (as FlashAttention does) and |O| <= 1: bf16 2^-9, f16 2^-12 */
        double tol = rows[i].bf ? 1.0 / 512 : 1.0 / 4096;
        CHECK(st == KILN_OK, "%s", err.msg);
        CHECK(st != KILN_OK || worst <= tol, "largest error %.3g, tolerance %.3g", worst, tol);
        if (getenv("KILN_TEST_VERBOSE")) printf("     largest error %.3g (tolerance %.3g)\n", worst, tol);
        TEST_END();
    }
    static const char *const bugs[] = {"bug=1", "bug=2", "bug=3", "bug=4"};
    for (size_t i = 0; i < sizeof bugs / sizeof bugs[0]; i++) {
        char keys[64], name[200];
        snprintf(keys, sizeof keys, "bf=1 nt=2 %s", bugs[i]);
        snprintf(name, sizeof name, "wgmma attention tile planted %s is caught", bugs[i]);
        TEST_BEGIN(name);
        double worst = 0;
        kiln_error err = {0};
        kiln_status st = run_attn(keys, 2, 1, &worst, &err);
        CHECK(st != KILN_OK || worst > 1.0 / 512, "ran clean: largest error %.3g", worst);
        TEST_END();
    }
}

static void test_attn_tma(void) {
    static const struct {
        int bf, nt;
    } rows[] = {{1, 1}, {1, 3}, {0, 4}};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        char keys[64], name[240];
        snprintf(keys, sizeof keys, "bf=%d nt=%d", rows[i].bf, rows[i].nt);
        snprintf(name, sizeof name, "FA3 structure %s d64, %d keys: TMA producer, K/V ring on mbarriers, wgmma consumer, "
                 "maps from the launch description; float64, run twice", rows[i].bf ? "bf16" : "f16", 64 * rows[i].nt);
        TEST_BEGIN(name);
        double worst = 0;
        kiln_error err = {0};
        kiln_status st = run_attn_tma(keys, rows[i].nt, rows[i].bf, &worst, &err);
        double tol = rows[i].bf ? 1.0 / 512 : 1.0 / 4096;
        CHECK(st == KILN_OK, "%s", err.msg);
        CHECK(st != KILN_OK || worst <= tol, "largest error %.3g, tolerance %.3g", worst, tol);
        if (getenv("KILN_TEST_VERBOSE")) printf("     largest error %.3g (tolerance %.3g)\n", worst, tol);
        TEST_END();
    }
    static const struct {
        const char *keys, *want;
    } bugs[] = {{"bf=1 nt=3 bug=5", "race: "}, {"bf=1 nt=3 bug=6", "more arrivals than its init count"}, {"bf=1 nt=2 bug=7", "more than the 64-byte swizzle span"},
                {"bf=1 nt=2 bug=8", "race: "}, {"bf=1 nt=2 bug=9", "race: "}};
    for (size_t i = 0; i < sizeof bugs / sizeof bugs[0]; i++) {
        char name[200];
        snprintf(name, sizeof name, "FA3 structure planted '%s' is caught%s%s", bugs[i].keys, bugs[i].want[0] ? ": " : "", bugs[i].want);
        TEST_BEGIN(name);
        double worst = 0;
        kiln_error err = {0};
        int nt = atoi(strstr(bugs[i].keys, "nt=") + 3);
        kiln_status st = run_attn_tma(bugs[i].keys, nt, 1, &worst, &err);
        CHECK(st != KILN_OK || worst > 1.0 / 512, "ran clean: largest error %.3g", worst);
        if (bugs[i].want[0]) CHECK(st != KILN_OK && strstr(err.msg, bugs[i].want), "message: %s", err.msg);
        if (getenv("KILN_TEST_VERBOSE")) printf("     %s\n", st != KILN_OK ? err.msg : "wrong answers");
        TEST_END();
    }
}

/* The profile of hopattn_tma bf=1 nt=3, per warp: each consumer warp (4) runs per key tile two wgmma groups
 * (fence, 4 mma_async, commit, wait: 14) and 34 ex2 (32 P + 2 alpha); the producer's warp issues 7 TMA copies
 * (Q, then K and V per tile). These are the counts docs/hopper.md's estimate against H100/H200 starts from. */
static void test_profile(void) {
    TEST_BEGIN("the profile of the FA3-structured tile: wgmma, TMA and ex2 per warp");
    kiln_emu *pe = NULL;
    kiln_error err = {0};
    kiln_emu *keep = emu;
    kiln_status st = kiln_emu_create(&pe, &err);
    if (st == KILN_OK) kiln_emu_set_profile(pe, 1), emu = pe;
    double worst = 0;
    if (st == KILN_OK) st = run_attn_tma("bf=1 nt=3", 3, 1, &worst, &err);
    emu = keep;
    CHECK(st == KILN_OK, "%s", err.msg);
    if (st == KILN_OK) {
        kiln_emu_profile p;
        st = kiln_emu_profile_get(last_tma_kernel, &p, &err);
        CHECK(st == KILN_OK, "%s", err.msg);
        /* run twice: every count doubles */
        if (st == KILN_OK) {
            CHECK(p.inst[KILN_PROF_WGMMA] == 2 * 4 * 3 * 14, "wgmma %llu, want %d", (unsigned long long)p.inst[KILN_PROF_WGMMA], 2 * 4 * 3 * 14);
            CHECK(p.inst[KILN_PROF_TMA] == 2 * 7, "TMA %llu, want %d", (unsigned long long)p.inst[KILN_PROF_TMA], 2 * 7);
            CHECK(p.inst[KILN_PROF_EX2] == 2 * 4 * 3 * 34, "ex2 %llu, want %d", (unsigned long long)p.inst[KILN_PROF_EX2], 2 * 4 * 3 * 34);
            if (getenv("KILN_TEST_VERBOSE"))
                printf("     per run: wgmma %llu, tma %llu, mbarrier %llu, ex2 %llu, shfl %llu, other %llu warp instructions\n",
                       (unsigned long long)p.inst[KILN_PROF_WGMMA] / 2, (unsigned long long)p.inst[KILN_PROF_TMA] / 2,
                       (unsigned long long)p.inst[KILN_PROF_MBARRIER] / 2, (unsigned long long)p.inst[KILN_PROF_EX2] / 2,
                       (unsigned long long)p.inst[KILN_PROF_SHFL] / 2, (unsigned long long)p.inst[KILN_PROF_OTHER] / 2);
        }
    }
    if (pe) kiln_emu_destroy(pe);
    TEST_END();
}

static void test_ptxas(void) {
    const char *ptxas = ptxas_path();
    static const char *const specs[] = {"hopattn bf=1 nt=2", "hopattn bf=0 nt=4", "hopattn_tma bf=1 nt=3", "hopattn_tma bf=0 nt=4"};
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
        char name[160];
        snprintf(name, sizeof name, "ptxas sm_90a: '%s' assembles, 0 spills, no C7508", specs[i]);
        if (!ptxas) {
            printf("  skipped (no ptxas): %s\n", name);
            continue;
        }
        TEST_BEGIN(name);
        kiln_module *m = NULL;
        kiln_error err = {0};
        CHECK(kiln_generate(gen, specs[i], SM90A, KILN_EMIT_PTX, &m, &err) == KILN_OK, "%s", err.msg);
        if (m) {
            ptxas_job j = {.sm = SM90A};
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
            CHECK(strstr(kiln_module_text(m), "m64n64k16.f32") && strstr(kiln_module_text(m), ", 1, 1, 1;"),
                  "PTX lacks the N-major P V wgmma");
            if (getenv("KILN_TEST_VERBOSE")) printf("     %d registers, %d bytes shared\n", regs, smem);
            free(log);
            unlink(j.ptx), unlink(j.log);
            kiln_module_free(m);
        }
        TEST_END();
    }
}

int main(void) {
    if (!mkdtemp(dir)) return 1;
    char path[256];
    snprintf(path, sizeof path, "%s/hopattn.lua", dir);
    FILE *f = fopen(path, "w");
    if (f) fputs(attn_lua, f), fclose(f);
    char path2[256];
    snprintf(path2, sizeof path2, "%s/hopattn_tma.lua", dir);
    if ((f = fopen(path2, "w"))) fputs(attn_tma_lua, f), fclose(f);
    kiln_gen_options o = {.template_dir = dir};
    kiln_error err = {0};
    if (kiln_gen_create(&gen, &o, &err) != KILN_OK || kiln_emu_create(&emu, &err) != KILN_OK) {
        printf("hopper_attn: setup: %s\nhopper_attn: 0 passed, 1 failed\n", err.msg);
        return 1;
    }
    test_attn();
    test_attn_tma();
    test_profile();
    test_ptxas();
    kiln_emu_destroy(emu);
    kiln_gen_destroy(gen);
    unlink(path), unlink(path2);
    rmdir(dir);
    return check_summary("hopper_attn");
}
