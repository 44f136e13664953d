/*
 * test_heap2_purge.c - free blocks inside pages that still hold live blocks
 * go back to the OS by themselves (classes above 4 KiB live in bitmap
 * pages: the scavenger claims their free blocks and releases the whole OS
 * pages under them, while the owner sleeps or keeps allocating), live
 * blocks are never touched by it, and bitmap blocks keep the double-free
 * and invalid-pointer checks.
 */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "heap/heap.h"
#include "heap/internal.h"
#include "heap_test.h"
#include "mote.h"

static long rss_bytes(void)
{
    long pages = 0, res = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    CHECK(f != NULL);
    CHECK(fscanf(f, "%ld %ld", &pages, &res) == 2);
    fclose(f);
    return res * sysconf(_SC_PAGESIZE);
}

static heap_arena_stats arena(void)
{
    heap_arena_stats st;
    mote__arena_stats(&st);
    return st;
}

static void fill(uint64_t *b, size_t n, uint64_t tag)
{
    for (size_t i = 0; i < n / 8; i++)
        b[i] = tag ^ i;
}

static void verify(const uint64_t *b, size_t n, uint64_t tag)
{
    for (size_t i = 0; i < n / 8; i++)
        if (b[i] != (tag ^ i)) {
            fprintf(stderr, "block %p word %zu: %llx, expected %llx\n", (void *)b, i,
                    (unsigned long long)b[i], (unsigned long long)(tag ^ i));
            CHECK(0);
        }
}

enum { N = 3000 };
static uint64_t *blk[N];
static size_t sz[N];

/* the sizes of bitmap classes: 4 KiB..HEAP_SMALL_MAX */
static size_t size_of(int i)
{
    return 4097 + (size_t)(i * 7919) % (HEAP_SMALL_MAX - 4096);
}

TEST(free_blocks_inside_live_pages_go_back_with_no_call)
{
    mote_mem_release();
    long base = rss_bytes();
    size_t freed = 0;
    for (int i = 0; i < N; i++) {
        sz[i] = size_of(i);
        blk[i] = mote_malloc(sz[i]);
        CHECK(blk[i] != NULL);
        fill(blk[i], sz[i], (uint64_t)i << 32);
    }
    long peak = rss_bytes();
    for (int i = 0; i < N; i++)
        if (i % 16) { /* one in 16 survives: nearly every page keeps one */
            freed += sz[i];
            mote_free(blk[i]);
            blk[i] = NULL;
        }
    uint64_t p0 = arena().purged_total, purged = 0;
    long now = peak;
    for (int k = 0; k < 30; k++) { /* decay 500 ms; no allocator call */
        usleep(100 * 1000);
        now = rss_bytes();
        purged = arena().purged_total - p0;
        if (now < peak - (long)(freed * 3 / 4) && purged >= freed / 8)
            break;
    }
    fprintf(stderr,
            "rss %ld -> %ld -> %ld KiB; freed %zu KiB, released inside pages %llu KiB\n",
            base >> 10, peak >> 10, now >> 10, freed >> 10,
            (unsigned long long)purged >> 10);
    CHECK(purged >= freed / 8); /* the rest went back as wholly free pages */
    if (!TEST_SANITIZED)
        CHECK(now < peak - (long)(freed * 3 / 4));
    for (int i = 0; i < N; i += 16)
        verify(blk[i], sz[i], (uint64_t)i << 32);
    /* the released blocks are handed out again, zero or not, and work */
    for (int i = 0; i < N; i++)
        if (!blk[i]) {
            blk[i] = mote_malloc(sz[i]);
            fill(blk[i], sz[i], ~(uint64_t)i);
        }
    for (int i = 0; i < N; i++) {
        verify(blk[i], sz[i], i % 16 ? ~(uint64_t)i : (uint64_t)i << 32);
        mote_free(blk[i]);
    }
}

/* ---- the owner allocating while the scavenger claims ---- */

static atomic_int stop;

static void *churn(void *arg)
{
    uint64_t s = (uintptr_t)arg * 0x9E3779B97F4A7C15ULL + 1;
    /* Enough blocks that each class's frees outgrow its stash (128 KiB):
     * the rest wait in their bitmaps, where purges claim them (with 64, the
     * stashes held nearly all, and 10 releases under TSan purged none). */
    enum { K = 256 };
    uint64_t *mine[K] = {0};
    size_t msz[K] = {0};
    long rounds = 0;
    while (!atomic_load(&stop) || rounds < 1000) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        int k = (int)(s % K);
        if (mine[k]) {
            verify(mine[k], msz[k], (uint64_t)(uintptr_t)mine[k]);
            mote_free(mine[k]);
        }
        msz[k] = 4097 + (size_t)(s >> 20) % (40 << 10);
        mine[k] = mote_malloc(msz[k]);
        CHECK(mine[k] != NULL);
        fill(mine[k], msz[k], (uint64_t)(uintptr_t)mine[k]);
        rounds++;
    }
    for (int k = 0; k < K; k++) {
        if (mine[k])
            verify(mine[k], msz[k], (uint64_t)(uintptr_t)mine[k]);
        mote_free(mine[k]);
    }
    return NULL;
}

/* purged_total when a case began: the counter is the process's, and a run
 * of the whole file (one process) had purged before the case. */
static uint64_t purged_before;

TEST(purges_race_with_owners_and_never_touch_live_blocks)
{
    purged_before = arena().purged_total;
    atomic_store(&stop, 0);
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        CHECK(pthread_create(&t[i], NULL, churn, (void *)(uintptr_t)(i + 1)) == 0);
    /* mote_mem_release purges every free block at once, as the scavenger
     * does after the decay period; until one was purged at least (a slow
     * build's threads may still be filling their slots at first) */
    for (int i = 0;
         i < TEST_SCALE(300, 10) || (arena().purged_total == purged_before && i < 20000);
         i++) {
        mote_mem_release();
        usleep(500);
    }
    atomic_store(&stop, 1);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    CHECK(arena().purged_total > purged_before);
}

/* One thread's blocks of one bitmap class, taken and given back as fast as
 * it can (more than its stash holds, so its pages fill, empty and leave),
 * while two threads claim every free block again and again.  Each block
 * keeps its bytes while it is out, and no claim takes a page on its way
 * out: its slices may be another page's by the time the claim releases
 * them (debug builds check that the claim is still there when it is put
 * back; without HEAP_BM_RETIRED that check failed 3 runs in 3). */
static void *words_owner(void *arg)
{
    (void)arg;
    enum { K = 48 };
    uint64_t *b[K];
    size_t n = 6000;
    /* a sanitizer's few rounds may all fall between claims: then on until
     * one has released something (a minute at most) */
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int r = 0; r < TEST_SCALE(20000, 500) || arena().purged_total == purged_before;
         r++) {
        clock_gettime(CLOCK_MONOTONIC, &t);
        if (t.tv_sec - t0.tv_sec > 60)
            break;
        for (int k = 0; k < K; k++) {
            b[k] = mote_malloc(n);
            CHECK(b[k] != NULL);
            b[k][0] = b[k][n / 8 - 1] = (uint64_t)(uintptr_t)b[k] ^ (uint64_t)r;
        }
        for (int k = K; k-- > 0;) {
            CHECK(b[k][0] == ((uint64_t)(uintptr_t)b[k] ^ (uint64_t)r));
            CHECK(b[k][n / 8 - 1] == b[k][0]);
            mote_free(b[k]);
        }
    }
    return NULL;
}

TEST(claims_race_with_an_owner_whose_pages_come_and_go)
{
    purged_before = arena().purged_total;
    heap_test_race_releases(words_owner, 1);
    CHECK(arena().purged_total > purged_before);
}

/* ---- exited owners ---- */

static void *alloc_keep(void *arg)
{
    (void)arg;
    for (int i = 0; i < N; i++) {
        sz[i] = size_of(i);
        blk[i] = mote_malloc(sz[i]);
        fill(blk[i], sz[i], (uint64_t)i);
    }
    return NULL;
}

TEST(pages_of_an_exited_thread_are_released_inside_too)
{
    mote_mem_release();
    pthread_t t;
    CHECK(pthread_create(&t, NULL, alloc_keep, NULL) == 0);
    pthread_join(t, NULL);
    long peak = rss_bytes();
    size_t freed = 0;
    for (int i = 0; i < N; i++)
        if (i % 16) {
            verify(blk[i], sz[i], (uint64_t)i);
            freed += sz[i];
            mote_free(blk[i]); /* remote: into a dead cache */
        }
    long now = peak;
    for (int k = 0; k < 30; k++) {
        usleep(100 * 1000);
        now = rss_bytes();
        if (now < peak - (long)(freed * 3 / 4))
            break;
    }
    fprintf(stderr, "rss %ld -> %ld KiB, freed %zu KiB\n", peak >> 10, now >> 10,
            freed >> 10);
    if (!TEST_SANITIZED)
        CHECK(now < peak - (long)(freed * 3 / 4));
    for (int i = 0; i < N; i += 16) {
        verify(blk[i], sz[i], (uint64_t)i);
        mote_free(blk[i]);
    }
    mote_mem_release();
    uint64_t inuse = 0;
    CHECK_EQ(mote__heap_metric("/heap/inuse:bytes", &inuse), 0);
    CHECK(inuse < 64 * 1024);
}

/* ---- checks ---- */

static void double_free_local(void *arg)
{
    (void)arg;
    void *p = mote_malloc(9000);
    void *q = mote_malloc(9000); /* the page stays */
    mote_free(p);
    mote_free(p);
    (void)q;
}

static void *free_it(void *p)
{
    mote_free(p);
    return NULL;
}

/* Frees p on a thread of its own, which exits (sending it on its way). */
static void free_on_a_thread(void *p)
{
    pthread_t t;
    pthread_create(&t, NULL, free_it, p);
    pthread_join(t, NULL);
}

static void double_free_remote(void *arg)
{
    (void)arg;
    void *p = mote_malloc(20000);
    void *q = mote_malloc(20000);
    free_on_a_thread(p); /* on its way home, or home */
    free_on_a_thread(p);
    mote_mem_release();
    (void)q;
}

static void local_then_remote_free(void *arg)
{
    (void)arg;
    void *p = mote_malloc(20000);
    void *q = mote_malloc(20000);
    mote_free(p);        /* home at once */
    free_on_a_thread(p); /* caught on that thread, by the cookie */
    mote_mem_release();
    (void)q;
}

static void remote_free_after_purge(void *arg)
{
    (void)arg;
    void *p = mote_malloc(64 << 10);
    void *q = mote_malloc(64 << 10);
    mote_free(p);
    mote_mem_release(); /* p's pages released: its cookie reads 0 */
    free_on_a_thread(p);
    mote_mem_release(); /* the block comes home: its bit says free already */
    (void)q;
}

static void double_free_after_purge(void *arg)
{
    (void)arg;
    void *p = mote_malloc(64 << 10);
    void *q = mote_malloc(64 << 10);
    mote_free(p);
    mote_mem_release(); /* p's pages released */
    mote_free(p);
    (void)q;
}

static void free_inside(void *arg)
{
    (void)arg;
    char *p = mote_malloc(10000);
    mote_free(p + 4096);
}

static void free_tail(void *arg)
{
    (void)arg;
    /* a 10 KiB class page holds 12 blocks in 128 KiB: past the 12th block
     * is the page's unused tail, on a block boundary */
    char *p = mote_malloc(10240);
    heap_segment *seg = heap_segment_of(p);
    heap_page *pg = seg->map[((uintptr_t)p >> HEAP_SLICE_SHIFT) & 63];
    CHECK(pg->kind == HEAP_PAGE_BITMAP);
    mote_free(pg->start + (size_t)pg->reserved * pg->bsize);
}

TEST(bitmap_blocks_keep_the_pointer_checks)
{
    test_expect_invalid_free(double_free_local, NULL);
    test_expect_invalid_free(double_free_remote, NULL);
    test_expect_invalid_free(double_free_after_purge, NULL);
    test_expect_invalid_free(local_then_remote_free, NULL);
    test_expect_invalid_free(remote_free_after_purge, NULL);
    test_expect_invalid_free(free_inside, NULL);
    test_expect_invalid_free(free_tail, NULL);
}

TEST(bitmap_blocks_meet_the_malloc_contract)
{
    /* sizes, alignment, usable size, calloc zero, realloc keeps content */
    for (size_t n = 4097; n <= HEAP_SMALL_MAX; n += 331) {
        char *p = mote_malloc(n);
        CHECK(p && (uintptr_t)p % 16 == 0);
        CHECK(mote_usable_size(p) >= n && mote_usable_size(p) <= n + n / 4 + 16);
        memset(p, 0x77, n);
        char *z = mote_calloc(1, n);
        for (size_t i = 0; i < n; i += 97)
            CHECK(z[i] == 0);
        p = mote_realloc(p, n + 20000);
        CHECK(p[0] == 0x77 && p[n - 1] == 0x77);
        mote_free(p);
        mote_free(z);
    }
    void *a = mote_aligned_alloc(8192, 5000);
    CHECK(a && (uintptr_t)a % 8192 == 0);
    mote_free(a);
}

/* ---- the stash: a bitmap block freed on its own thread ---- */

static bool bit_free(const void *p)
{
    heap_page *pg = heap_segment_of(p)->map[((uintptr_t)p >> HEAP_SLICE_SHIFT) & 63];
    uint64_t i = (((uintptr_t)p - (uintptr_t)pg->start) * pg->div_magic) >> 40;
    return (LOAD(&pg->bits, ACQUIRE) >> i) & 1;
}

TEST(bitmap_blocks_freed_on_their_thread_wait_in_a_bounded_stash)
{
    enum { K = 40 };
    const size_t n = 6000;
    unsigned cls = sizeclass_of(n);
    uint32_t cap = (uint32_t)(HEAP_STASH_BYTES / mote__sizeclass_size[cls]);
    CHECK(cls >= HEAP_BITMAP_CLS && cap >= 1 && cap < K);
    mote_mem_release();
    void *v[K];
    for (int i = 0; i < K; i++) {
        v[i] = mote_malloc(n);
        CHECK(v[i] != NULL);
        memset(v[i], i, n);
    }
    uint64_t live = 0, after = 0;
    CHECK_EQ(mote__heap_metric("/heap/inuse:bytes", &live), 0);
    for (int i = 0; i < K; i++)
        mote_free(v[i]);
    /* the first `cap` frees wait in the stash (their bits stay clear: no
     * atomic operation); the rest went back to their bitmaps (or with
     * their emptied pages to the arena) */
    CHECK_EQ(mote__tcache_listed_count(mote__heap_tls, cls), cap);
    for (int i = 0; i < (int)cap; i++)
        CHECK(!bit_free(v[i]));
    /* stashed blocks count as free */
    CHECK_EQ(mote__heap_metric("/heap/inuse:bytes", &after), 0);
    CHECK(after + (uint64_t)K * mote__sizeclass_size[cls] <= live + 4096);
    /* the next mallocs take them back, most recent first */
    for (int i = (int)cap - 1; i >= 0; i--) {
        void *p = mote_malloc(n);
        CHECK(p == v[i]);
        v[i] = p;
    }
    for (int i = 0; i < (int)cap; i++)
        mote_free(v[i]);
    /* mote_mem_release puts them back in their bitmaps */
    mote_mem_release();
    CHECK_EQ(mote__tcache_listed_count(mote__heap_tls, cls), 0);
    void *w = mote_malloc(n);
    CHECK(w != NULL);
    mote_free(w);
    mote_mem_release();
    CHECK_EQ(mote__tcache_listed_count(mote__heap_tls, cls), 0);
}

/* A thread that holds many blocks of a class gets a bigger stash for it
 * (as many as it holds, up to HEAP_STASH_MAX), and the stash shrinks back
 * to its least room as the blocks are freed: after a mass free a thread
 * keeps no more than before.  Under a memory limit it keeps its least
 * room: what one thread keeps, no other can have. */
static void stash_follows_the_blocks_held(bool limited)
{
    enum { K = 600 };
    const size_t n = 6000;
    unsigned cls = sizeclass_of(n);
    uint32_t lo = (uint32_t)(HEAP_STASH_BYTES / mote__sizeclass_size[cls]);
    uint32_t hi = (uint32_t)(HEAP_STASH_MAX / mote__sizeclass_size[cls]);
    CHECK(cls >= HEAP_BITMAP_CLS && 2 * lo < hi && hi < K);
    mote_mem_release();
    if (limited)
        CHECK_EQ(mote__heap_set_limit(mote__heap_committed_bytes() + (64u << 20)), 0);
    static void *v[K];
    for (int i = 0; i < K; i++) {
        v[i] = mote_malloc(n);
        CHECK(v[i] != NULL);
        memset(v[i], i, n);
    }
    uint32_t most = 0;
    for (int i = 0; i < K; i++) {
        for (size_t j = 0; j < n; j += 1000)
            CHECK(((unsigned char *)v[i])[j] == (unsigned char)i);
        mote_free(v[i]);
        uint32_t held = mote__tcache_listed_count(mote__heap_tls, cls);
        most = held > most ? held : most;
        CHECK(held <= (limited ? lo : hi));
        if (i == (int)(2 * lo) && !limited)
            CHECK(held > lo); /* 2*lo+1 freed, K-2*lo-1 still held: it grew */
    }
    CHECK(limited ? most == lo : most > lo);
    CHECK(mote__tcache_listed_count(mote__heap_tls, cls) <= lo);
    /* what it kept is served first */
    uint32_t kept = mote__tcache_listed_count(mote__heap_tls, cls);
    void *w = mote_malloc(n);
    CHECK(w != NULL && kept > 0);
    CHECK_EQ(mote__tcache_listed_count(mote__heap_tls, cls), kept - 1);
    mote_free(w);
    if (limited)
        CHECK_EQ(mote__heap_set_limit(0), 0);
    mote_mem_release();
    CHECK_EQ(mote__tcache_listed_count(mote__heap_tls, cls), 0);
}

TEST(a_stash_grows_with_the_blocks_held_and_shrinks_as_they_go)
{
    stash_follows_the_blocks_held(false);
}

TEST(under_a_memory_limit_a_stash_keeps_its_least_room)
{
    stash_follows_the_blocks_held(true);
}

/* A block in the stash is free: a second free of it is caught, on its
 * thread and on another. */
static void double_free_stashed(void *arg)
{
    void *p = mote_malloc(7000);
    void *q = mote_malloc(7000); /* the page stays */
    mote_free(p);
    CHECK_EQ(mote__tcache_listed_count(mote__heap_tls, sizeclass_of(7000)), 1);
    if (arg)
        free_on_a_thread(p);
    else
        mote_free(p);
    (void)q;
}

TEST(a_stashed_block_freed_again_is_caught)
{
    test_expect_invalid_free(double_free_stashed, NULL);
    test_expect_invalid_free(double_free_stashed, (void *)1);
}

/* ---- a new page on reused slices, due for the scavenger at once ----
 *
 * With no decay, the scavenger may claim every free block of a bitmap page
 * its owner has just set up on dirty slices: the owner's first block must
 * still be there (malloc returned NULL with errno 0 in 1 run of 8). */

static atomic_int nulls;

static void *big_churn(void *arg)
{
    (void)arg;
    while (!atomic_load(&stop)) { /* keeps freed slices dirty */
        char *p = mote_malloc(1 << 20);
        if (p)
            p[0] = 1;
        mote_free(p);
    }
    return NULL;
}

static void *one_class(void *arg)
{
    size_t n = (size_t)(uintptr_t)arg;
    void *v[300];
    for (int i = 0; i < 300; i++)
        if (!(v[i] = mote_malloc(n)))
            atomic_fetch_add(&nulls, 1);
    for (int i = 0; i < 300; i++)
        mote_free(v[i]);
    return NULL;
}

TEST(with_no_decay_a_new_bitmap_page_serves_its_first_block)
{
    if (mote__heap_cfg.decay_ms != 0) { /* again, with no decay from the start */
        fflush(stdout);
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) {
            setenv("MOTE_MALLOC_DECAY_MS", "0", 1);
            execl("/proc/self/exe", "test_heap2_purge",
                  "with_no_decay_a_new_bitmap_page_serves_its_first_block", (char *)NULL);
            _exit(40);
        }
        int st = 0;
        CHECK_EQ(waitpid(pid, &st, 0), pid);
        CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
        return;
    }
    static const size_t sizes[] = {5000, 9000, 20000, 40000, 70000, 120000};
    atomic_store(&stop, 0);
    pthread_t bg;
    CHECK_EQ(pthread_create(&bg, NULL, big_churn, NULL), 0);
    for (int r = 0; r < TEST_SCALE(600, 4); r++) {
        pthread_t t[2];
        for (int i = 0; i < 2; i++)
            CHECK_EQ(pthread_create(&t[i], NULL, one_class,
                                    (void *)(uintptr_t)sizes[(r * 2 + i) % 6]),
                     0);
        for (int i = 0; i < 2; i++)
            pthread_join(t[i], NULL);
    }
    atomic_store(&stop, 1);
    pthread_join(bg, NULL);
    CHECK_EQ(atomic_load(&nulls), 0);
}

TEST_MAIN()
