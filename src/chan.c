/*
 * chan.c - channels: make, send, receive, try ops, close, len/cap, free
 * (the layout and its invariants are in chan.h).
 *
 * Values are copied: a blocked sender's value is read from its (parked,
 * immovable) stack by the receiver that claims it, before the sender is
 * readied, so nothing points into the sender's memory once send returns.
 * Wake-ups follow park.h: claim under the lock, write the result into the
 * waiter's record, drop the lock, then ready.
 *
 * Lifetime: a channel outlives runs.  Tasks still blocked on it when
 * mote_run returns are discarded and their records taken out of its queues
 * (chan_discard), so it can be used in the next run with what it buffers.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "chan.h"
#include "spin.h"
#include "task.h"

mote_chan *mote_chan_make(size_t elem_size, size_t capacity)
{
    size_t hdr = (sizeof(mote_chan) + 15) & ~(size_t)15;
    size_t ring;
    if (elem_size > CHAN_MAX_ELEM || __builtin_mul_overflow(elem_size, capacity, &ring) ||
        ring > SIZE_MAX / 2 - hdr) {
        errno = EINVAL;
        return NULL;
    }
    mote_chan *c = mote_malloc(hdr + ring);
    if (!c) {
        errno = ENOMEM;
        return NULL;
    }
    memset(c, 0, sizeof *c);
    c->magic = CHAN_MAGIC;
    c->elem_size = elem_size;
    c->cap = capacity;
    /* Never NULL, so slot arithmetic is defined even with elem_size 0. */
    c->buf = (unsigned char *)c + hdr;
    return c;
}

/* Teardown's hook for a record of a discarded task (waitq.h). */
static void chan_discard(waiter *w)
{
    mote_chan *c = w->obj;
    if (!w->linked && w->ref_dropped)
        return; /* claimed through this record: c is no longer ours */
    spin_lock(&c->lock);
    bool dead = chan_forget(c, w);
    spin_unlock(&c->lock);
    if (dead)
        mote__chan_destroy(c);
}

void mote__chan_publish(mote_chan *c, mote_waitq *q, waiter *w)
{
    w->discard = chan_discard;
    c->refs++;
    mote__waitq_publish(q, &c->lock, w, c);
}

void mote__chan_destroy(mote_chan *c)
{
    mote__assert(c->refs == 0 && list_empty(&c->recvq) && list_empty(&c->sendq));
    STORE(&c->magic, 0, RELAXED);
    mote_free(c);
}

/* With c locked: completes a send that can proceed now and unlocks c,
 * returning 0 or MOTE_ECLOSED; or returns -EAGAIN with c still locked. */
static inline __attribute__((always_inline)) int chan_send_locked(mote_chan *c,
                                                                  const void *elem)
{
    if (c->closed) {
        spin_unlock(&c->lock);
        return MOTE_ECLOSED;
    }
    waiter *r = chan_claim(c, &c->recvq);
    if (r) {
        chan_send_to_receiver(c, r, elem);
        int v = mote__waiter_value(r);
        task *t = r->t;
        spin_unlock(&c->lock);
        mote__park_ready(t, v);
        return 0;
    }
    if (c->count < c->cap) {
        chan_buf_put(c, elem);
        spin_unlock(&c->lock);
        return 0;
    }
    return -EAGAIN;
}

/* With c locked: completes a receive that can proceed now and unlocks c,
 * returning 0 or MOTE_ECLOSED (elem zeroed); or returns -EAGAIN with c
 * still locked. */
static inline __attribute__((always_inline)) int chan_recv_locked(mote_chan *c,
                                                                  void *elem)
{
    waiter *s = chan_claim(c, &c->sendq);
    if (s) {
        chan_recv_from_sender(c, s, elem);
        int v = mote__waiter_value(s);
        task *t = s->t;
        spin_unlock(&c->lock);
        mote__park_ready(t, v);
        return 0;
    }
    if (c->count > 0) {
        chan_buf_take(c, elem);
        spin_unlock(&c->lock);
        return 0;
    }
    if (c->closed) {
        spin_unlock(&c->lock);
        if (elem)
            memset(elem, 0, c->elem_size);
        return MOTE_ECLOSED;
    }
    return -EAGAIN;
}

int mote_chan_send(mote_chan *c, const void *elem)
{
    if (!chan_valid(c) || (elem == NULL && c->elem_size != 0))
        return -EINVAL;
    task *self = mote__self();
    if (!self) /* a plain thread cannot wait: refused even when it would not */
        return -EPERM;
    spin_lock(&c->lock);
    int r = chan_send_locked(c, elem);
    if (r != -EAGAIN)
        return r;
    waiter w;
    mote__waiter_init(&w, self);
    w.elem = (void *)elem; /* only read, by the receiver that claims us */
    w.sole = true;
    mote__park_prepare("chan send", c);
    mote__chan_publish(c, &c->sendq, &w);
    spin_unlock(&c->lock);
    r = mote__park(); /* 0, or MOTE_ECLOSED when closed while waiting */
    mote__waitq_end(self);
    return r;
}

int mote_chan_recv(mote_chan *c, void *elem)
{
    if (!chan_valid(c))
        return -EINVAL;
    task *self = mote__self();
    if (!self)
        return -EPERM;
    spin_lock(&c->lock);
    int r = chan_recv_locked(c, elem);
    if (r != -EAGAIN)
        return r;
    waiter w;
    mote__waiter_init(&w, self);
    w.elem = elem;
    w.sole = true;
    mote__park_prepare("chan receive", c);
    mote__chan_publish(c, &c->recvq, &w);
    size_t esize = c->elem_size;
    spin_unlock(&c->lock);
    r = mote__park();
    mote__waitq_end(self);
    if (r == MOTE_ECLOSED && elem)
        memset(elem, 0, esize);
    return r;
}

/* The non-blocking calls answer "would block" and "closed and drained"
 * without the lock, as Go's do: a loop polling a channel (ready or closed)
 * otherwise took its lock each time, and two workers polling one fought
 * over its line (3.6x Go's time on a closed channel). */
int mote_chan_trysend(mote_chan *c, const void *elem)
{
    if (!chan_valid(c) || (elem == NULL && c->elem_size != 0))
        return -EINVAL;
    int r = chan_poll_unlocked(c, MOTE_SEND, NULL);
    if (r != CHAN_LOCKED)
        return r;
    spin_lock(&c->lock);
    r = chan_send_locked(c, elem);
    if (r == -EAGAIN)
        spin_unlock(&c->lock);
    return r;
}

int mote_chan_tryrecv(mote_chan *c, void *elem)
{
    if (!chan_valid(c))
        return -EINVAL;
    int r = chan_poll_unlocked(c, MOTE_RECV, elem);
    if (r != CHAN_LOCKED)
        return r;
    spin_lock(&c->lock);
    r = chan_recv_locked(c, elem);
    if (r == -EAGAIN)
        spin_unlock(&c->lock);
    return r;
}

/* Claims every live waiter of q for close. */
static void chan_claim_all(mote_chan *c, mote_waitq *q, waiter **list)
{
    waiter *w;
    while ((w = chan_claim(c, q)) != NULL) {
        w->result = MOTE_ECLOSED; /* a receiver zeroes its own element */
        w->wake_next = *list;
        *list = w;
    }
}

int mote_chan_close(mote_chan *c)
{
    if (!chan_valid(c))
        return -EINVAL;
    spin_lock(&c->lock);
    if (c->closed) {
        spin_unlock(&c->lock);
        return MOTE_ECLOSED;
    }
    /* release: a poll that sees it without the lock (chan_poll_unlocked)
     * also sees what the closer wrote before the close, as Go promises */
    STORE(&c->closed, 1, RELEASE);
    waiter *list = NULL;
    chan_claim_all(c, &c->recvq, &list);
    chan_claim_all(c, &c->sendq, &list);
    spin_unlock(&c->lock);
    mote__waitq_wake(list);
    return 0;
}

size_t mote_chan_len(const mote_chan *c)
{
    if (!chan_valid(c))
        return 0;
    return LOAD(&c->count, RELAXED);
}

size_t mote_chan_cap(const mote_chan *c) { return chan_valid(c) ? c->cap : 0; }

/* A waiter that can still be claimed: a task blocked on c right now. */
static bool chan_has_live(const mote_waitq *q)
{
    for (const list_node *n = q->head; n; n = n->next) {
        task *h = mote__freeze_touch(n); /* records live on parked stacks */
        const waiter *w = list_entry(n, waiter, link);
        bool live = LOAD(&w->t->wait_state, ACQUIRE) == TASK_WAITING;
        mote__freeze_let_go(h);
        if (live)
            return true;
    }
    return false;
}

int mote_chan_free(mote_chan *c)
{
    if (!c)
        return 0;
    if (!chan_valid(c))
        return -EINVAL;
    spin_lock(&c->lock);
    if (chan_has_live(&c->recvq) || chan_has_live(&c->sendq)) {
        spin_unlock(&c->lock);
        return -EBUSY;
    }
    if (c->refs > 0) {
        /* Stale records of selects that completed elsewhere: their owners
         * still lock c to take them out; the last one frees it. */
        STORE(&c->magic, CHAN_DYING, RELAXED);
        spin_unlock(&c->lock);
        return 0;
    }
    spin_unlock(&c->lock);
    mote__chan_destroy(c);
    return 0;
}
