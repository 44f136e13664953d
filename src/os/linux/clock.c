/*
 * clock.c - the clocks mote reads (see os.h): monotonic ones, and the wall
 * clock for a heap profile's time stamp.  All go through the
 * vDSO: no system call, no allocation.
 */
#include "os/os.h"

#include <time.h>

static int64_t os_clock_ns(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t mote__os_now_ns(void) { return os_clock_ns(CLOCK_MONOTONIC); }

int64_t mote__os_wall_ns(void) { return os_clock_ns(CLOCK_REALTIME); }

int64_t mote__os_coarse_ns(void) { return os_clock_ns(CLOCK_MONOTONIC_COARSE); }

int64_t mote__os_thread_cpu_ns(void) { return os_clock_ns(CLOCK_THREAD_CPUTIME_ID); }

uint32_t mote__os_coarse_ms(void)
{
    return (uint32_t)(os_clock_ns(CLOCK_MONOTONIC_COARSE) / 1000000);
}
