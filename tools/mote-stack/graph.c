/*
 * graph.c - call graph, worst path, spawned entries and hints (graph.h).
 *
 * The deepest path: every function reachable from the entry is expanded
 * into its edges (direct calls, tail calls, hinted indirect targets,
 * library calls), then Tarjan's algorithm splits the graph into strongly
 * connected components and computes each component's bound once all the
 * components it calls are final.  A component without recursion is the
 * longest-path step; a recursive one is bounded only by `recursion` hints
 * that cut all its cycles (see scc_finish), else it is unbounded and the
 * figure beside "unbounded" is its deepest path that recurses zero times.
 * (A memoising depth-first walk is wrong here: a function finished while
 * its cycle was still open keeps a partial value, and a cycle reached
 * through an already finished function is never seen.)
 *
 * Entries: the spawn calls are found in every function's call sites; the
 * frame analysis recorded %rdi wherever it held a constant at a call (a
 * `lea rdi,[rip+fn]` or `mov edi,fn`, also through register copies and
 * callee-saved registers set before a loop), which is the function passed.
 */
#include "graph.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* ---- hints ------------------------------------------------------------------- */

static char *trim(char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    size_t n = strlen(s);
    while (n &&
           (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r' || s[n - 1] == '\n'))
        s[--n] = 0;
    return s;
}

int hints_load(hints *h, const char *path)
{
    memset(h, 0, sizeof *h);
    h->path = xstrdup(path);
    FILE *f = open_input(path, "hints file");
    if (!f)
        return EXIT_INPUT;
    char line[4096];
    int lineno = 0;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        if (!strchr(line, '\n') && !feof(f)) {
            msg_error("%s:%d: line longer than %zu bytes", path, lineno, sizeof line - 2);
            fclose(f);
            return EXIT_INPUT;
        }
        char *hash = strchr(line, '#');
        if (hash)
            *hash = 0;
        char *s = trim(line);
        if (!*s)
            continue;
        char *arrow = strstr(s, "->");
        if (arrow) {
            *arrow = 0;
            char *caller = trim(s);
            char *rest = arrow + 2;
            if (!*caller || strpbrk(caller, " \t,")) {
                msg_error("%s:%d: expected \"caller -> target[, target...]\"", path,
                          lineno);
                fclose(f);
                return EXIT_INPUT;
            }
            for (char *tok = strtok(rest, ", \t\n"); tok; tok = strtok(NULL, ", \t\n")) {
                hint_edge *e = VEC_PUSH(h->edges, h->nedges, h->capedges);
                e->caller = xstrdup(caller);
                e->target = xstrdup(tok);
                e->line = lineno;
            }
            continue;
        }
        char kw[32], name[1024];
        long long bytes;
        char extra;
        int n = sscanf(s, "%31s %1023s %lld %c", kw, name, &bytes, &extra);
        bool isframe = n == 3 && strcmp(kw, "frame") == 0;
        bool isext = n == 3 && strcmp(kw, "extern") == 0;
        bool isrec = n == 3 && strcmp(kw, "recursion") == 0;
        if ((!isframe && !isext && !isrec) || bytes < 0 || bytes > (1 << 30)) {
            msg_error("%s:%d: expected \"caller -> target\", \"frame FUNCTION BYTES\", "
                      "\"extern FUNCTION BYTES\" or \"recursion FUNCTION TIMES\"",
                      path, lineno);
            fclose(f);
            return EXIT_INPUT;
        }
        hint_size *z = isframe ? VEC_PUSH(h->frames, h->nframes, h->capframes)
                       : isext
                           ? VEC_PUSH(h->externs, h->nexterns, h->capexterns)
                           : VEC_PUSH(h->recursions, h->nrecursions, h->caprecursions);
        z->name = xstrdup(name);
        z->bytes = (int32_t)bytes;
        z->line = lineno;
    }
    fclose(f);
    return 0;
}

void hints_free(hints *h)
{
    for (size_t i = 0; i < h->nedges; i++) {
        free(h->edges[i].caller);
        free(h->edges[i].target);
    }
    for (size_t i = 0; i < h->nframes; i++)
        free(h->frames[i].name);
    for (size_t i = 0; i < h->nexterns; i++)
        free(h->externs[i].name);
    for (size_t i = 0; i < h->nrecursions; i++)
        free(h->recursions[i].name);
    free(h->recursions);
    free(h->edges);
    free(h->frames);
    free(h->externs);
    free(h->path);
    memset(h, 0, sizeof *h);
}

/* A function by name or by 0xADDRESS. */
static int lookup(const elfbin *b, const char *name)
{
    if (name[0] == '0' && (name[1] == 'x' || name[1] == 'X')) {
        char *end;
        unsigned long long v = strtoull(name, &end, 16);
        if (!*end)
            return elfbin_func_start(b, v);
    }
    return elfbin_func_named(b, name, strlen(name));
}

/* ---- spawns -------------------------------------------------------------------- */

static const char *spawn_api_name(const char *name)
{
    size_t n = strcspn(name, "@");
    static const char *const apis[] = {"mote_go", "mote_go_ex", "mote_run"};
    for (int i = 0; i < 3; i++)
        if (strlen(apis[i]) == n && strncmp(name, apis[i], n) == 0)
            return apis[i];
    return NULL;
}

static const char *spawn_api(const elfbin *b, const callsite *c)
{
    const char *name = c->ext;
    if (!name && c->target) {
        int fi = elfbin_func_start(b, c->target);
        name = fi >= 0 ? b->funcs[fi].name : NULL;
    }
    return name ? spawn_api_name(name) : NULL;
}

size_t find_spawns(analyzer *a, elfbin *b, spawn **out)
{
    frames_all(a);
    spawn *v = NULL;
    size_t n = 0, cap = 0;
    for (size_t fi = 0; fi < b->nfuncs; fi++) {
        const frame *f = frame_of(a, (int)fi);
        if (!f)
            continue;
        const callsite *cs = frame_calls(a, f);
        for (uint32_t k = 0; k < f->ncalls; k++) {
            const callsite *c = &cs[k];
            if (c->kind != CS_CALL && c->kind != CS_TAIL)
                continue;
            const char *api = spawn_api(b, c);
            /* mote_go calling mote_go_ex passes its own argument on. */
            if (!api || spawn_api_name(b->funcs[fi].name))
                continue;
            spawn *s = VEC_PUSH(v, n, cap);
            s->caller = (int)fi;
            s->at = c->at;
            s->api = api;
            s->known = c->arg0_known;
            s->arg0 = c->arg0;
            s->target = c->arg0_known ? elfbin_func_start(b, c->arg0) : -1;
        }
    }
    *out = v;
    return n;
}

/* ---- worst path -------------------------------------------------------------------- */

const char *issue_text(int what)
{
    switch (what) {
    case WI_ICALL: return "indirect call";
    case WI_IJMP: return "indirect jump";
    case WI_BADJMP: return "jump into the middle of code";
    case WI_EXTERN: return "library function not in the cost table";
    case WI_DYNAMIC: return "dynamic frame (alloca/VLA)";
    case WI_UNDECODED: return "code that could not be followed";
    case WI_MIDDLE: return "call into the middle of a function";
    case WI_CALLBACK: return "library function calling back into the program";
    default: return "?";
    }
}

uint64_t stack_class_for(int64_t total)
{
    uint64_t v = total > 0 ? (uint64_t)total : 1;
    v = pow2_ceil(v);
    return v < 8192 ? 8192 : v;
}

int64_t runtime_overhead(analyzer *a, elfbin *b, const costs *c)
{
    int te = elfbin_func_named(b, "task_entry", 10);
    int tr = elfbin_func_named(b, "mote__arch_task_trampoline", 26);
    if (tr < 0) /* before mote 0.2 */
        tr = elfbin_func_named(b, "arch_task_trampoline", 20);
    if (te < 0 || tr < 0)
        return c->runtime;
    const frame *f = frame_of(a, te);
    if (!f)
        return c->runtime;
    const callsite *cs = frame_calls(a, f);
    int32_t d = -1;
    for (uint32_t k = 0; k < f->ncalls; k++)
        if (cs[k].kind == CS_ICALL && cs[k].depth > d)
            d = cs[k].depth;
    /* STACK_TOP_RESERVED (32) and arch_ctx_init's 16-byte pad sit above
     * the trampoline's %rsp; task_entry's depth at its call of the entry
     * comes below it. */
    return d > 0 ? 48 + d : c->runtime;
}

/* One edge of the reached call graph: to a function, or to a library
 * function charged from the cost table. */
typedef struct wedge {
    int to;          /* function, or -1 */
    const char *ext; /* library function when to < 0 */
    int64_t extcost;
    int64_t charge; /* the caller's depth at the transfer */
    uint64_t at;
    bool tail;
} wedge;

typedef struct walk {
    analyzer *a;
    elfbin *b;
    const graph_opts *o;
    worst *w;
    int *seen;      /* first edge index + 1 once reached, 0 before */
    uint32_t *nout; /* edges per reached function */
    int *order;     /* reached functions, in the order found */
    size_t norder;
    wedge *edges;
    size_t nedges, capedges;
    int64_t *own;   /* the function's own depth (or frame hint) */
    int64_t *cost;  /* bound from the function on */
    int64_t *zcost; /* the shown path from it: no recursion */
    int *bst;       /* edge of the shown path, -1: the path ends here */
    uint32_t *flags;
    int *hint_caller; /* hint edges resolved: caller index per edge */
    int *hint_target;
} walk;

static void add_issue(walk *k, int what, int func, uint64_t at, const char *ext)
{
    wissue *i = VEC_PUSH(k->w->issues, k->w->nissues, k->w->capissues);
    i->what = what;
    i->func = func;
    i->at = at;
    i->ext = ext;
}

static int32_t frame_hint(const walk *k, int v)
{
    const hints *h = k->o->h;
    for (size_t i = 0; h && i < h->nframes; i++)
        if (lookup(k->b, h->frames[i].name) == v)
            return h->frames[i].bytes;
    return -1;
}

static int64_t ext_cost(walk *k, const char *name, int v, uint64_t at, bool *unknown)
{
    const hints *h = k->o->h;
    size_t n = strcspn(name, "@");
    int64_t c = -1;
    for (size_t i = 0; h && i < h->nexterns; i++)
        if (strlen(h->externs[i].name) == n && strncmp(h->externs[i].name, name, n) == 0)
            c = h->externs[i].bytes;
    if (c < 0)
        c = costs_lib(k->o->c, name);
    /* abort, exit, errx, __assert_fail... end the process, but on the
     * task's stack: errx formats through unbuffered stderr (8 KiB), exit
     * runs atexit handlers.  They are charged like any other library
     * call (calibrate measures them), unknown when not in the table. */
    *unknown = c < 0;
    if (c < 0) {
        add_issue(k, WI_EXTERN, v, at, name);
        c = 0;
    }
    /* A lazily bound PLT slot runs the resolver first, on the same stack. */
    if (k->b->dynamic && !k->b->bind_now && k->o->c->lazybind > c)
        c = k->o->c->lazybind;
    return c;
}

static void reach(walk *k, int v)
{
    if (v >= 0 && !k->seen[v]) {
        k->seen[v] = -1; /* queued; its edges are added when it is expanded */
        k->order[k->norder++] = v;
    }
}

static void edge_add(walk *k, int v, int to, const char *ext, int64_t extcost,
                     int64_t charge, uint64_t at, bool tail)
{
    wedge *e = VEC_PUSH(k->edges, k->nedges, k->capedges);
    e->to = to;
    e->ext = ext;
    e->extcost = extcost;
    e->charge = charge;
    e->at = at;
    e->tail = tail;
    k->nout[v]++;
    reach(k, to);
}

/* Library functions that call a function pointer they are given on the
 * caller's stack (the comparator runs below qsort's own frame). */
static bool calls_back(const char *name)
{
    static const char *const names[] = {
        "qsort", "qsort_r", "bsearch",      "lfind",           "lsearch",   "tsearch",
        "tfind", "tdelete", "twalk",        "twalk_r",         "tdestroy",  "ftw",
        "ftw64", "nftw",    "nftw64",       "scandir",         "scandir64", "scandirat",
        "glob",  "glob64",  "pthread_once", "dl_iterate_phdr", "call_once",
    };
    size_t n = strcspn(name, "@");
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (strlen(names[i]) == n && strncmp(names[i], name, n) == 0)
            return true;
    return false;
}

static void edge_named(walk *k, int v, const char *name, int64_t charge, uint64_t at,
                       bool tail);

/* The targets v's `caller -> target` hints name, as edges charged
 * `charge`; false when there are none.  lib: from a library function
 * that calls back (a target that is one itself adds nothing). */
static bool hinted_edges(walk *k, int v, int64_t charge, uint64_t at, bool tail, bool lib)
{
    const hints *h = k->o->h;
    bool any = false;
    for (size_t i = 0; h && i < h->nedges; i++) {
        if (k->hint_caller[i] != v)
            continue;
        any = true;
        if (k->hint_target[i] >= 0)
            edge_add(k, v, k->hint_target[i], NULL, 0, charge, at, tail);
        else if (!lib || !calls_back(h->edges[i].target))
            edge_named(k, v, h->edges[i].target, charge, at, tail);
    }
    return any;
}

/* qsort and the like: the callback runs below the library function's
 * frame.  The caller's `caller -> target` hints name the callbacks, each
 * charged on top of the library function's cost; without hints the call
 * is an unknown (the table's figure leaves the callback out). */
static void callbacks(walk *k, int v, const char *name, int64_t cost, int64_t charge,
                      uint64_t at)
{
    if (!hinted_edges(k, v, charge + cost, at, false, true)) {
        k->flags[v] |= W_UNKNOWN;
        add_issue(k, WI_CALLBACK, v, at, name);
    }
}

static void edge_named(walk *k, int v, const char *name, int64_t charge, uint64_t at,
                       bool tail)
{
    int fi = lookup(k->b, name);
    /* A static binary's IFUNC slot (memcpy, strstr...) is named by its
     * symbol, whose code is the resolver, not the variant called: the
     * call is charged from the cost table like a shared library's. */
    if (fi >= 0 && !(k->b->funcs[fi].flags & FN_IFUNC)) {
        edge_add(k, v, fi, NULL, 0, charge, at, tail);
        return;
    }
    bool unknown;
    int64_t c = ext_cost(k, name, v, at, &unknown);
    if (unknown)
        k->flags[v] |= W_UNKNOWN;
    edge_add(k, v, -1, name, c, charge, at, tail);
    if (calls_back(name))
        callbacks(k, v, name, c, charge, at);
}

/* v's own depth, issues and outgoing edges (hints included). */
static void expand(walk *k, int v)
{
    const frame *f = frame_of(k->a, v);
    k->seen[v] = (int)k->nedges + 1;
    k->w->nreached++;
    int32_t hint = frame_hint(k, v);
    k->own[v] = f ? (hint > f->depth ? hint : f->depth) : 8;
    if (!f)
        return;
    if ((f->flags & FR_DYNAMIC) && hint < 0) {
        k->flags[v] |= W_DYNAMIC;
        add_issue(k, WI_DYNAMIC, v, k->b->funcs[v].addr, NULL);
    }
    if (f->flags & FR_UNKNOWN) {
        k->flags[v] |= W_UNKNOWN;
        add_issue(k, WI_UNDECODED, v, f->bad_at, NULL);
    }
    const callsite *cs = frame_calls(k->a, f);
    for (uint32_t n = 0; n < f->ncalls; n++) {
        const callsite *c = &cs[n];
        bool jump = c->kind == CS_TAIL || c->kind == CS_IJMP || c->kind == CS_BADJMP;
        int64_t depth = c->depth >= 0 ? c->depth : f->frame;
        int64_t charge = jump ? (depth > 8 ? depth - 8 : 0) : depth;
        /* A `frame FN N` hint bounds the whole frame, alloca included; a
         * call after the alloca is made below it, where the static depth
         * does not reach, so every call site is charged the hint. */
        if (hint > charge)
            charge = hint;
        if (c->kind == CS_CALL || c->kind == CS_TAIL) {
            if (c->ext) {
                edge_named(k, v, c->ext, charge, c->at, jump);
                continue;
            }
            int to = elfbin_func_start(k->b, c->target);
            if (to >= 0 && !(k->b->funcs[to].flags & FN_COLD)) {
                edge_add(k, v, to, NULL, 0, charge, c->at, jump);
                continue;
            }
            k->flags[v] |= W_UNKNOWN;
            add_issue(k, WI_MIDDLE, v, c->at, NULL);
            continue;
        }
        /* Indirect: the hints name the targets. */
        if (hinted_edges(k, v, charge, c->at, jump, false))
            continue;
        k->flags[v] |= W_UNKNOWN;
        add_issue(k,
                  c->kind == CS_ICALL  ? WI_ICALL
                  : c->kind == CS_IJMP ? WI_IJMP
                                       : WI_BADJMP,
                  v, c->at, NULL);
    }
}

static const wedge *edges_of(const walk *k, int v, uint32_t *n)
{
    *n = k->nout[v];
    return k->edges ? k->edges + (k->seen[v] - 1) : NULL;
}

#define NEG (INT64_MIN / 4)

/* Tarjan's strongly connected components over the reached graph.  A
 * component is finished only after every component it reaches, so its
 * bound is computed from final numbers: recursion never sees a partial
 * result (the bug of a memoised depth-first walk, which took a cycle's
 * members' values while the cycle was still open). */
typedef struct scc {
    int *idx, *low, *comp;
    int *pos; /* position in its component's member list */
    int *stk;
    size_t nstk;
    int next;
} scc;

static void scc_finish(walk *k, scc *t, const int *m, size_t s);

static void scc_run(walk *k, int entry)
{
    size_t n = k->b->nfuncs;
    scc t;
    t.idx = xmalloc(n * sizeof(int));
    t.low = xmalloc(n * sizeof(int));
    t.comp = xmalloc(n * sizeof(int));
    t.pos = xmalloc(n * sizeof(int));
    for (size_t i = 0; i < n; i++)
        t.idx[i] = t.comp[i] = -1;
    t.stk = xmalloc(n * sizeof(int));
    t.nstk = 0;
    t.next = 0;
    int *cv = xmalloc(n * sizeof(int));           /* DFS: vertex */
    uint32_t *ce = xmalloc(n * sizeof(uint32_t)); /* DFS: next edge */
    size_t ncall = 0;
    int ncomp = 0;
    cv[ncall] = entry;
    ce[ncall++] = 0;
    t.idx[entry] = t.low[entry] = t.next++;
    t.stk[t.nstk++] = entry;
    while (ncall) {
        int v = cv[ncall - 1];
        uint32_t ne;
        const wedge *e = edges_of(k, v, &ne);
        if (ce[ncall - 1] < ne) {
            int w = e[ce[ncall - 1]++].to;
            if (w < 0)
                continue;
            if (t.idx[w] < 0) {
                t.idx[w] = t.low[w] = t.next++;
                t.stk[t.nstk++] = w;
                cv[ncall] = w;
                ce[ncall++] = 0;
            } else if (t.comp[w] < 0 && t.idx[w] < t.low[v]) {
                t.low[v] = t.idx[w]; /* w is on the component stack */
            }
            continue;
        }
        ncall--;
        if (ncall && t.low[v] < t.low[cv[ncall - 1]])
            t.low[cv[ncall - 1]] = t.low[v];
        if (t.low[v] != t.idx[v])
            continue;
        size_t s = t.nstk;
        do {
            t.comp[t.stk[--s]] = ncomp;
        } while (t.stk[s] != v);
        for (size_t i = s; i < t.nstk; i++)
            t.pos[t.stk[i]] = (int)(i - s);
        ncomp++;
        scc_finish(k, &t, t.stk + s, t.nstk - s);
        t.nstk = s;
    }
    free(cv);
    free(ce);
    free(t.idx);
    free(t.low);
    free(t.comp);
    free(t.pos);
    free(t.stk);
}

static int64_t edge_val(const wedge *e, const int64_t *cost)
{
    return e->charge + (e->to >= 0 ? cost[e->to] : e->extcost);
}

/* A shortest cycle through m[0] inside the component, for the report. */
static void record_cycle(walk *k, const scc *t, const int *m, size_t s, int64_t per_level,
                         int32_t max_repeat, int cid)
{
    k->w->nbackedges++;
    if (k->w->ncycles >= 16)
        return;
    int r = m[0];
    /* BFS over the component; prev[] by position in m. */
    int *q = xmalloc(s * sizeof(int)), *prev = xmalloc(s * sizeof(int));
    int64_t *ch = xmalloc(s * sizeof(int64_t));
    size_t qh = 0, qt = 0;
    for (size_t i = 0; i < s; i++)
        prev[i] = -2;
    int last = -1;
    int64_t lastch = 0;
    q[qt++] = 0;
    prev[0] = -1;
    while (qh < qt && last < 0) {
        int pi = q[qh++];
        uint32_t ne;
        const wedge *e = edges_of(k, m[pi], &ne);
        for (uint32_t j = 0; j < ne && last < 0; j++) {
            int w = e[j].to;
            if (w < 0 || t->comp[w] != cid)
                continue;
            if (w == r) {
                last = pi;
                lastch = e[j].charge;
                break;
            }
            int i = t->pos[w];
            if (prev[i] == -2) {
                prev[i] = pi;
                ch[i] = e[j].charge;
                q[qt++] = i;
            }
        }
    }
    wcycle *c = VEC_PUSH(k->w->cycles, k->w->ncycles, k->w->capcycles);
    size_t len = 0;
    for (int i = last; i >= 0; i = prev[i])
        len++;
    c->n = len;
    c->funcs = xmalloc((len ? len : 1) * sizeof *c->funcs);
    int64_t sum = lastch;
    size_t pos = len;
    for (int i = last; i >= 0; i = prev[i]) {
        c->funcs[--pos] = m[i];
        if (prev[i] >= 0)
            sum += ch[i];
    }
    c->per_level = per_level >= 0 ? per_level : sum;
    c->max_repeat = max_repeat;
    free(q);
    free(prev);
    free(ch);
}

/* The bound of every function of one component, all it calls outside
 * the component being final.
 *
 * Without recursion: the function's own depth, or the best edge.
 *
 * With recursion (more than one function, or a self call): the functions
 * named by `recursion FN N` hints (H) appear at most N + 1 times each on a
 * stack, so at most K = sum(N + 1) times in all.  If the component without
 * H is acyclic, any path through it is: a way from where it enters to the
 * first H function, at most K - 1 segments from an H function to the next
 * (each at most L, the heaviest such segment), and a last one that leaves
 * the component or ends in it (at most E).  That is the bound.  Otherwise
 * (no hint, or a cycle the hints do not cut) the recursion is unbounded
 * and the figure kept is the path that recurses zero times (edges only to
 * functions found later in the search), a guide. */
/* One step of the bound over v's edges inside its component: *down, the
 * heaviest way from v that stays off hinted functions and then leaves (D
 * of the successors), and *to_h, the heaviest way to the next hinted
 * function (T of the successors, or the edge itself).  inh, D and T are
 * indexed by position in the component. */
static void scc_step(const walk *k, const scc *t, int v, const bool *inh,
                     const int64_t *D, const int64_t *T, int64_t *down, int64_t *to_h)
{
    int cid = t->comp[v];
    uint32_t ne;
    const wedge *e = edges_of(k, v, &ne);
    for (uint32_t j = 0; j < ne; j++) {
        int w = e[j].to;
        if (w < 0 || t->comp[w] != cid)
            continue;
        int p = t->pos[w];
        if (inh[p]) {
            if (e[j].charge > *to_h)
                *to_h = e[j].charge;
            continue;
        }
        if (e[j].charge + D[p] > *down)
            *down = e[j].charge + D[p];
        if (T[p] > NEG && e[j].charge + T[p] > *to_h)
            *to_h = e[j].charge + T[p];
    }
}

static void scc_finish(walk *k, scc *t, const int *m, size_t s)
{
    int cid = t->comp[m[0]];
    bool cyclic = s > 1;
    uint32_t uflags = 0;
    for (size_t i = 0; i < s; i++) {
        int v = m[i];
        uint32_t ne;
        const wedge *e = edges_of(k, v, &ne);
        uflags |= k->flags[v];
        /* out: leave the component (or end) from v */
        k->zcost[v] = k->own[v];
        k->bst[v] = -1;
        for (uint32_t j = 0; j < ne; j++) {
            if (e[j].to == v)
                cyclic = true;
            if (e[j].to >= 0 && t->comp[e[j].to] == cid)
                continue;
            if (e[j].to >= 0)
                uflags |= k->flags[e[j].to];
            int64_t c = edge_val(&e[j], k->cost);
            if (c > k->zcost[v]) {
                k->zcost[v] = c;
                k->bst[v] = (int)(&e[j] - k->edges);
            }
        }
    }
    if (!cyclic) {
        k->cost[m[0]] = k->zcost[m[0]];
        k->flags[m[0]] = uflags;
        return;
    }
    /* m is in stack order: increasing search index. */
    int64_t *out = xmalloc(s * sizeof *out);
    for (size_t i = 0; i < s; i++)
        out[i] = k->zcost[m[i]];
    /* The shown path: internal edges forward in search order only. */
    for (size_t i = s; i-- > 0;) {
        int v = m[i];
        uint32_t ne;
        const wedge *e = edges_of(k, v, &ne);
        for (uint32_t j = 0; j < ne; j++) {
            int w = e[j].to;
            if (w < 0 || t->comp[w] != cid || t->idx[w] <= t->idx[v])
                continue;
            int64_t c = e[j].charge + k->zcost[w];
            if (c > k->zcost[v]) {
                k->zcost[v] = c;
                k->bst[v] = (int)(&e[j] - k->edges);
            }
        }
    }
    /* Hinted functions and K. */
    bool *inh = xcalloc(s, sizeof *inh);
    int64_t K = 0;
    const hints *h = k->o->h;
    for (size_t r = 0; h && r < h->nrecursions; r++) {
        int fi = lookup(k->b, h->recursions[r].name);
        for (size_t i = 0; i < s; i++)
            if (m[i] == fi && !inh[i]) {
                inh[i] = true;
                K += (int64_t)h->recursions[r].bytes + 1;
            }
    }
    /* Topological order of the component without H (Kahn), by position. */
    int *indeg = xcalloc(s, sizeof *indeg);
    int *topo = xmalloc(s * sizeof *topo);
    size_t ntopo = 0, nrest = 0;
#define POS_OF(w) (t->pos[w])
    for (size_t i = 0; i < s; i++) {
        if (inh[i])
            continue;
        nrest++;
        uint32_t ne;
        const wedge *e = edges_of(k, m[i], &ne);
        for (uint32_t j = 0; j < ne; j++) {
            int w = e[j].to;
            if (w >= 0 && t->comp[w] == cid && !inh[POS_OF(w)])
                indeg[POS_OF(w)]++;
        }
    }
    for (size_t i = 0; i < s; i++)
        if (!inh[i] && !indeg[i])
            topo[ntopo++] = (int)i;
    for (size_t q = 0; q < ntopo; q++) {
        uint32_t ne;
        const wedge *e = edges_of(k, m[topo[q]], &ne);
        for (uint32_t j = 0; j < ne; j++) {
            int w = e[j].to;
            if (w >= 0 && t->comp[w] == cid && !inh[POS_OF(w)] && --indeg[POS_OF(w)] == 0)
                topo[ntopo++] = POS_OF(w);
        }
    }
    bool bounded = K > 0 && ntopo == nrest;
    int64_t per_level = -1;
    int32_t max_repeat = -1;
    if (bounded) {
        int64_t *D = xmalloc(s * sizeof *D), *T = xmalloc(s * sizeof *T);
        for (size_t q = ntopo; q-- > 0;) {
            int i = topo[q];
            D[i] = out[i];
            T[i] = NEG;
            scc_step(k, t, m[i], inh, D, T, &D[i], &T[i]);
        }
        int64_t L = NEG, E = NEG;
        for (size_t i = 0; i < s; i++) {
            if (!inh[i])
                continue;
            int64_t leave = out[i], loop = NEG;
            scc_step(k, t, m[i], inh, D, T, &leave, &loop);
            if (leave > E)
                E = leave;
            if (loop > L)
                L = loop;
        }
        if (L < 0)
            L = 0;
        /* Saturated: hints allow 2^30 repeats of frames up to 1 GiB. */
        const int64_t SAT = INT64_MAX / 4;
        int64_t from_h = L > 0 && K - 1 > SAT / L ? SAT : (K - 1) * L;
        from_h = E > SAT - from_h ? SAT : from_h + E; /* nested groups add up */
        for (size_t i = 0; i < s; i++) {
            int64_t c = inh[i] ? from_h : D[i];
            if (!inh[i] && T[i] > NEG && T[i] > c - from_h)
                c = T[i] > INT64_MAX / 2 - from_h ? INT64_MAX / 2 : T[i] + from_h;
            k->cost[m[i]] = c > k->zcost[m[i]] ? c : k->zcost[m[i]];
        }
        per_level = L;
        max_repeat = K - 1 > INT32_MAX ? INT32_MAX : (int32_t)(K - 1);
        free(D);
        free(T);
    } else {
        for (size_t i = 0; i < s; i++)
            k->cost[m[i]] = k->zcost[m[i]];
        uflags |= W_CYCLE;
    }
#undef POS_OF
    for (size_t i = 0; i < s; i++)
        k->flags[m[i]] = uflags;
    record_cycle(k, t, m, s, per_level, max_repeat, cid);
    free(out);
    free(inh);
    free(indeg);
    free(topo);
}

void worst_from(analyzer *a, elfbin *b, int entry, const graph_opts *o, worst *w)
{
    memset(w, 0, sizeof *w);
    w->entry = entry;
    walk k;
    memset(&k, 0, sizeof k);
    k.a = a;
    k.b = b;
    k.o = o;
    k.w = w;
    size_t n = b->nfuncs;
    k.seen = xcalloc(n, sizeof *k.seen);
    k.nout = xcalloc(n, sizeof *k.nout);
    k.order = xmalloc(n * sizeof *k.order);
    k.own = xcalloc(n, sizeof *k.own);
    k.cost = xcalloc(n, sizeof *k.cost);
    k.zcost = xcalloc(n, sizeof *k.zcost);
    k.bst = xcalloc(n, sizeof *k.bst);
    k.flags = xcalloc(n, sizeof *k.flags);
    size_t nh = o->h ? o->h->nedges : 0;
    k.hint_caller = xcalloc(nh + 1, sizeof(int));
    k.hint_target = xcalloc(nh + 1, sizeof(int));
    for (size_t i = 0; i < nh; i++) {
        k.hint_caller[i] = lookup(b, o->h->edges[i].caller);
        k.hint_target[i] = lookup(b, o->h->edges[i].target);
    }
    /* A `frame` hint that names no function of the binary does nothing:
     * say so once (a typo would otherwise leave the bound silently below
     * what the user declared).  Caller hints may list alternative names
     * (mote.hints: trim_freeze / trim_freeze.part.0), so they stay quiet. */
    if (o->h && !o->h->warned) {
        ((hints *)o->h)->warned = true;
        for (size_t i = 0; i < o->h->nframes; i++)
            if (lookup(b, o->h->frames[i].name) < 0)
                msg_warn("%s:%d: no function %s in %s: frame hint ignored", o->h->path,
                         o->h->frames[i].line, o->h->frames[i].name, b->path);
    }

    /* Every reachable function and its edges, then the components. */
    reach(&k, entry);
    for (size_t i = 0; i < k.norder; i++)
        expand(&k, k.order[i]);
    scc_run(&k, entry);

    w->bound = k.cost[entry];
    w->flags = k.flags[entry];
    /* The shown path: each function's best edge by the bound, inside a
     * recursive group the zero-recursion route; what the hinted
     * recursion adds is recursion_extra. */
    int64_t cum = 0;
    for (int v = entry; v >= 0;) {
        const wedge *bs = k.bst[v] >= 0 ? &k.edges[k.bst[v]] : NULL;
        const frame *f = frame_of(a, v);
        wstep *s = VEC_PUSH(w->path, w->npath, w->cappath);
        memset(s, 0, sizeof *s);
        s->func = v;
        s->frame = f ? f->depth : 8;
        s->charge = (int32_t)(bs ? bs->charge : k.own[v]);
        cum += s->charge;
        s->cum = cum;
        if (bs) {
            s->at = bs->at;
            s->tail = bs->tail;
        }
        if (bs && bs->ext) {
            s = VEC_PUSH(w->path, w->npath, w->cappath);
            memset(s, 0, sizeof *s);
            s->func = -1;
            s->ext = bs->ext;
            s->frame = (int32_t)bs->extcost;
            s->charge = (int32_t)bs->extcost;
            cum += s->charge;
            s->cum = cum;
        }
        v = bs ? bs->to : -1;
        if (w->npath > 2 * n + 2)
            break; /* cannot happen: the shown path is acyclic */
    }
    if (w->bound > cum && !(w->flags & W_CYCLE))
        w->recursion_extra = w->bound - cum;
    free(k.seen);
    free(k.nout);
    free(k.order);
    free(k.own);
    free(k.cost);
    free(k.zcost);
    free(k.bst);
    free(k.flags);
    free(k.edges);
    free(k.hint_caller);
    free(k.hint_target);
}

void worst_free(worst *w)
{
    for (size_t i = 0; i < w->ncycles; i++)
        free(w->cycles[i].funcs);
    free(w->cycles);
    free(w->path);
    free(w->issues);
    memset(w, 0, sizeof *w);
}
