/*
 * runtime.h - the state of a run, shared by the scheduler's files: the
 * workers and their queues, the run's configuration, and the counters
 * metrics read.  Only sched.c starts and ends a run; park.c, task_api.c,
 * deadlock.c, memlimit.c and sched_stats.c use what is here.
 *
 * Each worker is one OS thread (the first is the thread that called
 * mote_run) and owns:
 *   - rq: started tasks ready to run, FIFO.  Owner only, no lock.
 *   - inbox: tasks readied by other threads.  A lock-free LIFO stack that
 *     wakers push with one CAS and the owner empties with one exchange.
 *   - fresh: spawned, never-run tasks.  Spin-locked FIFO; idle workers steal
 *     from it, which is how spawns spread (a few new tasks only once their
 *     own worker has left them waiting 20 us).  A task that has run never
 *     moves.
 *   - timers, a stack cache and the trim state of its parked tasks.  Owner
 *     only: a worker trims only its own tasks, between tasks, so no trim
 *     races a running task.
 *
 * Wake-ups are never lost: a waker pushes, then reads the target's
 * `sleeping` word; a worker going to sleep sets that word, then re-checks
 * its queues (both sides seq_cst), so at least one of them sees the other.
 *
 * ext_lock (a rwlock) is read-locked by spawns from plain threads, metric
 * reads and mote_mem_release, from any thread; teardown write-locks it only
 * after every worker has been joined, so no worker ever waits on it.
 */
#ifndef MOTE_RUNTIME_H
#define MOTE_RUNTIME_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "arch/arch.h"
#include "atomic.h"
#include "list.h"
#include "sanfiber.h"
#include "spin.h"
#include "stack.h"
#include "stackprof.h"
#include "task.h"
#include "timer.h"
#include "trim.h"

typedef struct worker {
    int index;
    pthread_t thread;
    arch_ctx sched_ctx; /* the worker's own context */
    task *current;
    task *rq_head, *rq_tail;
    uint32_t rq_n;         /* tasks on the ready queue */
    uint32_t round_left;   /* ready tasks still to run in this round */
    uint32_t fresh_budget; /* fresh tasks to start before the round's ready ones */
    task *inbox;           /* atomic */
    int fresh_lock;
    task *fresh_head, *fresh_tail;
    uint32_t fresh_n; /* atomic, for thieves to peek */
    /* When a thief first found fresh tasks here (0: none since the queue
     * was last empty; under fresh_lock).  Thieves leave a few of them to
     * this worker for SCHED_STEAL_AGE_NS from then (sched.c). */
    int64_t fresh_eyed;
    int sleeping; /* futex word */
    timer_heap timers;
    stack_cache stacks;
    task *dead;   /* exited; released after the next switch */
    task *exited; /* a sampled task jumped out; its books are ours */
    /* No stack could be mapped for a new task: none starts before
     * starved_retry (0: try now); starved_from: since when (0 once one
     * started), read by the deadlock check under idle_lock. */
    int64_t starved_retry, starved_from, starved_released;
    bool release_due;      /* a chore: mote_mem_release for a starved task */
    int64_t last_poll;     /* when this worker last polled (ns) */
    bool chores;           /* due: to do in the worker's own context */
    uint32_t release_seen; /* the release_epoch this worker acted on */
    list all;              /* started tasks, for dumps and teardown */
    uint64_t id_next, id_end;
    uint32_t tick;
    uint64_t rng;
    /* single-writer statistics (COUNT) */
    uint64_t n_spawned, n_exited, n_started;
    int64_t n_blocked;
    sanfiber_ctx san; /* the scheduler context's sanitizer state */
    /* Read by the monitor and the task dump from other threads: */
    int tid;           /* the thread's kernel id */
    uint64_t switches; /* atomic (single writer): every switch */
    task *running;     /* atomic: the task on the CPU, or NULL */
    task *hazard;      /* atomic: a task the monitor is reading */
    /* atomic: the thread's heap cache (memory.c) */
    const void *heap_cache;
    uint32_t dump_seen; /* the dump request this worker answered */
    char *dump_text;    /* its answer (malloc'd by open_memstream) */
    size_t dump_len;
    /* A stalled task's backtrace, taken by a signal on this thread: */
    uintptr_t stall_pcs[24];
    int stall_npcs;
    uint32_t stall_seq; /* atomic: bumped when stall_pcs is set */
    /* I/O wake-up latency: readied by the netpoller -> running, counted
     * by bucket (<= 10 us, 100 us, 1 ms, 10 ms, more); single writer. */
    uint64_t io_wake[5];
    stackprof stackprof; /* depths by entry function (stackprof.h) */
    trim_state trim;
} __attribute__((aligned(64))) worker;

/* A run's configuration, read from the environment by mote_run. */
typedef struct run_config {
    int workers;
    size_t stack_size;
    int trim; /* enum trim_mode */
    bool guard_mprotect;
    uint32_t blocking_threads;
    bool debug_stalls; /* MOTE_DEBUG=stalls */
    bool sigquit_dump; /* MOTE_SIGQUIT=dump */
    int64_t freeze_ns; /* MOTE_STACK_FREEZE, -1 off */
    bool freeze_explicit;
    uint64_t memlimit; /* bytes; 0 none */
} run_config;

typedef struct runtime {
    int state;        /* atomic: 0 idle, 1 starting or running */
    int shutdown;     /* atomic: workers stop at their next pick */
    int teardown;     /* atomic: plain-thread claims now fail */
    int plain_claims; /* atomic: plain-thread claims not yet readied */
    int result;
    int starve_said; /* atomic: "no memory for a stack" printed this run */
    int nworkers;
    int default_cls;
    worker *w; /* atomic pointer */
    run_config cfg;
    uint64_t memlimit;        /* atomic copy for plain threads */
    uint64_t next_id;         /* atomic */
    uint64_t ext_spawned;     /* atomic */
    uint32_t ext_rr;          /* atomic */
    int external_seen;        /* atomic */
    int nsleeping, nspinning; /* atomic */
    int spin_max;             /* spinners at once: the CPUs online */
    pthread_mutex_t idle_lock;
    int nidle_notimer;
    pthread_rwlock_t ext_lock; /* plain threads vs teardown */
    uint64_t mem_used;         /* atomic: RSS at the last check */
    int64_t mem_checked;       /* atomic: when */
    int pressure;              /* atomic: near MOTE_MEMLIMIT */
    uint32_t release_epoch;    /* atomic: bumped by mote_mem_release */
    uint32_t dump_epoch;       /* atomic: bumped by mote_tasks_dump */
    int dump_lock;             /* one dump at a time */
} runtime;

extern runtime mote__rt;
/* The worker this thread is, or NULL on a plain thread. */
extern __thread worker *mote__worker_self __attribute__((tls_model("initial-exec")));

/* ---- the queues ---------------------------------------------------------- */

static inline void rq_push(worker *w, task *t)
{
    t->next = NULL;
    if (w->rq_tail)
        w->rq_tail->next = t;
    else
        w->rq_head = t;
    w->rq_tail = t;
    w->rq_n++;
}

static inline task *rq_pop(worker *w)
{
    task *t = w->rq_head;
    if (t) {
        w->rq_head = t->next;
        if (!w->rq_head)
            w->rq_tail = NULL;
        w->rq_n--;
    }
    return t;
}

static inline void inbox_push(worker *w, task *t)
{
    task *old = LOAD(&w->inbox, RELAXED);
    do
        t->next = old;
    while (!CAS_WEAK(&w->inbox, &old, t, SEQ_CST));
}

static inline void fresh_push(worker *w, task *t)
{
    t->next = NULL;
    spin_lock(&w->fresh_lock);
    if (w->fresh_tail)
        w->fresh_tail->next = t;
    else
        w->fresh_head = t;
    w->fresh_tail = t;
    STORE(&w->fresh_n, w->fresh_n + 1, SEQ_CST);
    spin_unlock(&w->fresh_lock);
}

/* ---- wake-ups (sched.c) ----------------------------------------------------- */

/* Wakes v if it sleeps; true when it did. */
bool mote__sched_wake(worker *v);
/* Gets a sleeping worker other than self looking for work, unless one is
 * already spinning (it will find it). */
void mote__sched_wake_idle(worker *self);
/* Picks the next task for w (NULL: none); may run due timers and trims. */
task *mote__sched_pick(worker *w);
/* Switches from the running context (task from, or the worker's own
 * context when NULL) to to (likewise); returns when from runs again. */
void mote__sched_switch(worker *w, task *from, task *to);

/* ---- MOTE_MEMLIMIT, mote_mem_release, trimming policy (memory.c) ---- */

/* The process's resident bytes, re-read at most every 10 ms (now when
 * force); entering the pressure zone releases free memory once. */
uint64_t mote__memory_used(bool force);
/* Trimming's share of a scheduling point: what is due, or everything when
 * pressure or a release request says so.  Needs stack: the worker's own
 * context only. */
void mote__memory_trim(worker *w, int64_t now);
/* Whether mote__memory_trim has anything to do at now (cheap); a release
 * request is the caller's to check (sched_chores_due). */
bool mote__memory_trim_due(worker *w, int64_t now);
/* A worker about to sleep: frees in flight to and from its heap cache
 * settle, and sleeping workers that frees wait for are woken to take them
 * in. */
void mote__memory_idle(worker *w);
/* Whether frees made on other threads wait for w's heap cache. */
bool mote__memory_frees_waiting(worker *w);

/* ---- statistics (sched_stats.c) ---------------------------------------------- */

/* At teardown: adds this run's counters to the totals that outlive it. */
void mote__sched_stats_fold(void);
/* A task readied by the netpoller starts running on w. */
void mote__sched_stats_io_wake(worker *w, task *t);

/* ---- the task dump (dump.c) --------------------------------------------------- */

/* At a scheduling point of w (no task of w running but the caller): answers
 * a pending dump request. */
void mote__dump_answer(worker *w);
/* Frees w's dump answer, if one is left (teardown, or one that came late). */
void mote__dump_forget(worker *w);

/* ---- deadlock detection (deadlock.c) --------------------------------------- */

/* With idle_lock held, by a worker about to sleep with no timer: when no
 * task can ever run again, prints the report and returns the run's result:
 * -EDEADLK, or -ENOMEM when new tasks are left that have found no memory
 * for their stacks for SCHED_STARVED_GIVEUP; else 0. */
#define SCHED_STARVED_GIVEUP 1000000000 /* ns */
int mote__deadlock_check(void);

#endif /* MOTE_RUNTIME_H */
