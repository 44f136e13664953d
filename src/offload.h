/*
 * offload.h - the blocking-call pool behind mote_offload: plain threads
 * that run calls which would block a worker (name resolution, disk reads,
 * any library call that waits), while the calling task is parked.
 */
#ifndef MOTE_OFFLOAD_H
#define MOTE_OFFLOAD_H

#include <stdint.h>

/* At the start of a run: the pool's cap (MOTE_BLOCKING_THREADS). */
void mote__offload_configure(uint32_t max_threads);
/* Calls queued or running: a task waiting for one can still be woken. */
uint64_t mote__offload_pending(void);
/* Pool threads now, and calls queued for one. */
uint64_t mote__offload_threads(void);
uint64_t mote__offload_queued(void);

#endif /* MOTE_OFFLOAD_H */
