/*
 * traces.c - reading perf script and folded stacks, charging them (see
 * traces.h).
 *
 * perf script's default output is a header line per sample, then one line
 * per frame, innermost first: "<address> <symbol>+0x<offset> (<object>)",
 * then a blank line.  The offset of a caller frame is its return address,
 * which names the exact call site, so callers are charged their depth at
 * that call rather than their largest frame.  Folded stacks ("a;b;c 42",
 * outermost first, as flame graph tools write them) carry names only and
 * are charged whole frames.  Identical stacks are merged.
 */
#include "traces.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

typedef struct agg {
    strmap idx;
    char **keys;
    size_t nkeys, capkeys;
} agg;

static char *rtrim(char *s)
{
    size_t n = strlen(s);
    while (n && isspace((unsigned char)s[n - 1]))
        s[--n] = 0;
    return s;
}

/* Sample counts come from the input: sums saturate instead of wrapping. */
static uint64_t sat_add(uint64_t x, uint64_t y) { return x + y < x ? UINT64_MAX : x + y; }
static uint64_t sat_mul(uint64_t x, uint64_t y)
{
    return y && x > UINT64_MAX / y ? UINT64_MAX : x * y;
}

static void add_stack(traces *t, agg *g, tr_frame *f, size_t n, uint64_t weight)
{
    if (!n)
        return;
    /* Merge identical stacks: the key is every name+offset joined. */
    size_t len = 1;
    for (size_t i = 0; i < n; i++)
        len += strlen(f[i].name) + 24;
    char *key = xmalloc(len), *p = key;
    for (size_t i = 0; i < n; i++)
        p += sprintf(p, "%s+%llx;", f[i].name,
                     f[i].has_off ? (unsigned long long)f[i].off : ~0ull);
    int k = strmap_get(&g->idx, key, strlen(key));
    if (k >= 0) {
        t->st[k].weight = sat_add(t->st[k].weight, weight);
        t->weight = sat_add(t->weight, weight);
        for (size_t i = 0; i < n; i++)
            free(f[i].name);
        free(f);
        free(key);
        return;
    }
    tr_stack *s = VEC_PUSH(t->st, t->n, t->cap);
    memset(s, 0, sizeof *s);
    s->f = f;
    s->n = n;
    s->weight = weight;
    t->weight = sat_add(t->weight, weight);
    *VEC_PUSH(g->keys, g->nkeys, g->capkeys) = key;
    strmap_put(&g->idx, key, (int)(t->n - 1));
}

/* "name+0x1d" -> name and offset. */
static void split_off(tr_frame *f, const char *sym, size_t len)
{
    const char *plus = NULL;
    for (size_t i = len; i-- > 0;)
        if (sym[i] == '+') {
            plus = sym + i;
            break;
        }
    if (plus && plus[1] == '0' && plus[2] == 'x') {
        f->name = xstrndup(sym, (size_t)(plus - sym));
        f->off = strtoull(plus + 3, NULL, 16);
        f->has_off = true;
    } else {
        f->name = xstrndup(sym, len);
    }
}

static bool kernel_object(const char *obj)
{
    return strstr(obj, "kernel.kallsyms") != NULL;
}

static int read_perf(traces *t, agg *g, FILE *in)
{
    char *line = NULL;
    size_t cap = 0;
    tr_frame *f = NULL;
    size_t n = 0, fcap = 0;
    bool in_sample = false;
    while (getline(&line, &cap, in) >= 0) {
        rtrim(line);
        if (!*line || !isspace((unsigned char)line[0])) {
            /* A blank line or the next sample's header ends a sample. */
            if (n) {
                for (size_t i = 0; i < n / 2; i++) {
                    tr_frame x = f[i];
                    f[i] = f[n - 1 - i];
                    f[n - 1 - i] = x;
                }
                add_stack(t, g, f, n, 1);
                f = NULL;
                n = fcap = 0;
            }
            in_sample = *line != 0;
            continue;
        }
        if (!in_sample)
            continue;
        char *s = line + strspn(line, " \t");
        char *sp = strchr(s, ' ');
        if (!sp)
            continue;
        char *sym = sp + 1;
        char *obj = strrchr(sym, '(');
        size_t slen = obj ? (size_t)(obj - sym) : strlen(sym);
        while (slen && sym[slen - 1] == ' ')
            slen--;
        if (obj && kernel_object(obj))
            continue;
        tr_frame *fr = VEC_PUSH(f, n, fcap);
        memset(fr, 0, sizeof *fr);
        fr->func = -1;
        split_off(fr, sym, slen);
    }
    if (n) {
        for (size_t i = 0; i < n / 2; i++) {
            tr_frame x = f[i];
            f[i] = f[n - 1 - i];
            f[n - 1 - i] = x;
        }
        add_stack(t, g, f, n, 1);
    } else {
        free(f);
    }
    free(line);
    return 0;
}

static int read_folded(traces *t, agg *g, FILE *in, const char *name)
{
    char *line = NULL;
    size_t cap = 0;
    int lineno = 0;
    while (getline(&line, &cap, in) >= 0) {
        lineno++;
        rtrim(line);
        if (!*line || line[0] == '#')
            continue;
        char *sp = strrchr(line, ' ');
        char *end;
        unsigned long long w = sp ? strtoull(sp + 1, &end, 10) : 0;
        if (!sp || *end || end == sp + 1 || sp[1] < '0' || sp[1] > '9') {
            msg_error("%s:%d: expected folded stacks \"a;b;c COUNT\"", name, lineno);
            free(line);
            return EXIT_INPUT;
        }
        /* 2^53: exact as a double (percentiles) and in JSON. */
        if (w > (1ull << 53)) {
            msg_error("%s:%d: sample count %s is out of range (at most 2^53)", name,
                      lineno, sp + 1);
            free(line);
            return EXIT_INPUT;
        }
        *sp = 0;
        tr_frame *f = NULL;
        size_t n = 0, fcap = 0;
        for (char *tok = strtok(line, ";"); tok; tok = strtok(NULL, ";")) {
            size_t len = strlen(tok);
            if (len > 4 && strcmp(tok + len - 4, "_[k]") == 0)
                continue; /* kernel frame */
            if (len > 4 && tok[len - 4] == '_' && tok[len - 3] == '[' &&
                tok[len - 1] == ']')
                len -= 4; /* perf's _[j] / _[i] annotations */
            tr_frame *fr = VEC_PUSH(f, n, fcap);
            memset(fr, 0, sizeof *fr);
            fr->func = -1;
            fr->name = xstrndup(tok, len);
        }
        add_stack(t, g, f, n, w);
    }
    free(line);
    return 0;
}

int traces_read(traces *t, FILE *in, const char *name, int format)
{
    memset(t, 0, sizeof *t);
    /* Sniff: perf script frame lines start with white space and a hex
     * address; folded lines end in a count. */
    if (format == TR_AUTO) {
        int c = fgetc(in);
        while (c == '\n')
            c = fgetc(in);
        if (c == EOF) {
            msg_error("%s: no stack traces in the input", name);
            return EXIT_INPUT;
        }
        char first[4096];
        first[0] = (char)c;
        if (!fgets(first + 1, sizeof first - 1, in))
            first[1] = 0;
        /* Put the line back by reading the rest from a combined stream. */
        size_t flen = strlen(first);
        char *rest = NULL;
        size_t rcap = 0, rlen = 0;
        char buf[65536];
        size_t got;
        while ((got = fread(buf, 1, sizeof buf, in)) > 0) {
            vec_reserve(&rest, &rcap, rlen + got + 1, 1);
            memcpy(rest + rlen, buf, got);
            rlen += got;
        }
        char *all = xmalloc(flen + rlen + 1);
        memcpy(all, first, flen);
        if (rlen)
            memcpy(all + flen, rest, rlen);
        all[flen + rlen] = 0;
        free(rest);
        /* The second line decides: a perf frame line starts with space. */
        const char *nl = strchr(all, '\n');
        bool perf = nl && (nl[1] == ' ' || nl[1] == '\t');
        format = perf ? TR_PERF : TR_FOLDED;
        FILE *m = fmemopen(all, flen + rlen, "r");
        if (!m) {
            free(all);
            msg_error("%s: cannot buffer the input", name);
            return EXIT_INPUT;
        }
        int r = traces_read(t, m, name, format);
        fclose(m);
        free(all);
        return r;
    }
    agg g;
    memset(&g, 0, sizeof g);
    t->format = format;
    int r = format == TR_PERF ? read_perf(t, &g, in) : read_folded(t, &g, in, name);
    for (size_t i = 0; i < g.nkeys; i++)
        free(g.keys[i]);
    free(g.keys);
    strmap_free(&g.idx);
    if (!r && !t->n) {
        msg_error("%s: no stack traces in the input", name);
        return EXIT_INPUT;
    }
    return r;
}

static int32_t depth_at_return(analyzer *a, const frame *f, uint64_t ret)
{
    const callsite *cs = frame_calls(a, f);
    for (uint32_t k = 0; k < f->ncalls; k++)
        if (cs[k].next == ret && cs[k].depth >= 0)
            return cs[k].depth;
    return -1;
}

static int cmp_fn(const void *x, const void *y)
{
    const tr_func *a = x, *b = y;
    if (a->byte_samples != b->byte_samples)
        return a->byte_samples > b->byte_samples ? -1 : 1;
    return a->func - b->func;
}

void traces_charge(traces *t, analyzer *a, elfbin *b, const costs *c)
{
    int *slot = xmalloc(b->nfuncs * sizeof *slot);
    memset(slot, 0xff, b->nfuncs * sizeof *slot);
    size_t capfn = 0;
    uint32_t *seen = xcalloc(b->nfuncs, sizeof *seen);
    for (size_t si = 0; si < t->n; si++) {
        tr_stack *s = &t->st[si];
        int64_t depth = 0;
        bool in_lib = false;
        for (size_t i = 0; i < s->n; i++) {
            tr_frame *fr = &s->f[i];
            fr->func = elfbin_func_named(b, fr->name, strlen(fr->name));
            const frame *f = fr->func >= 0 ? frame_of(a, fr->func) : NULL;
            if (!f) {
                /* Another object: its table cost covers it and the frames
                 * it calls, until the stack comes back (a callback). */
                if (!in_lib) {
                    int32_t lc = costs_lib(c, fr->name);
                    if (lc < 0) {
                        t->foreign_unknown++;
                        s->partial = true;
                        lc = 0;
                    }
                    fr->charge = lc;
                }
                in_lib = true;
                depth += fr->charge;
                continue;
            }
            in_lib = false;
            int32_t ch = -1;
            if (i + 1 == s->n)
                ch = f->depth;
            else if (fr->has_off)
                ch = depth_at_return(a, f, b->funcs[fr->func].addr + fr->off);
            if (ch < 0)
                ch = f->frame;
            fr->charge = ch;
            depth += ch;
        }
        s->depth = depth;
        for (size_t i = 0; i < s->n; i++) {
            const tr_frame *fr = &s->f[i];
            if (fr->func < 0)
                continue;
            int k = slot[fr->func];
            if (k < 0) {
                tr_func *tf = VEC_PUSH(t->fn, t->nfn, capfn);
                memset(tf, 0, sizeof *tf);
                tf->func = fr->func;
                const frame *f = frame_of(a, fr->func);
                tf->frame = f ? f->frame : 0;
                k = slot[fr->func] = (int)(t->nfn - 1);
            }
            tr_func *tf = &t->fn[k];
            if (seen[fr->func] != si + 1) {
                seen[fr->func] = (uint32_t)(si + 1);
                tf->samples = sat_add(tf->samples, s->weight);
                if (s->depth > tf->deepest)
                    tf->deepest = s->depth;
            }
            tf->byte_samples =
                sat_add(tf->byte_samples, sat_mul((uint64_t)fr->charge, s->weight));
        }
    }
    if (t->nfn)
        qsort(t->fn, t->nfn, sizeof *t->fn, cmp_fn);
    free(slot);
    free(seen);
}

void traces_free(traces *t)
{
    for (size_t i = 0; i < t->n; i++) {
        for (size_t k = 0; k < t->st[i].n; k++)
            free(t->st[i].f[k].name);
        free(t->st[i].f);
    }
    free(t->st);
    free(t->fn);
    memset(t, 0, sizeof *t);
}
