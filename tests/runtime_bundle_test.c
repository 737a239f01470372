/* tests/runtime_bundle_test.c - bundles: write, read, variant choice per SM, corruption, no generator. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "fake_cuda/fake_cuda.h"
#include "kiln/runtime.h"
#include "rt.h"
#include "rt_fixture.h"

static fake_cuda_api fake;

static void add_ptx(kiln_bundle_writer *w, const char *spec, int sm) {
    char ptx[8192], entry[64];
    snprintf(entry, sizeof entry, "k_sm%d", sm);
    kiln_kernel_meta m = fake_cuda_meta(spec, entry, sm);
    int n = fake_cuda_ptx(&m, sm, ptx, sizeof ptx);
    kiln_bundle_writer_add(w, &m, KILN_PAYLOAD_PTX, ptx, (size_t)n, NULL);
}

static void add_cubin(kiln_bundle_writer *w, const char *spec, int sm) {
    unsigned char cubin[1024];
    char entry[64];
    snprintf(entry, sizeof entry, "k_cubin%d", sm);
    kiln_kernel_meta m = fake_cuda_meta(spec, entry, sm);
    size_t n = fake_cuda_cubin(sm, entry, cubin, sizeof cubin);
    kiln_bundle_writer_add(w, &m, KILN_PAYLOAD_CUBIN, cubin, n, NULL);
}

#define SPEC_A "test dt=bf16 n=4"
#define SPEC_B "test dt=f16 n=4"

/* PTX for sm_75, 80, 90 and a cubin for sm_86 of SPEC_A; PTX for sm_80 of SPEC_B. */
static void make_bundle(void **data, size_t *size) {
    kiln_bundle_writer *w;
    kiln_bundle_writer_create(&w, "kiln test", NULL);
    add_ptx(w, SPEC_A, 75);
    add_ptx(w, SPEC_A, 80);
    add_cubin(w, SPEC_A, 86);
    add_ptx(w, SPEC_A, 90);
    add_ptx(w, SPEC_B, 80);
    kiln_error e;
    if (kiln_bundle_writer_finish(w, data, size, &e) != KILN_OK) printf("  finish: %s\n", e.msg);
    kiln_bundle_writer_destroy(w);
}

static void test_roundtrip(const void *data, size_t size) {
    TEST_BEGIN("bundle round trip");
    kiln_bundle *b = NULL;
    kiln_error e;
    CHECK(kiln_bundle_open_memory(data, size, &b, &e) == KILN_OK, "open: %s", e.msg);
    CHECK(kiln_bundle_count(b) == 5 && !strcmp(kiln_bundle_producer(b), "kiln test"), "count %d", kiln_bundle_count(b));
    kiln_bundle_entry en;
    CHECK(kiln_bundle_entry_at(b, 2, &en, &e) == KILN_OK && en.kind == KILN_PAYLOAD_CUBIN && en.sm == 86 &&
              !strcmp(en.spec, SPEC_A) && !strcmp(en.meta->entry, "k_cubin86") && en.offset % 64 == 0,
          "entry 2");
    CHECK(kiln_bundle_entry_at(b, 5, &en, &e) == KILN_EINVAL, "out of range");
    kiln_bundle_close(b);
    TEST_END();
}

/* Which payload a device of `sm` gets for spec. */
static void expect_choice(const void *data, size_t size, int sm, const char *spec, int want_sm, int want_cubin) {
    kiln_rt *rt = open_rt(sm);
    kiln_error e;
    kiln_kernel *k = NULL;
    CHECK(rt && kiln_rt_add_bundle_memory(rt, data, size, &e) == KILN_OK, "add: %s", e.msg);
    kiln_status st = rt ? kiln_rt_get_kernel(rt, spec, &k, &e) : KILN_EINVAL;
    if (want_sm == 0) {
        CHECK(st == KILN_ENOTFOUND, "sm_%d should find nothing", sm);
        CHECK(strstr(e.msg, "no generator is linked") && strstr(e.msg, "sm_90 ptx") && strstr(e.msg, "sm_86 cubin"),
              "message lists the bundle: %s", e.msg);
    } else {
        CHECK(st == KILN_OK && k && kiln_kernel_get_meta(k)->sm == want_sm &&
                  kiln_kernel_payload_kind(k) == (want_cubin ? KILN_PAYLOAD_CUBIN : KILN_PAYLOAD_PTX) &&
                  !strcmp(kiln_kernel_origin(k), "bundle"),
              "sm_%d device: got sm_%d (%s)", sm, k ? kiln_kernel_get_meta(k)->sm : -1, st ? e.msg : "");
    }
    kiln_rt_destroy(rt);
}

static void test_selection(const void *data, size_t size) {
    TEST_BEGIN("variant selection per SM");
    expect_choice(data, size, 75, SPEC_A, 75, 0);
    expect_choice(data, size, 80, SPEC_A, 80, 0);
    expect_choice(data, size, 86, SPEC_A, 86, 1); /* the cubin for the exact SM wins */
    expect_choice(data, size, 87, SPEC_A, 80, 0); /* a cubin runs only on its own SM */
    expect_choice(data, size, 89, SPEC_A, 80, 0);
    expect_choice(data, size, 90, SPEC_A, 90, 0);
    expect_choice(data, size, 120, SPEC_A, 90, 0);
    expect_choice(data, size, 70, SPEC_A, 0, 0);
    expect_choice(data, size, 75, SPEC_B, 0, 0);
    expect_choice(data, size, 86, "test  n=4   dt=f16", 80, 0); /* keys in any order */
    TEST_END();
}

/* sm_90a (KILN_SM_ARCH + 90) PTX beside sm_90 PTX: a 9.0 device takes sm_90a, every other device passes
 * it by (its wgmma runs on 9.0 only), and a bundle of sm_90a alone serves nothing but 9.0. */
static void test_arch_selection(void) {
    TEST_BEGIN("sm_90a PTX: chosen on 9.0 devices only");
    const int arch = KILN_SM_ARCH + 90;
    for (int only_arch = 0; only_arch < 2; only_arch++) {
        kiln_bundle_writer *w;
        kiln_bundle_writer_create(&w, "kiln test", NULL);
        add_ptx(w, SPEC_A, 80);
        if (!only_arch) add_ptx(w, SPEC_A, 90);
        add_ptx(w, SPEC_A, arch);
        void *data = NULL;
        size_t size = 0;
        kiln_error e;
        CHECK(kiln_bundle_writer_finish(w, &data, &size, &e) == KILN_OK, "finish: %s", e.msg);
        kiln_bundle_writer_destroy(w);
        expect_choice(data, size, 90, SPEC_A, arch, 0);
        expect_choice(data, size, 89, SPEC_A, 80, 0);
        expect_choice(data, size, 100, SPEC_A, only_arch ? 80 : 90, 0);
        expect_choice(data, size, 120, SPEC_A, only_arch ? 80 : 90, 0);
        free(data);
    }
    /* a bundle of sm_90a alone serves a 10.0 device nothing, and says what it holds by name */
    kiln_bundle_writer *w;
    kiln_bundle_writer_create(&w, "kiln test", NULL);
    add_ptx(w, SPEC_A, arch);
    void *data = NULL;
    size_t size = 0;
    kiln_error e;
    kiln_bundle_writer_finish(w, &data, &size, &e);
    kiln_bundle_writer_destroy(w);
    kiln_rt *rt = open_rt(100);
    kiln_kernel *k = NULL;
    CHECK(rt && kiln_rt_add_bundle_memory(rt, data, size, &e) == KILN_OK, "add: %s", e.msg);
    CHECK(rt && kiln_rt_get_kernel(rt, SPEC_A, &k, &e) == KILN_ENOTFOUND && strstr(e.msg, "(sm_90a ptx)"), "%s", e.msg);
    kiln_rt_destroy(rt);
    free(data);
    TEST_END();
}

static void test_not_found(const void *data, size_t size) {
    TEST_BEGIN("spec in no bundle, no generator linked");
    kiln_rt *rt = open_rt(80);
    kiln_kernel *k;
    kiln_error e;
    CHECK(kiln_rt_get_kernel(rt, "test dt=f32 n=4", &k, &e) == KILN_ENOTFOUND && strstr(e.msg, "no bundle is loaded"),
          "%s", e.msg);
    kiln_rt_add_bundle_memory(rt, data, size, &e);
    CHECK(kiln_rt_get_kernel(rt, "test dt=f32 n=4", &k, &e) == KILN_ENOTFOUND && strstr(e.msg, "'" SPEC_A "'") &&
              strstr(e.msg, "'" SPEC_B "' (sm_80 ptx)"),
          "lists the family: %s", e.msg);
    CHECK(kiln_rt_get_kernel(rt, "other x=1", &k, &e) == KILN_ENOTFOUND && strstr(e.msg, "hold nothing for 'other'"),
          "%s", e.msg);
    CHECK(kiln_rt_get_kernel(rt, "test n", &k, &e) == KILN_EINVAL && strstr(e.msg, "not key=value"), "%s", e.msg);
    CHECK(kiln_rt_get_kernel(rt, "test n=1 n=2", &k, &e) == KILN_EINVAL && strstr(e.msg, "twice"), "%s", e.msg);
    CHECK(kiln_rt_get_kernel(rt, "  ", &k, &e) == KILN_EINVAL, "%s", e.msg);
    /* a second request is answered from memory */
    kiln_kernel *k1 = NULL, *k2 = NULL;
    kiln_rt_stats s;
    kiln_rt_get_kernel(rt, SPEC_A, &k1, &e);
    kiln_rt_get_kernel(rt, "test n=4 dt=bf16", &k2, &e);
    kiln_rt_get_stats(rt, &s);
    CHECK(k1 && k1 == k2 && s.bundle_hits == 1 && s.memory_hits == 1, "hits %llu/%llu",
          (unsigned long long)s.bundle_hits, (unsigned long long)s.memory_hits);
    kiln_rt_destroy(rt);
    TEST_END();
}

static void test_corrupt(const unsigned char *data, size_t size) {
    TEST_BEGIN("corrupted, truncated and foreign bundles");
    kiln_bundle *b = NULL;
    kiln_error e;
    unsigned char *copy = malloc(size);
    int bad_accepted = 0, truncated_accepted = 0;
    for (size_t cut = 0; cut < size; cut += cut < 200 ? 1 : 97) {
        if (kiln_bundle_open_memory(data, cut, &b, &e) != KILN_ECORRUPT) truncated_accepted++;
        kiln_bundle_close(b);
    }
    CHECK(truncated_accepted == 0, "%d truncations accepted", truncated_accepted);
    CHECK(kiln_bundle_open_memory(data, size - 10, &b, &e) == KILN_ECORRUPT && strstr(e.msg, "truncated"), "%s", e.msg);
    /* every flipped byte is caught, or it hit padding and the entries are unchanged */
    for (size_t i = 0; i < size; i += 7) {
        memcpy(copy, data, size);
        copy[i] ^= 0x5a;
        kiln_status st = kiln_bundle_open_memory(copy, size, &b, &e);
        if (st == KILN_OK) {
            kiln_bundle *orig;
            kiln_bundle_open_memory(data, size, &orig, NULL);
            for (int k = 0; k < kiln_bundle_count(b); k++) {
                kiln_bundle_entry x, y;
                kiln_bundle_entry_at(b, k, &x, NULL);
                kiln_bundle_entry_at(orig, k, &y, NULL);
                if (x.size != y.size || memcmp(x.payload, y.payload, x.size) || strcmp(x.spec, y.spec)) bad_accepted++;
            }
            kiln_bundle_close(orig);
        } else if (st != KILN_ECORRUPT) {
            bad_accepted++;
        }
        kiln_bundle_close(b);
    }
    CHECK(bad_accepted == 0, "%d corruptions accepted", bad_accepted);
    memcpy(copy, data, size);
    copy[size - 100] ^= 1; /* inside the last payload */
    CHECK(kiln_bundle_open_memory(copy, size, &b, &e) == KILN_ECORRUPT && strstr(e.msg, "checksum"), "%s", e.msg);
    memcpy(copy, data, size);
    copy[8] = 9; /* format version */
    CHECK(kiln_bundle_open_memory(copy, size, &b, &e) == KILN_ECORRUPT && strstr(e.msg, "version 9"), "%s", e.msg);
    const char foreign[] = "\x89PNG\r\n\x1a\n this is not a kiln bundle at all, just some bytes; padding padding padding";
    CHECK(kiln_bundle_open_memory(foreign, sizeof foreign, &b, &e) == KILN_ECORRUPT && strstr(e.msg, "bad magic"),
          "%s", e.msg);
    CHECK(kiln_bundle_open_file("/nonexistent.kbundle", &b, &e) == KILN_ENOTFOUND && strstr(e.msg, "/nonexistent"),
          "%s", e.msg);
    /* A header whose checksum is right but whose entry count its table of contents cannot hold (a fuzzer
     * forges the checksum from the comparison): refused before anything is sized by that count. */
    uint64_t toc_size = 0;
    for (int k = 0; k < 8; k++) toc_size |= (uint64_t)data[24 + k] << (8 * k);
    const uint32_t forged[] = {(uint32_t)((toc_size - 4) / 56 + 1), 1000000, 0x7fffffffu, 0xffffffffu};
    for (int f = 0; f < 4; f++) {
        memcpy(copy, data, size);
        for (int k = 0; k < 4; k++) copy[12 + k] = (unsigned char)(forged[f] >> (8 * k));
        uint8_t h[16];
        rt_hash128(copy, 56, h);
        memcpy(copy + 56, h, 8);
        CHECK(kiln_bundle_open_memory(copy, size, &b, &e) == KILN_ECORRUPT && strstr(e.msg, "holds at most"),
              "count %u: %s", forged[f], e.msg);
    }
    kiln_rt *rt = open_rt(80);
    memcpy(copy, data, size);
    copy[size / 2] ^= 0xff;
    CHECK(kiln_rt_add_bundle_memory(rt, copy, size, &e) == KILN_ECORRUPT, "the runtime refuses it too");
    kiln_rt_destroy(rt);
    free(copy);
    TEST_END();
}

static void test_file(const void *data, size_t size) {
    TEST_BEGIN("bundle from a file");
    char path[] = "/tmp/kiln_bundle_test_XXXXXX";
    int fd = mkstemp(path);
    FILE *f = fdopen(fd, "wb");
    fwrite(data, 1, size, f);
    fclose(f);
    kiln_rt *rt = open_rt(89);
    kiln_error e;
    kiln_kernel *k = NULL;
    CHECK(kiln_rt_add_bundle_file(rt, path, &e) == KILN_OK, "%s", e.msg);
    CHECK(kiln_rt_get_kernel(rt, SPEC_B, &k, &e) == KILN_OK && kiln_kernel_get_meta(k)->sm == 80, "%s", e.msg);
    kiln_rt_destroy(rt);
    unlink(path);
    TEST_END();
}

int main(void) {
    void *data = NULL;
    size_t size = 0;
    if (fake_cuda_open(&fake) != 0) {
        printf("runtime_bundle: 0 passed, 1 failed\n");
        return 1;
    }
    kiln_rt_register_generator(NULL);
    make_bundle(&data, &size);
    test_roundtrip(data, size);
    test_selection(data, size);
    test_arch_selection();
    test_not_found(data, size);
    test_corrupt(data, size);
    test_file(data, size);
    free(data);
    return check_summary("runtime_bundle");
}
