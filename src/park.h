/*
 * park.h - the park protocol: how a task waits and how any thread wakes
 * it.  Channels, select, mutexes, conditions, wait groups, timers and the
 * netpoller all build on it; none of them knows about workers or queues.
 *
 * The protocol (no lost wake-ups, safe across workers and from plain
 * threads):
 *
 *   waiter (a running task)                 waker (any thread)
 *   -----------------------                 ------------------
 *   lock(q)                                 lock(q)
 *   mote__park_prepare(why, obj)            w = first record in q; unlink it
 *   publish a record (waitq.h; it lives     if (mote__park_claim(w->t)) {
 *     on the task's stack: stacks never         hand w its result
 *     move)                                     mote__park_ready(t, value)
 *   unlock(q)                                } (else t was claimed by another
 *   r = mote__park()  or                       waker or its timer: skip it)
 *   r = mote__park_until(deadline)           unlock(q) (may precede ready)
 *
 * A waiter is claimed exactly once (an atomic WAITING -> CLAIMED
 * transition), by a waker or by its own timer; park returns only after a
 * claim and a ready.  After a timeout the waiter takes its records out of
 * every queue it published them in, under that queue's lock, tolerating a
 * waker that already unlinked one but lost the claim.  A task is pinned to
 * one worker once started, so what the claimer wrote before ready is seen by
 * the task after park returns (the ready hand-off is release/acquire).
 *
 * A claim from a plain thread holds the run open until the matching ready:
 * mote_run's teardown waits for it, so a task is never destroyed between
 * the two.  Once teardown has begun, such claims fail.
 */
#ifndef MOTE_PARK_H
#define MOTE_PARK_H

#include <stdbool.h>
#include <stdint.h>

typedef struct task task;

/* The running task on this thread, or NULL on a plain thread (including a
 * worker's own scheduler context).  Inline: every blocking call asks. */
extern __thread task *mote__current_task __attribute__((tls_model("initial-exec")));
static inline task *mote__self(void) { return mote__current_task; }

/* Marks the current task as about to wait; why is a static string shown in
 * deadlock reports and task dumps ("chan receive", "mutex lock", ...), obj
 * what it waits on.  Call before publishing the task where a waker can find
 * it. */
void mote__park_prepare(const char *why, const void *obj);

/* Gives up the worker until claimed and readied.  Returns the value the
 * claimer passed to mote__park_ready. */
int mote__park(void);

/* As mote__park, but a timer claims the task at deadline (mote_now()
 * clock) and the call returns -ETIMEDOUT.  deadline < 0 waits forever.
 * -ENOMEM (not parked at all) when the timer cannot be recorded. */
int mote__park_until(int64_t deadline);

/* Attempts the WAITING -> CLAIMED transition: true for exactly one caller
 * per wait.  Never blocks. */
bool mote__park_claim(task *t);

/* Makes a claimed task runnable again on its own worker; it returns value
 * from its park.  Any thread. */
void mote__park_ready(task *t, int value);

/* Deadline for a relative timeout: -1 (forever) for ns < 0, 0 (always
 * past) for ns == 0, now + ns otherwise, saturating. */
int64_t mote__park_deadline(int64_t ns);

/* Sleeps about ns (> 0) where the caller is: a task parks (its worker
 * runs the others meanwhile), any other thread sleeps in the kernel.  For
 * the runtime's own short waits on something another thread does. */
void mote__park_nap(int64_t ns);

/* The id of a task, for records and diagnostics. */
uint64_t mote__task_id(const task *t);

#endif /* MOTE_PARK_H */
