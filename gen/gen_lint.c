/* gen/gen_lint.c - kiln lint: checks PTX statements against the requirement tables and the module's target. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gen.h"
#include "kiln/lint.h"

enum { MAX_MODS = 24, MAX_FINDINGS = 10000 };

struct kiln_lint_report {
    kiln_lint_module module;
    kiln_lint_finding *findings;
    size_t count, cap;
    size_t target_stmt; /* index of the governing .target statement */
    size_t version_stmt; /* index of the .version statement */
    size_t lost;        /* with a device SM: lines that need more than it */
    bool oom;
};

typedef struct span {
    const char *s;
    size_t len;
} span;

/* The largest needs that one statement's matching rules add up to. */
typedef struct need {
    const gen_lint_rule *sm_rule, *ptx_rule, *arch_rule;
} need;

/* ---- matching rules ---- */

/* "a|b|c" against one word; "*" matches any. */
static bool alt_match(const char *alts, size_t alen, span w) {
    if (alen == 1 && alts[0] == '*') return true;
    for (const char *a = alts, *end = alts + alen; a < end;) {
        const char *bar = memchr(a, '|', (size_t)(end - a));
        size_t n = (size_t)((bar ? bar : end) - a);
        if (n == w.len && memcmp(a, w.s, n) == 0) return true;
        a = bar ? bar + 1 : end;
    }
    return false;
}

/* The pattern's '.'-separated elements against mods: "*" matches any run, others one modifier. */
static bool glob(const char *pat, const span *mods, size_t n) {
    if (!*pat) return n == 0;
    const char *dot = strchr(pat, '.');
    size_t elen = dot ? (size_t)(dot - pat) : strlen(pat);
    const char *rest = dot ? dot + 1 : pat + elen;
    if (elen == 1 && *pat == '*') {
        for (size_t k = 0; k <= n; k++)
            if (glob(rest, mods + k, n - k)) return true;
        return false;
    }
    return n > 0 && alt_match(pat, elen, mods[0]) && glob(rest, mods + 1, n - 1);
}

/* Top-level operands after the opcode: "{%r1, %r2}" and "[%rd1+8]" count once, "%r1|%p1" once. */
static size_t operand_count(const gen_ptx_stmt *st) {
    size_t stored = st->ntok < GEN_PTX_MAX_TOKENS ? st->ntok : GEN_PTX_MAX_TOKENS, n = 0;
    int nest = 0;
    for (size_t i = 1; i < stored; i++) {
        char c = st->tok[i].len == 1 ? st->tok[i].s[0] : 0;
        if (c == '{' || c == '[' || c == '(') nest++;
        if ((c == '}' || c == ']' || c == ')') && nest > 0) nest--;
        if (n == 0) n = 1;
        if (c == ',' && nest == 0) n++;
    }
    return n;
}

/* Whether the statement ends with a predicate register and then an integer literal (tcgen05.mma's
 * enable_input_d and scale_input_d immediate). */
static bool ends_pred_imm(const gen_ptx_stmt *st) {
    size_t n = st->ntok;
    if (n > GEN_PTX_MAX_TOKENS || n < 5) return false;
    const gen_ptx_token *t = st->tok;
    bool comma1 = t[n - 2].len == 1 && t[n - 2].s[0] == ',', comma2 = t[n - 4].len == 1 && t[n - 4].s[0] == ',';
    return comma1 && comma2 && t[n - 1].len && t[n - 1].s[0] >= '0' && t[n - 1].s[0] <= '9' && t[n - 3].len > 2 &&
           !memcmp(t[n - 3].s, "%p", 2);
}

static bool has_operand(const gen_ptx_stmt *st, const char *pat) {
    if (pat[0] == '#') return operand_count(st) >= (size_t)atoi(pat + 1);
    if (!strcmp(pat, "=%p,#")) return ends_pred_imm(st);
    size_t plen = strlen(pat), stored = st->ntok < GEN_PTX_MAX_TOKENS ? st->ntok : GEN_PTX_MAX_TOKENS;
    bool prefix = plen && pat[plen - 1] == '*';
    if (prefix) plen--;
    for (size_t i = 1; i < stored; i++) {
        gen_ptx_token t = st->tok[i];
        if (prefix ? t.len >= plen && !memcmp(t.s, pat, plen) : t.len == plen && !memcmp(t.s, pat, plen)) return true;
    }
    return false;
}

/* Whether an arch row's feature is available on the target named (e.g. "sm_100f"). */
static bool arch_allows(const gen_lint_rule *r, const char *target) {
    char own[16];
    const char *list = r->targets ? r->targets : gen_lint_sm_name(r->sm, true, own);
    return alt_match(list, strlen(list), (span){target, strlen(target)});
}

/* Whether a device of SM dev has an arch row's feature (some listed target is for that SM). */
static bool arch_on_device(const gen_lint_rule *r, int dev) {
    if (!r->targets) return dev == r->sm;
    for (const char *a = r->targets; *a;) {
        size_t n = strcspn(a, "|");
        if (n > 3 && atoi(a + 3) == dev) return true;
        a += n + (a[n] == '|');
    }
    return false;
}

/* "sm_90a" or "one of sm_100a, sm_100f, ..." for messages. */
static void arch_names(const gen_lint_rule *r, char *buf, size_t cap) {
    if (!r->targets || !strchr(r->targets, '|')) {
        char own[16];
        snprintf(buf, cap, "%s", r->targets ? r->targets : gen_lint_sm_name(r->sm, true, own));
        return;
    }
    size_t n = (size_t)snprintf(buf, cap, "one of ");
    for (const char *a = r->targets; *a && n + 1 < cap;) {
        size_t k = strcspn(a, "|");
        n += (size_t)snprintf(buf + n, cap - n, "%s%.*s", a == r->targets ? "" : ", ", (int)k, a);
        a += k + (a[k] == '|');
    }
}

/* Splits "cvt.rn.bf16.f32" into "cvt" and {"rn", "bf16", "f32"}; returns the modifier count. */
static size_t split_opcode(gen_ptx_token t, span *op, span *mods) {
    const char *p = t.s, *end = t.s + t.len;
    const char *dot = memchr(p, '.', t.len);
    *op = (span){p, (size_t)((dot ? dot : end) - p)};
    size_t n = 0;
    for (p = dot; p && p < end && n < MAX_MODS;) {
        const char *next = memchr(p + 1, '.', (size_t)(end - p - 1));
        mods[n++] = (span){p + 1, (size_t)((next ? next : end) - p - 1)};
        p = next;
    }
    return n;
}

/* The PTX ISA a rule needs on the module's SM. */
static int rule_ptx(const gen_lint_rule *r, int module_sm) { return r->sm2 && module_sm >= r->sm2 ? r->ptx2 : r->ptx; }

static void consider(need *nd, const gen_lint_rule *r, int module_sm, const char *module_target) {
    if (r->arch && (!nd->arch_rule || !arch_allows(r, module_target))) nd->arch_rule = r;
    if (!r->arch && r->sm && (!nd->sm_rule || r->sm >= nd->sm_rule->sm)) nd->sm_rule = r;
    if (rule_ptx(r, module_sm) && (!nd->ptx_rule || rule_ptx(r, module_sm) >= rule_ptx(nd->ptx_rule, module_sm)))
        nd->ptx_rule = r;
}

static need instruction_needs(const gen_ptx_stmt *st, int module_sm, const char *module_target) {
    need nd = {0};
    span op, mods[MAX_MODS];
    size_t nmods = split_opcode(st->tok[0], &op, mods), nrules;
    const gen_lint_rule *rules = gen_lint_rules(&nrules);
    for (size_t i = 0; i < nrules; i++) {
        const gen_lint_rule *r = &rules[i];
        if (r->op[0] == '.' || r->op[0] == ':' || !alt_match(r->op, strlen(r->op), op)) continue;
        if (r->mods && !glob(r->mods, mods, nmods)) continue;
        if (r->operand && !has_operand(st, r->operand)) continue;
        if (r->unless && glob(r->unless, mods, nmods)) continue;
        consider(&nd, r, module_sm, module_target);
    }
    return nd;
}

/* ---- findings ---- */

static kiln_lint_finding *add_finding(kiln_lint_report *rep, kiln_lint_kind kind, const gen_ptx_stmt *st, int line,
                                      const char *feature) {
    if (rep->count == MAX_FINDINGS) rep->module.dropped++;
    if (rep->count == MAX_FINDINGS || rep->oom) return NULL;
    if (rep->count == rep->cap) {
        size_t cap = rep->cap ? rep->cap * 2 : 16;
        kiln_lint_finding *f = realloc(rep->findings, cap * sizeof *f);
        if (!f) {
            rep->oom = true;
            return NULL;
        }
        rep->findings = f, rep->cap = cap;
    }
    kiln_lint_finding *f = &rep->findings[rep->count++];
    memset(f, 0, sizeof *f);
    f->kind = kind;
    f->line = line;
    gen_ptx_stmt_text(st, f->instruction, sizeof f->instruction);
    snprintf(f->feature, sizeof f->feature, "%s", feature);
    f->module_sm = rep->module.sm;
    f->module_ptx = rep->module.ptx;
    f->device_sm = rep->module.device_sm;
    return f;
}

/* One finding for a line whose SM (sr, arch-specific or not) and/or PTX ISA (pr) needs the module lacks. */
static void report_short(kiln_lint_report *rep, const gen_ptx_stmt *st, int line, need nd, const gen_lint_rule *sr,
                         const gen_lint_rule *pr) {
    const kiln_lint_module *m = &rep->module;
    bool arch = sr && sr->arch;
    kiln_lint_finding *f = add_finding(rep,
                                       arch ? KILN_LINT_ARCH
                                       : sr ? KILN_LINT_TARGET
                                            : KILN_LINT_ISA,
                                       st, line, (sr ? sr : pr)->feature);
    if (!f) return;
    const gen_lint_rule *sm_need = arch ? nd.arch_rule : nd.sm_rule, *ptx_need = pr ? pr : nd.ptx_rule;
    f->need_sm = sm_need ? sm_need->sm : 0;
    f->need_arch = arch;
    f->need_ptx = ptx_need ? rule_ptx(ptx_need, m->sm) : 0;
    char name[200], need[320] = "", have[96];
    int n = 0;
    if (arch) arch_names(sr, name, sizeof name);
    if (sr)
        n = snprintf(need, sizeof need, "%s%s", arch ? "the arch-specific target " : "",
                     arch ? name : gen_lint_sm_name(sr->sm, false, name));
    if (sr && pr && strcmp(sr->feature, pr->feature))
        n += snprintf(need + n, sizeof need - (size_t)n, " for %s", sr->feature);
    if (pr)
        snprintf(need + n, sizeof need - (size_t)n, "%sPTX ISA %d.%d", sr ? " and " : "", f->need_ptx / 10,
                 f->need_ptx % 10);
    if (sr && pr)
        snprintf(have, sizeof have, ".target is %s and its .version %d.%d", m->target, m->ptx / 10, m->ptx % 10);
    else if (sr)
        snprintf(have, sizeof have, ".target is %s", m->target);
    else
        snprintf(have, sizeof have, ".version is %d.%d", m->ptx / 10, m->ptx % 10);
    snprintf(f->message, sizeof f->message, "needs %s for %s; the module's %s%s", need, (pr ? pr : sr)->feature, have,
             arch ? " (arch- and family-specific code runs only on the SMs it names)" : "");
}

/* With a device SM: a line this module may use but that device lacks (what it would lose there). */
static void report_lost(kiln_lint_report *rep, const gen_ptx_stmt *st, int line, need nd) {
    int dev = rep->module.device_sm;
    const gen_lint_rule *lost = nd.arch_rule && !arch_on_device(nd.arch_rule, dev) ? nd.arch_rule
                                : nd.sm_rule && nd.sm_rule->sm > dev    ? nd.sm_rule
                                                                        : NULL;
    rep->lost += lost != NULL;
    kiln_lint_finding *f = lost ? add_finding(rep, KILN_LINT_DEVICE, st, line, lost->feature) : NULL;
    if (!f) return;
    char a[200], b[16];
    f->need_sm = lost->sm, f->need_arch = lost->arch;
    if (lost->arch)
        arch_names(lost, a, sizeof a);
    else
        gen_lint_sm_name(lost->sm, false, a);
    snprintf(f->message, sizeof f->message, "needs %s for %s: an %s device does not have it", a, lost->feature,
             gen_lint_sm_name(dev, false, b));
}

static void report_needs(kiln_lint_report *rep, const gen_ptx_stmt *st, int line, need nd) {
    const kiln_lint_module *m = &rep->module;
    const gen_lint_rule *sr = NULL, *pr = nd.ptx_rule;
    if (nd.arch_rule && !arch_allows(nd.arch_rule, m->target))
        sr = nd.arch_rule;
    else if (nd.sm_rule && nd.sm_rule->sm > m->sm)
        sr = nd.sm_rule;
    if (nd.arch_rule && (!pr || nd.arch_rule->ptx > rule_ptx(pr, m->sm))) pr = nd.arch_rule;
    if (pr && rule_ptx(pr, m->sm) <= m->ptx) pr = NULL;
    if (sr || pr) report_short(rep, st, line, nd, sr, pr);
    if (!sr && m->device_sm) report_lost(rep, st, line, nd);
}

/* Rules for one directive word of a statement ("op_only" names a pseudo-directive such as a label in .section). */
static need directive_needs(const gen_ptx_stmt *st, gen_ptx_token word, const char *op_only, int module_sm,
                            const char *module_target) {
    need nd = {0};
    size_t nrules;
    const gen_lint_rule *rules = gen_lint_rules(&nrules);
    for (size_t i = 0; i < nrules; i++) {
        const gen_lint_rule *r = &rules[i];
        bool hit = op_only ? !strcmp(r->op, op_only)
                           : r->op[0] == '.' && alt_match(r->op, strlen(r->op), (span){word.s, word.len});
        if (hit && (!r->operand || has_operand(st, r->operand))) consider(&nd, r, module_sm, module_target);
    }
    return nd;
}

/* Each directive word of a statement (".reqnctapercluster" in a function header) where ptxas puts it. */
static void check_directives(kiln_lint_report *rep, const gen_ptx_stmt *st) {
    size_t stored = st->ntok < GEN_PTX_MAX_TOKENS ? st->ntok : GEN_PTX_MAX_TOKENS;
    for (size_t k = 0; k < stored; k++)
        if (st->tok[k].len > 1 && st->tok[k].s[0] == '.')
            report_needs(rep, st, st->tok[k].line, directive_needs(st, st->tok[k], NULL, rep->module.sm, rep->module.target));
}

/* shfl and vote without .sync: rejected for sm_70+ from PTX ISA 6.4, unreliable there before. */
static void check_sync(kiln_lint_report *rep, const gen_ptx_stmt *st) {
    span op, mods[MAX_MODS];
    size_t n = split_opcode(st->tok[0], &op, mods);
    bool shfl = op.len == 4 && !memcmp(op.s, "shfl", 4), vote = op.len == 4 && !memcmp(op.s, "vote", 4);
    if (!(shfl || vote) || (n > 0 && mods[0].len == 4 && !memcmp(mods[0].s, "sync", 4)) || rep->module.sm < 70) return;
    const char *name = shfl ? "shfl" : "vote";
    char feature[32];
    snprintf(feature, sizeof feature, "%s without .sync", name);
    kiln_lint_finding *f = add_finding(rep, KILN_LINT_SYNC, st, st->tok[0].line, feature);
    if (!f) return;
    f->warning = rep->module.ptx < 64;
    if (f->warning)
        snprintf(f->message, sizeof f->message,
                 "%s without .sync is unreliable on sm_70 and newer (independent thread scheduling) and "
                 "rejected from PTX ISA 6.4; use %s.sync with a member mask",
                 name, name);
    else
        snprintf(f->message, sizeof f->message,
                 "%s without .sync is not supported on sm_70 and newer from PTX ISA 6.4 (.target %s, "
                 ".version %d.%d); use %s.sync with a member mask",
                 name, rep->module.target, rep->module.ptx / 10, rep->module.ptx % 10, name);
}

static bool is_state_space(gen_ptx_token t) {
    static const char *const spaces[] = {".reg", ".local", ".shared", ".global", ".const", ".param", ".tex"};
    for (size_t i = 0; i < sizeof spaces / sizeof spaces[0]; i++)
        if (gen_ptx_tok_is(t, spaces[i])) return true;
    return false;
}

/* A declaration (also a parameter in a function header) of an instruction-only type. */
static void check_decl(kiln_lint_report *rep, const gen_ptx_stmt *st) {
    size_t stored = st->ntok < GEN_PTX_MAX_TOKENS ? st->ntok : GEN_PTX_MAX_TOKENS;
    bool in_decl = false;
    for (size_t i = 0; i < stored; i++) {
        gen_ptx_token t = st->tok[i];
        if (is_state_space(t)) in_decl = true;
        if (t.len == 1 && strchr(",);=", t.s[0])) in_decl = false;
        if (!in_decl) continue;
        for (const char *const *d = gen_lint_decl_types(); *d; d++) {
            if (!gen_ptx_tok_is(t, *d)) continue;
            kiln_lint_finding *f = add_finding(rep, KILN_LINT_DECL, st, t.line, *d);
            if (f)
                snprintf(f->message, sizeof f->message,
                         "illegal declaration: %s is an instruction type only (ptxas: syntax error); declare "
                         "the data with the .bN type of its size (.b16 for .bf16, .b32 for .bf16x2)",
                         *d);
            return;
        }
    }
}

/* ---- the module: .version and .target ---- */

static const gen_lint_target *find_target(span name) { return kiln_ptx_target_find(name.s, name.len); }

/* Reads one ".target a, b" statement; the highest SM (then 'a' over 'f' over none) governs. */
static void read_target(kiln_lint_report *rep, const gen_ptx_stmt *st, size_t index, const gen_lint_target **best) {
    for (size_t i = 1; i < st->ntok && i < GEN_PTX_MAX_TOKENS; i++) {
        const gen_lint_target *t = find_target((span){st->tok[i].s, st->tok[i].len});
        if (!t) continue;
        int rank = t->suffix == 'a' ? 2 : t->suffix == 'f' ? 1 : 0;
        int best_rank = *best ? ((*best)->suffix == 'a' ? 2 : (*best)->suffix == 'f' ? 1 : 0) : -1;
        if (*best && (t->sm < (*best)->sm || (t->sm == (*best)->sm && rank <= best_rank))) continue;
        *best = t;
        rep->target_stmt = index;
        rep->module.target_line = st->line;
    }
}

static bool parse_version(gen_ptx_token t, int *v) {
    if (t.len < 3 || t.len > 5) return false;
    int major = 0, i = 0;
    while (i < (int)t.len && t.s[i] >= '0' && t.s[i] <= '9') major = major * 10 + (t.s[i++] - '0');
    if (i == 0 || i + 2 != (int)t.len || t.s[i] != '.' || t.s[i + 1] < '0' || t.s[i + 1] > '9') return false;
    *v = major * 10 + (t.s[i + 1] - '0');
    return true;
}

/* First pass: .version, the governing .target, and counts. */
static kiln_status read_module(kiln_lint_report *rep, const char *ptx, size_t len, kiln_error *err) {
    gen_ptx_reader r;
    gen_ptx_stmt st;
    const gen_lint_target *best = NULL;
    bool have_version = false, any_target = false;
    size_t index = 0, statements = 0;
    gen_ptx_reader_init(&r, ptx, len);
    for (; gen_ptx_next(&r, &st); index++) {
        statements++;
        if (st.kind == GEN_PTX_INSTRUCTION) rep->module.instructions++;
        if (st.kind != GEN_PTX_DIRECTIVE) continue;
        if (st.body_follows) rep->module.functions++;
        if (gen_ptx_tok_is(st.tok[0], ".version") && !have_version) {
            if (st.ntok < 2 || !parse_version(st.tok[1], &rep->module.ptx))
                return kiln_fail(err, KILN_EINVAL, "line %d: bad .version (expected e.g. '.version 7.8')", st.line);
            have_version = true;
            rep->module.version_line = st.line;
            rep->version_stmt = index;
        } else if (gen_ptx_tok_is(st.tok[0], ".target")) {
            any_target = true;
            read_target(rep, &st, index, &best);
        }
    }
    if (!statements) return kiln_fail(err, KILN_EINVAL, "no PTX statements (the input is blank or only comments)");
    if (!have_version) return kiln_fail(err, KILN_EINVAL, "not a PTX module: no .version directive");
    if (!best)
        return kiln_fail(err, KILN_EINVAL,
                         any_target ? "no known SM in the .target directive (e.g. '.target sm_80')"
                                    : "not a PTX module: no .target directive");
    snprintf(rep->module.target, sizeof rep->module.target, "%s", best->name);
    rep->module.sm = best->sm;
    rep->module.arch_specific = best->suffix == 'a';
    rep->module.family_specific = best->suffix == 'f';
    return KILN_OK;
}

static bool runs_on(const kiln_lint_module *m, int dev) {
    if (m->arch_specific) return dev == m->sm;
    if (m->family_specific) return dev >= m->sm && dev / 10 == m->sm / 10;
    return dev >= m->sm;
}

/* At the governing .target: a .version too old for it, and whether the device can run the module. */
static void check_target(kiln_lint_report *rep, const gen_ptx_stmt *st) {
    const kiln_lint_module *m = &rep->module;
    const gen_lint_target *t = find_target((span){m->target, strlen(m->target)});
    kiln_lint_finding *f;
    char dev[16];
    if (t && m->ptx < t->ptx && (f = add_finding(rep, KILN_LINT_VERSION, st, st->line, ".version"))) {
        f->need_sm = m->sm, f->need_arch = m->arch_specific, f->need_ptx = t->ptx;
        snprintf(f->message, sizeof f->message,
                 ".target %s needs PTX ISA %d.%d or later; the module's .version is %d.%d", m->target, t->ptx / 10,
                 t->ptx % 10, m->ptx / 10, m->ptx % 10);
    }
    if (m->device_sm && !m->runs_on_device && (f = add_finding(rep, KILN_LINT_DEVICE, st, st->line, m->target))) {
        f->need_sm = m->sm, f->need_arch = m->arch_specific;
        gen_lint_sm_name(m->device_sm, false, dev);
        snprintf(f->message, sizeof f->message, "the module targets %s: an %s device cannot run it (%s)", m->target,
                 dev,
                 m->arch_specific     ? "arch-specific PTX loads only on exactly that SM"
                 : m->family_specific ? "family-specific PTX loads only on that SM family, same or newer"
                                      : "PTX loads only on its target SM or newer");
    }
}

/* With a CUDA release: the .version its driver and ptxas accept. */
static void check_cuda_version(kiln_lint_report *rep, const gen_ptx_stmt *st) {
    kiln_lint_module *m = &rep->module;
    const kiln_cuda_release *r = kiln_cuda_release_of(m->cuda);
    if (!r || m->ptx <= r->ptx) return;
    m->cuda_loads = 0;
    kiln_lint_finding *f = add_finding(rep, KILN_LINT_CUDA, st, st->line, ".version");
    if (!f) return;
    size_t n;
    const kiln_cuda_release *all = kiln_cuda_releases(&n), *first = NULL;
    for (size_t i = 0; i < n && !first; i++)
        if (all[i].ptx >= m->ptx) first = &all[i];
    char need[64] = "";
    if (first)
        snprintf(need, sizeof need, " (CUDA %d.%d or newer loads it)", first->version / 1000,
                 first->version % 1000 / 10);
    f->need_ptx = m->ptx;
    snprintf(f->message, sizeof f->message,
             "CUDA %d.%d accepts PTX ISA up to %d.%d: its driver refuses this .version %d.%d "
             "(CUDA_ERROR_UNSUPPORTED_PTX_VERSION) and its ptxas stops at it; build with .version %d.%d or "
             "older%s",
             m->cuda / 1000, m->cuda % 1000 / 10, r->ptx / 10, r->ptx % 10, m->ptx / 10, m->ptx % 10, r->ptx / 10,
             r->ptx % 10, need);
}

/* With a CUDA release: a .target it does not know (error), or one its ptxas no longer builds for (warning). */
static void check_cuda_target(kiln_lint_report *rep, const gen_ptx_stmt *st) {
    kiln_lint_module *m = &rep->module;
    const kiln_cuda_release *r = kiln_cuda_release_of(m->cuda);
    const gen_lint_target *t = find_target((span){m->target, strlen(m->target)});
    if (!r || !t) return;
    int maj = m->cuda / 1000, min = m->cuda % 1000 / 10;
    kiln_lint_finding *f;
    if (!kiln_cuda_knows_target(m->cuda, t)) {
        m->cuda_loads = 0;
        if ((f = add_finding(rep, KILN_LINT_CUDA, st, st->line, m->target))) {
            f->need_sm = t->sm, f->need_ptx = t->ptx;
            snprintf(f->message, sizeof f->message,
                     "CUDA %d.%d does not know .target %s: it came with PTX ISA %d.%d, newer than the %d.%d that "
                     "CUDA %d.%d accepts",
                     maj, min, m->target, t->ptx / 10, t->ptx % 10, r->ptx / 10, r->ptx % 10, maj, min);
        }
    } else if ((t->sm < r->min_sm || (t->sm == 101 && m->cuda >= 13000)) &&
               (f = add_finding(rep, KILN_LINT_CUDA, st, st->line, m->target))) {
        f->warning = 1;
        snprintf(f->message, sizeof f->message,
                 "CUDA %d.%d's ptxas and nvcc cannot build for %s (%s); its driver still JIT-compiles this PTX "
                 "for a newer device",
                 maj, min, m->target, t->sm == 101 ? "CUDA 13.0 renamed sm_101 to sm_110" : "too old for it");
    }
}

/* When the device cannot load the module but no line needs more than the device has, say so: a build
 * for the device's SM loses nothing. */
static void explain_device(kiln_lint_report *rep) {
    const kiln_lint_module *m = &rep->module;
    if (!m->device_sm || m->runs_on_device || rep->lost) return;
    for (size_t i = 0; i < rep->count; i++) {
        kiln_lint_finding *f = &rep->findings[i];
        if (f->kind != KILN_LINT_DEVICE) continue;
        size_t n = strlen(f->message);
        snprintf(f->message + n, sizeof f->message - n, "; no line in it needs more than sm_%d, so a build for sm_%d "
                 "loses nothing", m->device_sm, m->device_sm);
        return;
    }
}

/* A line ptxas refuses (a target, arch, ISA, .version, declaration, .sync or text error) stops the driver's
 * JIT compiler as well: such a module neither loads on a driver of any CUDA release nor runs on any device,
 * whatever its .version and .target say. */
static void errors_block_loading(kiln_lint_report *rep) {
    for (size_t i = 0; i < rep->count; i++) {
        const kiln_lint_finding *f = &rep->findings[i];
        if (f->warning || f->kind == KILN_LINT_DEVICE || f->kind == KILN_LINT_CUDA) continue;
        rep->module.cuda_loads = 0;
        rep->module.runs_on_device = 0;
        return;
    }
}

/* Second pass: every statement against the rules. */
static void check_statements(kiln_lint_report *rep, const char *ptx, size_t len) {
    gen_ptx_reader r;
    gen_ptx_stmt st;
    size_t index = 0;
    gen_ptx_reader_init(&r, ptx, len);
    for (; gen_ptx_next(&r, &st); index++) {
        if (st.kind == GEN_PTX_INSTRUCTION && st.ntok) {
            report_needs(rep, &st, st.tok[0].line, instruction_needs(&st, rep->module.sm, rep->module.target));
            check_sync(rep, &st);
        } else if (st.kind == GEN_PTX_DIRECTIVE) {
            if (index == rep->target_stmt) check_target(rep, &st);
            if (index == rep->target_stmt && rep->module.cuda) check_cuda_target(rep, &st);
            if (index == rep->version_stmt && rep->module.cuda) check_cuda_version(rep, &st);
            check_decl(rep, &st);
            check_directives(rep, &st);
        } else if (st.kind == GEN_PTX_LABEL && st.in_section) {
            report_needs(rep, &st, st.line, directive_needs(&st, st.tok[0], ":section-label", rep->module.sm, rep->module.target));
        }
    }
}

/* The first non-ASCII byte, which ptxas refuses wherever it is ("Unexpected non-ASCII character
 * encountered on line N", a fatal error: it names only the first), as a finding kept in line order. */
static void check_ascii(kiln_lint_report *rep, const char *ptx, size_t len) {
    int line = 1;
    size_t i = 0, col = 1;
    for (; i < len && !((unsigned char)ptx[i] & 0x80); i++, col++)
        if (ptx[i] == '\n') line++, col = 0;
    if (i == len) return;
    gen_ptx_stmt st;
    memset(&st, 0, sizeof st);
    st.start = ptx + i - (col - 1);
    st.end = memchr(st.start, '\n', len - (size_t)(st.start - ptx));
    if (!st.end) st.end = ptx + len;
    bool bom = i == 0 && len >= 3 && !memcmp(ptx, "\xef\xbb\xbf", 3);
    rep->module.cuda_loads = 0; /* a driver reads PTX as ptxas does */
    kiln_lint_finding *f = add_finding(rep, KILN_LINT_TEXT, &st, line, bom ? "UTF-8 byte-order mark" : "non-ASCII");
    if (!f) return;
    size_t n = (size_t)(st.end - st.start), k = 0; /* the line as written, '?' for each non-ASCII byte */
    for (size_t j = 0; j < n && k + 1 < sizeof f->instruction; j++)
        if (st.start[j] != '\r') f->instruction[k++] = (unsigned char)st.start[j] >= 0x80 ? '?' : st.start[j];
    f->instruction[k] = '\0';
    snprintf(f->message, sizeof f->message,
             "non-ASCII character (byte 0x%02x, column %zu)%s: ptxas stops at it ('Unexpected non-ASCII character "
             "encountered on line %d'), also in a comment; PTX must be plain ASCII",
             (unsigned char)ptx[i], col, bom ? ", a UTF-8 byte-order mark" : "", line);
    kiln_lint_finding keep = *f;
    size_t at = rep->count - 1;
    while (at > 0 && rep->findings[at - 1].line > line) at--;
    memmove(&rep->findings[at + 1], &rep->findings[at], (rep->count - 1 - at) * sizeof keep);
    rep->findings[at] = keep;
}

/* Rejects what is not PTX text: nothing at all, or control bytes (binary data). */
static kiln_status check_text(const char *ptx, size_t len, kiln_error *err) {
    if (!len) return kiln_fail(err, KILN_EINVAL, "empty input: no PTX text");
    int line = 1;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)ptx[i];
        if (c == '\n') line++;
        if (c == 0 || c == 0x7f || (c < 0x20 && !strchr("\t\n\r\f\v", c)))
            return kiln_fail(err, KILN_EINVAL, "binary data, not PTX text (byte 0x%02x at offset %zu, line %d)", c, i,
                             line);
    }
    return KILN_OK;
}

kiln_status kiln_lint(const char *ptx, size_t len, int device_sm, kiln_lint_report **out, kiln_error *err) {
    return kiln_lint_cuda(ptx, len, device_sm, 0, out, err);
}

kiln_status kiln_lint_cuda(const char *ptx, size_t len, int device_sm, int cuda, kiln_lint_report **out,
                           kiln_error *err) {
    if (!out || (!ptx && len)) return kiln_fail(err, KILN_EINVAL, "kiln_lint: NULL argument");
    *out = NULL;
    if (cuda) {
        char name[16];
        snprintf(name, sizeof name, "%d", cuda);
        kiln_status s = kiln_cuda_parse_version(name, &cuda, err);
        if (s) return s;
    }
    if (device_sm) {
        char name[16];
        kiln_status s = kiln_lint_parse_sm(gen_lint_sm_name(device_sm, false, name), &device_sm, err);
        if (s) return s;
    }
    kiln_status s = check_text(ptx, len, err);
    if (s) return s;
    kiln_lint_report *rep = calloc(1, sizeof *rep);
    if (!rep) return kiln_fail(err, KILN_ENOMEM, "out of memory");
    if ((s = read_module(rep, ptx, len, err))) {
        kiln_lint_free(rep);
        return s;
    }
    rep->module.device_sm = device_sm;
    rep->module.cuda = cuda;
    rep->module.cuda_loads = cuda != 0;
    rep->module.runs_on_device = device_sm ? runs_on(&rep->module, device_sm) : 0;
    check_statements(rep, ptx, len);
    check_ascii(rep, ptx, len);
    explain_device(rep);
    errors_block_loading(rep);
    if (rep->oom) {
        kiln_lint_free(rep);
        return kiln_fail(err, KILN_ENOMEM, "out of memory while collecting lint findings");
    }
    *out = rep;
    return KILN_OK;
}

size_t kiln_lint_count(const kiln_lint_report *r) { return r ? r->count : 0; }

const kiln_lint_finding *kiln_lint_get(const kiln_lint_report *r, size_t i) {
    return r && i < r->count ? &r->findings[i] : NULL;
}

const kiln_lint_module *kiln_lint_module_info(const kiln_lint_report *r) { return r ? &r->module : NULL; }

void kiln_lint_free(kiln_lint_report *r) {
    if (!r) return;
    free(r->findings);
    free(r);
}

kiln_status kiln_lint_parse_sm(const char *text, int *sm, kiln_error *err) {
    size_t n;
    const gen_lint_target *t = gen_lint_targets(&n);
    const char *d = text && !strncmp(text, "sm_", 3) ? text + 3 : text;
    int v = -1;
    size_t digits = d ? strspn(d, "0123456789") : 0;
    if (digits >= 1 && digits <= 2 && d[0] != '0' && d[digits] == '.' && d[digits + 1] >= '0' && d[digits + 1] <= '9' &&
        !d[digits + 2])
        v = atoi(d) * 10 + (d[digits + 1] - '0'); /* compute capability "8.6" */
    else if (digits >= 2 && digits <= 3 && d[0] != '0' && !d[digits])
        v = atoi(d);
    char valid[256] = "";
    for (size_t i = 0; i < n; i++) {
        if (t[i].suffix) continue;
        if (t[i].sm == v) {
            *sm = v;
            return KILN_OK;
        }
        snprintf(valid + strlen(valid), sizeof valid - strlen(valid), "%s%d", valid[0] ? ", " : "", t[i].sm);
    }
    return kiln_fail(err, KILN_EINVAL, "unknown device SM '%s'; valid: %s (also as sm_NN or N.N)",
                     text ? text : "(null)", valid);
}

const char *kiln_lint_kind_name(kiln_lint_kind k) {
    static const char *const names[] = {"target", "arch", "isa", "version", "decl", "sync", "device", "text", "cuda"};
    return (unsigned)k < sizeof names / sizeof names[0] ? names[k] : "unknown";
}
