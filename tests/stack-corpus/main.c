/*
 * main.c - stack-corpus: calls every corner so all of it is linked and
 * reachable from main; prints through printf so a library call is on the
 * path.  The argument count keeps the compiler from folding anything.
 */
#include "corpus.h"

#include <stdio.h>

NOINLINE int corpus_use(char *p, int n)
{
    __asm__ volatile("" : : "r"(p) : "memory");
    return p[n / 2];
}

int main(int argc, char **argv)
{
    (void)argv;
    int x = argc;
    long s = tree_root(x) + recur_even(x) + recur_fact(x) + dyn_alloca(x) +
             dyn_vla(x) + dyn_aligned(x);
    if (argc > 5)
        s += tree_big(x);
    printf("%ld\n", s);
    return 0;
}
