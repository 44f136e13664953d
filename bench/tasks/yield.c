/*
 * yield.c - mote side of the yield micro-benchmark (beside yield.go): two
 * tasks call mote_yield in a loop; ns_per_op is the elapsed time divided by
 * the total number of yields.  Run with MOTE_WORKERS=1 for "two tasks on
 * one worker" (the issue 2 target: <= 15 ns, Go ~49 ns).
 *
 * usage: yield [iters_per_task]
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "benchutil.h"
#include "mote.h"

static long iters;
#ifdef MOTE_BENCH_HAVE_SYNC
static mote_wg wg = MOTE_WG_INIT;
#else
static _Atomic int done;
#endif
static int64_t elapsed;

static void yielder(void *arg)
{
    long n = *(long *)arg;
    for (long i = 0; i < n; i++)
        mote_yield();
#ifdef MOTE_BENCH_HAVE_SYNC
    mote_wg_done(&wg);
#else
    atomic_fetch_add(&done, 1);
#endif
}

/* Runs two yielders; without wait groups main polls with 1 ms sleeps, which
 * keeps it off the run queue the yielders share. */
static int64_t run(long n)
{
    int64_t t0 = mote_now();
#ifdef MOTE_BENCH_HAVE_SYNC
    mote_wg_add(&wg, 2);
#else
    atomic_store(&done, 0);
#endif
    mote_go(yielder, &n);
    mote_go(yielder, &n);
#ifdef MOTE_BENCH_HAVE_SYNC
    mote_wg_wait(&wg);
#else
    while (atomic_load(&done) < 2)
        mote_sleep(1000000);
#endif
    return mote_now() - t0;
}

static void main_task(void *arg)
{
    (void)arg;
    run(iters / 20); /* warm-up */
    elapsed = run(iters);
    printf("name=yield impl=mote workers=%lld ns_per_op=%.2f iters=%ld\n",
           (long long)bench_metric("/sched/workers:threads"),
           (double)elapsed / (2.0 * iters), 2 * iters);
}

int main(int argc, char **argv)
{
    iters = argc > 1 ? strtol(argv[1], NULL, 10) : 5000000;
    int err = mote_run(main_task, NULL);
    if (err != 0) {
        fprintf(stderr, "yield: mote_run: %s\n", mote_strerror(err));
        return 1;
    }
    return 0;
}
