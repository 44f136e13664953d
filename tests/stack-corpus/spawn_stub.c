/*
 * spawn_stub.c - stack-corpus: a stand-in libmote.so so spawn.c can be
 * linked dynamically and its mote_go calls go through the PLT.  It runs
 * the functions on the caller's stack; only the call shapes matter here.
 */
#include <mote.h>

int mote_run(mote_fn main, void *arg)
{
    main(arg);
    return 0;
}

int mote_go(mote_fn fn, void *arg)
{
    fn(arg);
    return 0;
}

int mote_go_ex(mote_fn fn, void *arg, const mote_task_opts *opts)
{
    (void)opts;
    fn(arg);
    return 0;
}

void mote_yield(void)
{
}
