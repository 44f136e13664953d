/*
 * test_heap2_handoff.c - blocks freed by other threads and threads that
 * come and go: a successor adopts its predecessor's cache with its pages
 * (a thread per request that leaves one small object behind does not pin a
 * fresh page each time), frees from other threads come home in batches and
 * are reused, a block freed by another thread is reused there first and
 * what a live thread keeps that way is bounded, a block whose owner keeps
 * up goes home, a block or two freed on
 * another thread travel without a message, frees into an exited
 * thread's cache are collected with no call from the program,
 * larson-like churn keeps every block intact, and a successor started
 * before its predecessor ended takes over the dead cache's partly used
 * pages, with every block still reaching its page's owner.
 */
#include <limits.h>
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

static uint64_t metric(const char *name)
{
    uint64_t v = 0;
    CHECK_EQ(mote__heap_metric(name, &v), 0);
    return v;
}

/* ---- a thread per request ---- */

enum { REQS = 600, WORK = 200 };
static void *leftover[REQS];

static void *request(void *arg)
{
    uintptr_t req = (uintptr_t)arg;
    void *v[WORK];
    uint64_t s = 0x9E3779B97F4A7C15ULL * (req + 1);
    for (int i = 0; i < WORK; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        size_t n = 16 + s % 2033;
        v[i] = mote_malloc(n);
        CHECK(v[i] != NULL);
        memset(v[i], (int)i, n);
    }
    leftover[req] = mote_malloc(64);
    memset(leftover[req], 7, 64);
    for (int i = 0; i < WORK; i++)
        mote_free(v[i]);
    return NULL;
}

TEST(thread_per_request_leftovers_share_pages)
{
    int reqs = TEST_SCALE(REQS, 4);
    for (int r = 0; r < reqs; r += 2) {
        pthread_t t[2];
        for (int k = 0; k < 2; k++)
            CHECK(pthread_create(&t[k], NULL, request, (void *)(uintptr_t)(r + k)) == 0);
        for (int k = 0; k < 2; k++)
            pthread_join(t[k], NULL);
    }
    /* 64 leftovers per 4 KiB, 1024 per 64 KiB page: successors allocate
     * into their predecessors' pages, so the leftovers sit in a few pages
     * instead of one page each. */
    uintptr_t pages[REQS];
    int np = 0;
    for (int r = 0; r < reqs; r++) {
        uintptr_t pgaddr = (uintptr_t)leftover[r] >> HEAP_SLICE_SHIFT;
        int seen = 0;
        for (int i = 0; i < np && !seen; i++)
            seen = pages[i] == pgaddr;
        if (!seen)
            pages[np++] = pgaddr;
    }
    fprintf(stderr, "%d leftovers in %d pages\n", reqs, np);
    CHECK(np <= 4);
    for (int r = 0; r < reqs; r++) {
        for (int i = 0; i < 64; i++)
            CHECK(((char *)leftover[r])[i] == 7);
        mote_free(leftover[r]);
    }
}

/* ---- frees from another thread come home ---- */

enum { NB = 20000 };
static void *blocks[NB];
static pthread_barrier_t bar;
static int rounds_ = 30;

static void *freer(void *arg)
{
    (void)arg;
    for (int r = 0; r < rounds_; r++) {
        pthread_barrier_wait(&bar); /* blocks ready */
        for (int i = 0; i < NB; i++) {
            CHECK(((unsigned char *)blocks[i])[0] == (unsigned char)(i + r));
            mote_free(blocks[i]);
        }
        pthread_barrier_wait(&bar); /* all freed */
    }
    return NULL;
}

TEST(remote_frees_are_reused_not_piled_up)
{
    rounds_ = TEST_SCALE(30, 5);
    pthread_barrier_init(&bar, NULL, 2);
    pthread_t t;
    CHECK(pthread_create(&t, NULL, freer, NULL) == 0);
    uint64_t c1 = 0;
    for (int r = 0; r < rounds_; r++) {
        for (int i = 0; i < NB; i++) {
            blocks[i] = mote_malloc(32 + (size_t)(i % 7) * 48);
            CHECK(blocks[i] != NULL);
            memset(blocks[i], i + r, 32);
        }
        if (r == 1)
            c1 = mote__heap_committed_bytes();
        pthread_barrier_wait(&bar);
        pthread_barrier_wait(&bar);
    }
    pthread_join(t, NULL);
    uint64_t c = mote__heap_committed_bytes();
    fprintf(stderr, "committed after round 1: %llu KiB, at the end: %llu KiB\n",
            (unsigned long long)c1 >> 10, (unsigned long long)c >> 10);
    /* the freed blocks came back and were reused: no growth per round */
    CHECK(c <= c1 + (2u << 20));
    pthread_barrier_destroy(&bar);
}

/* ---- frees into an exited thread's cache ---- */

static size_t alloc_many_size(int i) { return 100 + (size_t)(i % 13) * 200; }

static void *alloc_many(void *arg)
{
    (void)arg;
    for (int i = 0; i < NB; i++) {
        blocks[i] = mote_malloc(alloc_many_size(i));
        CHECK(blocks[i] != NULL);
        memset(blocks[i], 1, 100);
    }
    return NULL;
}

static void *free_many(void *arg)
{
    (void)arg;
    for (int i = 0; i < NB; i++)
        mote_free(blocks[i]);
    return NULL; /* exit sends what is still buffered */
}

TEST(frees_into_an_exited_threads_cache_come_back_with_no_call)
{
    mote_mem_release();
    uint64_t c0 = mote__heap_committed_bytes();
    pthread_t t;
    CHECK(pthread_create(&t, NULL, alloc_many, NULL) == 0);
    pthread_join(t, NULL);
    uint64_t c1 = mote__heap_committed_bytes();
    CHECK(c1 >= c0 + (4u << 20));
    CHECK(pthread_create(&t, NULL, free_many, NULL) == 0);
    pthread_join(t, NULL);
    uint64_t c = c1;
    for (int i = 0; i < 40 && c > c0 + (1u << 20); i++) {
        usleep(100 * 1000); /* decay 500 ms; no allocator call */
        c = mote__heap_committed_bytes();
    }
    fprintf(stderr, "committed %llu -> %llu -> %llu KiB\n", (unsigned long long)c0 >> 10,
            (unsigned long long)c1 >> 10, (unsigned long long)c >> 10);
    CHECK(c <= c0 + (1u << 20));
}

/* A fresh start: what earlier cases left is released, this thread gets a
 * cache of its own (else its first free would adopt the exited thread's
 * cache, and its frees would be local), then fn runs on a thread that
 * exits.  Returns this thread's first block, to free at the end. */
static void *own_cache_then(void *(*fn)(void *))
{
    mote_mem_release();
    void *mine = mote_malloc(16);
    CHECK(mine != NULL);
    pthread_t t;
    CHECK(pthread_create(&t, NULL, fn, NULL) == 0);
    pthread_join(t, NULL);
    return mine;
}

TEST(frees_buffered_by_a_live_thread_go_home_on_release)
{
    void *mine = own_cache_then(alloc_many);
    uint64_t in_before = metric("/heap/inuse:bytes");
    for (int i = 0; i < 10; i++) /* fewer than a foreign list or a message holds */
        mote_free(blocks[i]);
    /* a block waiting in this thread's foreign list is free */
    CHECK(metric("/heap/inuse:bytes") < in_before);
    mote_mem_release(); /* sends them home, and collects the dead cache */
    /* gone from here: mallocs of their sizes come from this thread's pages */
    void *again[10];
    for (int i = 0; i < 10; i++) {
        again[i] = mote_malloc(alloc_many_size(i));
        CHECK(again[i] != NULL);
        for (int k = 0; k < 10; k++)
            CHECK(again[i] != blocks[k]);
    }
    for (int i = 0; i < 10; i++)
        mote_free(again[i]);
    for (int i = 10; i < NB; i++)
        mote_free(blocks[i]);
    mote_free(mine);
    mote_mem_release();
    CHECK(metric("/heap/inuse:bytes") < 64 * 1024);
}

/* Server churn: a block another thread allocated, freed here, is what this
 * thread's next malloc of its class gets (still in this CPU's cache), not
 * a block of its own pages - when its class fills whole cache lines.  A
 * smaller block shares a line with its neighbours, live on the other
 * thread: reused here, the two threads would write one line (passive false
 * sharing), so it goes home. */
static const size_t line_sizes[] = {64, 128, 192, 256, 512, 1024, 2048, 4096};
static const size_t shared_sizes[] = {8, 16, 48, 80, 112, 160, 224};
enum {
    NLINE = sizeof line_sizes / sizeof *line_sizes,
    NSHARED = sizeof shared_sizes / sizeof *shared_sizes
};
static void *given[NLINE + NSHARED];

static size_t given_size(unsigned i)
{
    return i < NLINE ? line_sizes[i] : shared_sizes[i - NLINE];
}

static void *alloc_given(void *arg)
{
    (void)arg;
    for (unsigned i = 0; i < NLINE + NSHARED; i++) {
        size_t n = given_size(i);
        given[i] = mote_malloc(n);
        CHECK(given[i] != NULL);
        memset(given[i], 5, n);
    }
    return NULL;
}

TEST(a_block_freed_here_is_reused_here_first_unless_it_shares_a_line)
{
    /* This thread has a page of each class before the other thread's
     * blocks exist: with none, it would take over a page of the dead
     * cache (tcache_reclaim), whose blocks would then be its own. */
    mote_mem_release();
    void *own[NLINE + NSHARED];
    for (unsigned i = 0; i < NLINE + NSHARED; i++) {
        own[i] = mote_malloc(given_size(i));
        CHECK(own[i] != NULL);
    }
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, alloc_given, NULL), 0);
    CHECK_EQ(pthread_join(t, NULL), 0);
    for (unsigned i = 0; i < NLINE + NSHARED; i++) {
        size_t n = given_size(i);
        mote_free(given[i]);
        void *p = mote_malloc(n);
        CHECK(p != NULL);
        if (i < NLINE)
            CHECK(p == given[i]);
        else
            CHECK(p != given[i]);
        memset(p, 2, n);
        given[i] = p;
    }
    for (unsigned i = 0; i < NLINE + NSHARED; i++) {
        mote_free(given[i]);
        mote_free(own[i]);
    }
    mote_mem_release();
    CHECK(metric("/heap/inuse:bytes") < 64 * 1024);
}

/* What a live thread keeps of other threads' blocks is bounded: a thread
 * that frees another's 5 MB (a class with a foreign list) and then stays
 * alive and idle lets all but a few KiB of it go back to the OS, with no
 * call from the program. */
static void *alloc_one_class(void *arg)
{
    (void)arg;
    for (int i = 0; i < NB; i++) {
        blocks[i] = mote_malloc(256);
        CHECK(blocks[i] != NULL);
        memset(blocks[i], 3, 256);
    }
    return NULL;
}

/* A thread that frees one or two blocks of another cache and goes on
 * sends them as they are: a 512-byte message for a pointer or two would
 * be most of what is in flight (larson at 8 threads: 1.5 blocks a
 * message).  So nothing but the blocks themselves is out while they
 * travel, and once home they are free. */
static void *free_two_and_flush(void *arg)
{
    void **b = arg;
    mote_free(b[0]);
    mote_free(b[1]);
    mote_mem_release(); /* sends what it holds, as an exiting thread does */
    return NULL;
}

TEST(a_block_or_two_freed_on_another_thread_travel_without_a_message)
{
    mote_mem_release();
    void *b[2] = {mote_malloc(48), mote_malloc(80)}; /* classes without a foreign list */
    CHECK(b[0] && b[1]);
    uint64_t before = metric("/heap/inuse:bytes");
    pthread_t t;
    CHECK(pthread_create(&t, NULL, free_two_and_flush, b) == 0);
    pthread_join(t, NULL);
    /* in this thread's inbox, still counted, and nothing else is out */
    CHECK_EQ(metric("/heap/inuse:bytes"), before);
    mote_mem_release(); /* takes them in */
    CHECK_EQ(metric("/heap/inuse:bytes"), before - 48 - 80);
}

TEST(a_live_thread_keeps_a_bounded_part_of_others_frees)
{
    mote_mem_release();
    void *mine = mote_malloc(16);
    uint64_t c0 = mote__heap_committed_bytes();
    pthread_t t;
    CHECK(pthread_create(&t, NULL, alloc_one_class, NULL) == 0);
    pthread_join(t, NULL);
    CHECK(mote__heap_committed_bytes() >= c0 + (4u << 20));
    for (int i = 0; i < NB; i++)
        mote_free(blocks[i]); /* into this live thread's foreign list */
    uint64_t c = mote__heap_committed_bytes();
    for (int i = 0; i < 40 && c > c0 + (1u << 20); i++) {
        usleep(100 * 1000); /* decay 500 ms; no allocator call */
        c = mote__heap_committed_bytes();
    }
    fprintf(stderr, "committed %llu -> %llu KiB\n", (unsigned long long)c0 >> 10,
            (unsigned long long)c >> 10);
    CHECK(c <= c0 + (1u << 20));
    mote_free(mine);
    mote_mem_release();
}

/* A block of a live thread that keeps up with its frees goes home: kept
 * here, it would stay foreign for good.  Once that thread has frees
 * waiting (it is not running, say), the next one stays here. */
static void *_Atomic owned[3];
static atomic_int owner_go;

static void *owner_thread(void *arg)
{
    (void)arg;
    owned[0] = mote_malloc(256); /* a class with a foreign list */
    owned[1] = mote_malloc(256);
    owned[2] = mote_malloc(48); /* one without */
    memset(owned[0], 1, 256);
    memset(owned[1], 1, 256);
    memset(owned[2], 1, 48);
    atomic_store(&owner_go, 1);
    while (atomic_load(&owner_go) != 2) /* alive, and no malloc: no inbox drain */
        usleep(1000);
    return NULL;
}

/* Starts owner_thread and waits for its blocks. */
static pthread_t owner_start(void)
{
    atomic_store(&owner_go, 0);
    pthread_t t;
    CHECK(pthread_create(&t, NULL, owner_thread, NULL) == 0);
    while (atomic_load(&owner_go) != 1)
        usleep(1000);
    return t;
}

TEST(a_block_goes_home_while_its_owner_keeps_up_and_stays_while_it_does_not)
{
    mote_mem_release();
    void *mine = mote_malloc(16); /* this thread's own cache */
    pthread_t t = owner_start();
    unsigned cls = sizeclass_of(256);
    uint32_t kept0 = mote__tcache_listed_count(mote__heap_tls, cls);
    mote_free(owned[0]); /* its inbox is empty: home */
    CHECK_EQ(mote__tcache_listed_count(mote__heap_tls, cls), kept0);
    mote_free(owned[2]);
    mote_mem_release();  /* both reach its inbox, which it does not drain now */
    mote_free(owned[1]); /* it is behind: stays here */
    CHECK_EQ(mote__tcache_listed_count(mote__heap_tls, cls), kept0 + 1);
    atomic_store(&owner_go, 2);
    pthread_join(t, NULL);
    mote_free(mine);
    mote_mem_release();
    CHECK(metric("/heap/inuse:bytes") < 64 * 1024);
}

/* Mallocs of a bitmap class that miss the stash: slow paths, each a look
 * at whether this thread's lists went stale (HEAP_LIST_STALE_MS). */
static void slow_path_round(void)
{
    enum { N = 64, SIZE = 6000 }; /* more than a stash holds */
    static void *p[N];
    for (int i = 0; i < N; i++) {
        p[i] = mote_malloc(SIZE);
        CHECK(p[i] != NULL);
    }
    for (int i = 0; i < N; i++)
        mote_free(p[i]);
}

/* A block kept in this thread's foreign list while its owner was behind,
 * which no malloc of this thread takes, goes home once the list has not
 * moved for a while, though the thread never calls mote_mem_release: it
 * keeps allocating other sizes.  (Kept until the thread's exit, such
 * blocks pinned their pages: a consumer whose producer moved on to other
 * sizes held 16 MiB of pages with no live block.) */
TEST(a_foreign_block_no_malloc_takes_goes_home_while_the_thread_works_on)
{
    mote_mem_release();
    void *mine = mote_malloc(16);
    pthread_t t = owner_start();
    unsigned cls = sizeclass_of(256);
    uint32_t kept0 = mote__tcache_listed_count(mote__heap_tls, cls);
    mote_free(owned[2]);
    mote_mem_release(); /* in its inbox, which it does not drain now */
    mote_free(owned[1]);
    mote_free(owned[0]);
    CHECK_EQ(mote__tcache_listed_count(mote__heap_tls, cls), kept0 + 2);
    uint32_t kept = kept0 + 2;
    for (int ms = 0; ms < 20000 && kept != kept0; ms += 2) {
        slow_path_round();
        usleep(2000);
        kept = mote__tcache_listed_count(mote__heap_tls, cls);
    }
    CHECK_EQ(kept, kept0);
    atomic_store(&owner_go, 2);
    pthread_join(t, NULL);
    mote_free(mine);
    mote_mem_release();
    CHECK(metric("/heap/inuse:bytes") < 64 * 1024);
}

/* ---- larson-like churn: blocks intact through hand-offs ---- */

enum { SLOTS = 4000, THREADS = 4 };
static _Atomic(uint64_t *) table[THREADS * SLOTS];

typedef struct region {
    int id;
    uint64_t seed;
    long ops;
} region;

static void check_block(uint64_t *b)
{
    if (!b)
        return;
    size_t words = (size_t)(b[0] >> 32);
    uint32_t tag = (uint32_t)b[0];
    CHECK(words >= 2 && words <= 130);
    for (size_t i = 1; i < words; i++)
        CHECK(b[i] == ((uint64_t)tag << 20 | i));
}

static void *larson_worker(void *arg)
{
    region *r = arg;
    uint64_t s = r->seed;
    for (long i = 0; i < r->ops; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        size_t words = 2 + s % 129;
        uint64_t *b = mote_malloc(words * 8);
        CHECK(b != NULL);
        uint32_t tag = (uint32_t)(s >> 40);
        b[0] = (uint64_t)words << 32 | tag;
        for (size_t k = 1; k < words; k++)
            b[k] = (uint64_t)tag << 20 | k;
        long slot = (s >> 20) & 7 ? (long)r->id * SLOTS + (long)((s >> 24) % SLOTS)
                                  : (long)((s >> 24) % (THREADS * SLOTS));
        uint64_t *old = atomic_exchange(&table[slot], b);
        check_block(old);
        mote_free(old);
    }
    r->seed = s;
    return NULL;
}

static void *larson_region(void *arg)
{
    region *r = arg;
    for (int gen = 0; gen < 6; gen++) {
        pthread_t t; /* a successor inherits the region and its blocks */
        CHECK(pthread_create(&t, NULL, larson_worker, r) == 0);
        pthread_join(t, NULL);
    }
    return NULL;
}

TEST(larson_churn_keeps_blocks_intact_and_memory_bounded)
{
    region rg[THREADS];
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++) {
        rg[i] =
            (region){i, 0x9E3779B97F4A7C15ULL * (uint64_t)(i + 1), TEST_SCALE(60000, 10)};
        CHECK(pthread_create(&t[i], NULL, larson_region, &rg[i]) == 0);
    }
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    uint64_t live = 0;
    for (int k = 0; k < THREADS * SLOTS; k++) {
        uint64_t *b = atomic_load(&table[k]);
        check_block(b);
        if (b)
            live += mote_usable_size(b);
    }
    uint64_t c = mote__heap_committed_bytes();
    fprintf(stderr, "live %llu KiB, committed %llu KiB\n", (unsigned long long)live >> 10,
            (unsigned long long)c >> 10);
    /* bounded: blocks of a region move between caches as successors adopt
     * whichever exited cache is on top of the pool (docs/heap.md), so the
     * heap holds more than the live bytes, but not without bound */
    CHECK(c <= 3 * live + (8u << 20));
    for (int k = 0; k < THREADS * SLOTS; k++)
        mote_free(atomic_exchange(&table[k], NULL));
    mote_mem_release();
    CHECK(metric("/heap/inuse:bytes") < 64 * 1024);
}

/* ---- frees and mallocs after a thread's exit ---- */

/* glibc frees for a thread after every key destructor has run (a failed
 * dlopen's message; other threads' TLS blocks in an exiting detached
 * thread), and a destructor in its last round may allocate: a cache taken
 * then is never given back (one leaked per thread).  Here a key destructor
 * re-arms itself to reach the last round, then frees (or allocates). */
static pthread_key_t late_key;
static void *late_blocks[64][3];
static atomic_int late_next;
static bool late_allocates;

static void late_dtor(void *arg)
{
    uintptr_t round = (uintptr_t)arg;
    if (round < PTHREAD_DESTRUCTOR_ITERATIONS) {
        pthread_setspecific(late_key, (void *)(round + 1));
        return;
    }
    int i = atomic_fetch_add(&late_next, 1);
    for (int k = 0; k < 3; k++)
        mote_free(late_blocks[i][k]);
    if (late_allocates) {
        void *p = mote_malloc(100);
        CHECK(p != NULL);
        mote_free(p);
    }
}

static void *late_thread(void *arg)
{
    if (late_allocates) { /* a thread with a cache of its own */
        void *p = mote_malloc(32);
        CHECK(p != NULL);
        mote_free(p);
    }
    pthread_setspecific(late_key, (void *)(uintptr_t)1);
    (void)arg;
    return NULL;
}

static void late_threads(bool allocates)
{
    /* TSan tears its own per-thread state down in the last destructor
     * round, so instrumented code there crashes in TSan itself */
    if (TEST_TSAN)
        TEST_SKIP("TSan: no instrumented code in the last destructor round");
    CHECK_EQ(pthread_key_create(&late_key, late_dtor), 0);
    late_allocates = allocates;
    atomic_store(&late_next, 0);
    for (int i = 0; i < 64; i++)
        for (int k = 0; k < 3; k++)
            CHECK((late_blocks[i][k] = mote_malloc(24 + 8 * (size_t)k)) != NULL);
    int before = (int)heap_test_caches();
    for (int i = 0; i < 64; i++) {
        pthread_t t;
        CHECK(pthread_create(&t, NULL, late_thread, NULL) == 0);
        pthread_join(t, NULL);
    }
    int after = (int)heap_test_caches();
    printf("%s: caches %d -> %d for 64 threads\n",
           allocates ? "allocating" : "freeing only", before, after);
    /* every thread reached the last round and made its late frees there */
    CHECK_EQ(atomic_load(&late_next), 64);
    CHECK(after - before <= 2); /* before the fix: one more per thread */
    CHECK_EQ(pthread_key_delete(late_key), 0);
}

TEST(a_thread_that_frees_after_its_exit_takes_no_cache) { late_threads(false); }

TEST(a_thread_that_allocates_after_its_exit_gives_the_cache_back) { late_threads(true); }

/* ---- threads that sleep ---- */

/* A thread about to sleep (a runtime's worker) settles the frees in flight
 * from and to it: those it made of other threads' blocks go home, and
 * those others made of its blocks come in; so freed memory never waits on
 * a thread that sleeps.  mote__heap_frees_waiting tells whether a
 * sleeper should be woken for that. */
enum { IDLE_NB = 2000, IDLE_SIZE = 1024 };
static void *idle_blocks[IDLE_NB];
static const void *_Atomic idle_owner_cache;
static atomic_int idle_step;

static void idle_wait_step(int s)
{
    while (atomic_load(&idle_step) < s)
        usleep(200);
}

static void *idle_owner(void *arg)
{
    (void)arg;
    for (int i = 0; i < IDLE_NB; i++) {
        idle_blocks[i] = mote_malloc(IDLE_SIZE);
        CHECK(idle_blocks[i] != NULL);
        memset(idle_blocks[i], 1, IDLE_SIZE);
    }
    atomic_store(&idle_owner_cache, mote__heap_thread_cache());
    atomic_store(&idle_step, 1);
    idle_wait_step(2); /* the other thread freed them all */
    mote__heap_thread_idle();
    atomic_store(&idle_step, 3);
    idle_wait_step(4);
    return NULL;
}

TEST(a_thread_about_to_sleep_settles_the_frees_in_flight_to_and_from_it)
{
    mote_free(mote_malloc(16)); /* this thread has a cache */
    CHECK(!mote__heap_frees_waiting(NULL));
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, idle_owner, NULL), 0);
    idle_wait_step(1);
    const void *owner = atomic_load(&idle_owner_cache);
    CHECK(owner != NULL && owner != mote__heap_thread_cache());
    uint64_t held = metric("/heap/inuse:bytes");
    CHECK(held >= (uint64_t)IDLE_NB * IDLE_SIZE);
    for (int i = 0; i < IDLE_NB; i++)
        mote_free(idle_blocks[i]);
    /* Whole messages went; what is left waits here, unsent, or in this
     * thread's list of other threads' blocks: all of it still in use. */
    CHECK(mote__heap_frees_waiting(owner));
    CHECK(metric("/heap/inuse:bytes") > held - (uint64_t)IDLE_NB * IDLE_SIZE / 2);
    mote__heap_thread_idle(); /* the rest goes */
    CHECK(!mote__heap_frees_waiting(mote__heap_thread_cache()));
    atomic_store(&idle_step, 2);
    idle_wait_step(3);
    /* The owner took every block in: none waits, none is in use. */
    CHECK(!mote__heap_frees_waiting(owner));
    uint64_t after = metric("/heap/inuse:bytes");
    printf("in use: %llu KiB with the blocks, %llu KiB after the owner's idle\n",
           (unsigned long long)held >> 10, (unsigned long long)after >> 10);
    /* (the message blocks that carried them are on their way back here) */
    CHECK(after + (uint64_t)IDLE_NB * IDLE_SIZE * 9 / 10 <= held);
    atomic_store(&idle_step, 4);
    CHECK_EQ(pthread_join(t, NULL), 0);
}

/* ---- a successor started before its predecessor ends ---- */

enum { HANDED = 3000, HANDED_IN_FLIGHT = 40, HOLDERS_MAX = 128 };
static unsigned char *handed[HANDED];
static int handed_n;       /* blocks the predecessor allocates */
static size_t handed_size; /* of one class */
static pthread_barrier_t pair_bar;
static atomic_int holders_go;
static unsigned reclaimed_inside;
static uintptr_t handed_slices[64];
static unsigned handed_nslices;

/* Whether the bytes in use fall back to in0 within 3 s of releases: blocks
 * on their way to a dead cache, or passed on from it, have arrived. */
static bool inuse_falls_back_to(uint64_t in0)
{
    for (int i = 0; i < 300; i++) {
        mote_mem_release();
        if (metric("/heap/inuse:bytes") <= in0)
            return true;
        usleep(10 * 1000);
    }
    return false;
}

/* Takes a cache (the pool's newest dead one, or a new one) and keeps it
 * until told: so the pool can be emptied, whatever earlier cases left. */
static void *holder(void *arg)
{
    (void)arg;
    void *p = mote_malloc(16);
    CHECK(p != NULL);
    pthread_barrier_wait(&pair_bar);
    while (!atomic_load(&holders_go))
        usleep(1000);
    mote_free(p);
    return NULL;
}

static void *predecessor(void *arg)
{
    (void)arg;
    for (int i = 0; i < handed_n; i++) {
        handed[i] = mote_malloc(handed_size);
        CHECK(handed[i] != NULL);
        memset(handed[i], i & 0xff, handed_size);
    }
    return NULL; /* exits: its cache, with its pages, goes to the pool */
}

static bool in_handed_slices(const void *p)
{
    for (unsigned i = 0; i < handed_nslices; i++)
        if ((uintptr_t)p >> HEAP_SLICE_SHIFT == handed_slices[i])
            return true;
    return false;
}

static void *successor(void *arg)
{
    (void)arg;
    void *mine = mote_malloc(16); /* a cache of its own, with no page of the class */
    CHECK(mine != NULL);
    pthread_barrier_wait(&pair_bar); /* (1) it has one */
    pthread_barrier_wait(&pair_bar); /* (2) its predecessor has exited */
    for (int i = 0; i < handed_n; i += 2)
        mote_free(handed[i]);
    for (int i = 0; i < handed_n; i += 2) {
        handed[i] = mote_malloc(handed_size);
        CHECK(handed[i] != NULL);
        reclaimed_inside += in_handed_slices(handed[i]);
        memset(handed[i], 0xee, handed_size);
    }
    pthread_barrier_wait(&pair_bar); /* (3) main frees blocks it held back */
    pthread_barrier_wait(&pair_bar); /* (4) ... and sent them to the old owner */
    for (int i = 2 * HANDED_IN_FLIGHT + 1; i < handed_n;
         i += 2) { /* (main freed the first) */
        for (size_t k = 0; k < handed_size; k++)
            CHECK_EQ(handed[i][k], (i & 0xff));
        mote_free(handed[i]);
    }
    for (int i = 0; i < handed_n; i += 2) {
        for (size_t k = 0; k < handed_size; k++)
            CHECK_EQ(handed[i][k], 0xee);
        mote_free(handed[i]);
    }
    mote_free(mine);
    return NULL;
}

/* A worker that starts its successor before it ends (a pool replacing a
 * thread while its work goes on): the successor cannot adopt the cache,
 * which is still in use, and when it needs a page of a class it takes a
 * partly used one the dead cache holds (where the blocks it inherited and
 * freed went), not a fresh one.  Blocks another thread freed toward the
 * old owner before the page changed hands still reach it. */
static void successor_takes_pages(size_t size, int n)
{
    handed_size = size;
    handed_n = n;
    mote_mem_release();
    CHECK_EQ(pthread_barrier_init(&pair_bar, NULL, 2), 0);
    /* empty the pool: holders adopt dead caches until one needs a new one */
    pthread_t hold[HOLDERS_MAX];
    unsigned nhold = 0;
    atomic_store(&holders_go, 0);
    for (unsigned before = 0; nhold < HOLDERS_MAX;) {
        before = heap_test_caches();
        CHECK_EQ(pthread_create(&hold[nhold++], NULL, holder, NULL), 0);
        pthread_barrier_wait(&pair_bar);
        if (heap_test_caches() > before)
            break;
    }
    CHECK(nhold < HOLDERS_MAX);
    uint64_t in0 = metric("/heap/inuse:bytes");

    pthread_t succ, pred;
    CHECK_EQ(pthread_create(&succ, NULL, successor, NULL), 0);
    pthread_barrier_wait(&pair_bar); /* (1) */
    CHECK_EQ(pthread_create(&pred, NULL, predecessor, NULL), 0);
    CHECK_EQ(pthread_join(pred, NULL), 0);
    handed_nslices = 0;
    for (int i = 0; i < handed_n; i++) {
        uintptr_t sl = (uintptr_t)handed[i] >> HEAP_SLICE_SHIFT;
        if (!handed_nslices || handed_slices[handed_nslices - 1] != sl) {
            CHECK(handed_nslices < 64);
            handed_slices[handed_nslices++] = sl;
        }
    }
    /* held back by this thread: freed toward the dead owner, buffered here
     * until the page has changed hands */
    void *held[HANDED_IN_FLIGHT];
    for (int i = 0; i < HANDED_IN_FLIGHT; i++)
        held[i] = handed[2 * i + 1];
    reclaimed_inside = 0;
    pthread_barrier_wait(&pair_bar); /* (2) */
    pthread_barrier_wait(&pair_bar); /* (3) */
    for (int i = 0; i < HANDED_IN_FLIGHT; i++) {
        for (size_t k = 0; k < handed_size; k++)
            CHECK_EQ(((unsigned char *)held[i])[k], ((2 * i + 1) & 0xff));
        mote_free(held[i]);
    }
    mote_mem_release(); /* sends them to the old owner, which passes them on */
    pthread_barrier_wait(&pair_bar); /* (4) */
    CHECK_EQ(pthread_join(succ, NULL), 0);
    fprintf(stderr, "%zu B: %u of %d blocks in the %u slices the dead cache had\n", size,
            reclaimed_inside, handed_n / 2, handed_nslices);
    CHECK_EQ(reclaimed_inside, (unsigned)handed_n / 2);

    /* every block home: the successor's cache (dead now) has them all */
    CHECK(inuse_falls_back_to(in0));
    atomic_store(&holders_go, 1);
    for (unsigned i = 0; i < nhold; i++)
        CHECK_EQ(pthread_join(hold[i], NULL), 0);
    pthread_barrier_destroy(&pair_bar);
}

/* 48 B: a class whose blocks share lines, so no foreign list keeps the
 * successor's frees of the blocks it inherited: they go to the dead cache. */
TEST(a_successor_takes_the_small_pages_a_dead_cache_left_partly_used)
{
    successor_takes_pages(48, HANDED);
}

/* 6 KiB: bitmap pages, whose word the scavenger may be claiming from. */
TEST(a_successor_takes_the_bitmap_pages_a_dead_cache_left_partly_used)
{
    successor_takes_pages(6 * 1024, 400);
}

/* Workers replaced while their work goes on, as a pool replaces a thread:
 * each starts its successor, which takes over its blocks, and exits; the
 * successor frees what it inherited and takes over the dead cache's
 * pages, small and bitmap, while two threads release memory again and
 * again (the scavenger's claims on bitmap pages).  Every block keeps its
 * contents. */
enum { CHAINS = 2, GENERATIONS = 16, CHAIN_SLOTS = 256, CHAIN_STEPS = 3000 };
typedef struct chain {
    uint64_t *slot[CHAIN_SLOTS];
    size_t size[CHAIN_SLOTS];
    uint64_t rng;
    int gen;
    pthread_t tid[GENERATIONS];
} chain;
static chain chains[CHAINS];

static void chain_check_free(chain *c, int i)
{
    uint64_t *b = c->slot[i];
    if (!b)
        return;
    uint64_t tag = (uint64_t)(uintptr_t)b ^ c->size[i];
    CHECK_EQ(b[0], tag);
    CHECK_EQ(((unsigned char *)b)[c->size[i] - 1], (unsigned char)tag);
    mote_free(b);
    c->slot[i] = NULL;
}

static void *chain_worker(void *arg)
{
    chain *c = arg;
    for (int s = 0; s < CHAIN_STEPS; s++) {
        c->rng ^= c->rng << 13, c->rng ^= c->rng >> 7, c->rng ^= c->rng << 17;
        int i = (int)(c->rng % CHAIN_SLOTS);
        chain_check_free(c, i);
        size_t n = 16 + (size_t)(c->rng >> 20) % 9000; /* half of them bitmap classes */
        uint64_t *b = mote_malloc(n);
        CHECK(b != NULL);
        uint64_t tag = (uint64_t)(uintptr_t)b ^ n;
        b[0] = tag;
        ((unsigned char *)b)[n - 1] = (unsigned char)tag;
        c->slot[i] = b;
        c->size[i] = n;
    }
    int g = ++c->gen;
    if (g < GENERATIONS) /* the successor starts before we end */
        CHECK_EQ(pthread_create(&c->tid[g], NULL, chain_worker, c), 0);
    return NULL;
}

static void *chain_run(void *arg)
{
    chain *c = &chains[(uintptr_t)arg];
    c->rng = 0x9E3779B97F4A7C15ULL * ((uintptr_t)arg + 1);
    c->gen = 0;
    CHECK_EQ(pthread_create(&c->tid[0], NULL, chain_worker, c), 0);
    for (int g = 0; g < GENERATIONS; g++) /* (tid[g + 1] is set before g ends) */
        CHECK_EQ(pthread_join(c->tid[g], NULL), 0);
    for (int i = 0; i < CHAIN_SLOTS; i++)
        chain_check_free(c, i);
    return NULL;
}

TEST(workers_replaced_while_their_work_goes_on_keep_every_block)
{
    uint64_t in0 = metric("/heap/inuse:bytes");
    heap_test_race_releases(chain_run, CHAINS);
    CHECK(inuse_falls_back_to(in0));
}

TEST_MAIN()
