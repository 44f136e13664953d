/* gdb_target.c - a program for the gdb test (tests/gdb.cmake): two tasks
 * park inside wait_here(), then main stops at gdb_marker() so gdb can list
 * the tasks and walk a parked one's stack with tools/mote-gdb.py.  main
 * waits until both are parked (the blocked count), not for a fixed time. */
#include "mote.h"

static mote_chan *c;

static __attribute__((noinline)) void wait_here(void) { mote_chan_recv(c, NULL); }

static void worker_fn(void *a)
{
    (void)a;
    wait_here();
}

__attribute__((noinline)) void gdb_marker(void) { __asm__ volatile(""); }

static void m(void *a)
{
    (void)a;
    c = mote_chan_make(0, 0);
    mote_task_opts o = {.name = "named_one"};
    mote_go_ex(worker_fn, 0, &o);
    mote_go(worker_fn, 0);
    uint64_t blocked = 0;
    while (mote_metric("/tasks/blocked:tasks", &blocked) == 0 && blocked < 2)
        mote_sleep(1000000);
    gdb_marker();
    mote_chan_close(c);
}

int main(void) { return mote_run(m, 0); }
