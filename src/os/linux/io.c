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

void mote__os_write_err4(const char *a, const char *b, const char *c, const char *d)
{
    const char *part[4] = {a, b, c, d};
    char buf[512];
    size_t n = 0;
    for (int i = 0; i < 4; i++) {
        size_t k = part[i] ? strlen(part[i]) : 0;
        if (k > sizeof buf - n) { /* too long for one write: in pieces */
            mote__os_write_all(STDERR_FILENO, buf, n);
            for (int j = i; j < 4; j++)
                if (part[j])
                    mote__os_write_err(part[j]);
            return;
        }
        memcpy(buf + n, part[i] ? part[i] : "", k);
        n += k;
    }
    int saved = errno;
    mote__os_write_all(STDERR_FILENO, buf, n);
    errno = saved;
}

char *mote__os_u64_str(uint64_t v, char *buf)
{
    char tmp[21];
    size_t n = 0;
    do
        tmp[n++] = (char)('0' + v % 10);
    while (v /= 10);
    for (size_t i = 0; i < n; i++)
        buf[i] = tmp[n - 1 - i];
    buf[n] = 0;
    return buf;
}
