/*
 * cond.c - task-aware condition variables.  A waiter queues on the
 * condition (under its spin lock) before it unlocks the mutex, so a signal
 * sent after it released the mutex finds it.  A signal skips waiters whose
 * timer already claimed them: no signal is lost to a timed-out waiter.
 */
#include <errno.h>

#include "mutex.h"
#include "spin.h"
#include "waitq.h"

static int cond_wait(mote_cond *c, mote_mutex *m, int64_t deadline)
{
    task *self = mote__self();
    if (!self)
        return -EPERM;
    if (!mutex_is_locked(m))
        return -EPERM;
    waiter w;
    mote__waiter_init(&w, self);
    spin_lock(&c->lock);
    mote__park_prepare("cond wait", c);
    mote__waitq_publish(&c->waiters, &c->lock, &w, c);
    spin_unlock(&c->lock);
    mote_mutex_unlock(m);
    int r = mote__park_until(deadline);
    if (r < 0) {
        /* -ETIMEDOUT (or -ENOMEM for the timer): we claimed ourselves; a
         * signaller may have unlinked the record and lost the claim (it
         * then moved on to the next waiter). */
        spin_lock(&c->lock);
        if (w.linked)
            mote__waitq_unlink(&w);
        spin_unlock(&c->lock);
    }
    mote__waitq_end(self);
    mote_mutex_lock(m);
    return r < 0 ? r : 0;
}

int mote_cond_wait(mote_cond *c, mote_mutex *m)
{
    if (!c || !m)
        return -EINVAL;
    return cond_wait(c, m, -1);
}

int mote_cond_timedwait(mote_cond *c, mote_mutex *m, int64_t ns)
{
    if (!c || !m)
        return -EINVAL;
    if (!mote__self() || !mutex_is_locked(m))
        return -EPERM; /* misuse wins over the timeout, whatever ns is */
    if (ns <= 0)
        return -ETIMEDOUT;
    return cond_wait(c, m, mote__park_deadline(ns));
}

int mote_cond_signal(mote_cond *c)
{
    if (!c)
        return -EINVAL;
    spin_lock(&c->lock);
    waiter *w = mote__waitq_claim(&c->waiters);
    spin_unlock(&c->lock);
    if (w)
        mote__park_ready(w->t, 0);
    return 0;
}

int mote_cond_broadcast(mote_cond *c)
{
    if (!c)
        return -EINVAL;
    waiter *list = NULL;
    spin_lock(&c->lock);
    mote__waitq_claim_all(&c->waiters, 0, &list);
    spin_unlock(&c->lock);
    mote__waitq_wake(list);
    return 0;
}
