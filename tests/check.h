/*
 * check.h - the tests' assertion macros.  A failed CHECK prints where and
 * why and exits non-zero at once (tests run tasks on several threads, so a
 * failure must not depend on unwinding).  Tests scale their sizes down with
 * TEST_SCALE under sanitizers, which run 5-20x slower.
 */
#ifndef MOTE_TEST_CHECK_H
#define MOTE_TEST_CHECK_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define TEST_SANITIZED 1
#endif
#endif
#ifndef TEST_SANITIZED
#define TEST_SANITIZED 0
#endif
#if defined(__SANITIZE_THREAD__)
#define TEST_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TEST_TSAN 1
#endif
#endif
#ifndef TEST_TSAN
#define TEST_TSAN 0
#endif
/* Divides a workload size under sanitizers. */
#define TEST_SCALE(n, div) (TEST_SANITIZED ? ((n) / (div) ? (n) / (div) : 1) : (n))

#define CHECK(cond)                                                                  \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
            fflush(stderr);                                                          \
            _exit(1);                                                                \
        }                                                                            \
    } while (0)

#define CHECK_EQ(a, b)                                                                  \
    do {                                                                                \
        long long check_a_ = (long long)(a), check_b_ = (long long)(b);                 \
        if (check_a_ != check_b_) {                                                     \
            fprintf(stderr, "%s:%d: CHECK failed: %s == %s (%lld vs %lld)\n", __FILE__, \
                    __LINE__, #a, #b, check_a_, check_b_);                              \
            fflush(stderr);                                                             \
            _exit(1);                                                                   \
        }                                                                               \
    } while (0)

#include <errno.h>
#include <sys/wait.h>
#include <unistd.h>

#define TEST_PASS(name) printf("%s: ok\n", name)

/*
 * Test cases.  A file defines its cases with
 *     TEST(name) { ... }        runs on the test's main thread;
 *     TEST_TASK(name) { ... }   runs as the main task of a fresh mote_run,
 *                               which must return 0;
 * optionally TEST_SETUP { ... } (run before each case), and ends with
 * TEST_MAIN().  CMake registers one ctest per case ("file.case", found by
 * matching these macros at the start of a line), run as `file case`;
 * `file` alone runs every case in order, `file --list` lists them.
 *
 * TEST_SKIP("why") in a case's body ends it as skipped: exit status 77
 * (ctest's SKIP) when the case runs alone, a note when every case runs.
 */
#include "mote.h"

typedef struct test_case {
    const char *name;
    void (*fn)(void);
    int in_task;
} test_case;

#define TEST_MAX_CASES 256
static test_case test_cases[TEST_MAX_CASES];
static int test_ncases;
static const char *test_skip_why;

#define TEST_SKIP(why)         \
    do {                       \
        test_skip_why = (why); \
        return;                \
    } while (0)
static void (*test_setup_hook)(void);
static void (*test_task_fn)(void);

static inline void test_register(const char *name, void (*fn)(void), int in_task)
{
    if (test_ncases == TEST_MAX_CASES) {
        fprintf(stderr, "too many test cases\n");
        _exit(2);
    }
    test_cases[test_ncases++] = (test_case){name, fn, in_task};
}

#define TEST_DEFINE_(name, in_task)                                \
    static void name(void);                                        \
    __attribute__((constructor)) static void test_reg_##name(void) \
    {                                                              \
        test_register(#name, name, in_task);                       \
    }                                                              \
    static void name(void)
#define TEST(name)      TEST_DEFINE_(name, 0)
#define TEST_TASK(name) TEST_DEFINE_(name, 1)
#define TEST_SETUP                                                \
    static void test_setup_fn(void);                              \
    __attribute__((constructor)) static void test_setup_reg(void) \
    {                                                             \
        test_setup_hook = test_setup_fn;                          \
    }                                                             \
    static void test_setup_fn(void)

static inline void test_task_trampoline(void *arg)
{
    (void)arg;
    test_task_fn();
}

/* A case that hangs in CI is killed by ctest with nothing to show why.
 * With MOTE_TEST_WATCHDOG=secs (set by tests/CMakeLists.txt a little
 * under ctest's timeout), a grandchild forked before the case starts (so
 * it holds none of the case's descriptors, and is no child a case could
 * reap) waits on the case's process; if it is still running after secs,
 * it prints every thread's backtrace (gdb, when installed) and kills it. */
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
static inline void test_watchdog_start(const char *name)
{
    const char *e = getenv("MOTE_TEST_WATCHDOG");
    long secs = e ? atol(e) : 0;
    if (secs <= 0)
        return;
    pid_t target = getpid();
    fflush(stdout);
    fflush(stderr);
    pid_t p = fork();
    if (p != 0) {
        if (p > 0)
            while (waitpid(p, NULL, 0) < 0 && errno == EINTR) {
            }
        return;
    }
    if (fork() != 0)
        _exit(0);
    int pfd = (int)syscall(SYS_pidfd_open, target, 0);
    if (pfd < 0)
        _exit(0);
    struct pollfd x = {.fd = pfd, .events = POLLIN};
    int r;
    while ((r = poll(&x, 1, (int)(secs * 1000))) < 0 && errno == EINTR) {
    }
    if (r != 0)
        _exit(0); /* the case ended */
    char pid[24];
    snprintf(pid, sizeof pid, "%d", (int)target);
    dprintf(2, "\n*** watchdog: %s (pid %s) still running after %ld s; its threads:\n",
            name, pid, secs);
    pid_t g = fork();
    if (g == 0) {
        dup2(2, 1);
        execlp("gdb", "gdb", "-batch", "-nx", "-p", pid, "-ex", "info threads", "-ex",
               "thread apply all bt", (char *)NULL);
        dprintf(2, "*** watchdog: no gdb to show them\n");
        _exit(127);
    }
    if (g > 0)
        waitpid(g, NULL, 0);
    syscall(SYS_pidfd_send_signal, pfd, SIGKILL, NULL, 0); /* (not a reused pid) */
    _exit(0);
}

static inline int test_harness_main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "--list")) {
        for (int i = 0; i < test_ncases; i++)
            printf("%s\n", test_cases[i].name);
        return 0;
    }
    if (argc > 1)
        test_watchdog_start(argv[1]);
    int ran = 0;
    for (int i = 0; i < test_ncases; i++) {
        const test_case *c = &test_cases[i];
        if (argc > 1 && strcmp(argv[1], c->name))
            continue;
        if (test_setup_hook)
            test_setup_hook();
        if (c->in_task) {
            test_task_fn = c->fn;
            int r = mote_run(test_task_trampoline, NULL);
            if (r != 0) {
                fprintf(stderr, "%s: mote_run returned %d (%s)\n", c->name, r,
                        mote_strerror(r));
                return 1;
            }
        } else {
            c->fn();
        }
        if (test_skip_why) {
            printf("%s: skipped: %s\n", c->name, test_skip_why);
            fflush(stdout);
            test_skip_why = NULL;
            if (argc > 1)
                return 77;
            continue;
        }
        printf("%s: ok\n", c->name);
        fflush(stdout);
        ran++;
    }
    if (argc > 1 && !ran) {
        fprintf(stderr, "no test case named %s\n", argv[1]);
        return 2;
    }
    return 0;
}

#define TEST_MAIN() \
    int main(int argc, char **argv) { return test_harness_main(argc, argv); }

#include <sys/wait.h>

/* Runs fn in a forked child with stderr captured into buf (NUL-ended);
 * returns the child's wait status. */
static inline int test_fork_capture(void (*fn)(void *), void *arg, char *buf, size_t len)
{
    int p[2];
    CHECK(pipe(p) == 0);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        close(p[0]);
        dup2(p[1], 2);
        fn(arg);
        _exit(0);
    }
    close(p[1]);
    size_t n = 0;
    ssize_t r;
    while (n + 1 < len && (r = read(p[0], buf + n, len - 1 - n)) > 0)
        n += (size_t)r;
    buf[n] = 0;
    char sink[256];
    while (read(p[0], sink, sizeof sink) > 0) {
    }
    close(p[0]);
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid);
    return status;
}

/* xorshift64: a cheap, seedable stream for test data (seed non-zero). */
static inline uint64_t test_rnd(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

/* Runs fn(arg) in a forked child and checks that the allocator aborted it
 * with its report of an invalid pointer given to free (a double free, a
 * pointer inside a block...).  Not under sanitizers, which own free: there
 * it runs nothing and marks the calling case skipped, which the harness
 * reports when the case returns. */
static inline void test_expect_invalid_free(void (*fn)(void *), void *arg)
{
    if (TEST_SANITIZED)
        TEST_SKIP(
            "under a sanitizer, which owns free: mote's invalid-free checks are off");
    char buf[512];
    int st = test_fork_capture(fn, arg, buf, sizeof buf);
    if (!(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT) ||
        !strstr(buf, "mote: free(): invalid pointer 0x")) {
        fprintf(stderr, "expected an abort at an invalid free; child said: %s\n", buf);
        CHECK(0);
    }
}

#include <sys/resource.h>

/* Runs fn in a forked child whose address space may grow only room bytes
 * past what it maps now (RLIMIT_AS); returns fn's result as the child's
 * exit code, or -1 if the child did not exit. */
static inline int test_fork_with_address_space(int (*fn)(void), size_t room)
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        long pages = 0;
        FILE *f = fopen("/proc/self/statm", "r");
        if (!f || fscanf(f, "%ld", &pages) != 1)
            _exit(120);
        fclose(f);
        struct rlimit r;
        r.rlim_cur = r.rlim_max = (rlim_t)pages * (rlim_t)sysconf(_SC_PAGESIZE) + room;
        if (setrlimit(RLIMIT_AS, &r))
            _exit(121);
        _exit(fn());
    }
    int st = 0;
    CHECK_EQ(waitpid(pid, &st, 0), pid);
    if (!WIFEXITED(st))
        return -1;
    if (WEXITSTATUS(st))
        fprintf(stderr, "child exited %d\n", WEXITSTATUS(st));
    return WEXITSTATUS(st);
}

/* Thread t is blocked writing into a pipe nobody reads yet (rfd, its read
 * end): a fork must return meanwhile (20 s at most), and then the pipe is
 * drained until t is done; returns t's result. */
#include <fcntl.h>
#include <pthread.h>
static inline void *test_fork_beside_a_blocked_writer(pthread_t t, int rfd)
{
    usleep(100 * 1000); /* it fills the pipe and blocks */
    alarm(20);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0)
        _exit(0);
    int st;
    CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st));
    alarm(0);
    char buf[4096];
    void *ret = NULL;
    CHECK(fcntl(rfd, F_SETFL, O_NONBLOCK) == 0);
    for (;;) {
        if (read(rfd, buf, sizeof buf) > 0)
            continue;
        if (pthread_tryjoin_np(t, &ret) == 0)
            return ret;
        usleep(1000);
    }
}

/* A metric that must exist. */
static inline uint64_t test_metric(const char *name)
{
    uint64_t v = 0;
    if (mote_metric(name, &v) != 0) {
        fprintf(stderr, "no metric %s\n", name);
        _exit(1);
    }
    return v;
}

/* Waits (parking when called from a task) until cond holds; fails the test
 * when it still does not after secs seconds.  For conditions that a correct
 * runtime makes true soon: the bound is there only so that a bug fails
 * instead of hanging, so make it generous. */
#define WAIT_UNTIL(cond, secs)                                                      \
    do {                                                                            \
        int64_t wait_end_ = mote_now() + (int64_t)(secs)*1000000000;                \
        int64_t wait_ns_ = 50 * 1000; /* doubles up to 5 ms */                      \
        while (!(cond)) {                                                           \
            if (mote_now() > wait_end_) {                                           \
                fprintf(stderr, "%s:%d: still not true after %d s: %s\n", __FILE__, \
                        __LINE__, (int)(secs), #cond);                              \
                fflush(stderr);                                                     \
                _exit(1);                                                           \
            }                                                                       \
            if (mote_id())                                                          \
                mote_sleep(wait_ns_);                                               \
            else                                                                    \
                usleep((useconds_t)(wait_ns_ / 1000));                              \
            if (wait_ns_ < 5 * 1000 * 1000)                                         \
                wait_ns_ *= 2;                                                      \
        }                                                                           \
    } while (0)

/* Waits until at least n tasks (besides the caller) are blocked: they have
 * published their wait records, so what follows meets them blocked. */
static inline void test_wait_blocked(uint64_t n)
{
    WAIT_UNTIL(test_metric("/tasks/blocked:tasks") >= n, 60);
}

/* Calls mote_run(fn, arg) with var set to val (NULL: unset) and puts var
 * back as it was afterwards, so cases stay independent of their order. */
static inline int test_run_env(const char *var, const char *val, mote_fn fn, void *arg)
{
    const char *old = getenv(var);
    char *saved = old ? strdup(old) : NULL;
    if (val)
        setenv(var, val, 1);
    else
        unsetenv(var);
    int r = mote_run(fn, arg);
    if (saved) {
        setenv(var, saved, 1);
        free(saved);
    } else {
        unsetenv(var);
    }
    return r;
}

#endif
