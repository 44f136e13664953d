/*
 * mixsizes.c - a working set of blocks of every size, after glibc's
 * benchtests/bench-malloc-thread: THREADS threads each keep 1024 slots; each
 * op picks a slot at random, checks and frees its block, and puts a new one
 * there whose size is log-uniform from 2^MINLOG to 2^(MAXLOG+1) bytes
 * (2^e plus a uniform part of it, e uniform), capped at 64 KiB, writing its
 * first and last byte.  The full range (3..15) is glibc's mix; a narrow
 * one isolates a size class family (13..14: 8-32 KiB, 15: 32-64 KiB).
 * PAGES=1 also writes a byte in every 4 KiB page of each new block, as a
 * buffer used in part (rpmalloc's rptest stamps its blocks so): an
 * allocator that hands a block back at a new offset each time moves those
 * bytes to new cache lines.  Allocator-agnostic (LD_PRELOAD).
 *
 *   mixsizes [THREADS=1] [OPS=5000000] [MINLOG=3] [MAXLOG=15] [PAGES=0]
 * prints: bench=mixsizes threads=N sizes=MIN-MAX pages=P ns_per_op=X
 *         peak_rss=BYTES secs=S
 * (ns_per_op: one free and one malloc, per thread)
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "mbutil.h"

enum { SLOTS = 1024, CAP = 64 << 10 };

static long ops = 5000000;
static unsigned minlog = 3, maxlog = 15;
static int pages;

static void *worker(void *arg)
{
    uint64_t s = 0x9E3779B97F4A7C15ULL * ((uintptr_t)arg + 1);
    char **v = calloc(SLOTS, sizeof *v);
    size_t *len = calloc(SLOTS, sizeof *len);
    if (!v || !len) {
        fprintf(stderr, "mixsizes: out of memory\n");
        exit(1);
    }
    for (long i = 0; i < ops; i++) {
        uint64_t r = mb_rnd(&s);
        unsigned k = (unsigned)(r % SLOTS);
        if (v[k]) {
            if (v[k][0] != (char)len[k] || v[k][len[k] - 1] != (char)k) {
                fprintf(stderr, "mixsizes: a block changed under the program\n");
                exit(1);
            }
            free(v[k]);
        }
        unsigned e = minlog + (unsigned)((r >> 16) % (maxlog - minlog + 1));
        size_t n = ((size_t)1 << e) + (size_t)((r >> 32) & (((uint64_t)1 << e) - 1));
        if (n > CAP)
            n = CAP;
        v[k] = malloc(n);
        if (!v[k]) {
            fprintf(stderr, "mixsizes: out of memory (%zu bytes)\n", n);
            exit(1);
        }
        len[k] = n;
        if (pages)
            for (size_t o = 4096; o < n; o += 4096)
                v[k][o] = (char)o;
        v[k][0] = (char)n;
        v[k][n - 1] = (char)k;
    }
    for (unsigned k = 0; k < SLOTS; k++)
        free(v[k]);
    free(v);
    free(len);
    return NULL;
}

int main(int argc, char **argv)
{
    int threads = argc > 1 ? atoi(argv[1]) : 1;
    if (argc > 2)
        ops = atol(argv[2]);
    if (argc > 3)
        minlog = (unsigned)atoi(argv[3]);
    if (argc > 4)
        maxlog = (unsigned)atoi(argv[4]);
    if (argc > 5)
        pages = atoi(argv[5]);
    if (threads < 1 || threads > 256 || ops < 1 || minlog < 3 || maxlog > 15 ||
        minlog > maxlog || (pages != 0 && pages != 1)) {
        fprintf(stderr, "usage: mixsizes [THREADS<=256] [OPS] [MINLOG>=3] [MAXLOG<=15] "
                        "[PAGES=0|1]\n");
        return 2;
    }
    pthread_t t[256];
    double t0 = mb_now();
    for (int i = 0; i < threads; i++)
        if (pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)i) != 0)
            abort();
    for (int i = 0; i < threads; i++)
        pthread_join(t[i], NULL);
    double secs = mb_now() - t0;
    size_t hi = (size_t)2 << maxlog;
    printf("bench=mixsizes threads=%d sizes=%zu-%zu pages=%d ns_per_op=%.1f peak_rss=%ld "
           "secs=%.3f\n",
           threads, (size_t)1 << minlog, hi > CAP ? (size_t)CAP : hi, pages,
           secs * 1e9 / (double)ops, mb_maxrss(), secs);
    return 0;
}
