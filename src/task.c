/*
 * task.c - task descriptors: creation, destruction, and naming for
 * diagnostics.  The descriptor comes from mote's heap; a task gets its
 * stack only when it first runs (sched.c), so a spawned task that has not
 * started costs one descriptor and no stack page.
 */
#include "task.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "freeze.h"
#include "os/os.h"

int mote__task_create(mote_fn fn, void *arg, const char *name, int cls, task **out)
{
    task *t = mote_malloc(sizeof *t);
    if (!t)
        return -ENOMEM;
    memset(t, 0, sizeof *t);
    t->stack = stack_unplaced(cls);
    t->fn = fn;
    t->arg = arg;
    t->name = name;
    t->timer_idx = TIMER_NONE;
    *out = t;
    return 0;
}

void mote__task_destroy(task *t, stack_cache *cache)
{
    mote__assert(t->timer_idx == TIMER_NONE);
    mote__assert(!t->trim_queued);
    mote__assert(LOAD(&t->fz_hold, RELAXED) == 0); /* (freeze.h) */
    if (t->started) {
        if (mote__freeze_forget(t)) /* its pages are gone: leave them */
            mote__stack_abandon(&t->stack, cache);
        else
            mote__stack_release(&t->stack, cache);
    }
    mote_free(t);
}

uint64_t mote__task_id(const task *t) { return t->id; }

const char *mote__task_display_name(const task *t, char *buf, size_t len)
{
    if (t->name)
        return t->name;
    if (mote__os_symbol_name((void *)(uintptr_t)t->fn, buf, len))
        return buf;
    snprintf(buf, len, "%p", (void *)(uintptr_t)t->fn);
    return buf;
}
