/* tests/fuzz/fuzz_spec.c - libFuzzer target: the spec parsers - the generator's tokenizer
 * (gen/gen_spec.c), the runtime's normalizer (runtime/rt_spec.c) and the attention reference's
 * reader (templates/attention.ref.c). Normalizing twice must change nothing. */
#include <stdlib.h>
#include <string.h>

#include "gen.h"
#include "kiln/emu.h"
#include "attention.ref.h"
#include "rt.h"

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = 0;
    kiln_error err = {0};
    gen_spec spec;
    (void)gen_spec_parse(text, &spec, &err);
    char norm[KILN_SPEC_MAX], again[KILN_SPEC_MAX], family[64];
    if (rt_spec_normalize(text, norm, sizeof norm, &err) == KILN_OK) {
        if (rt_spec_normalize(norm, again, sizeof again, &err) != KILN_OK || strcmp(norm, again)) abort();
        rt_spec_family(norm, family, sizeof family);
    }
    kiln_attn_problem p;
    memset(&p, 0, sizeof p);
    (void)kiln_attn_spec_parse(text, &p, &err);
    free(text);
    return 0;
}
