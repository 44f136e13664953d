/*
 * echo_server.c - a TCP echo server on mote's netpoller: one task per
 * connection, written as plain blocking code.  Every mote_* I/O call parks
 * only its task; the worker thread runs the others meanwhile.
 *
 *   mote_echo_server [port]     listens on 127.0.0.1:port (default 0: the
 *                               kernel picks one); prints the address
 *
 * bench/net/ benchmarks it against bench/net/echo.go, which does the same
 * with one goroutine per connection and a buffer of the same size.
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "mote.h"

enum { BUF_SIZE = 16384 };

/* Echoes what has arrived until the socket has nothing more for now:
 * true then, false once the connection is over.  The buffer lives in this
 * frame only, so it exists while data flows and is gone while the task
 * waits (noinline keeps it out of serve_conn's frame). */
static __attribute__((noinline)) bool echo_available(int fd)
{
    char buf[BUF_SIZE];
    for (;;) {
        /* Timeout 0 never waits: nothing there is -ETIMEDOUT (-EAGAIN is
         * taken too). */
        ssize_t n = mote_read(fd, buf, sizeof buf, 0);
        if (n == -ETIMEDOUT || n == -EAGAIN)
            return true; /* drained */
        if (n == 0)      /* the peer closed its side */
            return false;
        if (n < 0) {
            /* A reset is how many clients hang up: not worth a line. */
            if (n != -ECONNRESET)
                fprintf(stderr, "echo: read: %s\n", mote_strerror((int)n));
            return false;
        }
        /* mote_write writes all n bytes unless the connection fails. */
        ssize_t w = mote_write(fd, buf, (size_t)n, -1);
        if (w != n) {
            if (w < 0 && w != -EPIPE && w != -ECONNRESET)
                fprintf(stderr, "echo: write: %s\n", mote_strerror((int)w));
            return false;
        }
        /* A short read took all there was: wait for more without asking
         * again (what comes meanwhile makes the wait return at once). */
        if ((size_t)n < sizeof buf)
            return true;
    }
}

static void serve_conn(void *arg)
{
    int fd = (int)(intptr_t)arg;
    /* Wait for input here, not inside mote_read under the 16 KiB buffer:
     * a task parked this shallow keeps one stack page once mote trims it,
     * which is what an idle connection then costs.  (A plain
     * mote_read(fd, buf, n, -1) loop works too, at two pages or more.) */
    while (echo_available(fd) && mote_wait_fd(fd, MOTE_READABLE, -1) >= 0)
        ;
    mote_close(fd);
}

/* Out of descriptors or memory: the pending connection stays queued in the
 * kernel, so wait (5 ms, doubling up to 1 s, as Go's net/http does) and
 * try again rather than spin on the same error or give up. */
static int accept_is_transient(int err)
{
    return err == -EMFILE || err == -ENFILE || err == -ENOBUFS || err == -ENOMEM;
}

/* Returns only when accepting fails for good. */
static void accept_loop(int lfd)
{
    int64_t backoff = 0;
    for (;;) {
        int fd = mote_accept(lfd, NULL, NULL, -1);
        if (fd < 0) {
            if (fd == -ECONNABORTED || fd == -EINTR)
                continue; /* that connection is gone; the next one may not be */
            if (!accept_is_transient(fd)) {
                fprintf(stderr, "echo: accept: %s\n", mote_strerror(fd));
                return;
            }
            backoff = backoff ? backoff * 2 : 5000000;
            if (backoff > 1000000000)
                backoff = 1000000000;
            fprintf(stderr, "echo: accept: %s; retrying in %lld ms\n", mote_strerror(fd),
                    (long long)(backoff / 1000000));
            mote_sleep(backoff);
            continue;
        }
        backoff = 0;
        /* Like Go's default: a small reply goes out now, not after the ACK
         * of the previous one (Nagle). */
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        int r = mote_go(serve_conn, (void *)(intptr_t)fd);
        if (r != 0) { /* no memory for a task: refuse this connection */
            fprintf(stderr, "echo: spawn: %s\n", mote_strerror(r));
            mote_close(fd);
        }
    }
}

/* The first task: listens, then accepts until that fails.  When it
 * returns, mote_run returns and the connections' tasks are discarded. */
static void main_task(void *arg)
{
    const char *port = arg;
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%s", port);
    int lfd = mote_listen_tcp(addr, 4096);
    if (lfd < 0) {
        fprintf(stderr, "echo: listen %s: %s\n", addr, mote_strerror(lfd));
        return;
    }
    struct sockaddr_in sa;
    socklen_t len = sizeof sa;
    if (getsockname(lfd, (struct sockaddr *)&sa, &len) == 0)
        printf("listening on 127.0.0.1:%d\n", ntohs(sa.sin_port));
    fflush(stdout); /* a script may be waiting for that line */
    accept_loop(lfd);
    mote_close(lfd);
}

int main(int argc, char **argv)
{
    const char *port = argc > 1 ? argv[1] : "0";
    int r = mote_run(main_task, (void *)port);
    if (r)
        fprintf(stderr, "echo: mote_run: %s\n", mote_strerror(r));
    return 1; /* a server only returns when it failed */
}
