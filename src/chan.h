/*
 * chan.h - a channel's layout and the moves shared by chan.c and select.c.
 *
 * A channel is one allocation: this header and, behind it, a ring of cap
 * slots of elem_size bytes.  One spin lock (lock) guards every field; it is
 * held for queue surgery and one element copy, never across a park.
 *
 * Invariants, under lock:
 *  - a live (claimable) waiter sits in recvq only while the buffer is empty,
 *    and in sendq only while it is full (cap 0 is always both); so a sender
 *    first looks for a receiver, a receiver first for a sender.  Stale
 *    records (of selects that fired elsewhere) may sit in either queue
 *    until their owner takes them out; chan_claim skips them.
 *  - once closed, sendq holds no live waiter: close wakes every waiter and
 *    later senders fail at once.
 *  - refs counts published records whose owner may still lock the channel:
 *    taken at publish, dropped by the waker that claims a plain send or
 *    receive through its record (its owner never comes back), otherwise by
 *    the owner when it takes its record out (select, timeout, teardown).
 *    mote_chan_free while refs > 0 only marks the channel dying; whoever
 *    drops the last ref of a dying channel frees it.  So a select that has
 *    not yet cleaned up never touches freed memory.
 */
#ifndef MOTE_CHAN_H
#define MOTE_CHAN_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "atomic.h"
#include "heap/heap.h"
#include "mote.h"
#include "waitq.h"

/* Go's limit: an element is at most 64 KiB (it is copied under a lock). */
#define CHAN_MAX_ELEM (64u * 1024)

#define CHAN_MAGIC 0x6d636861u /* "mcha": live */
#define CHAN_DYING 0x64656164u /* "dead": freed, waiting for its last ref */

struct mote_chan {
    int lock;        /* spin.h lock: every field below */
    uint32_t magic;  /* CHAN_MAGIC while valid, to reject stray pointers */
    uint32_t closed; /* written under lock (atomically: select peeks) */
    uint32_t refs;   /* records that may still lock this channel */
    size_t elem_size;
    size_t cap;         /* 0: unbuffered */
    size_t count;       /* elements in buf (written atomically: select peeks) */
    size_t recvx;       /* next slot to receive from */
    size_t sendx;       /* next slot to send into */
    mote_waitq recvq;   /* blocked receivers */
    mote_waitq sendq;   /* blocked senders */
    unsigned char *buf; /* cap * elem_size bytes (never NULL) */
};

/* (A channel freed twice may be unmapped by now: its magic is read only
 * where the heap has memory.) */
static inline bool chan_valid(const mote_chan *c)
{
    return c != NULL && mote__heap_mapped(c) && LOAD(&c->magic, RELAXED) == CHAN_MAGIC;
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

/* Without the lock: whether op could proceed now.  A hint only (it may be
 * stale by the time the caller locks), used to skip channels not worth
 * locking.  Every field it reads is written with atomic stores. */
static inline bool chan_maybe_ready(mote_chan *c, int op)
{
    if (LOAD(&c->closed, RELAXED))
        return true;
    size_t count = LOAD(&c->count, RELAXED);
    if (op == MOTE_RECV)
        return count > 0 || list_peek_nonempty(&c->sendq);
    return count < c->cap || list_peek_nonempty(&c->recvq);
}

/* Without the lock: whether c holds nothing to receive (no buffered value;
 * unbuffered, no sender queued).  An acquire load, so a read after it is
 * done after it (chan_poll_unlocked relies on the order). */
static inline bool chan_empty_acquire(mote_chan *c)
{
    return c->cap ? LOAD(&c->count, ACQUIRE) == 0 : LOAD(&c->sendq.head, ACQUIRE) == NULL;
}

#define CHAN_LOCKED 1 /* chan_poll_unlocked: the answer needs the lock */

/* The non-blocking send or receive (op) answered without the lock, as Go's
 * chanrecv/chansend do with block false: -EAGAIN (would block), MOTE_ECLOSED
 * (recv_elem, if any, zeroed), or CHAN_LOCKED.  Exact, because each answer
 * rests on two reads in an order that makes one moment true of both: a
 * receive would block if c was empty and then still open (a close is for
 * good, so it was open when seen empty); a closed c seen empty after it
 * stays empty (no send succeeds after a close); a send would block if c
 * was open and then still full (a closed channel never fills).  A stale
 * record in a queue only sends the caller to the lock. */
static inline int chan_poll_unlocked(mote_chan *c, int op, void *recv_elem)
{
    if (op == MOTE_RECV) {
        if (!chan_empty_acquire(c))
            return CHAN_LOCKED;
        if (!LOAD(&c->closed, ACQUIRE))
            return -EAGAIN;
        if (!chan_empty_acquire(c))
            return CHAN_LOCKED;
        if (recv_elem)
            memset(recv_elem, 0, c->elem_size);
        return MOTE_ECLOSED;
    }
    if (LOAD(&c->closed, ACQUIRE))
        return MOTE_ECLOSED;
    bool full =
        c->cap ? LOAD(&c->count, ACQUIRE) == c->cap : !list_peek_nonempty(&c->recvq);
    return full ? -EAGAIN : CHAN_LOCKED;
}

static inline void chan_buf_put(mote_chan *c, const void *src)
{
    chan_copy(c->buf + c->sendx * c->elem_size, src, c->elem_size);
    if (++c->sendx == c->cap)
        c->sendx = 0;
    STORE(&c->count, c->count + 1, RELAXED); /* select peeks */
}

/* dst may be NULL (the value is discarded). */
static inline void chan_buf_take(mote_chan *c, void *dst)
{
    unsigned char *slot = c->buf + c->recvx * c->elem_size;
    if (dst)
        chan_copy(dst, slot, c->elem_size);
    if (++c->recvx == c->cap)
        c->recvx = 0;
    STORE(&c->count, c->count - 1, RELAXED);
}

/* Publishes a record for the current task in q (sendq or recvq); lock
 * held. */
void mote__chan_publish(mote_chan *c, mote_waitq *q, waiter *w);

/* Claims the first live waiter of q, dropping stale records; lock held.
 * The claimer of a record that is its wait's only one releases the channel
 * for its owner, which will not come back to it. */
static inline waiter *chan_claim(mote_chan *c, mote_waitq *q)
{
    waiter *w = mote__waitq_claim(q);
    if (w && w->sole) {
        mote__assert(c->refs > 0 && !w->ref_dropped);
        c->refs--;
        w->ref_dropped = true;
    }
    return w;
}

/* The owner takes its record out (if still linked) and releases the
 * channel; lock held.  True when the channel is dying and this was its last
 * ref: free it (mote__chan_destroy) after unlocking. */
static inline bool chan_forget(mote_chan *c, waiter *w)
{
    if (w->linked)
        mote__waitq_unlink(w);
    if (!w->ref_dropped) {
        mote__assert(c->refs > 0);
        c->refs--;
        w->ref_dropped = true;
    }
    return c->refs == 0 && c->magic == CHAN_DYING;
}

/* Frees a dying channel whose last ref is gone; no lock held. */
void mote__chan_destroy(mote_chan *c);

/* A receiver found a blocked sender s (already claimed).  Unbuffered: the
 * value goes straight from the sender's memory to dst.  Buffered (the buffer
 * is then full): dst gets the oldest element and the sender's value takes the
 * freed slot at the tail, so FIFO order holds.  The caller readies s. */
static inline void chan_recv_from_sender(mote_chan *c, waiter *s, void *dst)
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
static inline void chan_send_to_receiver(mote_chan *c, waiter *r, const void *src)
{
    if (r->elem)
        chan_copy(r->elem, src, c->elem_size);
    r->result = 0;
}

#endif /* MOTE_CHAN_H */
