/* bench/cache_bench.c - runtime cache latency (memory, disk, bundle hits; cold JIT) and default bundle wall time. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "bench_time.h"
#include "kiln/gen.h"
#include "kiln/runtime.h"

#define LN "layernorm x=bf16 w=f32 y=bf16 hidden=4096 weight=true bias=true"

static double now_us(void) { return bench_now_ms() * 1e3; }

static kiln_rt *open_rt(const char *dir, int no_disk) {
    kiln_rt_options o = {.cache_dir = dir, .no_disk_cache = no_disk};
    kiln_rt *rt;
    kiln_error e;
    if (kiln_rt_create(&rt, &o, &e) != KILN_OK) {
        fprintf(stderr, "cache_bench: %s\n", e.msg);
        exit(1);
    }
    return rt;
}

static kiln_kernel *get(kiln_rt *rt, const char *spec) {
    kiln_kernel *k;
    kiln_error e;
    if (kiln_rt_get_kernel(rt, spec, &k, &e) != KILN_OK) {
        fprintf(stderr, "cache_bench: %s\n", e.msg);
        exit(1);
    }
    return k;
}

static void report(const char *what, double us, double budget_us) {
    if (budget_us > 0)
        printf("%-44s median %10.3f us   (budget <= %g us: %s)\n", what, us, budget_us, us <= budget_us ? "ok" : "OVER");
    else
        printf("%-44s median %10.3f us\n", what, us);
}

static void bench_memory(void) {
    enum { BATCHES = 21, CALLS = 20000 };
    double t[BATCHES];
    kiln_rt *rt = open_rt(NULL, 1);
    get(rt, LN);
    for (int b = 0; b < BATCHES; b++) {
        double t0 = now_us();
        for (int i = 0; i < CALLS; i++) get(rt, LN);
        t[b] = (now_us() - t0) / CALLS;
    }
    report("memory-cache hit (kiln_rt_get_kernel)", bench_median(t, BATCHES), 1);
    kiln_rt_destroy(rt);
}

static void bench_disk(const char *dir) {
    enum { N = 201 };
    double t[N];
    kiln_rt *rt = open_rt(dir, 0);
    get(rt, LN); /* warm the disk cache */
    kiln_rt_destroy(rt);
    for (int i = 0; i < N; i++) {
        rt = open_rt(dir, 0);
        double t0 = now_us();
        get(rt, LN);
        t[i] = now_us() - t0;
        kiln_rt_stats s;
        kiln_rt_get_stats(rt, &s);
        if (s.disk_hits != 1) fprintf(stderr, "cache_bench: expected a disk hit\n"), exit(1);
        kiln_rt_destroy(rt);
    }
    report("disk-cache hit (fresh runtime, incl. load)", bench_median(t, N), 100);
}

static void bench_bundle(void) {
    enum { N = 201 };
    double t[N];
    kiln_gen *g;
    kiln_module *m;
    kiln_error e;
    kiln_bundle_writer *w;
    void *data;
    size_t size;
    kiln_gen_create(&g, NULL, &e);
    kiln_rt *rt = open_rt(NULL, 1);
    if (kiln_generate(g, LN, kiln_rt_device(rt)->sm, KILN_EMIT_PTX, &m, &e) != KILN_OK) {
        fprintf(stderr, "cache_bench: %s\n", e.msg);
        exit(1);
    }
    kiln_rt_destroy(rt);
    kiln_bundle_writer_create(&w, "bench", NULL);
    kiln_bundle_writer_add(w, kiln_module_meta(m), KILN_PAYLOAD_PTX, kiln_module_text(m), kiln_module_size(m) + 1, NULL);
    kiln_bundle_writer_finish(w, &data, &size, NULL);
    kiln_bundle_writer_destroy(w);
    kiln_module_free(m);
    kiln_gen_destroy(g);
    for (int i = 0; i < N; i++) {
        rt = open_rt(NULL, 1);
        kiln_rt_add_bundle_memory(rt, data, size, NULL);
        double t0 = now_us();
        get(rt, LN);
        t[i] = now_us() - t0;
        kiln_rt_destroy(rt);
    }
    report("bundle hit (fresh runtime, incl. load)", bench_median(t, N), 0);
    free(data);
}

static void bench_cold(void) {
    enum { N = 21 };
    double t[N];
    for (int i = 0; i < N; i++) {
        kiln_rt *rt = open_rt(NULL, 1);
        double t0 = now_us();
        get(rt, LN);
        t[i] = now_us() - t0;
        kiln_rt_destroy(rt);
    }
    report("cold JIT: generate + load (no disk cache)", bench_median(t, N), 0);
}

/* CPU milliseconds used by waited-for children so far. */
static double children_cpu_ms(void) {
    struct rusage u;
    getrusage(RUSAGE_CHILDREN, &u);
    return (u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1e3 + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e3;
}

static void bench_bundle_cli(void) {
    enum { N = 5 };
    const char *kiln = getenv("KILN") ? getenv("KILN") : "bin/kiln";
    char cmd[1200], out[] = "/tmp/kiln_bench_XXXXXX";
    double t[N], cpu0 = children_cpu_ms();
    int fd = mkstemp(out);
    if (fd >= 0) close(fd);
    snprintf(cmd, sizeof cmd, "%s bundle -o %s 2>/dev/null", kiln, out);
    for (int i = 0; i < N; i++) {
        double t0 = now_us();
        if (system(cmd) != 0) {
            fprintf(stderr, "cache_bench: '%s' failed\n", cmd);
            exit(1);
        }
        t[i] = now_us() - t0;
    }
    double cpu = (children_cpu_ms() - cpu0) / N;
    printf("%-44s median %10.1f ms   (budget <= 2000 ms on 2 cores; %ld cores here)\n",
           "default bundle wall time (kiln bundle)", bench_median(t, N) / 1000, sysconf(_SC_NPROCESSORS_ONLN));
    printf("%-44s mean   %10.1f ms   (wall on 2 idle cores is about half)\n", "default bundle CPU time (user+sys)", cpu);
    fflush(stdout);
    snprintf(cmd, sizeof cmd, "%s bundle-info %s | head -1", kiln, out);
    if (system(cmd) != 0) fprintf(stderr, "cache_bench: bundle-info failed\n");
    unlink(out);
}

int main(void) {
    char dir[] = "/tmp/kiln_cache_bench_XXXXXX", cmd[128];
    if (!getenv("KILN_CUDA_DRIVER")) setenv("KILN_CUDA_DRIVER", "build/tests/libfakecuda.so.1", 1);
    if (!mkdtemp(dir)) return 1;
    kiln_rt_use_generator();
    printf("cache_bench: driver %s (the fake driver's module load is near free; a real driver adds its own)\n",
           getenv("KILN_CUDA_DRIVER"));
    bench_memory();
    bench_disk(dir);
    bench_bundle();
    bench_cold();
    bench_bundle_cli();
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd) == 0 ? 0 : 1;
}
