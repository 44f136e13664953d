/*
 * recur.c - stack-corpus: self and mutual recursion, which no static bound
 * covers; the analyser must name the cycle.
 */
#include "corpus.h"

NOINLINE int recur_even(int n);

NOINLINE int recur_odd(int n)
{
    volatile char pad[24];
    pad[0] = (char)n;
    return n == 0 ? 0 : recur_even(n - 1) + pad[0];
}

NOINLINE int recur_even(int n)
{
    volatile char pad[40];
    pad[0] = (char)n;
    return n == 0 ? 1 : recur_odd(n - 1) + pad[0];
}

NOINLINE long recur_fact(long n)
{
    volatile long keep = n;
    return n <= 1 ? 1 : keep * recur_fact(n - 1);
}
