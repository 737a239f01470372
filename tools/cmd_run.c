/* tools/cmd_run.c - `kiln run`: one kernel on the CPU emulator, checked against the float64 reference. */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "kiln/emu.h"
#include "kiln/emu_case.h"
#include "kiln/emu_profile.h"
#include "kiln/kiln.h"

static void run_usage(FILE *to) {
    fprintf(to,
            "usage: kiln run FAMILY key=value... --sm N --rows R [--hidden H] [--seed S]\n"
            "                [--input KIND] [--eps E] [--twice] [--race] [--profile]\n"
            "                [--seq-k N] [--batch B] [--heads H[:K]] [--splits N]   (attention)\n"
            "                [--window L,R] [--softcap C] [--alibi] [--dropout P [--dropout-offset N]]\n"
            "                [--varlen L,L,... [--varlen-k L,L,...] [--seqused-k N,N,...]]\n"
            "                [--paged P] [--leftpad] [--batch-idx] [--append N]      (paged=true)\n\n"
            "Generates the kernel for sm_N, runs the very module that becomes PTX on the CPU\n"
            "emulator with generated inputs, and compares every output with a float64 reference.\n"
            "Prints the largest error per output and how close it came to its tolerance (derived\n"
            "from the dtypes and the shape; each family's reference, templates/FAMILY.ref.c).\n\n"
            "required:\n"
            "  --sm N        target SM ('kiln list' shows the targets)\n"
            "  --rows R      rows (1..1048576); for attention, seq_q\n"
            "optional:\n"
            "  --hidden H    row length, needed when the spec says hidden=launch\n"
            "  --seed S      input seed (default 1)\n"
            "  --input KIND  random (default), large-mean, constant, special (NaN/Inf), mixed\n"
            "  --eps E       LayerNorm epsilon (default 1e-5)\n"
            "  --twice       run every block twice, threads in opposite orders; a difference is a race\n"
            "  --race        check shared memory by happens-before: two threads' accesses to a byte, one\n"
            "                a write, that no barrier, warp sync, mbarrier or cp.async wait orders are a\n"
            "                race (docs/emulator.md \"Races\")\n"
            "  --profile     also print the emulator's profile: shared-memory bank conflicts, warp\n"
            "                instruction mix (whole kernel and hot loop), global bytes (docs/profile.md)\n"
            "attention: --rows is seq_q; also\n"
            "  --seq-k N     keys (default: seq_q)\n"
            "  --batch B     batch (default 1)\n"
            "  --heads H[:K] query heads, key/value heads, each 1..65535 (default 2:2; K must divide H)\n"
            "  --splits N    splitkv=true (split-KV decoding): key splits (1..1024, default 4)\n"
            "  --window L,R  window=true: keys a query sees to its left and right, each -1 (unbounded,\n"
            "                the default) or 0..1048576\n"
            "  --softcap C   softcap=true (needed there): scores become C tanh(score / C), C > 0\n"
            "  --alibi       alibi=true (implied by it): slopes 2^(-8(h+1)/H), the ALiBi paper's\n"
            "  --dropout P   dropout=true (needed there): rate 0 <= P < 1; the mask's Philox seed is --seed\n"
            "  --dropout-offset N  dropout=true: the Philox offset (default 0, 0..2^53)\n"
            "  --varlen L,.. varlen=true (needed there): the packed sequences' query lengths, one per\n"
            "                sequence (1..1024 of them, each 0..1048576; --rows is then optional)\n"
            "  --varlen-k L,...\n"
            "                their key lengths, as many (default: the query lengths)\n"
            "  --seqused-k N,...\n"
            "                the forward with varlen=true: the keys each sequence uses (seqused_k), each at\n"
            "                most its key length\n"
            "  --paged P     paged=true (needed there): pages of P keys (>= 16, a multiple or a divisor of\n"
            "                the kernel's key tile), shuffled in the block table; --seq-k is the capacity:\n"
            "                entry 0 full, entry 1 empty (cache_seqlens 0), the others drawn\n"
            "  --leftpad     paged=true: cache_leftpad of a third of each sequence\n"
            "  --batch-idx   paged=true: cache_batch_idx, entry b reading block-table row (b + 1) %% batch\n"
            "  --append N    append=true: N new keys per sequence written at cache_seqlens and attended to\n"
            "A kernel whose launch description runs others (a norm backward and its reduce kernel, the\n"
            "split-KV kernel and its combine kernel, the attention backward's steps) runs them all, and\n"
            "the sequence's outputs are checked (docs/registry.md).\n\n"
            "A NOTE line says when the check is weak: every attention row fully masked (zeros against\n"
            "zeros, e.g. causal=top_left with a window narrower than seq_k - seq_q), or one key per row.\n\n"
            "exit status: 0 every output within tolerance, 1 a mismatch or an emulator fault,\n"
            "2 bad input.\n\n");
    cli_print_examples(to, "run", 1, NULL, 0);
    fprintf(to, "('kiln list' shows every family's examples: each template's K.examples)\n");
}

typedef struct run_opts {
    int sm, rows, hidden, twice, race, profile;
    int seq_k, batch, heads_q, heads_kv, splits; /* attention */
    int window, window_left, window_right, alibi;
    int page_size, leftpad, batch_idx, append; /* paged=true */
    float softcap;
    double dropout, dropout_offset; /* dropout: -1 not given */
    int nvarlen, nvarlen_k, nused; /* --varlen, --varlen-k, --seqused-k */
    int varlen_q[1024], varlen_k[1024], seqused_k[1024];
    unsigned long long seed;
    float eps;
    kiln_ln_input input;
} run_opts;

/* Status of a failed library call: faults found by the emulator are findings (1), the
 * rest is bad input (2). */
static int report_error(const kiln_error *err) {
    fprintf(stderr, "kiln: %s: %s\n", err->status == KILN_EEMU ? "emulator fault" : "error", err->msg);
    return err->status == KILN_EEMU ? CLI_FINDINGS : CLI_USAGE;
}

/* The case's options from the command line's (a family reads the sizes its problem has). */
static kiln_case_opts case_opts(const run_opts *o) {
    kiln_case_opts co = {.sm = o->sm, .seed = o->seed, .input = o->input, .eps = o->eps, .twice = o->twice,
                         .race = o->race};
    kiln_case_opts_set(&co, "rows", o->rows);
    if (o->hidden) kiln_case_opts_set(&co, "hidden", o->hidden);
    if (o->seq_k) kiln_case_opts_set(&co, "seq_k", o->seq_k);
    if (o->batch) kiln_case_opts_set(&co, "batch", o->batch);
    if (o->heads_q) kiln_case_opts_set(&co, "heads_q", o->heads_q), kiln_case_opts_set(&co, "heads_kv", o->heads_kv);
    if (o->splits) kiln_case_opts_set(&co, "splits", o->splits);
    if (o->window) kiln_case_opts_set(&co, "window_left", o->window_left), kiln_case_opts_set(&co, "window_right", o->window_right);
    if (o->softcap > 0) kiln_case_opts_set(&co, "softcap", o->softcap);
    if (o->alibi) kiln_case_opts_set(&co, "alibi", 1);
    if (o->dropout >= 0) kiln_case_opts_set(&co, "dropout", o->dropout);
    if (o->dropout_offset >= 0) kiln_case_opts_set(&co, "dropout_offset", o->dropout_offset);
    if (o->nvarlen) {
        co.nvarlen = o->nvarlen, co.varlen_q = o->varlen_q;
        co.varlen_k = o->nvarlen_k ? o->varlen_k : NULL, co.seqused_k = o->nused ? o->seqused_k : NULL;
    }
    if (o->page_size) kiln_case_opts_set(&co, "page_size", o->page_size);
    if (o->leftpad) kiln_case_opts_set(&co, "leftpad", 1);
    if (o->batch_idx) kiln_case_opts_set(&co, "batch_idx", 1);
    if (o->append) kiln_case_opts_set(&co, "append", o->append);
    return co;
}

/* Runs the case and prints its report: the problem, each launch, each output's largest errors and
 * how close it came to its tolerance (truncated, so that a pass never shows as 1.000), the verdict. */
static int run_case(kiln_case *c, const run_opts *o) {
    const kiln_kernel_meta *m = kiln_emu_kernel_meta(kiln_case_kernel(c));
    kiln_error err = {0};
    char problem[256];
    kiln_case_describe(c, problem, sizeof problem);
    printf("%s  %s  %s  seed %llu%s%s\n", m->spec, kiln_sm_name(o->sm, (char[16]){0}), problem, o->seed, o->twice ? "  (every block twice)" : "",
           o->race ? "  (race check)" : "");
    char note[256];
    kiln_case_note(c, note, sizeof note);
    if (note[0]) printf("NOTE: %s\n", note);
    if (kiln_case_run(c, &err) != KILN_OK) return report_error(&err);
    for (int i = 0; i < kiln_case_nsteps(c); i++) {
        const kiln_case_step *s = kiln_case_step_at(c, i);
        const kiln_kernel_meta *sm = kiln_emu_kernel_meta(s->kernel);
        unsigned blocks = s->grid[0] * s->grid[1] * s->grid[2];
        printf("  %s: %u blocks of %u threads, emulated in %.1f ms\n", sm->entry, blocks,
               sm->block[0] * sm->block[1] * sm->block[2], s->ms);
    }
    long bad = kiln_case_check(c);
    int width = 4;
    for (int i = 0; i < kiln_case_noutputs(c); i++) {
        int n = (int)strlen(kiln_case_output_at(c, i)->name);
        if (n > width) width = n;
    }
    for (int i = 0; i < kiln_case_noutputs(c); i++) {
        const kiln_case_output *r = kiln_case_output_at(c, i);
        printf("  %-*s  max |err| %.3e", width, r->name, r->max_abs);
        if (r->show_rel) printf("  max rel %.3e", r->max_rel);
        printf("  worst %.3f of tolerance  %s\n", floor(r->worst * 1000) / 1000, r->bad ? "FAIL" : "ok");
    }
    for (int i = 0; i < kiln_case_noutputs(c); i++) {
        const kiln_case_output *r = kiln_case_output_at(c, i);
        if (r->bad) printf("  %s: %ld values out of tolerance; first: %s\n", r->name, r->bad, r->first);
    }
    const char *noun = kiln_case_noun(c);
    if (bad) printf("FAIL: %ss differ from the float64 reference\n", noun);
    else printf("PASS: every %s within tolerance\n", noun);
    return bad ? CLI_FINDINGS : CLI_OK;
}

/* The profile of the run (kiln/emu_profile.h; rules in docs/profile.md). */
static int print_profile(const kiln_emu_kernel *k) {
    kiln_emu_profile p;
    kiln_error err = {0};
    if (kiln_emu_profile_get(k, &p, &err) != KILN_OK) return report_error(&err);
    printf("profile (emulator, rules in docs/profile.md): %llu blocks, %llu warps\n", (unsigned long long)p.blocks,
           (unsigned long long)p.warps);
    printf("  warp instructions    whole kernel   per warp    hot loop (%u of %u basic blocks, %llu trips/kernel)\n",
           p.hot_blocks, p.basic_blocks, (unsigned long long)p.hot_trips);
    uint64_t other = 0, hot_other = 0;
    for (int c = 0; c < KILN_PROF_CLASSES; c++) {
        bool hopper = c >= KILN_PROF_WGMMA && c <= KILN_PROF_TMA_REDUCE; /* rows only for kernels that use them */
        if (hopper && !p.inst[c] && !p.hot_inst[c]) continue;
        printf("    %-18s %12llu %10.1f %12llu\n", kiln_prof_class_name((kiln_prof_class)c), (unsigned long long)p.inst[c],
               p.warps ? (double)p.inst[c] / (double)p.warps : 0.0, (unsigned long long)p.hot_inst[c]);
        if (c != KILN_PROF_MMA) other += p.inst[c], hot_other += p.hot_inst[c];
    }
    if (p.inst[KILN_PROF_MMA])
        printf("  mma : other          1 : %.2f (whole kernel)   1 : %.2f (hot loop)\n", (double)other / (double)p.inst[KILN_PROF_MMA],
               p.hot_inst[KILN_PROF_MMA] ? (double)hot_other / (double)p.hot_inst[KILN_PROF_MMA] : 0.0);
    printf("  shared memory        requests   wavefronts    conflicts   hot: requests  conflicts\n");
    uint64_t conflicts = 0, hot_conflicts = 0;
    for (int s = 0; s < KILN_SMEM_KINDS; s++) {
        const kiln_smem_cost *c = &p.smem[s], *h = &p.hot_smem[s];
        printf("    %-16s %12llu %12llu %12llu %15llu %10llu\n", kiln_prof_smem_name((kiln_prof_smem)s),
               (unsigned long long)c->requests, (unsigned long long)c->wavefronts, (unsigned long long)c->conflicts,
               (unsigned long long)h->requests, (unsigned long long)h->conflicts);
        conflicts += c->conflicts, hot_conflicts += h->conflicts;
    }
    printf("  bank conflicts       %llu (hot loop %llu)\n", (unsigned long long)conflicts, (unsigned long long)hot_conflicts);
    printf("  global memory        %llu B loaded, %llu B stored; per block %.0f B, %.0f B\n",
           (unsigned long long)p.global_ld_bytes, (unsigned long long)p.global_st_bytes,
           p.blocks ? (double)p.global_ld_bytes / (double)p.blocks : 0.0,
           p.blocks ? (double)p.global_st_bytes / (double)p.blocks : 0.0);
    unsigned n = kiln_emu_profile_nsites(k), shown = 0;
    for (unsigned i = 0; i < n; i++) {
        kiln_smem_site site;
        if (kiln_emu_profile_site(k, i, &site) || !site.cost.conflicts) continue;
        if (shown++ < 12)
            printf("  conflicts at %s%s: %llu requests, %llu wavefronts for %llu\n", site.where, site.hot ? " (hot)" : "",
                   (unsigned long long)site.cost.requests, (unsigned long long)site.cost.wavefronts,
                   (unsigned long long)site.cost.ideal);
    }
    if (shown > 12) printf("  ... and %u more sites with conflicts\n", shown - 12);
    return CLI_OK;
}

static int parse_int(const char *opt, const char *v, long lo, long hi, long *out) {
    char *end;
    long x = strtol(v, &end, 10);
    if (!*v || *end || x < lo || x > hi) return cli_error("bad %s '%s'; valid: %ld..%ld", opt, v, lo, hi);
    *out = x;
    return 0;
}

/* --heads H or H:K: query heads, key/value heads; each 1..65535, K divides H. */
static int parse_heads(const char *text, run_opts *o) {
    static const char *form = "give H or H:K, e.g. --heads 32 or --heads 32:8";
    char *end;
    const char *colon = strchr(text, ':');
    long h = strtol(text, &end, 10);
    if (end == text || (colon ? end != colon : *end != 0))
        return cli_error("bad --heads '%s': the query head count is not a whole number; %s", text, form);
    if (h < 1 || h > 65535)
        return cli_error("bad --heads '%s': query heads must be %s; %s", text, h < 1 ? "at least 1" : "at most 65535", form);
    long k = h;
    if (colon) {
        const char *ks = colon + 1;
        k = strtol(ks, &end, 10);
        if (end == ks || *end)
            return cli_error("bad --heads '%s': the key/value head count after ':' is not a whole number; %s", text, form);
        if (k < 1 || k > 65535)
            return cli_error("bad --heads '%s': key/value heads must be %s; %s", text, k < 1 ? "at least 1" : "at most 65535",
                             form);
        if (h % k)
            return cli_error("bad --heads '%s': %ld key/value heads cannot be shared evenly by %ld query heads "
                             "(key/value heads must divide query heads: each serves H/K of them)", text, k, h);
    }
    o->heads_q = (int)h, o->heads_kv = (int)k;
    return 0;
}

/* A list of whole numbers lo..hi, comma-separated, 1..1024 of them (--varlen, --varlen-k, --seqused-k). */
static int parse_list(const char *opt, const char *text, long lo, long hi, int *out, int *n) {
    const char *at = text;
    *n = 0;
    for (;;) {
        char *end;
        long x = strtol(at, &end, 10);
        if (end == at || (*end && *end != ','))
            return cli_error("bad %s '%s': item %d is not a whole number; give comma-separated lengths, e.g. %s 0,1,37,300",
                             opt, text, *n + 1, opt);
        if (x < lo || x > hi)
            return cli_error("bad %s '%s': item %d is %ld; valid: %ld..%ld", opt, text, *n + 1, x, lo, hi);
        if (*n == 1024) return cli_error("bad %s '%s': more than 1024 sequences", opt, text);
        out[(*n)++] = (int)x;
        if (!*end) return 0;
        at = end + 1;
    }
}

/* The varlen lists agree: as many key lengths and used keys as sequences, each used count within its keys. */
static int check_varlen(run_opts *o) {
    if (!o->nvarlen && (o->nvarlen_k || o->nused))
        return cli_error("%s needs --varlen L,L,... (the sequences' query lengths)", o->nvarlen_k ? "--varlen-k" : "--seqused-k");
    if (o->nvarlen_k && o->nvarlen_k != o->nvarlen)
        return cli_error("--varlen-k gives %d key lengths for %d sequences (--varlen); give one per sequence", o->nvarlen_k,
                         o->nvarlen);
    if (o->nused && o->nused != o->nvarlen)
        return cli_error("--seqused-k gives %d counts for %d sequences (--varlen); give one per sequence", o->nused, o->nvarlen);
    for (int b = 0; b < o->nused; b++) {
        int keys = o->nvarlen_k ? o->varlen_k[b] : o->varlen_q[b];
        if (o->seqused_k[b] > keys)
            return cli_error("bad --seqused-k: sequence %d uses %d keys but has %d; valid: 0..%d", b, o->seqused_k[b], keys, keys);
    }
    int most = 1;
    for (int b = 0; b < o->nvarlen; b++) most = o->varlen_q[b] > most ? o->varlen_q[b] : most;
    if (o->nvarlen && !o->rows) o->rows = most; /* seq_q for the header: the longest sequence */
    return 0;
}

/* --window L,R: each side -1 (unbounded) or 0..1048576. */
static int parse_window(const char *text, run_opts *o) {
    static const char *form = "give L,R, each -1 (unbounded) or 0..1048576, e.g. --window 4095,0";
    char *end;
    long side[2];
    const char *at = text;
    for (int i = 0; i < 2; i++) {
        side[i] = strtol(at, &end, 10);
        if (end == at || (i == 0 ? *end != ',' : *end != 0) || side[i] < -1 || side[i] > 1 << 20)
            return cli_error("bad --window '%s': %s", text, form);
        at = end + 1;
    }
    o->window = 1, o->window_left = (int)side[0], o->window_right = (int)side[1];
    return 0;
}

static int parse_opts(int argc, char **argv, run_opts *o) {
    static const struct option longopts[] = {
        {"sm", required_argument, NULL, 's'},   {"rows", required_argument, NULL, 'r'},
        {"hidden", required_argument, NULL, 'H'}, {"seed", required_argument, NULL, 'S'},
        {"input", required_argument, NULL, 'i'}, {"eps", required_argument, NULL, 'e'},
        {"twice", no_argument, NULL, 't'},      {"help", no_argument, NULL, 'h'},
        {"race", no_argument, NULL, 'R'},
        {"seq-k", required_argument, NULL, 'K'}, {"batch", required_argument, NULL, 'B'},
        {"heads", required_argument, NULL, 'N'}, {"profile", no_argument, NULL, 'P'},
        {"splits", required_argument, NULL, 'X'}, {"window", required_argument, NULL, 'W'},
        {"softcap", required_argument, NULL, 'C'}, {"alibi", no_argument, NULL, 'A'},
        {"dropout", required_argument, NULL, 'D'}, {"dropout-offset", required_argument, NULL, 'O'},
        {"varlen", required_argument, NULL, 'V'}, {"varlen-k", required_argument, NULL, 'L'},
        {"seqused-k", required_argument, NULL, 'U'},
        {"paged", required_argument, NULL, 'G'}, {"leftpad", no_argument, NULL, 'E'},
        {"batch-idx", no_argument, NULL, 'I'}, {"append", required_argument, NULL, 'J'},
        {NULL, 0, NULL, 0}};
    int c;
    long v;
    char *end;
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        switch (c) {
        case 's': if (cli_parse_sm(optarg, &o->sm)) return CLI_USAGE; break;
        case 'r': if (parse_int("--rows", optarg, 1, 1 << 20, &v)) return CLI_USAGE; o->rows = (int)v; break;
        case 'H': if (parse_int("--hidden", optarg, 1, 1 << 20, &v)) return CLI_USAGE; o->hidden = (int)v; break;
        case 'S':
            o->seed = strtoull(optarg, &end, 10);
            if (!*optarg || *end || *optarg == '-') return cli_error("bad --seed '%s'; valid: a non-negative integer", optarg);
            break;
        case 'i':
            if (kiln_ln_input_parse(optarg, &o->input))
                return cli_error("bad --input '%s'; valid: random, large-mean, constant, special, mixed", optarg);
            break;
        case 'e':
            o->eps = strtof(optarg, &end);
            if (!*optarg || *end || !(o->eps > 0)) return cli_error("bad --eps '%s'; valid: a positive number", optarg);
            break;
        case 't': o->twice = 1; break;
        case 'R': o->race = 1; break;
        case 'P': o->profile = 1; break;
        case 'K': if (parse_int("--seq-k", optarg, 1, 1 << 20, &v)) return CLI_USAGE; o->seq_k = (int)v; break;
        case 'B': if (parse_int("--batch", optarg, 1, 65535, &v)) return CLI_USAGE; o->batch = (int)v; break;
        case 'X': if (parse_int("--splits", optarg, 1, 1024, &v)) return CLI_USAGE; o->splits = (int)v; break;
        case 'N': if (parse_heads(optarg, o)) return CLI_USAGE; break;
        case 'W': if (parse_window(optarg, o)) return CLI_USAGE; break;
        case 'C':
            o->softcap = strtof(optarg, &end);
            if (!*optarg || *end || !(o->softcap > 0) || isinf(o->softcap))
                return cli_error("bad --softcap '%s'; valid: a finite number > 0 (e.g. 50)", optarg);
            break;
        case 'A': o->alibi = 1; break;
        case 'D':
            o->dropout = strtod(optarg, &end);
            if (!*optarg || *end || !(o->dropout >= 0 && o->dropout < 1))
                return cli_error("bad --dropout '%s'; valid: a rate 0 <= P < 1 (e.g. 0.1)", optarg);
            break;
        case 'O':
            o->dropout_offset = strtod(optarg, &end);
            if (!*optarg || *end || !(o->dropout_offset >= 0 && o->dropout_offset <= 0x1p53) ||
                o->dropout_offset != (double)(long long)o->dropout_offset)
                return cli_error("bad --dropout-offset '%s'; valid: a whole number 0..2^53", optarg);
            break;
        case 'V': if (parse_list("--varlen", optarg, 0, 1 << 20, o->varlen_q, &o->nvarlen)) return CLI_USAGE; break;
        case 'L': if (parse_list("--varlen-k", optarg, 0, 1 << 20, o->varlen_k, &o->nvarlen_k)) return CLI_USAGE; break;
        case 'U': if (parse_list("--seqused-k", optarg, 0, 1 << 20, o->seqused_k, &o->nused)) return CLI_USAGE; break;
        case 'G': if (parse_int("--paged", optarg, 1, 1 << 20, &v)) return CLI_USAGE; o->page_size = (int)v; break;
        case 'E': o->leftpad = 1; break;
        case 'I': o->batch_idx = 1; break;
        case 'J': if (parse_int("--append", optarg, 1, 1 << 16, &v)) return CLI_USAGE; o->append = (int)v; break;
        case 'h': run_usage(stdout); return -1;
        default: return cli_bad_option("run", longopts, c, argv, optind);
        }
    }
    return 0;
}

int cmd_run(int argc, char **argv) {
    run_opts o = {.seed = 1, .eps = 1e-5f, .input = KILN_LN_RANDOM, .dropout = -1, .dropout_offset = -1};
    /* options may come anywhere: let getopt permute, the spec words are what remains */
    int rc = parse_opts(argc, argv, &o);
    if (rc) return rc < 0 ? CLI_OK : rc;
    if (check_varlen(&o)) return CLI_USAGE;
    if (optind >= argc) return cli_error("missing kernel family; usage: kiln run FAMILY key=value... --sm N --rows R");
    if (!o.sm) return cli_error("missing --sm N (the target SM, required); valid: %s", cli_valid_sms());
    if (!o.rows) return cli_error("missing --rows R (how many rows to run, required; for attention, seq_q)");
    if (!kiln_ref_find(argv[optind]))
        return cli_error("kiln run has no reference for family '%s'; valid: %s", argv[optind], kiln_ref_names());
    char spec[4096] = "";
    for (int i = optind, n = 0; i < argc; i++) {
        int k = snprintf(spec + n, sizeof spec - (size_t)n, "%s%s", i > optind ? " " : "", argv[i]);
        if (k < 0 || (size_t)k >= sizeof spec - (size_t)n) return cli_error("spec too long");
        n += k;
    }
    kiln_error err = {0};
    kiln_gen *gen = NULL;
    kiln_emu *emu = NULL;
    kiln_case *c = NULL;
    kiln_case_opts co = case_opts(&o);
    if (kiln_gen_create(&gen, NULL, &err) != KILN_OK || kiln_emu_create(&emu, &err) != KILN_OK) {
        rc = cli_error("%s", err.msg);
    } else if (kiln_emu_set_profile(emu, o.profile), kiln_case_create(&c, gen, emu, spec, &co, &err) != KILN_OK) {
        rc = report_error(&err);
    } else {
        rc = run_case(c, &o);
        if (o.profile && rc != CLI_USAGE) {
            int prc = print_profile(kiln_case_kernel(c));
            if (prc) rc = prc;
        }
    }
    kiln_case_free(c);
    kiln_emu_destroy(emu);
    kiln_gen_destroy(gen);
    return rc;
}
