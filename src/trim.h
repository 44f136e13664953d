/*
 * trim.h - stacks that cost what tasks use now.
 *
 * Each worker trims its own tasks' stacks, in its own thread, between
 * tasks: a task pinned to a worker never runs while that worker trims, so
 * no trim can race a running task, with no lock and no flag.
 *   - Parked tasks: a task that parks joins its worker's candidate list; once
 *     it has stayed parked for the delay (MOTE_STACK_TRIM=lazy: 20 ms,
 *     longer per task, see trim.c; eager: at the next scheduling point),
 *     mincore finds its resident pages below the page holding its saved
 *     stack pointer, and those go back
 *     with MADV_DONTNEED, in batches (pagebatch.h).  mincore's answer is also
 *     the task's high-water mark since its last trim.
 *   - Depth samples: one task in 256 starts on a stack trimmed to its top
 *     page, so its exit measures its own depth; the pool keeps that much
 *     resident (pool_depth), so steady spawning takes no fault.
 *   - Pooled stacks: every decay period the worker's pool decays
 *     (mote__stack_pool_decay, stack.c).
 *   - Memory pressure and mote_mem_release: everything at once (force).
 */
#ifndef MOTE_TRIM_H
#define MOTE_TRIM_H

#include <stdbool.h>
#include <stdint.h>

#include "atomic.h"
#include "freeze.h"
#include "list.h"
#include "pagebatch.h"
#include "stack.h"
#include "stackprof.h"

typedef struct task task;

#define TRIM_NBUCKET 19 /* high water <= 4 KiB << i, i = 0..18 (1 GiB) */
#define TRIM_BATCH   256

enum trim_mode { TRIM_OFF = 0, TRIM_LAZY = 1, TRIM_EAGER = 2 };

typedef struct trim_state {
    list parked; /* candidates (task.trim_link), oldest first */
    uint32_t n;
    /* Tasks of ours thawed in place (FZ_ORPHAN), found by a sweep of all:
     * orphaned says one is waiting (atomic: set by the thawing thread,
     * mote__trim_orphaned); limbo holds the last step's finds. */
    int orphaned;
    bool sweep_again; /* orphaned again during a sweep: one more */
    list *all;        /* the worker's started tasks (task.all_link) */
    list_node *sweep_at;
    int64_t sweep_next;
    list limbo;
    int64_t delay;      /* ns a task stays parked before a trim; <0 off */
    int64_t clock;      /* coarse now, refreshed at scheduling checks */
    int64_t next;       /* when mote__trim_run next has work; INT64_MAX none */
    int64_t next_decay; /* next pool decay */
    uint32_t starts;
    uint64_t pool_depth;         /* bytes the pool keeps resident per stack */
    uint64_t hist[TRIM_NBUCKET]; /* live tasks by last high water (atomic) */
    task *ready[TRIM_BATCH];     /* matured candidates, trimmed together */
    stackprof *prof;             /* the worker's, for sampled tasks' depths */
    int64_t freeze_after;        /* ns parked before a freeze; < 0 never */
    bool busy;                   /* the worker has tasks ready to run */
    size_t nfreeze;
    task *freeze[FZ_BATCH]; /* candidates, frozen together */
    fz_scratch fz;
    pagebatch pages; /* .released: bytes given back */
} trim_state;

/* all: the worker's list of started tasks, swept for tasks thawed in place
 * (FZ_ORPHAN, freeze.h). */
void mote__trim_init(trim_state *s, int mode, stackprof *prof, list *all);
/* t was woken by the netpoller: it serves a descriptor, and the next
 * request is likely soon, so its trim delay is at least 8x the base. */
void mote__trim_on_io_wake(task *t);
/* A task parks: cheap; queues it once. */
void mote__trim_on_park(trim_state *s, task *t);
/* A task takes its stack (before it first runs): a depth sample when
 * sample (the first of its entry function), or one start in 256. */
void mote__trim_on_start(trim_state *s, task *t, bool sample);
/* Any thread: a task of s's worker was thawed in place (FZ_ORPHAN).  The
 * caller wakes the worker after it. */
static inline void mote__trim_orphaned(trim_state *s) { STORE(&s->orphaned, 1, SEQ_CST); }
/* Whether the worker must run mote__trim_run for an orphan. */
static inline bool mote__trim_orphans_due(trim_state *s)
{
    return LOAD(&s->orphaned, SEQ_CST) != 0;
}
/* t leaves the worker's list of started tasks (before the removal). */
void mote__trim_on_unlist(trim_state *s, task *t);
/* A task has exited (stack still held): unqueue, finish a sample. */
void mote__trim_on_exit(trim_state *s, task *t);
/* Teardown: t is discarded; forget it. */
void mote__trim_forget(trim_state *s, task *t);
/* Does what is due at time now; current (the task executing this call, or
 * NULL) is never trimmed.  force trims every parked task and the whole pool
 * at once.  Sets s->next. */
void mote__trim_run(trim_state *s, stack_cache *cache, task *current, int64_t now,
                    bool force);
/* Drops all state at the end of a run; counts what was released. */
void mote__trim_fini(trim_state *s);

/* Bytes given back by runs that ended, for metrics. */
uint64_t mote__trim_total_trimmed(void);

#endif /* MOTE_TRIM_H */
