/* tests/wgmma_oom_test.c - out of memory in the wgmma lowering (gen/gen_wgmma_lower.c) and in the emulator's
 * wgmma op table (emu/emu_wgmma.c) is reported as an error through kiln_generate and kiln_emu_load, never an
 * abort. A process of its own: the op table is built once per process. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "kiln/emu.h"
#include "kiln/gen.h"

#define SM90A (KILN_SM_ARCH + 90)

/* the allocators the two places use, replaced here (gen/gen.h, emu/emu.h) */
extern void *(*gen_wgmma_lower_realloc)(void *, size_t);
extern void *(*emu_wgmma_ops_malloc)(size_t);

static int allow; /* allocations that succeed before the planted failures start */

static void *failing_realloc(void *p, size_t n) { return allow-- > 0 ? realloc(p, n) : NULL; }
static void *failing_malloc(size_t n) { return allow-- > 0 ? malloc(n) : NULL; }

/* One warpgroup: D = A B with A and B in shared memory (what they hold does not matter here). */
static const char *oom_lua =
    "local K = { params = { } }\n"
    "function K.config(spec, t) return { block = 128, grid_tile = 1, arch_specific = t.arch } end\n"
    "function K.build(b, spec, cfg)\n"
    "  local p = b:kernel{ params = { { 'y', 'ptr', 'f32' } } }\n"
    "  local sa, sb = b:shared('bf16', 64 * 16, 128), b:shared('bf16', 16 * 16, 128)\n"
    "  b:wgmma_fence()\n"
    "  local acc = b:wgmma{ n = 16, type = 'bf16', a = b:wgmma_desc(sa, { lbo = 128, sbo = 256 }),\n"
    "                       b = b:wgmma_desc(sb, { lbo = 128, sbo = 256 }) }\n"
    "  b:wgmma_commit()\n"
    "  acc = b:wgmma_wait(0, acc)\n"
    "  b:store(p.y + b:tid(), acc[1])\n"
    "end\nreturn K\n";

static char dir[] = "/tmp/kiln-wgmma-oom-XXXXXX";

int main(void) {
    if (!mkdtemp(dir)) return 1;
    char path[256];
    snprintf(path, sizeof path, "%s/wgoom.lua", dir);
    FILE *f = fopen(path, "w");
    if (f) fputs(oom_lua, f), fclose(f);
    kiln_gen *gen = NULL;
    kiln_emu *emu = NULL;
    kiln_gen_options o = {.template_dir = dir};
    kiln_error err = {0};
    if (kiln_gen_create(&gen, &o, &err) != KILN_OK || kiln_emu_create(&emu, &err) != KILN_OK) {
        printf("wgmma_oom: setup: %s\nwgmma_oom: 0 passed, 1 failed\n", err.msg);
        return 1;
    }
    static const int allows[] = {0, 1, 3, 6};
    for (size_t i = 0; i < sizeof allows / sizeof allows[0]; i++) {
        char name[128];
        snprintf(name, sizeof name, "lowering out of memory after %d allocations: kiln_generate fails with ENOMEM", allows[i]);
        TEST_BEGIN(name);
        kiln_module *m = NULL;
        allow = allows[i];
        gen_wgmma_lower_realloc = failing_realloc;
        kiln_status st = kiln_generate(gen, "wgoom", SM90A, KILN_EMIT_PTX, &m, &err);
        gen_wgmma_lower_realloc = realloc;
        CHECK(st == KILN_ENOMEM && strstr(err.msg, "out of memory lowering the wgmma"), "status %d: %s", st,
              st ? err.msg : "generated");
        kiln_module_free(m);
        TEST_END();
    }
    TEST_BEGIN("the lowering with memory: PTX with wgmma.mma_async");
    {
        kiln_module *m = NULL;
        kiln_status st = kiln_generate(gen, "wgoom", SM90A, KILN_EMIT_PTX, &m, &err);
        CHECK(st == KILN_OK && strstr(kiln_module_text(m), "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16"), "%s",
              st ? err.msg : "no wgmma.mma_async in the PTX");
        kiln_module_free(m);
    }
    TEST_END();
    TEST_BEGIN("the emulator's wgmma op table out of memory: kiln_emu_load fails with ENOMEM, every time");
    {
        allow = 40;
        emu_wgmma_ops_malloc = failing_malloc;
        for (int rep = 0; rep < 2; rep++) {
            kiln_emu_kernel *k = NULL;
            kiln_status st = kiln_emu_load(emu, gen, "wgoom", SM90A, &k, &err);
            CHECK(st == KILN_ENOMEM && strstr(err.msg, "out of memory building the table of wgmma"), "load %d: status %d: %s",
                  rep, st, st ? err.msg : "loaded");
        }
        emu_wgmma_ops_malloc = malloc;
    }
    TEST_END();
    kiln_emu_destroy(emu);
    kiln_gen_destroy(gen);
    unlink(path);
    rmdir(dir);
    return check_summary("wgmma_oom");
}
