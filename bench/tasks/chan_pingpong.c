/*
 * chan_pingpong.c - mote side of the unbuffered ping-pong benchmark (beside
 * chan_pingpong.go): two tasks bounce an int over two unbuffered channels;
 * ns_per_op is one round trip (two rendezvous).  MOTE_WORKERS=1 puts both
 * tasks on one worker (issue 3 target <= 110 ns; Go ~325 ns), 2 lets them
 * land on different workers.
 *
 * usage: chan_pingpong [round_trips]
 */
#include <stdio.h>
#include <stdlib.h>

#include "benchutil.h"
#include "mote.h"

static long iters;
static mote_chan *ping, *pong;
static mote_wg wg = MOTE_WG_INIT;

static void ponger(void *arg)
{
    (void)arg;
    long v;
    while (mote_chan_recv(ping, &v) == 0) {
        v++;
        mote_chan_send(pong, &v);
    }
    mote_wg_done(&wg);
}

static int64_t elapsed;

/* Times its own loop, then closes ping to stop the ponger. */
static void pinger(void *arg)
{
    long n = *(long *)arg, v = 0;
    int64_t t0 = mote_now();
    for (long i = 0; i < n; i++) {
        mote_chan_send(ping, &v);
        mote_chan_recv(pong, &v);
    }
    elapsed = mote_now() - t0;
    if (v != n)
        fprintf(stderr, "chan_pingpong: wrong count %ld\n", v);
    mote_chan_close(ping);
    mote_wg_done(&wg);
}

static int64_t run(long n)
{
    ping = mote_chan_make(sizeof(long), 0);
    pong = mote_chan_make(sizeof(long), 0);
    mote_wg_add(&wg, 2);
    mote_go(ponger, NULL);
    mote_go(pinger, &n);
    mote_wg_wait(&wg);
    mote_chan_free(ping);
    mote_chan_free(pong);
    return elapsed;
}

static void main_task(void *arg)
{
    (void)arg;
    run(iters / 20); /* warm-up */
    int64_t el = run(iters);
    printf("name=chan_pingpong impl=mote workers=%lld ns_per_op=%.2f iters=%ld\n",
           (long long)bench_metric("/sched/workers:threads"), (double)el / iters, iters);
}

int main(int argc, char **argv)
{
    iters = argc > 1 ? strtol(argv[1], NULL, 10) : 2000000;
    int err = mote_run(main_task, NULL);
    if (err != 0) {
        fprintf(stderr, "chan_pingpong: mote_run: %s\n", mote_strerror(err));
        return 1;
    }
    return 0;
}
