/* runtime/rt_bundle.c - reads and checks bundle files (header, table of contents, payloads). */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rt.h"

/*
 * Layout (little-endian):
 *   header (64 bytes): magic[8] "KILNBDL1", u32 version, u32 count, u64 toc_offset, u64 toc_size,
 *                      u64 file_size, toc_hash[16] (XXH3-128), header_hash[8] (of bytes 0..55)
 *   toc: u32 producer_len, producer; then per entry: u32 sm, u32 ptx_version, u32 kind,
 *        u32 spec_len, u32 meta_len, u32 reserved, u64 offset, u64 size, hash[16], spec, meta
 *   payloads, each at a 64-byte aligned offset; meta is the "// kiln.meta" text block.
 */

/* Bytes of a table entry before its spec and meta text: six u32, two u64, the 16-byte hash. */
#define TOC_ENTRY_FIXED 56u

typedef struct cursor {
    const uint8_t *p, *end;
    int ok;
} cursor;

static uint64_t take(cursor *c, int bytes) {
    uint64_t v = 0;
    if (c->end - c->p < bytes) {
        c->ok = 0;
        return 0;
    }
    for (int i = 0; i < bytes; i++) v |= (uint64_t)c->p[i] << (8 * i);
    c->p += bytes;
    return v;
}

static const uint8_t *take_bytes(cursor *c, uint64_t n) {
    if ((uint64_t)(c->end - c->p) < n) {
        c->ok = 0;
        return NULL;
    }
    const uint8_t *s = c->p;
    c->p += n;
    return s;
}

static char *dup_text(const uint8_t *s, size_t n) {
    char *t = malloc(n + 1);
    if (t) {
        memcpy(t, s, n);
        t[n] = 0;
    }
    return t;
}

static kiln_status bad(kiln_bundle *b, kiln_error *err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static kiln_status bad(kiln_bundle *b, kiln_error *err, const char *fmt, ...) {
    char detail[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    return kiln_fail(err, KILN_ECORRUPT, "bundle '%s' is corrupt or not a kiln bundle: %s", b->name, detail);
}

static kiln_status parse_header(kiln_bundle *b, uint64_t *toc_off, uint64_t *toc_size, kiln_error *err) {
    if (b->size < 64 || memcmp(b->data, RT_BUNDLE_MAGIC, 8) != 0)
        return bad(b, err, "%s (%zu bytes)", b->size < 64 ? "too short" : "bad magic", b->size);
    cursor c = {b->data + 8, b->data + 64, 1};
    uint32_t version = (uint32_t)take(&c, 4);
    if (version != RT_BUNDLE_VERSION)
        return kiln_fail(err, KILN_ECORRUPT, "bundle '%s' has format version %u; this runtime reads version %u",
                         b->name, version, RT_BUNDLE_VERSION);
    uint8_t h[16];
    rt_hash128(b->data, 56, h);
    if (memcmp(h, b->data + 56, 8) != 0) return bad(b, err, "header checksum mismatch");
    uint32_t count = (uint32_t)take(&c, 4);
    *toc_off = take(&c, 8);
    *toc_size = take(&c, 8);
    uint64_t file_size = take(&c, 8);
    if (file_size != b->size)
        return bad(b, err, "truncated or padded: header says %llu bytes, have %zu", (unsigned long long)file_size,
                   b->size);
    if (*toc_off > b->size || *toc_size > b->size - *toc_off || *toc_size < 4)
        return bad(b, err, "table of contents out of bounds (offset %llu, size %llu)",
                   (unsigned long long)*toc_off, (unsigned long long)*toc_size);
    /* The count sizes an allocation before any entry is read: it must fit in the table it describes. */
    if (count > INT_MAX || count > (*toc_size - 4) / TOC_ENTRY_FIXED)
        return bad(b, err, "header lists %u entries; a %llu-byte table of contents holds at most %llu", count,
                   (unsigned long long)*toc_size, (unsigned long long)((*toc_size - 4) / TOC_ENTRY_FIXED));
    b->count = (int)count;
    rt_hash128(b->data + *toc_off, *toc_size, h);
    if (memcmp(h, b->data + 40, 16) != 0) return bad(b, err, "table of contents checksum mismatch");
    return KILN_OK;
}

static kiln_status parse_entry(kiln_bundle *b, cursor *c, rt_bundle_item *it, int i, kiln_error *err) {
    it->pub.sm = (int)take(c, 4);
    it->pub.ptx_version = (int)take(c, 4);
    uint32_t kind = (uint32_t)take(c, 4), spec_len = (uint32_t)take(c, 4), meta_len = (uint32_t)take(c, 4);
    take(c, 4);
    it->pub.offset = take(c, 8);
    it->pub.size = take(c, 8);
    const uint8_t *hash = take_bytes(c, 16), *spec = take_bytes(c, spec_len), *meta = take_bytes(c, meta_len);
    if (!c->ok || kind > KILN_PAYLOAD_CUBIN || spec_len >= KILN_SPEC_MAX)
        return bad(b, err, "malformed table entry %d", i);
    if (it->pub.offset > b->size || it->pub.size > b->size - it->pub.offset)
        return bad(b, err, "entry %d: payload out of bounds (offset %llu)", i, (unsigned long long)it->pub.offset);
    uint8_t h[16];
    rt_hash128(b->data + it->pub.offset, it->pub.size, h);
    if (memcmp(h, hash, 16) != 0) return bad(b, err, "entry %d ('%.*s'): payload checksum mismatch", i, (int)spec_len, (const char *)spec);
    it->pub.kind = (kiln_payload_kind)kind;
    it->pub.payload = b->data + it->pub.offset;
    it->spec = dup_text(spec, spec_len);
    it->norm = malloc(KILN_SPEC_MAX);
    if (!it->spec || !it->norm) return kiln_fail(err, KILN_ENOMEM, "out of memory reading bundle '%s'", b->name);
    kiln_error e;
    if (rt_spec_normalize(it->spec, it->norm, KILN_SPEC_MAX, &e) != KILN_OK ||
        kiln_meta_parse((const char *)meta, meta_len, &it->meta, &e) != KILN_OK)
        return kiln_fail(err, KILN_ECORRUPT, "bundle '%s' entry %d: %s", b->name, i, e.msg);
    if (it->meta.sm != it->pub.sm)
        return bad(b, err, "entry %d: table says sm_%d, metadata sm_%d", i, it->pub.sm, it->meta.sm);
    it->pub.spec = it->spec;
    it->pub.meta = &it->meta;
    return KILN_OK;
}

static kiln_status parse(kiln_bundle *b, kiln_error *err) {
    uint64_t toc_off = 0, toc_size = 0;
    kiln_status st = parse_header(b, &toc_off, &toc_size, err);
    if (st != KILN_OK) return st;
    cursor c = {b->data + toc_off, b->data + toc_off + toc_size, 1};
    uint32_t plen = (uint32_t)take(&c, 4);
    const uint8_t *prod = take_bytes(&c, plen);
    if (!c.ok) return bad(b, err, "malformed producer string");
    b->producer = dup_text(prod, plen);
    b->items = calloc((size_t)b->count + 1, sizeof *b->items);
    if (!b->producer || !b->items) return kiln_fail(err, KILN_ENOMEM, "out of memory reading bundle '%s'", b->name);
    for (int i = 0; i < b->count; i++)
        if ((st = parse_entry(b, &c, &b->items[i], i, err)) != KILN_OK) return st;
    return c.p == c.end ? KILN_OK : bad(b, err, "trailing bytes in table of contents");
}

kiln_status kiln_bundle_open_memory(const void *data, size_t size, kiln_bundle **out, kiln_error *err) {
    *out = NULL;
    kiln_bundle *b = calloc(1, sizeof *b);
    if (!b || !(b->name = strdup("memory"))) {
        free(b);
        return kiln_fail(err, KILN_ENOMEM, "out of memory opening a bundle");
    }
    b->data = data;
    b->size = size;
    kiln_status st = data ? parse(b, err) : kiln_fail(err, KILN_EINVAL, "bundle data is NULL");
    if (st != KILN_OK) {
        kiln_bundle_close(b);
        return st;
    }
    *out = b;
    return KILN_OK;
}

kiln_status kiln_bundle_open_file(const char *path, kiln_bundle **out, kiln_error *err) {
    void *data = NULL;
    size_t size = 0;
    *out = NULL;
    if (!path) return kiln_fail(err, KILN_EINVAL, "kiln_bundle_open_file: NULL path");
    kiln_status st = kiln_read_input(path, "bundle", &data, &size, err);
    if (st != KILN_OK) return st;
    kiln_bundle *b = calloc(1, sizeof *b);
    if (!b || !(b->name = strdup(path))) {
        free(b);
        free(data);
        return kiln_fail(err, KILN_ENOMEM, "out of memory opening bundle '%s'", path);
    }
    b->data = data;
    b->size = size;
    b->owned = data;
    if ((st = parse(b, err)) != KILN_OK) {
        kiln_bundle_close(b);
        return st;
    }
    *out = b;
    return KILN_OK;
}

void kiln_bundle_close(kiln_bundle *b) {
    if (!b) return;
    for (int i = 0; b->items && i < b->count; i++) {
        free(b->items[i].spec);
        free(b->items[i].norm);
    }
    free(b->items);
    free(b->producer);
    free(b->name);
    free(b->owned);
    free(b);
}

int kiln_bundle_count(const kiln_bundle *b) {
    return b ? b->count : 0;
}

const char *kiln_bundle_producer(const kiln_bundle *b) {
    return b ? b->producer : NULL;
}

kiln_status kiln_bundle_entry_at(const kiln_bundle *b, int i, kiln_bundle_entry *out, kiln_error *err) {
    if (!b || i < 0 || i >= b->count)
        return kiln_fail(err, KILN_EINVAL, "bundle entry %d out of range (0..%d)", i, b ? b->count - 1 : -1);
    *out = b->items[i].pub;
    return KILN_OK;
}

const rt_bundle_item *rt_bundle_find(const kiln_bundle *b, const char *norm, int device_sm, int driver_version,
                                     const rt_bundle_item **refused) {
    const rt_bundle_item *best = NULL;
    for (int i = 0; i < b->count; i++) {
        const rt_bundle_item *it = &b->items[i];
        if (!kiln_target_runs_on(it->pub.sm, device_sm) || strcmp(it->norm, norm) != 0) continue;
        if (it->pub.kind == KILN_PAYLOAD_CUBIN) {
            if (kiln_sm_base(it->pub.sm) == device_sm) return it;
            continue; /* a cubin runs only on its own SM */
        }
        if (!rt_driver_loads_ptx(driver_version, it->pub.ptx_version)) {
            if (refused && (!*refused || it->pub.sm > (*refused)->pub.sm)) *refused = it;
            continue;
        }
        if (!best || it->pub.sm > best->pub.sm) best = it;
    }
    return best;
}

void rt_bundle_describe_family(const kiln_bundle *b, const char *family, char *buf, size_t size) {
    char fam[KILN_NAME_MAX];
    for (int i = 0; i < b->count; i++) {
        const rt_bundle_item *it = &b->items[i];
        rt_spec_family(it->spec, fam, sizeof fam);
        int first = 1;
        for (int j = 0; j < i && first; j++) first = strcmp(b->items[j].norm, it->norm) != 0;
        if (strcmp(fam, family) != 0 || !first) continue;
        size_t n = strlen(buf);
        snprintf(buf + n, size - n, "%s'%s' (", n ? "; " : "", it->spec);
        for (int j = i, k = 0; j < b->count; j++) {
            if (strcmp(b->items[j].norm, it->norm) != 0) continue;
            n = strlen(buf);
            char sm[16];
            snprintf(buf + n, size - n, "%s%s %s", k++ ? ", " : "", kiln_sm_name(b->items[j].pub.sm, sm),
                     b->items[j].pub.kind == KILN_PAYLOAD_CUBIN ? "cubin" : "ptx");
        }
        n = strlen(buf);
        snprintf(buf + n, size - n, ")");
    }
}
