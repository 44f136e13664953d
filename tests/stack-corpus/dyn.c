/*
 * dyn.c - stack-corpus: alloca and a VLA (frames sized at run time: the
 * analyser must say "dynamic"), and an over-aligned local (and rsp,-64).
 */
#include "corpus.h"

#include <alloca.h>
#include <string.h>

NOINLINE int dyn_alloca(int n)
{
    char *p = alloca((size_t)n + 1);
    memset(p, 1, (size_t)n + 1);
    return corpus_use(p, n + 1);
}

NOINLINE int dyn_vla(int n)
{
    char v[n + 1];
    memset(v, 2, sizeof v);
    return corpus_use(v, n + 1);
}

NOINLINE int dyn_aligned(int n)
{
    _Alignas(64) char b[200];
    memset(b, n, sizeof b);
    return corpus_use(b, sizeof b);
}
