/*
 * costs.c - reading cost tables (see costs.h).  The format is one
 * "NAME BYTES" pair a line, '#' starts a comment, and the four reserves
 * are named @sigframe, @redzone, @lazybind and @runtime, so a table stays
 * greppable and diffable between machines.
 */
#include "costs.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static int parse(costs *c, const char *text, const char *src)
{
    const char *p = text;
    int lineno = 0;
    while (*p) {
        const char *eol = strchr(p, '\n');
        size_t len = eol ? (size_t)(eol - p) : strlen(p);
        char *line = xstrndup(p, len);
        lineno++;
        p += len + (eol ? 1 : 0);
        if (strncmp(line, "# machine:", 10) == 0 && !c->about)
            c->about = xstrdup(line + 10 + strspn(line + 10, " "));
        char *hash = strchr(line, '#');
        if (hash)
            *hash = 0;
        char name[256];
        long long v;
        char extra;
        int n = sscanf(line, "%255s %lld %c", name, &v, &extra);
        free(line);
        if (n <= 0)
            continue;
        if (n != 2 || v < 0 || v > (1 << 30)) {
            msg_error("%s:%d: expected \"NAME BYTES\"", src, lineno);
            return EXIT_INPUT;
        }
        if (strcmp(name, "@sigframe") == 0)
            c->sigframe = (int32_t)v;
        else if (strcmp(name, "@redzone") == 0)
            c->redzone = (int32_t)v;
        else if (strcmp(name, "@lazybind") == 0)
            c->lazybind = (int32_t)v;
        else if (strcmp(name, "@runtime") == 0)
            c->runtime = (int32_t)v;
        else if (name[0] == '@')
            msg_warn("%s:%d: unknown reserve %s ignored", src, lineno, name);
        else {
            size_t i = c->n;
            vec_reserve(&c->bytes, &c->cap, c->n + 1, sizeof *c->bytes);
            c->names = xrealloc(c->names, c->cap * sizeof *c->names);
            c->names[i] = xstrdup(name);
            c->bytes[i] = (int32_t)v;
            c->n++;
        }
    }
    for (size_t i = 0; i < c->n; i++)
        strmap_put(&c->byname, c->names[i], (int)i);
    return 0;
}

int costs_load(costs *c, const char *path)
{
    memset(c, 0, sizeof *c);
    c->redzone = 128;
    if (!path) {
        c->source = xstrdup("built-in");
        return parse(c, mote_stack_default_costs, "built-in table");
    }
    /* The reserves a table leaves out keep the built-in figures (0 would
     * silently drop the signal frame from every recommendation). */
    costs def;
    memset(&def, 0, sizeof def);
    def.redzone = 128;
    if (parse(&def, mote_stack_default_costs, "built-in table") == 0) {
        c->sigframe = def.sigframe;
        c->lazybind = def.lazybind;
        c->runtime = def.runtime;
        c->redzone = def.redzone;
    }
    costs_free(&def);
    FILE *f = open_input(path, "cost table");
    if (!f)
        return EXIT_INPUT;
    size_t cap = 4096, n = 0;
    char *buf = xmalloc(cap);
    size_t got;
    while ((got = fread(buf + n, 1, cap - n - 1, f)) > 0) {
        n += got;
        if (n + 1 == cap)
            buf = xrealloc(buf, cap *= 2);
    }
    fclose(f);
    buf[n] = 0;
    c->source = xstrdup(path);
    int r = parse(c, buf, path);
    free(buf);
    return r;
}

int32_t costs_lib(const costs *c, const char *name)
{
    size_t len = strcspn(name, "@");
    int i = strmap_get(&c->byname, name, len);
    if (i >= 0)
        return c->bytes[i];
    /* __printf_chk -> printf, __memcpy_chk -> memcpy, __isoc99_sscanf ->
     * sscanf: the checking wrappers add a few bytes at most, and the
     * table lists the common ones itself. */
    const char *base = name;
    size_t blen = len;
    if (strncmp(base, "__isoc99_", 9) == 0) {
        base += 9;
        blen -= 9;
    } else if (strncmp(base, "__", 2) == 0 && blen > 6 &&
               strncmp(base + blen - 4, "_chk", 4) == 0) {
        base += 2;
        blen -= 6;
    } else {
        return -1;
    }
    i = strmap_get(&c->byname, base, blen);
    return i >= 0 ? c->bytes[i] : -1;
}

void costs_free(costs *c)
{
    for (size_t i = 0; i < c->n; i++)
        free(c->names[i]);
    free(c->names);
    free(c->bytes);
    free(c->source);
    free(c->about);
    strmap_free(&c->byname);
    memset(c, 0, sizeof *c);
}
