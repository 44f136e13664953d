/*
 * heap_test.h - what the tests that look inside the heap share
 * (heap/internal.h).
 */
#ifndef MOTE_HEAP_TEST_H
#define MOTE_HEAP_TEST_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "check.h"
#include "heap/internal.h"
#include "mote.h"

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

static atomic_int heap_test_releasing;

static void *heap_test_releaser(void *arg)
{
    (void)arg;
    while (atomic_load(&heap_test_releasing))
        mote_mem_release();
    return NULL;
}

/* Runs owner on `owners` threads (its argument: the thread's index) while
 * two more call mote_mem_release again and again, as the scavenger does
 * after the decay period: every thread's run cache emptied, every free
 * block of a bitmap page claimed.  Two, so they meet each other as well
 * as the owners.  Returns once the owners have. */
static inline void heap_test_race_releases(void *(*owner)(void *), unsigned owners)
{
    enum { RELEASERS = 2, OWNERS_MAX = 8 };
    pthread_t rel[RELEASERS], own[OWNERS_MAX];
    CHECK(owners <= OWNERS_MAX);
    atomic_store(&heap_test_releasing, 1);
    for (unsigned i = 0; i < RELEASERS; i++)
        CHECK_EQ(pthread_create(&rel[i], NULL, heap_test_releaser, NULL), 0);
    for (unsigned i = 0; i < owners; i++)
        CHECK_EQ(pthread_create(&own[i], NULL, owner, (void *)(uintptr_t)i), 0);
    for (unsigned i = 0; i < owners; i++)
        CHECK_EQ(pthread_join(own[i], NULL), 0);
    atomic_store(&heap_test_releasing, 0);
    for (unsigned i = 0; i < RELEASERS; i++)
        CHECK_EQ(pthread_join(rel[i], NULL), 0);
}

#endif /* MOTE_HEAP_TEST_H */
