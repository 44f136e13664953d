/*
 * sched.h - the scheduler's internal interface: the current task, and the
 * park/unpark protocol that channels, select, mutexes, conditions and wait
 * groups build on.
 *
 * The wait protocol (no lost wake-ups, safe across workers and from plain
 * threads):
 *
 *   waiter (a running task)                 waker (any thread)
 *   -----------------------                 ------------------
 *   lock(q)                                 lock(q)
 *   mote__sched_prepare_wait(why, obj)            t = first waiter in q; unlink it
 *   enqueue self (a record on its stack:    if (mote__sched_claim(t)) {
 *     stacks never move)                        hand t its result
 *   unlock(q)                                   mote__sched_ready(t)
 *   r = mote__sched_park()  or                    }   (else t was already claimed by
 *   r = mote__sched_park_until(deadline)              another waker or its timer:
 *                                               skip it)
 *                                           unlock(q)
 *
 * A waiter is claimed exactly once (an atomic WAITING -> CLAIMED transition),
 * by a waker or by its own timer.  mote__sched_park returns only after a claim and
 * mote__sched_ready.  After a timeout the waiter must take its record out of every
 * queue it published it in, under that queue's lock, tolerating a waker that
 * already unlinked it but lost the claim.  A task is pinned to one worker
 * once started, so its result, written before mote__sched_ready, is seen by it
 * after mote__sched_park returns (the ready hand-off is release/acquire).
 */
#ifndef MOTE_SCHED_H
#define MOTE_SCHED_H

#include <stdbool.h>
#include <stdint.h>

typedef struct task task;

/* The running task on this thread, or NULL on a plain thread (including a
 * worker's own scheduler context).  Inline: every blocking call asks. */
extern __thread task *mote__sched_current __attribute__((tls_model("initial-exec")));
static inline task *sched_self(void)
{
    return mote__sched_current;
}

/* Marks the current task as about to wait; why is a static string shown in
 * deadlock and task dumps ("chan receive", "mutex", ...), obj what it waits
 * on.  Call before publishing the task where a waker can find it. */
void mote__sched_prepare_wait(const char *why, const void *obj);

/* Gives up the worker until claimed and readied.  Returns the value the
 * claimer passed to mote__sched_ready. */
int mote__sched_park(void);

/* As mote__sched_park, but a timer claims the task at deadline (mote_now() clock)
 * and the call returns -ETIMEDOUT.  deadline < 0 waits forever. */
int mote__sched_park_until(int64_t deadline);

/* Attempts the WAITING -> CLAIMED transition: true for exactly one caller
 * per wait.  Never blocks. */
bool mote__sched_claim(task *t);

/* Makes a claimed task runnable again on its own worker; it returns result
 * from mote__sched_park.  Any thread. */
void mote__sched_ready(task *t, int result);

/* mote_mem_release's share for stacks: asks every worker to trim all its
 * parked tasks and give its whole stack pool back now.  Any thread. */
void mote__sched_mem_release(void);

/* The id and name of a task, for records and diagnostics. */
uint64_t mote__sched_task_id(const task *t);

/* Aborts the process with a clear message: a void blocking API was called
 * where no task runs (fn is the API's name). */
_Noreturn void mote__sched_die_not_task(const char *fn);

#endif /* MOTE_SCHED_H */
