/*
 * tree.c - stack-corpus: deep and wide call trees, a 64 KiB frame, varargs,
 * calls with stack arguments, tail calls and calls through function
 * pointers: what a stack analyser must charge right.  Everything is
 * noinline so the call structure survives -O2 and -Os; volatile sinks keep
 * the locals alive.
 */
#include "corpus.h"

#include <stdarg.h>
#include <string.h>

volatile int corpus_sink;

NOINLINE int tree_leaf(int x)
{
    return x * 3 + 1;
}

NOINLINE int tree_small(int x)
{
    char buf[40];
    memset(buf, x, sizeof buf);
    return tree_leaf(x) + corpus_use(buf, sizeof buf);
}

NOINLINE int tree_mid(int x)
{
    char buf[300];
    memset(buf, x, sizeof buf);
    return tree_small(x + 1) + tree_small(x + 2) + corpus_use(buf, sizeof buf);
}

/* The fat one on the deep path. */
NOINLINE int tree_big(int x)
{
    char buf[65536];
    memset(buf, x, sizeof buf);
    return tree_mid(x) + corpus_use(buf, sizeof buf);
}

/* Wide: many callees, only one deep. */
NOINLINE int tree_wide(int x)
{
    int s = 0;
    s += tree_leaf(x);
    s += tree_small(x);
    s += tree_mid(x);
    s += tree_leaf(x + 1);
    s += tree_small(x + 1);
    if (x > 1000)
        s += tree_big(x);
    return s;
}

/* Varargs: the register save area makes the frame. */
NOINLINE int tree_sum(int n, ...)
{
    va_list ap;
    va_start(ap, n);
    int s = 0;
    for (int i = 0; i < n; i++)
        s += va_arg(ap, int);
    va_end(ap);
    return s;
}

/* Ten arguments: four go on the stack. */
NOINLINE int tree_many(int a, int b, int c, int d, int e, int f, int g, int h,
                       int i, int j)
{
    corpus_sink = a + j;
    return a + b + c + d + e + f + g + h + i + j;
}

NOINLINE int tree_calls_many(int x)
{
    return tree_many(x, x + 1, x + 2, x + 3, x + 4, x + 5, x + 6, x + 7,
                     x + 8, x + 9) + tree_sum(4, x, x, x, x) + 1;
}

/* At -O2 and -Os a tail call: jmp tree_mid. */
NOINLINE int tree_tail(int x)
{
    corpus_sink = x;
    return tree_mid(x + 5);
}

static int (*const tree_fns[])(int) = {tree_leaf, tree_small, tree_mid};

/* Calls through a function pointer: unknown without a hint. */
NOINLINE int tree_indirect(int x)
{
    char buf[64];
    memset(buf, x, sizeof buf);
    return tree_fns[(unsigned)x % 3](x) + corpus_use(buf, sizeof buf);
}

NOINLINE int tree_root(int x)
{
    return tree_wide(x) + tree_calls_many(x) + tree_tail(x) + tree_indirect(x);
}
