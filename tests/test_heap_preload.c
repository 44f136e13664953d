/*
 * test_heap_preload.c - libmote-malloc.so replacing malloc in whole
 * programs through LD_PRELOAD.
 *
 *   malloc_api_*     the malloc API as a program sees it (this binary
 *                    re-executed under LD_PRELOAD as `test_heap_preload
 *                    inner`), a dlopen'ed library allocating and freeing
 *                    across the boundary, MOTE_MALLOC_STATS, invalid
 *                    settings and the memory limit
 *   <program>_*      a real program (python3, sqlite3, git, cmake) on a
 *                    scripted workload, once under glibc and once under
 *                    mote: same output
 *
 * A case is skipped (77) only when its program is not installed, or in a
 * sanitizer build (the sanitizer owns malloc: interposition cannot work).
 * MOTE_MALLOC_SO and HEAP_DSO are set by tests/heap.cmake.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"

#ifndef MOTE_MALLOC_SO
#define MOTE_MALLOC_SO "libmote-malloc.so"
#endif
#ifndef HEAP_DSO
#define HEAP_DSO ""
#endif

/* ---- inner: runs under LD_PRELOAD ---- */

static void *thread_alloc(void *arg)
{
    void **out = arg;
    for (int i = 0; i < 1000; i++)
        out[i] = malloc(16 + (size_t)i);
    return NULL;
}

static volatile size_t big = SIZE_MAX; /* opaque to the compiler's checks */
static atomic_int stats_stop;

static void *stats_printer(void *arg)
{
    (void)arg;
    while (!atomic_load(&stats_stop))
        malloc_stats();
    return NULL;
}
static volatile size_t odd_align24 = 24, odd_align48 = 48;

static int inner(void)
{
    /* mote is the malloc here; C23's free_sized is not in glibc 2.36 */
    CHECK(dlsym(RTLD_DEFAULT, "mote_mem_release") != NULL);
    void (*free_sized)(void *, size_t) =
        (void (*)(void *, size_t))dlsym(RTLD_DEFAULT, "free_sized");
    void (*free_aligned_sized)(void *, size_t, size_t) =
        (void (*)(void *, size_t, size_t))dlsym(RTLD_DEFAULT, "free_aligned_sized");
    CHECK(free_sized && free_aligned_sized);
    void *p = malloc(100);
    CHECK(p && malloc_usable_size(p) == 112); /* mote's size class */
    free(p);

    errno = 0;
    CHECK(calloc(big / 4, 8) == NULL && errno == ENOMEM);
    void *q = NULL;
    CHECK_EQ(posix_memalign(&q, 3, 10), EINVAL);
    CHECK_EQ(posix_memalign(&q, 4, 10), EINVAL); /* < sizeof(void *) */
    CHECK_EQ(posix_memalign(&q, 4096, 10), 0);
    CHECK(q && (uintptr_t)q % 4096 == 0);
    free(q);
    errno = 0;
    CHECK(aligned_alloc(odd_align24, 10) == NULL && errno == EINVAL);
    q = aligned_alloc(64, 100);
    CHECK(q && (uintptr_t)q % 64 == 0);
    free_aligned_sized(q, 64, 100);
    q = memalign(odd_align48, 10); /* rounded up to 64, like glibc */
    CHECK(q && (uintptr_t)q % 64 == 0);
    free(q);
    q = valloc(10);
    CHECK(q && (uintptr_t)q % 4096 == 0);
    free(q);
    q = pvalloc(5000);
    CHECK(q && (uintptr_t)q % 4096 == 0 && malloc_usable_size(q) >= 8192);
    free(q);
    errno = 0;
    CHECK(reallocarray(NULL, big / 2, 3) == NULL && errno == ENOMEM);
    char *r = malloc(10);
    strcpy(r, "abcdefghi");
    errno = 0;
    CHECK(realloc(r, big - 10) == NULL && errno == ENOMEM);
    CHECK(strcmp(r, "abcdefghi") == 0); /* a failed realloc keeps the block */
    r = realloc(r, 100000);
    CHECK(r && strcmp(r, "abcdefghi") == 0);
    free_sized(r, 100000);
    CHECK(malloc_usable_size(NULL) == 0);

    /* libc allocating internally: stdio, strdup, getline */
    char *s = strdup("hello");
    FILE *f = fopen("/proc/self/maps", "r");
    CHECK(f != NULL);
    char *line = NULL;
    size_t cap = 0;
    int lines = 0;
    while (getline(&line, &cap, f) > 0)
        lines++;
    free(line);
    fclose(f);
    CHECK(lines > 3);
    free(s);

    /* blocks from a thread freed here after it exited */
    void *blocks[1000];
    pthread_t t;
    CHECK(pthread_create(&t, NULL, thread_alloc, blocks) == 0);
    pthread_join(t, NULL);
    for (int i = 0; i < 1000; i++)
        free(blocks[i]);

    /* a dlopen'ed library allocating and freeing across the boundary */
    if (HEAP_DSO[0]) {
        void *h = dlopen(HEAP_DSO, RTLD_NOW);
        CHECK(h != NULL);
        char *(*dso_alloc)(size_t) = (char *(*)(size_t))dlsym(h, "heap_dso_alloc");
        void (*dso_free)(void *) = (void (*)(void *))dlsym(h, "heap_dso_free");
        CHECK(dso_alloc && dso_free);
        char *a = dso_alloc(1000);
        CHECK(a && a[999] == 'x');
        free(a);
        char *b = malloc(5000);
        dso_free(b);
        dlclose(h);
    }

    /* glibc's introspection answers with mote's numbers, not with glibc's
     * empty arena */
    /* (small blocks in flight between threads count as in use until they
     * are home, which the scavenger may do at any time: only the block
     * with its own mapping is counted exactly) */
    struct mallinfo2 m0 = mallinfo2();
    char *ten = malloc(10 << 20);
    CHECK(ten != NULL);
    memset(ten, 1, 10 << 20);
    struct mallinfo2 m1 = mallinfo2();
    CHECK(m1.uordblks >= (10 << 20));
    CHECK(m1.arena >= m1.uordblks && m1.fordblks <= m1.arena);
    CHECK_EQ(m1.hblks, m0.hblks + 1);
    /* (up to a page more: the block's cache colour, heap_colour) */
    CHECK(m1.hblkhd > m0.hblkhd + (10 << 20) &&
          m1.hblkhd <= m0.hblkhd + (10 << 20) + 4096);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
    CHECK(mallinfo().uordblks >= (10 << 20)); /* the old form, still called */
#pragma GCC diagnostic pop
    CHECK_EQ(mallopt(M_MMAP_THRESHOLD, 1 << 20), 1);
    char *xml = NULL;
    size_t xlen = 0;
    FILE *mf = open_memstream(&xml, &xlen);
    CHECK(mf != NULL);
    CHECK_EQ(malloc_info(0, mf), 0);
    fclose(mf);
    CHECK(strstr(xml, "<malloc version=\"mote\">") != NULL);
    free(xml);
    errno = 0;
    CHECK_EQ(malloc_info(1, stdout), -1);
    CHECK_EQ(errno, EINVAL);
    free(ten);
    CHECK_EQ(mallinfo2().hblkhd, m0.hblkhd);

    /* fork while another thread prints malloc_stats: the child's own
     * malloc_stats must not find the printer's lock held (it hung in 3
     * forks of 31) */
    fflush(stderr);
    int saved_err = dup(2), devnull = open("/dev/null", O_WRONLY | O_CLOEXEC);
    CHECK(saved_err >= 0 && devnull >= 0);
    CHECK(dup2(devnull, 2) == 2);
    pthread_t printer;
    atomic_store(&stats_stop, 0);
    CHECK(pthread_create(&printer, NULL, stats_printer, NULL) == 0);
    for (int i = 0; i < 40; i++) {
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) {
            alarm(10);
            malloc_stats();
            _exit(0);
        }
        int st = 0;
        CHECK(waitpid(pid, &st, 0) == pid);
        CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    atomic_store(&stats_stop, 1);
    pthread_join(printer, NULL);
    CHECK(dup2(saved_err, 2) == 2);
    close(saved_err);
    close(devnull);
    printf("inner ok\n");
    return 0;
}

/* ---- outer: runs commands with and without the preload ---- */

static char work[256];

static int sh(const char *cmd)
{
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return strdup("");
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = calloc(1, (size_t)n + 1);
    if (fread(b, 1, (size_t)n, f) != (size_t)n)
        n = 0;
    fclose(f);
    return b;
}

/* Runs `script` (sh) in a fresh directory, returns its stdout; *rc its
 * exit status, *err its stderr. */
static char *run(const char *script, const char *env, int *rc, char **err)
{
    char path[512], cmd[2048];
    snprintf(path, sizeof path, "%s/script.sh", work);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    fputs(script, f);
    fclose(f);
    snprintf(
        cmd, sizeof cmd,
        "rm -rf %s/w && mkdir -p %s/w && cd %s/w && env %s /bin/sh %s >%s/out 2>%s/err",
        work, work, work, env, path, work, work);
    *rc = sh(cmd);
    snprintf(path, sizeof path, "%s/err", work);
    *err = slurp(path);
    snprintf(path, sizeof path, "%s/out", work);
    return slurp(path);
}

static const char *find_prog(const char *name, char *buf, size_t len)
{
    const char *pref[] = {"/usr/bin/", "/bin/", "/usr/local/bin/"};
    for (int i = 0; i < 3; i++) {
        snprintf(buf, len, "%s%s", pref[i], name);
        if (access(buf, X_OK) == 0)
            return buf;
    }
    return NULL;
}

/* Workloads (sh scripts; PROG is the program's path): stdout must match
 * between glibc and mote. */
static const char *py_script =
    "PROG -c '\n"
    "import json, random, collections\n"
    "random.seed(7)\n"
    "d = {}\n"
    "for i in range(200000):\n"
    "    d[str(i) * (i % 7 + 1)] = [i] * (i % 13)\n"
    "l = sorted(d.items(), key=lambda kv: (len(kv[1]), kv[0]))[:2000]\n"
    "s = json.dumps(l)\n"
    "c = collections.Counter(random.choice(s) for _ in range(100000))\n"
    "big = [bytearray(random.randrange(1, 300000)) for _ in range(300)]\n"
    "del big\n"
    "t = \" \".join(str(x) for x in range(100000)).split()\n"
    "print(len(d), len(s), len(t), sorted(c.items())[:5], sum(len(v) for v in "
    "d.values()))\n"
    "'";

static const char *sqlite_script =
    "cat > w.sql <<EOF\n"
    "CREATE TABLE t(id INTEGER PRIMARY KEY, name TEXT, v REAL, grp INT);\n"
    "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x < 50000)\n"
    "INSERT INTO t SELECT x, printf('name-%08d-%s', x, hex(x*7919)), x*0.5, x % 97 FROM "
    "c;\n"
    "CREATE INDEX ti ON t(name);\n"
    "CREATE INDEX tg ON t(grp, v);\n"
    "SELECT grp, count(*), sum(v), min(name), max(name) FROM t GROUP BY grp ORDER BY grp "
    "LIMIT 20;\n"
    "SELECT count(*) FROM t a JOIN t b ON a.grp = b.grp AND a.id < b.id WHERE a.id < "
    "2000 AND b.id < 2000;\n"
    "UPDATE t SET name = name || name WHERE id % 3 = 0;\n"
    "DELETE FROM t WHERE id % 5 = 0;\n"
    "SELECT count(*), sum(length(name)) FROM t;\n"
    "SELECT group_concat(name, ',') FROM (SELECT name FROM t ORDER BY name DESC LIMIT "
    "30);\n"
    "VACUUM;\n"
    "PRAGMA integrity_check;\n"
    "EOF\n"
    "PROG db.sqlite < w.sql";

static const char *git_script =
    "export GIT_AUTHOR_NAME=t GIT_AUTHOR_EMAIL=t@e GIT_COMMITTER_NAME=t "
    "GIT_COMMITTER_EMAIL=t@e "
    "GIT_AUTHOR_DATE=\"2020-01-01 00:00:00 +0000\" GIT_COMMITTER_DATE=\"2020-01-01 "
    "00:00:00 +0000\" "
    "GIT_CONFIG_NOSYSTEM=1 HOME=$PWD\n"
    "PROG init -q -b main r && cd r\n"
    "i=0; while [ $i -lt 40 ]; do\n"
    "  seq $i 3 $((i * 500)) > f$((i % 7)).txt; mkdir -p d$((i % 3)); seq 1 $i > d$((i % "
    "3))/g$i\n"
    "  PROG add -A && PROG commit -q -m \"c$i\"; i=$((i + 1))\n"
    "done\n"
    "PROG log --stat --format=%H%n%s | head -400\n"
    "PROG gc -q && PROG fsck --strict && PROG count-objects -v | grep -v size\n"
    "PROG diff HEAD~30 HEAD | md5sum; PROG blame f3.txt | tail -5; PROG rev-list --all | "
    "wc -l";

static const char *cmake_script =
    "mkdir src && cd src\n"
    "cat > CMakeLists.txt <<'EOF'\n"
    "cmake_minimum_required(VERSION 3.16)\n"
    "project(p C)\n"
    "include(CheckIncludeFile)\n"
    "include(CheckFunctionExists)\n"
    "check_include_file(stdlib.h HAVE_STDLIB)\n"
    "check_function_exists(malloc HAVE_MALLOC)\n"
    "file(GLOB S *.c)\n"
    "add_executable(p ${S})\n"
    "foreach(i RANGE 300)\n"
    "  set(V${i} \"x${i}\")\n"
    "  string(REPEAT \"ab\" ${i} R${i})\n"
    "  list(APPEND L ${R${i}})\n"
    "endforeach()\n"
    "list(LENGTH L n)\n"
    "message(STATUS \"have ${HAVE_STDLIB} ${HAVE_MALLOC} ${n}\")\n"
    "EOF\n"
    "echo 'int main(void){return 0;}' > main.c\n"
    "PROG -S . -B b 2>&1 | sed -e 's/ ([0-9.]*s)$//' -e '/Build files/d'\n"
    "PROG --build b 2>&1 | grep -c Linking\n"
    "test -x b/p && echo built";

static int outer_program(const char *name)
{
    char path[256];
    const char *prog = find_prog(name, path, sizeof path);
    if (!prog) {
        printf("SKIP: %s is not installed (apt-get install %s)\n", name,
               !strcmp(name, "python3") ? "python3" : name);
        return 77;
    }
    const char *tmpl = !strcmp(name, "python3")   ? py_script
                       : !strcmp(name, "sqlite3") ? sqlite_script
                       : !strcmp(name, "git")     ? git_script
                       : !strcmp(name, "cmake")   ? cmake_script
                                                  : NULL;
    if (!tmpl) {
        fprintf(stderr, "unknown program %s\n", name);
        return 2;
    }
    /* substitute PROG with the program's path */
    char script[8192];
    size_t n = 0;
    for (const char *s = tmpl; *s && n < sizeof script - 300;) {
        if (!strncmp(s, "PROG", 4)) {
            n += (size_t)snprintf(script + n, sizeof script - n, "%s", prog);
            s += 4;
        } else {
            script[n++] = *s++;
        }
    }
    script[n] = 0;

    int rc1, rc2;
    char *e1, *e2;
    char *o1 = run(script, "", &rc1, &e1);
    char env[1024];
    snprintf(env, sizeof env, "LD_PRELOAD=%s MOTE_MALLOC_STATS=json", MOTE_MALLOC_SO);
    char *o2 = run(script, env, &rc2, &e2);
    /* a program that sends its children's stderr to stdout gets their
     * stats there: count them and take them out before comparing */
    int stats = 0;
    for (char *bufs[2] = {o2, e2}, **b = bufs; b < bufs + 2; b++) {
        char *line;
        while ((line = strstr(*b, "{\"inuse\":")) != NULL) {
            char *end = strchr(line, '\n');
            end = end ? end + 1 : line + strlen(line);
            memmove(line, end, strlen(end) + 1);
            stats++;
        }
    }
    printf("%s: glibc rc=%d, %zu bytes of output; mote rc=%d, %zu bytes\n", name, rc1,
           strlen(o1), rc2, strlen(o2));
    if (rc1 != rc2 || strcmp(o1, o2) != 0 || strlen(o1) == 0) {
        printf("---- glibc stdout\n%s\n---- glibc stderr\n%.2000s\n", o1, e1);
        printf("---- mote stdout\n%s\n---- mote stderr\n%.2000s\n", o2, e2);
        return 1;
    }
    CHECK(stats > 0); /* mote really was the malloc */
    CHECK(strstr(e2, "invalid pointer") == NULL);
    printf("%s: same output under mote\n", name);
    return 0;
}

static int outer_self(const char *self)
{
    int rc;
    char *err;
    char script[1024], env[1024];
    snprintf(script, sizeof script, "exec %s inner\n", self);
    snprintf(env, sizeof env, "LD_PRELOAD=%s", MOTE_MALLOC_SO);
    char *out = run(script, env, &rc, &err);
    if (rc != 0 || !strstr(out, "inner ok")) {
        printf("inner failed rc=%d\n%s\n%s\n", rc, out, err);
        return 1;
    }
    /* stats at exit, text and json (on stderr: a program that closes it at
     * exit, like coreutils, gets none) */
    snprintf(env, sizeof env, "LD_PRELOAD=%s MOTE_MALLOC_STATS=1", MOTE_MALLOC_SO);
    run(script, env, &rc, &err);
    CHECK_EQ(rc, 0);
    CHECK(strstr(err, "mote malloc stats") && strstr(err, "mapped bytes"));
    snprintf(env, sizeof env, "LD_PRELOAD=%s MOTE_MALLOC_STATS=json", MOTE_MALLOC_SO);
    run(script, env, &rc, &err);
    CHECK(strstr(err, "{\"inuse\":") && strstr(err, "\"classes\":["));
    /* an invalid setting: reported, ignored, the program still runs */
    snprintf(env, sizeof env, "LD_PRELOAD=%s MOTE_MALLOC_DECAY_MS=soon", MOTE_MALLOC_SO);
    out = run("echo hi", env, &rc, &err);
    CHECK_EQ(rc, 0);
    CHECK(strstr(out, "hi") != NULL);
    CHECK(strstr(err, "mote: MOTE_MALLOC_DECAY_MS=\"soon\"") != NULL);
    snprintf(env, sizeof env, "LD_PRELOAD=%s MOTE_MEMLIMIT=12Q", MOTE_MALLOC_SO);
    run("echo hi", env, &rc, &err);
    CHECK(strstr(err, "mote: MOTE_MEMLIMIT=\"12Q\"") != NULL);
    /* a hard limit makes allocation fail cleanly, not crash */
    snprintf(env, sizeof env, "LD_PRELOAD=%s MOTE_MEMLIMIT=64M", MOTE_MALLOC_SO);
    out = run(
        "/usr/bin/python3 -c '\ntry:\n    x = bytearray(200 << 20)\nexcept MemoryError:\n"
        "    print(\"nomem\")\n'\n",
        env, &rc, &err);
    if (access("/usr/bin/python3", X_OK) == 0)
        CHECK(strstr(out, "nomem") != NULL);
    printf("preload: API, dlopen, stats, bad settings and limit ok\n");
    return 0;
}

/* Creates the scratch directory of a case; false when the case cannot run
 * here (why says so). */
static int preload_setup(const char **why)
{
    if (TEST_SANITIZED) {
        *why = "sanitizer build: the sanitizer owns malloc, LD_PRELOAD cannot work";
        return 0;
    }
    if (access(MOTE_MALLOC_SO, R_OK) != 0) {
        fprintf(stderr, "libmote-malloc.so not found at %s\n", MOTE_MALLOC_SO);
        CHECK(0);
    }
    snprintf(work, sizeof work, "/tmp/mote-preload-%d", (int)getpid());
    mkdir(work, 0700);
    return 1;
}

static void preload_cleanup(void)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", work);
    sh(cmd);
}

TEST(malloc_api_dlopen_stats_settings_and_limit_under_preload)
{
    const char *why = NULL;
    if (!preload_setup(&why))
        TEST_SKIP(why);
    char self[512];
    ssize_t k = readlink("/proc/self/exe", self, sizeof self - 1);
    CHECK(k > 0);
    self[k] = 0;
    int rc = outer_self(self);
    preload_cleanup();
    CHECK_EQ(rc, 0);
}

/* The program's case: same output under glibc and under mote. */
#define PROGRAM_CASE(name)                       \
    do {                                         \
        const char *why = NULL;                  \
        if (!preload_setup(&why))                \
            TEST_SKIP(why);                      \
        int rc = outer_program(name);            \
        preload_cleanup();                       \
        if (rc == 77)                            \
            TEST_SKIP(name " is not installed"); \
        CHECK_EQ(rc, 0);                         \
    } while (0)

TEST(python3_gives_the_same_output_under_mote) { PROGRAM_CASE("python3"); }
TEST(sqlite3_gives_the_same_output_under_mote) { PROGRAM_CASE("sqlite3"); }
TEST(git_gives_the_same_output_under_mote) { PROGRAM_CASE("git"); }
TEST(cmake_gives_the_same_output_under_mote) { PROGRAM_CASE("cmake"); }

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "inner"))
        return inner();
    return test_harness_main(argc, argv);
}
