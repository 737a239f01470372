/* tests/gpukit_tmap_test.c - the GPU kit's two launch routes (kit_launch: the generic launch; kit_launch_by_name:
 * parameters by name) pass a TMA kernel's tensor maps, on the fake driver: kiln's record of x as the driver
 * encoded it reaches the launch as a 128-byte parameter; a case whose tensor breaks the map's rules is refused. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "fake_cuda/fake_cuda.h"
#include "kiln/gen.h"
#include "kiln/tensor_map.h"
/* the kit's sources are not in a library: compiled into this test as they are into the kit */
#include "../bench/gpu/kit_case.c"
#include "../bench/gpu/kit_launch.c"

/* One box of {8 rows, 32 f32} of x [h, w] at row 8 by TMA (128-byte swizzle) into shared memory, then to y. */
static const char *tmaone_lua =
    "local K = { params = { { name = 'row0', type = 'int', default = 8, min = 0, max = 64 } } }\n"
    "function K.config(spec, t) return { block = 128, grid_tile = 1 } end\n"
    "function K.launch(spec, cfg)\n"
    "  return { tensors = { { 'y', 'out', { 256 } }, { 'x', 'in', { 'h', 'w' } } }, scalars = { { 'h' }, { 'w' } },\n"
    "           problem = { 1 }, tmaps = { { 'tm', 'x', box = { 8, 32 }, swizzle = 128 } } }\n"
    "end\n"
    "function K.build(b, spec, cfg)\n"
    "  local p = b:kernel{ params = { { 'y', 'ptr', 'f32' }, { 'tm', 'tensormap', 'f32' } } }\n"
    "  local data = b:shared('f32', 256, 1024)\n"
    "  local bar = b:shared('f32', 2, 8)\n"
    "  local t = b:tid()\n"
    "  b:if_(b:eq(t, 0), function()\n"
    "    b:mbarrier_init(bar, 1)\n"
    "    b:mbarrier_arrive(bar, { tx = b:i32(1024) })\n"
    "    b:tma_load(data, p.tm, { 0, spec.row0 }, bar)\n"
    "  end)\n"
    "  b:barrier()\n"
    "  b:mbarrier_wait(bar, 0)\n"
    "  for j = 0, 1 do\n"
    "    local off = (t + 128 * j) * 4\n"
    "    off = off ~ (((off >> 7) & 7) << 4)\n"
    "    b:store(p.y + (t + 128 * j), b:load(data + off // 4))\n"
    "  end\n"
    "end\nreturn K\n";

static fake_cuda_api fake;
static char dir[] = "/tmp/kiln_kit_tmap_XXXXXX";
static float xs[24 * 64];

/* A case over x [24, 64] f32 declared as h x w (the map's dims) and y [256]. */
static void make_case(kit_case *c, double w) {
    memset(c, 0, sizeof *c);
    snprintf(c->name, sizeof c->name, "tmaone");
    snprintf(c->family, sizeof c->family, "tmaone");
    snprintf(c->spec, sizeof c->spec, "tmaone row0=8");
    c->problem[0] = c->problem[1] = c->problem[2] = 1;
    c->ntensors = 2;
    c->tensors[0] = (kit_tensor){.name = "y", .dtype = KILN_F32, .role = KIT_OUT, .count = 256};
    c->tensors[1] = (kit_tensor){.name = "x", .dtype = KILN_F32, .role = KIT_IN, .count = 24 * 64, .data = xs};
    c->nscalars = 2;
    c->scalars[0] = (kit_scalar){.name = "h", .value = 20};
    c->scalars[1] = (kit_scalar){.name = "w", .value = w};
}

static void check_route(kiln_rt *rt, int by_name) {
    char name[160];
    snprintf(name, sizeof name, "kit %s: the TMA kernel's map of x reaches the launch as kiln's record",
             by_name ? "kit_launch_by_name" : "kit_launch (generic)");
    TEST_BEGIN(name);
    kit_case c;
    make_case(&c, 64);
    kit_device_args d = {0};
    kiln_error e = {0};
    kiln_kernel *k = NULL;
    kiln_status st = kit_upload(rt, &c, &d, &e);
    if (st == KILN_OK) st = by_name ? kit_launch_by_name(rt, &c, &d, &k, &e) : kit_launch(rt, &c, &d, &k, &e);
    CHECK(st == KILN_OK, "%s", e.msg);
    fake_cuda_launch l;
    CHECK(st == KILN_OK && fake.last_launch(&l) && l.ntmaps == 1, "one map launched");
    if (st == KILN_OK && l.ntmaps == 1) {
        kiln_tensor_map m;
        memcpy(&m, l.tmap[0], sizeof m);
        CHECK(m.magic == KILN_TMAP_MAGIC && m.rank == 2 && m.elem_bytes == 4 && m.swizzle == KILN_TMAP_SWIZZLE_128B,
              "record %08x rank %u elem %u swizzle %u", m.magic, m.rank, m.elem_bytes, m.swizzle);
        CHECK(m.base == d.ptr[1] && m.dims[0] == 64 && m.dims[1] == 20 && m.strides[0] == 256 && m.box[0] == 32 &&
                  m.box[1] == 8,
              "base %llx (x %llx) dims %llu x %llu stride %llu box %u x %u", (unsigned long long)m.base,
              (unsigned long long)d.ptr[1], (unsigned long long)m.dims[0], (unsigned long long)m.dims[1],
              (unsigned long long)m.strides[0], m.box[0], m.box[1]);
        CHECK(l.param[0] == d.ptr[0], "y passed");
    }
    kit_free_device(rt, &c, &d);
    /* w = 62: x's rows are 248 bytes, not a multiple of 16: refused before the driver, naming the map */
    make_case(&c, 62);
    st = kit_upload(rt, &c, &d, &e);
    if (st == KILN_OK) st = by_name ? kit_launch_by_name(rt, &c, &d, &k, &e) : kit_launch(rt, &c, &d, &k, &e);
    CHECK(st != KILN_OK && strstr(e.msg, "'tm'") && strstr(e.msg, "16"), "bad stride: %s", st == KILN_OK ? "launched" : e.msg);
    kit_free_device(rt, &c, &d);
    TEST_END();
}

int main(void) {
    if (!mkdtemp(dir) || fake_cuda_open(&fake) != 0) {
        printf("gpukit_tmap: 0 passed, 1 failed\n");
        return 1;
    }
    char path[256];
    snprintf(path, sizeof path, "%s/tmaone.lua", dir);
    FILE *f = fopen(path, "w");
    if (f) fputs(tmaone_lua, f), fclose(f);
    for (int i = 0; i < 24 * 64; i++) xs[i] = (float)i;
    setenv("KILN_TEMPLATE_DIR", dir, 1); /* the runtime's generator reads the template here */
    setenv("KILN_CACHE", "0", 1);
    setenv("FAKE_CUDA_SM", "90", 1);
    kiln_rt_use_generator();
    kiln_rt *rt = NULL;
    kiln_error e;
    kiln_rt_options o = {.no_disk_cache = 1};
    if (kiln_rt_create(&rt, &o, &e) != KILN_OK) {
        printf("gpukit_tmap: runtime: %s\ngpukit_tmap: 0 passed, 1 failed\n", e.msg);
        return 1;
    }
    check_route(rt, 0);
    check_route(rt, 1);
    kiln_rt_destroy(rt);
    unlink(path);
    rmdir(dir);
    return check_summary("gpukit_tmap");
}
