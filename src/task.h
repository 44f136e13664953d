/*
 * task.h - the task descriptor, the worker, and the runtime they live in.
 *
 * A task is owned by one worker once it has started (tasks never migrate,
 * so errno and thread-locals stay right); before that it sits in a worker's
 * fresh queue, from which idle workers may steal it.  Field ownership:
 *   - ctx, next, timer fields, list links: the owning worker only;
 *   - wait_state: atomic, the claim protocol of sched.h;
 *   - wake_result: written by the claimer before mote__sched_ready, read by the
 *     task after it resumes (ordered by the ready hand-off).
 * The descriptor lives in the heap, not on the stack, and the stack is taken
 * from the running worker's pool only when the task first runs: a program
 * that spawns a million tasks and then waits reuses a few warm stacks
 * instead of faulting in a million, and a spawner never touches the stacks.
 */
#ifndef MOTE_TASK_H
#define MOTE_TASK_H

#include <stdbool.h>
#include <stdint.h>

#include "arch/arch.h"
#include "mote.h"
#include "sched.h"
#include "stack.h"
#include "sanfiber.h"
#include "timer.h"

enum task_wait { TASK_RUNNING = 0, TASK_WAITING = 1, TASK_CLAIMED = 2 };

struct worker;

struct task { /* ordered to pack: 152 bytes in a plain build */
    arch_ctx ctx;
    task *next;             /* run queue, fresh queue or inbox link */
    struct worker *worker;  /* owner, from the first run on */
    int wait_state;         /* enum task_wait, atomic */
    int wake_result;
    const char *wait_why;
    const void *wait_obj;
    int64_t deadline;       /* timer, when timer_idx != TIMER_NONE */
    uint64_t id;
    mote_fn fn;
    void *arg;
    const char *name;
    stack_slot stack;
    task *all_prev, *all_next;   /* the worker's list of started tasks */
    task *trim_prev, *trim_next; /* the worker's trim candidates */
    int64_t parked_at;           /* coarse clock at the last park */
    uint32_t timer_idx;
    bool started;
    bool is_main;                /* its return ends the run */
    bool trim_queued;
    bool hw_sample;              /* started on a trimmed stack: measure it */
    int8_t hw_bucket;            /* last measured high water, -1 unknown */
    sanfiber_ctx san;            /* sanitizer and valgrind stack state */
};

/* Allocates a task that will run on a stack of class cls.  0 or -ENOMEM. */
int mote__task_create(mote_fn fn, void *arg, const char *name, int cls, task **out);
/* Releases the stack (if the task started) into cache, frees the task. */
void mote__task_destroy(task *t, stack_cache *cache);
/* Name for diagnostics: the given name or the entry function's symbol. */
const char *mote__task_display_name(const task *t, char *buf, size_t len);

#endif /* MOTE_TASK_H */
