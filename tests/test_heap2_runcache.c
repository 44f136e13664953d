/*
 * test_heap2_runcache.c - a thread's cache of freed big blocks
 * (src/heap/runcache.c): a freed large block of up to HEAP_RUNCACHE_SLICES
 * slices serves the thread's next malloc of as many slices, and a freed
 * huge block its next of about as many bytes, zeroed for calloc; the cache
 * stays in its bounds; its blocks go back to the arena at the thread's
 * exit, at mote_mem_release from any thread, and by themselves once the
 * thread has been idle for the decay period; nothing is kept under a
 * memory limit; a kept block freed again is caught.
 */
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "heap/heap.h"
#include "heap/internal.h"
#include "heap_test.h"
#include "mote.h"

static uint64_t kept_huge_n;

/* Large blocks' bytes kept in every cache. */
static uint64_t kept(void)
{
    heap_runcache_totals t;
    mote__runcache_totals(&t);
    kept_huge_n = t.kept_huge_n;
    return t.kept_large;
}

/* Huge blocks' usable bytes kept in every cache. */
static uint64_t kept_huge(void)
{
    heap_runcache_totals t;
    mote__runcache_totals(&t);
    kept_huge_n = t.kept_huge_n;
    return t.kept_huge;
}

static uint64_t kept_all(void) { return kept() + kept_huge(); }

static uint64_t inuse(void)
{
    uint64_t v = 0;
    CHECK_EQ(mote__heap_metric("/heap/inuse:bytes", &v), 0);
    return v;
}

TEST(a_freed_large_block_serves_the_thread_s_next_one_of_as_many_slices)
{
    mote_mem_release();
    CHECK_EQ(kept(), 0);
    size_t n = 100 << 10; /* 2 slices */
    char *p = mote_malloc(n);
    CHECK(p != NULL);
    memset(p, 0xab, n);
    uint64_t used = inuse();
    mote_free(p);
    CHECK_EQ(kept(), 2 * HEAP_SLICE_SIZE);
    CHECK(inuse() <= used - 2 * HEAP_SLICE_SIZE); /* kept is free, not in use */
    char *other = mote_malloc(40 << 10);          /* 1 slice: not that one */
    CHECK(other != NULL && other != p);
    char *q = mote_malloc(70 << 10); /* 2 slices */
    CHECK(heap_test_same_run(q, p));
    CHECK_EQ(kept(), 0);
    CHECK(mote_usable_size(q) >= (70u << 10));
    mote_free(q);
    char *z = mote_calloc(1, n);
    CHECK(heap_test_same_run(z, p));
    for (size_t i = 0; i < n; i += 61)
        CHECK(z[i] == 0);
    mote_free(z);
    mote_free(other);
    mote_mem_release();
    CHECK_EQ(kept(), 0);
}

/* A kept block starts at its cache colour for the size now asked (its run
 * may have less room than for the block it held): it holds the request
 * whole, ends with its run, and the bytes in use come back to where they
 * were. */
TEST(a_kept_block_taken_for_a_bigger_request_holds_it_whole)
{
    mote_mem_release();
    uint64_t before = inuse();
    static const size_t sizes[] = {70 << 10,         (2 << 16) - 64,   90 << 10,
                                   (2 << 16) - 1000, (2 << 16) - 4032, 66 << 10};
    char *first = NULL;
    for (int round = 0; round < 20; round++) {
        for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
            char *p = mote_malloc(sizes[k]);
            CHECK(p != NULL && (uintptr_t)p % 64 == 0);
            if (!first)
                first = p;
            /* the same kept run each time, whatever the colour */
            CHECK((uintptr_t)p >> HEAP_SLICE_SHIFT ==
                  (uintptr_t)first >> HEAP_SLICE_SHIFT);
            size_t us = mote_usable_size(p);
            CHECK(us >= sizes[k] && ((uintptr_t)p + us) % HEAP_SLICE_SIZE == 0);
            memset(p, (int)k, us);
            mote_free(p);
        }
    }
    mote_mem_release();
    CHECK_EQ(kept(), 0);
    CHECK_EQ(inuse(), before);
}

/* A block of more slices is kept only as the cache's one bigger block;
 * one that may begin inside its run, not at all. */
TEST(only_blocks_of_few_slices_at_the_start_of_their_run_are_kept_many)
{
    mote_mem_release();
    size_t n = ((size_t)HEAP_RUNCACHE_SLICES << HEAP_SLICE_SHIFT) + 1;
    char *big = mote_malloc(n), *big2 = mote_malloc(n);
    CHECK(big != NULL && big2 != NULL);
    mote_free(big);
    uint64_t k = kept();
    CHECK(k >= n);
    mote_free(big2); /* the bigger block's place is taken */
    CHECK_EQ(kept(), k);
    char *again = mote_malloc(n);
    CHECK(heap_test_same_run(again, big));
    CHECK_EQ(kept(), 0);
    mote_free(again);
    mote_mem_release();
    CHECK_EQ(kept(), 0);
    /* aligned past a slice: may begin inside its run */
    void *aligned = mote_aligned_alloc(128 << 10, 40 << 10);
    CHECK(aligned != NULL && (uintptr_t)aligned % (128 << 10) == 0);
    mote_free(aligned);
    CHECK_EQ(kept(), 0);
}

TEST(the_cache_stays_in_its_bounds)
{
    mote_mem_release();
    enum { N = 3 * HEAP_RUNCACHE_SLOTS };
    char *p[N];
    for (int i = 0; i < N; i++) {
        /* 1 to HEAP_RUNCACHE_SLICES slices */
        size_t slices = 1 + (size_t)i % HEAP_RUNCACHE_SLICES;
        p[i] = mote_malloc((slices << HEAP_SLICE_SHIFT) - 1000);
        CHECK(p[i] != NULL);
    }
    heap_runcache *rc = &mote__heap_tls->runs;
    for (int i = 0; i < N; i++) {
        mote_free(p[i]);
        CHECK(rc->n >= 1 && rc->n <= HEAP_RUNCACHE_SLOTS);
        CHECK(kept() <= (uint64_t)HEAP_RUNCACHE_MAX << HEAP_SLICE_SHIFT);
        uint64_t sum = 0;
        for (uint32_t k = 0; k < rc->n; k++)
            sum += rc->pg[k]->slices;
        CHECK_EQ(sum, rc->slices);
        CHECK(rc->pg[rc->n - 1]->first == (uint8_t *)p[i]); /* the newest stays */
    }
    mote_mem_release();
    CHECK_EQ(kept(), 0);
}

/* ---- the huge block ---- */

TEST(a_freed_huge_block_serves_the_thread_s_next_one_of_about_as_many_bytes)
{
    mote_mem_release();
    CHECK_EQ(kept_huge(), 0);
    size_t n = 6 << 20;
    char *p = mote_malloc(n);
    CHECK(p != NULL);
    memset(p, 0xab, n);
    heap_summary before, after;
    mote__stats_summary(&before);
    mote_free(p);
    CHECK(kept_huge() >= n);
    CHECK_EQ(kept_huge_n, 1);
    /* free, though the arena still counts it */
    mote__stats_summary(&after);
    CHECK(after.huge_inuse + n <= before.huge_inuse);
    CHECK_EQ(after.huge_count + 1, before.huge_count);
    char *q = mote_malloc(n - 100000);
    CHECK(heap_test_same_run(q, p)); /* (at a cache colour of its own) */
    CHECK_EQ(kept_huge(), 0);
    CHECK_EQ((unsigned char)q[n / 2], 0xab); /* its pages stayed */
    mote_free(q);
    char *z = mote_calloc(1, n);
    CHECK(heap_test_same_run(z, p));
    for (size_t i = 0; i < n; i += 4096 - 8)
        CHECK_EQ(z[i], 0);
    CHECK_EQ(z[n - 1], 0);
    mote_free(z);
    mote_mem_release();
    CHECK_EQ(kept_huge(), 0);
}

/* A kept block that does not suit a request goes to the arena's cache,
 * which cuts it to the request (or grows it into one), as it would have
 * had the block never been kept. */
TEST(a_kept_huge_block_that_does_not_suit_a_request_goes_to_the_arena_s_cache)
{
    mote_mem_release();
    size_t n = 9 << 20;
    char *p = mote_malloc(n);
    CHECK(p != NULL);
    memset(p, 1, n);
    mote_free(p);
    CHECK(kept_huge() >= n);
    char *small = mote_malloc(4 << 20); /* would leave more than a third idle */
    CHECK(small != NULL);
    CHECK(heap_test_same_run(small, p)); /* cut from it */
    CHECK_EQ(kept_huge(), 0);
    mote_free(small);
    CHECK(kept_huge() >= 4 << 20);
    size_t align = 8 << 20; /* past what a kept block promises */
    char *a = mote_aligned_alloc(align, 4 << 20);
    CHECK(a != NULL && ((uintptr_t)a & (align - 1)) == 0);
    CHECK_EQ(kept_huge(), 0);
    memset(a, 2, 4 << 20);
    mote_free(a); /* an aligned block is not kept */
    CHECK_EQ(kept_huge(), 0);
    char *big = mote_malloc(12 << 20); /* grows a cached block */
    CHECK(big != NULL);
    memset(big, 3, 12 << 20);
    mote_free(big);
    mote_mem_release();
    CHECK_EQ(kept_huge(), 0);
}

/* A huge block taken again and again starts at a new line each time (see
 * test_heap2_large), and the stats stay right through its moves. */
TEST(a_kept_huge_block_takes_a_new_colour_each_time_and_the_stats_follow)
{
    mote_mem_release();
    heap_summary base;
    mote__stats_summary(&base);
    uint64_t seen = 0;
    size_t n = 3 << 20;
    for (int i = 0; i < 64; i++) {
        char *p = mote_malloc(n);
        CHECK(p != NULL);
        seen |= heap_test_line_bit(p);
        CHECK(mote_usable_size(p) >= n);
        p[n - 1] = 1;
        heap_summary s;
        mote__stats_summary(&s);
        CHECK_EQ(s.huge_count, base.huge_count + 1);
        CHECK_EQ(s.huge_inuse, base.huge_inuse + mote_usable_size(p));
        mote_free(p);
        mote__stats_summary(&s);
        CHECK_EQ(s.huge_count, base.huge_count);
        CHECK_EQ(s.huge_inuse, base.huge_inuse);
    }
    CHECK(__builtin_popcountll(seen) >= 32);
    mote_mem_release();
}

TEST(a_huge_block_past_the_bound_is_not_kept)
{
    mote_mem_release();
    char *p = mote_malloc(HEAP_RUNCACHE_BIG_MAX + 1);
    CHECK(p != NULL);
    mote_free(p);
    CHECK_EQ(kept_huge(), 0);
    /* one at a time: a second goes to the arena */
    char *a = mote_malloc(5 << 20), *b = mote_malloc(5 << 20);
    CHECK(a && b);
    mote_free(a);
    uint64_t k = kept_huge();
    CHECK(k >= 5 << 20);
    mote_free(b);
    CHECK_EQ(kept_huge(), k);
    mote_mem_release();
}

/* ---- giving them back ---- */

static void *keep_some(void *arg)
{
    (void)arg;
    void *p[4];
    for (int i = 0; i < 4; i++)
        p[i] = mote_malloc(60 << 10);
    for (int i = 0; i < 4; i++)
        mote_free(p[i]);
    CHECK(kept() >= 4 * HEAP_SLICE_SIZE);
    mote_free(mote_malloc(3 << 20));
    CHECK(kept_huge() >= 3 << 20);
    return NULL;
}

/* Runs fn on a thread of its own to its end: then nothing is kept. */
static void run_thread_then_nothing_kept(void *(*fn)(void *))
{
    mote_mem_release();
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, fn, NULL), 0);
    CHECK_EQ(pthread_join(t, NULL), 0);
    CHECK_EQ(kept_all(), 0);
}

TEST(kept_blocks_go_back_when_the_thread_exits)
{
    run_thread_then_nothing_kept(keep_some);
}

/* A thread that allocates nothing but huge blocks keeps them too. */
static void *huge_only(void *arg)
{
    (void)arg;
    char *p = mote_malloc(5 << 20);
    mote_free(p);
    CHECK(kept_huge() >= 5 << 20);
    char *q = mote_malloc(5 << 20);
    CHECK(heap_test_same_run(q, p));
    mote_free(q);
    return NULL;
}

TEST(a_thread_that_allocates_only_huge_blocks_keeps_them)
{
    run_thread_then_nothing_kept(huge_only);
}

static pthread_mutex_t idle_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t idle_cv = PTHREAD_COND_INITIALIZER;
static int idle_stage; /* 1: blocks kept; 2: may exit */

static void *keep_then_idle(void *arg)
{
    keep_some(arg);
    pthread_mutex_lock(&idle_mu);
    idle_stage = 1;
    pthread_cond_broadcast(&idle_cv);
    while (idle_stage != 2)
        pthread_cond_wait(&idle_cv, &idle_mu);
    pthread_mutex_unlock(&idle_mu);
    return NULL;
}

static pthread_t start_idle_keeper(void)
{
    idle_stage = 0;
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, keep_then_idle, NULL), 0);
    pthread_mutex_lock(&idle_mu);
    while (idle_stage != 1)
        pthread_cond_wait(&idle_cv, &idle_mu);
    pthread_mutex_unlock(&idle_mu);
    return t;
}

static void stop_idle_keeper(pthread_t t)
{
    pthread_mutex_lock(&idle_mu);
    idle_stage = 2;
    pthread_cond_broadcast(&idle_cv);
    pthread_mutex_unlock(&idle_mu);
    CHECK_EQ(pthread_join(t, NULL), 0);
}

/* The thread that keeps them stays alive and calls nothing: the scavenger
 * takes them back at the decay period, and their slices go to the OS. */
TEST(an_idle_thread_s_kept_blocks_go_back_with_no_call)
{
    mote_mem_release();
    pthread_t t = start_idle_keeper();
    CHECK(kept() >= 4 * HEAP_SLICE_SIZE);
    CHECK(kept_huge() >= 3 << 20);
    uint64_t limit_ms = 4ull * mote__heap_cfg.decay_ms + 5000;
    for (uint64_t ms = 0; kept_all() && ms < limit_ms; ms += 20)
        usleep(20 * 1000);
    CHECK_EQ(kept_all(), 0);
    stop_idle_keeper(t);
}

TEST(mote_mem_release_takes_another_thread_s_kept_blocks)
{
    mote_mem_release();
    pthread_t t = start_idle_keeper();
    CHECK(kept() >= 4 * HEAP_SLICE_SIZE);
    CHECK(kept_huge() >= 3 << 20);
    mote_mem_release();
    CHECK_EQ(kept_all(), 0);
    stop_idle_keeper(t);
}

/* A block freed on one thread is kept by that thread, whoever allocated it
 * (a thread that has allocated: one that only frees has nothing to keep
 * them for). */
static void *free_and_reuse(void *arg)
{
    char *p = arg;
    mote_free(mote_malloc(100)); /* this thread's cache */
    mote_free(p);
    CHECK_EQ(kept(), 2 * HEAP_SLICE_SIZE);
    char *q = mote_malloc(90 << 10);
    CHECK(heap_test_same_run(q, p));
    return q;
}

TEST(a_block_freed_on_another_thread_serves_that_thread)
{
    mote_mem_release();
    char *p = mote_malloc(90 << 10);
    CHECK(p != NULL);
    memset(p, 7, 90 << 10);
    pthread_t t;
    void *q = NULL;
    CHECK_EQ(pthread_create(&t, NULL, free_and_reuse, p), 0);
    CHECK_EQ(pthread_join(t, &q), 0);
    CHECK(heap_test_same_run(q, p));
    mote_free(q);
    mote_mem_release();
}

TEST(nothing_is_kept_under_a_memory_limit)
{
    mote_mem_release();
    CHECK_EQ(mote__heap_set_limit(1ull << 32), 0);
    char *p = mote_malloc(100 << 10);
    CHECK(p != NULL);
    mote_free(p);
    CHECK_EQ(kept(), 0);
    p = mote_malloc(5 << 20);
    CHECK(p != NULL);
    mote_free(p);
    CHECK_EQ(kept_huge(), 0);
    CHECK_EQ(mote__heap_set_limit(0), 0);
    /* kept before a limit was set, by a thread that calls nothing since */
    pthread_t t = start_idle_keeper();
    CHECK(kept_all() > 0);
    CHECK_EQ(mote__heap_set_limit(1ull << 32), 0);
    CHECK_EQ(kept_all(), 0);
    CHECK_EQ(mote__heap_set_limit(0), 0);
    stop_idle_keeper(t);
}

/* ---- the owner and the scavenger at once ---- */

/* Kept blocks taken and put back while other threads empty every cache
 * again and again (two emptiers besides the scavenger: they must keep out
 * of each other's way as well as the owners'): a block two threads both
 * took would show the other's bytes. */
static void *race_owner(void *arg)
{
    unsigned id = (unsigned)(uintptr_t)arg;
    static const size_t sizes[] = {100 << 10, 250 << 10, 3 << 20, 5 << 20};
    for (int i = 0; i < 3000; i++) {
        size_t n = sizes[(i + id) % 4];
        unsigned char *p = mote_malloc(n);
        CHECK(p != NULL);
        unsigned char v = (unsigned char)(id * 64 + i);
        p[0] = v;
        p[n / 2] = v;
        p[n - 1] = v;
        sched_yield();
        CHECK(p[0] == v && p[n / 2] == v && p[n - 1] == v);
        mote_free(p);
    }
    return NULL;
}

TEST(kept_blocks_stay_whole_while_another_thread_empties_the_caches)
{
    mote_mem_release();
    heap_test_race_releases(race_owner, 2);
    mote_mem_release();
    CHECK_EQ(kept_all(), 0);
}

/* ---- misuse ---- */

static void free_twice(void *arg)
{
    size_t n = (size_t)(uintptr_t)arg;
    char *p = mote_malloc(n);
    memset(p, 1, n);
    mote_free(p);
    CHECK(kept_all() > 0); /* the second free finds it kept */
    mote_free(p);
    fprintf(stderr, "double free of a kept block of %zu bytes NOT detected\n", n);
}

static void free_inside(void *arg)
{
    (void)arg;
    char *p = mote_malloc(200 << 10);
    mote_free(p);
    mote_free(p + 65536);
}

TEST(a_kept_block_freed_again_or_inside_aborts)
{
    static const size_t sizes[] = {HEAP_SMALL_MAX + 1, 100 << 10, 250 << 10, 5 << 20};
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++)
        test_expect_invalid_free(free_twice, (void *)(uintptr_t)sizes[k]);
    test_expect_invalid_free(free_inside, NULL);
}

TEST_MAIN()
