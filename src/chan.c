/*
 * chan.c - channels: make, send, receive, try ops, close, len/cap, free.
 *
 * A channel is one allocation: the header (struct mote_chan, chan.h) and,
 * behind it, a ring of cap slots of elem_size bytes.  One spinlock
 * (c->lock) guards everything; it is held only for queue surgery and an
 * element copy, never across a park.
 *
 * Invariants, under c->lock:
 *  - a live (claimable) waiter sits in recvq only while the buffer is empty,
 *    and in sendq only while it is full (for cap 0: always "full" and
 *    "empty"); so a sender first looks for a receiver, a receiver first for
 *    a sender.  Stale records of selects that fired elsewhere may sit in
 *    either queue; chan_waitq_claim() drops them.
 *  - once closed, sendq is empty and stays empty: close wakes every waiter
 *    and later senders fail at once.
 *  - values are copied: a blocked sender's value is read from its (parked,
 *    immovable) stack by the receiver that claims it, before the sender is
 *    readied, so nothing points into the sender's memory once send returns.
 *
 * Wake-ups follow sched.h: claim under the lock, write the result into the
 * waiter's record, drop the lock, then mote__sched_ready() (the claimed task
 * cannot run before that, so its record stays valid until then).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chan.h"
#include "spin.h"

/* What a claimed waiter gets back from mote__sched_park: a select learns which of
 * its cases fired (and reads result from that case's record). */
static inline int chan_wake_value(const chan_waiter *w)
{
    return w->is_select ? (int)w->idx : w->result;
}

MOTE_API mote_chan *mote_chan_make(size_t elem_size, size_t capacity)
{
    size_t hdr = (sizeof(mote_chan) + 15) & ~(size_t)15;
    size_t bytes;
    if (capacity != 0 && elem_size > (SIZE_MAX - hdr) / capacity) {
        errno = EINVAL;
        return NULL;
    }
    bytes = hdr + elem_size * capacity;
    mote_chan *c = mote_malloc(bytes);
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

/* With c locked: completes a send that can proceed now and unlocks c,
 * returning 0 or MOTE_ECLOSED; or returns -EAGAIN with c still locked. */
static inline __attribute__((always_inline)) int
chan_send_locked(mote_chan *c, const void *elem)
{
    if (c->closed) {
        spin_unlock(&c->lock);
        return MOTE_ECLOSED;
    }
    chan_waiter *r = chan_waitq_claim(&c->recvq);
    if (r) {
        chan_send_to_receiver(c, r, elem);
        int v = chan_wake_value(r);
        task *t = r->t;
        spin_unlock(&c->lock);
        mote__sched_ready(t, v);
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
static inline __attribute__((always_inline)) int
chan_recv_locked(mote_chan *c, void *elem)
{
    chan_waiter *s = chan_waitq_claim(&c->sendq);
    if (s) {
        chan_recv_from_sender(c, s, elem);
        int v = chan_wake_value(s);
        task *t = s->t;
        spin_unlock(&c->lock);
        mote__sched_ready(t, v);
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

MOTE_API int mote_chan_send(mote_chan *c, const void *elem)
{
    if (!chan_valid(c) || (elem == NULL && c->elem_size != 0))
        return -EINVAL;
    task *self = sched_self();
    if (!self)
        return -EPERM;

    spin_lock(&c->lock);
    int r = chan_send_locked(c, elem);
    if (r != -EAGAIN)
        return r;
    chan_waiter w;
    w.t = self;
    w.elem = (void *)elem; /* only read, by the receiver that claims us */
    w.idx = 0;
    w.is_select = false;
    w.result = 0;
    mote__sched_prepare_wait("chan send", c);
    chan_waitq_push(&c->sendq, &w);
    spin_unlock(&c->lock);
    return mote__sched_park(); /* 0, or MOTE_ECLOSED when closed while waiting */
}

MOTE_API int mote_chan_recv(mote_chan *c, void *elem)
{
    if (!chan_valid(c))
        return -EINVAL;
    task *self = sched_self();
    if (!self)
        return -EPERM;

    spin_lock(&c->lock);
    int r = chan_recv_locked(c, elem);
    if (r != -EAGAIN)
        return r;
    chan_waiter w;
    w.t = self;
    w.elem = elem;
    w.idx = 0;
    w.is_select = false;
    w.result = 0;
    mote__sched_prepare_wait("chan receive", c);
    chan_waitq_push(&c->recvq, &w);
    size_t esize = c->elem_size;
    spin_unlock(&c->lock);
    r = mote__sched_park();
    if (r == MOTE_ECLOSED && elem)
        memset(elem, 0, esize);
    return r;
}

MOTE_API int mote_chan_trysend(mote_chan *c, const void *elem)
{
    if (!chan_valid(c) || (elem == NULL && c->elem_size != 0))
        return -EINVAL;
    spin_lock(&c->lock);
    int r = chan_send_locked(c, elem);
    if (r == -EAGAIN)
        spin_unlock(&c->lock);
    return r;
}

MOTE_API int mote_chan_tryrecv(mote_chan *c, void *elem)
{
    if (!chan_valid(c))
        return -EINVAL;
    spin_lock(&c->lock);
    int r = chan_recv_locked(c, elem);
    if (r == -EAGAIN)
        spin_unlock(&c->lock);
    return r;
}

MOTE_API int mote_chan_close(mote_chan *c)
{
    if (!chan_valid(c))
        return -EINVAL;
    spin_lock(&c->lock);
    if (c->closed) {
        spin_unlock(&c->lock);
        return MOTE_ECLOSED;
    }
    __atomic_store_n(&c->closed, 1, __ATOMIC_RELAXED);
    /* Claim every waiter now, ready them after unlocking: the list is
     * threaded through the claimed records, which stay valid until their
     * task is readied. */
    chan_waiter *list = NULL, *w;
    while ((w = chan_waitq_claim(&c->recvq)) != NULL) {
        w->result = MOTE_ECLOSED; /* the receiver zeroes its own element */
        w->next = list;
        list = w;
    }
    while ((w = chan_waitq_claim(&c->sendq)) != NULL) {
        w->result = MOTE_ECLOSED;
        w->next = list;
        list = w;
    }
    spin_unlock(&c->lock);
    while (list) {
        w = list;
        list = w->next; /* read before the task may run and reuse w */
        mote__sched_ready(w->t, chan_wake_value(w));
    }
    return 0;
}

MOTE_API size_t mote_chan_len(const mote_chan *c)
{
    if (!chan_valid(c))
        return 0;
    mote_chan *m = (mote_chan *)c;
    spin_lock(&m->lock);
    size_t n = m->count;
    spin_unlock(&m->lock);
    return n;
}

MOTE_API size_t mote_chan_cap(const mote_chan *c)
{
    return chan_valid(c) ? c->cap : 0;
}

MOTE_API void mote_chan_free(mote_chan *c)
{
    if (!c)
        return;
    if (c->magic != CHAN_MAGIC) {
        fprintf(stderr, "mote: mote_chan_free(%p): not a live channel "
                        "(freed twice?)\n", (void *)c);
        abort();
    }
    spin_lock(&c->lock);
    bool busy = !chan_waitq_empty(&c->recvq) || !chan_waitq_empty(&c->sendq);
    spin_unlock(&c->lock);
    if (busy) {
        /* Stale select records also count: their select has not returned
         * yet and will walk this queue again. */
        fprintf(stderr, "mote: mote_chan_free(%p): tasks are still blocked "
                        "on this channel\n", (void *)c);
        abort();
    }
    c->magic = 0;
    mote_free(c);
}
