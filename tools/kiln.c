/* tools/kiln.c - the kiln command line: dispatches subcommands, shared CLI helpers. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "kiln/kiln.h"

static const cli_command commands[] = {
    {"emit", "generate one kernel and print its PTX or LLVM IR", cmd_emit},
    {"list", "list kernel families, their parameters and the targets", cmd_list},
    {"bundle", "generate many variants in parallel into one bundle file (or C source)", cmd_bundle},
    {"bundle-info", "check a bundle and list what it holds", cmd_bundle_info},
    {"lint", "find architecture problems in PTX files (any compiler's)", cmd_lint},
    {"run", "run one kernel on the CPU emulator and check it against a float64 reference", cmd_run},
};
static const size_t ncommands = sizeof commands / sizeof commands[0];

int cli_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("kiln: error: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return CLI_USAGE;
}

char *cli_sm_list(char *buf, size_t size, int min_sm, bool arch, const char *sep) {
    int sms[16], n = kiln_targets(sms, 16);
    size_t len = 0;
    buf[0] = 0;
    for (int i = 0; i < n && len < size; i++) {
        char name[16];
        if (sms[i] >= min_sm && (arch || !kiln_sm_is_arch(sms[i]))) len += (size_t)snprintf(buf + len, size - len, "%s%s", len ? sep : "", kiln_sm_name(sms[i], name) + 3);
    }
    return buf;
}

const char *cli_valid_sms(void) {
    static char valid[256];
    return cli_sm_list(valid, sizeof valid, 0, true, ", ");
}

int cli_parse_sm(const char *text, int *sm) {
    int v = kiln_sm_parse(text);
    if (v) {
        *sm = v;
        return 0;
    }
    return cli_error("unsupported SM '%s'; valid: %s", text, cli_valid_sms());
}

int cli_bad_option(const char *cmd, const struct option *longopts, int c, char **argv, int optind_v) {
    const char *word = optind_v > 0 ? argv[optind_v - 1] : "?";
    if (c == ':') return cli_error("option '%s' needs a value; see 'kiln %s --help'", word, cmd);
    const char *eq = strchr(word, '=');
    if (!strncmp(word, "--", 2) && eq)
        for (const struct option *o = longopts; o->name; o++)
            if (o->has_arg == no_argument && strlen(o->name) == (size_t)(eq - word - 2) &&
                !strncmp(word + 2, o->name, strlen(o->name)))
                return cli_error("option '--%s' takes no value; see 'kiln %s --help'", o->name, cmd);
    return cli_error("unknown option '%s'; see 'kiln %s --help'", word, cmd);
}

int cli_write_output(const char *path, const char *data, size_t len) {
    if (!path || !strcmp(path, "-")) {
        if ((fwrite(data, 1, len, stdout) != len || fflush(stdout) != 0) && errno != EPIPE)
            return cli_error("cannot write to standard output: %s", strerror(errno));
        return CLI_OK;
    }
    kiln_error err;
    if (kiln_write_file(path, data, len, &err) != KILN_OK) return cli_error("%s", err.msg);
    return CLI_OK;
}

void cli_print_examples(FILE *to, const char *cmd, int run, char *spec, size_t spec_size) {
    kiln_gen *gen;
    kiln_error err = {0};
    char buf[16384];
    int n = 0;
    if (spec && spec_size) spec[0] = 0;
    if (kiln_gen_create(&gen, NULL, &err) != KILN_OK) return;
    if (kiln_family_examples(gen, NULL, buf, sizeof buf, &n, &err) == KILN_OK) {
        int k = 0;
        for (char *save = NULL, *l = strtok_r(buf, "\n", &save); l && (run || k < 1); l = strtok_r(NULL, "\n", &save), k++) {
            char *sm = strstr(l, " --sm ");
            if (k == 0 && spec && sm) snprintf(spec, spec_size, "%.*s", (int)(sm - l), l);
            if (!run && sm) sm[6 + strcspn(sm + 6, " ")] = 0; /* the spec and its --sm only */
            if (to) fprintf(to, "%s kiln %s %s\n", k ? "        " : "example:", cmd, l);
        }
    }
    kiln_gen_destroy(gen);
}

static void usage(FILE *to) {
    fprintf(to, "usage: kiln COMMAND [ARGS...]\n\nkiln generates GPU kernels (PTX) from kernel "
                "templates, without Triton or nvcc.\n\ncommands:\n");
    for (size_t i = 0; i < ncommands; i++) fprintf(to, "  %-12s %s\n", commands[i].name, commands[i].summary);
    fprintf(to, "\n'kiln COMMAND --help' describes one command. kiln %s, LLVM %s.\n",
            KILN_VERSION_STRING, kiln_llvm_version());
}

int main(int argc, char **argv) {
    /* A reader that stops early (kiln list | head) is not an error: the rest of standard output
     * is dropped (EPIPE, not a SIGPIPE death) and the command ends with its own status. */
    signal(SIGPIPE, SIG_IGN);
    char valid[256] = "";
    for (size_t i = 0; i < ncommands; i++)
        snprintf(valid + strlen(valid), sizeof valid - strlen(valid), "%s%s", i ? ", " : "", commands[i].name);
    if (argc < 2) return cli_error("missing command; valid: %s (see 'kiln --help')", valid);
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return CLI_OK;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("kiln %s (LLVM %s)\n", KILN_VERSION_STRING, kiln_llvm_version());
        return CLI_OK;
    }
    for (size_t i = 0; i < ncommands; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].run(argc - 1, argv + 1);
    return cli_error("unknown command '%s'; valid: %s (see 'kiln --help')", argv[1], valid);
}
