/*
 * mallocbench.c - the seed's malloc benchmark, our own version: each thread
 * keeps `slots` pointers and, `ops` times, frees a random slot's block (if
 * any) and puts a new block of a random size (16 B .. 4 KiB) there, writing
 * its first and last byte.  Throughput counts one malloc+free pair as one
 * operation.  Allocator-agnostic: run it under LD_PRELOAD.
 *
 *   mallocbench THREADS [OPS_PER_THREAD=2000000] [SLOTS=1000] [MIN=16] [MAX=4096]
 * prints: bench=mallocbench threads=N mops=X peak_rss=BYTES secs=S
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "mbutil.h"

static long ops = 2000000, slots = 1000, minsz = 16, maxsz = 4096;
static pthread_barrier_t start;

static inline uint64_t rnd(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

static void *worker(void *arg)
{
    uint64_t seed = 0x9E3779B97F4A7C15ULL * ((uintptr_t)arg + 1);
    char **slot = calloc((size_t)slots, sizeof *slot);
    pthread_barrier_wait(&start);
    for (long i = 0; i < ops; i++) {
        uint64_t r = rnd(&seed);
        size_t k = (size_t)(r % (uint64_t)slots);
        size_t n = (size_t)minsz + (size_t)((r >> 32) % (uint64_t)(maxsz - minsz + 1));
        free(slot[k]);
        char *p = malloc(n);
        p[0] = (char)i;
        p[n - 1] = (char)i;
        slot[k] = p;
    }
    for (long k = 0; k < slots; k++)
        free(slot[k]);
    free(slot);
    return NULL;
}

int main(int argc, char **argv)
{
    int threads = argc > 1 ? atoi(argv[1]) : 1;
    if (argc > 2)
        ops = atol(argv[2]);
    if (argc > 3)
        slots = atol(argv[3]);
    if (argc > 4)
        minsz = atol(argv[4]);
    if (argc > 5)
        maxsz = atol(argv[5]);
    if (threads < 1 || ops < 1 || slots < 1 || minsz < 1 || maxsz < minsz) {
        fprintf(stderr, "usage: mallocbench THREADS [OPS] [SLOTS] [MIN] [MAX]\n");
        return 2;
    }
    pthread_t *t = malloc(sizeof *t * (size_t)threads);
    pthread_barrier_init(&start, NULL, (unsigned)threads + 1);
    for (int i = 0; i < threads; i++)
        pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)i);
    struct timespec a, b;
    pthread_barrier_wait(&start);
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (int i = 0; i < threads; i++)
        pthread_join(t[i], NULL);
    clock_gettime(CLOCK_MONOTONIC, &b);
    double secs = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9;
    printf("bench=mallocbench threads=%d mops=%.2f peak_rss=%ld secs=%.3f\n", threads,
           (double)ops * threads / secs / 1e6, mb_maxrss(), secs);
    free(t);
    return 0;
}
