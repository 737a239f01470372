/* tests/rotary_ptxas_test.c - the ptxas matrix (tests/matrix.h) over the rotary family, and its 16-byte accesses.
 *
 * Variants: the template's K.variants (x in f32, f16, bf16 and bf16 with f32 cos/sin; GPT-NeoX and
 * GPT-J; rotary_dim = head_dim (128), 64 of 128 and 24 of 96 (8-byte units); out of place, varlen, in
 * place) for sm_75, 80, 90, 100 and 120 (KILN_TEST_FULL=1: every SM kiln targets from sm_75). Each generates, lints clean, has
 * no bf16 instruction below sm_80 and assembles with 0 bytes of spills.
 *
 * 16-byte accesses (the kernel is memory-bound): at head_dim 128 every global store is a v4.b32 and
 * every global load too, but for the int32 index reads (offsets[b], cu_seqlens[b], cu_seqlens[b+1])
 * and GPT-J's cos/sin at 2-byte cs (a unit of 8 elements holds 4 pairs: 8-byte table vectors).
 */
#include "matrix.h"

/* Global loads and stores in ptx that are not 16-byte vectors. */
static void narrow_accesses(const char *ptx, int *loads, int *stores) {
    *loads = *stores = 0;
    const char *line = ptx;
    while (line && *line) {
        const char *eol = strchr(line, '\n');
        size_t len = eol ? (size_t)(eol - line) : strlen(line);
        char buf[256];
        snprintf(buf, sizeof buf, "%.*s", (int)(len < 255 ? len : 255), line);
        int is_ld = strstr(buf, "ld.global") != NULL, is_st = strstr(buf, "st.global") != NULL;
        if ((is_ld || is_st) && !strstr(buf, ".v4.b32") && !strstr(buf, ".v4.f32") && !strstr(buf, ".v4.u32"))
            *(is_ld ? loads : stores) += 1;
        line = eol ? eol + 1 : NULL;
    }
}

/* narrow: the loads expected below 16 bytes (int32 index reads; a GPT-J unit's cos/sin vectors of
 * half the unit's pairs when cs is 2 bytes wide: 8 bytes each). */
static void vector_accesses(kiln_gen *gen, const char *spec, int sm, int narrow) {
    char name[300];
    snprintf(name, sizeof name, "%s (sm_%d): 16-byte global accesses", spec, sm);
    TEST_BEGIN(name);
    kiln_module *m = NULL;
    kiln_error err = {0};
    CHECK(kiln_generate(gen, spec, sm, KILN_EMIT_PTX, &m, &err) == KILN_OK, "%s", err.msg);
    if (m) {
        int loads, stores;
        narrow_accesses(kiln_module_text(m), &loads, &stores);
        CHECK(stores == 0, "%d global stores narrower than 16 bytes", stores);
        CHECK(loads == narrow, "%d global loads narrower than 16 bytes; expected %d", loads, narrow);
        kiln_module_free(m);
    }
    TEST_END();
}

int main(void) {
    static const int quick_sms[] = {75, 80, 90, 100, 120};
    static const char *const families[] = {"rotary"};
    kiln_error err = {0};
    kiln_gen *gen;
    if (kiln_gen_create(&gen, NULL, &err) != KILN_OK) {
        printf("cannot create generator: %s\nrotary ptxas matrix: 0 passed, 1 failed\n", err.msg);
        return 1;
    }
    static const char *const wide[] = {"rotary dtype=bf16 head_dim=128", "rotary dtype=f16 head_dim=128 interleaved=true",
                                       "rotary dtype=f32 head_dim=128 rotary_dim=64", "rotary dtype=bf16 cs=f32 head_dim=128 rotary_dim=64 inplace=true"};
    for (int i = 0; i < 4; i++)
        for (int s = 0; s < 3; s++) vector_accesses(gen, wide[i], quick_sms[s], i == 1 ? 3 : 1);
    vector_accesses(gen, "rotary dtype=bf16 head_dim=128 varlen=true", 80, 3);
    kiln_gen_destroy(gen);
    return matrix_main("rotary ptxas matrix", families, 1, matrix_full() ? NULL : quick_sms, 5);
}
