/*
 * net.c - TCP in one call: mote_listen_tcp and mote_dial_tcp.  Addresses
 * are "host:port", "[ipv6]:port" or ":port" (every address); the port is a
 * number.  Host names are resolved with getaddrinfo, which blocks: inside a
 * task it runs on the blocking pool (mote_offload), so no worker waits for
 * DNS.  Sockets are O_NONBLOCK|O_CLOEXEC; listeners set SO_REUSEADDR and
 * TCP_NODELAY (which accepted connections inherit), dialed connections
 * TCP_NODELAY, as Go does.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "mote.h"
#include "netpoll.h"
#include "park.h"

typedef struct net_addr {
    char host[256]; /* "" for every address */
    char port[8];
} net_addr;

/* Splits "host:port", "[v6]:port" or ":port": 0 or -EINVAL. */
static int net_parse(const char *s, net_addr *a)
{
    if (!s)
        return -EINVAL;
    const char *colon;
    size_t hl;
    if (s[0] == '[') {
        const char *close = strchr(s, ']');
        if (!close || close[1] != ':')
            return -EINVAL;
        hl = (size_t)(close - s - 1);
        colon = close + 1;
        if (hl == 0 || hl >= sizeof a->host)
            return -EINVAL;
        memcpy(a->host, s + 1, hl);
    } else {
        colon = strrchr(s, ':');
        if (!colon)
            return -EINVAL;
        hl = (size_t)(colon - s);
        if (hl >= sizeof a->host || memchr(s, ':', hl))
            return -EINVAL; /* a bare IPv6 address needs brackets */
        memcpy(a->host, s, hl);
    }
    a->host[hl] = 0;
    const char *p = colon + 1;
    size_t pl = strlen(p);
    if (pl == 0 || pl > 5 || strspn(p, "0123456789") != pl || atoi(p) > 65535)
        return -EINVAL;
    memcpy(a->port, p, pl + 1);
    return 0;
}

typedef struct net_resolve {
    const net_addr *a;
    int passive;
    bool numeric; /* an address or none: no lookup, nothing that blocks */
    struct addrinfo *res;
} net_resolve;

static intptr_t net_resolve_run(void *arg)
{
    net_resolve *r = arg;
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM,
                             .ai_flags = (r->passive ? AI_PASSIVE : 0) | AI_NUMERICSERV |
                                         (r->numeric ? AI_NUMERICHOST : 0)};
    int e = getaddrinfo(r->a->host[0] ? r->a->host : NULL, r->a->port, &hints, &r->res);
    switch (e) {
    case 0: return 0;
    case EAI_NONAME:
#ifdef EAI_NODATA
    case EAI_NODATA:
#endif
        return -ENOENT;
    case EAI_AGAIN: return -EAGAIN;
    case EAI_MEMORY: return -ENOMEM;
    case EAI_SYSTEM: return errno ? -errno : -EIO;
    default: return -EINVAL;
    }
}

/* Resolves a: a name on the blocking pool inside a task, an address (or
 * none: every address) at once, so that "127.0.0.1:80" never waits behind
 * the pool's other calls. */
static int net_resolve_addr(const net_addr *a, int passive, struct addrinfo **res)
{
    unsigned char buf[sizeof(struct in6_addr)];
    bool numeric = !a->host[0] || inet_pton(AF_INET, a->host, buf) == 1 ||
                   inet_pton(AF_INET6, a->host, buf) == 1;
    net_resolve r = {a, passive, numeric && a->host[0], NULL};
    intptr_t e = mote__self() && !numeric ? mote_offload(net_resolve_run, &r)
                                          : net_resolve_run(&r);
    *res = r.res;
    return (int)e;
}

static void net_nodelay(int fd)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

static int net_listen_on(const struct addrinfo *ai, int backlog)
{
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    mote__netpoll_fresh(fd);
    int one = 1, zero = 0;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (ai->ai_family == AF_INET6) /* ":port" serves IPv4 too */
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
    net_nodelay(fd);
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, backlog) != 0) {
        int e = -errno;
        close(fd);
        return e;
    }
    return fd;
}

int mote_listen_tcp(const char *addr, int backlog)
{
    net_addr a;
    if (net_parse(addr, &a))
        return -EINVAL;
    if (backlog <= 0)
        backlog = SOMAXCONN;
    struct addrinfo *res;
    int r = net_resolve_addr(&a, 1, &res);
    if (r)
        return r;
    /* Every address for ":port": the IPv6 wildcard first (dual stack). */
    int fd = -EADDRNOTAVAIL;
    for (int pass = 0; pass < 2 && fd < 0; pass++)
        for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next)
            if ((ai->ai_family == AF_INET6) == (pass == 0) || (a.host[0] && pass == 0))
                fd = net_listen_on(ai, backlog);
    freeaddrinfo(res);
    return fd;
}

int mote_dial_tcp(const char *addr, int64_t timeout_ns)
{
    if (!mote__self())
        return -EPERM;
    net_addr a;
    if (net_parse(addr, &a) || !a.host[0])
        return -EINVAL;
    int64_t deadline = mote__park_deadline(timeout_ns);
    struct addrinfo *res;
    int r = net_resolve_addr(&a, 0, &res);
    if (r)
        return r;
    r = -EHOSTUNREACH;
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        /* 0 never waits, but still tries: a connect that completes at
         * once (loopback) succeeds, as mote_connect's does. */
        int64_t left = timeout_ns == 0 ? 0 : -1;
        if (timeout_ns > 0) {
            left = deadline - mote_now();
            if (left <= 0) {
                r = -ETIMEDOUT;
                break;
            }
        }
        int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            r = -errno;
            continue;
        }
        mote__netpoll_fresh(fd);
        r = mote_connect(fd, ai->ai_addr, ai->ai_addrlen, left);
        if (r == 0) {
            net_nodelay(fd);
            r = fd;
            break;
        }
        mote_close(fd);
    }
    freeaddrinfo(res);
    return r;
}
