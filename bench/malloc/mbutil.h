/*
 * mbutil.h - helpers shared by the allocator benchmarks of round two
 * (largeloop, survivors, larson, threadreq, prodcons): clocks, kernel
 * memory figures read with plain syscalls (never through malloc, so a
 * sampling loop makes no allocator call), a xorshift generator and the
 * mixed size distribution of freeidle.c.  Header-only, allocator-agnostic.
 */
#ifndef MOTE_MBUTIL_H
#define MOTE_MBUTIL_H

#include <fcntl.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

static inline double mb_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Resident bytes from /proc/self/statm, with open/read only. */
static inline long mb_rss(void)
{
    char buf[128];
    int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = 0;
    char *p = buf;
    while (*p && *p != ' ')
        p++;
    return strtol(p, NULL, 10) * sysconf(_SC_PAGESIZE);
}

static inline long mb_minflt(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_minflt;
}

/* Peak resident bytes of this program: VmHWM from /proc/self/status;
 * ru_maxrss only where /proc cannot be read.  ru_maxrss keeps the peak of
 * the image before exec (a fork of the shell or of python that started us),
 * and since Linux 6.2 getrusage reads the RSS counters without their
 * per-CPU parts, lagging the truth by up to 64 pages a CPU: a program at
 * 7.50 MiB (VmHWM and statm) read 7.30 MiB there, and threadreq's peak
 * read 0.2-0.3 MiB below its own RSS at the end. */
static inline long mb_maxrss(void)
{
    char buf[4096];
    int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
    ssize_t n = fd < 0 ? -1 : read(fd, buf, sizeof buf - 1);
    if (fd >= 0)
        close(fd);
    if (n > 0) {
        buf[n] = 0;
        const char *p = strstr(buf, "\nVmHWM:");
        if (p)
            return strtol(p + 7, NULL, 10) * 1024L;
    }
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss * 1024L;
}

/* Adds d to *now, the bytes a program holds, and raises *top, their most at
 * once, to the sum if it is higher (prodcons and churn report it as
 * live_peak). */
static inline void mb_live_add(_Atomic(long long) *now, _Atomic(long long) *top,
                               long long d)
{
    long long v = atomic_fetch_add_explicit(now, d, memory_order_relaxed) + d;
    long long t = atomic_load_explicit(top, memory_order_relaxed);
    while (v > t && !atomic_compare_exchange_weak_explicit(
                        top, &t, v, memory_order_relaxed, memory_order_relaxed))
        ;
}

static inline uint64_t mb_rnd(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

/* freeidle.c's mix: 70% 16 B-1 KiB, 25% 1-64 KiB, 5% 64 KiB-1 MiB. */
static inline size_t mb_mixed_size(uint64_t *s)
{
    uint64_t r = mb_rnd(s);
    unsigned k = (unsigned)(r % 100);
    r >>= 8;
    return k < 70   ? 16 + r % 1009
           : k < 95 ? 1024 + r % (63 * 1024)
                    : 65536 + r % (960 * 1024);
}

/* Sleeps until t0 + ms (monotonic). */
static inline void mb_sleep_until(double t0, long ms)
{
    double due = t0 + (double)ms / 1000.0;
    struct timespec ts = {(time_t)due, (long)((due - (double)(time_t)due) * 1e9)};
    clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
}

#endif
