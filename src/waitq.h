/*
 * waitq.h - wait records and wait queues, shared by channels, select, wait
 * groups, mutexes and condition variables (the protocol is in park.h).
 *
 * A wait record (waiter) lives on the waiting task's stack: stacks never
 * move, so a pointer to it stays valid for as long as the task is parked.
 * Records sit in a mote_waitq (a list.h list, FIFO; a record leaves from
 * the middle after a timeout or after its select fired elsewhere).  A task
 * also keeps the records of its current wait on its own chain (t->waits,
 * linked through `also`), so mote_run's teardown can take the records of
 * discarded tasks out of objects that outlive the run.
 *
 * Invariants:
 *  - a record is linked into, unlinked from, and read or written by a waker
 *    only under the lock of the queue that holds it (w->lock);
 *  - a waker claims a record's task, and only then unlinks the record; a
 *    record whose task was claimed elsewhere (its timer, another case of its
 *    select) is stale: wakers skip it and leave it linked.  On success the
 *    waker writes the result into the record and readies the task (after
 *    unlocking), and touches the record no more;
 *  - so `linked` changes only with the owner's publish and unlink and with a
 *    successful claim: when no claim can happen (teardown) it can be read
 *    without the lock, and a linked record means its object is still alive;
 *  - the owning task takes every record it still has linked out of its
 *    queues before its blocking call returns, then forgets its chain
 *    (mote__waitq_end), so no waker ever sees a record of a wait that ended.
 */
#ifndef MOTE_WAITQ_H
#define MOTE_WAITQ_H

#include <stdbool.h>
#include <stdint.h>

#include "debug.h"
#include "freeze.h"
#include "list.h"
#include "mote.h"
#include "park.h"
#include "task.h"

typedef struct waiter waiter;
struct waiter {
    list_node link; /* in *q while linked */
    task *t;
    mote_waitq *q;     /* the queue it was published in */
    int *lock;         /* that queue's lock */
    void *obj;         /* the object waited on (for discard hooks) */
    waiter *also;      /* the task's other records of this wait */
    waiter *wake_next; /* claimed records between claim and wake */
    /* Called by mote_run's teardown for each record of a discarded task,
     * linked or not, with no lock held; NULL: just unlink it. */
    void (*discard)(waiter *w);
    void *elem;    /* channels: the value to send, or where to receive
                           (may be NULL) */
    int64_t since; /* mutex: when this waiter first queued */
    uint32_t idx;  /* select: the case this record stands for */
    int result;    /* written by the claimer before the ready */
    bool linked;   /* in q (under *lock) */
    bool is_select;
    bool sole;        /* the only record of its wait: a waker that claims
                           through it ends the owner's use of the queue */
    bool ref_dropped; /* channels: the claimer released the channel */
};

/* A record for the current task, not yet published. */
static inline void mote__waiter_init(waiter *w, task *self) { *w = (waiter){.t = self}; }

/* Publishes w at the back (or front) of q; lock held, by w's own task. */
void mote__waitq_publish(mote_waitq *q, int *lock, waiter *w, void *obj);
void mote__waitq_publish_front(mote_waitq *q, int *lock, waiter *w, void *obj);

/* Chains w into the current task's records without a queue: a wait that
 * only needs teardown's discard hook (mote_offload). */
static inline void mote__waitq_attach(waiter *w)
{
    w->also = w->t->waits;
    w->t->waits = w;
}

/* Whether MOTE_DEBUG=2 may walk a whole queue.  Its records live on parked
 * stacks, and a walk reads every one: with stacks frozen, each read thaws
 * its task by fault.  A walk after each of n hand-offs then thaws O(n^2)
 * tasks, and on a loaded machine the walk outlasts the freeze threshold, so
 * the tasks it thawed are frozen again before the next one: test_freeze's
 * 4,000 hand-offs took 1.5 s, or 110-185 s in 2 runs of 5 beside three
 * busy loops.  The walks wait for nothing to be frozen; the neighbours'
 * links are still checked on every unlink. */
static inline bool mote__waitq_walkable(void)
{
    return LOAD(&mote__freeze_nfrozen, RELAXED) == 0;
}

/* Takes w out of its queue; lock held. */
static inline void mote__waitq_unlink(waiter *w)
{
    mote__assert(w->linked);
    /* the neighbours' links are written, on their parked stacks */
    list_node *p = w->link.prev, *n = w->link.next;
    struct task *hp = p ? mote__freeze_touch(p) : NULL;
    struct task *hn = n ? mote__freeze_touch(n) : NULL;
    mote__assert(p ? p->next == &w->link : w->q->head == &w->link);
    mote__assert(n ? n->prev == &w->link : w->q->tail == &w->link);
    mote__assert_expensive(!mote__waitq_walkable() || list_contains(w->q, &w->link));
    list_remove(w->q, &w->link);
    mote__freeze_let_go(hp);
    mote__freeze_let_go(hn);
    w->linked = false;
    mote__assert_expensive(!mote__waitq_walkable() || list_valid(w->q));
}

/* The first record of q, or NULL; *held: what to let go of
 * (mote__freeze_let_go) after the last access to it.  Lock held. */
static inline waiter *mote__waitq_first(mote_waitq *q, struct task **held)
{
    *held = NULL;
    if (!q->head)
        return NULL;
    *held = mote__freeze_touch(q->head); /* records live on parked stacks */
    return list_entry(q->head, waiter, link);
}

/* The first record of q whose task this caller claims, unlinked; stale
 * records are skipped.  NULL when none.  Lock held. */
waiter *mote__waitq_claim(mote_waitq *q);

/* Claims every waiter of q, sets its result and prepends it to *list (for
 * mote__waitq_wake after unlocking).  Lock held. */
void mote__waitq_claim_all(mote_waitq *q, int result, waiter **list);

/* What a claimed waiter's park returns: a select learns its case index (and
 * reads the result from that case's record), anything else the result. */
static inline int mote__waiter_value(const waiter *w)
{
    return w->is_select ? (int)w->idx : w->result;
}

/* Readies every task on a list built by claim_all; no lock held. */
void mote__waitq_wake(waiter *list);

/* The current task's wait is over and its records are out of every queue. */
void mote__waitq_end(task *self);

/* Teardown: takes every record of t (a task being discarded) out of its
 * queue, through its discard hook.  No task runs and no claim succeeds. */
void mote__waitq_discard(task *t);

#endif /* MOTE_WAITQ_H */
