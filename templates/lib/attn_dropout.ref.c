/* templates/lib/attn_dropout.ref.c - attention dropout's keep mask for the float64 references: Philox 4x32-10 as templates/lib/attn_dropout.lua draws it. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu.h"
#include "attention.ref.h"
#include "kiln/emu_case.h"

/* Philox 4x32-10 (Salmon et al., SC 2011; Random123's philox4x32 with 10 rounds): the multipliers and
 * the Weyl key increments are the published constants. */
void emu_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
    uint32_t x0 = ctr[0], x1 = ctr[1], x2 = ctr[2], x3 = ctr[3], k0 = key[0], k1 = key[1];
    for (int r = 0; r < 10; r++) {
        uint64_t p0 = (uint64_t)0xD2511F53u * x0, p1 = (uint64_t)0xCD9E8D57u * x2;
        uint32_t y0 = (uint32_t)(p1 >> 32) ^ x1 ^ k0, y1 = (uint32_t)p1, y2 = (uint32_t)(p0 >> 32) ^ x3 ^ k1,
                 y3 = (uint32_t)p0;
        x0 = y0, x1 = y1, x2 = y2, x3 = y3;
        k0 += 0x9E3779B9u, k1 += 0xBB67AE85u;
    }
    out[0] = x0, out[1] = x1, out[2] = x2, out[3] = x3;
}

/* p clamped to [0, 1 - 2^-24] as the kernels clamp it. */
static float rate(const kiln_attn_problem *p) {
    float r = p->dropout_p > 0 ? p->dropout_p : 0.0f;
    return r < 1.0f - 0x1p-24f ? r : 1.0f - 0x1p-24f;
}

int emu_attn_dropout_keep(const kiln_attn_problem *p, int b, int h, int i, int j) {
    if (!p->dropout) return 1;
    uint32_t key[2] = {(uint32_t)p->dropout_seed, (uint32_t)(p->dropout_seed >> 32)};
    uint32_t ctr[4] = {(uint32_t)j >> 1, (((uint32_t)i >> 4) << 3) | ((uint32_t)i & 7),
                       (uint32_t)(b + p->dropout_batch) * (uint32_t)p->heads_q + (uint32_t)h + (uint32_t)(p->dropout_offset >> 32),
                       (uint32_t)p->dropout_offset};
    uint32_t w[4];
    emu_philox4x32_10(ctr, key, w);
    int32_t thr = (int32_t)(rate(p) * 2147483648.0f); /* floor(p 2^31), exact in f32 as in the kernels */
    return (int32_t)(w[((i >> 3) & 1) * 2 + (j & 1)] >> 1) >= thr;
}

double emu_attn_dropout_factor(const kiln_attn_problem *p, int b, int h, int i, int j) {
    if (!p->dropout) return 1;
    return emu_attn_dropout_keep(p, b, h, i, j) ? 1.0 / (1.0 - (double)rate(p)) : 0;
}

/* ---- dropout_mask=true: the kernel's keep mask against the regenerated one ---- */

int32_t *emu_attn_mask_alloc(const kiln_attn_problem *p) {
    return malloc((size_t)p->batch * (size_t)p->heads_q * (size_t)p->seq_q * (size_t)p->seq_k * sizeof(int32_t));
}

void emu_attn_mask_prepare(const kiln_attn_problem *p, int32_t *mask) {
    memset(mask, 0xff, (size_t)p->batch * (size_t)p->heads_q * (size_t)p->seq_q * (size_t)p->seq_k * sizeof *mask);
}

/* Every pair a query sees must hold its keep bit (1 kept, 0 dropped); a pair it does not see may be
 * unwritten (-1) or hold the bit of the visited tile it lies in, never anything else. */
void emu_attn_mask_check(const kiln_attn_problem *p, const int32_t *mask, kiln_case_output *o) {
    memset(o, 0, sizeof *o);
    snprintf(o->name, sizeof o->name, "dropout_mask");
    size_t at = 0;
    for (int b = 0; b < p->batch; b++)
        for (int h = 0; h < p->heads_q; h++)
            for (int i = 0; i < p->seq_q; i++)
                for (int j = 0; j < p->seq_k; j++, at++) {
                    int want = emu_attn_dropout_keep(p, b, h, i, j), got = mask[at];
                    if (!emu_attn_visible(p, i, j) && got == -1) continue;
                    kiln_check_value(o, got, want, 0, want, got == -1, "dropout_mask[b=%d h=%d i=%d j=%d]", b, h, i, j);
                }
}
