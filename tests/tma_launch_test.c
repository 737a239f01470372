/* tests/tma_launch_test.c - a TMA kernel launched end to end: kiln_launch binds its tensor map from the launch
 * description, the (fake) driver's cuTensorMapEncodeTiled encodes it, and the emulator runs the kernel with the
 * very 128 bytes the driver was handed; bad maps, an old driver and a bad kiln_kernel_launch each give one error. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "fake_cuda/fake_cuda.h"
#include "kiln/emu.h"
#include "kiln/gen.h"
#include "kiln/runtime.h"
#include "kiln/tensor_map.h"

#define SM90A (KILN_SM_ARCH + 90)

/* A producer thread streams `iters` boxes of {8 rows, b0 columns} of x [h, w] (f32) through a two-stage
 * ring (TMA into shared memory, full/empty mbarriers) to a consumer warpgroup, which writes each box to y
 * densely, undoing the swizzle. The launch description declares x with the tensor map tm over it (box
 * {box1, b0}: box1 is 8 unless a test asks for a bad one) and y. */
static const char *tmal_lua =
    "local K = { params = {\n"
    "  { name = 'iters', type = 'int', default = 6, min = 1, max = 12 },\n"
    "  { name = 'b0', type = 'int', default = 32, min = 4, max = 64 },\n"
    "  { name = 'box1', type = 'int', default = 8, min = 1, max = 1024 },\n"
    "  { name = 'swz', type = 'int', default = 0, min = 0, max = 128 } } }\n"
    "function K.config(spec, t) return { block = 256, grid_tile = 1, arch_specific = t.arch } end\n"
    "function K.launch(spec, cfg)\n"
    "  return { tensors = { { 'y', 'out', { spec.iters * spec.b0 * 8 } }, { 'x', 'in', { 'h', 'w' } } },\n"
    "           scalars = { { 'h' }, { 'w' } }, problem = { 1 },\n"
    "           tmaps = { { 'tm', 'x', box = { spec.box1, spec.b0 }, swizzle = spec.swz > 0 and spec.swz or nil } } }\n"
    "end\n"
    "local MASK = { [32] = 1, [64] = 3, [128] = 7 }\n"
    "function K.build(b, spec, cfg)\n"
    "  local p = b:kernel{ params = { { 'y', 'ptr', 'f32' }, { 'tm', 'tensormap', 'f32' } } }\n"
    "  local B0, NB = spec.b0, spec.b0 * 8\n"
    "  local BYTES = NB * 4\n"
    "  local STAGE = ((BYTES + 1023) // 1024) * 1024\n"
    "  local data = b:shared('f32', 2 * STAGE // 4, 1024)\n"
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
    "      b:mbarrier_arrive(full + 2 * s, { tx = b:i32(BYTES) })\n"
    "      b:tma_load(data + s * (STAGE // 4), p.tm, { (it % 3) * B0, (it // 3) * 8 }, full + 2 * s)\n"
    "    end)\n"
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

enum { H = 20, W = 80, PAD = 96, ITERS_MAX = 12, BOXMAX = 64 * 8 };

static char dir[] = "/tmp/kiln-tma-launch-XXXXXX";
static kiln_gen *gen;
static kiln_emu *emu;
static fake_cuda_api fake;

static int ready(const char *spec, kiln_rt **rt, kiln_kernel **k, kiln_error *err) {
    kiln_module *m = NULL;
    kiln_status st = kiln_generate(gen, spec, SM90A, KILN_EMIT_PTX, &m, err);
    kiln_rt_options o = {.no_disk_cache = 1};
    setenv("FAKE_CUDA_SM", "90", 1);
    if (st == KILN_OK) st = kiln_rt_create(rt, &o, err);
    if (st == KILN_OK) st = kiln_rt_load_module(*rt, kiln_module_text(m), kiln_module_size(m), KILN_PAYLOAD_PTX, NULL, k, err);
    kiln_module_free(m);
    return st;
}

/* x [H, W] f32 with rows of `ld` elements; the reference of box `it` (coords {(it%3)*b0, (it/3)*8}). */
static _Alignas(256) float x[H * PAD + 64], y[ITERS_MAX * BOXMAX];

static long compare(int iters, int b0, int ld) {
    long bad = 0;
    for (int it = 0; it < iters; it++)
        for (int e = 0; e < b0 * 8; e++) {
            int gx = it % 3 * b0 + e % b0, gy = it / 3 * 8 + e / b0;
            float want = gx < W && gy < H ? x[gy * ld + gx] : 0.0f;
            if (y[it * b0 * 8 + e] != want) bad++;
        }
    return bad;
}

/* Launches "tmalaunch KEYS" through kiln_launch with x (rows of ld elements, at x + shift floats), then runs
 * the emulator with the launch the fake driver recorded. *bad: wrong outputs; *record_same: whether the
 * driver's 128 bytes are kiln_launch_bind's record. Returns the launch's status (err filled). */
static kiln_status launch(const char *keys, int iters, int b0, int ld, int shift, long *bad, int *record_same, kiln_error *err) {
    char spec[200];
    snprintf(spec, sizeof spec, "tmalaunch %s", keys);
    kiln_rt *rt = NULL;
    kiln_kernel *k = NULL;
    *bad = -1, *record_same = 0;
    kiln_status st = ready(spec, &rt, &k, err);
    for (int i = 0; i < H * PAD + 64; i++) x[i] = (float)(i % 1000) + 0.25f;
    for (int i = 0; i < ITERS_MAX * BOXMAX; i++) y[i] = -1.0f;
    kiln_launch_tensor ts[] = {{"x", (kiln_devptr)(uintptr_t)(x + shift), {ld != W ? ld : 0, ld != W ? 1 : 0}},
                               {"y", (kiln_devptr)(uintptr_t)y, {0}}};
    kiln_launch_scalar ss[] = {{"h", H}, {"w", W}};
    kiln_launch_args a = {.tensors = ts, .ntensors = 2, .scalars = ss, .nscalars = 2};
    fake.reset();
    if (st == KILN_OK) st = kiln_launch(k, &a, err);
    fake_cuda_launch l;
    if (st == KILN_OK && fake.last_launch(&l) && l.nparams == 2 && l.param_size[1] == 128 && l.ntmaps == 1) {
        /* the binding's record, as the emulator's case runner would hand it over */
        const kiln_kernel_meta *meta = kiln_kernel_get_meta(k);
        kiln_launch_step step;
        size_t ws = 0;
        kiln_error e2 = {0};
        if (kiln_launch_bind(&meta, 1, 0, &a, 1, &step, &ws, &e2) == KILN_OK && step.ntmaps == 1)
            *record_same = !memcmp(&step.tmaps[0], l.tmap[0], 128);
        kiln_emu_kernel *ek = NULL;
        st = kiln_emu_load(emu, gen, spec, SM90A, &ek, err);
        static _Alignas(64) unsigned char map[128];
        memcpy(map, l.tmap[0], 128);
        void *py = (void *)(uintptr_t)l.param[0], *args[] = {&py, map};
        kiln_emu_launch el = {.grid = {l.grid[0], l.grid[1], l.grid[2]}, .block = {l.block[0], l.block[1], l.block[2]}};
        if (st == KILN_OK) st = kiln_emu_run(ek, &el, args, err);
        if (st == KILN_OK) *bad = compare(iters, b0, ld);
    }
    if (rt) kiln_rt_destroy(rt);
    return st;
}

static void test_end_to_end(void) {
    static const struct {
        const char *keys;
        int iters, b0, ld;
    } rows[] = {{"iters=6 b0=32", 6, 32, W}, {"iters=12 b0=32 swz=128", 12, 32, W}, {"iters=7 b0=16 swz=64", 7, 16, PAD},
                {"iters=5 b0=8 swz=32", 5, 8, W}};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        char name[200];
        snprintf(name, sizeof name, "kiln_launch -> cuTensorMapEncodeTiled -> emulator: %s, rows of %d", rows[i].keys, rows[i].ld);
        TEST_BEGIN(name);
        long bad;
        int same;
        kiln_error err = {0};
        kiln_status st = launch(rows[i].keys, rows[i].iters, rows[i].b0, rows[i].ld, 0, &bad, &same, &err);
        fake_cuda_counts c;
        fake.counters(&c);
        CHECK(st == KILN_OK, "%s", err.msg);
        CHECK(st != KILN_OK || (c.tmap_encodes == 1 && c.launches == 1), "%d encodes, %d launches", c.tmap_encodes, c.launches);
        CHECK(st != KILN_OK || same, "the driver's map differs from kiln_launch_bind's record");
        CHECK(st != KILN_OK || bad == 0, "%ld wrong outputs", bad);
        TEST_END();
    }
}

/* Bad inputs: one error each, naming the problem; nothing reaches the driver's encoder or launch. */
static void test_bad(void) {
    static const struct {
        const char *keys;
        int ld, shift;
        const char *want;
    } rows[] = {
        {"b0=32", W, 1, "is not 16-byte aligned"},                            /* base 4 bytes off */
        {"b0=32", W + 2, 0, "must be a multiple of 16"},                      /* rows of 328 bytes */
        {"b0=32 box1=300", W, 0, "box dimension 1 is 300 elements; valid 1..256"},
        {"b0=64 swz=128", W, 0, "more than the 128-byte swizzle span"},       /* 256-byte box rows */
        {"b0=32 swz=64", W, 0, "more than the 64-byte swizzle span"},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        char name[200];
        snprintf(name, sizeof name, "bad tensor map refused: %s, rows of %d, base +%d floats", rows[i].keys, rows[i].ld, rows[i].shift);
        TEST_BEGIN(name);
        long bad;
        int same;
        kiln_error err = {0};
        kiln_status st = launch(rows[i].keys, 1, 32, rows[i].ld, rows[i].shift, &bad, &same, &err);
        fake_cuda_counts c;
        fake.counters(&c);
        CHECK(st == KILN_EINVAL && strstr(err.msg, rows[i].want) && strstr(err.msg, "tensor map 'tm' of tensor x"),
              "status %d: %s", st, err.msg);
        CHECK(c.launches == 0 && c.tmap_encodes == 0, "%d launches, %d encodes", c.launches, c.tmap_encodes);
        TEST_END();
    }
    TEST_BEGIN("a tensor map over a tensor whose rows are not contiguous is refused");
    {
        kiln_rt *rt = NULL;
        kiln_kernel *k = NULL;
        kiln_error err = {0};
        kiln_status st = ready("tmalaunch", &rt, &k, &err);
        kiln_launch_tensor ts[] = {{"x", (kiln_devptr)(uintptr_t)x, {2 * W, 2}}, {"y", (kiln_devptr)(uintptr_t)y, {0}}};
        kiln_launch_scalar ss[] = {{"h", H}, {"w", W}};
        kiln_launch_args a = {.tensors = ts, .ntensors = 2, .scalars = ss, .nscalars = 2};
        if (st == KILN_OK) st = kiln_launch(k, &a, &err);
        CHECK(st == KILN_EINVAL && strstr(err.msg, "innermost stride is 2 elements"), "status %d: %s", st, err.msg);
        /* the low-level launch: a tensor map argument must point at an encoded, aligned map */
        kiln_arg args[2] = {{.ptr = (kiln_devptr)(uintptr_t)y}, {.tmap = NULL}};
        unsigned grid[3] = {1, 1, 1};
        st = k ? kiln_kernel_launch(k, grid, args, 2, NULL, &err) : KILN_EINVAL;
        CHECK(st == KILN_EINVAL && strstr(err.msg, "must point at an encoded tensor map"), "status %d: %s", st, err.msg);
        args[1].tmap = (const unsigned char *)y + 4;
        st = k ? kiln_kernel_launch(k, grid, args, 2, NULL, &err) : KILN_EINVAL;
        CHECK(st == KILN_EINVAL && strstr(err.msg, "64-byte aligned"), "status %d: %s", st, err.msg);
        if (rt) kiln_rt_destroy(rt);
    }
    TEST_END();
}

/* A driver without cuTensorMapEncodeTiled (before CUDA 12.0): the runtime opens, a TMA launch says why not. */
static void test_old_driver(void) {
    TEST_BEGIN("a driver without cuTensorMapEncodeTiled: a TMA launch names the entry point");
    char path[1024];
    const char *o = getenv("O");
    snprintf(path, sizeof path, "%s/tests/libfakecuda_old.so.1", o && *o ? o : "build");
    setenv("KILN_CUDA_DRIVER", path, 1);
    kiln_rt *rt = NULL;
    kiln_kernel *k = NULL;
    kiln_error err = {0};
    kiln_status st = ready("tmalaunch", &rt, &k, &err);
    kiln_launch_tensor ts[] = {{"x", (kiln_devptr)(uintptr_t)x, {0}}, {"y", (kiln_devptr)(uintptr_t)y, {0}}};
    kiln_launch_scalar ss[] = {{"h", H}, {"w", W}};
    kiln_launch_args a = {.tensors = ts, .ntensors = 2, .scalars = ss, .nscalars = 2};
    CHECK(st == KILN_OK, "the runtime must open without it: %s", err.msg);
    if (st == KILN_OK) st = kiln_launch(k, &a, &err);
    CHECK(st == KILN_ENODRIVER && strstr(err.msg, "no cuTensorMapEncodeTiled") && strstr(err.msg, "tensor map 'tm'"),
          "status %d: %s", st, err.msg);
    if (rt) kiln_rt_destroy(rt);
    setenv("KILN_CUDA_DRIVER", fake_cuda_path(), 1);
    TEST_END();
}

/* The generator refuses a tensormap parameter without a tmap line, and a tmap over an undeclared tensor. */
static const char *nomap_lua =
    "local K = { params = { { name = 'case', type = 'int', default = 0, min = 0, max = 1 } } }\n"
    "function K.config(spec, t) return { block = 128, grid_tile = 1, arch_specific = t.arch } end\n"
    "function K.launch(spec, cfg)\n"
    "  local d = { tensors = { { 'y', 'out', { 1 } } }, problem = { 1 } }\n"
    "  if spec.case == 1 then d.tmaps = { { 'tm', 'z', box = { 1 } } } end\n"
    "  return d\n"
    "end\n"
    "function K.build(b, spec, cfg)\n"
    "  local p = b:kernel{ params = { { 'y', 'ptr', 'f32' }, { 'tm', 'tensormap' } } }\n"
    "  b:store(p.y, b:f32(0))\n"
    "end\nreturn K\n";

static void test_gen_refusals(void) {
    static const char *const want[] = {"declares no tmap for the kernel's parameter 'tm'", "names the undeclared tensor 'z'"};
    for (int c = 0; c < 2; c++) {
        char spec[64], name[128];
        snprintf(spec, sizeof spec, "tmanomap case=%d", c);
        snprintf(name, sizeof name, "generator refuses: %s", want[c]);
        TEST_BEGIN(name);
        kiln_module *m = NULL;
        kiln_error err = {0};
        kiln_status st = kiln_generate(gen, spec, SM90A, KILN_EMIT_PTX, &m, &err);
        CHECK(st == KILN_EGEN && strstr(err.msg, want[c]), "status %d: %s", st, err.msg);
        kiln_module_free(m);
        TEST_END();
    }
}

/* A tensor map over a workspace tensor (FA3's dQ writer adds into dq_acc through one): acc [h, w] f32 is carved
 * from the launch's workspace, not given, and its map's base is its carved place. */
static const char *wsmap_lua =
    "local K = { params = {} }\n"
    "function K.config(spec, t) return { block = 128, grid_tile = 1, arch_specific = t.arch } end\n"
    "function K.launch(spec, cfg)\n"
    "  return { tensors = { { 'y', 'out', { 1 } }, { 'acc', 'workspace', { 'h', 'w' }, align = 16 } },\n"
    "           scalars = { { 'h' }, { 'w' } }, problem = { 1 }, tmaps = { { 'tm', 'acc', box = { 8, 32 } } } }\n"
    "end\n"
    "function K.build(b, spec, cfg)\n"
    "  local p = b:kernel{ params = { { 'y', 'ptr', 'f32' }, { 'tm', 'tensormap', 'f32' } } }\n"
    "  b:store(p.y, b:f32(0))\n"
    "end\nreturn K\n";

static void test_workspace_map(void) {
    TEST_BEGIN("a tensor map over a workspace tensor: base = the carved place, f32, the tensor's dims");
    kiln_rt *rt = NULL;
    kiln_kernel *k = NULL;
    kiln_error err = {0};
    kiln_status st = ready("tmawsmap", &rt, &k, &err);
    kiln_launch_tensor ts[] = {{"y", (kiln_devptr)(uintptr_t)y, {0}}};
    kiln_launch_scalar ss[] = {{"h", H}, {"w", W}};
    kiln_launch_args a = {.tensors = ts, .ntensors = 1, .scalars = ss, .nscalars = 2};
    kiln_launch_step step;
    size_t ws = 0;
    const kiln_devptr WS = 0x100000;
    if (st == KILN_OK) {
        const kiln_kernel_meta *meta = kiln_kernel_get_meta(k);
        st = kiln_launch_bind(&meta, 1, 0, &a, 1, &step, &ws, &err); /* the workspace's size */
        if (st == KILN_OK) {
            a.workspace = WS, a.workspace_bytes = ws;
            st = kiln_launch_bind(&meta, 1, 0, &a, 1, &step, &ws, &err);
        }
    }
    CHECK(st == KILN_OK, "%s", err.msg);
    if (st == KILN_OK) {
        const kiln_tensor_map *r = &step.tmaps[0];
        CHECK(step.ntmaps == 1 && r->base >= WS && r->base + (uint64_t)H * W * 4 <= WS + ws && r->base % 16 == 0,
              "base 0x%llx, workspace 0x%llx + %zu", (unsigned long long)r->base, (unsigned long long)WS, ws);
        CHECK(r->data_type == KILN_TMAP_TYPE_FLOAT32 && r->elem_bytes == 4 && r->dims[0] == W && r->dims[1] == H &&
                  r->strides[0] == W * 4 && r->box[0] == 32 && r->box[1] == 8,
              "type %u, dims %llu x %llu, box %u x %u", r->data_type, (unsigned long long)r->dims[0],
              (unsigned long long)r->dims[1], r->box[0], r->box[1]);
    }
    if (rt) kiln_rt_destroy(rt);
    TEST_END();
}

static void write_template(const char *name, const char *text) {
    char path[256];
    snprintf(path, sizeof path, "%s/%s.lua", dir, name);
    FILE *f = fopen(path, "w");
    if (f) fputs(text, f), fclose(f);
}

int main(void) {
    if (!mkdtemp(dir) || fake_cuda_open(&fake)) return 1;
    write_template("tmalaunch", tmal_lua);
    write_template("tmanomap", nomap_lua);
    write_template("tmawsmap", wsmap_lua);
    kiln_gen_options o = {.template_dir = dir};
    kiln_error err = {0};
    if (kiln_gen_create(&gen, &o, &err) != KILN_OK || kiln_emu_create(&emu, &err) != KILN_OK) {
        printf("tma_launch: setup: %s\ntma_launch: 0 passed, 1 failed\n", err.msg);
        return 1;
    }
    test_end_to_end();
    test_bad();
    test_old_driver();
    test_gen_refusals();
    test_workspace_map();
    kiln_emu_destroy(emu);
    kiln_gen_destroy(gen);
    char path[256];
    snprintf(path, sizeof path, "%s/tmalaunch.lua", dir), unlink(path);
    snprintf(path, sizeof path, "%s/tmanomap.lua", dir), unlink(path);
    snprintf(path, sizeof path, "%s/tmawsmap.lua", dir), unlink(path);
    rmdir(dir);
    return check_summary("tma_launch");
}
