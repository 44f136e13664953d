/*
 * bigset.c - random replacement in a live set bigger than the CPU caches:
 * THREADS threads each fill LIVE slots with blocks of random size (16 B ..
 * MAX, uniform), then OPS times free the block of a random slot and put a
 * new one there, writing its first and last byte.  So nearly every free
 * gets a block nobody touched for a long time: whatever an allocator reads
 * in a freed block costs it a memory access, where a store into it can
 * wait in the store buffer.  A cache, an index or a server's session
 * table freed at random looks like this.  Allocator-agnostic (LD_PRELOAD).
 *
 *   bigset [THREADS=1] [OPS=5000000] [LIVE=100000] [MAX=1024]
 * prints: bench=bigset threads=N live=LIVE ns_per_op=X peak_rss=BYTES secs=S
 * (ns_per_op: one free and one malloc, per thread, after the fill)
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "mbutil.h"

static long ops = 5000000, live = 100000, maxsz = 1024;
static pthread_barrier_t filled;
static double t_start;

static char *block_new(uint64_t *s)
{
    size_t n = 16 + (size_t)(mb_rnd(s) % (uint64_t)(maxsz - 15));
    char *b = malloc(n);
    if (!b) {
        fprintf(stderr, "bigset: out of memory (%zu bytes)\n", n);
        exit(1);
    }
    b[0] = (char)n;
    b[n - 1] = 1;
    return b;
}

static void *worker(void *arg)
{
    uint64_t s = 0x9E3779B97F4A7C15ULL * ((uint64_t)(uintptr_t)arg + 1);
    char **slot = malloc((size_t)live * sizeof *slot);
    if (!slot) {
        fprintf(stderr, "bigset: out of memory\n");
        exit(1);
    }
    for (long i = 0; i < live; i++)
        slot[i] = block_new(&s);
    pthread_barrier_wait(&filled);
    if ((uintptr_t)arg == 0)
        t_start = mb_now();
    pthread_barrier_wait(&filled);
    long sum = 0;
    for (long i = 0; i < ops; i++) {
        long k = (long)(mb_rnd(&s) % (uint64_t)live);
        sum += slot[k][0];
        free(slot[k]);
        slot[k] = block_new(&s);
    }
    for (long i = 0; i < live; i++)
        free(slot[i]);
    free(slot);
    return (void *)(intptr_t)sum;
}

int main(int argc, char **argv)
{
    int threads = argc > 1 ? atoi(argv[1]) : 1;
    if (argc > 2)
        ops = atol(argv[2]);
    if (argc > 3)
        live = atol(argv[3]);
    if (argc > 4)
        maxsz = atol(argv[4]);
    if (threads < 1 || threads > 256 || ops < 1 || live < 1 || maxsz < 16) {
        fprintf(stderr, "usage: bigset [THREADS<=256] [OPS] [LIVE] [MAX>=16]\n");
        return 2;
    }
    pthread_t t[256];
    pthread_barrier_init(&filled, NULL, (unsigned)threads);
    for (int i = 0; i < threads; i++)
        if (pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)i) != 0)
            abort();
    for (int i = 0; i < threads; i++)
        pthread_join(t[i], NULL);
    /* the threads' frees of their whole set are in the time: a few % */
    double secs = mb_now() - t_start;
    printf("bench=bigset threads=%d live=%ld ns_per_op=%.1f peak_rss=%ld secs=%.3f\n",
           threads, live, secs * 1e9 / (double)ops, mb_maxrss(), secs);
    return 0;
}
