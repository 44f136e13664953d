/*
 * chan.h - wait records and wait queues shared by channels (chan.c), select
 * (select.c) and the task-aware sync objects (sync.c).
 *
 * A wait record (chan_waiter) lives on the waiting task's stack: stacks never
 * move, so a pointer to it stays valid for as long as the task is parked.
 * Records sit in a mote_waitq (a FIFO, doubly linked so a record can leave
 * from the middle after a timeout or after its select fired elsewhere).
 *
 * Invariants (see sched.h for the claim protocol):
 *  - a record is linked in, unlinked from and read or written by a waker only
 *    under the lock of the queue that holds it;
 *  - a waker pops a record, then mote__sched_claim()s its task; on failure the task
 *    was claimed elsewhere (its timer, another channel of its select) and the
 *    record is simply dropped; on success the waker writes the result into
 *    the record and readies the task, and touches the record no more after
 *    mote__sched_ready();
 *  - the owning task takes every record it still has linked out of its
 *    queues (under their locks) before it returns, so no waker ever sees a
 *    record of a wait that has ended.
 */
#ifndef MOTE_CHAN_H
#define MOTE_CHAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "mote.h"
#include "sched.h"

#define MOTE_API __attribute__((visibility("default")))

typedef struct chan_waiter {
    struct chan_waiter *next, *prev;
    task *t;
    void *elem;        /* channels: the waiter's value (send) or destination
                          (receive; may be NULL) */
    uint32_t idx;      /* select: the case this record stands for */
    bool linked;       /* in a queue (under that queue's lock) */
    bool is_select;
    int result;        /* written by the claimer before mote__sched_ready */
    int64_t since;     /* mutex: when this waiter first queued */
} chan_waiter;

static inline bool chan_waitq_empty(const mote_waitq *q)
{
    return q->head == NULL;
}

static inline void chan_waitq_push(mote_waitq *q, chan_waiter *w)
{
    chan_waiter *tail = (chan_waiter *)q->tail;
    w->next = NULL;
    w->prev = tail;
    if (tail)
        tail->next = w;
    else
        __atomic_store_n(&q->head, w, __ATOMIC_RELAXED); /* select peeks */
    q->tail = w;
    w->linked = true;
}

/* Puts w first: a woken mutex waiter that lost the race keeps its seniority. */
static inline void chan_waitq_push_front(mote_waitq *q, chan_waiter *w)
{
    chan_waiter *head = (chan_waiter *)q->head;
    w->prev = NULL;
    w->next = head;
    if (head)
        head->prev = w;
    else
        q->tail = w;
    __atomic_store_n(&q->head, w, __ATOMIC_RELAXED);
    w->linked = true;
}

static inline void chan_waitq_remove(mote_waitq *q, chan_waiter *w)
{
    if (w->prev)
        w->prev->next = w->next;
    else
        __atomic_store_n(&q->head, w->next, __ATOMIC_RELAXED);
    if (w->next)
        w->next->prev = w->prev;
    else
        q->tail = w->prev;
    w->next = w->prev = NULL;
    w->linked = false;
}

/* Pops waiters until one whose task this caller claims; NULL when none. */
static inline chan_waiter *chan_waitq_claim(mote_waitq *q)
{
    chan_waiter *w;
    while ((w = (chan_waiter *)q->head) != NULL) {
        chan_waitq_remove(q, w);
        if (mote__sched_claim(w->t))
            return w;
    }
    return NULL;
}

/* Copies one element.  Small power-of-two sizes are the common case and
 * compile to a single move instead of a call into libc. */
static inline void chan_copy(void *dst, const void *src, size_t n)
{
    switch (n) {
    case 0: return;
    case 1: memcpy(dst, src, 1); return;
    case 2: memcpy(dst, src, 2); return;
    case 4: memcpy(dst, src, 4); return;
    case 8: memcpy(dst, src, 8); return;
    case 16: memcpy(dst, src, 16); return;
    default: memcpy(dst, src, n); return;
    }
}

/* Channel internals used by select.c (chan.c owns the struct). */
struct mote_chan {
    int lock;            /* spin.h lock: every field below */
    uint32_t magic;      /* CHAN_MAGIC while valid, to reject stray pointers */
    uint32_t closed;     /* written under lock (atomically: select peeks) */
    size_t elem_size;
    size_t cap;          /* 0: unbuffered */
    size_t count;        /* elements in buf (written atomically: select peeks) */
    size_t recvx;        /* next slot to receive from */
    size_t sendx;        /* next slot to send into */
    mote_waitq recvq;    /* blocked receivers */
    mote_waitq sendq;    /* blocked senders */
    unsigned char *buf;  /* cap * elem_size bytes (NULL when either is 0) */
};

#define CHAN_MAGIC 0x6d636861u /* "mcha" */

static inline bool chan_valid(const mote_chan *c)
{
    return c != NULL && c->magic == CHAN_MAGIC;
}

/* Without the lock: whether op could proceed now.  A hint only (it may be
 * stale by the time the caller locks), used to skip channels not worth
 * locking.  Every field it reads is written with atomic stores. */
static inline bool chan_maybe_ready(mote_chan *c, int op)
{
    if (__atomic_load_n(&c->closed, __ATOMIC_RELAXED))
        return true;
    size_t count = __atomic_load_n(&c->count, __ATOMIC_RELAXED);
    if (op == MOTE_RECV)
        return count > 0 || __atomic_load_n(&c->sendq.head, __ATOMIC_RELAXED);
    return count < c->cap || __atomic_load_n(&c->recvq.head, __ATOMIC_RELAXED);
}

/* The channel moves, under c->lock, shared by chan.c and select.c. */

static inline void chan_buf_put(mote_chan *c, const void *src)
{
    chan_copy(c->buf + c->sendx * c->elem_size, src, c->elem_size);
    if (++c->sendx == c->cap)
        c->sendx = 0;
    __atomic_store_n(&c->count, c->count + 1, __ATOMIC_RELAXED); /* select peeks */
}

/* dst may be NULL (the value is discarded). */
static inline void chan_buf_take(mote_chan *c, void *dst)
{
    unsigned char *slot = c->buf + c->recvx * c->elem_size;
    if (dst)
        chan_copy(dst, slot, c->elem_size);
    if (++c->recvx == c->cap)
        c->recvx = 0;
    __atomic_store_n(&c->count, c->count - 1, __ATOMIC_RELAXED);
}

/* A receiver found a blocked sender s (already claimed).  Unbuffered: the
 * value goes straight from the sender's memory to dst.  Buffered (the buffer
 * is then full): dst gets the oldest element and the sender's value takes the
 * freed slot at the tail, so FIFO order holds.  The caller readies s. */
static inline void chan_recv_from_sender(mote_chan *c, chan_waiter *s,
                                         void *dst)
{
    if (c->cap == 0) {
        if (dst)
            chan_copy(dst, s->elem, c->elem_size);
    } else {
        chan_buf_take(c, dst);
        chan_buf_put(c, s->elem);
    }
    s->result = 0;
}

/* A sender found a blocked receiver r (already claimed; the buffer is
 * empty). */
static inline void chan_send_to_receiver(mote_chan *c, chan_waiter *r,
                                         const void *src)
{
    if (r->elem)
        chan_copy(r->elem, src, c->elem_size);
    r->result = 0;
}

#endif /* MOTE_CHAN_H */
