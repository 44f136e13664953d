/*
 * heap.h - what the rest of the runtime may call in the allocator (the
 * public mote_malloc & co. are in include/mote.h).  Everything here is safe
 * from any thread at any time and never fails because the heap is not yet
 * initialised.
 */
#ifndef MOTE_HEAP_H
#define MOTE_HEAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Reads /heap/inuse:bytes, /heap/free:bytes, /heap/released:bytes or
 * /heap/mapped:bytes: 0, or -ENOENT for any other name. */
int mote__heap_metric(const char *name, uint64_t *value);
/* Calls fn for each of the heap's metrics, in a stable order. */
void mote__heap_metric_each(void (*fn)(const char *name, uint64_t value, void *ctx),
                            void *ctx);

/* Bytes the heap holds that may be resident: mapped minus released.  An
 * upper bound on the heap's share of RSS (pages never touched count too). */
size_t mote__heap_committed_bytes(void);

/* Sets the hard limit on mote__heap_committed_bytes() (0: none).  Past 90% of it
 * every free page is returned at once; an allocation that would still pass
 * it fails with NULL/ENOMEM.  Returns 0.  MOTE_MEMLIMIT sets it at start. */
int mote__heap_set_limit(uint64_t bytes);

/* A run's MOTE_MEMLIMIT covers the whole process: the heap's limit becomes
 * limit less others, what the rest of the process holds (stacks, code),
 * but never under limit / 16; limit 0 puts back the heap's own
 * (MOTE_MEMLIMIT as read at the heap's start).  Cheap enough to call
 * whenever the process's RSS is read again. */
void mote__heap_limit_share(uint64_t limit, uint64_t others);

/* The heap profiler walks a sample's stack only inside the stack it
 * knows holds the sampling thread's sp: its thread's.  The runtime names
 * the other kind here, once: top_of(sp) is the top of the task stack
 * that holds sp, or 0 (called on the sampling path: it must not allocate
 * or lock). */
void mote__heap_set_task_stacks(uintptr_t (*top_of)(uintptr_t sp));

/* Gives every free page of the heap back to the OS now. */
void mote__heap_release_all(void);
/* What this thread's cache holds free goes back (its part of
 * mote__heap_release_all, which reaches no other live thread's cache). */
void mote__heap_release_own(void);

/* For a thread about to sleep (a worker with nothing to run): the blocks
 * other threads freed to it come in, and those of other threads it freed
 * or kept go home, so no memory waits on a thread that sleeps.  A few
 * loads when there is nothing to do. */
void mote__heap_thread_idle(void);
/* This thread's cache, as a handle for mote__heap_frees_waiting; NULL
 * while it has none. */
const void *mote__heap_thread_cache(void);
/* Whether blocks other threads freed wait for the thread of cache c (a
 * handle from mote__heap_thread_cache, valid for good) to take them in.
 * Any thread; two loads. */
bool mote__heap_frees_waiting(const void *c);

/* Whether p lies in memory the heap has mapped now (a segment, or a huge
 * block in use), so that a read of it cannot fault: an object the program
 * may already have freed (and the heap unmapped) can be checked for its
 * magic number then.  One byte load; any thread. */
bool mote__heap_mapped(const void *p);

#endif
