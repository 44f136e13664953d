/*
 * lock.c - the slow path of the allocator's lock (lock.h): spin briefly,
 * then mark the lock contended and sleep on its futex.
 */
#include "heap/lock.h"

#include "spin.h"

void mote__heap_lock_slow(heap_lock *l)
{
    for (int i = 0; i < 64; i++) {
        int c = 0;
        if (LOAD(&l->v, RELAXED) == 0 && CAS_WEAK(&l->v, &c, 1, ACQUIRE))
            return;
        spin_relax();
    }
    while (XCHG(&l->v, 2, ACQUIRE) != 0)
        mote__os_futex_wait(&l->v, 2, -1);
}
