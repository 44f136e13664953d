/*
 * poll.c - epoll and eventfd for the netpoller (see os.h).  Descriptors are
 * registered once, edge-triggered, for everything (input, output, peer
 * hang-up): readiness is then tracked in user space and no re-arming system
 * call is ever needed.  The one exception is the poller's wake-up eventfd,
 * level-triggered so that a look by another thread cannot consume it.
 * Waits use epoll_pwait2 for nanosecond timeouts where the kernel has it
 * (5.11+), else epoll_wait rounded up to milliseconds.
 */
#include "os/os.h"

#include <errno.h>
#include <stdint.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "atomic.h"

#ifndef SYS_epoll_pwait2
#define SYS_epoll_pwait2 441
#endif

int mote__os_poll_create(void)
{
    int fd = epoll_create1(EPOLL_CLOEXEC);
    if (fd < 0)
        return -errno;
    mote__os_fd_own(fd);
    return fd;
}

static int os_poll_ctl_add(int epfd, int fd, uint32_t events, uint64_t data)
{
    struct epoll_event e = {.events = events, .data.u64 = data};
    if (epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &e) == 0)
        return 0;
    /* Still registered under an earlier tag (a dup of it stayed open when
     * it was closed): take the new tag. */
    if (errno == EEXIST && epoll_ctl(epfd, EPOLL_CTL_MOD, fd, &e) == 0)
        return 0;
    return -errno;
}

int mote__os_poll_add(int epfd, int fd, uint64_t data)
{
    return os_poll_ctl_add(epfd, fd, EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLPRI | EPOLLET,
                           data);
}

int mote__os_poll_add_level(int epfd, int fd, uint64_t data)
{
    return os_poll_ctl_add(epfd, fd, EPOLLIN, data);
}

int mote__os_poll_del(int epfd, int fd)
{
    struct epoll_event e = {0};
    return epoll_ctl(epfd, EPOLL_CTL_DEL, fd, &e) == 0 ? 0 : -errno;
}

static int os_pwait2_missing; /* atomic: the kernel lacks epoll_pwait2 */

int mote__os_poll_wait(int epfd, os_poll_event *ev, int max, int64_t timeout_ns)
{
    struct epoll_event raw[256];
    if (max > 256)
        max = 256;
    int n;
    if (timeout_ns <= 0 || LOAD(&os_pwait2_missing, RELAXED)) {
        int ms = timeout_ns < 0    ? -1
                 : timeout_ns == 0 ? 0
                 : timeout_ns > (int64_t)INT32_MAX * 1000000
                     ? INT32_MAX
                     : (int)((timeout_ns + 999999) / 1000000);
        n = epoll_wait(epfd, raw, max, ms);
    } else {
        struct timespec ts = {timeout_ns / 1000000000, timeout_ns % 1000000000};
        n = (int)syscall(SYS_epoll_pwait2, epfd, raw, max, &ts, NULL, 0);
        if (n < 0 && errno == ENOSYS) {
            STORE(&os_pwait2_missing, 1, RELAXED);
            return mote__os_poll_wait(epfd, ev, max, timeout_ns);
        }
    }
    if (n < 0)
        return errno == EINTR ? 0 : -errno;
    for (int i = 0; i < n; i++) {
        uint32_t e = raw[i].events;
        ev[i].data = raw[i].data.u64;
        ev[i].readable = !!(e & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR | EPOLLPRI));
        ev[i].writable = !!(e & (EPOLLOUT | EPOLLHUP | EPOLLERR));
        ev[i].error = !!(e & EPOLLERR);
        ev[i].stops_reads = !!(e & (EPOLLRDHUP | EPOLLHUP | EPOLLERR | EPOLLPRI));
    }
    return n;
}

int mote__os_event_create(void)
{
    int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (fd < 0)
        return -errno;
    mote__os_fd_own(fd);
    return fd;
}

void mote__os_event_signal(int efd)
{
    uint64_t one = 1;
    ssize_t r = write(efd, &one, sizeof one);
    (void)r; /* EAGAIN: the counter is already non-zero, which is enough */
}

void mote__os_event_drain(int efd)
{
    uint64_t v;
    ssize_t r = read(efd, &v, sizeof v);
    (void)r;
}
