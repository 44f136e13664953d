/*
 * waitq.c - the out-of-line parts of wait queues (see waitq.h): publishing,
 * claiming, waking lists of claimed waiters, and discarding the records of
 * tasks that a run's teardown destroys.
 */
#include "waitq.h"

#include "spin.h"
#include "task.h"

static void waitq_publish_common(mote_waitq *q, int *lock, waiter *w, void *obj)
{
    mote__assert(!w->linked && w->t == mote__self());
    w->q = q;
    w->lock = lock;
    w->obj = obj;
    w->linked = true;
    w->also = w->t->waits;
    w->t->waits = w;
}

void mote__waitq_publish(mote_waitq *q, int *lock, waiter *w, void *obj)
{
    waitq_publish_common(q, lock, w, obj);
    /* its link is written, on its parked stack */
    task *h = q->tail ? mote__freeze_touch(q->tail) : NULL;
    list_push_back(q, &w->link);
    mote__freeze_let_go(h);
}

void mote__waitq_publish_front(mote_waitq *q, int *lock, waiter *w, void *obj)
{
    waitq_publish_common(q, lock, w, obj);
    task *h = q->head ? mote__freeze_touch(q->head) : NULL;
    list_push_front(q, &w->link);
    mote__freeze_let_go(h);
}

waiter *mote__waitq_claim(mote_waitq *q)
{
    for (list_node *n = q->head; n; n = n->next) {
        /* Records live on parked stacks.  Its task runs next: claimed here,
         * or (a stale record) by whoever did. */
        task *h = mote__freeze_touch_waking(n);
        waiter *w = list_entry(n, waiter, link);
        bool claimed = mote__park_claim(w->t);
        /* (claimed, it is no longer a task its worker would freeze) */
        mote__freeze_let_go(h);
        if (claimed) {
            mote__waitq_unlink(w);
            return w;
        }
    }
    return NULL;
}

void mote__waitq_claim_all(mote_waitq *q, int result, waiter **list)
{
    waiter *w;
    while ((w = mote__waitq_claim(q)) != NULL) {
        w->result = result;
        w->wake_next = *list;
        *list = w;
    }
}

void mote__waitq_wake(waiter *list)
{
    while (list) {
        waiter *w = list;
        list = w->wake_next; /* read before the task may run and reuse w */
        mote__park_ready(w->t, mote__waiter_value(w));
    }
}

__attribute__((unused)) static bool waitq_none_linked(const task *t)
{
    for (const waiter *w = t->waits; w; w = w->also)
        if (w->linked)
            return false;
    return true;
}

void mote__waitq_end(task *self)
{
    mote__assert_expensive(waitq_none_linked(self));
    self->waits = NULL;
}

void mote__waitq_discard(task *t)
{
    waiter *w = t->waits;
    t->waits = NULL;
    while (w) {
        waiter *next = w->also; /* the hook may end w's life */
        if (w->discard) {
            w->discard(w);
        } else if (w->linked) { /* else the object may be gone: not ours */
            spin_lock(w->lock);
            mote__waitq_unlink(w);
            spin_unlock(w->lock);
        }
        w = next;
    }
}
