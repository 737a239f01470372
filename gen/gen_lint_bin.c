/* gen/gen_lint_bin.c - kiln lint for binaries: the code images of cubins, fatbins and the ELF files that embed them,
 * and whether a device and driver can run them. */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "gen.h"
#include "kiln/lint.h"
#include "kiln/runtime.h"

enum { MAX_FINDINGS = 10000, EM_CUDA = 190, SHT_NOBITS = 8 };
#define MAX_PTX_BYTES ((uint64_t)64 << 20) /* the most inflated PTX lint reads from one image */

/* ---- facts (observed on nvcc 13.0 fatbins and cubins; LLVM's BinaryFormat/ELF.h for e_flags) ---- */

#define FATBIN_MAGIC 0xBA55ED50u
enum { FATBIN_HEADER = 16, ENTRY_MIN = 64 };
/* A fatbin entry header's fields (little-endian), at these offsets. */
enum {
    E_KIND = 0,
    E_HSIZE = 4,
    E_PSIZE = 8,
    E_CSIZE = 16,
    E_MINOR = 24,
    E_MAJOR = 26,
    E_ARCH = 28,
    E_FLAGS = 40,
    E_USIZE = 56
};

static const struct {
    unsigned code;
    kiln_lint_image_kind kind;
} entry_kinds[] = {{1, KILN_IMAGE_PTX}, {2, KILN_IMAGE_CUBIN}, {8, KILN_IMAGE_LTOIR}};

/* Entry flags: the payload's compression, and the target's suffix. */
static const struct {
    uint64_t bit;
    const char *name;
} compressions[] = {{0x2000, "lz4"}, {0x8000, "zstd"}};
static const struct {
    uint64_t bit;
    char suffix;
} entry_suffixes[] = {{0x100000, 'a'}, {0x200000, 'f'}};

/* A cubin's e_flags by its ELF EI_ABIVERSION: where the SM is, and the arch-specific ('a') bit. */
static const struct {
    int abi_min;
    unsigned sm_mask, sm_shift, accel;
} cubin_abis[] = {{8, 0xff00, 8, 0x8}, {0, 0xff, 0, 0x800}};

/* The host ELF sections nvcc puts fatbins in (the second for -rdc objects). */
static const char *const fatbin_sections[] = {".nv_fatbin", "__nv_relfatbin"};

static const char *const kind_names[] = {"cubin", "PTX", "LTO IR", "unknown entry"};

/* ---- the report ---- */

typedef struct bimage {
    kiln_lint_image pub;
    kiln_lint_report *lint; /* PTX images lint could read */
    const uint8_t *bytes;   /* the payload, valid during kiln_lint_bin only */
    uint64_t inflated;      /* compressed payloads: the size the entry says they inflate to */
    size_t lint_errors;     /* PTX: its lint's errors (the driver's JIT would refuse it) */
} bimage;

struct kiln_lint_bin_report {
    kiln_lint_binary info;
    bimage *images;
    size_t count, cap;
    kiln_lint_finding *findings;
    size_t *repeats; /* containers (or images) each finding stands for */
    size_t nfind, capf;
    bool oom;
};

static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t rd32(const uint8_t *p) { return (uint32_t)rd16(p) | (uint32_t)rd16(p + 2) << 16; }
static uint64_t rd64(const uint8_t *p) { return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32; }

static bimage *add_image(kiln_lint_bin_report *r) {
    if (r->count == r->cap) {
        size_t cap = r->cap ? r->cap * 2 : 16;
        bimage *b = realloc(r->images, cap * sizeof *b);
        if (!b) return NULL;
        r->images = b, r->cap = cap;
    }
    bimage *im = &r->images[r->count++];
    memset(im, 0, sizeof *im);
    return im;
}

/* Adds a finding, or counts it against an identical recent one (a library's many containers repeat). */
static void add_finding(kiln_lint_bin_report *r, kiln_lint_kind kind, int warning, const char *where, int need_sm,
                        int need_ptx, const char *fmt, ...) {
    kiln_lint_finding f = {
        .kind = kind, .warning = warning, .need_sm = need_sm, .need_ptx = need_ptx, .device_sm = r->info.device_sm};
    snprintf(f.instruction, sizeof f.instruction, "%s", where);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(f.message, sizeof f.message, fmt, ap);
    va_end(ap);
    for (size_t i = r->nfind, seen = 0; i-- > 0 && seen < 32; seen++)
        if (r->findings[i].kind == kind && !strcmp(r->findings[i].message, f.message)) {
            r->repeats[i]++;
            return;
        }
    if (r->nfind == MAX_FINDINGS) return;
    if (r->nfind == r->capf) {
        size_t cap = r->capf ? r->capf * 2 : 8;
        kiln_lint_finding *b = realloc(r->findings, cap * sizeof *b);
        if (b) r->findings = b;
        size_t *n = b ? realloc(r->repeats, cap * sizeof *n) : NULL;
        if (!n) {
            r->oom = true;
            return;
        }
        r->repeats = n, r->capf = cap;
    }
    r->findings[r->nfind] = f;
    r->repeats[r->nfind++] = 1;
}

/* ---- targets and the rules of who runs what ---- */

static const kiln_ptx_target *target_of(int sm, char suffix) {
    size_t n;
    const kiln_ptx_target *t = kiln_ptx_targets(&n);
    for (size_t i = 0; i < n; i++)
        if (t[i].sm == sm && t[i].suffix == suffix) return &t[i];
    return NULL;
}

static void set_target(kiln_lint_image *im, int sm, char suffix) {
    im->sm = sm, im->suffix = suffix;
    snprintf(im->target, sizeof im->target, "sm_%d%c", sm % 1000, suffix ? suffix : '\0');
}

/* "cubin sm_80", "PTX compute_90 (.version 9.0)" */
static const char *image_name(const kiln_lint_image *im, char *buf, size_t cap) {
    if (im->kind == KILN_IMAGE_PTX)
        snprintf(buf, cap, "PTX compute_%s (.version %d.%d)", im->target + 3, im->ptx / 10, im->ptx % 10);
    else
        snprintf(buf, cap, "%s %s", kind_names[im->kind], im->target);
    return buf;
}

/* Whether the image can run on a device of SM dev; if not, why (into why). */
static bool runs_on(const kiln_lint_image *im, int dev, char *why, size_t cap) {
    int maj = im->sm / 10, dmaj = dev / 10;
    switch (im->kind) {
    case KILN_IMAGE_CUBIN:
        if (im->suffix == 'a' && dev != im->sm) return snprintf(why, cap, "runs on sm_%d only", im->sm), false;
        if (dmaj != maj || dev % 10 < im->sm % 10) {
            if (im->sm % 10)
                snprintf(why, cap, "runs on %d.%d and newer %d.x devices only", maj, im->sm % 10, maj);
            else
                snprintf(why, cap, "runs on %d.x devices only", maj);
            return false;
        }
        return true;
    case KILN_IMAGE_PTX:
        if (im->suffix == 'a' && dev != im->sm) return snprintf(why, cap, "JIT-compiles for sm_%d only", im->sm), false;
        if (im->suffix == 'f' && (dmaj != maj || dev < im->sm))
            return snprintf(why, cap, "JIT-compiles for %d.x devices from sm_%d on only", maj, im->sm), false;
        if (dev < im->sm) return snprintf(why, cap, "JIT-compiles for sm_%d and newer only", im->sm), false;
        return true;
    case KILN_IMAGE_LTOIR:
        return snprintf(why, cap, "nvlink/nvJitLink input the driver does not load"), false;
    default:
        return snprintf(why, cap, "an entry kind the driver does not load"), false;
    }
}

/* The oldest release whose driver accepts PTX ISA ptx (times 10), or NULL. */
static const kiln_cuda_release *first_release(int ptx) {
    size_t n;
    const kiln_cuda_release *r = kiln_cuda_releases(&n);
    for (size_t i = 0; i < n; i++)
        if (r[i].ptx >= ptx) return &r[i];
    return NULL;
}

/* Whether a driver of release cuda accepts the image; if not, why, and the release that would (*need). */
static bool driver_loads(const kiln_lint_image *im, int cuda, char *why, size_t cap, int *need) {
    const kiln_cuda_release *rel = kiln_cuda_release_of(cuda);
    const kiln_ptx_target *t = target_of(im->sm, im->suffix);
    int cmaj = cuda / 1000, cmin = cuda % 1000 / 10;
    *need = 0;
    if (im->kind == KILN_IMAGE_PTX && rel && im->ptx > rel->ptx) {
        const kiln_cuda_release *f = first_release(im->ptx);
        *need = f ? f->version : 0;
        snprintf(why, cap,
                 ".version %d.%d needs a CUDA %d.%d driver or newer; CUDA %d.%d's takes PTX ISA up to %d.%d "
                 "(CUDA_ERROR_UNSUPPORTED_PTX_VERSION)",
                 im->ptx / 10, im->ptx % 10, *need / 1000, *need % 1000 / 10, cmaj, cmin, rel->ptx / 10, rel->ptx % 10);
        return false;
    }
    if ((im->kind == KILN_IMAGE_PTX || im->kind == KILN_IMAGE_CUBIN) && t && !kiln_cuda_knows_target(cuda, t)) {
        const kiln_cuda_release *f = first_release(t->ptx);
        *need = f ? f->version : 0;
        snprintf(why, cap, "a CUDA %d.%d driver does not know %s (it came with CUDA %d.%d)", cmaj, cmin, t->name,
                 *need / 1000, *need % 1000 / 10);
        return false;
    }
    return true;
}

/* ---- readers ---- */

static kiln_status corrupt(kiln_error *err, const char *fmt, ...) {
    char msg[sizeof err->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return kiln_fail(err, KILN_ECORRUPT, "%s", msg);
}

/* Reads the fatbin containers in d[start, end) (a whole .fatbin, or one ELF section). */
static kiln_status read_fatbins(kiln_lint_bin_report *r, const uint8_t *d, size_t start, size_t end, const char *where,
                                kiln_error *err) {
    size_t pos = start;
    for (;;) {
        while (pos < end && d[pos] == 0) pos++; /* containers are padded to 8 bytes */
        if (pos >= end) return KILN_OK;
        if (end - pos < FATBIN_HEADER)
            return corrupt(err, "truncated fatbin container header at offset 0x%zx of %s (%zu bytes left, 16 needed)",
                           pos, where, end - pos);
        if (rd32(d + pos) != FATBIN_MAGIC)
            return corrupt(err, "no fatbin container at offset 0x%zx of %s: magic 0x%08x, expected 0x%08x", pos, where,
                           rd32(d + pos), FATBIN_MAGIC);
        unsigned version = rd16(d + pos + 4), hsize = rd16(d + pos + 6);
        uint64_t fsize = rd64(d + pos + 8);
        if (version != 1)
            return corrupt(err, "fatbin container at offset 0x%zx of %s has version %u; kiln reads version 1", pos,
                           where, version);
        if (hsize < FATBIN_HEADER || hsize > end - pos || fsize > end - pos - hsize)
            return corrupt(err,
                           "fatbin container at offset 0x%zx of %s declares %u + %llu bytes but only %zu remain "
                           "(truncated?)",
                           pos, where, hsize, (unsigned long long)fsize, end - pos);
        size_t container = r->info.containers++, p = pos + hsize, cend = p + (size_t)fsize;
        while (p < cend) {
            if (cend - p < ENTRY_MIN)
                return corrupt(err, "truncated fatbin entry header at offset 0x%zx of %s (%zu bytes left, %d needed)",
                               p, where, cend - p, ENTRY_MIN);
            const uint8_t *e = d + p;
            uint32_t ehs = rd32(e + E_HSIZE);
            uint64_t psize = rd64(e + E_PSIZE), flags = rd64(e + E_FLAGS);
            if (ehs < ENTRY_MIN || ehs > cend - p || psize > cend - p - ehs)
                return corrupt(err,
                               "fatbin entry at offset 0x%zx of %s declares a %u-byte header and %llu payload bytes; "
                               "its container has %zu left",
                               p, where, ehs, (unsigned long long)psize, cend - p);
            bimage *im = add_image(r);
            if (!im) return kiln_fail(err, KILN_ENOMEM, "out of memory");
            kiln_lint_image *pi = &im->pub;
            pi->kind = KILN_IMAGE_OTHER;
            for (size_t k = 0; k < sizeof entry_kinds / sizeof entry_kinds[0]; k++)
                if (entry_kinds[k].code == rd16(e + E_KIND)) pi->kind = entry_kinds[k].kind;
            char suffix = 0;
            for (size_t k = 0; k < sizeof entry_suffixes / sizeof entry_suffixes[0]; k++)
                if (flags & entry_suffixes[k].bit) suffix = entry_suffixes[k].suffix;
            set_target(pi, (int)(rd32(e + E_ARCH) % 1000), suffix);
            if (pi->kind == KILN_IMAGE_PTX) pi->ptx = rd16(e + E_MAJOR) * 10 + rd16(e + E_MINOR) % 10;
            pi->container = container;
            pi->offset = p + ehs;
            pi->size = (size_t)psize;
            for (size_t k = 0; k < sizeof compressions / sizeof compressions[0]; k++)
                if (flags & compressions[k].bit)
                    snprintf(pi->compression, sizeof pi->compression, "%s", compressions[k].name);
            if (pi->compression[0]) {
                uint32_t csize = rd32(e + E_CSIZE);
                if (csize == 0 || csize > psize)
                    return corrupt(err,
                                   "compressed fatbin entry at offset 0x%zx of %s declares %u compressed bytes in a "
                                   "%llu-byte payload",
                                   p, where, csize, (unsigned long long)psize);
                pi->size = csize;
                im->inflated = rd64(e + E_USIZE);
            }
            if (pi->kind == KILN_IMAGE_OTHER)
                snprintf(pi->note, sizeof pi->note, "fatbin entry kind %u, which kiln does not know", rd16(e + E_KIND));
            im->bytes = d + pi->offset;
            p += ehs + (size_t)psize;
        }
        pos = cend;
    }
}

/* A 64-bit little-endian ELF file's section table. */
typedef struct elf {
    const uint8_t *d;
    size_t len, shoff, shnum, shentsize, stroff, strsize;
} elf;

typedef struct elf_sec {
    const char *name; /* NUL-terminated inside the string table, or "" */
    uint32_t type;
    size_t off, size;
} elf_sec;

static kiln_status elf_open(elf *e, const uint8_t *d, size_t len, kiln_error *err) {
    memset(e, 0, sizeof *e);
    e->d = d, e->len = len;
    if (len < 64) return corrupt(err, "truncated ELF header (%zu bytes, 64 needed)", len);
    if (d[4] != 2)
        return kiln_fail(
            err, KILN_EINVAL,
            "a 32-bit ELF file: kiln reads 64-bit ELF files (cubins, x86-64 and aarch64 objects and libraries)");
    if (d[5] != 1) return kiln_fail(err, KILN_EINVAL, "a big-endian ELF file: kiln reads little-endian ELF files only");
    uint64_t shoff = rd64(d + 0x28);
    size_t shentsize = rd16(d + 0x3a), shnum = rd16(d + 0x3c), shstrndx = rd16(d + 0x3e);
    if (shoff == 0)
        return kiln_fail(err, KILN_EINVAL, "an ELF file without section headers: kiln finds CUDA code by its sections");
    if (shentsize < 64 || shoff > len || len - shoff < shentsize)
        return corrupt(err, "ELF section headers at offset 0x%llx (entries of %zu bytes) lie outside the %zu-byte file",
                       (unsigned long long)shoff, shentsize, len);
    if (shnum == 0) shnum = (size_t)rd64(d + shoff + 0x20); /* more than 0xff00 sections: the count is in section 0 */
    if (shstrndx == 0xffff) shstrndx = rd32(d + shoff + 0x28);
    if (shnum > (len - shoff) / shentsize)
        return corrupt(err,
                       "ELF declares %zu section headers at offset 0x%llx; the %zu-byte file holds fewer (truncated?)",
                       shnum, (unsigned long long)shoff, len);
    e->shoff = (size_t)shoff, e->shnum = shnum, e->shentsize = shentsize;
    if (shstrndx < shnum) {
        const uint8_t *s = d + e->shoff + shstrndx * shentsize;
        uint64_t off = rd64(s + 0x18), size = rd64(s + 0x20);
        if (off <= len && size <= len - off) e->stroff = (size_t)off, e->strsize = (size_t)size;
    }
    return KILN_OK;
}

static kiln_status elf_get(const elf *e, size_t i, elf_sec *s, kiln_error *err) {
    const uint8_t *h = e->d + e->shoff + i * e->shentsize;
    uint32_t name = rd32(h);
    s->type = rd32(h + 4);
    uint64_t off = rd64(h + 0x18), size = rd64(h + 0x20);
    s->name = "";
    if (name < e->strsize && memchr(e->d + e->stroff + name, 0, e->strsize - name))
        s->name = (const char *)e->d + e->stroff + name;
    if (s->type == SHT_NOBITS) off = size = 0;
    if (off > e->len || size > e->len - off)
        return corrupt(err,
                       "ELF section %zu (%s) declares %llu bytes at offset 0x%llx, past the end of the %zu-byte file "
                       "(truncated?)",
                       i, s->name, (unsigned long long)size, (unsigned long long)off, e->len);
    s->off = (size_t)off, s->size = (size_t)size;
    return KILN_OK;
}

/* A cubin: its SM from e_flags; 'a' from the flag or, as CUDA 13's ptxas writes it, from the tool note. */
static kiln_status read_cubin(kiln_lint_bin_report *r, const elf *e, kiln_error *err) {
    const uint8_t *d = e->d;
    unsigned flags = rd32(d + 0x30);
    int abi = d[8], sm = 0;
    char suffix = 0;
    for (size_t k = 0; k < sizeof cubin_abis / sizeof cubin_abis[0]; k++)
        if (abi >= cubin_abis[k].abi_min) {
            sm = (int)((flags & cubin_abis[k].sm_mask) >> cubin_abis[k].sm_shift);
            if (flags & cubin_abis[k].accel) suffix = 'a';
            break;
        }
    if (sm == 0) return corrupt(err, "cubin whose e_flags (0x%x) name no SM", flags);
    for (size_t i = 0; i < e->shnum && !suffix; i++) {
        elf_sec s;
        kiln_status st = elf_get(e, i, &s, err);
        if (st) return st;
        if (strcmp(s.name, ".note.nv.tkinfo")) continue;
        const char *p = (const char *)d + s.off, *end = p + s.size;
        static const char key[] = "-arch sm_";
        for (; (size_t)(end - p) > sizeof key - 1; p++) {
            if (memcmp(p, key, sizeof key - 1)) continue;
            const char *q = p + sizeof key - 1;
            int n = 0;
            while (q < end && *q >= '0' && *q <= '9' && n < 1000) n = n * 10 + (*q++ - '0');
            if (n == sm && q < end && (*q == 'a' || *q == 'f')) suffix = *q;
            break;
        }
    }
    bimage *im = add_image(r);
    if (!im) return kiln_fail(err, KILN_ENOMEM, "out of memory");
    im->pub.kind = KILN_IMAGE_CUBIN;
    set_target(&im->pub, sm, suffix);
    im->pub.size = e->len;
    im->bytes = d;
    r->info.containers = 1;
    return KILN_OK;
}

static kiln_status read_input(kiln_lint_bin_report *r, const uint8_t *d, size_t len, kiln_error *err) {
    if (len >= 4 && rd32(d) == FATBIN_MAGIC) {
        snprintf(r->info.format, sizeof r->info.format, "fatbin");
        return read_fatbins(r, d, 0, len, "the fatbin", err);
    }
    elf e;
    kiln_status s = elf_open(&e, d, len, err);
    if (s) return s;
    if (rd16(d + 0x12) == EM_CUDA) {
        snprintf(r->info.format, sizeof r->info.format, "cubin");
        return read_cubin(r, &e, err);
    }
    snprintf(r->info.format, sizeof r->info.format, "elf");
    bool found = false;
    for (size_t i = 0; i < e.shnum; i++) {
        elf_sec sec;
        if ((s = elf_get(&e, i, &sec, err))) return s;
        for (size_t k = 0; k < sizeof fatbin_sections / sizeof fatbin_sections[0]; k++)
            if (!strcmp(sec.name, fatbin_sections[k]) && sec.size) {
                found = true;
                if ((s = read_fatbins(r, d, sec.off, sec.off + sec.size, fatbin_sections[k], err))) return s;
            }
    }
    if (!found)
        return kiln_fail(err, KILN_EINVAL,
                         "no CUDA device code: this ELF file has no .nv_fatbin or __nv_relfatbin section (not built "
                         "by nvcc, or its kernels live in another library)");
    return KILN_OK;
}

/* ---- PTX inside: inflate and lint ---- */

/* The image's bytes, inflated when compressed (*owned: the caller frees it); NULL when they cannot be had
 * (the note or a finding says why). */
static const uint8_t *payload(kiln_lint_bin_report *r, bimage *im, size_t *n, uint8_t **owned) {
    kiln_lint_image *pi = &im->pub;
    char name[64];
    *owned = NULL, *n = pi->size;
    if (!pi->compression[0]) return im->bytes;
    if (!strcmp(pi->compression, "lz4")) {
        snprintf(pi->note, sizeof pi->note,
                 "not read: compressed with the LZ4-style scheme of CUDA 11-12.7's nvcc, which kiln does not inflate "
                 "(its SM%s come from the entry header)",
                 pi->kind == KILN_IMAGE_PTX ? " and .version" : "");
        return NULL;
    }
    if (im->inflated == 0 || im->inflated > MAX_PTX_BYTES) {
        snprintf(pi->note, sizeof pi->note, "not read: it inflates to %llu bytes; lint reads up to %llu",
                 (unsigned long long)im->inflated, (unsigned long long)MAX_PTX_BYTES);
        return NULL;
    }
    uint8_t *buf = malloc((size_t)im->inflated);
    if (!buf) {
        r->oom = true;
        return NULL;
    }
    size_t got = ZSTD_decompress(buf, (size_t)im->inflated, im->bytes, pi->size);
    if (ZSTD_isError(got) || got != im->inflated) {
        add_finding(r, KILN_LINT_TEXT, 0, image_name(pi, name, sizeof name), 0, 0,
                    "the zstd-compressed %s at offset 0x%zx does not inflate to the %llu bytes its entry declares: %s",
                    kind_names[pi->kind], pi->offset, (unsigned long long)im->inflated,
                    ZSTD_isError(got) ? ZSTD_getErrorName(got) : "a different size");
        free(buf);
        return NULL;
    }
    *n = got;
    return *owned = buf;
}

/* A cubin's code sections (.text.<function>), or -1 when it is not an ELF lint can read. */
static long count_code(const uint8_t *d, size_t len) {
    elf e;
    kiln_error scratch;
    if (len < 64 || memcmp(d, "\177ELF", 4) || elf_open(&e, d, len, &scratch)) return -1;
    long n = 0;
    for (size_t i = 0; i < e.shnum; i++) {
        elf_sec s;
        if (elf_get(&e, i, &s, &scratch)) return -1;
        n += !strncmp(s.name, ".text.", 6);
    }
    return n;
}

/* Inflates and reads an image: a PTX's lint and functions, a cubin's code sections. */
static void read_image(kiln_lint_bin_report *r, bimage *im) {
    kiln_lint_image *pi = &im->pub;
    char name[64];
    size_t n;
    uint8_t *owned;
    pi->functions = -1;
    if (pi->kind != KILN_IMAGE_PTX && pi->kind != KILN_IMAGE_CUBIN) return;
    const uint8_t *bytes = payload(r, im, &n, &owned);
    if (!bytes) return;
    if (pi->kind == KILN_IMAGE_CUBIN) {
        pi->functions = count_code(bytes, n);
        if (pi->functions < 0)
            add_finding(r, KILN_LINT_TEXT, 0, image_name(pi, name, sizeof name), 0, 0,
                        "the cubin at offset 0x%zx is not an ELF file lint can read", pi->offset);
        free(owned);
        return;
    }
    const char *text = (const char *)bytes;
    const char *nul = memchr(text, 0, n); /* the text ends at its NUL; padding follows */
    if (nul) n = (size_t)(nul - text);
    kiln_error err = {0};
    if (kiln_lint(text, n, 0, &im->lint, &err) != KILN_OK) {
        if (err.status == KILN_ENOMEM)
            r->oom = true;
        else
            add_finding(r, KILN_LINT_TEXT, 0, image_name(pi, name, sizeof name), 0, 0,
                        "the PTX at offset 0x%zx cannot be read: %s", pi->offset, err.msg);
        im->lint = NULL;
    } else {
        const kiln_lint_module *m = kiln_lint_module_info(im->lint);
        const kiln_ptx_target *t = kiln_ptx_target_find(m->target, strlen(m->target));
        if (t) set_target(pi, t->sm, t->suffix); /* the text is the authority over the entry header */
        pi->ptx = m->ptx;
        pi->findings = kiln_lint_count(im->lint);
        for (size_t k = 0; k < pi->findings; k++) im->lint_errors += !kiln_lint_get(im->lint, k)->warning;
        pi->functions = (long)m->functions;
    }
    free(owned);
}

/* ---- the verdict ---- */

/* runs_on, and for PTX also that lint found no error in it (ptxas in the driver would refuse it). */
static bool serves(const bimage *im, int dev, char *why, size_t cap) {
    if (!runs_on(&im->pub, dev, why, cap)) return false;
    if (im->lint_errors)
        return snprintf(why, cap, "its %zu lint error%s would fail the driver's JIT (CUDA_ERROR_INVALID_PTX)",
                        im->lint_errors, im->lint_errors == 1 ? "" : "s"),
               false;
    return true;
}

/* The image of container c the driver would pick for device dev (exact cubin, else the newest compatible
 * cubin, else the newest PTX), or NULL; *first is where c's images start, *end past them. */
static const kiln_lint_image *pick(const kiln_lint_bin_report *r, size_t first, size_t end, int dev, int cuda) {
    const kiln_lint_image *best = NULL;
    char why[256];
    int need;
    for (size_t i = first; i < end; i++) {
        const kiln_lint_image *im = &r->images[i].pub;
        if (!serves(&r->images[i], dev, why, sizeof why) || (cuda && !driver_loads(im, cuda, why, sizeof why, &need)))
            continue;
        int rank = (im->kind == KILN_IMAGE_CUBIN ? 2000 : 0) + (im->sm == dev ? 1000 : 0) + im->sm;
        int brank = best ? (best->kind == KILN_IMAGE_CUBIN ? 2000 : 0) + (best->sm == dev ? 1000 : 0) + best->sm : -1;
        if (rank > brank) best = im;
    }
    return best;
}

/* The -gencode that builds for dev, and which nvcc can (CUDA 13's no longer builds for sm_70). */
static void gencode_fix(int dev, char *buf, size_t cap) {
    size_t n;
    const kiln_cuda_release *rel = kiln_cuda_releases(&n), *last = NULL;
    for (size_t i = 0; i < n; i++)
        if (rel[i].min_sm <= dev) last = &rel[i];
    int w = snprintf(buf, cap, "add -gencode arch=compute_%d,code=sm_%d", dev, dev);
    if (w > 0 && (size_t)w < cap && last && last != &rel[n - 1])
        snprintf(buf + w, cap - (size_t)w, " (with the nvcc of CUDA %d.%d or older: newer ones dropped sm_%d)",
                 last->version / 1000, last->version % 1000 / 10, dev);
}

/* Judges one container [first, end) for the device and/or driver; returns whether it is served. */
static bool judge_container(kiln_lint_bin_report *r, size_t c, size_t first, size_t end,
                            const kiln_lint_image **chosen) {
    int dev = r->info.device_sm, cuda = r->info.cuda;
    char where[96], why[256], list[512] = "", name[64];
    size_t ln = 0;
    int need_cuda = 0, arch_ok = 0, loadable = 0;
    if (r->info.containers > 1)
        snprintf(where, sizeof where, "fatbin container %zu of %zu at offset 0x%zx", c + 1, r->info.containers,
                 first < end ? r->images[first].pub.offset : 0);
    else
        snprintf(where, sizeof where, "%s", r->info.format);
    for (size_t i = first; i < end; i++) {
        kiln_lint_image *im = &r->images[i].pub;
        bool on_dev = true, loads = true;
        int need = 0;
        char dwhy[256] = "";
        if (dev) on_dev = serves(&r->images[i], dev, dwhy, sizeof dwhy);
        if (cuda) loads = driver_loads(im, cuda, why, sizeof why, &need);
        if (dev) im->runs_on_device = on_dev && loads;
        if (cuda) im->cuda_loads = loads;
        arch_ok += dev && runs_on(im, dev, name, sizeof name);
        loadable += loads && (im->kind == KILN_IMAGE_CUBIN || im->kind == KILN_IMAGE_PTX);
        if (!loads && need > need_cuda) need_cuda = need;
        const char *reason = !on_dev ? dwhy : !loads ? why : NULL;
        if (reason && !im->note[0]) snprintf(im->note, sizeof im->note, "%s", reason);
        if (reason && ln + 1 < sizeof list)
            ln += (size_t)snprintf(list + ln, sizeof list - ln, "%s%s: %s", ln ? "; " : "",
                                   image_name(im, name, sizeof name), reason);
        if (cuda && !loads && (!dev || on_dev))
            add_finding(r, KILN_LINT_CUDA, 1, image_name(im, name, sizeof name), 0, im->ptx,
                        "a CUDA %d.%d driver refuses %s: %s", cuda / 1000, cuda % 1000 / 10, name, why);
    }
    if (ln >= sizeof list - 1) snprintf(list + sizeof list - 5, 5, "...");
    if (dev) {
        *chosen = pick(r, first, end, dev, cuda);
        if (*chosen) return true;
        char fix[256];
        if (!arch_ok) { /* what the CUDA runtime reports as cudaErrorNoKernelImageForDevice */
            gencode_fix(dev, fix, sizeof fix);
            add_finding(r, KILN_LINT_DEVICE, 0, where, dev, 0,
                        "no kernel image is available for execution on the device: sm_%d gets none of its images; fix: "
                        "%s (%s)",
                        dev, fix, first == end ? "it has no entries" : list);
        } else { /* an image is for this SM, but the driver or its JIT refuses it */
            if (need_cuda)
                snprintf(
                    fix, sizeof fix,
                    "update the driver to CUDA %d.%d or newer, or add a cubin: -gencode arch=compute_%d,code=sm_%d",
                    need_cuda / 1000, need_cuda % 1000 / 10, dev, dev);
            else
                snprintf(fix, sizeof fix, "fix the PTX, or add a cubin: -gencode arch=compute_%d,code=sm_%d", dev, dev);
            add_finding(r, KILN_LINT_DEVICE, 0, where, dev, 0,
                        "sm_%d%s can load none of its images (loading fails with %s); fix: %s (%s)", dev,
                        cuda ? " with this driver" : "",
                        need_cuda ? "CUDA_ERROR_UNSUPPORTED_PTX_VERSION, \"the provided PTX was compiled with an "
                                    "unsupported toolchain\""
                                  : "CUDA_ERROR_INVALID_PTX",
                        fix, list);
        }
        return false;
    }
    if (cuda && !loadable) {
        char fix[64] = "";
        if (need_cuda)
            snprintf(fix, sizeof fix, "; fix: update the driver to CUDA %d.%d or newer", need_cuda / 1000,
                     need_cuda % 1000 / 10);
        add_finding(r, KILN_LINT_CUDA, 0, where, 0, 0, "a CUDA %d.%d driver loads none of its images (%s)%s",
                    cuda / 1000, cuda % 1000 / 10, first == end ? "no entries" : list, fix);
        return false;
    }
    return true;
}

static void judge(kiln_lint_bin_report *r) {
    int dev = r->info.device_sm, cuda = r->info.cuda;
    if (!dev && !cuda) return;
    char name[64];
    if (dev && cuda) { /* the driver must know the GPU itself */
        const kiln_ptx_target *t = target_of(dev, 0);
        if (t && !kiln_cuda_knows_target(cuda, t)) {
            const kiln_cuda_release *f = first_release(t->ptx);
            int need = f ? f->version : 0;
            add_finding(
                r, KILN_LINT_DEVICE, 0, r->info.format, dev, 0,
                "a CUDA %d.%d driver does not support sm_%d devices at all (they came with CUDA %d.%d); fix: update "
                "the driver to CUDA %d.%d or newer",
                cuda / 1000, cuda % 1000 / 10, dev, need / 1000, need % 1000 / 10, need / 1000, need % 1000 / 10);
            r->info.runs_on_device = 0;
            snprintf(r->info.verdict, sizeof r->info.verdict,
                     "cannot run on sm_%d with a CUDA %d.%d driver: that driver does not support the device", dev,
                     cuda / 1000, cuda % 1000 / 10);
            return;
        }
    }
    size_t failed = 0, by_cubin = 0, by_ptx = 0, stubs = 0, first = 0;
    const kiln_lint_image *last_choice = NULL;
    for (size_t c = 0; c < r->info.containers; c++) {
        size_t end = first;
        while (end < r->count && r->images[end].pub.container == c) end++;
        const kiln_lint_image *chosen = NULL;
        bool codeless = end > first;
        for (size_t i = first; i < end; i++) codeless &= r->images[i].pub.functions == 0;
        if (codeless) { /* no kernel in it to launch: nothing asks the driver for an image */
            stubs++;
            for (size_t i = first; i < end; i++)
                snprintf(r->images[i].pub.note, sizeof r->images[i].pub.note,
                         "no code (a device-link stub): never loaded for a kernel, so not judged");
            first = end;
            continue;
        }
        if (!judge_container(r, c, first, end, &chosen)) failed++;
        if (chosen) {
            last_choice = chosen;
            chosen->kind == KILN_IMAGE_CUBIN ? by_cubin++ : by_ptx++;
        }
        first = end;
    }
    size_t nc = r->info.containers;
    char drv[48] = "";
    if (cuda) snprintf(drv, sizeof drv, " with a CUDA %d.%d driver", cuda / 1000, cuda % 1000 / 10);
    if (dev) {
        r->info.runs_on_device = failed == 0;
        if (nc == stubs)
            snprintf(r->info.verdict, sizeof r->info.verdict,
                     "has no code to run on sm_%d: no image holds a function (a device-link stub)", dev);
        else if (failed && nc - stubs == 1)
            snprintf(r->info.verdict, sizeof r->info.verdict,
                     "cannot run on sm_%d%s: no image it can load (see the error)", dev, drv);
        else if (failed)
            snprintf(r->info.verdict, sizeof r->info.verdict,
                     "cannot run on sm_%d%s: %zu of %zu fatbin containers have no image it can load (their kernels "
                     "fail to launch; see the errors)",
                     dev, drv, failed, nc);
        else if (nc - stubs == 1 && last_choice)
            snprintf(r->info.verdict, sizeof r->info.verdict, "runs on sm_%d%s: the driver %s %s%s", dev, drv,
                     last_choice->kind == KILN_IMAGE_CUBIN ? "loads" : "JIT-compiles",
                     image_name(last_choice, name, sizeof name),
                     last_choice->kind == KILN_IMAGE_CUBIN
                         ? ""
                         : " at load time (slower first start; a cubin for it avoids that)");
        else
            snprintf(r->info.verdict, sizeof r->info.verdict,
                     "runs on sm_%d%s: each of the %zu fatbin containers with code has an image for it (%zu by cubin, "
                     "%zu by JIT-compiling PTX)",
                     dev, drv, nc - stubs, by_cubin, by_ptx);
    }
    if (cuda) {
        size_t refused = 0;
        for (size_t i = 0; i < r->nfind; i++)
            refused += r->findings[i].kind == KILN_LINT_CUDA && !r->findings[i].warning;
        r->info.cuda_loads = refused == 0;
        if (!dev)
            snprintf(r->info.verdict, sizeof r->info.verdict, "%s a driver of CUDA %d.%d%s",
                     refused ? "does not load on" : "loads on", cuda / 1000, cuda % 1000 / 10,
                     refused ? ": some container has no image it accepts" : "");
    }
}

/* ---- API ---- */

static bool has_magic(const uint8_t *d, size_t len) {
    return d && len >= 4 && (rd32(d) == FATBIN_MAGIC || !memcmp(d, "\177ELF", 4));
}

int kiln_lint_is_binary(const void *data, size_t len) { /* a whole header too: shorter is just bytes */
    const uint8_t *d = data;
    return has_magic(d, len) && len >= (rd32(d) == FATBIN_MAGIC ? (size_t)FATBIN_HEADER : 64);
}

kiln_status kiln_lint_bin(const void *data, size_t len, int device_sm, int cuda, kiln_lint_bin_report **out,
                          kiln_error *err) {
    if (out) *out = NULL;
    if (!out || (!data && len)) return kiln_fail(err, KILN_EINVAL, "kiln_lint_bin: NULL argument");
    if (device_sm) {
        char name[16];
        kiln_status s = kiln_lint_parse_sm(gen_lint_sm_name(device_sm, false, name), &device_sm, err);
        if (s) return s;
    }
    if (cuda) {
        size_t n;
        const kiln_cuda_release *rel = kiln_cuda_releases(&n);
        bool known = false;
        for (size_t i = 0; i < n; i++) known |= rel[i].version == cuda;
        if (!known) {
            char text[16];
            snprintf(text, sizeof text, "%d", cuda);
            return kiln_cuda_parse_version(text, &cuda, err);
        }
    }
    if (!has_magic(data, len))
        return kiln_fail(err, KILN_EINVAL, "not a cubin, fatbin or ELF file (no ELF or fatbin magic at its start)");
    kiln_lint_bin_report *r = calloc(1, sizeof *r);
    if (!r) return kiln_fail(err, KILN_ENOMEM, "out of memory");
    r->info.device_sm = device_sm;
    r->info.cuda = cuda;
    kiln_status s = read_input(r, data, len, err);
    for (size_t i = 0; !s && i < r->count; i++) read_image(r, &r->images[i]);
    if (!s) judge(r);
    for (size_t i = 0; i < r->count; i++) r->images[i].bytes = NULL; /* the caller's buffer may go */
    for (size_t i = 0; i < r->nfind; i++)
        if (r->repeats[i] > 1) {
            size_t l = strlen(r->findings[i].instruction);
            snprintf(r->findings[i].instruction + l, sizeof r->findings[i].instruction - l, " (and %zu more like it)",
                     r->repeats[i] - 1);
        }
    if (!s && r->oom) s = kiln_fail(err, KILN_ENOMEM, "out of memory while linting the binary");
    if (s) {
        kiln_lint_bin_free(r);
        return s;
    }
    r->info.images = r->count;
    *out = r;
    return KILN_OK;
}

const kiln_lint_binary *kiln_lint_bin_info(const kiln_lint_bin_report *r) { return r ? &r->info : NULL; }
size_t kiln_lint_bin_count(const kiln_lint_bin_report *r) { return r ? r->count : 0; }

const kiln_lint_image *kiln_lint_bin_image(const kiln_lint_bin_report *r, size_t i) {
    return r && i < r->count ? &r->images[i].pub : NULL;
}

const kiln_lint_report *kiln_lint_bin_ptx(const kiln_lint_bin_report *r, size_t i) {
    return r && i < r->count ? r->images[i].lint : NULL;
}

size_t kiln_lint_bin_findings(const kiln_lint_bin_report *r) { return r ? r->nfind : 0; }

const kiln_lint_finding *kiln_lint_bin_finding(const kiln_lint_bin_report *r, size_t i) {
    return r && i < r->nfind ? &r->findings[i] : NULL;
}

void kiln_lint_bin_free(kiln_lint_bin_report *r) {
    if (!r) return;
    for (size_t i = 0; i < r->count; i++) kiln_lint_free(r->images[i].lint);
    free(r->images);
    free(r->findings);
    free(r->repeats);
    free(r);
}
