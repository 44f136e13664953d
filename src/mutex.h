/*
 * mutex.h - what other sync objects may know of a mutex's state word
 * (mutex.c owns it).
 */
#ifndef MOTE_MUTEX_H
#define MOTE_MUTEX_H

#include <stdbool.h>

#include "atomic.h"
#include "mote.h"

enum { MUTEX_LOCKED = 1, MUTEX_WOKEN = 2, MUTEX_WAITERS = 4 };

/* Held by someone (a hint without further synchronisation). */
static inline bool mutex_is_locked(const mote_mutex *m)
{
    return LOAD(&m->state, RELAXED) & MUTEX_LOCKED;
}

#endif /* MOTE_MUTEX_H */
