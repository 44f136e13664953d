/*
 * backtrace.c - frame-pointer walks over parked tasks (see backtrace.h).
 * Reads only the task's own stack, bounded by its slot, so a corrupt chain
 * cannot send it elsewhere.
 */
#include "backtrace.h"

#include <string.h>

#include "os/os.h"

int mote__backtrace(const task *t, uintptr_t *pcs, int max)
{
    uintptr_t lo = stack_lo(&t->stack), hi = stack_top(&t->stack);
    uintptr_t fp, ret;
    arch_ctx_frame(&t->ctx, &fp, &ret);
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

void mote__backtrace_print(FILE *f, const task *t, const char *indent)
{
    uintptr_t pcs[24];
    int n = mote__backtrace(t, pcs, 24);
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
