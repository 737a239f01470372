/* bench/gen_bench.c - median spec->PTX time for LayerNorm variants in a warm process, next to
 * NVRTC compiling the same kernel written in CUDA C (when libnvrtc can be opened). */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_time.h"
#include "kiln/kiln.h"

/* Median ms of kiln_generate(spec, sm) over reps, after warm-up. */
static double time_kiln(kiln_gen *g, const char *spec, int sm, int reps) {
    double t[256];
    kiln_error err = {0};
    for (int i = -3; i < reps; i++) {
        kiln_module *m;
        double t0 = bench_now_ms();
        if (kiln_generate(g, spec, sm, KILN_EMIT_PTX, &m, &err) != KILN_OK) {
            fprintf(stderr, "gen_bench: %s\n", err.msg);
            exit(1);
        }
        double t1 = bench_now_ms();
        kiln_module_free(m);
        if (i >= 0) t[i] = t1 - t0;
    }
    return bench_median(t, reps);
}

#include "layernorm_cuda.h"

typedef int (*nvrtc_create_fn)(void **, const char *, const char *, int, const char *const *, const char *const *);
typedef int (*nvrtc_compile_fn)(void *, int, const char *const *);
typedef int (*nvrtc_size_fn)(void *, size_t *);
typedef int (*nvrtc_get_fn)(void *, char *);
typedef int (*nvrtc_destroy_fn)(void **);

/* Median ms of an NVRTC compile to PTX for compute_80, or a negative value without NVRTC. */
static double time_nvrtc(int reps) {
    static const char *libs[] = {"libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12", "/usr/local/cuda/lib64/libnvrtc.so"};
    void *h = NULL;
    for (size_t i = 0; i < sizeof libs / sizeof *libs && !h; i++) h = dlopen(libs[i], RTLD_NOW);
    if (!h) return -1;
    nvrtc_create_fn create = (nvrtc_create_fn)dlsym(h, "nvrtcCreateProgram");
    nvrtc_compile_fn compile = (nvrtc_compile_fn)dlsym(h, "nvrtcCompileProgram");
    nvrtc_size_fn psize = (nvrtc_size_fn)dlsym(h, "nvrtcGetPTXSize");
    nvrtc_get_fn get = (nvrtc_get_fn)dlsym(h, "nvrtcGetPTX");
    nvrtc_size_fn lsize = (nvrtc_size_fn)dlsym(h, "nvrtcGetProgramLogSize");
    nvrtc_get_fn log = (nvrtc_get_fn)dlsym(h, "nvrtcGetProgramLog");
    nvrtc_destroy_fn destroy = (nvrtc_destroy_fn)dlsym(h, "nvrtcDestroyProgram");
    if (!create || !compile || !psize || !get || !destroy || !lsize || !log) return -1;
    const char *opts[] = {"--gpu-architecture=compute_80", "-I/usr/local/cuda/include", "-default-device"};
    double t[64];
    for (int i = -1; i < reps; i++) {
        void *prog;
        double t0 = bench_now_ms();
        create(&prog, cuda_src, "layernorm.cu", 0, NULL, NULL);
        int rc = compile(prog, 3, opts);
        size_t n = 0;
        psize(prog, &n);
        char *ptx = malloc(n + 1);
        get(prog, ptx);
        double t1 = bench_now_ms();
        if (rc != 0) {
            size_t ln = 0;
            lsize(prog, &ln);
            char *l = malloc(ln + 1);
            log(prog, l);
            fprintf(stderr, "gen_bench: NVRTC failed: %s\n", l);
            free(l);
            free(ptx);
            destroy(&prog);
            return -1;
        }
        free(ptx);
        destroy(&prog);
        if (i >= 0) t[i] = t1 - t0;
    }
    dlclose(h);
    return bench_median(t, reps);
}

int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 30;
    if (reps < 1 || reps > 256) reps = 30;
    kiln_gen *g;
    kiln_error err = {0};
    if (kiln_gen_create(&g, NULL, &err) != KILN_OK) {
        fprintf(stderr, "gen_bench: %s\n", err.msg);
        return 1;
    }
    static const struct { const char *spec; int sm; } cases[] = {
        {"layernorm x=bf16 w=f32 y=bf16 hidden=4096", 80},
        {"layernorm x=bf16 w=f32 y=bf16 hidden=4096", 75},
        {"layernorm x=f16 hidden=768", 86},
        {"layernorm x=f32 hidden=16384", 90},
        {"layernorm x=bf16 hidden=launch", 80},
        /* the norm families (training): forward, residual, backward and its second kernel */
        {"rmsnorm x=bf16 w=f32 y=bf16 hidden=4096", 80},
        {"layernorm x=bf16 hidden=4096 residual=true r=f32", 80},
        {"layernorm_bwd x=bf16 w=f32 hidden=4096", 80},
        {"layernorm_bwd x=bf16 w=f32 hidden=4096", 75},
        {"rmsnorm_bwd x=bf16 w=f32 hidden=4096", 90},
        {"rmsnorm_bwd x=f16 hidden=launch residual=true", 80},
        {"norm_reduce w=f32", 80},
    };
    printf("spec -> PTX, warm process, median of %d (budget <= 5 ms):\n", reps);
    double kiln_ref = 0;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        double ms = time_kiln(g, cases[i].spec, cases[i].sm, reps);
        if (i == 0) kiln_ref = ms;
        printf("  %-52s sm_%d  %7.2f ms\n", cases[i].spec, cases[i].sm, ms);
    }
    kiln_gen_destroy(g);
    double nv = time_nvrtc(reps < 10 ? reps : 10);
    if (nv < 0) {
        printf("NVRTC: not available (libnvrtc not found); no comparison\n");
    } else {
        printf("NVRTC, same kernel in CUDA C (cuda_bf16.h), compute_80: %7.2f ms median\n", nv);
        printf("kiln is %.1fx faster than NVRTC for bf16 LayerNorm hidden=4096 on sm_80\n", nv / kiln_ref);
    }
    return 0;
}
