/*
 * output.c - text and JSON reports (see output.h).  Text puts the name of
 * a function last on its line: C++ names are long and would wreck columns.
 */
#include "output.h"

#include "json.h"

#include <stdlib.h>
#include <string.h>

static const char *const flag_names[] = {
    "dynamic", "probe", "leaf",     "redzone", "unknown",
    "switch",  "align", "indirect", "cold",    "gaps",
};

void flags_text(uint32_t flags, char *buf, size_t n)
{
    buf[0] = 0;
    size_t len = 0;
    for (size_t i = 0; i < sizeof flag_names / sizeof *flag_names; i++)
        if (flags & (1u << i))
            len += (size_t)snprintf(buf + len, len < n ? n - len : 0, "%s%s",
                                    len ? "," : "", flag_names[i]);
    if (!len)
        snprintf(buf, n, "-");
}

static void json_flags(jw *w, uint32_t flags)
{
    jw_arr(w, "flags");
    for (size_t i = 0; i < sizeof flag_names / sizeof *flag_names; i++)
        if (flags & (1u << i))
            jw_str(w, NULL, flag_names[i]);
    jw_end_arr(w);
}

static const char *base(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

static void src_text(elfbin *b, uint64_t addr, char *buf, size_t n)
{
    const char *file;
    int line;
    if (elfbin_srcline(b, addr, &file, &line))
        snprintf(buf, n, "%s:%d", base(file), line);
    else
        buf[0] = 0;
}

static void json_src(jw *w, elfbin *b, uint64_t addr)
{
    const char *file;
    int line;
    if (elfbin_srcline(b, addr, &file, &line)) {
        jw_str(w, "file", file);
        jw_int(w, "line", line);
    }
}

static const char *fname(const elfbin *b, int fi)
{
    return fi >= 0 ? b->funcs[fi].name : "?";
}

/* ---- frames ---------------------------------------------------------------- */

typedef struct sortctx {
    const elfbin *b;
    const analyzer *a;
} sortctx;
static sortctx g_sort;

static int by_frame(const void *x, const void *y)
{
    const frame *p = *(frame *const *)x, *q = *(frame *const *)y;
    if (p->depth != q->depth)
        return p->depth > q->depth ? -1 : 1;
    return p->func - q->func;
}

static int by_name(const void *x, const void *y)
{
    const frame *p = *(frame *const *)x, *q = *(frame *const *)y;
    int c = strcmp(g_sort.b->funcs[p->func].name, g_sort.b->funcs[q->func].name);
    return c ? c : p->func - q->func;
}

void print_frames(FILE *out, elfbin *b, analyzer *a, const out_opts *o)
{
    frames_all(a);
    const frame **v = xmalloc(b->nfuncs * sizeof *v);
    size_t n = 0, ncold = 0;
    uint32_t counts[10] = {0};
    for (size_t i = 0; i < b->nfuncs; i++) {
        const frame *f = frame_of(a, (int)i);
        if (!f) {
            ncold++;
            continue;
        }
        v[n++] = f;
        for (int k = 0; k < 10; k++)
            if (f->flags & (1u << k))
                counts[k]++;
    }
    g_sort.b = b;
    g_sort.a = a;
    if (o->sort == SORT_FRAME)
        qsort(v, n, sizeof *v, by_frame);
    else if (o->sort == SORT_NAME)
        qsort(v, n, sizeof *v, by_name);
    size_t show = o->top && o->top < n ? o->top : n;
    if (o->json) {
        jw w;
        jw_init(&w, out);
        jw_obj(&w, NULL);
        jw_str(&w, "binary", b->path);
        jw_str(&w, "symbols", b->symsrc);
        jw_int(&w, "functions", (long long)n);
        jw_int(&w, "cold_parts", (long long)ncold);
        jw_arr(&w, "frames");
        for (size_t i = 0; i < show; i++) {
            const frame *f = v[i];
            const mfunc *m = &b->funcs[f->func];
            jw_obj(&w, NULL);
            jw_str(&w, "name", m->name);
            jw_hex(&w, "addr", m->addr);
            jw_int(&w, "size", (long long)m->size);
            jw_int(&w, "frame", f->frame);
            jw_int(&w, "depth", f->depth);
            jw_int(&w, "redzone", f->redzone);
            if (f->align)
                jw_int(&w, "align", f->align);
            json_flags(&w, f->flags);
            jw_int(&w, "calls", f->ncalls);
            if (f->cold >= 0)
                jw_str(&w, "cold_part", b->funcs[f->cold].name);
            if (f->bad_at)
                jw_hex(&w, "unknown_at", f->bad_at);
            json_src(&w, b, m->addr);
            jw_end_obj(&w);
        }
        jw_end_arr(&w);
        jw_end_obj(&w);
        jw_done(&w);
    } else {
        fprintf(out, "%s: %zu functions (symbols: %s)%s\n", b->path, n,
                b->symsrc ? b->symsrc : "?",
                ncold ? ", .cold parts counted with their functions" : "");
        fprintf(out, "bytes from the caller's %%rsp, return address included; "
                     "depth adds the red zone\n");
        fprintf(out, "%8s %8s  %-22s %-24s %s\n", "frame", "depth", "flags", "source",
                "function");
        for (size_t i = 0; i < show; i++) {
            const frame *f = v[i];
            const mfunc *m = &b->funcs[f->func];
            char fl[128], src[256];
            flags_text(f->flags, fl, sizeof fl);
            src_text(b, m->addr, src, sizeof src);
            fprintf(out, "%8d %8d  %-22s %-24s %s\n", f->frame, f->depth, fl, src,
                    m->name);
        }
        if (show < n)
            fprintf(out, "... %zu more (--top 0 shows all)\n", n - show);
        fprintf(out, "summary: %zu functions", n);
        for (int k = 0; k < 10; k++)
            if (counts[k])
                fprintf(out, ", %u %s", counts[k], flag_names[k]);
        fputc('\n', out);
    }
    free(v);
}

/* ---- worst --------------------------------------------------------------------- */

static void size_text(uint64_t v, char *buf, size_t n)
{
    if (v >= (1u << 20) && v % (1u << 20) == 0)
        snprintf(buf, n, "%llu MiB", (unsigned long long)(v >> 20));
    else if (v >= 1024 && v % 1024 == 0)
        snprintf(buf, n, "%llu KiB", (unsigned long long)(v >> 10));
    else
        snprintf(buf, n, "%llu B", (unsigned long long)v);
}

static const spawn *spawn_of(const worst_report *r, int fi)
{
    for (size_t i = 0; i < r->nspawns; i++)
        if (r->spawns[i].target == fi)
            return &r->spawns[i];
    return NULL;
}

static void print_worst_text(FILE *out, elfbin *b, const worst_report *r, const worst *w)
{
    const mfunc *m = &b->funcs[w->entry];
    char src[256], ss[32];
    src_text(b, m->addr, src, sizeof src);
    fprintf(out, "entry %s%s%s%s\n", m->name, *src ? " (" : "", src, *src ? ")" : "");
    const spawn *sp = spawn_of(r, w->entry);
    if (sp)
        fprintf(out, "  spawned by %s at 0x%llx via %s\n", fname(b, sp->caller),
                (unsigned long long)sp->at, sp->api);
    bool complete = w->flags == 0;
    if (complete)
        fprintf(out, "  bound: %lld bytes (complete%s)\n", (long long)w->bound,
                w->recursion_extra ? ", recursion bounded by the hints" : "");
    else if (w->flags & W_CYCLE)
        fprintf(out, "  bound: UNBOUNDED (recursion); %lld bytes without recursing%s\n",
                (long long)w->bound,
                w->flags & (W_DYNAMIC | W_UNKNOWN) ? ", and unknowns below" : "");
    else
        fprintf(out, "  bound: at least %lld bytes (%s%s%s below)\n", (long long)w->bound,
                w->flags & W_DYNAMIC ? "dynamic frames" : "",
                (w->flags & W_DYNAMIC) && (w->flags & W_UNKNOWN) ? " and " : "",
                w->flags & W_UNKNOWN ? "unresolved calls" : "");
    fprintf(out, "  deepest path (%zu functions reachable):\n", w->nreached);
    fprintf(out, "  %8s %8s %8s  %s\n", "charge", "total", "frame", "function");
    for (size_t i = 0; i < w->npath; i++) {
        const wstep *s = &w->path[i];
        if (s->func < 0) {
            fprintf(out, "  %8d %8lld %8s  %s (library, from the cost table%s)\n",
                    s->charge, (long long)s->cum, "-", s->ext,
                    b->dynamic && !b->bind_now ? ", lazy binding included" : "");
            continue;
        }
        char fsrc[256];
        src_text(b, b->funcs[s->func].addr, fsrc, sizeof fsrc);
        fprintf(out, "  %8d %8lld %8d  %s%s%s%s%s\n", s->charge, (long long)s->cum,
                s->frame, b->funcs[s->func].name, *fsrc ? "  " : "", fsrc,
                i + 1 < w->npath && s->tail ? "  (tail call)" : "", "");
    }
    for (size_t i = 0; i < w->ncycles; i++) {
        const wcycle *c = &w->cycles[i];
        fprintf(out, "  recursion: ");
        for (size_t k = 0; k < c->n; k++)
            fprintf(out, "%s -> ", fname(b, c->funcs[k]));
        fprintf(out, "%s  (%lld bytes per level", fname(b, c->funcs[0]),
                (long long)c->per_level);
        if (c->max_repeat >= 0)
            fprintf(out, "; at most %d more levels by --hints: +%lld", c->max_repeat,
                    (long long)c->max_repeat * c->per_level);
        fprintf(out, ")\n");
    }
    size_t shown = 0;
    for (size_t i = 0; i < w->nissues; i++) {
        const wissue *is = &w->issues[i];
        if (shown++ == 12) {
            fprintf(out, "  ... %zu more unknowns (--json lists all)\n", w->nissues - 12);
            break;
        }
        fprintf(out, "  unknown: %s in %s at 0x%llx%s%s\n", issue_text(is->what),
                fname(b, is->func), (unsigned long long)is->at, is->ext ? ": " : "",
                is->ext ? is->ext : "");
    }
    int64_t total = w->bound + w->runtime + w->signal;
    size_text(w->stack_size, ss, sizeof ss);
    fprintf(out, "  reserves: runtime %lld, signal %lld (frame %d + red zone %d)\n",
            (long long)w->runtime, (long long)w->signal, w->signal ? r->c->sigframe : 0,
            w->signal ? r->c->redzone : 0);
    fprintf(out, "  recommended stack_size: %s (%lld bytes needed%s)\n\n", ss,
            (long long)total, complete ? "" : ", a lower bound");
}

static void print_worst_json(jw *jw_, elfbin *b, const worst_report *r, const worst *w)
{
    const mfunc *m = &b->funcs[w->entry];
    jw_obj(jw_, NULL);
    jw_str(jw_, "name", m->name);
    jw_hex(jw_, "addr", m->addr);
    json_src(jw_, b, m->addr);
    const spawn *sp = spawn_of(r, w->entry);
    if (sp) {
        jw_obj(jw_, "spawned_by");
        jw_str(jw_, "function", fname(b, sp->caller));
        jw_hex(jw_, "at", sp->at);
        jw_str(jw_, "api", sp->api);
        jw_end_obj(jw_);
    }
    jw_int(jw_, "bound", w->bound);
    jw_int(jw_, "recursion_extra", w->recursion_extra);
    jw_bool(jw_, "complete", w->flags == 0);
    jw_bool(jw_, "recursive", (w->flags & W_CYCLE) != 0);
    jw_bool(jw_, "dynamic", (w->flags & W_DYNAMIC) != 0);
    jw_bool(jw_, "unresolved", (w->flags & W_UNKNOWN) != 0);
    jw_int(jw_, "reachable", (long long)w->nreached);
    jw_arr(jw_, "path");
    for (size_t i = 0; i < w->npath; i++) {
        const wstep *s = &w->path[i];
        jw_obj(jw_, NULL);
        jw_str(jw_, "name", s->func >= 0 ? b->funcs[s->func].name : s->ext);
        jw_bool(jw_, "library", s->func < 0);
        jw_int(jw_, "frame", s->frame);
        jw_int(jw_, "charge", s->charge);
        jw_int(jw_, "total", s->cum);
        if (s->func >= 0 && i + 1 < w->npath) {
            jw_hex(jw_, "call_at", s->at);
            jw_bool(jw_, "tail_call", s->tail);
        }
        jw_end_obj(jw_);
    }
    jw_end_arr(jw_);
    jw_arr(jw_, "cycles");
    for (size_t i = 0; i < w->ncycles; i++) {
        jw_obj(jw_, NULL);
        jw_arr(jw_, "functions");
        for (size_t k = 0; k < w->cycles[i].n; k++)
            jw_str(jw_, NULL, fname(b, w->cycles[i].funcs[k]));
        jw_end_arr(jw_);
        jw_int(jw_, "bytes_per_level", w->cycles[i].per_level);
        if (w->cycles[i].max_repeat >= 0)
            jw_int(jw_, "max_repeat", w->cycles[i].max_repeat);
        jw_end_obj(jw_);
    }
    jw_end_arr(jw_);
    jw_arr(jw_, "unknowns");
    for (size_t i = 0; i < w->nissues; i++) {
        const wissue *is = &w->issues[i];
        jw_obj(jw_, NULL);
        jw_str(jw_, "what", issue_text(is->what));
        jw_str(jw_, "in", fname(b, is->func));
        jw_hex(jw_, "at", is->at);
        if (is->ext)
            jw_str(jw_, "callee", is->ext);
        jw_end_obj(jw_);
    }
    jw_end_arr(jw_);
    jw_obj(jw_, "reserves");
    jw_int(jw_, "runtime", w->runtime);
    jw_int(jw_, "signal", w->signal);
    jw_end_obj(jw_);
    jw_int(jw_, "needed", w->bound + w->runtime + w->signal);
    jw_int(jw_, "stack_size", (long long)w->stack_size);
    jw_end_obj(jw_);
}

void print_worst(FILE *out, elfbin *b, analyzer *a, const worst_report *r,
                 const out_opts *o)
{
    (void)a;
    if (o->json) {
        jw w;
        jw_init(&w, out);
        jw_obj(&w, NULL);
        jw_str(&w, "binary", b->path);
        jw_str(&w, "costs", r->c->source);
        jw_bool(&w, "entries_found", r->from_spawns);
        jw_arr(&w, "entries");
        for (size_t i = 0; i < r->n; i++)
            print_worst_json(&w, b, r, &r->w[i]);
        jw_end_arr(&w);
        jw_arr(&w, "unresolved_spawns");
        for (size_t i = 0; i < r->nspawns; i++) {
            const spawn *s = &r->spawns[i];
            if (s->target >= 0)
                continue;
            jw_obj(&w, NULL);
            jw_str(&w, "in", fname(b, s->caller));
            jw_hex(&w, "at", s->at);
            jw_str(&w, "api", s->api);
            if (s->known)
                jw_hex(&w, "rdi", s->arg0);
            jw_end_obj(&w);
        }
        jw_end_arr(&w);
        jw_end_obj(&w);
        jw_done(&w);
        return;
    }
    if (r->from_spawns)
        fprintf(out,
                "%s: %zu task entr%s found from %zu spawn call%s "
                "(mote_go/mote_go_ex/mote_run)\n\n",
                b->path, r->n, r->n == 1 ? "y" : "ies", r->nspawns,
                r->nspawns == 1 ? "" : "s");
    for (size_t i = 0; i < r->n; i++)
        print_worst_text(out, b, r, &r->w[i]);
    for (size_t i = 0; i < r->nspawns; i++) {
        const spawn *s = &r->spawns[i];
        if (s->target >= 0)
            continue;
        if (s->known)
            fprintf(out, "spawn in %s at 0x%llx (%s): %%rdi = 0x%llx is no function\n",
                    fname(b, s->caller), (unsigned long long)s->at, s->api,
                    (unsigned long long)s->arg0);
        else
            fprintf(out,
                    "spawn in %s at 0x%llx (%s): the function is not a constant "
                    "there; name it with --entry\n",
                    fname(b, s->caller), (unsigned long long)s->at, s->api);
    }
}

/* ---- traces ---------------------------------------------------------------------- */

typedef struct tsort {
    const tr_stack *s;
} tsort;

static int by_depth(const void *x, const void *y)
{
    const tr_stack *p = *(const tr_stack *const *)x, *q = *(const tr_stack *const *)y;
    if (p->depth != q->depth)
        return p->depth > q->depth ? -1 : 1;
    return p->weight > q->weight ? -1 : p->weight < q->weight;
}

void print_traces(FILE *out, elfbin *b, const traces *t, const out_opts *o)
{
    const tr_stack **v = xmalloc((t->n ? t->n : 1) * sizeof *v);
    for (size_t i = 0; i < t->n; i++)
        v[i] = &t->st[i];
    qsort(v, t->n, sizeof *v, by_depth);
    size_t top = o->top ? o->top : 10;
    /* Depth percentiles, weighted by samples. */
    int64_t pct[3] = {0, 0, 0};
    const double at[3] = {0.5, 0.99, 1.0};
    for (int k = 0; k < 3; k++) {
        uint64_t need = (uint64_t)((1.0 - at[k]) * (double)t->weight), acc = 0;
        for (size_t i = 0; i < t->n; i++) {
            acc += v[i]->weight;
            if (acc > need) {
                pct[k] = v[i]->depth;
                break;
            }
        }
    }
    uint64_t total_bytes = 0;
    for (size_t i = 0; i < t->nfn; i++)
        total_bytes += t->fn[i].byte_samples;
    if (o->json) {
        jw w;
        jw_init(&w, out);
        jw_obj(&w, NULL);
        jw_str(&w, "binary", b->path);
        jw_str(&w, "format", t->format == TR_PERF ? "perf" : "folded");
        jw_int(&w, "samples", (long long)t->weight);
        jw_int(&w, "stacks", (long long)t->n);
        jw_int(&w, "max_depth", t->n ? v[0]->depth : 0);
        jw_int(&w, "p99_depth", pct[1]);
        jw_int(&w, "median_depth", pct[0]);
        jw_int(&w, "unknown_library_frames", (long long)t->foreign_unknown);
        jw_arr(&w, "deepest");
        for (size_t i = 0; i < t->n && i < top; i++) {
            jw_obj(&w, NULL);
            jw_int(&w, "depth", v[i]->depth);
            jw_int(&w, "samples", (long long)v[i]->weight);
            jw_bool(&w, "partial", v[i]->partial);
            jw_arr(&w, "frames");
            for (size_t k = 0; k < v[i]->n; k++) {
                jw_obj(&w, NULL);
                jw_str(&w, "name", v[i]->f[k].name);
                jw_int(&w, "charge", v[i]->f[k].charge);
                jw_bool(&w, "in_binary", v[i]->f[k].func >= 0);
                jw_end_obj(&w);
            }
            jw_end_arr(&w);
            jw_end_obj(&w);
        }
        jw_end_arr(&w);
        jw_arr(&w, "functions");
        for (size_t i = 0; i < t->nfn && i < (o->top ? o->top : 20); i++) {
            const tr_func *f = &t->fn[i];
            jw_obj(&w, NULL);
            jw_str(&w, "name", b->funcs[f->func].name);
            jw_int(&w, "frame", f->frame);
            jw_int(&w, "samples", (long long)f->samples);
            jw_int(&w, "byte_samples", (long long)f->byte_samples);
            jw_int(&w, "deepest", f->deepest);
            jw_end_obj(&w);
        }
        jw_end_arr(&w);
        jw_end_obj(&w);
        jw_done(&w);
        free(v);
        return;
    }
    fprintf(out, "%s: %llu samples, %zu distinct stacks (%s)\n", b->path,
            (unsigned long long)t->weight, t->n,
            t->format == TR_PERF ? "perf script" : "folded");
    fprintf(out, "stack depth: max %lld, p99 %lld, median %lld bytes%s\n",
            (long long)(t->n ? v[0]->depth : 0), (long long)pct[1], (long long)pct[0],
            t->foreign_unknown ? " (some library frames not in the cost table)" : "");
    fprintf(out, "\ndeepest stacks:\n");
    for (size_t i = 0; i < t->n && i < top; i++) {
        fprintf(out, "  %6lld bytes  %6llu samples%s: ", (long long)v[i]->depth,
                (unsigned long long)v[i]->weight, v[i]->partial ? " (partial)" : "");
        for (size_t k = 0; k < v[i]->n; k++)
            fprintf(out, "%s%s(%d)", k ? " > " : "", v[i]->f[k].name, v[i]->f[k].charge);
        fputc('\n', out);
    }
    fprintf(out, "\nframes that cost the most (frame bytes x samples on the stack):\n");
    fprintf(out, "  %6s %8s %8s %8s  %s\n", "share", "frame", "samples", "deepest",
            "function");
    for (size_t i = 0; i < t->nfn && i < (o->top ? o->top : 20); i++) {
        const tr_func *f = &t->fn[i];
        fprintf(out, "  %5.1f%% %8d %8llu %8lld  %s\n",
                total_bytes ? 100.0 * (double)f->byte_samples / (double)total_bytes : 0.0,
                f->frame, (unsigned long long)f->samples, (long long)f->deepest,
                b->funcs[f->func].name);
    }
    free(v);
}

/* ---- check --------------------------------------------------------------------------- */

static const char *verdict_text(int v)
{
    switch (v) {
    case CK_OK: return "ok";
    case CK_VIOLATION: return "VIOLATION";
    case CK_EXPLAINED: return "explained";
    case CK_OVERSIZED: return "oversized";
    case CK_UNDERSIZED: return "undersized";
    case CK_SKIPPED: return "skipped";
    default: return "?";
    }
}

void print_check(FILE *out, const check_result *r, const costs *c, const out_opts *o)
{
    (void)c;
    if (o->json) {
        jw w;
        jw_init(&w, out);
        jw_obj(&w, NULL);
        jw_str(&w, "exe", r->exe);
        jw_int(&w, "violations", r->violations);
        jw_int(&w, "warnings", r->warnings);
        jw_arr(&w, "entries");
        for (size_t i = 0; i < r->n; i++) {
            const check_row *row = &r->rows[i];
            jw_obj(&w, NULL);
            jw_str(&w, "name", row->name);
            jw_str(&w, "object", row->object);
            jw_hex(&w, "offset", row->offset);
            jw_int(&w, "tasks", row->tasks);
            jw_int(&w, "sampled", row->sampled);
            jw_int(&w, "max_depth", row->max_depth);
            jw_int(&w, "stack_size", row->stack_size);
            if (row->analysed) {
                jw_str(&w, "function", row->eb->funcs[row->func].name);
                jw_int(&w, "bound", row->w.bound);
                jw_bool(&w, "complete", row->w.flags == 0);
                jw_int(&w, "recommended", (long long)row->recommended);
            }
            jw_str(&w, "verdict", verdict_text(row->verdict));
            jw_str(&w, "size_verdict", verdict_text(row->size_verdict));
            if (row->why)
                jw_str(&w, "why", row->why);
            jw_end_obj(&w);
        }
        jw_end_arr(&w);
        jw_end_obj(&w);
        jw_done(&w);
        return;
    }
    fprintf(out, "%-24s %8s %10s %10s %10s %10s  %s\n", "entry", "tasks", "measured",
            "bound", "stack_size", "recommend", "verdict");
    for (size_t i = 0; i < r->n; i++) {
        const check_row *row = &r->rows[i];
        char bound[32], rec[32], ss[32];
        if (row->analysed) {
            snprintf(bound, sizeof bound, "%s%lld", row->w.flags ? ">=" : "",
                     (long long)row->w.bound);
            size_text(row->recommended, rec, sizeof rec);
        } else {
            strcpy(bound, "-");
            strcpy(rec, "-");
        }
        size_text((uint64_t)row->stack_size, ss, sizeof ss);
        fprintf(out, "%-24s %8lld %10lld %10s %10s %10s  %s%s%s\n", row->name, row->tasks,
                row->max_depth, bound, ss, rec, verdict_text(row->verdict),
                row->size_verdict ? ", " : "",
                row->size_verdict ? verdict_text(row->size_verdict) : "");
    }
    for (size_t i = 0; i < r->n; i++) {
        const check_row *row = &r->rows[i];
        char rec[32], ss[32];
        size_text(row->recommended, rec, sizeof rec);
        size_text((uint64_t)row->stack_size, ss, sizeof ss);
        if (row->verdict == CK_VIOLATION)
            fprintf(out,
                    "error: %s went %lld bytes deep, deeper than its complete static "
                    "bound of %lld: an analysis bug, please report it\n",
                    row->name, row->max_depth, (long long)row->w.bound);
        else if (row->verdict == CK_EXPLAINED)
            fprintf(out,
                    "note: %s went %lld bytes deep, beyond the %lld bytes the static "
                    "analysis could bound; its unknowns (worst --entry %s) explain it\n",
                    row->name, row->max_depth, (long long)row->w.bound, row->name);
        else if (row->verdict == CK_SKIPPED)
            fprintf(out, "note: %s skipped: %s\n", row->name, row->why ? row->why : "?");
        if (row->size_verdict == CK_OVERSIZED)
            fprintf(out,
                    "warning: %s reserves %s per task, more than 4x both its measured "
                    "depth and its bound: stack_size %s is enough\n",
                    row->name, ss, rec);
        else if (row->size_verdict == CK_UNDERSIZED)
            fprintf(out,
                    "warning: %s reserves %s per task, less than its bound plus "
                    "reserves: it may overflow; use %s\n",
                    row->name, ss, rec);
    }
    fprintf(out, "%d violation%s, %d warning%s\n", r->violations,
            r->violations == 1 ? "" : "s", r->warnings, r->warnings == 1 ? "" : "s");
}
