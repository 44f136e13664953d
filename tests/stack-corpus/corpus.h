/*
 * corpus.h - shared by the stack-corpus programs (tests/stack-tool.cmake
 * builds them with gcc and clang, -O0/-O2/-Os, PIE or not, static or
 * dynamic, with and without -fstack-clash-protection).
 */
#ifndef CORPUS_H
#define CORPUS_H

#define NOINLINE __attribute__((noinline, noclone))
#if defined(__clang__)
#undef NOINLINE
#define NOINLINE __attribute__((noinline))
#endif

extern volatile int corpus_sink;

/* Defined in main.c: the compiler cannot see that it only reads one byte,
 * so every buffer handed to it must really exist in its frame. */
int corpus_use(char *p, int n);

int tree_root(int x);
int tree_big(int x);
int recur_even(int n);
long recur_fact(long n);
int dyn_alloca(int n);
int dyn_vla(int n);
int dyn_aligned(int n);

#endif
