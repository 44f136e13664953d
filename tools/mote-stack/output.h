/*
 * output.h - every report mote-stack prints, as text for people and as one
 * JSON object (--json) for programs.  The JSON keys are stable (documented
 * in docs/mote-stack.md); sizes are plain byte counts, addresses "0x..."
 * strings in the ELF's own address space.
 */
#ifndef MOTE_STACK_OUTPUT_H
#define MOTE_STACK_OUTPUT_H

#include "check.h"
#include "graph.h"
#include "traces.h"

enum { SORT_ADDR, SORT_FRAME, SORT_NAME };

typedef struct out_opts {
    bool json;
    int sort;
    size_t top; /* 0: all */
} out_opts;

void print_frames(FILE *f, elfbin *b, analyzer *a, const out_opts *o);

typedef struct worst_report {
    worst *w;
    size_t n;
    spawn *spawns;
    size_t nspawns;
    bool from_spawns; /* entries were found, not given */
    const costs *c;
    const hints *h;
    int64_t runtime;
    bool signal;
} worst_report;

void print_worst(FILE *f, elfbin *b, analyzer *a, const worst_report *r,
                 const out_opts *o);
void print_traces(FILE *f, elfbin *b, const traces *t, const out_opts *o);
void print_check(FILE *f, const check_result *r, const costs *c, const out_opts *o);
void flags_text(uint32_t flags, char *buf, size_t n);

#endif
