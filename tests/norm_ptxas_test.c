/* tests/norm_ptxas_test.c - the ptxas matrix (tests/matrix.h) over the norm families: rmsnorm,
 * layernorm_bwd, rmsnorm_bwd (dtypes f32, f16, bf16 and bf16 with f32 weights; hidden 1, 768,
 * 4096, 16384 and launch; the residual form; the backwards' explicit forms at 4096 and 12288),
 * layernorm residual=true, offset=1 (zero-centered weights: every norm family, bf16 and bf16 with f32
 * weights, plain and residual), and norm_reduce; for sm_75, 80 and 90 (KILN_TEST_FULL=1: every SM and
 * more hidden sizes). Each variant generates, lints clean, has no bf16 instruction below sm_80 and
 * assembles with 0 bytes of spills. */
#include "matrix.h"

int main(void) {
    static matrix_variant vs[8192];
    const char *fe = getenv("KILN_TEST_FULL");
    int full = fe && *fe == '1', n = 0;
    static const int quick_sms[] = {75, 80, 90, 100, 120};
    int all_sms[16], nall = matrix_sms(all_sms);
    const int *sms = full ? all_sms : quick_sms;
    int nsms = full ? nall : 5;
    static const char *const families[] = {"rmsnorm", "layernorm_bwd", "rmsnorm_bwd", "layernorm"};
    static const char *const dts[] = {"x=f32", "x=f16", "x=bf16", "x=bf16 w=f32"};
    static const char *const quick_h[] = {"1", "768", "4096", "16384", "launch"};
    static const char *const full_h[] = {"1", "7", "33", "100", "768", "1000", "2048", "4096", "8192", "16384", "launch"};
    const char *const *hs = full ? full_h : quick_h;
    int nh = full ? 11 : 5;
    for (int s = 0; s < nsms; s++) {
        for (int f = 0; f < 4; f++)
            for (int d = 0; d < 4; d++)
                for (int h = 0; h < nh; h++)
                    for (int res = f == 3 ? 1 : 0; res < 2; res++) {
                        if (res && d != 2 && d != 3 && !full) continue; /* residual form: bf16 rows (all dtypes in full) */
                        snprintf(vs[n].spec, sizeof vs[n].spec, "%s %s hidden=%s%s", families[f], dts[d], hs[h],
                                 res ? " residual=true r=f32" : "");
                        vs[n++].sm = sms[s];
                    }
        /* every backward form (templates/lib/norm.lua form=) where it generates: bf16 LayerNorm */
        static const char *const forms[][2] = {{"4096", "fixed"}, {"4096", "reg8"}, {"4096", "reg16"},
                                               {"4096", "smem8"}, {"12288", "reg32"}, {"12288", "reg16"}};
        for (int f = 0; f < 6; f++) {
            snprintf(vs[n].spec, sizeof vs[n].spec, "layernorm_bwd x=bf16 hidden=%s form=%s", forms[f][0], forms[f][1]);
            vs[n++].sm = sms[s];
        }
        /* offset=1: the weight becomes 1 + w in f32 in every form (fixed, reload, looping) */
        static const char *const off_h[] = {"1", "768", "4096", "16384", "launch"};
        for (int f = 0; f < 4; f++)
            for (int d = 2; d < 4; d++)
                for (int h = 0; h < 5; h++) {
                    snprintf(vs[n].spec, sizeof vs[n].spec, "%s %s hidden=%s offset=1%s", families[f], dts[d], off_h[h],
                             h == 3 && d == 2 ? " residual=true r=f32" : "");
                    vs[n++].sm = sms[s];
                }
        static const char *const wd[] = {"f32", "f16", "bf16"};
        for (int w = 0; w < 3; w++) {
            snprintf(vs[n].spec, sizeof vs[n].spec, "norm_reduce w=%s", wd[w]);
            vs[n++].sm = sms[s];
        }
    }
    kiln_error err = {0};
    kiln_gen *gen;
    if (kiln_gen_create(&gen, NULL, &err) != KILN_OK) {
        printf("cannot create generator: %s\nnorm ptxas matrix: 0 passed, 1 failed\n", err.msg);
        return 1;
    }
    n = matrix_slice(vs, n);
    int skipped = matrix_check(gen, vs, n);
    kiln_gen_destroy(gen);
    printf("norm ptxas matrix: %d passed, %d failed, %d skipped\n", check_passed, check_failed, skipped);
    return check_failed ? 1 : 0;
}
