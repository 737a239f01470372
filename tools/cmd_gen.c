/* tools/cmd_gen.c - `kiln emit` (one kernel as PTX or LLVM IR) and `kiln list` (families, targets, variant matrices). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "kiln/kiln.h"

static void emit_usage(FILE *to) {
    fprintf(to,
            "usage: kiln emit FAMILY key=value... --sm N [--emit ptx|ll] [-o FILE]\n\n"
            "Generates one kernel for target sm_N and writes its PTX (default) or its optimized\n"
            "LLVM IR. The text starts with '// kiln.meta' lines: entry, parameters, launch geometry.\n\n"
            "  --sm N          target SM, required ('kiln list' shows the targets; CUDA 13's ptxas lacks sm_70)\n"
            "  --emit ptx|ll   output kind (default ptx)\n"
            "  -o, --output F  write to F (atomically) instead of standard output\n"
            "  --template-dir D  read templates from D instead of the built-in copies\n"
            "  --time          print the time of each stage on standard error (also KILN_TIME=1)\n"
            "  --pipeline kiln|o3  the IR pipeline: kiln's own (default) or LLVM's default<O3>\n\n");
    cli_print_examples(to, "emit", 0, NULL, 0);
    fprintf(to, "'kiln list' shows every family's parameters and examples.\n");
}

/* Joins argv words (FAMILY key=value ...) into one spec string. */
static int join_spec(int argc, char **argv, int first, char *buf, size_t size) {
    size_t n = 0;
    buf[0] = 0;
    for (int i = first; i < argc; i++) {
        int k = snprintf(buf + n, size - n, "%s%s", i > first ? " " : "", argv[i]);
        if (k < 0 || (size_t)k >= size - n) return cli_error("spec too long");
        n += (size_t)k;
    }
    return 0;
}

/* Prints where the time of one kiln_generate went (stderr, one stage a line). */
static void print_timing(FILE *to, const kiln_gen_timing *t) {
    fprintf(to, "kiln: stage times (ms of CPU time of the generating thread)\n");
    fprintf(to, "  %-34s %8.3f\n", "spec + template load", t->spec);
    fprintf(to, "  %-34s %8.3f\n", "template config()", t->config);
    if (t->builder >= 0) {
        fprintf(to, "  %-34s %8.3f\n", "template build(): Lua", t->build - t->builder);
        fprintf(to, "  %-34s %8.3f\n", "template build(): IR (builder)", t->builder);
    } else {
        fprintf(to, "  %-34s %8.3f\n", "template build(): Lua + IR", t->build);
    }
    fprintf(to, "  %-34s %8.3f\n", "verify", t->verify);
    fprintf(to, "  %-34s %8.3f\n", "IR pipeline", t->optimize);
    for (int i = 0; i < t->npasses; i++)
        if (t->passes[i].ms >= 0.005) fprintf(to, "    %-32s %8.3f\n", t->passes[i].name, t->passes[i].ms);
    fprintf(to, "  %-34s %8.3f\n", "codegen: IR passes", t->codegen_ir);
    fprintf(to, "  %-34s %8.3f\n", "codegen: instruction selection", t->isel);
    fprintf(to, "  %-34s %8.3f\n", "codegen: machine passes", t->codegen);
    fprintf(to, "  %-34s %8.3f\n", "codegen: PTX print", t->print);
    fprintf(to, "  %-34s %8.3f\n", "finish (text, metadata)", t->finish);
    fprintf(to, "  %-34s %8.3f\n", "total", t->total);
    fprintf(to, "  %-34s %8.3f\n", "total, wall clock", t->total_wall);
}

int cmd_emit(int argc, char **argv) {
    static const struct option longopts[] = {
        {"sm", required_argument, NULL, 's'}, {"emit", required_argument, NULL, 'e'},
        {"output", required_argument, NULL, 'o'}, {"template-dir", required_argument, NULL, 't'},
        {"time", no_argument, NULL, 'T'}, {"pipeline", required_argument, NULL, 'p'},
        {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
    int sm = 0, c;
    const char *time_env = getenv("KILN_TIME");
    int timing = time_env && *time_env && strcmp(time_env, "0");
    kiln_emit kind = KILN_EMIT_PTX;
    const char *out = NULL;
    kiln_gen_options gopt = {0};
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, ":o:h", longopts, NULL)) != -1) {
        switch (c) {
        case 's':
            if (cli_parse_sm(optarg, &sm)) return CLI_USAGE;
            break;
        case 'e':
            if (!strcmp(optarg, "ptx")) kind = KILN_EMIT_PTX;
            else if (!strcmp(optarg, "ll")) kind = KILN_EMIT_LL;
            else return cli_error("bad --emit '%s'; valid: ptx, ll", optarg);
            break;
        case 'o': out = optarg; break;
        case 't': gopt.template_dir = optarg; break;
        case 'T': timing = 1; break;
        case 'p':
            if (!strcmp(optarg, "kiln")) gopt.pipeline = KILN_PIPELINE_KILN;
            else if (!strcmp(optarg, "o3")) gopt.pipeline = KILN_PIPELINE_O3;
            else return cli_error("bad --pipeline '%s'; valid: kiln, o3", optarg);
            break;
        case 'h': emit_usage(stdout); return CLI_OK;
        default: return cli_bad_option("emit", longopts, c, argv, optind);
        }
    }
    if (optind >= argc) return cli_error("missing kernel family; usage: kiln emit FAMILY key=value... --sm N");
    if (!sm) return cli_error("missing --sm N (the target SM); valid: %s", cli_valid_sms());
    char spec[4096];
    if (join_spec(argc, argv, optind, spec, sizeof spec)) return CLI_USAGE;
    kiln_error err = {0};
    kiln_gen *gen;
    gopt.time_builder = timing;
    if (kiln_gen_create(&gen, &gopt, &err) != KILN_OK) return cli_error("%s", err.msg);
    kiln_module *m;
    int rc = CLI_OK;
    if (kiln_generate(gen, spec, sm, kind, &m, &err) != KILN_OK) {
        rc = cli_error("%s", err.msg);
    } else {
        rc = cli_write_output(out, kiln_module_text(m), kiln_module_size(m));
        kiln_module_free(m);
        if (timing) print_timing(stderr, kiln_gen_last_timing(gen));
    }
    kiln_gen_destroy(gen);
    return rc;
}

static void list_usage(FILE *to) {
    fprintf(to,
            "usage: kiln list\n"
            "       kiln list --variants FAMILY|all [--sm N] [--full]\n"
            "       kiln list --targets\n\n"
            "Lists kernel families with their parameters (type, default, allowed values) and the targets.\n"
            "--variants prints the variant matrix a family's template declares (docs/registry.md): the\n"
            "specs the ptxas matrix and its quality table check, one a line; 'all' every family's.\n\n"
            "  --sm N   the variants of sm_N (default: every SM from 75 up, each line 'sm_N SPEC')\n"
            "  --full   every variant (the KILN_TEST_FULL=1 matrix); default: the quick suite's\n"
            "--targets prints the SM table's occupancy facts, a header line then one line a target, tab-separated:\n"
            "sm, registers per SM, resident threads per SM, threads per block, shared memory per block (opt-in).\n");
}

/* The SM table's occupancy facts (include/kiln/target.h), for tools that model residency. */
static int list_targets(void) {
    int n;
    const kiln_target *t = kiln_target_all(&n);
    printf("sm\tregs_per_sm\tthreads_per_sm\tmax_threads\tsmem_optin_max\n");
    for (int i = 0; i < n; i++) {
        char name[16];
        printf("%s\t%u\t%u\t%u\t%u\n", kiln_sm_name(t[i].sm, name), t[i].regs_per_sm, t[i].threads_per_sm,
               t[i].max_threads, t[i].smem_optin_max);
    }
    return CLI_OK;
}

/* Prints the variants of family on sm (prefixed "sm_N " when prefix); 0 or CLI_USAGE. */
static int print_variants(kiln_gen *gen, const char *family, int sm, int full, int prefix) {
    static char buf[1 << 20]; /* one family on one SM (the backward attention's full list on sm_75: about 300 KB) */
    kiln_error err = {0};
    if (kiln_family_variants(gen, family, full, sm, buf, sizeof buf, NULL, &err) != KILN_OK) return cli_error("%s", err.msg);
    for (char *l = buf, *e; *l; l = e + 1) {
        e = strchr(l, '\n');
        char name[16];
        if (prefix) printf("%s ", kiln_sm_name(sm, name));
        printf("%.*s\n", (int)(e - l), l);
    }
    return CLI_OK;
}

static int list_variants(const char *family, int sm, int full) {
    kiln_error err = {0};
    kiln_gen *gen;
    if (kiln_gen_create(&gen, NULL, &err) != KILN_OK) return cli_error("%s", err.msg);
    char names[64][KILN_NAME_MAX];
    int nf = 1, rc = CLI_OK;
    if (!strcmp(family, "all")) nf = kiln_families(gen, names, 64);
    else snprintf(names[0], sizeof names[0], "%s", family);
    int sms[16], ns = 0;
    if (sm) sms[ns++] = sm;
    else
        for (int i = 0, all[16], n = kiln_targets(all, 16); i < n; i++)
            if (all[i] >= 75) sms[ns++] = all[i];
    for (int s = 0; s < ns && rc == CLI_OK; s++)
        for (int f = 0; f < nf && rc == CLI_OK; f++) rc = print_variants(gen, names[f], sms[s], full, !sm);
    kiln_gen_destroy(gen);
    return rc;
}

int cmd_list(int argc, char **argv) {
    static const struct option longopts[] = {{"variants", required_argument, NULL, 'v'}, {"sm", required_argument, NULL, 's'},
                                             {"full", no_argument, NULL, 'f'}, {"targets", no_argument, NULL, 't'},
                                             {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
    const char *variants = NULL;
    int c, sm = 0, full = 0, sm_given = 0, targets = 0;
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        switch (c) {
        case 'v': variants = optarg; break;
        case 's':
            if (cli_parse_sm(optarg, &sm)) return CLI_USAGE;
            sm_given = 1;
            break;
        case 'f': full = 1; break;
        case 't': targets = 1; break;
        case 'h': list_usage(stdout); return CLI_OK;
        default: return cli_bad_option("list", longopts, c, argv, optind);
        }
    }
    if (optind < argc) return cli_error("'kiln list' takes no arguments, got '%s'", argv[optind]);
    if (!variants && (sm_given || full)) return cli_error("--sm and --full go with --variants FAMILY");
    if (targets && variants) return cli_error("--targets and --variants are two listings; give one");
    if (targets) return list_targets();
    if (variants) return list_variants(variants, sm, full);
    kiln_error err = {0};
    kiln_gen *gen;
    if (kiln_gen_create(&gen, NULL, &err) != KILN_OK) return cli_error("%s", err.msg);
    static char buf[1 << 16];
    int rc = CLI_OK;
    if (kiln_describe(gen, buf, sizeof buf, &err) != KILN_OK) rc = cli_error("%s", err.msg);
    else fputs(buf, stdout);
    kiln_gen_destroy(gen);
    if (rc) return rc;
    int sms[16], n = kiln_targets(sms, 16);
    printf("\ntargets:");
    for (int i = 0; i < n; i++) {
        char name[16];
        printf(" %s", kiln_sm_name(sms[i], name));
    }
    printf("\n");
    return CLI_OK;
}
