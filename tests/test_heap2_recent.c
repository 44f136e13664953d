/*
 * test_heap2_recent.c - a thread's recent lists (HEAP_PAGE_RECENT in
 * src/heap/internal.h): a class's next malloc takes its most recently
 * freed block whatever page it lies in; a list that fills sends blocks to
 * their pages; a thread that frees a heap in random order and then idles
 * keeps no page for them (the class drains); a listed block freed again is
 * caught; the lists go back at exit and at mote_mem_release, and a list
 * its thread no longer uses goes back by itself.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "heap/heap.h"
#include "heap/internal.h"
#include "mote.h"

static uint64_t metric(const char *name)
{
    uint64_t v = 0;
    CHECK_EQ(mote__heap_metric(name, &v), 0);
    return v;
}

/* Blocks of one class in two different pages: freed one after the other,
 * the second comes back first, then the first.  (Pushed on their pages'
 * lists, the first stayed in its page, and the second malloc took a block
 * of the last page, partly used, which has room.) */
TEST(a_class_s_next_malloc_takes_its_latest_freed_block_whatever_its_page)
{
    mote_mem_release();
    enum { N = 3 * (HEAP_SLICE_SIZE / 64) + 10 };
    static char *p[N];
    for (int i = 0; i < N; i++) {
        p[i] = mote_malloc(64);
        CHECK(p[i] != NULL);
        memset(p[i], 1, 64);
    }
    char *x = p[10], *y = NULL;
    for (int i = N - 1; i >= 0 && !y; i--)
        if (((uintptr_t)p[i] >> HEAP_SLICE_SHIFT) != ((uintptr_t)x >> HEAP_SLICE_SHIFT))
            y = p[i];
    CHECK(y != NULL); /* N blocks of 64 bytes span more than one slice */
    mote_free(x);
    mote_free(y);
    char *a = mote_malloc(64), *b = mote_malloc(64);
    CHECK(a == y);
    CHECK(b == x);
    for (int i = 0; i < N; i++)
        mote_free(p[i]);
    mote_mem_release();
}

/* More frees of a class than its list holds, interleaved with mallocs:
 * every block comes back intact and usable (the overflow goes to the
 * pages), and the heap's count of blocks in use is right after. */
TEST(a_list_that_fills_sends_blocks_to_their_pages)
{
    mote_mem_release();
    uint64_t base = metric("/heap/inuse:bytes");
    enum { N = 4000 };
    static unsigned char *p[N];
    uint64_t s = 7;
    for (int round = 0; round < 4; round++) {
        for (int i = 0; i < N; i++) {
            p[i] = mote_malloc(48);
            CHECK(p[i] != NULL);
            memset(p[i], (int)(i & 0xff), 48);
        }
        for (int i = N - 1; i > 0; i--) { /* free in random order */
            int j = (int)(test_rnd(&s) % (uint64_t)(i + 1));
            unsigned char *t = p[i];
            p[i] = p[j];
            p[j] = t;
        }
        for (int i = 0; i < N; i++) {
            if (i % 3 == 0) { /* a malloc now and then takes a listed block */
                unsigned char *q = mote_malloc(48);
                CHECK(q != NULL);
                memset(q, 0x5a, 48);
                mote_free(q);
            }
            mote_free(p[i]);
        }
    }
    CHECK(metric("/heap/inuse:bytes") <= base + (4 << 10));
    mote_mem_release();
}

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int stage; /* 1: heap freed; 2: may exit */

static void *free_heap_then_idle(void *arg)
{
    (void)arg;
    enum { N = 120000 }; /* ~60 MiB of 16 B..1 KiB */
    void **v = mote_malloc(N * sizeof *v);
    CHECK(v != NULL);
    uint64_t s = 42;
    for (int i = 0; i < N; i++) {
        size_t n = 16 + (size_t)(test_rnd(&s) % 1009);
        v[i] = mote_malloc(n);
        CHECK(v[i] != NULL);
        memset(v[i], 1, n);
    }
    for (int i = N - 1; i > 0; i--) {
        int j = (int)(test_rnd(&s) % (uint64_t)(i + 1));
        void *t = v[i];
        v[i] = v[j];
        v[j] = t;
    }
    for (int i = 0; i < N; i++)
        mote_free(v[i]);
    mote_free(v);
    pthread_mutex_lock(&mu);
    stage = 1;
    pthread_cond_broadcast(&cv);
    while (stage != 2)
        pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
    return NULL;
}

/* The thread stays alive and calls nothing: what it freed goes back by
 * itself, its lists keeping no page from the arena.  (With lists that only
 * spilled half when full, ~30 MiB stayed committed here for good.) */
TEST(a_thread_that_frees_a_heap_in_random_order_and_idles_keeps_no_page)
{
    mote_mem_release();
    stage = 0;
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, free_heap_then_idle, NULL), 0);
    pthread_mutex_lock(&mu);
    while (stage != 1)
        pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
    uint64_t limit_ms = 4ull * mote__heap_cfg.decay_ms + 10000, committed = 0;
    for (uint64_t ms = 0; ms < limit_ms; ms += 50) {
        committed = mote__heap_committed_bytes();
        if (committed <= (6u << 20))
            break;
        usleep(50 * 1000);
    }
    fprintf(stderr, "committed after the idle: %llu KiB\n",
            (unsigned long long)committed >> 10);
    CHECK(committed <= (6u << 20));
    pthread_mutex_lock(&mu);
    stage = 2;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
    CHECK_EQ(pthread_join(t, NULL), 0);
}

static void free_listed_twice(void *arg)
{
    (void)arg;
    char *keep = mote_malloc(200), *p = mote_malloc(200);
    memset(p, 1, 200);
    mote_free(p); /* on the recent list of its class */
    mote_free(p);
    fprintf(stderr, "double free of a listed block NOT detected\n");
    mote_free(keep);
}

TEST(a_listed_block_freed_again_aborts)
{
    test_expect_invalid_free(free_listed_twice, NULL);
}

/* The count of blocks out on the page holding p (0 once the page left). */
static uint32_t page_count(const void *p)
{
    if (heap_segmap_get((uintptr_t)p >> HEAP_SEG_SHIFT) != 1) /* unmapped */
        return 0;
    heap_segment *seg = (heap_segment *)((uintptr_t)p & ~HEAP_SEG_MASK);
    heap_page *pg = seg->map[((uintptr_t)p >> HEAP_SLICE_SHIFT) & (HEAP_SLICES - 1)];
    return pg && pg->kind == HEAP_PAGE_SMALL ? page_used(pg) : 0;
}

enum { FEW = 20, FEW_SIZE = 1792 }; /* fewer than the class's list holds */
static char *few[FEW];

/* FEW blocks of one class, freed: on this thread's recent list. */
static void free_few(void)
{
    for (int i = 0; i < FEW; i++) {
        few[i] = mote_malloc(FEW_SIZE);
        CHECK(few[i] != NULL);
        memset(few[i], 1, FEW_SIZE);
    }
    for (int i = 0; i < FEW; i++)
        mote_free(few[i]);
    /* listed: still counted on their page, which cannot go back */
    CHECK(page_count(few[0]) > 0);
}

static void *free_few_then_wait(void *arg)
{
    (void)arg;
    free_few();
    return NULL;
}

/* A thread's listed blocks go back to their pages when it exits, and this
 * thread's at mote_mem_release. */
TEST(the_lists_go_back_at_exit_and_at_mote_mem_release)
{
    mote_mem_release();
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, free_few_then_wait, NULL), 0);
    CHECK_EQ(pthread_join(t, NULL), 0);
    for (int i = 0; i < FEW; i++)
        CHECK_EQ(page_count(few[i]), 0);
    for (int i = 0; i < FEW; i++) {
        few[i] = mote_malloc(FEW_SIZE);
        CHECK(few[i] != NULL);
    }
    for (int i = 0; i < FEW; i++)
        mote_free(few[i]);
    CHECK(page_count(few[0]) > 0);
    mote_mem_release();
    for (int i = 0; i < FEW; i++)
        CHECK_EQ(page_count(few[i]), 0);
}

/* A thread that stops using a class but goes on with others: its list of
 * the class goes back to its pages once the list has not moved for a
 * while (HEAP_LIST_STALE_MS), with no call from the program.  (Kept until
 * the thread's exit, it pinned one page per listed block.) */
TEST(a_list_its_thread_no_longer_uses_goes_back_to_its_pages)
{
    mote_mem_release();
    free_few();
    enum { N = 64, SIZE = 6000 }; /* bitmap mallocs past the stash: slow paths */
    static void *p[N];
    uint32_t left = 1;
    for (int ms = 0; ms < 20000 && left; ms += 2) {
        for (int i = 0; i < N; i++) {
            p[i] = mote_malloc(SIZE);
            CHECK(p[i] != NULL);
        }
        for (int i = 0; i < N; i++)
            mote_free(p[i]);
        usleep(2000);
        left = 0;
        for (int i = 0; i < FEW; i++)
            left += page_count(few[i]);
    }
    CHECK_EQ(left, 0);
    mote_mem_release();
}

TEST_MAIN()
