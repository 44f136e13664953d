/*
 * netpoll.c - the netpoller (see netpoll.h for the readiness protocol).
 *
 * State: one epoll instance and one eventfd (to interrupt a blocked
 * poll) for the whole process, made on first use and kept across runs;
 * the pdesc table, whose chunks are allocated on first use and never freed
 * (a pointer to a pdesc stays valid for the process's life).  `gen`
 * changes in a fork child, which gets its own epoll: every descriptor then
 * registers again.
 *
 * Polling: at most one idle worker blocks in epoll (`poller`); busy
 * workers look without waiting from their scheduling points, at least every
 * NETPOLL_INTERVAL_NS (sched.c); an idle worker looks before it spins.  A
 * worker blocked in epoll is woken by the eventfd (mote__netpoll_break),
 * which is level-triggered and drained only by the blocked poller, before
 * it gives up the role: a look without waiting, or the previous poller,
 * could otherwise take the wake-up meant for the next one, which would
 * then sleep for good (seen: the end of a run waited on a worker in
 * epoll_wait, in 1 run of 5 under load).
 *
 * Locking: init_lock for creation and table chunks; each pdesc's lock for
 * its waiters and registration; the rest is atomic.
 */
#include "netpoll.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "os/os.h"
#include "runtime.h"
#include "spin.h"
#include "waitq.h"

#define PD_CHUNK          1024
#define PD_MAX_FD         (1 << 22) /* the kernel's nr_open ceiling is 2^20 by default */
#define NETPOLL_BREAK_TAG UINT64_MAX

static struct {
    int init_lock;
    int state; /* atomic: 0 not made, 1 ready, -errno failed */
    int epfd, efd;
    uint32_t gen;                        /* atomic */
    pdesc *chunks[PD_MAX_FD / PD_CHUNK]; /* atomic pointers */
    int poller;              /* atomic: index + 1 of the worker blocked in epoll */
    uint64_t nfds, nwaiting; /* atomic */
    uint64_t polls, events;  /* atomic, for metrics */
} np;

static void netpoll_fork_child(void)
{
    /* The epoll instance is shared with the parent: a new one, lazily. */
    if (LOAD(&np.state, RELAXED) == 1) {
        mote__os_fd_close_own(np.epfd);
        mote__os_fd_close_own(np.efd);
    }
    STORE(&np.state, 0, RELAXED);
    STORE(&np.init_lock, 0, RELAXED);
    STORE(&np.poller, 0, RELAXED);
    STORE(&np.nwaiting, 0, RELAXED);
    STORE(&np.nfds, 0, RELAXED);
}

static int netpoll_init(void)
{
    int st = LOAD(&np.state, ACQUIRE);
    if (__builtin_expect(st == 1, 1))
        return 0;
    spin_lock(&np.init_lock);
    st = np.state;
    if (st == 0) {
        static int atfork_done;
        if (!atfork_done) {
            pthread_atfork(NULL, NULL, netpoll_fork_child);
            atfork_done = 1;
        }
        int ep = mote__os_poll_create();
        int ev = ep >= 0 ? mote__os_event_create() : ep;
        if (ep < 0 || ev < 0) {
            if (ep >= 0)
                mote__os_fd_close_own(ep);
            st = ep < 0 ? ep : ev;
        } else if ((st = mote__os_poll_add_level(ep, ev, NETPOLL_BREAK_TAG)) != 0) {
            mote__os_fd_close_own(ep);
            mote__os_fd_close_own(ev);
        } else {
            np.epfd = ep;
            np.efd = ev;
            FETCH_ADD(&np.gen, 1, RELAXED);
            st = 1;
        }
        if (st != 1) /* a failure is not remembered: try again next time */
            st = st ? st : -ENOMEM;
        else
            STORE(&np.state, 1, RELEASE);
    }
    spin_unlock(&np.init_lock);
    return st == 1 ? 0 : st;
}

bool mote__netpoll_active(void) { return LOAD(&np.nfds, RELAXED) != 0; }

static pdesc *pd_lookup(int fd)
{
    pdesc *c = LOAD(&np.chunks[fd / PD_CHUNK], ACQUIRE);
    return c ? &c[fd % PD_CHUNK] : NULL;
}

static pdesc *pd_table(int fd)
{
    pdesc *pd = pd_lookup(fd);
    if (pd)
        return pd;
    spin_lock(&np.init_lock);
    pdesc *c = np.chunks[fd / PD_CHUNK];
    if (!c) {
        c = mote_calloc(PD_CHUNK, sizeof(pdesc));
        if (c)
            STORE(&np.chunks[fd / PD_CHUNK], c, RELEASE);
    }
    spin_unlock(&np.init_lock);
    return c ? &c[fd % PD_CHUNK] : NULL;
}

static uint64_t pd_tag(int fd, uint32_t seq)
{
    return (uint64_t)seq << 32 | (uint32_t)fd;
}

int mote__netpoll_get(int fd, bool nonblock_known, pdesc **out, uint32_t *seq)
{
    if (fd < 0 || fd >= PD_MAX_FD)
        return -EBADF;
    int r = netpoll_init();
    if (r)
        return r;
    pdesc *pd = pd_table(fd);
    if (!pd)
        return -ENOMEM;
    *out = pd;
    uint32_t gen = LOAD(&np.gen, RELAXED);
    /* seq before gen: a close in between leaves gen 0, and we register
     * again (and fail on a closed descriptor) */
    *seq = LOAD(&pd->seq, ACQUIRE);
    if (__builtin_expect(LOAD(&pd->gen, ACQUIRE) == gen, 1))
        return 0;
    spin_lock(&pd->lock);
    if (pd->gen != gen) {
        /* mote's own descriptors are not the program's (a number the
         * program closed may be one of them now) */
        if (mote__os_fd_is_own(fd)) {
            spin_unlock(&pd->lock);
            return -EBADF;
        }
        int kind = mote__os_fd_kind(fd);
        if (kind < 0) {
            spin_unlock(&pd->lock);
            return kind;
        }
        if (kind != OS_FD_FILE && !nonblock_known)
            r = mote__os_fd_nonblock(fd);
        if (r == 0 && kind != OS_FD_FILE) {
            r = mote__os_poll_add(np.epfd, fd, pd_tag(fd, pd->seq));
            if (r == -EPERM) /* epoll refuses it: a file in disguise */
                kind = OS_FD_FILE, r = 0;
        }
        if (r) {
            spin_unlock(&pd->lock);
            return r;
        }
        pd->kind = (uint8_t)kind;
        STORE(&pd->stops, 0, RELAXED);
        STORE(&pd->ready[PD_READ], 1, RELAXED);
        STORE(&pd->ready[PD_WRITE], 1, RELAXED);
        if (kind != OS_FD_FILE)
            FETCH_ADD(&np.nfds, 1, RELAXED);
        STORE(&pd->gen, gen, RELEASE);
    }
    *seq = pd->seq;
    spin_unlock(&pd->lock);
    return 0;
}

/* Teardown's hook for the record of a discarded task (waitq.h). */
static void pd_discard(waiter *w)
{
    if (w->linked) {
        pdesc *pd = w->obj;
        spin_lock(&pd->lock);
        mote__waitq_unlink(w);
        spin_unlock(&pd->lock);
    }
    if (w->idx) /* the one record of its wait that carries the count */
        FETCH_SUB(&np.nwaiting, 1, RELAXED);
}

int mote__netpoll_wait(int fd, pdesc *pd, uint32_t seq, int dirs, int64_t deadline)
{
    task *self = mote__self();
    if (!self)
        return -EPERM;
    mote__assert(dirs && !(dirs & ~(PD_WANT_READ | PD_WANT_WRITE)));
    spin_lock(&pd->lock);
    /* Closed since the call began (between its system call and here): the
     * close woke only the waiters it found, and the number may be another
     * descriptor's by now. */
    if (pd->seq != seq) {
        spin_unlock(&pd->lock);
        return -ECANCELED;
    }
    for (int d = 0; d < 2; d++)
        if ((dirs & (1 << d)) && LOAD(&pd->ready[d], ACQUIRE)) {
            spin_unlock(&pd->lock);
            return 0;
        }
    if (deadline >= 0 && (deadline == 0 || deadline <= mote__os_now_ns())) {
        spin_unlock(&pd->lock);
        return -ETIMEDOUT;
    }
    waiter w[2];
    mote__park_prepare(dirs == PD_WANT_WRITE ? "fd write" : "fd read",
                       (const void *)(intptr_t)fd);
    for (int d = 0; d < 2; d++) {
        mote__waiter_init(&w[d], self);
        w[d].discard = pd_discard;
        w[d].idx = d == 0 ? 1 : !(dirs & PD_WANT_READ); /* who counts */
        if (dirs & (1 << d))
            mote__waitq_publish(&pd->waiters[d], &pd->lock, &w[d], pd);
    }
    FETCH_ADD(&np.nwaiting, 1, RELAXED);
    spin_unlock(&pd->lock);
    int r = mote__park_until(deadline);
    FETCH_SUB(&np.nwaiting, 1, RELAXED);
    if (w[0].linked || w[1].linked) { /* a timeout, or the other direction */
        spin_lock(&pd->lock);
        for (int d = 0; d < 2; d++)
            if (w[d].linked)
                mote__waitq_unlink(&w[d]);
        spin_unlock(&pd->lock);
    }
    mote__waitq_end(self);
    if (r == 0 && LOAD(&pd->seq, ACQUIRE) != seq)
        r = -ECANCELED; /* an edge, then a close, before we ran */
    return r;
}

/* Forgets fd's registration, if any and if its seq is still *seq (any
 * when seq is NULL): its waiters wake with -ECANCELED and its events are
 * stale. */
static void pd_forget(int fd, const uint32_t *seq)
{
    if (fd < 0 || fd >= PD_MAX_FD || LOAD(&np.state, ACQUIRE) != 1)
        return;
    pdesc *pd = pd_lookup(fd);
    if (!pd || (!LOAD(&pd->gen, ACQUIRE) && !(LOAD(&pd->busy, ACQUIRE) & PD_CLOSING)))
        return;
    waiter *list = NULL;
    spin_lock(&pd->lock);
    bool ours = !seq || pd->seq == *seq;
    if (pd->gen && ours) {
        /* (a registration from before a fork was never counted in this
         * process) */
        if (pd->gen == LOAD(&np.gen, RELAXED) && pd->kind != OS_FD_FILE)
            FETCH_SUB(&np.nfds, 1, RELAXED);
        STORE(&pd->seq, pd->seq + 1, RELEASE); /* its events are now stale */
        STORE(&pd->gen, 0, RELEASE);
        mote__waitq_claim_all(&pd->waiters[PD_READ], -ECANCELED, &list);
        mote__waitq_claim_all(&pd->waiters[PD_WRITE], -ECANCELED, &list);
    }
    /* The number is free for the next descriptor: after the seq, so a call
     * that finds the flag gone finds the new seq too (mote__netpoll_enter). */
    if (ours)
        FETCH_AND(&pd->busy, ~PD_CLOSING, RELEASE);
    spin_unlock(&pd->lock);
    mote__waitq_wake(list);
}

uint32_t mote__netpoll_close_begin(int fd)
{
    if (fd < 0 || fd >= PD_MAX_FD || LOAD(&np.state, ACQUIRE) != 1)
        return 0;
    pdesc *pd = pd_lookup(fd);
    if (!pd)
        return 0;
    /* Under the lock: a waiter parked after its last system call on fd
     * (publishing under this lock), and our close(2) comes after that
     * (TSan sees the order too). */
    spin_lock(&pd->lock);
    uint32_t seq = pd->seq;
    bool registered = pd->gen != 0;
    FETCH_OR(&pd->busy, PD_CLOSING, ACQ_REL); /* no system call starts now */
    spin_unlock(&pd->lock);
    if (registered)
        mote__os_poll_del(np.epfd, fd); /* a dup elsewhere must not report */
    /* ... and none is left running when the number goes: a socket call
     * is over in microseconds; a file's on the pool may take a disk's
     * time, which the closing task sleeps through, not its worker. */
    for (unsigned i = 0; LOAD(&pd->busy, ACQUIRE) & ~PD_CLOSING; i++) {
        if (i < 64)
            spin_relax();
        else if (i < 128)
            sched_yield();
        else if (mote__self())
            mote_sleep(100000); /* 0.1 ms */
        else
            nanosleep(&(struct timespec){0, 100000}, NULL);
    }
    return seq;
}

void mote__netpoll_close_end(int fd, uint32_t seq) { pd_forget(fd, &seq); }

void mote__netpoll_fresh(int fd) { pd_forget(fd, NULL); }

/* An edge on fd: mark it ready and claim its waiters.  *now: the batch's
 * harvest time, read by the first event that wakes someone. */
static void netpoll_event(const os_poll_event *ev, int64_t *now)
{
    int fd = (int)(uint32_t)ev->data;
    uint32_t seq = (uint32_t)(ev->data >> 32);
    pdesc *pd = pd_lookup(fd);
    if (!pd || LOAD(&pd->seq, RELAXED) != seq)
        return; /* closed since: the number may be someone else's now */
    waiter *list = NULL;
    spin_lock(&pd->lock);
    if (pd->seq == seq) {
        if (ev->stops_reads)
            STORE(&pd->stops, 1, RELAXED); /* published by ready's release */
        if (ev->readable) {
            STORE(&pd->ready[PD_READ], 1, RELEASE);
            mote__waitq_claim_all(&pd->waiters[PD_READ], 0, &list);
        }
        if (ev->writable) {
            STORE(&pd->ready[PD_WRITE], 1, RELEASE);
            mote__waitq_claim_all(&pd->waiters[PD_WRITE], 0, &list);
        }
    }
    spin_unlock(&pd->lock);
    if (list) { /* stamped for the wake-up latency metric */
        if (!*now)
            *now = mote__os_now_ns();
        for (waiter *w = list; w; w = w->wake_next) {
            STORE(&w->t->parked_at, *now, RELAXED);
            w->t->io_woken = true; /* read by its worker after the ready */
        }
    }
    mote__waitq_wake(list);
}

int mote__netpoll_poll(struct worker *w, int64_t timeout_ns, const int *sleeping)
{
    if (LOAD(&np.state, ACQUIRE) != 1)
        return 0;
    bool block = timeout_ns != 0;
    if (block) {
        int none = 0;
        if (!CAS(&np.poller, &none, w->index + 1, SEQ_CST))
            return -EBUSY;
        /* Woken between setting the word and becoming the poller: the
         * waker found no poller to break (seen: a run's end left a worker
         * in epoll_wait for good, 3 times in 34 suites under load). */
        if (sleeping && !LOAD(sleeping, SEQ_CST)) {
            STORE(&np.poller, 0, SEQ_CST);
            return 0;
        }
    }
    os_poll_event ev[128];
    int n = mote__os_poll_wait(np.epfd, ev, 128, timeout_ns);
    int real = 0;
    for (int i = 0; i < n; i++) {
        if (ev[i].data == NETPOLL_BREAK_TAG) {
            if (block)
                mote__os_event_drain(np.efd);
            continue;
        }
        ev[real++] = ev[i];
    }
    if (block)
        STORE(&np.poller, 0, SEQ_CST);
    if (real <= 0)
        return 0;
    FETCH_ADD(&np.polls, 1, RELAXED);
    int64_t now = 0;
    for (int i = 0; i < real; i++)
        netpoll_event(&ev[i], &now);
    FETCH_ADD(&np.events, (uint64_t)real, RELAXED);
    return real;
}

void mote__netpoll_break(void)
{
    if (LOAD(&np.poller, SEQ_CST))
        mote__os_event_signal(np.efd);
}

bool mote__netpoll_is_poller(const struct worker *w)
{
    return LOAD(&np.poller, SEQ_CST) == w->index + 1;
}

uint64_t mote__netpoll_waiting(void) { return LOAD(&np.nwaiting, RELAXED); }

uint64_t mote__netpoll_fds(void) { return LOAD(&np.nfds, RELAXED); }

void mote__netpoll_stats(uint64_t *polls, uint64_t *events)
{
    *polls = LOAD(&np.polls, RELAXED);
    *events = LOAD(&np.events, RELAXED);
}
