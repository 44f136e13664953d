/*
 * task.h - the task descriptor.
 *
 * A task is owned by one worker once it has started (tasks never migrate,
 * so errno and thread-locals stay right); before that it sits in a worker's
 * fresh queue, from which idle workers may steal it.  Field ownership:
 *   - ctx, next, timer fields, list links, trim state: the owning worker;
 *   - wait_state: atomic, the claim protocol of park.h;
 *   - wake_result: written by the claimer before the ready, read by the
 *     task after it resumes (ordered by the ready hand-off);
 *   - waits: the task's own records (waitq.h), read by teardown only when
 *     no task runs.
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
#include "list.h"
#include "mote.h"
#include "park.h"
#include "sanfiber.h"
#include "stack.h"
#include "timer.h"

enum task_wait { TASK_RUNNING = 0, TASK_WAITING = 1, TASK_CLAIMED = 2 };

struct worker;
struct waiter;

struct task { /* ordered to pack: 160 bytes in a plain build */
    arch_ctx ctx;
    task *next;            /* run queue, fresh queue or inbox link */
    struct worker *worker; /* owner, from the first run on */
    int wait_state;        /* enum task_wait, atomic */
    int wake_result;
    const char *wait_why;
    const void *wait_obj;
    struct waiter *waits; /* records of the current wait (waitq.h) */
    int64_t deadline;     /* timer, when timer_idx != TIMER_NONE */
    uint64_t id;
    mote_fn fn;
    void *arg;
    const char *name;
    stack_slot stack;
    list_node all_link; /* the worker's list of started tasks */
    union {
        list_node trim_link;     /* the worker's trim candidates (parked) */
        struct fz_image *fz_img; /* frozen: its live bytes (freeze.c) */
    };
    int64_t parked_at; /* atomic: clock at the last park, or when the
                               netpoller readied it (io_woken) */
    uint32_t timer_idx;
    bool started;
    bool is_main; /* its return ends the run */
    bool trim_queued;
    bool hw_sample;         /* started on a trimmed stack: measure it (atomic
                               stores: the fault handler reads it) */
    int8_t hw_bucket;       /* last measured high water, -1 unknown */
    bool io_woken;          /* readied by the netpoller: parked_at is then
                               when (wake-up latency metric) */
    uint8_t trim_shift : 3; /* its trim delay is the base << this (trim.c) */
    uint8_t trimmed : 1;    /* trimmed since it parked; still a freeze candidate */
    uint8_t fz_shift : 3;   /* its freeze threshold is MOTE_STACK_FREEZE << this */
    uint8_t in_limbo : 1;   /* queued on trim_state.limbo, not .parked (trim.c) */
    uint8_t fz;             /* atomic: freeze state and lock bits (freeze.h) */
    uint32_t fz_hold;       /* atomic: threads between a touch and its access */
    sanfiber_ctx san;       /* sanitizer and valgrind stack state */
};

/* Allocates a task that will run on a stack of class cls.  0 or -ENOMEM. */
int mote__task_create(mote_fn fn, void *arg, const char *name, int cls, task **out);
/* Releases the stack (if the task started) into cache, frees the task. */
void mote__task_destroy(task *t, stack_cache *cache);
/* Name for diagnostics: the given name or the entry function's symbol. */
const char *mote__task_display_name(const task *t, char *buf, size_t len);

#endif /* MOTE_TASK_H */
