/*
 * lock.h - the allocator's own lock: a three-state futex mutex (0 free,
 * 1 held, 2 held with waiters).  Owns nothing else.  It never allocates, so
 * it can be used from inside malloc, and it is a plain int, so a fork child
 * re-initialises it by storing 0.  Acquire/release atomics give TSan the
 * happens-before edges it needs.
 */
#ifndef MOTE_HEAP_LOCK_H
#define MOTE_HEAP_LOCK_H

#include <stdbool.h>
#include <stdint.h>

#include "atomic.h"
#include "os/os.h"

typedef struct heap_lock {
    int v;
} heap_lock;

#define HEAP_LOCK_INIT \
    {                  \
        0              \
    }

void mote__heap_lock_slow(heap_lock *l);
/* Acquires l if it can within timeout_ns; false if not (l untouched but
 * marked contended, which costs its holder one futex wake). */
bool mote__heap_lock_timed(heap_lock *l, int64_t timeout_ns);

static inline void heap_lock_acquire(heap_lock *l)
{
    int c = 0;
    if (__builtin_expect(CAS(&l->v, &c, 1, ACQUIRE), 1))
        return;
    mote__heap_lock_slow(l);
}

static inline void heap_lock_release(heap_lock *l)
{
    if (XCHG(&l->v, 0, RELEASE) == 2)
        mote__os_futex_wake(&l->v, 1);
}

#endif
