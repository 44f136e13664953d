/*
 * spawn_cond.c - stack-corpus: mote_go(fp, ...) where fp is one of two
 * functions (gcc -O0: two paths meet at the store of fp with different
 * constants).  The tool must not report the first one as the only entry:
 * the spawn is unresolved (or both are listed).
 */
#include <mote.h>

volatile long cond_sink;
static mote_chan *cond_done;

static void cond_small(void *a)
{
    int one = 1;
    cond_sink += (long)a;
    mote_chan_send(cond_done, &one);
}

static void cond_big(void *a)
{
    volatile char b[60000];
    int one = 1;
    b[(long)a] = 1;
    cond_sink += b[7];
    mote_chan_send(cond_done, &one);
}

static void cond_main(void *arg)
{
    cond_done = mote_chan_make(sizeof(int), 4);
    void (*fp)(void *) = (long)arg > 1 ? cond_small : cond_big;
    mote_go(fp, arg);
    int x;
    mote_chan_recv(cond_done, &x);
}

int main(int argc, char **argv)
{
    (void)argv;
    return mote_run(cond_main, (void *)(long)argc);
}
