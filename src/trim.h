/*
 * trim.h - stacks that cost what tasks use now.
 *
 * Each worker trims its own tasks' stacks, in its own thread, between
 * tasks: a task pinned to a worker never runs while that worker trims, so
 * no trim can race a running task, with no lock and no flag.
 *   - Parked tasks: a task that parks joins its worker's candidate list; once
 *     it has stayed parked for the delay (MOTE_STACK_TRIM=lazy: 20 ms;
 *     eager: at the next scheduling point), mincore finds its resident
 *     pages below the page holding its saved stack pointer, and those go back
 *     with MADV_DONTNEED, up to 1024 ranges per system call.  mincore's
 *     answer is also the task's high-water mark since its last trim.
 *   - Pooled stacks: one task in 256 starts on a stack trimmed to its top
 *     page, so its exit measures its own depth; the pool keeps that much
 *     resident (so steady spawning takes no fault) and
 *     trims deeper pages after a decay period; stacks that sat unused for a
 *     whole period are decommitted whole and go cold.
 *   - Memory limit: near MOTE_MEMLIMIT every worker trims everything now
 *     and the heap is scavenged; past it mote_go fails with -ENOMEM.
 */
#ifndef MOTE_TRIM_H
#define MOTE_TRIM_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/uio.h>

#include "stack.h"

typedef struct task task;

#define TRIM_NBUCKET 19 /* high water <= 4 KiB << i, i = 0..18 (1 GiB) */
#define TRIM_BATCH 256

typedef struct trim_state {
    task *head, *tail;      /* parked candidates, oldest first */
    uint32_t n;
    int64_t delay;          /* ns a task stays parked before a trim; <0 off */
    int64_t clock;          /* coarse now, refreshed at scheduling checks */
    int64_t next;           /* when mote__trim_run next has work; INT64_MAX none */
    int64_t next_decay;     /* next pool decay */
    uint32_t starts;
    uint64_t pool_depth;    /* bytes the pool keeps resident per stack */
    uint64_t trimmed;       /* bytes given back (single writer) */
    uint64_t hist[TRIM_NBUCKET]; /* live tasks by last high water */
    size_t nbatch;
    struct iovec batch[TRIM_BATCH];
    task *ready[TRIM_BATCH];      /* matured candidates, trimmed together */
    unsigned char vec[16 * 1024]; /* mincore answers: 64 MiB of stack */
} trim_state;

void mote__trim_init(trim_state *s, int mode);
/* A task parks: cheap; queues it once. */
void mote__trim_on_park(trim_state *s, task *t);
/* A task takes its stack (before it first runs): maybe a depth sample. */
void mote__trim_on_start(trim_state *s, task *t);
/* A task has exited (stack still held): unqueue, finish a sample. */
void mote__trim_on_exit(trim_state *s, task *t);
/* Does what is due at time now; current (the task executing this call, or
 * NULL) is never trimmed.  force trims every parked task and the whole pool
 * at once.  Sets s->next. */
void mote__trim_run(trim_state *s, stack_cache *cache, task *current,
                 int64_t now, bool force);
/* Drops all state; tasks are about to be destroyed. */
void mote__trim_fini(trim_state *s);

/* Totals over all workers of a running runtime, for metrics. */
uint64_t mote__trim_total_trimmed(void);

#endif /* MOTE_TRIM_H */
