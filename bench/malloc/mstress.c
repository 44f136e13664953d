/*
 * mstress.c - threads that come and go, allocating through every entry
 * point and trading blocks: ROUNDS rounds of THREADS new threads, ITERS
 * steps each.  A step makes a block (malloc, calloc, aligned_alloc, or a
 * realloc that grows a smaller one) and either swaps it into a shared
 * board of 1024 slots, freeing what it takes out (a block another thread
 * made, maybe one that has exited), or puts it in one of the thread's 512
 * slots, freeing the block there; one free in four first shrinks the block
 * with realloc.  Sizes: 19..318 B mostly, one block in 50 from MID_MIN to
 * MID_MAX, and with BIG one in 1,000 from 256 KiB to 4.25 MiB.  Each block
 * is stamped at its start, middle and end (only there: a buffer the
 * program fills in part) and checked before it is freed, and
 * malloc_usable_size must cover it.  Allocator-agnostic (LD_PRELOAD).
 *
 *   mstress [THREADS=8] [ROUNDS=10] [ITERS=50000] [MID_MIN=4096]
 *           [MID_MAX=65536] [BIG=1]
 * prints: bench=mstress threads=N peak_rss=BYTES checked=N secs=S
 *
 * docs/heap.md ("Known limits") has what it showed (2026-12-05): with
 * blocks of 4-32 KiB stamped at three points (mstress 8 10 50000 4096
 * 32768 0), mote's peak RSS was 1.9x glibc's.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "mbutil.h"

enum { BOARD = 1024, KEEP = 512 };
static _Atomic(uintptr_t) board[BOARD];
static long iters = 50000;
static size_t mid_min = 4096, mid_max = 65536;
static int big = 1;
static _Atomic long checked;

typedef struct stamp {
    size_t n;     /* the block's size */
    uint64_t tag; /* from its address: a block handed out twice shows */
} stamp;

static inline uint64_t tag_of(const void *p)
{
    return (uint64_t)(uintptr_t)p * 0x9E3779B97F4A7C15ULL;
}

static void fail(const char *what, const void *p, size_t n)
{
    fprintf(stderr, "mstress: %s (block %p, %zu bytes)\n", what, p, n);
    abort();
}

static void *make(uint64_t *s)
{
    uint64_t r = mb_rnd(s);
    size_t n;
    if (big && r % 1000 == 0)
        n = (256u << 10) + (size_t)(r >> 12) % (4u << 20);
    else if (r % 50 == 0)
        n = mid_min + (size_t)(r >> 12) % (mid_max - mid_min);
    else
        n = sizeof(stamp) + 3 + (size_t)(r >> 12) % 300;
    stamp *h;
    switch ((r >> 40) % 8) {
    case 0: h = calloc(1, n); break;
    case 1:
        n = (n + 63) & ~(size_t)63;
        h = aligned_alloc(64, n);
        if (h && (uintptr_t)h % 64)
            fail("aligned_alloc misaligned", h, n);
        break;
    case 2: {
        void *p = malloc(n / 2);
        h = p ? realloc(p, n) : NULL;
        break;
    }
    default: h = malloc(n);
    }
    if (!h)
        fail("out of memory", NULL, n);
    if (malloc_usable_size(h) < n)
        fail("usable size short", h, n);
    h->n = n;
    h->tag = tag_of(h);
    unsigned char *b = (unsigned char *)(h + 1);
    size_t m = n - sizeof *h;
    b[0] = (unsigned char)h->tag;
    b[m / 2] = 0x5a;
    b[m - 1] = (unsigned char)(h->tag >> 8);
    return h;
}

static void check_free(void *p)
{
    if (!p)
        return;
    stamp *h = p;
    unsigned char *b = (unsigned char *)(h + 1);
    size_t m = h->n - sizeof *h;
    if (h->tag != tag_of(h) || b[0] != (unsigned char)h->tag || b[m / 2] != 0x5a ||
        b[m - 1] != (unsigned char)(h->tag >> 8))
        fail("block changed under the program", h, h->n);
    atomic_fetch_add_explicit(&checked, 1, memory_order_relaxed);
    if ((h->tag >> 29) % 4 == 0) { /* (not the thread's stream: that stays the same) */
        stamp *q = realloc(h, sizeof *h + 1 + m / 2);
        if (!q)
            fail("realloc to shrink failed", h, h->n);
        if (q->tag != tag_of(h))
            fail("realloc lost the block's start", q, q->n);
        h = q;
    }
    free(h);
}

static void *worker(void *arg)
{
    uint64_t s = (uint64_t)(uintptr_t)arg * 0x2545F4914F6CDD1DULL + 1;
    void **keep = calloc(KEEP, sizeof *keep);
    if (!keep)
        fail("out of memory", NULL, KEEP * sizeof *keep);
    for (long i = 0; i < iters; i++) {
        uint64_t r = mb_rnd(&s);
        if (r % 4 == 0) {
            uintptr_t old =
                atomic_exchange(&board[(r >> 8) % BOARD], (uintptr_t)make(&s));
            check_free((void *)old);
        } else {
            unsigned k = (unsigned)((r >> 8) % KEEP);
            check_free(keep[k]);
            keep[k] = (r >> 32) % 3 ? make(&s) : NULL;
        }
    }
    /* every other thread leaves a quarter of its blocks on the board */
    for (unsigned k = 0; k < KEEP; k++) {
        if ((k & 3) == 0 && (uintptr_t)arg % 2 == 0) {
            uintptr_t old = atomic_exchange(&board[k % BOARD], (uintptr_t)keep[k]);
            check_free((void *)old);
        } else {
            check_free(keep[k]);
        }
    }
    free(keep);
    return NULL;
}

int main(int argc, char **argv)
{
    int threads = argc > 1 ? atoi(argv[1]) : 8, rounds = argc > 2 ? atoi(argv[2]) : 10;
    if (argc > 3)
        iters = atol(argv[3]);
    if (argc > 4)
        mid_min = (size_t)atol(argv[4]);
    if (argc > 5)
        mid_max = (size_t)atol(argv[5]);
    if (argc > 6)
        big = atoi(argv[6]);
    if (threads < 1 || threads > 256 || rounds < 1 || iters < 1 ||
        mid_min < sizeof(stamp) + 3 || mid_max <= mid_min) {
        fprintf(stderr,
                "usage: mstress [THREADS<=256] [ROUNDS] [ITERS] [MID_MIN] [MID_MAX] "
                "[BIG=0|1]\n");
        return 2;
    }
    double t0 = mb_now();
    for (int r = 0; r < rounds; r++) {
        pthread_t t[256];
        for (int i = 0; i < threads; i++)
            if (pthread_create(&t[i], NULL, worker,
                               (void *)(uintptr_t)(r * threads + i + 1)))
                fail("pthread_create failed", NULL, 0);
        for (int i = 0; i < threads; i++)
            pthread_join(t[i], NULL);
    }
    for (int i = 0; i < BOARD; i++)
        check_free((void *)atomic_exchange(&board[i], 0));
    printf("bench=mstress threads=%d peak_rss=%ld checked=%ld secs=%.3f\n", threads,
           mb_maxrss(), atomic_load(&checked), mb_now() - t0);
    return 0;
}
