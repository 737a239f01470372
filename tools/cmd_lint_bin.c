/* tools/cmd_lint_bin.c - `kiln lint` on a cubin, fatbin or ELF file: its kernel images, their PTX lint, and whether
 * a device and driver can run them. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "kiln/lint.h"

static const char *const kind_names[] = {"cubin", "ptx", "lto-ir", "other"};

/* "cubin sm_80", "PTX compute_90 (.version 9.0, zstd)" */
static const char *image_label(const kiln_lint_image *im, char *buf, size_t cap) {
    if (im->kind == KILN_IMAGE_PTX)
        snprintf(buf, cap, "PTX compute_%s (.version %d.%d%s%s)", im->target + 3, im->ptx / 10, im->ptx % 10,
                 im->compression[0] ? ", " : "", im->compression);
    else
        snprintf(buf, cap, "%s %s",
                 im->kind == KILN_IMAGE_CUBIN   ? "cubin"
                 : im->kind == KILN_IMAGE_LTOIR ? "LTO IR"
                                                : "entry",
                 im->target);
    if (im->functions == 0) snprintf(buf + strlen(buf), cap - strlen(buf), " (no code)");
    return buf;
}

/* One line per run of containers holding the same images. */
static void print_containers(const char *path, const kiln_lint_bin_report *r) {
    const kiln_lint_binary *b = kiln_lint_bin_info(r);
    size_t n = kiln_lint_bin_count(r), i = 0;
    char prev[2048] = "", cur[2048];
    size_t run_first = 0, run_len = 0;
    for (size_t c = 0; c <= b->containers; c++) {
        size_t len = 0;
        cur[0] = '\0';
        for (; c < b->containers && i < n && kiln_lint_bin_image(r, i)->container == c; i++) {
            char label[96];
            if (len + 1 < sizeof cur)
                len += (size_t)snprintf(cur + len, sizeof cur - len, "%s%s", len ? ", " : "",
                                        image_label(kiln_lint_bin_image(r, i), label, sizeof label));
        }
        if (c < b->containers && run_len && !strcmp(cur, prev)) {
            run_len++;
            continue;
        }
        if (run_len && b->containers == 1)
            printf("%s: %s\n", path, prev[0] ? prev : "no images");
        else if (run_len == 1)
            printf("%s: container %zu: %s\n", path, run_first + 1, prev[0] ? prev : "no images");
        else if (run_len)
            printf("%s: containers %zu-%zu: %s\n", path, run_first + 1, run_first + run_len,
                   prev[0] ? prev : "no images");
        memcpy(prev, cur, sizeof prev);
        run_first = c, run_len = 1;
    }
}

static void print_text(const char *path, const kiln_lint_bin_report *r, size_t *errors, size_t *total) {
    const kiln_lint_binary *b = kiln_lint_bin_info(r);
    size_t n = kiln_lint_bin_count(r);
    printf("%s: %s, %zu fatbin container%s, %zu image%s\n", path, b->format, b->containers,
           b->containers == 1 ? "" : "s", n, n == 1 ? "" : "s");
    print_containers(path, r);
    for (size_t i = 0; i < n; i++) {
        const kiln_lint_image *im = kiln_lint_bin_image(r, i);
        const kiln_lint_report *ptx = kiln_lint_bin_ptx(r, i);
        char label[96];
        image_label(im, label, sizeof label);
        for (size_t k = 0; ptx && k < kiln_lint_count(ptx); k++) {
            const kiln_lint_finding *f = kiln_lint_get(ptx, k);
            *errors += !f->warning, (*total)++;
            printf("%s[%s @0x%zx]:%d: %s: %s\n    %s\n", path, label, im->offset, f->line,
                   f->warning ? "warning" : "error", f->message, f->instruction);
        }
        if (im->note[0] && !ptx && im->kind == KILN_IMAGE_PTX && strstr(im->note, "not linted"))
            printf("%s: note: %s at 0x%zx %s\n", path, label, im->offset, im->note);
    }
    for (size_t i = 0; i < kiln_lint_bin_findings(r); i++) {
        const kiln_lint_finding *f = kiln_lint_bin_finding(r, i);
        *errors += !f->warning, (*total)++;
        printf("%s: %s: %s\n    %s\n", path, f->warning ? "warning" : "error", f->message, f->instruction);
    }
    if (*total)
        printf("%s: %zu error%s, %zu warning%s\n", path, *errors, *errors == 1 ? "" : "s", *total - *errors,
               *total - *errors == 1 ? "" : "s");
    if (b->verdict[0]) printf("%s: %s\n", path, b->verdict);
}

static void print_json(const kiln_lint_bin_report *r, size_t *total) {
    const kiln_lint_binary *b = kiln_lint_bin_info(r);
    size_t n = kiln_lint_bin_count(r);
    printf(", \"format\": \"%s\", \"containers\": %zu, ", b->format, b->containers);
    if (b->device_sm)
        printf("\"device_sm\": %d, \"runs_on_device\": %s, ", b->device_sm, b->runs_on_device ? "true" : "false");
    if (b->cuda)
        printf("\"cuda\": \"%d.%d\", \"cuda_loads\": %s, ", b->cuda / 1000, b->cuda % 1000 / 10,
               b->cuda_loads ? "true" : "false");
    if (b->verdict[0]) {
        printf("\"verdict\": ");
        json_string(b->verdict);
        printf(", ");
    }
    printf("\"images\": [");
    for (size_t i = 0; i < n; i++) {
        const kiln_lint_image *im = kiln_lint_bin_image(r, i);
        const kiln_lint_report *ptx = kiln_lint_bin_ptx(r, i);
        printf("%s\n        {\"kind\": \"%s\", \"target\": \"%s\", \"sm\": %d, \"suffix\": \"%s\", ", i ? "," : "",
               kind_names[im->kind], im->target, im->sm,
               im->suffix == 'a'   ? "a"
               : im->suffix == 'f' ? "f"
                                   : "");
        if (im->kind == KILN_IMAGE_PTX) printf("\"ptx\": \"%d.%d\", ", im->ptx / 10, im->ptx % 10);
        if (im->functions >= 0) printf("\"functions\": %ld, ", im->functions);
        printf("\"container\": %zu, \"offset\": %zu, \"size\": %zu, \"compression\": \"%s\", ", im->container,
               im->offset, im->size, im->compression);
        if (b->device_sm) printf("\"runs_on_device\": %s, ", im->runs_on_device ? "true" : "false");
        if (b->cuda) printf("\"cuda_loads\": %s, ", im->cuda_loads ? "true" : "false");
        printf("\"note\": ");
        json_string(im->note);
        if (ptx) {
            printf(", \"findings\": [");
            for (size_t k = 0; k < kiln_lint_count(ptx); k++) {
                printf("%s", k ? ", " : "");
                json_finding(kiln_lint_get(ptx, k));
                (*total)++;
            }
            printf("]");
        }
        printf("}");
    }
    printf("%s], \"findings\": [", n ? "\n    " : "");
    for (size_t i = 0; i < kiln_lint_bin_findings(r); i++) {
        printf("%s\n        ", i ? "," : "");
        json_finding(kiln_lint_bin_finding(r, i));
        (*total)++;
    }
    printf("%s]}", kiln_lint_bin_findings(r) ? "\n    " : "");
}

int lint_binary(const char *path, const char *data, size_t len, int device_sm, int cuda, int json, int first) {
    kiln_lint_bin_report *r = NULL;
    kiln_error err = {0};
    if (json) {
        printf("%s\n    {\"file\": ", first ? "" : ",");
        json_string(path);
    }
    if (kiln_lint_bin(data, len, device_sm, cuda, &r, &err) != KILN_OK) {
        if (json) {
            printf(", \"error\": ");
            json_string(err.msg);
            putchar('}');
        }
        return cli_error("%s: %s", path, err.msg);
    }
    size_t errors = 0, total = 0;
    if (json)
        print_json(r, &total);
    else
        print_text(path, r, &errors, &total);
    kiln_lint_bin_free(r);
    return total ? CLI_FINDINGS : CLI_OK;
}
