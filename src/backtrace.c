/*
 * backtrace.c - frame-pointer walks over parked tasks (see backtrace.h).
 * Reads only the task's own stack, bounded by its slot, so a corrupt chain
 * cannot send it elsewhere; a frozen stack is read from its image, so a
 * report never thaws what it looks at.
 */
#include "backtrace.h"

#include <string.h>

#include "arch/arch.h"
#include "freeze.h"
#include "os/os.h"
#include "sanitizer.h"

/* len bytes (whole words) at the word-aligned address at of t's stack, t
 * running here (its own live stack); false outside it.  Word by word and
 * not instrumented: the frames it reads may hold ASan's redzones (a
 * program built without frame pointers keeps ASan's frame base in the
 * frame-pointer register, so the walk starts on one). */
SANITIZER_UNCHECKED static bool stack_read_live(const task *t, uintptr_t at,
                                                uintptr_t *out, size_t len)
{
    if ((at | len) % sizeof(uintptr_t) || at < stack_lo(&t->stack) ||
        at + len > stack_top(&t->stack))
        return false;
    const volatile uintptr_t *w = (const volatile uintptr_t *)at;
    for (size_t i = 0; i < len / sizeof(uintptr_t); i++)
        out[i] = w[i];
    return true;
}

/* The two words of the frame record at fp: the caller's fp and the
 * return address. */
static bool backtrace_frame(const task *t, uintptr_t fp, uintptr_t rec[2])
{
    if (fp & 7)
        return false;
    if (t == mote__self()) /* a running task: its own frames */
        return stack_read_live(t, fp, rec, 16);
    return mote__freeze_peek(t, fp, rec, 16);
}

static int backtrace_walk(const task *t, uintptr_t fp, uintptr_t ret, uintptr_t *pcs,
                          int max)
{
    int n = 0;
    while (n < max && ret) {
        pcs[n++] = ret;
        uintptr_t rec[2];
        if (!backtrace_frame(t, fp, rec))
            break;
        ret = rec[1];
        if (rec[0] <= fp)
            break;
        fp = rec[0];
    }
    return n;
}

int mote__backtrace(const task *t, uintptr_t *pcs, int max)
{
    uintptr_t rec[2];
    if (!mote__freeze_peek(t, (uintptr_t)t->ctx.sp + ARCH_CTX_FRAME_OFF, rec, 16))
        return 0;
    return backtrace_walk(t, rec[0], rec[1], pcs, max);
}

int mote__backtrace_from(const task *t, uintptr_t fp, uintptr_t *pcs, int max)
{
    uintptr_t rec[2];
    if (!backtrace_frame(t, fp, rec))
        return 0;
    return backtrace_walk(t, rec[0], rec[1], pcs, max);
}

int mote__backtrace_interrupted(const task *t, uintptr_t ip, uintptr_t sp, uintptr_t fp,
                                uintptr_t *pcs, int max)
{
    if (max < 2)
        return 0;
    int n = 0;
    pcs[n++] = ip + 1; /* a pc, not a return address */
    int off = arch_frameless_ret_off((const uint8_t *)ip);
    if (off >= 0 && stack_read_live(t, sp + (uintptr_t)off, &pcs[n], sizeof pcs[n]))
        n++;
    return n + mote__backtrace_from(t, fp, pcs + n, max - n);
}

void mote__backtrace_print(FILE *f, const task *t, const char *indent)
{
    uintptr_t pcs[24];
    mote__backtrace_print_pcs(f, pcs, mote__backtrace(t, pcs, 24), indent);
}

void mote__backtrace_print_pcs(FILE *f, const uintptr_t *pcs, int n, const char *indent)
{
    bool top = true;
    for (int i = 0; i < n; i++) {
        char name[128];
        if (!mote__os_symbol_name((void *)(pcs[i] - 1), name, sizeof name))
            snprintf(name, sizeof name, "%p", (void *)pcs[i]);
        if (top && strncmp(name, "mote__", 6) == 0)
            continue;
        top = false;
        fprintf(f, "%s%s\n", indent, name);
    }
}
