/* gen/gen_api.c - the generator pipeline: spec -> template -> LLVM module -> PTX (public API). */
#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <lauxlib.h>
#include <llvm-c/Core.h>

#include "gen.h"

struct kiln_gen {
    gen_lua *lua;
    LLVMContextRef ctx;
    gen_lower *lower; /* target machines, kept across calls */
    int opt_level;
    char *pipeline; /* LLVM pipeline text; NULL: kiln's */
    kiln_gen_timing timing; /* of the call in progress, then of the last one */
    kiln_gen_timing last;
    unsigned codegen_drop; /* GEN_DROP_* from config().lsr / .slsr = false of the call in progress */
    /* The spec kiln_canonical_spec resolved last, kept (a Lua registry reference to its table) for a
     * generation of exactly its canonical text, which then resolves nothing again: the runtime asks
     * for the canonical spec (its cache key), then generates it (docs/registry.md). Used once. */
    int resolved_ref;
    gen_spec resolved;
    unsigned long long serial; /* gen_serial: this generator's number in the process, never reused */
};

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

struct kiln_module {
    char *text;
    size_t size;
    kiln_kernel_meta meta;
};

kiln_status kiln_gen_create(kiln_gen **out, const kiln_gen_options *opt, kiln_error *err) {
    *out = NULL;
    kiln_gen *g = calloc(1, sizeof *g);
    if (!g) return kiln_fail(err, KILN_ENOMEM, "out of memory");
    kiln_status st = gen_lua_open(&g->lua, opt ? opt->template_dir : NULL, err);
    if (st != KILN_OK) {
        free(g);
        return st;
    }
    g->opt_level = opt && opt->opt_level > 0 && opt->opt_level <= 3 ? opt->opt_level : 3;
    /* KILN_PIPELINE: "kiln", "o3", or any new-pass-manager pipeline text (for experiments) */
    kiln_pipeline pipe = opt ? opt->pipeline : KILN_PIPELINE_DEFAULT;
    const char *env = getenv("KILN_PIPELINE");
    if (pipe == KILN_PIPELINE_O3 || (pipe == KILN_PIPELINE_DEFAULT && env && !strcmp(env, "o3")))
        g->pipeline = strdup("default<O3>");
    else if (pipe == KILN_PIPELINE_DEFAULT && env && *env && strcmp(env, "kiln"))
        g->pipeline = strdup(env);
    if ((st = gen_lower_create(&g->lower, err)) != KILN_OK) {
        gen_lua_close(g->lua);
        free(g);
        return st;
    }
    if (opt && opt->time_builder) gen_builder_time_primitives(gen_lua_state(g->lua));
    g->ctx = LLVMContextCreate();
    g->resolved_ref = LUA_NOREF;
    static unsigned long long serials; /* atomic: generators are created on several threads at once */
    g->serial = __atomic_add_fetch(&serials, 1, __ATOMIC_RELAXED);
    *out = g;
    return KILN_OK;
}

unsigned long long gen_serial(const kiln_gen *g) { return g->serial; }

void kiln_gen_destroy(kiln_gen *g) {
    if (!g) return;
    gen_lua_close(g->lua);
    gen_lower_destroy(g->lower);
    free(g->pipeline);
    LLVMContextDispose(g->ctx);
    free(g);
}

const kiln_gen_timing *kiln_gen_last_timing(const kiln_gen *g) { return &g->last; }

static kiln_status bad_sm(int sm, kiln_error *err) {
    int sms[16], n = kiln_targets(sms, 16);
    char list[128] = "";
    char name[16];
    for (int i = 0; i < n; i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "", kiln_sm_name(sms[i], name) + 3);
    return kiln_fail(err, KILN_EINVAL, "unsupported SM %d; valid: %s (%d+N is sm_Na)", sm, list, KILN_SM_ARCH);
}

/* Entry name: kiln_<family>_<values of the canonical spec>, non-alphanumerics as '_'. */
static void entry_name(const char *canonical, char *out, size_t size) {
    size_t n = (size_t)snprintf(out, size, "kiln_");
    int in_value = 1; /* the family name counts as a value */
    for (const char *p = canonical; *p && n + 2 < size; p++) {
        if (*p == ' ') {
            in_value = 0;
            out[n++] = '_';
        } else if (*p == '=') {
            in_value = 1;
        } else if (in_value) {
            out[n++] = isalnum((unsigned char)*p) ? *p : '_';
        }
    }
    out[n] = 0;
}

/* Reads geometry from the config() table at the top of the stack into meta. */
static kiln_status read_config(lua_State *L, const gen_target *t, kiln_kernel_meta *m, kiln_error *err) {
    static const char *fields[] = {"block", "grid_tile"};
    unsigned *dst[] = {m->block, m->grid_tile};
    for (int f = 0; f < 2; f++) {
        dst[f][0] = dst[f][1] = dst[f][2] = 1;
        int ty = lua_getfield(L, -1, fields[f]);
        if (ty == LUA_TNUMBER) {
            dst[f][0] = (unsigned)lua_tointeger(L, -1);
        } else if (ty == LUA_TTABLE) {
            for (int i = 0; i < 3; i++) {
                lua_geti(L, -1, i + 1);
                if (lua_isinteger(L, -1)) dst[f][i] = (unsigned)lua_tointeger(L, -1);
                lua_pop(L, 1);
            }
        } else {
            lua_pop(L, 1);
            return kiln_fail(err, KILN_EGEN, "templates/%s.lua: config() must return '%s'", m->family, fields[f]);
        }
        lua_pop(L, 1);
    }
    struct { const char *name; unsigned *dst; } opt[] = {
        {"dynamic_smem", &m->dynamic_smem}, {"align", &m->align_bytes},
        {"rows_per_block", &m->rows_per_block}, {"threads_per_row", &m->threads_per_row},
        {"workspace_slabs", &m->ws_slabs}, {"workspace_rows", &m->ws_rows_per_block}};
    for (size_t i = 0; i < sizeof opt / sizeof opt[0]; i++) {
        lua_getfield(L, -1, opt[i].name);
        *opt[i].dst = lua_isinteger(L, -1) ? (unsigned)lua_tointeger(L, -1) : 0;
        lua_pop(L, 1);
    }
    lua_getfield(L, -1, "then_spec"); /* the kernel to launch after this one (two-kernel families) */
    if (lua_isstring(L, -1)) snprintf(m->then_spec, sizeof m->then_spec, "%s", lua_tostring(L, -1));
    lua_pop(L, 1);
    unsigned threads = m->block[0] * m->block[1] * m->block[2];
    if (threads == 0 || threads > t->max_threads || !m->grid_tile[0] || !m->grid_tile[1] || !m->grid_tile[2])
        return kiln_fail(err, KILN_EGEN, "templates/%s.lua chose %u threads per block (%s allows 1..%u)",
                         m->family, threads, kiln_sm_name(t->sm, (char[16]){0}), t->max_threads);
    return KILN_OK;
}

/* Writes the stage's text into $KILN_DUMP_DIR/<entry>_sm<N>.<ext> when that is set. */
static void dump_stage(const kiln_kernel_meta *m, const char *ext, const char *text, size_t len) {
    const char *dir = getenv("KILN_DUMP_DIR");
    if (!dir || !*dir) return;
    char path[4096];
    char sm[16];
    snprintf(path, sizeof path, "%s/%s_sm%s.%s", dir, m->entry, kiln_sm_name(m->sm, sm) + 3, ext);
    kiln_write_file(path, text, len, NULL); /* a debugging aid: a failed dump is not the caller's error */
}

/* Adds the drop bits of config().skip_codegen (a list of gen_codegen_skips keys) to *drop; a bad
 * entry is an error naming the valid keys. */
static kiln_status read_skip_codegen(lua_State *L, int cfg, const char *family, unsigned *drop, kiln_error *err) {
    int type = lua_getfield(L, cfg, "skip_codegen");
    kiln_status st = KILN_OK;
    if (type != LUA_TNIL && type != LUA_TTABLE)
        st = kiln_fail(err, KILN_EGEN, "templates/%s.lua: config().skip_codegen must be a list of pass names", family);
    for (lua_Integer i = 1; st == KILN_OK && type == LUA_TTABLE && lua_geti(L, -1, i) != LUA_TNIL; i++) {
        const char *key = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : "";
        int k = 0;
        while (gen_codegen_skips[k].key && strcmp(key, gen_codegen_skips[k].key)) k++;
        if (gen_codegen_skips[k].key) {
            *drop |= (unsigned)GEN_DROP_SKIP << k;
        } else {
            char valid[256] = "";
            for (int j = 0; gen_codegen_skips[j].key; j++)
                snprintf(valid + strlen(valid), sizeof valid - strlen(valid), "%s%s", j ? ", " : "",
                         gen_codegen_skips[j].key);
            st = kiln_fail(err, KILN_EGEN, "templates/%s.lua: config().skip_codegen: unknown pass '%s'; valid: %s",
                           family, key, valid);
        }
        lua_pop(L, 1);
    }
    if (type == LUA_TTABLE && st == KILN_OK) lua_pop(L, 1); /* the nil that ended the list */
    lua_pop(L, 1);
    return st;
}

/* Runs the template for (spec, sm) and leaves a verified, optimized module in ctx. */
static kiln_status build_optimized(kiln_gen *g, const char *spec_text, int sm, LLVMContextRef ctx,
                                   LLVMModuleRef *out, kiln_kernel_meta *m, const gen_target **tp,
                                   kiln_error *err) {
    *out = NULL;
    memset(m, 0, sizeof *m);
    kiln_gen_timing *tm = &g->timing;
    double t0 = now_ms();
    const gen_target *t = gen_target_find(sm);
    if (!t) return bad_sm(sm, err);
    *tp = t;
    gen_spec spec;
    lua_State *L = gen_lua_state(g->lua);
    int top = lua_gettop(L);
    kiln_status st = KILN_OK;
    if (g->resolved_ref != LUA_NOREF && !strcmp(spec_text, g->resolved.canonical)) {
        spec = g->resolved; /* resolved by kiln_canonical_spec just before */
        lua_rawgeti(L, LUA_REGISTRYINDEX, g->resolved_ref);
        luaL_unref(L, LUA_REGISTRYINDEX, g->resolved_ref);
        g->resolved_ref = LUA_NOREF;
    } else {
        if ((st = gen_spec_parse_known(g->lua, spec_text, &spec, err)) != KILN_OK) return st;
        if ((st = gen_spec_resolve(g->lua, &spec, err)) != KILN_OK) return st;
    }
    int spec_idx = lua_gettop(L);
    snprintf(m->family, sizeof m->family, "%s", spec.family);
    snprintf(m->spec, sizeof m->spec, "%s", spec.canonical);
    entry_name(spec.canonical, m->entry, sizeof m->entry);
    m->sm = sm;
    gen_lua_push_family(g->lua, spec.family, err);
    int tmpl = lua_gettop(L);
    double t1 = now_ms();
    tm->spec = t1 - t0;
    char what[KILN_SPEC_MAX + 32];
    char smname[16];
    snprintf(what, sizeof what, "%s (%s)", spec.canonical, kiln_sm_name(sm, smname));
    lua_getfield(L, tmpl, "config");
    lua_pushvalue(L, spec_idx);
    gen_builder_push_target(L, t);
    if ((st = gen_lua_call(L, 2, 1, what, err)) != KILN_OK) goto done;
    if (!lua_istable(L, -1)) {
        st = kiln_fail(err, KILN_EGEN, "templates/%s.lua: config() must return a table", spec.family);
        goto done;
    }
    int cfg = lua_gettop(L);
    if ((st = read_config(L, t, m, err)) != KILN_OK) goto done;
    if ((st = gen_launch_describe(L, tmpl, spec_idx, cfg, m, err)) != KILN_OK) goto done;
    /* config().pipeline = "kiln": the family's variants are proven no worse under kiln's IR
     * pipeline (tests/quality/); other families get default<O3> until theirs are.
     * config().rotate_loops: the template's loops gain from rotation (gen_lower.c).
     * config().lsr = false: NVPTX's loop strength reduction is left out of codegen; config().slsr =
     * false: its straight-line strength reduction; each where the family's ptxas matrix variants are
     * no worse without it (docs/jit.md, docs/llvm22.md). */
    lua_getfield(L, cfg, "pipeline");
    int kiln_pipe = lua_type(L, -1) == LUA_TSTRING && !strcmp(lua_tostring(L, -1), "kiln");
    lua_getfield(L, cfg, "rotate_loops");
    int rotate = lua_toboolean(L, -1);
    lua_getfield(L, cfg, "lsr");
    g->codegen_drop = lua_isnil(L, -1) || lua_toboolean(L, -1) ? 0u : GEN_DROP_LSR;
    lua_getfield(L, cfg, "slsr");
    if (!lua_isnil(L, -1) && !lua_toboolean(L, -1)) g->codegen_drop |= GEN_DROP_SLSR;
    lua_pop(L, 4);
    /* config().skip_codegen = { KEY, ... }: more codegen passes left out, by gen_codegen_skips' keys */
    if ((st = read_skip_codegen(L, cfg, spec.family, &g->codegen_drop, err)) != KILN_OK) goto done;
    const char *pipeline = g->pipeline ? g->pipeline : kiln_pipe ? NULL : "default<O3>";
    double t2 = now_ms();
    tm->config = t2 - t1;
    gen_builder_time_reset(L);
    LLVMModuleRef mod = LLVMModuleCreateWithNameInContext(m->entry, ctx);
    gen_lower_prepare(mod);
    lua_getfield(L, tmpl, "build");
    gen_builder *gb = gen_builder_push(L, ctx, mod, t, m);
    lua_pushvalue(L, spec_idx);
    lua_pushvalue(L, cfg);
    st = gen_lua_call(L, 3, 0, what, err);
    tm->builder = gen_builder_time_reset(L);
    int ptx_needed = 0;
    const char *arch_method = gb->arch_method;
    kiln_status fst = gen_builder_finish(gb, &m->static_smem, &ptx_needed, st == KILN_OK ? err : NULL);
    if (st == KILN_OK) st = fst;
    lua_getfield(L, cfg, "arch_specific");
    bool arch_declared = lua_toboolean(L, -1);
    lua_pop(L, 1);
    if (st == KILN_OK && arch_method && !arch_declared) /* the runtime picks sm_90a by that flag (kiln_arch_specific) */
        st = kiln_fail(err, KILN_EGEN, "%s uses %s, which only the arch-specific target has, but templates/%s.lua's "
                       "config() does not return arch_specific = true for it (the runtime would never choose this "
                       "path)", what, arch_method, spec.family);
    if (st == KILN_OK) st = gen_launch_covers(m, err);
    m->ptx_version = ptx_needed > t->ptx_min ? ptx_needed : t->ptx_min;
    if (st == KILN_OK && m->static_smem + m->dynamic_smem > t->smem_optin_max)
        st = kiln_fail(err, KILN_EGEN, "%s needs %u bytes of shared memory; %s allows %u", what,
                       m->static_smem + m->dynamic_smem, smname, t->smem_optin_max);
    tm->build = now_ms() - t2;
    if (st == KILN_OK && getenv("KILN_DUMP_DIR")) {
        char *ir = LLVMPrintModuleToString(mod);
        dump_stage(m, "raw.ll", ir, strlen(ir));
        LLVMDisposeMessage(ir);
    }
    if (st == KILN_OK)
        st = gen_lower_optimize(g->lower, mod, t, m->ptx_version, g->opt_level, pipeline, rotate, tm, err);
    if (st != KILN_OK) {
        LLVMDisposeModule(mod);
    } else {
        *out = mod;
    }
done:
    lua_settop(L, top);
    return st;
}

kiln_status kiln_arch_specific(kiln_gen *g, const char *spec_text, int sm, int *out, kiln_error *err) {
    *out = 0;
    if (!g || !spec_text) return kiln_fail(err, KILN_EINVAL, "kiln_arch_specific: generator and spec are required");
    const gen_target *t = gen_target_find(sm);
    if (!t) return bad_sm(sm, err);
    if (!kiln_sm_is_arch(sm)) return KILN_OK;
    lua_State *L = gen_lua_state(g->lua);
    int top = lua_gettop(L);
    gen_spec spec;
    kiln_status st = gen_spec_parse_known(g->lua, spec_text, &spec, err);
    if (st == KILN_OK) st = gen_spec_resolve(g->lua, &spec, err);
    if (st != KILN_OK) {
        lua_settop(L, top);
        return st;
    }
    int spec_idx = lua_gettop(L);
    st = gen_lua_push_family(g->lua, spec.family, err);
    if (st == KILN_OK) {
        char what[KILN_SPEC_MAX + 32], smname[16];
        snprintf(what, sizeof what, "%s (%s)", spec.canonical, kiln_sm_name(sm, smname));
        lua_getfield(L, -1, "config");
        lua_pushvalue(L, spec_idx);
        gen_builder_push_target(L, t);
        st = gen_lua_call(L, 2, 1, what, err);
        if (st == KILN_OK && !lua_istable(L, -1))
            st = kiln_fail(err, KILN_EGEN, "templates/%s.lua: config() must return a table", spec.family);
        if (st == KILN_OK) {
            lua_getfield(L, -1, "arch_specific");
            *out = lua_toboolean(L, -1);
        }
    }
    lua_settop(L, top);
    return st;
}

kiln_status gen_build_module(kiln_gen *g, const char *spec, int sm, LLVMContextRef ctx, LLVMModuleRef *out,
                             kiln_kernel_meta *meta, kiln_error *err) {
    const gen_target *t;
    LLVMModuleRef mod;
    kiln_status st = build_optimized(g, spec, sm, ctx ? ctx : g->ctx, &mod, meta, &t, err);
    if (st != KILN_OK) return st;
    (void)t;
    *out = mod;
    return KILN_OK;
}

kiln_status kiln_generate(kiln_gen *g, const char *spec, int sm, kiln_emit emit, kiln_module **out,
                          kiln_error *err) {
    *out = NULL;
    if (!g || !spec) return kiln_fail(err, KILN_EINVAL, "kiln_generate: generator and spec are required");
    kiln_module *km = calloc(1, sizeof *km);
    if (!km) return kiln_fail(err, KILN_ENOMEM, "out of memory");
    double t0 = now_ms();
    struct timespec w0, w1;
    clock_gettime(CLOCK_MONOTONIC, &w0);
    memset(&g->timing, 0, sizeof g->timing);
    LLVMModuleRef mod;
    const gen_target *t;
    kiln_status st = build_optimized(g, spec, sm, g->ctx, &mod, &km->meta, &t, err);
    char *body = NULL;
    size_t blen = 0;
    if (st == KILN_OK) {
        if (getenv("KILN_DUMP_DIR")) {
            char *ir = LLVMPrintModuleToString(mod);
            dump_stage(&km->meta, "opt.ll", ir, strlen(ir));
            LLVMDisposeMessage(ir);
        }
        st = gen_lower_emit(g->lower, mod, t, km->meta.ptx_version, emit, g->codegen_drop, &body, &blen, &g->timing, err);
        LLVMDisposeModule(mod);
    }
    double t1 = now_ms();
    if (st != KILN_OK) {
        free(km);
        return st;
    }
    /* The metadata block leads the text (as comments in both PTX and LLVM IR). */
    int mlen = kiln_meta_format(&km->meta, NULL, 0);
    km->text = malloc((size_t)mlen + blen + 1);
    if (!km->text) {
        free(body);
        free(km);
        return kiln_fail(err, KILN_ENOMEM, "out of memory");
    }
    kiln_meta_format(&km->meta, km->text, (size_t)mlen + 1);
    if (emit == KILN_EMIT_LL)
        for (char *p = km->text; (p = strstr(p, "// kiln.meta")); p++) p[0] = p[1] = ';';
    memcpy(km->text + mlen, body, blen);
    km->text[mlen + blen] = 0;
    km->size = (size_t)mlen + blen;
    free(body);
    if (emit == KILN_EMIT_PTX) dump_stage(&km->meta, "ptx", km->text, km->size);
    double t2 = now_ms();
    g->timing.finish = t2 - t1;
    g->timing.total = t2 - t0;
    clock_gettime(CLOCK_MONOTONIC, &w1);
    g->timing.total_wall = (double)(w1.tv_sec - w0.tv_sec) * 1e3 + (double)(w1.tv_nsec - w0.tv_nsec) * 1e-6;
    g->last = g->timing;
    *out = km;
    return KILN_OK;
}

const char *kiln_module_text(const kiln_module *m) { return m->text; }
size_t kiln_module_size(const kiln_module *m) { return m->size; }
const kiln_kernel_meta *kiln_module_meta(const kiln_module *m) { return &m->meta; }

void kiln_module_free(kiln_module *m) {
    if (!m) return;
    free(m->text);
    free(m);
}

kiln_status kiln_canonical_spec(kiln_gen *g, const char *spec_text, char *buf, size_t size, kiln_error *err) {
    gen_spec spec;
    kiln_status st = gen_spec_parse_known(g->lua, spec_text, &spec, err);
    if (st != KILN_OK) return st;
    lua_State *L = gen_lua_state(g->lua);
    int top = lua_gettop(L);
    st = gen_spec_resolve(g->lua, &spec, err);
    if (st == KILN_OK) { /* kept for a generation of this canonical spec (one at a time) */
        if (g->resolved_ref != LUA_NOREF) luaL_unref(L, LUA_REGISTRYINDEX, g->resolved_ref);
        g->resolved_ref = luaL_ref(L, LUA_REGISTRYINDEX);
        g->resolved = spec;
    }
    lua_settop(L, top);
    if (st != KILN_OK) return st;
    if ((size_t)snprintf(buf, size, "%s", spec.canonical) >= size)
        return kiln_fail(err, KILN_EINVAL, "buffer too small for the canonical spec");
    return KILN_OK;
}

kiln_status kiln_spec_value(kiln_gen *g, const char *spec_text, const char *key, char *buf, size_t size, kiln_error *err) {
    char canon[KILN_SPEC_MAX];
    gen_spec spec;
    kiln_status st = kiln_canonical_spec(g, spec_text, canon, sizeof canon, err);
    if (st == KILN_OK) st = gen_spec_parse(canon, &spec, err);
    if (st != KILN_OK) return st;
    for (int i = 0; i < spec.nkeys; i++)
        if (!strcmp(spec.keys[i], key)) {
            if ((size_t)snprintf(buf, size, "%s", spec.values[i]) >= size)
                return kiln_fail(err, KILN_EINVAL, "buffer too small for the value of '%s'", key);
            return KILN_OK;
        }
    return kiln_fail(err, KILN_EINVAL, "%s has no key '%s' (kiln list shows its keys)", spec.family, key);
}

kiln_status kiln_describe(kiln_gen *g, char *buf, size_t size, kiln_error *err) {
    return gen_spec_describe(g->lua, buf, size, err);
}

int kiln_families(kiln_gen *g, char names[][KILN_NAME_MAX], int cap) {
    return gen_lua_families(g->lua, names, cap);
}

kiln_status kiln_family_variants(kiln_gen *g, const char *family, int full, int sm, char *buf, size_t size, int *count,
                                 kiln_error *err) {
    return gen_family_variants(g->lua, family, full, sm, buf, size, count, err);
}

kiln_status kiln_family_bundle(kiln_gen *g, const char *family, kiln_bundle_matrix *out, kiln_error *err) {
    return gen_family_bundle(g->lua, family, out, err);
}

kiln_status kiln_template_source(kiln_gen *g, const char *family, const char **src, size_t *len, kiln_error *err) {
    return gen_lua_template_source(g->lua, family, src, len, err);
}

kiln_status kiln_family_examples(kiln_gen *g, const char *family, char *buf, size_t size, int *count, kiln_error *err) {
    return gen_family_examples(g->lua, family, buf, size, count, err);
}

static char llvm_version[32];
static pthread_once_t llvm_version_once = PTHREAD_ONCE_INIT;

static void read_llvm_version(void) {
    unsigned major, minor, patch;
    LLVMGetVersion(&major, &minor, &patch);
    snprintf(llvm_version, sizeof llvm_version, "%u.%u.%u", major, minor, patch);
}

const char *kiln_llvm_version(void) {
    pthread_once(&llvm_version_once, read_llvm_version);
    return llvm_version;
}
