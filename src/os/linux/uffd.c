/*
 * uffd.c - userfaultfd for frozen stacks (see os.h and freeze.c).  One
 * descriptor per process; the runtime registers stack chunks with it in
 * MISSING|WP mode.  Full mode (faults from kernel mode are delivered too,
 * so a system call that touches a frozen stack waits instead of failing
 * with EFAULT) needs privilege or vm.unprivileged_userfaultfd=1; the
 * /dev/userfaultfd device is tried when the system call is refused (a
 * seccomp filter, say).  Debian 12's headers predate some of the ABI, so
 * the few definitions needed are given here when missing.
 */
#include "os/os.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef USERFAULTFD_IOC_NEW
#define USERFAULTFD_IOC     0xAA
#define USERFAULTFD_IOC_NEW _IO(USERFAULTFD_IOC, 0x00)
#endif
#ifndef UFFD_USER_MODE_ONLY
#define UFFD_USER_MODE_ONLY 1
#endif
#ifndef SYS_userfaultfd
#define SYS_userfaultfd 323
#endif

static int uffd_new(int flags)
{
    int fd = (int)syscall(SYS_userfaultfd, flags);
    if (fd >= 0)
        return fd;
    int e = errno;
    int dev = open("/dev/userfaultfd", O_RDWR | O_CLOEXEC);
    if (dev < 0) {
        errno = e;
        return -1;
    }
    fd = ioctl(dev, USERFAULTFD_IOC_NEW, flags);
    e = errno;
    close(dev);
    errno = e;
    return fd;
}

/* The handshake, and a write-protect round trip on a scratch mapping: the
 * features the freezer relies on, checked rather than assumed. */
static int uffd_selftest(int fd)
{
    struct uffdio_api api = {.api = UFFD_API, .features = UFFD_FEATURE_PAGEFAULT_FLAG_WP};
    if (ioctl(fd, UFFDIO_API, &api) != 0)
        return -errno;
    if (!(api.features & UFFD_FEATURE_PAGEFAULT_FLAG_WP))
        return -EOPNOTSUPP;
    void *p = mmap(NULL, 2 * OS_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                   -1, 0);
    if (p == MAP_FAILED)
        return -errno;
    *(volatile char *)p = 1; /* present before registration: no fault to serve */
    int r = mote__os_uffd_register(fd, p, 2 * OS_PAGE);
    if (r == 0) {
        r = mote__os_uffd_wp(fd, p, OS_PAGE, true);
        if (r == 0)
            r = mote__os_uffd_wp(fd, p, OS_PAGE, false);
    }
    munmap(p, 2 * OS_PAGE);
    return r;
}

int mote__os_uffd_open(bool allow_user_only, int *mode)
{
    int flags = O_CLOEXEC | O_NONBLOCK;
    int fd = uffd_new(flags);
    *mode = OS_UFFD_FULL;
    if (fd < 0 && allow_user_only) {
        fd = uffd_new(flags | UFFD_USER_MODE_ONLY);
        *mode = OS_UFFD_USER_ONLY;
    }
    if (fd < 0)
        return -errno;
    int r = uffd_selftest(fd);
    if (r) {
        close(fd);
        return r;
    }
    mote__os_fd_own(fd);
    return fd;
}

int mote__os_uffd_register(int fd, void *p, size_t len)
{
    struct uffdio_register r = {.range = {.start = (uintptr_t)p, .len = len},
                                .mode = UFFDIO_REGISTER_MODE_MISSING |
                                        UFFDIO_REGISTER_MODE_WP};
    return ioctl(fd, UFFDIO_REGISTER, &r) == 0 ? 0 : -errno;
}

int mote__os_uffd_wp(int fd, void *p, size_t len, bool on)
{
    struct uffdio_writeprotect w = {.range = {.start = (uintptr_t)p, .len = len},
                                    .mode = on ? UFFDIO_WRITEPROTECT_MODE_WP : 0};
    return ioctl(fd, UFFDIO_WRITEPROTECT, &w) == 0 ? 0 : -errno;
}

int mote__os_uffd_copy(int fd, void *dst, const void *src, size_t len)
{
    struct uffdio_copy c = {
        .dst = (uintptr_t)dst, .src = (uintptr_t)src, .len = len, .mode = 0};
    return ioctl(fd, UFFDIO_COPY, &c) == 0 ? 0 : -errno;
}

int mote__os_uffd_zeropage(int fd, void *dst, size_t len)
{
    struct uffdio_zeropage z = {.range = {.start = (uintptr_t)dst, .len = len},
                                .mode = 0};
    return ioctl(fd, UFFDIO_ZEROPAGE, &z) == 0 ? 0 : -errno;
}

int mote__os_uffd_wake(int fd, void *p, size_t len)
{
    struct uffdio_range r = {.start = (uintptr_t)p, .len = len};
    return ioctl(fd, UFFDIO_WAKE, &r) == 0 ? 0 : -errno;
}

int mote__os_uffd_wait(int fd, int stop_fd, int64_t timeout_ns)
{
    struct pollfd p[2] = {{.fd = fd, .events = POLLIN},
                          {.fd = stop_fd, .events = POLLIN}};
    int ms = timeout_ns < 0 ? -1 : (int)((timeout_ns + 999999) / 1000000);
    int r = poll(p, stop_fd >= 0 ? 2 : 1, ms);
    if (r < 0)
        return errno == EINTR ? 0 : -errno;
    return (p[0].revents & POLLIN ? 1 : 0) |
           (stop_fd >= 0 && (p[1].revents & POLLIN) ? 2 : 0);
}

int mote__os_uffd_read(int fd, os_uffd_fault *f, int max)
{
    struct uffd_msg m[32];
    if (max > 32)
        max = 32;
    ssize_t r = read(fd, m, sizeof m[0] * (size_t)max);
    if (r < 0)
        return errno == EAGAIN || errno == EINTR ? 0 : -errno;
    int n = 0;
    for (ssize_t k = 0; k < r / (ssize_t)sizeof m[0]; k++) {
        if (m[k].event != UFFD_EVENT_PAGEFAULT)
            continue;
        f[n].addr = (uintptr_t)m[k].arg.pagefault.address;
        f[n].write = !!(m[k].arg.pagefault.flags & UFFD_PAGEFAULT_FLAG_WRITE);
        f[n].wp = !!(m[k].arg.pagefault.flags & UFFD_PAGEFAULT_FLAG_WP);
        n++;
    }
    return n;
}
