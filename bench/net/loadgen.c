/*
 * loadgen.c - the load generator of bench/net: drives an echo server on one
 * epoll loop in one thread (run.sh pins it to its own CPU) and prints one
 * key=value line.  Plain C and Linux; it does not use mote, so both servers
 * face the same client.
 *
 *   loadgen pingpong -a HOST:PORT -c CONNS [-s SIZE] [-d SEC] [-w SEC]
 *       every connection sends SIZE bytes, waits for all of them to come
 *       back, and sends again: round trips/s, p50/p99 round-trip latency
 *   loadgen stream -a HOST:PORT -c CONNS [-s SIZE] [-d SEC] [-w SEC]
 *       every connection sends SIZE-byte messages without waiting for the
 *       echo (at most -W bytes unanswered) and reads the echo as it comes:
 *       messages echoed per second
 *   loadgen idle -a HOST:PORT -c CONNS -p SERVER_PID [-S SOURCES]
 *       opens CONNS connections that never send, waits until the server
 *       holds them all (its /proc/PID/fd), then 1 s, and reports the growth
 *       of its VmRSS + VmPTE per connection
 *
 * Connections are all open before any timing; -w seconds of warm-up run
 * before the -d seconds that are measured.  Every echo is checked (each
 * message carries its sequence number), so a server that loses, reorders
 * or corrupts bytes fails the run instead of looking fast.  -t KEY=VALUE
 * (repeatable) is copied to the output line, e.g. -t impl=mote.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum {
    HDR = 8,              /* a message starts with its sequence number */
    MAX_CONNECTING = 256, /* connects in flight while opening */
    RX_CHUNK = 65536,
    TX_CHUNK = 16384,
    EVENTS = 512,
};

typedef struct conn {
    int fd;
    uint64_t tx;     /* bytes written so far (its stream offset) */
    uint64_t rx;     /* bytes of echo received and checked */
    int64_t sent_at; /* pingpong: when the current message went out */
} conn;

static struct {
    const char *mode;
    struct sockaddr_in dst;
    int conns;
    int size;
    double duration, warmup;
    uint64_t window;
    pid_t server_pid;
    int sources;
    char tags[512];
    conn *c;
    int ep;
} g = {.size = 512, .duration = 3, .warmup = 0.5, .window = 256 << 10};

static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "loadgen: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(1);
}

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* ---- the bytes on the wire ------------------------------------------------
 * Message k of a connection is its sequence number k (8 bytes, little
 * endian) followed by size-8 bytes of filler.  Both sides of the check
 * work on stream offsets, so reads and writes may split messages anywhere. */

/* Byte i (< HDR) of message k's header. */
static unsigned char hdr_byte(uint64_t k, unsigned i)
{
    return (unsigned char)(k >> (8 * i));
}

/* Checks n received bytes at stream offset off: every header byte, and the
 * last byte of every message (filler).  One division per call, not one per
 * byte: at 4M messages/s the checks were a tenth of the load generator's
 * CPU, which capped what it could measure. */
static bool check_echo(uint64_t off, const unsigned char *p, size_t n, int size)
{
    uint64_t sz = (uint64_t)size, end = off + n;
    uint64_t k = off / sz;
    for (uint64_t m = k * sz; m < end; m += sz, k++) {
        uint64_t lo = m > off ? m : off, hi = m + HDR < end ? m + HDR : end;
        for (uint64_t o = lo; o < hi; o++)
            if (p[o - off] != hdr_byte(k, (unsigned)(o - m)))
                return false;
        uint64_t last = m + sz - 1;
        if (last >= off && last < end && p[last - off] != 'x')
            return false;
    }
    return true;
}

/* Writes the header bytes of the stream range [off, off+n) into buf, whose
 * other bytes are filler ('x'); with put false, writes filler back over
 * them, so the buffer is all filler again without a memset per send. */
static void stream_headers(unsigned char *buf, uint64_t off, size_t n, int size, bool put)
{
    uint64_t sz = (uint64_t)size, end = off + n;
    uint64_t k = off / sz;
    for (uint64_t m = k * sz; m < end; m += sz, k++) {
        uint64_t lo = m > off ? m : off, hi = m + HDR < end ? m + HDR : end;
        for (uint64_t o = lo; o < hi; o++)
            buf[o - off] = put ? hdr_byte(k, (unsigned)(o - m)) : 'x';
    }
}

/* ---- latency histogram ------------------------------------------------------
 * Log-linear: 64 sub-buckets per power of two, so a percentile is within
 * 1.6 % of the true value. */
enum { SUB_BITS = 6, SUB = 1 << SUB_BITS };
static uint64_t hist[64 * SUB];
static uint64_t hist_n;

static void hist_add(int64_t ns)
{
    uint64_t v = ns > 0 ? (uint64_t)ns : 0;
    unsigned idx;
    if (v < SUB) {
        idx = (unsigned)v;
    } else {
        unsigned msb = 63 - (unsigned)__builtin_clzll(v);
        idx =
            (msb - SUB_BITS + 1) * SUB + (unsigned)((v >> (msb - SUB_BITS)) & (SUB - 1));
    }
    hist[idx]++;
    hist_n++;
}

/* The value (ns) at quantile q: the middle of its bucket. */
static double hist_quantile(double q)
{
    uint64_t want = (uint64_t)(q * (double)hist_n), seen = 0;
    for (unsigned idx = 0; idx < 64 * SUB; idx++) {
        seen += hist[idx];
        if (seen > want || (seen == hist_n && hist[idx])) {
            if (idx < SUB)
                return idx;
            unsigned shift = idx / SUB - 1; /* msb - SUB_BITS */
            double lo = (double)((uint64_t)(SUB + idx % SUB) << shift);
            return lo + (double)((uint64_t)1 << shift) / 2;
        }
    }
    return 0;
}

/* ---- the server, seen from /proc ------------------------------------------ */

static int64_t server_mem(int64_t *rss, int64_t *pte)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)g.server_pid);
    FILE *f = fopen(path, "r");
    if (!f)
        die("server %d: %s", (int)g.server_pid, strerror(errno));
    *rss = *pte = -1;
    long long v;
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "VmRSS: %lld", &v) == 1)
            *rss = (int64_t)v << 10;
        else if (sscanf(line, "VmPTE: %lld", &v) == 1)
            *pte = (int64_t)v << 10;
    }
    fclose(f);
    if (*rss < 0 || *pte < 0)
        die("no VmRSS/VmPTE in %s", path);
    return *rss + *pte;
}

/* Descriptors the server holds: how many connections it has accepted. */
static long server_fds(void)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd", (int)g.server_pid);
    DIR *d = opendir(path);
    if (!d)
        die("server %d: %s", (int)g.server_pid, strerror(errno));
    long n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

/* ---- opening connections ---------------------------------------------------- */

static void raise_nofile(long need)
{
    struct rlimit rl;
    getrlimit(RLIMIT_NOFILE, &rl);
    if ((long)rl.rlim_cur >= need)
        return;
    if ((long)rl.rlim_max < need)
        rl.rlim_max = (rlim_t)need; /* allowed for root, up to fs.nr_open */
    rl.rlim_cur = rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
        die("%ld descriptors needed, RLIMIT_NOFILE cannot be raised: %s "
            "(ulimit -n)",
            need, strerror(errno));
}

/* Source addresses to spread the client side over: loopback's port range
 * gives one address ~28k ports towards one server port, and a run must not
 * depend on the TIME_WAITs an earlier run left, so use half. */
static int sources_needed(int conns)
{
    int lo = 32768, hi = 60999;
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
    if (f) {
        if (fscanf(f, "%d %d", &lo, &hi) != 2)
            lo = 32768, hi = 60999;
        fclose(f);
    }
    int per = (hi - lo + 1) / 2;
    if (per < 1000)
        per = 1000;
    return (conns + per - 1) / per;
}

/* Opens g.conns connections; with a server pid, never more than ~2k ahead
 * of what the server has accepted (base_fds: its descriptors before). */
static void open_conns(long base_fds)
{
    raise_nofile(g.conns + 64L);
    g.c = calloc((size_t)g.conns, sizeof *g.c);
    if (!g.c)
        die("out of memory");
    int sources = g.sources ? g.sources : g.server_pid ? sources_needed(g.conns) : 0;
    if (sources > 250)
        die("%d source addresses needed: too many", sources);
    int opened = 0, done = 0, connecting = 0;
    struct epoll_event ev[EVENTS];
    int64_t deadline = now_ns() + 120 * INT64_C(1000000000);
    while (done < g.conns) {
        while (opened < g.conns && connecting < MAX_CONNECTING) {
            int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
            if (fd < 0)
                die("socket: %s (connection %d)", strerror(errno), opened);
            int one = 1;
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
            /* Reset on close: no TIME_WAIT left to take ports from later runs. */
            struct linger lg = {1, 0};
            setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
            if (sources) {
                /* 127.0.0.2, .3, ...; the port is chosen at connect, per
                 * destination, not at bind (IP_BIND_ADDRESS_NO_PORT). */
                struct sockaddr_in src = {.sin_family = AF_INET};
                src.sin_addr.s_addr = htonl(0x7f000002u + (uint32_t)(opened % sources));
                setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof one);
                if (bind(fd, (struct sockaddr *)&src, sizeof src) != 0)
                    die("bind 127.0.0.%d: %s", 2 + opened % sources, strerror(errno));
            }
            g.c[opened].fd = fd;
            if (connect(fd, (struct sockaddr *)&g.dst, sizeof g.dst) != 0 &&
                errno != EINPROGRESS) {
                int e = errno;
                die("connect (connection %d): %s%s", opened, strerror(e),
                    e == EADDRNOTAVAIL ? ": out of ports, use more source addresses (-S)"
                                       : "");
            }
            struct epoll_event e = {.events = EPOLLOUT | EPOLLONESHOT,
                                    .data.u32 = (uint32_t)opened};
            if (epoll_ctl(g.ep, EPOLL_CTL_ADD, fd, &e) != 0)
                die("epoll_ctl: %s", strerror(errno));
            opened++;
            connecting++;
            /* Let the server keep up: past its accept backlog, the kernel
             * drops handshakes and the client retries only after 1 s. */
            if (g.server_pid && opened % 1024 == 0) {
                while (opened - (server_fds() - base_fds) > 2048) {
                    if (now_ns() > deadline)
                        die("the server accepts no more connections (%ld of %d)",
                            server_fds() - base_fds, opened);
                    usleep(1000);
                }
            }
        }
        int n = epoll_wait(g.ep, ev, EVENTS, 1000);
        if (n < 0 && errno != EINTR)
            die("epoll_wait: %s", strerror(errno));
        for (int i = 0; i < n; i++) {
            conn *c = &g.c[ev[i].data.u32];
            int err = 0;
            socklen_t len = sizeof err;
            getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len);
            if (err)
                die("connect (connection %u): %s", ev[i].data.u32, strerror(err));
            connecting--;
            done++;
        }
        if (now_ns() > deadline)
            die("only %d of %d connections opened in 120 s", done, g.conns);
    }
}

static void rearm(conn *c, uint32_t events)
{
    struct epoll_event e = {.events = events, .data.u32 = (uint32_t)(c - g.c)};
    if (epoll_ctl(g.ep, EPOLL_CTL_MOD, c->fd, &e) != 0)
        die("epoll_ctl: %s", strerror(errno));
}

static void conn_failed(conn *c, ssize_t r, const char *what)
{
    die("connection %ld: %s: %s", (long)(c - g.c), what,
        r == 0 ? "closed by the server" : strerror(errno));
}

/* ---- ping-pong -------------------------------------------------------------- */

static unsigned char txbuf[TX_CHUNK + 1024], rxbuf[RX_CHUNK];

/* Writes the rest of c's current message; true when it is all out. */
static bool pp_send(conn *c)
{
    uint64_t msg_end =
        (c->tx / (uint64_t)g.size + (c->tx % (uint64_t)g.size != 0)) * (uint64_t)g.size;
    if (c->tx == msg_end) /* a new message */
        msg_end += (uint64_t)g.size;
    size_t n = (size_t)(msg_end - c->tx);
    if (n > TX_CHUNK) /* a large message goes out in pieces */
        n = TX_CHUNK;
    stream_headers(txbuf, c->tx, n, g.size, true);
    ssize_t w = send(c->fd, txbuf, n, MSG_NOSIGNAL);
    stream_headers(txbuf, c->tx, n, g.size, false);
    if (w < 0 && errno != EAGAIN)
        conn_failed(c, w, "write");
    if (w > 0)
        c->tx += (uint64_t)w;
    return c->tx == msg_end;
}

static void run_pingpong(void)
{
    struct epoll_event ev[EVENTS];
    int64_t t0 = now_ns();
    int64_t t_measure = t0 + (int64_t)(g.warmup * 1e9);
    int64_t t_end = t_measure + (int64_t)(g.duration * 1e9);
    uint64_t count = 0;
    bool measuring = false;
    for (int i = 0; i < g.conns; i++) {
        conn *c = &g.c[i];
        c->sent_at = now_ns();
        rearm(c, pp_send(c) ? EPOLLIN : EPOLLOUT);
    }
    int64_t last_event = now_ns();
    for (;;) {
        int n = epoll_wait(g.ep, ev, EVENTS, 100);
        if (n < 0 && errno != EINTR)
            die("epoll_wait: %s", strerror(errno));
        int64_t now = now_ns();
        if (!measuring && now >= t_measure) {
            measuring = true;
            count = 0;
            t_measure = now;
        }
        if (now >= t_end)
            break;
        if (n > 0)
            last_event = now;
        else if (now - last_event > 5 * INT64_C(1000000000))
            die("no echo for 5 s: the server stalled");
        for (int i = 0; i < n; i++) {
            conn *c = &g.c[ev[i].data.u32];
            if (ev[i].events & EPOLLOUT && !(ev[i].events & (EPOLLERR | EPOLLHUP))) {
                if (pp_send(c))
                    rearm(c, EPOLLIN);
                continue;
            }
            /* Read only what is owed: the echo of the one message out. */
            size_t want = (size_t)(c->tx - c->rx);
            if (want > sizeof rxbuf)
                want = sizeof rxbuf;
            if (want == 0)
                die("connection %ld: bytes that were never sent came back",
                    (long)(c - g.c));
            ssize_t r = recv(c->fd, rxbuf, want, 0);
            if (r <= 0) {
                if (r < 0 && errno == EAGAIN)
                    continue;
                conn_failed(c, r, "read");
            }
            if (!check_echo(c->rx, rxbuf, (size_t)r, g.size))
                die("connection %ld: the echo differs from what was sent "
                    "(stream offset %llu)",
                    (long)(c - g.c), (unsigned long long)c->rx);
            c->rx += (uint64_t)r;
            if (c->rx < c->tx)
                continue;
            int64_t t = now_ns();
            if (measuring) {
                count++;
                hist_add(t - c->sent_at);
            }
            c->sent_at = t;
            if (!pp_send(c))
                rearm(c, EPOLLOUT);
        }
    }
    double secs = (double)(now_ns() - t_measure) / 1e9;
    printf("name=echo_pingpong conns=%d size=%d duration_s=%.2f rps=%.0f "
           "p50_us=%.1f p99_us=%.1f round_trips=%llu%s\n",
           g.conns, g.size, secs, (double)count / secs, hist_quantile(0.50) / 1e3,
           hist_quantile(0.99) / 1e3, (unsigned long long)count, g.tags);
}

/* ---- streaming ----------------------------------------------------------------- */

/* Writes while fewer than g.window bytes are unanswered; false on EAGAIN. */
static bool st_send(conn *c)
{
    while (c->tx - c->rx < g.window) {
        size_t n = TX_CHUNK;
        if (c->tx - c->rx + n > g.window)
            n = (size_t)(g.window - (c->tx - c->rx));
        stream_headers(txbuf, c->tx, n, g.size, true);
        ssize_t w = send(c->fd, txbuf, n, MSG_NOSIGNAL);
        stream_headers(txbuf, c->tx, n, g.size, false);
        if (w < 0) {
            if (errno == EAGAIN)
                return false;
            conn_failed(c, w, "write");
        }
        c->tx += (uint64_t)w;
    }
    return true;
}

static void run_stream(void)
{
    struct epoll_event ev[EVENTS];
    /* Edge-triggered: each side runs until the kernel says EAGAIN, and a
     * read that frees window space lets the writer go on at once. */
    for (int i = 0; i < g.conns; i++) {
        rearm(&g.c[i], EPOLLIN | EPOLLOUT | EPOLLET);
        st_send(&g.c[i]);
    }
    int64_t t_measure = now_ns() + (int64_t)(g.warmup * 1e9);
    int64_t t_end = t_measure + (int64_t)(g.duration * 1e9);
    uint64_t rx_at_start = 0, rx_total = 0;
    bool measuring = false;
    int64_t last_event = now_ns();
    for (;;) {
        int n = epoll_wait(g.ep, ev, EVENTS, 100);
        if (n < 0 && errno != EINTR)
            die("epoll_wait: %s", strerror(errno));
        int64_t now = now_ns();
        if (!measuring && now >= t_measure) {
            measuring = true;
            rx_at_start = rx_total;
            t_measure = now;
        }
        if (now >= t_end)
            break;
        if (n > 0)
            last_event = now;
        else if (now - last_event > 5 * INT64_C(1000000000))
            die("no echo for 5 s: the server stalled");
        for (int i = 0; i < n; i++) {
            conn *c = &g.c[ev[i].data.u32];
            for (;;) {
                ssize_t r = recv(c->fd, rxbuf, sizeof rxbuf, 0);
                if (r < 0 && errno == EAGAIN)
                    break;
                if (r <= 0)
                    conn_failed(c, r, "read");
                if (c->rx + (uint64_t)r > c->tx ||
                    !check_echo(c->rx, rxbuf, (size_t)r, g.size))
                    die("connection %ld: the echo differs from what was sent "
                        "(stream offset %llu)",
                        (long)(c - g.c), (unsigned long long)c->rx);
                c->rx += (uint64_t)r;
                rx_total += (uint64_t)r;
                st_send(c);
            }
            st_send(c);
        }
    }
    double secs = (double)(now_ns() - t_measure) / 1e9;
    double bytes = (double)(rx_total - rx_at_start);
    printf("name=echo_stream conns=%d size=%d duration_s=%.2f msgs_per_s=%.0f "
           "mib_per_s=%.1f window=%llu%s\n",
           g.conns, g.size, secs, bytes / g.size / secs, bytes / secs / (1 << 20),
           (unsigned long long)g.window, g.tags);
}

/* ---- idle connections ---------------------------------------------------------- */

static void run_idle(void)
{
    int64_t rss0, pte0, rss, pte;
    long fds0 = server_fds();
    server_mem(&rss0, &pte0);
    int64_t t0 = now_ns();
    open_conns(fds0);
    double open_s = (double)(now_ns() - t0) / 1e9;
    /* A connect completes in the kernel before the server accepts it:
     * count what the server holds. */
    int64_t deadline = now_ns() + 60 * INT64_C(1000000000);
    long held;
    while ((held = server_fds() - fds0) < g.conns) {
        if (now_ns() > deadline)
            die("the server holds %ld of %d connections after 60 s", held, g.conns);
        usleep(10000);
    }
    usleep(1000000); /* what the server keeps, not what it passed through */
    server_mem(&rss, &pte);
    held = server_fds() - fds0;
    /* and once more 2 s later: past mote's default freeze threshold (1 s),
     * which the connections reach just as the first figure is read */
    int64_t rss3, pte3;
    usleep(2000000);
    server_mem(&rss3, &pte3);
    printf("name=echo_idle conns=%d held=%ld base_rss=%lld base_pte=%lld rss=%lld "
           "pte=%lld bytes_per_conn=%.0f bytes_per_conn_3s=%.0f open_s=%.2f%s\n",
           g.conns, held, (long long)rss0, (long long)pte0, (long long)rss,
           (long long)pte, (double)(rss + pte - rss0 - pte0) / g.conns,
           (double)(rss3 + pte3 - rss0 - pte0) / g.conns, open_s, g.tags);
}

/* ---- main ------------------------------------------------------------------------ */

static void usage(void)
{
    fprintf(stderr,
            "usage: loadgen pingpong|stream|idle -a HOST:PORT -c CONNS [-s SIZE]\n"
            "               [-d SECONDS] [-w WARMUP_SECONDS] [-W WINDOW_BYTES]\n"
            "               [-p SERVER_PID] [-S SOURCE_ADDRESSES] [-t KEY=VALUE]...\n");
    exit(2);
}

static void parse_addr(const char *s)
{
    char host[64];
    const char *colon = strrchr(s, ':');
    if (!colon || colon - s >= (long)sizeof host)
        die("bad address %s (want HOST:PORT)", s);
    snprintf(host, sizeof host, "%.*s", (int)(colon - s), s);
    g.dst.sin_family = AF_INET;
    g.dst.sin_port = htons((uint16_t)atoi(colon + 1));
    if (inet_pton(AF_INET, host, &g.dst.sin_addr) != 1 || !g.dst.sin_port)
        die("bad address %s (want IPv4:PORT)", s);
}

int main(int argc, char **argv)
{
    if (argc < 2)
        usage();
    g.mode = argv[1];
    bool have_addr = false;
    int opt;
    optind = 2;
    while ((opt = getopt(argc, argv, "a:c:s:d:w:W:p:S:t:")) != -1) {
        switch (opt) {
        case 'a':
            parse_addr(optarg);
            have_addr = true;
            break;
        case 'c': g.conns = atoi(optarg); break;
        case 's': g.size = atoi(optarg); break;
        case 'd': g.duration = atof(optarg); break;
        case 'w': g.warmup = atof(optarg); break;
        case 'W': g.window = strtoull(optarg, NULL, 10); break;
        case 'p': g.server_pid = atoi(optarg); break;
        case 'S': g.sources = atoi(optarg); break;
        case 't': {
            size_t l = strlen(g.tags);
            snprintf(g.tags + l, sizeof g.tags - l, " %s", optarg);
            break;
        }
        default: usage();
        }
    }
    bool pp = strcmp(g.mode, "pingpong") == 0, st = strcmp(g.mode, "stream") == 0;
    bool idle = strcmp(g.mode, "idle") == 0;
    if (!(pp || st || idle) || !have_addr || g.conns < 1 || g.size <= HDR ||
        g.duration <= 0 || g.warmup < 0 || g.window < (uint64_t)g.size)
        usage();
    if (idle && g.server_pid <= 0)
        die("idle needs the server's pid (-p)");
    memset(txbuf, 'x', sizeof txbuf); /* filler; stream_headers adds headers */
    g.ep = epoll_create1(EPOLL_CLOEXEC);
    if (g.ep < 0)
        die("epoll_create1: %s", strerror(errno));

    if (idle) {
        run_idle();
        return 0;
    }
    open_conns(0);
    if (pp)
        run_pingpong();
    else
        run_stream();
    return 0;
}
