/*
 * mutex_contended.c - mote side of the mutex benchmarks (beside
 * mutex_contended.go).  Two lines:
 *   mutex_contended  4 tasks each lock, increment a shared counter, unlock;
 *                    ns_per_op = elapsed / total lock-unlock pairs;
 *   mutex_handoff    2 tasks each lock, increment, yield while holding the
 *                    lock (so the other task queues on it), unlock: every
 *                    critical section ends with a waiter to wake or hand to;
 *                    ns_per_op = elapsed / total critical sections.
 *
 * usage: mutex_contended [pairs_per_task]
 */
#include <stdio.h>
#include <stdlib.h>

#include "benchutil.h"
#include "mote.h"

static long iters;
static mote_mutex mu = MOTE_MUTEX_INIT;
static mote_wg wg = MOTE_WG_INIT;
static long counter;

static void plain(void *arg)
{
    long n = *(long *)arg;
    for (long i = 0; i < n; i++) {
        mote_mutex_lock(&mu);
        counter++;
        mote_mutex_unlock(&mu);
    }
    mote_wg_done(&wg);
}

static void yielding(void *arg)
{
    long n = *(long *)arg;
    for (long i = 0; i < n; i++) {
        mote_mutex_lock(&mu);
        counter++;
        mote_yield();
        mote_mutex_unlock(&mu);
    }
    mote_wg_done(&wg);
}

static int64_t run(mote_fn fn, int tasks, long n)
{
    counter = 0;
    mote_wg_add(&wg, tasks);
    int64_t t0 = mote_now();
    for (int i = 0; i < tasks; i++)
        mote_go(fn, &n);
    mote_wg_wait(&wg);
    int64_t t = mote_now() - t0;
    if (counter != tasks * n)
        fprintf(stderr, "mutex_contended: wrong count\n");
    return t;
}

static void main_task(void *arg)
{
    (void)arg;
    long workers = (long)bench_metric("/sched/workers:threads");
    run(plain, 4, iters / 20); /* warm-up */
    int64_t el = run(plain, 4, iters);
    printf("name=mutex_contended impl=mote workers=%ld ns_per_op=%.2f iters=%ld\n",
           workers, (double)el / (4.0 * iters), 4 * iters);
    long h = iters / 10;
    run(yielding, 2, h / 20);
    el = run(yielding, 2, h);
    printf("name=mutex_handoff impl=mote workers=%ld ns_per_op=%.2f iters=%ld\n", workers,
           (double)el / (2.0 * h), 2 * h);
}

int main(int argc, char **argv)
{
    iters = argc > 1 ? strtol(argv[1], NULL, 10) : 2000000;
    int err = mote_run(main_task, NULL);
    if (err != 0) {
        fprintf(stderr, "mutex_contended: mote_run: %s\n", mote_strerror(err));
        return 1;
    }
    return 0;
}
