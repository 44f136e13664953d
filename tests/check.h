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

#endif
