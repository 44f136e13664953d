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

/* Gives every free page of the heap back to the OS now. */
void mote__heap_release_all(void);

/* Whether p lies in memory the heap has mapped now (a segment, or a huge
 * block in use), so that a read of it cannot fault: an object the program
 * may already have freed (and the heap unmapped) can be checked for its
 * magic number then.  One byte load; any thread. */
bool mote__heap_mapped(const void *p);

#endif
