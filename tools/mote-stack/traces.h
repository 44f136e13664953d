/*
 * traces.h - Uber's method: sampled stack traces (perf script output or
 * folded stacks) with each frame charged the frame size the binary's code
 * gives, so the deepest observed stacks and the functions whose frames cost
 * the most (weighted by samples) come out in bytes.
 *
 * Invariants: a stack's frames are stored root first; a frame of another
 * object (libc...) is charged once from the cost table where the stack
 * enters that object, and nothing for the frames inside it, since the table
 * already counts them; kernel frames are dropped (they are on the kernel
 * stack).
 */
#ifndef MOTE_STACK_TRACES_H
#define MOTE_STACK_TRACES_H

#include "costs.h"
#include "frames.h"

enum { TR_AUTO, TR_PERF, TR_FOLDED };

typedef struct tr_frame {
    char *name;
    uint64_t off;
    bool has_off;
    int func;       /* in the binary, else -1 */
    int32_t charge; /* bytes this frame adds */
} tr_frame;

typedef struct tr_stack {
    tr_frame *f;
    size_t n;
    uint64_t weight;
    int64_t depth;
    bool partial; /* a frame had no known cost */
} tr_stack;

typedef struct tr_func {
    int func;
    uint64_t samples;      /* samples with it on the stack */
    uint64_t byte_samples; /* its charges times samples */
    int32_t frame;
    int64_t deepest; /* deepest stack it was on */
} tr_func;

typedef struct traces {
    tr_stack *st;
    size_t n, cap;
    uint64_t weight;
    tr_func *fn;
    size_t nfn;
    size_t foreign_unknown; /* library frames not in the cost table */
    int format;
} traces;

/* 0, or EXIT_INPUT for unreadable or unrecognisable input. */
int traces_read(traces *t, FILE *in, const char *name, int format);
void traces_charge(traces *t, analyzer *a, elfbin *b, const costs *c);
void traces_free(traces *t);

#endif
