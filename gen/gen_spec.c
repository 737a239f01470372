/* gen/gen_spec.c - spec strings: parse, check against a template's params, canonicalize. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>

#include "gen.h"

kiln_status gen_spec_parse(const char *text, gen_spec *out, kiln_error *err) {
    memset(out, 0, sizeof *out);
    if (!text) return kiln_fail(err, KILN_EINVAL, "empty spec: expected 'FAMILY key=value ...'");
    const char *p = text;
    int ntok = 0;
    for (;;) {
        while (isspace((unsigned char)*p)) p++;
        if (!*p) break;
        const char *start = p;
        while (*p && !isspace((unsigned char)*p)) p++;
        int len = (int)(p - start);
        if (ntok++ == 0) {
            if (memchr(start, '=', (size_t)len))
                return kiln_fail(err, KILN_EINVAL, "spec must start with a family name, got '%.*s'", len, start);
            if (len >= KILN_NAME_MAX) return kiln_fail(err, KILN_EINVAL, "family name too long: '%.*s'", len, start);
            memcpy(out->family, start, (size_t)len);
            continue;
        }
        const char *eq = memchr(start, '=', (size_t)len);
        int klen = eq ? (int)(eq - start) : 0, vlen = eq ? len - klen - 1 : 0;
        if (!eq && len < KILN_NAME_MAX) memcpy(out->bare, start, (size_t)len);
        if (!eq || klen == 0 || vlen == 0)
            return kiln_fail(err, KILN_EINVAL, "malformed parameter '%.*s': expected key=value", len, start);
        if (klen >= KILN_NAME_MAX || vlen >= KILN_NAME_MAX)
            return kiln_fail(err, KILN_EINVAL, "parameter too long: '%.*s'", len, start);
        if (out->nkeys >= GEN_SPEC_MAX_KEYS) return kiln_fail(err, KILN_EINVAL, "too many parameters in spec");
        for (int i = 0; i < out->nkeys; i++)
            if ((int)strlen(out->keys[i]) == klen && !memcmp(out->keys[i], start, (size_t)klen))
                return kiln_fail(err, KILN_EINVAL, "parameter '%.*s' given twice", klen, start);
        memcpy(out->keys[out->nkeys], start, (size_t)klen);
        memcpy(out->values[out->nkeys], eq + 1, (size_t)vlen);
        out->nkeys++;
    }
    if (!out->family[0]) return kiln_fail(err, KILN_EINVAL, "empty spec: expected 'FAMILY key=value ...'");
    return KILN_OK;
}

kiln_status gen_spec_parse_known(gen_lua *gl, const char *text, gen_spec *out, kiln_error *err) {
    kiln_status st = gen_spec_parse(text, out, err);
    if (st == KILN_OK || !out->bare[0]) return st;
    char names[64][KILN_NAME_MAX];
    int nf = gen_lua_families(gl, names, 64);
    for (int i = 0; i < nf && i < 64; i++)
        if (!strcmp(names[i], out->bare))
            return kiln_fail(err, KILN_EINVAL,
                             "one kernel per spec: '%s' is a second family name after '%s' (parameters are "
                             "key=value; give each kernel its own spec, or its own command)",
                             out->bare, out->family);
    return st;
}

/* Reads field of the param declaration at the top of the stack as a string ("" if absent). */
static const char *decl_string(lua_State *L, const char *field, char *buf, size_t size) {
    lua_getfield(L, -1, field);
    const char *s = lua_isstring(L, -1) ? lua_tostring(L, -1) : NULL;
    if (lua_isboolean(L, -1)) s = lua_toboolean(L, -1) ? "true" : "false";
    snprintf(buf, size, "%s", s ? s : "");
    lua_pop(L, 1);
    return buf;
}

/* The text of a declaration's string field, whole (a doc string has no length limit), pushed on L's stack: the
 * caller pops it after use. "" where the field is absent. */
static const char *push_text(lua_State *L, const char *field) {
    lua_getfield(L, -1, field);
    const char *s = lua_isstring(L, -1) ? lua_tostring(L, -1) : NULL;
    return s ? s : "";
}

static int decl_int(lua_State *L, const char *field, long long *out) {
    lua_getfield(L, -1, field);
    int ok = lua_isinteger(L, -1);
    if (ok) *out = lua_tointeger(L, -1);
    lua_pop(L, 1);
    return ok;
}

/* "32, 64, 128" from the decl's values list. */
static void decl_values(lua_State *L, char *buf, size_t size) {
    buf[0] = 0;
    lua_getfield(L, -1, "values");
    if (lua_istable(L, -1)) {
        lua_Integer n = luaL_len(L, -1);
        for (lua_Integer i = 1; i <= n; i++) {
            lua_geti(L, -1, i);
            snprintf(buf + strlen(buf), size - strlen(buf), "%s%s", i > 1 ? ", " : "", lua_tostring(L, -1));
            lua_pop(L, 1);
        }
    }
    lua_pop(L, 1);
}

/* The allowed values of the declaration on top of the stack, as text. */
static void describe_allowed(lua_State *L, char *buf, size_t size) {
    char type[32], vals[256];
    long long lo = 1, hi = 0;
    decl_string(L, "type", type, sizeof type);
    decl_values(L, vals, sizeof vals);
    int has_lo = decl_int(L, "min", &lo), has_hi = decl_int(L, "max", &hi);
    if (!strcmp(type, "dtype")) snprintf(buf, size, "f32, f16, bf16");
    else if (!strcmp(type, "bool")) snprintf(buf, size, "true, false");
    else if (vals[0]) snprintf(buf, size, "%s", vals);
    else if (!strcmp(type, "size")) snprintf(buf, size, "an integer %lld..%lld, or 'launch' (given at launch)", has_lo ? lo : 1, hi);
    else if (has_lo || has_hi) snprintf(buf, size, "an integer %lld..%lld", lo, hi);
    else snprintf(buf, size, "a number");
}

/* Validates text against the declaration on top of the stack; pushes the typed value and
 * writes the canonical text. Returns 0, or -1 after filling err. */
static int check_value(lua_State *L, const char *key, const char *text, char *canon, size_t csize,
                       kiln_error *err) {
    char type[32], allowed[384], vals[256];
    decl_string(L, "type", type, sizeof type);
    describe_allowed(L, allowed, sizeof allowed);
    decl_values(L, vals, sizeof vals);
    if (!strcmp(type, "dtype")) {
        kiln_dtype t;
        if (kiln_dtype_parse(text, &t) != 0) goto bad;
        snprintf(canon, csize, "%s", kiln_dtype_name(t));
        lua_pushstring(L, canon);
        return 0;
    }
    if (!strcmp(type, "bool")) {
        int v = !strcmp(text, "true") || !strcmp(text, "1") ? 1 : !strcmp(text, "false") || !strcmp(text, "0") ? 0 : -1;
        if (v < 0) goto bad;
        snprintf(canon, csize, "%s", v ? "true" : "false");
        lua_pushboolean(L, v);
        return 0;
    }
    if (!strcmp(type, "enum")) {
        char padded[300];
        snprintf(padded, sizeof padded, ", %s, ", vals);
        char needle[KILN_NAME_MAX + 4];
        snprintf(needle, sizeof needle, ", %s, ", text);
        if (!strstr(padded, needle) || strchr(text, ',')) goto bad;
        snprintf(canon, csize, "%s", text);
        lua_pushstring(L, text);
        return 0;
    }
    if (!strcmp(type, "size") && !strcmp(text, "launch")) {
        snprintf(canon, csize, "launch");
        lua_pushstring(L, "launch");
        return 0;
    }
    if (!strcmp(type, "int") || !strcmp(type, "size")) {
        char *end;
        errno = 0;
        long long v = strtoll(text, &end, 10), lo = !strcmp(type, "size") ? 1 : LLONG_MIN, hi = LLONG_MAX;
        decl_int(L, "min", &lo);
        decl_int(L, "max", &hi);
        if (errno || *end || end == text || v < lo || v > hi) goto bad;
        if (vals[0]) {
            char padded[300], needle[40];
            snprintf(padded, sizeof padded, ", %s, ", vals);
            snprintf(needle, sizeof needle, ", %lld, ", v);
            if (!strstr(padded, needle)) goto bad;
        }
        snprintf(canon, csize, "%lld", v);
        lua_pushinteger(L, v);
        return 0;
    }
    if (!strcmp(type, "float")) {
        char *end;
        double v = strtod(text, &end);
        if (*end || end == text || v != v) goto bad;
        snprintf(canon, csize, "%.9g", v);
        lua_pushnumber(L, v);
        return 0;
    }
    kiln_fail(err, KILN_EGEN, "template declares parameter '%s' with unknown type '%s'", key, type);
    return -1;
bad:
    kiln_fail(err, KILN_EINVAL, "bad value '%s' for '%s'; valid: %s", text, key, allowed);
    return -1;
}

/* Resolves one declared parameter (decl on top of the stack) into the spec table at spec_idx. */
static int resolve_param(lua_State *L, gen_spec *spec, int spec_idx, int *used, kiln_error *err) {
    char name[KILN_NAME_MAX], def[KILN_NAME_MAX], canon[KILN_NAME_MAX];
    decl_string(L, "name", name, sizeof name);
    decl_string(L, "default", def, sizeof def);
    const char *text = NULL;
    for (int k = 0; k < spec->nkeys; k++)
        if (!strcmp(spec->keys[k], name)) {
            text = spec->values[k];
            used[k] = 1;
        }
    if (def[0] == '=') { /* default follows another param, e.g. w defaults to x */
        lua_getfield(L, spec_idx, def + 1);
        snprintf(def, sizeof def, "%s", lua_isboolean(L, -1) ? (lua_toboolean(L, -1) ? "true" : "false") : lua_tostring(L, -1) ? lua_tostring(L, -1) : "");
        lua_pop(L, 1);
    }
    if (!text) text = def;
    if (!*text) return kiln_fail(err, KILN_EINVAL, "spec for '%s' needs '%s' (no default)", spec->family, name), -1;
    if (check_value(L, name, text, canon, sizeof canon, err) != 0) return -1;
    lua_setfield(L, spec_idx, name);
    /* hide_default = true: left out of the canonical spec at its default (keys added to a family
     * later keep the older canonical specs, bundles and caches valid). */
    lua_getfield(L, -1, "hide_default");
    int hide = lua_toboolean(L, -1);
    lua_pop(L, 1);
    if (hide) {
        char dc[KILN_NAME_MAX];
        int top = lua_gettop(L);
        int same = def[0] && check_value(L, name, def, dc, sizeof dc, NULL) == 0 && !strcmp(dc, canon);
        lua_settop(L, top);
        if (same) return 0;
    }
    size_t l = strlen(spec->canonical);
    if ((size_t)snprintf(spec->canonical + l, sizeof spec->canonical - l, " %s=%s", name, canon) >= sizeof spec->canonical - l)
        return kiln_fail(err, KILN_EINVAL, "spec too long"), -1;
    return 0;
}

static kiln_status unknown_key(lua_State *L, int params_idx, const char *family, const char *key,
                               kiln_error *err) {
    char list[512] = "";
    lua_Integer n = luaL_len(L, params_idx);
    for (lua_Integer i = 1; i <= n; i++) {
        lua_geti(L, params_idx, i);
        lua_getfield(L, -1, "name");
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i > 1 ? ", " : "", lua_tostring(L, -1));
        lua_pop(L, 2);
    }
    return kiln_fail(err, KILN_EINVAL, "unknown parameter '%s' for %s; valid: %s", key, family, list);
}

static _Thread_local unsigned resolutions;

unsigned gen_spec_resolutions(void) { return resolutions; }

kiln_status gen_spec_resolve(gen_lua *gl, gen_spec *spec, kiln_error *err) {
    lua_State *L = gen_lua_state(gl);
    resolutions++;
    kiln_status st = gen_lua_push_family(gl, spec->family, err);
    if (st != KILN_OK) return st;
    int tmpl = lua_gettop(L);
    if (lua_getfield(L, tmpl, "params") != LUA_TTABLE) {
        lua_settop(L, tmpl - 1);
        return kiln_fail(err, KILN_EGEN, "templates/%s.lua declares no params table", spec->family);
    }
    int params = lua_gettop(L);
    lua_newtable(L);
    int spec_idx = lua_gettop(L);
    lua_pushstring(L, spec->family);
    lua_setfield(L, spec_idx, "family");
    snprintf(spec->canonical, sizeof spec->canonical, "%s", spec->family);
    int used[GEN_SPEC_MAX_KEYS] = {0};
    lua_Integer n = luaL_len(L, params);
    for (lua_Integer i = 1; i <= n; i++) {
        lua_geti(L, params, i);
        int rc = resolve_param(L, spec, spec_idx, used, err);
        lua_pop(L, 1);
        if (rc != 0) {
            lua_settop(L, tmpl - 1);
            return err ? err->status : KILN_EINVAL;
        }
    }
    for (int k = 0; k < spec->nkeys; k++)
        if (!used[k]) {
            st = unknown_key(L, params, spec->family, spec->keys[k], err);
            lua_settop(L, tmpl - 1);
            return st;
        }
    /* Cross-parameter rules live in the template: check(spec) returns nil or a message. */
    if (lua_getfield(L, tmpl, "check") == LUA_TFUNCTION) {
        lua_pushvalue(L, spec_idx);
        if (gen_lua_call(L, 1, 1, spec->family, err) != KILN_OK) {
            lua_settop(L, tmpl - 1);
            return KILN_EGEN;
        }
        if (lua_isstring(L, -1)) {
            kiln_fail(err, KILN_EINVAL, "bad spec '%s': %s", spec->canonical, lua_tostring(L, -1));
            lua_settop(L, tmpl - 1);
            return KILN_EINVAL;
        }
    }
    lua_settop(L, spec_idx);
    lua_replace(L, tmpl); /* leave only the spec table */
    lua_settop(L, tmpl);
    return KILN_OK;
}

kiln_status gen_spec_describe(gen_lua *gl, char *buf, size_t size, kiln_error *err) {
    lua_State *L = gen_lua_state(gl);
    char names[64][KILN_NAME_MAX];
    int nf = gen_lua_families(gl, names, 64);
    size_t used = 0;
#define OUT(...) (used += (size_t)snprintf(buf + (used < size ? used : size), used < size ? size - used : 0, __VA_ARGS__))
    for (int f = 0; f < nf; f++) {
        kiln_status st = gen_lua_push_family(gl, names[f], err);
        if (st != KILN_OK) return st;
        OUT("%s%s - %s\n", f ? "\n" : "", names[f], push_text(L, "doc"));
        lua_pop(L, 1);
        lua_getfield(L, -1, "params");
        lua_Integer n = lua_istable(L, -1) ? luaL_len(L, -1) : 0;
        for (lua_Integer i = 1; i <= n; i++) {
            char name[KILN_NAME_MAX], type[32], def[KILN_NAME_MAX], allowed[384];
            lua_geti(L, -1, i);
            decl_string(L, "name", name, sizeof name);
            decl_string(L, "type", type, sizeof type);
            decl_string(L, "default", def, sizeof def);
            describe_allowed(L, allowed, sizeof allowed);
            char shown[KILN_NAME_MAX + 16];
            snprintf(shown, sizeof shown, def[0] == '=' ? "same as %s" : "%s", def[0] == '=' ? def + 1 : def);
            OUT("  %-13s %-5s default %-12s %s; one of: %s\n", name, type, shown, push_text(L, "doc"), allowed);
            lua_pop(L, 2);
        }
        lua_pop(L, 1);
        if (lua_getfield(L, -1, "examples") == LUA_TTABLE) /* K.examples: runnable, `kiln run` options included */
            for (lua_Integer i = 1, ne = luaL_len(L, -1); i <= ne; i++) {
                lua_geti(L, -1, i);
                if (lua_isstring(L, -1)) OUT("  example: kiln run %s %s\n", names[f], lua_tostring(L, -1));
                lua_pop(L, 1);
            }
        lua_pop(L, 2);
    }
#undef OUT
    if (used >= size) return kiln_fail(err, KILN_EINVAL, "description buffer too small");
    return KILN_OK;
}
