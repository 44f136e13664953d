/*
 * waitgroup.c - task-aware wait groups.  `count` changes under `lock`, and
 * is read under it: the last mote_wg_done touches the group until its
 * unlock, and a waiter that saw 0 may free the group at once.  Waiters sit
 * in `waiters` (waitq.h) and are all woken, after the unlock, by the change
 * that brings the count to 0.
 */
#include <errno.h>

#include "spin.h"
#include "waitq.h"

int mote_wg_add(mote_wg *wg, int64_t delta)
{
    if (!wg)
        return -EINVAL;
    spin_lock(&wg->lock);
    int64_t c;
    if (__builtin_add_overflow(wg->count, delta, &c) || c < 0) {
        spin_unlock(&wg->lock);
        return -EINVAL; /* the count is unchanged */
    }
    wg->count = c;
    waiter *list = NULL;
    if (c == 0)
        mote__waitq_claim_all(&wg->waiters, 0, &list);
    spin_unlock(&wg->lock);
    mote__waitq_wake(list);
    return 0;
}

int mote_wg_done(mote_wg *wg) { return mote_wg_add(wg, -1); }

int mote_wg_wait(mote_wg *wg)
{
    if (!wg)
        return -EINVAL;
    task *self = mote__self();
    if (!self)
        return -EPERM;
    /* No lock-free fast path: the last mote_wg_done still touches the
     * group (its unlock) after the count reaches 0, and a waiter that
     * returned may free the group.  Taking the lock orders us after it. */
    spin_lock(&wg->lock);
    if (wg->count == 0) {
        spin_unlock(&wg->lock);
        return 0;
    }
    waiter w;
    mote__waiter_init(&w, self);
    mote__park_prepare("wait group", wg);
    mote__waitq_publish(&wg->waiters, &wg->lock, &w, wg);
    spin_unlock(&wg->lock);
    mote__park();
    mote__waitq_end(self);
    return 0;
}
