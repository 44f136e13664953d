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
} pair;

static long blocks = 2000000, maxsz = 1024;
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

static void *producer(void *arg)
{
    pair *p = arg;
    pin(2 * p->index + 1);
    uint64_t s = p->seed;
    void *own[64] = {0};
    size_t h = 0;
    for (long i = 0; i < blocks; i++) {
        size_t n = 16 + (size_t)(rnd(&s) % (uint64_t)(maxsz - 15));
        char *b = malloc(n);
        b[0] = (char)n;
        b[n - 1] = 1;
        if ((i & 7) == 0) { /* one in 8 stays local */
            size_t k = (size_t)(s >> 40) % 64;
            free(own[k]);
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
    for (int k = 0; k < 64; k++)
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
        while ((h = atomic_load_explicit(&p->head, memory_order_acquire)) == t)
            sched_yield();
        for (; t < h; t++) {
            char *b = p->slot[t % RING];
            if (!b) {
                atomic_store_explicit(&p->tail, t + 1, memory_order_release);
                return (void *)sum;
            }
            sum += b[0];
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
    pair *ps = calloc((size_t)pairs, sizeof *ps);
    pthread_t *t = malloc(sizeof *t * 2 * (size_t)pairs);
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
    printf("bench=xthread threads=%d mops=%.2f peak_rss=%ld secs=%.3f pinned=%d\n",
           2 * pairs, (double)blocks * pairs / secs / 1e6, mb_maxrss(), secs, ncpus >= 2);
    free(t);
    free(ps);
    return 0;
}
