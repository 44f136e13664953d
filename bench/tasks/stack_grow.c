/*
 * stack_grow.c - what a task pays to grow its stack through pages it does
 * not have yet, in a chunk a freeze has registered (every page it first
 * touches is a round trip through the fault handler, or a fill the handler
 * made ahead of it).  One task parks until it is frozen, so that its chunk
 * is registered; then N fresh tasks each grow a frame of K KiB top down, a
 * page at a time as stack-clash protection probes it, then write it whole,
 * and park.  Times from the first spawn to the last grown.
 *
 * usage: MOTE_STACK_FREEZE=1ms stack_grow [N [K]]   (defaults 400, 48)
 * prints one line: kind=stack_grow impl=mote n= kib= us_per_task=
 * fills= (the handler's fills, /stacks/freeze/stray-faults:events)
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mote.h"

#define MS      1000000LL
#define MAX_KIB 192 /* under the default 256 KiB stack */

static long n_tasks = 400;
static size_t grow_bytes = 48 * 1024;
static mote_wg grown = MOTE_WG_INIT, done = MOTE_WG_INIT;
static mote_chan *gate;

static uint64_t metric(const char *name)
{
    uint64_t v = 0;
    if (mote_metric(name, &v) != 0) {
        fprintf(stderr, "stack_grow: no metric %s\n", name);
        exit(1);
    }
    return v;
}

static void parker(void *arg)
{
    (void)arg;
    mote_chan_recv(gate, NULL);
    mote_wg_done(&done);
}

static __attribute__((noinline)) void grow(size_t n)
{
    char buf[n];
    for (size_t i = n; i >= 4096; i -= 4096)
        ((volatile char *)buf)[i - 1] = 1;
    memset(buf, 1, n);
    __asm__ volatile("" : : "r"(buf) : "memory");
}

static void grower(void *arg)
{
    (void)arg;
    grow(grow_bytes);
    mote_wg_done(&grown);
    mote_chan_recv(gate, NULL);
    mote_wg_done(&done);
}

static void bench(void *arg)
{
    (void)arg;
    if (metric("/stacks/freeze/mode:enum") != 1) {
        fprintf(stderr, "stack_grow: stacks are not frozen here (MOTE_STACK_FREEZE?)\n");
        exit(1);
    }
    gate = mote_chan_make(0, 0);
    if (!gate || mote_wg_add(&done, 1 + n_tasks) != 0 || mote_go(parker, NULL) != 0) {
        fprintf(stderr, "stack_grow: setup failed\n");
        exit(1);
    }
    while (metric("/stacks/frozen:tasks") < 1)
        mote_sleep(1 * MS);
    uint64_t fills0 = metric("/stacks/freeze/stray-faults:events");
    mote_wg_add(&grown, n_tasks);
    int64_t t0 = mote_now();
    for (long i = 0; i < n_tasks; i++)
        if (mote_go(grower, NULL) != 0) {
            fprintf(stderr, "stack_grow: spawn %ld failed\n", i);
            exit(1);
        }
    mote_wg_wait(&grown);
    int64_t t1 = mote_now();
    printf("kind=stack_grow impl=mote n=%ld kib=%zu us_per_task=%.1f fills=%llu\n",
           n_tasks, grow_bytes / 1024, (double)(t1 - t0) / 1e3 / (double)n_tasks,
           (unsigned long long)(metric("/stacks/freeze/stray-faults:events") - fills0));
    mote_chan_close(gate);
    mote_wg_wait(&done);
    mote_chan_free(gate);
}

int main(int argc, char **argv)
{
    if (argc > 1)
        n_tasks = atol(argv[1]);
    if (argc > 2)
        grow_bytes = (size_t)atol(argv[2]) * 1024;
    if (argc > 3 || n_tasks < 1 || n_tasks > 1000000 || grow_bytes < 4096 ||
        grow_bytes > MAX_KIB * 1024) {
        fprintf(stderr, "usage: MOTE_STACK_FREEZE=1ms stack_grow [N [KiB, 4-%d]]\n",
                MAX_KIB);
        return 2;
    }
    return mote_run(bench, NULL) == 0 ? 0 : 1;
}
