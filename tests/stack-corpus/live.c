/* live.c - corpus program run under mote (run.py `live`): task entries
 * whose call trees are fully visible to mote-stack (no recursion, no calls
 * through pointers or into libc), run as tasks; the runtime's measured
 * depths go to the report file named by argv[1], for `mote-stack check`.
 * Every frame writes all of its buffer, so what the runtime measures is
 * what the static analysis bounds. */
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include "mote.h"

#define NOINLINE __attribute__((noinline))

static volatile long sink;

static NOINLINE long fill(volatile char *p, int n, int seed)
{
    long s = 0;
    for (int i = 0; i < n; i++)
        p[i] = (char)(seed + i);
    for (int i = 0; i < n; i += 64)
        s += p[i];
    return s;
}

/* ---- a chain of 1 KiB frames, ten deep ---- */
static NOINLINE long chain10(int x)
{
    volatile char b[1000];
    return fill(b, sizeof b, x);
}
#define LINK(name, next)                                \
    static NOINLINE long name(int x)                    \
    {                                                   \
        volatile char b[1000];                          \
        long s = fill(b, sizeof b, x);                  \
        return s + next(x + 1) + b[x & 511];            \
    }
LINK(chain9, chain10)
LINK(chain8, chain9)
LINK(chain7, chain8)
LINK(chain6, chain7)
LINK(chain5, chain6)
LINK(chain4, chain5)
LINK(chain3, chain4)
LINK(chain2, chain3)
LINK(chain1, chain2)

static void entry_chain(void *arg)
{
    sink += chain1((int)(intptr_t)arg);
}

/* ---- one big frame ---- */
static void entry_big(void *arg)
{
    volatile char big[48 * 1024];
    sink += fill(big, sizeof big, (int)(intptr_t)arg) + big[100];
}

/* ---- wide: the deepest of several branches counts ---- */
static NOINLINE long wide_small(int x)
{
    volatile char b[256];
    return fill(b, sizeof b, x);
}
static NOINLINE long wide_large(int x)
{
    volatile char b[6000];
    return fill(b, sizeof b, x) + b[x & 1023];
}
static NOINLINE long wide_mid(int x)
{
    volatile char b[2000];
    return fill(b, sizeof b, x) + wide_small(x) + b[x & 255];
}

static void entry_wide(void *arg)
{
    int x = (int)(intptr_t)arg;
    sink += wide_small(x) + wide_mid(x) + wide_large(x);
}

/* ---- shallow ---- */
static void entry_shallow(void *arg)
{
    volatile char b[64];
    sink += fill(b, sizeof b, (int)(intptr_t)arg);
}

static void (*const entries[])(void *) = {entry_chain, entry_big, entry_wide,
                                          entry_shallow};

static void main_task(void *arg)
{
    const char *path = arg;
    int n = (int)(sizeof entries / sizeof *entries);
    for (int round = 0; round < 3; round++)
        for (int i = 0; i < n; i++)
            if (mote_go(entries[i], (void *)(intptr_t)(round + 1)) != 0)
                _exit(3);
    /* every task ends before main looks */
    uint64_t live = 0;
    do {
        mote_sleep(1000000);
        mote_metric("/tasks/live:tasks", &live);
    } while (live > 1);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || mote_stack_report(fd) != 0)
        _exit(4);
    close(fd);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: live REPORT\n");
        return 2;
    }
    return mote_run(main_task, argv[1]) == 0 ? 0 : 1;
}
