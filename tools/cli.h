/* tools/cli.h - private header of the kiln command line: subcommands and shared helpers. */
#ifndef KILN_TOOLS_CLI_H
#define KILN_TOOLS_CLI_H

#include <stdbool.h>
#include <stdio.h>

/* Exit statuses: 0 success, 1 findings/failed check (lint, run), 2 usage or input errors. */
enum { CLI_OK = 0, CLI_FINDINGS = 1, CLI_USAGE = 2 };

typedef struct cli_command {
    const char *name;
    const char *summary;
    int (*run)(int argc, char **argv); /* argv[0] is the subcommand name */
} cli_command;

/* kiln.c */
int cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2))); /* returns CLI_USAGE */
int cli_parse_sm(const char *text, int *sm);                               /* 0 or CLI_USAGE */
/* The SM table's targets from min_sm up, joined by sep, into buf ("75, 80, ..., 90a" for messages;
   min_sm 75 without arch: the plain SMs CUDA 13's ptxas builds, the default bundle's — sm_90a only
   when asked for, since no template uses its features yet). Returns buf. */
char *cli_sm_list(char *buf, size_t size, int min_sm, bool arch, const char *sep);
const char *cli_valid_sms(void); /* "70, 75, 80, ..." from the SM table (a static buffer) */
/* The error for getopt_long's answer c to an option it could not take, named as the user typed it
   (argv[optind - 1]): c == ':' (optstring starts with ':') is a missing value; '--name=value' for
   one of longopts that takes none says so; anything else is an unknown option. Returns CLI_USAGE. */
struct option;
int cli_bad_option(const char *cmd, const struct option *longopts, int c, char **argv, int optind_v);
/* Writes data to path (kiln_write_file: devices and FIFOs in place, symlinks followed, regular
   files replaced atomically) or to stdout when path is NULL or "-". */
int cli_write_output(const char *path, const char *data, size_t len);
/* Prints the registry's examples (each template's K.examples, as `kiln list` shows them) as
   "kiln CMD FAMILY key=value... --sm N ..." lines, the first after "example: ": every one with its
   `kiln run` options (run = 1), else the first only, its spec and --sm. Returns the first example's
   spec ("FAMILY key=value...", without --sm) in spec (may be NULL), "" when none is declared; to NULL
   prints nothing. */
void cli_print_examples(FILE *to, const char *cmd, int run, char *spec, size_t spec_size);

/* cmd_gen.c */
int cmd_emit(int argc, char **argv);
int cmd_list(int argc, char **argv);

/* cmd_bundle.c */
int cmd_bundle(int argc, char **argv);
int cmd_bundle_info(int argc, char **argv);

/* cmd_lint.c */
int cmd_lint(int argc, char **argv);
struct kiln_lint_finding;
void json_string(const char *s);                      /* a JSON string, ASCII only */
void json_finding(const struct kiln_lint_finding *f); /* one finding as a JSON object */

/* cmd_lint_bin.c: lints a cubin, fatbin or ELF file already read; returns CLI_OK, CLI_FINDINGS or CLI_USAGE. */
int lint_binary(const char *path, const char *data, size_t len, int device_sm, int cuda, int json, int first);

/* cmd_run.c */
int cmd_run(int argc, char **argv);

#endif
