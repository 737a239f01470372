/* bench/nvrtc_once.c - one NVRTC compile of the CUDA C LayerNorm (bench/layernorm_cuda.h) to PTX
 * for compute_80, as a process: what a user's program pays to JIT the same kernel kiln emits.
 * Linked against libc and libdl only, so the process pays nothing for LLVM. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#include "layernorm_cuda.h"

typedef int (*create_fn)(void **, const char *, const char *, int, const char *const *, const char *const *);
typedef int (*compile_fn)(void *, int, const char *const *);
typedef int (*size_fn)(void *, size_t *);
typedef int (*get_fn)(void *, char *);

int main(void) {
    static const char *libs[] = {"libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12", "/usr/local/cuda/lib64/libnvrtc.so"};
    void *h = NULL;
    for (size_t i = 0; i < sizeof libs / sizeof *libs && !h; i++) h = dlopen(libs[i], RTLD_NOW);
    if (!h) {
        fprintf(stderr, "nvrtc_once: libnvrtc not found (install the CUDA toolkit)\n");
        return 2;
    }
    create_fn create = (create_fn)dlsym(h, "nvrtcCreateProgram");
    compile_fn compile = (compile_fn)dlsym(h, "nvrtcCompileProgram");
    size_fn psize = (size_fn)dlsym(h, "nvrtcGetPTXSize"), lsize = (size_fn)dlsym(h, "nvrtcGetProgramLogSize");
    get_fn get = (get_fn)dlsym(h, "nvrtcGetPTX"), log = (get_fn)dlsym(h, "nvrtcGetProgramLog");
    if (!create || !compile || !psize || !lsize || !get || !log) {
        fprintf(stderr, "nvrtc_once: libnvrtc lacks the nvrtc* entry points\n");
        return 2;
    }
    const char *opts[] = {"--gpu-architecture=compute_80", "-I/usr/local/cuda/include", "-default-device"};
    void *prog;
    if (create(&prog, cuda_src, "layernorm.cu", 0, NULL, NULL) != 0) {
        fprintf(stderr, "nvrtc_once: nvrtcCreateProgram failed\n");
        return 1;
    }
    int rc = compile(prog, 3, opts);
    size_t n = 0;
    if (rc != 0) {
        lsize(prog, &n);
        char *l = malloc(n + 1);
        if (l) log(prog, l);
        fprintf(stderr, "nvrtc_once: compile failed: %s\n", l ? l : "?");
        free(l);
        return 1;
    }
    psize(prog, &n);
    char *ptx = malloc(n + 1);
    if (!ptx || get(prog, ptx) != 0) return 1;
    printf("nvrtc: %zu bytes of PTX\n", n);
    free(ptx);
    return 0;
}
