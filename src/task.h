/*
 * task.h - the task descriptor, the worker, and the runtime they live in.
 *
 * A task is owned by one worker once it has started (tasks never migrate,
 * so errno and thread-locals stay right); before that it sits in a worker's
 * fresh queue, from which idle workers may steal it.  Field ownership:
 *   - ctx, next, timer fields, list links: the owning worker only;
 *   - wait_state: atomic, the claim protocol of sched.h;
 *   - wake_result: written by the claimer before sched_ready, read by the
 *     task after it resumes (ordered by the ready hand-off).
 * The descriptor lives in the heap, not on the stack, so spawning touches no
 * stack page: the first page fault of a stack is taken by the worker that
 * runs the task, in parallel with the spawner.
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

struct task {
    arch_ctx ctx;
    task *next;             /* run queue, fresh queue or inbox link */
    struct worker *worker;  /* owner, from the first run on */
    int wait_state;         /* enum task_wait, atomic */
    int wake_result;
    const char *wait_why;
    const void *wait_obj;
    int64_t deadline;       /* timer, when timer_idx != TIMER_NONE */
    uint32_t timer_idx;
    bool started;
    uint64_t id;
    mote_fn fn;
    void *arg;
    const char *name;
    stack_slot stack;
    task *all_prev, *all_next; /* the worker's list of started tasks */
    sanfiber_ctx san;          /* sanitizer and valgrind stack state */
};

/* Allocates a task with a stack of class cls from cache.  0 or -ENOMEM. */
int task_create(mote_fn fn, void *arg, const char *name, int cls,
                stack_cache *cache, task **out);
/* Releases the stack into cache and frees the descriptor. */
void task_destroy(task *t, stack_cache *cache);
/* Name for diagnostics: the given name or the entry function's symbol. */
const char *task_display_name(const task *t, char *buf, size_t len);

#endif /* MOTE_TASK_H */
