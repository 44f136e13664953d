/*
 * pageline.c - what the line a big block starts on costs a loop that
 * writes one byte in every 4 KiB page of it (largeloop's pattern): for
 * each of the 64 line offsets of a page, PASSES passes over a 4 MiB
 * mapping of its own (huge pages asked for, as mote's big blocks are), the
 * byte written at that offset of every page.  Not an allocator benchmark:
 * it maps its own memory, to show why heap_colour keeps big blocks off
 * some lines (on this VM's Xeon the first two and last two lines of a
 * page took ~1.45x the time of the others).
 *
 *   pageline [PASSES=1000]
 * prints: bench=pageline line=L offset=BYTES ns_per_pass=X   (one per line)
 * (the lines are measured in turn, 10 rounds of PASSES/10 passes each)
 *         bench=pageline edge_ns=X middle_ns=Y ratio=Y/X
 * (edge: the median of lines 0, 1, 62, 63; middle: of the others)
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "mbutil.h"

#define SPAN  ((size_t)4 << 20)
#define ALIGN ((size_t)2 << 20)

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int main(int argc, char **argv)
{
    long passes = argc > 1 ? atol(argv[1]) : 1000;
    if (passes < 1) {
        fprintf(stderr, "usage: pageline [PASSES>=1]\n");
        return 2;
    }
    char *m = mmap(NULL, SPAN + ALIGN, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) {
        perror("pageline: mmap");
        return 1;
    }
    char *base = (char *)(((uintptr_t)m + ALIGN - 1) & ~(uintptr_t)(ALIGN - 1));
    (void)madvise(base, SPAN, MADV_HUGEPAGE); /* best effort */
    for (size_t i = 0; i < SPAN; i += 64)     /* every line faulted in and warm */
        base[i] = 1;
    /* Lines in turn, ROUNDS times over, so that a slow phase of a shared
     * machine falls on every line alike. */
    enum { ROUNDS = 10 };
    long per = (passes + ROUNDS - 1) / ROUNDS;
    double secs[64] = {0};
    for (int r = 0; r < ROUNDS; r++) {
        for (int line = 0; line < 64; line++) {
            size_t off = (size_t)line * 64;
            volatile char *p = base + off;
            double t0 = mb_now();
            for (long k = 0; k < per; k++)
                for (size_t i = 0; i + off < SPAN; i += 4096)
                    p[i] = (char)k;
            secs[line] += mb_now() - t0;
        }
    }
    double edge[4], middle[60];
    int ne = 0, nm = 0;
    for (int line = 0; line < 64; line++) {
        double ns = secs[line] / (double)(per * ROUNDS) * 1e9;
        printf("bench=pageline line=%d offset=%d ns_per_pass=%.1f\n", line, line * 64,
               ns);
        if (line < 2 || line > 61)
            edge[ne++] = ns;
        else
            middle[nm++] = ns;
    }
    double e = median(edge, ne), mid = median(middle, nm);
    printf("bench=pageline edge_ns=%.1f middle_ns=%.1f ratio=%.2f\n", e, mid, e / mid);
    munmap(m, SPAN + ALIGN);
    return 0;
}
