/*
 * largeloop.c - large blocks allocated and freed over and over: SIZE_KIB
 * blocks, ITERS times malloc, write one byte in every 4 KiB page (a program
 * uses what it asks for), free.  An allocator that maps and unmaps each
 * block pays a page fault per page per iteration; one that keeps the block
 * pays them only on the first pass.  Allocator-agnostic (LD_PRELOAD).
 *
 *   largeloop SIZE_KIB [ITERS=1000] [MAX_SECS=2]
 * stops early after MAX_SECS (page faults cost ~25 us each on some VMs, so
 * an allocator that faults every page could take minutes); iters= says how
 * many ran.
 * prints: bench=large size=BYTES iters=N ns_per_op=X faults_per_op=F
 *         first_faults=F0 peak_rss=BYTES rss_end=BYTES secs=S
 * (ns_per_op and faults_per_op leave out the first pass; rss_end is read
 * right after the last free)
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdio.h>
#include <stdlib.h>

#include "mbutil.h"

int main(int argc, char **argv)
{
    long kib = argc > 1 ? atol(argv[1]) : 4096;
    long iters = argc > 2 ? atol(argv[2]) : 1000;
    double max_secs = argc > 3 ? atof(argv[3]) : 2.0;
    if (kib < 1 || iters < 2 || max_secs <= 0) {
        fprintf(stderr, "usage: largeloop SIZE_KIB [ITERS>=2] [MAX_SECS]\n");
        return 2;
    }
    size_t n = (size_t)kib << 10;
    long f0 = mb_minflt();
    volatile char *p = malloc(n);
    if (!p)
        return 1;
    for (size_t off = 0; off < n; off += 4096)
        p[off] = 1;
    free((void *)p);
    long f1 = mb_minflt();
    double t0 = mb_now();
    long i;
    for (i = 1; i < iters; i++) {
        if ((i & 15) == 0 && mb_now() - t0 > max_secs)
            break;
        p = malloc(n);
        if (!p)
            return 1;
        for (size_t off = 0; off < n; off += 4096)
            p[off] = (char)i;
        free((void *)p);
    }
    iters = i;
    double secs = mb_now() - t0;
    long f2 = mb_minflt();
    long rss_end = mb_rss();
    printf("bench=large size=%zu iters=%ld ns_per_op=%.1f faults_per_op=%.2f "
           "first_faults=%ld "
           "peak_rss=%ld rss_end=%ld secs=%.3f\n",
           n, iters, secs * 1e9 / (double)(iters - 1),
           (double)(f2 - f1) / (double)(iters - 1), f1 - f0, mb_maxrss(), rss_end, secs);
    return 0;
}
