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
#include "os/os.h"
#include "runtime.h"
#include "spin.h"
#include "stack.h"

#define rt mote__rt

static void deadlock_report(uint64_t starved)
{
    enum { TRACED = 32, LISTED = 1000 };
    uint64_t n = 0;
    if (starved)
        fprintf(stderr,
                "mote: %llu new task%s cannot start: no memory for a stack for %d s, "
                "and every other task is asleep for good\n",
                (unsigned long long)starved, starved == 1 ? "" : "s",
                (int)(SCHED_STARVED_GIVEUP / 1000000000));
    else
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

/* Whether a stack of the class v's first new task needs can be mapped now:
 * memory may have come back since its worker last tried, and that worker
 * waits out its backoff (the run ended with -ENOMEM though the program had
 * just unmapped what filled its address space). */
static bool deadlock_stack_now(worker *v)
{
    spin_lock(&v->fresh_lock);
    int cls = v->fresh_head ? stack_cls(&v->fresh_head->stack) : -1;
    spin_unlock(&v->fresh_lock);
    return cls < 0 || mote__stack_can_map(cls);
}

int mote__deadlock_check(void)
{
    if (rt.nidle_notimer < rt.nworkers || LOAD(&rt.external_seen, SEQ_CST))
        return 0;
    /* A task waiting for a descriptor or an offloaded call can still be
     * woken by the outside world. */
    if (mote__netpoll_waiting() || mote__offload_pending())
        return 0;
    uint64_t live = LOAD(&rt.ext_spawned, RELAXED), starved = 0;
    int64_t now = mote__os_now_ns();
    for (int i = 0; i < rt.nworkers; i++) {
        worker *v = &rt.w[i];
        if (LOAD(&v->inbox, SEQ_CST) || v->timers.n)
            return 0;
        /* New tasks wait for a stack: only the exit of a task frees one
         * (and the releases already tried), and none will exit if every
         * other task sleeps for good.  (idle_lock orders v's starved_*.) */
        uint32_t fresh = LOAD(&v->fresh_n, SEQ_CST);
        if (fresh) {
            if (!v->starved_from || now - v->starved_from < SCHED_STARVED_GIVEUP ||
                deadlock_stack_now(v))
                return 0;
            starved += fresh;
        }
        live += LOAD(&v->n_spawned, RELAXED) - LOAD(&v->n_exited, RELAXED);
    }
    if (live == 0)
        return 0;
    deadlock_report(starved);
    return starved ? -ENOMEM : -EDEADLK;
}
