/*
 * sched_stats.c - the scheduler's counters, summed over workers for
 * metrics (sched_stats.h), and folded into totals when a run ends so that
 * metrics read afterwards still count what happened.
 */
#include "sched_stats.h"

#include <string.h>

#include "os/os.h"
#include "runtime.h"

#define rt mote__rt

static uint64_t stats_total_spawned; /* atomic: from runs that ended */

void mote__sched_stats_fold(void)
{
    uint64_t spawned = LOAD(&rt.ext_spawned, RELAXED);
    for (int i = 0; i < rt.nworkers; i++)
        spawned += rt.w[i].n_spawned;
    FETCH_ADD(&stats_total_spawned, spawned, RELAXED);
}

void mote__sched_stats_io_wake(worker *w, task *t)
{
    int64_t d = (mote__os_now_ns() - LOAD(&t->parked_at, RELAXED)) / 1000; /* us */
    t->io_woken = false;
    int b = d <= 10 ? 0 : d <= 100 ? 1 : d <= 1000 ? 2 : d <= 10000 ? 3 : 4;
    COUNT(&w->io_wake[b], 1);
}

void mote__sched_stats_read(sched_stats *s)
{
    memset(s, 0, sizeof *s);
    s->spawned = LOAD(&stats_total_spawned, RELAXED);
    s->stacks_trimmed = mote__trim_total_trimmed();
    pthread_rwlock_rdlock(&rt.ext_lock);
    worker *ws = LOAD(&rt.w, ACQUIRE);
    if (ws) {
        uint64_t spawned = LOAD(&rt.ext_spawned, RELAXED);
        uint64_t exited = 0;
        int64_t blocked = 0;
        for (int i = 0; i < rt.nworkers; i++) {
            spawned += LOAD(&ws[i].n_spawned, RELAXED);
            exited += LOAD(&ws[i].n_exited, RELAXED);
            blocked += LOAD(&ws[i].n_blocked, RELAXED);
            int64_t used = LOAD(&ws[i].stacks.in_use, RELAXED);
            s->stacks_in_use += used > 0 ? (uint64_t)used : 0;
            for (int c = 0; c < STACK_NCLASS; c++)
                s->stacks_pooled += LOAD(&ws[i].stacks.count[c], RELAXED);
            s->stacks_trimmed += LOAD(&ws[i].trim.pages.released, RELAXED);
            for (int b = 0; b < TRIM_NBUCKET; b++)
                s->highwater[b] += LOAD(&ws[i].trim.hist[b], RELAXED);
            for (int b = 0; b < 5; b++)
                s->io_wake[b] += LOAD(&ws[i].io_wake[b], RELAXED);
        }
        s->stacks_pooled += mote__stack_pooled_global();
        s->workers = (uint64_t)rt.nworkers;
        s->spawned += spawned;
        s->live = spawned > exited ? spawned - exited : 0;
        s->blocked = blocked > 0 ? (uint64_t)blocked : 0;
        if (s->blocked > s->live)
            s->blocked = s->live;
        s->runnable = s->live - s->blocked;
    }
    pthread_rwlock_unlock(&rt.ext_lock);
}
