/* tools/cmd_lint.c - `kiln lint FILE... [--sm N] [--cuda X.Y] [--json]`: architecture problems in PTX files. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "kiln/lint.h"
#include "kiln/runtime.h"

typedef struct lint_opts {
    int device_sm;
    int cuda; /* 12040 for CUDA 12.4, 0 for none */
    int json;
} lint_opts;

static void lint_usage(FILE *to) {
    fprintf(to, "usage: kiln lint FILE... [--sm N] [--cuda X.Y] [--json]\n\n"
                "Finds architecture problems in PTX from any compiler (kiln, nvcc, Triton, ...): instructions\n"
                "or types that need a newer SM than the module's .target or a newer PTX ISA than its .version,\n"
                "a .version too old for the .target, illegal declarations (.reg .bf16), shfl/vote without .sync.\n\n"
                "  --sm N    also check that the module can run on an sm_N device (N as 75, sm_75 or 7.5)\n"
                "            and list the lines that need more than sm_N\n"
                "  --cuda X.Y  also check against CUDA release X.Y (its driver's cuDriverGetVersion, or the\n"
                "            ptxas that will assemble it): a .version newer than it accepts, a .target it does\n"
                "            not know (errors), a .target its ptxas no longer builds for (warning)\n"
                "  --json    machine-readable findings on standard output\n"
                "  FILE '-'  reads standard input\n\n"
                "A cubin, a fatbin, or an ELF object, shared library or executable that embeds them (nvcc's\n"
                ".nv_fatbin): lint lists each kernel image's SM and each PTX's .target/.version, lints the PTX,\n"
                "and with --sm (alias --device) and/or --cuda says whether that GPU and driver can run it, or why\n"
                "not (\"no kernel image is available for execution on the device\") and what would fix it.\n\n"
                "exit status: 0 clean, 1 findings, 2 usage error or unreadable input\n");
}

void json_string(const char *s) {
    putchar('"');
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            printf("\\%c", *p);
        else if (*p < 0x20 || *p >= 0x7f)
            printf("\\u%04x", *p); /* keeps the output ASCII and valid */
        else
            putchar(*p);
    }
    putchar('"');
}

void json_finding(const kiln_lint_finding *f) {
    printf("{\"line\": %d, \"kind\": \"%s\", \"severity\": \"%s\", \"instruction\": ", f->line,
           kiln_lint_kind_name(f->kind), f->warning ? "warning" : "error");
    json_string(f->instruction);
    printf(", \"feature\": ");
    json_string(f->feature);
    printf(
        ", \"need_sm\": %d, \"need_arch\": %s, \"need_ptx\": \"%d.%d\", \"module_sm\": %d, \"module_ptx\": \"%d.%d\", "
        "\"message\": ",
        f->need_sm, f->need_arch ? "true" : "false", f->need_ptx / 10, f->need_ptx % 10, f->module_sm,
        f->module_ptx / 10, f->module_ptx % 10);
    json_string(f->message);
    putchar('}');
}

static void print_json(const char *path, const kiln_lint_report *rep, const char *error, int first) {
    printf("%s\n    {\"file\": ", first ? "" : ",");
    json_string(path);
    if (error) {
        printf(", \"error\": ");
        json_string(error);
        putchar('}');
        return;
    }
    const kiln_lint_module *m = kiln_lint_module_info(rep);
    printf(", \"target\": \"%s\", \"sm\": %d, \"ptx\": \"%d.%d\", \"instructions\": %zu, \"functions\": %zu, ",
           m->target, m->sm, m->ptx / 10, m->ptx % 10, m->instructions, m->functions);
    if (m->device_sm)
        printf("\"device_sm\": %d, \"runs_on_device\": %s, ", m->device_sm, m->runs_on_device ? "true" : "false");
    if (m->cuda)
        printf("\"cuda\": \"%d.%d\", \"cuda_loads\": %s, ", m->cuda / 1000, m->cuda % 1000 / 10,
               m->cuda_loads ? "true" : "false");
    if (m->dropped) printf("\"dropped\": %zu, ", m->dropped);
    printf("\"findings\": [");
    for (size_t i = 0; i < kiln_lint_count(rep); i++) {
        printf("%s\n        ", i ? "," : "");
        json_finding(kiln_lint_get(rep, i));
    }
    printf("%s]}", kiln_lint_count(rep) ? "\n    " : "");
}

static void print_text(const char *path, const kiln_lint_report *rep) {
    const kiln_lint_module *m = kiln_lint_module_info(rep);
    size_t errors = 0, refused = 0, n = kiln_lint_count(rep);
    for (size_t i = 0; i < n; i++) {
        const kiln_lint_finding *f = kiln_lint_get(rep, i);
        errors += !f->warning;
        refused += !f->warning && f->kind != KILN_LINT_DEVICE && f->kind != KILN_LINT_CUDA;
        printf("%s:%d: %s: %s\n    %s\n", path, f->line, f->warning ? "warning" : "error", f->message, f->instruction);
    }
    /* why a module does not load or run, when its .target and .version alone would: lines ptxas refuses */
    char because[96] = "";
    if (refused)
        snprintf(because, sizeof because, ": ptxas and the driver's JIT refuse the %zu error%s above", refused,
                 refused == 1 ? "" : "s");
    if (m->dropped) printf("%s: %zu more findings not shown (lint keeps the first %zu)\n", path, m->dropped, n);
    if (n)
        printf("%s: %zu error%s, %zu warning%s (.target %s, .version %d.%d)\n", path, errors, errors == 1 ? "" : "s",
               n - errors, n - errors == 1 ? "" : "s", m->target, m->ptx / 10, m->ptx % 10);
    if (m->device_sm)
        printf("%s: %s sm_%d%s (.target %s, .version %d.%d)\n", path, m->runs_on_device ? "runs on" : "cannot run on",
               m->device_sm, m->runs_on_device ? "" : because, m->target, m->ptx / 10, m->ptx % 10);
    if (m->cuda)
        printf("%s: %s CUDA %d.%d%s (.target %s, .version %d.%d)\n", path,
               m->cuda_loads ? "loads on a driver of" : "does not load on a driver of", m->cuda / 1000,
               m->cuda % 1000 / 10, m->cuda_loads ? "" : because, m->target, m->ptx / 10, m->ptx % 10);
}

/* Lints one file; returns CLI_OK, CLI_FINDINGS or CLI_USAGE (unreadable or not PTX). */
static int lint_file(const char *path, const lint_opts *o, int first) {
    char why[1100];
    size_t len = 0;
    void *text = NULL;
    kiln_lint_report *rep = NULL;
    kiln_error err = {0};
    /* bounded: a file over kiln's input limit, a FIFO or a device (/dev/zero) is an error, not read forever */
    if (kiln_read_input(strcmp(path, "-") ? path : NULL, "lint input", &text, &len, &err) != KILN_OK) {
        snprintf(why, sizeof why, "%s", err.msg);
    } else if (kiln_lint_is_binary(text, len)) { /* a cubin, fatbin or ELF file: cmd_lint_bin.c */
        int rc = lint_binary(path, text, len, o->device_sm, o->cuda, o->json, first);
        free(text);
        return rc;
    } else if (kiln_lint_cuda(text, len, o->device_sm, o->cuda, &rep, &err) != KILN_OK)
        snprintf(why, sizeof why, "%s: %s", path, err.msg);
    free(text);
    if (!rep) {
        if (o->json) print_json(path, NULL, why, first);
        cli_error("%s", why);
        return CLI_USAGE;
    }
    if (o->json)
        print_json(path, rep, NULL, first);
    else
        print_text(path, rep);
    int rc = kiln_lint_count(rep) ? CLI_FINDINGS : CLI_OK;
    kiln_lint_free(rep);
    return rc;
}

int cmd_lint(int argc, char **argv) {
    lint_opts o = {0};
    const char **files = calloc((size_t)argc, sizeof *files);
    int nfiles = 0;
    if (!files) return cli_error("out of memory");
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *value = NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            lint_usage(stdout);
            free(files);
            return CLI_OK;
        } else if (!strcmp(a, "--json")) {
            o.json = 1;
        } else if (!strcmp(a, "--sm") || !strncmp(a, "--sm=", 5) || !strcmp(a, "--device") || !strncmp(a, "--device=", 9)) {
            const char *eq = strchr(a, '=');
            value = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
            kiln_error err = {0};
            if (!value || kiln_lint_parse_sm(value, &o.device_sm, &err) != KILN_OK) {
                free(files);
                return value ? cli_error("--sm: %s", err.msg) : cli_error("--sm needs a value, e.g. --sm 80");
            }
        } else if (!strcmp(a, "--cuda") || !strncmp(a, "--cuda=", 7)) {
            value = a[6] == '=' ? a + 7 : (i + 1 < argc ? argv[++i] : NULL);
            kiln_error err = {0};
            if (!value || kiln_cuda_parse_version(value, &o.cuda, &err) != KILN_OK) {
                free(files);
                return value ? cli_error("--cuda: %s", err.msg) : cli_error("--cuda needs a value, e.g. --cuda 12.4");
            }
        } else if (a[0] == '-' && a[1]) {
            free(files);
            return cli_error("unknown option '%s' for lint; valid: --sm N, --cuda X.Y, --json, --help", a);
        } else {
            files[nfiles++] = a;
        }
    }
    if (!nfiles) {
        free(files);
        lint_usage(stderr);
        return cli_error("lint needs at least one PTX file");
    }
    int worst = CLI_OK;
    if (o.json) printf("{\"files\": [");
    for (int i = 0; i < nfiles; i++) {
        int rc = lint_file(files[i], &o, i == 0);
        if (rc == CLI_USAGE || (rc == CLI_FINDINGS && worst == CLI_OK)) worst = rc;
    }
    if (o.json) printf("\n]}\n");
    free(files);
    if (fflush(stdout) != 0 && errno != EPIPE) /* EPIPE: the reader has gone (kiln lint | head) */
        return cli_error("cannot write to standard output: %s", strerror(errno));
    return worst;
}
