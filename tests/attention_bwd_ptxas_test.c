/* tests/attention_bwd_ptxas_test.c - every attention backward kernel templates/attention_bwd.lua
 * declares (K.variants) assembles with ptxas for its SM with 0 bytes of spills, lints clean, and
 * holds no bf16 instruction below sm_80 (tests/matrix.h). Quick suite: SM x dtype x head_dim for the
 * causal dkdv, the causal dq but on sm_86, the deterministic dkdv on sm_80, prep and convert at the
 * edges (sm_75/90, head_dim 32/256), path=simt for f16/bf16 (dkdv on sm_80/90, dq on sm_80), the
 * window/softcap/alibi keys all on (dkdv everywhere; dq and the deterministic dkdv on sm_75/80/90), six variants with
 * one or two of those keys (sm_75/80/86/90), sm_90a's path=wgmma dkdv rows; KILN_TEST_FULL=1 runs every kernel on every
 * SM, dtype and head_dim, causal or not, and each key alone and each pair (f16 and bf16, both causal forms; the padded
 * head dims on sm_75/80). KILN_MATRIX_ONLY / KILN_MATRIX_LIST restrict a run (tests/matrix.h).
 * KILN_ATTN_TABLE=1 prints registers and shared memory per variant. */
#include "matrix.h"

int main(void) {
    static const char *const families[] = {"attention_bwd"};
    int sms[17], n = matrix_sms(sms);
    sms[n++] = KILN_SM_ARCH + 90; /* sm_90a: the rows that name it (path=wgmma) */
    return matrix_main("attention bwd ptxas", families, 1, sms, n);
}
