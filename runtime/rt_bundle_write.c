/* runtime/rt_bundle_write.c - builds a bundle in memory (format described in rt_bundle.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rt.h"

typedef struct witem {
    kiln_kernel_meta meta;
    kiln_payload_kind kind;
    void *payload;
    size_t size;
} witem;

struct kiln_bundle_writer {
    char *producer;
    witem *items;
    int count, cap;
};

typedef struct obuf {
    uint8_t *p;
    size_t len;
} obuf;

static void put(obuf *o, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; i++) o->p[o->len++] = (uint8_t)(v >> (8 * i));
}

static void put_bytes(obuf *o, const void *s, size_t n) {
    memcpy(o->p + o->len, s, n);
    o->len += n;
}

kiln_status kiln_bundle_writer_create(kiln_bundle_writer **out, const char *producer, kiln_error *err) {
    kiln_bundle_writer *w = calloc(1, sizeof *w);
    if (!w || !(w->producer = strdup(producer ? producer : ""))) {
        free(w);
        return kiln_fail(err, KILN_ENOMEM, "out of memory creating a bundle");
    }
    *out = w;
    return KILN_OK;
}

void kiln_bundle_writer_destroy(kiln_bundle_writer *w) {
    if (!w) return;
    for (int i = 0; i < w->count; i++) free(w->items[i].payload);
    free(w->items);
    free(w->producer);
    free(w);
}

kiln_status kiln_bundle_writer_add(kiln_bundle_writer *w, const kiln_kernel_meta *meta, kiln_payload_kind kind,
                                   const void *payload, size_t size, kiln_error *err) {
    if ((unsigned)kind > KILN_PAYLOAD_CUBIN || !meta->spec[0] || !meta->entry[0])
        return kiln_fail(err, KILN_EINVAL, "bundle entry needs a spec, an entry name and kind ptx or cubin");
    if (w->count == w->cap) {
        int cap = w->cap ? 2 * w->cap : 16;
        witem *n = realloc(w->items, (size_t)cap * sizeof *n);
        if (!n) return kiln_fail(err, KILN_ENOMEM, "out of memory adding to a bundle");
        w->items = n;
        w->cap = cap;
    }
    void *copy = malloc(size ? size : 1);
    if (!copy) return kiln_fail(err, KILN_ENOMEM, "out of memory adding to a bundle");
    memcpy(copy, payload, size);
    w->items[w->count++] = (witem){*meta, kind, copy, size};
    return KILN_OK;
}

static size_t align64(size_t n) {
    return (n + 63) & ~(size_t)63;
}

kiln_status kiln_bundle_writer_finish(kiln_bundle_writer *w, void **data, size_t *size, kiln_error *err) {
    char (*metas)[8192] = calloc((size_t)w->count + 1, sizeof *metas);
    if (!metas) return kiln_fail(err, KILN_ENOMEM, "out of memory writing a bundle");
    size_t toc = 4 + strlen(w->producer);
    for (int i = 0; i < w->count; i++) {
        int n = kiln_meta_format(&w->items[i].meta, metas[i], sizeof metas[i]);
        if (n < 0 || n >= (int)sizeof metas[i]) {
            free(metas);
            return kiln_fail(err, KILN_EINVAL, "metadata of '%s' is too long for a bundle", w->items[i].meta.spec);
        }
        toc += 56 + strlen(w->items[i].meta.spec) + (size_t)n;
    }
    size_t total = align64(64 + toc);
    for (int i = 0; i < w->count; i++) total += align64(w->items[i].size);
    obuf o = {calloc(1, total), 0};
    if (!o.p) {
        free(metas);
        return kiln_fail(err, KILN_ENOMEM, "out of memory writing a bundle");
    }
    o.len = 64;
    put(&o, strlen(w->producer), 4);
    put_bytes(&o, w->producer, strlen(w->producer));
    size_t off = align64(64 + toc);
    for (int i = 0; i < w->count; i++) {
        const witem *it = &w->items[i];
        uint8_t h[16];
        rt_hash128(it->payload, it->size, h);
        put(&o, (uint32_t)it->meta.sm, 4);
        put(&o, (uint32_t)it->meta.ptx_version, 4);
        put(&o, it->kind, 4);
        put(&o, strlen(it->meta.spec), 4);
        put(&o, strlen(metas[i]), 4);
        put(&o, 0, 4);
        put(&o, off, 8);
        put(&o, it->size, 8);
        put_bytes(&o, h, 16);
        put_bytes(&o, it->meta.spec, strlen(it->meta.spec));
        put_bytes(&o, metas[i], strlen(metas[i]));
        memcpy(o.p + off, it->payload, it->size);
        off += align64(it->size);
    }
    free(metas);
    uint8_t h[16];
    rt_hash128(o.p + 64, toc, h);
    o.len = 0;
    put_bytes(&o, RT_BUNDLE_MAGIC, 8);
    put(&o, RT_BUNDLE_VERSION, 4);
    put(&o, (uint32_t)w->count, 4);
    put(&o, 64, 8);
    put(&o, toc, 8);
    put(&o, total, 8);
    put_bytes(&o, h, 16);
    rt_hash128(o.p, 56, h);
    put_bytes(&o, h, 8);
    *data = o.p;
    *size = total;
    return KILN_OK;
}
