/*
 * fdio.c - task-aware descriptor I/O: mote_wait_fd, mote_read,
 * mote_write, mote_accept, mote_connect and mote_close.  Each call tries
 * the system call first (descriptors are non-blocking) and parks the task
 * on the netpoller only when it would block (netpoll.h has the readiness
 * protocol).  Regular files, which epoll refuses, are read and written on
 * the blocking pool instead, so no worker ever waits for a disk.
 *
 * Signals: writes to sockets use MSG_NOSIGNAL; a write to a pipe whose
 * reader is gone raises SIGPIPE synchronously on the writing thread, which
 * mote blocks on its workers for the run and consumes here, so the caller
 * gets -EPIPE and the process is never killed.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "atomic.h"
#include "netpoll.h"
#include "os/os.h"
#include "park.h"

/* Sockets take recv/send: no file-layer checks (~90 ns less a call), and
 * MSG_NOSIGNAL instead of a SIGPIPE. */
static inline bool fdio_is_socket(const pdesc *pd)
{
    return pd->kind == PD_STREAM || pd->kind == PD_USTREAM || pd->kind == PD_SOCKET;
}

/* One read, in flight for mote_close (netpoll.h); -1 with errno
 * ECANCELED once the descriptor is being closed. */
static ssize_t fdio_read_once(pdesc *pd, uint32_t seq, int fd, void *buf, size_t n)
{
    int r = mote__netpoll_enter(pd, seq, fd);
    if (r) {
        errno = -r;
        return -1;
    }
    ssize_t k = fdio_is_socket(pd) ? recv(fd, buf, n, 0) : read(fd, buf, n);
    mote__netpoll_leave(pd, fd); /* (may close fd: mote_close came meanwhile) */
    return k;
}

/* A call with a 0 timeout asks the kernel once even when the flags say
 * "not ready": they say so until a worker next polls, and data may have
 * come since (a task told of it by another thread got -ETIMEDOUT). */
static inline bool fdio_ask_now(int64_t deadline, bool *asked)
{
    if (deadline != 0 || *asked)
        return false;
    *asked = true;
    return true;
}

static int fdio_check(int fd)
{
    if (!mote__self())
        return -EPERM;
    if (fd < 0)
        return -EBADF;
    return 0;
}

int mote_wait_fd(int fd, int events, int64_t timeout_ns)
{
    int r = fdio_check(fd);
    if (r)
        return r;
    if (events == 0 || (events & ~(MOTE_READABLE | MOTE_WRITABLE)))
        return -EINVAL;
    pdesc *pd;
    uint32_t seq;
    if ((r = mote__netpoll_get(fd, NULL, NULL, &pd, &seq)))
        return r;
    if (pd->kind == PD_FILE)
        return events; /* regular files are always ready */
    int64_t deadline = mote__park_deadline(timeout_ns);
    short want = (short)(((events & MOTE_READABLE) ? POLLIN : 0) |
                         ((events & MOTE_WRITABLE) ? POLLOUT : 0));
    int dirs = ((events & MOTE_READABLE) ? PD_WANT_READ : 0) |
               ((events & MOTE_WRITABLE) ? PD_WANT_WRITE : 0);
    bool asked = false;
    for (;;) {
        /* A flag at 0 means "not ready": every call that clears it checks
         * the kernel right after, and an edge sets it again.  Only then can
         * the task wait without asking. */
        bool maybe = false;
        for (int d = 0; d < 2; d++)
            maybe |= (dirs & (1 << d)) && LOAD(&pd->ready[d], ACQUIRE);
        if (!maybe && !fdio_ask_now(deadline, &asked)) {
            if ((r = mote__netpoll_wait(fd, pd, seq, dirs, deadline)))
                return r;
            /* Woken by an edge: trust it, as poll(2) is trusted (the rare
             * stale edge is a spurious wake-up, which callers of poll-like
             * calls handle: the next read says EAGAIN / times out at 0). */
            int got = 0;
            if ((events & MOTE_READABLE) && LOAD(&pd->ready[PD_READ], ACQUIRE))
                got |= MOTE_READABLE;
            if ((events & MOTE_WRITABLE) && LOAD(&pd->ready[PD_WRITE], ACQUIRE))
                got |= MOTE_WRITABLE;
            if (got)
                return got;
        }
        /* Consume the readiness flags, then ask the kernel for the truth:
         * an edge after the question sets a flag again, and the wait below
         * sees it. */
        if (events & MOTE_READABLE)
            STORE(&pd->ready[PD_READ], 0, SEQ_CST);
        if (events & MOTE_WRITABLE)
            STORE(&pd->ready[PD_WRITE], 0, SEQ_CST);
        struct pollfd p = {.fd = fd, .events = want};
        if ((r = mote__netpoll_enter(pd, seq, fd))) {
            /* (closed: the number and its flags may be another
             * descriptor's by now, whose readiness we took) */
            if (events & MOTE_READABLE)
                mote__netpoll_rearm(pd, PD_READ);
            if (events & MOTE_WRITABLE)
                mote__netpoll_rearm(pd, PD_WRITE);
            return r;
        }
        int pr = poll(&p, 1, 0);
        mote__netpoll_leave(pd, fd);
        if (pr < 0 && errno != EINTR)
            return -errno;
        if (p.revents & POLLNVAL)
            return -EBADF;
        int got = 0;
        if (p.revents & (POLLIN | POLLHUP | POLLERR | POLLRDHUP))
            got |= events & MOTE_READABLE;
        if (p.revents & (POLLOUT | POLLHUP | POLLERR))
            got |= events & MOTE_WRITABLE;
        if (got) {
            /* the descriptor stays ready for the call that follows */
            if (got & MOTE_READABLE)
                mote__netpoll_rearm(pd, PD_READ);
            if (got & MOTE_WRITABLE)
                mote__netpoll_rearm(pd, PD_WRITE);
            return got;
        }
        if ((r = mote__netpoll_wait(fd, pd, seq, dirs, deadline)))
            return r;
    }
}

typedef struct file_io {
    pdesc *pd;
    uint32_t seq;
    int fd;
    void *buf;
    size_t n;
    bool write;
} file_io;

/* On the blocking pool: in flight there, where the call runs.  io is on
 * the task's stack, which is gone once its run ended (the call finishes on
 * its own): nothing of it is read after the system call. */
static intptr_t file_io_run(void *arg)
{
    file_io io = *(file_io *)arg;
    int r = mote__netpoll_enter(io.pd, io.seq, io.fd);
    if (r)
        return r;
    ssize_t k = io.write ? write(io.fd, io.buf, io.n) : read(io.fd, io.buf, io.n);
    mote__netpoll_leave(io.pd, io.fd);
    return k >= 0 ? k : -errno;
}

static ssize_t file_io_offload(pdesc *pd, uint32_t seq, int fd, void *buf, size_t n,
                               bool write)
{
    file_io io = {pd, seq, fd, buf, n, write};
    return (ssize_t)mote_offload(file_io_run, &io);
}

/* What mote_read and mote_write check first; then fd's registration. */
static int fdio_stream_begin(int fd, const void *buf, size_t n, pdesc **pd, uint32_t *seq)
{
    int r = fdio_check(fd);
    if (r)
        return r;
    if (!buf && n)
        return -EFAULT;
    return mote__netpoll_get(fd, NULL, NULL, pd, seq);
}

ssize_t mote_read(int fd, void *buf, size_t n, int64_t timeout_ns)
{
    pdesc *pd;
    uint32_t seq;
    int r = fdio_stream_begin(fd, buf, n, &pd, &seq);
    if (r)
        return r;
    if (pd->kind == PD_FILE)
        return file_io_offload(pd, seq, fd, buf, n, false);
    if (n == 0) { /* as read(2): nothing to wait for (a datagram is dropped) */
        ssize_t k = fdio_read_once(pd, seq, fd, buf, 0);
        return k >= 0 || errno == EAGAIN ? 0 : -errno;
    }
    int64_t deadline = mote__park_deadline(timeout_ns);
    bool asked = false;
    for (;;) {
        if (XCHG(&pd->ready[PD_READ], 0, ACQUIRE) || fdio_ask_now(deadline, &asked)) {
            ssize_t k = fdio_read_once(pd, seq, fd, buf, n);
            if (k >= 0) {
                /* A short read of a TCP stream took all there was: the
                 * next read waits for an edge without trying.  Otherwise
                 * more may be there, or (`stops`) an EOF, an error or
                 * the data behind an urgent mark that the edge which
                 * brought this data also reported. */
                if ((size_t)k == n || pd->kind != PD_STREAM || k == 0 ||
                    LOAD(&pd->stops, RELAXED))
                    mote__netpoll_rearm(pd, PD_READ);
                return k;
            }
            if (errno == EINTR) {
                mote__netpoll_rearm(pd, PD_READ);
                continue;
            }
            if (errno != EAGAIN) { /* errors persist: the next call sees it */
                int e = errno;
                mote__netpoll_rearm(pd, PD_READ);
                return -e;
            }
        }
        if ((r = mote__netpoll_wait(fd, pd, seq, PD_WANT_READ, deadline)))
            return r;
    }
}

/* Writes to a pipe: a SIGPIPE it raised is pending (workers block it);
 * take it, so it is not delivered later. */
static void fdio_eat_sigpipe(void)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    struct timespec zero = {0, 0};
    sigtimedwait(&set, NULL, &zero);
}

/* One write, in flight for mote_close, as fdio_read_once. */
static ssize_t fdio_write_once(pdesc *pd, uint32_t seq, int fd, const char *p, size_t n)
{
    int r = mote__netpoll_enter(pd, seq, fd);
    if (r) {
        errno = -r;
        return -1;
    }
    ssize_t k;
    if (fdio_is_socket(pd)) {
        k = send(fd, p, n, MSG_NOSIGNAL);
    } else {
        k = write(fd, p, n);
        if (k < 0 && errno == EPIPE) {
            fdio_eat_sigpipe();
            errno = EPIPE;
        }
    }
    mote__netpoll_leave(pd, fd);
    return k;
}

ssize_t mote_write(int fd, const void *buf, size_t n, int64_t timeout_ns)
{
    pdesc *pd;
    uint32_t seq;
    int r = fdio_stream_begin(fd, buf, n, &pd, &seq);
    if (r)
        return r;
    if (pd->kind == PD_FILE) {
        size_t done = 0;
        while (done < n) {
            ssize_t k = file_io_offload(pd, seq, fd, (char *)buf + done, n - done, true);
            if (k <= 0)
                return done ? (ssize_t)done : k ? k : -EIO;
            done += (size_t)k;
        }
        return (ssize_t)n;
    }
    if (n == 0 && pd->kind != PD_SOCKET) { /* an empty datagram waits for room */
        ssize_t k = fdio_write_once(pd, seq, fd, buf, 0);
        return k >= 0 || errno == EAGAIN ? 0 : -errno;
    }
    int64_t deadline = mote__park_deadline(timeout_ns);
    const char *p = buf;
    size_t done = 0;
    /* A call tries once whatever the flag says, and once more at its
     * deadline: a TCP socket's room comes back without an edge (EPOLLOUT
     * waits for a third of the buffer), so the flag, cleared by a short
     * write, can miss room that a write would take (timed writes failed
     * while send(2) took 300 KB more). */
    bool first = true, last = false;
    do {
        bool flag = XCHG(&pd->ready[PD_WRITE], 0, ACQUIRE);
        if (flag || first || last) {
            first = false;
            ssize_t k = fdio_write_once(pd, seq, fd, p + done, n - done);
            if (k >= 0) {
                done += (size_t)k;
                if (done == n) { /* room may be left: keep it ready */
                    mote__netpoll_rearm(pd, PD_WRITE);
                    break;
                }
                if (pd->kind != PD_STREAM && pd->kind != PD_PIPE)
                    mote__netpoll_rearm(pd, PD_WRITE);
                if (last)
                    break;
                continue; /* a short write: the buffer is full, wait */
            }
            if (errno == EINTR) {
                mote__netpoll_rearm(pd, PD_WRITE);
                continue;
            }
            if (errno != EAGAIN) {
                int e = errno;
                mote__netpoll_rearm(pd, PD_WRITE);
                return done ? (ssize_t)done : -e;
            }
            if (last)
                return done ? (ssize_t)done : -ETIMEDOUT;
        }
        if ((r = mote__netpoll_wait(fd, pd, seq, PD_WANT_WRITE, deadline))) {
            if (r != -ETIMEDOUT || deadline == 0)
                return done ? (ssize_t)done : r;
            last = true;
        }
    } while (done < n);
    return (ssize_t)done;
}

int mote_accept(int lfd, struct sockaddr *addr, socklen_t *addrlen, int64_t timeout_ns)
{
    int r = fdio_check(lfd);
    if (r)
        return r;
    if (addr && !addrlen)
        return -EFAULT;
    pdesc *pd;
    uint32_t seq;
    if ((r = mote__netpoll_get(lfd, NULL, NULL, &pd, &seq)))
        return r;
    int64_t deadline = mote__park_deadline(timeout_ns);
    bool asked = false;
    for (;;) {
        if (XCHG(&pd->ready[PD_READ], 0, ACQUIRE) || fdio_ask_now(deadline, &asked)) {
            if ((r = mote__netpoll_enter(pd, seq, lfd))) {
                mote__netpoll_rearm(pd, PD_READ); /* as in mote_wait_fd */
                return r;
            }
            int fd = accept4(lfd, addr, addrlen, SOCK_NONBLOCK | SOCK_CLOEXEC);
            mote__netpoll_leave(pd, lfd);
            if (fd >= 0) {
                mote__netpoll_fresh(fd);
                /* more connections may be queued */
                mote__netpoll_rearm(pd, PD_READ);
                return fd;
            }
            switch (errno) {
            case EAGAIN: break;
            case EINTR:
            case ECONNABORTED: /* the peer gave up already: take the next */
                mote__netpoll_rearm(pd, PD_READ);
                continue;
            default:
                /* EMFILE & co.: the condition may pass; stay ready */
                mote__netpoll_rearm(pd, PD_READ);
                return -errno;
            }
        }
        if ((r = mote__netpoll_wait(lfd, pd, seq, PD_WANT_READ, deadline)))
            return r;
    }
}

/* A connection under way, once writable: 0 connected, -errno failed, 1 not
 * yet (a spurious edge). */
static int connect_outcome(int fd)
{
    int err = 0;
    socklen_t el = sizeof err;
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0)
        return -errno;
    if (err)
        return -err;
    /* writable and no error: connected (a spurious edge shows ENOTCONN
     * from getpeername) */
    struct sockaddr_storage peer;
    socklen_t pl = sizeof peer;
    if (getpeername(fd, (struct sockaddr *)&peer, &pl) == 0)
        return 0;
    return errno == ENOTCONN ? 1 : -errno;
}

/* connect(2), through mote__netpoll_get's `first` when the call registers
 * fd: a socket not yet connecting shows the poller a hang-up, which a
 * registration before the connect let it take for "readable, and reads
 * have stopped" (mote_wait_fd said readable on a quarter of the new
 * connections; every short read after it woke all readers). */
typedef struct connect_call {
    const struct sockaddr *addr;
    socklen_t len;
    bool done;
    int rc, err;
} connect_call;

static void connect_now(int fd, void *arg)
{
    connect_call *c = arg;
    c->rc = connect(fd, c->addr, c->len);
    c->err = errno;
    c->done = true;
}

int mote_connect(int fd, const struct sockaddr *addr, socklen_t len, int64_t timeout_ns)
{
    int r = fdio_check(fd);
    if (r)
        return r;
    if (!addr)
        return -EFAULT;
    pdesc *pd;
    uint32_t seq;
    connect_call cc = {addr, len, false, 0, 0};
    if ((r = mote__netpoll_get(fd, connect_now, &cc, &pd, &seq)))
        return r;
    if (!cc.done) { /* registered before */
        if ((r = mote__netpoll_enter(pd, seq, fd)))
            return r;
        STORE(&pd->ready[PD_WRITE], 0, RELAXED);
        connect_now(fd, &cc);
        mote__netpoll_leave(pd, fd);
    }
    if (cc.rc == 0) {
        mote__netpoll_rearm(pd, PD_WRITE);
        return 0;
    }
    if (cc.err != EINPROGRESS && cc.err != EINTR) {
        /* no connection under way, so no edge will come: as it was */
        mote__netpoll_rearm(pd, PD_WRITE);
        return -cc.err;
    }
    int64_t deadline = mote__park_deadline(timeout_ns);
    for (;;) {
        r = mote__netpoll_wait(fd, pd, seq, PD_WANT_WRITE, deadline);
        if (r)
            return r;
        if ((r = mote__netpoll_enter(pd, seq, fd)))
            return r;
        /* cleared before the look: an edge after it sets the flag again */
        STORE(&pd->ready[PD_WRITE], 0, SEQ_CST);
        r = connect_outcome(fd);
        mote__netpoll_leave(pd, fd);
        if (r <= 0) { /* done: the writes that follow find it ready */
            mote__netpoll_rearm(pd, PD_WRITE);
            return r;
        }
    }
}

int mote_close(int fd)
{
    if (fd < 0 || mote__os_fd_is_own(fd)) /* (a stale number of the program's) */
        return -EBADF;
    return mote__netpoll_close(fd);
}
