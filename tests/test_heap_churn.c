/*
 * test_heap_churn.c - thread churn: thousands of short-lived threads
 * allocate, free, and leave blocks for others to free after they exit.
 * Thread caches must be recycled (no growth with the number of threads
 * made) and the memory of exited threads must come back: after everything
 * is freed, what the heap holds stays small.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "heap/heap.h"
#include "heap/internal.h"
#include "heap_test.h"
#include "mote.h"

enum { LEFT = 64 };
static _Atomic(void *) left[LEFT];

static void *short_lived(void *arg)
{
    uint64_t s = (uintptr_t)arg * 0x9E3779B97F4A7C15ULL + 7;
    void *mine[64];
    for (int round = 0; round < 4; round++) {
        for (int k = 0; k < 64; k++) {
            s ^= s << 13, s ^= s >> 7, s ^= s << 17;
            mine[k] = mote_malloc(16 + s % 3000);
            CHECK(mine[k] != NULL);
            memset(mine[k], 3, 16);
        }
        for (int k = 0; k < 64; k++)
            mote_free(mine[k]);
    }
    /* leave a block behind for another thread to free after we exit */
    void *p = mote_malloc(100 + (uintptr_t)arg % 5000);
    mote_free(atomic_exchange(&left[(uintptr_t)arg % LEFT], p));
    return NULL;
}

/* What the heap holds free right after a release. */
static uint64_t free_after_release(void)
{
    uint64_t fr = 0;
    mote_mem_release();
    CHECK_EQ(mote__heap_metric("/heap/free:bytes", &fr), 0);
    return fr;
}

TEST(thread_churn_recycles_caches_and_returns_memory)
{
    int total = TEST_SCALE(4000, 10);
    for (int i = 0; i < total; i += 4) {
        pthread_t t[4];
        for (int k = 0; k < 4; k++)
            CHECK(pthread_create(&t[k], NULL, short_lived, (void *)(uintptr_t)(i + k)) ==
                  0);
        for (int k = 0; k < 4; k++)
            CHECK_EQ(pthread_join(t[k], NULL), 0);
    }
    /* caches are recycled: bounded by the threads alive at once (+ main) */
    CHECK(heap_test_caches() <= 8);
    for (int i = 0; i < LEFT; i++)
        mote_free(atomic_exchange(&left[i], NULL));
    uint64_t inuse = 0;
    mote_mem_release(); /* collects what exited threads' pages got back */
    CHECK_EQ(mote__heap_metric("/heap/inuse:bytes", &inuse), 0);
    CHECK(inuse < 64 * 1024);
    /* the scavenger empties dead caches when their last blocks come back;
     * then a release leaves nothing held */
    WAIT_UNTIL(free_after_release() <= 1024 * 1024, 60);
}

TEST_MAIN()
