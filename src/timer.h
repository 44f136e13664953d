/*
 * timer.h - a worker's timers: a binary min-heap of tasks ordered by
 * deadline.  Owned by one worker; no locking.  A task is in at most one heap
 * (its worker's) and knows its index, so cancelling is O(log n).
 */
#ifndef MOTE_TIMER_H
#define MOTE_TIMER_H

#include <stddef.h>
#include <stdint.h>

#define TIMER_NONE UINT32_MAX

typedef struct task task;

typedef struct timer_heap {
    task **v;
    uint32_t n, cap;
} timer_heap;

int mote__timer_add(timer_heap *h, task *t, int64_t deadline); /* 0 | -ENOMEM */
void mote__timer_cancel(timer_heap *h, task *t);
/* Earliest deadline, or INT64_MAX when empty. */
int64_t mote__timer_next(const timer_heap *h);
/* Removes and returns a task whose deadline is <= now, or NULL. */
task *mote__timer_pop_due(timer_heap *h, int64_t now);
void mote__timer_free(timer_heap *h);

#endif /* MOTE_TIMER_H */
