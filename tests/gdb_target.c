/* gdb_target.c - a program for the gdb tests (tests/gdb.cmake): two tasks
 * park inside wait_here(), then main stops at gdb_marker() so gdb can list
 * the tasks and walk a parked one's stack with tools/mote-gdb.py.  With an
 * argument, main first waits until both stacks are frozen (their pages are
 * then not there for gdb to read). */
#include <stdint.h>

#include "mote.h"

static mote_chan *c;
static int want_frozen;

static __attribute__((noinline)) void wait_here(void)
{
    mote_chan_recv(c, NULL);
    __asm__ volatile("" ::: "memory"); /* not a tail call */
}

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
    mote_task_opts o = MOTE_TASK_OPTS_INIT;
    o.name = "named_one";
    mote_go_ex(worker_fn, 0, &o);
    mote_go(worker_fn, 0);
    uint64_t blocked = 0;
    while (mote_metric("/tasks/blocked:tasks", &blocked) == 0 && blocked < 2)
        mote_sleep(1000000);
    uint64_t frozen = 0;
    for (int i = 0; want_frozen && frozen < 2 && i < 1000; i++) {
        mote_sleep(10000000);
        mote_metric("/stacks/frozen:tasks", &frozen);
    }
    gdb_marker();
    mote_chan_close(c);
}

int main(int argc, char **argv)
{
    (void)argv;
    want_frozen = argc > 1;
    return mote_run(m, 0);
}
