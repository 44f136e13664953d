/*
 * util.h - the small things every part of mote-stack shares: allocation that
 * cannot fail (a tool that runs out of memory has nothing better to do than
 * to say so and stop), growable arrays, a string-keyed hash map, and the one
 * error channel (msg_error) so every message has the same "mote-stack: "
 * prefix and goes to stderr.
 */
#ifndef MOTE_STACK_UTIL_H
#define MOTE_STACK_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Exit codes: shared by every subcommand and documented in docs/mote-stack.md. */
enum {
    EXIT_FINDING = 1, /* check: a measured depth exceeded a complete bound */
    EXIT_INPUT = 2,   /* unreadable, not ELF, wrong architecture, stripped... */
    EXIT_USAGE = 64,  /* bad command line (sysexits' EX_USAGE) */
};

void *xmalloc(size_t n);
void *xcalloc(size_t n, size_t size);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s);
char *xstrndup(const char *s, size_t n);

/* Grows *arr (element size sz) so that index need-1 is valid. */
void vec_reserve(void *arr, size_t *cap, size_t need, size_t sz);
#define VEC_PUSH(arr, n, cap) \
    (vec_reserve(&(arr), &(cap), (n) + 1, sizeof *(arr)), &(arr)[(n)++])

void msg_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* fopen(path, "r") for an input file (what: "hints file", "cost table"...):
 * NULL with a message when it cannot be opened or is a directory (which
 * Linux opens and reads as empty). */
FILE *open_input(const char *path, const char *what);
void msg_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Open-addressing map from string to int.  Keys are not copied: they must
 * outlive the map (they point into ELF string tables or into the input). */
typedef struct strmap {
    const char **keys;
    int *vals;
    size_t cap, n;
} strmap;
void strmap_put(strmap *m, const char *key, int val);            /* keeps the first */
int strmap_get(const strmap *m, const char *key, size_t keylen); /* -1 */
void strmap_free(strmap *m);

uint64_t pow2_ceil(uint64_t v);

#endif
