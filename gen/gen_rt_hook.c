/* gen/gen_rt_hook.c - offers kiln's generator to the runtime (one kiln_gen per thread). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "gen.h"
#include "kiln/gen.h"
#include "kiln/runtime.h"

static pthread_key_t gen_key;
static pthread_once_t gen_key_once = PTHREAD_ONCE_INIT;
static int gen_key_ok;
static char identity[128];

static void destroy_gen(void *g) {
    kiln_gen_destroy(g);
}

static void init_once(void) {
    gen_key_ok = pthread_key_create(&gen_key, destroy_gen) == 0;
    snprintf(identity, sizeof identity, "kiln %s; LLVM %s; O3; ptx", KILN_VERSION_STRING, kiln_llvm_version());
}

/* The calling thread's generator, created on first use and destroyed when the thread exits. */
static kiln_status thread_gen(kiln_gen **out, kiln_error *err) {
    pthread_once(&gen_key_once, init_once);
    if (!gen_key_ok) return kiln_fail(err, KILN_ENOMEM, "cannot create a per-thread generator key");
    kiln_gen *g = pthread_getspecific(gen_key);
    if (!g) {
        kiln_status st = kiln_gen_create(&g, NULL, err);
        if (st != KILN_OK) return st;
        if (pthread_setspecific(gen_key, g) != 0) {
            kiln_gen_destroy(g);
            return kiln_fail(err, KILN_ENOMEM, "cannot keep a per-thread generator");
        }
    }
    *out = g;
    return KILN_OK;
}

static kiln_status hook_canonical(const char *spec, char *buf, size_t size, kiln_error *err) {
    kiln_gen *g;
    kiln_status st = thread_gen(&g, err);
    return st == KILN_OK ? kiln_canonical_spec(g, spec, buf, size, err) : st;
}

/* Hashes the family's template and every shared library template (templates/lib/), in the
 * form the generator reads them (embedded, or from $KILN_TEMPLATE_DIR). Cached per family. */
static kiln_status hash_sources(kiln_gen *g, const char *family, uint8_t out[16], kiln_error *err) {
    XXH3_state_t *s = XXH3_createState();
    if (!s) return kiln_fail(err, KILN_ENOMEM, "out of memory hashing templates");
    XXH3_128bits_reset(s);
    const char *src;
    size_t len;
    kiln_status st = kiln_template_source(g, family, &src, &len, err);
    if (st == KILN_OK) XXH3_128bits_update(s, src, len + 1);
    for (const struct gen_embedded *e = gen_embedded_templates; st == KILN_OK && e->path; e++) {
        char lib[256];
        const char *rest = strncmp(e->path, "templates/lib/", 14) == 0 ? e->path + 10 : NULL;
        if (!rest || snprintf(lib, sizeof lib, "%s", rest) >= (int)sizeof lib) continue;
        lib[strlen(lib) - 4] = 0; /* drop ".lua" */
        if (kiln_template_source(g, lib, &src, &len, NULL) == KILN_OK) {
            XXH3_128bits_update(s, lib, strlen(lib) + 1);
            XXH3_128bits_update(s, src, len + 1);
        }
    }
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, XXH3_128bits_digest(s));
    XXH3_freeState(s);
    memcpy(out, c.digest, 16);
    return st;
}

static struct {
    pthread_mutex_t lock;
    int n;
    char family[16][KILN_NAME_MAX];
    uint8_t hash[16][16];
} hashes = {PTHREAD_MUTEX_INITIALIZER, 0, {{0}}, {{0}}};

static kiln_status hook_template_hash(const char *family, uint8_t out[16], kiln_error *err) {
    pthread_mutex_lock(&hashes.lock);
    for (int i = 0; i < hashes.n; i++)
        if (!strcmp(hashes.family[i], family)) {
            memcpy(out, hashes.hash[i], 16);
            pthread_mutex_unlock(&hashes.lock);
            return KILN_OK;
        }
    pthread_mutex_unlock(&hashes.lock);
    kiln_gen *g;
    kiln_status st = thread_gen(&g, err);
    if (st == KILN_OK) st = hash_sources(g, family, out, err);
    pthread_mutex_lock(&hashes.lock);
    if (st == KILN_OK && hashes.n < 16 && strlen(family) < KILN_NAME_MAX) {
        snprintf(hashes.family[hashes.n], KILN_NAME_MAX, "%s", family);
        memcpy(hashes.hash[hashes.n++], out, 16);
    }
    pthread_mutex_unlock(&hashes.lock);
    return st;
}

static kiln_status hook_generate(const char *spec, int sm, char **text, size_t *len, kiln_error *err) {
    kiln_gen *g;
    kiln_module *m;
    kiln_status st = thread_gen(&g, err);
    if (st == KILN_OK) st = kiln_generate(g, spec, sm, KILN_EMIT_PTX, &m, err);
    if (st != KILN_OK) return st;
    *len = kiln_module_size(m);
    *text = malloc(*len + 1);
    if (*text) memcpy(*text, kiln_module_text(m), *len + 1);
    kiln_module_free(m);
    return *text ? KILN_OK : kiln_fail(err, KILN_ENOMEM, "out of memory copying generated PTX");
}

static kiln_status hook_arch_specific(const char *spec, int sm, int *out, kiln_error *err) {
    kiln_gen *g;
    kiln_status st = thread_gen(&g, err);
    return st == KILN_OK ? kiln_arch_specific(g, spec, sm, out, err) : st;
}

static kiln_rt_generator hook = {
    .identity = identity,
    .canonical = hook_canonical,
    .template_hash = hook_template_hash,
    .generate = hook_generate,
    .targets = kiln_targets,
    .arch_specific = hook_arch_specific,
};

void kiln_rt_use_generator(void) {
    pthread_once(&gen_key_once, init_once);
    kiln_rt_register_generator(&hook);
}

/* libkiln.so registers itself when loaded; static links call kiln_rt_use_generator(). */
__attribute__((constructor)) static void register_at_load(void) {
    kiln_rt_use_generator();
}
