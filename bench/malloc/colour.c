/*
 * colour.c - the first bytes of many big blocks, read in turn: BLOCKS
 * blocks of SIZE_KIB each (their first 64 bytes written), then 8-byte reads
 * of block 0, 1, ..., BLOCKS-1 over and over, each at the next word of the
 * block's first line.  A server reading the headers of its connection
 * buffers, or a program walking the first row of many matrices, looks like
 * this.  Where an allocator starts every big block on a page (or a 64 KiB)
 * boundary, all those lines fall in one L1 set and few L2 sets, and most
 * reads miss; where it starts them at varied offsets (cache colouring),
 * they stay in L1.  Allocator-agnostic (LD_PRELOAD).
 *
 *   colour [BLOCKS=64] [SIZE_KIB=100] [READS=200000000]
 * prints: bench=colour blocks=N size=BYTES ns_per_read=X lines=L secs=S
 * (lines: how many distinct cache lines of a 4 KiB page the blocks start
 * on, 1..64)
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mbutil.h"

int main(int argc, char **argv)
{
    long nb = argc > 1 ? atol(argv[1]) : 64;
    long kib = argc > 2 ? atol(argv[2]) : 100;
    long reads = argc > 3 ? atol(argv[3]) : 200000000;
    if (nb < 1 || nb > 1 << 20 || kib < 1 || reads < nb) {
        fprintf(stderr, "usage: colour [BLOCKS] [SIZE_KIB] [READS>=BLOCKS]\n");
        return 2;
    }
    size_t size = (size_t)kib << 10;
    char **b = malloc((size_t)nb * sizeof *b);
    if (!b)
        return 1;
    uint64_t seen = 0;
    for (long i = 0; i < nb; i++) {
        b[i] = malloc(size);
        if (!b[i]) {
            fprintf(stderr, "colour: out of memory\n");
            return 1;
        }
        memset(b[i], (int)i, 64);
        seen |= 1ULL << (((uintptr_t)b[i] >> 6) & 63);
    }
    long rounds = reads / nb;
    uint64_t sum = 0;
    double t0 = mb_now();
    for (long r = 0; r < rounds; r++)
        for (long i = 0; i < nb; i++)
            sum += *(volatile uint64_t *)(b[i] + (r & 7) * 8);
    double secs = mb_now() - t0;
    printf(
        "bench=colour blocks=%ld size=%zu ns_per_read=%.3f lines=%d secs=%.3f sum=%u\n",
        nb, size, secs * 1e9 / ((double)rounds * (double)nb), __builtin_popcountll(seen),
        secs, (unsigned)(sum & 1));
    for (long i = 0; i < nb; i++)
        free(b[i]);
    free(b);
    return 0;
}
