/*
 * test_heap_fork.c - fork while other threads allocate and free (also
 * cross-thread): the child must be able to allocate, free blocks the
 * parent made, and exit cleanly, every time; the parent carries on.
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "heap/internal.h"
#include "mote.h"

static atomic_int stop;
static _Atomic(void *) cell[64];

static void *churner(void *arg)
{
    uint64_t s = (uintptr_t)arg * 0x9E3779B97F4A7C15ULL + 1;
    void *mine[256] = {0};
    while (!atomic_load(&stop)) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        size_t k = s % 256, n = 16 + (s >> 20) % 20000;
        if (mine[k]) {
            mote_free(mine[k]);
            mine[k] = NULL;
        } else {
            mine[k] = mote_malloc(n);
            CHECK(mine[k] != NULL);
            memset(mine[k], 7, n < 64 ? n : 64);
        }
        if ((s >> 40) % 8 == 0) {
            void *p = mote_malloc(64);
            void *q = atomic_exchange(&cell[(s >> 30) % 64], p);
            mote_free(q);
        }
    }
    for (int k = 0; k < 256; k++)
        mote_free(mine[k]);
    return NULL;
}

TEST(fork_while_threads_allocate_leaves_child_heap_usable)
{
    enum { T = 3 };
    pthread_t t[T];
    for (uintptr_t i = 0; i < T; i++)
        CHECK(pthread_create(&t[i], NULL, churner, (void *)i) == 0);
    char *keep = mote_malloc(1000);
    memset(keep, 'k', 1000);
    int forks = TEST_SCALE(200, 10);
    for (int i = 0; i < forks; i++) {
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) {
            /* child: only this thread exists; the heap must work */
            for (int k = 0; k < 1000; k++) {
                char *p = mote_malloc(16 + (size_t)k * 37);
                if (!p)
                    _exit(3);
                memset(p, 1, 16);
                mote_free(p);
            }
            void *big = mote_malloc(5 << 20);
            if (!big)
                _exit(4);
            memset(big, 1, 4096);
            mote_free(big);
            for (int k = 0; k < 1000; k++)
                if (keep[k] != 'k')
                    _exit(5);
            mote_free(keep);
            mote_mem_release();
            _exit(0);
        }
        int st;
        CHECK(waitpid(pid, &st, 0) == pid);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
            fprintf(stderr, "child %d: status %#x\n", i, st);
        CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    atomic_store(&stop, 1);
    for (int i = 0; i < T; i++)
        CHECK_EQ(pthread_join(t[i], NULL), 0);
    for (int i = 0; i < 64; i++)
        mote_free(atomic_exchange(&cell[i], NULL));
    mote_free(keep);
}

/* A thread printing the heap's statistics to a stderr nobody reads (a full
 * pipe) blocks in write(2); a fork then waited for it, for good (the
 * atfork handler took the printer's lock). */
static void *print_stats(void *arg)
{
    (void)arg;
    mote__stats_print(false);
    return NULL;
}

TEST(fork_does_not_wait_for_a_blocked_statistics_printer)
{
    int p[2];
    CHECK_EQ(pipe(p), 0);
    CHECK(fcntl(p[1], F_SETPIPE_SZ, 4096) > 0);
    int saved = dup(2);
    CHECK(saved >= 0);
    CHECK(dup2(p[1], 2) == 2);
    char fill[4096];
    memset(fill, 'x', sizeof fill);
    CHECK(fcntl(p[1], F_SETFL, O_NONBLOCK) == 0);
    while (write(p[1], fill, sizeof fill) > 0) /* full */
        ;
    CHECK(fcntl(p[1], F_SETFL, 0) == 0);
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, print_stats, NULL), 0);
    test_fork_beside_a_blocked_writer(t, p[0]);
    dup2(saved, 2);
    close(saved);
    close(p[0]);
    close(p[1]);
}

TEST_MAIN()
