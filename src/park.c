/*
 * park.c - the park protocol (park.h): a task waits, any thread claims and
 * readies it.  A task is pinned to its worker, so parking is a switch to the
 * next task of the same worker and readying is a push onto that worker's
 * ready queue (same thread) or inbox (any other thread, then a wake if it
 * sleeps).
 *
 * Plain threads: a claim made outside any worker counts in
 * rt.plain_claims until its ready, and fails once teardown began (both
 * seq_cst, so either the claimer sees `teardown` or teardown sees the
 * count), so teardown never destroys a task a plain thread is readying.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "os/os.h"
#include "runtime.h"

#define rt mote__rt

void mote__park_prepare(const char *why, const void *obj)
{
    task *t = mote__self();
    mote__assert(t && LOAD(&t->wait_state, RELAXED) == TASK_RUNNING);
    t->wait_why = why;
    t->wait_obj = obj;
    STORE(&t->wait_state, TASK_WAITING, RELEASE);
}

bool mote__park_claim(task *t)
{
    bool plain = mote__worker_self == NULL;
    if (plain) {
        FETCH_ADD(&rt.plain_claims, 1, SEQ_CST);
        if (LOAD(&rt.teardown, SEQ_CST)) {
            FETCH_SUB(&rt.plain_claims, 1, SEQ_CST);
            return false;
        }
    }
    int expect = TASK_WAITING;
    if (CAS(&t->wait_state, &expect, TASK_CLAIMED, ACQ_REL))
        return true;
    mote__assert(expect == TASK_CLAIMED || expect == TASK_RUNNING);
    if (plain)
        FETCH_SUB(&rt.plain_claims, 1, SEQ_CST);
    return false;
}

void mote__park_ready(task *t, int value)
{
    mote__assert(LOAD(&t->wait_state, RELAXED) == TASK_CLAIMED);
    t->wake_result = value;
    worker *v = t->worker, *w = mote__worker_self;
    if (v == w) {
        rq_push(w, t);
        return;
    }
    if (!w)
        STORE(&rt.external_seen, 1, SEQ_CST);
    inbox_push(v, t);
    mote__sched_wake(v);
    if (!w)
        FETCH_SUB(&rt.plain_claims, 1, SEQ_CST);
}

int mote__park_until(int64_t deadline)
{
    worker *w = mote__worker_self;
    task *t = w->current;
    mote__assert(t && t == mote__self());
    if (deadline >= 0 && mote__timer_add(&w->timers, t, deadline)) {
        /* No memory for the timer: end the wait now if nobody else has. */
        if (mote__park_claim(t)) {
            STORE(&t->wait_state, TASK_RUNNING, RELAXED);
            return -ENOMEM;
        }
    }
    COUNT(&w->n_blocked, 1);
    mote__trim_on_park(&w->trim, t);
    task *next = mote__sched_pick(w);
    if (next != t)
        mote__sched_switch(w, t, next);
    mote__assert(LOAD(&t->wait_state, RELAXED) == TASK_CLAIMED);
    COUNT(&w->n_blocked, -1);
    if (t->timer_idx != TIMER_NONE)
        mote__timer_cancel(&w->timers, t);
    t->wait_why = NULL;
    STORE(&t->wait_state, TASK_RUNNING, RELAXED);
    return t->wake_result;
}

int mote__park(void) { return mote__park_until(-1); }

void mote__park_nap(int64_t ns)
{
    if (mote_sleep(ns) == -EPERM) /* not in a task */
        nanosleep(&(struct timespec){ns / 1000000000, ns % 1000000000}, NULL);
}

int64_t mote__park_deadline(int64_t ns)
{
    if (ns < 0)
        return -1;
    if (ns == 0) /* due already: no clock read for a probe that never waits */
        return 0;
    int64_t now = mote__os_now_ns();
    return ns > INT64_MAX - now ? INT64_MAX : now + ns;
}
