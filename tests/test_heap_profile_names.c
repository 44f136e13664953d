/*
 * test_heap_profile_names.c - the heap profile names functions itself, and
 * puts back the callers that frameless allocating functions hide.
 *
 * A program built without debug information (so `go tool pprof` finds no
 * names in it) runs under LD_PRELOAD=libmote-malloc.so with the profiler
 * on.  It allocates at known sites: malloc called directly, from a
 * static function (in .symtab only), through a wrapper built without a
 * frame pointer (as libstdc++'s operator new is), and through glibc's
 * strdup (the same, in a stripped library).  The profile is decoded here
 * (gzip's stored blocks, then the protobuf), without pprof, so the check
 * runs wherever cc does: every site's function is named, its caller the
 * frame after it, with its in-use bytes within 10% of the truth, and the
 * profile asks pprof to drop strdup and operator new from the leaf end.
 * At a rate of 4K the sampling's own error is 2% at most (one site in 30
 * runs strayed past 10% at 16K, where it is 4%).
 *
 * And a sample taken in a mote task has the task's whole stack, not only
 * the allocating frame (the heap walks only stacks it knows; the runtime
 * names its tasks' to it); and samples freed by threads other than their
 * allocator's, 12 of them (more than own a counter stripe), some after
 * the allocator exited, leave the in-use bytes as they should.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "mote.h"

static char dir[128];

static void cleanup(void)
{
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    (void)!system(cmd);
}

/* ---- the program (two files: the wrapper has no frame pointer) ---- */

static const char prog_main[] =
    "#include <stdlib.h>\n#include <string.h>\n"
    "void *wrap_alloc(size_t n);\n"
    "static void *volatile kept[80000]; static int nkept;\n"
    "static char text[2000];\n"
    "__attribute__((noinline)) void site_direct(void) { for (int i = 0; i < 20000; i++) "
    "kept[nkept++] = malloc(1000); }\n"
    "__attribute__((noinline)) static void site_static(void) { for (int i = 0; i < 5000; "
    "i++) kept[nkept++] = malloc(2000); }\n"
    "__attribute__((noinline)) void site_wrapped(void) { for (int i = 0; i < 15000; i++) "
    "kept[nkept++] = wrap_alloc(2000); }\n"
    "__attribute__((noinline)) void site_strdup(void) { memset(text, 'x', 1999); "
    "for (int i = 0; i < 10000; i++) kept[nkept++] = strdup(text); }\n"
    "int main(void) { site_direct(); site_static(); site_wrapped(); site_strdup(); "
    "return kept[0] == 0; }\n";

static const char prog_wrap[] =
    "#include <stdlib.h>\n"
    "void *wrap_alloc(size_t n) { void *p = malloc(n); if (!p) abort(); return p; }\n";

static const struct {
    const char *fn;
    double inuse;
    const char *leaf; /* the frame before it, if not itself */
} truth[] = {
    {"site_direct", 20e6, NULL},
    {"site_static", 10e6, NULL},
    {"site_wrapped", 30e6, "wrap_alloc"},
    {"site_strdup", 20e6, "strdup"},
};

/* ---- gzip (stored blocks only: what the profiler writes) ---- */

static uint32_t crc32_of(const uint8_t *p, size_t n)
{
    uint32_t c = ~0u;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++)
            c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
    }
    return ~c;
}

/* The member in f[0..n) inflated into a malloc'd buffer; its length. */
static uint8_t *gunzip_stored(const uint8_t *f, size_t n, size_t *out_len)
{
    CHECK(n >= 18 && f[0] == 0x1f && f[1] == 0x8b && f[2] == 8 && f[3] == 0);
    uint8_t *out = malloc(n);
    CHECK(out != NULL);
    size_t o = 0, i = 10;
    for (;;) {
        CHECK(i + 5 <= n);
        uint8_t hdr = f[i];
        CHECK(((hdr >> 1) & 3) == 0); /* stored */
        size_t len = f[i + 1] | (size_t)f[i + 2] << 8;
        size_t nlen = f[i + 3] | (size_t)f[i + 4] << 8;
        CHECK((len ^ nlen) == 0xffff);
        i += 5;
        CHECK(i + len <= n);
        memcpy(out + o, f + i, len);
        o += len;
        i += len;
        if (hdr & 1)
            break;
    }
    CHECK(i + 8 == n);
    uint32_t crc = f[i] | (uint32_t)f[i + 1] << 8 | (uint32_t)f[i + 2] << 16 |
                   (uint32_t)f[i + 3] << 24;
    uint32_t isize = f[i + 4] | (uint32_t)f[i + 5] << 8 | (uint32_t)f[i + 6] << 16 |
                     (uint32_t)f[i + 7] << 24;
    CHECK_EQ(isize, (uint32_t)o);
    CHECK_EQ(crc, crc32_of(out, o));
    *out_len = o;
    return out;
}

/* ---- protobuf: the fields of profile.proto read here ---- */

typedef struct pb {
    const uint8_t *p, *end;
} pb;

static uint64_t pb_varint(pb *r)
{
    uint64_t v = 0;
    for (int s = 0; s < 64; s += 7) {
        CHECK(r->p < r->end);
        uint8_t b = *r->p++;
        v |= (uint64_t)(b & 0x7f) << s;
        if (!(b & 0x80))
            return v;
    }
    CHECK(!"varint too long");
    return 0;
}

/* Next field of r: its number and wire type; for wire type 2 its bytes in
 * *sub, for 0 its value in *v. */
static int pb_next(pb *r, unsigned *field, pb *sub, uint64_t *v)
{
    if (r->p >= r->end)
        return 0;
    uint64_t key = pb_varint(r);
    *field = (unsigned)(key >> 3);
    switch (key & 7) {
    case 0: *v = pb_varint(r); break;
    case 2: {
        uint64_t len = pb_varint(r);
        CHECK(len <= (uint64_t)(r->end - r->p));
        sub->p = r->p;
        sub->end = r->p + len;
        r->p += len;
        break;
    }
    default: CHECK(!"a wire type the profiler does not write");
    }
    return 1;
}

#define MAXN 200000

typedef struct profile {
    const char *str[MAXN];
    size_t str_len[MAXN];
    uint32_t nstr;
    uint64_t fn_name[MAXN];              /* by function id: its name's string index */
    uint64_t loc_id[MAXN], loc_fn[MAXN]; /* each location: its id, its first
                                            line's function id */
    uint32_t nloc;
    uint64_t drop;
    struct sample {
        uint64_t loc[32];
        int depth;
        uint64_t alloc_bytes, inuse_bytes;
    } * smp;
    uint32_t nsmp;
    uint8_t *raw; /* the decoded profile: str[] points into it */
} profile;

static void read_ids(pb *s, uint64_t *ids, int *n, int max)
{
    while (s->p < s->end && *n < max)
        ids[(*n)++] = pb_varint(s);
}

static void parse(profile *P, const uint8_t *b, size_t n)
{
    memset(P, 0, sizeof *P);
    P->smp = calloc(MAXN, sizeof *P->smp);
    CHECK(P->smp != NULL);
    pb r = {b, b + n}, sub;
    unsigned f;
    uint64_t v = 0;
    while (pb_next(&r, &f, &sub, &v)) {
        if (f == 6) { /* string_table */
            CHECK(P->nstr < MAXN);
            P->str[P->nstr] = (const char *)sub.p;
            P->str_len[P->nstr++] = (size_t)(sub.end - sub.p);
        } else if (f == 7) {
            P->drop = v;
        } else if (f == 5) { /* function */
            uint64_t id = 0, name = 0, w = 0;
            pb in = sub, s2;
            unsigned g;
            while (pb_next(&in, &g, &s2, &w))
                if (g == 1)
                    id = w;
                else if (g == 2)
                    name = w;
            CHECK(id > 0 && id < MAXN);
            P->fn_name[id] = name;
        } else if (f == 4) { /* location */
            uint64_t id = 0, fn = 0, w = 0;
            pb in = sub, s2;
            unsigned g;
            while (pb_next(&in, &g, &s2, &w)) {
                if (g == 1) {
                    id = w;
                } else if (g == 4 && !fn) { /* line */
                    pb l = s2, s3;
                    unsigned h;
                    uint64_t x = 0;
                    while (pb_next(&l, &h, &s3, &x))
                        if (h == 1)
                            fn = x;
                }
            }
            CHECK(P->nloc < MAXN);
            P->loc_id[P->nloc] = id;
            P->loc_fn[P->nloc++] = fn;
        } else if (f == 2) { /* sample */
            CHECK(P->nsmp < MAXN);
            struct sample *s = &P->smp[P->nsmp++];
            uint64_t vals[4];
            int nv = 0;
            pb in = sub, s2;
            unsigned g;
            uint64_t w = 0;
            while (pb_next(&in, &g, &s2, &w)) {
                if (g == 1)
                    read_ids(&s2, s->loc, &s->depth, 32);
                else if (g == 2)
                    read_ids(&s2, vals, &nv, 4);
            }
            CHECK_EQ(nv, 4); /* alloc_objects, alloc_space, inuse_objects, inuse_space */
            s->alloc_bytes = vals[1];
            s->inuse_bytes = vals[3];
        }
    }
}

/* The name of location id's function, or "" */
static const char *loc_name(const profile *P, uint64_t loc, size_t *len)
{
    *len = 0;
    uint32_t i = 0;
    while (i < P->nloc && P->loc_id[i] != loc)
        i++;
    if (i == P->nloc || !P->loc_fn[i] || P->loc_fn[i] >= MAXN)
        return "";
    uint64_t s = P->fn_name[P->loc_fn[i]];
    CHECK(s < P->nstr);
    *len = P->str_len[s];
    return P->str[s];
}

static int name_is(const profile *P, uint64_t loc, const char *want)
{
    size_t len;
    const char *s = loc_name(P, loc, &len);
    return len == strlen(want) && !memcmp(s, want, len);
}

/* In-use (or, with alloc, allocated) bytes of the samples whose stack
 * starts leaf, then fn (or fn at once when leaf is NULL). */
static double bytes_of(const profile *P, const char *fn, const char *leaf, bool alloc)
{
    double sum = 0;
    for (uint32_t i = 0; i < P->nsmp; i++) {
        const struct sample *s = &P->smp[i];
        if (leaf ? s->depth >= 2 && name_is(P, s->loc[0], leaf) &&
                       name_is(P, s->loc[1], fn)
                 : s->depth >= 1 && name_is(P, s->loc[0], fn))
            sum += (double)(alloc ? s->alloc_bytes : s->inuse_bytes);
    }
    return sum;
}

static double bytes_at(const profile *P, const char *fn, const char *leaf)
{
    return bytes_of(P, fn, leaf, false);
}

static int stack_names_main(const profile *P, const char *fn)
{
    for (uint32_t i = 0; i < P->nsmp; i++) {
        const struct sample *s = &P->smp[i];
        for (int d = 0; d + 1 < s->depth; d++)
            if (name_is(P, s->loc[d], fn) && name_is(P, s->loc[d + 1], "main"))
                return 1;
    }
    return 0;
}

static uint8_t *read_file(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    CHECK(f != NULL);
    CHECK(fseek(f, 0, SEEK_END) == 0);
    long len = ftell(f);
    CHECK(len > 0);
    rewind(f);
    uint8_t *b = malloc((size_t)len);
    CHECK(b != NULL);
    CHECK(fread(b, 1, (size_t)len, f) == (size_t)len);
    fclose(f);
    *n = (size_t)len;
    return b;
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    fputs(text, f);
    CHECK(fclose(f) == 0);
}

/* The profile at path, decoded (one at a time: its tables are large). */
static profile *load_profile(const char *path)
{
    static profile P;
    size_t gz_len, n;
    uint8_t *gz = read_file(path, &gz_len);
    uint8_t *raw = gunzip_stored(gz, gz_len, &n);
    free(gz);
    parse(&P, raw, n);
    P.raw = raw;
    return &P;
}

static void profile_free(profile *P)
{
    free(P->raw);
    free(P->smp);
}

static void self_path(char *buf, size_t len)
{
    ssize_t k = readlink("/proc/self/exe", buf, len - 1);
    CHECK(k > 0);
    buf[k] = 0;
}

/* dir, made for this process, removed at its exit (not after a failed
 * CHECK: it stays to be read). */
static void make_work_dir(void)
{
    snprintf(dir, sizeof dir, "/tmp/mote-profnames-%d", (int)getpid());
    CHECK(mkdir(dir, 0700) == 0 || errno == EEXIST);
    atexit(cleanup);
}

/* The profile this test binary writes as child TEST `child` (rate 4K),
 * to `file` in dir. */
static profile *child_profile(const char *child, const char *file)
{
    char self[PATH_MAX], out[256], cmd[2 * PATH_MAX];
    self_path(self, sizeof self);
    make_work_dir();
    snprintf(out, sizeof out, "%s/%s", dir, file);
    snprintf(cmd, sizeof cmd,
             "MOTE_TEST_CHILD=1 MOTE_HEAPPROFILE='%s' MOTE_HEAPPROFILE_RATE=4K '%s' %s",
             out, self, child);
    CHECK(system(cmd) == 0);
    return load_profile(out);
}

TEST(a_program_without_debug_information_gets_its_functions_named)
{
    if (TEST_SANITIZED) {
        fprintf(stderr, "sanitizer build: its malloc cannot be replaced: skipped\n");
        exit(77);
    }
    if (system("cc --version >/dev/null 2>&1") != 0) {
        fprintf(stderr, "cc is not installed: skipped\n");
        exit(77);
    }
    char self[PATH_MAX], so[PATH_MAX + 64], cmd[4 * PATH_MAX];
    self_path(self, sizeof self);
    *strrchr(self, '/') = 0;
    snprintf(so, sizeof so, "%s/../libmote-malloc.so", self);
    CHECK(access(so, R_OK) == 0);
    make_work_dir();
    char main_c[256], wrap_c[256], prog[256], out[256];
    snprintf(main_c, sizeof main_c, "%s/main.c", dir);
    snprintf(wrap_c, sizeof wrap_c, "%s/wrap.c", dir);
    snprintf(prog, sizeof prog, "%s/prog", dir);
    snprintf(out, sizeof out, "%s/prog.heap", dir);
    write_file(main_c, prog_main);
    write_file(wrap_c, prog_wrap);
    /* No -g: names can only come from the profile.  -fno-builtin: strdup
     * stays a call into glibc. */
    snprintf(cmd, sizeof cmd,
             "cd '%s' && cc -O2 -fomit-frame-pointer -fno-builtin -c wrap.c && "
             "cc -O2 -fno-omit-frame-pointer -fno-builtin -o prog main.c wrap.o",
             dir);
    CHECK(system(cmd) == 0);
    snprintf(cmd, sizeof cmd,
             "LD_PRELOAD='%s' MOTE_HEAPPROFILE='%s' MOTE_HEAPPROFILE_RATE=4K '%s'", so,
             out, prog);
    CHECK(system(cmd) == 0);

    profile *P = load_profile(out);
    CHECK(P->nsmp > 0);
    CHECK(P->drop > 0 && P->drop < P->nstr);
    const char *want_drop = "operator new.*|(__)?strn?dup|(__)?wcsn?dup";
    CHECK(P->str_len[P->drop] == strlen(want_drop) &&
          !memcmp(P->str[P->drop], want_drop, strlen(want_drop)));
    for (size_t i = 0; i < sizeof truth / sizeof *truth; i++) {
        double got = bytes_at(P, truth[i].fn, truth[i].leaf);
        fprintf(stderr, "%-14s %-11s in use %12.0f (true %12.0f)\n", truth[i].fn,
                truth[i].leaf ? truth[i].leaf : "", got, truth[i].inuse);
        CHECK(got >= truth[i].inuse * 0.9 && got <= truth[i].inuse * 1.1);
        /* and the chain goes on above the site */
        CHECK(stack_names_main(P, truth[i].fn));
    }
    profile_free(P);
}

/* ---- in a task ---- */

static void *volatile task_kept[20000];
static int ntask_kept;

__attribute__((noinline)) void task_site(void)
{
    for (int i = 0; i < 20000; i++) /* 20,000,000 B in use */
        task_kept[ntask_kept++] = mote_malloc(1000);
}

__attribute__((noinline)) void task_caller(void)
{
    task_site();
    __asm__ volatile(""); /* (no tail call: its frame stays) */
}

static void task_main(void *arg)
{
    (void)arg;
    task_caller();
    __asm__ volatile("");
}

TEST(child_task_sites)
{
    if (getenv("MOTE_TEST_CHILD"))
        CHECK_EQ(mote_run(task_main, NULL), 0);
}

TEST(a_sample_in_a_task_has_the_task_s_whole_stack)
{
    profile *P = child_profile("child_task_sites", "task.heap");
    double whole = 0, site = bytes_at(P, "task_site", NULL);
    for (uint32_t i = 0; i < P->nsmp; i++) {
        const struct sample *s = &P->smp[i];
        if (s->depth >= 3 && name_is(P, s->loc[0], "task_site") &&
            name_is(P, s->loc[1], "task_caller") && name_is(P, s->loc[2], "task_main"))
            whole += (double)s->inuse_bytes;
    }
    fprintf(stderr, "task_site in use %.0f, with its callers %.0f (true 20000000)\n",
            site, whole);
    CHECK(whole >= 20e6 * 0.9 && whole <= 20e6 * 1.1);
    profile_free(P);
}

/* ---- samples freed by other threads, counted by many ---- */

/* 12 threads, more than the profiler's counter stripes of their own (8):
 * each allocates 2,000,000 B at xt_site, then frees 1,500,000 B of its
 * neighbour's blocks (sampled blocks freed by a thread that did not
 * allocate them, some after that thread exited) and keeps the rest. */
enum { XT_THREADS = 12, XT_BLOCKS = 2000, XT_FREED = 1500, XT_SIZE = 1000 };
static void *xt_blocks[XT_THREADS][XT_BLOCKS];
static pthread_barrier_t xt_bar;

__attribute__((noinline)) void xt_site(void **v)
{
    for (int i = 0; i < XT_BLOCKS; i++) {
        v[i] = mote_malloc(XT_SIZE);
        CHECK(v[i] != NULL);
        memset(v[i], i, XT_SIZE);
    }
    __asm__ volatile("");
}

static void *xt_thread(void *arg)
{
    int i = (int)(uintptr_t)arg;
    xt_site(xt_blocks[i]);
    pthread_barrier_wait(&xt_bar);
    if (i % 2) /* half free after their neighbour's thread has exited */
        pthread_barrier_wait(&xt_bar);
    void **v = xt_blocks[(i + 1) % XT_THREADS];
    for (int k = 0; k < XT_FREED; k++)
        mote_free(v[k]);
    if (!(i % 2))
        pthread_barrier_wait(&xt_bar);
    return NULL;
}

TEST(child_cross_frees)
{
    if (!getenv("MOTE_TEST_CHILD"))
        return;
    pthread_t t[XT_THREADS];
    CHECK_EQ(pthread_barrier_init(&xt_bar, NULL, XT_THREADS), 0);
    for (int i = 0; i < XT_THREADS; i++)
        CHECK_EQ(pthread_create(&t[i], NULL, xt_thread, (void *)(uintptr_t)i), 0);
    for (int i = 0; i < XT_THREADS; i++)
        CHECK_EQ(pthread_join(t[i], NULL), 0);
    exit(0); /* the profile is written at exit */
}

TEST(samples_freed_by_other_threads_leave_the_in_use_bytes)
{
    profile *P = child_profile("child_cross_frees", "cross.heap");
    double inuse = bytes_of(P, "xt_site", NULL, false);
    double alloc = bytes_of(P, "xt_site", NULL, true);
    double t_in = (double)XT_THREADS * (XT_BLOCKS - XT_FREED) * XT_SIZE;
    double t_al = (double)XT_THREADS * XT_BLOCKS * XT_SIZE;
    fprintf(stderr, "xt_site in use %.0f (true %.0f), allocated %.0f (true %.0f)\n",
            inuse, t_in, alloc, t_al);
    CHECK(inuse >= t_in * 0.9 && inuse <= t_in * 1.1);
    CHECK(alloc >= t_al * 0.9 && alloc <= t_al * 1.1);
    profile_free(P);
}

TEST_MAIN()
