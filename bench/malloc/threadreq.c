/*
 * threadreq.c - a thread per request: REQUESTS requests, CONC at a time,
 * each served by a new thread that allocates WORK blocks of mixed small
 * sizes (16 B..2 KiB, writing them), frees all of them but one small object
 * (64 B, a "session record") that it links into a global list, and exits.
 * The list lives to the end, as a cache or a log would.  An allocator that
 * gives each new thread fresh pages pins one page per request for that one
 * object.  Allocator-agnostic (LD_PRELOAD).
 *
 *   threadreq [REQUESTS=20000] [CONC=2] [WORK=200]
 * prints: bench=threadreq threads=CONC us_per_req=X peak_rss=BYTES
 *         rss_end=BYTES live=BYTES secs=S
 * (rss_end: with every leftover object still linked, after the last join)
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mbutil.h"

typedef struct leftover {
    struct leftover *next;
    long req;
    char payload[48];
} leftover;

static _Atomic(leftover *) kept;
static long work = 200;

static void *request(void *arg)
{
    long req = (long)(intptr_t)arg;
    uint64_t s = 0x9E3779B97F4A7C15ULL * (uint64_t)(req + 1);
    void *v[1024];
    long n = work < 1024 ? work : 1024;
    for (long i = 0; i < n; i++) {
        size_t sz = 16 + (size_t)(mb_rnd(&s) % 2033);
        v[i] = malloc(sz);
        memset(v[i], (int)i, sz);
    }
    leftover *l = malloc(sizeof *l);
    l->req = req;
    memset(l->payload, 1, sizeof l->payload);
    for (long i = 0; i < n; i++)
        free(v[i]);
    l->next = atomic_load_explicit(&kept, memory_order_relaxed);
    while (!atomic_compare_exchange_weak_explicit(
        &kept, &l->next, l, memory_order_release, memory_order_relaxed))
        ;
    return NULL;
}

int main(int argc, char **argv)
{
    long reqs = argc > 1 ? atol(argv[1]) : 20000;
    int conc = argc > 2 ? atoi(argv[2]) : 2;
    if (argc > 3)
        work = atol(argv[3]);
    if (reqs < 1 || conc < 1 || conc > 256 || work < 1) {
        fprintf(stderr, "usage: threadreq [REQUESTS] [CONC<=256] [WORK]\n");
        return 2;
    }
    pthread_t t[256];
    double t0 = mb_now();
    long done = 0;
    while (done < reqs) {
        int k = 0;
        for (; k < conc && done + k < reqs; k++)
            if (pthread_create(&t[k], NULL, request, (void *)(intptr_t)(done + k)) != 0)
                abort();
        for (int i = 0; i < k; i++)
            pthread_join(t[i], NULL);
        done += k;
    }
    double secs = mb_now() - t0;
    long rss_end = mb_rss();
    printf("bench=threadreq threads=%d us_per_req=%.2f peak_rss=%ld rss_end=%ld live=%zu "
           "secs=%.3f\n",
           conc, secs * 1e6 / (double)reqs, mb_maxrss(), rss_end,
           (size_t)reqs * sizeof(leftover), secs);
    leftover *l = atomic_load(&kept);
    while (l) {
        leftover *nx = l->next;
        free(l);
        l = nx;
    }
    return 0;
}
