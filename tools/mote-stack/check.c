/*
 * check.c - measured versus static stack depth (see check.h).
 *
 * The report's offsets are st_values in the ELF that holds the entry, so an
 * entry is found by address first and by name only when the address names
 * no function (an older build of the binary, say), which is reported.
 * Entries of other objects (a task entry inside a shared library) are
 * analysed by opening that object; when it cannot be opened the entry is
 * skipped with the reason.
 */
#include "check.h"

#include "json.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

typedef struct check_other {
    char *path;
    elfbin b;
    analyzer *a;
    bool ok;
} other;

static char *slurp(const char *path, size_t *len)
{
    FILE *f = strcmp(path, "-") == 0 ? stdin : open_input(path, "report");
    if (!f)
        return NULL;
    size_t cap = 4096, n = 0, got;
    char *buf = xmalloc(cap);
    while ((got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap)
            buf = xrealloc(buf, cap *= 2);
    }
    if (f != stdin)
        fclose(f);
    *len = n;
    return buf;
}

static bool same_file(const char *x, const char *y)
{
    char rx[PATH_MAX], ry[PATH_MAX];
    if (!realpath(x, rx) || !realpath(y, ry))
        return strcmp(x, y) == 0;
    return strcmp(rx, ry) == 0;
}

static long long num(const jv *v, long long dflt)
{
    return v && v->type == JV_NUM ? (long long)v->num : dflt;
}

/* A count or byte figure of the report: absent, or a whole number in
 * [0, max] (a double outside long long's range is undefined to convert). */
static bool num_ok(const jv *v, double max)
{
    return !v || (v->type == JV_NUM && v->num >= 0 && v->num <= max &&
                  v->num == (long long)v->num);
}

static const char *str(const jv *v) { return v && v->type == JV_STR ? v->str : NULL; }

int check_run(check_result *r, elfbin *b, analyzer *a, const char *report,
              const graph_opts *o)
{
    memset(r, 0, sizeof *r);
    size_t len;
    char *text = slurp(report, &len);
    if (!text)
        return EXIT_INPUT;
    char err[256];
    jv *root = jv_parse(text, len, err, sizeof err);
    free(text);
    if (!root) {
        msg_error("%s: not JSON: %s", report, err);
        return EXIT_INPUT;
    }
    const jv *ver = jv_get(root, "mote_stack_report");
    const jv *entries = jv_get(root, "entries");
    if (!ver || ver->type != JV_NUM || !entries || entries->type != JV_ARR) {
        msg_error("%s: not a mote_stack_report (needs \"mote_stack_report\":1 and "
                  "an \"entries\" array)",
                  report);
        jv_free(root);
        return EXIT_INPUT;
    }
    if (ver->num != 1)
        msg_warn("%s: report version %g; this mote-stack reads version 1", report,
                 ver->num);
    r->exe = str(jv_get(root, "exe")) ? xstrdup(str(jv_get(root, "exe"))) : NULL;
    other **others = NULL; /* each allocated alone: rows point into them */
    size_t nothers = 0, capothers = 0;
    r->rows = xcalloc(entries->n ? entries->n : 1, sizeof *r->rows);
    for (size_t i = 0; i < entries->n; i++) {
        const jv *e = entries->items[i];
        check_row *row = &r->rows[r->n++];
        row->func = -1;
        row->name = xstrdup(str(jv_get(e, "name")) ? str(jv_get(e, "name")) : "?");
        const char *obj = str(jv_get(e, "object"));
        row->object = xstrdup(obj ? obj : (r->exe ? r->exe : b->path));
        const jv *off = jv_get(e, "offset");
        char *oend = NULL;
        errno = 0;
        if (off && off->type == JV_STR)
            row->offset = strtoull(off->str, &oend, 0);
        if (off && ((off->type == JV_STR && (!*off->str || *oend || errno ||
                                             off->str[strspn(off->str, " ")] == '-')) ||
                    (off->type == JV_NUM && !num_ok(off, 9007199254740992.0)) ||
                    (off->type != JV_STR && off->type != JV_NUM))) {
            msg_error("%s: entry %zu (%s): \"offset\" must be an address (\"0x1139\")",
                      report, i + 1, row->name);
            jv_free(root);
            return EXIT_INPUT;
        }
        if (off && off->type == JV_NUM)
            row->offset = (uint64_t)off->num;
        static const char *const fields[] = {"tasks", "sampled", "max_depth",
                                             "stack_size"};
        for (size_t k = 0; k < 4; k++) {
            /* 2^53: exact in a double; bytes: 1 TiB is no task stack. */
            double max = k < 2 ? 9007199254740992.0 : 1099511627776.0;
            const jv *v = jv_get(e, fields[k]);
            if (!num_ok(v, max)) {
                msg_error(
                    "%s: entry %zu (%s): \"%s\" must be a whole number from 0 to %.0f",
                    report, i + 1, row->name, fields[k], max);
                jv_free(root);
                return EXIT_INPUT;
            }
        }
        row->tasks = num(jv_get(e, "tasks"), 0);
        row->sampled = num(jv_get(e, "sampled"), 0);
        row->max_depth = num(jv_get(e, "max_depth"), -1);
        row->stack_size = num(jv_get(e, "stack_size"), 0);

        /* The ELF holding the entry. */
        elfbin *eb = b;
        analyzer *ea = a;
        if (obj && !same_file(obj, b->path) &&
            !(r->exe && same_file(obj, r->exe) && same_file(r->exe, b->path))) {
            other *ot = NULL;
            for (size_t k = 0; k < nothers; k++)
                if (strcmp(others[k]->path, obj) == 0)
                    ot = others[k];
            if (!ot) {
                ot = xcalloc(1, sizeof *ot);
                *VEC_PUSH(others, nothers, capothers) = ot;
                ot->path = xstrdup(obj);
                elfbin_opts eo = {false};
                ot->ok = elfbin_open(&ot->b, obj, &eo) == 0;
                if (ot->ok)
                    ot->a = analyzer_new(&ot->b);
            }
            if (!ot->ok) {
                row->verdict = CK_SKIPPED;
                row->why = xstrdup("its object cannot be analysed (see above)");
                continue;
            }
            eb = &ot->b;
            ea = ot->a;
        }
        row->func = elfbin_func_start(eb, row->offset);
        if (row->func < 0) {
            row->func = elfbin_func_named(eb, row->name, strlen(row->name));
            if (row->func >= 0)
                msg_warn("%s: no function at offset 0x%llx in %s; found %s by name at "
                         "0x%llx (was the binary rebuilt?)",
                         report, (unsigned long long)row->offset, eb->path, row->name,
                         (unsigned long long)eb->funcs[row->func].addr);
        }
        if (row->func < 0) {
            row->verdict = CK_SKIPPED;
            row->why = xstrdup("no function at that offset or by that name");
            continue;
        }
        row->eb = eb;
        worst_from(ea, eb, row->func, o, &row->w);
        row->analysed = true;
        int64_t reserves = runtime_overhead(ea, eb, o->c) +
                           (o->signal_reserve ? o->c->sigframe + o->c->redzone : 0);
        int64_t need = row->w.bound > row->max_depth ? row->w.bound : row->max_depth;
        row->recommended = stack_class_for(need + reserves);
        bool complete = row->w.flags == 0;
        if (row->max_depth > row->w.bound) {
            row->verdict = complete ? CK_VIOLATION : CK_EXPLAINED;
            if (complete)
                r->violations++;
        }
        if (row->stack_size > 0 && row->stack_size > 4 * row->max_depth &&
            row->stack_size > 4 * (row->w.bound + reserves)) {
            row->size_verdict = CK_OVERSIZED;
            r->warnings++;
        } else if (row->stack_size > 0 && complete &&
                   row->w.bound + reserves > row->stack_size) {
            row->size_verdict = CK_UNDERSIZED;
            r->warnings++;
        }
    }
    r->others = others;
    r->nothers = nothers;
    jv_free(root);
    return 0;
}

void check_free(check_result *r)
{
    for (size_t i = 0; i < r->n; i++) {
        free(r->rows[i].name);
        free(r->rows[i].object);
        free(r->rows[i].why);
        worst_free(&r->rows[i].w);
    }
    for (size_t k = 0; k < r->nothers; k++) {
        analyzer_free(r->others[k]->a);
        if (r->others[k]->ok)
            elfbin_close(&r->others[k]->b);
        free(r->others[k]->path);
        free(r->others[k]);
    }
    free(r->others);
    free(r->rows);
    free(r->exe);
    memset(r, 0, sizeof *r);
}
