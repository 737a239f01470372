/* emu/emu_guard.c - host buffers that end at a guard page, for the float64 harnesses' test tensors. */
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

#include "emu.h"

void *emu_guarded_alloc(emu_guarded *g, size_t size) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE), body = (size + page - 1) / page * page;
    if (!body) body = page;
    if (g->nmap == EMU_GUARDED_MAPS) return NULL;
    unsigned char *base = mmap(NULL, body + 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) return NULL;
    mprotect(base, page, PROT_NONE);
    mprotect(base + page + body, page, PROT_NONE);
    g->map[g->nmap].base = base;
    g->map[g->nmap++].len = body + 2 * page;
    /* as close to the end as 16-byte alignment allows: a read past it faults */
    return (void *)(((uintptr_t)(base + page + body - size)) & ~(uintptr_t)15);
}

void emu_guarded_free(emu_guarded *g) {
    for (int i = 0; i < g->nmap; i++) munmap(g->map[i].base, g->map[i].len);
    g->nmap = 0;
}
