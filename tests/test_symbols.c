/*
 * test_symbols.c - nothing of mote's can clash with a user's names: the
 * symbols libmote.a and libmote.so define globally are exactly the
 * functions mote.h declares with MOTE_API, and libmote-malloc.so exports
 * the C library's allocation API and nothing else.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

#define MAXSYM 512

typedef struct set {
    char *name[MAXSYM];
    int n;
} set;

static void add(set *s, const char *name)
{
    for (int i = 0; i < s->n; i++)
        if (!strcmp(s->name[i], name))
            return;
    CHECK(s->n < MAXSYM);
    s->name[s->n++] = strdup(name);
}

static int has(const set *s, const char *name)
{
    for (int i = 0; i < s->n; i++)
        if (!strcmp(s->name[i], name))
            return 1;
    return 0;
}

/* Functions declared with MOTE_API in mote.h: the identifier just before
 * the first '(' after each MOTE_API. */
static void header_api(set *s)
{
    FILE *f = fopen(MOTE_SOURCE_DIR "/include/mote.h", "r");
    CHECK(f != NULL);
    static char text[1 << 17];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = 0;
    for (char *p = text; (p = strstr(p, "MOTE_API ")); p++) {
        char *paren = strchr(p, '(');
        CHECK(paren != NULL);
        char *e = paren;
        while (e > p && isspace((unsigned char)e[-1]))
            e--;
        char *b = e;
        while (b > p && (isalnum((unsigned char)b[-1]) || b[-1] == '_'))
            b--;
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)(e - b), b);
        if (!strncmp(name, "mote_", 5))
            add(s, name);
    }
}

/* Defined global (and weak) symbols of a binary, as nm prints them. */
static void defined(set *s, const char *nm_args, const char *path)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "nm %s --defined-only '%s'", nm_args, path);
    FILE *p = popen(cmd, "r");
    CHECK(p != NULL);
    char line[512];
    while (fgets(line, sizeof line, p)) {
        char addr[64], type[8], name[256];
        if (sscanf(line, "%63s %7s %255s", addr, type, name) != 3)
            continue;
        if (!strchr("TDBRVWiu", type[0]))
            continue;
        add(s, name);
    }
    CHECK_EQ(pclose(p), 0);
}

static void set_free(set *s)
{
    for (int i = 0; i < s->n; i++)
        free(s->name[i]);
    s->n = 0;
}

static void expect_same(const set *want, const set *got, const char *what)
{
    int bad = 0;
    for (int i = 0; i < got->n; i++)
        if (!has(want, got->name[i])) {
            fprintf(stderr, "%s exports %s, which mote.h does not declare\n", what,
                    got->name[i]);
            bad = 1;
        }
    for (int i = 0; i < want->n; i++)
        if (!has(got, want->name[i])) {
            fprintf(stderr, "%s lacks %s, declared in mote.h\n", what, want->name[i]);
            bad = 1;
        }
    CHECK(!bad);
}

TEST(static_library_defines_only_the_api)
{
    set api = {0}, got = {0};
    header_api(&api);
    CHECK(api.n > 40);
    defined(&got, "-g", MOTE_LIB_A);
    expect_same(&api, &got, "libmote.a");
    set_free(&api);
    set_free(&got);
}

TEST(shared_library_exports_only_the_api)
{
    set api = {0}, got = {0};
    header_api(&api);
    defined(&got, "-D", MOTE_LIB_SO);
    expect_same(&api, &got, "libmote.so");
    set_free(&api);
    set_free(&got);
}

TEST(malloc_library_exports_only_the_allocation_api)
{
    static const char *const names[] = {"malloc",
                                        "free",
                                        "calloc",
                                        "realloc",
                                        "malloc_usable_size",
                                        "cfree",
                                        "free_sized",
                                        "free_aligned_sized",
                                        "reallocarray",
                                        "posix_memalign",
                                        "aligned_alloc",
                                        "memalign",
                                        "valloc",
                                        "pvalloc",
                                        "malloc_trim",
                                        "mallinfo",
                                        "mallinfo2",
                                        "malloc_stats",
                                        "malloc_info",
                                        "mallopt",
                                        "__libc_malloc",
                                        "__libc_free",
                                        "__libc_calloc",
                                        "__libc_realloc",
                                        "__libc_memalign",
                                        "__libc_valloc",
                                        "__libc_pvalloc",
                                        "__libc_reallocarray",
                                        "__posix_memalign",
                                        "mote_mem_release"};
    set want = {0}, got = {0};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        add(&want, names[i]);
    defined(&got, "-D", MOTE_MALLOC_SO);
    for (int i = 0; i < got.n; i++)
        if (!has(&want, got.name[i]) && strncmp(got.name[i], "mote_heap_profile", 17)) {
            fprintf(stderr, "libmote-malloc.so exports %s\n", got.name[i]);
            CHECK(0);
        }
    CHECK(has(&got, "malloc") && has(&got, "free") && has(&got, "__libc_malloc"));
    set_free(&want);
    set_free(&got);
}

TEST_MAIN()
