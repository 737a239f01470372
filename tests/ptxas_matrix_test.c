/* tests/ptxas_matrix_test.c - the ptxas matrix (tests/matrix.h) over every LayerNorm forward variant
 * templates/layernorm.lua declares (K.variants): the 27 dtype combinations x hidden sizes and the
 * launch-time form, weight/bias off, the residual and offset=1 forms; on every SM from sm_75. */
#include "matrix.h"

int main(void) {
    static const char *const families[] = {"layernorm"};
    return matrix_main("ptxas matrix", families, 1, NULL, 0);
}
