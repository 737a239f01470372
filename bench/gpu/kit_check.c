/* bench/gpu/kit_check.c - GPU check kit, AOT side (libkiln_rt only): checks a bundle's kernels; kit_bench.c times them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kiln/runtime.h"
#include "kit.h"
#include "kit_rows.h"

static int die(const char *what, const kiln_error *err) {
    fprintf(stderr, "kiln-gpucheck: %s: %s\n", what, err->msg);
    return 2;
}

/* The highest SM kiln generates for that the device runs (bundles hold 75, 80, 86, 89, 90). */
static int target_sm(int device_sm) {
    static const int sms[] = {90, 89, 86, 80, 75};
    for (int i = 0; i < 5; i++)
        if (sms[i] <= device_sm) return sms[i];
    return 75;
}

/* A runtime that sees only the bundle entries of one kind and SM: the launch then has
 * exactly one payload to pick for each spec. */
typedef struct mode {
    char name[32];
    kiln_payload_kind kind;
    int sm;
    kiln_rt *rt;
    void *data;
    int entries, by_name;
} mode;

static kiln_status open_mode(mode *m, const kiln_bundle *b, kiln_error *err) {
    kiln_bundle_writer *w;
    kiln_status st = kiln_bundle_writer_create(&w, kiln_bundle_producer(b), err);
    for (int i = 0; st == KILN_OK && i < kiln_bundle_count(b); i++) {
        kiln_bundle_entry e;
        st = kiln_bundle_entry_at(b, i, &e, err);
        if (st == KILN_OK && e.kind == m->kind && e.sm == m->sm) {
            st = kiln_bundle_writer_add(w, e.meta, e.kind, e.payload, (size_t)e.size, err);
            m->entries++;
        }
    }
    size_t size = 0;
    if (st == KILN_OK) st = kiln_bundle_writer_finish(w, &m->data, &size, err);
    kiln_bundle_writer_destroy(w);
    kiln_rt_options opt = {.no_disk_cache = 1};
    if (st == KILN_OK) st = kiln_rt_create(&m->rt, &opt, err);
    if (st == KILN_OK) st = kiln_rt_add_bundle_memory(m->rt, m->data, size, err);
    return st;
}

/* arch: the arch bundle (sm_90a's wgmma attention, kit_90a.kbundle) or NULL; its payloads are modes of
 * their own on a 9.0 device (cubin, PTX, the cubin by name), and skipped, saying why, on any other.
 * only[0..nonly): the modes to run, by name ("cubin sm_90a"; compute-sanitizer's run); none: every mode. */
static int cmd_check(const char *bundle_path, const char *dir, const char *csv_path, const char *arch,
                     const char *const *only, int nonly) {
    kiln_error err = {0};
    kiln_bundle *b;
    if (kiln_bundle_open_file(bundle_path, &b, &err) != KILN_OK) return die("bundle", &err);
    kiln_rt *probe;
    kiln_rt_options popt = {.no_disk_cache = 1};
    if (kiln_rt_create(&probe, &popt, &err) != KILN_OK) return die("runtime", &err);
    const kiln_device_info *dev = kiln_rt_device(probe);
    int tsm = target_sm(dev->sm);
    printf("AOT path on %s (sm_%d, driver %d): bundle %s, %d entries (%s)\n", dev->name, dev->sm, dev->driver_version,
           bundle_path, kiln_bundle_count(b), kiln_bundle_producer(b));
    /* the device SM's cubin, its PTX, sm_75's PTX (all through the generic launch, kiln_launch), and
     * the cubin again through the by-name route (the kernel's parameters bound from the case's names) */
    mode modes[7] = {{.kind = KILN_PAYLOAD_CUBIN, .sm = tsm}, {.kind = KILN_PAYLOAD_PTX, .sm = tsm},
                     {.kind = KILN_PAYLOAD_PTX, .sm = 75}};
    int nmodes = tsm == 75 ? 2 : 3;
    for (int i = 0; i < nmodes; i++) {
        snprintf(modes[i].name, sizeof modes[i].name, "%s sm_%d", modes[i].kind == KILN_PAYLOAD_CUBIN ? "cubin" : "ptx",
                 modes[i].sm);
        if (open_mode(&modes[i], b, &err) != KILN_OK) return die(modes[i].name, &err);
        printf("  mode %-14s %3d bundle entries%s\n", modes[i].name, modes[i].entries,
               modes[i].kind == KILN_PAYLOAD_PTX ? " (JIT-compiled by the driver for the device)" : "");
    }
    modes[nmodes] = modes[0];
    modes[nmodes].by_name = 1;
    modes[nmodes].data = NULL; /* shares mode 0's runtime */
    snprintf(modes[nmodes].name, sizeof modes[nmodes].name, "cubin sm_%d/name", tsm);
    printf("  mode %-14s the cubins again, parameters bound by name from kiln.meta (one kernel)\n",
           modes[nmodes].name);
    int nall = nmodes + 1;
    kiln_bundle *ab = NULL;
    if (arch && dev->sm != 90) {
        printf("  sm_90a modes skipped: the wgmma attention rows run on a 9.0 device only (this one is sm_%d)\n", dev->sm);
    } else if (arch) {
        if (kiln_bundle_open_file(arch, &ab, &err) != KILN_OK) return die("arch bundle", &err);
        modes[nall] = (mode){.kind = KILN_PAYLOAD_CUBIN, .sm = KIT_SM_90A};
        modes[nall + 1] = (mode){.kind = KILN_PAYLOAD_PTX, .sm = KIT_SM_90A};
        for (int i = nall; i < nall + 2; i++) {
            snprintf(modes[i].name, sizeof modes[i].name, "%s sm_90a", modes[i].kind == KILN_PAYLOAD_CUBIN ? "cubin" : "ptx");
            if (open_mode(&modes[i], ab, &err) != KILN_OK) return die(modes[i].name, &err);
            printf("  mode %-14s %3d bundle entries (%s)\n", modes[i].name, modes[i].entries, arch);
        }
        modes[nall + 2] = modes[nall];
        modes[nall + 2].by_name = 1, modes[nall + 2].data = NULL;
        snprintf(modes[nall + 2].name, sizeof modes[nall + 2].name, "cubin sm_90a/name");
        nall += 3;
    }
    /* A kit built for another GPU holds no cubins for this SM (the Makefile's KIT_CUBIN_SMS): its cubin modes
     * (mode 0 and the by-name one) are skipped, saying so, and --mode refuses them. */
    int no_cubins = modes[0].entries == 0;
    if (no_cubins)
        printf("  modes 'cubin sm_%d' and 'cubin sm_%d/name' skipped: this kit holds no sm_%d cubins "
               "(make gpu-kit KIT_CUBIN_SMS=%d builds them)\n", tsm, tsm, tsm, tsm);
    /* --mode: every name must be one of this device's modes; the others are left out */
    int run[16];
    for (int m = 0; m < nall; m++) run[m] = nonly == 0 && !(no_cubins && (m == 0 || m == nmodes));
    for (int i = 0; i < nonly; i++) {
        int found = 0;
        for (int m = 0; m < nall; m++)
            if (!strcmp(modes[m].name, only[i])) run[m] = found = 1;
        if (found && no_cubins && (!strcmp(only[i], modes[0].name) || !strcmp(only[i], modes[nmodes].name)))
            return fprintf(stderr, "kiln-gpucheck: mode '%s': this kit holds no sm_%d cubins (make gpu-kit KIT_CUBIN_SMS=%d)\n",
                           only[i], tsm, tsm), 2;
        if (!found) {
            char valid[512] = "";
            for (int m = 0; m < nall; m++)
                snprintf(valid + strlen(valid), sizeof valid - strlen(valid), "%s'%s'", m ? ", " : "", modes[m].name);
            return fprintf(stderr, "kiln-gpucheck: no mode '%s' on this device; its modes: %s\n", only[i], valid), 2;
        }
    }
    if (nonly) {
        printf("  modes run here:");
        for (int m = 0; m < nall; m++)
            if (run[m]) printf(" '%s'", modes[m].name);
        printf(" (--mode)\n");
    }
    char **paths;
    int n = kit_case_list(dir, &paths);
    if (n <= 0) return fprintf(stderr, "kiln-gpucheck: no cases in %s\n", dir), 2;
    FILE *csv = csv_path ? fopen(csv_path, "w") : NULL;
    if (csv) fputs(kit_check_csv_header, csv);
    long checks = 0, failed = 0;
    for (int i = 0; i < n; i++) {
        kit_case c;
        char msg[512];
        if (kit_case_read(&c, paths[i], msg, sizeof msg)) {
            fprintf(stderr, "kiln-gpucheck: %s\n", msg);
            failed++;
            continue;
        }
        for (int m = 0; m < nall; m++) {
            if (!run[m] || modes[m].sm != c.emu_sm) continue; /* the emulator ran this SM's module */
            if (modes[m].by_name && kit_case_kernels(modes[m].rt, &c) > 1)
                continue; /* a kernel sequence: the generic launch only */
            long bad = kit_run_and_compare(modes[m].rt, &c, modes[m].name, modes[m].by_name, csv, 1);
            checks++;
            failed += bad != 0;
        }
        kit_case_free(&c);
        free(paths[i]);
    }
    free(paths);
    if (csv) fclose(csv);
    printf("AOT path: %ld checks (case x payload), %ld failed\n", checks, failed);
    for (int i = 0; i < nall; i++) {
        if (modes[i].by_name) continue; /* shares a runtime */
        kiln_rt_destroy(modes[i].rt);
        free(modes[i].data);
    }
    kiln_bundle_close(ab);
    kiln_rt_destroy(probe);
    kiln_bundle_close(b);
    return failed || !checks ? 1 : 0;
}

static void usage(FILE *to) {
    fprintf(to,
            "usage: kiln-gpucheck device\n"
            "           the SM kiln generates for on this device, and the device\n"
            "       kiln-gpucheck check BUNDLE CASEDIR [--csv F] [--arch-bundle F] [--mode NAME]...\n"
            "           every case through the generic launch, once per payload: the device SM's cubin, its PTX\n"
            "           and sm_75's PTX (both JIT-compiled by the driver); compared with the emulator and float64;\n"
            "           --arch-bundle: sm_90a's cubins and PTX (the wgmma attention rows) on a 9.0 device;\n"
            "           --mode: only the payload modes named (e.g. 'cubin sm_90a'; the check prints them all)\n"
            "       kiln-gpucheck bench BUNDLE [--csv F] [--quick] [--arch-bundle F]\n"
            "           copy bandwidth, mma.sync peak, LayerNorm GB/s over hidden, attention TFLOP/s over seq;\n"
            "           --arch-bundle: the wgmma attention forward beside the FA2 kernel on a 9.0 device\n"
            "       kiln-gpucheck load BUNDLE [--csv F]\n"
            "           model load of the bundle's PTX through kiln_rt_prepare, 1 thread and every core: memory\n"
            "           only, cold disk cache (driver's linker, cubins written), warm (cubins read)\n"
            "exit status: 0 every check passed, 1 a check failed, 2 the kit could not run\n");
}

/* ---- model load: every kernel of the bundle from its PTX through kiln_rt_prepare ---- */

static double wall_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* Loads every spec the bundle has PTX for (at the device's target SM) in a fresh runtime that sees only
 * that PTX, through kiln_rt_prepare on 1 thread and on every core: without the linker and without a
 * disk cache (cuModuleLoadDataEx compiles each PTX: what every load, disk-cache hits too, cost before
 * the cache held cubins), with the linker and no disk cache, with a cold disk cache (compiled by the
 * linker, cubins written) and with a warm one (a second runtime on that cache: cubins read, nothing
 * compiled). Set CUDA_CACHE_DISABLE=1 so that the driver's own JIT cache does not hide the compiles. */
static int cmd_load(const char *bundle_path, const char *csv_path) {
    kiln_error err = {0};
    kiln_bundle *b;
    if (kiln_bundle_open_file(bundle_path, &b, &err) != KILN_OK) return die("bundle", &err);
    kiln_rt *probe;
    kiln_rt_options none = {.no_disk_cache = 1};
    if (kiln_rt_create(&probe, &none, &err) != KILN_OK) return die("runtime", &err);
    int sm = target_sm(kiln_rt_device(probe)->sm), cores = (int)sysconf(_SC_NPROCESSORS_ONLN), n = 0;
    kiln_rt_destroy(probe);
    /* a bundle of that PTX alone (no cubins: the runtime is to compile or find them itself) */
    const char **specs = calloc((size_t)kiln_bundle_count(b) + 1, sizeof *specs);
    kiln_bundle_writer *w;
    void *data = NULL;
    size_t size = 0;
    if (!specs || kiln_bundle_writer_create(&w, kiln_bundle_producer(b), &err) != KILN_OK) return die("bundle", &err);
    for (int i = 0; i < kiln_bundle_count(b); i++) {
        kiln_bundle_entry e;
        if (kiln_bundle_entry_at(b, i, &e, &err) != KILN_OK || e.kind != KILN_PAYLOAD_PTX || e.sm != sm) continue;
        if (kiln_bundle_writer_add(w, e.meta, e.kind, e.payload, (size_t)e.size, &err) != KILN_OK) return die("bundle", &err);
        specs[n++] = e.spec;
    }
    if (kiln_bundle_writer_finish(w, &data, &size, &err) != KILN_OK) return die("bundle", &err);
    kiln_bundle_writer_destroy(w);
    printf("model load: %d kernels from sm_%d PTX (%s), kiln_rt_prepare in a fresh runtime each row\n", n, sm,
           bundle_path);
    printf("  %-36s %7s %10s %10s %9s %9s\n", "row", "threads", "wall ms", "ms/kernel", "cubin wr", "cubin hit");
    FILE *csv = csv_path ? fopen(csv_path, "w") : NULL;
    if (csv) fputs("row,threads,kernels,wall_ms,cubins_written,cubin_hits\n", csv);
    char dirs[2][64] = {"/tmp/kiln-load-1-XXXXXX", "/tmp/kiln-load-n-XXXXXX"};
    if (!mkdtemp(dirs[0]) || !mkdtemp(dirs[1])) return fprintf(stderr, "kiln-gpucheck: no temporary directory\n"), 2;
    static const struct { const char *row; int no_link, disk, all_cores; } rows[] = {
        {"no disk cache, cuModuleLoadDataEx", 1, 0, 0}, {"no disk cache, cuModuleLoadDataEx", 1, 0, 1},
        {"no disk cache, driver's linker", 0, 0, 0},    {"no disk cache, driver's linker", 0, 0, 1},
        {"cold disk cache (link, write cubin)", 0, 1, 0}, {"cold disk cache (link, write cubin)", 0, 1, 1},
        {"warm disk cache (read cubin)", 0, 1, 0},      {"warm disk cache (read cubin)", 0, 1, 1},
    };
    int failed = 0;
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
        int threads = rows[r].all_cores ? cores : 1;
        kiln_rt_options opt = {.cache_dir = dirs[rows[r].all_cores], .no_disk_cache = !rows[r].disk};
        kiln_rt *rt;
        if (kiln_rt_create(&rt, &opt, &err) != KILN_OK || kiln_rt_add_bundle_memory(rt, data, size, &err) != KILN_OK)
            return die("runtime", &err);
        kiln_rt_synchronize(rt, &err); /* the context is made before the clock starts */
        if (rows[r].no_link) setenv("KILN_DRIVER_LINK", "0", 1);
        double t0 = wall_ms();
        kiln_status st = kiln_rt_prepare(rt, specs, n, threads, NULL, &err);
        double ms = wall_ms() - t0;
        unsetenv("KILN_DRIVER_LINK");
        kiln_rt_stats s;
        kiln_rt_get_stats(rt, &s);
        kiln_rt_destroy(rt);
        if (st != KILN_OK) {
            fprintf(stderr, "kiln-gpucheck: load (%s): %s\n", rows[r].row, err.msg);
            failed = 1;
        }
        printf("  %-36s %7d %10.1f %10.2f %9llu %9llu\n", rows[r].row, threads, ms, ms / (n ? n : 1),
               (unsigned long long)s.cubin_writes, (unsigned long long)s.cubin_hits);
        if (csv)
            fprintf(csv, "%s,%d,%d,%.3f,%llu,%llu\n", rows[r].row, threads, n, ms,
                    (unsigned long long)s.cubin_writes, (unsigned long long)s.cubin_hits);
    }
    for (int i = 0; i < 2; i++) {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf %s", dirs[i]);
        if (system(cmd) != 0) fprintf(stderr, "kiln-gpucheck: could not remove %s\n", dirs[i]);
    }
    if (csv) fclose(csv);
    free(specs);
    free(data);
    kiln_bundle_close(b);
    return failed;
}

/* Prints "SM NAME (sm_X, driver N)": the SM kiln generates for on device 0, and what it is. */
static int cmd_device(void) {
    kiln_rt *rt;
    kiln_error err;
    kiln_rt_options opt = {.no_disk_cache = 1};
    if (kiln_rt_create(&rt, &opt, &err) != KILN_OK) return die("runtime", &err);
    const kiln_device_info *d = kiln_rt_device(rt);
    printf("%d %s (sm_%d, %d SMs, driver %d)\n", target_sm(d->sm), d->name, d->sm, d->multiprocessors, d->driver_version);
    kiln_rt_destroy(rt);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 2 && !strcmp(argv[1], "device")) return cmd_device();
    if (argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) return usage(stdout), 0;
    if (argc < 3) {
        fprintf(stderr, "kiln-gpucheck: expected 'device', 'check BUNDLE CASEDIR' or 'bench BUNDLE'; see kiln-gpucheck --help\n");
        return 2;
    }
    const char *csv = NULL, *arch = NULL, *only[16];
    int quick = 0, pos = 0, nonly = 0;
    const char *args[2] = {NULL, NULL};
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--csv") && i + 1 < argc) csv = argv[++i];
        else if (!strcmp(argv[i], "--mode") && i + 1 < argc && nonly < 16 && !strcmp(argv[1], "check")) only[nonly++] = argv[++i];
        else if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--arch-bundle") && i + 1 < argc) arch = argv[++i];
        else if (argv[i][0] != '-' && pos < 2) args[pos++] = argv[i];
        else return fprintf(stderr, "kiln-gpucheck: unknown argument '%s'; see kiln-gpucheck --help\n", argv[i]), 2;
    }
    if (!strcmp(argv[1], "check") && pos == 2) return cmd_check(args[0], args[1], csv, arch, only, nonly);
    if (!strcmp(argv[1], "bench") && pos == 1) return kit_bench(args[0], csv, quick, arch);
    if (!strcmp(argv[1], "load") && pos == 1) return cmd_load(args[0], csv);
    fprintf(stderr, "kiln-gpucheck: expected 'device', 'check BUNDLE CASEDIR' or 'bench BUNDLE'; see kiln-gpucheck --help\n");
    return 2;
}
