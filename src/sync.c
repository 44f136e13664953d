/*
 * sync.c - task-aware wait groups, mutexes and condition variables.  A task
 * that waits parks (its worker runs other tasks); wait records live on the
 * waiting task's stack and sit in the object's FIFO queue (chan.h).
 *
 * Each object has a spinlock (the `lock` field) guarding its queue; it is
 * never held across a park.  Wake-ups follow sched.h: pop and claim under
 * the lock, drop the lock, then mote__sched_ready().
 *
 * Mutex.  `state` holds three bits, changed only by atomic CAS:
 *   SYNC_LOCKED   held;
 *   SYNC_WOKEN    an unlocker has woken a waiter that is on its way to
 *                 retry (so further unlocks need not wake another);
 *   SYNC_WAITERS  the queue may be non-empty (set and cleared only under
 *                 `lock`), so unlock must take the slow path.
 * Uncontended lock and unlock are one CAS each.  Under contention unlock
 * normally releases the mutex and wakes the oldest waiter, which competes
 * with newcomers (throughput: a running task may take the lock again
 * without a context switch).  A woken waiter that loses goes back to the
 * front of the queue, keeping the time it first queued.  Fairness: once the
 * oldest waiter has waited SYNC_STARVE_NS, unlock hands the mutex to it
 * directly (SYNC_LOCKED never drops, so no newcomer can barge): no waiter
 * waits more than about SYNC_STARVE_NS plus the critical sections of those
 * queued ahead of it.  This is Go's starvation mode, decided per unlock.
 *
 * Wait group.  `count` changes under `lock`, and is read under it: the
 * last mote_wg_done touches the group until its unlock, and a waiter that
 * saw 0 may free the group at once.
 *
 * Lifetime: as POSIX allows for its mutexes, a mutex, wait group or
 * condition may be freed by whoever finishes with it last; no operation
 * touches the object after the point where another task can observe it
 * released (see mote_mutex_unlock).
 *
 * Condition variable.  A waiter queues on the condition before it unlocks
 * the mutex, so a signal sent after it released the mutex finds it.  A
 * signal skips waiters whose timer already claimed them: no signal is lost
 * to a timed-out waiter.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "chan.h"
#include "os/os.h"
#include "spin.h"

enum { SYNC_LOCKED = 1, SYNC_WOKEN = 2, SYNC_WAITERS = 4 };
enum { SYNC_WAKE_RETRY = 0, SYNC_WAKE_HANDOFF = 1 };

/* 1 ms, as Go, read on the coarse clock: a hand-off reads it twice, and
 * the precise clock costs ~20 ns a read here, a quarter of a hand-off. */
#define SYNC_STARVE_NS 1000000

static void sync_waiter_init(chan_waiter *w, task *self)
{
    w->next = w->prev = NULL;
    w->t = self;
    w->elem = NULL;
    w->idx = 0;
    w->linked = false;
    w->is_select = false;
    w->result = 0;
    w->since = 0;
}

/* ---- wait groups ------------------------------------------------------ */

MOTE_API int mote_wg_add(mote_wg *wg, int64_t delta)
{
    if (!wg)
        return -EINVAL;
    spin_lock(&wg->lock);
    int64_t c = wg->count;
    if ((delta < 0 && c < -delta) || (delta > 0 && c > INT64_MAX - delta)) {
        spin_unlock(&wg->lock);
        return -EINVAL;
    }
    c += delta;
    wg->count = c;
    chan_waiter *list = NULL, *w;
    if (c == 0) {
        while ((w = chan_waitq_claim(&wg->waiters)) != NULL) {
            w->next = list;
            list = w;
        }
    }
    spin_unlock(&wg->lock);
    while (list) {
        w = list;
        list = w->next;
        mote__sched_ready(w->t, 0);
    }
    return 0;
}

MOTE_API int mote_wg_done(mote_wg *wg)
{
    return mote_wg_add(wg, -1);
}

MOTE_API void mote_wg_wait(mote_wg *wg)
{
    if (!wg) {
        fprintf(stderr, "mote: mote_wg_wait(NULL)\n");
        abort();
    }
    /* No lock-free fast path: the last mote_wg_done still touches the
     * group (its unlock) after the count reaches 0, and a waiter that
     * returned may free the group.  Taking the lock orders us after it. */
    task *self = sched_self();
    spin_lock(&wg->lock);
    if (wg->count == 0) {
        spin_unlock(&wg->lock);
        return;
    }
    if (!self) {
        spin_unlock(&wg->lock);
        mote__sched_die_not_task("mote_wg_wait");
    }
    chan_waiter w;
    sync_waiter_init(&w, self);
    mote__sched_prepare_wait("wait group", wg);
    chan_waitq_push(&wg->waiters, &w);
    spin_unlock(&wg->lock);
    mote__sched_park();
}

/* ---- mutexes ---------------------------------------------------------- */

static inline bool sync_cas(int *p, int *expected, int desired, int order)
{
    return __atomic_compare_exchange_n(p, expected, desired, false, order,
                                       __ATOMIC_RELAXED);
}

/* The holder's task, for debuggers and dumps (a pointer, not its id: no
 * call into the scheduler on the fast path).  Never dereferenced here. */
static inline void sync_set_owner(mote_mutex *m, const task *t)
{
    __atomic_store_n(&m->owner, (uint64_t)(uintptr_t)t, __ATOMIC_RELAXED);
}

static void sync_mutex_lock_slow(mote_mutex *m, task *self)
{
    chan_waiter w;
    sync_waiter_init(&w, self);
    bool woken = false; /* we own the SYNC_WOKEN bit */
    for (;;) {
        spin_lock(&m->lock);
        int s = __atomic_load_n(&m->state, __ATOMIC_RELAXED);
        for (;;) {
            int clear = woken ? SYNC_WOKEN : 0;
            if (!(s & SYNC_LOCKED)) {
                if (sync_cas(&m->state, &s, (s | SYNC_LOCKED) & ~clear,
                             __ATOMIC_ACQUIRE)) {
                    spin_unlock(&m->lock);
                    sync_set_owner(m, self);
                    return;
                }
                continue;
            }
            if (sync_cas(&m->state, &s, (s | SYNC_WAITERS) & ~clear,
                         __ATOMIC_RELAXED))
                break;
        }
        if (woken) {
            chan_waitq_push_front(&m->waiters, &w); /* keep seniority */
        } else {
            w.since = mote__os_coarse_ns();
            chan_waitq_push(&m->waiters, &w);
        }
        mote__sched_prepare_wait("mutex lock", m);
        spin_unlock(&m->lock);
        if (mote__sched_park() == SYNC_WAKE_HANDOFF) {
            /* The unlocker kept SYNC_LOCKED set for us; the ready hand-off
             * (release by the waker, acquire by our worker) orders its
             * critical section before ours: no fence needed. */
            sync_set_owner(m, self);
            return;
        }
        woken = true;
    }
}

MOTE_API void mote_mutex_lock(mote_mutex *m)
{
    if (!m) {
        fprintf(stderr, "mote: mote_mutex_lock(NULL)\n");
        abort();
    }
    task *self = sched_self();
    if (!self)
        mote__sched_die_not_task("mote_mutex_lock");
    int s = 0;
    if (__builtin_expect(sync_cas(&m->state, &s, SYNC_LOCKED,
                                  __ATOMIC_ACQUIRE), 1)) {
        sync_set_owner(m, self);
        return;
    }
    sync_mutex_lock_slow(m, self);
}

MOTE_API int mote_mutex_trylock(mote_mutex *m)
{
    if (!m)
        return -EINVAL;
    int s = 0;
    if (!sync_cas(&m->state, &s, SYNC_LOCKED, __ATOMIC_ACQUIRE)) {
        if (s & SYNC_LOCKED)
            return -EBUSY;
        /* Free, but with waiters about: only under `lock` (see unlock). */
        spin_lock(&m->lock);
        s = __atomic_load_n(&m->state, __ATOMIC_RELAXED);
        while (!(s & SYNC_LOCKED) &&
               !sync_cas(&m->state, &s, s | SYNC_LOCKED, __ATOMIC_ACQUIRE))
            ;
        spin_unlock(&m->lock);
        if (s & SYNC_LOCKED)
            return -EBUSY;
    }
    task *self = sched_self();
    sync_set_owner(m, self);
    return 0;
}

/* Unlock must not touch the mutex once another task may own it (the new
 * owner may free it, as POSIX allows).  Two rules make that so: a release
 * that leaves the state 0 (when anyone may take the mutex with one CAS) is
 * the unlocker's last access to it; any other release leaves SYNC_WOKEN set,
 * so the next owner must first take `lock`, which the unlocker drops as its
 * own last access. */
MOTE_API int mote_mutex_unlock(mote_mutex *m)
{
    if (!m)
        return -EINVAL;
    sync_set_owner(m, NULL);
    for (;;) {
        int s = SYNC_LOCKED;
        if (__builtin_expect(sync_cas(&m->state, &s, 0, __ATOMIC_RELEASE), 1))
            return 0;
        if (!(s & SYNC_LOCKED))
            return -EPERM;

        spin_lock(&m->lock);
        s = __atomic_load_n(&m->state, __ATOMIC_RELAXED);
        if (!(s & SYNC_LOCKED)) {
            spin_unlock(&m->lock);
            return -EPERM;
        }
        chan_waiter *w = (chan_waiter *)m->waiters.head;
        int wake = 0;
        if (w && mote__os_coarse_ns() - w->since >= SYNC_STARVE_NS) {
            wake = SYNC_WAKE_HANDOFF; /* stays locked, now for w */
        } else if (w && !(s & SYNC_WOKEN)) {
            wake = SYNC_WAKE_RETRY;
        } else if (s & SYNC_WOKEN) {
            w = NULL; /* a woken waiter is on its way: release, keep WOKEN */
        } else {
            /* SYNC_WAITERS was stale: clear it, then release by the fast
             * path, as our last access. */
            while (!sync_cas(&m->state, &s, s & ~SYNC_WAITERS,
                             __ATOMIC_RELAXED))
                ;
            spin_unlock(&m->lock);
            continue;
        }
        /* Under `lock` and with SYNC_LOCKED ours, only a woken waiter
         * clearing SYNC_WOKEN can change the state meanwhile: retry. */
        for (;;) {
            int ns;
            if (wake == SYNC_WAKE_HANDOFF)
                ns = s;
            else if (w)
                ns = (s & ~SYNC_LOCKED) | SYNC_WOKEN;
            else
                ns = s & ~SYNC_LOCKED;
            if (w ? !w->next : !m->waiters.head)
                ns &= ~SYNC_WAITERS; /* the queue is (about to be) empty */
            if (sync_cas(&m->state, &s, ns, __ATOMIC_RELEASE))
                break;
        }
        if (!w) {
            spin_unlock(&m->lock);
            return 0;
        }
        chan_waitq_remove(&m->waiters, w);
        /* Mutex waiters have no timer and sit in one queue: the claim
         * cannot fail. */
        bool claimed = mote__sched_claim(w->t);
        (void)claimed;
        task *t = w->t;
        spin_unlock(&m->lock);
        mote__sched_ready(t, wake);
        return 0;
    }
}

/* ---- condition variables ------------------------------------------- */

static int sync_cond_wait(mote_cond *c, mote_mutex *m, int64_t deadline)
{
    task *self = sched_self();
    if (!self)
        return -EPERM;
    if (!(__atomic_load_n(&m->state, __ATOMIC_RELAXED) & SYNC_LOCKED))
        return -EPERM;
    chan_waiter w;
    sync_waiter_init(&w, self);
    spin_lock(&c->lock);
    mote__sched_prepare_wait("cond wait", c);
    chan_waitq_push(&c->waiters, &w);
    spin_unlock(&c->lock);
    mote_mutex_unlock(m);
    int r = mote__sched_park_until(deadline);
    if (r < 0) {
        /* -ETIMEDOUT (or -ENOMEM for the timer): we claimed ourselves; a
         * signaller may have popped the record and lost the claim (it then
         * moved on to the next waiter). */
        spin_lock(&c->lock);
        if (w.linked)
            chan_waitq_remove(&c->waiters, &w);
        spin_unlock(&c->lock);
    }
    mote_mutex_lock(m);
    return r < 0 ? r : 0;
}

MOTE_API void mote_cond_wait(mote_cond *c, mote_mutex *m)
{
    if (!c || !m) {
        fprintf(stderr, "mote: mote_cond_wait: NULL argument\n");
        abort();
    }
    if (!sched_self())
        mote__sched_die_not_task("mote_cond_wait");
    if (sync_cond_wait(c, m, -1) != 0) {
        fprintf(stderr, "mote: mote_cond_wait: the mutex is not locked\n");
        abort();
    }
}

MOTE_API int mote_cond_timedwait(mote_cond *c, mote_mutex *m, int64_t ns)
{
    if (!c || !m)
        return -EINVAL;
    if (!sched_self())
        return -EPERM;
    if (ns <= 0)
        return -ETIMEDOUT;
    int64_t now = mote_now();
    int64_t deadline = ns > INT64_MAX - now ? INT64_MAX : now + ns;
    return sync_cond_wait(c, m, deadline);
}

MOTE_API void mote_cond_signal(mote_cond *c)
{
    if (!c)
        return;
    spin_lock(&c->lock);
    chan_waiter *w = chan_waitq_claim(&c->waiters);
    spin_unlock(&c->lock);
    if (w)
        mote__sched_ready(w->t, 0);
}

MOTE_API void mote_cond_broadcast(mote_cond *c)
{
    if (!c)
        return;
    chan_waiter *list = NULL, *w;
    spin_lock(&c->lock);
    while ((w = chan_waitq_claim(&c->waiters)) != NULL) {
        w->next = list;
        list = w;
    }
    spin_unlock(&c->lock);
    while (list) {
        w = list;
        list = w->next;
        mote__sched_ready(w->t, 0);
    }
}
