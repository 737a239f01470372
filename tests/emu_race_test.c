/* tests/emu_race_test.c - the emulator's race mode (kiln_emu_launch.race, emu/emu_hb.c): planted kernels whose
 * shared-memory races it must report (a missing barrier before another warp's read, a write-after-read that
 * leaves the same bytes, where `twice` sees nothing, a named barrier with too few participants, an mbarrier
 * arrival before the write it should publish, a warp reading another lane's store without a warp sync, a TMA
 * stage read after waiting on another stage's mbarrier), the same kernels synchronized running clean, one representative case per kernel family with the mode on, and the
 * mode's cost (time per case on and off). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "kiln/emu.h"
#include "kiln/emu_case.h"
#include "kiln/gen.h"
#include "kiln/tensor_map.h"

#define SM90A (KILN_SM_ARCH + 90)

/* racy: 64 threads, y gets 32 values, x is shared.
 * case 0 (RAW): warp 0 stores x[t] = 3t + 1; b:barrier(); warp 1 reads x[t - 32] into y. bug=1: no barrier.
 * case 1 (WAR, same bytes): as case 0, then warp 0 stores the same values into x again after a second barrier.
 *   bug=1: that second barrier left out: warp 1's read and warp 0's rewrite are unordered, but either order
 *   leaves the same bytes, so `twice` cannot see it.
 * case 2 (named barrier): warp 0 stores x, both warps b:bar_sync(5, n), warp 1 reads. n = 64; bug=1: n = 32
 *   (each warp completes a phase alone: too few participants).
 * case 3 (mbarrier, sm_90a): thread 0 inits an mbarrier for 32 arrivals; b:barrier(); warp 0 stores x[t] and
 *   arrives; warp 1 waits on phase 0 and reads. bug=1: warp 0 arrives before its store.
 * case 4 (warp sync): warp 0 only: lane l stores x[l], b:shfl (a warp sync), reads x[31 - l]. bug=1: the
 *   shuffle left out (the lanes' accesses unordered).
 * case 5 (cp.async): threads 0..7 copy src into x (16 bytes each), commit and wait; b:barrier(); warp 1 reads;
 *   b:barrier(). bug=1: the wait moved after the second barrier: warp 1 reads bytes whose copy is in flight
 *   (ordered after the issue by the first barrier and before the wait by the second: only the in-flight
 *   rule sees it). */
static const char *racy_lua =
    "local K = { params = {\n"
    "  { name = 'case', type = 'int', default = 0, min = 0, max = 5 },\n"
    "  { name = 'bug', type = 'int', default = 0, min = 0, max = 1 } } }\n"
    "function K.config(spec, t) return { block = 64, grid_tile = 1 } end\n"
    "function K.build(b, spec, cfg)\n"
    "  local p = b:kernel{ params = { { 'y', 'ptr', 'f32' }, { 'src', 'ptr', 'f32' } } }\n"
    "  local bug, case = spec.bug, spec.case\n"
    "  local x = b:shared('f32', 32, 16)\n"
    "  local t = b:tid()\n"
    "  local function write() b:if_(b:lt(t, 32), function() b:store(x + t, b:f32(t * 3 + 1)) end) end\n"
    "  local function read() b:if_(b:ge(t, 32), function() b:store(p.y + (t - 32), b:load(x + (t - 32))) end) end\n"
    "  if case == 0 or case == 1 then\n"
    "    write()\n"
    "    if not (case == 0 and bug == 1) then b:barrier() end\n"
    "    read()\n"
    "    if case == 1 then\n"
    "      if bug == 0 then b:barrier() end\n"
    "      write()\n"
    "    end\n"
    "  elseif case == 2 then\n"
    "    write()\n"
    "    b:bar_sync(5, bug == 1 and 32 or 64)\n"
    "    read()\n"
    "  elseif case == 3 then\n"
    "    local bar = b:shared('f32', 2, 8)\n"
    "    b:if_(b:eq(t, 0), function() b:mbarrier_init(bar, 32) end)\n"
    "    b:barrier()\n"
    "    b:if_(b:lt(t, 32), function()\n"
    "      if bug == 1 then b:mbarrier_arrive(bar) end\n"
    "      b:store(x + t, b:f32(t * 3 + 1))\n"
    "      if bug == 0 then b:mbarrier_arrive(bar) end\n"
    "    end)\n"
    "    b:if_(b:ge(t, 32), function()\n"
    "      b:mbarrier_wait(bar, 0)\n"
    "      b:store(p.y + (t - 32), b:load(x + (t - 32)))\n"
    "    end)\n"
    "  elseif case == 5 then\n"
    "    b:if_(b:lt(t, 8), function() b:cp_async(x + t * 4, p.src + t * 4) end)\n"
    "    b:cp_async_commit()\n"
    "    if bug == 0 then b:cp_async_wait(0) end\n"
    "    b:barrier()\n"
    "    read()\n"
    "    b:barrier()\n"
    "    if bug == 1 then b:cp_async_wait(0) end\n"
    "  else\n"
    "    b:if_(b:lt(t, 32), function()\n"
    "      b:store(x + t, b:f32(t * 3 + 1))\n"
    "      local v = b:f32(t)\n"
    "      if bug == 0 then v = b:shfl('idx', v, 0) end\n"
    "      b:store(p.y + t, b:load(x + (31 - t)) + v * 0.0)\n"
    "    end)\n"
    "  end\n"
    "end\nreturn K\n";

/* tmarace: 96 threads; thread 64 (the producer) announces 128 bytes on each of two mbarriers and issues a TMA
 * copy of one 32-float row into each of two stages (stage s completes on mbarrier s); warp 0 waits on both
 * mbarriers and copies both stages to y[0..63]. helper=1: warp 1 also waits on mbarrier 0 and copies stage 0
 * to y[64..95]. bug=1: warp 0 waits on mbarrier 1 only (stage 0 read without waiting on its own barrier).
 * Without the helper, the scheduler must land stage 1's copy (warp 0 waits for it) before stage 0's, so the
 * read finds stage 0 in flight; with it, stage 0 lands first for warp 1 and only the race mode's per-mbarrier
 * clocks of the TMA unit see that nothing orders its write before warp 0's read. */
static const char *tmarace_lua =
    "local K = { params = {\n"
    "  { name = 'bug', type = 'int', default = 0, min = 0, max = 1 },\n"
    "  { name = 'helper', type = 'int', default = 0, min = 0, max = 1 } } }\n"
    "function K.config(spec, t) return { block = 96, grid_tile = 1, arch_specific = t.arch } end\n"
    "function K.build(b, spec, cfg)\n"
    "  local p = b:kernel{ params = { { 'y', 'ptr', 'f32' }, { 'tm', 'tensormap' } } }\n"
    "  local data = b:shared('f32', 64, 128)\n"
    "  local bars = b:shared('f32', 4, 8)\n"
    "  local t = b:tid()\n"
    "  b:if_(b:eq(t, 0), function() for s = 0, 1 do b:mbarrier_init(bars + 2 * s, 1) end end)\n"
    "  b:barrier()\n"
    "  b:if_(b:eq(t, 64), function()\n"
    "    for s = 0, 1 do\n"
    "      b:mbarrier_arrive(bars + 2 * s, { tx = b:i32(128) })\n"
    "      b:tma_load(data + 32 * s, p.tm, { 0, s }, bars + 2 * s)\n"
    "    end\n"
    "  end)\n"
    "  b:if_(b:lt(t, 32), function()\n"
    "    if spec.bug == 0 then b:mbarrier_wait(bars, 0) end\n"
    "    b:mbarrier_wait(bars + 2, 0)\n"
    "    b:store(p.y + t, b:load(data + t))\n"
    "    b:store(p.y + (t + 32), b:load(data + (t + 32)))\n"
    "  end)\n"
    "  if spec.helper == 1 then\n"
    "    b:if_(b:ge(t, 32), function() b:if_(b:lt(t, 64), function()\n"
    "      b:mbarrier_wait(bars, 0)\n"
    "      b:store(p.y + (t + 32), b:load(data + (t - 32)))\n"
    "    end) end)\n"
    "  end\n"
    "end\nreturn K\n";

static char dir[] = "/tmp/kiln-race-test-XXXXXX";
static kiln_gen *gen, *plant_gen;
static kiln_emu *emu;

/* Runs racy with keys (twice and/or race); *bad counts wrong outputs. */
static kiln_status run_racy(int kase, int bug, int twice, int race, long *bad, kiln_error *err) {
    char spec[64];
    snprintf(spec, sizeof spec, "racy case=%d bug=%d", kase, bug);
    kiln_emu_kernel *k = NULL;
    kiln_status st = kiln_emu_load(emu, plant_gen, spec, kase == 3 ? SM90A : 80, &k, err);
    if (st != KILN_OK) return st;
    float y[32];
    _Alignas(16) float src[32];
    for (int i = 0; i < 32; i++) y[i] = -1.0f, src[i] = (float)(i * 3 + 1);
    void *py = y, *psrc = src, *args[] = {&py, &psrc};
    size_t bytes[] = {sizeof y, sizeof src};
    kiln_emu_launch l = {.grid = {1, 1, 1}, .block = {64, 1, 1}, .twice = twice, .race = race, .arg_bytes = bytes};
    st = kiln_emu_run(k, &l, args, err);
    *bad = 0;
    for (int i = 0; i < 32; i++) *bad += y[i] != (float)((kase == 4 ? 31 - i : i) * 3 + 1);
    kiln_emu_kernel_free(k);
    return st;
}

static void test_plants(void) {
    static const struct {
        int kase;
        const char *what, *want; /* the race message names both sites */
        int twice_sees;          /* whether `twice` catches the planted bug too */
    } rows[] = {
        {0, "a missing barrier between warp 0's write and warp 1's read", "earlier write", 1},
        {1, "a write-after-read leaving the same bytes (twice cannot see it)", "earlier read", 0},
        {2, "a named barrier with 32 of its 64 participants", "earlier write", 1},
        {3, "an mbarrier arrival before the write it publishes", "earlier write", -1},
        {4, "lanes of a warp reading each other's stores without a warp sync", "4-byte shared", -1},
        {5, "a read of a cp.async destination before its issuer's wait", "in flight", 1},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        char name[240];
        snprintf(name, sizeof name, "racy case=%d: synchronized it runs clean under race (and twice)", rows[i].kase);
        TEST_BEGIN(name);
        long bad = 0;
        kiln_error err = {0};
        kiln_status st = run_racy(rows[i].kase, 0, 1, 1, &bad, &err);
        CHECK(st == KILN_OK, "%s", err.msg);
        CHECK(st != KILN_OK || bad == 0, "%ld wrong outputs", bad);
        TEST_END();

        snprintf(name, sizeof name, "racy case=%d bug=1 (%s): race reports it, naming both accesses", rows[i].kase,
                 rows[i].what);
        TEST_BEGIN(name);
        err = (kiln_error){0};
        st = run_racy(rows[i].kase, 1, 0, 1, &bad, &err);
        CHECK(st == KILN_EEMU && strstr(err.msg, "shared-memory race at shared offset") &&
                  strstr(err.msg, rows[i].want) && strstr(err.msg, "unordered with thread (") &&
                  strstr(err.msg, "in @kiln_racy"),
              "status %d: %s", (int)st, err.msg);
        if (getenv("KILN_TEST_VERBOSE")) printf("    %s\n", err.msg);
        TEST_END();

        if (rows[i].twice_sees < 0) continue;
        snprintf(name, sizeof name, "racy case=%d bug=1: twice alone %s", rows[i].kase,
                 rows[i].twice_sees ? "sees it too" : "passes it (the race mode's reason to exist)");
        TEST_BEGIN(name);
        err = (kiln_error){0};
        st = run_racy(rows[i].kase, 1, 1, 0, &bad, &err);
        if (rows[i].twice_sees) CHECK(st != KILN_OK || bad, "twice ran clean with right answers");
        else CHECK(st == KILN_OK && bad == 0, "twice: status %d, %ld wrong: %s", (int)st, bad, err.msg);
        TEST_END();
    }
}

enum { TMAR_W = 32, TMAR_H = 2 };

/* Runs tmarace with bug and helper (race: the race mode on); *bad counts wrong outputs of those it writes. */
static kiln_status run_tmarace(int bug, int helper, int race, long *bad, kiln_error *err) {
    char spec[64];
    snprintf(spec, sizeof spec, "tmarace bug=%d helper=%d", bug, helper);
    kiln_emu_kernel *k = NULL;
    kiln_status st = kiln_emu_load(emu, plant_gen, spec, SM90A, &k, err);
    if (st != KILN_OK) return st;
    static float x[TMAR_W * TMAR_H], y[96];
    for (int i = 0; i < TMAR_W * TMAR_H; i++) x[i] = (float)(i * 5 + 2);
    for (int i = 0; i < 96; i++) y[i] = -1.0f;
    static _Alignas(64) kiln_tensor_map m;
    memset(&m, 0, sizeof m);
    m.magic = KILN_TMAP_MAGIC, m.elem_bytes = 4, m.rank = 2;
    m.base = (uint64_t)(uintptr_t)x;
    m.dims[0] = TMAR_W, m.dims[1] = TMAR_H, m.dims[2] = 1;
    m.strides[0] = TMAR_W * 4, m.strides[1] = TMAR_W * TMAR_H * 4;
    m.box[0] = TMAR_W, m.box[1] = 1, m.box[2] = 1;
    void *py = y, *args[] = {&py, &m};
    kiln_emu_launch l = {.grid = {1, 1, 1}, .block = {96, 1, 1}, .race = race}; /* (x is no argument: no arg_bytes) */
    st = kiln_emu_run(k, &l, args, err);
    *bad = 0;
    for (int i = 0; i < (helper ? 96 : 64); i++) *bad += y[i] != x[i % 64];
    kiln_emu_kernel_free(k);
    return st;
}

/* A consumer reading a TMA stage after waiting on another stage's mbarrier (the ring's full barrier of the
 * wrong stage): the plain mode's guard sees it when no other thread waits for the stage (the scheduler lands
 * what is waited for first), the race mode also when another warp waits for it correctly. */
static void test_tma_wrong_barrier(void) {
    for (int helper = 0; helper <= 1; helper++)
        for (int race = 0; race <= 1; race++) {
            char name[240];
            snprintf(name, sizeof name, "tmarace helper=%d: each stage read after its own mbarrier runs clean%s", helper,
                     race ? " under race" : "");
            TEST_BEGIN(name);
            long bad = 0;
            kiln_error err = {0};
            kiln_status st = run_tmarace(0, helper, race, &bad, &err);
            CHECK(st == KILN_OK, "%s", err.msg);
            CHECK(st != KILN_OK || bad == 0, "%ld wrong outputs", bad);
            TEST_END();

            int caught = race || !helper;
            snprintf(name, sizeof name, "tmarace bug=1 helper=%d (stage 0 read after waiting on stage 1's mbarrier%s): "
                     "%s %s", helper, helper ? ", another warp waits on stage 0's" : "", race ? "race" : "the plain mode",
                     caught ? "reports it" : "misses it (stage 0 landed and its phase completed for the other warp)");
            TEST_BEGIN(name);
            err = (kiln_error){0};
            st = run_tmarace(1, helper, race, &bad, &err);
            if (!caught) {
                CHECK(st == KILN_OK && bad == 0, "status %d, %ld wrong: %s", (int)st, bad, err.msg);
            } else if (helper) { /* only the happens-before checker: the TMA unit's write on mbarrier 0 */
                CHECK(st == KILN_EEMU && strstr(err.msg, "shared-memory race at shared offset") &&
                          strstr(err.msg, "the TMA unit (mbarrier at shared offset") && strstr(err.msg, "earlier write"),
                      "status %d: %s", (int)st, err.msg);
            } else { /* the guard: stage 0's copy still in flight when warp 0 reads it */
                CHECK(st == KILN_EEMU && strstr(err.msg, "race: ") && strstr(err.msg, "which has not landed yet"),
                      "status %d: %s", (int)st, err.msg);
            }
            if (getenv("KILN_TEST_VERBOSE")) printf("    %s\n", err.msg);
            TEST_END();
        }
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

#ifdef __SANITIZE_ADDRESS__
#define SAN_BUILD 1 /* make SAN=1: every other family case, race mode on only (the plain build runs all and times them) */
#else
#define SAN_BUILD 0
#endif

/* One case of a family with the race mode off (for the cost) and on: right results, no race. */
static void test_family(const char *spec, int sm, int rows, int seq_k, int splits) {
    static unsigned index;
    if (SAN_BUILD && index++ % 2) return;
    char name[240], smn[16];
    snprintf(name, sizeof name, "race mode on %s (%s, %d rows%s): no race, outputs within tolerance", spec,
             kiln_sm_name(sm, smn), rows, seq_k ? " x seq_k" : "");
    TEST_BEGIN(name);
    double ms[2] = {0, 0};
    for (int race = SAN_BUILD; race <= 1; race++) {
        kiln_case_opts o = {.sm = sm, .seed = 3, .race = race};
        kiln_case_opts_set(&o, "rows", rows);
        if (seq_k) {
            kiln_case_opts_set(&o, "seq_k", seq_k);
            kiln_case_opts_set(&o, "heads_q", 2);
            kiln_case_opts_set(&o, "heads_kv", 1);
        }
        if (splits) kiln_case_opts_set(&o, "splits", splits);
        kiln_case *c = NULL;
        kiln_error err = {0};
        kiln_status st = kiln_case_create(&c, gen, emu, spec, &o, &err);
        CHECK(st == KILN_OK, "%s", err.msg);
        if (st != KILN_OK) break;
        double t0 = now_ms();
        st = kiln_case_run(c, &err);
        ms[race] = now_ms() - t0;
        CHECK(st == KILN_OK, "race=%d: %s", race, err.msg);
        if (st == KILN_OK) CHECK(kiln_case_check(c) == 0, "race=%d: outputs out of tolerance", race);
        kiln_case_free(c);
    }
    if (!SAN_BUILD)
        printf("    cost: %.1f ms with the race mode, %.1f ms without (x%.1f)\n", ms[1], ms[0], ms[0] > 0 ? ms[1] / ms[0] : 0);
    TEST_END();
}

int main(void) {
    if (!mkdtemp(dir)) return 1;
    char path[256];
    snprintf(path, sizeof path, "%s/racy.lua", dir);
    FILE *f = fopen(path, "w");
    if (f) fputs(racy_lua, f), fclose(f);
    char tpath[256];
    snprintf(tpath, sizeof tpath, "%s/tmarace.lua", dir);
    f = fopen(tpath, "w");
    if (f) fputs(tmarace_lua, f), fclose(f);
    kiln_gen_options o = {.template_dir = dir};
    kiln_error err = {0};
    if (kiln_gen_create(&plant_gen, &o, &err) != KILN_OK || kiln_gen_create(&gen, NULL, &err) != KILN_OK ||
        kiln_emu_create(&emu, &err) != KILN_OK) {
        printf("emu_race: setup: %s\nemu_race: 0 passed, 1 failed\n", err.msg);
        return 1;
    }
    test_plants();
    test_tma_wrong_barrier();
    /* one representative case per family, small shapes (the CI clock) */
    test_family("layernorm x=f16 w=f16 y=f16 hidden=4096", 80, 2, 0, 0);
    test_family("rmsnorm x=bf16 w=f32 y=bf16 hidden=4096", 75, 2, 0, 0);
    test_family("layernorm_bwd x=f16 w=f16 dy=f16 dx=f16 hidden=256", 80, 3, 0, 0);
    test_family("rmsnorm_bwd x=bf16 w=bf16 dy=bf16 dx=bf16 hidden=256", 80, 3, 0, 0);
    test_family("attention dtype=bf16 head_dim=64 causal=true", 75, 33, 40, 0);
    test_family("attention dtype=f16 head_dim=64 causal=true", 80, 33, 40, 0);
    test_family("attention dtype=bf16 head_dim=64 splitkv=true", 80, 1, 70, 2);
    test_family("attention_bwd dtype=f16 head_dim=64 causal=true", 80, 33, 40, 0);
    test_family("attention dtype=bf16 head_dim=64 causal=true path=wgmma", SM90A, 65, 80, 0);
    test_family("attention_bwd dtype=bf16 head_dim=64 causal=true path=wgmma", SM90A, 65, 80, 0);
    kiln_emu_destroy(emu);
    kiln_gen_destroy(gen);
    kiln_gen_destroy(plant_gen);
    unlink(path);
    unlink(tpath);
    rmdir(dir);
    return check_summary("emu_race");
}
