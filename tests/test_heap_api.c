/*
 * test_heap_api.c - mote's allocator through its public API: sizes, usable
 * size, alignment, calloc, realloc, aligned_alloc, huge blocks, size
 * classes, metrics, the memory limit, and the invalid-pointer checks (in
 * forked children, which must die with SIGABRT and the message).
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
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

TEST(malloc_sizes_alignment_and_usable_size)
{
    static void *ptrs[4096];
    size_t sizes[] = {0,       1,
                      7,       8,
                      15,      16,
                      17,      31,
                      100,     128,
                      129,     1000,
                      1024,    1025,
                      4095,    4096,
                      8191,    8193,
                      65536,   100000,
                      131072,  131073,
                      200000,  1 << 20,
                      2 << 20, (2 << 20) + 1,
                      5 << 20, 33 << 20};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        size_t n = sizes[i];
        unsigned char *p = mote_malloc(n);
        CHECK(p != NULL);
        CHECK_EQ((uintptr_t)p % 16, 0);
        size_t us = mote_usable_size(p);
        CHECK(us >= n);
        if (n > 16)
            CHECK(us <= n + n / 4 + 16 || n > HEAP_SMALL_MAX); /* bounded waste */
        memset(p, 0xab, us);
        ptrs[i] = p;
    }
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
        mote_free(ptrs[i]);
    mote_free(NULL);
    CHECK_EQ(mote_usable_size(NULL), 0);

    /* many blocks of one size never overlap */
    for (int i = 0; i < 4096; i++) {
        ptrs[i] = mote_malloc(48);
        memset(ptrs[i], i & 0xff, 48);
    }
    for (int i = 0; i < 4096; i++) {
        unsigned char *p = ptrs[i];
        for (int k = 0; k < 48; k++)
            CHECK_EQ(p[k], i & 0xff);
        mote_free(p);
    }
}

TEST(size_classes_are_tight_and_fill_their_pages)
{
    heap_ensure_init();
    for (size_t n = 1; n <= HEAP_SMALL_MAX; n += (n < 4096 ? 1 : 61)) {
        unsigned c = sizeclass_of(n);
        CHECK(c >= 1 && c < HEAP_NCLS);
        CHECK(mote__sizeclass_size[c] >= n);
        CHECK(c == 1 || mote__sizeclass_size[c - 1] < n);
        CHECK(mote__sizeclass_size[c] % 16 == 0);
        CHECK((mote__sizeclass_size[c] - n) * 5 <= mote__sizeclass_size[c] || n <= 64);
    }
    /* at least 8 blocks a page (4 above 16 KiB: a thread uses a big class a
     * few blocks at a time), at most an eighth of it wasted at the tail */
    for (unsigned c = 1; c < HEAP_NCLS; c++) {
        size_t page = (size_t)mote__sizeclass_slices[c] * HEAP_SLICE_SIZE;
        CHECK(page / mote__sizeclass_size[c] >=
              (mote__sizeclass_size[c] > 16384 ? 4 : 8));
        CHECK(page / mote__sizeclass_size[c] <= HEAP_BM_MAXBLOCKS || c < HEAP_BITMAP_CLS);
        CHECK((page % mote__sizeclass_size[c]) * 8 <= page);
    }
}

TEST(calloc_zeroes_and_realloc_keeps_contents)
{
    for (size_t n = 1; n < 300000; n = n * 3 + 1) {
        unsigned char *p = mote_calloc(n, 1);
        CHECK(p != NULL);
        for (size_t i = 0; i < n; i++)
            CHECK_EQ(p[i], 0);
        memset(p, 0x5a, n);
        mote_free(p);
    }
    errno = 0;
    CHECK(mote_calloc(SIZE_MAX / 2, 3) == NULL);
    CHECK_EQ(errno, ENOMEM);
    errno = 0;
    CHECK(mote_malloc(SIZE_MAX - 4096) == NULL);
    CHECK_EQ(errno, ENOMEM);

    /* realloc keeps contents across every kind of block */
    unsigned char *p = mote_realloc(NULL, 10);
    CHECK(p != NULL);
    for (int i = 0; i < 10; i++)
        p[i] = (unsigned char)i;
    size_t n = 10;
    while (n < (8u << 20)) {
        size_t m = n * 3;
        p = mote_realloc(p, m);
        CHECK(p != NULL);
        for (size_t i = 0; i < n; i++)
            CHECK_EQ(p[i], (unsigned char)i);
        for (size_t i = n; i < m; i++)
            p[i] = (unsigned char)i;
        n = m;
    }
    p = mote_realloc(p, 5);
    for (int i = 0; i < 5; i++)
        CHECK_EQ(p[i], i);
    errno = 0;
    CHECK(mote_realloc(p, SIZE_MAX - 100) == NULL); /* fails, keeps p */
    CHECK_EQ(errno, ENOMEM);
    for (int i = 0; i < 5; i++)
        CHECK_EQ(p[i], i);
    CHECK(mote_realloc(p, 0) == NULL); /* frees */
}

TEST(aligned_alloc_honours_every_power_of_two)
{
    for (size_t a = 1; a <= (16u << 20); a *= 2) {
        size_t sizes[] = {1, a / 2 + 1, a, 3 * a + 5, 100000};
        for (int k = 0; k < 5; k++) {
            void *p = mote_aligned_alloc(a, sizes[k]);
            CHECK(p != NULL);
            CHECK_EQ((uintptr_t)p % a, 0);
            CHECK(mote_usable_size(p) >= sizes[k]);
            memset(p, 1, sizes[k]);
            mote_free(p);
        }
    }
    /* Size 0: a block of its own, which frees cleanly, beside the blocks
     * allocated after it (before: the same address as the next large
     * block, or a pointer into a neighbouring segment). */
    for (size_t a = 32; a <= (8u << 20); a *= 2) {
        void *small[64];
        for (int i = 0; i < 64; i++)
            CHECK((small[i] = mote_malloc(48)) != NULL);
        void *z = mote_aligned_alloc(a, 0);
        CHECK(z != NULL);
        CHECK_EQ((uintptr_t)z % a, 0);
        void *next = mote_malloc(300000), *next2 = mote_aligned_alloc(a, 0);
        CHECK(next != NULL && next2 != NULL);
        CHECK(next != z && next2 != z);
        memset(next, 7, 300000);
        mote_free(z);
        mote_free(next2);
        CHECK_EQ(((unsigned char *)next)[299999], 7);
        mote_free(next);
        for (int i = 0; i < 64; i++)
            mote_free(small[i]);
    }
    errno = 0;
    CHECK(mote_aligned_alloc(3, 10) == NULL);
    CHECK_EQ(errno, EINVAL);
    errno = 0;
    CHECK(mote_aligned_alloc(0, 10) == NULL);
    CHECK_EQ(errno, EINVAL);
}

TEST(heap_metrics_account_for_every_byte)
{
    mote_mem_release();
    uint64_t in0 = metric("/heap/inuse:bytes");
    uint64_t v;
    CHECK_EQ(mote__heap_metric("/heap/nope:bytes", &v), -ENOENT);
    enum { N = 1000 };
    static void *p[N];
    for (int i = 0; i < N; i++)
        p[i] = mote_malloc(1000);
    uint64_t in1 = metric("/heap/inuse:bytes");
    CHECK(in1 >= in0 + N * 1000);
    CHECK(in1 <= in0 + N * 1024 + 4096);
    void *big = mote_malloc(10 << 20);
    CHECK(metric("/heap/inuse:bytes") >= in1 + (10 << 20));
    CHECK(metric("/heap/mapped:bytes") >= (10 << 20));
    mote_free(big);
    for (int i = 0; i < N; i++)
        mote_free(p[i]);
    CHECK(metric("/heap/inuse:bytes") <= in0 + 4096);
    uint64_t m = metric("/heap/mapped:bytes");
    CHECK_EQ(metric("/heap/inuse:bytes") + metric("/heap/free:bytes") +
                 metric("/heap/released:bytes"),
             m);
    mote_mem_release();
    /* after a release, what is free is (almost) all released */
    CHECK(metric("/heap/free:bytes") <= 256 * 1024);
}

TEST(heap_limit_makes_malloc_fail_cleanly)
{
    mote_mem_release();
    uint64_t base = mote__heap_committed_bytes();
    CHECK_EQ(mote__heap_set_limit(base + (32u << 20)), 0);
    static void *p[100000];
    int n = 0;
    errno = 0;
    while (n < 100000 && (p[n] = mote_malloc(4000)) != NULL)
        n++;
    CHECK(n < 100000);
    CHECK_EQ(errno, ENOMEM);
    CHECK(n > 1000); /* got close to the limit */
    errno = 0;
    CHECK(mote_malloc(50 << 20) == NULL);
    CHECK_EQ(errno, ENOMEM);
    CHECK(mote__heap_committed_bytes() <= base + (32u << 20));
    for (int i = 0; i < n; i++)
        mote_free(p[i]);
    CHECK_EQ(mote__heap_set_limit(0), 0);
    void *q = mote_malloc(50 << 20);
    CHECK(q != NULL);
    mote_free(q);
}

/* Under RLIMIT_AS: once the program frees what it has, its address space
 * is its own again at once, not after the decay period (every big block
 * failed with ENOMEM until then). */
static int big_blocks_after_freeing_all(void)
{
    enum { MAXB = 1024 };
    static void *v[MAXB];
    int k = 0;
    while (k < MAXB && (v[k] = mote_malloc(1 << 20)))
        memset(v[k++], 1, 4096);
    if (k == MAXB || k < 16) /* no limit met, or hardly any room */
        return 4;
    for (int i = 0; i < k; i++)
        mote_free(v[i]);
    static const size_t want[] = {100, 200000, 3 << 20, 64 << 20, 128 << 20};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        void *p = mote_malloc(want[i]);
        if (!p)
            return 10 + (int)i;
        mote_free(p);
    }
    return 0;
}

TEST(freed_memory_serves_big_blocks_at_once_under_an_address_space_limit)
{
    if (TEST_SANITIZED) /* the shadow memory is address space too */
        TEST_SKIP("sanitizer build");
    CHECK_EQ(test_fork_with_address_space(big_blocks_after_freeing_all, 256u << 20), 0);
}

/* Runs fn in a child, which must abort; what it wrote to stderr in buf. */
static void abort_output(void (*fn)(void), char *buf, size_t len)
{
    int pipefd[2];
    CHECK(pipe(pipefd) == 0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        dup2(pipefd[1], 2);
        fn();
        _exit(0);
    }
    close(pipefd[1]);
    ssize_t r, n = 0;
    while ((r = read(pipefd[0], buf + n, len - 1 - (size_t)n)) > 0)
        n += r;
    buf[n] = 0;
    close(pipefd[0]);
    int st;
    CHECK(waitpid(pid, &st, 0) == pid);
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT);
}

/* fn aborts with the report of an invalid pointer given to call, which
 * names a double free exactly when twice is true. */
static void expect_abort_says(void (*fn)(void), const char *call, bool twice)
{
    char buf[512];
    abort_output(fn, buf, sizeof buf);
    char want[64];
    snprintf(want, sizeof want, "mote: %s(): invalid pointer 0x", call);
    if (!strstr(buf, want))
        fprintf(stderr, "expected \"%s\", got: %s\n", want, buf);
    CHECK(strstr(buf, want) != NULL);
    if ((strstr(buf, ": a double free (the block is free already)") != NULL) != twice)
        fprintf(stderr, "expected %sa double free named, got: %s\n", twice ? "" : "no ",
                buf);
    CHECK((strstr(buf, ": a double free (the block is free already)") != NULL) == twice);
}

static void double_free_small(void)
{
    void *p = mote_malloc(24);
    mote_free(p);
    mote_free(p);
}
static void double_free_large(void)
{
    void *p = mote_malloc(300000);
    mote_free(p);
    mote_free(p);
}
/* 10 MiB: the first free keeps it in the thread's run cache. */
static void double_free_huge(void)
{
    void *p = mote_malloc(10 << 20);
    mote_free(p);
    mote_free(p);
}
/* Past what a run cache keeps: the first free takes it out of the segment
 * map, and the second reads as any unknown pointer. */
static void double_free_huge_unkept(void)
{
    void *p = mote_malloc(HEAP_RUNCACHE_BIG_MAX + (1 << 20));
    mote_free(p);
    mote_free(p);
}
static void free_stack(void)
{
    int x;
    mote_free(&x);
}
static void free_interior(void)
{
    char *p = mote_malloc(100);
    mote_free(p + 16);
}
static void free_interior_huge(void)
{
    char *p = mote_malloc(10 << 20);
    mote_free(p + 4096);
}
static void *remote_ptr;
static void *remote_free_thread(void *arg)
{
    (void)arg;
    mote_free(remote_ptr);
    return NULL;
}
/* (another thread's block: that free takes the fast path's other-thread
 * branch, which checks the pointer on its own lookup) */
static void free_interior_remote(void)
{
    remote_ptr = (char *)mote_malloc(100) + 16;
    pthread_t t;
    pthread_create(&t, NULL, remote_free_thread, NULL);
    pthread_join(t, NULL);
}
static void double_free_remote(void)
{
    remote_ptr = mote_malloc(40);
    pthread_t t;
    pthread_create(&t, NULL, remote_free_thread, NULL);
    pthread_join(t, NULL);
    pthread_create(&t, NULL, remote_free_thread, NULL);
    pthread_join(t, NULL);
}

/* The last block a small page can hold, never carved yet (the page's
 * blocks are carved a few KiB at a time): a pointer malloc never returned,
 * on a block boundary.  Taken free, it would be handed out twice. */
static void *uncarved_block(void)
{
    char *p = mote_malloc(1500); /* a class few blocks of which are carved at once */
    heap_page *pg = heap_segment_of(p)->map[((uintptr_t)p >> HEAP_SLICE_SHIFT) & 63];
    CHECK(pg->kind == HEAP_PAGE_SMALL && page_capacity(pg) < pg->reserved);
    return pg->start + (size_t)(pg->reserved - 1) * pg->bsize;
}
static void free_uncarved(void) { mote_free(uncarved_block()); }
static void *(*remote_make)(void);
static void *remote_maker(void *arg)
{
    (void)arg;
    remote_ptr = remote_make();
    return NULL;
}
/* Frees the block make() returns on a thread that has exited by then: the
 * free keeps the block in this thread's list of other threads' blocks,
 * which its next mallocs take from. */
static void free_made_by_an_exited_thread(void *(*make)(void))
{
    mote_free(mote_malloc(16)); /* this thread has a cache */
    remote_make = make;
    pthread_t t;
    pthread_create(&t, NULL, remote_maker, NULL);
    pthread_join(t, NULL);
    mote_free(remote_ptr);
}
static void free_uncarved_remote(void) { free_made_by_an_exited_thread(uncarved_block); }
/* A block carved onto a fresh page's free list with the one malloc took,
 * never handed out: on a block boundary, in the carved part, and free.
 * Taken free again, it would be on the free list twice. */
static void *carved_unused_block(void)
{
    for (int i = 0; i < 10000; i++) {
        char *p = mote_malloc(2000); /* 2 KiB blocks: two carved at a time */
        heap_page *pg = heap_segment_of(p)->map[((uintptr_t)p >> HEAP_SLICE_SHIFT) & 63];
        CHECK(pg->kind == HEAP_PAGE_SMALL);
        if (page_used(pg) == 1 && page_capacity(pg) == 2 && p == (char *)pg->start)
            return p + pg->bsize;
    }
    CHECK(!"no fresh page of 2 KiB blocks");
    return NULL;
}
static void free_carved_unused(void) { mote_free(carved_unused_block()); }
static void realloc_carved_unused(void)
{
    (void)!mote_realloc(carved_unused_block(), 100);
}
static void free_carved_unused_remote(void)
{
    free_made_by_an_exited_thread(carved_unused_block);
}
static void realloc_freed(void)
{
    char *p = mote_malloc(100);
    mote_free(p);
    (void)!mote_realloc(p, 104); /* fits in place: no free to catch it */
}
static void realloc_freed_bitmap(void)
{
    char *p = mote_malloc(9000);
    mote_free(p);
    (void)!mote_realloc(p, 9000);
}
static void realloc_freed_growing(void)
{
    char *p = mote_malloc(100);
    mote_free(p);
    (void)!mote_realloc(p, 5000); /* a new block: caught before the copy */
}
/* Two slices: the first free keeps it in the thread's run cache. */
static void double_free_kept_large(void)
{
    void *p = mote_malloc(100000);
    mote_free(p);
    mote_free(p);
}

/* twice: the report names a double free. */
#define ABORT_CASE(fn, twice)                                          \
    do {                                                               \
        if (TEST_SANITIZED) /* fork + abort under sanitizers: noise */ \
            TEST_SKIP("sanitizer build");                              \
        expect_abort_says(fn, "free", twice);                          \
    } while (0)

TEST(double_free_of_small_block_aborts) { ABORT_CASE(double_free_small, true); }
TEST(double_free_of_large_block_aborts) { ABORT_CASE(double_free_large, true); }
TEST(double_free_of_a_large_block_in_the_run_cache_aborts)
{
    ABORT_CASE(double_free_kept_large, true);
}
TEST(double_free_of_huge_block_aborts)
{
    ABORT_CASE(double_free_huge, true);
    ABORT_CASE(double_free_huge_unkept, false);
}
TEST(free_of_stack_address_aborts) { ABORT_CASE(free_stack, false); }
TEST(free_of_interior_pointer_aborts) { ABORT_CASE(free_interior, false); }
TEST(free_of_interior_pointer_of_huge_block_aborts)
{
    ABORT_CASE(free_interior_huge, false);
}
TEST(free_of_interior_pointer_from_another_thread_aborts)
{
    ABORT_CASE(free_interior_remote, false);
}
TEST(double_free_from_other_threads_aborts) { ABORT_CASE(double_free_remote, true); }
TEST(free_of_a_block_never_carved_aborts) { ABORT_CASE(free_uncarved, false); }
TEST(free_of_a_block_never_carved_from_another_thread_aborts)
{
    ABORT_CASE(free_uncarved_remote, false);
}
/* (as a double free: it is free already, though no malloc returned it) */
TEST(free_of_a_carved_block_never_handed_out_aborts)
{
    ABORT_CASE(free_carved_unused, true);
    ABORT_CASE(free_carved_unused_remote, true);
    if (!TEST_SANITIZED)
        expect_abort_says(realloc_carved_unused, "realloc", true);
}
TEST(realloc_of_a_freed_block_aborts)
{
    if (TEST_SANITIZED)
        TEST_SKIP("sanitizer build");
    expect_abort_says(realloc_freed, "realloc", true);
    expect_abort_says(realloc_freed_bitmap, "realloc", true);
    expect_abort_says(realloc_freed_growing, "realloc", true);
}

/* The size of a freed big block (its page is gone): the report says the
 * block is free, and does not call it a double free. */
static void usable_size_of_a_freed_large_block(void)
{
    void *p = mote_malloc(300000);
    mote_free(p);
    (void)mote_usable_size(p);
}
TEST(usable_size_of_a_freed_large_block_aborts_naming_a_use_after_free)
{
    if (TEST_SANITIZED)
        TEST_SKIP("sanitizer build");
    char buf[512];
    abort_output(usable_size_of_a_freed_large_block, buf, sizeof buf);
    if (!strstr(buf, "mote: mote_usable_size(): invalid pointer 0x") ||
        !strstr(buf, ": the block is free already (a use after free)"))
        fprintf(stderr, "got: %s\n", buf);
    CHECK(strstr(buf, "mote: mote_usable_size(): invalid pointer 0x") != NULL);
    CHECK(strstr(buf, ": the block is free already (a use after free)") != NULL);
    CHECK(strstr(buf, "double free") == NULL);
}

TEST_MAIN()
