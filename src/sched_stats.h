/*
 * sched_stats.h - a snapshot of the scheduler's counters for metrics.  Read
 * without stopping anything: counters are single-writer, so the snapshot is
 * a consistent-enough sum, never torn per value.
 */
#ifndef MOTE_SCHED_STATS_H
#define MOTE_SCHED_STATS_H

#include <stdint.h>

#include "trim.h"

typedef struct sched_stats {
    uint64_t live, runnable, blocked, spawned, workers;
    uint64_t stacks_in_use, stacks_pooled, stacks_trimmed;
    uint64_t highwater[TRIM_NBUCKET]; /* live tasks by last high water */
    uint64_t io_wake[5];              /* netpoller wake-ups by latency bucket, this run */
} sched_stats;

void mote__sched_stats_read(sched_stats *s);

#endif
