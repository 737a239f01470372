/* emu/emu_fiber.c - fibers for emulated CUDA threads: stacks, context switches, ASan notes. */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include "emu.h"

#if defined(__SANITIZE_ADDRESS__)
#define EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define EMU_ASAN 1
#endif
#endif

#if defined(__SANITIZE_THREAD__)
#define EMU_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define EMU_TSAN 1
#endif
#endif
#ifdef EMU_TSAN
/* ThreadSanitizer must be told about every stack switch, else it sees one thread's
 * accesses jump between unrelated stacks and its shadow state is garbage. */
#include <sanitizer/tsan_interface.h>
#endif

#ifdef EMU_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define EMU_STACK_BYTES (512u << 10) /* instrumented handlers need more room */
#define EMU_ASAN_TOP (64u << 10)     /* unpoisoned at every reset */
#define EMU_ASAN_HANDLER_SLACK (32u << 10) /* the handlers' frames below the deepest dispatch's */
#else
#define EMU_STACK_BYTES (256u << 10)
#endif

/* x86-64 gets a register-only switch (glibc's swapcontext makes a sigprocmask system
 * call per switch, which dominates a block of 1024 threads); elsewhere ucontext. */
#if defined(__x86_64__)
#define EMU_ASM_SWITCH 1
void emu_switch_x86_64(void **save_sp, void *sp) __attribute__((visibility("hidden")));
__asm__(".text\n"
        ".p2align 4\n"
        ".globl emu_switch_x86_64\n"
        ".hidden emu_switch_x86_64\n"
        ".type emu_switch_x86_64,@function\n"
        "emu_switch_x86_64:\n"
        "  pushq %rbp\n"
        "  pushq %rbx\n"
        "  pushq %r12\n"
        "  pushq %r13\n"
        "  pushq %r14\n"
        "  pushq %r15\n"
        "  movq %rsp, (%rdi)\n"
        "  movq %rsi, %rsp\n"
        "  popq %r15\n"
        "  popq %r14\n"
        "  popq %r13\n"
        "  popq %r12\n"
        "  popq %rbx\n"
        "  popq %rbp\n"
        "  ret\n"
        ".size emu_switch_x86_64, .-emu_switch_x86_64\n");
#endif

kiln_status emu_stacks_reserve(emu_stacks *s, unsigned count, kiln_error *err) {
    if (s->base && s->count >= count) return KILN_OK;
    emu_stacks_release(s);
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    s->per = EMU_STACK_BYTES + page; /* a guard page below each stack */
    s->total = s->per * count;
    void *p = mmap(NULL, s->total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
        s->base = NULL;
        return kiln_fail(err, KILN_ENOMEM, "emulator: cannot map %zu bytes of fiber stacks", s->total);
    }
    s->base = p;
    s->count = count;
#ifdef EMU_ASAN
    /* the kernel may hand back addresses whose shadow still holds an old mapping's frames */
    __asan_unpoison_memory_region(s->base, s->total);
#endif
    for (unsigned i = 0; i < count; i++) mprotect(s->base + (size_t)i * s->per, page, PROT_NONE);
    return KILN_OK;
}

void emu_stacks_release(emu_stacks *s) {
#ifdef EMU_ASAN
    if (s->base) __asan_unpoison_memory_region(s->base, s->total);
#endif
    if (s->base) munmap(s->base, s->total);
    memset(s, 0, sizeof *s);
}

bool emu_stacks_contain(const emu_stacks *s, const void *p) {
    const unsigned char *c = p;
    return s->base && c >= s->base && c < s->base + s->total;
}

void emu_fiber_init(emu_fiber *f, const emu_stacks *s, unsigned index) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    memset(f, 0, sizeof *f);
    f->stack = s->base + (size_t)index * s->per + page;
    f->size = s->per - page;
    f->asan_bottom = f->stack;
    f->asan_size = f->size;
}

void emu_fiber_fini(emu_fiber *f) {
    free(f->ctx);
    f->ctx = NULL;
#ifdef EMU_TSAN
    if (f->tsan && f->stack) __tsan_destroy_fiber(f->tsan);
    f->tsan = NULL;
#endif
}

void emu_fiber_reset(emu_fiber *f, void (*entry)(void)) {
#ifdef EMU_ASAN
    /* ASan keeps the redzones of frames that never returned: everything a thread abandoned
     * mid-call left, and (seen with GCC 12) some near the top of a fiber that exited, and as deep
     * as the handlers ran: a wide wgmma kernel's host frame put them past 64 KiB, where the next
     * block's frame met them (a false report on an intrinsic's argument slots). So the span from
     * the deepest dispatch (less the handlers' own frames) to the top, at least EMU_ASAN_TOP. */
    size_t clean = f->size < EMU_ASAN_TOP ? f->size : EMU_ASAN_TOP;
    if (f->dirty) clean = f->size;
    else if (f->low && f->low >= f->stack && f->low < f->stack + f->size) {
        size_t used = (size_t)(f->stack + f->size - f->low) + EMU_ASAN_HANDLER_SLACK;
        if (used > clean) clean = used < f->size ? used : f->size;
    }
    __asan_unpoison_memory_region(f->stack + f->size - clean, clean);
#endif
    f->dirty = false;
    f->low = NULL;
    f->asan_fake = NULL;
#ifdef EMU_TSAN
    if (!f->tsan) f->tsan = __tsan_create_fiber(0);
#endif
#ifdef EMU_ASM_SWITCH
    uintptr_t top = ((uintptr_t)(f->stack + f->size)) & ~(uintptr_t)15;
    void **sp = (void **)top;
    *--sp = NULL;             /* return address of entry(): it never returns */
    *--sp = (void *)entry;    /* where the first switch "returns" to */
    for (int i = 0; i < 6; i++) *--sp = NULL; /* rbp rbx r12 r13 r14 r15 */
    f->sp = sp;
#else
    if (!f->ctx) f->ctx = calloc(1, sizeof(ucontext_t));
    ucontext_t *uc = f->ctx;
    getcontext(uc);
    uc->uc_stack.ss_sp = f->stack;
    uc->uc_stack.ss_size = f->size;
    uc->uc_link = NULL;
    makecontext(uc, entry, 0);
#endif
}

void emu_fiber_switch(emu_fiber *from, emu_fiber *to, bool exiting) {
#ifdef EMU_ASAN
    __sanitizer_start_switch_fiber(exiting ? NULL : &from->asan_fake, to->asan_bottom, to->asan_size);
#else
    (void)exiting;
#endif
#ifdef EMU_TSAN
    if (!from->stack) from->tsan = __tsan_get_current_fiber(); /* the host thread's own */
    __tsan_switch_to_fiber(to->tsan, 0);
#endif
#ifdef EMU_ASM_SWITCH
    emu_switch_x86_64(&from->sp, to->sp);
#else
    if (!from->ctx) from->ctx = calloc(1, sizeof(ucontext_t));
    swapcontext(from->ctx, to->ctx);
#endif
#ifdef EMU_ASAN
    __sanitizer_finish_switch_fiber(from->asan_fake, NULL, NULL);
#endif
}

void emu_fiber_started(emu_fiber *self, emu_fiber *from) {
    (void)self;
#ifdef EMU_ASAN
    const void *bottom;
    size_t size;
    __sanitizer_finish_switch_fiber(NULL, &bottom, &size);
    from->asan_bottom = bottom;
    from->asan_size = size;
#else
    (void)from;
#endif
}
