/* emu/emu_race.c - store log, undo and comparison that let a block run twice to expose races. */
#include <stdlib.h>
#include <string.h>

#include "emu.h"

typedef struct emu_log_entry {
    uintptr_t addr;
    size_t len, off; /* old bytes at log->old + off */
} emu_log_entry;

static bool grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return true;
    size_t n = *cap ? *cap : 64;
    while (n < need) n *= 2;
    void *q = realloc(*p, n * elem);
    if (!q) return false;
    *p = q;
    *cap = n;
    return true;
}

void emu_log_reset(emu_log *log) {
    log->n = 0;
    log->used = 0;
    log->oom = false;
}

void emu_log_free(emu_log *log) {
    free(log->e);
    free(log->old);
    memset(log, 0, sizeof *log);
}

void emu_log_store(emu_log *log, void *p, size_t len) {
    if (log->oom) return;
    if (!grow((void **)&log->e, &log->cap, log->n + 1, sizeof *log->e) ||
        !grow((void **)&log->old, &log->oldcap, log->used + len, 1)) {
        log->oom = true;
        return;
    }
    log->e[log->n++] = (emu_log_entry){(uintptr_t)p, len, log->used};
    memcpy(log->old + log->used, p, len);
    log->used += len;
}

void emu_log_undo(const emu_log *log) {
    for (size_t i = log->n; i-- > 0;) memcpy((void *)log->e[i].addr, log->old + log->e[i].off, log->e[i].len);
}

static int by_addr(const void *a, const void *b) {
    const emu_log_entry *x = a, *y = b;
    return x->addr < y->addr ? -1 : x->addr > y->addr;
}

kiln_status emu_log_snapshot(const emu_log *log, emu_snapshot *s, kiln_error *err) {
    memset(s, 0, sizeof *s);
    if (log->oom) return kiln_fail(err, KILN_ENOMEM, "emulator: out of memory logging stores");
    emu_log_entry *sorted = malloc((log->n ? log->n : 1) * sizeof *sorted);
    s->r = malloc((log->n ? log->n : 1) * sizeof *s->r);
    if (!sorted || !s->r) {
        free(sorted);
        emu_snapshot_free(s);
        return kiln_fail(err, KILN_ENOMEM, "emulator: out of memory comparing runs");
    }
    if (log->n) memcpy(sorted, log->e, log->n * sizeof *sorted); /* a launch that stored nothing has no log */
    qsort(sorted, log->n, sizeof *sorted, by_addr);
    size_t total = 0;
    for (size_t i = 0; i < log->n; i++) {
        uintptr_t lo = sorted[i].addr, hi = lo + sorted[i].len;
        if (s->n && lo <= s->r[s->n - 1].hi) {
            if (hi > s->r[s->n - 1].hi) {
                total += hi - s->r[s->n - 1].hi;
                s->r[s->n - 1].hi = hi;
            }
        } else {
            s->r[s->n++] = (emu_range){lo, hi, total};
            total += hi - lo;
        }
    }
    free(sorted);
    s->bytes = malloc(total ? total : 1);
    if (!s->bytes) {
        emu_snapshot_free(s);
        return kiln_fail(err, KILN_ENOMEM, "emulator: out of memory comparing runs");
    }
    for (size_t i = 0; i < s->n; i++) memcpy(s->bytes + s->r[i].off, (void *)s->r[i].lo, s->r[i].hi - s->r[i].lo);
    return KILN_OK;
}

void emu_snapshot_free(emu_snapshot *s) {
    free(s->r);
    free(s->bytes);
    memset(s, 0, sizeof *s);
}

void emu_snapshot_write(const emu_snapshot *s) {
    for (size_t i = 0; i < s->n; i++) memcpy((void *)s->r[i].lo, s->bytes + s->r[i].off, s->r[i].hi - s->r[i].lo);
}

/* The byte s holds for address a, or NULL when s did not write a. */
static const unsigned char *find(const emu_snapshot *s, uintptr_t a) {
    size_t lo = 0, hi = s->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (a < s->r[mid].lo) hi = mid;
        else if (a >= s->r[mid].hi) lo = mid + 1;
        else return s->bytes + s->r[mid].off + (a - s->r[mid].lo);
    }
    return NULL;
}

/* Memory must hold the state both runs started from. A byte differs when the two runs
 * would leave different values in it. */
static bool diff_one_way(const emu_snapshot *mine, const emu_snapshot *other, bool mine_first, emu_diff *d) {
    for (size_t i = 0; i < mine->n; i++) {
        const unsigned char *bytes = mine->bytes + mine->r[i].off;
        const unsigned char *mem = (const unsigned char *)mine->r[i].lo;
        size_t len = mine->r[i].hi - mine->r[i].lo;
        for (size_t j = 0; j < len; j++) {
            const unsigned char *o = find(other, mine->r[i].lo + j);
            unsigned char theirs = o ? *o : mem[j];
            if (theirs != bytes[j]) {
                d->addr = mine->r[i].lo + j;
                d->first = mine_first ? bytes[j] : theirs;
                d->second = mine_first ? theirs : bytes[j];
                return true;
            }
        }
    }
    return false;
}

static bool same_ranges(const emu_snapshot *a, const emu_snapshot *b) {
    if (a->n != b->n) return false;
    for (size_t i = 0; i < a->n; i++)
        if (a->r[i].lo != b->r[i].lo || a->r[i].hi != b->r[i].hi) return false;
    return true;
}

bool emu_snapshot_diff(const emu_snapshot *first, const emu_snapshot *second, emu_diff *d) {
    if (same_ranges(first, second)) { /* the usual case: both runs wrote the same bytes */
        size_t total = first->n ? first->r[first->n - 1].off + (first->r[first->n - 1].hi - first->r[first->n - 1].lo) : 0;
        if (!memcmp(first->bytes, second->bytes, total)) return false;
    }
    return diff_one_way(first, second, true, d) || diff_one_way(second, first, false, d);
}
