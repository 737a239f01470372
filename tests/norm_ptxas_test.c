/* tests/norm_ptxas_test.c - the ptxas matrix (tests/matrix.h) over the variants the other norm
 * families' templates declare (K.variants): rmsnorm, layernorm_bwd, rmsnorm_bwd (dtypes x hidden
 * sizes, the residual form, offset=1, the backwards' explicit forms) and norm_reduce; for sm_75, 80,
 * 90, 100 and 120 (KILN_TEST_FULL=1: every SM and more hidden sizes). Each variant generates, lints
 * clean, has no bf16 instruction below sm_80 and assembles with 0 bytes of spills. */
#include "matrix.h"

int main(void) {
    static const int quick_sms[] = {75, 80, 90, 100, 120};
    static const char *const families[] = {"rmsnorm", "layernorm_bwd", "rmsnorm_bwd", "norm_reduce"};
    return matrix_main("norm ptxas matrix", families, 4, matrix_full() ? NULL : quick_sms, 5);
}
