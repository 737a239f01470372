/* tests/gpukit_compare_test.c - the GPU kit's case files and output comparison (ulps, emulator diffs, poison). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "kiln/emu.h"
/* the kit's sources are not in a library: compiled into this test as they are into the kit */
#include "../bench/gpu/kit_case.c"

#define CK(cond) CHECK(cond, "%s", "the condition above")

static void test_ulp(void) {
    TEST_BEGIN("ulp spacing and error rules");
    CK(kit_ulp(KILN_F32, 1.0) == ldexp(1, -23));
    CK(kit_ulp(KILN_F32, 1.5) == ldexp(1, -23));
    CK(kit_ulp(KILN_F32, 2.0) == ldexp(1, -22));
    CK(kit_ulp(KILN_F16, 1.0) == ldexp(1, -10));
    CK(kit_ulp(KILN_BF16, 1.0) == ldexp(1, -7));
    CK(kit_ulp(KILN_BF16, 0.75) == ldexp(1, -8));
    CK(kit_ulp(KILN_F16, 0.0) == ldexp(1, -24)); /* f16 subnormal spacing */
    CK(kit_ulp(KILN_F32, 1e-40) == ldexp(1, -149));
    /* errors: half an ulp, at the scale floor, NaN and Inf rules */
    CK(kit_error_ulps(KILN_BF16, 1.0 + ldexp(1, -8), 1.0, 0) == 0.5);
    CK(kit_error_ulps(KILN_F32, 1e-3 + ldexp(1, -23), 1e-3, 1.0) == 1.0);
    CK(kit_error_ulps(KILN_F32, NAN, NAN, 1) == 0);
    CK(isinf(kit_error_ulps(KILN_F32, NAN, 1.0, 1)));
    CK(isinf(kit_error_ulps(KILN_F32, 1.0, NAN, 1)));
    CK(kit_error_ulps(KILN_F32, INFINITY, INFINITY, 1) == 0);
    CK(isinf(kit_error_ulps(KILN_F32, -INFINITY, INFINITY, 1)));
    CK(isinf(kit_error_ulps(KILN_F32, INFINITY, 1e30, 1)));
    TEST_END();
}

/* kit_value agrees with the emulator's exact conversions for every 16-bit pattern. */
static void test_values(void) {
    TEST_BEGIN("16-bit values decode exactly");
    long bad = 0;
    for (uint32_t u = 0; u < 65536; u++) {
        uint16_t h = (uint16_t)u;
        for (int t = KILN_F16; t <= KILN_BF16; t++) {
            double a = kit_value((kiln_dtype)t, &h, 0), b = kiln_emu_value_get((kiln_dtype)t, &h, 0);
            if (!(a == b || (isnan(a) && isnan(b)))) bad++;
        }
    }
    CK(bad == 0);
    float f[3] = {1.5f, -0.0f, 3e-42f};
    for (int i = 0; i < 3; i++) CK(kit_value(KILN_F32, f, (size_t)i) == (double)f[i]);
    TEST_END();
}

static kit_case make_case(size_t n) {
    kit_case c;
    memset(&c, 0, sizeof c);
    snprintf(c.name, sizeof c.name, "unit");
    snprintf(c.family, sizeof c.family, "layernorm");
    snprintf(c.spec, sizeof c.spec, "layernorm x=bf16 w=bf16 y=bf16 hidden=8 weight=true bias=true");
    c.emu_sm = 75;
    c.problem[0] = 3, c.problem[1] = c.problem[2] = 1;
    c.nscalars = 2;
    snprintf(c.scalars[0].name, KIT_NAME, "rows"), c.scalars[0].kind = KILN_PARAM_I32, c.scalars[0].value = 3;
    snprintf(c.scalars[1].name, KIT_NAME, "eps"), c.scalars[1].kind = KILN_PARAM_F32, c.scalars[1].value = 1e-5;
    c.ntensors = 2;
    kit_tensor *x = &c.tensors[0], *y = &c.tensors[1];
    snprintf(x->name, KIT_NAME, "x"), x->dtype = KILN_BF16, x->role = KIT_IN, x->count = n;
    snprintf(y->name, KIT_NAME, "y"), y->dtype = KILN_BF16, y->role = KIT_OUT, y->count = n;
    y->tol_ulps = 2, y->scale = 1;
    x->data = malloc(n * 2), y->data = malloc(n * 2), y->ref = malloc(n * sizeof(double));
    for (size_t i = 0; i < n; i++) {
        double v = (double)i / 7 - 1;
        kiln_emu_value_set(KILN_BF16, x->data, i, v * 3);
        kiln_emu_value_set(KILN_BF16, y->data, i, v);
        y->ref[i] = v;
    }
    return c;
}

static void test_compare(void) {
    TEST_BEGIN("compare: emulator output passes, planted errors and poison fail");
    kit_case c = make_case(24);
    const kit_tensor *y = &c.tensors[1];
    kit_compare r;
    /* the emulator's own output passes and differs from itself nowhere */
    kit_compare_output(y, y->data, &r);
    CK(r.bad == 0 && r.diff_emu == 0 && r.max_ulps <= 0.5 && r.emu_ulps == r.max_ulps);
    /* one element a few ulps off: counted as different from the emulator, and bad beyond tol */
    uint16_t *got = malloc(24 * 2);
    memcpy(got, y->data, 24 * 2);
    got[5] += 1;
    kit_compare_output(y, got, &r);
    CK(r.bad == 0 && r.diff_emu == 1);
    got[9] += 64; /* 64 ulps of bf16 at 0.29 = 16 ulps at the scale floor 1.0 */
    kit_compare_output(y, got, &r);
    CK(r.bad == 1 && r.diff_emu == 2 && r.worst == 9);
    /* poison (0xff bytes: NaN), as an unwritten output: every element bad */
    memset(got, 0xff, 24 * 2);
    kit_compare_output(y, got, &r);
    CK(r.bad == 24 && r.diff_emu == 24 && isinf(r.max_ulps));
    free(got);
    kit_case_free(&c);
    TEST_END();
}

static void test_file(void) {
    TEST_BEGIN("case files round-trip; truncated, extended and foreign files are refused");
    char dir[] = "/tmp/kiln_kit_test_XXXXXX", path[256], err[512];
    CK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/a.kcase", dir);
    kit_case c = make_case(10), d;
    CK(kit_case_write(&c, path, err, sizeof err) == 0);
    CK(kit_case_read(&d, path, err, sizeof err) == 0);
    CK(!strcmp(d.spec, c.spec) && !strcmp(d.family, "layernorm") && d.emu_sm == 75 && d.problem[0] == 3);
    CK(d.nscalars == 2 && kit_case_scalar(&d, "eps") && fabs(kit_case_scalar(&d, "eps")->value - 1e-5) < 1e-12);
    CK(kit_case_scalar(&d, "eps")->kind == KILN_PARAM_F32);
    const kit_tensor *y = kit_case_tensor(&d, "y");
    CK(y && y->role == KIT_OUT && y->count == 10 && y->tol_ulps == 2);
    CK(y && !memcmp(y->data, c.tensors[1].data, 20) && !memcmp(y->ref, c.tensors[1].ref, 80));
    CK(kit_case_tensor(&d, "x") && kit_case_tensor(&d, "x")->role == KIT_IN && !kit_case_tensor(&d, "z"));
    kit_case_free(&d);
    /* an i32 input (a paged cache's block table) round-trips; an i32 output is refused */
    kit_tensor *bt = &c.tensors[c.ntensors++];
    snprintf(bt->name, KIT_NAME, "block_table"), bt->dtype = KILN_I32, bt->role = KIT_IN, bt->count = 3;
    int32_t table[3] = {7, -1, 2};
    bt->data = malloc(sizeof table), memcpy(bt->data, table, sizeof table);
    CK(kit_case_write(&c, path, err, sizeof err) == 0 && kit_case_read(&d, path, err, sizeof err) == 0);
    CK(kit_case_tensor(&d, "block_table") && kit_case_tensor(&d, "block_table")->dtype == KILN_I32 &&
       !memcmp(kit_case_tensor(&d, "block_table")->data, table, sizeof table));
    kit_case_free(&d);
    bt->role = KIT_OUT, bt->ref = calloc(3, sizeof(double));
    CK(kit_case_write(&c, path, err, sizeof err) == 0);
    CK(kit_case_read(&d, path, err, sizeof err) != 0 && strstr(err, "bad tensor line 'tensor block_table i32 out"));
    c.ntensors--, free(bt->data), free(bt->ref), bt->data = NULL, bt->ref = NULL;
    CK(kit_case_write(&c, path, err, sizeof err) == 0);
    char **paths;
    CK(kit_case_list(dir, &paths) == 1);
    free(paths[0]), free(paths);
    /* a truncated file, a file with extra bytes, a foreign file: each one clear error */
    FILE *f = fopen(path, "r+b");
    CK(f && fseek(f, 0, SEEK_END) == 0);
    long size = ftell(f);
    fclose(f);
    CK(truncate(path, size - 3) == 0);
    CK(kit_case_read(&d, path, err, sizeof err) != 0 && strstr(err, "truncated"));
    CK(kit_case_write(&c, path, err, sizeof err) == 0);
    f = fopen(path, "ab");
    fputc('x', f);
    fclose(f);
    CK(kit_case_read(&d, path, err, sizeof err) != 0 && strstr(err, "trailing"));
    f = fopen(path, "wb");
    fputs("hello\n", f);
    fclose(f);
    CK(kit_case_read(&d, path, err, sizeof err) != 0 && strstr(err, "not a kit case file"));
    remove(path);
    rmdir(dir);
    kit_case_free(&c);
    TEST_END();
}

int main(void) {
    test_ulp();
    test_values();
    test_compare();
    test_file();
    return check_summary("gpukit_compare");
}
