/* emu/emu_half.c - f16/bf16 rounding (nearest even), element access, libgcc helpers for the JIT. */
#include <math.h>
#include <string.h>

#include "emu.h"

static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}
static float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Rounds |d| (finite, >= 0) to a binary format with mant stored mantissa bits and
 * exponent bias bias, to nearest even; returns the magnitude bits (may be the Inf bits). */
static uint32_t round_magnitude(double d, int mant, int bias) {
    if (d == 0) return 0;
    int e;
    double m = frexp(d, &e); /* d = m * 2^e, 0.5 <= m < 1 */
    int exp = e - 1 + bias;  /* biased exponent of the leading bit */
    /* significant bits kept: mant + 1 for normals, fewer for subnormals (possibly none) */
    int keep = exp >= 1 ? mant + 1 : mant + exp;
    double scaled = ldexp(m, keep);           /* the kept bits as an integer part */
    double q = nearbyint(scaled);             /* default rounding mode: to nearest even */
    uint32_t bits = (uint32_t)q;
    if (exp < 1) return bits;                 /* subnormal (or rounded up into the smallest normal) */
    uint32_t frac = bits - (1u << mant);      /* may carry into the exponent: that is right */
    return ((uint32_t)exp << mant) + frac;
}

static uint16_t from_double(double d, int mant, int expbits) {
    int bias = (1 << (expbits - 1)) - 1;
    uint16_t sign = signbit(d) ? (uint16_t)(1u << (mant + expbits)) : 0;
    uint32_t inf = ((1u << expbits) - 1) << mant;
    if (isnan(d)) return (uint16_t)(sign | inf | (1u << (mant - 1)));
    if (isinf(d)) return (uint16_t)(sign | inf);
    uint32_t m = round_magnitude(fabs(d), mant, bias);
    return (uint16_t)(sign | (m > inf ? inf : m));
}

static double to_double(uint16_t h, int mant, int expbits) {
    int bias = (1 << (expbits - 1)) - 1;
    uint32_t e = (h >> mant) & ((1u << expbits) - 1), f = h & ((1u << mant) - 1);
    double s = (h >> (mant + expbits)) & 1 ? -1.0 : 1.0;
    if (e == (1u << expbits) - 1) return f ? s * NAN : s * INFINITY;
    if (e == 0) return s * ldexp((double)f, 1 - bias - mant);
    return s * ldexp((double)(f | (1u << mant)), (int)e - bias - mant);
}

uint16_t emu_f64_to_f16(double d) { return from_double(d, 10, 5); }
uint16_t emu_f64_to_bf16(double d) { return from_double(d, 7, 8); }

/* The f32 <-> f16 conversions the JIT's kernels call for every half value (extend_hf_sf, trunc_sf_hf
 * below, cvt, the mma operands) on the bits: the same results as to_double and from_double (equal on all
 * 2^32 f32 and 2^16 f16 patterns; tests/emu_mech_test.c checks a sweep), without their frexp/ldexp.
 * A normal f16's exponent is rebiased into f32's (15 -> 127), a subnormal's significand is f * 2^-24
 * (exact in f32); Inf and NaN keep to_double's path. */
float emu_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, f = h & 0x3ffu;
    if (e == 0x1f) return (float)to_double(h, 10, 5);
    if (e == 0) return sign ? -((float)f * 0x1p-24f) : (float)f * 0x1p-24f;
    return bits_f32(sign | ((e + 112) << 23) | (f << 13));
}
float emu_bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

/* f32 -> f16, nearest even: f32's 23 fraction bits cut to 10 with the 13 below deciding the rounding (a
 * carry runs into the exponent, as it must); from 65520 up (halfway past f16's largest 65504, which is odd)
 * Inf; below 2^-14 the subnormal's integer |f| * 2^24 rounded. NaN and Inf go through from_double. */
uint16_t emu_f32_to_f16(float f) {
    uint32_t u = f32_bits(f), a = u & 0x7fffffffu;
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    if (a >= 0x7f800000u) return emu_f64_to_f16((double)f);
    if (a >= 0x477ff000u) return sign | 0x7c00u;
    if (a < 0x38800000u) return sign | (uint16_t)nearbyintf(bits_f32(a) * 0x1p24f);
    uint32_t h = (((a >> 23) - 112) << 10) | ((a >> 13) & 0x3ffu), rest = a & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1))) h++;
    return sign | (uint16_t)h;
}

uint16_t emu_f32_to_bf16(float f) {
    uint32_t u = f32_bits(f);
    if (isnan(f)) return (uint16_t)((u >> 16) | 0x40); /* stays NaN, quiet */
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}

double kiln_emu_value_get(kiln_dtype t, const void *base, size_t i) {
    if (t == KILN_F32) {
        float f;
        memcpy(&f, (const char *)base + i * 4, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, (const char *)base + i * 2, 2);
    return t == KILN_F16 ? ((h & 0x7c00u) == 0x7c00u ? to_double(h, 10, 5) : (double)emu_f16_to_f32(h))
                         : (double)emu_bf16_to_f32(h);
}

double emu_ulp_of(kiln_dtype t, double a) {
    static const int mant[KILN_DTYPE_COUNT] = {23, 10, 7}, emin[KILN_DTYPE_COUNT] = {-126, -14, -126};
    int e = a > 0 && isfinite(a) ? ilogb(a) : emin[t];
    if (e < emin[t]) e = emin[t];
    return ldexp(1.0, e - mant[t]);
}

bool emu_poisoned(kiln_dtype t, const void *base, size_t i) {
    if (t == KILN_F32) {
        uint32_t u;
        memcpy(&u, (const char *)base + i * 4, 4);
        return u == 0xffffffffu;
    }
    uint16_t h;
    memcpy(&h, (const char *)base + i * 2, 2);
    return h == 0xffff;
}

void kiln_emu_value_set(kiln_dtype t, void *base, size_t i, double v) {
    if (t == KILN_F32) {
        float f = (float)v;
        memcpy((char *)base + i * 4, &f, 4);
        return;
    }
    uint16_t h = t == KILN_F16 ? emu_f64_to_f16(v) : emu_f64_to_bf16(v);
    memcpy((char *)base + i * 2, &h, 2);
}

/* ---- helpers LLVM's host code generator calls for half and bfloat ----
 * x86-64 passes and returns _Float16 and __bf16 in the low 16 bits of an XMM register, so
 * a _Float16 carries either. GCC 12's libgcc lacks the bfloat ones. */
#if defined(__x86_64__) && defined(__FLT16_MAX__)
typedef _Float16 emu_h16;
static emu_h16 h16(uint16_t bits) {
    emu_h16 h;
    memcpy(&h, &bits, sizeof h);
    return h;
}
static uint16_t h16_bits(emu_h16 h) {
    uint16_t u;
    memcpy(&u, &h, sizeof u);
    return u;
}
static emu_h16 trunc_sf_hf(float f) { return h16(emu_f32_to_f16(f)); }
static emu_h16 trunc_df_hf(double d) { return h16(emu_f64_to_f16(d)); }
static float extend_hf_sf(emu_h16 h) { return emu_f16_to_f32(h16_bits(h)); }
static emu_h16 trunc_sf_bf(float f) { return h16(emu_f32_to_bf16(f)); }
static emu_h16 trunc_df_bf(double d) { return h16(emu_f64_to_bf16(d)); }
static float extend_bf_sf(emu_h16 h) { return emu_bf16_to_f32(h16_bits(h)); }

static const emu_symbol symbols[] = {
    {"__truncsfhf2", (void *)trunc_sf_hf}, {"__truncdfhf2", (void *)trunc_df_hf},
    {"__extendhfsf2", (void *)extend_hf_sf}, {"__gnu_h2f_ieee", (void *)extend_hf_sf},
    {"__gnu_f2h_ieee", (void *)trunc_sf_hf}, {"__truncsfbf2", (void *)trunc_sf_bf},
    {"__truncdfbf2", (void *)trunc_df_bf}, {"__extendbfsf2", (void *)extend_bf_sf},
};
const emu_symbol *emu_half_symbols(unsigned *count) {
    *count = sizeof symbols / sizeof symbols[0];
    return symbols;
}
#else
const emu_symbol *emu_half_symbols(unsigned *count) {
    *count = 0;
    return NULL;
}
#endif
