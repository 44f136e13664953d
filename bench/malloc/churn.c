/*
 * churn.c - many short-lived threads churning mixed sizes, after the
 * stress test of mimalloc-bench ("mstress"): ROUNDS rounds of THREADS new
 * threads.  Each thread allocates SCALE*50 objects into a working array
 * and SCALE*5 it keeps to its end; every step frees a random working
 * object two times in three, and one time in four swaps one into a shared
 * array of 1000 slots, so other threads (and later rounds) free it.  Sizes
 * are 8 B..2 KiB, but one object in 100 is 100x bigger (to 200 KiB), one
 * in 1,000 is 1,000x (to 2 MiB) and, with SCALE > 10, one in 10,000 is
 * 10,000x (to 20 MiB).  Every object is filled and checked before it is
 * freed.  So the heap sees threads come and go, blocks of every size
 * class, large and huge blocks, and frees on other threads and after the
 * allocating thread has exited.  Allocator-agnostic (LD_PRELOAD).
 *
 *   churn [THREADS=8] [SCALE=10] [ROUNDS=50]
 * prints: bench=churn threads=N peak_rss=BYTES faults=N live_peak=BYTES secs=S
 * (live_peak: the most object bytes allocated and not yet freed at once, as
 * the threads' interleaving made it in this run; each thread adds its
 * changes to the shared count once they reach 16 KiB, so it reads at most
 * THREADS x 16 KiB low.  Peak RSS over it is the allocator's overhead,
 * apart from how the run's threads happened to overlap.)
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "mbutil.h"

enum { SLOTS = 1000 };
static int threads = 8, rounds = 50;
static long scale = 10;
static _Atomic(uintptr_t *) shared[SLOTS];
static const uintptr_t MAGIC = 0x5bd1e9955bd1e995ULL;

static bool one_in(uint64_t *s, unsigned n) { return mb_rnd(s) % n == 0; }

/* Object bytes allocated and not yet freed, all threads (see live_peak). */
static _Atomic(long long) live_now, live_top;
static __thread long long live_pend; /* this thread's changes not yet added */

static void live_flush(void)
{
    mb_live_add(&live_now, &live_top, live_pend);
    live_pend = 0;
}

static void live_add(long long d)
{
    live_pend += d;
    if (live_pend >= 16384 || live_pend <= -16384)
        live_flush();
}

/* An object of `words` words, word i holding (words - i) ^ MAGIC. */
static uintptr_t *obj_new(uint64_t *s)
{
    size_t words = 1 + mb_rnd(s) % 256;
    if (one_in(s, 100)) {
        if (scale > 10 && one_in(s, 100))
            words *= 10000;
        else if (one_in(s, 10))
            words *= 1000;
        else
            words *= 100;
    }
    uintptr_t *p = malloc(words * sizeof *p);
    if (!p) {
        fprintf(stderr, "churn: out of memory (%zu bytes)\n", words * sizeof *p);
        exit(1);
    }
    for (size_t i = 0; i < words; i++)
        p[i] = (words - i) ^ MAGIC;
    live_add((long long)(words * sizeof *p));
    return p;
}

static void obj_free(uintptr_t *p)
{
    if (!p)
        return;
    size_t words = p[0] ^ MAGIC;
    for (size_t i = 0; i < words; i++)
        if ((p[i] ^ MAGIC) != words - i) {
            fprintf(stderr, "churn: object %p corrupt at word %zu\n", (void *)p, i);
            abort();
        }
    live_add(-(long long)(words * sizeof *p));
    free(p);
}

static void *worker(void *arg)
{
    uint64_t s = 0x9E3779B97F4A7C15ULL * ((uint64_t)(uintptr_t)arg + 1);
    size_t work = (size_t)scale * 50, keep = (size_t)scale * 5;
    uintptr_t **w = calloc(work, sizeof *w), **kept = calloc(keep, sizeof *kept);
    size_t nw = 0, nk = 0;
    if (!w || !kept) {
        fprintf(stderr, "churn: out of memory\n");
        exit(1);
    }
    while (nw < work || nk < keep) {
        if (nk == keep || (nw < work && one_in(&s, 2)))
            w[nw++] = obj_new(&s);
        else
            kept[nk++] = obj_new(&s);
        if (nw && mb_rnd(&s) % 3 < 2) {
            size_t i = mb_rnd(&s) % nw;
            obj_free(w[i]);
            w[i] = NULL;
        }
        if (nw && one_in(&s, 4)) {
            size_t i = mb_rnd(&s) % nw;
            w[i] = atomic_exchange(&shared[mb_rnd(&s) % SLOTS], w[i]);
        }
    }
    for (size_t i = 0; i < nk; i++)
        obj_free(kept[i]);
    for (size_t i = 0; i < nw; i++)
        obj_free(w[i]);
    free(kept);
    free(w);
    live_flush();
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc > 1)
        threads = atoi(argv[1]);
    if (argc > 2)
        scale = atol(argv[2]);
    if (argc > 3)
        rounds = atoi(argv[3]);
    if (threads < 1 || threads > 256 || scale < 1 || scale > 100000 || rounds < 1) {
        fprintf(stderr, "usage: churn [THREADS<=256] [SCALE] [ROUNDS]\n");
        return 2;
    }
    pthread_t t[256];
    double t0 = mb_now();
    for (int r = 0; r < rounds; r++) {
        for (int i = 0; i < threads; i++)
            if (pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)(r * threads + i)))
                abort();
        for (int i = 0; i < threads; i++)
            pthread_join(t[i], NULL);
    }
    for (int i = 0; i < SLOTS; i++)
        obj_free(atomic_exchange(&shared[i], NULL));
    double secs = mb_now() - t0;
    live_flush();
    printf("bench=churn threads=%d peak_rss=%ld faults=%ld live_peak=%lld secs=%.3f\n",
           threads, mb_maxrss(), mb_minflt(), atomic_load(&live_top), secs);
    return 0;
}
