/* tests/lint_bin_test.c - kiln lint on binaries: fatbin/cubin/ELF readers, who-runs-what rules, driver checks, bad
 * and truncated input, and nvcc-built fatbins, objects and libraries. */
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zstd.h>

#include "check.h"
#include "kiln/lint.h"

static int skipped;

/* ---- building binaries by hand ---- */

typedef struct buf {
    uint8_t *d;
    size_t n, cap;
} buf;

static void put(buf *b, const void *p, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->d = realloc(b->d, b->cap);
        if (!b->d) abort();
    }
    memcpy(b->d + b->n, p, n);
    b->n += n;
}
static void put_le(buf *b, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; i++) {
        uint8_t c = (uint8_t)(v >> (8 * i));
        put(b, &c, 1);
    }
}
static void set_le(uint8_t *p, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; i++) p[i] = (uint8_t)(v >> (8 * i));
}

typedef struct entry {
    int kind; /* 1 PTX, 2 cubin, 8 LTO IR */
    int sm;
    uint64_t flags; /* 0x100000 'a', 0x200000 'f', 0x8000 zstd, 0x2000 lz4 */
    int ptx;        /* .version times 10 */
    const void *payload;
    size_t len;
} entry;

/* Appends one fatbin container holding the entries (compressed with zstd where flags say so). */
static void put_container(buf *b, const entry *e, int n) {
    buf body = {0};
    for (int i = 0; i < n; i++) {
        const void *p = e[i].payload;
        size_t len = e[i].len, usize = 0, csize = 0;
        void *z = NULL;
        if (e[i].flags & 0x8000) {
            z = malloc(ZSTD_compressBound(len));
            csize = ZSTD_compress(z, ZSTD_compressBound(len), p, len, 3);
            usize = len, p = z, len = csize;
        } else if (e[i].flags & 0x2000) {
            csize = len, usize = len * 2;
        }
        size_t padded = (len + 7) & ~(size_t)7;
        uint8_t h[64] = {0};
        set_le(h + 0, (uint64_t)e[i].kind, 2);
        set_le(h + 2, 0x101, 2);
        set_le(h + 4, 64, 4);
        set_le(h + 8, padded, 8);
        set_le(h + 16, csize, 4);
        set_le(h + 24, (uint64_t)(e[i].kind == 1 ? e[i].ptx % 10 : 8), 2);
        set_le(h + 26, (uint64_t)(e[i].kind == 1 ? e[i].ptx / 10 : 1), 2);
        set_le(h + 28, (uint64_t)e[i].sm, 4);
        set_le(h + 40, e[i].flags | 0x11, 8);
        set_le(h + 56, usize, 8);
        put(&body, h, 64);
        put(&body, p, len);
        for (size_t k = len; k < padded; k++) put_le(&body, 0, 1);
        free(z);
    }
    put_le(b, 0xBA55ED50u, 4);
    put_le(b, 1, 2);
    put_le(b, 16, 2);
    put_le(b, body.n, 8);
    put(b, body.d, body.n);
    free(body.d);
}

/* A minimal 64-bit little-endian ELF: the given sections (name, bytes), a section-name table last. */
typedef struct sec {
    const char *name;
    const void *data;
    size_t len;
} sec;

static buf make_elf(int machine, int abi, uint32_t flags, const sec *s, int n) {
    buf b = {0}, names = {0};
    uint8_t h[64] = {0x7f, 'E', 'L', 'F', 2, 1, 1, 0x41, (uint8_t)abi};
    set_le(h + 0x10, 1, 2);
    set_le(h + 0x12, (uint64_t)machine, 2);
    set_le(h + 0x30, flags, 4);
    set_le(h + 0x34, 64, 2);
    set_le(h + 0x3a, 64, 2);
    set_le(h + 0x3c, (uint64_t)n + 2, 2);
    set_le(h + 0x3e, (uint64_t)n + 1, 2);
    put(&b, h, 64);
    size_t off[64], nameoff[64];
    put_le(&names, 0, 1);
    for (int i = 0; i < n; i++) {
        while (b.n % 8) put_le(&b, 0, 1);
        off[i] = b.n;
        put(&b, s[i].data, s[i].len);
        nameoff[i] = names.n;
        put(&names, s[i].name, strlen(s[i].name) + 1);
    }
    nameoff[n] = names.n;
    put(&names, ".shstrtab", 10);
    off[n] = b.n;
    put(&b, names.d, names.n);
    while (b.n % 8) put_le(&b, 0, 1);
    set_le(b.d + 0x28, b.n, 8);
    uint8_t sh[64] = {0};
    put(&b, sh, 64); /* section 0 */
    for (int i = 0; i <= n; i++) {
        memset(sh, 0, sizeof sh);
        set_le(sh, nameoff[i], 4);
        set_le(sh + 4, i == n ? 3 : 1, 4);
        set_le(sh + 0x18, off[i], 8);
        set_le(sh + 0x20, i == n ? names.n : s[i].len, 8);
        put(&b, sh, 64);
    }
    free(names.d);
    return b;
}

/* A cubin for sm (CUDA 12.8+ layout: EI_ABIVERSION 8, SM in e_flags bits 8-15) with a kernel, unless empty. */
static buf make_cubin(int sm, bool empty, const char *tkinfo) {
    static const uint8_t code[16] = {0};
    sec s[2] = {{".text._Z1kPf", code, sizeof code}, {".note.nv.tkinfo", tkinfo, tkinfo ? strlen(tkinfo) : 0}};
    int n = 0;
    sec use[2];
    if (!empty) use[n++] = s[0];
    if (tkinfo) use[n++] = s[1];
    return make_elf(190, 8, (uint32_t)(0x6000002 | sm << 8), use, n);
}

static const char ptx80[] = ".version 7.0\n.target sm_80\n.address_size 64\n.visible .entry k() { ret; }\n";

/* ---- running lint ---- */

static kiln_lint_bin_report *lint_bin(const buf *b, int dev, int cuda) {
    kiln_lint_bin_report *r = NULL;
    kiln_error err = {0};
    kiln_status s = kiln_lint_bin(b->d, b->n, dev, cuda, &r, &err);
    CHECK(s == KILN_OK, "kiln_lint_bin failed: %s", err.msg);
    return r;
}

static bool has_finding(const kiln_lint_bin_report *r, kiln_lint_kind kind, const char *text) {
    for (size_t i = 0; i < kiln_lint_bin_findings(r); i++) {
        const kiln_lint_finding *f = kiln_lint_bin_finding(r, i);
        if (f->kind == kind && (strstr(f->message, text) || strstr(f->instruction, text))) return true;
    }
    return false;
}

static void dump(const kiln_lint_bin_report *r) {
    for (size_t i = 0; r && i < kiln_lint_bin_findings(r); i++)
        printf("    finding: %s [%s]\n", kiln_lint_bin_finding(r, i)->message,
               kiln_lint_bin_finding(r, i)->instruction);
    if (r) printf("    verdict: %s\n", kiln_lint_bin_info(r)->verdict);
}

/* ---- the rules ---- */

static void test_rules(void) {
    static const struct {
        int kind, sm;
        uint64_t flags;
        int dev, runs;
    } rows[] = {
        {2, 80, 0, 80, 1},          {2, 80, 0, 86, 1},          {2, 80, 0, 89, 1},          {2, 86, 0, 80, 0},
        {2, 80, 0, 75, 0},          {2, 80, 0, 90, 0},          {2, 90, 0x100000, 90, 1},   {2, 100, 0x100000, 103, 0},
        {2, 100, 0x200000, 103, 1}, {2, 100, 0x200000, 120, 0}, {2, 120, 0, 121, 1},        {2, 121, 0, 120, 0},
        {1, 80, 0, 75, 0},          {1, 80, 0, 80, 1},          {1, 80, 0, 120, 1},         {1, 90, 0x100000, 90, 1},
        {1, 90, 0x100000, 100, 0},  {1, 100, 0x200000, 103, 1}, {1, 100, 0x200000, 110, 0}, {8, 90, 0, 90, 0},
    };
    TEST_BEGIN("rules: which image runs on which device");
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        char ptx[256];
        char target[16];
        snprintf(target, sizeof target, "sm_%d%s", rows[i].sm,
                 rows[i].flags & 0x100000   ? "a"
                 : rows[i].flags & 0x200000 ? "f"
                                            : "");
        snprintf(ptx, sizeof ptx, ".version 8.8\n.target %s\n.address_size 64\n.visible .entry k() { ret; }\n", target);
        buf cub = make_cubin(rows[i].sm, false, NULL);
        entry e = {rows[i].kind,
                   rows[i].sm,
                   rows[i].flags,
                   88,
                   rows[i].kind == 1 ? ptx : (const void *)cub.d,
                   rows[i].kind == 1 ? strlen(ptx) + 1 : cub.n};
        buf b = {0};
        put_container(&b, &e, 1);
        kiln_lint_bin_report *r = lint_bin(&b, rows[i].dev, 0);
        if (r) {
            CHECK(kiln_lint_bin_info(r)->runs_on_device == rows[i].runs,
                  "row %zu: kind %d %s on sm_%d: runs %d, want %d", i, rows[i].kind, target, rows[i].dev,
                  kiln_lint_bin_info(r)->runs_on_device, rows[i].runs);
            CHECK((rows[i].runs == 0) ==
                      has_finding(r, KILN_LINT_DEVICE, "no kernel image is available for execution on the device"),
                  "row %zu: the error goes with the verdict", i);
            if (!rows[i].runs) {
                char fix[96];
                snprintf(fix, sizeof fix, "-gencode arch=compute_%d,code=sm_%d", rows[i].dev, rows[i].dev);
                CHECK(has_finding(r, KILN_LINT_DEVICE, fix), "row %zu: the fix names %s", i, fix);
            }
        }
        kiln_lint_bin_free(r);
        free(b.d);
        free(cub.d);
    }
    TEST_END();

    TEST_BEGIN("rules: the driver's PTX ISA and SMs (the CUDA release table)");
    buf cub = make_cubin(120, false, NULL);
    char ptx90[] = ".version 9.0\n.target sm_90\n.address_size 64\n.visible .entry k() { ret; }\n";
    entry es[] = {{2, 80, 0, 0, NULL, 0}, {1, 90, 0, 90, ptx90, sizeof ptx90}};
    buf c80 = make_cubin(80, false, NULL);
    es[0].payload = c80.d, es[0].len = c80.n;
    buf b = {0};
    put_container(&b, es, 2);
    kiln_lint_bin_report *r = lint_bin(&b, 86, 12040); /* the cubin serves; the PTX is refused */
    CHECK(r && kiln_lint_bin_info(r)->runs_on_device, "sm_86 with CUDA 12.4 runs the sm_80 cubin");
    kiln_lint_bin_free(r);
    r = lint_bin(&b, 90, 12040); /* only the PTX would serve, and 12.4 refuses .version 9.0 */
    CHECK(r && !kiln_lint_bin_info(r)->runs_on_device, "sm_90 with CUDA 12.4 gets no image");
    CHECK(r && has_finding(r, KILN_LINT_DEVICE, "update the driver to CUDA 13.0 or newer"), "the fix is a 13.0 driver");
    CHECK(r && has_finding(r, KILN_LINT_CUDA, "CUDA_ERROR_UNSUPPORTED_PTX_VERSION"), "and the refusal is named");
    if (r && (kiln_lint_bin_info(r)->runs_on_device || !has_finding(r, KILN_LINT_DEVICE, "13.0"))) dump(r);
    kiln_lint_bin_free(r);
    r = lint_bin(&b, 90, 13000);
    CHECK(r && kiln_lint_bin_info(r)->runs_on_device, "sm_90 with CUDA 13.0 JIT-compiles the PTX");
    CHECK(r && strstr(kiln_lint_bin_info(r)->verdict, "JIT-compiles PTX compute_90"), "the verdict says JIT: %s",
          r ? kiln_lint_bin_info(r)->verdict : "");
    kiln_lint_bin_free(r);
    r = lint_bin(&b, 120, 12040);
    CHECK(r && !kiln_lint_bin_info(r)->runs_on_device && has_finding(r, KILN_LINT_DEVICE, "does not support sm_120"),
          "a CUDA 12.4 driver does not run an sm_120 device at all");
    kiln_lint_bin_free(r);
    r = lint_bin(&b, 0, 12040); /* no device: what the driver loads */
    CHECK(r && kiln_lint_bin_info(r)->cuda_loads, "CUDA 12.4 loads the sm_80 cubin");
    CHECK(r && has_finding(r, KILN_LINT_CUDA, ".version 9.0 needs a CUDA 13.0 driver"), "and warns about the PTX");
    kiln_lint_bin_free(r);
    free(b.d);
    b = (buf){0};
    entry e120 = {2, 120, 0, 0, cub.d, cub.n};
    put_container(&b, &e120, 1);
    r = lint_bin(&b, 0, 12040);
    CHECK(r && !kiln_lint_bin_info(r)->cuda_loads && has_finding(r, KILN_LINT_CUDA, "it came with CUDA 12.8"),
          "an sm_120 cubin needs a CUDA 12.8 driver");
    kiln_lint_bin_free(r);
    free(b.d);
    free(cub.d);
    free(c80.d);
    TEST_END();
}

/* ---- containers, compression, cubins ---- */

static void test_containers(void) {
    TEST_BEGIN("containers: each judged alone, repeats folded, stubs skipped, zero padding between");
    buf c80 = make_cubin(80, false, NULL), c90 = make_cubin(90, false, NULL), stub = make_cubin(75, true, NULL);
    buf b = {0};
    entry e90 = {2, 90, 0, 0, c90.d, c90.n}, e80 = {2, 80, 0, 0, c80.d, c80.n}, es = {2, 75, 0, 0, stub.d, stub.n};
    put_container(&b, &es, 1);
    for (int i = 0; i < 5; i++) {
        put_container(&b, &e90, 1);
        put_le(&b, 0, 8); /* the linker's alignment padding */
    }
    put_container(&b, &e80, 1);
    kiln_lint_bin_report *r = lint_bin(&b, 86, 0);
    CHECK(r && kiln_lint_bin_info(r)->containers == 7, "7 containers, got %zu",
          r ? kiln_lint_bin_info(r)->containers : 0);
    CHECK(r && !kiln_lint_bin_info(r)->runs_on_device, "five containers lack sm_86");
    CHECK(r && kiln_lint_bin_findings(r) == 1, "one finding for five identical containers, got %zu",
          kiln_lint_bin_findings(r));
    CHECK(r && has_finding(r, KILN_LINT_DEVICE, "(and 4 more like it)"), "it counts them");
    CHECK(r && strstr(kiln_lint_bin_info(r)->verdict, "5 of 7"), "verdict: %s",
          r ? kiln_lint_bin_info(r)->verdict : "");
    CHECK(r && kiln_lint_bin_image(r, 0)->functions == 0 && strstr(kiln_lint_bin_image(r, 0)->note, "not judged"),
          "the code-less stub is not judged");
    kiln_lint_bin_free(r);
    r = lint_bin(&b, 90, 0);
    CHECK(r && !kiln_lint_bin_info(r)->runs_on_device && kiln_lint_bin_findings(r) == 1,
          "the sm_80 container fails on sm_90");
    kiln_lint_bin_free(r);
    free(b.d);
    TEST_END();

    TEST_BEGIN("compression: zstd PTX is inflated and linted, bad zstd is a finding, LZ4 is listed unread");
    static const char bad[] =
        ".version 7.0\n.target sm_75\n.address_size 64\n.visible .entry k() {\n.reg .b16 %rs<2>;\n"
        ".reg .f32 %f<2>;\ncvt.rn.bf16.f32 %rs1, %f1;\nret;\n}\n";
    entry z[] = {{1, 75, 0x8000, 70, bad, sizeof bad}, {2, 80, 0x8000, 0, c80.d, c80.n}};
    b = (buf){0};
    put_container(&b, z, 2);
    r = lint_bin(&b, 0, 0);
    const kiln_lint_report *ptx = r ? kiln_lint_bin_ptx(r, 0) : NULL;
    CHECK(ptx && kiln_lint_count(ptx) == 1 && kiln_lint_get(ptx, 0)->line == 7,
          "the bf16 cvt on sm_75 is found on line 7");
    CHECK(r && kiln_lint_bin_image(r, 0)->findings == 1 && !strcmp(kiln_lint_bin_image(r, 0)->compression, "zstd"),
          "counted on the image");
    CHECK(r && kiln_lint_bin_image(r, 1)->functions == 1, "the compressed cubin is inflated: 1 function");
    kiln_lint_bin_free(r);
    /* corrupt the compressed PTX's frame */
    b.d[16 + 64 + 6] ^= 0xff;
    b.d[16 + 64 + 9] ^= 0xff;
    r = lint_bin(&b, 0, 0);
    CHECK(r && has_finding(r, KILN_LINT_TEXT, "does not inflate"), "a broken zstd frame is a finding");
    kiln_lint_bin_free(r);
    free(b.d);
    entry l = {1, 80, 0x2000, 80, ptx80, sizeof ptx80};
    b = (buf){0};
    put_container(&b, &l, 1);
    r = lint_bin(&b, 80, 0);
    CHECK(r && strstr(kiln_lint_bin_image(r, 0)->note, "LZ4") && kiln_lint_bin_image(r, 0)->ptx == 80,
          "LZ4 PTX: .version from the header, a note");
    CHECK(r && kiln_lint_bin_info(r)->runs_on_device, "and still judged from its header");
    kiln_lint_bin_free(r);
    free(b.d);
    TEST_END();

    TEST_BEGIN("cubins: e_flags of both ELF ABIs, 'a' from ptxas's note");
    b = make_cubin(86, false, NULL);
    r = lint_bin(&b, 0, 0);
    CHECK(r && !strcmp(kiln_lint_bin_info(r)->format, "cubin") && kiln_lint_bin_image(r, 0)->sm == 86,
          "V2 e_flags: sm_86");
    kiln_lint_bin_free(r);
    free(b.d);
    static const uint8_t code[16] = {0};
    sec t = {".text._Z1kPf", code, sizeof code};
    b = make_elf(190, 7, 0x500 | 75, &t, 1);
    r = lint_bin(&b, 0, 0);
    CHECK(r && kiln_lint_bin_image(r, 0)->sm == 75, "V1 e_flags: sm_75");
    kiln_lint_bin_free(r);
    free(b.d);
    b = make_cubin(90, false, "ptxas Cuda compilation tools -arch sm_90a -m 64 ");
    r = lint_bin(&b, 90, 0);
    CHECK(r && !strcmp(kiln_lint_bin_image(r, 0)->target, "sm_90a"), "the note says sm_90a: %s",
          r ? kiln_lint_bin_image(r, 0)->target : "");
    kiln_lint_bin_free(r);
    free(b.d);
    TEST_END();
    free(c80.d), free(c90.d), free(stub.d);
}

/* ---- bad input ---- */

static kiln_status lint_error(const buf *b, int dev, int cuda, char *msg, size_t cap) {
    kiln_lint_bin_report *r = NULL;
    kiln_error err = {0};
    kiln_status s = kiln_lint_bin(b->d, b->n, dev, cuda, &r, &err);
    kiln_lint_bin_free(r);
    snprintf(msg, cap, "%s", err.msg);
    return s;
}

static void test_bad_input(void) {
    char msg[1024];
    TEST_BEGIN("bad input: one clear error each");
    buf b = {0};
    put(&b, ptx80, sizeof ptx80);
    CHECK(lint_error(&b, 0, 0, msg, sizeof msg) == KILN_EINVAL && strstr(msg, "not a cubin, fatbin or ELF"), "PTX: %s",
          msg);
    CHECK(!kiln_lint_is_binary(b.d, b.n), "PTX is not binary");
    free(b.d);
    static const char data[] = "hello";
    sec s = {".data", data, sizeof data};
    b = make_elf(62, 0, 0, &s, 1);
    CHECK(lint_error(&b, 0, 0, msg, sizeof msg) == KILN_EINVAL && strstr(msg, ".nv_fatbin"),
          "host ELF without CUDA: %s", msg);
    b.d[4] = 1;
    CHECK(lint_error(&b, 0, 0, msg, sizeof msg) == KILN_EINVAL && strstr(msg, "32-bit"), "32-bit ELF: %s", msg);
    free(b.d);
    b = make_cubin(80, false, NULL);
    CHECK(lint_error(&b, 77, 0, msg, sizeof msg) == KILN_EINVAL && strstr(msg, "valid: "), "unknown device: %s", msg);
    CHECK(lint_error(&b, 0, 12345, msg, sizeof msg) == KILN_EINVAL && strstr(msg, "12.4"), "unknown release: %s", msg);
    set_le(b.d + 0x30, 0x6000002, 4); /* no SM */
    CHECK(lint_error(&b, 0, 0, msg, sizeof msg) == KILN_ECORRUPT && strstr(msg, "no SM"), "cubin without SM: %s", msg);
    free(b.d);
    TEST_END();

    TEST_BEGIN("truncated and corrupt: every prefix, declared sizes past the end");
    buf c80 = make_cubin(80, false, NULL);
    entry es[] = {{2, 80, 0, 0, c80.d, c80.n}, {1, 80, 0x8000, 80, ptx80, sizeof ptx80}};
    b = (buf){0};
    put_container(&b, es, 2);
    sec fs = {".nv_fatbin", b.d, b.n};
    buf host = make_elf(62, 0, 0, &fs, 1);
    int bad = 0, corrupt = 0;
    for (int which = 0; which < 2; which++) {
        const buf *in = which ? &host : &b;
        for (size_t n = 0; n < in->n; n++) {
            buf cut = {in->d, n, n};
            kiln_status st = lint_error(&cut, 86, 12080, msg, sizeof msg);
            bad += st != KILN_OK && st != KILN_ECORRUPT && st != KILN_EINVAL;
            corrupt += st == KILN_ECORRUPT;
        }
    }
    CHECK(bad == 0, "%d prefixes gave another status", bad);
    CHECK(corrupt > 0, "truncations are KILN_ECORRUPT");
    buf cut = {b.d, b.n - 8, b.n};
    CHECK(lint_error(&cut, 0, 0, msg, sizeof msg) == KILN_ECORRUPT && strstr(msg, "offset 0x0") &&
              strstr(msg, "truncated"),
          "a truncated container names its offset: %s", msg);
    set_le(b.d + 16 + 8, 1u << 30, 8); /* the first entry's payload size */
    CHECK(lint_error(&b, 0, 0, msg, sizeof msg) == KILN_ECORRUPT && strstr(msg, "offset 0x10"),
          "entry past its container: %s", msg);
    set_le(host.d + 0x28, 1u << 30, 8); /* section headers past the end */
    CHECK(lint_error(&host, 0, 0, msg, sizeof msg) == KILN_ECORRUPT && strstr(msg, "outside"), "section table: %s",
          msg);
    free(host.d), free(b.d), free(c80.d);
    TEST_END();
}

/* ---- nvcc-built binaries ---- */

static char dir[64];

static bool sh(const char *fmt, ...) {
    char cmd[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    int rc = system(cmd);
    if (rc != 0) printf("  command failed (%d): %s\n", rc, cmd);
    return rc == 0;
}

static buf slurp(const char *name) {
    char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    buf b = {0};
    FILE *f = fopen(path, "rb");
    uint8_t chunk[65536];
    size_t n;
    while (f && (n = fread(chunk, 1, sizeof chunk, f)) > 0) put(&b, chunk, n);
    if (f) fclose(f);
    return b;
}

/* The images of a file as "cubin sm_80, ptx sm_90 9.0, ..." */
static void images(const kiln_lint_bin_report *r, char *out, size_t cap) {
    size_t n = 0;
    out[0] = '\0';
    for (size_t i = 0; r && i < kiln_lint_bin_count(r); i++) {
        const kiln_lint_image *im = kiln_lint_bin_image(r, i);
        n += (size_t)snprintf(out + n, cap - n, "%s%s %s", i ? ", " : "",
                              im->kind == KILN_IMAGE_CUBIN ? "cubin"
                              : im->kind == KILN_IMAGE_PTX ? "ptx"
                                                           : "other",
                              im->target);
        if (im->kind == KILN_IMAGE_PTX) n += (size_t)snprintf(out + n, cap - n, " %d.%d", im->ptx / 10, im->ptx % 10);
        if (im->functions == 0) n += (size_t)snprintf(out + n, cap - n, " stub");
    }
}

static void expect_file(const char *name, int dev, int cuda, const char *want_images, int want_runs,
                        const char *want_text) {
    buf b = slurp(name);
    char got[512];
    kiln_lint_bin_report *r = lint_bin(&b, dev, cuda);
    images(r, got, sizeof got);
    CHECK(!strcmp(got, want_images), "%s: images '%s', want '%s'", name, got, want_images);
    if (dev)
        CHECK(r && kiln_lint_bin_info(r)->runs_on_device == want_runs, "%s on sm_%d: runs %d, want %d", name, dev,
              r ? kiln_lint_bin_info(r)->runs_on_device : -1, want_runs);
    if (want_text)
        CHECK(r && (has_finding(r, KILN_LINT_DEVICE, want_text) || has_finding(r, KILN_LINT_CUDA, want_text) ||
                    strstr(kiln_lint_bin_info(r)->verdict, want_text)),
              "%s on sm_%d: no '%s'", name, dev, want_text);
    for (size_t i = 0; r && i < kiln_lint_bin_count(r); i++)
        CHECK(!kiln_lint_bin_ptx(r, i) || kiln_lint_count(kiln_lint_bin_ptx(r, i)) == 0 || strstr(name, "bad"),
              "%s: nvcc's own PTX is lint-clean", name);
    if (check_case_failed) dump(r);
    kiln_lint_bin_free(r);
    free(b.d);
}

static void test_nvcc(void) {
    const char *home = getenv("CUDA_HOME") ? getenv("CUDA_HOME") : "/usr/local/cuda";
    char nvcc[512];
    snprintf(nvcc, sizeof nvcc, "%s/bin/nvcc", home);
    if (access(nvcc, X_OK) != 0) {
        printf("skip nvcc-built binaries: no %s (set CUDA_HOME)\n", nvcc);
        skipped += 6;
        return;
    }
    snprintf(dir, sizeof dir, "/tmp/kiln-lintbin-XXXXXX");
    if (!mkdtemp(dir)) return;
    const char *k = "tests/lint_bin_kernel.cu", *k2 = "tests/lint_bin_kernel2.cu";
    TEST_BEGIN("nvcc: building the inputs");
    CHECK(
        sh("%s -fatbin -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=compute_90 %s -o %s/a.fatbin",
           nvcc, k, dir) &&
            sh("%s -c -gencode arch=compute_75,code=sm_75 -gencode arch=compute_90a,code=sm_90a %s -o %s/b.o", nvcc, k,
               dir) &&
            sh("%s -c -rdc=true -gencode arch=compute_86,code=sm_86 %s -o %s/c.o", nvcc, k, dir) &&
            sh("%s -c -Xcompiler -fPIC -gencode arch=compute_80,code=[sm_80,compute_80] %s -o %s/d1.o && "
               "%s -c -Xcompiler -fPIC -gencode arch=compute_90,code=sm_90 %s -o %s/d2.o && "
               "%s -shared %s/d1.o %s/d2.o -o %s/libd.so",
               nvcc, k, dir, nvcc, k2, dir, nvcc, dir, dir, dir) &&
            sh("%s -cubin -gencode arch=compute_100a,code=sm_100a %s -o %s/e.cubin", nvcc, k, dir) &&
            sh("sed 's/^\\.target sm_80/.target sm_75/' tests/lint/bf16_cvt.sm80.ptx > %s/bad.ptx && "
               "%s/bin/fatbinary -64 --compress-all --create=%s/bad.fatbin --image3=kind=ptx,sm=75,file=%s/bad.ptx "
               "--image3=kind=elf,sm=100,file=%s/e.cubin",
               dir, home, dir, dir, dir),
        "nvcc or fatbinary failed");
    TEST_END();
    TEST_BEGIN("nvcc: a fatbin of an sm_80 cubin and compute_90 PTX");
    expect_file("a.fatbin", 86, 0, "cubin sm_80, ptx sm_90 9.0", 1, "loads cubin sm_80");
    expect_file("a.fatbin", 75, 0, "cubin sm_80, ptx sm_90 9.0", 0, "add -gencode arch=compute_75,code=sm_75");
    expect_file("a.fatbin", 120, 0, "cubin sm_80, ptx sm_90 9.0", 1, "JIT-compiles PTX compute_90");
    expect_file("a.fatbin", 90, 12080, "cubin sm_80, ptx sm_90 9.0", 0, "update the driver to CUDA 13.0 or newer");
    TEST_END();
    TEST_BEGIN("nvcc: objects (.nv_fatbin, -rdc's __nv_relfatbin)");
    expect_file("b.o", 90, 0, "cubin sm_75, cubin sm_90a", 1, "loads cubin sm_90a");
    expect_file("b.o", 100, 0, "cubin sm_75, cubin sm_90a", 0, "runs on sm_90 only");
    expect_file("c.o", 89, 0, "cubin sm_86", 1, NULL);
    expect_file("c.o", 80, 0, "cubin sm_86", 0, "runs on 8.6 and newer 8.x devices only");
    TEST_END();
    TEST_BEGIN("nvcc: a shared library of two translation units (and nvlink's stub)");
    expect_file("libd.so", 86, 0, "cubin sm_75 stub, cubin sm_80, ptx sm_80 9.0, cubin sm_90", 0,
                "runs on 9.x devices only");
    expect_file("libd.so", 90, 0, "cubin sm_75 stub, cubin sm_80, ptx sm_80 9.0, cubin sm_90", 1,
                "1 by cubin, 1 by JIT");
    TEST_END();
    TEST_BEGIN("nvcc: an sm_100a cubin");
    expect_file("e.cubin", 100, 12080, "cubin sm_100a", 1, NULL);
    expect_file("e.cubin", 103, 0, "cubin sm_100a", 0, "runs on sm_100 only");
    TEST_END();
    TEST_BEGIN("fatbinary --compress-all: broken PTX inside is linted");
    buf b = slurp("bad.fatbin");
    kiln_lint_bin_report *r = lint_bin(&b, 0, 0);
    const kiln_lint_report *ptx = NULL;
    for (size_t i = 0; r && i < kiln_lint_bin_count(r); i++)
        if (kiln_lint_bin_ptx(r, i)) ptx = kiln_lint_bin_ptx(r, i);
    CHECK(ptx && kiln_lint_count(ptx) == 2 && strstr(kiln_lint_get(ptx, 0)->message, "needs sm_80"),
          "the two bf16 conversions on sm_75");
    CHECK(r && kiln_lint_bin_count(r) == 2 && !strcmp(kiln_lint_bin_image(r, 1)->compression, "zstd") &&
              kiln_lint_bin_image(r, 1)->functions > 0,
          "the compressed cubin is inflated and has code");
    kiln_lint_bin_free(r);
    r = lint_bin(&b, 75, 0); /* the only sm_75 image is PTX the driver's ptxas would refuse */
    CHECK(r && !kiln_lint_bin_info(r)->runs_on_device && has_finding(r, KILN_LINT_DEVICE, "CUDA_ERROR_INVALID_PTX"),
          "PTX with lint errors does not count as runnable");
    if (check_case_failed) dump(r);
    kiln_lint_bin_free(r);
    free(b.d);
    TEST_END();
    sh("rm -rf %s", dir);
}

int main(void) {
    test_rules();
    test_containers();
    test_bad_input();
    test_nvcc();
    printf("lint_bin: %d passed, %d failed, %d skipped\n", check_passed, check_failed, skipped);
    return check_failed ? 1 : 0;
}
