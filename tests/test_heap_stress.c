/*
 * test_heap_stress.c - randomized stress of mote's allocator against a
 * shadow model.  Every live block carries its size and a seed in its first
 * 16 bytes and a pattern derived from them in every other byte; the pattern
 * is checked when the block is freed, so overlapping blocks, lost writes or
 * a block handed out twice are caught.  Checks alignment and usable size on
 * every allocation, and non-overlap of all live blocks at phase ends.
 * Two cases: one thread alone, and threads that trade blocks through an
 * atomic exchange table, so most frees are cross-thread; after each, inuse
 * must be back to where it started.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "heap/heap.h"
#include "mote.h"

typedef struct hdr {
    uint64_t size, seed;
} hdr;

static inline unsigned char pat(uint64_t seed, size_t i)
{
    return (unsigned char)((seed >> (i % 7)) + i * 31);
}

static size_t pick_size(uint64_t *s)
{
    uint64_t r = test_rnd(s) % 1000;
    if (r < 700)
        return 16 + test_rnd(s) % 512;
    if (r < 950)
        return 16 + test_rnd(s) % 16384;
    if (r < 998)
        return 16 + test_rnd(s) % 400000;
    return (2u << 20) + test_rnd(s) % (3u << 20);
}

/* Allocates a block of n bytes in one of the API's ways and fills it. */
static hdr *make(uint64_t *s, size_t n)
{
    hdr *h;
    size_t align = 16;
    switch (test_rnd(s) % 8) {
    case 0:
        h = mote_calloc(1, n);
        CHECK(h != NULL);
        for (size_t i = 0; i < n; i += 97)
            CHECK_EQ(((unsigned char *)h)[i], 0);
        break;
    case 1:
        align = (size_t)16 << (test_rnd(s) % 9);
        h = mote_aligned_alloc(align, n);
        break;
    case 2: h = mote_realloc(NULL, n); break;
    default: h = mote_malloc(n); break;
    }
    CHECK(h != NULL);
    CHECK_EQ((uintptr_t)h % align, 0);
    CHECK(mote_usable_size(h) >= n);
    h->size = n;
    h->seed = test_rnd(s);
    unsigned char *b = (unsigned char *)h;
    if (n <= 65536) {
        for (size_t i = sizeof(hdr); i < n; i++)
            b[i] = pat(h->seed, i);
    } else { /* big: pattern on a sample, so the test stays fast */
        for (size_t i = sizeof(hdr); i < n; i += 509)
            b[i] = pat(h->seed, i);
        b[n - 1] = pat(h->seed, n - 1);
    }
    return h;
}

static void verify(const hdr *h)
{
    const unsigned char *b = (const unsigned char *)h;
    size_t n = h->size;
    CHECK(n >= sizeof(hdr) && n < (64u << 20));
    if (n <= 65536) {
        for (size_t i = sizeof(hdr); i < n; i++)
            if (b[i] != pat(h->seed, i)) {
                fprintf(stderr, "block %p size %zu corrupt at %zu\n", (void *)h, n, i);
                CHECK(0);
            }
    } else {
        for (size_t i = sizeof(hdr); i < n; i += 509)
            CHECK_EQ(b[i], pat(h->seed, i));
        CHECK_EQ(b[n - 1], pat(h->seed, n - 1));
    }
}

/* Sometimes grows or shrinks a live block with realloc, keeping the model. */
static hdr *maybe_realloc(uint64_t *s, hdr *h)
{
    if (test_rnd(s) % 8)
        return h;
    verify(h);
    size_t old = h->size, n = pick_size(s);
    uint64_t seed = h->seed;
    hdr *q = mote_realloc(h, n);
    CHECK(q != NULL);
    CHECK(mote_usable_size(q) >= n);
    unsigned char *b = (unsigned char *)q;
    size_t keep = old < n ? old : n;
    for (size_t i = sizeof(hdr); i < keep; i += (old <= 65536 ? 13 : 509))
        CHECK_EQ(b[i], pat(seed, i));
    q->size = n;
    if (n <= 65536) {
        for (size_t i = sizeof(hdr); i < n; i++)
            b[i] = pat(seed, i);
    } else {
        for (size_t i = sizeof(hdr); i < n; i += 509)
            b[i] = pat(seed, i);
        b[n - 1] = pat(seed, n - 1);
    }
    return q;
}

static int cmp_ptr(const void *a, const void *b)
{
    uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
    return x < y ? -1 : x > y;
}

static void check_no_overlap(hdr **live, size_t n)
{
    uintptr_t *v = malloc(n * sizeof *v);
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (live[i])
            v[k++] = (uintptr_t)live[i];
    qsort(v, k, sizeof *v, cmp_ptr);
    for (size_t i = 0; i + 1 < k; i++)
        CHECK(v[i] + mote_usable_size((void *)v[i]) <= v[i + 1]);
    free(v);
}

/* inuse after a release: blocks freed by other threads count until their
 * owner collects them, and mote_mem_release collects this thread's and
 * the exited threads'. */
static uint64_t inuse_after_release(void)
{
    uint64_t v = 0;
    mote_mem_release();
    CHECK_EQ(mote__heap_metric("/heap/inuse:bytes", &v), 0);
    return v;
}

TEST(single_thread_blocks_keep_their_contents)
{
    uint64_t in0 = inuse_after_release();
    enum { SLOTS = 2000 };
    static hdr *live[SLOTS];
    uint64_t s = 88172645463325252ULL;
    long ops = TEST_SCALE(300000, 10);
    for (long i = 0; i < ops; i++) {
        size_t k = test_rnd(&s) % SLOTS;
        if (live[k]) {
            live[k] = maybe_realloc(&s, live[k]);
            verify(live[k]);
            mote_free(live[k]);
            live[k] = NULL;
        } else {
            live[k] = make(&s, pick_size(&s));
        }
        if (i % 50000 == 0)
            check_no_overlap(live, SLOTS);
    }
    check_no_overlap(live, SLOTS);
    for (size_t k = 0; k < SLOTS; k++)
        if (live[k]) {
            verify(live[k]);
            mote_free(live[k]);
            live[k] = NULL;
        }
    CHECK(inuse_after_release() <= in0 + 1024); /* every block came back */
}

/* ---- multi-threaded with cross-thread frees ---- */

enum { XCHG = 256, THREADS = 4, TSLOTS = 500 };
static _Atomic(hdr *) xchg[XCHG];

static void *worker(void *arg)
{
    uint64_t s = 0x2545F4914F6CDD1DULL * ((uintptr_t)arg + 1);
    hdr *live[TSLOTS] = {0};
    long ops = TEST_SCALE(200000, 20);
    for (long i = 0; i < ops; i++) {
        uint64_t r = test_rnd(&s) % 10;
        size_t k = test_rnd(&s) % TSLOTS;
        if (r < 4) { /* trade a block: give ours, take another thread's */
            hdr *mine = live[k] ? live[k] : make(&s, pick_size(&s) % 4096 + 16);
            live[k] = NULL;
            hdr *theirs = atomic_exchange_explicit(&xchg[test_rnd(&s) % XCHG], mine,
                                                   memory_order_acq_rel);
            if (theirs) {
                verify(theirs);
                if (test_rnd(&s) & 1)
                    mote_free(theirs); /* cross-thread free */
                else if (!live[k])
                    live[k] = theirs; /* keep it: freed later, maybe here */
                else
                    mote_free(theirs);
            }
        } else if (live[k]) {
            live[k] = maybe_realloc(&s, live[k]);
            verify(live[k]);
            mote_free(live[k]);
            live[k] = NULL;
        } else {
            live[k] = make(&s, pick_size(&s));
        }
    }
    for (size_t k = 0; k < TSLOTS; k++)
        if (live[k]) {
            verify(live[k]);
            mote_free(live[k]);
        }
    return NULL;
}

TEST(cross_thread_frees_keep_contents_and_return_every_block)
{
    uint64_t in0 = inuse_after_release();
    pthread_t t[THREADS];
    for (int round = 0; round < 2; round++) {
        for (uintptr_t i = 0; i < THREADS; i++)
            CHECK(pthread_create(&t[i], NULL, worker,
                                 (void *)(i + 10 * (uintptr_t)round)) == 0);
        for (int i = 0; i < THREADS; i++)
            CHECK_EQ(pthread_join(t[i], NULL), 0);
    }
    for (int i = 0; i < XCHG; i++) {
        hdr *h = atomic_exchange(&xchg[i], NULL);
        if (h) {
            verify(h);
            mote_free(h);
        }
    }
    CHECK(inuse_after_release() <= in0 + 1024); /* every block came back */
}

TEST_MAIN()
