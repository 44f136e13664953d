/*
 * test_net.c - task-aware I/O on loopback: EOF, resets, timeouts on every
 * call, mote_close while others wait, descriptor reuse, half-close, EPIPE
 * without SIGPIPE, pipes and eventfd through mote_wait_fd, regular files on
 * the blocking pool, name resolution and slow offloaded calls that do not
 * stall a lone worker, thousands of connections, accept storms, and runs
 * ending with descriptors still registered.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "mote.h"

#define MS 1000000LL

static uint64_t metric(const char *name)
{
    uint64_t v = 0;
    CHECK_EQ(mote_metric(name, &v), 0);
    return v;
}

/* A listener on an ephemeral loopback port; its "127.0.0.1:port". */
static int listen_any(char *addr, size_t len)
{
    int lfd = mote_listen_tcp("127.0.0.1:0", 128);
    CHECK(lfd >= 0);
    struct sockaddr_in sa;
    socklen_t sl = sizeof sa;
    CHECK_EQ(getsockname(lfd, (struct sockaddr *)&sa, &sl), 0);
    snprintf(addr, len, "127.0.0.1:%d", ntohs(sa.sin_port));
    return lfd;
}

/* A connected pair: *a dialed, *b accepted. */
static void tcp_pair(int *a, int *b)
{
    char addr[64];
    int lfd = listen_any(addr, sizeof addr);
    *a = mote_dial_tcp(addr, 2000 * MS);
    CHECK(*a >= 0);
    *b = mote_accept(lfd, NULL, NULL, 2000 * MS);
    CHECK(*b >= 0);
    CHECK_EQ(mote_close(lfd), 0);
}

TEST_TASK(read_sees_eof_after_the_peer_closes)
{
    int a, b;
    tcp_pair(&a, &b);
    CHECK_EQ(mote_write(a, "hello", 5, -1), 5);
    CHECK_EQ(mote_close(a), 0);
    char buf[16];
    CHECK_EQ(mote_read(b, buf, sizeof buf, -1), 5);
    CHECK(!memcmp(buf, "hello", 5));
    CHECK_EQ(mote_read(b, buf, sizeof buf, -1), 0);
    CHECK_EQ(mote_read(b, buf, sizeof buf, -1), 0); /* EOF stays */
    CHECK_EQ(mote_close(b), 0);
}

TEST_TASK(read_sees_a_reset)
{
    int a, b;
    tcp_pair(&a, &b);
    struct linger lg = {1, 0}; /* close with RST */
    CHECK_EQ(setsockopt(a, SOL_SOCKET, SO_LINGER, &lg, sizeof lg), 0);
    CHECK_EQ(mote_close(a), 0);
    char buf[16];
    ssize_t r = mote_read(b, buf, sizeof buf, 1000 * MS);
    CHECK_EQ(r, -ECONNRESET);
    CHECK_EQ(mote_close(b), 0);
}

TEST_TASK(every_call_times_out)
{
    int a, b;
    tcp_pair(&a, &b);
    char buf[4096];
    int64_t t0 = mote_now();
    CHECK_EQ(mote_read(b, buf, sizeof buf, 30 * MS), -ETIMEDOUT);
    CHECK(mote_now() - t0 >= 30 * MS);
    CHECK_EQ(mote_read(b, buf, sizeof buf, 0), -ETIMEDOUT); /* 0: never waits */
    CHECK_EQ(mote_wait_fd(b, MOTE_READABLE, 20 * MS), -ETIMEDOUT);
    /* a peer that does not read: the write fills the buffers and stops */
    static char big[1 << 20];
    ssize_t total = 0, w;
    while ((w = mote_write(a, big, sizeof big, 50 * MS)) == (ssize_t)sizeof big)
        total += w;
    CHECK(w == -ETIMEDOUT || (w > 0 && w < (ssize_t)sizeof big));
    CHECK(total > 0 || w > 0); /* it wrote what the buffers took first */
    char addr[64];
    int lfd = listen_any(addr, sizeof addr);
    t0 = mote_now();
    CHECK_EQ(mote_accept(lfd, NULL, NULL, 20 * MS), -ETIMEDOUT);
    CHECK(mote_now() - t0 >= 20 * MS);
    CHECK_EQ(mote_accept(lfd, NULL, NULL, 0), -ETIMEDOUT);
    CHECK_EQ(mote_close(lfd), 0);
    CHECK_EQ(mote_close(a), 0);
    CHECK_EQ(mote_close(b), 0);
}

TEST_TASK(connect_times_out_against_a_full_backlog)
{
    /* backlog 0: the kernel queues one connection, then drops SYNs */
    int lfd = mote_listen_tcp("127.0.0.1:0", 1);
    CHECK(lfd >= 0);
    CHECK_EQ(listen(lfd, 0), 0);
    struct sockaddr_in sa;
    socklen_t sl = sizeof sa;
    CHECK_EQ(getsockname(lfd, (struct sockaddr *)&sa, &sl), 0);
    int fds[8], nf = 0, timed_out = 0;
    for (; nf < 8 && !timed_out; nf++) {
        fds[nf] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        CHECK(fds[nf] >= 0);
        int r = mote_connect(fds[nf], (struct sockaddr *)&sa, sl, 50 * MS);
        CHECK(r == 0 || r == -ETIMEDOUT);
        timed_out = r == -ETIMEDOUT;
    }
    CHECK(timed_out);
    for (int i = 0; i < nf; i++)
        mote_close(fds[i]);
    mote_close(lfd);
}

static int close_target;
static atomic_int close_result;

static void blocked_reader(void *arg)
{
    (void)arg;
    char c;
    atomic_store(&close_result, (int)mote_read(close_target, &c, 1, -1));
}

TEST_TASK(close_wakes_every_waiter_with_ecanceled)
{
    int a, b;
    tcp_pair(&a, &b);
    close_target = b;
    atomic_store(&close_result, 1);
    CHECK_EQ(mote_go(blocked_reader, NULL), 0);
    while (metric("/net/waiting:tasks") < 1)
        mote_sleep(MS);
    CHECK_EQ(mote_close(b), 0);
    while (atomic_load(&close_result) == 1)
        mote_sleep(MS);
    CHECK_EQ(atomic_load(&close_result), -ECANCELED);
    CHECK_EQ(mote_close(a), 0);
}

/* mote_close from a plain thread while a task reads in a loop: the task
 * may be anywhere between its system call and its park.  It must come back
 * with -ECANCELED or -EBADF, never stay parked on the forgotten
 * registration (where a new descriptor's edges would later wake it: a
 * hostile review saw 6 hangs in 3,000 rounds, and the stale reader take a
 * later socket's byte). */
static int race_rfd, race_wfd;
static atomic_long race_result;

static void race_reader(void *arg)
{
    (void)arg;
    char c;
    ssize_t n;
    while ((n = mote_read(race_rfd, &c, 1, -1)) > 0)
        ;
    atomic_store(&race_result, n);
}

static void *race_closer(void *arg)
{
    unsigned seed = (unsigned)(uintptr_t)arg;
    for (int i = rand_r(&seed) % 20; i > 0; i--) {
        CHECK_EQ(write(race_wfd, "r", 1), 1);
        for (volatile int k = rand_r(&seed) % 2000; k > 0; k--)
            ;
    }
    CHECK_EQ(mote_close(race_rfd), 0);
    return NULL;
}

TEST_TASK(close_from_a_plain_thread_races_no_reader_into_a_stale_wait)
{
    for (int round = 0; round < 1000; round++) {
        int sv[2];
        CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv),
                 0);
        race_rfd = sv[0];
        race_wfd = sv[1];
        atomic_store(&race_result, 1);
        CHECK_EQ(mote_go(race_reader, NULL), 0);
        if (round % 2)
            mote_sleep(50 * 1000);
        pthread_t th;
        CHECK_EQ(pthread_create(&th, NULL, race_closer, (void *)(uintptr_t)(round + 1)),
                 0);
        CHECK_EQ(pthread_join(th, NULL), 0);
        int64_t t0 = mote_now();
        while (atomic_load(&race_result) == 1 && mote_now() - t0 < 5000 * MS)
            mote_sleep(MS);
        long r = atomic_load(&race_result);
        if (r != -ECANCELED && r != -EBADF)
            fprintf(stderr, "round %d: the reader returned %ld (1: still parked)\n",
                    round, r);
        CHECK(r == -ECANCELED || r == -EBADF);
        CHECK_EQ(close(race_wfd), 0);
    }
}

TEST_TASK(a_reused_descriptor_number_wakes_no_stale_waiter)
{
    int a, b;
    tcp_pair(&a, &b);
    /* b becomes readable (an edge is queued for it), then is closed */
    CHECK_EQ(mote_write(a, "x", 1, -1), 1);
    mote_sleep(5 * MS);
    int old = b;
    CHECK_EQ(mote_close(b), 0);
    int c, d;
    tcp_pair(&c, &d); /* the lowest free numbers: likely b's again */
    int fresh = c == old ? c : d == old ? d : -1;
    if (fresh >= 0) {
        char ch;
        /* nothing to read on the new descriptor: the old edge must not
         * make it look ready */
        CHECK_EQ(mote_read(fresh, &ch, 1, 30 * MS), -ETIMEDOUT);
    }
    char ch;
    CHECK_EQ(mote_write(c, "y", 1, -1), 1);
    CHECK_EQ(mote_read(d, &ch, 1, 1000 * MS), 1);
    CHECK_EQ(ch, 'y');
    mote_close(a);
    mote_close(c);
    mote_close(d);
}

TEST_TASK(half_close_delivers_the_reply)
{
    int a, b;
    tcp_pair(&a, &b);
    CHECK_EQ(mote_write(a, "ping", 4, -1), 4);
    CHECK_EQ(shutdown(a, SHUT_WR), 0);
    char buf[8];
    CHECK_EQ(mote_read(b, buf, sizeof buf, -1), 4);
    CHECK_EQ(mote_read(b, buf, sizeof buf, -1), 0); /* the client's EOF */
    CHECK_EQ(mote_write(b, "pong", 4, -1), 4);
    CHECK_EQ(mote_close(b), 0);
    CHECK_EQ(mote_read(a, buf, sizeof buf, -1), 4);
    CHECK(!memcmp(buf, "pong", 4));
    CHECK_EQ(mote_read(a, buf, sizeof buf, -1), 0);
    mote_close(a);
}

/* Data and the peer's FIN reported by one edge: the short read that takes
 * the data must not hide the EOF behind it (CI hung here when a poller
 * harvested both at once). */
TEST_TASK(eof_that_arrived_with_the_data_is_not_lost)
{
    char addr[64];
    int lfd = listen_any(addr, sizeof addr);
    int a = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK(a >= 0);
    struct sockaddr_in sa;
    socklen_t sl = sizeof sa;
    CHECK_EQ(getsockname(lfd, (struct sockaddr *)&sa, &sl), 0);
    CHECK_EQ(connect(a, (struct sockaddr *)&sa, sl), 0);
    /* b not yet known to mote: data and FIN are both queued when it
     * registers, so its first edge carries both */
    int b = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
    CHECK(b >= 0);
    CHECK_EQ(send(a, "ping", 4, MSG_NOSIGNAL), 4);
    CHECK_EQ(shutdown(a, SHUT_WR), 0);
    CHECK_EQ(mote_wait_fd(b, MOTE_READABLE, 2000 * MS), MOTE_READABLE);
    mote_sleep(20 * MS); /* an idle worker harvests that edge now */
    char buf[8];
    CHECK_EQ(mote_read(b, buf, sizeof buf, 2000 * MS), 4);
    CHECK_EQ(mote_read(b, buf, sizeof buf, 2000 * MS), 0);
    CHECK_EQ(mote_read(b, buf, sizeof buf, 0), 0); /* EOF stays */
    CHECK_EQ(mote_close(b), 0);
    close(a);
    CHECK_EQ(mote_close(lfd), 0);
}

/* A descriptor closed with close(2) instead of mote_close (a misuse
 * mote_close's contract warns about): the number mote gets back from the
 * kernel for its next socket must not inherit the old registration, which
 * epoll dropped with the old file, or that socket's waiters would never
 * wake. */
/* Urgent data: a read stops at its mark with the rest queued behind, and
 * no edge to come for it. */
TEST_TASK(a_read_stopped_at_an_urgent_mark_is_not_the_end)
{
    int a, b;
    tcp_pair(&a, &b);
    char buf[16];
    CHECK_EQ(mote_read(b, buf, sizeof buf, 0), -ETIMEDOUT); /* not ready */
    CHECK_EQ(send(a, "abc", 3, 0), 3);
    CHECK_EQ(send(a, "X", 1, MSG_OOB), 1);
    CHECK_EQ(send(a, "def", 3, 0), 3);
    mote_sleep(20 * MS); /* the edges are harvested */
    size_t got = 0;
    while (got < 6) { /* "abc" stops at the mark; then "def" (X is out of band) */
        ssize_t k = mote_read(b, buf + got, sizeof buf - got, 2000 * MS);
        CHECK(k > 0);
        got += (size_t)k;
    }
    CHECK(!memcmp(buf, "abcdef", 6));
    CHECK_EQ(mote_wait_fd(b, MOTE_READABLE, 0), -ETIMEDOUT);
    CHECK_EQ(mote_close(a), 0);
    CHECK_EQ(mote_close(b), 0);
}

/* A connect that fails at once started nothing, so no edge will come: the
 * descriptor stays writable for mote. */
TEST_TASK(a_connect_that_fails_at_once_leaves_the_socket_writable)
{
    int a, b;
    tcp_pair(&a, &b);
    struct sockaddr_in sa;
    socklen_t sl = sizeof sa;
    CHECK_EQ(getpeername(b, (struct sockaddr *)&sa, &sl), 0);
    CHECK_EQ(mote_connect(b, (struct sockaddr *)&sa, sl, 1000 * MS), -EISCONN);
    CHECK_EQ(mote_write(b, "ok", 2, 1000 * MS), 2);
    CHECK_EQ(mote_wait_fd(b, MOTE_WRITABLE, 1000 * MS), MOTE_WRITABLE);
    char buf[4];
    CHECK_EQ(mote_read(a, buf, sizeof buf, 1000 * MS), 2);
    /* zero-length calls never wait, whatever the state */
    CHECK_EQ(mote_read(a, buf, 0, 2000 * MS), 0);
    static char big[1 << 20];
    while (mote_write(b, big, sizeof big, 50 * MS) == (ssize_t)sizeof big)
        ;                                          /* a's buffers full */
    CHECK_EQ(mote_write(b, big, 0, 2000 * MS), 0); /* before: -ETIMEDOUT */
    CHECK_EQ(mote_close(a), 0);
    CHECK_EQ(mote_close(b), 0);
}

TEST_TASK(a_number_closed_behind_motes_back_works_when_mote_reuses_it)
{
    int a, b;
    tcp_pair(&a, &b);
    char buf[8];
    CHECK_EQ(mote_write(a, "x", 1, -1), 1);
    CHECK_EQ(mote_read(b, buf, sizeof buf, 2000 * MS), 1); /* short: not ready */
    CHECK_EQ(close(b), 0);
    char addr[64];
    int lfd = listen_any(addr, sizeof addr); /* these take the lowest free */
    int c = mote_dial_tcp(addr, 2000 * MS);
    CHECK(c >= 0);
    int d = mote_accept(lfd, NULL, NULL, 2000 * MS);
    CHECK(d >= 0);
    if (lfd != b && c != b && d != b) /* other threads may take numbers */
        fprintf(stderr, "note: %d was not reused: nothing tested\n", b);
    CHECK_EQ(mote_write(c, "yz", 2, -1), 2);
    CHECK_EQ(mote_read(d, buf, sizeof buf, 2000 * MS), 2);
    CHECK_EQ(mote_accept(lfd, NULL, NULL, 0), -ETIMEDOUT); /* none queued */
    CHECK_EQ(mote_close(d), 0);
    CHECK_EQ(mote_close(c), 0);
    CHECK_EQ(mote_close(lfd), 0);
    CHECK_EQ(mote_close(a), 0);
}

/* A Unix stream socket's read stops after a message that carried
 * descriptors, with more bytes queued behind it and no edge to come: a
 * short read there does not mean the socket is drained. */
TEST_TASK(a_unix_stream_read_cut_short_by_passed_descriptors_is_not_the_end)
{
    int s[2];
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, s), 0);
    char buf[8];
    CHECK_EQ(mote_read(s[1], buf, sizeof buf, 0), -ETIMEDOUT); /* registered */
    int pass = s[0];
    char ctl[CMSG_SPACE(sizeof pass)];
    memset(ctl, 0, sizeof ctl);
    struct iovec iov = {.iov_base = "ab", .iov_len = 2};
    struct msghdr m = {.msg_iov = &iov,
                       .msg_iovlen = 1,
                       .msg_control = ctl,
                       .msg_controllen = sizeof ctl};
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof pass);
    memcpy(CMSG_DATA(c), &pass, sizeof pass);
    CHECK_EQ(sendmsg(s[0], &m, 0), 2);
    CHECK_EQ(send(s[0], "cd", 2, 0), 2);
    mote_sleep(20 * MS); /* one edge for both, harvested now */
    CHECK_EQ(mote_read(s[1], buf, sizeof buf, 2000 * MS), 2); /* "ab": its fd dropped */
    CHECK(!memcmp(buf, "ab", 2));
    CHECK_EQ(mote_read(s[1], buf, sizeof buf, 2000 * MS), 2);
    CHECK(!memcmp(buf, "cd", 2));
    CHECK_EQ(mote_close(s[1]), 0);
    CHECK_EQ(close(s[0]), 0);
}

/* A zero-length write to a full Unix stream socket (a byte stream, as
 * TCP is) returns at once; only an empty datagram waits for room. */
TEST_TASK(a_zero_length_write_to_a_full_unix_stream_does_not_wait)
{
    int s[2];
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, s), 0);
    static char big[1 << 16];
    while (mote_write(s[0], big, sizeof big, 50 * MS) == (ssize_t)sizeof big)
        ; /* full */
    int64_t t0 = mote_now();
    CHECK_EQ(mote_write(s[0], big, 0, 2000 * MS), 0); /* before: -ETIMEDOUT */
    CHECK(mote_now() - t0 < 1000 * MS);
    CHECK_EQ(mote_close(s[0]), 0);
    CHECK_EQ(close(s[1]), 0);
}

TEST_TASK(writing_to_a_closed_peer_is_epipe_not_sigpipe)
{
    CHECK(signal(SIGPIPE, SIG_DFL) != SIG_ERR); /* SIGPIPE would kill us */
    int a, b;
    tcp_pair(&a, &b);
    CHECK_EQ(mote_close(b), 0);
    ssize_t r = 0;
    for (int i = 0; i < 100 && r >= 0; i++) { /* the first may still go out */
        r = mote_write(a, "data", 4, 1000 * MS);
        mote_sleep(MS);
    }
    CHECK(r == -EPIPE || r == -ECONNRESET);
    mote_close(a);
    int p[2];
    CHECK_EQ(pipe(p), 0);
    close(p[0]);
    CHECK_EQ(mote_write(p[1], "x", 1, -1), -EPIPE);
    CHECK_EQ(mote_write(p[1], "x", 1, -1), -EPIPE);
    mote_close(p[1]);
}

static int pipe_w, efd;

static void delayed_writers(void *arg)
{
    (void)arg;
    mote_sleep(10 * MS);
    CHECK_EQ(mote_write(pipe_w, "z", 1, -1), 1);
    mote_sleep(10 * MS);
    uint64_t one = 1;
    CHECK_EQ(write(efd, &one, sizeof one), (ssize_t)sizeof one);
}

TEST_TASK(pipes_and_eventfds_wait_in_the_poller)
{
    int p[2];
    CHECK_EQ(pipe(p), 0);
    pipe_w = p[1];
    efd = eventfd(0, EFD_CLOEXEC);
    CHECK(efd >= 0);
    CHECK_EQ(mote_go(delayed_writers, NULL), 0);
    CHECK_EQ(mote_wait_fd(p[0], MOTE_READABLE, 2000 * MS), MOTE_READABLE);
    char c;
    CHECK_EQ(mote_read(p[0], &c, 1, 0), 1);
    CHECK_EQ(c, 'z');
    CHECK_EQ(mote_wait_fd(efd, MOTE_READABLE, 2000 * MS), MOTE_READABLE);
    uint64_t v;
    CHECK_EQ(mote_read(efd, &v, sizeof v, 0), (ssize_t)sizeof v);
    CHECK_EQ(v, 1);
    /* a drained descriptor waits again */
    CHECK_EQ(mote_wait_fd(p[0], MOTE_READABLE, 10 * MS), -ETIMEDOUT);
    CHECK_EQ(mote_wait_fd(p[1], MOTE_WRITABLE, 0), MOTE_WRITABLE);
    CHECK_EQ(mote_wait_fd(p[0], 0, 0), -EINVAL);
    CHECK_EQ(mote_wait_fd(p[0], 8, 0), -EINVAL);
    mote_close(p[0]);
    mote_close(p[1]);
    mote_close(efd);
}

/* ---- the blocking pool ---------------------------------------------------- */

static atomic_long ticks;
static atomic_int ticking;

static void ticker(void *arg)
{
    (void)arg;
    while (atomic_load(&ticking)) {
        atomic_fetch_add(&ticks, 1);
        mote_sleep(MS);
    }
}

static intptr_t slow_call(void *arg)
{
    usleep(200 * 1000);
    errno = 42;
    return (intptr_t)arg + 1;
}

TEST_TASK(a_slow_offloaded_call_does_not_stall_a_lone_worker)
{
    atomic_store(&ticks, 0);
    atomic_store(&ticking, 1);
    CHECK_EQ(mote_go(ticker, NULL), 0);
    errno = 0;
    CHECK_EQ(mote_offload(slow_call, (void *)41), 42);
    CHECK_EQ(errno, 42); /* carried back */
    long n = atomic_load(&ticks);
    atomic_store(&ticking, 0);
    /* 200 ms at 1 ms a tick: the ticker ran meanwhile (generously) */
    CHECK(n >= 20);
    CHECK(metric("/blocking/threads:threads") >= 1);
}

TEST_TASK(regular_files_are_read_on_the_pool)
{
    char path[] = "/tmp/mote-test-file-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    unlink(path);
    static char data[100000];
    for (size_t i = 0; i < sizeof data; i++)
        data[i] = (char)(i * 7);
    CHECK_EQ(mote_write(fd, data, sizeof data, -1), (ssize_t)sizeof data);
    CHECK_EQ(lseek(fd, 0, SEEK_SET), 0);
    static char back[100000];
    size_t got = 0;
    ssize_t r;
    while ((r = mote_read(fd, back + got, sizeof back - got, -1)) > 0)
        got += (size_t)r;
    CHECK_EQ(r, 0);
    CHECK_EQ(got, sizeof data);
    CHECK(!memcmp(data, back, sizeof data));
    CHECK_EQ(mote_wait_fd(fd, MOTE_READABLE | MOTE_WRITABLE, -1),
             MOTE_READABLE | MOTE_WRITABLE);
    mote_close(fd);
}

/* mote_close frees the number only once no system call of mote's is
 * running on the descriptor: else a descriptor opened meanwhile under the
 * number gets the call.  A big write to a regular file (on the blocking
 * pool, tens of ms) is the call: closed while the file grows, the number
 * stays open until the write is whole, then closes by itself.  The close
 * returns at once: it waits for no call. */
#define IW_LEN (64L << 20)
static char *iw_buf;
static int iw_fd;
static atomic_long iw_result;
static atomic_int iw_done;

static void inflight_writer(void *arg)
{
    (void)arg;
    atomic_store(&iw_result, (long)mote_write(iw_fd, iw_buf, IW_LEN, -1));
    atomic_store(&iw_done, 1);
}

/* Whether fd still names what it named at fd_watch(fd): asked of /proc,
 * not of the descriptor (the close may run on another thread right now,
 * and ThreadSanitizer rightly calls an fcntl then a race), and by name:
 * once closed, the number may be taken at once by a descriptor the
 * runtime opens (the allocator's lazy pidfd kept it: a test waited 30 s
 * for a close that had happened). */
static char fd_watched[256][256];

static void fd_link(int fd, char *link, size_t n)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    ssize_t k = readlink(path, link, n - 1);
    link[k > 0 ? k : 0] = 0;
}

static void fd_watch(int fd)
{
    CHECK(fd >= 0 && fd < 256);
    fd_link(fd, fd_watched[fd], sizeof fd_watched[fd]);
    CHECK(fd_watched[fd][0] != 0);
}

static bool fd_is_open(int fd)
{
    char link[256];
    fd_link(fd, link, sizeof link);
    return link[0] && !strcmp(link, fd_watched[fd]);
}

static off_t file_size(int fd)
{
    struct stat st;
    CHECK_EQ(fstat(fd, &st), 0);
    return st.st_size;
}

/* Starts a large write to a fresh temporary file on the blocking pool (iw_fd)
 * and waits until its first bytes are there, or it ended.  Returns a dup of
 * the file (open past iw_fd's close) and *before, its size then. */
static int inflight_write_start(const char *tmpl, off_t *before)
{
    char path[64];
    snprintf(path, sizeof path, "%s", tmpl);
    CHECK((iw_fd = mkstemp(path)) >= 0);
    unlink(path);
    int other = dup(iw_fd);
    CHECK(other >= 0);
    atomic_store(&iw_done, 0);
    CHECK_EQ(mote_go(inflight_writer, NULL), 0);
    while ((*before = file_size(other)) == 0 && !atomic_load(&iw_done))
        mote_yield();
    fd_watch(iw_fd);
    return other;
}

TEST_TASK(a_close_frees_the_number_after_the_calls_in_flight)
{
    CHECK((iw_buf = malloc(IW_LEN)) != NULL);
    memset(iw_buf, 'w', IW_LEN);
    int raced = 0;
    for (int attempt = 0; attempt < 20 && !raced; attempt++) {
        off_t before;
        int other = inflight_write_start("/tmp/mote-test-inflight-XXXXXX", &before);
        CHECK_EQ(mote_close(iw_fd), 0);
        bool open_after_close = fd_is_open(iw_fd);
        bool wrote_meanwhile = !atomic_load(&iw_done) && file_size(other) < IW_LEN;
        CHECK_EQ(mote_close(iw_fd), -EBADF); /* closed, or a close under way */
        while (!atomic_load(&iw_done))
            mote_sleep(MS);
        long r = atomic_load(&iw_result);
        if (before > 0 && wrote_meanwhile) { /* closed while it wrote */
            raced++;
            CHECK(open_after_close); /* the number was not free yet */
            CHECK_EQ(r, IW_LEN);
        }
        CHECK_EQ(file_size(other), (off_t)(r < 0 ? 0 : r)); /* whatever came first */
        CHECK(!fd_is_open(iw_fd));                          /* closed by now */
        close(other);
    }
    free(iw_buf);
    if (!raced)
        TEST_SKIP("no close came while the write ran (20 tries)");
}

/* Two tasks write to one socket.  One edge wakes both; the first takes the
 * readiness and writes, the second finds it taken and parks again; the
 * first, done with room left, must hand the readiness on, or the second
 * sleeps with room there and no edge to come (it timed out: 7 runs in 120
 * of a reviewer's program). */
enum { TW_LEN = 1 << 20 };
static int tw_fd;
static char *tw_buf;
static atomic_long tw_result[2];
static atomic_int tw_done;

static void twin_writer(void *arg)
{
    intptr_t i = (intptr_t)arg;
    atomic_store(&tw_result[i], (long)mote_write(tw_fd, tw_buf, TW_LEN, 5000 * MS));
    atomic_fetch_add(&tw_done, 1);
}

TEST_TASK(two_writers_on_one_socket_both_finish)
{
    char addr[64];
    int l = listen_any(addr, sizeof addr);
    CHECK((tw_buf = calloc(1, TW_LEN)) != NULL);
    static char sink[1 << 16];
    for (int it = 0; it < TEST_SCALE(60, 6); it++) {
        atomic_store(&tw_done, 0);
        tw_fd = mote_dial_tcp(addr, 2000 * MS);
        CHECK(tw_fd >= 0);
        int s = mote_accept(l, NULL, NULL, 2000 * MS);
        CHECK(s >= 0);
        CHECK_EQ(mote_go(twin_writer, (void *)0), 0);
        CHECK_EQ(mote_go(twin_writer, (void *)1), 0);
        long got = 0;
        while (got < 2L * TW_LEN) {
            ssize_t r = mote_read(s, sink, sizeof sink, 6000 * MS);
            if (r <= 0)
                break;
            got += r;
        }
        while (atomic_load(&tw_done) < 2)
            mote_sleep(MS);
        CHECK_EQ(atomic_load(&tw_result[0]), TW_LEN);
        CHECK_EQ(atomic_load(&tw_result[1]), TW_LEN);
        CHECK_EQ(got, 2L * TW_LEN);
        mote_close(tw_fd);
        mote_close(s);
    }
    free(tw_buf);
    mote_close(l);
}

/* A TCP socket's room comes back without an edge: the kernel signals
 * EPOLLOUT only once a third of the buffer is free.  A write that finds the
 * flag clear (the last one was short) still tries: it timed out after 50
 * ms on every connection whose peer had stopped reading, while send(2)
 * took 300 KB more and the same write with a 0 timeout went through. */
TEST_TASK(a_write_tries_the_room_that_came_back_without_an_edge)
{
    char addr[64];
    int l = listen_any(addr, sizeof addr);
    static char big[1 << 20];
    for (int i = 0; i < 5; i++) {
        int c = mote_dial_tcp(addr, 2000 * MS);
        CHECK(c >= 0);
        int s = mote_accept(l, NULL, NULL, 2000 * MS);
        CHECK(s >= 0);
        while (mote_write(c, big, sizeof big, 20 * MS) == (ssize_t)sizeof big)
            ; /* until a write comes back short: the peer never reads */
        ssize_t r = mote_write(c, big, 100, 50 * MS);
        if (r == -ETIMEDOUT) /* then there was no room, as send(2) says now */
            CHECK_EQ(send(c, big, 100, MSG_DONTWAIT), -1);
        else
            CHECK_EQ(r, 100);
        mote_close(c);
        mote_close(s);
    }
    mote_close(l);
}

/* A new connection that receives nothing is not readable: the socket's
 * hang-up before its connect (seen when mote_connect registered it first)
 * made waiters say READABLE on about one connection in four. */
static atomic_int fresh_readable;
static mote_wg fresh_wg = MOTE_WG_INIT;

static void fresh_waiter(void *arg)
{
    int r = mote_wait_fd((int)(intptr_t)arg, MOTE_READABLE, 20 * MS);
    if (r != -ETIMEDOUT)
        atomic_fetch_add(&fresh_readable, 1);
    mote_wg_done(&fresh_wg);
}

TEST_TASK(a_new_connection_that_receives_nothing_is_not_readable)
{
    char addr[64];
    int l = listen_any(addr, sizeof addr);
    for (int i = 0; i < TEST_SCALE(100, 20); i++) {
        int c = mote_dial_tcp(addr, 2000 * MS);
        CHECK(c >= 0);
        int s = mote_accept(l, NULL, NULL, 2000 * MS);
        CHECK(s >= 0);
        CHECK_EQ(mote_wg_add(&fresh_wg, 2), 0);
        for (int k = 0; k < 2; k++)
            CHECK_EQ(mote_go(fresh_waiter, (void *)(intptr_t)c), 0);
        CHECK_EQ(mote_wg_wait(&fresh_wg), 0);
        mote_close(c);
        mote_close(s);
    }
    CHECK_EQ(atomic_load(&fresh_readable), 0);
    mote_close(l);
}

/* A 0 timeout asks the kernel: data sent since the last poll is there to
 * read (-ETIMEDOUT every time with one worker: the flag said "not ready"
 * until a worker polled). */
TEST_TASK(a_zero_timeout_finds_what_came_since_the_last_poll)
{
    int sv[2];
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
    char b;
    for (int i = 0; i < 100; i++) {
        CHECK_EQ(mote_read(sv[0], &b, 1, 0), -ETIMEDOUT); /* nothing yet */
        CHECK_EQ(mote_wait_fd(sv[0], MOTE_READABLE, 0), -ETIMEDOUT);
        CHECK_EQ(write(sv[1], "x", 1), 1); /* no scheduling point since */
        if (i % 2)
            CHECK_EQ(mote_wait_fd(sv[0], MOTE_READABLE, 0), MOTE_READABLE);
        CHECK_EQ(mote_read(sv[0], &b, 1, 0), 1);
    }
    char addr[64];
    int l = listen_any(addr, sizeof addr);
    CHECK_EQ(mote_accept(l, NULL, NULL, 0), -ETIMEDOUT);
    int c = socket(AF_INET, SOCK_STREAM, 0); /* a plain blocking connect */
    struct sockaddr_in sa = {.sin_family = AF_INET};
    socklen_t sl = sizeof sa;
    CHECK_EQ(getsockname(l, (struct sockaddr *)&sa, &sl), 0);
    CHECK_EQ(connect(c, (struct sockaddr *)&sa, sl), 0);
    int a = mote_accept(l, NULL, NULL, 0);
    CHECK(a >= 0);
    mote_close(a);
    close(c);
    mote_close(l);
    mote_close(sv[0]);
    close(sv[1]);
}

/* A fork while a close waits for a call in flight: the child, where that
 * call's thread does not exist, does not keep the descriptor open (it did,
 * for its whole life). */
TEST_TASK(a_fork_child_does_not_keep_a_descriptor_whose_close_was_deferred)
{
    CHECK((iw_buf = malloc(IW_LEN)) != NULL);
    memset(iw_buf, 'w', IW_LEN);
    int raced = 0;
    for (int attempt = 0; attempt < 20 && !raced; attempt++) {
        off_t before;
        int other = inflight_write_start("/tmp/mote-test-forkclose-XXXXXX", &before);
        CHECK_EQ(mote_close(iw_fd), 0);
        fflush(stdout);
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) /* the number is closed, or was never taken again */
            _exit(fcntl(iw_fd, F_GETFD) == -1 && errno == EBADF ? 0 : 1);
        bool in_flight = !atomic_load(&iw_done); /* still, after the fork */
        int st = 0;
        CHECK_EQ(waitpid(pid, &st, 0), pid);
        CHECK(WIFEXITED(st));
        if (in_flight) {
            raced++;
            CHECK_EQ(WEXITSTATUS(st), 0);
        }
        while (!atomic_load(&iw_done))
            mote_sleep(MS);
        CHECK(!fd_is_open(iw_fd));
        close(other);
    }
    free(iw_buf);
    if (!raced)
        TEST_SKIP("no fork came while the write ran (20 tries)");
}

TEST_TASK(names_resolve_off_the_workers)
{
    char addr[64];
    int lfd = listen_any(addr, sizeof addr);
    const char *port = strrchr(addr, ':') + 1;
    char byname[80];
    snprintf(byname, sizeof byname, "localhost:%s", port);
    int a = mote_dial_tcp(byname, 5000 * MS);
    CHECK(a >= 0);
    int b = mote_accept(lfd, NULL, NULL, 2000 * MS);
    CHECK(b >= 0);
    CHECK_EQ(mote_dial_tcp("no-such-host.invalid:80", 5000 * MS) < 0, 1);
    mote_close(a);
    mote_close(b);
    mote_close(lfd);
}

/* An address needs no lookup: dialing one does not wait behind the
 * blocking pool's other calls (it waited for a 3 s call, past its own
 * 100 ms timeout). */
static intptr_t busy_pool_call(void *arg)
{
    (void)arg;
    usleep(1500 * 1000);
    return 0;
}

static void busy_pool_holder(void *arg)
{
    (void)arg;
    CHECK_EQ(mote_offload(busy_pool_call, NULL), 0);
}

/* A zero timeout never waits but still connects: it gave -ETIMEDOUT
 * without trying.  (A loopback connect mostly completes in the call; one
 * the kernel defers is -ETIMEDOUT, hence "most of 20".) */
TEST_TASK(a_dial_with_a_zero_timeout_tries_without_waiting)
{
    char addr[64];
    int lfd = listen_any(addr, sizeof addr);
    int ok = 0;
    for (int i = 0; i < 20; i++) {
        int64_t t0 = mote_now();
        int fd = mote_dial_tcp(addr, 0);
        CHECK(fd >= 0 || fd == -ETIMEDOUT);
        CHECK(mote_now() - t0 < 1000 * MS); /* no wait (generous: a busy machine) */
        if (fd >= 0) {
            ok++;
            CHECK_EQ(mote_close(fd), 0);
        }
        for (int a; (a = mote_accept(lfd, NULL, NULL, 0)) >= 0;)
            CHECK_EQ(mote_close(a), 0);
    }
    CHECK(ok >= 10);
    CHECK_EQ(mote_close(lfd), 0);
}

static void dial_beside_a_busy_pool(void *arg)
{
    (void)arg;
    char addr[64];
    int lfd = listen_any(addr, sizeof addr);
    CHECK_EQ(mote_go(busy_pool_holder, NULL), 0);
    while (metric("/blocking/threads:threads") < 1)
        mote_sleep(MS);
    mote_sleep(10 * MS); /* the call runs on the pool's one thread */
    int64_t t0 = mote_now();
    int fd = mote_dial_tcp(addr, 500 * MS);
    CHECK(fd >= 0);
    CHECK(mote_now() - t0 < 500 * MS);
    int lfd2 = mote_listen_tcp("127.0.0.1:0", 4); /* no lookup either */
    CHECK(lfd2 >= 0);
    CHECK(mote_now() - t0 < 500 * MS);
    CHECK_EQ(mote_close(lfd2), 0);
    CHECK_EQ(mote_close(fd), 0);
    CHECK_EQ(mote_close(lfd), 0);
}

TEST(dialing_an_address_does_not_wait_for_the_blocking_pool)
{
    CHECK_EQ(test_run_env("MOTE_BLOCKING_THREADS", "1", dial_beside_a_busy_pool, NULL),
             0);
}

/* A fork child's run uses the blocking pool, which the parent used just
 * before (its pool thread still idle, so counted): the child has no such
 * thread and must start its own (it waited for good). */
static intptr_t pool_answer(void *arg)
{
    (void)arg;
    return 42;
}

static void use_the_pool(void *arg)
{
    intptr_t *r = arg;
    *r = mote_offload(pool_answer, NULL);
}

TEST(a_fork_child_has_a_blocking_pool_of_its_own)
{
    intptr_t r = 0;
    CHECK_EQ(mote_run(use_the_pool, &r), 0);
    CHECK_EQ(r, 42);
    CHECK(metric("/blocking/threads:threads") >= 1); /* idle, not gone */
    fflush(stdout);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        alarm(20); /* a hang kills the child */
        intptr_t cr = 0;
        int rr = mote_run(use_the_pool, &cr);
        _exit(rr == 0 && cr == 42 ? 0 : 1);
    }
    int st = 0;
    CHECK_EQ(waitpid(pid, &st, 0), pid);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

TEST(misuse_is_an_error)
{
    char buf[4];
    CHECK_EQ(mote_read(0, buf, 1, 0), -EPERM); /* outside a task */
    CHECK_EQ(mote_write(1, buf, 1, 0), -EPERM);
    CHECK_EQ(mote_wait_fd(0, MOTE_READABLE, 0), -EPERM);
    CHECK_EQ(mote_accept(0, NULL, NULL, 0), -EPERM);
    CHECK_EQ(mote_dial_tcp("127.0.0.1:1", 0), -EPERM);
    CHECK_EQ(mote_offload(slow_call, NULL), -EPERM);
    CHECK_EQ(mote_listen_tcp(NULL, 1), -EINVAL);
    CHECK_EQ(mote_listen_tcp("127.0.0.1", 1), -EINVAL);
    CHECK_EQ(mote_listen_tcp("127.0.0.1:99999", 1), -EINVAL);
    CHECK_EQ(mote_listen_tcp("::1:80", 1), -EINVAL); /* needs brackets */
    CHECK_EQ(mote_listen_tcp("127.0.0.1:-1", 1), -EINVAL);
    int l6 = mote_listen_tcp("[::1]:0", 4); /* fine, or no IPv6 here */
    CHECK(l6 >= 0 || l6 == -EADDRNOTAVAIL || l6 == -EAFNOSUPPORT);
    if (l6 >= 0)
        CHECK_EQ(mote_close(l6), 0);
    CHECK_EQ(mote_close(-1), -EBADF);
}

static void misuse_in_task(void *arg)
{
    (void)arg;
    char buf[4];
    CHECK_EQ(mote_read(-1, buf, 1, 0), -EBADF);
    CHECK_EQ(mote_read(100000, buf, 1, 0), -EBADF);
    CHECK_EQ(mote_write(-5, buf, 1, 0), -EBADF);
    CHECK_EQ(mote_read(0, NULL, 1, 0), -EFAULT);
    CHECK_EQ(mote_dial_tcp("localhost", 0), -EINVAL);
    CHECK_EQ(mote_dial_tcp(":80", 0), -EINVAL);
    CHECK_EQ(mote_offload(NULL, NULL), -EINVAL);
    /* mote's own descriptors, its epoll instance, eventfds, userfaultfd
     * and pidfd (a number the program closed may be one of them now): not
     * the program's to wait on, read or close */
    int pp[2];
    CHECK_EQ(pipe2(pp, O_CLOEXEC), 0);
    CHECK_EQ(mote_read(pp[0], buf, 0, 0), 0); /* the poller exists now */
    CHECK_EQ(mote_close(pp[0]), 0);
    close(pp[1]);
    int found = 0;
    for (int fd = 0; fd < 1024; fd++) {
        char path[64], link[64];
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
        ssize_t n = readlink(path, link, sizeof link - 1);
        if (n <= 0)
            continue;
        link[n] = 0;
        if (strcmp(link, "anon_inode:[eventpoll]") &&
            strcmp(link, "anon_inode:[eventfd]") &&
            strcmp(link, "anon_inode:[userfaultfd]") &&
            strcmp(link, "anon_inode:[pidfd]"))
            continue;
        found++;
        CHECK_EQ(mote_read(fd, buf, 1, 0), -EBADF);
        CHECK_EQ(mote_wait_fd(fd, MOTE_READABLE, 0), -EBADF);
        CHECK_EQ(mote_close(fd), -EBADF);
        CHECK(fcntl(fd, F_GETFD) >= 0); /* still open */
    }
    CHECK(found >= 2); /* the poller's epoll instance and eventfd at least */
}

TEST(misuse_inside_a_task_is_an_error) { CHECK_EQ(mote_run(misuse_in_task, NULL), 0); }

/* ---- a run ends with descriptors registered and tasks waiting on them ---- */

static int keep_a, keep_b;

static void waits_forever(void *arg)
{
    char c;
    mote_read((int)(intptr_t)arg, &c, 1, -1);
    CHECK(0);
}

static void leave_waiters(void *arg)
{
    (void)arg;
    tcp_pair(&keep_a, &keep_b);
    CHECK_EQ(mote_go(waits_forever, (void *)(intptr_t)keep_b), 0);
    CHECK_EQ(mote_go(waits_forever, (void *)(intptr_t)keep_a), 0);
    while (metric("/net/waiting:tasks") < 2)
        mote_sleep(MS);
}

static void reuse_them(void *arg)
{
    (void)arg;
    char c;
    CHECK_EQ(mote_write(keep_a, "k", 1, -1), 1);
    CHECK_EQ(mote_read(keep_b, &c, 1, 1000 * MS), 1);
    CHECK_EQ(c, 'k');
    mote_close(keep_a);
    mote_close(keep_b);
}

TEST(a_run_may_end_with_descriptors_waited_on)
{
    CHECK_EQ(mote_run(leave_waiters, NULL), 0);
    CHECK_EQ(metric("/net/waiting:tasks"), 0);
    CHECK_EQ(mote_run(reuse_them, NULL), 0);
}

/* ---- many connections ------------------------------------------------------ */

static int conns_wanted(int want)
{
    struct rlimit rl;
    CHECK_EQ(getrlimit(RLIMIT_NOFILE, &rl), 0);
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
    getrlimit(RLIMIT_NOFILE, &rl);
    int room = (int)rl.rlim_cur - 64;
    return want < room ? want : room;
}

static void echo_conn(void *arg)
{
    int fd = (int)(intptr_t)arg;
    char buf[512];
    ssize_t n;
    while ((n = mote_read(fd, buf, sizeof buf, -1)) > 0)
        if (mote_write(fd, buf, (size_t)n, -1) != n)
            break;
    mote_close(fd);
}

static int echo_lfd;
static void echo_server(void *arg)
{
    (void)arg;
    for (;;) {
        int fd = mote_accept(echo_lfd, NULL, NULL, -1);
        if (fd < 0)
            return;
        CHECK_EQ(mote_go(echo_conn, (void *)(intptr_t)fd), 0);
    }
}

static char echo_addr[64];
static int nclients;
static mote_wg clients_done = MOTE_WG_INIT;
static atomic_int clients_ok;

static void client(void *arg)
{
    int id = (int)(intptr_t)arg;
    int fd = mote_dial_tcp(echo_addr, 20000 * MS);
    CHECK(fd >= 0);
    char msg[64], back[64];
    int len = snprintf(msg, sizeof msg, "client %d says hello", id);
    for (int round = 0; round < 3; round++) {
        CHECK_EQ(mote_write(fd, msg, (size_t)len, -1), len);
        int got = 0;
        while (got < len) {
            ssize_t r = mote_read(fd, back + got, sizeof back - (size_t)got, 20000 * MS);
            CHECK(r > 0);
            got += (int)r;
        }
        CHECK(!memcmp(msg, back, (size_t)len));
    }
    mote_close(fd);
    atomic_fetch_add(&clients_ok, 1);
    mote_wg_done(&clients_done);
}

static void many_clients(void *arg)
{
    (void)arg;
    atomic_store(&clients_ok, 0);
    CHECK_EQ(mote_wg_add(&clients_done, nclients), 0);
    for (int i = 0; i < nclients; i++)
        CHECK_EQ(mote_go(client, (void *)(intptr_t)i), 0);
    CHECK_EQ(mote_wg_wait(&clients_done), 0);
    CHECK_EQ(atomic_load(&clients_ok), nclients);
}

/* The echo server in a child process, listening at echo_addr (each side
 * then needs one descriptor per connection): its pid. */
static pid_t echo_server_child(void)
{
    echo_lfd = mote_listen_tcp("127.0.0.1:0", 4096);
    CHECK(echo_lfd >= 0);
    struct sockaddr_in sa;
    socklen_t sl = sizeof sa;
    CHECK_EQ(getsockname(echo_lfd, (struct sockaddr *)&sa, &sl), 0);
    snprintf(echo_addr, sizeof echo_addr, "127.0.0.1:%d", ntohs(sa.sin_port));
    fflush(stdout);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* a failed check must not leave it */
        mote_run(echo_server, NULL);
        _exit(0);
    }
    close(echo_lfd);
    return pid;
}

/* The server in a child process, the clients here. */
static void echo_many(int want)
{
    nclients = conns_wanted(want);
    pid_t pid = echo_server_child();
    CHECK_EQ(mote_run(many_clients, NULL), 0);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    printf("%d concurrent connections echoed\n", nclients);
}

TEST(ten_thousand_connections_through_an_echo_server)
{
    echo_many(TEST_SCALE(10000, 10));
}

TEST(an_accept_storm)
{
    setenv("MOTE_WORKERS", "2", 1);
    echo_many(TEST_SCALE(3000, 5));
    unsetenv("MOTE_WORKERS");
}

/* CPU seconds the process pid has used (utime + stime). */
static double cpu_of(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    CHECK(f != NULL);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *p = strrchr(buf, ')');
    CHECK(p != NULL);
    unsigned long ut = 0, st = 0;
    /* fields after the name: state, then 10 more, then utime and stime */
    CHECK(sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut,
                 &st) == 2);
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

static int idle_conns;
static void open_idle_conns(void *arg)
{
    pid_t server = (pid_t)(intptr_t)arg;
    int *fds = malloc(sizeof(int) * (size_t)idle_conns);
    CHECK(fds != NULL);
    for (int i = 0; i < idle_conns; i++) {
        fds[i] = mote_dial_tcp(echo_addr, 20000 * MS);
        CHECK(fds[i] >= 0);
    }
    /* one round trip on the last: the server has accepted them all */
    char c = 'x';
    CHECK_EQ(mote_write(fds[idle_conns - 1], &c, 1, -1), 1);
    CHECK_EQ(mote_read(fds[idle_conns - 1], &c, 1, 20000 * MS), 1);
    /* The server trims its tasks' stacks, then (MOTE_STACK_FREEZE, 1 s)
     * freezes them, which costs CPU once; after that, nothing.  On a
     * loaded machine that takes a while: look at successive seconds. */
    double used = 1;
    for (int s = 0; s < 30 && used >= 0.05; s++) {
        double c0 = cpu_of(server);
        mote_sleep(1000 * MS);
        used = cpu_of(server) - c0;
        printf("server CPU in second %d with %d idle connections: %.3f s\n", s + 1,
               idle_conns, used);
    }
    CHECK(used < 0.05);
    for (int i = 0; i < idle_conns; i++)
        mote_close(fds[i]);
    free(fds);
}

TEST(an_idle_server_uses_no_cpu)
{
    idle_conns = conns_wanted(TEST_SCALE(8000, 10));
    pid_t pid = echo_server_child();
    CHECK_EQ(mote_run(open_idle_conns, (void *)(intptr_t)pid), 0);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

/* ---- a busy worker still polls ---------------------------------------- */

static atomic_int spinning, spins;
static int busy_sv[2];
enum { BUSY_ROUNDS = 200 };
static int64_t busy_rtt[BUSY_ROUNDS];
static atomic_int busy_done;

static void spinner(void *arg)
{
    (void)arg;
    while (atomic_load(&spinning)) {
        for (volatile int i = 0; i < 2000; i++)
            ;
        atomic_fetch_add(&spins, 1);
        mote_yield();
    }
}

static void busy_echo(void *arg)
{
    (void)arg;
    char c;
    for (int i = 0; i < BUSY_ROUNDS; i++) {
        CHECK_EQ(mote_read(busy_sv[0], &c, 1, -1), 1);
        CHECK_EQ(mote_write(busy_sv[0], &c, 1, -1), 1);
    }
}

static void *busy_client(void *arg)
{
    (void)arg;
    char c = 'x';
    for (int i = 0; i < BUSY_ROUNDS; i++) {
        int64_t t0 = mote_now();
        CHECK_EQ(write(busy_sv[1], &c, 1), 1);
        CHECK_EQ(read(busy_sv[1], &c, 1), 1);
        busy_rtt[i] = mote_now() - t0;
    }
    atomic_store(&busy_done, 1);
    return NULL;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static void busy_main(void *arg)
{
    (void)arg;
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, busy_sv), 0);
    atomic_store(&spinning, 1);
    for (int i = 0; i < 4; i++)
        CHECK_EQ(mote_go(spinner, NULL), 0);
    CHECK_EQ(mote_go(busy_echo, NULL), 0);
    while (atomic_load(&spins) < 40) /* the spinners are running */
        mote_yield();
    int spins0 = atomic_load(&spins);
    pthread_t th;
    CHECK_EQ(pthread_create(&th, NULL, busy_client, NULL), 0);
    /* the lone worker never idles from here on: only its scheduling
     * points look at the poller */
    while (!atomic_load(&busy_done))
        mote_yield();
    atomic_store(&spinning, 0);
    pthread_join(th, NULL); /* done already: does not block */
    qsort(busy_rtt, BUSY_ROUNDS, sizeof *busy_rtt, cmp_i64);
    int64_t p50 = busy_rtt[BUSY_ROUNDS / 2], p99 = busy_rtt[BUSY_ROUNDS * 99 / 100];
    printf("round trip through a worker busy with 4 yielding tasks: p50 %lld us, p99 "
           "%lld us "
           "(%d spins)\n",
           (long long)(p50 / 1000), (long long)(p99 / 1000), atomic_load(&spins));
    CHECK(p50 <
          5 * MS); /* ~0.1-0.3 ms here; a worker that never polled would never answer */
    /* The spinners kept running beside the echo (how often depends on how
     * long the round trips took: under TSan as few as 150 spins in 200). */
    CHECK(atomic_load(&spins) > spins0);
    close(busy_sv[0]);
    close(busy_sv[1]);
}

TEST(a_busy_worker_still_polls_the_network)
{
    setenv("MOTE_WORKERS", "1", 1);
    CHECK_EQ(mote_run(busy_main, NULL), 0);
    unsetenv("MOTE_WORKERS");
}

/* A close(2) that lingers (SO_LINGER, unsent data the peer does not take)
 * runs on the blocking pool: the one worker keeps running its other tasks
 * (a 1 ms ticker was held for the whole linger time). */
static atomic_int lc_closing;
static atomic_llong lc_worst_gap;

static void lc_ticker(void *arg)
{
    (void)arg;
    int64_t last = mote_now();
    for (;;) {
        mote_sleep(MS);
        int64_t now = mote_now();
        int phase = atomic_load(&lc_closing);
        if (phase >= 1 && now - last > atomic_load(&lc_worst_gap))
            atomic_store(&lc_worst_gap, now - last);
        last = now;
        if (phase == 2)
            break;
    }
    atomic_store(&lc_closing, 3);
}

static void lingering_close_main(void *arg)
{
    (void)arg;
    char addr[64];
    int l = listen_any(addr, sizeof addr);
    int c = mote_dial_tcp(addr, 2000 * MS);
    CHECK(c >= 0);
    int s = mote_accept(l, NULL, NULL, 2000 * MS); /* never read */
    CHECK(s >= 0);
    static char junk[1 << 16];
    while (mote_write(c, junk, sizeof junk, 50 * MS) == (ssize_t)sizeof junk)
        ; /* both buffers full */
    struct linger lg = {.l_onoff = 1, .l_linger = 1};
    CHECK_EQ(setsockopt(c, SOL_SOCKET, SO_LINGER, &lg, sizeof lg), 0);
    CHECK_EQ(mote_go(lc_ticker, NULL), 0);
    mote_sleep(5 * MS);
    atomic_store(&lc_closing, 1);
    fd_watch(c);
    int64_t t0 = mote_now();
    CHECK_EQ(mote_close(c), 0); /* at once: the close lingers behind */
    int64_t took = mote_now() - t0;
    while (fd_is_open(c) && mote_now() - t0 < 10000 * MS)
        mote_sleep(MS);
    int64_t closed = mote_now() - t0;
    atomic_store(&lc_closing, 2);
    while (atomic_load(&lc_closing) != 3)
        mote_sleep(MS);
    printf(
        "close returned in %.1f ms, the socket closed after %.0f ms, the ticker's worst "
        "gap %.1f ms\n",
        took / 1e6, closed / 1e6, atomic_load(&lc_worst_gap) / 1e6);
    CHECK(!fd_is_open(c));
    CHECK(took < 500 * MS);
    CHECK(atomic_load(&lc_worst_gap) < 500 * MS); /* the linger is 1 s */
    /* the number is free for registrations again */
    int again = mote_dial_tcp(addr, 2000 * MS);
    CHECK(again >= 0);
    CHECK_EQ(mote_close(again), 0);
    mote_close(s);
    mote_close(l);
}

TEST(a_lingering_close_does_not_hold_its_worker)
{
    setenv("MOTE_WORKERS", "1", 1);
    CHECK_EQ(mote_run(lingering_close_main, NULL), 0);
    unsetenv("MOTE_WORKERS");
}

/* The run ends while the close lingers: it still happens, and the number
 * is usable in the next run (a version that closed on the blocking pool
 * dropped the queued close at the run's end, or left the number refused
 * for good: the next run's mote_close of it never returned). */
static int lr_fd;

static void linger_and_leave(void *arg)
{
    (void)arg;
    char addr[64];
    int l = listen_any(addr, sizeof addr);
    lr_fd = mote_dial_tcp(addr, 2000 * MS);
    CHECK(lr_fd >= 0);
    int s = mote_accept(l, NULL, NULL, 2000 * MS); /* never read */
    CHECK(s >= 0);
    static char junk[1 << 16];
    while (mote_write(lr_fd, junk, sizeof junk, 50 * MS) == (ssize_t)sizeof junk)
        ;
    struct linger lg = {.l_onoff = 1, .l_linger = 1};
    CHECK_EQ(setsockopt(lr_fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg), 0);
    fd_watch(lr_fd);
    CHECK_EQ(mote_close(lr_fd), 0);
    mote_close(l); /* s stays open: the peer never reads */
}

static void reuse_the_number(void *arg)
{
    (void)arg;
    int p[2];
    CHECK_EQ(pipe(p), 0);
    if (p[1] == lr_fd) { /* the pipe took the number: its write end elsewhere */
        p[1] = dup(p[1]);
        CHECK(p[1] >= 0);
    }
    int fd = p[0] == lr_fd ? p[0] : dup2(p[0], lr_fd); /* a new descriptor */
    CHECK_EQ(fd, lr_fd);
    char b;
    CHECK_EQ(mote_read(fd, &b, 1, 0), -ETIMEDOUT);
    CHECK_EQ(write(p[1], "r", 1), 1);
    CHECK_EQ(mote_read(fd, &b, 1, 2000 * MS), 1);
    CHECK_EQ(mote_close(fd), 0);
    if (p[0] != fd)
        close(p[0]);
    close(p[1]);
}

TEST(a_lingering_close_outlives_its_run)
{
    CHECK_EQ(mote_run(linger_and_leave, NULL), 0);
    for (int i = 0; i < 10000 && fd_is_open(lr_fd); i++)
        usleep(1000);
    CHECK(!fd_is_open(lr_fd));
    CHECK_EQ(mote_run(reuse_the_number, NULL), 0);
}

/* A descriptor mote made non-blocking is blocking again at the run's end
 * (a program's stdout, shared with other processes, stayed non-blocking,
 * and stdio dropped the program's writes after the run).  One the program
 * made non-blocking itself stays so; the next run registers them anew,
 * and a dup that shares a flag mote turned is never taken as blocking. */
static int nb_pipe[2], nb_own[2], nb_dup;

static bool nonblocking(int fd) { return fcntl(fd, F_GETFL) & O_NONBLOCK; }

static int nb_dup2, nb_file;

static void nb_use(void *arg)
{
    (void)arg;
    char b = 0;
    /* a dup registered after the one that set the flag, which is closed
     * before the run ends: the dup is made blocking again all the same */
    int p[2];
    CHECK_EQ(pipe(p), 0);
    CHECK((nb_dup2 = dup(p[1])) >= 0);
    CHECK_EQ(mote_write(p[1], "a", 1, -1), 1);
    CHECK_EQ(mote_write(nb_dup2, "b", 1, -1), 1);
    CHECK_EQ(mote_close(p[1]), 0);
    CHECK_EQ(mote_write(nb_dup2, "c", 1, -1), 1);
    /* in the second run p[0] may have the number of the first run's file:
     * a timed read of it must not be taken for a file's (it never ended) */
    for (int i = 0; i < 3; i++)
        CHECK_EQ(mote_read(p[0], &b, 1, 1000 * MS), 1);
    CHECK_EQ(mote_read(p[0], &b, 1, 20 * MS), -ETIMEDOUT);
    CHECK_EQ(mote_close(p[0]), 0);
    /* a file's registration goes too (its number may be a pipe's next) */
    CHECK((nb_file = open("/proc/self/stat", O_RDONLY | O_CLOEXEC)) >= 0);
    char st[16];
    CHECK(mote_read(nb_file, st, sizeof st, -1) > 0);
    CHECK_EQ(mote_write(nb_pipe[1], "x", 1, -1), 1);
    CHECK_EQ(mote_read(nb_pipe[0], &b, 1, -1), 1);
    CHECK(nonblocking(nb_pipe[0]) && nonblocking(nb_pipe[1]));
    CHECK_EQ(mote_read(nb_pipe[0], &b, 1, 10 * MS), -ETIMEDOUT); /* never blocks */
    CHECK_EQ(mote_write(nb_own[1], "y", 1, -1), 1);
    CHECK_EQ(mote_write(nb_dup, "z", 1, -1), 1); /* registered as non-blocking */
}

TEST(descriptors_are_blocking_again_after_mote_is_done_with_them)
{
    CHECK_EQ(pipe(nb_pipe), 0);
    CHECK_EQ(pipe2(nb_own, O_NONBLOCK), 0);
    for (int run = 0; run < 2; run++) {
        CHECK((nb_dup = dup(nb_pipe[1])) >= 0);
        CHECK_EQ(mote_run(nb_use, NULL), 0);
        CHECK(!nonblocking(nb_pipe[0]) && !nonblocking(nb_pipe[1]));
        CHECK(!nonblocking(nb_dup2));
        close(nb_dup2);
        close(nb_file); /* its number: a pipe's next, in the next run */
        CHECK(nonblocking(nb_own[1]));
        char b;
        CHECK(!nonblocking(nb_dup));
        CHECK_EQ(read(nb_pipe[0], &b, 1), 1); /* the z */
        close(nb_dup);
    }
    close(nb_pipe[0]);
    close(nb_pipe[1]);
    close(nb_own[0]);
    close(nb_own[1]);
}

/* ---- the close against calls in flight, across runs and threads ---- */

/* A run that ends while a file read runs on the blocking pool: the read
 * finishes on its own after the run, and what it leaves behind must not
 * outlive it (a version whose pool call read its arguments from the
 * task's stack after the call crashed here; one whose close waited for
 * the call left the number refused for good once the run ended). */
static int pr_fd;
static char *pr_buf;
#define PR_LEN (128L << 20)

static void pr_reader(void *arg)
{
    (void)arg;
    mote_read(pr_fd, pr_buf, PR_LEN, -1);
}

static void pr_run1(void *arg)
{
    (void)arg;
    CHECK_EQ(mote_go(pr_reader, NULL), 0);
    mote_sleep(2 * MS); /* the read is on the pool, or about to be */
}

static void pr_run2(void *arg)
{
    (void)arg;
    /* 0: closed now, or by the read when it ends */
    fd_watch(pr_fd);
    CHECK_EQ(mote_close(pr_fd), 0);
    int64_t t0 = mote_now();
    while (fd_is_open(pr_fd) && mote_now() - t0 < 30000 * MS)
        mote_sleep(MS);
    CHECK(!fd_is_open(pr_fd));
    /* the number works for the next descriptor */
    int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    CHECK(fd >= 0);
    char c;
    CHECK_EQ(mote_read(fd, &c, 1, 1000 * MS), 0);
    CHECK_EQ(mote_close(fd), 0);
}

TEST(a_run_that_ends_during_a_pool_read_leaves_nothing_behind)
{
    CHECK((pr_buf = malloc(PR_LEN)) != NULL);
    CHECK((pr_fd = open("/dev/zero", O_RDONLY | O_CLOEXEC)) >= 0);
    CHECK_EQ(mote_run(pr_run1, NULL), 0);
    CHECK_EQ(mote_run(pr_run2, NULL), 0);
    usleep(100 * 1000); /* (a crash on the pool thread would come now) */
    free(pr_buf);
}

/* Tasks and a plain thread make descriptors, use them and close them, in
 * a loop: nobody touches another's descriptors, so every call succeeds.
 * The window between one close(2) and the forgetting of its registration
 * once made a new descriptor under the number fail (-ECANCELED, or a
 * wait that never woke). */
#define CH_TASKS TEST_SCALE(8, 2)
#define CH_ITERS TEST_SCALE(400, 4)
static mote_wg ch_wg = MOTE_WG_INIT;
static atomic_int ch_bad, ch_stop;

static void ch_note(const char *what, long r)
{
    if (atomic_fetch_add(&ch_bad, 1) < 10)
        fprintf(stderr, "churn: %s = %ld\n", what, r);
}

static void ch_pair(int w, int r)
{
    char x = 'x', y;
    long k;
    if ((k = mote_write(w, &x, 1, 5000 * MS)) != 1)
        ch_note("write", k);
    if ((k = mote_read(r, &y, 1, 5000 * MS)) != 1)
        ch_note("read", k);
    if ((k = mote_read(r, &y, 1, MS / 10)) != -ETIMEDOUT)
        ch_note("read of nothing", k);
}

static void ch_task(void *arg)
{
    int id = (int)(intptr_t)arg;
    for (int i = 0; i < CH_ITERS; i++) {
        int sv[2], a = -1, b = -1;
        switch ((i + id) % 3) {
        case 0:
            CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
            a = sv[0], b = sv[1];
            ch_pair(a, b);
            break;
        case 1:
            CHECK_EQ(pipe2(sv, O_CLOEXEC), 0);
            a = sv[1], b = sv[0];
            ch_pair(a, b);
            break;
        default: {
            a = eventfd(0, EFD_CLOEXEC);
            CHECK(a >= 0);
            uint64_t v = 1;
            long k;
            if ((k = mote_write(a, &v, 8, 5000 * MS)) != 8)
                ch_note("eventfd write", k);
            if ((k = mote_read(a, &v, 8, 5000 * MS)) != 8)
                ch_note("eventfd read", k);
        }
        }
        long r;
        if ((r = mote_close(a)) != 0)
            ch_note("close", r);
        if (b >= 0 && (r = mote_close(b)) != 0)
            ch_note("close", r);
        if ((i & 31) == 0)
            mote_yield();
    }
    CHECK_EQ(mote_wg_done(&ch_wg), 0);
}

static void *ch_plain(void *arg)
{
    (void)arg;
    while (!atomic_load(&ch_stop)) {
        int sv[2];
        CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
        long r;
        if ((r = mote_close(sv[0])) != 0 || (r = mote_close(sv[1])) != 0)
            ch_note("plain close", r);
    }
    return NULL;
}

TEST_TASK(descriptor_churn_across_tasks_and_threads_fails_no_call)
{
    atomic_store(&ch_bad, 0);
    atomic_store(&ch_stop, 0);
    pthread_t th;
    CHECK_EQ(pthread_create(&th, NULL, ch_plain, NULL), 0);
    CHECK_EQ(mote_wg_add(&ch_wg, CH_TASKS), 0);
    for (int i = 0; i < CH_TASKS; i++)
        CHECK_EQ(mote_go(ch_task, (void *)(intptr_t)i), 0);
    CHECK_EQ(mote_wg_wait(&ch_wg), 0);
    atomic_store(&ch_stop, 1);
    CHECK_EQ(pthread_join(th, NULL), 0);
    CHECK_EQ(atomic_load(&ch_bad), 0);
}

TEST_SETUP { unsetenv("MOTE_WORKERS"); }

TEST_MAIN()
