/* tests/gen_test.c - generator API: spec parsing and canonical form, errors, metadata, targets. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <lauxlib.h>
#include <llvm-c/Analysis.h>
#include <lualib.h>

#include "check.h"
#include "gen.h"
#include "kiln/kiln.h"

static kiln_gen *gen;

static void expect_canonical(const char *a, const char *b) {
    char ca[KILN_SPEC_MAX], cb[KILN_SPEC_MAX];
    kiln_error err = {0};
    TEST_BEGIN(a);
    CHECK(kiln_canonical_spec(gen, a, ca, sizeof ca, &err) == KILN_OK, "%s", err.msg);
    CHECK(kiln_canonical_spec(gen, b, cb, sizeof cb, &err) == KILN_OK, "%s", err.msg);
    CHECK(!strcmp(ca, cb), "'%s' vs '%s'", ca, cb);
    TEST_END();
}

/* A bad spec fails with status and a message containing every fragment. */
static void expect_error(const char *spec, int sm, kiln_status want, const char *frag1, const char *frag2) {
    kiln_error err = {0};
    kiln_module *m = NULL;
    char name[300];
    snprintf(name, sizeof name, "rejects '%s' sm_%d", spec ? spec : "(null)", sm);
    TEST_BEGIN(name);
    kiln_status st = kiln_generate(gen, spec, sm, KILN_EMIT_PTX, &m, &err);
    CHECK(st == want, "status %s, want %s (%s)", kiln_status_name(st), kiln_status_name(want), err.msg);
    CHECK(m == NULL, "module returned on error");
    CHECK(!frag1 || strstr(err.msg, frag1), "message '%s' lacks '%s'", err.msg, frag1);
    CHECK(!frag2 || strstr(err.msg, frag2), "message '%s' lacks '%s'", err.msg, frag2);
    CHECK(!strchr(err.msg, '\n'), "message spans lines: '%s'", err.msg);
    TEST_END();
}

static void test_canonical(void) {
    expect_canonical("layernorm hidden=4096 x=bf16 w=f32", "layernorm w=f32 x=bf16 hidden=4096");
    expect_canonical("layernorm x=bf16", "layernorm x=bf16 w=bf16 y=bf16 hidden=launch weight=true bias=true");
    expect_canonical("  layernorm   x=bfloat16\tw=float32 ", "layernorm x=bf16 w=f32");
    expect_canonical("layernorm bias=0 weight=1", "layernorm bias=false weight=true");
    char c[KILN_SPEC_MAX];
    kiln_error err = {0};
    TEST_BEGIN("canonical order follows the template");
    CHECK(kiln_canonical_spec(gen, "layernorm bias=false hidden=768 y=f16 x=bf16", c, sizeof c, &err) == KILN_OK, "%s", err.msg);
    CHECK(!strcmp(c, "layernorm x=bf16 w=bf16 y=f16 hidden=768 weight=true bias=false"), "got '%s'", c);
    TEST_END();
    TEST_BEGIN("hide_default keys: left out at their defaults, shown otherwise");
    CHECK(kiln_canonical_spec(gen, "layernorm x=bf16 residual=false r=bf16", c, sizeof c, &err) == KILN_OK &&
              !strcmp(c, "layernorm x=bf16 w=bf16 y=bf16 hidden=launch weight=true bias=true"), "got '%s' %s", c, err.msg);
    CHECK(kiln_canonical_spec(gen, "rmsnorm residual=true x=f16", c, sizeof c, &err) == KILN_OK &&
              !strcmp(c, "rmsnorm x=f16 w=f16 y=f16 hidden=launch weight=true residual=true"), "got '%s' %s", c, err.msg);
    CHECK(kiln_canonical_spec(gen, "rmsnorm_bwd r=f32 residual=true x=f16", c, sizeof c, &err) == KILN_OK &&
              !strcmp(c, "rmsnorm_bwd x=f16 w=f16 dy=f16 dx=f16 hidden=launch weight=true residual=true r=f32"),
          "got '%s' %s", c, err.msg);
    TEST_END();
}

static void test_errors(void) {
    expect_error("nosuch x=f32", 80, KILN_ENOTFOUND, "unknown kernel family 'nosuch'", "layernorm");
    expect_error("layernorm q=f32", 80, KILN_EINVAL, "unknown parameter 'q'", "x, w, y, hidden, weight, bias");
    expect_error("layernorm x=f64", 80, KILN_EINVAL, "bad value 'f64' for 'x'", "f32, f16, bf16");
    expect_error("layernorm hidden=0", 80, KILN_EINVAL, "bad value '0' for 'hidden'", "launch");
    expect_error("layernorm hidden=16385", 80, KILN_EINVAL, "bad value '16385'", "1..16384");
    expect_error("layernorm hidden=12abc", 80, KILN_EINVAL, "bad value '12abc'", NULL);
    expect_error("layernorm weight=maybe", 80, KILN_EINVAL, "bad value 'maybe' for 'weight'", "true, false");
    expect_error("layernorm x", 80, KILN_EINVAL, "malformed parameter 'x'", "key=value");
    /* two specs run together: the second family name is named as such, not as a malformed pair */
    expect_error("layernorm x=bf16 hidden=768 attention dtype=f16", 80, KILN_EINVAL,
                 "one kernel per spec: 'attention' is a second family name after 'layernorm'", NULL);
    expect_error("layernorm x=", 80, KILN_EINVAL, "malformed parameter", NULL);
    expect_error("layernorm =f32", 80, KILN_EINVAL, "malformed parameter", NULL);
    expect_error("layernorm x=f32 x=f16", 80, KILN_EINVAL, "given twice", NULL);
    expect_error("x=f32", 80, KILN_EINVAL, "must start with a family", NULL);
    expect_error("", 80, KILN_EINVAL, "empty spec", NULL);
    expect_error(NULL, 80, KILN_EINVAL, "required", NULL);
    expect_error("../etc/passwd", 80, KILN_ENOTFOUND, "unknown kernel family", NULL);
    expect_error("layernorm x=f32", 72, KILN_EINVAL, "unsupported SM 72", "75, 80, 86, 89, 90");
    expect_error("layernorm x=f32", 0, KILN_EINVAL, "unsupported SM 0", NULL);
}

static void test_metadata(void) {
    kiln_error err = {0};
    kiln_module *m = NULL;
    TEST_BEGIN("metadata travels with the PTX");
    CHECK(kiln_generate(gen, "layernorm x=bf16 w=f32 hidden=768", 75, KILN_EMIT_PTX, &m, &err) == KILN_OK, "%s", err.msg);
    if (m) {
        const kiln_kernel_meta *meta = kiln_module_meta(m);
        kiln_kernel_meta parsed;
        CHECK(kiln_meta_parse(kiln_module_text(m), kiln_module_size(m), &parsed, &err) == KILN_OK, "%s", err.msg);
        CHECK(!memcmp(&parsed, meta, sizeof parsed), "parsed metadata differs from the generator's");
        CHECK(meta->nparams == 9 && !strcmp(meta->params[0].name, "y") && meta->params[0].dtype == KILN_BF16, "params");
        CHECK(meta->params[8].kind == KILN_PARAM_F32, "eps is f32");
        CHECK(meta->sm == 75 && meta->ptx_version == 63, "target %d ptx %d", meta->sm, meta->ptx_version);
        CHECK(strstr(kiln_module_text(m), ".target sm_75") != NULL, "PTX target");
        CHECK(strstr(kiln_module_text(m), ".version 6.3") != NULL, "minimal PTX version for sm_75");
        char entry[128];
        snprintf(entry, sizeof entry, ".entry %s(", meta->entry);
        CHECK(strstr(kiln_module_text(m), entry) != NULL, "entry '%s' in PTX", meta->entry);
        CHECK(meta->block[0] * meta->block[1] * meta->block[2] > 0 && meta->grid_tile[0] > 0, "geometry");
        CHECK(meta->align_bytes == 16, "align %u", meta->align_bytes);
        kiln_module_free(m);
    }
    TEST_END();
    static const struct { int sm; const char *version; } versions[] = {
        {70, ".version 6.0"}, {75, ".version 6.3"}, {80, ".version 7.0"}, {86, ".version 7.1"}, {89, ".version 7.8"}, {90, ".version 7.8"},
        {KILN_SM_ARCH + 90, ".version 8.0"}};
    for (size_t i = 0; i < sizeof versions / sizeof versions[0]; i++) {
        char name[64];
        char sm[16];
        snprintf(name, sizeof name, "minimal PTX version for %s", kiln_sm_name(versions[i].sm, sm));
        TEST_BEGIN(name);
        CHECK(kiln_generate(gen, "layernorm x=f16 hidden=64", versions[i].sm, KILN_EMIT_PTX, &m, &err) == KILN_OK, "%s", err.msg);
        if (m) {
            CHECK(strstr(kiln_module_text(m), versions[i].version) != NULL, "want %s", versions[i].version);
            char target[32];
            snprintf(target, sizeof target, ".target %s\n", sm);
            CHECK(strstr(kiln_module_text(m), target) != NULL, "want %s", target);
            kiln_module_free(m);
        }
        TEST_END();
    }
}

static void test_emit_ll_and_struct(void) {
    kiln_error err = {0};
    kiln_module *m = NULL;
    TEST_BEGIN("emit LLVM IR");
    CHECK(kiln_generate(gen, "layernorm x=f16 hidden=100", 80, KILN_EMIT_LL, &m, &err) == KILN_OK, "%s", err.msg);
    if (m) {
        CHECK(strstr(kiln_module_text(m), "define ptx_kernel void @kiln_layernorm") != NULL, "kernel in IR");
        CHECK(strstr(kiln_module_text(m), "; kiln.meta entry") != NULL, "metadata as IR comments");
        kiln_module_free(m);
    }
    TEST_END();
    TEST_BEGIN("kiln_spec_value: the resolved spec's value, defaults filled in; a key the family lacks named");
    char v[64];
    CHECK(kiln_spec_value(gen, "layernorm x=bf16 hidden=100", "w", v, sizeof v, &err) == KILN_OK && !strcmp(v, "bf16"),
          "w follows x: %s %s", v, err.msg);
    CHECK(kiln_spec_value(gen, "layernorm x=bf16 hidden=100", "hidden", v, sizeof v, &err) == KILN_OK && !strcmp(v, "100"),
          "hidden: %s", v);
    CHECK(kiln_spec_value(gen, "layernorm x=bf16", "bias", v, sizeof v, &err) == KILN_OK && !strcmp(v, "true"), "bias: %s", v);
    CHECK(kiln_spec_value(gen, "layernorm x=bf16", "dy", v, sizeof v, &err) == KILN_EINVAL &&
              strstr(err.msg, "layernorm has no key 'dy'"), "no such key: %s", err.msg);
    CHECK(kiln_spec_value(gen, "layernorm x=bf16", "x", v, 3, &err) == KILN_EINVAL, "small buffer");
    CHECK(kiln_spec_value(gen, "layernorm x=f99", "x", v, sizeof v, &err) != KILN_OK && strstr(err.msg, "f99"), "bad spec: %s", err.msg);
    TEST_END();
}

/* Packed conversions only where the target table says they exist. */
static void test_conversions(void) {
    kiln_error err = {0};
    static const struct { int sm; const char *spec, *want, *forbid; } cases[] = {
        {80, "layernorm x=f32 y=bf16 hidden=64", "cvt.rn.bf16x2.f32", NULL},
        {90, "layernorm x=f32 y=f16 hidden=64", "cvt.rn.f16x2.f32", NULL},
        {75, "layernorm x=f32 y=f16 hidden=64", "cvt.rn.f16.f32", "f16x2.f32"},
        {75, "layernorm x=f32 y=bf16 hidden=64", "2139095040", "cvt.rn.bf16"}, /* NaN test: |u| > 0x7f800000 */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char name[128];
        snprintf(name, sizeof name, "conversion for '%s' on sm_%d", cases[i].spec, cases[i].sm);
        TEST_BEGIN(name);
        kiln_module *m = NULL;
        CHECK(kiln_generate(gen, cases[i].spec, cases[i].sm, KILN_EMIT_PTX, &m, &err) == KILN_OK, "%s", err.msg);
        if (m) {
            const char *t = kiln_module_text(m);
            CHECK(strcasestr(t, cases[i].want) != NULL, "missing '%s'", cases[i].want);
            CHECK(!cases[i].forbid || !strstr(t, cases[i].forbid), "unexpected '%s'", cases[i].forbid);
            kiln_module_free(m);
        }
        TEST_END();
    }
}

static void test_target_table(void) {
    int n;
    const gen_target *t = gen_target_all(&n);
    TEST_BEGIN("target table");
    CHECK(n == 12, "targets %d", n);
    for (int i = 1; i < n; i++) CHECK(t[i].sm > t[i - 1].sm, "ascending");
    for (int i = 0; i < n; i++) { /* the SM table and the PTX target table agree on each row's minimal .version */
        char name[16];
        kiln_sm_name(t[i].sm, name);
        const kiln_ptx_target *p = kiln_ptx_target_find(name, strlen(name));
        CHECK(p && p->ptx == t[i].ptx_min, "%s: SM table .version %d, PTX target table %d", name, t[i].ptx_min,
              p ? p->ptx : -1);
    }
    const int a90 = KILN_SM_ARCH + 90;
    CHECK(gen_target_find(a90)->wgmma && !gen_target_find(90)->wgmma && !gen_target_find(100)->wgmma &&
              !gen_target_find(120)->wgmma,
          "wgmma on sm_90a only (Blackwell has tcgen05 on its 'a' targets instead)");
    char name[16];
    CHECK(!strcmp(kiln_sm_name(a90, name), "sm_90a") && !strcmp(kiln_sm_name(75, name), "sm_75"), "names");
    CHECK(kiln_sm_parse("90a") == a90 && kiln_sm_parse("sm_90a") == a90 && kiln_sm_parse("sm_90") == 90 &&
              kiln_sm_parse("75") == 75 && !kiln_sm_parse("80a") && !kiln_sm_parse("90b") && !kiln_sm_parse("90aa") &&
              !kiln_sm_parse("1090") && !kiln_sm_parse("a") && !kiln_sm_parse("") && !kiln_sm_parse(NULL) &&
              !kiln_sm_parse("60"),
          "parse: only the table's targets, 'a' only where a row has it");
    CHECK(kiln_target_runs_on(a90, 90) && !kiln_target_runs_on(a90, 89) && !kiln_target_runs_on(a90, 100) &&
              kiln_target_runs_on(90, 100) && !kiln_target_runs_on(90, 89),
          "where each runs: sm_90a on 9.0 only, sm_90 on 9.0 and newer");
    kiln_sm_facts f;
    CHECK(kiln_sm_facts_get(90, &f, NULL) == KILN_OK && (f.mma & KILN_WGMMA) &&
              kiln_sm_facts_get(100, &f, NULL) == KILN_OK && !(f.mma & KILN_WGMMA),
          "a 9.0 device has wgmma (through sm_90a), a 10.0 device none");
    CHECK(gen_target_find(120)->mma_m16n8k16 && gen_target_find(120)->smem_optin_max == 99u << 10 &&
              gen_target_find(121)->threads_per_sm == 1536 && gen_target_find(100)->smem_optin_max == 227u << 10,
          "Blackwell facts");
    CHECK(!gen_target_find(75)->native_bf16_cvt && gen_target_find(80)->native_bf16_cvt, "bf16 cvt from sm_80");
    CHECK(gen_target_find(75)->mma_m16n8k8_f16 && !gen_target_find(75)->mma_m16n8k16, "sm_75 mma shapes");
    CHECK(!gen_target_find(75)->cp_async && gen_target_find(80)->cp_async, "cp.async from sm_80");
    CHECK(gen_target_find(60) == NULL, "sm_60 unknown");
    /* the ptxas facts beside the SM table (gen_target.c): a row for every SM row, in the same order */
    int np;
    const gen_ptxas_facts *pf = gen_ptxas_all(&np);
    CHECK(np == n, "ptxas rows %d, SM rows %d", np, n);
    for (int i = 0; i < n && i < np; i++)
        CHECK(pf[i].sm == t[i].sm && gen_ptxas_find(t[i].sm) == &pf[i], "ptxas row %d: sm %d, SM table %d", i,
              pf[i].sm, t[i].sm);
    CHECK(!gen_ptxas_find(75)->rolled_mma_k && gen_ptxas_find(80)->rolled_mma_k && gen_ptxas_find(86)->rolled_mma_k &&
              gen_ptxas_find(89)->rolled_mma_k && !gen_ptxas_find(90)->rolled_mma_k &&
              !gen_ptxas_find(a90)->rolled_mma_k && !gen_ptxas_find(100)->rolled_mma_k &&
              !gen_ptxas_find(103)->rolled_mma_k && !gen_ptxas_find(110)->rolled_mma_k &&
              !gen_ptxas_find(120)->rolled_mma_k && !gen_ptxas_find(121)->rolled_mma_k,
          "rolled mma k-loop: sm_80/86/89 only (sm_90 and Blackwell lose SASS)");
    for (int i = 0; i < np; i++) {
        int base = kiln_sm_base(pf[i].sm);
        CHECK(pf[i].f16_row_regs == (base >= 90 ? 8 : 0), "sm %d: f16 row registers %d, want %d", pf[i].sm,
              pf[i].f16_row_regs, base >= 90 ? 8 : 0);
    }
    CHECK(gen_ptxas_find(60) == NULL, "no ptxas row for sm_60");
    lua_State *L = luaL_newstate(); /* the templates' view: target.ptxas_* */
    const int sms[] = {86, 100};
    for (int i = 0; i < 2; i++) {
        gen_builder_push_target(L, gen_target_find(sms[i]));
        lua_getfield(L, -1, "ptxas_rolled_mma_k");
        lua_getfield(L, -2, "ptxas_f16_row_regs");
        CHECK(lua_isboolean(L, -2) && lua_toboolean(L, -2) == (sms[i] == 86) && lua_isinteger(L, -1) &&
                  lua_tointeger(L, -1) == (sms[i] == 86 ? 0 : 8),
              "sm_%d: target.ptxas_rolled_mma_k and target.ptxas_f16_row_regs", sms[i]);
        lua_settop(L, 0);
    }
    lua_close(L);
    TEST_END();
}

static void test_template_errors(void) {
    /* A template error names the spec and the template file:line. */
    char dir[] = "/tmp/kiln-gen-test-XXXXXX";
    if (!mkdtemp(dir)) return;
    char path[256];
    snprintf(path, sizeof path, "%s/broken.lua", dir);
    FILE *f = fopen(path, "w");
    fputs("local K = { params = { { name = 'n', type = 'int', default = 1, min = 1, max = 4 } } }\n"
          "function K.config(spec, t) return { block = 32, grid_tile = 1 } end\n"
          "function K.build(b, spec, cfg)\n"
          "  local p = b:kernel{ params = { { 'x', 'ptr', 'f32' } } }\n"
          "  local v = b:load(p.x) + b:tid()\n"
          "end\nreturn K\n", f);
    fclose(f);
    kiln_gen_options o = {.template_dir = dir};
    kiln_gen *g2;
    kiln_error err = {0};
    TEST_BEGIN("template error names file and line");
    CHECK(kiln_gen_create(&g2, &o, &err) == KILN_OK, "%s", err.msg);
    kiln_module *m = NULL;
    CHECK(kiln_generate(g2, "broken n=2", 80, KILN_EMIT_PTX, &m, &err) == KILN_EGEN, "status");
    CHECK(strstr(err.msg, "templates/broken.lua:5:") != NULL, "message: %s", err.msg);
    CHECK(strstr(err.msg, "broken n=2") != NULL, "spec named: %s", err.msg);
    CHECK(strstr(err.msg, "differ in type") != NULL, "cause named: %s", err.msg);
    /* and the generator stays usable afterwards */
    CHECK(kiln_generate(g2, "broken n=5", 80, KILN_EMIT_PTX, &m, &err) == KILN_EINVAL, "range: %s", err.msg);
    kiln_gen_destroy(g2);
    TEST_END();
    unlink(path);
    /* static shared memory past the target's limit: the sizes in the message (it once failed inside
     * lua_pushfstring, which has no %u) */
    snprintf(path, sizeof path, "%s/bigsmem.lua", dir);
    f = fopen(path, "w");
    fputs("local K = { params = {} }\n"
          "function K.config(spec, t) return { block = 32, grid_tile = 1 } end\n"
          "function K.build(b, spec, cfg)\n"
          "  b:kernel{ params = {} }\n"
          "  b:shared('f32', 12000)\n"
          "  b:shared('f32', 400)\n"
          "end\nreturn K\n", f);
    fclose(f);
    TEST_BEGIN("static shared memory past the limit names both sizes");
    CHECK(kiln_gen_create(&g2, &o, &err) == KILN_OK, "%s", err.msg);
    CHECK(kiln_generate(g2, "bigsmem", 75, KILN_EMIT_PTX, &m, &err) == KILN_EGEN, "status: %s", err.msg);
    CHECK(strstr(err.msg, "static shared memory would reach 49600 bytes; sm_75 allows 49152") != NULL, "message: %s", err.msg);
    kiln_gen_destroy(g2);
    TEST_END();
    unlink(path);
    rmdir(dir);
}

/* The builder's argument checks (gen_builder.c value_at, gen_check_builder, gen_current, which find
 * the value metatable and the current builder through the Lua state's extra space): a userdata of
 * another type is no value, a value is no builder, and a value kept from a finished build names
 * the problem instead of reaching a disposed LLVM builder. */
static void test_value_checks(void) {
    char dir[] = "/tmp/kiln-gen-test-XXXXXX";
    if (!mkdtemp(dir)) return;
    char path[256];
    snprintf(path, sizeof path, "%s/args.lua", dir);
    FILE *f = fopen(path, "w");
    fputs("local K = { params = { { name = 'case', type = 'int', default = 1, min = 1, max = 5 } } }\n"
          "function K.config(spec, t)\n"
          "  if spec.case == 4 then local w = KEPT + 1 end\n"
          "  return { block = 32, grid_tile = 1 }\n"
          "end\n"
          "function K.build(b, spec, cfg)\n"
          "  local p = b:kernel{ params = { { 'x', 'ptr', 'f32' } } }\n"
          "  local v = b:load(p.x)\n"
          "  if spec.case == 1 then v = b:max(v, io.stdout) end\n"
          "  if spec.case == 2 then v = b.tid(v) end\n"
          "  if spec.case == 5 then v = b:select(b:ltu(v, 1.0), v, 1.0) end\n"
          "  KEPT = v\n"
          "  b:store(p.x, b:max(v, 1.0))\n"
          "end\nreturn K\n",
          f);
    fclose(f);
    kiln_gen_options o = {.template_dir = dir};
    kiln_gen *g2;
    kiln_error err = {0};
    kiln_module *m = NULL;
    TEST_BEGIN("builder arguments: foreign userdata, a value for the builder, a value from a finished build, ltu on floats");
    CHECK(kiln_gen_create(&g2, &o, &err) == KILN_OK, "%s", err.msg);
    CHECK(kiln_generate(g2, "args case=1", 80, KILN_EMIT_PTX, &m, &err) == KILN_EGEN, "status: %s", err.msg);
    CHECK(strstr(err.msg, "bad argument #3: expected a kiln value or number, got userdata") != NULL, "message: %s", err.msg);
    CHECK(kiln_generate(g2, "args case=2", 80, KILN_EMIT_PTX, &m, &err) == KILN_EGEN, "status: %s", err.msg);
    CHECK(strstr(err.msg, "kiln.builder expected, got kiln.value") != NULL, "message: %s", err.msg);
    CHECK(kiln_generate(g2, "args case=3", 80, KILN_EMIT_PTX, &m, &err) == KILN_OK, "%s", err.msg);
    kiln_module_free(m);
    CHECK(kiln_generate(g2, "args case=4", 80, KILN_EMIT_PTX, &m, &err) == KILN_EGEN, "status: %s", err.msg);
    CHECK(strstr(err.msg, "no kernel is being built") != NULL, "message: %s", err.msg);
    CHECK(kiln_generate(g2, "args case=5", 80, KILN_EMIT_PTX, &m, &err) == KILN_EGEN, "status: %s", err.msg);
    CHECK(strstr(err.msg, "ltu compares integers, not f32 values") != NULL, "message: %s", err.msg);
    /* and the generator still builds */
    CHECK(kiln_generate(g2, "args case=3", 80, KILN_EMIT_PTX, &m, &err) == KILN_OK, "%s", err.msg);
    kiln_module_free(m);
    kiln_gen_destroy(g2);
    TEST_END();
    unlink(path);
    rmdir(dir);
}

/* The family registry (docs/registry.md): launch() reaches the meta block, a kernel parameter it
 * leaves out is a generation error, and K.variants / K.bundle expand as declared. */
static void test_registry(void) {
    kiln_error err = {0};
    kiln_module *m = NULL;
    TEST_BEGIN("launch description in the meta block; older meta without it still parses");
    CHECK(kiln_generate(gen, "rmsnorm_bwd x=bf16 w=f32 hidden=4096", 80, KILN_EMIT_PTX, &m, &err) == KILN_OK, "%s", err.msg);
    if (m) {
        const char *t = kiln_module_text(m), *launch = kiln_module_meta(m)->launch;
        CHECK(strstr(t, "// kiln.meta tensor ws workspace 1*grid_x*hidden align=16\n") != NULL, "ws line");
        CHECK(strstr(t, "// kiln.meta scalar hidden =4096\n") != NULL, "fixed hidden is the default");
        CHECK(strstr(t, "// kiln.meta after norm_reduce w=f32 ; cols=hidden parts=parts slabs=1\n") != NULL, "after line");
        CHECK(!strncmp(launch, "tensor dx out rows hidden", 25), "meta.launch: %.60s", launch);
        /* the same text without its launch lines: what a kiln before the registry wrote */
        char *old = malloc(kiln_module_size(m) + 1);
        size_t n = 0;
        for (const char *l = t; *l; l += strcspn(l, "\n") + 1) {
            size_t k = strcspn(l, "\n") + 1;
            int launch_line = 0;
            for (const char *key = "tensor\0scalar\0stride\0problem\0before\0after\0"; *key; key += strlen(key) + 1) {
                char pre[40];
                snprintf(pre, sizeof pre, "// kiln.meta %s ", key);
                launch_line |= !strncmp(l, pre, strlen(pre));
            }
            if (!launch_line) memcpy(old + n, l, k), n += k;
            if (!l[k - 1]) break;
        }
        old[n] = 0;
        kiln_kernel_meta parsed;
        CHECK(kiln_meta_parse(old, n, &parsed, &err) == KILN_OK, "%s", err.msg);
        CHECK(parsed.launch[0] == 0 && parsed.ws_slabs == 1 && !strcmp(parsed.then_spec, "norm_reduce w=f32"), "old meta");
        free(old);
        kiln_module_free(m);
    }
    TEST_END();

    char dir[] = "/tmp/kiln-gen-test-XXXXXX";
    if (!mkdtemp(dir)) return;
    char path[256];
    snprintf(path, sizeof path, "%s/reg.lua", dir);
    FILE *f = fopen(path, "w");
    fputs("local K = { params = { { name = 'leave', type = 'bool', default = false } } }\n"
          "function K.config(spec, t) return { block = 32, grid_tile = 32 } end\n"
          "function K.build(b, spec, cfg)\n"
          "  local p = b:kernel{ params = { { 'x', 'ptr', 'f32' }, { 'n', 'i32' } } }\n"
          "end\n"
          "function K.launch(spec, cfg)\n"
          "  return { tensors = { { 'x', 'inout', { 'n' } } }, scalars = { spec.leave and { 'm' } or { 'n' } },\n"
          "           problem = { 'n' } }\n"
          "end\n"
          "K.variants = { { { 'a=1', 'a=2 b=3' }, 'c=4' }, { 'd=5', full = true }, { 'e=6', quick = true, sms = { 80 } } }\n"
          "K.bundle = { dtypes = { 'x' }, shape = 'n', shapes = { 1, 2 }, extra = { 'leave=true' },\n"
          "             arch = { ['90a'] = { 'a=1', 'a=2 b=3' } } }\n"
          "K.examples = { 'leave=true --sm 80 --rows 4', '--sm 75' }\n"
          "return K\n", f);
    fclose(f);
    /* K.bundle.arch keyed by a plain SM, and by an arch SM with a list entry that is not a string */
    char apath[2][256];
    static const char *const bad_arch[2] = {"{ ['90'] = { 'a=1' } }", "{ ['90a'] = { 'a=1', 7 } }"};
    for (int i = 0; i < 2; i++) {
        snprintf(apath[i], sizeof apath[i], "%s/badarch%d.lua", dir, i);
        f = fopen(apath[i], "w");
        fprintf(f, "local K = { params = {} }\nK.bundle = { arch = %s }\nreturn K\n", bad_arch[i]);
        fclose(f);
    }
    /* a K.bundle.extra longer than kiln_bundle_matrix.extra holds (300 lines of 17 bytes) */
    char lpath[256];
    snprintf(lpath, sizeof lpath, "%s/longx.lua", dir);
    f = fopen(lpath, "w");
    fputs("local K = { params = { { name = 'leave', type = 'bool', default = false } } }\n"
          "K.bundle = { extra = {} }\n"
          "for i = 1, 300 do K.bundle.extra[i] = 'leave=true' end\n"
          "K.examples = { 'leave=true' }\n"
          "return K\n", f);
    fclose(f);
    kiln_gen_options o = {.template_dir = dir};
    kiln_gen *g2;
    TEST_BEGIN("a kernel parameter launch() leaves out is an error naming it");
    CHECK(kiln_gen_create(&g2, &o, &err) == KILN_OK, "%s", err.msg);
    CHECK(kiln_generate(g2, "reg", 80, KILN_EMIT_PTX, &m, &err) == KILN_OK, "%s", err.msg);
    if (m) {
        CHECK(!strcmp(kiln_module_meta(m)->launch, "tensor x inout n\nscalar n\nproblem n 1 1\n"), "got %s",
              kiln_module_meta(m)->launch);
        kiln_module_free(m);
    }
    CHECK(kiln_generate(g2, "reg leave=true", 80, KILN_EMIT_PTX, &m, &err) == KILN_EGEN, "status");
    CHECK(strstr(err.msg, "templates/reg.lua: launch() declares no scalar or stride for the kernel's parameter 'n'"),
          "message: %s", err.msg);
    TEST_END();
    TEST_BEGIN("variant rows: axes in order, full / quick / sms");
    char buf[512];
    int count = 0;
    CHECK(kiln_family_variants(g2, "reg", 0, 80, buf, sizeof buf, &count, &err) == KILN_OK, "%s", err.msg);
    CHECK(count == 3 && !strcmp(buf, "reg a=1 c=4\nreg a=2 b=3 c=4\nreg e=6\n"), "quick sm_80: %d %s", count, buf);
    CHECK(kiln_family_variants(g2, "reg", 0, 75, buf, sizeof buf, &count, &err) == KILN_OK && count == 2, "quick sm_75");
    CHECK(kiln_family_variants(g2, "reg", 1, 80, buf, sizeof buf, &count, &err) == KILN_OK, "%s", err.msg);
    CHECK(count == 3 && !strcmp(buf, "reg a=1 c=4\nreg a=2 b=3 c=4\nreg d=5\n"), "full: %d %s", count, buf);
    CHECK(kiln_family_variants(g2, "reg", 1, 80, buf, 8, &count, &err) == KILN_EINVAL, "small buffer");
    kiln_bundle_matrix bm;
    CHECK(kiln_family_bundle(g2, "reg", &bm, &err) == KILN_OK, "%s", err.msg);
    CHECK(bm.declared && !strcmp(bm.dtype_keys, "x") && !strcmp(bm.shape_key, "n") && !strcmp(bm.default_shapes, "1,2") &&
          !strcmp(bm.extra, "reg leave=true\n"), "bundle: %s %s %s %s", bm.dtype_keys, bm.shape_key, bm.default_shapes, bm.extra);
    CHECK(!strcmp(bm.arch, "90a reg a=1\n90a reg a=2 b=3\n"), "bundle arch: %s", bm.arch);
    CHECK(kiln_family_bundle(g2, "badarch0", &bm, &err) == KILN_EGEN &&
              strstr(err.msg, "templates/badarch0.lua: K.bundle.arch's keys name arch-specific SMs") && strstr(err.msg, "valid SMs: 90a"),
          "an arch key naming sm_90: %s", err.msg);
    CHECK(kiln_family_bundle(g2, "badarch1", &bm, &err) == KILN_EGEN &&
              strstr(err.msg, "templates/badarch1.lua: K.bundle.arch's lists hold spec strings (entry 2)"),
          "a number in the list: %s", err.msg);
    CHECK(kiln_family_bundle(g2, "longx", &bm, &err) == KILN_EGEN &&
              strstr(err.msg, "templates/longx.lua: K.bundle.extra needs more than the 4096 bytes"),
          "a long extra: %s", err.msg);
    TEST_END();
    TEST_BEGIN("K.examples: FAMILY then each example, a line each; one without --sm is an error naming it");
    CHECK(kiln_family_examples(g2, "reg", buf, sizeof buf, &count, &err) == KILN_OK, "%s", err.msg);
    CHECK(count == 2 && !strcmp(buf, "reg leave=true --sm 80 --rows 4\nreg --sm 75\n"), "examples: %d %s", count, buf);
    CHECK(kiln_family_examples(g2, "reg", NULL, 0, &count, &err) == KILN_OK && count == 2, "measure: %d", count);
    CHECK(kiln_family_examples(g2, "reg", buf, 8, &count, &err) == KILN_EINVAL, "small buffer");
    CHECK(kiln_family_examples(g2, "longx", buf, sizeof buf, &count, &err) == KILN_EGEN &&
              strstr(err.msg, "templates/longx.lua: K.examples[1] must be a string"), "no --sm: %s", err.msg);
    CHECK(kiln_family_examples(g2, "nosuch", buf, sizeof buf, &count, &err) != KILN_OK, "unknown family");
    kiln_gen_destroy(g2);
    unlink(lpath), unlink(apath[0]), unlink(apath[1]);
    TEST_END();
    unlink(path);

    /* config().skip_codegen: the keys of gen_codegen_skips, anything else an error naming them */
    snprintf(path, sizeof path, "%s/skip.lua", dir);
    f = fopen(path, "w");
    fputs("local K = { params = { { name = 'bad', type = 'bool', default = false },\n"
          "                       { name = 'text', type = 'bool', default = false } } }\n"
          "function K.config(spec, t)\n"
          "  local skip = { 'early-cse-1', 'peephole-opt', 'machine-scheduler', 'early-cse-3' }\n"
          "  if spec.bad then skip = { 'consthoist', 'no-such-pass' } end\n"
          "  if spec.text then skip = 'consthoist' end\n"
          "  return { block = 32, grid_tile = 32, skip_codegen = skip }\n"
          "end\n"
          "function K.build(b, spec, cfg)\n"
          "  local p = b:kernel{ params = { { 'x', 'ptr', 'f32' }, { 'n', 'i32' } } }\n"
          "end\n"
          "function K.launch(spec, cfg) return { tensors = { { 'x', 'inout', { 'n' } } }, scalars = { { 'n' } }, problem = { 'n' } } end\n"
          "return K\n", f);
    fclose(f);
    TEST_BEGIN("config().skip_codegen takes the table's pass keys and names them for anything else");
    CHECK(kiln_gen_create(&g2, &o, &err) == KILN_OK, "%s", err.msg);
    CHECK(kiln_generate(g2, "skip", 80, KILN_EMIT_PTX, &m, &err) == KILN_OK, "%s", err.msg);
    kiln_module_free(m);
    CHECK(kiln_generate(g2, "skip bad=true", 80, KILN_EMIT_PTX, &m, &err) == KILN_EGEN, "status");
    CHECK(strstr(err.msg, "templates/skip.lua: config().skip_codegen: unknown pass 'no-such-pass'; valid: early-cse-1, "
                          "consthoist, peephole-opt, machine-scheduler, early-tailduplication, early-machinelicm, early-cse-3, "
                          "dead-mi-elimination, stack-coloring, stack-slot-coloring, opt-phis"),
          "message: %s", err.msg);
    CHECK(kiln_generate(g2, "skip text=true", 80, KILN_EMIT_PTX, &m, &err) == KILN_EGEN, "status");
    CHECK(strstr(err.msg, "config().skip_codegen must be a list of pass names"), "message: %s", err.msg);
    CHECK(kiln_generate(g2, "skip", 80, KILN_EMIT_PTX, &m, &err) == KILN_OK, "after the errors: %s", err.msg);
    kiln_module_free(m);
    kiln_gen_destroy(g2);
    TEST_END();
    unlink(path);
    rmdir(dir);
}

/* A primitive that asks LLVM for an intrinsic it does not have (one written for another LLVM release)
 * raises one Lua error naming it; LLVM itself would crash in Intrinsic::getOrInsertDeclaration. */
static int call_unknown_intrinsic(lua_State *L) {
    gen_intrinsic(lua_touserdata(L, 1), "llvm.nvvm.barrier0.kiln.unknown", NULL, 0, NULL, 0);
    return 0;
}

static void test_unknown_intrinsic(void) {
    TEST_BEGIN("an intrinsic LLVM does not know is an error naming it, not a crash");
    lua_State *L = luaL_newstate();
    LLVMContextRef ctx = LLVMContextCreate();
    LLVMModuleRef mod = LLVMModuleCreateWithNameInContext("unknown", ctx);
    kiln_kernel_meta meta = {0};
    gen_builder *gb = gen_builder_push(L, ctx, mod, gen_target_find(80), &meta);
    lua_pushcfunction(L, call_unknown_intrinsic);
    lua_pushlightuserdata(L, gb);
    int rc = lua_pcall(L, 1, 0, 0);
    const char *msg = rc ? lua_tostring(L, -1) : NULL;
    CHECK(rc != 0 && msg && strstr(msg, "'llvm.nvvm.barrier0.kiln.unknown' is not known to LLVM"), "got %s",
          msg ? msg : "(no error)");
    LLVMBuilderRef builder = gb->b; /* the generator disposes of it after build(); here the test does */
    lua_close(L);
    LLVMDisposeBuilder(builder);
    LLVMDisposeModule(mod);
    LLVMContextDispose(ctx);
    TEST_END();
}

/* The builder keeps the intrinsics a module declared (gen_builder.c): a second call reuses the
 * declaration of the same name and overload types, a different overload gets its own, and past the
 * cache's size every call still gets the right one. */
static const char *callee_name(LLVMValueRef call) {
    size_t n;
    return LLVMGetValueName2(LLVMGetCalledValue(call), &n);
}

static void test_intrinsic_cache(void) {
    TEST_BEGIN("intrinsic declarations are reused by name and overload, past the cache's size too");
    lua_State *L = luaL_newstate();
    LLVMContextRef ctx = LLVMContextCreate();
    LLVMModuleRef mod = LLVMModuleCreateWithNameInContext("intrinsics", ctx);
    kiln_kernel_meta meta = {0};
    gen_builder *gb = gen_builder_push(L, ctx, mod, gen_target_find(80), &meta);
    LLVMTypeRef void_fn = LLVMFunctionType(LLVMVoidTypeInContext(ctx), NULL, 0, 0);
    LLVMValueRef fn = LLVMAddFunction(mod, "f", void_fn);
    LLVMPositionBuilderAtEnd(gb->b, LLVMAppendBasicBlockInContext(ctx, fn, "entry"));
    LLVMTypeRef f32 = LLVMFloatTypeInContext(ctx), f16 = LLVMHalfTypeInContext(ctx);
    LLVMValueRef x32 = LLVMConstReal(f32, 2.0), x16 = LLVMConstReal(f16, 2.0);
    LLVMValueRef a = gen_intrinsic(gb, "llvm.fabs", &f32, 1, &x32, 1);
    LLVMValueRef b = gen_intrinsic(gb, "llvm.fabs", &f16, 1, &x16, 1);
    LLVMValueRef c = gen_intrinsic(gb, "llvm.fabs", &f32, 1, &x32, 1);
    CHECK(!strcmp(callee_name(a), "llvm.fabs.f32") && !strcmp(callee_name(b), "llvm.fabs.f16") &&
              LLVMGetCalledValue(a) == LLVMGetCalledValue(c),
          "callees %s, %s, %s", callee_name(a), callee_name(b), callee_name(c));
    /* more distinct overloads than the cache holds, each twice */
    enum { N = GEN_INTRINSICS + 8 };
    for (int round = 0; round < 2; round++)
        for (int n = 1; n <= N; n++) {
            LLVMTypeRef v = LLVMVectorType(f32, (unsigned)n);
            LLVMValueRef zero = LLVMConstNull(v);
            LLVMValueRef call = gen_intrinsic(gb, "llvm.fabs", &v, 1, &zero, 1);
            char want[32];
            snprintf(want, sizeof want, "llvm.fabs.v%df32", n);
            CHECK(!strcmp(callee_name(call), want), "call %d: %s, want %s", n, callee_name(call), want);
            CHECK(LLVMTypeOf(call) == v, "call %d returns the wrong type", n);
        }
    LLVMBuildRetVoid(gb->b);
    char *msg = NULL;
    CHECK(!LLVMVerifyModule(mod, LLVMReturnStatusAction, &msg), "module does not verify: %s", msg ? msg : "?");
    LLVMDisposeMessage(msg);
    LLVMBuilderRef builder = gb->b;
    lua_close(L);
    LLVMDisposeBuilder(builder);
    LLVMDisposeModule(mod);
    LLVMContextDispose(ctx);
    TEST_END();
}

int main(void) {
    kiln_error err = {0};
    if (kiln_gen_create(&gen, NULL, &err) != KILN_OK) {
        printf("cannot create generator: %s\n", err.msg);
        return 1;
    }
    test_canonical();
    test_errors();
    test_metadata();
    test_emit_ll_and_struct();
    test_conversions();
    test_target_table();
    test_template_errors();
    test_value_checks();
    test_registry();
    test_unknown_intrinsic();
    test_intrinsic_cache();
    kiln_gen_destroy(gen);
    return check_summary("generator");
}
