/* squares.c - the README example: tasks send results over a channel. */
#include <mote.h>
#include <stdio.h>

static mote_chan *results;

static void worker(void *arg)
{
    long n = (long)arg, sq = n * n;
    mote_chan_send(results, &sq); /* blocks this task, not the thread */
}

static void main_task(void *arg)
{
    (void)arg;
    results = mote_chan_make(sizeof(long), 0);
    for (long i = 1; i <= 1000; i++)
        mote_go(worker, (void *)i);
    long sum = 0, v;
    for (int i = 0; i < 1000; i++) {
        mote_chan_recv(results, &v);
        sum += v;
    }
    printf("sum of squares: %ld\n", sum);
    mote_chan_free(results);
}

int main(void)
{
    int r = mote_run(main_task, NULL); /* returns when main_task returns */
    if (r)
        fprintf(stderr, "mote: %s\n", mote_strerror(r));
    return r != 0;
}
