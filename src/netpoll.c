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
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
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

/* Lingering closes under way (pd_linger_copy): the copy of each socket
 * its thread closes, -1 in a free slot. */
#define PD_LINGERING 8
static int pd_lingering[PD_LINGERING] = {[0 ... PD_LINGERING - 1] = -1};

static void netpoll_fork_child(void)
{
    /* The epoll instance is shared with the parent: a new one, lazily. */
    if (LOAD(&np.state, RELAXED) == 1) {
        mote__os_fd_close_own(np.epfd);
        mote__os_fd_close_own(np.efd);
    }
    STORE(&np.state, 0, RELAXED);
    STORE(&np.init_lock, 0, RELAXED);
    /* Calls in flight and closes under way were the parent's threads'.  A
     * close that was left to a call in flight (PD_CLOSING without
     * PD_CLOSE_NOW: nobody has called close(2) yet) is the child's to do,
     * since that call's thread is not here; left alone, the descriptor would
     * stay open for the child's life.  A close(2) already under way
     * (PD_CLOSE_NOW) has most likely taken the number out of the table the
     * child copied, and the number may be a new descriptor's by now: it is
     * left alone.  The copies of lingering closes' sockets (see
     * pd_linger_copy) are closed too: their threads are the parent's. */
    for (size_t c = 0; c < PD_MAX_FD / PD_CHUNK; c++) {
        pdesc *chunk = LOAD(&np.chunks[c], RELAXED);
        for (size_t i = 0; chunk && i < PD_CHUNK; i++) {
            STORE(&chunk[i].parked[0], 0, RELAXED);
            STORE(&chunk[i].parked[1], 0, RELAXED);
            uint32_t busy = LOAD(&chunk[i].busy, RELAXED);
            if ((busy & (PD_CLOSING | PD_CLOSE_NOW)) == PD_CLOSING)
                close((int)(c * PD_CHUNK + i));
            STORE(&chunk[i].busy, 0, RELAXED);
            STORE(&chunk[i].lock, 0, RELAXED);
        }
    }
    for (int i = 0; i < PD_LINGERING; i++) {
        int fd = XCHG(&pd_lingering[i], -1, RELAXED);
        if (fd >= 0)
            mote__os_fd_close_own(fd);
    }
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

/* While a close(2) of pd's number runs: the number may be a new
 * descriptor's right after it (the caller's: it made one, or was given
 * one).  Microseconds, mostly; but a socket with SO_LINGER blocks in its
 * close after it freed the number, for as long as it lingers: a task
 * sleeps through that, not its worker.  (The call's own timeout does not
 * cut this wait short.) */
static void pd_wait_close_now(pdesc *pd)
{
    for (unsigned i = 0; LOAD(&pd->busy, ACQUIRE) & PD_CLOSE_NOW; i++) {
        if (i < 64)
            spin_relax();
        else
            mote__park_nap(50000); /* 50 us */
    }
}

/* Open file descriptions a registration made non-blocking this run (their
 * device and inode), under init_lock: a dup of one, registered after it,
 * finds the flag set already and is made blocking again at the run's end
 * too (the one that set it may be closed by then). */
#define PD_SWITCHED 64
static uint64_t pd_switched_ids[PD_SWITCHED][2];
static int pd_nswitched; /* atomic for the unlocked look */

/* Whether fd's description is one the run made non-blocking: now
 * (switched), or before; its identity in id. */
static bool pd_switched(int fd, uint64_t id[2], bool switched)
{
    if (!switched && !LOAD(&pd_nswitched, RELAXED))
        return false;
    if (mote__os_fd_identity(fd, id) != 0)
        return false;
    bool found = switched;
    spin_lock(&np.init_lock);
    for (int i = 0; i < pd_nswitched && !found; i++)
        found = pd_switched_ids[i][0] == id[0] && pd_switched_ids[i][1] == id[1];
    if (switched && pd_nswitched < PD_SWITCHED) {
        pd_switched_ids[pd_nswitched][0] = id[0];
        pd_switched_ids[pd_nswitched][1] = id[1];
        STORE(&pd_nswitched, pd_nswitched + 1, RELAXED);
    }
    spin_unlock(&np.init_lock);
    return found;
}

int mote__netpoll_get(int fd, void (*first)(int fd, void *arg), void *arg, pdesc **out,
                      uint32_t *seq)
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
    pd_wait_close_now(pd);
    spin_lock(&pd->lock);
    /* Still closing: the number is the closing descriptor's. */
    if (LOAD(&pd->busy, RELAXED) & PD_CLOSING) {
        spin_unlock(&pd->lock);
        return -EBADF;
    }
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
        pd->nb_ours = 0;
        if (kind != OS_FD_FILE && (r = mote__os_fd_nonblock(fd)) >= 0) {
            pd->nb_ours = pd_switched(fd, pd->id, r == 1);
            r = 0;
        }
        if (r == 0 && kind != OS_FD_FILE) {
            if (first)
                first(fd, arg);
            r = mote__os_poll_add(np.epfd, fd, pd_tag(fd, pd->seq));
            if (r == -EPERM) /* epoll refuses it: a file in disguise */
                kind = OS_FD_FILE, r = 0;
        }
        if ((r || kind == OS_FD_FILE) && pd->nb_ours) {
            /* not polled after all (the pool makes its calls): as it was */
            mote__os_fd_block(fd);
            pd->nb_ours = 0;
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
    pdesc *pd = w->obj;
    if (w->linked) {
        spin_lock(&pd->lock);
        mote__waitq_unlink(w);
        spin_unlock(&pd->lock);
    }
    FETCH_SUB(&pd->parked[w->q == &pd->waiters[PD_WRITE]], 1, RELAXED);
    if (w->idx) /* the one record of its wait that carries the count */
        FETCH_SUB(&np.nwaiting, 1, RELAXED);
}

static void pd_unpark(pdesc *pd, int dirs)
{
    for (int d = 0; d < 2; d++)
        if (dirs & (1 << d))
            FETCH_SUB(&pd->parked[d], 1, RELAXED);
}

void mote__netpoll_rearm(pdesc *pd, int d)
{
    STORE(&pd->ready[d], 1, SEQ_CST);
    if (__builtin_expect(!LOAD(&pd->parked[d], SEQ_CST), 1))
        return;
    waiter *list = NULL;
    spin_lock(&pd->lock);
    if (LOAD(&pd->ready[d], RELAXED)) /* (not taken again meanwhile) */
        mote__waitq_claim_all(&pd->waiters[d], 0, &list);
    spin_unlock(&pd->lock);
    mote__waitq_wake(list);
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
    /* Counted before the look at ready, and mote__netpoll_rearm sets
     * ready before it looks at the count (both seq_cst): it sees us, or we
     * see its flag. */
    for (int d = 0; d < 2; d++)
        if (dirs & (1 << d))
            FETCH_ADD(&pd->parked[d], 1, SEQ_CST);
    bool ready = false, late = false;
    for (int d = 0; d < 2; d++)
        ready |= (dirs & (1 << d)) && LOAD(&pd->ready[d], SEQ_CST);
    if (!ready)
        late = deadline >= 0 && (deadline == 0 || deadline <= mote__os_now_ns());
    if (ready || late) {
        pd_unpark(pd, dirs);
        spin_unlock(&pd->lock);
        return ready ? 0 : -ETIMEDOUT;
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
    pd_unpark(pd, dirs);
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

/* Lock held.  Forgets pd's registration: its waiters go on *list (to wake
 * with -ECANCELED), its events are stale; whether it had one. */
static bool pd_forget_locked(pdesc *pd, waiter **list)
{
    if (!pd->gen)
        return false;
    /* (a registration from before a fork was never counted in this
     * process) */
    if (pd->gen == LOAD(&np.gen, RELAXED) && pd->kind != OS_FD_FILE)
        FETCH_SUB(&np.nfds, 1, RELAXED);
    /* gen first: a call that reads the new seq (fast path: seq, then
     * gen) must find the registration gone too */
    STORE(&pd->gen, 0, RELEASE);
    STORE(&pd->seq, pd->seq + 1, RELEASE);
    mote__waitq_claim_all(&pd->waiters[PD_READ], -ECANCELED, list);
    mote__waitq_claim_all(&pd->waiters[PD_WRITE], -ECANCELED, list);
    return true;
}

/* Forgets fd's registration, if any. */
static void pd_forget(int fd)
{
    if (fd < 0 || fd >= PD_MAX_FD || LOAD(&np.state, ACQUIRE) != 1)
        return;
    pdesc *pd = pd_lookup(fd);
    if (!pd || !LOAD(&pd->gen, ACQUIRE))
        return;
    waiter *list = NULL;
    spin_lock(&pd->lock);
    pd_forget_locked(pd, &list);
    spin_unlock(&pd->lock);
    mote__waitq_wake(list);
}

/* The last close of a lingering socket, on a thread of its own. */
static void *pd_close_thread(void *arg)
{
    int slot = (int)(intptr_t)arg;
    /* out of the slot first: a fork child must never close a number a
     * descriptor made after this close took */
    int fd = XCHG(&pd_lingering[slot], -1, ACQ_REL);
    if (fd >= 0)
        mote__os_fd_close_own(fd);
    return NULL;
}

/* Whether close(2) of fd may wait: a TCP socket with SO_LINGER set waits
 * up to its linger time for the peer to take the unsent data.  Asked of
 * the socket unless a registration says it is no TCP stream. */
static bool pd_close_lingers(const pdesc *pd, int fd)
{
    if (pd->close_kind && pd->close_kind != PD_STREAM)
        return false;
    struct linger l;
    socklen_t len = sizeof l;
    return getsockopt(fd, SOL_SOCKET, SO_LINGER, &l, &len) == 0 && l.l_onoff &&
           l.l_linger > 0;
}

/* A socket's close lingers only when it is the last reference: a copy of
 * it, mote's own, goes to a thread that closes it after fd is closed (and
 * lingers there), so that closing fd itself is quick and frees the number
 * at once.  The copy's slot, or -1 (no room: fd's close lingers). */
static int pd_linger_copy(int fd)
{
    int slot = -1;
    for (int i = 0; i < PD_LINGERING && slot < 0; i++) {
        int none = -1;
        if (CAS(&pd_lingering[i], &none, -2, ACQUIRE)) /* -2: being set up */
            slot = i;
    }
    if (slot < 0)
        return -1;
    int copy = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (copy < 0 || !mote__os_fd_own(copy)) {
        if (copy >= 0)
            close(copy);
        STORE(&pd_lingering[slot], -1, RELEASE);
        return -1;
    }
    STORE(&pd_lingering[slot], copy, RELEASE);
    return slot;
}

/* fd is closed: the copy in slot goes to its thread (or, with no thread,
 * is closed here after all, lingering). */
static void pd_linger_start(int slot)
{
    pthread_attr_t a;
    pthread_t t;
    bool ok = pthread_attr_init(&a) == 0;
    if (ok) {
        pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
        pthread_attr_setstacksize(&a, 64 * 1024);
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        ok = pthread_create(&t, &a, pd_close_thread, (void *)(intptr_t)slot) == 0;
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        pthread_attr_destroy(&a);
    }
    if (!ok)
        pd_close_thread((void *)(intptr_t)slot);
}

int mote__netpoll_close_last(pdesc *pd, int fd)
{
    /* (a call that backs out of a closing descriptor may be last too: the
     * CAS lets one party close) */
    uint32_t want = PD_CLOSING;
    if (!CAS(&pd->busy, &want, PD_CLOSING | PD_CLOSE_NOW, ACQ_REL))
        return 0;
    int e = errno; /* a call leaves between its system call and its errno */
    /* A lingering close on a worker held every task of that worker for
     * the linger time (3 s, in a reviewer's program): a copy lingers
     * behind, and this close(2) is quick. */
    int slot = mote__self() && pd_close_lingers(pd, fd) ? pd_linger_copy(fd) : -1;
    int r = close(fd) == 0 ? 0 : -errno;
    if (slot >= 0)
        pd_linger_start(slot);
    errno = e;
    /* the number may be registered again */
    FETCH_AND(&pd->busy, ~(PD_CLOSING | PD_CLOSE_NOW), RELEASE);
    return r;
}

int mote__netpoll_close(int fd)
{
    /* The poller and the number's table chunk are made here if they are
     * not yet: else another thread could make them and register the
     * number between a look that found none and our close(2), and that
     * registration would outlive the descriptor. */
    pdesc *pd = fd >= 0 && fd < PD_MAX_FD && netpoll_init() == 0 ? pd_table(fd) : NULL;
    if (!pd) /* no poller or no table (out of memory): nothing is registered */
        return close(fd) == 0 ? 0 : -errno;
    pd_wait_close_now(pd);
    waiter *list = NULL;
    /* Under the lock: a waiter parked after its last system call on fd
     * (publishing under this lock) is woken here; and a registration
     * either came before (and is forgotten) or sees PD_CLOSING. */
    spin_lock(&pd->lock);
    if (LOAD(&pd->busy, RELAXED) & PD_CLOSING) { /* a close of fd is under way */
        spin_unlock(&pd->lock);
        return -EBADF;
    }
    /* The seq first: the flag's release publishes it to whoever closes. */
    bool registered = pd_forget_locked(pd, &list);
    pd->close_kind = registered ? pd->kind : 0; /* (published by the flag) */
    /* The closer is counted too, until its epoll_ctl is done: the number
     * must not be freed, and taken by a descriptor that registers, before
     * that call removes this one's registration. */
    FETCH_ADD(&pd->busy, PD_CLOSING | 1, ACQ_REL);
    spin_unlock(&pd->lock);
    mote__waitq_wake(list);
    if (registered)
        mote__os_poll_del(np.epfd, fd); /* a dup elsewhere must not report */
    /* Last out closes: this caller, or a call still in flight. */
    if (FETCH_SUB(&pd->busy, 1, ACQ_REL) != (PD_CLOSING | 1))
        return 0;
    return mote__netpoll_close_last(pd, fd);
}

void mote__netpoll_fresh(int fd) { pd_forget(fd); }

void mote__netpoll_run_end(void)
{
    if (LOAD(&np.state, ACQUIRE) != 1)
        return;
    uint32_t gen = LOAD(&np.gen, RELAXED);
    for (size_t c = 0; c < PD_MAX_FD / PD_CHUNK; c++) {
        pdesc *chunk = LOAD(&np.chunks[c], ACQUIRE);
        for (size_t i = 0; chunk && i < PD_CHUNK; i++) {
            pdesc *pd = &chunk[i];
            if (LOAD(&pd->gen, ACQUIRE) != gen)
                continue;
            int fd = (int)(c * PD_CHUNK + i);
            uint64_t id[2];
            waiter *list = NULL;
            spin_lock(&pd->lock);
            /* Not while a close is under way: its number is not ours to
             * touch.  Every other registration goes, not only those made
             * non-blocking: a dup of one of them, registered after it, shares
             * its flags, and would be taken as non-blocking still. */
            if (pd->gen == gen && !(LOAD(&pd->busy, RELAXED) & PD_CLOSING)) {
                /* (a file too: a pool call may still run on it, and
                 * leaves as ever) */
                pd_forget_locked(pd, &list);
                if (pd->kind != PD_FILE)
                    mote__os_poll_del(np.epfd, fd);
                /* not once the number holds another descriptor (closed
                 * with close(2) behind mote's back and made again) */
                if (pd->nb_ours && mote__os_fd_identity(fd, id) == 0 &&
                    id[0] == pd->id[0] && id[1] == pd->id[1])
                    mote__os_fd_block(fd);
                pd->nb_ours = 0;
            }
            spin_unlock(&pd->lock);
            mote__waitq_wake(list); /* (none: the run's tasks are gone) */
        }
    }
    spin_lock(&np.init_lock);
    STORE(&pd_nswitched, 0, RELAXED);
    spin_unlock(&np.init_lock);
}

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
