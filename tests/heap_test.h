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

/* Whether two blocks start in the same page: the same run or mapping,
 * whatever cache colour each took (a big block starts in its run's first
 * page, or the page after a huge block's header). */
static inline bool heap_test_same_run(const void *a, const void *b)
{
    return (uintptr_t)a / HEAP_OS_PAGE == (uintptr_t)b / HEAP_OS_PAGE;
}

/* The bit of the cache line (of its page's 64) a block starts on. */
static inline uint64_t heap_test_line_bit(const void *p)
{
    return 1ULL << (((uintptr_t)p >> 6) & 63);
}

#endif /* MOTE_HEAP_TEST_H */
