/*
 * xthread.c - producer/consumer (larson-like): most frees happen on a
 * thread other than the one that allocated.  PAIRS producer threads each
 * allocate blocks of random size (16 B .. MAX), write them and pass them
 * through a single-producer single-consumer ring to their consumer, which
 * reads and frees them.  Every producer also frees some of its own blocks,
 * as real servers do.  Allocator-agnostic: run it under LD_PRELOAD.
 *
 *   xthread PAIRS [BLOCKS_PER_PRODUCER=2000000] [MAX=1024]
 * prints: bench=xthread threads=2*PAIRS mops=X peak_rss=BYTES secs=S pinned=0|1
 * (mops: blocks allocated and freed per second, in millions)
 *
 * XT_PIN=1 pins pair i's consumer and producer to CPUs 2i and 2i+1 of the
 * process's set (modulo its size).  Unpinned, the scheduler sometimes runs
 * a pair on one CPU for part of a run, and then no cache line crosses
 * between CPUs: on a 2-CPU VM one pair took 0.195 s under mote on one CPU,
 * 0.60 s on two, and 0.40 s or 0.60 s unpinned, by the run (tcmalloc: 0.107
 * s and 0.576 s pinned, for 3M blocks).  Pinned, a run measures the
 * allocator's hand-off and not the scheduler's choice.
 *
 * XT_POOL=1 takes the allocator out of the loop: each producer hands out
 * blocks of MAX bytes from a pool made (and written) before the clock
 * starts, and its consumer returns them through a second ring.  The threads
 * still write and read each block as above, so the run is the hand-off of
 * the program alone: the floor under any allocator's time, and the spread
 * of five runs in a row that the machine gives with no allocator at all.
 * On a 2-vCPU VM (2026-12-05) it read 0.22-0.49 s for 24M blocks, and
 * 1.01-1.73 from the slowest to the fastest of five, in step with mote's
 * 0.90-1.52 s and 1.05-1.52: a consumer that falls behind its producer
 * reads blocks that have left the producer's cache, which makes it slower
 * still, and which of the two steady states a run settles in follows the
 * host and how many instructions the consumer spends on each block.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mbutil.h"

enum { RING = 4096, PUBLISH = 64 };
typedef struct pair {
    int index;
    _Atomic(size_t) head; /* written by the producer */
    char pad1[56];
    _Atomic(size_t) tail; /* written by the consumer */
    char pad2[56];
    void *slot[RING];
    uint64_t seed;
    struct pool *pool; /* XT_POOL */
} pair;

/* XT_POOL: a producer's blocks.  The return ring holds the whole pool, so
 * a consumer never waits to give a block back; it publishes what it gave
 * back before it waits for more work, and the producer publishes its ring
 * before it waits for blocks, so neither waits on a batch the other holds. */
enum { POOL = 2 * RING };
typedef struct pool {
    _Atomic(size_t) head; /* written by the consumer */
    char pad1[56];
    _Atomic(size_t) tail; /* written by the producer */
    char pad2[56];
    size_t returned;  /* consumer's: given back, published or not */
    size_t nfree;     /* producer's */
    char *back[POOL]; /* the return ring */
    char *free[POOL]; /* the producer's blocks */
} pool;

static long blocks = 2000000, maxsz = 1024;
static int use_pool;   /* XT_POOL=1 */
static cpu_set_t cpus; /* the process's CPUs, when pinning */
static int ncpus;

/* Pins the calling thread to the k-th CPU of the process's set. */
static void pin(int k)
{
    if (ncpus < 2)
        return;
    for (int c = 0, seen = 0; c < CPU_SETSIZE; c++) {
        if (CPU_ISSET(c, &cpus) && seen++ == k % ncpus) {
            cpu_set_t one;
            CPU_ZERO(&one);
            CPU_SET(c, &one);
            if (pthread_setaffinity_np(pthread_self(), sizeof one, &one) != 0)
                abort();
            return;
        }
    }
}

static inline uint64_t rnd(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

static char *pool_get(pair *p, size_t h)
{
    pool *q = p->pool;
    if (!q->nfree) {
        atomic_store_explicit(&p->head, h, memory_order_release);
        size_t t = atomic_load_explicit(&q->tail, memory_order_relaxed), ph;
        while ((ph = atomic_load_explicit(&q->head, memory_order_acquire)) == t)
            sched_yield();
        for (; t < ph; t++)
            q->free[q->nfree++] = q->back[t % POOL];
        atomic_store_explicit(&q->tail, t, memory_order_release);
    }
    return q->free[--q->nfree];
}

static void pool_give_back(pair *p, char *b)
{
    pool *q = p->pool;
    q->back[q->returned++ % POOL] = b;
    if (q->returned % PUBLISH == 0)
        atomic_store_explicit(&q->head, q->returned, memory_order_release);
}

static void *producer(void *arg)
{
    pair *p = arg;
    pin(2 * p->index + 1);
    uint64_t s = p->seed;
    void *own[64] = {0};
    size_t h = 0;
    for (long i = 0; i < blocks; i++) {
        size_t n = 16 + (size_t)(rnd(&s) % (uint64_t)(maxsz - 15));
        char *b = use_pool ? pool_get(p, h) : malloc(n);
        b[0] = (char)n;
        b[n - 1] = 1;
        if ((i & 7) == 0) { /* one in 8 stays local */
            size_t k = (size_t)(s >> 40) % 64;
            if (!use_pool)
                free(own[k]);
            else if (own[k])
                p->pool->free[p->pool->nfree++] = own[k];
            own[k] = b;
            continue;
        }
        while (h - atomic_load_explicit(&p->tail, memory_order_acquire) >= RING - PUBLISH)
            sched_yield();
        p->slot[h % RING] = b;
        /* Publish in batches: a consumer polling head on every item would
         * bounce its cache line and measure that instead of the allocator. */
        if (++h % PUBLISH == 0)
            atomic_store_explicit(&p->head, h, memory_order_release);
    }
    for (int k = 0; k < 64 && !use_pool; k++)
        free(own[k]);
    while (h - atomic_load_explicit(&p->tail, memory_order_acquire) >= RING - PUBLISH)
        sched_yield();
    p->slot[h % RING] = NULL; /* end */
    atomic_store_explicit(&p->head, h + 1, memory_order_release);
    return NULL;
}

static void *consumer(void *arg)
{
    pair *p = arg;
    pin(2 * p->index);
    size_t t = 0;
    long sum = 0;
    for (;;) {
        size_t h;
        if (use_pool && atomic_load_explicit(&p->head, memory_order_acquire) == t)
            atomic_store_explicit(&p->pool->head, p->pool->returned,
                                  memory_order_release);
        while ((h = atomic_load_explicit(&p->head, memory_order_acquire)) == t)
            sched_yield();
        for (; t < h; t++) {
            char *b = p->slot[t % RING];
            if (!b) {
                atomic_store_explicit(&p->tail, t + 1, memory_order_release);
                return (void *)sum;
            }
            sum += b[0];
            if (use_pool)
                pool_give_back(p, b);
            else
                free(b);
        }
        atomic_store_explicit(&p->tail, t, memory_order_release);
    }
}

int main(int argc, char **argv)
{
    int pairs = argc > 1 ? atoi(argv[1]) : 1;
    if (argc > 2)
        blocks = atol(argv[2]);
    if (argc > 3)
        maxsz = atol(argv[3]);
    if (pairs < 1 || blocks < 1 || maxsz < 16) {
        fprintf(stderr, "usage: xthread PAIRS [BLOCKS] [MAX]\n");
        return 2;
    }
    const char *pinv = getenv("XT_PIN");
    if (pinv && atoi(pinv) && sched_getaffinity(0, sizeof cpus, &cpus) == 0)
        ncpus = CPU_COUNT(&cpus);
    const char *poolv = getenv("XT_POOL");
    use_pool = poolv && atoi(poolv);
    pair *ps = calloc((size_t)pairs, sizeof *ps);
    pthread_t *t = malloc(sizeof *t * 2 * (size_t)pairs);
    if (!ps || !t)
        abort();
    for (int i = 0; use_pool && i < pairs; i++) {
        pool *q = ps[i].pool = calloc(1, sizeof *q);
        char *mem = q ? malloc((size_t)POOL * (size_t)maxsz) : NULL;
        if (!mem)
            abort();
        memset(mem, 0, (size_t)POOL * (size_t)maxsz);
        for (size_t k = 0; k < POOL; k++)
            q->free[q->nfree++] = mem + k * (size_t)maxsz;
    }
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (int i = 0; i < pairs; i++) {
        ps[i].seed = 0x9E3779B97F4A7C15ULL * (uint64_t)(i + 1);
        ps[i].index = i;
        pthread_create(&t[2 * i], NULL, consumer, &ps[i]);
        pthread_create(&t[2 * i + 1], NULL, producer, &ps[i]);
    }
    for (int i = 0; i < 2 * pairs; i++)
        pthread_join(t[i], NULL);
    clock_gettime(CLOCK_MONOTONIC, &b);
    double secs = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9;
    printf(
        "bench=xthread threads=%d mops=%.2f peak_rss=%ld secs=%.3f pinned=%d pool=%d\n",
        2 * pairs, (double)blocks * pairs / secs / 1e6, mb_maxrss(), secs, ncpus >= 2,
        use_pool);
    free(t);
    free(ps);
    return 0;
}
