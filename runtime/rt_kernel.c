/* runtime/rt_kernel.c - kernel lookup (memory, bundles, disk, generator), module loads, launches. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rt.h"

/* A memory-cache slot, keyed by a normalized spec. While PENDING one thread resolves it and
 * the others wait on rt->done; a FAILED slot leaves the table so a later call retries. */
struct rt_entry {
    rt_entry *next;
    char key[KILN_SPEC_MAX];
    enum { PENDING, READY, FAILED } state;
    kiln_kernel *kernel;
    kiln_error err;
    int waiters;
};

static unsigned bucket_of(const char *key) {
    uint32_t h = 2166136261u;
    for (const unsigned char *p = (const unsigned char *)key; *p; p++) h = (h ^ *p) * 16777619u;
    return h % RT_BUCKETS;
}

static kiln_status resolve(kiln_rt *rt, const char *key, const char *canon, kiln_kernel **out, kiln_error *err);

/* ---- loading ---- */

static kiln_status check_fits(const kiln_rt *rt, const kiln_kernel_meta *m, kiln_error *err) {
    const kiln_device_info *d = &rt->info;
    unsigned threads = m->block[0] * (m->block[1] ? m->block[1] : 1) * (m->block[2] ? m->block[2] : 1);
    char name[16];
    if (!kiln_target_runs_on(m->sm, d->sm))
        return kiln_fail(err, KILN_EINVAL, "kernel '%s' targets %s; the device '%s' is sm_%d", m->spec,
                         kiln_sm_name(m->sm, name), d->name, d->sm);
    if (threads > d->max_threads_per_block)
        return kiln_fail(err, KILN_EINVAL, "kernel '%s' needs %u threads per block; the device allows %u", m->spec,
                         threads, d->max_threads_per_block);
    if (m->static_smem + m->dynamic_smem > d->smem_per_block_optin)
        return kiln_fail(err, KILN_EINVAL, "kernel '%s' needs %u bytes of shared memory; the device allows %u",
                         m->spec, m->static_smem + m->dynamic_smem, d->smem_per_block_optin);
    return KILN_OK;
}

/* Loads the module (data: PTX or a cubin, as kind says), finds the entry and sets the shared-memory
 * attribute when needed. */
static kiln_status load_function(kiln_rt *rt, const void *data, kiln_payload_kind kind, kiln_kernel *k,
                                 kiln_error *err) {
    const rt_driver *d = &rt->drv;
    char elog[4096] = "", ilog[2048] = "";
    int opts[] = {RT_JIT_ERROR_LOG_BUFFER, RT_JIT_ERROR_LOG_BUFFER_SIZE_BYTES, RT_JIT_INFO_LOG_BUFFER,
                  RT_JIT_INFO_LOG_BUFFER_SIZE_BYTES};
    void *vals[] = {elog, (void *)(uintptr_t)sizeof elog, ilog, (void *)(uintptr_t)sizeof ilog};
    char what[KILN_SPEC_MAX + 160];
    snprintf(what, sizeof what, "'%s' (%s %s, entry %s)", k->meta.spec, kiln_sm_name(k->meta.sm, (char[16]){0}),
             kind == KILN_PAYLOAD_CUBIN ? "cubin" : "ptx", k->meta.entry);
    CUresult r = d->cuModuleLoadDataEx(&k->module, data, 4, opts, vals);
    if (r != RT_CUDA_SUCCESS) {
        char detail[sizeof what + sizeof elog + 16];
        elog[sizeof elog - 1] = 0;
        snprintf(detail, sizeof detail, "%s%s%s", what, elog[0] ? "; JIT log: " : "", elog);
        return rt_driver_check(d, r, "cuModuleLoadDataEx", detail, err);
    }
    kiln_status st = rt_driver_check(d, d->cuModuleGetFunction(&k->func, k->module, k->meta.entry),
                                     "cuModuleGetFunction", what, err);
    unsigned smem = k->meta.static_smem + k->meta.dynamic_smem;
    if (st == KILN_OK && k->meta.dynamic_smem && smem > rt->info.smem_per_block)
        st = rt_driver_check(d, d->cuFuncSetAttribute(k->func, RT_FUNC_ATTR_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                                      (int)k->meta.dynamic_smem),
                             "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)", what, err);
    if (st != KILN_OK) d->cuModuleUnload(k->module);
    return st;
}

static void count(kiln_rt *rt, uint64_t *field) {
    pthread_mutex_lock(&rt->lock);
    (*field)++;
    pthread_mutex_unlock(&rt->lock);
}

/* Writes a disk-cache entry and counts it in *written; the first failure turns the disk cache off
 * with one warning (kernels are then cached in memory only). */
static void disk_write(kiln_rt *rt, rt_entry_kind kind, const uint8_t key[16], const char *spec, const void *data,
                       size_t len, uint64_t *written) {
    if (atomic_load(&rt->disk_off) || !rt->disk.enabled) return;
    if (rt_disk_write(&rt->disk, kind, key, spec, data, len) == 0) {
        count(rt, written);
    } else if (!atomic_exchange(&rt->disk_off, 1)) {
        char why[256];
        snprintf(why, sizeof why, "%s", strerror(errno));
        rt_warn(rt, "cannot write to the disk cache '%s' (%s); kernels are cached in memory only from now on",
                rt->disk.dir, why);
    }
}

/* PTX loaded as the cubin the driver compiles from it: with the disk cache on, the cached cubin for
 * this PTX, device and driver when there is a sound one; else compiled now by the driver's linker (in
 * the calling thread, with a link state of its own: the driver's cuModuleLoadDataEx compiles one
 * module at a time per process, its linker on every thread at once), loaded, and written to the disk
 * cache. When the linker fails, the PTX is loaded as it is, so that the error is the driver's own for
 * that module. k->kind stays what was picked (PTX); the stats count cubin hits and writes. */
static kiln_status load_compiled(kiln_rt *rt, const void *ptx, size_t size, kiln_kernel *k, kiln_error *err) {
    uint8_t key[16];
    char *cubin = NULL, what[KILN_SPEC_MAX + 64];
    size_t len = 0;
    bool disk = rt->disk.enabled && !atomic_load(&rt->disk_off);
    if (disk) rt_cubin_key(rt, k->meta.spec, ptx, size, key);
    rt_disk_result r = disk ? rt_disk_read(&rt->disk, RT_ENTRY_CUBIN, key, k->meta.spec, &cubin, &len) : RT_DISK_MISS;
    if (r == RT_DISK_HIT) {
        if (load_function(rt, cubin, KILN_PAYLOAD_CUBIN, k, NULL) == KILN_OK) {
            free(cubin);
            count(rt, &rt->stats.cubin_hits);
            return KILN_OK;
        }
        char path[1100]; /* sound bytes the driver will not load: compiled afresh below and replaced */
        rt_disk_path(&rt->disk, RT_ENTRY_CUBIN, key, path, sizeof path);
        unlink(path);
        r = RT_DISK_BAD;
    }
    free(cubin);
    if (r == RT_DISK_BAD) count(rt, &rt->stats.bad_entries);
    CUlinkState state;
    void *out = NULL;
    snprintf(what, sizeof what, "'%s' (%s ptx)", k->meta.spec, kiln_sm_name(k->meta.sm, (char[16]){0}));
    if (rt_cubin_link(rt, ptx, size, what, &state, &out, &len, NULL) != KILN_OK)
        return load_function(rt, ptx, KILN_PAYLOAD_PTX, k, err);
    kiln_status st = load_function(rt, out, KILN_PAYLOAD_CUBIN, k, err);
    if (st == KILN_OK && disk) disk_write(rt, RT_ENTRY_CUBIN, key, k->meta.spec, out, len, &rt->stats.cubin_writes);
    rt->drv.cuLinkDestroy(state);
    return st;
}

static kiln_status load(kiln_rt *rt, const void *data, size_t size, kiln_payload_kind kind,
                        const kiln_kernel_meta *meta, const char *origin, kiln_kernel **out, kiln_error *err) {
    kiln_status st = check_fits(rt, meta, err);
    char why[512];
    if (st == KILN_OK && kind == KILN_PAYLOAD_PTX && rt->info.driver_version &&
        kiln_ptx_driver_check(data, size, rt->info.driver_version, why, sizeof why) == 0)
        st = kiln_fail(err, KILN_EDRIVER, "kernel '%s' (%s ptx, from %s) will not load on this driver: %s",
                       meta->spec, kiln_sm_name(meta->sm, (char[16]){0}), origin, why);
    if (st == KILN_OK) st = rt_bind(rt, err);
    if (st != KILN_OK) return st;
    char *copy = NULL;
    if (kind == KILN_PAYLOAD_PTX && (size == 0 || ((const char *)data)[size - 1] != 0)) {
        if (!(copy = malloc(size + 1))) return kiln_fail(err, KILN_ENOMEM, "out of memory loading a module");
        memcpy(copy, data, size);
        copy[size] = 0;
        data = copy;
    }
    kiln_kernel *k = calloc(1, sizeof *k);
    if (!k) st = kiln_fail(err, KILN_ENOMEM, "out of memory loading a module");
    if (st == KILN_OK) {
        *k = (kiln_kernel){.rt = rt, .meta = *meta, .kind = kind, .origin = origin};
        st = kind == KILN_PAYLOAD_PTX && rt_link_usable(rt) ? load_compiled(rt, data, size + (copy != NULL), k, err)
                                                            : load_function(rt, data, kind, k, err);
    }
    free(copy);
    if (st != KILN_OK) {
        free(k);
        return st;
    }
    pthread_mutex_lock(&rt->lock);
    k->next = rt->kernels;
    rt->kernels = k;
    rt->stats.modules_loaded++;
    pthread_mutex_unlock(&rt->lock);
    *out = k;
    return KILN_OK;
}

kiln_status kiln_rt_load_module(kiln_rt *rt, const void *data, size_t size, kiln_payload_kind kind,
                                const kiln_kernel_meta *meta, kiln_kernel **out, kiln_error *err) {
    kiln_kernel_meta parsed;
    if (!rt || !data || !out) return kiln_fail(err, KILN_EINVAL, "kiln_rt_load_module: NULL argument");
    if (!meta && kind != KILN_PAYLOAD_PTX)
        return kiln_fail(err, KILN_EINVAL, "a cubin carries no kiln metadata; pass meta to kiln_rt_load_module");
    if (!meta) {
        kiln_status st = kiln_meta_parse(data, size, &parsed, err);
        if (st != KILN_OK) return st;
        meta = &parsed;
    }
    return load(rt, data, size, kind, meta, "module", out, err);
}

/* ---- the memory cache and its single-flight protocol ---- */

/* key: the normalized spec; canon: its canonical form when the generator gave it already (else NULL). */
static kiln_status get(kiln_rt *rt, const char *key, const char *canon, kiln_kernel **out, kiln_error *err) {
    unsigned b = bucket_of(key);
    pthread_mutex_lock(&rt->lock);
    rt_entry *e = rt->buckets[b];
    while (e && strcmp(e->key, key) != 0) e = e->next;
    if (e) {
        e->waiters++;
        while (e->state == PENDING) pthread_cond_wait(&rt->done, &rt->lock);
        e->waiters--;
        kiln_status st = e->state == READY ? KILN_OK : kiln_fail(err, e->err.status, "%s", e->err.msg);
        if (st == KILN_OK) {
            *out = e->kernel;
            rt->stats.memory_hits++;
        } else if (e->waiters == 0) {
            free(e);
        }
        pthread_mutex_unlock(&rt->lock);
        return st;
    }
    e = calloc(1, sizeof *e);
    if (!e) {
        pthread_mutex_unlock(&rt->lock);
        return kiln_fail(err, KILN_ENOMEM, "out of memory caching a kernel");
    }
    snprintf(e->key, sizeof e->key, "%s", key);
    e->next = rt->buckets[b];
    rt->buckets[b] = e;
    pthread_mutex_unlock(&rt->lock);

    kiln_kernel *k = NULL;
    kiln_status st = resolve(rt, key, canon, &k, &e->err);

    pthread_mutex_lock(&rt->lock);
    if (st == KILN_OK) {
        e->state = READY;
        e->kernel = k;
        *out = k;
    } else {
        e->state = FAILED;
        e->err.status = st;
        kiln_fail(err, st, "%s", e->err.msg);
        rt_entry **pp = &rt->buckets[b];
        while (*pp != e) pp = &(*pp)->next;
        *pp = e->next;
    }
    pthread_cond_broadcast(&rt->done);
    if (st != KILN_OK && e->waiters == 0) free(e);
    pthread_mutex_unlock(&rt->lock);
    return st;
}

kiln_status kiln_rt_get_kernel(kiln_rt *rt, const char *spec, kiln_kernel **out, kiln_error *err) {
    char key[KILN_SPEC_MAX];
    if (!rt || !out) return kiln_fail(err, KILN_EINVAL, "kiln_rt_get_kernel: NULL runtime or output");
    kiln_status st = rt_spec_normalize(spec, key, sizeof key, err);
    return st == KILN_OK ? get(rt, key, NULL, out, err) : st;
}

/* ---- the lookup order below the memory cache ---- */

static kiln_status from_bundles(kiln_rt *rt, const char *key, kiln_kernel **out, kiln_error *err) {
    const rt_bundle_item *best = NULL, *refused = NULL;
    pthread_mutex_lock(&rt->lock);
    for (int i = 0; i < rt->nbundles; i++) {
        const rt_bundle_item *it = rt_bundle_find(rt->bundles[i], key, rt->info.sm, rt->info.driver_version, &refused);
        if (!it) continue;
        int exact_cubin = it->pub.kind == KILN_PAYLOAD_CUBIN;
        if (!best || exact_cubin || (best->pub.kind == KILN_PAYLOAD_PTX && it->pub.sm > best->pub.sm)) best = it;
    }
    pthread_mutex_unlock(&rt->lock);
    if (!best && refused) best = refused; /* only PTX the driver is too old for: load() says why */
    if (!best) return KILN_ENOTFOUND;
    kiln_status st = load(rt, best->pub.payload, best->pub.size, best->pub.kind, &best->meta, "bundle", out, err);
    if (st == KILN_OK) {
        pthread_mutex_lock(&rt->lock);
        rt->stats.bundle_hits++;
        pthread_mutex_unlock(&rt->lock);
    }
    return st;
}

static kiln_status not_found(kiln_rt *rt, const char *key, kiln_error *err) {
    char family[KILN_NAME_MAX], held[700] = "";
    rt_spec_family(key, family, sizeof family);
    pthread_mutex_lock(&rt->lock);
    int nb = rt->nbundles;
    for (int i = 0; i < nb; i++) rt_bundle_describe_family(rt->bundles[i], family, held, sizeof held);
    pthread_mutex_unlock(&rt->lock);
    char where[KILN_NAME_MAX + 64];
    if (nb == 0) snprintf(where, sizeof where, "no bundle is loaded");
    else snprintf(where, sizeof where, "the loaded bundles hold %s '%s'%s", held[0] ? "for" : "nothing for", family,
                  held[0] ? ": " : "");
    return kiln_fail(err, KILN_ENOTFOUND,
                     "kernel '%s' for sm_%d is in no loaded bundle and no generator is linked (link libkiln and "
                     "call kiln_rt_use_generator()); %s%s",
                     key, rt->info.sm, where, held);
}

/* Highest SM the generator targets that is not above the device's and whose PTX .version the driver
 * reads (a CUDA 12.9 driver on a sm_110 device gets sm_103's PTX 8.8, not sm_110's 9.0); the device's
 * own arch-specific target (sm_90a on a 9.0 device) before any plain one, but only for a spec whose
 * template has a path specific to it (the generator's arch_specific): every other spec gets the plain
 * target's PTX (sm_90), which later GPUs run too. */
static kiln_status gen_target(kiln_rt *rt, const kiln_rt_generator *g, const char *canon, int *sm, kiln_error *err) {
    int sms[32], n = g->targets(sms, 32), arch = 0;
    *sm = 0;
    for (int i = 0; i < n && i < 32; i++) {
        char name[16];
        kiln_sm_name(sms[i], name);
        const kiln_ptx_target *t = kiln_ptx_target_find(name, strlen(name));
        int readable = rt->info.driver_version <= 0 || !t || kiln_cuda_knows_target(rt->info.driver_version, t);
        if (!kiln_target_runs_on(sms[i], rt->info.sm) || !readable) continue;
        if (kiln_sm_is_arch(sms[i])) arch = sms[i] > arch ? sms[i] : arch;
        else if (sms[i] > *sm) *sm = sms[i];
    }
    if (arch && g->arch_specific) {
        int specific = 0;
        kiln_status st = g->arch_specific(canon, arch, &specific, err);
        if (st != KILN_OK) return st;
        if (specific) *sm = arch;
    }
    return *sm ? KILN_OK
               : kiln_fail(err, KILN_ENOTFOUND, "the generator has no target at or below the device's sm_%d",
                           rt->info.sm);
}

/* XXH3-128 over everything that changes the generated text. */
static kiln_status cache_key(const kiln_rt_generator *g, const char *key, int sm, uint8_t out[16], kiln_error *err) {
    char family[KILN_NAME_MAX], text[KILN_SPEC_MAX + 512], hex[33];
    uint8_t th[16];
    rt_spec_family(key, family, sizeof family);
    kiln_status st = g->template_hash(family, th, err);
    if (st != KILN_OK) return st;
    rt_hex(th, 16, hex);
    int n = snprintf(text, sizeof text, "kiln-cache 1\nruntime %s\ngenerator %s\ntemplate %s\nspec %s\nsm %d\n",
                     KILN_VERSION_STRING, g->identity ? g->identity : "", hex, key, sm);
    rt_hash128(text, (size_t)n < sizeof text ? (size_t)n : sizeof text, out);
    return KILN_OK;
}

/* Disk cache hit: 1 loaded, 0 nothing usable there (a bad entry was removed), <0 error. */
static int from_disk(kiln_rt *rt, const uint8_t ck[16], const char *key, kiln_kernel **out, kiln_status *st,
                     kiln_error *err) {
    char *text = NULL, path[1100];
    size_t len = 0;
    kiln_kernel_meta meta;
    if (atomic_load(&rt->disk_off)) return 0;
    rt_disk_result r = rt_disk_read(&rt->disk, RT_ENTRY_PTX, ck, key, &text, &len);
    if (r == RT_DISK_HIT && kiln_meta_parse(text, len, &meta, NULL) != KILN_OK) {
        rt_disk_path(&rt->disk, RT_ENTRY_PTX, ck, path, sizeof path);
        unlink(path);
        r = RT_DISK_BAD;
    }
    if (r != RT_DISK_HIT) {
        free(text);
        if (r == RT_DISK_BAD) count(rt, &rt->stats.bad_entries);
        return 0;
    }
    *st = load(rt, text, len + 1, KILN_PAYLOAD_PTX, &meta, "disk cache", out, err);
    free(text);
    if (*st != KILN_OK) return -1;
    count(rt, &rt->stats.disk_hits);
    return 1;
}

/* Generates the canonical spec canon (key: its normalized form, the caches' key): the generator
 * resolved it when it gave the canonical form and resolves nothing again (gen_api.c). */
static kiln_status generate(kiln_rt *rt, const kiln_rt_generator *g, const uint8_t ck[16], const char *key,
                            const char *canon, int sm, kiln_kernel **out, kiln_error *err) {
    char *text = NULL;
    size_t len = 0;
    kiln_kernel_meta meta;
    kiln_status st = g->generate(canon, sm, &text, &len, err);
    if (st != KILN_OK) return st;
    count(rt, &rt->stats.generated);
    st = kiln_meta_parse(text, len, &meta, err);
    if (st == KILN_OK) disk_write(rt, RT_ENTRY_PTX, ck, key, text, len, &rt->stats.disk_writes);
    if (st == KILN_OK) st = load(rt, text, len + 1, KILN_PAYLOAD_PTX, &meta, "generated", out, err);
    free(text);
    return st;
}

static kiln_status resolve(kiln_rt *rt, const char *key, const char *canon, kiln_kernel **out, kiln_error *err) {
    kiln_status st = from_bundles(rt, key, out, err);
    if (st != KILN_ENOTFOUND) return st;
    const kiln_rt_generator *g = rt_generator();
    if (!g) return not_found(rt, key, err);
    char canon_buf[KILN_SPEC_MAX];
    if (!canon) { /* the spec as the template resolves it: the one resolution on this path */
        char norm[KILN_SPEC_MAX];
        st = g->canonical(key, canon_buf, sizeof canon_buf, err);
        if (st == KILN_OK) st = rt_spec_normalize(canon_buf, norm, sizeof norm, err);
        if (st != KILN_OK) return st;
        if (strcmp(norm, key) != 0) return get(rt, norm, canon_buf, out, err);
        canon = canon_buf;
    }
    int sm;
    uint8_t ck[16];
    st = gen_target(rt, g, canon, &sm, err);
    if (st == KILN_OK) st = cache_key(g, key, sm, ck, err);
    if (st != KILN_OK) return st;
    if (from_disk(rt, ck, key, out, &st, err) != 0) return st;
    return generate(rt, g, ck, key, canon, sm, out, err);
}

void rt_kernels_free(kiln_rt *rt) {
    if (rt_bind(rt, NULL) == KILN_OK)
        for (kiln_kernel *k = rt->kernels; k; k = k->next) rt->drv.cuModuleUnload(k->module);
    for (kiln_kernel *k = rt->kernels, *n; k; k = n) {
        n = k->next;
        free(k);
    }
    rt->kernels = NULL;
    for (int b = 0; b < RT_BUCKETS; b++) {
        for (rt_entry *e = rt->buckets[b], *n; e; e = n) {
            n = e->next;
            free(e);
        }
        rt->buckets[b] = NULL;
    }
}

/* ---- kernels ---- */

const kiln_kernel_meta *kiln_kernel_get_meta(const kiln_kernel *k) {
    return &k->meta;
}

const char *kiln_kernel_origin(const kiln_kernel *k) {
    return k->origin;
}

kiln_payload_kind kiln_kernel_payload_kind(const kiln_kernel *k) {
    return k->kind;
}

kiln_status kiln_kernel_grid(const kiln_kernel *k, const uint64_t problem[3], unsigned grid[3], kiln_error *err) {
    for (int i = 0; i < 3; i++) {
        uint64_t tile = k->meta.grid_tile[i] ? k->meta.grid_tile[i] : 1;
        uint64_t g = (problem[i] + tile - 1) / tile;
        if (g > k->rt->info.max_grid[i])
            return kiln_fail(err, KILN_EINVAL, "problem size %llu along axis %d needs %llu blocks; the device allows %u",
                             (unsigned long long)problem[i], i, (unsigned long long)g, k->rt->info.max_grid[i]);
        grid[i] = (unsigned)g;
    }
    return KILN_OK;
}

kiln_status kiln_kernel_launch(kiln_kernel *k, const unsigned grid[3], const kiln_arg *args, int nargs, void *stream,
                               kiln_error *err) {
    const kiln_kernel_meta *m = &k->meta;
    if (nargs != m->nparams)
        return kiln_fail(err, KILN_EINVAL, "kernel '%s' takes %d arguments, got %d", m->entry, m->nparams, nargs);
    if (!grid[0] || !grid[1] || !grid[2])
        return kiln_fail(err, KILN_EINVAL, "kernel '%s': empty grid (%u, %u, %u)", m->entry, grid[0], grid[1], grid[2]);
    void *params[KILN_MAX_PARAMS];
    for (int i = 0; i < nargs; i++) {
        params[i] = (void *)&args[i]; /* every member sits at offset 0 */
        if (m->params[i].kind != KILN_PARAM_TMAP) continue;
        params[i] = (void *)args[i].tmap; /* the driver copies the map's 128 bytes */
        if (!args[i].tmap || (uintptr_t)args[i].tmap % KILN_TMAP_ALIGN)
            return kiln_fail(err, KILN_EINVAL, "kernel '%s': argument '%s' must point at an encoded tensor map (128 bytes, "
                             "%d-byte aligned: kiln_tensor_map_encode), got %p", m->entry, m->params[i].name, KILN_TMAP_ALIGN,
                             args[i].tmap);
    }
    kiln_status st = rt_bind(k->rt, err);
    if (st != KILN_OK) return st;
    char what[KILN_SPEC_MAX + KILN_NAME_MAX + 160];
    snprintf(what, sizeof what, "kernel '%s' (%s), grid (%u, %u, %u), block (%u, %u, %u), %u bytes dynamic smem",
             m->entry, m->spec, grid[0], grid[1], grid[2], m->block[0], m->block[1], m->block[2], m->dynamic_smem);
    CUresult r = k->rt->drv.cuLaunchKernel(k->func, grid[0], grid[1], grid[2], m->block[0], m->block[1] ? m->block[1] : 1,
                                           m->block[2] ? m->block[2] : 1, m->dynamic_smem, (CUstream)stream, params, NULL);
    return rt_driver_check(&k->rt->drv, r, "cuLaunchKernel", what, err);
}
