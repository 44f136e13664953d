/*
 * chan_select4.c - mote side of the select benchmark (beside
 * chan_select4.go): a producer sends ints round-robin into 4 buffered
 * channels (capacity 256); a consumer takes them with a select over all 4.
 * ns_per_op is elapsed time per message (one send + one 4-way select).
 *
 * usage: chan_select4 [messages]
 */
#include <stdio.h>
#include <stdlib.h>

#include "benchutil.h"
#include "mote.h"

static long iters;
static mote_chan *ch[4];
static mote_wg wg = MOTE_WG_INIT;
static int64_t t_start, t_end;

static void producer(void *arg)
{
    long n = *(long *)arg;
    for (long i = 0; i < n; i++)
        mote_chan_send(ch[i & 3], &i);
    mote_wg_done(&wg);
}

static void consumer(void *arg)
{
    long n = *(long *)arg, v[4], sum = 0;
    mote_case cs[4];
    for (int k = 0; k < 4; k++)
        cs[k] = (mote_case){ch[k], MOTE_RECV, &v[k], 0};
    for (long i = 0; i < n; i++) {
        int k = mote_select(cs, 4, -1);
        sum += v[k];
    }
    t_end = mote_now();
    if (sum != n * (n - 1) / 2)
        fprintf(stderr, "chan_select4: wrong sum\n");
    mote_wg_done(&wg);
}

static int64_t run(long n)
{
    for (int k = 0; k < 4; k++)
        ch[k] = mote_chan_make(sizeof(long), 256);
    mote_wg_add(&wg, 2);
    t_start = mote_now();
    mote_go(consumer, &n);
    mote_go(producer, &n);
    mote_wg_wait(&wg);
    for (int k = 0; k < 4; k++)
        mote_chan_free(ch[k]);
    return t_end - t_start;
}

static void main_task(void *arg)
{
    (void)arg;
    run(iters / 20); /* warm-up */
    int64_t el = run(iters);
    printf("name=chan_select4 impl=mote workers=%lld ns_per_op=%.2f iters=%ld\n",
           (long long)bench_metric("/sched/workers:threads"), (double)el / iters, iters);
}

int main(int argc, char **argv)
{
    iters = argc > 1 ? strtol(argv[1], NULL, 10) : 5000000;
    int err = mote_run(main_task, NULL);
    if (err != 0) {
        fprintf(stderr, "chan_select4: mote_run: %s\n", mote_strerror(err));
        return 1;
    }
    return 0;
}
