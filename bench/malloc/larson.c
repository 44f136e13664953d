/*
 * larson.c - server-like churn, after Larson and Krishnan's benchmark:
 * THREADS threads each own a region of SLOTS slots in one shared table.
 * Each operation allocates a block of random size (MIN..MAX), writes it and
 * swaps it into a random slot - of its own region 7 times in 8, of any
 * region otherwise - freeing the block it took out, which another thread
 * (or a predecessor) may have allocated.  After OPS operations a thread
 * exits and a successor takes over its region and its blocks; ROUNDS
 * generations per region.  So blocks are freed by threads other than their
 * allocator while it allocates, and threads come and go handing their
 * blocks on.  Allocator-agnostic (LD_PRELOAD).
 *
 *   larson THREADS [ROUNDS=10] [OPS=200000] [SLOTS=8000] [MIN=16] [MAX=1000]
 *          [CROSS=8]
 * (CROSS, a power of two: 1 swap in CROSS goes to any region; ROUNDS=1
 * with a large CROSS is a pool of long-lived threads that rarely free each
 * other's blocks)
 * prints: bench=larson threads=N mops=X peak_rss=BYTES rss_end=BYTES secs=S
 * (mops: malloc+free pairs per second, in millions; rss_end: with the
 * table still full, after the last thread exited)
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "mbutil.h"

static long rounds = 10, ops = 200000, slots = 8000, minsz = 16, maxsz = 1000, cross = 8;
static int cross_shift = 3; /* log2(cross): the decision's bits, not the slot's */
static int nthreads;
static _Atomic(char *) *table;

typedef struct region {
    int id;
    int gen;
    uint64_t seed;
} region;

static void *worker(void *arg)
{
    region *r = arg;
    uint64_t s = r->seed;
    long total = (long)nthreads * slots;
    for (long i = 0; i < ops; i++) {
        uint64_t x = mb_rnd(&s);
        size_t n = (size_t)minsz + (size_t)(x % (uint64_t)(maxsz - minsz + 1));
        x >>= 20;
        long k = (x & (uint64_t)(cross - 1))
                     ? (long)r->id * slots + (long)((x >> cross_shift) % (uint64_t)slots)
                     : (long)((x >> cross_shift) % (uint64_t)total);
        char *b = malloc(n);
        b[0] = (char)n;
        b[n - 1] = (char)i;
        char *old = atomic_exchange_explicit(&table[k], b, memory_order_acq_rel);
        free(old);
    }
    r->seed = s;
    return NULL;
}

static void *region_main(void *arg)
{
    region *r = arg;
    for (r->gen = 0; r->gen < rounds; r->gen++) {
        pthread_t t; /* the successor inherits the region and its blocks */
        if (pthread_create(&t, NULL, worker, r) != 0)
            abort();
        pthread_join(t, NULL);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    nthreads = argc > 1 ? atoi(argv[1]) : 2;
    if (argc > 2)
        rounds = atol(argv[2]);
    if (argc > 3)
        ops = atol(argv[3]);
    if (argc > 4)
        slots = atol(argv[4]);
    if (argc > 5)
        minsz = atol(argv[5]);
    if (argc > 6)
        maxsz = atol(argv[6]);
    if (argc > 7)
        cross = atol(argv[7]);
    if (nthreads < 1 || rounds < 1 || ops < 1 || slots < 1 || minsz < 2 ||
        maxsz < minsz || cross < 1 || (cross & (cross - 1))) {
        fprintf(stderr, "usage: larson THREADS [ROUNDS] [OPS] [SLOTS] [MIN>=2] [MAX] "
                        "[CROSS, a power of two]\n");
        return 2;
    }
    cross_shift = __builtin_ctzl((unsigned long)cross);
    table = calloc((size_t)nthreads * (size_t)slots, sizeof *table);
    region *rg = calloc((size_t)nthreads, sizeof *rg);
    pthread_t *t = malloc(sizeof *t * (size_t)nthreads);
    double t0 = mb_now();
    for (int i = 0; i < nthreads; i++) {
        rg[i].id = i;
        rg[i].seed = 0x9E3779B97F4A7C15ULL * (uint64_t)(i + 1);
        pthread_create(&t[i], NULL, region_main, &rg[i]);
    }
    for (int i = 0; i < nthreads; i++)
        pthread_join(t[i], NULL);
    double secs = mb_now() - t0;
    long rss_end = mb_rss();
    printf("bench=larson threads=%d mops=%.3f peak_rss=%ld rss_end=%ld secs=%.3f\n",
           nthreads, (double)ops * (double)rounds * nthreads / secs / 1e6, mb_maxrss(),
           rss_end, secs);
    for (long k = 0; k < (long)nthreads * slots; k++)
        free(atomic_load(&table[k]));
    free(table);
    free(rg);
    free(t);
    return 0;
}
