/*
 * netpoll.h - the netpoller: one epoll instance for the process, each
 * descriptor registered once (edge-triggered), its readiness tracked in a
 * per-descriptor record (pdesc) and tasks parked on it until an edge.
 *
 * A pdesc is found by fd number in a two-level table; `seq` changes when
 * mote_close closes the descriptor, so an event or a waiter of an earlier
 * descriptor with the same number is recognised and ignored.
 *
 * Readiness protocol (per direction, `ready` is atomic, waiters are under
 * `lock`):
 *   the poller, on an edge:       lock; ready = 1; claim every waiter; unlock
 *   a task before its system call: ready = 0 (it consumes the readiness)
 *   a task after EAGAIN:           lock; if ready: retry; else publish a
 *                                  record and park; unlock
 * so an edge between the system call and the park is never lost.  A task
 * that took `ready` and leaves it set again (its call found more room or
 * data than it used) hands it on with mote__netpoll_rearm: one edge wakes
 * every waiter, the first takes the flag, and the others, which found it
 * taken and parked again, would otherwise sleep with the descriptor ready
 * and no edge to come (two tasks writing to one socket: one waited for its
 * timeout).  After a
 * short read of a TCP stream (all there was) ready stays 0 and the next read
 * parks without trying; otherwise ready is set back to 1, so the next call
 * tries the system call first.  Not once an edge reported something a
 * read stops short at (the peer's FIN, an error, the mark of urgent data):
 * one edge may report it together with the data, and no edge follows
 * (`stops` is set before `ready`, so a task that took `ready` sees it).
 */
#ifndef MOTE_NETPOLL_H
#define MOTE_NETPOLL_H

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>

#include "atomic.h"

#include "mote.h"

/* as os_fd_kind */
enum pd_kind { PD_STREAM = 1, PD_USTREAM, PD_SOCKET, PD_PIPE, PD_FILE, PD_OTHER };
enum { PD_READ = 0, PD_WRITE = 1 };
enum { PD_WANT_READ = 1 << PD_READ, PD_WANT_WRITE = 1 << PD_WRITE };

typedef struct pdesc {
    int lock;              /* spin.h: waiters and registration */
    uint32_t seq;          /* bumped by mote_close */
    uint32_t busy;         /* atomic: system calls in flight | PD_CLOSING */
    uint32_t gen;          /* netpoll generation registered in; 0 never */
    uint8_t kind;          /* enum pd_kind, valid once registered */
    uint8_t ready[2];      /* atomic, per direction */
    uint8_t stops;         /* atomic: an edge reported os_poll_event.stops_reads */
    uint8_t nb_ours;       /* registration made it non-blocking: undone at the
                              run's end (not at mote_close: a dup registered
                              since shares the flag, and is in use) */
    uint64_t id[2];        /* with nb_ours: what it refers to (os_fd_identity) */
    uint8_t close_kind;    /* kind when a close forgot it (0: not registered) */
    uint32_t parked[2];    /* atomic, per direction: tasks in mote__netpoll_wait
                              past their look at `ready` (mote__netpoll_rearm) */
    mote_waitq waiters[2]; /* per direction */
} pdesc;

/* System calls in flight, and the close.  Every system call mote makes
 * on a registered descriptor is bracketed by mote__netpoll_enter and
 * _leave, which count it in `busy`.  mote_close (mote__netpoll_close)
 * forgets the registration and wakes the waiters at once, sets PD_CLOSING
 * (a call that would start one now gets -ECANCELED), and closes the
 * descriptor when no call is in flight: itself, or else the last call to
 * leave does (Go's fdMutex does the same with references).  So no call
 * reaches the number once it is free for another descriptor (a task that
 * read the seq, then lost its CPU, then read from a socket accepted since
 * under the same number), and no one waits for a call: a file's, on the
 * blocking pool, may take a disk's time.  PD_CLOSE_NOW is set while the
 * close(2) runs: a call that registers the number meanwhile may be a new
 * descriptor's, and waits for it to end.  Count and flags are one word,
 * so a call either sees the flags or is counted before the close looks,
 * and exactly one party (the closer, or the last call out) closes. */
#define PD_CLOSING   0x80000000u
#define PD_CLOSE_NOW 0x40000000u

/* The last one out of a closing descriptor closes it, unless a call that
 * backed out did: 0 or -errno of close(2) (0 then).  errno is kept. */
int mote__netpoll_close_last(pdesc *pd, int fd);

/* errno is kept: the caller reads its system call's after this. */
static inline void mote__netpoll_leave(pdesc *pd, int fd)
{
    if (__builtin_expect(FETCH_SUB(&pd->busy, 1, ACQ_REL) == (PD_CLOSING | 1), 0))
        (void)mote__netpoll_close_last(pd, fd); /* nobody is left to hear it */
}

/* 0, or -ECANCELED: fd is being closed, or was closed since seq. */
static inline int mote__netpoll_enter(pdesc *pd, uint32_t seq, int fd)
{
    uint32_t b = FETCH_ADD(&pd->busy, 1, ACQ_REL);
    if (__builtin_expect((b & PD_CLOSING) || LOAD(&pd->seq, ACQUIRE) != seq, 0)) {
        mote__netpoll_leave(pd, fd);
        return -ECANCELED;
    }
    return 0;
}

/* A call that took ready[d] leaves the descriptor ready for the next one:
 * sets the flag again, and wakes the tasks that parked on d meanwhile. */
void mote__netpoll_rearm(pdesc *pd, int d);

struct worker;

/* The pdesc of fd, registered with the poller and made non-blocking on
 * first use, and its seq, which the call passes to every wait: a close
 * since then cancels the wait.  first, if not NULL, is called with arg
 * when this call registers fd, non-blocking by then and just before the
 * poller sees it (pd's lock held: a short system call at most), so that
 * what it does comes before the first events (mote_connect: a socket not
 * yet connecting reports a hang-up).  0, or -EBADF, -ENOMEM, or another
 * -errno from registration. */
int mote__netpoll_get(int fd, void (*first)(int fd, void *arg), void *arg, pdesc **out,
                      uint32_t *seq);

/* Parks the current task until one of the directions in dirs
 * (PD_WANT_READ | PD_WANT_WRITE) of pd is ready or deadline passes
 * (mote__park_deadline clock; < 0 forever).  0 (ready: try again),
 * -ETIMEDOUT, -ECANCELED (mote_close, also one since seq was read: a task
 * between its system call and this wait), -EPERM outside a task. */
int mote__netpoll_wait(int fd, pdesc *pd, uint32_t seq, int dirs, int64_t deadline);

/* mote_close's share: forgets fd's registration (its waiters wake with
 * -ECANCELED, its events are stale) and drops it from epoll while the
 * number is still this descriptor, then closes it, now or (a call in
 * flight) when the last call leaves.  0 or -errno of close(2) when it
 * closed now, 0 when a call will; -EBADF when a close of fd is under way
 * already. */
int mote__netpoll_close(int fd);

/* fd was just made by mote (socket, accept): a registration its number
 * still has belongs to a descriptor closed with close(2) behind mote's
 * back, which epoll has forgotten; forget it too, or the new descriptor
 * would be taken as registered and its waiters never woken. */
void mote__netpoll_fresh(int fd);

/* The run is over: every registration is forgotten (the next use makes
 * it anew), and descriptors a registration made non-blocking are blocking
 * again.  A
 * program's stdout, say, is shared with other processes: left non-blocking
 * its writes after the run failed with EAGAIN, and stdio dropped them. */
void mote__netpoll_run_end(void);

/* Whether any descriptor was ever registered: only then does a worker
 * poll. */
bool mote__netpoll_active(void);

/* Processes ready events: waits up to timeout_ns (0: just looks).  Called
 * by workers (w) from scheduling points and, when idle, as the one blocked
 * poller.  Returns the number of events, or -EBUSY when another worker is
 * already the blocked poller (then sleep on the futex instead).
 *
 * A worker that blocks passes its futex word `sleeping` (else NULL): once
 * the poller, it blocks only if the word is still set.  A waker clears the
 * word, then breaks the poller if that is the worker (mote__sched_wake):
 * so the waker sees the poller, or the poller sees the cleared word. */
int mote__netpoll_poll(struct worker *w, int64_t timeout_ns, const int *sleeping);

/* Interrupts the blocked poller (a wake for the worker that polls). */
void mote__netpoll_break(void);
/* Whether w is the worker blocked in epoll right now. */
bool mote__netpoll_is_poller(const struct worker *w);

/* Tasks parked on descriptors right now, and registered descriptors. */
uint64_t mote__netpoll_waiting(void);
uint64_t mote__netpoll_fds(void);
/* Polls that found events, and the events they found. */
void mote__netpoll_stats(uint64_t *polls, uint64_t *events);

#endif /* MOTE_NETPOLL_H */
