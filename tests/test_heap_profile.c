/*
 * test_heap_profile.c - the sampling heap profiler.  A child process with
 * MOTE_HEAPPROFILE set allocates at known sites (sizes in four size
 * ranges: small, bitmap, large, huge; some kept, some freed), and `go tool
 * pprof -top` must name those functions with in-use and allocated bytes
 * within 10% of the truth - through mote_malloc (libmote) and through plain
 * malloc in a program under LD_PRELOAD=libmote-malloc.so.  Also: the
 * profile is written at exit (%p becomes the pid) and on
 * MOTE_HEAPPROFILE_SIGNAL's signal, an invalid rate stops mote_run, threads
 * sampling while profiles are written (TSan), and mote_heap_profile_write
 * without the profiler says -ENODATA.
 *
 * The pprof cases exit 77 (skip) when `go` is not installed; the
 * LD_PRELOAD case also in sanitizer builds (the sanitizer owns malloc).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "mote.h"

static char self[PATH_MAX], dir[256];

static pid_t dir_owner;

/* The work directory is flat (profiles, a FIFO, a compiled program).  It
 * goes at a normal exit; a failed CHECK aborts and leaves it to be read. */
static void remove_dir(void)
{
    if (getpid() != dir_owner)
        return;
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
            unlinkat(dirfd(d), e->d_name, 0);
    closedir(d);
    rmdir(dir);
}

static void find_self(void)
{
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    CHECK(n > 0);
    self[n] = 0;
    if (dir[0])
        return;
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/mote-prof-test.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    CHECK(mkdtemp(dir) != NULL);
    dir_owner = getpid();
    atexit(remove_dir);
}

static int have_go(void) { return system("go version >/dev/null 2>&1") == 0; }

/* A child's command: `prog arg` with extra environment (name, value pairs,
 * NULL-ended) and MOTE_TEST_CHILD set. */
typedef struct child_cmd {
    const char *const *env;
    const char *prog, *arg;
} child_cmd;

/* The child's side: never returns. */
static void child_exec(void *arg)
{
    const child_cmd *c = arg;
    for (int i = 0; c->env[i]; i += 2)
        setenv(c->env[i], c->env[i + 1], 1);
    setenv("MOTE_TEST_CHILD", "1", 1);
    execl(c->prog, c->prog, c->arg, (char *)NULL);
    _exit(126);
}

static int exit_code(int st)
{
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Runs `self case` (or `prog`) with extra environment; returns its exit code. */
static int run_child(const char *const *env, const char *prog, const char *arg)
{
    child_cmd c = {env, prog, arg};
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0)
        child_exec(&c);
    int st;
    CHECK(waitpid(pid, &st, 0) == pid);
    return exit_code(st);
}

/* run_child, with the child's stderr read into err (NUL-terminated). */
static int run_child_err(const char *const *env, const char *prog, const char *arg,
                         char *err, size_t len)
{
    child_cmd c = {env, prog, arg};
    return exit_code(test_fork_capture(child_exec, &c, err, len));
}

/* The child's report that it could not open path, with the reason for e. */
static void check_cannot_open(const char *err, const char *path, int e)
{
    char want[PATH_MAX + 400];
    snprintf(want, sizeof want, "mote: MOTE_HEAPPROFILE: cannot open %s: %s\n", path,
             strerrordesc_np(e));
    if (!strstr(err, want))
        fprintf(stderr, "expected \"%s\", got: %s\n", want, err);
    CHECK(strstr(err, want) != NULL);
}

static int is_child(void) { return getenv("MOTE_TEST_CHILD") != NULL; }

/* ---- the allocation sites (the child's side) ---- */

typedef void *(*alloc_fn)(size_t);
typedef void (*free_fn)(void *);
static alloc_fn A;
static free_fn F;
static void *volatile kept[400000];
static int nkept;

__attribute__((noinline)) void site_small_kept(void)
{
    for (int i = 0; i < 20000; i++) { /* 20,000,000 B in use */
        void *p = A(1000);
        memset(p, 1, 1000);
        kept[nkept++] = p;
    }
}

__attribute__((noinline)) void site_bitmap_kept(void)
{
    for (int i = 0; i < 1500; i++) /* 1500 x 10000 = 15,000,000 B in use */
        kept[nkept++] = A(10000);
}

__attribute__((noinline)) void site_large_kept(void)
{
    for (int i = 0; i < 40; i++) /* 40 x 300,000 = 12,000,000 B in use */
        kept[nkept++] = A(300000);
}

__attribute__((noinline)) void site_huge_kept(void)
{
    for (int i = 0; i < 3; i++) /* 3 x 5,000,000 = 15,000,000 B in use */
        kept[nkept++] = A(5000000);
}

__attribute__((noinline)) void site_churn(void)
{
    for (int i = 0; i < 500000; i++) { /* 64,000,000 B allocated, all freed */
        void *volatile p = A(128);
        F(p);
    }
}

/* Allocations made after a thread's exit began (a key destructor runs
 * after the allocator's own: its key is older) are sampled as any other. */
static pthread_key_t dtor_key;

__attribute__((noinline)) void site_dtor_kept(void *arg)
{
    (void)arg;
    kept[nkept++] = A(100000); /* a bitmap block */
    kept[nkept++] = A(300000); /* a large block */
}

static void *dtor_thread(void *arg)
{
    F(A(64)); /* the thread has a cache, given back before our destructor runs */
    pthread_setspecific(dtor_key, arg);
    return NULL;
}

static void run_dtor_sites(void)
{
    CHECK_EQ(pthread_key_create(&dtor_key, site_dtor_kept), 0);
    for (int i = 0; i < 30; i++) { /* 30 x 400,000 = 12,000,000 B in use */
        pthread_t t;               /* one at a time: nkept is not atomic */
        CHECK_EQ(pthread_create(&t, NULL, dtor_thread, (void *)1), 0);
        pthread_join(t, NULL);
    }
}

/* Blocks of just under 128 KiB had no class for the sample's trailer and
 * were never sampled, at any rate. */
__attribute__((noinline)) void site_128k_kept(void)
{
    for (int i = 0; i < 100; i++) /* 100 x 131072 = 13,107,200 B in use */
        kept[nkept++] = A(131072);
}

/* An aligned block was recorded at its class's size (128 here), not the
 * size asked for (100). At 8K a 100-byte block is drawn with p = 1.2%:
 * 300,000 of them give ~3,600 samples, so 10% is six standard deviations
 * (100,000 gave 1,200, and 10% at 3.5 of them failed about one run in a
 * thousand). */
__attribute__((noinline)) void site_aligned_kept(void)
{
    for (int i = 0; i < 300000; i++) /* 300,000 x 100 = 30,000,000 B in use */
        kept[nkept++] = mote_aligned_alloc(64, 100);
}

static void run_sites(void)
{
    site_small_kept();
    site_bitmap_kept();
    site_large_kept();
    site_huge_kept();
    site_churn();
    run_dtor_sites();
    if (A == mote_malloc) {
        site_128k_kept();
        site_aligned_kept();
    }
}

/* (the program under LD_PRELOAD has the first five) */
static const struct {
    const char *fn;
    double inuse, alloc;
} truth[] = {
    {"site_small_kept", 20e6, 20e6},
    {"site_bitmap_kept", 15e6, 15e6},
    {"site_large_kept", 12e6, 12e6},
    {"site_huge_kept", 15e6, 15e6},
    {"site_churn", 0, 64e6},
    {"site_dtor_kept", 12e6, 12e6},
    {"site_128k_kept", 13107200, 13107200},
    {"site_aligned_kept", 30e6, 30e6},
};

/* Child mode: allocate, then write the profile on demand to $PROF_OUT (and
 * at exit to MOTE_HEAPPROFILE). */
static void child_sites(alloc_fn a, free_fn f)
{
    A = a;
    F = f;
    run_sites();
    int fd = open(getenv("PROF_OUT"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0);
    CHECK_EQ(mote_heap_profile_write(fd), 0);
    close(fd);
    for (int i = 0; i < nkept; i++) /* the profile at exit shows them freed */
        F(kept[i]);
    exit(0);
}

/* ---- reading pprof's answer ---- */

/* Bytes pprof -top attributes to fn (flat), for sample index idx. */
static double pprof_bytes(const char *bin, const char *prof, const char *idx,
                          const char *fn)
{
    char cmd[3 * PATH_MAX];
    snprintf(cmd, sizeof cmd,
             "go tool pprof -top -unit=B -sample_index=%s '%s' '%s' 2>&1", idx, bin,
             prof);
    FILE *p = popen(cmd, "r");
    CHECK(p != NULL);
    char line[1024];
    double v = 0;
    int seen = 0;
    while (fgets(line, sizeof line, p)) {
        char name[256];
        double flat;
        if (sscanf(line, " %lfB %*s %*s %*s %*s %255s", &flat, name) == 2 &&
            !strcmp(name, fn)) {
            v = flat;
            seen = 1;
        }
    }
    pclose(p);
    if (!seen && strcmp(idx, "inuse_space")) {
        fprintf(stderr, "pprof did not name %s (%s); its output:\n", fn, idx);
        snprintf(cmd, sizeof cmd, "go tool pprof -top -sample_index=%s '%s' '%s' >&2",
                 idx, bin, prof);
        (void)!system(cmd);
    }
    return v;
}

static void check_profile(const char *bin, const char *prof, size_t nsites)
{
    for (size_t i = 0; i < nsites; i++) {
        double in = pprof_bytes(bin, prof, "inuse_space", truth[i].fn);
        double al = pprof_bytes(bin, prof, "alloc_space", truth[i].fn);
        fprintf(stderr,
                "%-18s in use %12.0f (true %12.0f)  allocated %12.0f (true %12.0f)\n",
                truth[i].fn, in, truth[i].inuse, al, truth[i].alloc);
        if (truth[i].inuse)
            CHECK(in >= truth[i].inuse * 0.9 && in <= truth[i].inuse * 1.1);
        else
            CHECK(in <= 0.01 * truth[i].alloc);
        CHECK(al >= truth[i].alloc * 0.9 && al <= truth[i].alloc * 1.1);
    }
}

static int file_starts_with(const char *path, const char *s, size_t len)
{
    char buf[64] = {0};
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    return n >= (ssize_t)len && !memcmp(buf, s, len);
}

/* A profile: a gzip member (its magic, deflate). */
#define IS_PROFILE(path) file_starts_with(path, "\x1f\x8b\x08", 3)

/* ---- cases ---- */

TEST(child_libmote_sites)
{
    if (is_child())
        child_sites(mote_malloc, mote_free);
}

TEST(pprof_names_the_sites_with_their_sizes)
{
    if (!have_go()) {
        fprintf(stderr, "go is not installed: skipped\n");
        exit(77);
    }
    find_self();
    char out[PATH_MAX + 300], atexit_path[PATH_MAX + 300];
    snprintf(out, sizeof out, "%s/on-demand.heap", dir);
    snprintf(atexit_path, sizeof atexit_path, "%s/at-exit.%%p.heap", dir);
    const char *env[] = {"MOTE_HEAPPROFILE",
                         atexit_path,
                         "MOTE_HEAPPROFILE_RATE",
                         "8K",
                         "PROF_OUT",
                         out,
                         NULL};
    CHECK_EQ(run_child(env, self, "child_libmote_sites"), 0);
    CHECK(IS_PROFILE(out));
    check_profile(self, out, sizeof truth / sizeof *truth);
}

/* An unmodified program (compiled here: the test binary itself carries
 * libmote's own heap), its malloc replaced with LD_PRELOAD. */
static const char preload_prog[] =
    "#include <dlfcn.h>\n#include <fcntl.h>\n#include <stdlib.h>\n#include <string.h>\n"
    "#include <unistd.h>\n"
    "static void *volatile kept[60000]; static int nkept;\n"
    "__attribute__((noinline)) void site_small_kept(void) { for (int i = 0; i < 20000; "
    "i++) "
    "{ void *p = malloc(1000); memset(p, 1, 1000); kept[nkept++] = p; } }\n"
    "__attribute__((noinline)) void site_bitmap_kept(void) { for (int i = 0; i < 1500; "
    "i++) "
    "kept[nkept++] = malloc(10000); }\n"
    "__attribute__((noinline)) void site_large_kept(void) { for (int i = 0; i < 40; i++) "
    "kept[nkept++] = calloc(1, 300000); }\n"
    "__attribute__((noinline)) void site_huge_kept(void) { for (int i = 0; i < 3; i++) "
    "kept[nkept++] = realloc(NULL, 5000000); }\n"
    "__attribute__((noinline)) void site_churn(void) { for (int i = 0; i < 500000; i++) "
    "{ void *volatile p = malloc(128); free(p); } }\n"
    "int main(int argc, char **argv) {\n"
    "  (void)argc; site_small_kept(); site_bitmap_kept(); site_large_kept(); "
    "site_huge_kept(); site_churn();\n"
    "  int (*w)(int) = (int (*)(int))dlsym(RTLD_DEFAULT, \"mote_heap_profile_write\");\n"
    "  if (!w) return 3;\n"
    "  int fd = open(argv[1], O_WRONLY | O_CREAT | O_TRUNC, 0644);\n"
    "  if (fd < 0 || w(fd) != 0) return 4;\n"
    "  close(fd);\n"
    "  for (int i = 0; i < nkept; i++) free(kept[i]);\n"
    "  return 0;\n}\n";

TEST(pprof_names_the_sites_of_a_program_under_ld_preload)
{
    if (TEST_SANITIZED) {
        fprintf(stderr, "sanitizer build: its malloc cannot be replaced: skipped\n");
        exit(77);
    }
    if (!have_go() || system("cc --version >/dev/null 2>&1") != 0) {
        fprintf(stderr, "go or cc is not installed: skipped\n");
        exit(77);
    }
    find_self();
    char so[PATH_MAX + 300], src[PATH_MAX + 300], prog[PATH_MAX + 300], cmd[3 * PATH_MAX];
    snprintf(so, sizeof so, "%s", self);
    *strrchr(so, '/') = 0;
    strcat(so, "/../libmote-malloc.so");
    CHECK(access(so, R_OK) == 0);
    snprintf(src, sizeof src, "%s/prog.c", dir);
    snprintf(prog, sizeof prog, "%s/prog", dir);
    FILE *f = fopen(src, "w");
    CHECK(f != NULL);
    fputs(preload_prog, f);
    fclose(f);
    /* Not position-independent: the map's offset of its code is then not
     * its address less its base (the old text format made pprof misplace
     * every address of such a program, and name nothing). */
    snprintf(cmd, sizeof cmd,
             "cc -O2 -g -fno-omit-frame-pointer -fno-builtin -no-pie -o '%s' '%s' -ldl",
             prog, src);
    CHECK(system(cmd) == 0);
    char out[PATH_MAX + 300], atexit_path[PATH_MAX + 300];
    snprintf(out, sizeof out, "%s/preload.heap", dir);
    snprintf(atexit_path, sizeof atexit_path, "%s/preload-exit.heap", dir);
    const char *env[] = {
        "LD_PRELOAD", so,  "MOTE_HEAPPROFILE", atexit_path, "MOTE_HEAPPROFILE_RATE",
        "8K",         NULL};
    CHECK_EQ(run_child(env, prog, out), 0);
    check_profile(prog, out, 5);
    /* the profile at exit: the kept blocks were freed by then */
    CHECK(IS_PROFILE(atexit_path));
    double in = pprof_bytes(prog, atexit_path, "inuse_space", "site_small_kept");
    double al = pprof_bytes(prog, atexit_path, "alloc_space", "site_small_kept");
    CHECK(in < 0.01 * 20e6);
    CHECK(al >= 0.9 * 20e6 && al <= 1.1 * 20e6);
}

TEST(child_exit_only)
{
    if (is_child()) {
        for (int i = 0; i < 1000; i++)
            mote_free(mote_malloc(4000));
        exit(0);
    }
}

TEST(profile_is_written_at_exit_with_the_pid_in_its_name)
{
    find_self();
    char path[PATH_MAX + 300];
    snprintf(path, sizeof path, "%s/pid.%%p.heap", dir);
    const char *env[] = {"MOTE_HEAPPROFILE", path, "MOTE_HEAPPROFILE_RATE", "4K", NULL};
    child_cmd c = {env, self, "child_exit_only"};
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0)
        child_exec(&c);
    int st;
    CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    char want[PATH_MAX + 300];
    snprintf(want, sizeof want, "%s/pid.%d.heap", dir, (int)pid);
    CHECK(IS_PROFILE(want));
}

/* ---- profiles on a signal (MOTE_HEAPPROFILE_SIGNAL) ---- */

enum { SIG_BLOCKS = 2000, SIG_SIZE = 4000 };
static void *volatile sig_kept[SIG_BLOCKS];

__attribute__((noinline)) void site_signal_kept(void)
{
    for (int i = 0; i < SIG_BLOCKS; i++) {
        sig_kept[i] = mote_malloc(SIG_SIZE);
        CHECK(sig_kept[i] != NULL);
        memset(sig_kept[i], 1, SIG_SIZE);
    }
}

static bool scavenger_runs(void)
{
    DIR *d = opendir("/proc/self/task");
    CHECK(d != NULL);
    bool found = false;
    struct dirent *e;
    while (!found && (e = readdir(d))) {
        char path[300], comm[32] = {0};
        snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
        int fd = open(path, O_RDONLY);
        if (fd < 0)
            continue;
        found = read(fd, comm, sizeof comm - 1) > 0 && !strcmp(comm, "mote-scavenger\n");
        close(fd);
    }
    closedir(d);
    return found;
}

/* Waits (10 s at most) for the profile the signal asked for. */
static void wait_for_profile(const char *path)
{
    for (int i = 0; i < 10000 && !IS_PROFILE(path); i++)
        usleep(1000);
    CHECK(IS_PROFILE(path));
}

TEST(child_on_signal)
{
    if (!is_child())
        return;
    char base[PATH_MAX], p1[PATH_MAX + 8], p2[PATH_MAX + 8];
    snprintf(base, sizeof base, "%s", getenv("MOTE_HEAPPROFILE"));
    snprintf(p1, sizeof p1, "%s.1", base);
    snprintf(p2, sizeof p2, "%s.2", base);
    site_signal_kept();
    /* Nothing was freed yet: no scavenger, the handler writes. */
    bool by_handler = !scavenger_runs();
    CHECK_EQ(raise(SIGUSR1), 0);
    if (by_handler)
        CHECK(IS_PROFILE(p1)); /* written before raise returned */
    wait_for_profile(p1);
    /* Freed pages start the scavenger, which then writes them. */
    for (int i = 0; i < SIG_BLOCKS; i++)
        mote_free(sig_kept[i]);
    for (int i = 0; i < 10000 && !scavenger_runs(); i++)
        usleep(1000);
    CHECK(scavenger_runs());
    CHECK_EQ(raise(SIGUSR1), 0);
    wait_for_profile(p2);
    fprintf(stderr, "first profile written by the %s, second by the scavenger\n",
            by_handler ? "handler" : "scavenger");
    exit(0);
}

TEST(a_signal_writes_a_numbered_profile_and_the_program_goes_on)
{
    find_self();
    char base[PATH_MAX + 300], p1[PATH_MAX + 310], p2[PATH_MAX + 310];
    snprintf(base, sizeof base, "%s/signal.heap", dir);
    snprintf(p1, sizeof p1, "%s.1", base);
    snprintf(p2, sizeof p2, "%s.2", base);
    const char *env[] = {"MOTE_HEAPPROFILE",
                         base,
                         "MOTE_HEAPPROFILE_RATE",
                         "4K",
                         "MOTE_HEAPPROFILE_SIGNAL",
                         "usr1",
                         NULL};
    CHECK_EQ(run_child(env, self, "child_on_signal"), 0);
    CHECK(IS_PROFILE(p1) && IS_PROFILE(p2) && IS_PROFILE(base));
    if (!have_go()) {
        fprintf(stderr, "go is not installed: the profiles' contents are not read\n");
        return;
    }
    /* The first while the blocks lived, the second after their free. */
    double live = (double)SIG_BLOCKS * SIG_SIZE;
    double in1 = pprof_bytes(self, p1, "inuse_space", "site_signal_kept");
    double in2 = pprof_bytes(self, p2, "inuse_space", "site_signal_kept");
    double al2 = pprof_bytes(self, p2, "alloc_space", "site_signal_kept");
    fprintf(stderr, "in use %.0f then %.0f, allocated %.0f (true %.0f)\n", in1, in2, al2,
            live);
    CHECK(in1 >= 0.9 * live && in1 <= 1.1 * live);
    CHECK(in2 <= 0.01 * live);
    CHECK(al2 >= 0.9 * live && al2 <= 1.1 * live);
}

/* A signal that lands on a small task stack before any scavenger runs:
 * the write (~20 KiB of stack) would overflow it, so the handler leaves
 * it to the scavenger, which writes it once frees start it. */
static mote_wg sig_task_done = MOTE_WG_INIT;
static bool sig_scavenger_before;

static void sig_small_task(void *arg)
{
    (void)arg;
    sig_scavenger_before = scavenger_runs();
    CHECK_EQ(raise(SIGUSR1), 0);
    CHECK_EQ(mote_wg_done(&sig_task_done), 0);
}

static void sig_task_main(void *arg)
{
    const char *p1 = arg;
    site_signal_kept();
    mote_task_opts o = {.stack_size = 16 * 1024};
    CHECK_EQ(mote_wg_add(&sig_task_done, 1), 0);
    CHECK_EQ(mote_go_ex(sig_small_task, NULL, &o), 0);
    CHECK_EQ(mote_wg_wait(&sig_task_done), 0);
    if (!sig_scavenger_before)
        CHECK(!IS_PROFILE(p1)); /* not written on the task's stack */
    for (int i = 0; i < SIG_BLOCKS; i++)
        mote_free(sig_kept[i]);
    wait_for_profile(p1);
}

TEST(child_on_signal_in_a_task)
{
    if (!is_child())
        return;
    char p1[PATH_MAX + 8];
    snprintf(p1, sizeof p1, "%s.1", getenv("MOTE_HEAPPROFILE"));
    CHECK_EQ(mote_run(sig_task_main, p1), 0);
    fprintf(stderr, "a scavenger ran before the signal: %s\n",
            sig_scavenger_before ? "yes" : "no");
    exit(0);
}

TEST(a_signal_on_a_small_task_stack_leaves_the_write_to_the_scavenger)
{
    find_self();
    char base[PATH_MAX + 300], p1[PATH_MAX + 310];
    snprintf(base, sizeof base, "%s/task-signal.heap", dir);
    snprintf(p1, sizeof p1, "%s.1", base);
    const char *env[] = {"MOTE_HEAPPROFILE", base, "MOTE_HEAPPROFILE_SIGNAL", "usr1",
                         NULL};
    CHECK_EQ(run_child(env, self, "child_on_signal_in_a_task"), 0);
    CHECK(IS_PROFILE(p1));
}

TEST(a_profile_signal_without_the_profiler_or_a_bad_one_is_reported)
{
    find_self();
    char err[4096];
    const char *alone[] = {"MOTE_HEAPPROFILE_SIGNAL", "usr2", NULL};
    CHECK_EQ(run_child_err(alone, self, "child_exit_only", err, sizeof err), 0);
    if (!strstr(err, "MOTE_HEAPPROFILE_SIGNAL is set without MOTE_HEAPPROFILE"))
        fprintf(stderr, "got: %s\n", err);
    CHECK(strstr(err, "MOTE_HEAPPROFILE_SIGNAL is set without MOTE_HEAPPROFILE") != NULL);
    const char *bad[] = {"MOTE_HEAPPROFILE_SIGNAL", "kill", NULL};
    CHECK_EQ(run_child(bad, self, "child_run"), EINVAL);
    CHECK_EQ(run_child_err(bad, self, "child_exit_only", err, sizeof err), 0);
    CHECK(strstr(err, "MOTE_HEAPPROFILE_SIGNAL") != NULL);
}

static void quick(void *arg) { (void)arg; }

TEST(child_run)
{
    if (is_child())
        exit(-mote_run(quick, NULL));
}

TEST(an_invalid_rate_or_path_stops_mote_run)
{
    find_self();
    const char *bad_rate[] = {"MOTE_HEAPPROFILE_RATE", "0", NULL};
    CHECK_EQ(run_child(bad_rate, self, "child_run"), EINVAL);
    const char *bad_rate2[] = {"MOTE_HEAPPROFILE_RATE", "2G", NULL};
    CHECK_EQ(run_child(bad_rate2, self, "child_run"), EINVAL);
    const char *empty_path[] = {"MOTE_HEAPPROFILE", "", NULL};
    CHECK_EQ(run_child(empty_path, self, "child_run"), EINVAL);
    /* longer than a file name can be once "%p" is expanded: refused, with
     * a message, as any invalid value; 3999 bytes are taken */
    static char long_path[4001];
    memset(long_path, 'x', 4000);
    const char *too_long[] = {"MOTE_HEAPPROFILE", long_path, NULL};
    CHECK_EQ(run_child(too_long, self, "child_run"), EINVAL);
    char err[4096];
    CHECK_EQ(run_child_err(too_long, self, "child_exit_only", err, sizeof err), 0);
    CHECK(strstr(err, "MOTE_HEAPPROFILE=") && strstr(err, "is invalid"));
    long_path[3999] = 0;
    CHECK_EQ(run_child(too_long, self, "child_run"), 0);
    const char *good[] = {"MOTE_HEAPPROFILE_RATE", "64K", NULL};
    CHECK_EQ(run_child(good, self, "child_run"), 0);
}

TEST(without_the_profiler_there_is_no_profile)
{
    if (getenv("MOTE_HEAPPROFILE"))
        return;
    CHECK_EQ(mote_heap_profile_write(1), -ENODATA);
}

/* ---- threads sampling while profiles are written ---- */

static atomic_int churning;

static void *churn(void *arg)
{
    uint64_t s = (uintptr_t)arg * 0x9E3779B97F4A7C15ULL + 1;
    void *v[256] = {0};
    for (int i = 0; i < TEST_SCALE(400000, 20); i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        int k = (int)(s % 256);
        mote_free(v[k]);
        size_t n = (s >> 20) % 8 ? 16 + (s >> 24) % 3000 : 4097 + (s >> 24) % 200000;
        v[k] = mote_malloc(n);
        CHECK(v[k] != NULL);
        memset(v[k], 1, n < 64 ? n : 64);
        CHECK(mote_usable_size(v[k]) >= n);
        if ((s & 1023) == 0)
            v[k] = mote_realloc(v[k], n + 5000);
    }
    for (int k = 0; k < 256; k++)
        mote_free(v[k]);
    atomic_fetch_sub(&churning, 1);
    return NULL;
}

TEST(child_threads)
{
    if (!is_child())
        return;
    pthread_t t[3];
    atomic_store(&churning, 3);
    for (int i = 0; i < 3; i++)
        CHECK(pthread_create(&t[i], NULL, churn, (void *)(uintptr_t)(i + 1)) == 0);
    int fd = open("/dev/null", O_WRONLY);
    /* Writes while the threads sample, two at least.  (Not a fixed 50:
     * under gcc's TSan a write took 2.5 s, its ~1M relaxed loads of the
     * counters ~2.5 us each, and 48 of the 50 came after the threads had
     * ended: 126-145 s, the longest test of the CI.) */
    for (int i = 0; i < 50 && (i < 2 || atomic_load(&churning) > 0); i++) {
        CHECK_EQ(mote_heap_profile_write(fd), 0);
        usleep(2000);
    }
    close(fd);
    for (int i = 0; i < 3; i++)
        pthread_join(t[i], NULL);
    mote_mem_release();
    uint64_t inuse = 0;
    CHECK_EQ(mote_metric("/heap/inuse:bytes", &inuse), 0);
    CHECK(inuse < 256 * 1024);
    exit(0);
}

TEST(threads_sample_while_profiles_are_written)
{
    find_self();
    char path[PATH_MAX + 300];
    snprintf(path, sizeof path, "%s/threads.heap", dir);
    const char *env[] = {"MOTE_HEAPPROFILE", path, "MOTE_HEAPPROFILE_RATE", "2K", NULL};
    CHECK_EQ(run_child(env, self, "child_threads"), 0);
    CHECK(IS_PROFILE(path));
}

/* ---- realloc, signals, fork, odd paths and readers ---- */

/* A child with the profiler on: a huge buffer grown by realloc moves its
 * pages (mremap) as it does with the profiler off (it was copied at every
 * step: 64 s to grow to 128 MiB), and the profile counts what is in use. */
__attribute__((noinline)) void *site_grown(void)
{
    char *p = NULL;
    size_t n = 3u << 20;
    int moves = 0;
    while (n < (96u << 20)) {
        char *q = mote_realloc(p, n);
        CHECK(q != NULL);
        moves += p && q != p;
        q[n - 1] = 1;
        p = q;
        n += n / 50;
    }
    fprintf(stderr, "grown to %zu bytes, %d moves\n", n, moves);
    CHECK(moves < 20);
    return p;
}

TEST(child_realloc)
{
    if (!is_child())
        return;
    void *p = site_grown();
    size_t last = mote_usable_size(p);
    int fd = open(getenv("PROF_OUT"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0);
    CHECK_EQ(mote_heap_profile_write(fd), 0);
    close(fd);
    printf("%zu\n", last);
    exit(0);
}

/* Runs child case `child` profiled at rate, its profile written on
 * demand to out (dir/file). */
static void run_profiled(const char *child, const char *rate, const char *file, char *out,
                         size_t len)
{
    find_self();
    snprintf(out, len, "%s/%s", dir, file);
    const char *env[] = {
        "MOTE_HEAPPROFILE", out, "MOTE_HEAPPROFILE_RATE", rate, "PROF_OUT", out, NULL};
    CHECK_EQ(run_child(env, self, child), 0);
}

TEST(a_huge_buffer_grown_by_realloc_moves_its_pages_under_the_profiler)
{
    char out[PATH_MAX + 300];
    run_profiled("child_realloc", "8K", "realloc.heap", out, sizeof out);
    if (!have_go())
        return;
    double in = pprof_bytes(self, out, "inuse_space", "site_grown");
    fprintf(stderr, "site_grown in use %.0f\n", in);
    CHECK(in >= 90e6 && in <= 110e6); /* the last size, ~96-98 MiB */
}

/* Large blocks realloc keeps in place while their size changes: pprof
 * weighs a sample by the size it was drawn at, so each is drawn again at
 * its new size (a shrunk block kept its old size, then read its new one
 * with the old weight: 1.5x, then 1.15x its bytes). */
__attribute__((noinline)) void site_shrunk(void)
{
    for (int i = 0; i < 400; i++) { /* 400 x 400,000 = 160,000,000 B in use */
        void *p = mote_malloc(600000);
        CHECK(mote_realloc(p, 400000) == p); /* in place, or this means nothing */
        kept[nkept++] = p;
    }
}

__attribute__((noinline)) void site_grown_in_place(void)
{
    for (int i = 0; i < 400; i++) { /* 400 x 450,000 = 180,000,000 B in use */
        void *p = mote_malloc(400000);
        CHECK(mote_realloc(p, 450000) == p);
        kept[nkept++] = p;
    }
}

/* Small blocks too: a realloc that keeps one in place is its free and an
 * allocation of the new size (a sampled block kept the size it was drawn
 * at: 4000 -> 2100 read +90%; and one drawn now has no room for its
 * trailer in place, so it moves: 1000 -> 1020 read 0.5% of the truth,
 * since a sampled block, with less room, moved and lost its sample). */
__attribute__((noinline)) void site_small_shrunk(void)
{
    for (int i = 0; i < 50000; i++) { /* 50,000 x 2,100 = 105,000,000 B */
        void *p = mote_malloc(4000);
        kept[nkept++] = mote_realloc(p, 2100);
    }
}

__attribute__((noinline)) void site_small_grown(void)
{
    for (int i = 0; i < 100000; i++) { /* 100,000 x 1,020 = 102,000,000 B */
        void *p = mote_malloc(1000);
        kept[nkept++] = mote_realloc(p, 1020);
    }
}

TEST(child_resize)
{
    if (!is_child())
        return;
    site_shrunk();
    site_grown_in_place();
    site_small_shrunk();
    site_small_grown();
    int fd = open(getenv("PROF_OUT"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0);
    CHECK_EQ(mote_heap_profile_write(fd), 0);
    close(fd);
    exit(0);
}

TEST(blocks_resized_in_place_are_weighed_right)
{
    if (!have_go()) {
        fprintf(stderr, "go is not installed: skipped\n");
        exit(77);
    }
    char out[PATH_MAX + 300];
    run_profiled("child_resize", "32K", "resize.heap", out, sizeof out);
    double s = pprof_bytes(self, out, "inuse_space", "site_shrunk");
    double g = pprof_bytes(self, out, "inuse_space", "site_grown_in_place");
    fprintf(stderr, "in use: shrunk %.0f (true 160000000), grown %.0f (true 180000000)\n",
            s, g);
    CHECK(s >= 160e6 * 0.9 && s <= 160e6 * 1.1);
    CHECK(g >= 180e6 * 0.9 && g <= 180e6 * 1.1);
    s = pprof_bytes(self, out, "inuse_space", "site_small_shrunk");
    g = pprof_bytes(self, out, "inuse_space", "site_small_grown");
    fprintf(stderr,
            "in use: small shrunk %.0f (true 105000000), grown %.0f (true 102000000)\n",
            s, g);
    CHECK(s >= 105e6 * 0.9 && s <= 105e6 * 1.1);
    CHECK(g >= 102e6 * 0.9 && g <= 102e6 * 1.1);
    /* allocated: the mallocs and the reallocs, each an allocation */
    double a = pprof_bytes(self, out, "alloc_space", "site_small_grown");
    fprintf(stderr, "allocated: small grown %.0f (true 202000000)\n", a);
    CHECK(a >= 202e6 * 0.9 && a <= 202e6 * 1.1);
}

static atomic_int handler_writes, handler_busy;

static void write_in_handler(int sig)
{
    (void)sig;
    int saved = errno; /* a handler must not change what it interrupted */
    int fd = open("/dev/null", O_WRONLY);
    int r = mote_heap_profile_write(fd);
    CHECK(r == 0 || r == -EDEADLK); /* (its thread was writing one) */
    atomic_fetch_add(r ? &handler_busy : &handler_writes, 1);
    close(fd);
    errno = saved;
}

TEST(child_signal)
{
    if (!is_child())
        return;
    /* a profile on a signal, while the thread may be writing one (it
     * waited on itself, for good) */
    struct sigaction sa = {.sa_handler = write_in_handler, .sa_flags = SA_RESTART};
    CHECK_EQ(sigaction(SIGALRM, &sa, NULL), 0);
    struct itimerval it = {{0, 500}, {0, 500}};
    CHECK_EQ(setitimer(ITIMER_REAL, &it, NULL), 0);
    int fd = open("/dev/null", O_WRONLY);
    for (int i = 0; i < TEST_SCALE(2000, 10); i++)
        CHECK_EQ(mote_heap_profile_write(fd), 0);
    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &off, NULL);
    close(fd);
    fprintf(stderr, "profiles written in a handler: %d, refused: %d\n",
            atomic_load(&handler_writes), atomic_load(&handler_busy));
    CHECK(atomic_load(&handler_writes) + atomic_load(&handler_busy) > 0);
    /* a reader that went away: -EPIPE, and the process lives */
    int p[2];
    CHECK_EQ(pipe(p), 0);
    close(p[0]);
    CHECK_EQ(mote_heap_profile_write(p[1]), -EPIPE);
    close(p[1]);
    exit(0);
}

static void *slow_reader_writer(void *arg)
{
    return (void *)(intptr_t)mote_heap_profile_write((int)(intptr_t)arg);
}

TEST(child_fork)
{
    if (!is_child())
        return;
    /* a writer blocked on a reader that does not read yet: a fork waited
     * for it (and the reader was the child being forked) */
    int p[2];
    CHECK_EQ(pipe(p), 0);
    CHECK(fcntl(p[1], F_SETPIPE_SZ, 4096) > 0);
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, slow_reader_writer, (void *)(intptr_t)p[1]), 0);
    CHECK_EQ((intptr_t)test_fork_beside_a_blocked_writer(t, p[0]), 0);
    exit(0);
}

TEST(child_exit_beside_a_blocked_writer)
{
    if (!is_child())
        return;
    /* A thread writes a profile to a reader that never reads (the pipe is
     * full from the start), and the process exits meanwhile: the exit's
     * own profile waited for that writer, for good. */
    int p[2];
    CHECK_EQ(pipe(p), 0);
    CHECK(fcntl(p[1], F_SETPIPE_SZ, 4096) > 0);
    static char full[4096];
    CHECK_EQ(write(p[1], full, sizeof full), (ssize_t)sizeof full);
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, slow_reader_writer, (void *)(intptr_t)p[1]), 0);
    usleep(100 * 1000); /* (the writer is blocked by now, or soon) */
    alarm(20);          /* a hang ends the child, and fails the case */
    exit(0);
}

TEST(a_profile_on_a_signal_a_dead_reader_or_a_slow_one_is_no_trouble)
{
    find_self();
    const char *env[] = {"MOTE_HEAPPROFILE", "/dev/null", NULL};
    CHECK_EQ(run_child(env, self, "child_signal"), 0);
    CHECK_EQ(run_child(env, self, "child_fork"), 0);
    char err[4096];
    CHECK_EQ(
        run_child_err(env, self, "child_exit_beside_a_blocked_writer", err, sizeof err),
        0);
    if (!strstr(err, "another thread is still writing a profile"))
        fprintf(stderr, "got: %s\n", err);
    CHECK(strstr(err, "another thread is still writing a profile") != NULL);
}

TEST(child_proctitle)
{
    if (!is_child())
        return;
    for (int i = 0; i < 1000; i++)
        mote_free(mote_malloc(4000));
    /* as nginx and postgres do for their process title */
    char *v = getenv("MOTE_HEAPPROFILE");
    memset(v, 'x', strlen(v));
    alarm(20);
    exit(0);
}

TEST(the_profile_path_outlives_the_environment_and_odd_paths_are_refused)
{
    find_self();
    char path[PATH_MAX + 300];
    snprintf(path, sizeof path, "%s/title.heap", dir);
    unlink(path);
    const char *env[] = {"MOTE_HEAPPROFILE", path, "MOTE_HEAPPROFILE_RATE", "4K", NULL};
    CHECK_EQ(run_child(env, self, "child_proctitle"), 0);
    CHECK(IS_PROFILE(path));
    /* a FIFO nobody reads: a message, not an exit held for good */
    char fifo[PATH_MAX + 300];
    snprintf(fifo, sizeof fifo, "%s/fifo.heap", dir);
    unlink(fifo);
    CHECK_EQ(mkfifo(fifo, 0600), 0);
    const char *fenv[] = {"MOTE_HEAPPROFILE", fifo, NULL};
    char err[1024];
    CHECK_EQ(run_child_err(fenv, self, "child_exit_only", err, sizeof err), 0);
    check_cannot_open(err, fifo, ENXIO);
    /* a directory that is not there: the message says so */
    char nodir[PATH_MAX + 300];
    snprintf(nodir, sizeof nodir, "%s/no-such-dir/p.heap", dir);
    const char *denv[] = {"MOTE_HEAPPROFILE", nodir, NULL};
    CHECK_EQ(run_child_err(denv, self, "child_exit_only", err, sizeof err), 0);
    check_cannot_open(err, nodir, ENOENT);
    /* a path too long: refused (it was cut short and written elsewhere) */
    static char lng[4200];
    int n = snprintf(lng, sizeof lng, "%s/", dir);
    memset(lng + n, 'y', sizeof lng - 1 - (size_t)n);
    const char *lenv[] = {"MOTE_HEAPPROFILE", lng, NULL};
    CHECK_EQ(run_child(lenv, self, "child_exit_only"), 0);
    char cut[PATH_MAX + 300];
    snprintf(cut, sizeof cut, "%s/yyyy", dir);
    DIR *d = opendir(dir);
    CHECK(d != NULL);
    struct dirent *e;
    while ((e = readdir(d)))
        CHECK(strncmp(e->d_name, "yyyy", 4) != 0);
    closedir(d);
}

TEST_MAIN()
