/*
 * backtrace.c - frame-pointer walks over parked tasks (see backtrace.h).
 * Reads only the task's own stack, bounded by its slot, so a corrupt chain
 * cannot send it elsewhere.
 */
#include "backtrace.h"

#include <string.h>

#include "os/os.h"

static int backtrace_walk(const task *t, uintptr_t fp, uintptr_t ret, uintptr_t *pcs,
                          int max)
{
    uintptr_t lo = stack_lo(&t->stack), hi = stack_top(&t->stack);
    int n = 0;
    while (n < max && ret) {
        pcs[n++] = ret;
        if (fp < lo || fp + 16 > hi || (fp & 7))
            break;
        uintptr_t next = ((const uintptr_t *)fp)[0];
        ret = ((const uintptr_t *)fp)[1];
        if (next <= fp)
            break;
        fp = next;
    }
    return n;
}

int mote__backtrace(const task *t, uintptr_t *pcs, int max)
{
    uintptr_t fp, ret;
    arch_ctx_frame(&t->ctx, &fp, &ret);
    return backtrace_walk(t, fp, ret, pcs, max);
}

int mote__backtrace_from(const task *t, uintptr_t fp, uintptr_t *pcs, int max)
{
    uintptr_t lo = stack_lo(&t->stack), hi = stack_top(&t->stack);
    if (fp < lo || fp + 16 > hi || (fp & 7))
        return 0;
    return backtrace_walk(t, ((const uintptr_t *)fp)[0], ((const uintptr_t *)fp)[1], pcs,
                          max);
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
