/*
 * heap_test.h - what the tests that look inside the heap share
 * (heap/internal.h).
 */
#ifndef MOTE_HEAP_TEST_H
#define MOTE_HEAP_TEST_H

#include "heap/internal.h"

/* Thread caches made so far: they are never freed (a dead thread's waits in
 * the pool for the next new thread), so this counts the ones leaked too. */
static inline unsigned heap_test_caches(void)
{
    unsigned n = 0;
    for (heap_tcache *h = mote__tcache_all(); h; h = h->all_next)
        n++;
    return n;
}

#endif /* MOTE_HEAP_TEST_H */
