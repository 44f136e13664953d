/*
 * fd.c - what kind of descriptor an fd is, making it non-blocking, and
 * the set of mote's own descriptors (see os.h).  The set is a few atomic
 * slots: added to by the creators (an epoll instance, two eventfds, a
 * userfaultfd and /proc/self/pagemap, a pidfd, and the copies of sockets
 * whose close lingers, 8 at most), read by any thread; a slot holds -1 or
 * an open descriptor of mote's.
 */
#include "os/os.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "atomic.h"

#define OS_OWN_FDS 24
static int os_own[OS_OWN_FDS] = {[0 ... OS_OWN_FDS - 1] = -1};

bool mote__os_fd_own(int fd)
{
    if (fd < 0)
        return false;
    for (int i = 0; i < OS_OWN_FDS; i++) {
        int none = -1;
        if (CAS(&os_own[i], &none, fd, RELEASE))
            return true;
    }
    return false;
}

bool mote__os_fd_is_own(int fd)
{
    for (int i = 0; i < OS_OWN_FDS; i++)
        if (LOAD(&os_own[i], ACQUIRE) == fd)
            return fd >= 0;
    return false;
}

void mote__os_fd_close_own(int fd)
{
    if (fd < 0)
        return;
    for (int i = 0; i < OS_OWN_FDS; i++)
        if (LOAD(&os_own[i], RELAXED) == fd)
            STORE(&os_own[i], -1, RELEASE);
    close(fd);
}

int mote__os_fd_kind(int fd)
{
    struct stat st;
    if (fstat(fd, &st) != 0)
        return -errno;
    if (S_ISSOCK(st.st_mode)) {
        int type = 0, domain = 0;
        socklen_t len = sizeof type;
        if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0)
            return OS_FD_OTHER;
        if (type != SOCK_STREAM)
            return OS_FD_SOCKET;
        /* a short read drains only a TCP stream (see os.h) */
        len = sizeof domain;
        if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) != 0)
            return OS_FD_USTREAM;
        return domain == AF_INET || domain == AF_INET6 ? OS_FD_STREAM : OS_FD_USTREAM;
    }
    if (S_ISFIFO(st.st_mode))
        return OS_FD_PIPE;
    if (S_ISREG(st.st_mode) || S_ISBLK(st.st_mode) || S_ISDIR(st.st_mode))
        return OS_FD_FILE;
    return OS_FD_OTHER;
}

int mote__os_fd_nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0)
        return -errno;
    if (fl & O_NONBLOCK)
        return 0;
    return fcntl(fd, F_SETFL, fl | O_NONBLOCK) == 0 ? 1 : -errno;
}

void mote__os_fd_block(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0 && (fl & O_NONBLOCK))
        (void)fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
}

int mote__os_fd_identity(int fd, uint64_t id[2])
{
    struct stat st;
    if (fstat(fd, &st) != 0)
        return -errno;
    id[0] = (uint64_t)st.st_dev;
    id[1] = (uint64_t)st.st_ino;
    return 0;
}
