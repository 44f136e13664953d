/*
 * graph.h - the direct call graph, the deepest path from an entry, the
 * entries a binary spawns (calls to mote_go/mote_go_ex/mote_run), and the
 * hints file that names the targets of indirect calls.
 *
 * Bound arithmetic: along a path every function is charged its depth at
 * the call that continues the path (its return address, pushes and locals
 * at that call), a tail call (jmp) is charged its depth minus the 8 bytes
 * of the return address the callee reuses, and the last function its
 * deepest byte (red zone included).  The bound is "complete" only when no
 * recursion, dynamic frame or unresolved transfer is reachable.
 */
#ifndef MOTE_STACK_GRAPH_H
#define MOTE_STACK_GRAPH_H

#include "costs.h"
#include "frames.h"

typedef struct hint_edge {
    char *caller, *target;
    int line;
} hint_edge;

typedef struct hint_size {
    char *name;
    int32_t bytes;
    int line;
} hint_size;

typedef struct hints {
    bool warned; /* hints naming no function were reported */
    char *path;
    hint_edge *edges;
    size_t nedges, capedges;
    hint_size *frames; /* frame FN BYTES: bounds an alloca'ing function */
    size_t nframes, capframes;
    hint_size *externs; /* extern NAME BYTES: a library call's cost */
    size_t nexterns, capexterns;
    hint_size *recursions; /* recursion FN N: cycles through FN repeat <= N */
    size_t nrecursions, caprecursions;
} hints;

int hints_load(hints *h, const char *path); /* 0 or EXIT_INPUT */
void hints_free(hints *h);

typedef struct spawn {
    int caller;      /* function holding the call */
    uint64_t at;     /* the call instruction */
    const char *api; /* mote_go, mote_go_ex or mote_run */
    int target;      /* the spawned function, -1 when not found */
    uint64_t arg0;
    bool known; /* %rdi was a constant at the call */
} spawn;

/* Every spawn call in the binary (analyses every function). */
size_t find_spawns(analyzer *a, elfbin *b, spawn **out);

enum { W_CYCLE = 1, W_DYNAMIC = 2, W_UNKNOWN = 4 };

enum {
    WI_ICALL,
    WI_IJMP,
    WI_BADJMP,
    WI_EXTERN,
    WI_DYNAMIC,
    WI_UNDECODED,
    WI_MIDDLE,
    WI_SWITCH,
    WI_CALLBACK, /* a library function that calls back (qsort's comparator) */
};

typedef struct wstep {
    int func;        /* -1 for a library function */
    const char *ext; /* its name then */
    int32_t frame;   /* the function's own deepest byte */
    int32_t charge;  /* what it adds to the path */
    int64_t cum;     /* bytes from the entry's caller %rsp */
    uint64_t at;     /* the call (or jmp) leading to the next step */
    bool tail;       /* the next step is reached by a tail call */
} wstep;

typedef struct wissue {
    int what; /* WI_* */
    int func;
    uint64_t at;
    const char *ext;
} wissue;

/* One recursive group (strongly connected component) reached. */
typedef struct wcycle {
    int *funcs; /* a shortest cycle of the group: funcs[0] calls funcs[1]
                   ... calls funcs[0] */
    size_t n;
    int64_t per_level;  /* bounded: the heaviest segment from a hinted
                           function to the next; else that cycle's cost */
    int32_t max_repeat; /* bounded by the hints: K - 1 more levels; -1 */
} wcycle;

typedef struct worst {
    int entry;
    int64_t bound;
    uint32_t flags;
    wstep *path;
    size_t npath, cappath;
    wcycle *cycles;
    size_t ncycles, capcycles;
    wissue *issues;
    size_t nissues, capissues;
    size_t nreached;
    size_t nbackedges;       /* recursive groups met (recorded: <= 16) */
    int64_t recursion_extra; /* bound - the shown (zero-recursion) path */
    int64_t runtime, signal; /* reserves added for the recommendation */
    uint64_t stack_size;     /* recommended */
} worst;

typedef struct graph_opts {
    const hints *h;
    const costs *c;
    bool signal_reserve;
} graph_opts;

void worst_from(analyzer *a, elfbin *b, int entry, const graph_opts *o, worst *w);
void worst_free(worst *w);
/* Bytes mote keeps above the entry's caller %rsp: the slot top plus
 * task_entry's frame when the binary holds mote's task_entry (static
 * link), else the table's @runtime. */
int64_t runtime_overhead(analyzer *a, elfbin *b, const costs *c);
/* The stack_size class for total bytes: a power of two >= 8 KiB. */
uint64_t stack_class_for(int64_t total);
const char *issue_text(int what);

#endif
