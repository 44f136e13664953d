/*
 * io.c - raw output for diagnostics (see os.h): write(2) only, so it works
 * inside malloc, in a signal handler and in a fork child.
 */
#include "os/os.h"

#include <errno.h>
#include <poll.h>
#include <string.h>
#include <unistd.h>

int mote__os_write_all(int fd, const char *buf, size_t len)
{
    while (len > 0) {
        ssize_t w = write(fd, buf, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && errno == EAGAIN) { /* a non-blocking descriptor: wait */
            struct pollfd p = {.fd = fd, .events = POLLOUT};
            if (poll(&p, 1, -1) >= 0 || errno == EINTR)
                continue;
            return -errno;
        }
        if (w < 0)
            return -errno;
        if (w == 0)
            return -EIO;
        buf += w;
        len -= (size_t)w;
    }
    return 0;
}

void mote__os_write_err(const char *s)
{
    int saved = errno;
    mote__os_write_all(STDERR_FILENO, s, strlen(s));
    errno = saved;
}
