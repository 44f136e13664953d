/*
 * check.h - the tests' assertion macros.  A failed CHECK prints where and
 * why and exits non-zero at once (tests run tasks on several threads, so a
 * failure must not depend on unwinding).  Tests scale their sizes down with
 * TEST_SCALE under sanitizers, which run 5-20x slower.
 */
#ifndef MOTE_TEST_CHECK_H
#define MOTE_TEST_CHECK_H

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
/* Divides a workload size under sanitizers. */
#define TEST_SCALE(n, div) (TEST_SANITIZED ? ((n) / (div) ? (n) / (div) : 1) : (n))

#define CHECK(cond)                                                          \
    do {                                                                     \
        if (!(cond)) {                                                       \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, \
                    #cond);                                                  \
            fflush(stderr);                                                  \
            _exit(1);                                                        \
        }                                                                    \
    } while (0)

#define CHECK_EQ(a, b)                                                       \
    do {                                                                     \
        long long check_a_ = (long long)(a), check_b_ = (long long)(b);      \
        if (check_a_ != check_b_) {                                          \
            fprintf(stderr, "%s:%d: CHECK failed: %s == %s (%lld vs %lld)\n", \
                    __FILE__, __LINE__, #a, #b, check_a_, check_b_);         \
            fflush(stderr);                                                  \
            _exit(1);                                                        \
        }                                                                    \
    } while (0)

#include <unistd.h>

#define TEST_PASS(name) printf("%s: ok\n", name)

#include <sys/wait.h>

/* Runs fn in a forked child with stderr captured into buf (NUL-ended);
 * returns the child's wait status. */
static inline int test_fork_capture(void (*fn)(void *), void *arg, char *buf,
                                    size_t len)
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

#endif
