/* templates/lib/attn_rotary.ref.c - the rotary embedding inside attention's append (rotary=neox|interleaved): the spec's keys, the drawn tables, the rotation of one row as the kernel defines it. */
#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "emu.h"
#include "kiln/emu.h"

/* The value of " key=" in a canonical spec (copied into out), or 0 when absent. */
static int spec_value(const char *spec, const char *key, char *out, size_t size) {
    char needle[48];
    snprintf(needle, sizeof needle, " %s=", key);
    const char *at = strstr(spec, needle);
    if (!at) return 0;
    at += strlen(needle);
    size_t n = strcspn(at, " ");
    if (n >= size) n = size - 1;
    memcpy(out, at, n), out[n] = 0;
    return 1;
}

int emu_rope_parse(const char *spec, int head_dim, kiln_dtype dtype, emu_rope *r) {
    char v[32];
    memset(r, 0, sizeof *r);
    if (!spec_value(spec, "rotary", v, sizeof v) || !strcmp(v, "none")) return 0;
    r->interleaved = !strcmp(v, "interleaved");
    r->rdim = spec_value(spec, "rotary_dim", v, sizeof v) ? atoi(v) : head_dim;
    r->cs = dtype;
    if (spec_value(spec, "rotary_cs", v, sizeof v)) kiln_dtype_parse(v, &r->cs);
    return 1;
}

kiln_status emu_rope_draw(emu_rope *r, int seqlen_ro, uint64_t *seed, kiln_error *err) {
    size_t n = (size_t)seqlen_ro * (size_t)(r->rdim / 2), es = kiln_dtype_size(r->cs);
    r->seqlen_ro = seqlen_ro;
    r->cos = malloc(n * es + 1), r->sin = malloc(n * es + 1);
    if (!r->cos || !r->sin) return kiln_fail(err, KILN_ENOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) { /* an angle per (position, pair), uniform in [0, 2 pi): a wrong position shows */
        uint64_t z = (*seed += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        double th = (double)((z ^ (z >> 31)) >> 11) * 0x1p-53 * 2 * M_PI;
        kiln_emu_value_set(r->cs, r->cos, i, cos(th));
        kiln_emu_value_set(r->cs, r->sin, i, sin(th));
    }
    return KILN_OK;
}

/* The rotation of one row (elements 0 .. rdim-1 of row, dtype t) at position pos, in place, with the
 * kernel's arithmetic (lib/rotary_math.lua): in f32, (x0, x1) -> (fma(x0, c, -(x1 s)), fma(x1, c, x0 s)),
 * each rounded once to t. The rotary family's float64 reference (templates/rotary.ref.c) holds this
 * arithmetic to float64 within one rounding; here it must be exact, as the appended cache is checked
 * bit for bit. A position outside the table is not rotated. */
void emu_rope_row(const emu_rope *r, kiln_dtype t, void *row, int pos) {
    if (pos < 0 || pos >= r->seqlen_ro) return;
    int half = r->rdim / 2;
    for (int i = 0; i < half; i++) {
        size_t i0 = r->interleaved ? (size_t)(2 * i) : (size_t)i, i1 = r->interleaved ? i0 + 1 : (size_t)(i + half);
        size_t at = (size_t)pos * (size_t)half + (size_t)i;
        float c = (float)kiln_emu_value_get(r->cs, r->cos, at), s = (float)kiln_emu_value_get(r->cs, r->sin, at);
        float x0 = (float)kiln_emu_value_get(t, row, i0), x1 = (float)kiln_emu_value_get(t, row, i1);
        float t1 = x1 * s, t0 = x0 * s;
        kiln_emu_value_set(t, row, i0, fmaf(x0, c, -t1));
        kiln_emu_value_set(t, row, i1, fmaf(x1, c, t0));
    }
}

void emu_rope_free(emu_rope *r) {
    free(r->cos), free(r->sin);
    r->cos = r->sin = NULL;
}
