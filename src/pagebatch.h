/*
 * pagebatch.h - giving stack pages back to the kernel in batches: find what
 * is resident in a range (the kernel's answer, mincore), queue the ranges
 * to drop, and drop them with as few system calls as possible (1024 ranges
 * per process_madvise).  Used by trim.c (parked tasks) and stack.c (pooled
 * stacks).  A batch belongs to one worker; no locking.
 *
 * Costs measured on this VM: mincore ~0.4 us per stack, MADV_DONTNEED via
 * process_madvise ~0.55 us per range (1.1 us one call each), a page fault
 * to bring a page back 1.3-1.8 us.
 */
#ifndef MOTE_PAGEBATCH_H
#define MOTE_PAGEBATCH_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#define PAGEBATCH_RANGES 256
#define PAGEBATCH_VEC    (16 * 1024) /* mincore answers: 64 MiB of stack */

typedef struct pagebatch {
    size_t n;
    uint64_t released; /* bytes given back (single writer) */
    struct iovec ranges[PAGEBATCH_RANGES];
    unsigned char vec[PAGEBATCH_VEC];
} pagebatch;

/* Lowest resident page in [lo, hi) and how many are resident; *low = hi
 * when none. */
size_t mote__pagebatch_resident(pagebatch *b, uintptr_t lo, uintptr_t hi, uintptr_t *low);
/* Queues [lo, hi), which holds pages resident pages, to be given back
 * (nothing when pages is 0). */
void mote__pagebatch_add(pagebatch *b, uintptr_t lo, uintptr_t hi, size_t pages);
/* Gives back everything resident in [lo, hi); returns the lowest resident
 * address found (hi when none): the high-water mark of that range. */
uintptr_t mote__pagebatch_range(pagebatch *b, uintptr_t lo, uintptr_t hi);
/* Drops everything queued now. */
void mote__pagebatch_flush(pagebatch *b);

#endif /* MOTE_PAGEBATCH_H */
