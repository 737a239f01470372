/* tests/rotary_launch_test.c - the rotary family through the generic launch (kiln_launch_spec, its K.launch declaration) on the fake driver.
 *
 * What a caller gives by name (tensors, scalars, strides) must reach the kernel's parameters in order:
 * contiguous strides when none are given, the caller's when given, the optional offsets as 0, the
 * grid {ceil(seq / tokens), batch, ceil(heads / 8)}; a misaligned tensor, a missing scalar and an
 * in-place kernel given `out` are refused by name. */
#include <string.h>

#include "check.h"
#include "fake_cuda/fake_cuda.h"
#include "kiln/gen.h"
#include "kiln/runtime.h"
#include "rt_fixture.h"

static fake_cuda_api fake;
static fake_cuda_launch_at_fn launch_at;

#define T(n, p) {.name = n, .ptr = p}
#define S(n, v) {.name = n, .value = v}

/* The one launch since the last reset. */
static int last(fake_cuda_launch *l) {
    fake_cuda_counts c;
    fake.counters(&c);
    int n = c.launches;
    if (n == 1) launch_at(0, l);
    fake.reset();
    return n;
}

static void test_dense(kiln_rt *rt) {
    TEST_BEGIN("kiln_launch_spec: rotary bf16 d128, contiguous strides, offsets absent");
    kiln_error e = {0};
    kiln_launch_tensor t[] = {T("out", 0x100000), T("x", 0x200000), T("cos", 0x300000), T("sin", 0x400000)};
    kiln_launch_scalar s[] = {S("batch", 2), S("seq", 37), S("heads", 11), S("seqlen_ro", 64), S("offset", 5)};
    kiln_launch_args a = {.tensors = t, .ntensors = 4, .scalars = s, .nscalars = 5};
    fake.reset();
    CHECK(kiln_launch_spec(rt, "rotary dtype=bf16 head_dim=128", &a, &e) == KILN_OK, "%s", e.msg);
    fake_cuda_launch l;
    CHECK(last(&l) == 1, "one launch");
    CHECK(!strcmp(l.entry, "kiln_rotary_bf16_bf16_128_128_false_false_false"), "entry %s", l.entry);
    CHECK(l.grid[0] == 3 && l.grid[1] == 2 && l.grid[2] == 2, "grid %u %u %u", l.grid[0], l.grid[1], l.grid[2]);
    /* out x cos sin offsets batch seq heads seqlen_ro offset conjugate, strides x b/s/h, out b/s/h */
    const uint64_t want[] = {0x100000, 0x200000, 0x300000, 0x400000, 0, 2, 37, 11, 64, 5, 0,
                             37 * 11 * 128, 11 * 128, 128, 37 * 11 * 128, 11 * 128, 128};
    CHECK(l.nparams == 17, "%d parameters", l.nparams);
    for (int i = 0; i < 17 && i < l.nparams; i++)
        CHECK(l.param[i] == want[i], "parameter %d: %llx, want %llx", i, (unsigned long long)l.param[i], (unsigned long long)want[i]);
    TEST_END();
}

static void test_varlen_in_place_strided(kiln_rt *rt) {
    TEST_BEGIN("kiln_launch_spec: rotary varlen in place, a strided x (q inside packed qkv), offsets and conjugate");
    kiln_error e = {0};
    kiln_launch_tensor t[] = {{.name = "x", .ptr = 0x200000, .strides = {3 * 8 * 64, 64}}, T("cos", 0x300000),
                              T("sin", 0x400000), T("cu_seqlens", 0x500000), T("offsets", 0x600000)};
    kiln_launch_scalar s[] = {S("batch", 4), S("seq", 20), S("heads", 8), S("seqlen_ro", 100), S("total", 50),
                              S("conjugate", 1)};
    kiln_launch_args a = {.tensors = t, .ntensors = 5, .scalars = s, .nscalars = 6};
    fake.reset();
    CHECK(kiln_launch_spec(rt, "rotary dtype=f16 head_dim=64 interleaved=true varlen=true inplace=true", &a, &e) == KILN_OK,
          "%s", e.msg);
    fake_cuda_launch l;
    CHECK(last(&l) == 1, "one launch");
    /* x cos sin cu_seqlens offsets batch seq heads seqlen_ro offset conjugate stride_xs stride_xh */
    const uint64_t want[] = {0x200000, 0x300000, 0x400000, 0x500000, 0x600000, 4, 20, 8, 100, 0, 1, 3 * 8 * 64, 64};
    CHECK(l.nparams == 13, "%d parameters", l.nparams);
    for (int i = 0; i < 13 && i < l.nparams; i++)
        CHECK(l.param[i] == want[i], "parameter %d: %llx, want %llx", i, (unsigned long long)l.param[i], (unsigned long long)want[i]);
    CHECK(l.grid[1] == 4 && l.grid[2] == 1, "grid %u %u %u", l.grid[0], l.grid[1], l.grid[2]);
    TEST_END();
}

static void test_refusals(kiln_rt *rt) {
    TEST_BEGIN("kiln_launch_spec: rotary refuses a misaligned x, a missing scalar, out for an in-place kernel");
    kiln_error e = {0};
    kiln_launch_scalar s[] = {S("batch", 1), S("seq", 4), S("heads", 2), S("seqlen_ro", 8)};
    kiln_launch_tensor bad[] = {T("out", 0x100000), T("x", 0x200008), T("cos", 0x300000), T("sin", 0x400000)};
    kiln_launch_args a = {.tensors = bad, .ntensors = 4, .scalars = s, .nscalars = 4};
    CHECK(kiln_launch_spec(rt, "rotary dtype=bf16 head_dim=128", &a, &e) == KILN_EINVAL && strstr(e.msg, "tensor x "), "%s", e.msg);
    kiln_launch_tensor ok[] = {T("out", 0x100000), T("x", 0x200000), T("cos", 0x300000), T("sin", 0x400000)};
    kiln_launch_args b = {.tensors = ok, .ntensors = 4, .scalars = s, .nscalars = 3};
    CHECK(kiln_launch_spec(rt, "rotary dtype=bf16 head_dim=128", &b, &e) == KILN_EINVAL && strstr(e.msg, "seqlen_ro"), "%s", e.msg);
    kiln_launch_args c = {.tensors = ok, .ntensors = 4, .scalars = s, .nscalars = 4};
    CHECK(kiln_launch_spec(rt, "rotary dtype=bf16 head_dim=128 inplace=true", &c, &e) == KILN_EINVAL && strstr(e.msg, "'out'"),
          "%s", e.msg);
    fake.reset();
    TEST_END();
}

int main(void) {
    if (fake_cuda_open(&fake) != 0 || !(*(void **)&launch_at = dlsym(fake.dl, "fake_cuda_launch_at"))) {
        printf("rotary_launch: 0 passed, 1 failed\n");
        return 1;
    }
    kiln_rt_use_generator();
    kiln_rt *rt = open_rt(90);
    test_dense(rt);
    test_varlen_in_place_strided(rt);
    test_refusals(rt);
    kiln_rt_destroy(rt);
    return check_summary("rotary_launch");
}
