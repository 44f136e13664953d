/*
 * monitor.h - the run's monitor thread: stall detection (a task that runs
 * more than 10 ms without parking, a worker stuck in a raw blocking system
 * call), the SIGQUIT task dump, and waking idle workers to take the
 * unstarted tasks of a stuck one.
 */
#ifndef MOTE_MONITOR_H
#define MOTE_MONITOR_H

#include <stdbool.h>
#include <stdint.h>

struct worker;

/* Starts the monitor for the run being started (after the workers exist);
 * stop joins it, before teardown destroys anything.  start returns 0 or
 * -errno (the run then goes without one). */
int mote__monitor_start(void);
void mote__monitor_stop(void);

/* A worker left a long sleep: wake the monitor if it sleeps deeply too. */
void mote__monitor_poke(void);

/* Stalls detected in this process (all runs). */
uint64_t mote__monitor_stalls(void);

/* With MOTE_DEBUG=stalls, the monitor interrupts a stalled worker with
 * this signal to take the running task's backtrace. */
void mote__monitor_thread_init(struct worker *w);

#endif /* MOTE_MONITOR_H */
