/*
 * scratch.c - passive false sharing, after Hoard's cache-scratch: the main
 * thread allocates one small object per worker (neighbours, on one cache
 * line); each worker frees its object, then allocates an object of the same
 * size and writes it REPS times, ITERS times over.  An allocator that hands
 * a worker the block it just freed puts two workers' hot objects on one
 * line.  Unlike the original, each worker has allocated before (as a
 * thread of a pool has), so its first free is not its first call.
 * Allocator-agnostic (LD_PRELOAD).
 *
 *   scratch [THREADS=2] [ITERS=1000] [SIZE=8] [REPS=20000]
 * prints: bench=scratch threads=N size=S secs=T
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "mbutil.h"

static long iters = 1000, reps = 20000;
static size_t size = 8;
static char **objs;
static pthread_barrier_t start;

static void *worker(void *arg)
{
    long i = (long)arg;
    char *volatile warm = malloc(64); /* this thread has used the allocator */
    free(warm);
    pthread_barrier_wait(&start);
    free(objs[i]);
    for (long k = 0; k < iters; k++) {
        volatile char *a = malloc(size);
        for (long r = 0; r < reps; r++)
            for (size_t j = 0; j < size; j++)
                a[j] = (char)(a[j] + 1);
        free((void *)a);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    long nthreads = argc > 1 ? atol(argv[1]) : 2;
    if (argc > 2)
        iters = atol(argv[2]);
    if (argc > 3)
        size = (size_t)atol(argv[3]);
    if (argc > 4)
        reps = atol(argv[4]);
    if (nthreads < 1 || nthreads > 1024 || iters < 1 || size < 1 || reps < 1) {
        fprintf(stderr, "usage: scratch [THREADS 1..1024] [ITERS] [SIZE] [REPS]\n");
        return 2;
    }
    objs = malloc(sizeof *objs * (size_t)nthreads);
    pthread_t *t = malloc(sizeof *t * (size_t)nthreads);
    if (!objs || !t)
        return 1;
    for (long i = 0; i < nthreads; i++)
        objs[i] = malloc(size);
    pthread_barrier_init(&start, NULL, (unsigned)nthreads + 1);
    for (long i = 0; i < nthreads; i++)
        pthread_create(&t[i], NULL, worker, (void *)i);
    double t0 = mb_now();
    pthread_barrier_wait(&start);
    for (long i = 0; i < nthreads; i++)
        pthread_join(t[i], NULL);
    printf("bench=scratch threads=%ld size=%zu secs=%.3f\n", nthreads, size,
           mb_now() - t0);
    pthread_barrier_destroy(&start);
    free(objs);
    free(t);
    return 0;
}
