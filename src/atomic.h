/*
 * atomic.h - the one vocabulary for atomic accesses in mote, runtime and
 * allocator alike: thin macros over the compiler's __atomic builtins, with
 * the memory order spelled as a bare word (RELAXED, ACQUIRE, RELEASE,
 * ACQ_REL, SEQ_CST).  Shared fields are plain C types; every access that can
 * race goes through one of these, which is what ThreadSanitizer checks.
 *
 * COUNT is for single-writer counters that other threads only read (metrics):
 * a relaxed load and store, no locked instruction.
 */
#ifndef MOTE_ATOMIC_H
#define MOTE_ATOMIC_H

#include <stdbool.h>

#define MOTE_MO_(mo) __ATOMIC_##mo

#define LOAD(p, mo)         __atomic_load_n((p), MOTE_MO_(mo))
#define STORE(p, v, mo)     __atomic_store_n((p), (v), MOTE_MO_(mo))
#define XCHG(p, v, mo)      __atomic_exchange_n((p), (v), MOTE_MO_(mo))
#define FETCH_ADD(p, v, mo) __atomic_fetch_add((p), (v), MOTE_MO_(mo))
#define FETCH_SUB(p, v, mo) __atomic_fetch_sub((p), (v), MOTE_MO_(mo))
#define FETCH_OR(p, v, mo)  __atomic_fetch_or((p), (v), MOTE_MO_(mo))
#define FETCH_AND(p, v, mo) __atomic_fetch_and((p), (v), MOTE_MO_(mo))
/* (no fences: gcc's -fsanitize=thread refuses to build them) */

/* Compare-and-swap: on failure *expected gets the current value, read with
 * relaxed order unless the _F form names one. */
#define CAS(p, expected, desired, mo)                                            \
    __atomic_compare_exchange_n((p), (expected), (desired), false, MOTE_MO_(mo), \
                                __ATOMIC_RELAXED)
#define CAS_WEAK(p, expected, desired, mo)                                      \
    __atomic_compare_exchange_n((p), (expected), (desired), true, MOTE_MO_(mo), \
                                __ATOMIC_RELAXED)
#define CAS_F(p, expected, desired, mo, fail_mo)                                 \
    __atomic_compare_exchange_n((p), (expected), (desired), false, MOTE_MO_(mo), \
                                MOTE_MO_(fail_mo))

/* A counter with one writer: readers on other threads see whole values. */
#define COUNT(p, d) STORE((p), LOAD((p), RELAXED) + (d), RELAXED)

#endif /* MOTE_ATOMIC_H */
