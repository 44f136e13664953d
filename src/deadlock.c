/*
 * deadlock.c - Go's "all goroutines are asleep": a worker about to sleep
 * with no timer counts itself under idle_lock; when every worker is
 * counted, all queues are empty and tasks are still live, no task can ever
 * run again.  Unless a plain (non-task) thread might still wake one: once a
 * plain thread has used the runtime, detection is off for that run.  The
 * report lists every task, what it waits on and where.
 */
#include <stdio.h>

#include "backtrace.h"
#include "netpoll.h"
#include "offload.h"
#include "runtime.h"

#define rt mote__rt

static void deadlock_report(void)
{
    enum { TRACED = 32, LISTED = 1000 };
    uint64_t n = 0;
    fprintf(stderr, "mote: all tasks are asleep - deadlock!\n");
    for (int i = 0; i < rt.nworkers; i++) {
        for (list_node *l = rt.w[i].all.head; l; l = l->next, n++) {
            const task *t = list_entry(l, task, all_link);
            if (n >= LISTED)
                continue;
            char buf[128];
            const char *why = t->wait_why ? t->wait_why : "running";
            fprintf(stderr, "  task %llu (%s) [%s", (unsigned long long)t->id,
                    mote__task_display_name(t, buf, sizeof buf), why);
            if (t->wait_obj)
                fprintf(stderr, " %p", t->wait_obj);
            fprintf(stderr, "] on worker %d\n", i);
            if (n < TRACED)
                mote__backtrace_print(stderr, t, "      ");
        }
    }
    if (n > LISTED)
        fprintf(stderr, "  ... and %llu more tasks\n", (unsigned long long)(n - LISTED));
    fflush(stderr);
}

bool mote__deadlock_check(void)
{
    if (rt.nidle_notimer < rt.nworkers || LOAD(&rt.external_seen, SEQ_CST))
        return false;
    /* A task waiting for a descriptor or an offloaded call can still be
     * woken by the outside world. */
    if (mote__netpoll_waiting() || mote__offload_pending())
        return false;
    uint64_t live = LOAD(&rt.ext_spawned, RELAXED);
    for (int i = 0; i < rt.nworkers; i++) {
        worker *v = &rt.w[i];
        if (LOAD(&v->inbox, SEQ_CST) || LOAD(&v->fresh_n, SEQ_CST) || v->timers.n)
            return false;
        live += LOAD(&v->n_spawned, RELAXED) - LOAD(&v->n_exited, RELAXED);
    }
    if (live == 0)
        return false;
    deadlock_report();
    return true;
}
