/*
 * spawn.c - stack-corpus: tasks spawned with mote_run, mote_go (a constant
 * in a loop, so clang hoists the lea) and mote_go_ex; `mote-stack worst`
 * must find all three entries by itself.  Linked with the real libmote
 * (direct calls) or with spawn_stub.c as a shared library (calls through
 * the PLT).
 */
#include <mote.h>
#include <string.h>

volatile int spawn_sink;

/* Opaque to the optimiser: the buffers handed to it must exist. */
__attribute__((noinline)) static int spawn_use(char *p, int n)
{
    __asm__ volatile("" : : "r"(p) : "memory");
    return p[n / 2];
}

__attribute__((noinline)) static int spawn_helper(int x)
{
    char buf[1000];
    memset(buf, x, sizeof buf);
    return spawn_use(buf, sizeof buf);
}

static void spawn_worker(void *arg)
{
    spawn_sink = spawn_helper((int)(long)arg);
}

static void spawn_other(void *arg)
{
    char buf[5000];
    memset(buf, (int)(long)arg, sizeof buf);
    spawn_sink = spawn_use(buf, sizeof buf);
}

static void spawn_main(void *arg)
{
    (void)arg;
    for (long i = 0; i < 4; i++)
        mote_go(spawn_worker, (void *)i);
    mote_task_opts o = {.name = "other", .stack_size = 64 * 1024};
    mote_go_ex(spawn_other, (void *)7, &o);
    mote_yield();
}

int main(void)
{
    return mote_run(spawn_main, NULL) != 0;
}
