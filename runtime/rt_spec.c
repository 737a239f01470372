/* runtime/rt_spec.c - spec text normalization: family, then key=value pairs sorted by key. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rt.h"

#define MAX_TOKENS 64

typedef struct token {
    const char *p;
    size_t len, keylen;
} token;

static int token_cmp(const void *a, const void *b) {
    const token *x = a, *y = b;
    size_t n = x->keylen < y->keylen ? x->keylen : y->keylen;
    int c = memcmp(x->p, y->p, n);
    return c ? c : (x->keylen > y->keylen) - (x->keylen < y->keylen);
}

/* Splits spec into whitespace-separated tokens; returns the count or -1 when too many. */
static int split(const char *spec, token *t, int cap) {
    int n = 0;
    for (const char *p = spec; *p;) {
        while (isspace((unsigned char)*p)) p++;
        if (!*p) break;
        const char *s = p;
        while (*p && !isspace((unsigned char)*p)) p++;
        if (n == cap) return -1;
        t[n++] = (token){s, (size_t)(p - s), 0};
    }
    return n;
}

kiln_status rt_spec_normalize(const char *spec, char *out, size_t size, kiln_error *err) {
    token t[MAX_TOKENS];
    int n = spec ? split(spec, t, MAX_TOKENS) : 0;
    if (n <= 0) return kiln_fail(err, KILN_EINVAL, n < 0 ? "spec has too many parameters" : "empty kernel spec");
    if (memchr(t[0].p, '=', t[0].len))
        return kiln_fail(err, KILN_EINVAL, "spec '%s' must start with a family name ('kiln list' shows them)", spec);
    for (int i = 1; i < n; i++) {
        const char *eq = memchr(t[i].p, '=', t[i].len);
        if (!eq || eq == t[i].p || eq == t[i].p + t[i].len - 1)
            return kiln_fail(err, KILN_EINVAL, "spec '%s': '%.*s' is not key=value", spec, (int)t[i].len, t[i].p);
        t[i].keylen = (size_t)(eq - t[i].p);
    }
    qsort(t + 1, (size_t)(n - 1), sizeof t[0], token_cmp);
    size_t k = 0;
    for (int i = 0; i < n; i++) {
        if (i > 1 && token_cmp(&t[i - 1], &t[i]) == 0)
            return kiln_fail(err, KILN_EINVAL, "spec '%s' gives '%.*s' twice", spec, (int)t[i].keylen, t[i].p);
        if (k + t[i].len + 2 > size) return kiln_fail(err, KILN_EINVAL, "spec '%s' is too long", spec);
        if (i) out[k++] = ' ';
        memcpy(out + k, t[i].p, t[i].len);
        k += t[i].len;
    }
    out[k] = 0;
    return KILN_OK;
}

void rt_spec_family(const char *spec, char *out, size_t size) {
    while (isspace((unsigned char)*spec)) spec++;
    size_t n = 0;
    while (spec[n] && !isspace((unsigned char)spec[n])) n++;
    snprintf(out, size, "%.*s", (int)n, spec);
}
