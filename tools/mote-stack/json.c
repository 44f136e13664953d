/*
 * json.c - JSON writing and reading (see json.h).  The reader recurses once
 * per nesting level and refuses more than 64 levels, so hostile input
 * cannot exhaust the stack of a tool whose job is to measure stacks.
 */
#include "json.h"

#include <stdlib.h>
#include <string.h>

void jw_init(jw *w, FILE *f)
{
    memset(w, 0, sizeof *w);
    w->f = f;
}

/* Length of the valid UTF-8 sequence at p (lead byte >= 0x80), 0 if none:
 * no overlong forms, no surrogates, nothing above U+10FFFF. */
static int utf8_len(const unsigned char *p)
{
    int n;
    unsigned lo = 0x80, hi = 0xbf;
    if (p[0] >= 0xc2 && p[0] <= 0xdf)
        n = 2;
    else if (p[0] >= 0xe0 && p[0] <= 0xef)
        n = 3, lo = p[0] == 0xe0 ? 0xa0 : 0x80, hi = p[0] == 0xed ? 0x9f : 0xbf;
    else if (p[0] >= 0xf0 && p[0] <= 0xf4)
        n = 4, lo = p[0] == 0xf0 ? 0x90 : 0x80, hi = p[0] == 0xf4 ? 0x8f : 0xbf;
    else
        return 0;
    if (p[1] < lo || p[1] > hi)
        return 0;
    for (int i = 2; i < n; i++)
        if (p[i] < 0x80 || p[i] > 0xbf)
            return 0;
    return n;
}

static void put_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        switch (*p) {
        case '"': fputs("\\\"", f); break;
        case '\\': fputs("\\\\", f); break;
        case '\n': fputs("\\n", f); break;
        case '\t': fputs("\\t", f); break;
        case '\r': fputs("\\r", f); break;
        default:
            if (*p < 0x20) {
                fprintf(f, "\\u%04x", *p);
            } else if (*p < 0x80) {
                fputc(*p, f);
            } else {
                /* Names come from the binary: a byte that is no part of
                 * valid UTF-8 is written as the code point of its value
                 * (\u00XX), so the output stays valid JSON. */
                int n = utf8_len(p);
                if (n) {
                    fwrite(p, 1, (size_t)n, f);
                    p += n - 1;
                } else {
                    fprintf(f, "\\u%04x", *p);
                }
            }
        }
    }
    fputc('"', f);
}

static void key(jw *w, const char *k)
{
    if (w->need_comma[w->depth])
        fputc(',', w->f);
    w->need_comma[w->depth] = true;
    if (k) {
        put_string(w->f, k);
        fputc(':', w->f);
    }
}

static void open_(jw *w, const char *k, char c)
{
    key(w, k);
    fputc(c, w->f);
    if (w->depth < 63)
        w->depth++;
    w->need_comma[w->depth] = false;
}

void jw_obj(jw *w, const char *k) { open_(w, k, '{'); }
void jw_arr(jw *w, const char *k) { open_(w, k, '['); }
void jw_end_obj(jw *w)
{
    w->depth--;
    fputc('}', w->f);
}
void jw_end_arr(jw *w)
{
    w->depth--;
    fputc(']', w->f);
}

void jw_str(jw *w, const char *k, const char *v)
{
    key(w, k);
    if (v)
        put_string(w->f, v);
    else
        fputs("null", w->f);
}

void jw_int(jw *w, const char *k, long long v)
{
    key(w, k);
    fprintf(w->f, "%lld", v);
}

void jw_hex(jw *w, const char *k, unsigned long long v)
{
    key(w, k);
    fprintf(w->f, "\"0x%llx\"", v);
}

void jw_bool(jw *w, const char *k, bool v)
{
    key(w, k);
    fputs(v ? "true" : "false", w->f);
}

void jw_done(jw *w)
{
    fputc('\n', w->f);
    fflush(w->f);
}

/* ---- reader ---------------------------------------------------------------- */

typedef struct rd {
    const char *s, *end, *start;
    char *err;
    size_t errlen;
    int depth;
} rd;

static void ws(rd *r)
{
    while (r->s < r->end &&
           (*r->s == ' ' || *r->s == '\n' || *r->s == '\t' || *r->s == '\r'))
        r->s++;
}

static jv *fail(rd *r, const char *what)
{
    if (!r->err[0])
        snprintf(r->err, r->errlen, "%s at byte %zu", what, (size_t)(r->s - r->start));
    return NULL;
}

static void put_utf8(char **o, unsigned cp)
{
    char *d = *o;
    if (cp < 0x80) {
        *d++ = (char)cp;
    } else if (cp < 0x800) {
        *d++ = (char)(0xc0 | (cp >> 6));
        *d++ = (char)(0x80 | (cp & 0x3f));
    } else {
        *d++ = (char)(0xe0 | (cp >> 12));
        *d++ = (char)(0x80 | ((cp >> 6) & 0x3f));
        *d++ = (char)(0x80 | (cp & 0x3f));
    }
    *o = d;
}

static char *parse_str(rd *r)
{
    r->s++; /* the opening quote */
    /* The decoded string is no longer than its source up to the closing
     * quote: allocating the rest of the input per string made a report of
     * many short strings cost (strings x input size) of address space. */
    const char *q = r->s;
    while (q < r->end && *q != '"')
        q += *q == '\\' && q + 1 < r->end ? 2 : 1;
    char *out = xmalloc((size_t)(q - r->s) + 1), *o = out;
    while (r->s < r->end && *r->s != '"') {
        char c = *r->s++;
        if ((unsigned char)c < 0x20) {
            free(out);
            fail(r, "control character in a string");
            return NULL;
        }
        if (c != '\\') {
            *o++ = c;
            continue;
        }
        if (r->s >= r->end)
            break;
        c = *r->s++;
        switch (c) {
        case 'n': *o++ = '\n'; break;
        case 't': *o++ = '\t'; break;
        case 'r': *o++ = '\r'; break;
        case 'b': *o++ = '\b'; break;
        case 'f': *o++ = '\f'; break;
        case 'u': {
            unsigned cp = 0;
            for (int i = 0; i < 4; i++) {
                char h = r->s < r->end ? *r->s++ : 0;
                cp <<= 4;
                if (h >= '0' && h <= '9')
                    cp |= (unsigned)(h - '0');
                else if (h >= 'a' && h <= 'f')
                    cp |= (unsigned)(h - 'a' + 10);
                else if (h >= 'A' && h <= 'F')
                    cp |= (unsigned)(h - 'A' + 10);
                else {
                    free(out);
                    fail(r, "bad \\u escape");
                    return NULL;
                }
            }
            put_utf8(&o, cp);
            break;
        }
        default: *o++ = c; break;
        }
    }
    if (r->s >= r->end) {
        free(out);
        fail(r, "unterminated string");
        return NULL;
    }
    r->s++;
    *o = 0;
    return out;
}

static jv *parse_val(rd *r);

static jv *new_jv(int type)
{
    jv *v = xcalloc(1, sizeof *v);
    v->type = type;
    return v;
}

static jv *parse_container(rd *r, bool obj)
{
    if (++r->depth > 64)
        return fail(r, "nested more than 64 levels");
    jv *v = new_jv(obj ? JV_OBJ : JV_ARR);
    size_t cap = 0;
    r->s++;
    ws(r);
    if (r->s < r->end && *r->s == (obj ? '}' : ']')) {
        r->s++;
        r->depth--;
        return v;
    }
    for (;;) {
        ws(r);
        char *k = NULL;
        if (obj) {
            if (r->s >= r->end || *r->s != '"') {
                jv_free(v);
                return fail(r, "expected a key");
            }
            k = parse_str(r);
            ws(r);
            if (!k || r->s >= r->end || *r->s != ':') {
                free(k);
                jv_free(v);
                return fail(r, "expected ':'");
            }
            r->s++;
        }
        jv *item = parse_val(r);
        if (!item) {
            free(k);
            jv_free(v);
            return NULL;
        }
        if (v->n == cap) {
            cap = cap ? cap * 2 : 8;
            v->items = xrealloc(v->items, cap * sizeof *v->items);
            if (obj)
                v->keys = xrealloc(v->keys, cap * sizeof *v->keys);
        }
        if (obj)
            v->keys[v->n] = k;
        v->items[v->n++] = item;
        ws(r);
        if (r->s < r->end && *r->s == ',') {
            r->s++;
            continue;
        }
        if (r->s < r->end && *r->s == (obj ? '}' : ']')) {
            r->s++;
            r->depth--;
            return v;
        }
        jv_free(v);
        return fail(r, obj ? "expected ',' or '}'" : "expected ',' or ']'");
    }
}

static jv *parse_val(rd *r)
{
    ws(r);
    if (r->s >= r->end)
        return fail(r, "unexpected end of input");
    char c = *r->s;
    if (c == '{' || c == '[')
        return parse_container(r, c == '{');
    if (c == '"') {
        char *s = parse_str(r);
        if (!s)
            return NULL;
        jv *v = new_jv(JV_STR);
        v->str = s;
        return v;
    }
    static const struct {
        const char *w;
        int type;
        bool b;
    } words[] = {
        {"true", JV_BOOL, true}, {"false", JV_BOOL, false}, {"null", JV_NULL, false}};
    for (size_t i = 0; i < 3; i++) {
        size_t n = strlen(words[i].w);
        if ((size_t)(r->end - r->s) >= n && memcmp(r->s, words[i].w, n) == 0) {
            r->s += n;
            jv *v = new_jv(words[i].type);
            v->b = words[i].b;
            return v;
        }
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
        char buf[64];
        size_t n = 0;
        while (r->s + n < r->end && n < sizeof buf - 1 &&
               strchr("+-0123456789.eE", r->s[n]))
            n++;
        memcpy(buf, r->s, n);
        buf[n] = 0;
        char *e;
        double d = strtod(buf, &e);
        if (e == buf)
            return fail(r, "bad number");
        r->s += e - buf;
        jv *v = new_jv(JV_NUM);
        v->num = d;
        return v;
    }
    return fail(r, "unexpected character");
}

jv *jv_parse(const char *text, size_t len, char *err, size_t errlen)
{
    rd r = {text, text + len, text, err, errlen, 0};
    err[0] = 0;
    jv *v = parse_val(&r);
    if (!v)
        return NULL;
    ws(&r);
    if (r.s != r.end) {
        jv_free(v);
        return fail(&r, "trailing characters after the JSON value");
    }
    return v;
}

const jv *jv_get(const jv *o, const char *k)
{
    if (!o || o->type != JV_OBJ)
        return NULL;
    for (size_t i = 0; i < o->n; i++)
        if (strcmp(o->keys[i], k) == 0)
            return o->items[i];
    return NULL;
}

void jv_free(jv *v)
{
    if (!v)
        return;
    for (size_t i = 0; i < v->n; i++) {
        jv_free(v->items[i]);
        if (v->keys)
            free(v->keys[i]);
    }
    free(v->items);
    free(v->keys);
    free(v->str);
    free(v);
}
