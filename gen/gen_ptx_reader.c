/* gen/gen_ptx_reader.c - splits PTX text into statements (instructions, directives, labels, braces) for lint. */
#include <string.h>

#include "gen.h"

/* Directives that end at the end of their line rather than at ';'. */
static const char *const line_directives[] = {".version", ".target", ".address_size", ".file", ".loc", ".section"};

static bool is_word_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '$' ||
           c == '%' || c == '.';
}

bool gen_ptx_tok_is(gen_ptx_token t, const char *s) {
    size_t n = strlen(s);
    return t.len == n && memcmp(t.s, s, n) == 0;
}

void gen_ptx_reader_init(gen_ptx_reader *r, const char *text, size_t len) {
    memset(r, 0, sizeof *r);
    r->p = text;
    r->end = text + len;
    r->line = 1;
}

/* A carriage return not followed by '\n' (old Mac line ends): like ptxas, it ends a line directive
 * but does not count as a new line; a '//' comment still runs to the next '\n'. */
static bool lone_cr(const gen_ptx_reader *r, const char *p) { return *p == '\r' && (p + 1 >= r->end || p[1] != '\n'); }

/* Skips blanks, comments and non-ASCII bytes (lint reports the first of those itself). With
 * stop_at_newline, stops before a line end (also one inside a block comment) and returns true;
 * otherwise returns false. */
static bool skip_space(gen_ptx_reader *r, bool stop_at_newline) {
    while (r->p < r->end) {
        char c = *r->p;
        if (c == '\n') {
            if (stop_at_newline) return true;
            r->line++, r->p++;
        } else if (stop_at_newline && lone_cr(r, r->p)) {
            return true;
        } else if (c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v' || (unsigned char)c >= 0x80) {
            r->p++;
        } else if (c == '/' && r->p + 1 < r->end && r->p[1] == '/') {
            while (r->p < r->end && *r->p != '\n') r->p++;
        } else if (c == '/' && r->p + 1 < r->end && r->p[1] == '*') {
            bool newline = false;
            for (r->p += 2; r->p < r->end && !(r->p[0] == '*' && r->p + 1 < r->end && r->p[1] == '/'); r->p++) {
                if (*r->p == '\n') r->line++, newline = true;
                newline |= lone_cr(r, r->p);
            }
            r->p = r->p < r->end ? r->p + 2 : r->end;
            if (newline && stop_at_newline) return true;
        } else {
            break;
        }
    }
    return false;
}

/* Scans one token at r->p: a string, a word (letters, digits, _ $ % . and "::"), or one other byte. */
static gen_ptx_token scan_token(gen_ptx_reader *r) {
    const char *s = r->p;
    int line = r->line;
    if (*s == '"') {
        for (r->p++; r->p < r->end && *r->p != '"' && *r->p != '\n'; r->p++)
            if (*r->p == '\\' && r->p + 1 < r->end && r->p[1] != '\n') r->p++;
        if (r->p < r->end && *r->p == '"') r->p++;
    } else if (is_word_char(*s)) {
        while (r->p < r->end) {
            if (is_word_char(*r->p))
                r->p++;
            else if (*r->p == ':' && r->p + 1 < r->end && r->p[1] == ':')
                r->p += 2;
            else
                break;
        }
    } else {
        r->p++;
    }
    return (gen_ptx_token){s, (size_t)(r->p - s), line};
}

static void add_token(gen_ptx_stmt *st, gen_ptx_token t) {
    if (st->ntok < GEN_PTX_MAX_TOKENS) st->tok[st->ntok] = t;
    st->ntok++;
}

static bool is_line_directive(gen_ptx_token t) {
    for (size_t i = 0; i < sizeof line_directives / sizeof line_directives[0]; i++)
        if (gen_ptx_tok_is(t, line_directives[i])) return true;
    return false;
}

/* A label: a name (not a directive) followed by ':' (not "::") on the same line. */
static bool take_label(gen_ptx_reader *r, gen_ptx_token t) {
    if (t.len == 0 || t.s[0] == '.' || !is_word_char(t.s[0])) return false;
    const char *q = r->p;
    while (q < r->end && (*q == ' ' || *q == '\t' || *q == '\r')) q++;
    if (q >= r->end || *q != ':' || (q + 1 < r->end && q[1] == ':')) return false;
    r->p = q + 1;
    return true;
}

/* One line of a .section block (debug data: ".b8 1, 2", labels); such lines have no ';'. */
static void read_section_line(gen_ptx_reader *r, gen_ptx_stmt *st) {
    gen_ptx_token t = scan_token(r);
    if (take_label(r, t)) {
        st->kind = GEN_PTX_LABEL;
        add_token(st, t);
        return;
    }
    st->kind = GEN_PTX_DATA;
    add_token(st, t);
    while (!skip_space(r, true) && r->p < r->end && *r->p != '}') add_token(st, scan_token(r));
}

/* An optional "@%p" or "@!%p" guard before an instruction. */
static void read_predicate(gen_ptx_reader *r, gen_ptx_stmt *st) {
    r->p++; /* '@' */
    skip_space(r, false);
    if (r->p < r->end && *r->p == '!') {
        st->pred_negated = true;
        r->p++;
        skip_space(r, false);
    }
    if (r->p < r->end) st->pred = scan_token(r);
    st->predicated = true;
    skip_space(r, false);
}

/* Tokens up to ';' (consumed), or for a function header up to its body '{' (left for the next call),
 * or for a line directive up to the end of the line. Parentheses, brackets and braces inside the
 * statement (vector operands, initializers, parameter lists) nest. */
static void read_statement(gen_ptx_reader *r, gen_ptx_stmt *st) {
    int nest = 0;
    bool header = false, line_term = false;
    for (;;) {
        if (skip_space(r, line_term) || r->p >= r->end) return;
        char c = *r->p;
        if (nest == 0 && c == ';') {
            r->p++;
            return;
        }
        if (nest == 0 && c == '}') return; /* missing ';': leave the brace to close its scope */
        if (nest == 0 && c == '{' && header) {
            st->body_follows = true;
            return;
        }
        if (c == '(' || c == '[' || c == '{') nest++;
        if ((c == ')' || c == ']' || c == '}') && nest > 0) nest--;
        gen_ptx_token t = scan_token(r);
        add_token(st, t);
        st->end_line = r->line;
        if (nest == 0 && (gen_ptx_tok_is(t, ".entry") || gen_ptx_tok_is(t, ".func"))) header = true;
        if (st->ntok == 1 && is_line_directive(t)) {
            line_term = true;
            if (gen_ptx_tok_is(t, ".section")) r->section_pending = true;
        }
    }
}

static void open_or_close(gen_ptx_reader *r, gen_ptx_stmt *st) {
    if (*r->p == '{') {
        st->kind = GEN_PTX_OPEN;
        r->depth++;
        if (r->section_pending) r->section_depth = r->depth;
        r->section_pending = false;
    } else {
        st->kind = GEN_PTX_CLOSE;
        if (r->depth == r->section_depth) r->section_depth = 0;
        if (r->depth > 0) r->depth--;
    }
    r->p++;
}

bool gen_ptx_next(gen_ptx_reader *r, gen_ptx_stmt *st) {
    skip_space(r, false);
    if (r->p >= r->end) return false;
    memset(st, 0, offsetof(gen_ptx_stmt, tok));
    st->line = st->end_line = r->line;
    st->depth = r->depth;
    st->in_section = r->section_depth > 0;
    st->start = r->p;
    if (*r->p == '{' || *r->p == '}') {
        open_or_close(r, st);
    } else if (st->in_section) {
        read_section_line(r, st);
    } else {
        if (*r->p == '@') read_predicate(r, st);
        gen_ptx_token first = r->p < r->end ? scan_token(r) : (gen_ptx_token){r->p, 0, r->line};
        if (!st->predicated && take_label(r, first)) {
            st->kind = GEN_PTX_LABEL;
            add_token(st, first);
        } else {
            r->p = first.s; /* read_statement scans it again, with nesting */
            read_statement(r, st);
            st->kind = st->ntok && st->tok[0].len && st->tok[0].s[0] == '.' ? GEN_PTX_DIRECTIVE : GEN_PTX_INSTRUCTION;
        }
    }
    if (r->p == st->start) r->p++; /* never stall, whatever the input */
    st->end = r->p;
    return true;
}

/* Copies the statement as written into buf: comments dropped, each run of blanks one space; a text
 * that does not fit ends in "...". Returns the length written. */
size_t gen_ptx_stmt_text(const gen_ptx_stmt *st, char *buf, size_t cap) {
    if (cap < 4) return cap ? (buf[0] = '\0', 0) : 0;
    gen_ptx_reader r;
    gen_ptx_reader_init(&r, st->start, (size_t)(st->end - st->start));
    size_t n = 0, room = cap - 4; /* room for the text; "..." and '\0' always fit after it */
    bool cut = false;
    for (;;) {
        const char *before = r.p;
        skip_space(&r, false);
        if (r.p >= r.end) break;
        bool space = r.p != before && n > 0 && !(*r.p && strchr(",;)]}:", *r.p));
        gen_ptx_token t = scan_token(&r);
        if (n + space + t.len > room) {
            size_t take = n + space < room ? room - n - space : 0;
            if (take && space) buf[n++] = ' ';
            memcpy(buf + n, t.s, take);
            n += take;
            cut = true;
            break;
        }
        if (space) buf[n++] = ' ';
        memcpy(buf + n, t.s, t.len);
        n += t.len;
    }
    if (cut) memcpy(buf + n, "...", 3), n += 3;
    buf[n] = '\0';
    return n;
}
