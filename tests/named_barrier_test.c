/* tests/named_barrier_test.c - named barriers (b:bar_sync / b:bar_arrive: barrier.cta.{sync,arrive}.aligned with
 * an id and a thread count) on the emulator by the PTX ISA's rules, their planted-bug faults, the builder's
 * refusals, and ptxas on their PTX. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "kiln/emu.h"
#include "kiln/gen.h"
#include "ptxas_util.h"

#define SM90A (KILN_SM_ARCH + 90)

/* case=0, 384 threads: FlashAttention-3's ping-pong between warpgroups 0 and 1. Warpgroup c syncs on barrier
 * 1 + c (256 threads: its own 128 and the other's arrive) before its turn and arrives on the other's barrier
 * after it; warpgroup 1 arrives on barrier 1 once first, so warpgroup 0 goes first. In its turn thread 0 of
 * the warpgroup records a shared clock (the turns so far) as log[16 c + it] and advances it, so the log is
 * the order of the turns (2 it for warpgroup 0, 2 it + 1 for warpgroup 1 only if they alternate). The ids are i32 values (wg + 1, 2 - wg). Meanwhile warpgroup 2
 * exchanges values through shared memory under its own barrier 3 (128 threads): y[64 + t] = sum over it of
 * (127 - t + it). b:barrier() (bar.sync 0, the whole block) before and after.
 * case=1, 64 threads: lanes 16..31 of warp 1 exit first; warp 0 writes x, both warps bar_sync(5, 64): warp 1's
 * 16 live lanes count as its whole warp (32), so the barrier completes; warp 1's lanes read x into y.
 * Planted bugs: 1 warpgroup 1 skips its first arrive (deadlock), 2 that arrive names 128 threads (count
 * mismatch), 3 an id computed as 16 (out of range), 4 only lanes 0..15 of each warp arrive (the warp never
 * arrives: deadlock), 6 case 1's barrier
 * names 96 threads in a 64-thread block, 7 case 1 with bar_sync(5, 32) (warp 1 may pass before warp 0's
 * write: a race), 8 warpgroup 2's second barrier left out (a race). */
static const char *nbar_lua =
    "local K = { params = {\n"
    "  { name = 'case', type = 'int', default = 0, min = 0, max = 1 },\n"
    "  { name = 'iters', type = 'int', default = 4, min = 1, max = 16 },\n"
    "  { name = 'bug', type = 'int', default = 0, min = 0, max = 8 } } }\n"
    "function K.config(spec, t) return { block = spec.case == 0 and 384 or 64, grid_tile = 1 } end\n"
    "function K.build(b, spec, cfg)\n"
    "  local p = b:kernel{ params = { { 'y', 'ptr', 'f32' } } }\n"
    "  local bug = spec.bug\n"
    "  if spec.case == 1 then\n"
    "    local x = b:shared('f32', 32)\n"
    "    local t = b:tid()\n"
    "    b:exit_if(b:ge(t, 48))\n"
    "    b:if_(b:lt(t, 32), function() b:store(x + t, b:f32(t * 3 + 1)) end)\n"
    "    b:bar_sync(5, bug == 6 and 96 or bug == 7 and 32 or 64)\n"
    "    b:if_(b:ge(t, 32), function() b:store(p.y + (t - 32), b:load(x + (t - 32))) end)\n"
    "    return\n"
    "  end\n"
    "  local wg, t = b:warpgroup(), b:warpgroup_thread()\n"
    "  local clock, log, xch = b:shared('f32', 1), b:shared('f32', 64), b:shared('f32', 128)\n"
    "  b:if_(b:eq(b:tid(), 0), function() b:store(clock, 0.0) end)\n"
    "  b:barrier()\n"
    "  local function arrive(id, n)\n"
    "    if bug == 4 then b:if_(b:lt(t % 32, 16), function() b:bar_arrive(id, n) end) else b:bar_arrive(id, n) end\n"
    "  end\n"
    "  b:if_(b:lt(wg, 2), function()\n"
    "    local mine, theirs = wg + (bug == 3 and 15 or 1), b:i32(2) - wg\n"
    "    if bug ~= 1 then b:if_(b:eq(wg, 1), function() arrive(1, bug == 2 and 128 or 256) end) end\n"
    "    b:for_(0, spec.iters, 1, function(it)\n"
    "      b:bar_sync(mine, 256)\n"
    "      b:if_(b:eq(t, 0), function()\n"
    "        local now = b:load(clock)\n"
    "        b:store(log + (wg * 16 + it), now)\n"
    "        b:store(clock, now + 1.0)\n"
    "      end)\n"
    "      arrive(theirs, 256)\n"
    "    end)\n"
    "  end)\n"
    "  b:if_(b:eq(wg, 2), function()\n"
    "    local sum = b:var('f32', 0.0)\n"
    "    b:for_(0, spec.iters, 1, function(it)\n"
    "      b:store(xch + t, b:f32(t + it))\n"
    "      b:bar_sync(3, 128)\n"
    "      sum:set(sum:get() + b:load(xch + (127 - t)))\n"
    "      if bug ~= 8 then b:bar_sync(3, 128) end\n"
    "    end)\n"
    "    b:store(p.y + (64 + t), sum:get())\n"
    "  end)\n"
    "  b:barrier()\n"
    "  b:if_(b:lt(b:tid(), 32), function() b:store(p.y + b:tid(), b:load(log + b:tid())) end)\n"
    "end\nreturn K\n";

/* Misuse the builder refuses, one message each. */
static const char *misuse_lua =
    "local K = { params = { { name = 'case', type = 'int', default = 0, min = 0, max = 9 } } }\n"
    "function K.config(spec, t) return { block = 128, grid_tile = 1 } end\n"
    "function K.build(b, spec, cfg)\n"
    "  local p = b:kernel{ params = { { 'y', 'ptr', 'i32' } } }\n"
    "  if spec.case == 0 then b:bar_sync(16, 64)\n"
    "  elseif spec.case == 1 then b:bar_sync(1, 48)\n"
    "  elseif spec.case == 2 then b:bar_arrive(1)\n"
    "  elseif spec.case == 3 then b:bar_arrive(1, 2048)\n"
    "  elseif spec.case == 4 then b:bar_sync(b:f32(1), 64)\n"
    "  else b:bar_sync(-1, 64) end\n"
    "  b:store(p.y, 0)\n"
    "end\nreturn K\n";

static char dir[] = "/tmp/kiln-nbar-test-XXXXXX";
static kiln_gen *gen;
static kiln_emu *emu;

static void write_template(const char *name, const char *text) {
    char path[256];
    snprintf(path, sizeof path, "%s/%s.lua", dir, name);
    FILE *f = fopen(path, "w");
    if (f) fputs(text, f), fclose(f);
}

/* Runs nbar with keys (both thread orders); *bad counts outputs that differ from the reference. */
static kiln_status run_nbar(const char *keys, long *bad, kiln_error *err) {
    char spec[128];
    snprintf(spec, sizeof spec, "nbar %s", keys);
    const char *c = strstr(keys, "case="), *it = strstr(keys, "iters=");
    int kase = c ? atoi(c + 5) : 0, iters = it ? atoi(it + 6) : 4;
    kiln_emu_kernel *k = NULL;
    kiln_status st = kiln_emu_load(emu, gen, spec, SM90A, &k, err);
    if (st != KILN_OK) return st;
    static float y[192];
    for (int i = 0; i < 192; i++) y[i] = -1.0f;
    void *py = y, *args[] = {&py};
    kiln_emu_launch l = {.grid = {1, 1, 1}, .block = {kase == 0 ? 384 : 64, 1, 1}, .twice = 1};
    st = kiln_emu_run(k, &l, args, err);
    *bad = 0;
    if (kase == 1) {
        for (int i = 0; i < 16; i++) *bad += y[i] != (float)(i * 3 + 1);
        return st;
    }
    for (int i = 0; i < iters; i++) *bad += (y[i] != (float)(2 * i)) + (y[16 + i] != (float)(2 * i + 1));
    for (int t = 0; t < 128; t++) *bad += y[64 + t] != (float)(iters * (127 - t) + iters * (iters - 1) / 2);
    return st;
}

static void test_runs(void) {
    static const char *rows[] = {"case=0 iters=1", "case=0 iters=5", "case=1"};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        char name[160];
        snprintf(name, sizeof name, "nbar %s: %s, both thread orders", rows[i],
                 strstr(rows[i], "case=1") ? "a warp with exited lanes counts as 32 threads"
                                           : "ping-pong turns alternate, barrier 3 beside them");
        TEST_BEGIN(name);
        long bad = 0;
        kiln_error err = {0};
        kiln_status st = run_nbar(rows[i], &bad, &err);
        CHECK(st == KILN_OK, "%s", err.msg);
        CHECK(st != KILN_OK || bad == 0, "%ld wrong outputs", bad);
        TEST_END();
    }
}

static void test_bugs(void) {
    static const struct {
        const char *keys, *want, *want2;
    } rows[] = {
        {"bug=1", "deadlock", "barrier 1: 4 of 8 warps arrived"}, /* the first arrive missing */
        {"bug=2", "barrier 1 count mismatch", "names 256 (4 warps arrived)"}, /* arrive 128, sync 256 */
        {"bug=3", "barrier id 16 out of range (valid: 0..15)", "@kiln_nbar"},
        {"bug=4", "deadlock", "wait at llvm.nvvm.barrier.cta.arrive.aligned.count"}, /* half warps: no warp ever arrives */
        {"case=1 bug=6", "barrier 5 thread count 96 must be a multiple of 32 and at most the block's 64", ""},
        {"case=1 bug=7", "race", ""},
        {"bug=8", "race", ""},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        char name[240];
        snprintf(name, sizeof name, "nbar planted bug '%s' is caught%s%s", rows[i].keys, rows[i].want[0] ? ": " : " (wrong results)",
                 rows[i].want);
        TEST_BEGIN(name);
        long bad = 0;
        kiln_error err = {0};
        kiln_status st = run_nbar(rows[i].keys, &bad, &err);
        CHECK(st != KILN_OK || bad > 0, "ran clean with right answers");
        if (rows[i].want[0]) CHECK(st != KILN_OK && strstr(err.msg, rows[i].want), "message: %s", err.msg);
        if (rows[i].want2[0]) CHECK(st != KILN_OK && strstr(err.msg, rows[i].want2), "message: %s", err.msg);
        TEST_END();
    }
}

static void test_misuse(void) {
    static const struct {
        int c;
        const char *want;
    } rows[] = {
        {0, "b:bar_sync: barrier id 16 out of range; valid ids 0..15"},
        {1, "b:bar_sync: thread count 48; valid: a multiple of 32 (the warp), 32..1024"},
        {2, "b:bar_arrive needs a thread count (a multiple of 32, 32..1024)"},
        {3, "b:bar_arrive: thread count 2048; valid"},
        {4, "the barrier id must be an i32 value or a number 0..15"},
        {5, "b:bar_sync: barrier id -1 out of range; valid ids 0..15"},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        char spec[64], name[200];
        snprintf(spec, sizeof spec, "nbarmisuse case=%d", rows[i].c);
        snprintf(name, sizeof name, "%s refused: %s", spec, rows[i].want);
        TEST_BEGIN(name);
        kiln_module *m = NULL;
        kiln_error err = {0};
        CHECK(kiln_generate(gen, spec, 80, KILN_EMIT_PTX, &m, &err) == KILN_EGEN && strstr(err.msg, rows[i].want) &&
                  strstr(err.msg, "nbarmisuse.lua:"),
              "%s", err.msg);
        kiln_module_free(m);
        TEST_END();
    }
}

/* ptxas takes the named barriers on sm_90a and sm_80 (barrier.arrive, barrier.sync with a register id). */
static void test_ptxas(void) {
    const char *ptxas = ptxas_path();
    static const struct {
        const char *spec;
        int sm;
    } rows[] = {{"nbar iters=4", SM90A}, {"nbar iters=4", 80}, {"nbar case=1", 90}};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        char name[160], sm[16];
        snprintf(name, sizeof name, "ptxas %s: '%s' assembles, 0 spills, barrier.arrive / barrier.sync with a count",
                 kiln_sm_name(rows[i].sm, sm), rows[i].spec);
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
            CHECK(log && spills == 0, "spills %ld; log: %s", spills, log ? log : "");
            const char *text = kiln_module_text(m);
            if (strstr(rows[i].spec, "case=1"))
                CHECK(strstr(text, "barrier.sync.aligned \t5, 64;") || strstr(text, "bar.sync \t5, 64;"), "PTX lacks the counted sync:\n%s", text);
            else
                CHECK(strstr(text, "barrier.arrive.aligned") || strstr(text, "bar.arrive"), "PTX lacks barrier.arrive:\n%s", text);
            free(log);
            unlink(j.ptx), unlink(j.log);
            kiln_module_free(m);
        }
        TEST_END();
    }
}

int main(void) {
    if (!mkdtemp(dir)) return 1;
    write_template("nbar", nbar_lua);
    write_template("nbarmisuse", misuse_lua);
    kiln_gen_options o = {.template_dir = dir};
    kiln_error err = {0};
    if (kiln_gen_create(&gen, &o, &err) != KILN_OK || kiln_emu_create(&emu, &err) != KILN_OK) {
        printf("named_barrier: setup: %s\nnamed_barrier: 0 passed, 1 failed\n", err.msg);
        return 1;
    }
    test_runs();
    test_bugs();
    test_misuse();
    test_ptxas();
    kiln_emu_destroy(emu);
    kiln_gen_destroy(gen);
    char path[256];
    snprintf(path, sizeof path, "%s/nbar.lua", dir), unlink(path);
    snprintf(path, sizeof path, "%s/nbarmisuse.lua", dir), unlink(path);
    rmdir(dir);
    return check_summary("named_barrier");
}
