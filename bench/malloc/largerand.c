/*
 * largerand.c - big blocks of random sizes, replaced at random: SLOTS
 * slots hold blocks of MIN..MAX MiB (uniform); each step frees the block of
 * a random slot and puts a new one there, every byte of it written (zeroed,
 * as C++'s new char[n]() does: through a pointer the compiler cannot turn
 * into calloc).  A freed block is rarely the size of the next request: an
 * allocator either reuses its pages across sizes or faults fresh ones in.
 * After mimalloc-bench's malloc-large.  Allocator-agnostic (LD_PRELOAD).
 *
 *   largerand [STEPS=300] [SLOTS=20] [MIN_MIB=5] [MAX_MIB=25]
 * prints: bench=largerand slots=N ms_per_step=X faults=F peak_rss=BYTES
 *         secs=S
 * (faults: minor page faults over the whole run)
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mbutil.h"

static void *(*volatile fill)(void *, int, size_t) = memset;

int main(int argc, char **argv)
{
    long steps = argc > 1 ? atol(argv[1]) : 300;
    int slots = argc > 2 ? atoi(argv[2]) : 20;
    long lo = argc > 3 ? atol(argv[3]) : 5, hi = argc > 4 ? atol(argv[4]) : 25;
    if (steps < 1 || slots < 1 || slots > 4096 || lo < 1 || hi < lo || hi > 4096) {
        fprintf(stderr,
                "usage: largerand [STEPS] [SLOTS<=4096] [MIN_MIB] [MAX_MIB<=4096]\n");
        return 2;
    }
    char **b = calloc((size_t)slots, sizeof *b);
    if (!b)
        return 1;
    uint64_t s = 42;
    size_t span = (size_t)(hi - lo) << 20;
    long f0 = mb_minflt();
    double t0 = mb_now();
    for (long i = 0; i < steps; i++) {
        int k = (int)(mb_rnd(&s) % (uint64_t)slots);
        size_t n = ((size_t)lo << 20) + (size_t)(mb_rnd(&s) % (span + 1));
        free(b[k]);
        if (!(b[k] = malloc(n))) {
            fprintf(stderr, "largerand: out of memory (%zu bytes)\n", n);
            return 1;
        }
        fill(b[k], 0, n);
    }
    double secs = mb_now() - t0;
    long faults = mb_minflt() - f0;
    for (int k = 0; k < slots; k++)
        free(b[k]);
    free(b);
    printf(
        "bench=largerand slots=%d ms_per_step=%.3f faults=%ld peak_rss=%ld secs=%.3f\n",
        slots, secs * 1e3 / (double)steps, faults, mb_maxrss(), secs);
    return 0;
}
