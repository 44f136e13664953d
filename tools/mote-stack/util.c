/*
 * util.c - allocation, arrays, the string map, messages and opening input
 * files (see util.h).
 * The map hashes with FNV-1a: names are short and this is not on any path
 * that adversarial input could make quadratic in a way that matters for a
 * command-line tool.
 */
#include "util.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static void out_of_memory(size_t n)
{
    fprintf(stderr, "mote-stack: out of memory (%zu bytes)\n", n);
    exit(EXIT_INPUT);
}

void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        out_of_memory(n);
    return p;
}

void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p)
        out_of_memory(n * size);
    return p;
}

void *xrealloc(void *p, size_t n)
{
    p = realloc(p, n ? n : 1);
    if (!p)
        out_of_memory(n);
    return p;
}

char *xstrdup(const char *s) { return xstrndup(s, strlen(s)); }

char *xstrndup(const char *s, size_t n)
{
    char *d = xmalloc(n + 1);
    memcpy(d, s, n);
    d[n] = 0;
    return d;
}

void vec_reserve(void *arr, size_t *cap, size_t need, size_t sz)
{
    if (need <= *cap)
        return;
    size_t c = *cap ? *cap : 8;
    while (c < need)
        c *= 2;
    *(void **)arr = xrealloc(*(void **)arr, c * sz);
    *cap = c;
}

static void vmsg(const char *kind, const char *fmt, va_list ap)
{
    fflush(stdout);
    fprintf(stderr, "mote-stack: %s", kind);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
}

void msg_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vmsg("", fmt, ap);
    va_end(ap);
}

void msg_warn(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vmsg("warning: ", fmt, ap);
    va_end(ap);
}

static uint64_t hash(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

static bool key_eq(const char *k, const char *s, size_t n)
{
    return strncmp(k, s, n) == 0 && k[n] == 0;
}

void strmap_put(strmap *m, const char *key, int val)
{
    if ((m->n + 1) * 2 > m->cap) {
        strmap old = *m;
        m->cap = old.cap ? old.cap * 2 : 64;
        m->keys = xcalloc(m->cap, sizeof *m->keys);
        m->vals = xmalloc(m->cap * sizeof *m->vals);
        m->n = 0;
        for (size_t i = 0; i < old.cap; i++)
            if (old.keys[i])
                strmap_put(m, old.keys[i], old.vals[i]);
        free(old.keys);
        free(old.vals);
    }
    size_t len = strlen(key);
    size_t i = hash(key, len) & (m->cap - 1);
    while (m->keys[i]) {
        if (key_eq(m->keys[i], key, len))
            return;
        i = (i + 1) & (m->cap - 1);
    }
    m->keys[i] = key;
    m->vals[i] = val;
    m->n++;
}

int strmap_get(const strmap *m, const char *key, size_t keylen)
{
    if (!m->cap)
        return -1;
    size_t i = hash(key, keylen) & (m->cap - 1);
    while (m->keys[i]) {
        if (key_eq(m->keys[i], key, keylen))
            return m->vals[i];
        i = (i + 1) & (m->cap - 1);
    }
    return -1;
}

void strmap_free(strmap *m)
{
    free(m->keys);
    free(m->vals);
    memset(m, 0, sizeof *m);
}

uint64_t pow2_ceil(uint64_t v)
{
    uint64_t p = 1;
    while (p < v && p)
        p <<= 1;
    return p;
}

FILE *open_input(const char *path, const char *what)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        msg_error("cannot open %s %s: %s", what, path, strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {
        msg_error("cannot read %s %s: %s", what, path, strerror(EISDIR));
        fclose(f);
        return NULL;
    }
    return f;
}
