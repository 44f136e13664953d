/*
 * fd.c - what kind of descriptor an fd is, and making it non-blocking
 * (see os.h).  Stateless.
 */
#include "os/os.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>

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
    return fcntl(fd, F_SETFL, fl | O_NONBLOCK) == 0 ? 0 : -errno;
}
