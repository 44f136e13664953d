/*
 * stackprof.h - how deep tasks really go, per entry function, in bytes:
 * the runtime's half of mote-stack (tools/mote-stack).  A task is sampled
 * when it is the first of its entry function a worker starts, and one start
 * in 256 otherwise; a sampled task starts on a stack whose pages below the
 * top one are decommitted and whose top page is zeroed below its first
 * frame, so the lowest non-zero byte it leaves (found through mincore and a
 * scan of one page) is how deep it went.  Depths are counted from the
 * entry function's caller's %rsp before the call, as mote-stack counts
 * frames, so `mote-stack check BINARY REPORT` compares like with like.
 */
#ifndef MOTE_STACKPROF_H
#define MOTE_STACKPROF_H

#include <stdbool.h>
#include <stdint.h>

#include "mote.h"

#define STACKPROF_SLOTS 256

typedef struct stackprof_entry {
    mote_fn fn;     /* atomic: set once, then the counters follow */
    uint64_t tasks; /* started (single writer: the worker) */
    uint64_t sampled;
    uint64_t max_depth;  /* bytes below the entry's caller's %rsp */
    uint64_t stack_size; /* largest class seen */
} stackprof_entry;

/* A worker's table; owner writes, anyone reads (atomics). */
typedef struct stackprof {
    stackprof_entry e[STACKPROF_SLOTS];
    uint32_t n, overflow;
} stackprof;

struct task;

/* A task of fn starts on the owner's worker: counted; true when it is the
 * first of fn here, so it must be sampled. */
bool mote__stackprof_start(stackprof *p, mote_fn fn, uint64_t stack_size);
/* A sampled task of fn reached depth bytes below its stack top. */
void mote__stackprof_depth(stackprof *p, mote_fn fn, uint64_t depth_from_top);
/* task_entry, first thing: the distance from a stack's top to the entry
 * function caller's %rsp (the same for every task of a build). */
void mote__stackprof_note_entry(uintptr_t top, uintptr_t rsp);
/* Teardown: folds a worker's table into the totals that outlive the run. */
void mote__stackprof_fold(stackprof *p);

#endif /* MOTE_STACKPROF_H */
