/*
 * chan_buffered.c - mote side of the buffered-channel throughput benchmark
 * (beside chan_buffered.go): one task sends ints into a channel of capacity
 * 1024, another receives them; ns_per_op is elapsed time per message.
 * Issue 3 target: <= 18 ns on one worker (Go ~46 ns).
 *
 * usage: chan_buffered [messages]
 */
#include <stdio.h>
#include <stdlib.h>

#include "benchutil.h"
#include "mote.h"

static long iters;
static mote_chan *ch;
static mote_wg wg = MOTE_WG_INIT;
static int64_t t_start, t_end;

static void producer(void *arg)
{
    long n = *(long *)arg;
    for (long i = 0; i < n; i++)
        mote_chan_send(ch, &i);
    mote_chan_close(ch);
    mote_wg_done(&wg);
}

static void consumer(void *arg)
{
    (void)arg;
    long v, sum = 0, n = 0;
    while (mote_chan_recv(ch, &v) == 0) {
        sum += v;
        n++;
    }
    t_end = mote_now();
    if (sum != n * (n - 1) / 2)
        fprintf(stderr, "chan_buffered: wrong sum\n");
    mote_wg_done(&wg);
}

static int64_t run(long n)
{
    ch = mote_chan_make(sizeof(long), 1024);
    mote_wg_add(&wg, 2);
    t_start = mote_now();
    mote_go(consumer, NULL);
    mote_go(producer, &n);
    mote_wg_wait(&wg);
    mote_chan_free(ch);
    return t_end - t_start;
}

static void main_task(void *arg)
{
    (void)arg;
    run(iters / 20); /* warm-up */
    int64_t el = run(iters);
    printf("name=chan_buffered impl=mote workers=%lld ns_per_op=%.2f iters=%ld\n",
           (long long)bench_metric("/sched/workers:threads"), (double)el / iters, iters);
}

int main(int argc, char **argv)
{
    iters = argc > 1 ? strtol(argv[1], NULL, 10) : 20000000;
    int err = mote_run(main_task, NULL);
    if (err != 0) {
        fprintf(stderr, "chan_buffered: mote_run: %s\n", mote_strerror(err));
        return 1;
    }
    return 0;
}
