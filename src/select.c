/*
 * select.c - mote_select: wait on several channel operations, complete
 * exactly one.
 *
 * Algorithm (the shape of Go's selectgo):
 *  1. validate every case; cases with a NULL channel take no part;
 *  2. shuffle the live cases into a random poll order, and sort them by
 *     channel address into the lock order;
 *  3. fast pass: in poll order, lock one channel at a time and complete
 *     the first case that can proceed (most selects end here);
 *     otherwise lock every distinct channel in lock order (a fixed global
 *     order, so two selects never deadlock on each other's channels);
 *  4. walk the poll order and complete the first case that can proceed.
 *     The first ready case of a uniformly random permutation is a uniformly
 *     random ready case: that is the fairness guarantee;
 *  5. if none can and the timeout is 0, unlock and return -EAGAIN;
 *  6. otherwise publish one wait record per live case (on the stack, or on
 *     the heap for many cases) in each channel's send or receive queue,
 *     unlock, and park (with a timer when timeout > 0);
 *  7. whoever claims the task (a peer on one channel, or the timer) decides
 *     the outcome; afterwards relock every channel and take the remaining
 *     records out of their queues, tolerating records that a peer already
 *     popped when it lost the claim.
 *
 * Locking: channel locks only, always in address order, never held across
 * a park.  The peer that completes a case does the data copy itself (into or
 * out of the case's elem) before readying the task, exactly as for a plain
 * send or receive; it passes the case index through mote__park_ready.
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "chan.h"
#include "spin.h"
#include "task.h"

#define SELECT_MAX_CASES 65536
#define SELECT_INLINE    8

/* Per-thread PRNG (splitmix64): fast, and state per thread needs no
 * synchronisation.  Quality is ample for picking a case. */
static __thread uint64_t select_rng_state;

static uint64_t select_rand(void)
{
    uint64_t z = select_rng_state;
    if (__builtin_expect(z == 0, 0)) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        z = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 32) ^
            (uint64_t)(uintptr_t)&select_rng_state;
    }
    z += 0x9e3779b97f4a7c15ull;
    select_rng_state = z;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [0, n): the multiply-high method, bias below n / 2^64. */
static inline uint32_t select_below(uint32_t n)
{
    return (uint32_t)(((unsigned __int128)select_rand() * n) >> 64);
}

static inline uintptr_t select_key(const mote_case *cases, uint32_t i)
{
    return (uintptr_t)cases[i].chan;
}

static void select_sift(const mote_case *cases, uint32_t *idx, uint32_t root,
                        uint32_t end)
{
    for (;;) {
        uint32_t child = 2 * root + 1;
        if (child >= end)
            return;
        if (child + 1 < end &&
            select_key(cases, idx[child]) < select_key(cases, idx[child + 1]))
            child++;
        if (select_key(cases, idx[root]) >= select_key(cases, idx[child]))
            return;
        uint32_t t = idx[root];
        idx[root] = idx[child];
        idx[child] = t;
        root = child;
    }
}

/* Sorts idx[0..n) by channel address: insertion sort for the usual handful
 * of cases (stable), heapsort beyond (no allocation, O(n log n); cases on
 * one channel come out in an order that depends on how they went in). */
static void select_sort(const mote_case *cases, uint32_t *idx, uint32_t n)
{
    if (n <= 16) {
        for (uint32_t i = 1; i < n; i++) {
            uint32_t v = idx[i];
            uintptr_t k = select_key(cases, v);
            uint32_t j = i;
            while (j > 0 && select_key(cases, idx[j - 1]) > k) {
                idx[j] = idx[j - 1];
                j--;
            }
            idx[j] = v;
        }
        return;
    }
    for (uint32_t i = n / 2; i-- > 0;)
        select_sift(cases, idx, i, n);
    for (uint32_t end = n - 1; end > 0; end--) {
        uint32_t t = idx[0];
        idx[0] = idx[end];
        idx[end] = t;
        select_sift(cases, idx, 0, end);
    }
}

static void select_lock(const mote_case *cases, const uint32_t *lockorder, uint32_t n)
{
    mote_chan *prev = NULL;
    for (uint32_t k = 0; k < n; k++) {
        mote_chan *c = cases[lockorder[k]].chan;
        if (c != prev)
            spin_lock(&c->lock);
        prev = c;
    }
}

static void select_unlock(const mote_case *cases, const uint32_t *lockorder, uint32_t n)
{
    mote_chan *prev = NULL;
    for (uint32_t k = n; k-- > 0;) {
        mote_chan *c = cases[lockorder[k]].chan;
        if (c != prev)
            spin_unlock(&c->lock);
        prev = c;
    }
}

/* Tries to complete case i with every channel locked.  Returns true when it
 * did; *peer is then a claimed task to ready after unlocking (or NULL) and
 * *peer_val the value to ready it with. */
static bool select_try(mote_case *cs, task **peer, int *peer_val)
{
    mote_chan *c = cs->chan;
    waiter *w;
    *peer = NULL;
    if (cs->op == MOTE_RECV) {
        if ((w = chan_claim(c, &c->sendq)) != NULL) {
            chan_recv_from_sender(c, w, cs->elem);
            *peer = w->t;
            *peer_val = mote__waiter_value(w);
            cs->result = 0;
            return true;
        }
        if (c->count > 0) {
            chan_buf_take(c, cs->elem);
            cs->result = 0;
            return true;
        }
        if (c->closed) {
            if (cs->elem)
                memset(cs->elem, 0, c->elem_size);
            cs->result = MOTE_ECLOSED;
            return true;
        }
        return false;
    }
    if (c->closed) {
        cs->result = MOTE_ECLOSED;
        return true;
    }
    if ((w = chan_claim(c, &c->recvq)) != NULL) {
        chan_send_to_receiver(c, w, cs->elem);
        *peer = w->t;
        *peer_val = mote__waiter_value(w);
        cs->result = 0;
        return true;
    }
    if (c->count < c->cap) {
        chan_buf_put(c, cs->elem);
        cs->result = 0;
        return true;
    }
    return false;
}

/* A select that can never fire: no live case and no timeout.  Nothing
 * claims the task; deadlock detection reports it, teardown discards it. */
static _Noreturn void select_block_forever(void)
{
    for (;;) {
        mote__park_prepare("select (no cases)", NULL);
        mote__park();
    }
}

int mote_select(mote_case *cases, size_t n, int64_t timeout_ns)
{
    if (n > 0 && cases == NULL)
        return -EINVAL;
    if (n > SELECT_MAX_CASES)
        return -EINVAL;
    uint32_t live = 0;
    for (size_t i = 0; i < n; i++) {
        mote_chan *c = cases[i].chan;
        if (cases[i].op != MOTE_SEND && cases[i].op != MOTE_RECV)
            return -EINVAL;
        if (c == NULL)
            continue;
        if (!chan_valid(c))
            return -EINVAL;
        if (cases[i].op == MOTE_SEND && cases[i].elem == NULL && c->elem_size != 0)
            return -EINVAL;
        live++;
    }
    if (timeout_ns == 0 && live == 1) {
        /* One case, no wait: Go's non-blocking send and receive, answered
         * without the lock when they would block or the channel is closed
         * (chan.h).  (A poll of a closed channel was 8x Go's time.) */
        size_t i = 0;
        while (cases[i].chan == NULL)
            i++;
        int r = chan_poll_unlocked(cases[i].chan, cases[i].op,
                                   cases[i].op == MOTE_RECV ? cases[i].elem : NULL);
        if (r == -EAGAIN)
            return r;
        if (r == MOTE_ECLOSED) {
            cases[i].result = r;
            return (int)i;
        }
    }
    task *self = mote__self();
    if (timeout_ns != 0 && self == NULL)
        return -EPERM;
    int64_t deadline = mote__park_deadline(timeout_ns);

    if (live == 0) {
        if (timeout_ns == 0)
            return -EAGAIN;
        if (timeout_ns < 0)
            select_block_forever();
        for (;;) { /* only the timer can claim us */
            mote__park_prepare("select", cases);
            int r = mote__park_until(deadline);
            if (r == -ETIMEDOUT || r == -ENOMEM)
                return r;
        }
    }

    uint32_t inline_idx[2 * SELECT_INLINE];
    waiter inline_rec[SELECT_INLINE];
    uint32_t *pollorder = inline_idx, *lockorder = inline_idx + SELECT_INLINE;
    waiter *rec = inline_rec;
    void *heap = NULL;
    if (live > SELECT_INLINE) {
        /* records first: they need pointer alignment */
        heap = mote_malloc(live * (sizeof(waiter) + 2 * sizeof(uint32_t)));
        if (!heap)
            return -ENOMEM;
        rec = heap;
        pollorder = (uint32_t *)(rec + live);
        lockorder = pollorder + live;
    }

    /* Random poll order: an inside-out Fisher-Yates over the live cases. */
    uint32_t m = 0;
    for (uint32_t i = 0; i < (uint32_t)n; i++) {
        if (cases[i].chan == NULL)
            continue;
        uint32_t j = select_below(m + 1);
        pollorder[m] = pollorder[j];
        pollorder[j] = i;
        m++;
    }
    /* The lock order starts from the poll order, so cases on one channel
     * keep a random order through the (stable) sort: their records are
     * queued in it, and a peer that comes later completes a random one of
     * them, not always the lowest index (as Go does). */
    memcpy(lockorder, pollorder, live * sizeof *lockorder);
    /* Fast pass: a select usually finds a case ready.  Trying the cases in
     * poll order one channel at a time takes one lock instead of all of
     * them, and the first case that can proceed is still a uniformly random
     * ready one.  A lock-free peek skips channels not worth locking; when
     * none can proceed, the full protocol below locks them all. */
    for (uint32_t k = 0; k < live; k++) {
        uint32_t i = pollorder[k];
        mote_chan *c = cases[i].chan;
        task *peer;
        int peer_val = 0;
        if (!chan_maybe_ready(c, cases[i].op))
            continue;
        spin_lock(&c->lock);
        bool done = select_try(&cases[i], &peer, &peer_val);
        spin_unlock(&c->lock);
        if (done) {
            if (peer)
                mote__park_ready(peer, peer_val);
            if (heap)
                mote_free(heap);
            return (int)i;
        }
    }

    select_sort(cases, lockorder, live);
    select_lock(cases, lockorder, live);
    for (uint32_t k = 0; k < live; k++) {
        uint32_t i = pollorder[k];
        task *peer;
        int peer_val = 0;
        if (select_try(&cases[i], &peer, &peer_val)) {
            select_unlock(cases, lockorder, live);
            if (peer)
                mote__park_ready(peer, peer_val);
            if (heap)
                mote_free(heap);
            return (int)i;
        }
    }
    if (timeout_ns == 0) {
        select_unlock(cases, lockorder, live);
        if (heap)
            mote_free(heap);
        return -EAGAIN;
    }

    /* Nothing ready: wait on every live case at once. */
    mote__park_prepare("select", cases);
    for (uint32_t k = 0; k < live; k++) {
        uint32_t i = lockorder[k];
        waiter *w = &rec[k];
        mote__waiter_init(w, self);
        w->elem = cases[i].elem;
        w->idx = i;
        w->is_select = true;
        w->sole = live == 1;
        mote_chan *c = cases[i].chan;
        mote__chan_publish(c, cases[i].op == MOTE_SEND ? &c->sendq : &c->recvq, w);
    }
    /* With one record, a peer's claim drops our hold on its channel before
     * we wake, and the channel may be freed by then (closed and freed, its
     * block reused): what we need of it is read now. */
    size_t sole_esize = live == 1 ? cases[lockorder[0]].chan->elem_size : 0;
    select_unlock(cases, lockorder, live);

    int r = mote__park_until(deadline);

    /* Claimed (by a peer or the timer): no one else will complete a case of
     * ours, but our other records may still be queued, and each still holds
     * its channel (chan.h).  With one record and a peer's claim, the peer
     * already unlinked it and released the channel (before our wake-up), so
     * there is nothing to clean. */
    int result = 0;
    size_t esize = 0;
    if (r >= 0) {
        for (uint32_t k = 0; k < live; k++)
            if (rec[k].idx == (uint32_t)r)
                result = rec[k].result;
        esize = live == 1 ? sole_esize : cases[r].chan->elem_size;
    }
    if (live > 1 || r < 0) {
        select_lock(cases, lockorder, live);
        for (uint32_t k = 0; k < live; k++) {
            /* A record that drops the last hold on a freed channel marks
             * itself (wake_next is unused now) to destroy it after unlock. */
            rec[k].wake_next =
                chan_forget(cases[rec[k].idx].chan, &rec[k]) ? &rec[k] : NULL;
        }
        select_unlock(cases, lockorder, live);
        for (uint32_t k = 0; k < live; k++)
            if (rec[k].wake_next)
                mote__chan_destroy(cases[rec[k].idx].chan);
    }
    mote__waitq_end(self);
    if (heap)
        mote_free(heap);
    if (r < 0)
        return r; /* -ETIMEDOUT, or -ENOMEM for the timer */
    cases[r].result = result;
    if (result == MOTE_ECLOSED && cases[r].op == MOTE_RECV && cases[r].elem)
        memset(cases[r].elem, 0, esize);
    return r;
}
