/*
 * spin.h - a tiny test-and-test-and-set lock for short critical sections
 * (wait queues, channel state, run-queue hand-off).  The lock word is a plain
 * int so public structs (mote_mutex ...) can embed it with a zero
 * initialiser.  Holders never block or switch tasks while holding one.  A
 * waiter spins briefly, then yields its thread: on a 2-core VM the holder
 * may have been preempted, and spinning for a whole time slice is worse.
 */
#ifndef MOTE_SPIN_H
#define MOTE_SPIN_H

#include <sched.h>
#include <stdbool.h>

#include "atomic.h"

static inline void spin_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static inline bool spin_trylock(int *l)
{
    return LOAD(l, RELAXED) == 0 && XCHG(l, 1, ACQUIRE) == 0;
}

static inline void spin_lock(int *l)
{
    if (__builtin_expect(XCHG(l, 1, ACQUIRE) == 0, 1))
        return;
    for (unsigned n = 0;; n++) {
        if (spin_trylock(l))
            return;
        if (n < 64)
            spin_relax();
        else
            sched_yield();
    }
}

static inline void spin_unlock(int *l) { STORE(l, 0, RELEASE); }

#endif /* MOTE_SPIN_H */
