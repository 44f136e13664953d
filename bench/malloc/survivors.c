/*
 * survivors.c - a heap with survivors: THREADS threads (2) allocate TOTAL
 * bytes together (1 GiB) in freeidle.c's mixed sizes, writing every byte,
 * then each frees 63 of every 64 of its blocks and keeps the rest (~1/64 of
 * the bytes stay live).  The threads stay alive and idle; the main thread
 * samples RSS every 100 ms for IDLE_MS (2 s) without calling the allocator.
 * An allocator that returns the free parts of partly used memory by itself
 * falls toward the live size.
 *
 *   survivors [TOTAL_MB=1024] [IDLE_MS=2000] [THREADS=2] [KEEP_EVERY=64]
 * prints: bench=survivors peak=BYTES rss_before=BYTES live=BYTES
 *             rss_1s=BYTES rss_last=BYTES          (summary)
 *         bench=survivors t_ms=T rss=BYTES            (one per sample)
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mbutil.h"

static size_t per_thread;
static long keep_every = 64;
static pthread_barrier_t done_alloc, done_free, done_idle;
static size_t live_bytes[64];

static void *worker(void *arg)
{
    uintptr_t id = (uintptr_t)arg;
    uint64_t s = 0x9E3779B97F4A7C15ULL * (id + 1);
    size_t cap = 1 << 16, n = 0, got = 0, live = 0;
    void **v = malloc(cap * sizeof *v);
    size_t *sz = malloc(cap * sizeof *sz);
    while (got < per_thread) {
        size_t b = mb_mixed_size(&s);
        if (n == cap) {
            cap *= 2;
            v = realloc(v, cap * sizeof *v);
            sz = realloc(sz, cap * sizeof *sz);
        }
        v[n] = malloc(b);
        memset(v[n], (int)n, b);
        sz[n++] = b;
        got += b;
    }
    pthread_barrier_wait(&done_alloc);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (i % (size_t)keep_every == (size_t)keep_every - 1) {
            v[k++] = v[i]; /* survivor: kept to the end */
            live += sz[i];
        } else {
            free(v[i]);
        }
    }
    free(sz);
    live_bytes[id] = live;
    pthread_barrier_wait(&done_free);
    pthread_barrier_wait(&done_idle); /* idle, alive, no allocator calls */
    for (size_t i = 0; i < k; i++)
        free(v[i]);
    free(v);
    return NULL;
}

int main(int argc, char **argv)
{
    long total_mb = argc > 1 ? atol(argv[1]) : 1024;
    long idle_ms = argc > 2 ? atol(argv[2]) : 2000;
    int threads = argc > 3 ? atoi(argv[3]) : 2;
    if (argc > 4)
        keep_every = atol(argv[4]);
    if (total_mb < 1 || idle_ms < 0 || threads < 1 || threads > 64 || keep_every < 1) {
        fprintf(stderr,
                "usage: survivors [TOTAL_MB] [IDLE_MS] [THREADS<=64] [KEEP_EVERY]\n");
        return 2;
    }
    per_thread = (size_t)total_mb * 1024 * 1024 / (size_t)threads;
    pthread_barrier_init(&done_alloc, NULL, (unsigned)threads + 1);
    pthread_barrier_init(&done_free, NULL, (unsigned)threads + 1);
    pthread_barrier_init(&done_idle, NULL, (unsigned)threads + 1);
    pthread_t t[64];
    for (int i = 0; i < threads; i++)
        pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)i);
    pthread_barrier_wait(&done_alloc);
    long peak = mb_rss();
    pthread_barrier_wait(&done_free);
    double t0 = mb_now();
    long before = mb_rss();
    enum { MAXS = 128 };
    long tms[MAXS], rss[MAXS];
    int ns = 0;
    for (long ms = 100; ms <= idle_ms && ns < MAXS; ms += 100) {
        mb_sleep_until(t0, ms);
        tms[ns] = (long)((mb_now() - t0) * 1000);
        rss[ns++] = mb_rss();
    }
    size_t live = 0;
    for (int i = 0; i < threads; i++)
        live += live_bytes[i];
    long at1 = -1;
    for (int i = 0; i < ns; i++)
        if (tms[i] <= 1050)
            at1 = rss[i];
    printf("bench=survivors peak=%ld rss_before=%ld live=%zu rss_1s=%ld rss_last=%ld\n",
           peak, before, live, at1, ns ? rss[ns - 1] : -1);
    for (int i = 0; i < ns; i++)
        printf("bench=survivors t_ms=%ld rss=%ld\n", tms[i], rss[i]);
    pthread_barrier_wait(&done_idle);
    for (int i = 0; i < threads; i++)
        pthread_join(t[i], NULL);
    return 0;
}
