/*
 * benchutil.h - small helpers shared by mote's C benchmarks: memory figures
 * read from the kernel (/proc/self/status, getrusage), metrics that may not
 * exist yet, and the memory guard.  Header-only; nothing here allocates
 * through mote.
 */
#ifndef MOTE_BENCHUTIL_H
#define MOTE_BENCHUTIL_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "mote.h"

typedef struct bench_status {
    int64_t rss, hwm, pte; /* bytes: VmRSS, VmHWM, VmPTE */
} bench_status;

/* Reads VmRSS/VmHWM/VmPTE with plain read(2)-backed stdio; ~10 us. */
static inline bench_status bench_read_status(void)
{
    bench_status s = {0, 0, 0};
    char line[256];
    FILE *f = fopen("/proc/self/status", "r");
    if (!f)
        return s;
    while (fgets(line, sizeof line, f)) {
        long long v;
        if (sscanf(line, "VmRSS: %lld", &v) == 1)
            s.rss = (int64_t)v << 10;
        else if (sscanf(line, "VmHWM: %lld", &v) == 1)
            s.hwm = (int64_t)v << 10;
        else if (sscanf(line, "VmPTE: %lld", &v) == 1)
            s.pte = (int64_t)v << 10;
    }
    fclose(f);
    return s;
}

static inline int64_t bench_maxrss(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (int64_t)ru.ru_maxrss << 10;
}

static inline int64_t bench_minflt(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (int64_t)ru.ru_minflt;
}

static inline int64_t bench_clock_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* A metric, or -1 when the runtime does not have it (yet). */
static inline int64_t bench_metric(const char *name)
{
    uint64_t v = 0;
    if (mote_metric(name, &v) != 0)
        return -1;
    return (int64_t)v;
}

/* Stop growing past this many resident bytes (env BENCH_MEM_GUARD, default
 * 20 GiB): the machine is shared and has 24 GiB. */
static inline int64_t bench_mem_guard(void)
{
    const char *g = getenv("BENCH_MEM_GUARD");
    if (g && *g)
        return strtoll(g, NULL, 10);
    return (int64_t)20 << 30;
}

#endif /* MOTE_BENCHUTIL_H */
