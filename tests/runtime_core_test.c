/* tests/runtime_core_test.c - runtime against the fake driver: device facts, loads, launches, errors. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "fake_cuda/fake_cuda.h"
#include "kiln/runtime.h"

static fake_cuda_api fake;

/* A runtime on a fake device of the given SM, memory cache only. */
static kiln_rt *open_rt(int sm, kiln_error *err) {
    char v[16];
    snprintf(v, sizeof v, "%d", sm);
    setenv("FAKE_CUDA_SM", v, 1);
    kiln_rt_options o = {.no_disk_cache = 1};
    kiln_rt *rt = NULL;
    kiln_rt_create(&rt, &o, err);
    return rt;
}

static void test_facts(void) {
    TEST_BEGIN("device facts");
    kiln_sm_facts f;
    CHECK(kiln_sm_from_cc(8, 6) == 86, "cc 8.6");
    CHECK(kiln_half_dtype_for_sm(75) == KILN_F16, "sm_75 half");
    CHECK(kiln_half_dtype_for_sm(80) == KILN_BF16 && kiln_half_dtype_for_sm(89) == KILN_BF16, "sm_80 half");
    CHECK(kiln_sm_facts_get(75, &f, NULL) == KILN_OK && !f.native_bf16 && (f.mma & KILN_MMA_M16N8K8_F16) &&
              !(f.mma & KILN_MMA_M16N8K16_BF16),
          "sm_75 facts");
    CHECK(kiln_sm_facts_get(86, &f, NULL) == KILN_OK && f.native_bf16 && (f.mma & KILN_MMA_M16N8K16_BF16) &&
              f.cp_async && !f.bf16_arith,
          "sm_86 facts");
    CHECK(kiln_sm_facts_get(120, &f, NULL) == KILN_OK && f.bf16_arith, "sm_120 inherits sm_90");
    kiln_error e;
    CHECK(kiln_sm_facts_get(61, &f, &e) == KILN_EINVAL && strstr(e.msg, "sm_61"), "sm_61: %s", e.msg);
    char buf[128];
    kiln_mma_shapes_string(f.mma, buf, sizeof buf);
    CHECK(strstr(buf, "m16n8k16.bf16") != NULL, "shapes '%s'", buf);
    TEST_END();
}

static void test_missing_driver(void) {
    TEST_BEGIN("missing driver and missing device");
    kiln_error e;
    kiln_rt *rt = NULL;
    setenv("KILN_CUDA_DRIVER", "/nonexistent/libcuda.so.1", 1);
    CHECK(kiln_rt_create(&rt, NULL, &e) == KILN_ENODRIVER && !rt, "status");
    CHECK(strstr(e.msg, "no CUDA driver found") && strstr(e.msg, "/nonexistent/libcuda.so.1"), "msg: %s", e.msg);
    setenv("KILN_CUDA_DRIVER", fake_cuda_path(), 1);
    setenv("FAKE_CUDA_DEVICES", "0", 1);
    CHECK(kiln_rt_create(&rt, NULL, &e) == KILN_ENODEVICE && !rt, "no device status %d", e.status);
    CHECK(strstr(e.msg, "no CUDA device") && strstr(e.msg, "CUDA_ERROR_NO_DEVICE"), "msg: %s", e.msg);
    unsetenv("FAKE_CUDA_DEVICES");
    kiln_rt_options o = {.device = 3};
    CHECK(kiln_rt_create(&rt, &o, &e) == KILN_EINVAL && strstr(e.msg, "valid: 0..0"), "ordinal: %s", e.msg);
    CHECK(kiln_rt_get_kernel(NULL, "x", NULL, &e) == KILN_EINVAL, "NULL runtime is an error, not a crash");
    TEST_END();
}

static void test_device_info(void) {
    TEST_BEGIN("device info from the driver");
    kiln_error e;
    kiln_rt *rt = open_rt(75, &e);
    CHECK(rt, "create: %s", e.msg);
    if (rt) {
        const kiln_device_info *d = kiln_rt_device(rt);
        CHECK(d->sm == 75 && d->cc_major == 7 && d->cc_minor == 5, "sm %d", d->sm);
        CHECK(kiln_rt_half_dtype(rt) == KILN_F16 && !d->facts.native_bf16, "sm_75 has no native bf16");
        CHECK(d->max_threads_per_block == 1024 && d->smem_per_block == 48 << 10 && d->smem_per_block_optin == 64 << 10,
              "limits");
        CHECK(strstr(d->name, "Fake") != NULL && d->driver_version == 13000, "name %s", d->name);
        kiln_rt_destroy(rt);
    }
    rt = open_rt(90, &e);
    CHECK(rt && kiln_rt_half_dtype(rt) == KILN_BF16 && kiln_rt_device(rt)->facts.bf16_arith, "sm_90");
    kiln_rt_destroy(rt);
    TEST_END();
}

static void test_load_and_launch(void) {
    TEST_BEGIN("load a module and launch it");
    kiln_error e;
    kiln_rt *rt = open_rt(80, &e);
    char ptx[8192];
    kiln_kernel_meta m = fake_cuda_meta("test a=1", "test_kernel", 80);
    int n = fake_cuda_ptx(&m, 80, ptx, sizeof ptx);
    kiln_kernel *k = NULL;
    fake.reset();
    CHECK(rt && kiln_rt_load_module(rt, ptx, (size_t)n, KILN_PAYLOAD_PTX, NULL, &k, &e) == KILN_OK, "load: %s", e.msg);
    if (k) {
        CHECK(!strcmp(kiln_kernel_get_meta(k)->entry, "test_kernel") && !strcmp(kiln_kernel_origin(k), "module"), "meta");
        unsigned grid[3];
        const uint64_t problem[3] = {10, 1, 1};
        CHECK(kiln_kernel_grid(k, problem, grid, &e) == KILN_OK && grid[0] == 3 && grid[1] == 1 && grid[2] == 1,
              "grid %u", grid[0]);
        kiln_arg args[3] = {{.ptr = 0x1000}, {.i32 = 10}, {.f32 = 0.5f}};
        CHECK(kiln_kernel_launch(k, grid, args, 3, NULL, &e) == KILN_OK, "launch: %s", e.msg);
        fake_cuda_launch l;
        CHECK(fake.last_launch(&l) && !strcmp(l.entry, "test_kernel") && l.grid[0] == 3 && l.block[0] == 128, "launch rec");
        float scale;
        memcpy(&scale, &l.param[2], 4);
        CHECK(l.nparams == 3 && l.param[0] == 0x1000 && l.param[1] == 10 && scale == 0.5f, "params");
        CHECK(kiln_kernel_launch(k, grid, args, 2, NULL, &e) == KILN_EINVAL && strstr(e.msg, "takes 3"), "nargs: %s", e.msg);
        fake.fail("launch", "launch_failed", 1);
        CHECK(kiln_kernel_launch(k, grid, args, 3, NULL, &e) == KILN_EDRIVER &&
                  strstr(e.msg, "cuLaunchKernel failed: CUDA_ERROR_LAUNCH_FAILED") && strstr(e.msg, "test_kernel"),
              "launch failure: %s", e.msg);
    }
    kiln_rt_destroy(rt);
    fake_cuda_counts c;
    fake.counters(&c);
    CHECK(c.live_modules == 0 && c.ctx_releases == c.ctx_retains, "destroy unloads and releases");
    TEST_END();
}

static void test_driver_errors(void) {
    TEST_BEGIN("driver errors carry the call, the name and the JIT log");
    kiln_error e;
    kiln_rt *rt = open_rt(80, &e);
    char ptx[8192];
    kiln_kernel_meta m = fake_cuda_meta("test a=2", "test_kernel", 80);
    kiln_kernel *k = NULL;
    /* the metadata says sm_80 but the PTX says sm_90: the driver refuses, with its log */
    int n = fake_cuda_ptx(&m, 90, ptx, sizeof ptx);
    CHECK(kiln_rt_load_module(rt, ptx, (size_t)n, KILN_PAYLOAD_PTX, NULL, &k, &e) == KILN_EDRIVER &&
              strstr(e.msg, "cuModuleLoadDataEx failed: CUDA_ERROR_INVALID_PTX") && strstr(e.msg, "JIT log: ptxas") &&
              strstr(e.msg, "sm_90"),
          "target above device: %s", e.msg);
    /* metadata for sm_90 on an sm_80 device: refused before the driver */
    m = fake_cuda_meta("test a=3", "test_kernel", 90);
    n = fake_cuda_ptx(&m, 90, ptx, sizeof ptx);
    CHECK(kiln_rt_load_module(rt, ptx, (size_t)n, KILN_PAYLOAD_PTX, NULL, &k, &e) == KILN_EINVAL &&
              strstr(e.msg, "targets sm_90"), "meta above device: %s", e.msg);
    /* entry name missing from the PTX */
    m = fake_cuda_meta("test a=4", "test_kernel", 80);
    n = fake_cuda_ptx(&m, 80, ptx, sizeof ptx);
    snprintf(m.entry, sizeof m.entry, "no_such_kernel");
    CHECK(kiln_rt_load_module(rt, ptx, (size_t)n, KILN_PAYLOAD_PTX, &m, &k, &e) == KILN_EDRIVER &&
              strstr(e.msg, "cuModuleGetFunction failed: CUDA_ERROR_NOT_FOUND") && strstr(e.msg, "no_such_kernel"),
          "missing entry: %s", e.msg);
    /* injected failures */
    m = fake_cuda_meta("test a=5", "test_kernel", 80);
    n = fake_cuda_ptx(&m, 80, ptx, sizeof ptx);
    fake.fail("load", "oom", 1);
    CHECK(kiln_rt_load_module(rt, ptx, (size_t)n, KILN_PAYLOAD_PTX, NULL, &k, &e) == KILN_EDRIVER &&
              strstr(e.msg, "CUDA_ERROR_OUT_OF_MEMORY"), "oom: %s", e.msg);
    fake.fail("load", "invalid_ptx", 1);
    CHECK(kiln_rt_load_module(rt, ptx, (size_t)n, KILN_PAYLOAD_PTX, NULL, &k, &e) == KILN_EDRIVER &&
              strstr(e.msg, "injected failure"), "invalid ptx log: %s", e.msg);
    CHECK(kiln_rt_load_module(rt, ptx, (size_t)n, KILN_PAYLOAD_PTX, NULL, &k, &e) == KILN_OK, "then it loads: %s", e.msg);
    /* PTX without metadata */
    CHECK(kiln_rt_load_module(rt, ".version 7.0\n.target sm_80\n", 27, KILN_PAYLOAD_PTX, NULL, &k, &e) == KILN_ECORRUPT,
          "no meta: %s", e.msg);
    fake.fail("alloc", "oom", 1);
    kiln_devptr p;
    CHECK(kiln_rt_alloc(rt, 64, &p, &e) == KILN_EDRIVER && strstr(e.msg, "cuMemAlloc failed"), "alloc: %s", e.msg);
    kiln_rt_destroy(rt);
    TEST_END();
}

static void test_shared_memory(void) {
    TEST_BEGIN("shared memory above 48 KiB sets the attribute");
    kiln_error e;
    kiln_rt *rt = open_rt(80, &e);
    char ptx[8192];
    kiln_kernel_meta m = fake_cuda_meta("test smem=big", "test_kernel", 80);
    m.dynamic_smem = 96 << 10;
    int n = fake_cuda_ptx(&m, 80, ptx, sizeof ptx);
    kiln_kernel *k = NULL;
    fake.reset();
    CHECK(kiln_rt_load_module(rt, ptx, (size_t)n, KILN_PAYLOAD_PTX, NULL, &k, &e) == KILN_OK, "load: %s", e.msg);
    fake_cuda_counts c;
    fake.counters(&c);
    CHECK(c.set_attributes == 1, "attribute set %d times", c.set_attributes);
    unsigned grid[3] = {1, 1, 1};
    kiln_arg args[3] = {{.ptr = 0}, {.i32 = 0}, {.f32 = 0}};
    CHECK(k && kiln_kernel_launch(k, grid, args, 3, NULL, &e) == KILN_OK, "launch: %s", e.msg);
    m.dynamic_smem = 200 << 10; /* sm_80 allows 163 KiB */
    snprintf(m.spec, sizeof m.spec, "test smem=huge");
    n = fake_cuda_ptx(&m, 80, ptx, sizeof ptx);
    CHECK(kiln_rt_load_module(rt, ptx, (size_t)n, KILN_PAYLOAD_PTX, NULL, &k, &e) == KILN_EINVAL &&
              strstr(e.msg, "shared memory"), "too much: %s", e.msg);
    kiln_rt_destroy(rt);
    TEST_END();
}

static void test_memory(void) {
    TEST_BEGIN("device memory helpers");
    kiln_error e;
    kiln_rt *rt = open_rt(80, &e);
    kiln_devptr p = 0;
    float in[4] = {1, 2, 3, 4}, out[4] = {0};
    CHECK(kiln_rt_alloc(rt, sizeof in, &p, &e) == KILN_OK && p, "alloc: %s", e.msg);
    CHECK(kiln_rt_upload(rt, p, in, sizeof in, &e) == KILN_OK, "upload: %s", e.msg);
    CHECK(kiln_rt_download(rt, out, p, sizeof out, &e) == KILN_OK && !memcmp(in, out, sizeof in), "download");
    CHECK(kiln_rt_upload(rt, p, in, 64, &e) == KILN_EDRIVER, "overflow is refused");
    CHECK(kiln_rt_synchronize(rt, &e) == KILN_OK && kiln_rt_free(rt, p, &e) == KILN_OK, "free: %s", e.msg);
    kiln_rt_destroy(rt);
    TEST_END();
}

int main(void) {
    if (fake_cuda_open(&fake) != 0) {
        printf("runtime_core: 0 passed, 1 failed\n");
        return 1;
    }
    test_facts();
    test_missing_driver();
    test_device_info();
    test_load_and_launch();
    test_driver_errors();
    test_shared_memory();
    test_memory();
    return check_summary("runtime_core");
}
