/* tests/attention_ptxas_test.c - every attention variant templates/attention.lua and
 * attention_combine.lua declare (K.variants: dtype x head_dim x causal, the SIMT path forced, an f32
 * output, split-KV decoding and its combine kernel, the window/softcap/alibi keys with both causal
 * alignments, head dims between the tile widths, sm_90a's path=wgmma rows; the quick suite a slice) assembles with ptxas for
 * its SM with 0 bytes of spills, lints clean, and holds no bf16 instruction below sm_80.
 * KILN_ATTN_TABLE=1 prints registers and shared memory per variant as a Markdown table. */
#include "matrix.h"

int main(void) {
    static const char *const families[] = {"attention", "attention_combine"};
    int sms[17], n = matrix_sms(sms);
    sms[n++] = KILN_SM_ARCH + 90; /* sm_90a: the rows that name it (path=wgmma) */
    return matrix_main("attention ptxas", families, 2, sms, n);
}
