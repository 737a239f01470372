/* tests/rt_fixture.h - a runtime on the fake driver, posing as an sm_N device, memory cache only. */
#ifndef KILN_TESTS_RT_FIXTURE_H
#define KILN_TESTS_RT_FIXTURE_H

#include <stdio.h>
#include <stdlib.h>

#include "kiln/runtime.h"

static inline kiln_rt *open_rt(int sm) {
    char v[16];
    snprintf(v, sizeof v, "%d", sm);
    setenv("FAKE_CUDA_SM", v, 1);
    kiln_rt_options o = {.no_disk_cache = 1};
    kiln_rt *rt = NULL;
    kiln_error e;
    if (kiln_rt_create(&rt, &o, &e) != KILN_OK) printf("  cannot create runtime: %s\n", e.msg);
    return rt;
}

#endif
