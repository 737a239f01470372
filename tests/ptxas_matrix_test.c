/* tests/ptxas_matrix_test.c - the ptxas matrix (tests/matrix.h) over every LayerNorm variant:
 * 27 dtype combinations x 5 SMs x hidden sizes and the launch-time form, weight/bias off. */
#include "matrix.h"

static int sms[16], nsms; /* matrix_sms() */
static const char *dtypes[] = {"f32", "f16", "bf16"};
static const char *hiddens[] = {"1", "7", "33", "100", "768", "1000", "4096", "16384", "launch"};

/* Every LayerNorm variant the matrix covers. */
static int layernorm_variants(matrix_variant *v, int cap) {
    int n = 0;
    for (int s = 0; s < nsms; s++)
        for (int x = 0; x < 3; x++)
            for (int w = 0; w < 3; w++)
                for (int y = 0; y < 3; y++)
                    for (size_t h = 0; h < sizeof hiddens / sizeof *hiddens && n < cap; h++, n++) {
                        snprintf(v[n].spec, sizeof v[n].spec, "layernorm x=%s w=%s y=%s hidden=%s", dtypes[x],
                                 dtypes[w], dtypes[y], hiddens[h]);
                        v[n].sm = sms[s];
                    }
    /* weight/bias switched off, on the common dtype pairs */
    static const char *affine[] = {"weight=false", "bias=false", "weight=false bias=false"};
    static const char *pairs[] = {"x=bf16 w=f32 y=bf16", "x=f16", "x=f32"};
    static const char *sizes[] = {"7", "768", "launch"};
    for (int s = 0; s < nsms; s++)
        for (int a = 0; a < 3; a++)
            for (int p = 0; p < 3; p++)
                for (int h = 0; h < 3 && n < cap; h++, n++) {
                    snprintf(v[n].spec, sizeof v[n].spec, "layernorm %s hidden=%s %s", pairs[p], sizes[h], affine[a]);
                    v[n].sm = sms[s];
                }
    return n;
}

int main(void) {
    static matrix_variant vs[4096];
    nsms = matrix_sms(sms);
    int n = matrix_slice(vs, layernorm_variants(vs, 4096));
    kiln_error err = {0};
    kiln_gen *gen;
    if (kiln_gen_create(&gen, NULL, &err) != KILN_OK) {
        printf("cannot create generator: %s\nptxas matrix: 0 passed, 1 failed\n", err.msg);
        return 1;
    }
    int skipped = matrix_check(gen, vs, n);
    kiln_gen_destroy(gen);
    printf("ptxas matrix: %d passed, %d failed, %d skipped\n", check_passed, check_failed, skipped);
    return check_failed ? 1 : 0;
}
