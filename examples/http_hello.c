/*
 * http_hello.c - an HTTP/1.1 server on mote's netpoller that answers every
 * request with "Hello, World!\n".  One task per connection, written as
 * plain blocking code: keep-alive, pipelining (all requests that one read
 * brought in are answered with one write), Connection: close, HTTP/1.0
 * (closes unless asked for keep-alive), HEAD, request bodies with
 * Content-Length read and discarded.  Requests are parsed strictly by
 * http_parse.c: a malformed or oversized one gets 400, a chunked or other
 * transfer-coded one 501, and the connection closes.
 *
 *   mote_http_hello [port]      listens on 127.0.0.1:port (default 0: the
 *                               kernel picks one); prints the address
 *
 * bench/net/ benchmarks it with wrk against Go's net/http
 * (bench/net/http.go).
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "http_parse.h"
#include "mote.h"

enum {
    IN_SIZE = 2 * HTTP_MAX_HEAD, /* a partial head never fills it */
    OUT_SIZE = 16384,
    RESP_MAX = 256, /* the longest response we build */
};
/* A connection silent this long between requests is closed, and so is one
 * whose request (head and body) takes longer than this from its first
 * byte: without them a client could hold a task forever, by sending
 * nothing or one byte a day. */
static const int64_t IDLE_TIMEOUT_NS = 60 * INT64_C(1000000000);
/* How long a connection we close may still send what it had in flight. */
static const int64_t LINGER_NS = 2 * INT64_C(1000000000);

static const char BODY[] = "Hello, World!\n";

/* The three 200 responses, rebuilt when the second in the Date header
 * changes.  Per worker thread: a task always runs on the thread that first
 * ran it, so thread-locals need no lock. */
enum { KEEP, CLOSE, KEEP_10 };
static _Thread_local struct {
    time_t sec;
    size_t len[3];
    char text[3][RESP_MAX];
} hello;

static void hello_refresh(void)
{
    time_t now = time(NULL);
    if (now == hello.sec)
        return;
    struct tm tm;
    char date[64];
    gmtime_r(&now, &tm);
    strftime(date, sizeof date, "%a, %d %b %Y %H:%M:%S GMT", &tm);
    static const char *const conn[3] = {"", "Connection: close\r\n",
                                        "Connection: keep-alive\r\n"};
    for (int i = 0; i < 3; i++)
        hello.len[i] =
            (size_t)snprintf(hello.text[i], RESP_MAX,
                             "HTTP/1.1 200 OK\r\nDate: %s\r\nContent-Type: text/plain\r\n"
                             "Content-Length: %zu\r\n%s\r\n%s",
                             date, sizeof BODY - 1, conn[i], BODY);
    hello.sec = now;
}

/* Appends the answer to req at out (RESP_MAX bytes free); its length. */
static size_t put_hello(char *out, const http_request *req, bool closing)
{
    int v = closing ? CLOSE : req->minor_version == 0 ? KEEP_10 : KEEP;
    size_t n = hello.len[v];
    if (req->method_len == 4 && memcmp(req->method, "HEAD", 4) == 0)
        n -= sizeof BODY - 1; /* the same headers, no body */
    memcpy(out, hello.text[v], n);
    return n;
}

static size_t put_error(char *out, int status)
{
    const char *reason = status == 501 ? "Not Implemented" : "Bad Request";
    return (size_t)snprintf(out, RESP_MAX,
                            "HTTP/1.1 %d %s\r\nContent-Type: text/plain\r\n"
                            "Content-Length: %zu\r\nConnection: close\r\n\r\n"
                            "%s\n",
                            status, reason, strlen(reason) + 1, reason);
}

/* Closing with unread request bytes makes the kernel send a reset, which
 * can destroy the response still on its way.  So: half-close, read what the
 * client still sends for a moment, then close. */
static void close_lingering(int fd)
{
    char sink[4096];
    shutdown(fd, SHUT_WR);
    int64_t deadline = mote_now() + LINGER_NS;
    for (int64_t left; (left = deadline - mote_now()) > 0;)
        if (mote_read(fd, sink, sizeof sink, left) <= 0)
            break;
    mote_close(fd);
}

/* How serve_requests ends: nothing to read for now, we answered with a
 * close, or the peer is gone or stalled. */
enum { WAIT, CLOSE_AFTER_REPLY, BROKEN };

/* What outlives serve_requests' frame between requests. */
typedef struct conn {
    int fd;
    int64_t body_left; /* body bytes still to read and drop */
    int64_t deadline;  /* of the request under way (0: none) */
} conn;

/* What is left of the time of the request under way (-1: none), its time
 * starting now if it has not yet (its first bytes are here). */
static int64_t request_wait(conn *c)
{
    int64_t now = mote_now();
    if (!c->deadline)
        c->deadline = now + IDLE_TIMEOUT_NS;
    return c->deadline > now ? c->deadline - now : -1;
}

/* Reads and answers requests until the socket has nothing more for now at
 * a request boundary (WAIT), or the connection ends.  The 32 KiB of
 * buffers live in this frame only, so a task waiting for the next request
 * keeps one stack page (noinline keeps them out of serve_conn's frame). */
static __attribute__((noinline)) int serve_requests(conn *c)
{
    char in[IN_SIZE], out[OUT_SIZE];
    size_t len = 0; /* bytes in `in`: the request being received */
    http_parser parser;
    http_parser_init(&parser);
    for (;;) {
        /* Between requests never wait here (timeout 0): the caller waits.
         * Inside one, wait: its first bytes are in `in`. */
        size_t room = sizeof in - len;
        int64_t wait = len > 0 ? request_wait(c) : 0; /* 0: never waits */
        if (wait < 0)                                 /* the request took too long */
            return BROKEN;
        ssize_t n = mote_read(c->fd, in + len, room, wait);
        if (len == 0 && (n == -ETIMEDOUT || n == -EAGAIN))
            return WAIT;
        if (n <= 0) /* closed, reset, or silent too long */
            return BROKEN;
        len += (size_t)n;
        bool drained = (size_t)n < room; /* a short read took all there was */
        if (request_wait(c) < 0)         /* (starts the time of a new request) */
            return BROKEN;
        hello_refresh();

        /* Answer every complete request in the buffer, into one write. */
        size_t pos = 0, outlen = 0;
        int end = WAIT; /* WAIT here: keep going */
        for (;;) {
            if (c->body_left > 0) {
                size_t take = len - pos;
                if ((int64_t)take > c->body_left)
                    take = (size_t)c->body_left;
                pos += take;
                c->body_left -= (int64_t)take;
                if (c->body_left > 0)
                    break;
                c->deadline = 0; /* that request is done */
            }
            http_request req;
            http_result r = http_parse_request(&parser, in + pos, len - pos, &req);
            if (r == HTTP_INCOMPLETE)
                break;
            if (outlen > sizeof out - RESP_MAX) { /* a deep pipeline */
                if (mote_write(c->fd, out, outlen, IDLE_TIMEOUT_NS) != (ssize_t)outlen)
                    return BROKEN;
                outlen = 0;
            }
            if (r < 0) {
                outlen += put_error(out + outlen, http_error_status(r));
                end = CLOSE_AFTER_REPLY;
                break;
            }
            /* Answering before an announced body arrived means the client
             * may never send it (Expect: 100-continue): close, as Go does. */
            if (!req.keep_alive || (req.expect_continue && req.content_length > 0))
                end = CLOSE_AFTER_REPLY;
            outlen += put_hello(out + outlen, &req, end == CLOSE_AFTER_REPLY);
            pos += req.head_len;
            c->body_left = req.content_length;
            if (!c->body_left) /* the next request's time starts anew */
                c->deadline = 0;
            http_parser_init(&parser);
            if (end == CLOSE_AFTER_REPLY)
                break;
        }
        if (outlen > 0 &&
            mote_write(c->fd, out, outlen, IDLE_TIMEOUT_NS) != (ssize_t)outlen)
            return BROKEN;
        if (end == CLOSE_AFTER_REPLY)
            return end;
        /* Keep the unparsed rest (part of the next request) at the start. */
        memmove(in, in + pos, len - pos);
        len -= pos;
        if (len == 0 && drained) /* the caller waits for more */
            return WAIT;
    }
}

static void serve_conn(void *arg)
{
    conn c = {(int)(intptr_t)arg, 0, 0};
    int end;
    /* Wait for the next request here, with a shallow stack (or for the
     * rest of a body, within its request's time). */
    while ((end = serve_requests(&c)) == WAIT) {
        int64_t wait = c.body_left ? request_wait(&c) : IDLE_TIMEOUT_NS;
        if (wait < 0 || mote_wait_fd(c.fd, MOTE_READABLE, wait) < 0) {
            end = BROKEN; /* silent, or slow, too long */
            break;
        }
    }
    if (end == CLOSE_AFTER_REPLY)
        close_lingering(c.fd);
    else
        mote_close(c.fd);
}

/* Out of descriptors or memory: the pending connection stays queued in the
 * kernel, so wait (5 ms, doubling up to 1 s, as Go's net/http does) and
 * try again. */
static void accept_loop(int lfd)
{
    int64_t backoff = 0;
    for (;;) {
        int fd = mote_accept(lfd, NULL, NULL, -1);
        if (fd == -ECONNABORTED || fd == -EINTR)
            continue;
        if (fd == -EMFILE || fd == -ENFILE || fd == -ENOBUFS || fd == -ENOMEM) {
            backoff = backoff ? backoff * 2 : 5000000;
            if (backoff > 1000000000)
                backoff = 1000000000;
            fprintf(stderr, "http: accept: %s; retrying in %lld ms\n", mote_strerror(fd),
                    (long long)(backoff / 1000000));
            mote_sleep(backoff);
            continue;
        }
        if (fd < 0) {
            fprintf(stderr, "http: accept: %s\n", mote_strerror(fd));
            return;
        }
        backoff = 0;
        int one = 1; /* like Go's default: replies go out at once */
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        int r = mote_go(serve_conn, (void *)(intptr_t)fd);
        if (r != 0) {
            fprintf(stderr, "http: spawn: %s\n", mote_strerror(r));
            mote_close(fd);
        }
    }
}

static void main_task(void *arg)
{
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%s", (const char *)arg);
    int lfd = mote_listen_tcp(addr, 4096);
    if (lfd < 0) {
        fprintf(stderr, "http: listen %s: %s\n", addr, mote_strerror(lfd));
        return;
    }
    struct sockaddr_in sa;
    socklen_t salen = sizeof sa;
    if (getsockname(lfd, (struct sockaddr *)&sa, &salen) == 0)
        printf("listening on 127.0.0.1:%d\n", ntohs(sa.sin_port));
    fflush(stdout); /* a script may be waiting for that line */
    accept_loop(lfd);
    mote_close(lfd);
}

int main(int argc, char **argv)
{
    int r = mote_run(main_task, (void *)(argc > 1 ? argv[1] : "0"));
    if (r)
        fprintf(stderr, "http: mote_run: %s\n", mote_strerror(r));
    return 1; /* a server only returns when it failed */
}
