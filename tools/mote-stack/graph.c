/*
 * graph.c - call graph, worst path, spawned entries and hints (graph.h).
 *
 * The deepest path is a longest-path search over the call graph by an
 * iterative depth-first walk (a recursive one could itself overflow on the
 * call chains of a large C++ binary), memoised per function.  Recursion
 * shows up as an edge back to a function still on the walk's stack: that
 * edge is recorded as a cycle (its cost per level is the sum of the charges
 * around it) and otherwise ignored, so the bound reported beside "unbounded"
 * is the deepest path that recurses zero times.  For a recursive group
 * entered at different functions the memoised value is the one of the first
 * way in; that bound is a guide, the cycle is the finding.
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
    FILE *f = fopen(path, "r");
    if (!f) {
        msg_error("cannot open hints file %s: %s", path, strerror(errno));
        return EXIT_INPUT;
    }
    char line[4096];
    int lineno = 0;
    while (fgets(line, sizeof line, f)) {
        lineno++;
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

typedef struct best {
    int32_t charge;
    int to;          /* next function, -1 */
    const char *ext; /* or a library function */
    int64_t extcost;
    uint64_t at;
    bool tail;
} best;

typedef struct dfs {
    int v;
    uint32_t k;     /* next call site */
    size_t h;       /* next hint edge for call site k-1 */
    int32_t charge; /* charge of the edge being followed */
    uint64_t at;
    bool tail;
} dfs;

typedef struct walk {
    analyzer *a;
    elfbin *b;
    const graph_opts *o;
    worst *w;
    uint8_t *state; /* 0 new, 1 on stack, 2 done */
    int64_t *cost;
    uint32_t *flags;
    best *bst;
    dfs *stack;
    size_t nstack, capstack;
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
    /* abort, exit...: the process ends there; their own depth is not
     * the task's concern. */
    if (c < 0 && noreturn_name(name))
        c = 0;
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

/* First visit of v: its own depth and its issues. */
static void enter(walk *k, int v)
{
    const frame *f = frame_of(k->a, v);
    k->state[v] = 1;
    k->w->nreached++;
    int32_t hint = frame_hint(k, v);
    k->cost[v] = f ? (hint > f->depth ? hint : f->depth) : 8;
    k->bst[v].to = -1;
    k->bst[v].ext = NULL;
    k->bst[v].charge = (int32_t)k->cost[v];
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
    dfs *d = VEC_PUSH(k->stack, k->nstack, k->capstack);
    memset(d, 0, sizeof *d);
    d->v = v;
}

static void relax(walk *k, int v, int32_t charge, int to, const char *ext,
                  int64_t extcost, uint64_t at, bool tail)
{
    int64_t c = charge + (to >= 0 ? k->cost[to] : extcost);
    if (to >= 0)
        k->flags[v] |= k->flags[to];
    if (c > k->cost[v]) {
        k->cost[v] = c;
        best *b = &k->bst[v];
        b->charge = charge;
        b->to = to;
        b->ext = ext;
        b->extcost = extcost;
        b->at = at;
        b->tail = tail;
    }
}

static void cycle_found(walk *k, int to, int32_t charge)
{
    size_t pos = k->nstack;
    while (pos > 0 && k->stack[pos - 1].v != to)
        pos--;
    if (pos == 0)
        return;
    pos--;
    k->flags[k->stack[k->nstack - 1].v] |= W_CYCLE;
    k->w->nbackedges++;
    if (k->w->ncycles >= 16)
        return;
    wcycle *c = VEC_PUSH(k->w->cycles, k->w->ncycles, k->w->capcycles);
    c->n = k->nstack - pos;
    c->funcs = xmalloc(c->n * sizeof *c->funcs);
    c->per_level = charge;
    c->max_repeat = -1;
    for (size_t i = pos; i < k->nstack; i++) {
        c->funcs[i - pos] = k->stack[i].v;
        if (i + 1 < k->nstack)
            c->per_level += k->stack[i].charge;
    }
}

/* Follows one edge from the top frame: to a function (maybe pushing it),
 * or to a library function.  Returns true when it pushed. */
static bool edge_to(walk *k, int to, int32_t charge, uint64_t at, bool tail)
{
    dfs *d = &k->stack[k->nstack - 1];
    int v = d->v;
    if (to < 0)
        return false;
    if (k->state[to] == 1) {
        cycle_found(k, to, charge);
        return false;
    }
    if (k->state[to] == 2) {
        relax(k, v, charge, to, NULL, 0, at, tail);
        return false;
    }
    d->charge = charge;
    d->at = at;
    d->tail = tail;
    enter(k, to);
    return true;
}

static bool edge_named(walk *k, const char *name, int32_t charge, uint64_t at, bool tail)
{
    int v = k->stack[k->nstack - 1].v;
    int fi = lookup(k->b, name);
    if (fi >= 0)
        return edge_to(k, fi, charge, at, tail);
    bool unknown;
    int64_t c = ext_cost(k, name, v, at, &unknown);
    if (unknown)
        k->flags[v] |= W_UNKNOWN;
    relax(k, v, charge, -1, name, c, at, tail);
    return false;
}

/* Advances the top frame by one edge.  False when it has none left. */
static bool step(walk *k)
{
    dfs *d = &k->stack[k->nstack - 1];
    int v = d->v;
    const frame *f = frame_of(k->a, v);
    if (!f)
        return false;
    /* Hint edges of the previous (indirect) call site first. */
    if (d->h) {
        const callsite *c = frame_calls(k->a, f) + (d->k - 1);
        bool jump = c->kind != CS_ICALL;
        int32_t depth = c->depth >= 0 ? c->depth : f->frame;
        int32_t charge = jump ? (depth > 8 ? depth - 8 : 0) : depth;
        const hints *h = k->o->h;
        while (d->h <= h->nedges) {
            size_t i = d->h++ - 1;
            if (k->hint_caller[i] != v)
                continue;
            if (k->hint_target[i] >= 0) {
                if (edge_to(k, k->hint_target[i], charge, c->at, jump))
                    return true;
            } else if (edge_named(k, h->edges[i].target, charge, c->at, jump)) {
                return true;
            }
            d = &k->stack[k->nstack - 1];
        }
        d->h = 0;
        return true;
    }
    if (d->k >= f->ncalls)
        return false;
    const callsite *c = frame_calls(k->a, f) + d->k++;
    bool jump = c->kind == CS_TAIL || c->kind == CS_IJMP || c->kind == CS_BADJMP;
    int32_t depth = c->depth >= 0 ? c->depth : f->frame;
    int32_t charge = jump ? (depth > 8 ? depth - 8 : 0) : depth;
    switch (c->kind) {
    case CS_CALL:
    case CS_TAIL: {
        if (c->ext)
            return edge_named(k, c->ext, charge, c->at, jump) || true;
        int to = elfbin_func_start(k->b, c->target);
        if (to >= 0 && !(k->b->funcs[to].flags & FN_COLD)) {
            edge_to(k, to, charge, c->at, jump);
            return true;
        }
        k->flags[v] |= W_UNKNOWN;
        add_issue(k, WI_MIDDLE, v, c->at, NULL);
        return true;
    }
    default: {
        /* Indirect: the hints name the targets. */
        bool any = false;
        const hints *h = k->o->h;
        for (size_t i = 0; h && i < h->nedges; i++)
            if (k->hint_caller[i] == v)
                any = true;
        if (any) {
            d->h = 1;
            return true;
        }
        k->flags[v] |= W_UNKNOWN;
        add_issue(k,
                  c->kind == CS_ICALL  ? WI_ICALL
                  : c->kind == CS_IJMP ? WI_IJMP
                                       : WI_BADJMP,
                  v, c->at, NULL);
        return true;
    }
    }
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
    k.state = xcalloc(n, 1);
    k.cost = xcalloc(n, sizeof *k.cost);
    k.flags = xcalloc(n, sizeof *k.flags);
    k.bst = xcalloc(n, sizeof *k.bst);
    size_t nh = o->h ? o->h->nedges : 0;
    k.hint_caller = xcalloc(nh + 1, sizeof(int));
    k.hint_target = xcalloc(nh + 1, sizeof(int));
    for (size_t i = 0; i < nh; i++) {
        k.hint_caller[i] = lookup(b, o->h->edges[i].caller);
        k.hint_target[i] = lookup(b, o->h->edges[i].target);
    }

    enter(&k, entry);
    while (k.nstack) {
        if (step(&k))
            continue;
        /* v is done: hand its cost to the frame below. */
        int v = k.stack[--k.nstack].v;
        k.state[v] = 2;
        if (k.nstack) {
            dfs *p = &k.stack[k.nstack - 1];
            relax(&k, p->v, p->charge, v, NULL, 0, p->at, p->tail);
        }
    }

    w->bound = k.cost[entry];
    w->flags = k.flags[entry];
    /* Recursion hints: a cycle repeated N more times adds N levels to the
     * deepest path, wherever on it the cycle sits. */
    if (w->nbackedges) {
        size_t bounded = 0;
        for (size_t i = 0; i < w->ncycles; i++) {
            wcycle *c = &w->cycles[i];
            for (size_t r = 0; o->h && r < o->h->nrecursions && c->max_repeat < 0; r++)
                for (size_t j = 0; j < c->n; j++)
                    if (lookup(b, o->h->recursions[r].name) == c->funcs[j]) {
                        c->max_repeat = o->h->recursions[r].bytes;
                        break;
                    }
            if (c->max_repeat >= 0) {
                bounded++;
                w->recursion_extra += c->max_repeat * c->per_level;
            }
        }
        w->bound += w->recursion_extra;
        if (bounded == w->nbackedges)
            w->flags &= ~(uint32_t)W_CYCLE;
    }
    int64_t cum = 0;
    for (int v = entry; v >= 0;) {
        const best *bs = &k.bst[v];
        const frame *f = frame_of(a, v);
        wstep *s = VEC_PUSH(w->path, w->npath, w->cappath);
        memset(s, 0, sizeof *s);
        s->func = v;
        s->frame = f ? f->depth : 8;
        s->charge = bs->to >= 0 || bs->ext ? bs->charge : (int32_t)k.cost[v];
        cum += s->charge;
        s->cum = cum;
        s->at = bs->at;
        s->tail = bs->tail;
        if (bs->ext) {
            s = VEC_PUSH(w->path, w->npath, w->cappath);
            memset(s, 0, sizeof *s);
            s->func = -1;
            s->ext = bs->ext;
            s->frame = (int32_t)bs->extcost;
            s->charge = (int32_t)bs->extcost;
            cum += s->charge;
            s->cum = cum;
        }
        v = bs->to;
        if (w->npath > n + 1)
            break; /* cannot happen: best edges only point at finished nodes */
    }
    free(k.state);
    free(k.cost);
    free(k.flags);
    free(k.bst);
    free(k.stack);
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
