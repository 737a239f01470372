/* gen/gen_lua.c - the embedded Lua 5.4 state: loads templates (built in or from a dir). */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>
#include <lualib.h>

#include "gen.h"

struct gen_lua {
    lua_State *L;
    char *dir;      /* template dir, or NULL for the embedded copies */
    char *file_buf; /* last template read from dir (kept for gen_lua_template_source) */
};

/* Reads "templates/<rel>" from the dir or the embedded table; *owned is set when the
 * returned buffer must be freed. NULL when there is none, or (why filled) when the file there cannot be
 * read as a template. */
static const char *read_template(gen_lua *gl, const char *rel, size_t *len, int *owned, char *why, size_t whylen) {
    *owned = 0;
    why[0] = '\0';
    if (!gl->dir) {
        char path[512];
        snprintf(path, sizeof path, "templates/%s", rel);
        for (const struct gen_embedded *e = gen_embedded_templates; e->path; e++)
            if (!strcmp(e->path, path)) {
                *len = e->len;
                return e->src;
            }
        return NULL;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", gl->dir, rel);
    void *data = NULL;
    kiln_error e = {0};
    /* bounded, and never a FIFO or a device: a template is read as every user-named file is */
    kiln_status st = kiln_read_input(path, "template", &data, len, &e);
    if (st == KILN_ENOTFOUND) return NULL;
    if (st != KILN_OK) {
        snprintf(why, whylen, "%s", e.msg);
        return NULL;
    }
    *owned = 1;
    return data;
}

/* Loads templates/<rel> as a chunk named @templates/<rel>: the embedded bytecode when the
 * templates are the built-in ones (falling back to the source if this Lua rejects it), else the
 * file's text. Returns the luaL_loadbuffer status; NOT_FOUND when there is no such template. */
enum { NOT_FOUND = -1 };
static int load_template(lua_State *L, gen_lua *gl, const char *rel, const char *chunk) {
    if (!gl->dir) {
        char path[512];
        snprintf(path, sizeof path, "templates/%s", rel);
        for (const struct gen_embedded *e = gen_embedded_templates; e->path; e++)
            if (!strcmp(e->path, path)) {
                if (e->bc_len && luaL_loadbufferx(L, (const char *)e->bc, e->bc_len, chunk, "b") == LUA_OK)
                    return LUA_OK;
                if (e->bc_len) lua_pop(L, 1);
                return luaL_loadbufferx(L, e->src, e->len, chunk, "t");
            }
        return NOT_FOUND;
    }
    size_t len;
    int owned;
    char why[sizeof ((kiln_error *)0)->msg];
    const char *src = read_template(gl, rel, &len, &owned, why, sizeof why);
    if (!src && why[0]) { /* there, but not readable as a template (too large, a FIFO, a device) */
        lua_pushstring(L, why);
        return LUA_ERRFILE;
    }
    if (!src) return NOT_FOUND;
    int rc = luaL_loadbufferx(L, src, len, chunk, "t");
    if (owned) free((void *)src);
    return rc;
}

/* package.searchers entry: require("lib.x") finds templates/lib/x.lua. */
static int searcher(lua_State *L) {
    gen_lua *gl = lua_touserdata(L, lua_upvalueindex(1));
    const char *name = luaL_checkstring(L, 1);
    char rel[256];
    size_t i = 0;
    for (; name[i] && i + 5 < sizeof rel; i++) rel[i] = name[i] == '.' ? '/' : name[i];
    snprintf(rel + i, sizeof rel - i, ".lua");
    char chunk[300];
    snprintf(chunk, sizeof chunk, "@templates/%s", rel);
    int rc = load_template(L, gl, rel, chunk);
    if (rc == NOT_FOUND) {
        lua_pushfstring(L, "no kiln template 'templates/%s'", rel);
        return 1;
    }
    if (rc != LUA_OK) return lua_error(L);
    lua_pushstring(L, chunk + 1);
    return 2;
}

kiln_status gen_lua_open(gen_lua **out, const char *template_dir, kiln_error *err) {
    gen_lua *gl = calloc(1, sizeof *gl);
    if (!gl) return kiln_fail(err, KILN_ENOMEM, "out of memory");
    if (!template_dir) template_dir = getenv("KILN_TEMPLATE_DIR");
    if (template_dir && *template_dir) {
        DIR *d = opendir(template_dir);
        if (!d) {
            free(gl);
            return kiln_fail(err, KILN_ENOTFOUND, "template directory '%s' cannot be opened", template_dir);
        }
        closedir(d);
        gl->dir = strdup(template_dir);
    }
    gl->L = luaL_newstate();
    if (!gl->L) {
        free(gl->dir);
        free(gl);
        return kiln_fail(err, KILN_ENOMEM, "cannot create a Lua state");
    }
    lua_State *L = gl->L;
    luaL_openlibs(L);
    /* Templates find their helpers only through kiln's searcher, never the file system. */
    lua_getglobal(L, "package");
    lua_createtable(L, 2, 0);
    lua_getfield(L, -2, "searchers");
    lua_rawgeti(L, -1, 1); /* the preload searcher */
    lua_rawseti(L, -3, 1);
    lua_pop(L, 1);
    lua_pushlightuserdata(L, gl);
    lua_pushcclosure(L, searcher, 1);
    lua_rawseti(L, -2, 2);
    lua_setfield(L, -2, "searchers");
    lua_pop(L, 1);
    *out = gl;
    return KILN_OK;
}

void gen_lua_close(gen_lua *gl) {
    if (!gl) return;
    lua_close(gl->L);
    free(gl->dir);
    free(gl->file_buf);
    free(gl);
}

lua_State *gen_lua_state(gen_lua *gl) { return gl->L; }

static int name_cmp(const void *a, const void *b) { return strcmp(a, b); }

int gen_lua_families(gen_lua *gl, char names[][KILN_NAME_MAX], int cap) {
    int n = 0;
    if (!gl->dir) {
        for (const struct gen_embedded *e = gen_embedded_templates; e->path; e++) {
            const char *base = e->path + strlen("templates/");
            if (strchr(base, '/') || n >= cap) continue;
            snprintf(names[n++], KILN_NAME_MAX, "%.*s", (int)(strlen(base) - 4), base);
        }
    } else {
        DIR *d = opendir(gl->dir);
        struct dirent *de;
        while (d && (de = readdir(d)) && n < cap) {
            size_t l = strlen(de->d_name);
            if (l > 4 && l - 4 < KILN_NAME_MAX && !strcmp(de->d_name + l - 4, ".lua"))
                snprintf(names[n++], KILN_NAME_MAX, "%.*s", (int)(l - 4), de->d_name);
        }
        if (d) closedir(d);
    }
    qsort(names, (size_t)n, KILN_NAME_MAX, name_cmp);
    return n;
}

/* Message handler: prefixes the innermost template position and keeps a short traceback. */
static int on_error(lua_State *L) {
    const char *msg = lua_tostring(L, 1);
    if (!msg) msg = luaL_typename(L, 1);
    lua_Debug ar;
    for (int level = 1; lua_getstack(L, level, &ar); level++) {
        lua_getinfo(L, "Sl", &ar);
        if (ar.currentline > 0 && !strstr(msg, ar.short_src)) {
            lua_pushfstring(L, "%s:%d: %s", ar.short_src, ar.currentline, msg);
            return 1;
        }
        if (ar.currentline > 0) break;
    }
    lua_pushstring(L, msg);
    return 1;
}

kiln_status gen_lua_call(lua_State *L, int nargs, int nresults, const char *what, kiln_error *err) {
    int base = lua_gettop(L) - nargs;
    lua_pushcfunction(L, on_error);
    lua_insert(L, base);
    int rc = lua_pcall(L, nargs, nresults, base);
    lua_remove(L, base);
    if (rc == LUA_OK) return KILN_OK;
    kiln_fail(err, KILN_EGEN, "%s: %s", what, lua_tostring(L, -1) ? lua_tostring(L, -1) : "error");
    lua_pop(L, 1);
    return KILN_EGEN;
}

static int valid_family_name(const char *f) {
    if (!*f || strlen(f) >= KILN_NAME_MAX - 8) return 0;
    for (; *f; f++)
        if (!((*f >= 'a' && *f <= 'z') || (*f >= '0' && *f <= '9') || *f == '_')) return 0;
    return 1;
}

static kiln_status unknown_family(gen_lua *gl, const char *family, kiln_error *err) {
    char names[64][KILN_NAME_MAX], list[1024] = "";
    int n = gen_lua_families(gl, names, 64);
    for (int i = 0; i < n; i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "", names[i]);
    return kiln_fail(err, KILN_ENOTFOUND, "unknown kernel family '%s'; valid: %s", family, list);
}

kiln_status gen_lua_push_family(gen_lua *gl, const char *family, kiln_error *err) {
    lua_State *L = gl->L;
    if (!valid_family_name(family)) return unknown_family(gl, family, err);
    lua_getfield(L, LUA_REGISTRYINDEX, "kiln.families");
    if (lua_isnil(L, -1)) {
        lua_pop(L, 1);
        lua_newtable(L);
        lua_pushvalue(L, -1);
        lua_setfield(L, LUA_REGISTRYINDEX, "kiln.families");
    }
    if (lua_getfield(L, -1, family) == LUA_TTABLE) {
        lua_remove(L, -2);
        return KILN_OK;
    }
    lua_pop(L, 1);
    char rel[KILN_NAME_MAX + 8], chunk[KILN_NAME_MAX + 20];
    snprintf(rel, sizeof rel, "%s.lua", family);
    snprintf(chunk, sizeof chunk, "@templates/%s", rel);
    int rc = load_template(L, gl, rel, chunk);
    if (rc == NOT_FOUND) {
        lua_pop(L, 1);
        return unknown_family(gl, family, err);
    }
    if (rc != LUA_OK) {
        kiln_fail(err, KILN_EGEN, "loading templates/%s: %s", rel, lua_tostring(L, -1));
        lua_pop(L, 2);
        return KILN_EGEN;
    }
    char what[128];
    snprintf(what, sizeof what, "loading templates/%s", rel);
    if (gen_lua_call(L, 0, 1, what, err) != KILN_OK) {
        lua_pop(L, 1);
        return KILN_EGEN;
    }
    if (!lua_istable(L, -1)) {
        lua_pop(L, 2);
        return kiln_fail(err, KILN_EGEN, "templates/%s must return a table", rel);
    }
    lua_pushvalue(L, -1);
    lua_setfield(L, -3, family);
    lua_remove(L, -2);
    return KILN_OK;
}

kiln_status gen_lua_template_source(gen_lua *gl, const char *family, const char **src,
                                    size_t *len, kiln_error *err) {
    char rel[KILN_NAME_MAX + 8];
    snprintf(rel, sizeof rel, "%s.lua", family);
    int owned;
    char why[sizeof err->msg];
    const char *s = read_template(gl, rel, len, &owned, why, sizeof why);
    if (!s && why[0]) return kiln_fail(err, KILN_EINVAL, "%s", why);
    if (!s) return unknown_family(gl, family, err);
    if (owned) {
        free(gl->file_buf);
        gl->file_buf = (char *)s;
    }
    *src = s;
    return KILN_OK;
}
