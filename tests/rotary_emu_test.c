/* tests/rotary_emu_test.c - the rotary family on the emulator against float64, and its global bytes against the minimum.
 *
 * Correctness, through the family registry's case runner (kiln/emu_case.h, reference
 * templates/rotary.ref.c): GPT-NeoX halves and GPT-J pairs; rotary_dim = head_dim and < head_dim
 * (24 of 96, 40 of 80, 200 of 256, 2 of 8); [batch, seq, heads, d] and varlen (lengths max, 0,
 * 1, drawn); per-sequence offsets and the scalar offset alone (positions -1 and past the table are
 * not rotated); in place and out of place (the pass-through dims copied bit for bit); forward and
 * conjugate (the backward); x in f32/f16/bf16 with cos/sin in any dtype; random, special (NaN,
 * +-Inf, +-0, subnormals, max/4) and mixed inputs; heads 1, 9 and 17 (a partial last group of 8);
 * on sm_75 (bf16 without a bf16 instruction), 80, 90 and 120; --twice (every block twice, threads
 * reversed) on some.
 * Strides, through the generic launch (kiln_launch_bind, the template's K.launch): x and out with a
 * padded head stride give the contiguous run's bits, and in place the padding stays untouched.
 *
 * Bytes (the emulator's profile, docs/profile.md): the bytes stored must be exactly the minimum
 * (out, or in place only the rotated dims), and the bytes loaded at most 1.15x the minimum (x's
 * read part once, each token's cos/sin row once) on the shape a model sees (bf16, d128, 32 heads).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kiln/emu_case.h"
#include "kiln/emu_profile.h"
#include "kiln/kiln.h"
#include "kiln/runtime.h"

static kiln_gen *gen;
static kiln_emu *emu;

typedef struct row {
    const char *spec;
    int sm, seq, batch, heads, offsets, conjugate, twice;
    kiln_ln_input input;
} row;

/* Runs one case; returns its worst error over tolerance (-1 when it could not run). */
static double run(const row *r) {
    char name[512];
    snprintf(name, sizeof name, "%s sm_%d seq %d batch %d heads %d offsets %d conjugate %d input %s%s", r->spec, r->sm,
             r->seq, r->batch, r->heads, r->offsets, r->conjugate, kiln_ln_input_name(r->input), r->twice ? " twice" : "");
    TEST_BEGIN(name);
    kiln_case_opts o = {.sm = r->sm, .seed = 7, .input = r->input, .twice = r->twice};
    kiln_case_opts_set(&o, "rows", r->seq);
    kiln_case_opts_set(&o, "batch", r->batch);
    kiln_case_opts_set(&o, "heads_q", r->heads);
    kiln_case_opts_set(&o, "offsets", r->offsets);
    kiln_case_opts_set(&o, "conjugate", r->conjugate);
    kiln_case *c = NULL;
    kiln_error err = {0};
    double worst = -1;
    if (kiln_case_create(&c, gen, emu, r->spec, &o, &err) != KILN_OK || kiln_case_run(c, &err) != KILN_OK) {
        CHECK(0, "%s", err.msg);
    } else {
        long bad = kiln_case_check(c);
        const kiln_case_output *out = kiln_case_output_at(c, 0);
        CHECK(bad == 0, "%ld bad values; first: %s", bad, out->first);
        worst = out->worst;
    }
    kiln_case_free(c);
    TEST_END();
    return worst;
}

static void correctness(void) {
    static const char *specs[] = {
        "rotary dtype=bf16 head_dim=128",
        "rotary dtype=bf16 head_dim=128 interleaved=true",
        "rotary dtype=f16 head_dim=96 rotary_dim=24",
        "rotary dtype=f16 head_dim=64 rotary_dim=32 interleaved=true",
        "rotary dtype=f32 head_dim=256 rotary_dim=200 interleaved=true",
        "rotary dtype=f32 head_dim=8 rotary_dim=2",
        "rotary dtype=bf16 cs=f32 head_dim=80 rotary_dim=40",
        "rotary dtype=f16 cs=bf16 head_dim=128 interleaved=true",
        "rotary dtype=f32 cs=f16 head_dim=64",
    };
    static const char *modes[] = {"", " varlen=true", " inplace=true", " varlen=true inplace=true"};
    static const int sms[] = {75, 80, 90, 120};
    static const kiln_ln_input inputs[] = {KILN_LN_RANDOM, KILN_LN_SPECIAL, KILN_LN_MIXED};
    static const int heads[] = {1, 9, 17};
    int k = 0;
    for (size_t s = 0; s < sizeof specs / sizeof specs[0]; s++)
        for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++, k++) {
            char spec[256];
            snprintf(spec, sizeof spec, "%s%s", specs[s], modes[m]);
            /* every (spec, mode) once forward and once conjugate, the other choices rotating */
            for (int conj = 0; conj < 2; conj++) {
                row r = {spec, sms[(k + conj) % 4], 19 + 4 * conj, 5, heads[(k + conj) % 3], (k + conj) % 3 != 2, conj,
                         (k + conj) % 5 == 0, inputs[(k + 2 * conj) % 3]};
                run(&r);
            }
        }
}

/* The profile's global bytes for one run of spec against the minimum a rotary launch moves. */
static void bytes(const char *spec, int inplace, size_t es, size_t cs_es, int head_dim, int rdim) {
    char name[300];
    snprintf(name, sizeof name, "bytes: %s sm_90 seq 256 heads 32", spec);
    TEST_BEGIN(name);
    const int seq = 256, heads = 32;
    kiln_case_opts o = {.sm = 90, .seed = 3};
    kiln_case_opts_set(&o, "rows", seq);
    kiln_case_opts_set(&o, "batch", 1);
    kiln_case_opts_set(&o, "heads_q", heads);
    kiln_case_opts_set(&o, "offsets", 0); /* positions 1..256, the table stops at 254: two tokens past it */
    kiln_case *c = NULL;
    kiln_error err = {0};
    kiln_emu_set_profile(emu, 1);
    if (kiln_case_create(&c, gen, emu, spec, &o, &err) != KILN_OK || kiln_case_run(c, &err) != KILN_OK) {
        CHECK(0, "%s", err.msg);
    } else {
        CHECK(kiln_case_check(c) == 0, "outputs differ from float64");
        kiln_emu_profile p;
        CHECK(kiln_emu_profile_get(kiln_case_kernel(c), &p, &err) == KILN_OK, "%s", err.msg);
        size_t moved = (size_t)seq * heads * (size_t)(inplace ? rdim : head_dim) * es;
        size_t min_ld = moved + (size_t)(seq - 2) * (size_t)rdim * cs_es;
        double ratio = (double)p.global_ld_bytes / (double)min_ld;
        CHECK(p.global_st_bytes == moved, "stored %llu B, the minimum is %zu", (unsigned long long)p.global_st_bytes, moved);
        CHECK(ratio <= 1.15, "loaded %llu B, %.3fx the minimum %zu B", (unsigned long long)p.global_ld_bytes, ratio, min_ld);
        if (getenv("KILN_TEST_VERBOSE"))
            printf("  %s: loaded %llu B (%.3fx the minimum %zu), stored %llu B (the minimum)\n", spec,
                   (unsigned long long)p.global_ld_bytes, ratio, min_ld, (unsigned long long)p.global_st_bytes);
    }
    kiln_case_free(c);
    kiln_emu_set_profile(emu, 0);
    TEST_END();
}

/* Binds by name through the generic launch (kiln_launch_bind, strides given or not) and runs on the emulator. */
static int run_bound(kiln_emu_kernel *k, const kiln_launch_args *a, const size_t *bytes) {
    const kiln_kernel_meta *m = kiln_emu_kernel_meta(k);
    kiln_launch_step step;
    size_t ws = 0;
    kiln_error err = {0};
    if (kiln_launch_bind(&m, 1, 0, a, 0, &step, &ws, &err) != KILN_OK) {
        CHECK(0, "bind: %s", err.msg);
        return -1;
    }
    void *argv[KILN_MAX_PARAMS];
    size_t arg_bytes[KILN_MAX_PARAMS] = {0};
    kiln_emu_launch l = {.grid = {step.grid[0], step.grid[1], step.grid[2]}, .block = {m->block[0], m->block[1], m->block[2]},
                         .arg_bytes = arg_bytes};
    for (int i = 0; i < m->nparams; i++) {
        argv[i] = &step.args[i];
        if (m->params[i].kind != KILN_PARAM_PTR) continue;
        if (!step.args[i].ptr) l.nullable |= 1u << i;
        for (int t = 0; t < a->ntensors; t++)
            if (!strcmp(a->tensors[t].name, m->params[i].name)) arg_bytes[i] = bytes[t];
    }
    if (kiln_emu_run(k, &l, argv, &err) != KILN_OK) {
        CHECK(0, "run: %s", err.msg);
        return -1;
    }
    return 0;
}

/* x and out with a padded head stride (q and k inside a packed qkv: head stride head_dim + 24) must
 * give the bits of the contiguous run (checked against float64 above), and leave the padding alone. */
static void strided(const char *spec, int head_dim, int rdim, int inplace) {
    char name[300];
    snprintf(name, sizeof name, "%s sm_80: a padded head stride through the generic launch", spec);
    TEST_BEGIN(name);
    enum { B = 2, S = 9, H = 5, RO = 12, PAD = 24 };
    const int d = head_dim, ld = d + PAD;
    const size_t nc = (size_t)B * S * H * d, np = (size_t)B * S * H * ld, ncs = (size_t)RO * (rdim / 2);
    kiln_emu_kernel *k = NULL;
    kiln_error err = {0};
    /* aligned_alloc wants a size that is a multiple of the alignment */
#define ALLOC64(n) aligned_alloc(64, ((n) * 2 + 63) / 64 * 64)
    uint16_t *xc = ALLOC64(nc), *xp = ALLOC64(np), *oc = ALLOC64(nc), *op = ALLOC64(np), *cs = ALLOC64(ncs), *sn = ALLOC64(ncs);
#undef ALLOC64
    CHECK(kiln_emu_load(emu, gen, spec, 80, &k, &err) == KILN_OK, "%s", err.msg);
    if (k && xc && xp && oc && op && cs && sn) {
        memset(xp, 0x5a, np * 2), memset(op, 0x5a, np * 2), memset(oc, 0xff, nc * 2);
        uint64_t seed = 11;
        for (size_t i = 0; i < nc; i++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            double v = (double)(int)(seed >> 40 & 0xffff) / 8192.0 - 4.0;
            kiln_emu_value_set(KILN_BF16, xc, i, v);
            xp[i / (size_t)d * (size_t)ld + i % (size_t)d] = xc[i];
        }
        for (size_t i = 0; i < ncs; i++) {
            double th = (double)(i / (size_t)(rdim / 2)) * pow(10000.0, -2.0 * (double)(i % (size_t)(rdim / 2)) / rdim);
            kiln_emu_value_set(KILN_BF16, cs, i, cos(th)), kiln_emu_value_set(KILN_BF16, sn, i, sin(th));
        }
        kiln_launch_scalar sc[] = {{"batch", B}, {"seq", S}, {"heads", H}, {"seqlen_ro", RO}, {"offset", 2}};
        kiln_launch_tensor tc[] = {{.name = "x", .ptr = (uintptr_t)xc}, {.name = "cos", .ptr = (uintptr_t)cs},
                                   {.name = "sin", .ptr = (uintptr_t)sn}, {.name = "out", .ptr = (uintptr_t)oc}};
        kiln_launch_tensor tp[] = {{.name = "x", .ptr = (uintptr_t)xp, .strides = {(int64_t)S * H * ld, (int64_t)H * ld, ld, 1}},
                                   {.name = "cos", .ptr = (uintptr_t)cs}, {.name = "sin", .ptr = (uintptr_t)sn},
                                   {.name = "out", .ptr = (uintptr_t)op, .strides = {(int64_t)S * H * ld, (int64_t)H * ld, ld, 1}}};
        size_t bc[] = {nc * 2, ncs * 2, ncs * 2, nc * 2}, bp[] = {np * 2, ncs * 2, ncs * 2, np * 2};
        kiln_launch_args ac = {.tensors = tc, .ntensors = inplace ? 3 : 4, .scalars = sc, .nscalars = 5};
        kiln_launch_args ap = {.tensors = tp, .ntensors = inplace ? 3 : 4, .scalars = sc, .nscalars = 5};
        if (run_bound(k, &ac, bc) == 0 && run_bound(k, &ap, bp) == 0) {
            const uint16_t *got = inplace ? xp : op, *want = inplace ? xc : oc;
            long diff = 0, pad = 0;
            for (size_t i = 0; i < np; i++) {
                size_t row = i / (size_t)ld, c = i % (size_t)ld;
                if (c < (size_t)d) diff += got[i] != want[row * (size_t)d + c];
                else pad += got[i] != 0x5a5a;
            }
            CHECK(diff == 0, "%ld elements differ from the contiguous run", diff);
            CHECK(pad == 0, "%ld padding elements written", pad);
        }
    }
    free(xc), free(xp), free(oc), free(op), free(cs), free(sn);
    TEST_END();
}

int main(void) {
    kiln_error err = {0};
    if (kiln_gen_create(&gen, NULL, &err) != KILN_OK || kiln_emu_create(&emu, &err) != KILN_OK) {
        printf("setup: %s\n", err.msg);
        return 1;
    }
    correctness();
    strided("rotary dtype=bf16 head_dim=128 rotary_dim=64", 128, 64, 0);
    strided("rotary dtype=bf16 head_dim=64 interleaved=true inplace=true", 64, 64, 1);
    strided("rotary dtype=bf16 head_dim=96 rotary_dim=24 inplace=true", 96, 24, 1);
    bytes("rotary dtype=bf16 head_dim=128", 0, 2, 2, 128, 128);
    bytes("rotary dtype=bf16 head_dim=128 interleaved=true", 0, 2, 2, 128, 128);
    bytes("rotary dtype=bf16 head_dim=128 rotary_dim=64 inplace=true", 1, 2, 2, 128, 64);
    bytes("rotary dtype=f16 head_dim=64 rotary_dim=32", 0, 2, 2, 64, 32);
    kiln_emu_destroy(emu);
    kiln_gen_destroy(gen);
    return check_summary("rotary_emu_test");
}
