/* gen/gen_launch.c - a template's declarations beyond its kernel: the launch problem (meta lines) and the variant matrix. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>

#include "gen.h"

/* Appends one line to the launch text; -1 when it does not fit. */
static int add_line(kiln_kernel_meta *m, const char *line) {
    size_t have = strlen(m->launch), n = strlen(line);
    if (strchr(line, '\n') || have + n + 2 > sizeof m->launch) return -1;
    memcpy(m->launch + have, line, n);
    m->launch[have + n] = '\n';
    m->launch[have + n + 1] = 0;
    return 0;
}

/* The value at the top of the stack as expression text: integers as such, floats with 17 digits
 * (a double's exact round trip), strings as written. NULL for other types. */
static const char *expr_text(lua_State *L, char *buf, size_t size) {
    if (lua_isinteger(L, -1)) snprintf(buf, size, "%lld", (long long)lua_tointeger(L, -1));
    else if (lua_type(L, -1) == LUA_TNUMBER) snprintf(buf, size, "%.17g", lua_tonumber(L, -1));
    else if (lua_type(L, -1) == LUA_TSTRING) snprintf(buf, size, "%s", lua_tostring(L, -1));
    else return NULL;
    return strpbrk(buf, " \t\n;") ? NULL : buf;
}

static int declares(const char *launch, const char *key, const char *name);

#define BAD(...) (kiln_fail(err, KILN_EGEN, "templates/%s.lua: launch(): " __VA_ARGS__), -1)

/* Lines "tensor NAME ROLE[?] DIM... [align=N]": entries {name, role, {dims...}, optional = true, align = N}. */
static int tensors(lua_State *L, int t, kiln_kernel_meta *m, kiln_error *err) {
    static const char *const roles[] = {"in", "out", "inout", "workspace"};
    lua_Integer n = luaL_len(L, t);
    for (lua_Integer i = 1; i <= n; i++) {
        char line[KILN_SPEC_MAX], d[128];
        lua_geti(L, t, i);
        int e = lua_gettop(L);
        lua_geti(L, e, 1);
        lua_geti(L, e, 2);
        const char *name = lua_tostring(L, -2), *role = lua_tostring(L, -1);
        int known = 0;
        for (size_t r = 0; role && r < sizeof roles / sizeof roles[0]; r++) known |= !strcmp(role, roles[r]);
        if (!name || !known) return BAD("tensor %lld needs a name and a role (in, out, inout, workspace)", m->family, (long long)i);
        lua_getfield(L, e, "optional");
        int n0 = snprintf(line, sizeof line, "tensor %s %s%s", name, role, lua_toboolean(L, -1) ? "?" : "");
        lua_pop(L, 1);
        if (lua_geti(L, e, 3) != LUA_TTABLE) return BAD("tensor '%s' needs its dims {...}", m->family, name);
        lua_Integer nd = luaL_len(L, -1);
        if (nd < 1 || nd > KILN_LAUNCH_DIMS) return BAD("tensor '%s' has %lld dims; valid: 1..%d", m->family, name, (long long)nd, KILN_LAUNCH_DIMS);
        for (lua_Integer k = 1; k <= nd; k++) {
            lua_geti(L, -1, k);
            if (!expr_text(L, d, sizeof d)) return BAD("tensor '%s': dim %lld is not an expression", m->family, name, (long long)k);
            n0 += snprintf(line + n0, sizeof line - (size_t)n0, " %s", d);
            lua_pop(L, 1);
        }
        /* align=N: the pointer, and each stride in bytes, must be a multiple of N (vector accesses) */
        if (lua_getfield(L, e, "align") != LUA_TNIL) {
            if (!lua_isinteger(L, -1) || lua_tointeger(L, -1) < 1) return BAD("tensor '%s': align must be a positive integer", m->family, name);
            if (lua_tointeger(L, -1) > 1) n0 += snprintf(line + n0, sizeof line - (size_t)n0, " align=%lld", (long long)lua_tointeger(L, -1));
        }
        if (n0 >= (int)sizeof line || add_line(m, line)) return BAD("the launch description is too long", m->family);
        lua_settop(L, e - 1);
    }
    return 0;
}

/* Lines "scalar NAME [[=]EXPR]": entries {name, default, fixed = true} (a number or an expression; none:
 * required at launch; fixed: the value the kernel was generated for, a launch may only repeat it). */
static int scalars(lua_State *L, int t, kiln_kernel_meta *m, kiln_error *err) {
    lua_Integer n = luaL_len(L, t);
    for (lua_Integer i = 1; i <= n; i++) {
        char line[KILN_SPEC_MAX], d[128];
        lua_geti(L, t, i);
        lua_geti(L, -1, 1);
        const char *name = lua_tostring(L, -1);
        if (!name) return BAD("scalar %lld needs a name", m->family, (long long)i);
        int n0 = snprintf(line, sizeof line, "scalar %s", name);
        lua_geti(L, -2, 2);
        lua_getfield(L, -3, "fixed");
        int fixed = lua_toboolean(L, -1);
        lua_pop(L, 1);
        if (!lua_isnil(L, -1)) {
            if (!expr_text(L, d, sizeof d)) return BAD("scalar '%s': its default is not an expression", m->family, name);
            n0 += snprintf(line + n0, sizeof line - (size_t)n0, " %s%s", fixed ? "=" : "", d);
        }
        if (n0 >= (int)sizeof line || add_line(m, line)) return BAD("the launch description is too long", m->family);
        lua_pop(L, 3);
    }
    return 0;
}

/* Lines "stride NAME TENSOR AXIS": entries {param, tensor, axis (0-based)}. */
static int strides(lua_State *L, int t, kiln_kernel_meta *m, kiln_error *err) {
    lua_Integer n = luaL_len(L, t);
    for (lua_Integer i = 1; i <= n; i++) {
        char line[KILN_SPEC_MAX];
        lua_geti(L, t, i);
        lua_geti(L, -1, 1);
        lua_geti(L, -2, 2);
        lua_geti(L, -3, 3);
        const char *name = lua_tostring(L, -3), *tensor = lua_tostring(L, -2);
        if (!name || !tensor || !lua_isinteger(L, -1)) return BAD("stride %lld needs {param, tensor, axis}", m->family, (long long)i);
        snprintf(line, sizeof line, "stride %s %s %lld", name, tensor, (long long)lua_tointeger(L, -1));
        if (add_line(m, line)) return BAD("the launch description is too long", m->family);
        lua_pop(L, 4);
    }
    return 0;
}

/* Lines "tmap PARAM TENSOR BOX... [swizzle=N]": entries {param, tensor, box = {expr per dim of the tensor,
 * outermost first}, swizzle = 32|64|128} (a 'tensormap' kernel parameter over a declared tensor). */
static int tmaps(lua_State *L, int t, kiln_kernel_meta *m, kiln_error *err) {
    lua_Integer n = luaL_len(L, t);
    for (lua_Integer i = 1; i <= n; i++) {
        char line[KILN_SPEC_MAX], d[128];
        lua_geti(L, t, i);
        int e = lua_gettop(L);
        lua_geti(L, e, 1);
        lua_geti(L, e, 2);
        const char *name = lua_tostring(L, -2), *tensor = lua_tostring(L, -1);
        if (!name || !tensor) return BAD("tmap %lld needs {param, tensor, box = {...}}", m->family, (long long)i);
        if (!declares(m->launch, "tensor", tensor)) return BAD("tmap '%s' names the undeclared tensor '%s'", m->family, name, tensor);
        int n0 = snprintf(line, sizeof line, "tmap %s %s", name, tensor);
        if (lua_getfield(L, e, "box") != LUA_TTABLE) return BAD("tmap '%s' needs its box {...}", m->family, name);
        lua_Integer nd = luaL_len(L, -1);
        if (nd < 1 || nd > KILN_LAUNCH_DIMS) return BAD("tmap '%s' has %lld box dims; valid: 1..%d", m->family, name, (long long)nd, KILN_LAUNCH_DIMS);
        for (lua_Integer k = 1; k <= nd; k++) {
            lua_geti(L, -1, k);
            if (!expr_text(L, d, sizeof d)) return BAD("tmap '%s': box dim %lld is not an expression", m->family, name, (long long)k);
            n0 += snprintf(line + n0, sizeof line - (size_t)n0, " %s", d);
            lua_pop(L, 1);
        }
        lua_pop(L, 1);
        if (lua_getfield(L, e, "swizzle") != LUA_TNIL) {
            lua_Integer sw = lua_tointeger(L, -1);
            if (sw != 32 && sw != 64 && sw != 128) return BAD("tmap '%s': swizzle must be 32, 64 or 128 (or absent: none)", m->family, name);
            n0 += snprintf(line + n0, sizeof line - (size_t)n0, " swizzle=%lld", (long long)sw);
        }
        if (n0 >= (int)sizeof line || add_line(m, line)) return BAD("the launch description is too long", m->family);
        lua_settop(L, e - 1);
    }
    return 0;
}

/* Line "problem E0 E1 E2": up to 3 expressions (missing axes are 1). */
static int problem(lua_State *L, int t, kiln_kernel_meta *m, kiln_error *err) {
    char line[KILN_SPEC_MAX] = "problem", d[128];
    lua_Integer n = luaL_len(L, t);
    if (n < 1 || n > 3) return BAD("problem has %lld axes; valid: 1..3", m->family, (long long)n);
    for (lua_Integer k = 1; k <= 3; k++) {
        lua_geti(L, t, k);
        const char *e = k <= n ? expr_text(L, d, sizeof d) : "1";
        if (!e) return BAD("problem axis %lld is not an expression", m->family, (long long)k);
        snprintf(line + strlen(line), sizeof line - strlen(line), " %s", e);
        lua_pop(L, 1);
    }
    return add_line(m, line) ? BAD("the launch description is too long", m->family) : 0;
}

/* Lines "before SPEC ; NAME=EXPR..." / "after ...": entries {spec, bind = {name = expr}}, in order. */
static int steps(lua_State *L, int t, const char *when, kiln_kernel_meta *m, kiln_error *err) {
    lua_Integer n = luaL_len(L, t);
    for (lua_Integer i = 1; i <= n; i++) {
        char line[KILN_SPEC_MAX], d[128];
        lua_geti(L, t, i);
        lua_geti(L, -1, 1);
        const char *spec = lua_tostring(L, -1);
        if (!spec || strchr(spec, ';')) return BAD("%s step %lld needs a spec", m->family, when, (long long)i);
        int n0 = snprintf(line, sizeof line, "%s %s", when, spec);
        lua_pop(L, 1);
        if (lua_getfield(L, -1, "bind") == LUA_TTABLE) {
            /* in name order: the text does not depend on Lua's table order */
            char names[16][KILN_NAME_MAX];
            int nn = 0;
            lua_pushnil(L);
            while (lua_next(L, -2) && nn < 16) {
                lua_pop(L, 1);
                if (lua_type(L, -1) == LUA_TSTRING) snprintf(names[nn++], KILN_NAME_MAX, "%s", lua_tostring(L, -1));
            }
            qsort(names, (size_t)nn, KILN_NAME_MAX, (int (*)(const void *, const void *))strcmp);
            n0 += snprintf(line + n0, sizeof line - (size_t)n0, " ;");
            for (int k = 0; k < nn; k++) {
                lua_getfield(L, -1, names[k]);
                if (!expr_text(L, d, sizeof d)) return BAD("%s step '%s': binding '%s' is not an expression", m->family, when, spec, names[k]);
                n0 += snprintf(line + n0, sizeof line - (size_t)n0, " %s=%s", names[k], d);
                lua_pop(L, 1);
            }
        }
        lua_pop(L, 2);
        if (n0 >= (int)sizeof line || add_line(m, line)) return BAD("the launch description is too long", m->family);
    }
    return 0;
}

kiln_status gen_launch_describe(lua_State *L, int tmpl, int spec_idx, int cfg, kiln_kernel_meta *m, kiln_error *err) {
    m->launch[0] = 0;
    int top = lua_gettop(L);
    if (lua_getfield(L, tmpl, "launch") != LUA_TFUNCTION) {
        lua_settop(L, top);
        return KILN_OK; /* a template may leave its launch undeclared: only typed helpers launch it then */
    }
    lua_pushvalue(L, spec_idx);
    lua_pushvalue(L, cfg);
    char what[KILN_SPEC_MAX + 16];
    snprintf(what, sizeof what, "%s: launch()", m->spec);
    kiln_status st = gen_lua_call(L, 2, 1, what, err);
    if (st != KILN_OK) {
        lua_settop(L, top);
        return st;
    }
    int d = lua_gettop(L);
    int rc = 0;
    if (!lua_istable(L, d)) rc = BAD("must return a table", m->family);
    static const char *const parts[] = {"tensors", "scalars", "strides", "problem", "before", "after", "tmaps"};
    for (size_t i = 0; rc == 0 && i < sizeof parts / sizeof parts[0]; i++) {
        if (lua_getfield(L, d, parts[i]) == LUA_TNIL) {
            if (i == 3) rc = BAD("must declare problem", m->family);
            lua_pop(L, 1);
            continue;
        }
        int t = lua_gettop(L);
        if (!lua_istable(L, t)) rc = BAD("%s must be a table", m->family, parts[i]);
        else if (i == 0) rc = tensors(L, t, m, err);
        else if (i == 1) rc = scalars(L, t, m, err);
        else if (i == 2) rc = strides(L, t, m, err);
        else if (i == 3) rc = problem(L, t, m, err);
        else if (i == 6) rc = tmaps(L, t, m, err);
        else rc = steps(L, t, parts[i], m, err);
        lua_settop(L, t - 1);
    }
    lua_settop(L, top);
    return rc ? KILN_EGEN : KILN_OK;
}

/* ---- the variant matrix ---- */

/* Whether row (table at idx) applies to the set and SM: set "full" takes every row, "quick" those
 * without full = true; sms = {...} limits a row to those SMs (0: any), numbers or names ("90a"). An
 * arch-specific SM (sm_90a) takes only the rows that name it: the others' kernels there are the portable
 * SM's (sm_90) under another .target, already in that SM's rows. */
static int row_applies(lua_State *L, int idx, int full, int sm) {
    lua_getfield(L, idx, "full");
    int full_only = lua_toboolean(L, -1);
    lua_pop(L, 1);
    lua_getfield(L, idx, "quick");
    int quick_only = lua_toboolean(L, -1);
    lua_pop(L, 1);
    if ((full_only && !full) || (quick_only && full)) return 0;
    int ok = !kiln_sm_is_arch(sm);
    if (sm && lua_getfield(L, idx, "sms") == LUA_TTABLE) {
        char name[16];
        kiln_sm_name(sm, name);
        ok = 0;
        for (lua_Integer i = 1, n = luaL_len(L, -1); i <= n && !ok; i++) {
            lua_geti(L, -1, i);
            ok = lua_type(L, -1) == LUA_TSTRING ? !strcmp(lua_tostring(L, -1), name + 3) : lua_tointeger(L, -1) == sm;
            lua_pop(L, 1);
        }
    }
    lua_pop(L, sm ? 1 : 0);
    return ok;
}

typedef struct out_buf {
    char *buf;
    size_t size, used;
    int count;
} out_buf;

/* Expands the row's axes (array part: each a string or a list of strings) from axis k on. */
static void expand(lua_State *L, int row, lua_Integer k, lua_Integer naxes, char *prefix, out_buf *o) {
    if (k > naxes) {
        int n = snprintf(o->buf ? o->buf + (o->used < o->size ? o->used : o->size) : NULL,
                         o->buf && o->used < o->size ? o->size - o->used : 0, "%s\n", prefix);
        o->used += (size_t)n;
        o->count++;
        return;
    }
    size_t len = strlen(prefix);
    lua_geti(L, row, k);
    int axis = lua_gettop(L);
    lua_Integer nv = lua_istable(L, axis) ? luaL_len(L, axis) : 1;
    for (lua_Integer v = 1; v <= nv; v++) {
        if (lua_istable(L, axis)) lua_geti(L, axis, v);
        else lua_pushvalue(L, axis);
        const char *frag = lua_tostring(L, -1);
        if (frag && *frag) snprintf(prefix + len, KILN_SPEC_MAX - len, " %s", frag);
        lua_pop(L, 1);
        expand(L, row, k + 1, naxes, prefix, o);
        prefix[len] = 0;
    }
    lua_pop(L, 1);
}

kiln_status gen_family_variants(gen_lua *gl, const char *family, int full, int sm, char *buf, size_t size,
                                int *count, kiln_error *err) {
    lua_State *L = gen_lua_state(gl);
    int top = lua_gettop(L);
    kiln_status st = gen_lua_push_family(gl, family, err);
    if (st != KILN_OK) return st;
    out_buf o = {buf, size, 0, 0};
    if (buf && size) buf[0] = 0;
    if (lua_getfield(L, -1, "variants") == LUA_TTABLE) {
        int rows = lua_gettop(L);
        for (lua_Integer r = 1, n = luaL_len(L, rows); r <= n; r++) {
            lua_geti(L, rows, r);
            int row = lua_gettop(L);
            if (lua_istable(L, row) && row_applies(L, row, full, sm)) {
                char prefix[KILN_SPEC_MAX];
                snprintf(prefix, sizeof prefix, "%s", family);
                expand(L, row, 1, luaL_len(L, row), prefix, &o);
            }
            lua_settop(L, rows);
        }
    }
    lua_settop(L, top);
    if (count) *count = o.count;
    if (buf && o.used >= size) return kiln_fail(err, KILN_EINVAL, "%s: the variant list needs %zu bytes, the buffer has %zu", family, o.used + 1, size);
    return KILN_OK;
}

/* The bundle declaration's strings: field of K.bundle as text ("a,b,c" for a list). */
static void bundle_field(lua_State *L, int t, const char *field, char *out, size_t size) {
    out[0] = 0;
    int ty = lua_getfield(L, t, field);
    if (ty == LUA_TSTRING || ty == LUA_TNUMBER) snprintf(out, size, "%s", lua_tostring(L, -1));
    else if (ty == LUA_TTABLE)
        for (lua_Integer i = 1, n = luaL_len(L, -1); i <= n; i++) {
            lua_geti(L, -1, i);
            snprintf(out + strlen(out), size - strlen(out), "%s%s", i > 1 ? "," : "", lua_tostring(L, -1) ? lua_tostring(L, -1) : "");
            lua_pop(L, 1);
        }
    lua_pop(L, 1);
}

/* K.bundle.arch (on the stack's top) = { ["90a"] = { spec, ... } } into out->arch, "90a FAMILY SPEC" a line each, the SMs
 * in name order. Errors: an SM kiln does not know or that is not arch-specific, a spec that is not a string, more
 * than out->arch holds. */
static kiln_status bundle_arch(lua_State *L, const char *family, kiln_bundle_matrix *out, kiln_error *err) {
    int t = lua_gettop(L);
    char names[8][16];
    int n = 0;
    for (lua_pushnil(L); lua_next(L, t); lua_pop(L, 1)) {
        const char *k = lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : NULL;
        int sm = 0;
        if (!k || (sm = kiln_sm_parse(k)) <= 0 || !kiln_sm_is_arch(sm) || !kiln_target_find(sm) || !lua_istable(L, -1) || n == 8) {
            lua_pop(L, 2);
            return kiln_fail(err, KILN_EGEN, "templates/%s.lua: K.bundle.arch's keys name arch-specific SMs, each with a list of specs "
                             "(K.bundle.arch = { [\"90a\"] = { \"dtype=bf16 head_dim=128 path=wgmma\" } }); valid SMs: 90a", family);
        }
        snprintf(names[n++], sizeof names[0], "%s", k);
    }
    for (int i = 1; i < n; i++) /* name order, so the set does not follow Lua's hash order */
        for (int j = i; j > 0 && strcmp(names[j - 1], names[j]) > 0; j--) {
            char tmp[16];
            memcpy(tmp, names[j], sizeof tmp), memcpy(names[j], names[j - 1], sizeof tmp), memcpy(names[j - 1], tmp, sizeof tmp);
        }
    for (int s = 0; s < n; s++) {
        lua_getfield(L, t, names[s]);
        for (lua_Integer i = 1, len = luaL_len(L, -1); i <= len; i++) {
            lua_geti(L, -1, i);
            const char *spec = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
            size_t l = strlen(out->arch);
            int w = spec ? snprintf(out->arch + l, sizeof out->arch - l, "%s %s %s\n", names[s], family, spec) : 0;
            lua_pop(L, 1);
            if (!spec || (size_t)w >= sizeof out->arch - l) {
                lua_pop(L, 1);
                out->arch[l] = 0;
                return kiln_fail(err, KILN_EGEN, spec ? "templates/%s.lua: K.bundle.arch needs more than the %zu bytes kiln_bundle_matrix.arch holds"
                                                      : "templates/%s.lua: K.bundle.arch's lists hold spec strings (entry %zu)",
                                 family, spec ? sizeof out->arch : (size_t)i);
            }
        }
        lua_pop(L, 1);
    }
    return KILN_OK;
}

kiln_status gen_family_bundle(gen_lua *gl, const char *family, kiln_bundle_matrix *out, kiln_error *err) {
    lua_State *L = gen_lua_state(gl);
    int top = lua_gettop(L);
    memset(out, 0, sizeof *out);
    kiln_status st = gen_lua_push_family(gl, family, err);
    if (st != KILN_OK) return st;
    if (lua_getfield(L, -1, "bundle") == LUA_TTABLE) {
        int t = lua_gettop(L);
        out->declared = 1;
        bundle_field(L, t, "dtypes", out->dtype_keys, sizeof out->dtype_keys);
        bundle_field(L, t, "shape", out->shape_key, sizeof out->shape_key);
        bundle_field(L, t, "shapes", out->default_shapes, sizeof out->default_shapes);
        bundle_field(L, t, "kernels", out->kernels, sizeof out->kernels);
        lua_getfield(L, t, "extra");
        if (lua_istable(L, -1))
            for (lua_Integer i = 1, n = luaL_len(L, -1); i <= n; i++) {
                lua_geti(L, -1, i);
                size_t l = strlen(out->extra);
                int n = snprintf(out->extra + l, sizeof out->extra - l, "%s %s\n", family, lua_tostring(L, -1) ? lua_tostring(L, -1) : "");
                lua_pop(L, 1);
                if ((size_t)n >= sizeof out->extra - l) {
                    lua_settop(L, top);
                    return kiln_fail(err, KILN_EGEN, "templates/%s.lua: K.bundle.extra needs more than the %zu bytes kiln_bundle_matrix.extra holds "
                                     "(entry %lld on)", family, sizeof out->extra, (long long)i);
                }
            }
        lua_pop(L, 1);
        if (lua_getfield(L, t, "arch") == LUA_TTABLE && (st = bundle_arch(L, family, out, err)) != KILN_OK) {
            lua_settop(L, top);
            return st;
        }
    }
    lua_settop(L, top);
    return KILN_OK;
}

/* The runnable examples a family's template declares (K.examples: "key=value... --sm N [kiln run options]"
 * each), appended as "FAMILY ...\n" lines to o. */
static kiln_status family_examples(gen_lua *gl, const char *family, out_buf *o, kiln_error *err) {
    lua_State *L = gen_lua_state(gl);
    int top = lua_gettop(L);
    kiln_status st = gen_lua_push_family(gl, family, err);
    if (st != KILN_OK) return st;
    if (lua_getfield(L, -1, "examples") == LUA_TTABLE)
        for (lua_Integer i = 1, n = luaL_len(L, -1); i <= n; i++) {
            lua_geti(L, -1, i);
            const char *ex = lua_tostring(L, -1);
            if (!ex || !strstr(ex, "--sm ")) {
                lua_settop(L, top);
                return kiln_fail(err, KILN_EGEN, "templates/%s.lua: K.examples[%lld] must be a string \"key=value... --sm N "
                                 "[kiln run options]\"", family, (long long)i);
            }
            size_t at = o->used < o->size ? o->used : o->size;
            o->used += (size_t)snprintf(o->buf ? o->buf + at : NULL, o->buf ? o->size - at : 0, "%s %s\n", family, ex);
            o->count++;
            lua_pop(L, 1);
        }
    lua_settop(L, top);
    return KILN_OK;
}

kiln_status gen_family_examples(gen_lua *gl, const char *family, char *buf, size_t size, int *count, kiln_error *err) {
    out_buf o = {buf, size, 0, 0};
    if (buf && size) buf[0] = 0;
    kiln_status st = KILN_OK;
    if (family) {
        st = family_examples(gl, family, &o, err);
    } else {
        char names[64][KILN_NAME_MAX];
        for (int f = 0, nf = gen_lua_families(gl, names, 64); f < nf && st == KILN_OK; f++)
            st = family_examples(gl, names[f], &o, err);
    }
    if (st != KILN_OK) return st;
    if (count) *count = o.count;
    if (buf && o.used >= size)
        return kiln_fail(err, KILN_EINVAL, "the example list needs %zu bytes, the buffer has %zu", o.used + 1, size);
    return KILN_OK;
}

/* Whether the launch text has a line "KEY NAME ..." */
static int declares(const char *launch, const char *key, const char *name) {
    size_t kl = strlen(key), nl = strlen(name);
    for (const char *l = launch; *l; l += strcspn(l, "\n") + (l[strcspn(l, "\n")] != 0))
        if (!strncmp(l, key, kl) && l[kl] == ' ' && !strncmp(l + kl + 1, name, nl) && (l[kl + 1 + nl] == ' ' || l[kl + 1 + nl] == '\n'))
            return 1;
    return 0;
}

kiln_status gen_launch_covers(const kiln_kernel_meta *m, kiln_error *err) {
    if (!m->launch[0]) return KILN_OK;
    for (int i = 0; i < m->nparams; i++) {
        const kiln_param *p = &m->params[i];
        int ok = p->kind == KILN_PARAM_PTR    ? declares(m->launch, "tensor", p->name)
                 : p->kind == KILN_PARAM_TMAP ? declares(m->launch, "tmap", p->name)
                                              : declares(m->launch, "scalar", p->name) || declares(m->launch, "stride", p->name);
        if (!ok)
            return kiln_fail(err, KILN_EGEN, "templates/%s.lua: launch() declares no %s for the kernel's parameter '%s' (%s)",
                             m->family, p->kind == KILN_PARAM_PTR ? "tensor" : p->kind == KILN_PARAM_TMAP ? "tmap" : "scalar or stride",
                             p->name, m->spec);
    }
    return KILN_OK;
}
