/*
 * mutex.c - a task-aware mutex.  A task that waits parks (its worker runs
 * other tasks); its wait record lives on its stack, in `waiters`, guarded
 * by the spin lock `lock`, which is never held across a park.
 *
 * `state` holds three bits, changed only by atomic CAS:
 *   MUTEX_LOCKED   held;
 *   MUTEX_WOKEN    an unlocker has woken a waiter that is on its way to
 *                  retry (so further unlocks need not wake another);
 *   MUTEX_WAITERS  the queue may be non-empty (set and cleared only under
 *                  `lock`), so unlock must take the slow path.
 * Uncontended lock and unlock are one CAS each.  Under contention unlock
 * normally releases the mutex and wakes the oldest waiter, which competes
 * with newcomers (throughput: a running task may take the lock again
 * without a switch).  A woken waiter that loses goes back to the front of
 * the queue, keeping the time it first queued.  Fairness: once the oldest
 * waiter has waited MUTEX_STARVE_NS, unlock hands the mutex to it directly
 * (MUTEX_LOCKED never drops, so no newcomer can barge): no waiter waits more
 * than about MUTEX_STARVE_NS plus the critical sections of those ahead of
 * it.  This is Go's starvation mode, decided per unlock.
 *
 * Lifetime: as POSIX allows, whoever finishes with a mutex last may free
 * it; unlock never touches the mutex once another task may own it.  A
 * mutex outlives runs: a task discarded at the end of a run while it held
 * the mutex leaves it locked; one that was being woken gives its wake-up
 * back (mutex_discard), so no later waiter is lost.
 */
#include <errno.h>

#include "mutex.h"
#include "os/os.h"
#include "spin.h"
#include "task.h"
#include "waitq.h"

enum { MUTEX_WAKE_RETRY = 0, MUTEX_WAKE_HANDOFF = 1 };

/* 1 ms, as Go, read on the coarse clock: a hand-off reads it twice, and
 * the precise clock costs ~20 ns a read here, a quarter of a hand-off. */
#define MUTEX_STARVE_NS 1000000

/* The holder's task, for debuggers and dumps (a pointer, not its id: no
 * call into the scheduler on the fast path).  Never dereferenced here. */
static inline void mutex_set_owner(mote_mutex *m, const task *t)
{
    STORE(&m->owner, (uint64_t)(uintptr_t)t, RELAXED);
}

/* Teardown's hook for a record of a discarded task (waitq.h): a waiter
 * that was woken but never ran gives its wake-up back. */
static void mutex_discard(waiter *w)
{
    mote_mutex *m = w->obj;
    spin_lock(&m->lock);
    if (w->linked)
        mote__waitq_unlink(w);
    if (LOAD(&w->t->wait_state, RELAXED) == TASK_CLAIMED) {
        int drop = w->result == MUTEX_WAKE_HANDOFF ? MUTEX_LOCKED : MUTEX_WOKEN;
        FETCH_AND(&m->state, ~drop, RELAXED);
    }
    if (list_empty(&m->waiters))
        FETCH_AND(&m->state, ~MUTEX_WAITERS, RELAXED);
    spin_unlock(&m->lock);
}

static void mutex_lock_slow(mote_mutex *m, task *self)
{
    waiter w;
    mote__waiter_init(&w, self);
    bool woken = false; /* we own the MUTEX_WOKEN bit */
    for (;;) {
        spin_lock(&m->lock);
        int s = LOAD(&m->state, RELAXED);
        for (;;) {
            int clear = woken ? MUTEX_WOKEN : 0;
            if (!(s & MUTEX_LOCKED)) {
                if (CAS(&m->state, &s, (s | MUTEX_LOCKED) & ~clear, ACQUIRE)) {
                    spin_unlock(&m->lock);
                    mutex_set_owner(m, self);
                    return;
                }
                continue;
            }
            if (CAS(&m->state, &s, (s | MUTEX_WAITERS) & ~clear, RELAXED))
                break;
        }
        w.discard = mutex_discard;
        if (woken) {
            mote__waitq_publish_front(&m->waiters, &m->lock, &w, m); /* seniority */
        } else {
            w.since = mote__os_coarse_ns();
            mote__waitq_publish(&m->waiters, &m->lock, &w, m);
        }
        mote__park_prepare("mutex lock", m);
        spin_unlock(&m->lock);
        int how = mote__park();
        mote__waitq_end(self);
        if (how == MUTEX_WAKE_HANDOFF) {
            /* The unlocker kept MUTEX_LOCKED set for us; the ready hand-off
             * (release by the waker, acquire by our worker) orders its
             * critical section before ours: no fence needed. */
            mutex_set_owner(m, self);
            return;
        }
        woken = true;
    }
}

int mote_mutex_lock(mote_mutex *m)
{
    if (!m)
        return -EINVAL;
    task *self = mote__self();
    if (!self)
        return -EPERM;
    int s = 0;
    if (__builtin_expect(CAS(&m->state, &s, MUTEX_LOCKED, ACQUIRE), 1)) {
        mutex_set_owner(m, self);
        return 0;
    }
    mutex_lock_slow(m, self);
    return 0;
}

int mote_mutex_trylock(mote_mutex *m)
{
    if (!m)
        return -EINVAL;
    int s = 0;
    if (!CAS(&m->state, &s, MUTEX_LOCKED, ACQUIRE)) {
        if (s & MUTEX_LOCKED)
            return -EBUSY;
        /* Free, but with waiters about: only under `lock` (see unlock). */
        spin_lock(&m->lock);
        s = LOAD(&m->state, RELAXED);
        while (!(s & MUTEX_LOCKED) && !CAS(&m->state, &s, s | MUTEX_LOCKED, ACQUIRE))
            ;
        spin_unlock(&m->lock);
        if (s & MUTEX_LOCKED)
            return -EBUSY;
    }
    mutex_set_owner(m, mote__self());
    return 0;
}

/* Unlock must not touch the mutex once another task may own it (the new
 * owner may free it, as POSIX allows).  Two rules make that so: a release
 * that leaves the state 0 (when anyone may take the mutex with one CAS) is
 * the unlocker's last access to it; any other release leaves MUTEX_WOKEN
 * set, so the next owner must first take `lock`, which the unlocker drops
 * as its own last access. */
int mote_mutex_unlock(mote_mutex *m)
{
    if (!m)
        return -EINVAL;
    mutex_set_owner(m, NULL);
    for (;;) {
        int s = MUTEX_LOCKED;
        if (__builtin_expect(CAS(&m->state, &s, 0, RELEASE), 1))
            return 0;
        if (!(s & MUTEX_LOCKED))
            return -EPERM;

        spin_lock(&m->lock);
        s = LOAD(&m->state, RELAXED);
        if (!(s & MUTEX_LOCKED)) {
            spin_unlock(&m->lock);
            return -EPERM;
        }
        task *held;
        waiter *w = mote__waitq_first(&m->waiters, &held);
        int wake = 0;
        if (w && mote__os_coarse_ns() - w->since >= MUTEX_STARVE_NS) {
            wake = MUTEX_WAKE_HANDOFF; /* stays locked, now for w */
        } else if (w && !(s & MUTEX_WOKEN)) {
            wake = MUTEX_WAKE_RETRY;
        } else if (s & MUTEX_WOKEN) {
            w = NULL; /* a woken waiter is on its way: release, keep WOKEN */
        } else {
            /* MUTEX_WAITERS was stale: clear it, then release by the fast
             * path, as our last access. */
            while (!CAS(&m->state, &s, s & ~MUTEX_WAITERS, RELAXED))
                ;
            mote__freeze_let_go(held);
            spin_unlock(&m->lock);
            continue;
        }
        /* Under `lock` and with MUTEX_LOCKED ours, only a woken waiter
         * clearing MUTEX_WOKEN can change the state meanwhile: retry. */
        for (;;) {
            int ns;
            if (wake == MUTEX_WAKE_HANDOFF)
                ns = s;
            else if (w)
                ns = (s & ~MUTEX_LOCKED) | MUTEX_WOKEN;
            else
                ns = s & ~MUTEX_LOCKED;
            if (w ? !w->link.next : list_empty(&m->waiters))
                ns &= ~MUTEX_WAITERS; /* the queue is (about to be) empty */
            if (CAS(&m->state, &s, ns, RELEASE))
                break;
        }
        if (!w) {
            mote__freeze_let_go(held);
            spin_unlock(&m->lock);
            return 0;
        }
        /* Mutex waiters have no timer and sit in one queue: the claim
         * cannot fail, except to a teardown in progress (the record then
         * stays for mutex_discard). */
        task *t = w->t;
        bool claimed = mote__park_claim(t);
        if (claimed) {
            w->result = wake;
            mote__waitq_unlink(w);
        } else { /* the run is ending: take back what we set for t */
            FETCH_AND(&m->state,
                      wake == MUTEX_WAKE_HANDOFF ? ~MUTEX_LOCKED : ~MUTEX_WOKEN, RELAXED);
        }
        mote__freeze_let_go(held); /* (before t may run and end) */
        spin_unlock(&m->lock);
        if (claimed)
            mote__park_ready(t, wake);
        return 0;
    }
}
