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

bool mote__heap_lock_timed(heap_lock *l, int64_t timeout_ns)
{
    int64_t end = mote__os_now_ns() + timeout_ns;
    for (;;) {
        /* marked contended, as the slow path does: the holder's release
         * wakes us */
        if (XCHG(&l->v, 2, ACQUIRE) == 0)
            return true;
        int64_t left = end - mote__os_now_ns();
        if (left <= 0)
            return false;
        mote__os_futex_wait(&l->v, 2, left);
    }
}
